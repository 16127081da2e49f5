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
