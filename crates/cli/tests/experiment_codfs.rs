//! `ecstack experiment codfs --exp model` at its smallest: M = 4 OSDs (RS 2+1, 1 MiB segments), two
//! clients of 2 MiB each, on an emulated network of namespaces with tc limits. It checks that the
//! namespace setup works (daemons in their namespaces reach each other through the bridge over
//! mTLS), that every phase ran (write, read, degraded read, recovery), that the ratios are
//! computed against the model, and that no namespace is left behind. Speed is not checked here:
//! the figures live in docs/benchmarks.md.
//!
//! Needs root and iproute2 (`ip`, `tc`): without them the test fails under CI=true or
//! ECSTACK_REQUIRE_CLIENTS=1 and otherwise says loudly that it skipped (`ecstack_testkit`).

use std::process::{Command, Stdio};

/// Whether the tools are here; without them a CI run fails and any other says loudly it skipped.
fn tools_or_skip() -> bool {
    use ecstack_testkit::{require, runs_with};
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc_geteuid() } == 0;
    require("ip", runs_with("ip", "-V"), "iproute2")
        && require("tc", runs_with("tc", "-V"), "iproute2")
        && require("root (the namespaces need it)", root, "sudo")
}

/// The smallest model run (M = 4, RS 2+1, 1 MiB segments, two clients, 200 Mbit/s) with `extra`
/// flags, its report (JSON) on stdout and files under `tmp`.
fn small_model(tmp: &std::path::Path, extra: &[&str]) -> Command {
    small_model_km(tmp, 1, extra)
}

/// [`small_model`] with k = 2 and `m` parity chunks.
fn small_model_km(tmp: &std::path::Path, m: u32, extra: &[&str]) -> Command {
    let m = m.to_string();
    let mut c = Command::new(env!("CARGO_BIN_EXE_ecstack"));
    c.args([
        "experiment",
        "codfs",
        "--exp",
        "model",
        "--osds",
        "4",
        "-k",
        "2",
        "-m",
        &m,
        "--segment-size",
        "1M",
        "--clients",
        "2",
        "--rate-mbit",
        "200",
        "--json",
    ])
    .args(extra)
    .arg("--out")
    .arg(tmp.join("out"))
    .arg("--dir")
    .arg(tmp.join("run"));
    c
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

fn our_namespaces(pid: u32) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("ecsb{pid}-")))
        .map(str::to_owned)
        .collect()
}

#[test]
fn model_experiment_runs_on_namespaces_and_computes_ratios() {
    if !tools_or_skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let child = small_model(tmp.path(), &["--size", "2M", "--down-after-ms", "1500"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ecstack failed: {stdout}");
    assert!(
        our_namespaces(pid).is_empty(),
        "namespaces left behind: {:?}",
        our_namespaces(pid)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["osds"], 4);
    // Every host runs CUBIC unless told otherwise (read back from a namespace).
    assert_eq!(r["tcp_cc"], "cubic", "{r}");
    // The model for M = 4, B = 25 MB/s, (n, k) = (3, 2): 100 / 2 = 50 MB/s write, 100 / 1.5 read.
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {r}"));
    assert!((f("write_model_mb_per_sec") - 50.0).abs() < 1e-9);
    assert!((f("read_model_mb_per_sec") - 100.0 / 1.5).abs() < 1e-9);
    for (measured, model, ratio) in [
        ("write_mb_per_sec", "write_model_mb_per_sec", "write_ratio"),
        ("read_mb_per_sec", "read_model_mb_per_sec", "read_ratio"),
    ] {
        assert!(f(measured) > 0.0);
        assert!((f(ratio) - f(measured) / f(model)).abs() < 1e-9, "{r}");
    }
    // B as the thesis took it: a bare TCP stream through the 200 Mbit/s tbf carries less than 25 MB/s
    // of payload (framing), but not much less; the second model and ratios follow from it.
    for b in ["goodput_in_mb_per_sec", "goodput_out_mb_per_sec"] {
        assert!(f(b) < 25.0 && f(b) > 20.0, "{b}: {r}");
    }
    assert!(
        (f("write_model_eff_mb_per_sec") - 4.0 * f("goodput_in_mb_per_sec") / 2.0).abs() < 1e-9
    );
    assert!(
        (f("read_model_eff_mb_per_sec") - 4.0 * f("goodput_out_mb_per_sec") / 1.5).abs() < 1e-9
    );
    for (measured, model, ratio) in [
        (
            "write_mb_per_sec",
            "write_model_eff_mb_per_sec",
            "write_ratio_eff",
        ),
        (
            "read_mb_per_sec",
            "read_model_eff_mb_per_sec",
            "read_ratio_eff",
        ),
    ] {
        assert!((f(ratio) - f(measured) / f(model)).abs() < 1e-9, "{r}");
    }
    assert!(f("degraded_read_mb_per_sec") > 0.0, "{r}");
    assert!(
        r["recovered_bytes"].as_u64().unwrap() > 0,
        "recovery rebuilt nothing: {r}"
    );
    for file in ["codfs-model.md", "codfs-model.csv", "codfs-model.svg"] {
        assert!(tmp.path().join("out").join(file).is_file(), "{file}");
    }
}

/// `--stream`: clients stream for a fixed time and the figure is the window from a quarter of it
/// to its end. The bytes counted are acknowledged ones: counting a put's input (which runs a window
/// of segments ahead) or double-counting would put a ratio above the model.
#[test]
fn streams_are_measured_while_every_client_is_active() {
    if !tools_or_skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // RDP 2+2 (p = 3): the seed's §5.1 code on the cluster end to end.
    let out = small_model_km(
        tmp.path(),
        2,
        &[
            "--size",
            "3M",
            "--stream",
            "8",
            "--no-failures",
            "--tcp-cc",
            "reno",
            // The seed's §5.1 code, on the cluster end to end (its chunks a multiple of p − 1).
            "--code",
            "rdp",
        ],
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ecstack failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["stream_secs"], 8.0);
    let r = &report["rows"][0];
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {r}"));
    for phase in ["write", "read"] {
        let window = f(&format!("{phase}_all_active_secs"));
        assert!((window - 6.0).abs() < 1.0, "{phase} window {window} s: {r}");
        let ratio = f(&format!("{phase}_ratio"));
        assert!(ratio > 0.02 && ratio < 1.05, "{phase} ratio {ratio}: {r}");
    }
    assert!(r["degraded_read_mb_per_sec"].is_null(), "{r}");
    assert_eq!(r["code"], "rdp", "{r}");
    let md = std::fs::read_to_string(tmp.path().join("out/codfs-model.md")).unwrap();
    assert!(md.contains("Method: streams"), "{md}");
    assert!(md.contains("| rdp |"), "{md}");
    // Reno is built into every kernel: the hosts ran it, and the report says so.
    assert_eq!(r["tcp_cc"], "reno", "{r}");
    assert!(
        md.contains("TCP congestion control on every emulated host: reno."),
        "{md}"
    );
}

/// A congestion control the kernel does not have: one line naming the flag, no namespace made.
#[test]
fn an_unknown_congestion_control_is_one_clear_error() {
    if !tools_or_skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let child = small_model(tmp.path(), &["--tcp-cc", "nosuchcc", "--no-failures"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tcp-cc") && err.contains("nosuchcc") && err.contains("reno"),
        "{err}"
    );
    assert!(our_namespaces(pid).is_empty());
}

/// `--exp reserve --quick`: the §5.3.2 simulation as CI runs it (no root, seconds): every
/// strategy in the report, the fixed baselines at the seed's Γ, the files written; a bad
/// strategy is one line naming the flag.
#[test]
fn reserve_experiment_runs_quick_and_names_bad_strategies() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args([
            "experiment",
            "codfs",
            "--exp",
            "reserve",
            "--quick",
            "--json",
            "--out",
        ])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = v["report"]["results"].as_array().unwrap();
    let labels: Vec<&str> = results
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    assert_eq!(
        labels,
        [
            "fixed 2 MiB",
            "fixed 8 MiB",
            "fixed 16 MiB",
            "shrink only",
            "shrink+merge"
        ]
    );
    let end = |i: usize| {
        results[i]["samples"].as_array().unwrap().last().unwrap()["gamma"]
            .as_f64()
            .unwrap()
    };
    assert!((end(0) - 0.2).abs() < 1e-9 && (end(2) - 1.6).abs() < 1e-9);
    assert!(end(4) < 1.6);
    for f in [
        "codfs-reserve.md",
        "codfs-reserve.csv",
        "codfs-reserve-gamma.svg",
    ] {
        assert!(tmp.path().join(f).exists(), "{f}");
    }
    let err = refused(
        &["--exp", "reserve", "--quick", "--strategies", "grow"],
        tmp.path(),
    );
    assert!(
        err.contains("--strategies") && err.lines().count() == 1,
        "{err}"
    );
}

/// The stderr of `ecstack experiment codfs ARGS --out OUT`, which must fail.
fn refused(args: &[&str], out: &std::path::Path) -> String {
    let run = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(["experiment", "codfs"])
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(!run.status.success(), "{args:?} was not refused");
    String::from_utf8_lossy(&run.stderr).into_owned()
}

/// `--exp synthetic|overhead|msr --quick` as JSON, the files written to `out`: the report and the
/// time it took.
fn quick_synthetic(exp: &str, out: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let run = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(["experiment", "codfs", "--exp", exp, "--quick", "--json"])
        .args(extra)
        .arg("--out")
        .arg(out)
        .arg("--dir")
        .arg(out.join("run"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&run.stdout).unwrap()
}

/// Every phase of a row ran, its bytes read back verified, F_avg is a number.
fn check_row(r: &serde_json::Value, data_bytes: u64) {
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {r}"));
    for k in [
        "write_mb_per_sec",
        "update_iops",
        "read_mb_per_sec",
        "recovery_mb_per_sec",
    ] {
        assert!(f(k) > 0.0, "{k}: {r}");
    }
    assert_eq!(r["bytes_verified"].as_u64(), Some(data_bytes), "{r}");
    assert!(r["recovery_bytes"].as_u64().unwrap() > 0, "{r}");
    assert!(f("f_avg_data") >= 0.0 && f("f_avg_parity") >= 0.0, "{r}");
    assert!(r["data_chunks"].as_u64().unwrap() > 0, "{r}");
    assert!(r["update_load"]["cpu_busy_pct"].as_f64().is_some(), "{r}");
}

#[test]
fn synthetic_and_overhead_experiments_run_quick_and_verify_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    // All four schemes on HDD-profiled device stores, RDP (6,4), 8 OSDs.
    let out = tmp.path().join("synthetic");
    let v = quick_synthetic("synthetic", &out, &[]);
    let rows = v["rows"].as_array().unwrap();
    let schemes: Vec<&str> = rows.iter().map(|r| r["scheme"].as_str().unwrap()).collect();
    assert_eq!(schemes, ["fo", "fl", "codfs-pl", "plr"]);
    for r in rows {
        assert_eq!(
            (r["code"].as_str(), r["n"].as_u64(), r["k"].as_u64()),
            (Some("rdp"), Some(6), Some(4))
        );
        check_row(r, 4 << 20);
    }
    // Table 5.1's shape: FO and PLR leave no fragments, FL logs data and parity, CodFS PL parity.
    let fa = |i: usize, k: &str| rows[i][k].as_f64().unwrap();
    assert_eq!((fa(0, "f_avg_data"), fa(0, "f_avg_parity")), (0.0, 0.0));
    assert!(fa(1, "f_avg_data") > 0.0 && fa(1, "f_avg_parity") > 0.0);
    assert!(fa(2, "f_avg_data") == 0.0 && fa(2, "f_avg_parity") > 0.0);
    assert_eq!((fa(3, "f_avg_data"), fa(3, "f_avg_parity")), (0.0, 0.0));
    let md = std::fs::read_to_string(out.join("codfs-synthetic.md")).unwrap();
    assert!(md.contains("Table 5.1") && md.contains("Fig. 5.2b"), "{md}");
    // Each OSD behind the page-cache model (the default), dropped before each phase.
    assert!(
        md.contains("`cached:size=1024 MiB:throttled:profile=eplog-hdd"),
        "{md}"
    );
    for f in [
        "codfs-synthetic.csv",
        "codfs-synthetic-update.svg",
        "codfs-synthetic-recovery.svg",
    ] {
        assert!(out.join(f).exists(), "{f}");
    }
    // §5.2.5: seven configurations, eight chunks per segment each.
    // Without the page cache (fewer OSD restarts: CI time).
    let out = tmp.path().join("overhead");
    let v = quick_synthetic("overhead", &out, &["--page-cache", "0"]);
    let rows = v["rows"].as_array().unwrap();
    let labels: Vec<&str> = rows.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(
        labels,
        [
            "plr rs-cauchy (6,4)",
            "fo rs-cauchy (8,6)",
            "fl rs-cauchy (8,6)",
            "codfs-pl rs-cauchy (8,6)",
            "fo rs-cauchy (8,4)",
            "fl rs-cauchy (8,4)",
            "codfs-pl rs-cauchy (8,4)"
        ]
    );
    for r in rows {
        check_row(r, 4 << 20);
        assert_eq!(r["chunk_bytes"].as_u64(), Some(256 << 10), "{r}");
    }
    assert!(out.join("codfs-overhead.md").exists());
    // A bare `pl` is refused in one line naming codfs-pl.
    let err = refused(
        &["--exp", "synthetic", "--quick", "--update-scheme", "pl"],
        &tmp.path().join("bad"),
    );
    assert!(
        err.contains("codfs-pl") && err.lines().count() == 1,
        "{err}"
    );
}

/// `--exp msr --quick` (§5.3.1 at its smallest: volumes src22 and mds0 at scale 0.0002, 1 MiB
/// segments, 8 OSDs, 10 clients): every volume under every scheme replayed, read back whole and verified,
/// recovered; the comparison with the seed and the files written; an unknown volume is one line
/// naming the flag.
#[test]
fn msr_experiment_runs_quick_and_verifies_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("msr");
    let v = quick_synthetic("msr", &out, &[]);
    let traces = v["traces"].as_array().unwrap();
    let volumes: Vec<&str> = traces
        .iter()
        .map(|t| t["volume"].as_str().unwrap())
        .collect();
    assert_eq!(volumes, ["src22", "mds0"]);
    for t in traces {
        assert!(t["writes"].as_u64().unwrap() > 0, "{t}");
        assert!(t["writes"].as_u64() <= t["trace_writes"].as_u64(), "{t}");
    }
    let rows = v["rows"].as_array().unwrap();
    let runs: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["volume"].as_str().unwrap(), r["scheme"].as_str().unwrap()))
        .collect();
    let mut want = Vec::new();
    for vol in ["src22", "mds0"] {
        for s in ["fo", "fl", "codfs-pl", "plr"] {
            want.push((vol, s));
        }
    }
    assert_eq!(runs, want);
    for r in rows {
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {r}"));
        for k in ["writes_per_sec", "recovery_mb_per_sec", "read_mb_per_sec"] {
            assert!(f(k) > 0.0, "{k}: {r}");
        }
        assert_eq!(r["bytes_verified"], r["file_bytes"], "{r}");
        assert!(r["recovery_bytes"].as_u64().unwrap() > 0, "{r}");
    }
    // FL logs data, so its data chunks are fragmented once updated (src22's file has 4 segments,
    // so an OSD's chunks are allocated one after another and a log cannot follow its chunk);
    // FO's and PLR's never are.
    let f_avg = |vol: &str, s: &str, k: &str| {
        rows.iter()
            .find(|r| r["volume"] == vol && r["scheme"] == s)
            .unwrap()[k]
            .as_f64()
            .unwrap()
    };
    assert!(f_avg("src22", "fl", "f_avg_data") > 0.0);
    assert!(f_avg("src22", "codfs-pl", "f_avg_parity") > 0.0);
    for vol in ["src22", "mds0"] {
        for s in ["fo", "plr"] {
            assert_eq!(f_avg(vol, s, "f_avg_data"), 0.0);
            assert_eq!(f_avg(vol, s, "f_avg_parity"), 0.0);
        }
    }
    let md = std::fs::read_to_string(out.join("codfs-msr.md")).unwrap();
    assert!(md.contains("Fig. 5.4") && md.contains("1.631"), "{md}");
    for f in [
        "codfs-msr.csv",
        "codfs-msr-writes.svg",
        "codfs-msr-recovery.svg",
    ] {
        assert!(out.join(f).exists(), "{f}");
    }
    let err = refused(
        &["--exp", "msr", "--quick", "--volumes", "mds0,nosuch"],
        &tmp.path().join("bad"),
    );
    assert!(
        err.contains("--volumes") && err.contains("nosuch") && err.lines().count() == 1,
        "{err}"
    );
}
