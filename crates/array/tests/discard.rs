//! Discard (TRIM): every byte of a discarded range reads as zeros afterwards, on every scheme, for
//! whole and partly covered stripes and eplog stripes with uncommitted updates; also after a reopen,
//! with a device failed, after a rebuild, and after the discarded stripes take new writes. The chunk
//! slots of the dropped stripes are discarded on the devices (counted there), and parity stays
//! consistent with the data (a device failed after the discard still decodes zeros and the data
//! around them).

mod common;

use common::*;
use ecstack_array::{Array, SchemeKind};
use ecstack_device::BlockDevice;

fn main_discard_bytes(rig: &Rig) -> u64 {
    rig.main.iter().map(|d| d.stats().discard_bytes).sum()
}

fn run(scheme: SchemeKind, k: usize, m: usize, seed: u64) {
    let what = format!("{scheme} ({k}+{m})");
    let mut rig = Rig::new(scheme, k, m, seed, false);
    let a = Array::create(&config(scheme, k, m), rig.devices()).unwrap();
    let cap = a.size() as usize;
    let sb = a.geometry().stripe_bytes() as usize;
    let n = a.geometry().n;
    let mut rng = Rng::new(seed);
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
    // One updated chunk inside the range, not committed yet (eplog: a pending update).
    let pending_stripe = 5usize;
    let mut upd = vec![0u8; CHUNK as usize];
    rng.fill(&mut upd);
    let uoff = pending_stripe * sb + CHUNK as usize;
    a.write(&upd, uoff as u64).unwrap();
    model[uoff..uoff + upd.len()].copy_from_slice(&upd);
    // Discard from the middle of stripe 2 to the middle of stripe 9: stripes 3..=8 are whole, the
    // ends of stripes 2 and 9 are zeroed.
    let (off, end) = (2 * sb + sb / 2 + 7, 9 * sb + sb / 3);
    let trimmed_before = main_discard_bytes(&rig);
    let r = a.discard(off as u64, (end - off) as u64).unwrap();
    assert_eq!(r.stripes, 6, "{what}: stripes dropped");
    assert_eq!(
        r.zeroed_bytes as usize,
        (3 * sb - off) + (end - 9 * sb),
        "{what}: bytes zeroed"
    );
    // Every chunk of the six dropped stripes (data and parity, wherever it lived) is trimmed once.
    assert_eq!(
        main_discard_bytes(&rig) - trimmed_before,
        6 * n as u64 * CHUNK as u64,
        "{what}: bytes trimmed on the main devices"
    );
    model[off..end].fill(0);
    verify_all(&a, &model, &format!("{what}: after discard"));
    // Parity agrees with the data: every single device failed in turn decodes the same bytes.
    drop(a);
    for d in 0..n {
        let a = Array::open(rig.devices()).unwrap();
        a.fail_device(d).unwrap();
        verify_all(
            &a,
            &model,
            &format!("{what}: device {d} failed after the discard"),
        );
        a.rebuild_device(d, rig.dev(d).clone()).unwrap();
        verify_all(&a, &model, &format!("{what}: device {d} rebuilt"));
        a.close().unwrap();
    }
    let a = Array::open(rig.devices()).unwrap();
    verify_all(&a, &model, &format!("{what}: reopened"));
    // New writes into and around the discarded stripes, another discard, then a device failure and
    // a rebuild onto a fresh device.
    for _ in 0..40 {
        let (o, l) = extent(&mut rng, (10 * sb) as u64, k);
        let mut d = vec![0u8; l];
        rng.fill(&mut d);
        a.write(&d, o).unwrap();
        model[o as usize..o as usize + l].copy_from_slice(&d);
    }
    // Stripe 7 may hold uncommitted updates now (eplog): it is still dropped, after a commit.
    let r = a.discard(7 * sb as u64, sb as u64).unwrap();
    assert_eq!(r.stripes, 1, "{what}: second discard");
    model[7 * sb..8 * sb].fill(0);
    // A discard inside one stripe only zeroes.
    let r = a.discard((6 * sb + 100) as u64, 300).unwrap();
    assert_eq!((r.stripes, r.zeroed_bytes), (0, 300), "{what}");
    model[6 * sb + 100..6 * sb + 400].fill(0);
    verify_all(&a, &model, &format!("{what}: rewritten"));
    a.fail_device(1).unwrap();
    verify_all(&a, &model, &format!("{what}: degraded"));
    a.commit().unwrap();
    verify_all(&a, &model, &format!("{what}: degraded, committed"));
    let fresh = faulty(MAIN_SIZE, seed + 1000, false);
    a.rebuild_device(1, fresh.clone()).unwrap();
    rig.set_dev(1, fresh);
    verify_all(&a, &model, &format!("{what}: rebuilt onto a fresh device"));
    a.close().unwrap();
    drop(a);
    let a = Array::open(rig.devices()).unwrap();
    verify_all(&a, &model, &format!("{what}: reopened after the rebuild"));
}

#[test]
fn discarded_ranges_read_as_zeros() {
    run(SchemeKind::Md, 4, 2, 71);
    run(SchemeKind::Pl, 4, 2, 72);
    run(SchemeKind::Eplog, 4, 2, 73);
    run(SchemeKind::Eplog, 6, 1, 74);
}

/// eplog: once the spare slots of a device run out, the slot allocator wraps around to free home
/// slots, so a chunk of one stripe can come to live in another stripe's home slot. That stripe
/// cannot be dropped from the metadata (a stripe without metadata owns its home slots), so its
/// discard writes zeros instead; the stripe whose chunk lives there keeps its data.
#[test]
fn eplog_discard_when_another_chunk_holds_a_home_slot() {
    let (k, m) = (4, 1);
    let rig = Rig::new(SchemeKind::Eplog, k, m, 75, false);
    let a = Array::create(&config(SchemeKind::Eplog, k, m), rig.devices()).unwrap();
    let g = a.geometry().clone();
    let sb = g.stripe_bytes() as usize;
    let c = CHUNK as usize;
    let mut rng = Rng::new(75);
    let mut model = vec![0u8; a.size() as usize];
    rng.fill(&mut model);
    a.write(&model, 0).unwrap();
    a.commit().unwrap();
    // Move stripe 3's chunk 0 away from its home slot and commit: home slot 3 of its device is free.
    let d = g.dev_of(3, 0);
    let mut w = |a: &Array, model: &mut Vec<u8>, off: usize| {
        let mut b = vec![0u8; c];
        rng.fill(&mut b);
        a.write(&b, off as u64).unwrap();
        model[off..off + c].copy_from_slice(&b);
    };
    w(&a, &mut model, 3 * sb);
    a.commit().unwrap();
    // Update the chunk of stripe 10 on the same device until the allocator has wrapped around
    // (every spare slot used once), committing whenever space runs out.
    let p10 = g.pos_of(10, d);
    assert!(p10 < k, "stripe 10 keeps data on device {d}");
    for _ in 0..(g.slots - g.stripes) + 4 {
        w(&a, &mut model, 10 * sb + p10 * c);
    }
    let r = a.discard(3 * sb as u64, sb as u64).unwrap();
    assert_eq!(r.stripes, 0, "stripe 3 cannot be dropped");
    assert_eq!(r.zeroed_bytes as usize, sb, "stripe 3 is zeroed instead");
    model[3 * sb..4 * sb].fill(0);
    verify_all(&a, &model, "after the discard");
    a.fail_device(d).unwrap();
    verify_all(&a, &model, "device failed");
    a.commit().unwrap();
    verify_all(&a, &model, "device failed, committed");
    drop(a);
    let a = Array::open(rig.devices()).unwrap();
    verify_all(&a, &model, "reopened");
}
