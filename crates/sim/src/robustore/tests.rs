//! Tests of the simulator against hand-worked examples and the seed's Table 6-1.

use super::disk::{Layout, BLOCKING_FACTORS, TABLE_6_1};
use super::*;

/// Reads `blocks` blocks of `block` bytes from one disk of the given layout (zone drawn as in the
/// simulator), RTT 0, and returns (bytes, seconds).
fn one_disk_read(layout: Layout, blocks: u32, block: u64, rng: &mut Rng) -> (u64, f64) {
    let setup = DiskSetup {
        global: 0,
        filer: 0,
        model: DiskModel::new(layout, rng),
        bg_interval: None,
        extra_rtt: 0.0,
    };
    let mut eng = Engine::new(
        IoKind::Read,
        vec![setup],
        1,
        0.0,
        1e15,
        None,
        Rng::new(rng.next_u64()),
        0.0,
    );
    let jobs = (0..blocks)
        .map(|i| Job {
            id: i,
            bytes: block,
            addr: i as u64 * block,
        })
        .collect();
    eng.request(0, jobs);
    let mut c = Speculative {
        need: Need::Plain {
            got: vec![false; blocks as usize],
            missing: blocks as usize,
        },
        received: 0,
        decode: None,
        done: false,
    };
    let t = eng.run(&mut c).expect("completes");
    (blocks as u64 * block, t)
}

#[test]
fn disk_model_reproduces_table_6_1_within_5_percent_per_cell() {
    let mut rng = Rng::new(61);
    for (row, seq) in [false, true].into_iter().enumerate() {
        for (col, &bf) in BLOCKING_FACTORS.iter().enumerate() {
            let layout = Layout {
                bf_index: col,
                sequential: seq,
            };
            let (mut bytes, mut secs) = (0u64, 0.0);
            for _ in 0..400 {
                let (b, t) = one_disk_read(layout, 4, 1 << 20, &mut rng);
                bytes += b;
                secs += t;
            }
            let got = bytes as f64 / secs / MB;
            let want = TABLE_6_1[row][col];
            assert!(
                (got / want - 1.0).abs() < 0.05,
                "seq={seq} bf={bf}: {got:.3} MB/s, Table 6-1 says {want}"
            );
        }
    }
}

#[test]
fn rraid_s_placement_is_figure_6_1d() {
    // 8 blocks, 4 disks, two replicas: replica r of block i on disk (i + r) mod 4, replica 0 first.
    assert_eq!(
        rraid_layout(8, 4, 2),
        vec![
            vec![0, 4, 3, 7],
            vec![1, 5, 0, 4],
            vec![2, 6, 1, 5],
            vec![3, 7, 2, 6],
        ]
    );
    assert_eq!(
        rraid_layout(8, 4, 1),
        vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
    );
}

fn tiny(scheme: Scheme) -> Config {
    Config {
        disks: 4,
        total_disks: 4,
        disks_per_filer: 4,
        data_bytes: 8 * 4096,
        block_bytes: 4096,
        redundancy: 1.0,
        rtt: 0.1,
        metadata_cost: 0.0,
        link_rate: 1e15,
        accesses: 1,
        ..Config::baseline(scheme)
    }
}

fn fixed_setups(times: &[f64]) -> Vec<DiskSetup> {
    times
        .iter()
        .enumerate()
        .map(|(d, &t)| DiskSetup {
            global: d,
            filer: 0,
            model: DiskModel::fixed(0, t),
            bg_interval: None,
            extra_rtt: 0.0,
        })
        .collect()
}

fn hand_read(scheme: Scheme, split: Split) -> (AccessResult, Vec<Round>) {
    let cfg = Config {
        rraid_a_split: split,
        ..tiny(scheme)
    };
    let obj = Object {
        disks: vec![0, 1, 2, 3],
        base: 0,
        graph_seed: 1,
    };
    let mut st = PointState {
        caches: None,
        raptor_needed: vec![],
    };
    let layout = rraid_layout(8, 4, 2);
    let setups = fixed_setups(&[1.0, 1.1, 1.2, 10.0]);
    run_read(&cfg, &obj, &layout, 8, &mut st, &mut Rng::new(1), setups).unwrap()
}

#[test]
fn rraid_a_block_rounds_on_the_hand_worked_8_block_4_disk_example() {
    // Disks take 1.0, 1.1, 1.2 and 10 s per 4 KiB block; RTT 0.1 s; 2 replicas (Fig. 6-1d), each disk
    // first asked for its replica-0 blocks. Disk 0 delivers blocks 0 and 4 by 2.10; the slow disk 3
    // still owes {3, 7}, both held by disk 0 (replica 1): the second half, block 7, moves to disk 0
    // (request at 2.15, delivered 3.20; removed from disk 3's queue). Disks 1 and 2 go idle with
    // nothing they hold outstanding; at 3.20 disk 0 finds disk 3 owing one block (3, in service since
    // 0.05), which cannot be halved: the read ends when disk 3 delivers it, at 10.10.
    let (r, rounds) = hand_read(Scheme::RraidA, Split::Block);
    assert_eq!(rounds, vec![(0, vec![(7, 0, 4096)], 3)]);
    assert!((r.latency - 10.10).abs() < 1e-9, "{}", r.latency);
    assert_eq!(r.requests, 8 + 1);
    assert_eq!(r.net_bytes, 8 * 4096, "no block read twice");
}

#[test]
fn rraid_a_block_halving_never_moves_the_block_in_service() {
    // The regression of the first whole-block version (which moved a disk's last block while the disk
    // was reading it, so the disk never delivered again and never helped). Disks take 1.0, 1.0, 20
    // and 1.5 s per block. At 2.10 disk 0 is idle while disk 3 reads its last block, 7 (1.55..3.05):
    // one block, it stays. Disk 3 delivers it at 3.10, is idle, and takes block 6, the second half of
    // the slow disk 2's {2, 6} (disk 2 reading 2 since 0.05); block 2 stays with disk 2 (20.10).
    // The old version moved block 7 to disk 0 and finished at 40.10.
    let cfg = tiny(Scheme::RraidA);
    assert_eq!(cfg.rraid_a_split, Split::Block, "the default");
    let obj = Object {
        disks: vec![0, 1, 2, 3],
        base: 0,
        graph_seed: 1,
    };
    let mut st = PointState {
        caches: None,
        raptor_needed: vec![],
    };
    let layout = rraid_layout(8, 4, 2);
    let setups = fixed_setups(&[1.0, 1.0, 20.0, 1.5]);
    let (r, rounds) = run_read(&cfg, &obj, &layout, 8, &mut st, &mut Rng::new(1), setups).unwrap();
    assert_eq!(rounds, vec![(3, vec![(6, 0, 4096)], 2)], "{rounds:?}");
    assert!((r.latency - 20.10).abs() < 1e-9, "{}", r.latency);
    assert_eq!(r.net_bytes, 8 * 4096);
}

#[test]
fn rraid_a_sector_rounds_on_the_hand_worked_8_block_4_disk_example() {
    // Disks take 1.0, 1.1, 1.2 and 10 s per 4 KiB block (a shorter piece in proportion); RTT 0.1 s.
    // Disk 0 delivers blocks 0 and 4 by 2.10; of the slow disk 3's unreceived {3, 7} (8 KiB) it holds
    // both (replica 1), the others none: the second half, block 7, moves to disk 0 (request at 2.15,
    // delivered 3.20; cancelled from disk 3's queue). Disks 1 and 2 then go idle with nothing they hold
    // outstanding. From 3.20 disk 0 halves what disk 3 still owes of block 3 (in service there since
    // 0.05), one round trip per round: bytes 2048.. (0.5 s, delivered 3.80), 1024.. (0.25 s, 4.15),
    // 512.. (0.125 s, 4.375), and the last sector, which cannot be halved, whole (0.125 s, 4.60): the
    // read is done. Disk 3 finishes its in-service block anyway.
    let (r, rounds) = hand_read(Scheme::RraidA, Split::Sector);
    assert_eq!(
        rounds,
        vec![
            (0, vec![(7, 0, 4096)], 3),
            (0, vec![(3, 2048, 4096)], 3),
            (0, vec![(3, 1024, 2048)], 3),
            (0, vec![(3, 512, 1024)], 3),
            (0, vec![(3, 0, 512)], 3),
        ]
    );
    assert!((r.latency - 4.60).abs() < 1e-9, "{}", r.latency);
    assert_eq!(r.requests, 8 + 5);
    assert_eq!(
        r.net_bytes,
        9 * 4096,
        "block 3 twice: whole from disk 3, in four pieces from disk 0"
    );
}

#[test]
fn rraid_a_sector_halving_leaves_the_robbed_disk_working() {
    // The regression of a whole-block version. Disks take 1.0, 1.0, 20 and 1.5 s per block. At 2.10
    // disk 0 is idle while disk 3 reads its last block, 7 (in service 1.55..3.05). Moving block 7
    // whole cut disk 3 off mid-block; never delivering again, disk 3 never asked for more, and the
    // slow disk 2's blocks 2 and 6, held only by disks 2 and 3, took until 40.10. Halving bytes leaves
    // disk 3 the first half of block 7: it delivers at 3.10, is idle, and takes block 6 (the second
    // half of disk 2's unreceived data), then halves what disk 2 owes of block 2.
    let cfg = Config {
        rraid_a_split: Split::Sector,
        ..tiny(Scheme::RraidA)
    };
    let obj = Object {
        disks: vec![0, 1, 2, 3],
        base: 0,
        graph_seed: 1,
    };
    let mut st = PointState {
        caches: None,
        raptor_needed: vec![],
    };
    let layout = rraid_layout(8, 4, 2);
    let setups = fixed_setups(&[1.0, 1.0, 20.0, 1.5]);
    let (r, rounds) = run_read(&cfg, &obj, &layout, 8, &mut st, &mut Rng::new(1), setups).unwrap();
    assert_eq!(rounds[0], (0, vec![(7, 2048, 4096)], 3), "{rounds:?}");
    assert!(
        rounds.contains(&(3, vec![(6, 0, 4096)], 2)),
        "disk 3 helps disk 2 after its first batch: {rounds:?}"
    );
    for (_, moved, _) in &rounds {
        for &(b, lo, hi) in moved {
            assert!(b < 8 && lo < hi && hi <= 4096, "{moved:?}");
        }
    }
    assert!(r.latency < 7.0, "the slow disk 2 is hidden: {}", r.latency);
}

#[test]
fn rraid_a_ends_when_every_disk_holds_everything() {
    // 2 disks, D = 3: each disk holds every block twice, so idle disks keep taking each other's last
    // sectors. A version that counted only what it still expected of a piece (not what arrived)
    // passed one sector back and forth forever here (the quick sweep ran out of memory). Ends, with
    // every access below the round bound (a debug assertion), unloaded and under background load.
    for variation in [
        Variation::Layout,
        Variation::Background(BgInterval::Uniform {
            lo: 6e-3,
            hi: 200e-3,
        }),
    ] {
        for (disks, split) in [2, 3]
            .into_iter()
            .flat_map(|d| [(d, Split::Block), (d, Split::Sector)])
        {
            let cfg = Config {
                disks,
                rraid_a_split: split,
                total_disks: 8,
                data_bytes: 8 << 20,
                accesses: 4,
                variation: variation.clone(),
                ..Config::baseline(Scheme::RraidA)
            };
            let (p, all) = run_point(&cfg).unwrap();
            assert!(p.bandwidth_mbps > 0.0);
            for r in &all {
                assert!(r.net_bytes >= 8 << 20, "every byte arrived: {r:?}");
            }
        }
    }
}

#[test]
fn cover_counts_new_bytes_once() {
    let mut r = Vec::new();
    assert_eq!(cover(&mut r, 100, 200), 100);
    assert_eq!(cover(&mut r, 150, 250), 50);
    assert_eq!(cover(&mut r, 0, 50), 50);
    assert_eq!(cover(&mut r, 50, 100), 50);
    assert_eq!(r, vec![(0, 250)]);
    assert_eq!(cover(&mut r, 10, 20), 0);
    assert_eq!(uncovered(&r, 200, 300), 50);
}

#[test]
fn rraid_s_on_the_hand_worked_example() {
    // Everything requested: disk 0 reads 0, 4, 3, 7 at 1.05, 2.05, 3.05, 4.05; block 7 reaches the
    // client at 4.10 and is the last missing one (disk 3 is still on block 3; disks 1 and 2 hold no 7).
    let (r, rounds) = hand_read(Scheme::RraidS, Split::Block);
    assert!(rounds.is_empty());
    assert!((r.latency - 4.10).abs() < 1e-9, "{}", r.latency);
}

#[test]
fn lt_overhead_used_matches_the_codes_layers_measurement() {
    let cfg = Config {
        disks: 16,
        data_bytes: 128 << 16,
        block_bytes: 1 << 16,
        redundancy: 3.0,
        accesses: 60,
        seed: 7,
        ..Config::baseline(Scheme::RobuStore)
    };
    let (p, all) = run_point(&cfg).unwrap();
    let sim: Vec<f64> = all.iter().map(|r| r.reception_overhead.unwrap()).collect();
    let measured = lt_overhead_measured(128, 512, 1.0, 0.5, 60, 10, 99).unwrap();
    let stats = |v: &[f64]| {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64;
        (m, (var / v.len() as f64).sqrt())
    };
    let (ms, ses) = stats(&sim);
    let (mm, sem) = stats(&measured);
    assert_eq!(p.reception_overhead, Some(ms));
    let tol = 4.0 * (ses * ses + sem * sem).sqrt() + 0.01;
    assert!(
        (ms - mm).abs() < tol,
        "simulator {ms:.4} vs codes layer {mm:.4} (tolerance {tol:.4})"
    );
    assert!(mm > 0.05 && mm < 1.5, "a plausible LT overhead: {mm}");
}

#[test]
fn a_fixed_seed_replays_exactly() {
    for scheme in Scheme::ALL {
        let cfg = Config {
            disks: 8,
            data_bytes: 32 << 20,
            accesses: 3,
            variation: Variation::Background(BgInterval::Uniform {
                lo: 6e-3,
                hi: 200e-3,
            }),
            cache: true,
            cache_bytes: 8 << 20,
            ..Config::baseline(scheme)
        };
        let a = run_point(&cfg).unwrap();
        let b = run_point(&cfg).unwrap();
        assert_eq!(a, b, "{scheme}");
        let other = run_point(&Config { seed: 2, ..cfg }).unwrap();
        assert_ne!(a.0, other.0, "{scheme}: another seed changes the result");
    }
}

#[test]
fn writes_and_read_after_write_complete() {
    for scheme in Scheme::ALL {
        for op in [Op::Write, Op::ReadAfterWrite] {
            let cfg = Config {
                disks: 8,
                data_bytes: 16 << 20,
                accesses: 2,
                op,
                ..Config::baseline(scheme)
            };
            let (p, _) = run_point(&cfg).unwrap();
            assert!(p.bandwidth_mbps > 0.0, "{scheme} {op:?}");
            if op == Op::Write {
                // A write sends every stored byte: D x size at least.
                assert!(
                    p.io_overhead >= cfg.redundancy - 1e-9,
                    "{scheme}: {}",
                    p.io_overhead
                );
            }
        }
    }
}

#[test]
fn bad_settings_are_one_clear_error() {
    let e = Config {
        redundancy: 1.5,
        ..Config::baseline(Scheme::RraidS)
    }
    .validate()
    .unwrap_err();
    assert!(e.to_string().starts_with("redundancy:"), "{e}");
    let e = Config {
        disks: 200,
        ..Config::baseline(Scheme::RobuStore)
    }
    .validate()
    .unwrap_err();
    assert!(e.to_string().starts_with("disks:"), "{e}");
    let e = Config {
        redundancy: 0.0,
        ..Config::baseline(Scheme::RobuStore)
    }
    .validate()
    .unwrap_err();
    assert!(e.to_string().contains("D > 0"), "{e}");
}

#[test]
fn raptorq_overhead_used_matches_the_codes_layers_measurement() {
    // RobuSTore with `--code raptorq`: every read stops when the number of symbols the codes layer's
    // RaptorQ needed (sampled from real decodes for this K and N) has arrived. An independent
    // measurement with the codes layer (other orders, other seed) gives the same overhead.
    let cfg = Config {
        disks: 16,
        data_bytes: 128 << 16,
        block_bytes: 1 << 16,
        redundancy: 3.0,
        code: Rateless::RaptorQ,
        accesses: 40,
        seed: 11,
        ..Config::baseline(Scheme::RobuStore)
    };
    let (p, all) = run_point(&cfg).unwrap();
    let sim: Vec<f64> = all.iter().map(|r| r.reception_overhead.unwrap()).collect();
    assert_eq!(sim.len(), 40, "every access took the RaptorQ path");
    assert!(
        sim.iter().all(|&x| x >= 0.0),
        "no access decoded from fewer than K symbols: {sim:?}"
    );
    let measured: Vec<f64> = raptorq_needed(128, 512, 60, 1234)
        .unwrap()
        .into_iter()
        .map(|n| n as f64 / 128.0 - 1.0)
        .collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (ms, mm) = (mean(&sim), mean(&measured));
    assert_eq!(p.reception_overhead, Some(ms));
    // RaptorQ decodes from K symbols, or a very few more, almost always (RFC 6330: failure
    // probability ~1e-2 at K, ~1e-4 at K + 1): both means within 2% of K, and within 1% of each other.
    assert!(
        ms < 0.02 && mm < 0.02,
        "simulator {ms:.4}, codes layer {mm:.4}"
    );
    assert!(
        (ms - mm).abs() < 0.01,
        "simulator {ms:.4} vs codes layer {mm:.4}"
    );
    // The LT code of the same K, N needs far more: the two paths are not mixed up.
    let lt = run_point(&Config {
        code: Rateless::Lt { c: 1.0, delta: 0.5 },
        accesses: 10,
        ..cfg.clone()
    })
    .unwrap()
    .0;
    assert!(
        lt.reception_overhead.unwrap() > ms + 0.05,
        "LT {:?} vs RaptorQ {ms}",
        lt.reception_overhead
    );
    // RaptorQ's lower overhead shows in the bytes moved, too.
    assert!(
        p.io_overhead < lt.io_overhead,
        "{} vs {}",
        p.io_overhead,
        lt.io_overhead
    );
}

/// A read over a pool of fixed-rate disks, infinite links (so the closed forms below are exact).
fn fixed_cfg(scheme: Scheme, spec: TestbedSpec) -> Config {
    Config {
        disks: 8,
        data_bytes: 64 << 20,
        block_bytes: 1 << 20,
        redundancy: if scheme == Scheme::Raid0 { 0.0 } else { 1.0 },
        variation: Variation::Fixed(spec),
        link_rate: 1e15,
        accesses: 4,
        ..Config::baseline(scheme)
    }
}

#[test]
fn fixed_rates_replay_per_seed() {
    // The 16 cells of Table 6-1 as a testbed; each access draws 8 of the 16.
    let rates: Vec<f64> = TABLE_6_1.iter().flatten().copied().collect();
    for scheme in Scheme::ALL {
        for op in [Op::Read, Op::Write, Op::ReadAfterWrite] {
            let cfg = Config {
                data_bytes: 16 << 20,
                accesses: 3,
                op,
                ..fixed_cfg(scheme, TestbedSpec::from_rates(&rates))
            };
            let a = run_point(&cfg).unwrap();
            assert!(a.0.bandwidth_mbps > 0.0, "{scheme} {op:?}");
            assert_eq!(a, run_point(&cfg).unwrap(), "{scheme} {op:?}");
            let other = run_point(&Config { seed: 2, ..cfg }).unwrap();
            assert_ne!(
                a.0, other.0,
                "{scheme} {op:?}: another seed draws other disks"
            );
        }
    }
}

#[test]
fn equal_fixed_disks_match_the_closed_form() {
    // 16 disks at r = 10 MB/s, H = 8, 64 blocks of 1 MiB. RAID-0 reads K/H = 8 blocks per disk, all
    // in parallel: latency = 2 x metadata + RTT + (K/H) B/r exactly (no positioning with fixed rates,
    // infinite links). RobuSTore finishes when the block that makes the object decodable arrives:
    // blocks arrive in rounds of H (one per disk, simultaneously), so with `received` blocks taken
    // the latency is 2 x metadata + RTT + ceil(received/H) B/r + one block's decode, exactly. (Within
    // 1 µs: the 10^15 B/s links still take nanoseconds per 512 KiB request.)
    let r = 10.0 * MB;
    let spec = TestbedSpec::from_rates(&[10.0; 16]);
    let raid = fixed_cfg(Scheme::Raid0, spec.clone());
    let base = 2.0 * raid.metadata_cost + raid.rtt;
    let round = (1 << 20) as f64 / r;
    let (p, all) = run_point(&raid).unwrap();
    let t_raid = base + 8.0 * round;
    for a in &all {
        assert!(
            (a.latency - t_raid).abs() < 1e-6,
            "RAID-0 {} vs {t_raid}",
            a.latency
        );
    }
    let want = (64 << 20) as f64 / t_raid / MB;
    assert!(
        (p.bandwidth_mbps - want).abs() < 1e-6 * want,
        "{}",
        p.bandwidth_mbps
    );
    for code in [Rateless::RaptorQ, Rateless::Lt { c: 1.0, delta: 0.5 }] {
        let cfg = Config {
            code,
            ..fixed_cfg(Scheme::RobuStore, spec.clone())
        };
        let (q, all) = run_point(&cfg).unwrap();
        for a in &all {
            let received = ((1.0 + a.reception_overhead.unwrap()) * 64.0).round();
            let rounds = (received / 8.0).ceil();
            let t = base + rounds * round + (1 << 20) as f64 / cfg.decode_rate;
            assert!(
                (a.latency - t).abs() < 1e-6,
                "{code:?}: {} vs {t}",
                a.latency
            );
        }
        if code == Rateless::RaptorQ {
            // RaptorQ decodes from K blocks (K + 1 at worst in the codes layer's measurement): at most
            // one round more than RAID-0's 8, plus a 2 ms decode, so within 1/8 + 1% of its bandwidth.
            let ratio = q.bandwidth_mbps / p.bandwidth_mbps;
            assert!(
                ratio > 1.0 / (1.0 + 1.0 / 8.0) - 0.01 && ratio <= 1.0,
                "{ratio}"
            );
        }
    }
}

#[test]
fn a_disks_delay_adds_to_its_round_trip() {
    // Every disk 4 ms further away: RAID-0's read takes 4 ms longer (one request out, the last
    // block back), exactly.
    let near = fixed_cfg(Scheme::Raid0, TestbedSpec::from_rates(&[10.0; 8]));
    let mut far_spec = TestbedSpec::from_rates(&[10.0; 8]);
    for d in &mut far_spec.disks {
        d.delay_ms = 4.0;
    }
    let far = fixed_cfg(Scheme::Raid0, far_spec);
    let (a, b) = (run_point(&near).unwrap().0, run_point(&far).unwrap().0);
    assert!(
        (b.latency_mean_s - a.latency_mean_s - 4e-3).abs() < 1e-9,
        "{} {}",
        a.latency_mean_s,
        b.latency_mean_s
    );
}

#[test]
fn testbed_json_round_trips() {
    let mut spec = TestbedSpec::from_rates(&[53.0, 0.52]);
    spec.disks[1].delay_ms = 2.5;
    let back = TestbedSpec::from_json(&spec.to_json()).unwrap();
    assert_eq!(back, spec);
    let dir = std::env::temp_dir().join(format!("ecstack-testbed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("testbed.json");
    std::fs::write(&path, spec.to_json()).unwrap();
    let arg = format!("@{}", path.display());
    assert_eq!(TestbedSpec::parse_arg(&arg).unwrap(), spec);
    assert_eq!(
        TestbedSpec::parse_arg(" 53 ,0.52").unwrap(),
        TestbedSpec::from_rates(&[53.0, 0.52])
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_testbeds_are_one_clear_line() {
    let line = |r: Result<TestbedSpec, SimError>| {
        let e = r.unwrap_err().to_string();
        assert!(!e.contains('\n') && e.starts_with("disk-mbps: "), "{e}");
        e
    };
    assert!(line(TestbedSpec::parse_arg("")).contains("empty list"));
    assert!(
        line(TestbedSpec::parse_arg("10,0")).contains("disk 1: rate 0 MB/s must be finite and > 0")
    );
    assert!(line(TestbedSpec::parse_arg("10,-2")).contains("disk 1: rate -2"));
    assert!(line(TestbedSpec::parse_arg("inf")).contains("disk 0: rate inf"));
    assert!(line(TestbedSpec::parse_arg("NaN,1")).contains("disk 0: rate NaN"));
    assert!(line(TestbedSpec::parse_arg("10,,3")).contains("disk 1: \"\" is not a number"));
    assert!(line(TestbedSpec::parse_arg("10,fast")).contains("\"fast\" is not a number"));
    assert!(line(TestbedSpec::parse_arg("@/nonexistent/testbed.json"))
        .contains("/nonexistent/testbed.json"));
    assert!(line(TestbedSpec::from_json("{\"version\": 2, \"disks\": []}")).contains("version 2"));
    assert!(line(TestbedSpec::from_json("{\"version\": 1, \"disks\": []}")).contains("no disks"));
    assert!(line(TestbedSpec::from_json(
        "{\"version\": 1, \"disks\": [{\"mbps\": 1, \"delay_ms\": -1}]}"
    ))
    .contains("delay -1 ms"));
    assert!(line(TestbedSpec::from_json(
        "{\"version\": 1, \"disks\": [{\"mbs\": 1}]}"
    ))
    .contains("not a testbed JSON"));
    // Fewer disks than H.
    let e = fixed_cfg(Scheme::RobuStore, TestbedSpec::from_rates(&[10.0; 4]))
        .validate()
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "disks: an access uses 8 disks but the testbed has only 4"
    );
    // An invalid spec built in code is refused by the configuration too.
    let e = fixed_cfg(Scheme::RobuStore, TestbedSpec::from_rates(&[0.0; 8]))
        .validate()
        .unwrap_err()
        .to_string();
    assert!(e.contains("disk 0: rate 0"), "{e}");
}
