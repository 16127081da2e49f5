//! Hostile numbers on the command line and in device specs (NaN, infinity, negative, 1e300,
//! u64 overflow, SSD geometries whose free pool leaves no room): each run exits non-zero with one
//! `ecstack: error:` line that names the problem, never a panic, a hang or a wrapped value.

use std::process::Command;

fn refused(args: &[&str], want: &str) {
    let o = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(args)
        .output()
        .expect("run ecstack");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} succeeded: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line, got {err}");
    assert!(
        lines[0].starts_with("ecstack: error:") && lines[0].contains(want),
        "{args:?}: wanted '{want}' in: {err}"
    );
}

#[test]
fn hostile_values_are_one_error_line() {
    let ssd = |p: &'static str| vec!["sim", "ssd", "--params", p, "--ops", "10"];
    let hdd = |p: &'static str| vec!["sim", "hdd", "--params", p, "--ops", "10"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (ssd("blocks=4,gc_high=0.9"), "leaving none for data"),
        (ssd("blocks=0"), "at least 4 blocks"),
        (ssd("blocks=18446744073709551616"), "not a number"),
        (ssd("op=NaN"), "fraction"),
        (ssd("op=1e300"), "fraction"),
        (ssd("iface=inf"), "interface bandwidth"),
        (ssd("page=0"), "page size"),
        (hdd("rpm=NaN"), "rpm"),
        (hdd("rpm=1e-300"), "rpm"),
        (hdd("heads=4294967295"), "heads"),
        (hdd("outer=1e300"), "transfer rates"),
        (hdd("seek=NaN"), "avg_seek_ms"),
        (
            vec!["sim", "ssd", "-w", "zipf", "--theta", "NaN", "--ops", "10"],
            "--theta",
        ),
        (vec!["bench", "ec", "--time", "NaN"], "--time"),
        (vec!["bench", "ec", "--time", "1e300"], "--time"),
        (vec!["bench", "ec", "--time", "inf"], "--time"),
        (vec!["bench", "ec", "--time", "0"], "--time"),
        (vec!["bench", "backup", "--seconds", "NaN"], "--seconds"),
        (vec!["bench", "backup", "--seconds", "inf"], "--seconds"),
        (vec!["bench", "backup", "--files", "0"], "--files"),
        (vec!["bench", "backup", "--load-tasks", "0"], "--load-tasks"),
    ];
    for (args, want) in &cases {
        refused(args, want);
    }
}
