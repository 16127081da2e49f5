//! Discard (TRIM): whole stripes inside the range read as zeros afterwards (also after a reopen and
//! with a device failed), partly covered stripes and eplog stripes with uncommitted updates keep
//! their data, and the discarded stripes take new writes normally.

mod common;

use common::*;
use ecstack_array::{Array, SchemeKind};

fn run(scheme: SchemeKind, k: usize, m: usize, seed: u64) {
    let what = format!("{scheme} ({k}+{m})");
    let rig = Rig::new(scheme, k, m, seed, false);
    let a = Array::create(&config(scheme, k, m), rig.devices()).unwrap();
    let cap = a.size() as usize;
    let sb = a.geometry().stripe_bytes() as usize;
    let mut rng = Rng(seed);
    let mut model = vec![0u8; cap];
    rng.fill(&mut model);
    a.write(&model, 0).unwrap();
    a.commit().unwrap();
    // eplog: stripes 3 and 4 get updated and committed, so chunks live away from their home slots.
    for s in [3usize, 4] {
        let mut d = vec![0u8; 2 * CHUNK as usize];
        rng.fill(&mut d);
        let o = s * sb;
        a.write(&d, o as u64).unwrap();
        model[o..o + d.len()].copy_from_slice(&d);
    }
    a.commit().unwrap();
    // eplog: one updated (uncommitted) chunk inside the range keeps its stripe.
    let pending_stripe = 5usize;
    let mut upd = vec![0u8; CHUNK as usize];
    rng.fill(&mut upd);
    let uoff = pending_stripe * sb + CHUNK as usize;
    a.write(&upd, uoff as u64).unwrap();
    model[uoff..uoff + upd.len()].copy_from_slice(&upd);
    // Discard from the middle of stripe 2 to the middle of stripe 9: stripes 3..=8 are whole.
    let (off, end) = (2 * sb + sb / 2, 9 * sb + sb / 3);
    let n = a.discard(off as u64, (end - off) as u64).unwrap();
    let kept_pending = scheme == SchemeKind::Eplog;
    assert_eq!(
        n,
        if kept_pending { 5 } else { 6 },
        "{what}: stripes discarded"
    );
    for s in 3..=8 {
        if !(kept_pending && s == pending_stripe) {
            model[s * sb..(s + 1) * sb].fill(0);
        }
    }
    verify_all(&a, &model, &format!("{what}: after discard"));
    drop(a);
    let a = Array::open(rig.devices()).unwrap();
    verify_all(&a, &model, &format!("{what}: reopened"));
    // New writes into discarded stripes, then a device failure.
    for _ in 0..40 {
        let (o, l) = extent(&mut rng, (10 * sb) as u64, k);
        let mut d = vec![0u8; l];
        rng.fill(&mut d);
        a.write(&d, o).unwrap();
        model[o as usize..o as usize + l].copy_from_slice(&d);
    }
    a.discard(7 * sb as u64, sb as u64).unwrap();
    if !(kept_pending && a.has_pending()) {
        model[7 * sb..8 * sb].fill(0);
    } else {
        // eplog: stripe 7 may hold uncommitted updates now; read back what it holds.
        let mut b = vec![0u8; sb];
        a.read(&mut b, 7 * sb as u64).unwrap();
        model[7 * sb..8 * sb].copy_from_slice(&b);
    }
    verify_all(&a, &model, &format!("{what}: rewritten"));
    a.fail_device(1).unwrap();
    verify_all(&a, &model, &format!("{what}: degraded"));
    a.commit().unwrap();
    verify_all(&a, &model, &format!("{what}: degraded, committed"));
}

#[test]
fn discard_zeroes_whole_stripes() {
    run(SchemeKind::Md, 4, 2, 71);
    run(SchemeKind::Pl, 4, 2, 72);
    run(SchemeKind::Eplog, 4, 2, 73);
    run(SchemeKind::Eplog, 6, 1, 74);
}
