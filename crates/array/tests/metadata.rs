//! Metadata volume: the incremental area fills up many times, so full checkpoints alternate between
//! the two areas; reopening (also after power cuts in the middle of it) always finds the state.

mod common;

use std::sync::Arc;

use common::*;
use ecstack_array::{Array, SchemeKind};
use ecstack_device::{BlockDevice, FaultConfig, Faulty, MemDevice, PowerCutPolicy};

fn small_meta_rig(scheme: SchemeKind, seed: u64) -> Rig {
    let mut rig = Rig::new(scheme, 4, 2, seed, true);
    // Size the volume to the minimum this geometry accepts: the incremental area is 256 KiB.
    let sb = Array::plan(&config(scheme, 4, 2), &rig.devices()).unwrap();
    let size = sb.layout.inc_off + (256 << 10);
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
        for d in rig.all() {
            d.power_cut().unwrap();
            d.power_on();
        }
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
