//! ZombieNAND in the SSD model (thesis ch. 4): Algorithm 4 against hand-computed values, Eq. 4.1,
//! fallback capacity and latency per mode, Algorithm 6's victim choice on hand-built states, and tiny
//! drives run to death with every counter cross-checked by an independent tally.

use ecstack_device::sim::wear::{
    death_threshold, early_switch_blocks, oxide_stress, pages_in_mode,
};
use ecstack_device::{
    BlockInfo, BlockStatus, CellMode, DeathRule, GcPolicy, LifeAverage, SplitMix64, SsdConfig,
    SsdModel, WearAction, WearModel, WearPhysics, ZombieWear,
};

#[test]
fn algorithm_4_matches_hand_computed_stress() {
    // (0.08·c^0.62 + 5·c^0.30) · 1.6e-19 / 2.15e-17, computed by hand / a calculator:
    // c = 1: 5.08 · 0.0074418605 = 0.0378046512 V.
    let cases = [
        (0, 0.0),
        (1, 0.0378046511627907),
        (1000, 0.3386932049623366),
        (6000, 0.636923659131065),
        (75000, 1.706429484039088),
    ];
    for (c, want) in cases {
        let got = oxide_stress(c);
        assert!(
            (got - want).abs() < 1e-12,
            "stress({c}) = {got}, want {want}"
        );
    }
    assert_eq!(death_threshold(CellMode::Tlc), oxide_stress(1000));
    assert_eq!(death_threshold(CellMode::Mlc), oxide_stress(6000));
    assert_eq!(death_threshold(CellMode::Slc), oxide_stress(75000));
    // No recovery: strictly increasing over the whole range a block can live.
    let mut last = -1.0;
    for c in 0..=75_000 {
        let s = oxide_stress(c);
        assert!(s > last, "stress not increasing at {c}");
        last = s;
    }
}

#[test]
fn eq_4_1_pool_sizes() {
    // floor((R - W) · B / 2^(S-2)).
    assert_eq!(early_switch_blocks(0.10, 0.05, 128, CellMode::Tlc), 3); // 0.05·128/2 = 3.2
    assert_eq!(early_switch_blocks(0.30, 0.05, 128, CellMode::Tlc), 16); // 0.25·128/2 = 16
    assert_eq!(early_switch_blocks(0.10, 0.05, 128, CellMode::Mlc), 6); // 0.05·128 = 6.4
    assert_eq!(early_switch_blocks(0.20, 0.05, 512, CellMode::Tlc), 38); // 0.15·512/2 = 38.4
    assert_eq!(early_switch_blocks(0.30, 0.05, 512, CellMode::Mlc), 128); // 0.25·512 = 128
    assert_eq!(early_switch_blocks(0.05, 0.05, 512, CellMode::Tlc), 0);
    assert_eq!(early_switch_blocks(0.03, 0.05, 512, CellMode::Tlc), 0);
}

fn block(mode: CellMode, erase_count: u32, mode_since_erase: u32) -> BlockInfo {
    BlockInfo {
        erase_count,
        mode_since_erase,
        early_switch: false,
        valid: 0,
        write_ptr: 0,
        pages: 128,
        mode,
        status: BlockStatus::Free,
    }
}

#[test]
fn fallback_steps_at_rated_counts_with_bit_capacity() {
    let mut z = ZombieWear::new(WearPhysics::OxideStress, true, 128, CellMode::Tlc);
    let keep = WearAction::Keep;
    assert_eq!(z.after_erase(0, &block(CellMode::Tlc, 999, 0)), keep);
    assert_eq!(
        z.after_erase(0, &block(CellMode::Tlc, 1000, 0)),
        WearAction::Switch {
            mode: CellMode::Mlc,
            pages: 85 // 128 · 2/3
        }
    );
    assert_eq!(z.after_erase(0, &block(CellMode::Mlc, 5999, 1000)), keep);
    assert_eq!(
        z.after_erase(0, &block(CellMode::Mlc, 6000, 1000)),
        WearAction::Switch {
            mode: CellMode::Slc,
            pages: 42 // 128 · 1/3
        }
    );
    assert_eq!(z.after_erase(0, &block(CellMode::Slc, 74_999, 6000)), keep);
    assert_eq!(
        z.after_erase(0, &block(CellMode::Slc, 75_000, 6000)),
        WearAction::Retire
    );
    // The unswitching baseline retires at the rated count.
    let mut base = ZombieWear::new(WearPhysics::OxideStress, false, 128, CellMode::Tlc);
    assert_eq!(
        base.after_erase(0, &block(CellMode::Tlc, 1000, 0)),
        WearAction::Retire
    );
    // MLC drives: 128 -> 64 SLC pages.
    assert_eq!(pages_in_mode(128, CellMode::Mlc, CellMode::Slc), 64);
    // The per-mode counter the seed rejects gives a zombie MLC block a fresh 6,000 cycles.
    let mut naive = ZombieWear::new(WearPhysics::PerModeCounter, true, 128, CellMode::Tlc);
    assert_eq!(
        naive.after_erase(0, &block(CellMode::Mlc, 6999, 1000)),
        keep
    );
    assert!(matches!(
        naive.after_erase(0, &block(CellMode::Mlc, 7000, 1000)),
        WearAction::Switch { .. }
    ));
    // Remaining life: volts below the mode's threshold.
    let r = z.remaining_life(&block(CellMode::Tlc, 1, 0));
    assert!((r - (0.3386932049623366 - 0.0378046511627907)).abs() < 1e-12);
}

/// Switches every block to `mode` at its first erase.
#[derive(Debug)]
struct SwitchTo(CellMode, u32);

impl WearModel for SwitchTo {
    fn after_erase(&mut self, _b: u32, info: &BlockInfo) -> WearAction {
        if info.mode == self.0 {
            WearAction::Keep
        } else {
            WearAction::Switch {
                mode: self.0,
                pages: self.1,
            }
        }
    }
}

#[test]
fn fallback_block_capacity_and_latency_per_mode() {
    // TLC drive with 8 KiB logical pages (Table 4.1's TLC page): an MLC block needs 2 pages of 4 KiB
    // per logical page, an SLC block 4 pages of 2 KiB. Transfer of 8 KiB at 300 MB/s = 27,307 ns.
    let xfer = 27_307;
    for (mode, pages, prog, read) in [
        (CellMode::Tlc, 12, 1_000_000, 150_000),
        (CellMode::Mlc, 8, 2 * 500_000, 2 * 50_000),
        (CellMode::Slc, 4, 4 * 200_000, 4 * 25_000),
    ] {
        let cfg = SsdConfig {
            blocks: 16,
            pages_per_block: 12,
            page_size: 8192,
            op: 0.9,
            gc_low: 0.0,
            gc_high: 0.0,
            mode: CellMode::Tlc,
            // Most remaining life first: every block takes its turn (greedy's LIFO buckets starve
            // the oldest all-invalid blocks here).
            gc_policy: leveled(0, 0.0),
            ..SsdConfig::default()
        };
        let logical = cfg.logical_pages();
        let mut m = SsdModel::with_wear(cfg, Box::new(SwitchTo(mode, pages))).unwrap();
        let mut rng = SplitMix64::new(5);
        for _ in 0..5_000 {
            m.write_page(rng.next_u64() % logical).unwrap();
        }
        // Blocks switch at their first erase (Algorithm 6 then prefers the switched blocks: more
        // rated life left, so a few native blocks may never be erased here).
        let mut capacity = 0;
        let mut switched = 0;
        for b in m.blocks() {
            if b.erase_count >= 1 {
                assert_eq!((b.mode, b.pages), (mode, pages), "{b:?}");
                switched += 1;
            } else {
                assert_eq!((b.mode, b.pages), (CellMode::Tlc, 12), "{b:?}");
            }
            capacity += b.pages as u64;
        }
        assert!(switched >= 8, "{switched}");
        let s = m.stats();
        assert_eq!(s.capacity_pages, capacity);
        let in_mode = |x: CellMode| m.blocks().iter().filter(|b| b.mode == x).count() as u64;
        assert_eq!(
            (s.blocks_tlc, s.blocks_mlc, s.blocks_slc),
            (
                in_mode(CellMode::Tlc),
                in_mode(CellMode::Mlc),
                in_mode(CellMode::Slc)
            )
        );
        assert!(m.blocks().iter().all(|b| b.write_ptr <= b.pages));
        // A host write without GC costs transfer + program in the block's mode.
        let mut seen = false;
        for _ in 0..50 {
            let t = m.write_page(rng.next_u64() % logical).unwrap();
            if t == xfer + prog {
                seen = true;
            }
            assert!(t >= xfer + prog, "{mode:?}: {t}");
        }
        assert!(seen, "{mode:?}: no GC-free write");
        assert_eq!(m.read_page(0).unwrap(), xfer + read, "{mode:?}");
    }
}

fn small(policy: GcPolicy) -> SsdConfig {
    // 8 blocks x 4 pages, 16 logical pages; GC low = high = 2 free blocks.
    SsdConfig {
        blocks: 8,
        pages_per_block: 4,
        page_size: 4096,
        op: 0.5,
        gc_low: 0.0,
        gc_high: 0.0,
        mode: CellMode::Tlc,
        gc_policy: policy,
        ..SsdConfig::default()
    }
}

fn leveled(early: u32, life_threshold: f64) -> GcPolicy {
    GcPolicy::Leveled {
        life_threshold,
        elements: 1,
        early_switch_blocks: early,
        average: LifeAverage::Group,
    }
}

/// Blocks 0, 1, 2 hold 2 valid pages each, block 3 and 4 four, block 5 is open with 2 pages written,
/// 6 and 7 free. Erase counts (cumulative counter: remaining life = 1000 - count): b0 900, b1 500,
/// b2 100, others 0.
fn hand_built(policy: GcPolicy) -> SsdModel {
    let wear = ZombieWear::new(WearPhysics::CumulativeCounter, true, 4, CellMode::Tlc);
    let mut m = SsdModel::with_wear(small(policy), Box::new(wear)).unwrap();
    for lpn in 0..16 {
        m.write_page(lpn).unwrap();
    }
    for lpn in [0, 1, 4, 5, 8, 9] {
        m.write_page(lpn).unwrap();
    }
    for (b, c) in [(0, 900), (1, 500), (2, 100)] {
        m.set_erase_count(b, c);
    }
    let valid: Vec<u32> = m.blocks().iter().map(|b| b.valid).collect();
    assert_eq!(valid, vec![2, 2, 2, 4, 4, 2, 0, 0]);
    m
}

/// Trigger one GC episode and return the blocks it erased: 12 and 0 fill the open block 5 (blocks 3
/// and 4 drop to 3 valid pages), rewriting 12 invalidates it inside block 5 (3 valid) and opens block
/// 6, leaving 1 free block < 2: one victim from bucket 2 ({0, 1, 2}) brings it back to 2.
fn gc_once(m: &mut SsdModel) -> Vec<u32> {
    let before = m.erase_counts();
    m.write_page(12).unwrap();
    m.write_page(0).unwrap();
    m.write_page(12).unwrap();
    assert_eq!(m.stats().gc_invocations, 1);
    let after = m.erase_counts();
    (0..8)
        .filter(|&b| after[b] != before[b])
        .map(|b| b as u32)
        .collect()
}

#[test]
fn algorithm_6_victim_choice_on_hand_built_states() {
    // Greedy: the first block of the lowest bucket (bucket lists are LIFO: block 2 went in last).
    let mut m = hand_built(GcPolicy::Greedy);
    assert_eq!(m.next_victim(), Some(2));
    assert_eq!(gc_once(&mut m), vec![2]);

    // Baseline wear-leveling (no pool): within bucket 2 the most remaining life first: block 2 has
    // 900 cycles left, block 1 500, block 0 100. avg over the 8 blocks = (100+500+900+5·1000)/8 =
    // 812.5; with threshold 0.5 block 0 (100 < 406) is skipped but block 2 is chosen anyway.
    let mut m = hand_built(leveled(0, 0.5));
    assert_eq!(m.next_victim(), Some(2));
    assert_eq!(gc_once(&mut m), vec![2]);

    // Early-switch pool = block 0: it wins its bucket although it is the most worn.
    let mut m = hand_built(leveled(1, 0.9));
    assert!(m.block(0).early_switch && !m.block(1).early_switch);
    assert_eq!(m.next_victim(), Some(0));
    assert_eq!(gc_once(&mut m), vec![0]);

    // Threshold 1.0: the mean is 812.5, so blocks 0 (100) and 1 (500) are skipped and block 2 (900)
    // is kept. Wear block 2 down to 700 left: the mean drops to 787.5, all of bucket 2 is skipped and
    // the walk goes on: after gc_once's writes bucket 3 holds the fresh blocks 3, 4 and 5 (tie on
    // life: lowest number first).
    let mut m = hand_built(leveled(0, 1.0));
    assert_eq!(m.next_victim(), Some(2));
    m.set_erase_count(2, 300);
    // Before gc_once's writes no other bucket has a reclaimable block: the walk falls back to the
    // skipped blocks in table order (most life first: block 2).
    assert_eq!(m.next_victim(), Some(2));
    assert_eq!(gc_once(&mut m), vec![3]);
    assert!(m.stats().wear_level_skips >= 3);
}

/// Independent tally of what the host saw, to cross-check the model's counters.
#[derive(Default, Debug)]
struct Tally {
    writes: u64,
    reads: u64,
    latency_ns: u64,
}

fn run_to_death(cfg: &SsdConfig, wear: ZombieWear, seed: u64) -> (SsdModel, Tally, String) {
    let mut m = SsdModel::with_wear(cfg.clone(), Box::new(wear)).unwrap();
    let n = m.logical_pages();
    let mut rng = SplitMix64::new(seed);
    let mut tally = Tally::default();
    for lpn in 0..n {
        tally.latency_ns += m.write_page(lpn).unwrap();
        tally.writes += 1;
    }
    let err = loop {
        let lpn = rng.next_u64() % n;
        let r = if rng.next_u64() % 4 == 0 {
            m.read_page(lpn).map(|t| (t, false))
        } else {
            m.write_page(lpn).map(|t| (t, true))
        };
        match r {
            Ok((t, w)) => {
                tally.latency_ns += t;
                if w {
                    tally.writes += 1;
                } else {
                    tally.reads += 1;
                }
            }
            Err(e) => break e.to_string(),
        }
        assert!(tally.writes < 50_000_000, "drive never died");
    };
    (m, tally, err)
}

fn check_counters(m: &SsdModel, tally: &Tally, err: &str, wear: &ZombieWear) {
    let s = m.stats();
    let cfg = m.config();
    assert!(err.contains("worn out"), "{err}");
    assert!(s.dead && m.death().is_some());
    assert_eq!(s.host_page_writes, tally.writes);
    assert_eq!(s.host_page_reads, tally.reads);
    // The failing write adds nothing: modeled time is the sum of the latencies the host saw.
    assert_eq!(s.modeled_ns, tally.latency_ns);
    assert_eq!(s.flash_page_writes, s.host_page_writes + s.gc_copies);
    let erases: u64 = m.blocks().iter().map(|b| b.erase_count as u64).sum();
    assert_eq!(s.erases, erases);
    assert_eq!(s.erases, s.gc_victims);
    let mut switches = 0;
    let mut capacity = 0;
    let mut retired = 0;
    for b in m.blocks() {
        let steps = match b.mode {
            CellMode::Tlc => 0,
            CellMode::Mlc => 1,
            CellMode::Slc => 2,
        };
        switches += steps;
        // Never switched before the rated count of the mode it left; alive below its current one.
        let (lo, hi) = match b.mode {
            CellMode::Tlc => (0, 1000),
            CellMode::Mlc => (1000, 6000),
            CellMode::Slc => (6000, 75_000),
        };
        if b.status == BlockStatus::Retired {
            retired += 1;
            assert!(b.erase_count >= hi, "{b:?}");
            // A retired block keeps the mode it died in.
        } else {
            assert!(b.erase_count >= lo && b.erase_count < hi, "{b:?}");
            capacity += pages_in_mode(cfg.pages_per_block, cfg.mode, b.mode) as u64;
            assert_eq!(
                b.pages,
                pages_in_mode(cfg.pages_per_block, cfg.mode, b.mode)
            );
        }
        if b.mode != cfg.mode {
            assert!(wear.fallback);
            assert_eq!(
                b.mode_since_erase,
                if b.mode == CellMode::Mlc { 1000 } else { 6000 }
            );
        }
    }
    assert_eq!(s.mode_switches, switches);
    assert_eq!(s.retired_blocks, retired);
    assert_eq!(s.capacity_pages, capacity);
    // Death rule: spare below the high-watermark pool + the open block (or GC stuck).
    let need = (cfg.high_blocks() as u64 + 1) * cfg.pages_per_block as u64;
    let mapped = (0..s.logical_pages)
        .filter(|&l| m.mapping(l).is_some())
        .count() as u64;
    assert_eq!(s.valid_pages, mapped);
    // The prefill mapped every page; only the write that found the drive dead may have lost its own.
    assert!(
        mapped + 1 >= s.logical_pages,
        "{mapped} of {}",
        s.logical_pages
    );
    let by_rule = match cfg.death_rule {
        DeathRule::Capacity => s.capacity_pages < s.logical_pages + need,
        DeathRule::RetiredBlocks => s.retired_blocks > cfg.retired_blocks_max(),
    };
    assert!(
        by_rule || err.contains("no reclaimable") || err.contains("no free block"),
        "died under {:?} with capacity {} (logical {} + {need}), {} retired: {err}",
        cfg.death_rule,
        s.capacity_pages,
        s.logical_pages,
        s.retired_blocks
    );
}

fn tiny_drive(early: u32) -> SsdConfig {
    SsdConfig {
        blocks: 32,
        pages_per_block: 6,
        page_size: 4096,
        op: 0.30,
        gc_low: 0.02,
        gc_high: 0.05,
        mode: CellMode::Tlc,
        gc_policy: leveled(early, 0.9),
        ..SsdConfig::default()
    }
}

#[test]
fn tiny_drive_runs_to_death_with_counters_cross_checked() {
    // 32 blocks x 6 pages, 30% reserve, GC 2%/5% (low = 2, high = 2 blocks): Eq. 4.1 gives
    // floor(0.25 · 32 / 2) = 4 early-switch blocks.
    let early = early_switch_blocks(0.30, 0.05, 32, CellMode::Tlc);
    assert_eq!(early, 4);
    let base_wear = ZombieWear::new(WearPhysics::OxideStress, false, 6, CellMode::Tlc);
    let (m, tally, err) = run_to_death(&tiny_drive(0), base_wear.clone(), 7);
    check_counters(&m, &tally, &err, &base_wear);
    let base = m.stats();
    assert_eq!(base.mode_switches, 0);
    assert!(base.retired_blocks > 0);

    let zombie_wear = ZombieWear::new(WearPhysics::OxideStress, true, 6, CellMode::Tlc);
    let (m, tally, err) = run_to_death(&tiny_drive(early), zombie_wear.clone(), 7);
    check_counters(&m, &tally, &err, &zombie_wear);
    let zombie = m.stats();
    assert!(zombie.mode_switches > 0);
    assert!(zombie.blocks_slc + zombie.blocks_mlc > 0);
    eprintln!(
        "baseline {} host writes, ZombieNAND {} ({:.2}x)",
        base.host_page_writes,
        zombie.host_page_writes,
        zombie.host_page_writes as f64 / base.host_page_writes as f64
    );
    assert!(zombie.host_page_writes > base.host_page_writes);
    // Early-switch blocks wear faster than the rest.
    let mean = |f: &dyn Fn(&BlockInfo) -> bool| {
        let v: Vec<f64> = m
            .blocks()
            .iter()
            .filter(|b| f(b))
            .map(|b| b.erase_count as f64)
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    assert!(mean(&|b| b.early_switch) > mean(&|b| !b.early_switch));
}

#[test]
fn oxide_stress_deaths_equal_a_cumulative_erase_counter() {
    let run = |physics, policy| {
        let wear = ZombieWear::new(physics, true, 6, CellMode::Tlc);
        let cfg = SsdConfig {
            gc_policy: policy,
            ..tiny_drive(0)
        };
        let (m, _, _) = run_to_death(&cfg, wear, 11);
        (m.stats(), m.erase_counts())
    };
    // With a GC that does not rank by remaining life, every decision is the same: identical runs.
    let oxide = run(WearPhysics::OxideStress, GcPolicy::Greedy);
    let counter = run(WearPhysics::CumulativeCounter, GcPolicy::Greedy);
    assert_eq!(oxide.0.host_page_writes, counter.0.host_page_writes);
    assert_eq!(oxide.0.modeled_ns, counter.0.modeled_ns);
    assert_eq!(oxide.1, counter.1);
    // Algorithm 6 ranks and skips by remaining life, volts in one and erases in the other (a
    // nonlinear map, so the skip rule and cross-mode ranking differ): close but not identical.
    let early = leveled(early_switch_blocks(0.30, 0.05, 32, CellMode::Tlc), 0.9);
    let oxide = run(WearPhysics::OxideStress, early);
    let counter = run(WearPhysics::CumulativeCounter, early);
    let ratio = oxide.0.host_page_writes as f64 / counter.0.host_page_writes as f64;
    eprintln!("Algorithm 6 lifetime oxide/counter = {ratio:.5}");
    assert!((ratio - 1.0).abs() < 0.05, "{ratio}");
    // The per-mode counter the seed rejects overestimates the zombie life.
    let naive = run(WearPhysics::PerModeCounter, early);
    assert!(naive.0.host_page_writes > oxide.0.host_page_writes);
}

#[test]
fn default_drive_never_dies_and_keeps_greedy() {
    let cfg = SsdConfig::default();
    assert_eq!(cfg.gc_policy, GcPolicy::Greedy);
    let m = SsdModel::new(cfg).unwrap();
    let s = m.stats();
    assert_eq!(s.capacity_pages, 16_384 * 64);
    assert!(!s.dead);
}

#[test]
fn saved_state_resumes_exactly() {
    let early = early_switch_blocks(0.30, 0.05, 32, CellMode::Tlc);
    let wear = || {
        Box::new(ZombieWear::new(
            WearPhysics::OxideStress,
            true,
            6,
            CellMode::Tlc,
        ))
    };
    let mut a = SsdModel::with_wear(tiny_drive(early), wear()).unwrap();
    let n = a.logical_pages();
    let mut rng = SplitMix64::new(3);
    for _ in 0..50_000 {
        a.write_page(rng.next_u64() % n).unwrap();
    }
    let saved = a.save_state();
    let mut b = SsdModel::with_wear(tiny_drive(early), wear()).unwrap();
    b.load_state(&saved).unwrap();
    assert_eq!(b.save_state(), saved);
    let mut rb = SplitMix64::new(rng.state());
    loop {
        let (x, y) = (rng.next_u64() % n, rb.next_u64() % n);
        let (ra, rb_) = (a.write_page(x), b.write_page(y));
        assert_eq!(ra.is_ok(), rb_.is_ok());
        if ra.is_err() {
            break;
        }
    }
    assert_eq!(a.stats(), b.stats());
    assert_eq!(a.erase_counts(), b.erase_counts());
    // Damage is detected; another geometry is refused.
    let mut bad = saved.clone();
    bad[100] ^= 1;
    assert!(b.load_state(&bad).unwrap_err().contains("checksum"));
    let mut other = SsdModel::new(SsdConfig::default()).unwrap();
    assert!(other.load_state(&saved).unwrap_err().contains("blocks"));
}

/// Regression: GC used to keep cleaning after the erase that left too little spare capacity, so the
/// final counters (capacity, switches, erases) differed from the ones the death message reported.
/// Now the erase that kills the drive ends GC: the message and the final stats agree, and nothing
/// changes after death.
#[test]
fn death_message_reports_the_final_counters() {
    let early = early_switch_blocks(0.30, 0.05, 32, CellMode::Tlc);
    for (fallback, early, seed) in [(true, early, 7), (true, 0, 8), (false, 0, 9)] {
        let wear = ZombieWear::new(WearPhysics::OxideStress, fallback, 6, CellMode::Tlc);
        let (mut m, tally, err) = run_to_death(&tiny_drive(early), wear.clone(), seed);
        check_counters(&m, &tally, &err, &wear);
        let s = m.stats();
        let why = m.death().unwrap().to_string();
        assert!(err.ends_with(&why), "{err} / {why}");
        if !why.starts_with("capacity") {
            // GC got stuck first: no counter in the message to compare.
            continue;
        }
        let num = |after: &str| -> u64 {
            let i = why
                .find(after)
                .unwrap_or_else(|| panic!("{after} in {why}"));
            why[..i]
                .split_whitespace()
                .last()
                .unwrap()
                .trim_start_matches('(')
                .parse()
                .unwrap()
        };
        assert_eq!(num(" pages leaves"), s.capacity_pages, "{why}");
        assert_eq!(
            num(" spare pages"),
            s.capacity_pages - s.logical_pages,
            "{why}"
        );
        assert_eq!(num(" mode switches"), s.mode_switches, "{why}");
        assert_eq!(num(" blocks retired"), s.retired_blocks, "{why}");
        assert_eq!(num(" erases"), s.erases, "{why}");
        // The killing erase is the last one: the capacity is the first below the need.
        let need = m.spare_needed_pages();
        assert!(s.capacity_pages < s.logical_pages + need);
        let lost = if fallback { 6 - 4 } else { 6 }; // TLC 6 pages -> MLC 4, or a retired block
        assert!(s.capacity_pages + lost >= s.logical_pages + need, "{why}");
        // A dead drive changes nothing more.
        assert!(m.write_page(0).is_err() && m.read_page(0).is_err());
        assert_eq!(m.stats(), s);
    }
}

/// The checkpoint format is fixed: a deterministic state, alive (mid-run, every table in use) and
/// dead (with its death reason), saves to the same bytes as when the format was written down. A
/// change here breaks every checkpoint already on disk.
#[test]
fn saved_state_bytes_are_stable() {
    use ecstack_device::sim::ssd::fnv1a64;
    let early = early_switch_blocks(0.30, 0.05, 32, CellMode::Tlc);
    let mut m = SsdModel::with_wear(
        tiny_drive(early),
        Box::new(ZombieWear::new(
            WearPhysics::OxideStress,
            true,
            6,
            CellMode::Tlc,
        )),
    )
    .unwrap();
    let n = m.logical_pages();
    let mut rng = SplitMix64::new(11);
    for _ in 0..20_000 {
        m.write_page(rng.next_u64() % n).unwrap();
    }
    m.trim_page(rng.next_u64() % n).unwrap();
    let alive = m.save_state();
    while m.write_page(rng.next_u64() % n).is_ok() {}
    let dead = m.save_state();
    assert!(m.stats().dead);
    assert_eq!(
        (alive.len(), fnv1a64(&alive)),
        (2564, 0xa932_4f97_8dd0_846a)
    );
    assert_eq!((dead.len(), fnv1a64(&dead)), (2732, 0xf1d1_3978_54fa_fcb2));
    // And each loads back into a fresh drive of the same geometry, saving the same bytes again.
    for saved in [&alive, &dead] {
        let mut b = SsdModel::new(tiny_drive(early)).unwrap();
        b.load_state(saved).unwrap();
        assert_eq!(&b.save_state(), saved);
    }
}

/// A wear model that does what the test says: the first `switches` erases of a TLC block switch it
/// (to SLC with 3 of its 4 pages: one page lost), the next `retires` erases retire the block, every
/// later erase keeps it.
#[derive(Debug)]
struct Scripted {
    switches: u32,
    retires: u32,
}

impl WearModel for Scripted {
    fn after_erase(&mut self, _block: u32, info: &BlockInfo) -> WearAction {
        if self.switches > 0 && info.mode == CellMode::Tlc {
            self.switches -= 1;
            return WearAction::Switch {
                mode: CellMode::Slc,
                pages: 3,
            };
        }
        if self.retires > 0 {
            self.retires -= 1;
            return WearAction::Retire;
        }
        WearAction::Keep
    }
}

/// 16 blocks × 4 pages, R = 25% (48 logical pages, 16 spare), GC watermarks 0 (low = high = 2
/// blocks): the capacity rule needs (2 + 1) · 4 = 12 spare pages; the retired-block rule allows
/// floor((0.25 − 0) · 16) = 4 retired blocks.
fn scripted_drive(rule: DeathRule, switches: u32, retires: u32) -> SsdModel {
    let cfg = SsdConfig {
        blocks: 16,
        pages_per_block: 4,
        page_size: 4096,
        op: 0.25,
        gc_low: 0.0,
        gc_high: 0.0,
        mode: CellMode::Tlc,
        gc_policy: GcPolicy::Greedy,
        death_rule: rule,
        ..SsdConfig::default()
    };
    assert_eq!(cfg.retired_blocks_max(), 4);
    SsdModel::with_wear(cfg, Box::new(Scripted { switches, retires })).unwrap()
}

/// Rewrite logical pages 0..24 in order (a live set of 6 blocks' worth, so GC always finds room and
/// only the death rule can end the drive; in order, so whole blocks empty and ~10 blocks take turns)
/// until it dies or `writes_max` writes are done: the death, if any.
fn churn(m: &mut SsdModel, writes_max: u64) -> Option<String> {
    for i in 0..writes_max {
        if let Err(e) = m.write_page(i % 24) {
            return Some(e.to_string());
        }
    }
    None
}

#[test]
fn death_rule_capacity_counts_switched_and_retired_pages() {
    // Retirements cost 4 pages each: spare 16 − 4k < 12 first at k = 2.
    let mut m = scripted_drive(DeathRule::Capacity, 0, 100);
    let err = churn(&mut m, 100_000).expect("the drive must die");
    assert_eq!(
        (m.stats().retired_blocks, m.stats().erases),
        (2, 2),
        "{err}"
    );
    assert!(
        err.contains("capacity 56 pages leaves 8 spare pages"),
        "{err}"
    );
    // Switches cost 1 page each: 16 − k < 12 first at k = 5.
    let mut m = scripted_drive(DeathRule::Capacity, 100, 0);
    let err = churn(&mut m, 100_000).expect("the drive must die");
    assert_eq!(m.stats().mode_switches, 5, "{err}");
    assert_eq!(m.stats().retired_blocks, 0);
    assert!(
        err.contains("capacity 59 pages leaves 11 spare pages"),
        "{err}"
    );
}

#[test]
fn death_rule_retired_blocks_counts_only_dead_blocks() {
    // Switches past the capacity rule's 5 do not end the drive.
    let mut m = scripted_drive(DeathRule::RetiredBlocks, 100, 0);
    assert_eq!(churn(&mut m, 100_000), None);
    let s = m.stats();
    assert!(s.mode_switches > 5, "{s:?}");
    assert_eq!(s.capacity_pages, 64 - s.mode_switches);
    assert!(!s.dead && s.retired_blocks == 0);
    // Retirements: 4 are allowed, the 5th kills the drive (the capacity rule: the 2nd).
    let mut m = scripted_drive(DeathRule::RetiredBlocks, 0, 100);
    let err = churn(&mut m, 100_000).expect("the drive must die");
    let s = m.stats();
    assert_eq!((s.retired_blocks, s.erases), (5, 5), "{err}");
    assert!(
        err.contains("5 blocks retired, more than the 4 dead blocks"),
        "{err}"
    );
    // Exactly 4 retirements: alive.
    let mut m = scripted_drive(DeathRule::RetiredBlocks, 0, 4);
    assert_eq!(churn(&mut m, 100_000), None);
    assert_eq!(m.stats().retired_blocks, 4);
}

#[test]
fn retired_blocks_budget_is_eq_4_1_numerator() {
    let cfg = |op, blocks| SsdConfig {
        blocks,
        op,
        gc_high: 0.05,
        ..SsdConfig::default()
    };
    // (R − W) · B: 0.25 · 128 = 32, 0.05 · 128 = 6.4 → 6, 0.25 · 2048 = 512; R ≤ W: 0.
    assert_eq!(cfg(0.30, 128).retired_blocks_max(), 32);
    assert_eq!(cfg(0.10, 128).retired_blocks_max(), 6);
    assert_eq!(cfg(0.30, 2048).retired_blocks_max(), 512);
    assert_eq!(cfg(0.05, 128).retired_blocks_max(), 0);
}

#[test]
fn algorithm_6_average_over_the_group_or_the_whole_element() {
    // 8 blocks × 4 pages, pool = block 0. Write 0..16 (blocks 0–3 full), then 4, 5, 8, 9 (block 4)
    // and 12 (block 5, open): valid pages b0 4, b1 2, b2 2, b3 3, b4 4, b5 1; b6, b7 free.
    let build = |average| {
        let policy = GcPolicy::Leveled {
            life_threshold: 0.98,
            elements: 1,
            early_switch_blocks: 1,
            average,
        };
        let wear = ZombieWear::new(WearPhysics::CumulativeCounter, true, 4, CellMode::Tlc);
        let mut m = SsdModel::with_wear(small(policy), Box::new(wear)).unwrap();
        for lpn in (0..16).chain([4, 5, 8, 9, 12]) {
            m.write_page(lpn).unwrap();
        }
        let valid: Vec<u32> = m.blocks().iter().map(|b| b.valid).collect();
        assert_eq!(valid, vec![4, 2, 2, 3, 4, 1, 0, 0]);
        // Remaining life (1000 − erases): b1 500, b2 900, every other block 1000.
        m.set_erase_count(1, 500);
        m.set_erase_count(2, 100);
        m
    };
    // Group: the 7 normal blocks, (500 + 900 + 5 · 1000) / 7 = 914.29; 0.98 × that = 896.0, so
    // b2 (900) is kept and wins bucket 2 (most life first); b1 (500) is skipped.
    let m = build(LifeAverage::Group);
    assert!((m.mean_remaining_life() - 6400.0 / 7.0).abs() < 1e-9);
    assert_eq!(m.next_victim(), Some(2));
    // Element: all 8 blocks, 7400 / 8 = 925; 0.98 × 925 = 906.5 skips b2 as well, and the walk
    // goes on to bucket 3: b3.
    let m = build(LifeAverage::Element);
    assert!((m.mean_remaining_life() - 925.0).abs() < 1e-9);
    assert_eq!(m.next_victim(), Some(3));
}

#[test]
fn tiny_drive_runs_to_death_under_the_retired_blocks_rule() {
    let early = early_switch_blocks(0.30, 0.05, 32, CellMode::Tlc);
    for fallback in [false, true] {
        let wear = ZombieWear::new(WearPhysics::OxideStress, fallback, 6, CellMode::Tlc);
        let cfg = SsdConfig {
            death_rule: DeathRule::RetiredBlocks,
            ..tiny_drive(if fallback { early } else { 0 })
        };
        let (m, tally, err) = run_to_death(&cfg, wear.clone(), 7);
        check_counters(&m, &tally, &err, &wear);
    }
}
