//! `ecstack sim robustore --disk-mbps`: fixed per-disk rates from a list or a testbed JSON, the same
//! result on every run of a seed, and one error line for each bad testbed.

use std::process::{Command, Output};

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(["sim", "robustore", "--size", "16M", "--accesses", "2"])
        .args(args)
        .output()
        .expect("run ecstack")
}

fn json(args: &[&str]) -> serde_json::Value {
    let o = sim(&[args, &["--json"]].concat());
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn error_line(args: &[&str]) -> String {
    let o = sim(args);
    assert!(!o.status.success(), "{args:?} succeeded");
    let e = String::from_utf8(o.stderr).unwrap();
    assert_eq!(e.trim_end().lines().count(), 1, "{args:?}: {e}");
    e
}

#[test]
fn fixed_rates_from_a_list_and_a_testbed_file() {
    let rates = "53,0.52,12.7,3.6,29.8,8.3,21.4,6.9,1.3,16.8";
    let a = json(&["--disks", "8", "--disk-mbps", rates]);
    assert_eq!(
        a,
        json(&["--disks", "8", "--disk-mbps", rates]),
        "one seed, one result"
    );
    assert!(a["result"]["bandwidth_mbps"].as_f64().unwrap() > 0.0);
    let disks = &a["config"]["variation"]["Fixed"]["disks"];
    assert_eq!(disks.as_array().unwrap().len(), 10);

    // The same pool as a testbed JSON gives the same figures.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("testbed.json");
    let body: Vec<String> = rates
        .split(',')
        .map(|r| format!("{{\"mbps\": {r}, \"delay_ms\": 0}}"))
        .collect();
    std::fs::write(
        &file,
        format!("{{\"version\": 1, \"disks\": [{}]}}", body.join(",")),
    )
    .unwrap();
    let at = format!("@{}", file.display());
    let b = json(&["--disks", "8", "--disk-mbps", &at]);
    assert_eq!(a["result"], b["result"]);

    let text = sim(&["--disks", "8", "--disk-mbps", rates]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("8 of 10 disks"));
}

#[test]
fn bad_testbeds_are_one_error_line() {
    assert!(error_line(&["--disk-mbps", ""]).contains("disk-mbps: empty list"));
    assert!(error_line(&["--disk-mbps", "10,0", "--disks", "2"]).contains("disk 1: rate 0 MB/s"));
    assert!(error_line(&["--disk-mbps", "10,x", "--disks", "2"]).contains("\"x\" is not a number"));
    assert!(error_line(&["--disk-mbps", "10,10", "--disks", "8"])
        .contains("an access uses 8 disks but the testbed has only 2"));
    assert!(error_line(&["--disk-mbps", "@/nonexistent/testbed.json"])
        .contains("/nonexistent/testbed.json"));
    // Two sources of variation: clap refuses (its message has a usage block, so not one line).
    let o = sim(&["--disk-mbps", "10", "--bg-interval-ms", "6"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot be used with"));
}
