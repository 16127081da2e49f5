//! `ecstack reduce` end to end through the binary: analyze → report (--json), a shard pair merged, and
//! bad input as one error line with exit status 1.

use std::process::Command;

fn ecstack(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(args)
        .output()
        .expect("run ecstack")
}

#[test]
fn analyze_report_merge_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir_all(root.join("a")).unwrap();
    let text = "the brothers karamazov\n".repeat(5000);
    std::fs::write(root.join("a/one.txt"), &text).unwrap();
    std::fs::write(root.join("two.txt"), &text).unwrap();
    let d = |p: &str| dir.path().join(p).to_string_lossy().into_owned();
    let r = root.to_string_lossy().into_owned();
    let o = ecstack(&[
        "reduce",
        "analyze",
        &r,
        "-o",
        &d("res"),
        "--compress",
        "zstd:3@16K",
        "--dedup",
        "whole:blake3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["manifest"]["files"], 2);
    let o = ecstack(&["reduce", "report", &d("res"), "--json"]);
    assert!(o.status.success());
    let rep: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let totals = rep["totals"].as_array().unwrap();
    assert_eq!(totals[1]["label"], "whole:blake3");
    assert_eq!(totals[1]["reduced_bytes"], text.len());
    assert!(totals[0]["reduced_bytes"].as_u64().unwrap() < text.len() as u64 / 10);
    // Two shards merged: the same totals.
    for i in 0..2 {
        let o = ecstack(&[
            "reduce",
            "analyze",
            &r,
            "-o",
            &d(&format!("s{i}")),
            "--compress",
            "zstd:3@16K",
            "--dedup",
            "whole:blake3",
            "--shard",
            &format!("{i}/2"),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = ecstack(&["reduce", "merge", &d("s0"), &d("s1"), "-o", &d("m")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = ecstack(&["reduce", "report", &d("m"), "--json"]);
    let merged: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in ["original_bytes", "reduced_bytes"] {
        assert_eq!(merged["totals"][0][k], totals[0][k]);
        assert_eq!(merged["totals"][1][k], totals[1][k]);
    }
    // Bad input: one line, status 1.
    for args in [
        vec![
            "reduce",
            "analyze",
            &r,
            "-o",
            &d("x"),
            "--compress",
            "lzo@16K",
        ],
        vec![
            "reduce",
            "analyze",
            &r,
            "-o",
            &d("x"),
            "--dedup",
            "fastcdc:1000",
        ],
        vec!["reduce", "report", &r],
        vec!["reduce", "merge", &d("s0"), "-o", &d("y")],
    ] {
        let o = ecstack(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("ecstack: error: "), "{err}");
    }
}
