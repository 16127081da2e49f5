//! A tiny EPLOG experiment run in-process: the report holds the rows each experiment promises, its
//! figures follow from the schemes' designs, and the files it writes are there.

use ecstack_lab::eplog::{
    find, run, Commit, EplogConfig, Exp, KvCells, KvScale, KvWorkload, Report, RunKey, Setting,
    Testbed, TraceName, Variant, CACHE_PCT, PAIR_BYTES,
};

fn tiny(exps: Vec<Exp>, dir: &std::path::Path) -> EplogConfig {
    EplogConfig {
        scale: 0.0005,
        exps,
        settings: vec![Setting::SIX_TWO],
        clients: vec![4],
        testbeds: vec![Testbed::Paper],
        ..EplogConfig::new(true, dir.join("devices"))
    }
}

fn quiet(_: &str) {}

#[test]
fn simulated_exps_1_to_3_report_traffic_gc_and_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tiny(
        vec![Exp::WriteTraffic, Exp::Gc, Exp::CommitFrequency],
        tmp.path(),
    );
    let r = run(&cfg, &quiet).unwrap();
    assert!(r.perf.is_empty() && r.paper.is_empty() && r.recovery.is_empty());
    assert_eq!(r.traces.len(), 4);
    for t in TraceName::ALL {
        let at = |v| find(&r.sim, RunKey::plain(t, Setting::SIX_TWO, v, 1)).unwrap();
        // eplog writes each update once plus log chunks; md rewrites data and parity in place.
        assert!(
            at(Variant::EPLOG).ssd_write_bytes < at(Variant::MD).ssd_write_bytes,
            "{t}"
        );
        assert_eq!(at(Variant::MD).log_write_bytes, 0, "{t}");
        assert!(at(Variant::PL).log_write_bytes > 0, "{t}");
        assert!(at(Variant::EplogDeviceBuffer(16)).requests > 0, "{t}");
        for c in [Commit::All, Commit::Every(1000), Commit::Every(10_000)] {
            let key = RunKey {
                commit: c,
                ..RunKey::plain(t, Setting::SIX_TWO, Variant::EPLOG, 1)
            };
            assert!(find(&r.sim, key).unwrap().commits >= 1, "{t} {c}");
        }
    }
    // The GC target needs md to have collected garbage at all (a tiny trace may not fill an SSD).
    let md_gc = find(&r.sim, RunKey::fin(Variant::MD, 1))
        .unwrap()
        .gc_per_ssd;
    let mut want = vec!["SSD write traffic eplog / md"];
    if md_gc > 0.0 {
        want.push("GC requests per SSD eplog / md");
    }
    let what: Vec<&str> = r.targets.iter().map(|t| t.what.as_str()).collect();
    assert_eq!(what, want);
    assert!(
        r.targets[0].met && r.targets[0].ratio < 1.0,
        "{:?}",
        r.targets[0]
    );
    let md = r.markdown();
    assert!(md.contains("### Exp 1-2: SSD write traffic"), "{md}");
    assert!(md.contains("### Exp 3: parity commit frequency"), "{md}");
    let out = tmp.path().join("results");
    let files = r.write(&out).unwrap();
    for f in [
        "eplog.md",
        "eplog-sim.csv",
        "exp1-write-traffic.svg",
        "exp2-gc.svg",
    ] {
        assert!(files.contains(&out.join(f)) && out.join(f).exists(), "{f}");
    }
    let csv = std::fs::read_to_string(out.join("eplog-sim.csv")).unwrap();
    assert_eq!(csv.lines().count(), r.sim.len() + 1);
    assert!(csv
        .lines()
        .next()
        .unwrap()
        .starts_with("testbed,trace,setting,scheme,clients"));
}

fn exp4_report(tmp: &std::path::Path) -> Report {
    let r = run(&tiny(vec![Exp::RequestsPerSecond], tmp), &quiet).unwrap();
    assert!(r.sim.is_empty() && r.perf.is_empty() && r.recovery.is_empty());
    r
}

#[test]
fn exp4_on_the_emulated_testbed_reports_every_client_count() {
    let tmp = tempfile::tempdir().unwrap();
    let r = exp4_report(tmp.path());
    let row = |v, c| find(&r.paper, RunKey::fin(v, c)).unwrap();
    for c in [1, 4] {
        // eplog never pre-reads; md and pl read old data for every update.
        assert_eq!(row(Variant::EPLOG, c).ssd_read_bytes, 0);
        assert!(row(Variant::MD, c).ssd_read_bytes > 0 && row(Variant::PL, c).ssd_read_bytes > 0);
    }
    let ops = |v, c| row(v, c).dev_ops_per_req;
    assert!(
        ops(Variant::EPLOG, 1) < ops(Variant::PL, 1) && ops(Variant::PL, 1) < ops(Variant::MD, 1)
    );
    assert!(row(Variant::EplogNoStripeBuffer, 4).requests > 0);
    // Exps 4b/4c: MDS (quick) at (6+2), and degraded commits.
    assert!(find(
        &r.paper,
        RunKey::plain(TraceName::Mds, Setting::SIX_TWO, Variant::PL, 1)
    )
    .is_some());
    assert!(r.paper.iter().any(|x| x.degraded && x.commits >= 1));
    // No device files are needed for the emulated testbed; nothing is left behind.
    assert!(!tmp.path().join("devices").join("main0.img").exists());
    let out = tmp.path().join("results");
    r.write(&out).unwrap();
    for f in [
        "eplog.md",
        "eplog-perf-paper.csv",
        "exp4-paper-throughput.svg",
        "exp4-paper-clients.svg",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
}

#[test]
fn exp6_kv_store_runs_every_workload_and_cache_size_with_checked_gets() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = EplogConfig {
        kv: KvScale {
            pairs: 32,
            requests: 64,
        },
        ..tiny(vec![Exp::KvStore], tmp.path())
    };
    let r = run(&cfg, &quiet).unwrap();
    // Exp 6 alone replays no trace.
    assert!(r.traces.is_empty() && r.sim.is_empty() && r.paper.is_empty());
    assert_eq!(
        r.kv.len(),
        PAIR_BYTES.len() * 3 * KvWorkload::ALL.len() * CACHE_PCT.len()
    );
    for x in &r.kv {
        let at = format!(
            "{} {} {} {}%",
            x.pair_bytes, x.scheme, x.workload, x.cache_pct
        );
        assert_eq!(x.updates + x.gets, 64, "{at}");
        match x.workload {
            KvWorkload::UpdateOnly => assert_eq!(x.gets, 0, "{at}"),
            KvWorkload::Hybrid => assert!(x.gets > 0 && x.updates > 0, "{at}"),
        }
        // Sized so that no run runs out of log or spare space: parity commit stays off.
        assert_eq!(x.commits, 0, "{at}");
        match x.cache_pct {
            // Every pair cached: no key is looked up on storage.
            100 => assert_eq!(x.key_reads_per_req, 0.0, "{at}"),
            // No cache: every request reads at least one record head to compare keys.
            0 => assert!(x.key_reads_per_req >= 1.0, "{at}"),
            _ => {}
        }
        if x.cache_pct == 100 && x.workload == KvWorkload::UpdateOnly {
            // eplog never pre-reads for an update; md reads old data and parity.
            if x.scheme == Variant::EPLOG {
                assert_eq!(x.ssd_read_bytes, 0, "{at}");
            }
            if x.scheme == Variant::MD {
                assert!(x.ssd_read_bytes > 0, "{at}");
            }
        }
    }
    let exp6: Vec<_> = r
        .targets
        .iter()
        .filter(|t| t.what.starts_with("Exp 6 "))
        .collect();
    assert_eq!(exp6.len(), PAIR_BYTES.len() * KvWorkload::ALL.len() * 2);
    let md = r.markdown();
    assert!(md.contains("### Exp 6: key-value store"), "{md}");
    assert!(
        md.contains("| eplog over md, 4 KiB, update-only | +70.7% to +395.5% |"),
        "{md}"
    );
    let out = tmp.path().join("results");
    r.write(&out).unwrap();
    for f in [
        "eplog.md",
        "eplog-kv.csv",
        "exp6-paper-4k-update-only.svg",
        "exp6-paper-8k-hybrid.svg",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
}

#[test]
fn exp6_selected_cells_repeat_with_the_schemes_in_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = EplogConfig {
        kv: KvScale {
            pairs: 32,
            requests: 48,
        },
        kv_cells: KvCells {
            pair_bytes: vec![4096],
            workloads: vec![KvWorkload::Hybrid],
            cache_pct: vec![50, 75],
            repeat: 3,
        },
        // Both testbeds: files in their own directory per scheme, removed afterwards.
        testbeds: vec![Testbed::Files, Testbed::Paper],
        ..tiny(vec![Exp::KvStore], tmp.path())
    };
    let r = run(&cfg, &quiet).unwrap();
    // 2 testbeds x 2 cache sizes x 3 rounds x 3 schemes, in that nesting.
    assert_eq!(r.kv.len(), 2 * 2 * 3 * 3);
    for (i, x) in r.kv.iter().enumerate() {
        assert_eq!((x.pair_bytes, x.workload), (4096, KvWorkload::Hybrid));
        assert_eq!(
            x.round as usize,
            (i / 3) % 3,
            "rounds interleave the schemes"
        );
        assert_eq!(x.scheme, [Variant::MD, Variant::PL, Variant::EPLOG][i % 3]);
        assert_eq!(x.cache_pct, [50, 75][(i / 9) % 2]);
        assert_eq!(x.updates + x.gets, 48);
        assert!(x.ssd_writes_per_req > 0.0, "{i}");
    }
    let exp6: Vec<_> = r
        .targets
        .iter()
        .filter(|t| t.what.starts_with("Exp 6 "))
        .collect();
    // Per testbed: one workload x eplog / md, eplog / pl, over the cache sizes run.
    assert_eq!(exp6.len(), 2 * 2);
    assert!(
        exp6[0].what.contains("lowest over cache 50%, 75%"),
        "{}",
        exp6[0].what
    );
    let md = r.markdown();
    assert!(md.contains("3 rounds per cell"), "{md}");
    assert!(md.contains("Device requests per KV request"), "{md}");
    assert!(md.contains("| 4 KiB | hybrid | 75% |"), "{md}");
    assert!(!md.contains("| 8 KiB |"), "{md}");
    // The device files are gone.
    let left: Vec<_> = std::fs::read_dir(tmp.path().join("devices"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}
