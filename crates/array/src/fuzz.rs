//! Mutation fuzzing of every decoder of bytes read from disk, on stable Rust: valid superblock,
//! checkpoint, metadata-record and whole metadata-volume images are mutated (bit flips, byte
//! overwrites, truncations, extensions, splices; `ecstack_base::mutate`) and each decoder must give
//! a clean error or a correct result, never a panic.
//!
//! Cases per target: `ECSTACK_FUZZ_CASES` (default 2,000; the long mode in `docs/testing.md`
//! runs 1,000,000). A failure names its target, seed and case; `ECSTACK_SEED=<seed>
//! ECSTACK_FUZZ_CASES=<case + 1>` replays it.

use std::sync::Arc;

use ecstack_base::mutate::{case_rng, fuzz_cases, fuzz_seed, mutate};
use ecstack_codes::CodeKind;
use ecstack_device::{BlockDevice, MemDevice};

use crate::crc::{decode_page, encode_page, PAGE_SLOTS};
use crate::format::{Dec, Enc, Geometry, MetaLayout, SchemeKind, Superblock, SB_SLOT};
use crate::meta::{
    encode_v1, encode_v4, JournalEntry, Member, MetaState, MetaVolume, Rec,
    INLINE_CRC_META_VERSION, META_VERSION,
};
use crate::ArrayError;

const DEFAULT_CASES: u64 = 2_000;

/// Outcome counts of one target, so a sweep that never reaches a path fails.
#[derive(Default, Debug)]
struct Outcomes {
    ok: u64,
    err: u64,
    none: u64,
}

fn sweep(
    target: &str,
    seed: u64,
    mut case: impl FnMut(&mut ecstack_base::Rng, &mut Outcomes),
) -> Outcomes {
    let cases = fuzz_cases(DEFAULT_CASES);
    let seed = fuzz_seed(seed);
    let mut out = Outcomes::default();
    for c in 0..cases {
        let mut rng = case_rng(seed, c);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(&mut rng, &mut out)));
        if r.is_err() {
            panic!(
                "{target}: case {c} failed (replay: ECSTACK_SEED={seed} ECSTACK_FUZZ_CASES={})",
                c + 1
            );
        }
    }
    println!("{target}: {cases} cases, seed {seed}: {out:?}");
    out
}

/// Only metadata errors are clean answers to bad bytes.
fn clean(e: &ArrayError) {
    assert!(
        matches!(e, ArrayError::Meta(_)),
        "not a metadata error: {e}"
    );
}

/// The log-stripe member for data chunk `pos` of `stripe`, on the device that holds it, at `slot`.
fn member_at(g: &Geometry, stripe: u64, pos: usize, slot: u64) -> Member {
    Member {
        dev: g.dev_of(stripe, pos) as u16,
        slot,
        stripe,
        pos: pos as u16,
    }
}

fn geometry(scheme: SchemeKind) -> Geometry {
    Geometry {
        n: 6,
        k: 4,
        m: 2,
        chunk: 4096,
        data_start: 4096,
        slots: 600,
        stripes: if scheme == SchemeKind::Eplog {
            450
        } else {
            600
        },
        log_slots: if scheme == SchemeKind::Md { 0 } else { 40 },
    }
}

fn superblock(scheme: SchemeKind) -> Superblock {
    let g = geometry(scheme);
    let devices = g.devices() + 1;
    Superblock {
        generation: 4,
        uuid: 0x5eed_0000_0000_0001,
        scheme,
        code: CodeKind::RsCauchy,
        geometry: g,
        layout: MetaLayout {
            cp_off: [2 * SB_SLOT, 2 * SB_SLOT + 65536],
            cp_size: 65536,
            inc_off: 2 * SB_SLOT + 2 * 65536,
            inc_size: 1 << 18,
        },
        commit_every: 100,
        trim_on_commit: true,
        specs: (0..devices)
            .map(|i| format!("file:/dev/ecstack{i}"))
            .collect(),
    }
}

#[test]
fn superblock_mutations() {
    let images: Vec<Vec<u8>> = SchemeKind::ALL
        .iter()
        .map(|&s| superblock(s).encode().unwrap())
        .collect();
    let donors: Vec<&[u8]> = images.iter().map(|v| v.as_slice()).collect();
    let out = sweep("superblock", 1, |rng, out| {
        let i = rng.below(images.len() as u64) as usize;
        let mut b = mutate(rng, &images[i], &donors);
        // Half the cases re-seal the CRC over the mutated body, to reach the field checks.
        if rng.below(2) == 0 && b.len() >= 20 {
            let len = (b.len() - 20) as u32;
            b[12..16].copy_from_slice(&len.to_le_bytes());
            let crc = crc32c::crc32c(&b[20..]);
            b[16..20].copy_from_slice(&crc.to_le_bytes());
        }
        match Superblock::decode(&b) {
            Ok(None) => out.none += 1,
            Err(e) => {
                clean(&e);
                out.err += 1
            }
            Ok(Some(sb)) => {
                sb.validate().unwrap();
                let again = sb.encode().unwrap();
                assert_eq!(Superblock::decode(&again).unwrap().as_ref(), Some(&sb));
                if b.starts_with(&images[i]) {
                    assert_eq!(sb, superblock(SchemeKind::ALL[i]));
                }
                out.ok += 1;
            }
        }
    });
    assert!(out.ok > 0 && out.err > 0 && out.none > 0, "{out:?}");
}

/// States of an array: md/pl-like (written stripes, pl logs, write intent) and eplog-like
/// (changed data stripes, log stripes pending, a commit under way).
fn states() -> Vec<MetaState> {
    let g = geometry(SchemeKind::Eplog);
    let member = |stripe: u64, pos: usize, slot: u64| member_at(&g, stripe, pos, slot);
    let mut a = MetaState::new(&geometry(SchemeKind::Pl));
    for r in [
        Rec::StripeWritten { stripe: 0 },
        Rec::StripeWritten { stripe: 1 },
        Rec::StripeWritten { stripe: 77 },
        Rec::PlLog { stripe: 1, off: 0 },
        Rec::PlLog { stripe: 77, off: 1 },
        Rec::Dirty { region: 0 },
        Rec::DeviceFailed { dev: 7 },
        Rec::ChunkCrcs {
            dev: 0,
            slot: 0,
            crcs: vec![1, 2, 3],
        },
        Rec::ChunkCrcs {
            dev: 7,
            slot: 1,
            crcs: vec![0xdead_beef],
        },
    ] {
        a.apply(&r);
    }
    let mut b = MetaState::new(&g);
    for r in [
        Rec::FullStripe { stripe: 3 },
        Rec::FullStripe { stripe: 4 },
        Rec::LogStripe {
            id: 0,
            off: 0,
            members: vec![member(3, 1, 460), member(4, 1, 461), member(10, 2, 10)],
        },
        Rec::CommitBegin,
        Rec::CommitDone,
        Rec::LogStripe {
            id: 1,
            off: 0,
            members: vec![member(3, 1, 470), member(5, 3, 5)],
        },
        Rec::DeviceFailed { dev: 2 },
        Rec::ChunkCrcs {
            dev: 3,
            slot: 460,
            crcs: vec![u32::MAX, 0],
        },
    ] {
        b.apply(&r);
    }
    let mut c = b.clone();
    c.apply(&Rec::CommitBegin);
    vec![a, b, c]
}

fn check_state(st: &MetaState, version: u32, body: &[u8], valid: &[u8], original: &MetaState) {
    let again = MetaState::decode(&st.geo, INLINE_CRC_META_VERSION, &st.encode()).unwrap();
    assert!(again == *st, "a decoded checkpoint does not round-trip");
    if body == valid {
        assert!(
            st == original,
            "an unmutated version {version} body decoded differently"
        );
    }
}

#[test]
fn checkpoint_body_mutations() {
    let states = states();
    // Version 5 bodies (checksums inline), version 6 bodies (a page map naming both copies:
    // the checksums are in the checksum area), and version 4 and version 1 bodies (no
    // checksums). All but version 5 decode to the state without its checksums.
    let paged = |s: &MetaState| {
        let s = s.clone();
        s.crcs.0.take_dirty_pages(1, 0);
        s.crcs.0.take_dirty_pages(2, 0);
        s.crcs.0.store(2, 10, Some(1));
        s.crcs.0.take_dirty_pages(3, 0);
        s.encode_paged()
    };
    let bodies: Vec<(u32, Vec<u8>, usize)> = states
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            [
                (INLINE_CRC_META_VERSION, s.encode(), i),
                (META_VERSION, paged(s), i),
                (4, encode_v4(s), i),
                (1, encode_v1(s), i),
            ]
        })
        .collect();
    let without_crcs: Vec<MetaState> = states
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s.crcs = crate::meta::CrcTable::new(&s.geo);
            s
        })
        .collect();
    let donors: Vec<&[u8]> = bodies.iter().map(|(_, b, _)| b.as_slice()).collect();
    let out = sweep("checkpoint body", 2, |rng, out| {
        let (version, valid, i) = &bodies[rng.below(bodies.len() as u64) as usize];
        let st0 = match *version == INLINE_CRC_META_VERSION {
            true => &states[*i],
            false => &without_crcs[*i],
        };
        let b = mutate(rng, valid, &donors);
        match MetaState::decode(&st0.geo, *version, &b) {
            Err(e) => {
                clean(&e);
                out.err += 1;
            }
            Ok(st) => {
                check_state(&st, *version, &b, valid, st0);
                out.ok += 1;
            }
        }
    });
    assert!(out.ok > 0 && out.err > 0, "{out:?}");
}

fn records() -> Vec<Rec> {
    let g = geometry(SchemeKind::Eplog);
    let member = |stripe: u64, pos: usize, slot: u64| member_at(&g, stripe, pos, slot);
    vec![
        Rec::FullStripe { stripe: 8 },
        Rec::LogStripe {
            id: 2,
            off: 1,
            members: vec![member(8, 0, 480), member(9, 2, 9)],
        },
        Rec::StripeWritten { stripe: 20 },
        Rec::PlLog { stripe: 20, off: 2 },
        Rec::PlReset { stripe: 20 },
        Rec::Dirty { region: 0 },
        Rec::Clean,
        Rec::Discard { stripe: 4 },
        Rec::DeviceFailed { dev: 1 },
        Rec::DeviceReplaced { dev: 2 },
        Rec::CommitBegin,
        Rec::CommitDone,
        Rec::Journal(JournalEntry {
            id: 3,
            stripe: 8,
            chunks: vec![(1, vec![0x5a; g.chunk as usize])],
        }),
        Rec::JournalDone { id: 3 },
        Rec::ChunkCrcs {
            dev: 6,
            slot: 2,
            crcs: vec![5, 6],
        },
        Rec::ChunkCrcForget {
            dev: 0,
            slot: 0,
            count: 2,
        },
    ]
}

#[test]
fn metadata_record_mutations() {
    let base = states().swap_remove(1);
    let recs = records();
    let mut e = Enc::default();
    for r in &recs {
        r.encode(&mut e);
    }
    let valid = e.0;
    let mut one = Enc::default();
    recs[1].encode(&mut one);
    let donors: [&[u8]; 1] = [&one.0];
    let out = sweep("metadata records", 3, |rng, out| {
        let b = mutate(rng, &valid, &donors);
        let mut st = base.clone();
        let mut d = Dec::new(&b);
        let mut failed = false;
        while !d.done() {
            let r = Rec::decode(&mut d).and_then(|r| st.apply_checked(&r));
            if let Err(e) = r {
                clean(&e);
                failed = true;
                break;
            }
        }
        // Whatever was applied leaves a state that checkpoints and reloads.
        check_state(&st, INLINE_CRC_META_VERSION, &b, &[], &base);
        if failed {
            out.err += 1;
        } else {
            out.ok += 1;
        }
        if b == valid {
            let mut want = base.clone();
            for r in &recs {
                want.apply(r);
            }
            assert!(st == want, "the unmutated records applied differently");
        }
    });
    assert!(out.ok > 0 && out.err > 0, "{out:?}");
}

#[test]
fn checksum_page_mutations() {
    let crcs: Vec<Option<u32>> = (0..PAGE_SLOTS as u32)
        .map(|i| (i % 3 != 0).then_some(i.wrapping_mul(2_654_435_761)))
        .collect();
    let valid = encode_page(3, 17, 99, 5, &crcs);
    // Donors: the same page of another generation, device or array, and a torn write.
    let mut torn = encode_page(3, 17, 99, 4, &crcs[..500]);
    torn[..2048].copy_from_slice(&valid[..2048]);
    let donors = [
        encode_page(3, 17, 99, 6, &crcs),
        encode_page(2, 17, 99, 5, &crcs),
        encode_page(3, 17, 98, 5, &crcs),
        torn,
    ];
    for d in &donors {
        assert!(decode_page(d, 3, 17, 99, 5).is_err());
    }
    let donor_refs: Vec<&[u8]> = donors.iter().map(|d| d.as_slice()).collect();
    let out = sweep("checksum page", 5, |rng, out| {
        let b = match rng.below(8) {
            0 => valid.clone(),
            _ => mutate(rng, &valid, &donor_refs),
        };
        match decode_page(&b, 3, 17, 99, 5) {
            Err(_) => out.err += 1,
            Ok((c, generation)) => {
                assert!(
                    encode_page(3, 17, 99, generation, &c) == b,
                    "a decoded page does not re-encode exactly"
                );
                out.ok += 1;
            }
        }
    });
    assert!(out.ok > 0 && out.err > 0, "{out:?}");
}

/// A metadata volume with two checkpoints and frames after each: the states a load may find are
/// the first checkpoint plus any prefix of its frames, or the second plus any prefix of its.
fn volume() -> (Arc<MemDevice>, MetaLayout, Vec<MetaState>, u64) {
    let layout = MetaLayout {
        cp_off: [2 * SB_SLOT, 2 * SB_SLOT + 8192],
        cp_size: 8192,
        inc_off: 2 * SB_SLOT + 16384,
        inc_size: 8192,
    };
    let dev = Arc::new(MemDevice::new(layout.inc_off + layout.inc_size).unwrap());
    let mut mv = MetaVolume::new(Arc::clone(&dev) as Arc<dyn BlockDevice>, layout.clone(), 99);
    let mut st = states().swap_remove(0);
    let mut acceptable = vec![st.clone()];
    mv.write_checkpoint(&st.encode()).unwrap();
    let batches: [&[Rec]; 3] = [
        &[Rec::StripeWritten { stripe: 5 }, Rec::Dirty { region: 0 }],
        &[Rec::PlLog { stripe: 5, off: 2 }],
        &[Rec::Clean, Rec::StripeWritten { stripe: 6 }],
    ];
    for (round, recs) in batches.iter().enumerate() {
        if round == 2 {
            mv.write_checkpoint(&st.encode()).unwrap();
        }
        mv.append(recs).unwrap();
        for r in recs.iter() {
            st.apply(r);
        }
        acceptable.push(st.clone());
    }
    let end = layout.inc_off + mv.inc_pos;
    (dev, layout, acceptable, end)
}

#[test]
fn metadata_volume_mutations() {
    let (dev, layout, acceptable, end) = volume();
    let start = layout.cp_off[0];
    let mut valid = vec![0u8; (end - start) as usize];
    dev.read_at(&mut valid, start).unwrap();
    let geo = acceptable[0].geo.clone();
    let out = sweep("metadata volume", 4, |rng, out| {
        let mut b = mutate(rng, &valid, &[]);
        // The volume has a fixed size: a truncation leaves zeros, an extension is cut off.
        b.resize(valid.len(), 0);
        dev.write_at(&b, start).unwrap();
        let mut mv = MetaVolume::new(Arc::clone(&dev) as Arc<dyn BlockDevice>, layout.clone(), 99);
        match mv.load(&geo) {
            Err(e) => {
                clean(&e);
                out.err += 1;
            }
            Ok(st) => {
                assert!(
                    acceptable.contains(&st),
                    "loaded a state the volume never held"
                );
                if b == valid {
                    assert!(
                        st == *acceptable.last().unwrap(),
                        "the unmutated volume loaded differently"
                    );
                }
                out.ok += 1;
            }
        }
        dev.write_at(&valid, start).unwrap();
    });
    assert!(out.ok > 0 && out.err > 0, "{out:?}");
}
