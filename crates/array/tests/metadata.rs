//! Metadata volume: the incremental area fills up many times, so full checkpoints alternate between
//! the two areas; reopening (also after power cuts in the middle of it) always finds the state.

mod common;

use std::sync::Arc;

use common::*;
use ecstack_array::{Array, SchemeKind};
use ecstack_device::{BlockDevice, FaultConfig, Faulty, MemDevice, PowerCutPolicy};

fn small_meta_rig(scheme: SchemeKind, seed: u64) -> Rig {
    let mut rig = Rig::new(scheme, 4, 2, seed, true);
    // Size the volume to the minimum this geometry accepts: the incremental area is 256 KiB,
    // followed by the checksum area (format version 6; whatever the plan left after the
    // incremental area).
    let sb = Array::plan(&config(scheme, 4, 2), &rig.devices()).unwrap();
    let crc_area = rig.meta.capacity() - (sb.layout.inc_off + sb.layout.inc_size);
    let size = sb.layout.inc_off + (256 << 10) + crc_area;
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
    rig.meta = Arc::new(Faulty::new(MemDevice::new(size).unwrap(), cfg));
    rig
}

#[test]
fn checkpoints_alternate_and_reload() {
    for (i, scheme) in SchemeKind::ALL.into_iter().enumerate() {
        let seed = 500 + i as u64;
        let rig = small_meta_rig(scheme, seed);
        let mut rng = Rng::new(seed);
        let mut a = Array::create(&config(scheme, 4, 2), rig.devices()).unwrap();
        let cap = a.size();
        let mut model = vec![0u8; cap as usize];
        let mut checkpoints = 0;
        for step in 0..6000 {
            let (off, len) = extent(&mut rng, cap, 4);
            let mut d = vec![0u8; len];
            rng.fill(&mut d);
            a.write(&d, off).unwrap();
            model[off as usize..off as usize + len].copy_from_slice(&d);
            if scheme == SchemeKind::Md {
                // md records only a stripe's first write and its write-intent regions: commit,
                // so the next write marks its region dirty again (two records per step).
                a.commit().unwrap();
            } else {
                a.sync().unwrap();
            }
            if step % 1000 == 999 {
                checkpoints += a.status().metadata.checkpoints;
                if rng.below(2) == 0 {
                    // Clean reopen.
                    drop(a);
                } else {
                    // Power cut right after a sync: nothing acknowledged may be lost.
                    drop(a);
                    for d in rig.all() {
                        d.power_cut().unwrap();
                        d.power_on();
                    }
                }
                a = Array::open(rig.devices()).unwrap();
                verify_all(&a, &model, &format!("{scheme} step {step}"));
            }
        }
        checkpoints += a.status().metadata.checkpoints;
        println!("{scheme}: {checkpoints} full checkpoints");
        assert!(
            checkpoints >= 2,
            "{scheme}: only {checkpoints} full checkpoints; the incremental area never filled"
        );
    }
}

#[test]
fn power_cut_during_metadata_writes() {
    // The metadata volume loses power before its n-th operation: sometimes in a frame append,
    // sometimes in a full checkpoint (the incremental area rolls over every few hundred syncs).
    for (i, cut) in [700u64, 1333, 2100, 2901, 3777, 4500]
        .into_iter()
        .enumerate()
    {
        let scheme = SchemeKind::Eplog;
        let seed = 900 + i as u64;
        let mut rig = small_meta_rig(scheme, seed);
        let mut cfg = rig.meta.config().clone();
        cfg.power_cut_at_op = Some(cut);
        let size = rig.meta.capacity();
        rig.meta = Arc::new(Faulty::new(MemDevice::new(size).unwrap(), cfg));
        let mut rng = Rng::new(seed);
        let a = Array::create(&config(scheme, 4, 2), rig.devices()).unwrap();
        let cap = a.size();
        let mut durable = vec![0u8; cap as usize];
        let mut inflight: Option<(u64, Vec<u8>)> = None;
        for _ in 0..20_000 {
            let (off, len) = extent(&mut rng, cap, 4);
            let mut d = vec![0u8; len];
            rng.fill(&mut d);
            let ok = a.write(&d, off).is_ok() && a.sync().is_ok();
            if !ok {
                assert!(rig.meta.is_powered_off(), "error without a power cut");
                inflight = Some((off, d));
                break;
            }
            durable[off as usize..off as usize + len].copy_from_slice(&d);
        }
        assert!(inflight.is_some(), "cut {cut} never happened");
        drop(a);
        // Main and log devices keep their writes: the array flushed them before each sync.
        rig.meta.power_cut().unwrap();
        rig.meta.power_on();
        let a = Array::open(rig.devices()).unwrap_or_else(|e| panic!("cut {cut}: reopen: {e}"));
        let mut back = vec![0u8; cap as usize];
        a.read(&mut back, 0).unwrap();
        // Everything synced is there; the write in flight is either there or not, per byte range.
        let (off, d) = inflight.unwrap();
        let r = off as usize..off as usize + d.len();
        back[r.clone()].copy_from_slice(&durable[r]);
        assert!(back == durable, "cut {cut}: synced data lost");
    }
}

#[test]
fn mirrored_metadata_volume_survives_a_leg_failure() {
    use ecstack_array::ArrayDevices;
    use ecstack_device::Mirror;
    let scheme = SchemeKind::Eplog;
    let rig = Rig::new(scheme, 4, 2, 4242, false);
    let legs: Vec<Arc<Faulty<MemDevice>>> = (0..2)
        .map(|_| {
            Arc::new(Faulty::new(
                MemDevice::new(META_SIZE).unwrap(),
                FaultConfig::default(),
            ))
        })
        .collect();
    let mirror = |order: [usize; 2]| -> Arc<dyn BlockDevice> {
        let l: Vec<Arc<dyn BlockDevice>> = order
            .iter()
            .map(|&i| Arc::clone(&legs[i]) as Arc<dyn BlockDevice>)
            .collect();
        Arc::new(Mirror::open(l).unwrap().0)
    };
    let devices = |meta: Arc<dyn BlockDevice>| {
        let mut d: ArrayDevices = rig.devices();
        d.meta = meta;
        d
    };
    let a = Array::create(&config(scheme, 4, 2), devices(mirror([0, 1]))).unwrap();
    let cap = a.size();
    let mut model = vec![0u8; cap as usize];
    let mut rng = Rng::new(4242);
    let mut write = |a: &Array, model: &mut Vec<u8>, n: usize| {
        for _ in 0..n {
            let (off, len) = extent(&mut rng, cap, 4);
            let mut d = vec![0u8; len];
            rng.fill(&mut d);
            a.write(&d, off).unwrap();
            model[off as usize..off as usize + len].copy_from_slice(&d);
        }
        a.sync().unwrap();
    };
    write(&a, &mut model, 200);
    // The first leg fails while the array runs: metadata goes on to the second.
    legs[0].fail_now();
    write(&a, &mut model, 200);
    drop(a);
    // It comes back holding stale metadata, listed first: the mirror must not believe it.
    legs[0].repair();
    let a = Array::open(devices(mirror([0, 1]))).unwrap();
    verify_all(&a, &model, "reopened over a stale metadata leg");
    write(&a, &mut model, 100);
    drop(a);
    // Now the other leg is lost for good: the resynced first leg carries the array.
    let solo: Arc<dyn BlockDevice> = Arc::new(
        Mirror::open(vec![
            Arc::clone(&legs[0]) as Arc<dyn BlockDevice>,
            Arc::new(MemDevice::new(META_SIZE).unwrap()),
        ])
        .unwrap()
        .0,
    );
    let a = Array::open(devices(solo)).unwrap();
    verify_all(&a, &model, "after losing the second metadata leg");
}

/// Devices for `checkpoint_areas_grow_with_the_updates`: a geometry whose worst-case checkpoint
/// is over 1 MiB, so it starts with 1 MiB areas; the metadata volume cuts power before its op
/// `cut_at`.
fn growth_rig(seed: u64, cut_at: Option<u64>) -> Rig {
    let plain = |size: u64, s: u64| faulty(size, s, false);
    let mut cfg = FaultConfig {
        seed,
        power_cut: PowerCutPolicy {
            survive_prob: 0.5,
            torn_prob: 0.5,
            reorder: true,
            sector: 512,
        },
        ..FaultConfig::default()
    };
    cfg.power_cut_at_op = cut_at;
    Rig {
        main: (0..6).map(|i| plain(40 << 20, seed * 100 + i)).collect(),
        log: (0..2)
            .map(|i| plain(64 << 20, seed * 100 + 50 + i))
            .collect(),
        meta: Arc::new(Faulty::new(MemDevice::new(32 << 20).unwrap(), cfg)),
        crashy: true,
    }
}

/// 4 KiB updates of random chunks, synced one by one, until the checkpoint areas grew (or the
/// metadata volume lost power). Returns the array, the acknowledged bytes, the write whose sync
/// failed, and the metadata volume's op count before and after the sync that grew the areas.
#[allow(clippy::type_complexity)]
fn write_until_growth(
    rig: &Rig,
    seed: u64,
) -> (Array, Vec<u8>, Option<(u64, Vec<u8>)>, (u64, u64)) {
    let cfg = ecstack_array::ArrayConfig {
        scheme: SchemeKind::Eplog,
        chunk_size: 4096,
        ..ecstack_array::ArrayConfig::rs(4, 2)
    };
    let a = Array::create(&cfg, rig.devices()).unwrap();
    let initial = a.status().metadata.checkpoint_size;
    assert_eq!(initial, 1 << 20, "initial checkpoint areas");
    let cap = a.size();
    let mut durable = vec![0u8; cap as usize];
    let mut rng = Rng::new(seed);
    for _ in 0..40_000 {
        let off = rng.below(cap / 4096) * 4096;
        let mut d = vec![0u8; 4096];
        rng.fill(&mut d);
        let before = rig.meta.counts().ops;
        if a.write(&d, off).is_err() || a.sync().is_err() {
            assert!(rig.meta.is_powered_off(), "error without a power cut");
            return (a, durable, Some((off, d)), (before, before));
        }
        durable[off as usize..off as usize + 4096].copy_from_slice(&d);
        if a.superblock().layout.cp_size > initial {
            return (a, durable, None, (before, rig.meta.counts().ops));
        }
    }
    panic!("the checkpoint areas never grew");
}

/// The checkpoint areas grow with the updates (the superblock records the new layout), and a
/// power cut at any operation of the metadata volume while they grow loses no acknowledged write:
/// the old layout with its checkpoint and frames, or the new one, is found on open.
#[test]
fn checkpoint_areas_grow_with_the_updates() {
    let seed = 77;
    let rig = growth_rig(seed, None);
    let (a, durable, _, (from, to)) = write_until_growth(&rig, seed);
    let grown = a.status().metadata.checkpoint_size;
    assert!(grown >= 2 << 20, "areas of {grown} bytes");
    let layout = a.superblock().layout;
    drop(a);
    let a = Array::open(rig.devices()).unwrap();
    assert_eq!(
        a.superblock().layout,
        layout,
        "the superblock holds the grown layout"
    );
    let mut back = vec![0u8; durable.len()];
    a.read(&mut back, 0).unwrap();
    assert!(back == durable, "data after reopening the grown array");
    drop(a);
    println!("areas grew from 1 MiB to {grown} bytes in metadata ops {from}..{to}");
    // The same workload, cut before each op of the growing sync.
    for cut in from..to {
        let rig = growth_rig(seed, Some(cut));
        let (a, durable, inflight, _) = write_until_growth(&rig, seed);
        drop(a);
        // Main and log devices keep their writes: the array flushed them before each sync.
        rig.meta.power_cut().unwrap();
        rig.meta.power_on();
        let a = Array::open(rig.devices()).unwrap_or_else(|e| panic!("cut {cut}: reopen: {e}"));
        let mut back = vec![0u8; durable.len()];
        a.read(&mut back, 0).unwrap();
        if let Some((off, d)) = inflight {
            let r = off as usize..off as usize + d.len();
            assert!(
                back[r.clone()] == durable[r.clone()] || back[r.clone()] == d[..],
                "cut {cut}: the write in flight reads as neither old nor new"
            );
            back[r.clone()].copy_from_slice(&durable[r]);
        }
        assert!(back == durable, "cut {cut}: acknowledged data lost");
    }
}

/// A huge chunk with a small metadata volume: a journaled update saves a whole stripe's chunks
/// (k × chunk bytes), which must fit a quarter of the incremental area. Refused at create with one
/// line naming the journal, not found out by a degraded write (before: "its journal record of …
/// bytes does not fit the metadata volume's incremental area"); with room for it, a degraded
/// update is journaled and reads back.
#[test]
fn a_journal_record_larger_than_the_metadata_volume_allows_is_refused_at_create() {
    use ecstack_array::{ArrayConfig, ArrayDevices};
    let chunk: u64 = 1 << 20;
    let dev = |size: u64| Arc::new(MemDevice::new(size).unwrap()) as Arc<dyn BlockDevice>;
    let main: Vec<_> = (0..3).map(|_| dev(16 * chunk)).collect();
    let cfg = ArrayConfig {
        chunk_size: chunk as u32,
        ..ArrayConfig::with_geometry(SchemeKind::Md, 2, 1)
    };
    let devices = |meta: Arc<dyn BlockDevice>| ArrayDevices {
        main: main.clone(),
        log: Vec::new(),
        meta,
        specs: None,
    };
    // 4 MiB would do for the checkpoints and frames, but one record of 2 MiB chunks needs an
    // incremental area of 8 MiB.
    let err = Array::create(&cfg, devices(dev(4 << 20))).expect_err("too small for the journal");
    let msg = err.to_string();
    assert!(
        msg.contains("metadata volume is too small")
            && msg.contains("journal records of a whole stripe (2 chunks of 1048576 bytes)")
            && !msg.contains('\n'),
        "{msg}"
    );
    let a = Array::create(&cfg, devices(dev(12 << 20))).expect("room for the journal");
    let data: Vec<u8> = (0..a.size()).map(|i| (i * 13 + 1) as u8).collect();
    a.write(&data, 0).unwrap();
    a.fail_device(0).unwrap();
    let update = vec![0xa5u8; 4096];
    a.write(&update, 4096)
        .expect("a degraded update is journaled");
    let mut back = vec![0u8; data.len()];
    a.read(&mut back, 0).unwrap();
    let mut want = data;
    want[4096..8192].copy_from_slice(&update);
    assert!(back == want, "content after the journaled update");
}
