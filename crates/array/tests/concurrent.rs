//! Concurrent callers: threads writing disjoint regions (sharing stripes at the borders) and readers
//! running alongside, with parity commits in between; the result matches each writer's model.

mod common;

use std::sync::Arc;

use common::*;
use ecstack_array::{Array, SchemeKind};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn array_is_send_and_sync() {
    assert_send_sync::<Array>();
}

fn concurrent(scheme: SchemeKind, k: usize, m: usize) {
    let rig = Rig::new(scheme, k, m, 77, false);
    let a = Arc::new(Array::create(&config(scheme, k, m), rig.devices()).unwrap());
    let cap = a.size() as usize;
    let threads = 4;
    let region = cap / threads;
    let models: Vec<Vec<u8>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let a = Arc::clone(&a);
                s.spawn(move || {
                    let mut rng = Rng(1000 + t as u64);
                    let base = t * region;
                    let mut model = vec![0u8; region];
                    for i in 0..150 {
                        let len = 1 + rng.below((region / 8) as u64) as usize;
                        let off = rng.below((region - len) as u64) as usize;
                        let mut d = vec![0u8; len];
                        rng.fill(&mut d);
                        a.write(&d, (base + off) as u64).unwrap();
                        model[off..off + len].copy_from_slice(&d);
                        if i % 10 == 0 {
                            let mut b = vec![0u8; len];
                            a.read(&mut b, (base + off) as u64).unwrap();
                            assert!(b == d, "thread {t}: read-your-write failed");
                        }
                        if t == 0 && i % 50 == 49 {
                            a.commit().unwrap();
                        }
                    }
                    model
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = vec![0u8; cap];
    for (t, m) in models.iter().enumerate() {
        all[t * region..(t + 1) * region].copy_from_slice(m);
    }
    verify_all(&a, &all, &format!("{scheme} concurrent"));
    a.fail_device(1).unwrap();
    verify_all(&a, &all, &format!("{scheme} concurrent, degraded"));
}

#[test]
fn concurrent_writers() {
    for s in SchemeKind::ALL {
        concurrent(s, 4, 2);
    }
}
