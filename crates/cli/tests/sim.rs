//! `ecstack sim` end to end: runs the built binary with --json and checks the model's figures.

use std::process::Command;

fn sim(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .arg("sim")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ecstack sim {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

fn f(v: &serde_json::Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

#[test]
fn ssd_sequential_fill_has_wa_one_and_no_gc() {
    // 256 x 32 pages at 15% OP: floor(8192 * 0.85) = 6963 logical pages.
    let v = sim(&[
        "ssd",
        "--params",
        "blocks=256,pages=32",
        "--workload",
        "seq",
        "--no-prefill",
        "--ops",
        "6963",
    ]);
    assert_eq!(f(&v, &["logical_pages"]), 6963.0);
    assert_eq!(f(&v, &["host_page_writes"]), 6963.0);
    assert_eq!(f(&v, &["write_amplification"]), 1.0);
    assert_eq!(f(&v, &["gc_invocations"]), 0.0);
    assert_eq!(f(&v, &["erases"]), 0.0);
}

#[test]
fn ssd_uniform_random_reports_gc_erases_and_latency() {
    let args = [
        "ssd",
        "--params",
        "blocks=1024,pages=64,op=0.15",
        "--workload",
        "uniform",
        "--ops",
        "300000",
        "--seed",
        "3",
    ];
    let v = sim(&args);
    let wa = f(&v, &["write_amplification"]);
    assert!((3.5..5.5).contains(&wa), "WA {wa}");
    assert!(f(&v, &["gc_invocations"]) > 0.0);
    let copies = f(&v, &["gc_copies"]);
    assert_eq!(
        f(&v, &["flash_page_writes"]),
        f(&v, &["host_page_writes"]) + copies
    );
    let blocks: f64 = v["erase_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["blocks"].as_f64().unwrap())
        .sum();
    assert_eq!(blocks, 1024.0);
    let (p50, p99) = (f(&v, &["latency_us", "p50"]), f(&v, &["latency_us", "p99"]));
    // A 4 KiB MLC write: 13.65 us transfer + 500 us program; GC stalls add milliseconds to the tail.
    assert!((500.0..530.0).contains(&p50), "p50 {p50}");
    assert!(p99 > 2000.0, "p99 {p99}");
    assert!(f(&v, &["wall", "host_page_writes_per_sec"]) > 0.0);
    // Same seed, same modeled result.
    let again = sim(&args);
    assert_eq!(v["modeled"], again["modeled"]);
    assert_eq!(v["flash_page_writes"], again["flash_page_writes"]);
    // TRIM lowers WA.
    let trimmed = sim(&[
        "ssd",
        "--params",
        "blocks=1024",
        "--ops",
        "300000",
        "--seed",
        "3",
        "--trim-pct",
        "10",
    ]);
    assert!(f(&trimmed, &["write_amplification"]) < wa);
}

#[test]
fn hdd_random_and_sequential() {
    let r = sim(&[
        "hdd",
        "--workload",
        "uniform",
        "--ops",
        "3000",
        "--seed",
        "5",
    ]);
    let iops = f(&r, &["modeled", "iops"]);
    assert!((85.0..200.0).contains(&iops), "random 4K IOPS {iops}");
    let q = sim(&[
        "hdd",
        "--workload",
        "uniform",
        "--ops",
        "3000",
        "--seed",
        "5",
        "--queue-depth",
        "16",
    ]);
    assert!(
        f(&q, &["modeled", "iops"]) > 1.3 * iops,
        "SSTF with a deep queue should beat queue depth 1"
    );
    let s = sim(&[
        "hdd",
        "--workload",
        "seq",
        "--ops",
        "20000",
        "--read-pct",
        "100",
    ]);
    let mbps = f(&s, &["modeled", "mb_per_s"]);
    assert!((135.0..150.0).contains(&mbps), "sequential {mbps} MB/s");
    let again = sim(&[
        "hdd",
        "--workload",
        "uniform",
        "--ops",
        "3000",
        "--seed",
        "5",
    ]);
    assert_eq!(r["modeled"], again["modeled"]);
}

#[test]
fn bad_parameters_fail_with_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(["sim", "ssd", "--params", "colour=blue"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown key 'colour'"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn ssd_and_hdd_replay_a_block_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("usr_0.csv");
    // MSR Cambridge format: Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime.
    let ft = 128_166_372_000_000_000u64;
    let lines = [
        ("Write", 0u64, 8192u64),       // pages 0-1
        ("Write", 4096, 4096),          // page 1
        ("Read", 1 << 20, 4096),        // page 256
        ("Write", 1 << 20, 16384),      // pages 256-259
        ("Write", 10 << 20, 600 << 10), // 150 pages
        ("Write", 0, 2048),             // page 0 (partial: one page write)
    ];
    let body: String = lines
        .iter()
        .enumerate()
        .map(|(i, (ty, off, len))| format!("{},usr,0,{ty},{off},{len},100\n", ft + i as u64 * 10))
        .collect();
    std::fs::write(&path, body).unwrap();
    let p = path.to_str().unwrap();
    let v = sim(&[
        "ssd",
        "--params",
        "blocks=256,pages=32",
        "--no-prefill",
        "--trace",
        p,
    ]);
    assert_eq!(f(&v, &["workload", "ops"]), 6.0);
    assert_eq!(f(&v, &["host_page_writes"]), 158.0);
    assert_eq!(f(&v, &["host_page_reads"]), 1.0);
    assert_eq!(f(&v, &["write_amplification"]), 1.0);
    let h = sim(&["hdd", "--trace", p, "--trace-format", "msr"]);
    assert_eq!(f(&h, &["totals", "requests"]), 6.0);
    assert_eq!(
        f(&h, &["totals", "bytes"]),
        (8192 + 4096 + 4096 + 16384 + (600 << 10) + 2048) as f64
    );
}
