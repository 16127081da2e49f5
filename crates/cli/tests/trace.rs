//! End-to-end `ecstack trace …` through the real binary, with --json.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn ecstack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(args)
        .output()
        .expect("run ecstack")
}

fn ok_json(args: &[&str]) -> Value {
    let out = ecstack(args);
    assert!(
        out.status.success(),
        "ecstack {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "ecstack {args:?}: bad JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn synth_analyze_transform_replay() {
    let d = tempfile::tempdir().unwrap();
    let csv = d.path().join("mds.csv");
    let s = ok_json(&[
        "trace",
        "synth",
        "--preset",
        "eplog-mds",
        "--scale",
        "0.01",
        "--seed",
        "7",
        "-o",
        p(&csv),
        "--verify",
        "--json",
    ]);
    assert!(s["records"].as_u64().unwrap() > 10_000);
    assert!(
        s["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["ok"] == true),
        "{s}"
    );

    let plots = d.path().join("plots");
    let rep = ok_json(&[
        "trace",
        "analyze",
        p(&csv),
        "--json",
        "--plot-dir",
        p(&plots),
    ]);
    let v = &rep["volumes"][0];
    assert_eq!(v["volume"], "MDS_0");
    assert_eq!(v["writes"].as_u64().unwrap(), 10_694); // 1,069,421 * 0.01
    let rnd = v["random_write_pct"].as_f64().unwrap();
    assert!((rnd - 82.99).abs() < 2.0, "{rnd}");
    assert_eq!(v["reuse_cdf"].as_array().unwrap().len(), 101);
    let svg = std::fs::read_to_string(plots.join("reuse.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("MDS_0"));
    assert!(plots.join("sizes.svg").exists());

    // EPLOG preparation, as a fio v3 iolog split over 2 clients
    let out = d.path().join("mds.fio");
    let t = ok_json(&[
        "trace",
        "transform",
        p(&csv),
        "--round",
        "4K",
        "--compact",
        "--out-format",
        "fio3",
        "--clients",
        "2",
        "-o",
        p(&out),
        "--json",
    ]);
    assert_eq!(t["records_in"], t["records_out"]);
    let compacted = t["compacted_bytes"].as_u64().unwrap();
    assert!(compacted > 0 && compacted.is_multiple_of(1 << 20));
    let a0 = ok_json(&[
        "trace",
        "analyze",
        &format!("{}.0", p(&out)),
        "--json",
        "--no-cdf",
    ]);
    let a1 = ok_json(&[
        "trace",
        "analyze",
        &format!("{}.1", p(&out)),
        "--json",
        "--no-cdf",
    ]);
    let w =
        a0["volumes"][0]["writes"].as_u64().unwrap() + a1["volumes"][0]["writes"].as_u64().unwrap();
    assert_eq!(w, 10_694);

    // replay the compacted trace against a file device
    let img = d.path().join("dev.img");
    let spec = format!("file:{}?size=256M", p(&img));
    let r = ok_json(&[
        "trace",
        "replay",
        p(&csv),
        "--compact",
        "--device",
        &spec,
        "--clients",
        "2",
        "--prewrite",
        "--json",
    ]);
    assert_eq!(
        r["requests"].as_u64().unwrap(),
        s["records"].as_u64().unwrap()
    );
    assert!(r["requests_per_s"].as_f64().unwrap() > 0.0);
    assert!(r["latency"]["p99_us"].as_f64().unwrap() > 0.0);
    assert!(r["prewrite_bytes"].as_u64().unwrap() >= compacted);
}

#[test]
fn malformed_input_is_one_clear_line() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("bad.csv");
    std::fs::write(
        &f,
        "128166372003061629,hm,1,Read,3154288640,4096,1331\n128166372003061630,hm,1,Write,oops,4096,1\n",
    )
    .unwrap();
    let out = ecstack(&["trace", "analyze", p(&f), "--json"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.csv:2:"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!err.contains("panicked"));
    let rep = ok_json(&["trace", "analyze", p(&f), "--skip-bad", "--json"]);
    assert_eq!(rep["skipped"], 1);
    assert_eq!(rep["volumes"][0]["reads"], 1);

    let out = ecstack(&["trace", "synth", "--preset", "nope", "-o", "/dev/null"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown preset"));
}

/// `trace replay --device array:<meta>` drives an EPLOG array made by `ecstack array create`; the
/// writes land as logged updates that survive the close and reopen.
#[test]
fn replay_against_an_eplog_array() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let main: Vec<String> = (0..6).map(|i| format!("file:{d}/m{i}?size=16M")).collect();
    let log: Vec<String> = (0..2).map(|i| format!("file:{d}/l{i}?size=16M")).collect();
    let meta = format!("file:{d}/meta?size=16M");
    let bin = env!("CARGO_BIN_EXE_ecstack");
    let o = std::process::Command::new(bin)
        .args(["array", "create", "--scheme", "eplog", "-k", "4", "-m", "2"])
        .args([
            "--main",
            &main.join(","),
            "--log",
            &log.join(","),
            "--meta",
            &meta,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dev = format!("array:{meta}");
    let o = std::process::Command::new(bin)
        .args([
            "trace",
            "replay",
            "--preset",
            "eplog-mds",
            "--scale",
            "0.001",
            "--compact",
        ])
        .args(["--device", &dev, "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["device"].as_str().unwrap().contains("eplog"), "{r}");
    assert!(r["writes"].as_u64().unwrap() > 100, "{r}");
    let o = std::process::Command::new(bin)
        .args(["array", "status", "--meta", &meta, "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let st: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        st["pending"]["updated_chunks"].as_u64().unwrap() > 0,
        "{st}"
    );
}
