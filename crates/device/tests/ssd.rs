//! SSD model tests: exact write amplification for sequential fills, greedy GC inside the published
//! analytic bounds for uniform random writes, TRIM, and hand-computed counters.

use ecstack_device::{
    BlockDevice, BlockInfo, CellMode, Pattern, SimSsd, SsdConfig, SsdModel, WearAction, WearModel,
    Workload,
};

fn eplog() -> SsdConfig {
    SsdConfig::default()
}

#[test]
fn sequential_fill_is_wa_one_without_gc() {
    let mut m = SsdModel::new(eplog()).unwrap();
    let n = m.logical_pages();
    assert_eq!(n, 891_289); // floor(16384 * 64 * 0.85)
    for lpn in 0..n {
        m.write_page(lpn).unwrap();
    }
    let s = m.stats();
    assert_eq!(s.host_page_writes, n);
    assert_eq!(s.flash_page_writes, n);
    assert_eq!(s.write_amplification, 1.0);
    assert_eq!(s.gc_invocations, 0);
    assert_eq!(s.erases, 0);
    assert_eq!(s.valid_pages, n);
    // A second sequential pass invalidates whole blocks in order: GC runs but never copies.
    for lpn in 0..n {
        m.write_page(lpn).unwrap();
    }
    let s = m.stats();
    assert!(s.gc_invocations > 0);
    assert_eq!(s.gc_copies, 0);
    assert_eq!(s.flash_page_writes, 2 * n);
    assert_eq!(s.write_amplification, 1.0);
}

/// Principal branch of Lambert W for x in [-1/e, 0), by Newton's method.
fn lambert_w0(x: f64) -> f64 {
    let mut w: f64 = -0.5;
    for _ in 0..100 {
        let ew = w.exp();
        let f = w * ew - x;
        w -= f / (ew * (w + 1.0));
    }
    w
}

#[test]
fn uniform_random_wa_within_greedy_bounds() {
    // EPLOG §5.2 Exp 2 geometry: 16384 blocks x 64 pages, 15% OP, GC below 5% clean blocks, greedy.
    let cfg = eplog();
    let mut m = SsdModel::new(cfg.clone()).unwrap();
    let n = m.logical_pages();
    for lpn in 0..n {
        m.write_page(lpn).unwrap();
    }
    let mut w = Workload::new(Pattern::Uniform, n, 42).unwrap();
    // Warm up to steady state (2 x the logical space), then measure over 2 x more.
    for _ in 0..2 * n {
        m.write_page(w.next_unit()).unwrap();
    }
    let before = m.stats();
    for _ in 0..2 * n {
        m.write_page(w.next_unit()).unwrap();
    }
    let after = m.stats();
    let wa = (after.flash_page_writes - before.flash_page_writes) as f64
        / (after.host_page_writes - before.host_page_writes) as f64;

    // Analytic bounds for greedy GC under uniform random writes. In steady state the GC low watermark
    // keeps ~`low_blocks` blocks clean plus one open block, so the physical space holding data is
    // T = (blocks - low - 1) * pages and the spare factor is rho = T/U - 1 with U logical pages
    // (15% OP minus the 5% clean pool: rho ~ 0.117).
    let t = (cfg.blocks - cfg.low_blocks() - 1) as f64 * cfg.pages_per_block as f64;
    let u = n as f64;
    let alpha = t / u;
    let rho = alpha - 1.0;
    // Upper bound: Desnoyers, "Analytic modeling of SSD write performance" (SYSTOR 2012) and Xiang &
    // Kurkoski, "An improved analytic expression for write amplification in NAND flash" (ICNC 2012,
    // arXiv:1110.4245): WA = alpha / (alpha + W0(-alpha e^-alpha)). It is exact for FIFO/LRU cleaning
    // and the large-block limit of greedy (Xiang & Kurkoski match greedy simulations to 1%); greedy
    // with finite pages per block can only do better. Our sweep (docs/devices.md) confirms WA rises
    // with pages/block toward it: 2.59 (b=4), 3.87 (16), 4.61 (64), 4.85 (256), 4.94 (1024).
    let upper = alpha / (alpha + lambert_w0(-alpha * (-alpha).exp()));
    // Lower reference: Agarwal & Marrow, "A closed-form expression for write amplification in NAND
    // flash" (IEEE GLOBECOM Workshops 2010): WA = (1 + rho) / (2 rho). At 64 pages per block greedy
    // sits a few percent below it (small blocks help greedy), so the accepted band starts at 0.95 x.
    let agarwal = (1.0 + rho) / (2.0 * rho);
    let lower = 0.95 * agarwal;
    eprintln!("rho_eff = {rho:.4}, band [{lower:.3}, {upper:.3}] (Agarwal {agarwal:.3}), simulated WA = {wa:.3}");
    // Greedy at 15% OP with a 5% clean pool: roughly 4-6.
    assert!(
        agarwal > 4.0 && upper < 6.0,
        "bounds {agarwal} .. {upper} not in the expected 4..6 band"
    );
    assert!(
        wa >= lower,
        "WA {wa:.3} below 0.95 x the Agarwal-Marrow value {agarwal:.3}"
    );
    assert!(
        wa < upper,
        "WA {wa:.3} not below the FIFO/large-block bound {upper:.3}: victims are not greedy"
    );
    assert!(after.gc_victims > 0 && after.erases == after.gc_victims);
}

fn run_with_optional_trim(trim: bool) -> f64 {
    let cfg = SsdConfig {
        blocks: 2048,
        ..eplog()
    };
    let mut m = SsdModel::new(cfg).unwrap();
    let n = m.logical_pages();
    for lpn in 0..n {
        m.write_page(lpn).unwrap();
    }
    // The host stops using the top 20% of its space; with TRIM the FTL learns those pages are dead.
    let live = n * 8 / 10;
    if trim {
        for lpn in live..n {
            m.trim_page(lpn).unwrap();
        }
    }
    let mut w = Workload::new(Pattern::Uniform, live, 9).unwrap();
    for _ in 0..3 * n {
        m.write_page(w.next_unit()).unwrap();
    }
    let before = m.stats();
    for _ in 0..2 * n {
        m.write_page(w.next_unit()).unwrap();
    }
    let after = m.stats();
    (after.flash_page_writes - before.flash_page_writes) as f64
        / (after.host_page_writes - before.host_page_writes) as f64
}

#[test]
fn trim_lowers_write_amplification() {
    let without = run_with_optional_trim(false);
    let with = run_with_optional_trim(true);
    eprintln!("WA without TRIM {without:.3}, with TRIM {with:.3}");
    assert!(
        with < without * 0.8,
        "TRIM did not lower WA enough: {with:.3} vs {without:.3}"
    );
}

fn tiny() -> SsdConfig {
    // 8 blocks x 4 pages, 50% OP -> 16 logical pages; GC low = high = 2 free blocks.
    SsdConfig {
        blocks: 8,
        pages_per_block: 4,
        page_size: 4096,
        op: 0.5,
        gc_low: 0.0,
        gc_high: 0.0,
        ..eplog()
    }
}

#[test]
fn hand_computed_counters_small_script() {
    let cfg = tiny();
    assert_eq!(
        (cfg.logical_pages(), cfg.low_blocks(), cfg.high_blocks()),
        (16, 2, 2)
    );
    let mut m = SsdModel::new(cfg).unwrap();
    // Fill: lpn i -> block i/4, slot i%4. Blocks 0..3 used, 4 free.
    for lpn in 0..16 {
        m.write_page(lpn).unwrap();
    }
    assert_eq!(m.mapping(5), Some(5));
    let s = m.stats();
    assert_eq!((s.free_blocks, s.gc_invocations, s.erases), (4, 0, 0));
    // Overwrite 0,1,4,5 -> block 4; 6,8,9,10 -> block 5. Valid: b0=2, b1=1, b2=1, b3=4, b4=4, b5=4.
    for lpn in [0, 1, 4, 5, 6, 8, 9, 10] {
        m.write_page(lpn).unwrap();
    }
    let s = m.stats();
    assert_eq!(
        (s.free_blocks, s.gc_invocations, s.flash_page_writes),
        (2, 0, 24)
    );
    assert_eq!(m.mapping(10), Some(5 * 4 + 3));
    // Writing lpn 12 fills block 5 -> opens block 6 -> 1 free < 2 -> GC. Greedy victim has 1 valid
    // page (block 1: lpn 7, or block 2: lpn 11): one copy, one erase, then 2 free blocks: stop.
    m.write_page(12).unwrap();
    let s = m.stats();
    assert_eq!(s.host_page_writes, 25);
    assert_eq!(s.gc_invocations, 1);
    assert_eq!(s.gc_victims, 1);
    assert_eq!(s.gc_copies, 1);
    assert_eq!(s.flash_page_reads, 1);
    assert_eq!(s.flash_page_writes, 26);
    assert_eq!(s.erases, 1);
    assert_eq!(s.free_blocks, 2);
    assert_eq!(s.valid_pages, 16);
    assert_eq!(s.write_amplification, 26.0 / 25.0);
    let erased: Vec<usize> = m
        .erase_counts()
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(b, _)| b)
        .collect();
    assert!(erased == vec![1] || erased == vec![2], "erased {erased:?}");
    // The copied page went to slot 0 of block 6, the host page to slot 1.
    let moved = if erased == vec![1] { 7 } else { 11 };
    assert_eq!(m.mapping(moved), Some(6 * 4));
    assert_eq!(m.mapping(12), Some(6 * 4 + 1));
    // Modeled time (MLC, SATA 300): 25 x (transfer 13,653 ns + program 500 us) + copy (read 50 us +
    // program 500 us) + erase 1.5 ms.
    assert_eq!(s.modeled_ns, 25 * (13_653 + 500_000) + 550_000 + 1_500_000);
    // TRIM: unmapped pages no longer count as valid; reading them costs only the transfer.
    m.trim_page(12).unwrap();
    assert_eq!(m.mapping(12), None);
    assert_eq!(m.stats().valid_pages, 15);
    assert_eq!(m.read_page(12).unwrap(), 13_653);
    assert_eq!(m.read_page(0).unwrap(), 13_653 + 50_000);
    assert!(m.write_page(16).is_err());
}

#[test]
fn cell_mode_latencies_follow_table_4_1() {
    for (mode, prog) in [
        (CellMode::Slc, 200_000),
        (CellMode::Mlc, 500_000),
        (CellMode::Tlc, 1_000_000),
    ] {
        let mut m = SsdModel::new(SsdConfig { mode, ..tiny() }).unwrap();
        assert_eq!(m.write_page(0).unwrap(), 13_653 + prog);
        assert_eq!(m.read_page(0).unwrap(), 13_653 + mode.read_ns());
    }
    assert_eq!(CellMode::Tlc.erase_ns(), 3_000_000);
}

#[derive(Debug)]
struct RetireAfter(u32);

impl WearModel for RetireAfter {
    fn after_erase(&mut self, _b: u32, info: &BlockInfo) -> WearAction {
        if info.erase_count >= self.0 {
            WearAction::Retire
        } else {
            WearAction::Keep
        }
    }
}

#[test]
fn wear_hook_retires_blocks_until_worn_out() {
    let mut m = SsdModel::with_wear(tiny(), Box::new(RetireAfter(3))).unwrap();
    let mut w = Workload::new(Pattern::Uniform, 16, 3).unwrap();
    let mut err = None;
    for _ in 0..100_000 {
        if let Err(e) = m.write_page(w.next_unit()) {
            err = Some(e.to_string());
            break;
        }
    }
    let e = err.expect("device should wear out");
    assert!(
        e.contains("worn out") || e.contains("no reclaimable"),
        "{e}"
    );
    assert!(m.stats().retired_blocks > 0);
    assert!(m.blocks().iter().all(|b| b.erase_count <= 3));
}

#[test]
fn sim_ssd_block_device_keeps_data_and_counts_pages() {
    let dev = SimSsd::new(SsdConfig {
        keep_data: true,
        ..tiny()
    })
    .unwrap();
    assert_eq!(dev.capacity(), 16 * 4096);
    let data: Vec<u8> = (0..6000u32).map(|i| (i * 7) as u8).collect();
    dev.write_at(&data, 1000).unwrap(); // pages 0 and 1 (partial both)
    let mut back = vec![0u8; 6000];
    dev.read_at(&mut back, 1000).unwrap();
    assert_eq!(back, data);
    let s = dev.ssd_stats();
    assert_eq!(s.host_page_writes, 2);
    dev.discard(0, 8192).unwrap();
    dev.read_at(&mut back, 1000).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    assert_eq!(dev.ssd_stats().valid_pages, 0);
    assert!(dev.write_at(&[1], 16 * 4096).is_err());
    assert!(SimSsd::new(SsdConfig { op: 0.01, ..tiny() }).is_err());
}

#[derive(Debug)]
struct FallbackAfter(u32);

impl WearModel for FallbackAfter {
    fn after_erase(&mut self, _b: u32, info: &BlockInfo) -> WearAction {
        if info.erase_count >= self.0 && info.mode == CellMode::Tlc {
            WearAction::Switch {
                mode: CellMode::Mlc,
                pages: 3,
            }
        } else {
            WearAction::Keep
        }
    }
}

#[test]
fn wear_hook_bit_mode_fallback_shrinks_blocks_and_changes_latency() {
    // 16 blocks x 4 pages, 16 logical pages: room to lose a slot per block.
    let cfg = SsdConfig {
        blocks: 16,
        pages_per_block: 4,
        op: 0.75,
        mode: CellMode::Tlc,
        ..tiny()
    };
    let mut m = SsdModel::with_wear(cfg, Box::new(FallbackAfter(2))).unwrap();
    let mut w = Workload::new(Pattern::Uniform, 16, 8).unwrap();
    for _ in 0..20_000 {
        m.write_page(w.next_unit()).unwrap();
    }
    let blocks = m.blocks();
    assert!(
        blocks.iter().all(|b| b.erase_count >= 2),
        "every block cycled"
    );
    for b in blocks {
        assert_eq!((b.mode, b.pages), (CellMode::Mlc, 3), "{b:?}");
        assert!(b.write_ptr <= 3 && b.valid <= 3);
    }
    assert_eq!(m.stats().valid_pages, 16);
    // A host write into an MLC block now costs the MLC program latency (when no GC runs).
    let mut saw_mlc_write = false;
    for _ in 0..100 {
        let t = m.write_page(w.next_unit()).unwrap();
        if t == 13_653 + 500_000 {
            saw_mlc_write = true;
        }
        assert_ne!(t, 13_653 + 1_000_000, "TLC latency after fallback");
    }
    assert!(saw_mlc_write);
}

#[test]
fn devices_are_shared_between_threads() {
    use std::sync::Arc;
    let dev: Arc<dyn BlockDevice> =
        ecstack_device::open_spec("metered:ssd:blocks=256,pages=32,data=1").unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let d = Arc::clone(&dev);
            std::thread::spawn(move || {
                for i in 0..500u64 {
                    let off = (t * 1000 + i) * 4096;
                    d.write_at(&[t as u8 + 1; 4096], off).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = dev.stats();
    assert_eq!(s.write_ops, 2000);
    let mut b = [0u8; 4096];
    dev.read_at(&mut b, (3 * 1000 + 7) * 4096).unwrap();
    assert!(b.iter().all(|&x| x == 4));
    match dev.stats().model {
        Some(ecstack_device::ModelStats::Ssd(st)) => assert_eq!(st.host_page_writes, 2000),
        other => panic!("{other:?}"),
    }
}

/// `keeps_data`: a simulated SSD or HDD without `keep_data` reads back zeros and says so, through
/// every wrapper and smart pointer; with `keep_data` (and for real devices) it keeps data.
#[test]
fn keeps_data_is_answered_through_wrappers() {
    use ecstack_device::{FaultConfig, Faulty, MemDevice, Metered, ThrottleConfig, Throttled};
    use std::sync::Arc;
    let small = |keep_data| SsdConfig {
        blocks: 64,
        pages_per_block: 8,
        keep_data,
        ..eplog()
    };
    for keep_data in [false, true] {
        let ssd = SimSsd::new(small(keep_data)).unwrap();
        assert_eq!(ssd.keeps_data(), keep_data);
        let wrapped: Arc<dyn BlockDevice> = Arc::new(Faulty::new(
            Throttled::new(Metered::new(ssd), ThrottleConfig::default()),
            FaultConfig::default(),
        ));
        assert_eq!(wrapped.keeps_data(), keep_data);
        assert_eq!(Box::new(Arc::clone(&wrapped)).keeps_data(), keep_data);
        let hdd =
            ecstack_device::open_spec(&format!("hdd:capacity=1048576,data={}", keep_data as u8))
                .unwrap();
        assert_eq!(hdd.keeps_data(), keep_data);
    }
    assert!(MemDevice::new(4096).unwrap().keeps_data());
}
