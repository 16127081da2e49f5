//! `ecstack_lab::kv_bench` at a tiny scale: redis-benchmark against our server over a memory-backed
//! eplog array and against redis-server, every key read back on both. Needs redis-tools and
//! redis-server (scripts/setup.sh installs them); without them it fails.

use ecstack_lab::kv_bench::{run, KvBenchConfig};

#[test]
fn redis_benchmark_on_both_servers_with_values_read_back() {
    let cfg = KvBenchConfig {
        requests: 2_000,
        clients: 8,
        pipeline: 4,
        keys: 300,
        ..KvBenchConfig::default()
    };
    let r = run(&cfg, &|_| {}).expect("kv bench (needs redis-benchmark and redis-server)");
    let tests: Vec<(&str, &str)> = r
        .rows
        .iter()
        .map(|x| (x.server.as_str(), x.test.as_str()))
        .collect();
    assert_eq!(tests.len(), 4, "{tests:?}");
    assert!(r.rows.iter().all(|x| x.requests_per_s > 0.0));
    // Each server's CPU time per request is read from /proc for every test.
    assert!(
        r.rows
            .iter()
            .all(|x| x.server_cpu_us_per_request.is_some_and(|c| c >= 0.0)),
        "{:?}",
        r.rows
    );
    // 2000 random SETs over 300 keys leave (almost surely) every key; both servers hold the same.
    assert_eq!(r.checks.len(), 2);
    for c in &r.checks {
        assert!(c.keys_found >= 290 && c.keys_found == c.dbsize, "{c:?}");
    }
    assert_eq!(r.ratios.len(), 2);
    let md = r.markdown();
    assert!(
        md.contains("| SET |") && md.contains("redis-server"),
        "{md}"
    );
}

/// `ecstack_lab::kv_bench_ycsb` at a tiny scale: YCSB workloads A-F through the real YCSB client
/// (built with Maven from crates/kv/ycsb; needs java and mvn, and redis-server) against both
/// servers; YCSB must report no failed operation and the key counts must match. Fails without
/// the tools.
#[test]
fn ycsb_workloads_on_both_servers() {
    use ecstack_lab::kv_bench_ycsb::{run, YcsbConfig};
    let cfg = YcsbConfig {
        records: 200,
        operations: 300,
        threads: 2,
        ..YcsbConfig::default()
    };
    let r = run(&cfg, &|_| {}).expect("kv ycsb (needs java, mvn and redis-server)");
    assert_eq!(r.runs.len(), 12);
    assert_eq!(r.ratios.len(), 6);
    for run in &r.runs {
        assert!(run.ops_per_s > 0.0, "{run:?}");
        let ops: u64 = run.ops.iter().map(|o| o.operations).sum();
        assert!(ops >= 300, "{run:?}");
    }
    let e = r.runs.iter().find(|x| x.workload == 'e').unwrap();
    assert!(e.ops.iter().any(|o| o.op == "SCAN"), "{e:?}");
    let md = r.markdown();
    eprintln!("{md}");
    assert!(md.contains("redis-server") && md.contains("| F |"), "{md}");
}

/// The full-scale benchmark (`ecstack kv bench`'s defaults) with and without group commit; run by
/// hand: `cargo test -p ecstack-lab --test kv_bench full_scale -- --ignored --nocapture`.
#[test]
#[ignore]
fn full_scale_with_and_without_group_commit() {
    for group_commit in [false, true] {
        let cfg = KvBenchConfig {
            group_commit,
            ..KvBenchConfig::default()
        };
        let r = run(&cfg, &|_| {}).expect("kv bench");
        eprintln!("group commit {group_commit}:\n{}", r.markdown());
    }
}
