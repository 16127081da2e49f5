//! One test suite for every [`ChunkStore`] backend (STYLE.md §4.3), as `store_suite` is for the
//! MDS's `MetadataStore`. Public (hidden from the docs) so that integration tests and future
//! backends call it:
//!
//! * [`run`]: put, read (every range), modify (data versions and parity stamps), replace, delete,
//!   list, usage and clean errors, all checked against a byte model, then again after the store is
//!   dropped and reopened;
//! * [`corruption`]: a damaged header, checksum or data block, or a change cut short (dirty), is
//!   refused with one error line naming the segment and the chunk, never served, and a put repairs
//!   it;
//! * [`power_cuts`]: a scripted workload (puts, an image put, data and parity modifies, a repeated
//!   delta, replaces, deletes, with a read-back after each) is run once to count its operations,
//!   then once per operation with the power cut just before it. After each cut the store is
//!   reopened: every acknowledged change is there; the change under way is old, new or refused as
//!   corrupt, never other bytes; `list` and `usage` agree; a put repairs whatever was refused.
//!   The report says where the cuts landed and what each change cut short left, so a backend's
//!   test asserts that every path was reached;
//! * [`blocks`], [`block_rot`] and [`block_power_cuts`]: the same for robust objects' coded
//!   blocks (appends, replacement, deletion, stoppable reads; rot reported lost; torn appends cut
//!   off; power cuts at every operation of a block workload, deletions and a compaction
//!   interleaved with appends);
//! * [`block_deletions`]: deletions as appended records (nothing rewritten), deleted keys stored
//!   again, deletions of many keys (their keys in the data area, batches of records), a torn
//!   deletion at the tail dropped, a bad one in the middle making the blocks before it lost,
//!   compaction (only the live blocks kept; a reader opened before still reads; appends and
//!   deletions between its records; abandoned);
//! * [`block_model`]: a seeded random sequence of puts, deletions, reopens and compactions
//!   against an in-memory model (a failing seed replays: `ECSTACK_SEED`).

use std::collections::{BTreeMap, BTreeSet};

use ecstack_base::Rng;

use crate::api::{ChunkMeta, DeltaStamp};
use ecstack_rpc::UpdateScheme;

use crate::chunk_store::{
    deletion_capacity, record_span, BlockKey, BlockPart, Change, ChunkImage, ChunkStore,
    ChunkStoreError, LogPlace, Part, BLOCK_BYTES, BLOCK_HEAD_BYTES, BLOCK_PIECE_BYTES, HEAD_KEYS,
    STORE_MAX_BLOCK_BYTES,
};

type Key = (u64, u32);
type Model = BTreeMap<Key, (ChunkMeta, Vec<u8>)>;
/// A chunk's header and bytes, or `None` when absent.
type State = Option<(ChunkMeta, Vec<u8>)>;

fn meta(segment_id: u64, index: u32, version: u64, chunk_bytes: u64) -> ChunkMeta {
    ChunkMeta {
        reserve_bytes: 0,
        scheme: Default::default(),
        segment_id,
        index,
        version,
        chunk_bytes,
        segment_length: chunk_bytes * 4 - 3,
        applied: Vec::new(),
    }
}

fn parity(segment_id: u64, index: u32, chunk_bytes: u64, applied: Vec<u64>) -> ChunkMeta {
    ChunkMeta {
        version: applied.iter().copied().max().unwrap_or(1),
        applied,
        ..meta(segment_id, index, 1, chunk_bytes)
    }
}

fn data_change(version: u64) -> Change {
    Change::Data {
        expected: 0,
        version,
    }
}

fn delta(from: u32, prior: u64, version: u64) -> Change {
    Change::Parity(DeltaStamp {
        from,
        prior,
        version,
    })
}

fn bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    rng.fill(&mut b);
    b
}

/// Every chunk of the model reads back whole and by pieces with its header; nothing else is
/// listed; usage counts the same chunks.
fn check_all(s: &dyn ChunkStore, model: &Model, ctx: &str) {
    let keys: Vec<Key> = model.keys().copied().collect();
    assert_eq!(s.list().unwrap(), keys, "{ctx}: list");
    assert_eq!(s.usage().chunks, keys.len() as u64, "{ctx}: usage");
    for (&(seg, idx), (m, data)) in model {
        assert_eq!(
            s.meta(seg, idx).unwrap().as_ref(),
            Some(m),
            "{ctx}: header of {seg:#x}/{idx}"
        );
        let (got_meta, got) = s
            .read(seg, idx, 0, m.chunk_bytes)
            .unwrap_or_else(|e| panic!("{ctx}: read {seg:#x}/{idx}: {e}"));
        assert_eq!(&got_meta, m, "{ctx}: header read with {seg:#x}/{idx}");
        assert!(got[..] == data[..], "{ctx}: bytes of {seg:#x}/{idx}");
    }
}

/// Runs the functional suite against a store; `open` must open the same (initially empty) store
/// every time it is called, after the previous handle is dropped.
pub fn run(open: &dyn Fn() -> Box<dyn ChunkStore>) {
    let mut model = Model::new();
    {
        let s = open();
        check_all(&*s, &model, "empty store");
        assert_eq!(s.usage().bytes, 0, "empty store: bytes");
        put_read_ranges(&*s, &mut model);
        modify_in_place(&*s, &mut model);
        parity_deltas_follow_their_stamps(&*s, &mut model);
        extents_change_as_one(&*s, &mut model);
        replace_delete_list_usage(&*s, &mut model);
        images_store_what_put_stores(&*s, &mut model);
        errors_are_clean(&*s, &mut model);
        check_all(&*s, &model, "before reopen");
    }
    // Everything acknowledged above is there after the handle is dropped and reopened, and the
    // reopened store keeps working.
    let bytes = {
        let s = open();
        check_all(&*s, &model, "after reopen");
        let (seg, idx) = (0x201, 0);
        let (m, data) = model.get_mut(&(seg, idx)).unwrap();
        s.modify(seg, idx, 5, 3, data_change(m.version + 1), &mut |b| {
            b.copy_from_slice(b"new");
            Ok(())
        })
        .unwrap();
        m.version += 1;
        data[5..8].copy_from_slice(b"new");
        assert!(s.delete(0x101, 2).unwrap());
        model.remove(&(0x101, 2));
        check_all(&*s, &model, "changed after reopen");
        s.usage().bytes
    };
    let s = open();
    check_all(&*s, &model, "after a second reopen");
    assert_eq!(s.usage().bytes, bytes, "usage bytes after a second reopen");
}

fn put_read_ranges(s: &dyn ChunkStore, model: &mut Model) {
    let mut rng = Rng::new(1);
    for (seg, len) in [
        (0x101u64, 1usize),
        (0x102, 4095),
        (0x103, 4096),
        (0x104, 4097),
        (0x105, 3 * 4096 + 17),
    ] {
        let m = meta(seg, 2, 1, len as u64);
        let data = bytes(&mut rng, len);
        s.put(&m, &data).unwrap();
        assert_eq!(s.meta(seg, 2).unwrap(), Some(m.clone()));
        let (got_meta, got) = s.read(seg, 2, 0, len as u64).unwrap();
        assert_eq!((got_meta, &got[..]), (m.clone(), &data[..]));
        for _ in 0..50 {
            let off = rng.below(len as u64 + 1);
            let l = rng.below(len as u64 - off + 1);
            let (_, got) = s.read(seg, 2, off, l).unwrap();
            assert_eq!(
                got,
                data[off as usize..(off + l) as usize],
                "seg {seg:#x} {off}+{l}"
            );
        }
        model.insert((seg, 2), (m, data));
    }
    assert_eq!(s.meta(0x109, 0).unwrap(), None);
}

fn modify_in_place(s: &dyn ChunkStore, model: &mut Model) {
    let mut rng = Rng::new(2);
    let len = 5 * BLOCK_BYTES + 100;
    let (seg, idx) = (0x201, 0);
    let m = meta(seg, idx, 1, len as u64);
    let mut data = bytes(&mut rng, len);
    s.put(&m, &data).unwrap();
    for v in 2..40u64 {
        let off = rng.below(len as u64) as usize;
        let l = rng.below((len - off) as u64 + 1) as usize;
        let new = bytes(&mut rng, l);
        let mut seen = Vec::new();
        let got = s
            .modify(seg, idx, off as u64, l as u64, data_change(v), &mut |buf| {
                seen = buf.to_vec();
                buf.copy_from_slice(&new);
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, data[off..off + l], "the old bytes handed to modify");
        data[off..off + l].copy_from_slice(&new);
        assert_eq!(
            got.version,
            v - 1,
            "modify returns the header before the change"
        );
        assert_eq!(s.meta(seg, idx).unwrap().unwrap().version, v);
        assert_eq!(s.read(seg, idx, 0, len as u64).unwrap().1, data);
    }
    // A refused change leaves the chunk as it was.
    let e = s
        .modify(seg, idx, 0, 10, data_change(99), &mut |_| Err("no".into()))
        .unwrap_err();
    assert!(e.to_string().contains("no"), "{e}");
    assert_eq!(s.read(seg, idx, 0, len as u64).unwrap().1, data);
    assert_eq!(s.meta(seg, idx).unwrap().unwrap().version, 39);
    // A data change against the wrong version is refused and changes nothing.
    let e = s
        .modify(
            seg,
            idx,
            0,
            10,
            Change::Data {
                expected: 38,
                version: 40,
            },
            &mut |b| {
                b.fill(0);
                Ok(())
            },
        )
        .unwrap_err();
    assert!(matches!(e, ChunkStoreError::Conflict { .. }), "{e}");
    assert_eq!(s.read(seg, idx, 0, len as u64).unwrap().1, data);
    // Against the right one it applies.
    s.modify(
        seg,
        idx,
        len as u64 - 1,
        1,
        Change::Data {
            expected: 39,
            version: 40,
        },
        &mut |b| {
            b[0] ^= 0xff;
            Ok(())
        },
    )
    .unwrap();
    data[len - 1] ^= 0xff;
    model.insert((seg, idx), (meta(seg, idx, 40, len as u64), data));
}

/// A parity chunk takes a delta only against the data version it includes; a repeated delta is a
/// no-op; a gap (a missed delta) is refused, so a parity that missed one never looks current.
fn parity_deltas_follow_their_stamps(s: &dyn ChunkStore, model: &mut Model) {
    let (seg, idx) = (0x301, 4);
    let len = 2 * BLOCK_BYTES as u64;
    let m = parity(seg, idx, len, vec![1, 1, 1]);
    s.put(&m, &vec![0u8; len as usize]).unwrap();
    let xor = |v: u8| {
        move |b: &mut [u8]| {
            b.iter_mut().for_each(|x| *x ^= v);
            Ok(())
        }
    };
    s.modify(seg, idx, 10, 5, delta(1, 1, 2), &mut xor(3))
        .unwrap();
    // The same delta again: not applied twice.
    let before = s
        .modify(seg, idx, 10, 5, delta(1, 1, 2), &mut xor(3))
        .unwrap();
    assert_eq!(before.applied, vec![1, 2, 1]);
    assert_eq!(s.read(seg, idx, 10, 5).unwrap().1, vec![3u8; 5]);
    // Data chunk 1 went 2 → 3 but this parity is asked for 4 → 5: it missed one.
    let e = s
        .modify(seg, idx, 10, 5, delta(1, 4, 5), &mut xor(7))
        .unwrap_err();
    assert!(matches!(e, ChunkStoreError::Conflict { .. }), "{e}");
    assert!(e.to_string().contains("stale, not applied"), "{e}");
    let e = s
        .modify(seg, idx, 0, 1, delta(3, 1, 2), &mut xor(1))
        .unwrap_err();
    assert!(matches!(e, ChunkStoreError::Invalid { .. }), "{e}");
    let e = s
        .modify(seg, idx, 0, 1, data_change(9), &mut xor(1))
        .unwrap_err();
    assert!(e.to_string().contains("takes deltas"), "{e}");
    s.modify(seg, idx, 4090, 10, delta(0, 1, 7), &mut xor(1))
        .unwrap();
    let (got, data) = s.read(seg, idx, 0, len).unwrap();
    assert_eq!(got.applied, vec![7, 2, 1]);
    assert_eq!(got.version, 7);
    assert_eq!(data[10..15], [3u8; 5]);
    assert_eq!(data[4090..4100], [1u8; 10]);
    model.insert((seg, idx), (got, data.to_vec()));
}

/// A change over several extents is one change: every extent changed, one version stamp, the
/// extents handed over in order with their old bytes; a repeated stamp changes nothing and calls
/// nothing; bad extents and a failing change are refused before anything changes.
fn extents_change_as_one(s: &dyn ChunkStore, model: &mut Model) {
    let mut rng = Rng::new(4);
    let (seg, idx) = (0x302, 5);
    let len = 5 * BLOCK_BYTES + 100;
    let m = parity(seg, idx, len as u64, vec![1, 1]);
    let mut data = bytes(&mut rng, len);
    s.put(&m, &data).unwrap();
    let bs = BLOCK_BYTES as u64;
    // Two extents in block 0, an empty one, one across blocks 3 and 4, one in the short last block.
    let extents = [
        0..3,
        10..20,
        20..20,
        4 * bs - 5..4 * bs + 7,
        5 * bs + 90..5 * bs + 100,
    ];
    let deltas: Vec<Vec<u8>> = extents
        .iter()
        .map(|e| bytes(&mut rng, (e.end - e.start) as usize))
        .collect();
    let mut seen = Vec::new();
    let before = s
        .modify_extents(seg, idx, &extents, delta(1, 1, 4), &mut |i, b| {
            seen.push((i, b.to_vec()));
            b.iter_mut().zip(&deltas[i]).for_each(|(x, y)| *x ^= y);
            Ok(())
        })
        .unwrap();
    assert_eq!(before.applied, vec![1, 1], "the header before the change");
    let want_seen: Vec<(usize, Vec<u8>)> = extents
        .iter()
        .enumerate()
        .map(|(i, e)| (i, data[e.start as usize..e.end as usize].to_vec()))
        .collect();
    assert_eq!(seen, want_seen, "extents in order with their old bytes");
    for (e, d) in extents.iter().zip(&deltas) {
        data[e.start as usize..e.end as usize]
            .iter_mut()
            .zip(d)
            .for_each(|(x, y)| *x ^= y);
    }
    let (got, back) = s.read(seg, idx, 0, len as u64).unwrap();
    assert_eq!((got.applied.clone(), got.version), (vec![1, 4], 4));
    assert!(back[..] == data[..], "every extent changed, nothing else");
    // The same stamp again: a no-op, the change not even called.
    s.modify_extents(seg, idx, &extents, delta(1, 1, 4), &mut |_, _| {
        panic!("a repeated delta was applied again")
    })
    .unwrap();
    // Refused before anything changes: unsorted, overlapping, outside the chunk, a failing change.
    let bad: [(&[std::ops::Range<u64>], &str); 3] = [
        (&[10..20, 0..5], "sorted and disjoint"),
        (&[0..10, 9..12], "sorted and disjoint"),
        (
            &[0..10, len as u64 - 1..len as u64 + 1],
            "outside the chunk",
        ),
    ];
    for (extents, why) in bad {
        let e = s
            .modify_extents(seg, idx, extents, delta(0, 1, 5), &mut |_, b| {
                b.fill(0);
                Ok(())
            })
            .unwrap_err();
        assert!(e.to_string().contains(why), "{extents:?}: {e}");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
    let e = s
        .modify_extents(
            seg,
            idx,
            &[0..1, 2 * bs..2 * bs + 1],
            delta(0, 1, 5),
            &mut |i, b| {
                b.fill(0);
                if i == 1 {
                    return Err("the second extent fails".into());
                }
                Ok(())
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("second extent fails"), "{e}");
    let (got, back) = s.read(seg, idx, 0, len as u64).unwrap();
    assert_eq!(got.applied, vec![1, 4], "refused changes left the stamp");
    assert!(back[..] == data[..], "refused changes left the bytes");
    model.insert((seg, idx), (got, data));
}

fn replace_delete_list_usage(s: &dyn ChunkStore, model: &mut Model) {
    let mut rng = Rng::new(3);
    let chunks = s.usage().chunks;
    let bytes_before = s.usage().bytes;
    for m in [
        meta(0x401, 0, 1, 100),
        meta(0x401, 1, 1, 100),
        meta(0xffff_0000_0000_0001, 255, 1, 9000),
    ] {
        let data = bytes(&mut rng, m.chunk_bytes as usize);
        s.put(&m, &data).unwrap();
        model.insert((m.segment_id, m.index), (m, data));
    }
    assert_eq!(s.usage().chunks, chunks + 3);
    assert!(s.usage().bytes >= bytes_before + 9200);
    // A replacement (recovery, repair) takes the place of the chunk whole, at any version.
    let replacement = bytes(&mut rng, 300);
    let m = meta(0x401, 0, 5, 300);
    s.put(&m, &replacement).unwrap();
    assert_eq!(s.usage().chunks, chunks + 3);
    assert_eq!(s.read(0x401, 0, 0, 300).unwrap().1, replacement);
    assert_eq!(s.meta(0x401, 0).unwrap(), Some(m.clone()));
    model.insert((0x401, 0), (m, replacement));
    let keys: Vec<Key> = model.keys().copied().collect();
    assert_eq!(s.list().unwrap(), keys);
    assert!(s.delete(0x401, 1).unwrap());
    assert!(!s.delete(0x401, 1).unwrap());
    assert!(!s.delete(0x409, 0).unwrap());
    model.remove(&(0x401, 1));
    assert_eq!(s.usage().chunks, chunks + 2);
    assert_eq!(s.meta(0x401, 1).unwrap(), None);
    let e = s.read(0x401, 1, 0, 1).unwrap_err();
    assert!(matches!(e, ChunkStoreError::NotFound { .. }), "{e}");
    check_all(s, model, "after replace and delete");
}

/// A chunk received into an image reads back as `put` stores it; an image short of bytes is
/// refused and stores nothing.
fn images_store_what_put_stores(s: &dyn ChunkStore, model: &mut Model) {
    let mut rng = Rng::new(5);
    let data = bytes(&mut rng, 10_001);
    let m = meta(0x501, 0, 1, 10_001);
    let mut image = ChunkImage::new(&m).unwrap();
    for piece in data.chunks(3_000) {
        image.push(piece).unwrap();
    }
    s.put_image(image).unwrap();
    assert_eq!(s.read(0x501, 0, 0, 10_001).unwrap().1, data);
    model.insert((0x501, 0), (m, data.clone()));
    let mut short = ChunkImage::new(&meta(0x502, 0, 1, 10_001)).unwrap();
    short.push(&data[..10_000]).unwrap();
    let e = s.put_image(short).unwrap_err();
    assert!(
        e.to_string()
            .contains("10000 data bytes for a chunk of 10001"),
        "{e}"
    );
    assert_eq!(s.meta(0x502, 0).unwrap(), None);
}

fn errors_are_clean(s: &dyn ChunkStore, model: &mut Model) {
    let one_line = |e: &ChunkStoreError| {
        let t = e.to_string();
        assert!(!t.is_empty() && !t.contains('\n'), "{t:?}");
    };
    let e = s.read(0x601, 4, 0, 1).unwrap_err();
    assert!(matches!(e, ChunkStoreError::NotFound { .. }), "{e}");
    one_line(&e);
    let e = s
        .modify(0x601, 4, 0, 1, data_change(2), &mut |_| Ok(()))
        .unwrap_err();
    assert!(matches!(e, ChunkStoreError::NotFound { .. }), "{e}");
    s.put(&meta(0x601, 4, 1, 100), &[7u8; 100]).unwrap();
    model.insert((0x601, 4), (meta(0x601, 4, 1, 100), vec![7u8; 100]));
    let e = s.read(0x601, 4, 90, 11).unwrap_err();
    assert!(matches!(e, ChunkStoreError::Range { .. }), "{e}");
    one_line(&e);
    let e = s.read(0x601, 4, u64::MAX, 2).unwrap_err();
    assert!(matches!(e, ChunkStoreError::Range { .. }), "{e}");
    let e = s
        .modify(0x601, 4, 95, 6, data_change(2), &mut |_| Ok(()))
        .unwrap_err();
    assert!(matches!(e, ChunkStoreError::Range { .. }), "{e}");
    let e = s.put(&meta(0x601, 5, 1, 100), &[7u8; 99]).unwrap_err();
    assert!(e.to_string().contains("99 data bytes"), "{e}");
    let e = s.put(&meta(0x601, 300, 1, 100), &[7u8; 100]).unwrap_err();
    assert!(e.to_string().contains("chunk index 300"), "{e}");
    let e = s.put(&meta(0x601, 5, 0, 100), &[7u8; 100]).unwrap_err();
    assert!(e.to_string().contains("version 0"), "{e}");
    let e = s
        .modify(0x601, 4, 0, 1, data_change(1), &mut |_| Ok(()))
        .unwrap_err();
    assert!(e.to_string().contains("not above"), "{e}");
    one_line(&e);
    assert_eq!(s.meta(0x601, 5).unwrap(), None);
    assert_eq!(s.read(0x601, 4, 0, 100).unwrap().1, vec![7u8; 100]);
}

/// Corruption: `damage(segment, index, part)` corrupts part of a stored chunk behind the store's
/// back (durably). Every damaged part is refused with one error line that names the segment and
/// the chunk and counts as corruption; reads that do not touch a damaged block still work; a put
/// of the whole chunk repairs it. `s` must be empty.
pub fn corruption(s: &dyn ChunkStore, damage: &dyn Fn(u64, u32, Part)) {
    let len = 4 * BLOCK_BYTES;
    let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
    let m = parity(0xab, 3, len as u64, vec![2, 1]);
    let names = |e: &ChunkStoreError| {
        let t = e.to_string();
        assert!(e.is_corruption(), "not counted as corruption: {t}");
        assert!(!t.contains('\n'), "more than one line: {t:?}");
        assert!(
            t.contains("segment 0xab chunk 3"),
            "does not name the chunk: {t}"
        );
    };
    let repair = |what: &str| {
        s.put(&m, &data).unwrap();
        let (got, back) = s.read(0xab, 3, 0, len as u64).unwrap();
        assert_eq!(got, m, "{what}: header after the repair");
        assert!(back[..] == data[..], "{what}: bytes after the repair");
    };
    repair("first put");

    // A data block: reads that touch it are refused and name it; others still read.
    damage(0xab, 3, Part::Block(2));
    let e = s.read(0xab, 3, 0, len as u64).unwrap_err();
    names(&e);
    assert!(
        matches!(e, ChunkStoreError::Checksum { block: 2, .. }),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "segment 0xab chunk 3: checksum mismatch in block 2 (bytes 8192..12288)"
    );
    let e = s
        .read(0xab, 3, 2 * BLOCK_BYTES as u64 + 100, 1)
        .unwrap_err();
    names(&e);
    assert_eq!(
        s.read(0xab, 3, 0, 2 * BLOCK_BYTES as u64).unwrap().1,
        data[..2 * BLOCK_BYTES]
    );
    assert_eq!(
        s.read(0xab, 3, 3 * BLOCK_BYTES as u64, BLOCK_BYTES as u64)
            .unwrap()
            .1,
        data[3 * BLOCK_BYTES..]
    );
    // An in-place change over it is refused too (it would re-checksum bad bytes).
    let e = s
        .modify(
            0xab,
            3,
            2 * BLOCK_BYTES as u64 + 1,
            1,
            delta(0, 2, 3),
            &mut |_| Ok(()),
        )
        .unwrap_err();
    names(&e);
    // Extents around it change without reading it (only the blocks they touch are read), and
    // the damage stays detected.
    let bs = BLOCK_BYTES as u64;
    s.modify_extents(
        0xab,
        3,
        &[0..10, 3 * bs..3 * bs + 10],
        delta(0, 2, 3),
        &mut |_, b| {
            b.fill(0xee);
            Ok(())
        },
    )
    .unwrap();
    let (got, back) = s.read(0xab, 3, 3 * bs, 10).unwrap();
    assert_eq!((got.applied, &back[..]), (vec![3, 1], &[0xee; 10][..]));
    assert_eq!(s.read(0xab, 3, 0, 10).unwrap().1, vec![0xee; 10]);
    names(&s.read(0xab, 3, 2 * bs, 1).unwrap_err());
    let e = s
        .modify_extents(
            0xab,
            3,
            &[0..1, 2 * bs..2 * bs + 1],
            delta(1, 1, 4),
            &mut |_, _| Ok(()),
        )
        .unwrap_err();
    names(&e);
    repair("a damaged block");

    // A block's checksum.
    damage(0xab, 3, Part::Checksum(1));
    let e = s.read(0xab, 3, BLOCK_BYTES as u64, 1).unwrap_err();
    names(&e);
    assert!(
        matches!(e, ChunkStoreError::Checksum { block: 1, .. }),
        "{e}"
    );
    assert_eq!(s.read(0xab, 3, 0, 10).unwrap().1, data[..10]);
    repair("a damaged checksum");

    // The header: nothing of the chunk is served, not even its header.
    damage(0xab, 3, Part::Header);
    names(&s.meta(0xab, 3).unwrap_err());
    names(&s.read(0xab, 3, 0, 1).unwrap_err());
    names(
        &s.modify(0xab, 3, 0, 1, delta(1, 1, 2), &mut |_| Ok(()))
            .unwrap_err(),
    );
    assert_eq!(
        s.list().unwrap(),
        vec![(0xab, 3)],
        "a corrupt chunk is listed"
    );
    repair("a damaged header");

    // An in-place change cut short.
    damage(0xab, 3, Part::Dirty);
    let e = s.read(0xab, 3, 0, 10).unwrap_err();
    names(&e);
    assert!(e.to_string().contains("cut short"), "{e}");
    names(&s.meta(0xab, 3).unwrap_err());
    repair("a dirty chunk");
    assert!(s.delete(0xab, 3).unwrap());
    assert!(s.list().unwrap().is_empty());
}

/// A backend whose power can be cut at an operation count (over `Faulty` devices).
pub trait Crashable {
    /// Open the store on what the backing storage holds now.
    fn open(&self) -> Result<Box<dyn ChunkStore>, ChunkStoreError>;
    /// Cut power just before the backend's operation number `op`, counted from 0 since it was
    /// made (the store's opening included); `None`: no cut scheduled.
    fn cut_at(&self, op: Option<u64>);
    /// Operations so far.
    fn ops(&self) -> u64;
    fn is_powered_off(&self) -> bool;
    /// Power back on (the store that saw the cut has been dropped).
    fn power_on(&self);
    /// What the last cut interrupted, in the backend's words (`write chunk`, `sync dir`, ...).
    fn last_cut(&self) -> Option<String>;
    /// Writes the cuts so far tore.
    fn torn_writes(&self) -> u64;
}

/// What [`power_cuts`] saw.
#[derive(Debug, Default)]
pub struct PowerCutReport {
    /// Operations of the workload; one cut was made before each.
    pub ops: u64,
    pub cuts: u64,
    pub torn_writes: u64,
    /// [`Crashable::last_cut`] of every cut.
    pub cut_points: BTreeSet<String>,
    /// For each kind of step (`put`, `put image`, `modify data`, `modify parity`, `delete`, `read`,
    /// `open`), what a cut during it left: `old`, `new` or `corrupt`.
    pub outcomes: BTreeSet<(String, String)>,
}

#[derive(Clone)]
enum Step {
    Put(ChunkMeta, Vec<u8>),
    PutImage(ChunkMeta, Vec<u8>),
    /// New bytes at each extent's offset (data), or bytes xored in (parity), as one change.
    Modify {
        key: Key,
        change: Change,
        extents: Vec<(u64, Vec<u8>)>,
    },
    Delete(Key),
    /// A change appended to the chunk's log or reserve (FL, CodFS PL, PLR), read back merged.
    Append {
        key: Key,
        place: LogPlace,
        change: Change,
        extents: Vec<(u64, Vec<u8>)>,
    },
    /// The logged changes merged into the chunk: it reads the same.
    Merge(Key),
    /// The PLR reserve set to this many bytes.
    SetReserve(Key, u64),
}

impl Step {
    fn key(&self) -> Key {
        match self {
            Step::Put(m, _) | Step::PutImage(m, _) => (m.segment_id, m.index),
            Step::Modify { key, .. }
            | Step::Append { key, .. }
            | Step::Delete(key)
            | Step::Merge(key)
            | Step::SetReserve(key, _) => *key,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Step::Put(..) => "put",
            Step::PutImage(..) => "put image",
            Step::Modify {
                change: Change::Data { .. },
                ..
            } => "modify data",
            Step::Modify { extents, .. } if extents.len() > 1 => "modify parity extents",
            Step::Modify { .. } => "modify parity",
            Step::Delete(_) => "delete",
            Step::Append {
                place: LogPlace::Reserve,
                ..
            } => "append to reserve",
            Step::Append { .. } => "append to log",
            Step::Merge(_) => "merge",
            Step::SetReserve(..) => "set reserve",
        }
    }

    /// The chunk after the step, from the model (not from the store's code).
    fn after(&self, before: Option<&(ChunkMeta, Vec<u8>)>) -> Option<(ChunkMeta, Vec<u8>)> {
        match self {
            Step::Put(m, d) | Step::PutImage(m, d) => Some((m.clone(), d.clone())),
            Step::Delete(_) => None,
            Step::Merge(_) => before.cloned(),
            Step::SetReserve(_, bytes) => before.cloned().map(|(m, d)| {
                (
                    ChunkMeta {
                        reserve_bytes: *bytes,
                        ..m
                    },
                    d,
                )
            }),
            Step::Modify {
                change, extents, ..
            }
            | Step::Append {
                change, extents, ..
            } => {
                let (mut m, mut d) = before
                    .cloned()
                    .expect("the workload modifies stored chunks");
                match *change {
                    Change::Data { version, .. } => m.version = version,
                    Change::Parity(s) => {
                        if m.applied[s.from as usize] == s.version {
                            return Some((m, d));
                        }
                        m.applied[s.from as usize] = s.version;
                        m.version = m.version.max(s.version);
                    }
                }
                for (offset, bytes) in extents {
                    let range = *offset as usize..*offset as usize + bytes.len();
                    match change {
                        Change::Data { .. } => d[range].copy_from_slice(bytes),
                        Change::Parity(_) => {
                            d[range].iter_mut().zip(bytes).for_each(|(x, y)| *x ^= y)
                        }
                    }
                }
                Some((m, d))
            }
        }
    }

    fn apply(&self, s: &dyn ChunkStore) -> Result<(), ChunkStoreError> {
        match self {
            Step::Put(m, d) => s.put(m, d),
            Step::PutImage(m, d) => {
                let mut image = ChunkImage::new(m).expect("valid workload header");
                for piece in d.chunks(1000) {
                    image.push(piece).expect("workload image fits");
                }
                s.put_image(image)
            }
            Step::Modify {
                key,
                change,
                extents,
            } => {
                let ranges: Vec<std::ops::Range<u64>> = extents
                    .iter()
                    .map(|(o, b)| *o..*o + b.len() as u64)
                    .collect();
                let mut f = |i: usize, b: &mut [u8]| {
                    let bytes = &extents[i].1;
                    match change {
                        Change::Data { .. } => b.copy_from_slice(bytes),
                        Change::Parity(_) => b.iter_mut().zip(bytes).for_each(|(x, y)| *x ^= y),
                    }
                    Ok(())
                };
                // One extent goes through `modify`, several through `modify_extents`: both paths.
                match &extents[..] {
                    [_] => s.modify(
                        key.0,
                        key.1,
                        ranges[0].start,
                        ranges[0].end - ranges[0].start,
                        *change,
                        &mut |b| f(0, b),
                    ),
                    _ => s.modify_extents(key.0, key.1, &ranges, *change, &mut f),
                }
                .map(|_| ())
            }
            Step::Delete((seg, idx)) => s.delete(*seg, *idx).map(|_| ()),
            Step::Append {
                key,
                place,
                change,
                extents,
            } => {
                let ranges: Vec<std::ops::Range<u64>> = extents
                    .iter()
                    .map(|(o, b)| *o..*o + b.len() as u64)
                    .collect();
                let payload: Vec<u8> = extents.iter().flat_map(|(_, b)| b.clone()).collect();
                s.append(key.0, key.1, *place, &ranges, &payload, *change)
                    .map(|_| ())
            }
            Step::Merge((seg, idx)) => s.merge(*seg, *idx).map(|_| ()),
            Step::SetReserve((seg, idx), bytes) => s.set_reserve(*seg, *idx, *bytes),
        }
    }
}

fn workload() -> Vec<Step> {
    let mut rng = Rng::new(77);
    let a = (0x10, 0);
    let p = (0x10, 3);
    let b = (0x11, 1);
    let alen = 3 * BLOCK_BYTES + 100;
    let plen = 3 * BLOCK_BYTES as u64;
    vec![
        Step::Put(meta(a.0, a.1, 1, alen as u64), bytes(&mut rng, alen)),
        Step::Put(
            parity(p.0, p.1, plen, vec![1, 1, 1]),
            bytes(&mut rng, plen as usize),
        ),
        Step::PutImage(meta(b.0, b.1, 1, 5000), bytes(&mut rng, 5000)),
        // Across a block boundary.
        Step::Modify {
            key: a,
            change: Change::Data {
                expected: 1,
                version: 2,
            },
            extents: vec![(4000, bytes(&mut rng, 300))],
        },
        Step::Modify {
            key: p,
            change: delta(1, 1, 2),
            extents: vec![(10, bytes(&mut rng, 5000))],
        },
        Step::Modify {
            key: a,
            change: Change::Data {
                expected: 2,
                version: 3,
            },
            extents: vec![(0, bytes(&mut rng, 1))],
        },
        // One delta over three extents (an RDP diagonal parity's rows): two in block 0, one in
        // block 2 (two runs of blocks, block 1 untouched).
        Step::Modify {
            key: p,
            change: delta(2, 1, 3),
            extents: vec![
                (0, bytes(&mut rng, 5)),
                (100, bytes(&mut rng, 50)),
                (plen - 300, bytes(&mut rng, 200)),
            ],
        },
        Step::Put(meta(a.0, a.1, 4, alen as u64), bytes(&mut rng, alen)),
        Step::Delete(b),
        // A repeated delta: a no-op.
        Step::Modify {
            key: p,
            change: delta(1, 1, 2),
            extents: vec![(10, bytes(&mut rng, 5000))],
        },
        Step::Modify {
            key: p,
            change: delta(0, 1, 5),
            extents: vec![(plen - 7, bytes(&mut rng, 7))],
        },
        Step::Put(meta(b.0, b.1, 2, 100), bytes(&mut rng, 100)),
        Step::Delete(a),
        Step::Put(meta(0x12, 2, 1, 1), vec![0x5a]),
    ]
    .into_iter()
    .chain(logged_workload(&mut rng))
    .collect()
}

/// The logged schemes' part of the workload: a PLR parity with a reserve, an FL data chunk and a
/// CodFS PL parity with log files; appends, merges, a reserve shrink (over and under the bytes in
/// use), an in-place change over logged ones, and deletes.
fn logged_workload(rng: &mut Rng) -> Vec<Step> {
    let plr = (0x13, 4);
    let fl = (0x14, 0);
    let pl = (0x14, 5);
    let len = 3 * BLOCK_BYTES as u64;
    let reserve = 2 * BLOCK_BYTES as u64;
    let logged = |m: ChunkMeta, scheme: UpdateScheme, reserve_bytes: u64| ChunkMeta {
        scheme,
        reserve_bytes,
        ..m
    };
    fn append(
        rng: &mut Rng,
        key: Key,
        place: LogPlace,
        change: Change,
        at: &[(u64, usize)],
    ) -> Step {
        Step::Append {
            key,
            place,
            change,
            extents: at.iter().map(|&(o, n)| (o, bytes(rng, n))).collect(),
        }
    }
    let mut out = vec![
        Step::Put(
            logged(
                parity(plr.0, plr.1, len, vec![1, 1]),
                UpdateScheme::Plr,
                reserve,
            ),
            bytes(rng, len as usize),
        ),
        Step::Put(
            logged(meta(fl.0, fl.1, 1, len), UpdateScheme::Fl, 0),
            bytes(rng, len as usize),
        ),
        Step::Put(
            logged(
                parity(pl.0, pl.1, len, vec![1, 1]),
                UpdateScheme::ParityLog,
                0,
            ),
            bytes(rng, len as usize),
        ),
    ];
    let steps = vec![
        append(
            rng,
            plr,
            LogPlace::Reserve,
            delta(0, 1, 2),
            &[(100, 100), (9000, 100)],
        ),
        append(rng, plr, LogPlace::Reserve, delta(1, 1, 3), &[(4000, 3000)]),
        // A repeated delta: a no-op.
        append(rng, plr, LogPlace::Reserve, delta(0, 1, 2), &[(100, 1)]),
        append(rng, fl, LogPlace::Log, data_change(2), &[(4090, 20)]),
        append(rng, fl, LogPlace::Log, data_change(3), &[(0, 5000)]),
        append(rng, pl, LogPlace::Log, delta(0, 1, 2), &[(50, 700)]),
    ];
    out.extend(steps);
    out.extend([
        // Over the bytes in use: no merge; then under them: merged first.
        Step::SetReserve(plr, reserve + BLOCK_BYTES as u64),
        Step::SetReserve(plr, BLOCK_BYTES as u64),
        Step::Merge(fl),
        // An in-place change of a chunk with logged changes merges them first.
        Step::Modify {
            key: pl,
            change: delta(1, 1, 4),
            extents: vec![(60, bytes(rng, 10))],
        },
        Step::Delete(pl),
    ]);
    out.push(append(
        rng,
        plr,
        LogPlace::Reserve,
        delta(0, 2, 5),
        &[(0, 40)],
    ));
    out.push(Step::Merge(plr));
    out
}

/// What a chunk reads as now: its header and bytes, absent, or refused as corrupt (any other error
/// fails the suite).
fn observe(
    s: &dyn ChunkStore,
    (seg, idx): Key,
    ctx: &str,
) -> Result<Option<(ChunkMeta, Vec<u8>)>, String> {
    let m = match s.meta(seg, idx) {
        Ok(None) => return Ok(None),
        Ok(Some(m)) => m,
        Err(e) if e.is_corruption() => return Err(e.to_string()),
        Err(e) => panic!("{ctx}: header of {seg:#x}/{idx}: {e}"),
    };
    match s.read(seg, idx, 0, m.chunk_bytes) {
        Ok((got, data)) => {
            assert_eq!(
                got, m,
                "{ctx}: {seg:#x}/{idx}: the header changed between reads"
            );
            Ok(Some((got, data.to_vec())))
        }
        Err(e) if e.is_corruption() => Err(e.to_string()),
        Err(e) => panic!("{ctx}: read {seg:#x}/{idx}: {e}"),
    }
}

/// Power cuts at every operation of a scripted workload: `fresh(seed)` makes an empty backend
/// (the seed drives its power-cut choices). See the module docs.
///
/// Each cut point runs with `seeds` seeds (what survives a cut is random for most policies). Every
/// third run cuts the power a second time early in the reopen (a crash during recovery).
pub fn power_cuts(fresh: &dyn Fn(u64) -> Box<dyn Crashable>, seeds: u64) -> PowerCutReport {
    let steps = workload();
    // A run without a cut: the workload's operations, and its model checked at the end.
    let total = {
        let b = fresh(0);
        let s = b.open().unwrap();
        let mut model = Model::new();
        for (i, step) in steps.iter().enumerate() {
            step.apply(&*s)
                .unwrap_or_else(|e| panic!("step {i} ({}): {e}", step.kind()));
            let key = step.key();
            match step.after(model.get(&key)) {
                Some(c) => model.insert(key, c),
                None => model.remove(&key),
            };
            assert_eq!(
                observe(&*s, key, "no cut").unwrap().as_ref(),
                model.get(&key),
                "step {i} ({}) read back",
                step.kind()
            );
        }
        let ops = b.ops();
        check_all(&*s, &model, "the workload without a cut");
        ops
    };
    let mut report = PowerCutReport {
        ops: total,
        ..PowerCutReport::default()
    };
    for n in 0..total {
        for seed in 0..seeds {
            let b = fresh(n * seeds + seed);
            b.cut_at(Some(n));
            let ctx = format!("cut before operation {n} of {total}, seed {seed}");
            let second = (seed % 3 == 0).then_some(n % 4);
            cut_once(&*b, &steps, &ctx, second, &mut report);
            report.cuts += 1;
            report.torn_writes += b.torn_writes();
        }
    }
    report
}

/// One run of the workload with the cut scheduled in `b`: up to the cut, then reopen and check.
///
/// `second`: cut again before that operation of the reopen.
fn cut_once(
    b: &dyn Crashable,
    steps: &[Step],
    ctx: &str,
    second: Option<u64>,
    report: &mut PowerCutReport,
) {
    let mut model = Model::new();
    let note_cut = |report: &mut PowerCutReport| {
        let point = b
            .last_cut()
            .unwrap_or_else(|| panic!("{ctx}: the power was never cut"));
        report.cut_points.insert(point);
    };
    let s = match b.open() {
        Ok(s) => s,
        Err(_) if b.is_powered_off() => {
            note_cut(report);
            b.power_on();
            report.outcomes.insert(("open".into(), "old".into()));
            let s = b.open().unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            check_all(&*s, &model, ctx);
            return;
        }
        Err(e) => panic!("{ctx}: open: {e}"),
    };
    // The step under way when the power went, and the chunk before and after it.
    let mut cut: Option<(&'static str, Key, State, State)> = None;
    for (i, step) in steps.iter().enumerate() {
        let key = step.key();
        let before = model.get(&key).cloned();
        let after = step.after(before.as_ref());
        match step.apply(&*s) {
            Ok(()) => {}
            Err(_) if b.is_powered_off() => {
                cut = Some((step.kind(), key, before, after));
                break;
            }
            Err(e) => panic!("{ctx}: step {i} ({}): {e}", step.kind()),
        }
        match &after {
            Some(c) => model.insert(key, c.clone()),
            None => model.remove(&key),
        };
        // The read-back is part of the workload: a cut there interrupts nothing.
        let back = match s.meta(key.0, key.1) {
            Ok(Some(m)) => s
                .read(key.0, key.1, 0, m.chunk_bytes)
                .map(|(m, d)| Some((m, d.to_vec()))),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        match back {
            Ok(got) => assert_eq!(got.as_ref(), model.get(&key), "{ctx}: step {i} read back"),
            Err(_) if b.is_powered_off() => {
                cut = Some(("read", key, after.clone(), after));
                break;
            }
            Err(e) => panic!("{ctx}: step {i} read back: {e}"),
        }
    }
    let Some((kind, key, before, after)) = cut else {
        panic!("{ctx}: the workload ran to its end without the cut");
    };
    drop(s);
    note_cut(report);
    b.power_on();
    if let Some(k) = second {
        b.cut_at(Some(b.ops() + k));
    }
    let s = match b.open() {
        Ok(s) => s,
        Err(_) if b.is_powered_off() => {
            note_cut(report);
            report.outcomes.insert(("recovery".into(), "cut".into()));
            b.power_on();
            b.open()
                .unwrap_or_else(|e| panic!("{ctx}: reopen after two cuts: {e}"))
        }
        Err(e) => panic!("{ctx}: reopen after the cut during {kind}: {e}"),
    };
    b.cut_at(None);
    let ctx = format!("{ctx} (during {kind} of {:#x}/{})", key.0, key.1);
    // Every acknowledged change is there, exactly.
    let mut others = model.clone();
    others.remove(&key);
    for (&k, c) in &others {
        assert_eq!(
            observe(&*s, k, &ctx).as_ref(),
            Ok(&Some(c.clone())),
            "{ctx}: acknowledged chunk {:#x}/{}",
            k.0,
            k.1
        );
    }
    // The change under way: old, new, or refused as corrupt.
    let got = observe(&*s, key, &ctx);
    let outcome = match &got {
        Err(_) => "corrupt",
        Ok(g) if *g == after => "new",
        Ok(g) if *g == before => "old",
        Ok(g) => panic!(
            "{ctx}: the chunk under way reads as neither its old nor its new state: {:?}",
            g.as_ref().map(|(m, _)| m)
        ),
    };
    // A no-op step (a repeated delta) has one state: count it as old.
    let outcome = if before == after && outcome == "new" {
        "old"
    } else {
        outcome
    };
    report.outcomes.insert((kind.into(), outcome.into()));
    let listed = s.list().unwrap();
    let others_keys: Vec<Key> = others.keys().copied().collect();
    assert_eq!(
        listed
            .iter()
            .copied()
            .filter(|k| *k != key)
            .collect::<Vec<_>>(),
        others_keys,
        "{ctx}: list"
    );
    assert_eq!(s.usage().chunks, listed.len() as u64, "{ctx}: usage");
    assert_eq!(
        listed.contains(&key),
        !matches!(got, Ok(None)),
        "{ctx}: list and read disagree on the chunk under way"
    );
    // Adopt what survived; a put repairs a corrupt chunk.
    match got {
        Ok(Some(c)) => {
            model.insert(key, c);
        }
        Ok(None) => {
            model.remove(&key);
        }
        Err(_) => {
            let (m, d) = before
                .or(after)
                .expect("a corrupt chunk had a state before or after");
            s.put(&m, &d)
                .unwrap_or_else(|e| panic!("{ctx}: repair: {e}"));
            model.insert(key, (m, d));
        }
    }
    check_all(&*s, &model, &ctx);
    drop(s);
    let s = b
        .open()
        .unwrap_or_else(|e| panic!("{ctx}: second reopen: {e}"));
    check_all(&*s, &model, &format!("{ctx}, reopened again"));
}

// ---- Coded blocks of robust objects ----

/// An object's blocks as a model holds them: in stored order, each key once.
type Blocks = Vec<(BlockKey, Vec<u8>)>;
type BlockModel = BTreeMap<u64, (u32, Blocks)>;

fn bkey(id: u32, version: u64) -> BlockKey {
    BlockKey { id, version }
}

/// Appends `blocks` to the model's object as the store appends them: a key stored again moves
/// to its newest place.
fn model_put(
    model: &mut BlockModel,
    object: u64,
    block_bytes: u32,
    blocks: &[(BlockKey, Vec<u8>)],
) {
    let (_, stored) = model.entry(object).or_insert((block_bytes, Vec::new()));
    for (k, d) in blocks {
        stored.retain(|(s, _)| s != k);
        stored.push((*k, d.clone()));
    }
}

fn put_model_blocks(
    s: &dyn ChunkStore,
    object: u64,
    block_bytes: u32,
    blocks: &[(BlockKey, Vec<u8>)],
) -> Result<(), ChunkStoreError> {
    let refs: Vec<(BlockKey, &[u8])> = blocks.iter().map(|(k, d)| (*k, &d[..])).collect();
    s.put_blocks(object, block_bytes, &refs)
}

/// Every block of an object read back whole (`Err`: a block refused as lost), `None` if the
/// store holds none of it.
fn observe_blocks(s: &dyn ChunkStore, object: u64) -> Result<Option<Blocks>, String> {
    let Some(b) = s.open_blocks(object).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for i in 0..b.table.blocks.len() {
        match b.read_block(i, &mut |_| true) {
            Ok(Some(d)) => out.push((b.table.blocks[i].key, d)),
            Ok(None) => panic!("object {object:#x}: a read that was never stopped stopped"),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(Some(out))
}

/// The store holds exactly the model's blocks, in order, byte for byte; usage counts them.
fn check_blocks(s: &dyn ChunkStore, model: &BlockModel, ctx: &str) {
    let objects: Vec<u64> = model.keys().copied().collect();
    assert_eq!(s.objects().unwrap(), objects, "{ctx}: objects");
    let n: usize = model.values().map(|(_, b)| b.len()).sum();
    assert_eq!(s.usage().blocks, n as u64, "{ctx}: usage counts the blocks");
    for (&o, (bb, blocks)) in model {
        let t = s.block_table(o).unwrap().unwrap();
        assert_eq!(
            (t.object, t.block_bytes),
            (o, *bb),
            "{ctx}: table of {o:#x}"
        );
        let keys: Vec<BlockKey> = blocks.iter().map(|(k, _)| *k).collect();
        let got: Vec<BlockKey> = t.blocks.iter().map(|b| b.key).collect();
        assert_eq!(got, keys, "{ctx}: stored order of {o:#x}");
        let back = observe_blocks(s, o)
            .unwrap_or_else(|e| panic!("{ctx}: object {o:#x}: {e}"))
            .unwrap();
        assert!(back == *blocks, "{ctx}: bytes of object {o:#x}");
    }
}

fn some_blocks(rng: &mut Rng, ids: std::ops::Range<u32>, version: u64, len: usize) -> Blocks {
    ids.map(|id| (bkey(id, version), bytes(rng, len))).collect()
}

/// The block cases of every backend: batches appended in order, a key stored again replaces the
/// old one (newest record wins), blocks of several versions of an id kept apart, reads that stop
/// between 4 KiB pieces, deletion of listed blocks and of whole objects, clean errors, usage, and
/// all of it again after the store is dropped and reopened. `open` as for [`run`]; the store must
/// hold no blocks.
pub fn blocks(open: &dyn Fn() -> Box<dyn ChunkStore>) {
    let mut rng = Rng::new(44);
    let mut model = BlockModel::new();
    {
        let s = open();
        check_blocks(&*s, &model, "no blocks");
        // Blocks of 1 MiB, of an odd size and of one byte.
        for (object, bb) in [(0x10u64, 1u32 << 20), (0x11, 10_001), (0x12, 1)] {
            let b = some_blocks(&mut rng, 0..3, 1, bb as usize);
            put_model_blocks(&*s, object, bb, &b).unwrap();
            model_put(&mut model, object, bb, &b);
            check_blocks(&*s, &model, "first batches");
        }
        // Another batch; one of its keys is stored already (it moves to the end, new bytes).
        let mut b = some_blocks(&mut rng, 3..6, 1, 10_001);
        b.push((bkey(1, 1), bytes(&mut rng, 10_001)));
        put_model_blocks(&*s, 0x11, 10_001, &b).unwrap();
        model_put(&mut model, 0x11, 10_001, &b);
        // The same id at the next version is another block.
        let b = some_blocks(&mut rng, 0..2, 2, 10_001);
        put_model_blocks(&*s, 0x11, 10_001, &b).unwrap();
        model_put(&mut model, 0x11, 10_001, &b);
        // A key twice in one batch: the later one wins.
        let b = vec![(bkey(9, 1), vec![1u8; 1]), (bkey(9, 1), vec![2u8; 1])];
        put_model_blocks(&*s, 0x12, 1, &b).unwrap();
        model_put(&mut model, 0x12, 1, &b);
        check_blocks(&*s, &model, "replaced and versioned blocks");

        // A read stops between pieces when told (a cancelled stream): before the first, after
        // one piece of a 1 MiB block.
        let o = s.open_blocks(0x10).unwrap().unwrap();
        assert_eq!(o.read_block(0, &mut |_| false).unwrap(), None);
        let mut seen = Vec::new();
        let stopped = o
            .read_block(1, &mut |done| {
                seen.push(done);
                done < (BLOCK_HEAD_BYTES as usize + BLOCK_PIECE_BYTES) as u64
            })
            .unwrap();
        assert_eq!(stopped, None);
        assert_eq!(
            seen,
            vec![
                0,
                BLOCK_HEAD_BYTES,
                BLOCK_HEAD_BYTES + BLOCK_PIECE_BYTES as u64
            ]
        );

        // Deletion of listed blocks (some not stored), then of a whole object.
        let gone = [bkey(0, 1), bkey(4, 1), bkey(77, 1)];
        assert_eq!(s.delete_blocks(0x11, Some(&gone)).unwrap(), 2);
        model
            .get_mut(&0x11)
            .unwrap()
            .1
            .retain(|(k, _)| !gone.contains(k));
        assert_eq!(s.delete_blocks(0x11, Some(&gone)).unwrap(), 0);
        assert_eq!(s.delete_blocks(0x12, None).unwrap(), 4);
        model.remove(&0x12);
        assert_eq!(s.delete_blocks(0x12, None).unwrap(), 0, "already gone");
        assert!(s.block_table(0x12).unwrap().is_none());
        assert!(s.open_blocks(0x12).unwrap().is_none());
        check_blocks(&*s, &model, "after deletions");
        // An object opened before a deletion still reads what it had.
        let before = s.open_blocks(0x11).unwrap().unwrap();
        let n = before.table.blocks.len();
        let keys: Vec<BlockKey> = model[&0x11].1.iter().map(|(k, _)| *k).collect();
        assert_eq!(s.delete_blocks(0x11, Some(&keys[..2])).unwrap(), 2);
        model.get_mut(&0x11).unwrap().1.drain(..2);
        for i in 0..n {
            match before.read_block(i, &mut |_| true) {
                Ok(Some(d)) => assert_eq!(d.len(), 10_001),
                Ok(None) => panic!("stopped"),
                // A device store may have given the space to the new file: never wrong bytes.
                Err(e) => assert!(e.is_corruption(), "{e}"),
            }
        }
        drop(before);
        // Appends after a deletion go after the kept blocks.
        let b = some_blocks(&mut rng, 20..22, 3, 10_001);
        put_model_blocks(&*s, 0x11, 10_001, &b).unwrap();
        model_put(&mut model, 0x11, 10_001, &b);
        check_blocks(&*s, &model, "appended after a deletion");

        // Clean errors: a block of another size than the stream's or the object's, a block
        // size out of range; nothing changes.
        let line = |e: ChunkStoreError| {
            let t = e.to_string();
            assert!(!t.contains('\n') && !e.is_corruption(), "{t}");
            t
        };
        let e =
            line(put_model_blocks(&*s, 0x11, 10_001, &[(bkey(50, 1), vec![0; 10])]).unwrap_err());
        assert!(
            e.contains("object 0x11") && e.contains("has 10 bytes"),
            "{e}"
        );
        let e = line(put_model_blocks(&*s, 0x11, 10, &[(bkey(50, 1), vec![0; 10])]).unwrap_err());
        assert!(e.contains("the stored ones have 10001"), "{e}");
        let e = line(put_model_blocks(&*s, 0x13, 0, &[]).unwrap_err());
        assert!(e.contains("block size 0"), "{e}");
        let big = STORE_MAX_BLOCK_BYTES + 1;
        let e = line(
            put_model_blocks(&*s, 0x13, big, &[(bkey(1, 1), vec![0; big as usize])]).unwrap_err(),
        );
        assert!(e.contains("outside"), "{e}");
        check_blocks(&*s, &model, "after refusals");
    }
    let s = open();
    check_blocks(&*s, &model, "reopened");
    let bytes_before = s.usage().bytes;
    let b = some_blocks(&mut rng, 0..2, 1, 1 << 20);
    put_model_blocks(&*s, 0x10, 1 << 20, &b).unwrap();
    model_put(&mut model, 0x10, 1 << 20, &b);
    assert!(
        s.usage().bytes > bytes_before,
        "block files count in usage bytes"
    );
    drop(s);
    let s = open();
    check_blocks(&*s, &model, "reopened again");
    for o in model.keys() {
        s.delete_blocks(*o, None).unwrap();
    }
    check_blocks(&*s, &BlockModel::new(), "all deleted");
}

/// Rot and torn appends in a block file ([`ChunkStore::damage_block`] flips a byte of a stored
/// block behind the store's back, durably); `open` as for [`run`]. A
/// block whose head or a piece rotted is reported lost (one line naming the object and the
/// block), never served, and the other blocks still read; at the next open a damaged record of
/// the last batch counts as an append cut short (or rot): it is dropped and the batch's other
/// records are kept.
pub fn block_rot(open: &dyn Fn() -> Box<dyn ChunkStore>) {
    let damage = |s: &dyn ChunkStore, o, k, p| s.damage_block(o, k, p).unwrap();
    let mut rng = Rng::new(45);
    let bb = 3 * BLOCK_PIECE_BYTES as u32 + 100;
    let first = some_blocks(&mut rng, 0..3, 1, bb as usize);
    let second = some_blocks(&mut rng, 3..5, 1, bb as usize);
    let third = some_blocks(&mut rng, 5..7, 1, bb as usize);
    let o = 0x44;
    {
        let s = open();
        for b in [&first, &second, &third] {
            put_model_blocks(&*s, o, bb, b).unwrap();
        }
        // A piece of a middle block, the head of another.
        damage(&*s, o, bkey(1, 1), BlockPart::Piece(2));
        damage(&*s, o, bkey(3, 1), BlockPart::Head);
        let opened = s.open_blocks(o).unwrap().unwrap();
        let mut lost = Vec::new();
        for i in 0..opened.table.blocks.len() {
            match opened.read_block(i, &mut |_| true) {
                Ok(Some(d)) => {
                    let k = opened.table.blocks[i].key;
                    let want = [&first, &second, &third]
                        .iter()
                        .flat_map(|b| b.iter())
                        .find(|(w, _)| *w == k)
                        .unwrap();
                    assert!(d == want.1, "block {k:?} served other bytes");
                }
                Ok(None) => panic!("stopped"),
                Err(e) => {
                    let t = e.to_string();
                    assert!(e.is_corruption(), "{t}");
                    assert!(!t.contains('\n'), "{t}");
                    assert!(t.starts_with("object 0x44 block "), "{t}");
                    lost.push(t);
                }
            }
        }
        assert_eq!(lost.len(), 2, "{lost:?}");
        assert!(
            lost[0].contains("block 1@1: lost: checksum mismatch in piece 2"),
            "{lost:?}"
        );
        assert!(
            lost[1].contains("block 3@1: lost") && lost[1].contains("bad head"),
            "{lost:?}"
        );
        // The first record of the last batch rots too: at the next open it reads as an append
        // cut short.
        damage(&*s, o, bkey(5, 1), BlockPart::Piece(0));
    }
    let s = open();
    let t = s.block_table(o).unwrap().unwrap();
    let keys: Vec<u32> = t.blocks.iter().map(|b| b.key.id).collect();
    // Block 3's head is unreadable (its key is unknown) and block 5 was dropped: two lost.
    assert_eq!(
        keys,
        vec![0, 1, 2, 4, 6],
        "the bad record of the last batch is dropped"
    );
    assert_eq!(t.lost, 2);
    assert_eq!(s.usage().blocks, 5);
    drop(s);
    // Stable: the dropped record stays dropped.
    let s = open();
    assert_eq!(s.block_table(o).unwrap().unwrap(), t);
    // Appending again goes after the kept records; a deletion appends its record; compaction
    // rewrites the file without the unreadable head (its block stays lost: not copied) and keeps
    // the rotted piece rotted.
    put_model_blocks(&*s, o, bb, &third).unwrap();
    assert_eq!(s.delete_blocks(o, Some(&[bkey(0, 1)])).unwrap(), 1);
    let t = s.block_table(o).unwrap().unwrap();
    let keys: Vec<u32> = t.blocks.iter().map(|b| b.key.id).collect();
    assert_eq!(keys, vec![1, 2, 4, 5, 6]);
    assert_eq!((t.slots, t.lost), (10, 2));
    let c = s.compact_blocks(o, &mut || true).unwrap().unwrap();
    assert_eq!((c.slots_before, c.slots_after, c.blocks), (10, 5, 5));
    let t = s.block_table(o).unwrap().unwrap();
    let keys: Vec<u32> = t.blocks.iter().map(|b| b.key.id).collect();
    assert_eq!(keys, vec![1, 2, 4, 5, 6]);
    let opened = s.open_blocks(o).unwrap().unwrap();
    assert!(opened
        .read_block(0, &mut |_| true)
        .unwrap_err()
        .is_corruption());
    for i in 1..5 {
        assert!(opened.read_block(i, &mut |_| true).unwrap().is_some());
    }
    drop(opened);
    drop(s);
    let s = open();
    assert_eq!(s.block_table(o).unwrap().unwrap().blocks.len(), 5);
    s.delete_blocks(o, None).unwrap();
    assert!(s.objects().unwrap().is_empty());
}

/// Whether `got` is `before` with some of a batch's blocks appended whole (an append cut short
/// keeps each of its records that landed whole): every block before is there, and every block is
/// `before`'s or one of the batch's, byte for byte.
fn partly_put(
    before: &Option<Blocks>,
    got: &Option<Blocks>,
    steps: &[BlockStep],
    object: u64,
) -> bool {
    let before = before.clone().unwrap_or_default();
    let Some(got) = got else {
        return false;
    };
    let batch_blocks: Vec<&(BlockKey, Vec<u8>)> = steps
        .iter()
        .filter_map(|s| match s {
            BlockStep::Put(o, _, b) if *o == object => Some(b.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    before.iter().all(|(k, _)| got.iter().any(|(g, _)| g == k))
        && got
            .iter()
            .all(|b| before.contains(b) || batch_blocks.iter().any(|x| **x == *b))
}

#[derive(Clone)]
enum BlockStep {
    Put(u64, u32, Blocks),
    Delete(u64, Option<Vec<BlockKey>>),
    /// The object's block file compacted: the same blocks.
    Compact(u64),
}

impl BlockStep {
    fn object(&self) -> u64 {
        match self {
            BlockStep::Put(o, ..) | BlockStep::Delete(o, _) | BlockStep::Compact(o) => *o,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            BlockStep::Put(..) => "put blocks",
            BlockStep::Delete(_, Some(_)) => "delete blocks",
            BlockStep::Delete(_, None) => "delete object",
            BlockStep::Compact(_) => "compact",
        }
    }

    fn apply(&self, s: &dyn ChunkStore) -> Result<(), ChunkStoreError> {
        match self {
            BlockStep::Put(o, bb, b) => put_model_blocks(s, *o, *bb, b),
            BlockStep::Delete(o, keys) => s.delete_blocks(*o, keys.as_deref()).map(|_| ()),
            BlockStep::Compact(o) => s.compact_blocks(*o, &mut || true).map(|c| {
                assert!(c.is_some(), "object {o:#x} had dead slots to compact");
            }),
        }
    }

    fn model(&self, model: &mut BlockModel) {
        match self {
            BlockStep::Put(o, bb, b) => model_put(model, *o, *bb, b),
            BlockStep::Compact(_) => {}
            BlockStep::Delete(o, None) => {
                model.remove(o);
            }
            BlockStep::Delete(o, Some(keys)) => {
                if let Some((_, b)) = model.get_mut(o) {
                    b.retain(|(k, _)| !keys.contains(k));
                    if b.is_empty() {
                        model.remove(o);
                    }
                }
            }
        }
    }
}

fn block_workload() -> Vec<BlockStep> {
    let mut rng = Rng::new(46);
    let bb = 2 * BLOCK_PIECE_BYTES as u32 + 10;
    let mut b = |ids: std::ops::Range<u32>, v| some_blocks(&mut rng, ids, v, bb as usize);
    vec![
        BlockStep::Put(0x51, bb, b(0..3, 1)),
        BlockStep::Put(0x52, bb, b(0..1, 1)),
        BlockStep::Put(0x51, bb, b(3..5, 1)),
        // A key stored again, with new bytes.
        BlockStep::Put(0x51, bb, b(1..2, 1)),
        BlockStep::Delete(0x51, Some(vec![bkey(0, 1), bkey(3, 1)])),
        // Deletions interleaved with appends: a deleted key stored again, deleted again.
        BlockStep::Put(0x51, bb, b(0..1, 1)),
        BlockStep::Delete(0x51, Some(vec![bkey(2, 1), bkey(9, 9)])),
        BlockStep::Put(0x51, bb, b(7..9, 2)),
        BlockStep::Delete(0x51, Some(vec![bkey(0, 1), bkey(7, 2)])),
        BlockStep::Compact(0x51),
        BlockStep::Put(0x51, bb, b(9..10, 2)),
        BlockStep::Delete(0x51, Some(vec![bkey(1, 1)])),
        BlockStep::Delete(0x52, None),
        BlockStep::Put(0x52, bb, b(4..6, 1)),
    ]
}

/// Power cuts at every operation of a block workload (appends, a replaced key, deletions of
/// listed blocks interleaved with appends, a compaction, deletions of whole objects), over `fresh(seed)` backends as in [`power_cuts`]. After
/// each cut the store reopens with every acknowledged block there, in order, byte for byte; the
/// step cut short left its object as before it or after it, never a mix, and never a block
/// served as lost. The report's `outcomes` say which.
pub fn block_power_cuts(fresh: &dyn Fn(u64) -> Box<dyn Crashable>, seeds: u64) -> PowerCutReport {
    let steps = block_workload();
    let total = {
        let b = fresh(0);
        let s = b.open().unwrap();
        let mut model = BlockModel::new();
        for step in &steps {
            step.apply(&*s).unwrap();
            step.model(&mut model);
            let o = step.object();
            let want = model.get(&o).map(|(_, b)| b.clone());
            assert_eq!(observe_blocks(&*s, o), Ok(want), "no cut: read back");
        }
        let ops = b.ops();
        check_blocks(&*s, &model, "the block workload without a cut");
        ops
    };
    let mut report = PowerCutReport {
        ops: total,
        ..PowerCutReport::default()
    };
    for n in 0..total {
        for seed in 0..seeds {
            let b = fresh(n * seeds + seed);
            b.cut_at(Some(n));
            let ctx = format!("block workload, cut before operation {n} of {total}, seed {seed}");
            let mut model = BlockModel::new();
            let mut cut = None;
            match b.open() {
                Err(_) if b.is_powered_off() => cut = Some(("open", 0, None, None)),
                Err(e) => panic!("{ctx}: open: {e}"),
                Ok(s) => {
                    for step in &steps {
                        let o = step.object();
                        let before = model.get(&o).map(|(_, b)| b.clone());
                        let mut after_model = model.clone();
                        step.model(&mut after_model);
                        let after = after_model.get(&o).map(|(_, b)| b.clone());
                        match step.apply(&*s) {
                            Ok(()) => model = after_model,
                            Err(_) if b.is_powered_off() => {
                                cut = Some((step.kind(), o, before, after));
                                break;
                            }
                            Err(e) => panic!("{ctx}: {}: {e}", step.kind()),
                        }
                        // Reading back is part of the workload.
                        match observe_blocks(&*s, o) {
                            Ok(got) => assert_eq!(got, after, "{ctx}: read back"),
                            Err(_) if b.is_powered_off() => {
                                cut = Some(("read", o, after.clone(), after));
                                break;
                            }
                            Err(e) => panic!("{ctx}: read back: {e}"),
                        }
                    }
                }
            }
            let (kind, object, before, after) =
                cut.unwrap_or_else(|| panic!("{ctx}: the workload ran to its end without the cut"));
            report.cut_points.insert(
                b.last_cut()
                    .unwrap_or_else(|| panic!("{ctx}: the power was never cut")),
            );
            b.power_on();
            let s = b
                .open()
                .unwrap_or_else(|e| panic!("{ctx}: reopen after the cut during {kind}: {e}"));
            let mut others = model.clone();
            others.remove(&object);
            for (&o, (_, blocks)) in &others {
                assert_eq!(
                    observe_blocks(&*s, o),
                    Ok(Some(blocks.clone())),
                    "{ctx}: acknowledged object {o:#x}"
                );
            }
            let got = observe_blocks(&*s, object)
                .unwrap_or_else(|e| panic!("{ctx}: the object under way serves a lost block: {e}"));
            let outcome = if kind == "open" || kind == "read" || got == before {
                "old"
            } else if got == after {
                "new"
            } else if kind == "put blocks" && partly_put(&before, &got, &steps, object) {
                "part"
            } else {
                panic!(
                    "{ctx}: object {object:#x} reads as neither its state before {kind} nor after"
                )
            };
            report.outcomes.insert((kind.into(), outcome.into()));
            match got {
                Some(b) => {
                    let bb = model
                        .get(&object)
                        .map(|(bb, _)| *bb)
                        .or_else(|| {
                            steps.iter().find_map(|st| match st {
                                BlockStep::Put(o, bb, _) if *o == object => Some(*bb),
                                _ => None,
                            })
                        })
                        .unwrap();
                    model.insert(object, (bb, b));
                }
                None => {
                    model.remove(&object);
                }
            }
            check_blocks(&*s, &model, &ctx);
            report.cuts += 1;
            report.torn_writes += b.torn_writes();
        }
    }
    report
}

/// The stored keys of an object, in order.
fn table_keys(s: &dyn ChunkStore, object: u64) -> Vec<BlockKey> {
    s.block_table(object)
        .unwrap()
        .map(|t| t.blocks.iter().map(|b| b.key).collect())
        .unwrap_or_default()
}

fn model_delete(model: &mut BlockModel, object: u64, keys: &[BlockKey]) -> u32 {
    let Some((_, b)) = model.get_mut(&object) else {
        return 0;
    };
    let before = b.len();
    b.retain(|(k, _)| !keys.contains(k));
    let n = (before - b.len()) as u32;
    if b.is_empty() {
        model.remove(&object);
    }
    n
}

/// Deletions of some blocks as appended records, and compaction (every backend; `open` as for
/// [`run`], the store holding no blocks):
///
/// * a deletion appends one record (the file grows by one slot, no block moves) and survives a
///   reopen; a deleted key stored again is there, deleted again is gone;
/// * a deletion of more keys than a head holds keeps them in its data area, and of more than a
///   record holds is a batch of records; a reopen replays them;
/// * a deletion record at the tail that fails its checks (a deletion cut short) is dropped at the
///   next open: the blocks are still there; one record of a batch of them failing drops only its
///   keys' deletion;
/// * a deletion record in the middle of the file that fails its checks (rot: a bad head, a bad
///   piece of keys) makes every block stored before it lost, never served; the blocks stored after
///   it stay;
/// * compaction keeps exactly the live blocks, in order, and gives the dead slots back; a reader
///   opened before it still reads its blocks; appends and deletions made between its records (from
///   `go_on`) are in the result; a compaction abandoned changes nothing.
pub fn block_deletions(open: &dyn Fn() -> Box<dyn ChunkStore>) {
    let mut rng = Rng::new(47);
    let mut model = BlockModel::new();
    let bb = 5000u32;
    let span = record_span(bb);
    let o = 0x60;
    {
        let s = open();
        let b = some_blocks(&mut rng, 0..6, 1, bb as usize);
        put_model_blocks(&*s, o, bb, &b).unwrap();
        model_put(&mut model, o, bb, &b);
        let before = s.block_table(o).unwrap().unwrap();
        let used = s.usage().bytes;
        // One deletion: one record appended, nothing moved.
        let gone = [bkey(1, 1), bkey(4, 1), bkey(99, 1)];
        assert_eq!(s.delete_blocks(o, Some(&gone)).unwrap(), 2);
        model_delete(&mut model, o, &gone);
        assert_eq!(s.usage().bytes, used + span, "a deletion appends one slot");
        let t = s.block_table(o).unwrap().unwrap();
        let kept: Vec<_> = before
            .blocks
            .iter()
            .filter(|b| !gone.contains(&b.key))
            .copied()
            .collect();
        assert_eq!(t.blocks, kept, "no block moved");
        assert_eq!((t.slots, t.lost), (7, 0));
        check_blocks(&*s, &model, "after a deletion");
        // Deleted, stored again (the new record wins), deleted again, stored again.
        for round in 0..3 {
            let again = vec![(bkey(1, 1), bytes(&mut rng, bb as usize))];
            put_model_blocks(&*s, o, bb, &again).unwrap();
            model_put(&mut model, o, bb, &again);
            check_blocks(&*s, &model, &format!("stored again, round {round}"));
            if round < 2 {
                assert_eq!(s.delete_blocks(o, Some(&[bkey(1, 1)])).unwrap(), 1);
                model_delete(&mut model, o, &[bkey(1, 1)]);
                check_blocks(&*s, &model, &format!("deleted again, round {round}"));
            }
        }
    }
    let s = open();
    check_blocks(&*s, &model, "deletions reopened");
    assert_eq!(s.block_table(o).unwrap().unwrap().slots, 12);

    // Many keys: in the data area, and a batch of records (blocks of 1 byte: 341 keys a record).
    let big = 0x61;
    let cap = deletion_capacity(1);
    assert!(cap > HEAD_KEYS);
    let n = 2 * cap as u32 + 60;
    for ids in [0..n / 2, n / 2..n] {
        let b = some_blocks(&mut rng, ids, 1, 1);
        put_model_blocks(&*s, big, 1, &b).unwrap();
        model_put(&mut model, big, 1, &b);
    }
    let mut gone: Vec<BlockKey> = (0..n).filter(|i| i % 50 != 0).map(|i| bkey(i, 1)).collect();
    rng.shuffle(&mut gone);
    let listed_before = model[&big].1.clone();
    let slots = s.block_table(big).unwrap().unwrap().slots;
    assert_eq!(
        s.delete_blocks(big, Some(&gone)).unwrap(),
        gone.len() as u32
    );
    model_delete(&mut model, big, &gone);
    let t = s.block_table(big).unwrap().unwrap();
    let records = gone.len().div_ceil(cap) as u64;
    assert_eq!(records, 3);
    assert_eq!(t.slots, slots + records);
    check_blocks(&*s, &model, "a deletion of many keys");
    drop(s);
    let s = open();
    check_blocks(&*s, &model, "a deletion of many keys, reopened");
    // The first record of that batch rots: at the next open the batch reads as cut short, and
    // only the other records' deletions stay (the keys of the first are the first `cap` deleted
    // in stored order).
    s.damage_block(big, bkey(0, 1), BlockPart::SlotPiece(slots, 0))
        .unwrap();
    drop(s);
    let s = open();
    let deleted_in_order: Vec<BlockKey> = listed_before
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| gone.contains(k))
        .collect();
    let back = &deleted_in_order[..cap];
    let want: Blocks = listed_before
        .iter()
        .filter(|(k, _)| !gone.contains(k) || back.contains(k))
        .cloned()
        .collect();
    model.insert(big, (1, want));
    check_blocks(
        &*s,
        &model,
        "a batch of deletions with its first record dropped",
    );
    assert_eq!(s.block_table(big).unwrap().unwrap().slots, slots + records);
    // Rot in the keys of a deletion record in the middle of the file (a batch follows it): the
    // blocks stored before it may have been deleted by it: lost, never served.
    let later = some_blocks(&mut rng, n..n + 2, 1, 1);
    put_model_blocks(&*s, big, 1, &later).unwrap();
    s.damage_block(big, bkey(0, 1), BlockPart::SlotPiece(slots + 1, 0))
        .unwrap();
    drop(s);
    let s = open();
    let t = s.block_table(big).unwrap().unwrap();
    assert_eq!(
        t.lost,
        1 + listed_before.len() as u64,
        "the zeroed record, and every block stored before the bad one"
    );
    model.insert(big, (1, later.clone()));
    check_blocks(&*s, &model, "a bad deletion record in the middle");
    assert_eq!(s.delete_blocks(big, None).unwrap(), 2);
    model.remove(&big);

    // A torn deletion at the tail is dropped: the blocks are there. A bad one in the middle: the
    // blocks stored before it are lost, those stored after are not.
    let t3 = 0x62;
    let b = some_blocks(&mut rng, 0..4, 1, bb as usize);
    put_model_blocks(&*s, t3, bb, &b).unwrap();
    model_put(&mut model, t3, bb, &b);
    assert_eq!(
        s.delete_blocks(t3, Some(&[bkey(0, 1), bkey(1, 1)]))
            .unwrap(),
        2
    );
    s.damage_block(t3, bkey(2, 1), BlockPart::SlotHead(4))
        .unwrap();
    drop(s);
    let s = open();
    check_blocks(&*s, &model, "a torn deletion at the tail");
    let t = s.block_table(t3).unwrap().unwrap();
    assert_eq!((t.slots, t.lost), (4, 0), "the torn record cut off");
    assert_eq!(s.delete_blocks(t3, Some(&[bkey(0, 1)])).unwrap(), 1);
    let after = some_blocks(&mut rng, 5..7, 1, bb as usize);
    put_model_blocks(&*s, t3, bb, &after).unwrap();
    s.damage_block(t3, bkey(2, 1), BlockPart::SlotHead(4))
        .unwrap();
    drop(s);
    let s = open();
    let t = s.block_table(t3).unwrap().unwrap();
    assert_eq!(table_keys(&*s, t3), vec![bkey(5, 1), bkey(6, 1)]);
    assert_eq!((t.slots, t.lost), (7, 4));
    model.insert(t3, (bb, after));
    check_blocks(&*s, &model, "a bad deletion record in the middle");

    // Compaction: exactly the live blocks, in order; the dead slots given back; a reader opened
    // before it still reads its blocks.
    let c4 = 0x63;
    let b = some_blocks(&mut rng, 0..10, 1, bb as usize);
    put_model_blocks(&*s, c4, bb, &b).unwrap();
    model_put(&mut model, c4, bb, &b);
    for id in 0..8 {
        // Dead slots 2·id of 10 + id: wanted from 8 dead on.
        assert_eq!(
            s.compactable().contains(&c4),
            id >= 4,
            "after {id} deletions"
        );
        assert_eq!(s.delete_blocks(c4, Some(&[bkey(id, 1)])).unwrap(), 1);
        model_delete(&mut model, c4, &[bkey(id, 1)]);
    }
    assert!(s.compactable().contains(&c4), "16 dead slots of 18");
    let reader = s.open_blocks(c4).unwrap().unwrap();
    let used = s.usage().bytes;
    let c = s.compact_blocks(c4, &mut || true).unwrap().unwrap();
    assert_eq!((c.slots_before, c.slots_after, c.blocks), (18, 2, 2));
    assert_eq!(s.usage().bytes, used - 16 * span);
    assert!(!s.compactable().contains(&c4));
    check_blocks(&*s, &model, "compacted");
    for i in 0..reader.table.blocks.len() {
        let d = reader.read_block(i, &mut |_| true).unwrap().unwrap();
        assert!(
            d == model[&c4].1[i].1,
            "a reader opened before the compaction"
        );
    }
    drop(reader);
    assert_eq!(
        s.compact_blocks(c4, &mut || true).unwrap(),
        None,
        "nothing dead"
    );
    drop(s);
    let s = open();
    check_blocks(&*s, &model, "compacted, reopened");
    assert_eq!(s.block_table(c4).unwrap().unwrap().slots, 2);

    // Appends and deletions between a compaction's records: a block stored anew, a copied key
    // stored again, a copied key deleted, an old block deleted.
    let b = some_blocks(&mut rng, 10..20, 1, bb as usize);
    put_model_blocks(&*s, c4, bb, &b).unwrap();
    model_put(&mut model, c4, bb, &b);
    let gone: Vec<BlockKey> = (10..15).map(|i| bkey(i, 1)).collect();
    s.delete_blocks(c4, Some(&gone)).unwrap();
    model_delete(&mut model, c4, &gone);
    let mut calls = 0;
    let mut during = model.clone();
    let c = s
        .compact_blocks(c4, &mut || {
            calls += 1;
            match calls {
                2 => {
                    let b = vec![
                        (bkey(30, 1), bytes(&mut rng, bb as usize)),
                        (bkey(8, 1), bytes(&mut rng, bb as usize)),
                    ];
                    put_model_blocks(&*s, c4, bb, &b).unwrap();
                    model_put(&mut during, c4, bb, &b);
                }
                4 => {
                    let gone = [bkey(9, 1), bkey(16, 1), bkey(30, 1)];
                    assert_eq!(s.delete_blocks(c4, Some(&gone)).unwrap(), 3);
                    model_delete(&mut during, c4, &gone);
                }
                _ => {}
            }
            true
        })
        .unwrap()
        .unwrap();
    model = during;
    assert_eq!(c.blocks, model[&c4].1.len() as u64);
    check_blocks(
        &*s,
        &model,
        "compacted with appends and deletions meanwhile",
    );
    drop(s);
    let s = open();
    check_blocks(
        &*s,
        &model,
        "compacted with appends and deletions meanwhile, reopened",
    );
    // Abandoned: nothing changes.
    s.delete_blocks(c4, Some(&[bkey(17, 1)])).unwrap();
    model_delete(&mut model, c4, &[bkey(17, 1)]);
    let t = s.block_table(c4).unwrap().unwrap();
    let mut calls = 0;
    let stop = &mut || {
        calls += 1;
        calls < 2
    };
    assert_eq!(s.compact_blocks(c4, stop).unwrap(), None);
    assert_eq!(s.block_table(c4).unwrap().unwrap(), t);
    check_blocks(&*s, &model, "a compaction abandoned");
    drop(s);
    let s = open();
    check_blocks(&*s, &model, "a compaction abandoned, reopened");
    for o in s.objects().unwrap() {
        s.delete_blocks(o, None).unwrap();
    }
    assert!(s.objects().unwrap().is_empty());
}

/// A seeded random sequence of `steps` puts, deletions (listed keys, some not stored; whole
/// objects), reopens and compactions (some with puts and deletions of the same object between
/// their records, some abandoned) on two objects, checked against a model after every step.
/// `open` as for [`run`], the store holding no blocks. A failure names the seed and the step:
/// the same seed replays it exactly.
pub fn block_model(open: &dyn Fn() -> Box<dyn ChunkStore>, seed: u64, steps: usize) {
    let mut rng = Rng::new(seed);
    let mut model = BlockModel::new();
    let objects = [(0x70u64, 1u32), (0x71, 5000)];
    let mut s = open();
    let random_keys = |rng: &mut Rng, n: u64| -> Vec<BlockKey> {
        (0..1 + rng.below(n))
            .map(|_| bkey(rng.below(12) as u32, 1 + rng.below(2)))
            .collect()
    };
    for step in 0..steps {
        let (o, bb) = objects[rng.below(2) as usize];
        let ctx = format!("seed {seed}, step {step}");
        match rng.below(10) {
            0..=3 => {
                let b: Blocks = random_keys(&mut rng, 4)
                    .into_iter()
                    .map(|k| (k, bytes(&mut rng, bb as usize)))
                    .collect();
                put_model_blocks(&*s, o, bb, &b).unwrap_or_else(|e| panic!("{ctx}: put: {e}"));
                model_put(&mut model, o, bb, &b);
            }
            4..=6 => {
                let keys = random_keys(&mut rng, 5);
                let n = s
                    .delete_blocks(o, Some(&keys))
                    .unwrap_or_else(|e| panic!("{ctx}: delete: {e}"));
                assert_eq!(n, model_delete(&mut model, o, &keys), "{ctx}: deleted");
            }
            7 if rng.chance(0.3) => {
                let n = s.delete_blocks(o, None).unwrap();
                let had = model.remove(&o).map_or(0, |(_, b)| b.len());
                assert_eq!(n as usize, had, "{ctx}: deleted all");
            }
            7 => {
                drop(s);
                s = open();
            }
            _ => {
                let abandon_at = rng.chance(0.2).then(|| 1 + rng.below(4));
                let mut during = model.clone();
                let mut calls = 0;
                let store = &*s;
                let r = store.compact_blocks(o, &mut || {
                    calls += 1;
                    if Some(calls) == abandon_at {
                        return false;
                    }
                    if rng.chance(0.3) {
                        let b: Blocks = random_keys(&mut rng, 3)
                            .into_iter()
                            .map(|k| (k, bytes(&mut rng, bb as usize)))
                            .collect();
                        put_model_blocks(store, o, bb, &b).unwrap();
                        model_put(&mut during, o, bb, &b);
                    }
                    if rng.chance(0.3) {
                        let keys = random_keys(&mut rng, 3);
                        let n = store.delete_blocks(o, Some(&keys)).unwrap();
                        assert_eq!(n, model_delete(&mut during, o, &keys));
                    }
                    true
                });
                let r = r.unwrap_or_else(|e| panic!("{ctx}: compact: {e}"));
                model = during;
                let t = s.block_table(o).unwrap();
                if let (Some(c), Some(t)) = (r, t) {
                    assert_eq!(c.blocks, t.blocks.len() as u64, "{ctx}: compacted");
                    assert!(t.slots >= c.slots_after, "{ctx}: slots");
                }
            }
        }
        check_blocks(&*s, &model, &ctx);
    }
    drop(s);
    let s = open();
    check_blocks(&*s, &model, &format!("seed {seed}, reopened at the end"));
    for o in s.objects().unwrap() {
        s.delete_blocks(o, None).unwrap();
    }
}
