//! `ecstack bench cluster`'s random-update load, driven through the built binary at tiny sizes: ours
//! only (Ceph is measured by hand, docs/benchmarks.md; here only its flag is checked).

use std::process::Command;

fn ecstack(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(args)
        .output()
        .expect("run ecstack")
}

#[test]
fn random_updates_run_per_scheme_and_depth_and_verify() {
    let o = ecstack(&[
        "bench",
        "cluster",
        "--updates-only",
        "--insecure",
        "--segment-size",
        "1M",
        "--update-file-size",
        "8M",
        "--update-count",
        "60",
        "--depths",
        "1,4",
        "--update-scheme",
        "fo,plr,fl,codfs-pl",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let schemes = r["schemes"].as_array().unwrap();
    let names: Vec<&str> = schemes
        .iter()
        .map(|s| s["scheme"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fo", "plr", "fl", "codfs-pl"]);
    for s in schemes {
        let depths = s["depths"].as_array().unwrap();
        assert_eq!(depths.len(), 2);
        for (d, want) in depths.iter().zip([1, 4]) {
            assert_eq!(d["depth"], want);
            assert_eq!(d["updates"], 60);
            assert!(d["iops"].as_f64().unwrap() > 0.0);
            assert!(d["p99_ms"].as_f64().unwrap() >= d["p50_ms"].as_f64().unwrap());
        }
        // 8 MiB: read back whole (2,048 blocks), most of them unchanged.
        assert_eq!(s["verified_blocks"], 2048, "{s}");
        assert!(s["verified_updated"].as_u64().unwrap() > 0);
        assert_eq!(s["segments"], 8);
        assert!(s["segments_touched"].as_u64().unwrap() > 4, "{s}");
    }
    assert!(r["ceph"].is_null());
    assert!(r["ratios"].as_array().unwrap().is_empty());
}

#[test]
fn ceph_and_the_load_flags_are_offered_and_checked() {
    let o = ecstack(&["bench", "cluster", "--help"]);
    let h = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--ceph",
        "--update-file-size",
        "--depths",
        "--update-seconds",
        "--update-scheme",
    ] {
        assert!(h.contains(flag), "{flag} missing from --help");
    }
    for (args, want) in [
        (vec!["--update-scheme", "nope"], "--update-scheme"),
        (vec!["--depths", "1,x"], "--depths"),
        (vec!["--depths", "0"], "--depths"),
        (vec!["--update-file-size", "5000"], "--update-file-size"),
        (vec!["--update-seconds", "NaN"], "--update-seconds"),
    ] {
        let mut all = vec!["bench", "cluster", "--updates-only", "--insecure"];
        all.extend(args);
        let o = ecstack(&all);
        assert!(!o.status.success());
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(want), "{all:?}: {e}");
    }
}
