//! Power cuts at random points (Faulty's crash mode: unflushed writes survive, tear or vanish, in any
//! order) on every device at once, then reopen: the metadata always loads, every byte not written
//! since the last flush (or parity commit) holds what the model says, and every byte written since
//! holds its old value or the data of one of the writes that covered it, never anything else.

mod common;

use common::*;
use ecstack_array::{Array, SchemeKind};
use ecstack_device::Outcome;

fn run(scheme: SchemeKind, k: usize, m: usize, seed: u64, steps: usize) {
    run_cut(scheme, k, m, seed, steps, None, 0)
}

/// `meta_cut`: the metadata volume loses power just before its n-th operation (mid-flush, mid-commit),
/// which the test then treats as a crash of the whole machine.
fn run_cut(
    scheme: SchemeKind,
    k: usize,
    m: usize,
    seed: u64,
    steps: usize,
    meta_cut: Option<u64>,
    buffer: usize,
) {
    let what = format!("{scheme} ({k}+{m}) seed {seed} cut {meta_cut:?}");
    let mut rng = Rng::new(seed);
    let mut rig = Rig::new(scheme, k, m, seed, true);
    if let Some(n) = meta_cut {
        let mut cfg = rig.meta.config().clone();
        cfg.power_cut_at_op = Some(n);
        rig.meta = std::sync::Arc::new(ecstack_device::Faulty::new(
            ecstack_device::MemDevice::new(META_SIZE).unwrap(),
            cfg,
        ));
    }
    let cfg = config(scheme, k, m);
    let mut a = Array::create(&cfg, rig.devices()).unwrap();
    a.set_device_buffer(buffer).unwrap();
    let cap = a.size() as usize;
    let mut model = vec![0u8; cap];
    // The model at the last point known durable.
    let mut durable = vec![0u8; cap];
    // Writes since the last point known durable (acknowledged or cut short).
    let mut unsynced: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut cuts = 0;
    let mut torn = 0;
    for step in 0..steps {
        let ctx = format!("{what} step {step}");
        let r = rng.below(100);
        let crashed = match r {
            0..=59 => {
                let (off, len) = extent(&mut rng, cap as u64, k);
                let mut data = vec![0u8; len];
                rng.fill(&mut data);
                let o = off as usize;
                unsynced.push((o, data.clone()));
                match a.write(&data, off) {
                    Ok(()) => {
                        model[o..o + len].copy_from_slice(&data);
                        false
                    }
                    Err(_) if rig.meta.is_powered_off() => true,
                    Err(e) => panic!("{ctx}: write: {e}"),
                }
            }
            60..=77 => {
                let res = if r < 72 {
                    a.sync()
                } else {
                    a.commit().map(|_| ())
                };
                match res {
                    Ok(()) => {
                        // A flush or a parity commit persists everything before it.
                        durable.copy_from_slice(&model);
                        unsynced.clear();
                        false
                    }
                    Err(_) if rig.meta.is_powered_off() => true,
                    Err(e) => panic!("{ctx}: sync/commit: {e}"),
                }
            }
            _ => true,
        };
        match crashed {
            false => {}
            true => {
                cuts += 1;
                drop(a);
                for d in rig.all() {
                    torn += d.power_cut().unwrap().count(Outcome::Torn);
                }
                for d in rig.all() {
                    d.power_on();
                }
                a = loop {
                    match Array::open(rig.devices()) {
                        Ok(a) => {
                            a.set_device_buffer(buffer).unwrap();
                            break a;
                        }
                        // The scheduled cut hit the reopen itself: power-cycle again and retry.
                        Err(_) if rig.meta.is_powered_off() => {
                            for d in rig.all() {
                                d.power_cut().unwrap();
                                d.power_on();
                            }
                        }
                        Err(e) => panic!("{ctx}: metadata did not load after a power cut: {e}"),
                    }
                };
                let mut back = vec![0u8; cap];
                a.read(&mut back, 0)
                    .unwrap_or_else(|e| panic!("{ctx}: read after power cut: {e}"));
                for i in 0..cap {
                    if back[i] == durable[i] {
                        continue;
                    }
                    let mut covering = unsynced
                        .iter()
                        .filter(|(o, d)| (*o..*o + d.len()).contains(&i))
                        .peekable();
                    assert!(
                        covering.peek().is_some(),
                        "{ctx}: byte {i} (chunk {}) was durable before the power cut but changed",
                        i / CHUNK as usize
                    );
                    assert!(
                        covering.any(|(o, d)| d[i - o] == back[i]),
                        "{ctx}: byte {i} (chunk {}) reads {:#04x}: neither its old value {:#04x} nor the data of a write since the last flush",
                        i / CHUNK as usize,
                        back[i],
                        durable[i]
                    );
                }
                // Unflushed bytes hold old or new data: adopt what the array now returns (it is
                // on the media, so durable too).
                model.copy_from_slice(&back);
                durable.copy_from_slice(&back);
                unsynced.clear();
            }
        }
    }
    assert!(cuts > 0, "{what}: no power cut");
    assert!(torn > 0, "{what}: no power cut tore a write");
    if let Some(n) = meta_cut {
        assert!(
            rig.meta.counts().ops > n,
            "{what}: the metadata volume never reached operation {n}"
        );
    }
    a.sync().unwrap();
    verify_all(&a, &model, &format!("{what}: end"));
    // Parity must agree with the data after every power cut (no write hole): with a device gone,
    // every byte is decoded from the others.
    for dev in [0, k] {
        let a = Array::open(rig.devices()).unwrap();
        a.fail_device(dev).unwrap();
        verify_all(&a, &model, &format!("{what}: end, device {dev} failed"));
        drop(a);
        // Back to a healthy array for the next device: rebuild in place.
        let a = Array::open(rig.devices()).unwrap();
        a.rebuild_device(dev, rig.dev(dev).clone()).unwrap();
    }
}

#[test]
fn power_cuts_md() {
    run(SchemeKind::Md, 4, 1, 11, 200);
    run(SchemeKind::Md, 4, 2, 12, 200);
}

#[test]
fn power_cuts_pl() {
    run(SchemeKind::Pl, 4, 1, 21, 200);
    run(SchemeKind::Pl, 6, 2, 22, 200);
}

#[test]
fn power_cuts_eplog() {
    run(SchemeKind::Eplog, 4, 1, 31, 250);
    run(SchemeKind::Eplog, 4, 2, 32, 250);
    run(SchemeKind::Eplog, 6, 2, 33, 250);
}

#[test]
fn power_cut_mid_flush_and_commit() {
    for (i, scheme) in SchemeKind::ALL.into_iter().enumerate() {
        for cut in (12u64..90).step_by(5) {
            run_cut(scheme, 4, 2, 40 + i as u64 * 7 + cut, 120, Some(cut), 0);
        }
    }
}

#[test]
fn power_cuts_eplog_device_buffers() {
    run_cut(SchemeKind::Eplog, 4, 2, 61, 250, None, 4);
    run_cut(SchemeKind::Eplog, 6, 2, 62, 250, None, 8);
    for cut in (14u64..80).step_by(11) {
        run_cut(SchemeKind::Eplog, 4, 1, 63 + cut, 120, Some(cut), 4);
    }
}
