//! Scrub (issue 15, "End-to-end checksums and scrub"): silent corruption at rest — bytes flipped on
//! a device behind the array's back — is found by `Array::scrub`. With per-chunk checksums (the
//! default) every bad chunk is located by its checksum and repaired while a stripe has at most m
//! erasures, whatever the code (m = 1 too, and two bad chunks with m = 2, the case parity alone
//! could miscorrect). With checksums off (`Array::set_checksums(false)` before the data is written)
//! scrub falls back to locating by parity: repaired while the code can locate it (one bad chunk per
//! stripe with m = 2), reported, never "repaired" by guessing, when it cannot (m = 1, or a device
//! missing as well). Without checksums the array's reads do not verify chunks: those tests read
//! through the array only after a scrub repaired it.

mod common;

use std::sync::Arc;

use common::*;
use ecstack_array::{AdminCommand, AdminReply, Array, SchemeKind, ScrubOptions, ScrubReport};
use ecstack_device::BlockDevice;

/// A created array filled with seeded random bytes and committed; returns the model.
fn filled(rig: &Rig, scheme: SchemeKind, k: usize, m: usize, seed: u64) -> (Array, Vec<u8>) {
    filled_with(rig, scheme, k, m, seed, true)
}

fn filled_with(
    rig: &Rig,
    scheme: SchemeKind,
    k: usize,
    m: usize,
    seed: u64,
    checksums: bool,
) -> (Array, Vec<u8>) {
    let a = Array::create(&config(scheme, k, m), rig.devices()).unwrap();
    a.set_checksums(checksums);
    let mut rng = Rng::new(seed);
    let mut model = vec![0u8; a.size() as usize];
    rng.fill(&mut model);
    a.write(&model, 0).unwrap();
    // Some updates, so eplog and pl have out-of-place versions and logs to commit.
    for _ in 0..40 {
        let (off, len) = extent(&mut rng, a.size(), k);
        let mut b = vec![0u8; len];
        rng.fill(&mut b);
        a.write(&b, off).unwrap();
        model[off as usize..off as usize + len].copy_from_slice(&b);
    }
    a.commit().unwrap();
    (a, model)
}

/// Flip one byte in every chunk slot of main device `d`, behind the array (at rest, silently). A
/// device holds at most one chunk of any stripe, so every stripe gets exactly one bad chunk.
fn rot_device(rig: &Rig, a: &Array, d: usize, seed: u64) {
    let g = a.geometry();
    let inner = rig.main[d].inner();
    let mut rng = Rng::new(seed);
    for slot in 0..g.slots {
        let at = g.off(slot) + rng.below(g.chunk);
        let mut b = [0u8; 1];
        inner.read_at(&mut b, at).unwrap();
        b[0] ^= 1 << rng.below(8);
        inner.write_at(&b, at).unwrap();
    }
}

fn snapshot(d: &Dev) -> Vec<u8> {
    let mut b = vec![0u8; d.inner().capacity() as usize];
    d.inner().read_at(&mut b, 0).unwrap();
    b
}

fn scrub(a: &Array, repair: bool) -> ScrubReport {
    scrub_with(a, repair, false)
}

fn scrub_with(a: &Array, repair: bool, checksums_only: bool) -> ScrubReport {
    let opts = ScrubOptions {
        repair,
        batch_stripes: 16,
        checksums_only,
        ..ScrubOptions::default()
    };
    a.scrub(&opts, &|_, _| {}).unwrap()
}

/// Make `chunk` wrong while keeping its CRC32C: flip a bit past the first 8 bytes, then change
/// bits of the first 4 bytes so that the checksum comes out the same (CRC32C is affine over
/// GF(2): per length, crc(x ^ e) = crc(x) ^ crc(e) ^ crc(0), and any 32 consecutive bits can
/// reach any checksum change). Wrong bytes that match their checksum: only parity tells.
fn collide(chunk: &mut [u8], rng: &mut Rng) {
    let len = chunk.len();
    let zeros = vec![0u8; len];
    let lin = |e: &[u8]| crc32c::crc32c(e) ^ crc32c::crc32c(&zeros);
    let unit = |byte: usize, bit: u64| {
        let mut e = vec![0u8; len];
        e[byte] = 1 << bit;
        e
    };
    let before = crc32c::crc32c(chunk);
    let (flip, bit) = (8 + rng.below(len as u64 - 8) as usize, rng.below(8));
    // Gaussian elimination over the 32 bits of the first 4 bytes: (their checksum change, bits).
    let mut basis: Vec<(u32, u32)> = Vec::new();
    for b in 0..32 {
        let (mut v, mut m) = (lin(&unit(b / 8, b as u64 % 8)), 1u32 << b);
        for &(bv, bm) in &basis {
            if v ^ bv < v {
                v ^= bv;
                m ^= bm;
            }
        }
        if v != 0 {
            basis.push((v, m));
        }
    }
    let (mut t, mut mask) = (lin(&unit(flip, bit)), 0u32);
    for &(bv, bm) in &basis {
        if t ^ bv < t {
            t ^= bv;
            mask ^= bm;
        }
    }
    assert_eq!(t, 0, "the first 32 bits reach every checksum change");
    chunk[flip] ^= 1 << bit;
    for b in 0..32 {
        if mask >> b & 1 == 1 {
            chunk[b / 8] ^= 1 << (b % 8);
        }
    }
    assert_eq!(crc32c::crc32c(chunk), before);
}

/// [`collide`] every chunk slot of main device `d`, behind the array.
fn collide_device(rig: &Rig, a: &Array, d: usize, seed: u64) {
    let g = a.geometry();
    let inner = rig.main[d].inner();
    let mut rng = Rng::new(seed);
    let mut b = vec![0u8; g.chunk as usize];
    for slot in 0..g.slots {
        inner.read_at(&mut b, g.off(slot)).unwrap();
        let was = b.clone();
        collide(&mut b, &mut rng);
        assert_ne!(b, was);
        inner.write_at(&b, g.off(slot)).unwrap();
    }
}

/// `checksums_only` (the cheap daily mode): chunks that fail their checksum are found and
/// repaired as by the default scrub; a stripe whose every chunk matched its checksum skips the
/// parity check; stripes with chunks whose checksum is not known get the full check.
#[test]
fn checksums_only_finds_bad_chunks_and_skips_the_parity_of_matching_stripes() {
    for (i, scheme) in [SchemeKind::Md, SchemeKind::Pl, SchemeKind::Eplog]
        .into_iter()
        .enumerate()
    {
        let rig = Rig::new(scheme, 4, 2, 90 + i as u64, false);
        let (a, model) = filled(&rig, scheme, 4, 2, 91 + i as u64);
        let clean = scrub_with(&a, true, true);
        assert!(clean.stripes > 0, "{scheme:?}: {clean:?}");
        assert!(clean.checksums_only);
        assert_eq!(
            clean.parity_skipped_stripes, clean.stripes,
            "{scheme:?}: {clean:?}"
        );
        assert_eq!(clean.inconsistent_stripes, 0, "{scheme:?}: {clean:?}");
        rot_device(&rig, &a, 1, 92);
        let r = scrub_with(&a, true, true);
        assert_eq!(r.checksum_errors, r.stripes, "{scheme:?}: {r:?}");
        assert_eq!(r.inconsistent_stripes, r.stripes, "{scheme:?}: {r:?}");
        assert_eq!(r.repaired_stripes, r.stripes, "{scheme:?}: {r:?}");
        assert_eq!(r.parity_skipped_stripes, 0, "{scheme:?}: {r:?}");
        assert!(r.clean(), "{scheme:?}: {r:?}");
        verify_all(
            &a,
            &model,
            &format!("{scheme:?} after a checksums-only repair"),
        );
        let again = scrub_with(&a, true, true);
        assert_eq!(again.parity_skipped_stripes, again.stripes, "{again:?}");
        assert_eq!(again.inconsistent_stripes, 0, "{again:?}");
    }
    // Written with checksums off, so none is known: every stripe gets the full check, and a bad
    // chunk is found and repaired by parity.
    let rig = Rig::new(SchemeKind::Md, 4, 2, 95, false);
    let (a, model) = filled_with(&rig, SchemeKind::Md, 4, 2, 96, false);
    a.set_checksums(true);
    rot_device(&rig, &a, 2, 97);
    let r = scrub_with(&a, true, true);
    assert!(r.stripes > 0);
    assert_eq!(r.parity_skipped_stripes, 0, "{r:?}");
    assert_eq!(r.checksum_errors, 0, "{r:?}");
    assert_eq!(r.inconsistent_stripes, r.stripes, "{r:?}");
    assert_eq!(r.repaired_stripes, r.stripes, "{r:?}");
    verify_all(&a, &model, "after a checksums-only scrub without checksums");
    // The next scrub finds the stripes consistent and gives their chunks checksums; the one after
    // skips every parity.
    let learn = scrub_with(&a, true, true);
    assert_eq!(learn.inconsistent_stripes, 0, "{learn:?}");
    assert!(learn.checksums_learned > 0, "{learn:?}");
    let skip = scrub_with(&a, true, true);
    assert_eq!(skip.parity_skipped_stripes, skip.stripes, "{skip:?}");
}

/// Wrong bytes that still match their checksum ([`collide`]): `checksums_only` takes the stripes
/// as written (the mode's documented limit), the default scrub finds the parity mismatch, locates
/// the chunk by parity (m = 2) and repairs it.
#[test]
fn the_default_scrub_finds_a_parity_mismatch_whose_checksums_match() {
    let rig = Rig::new(SchemeKind::Md, 4, 2, 98, false);
    let (a, model) = filled(&rig, SchemeKind::Md, 4, 2, 99);
    collide_device(&rig, &a, 3, 100);
    let cheap = scrub_with(&a, false, true);
    assert!(cheap.stripes > 0);
    assert_eq!(cheap.checksum_errors, 0, "{cheap:?}");
    assert_eq!(cheap.inconsistent_stripes, 0, "{cheap:?}");
    assert_eq!(cheap.parity_skipped_stripes, cheap.stripes, "{cheap:?}");
    let r = scrub(&a, true);
    assert_eq!(r.checksum_errors, 0, "{r:?}");
    assert_eq!(r.parity_skipped_stripes, 0, "{r:?}");
    assert_eq!(r.inconsistent_stripes, r.stripes, "{r:?}");
    assert_eq!(r.repaired_stripes, r.stripes, "{r:?}");
    assert_eq!(r.repaired_chunks, r.stripes, "{r:?}");
    verify_all(&a, &model, "after the parity repair");
    let again = scrub(&a, true);
    assert_eq!(again.inconsistent_stripes, 0, "{again:?}");
}

#[test]
fn a_clean_array_scrubs_clean_on_every_scheme() {
    for scheme in [SchemeKind::Md, SchemeKind::Pl, SchemeKind::Eplog] {
        let rig = Rig::new(scheme, 4, 2, 1, false);
        let (a, model) = filled(&rig, scheme, 4, 2, 11);
        let r = scrub(&a, true);
        assert!(r.stripes > 0, "{scheme:?}: nothing scrubbed: {r:?}");
        assert_eq!(r.inconsistent_stripes, 0, "{scheme:?}: {r:?}");
        assert_eq!(r.chunks_read, r.stripes * 6, "{scheme:?}: {r:?}");
        assert!(r.clean());
        verify_all(&a, &model, &format!("{scheme:?} after a clean scrub"));
    }
}

#[test]
fn one_bad_chunk_per_stripe_is_located_and_repaired_with_m2() {
    for (i, (scheme, checksums)) in [SchemeKind::Md, SchemeKind::Pl, SchemeKind::Eplog]
        .into_iter()
        .flat_map(|s| [(s, true), (s, false)])
        .enumerate()
    {
        let rig = Rig::new(scheme, 4, 2, 2 + i as u64, false);
        let (a, model) = filled_with(&rig, scheme, 4, 2, 20 + i as u64, checksums);
        rot_device(&rig, &a, 3, 30 + i as u64);
        let r = scrub(&a, true);
        assert!(r.stripes > 0);
        assert_eq!(
            r.inconsistent_stripes, r.stripes,
            "{scheme:?}: every stripe has a bad chunk: {r:?}"
        );
        assert_eq!(r.repaired_stripes, r.stripes, "{scheme:?}: {r:?}");
        assert_eq!(r.repaired_chunks, r.stripes, "{scheme:?}: {r:?}");
        assert_eq!(r.unrepaired_stripes, 0, "{scheme:?}: {r:?}");
        let by_crc = if checksums { r.stripes } else { 0 };
        assert_eq!(r.checksum_errors, by_crc, "{scheme:?}: {r:?}");
        verify_all(&a, &model, &format!("{scheme:?} after repair"));
        let again = scrub(&a, true);
        assert_eq!(
            again.inconsistent_stripes, 0,
            "{scheme:?}: second scrub: {again:?}"
        );
        // The repairs survive a reopen.
        a.close().unwrap();
        drop(a);
        let a = Array::open(rig.devices()).unwrap();
        verify_all(&a, &model, &format!("{scheme:?} reopened after repair"));
    }
}

#[test]
fn without_checksums_a_parity_mismatch_that_cannot_be_located_is_reported_and_nothing_is_written() {
    // m = 1 (XOR): a mismatch says nothing about where.
    let rig = Rig::new(SchemeKind::Md, 4, 1, 3, false);
    let (a, _) = filled_with(&rig, SchemeKind::Md, 4, 1, 31, false);
    rot_device(&rig, &a, 0, 32);
    let before: Vec<Vec<u8>> = rig.main.iter().map(snapshot).collect();
    let r = scrub(&a, true);
    assert!(r.stripes > 0);
    assert_eq!(r.inconsistent_stripes, r.stripes, "{r:?}");
    assert_eq!(r.unrepaired_stripes, r.stripes, "{r:?}");
    assert_eq!(r.repaired_chunks, 0, "{r:?}");
    assert!(!r.clean());
    assert!(r.problems[0].problem.contains("cannot be located"), "{r:?}");
    assert_eq!(r.problems.len() as u64, r.stripes.min(100));
    let after: Vec<Vec<u8>> = rig.main.iter().map(snapshot).collect();
    assert!(
        before == after,
        "a scrub that located nothing wrote to a device"
    );

    // m = 2 with a device failed: one erasure plus one bad chunk is detected, not located.
    let rig = Rig::new(SchemeKind::Pl, 4, 2, 4, false);
    let (a, _) = filled_with(&rig, SchemeKind::Pl, 4, 2, 41, false);
    a.fail_device(1).unwrap();
    rot_device(&rig, &a, 0, 42);
    let before = snapshot(&rig.main[0]);
    let r = scrub(&a, true);
    assert!(r.stripes > 0);
    assert_eq!(r.inconsistent_stripes, r.stripes, "{r:?}");
    assert_eq!(r.unrepaired_stripes, r.stripes, "{r:?}");
    assert_eq!(r.repaired_chunks, 0, "{r:?}");
    assert!(before == snapshot(&rig.main[0]));

    // Two bad chunks in every stripe with m = 2: detected, not repaired.
    let rig = Rig::new(SchemeKind::Md, 4, 2, 5, false);
    let (a, _) = filled_with(&rig, SchemeKind::Md, 4, 2, 51, false);
    rot_device(&rig, &a, 0, 52);
    rot_device(&rig, &a, 4, 53);
    let r = scrub(&a, true);
    assert!(r.stripes > 0);
    assert_eq!(r.inconsistent_stripes, r.stripes, "{r:?}");
    assert_eq!(r.unrepaired_stripes, r.stripes, "{r:?}");
}

/// The cases parity alone cannot locate, with checksums: every bad chunk is named by its checksum
/// and decoded from the rest of its stripe, and the array reads back exactly what was written.
#[test]
fn checksums_locate_what_parity_cannot_and_scrub_repairs_it() {
    // m = 1 (XOR), one bad chunk per stripe.
    let rig = Rig::new(SchemeKind::Md, 4, 1, 13, false);
    let (a, model) = filled(&rig, SchemeKind::Md, 4, 1, 131);
    rot_device(&rig, &a, 0, 132);
    let r = scrub(&a, true);
    assert!(r.stripes > 0);
    assert_eq!(r.checksum_errors, r.stripes, "{r:?}");
    assert_eq!(r.repaired_stripes, r.stripes, "{r:?}");
    assert!(r.clean(), "{r:?}");
    verify_all(&a, &model, "xor after a checksum repair");

    // m = 2 with a device failed plus one bad chunk per stripe (two erasures).
    let rig = Rig::new(SchemeKind::Pl, 4, 2, 14, false);
    let (a, model) = filled(&rig, SchemeKind::Pl, 4, 2, 141);
    a.fail_device(1).unwrap();
    rot_device(&rig, &a, 0, 142);
    let r = scrub(&a, true);
    assert!(r.stripes > 0);
    assert_eq!(r.repaired_stripes, r.stripes, "{r:?}");
    assert_eq!(r.unreadable_stripes, 0, "{r:?}");
    verify_all(&a, &model, "pl degraded after a checksum repair");

    // Two bad chunks in every stripe with m = 2: parity alone could pick a wrong single chunk
    // (the miscorrection case); the checksums name both, and both are rewritten correctly.
    for (i, scheme) in [SchemeKind::Md, SchemeKind::Pl, SchemeKind::Eplog]
        .into_iter()
        .enumerate()
    {
        let rig = Rig::new(scheme, 4, 2, 15 + i as u64, false);
        let (a, model) = filled(&rig, scheme, 4, 2, 151 + i as u64);
        rot_device(&rig, &a, 0, 152);
        rot_device(&rig, &a, 4, 153);
        let r = scrub(&a, true);
        assert!(r.stripes > 0);
        assert_eq!(r.checksum_errors, 2 * r.stripes, "{scheme:?}: {r:?}");
        assert_eq!(r.repaired_chunks, 2 * r.stripes, "{scheme:?}: {r:?}");
        assert!(r.clean(), "{scheme:?}: {r:?}");
        verify_all(&a, &model, &format!("{scheme:?}: two bad chunks repaired"));
        let again = scrub(&a, true);
        assert_eq!(again.checksum_errors, 0, "{scheme:?}: {again:?}");
        assert_eq!(again.inconsistent_stripes, 0, "{scheme:?}: {again:?}");
        assert_eq!(a.status().checksums.chunks_repaired, 2 * r.stripes);
    }
}

/// An array written without checksums (as by a build before them) gets them from its first scrub.
#[test]
fn scrub_gives_chunks_without_a_checksum_theirs() {
    let rig = Rig::new(SchemeKind::Eplog, 4, 2, 16, false);
    let (a, model) = filled_with(&rig, SchemeKind::Eplog, 4, 2, 161, false);
    a.set_checksums(true);
    let r = scrub(&a, true);
    assert_eq!(r.checksums_learned, r.chunks_read, "{r:?}");
    rot_device(&rig, &a, 2, 162);
    verify_all(&a, &model, "reads after the learning scrub");
    assert!(a.status().checksums.checksum_errors > 0);
}

#[test]
fn report_only_scrub_locates_without_writing() {
    let rig = Rig::new(SchemeKind::Eplog, 4, 2, 6, false);
    let (a, model) = filled_with(&rig, SchemeKind::Eplog, 4, 2, 61, false);
    rot_device(&rig, &a, 2, 62);
    let before = snapshot(&rig.main[2]);
    let r = scrub(&a, false);
    assert_eq!(r.inconsistent_stripes, r.stripes, "{r:?}");
    assert_eq!(r.unrepaired_stripes, r.stripes, "{r:?}");
    assert_eq!(r.repaired_chunks, 0);
    assert!(r.problems[0].problem.contains("device 2"), "{r:?}");
    assert!(before == snapshot(&rig.main[2]));
    // Then the repairing scrub, over the admin language.
    let reply = a
        .execute(&AdminCommand::parse("scrub --mb-per-s 1000").unwrap())
        .unwrap();
    match reply {
        AdminReply::Scrubbed(r) => assert_eq!(r.repaired_stripes, r.stripes),
        other => panic!("unexpected reply {other:?}"),
    }
    verify_all(&a, &model, "after the admin scrub");
}

#[test]
fn scrub_under_concurrent_writes_finds_no_false_mismatch() {
    let rig = Rig::new(SchemeKind::Eplog, 4, 2, 7, false);
    let (a, model) = filled(&rig, SchemeKind::Eplog, 4, 2, 71);
    let a = Arc::new(a);
    let writer = {
        let a = Arc::clone(&a);
        let mut model = model;
        std::thread::spawn(move || {
            let mut rng = Rng::new(72);
            for _ in 0..300 {
                let (off, len) = extent(&mut rng, a.size(), 4);
                let mut b = vec![0u8; len];
                rng.fill(&mut b);
                a.write(&b, off).unwrap();
                model[off as usize..off as usize + len].copy_from_slice(&b);
            }
            model
        })
    };
    let mut scrubs = 0;
    while !writer.is_finished() || scrubs == 0 {
        let opts = ScrubOptions {
            batch_stripes: 4,
            checksums_only: scrubs % 2 == 1,
            ..ScrubOptions::default()
        };
        let r = a.scrub(&opts, &|_, _| {}).unwrap();
        assert_eq!(r.inconsistent_stripes, 0, "scrub {scrubs}: {r:?}");
        scrubs += 1;
    }
    let model = writer.join().unwrap();
    verify_all(&a, &model, "after scrubs under load");
}

#[test]
fn the_bandwidth_limit_holds_scrub_back_and_progress_reaches_the_end() {
    let rig = Rig::new(SchemeKind::Md, 4, 2, 8, false);
    let (a, _) = filled(&rig, SchemeKind::Md, 4, 2, 81);
    let seen = std::sync::Mutex::new(Vec::new());
    let opts = ScrubOptions {
        mb_per_s_max: 4.0,
        batch_stripes: 32,
        ..ScrubOptions::default()
    };
    let r = a
        .scrub(&opts, &|done, total| {
            seen.lock().unwrap().push((done, total))
        })
        .unwrap();
    // A lower bound only (sleeping can only make it slower): bytes / limit.
    let floor = r.bytes_read as f64 / 4e6;
    assert!(
        r.seconds >= floor * 0.95,
        "{r:?}: faster than the limit allows ({floor:.3} s)"
    );
    let seen = seen.into_inner().unwrap();
    let total = a.geometry().stripes.min(seen.last().unwrap().1);
    assert_eq!(seen.last().unwrap().0, seen.last().unwrap().1, "{seen:?}");
    assert!(
        total > 0 && seen.windows(2).all(|w| w[0].0 < w[1].0),
        "{seen:?}"
    );
}

#[test]
fn the_scrub_command_parses_and_prints_back() {
    for line in [
        "scrub",
        "scrub --no-repair",
        "scrub --mb-per-s 50",
        "scrub --no-repair --mb-per-s 7",
        "scrub --checksums-only",
        "scrub --no-repair --mb-per-s 7 --checksums-only",
    ] {
        let c = AdminCommand::parse(line).unwrap();
        assert_eq!(c.to_string(), line);
    }
    for bad in ["scrub --mb-per-s", "scrub --mb-per-s x", "scrub now"] {
        let e = AdminCommand::parse(bad).unwrap_err().to_string();
        assert!(e.contains("usage: scrub"), "{bad}: {e}");
    }
}

/// The admin channel's `scrub-progress` (issue 15: "an admin-socket command, with a bandwidth limit
/// and progress"): while a bandwidth-limited `scrub` runs on one connection, another sees it running
/// and advancing, a second `scrub` is refused by name, and at the end the progress reaches the total.
#[test]
fn scrub_progress_over_the_admin_channel_and_one_scrub_at_a_time() {
    use ecstack_array::{ScrubProgress, ScrubProgressReport};
    let rig = Rig::new(SchemeKind::Md, 4, 2, 8, false);
    let (a, _) = filled(&rig, SchemeKind::Md, 4, 2, 82);
    let progress = ScrubProgress::default();
    let ask = |a: &Array| -> ScrubProgressReport {
        serde_json::from_str(&a.admin_with("scrub-progress", &progress).unwrap()).unwrap()
    };
    assert_eq!(
        ask(&a),
        ScrubProgressReport {
            running: false,
            done_stripes: 0,
            total_stripes: 0,
            finished: 0
        }
    );
    let (report, seen) = std::thread::scope(|s| {
        let scrub = s.spawn(|| a.admin_with("scrub --mb-per-s 2", &progress).unwrap());
        let mut seen = Vec::new();
        let t0 = std::time::Instant::now();
        while seen.is_empty() || seen.last().is_some_and(|p: &ScrubProgressReport| p.running) {
            let p = ask(&a);
            if p.running {
                if seen.is_empty() {
                    let e = a.admin_with("scrub", &progress).unwrap_err().to_string();
                    assert!(e.contains("a scrub is already running"), "{e}");
                }
                seen.push(p);
            } else if !seen.is_empty() || scrub.is_finished() {
                seen.push(p);
                break;
            }
            assert!(
                t0.elapsed().as_secs() < 60,
                "scrub did not finish: {seen:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        (scrub.join().unwrap(), seen)
    });
    let r: ScrubReport = serde_json::from_str(&report).unwrap();
    assert!(
        seen.iter().any(|p| p.running),
        "the scrub was never seen running: {seen:?}"
    );
    assert!(
        seen.windows(2)
            .all(|w| w[0].done_stripes <= w[1].done_stripes),
        "{seen:?}"
    );
    let last = ask(&a);
    assert!(!last.running && last.finished == 1, "{last:?}");
    assert_eq!(last.done_stripes, r.stripes, "{last:?} {r:?}");
    assert_eq!(last.total_stripes, r.stripes, "{last:?} {r:?}");
    assert_eq!(
        AdminCommand::parse("scrub-progress").unwrap().to_string(),
        "scrub-progress"
    );
}
