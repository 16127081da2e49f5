//! TWEEN (`docs/tween.md`) over real arrays on in-memory devices, checked against a byte-vector
//! model: every acknowledged write reads back after crashes anywhere between NVRAM persists (mid
//! append, mid flush, mid GC) and power cuts of the devices; only full-stripe writes reach the
//! devices; GC reclaims; a corrupt NVRAM region gives one clear error. Seeds replay:
//! `ECSTACK_SEED=<n>` runs one seed, `ECSTACK_SEEDS=<count>` more of them (from seed 1, or from
//! `ECSTACK_SEED_FROM=<k>` for a sweep of fresh ones).

use std::sync::{Arc, Mutex};

use ecstack_array::{
    ArrayConfig, ArrayDevices, GcMode, NvramImage, NvramSpec, SchemeKind, Tween, TweenConfig,
    VictimPolicy,
};
use ecstack_base::Rng;
use ecstack_device::{BlockDevice, DeviceStats, FaultConfig, Faulty, MemDevice, PowerCutPolicy};

type Dev = Arc<Faulty<MemDevice>>;

const CHUNK: u32 = 1024;
const EXTENT: u32 = 512;

fn seeds(default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("ECSTACK_SEED") {
        return vec![s.parse().expect("ECSTACK_SEED is a number")];
    }
    let n = std::env::var("ECSTACK_SEEDS")
        .ok()
        .map(|s| s.parse().expect("ECSTACK_SEEDS is a number"))
        .unwrap_or(default);
    let from: u64 = std::env::var("ECSTACK_SEED_FROM")
        .ok()
        .map(|s| s.parse().expect("ECSTACK_SEED_FROM is a number"))
        .unwrap_or(1);
    (from..from + n).collect()
}

fn faulty(size: u64, seed: u64) -> Dev {
    let cfg = FaultConfig {
        seed,
        power_cut: PowerCutPolicy {
            survive_prob: 0.5,
            torn_prob: 0.5,
            reorder: true,
            sector: 512,
        },
        ..FaultConfig::default()
    };
    Arc::new(Faulty::new(MemDevice::new(size).unwrap(), cfg))
}

struct Rig {
    main: Vec<Dev>,
    meta: Dev,
}

impl Rig {
    fn new(n: usize, main_bytes: u64, seed: u64) -> Rig {
        Rig {
            main: (0..n)
                .map(|i| faulty(main_bytes, seed * 100 + i as u64))
                .collect(),
            meta: faulty(2 << 20, seed * 100 + 99),
        }
    }
    fn devices(&self) -> ArrayDevices {
        ArrayDevices::from_handles(&self.main, &[] as &[Dev], &self.meta)
    }
    fn power_cycle(&self) {
        for d in self.main.iter().chain([&self.meta]) {
            d.power_cut().unwrap();
        }
        for d in self.main.iter().chain([&self.meta]) {
            d.power_on();
        }
    }
}

fn array_cfg(k: usize, m: usize) -> ArrayConfig {
    ArrayConfig {
        scheme: SchemeKind::Tween,
        chunk_size: CHUNK,
        ..ArrayConfig::with_geometry(SchemeKind::Tween, k, m)
    }
}

fn tween_cfg(groups: usize, mode: GcMode) -> TweenConfig {
    TweenConfig {
        groups,
        extent_bytes: EXTENT,
        gc_mode: mode,
        ..TweenConfig::default()
    }
}

/// A write of a skewed workload: mostly small writes into a hot tenth, some anywhere, a few larger
/// than a stripe (direct full-stripe writes).
fn op(rng: &mut Rng, cap: u64, stripe: u64) -> (u64, usize) {
    let len = match rng.below(20) {
        0 => stripe as usize * (1 + rng.below(2) as usize) + rng.below(2000) as usize,
        1..=4 => 1 + rng.below(3000) as usize,
        _ => 1 + rng.below(EXTENT as u64 * 2) as usize,
    }
    .min(cap as usize);
    let span = if rng.chance(0.8) { cap / 10 } else { cap };
    let off = rng.below(span.max(len as u64) - len as u64 + 1);
    (off, len)
}

fn open_retry(rig: &Rig, img: &NvramImage, nv: &NvramSpec, what: &str) -> Tween {
    loop {
        img.power_on();
        rig.power_cycle();
        match Tween::open(rig.devices(), nv) {
            Ok(t) => return t,
            Err(e) if rig.meta.is_powered_off() || img.is_cut() => {
                let _ = e;
            }
            Err(e) => panic!("{what}: reopen after a crash: {e}"),
        }
    }
}

/// Random writes, reads and crashes (the NVRAM region cut after a random number of persists, the
/// devices power-cut with unflushed writes torn or lost); after every reopen the whole device must
/// equal the model, except the bytes of the one write a crash interrupted (old or new data).
fn run_model(seed: u64, steps: usize, mode: GcMode) {
    let what = format!("tween {mode:?} seed {seed}");
    let mut rng = Rng::new(seed);
    let rig = Rig::new(4, 96 << 10, seed);
    let (nv, img) = NvramSpec::memory();
    // Background: four buffers (a hotness group or two, the cleaning stream, the spare).
    let groups = if mode == GcMode::Background { 4 } else { 2 };
    // Background runs cost-benefit victims (the other modes the default, greedy).
    let cfg = TweenConfig {
        victim: if mode == GcMode::Background {
            VictimPolicy::CostBenefit
        } else {
            VictimPolicy::Greedy
        },
        ..tween_cfg(groups, mode)
    };
    let mut t = Tween::create(&array_cfg(3, 1), rig.devices(), &cfg, &nv)
        .unwrap_or_else(|e| panic!("{what}: create: {e}"));
    let cap = t.size();
    let stripe = 3 * CHUNK as u64;
    let mut model = vec![0u8; cap as usize];
    let (mut crashes, mut flushes, mut gcs, mut directs) = (0u64, 0u64, 0u64, 0u64);
    let mut background = (0u64, 0u64);
    for step in 0..steps {
        let ctx = format!("{what} step {step}");
        if rng.chance(0.04) {
            // Cut NVRAM a few persists from now; the next writes hit it.
            img.cut_after(rng.below(12));
        }
        match rng.below(10) {
            0 => {
                let (off, len) = op(&mut rng, cap, stripe);
                let mut back = vec![0u8; len];
                t.read(&mut back, off)
                    .unwrap_or_else(|e| panic!("{ctx}: read: {e}"));
                assert!(
                    back == model[off as usize..off as usize + len],
                    "{ctx}: read at {off}+{len} differs from the model"
                );
            }
            1 if mode != GcMode::Active => match background_or_collect(&t, mode, &mut rng) {
                Ok(_) => {}
                Err(_) if img.is_cut() => {
                    // A crash mid-GC: nothing acknowledged may change.
                    crashes += 1;
                    let r = t.runtime();
                    background.0 += r.background_flushes;
                    background.1 += r.background_gc_segments;
                    let s = t.stats();
                    flushes += s.flushes;
                    gcs += s.gc_segments;
                    directs += s.direct_stripes;
                    drop(t);
                    t = open_retry(&rig, &img, &nv, &ctx);
                    let mut back = vec![0u8; cap as usize];
                    t.read(&mut back, 0)
                        .unwrap_or_else(|e| panic!("{ctx}: read after crash: {e}"));
                    assert!(
                        back == model,
                        "{ctx}: a crash mid-GC changed acknowledged data"
                    );
                }
                Err(e) => panic!("{ctx}: collect: {e}"),
            },
            _ => {
                let (off, len) = op(&mut rng, cap, stripe);
                let mut data = vec![0u8; len];
                rng.fill(&mut data);
                match t.write(&data, off) {
                    Ok(()) => model[off as usize..off as usize + len].copy_from_slice(&data),
                    Err(_) if img.is_cut() => {
                        crashes += 1;
                        let r = t.runtime();
                        background.0 += r.background_flushes;
                        background.1 += r.background_gc_segments;
                        let s = t.stats();
                        flushes += s.flushes;
                        gcs += s.gc_segments;
                        directs += s.direct_stripes;
                        drop(t);
                        t = open_retry(&rig, &img, &nv, &ctx);
                        let mut back = vec![0u8; cap as usize];
                        t.read(&mut back, 0)
                            .unwrap_or_else(|e| panic!("{ctx}: read after crash: {e}"));
                        for i in 0..cap as usize {
                            if back[i] != model[i] {
                                let o = off as usize;
                                assert!(
                                    (o..o + len).contains(&i) && back[i] == data[i - o],
                                    "{ctx}: byte {i} reads {:#04x}, acknowledged {:#04x} (interrupted write {off}+{len})",
                                    back[i],
                                    model[i]
                                );
                            }
                        }
                        model.copy_from_slice(&back);
                        // No bit was flipped: a checksum error would be one the array got wrong
                        // across the power cut.
                        let crc = t.array().status().checksums;
                        assert_eq!(crc.checksum_errors, 0, "{ctx}: {crc:?}");
                    }
                    Err(e) => panic!("{ctx}: write: {e}"),
                }
            }
        }
    }
    let s = t.stats();
    flushes += s.flushes;
    gcs += s.gc_segments;
    directs += s.direct_stripes;
    let r = t.runtime();
    background.0 += r.background_flushes;
    background.1 += r.background_gc_segments;
    if mode == GcMode::Background {
        assert!(
            background.0 >= 5 && background.1 >= 5,
            "{what}: background worker flushed {} buffers, collected {} segments",
            background.0,
            background.1
        );
    }
    // A clean reopen (no cut: one armed in the last steps and not reached yet is disarmed, as
    // seed 82 of the background mode showed) loses nothing either.
    img.power_on();
    drop(t);
    let t = Tween::open(rig.devices(), &nv).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let mut back = vec![0u8; cap as usize];
    t.read(&mut back, 0).unwrap();
    assert!(
        back == model,
        "{what}: the device differs from the model after a clean reopen"
    );
    // The paths this test is about were reached.
    assert!(crashes >= 3, "{what}: only {crashes} crashes");
    assert!(
        flushes >= 20 && directs >= 1,
        "{what}: {flushes} flushes, {directs} direct"
    );
    // Active: the threshold rule; periodic: `collect` calls and the floor.
    assert!(gcs >= 5, "{what}: only {gcs} segments collected");
}

#[test]
fn acknowledged_writes_survive_crashes_active_gc() {
    for seed in seeds(3) {
        run_model(seed, 1500, GcMode::Active);
    }
}

#[test]
fn acknowledged_writes_survive_crashes_periodic_gc() {
    for seed in seeds(1) {
        run_model(seed + 1000, 1500, GcMode::Periodic);
    }
}

/// Periodic: `collect`; background: a few steps of the worker's work, run here (deterministic,
/// one thread) between requests.
fn background_or_collect(t: &Tween, mode: GcMode, rng: &mut Rng) -> ecstack_array::Result<()> {
    if mode == GcMode::Periodic {
        return t.collect().map(|_| ());
    }
    for _ in 0..1 + rng.below(4) {
        if !t.background_step()? {
            break;
        }
    }
    Ok(())
}

/// Background mode, its work done between requests by `background_step` (the worker's unit:
/// flush a waiting full buffer without the lock, or collect a segment in batches), with crashes
/// anywhere between NVRAM persists, inside that work too.
#[test]
fn acknowledged_writes_survive_crashes_background_gc() {
    for seed in seeds(2) {
        run_model(seed + 2000, 1500, GcMode::Background);
    }
}

/// The background worker as a real thread beside a writer: NVRAM cut at random points (which
/// may land inside the worker's flush or collection as well as a request), devices power-cut,
/// reopened; every acknowledged write reads back, and the worker did flush and collect.
#[test]
fn background_worker_loses_nothing_across_crashes() {
    for seed in seeds(2) {
        let what = format!("background worker seed {seed}");
        let mut rng = Rng::new(seed + 3000);
        let rig = Rig::new(4, 96 << 10, seed + 3000);
        let (nv, img) = NvramSpec::memory();
        let cfg = tween_cfg(4, GcMode::Background);
        let mut t = Arc::new(Tween::create(&array_cfg(3, 1), rig.devices(), &cfg, &nv).unwrap());
        let mut worker = Some(t.start_background());
        let cap = t.size();
        let mut model = vec![0u8; cap as usize];
        let (mut crashes, mut bg_flushes, mut bg_gc) = (0, 0, 0);
        for step in 0..3000 {
            if step % 500 == 250 {
                img.cut_after(rng.below(40));
            }
            let span = if rng.chance(0.8) { cap / 10 } else { cap };
            let len = 1 + rng.below(EXTENT as u64 * 2) as usize;
            let off = rng.below(span - len as u64);
            let mut data = vec![0u8; len];
            rng.fill(&mut data);
            match t.write(&data, off) {
                Ok(()) => model[off as usize..off as usize + len].copy_from_slice(&data),
                Err(e) if img.is_cut() => {
                    let _ = e;
                    crashes += 1;
                    drop(worker.take()); // stops and joins the worker
                    let r = t.runtime();
                    bg_flushes += r.background_flushes;
                    bg_gc += r.background_gc_segments;
                    drop(t);
                    t = Arc::new(open_retry(&rig, &img, &nv, &what));
                    let mut back = vec![0u8; cap as usize];
                    t.read(&mut back, 0).unwrap();
                    for i in 0..cap as usize {
                        if back[i] != model[i] {
                            let o = off as usize;
                            assert!(
                                (o..o + len).contains(&i) && back[i] == data[i - o],
                                "{what} step {step}: byte {i} lost (interrupted write {off}+{len})"
                            );
                        }
                    }
                    model.copy_from_slice(&back);
                    worker = Some(t.start_background());
                }
                Err(e) => panic!("{what} step {step}: write: {e}"),
            }
            if step % 64 == 0 {
                // Give the worker the CPU now and then (it runs beside, not instead of, requests).
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        drop(worker);
        let r = t.runtime();
        bg_flushes += r.background_flushes;
        bg_gc += r.background_gc_segments;
        let mut back = vec![0u8; cap as usize];
        t.read(&mut back, 0).unwrap();
        assert!(back == model, "{what}: differs from the model at the end");
        drop(t);
        let t = Tween::open(rig.devices(), &nv).unwrap();
        t.read(&mut back, 0).unwrap();
        assert!(
            back == model,
            "{what}: differs from the model after a reopen"
        );
        assert!(crashes >= 3, "{what}: {crashes} crashes");
        // The worker took part; how much depends on the scheduler (seed 29 on a machine busy
        // with a build: 9 flushes, where quiet runs of it pass a bound of 10).
        assert!(
            bg_flushes >= 1 && bg_gc >= 1,
            "{what}: the worker flushed {bg_flushes}, collected {bg_gc}"
        );
    }
}

/// Cost-benefit against greedy on one layout of segments made by real writes: a cold segment
/// (written first, then left alone while ten others are written) with 2 of its 6 extents
/// overwritten, and a young one with 3 of 6 overwritten. Greedy must take the young one (more
/// stale); cost-benefit the cold one ((1 − 4/6) · age / (1 + 4/6) with an age of ~80 host extent
/// writes against (1 − 1/2) · ~5 / 1.5). The same writes under `VictimPolicy::Greedy` show that
/// this test would fail with greedy selection.
#[test]
fn cost_benefit_chooses_the_old_segment_greedy_would_not() {
    let victim = |policy: VictimPolicy| {
        let rig = Rig::new(4, 96 << 10, 77);
        let (nv, _img) = NvramSpec::memory();
        let cfg = TweenConfig {
            groups: 1,
            victim: policy,
            adaptive_groups: false,
            gc_stream: false,
            ..tween_cfg(1, GcMode::Periodic)
        };
        let t = Tween::create(&array_cfg(3, 1), rig.devices(), &cfg, &nv).unwrap();
        let ext = EXTENT as u64;
        let slots = 3 * CHUNK as u64 / ext; // 6 extents per segment
        let put = |e: u64| {
            t.write(&vec![e as u8 + 1; EXTENT as usize], e * ext)
                .unwrap()
        };
        // The cold segment, ten all-live fillers, then the young segment.
        (0..slots).for_each(put);
        (100..100 + 10 * slots).for_each(put);
        (300..300 + slots).for_each(put);
        let live = t.segment_live();
        let seg_of = |count: u32| live.iter().filter(|&&l| l == count).count();
        assert_eq!(seg_of(slots as u32), 12, "{live:?}");
        // Overwrites (they stay in the NVRAM buffer: fewer than a segment's worth).
        put(300);
        put(301);
        put(302);
        put(0);
        put(1);
        let live = t.segment_live();
        let cold = live.iter().position(|&l| l == 4).unwrap() as u64;
        let young = live.iter().position(|&l| l == 3).unwrap() as u64;
        (t.next_victim().unwrap(), cold, young)
    };
    let (v, cold, young) = victim(VictimPolicy::CostBenefit);
    assert_eq!(v, cold, "cost-benefit must take the old, cold segment");
    let (v, _, young_g) = victim(VictimPolicy::Greedy);
    assert_eq!(
        (v, young_g),
        (young, young),
        "greedy takes the young segment"
    );
}

/// A version-2 region (before the policy field: checksum at bytes 92..96) opens with version 2's
/// behaviour (greedy victims, groups fixed, cleaning output with host writes), keeps its data, and
/// its header is rewritten as version 3.
#[test]
fn a_version_2_region_opens_and_is_migrated() {
    let (rig, nv, img, t) = memory_tween(23);
    let mut rng = Rng::new(23);
    let mut model = vec![0u8; t.size() as usize];
    for _ in 0..300 {
        let len = 1 + rng.below(1500) as usize;
        let off = rng.below(t.size() - len as u64);
        let mut d = vec![0u8; len];
        rng.fill(&mut d);
        t.write(&d, off).unwrap();
        model[off as usize..off as usize + len].copy_from_slice(&d);
    }
    drop(t);
    img.with_bytes(|b| {
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 3);
        // Version 2's header: version 2, no policy field, its CRC32C at 92 over 0..92.
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        b[92..100].fill(0);
        let crc = crc32c::crc32c(&b[..92]);
        b[92..96].copy_from_slice(&crc.to_le_bytes());
    });
    let t = Tween::open(rig.devices(), &nv).unwrap();
    assert_eq!(t.victim_policy(), VictimPolicy::Greedy);
    assert_eq!(t.gc_mode(), GcMode::Active);
    let r = t.runtime();
    assert_eq!((r.host_groups, r.host_groups_max), (2, 2), "{r:?}");
    let mut back = vec![0u8; model.len()];
    t.read(&mut back, 0).unwrap();
    assert!(back == model, "a version-2 region's data changed");
    img.with_bytes(|b| assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 3));
    drop(t);
    let t = Tween::open(rig.devices(), &nv).unwrap();
    assert_eq!(t.victim_policy(), VictimPolicy::Greedy);
}

/// A main device that records every write (offset, length).
#[derive(Debug)]
struct Recording {
    inner: MemDevice,
    writes: Mutex<Vec<(u64, usize)>>,
}

impl BlockDevice for Recording {
    fn name(&self) -> &str {
        "recording"
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> ecstack_device::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> ecstack_device::Result<()> {
        self.writes.lock().unwrap().push((offset, buf.len()));
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> ecstack_device::Result<()> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> ecstack_device::Result<()> {
        self.inner.discard(offset, len)
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}

#[test]
fn only_full_stripe_writes_reach_the_devices_and_gc_reclaims() {
    let n = 6;
    let rec: Vec<Arc<Recording>> = (0..n)
        .map(|_| {
            Arc::new(Recording {
                inner: MemDevice::new(128 << 10).unwrap(),
                writes: Mutex::new(Vec::new()),
            })
        })
        .collect();
    let main: Vec<Arc<dyn BlockDevice>> = rec.iter().map(|r| r.clone() as _).collect();
    let devices = ArrayDevices {
        main,
        log: Vec::new(),
        meta: Arc::new(MemDevice::new(2 << 20).unwrap()),
        specs: None,
    };
    let (nv, _img) = NvramSpec::memory();
    let t = Tween::create(
        &array_cfg(4, 2),
        devices,
        &tween_cfg(4, GcMode::Active),
        &nv,
    )
    .unwrap();
    let g = t.array().geometry().clone();
    for r in &rec {
        r.writes.lock().unwrap().clear(); // labels
    }
    let cap = t.size();
    let mut rng = Rng::new(77);
    let mut model = vec![0u8; cap as usize];
    // Overwrite the logical space several times over with small writes.
    let mut written = 0u64;
    while written < 8 * cap {
        let (off, len) = op(&mut rng, cap, g.stripe_bytes());
        let mut data = vec![0u8; len];
        rng.fill(&mut data);
        t.write(&data, off).unwrap();
        model[off as usize..off as usize + len].copy_from_slice(&data);
        written += len as u64;
    }
    let mut back = vec![0u8; cap as usize];
    t.read(&mut back, 0).unwrap();
    assert!(back == model, "the device differs from the model");
    let s = t.stats();
    assert!(
        s.gc_segments >= 10,
        "GC collected only {} segments",
        s.gc_segments
    );
    assert!(s.flushes >= 50, "{} flushes", s.flushes);
    // Every device write is whole chunks; every chunk slot was written the same number of times
    // on every device (each time as part of a full stripe).
    let mut per_slot: Vec<std::collections::BTreeMap<u64, u64>> = vec![Default::default(); n];
    for (d, r) in rec.iter().enumerate() {
        for &(off, len) in r.writes.lock().unwrap().iter() {
            assert!(
                off >= g.data_start,
                "device {d}: a write at {off} before the data area"
            );
            assert!(
                (off - g.data_start).is_multiple_of(g.chunk)
                    && (len as u64).is_multiple_of(g.chunk),
                "device {d}: a partial-chunk write at {off}+{len}"
            );
            for c in 0..len as u64 / g.chunk {
                *per_slot[d]
                    .entry((off - g.data_start) / g.chunk + c)
                    .or_default() += 1;
            }
        }
    }
    for d in 1..n {
        assert_eq!(
            per_slot[d], per_slot[0],
            "device {d} saw a partial-stripe write"
        );
    }
    assert!(!per_slot[0].is_empty());
}

/// A tween array (3 + 1, two groups, active GC) on four memory devices with its NVRAM in memory.
fn memory_tween(seed: u64) -> (Rig, NvramSpec, NvramImage, Tween) {
    let rig = Rig::new(4, 96 << 10, seed);
    let (nv, img) = NvramSpec::memory();
    let t = Tween::create(
        &array_cfg(3, 1),
        rig.devices(),
        &tween_cfg(2, GcMode::Active),
        &nv,
    )
    .unwrap();
    (rig, nv, img, t)
}

fn corrupt_then_open(at: impl Fn(&Vec<u8>) -> usize, want: &str) {
    let (rig, nv, img, t) = memory_tween(5);
    let mut rng = Rng::new(5);
    for _ in 0..40 {
        let mut d = vec![0u8; 700];
        rng.fill(&mut d);
        let off = rng.below(t.size() - 700);
        t.write(&d, off).unwrap();
    }
    drop(t);
    img.with_bytes(|b| {
        let i = at(b);
        b[i] ^= 0x20;
    });
    let e = Tween::open(rig.devices(), &nv).expect_err("a corrupt region must not open");
    let msg = e.to_string();
    assert!(
        msg.contains("nvram") && msg.contains(want) && !msg.contains('\n'),
        "one clear line naming {want:?}: {msg}"
    );
}

#[test]
fn corrupt_nvram_gives_one_clear_error() {
    // Header: a byte inside the uuid field.
    corrupt_then_open(|_| 14, "header checksum");
    // Magic.
    corrupt_then_open(|_| 0, "bad magic");
    // A map entry: the last non-zero byte of the region lies in the map (it is the last area).
    corrupt_then_open(|b| b.iter().rposition(|&x| x != 0).unwrap(), "map entry");
}

#[test]
fn degraded_reads_and_rebuild() {
    let (_rig, _nv, _img, t) = memory_tween(9);
    let cap = t.size();
    let mut rng = Rng::new(9);
    let mut model = vec![0u8; cap as usize];
    let write = |t: &Tween, rng: &mut Rng, model: &mut Vec<u8>, n: usize| {
        for _ in 0..n {
            let (off, len) = op(rng, cap, 3 * CHUNK as u64);
            let mut d = vec![0u8; len];
            rng.fill(&mut d);
            t.write(&d, off).unwrap();
            model[off as usize..off as usize + len].copy_from_slice(&d);
        }
    };
    write(&t, &mut rng, &mut model, 300);
    t.array().fail_device(1).unwrap();
    let mut back = vec![0u8; cap as usize];
    t.read(&mut back, 0).unwrap();
    assert!(back == model, "degraded read differs");
    write(&t, &mut rng, &mut model, 300);
    t.read(&mut back, 0).unwrap();
    assert!(back == model, "degraded writes then read differ");
    t.array()
        .rebuild_device(1, Arc::new(MemDevice::new(96 << 10).unwrap()))
        .unwrap();
    t.array().fail_device(2).unwrap();
    t.read(&mut back, 0).unwrap();
    assert!(
        back == model,
        "read after rebuild (another device failed) differs"
    );
}

/// A (3+1) tween array on a fresh rig with its NVRAM region in a file under a directory of its own
/// (`tag`-pid): the directory, the NVRAM file, the rig, the region's spec and the array.
fn file_nvram_tween(
    tag: &str,
    seed: u64,
    mode: GcMode,
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    Rig,
    NvramSpec,
    Tween,
) {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nvram");
    let _ = std::fs::remove_file(&path);
    let rig = Rig::new(4, 96 << 10, seed);
    let nv = NvramSpec::file(&path);
    let t = Tween::create(&array_cfg(3, 1), rig.devices(), &tween_cfg(2, mode), &nv).unwrap();
    (dir, path, rig, nv, t)
}

#[test]
fn file_backed_nvram_survives_reopen() {
    let (dir, _path, rig, nv, t) = file_nvram_tween("ecstack-tween", 11, GcMode::Active);
    t.write(b"persistent in NVRAM", 1000).unwrap();
    drop(t);
    let t = Tween::open(rig.devices(), &nv).unwrap();
    let mut b = [0u8; 19];
    t.read(&mut b, 1000).unwrap();
    assert_eq!(&b, b"persistent in NVRAM");
    drop(t);
    // The array alone refuses byte I/O (it would bypass TWEEN's map).
    let a = ecstack_array::Array::open(rig.devices()).unwrap();
    assert!(a.write(b"x", 0).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_parameters_are_refused_before_anything_is_written() {
    let rig = Rig::new(4, 96 << 10, 13);
    let (nv, img) = NvramSpec::memory();
    for (t, want) in [
        (
            TweenConfig {
                alpha: f64::NAN,
                ..tween_cfg(2, GcMode::Active)
            },
            "alpha",
        ),
        (
            TweenConfig {
                beta: 0.0,
                ..tween_cfg(2, GcMode::Active)
            },
            "beta",
        ),
        (
            TweenConfig {
                groups: 0,
                ..tween_cfg(2, GcMode::Active)
            },
            "hotness groups",
        ),
        (
            TweenConfig {
                extent_bytes: 1000,
                ..tween_cfg(2, GcMode::Active)
            },
            "extent size",
        ),
        (
            TweenConfig {
                gc_threshold: Some(1),
                ..tween_cfg(2, GcMode::Active)
            },
            "GC threshold",
        ),
    ] {
        let e = Tween::create(&array_cfg(3, 1), rig.devices(), &t, &nv)
            .expect_err("bad parameters must be refused");
        assert!(e.to_string().contains(want), "{want}: {e}");
    }
    // Nothing was created: neither the array nor the region.
    assert!(ecstack_array::Array::open(rig.devices()).is_err());
    assert!(img.with_bytes(|b| b.is_empty()));
}

/// XOR `mask` into byte `at` of the first copy of `pattern` in the NVRAM file at `path` (the
/// region maps it: the running array sees the flip).
fn flip_in_region(path: &std::path::Path, pattern: &[u8], at: usize, mask: u8) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let image = std::fs::read(path).unwrap();
    let start = image
        .windows(pattern.len())
        .position(|w| w == pattern)
        .expect("the buffered extent is in the region");
    file.write_all_at(&[image[start + at] ^ mask], (start + at) as u64)
        .unwrap();
}

/// A flip in an NVRAM buffer's data while the array runs (here: through the file the region maps)
/// is caught by the buffer entry's data CRC32C on the read: an error naming the slot, never the
/// flipped bytes.
#[test]
fn flipped_nvram_data_is_an_error_on_read() {
    let (dir, path, _rig, _nv, t) = file_nvram_tween("ecstack-tween-flip", 13, GcMode::Active);
    let pattern: Vec<u8> = (0..EXTENT)
        .map(|i| (i as u8).wrapping_mul(31) ^ 0xa5)
        .collect();
    t.write(&pattern, 4 * EXTENT as u64).unwrap();
    let mut back = vec![0u8; EXTENT as usize];
    t.read(&mut back, 4 * EXTENT as u64).unwrap();
    assert_eq!(back, pattern);
    flip_in_region(&path, &pattern, 7, 0x10);
    let e = t
        .read(&mut back, 4 * EXTENT as u64)
        .expect_err("a flipped buffer must not be read");
    let msg = e.to_string();
    assert!(
        msg.contains("nvram") && msg.contains("data checksum mismatch") && !msg.contains('\n'),
        "{msg}"
    );
    drop(t);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A flip in a full buffer waiting for the background worker is caught before the flush (which
/// copies the buffer and checks it outside TWEEN's lock): the step fails naming the slot, nothing
/// reaches the devices, and the buffer stays where it was.
#[test]
fn flipped_nvram_data_is_not_flushed_by_the_background_worker() {
    let (dir, path, _rig, _nv, t) =
        file_nvram_tween("ecstack-tween-flip-bg", 14, GcMode::Background);
    // N = 2 in background mode: one hotness group and a spare; a buffer is one stripe (3 chunks
    // of 1 KiB), six extents.
    let per_buffer = (3 * CHUNK / EXTENT) as u64;
    let patterns: Vec<Vec<u8>> = (0..per_buffer)
        .map(|e| {
            (0..EXTENT)
                .map(|i| (i as u8).wrapping_mul(29) ^ (e as u8).wrapping_mul(71) ^ 0x3c)
                .collect()
        })
        .collect();
    for (e, p) in patterns.iter().enumerate() {
        t.write(p, e as u64 * EXTENT as u64).unwrap();
    }
    let before = t.stats();
    flip_in_region(&path, &patterns[3], 11, 0x04);
    let e = t
        .background_step()
        .expect_err("a flipped buffer must not be flushed");
    let msg = e.to_string();
    assert!(
        msg.contains("nvram") && msg.contains("slot 3") && msg.contains("data checksum mismatch"),
        "{msg}"
    );
    assert_eq!(t.runtime().background_flushes, 0);
    assert_eq!(t.stats().flushes, before.flushes, "nothing was flushed");
    // The other extents still read back from the buffer; the flipped one is an error.
    let mut back = vec![0u8; EXTENT as usize];
    for (e, p) in patterns.iter().enumerate() {
        let r = t.read(&mut back, e as u64 * EXTENT as u64);
        if e == 3 {
            assert!(r.is_err(), "the flipped extent must not be read");
        } else {
            r.unwrap();
            assert_eq!(&back, p, "extent {e}");
        }
    }
    drop(t);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// N = 8 hotness groups at the lowest GC threshold (N + 2 free segments, `gc.rs`'s bound) on a
/// small array: heavy small and direct writes never run out of free segments, and the device
/// equals the model. (Version 1 needed 2N + 1 free; this is the bound that replaced it.)
#[test]
fn gc_floor_holds_with_many_groups() {
    for seed in seeds(3) {
        let rig = Rig::new(4, 96 << 10, 20 + seed);
        let (nv, _img) = NvramSpec::memory();
        let t = Tween::create(
            &array_cfg(3, 1),
            rig.devices(),
            &TweenConfig {
                gc_threshold: Some(10),
                ..tween_cfg(8, GcMode::Active)
            },
            &nv,
        )
        .unwrap_or_else(|e| panic!("seed {seed}: create: {e}"));
        let cap = t.size();
        let mut rng = Rng::new(seed);
        let mut model = vec![0u8; cap as usize];
        let mut written = 0u64;
        while written < 10 * cap {
            let (off, len) = op(&mut rng, cap, 3 * CHUNK as u64);
            let mut d = vec![0u8; len];
            rng.fill(&mut d);
            t.write(&d, off)
                .unwrap_or_else(|e| panic!("seed {seed}: write {len} at {off}: {e}"));
            model[off as usize..off as usize + len].copy_from_slice(&d);
            written += len as u64;
        }
        let mut back = vec![0u8; cap as usize];
        t.read(&mut back, 0).unwrap();
        assert!(
            back == model,
            "seed {seed}: the device differs from the model"
        );
        assert!(t.stats().gc_segments > 100, "seed {seed}: {:?}", t.stats());
    }
}

/// A (3+1) tween array with 4 KiB chunks and 512-byte extents (8 extents a chunk) on plain memory
/// devices, one hotness group, and 48 distinct extents written one by one (two full buffers, so
/// flushed). Returns the devices, the array and the extents' bytes.
fn flushed_extents() -> (Vec<Arc<MemDevice>>, Tween, Vec<Vec<u8>>) {
    let main: Vec<Arc<MemDevice>> = (0..4)
        .map(|_| Arc::new(MemDevice::new(256 << 10).unwrap()))
        .collect();
    let meta = Arc::new(MemDevice::new(2 << 20).unwrap());
    let cfg = ArrayConfig {
        chunk_size: 4096,
        ..array_cfg(3, 1)
    };
    let (nv, _img) = NvramSpec::memory();
    let devices = ArrayDevices::from_handles(&main, &[] as &[Arc<MemDevice>], &meta);
    let t = Tween::create(&cfg, devices, &tween_cfg(1, GcMode::Active), &nv).unwrap();
    let mut rng = Rng::new(31);
    let mut ext = Vec::new();
    for e in 0..48u64 {
        let mut d = vec![0u8; EXTENT as usize];
        rng.fill(&mut d);
        t.write(&d, e * EXTENT as u64).unwrap();
        ext.push(d);
    }
    assert_eq!(t.stats().flushes, 2);
    (main, t, ext)
}

fn device_reads(devs: &[Arc<MemDevice>]) -> u64 {
    devs.iter().map(|d| d.stats().read_bytes).sum()
}

/// Where extent bytes `pat` lie on the devices: (device, offset).
fn find_on_devices(devs: &[Arc<MemDevice>], pat: &[u8]) -> (usize, u64) {
    for (i, d) in devs.iter().enumerate() {
        let mut all = vec![0u8; d.capacity() as usize];
        d.read_at(&mut all, 0).unwrap();
        if let Some(at) = all.windows(pat.len()).position(|w| w == pat) {
            return (i, at as u64);
        }
    }
    panic!("extent not found on the devices");
}

/// Flushed extents carry a CRC32C in their map entry (NVRAM version 2), so a small read of a
/// flushed extent reads that extent alone from its device and checks it, instead of the whole
/// 4 KiB chunk the array's per-chunk checksum needs (version 1: 4096 bytes read for 512).
#[test]
fn small_reads_of_flushed_extents_read_only_the_extent() {
    let (main, t, ext) = flushed_extents();
    for (e, len, inner) in [(5u64, 512usize, 0u64), (30, 100, 200), (47, 512, 0)] {
        let before = device_reads(&main);
        let mut b = vec![0u8; len];
        t.read(&mut b, e * EXTENT as u64 + inner).unwrap();
        assert_eq!(b, ext[e as usize][inner as usize..inner as usize + len]);
        assert_eq!(
            device_reads(&main) - before,
            EXTENT as u64,
            "extent {e}: one extent read from the device"
        );
    }
    // A run of extents within one chunk is one read of just those bytes.
    let before = device_reads(&main);
    let mut b = vec![0u8; 3 * EXTENT as usize];
    t.read(&mut b, 9 * EXTENT as u64).unwrap();
    assert_eq!(b, ext[9..12].concat());
    assert_eq!(device_reads(&main) - before, 3 * EXTENT as u64);
    assert_eq!(t.stats().extent_crc_fallbacks, 0);
}

/// A flip in a flushed extent on its device: the extent's CRC32C catches it on the direct read,
/// the array's checked read decodes the chunk from the stripe and repairs it, the reader gets the
/// right bytes. With the array's chunk checksums off, the extent CRC alone catches a flip: an
/// error naming the segment slot, never the flipped bytes (version 1 returned them).
#[test]
fn a_flipped_flushed_extent_is_caught_by_its_map_checksum() {
    let (main, t, ext) = flushed_extents();
    let (d, at) = find_on_devices(&main, &ext[13]);
    main[d].write_at(&[ext[13][3] ^ 0x40], at + 3).unwrap();
    let mut b = vec![0u8; EXTENT as usize];
    t.read(&mut b, 13 * EXTENT as u64).unwrap();
    assert_eq!(b, ext[13], "repaired through the stripe");
    assert_eq!(t.stats().extent_crc_fallbacks, 1);
    t.read(&mut b, 13 * EXTENT as u64).unwrap();
    assert_eq!(b, ext[13]);
    assert_eq!(t.stats().extent_crc_fallbacks, 1, "the chunk was rewritten");

    t.array().set_checksums(false);
    let (d, at) = find_on_devices(&main, &ext[40]);
    main[d].write_at(&[ext[40][100] ^ 1], at + 100).unwrap();
    let e = t
        .read(&mut b, 40 * EXTENT as u64)
        .expect_err("a flipped extent must not be returned");
    let msg = e.to_string();
    assert!(
        msg.contains("extent checksum mismatch") && msg.contains("segment") && !msg.contains('\n'),
        "{msg}"
    );
    // Its neighbours still read.
    t.read(&mut b, 41 * EXTENT as u64).unwrap();
    assert_eq!(b, ext[41]);
}

/// `TweenStats` live in NVRAM (version 2) and continue across a reopen (version 1 restarted them
/// from zero).
#[test]
fn counters_survive_reopen() {
    let (rig, nv, _img, t) = memory_tween(17);
    let cap = t.size();
    let mut rng = Rng::new(17);
    let mut written = 0;
    while written < 4 * cap {
        let (off, len) = op(&mut rng, cap, 3 * CHUNK as u64);
        let mut d = vec![0u8; len];
        rng.fill(&mut d);
        t.write(&d, off).unwrap();
        written += len as u64;
    }
    let s = t.stats();
    assert!(
        s.flushes > 0 && s.gc_segments > 0 && s.direct_stripes > 0,
        "{s:?}"
    );
    drop(t);
    let t = Tween::open(rig.devices(), &nv).unwrap();
    let r = t.stats();
    assert_eq!(
        ecstack_array::TweenStats {
            nvram_persists: s.nvram_persists,
            ..r
        },
        s
    );
    // The persist count is staged before the persists that carry it (and those after the last
    // request's map update): it may lag by a few; the open adds its own.
    assert!(
        r.nvram_persists + 4 >= s.nvram_persists && r.nvram_persists > s.nvram_persists / 2,
        "{r:?}"
    );
}

/// A version 1 region (map entries without per-extent checksums) is refused by name, in one line.
#[test]
fn a_version_1_region_is_refused_by_name() {
    let (rig, nv, img, t) = memory_tween(19);
    t.write(b"old", 0).unwrap();
    drop(t);
    // The header as version 1 wrote it: version field 1, its CRC32C (bytes 92..96) over 0..92.
    img.with_bytes(|b| {
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..92]);
        b[92..96].copy_from_slice(&crc.to_le_bytes());
    });
    let msg = Tween::open(rig.devices(), &nv)
        .expect_err("a version 1 region must be refused")
        .to_string();
    assert!(
        msg.contains("nvram")
            && msg.contains("version 1")
            && msg.contains("per-extent checksums")
            && !msg.contains('\n'),
        "{msg}"
    );
}

/// Two arrays given one NVRAM file would overwrite each other's buffers and maps (issue 46): the
/// second is refused in one line naming the region, until the first is dropped.
#[test]
fn two_arrays_cannot_share_one_nvram_file() {
    let dir = std::env::temp_dir().join(format!("ecstack-nvlock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let nv = NvramSpec::file(dir.join("nvram"));
    let (a, b) = (Rig::new(4, 96 << 10, 1), Rig::new(4, 96 << 10, 2));
    let cfg = tween_cfg(2, GcMode::Active);
    let first = Tween::create(&array_cfg(3, 1), a.devices(), &cfg, &nv).unwrap();
    let refused = Tween::create(&array_cfg(3, 1), b.devices(), &cfg, &nv);
    let msg = match refused {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a second array was given the first's NVRAM region"),
    };
    assert!(
        msg.contains("TWEEN NVRAM") && msg.contains("already open in this process"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");
    drop(first);
    Tween::open(a.devices(), &nv).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
