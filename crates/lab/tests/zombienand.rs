//! ZombieNAND lifetimes and the synthetic grid at CI scale: sharded + merged equals one machine,
//! a killed run resumed from its checkpoint ends exactly like an uninterrupted one, and the
//! scheme never loses to the baseline on these points.

use ecstack_device::{CellMode, DeathRule, LifeAverage, WearPhysics};
use ecstack_lab::zombienand::grid::{self, GridConfig};
use ecstack_lab::zombienand::life::{
    run_lifetime, Checkpoint, Drive, LifeConfig, Scheme, Workload, BATCH, LIFE_THRESHOLD,
};

#[test]
fn sharded_grid_merges_to_the_one_machine_result() {
    let cfg = GridConfig::quick();
    let whole = grid::run_grid(&cfg, (0, 1), 2, &|_| {}).unwrap();
    assert_eq!(whole.results.len(), 4);
    let parts = vec![
        grid::run_grid(&cfg, (1, 3), 1, &|_| {}).unwrap(),
        grid::run_grid(&cfg, (0, 3), 1, &|_| {}).unwrap(),
        grid::run_grid(&cfg, (2, 3), 1, &|_| {}).unwrap(),
    ];
    let merged = grid::merge(parts.clone()).unwrap();
    assert_eq!(
        serde_json::to_string(&merged).unwrap(),
        serde_json::to_string(&whole).unwrap()
    );
    assert!(
        grid::merge(parts[..2].to_vec()).is_err(),
        "a missing shard is refused"
    );
    for r in &whole.results {
        assert!(
            r.lifetime_ratio >= 0.95, // the seed: never below 1.0; ours: within a few percent at small pools (docs/zombienand.md)
            "{:?}: {}",
            r.point,
            r.lifetime_ratio
        );
        assert!(r.baseline.death.contains("worn out") && r.zombie.death.contains("worn out"));
        assert_eq!(r.baseline.stats.mode_switches, 0);
    }
    // With 30% reserve and a 10% working set (the corner where the seed finds its gains) the pool
    // is cycled far ahead of the rest, switches down to SLC and the drive clearly outlives the
    // baseline.
    let best = whole
        .results
        .iter()
        .find(|r| r.point.reserve == 0.30 && r.point.working_set == 0.1)
        .unwrap();
    assert!(best.lifetime_ratio > 1.5, "{}", best.lifetime_ratio);
    assert!(best.zombie.stats.blocks_slc > 0);
    assert!(best.zombie.early_erase_mean > 2.0 * best.zombie.normal_erase_mean);
    assert_eq!(grid::heat_maps(&whole).unwrap().len(), 2);
    let csv = grid::csv(&whole).unwrap();
    assert_eq!(csv.lines().count(), 1 + whole.results.len(), "{csv}");
    assert!(
        csv.starts_with("mode,read_share,reserve,working_set,"),
        "{csv}"
    );
    // The rule line, a blank line, the header, its rule and the 4 points.
    let md = grid::markdown(&whole);
    assert!(
        md.starts_with("Death rule: capacity; Algorithm 6 average: group.\n\n"),
        "{md}"
    );
    assert_eq!(md.lines().count(), 8, "{md}");
}

/// "Kills" the lifetime of `cfg` on `w` after its first checkpoint to `path`: a progress callback
/// that panics after it.
fn kill_after_first_checkpoint(cfg: &LifeConfig, w: &Workload, path: &std::path::Path) {
    let mut calls = 0;
    let killed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_lifetime(cfg, w, Some(Checkpoint { path, every_s: 0.0 }), &mut |_| {
            calls += 1;
            if calls == 1 {
                panic!("killed");
            }
        })
    }));
    assert!(killed.is_err(), "the run ended before its first checkpoint");
}

#[test]
fn killed_run_resumes_from_its_checkpoint() {
    let cfg = LifeConfig {
        drive: Drive::Tiny,
        mode: CellMode::Tlc,
        reserve: 0.3,
        scheme: Scheme::Zombie,
        physics: WearPhysics::OxideStress,
        life_threshold: LIFE_THRESHOLD,
        death_rule: DeathRule::Capacity,
        average: LifeAverage::Group,
        seed: 9,
    };
    let w = Workload::Uniform {
        working_set: 0.5,
        read_share: 0.25,
    };
    let full = run_lifetime(&cfg, &w, None, &mut |_| {}).unwrap();
    assert!(
        full.ops > 2 * BATCH as u64,
        "{} requests: too short to kill",
        full.ops
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.ck");
    kill_after_first_checkpoint(&cfg, &w, &path);
    assert!(path.exists(), "no checkpoint written");
    let resumed = run_lifetime(
        &cfg,
        &w,
        Some(Checkpoint {
            path: &path,
            every_s: 1e9,
        }),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(resumed.host_bytes_written, full.host_bytes_written);
    assert_eq!(resumed.ops, full.ops);
    assert_eq!(resumed.stats, full.stats);
    assert_eq!(resumed.series, full.series);
    // Another configuration refuses the checkpoint.
    let other = LifeConfig { seed: 10, ..cfg };
    let e = run_lifetime(
        &other,
        &w,
        Some(Checkpoint {
            path: &path,
            every_s: 1e9,
        }),
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("another run"), "{e}");
}

/// Every drive preset runs with its default reserve (`ecstack sim zombienand --drive tiny` used to
/// fail at 10%: the tiny drive's GC pool takes 9.4% of its flash), and on the tiny drive the
/// default leaves room for the fallback to outlive the baseline.
#[test]
fn every_drive_runs_with_its_default_reserve() {
    for drive in [Drive::Synthetic, Drive::Trace, Drive::Tiny] {
        for scheme in [Scheme::Baseline, Scheme::Zombie] {
            let cfg = LifeConfig {
                drive,
                mode: CellMode::Tlc,
                reserve: drive.default_reserve(),
                scheme,
                physics: WearPhysics::OxideStress,
                life_threshold: LIFE_THRESHOLD,
                death_rule: DeathRule::Capacity,
                average: LifeAverage::Group,
                seed: 1,
            };
            let m = cfg.model().unwrap_or_else(|e| panic!("{drive:?}: {e}"));
            // Room for at least one switch past the GC pool: a default run is not dead on arrival.
            let spare = m.stats().capacity_pages - m.logical_pages();
            let (_, _, ppb) = drive.geometry();
            assert!(spare >= m.spare_needed_pages() + ppb as u64, "{drive:?}");
        }
    }
    // 10% is what used to be every drive's default: refused on the tiny drive with one line.
    let tiny = |reserve| LifeConfig {
        drive: Drive::Tiny,
        mode: CellMode::Tlc,
        reserve,
        scheme: Scheme::Zombie,
        physics: WearPhysics::OxideStress,
        life_threshold: LIFE_THRESHOLD,
        death_rule: DeathRule::Capacity,
        average: LifeAverage::Group,
        seed: 1,
    };
    assert!(tiny(0.10).model().is_err());
    let w = Workload::Uniform {
        working_set: 0.1,
        read_share: 0.0,
    };
    let z = run_lifetime(&tiny(Drive::Tiny.default_reserve()), &w, None, &mut |_| {}).unwrap();
    let b = run_lifetime(
        &LifeConfig {
            scheme: Scheme::Baseline,
            ..tiny(Drive::Tiny.default_reserve())
        },
        &w,
        None,
        &mut |_| {},
    )
    .unwrap();
    assert!(z.stats.mode_switches > 0);
    assert!(z.host_bytes_written > b.host_bytes_written);
}

fn rec(op: ecstack_trace::Op, offset: u64, len: u64) -> ecstack_lab::Result<ecstack_trace::Record> {
    Ok(ecstack_trace::Record {
        time_ns: 0,
        volume: 0,
        file: 0,
        op,
        offset,
        len,
    })
}

#[test]
fn trace_remap_keeps_the_first_distinct_pages_and_sequential_runs() {
    use ecstack_lab::zombienand::life::Access;
    use ecstack_lab::zombienand::trace::remap;
    use ecstack_trace::Op::{Discard, Read, Write};
    let k = 4096;
    let records = vec![
        rec(Write, 100 * k, 3 * k), // pages 100..103 -> 0, 1, 2
        rec(Discard, 0, 64 * k),    // dropped
        rec(Read, 101 * k, 1),      // page 101 -> 1
        rec(Write, 7 * k + 5, k),   // pages 7, 8 -> 3, 4
        rec(Write, 99 * k, 3 * k),  // pages 99, 100, 101 -> 5, 0, 1: two runs
        rec(Write, 500 * k, 2 * k), // two new pages: 6 + 2 > limit 7, cut here
        rec(Write, 100 * k, k),     // never reached
    ];
    let t = remap("t", records.into_iter(), &ecstack_trace::Names::new, 7).unwrap();
    let a = |write, lpn, pages| Access { write, lpn, pages };
    assert_eq!(
        *t.accesses,
        vec![
            a(true, 0, 3),
            a(false, 1, 1),
            a(true, 3, 2),
            a(true, 5, 1),
            a(true, 0, 2)
        ]
    );
    assert!(t.cut);
    assert_eq!(t.records, 4);
    assert_eq!(t.distinct_pages, 6);
    assert_eq!((t.read_pages, t.write_pages), (1, 8));
    // 8 page writes over 6 distinct written pages.
    assert!((t.write_reuse - 8.0 / 6.0).abs() < 1e-12);
    // The reuse CDF of the part used: from (0, 0) to (1, 1), non-decreasing.
    let cdf = &t.reuse_cdf;
    assert_eq!(cdf.first(), Some(&[0.0, 0.0]));
    assert_eq!(cdf.last(), Some(&[1.0, 1.0]));
    assert!(cdf.windows(2).all(|w| w[1][1] >= w[0][1]));
}

#[test]
fn quick_trace_driven_runs_to_death_with_outputs() {
    use ecstack_lab::zombienand::trace::{self, TraceRunConfig};
    let cfg = TraceRunConfig::quick();
    let r = trace::run_traces(&cfg, 2, &|_| {}).unwrap();
    assert_eq!(r.traces.len(), 2);
    assert_eq!(r.results.len(), 2 * 2);
    let (_, per, ppb) = Drive::Tiny.geometry();
    for t in &r.traces {
        assert!(t.distinct_pages <= (per * ppb / 2) as u64, "{t:?}");
        assert!(t.write_pages > 0 && !t.reuse_cdf.is_empty());
    }
    for x in &r.results {
        assert!(x.baseline.death.contains("worn out") && x.zombie.death.contains("worn out"));
        assert_eq!(x.baseline.stats.mode_switches, 0);
        assert!(x.zombie.stats.mode_switches > 0, "{}", x.trace);
        // The loop really ran the trace many times over.
        assert!(
            x.baseline.ops
                > 10 * r
                    .traces
                    .iter()
                    .find(|t| t.name == x.trace)
                    .unwrap()
                    .accesses
                    .len() as u64
        );
        assert!(
            x.lifetime_ratio >= 0.95,
            "{} {}: {}",
            x.trace,
            x.reserve,
            x.lifetime_ratio
        );
        assert!(!trace::latency_over_life(x).is_empty());
    }
    let dir = tempfile::tempdir().unwrap();
    trace::write_outputs(&r, dir.path()).unwrap();
    for f in [
        "report.json",
        "traces.md",
        "traces.csv",
        "reuse-cdf.svg",
        "lifetime-tlc.svg",
        "latency-tlc-reserve20.svg",
        "latency-tlc-reserve30.svg",
    ] {
        let b = std::fs::read(dir.path().join(f)).unwrap();
        assert!(b.len() > 100, "{f}");
    }
    eprintln!("{}", trace::markdown(&r));
}

/// Regression: the full grid listed a 5% reserve the synthetic drive refuses, and the error came
/// only after every other point had run. Every point of the full grid is valid now, and a bad one
/// is refused before anything runs.
#[test]
fn full_grid_points_fit_the_drive_and_bad_points_fail_first() {
    let full = GridConfig::full();
    for p in full.points() {
        for scheme in [Scheme::Baseline, Scheme::Zombie] {
            LifeConfig {
                drive: full.drive,
                mode: p.mode,
                reserve: p.reserve,
                scheme,
                physics: full.physics,
                life_threshold: LIFE_THRESHOLD,
                death_rule: DeathRule::Capacity,
                average: LifeAverage::Group,
                seed: 1,
            }
            .model()
            .unwrap_or_else(|e| panic!("{p:?}: {e}"));
        }
    }
    let bad = GridConfig {
        reserves: vec![0.3, 0.05],
        ..GridConfig::full()
    };
    let e = grid::run_grid(&bad, (0, 1), 1, &|_| panic!("a point ran")).unwrap_err();
    assert!(e.to_string().contains("over-provisioning"), "{e}");
}

/// Hand-written trace files in each real format the seed's traces come in (MSR Cambridge CSV as
/// SNIA IOTTA ships it, with its header; UMass/SPC with optional trailing fields and two ASUs;
/// blkparse text from a Linux capture) go through the whole trace-driven path: parsed by the
/// trace layer, remapped, run to death as baseline and ZombieNAND. The expected record and page
/// counts come from the generator below, not from the code under test. No real trace file is on
/// this machine (docs/zombienand.md), so this is the path a user's file takes.
#[test]
fn real_format_trace_files_run_to_death() {
    use ecstack_lab::zombienand::trace::{self, TraceRunConfig};
    use std::collections::HashSet;
    use std::fmt::Write as _;
    let dir = tempfile::tempdir().unwrap();
    // 240 requests of 4-16 KiB over 96 pages of two volumes, 60 % writes, hottest pages first.
    let mut rng = ecstack_base::Rng::new(11);
    let reqs: Vec<(u32, bool, u64, u64)> = (0..240)
        .map(|i| {
            let vol = (i % 5 == 0) as u32;
            let page = rng.below(24) * rng.below(2) + rng.below(48);
            let pages = 1 + rng.below(4);
            (vol, rng.chance(0.6) || i == 0, page, pages)
        })
        .collect();
    let mut distinct = HashSet::new();
    for &(vol, _, page, pages) in &reqs {
        for p in page..page + pages {
            distinct.insert((vol, p));
        }
    }
    let (mut msr, mut spc, mut blk) = (
        String::from("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n"),
        String::new(),
        String::new(),
    );
    for (i, &(vol, write, page, pages)) in reqs.iter().enumerate() {
        let (off, len) = (page * 4096, pages * 4096);
        let _ = writeln!(
            msr,
            "{},hm,{vol},{},{off},{len},{}",
            128_166_372_003_061_629u64 + i as u64 * 13_000,
            if write { "Write" } else { "Read" },
            90 + i
        );
        let _ = writeln!(
            spc,
            "{vol},{},{len},{},{:.6}{}",
            off / 512,
            if write { "w" } else { "r" },
            i as f64 * 0.0013,
            if i % 7 == 0 { ",Alpha/NT" } else { "" }
        );
        let _ = writeln!(
            blk,
            "  8,{}    1  {:>6}     {:.9}  4242  Q  {} {} + {} [fio]",
            16 * vol,
            i + 1,
            i as f64 * 0.0013,
            if write { "WS" } else { "R" },
            off / 512,
            len / 512
        );
        // blkparse also prints the other actions of a request: only Q is counted.
        let _ = writeln!(
            blk,
            "  8,{}    1  {:>6}     {:.9}  4242  C  {} {} + {} [0]",
            16 * vol,
            i + 1,
            i as f64 * 0.0013 + 0.0001,
            if write { "WS" } else { "R" },
            off / 512,
            len / 512
        );
    }
    blk.push_str("CPU1 (8,0):\n Reads Queued:           0,        0KiB\n");
    let files = [
        ("hm_0.csv", msr),
        ("Financial1.spc", spc),
        ("sda.blktrace.txt", blk),
    ];
    let mut paths = Vec::new();
    for (name, text) in &files {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        paths.push(p.to_string_lossy().into_owned());
    }
    let cfg = TraceRunConfig {
        traces: paths.clone(),
        reserves: vec![0.3],
        ..TraceRunConfig::quick()
    };
    let r = trace::run_traces(&cfg, 2, &|_| {}).unwrap();
    assert_eq!(r.traces.len(), 3);
    let writes = reqs.iter().filter(|q| q.1).map(|q| q.3).sum::<u64>();
    let reads = reqs.iter().filter(|q| !q.1).map(|q| q.3).sum::<u64>();
    for (t, (name, _)) in r.traces.iter().zip(&files) {
        assert_eq!(&t.name, name);
        assert_eq!(t.records, reqs.len() as u64, "{name}");
        assert!(!t.cut, "{name}");
        assert_eq!(t.distinct_pages, distinct.len() as u64, "{name}");
        assert_eq!((t.read_pages, t.write_pages), (reads, writes), "{name}");
    }
    assert_eq!(r.results.len(), 3);
    for x in &r.results {
        assert!(
            x.baseline.death.contains("worn out"),
            "{}",
            x.baseline.death
        );
        assert!(x.zombie.death.contains("worn out"), "{}", x.zombie.death);
        assert!(x.zombie.stats.mode_switches > 0, "{}", x.trace);
        assert!(
            x.lifetime_ratio >= 0.95,
            "{}: {}",
            x.trace,
            x.lifetime_ratio
        );
    }
    // The three files hold the same requests: the same remapped stream, the same lifetimes.
    assert_eq!(r.traces[0].accesses, r.traces[1].accesses);
    assert_eq!(r.traces[0].accesses, r.traces[2].accesses);
    assert_eq!(
        r.results[0].zombie.host_bytes_written,
        r.results[2].zombie.host_bytes_written
    );

    // A trace with no write in the part used would never wear the drive: refused, not looped.
    let ro = dir.path().join("reads.csv");
    std::fs::write(&ro, "128166372003061629,hm,0,Read,0,4096,1\n").unwrap();
    let cfg = TraceRunConfig {
        traces: vec![ro.to_string_lossy().into_owned()],
        ..cfg
    };
    let e = trace::run_traces(&cfg, 1, &|_| {}).unwrap_err();
    assert!(e.to_string().contains("no write"), "{e}");
}

/// A grid killed after two points (its journal holds them and a line torn by the kill) resumes: only
/// the other points run, and the report equals an uninterrupted run's byte for byte. A journal of
/// another grid is refused before anything runs.
#[test]
fn a_killed_grid_resumes_from_its_journal() {
    use std::io::Write;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cfg = GridConfig::quick();
    let whole = grid::run_grid(&cfg, (0, 1), 2, &|_| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("grid-journal.jsonl");
    // A full journaled run writes a header and one line per point.
    let again = grid::run_grid_resumable(&cfg, (0, 1), 2, &|_| {}, &journal).unwrap();
    assert_eq!(
        serde_json::to_string(&again).unwrap(),
        serde_json::to_string(&whole).unwrap()
    );
    let text = std::fs::read_to_string(&journal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + whole.results.len());
    // The kill: the header, two finished points, and half of a third line.
    let mut f = std::fs::File::create(&journal).unwrap();
    for l in &lines[..3] {
        writeln!(f, "{l}").unwrap();
    }
    f.write_all(&lines[3].as_bytes()[..lines[3].len() / 2])
        .unwrap();
    drop(f);
    let ran = AtomicUsize::new(0);
    let resumed = grid::run_grid_resumable(
        &cfg,
        (0, 1),
        1,
        &|_| {
            ran.fetch_add(1, Ordering::Relaxed);
        },
        &journal,
    )
    .unwrap();
    assert_eq!(ran.load(Ordering::Relaxed), whole.results.len() - 2);
    assert_eq!(
        serde_json::to_string(&resumed).unwrap(),
        serde_json::to_string(&whole).unwrap()
    );
    // Whole again: the torn line was cut, the rerun point appended.
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap().lines().count(),
        1 + whole.results.len()
    );
    // Another grid's journal is refused by name, nothing run.
    let other = GridConfig {
        seed: 2,
        ..GridConfig::quick()
    };
    let e = grid::run_grid_resumable(&other, (0, 1), 1, &|_| panic!("a point ran"), &journal)
        .unwrap_err();
    assert!(e.to_string().contains("another grid"), "{e}");
}

/// A trace-driven run killed after two (trace, mode, reserve) pairs, with a third pair's baseline
/// lifetime checkpointed part-way, resumes: the journaled pairs are taken, the checkpointed lifetime
/// continues, only the other pairs run, and the report equals an uninterrupted run's byte for byte;
/// no checkpoint is left behind. A journal of another run (other seed) is refused before anything
/// runs.
#[test]
fn a_killed_trace_driven_run_resumes_from_its_journal_and_checkpoints() {
    use ecstack_lab::zombienand::trace::{self, Resume, TraceRunConfig};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cfg = TraceRunConfig::quick();
    let whole = trace::run_traces(&cfg, 2, &|_| {}).unwrap();
    let n = whole.results.len();
    assert!(n >= 4);
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("trace-journal.jsonl");
    let resume = Resume {
        journal: &journal,
        checkpoint_dir: dir.path(),
        checkpoint_every_s: 0.0,
    };
    // The kill: after the second finished pair (one thread, in report order).
    let finished = AtomicUsize::new(0);
    let killed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        trace::run_traces_resumable(
            &cfg,
            1,
            &|_| {
                if finished.fetch_add(1, Ordering::Relaxed) == 1 {
                    panic!("killed");
                }
            },
            resume,
        )
    }));
    assert!(killed.is_err());
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap().lines().count(),
        1 + 2,
        "header and two pairs"
    );
    // The rerun reads the third pair's baseline checkpoint: a damaged one fails that pair (the
    // others run and are journaled).
    let ck = trace::checkpoint_path(dir.path(), 2, Scheme::Baseline);
    std::fs::write(&ck, b"ECZNCK01 damaged by the kill").unwrap();
    let ran = AtomicUsize::new(0);
    let count = |_: &trace::TraceResult| {
        ran.fetch_add(1, Ordering::Relaxed);
    };
    let e = trace::run_traces_resumable(&cfg, 1, &count, resume).unwrap_err();
    assert!(e.to_string().contains(&*ck.to_string_lossy()), "{e}");
    assert_eq!(ran.swap(0, Ordering::Relaxed), n - 3);
    // Now leave a real checkpoint of that lifetime part-way, as a kill would.
    let x = &whole.results[2];
    let t = whole.traces.iter().find(|t| t.name == x.trace).unwrap();
    let lc = cfg.life_config(x.mode, x.reserve, Scheme::Baseline);
    let w = t.workload();
    assert!(x.baseline.ops > 2 * BATCH as u64, "too short to kill");
    std::fs::remove_file(&ck).unwrap();
    kill_after_first_checkpoint(&lc, &w, &ck);
    assert!(ck.exists());
    // The last rerun: only the third pair runs, its baseline from the checkpoint.
    let resumed = trace::run_traces_resumable(
        &cfg,
        1,
        &count,
        Resume {
            checkpoint_every_s: 1e9,
            ..resume
        },
    )
    .unwrap();
    assert_eq!(ran.load(Ordering::Relaxed), 1);
    assert_eq!(
        serde_json::to_string(&resumed).unwrap(),
        serde_json::to_string(&whole).unwrap()
    );
    assert!(!ck.exists(), "a finished pair's checkpoint was left behind");
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap().lines().count(),
        1 + n
    );
    // Another run's journal is refused by name, nothing run.
    let other = TraceRunConfig {
        seed: 2,
        ..TraceRunConfig::quick()
    };
    let e = trace::run_traces_resumable(&other, 1, &|_| panic!("a pair ran"), resume).unwrap_err();
    assert!(e.to_string().contains("another trace-driven run"), "{e}");
}

/// `death_rule` and `average` reach the model: the same tiny ZombieNAND lifetime ends differently
/// under each, the retired-block rule's drive dies of dead blocks or a stuck GC (never of spare
/// capacity), and the grid report names both.
#[test]
fn death_rule_and_average_reach_the_model() {
    let cfg = |death_rule, average| LifeConfig {
        drive: Drive::Tiny,
        mode: CellMode::Tlc,
        reserve: 0.30,
        scheme: Scheme::Zombie,
        physics: WearPhysics::OxideStress,
        life_threshold: LIFE_THRESHOLD,
        death_rule,
        average,
        seed: 1,
    };
    let w = Workload::Uniform {
        working_set: 0.1,
        read_share: 0.0,
    };
    let run = |c: &LifeConfig| run_lifetime(c, &w, None, &mut |_| {}).unwrap();
    let cap = run(&cfg(DeathRule::Capacity, LifeAverage::Group));
    assert!(cap.death.contains("spare pages"), "{}", cap.death);
    let ret = run(&cfg(DeathRule::RetiredBlocks, LifeAverage::Group));
    assert!(
        ret.death.contains("blocks retired, more than")
            || ret.death.contains("no reclaimable")
            || ret.death.contains("no free block"),
        "{}",
        ret.death
    );
    assert!(!ret.death.contains("spare pages"), "{}", ret.death);
    // More flash may be lost to switches: at least as many switches, and a longer life.
    assert!(ret.stats.mode_switches >= cap.stats.mode_switches);
    assert!(ret.host_bytes_written > cap.host_bytes_written);
    let elem = run(&cfg(DeathRule::Capacity, LifeAverage::Element));
    assert_ne!(elem.host_bytes_written, cap.host_bytes_written);

    let mut g = GridConfig::quick();
    g.reserves = vec![0.30];
    g.working_sets = vec![0.1];
    g.death_rule = DeathRule::RetiredBlocks;
    g.average = LifeAverage::Element;
    let r = grid::run_grid(&g, (0, 1), 1, &|_| {}).unwrap();
    assert_eq!(
        r.results[0].zombie.config.death_rule,
        DeathRule::RetiredBlocks
    );
    assert_eq!(r.results[0].baseline.config.average, LifeAverage::Element);
    assert!(
        grid::markdown(&r).starts_with("Death rule: retired-blocks; Algorithm 6 average: element.")
    );
}
