//! `ecstack experiment eplog` end to end: bad arguments are refused before any work, and a tiny
//! Exp 4 on the emulated testbed reports rows whose counts follow from the schemes' designs, with
//! the per-client-count targets primary and the peak ones secondary.

use std::process::Command;

fn experiment(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(["experiment", "eplog"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn bad_arguments_get_one_line_and_nothing_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("results");
    let o = out.to_str().unwrap();
    for (args, names) in [
        (vec!["--exp", "9"], "--exp: 9"),
        (vec!["--exp", "4", "--settings", "9+0"], "--settings: 9+0"),
        (vec!["--exp", "4", "--settings", "six"], "--settings: 'six'"),
        (vec!["--exp", "4", "--schemes", "raid7"], "--schemes"),
        (vec!["--exp", "4", "--clients", "0"], "--clients: 0"),
        (vec!["--exp", "4", "--testbed", "cloud"], "--testbed"),
        (vec!["--scale", "2"], "--scale"),
    ] {
        let r = experiment(&[&args[..], &["--out", o]].concat());
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success(), "{args:?} was accepted");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(names), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} created {}", out.display());
    }
}

#[test]
fn tiny_exp4_on_the_emulated_testbed() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("results");
    let r = experiment(&[
        "--quick",
        "--scale",
        "0.0005",
        "--exp",
        "4",
        "--testbed",
        "paper",
        "--settings",
        "6+2",
        "--clients",
        "4",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let rows = v["paper"].as_array().unwrap();
    let row = |scheme: &str, clients: u64| {
        rows.iter()
            .find(|x| {
                x["trace"] == "FIN"
                    && x["scheme"] == scheme
                    && x["clients"] == clients
                    && x["commit"] == "nil"
                    && x["degraded"] == false
            })
            .unwrap_or_else(|| panic!("no FIN {scheme} row with {clients} clients"))
    };
    let f = |x: &serde_json::Value, k: &str| x[k].as_f64().unwrap();
    // eplog never pre-reads; md and pl read old data for every update.
    for c in [1, 4] {
        assert_eq!(f(row("eplog", c), "ssd_read_bytes"), 0.0);
        assert!(f(row("md", c), "ssd_read_bytes") > 0.0);
        assert!(f(row("pl", c), "ssd_read_bytes") > 0.0);
    }
    // One client: md pays data + parity reads and writes, pl a pre-read plus logging, eplog only
    // writes; the stripe buffer with 4 clients can only lower eplog's count.
    let ops = |s: &str, c: u64| f(row(s, c), "dev_ops_per_req");
    assert!(ops("eplog", 1) < ops("pl", 1) && ops("pl", 1) < ops("md", 1));
    assert!(ops("eplog", 4) <= ops("eplog", 1) + 1e-9);
    assert!(f(row("eplog-nosb", 4), "requests") > 0.0);
    // Exps 4b/4c ran: a degraded commit row exists for FIN.
    assert!(rows
        .iter()
        .any(|x| x["trace"] == "FIN" && x["degraded"] == true && f(x, "commits") >= 1.0));
    // The peak rows compare each scheme's best run over the client counts.
    let peak = |s: &str| {
        rows.iter()
            .filter(|x| {
                x["trace"] == "FIN"
                    && x["scheme"] == s
                    && x["commit"] == "nil"
                    && x["degraded"] == false
            })
            .map(|x| f(x, "requests_per_s"))
            .fold(0.0, f64::max)
    };
    let targets = v["targets"].as_array().unwrap();
    // Per-client-count rows are the primary figures and come first; the peak rows are secondary.
    let first_secondary = targets
        .iter()
        .position(|t| t["figure"] == "secondary")
        .expect("a secondary row");
    assert!(targets[..first_secondary]
        .iter()
        .all(|t| t["figure"] == "primary"));
    assert!(targets[first_secondary..]
        .iter()
        .all(|t| t["figure"] == "secondary"));
    assert!(targets
        .iter()
        .any(|t| t["what"] == "requests/s eplog / pl (EPLOG testbed emulated, 4 clients)"));
    let t = targets[first_secondary..]
        .iter()
        .find(|t| {
            t["what"]
                .as_str()
                .unwrap()
                .starts_with("requests/s eplog / pl, each at its peak")
        })
        .expect("a peak target row");
    let want = peak("eplog") / peak("pl");
    assert!((f(t, "ratio") - want).abs() < 1e-9 * want, "{t} vs {want}");
    for file in ["eplog.md", "eplog-perf-paper.csv", "exp4-paper-clients.svg"] {
        assert!(out.join(file).exists(), "{file} missing");
    }
}
