//! `FileStore` through the `ChunkStore` suite (`ecstack_osd::chunk_store_suite`: on disk and on
//! tmpfs, O_DIRECT on and off, power cuts at every operation over a simulated directory of
//! `Faulty` devices), its files on disk (corruption, locking, preallocation), the header's
//! property tests and a mutation fuzz test of chunk files. Long mode: `ECSTACK_FUZZ_CASES=1000000
//! cargo test -p ecstack-osd --test chunk_store fuzz` (seed: `ECSTACK_SEED`).

use ecstack_base::mutate::{case_rng, fuzz_cases, fuzz_seed, mutate};
use ecstack_base::Rng;
use std::path::Path;
use std::sync::Arc;

use ecstack_device::PowerCutPolicy;
use ecstack_osd::chunk_store::{
    self, decode_header, encode_chunk, encode_header, Change, ChunkImage, ChunkStore,
    ChunkStoreError, FileStore, FileStoreOptions, HeaderError, LogPlace, Part, BLOCK_BYTES,
    HEADER_BYTES,
};
use ecstack_osd::chunk_store_suite::{self, Crashable};
use ecstack_osd::store_dir::SimDir;
use ecstack_osd::ChunkMeta;
use ecstack_rpc::UpdateScheme;
use proptest::prelude::*;

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

fn data_change(version: u64) -> Change {
    Change::Data {
        expected: 0,
        version,
    }
}

fn bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    rng.fill(&mut b);
    b
}

/// A FileStore in `dir` with `options`, reopened by the suite after each drop.
fn reopen(dir: &Path, options: FileStoreOptions) -> impl Fn() -> Box<dyn ChunkStore> + '_ {
    move || Box::new(FileStore::open_with(dir, options).unwrap()) as Box<dyn ChunkStore>
}

const DIRECT: FileStoreOptions = FileStoreOptions { direct: true };
const BUFFERED: FileStoreOptions = FileStoreOptions { direct: false };

#[test]
fn file_store_suite() {
    for options in [DIRECT, BUFFERED] {
        let dir = tempfile::tempdir().unwrap();
        chunk_store_suite::run(&reopen(dir.path(), options));
    }
}

/// Whole chunks are written with O_DIRECT where the file system takes it and buffered where it
/// does not: the suite on a tmpfs directory (no O_DIRECT before Linux 6.6) as well as on disk.
#[test]
fn file_store_suite_on_tmpfs() {
    let shm = Path::new("/dev/shm");
    assert!(shm.is_dir(), "/dev/shm (tmpfs) is missing on this machine");
    for options in [DIRECT, BUFFERED] {
        let dir = tempfile::tempdir_in(shm).unwrap();
        chunk_store_suite::run(&reopen(dir.path(), options));
    }
}

/// Robust objects' blocks: the suite's block cases, rot and torn appends, on disk and on tmpfs,
/// O_DIRECT on and off.
#[test]
fn file_store_blocks_suite() {
    for options in [DIRECT, BUFFERED] {
        let dir = tempfile::tempdir().unwrap();
        chunk_store_suite::blocks(&reopen(dir.path(), options));
        let dir = tempfile::tempdir().unwrap();
        chunk_store_suite::block_rot(&reopen(dir.path(), options));
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    chunk_store_suite::blocks(&reopen(dir.path(), DIRECT));
}

/// Deletions of some blocks (appended records, nothing rewritten; torn at the tail, rotted in the
/// middle; many keys) and compaction (readers opened before, appends and deletions meanwhile).
#[test]
fn file_store_block_deletions() {
    let dir = tempfile::tempdir().unwrap();
    chunk_store_suite::block_deletions(&reopen(dir.path(), DIRECT));
}

/// Random puts, deletions, reopens and compactions against a model, on disk and on a simulated
/// directory; `ECSTACK_SEED=<seed>` replays one seed, `ECSTACK_FUZZ_CASES` sets how many.
#[test]
fn file_store_block_model() {
    let seed = fuzz_seed(0);
    let cases = fuzz_cases(12);
    for case in 0..cases {
        let seed = seed + case;
        let dir = tempfile::tempdir().unwrap();
        chunk_store_suite::block_model(&reopen(dir.path(), DIRECT), seed, 60);
        let sim = OnSimDir {
            dir: Arc::new(SimDir::new(seed, PowerCutPolicy::default())),
            options: DIRECT,
        };
        chunk_store_suite::block_model(&|| sim.open().unwrap(), seed, 60);
    }
}

/// Power cuts at every operation of the block workload under every policy: every acknowledged
/// block survives; an append cut short leaves the object old, new, or old with some of the new
/// blocks whole; a deletion cut short leaves it old or new.
#[test]
fn file_store_block_power_cuts() {
    let mut outcomes = std::collections::BTreeSet::new();
    let mut torn = 0;
    for (name, policy) in policies() {
        let report = chunk_store_suite::block_power_cuts(
            &|seed| {
                Box::new(OnSimDir {
                    dir: Arc::new(SimDir::new(seed, policy)),
                    options: DIRECT,
                }) as Box<dyn Crashable>
            },
            4,
        );
        assert_eq!(report.cuts, report.ops * 4, "{name}");
        assert!(report.ops > 20, "{name}: {} operations", report.ops);
        torn += report.torn_writes;
        outcomes.extend(report.outcomes);
    }
    assert!(torn > 0, "no cut tore a write");
    for want in [
        ("put blocks", "old"),
        ("put blocks", "new"),
        ("delete blocks", "old"),
        ("delete blocks", "new"),
        ("delete object", "old"),
        ("delete object", "new"),
        ("compact", "old"),
    ] {
        let want = (want.0.to_string(), want.1.to_string());
        assert!(outcomes.contains(&want), "never {want:?}: {outcomes:?}");
    }
}

#[test]
fn file_store_corruption_suite() {
    for options in [DIRECT, BUFFERED] {
        let dir = tempfile::tempdir().unwrap();
        let s = FileStore::open_with(dir.path(), options).unwrap();
        chunk_store_suite::corruption(&s, &|seg, idx, part| s.damage(seg, idx, part).unwrap());
    }
    let s = FileStore::on_dir(Arc::new(SimDir::new(1, PowerCutPolicy::default())), DIRECT).unwrap();
    chunk_store_suite::corruption(&s, &|seg, idx, part| s.damage(seg, idx, part).unwrap());
}

/// A FileStore over a simulated directory whose files are `Faulty` devices.
struct OnSimDir {
    dir: Arc<SimDir>,
    options: FileStoreOptions,
}

impl Crashable for OnSimDir {
    fn open(&self) -> Result<Box<dyn ChunkStore>, ChunkStoreError> {
        Ok(Box::new(FileStore::on_dir(self.dir.clone(), self.options)?))
    }
    fn cut_at(&self, op: Option<u64>) {
        self.dir.cut_at(op);
    }
    fn ops(&self) -> u64 {
        self.dir.ops()
    }
    fn is_powered_off(&self) -> bool {
        self.dir.is_powered_off()
    }
    fn power_on(&self) {
        self.dir.power_on()
    }
    fn last_cut(&self) -> Option<String> {
        self.dir.last_cut()
    }
    fn torn_writes(&self) -> u64 {
        self.dir.cuts().1
    }
}

/// Unflushed writes at a cut: all lost; all kept; or each kept, torn (512-byte sectors) or lost,
/// in issue order or in any order (a disk's volatile cache keeps no order between flushes).
fn policies() -> Vec<(&'static str, PowerCutPolicy)> {
    let some = |reorder| PowerCutPolicy {
        survive_prob: 0.5,
        torn_prob: 0.5,
        reorder,
        sector: 512,
    };
    vec![
        ("all lost", PowerCutPolicy::default()),
        (
            "all kept",
            PowerCutPolicy {
                survive_prob: 1.0,
                ..PowerCutPolicy::default()
            },
        ),
        ("torn, in order", some(false)),
        ("torn, any order", some(true)),
    ]
}

/// Runs per cut point (what survives a cut is random).
const SEEDS: u64 = 8;

/// Power cut before every operation of the suite's workload, under every policy, with O_DIRECT on
/// and off; every path is reached: a cut inside each directory and file operation the store
/// makes, torn writes, and each outcome a change cut short may have.
#[test]
fn file_store_power_cuts_at_every_operation() {
    for options in [DIRECT, BUFFERED] {
        let mut cut_points = std::collections::BTreeSet::new();
        let mut outcomes = std::collections::BTreeSet::new();
        let mut torn = 0;
        for (name, policy) in policies() {
            let report = chunk_store_suite::power_cuts(
                &|seed| {
                    Box::new(OnSimDir {
                        dir: Arc::new(SimDir::new(seed, policy)),
                        options,
                    }) as Box<dyn Crashable>
                },
                SEEDS,
            );
            assert_eq!(
                report.cuts,
                report.ops * SEEDS,
                "{name}: {SEEDS} cuts per operation"
            );
            assert!(report.ops > 100, "{name}: {} operations", report.ops);
            if policy.torn_prob > 0.0 {
                assert!(report.torn_writes > 0, "{name}: no cut tore a write");
            }
            torn += report.torn_writes;
            cut_points.extend(report.cut_points);
            outcomes.extend(report.outcomes);
        }
        let want_points = [
            "grow log",
            "write log",
            "flush log",
            "remove log",
            "set length chunk",
            "set length tmp",
            "list",
            "remove tmp",
            "create tmp",
            "flush tmp",
            "stat chunk",
            "rename",
            "sync dir",
            "open chunk",
            "read chunk",
            "write chunk",
            "flush chunk",
            "remove chunk",
        ];
        for p in want_points {
            assert!(
                cut_points.contains(p),
                "{options:?}: no cut during `{p}`: {cut_points:?}"
            );
        }
        let want_outcomes = [
            ("open", "old"),
            ("put", "old"),
            ("put", "new"),
            ("put image", "old"),
            ("put image", "new"),
            ("delete", "old"),
            ("delete", "new"),
            ("modify data", "old"),
            ("modify data", "new"),
            ("modify data", "corrupt"),
            ("modify parity", "old"),
            ("modify parity", "new"),
            ("modify parity", "corrupt"),
            ("modify parity extents", "old"),
            ("modify parity extents", "new"),
            ("modify parity extents", "corrupt"),
            ("read", "old"),
            ("recovery", "cut"),
            ("append to reserve", "old"),
            ("append to reserve", "new"),
            ("append to log", "old"),
            ("append to log", "new"),
            ("merge", "old"),
            ("merge", "corrupt"),
            ("set reserve", "old"),
            ("set reserve", "new"),
        ];
        for (k, o) in want_outcomes {
            assert!(
                outcomes.contains(&(k.to_string(), o.to_string())),
                "{options:?}: no cut during {k} left it {o}: {outcomes:?}"
            );
        }
        // A whole put or delete is atomic, and so is an append: never corrupt.
        for k in [
            "put",
            "put image",
            "delete",
            "append to reserve",
            "append to log",
        ] {
            assert!(
                !outcomes.contains(&(k.to_string(), "corrupt".to_string())),
                "{options:?}: a {k} cut short left a corrupt chunk"
            );
        }
        assert!(torn > 0);
    }
}

/// A chunk received frame by frame into an image is stored byte for byte as `put` stores it; an
/// image with too many or too few bytes is refused and stores nothing.
#[test]
fn images_store_what_put_stores_and_refuse_wrong_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStore::open(dir.path()).unwrap();
    let mut rng = Rng::new(7);
    let data = bytes(&mut rng, 10_001);
    let m = meta(1, 0, 1, 10_001);
    s.put(&m, &data).unwrap();
    let by_put = std::fs::read(s.chunk_path(1, 0)).unwrap();
    let mut image = ChunkImage::new(&m).unwrap();
    for piece in data.chunks(3_000) {
        image.push(piece).unwrap();
    }
    assert_eq!(image.data(), &data[..]);
    s.put_image(image).unwrap();
    assert_eq!(std::fs::read(s.chunk_path(1, 0)).unwrap(), by_put);
    assert_eq!(by_put, encode_chunk(&m, &data));

    let mut over = ChunkImage::new(&m).unwrap();
    over.push(&data).unwrap();
    let e = over.push(&[1]).unwrap_err();
    assert!(e.contains("more than its 10001 bytes"), "{e}");
    let mut short = ChunkImage::new(&meta(2, 0, 1, 10_001)).unwrap();
    short.push(&data[..10_000]).unwrap();
    let e = s.put_image(short).unwrap_err();
    assert!(
        e.to_string()
            .contains("10000 data bytes for a chunk of 10001"),
        "{e}"
    );
    assert_eq!(s.meta(2, 0).unwrap(), None);
}

#[test]
fn usage_survives_reopen_and_temporary_files_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = FileStore::open(dir.path()).unwrap();
        s.put(&meta(1, 0, 1, 5000), &[1u8; 5000]).unwrap();
        s.put(&meta(2, 0, 1, 10), &[1u8; 10]).unwrap();
        std::fs::write(s.chunk_path(3, 0).with_extension("chunk.tmp"), b"half").unwrap();
    }
    let s = FileStore::open(dir.path()).unwrap();
    assert_eq!(s.usage().chunks, 2);
    assert_eq!(s.list().unwrap(), vec![(1, 0), (2, 0)]);
    assert!(!s.chunk_path(3, 0).with_extension("chunk.tmp").exists());
}

#[test]
fn two_stores_cannot_share_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let _a = FileStore::open(dir.path()).unwrap();
    let e = FileStore::open(dir.path()).unwrap_err();
    assert!(matches!(e, ChunkStoreError::Locked { .. }), "{e}");
    assert!(e.to_string().contains("in use by another OSD"), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("pid {}", std::process::id())),
        "{e}"
    );
    drop(_a);
    FileStore::open(dir.path()).unwrap();
}

#[test]
fn chunk_files_are_preallocated_to_their_full_size() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStore::open(dir.path()).unwrap();
    s.put(&meta(1, 0, 1, 10_000), &[3u8; 10_000]).unwrap();
    let len = std::fs::metadata(s.chunk_path(1, 0)).unwrap().len();
    let m = meta(1, 0, 1, 10_000);
    assert_eq!(len, chunk_store::data_offset(&m) + 10_000);
    assert_eq!(chunk_store::data_offset(&m), 4096);
}

/// A flipped byte anywhere in the data is found on read and named by its block; the other blocks
/// still read; a flipped header byte makes every access fail with a header error.
#[test]
fn corruption_on_disk_is_detected_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStore::open(dir.path()).unwrap();
    let len = 4 * BLOCK_BYTES;
    let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
    s.put(&meta(0xab, 3, 1, len as u64), &data).unwrap();
    let path = s.chunk_path(0xab, 3);
    let flip = |at: u64| {
        let mut b = std::fs::read(&path).unwrap();
        b[at as usize] ^= 0x10;
        std::fs::write(&path, b).unwrap();
    };
    let d = chunk_store::data_offset(&meta(0xab, 3, 1, len as u64));
    flip(d + 2 * BLOCK_BYTES as u64 + 5);
    let e = s.read(0xab, 3, 0, len as u64).unwrap_err();
    assert!(
        matches!(e, ChunkStoreError::Checksum { block: 2, .. }),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "segment 0xab chunk 3: checksum mismatch in block 2 (bytes 8192..12288)"
    );
    assert!(e.is_corruption());
    assert_eq!(
        s.read(0xab, 3, 0, 2 * BLOCK_BYTES as u64).unwrap().1,
        data[..2 * BLOCK_BYTES]
    );
    let e = s
        .modify(
            0xab,
            3,
            2 * BLOCK_BYTES as u64 + 1,
            1,
            data_change(2),
            &mut |_| Ok(()),
        )
        .unwrap_err();
    assert!(
        matches!(e, ChunkStoreError::Checksum { block: 2, .. }),
        "{e}"
    );
    flip(d + 2 * BLOCK_BYTES as u64 + 5);
    // A checksum table entry.
    flip(HEADER_BYTES as u64 + 4);
    let e = s.read(0xab, 3, BLOCK_BYTES as u64, 1).unwrap_err();
    assert!(
        matches!(e, ChunkStoreError::Checksum { block: 1, .. }),
        "{e}"
    );
    flip(HEADER_BYTES as u64 + 4);
    assert_eq!(s.read(0xab, 3, 0, len as u64).unwrap().1, data);
    // The header's version field.
    flip(33);
    let e = s.meta(0xab, 3).unwrap_err();
    assert!(
        matches!(
            e,
            ChunkStoreError::Header {
                error: HeaderError::Checksum { .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("corrupt header"), "{e}");
    flip(33);
    // A chunk file renamed to another chunk's name.
    std::fs::rename(&path, s.chunk_path(0xac, 3)).unwrap();
    let e = s.read(0xac, 3, 0, 1).unwrap_err();
    assert!(matches!(e, ChunkStoreError::Misplaced { .. }), "{e}");
    // Truncated.
    std::fs::rename(s.chunk_path(0xac, 3), &path).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(d + 100).unwrap();
    let e = s.read(0xab, 3, 0, 1).unwrap_err();
    assert!(matches!(e, ChunkStoreError::Truncated { .. }), "{e}");
}

/// A chunk whose in-place change was cut short (the dirty flag is set) is never read: it counts
/// as corrupt, to be rebuilt from the others.
#[test]
fn a_dirty_chunk_is_refused_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStore::open(dir.path()).unwrap();
    let m = ChunkMeta {
        applied: vec![2, 1],
        ..meta(3, 2, 2, 5000)
    };
    s.put(&m, &[5u8; 5000]).unwrap();
    let path = s.chunk_path(3, 2);
    let mut b = std::fs::read(&path).unwrap();
    let h = encode_header(&m, true);
    b[..h.len()].copy_from_slice(&h);
    std::fs::write(&path, &b).unwrap();
    assert_eq!(
        decode_header(&h).map(|h| (h.meta, h.dirty)),
        Ok((m.clone(), true))
    );
    let e = s.read(3, 2, 0, 10).unwrap_err();
    assert!(matches!(e, ChunkStoreError::Dirty { .. }), "{e}");
    assert!(e.is_corruption());
    assert!(s.meta(3, 2).is_err());
    assert!(e.to_string().contains("cut short"), "{e}");
    // Rebuilt whole, it reads again.
    s.put(&m, &[6u8; 5000]).unwrap();
    assert_eq!(s.read(3, 2, 0, 3).unwrap().1, vec![6u8; 3]);
}

#[test]
fn unknown_format_versions_are_named() {
    for old in [1u8, 9] {
        let mut h = encode_header(&meta(1, 1, 1, 10), false);
        h[8] = old;
        let crc = crc32c::crc32c(&h[..56]);
        h[56..60].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode_header(&h),
            Err(HeaderError::UnknownVersion { got: old as u32 })
        );
    }
    let h = encode_header(&meta(1, 1, 1, 10), false);
    assert_eq!(
        decode_header(&h[..10]),
        Err(HeaderError::TooShort { got: 10, need: 64 })
    );
    assert_eq!(decode_header(&[0u8; 64]), Err(HeaderError::BadMagic));
}

fn any_meta() -> impl Strategy<Value = ChunkMeta> {
    (
        any::<u64>(),
        0u32..256,
        1u64..u64::MAX,
        1u64..=(64 << 20),
        1u64..=256,
        0usize..20,
        0usize..4,
        0u64..64,
    )
        .prop_map(
            |(segment_id, index, version, chunk_bytes, f, a, scheme, r)| ChunkMeta {
                scheme: UpdateScheme::ALL[scheme],
                reserve_bytes: if scheme == 3 && a > 0 { 4096 * r } else { 0 },
                segment_id,
                index,
                version,
                chunk_bytes,
                segment_length: (chunk_bytes * f).min(64 << 20),
                applied: (0..a as u64)
                    .map(|i| version.saturating_sub(i).max(1))
                    .collect(),
            },
        )
}

proptest! {
    #[test]
    fn header_round_trips(m in any_meta()) {
        let h = encode_header(&m, false);
        prop_assert_eq!(decode_header(&h).map(|h| (h.meta, h.dirty)), Ok((m.clone(), false)));
        let h = encode_header(&m, true);
        prop_assert_eq!(decode_header(&h).map(|h| (h.meta, h.dirty)), Ok((m, true)));
    }

    /// One flipped bit anywhere in a header is always refused.
    #[test]
    fn header_bit_flips_are_refused(m in any_meta(), bit in any::<prop::sample::Index>()) {
        let mut h = encode_header(&m, false);
        let bit = bit.index(h.len() * 8);
        h[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(decode_header(&h).is_err());
    }

    /// Block checksums in an encoded image match the data they cover.
    #[test]
    fn block_checksums_cover_their_blocks(len in 1usize..20_000, seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let data = bytes(&mut rng, len);
        let m = meta(1, 0, 1, len as u64);
        let image = encode_chunk(&m, &data);
        let d = chunk_store::data_offset(&m) as usize;
        prop_assert_eq!(&image[d..], &data[..]);
        for (i, b) in data.chunks(BLOCK_BYTES).enumerate() {
            let at = chunk_store::table_offset(&m) as usize + 4 * i;
            prop_assert_eq!(&image[at..at + 4], &crc32c::crc32c(b).to_le_bytes()[..]);
        }
    }
}

/// Mutated chunk files: every access gives the original bytes or a clean error, never a panic and
/// never other bytes; a mutated header alone decodes to an error or re-encodes to itself.
#[test]
fn fuzz_mutated_chunk_files() {
    let seed = fuzz_seed(12);
    let cases = fuzz_cases(300);
    let dir = tempfile::tempdir().unwrap();
    let s = FileStore::open(dir.path()).unwrap();
    let mut rng = Rng::new(seed);
    let len = 2 * BLOCK_BYTES + 300;
    let data = bytes(&mut rng, len);
    let m = meta(5, 1, 3, len as u64);
    let image = encode_chunk(&m, &data);
    let donor = encode_chunk(&meta(6, 2, 4, 100), &[9u8; 100]);
    let path = s.chunk_path(5, 1);
    for case in 0..cases {
        let mut rng = case_rng(seed, case);
        let header = mutate(&mut rng, &image[..HEADER_BYTES], &[&donor[..HEADER_BYTES]]);
        if let Ok(got) = decode_header(&header) {
            assert_eq!(got.encode()[..], header[..got.len()], "case {case}");
        }
        let bad = mutate(&mut rng, &image, &[&donor]);
        std::fs::write(&path, &bad).unwrap();
        let off = rng.below(len as u64);
        let l = rng.below(len as u64 - off + 1);
        match s.read(5, 1, off, l) {
            Ok((got_meta, got)) => {
                assert_eq!(got_meta, m, "case {case}: a mutated header was accepted");
                assert_eq!(
                    got,
                    data[off as usize..(off + l) as usize],
                    "case {case}: wrong bytes"
                );
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}

/// A read's buffer is reused once every slice of it is dropped, never while one is alive, and a
/// reused buffer (larger than the read, holding another chunk's bytes) returns exactly the range.
#[test]
fn read_buffers_are_reused_only_when_free() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStore::open(dir.path()).unwrap();
    let mut rng = Rng::new(9);
    let (a, b) = (bytes(&mut rng, 5 * 4096 + 3), bytes(&mut rng, 5 * 4096));
    s.put(&meta(1, 0, 1, a.len() as u64), &a).unwrap();
    s.put(&meta(2, 0, 1, b.len() as u64), &b).unwrap();
    let (_, first) = s.read(1, 0, 0, a.len() as u64).unwrap();
    let kept = first.slice(10..20);
    let ptr = first.as_ptr();
    drop(first);
    let (_, second) = s.read(1, 0, 0, a.len() as u64).unwrap();
    assert_ne!(
        second.as_ptr(),
        ptr,
        "a buffer with a live slice was reused"
    );
    assert_eq!(&kept[..], &a[10..20]);
    drop(kept);
    drop(second);
    let (_, third) = s.read(2, 0, 4096 + 5, 3 * 4096).unwrap();
    assert_eq!(&third[..], &b[4096 + 5..4 * 4096 + 5]);
    let (_, fourth) = s.read(1, 0, 7, 100).unwrap();
    assert_eq!(&fourth[..], &a[7..107]);
}

/// Chunk files stored by the build before format 3 (`tests/fixtures/chunk-format-2`, README there)
/// open with today's store: they read as FO chunks with their bytes and versions, take in-place
/// changes in their own layout (and read back after a reopen), and refuse a logged change.
#[test]
fn chunks_of_format_2_read_as_fo() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chunk-format-2");
    let content = std::fs::read(fixtures.join("f.bin")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("chunks")).unwrap();
    for i in 0..3 {
        let name = chunk_store::chunk_name(1, i);
        std::fs::copy(fixtures.join(&name), dir.path().join("chunks").join(&name)).unwrap();
    }
    let s = FileStore::open(dir.path()).unwrap();
    assert_eq!(s.list().unwrap(), vec![(1, 0), (1, 1), (1, 2)]);
    for i in 0..2u32 {
        let (m, data) = s.read(1, i, 0, 5000).unwrap();
        assert_eq!(
            (m.scheme, m.reserve_bytes, m.version),
            (UpdateScheme::Fo, 0, 1)
        );
        assert_eq!(
            &data[..],
            &content[5000 * i as usize..5000 * (i as usize + 1)]
        );
    }
    let p = s.meta(1, 2).unwrap().unwrap();
    assert_eq!(p.applied, vec![1, 1]);
    let change = Change::Data {
        expected: 1,
        version: 2,
    };
    s.modify(1, 0, 10, 3, change, &mut |b| {
        b.copy_from_slice(b"new");
        Ok(())
    })
    .unwrap();
    let e = s
        .append(
            1,
            1,
            LogPlace::Log,
            &[0..1],
            b"x",
            Change::Data {
                expected: 1,
                version: 2,
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("format 2"), "{e}");
    drop(s);
    let s = FileStore::open(dir.path()).unwrap();
    let (m, data) = s.read(1, 0, 0, 20).unwrap();
    assert_eq!(m.version, 2);
    assert_eq!(&data[10..13], b"new");
    assert_eq!(&data[..10], &content[..10]);
    // Still format 2 on disk: the header and data did not move.
    let raw = std::fs::read(
        dir.path()
            .join("chunks")
            .join(chunk_store::chunk_name(1, 0)),
    )
    .unwrap();
    assert_eq!(raw[8], 2);
}

/// Logged changes in a PLR reserve, mutated at random: every read gives a state the chunk had
/// after some prefix of its acknowledged changes (with that state's versions, so a primary sees a
/// lost tail as stale, never as current), or a clean corruption error; never a panic, never other
/// bytes.
#[test]
fn fuzz_mutated_reserves() {
    let seed = fuzz_seed(41);
    let cases = fuzz_cases(100);
    let mut rng = Rng::new(seed);
    let len = 3 * BLOCK_BYTES;
    let base = bytes(&mut rng, len);
    let m = ChunkMeta {
        applied: vec![1, 1],
        scheme: UpdateScheme::Plr,
        reserve_bytes: 8 * BLOCK_BYTES as u64,
        ..meta(9, 2, 1, len as u64)
    };
    // The states after each prefix of the deltas.
    let mut states = vec![(m.clone(), base.clone())];
    let mut deltas = Vec::new();
    for v in 2..8u64 {
        let off = rng.below(len as u64 - 700);
        let n = 1 + rng.below(700) as usize;
        let d = bytes(&mut rng, n);
        let (mut sm, mut sd) = states.last().unwrap().clone();
        sm.applied[0] = v;
        sm.version = v;
        for (x, y) in sd[off as usize..].iter_mut().zip(&d) {
            *x ^= y;
        }
        states.push((sm, sd));
        deltas.push((off, d, v));
    }
    let dir = tempfile::tempdir().unwrap();
    for case in 0..cases {
        let mut rng = case_rng(seed, case);
        let s = FileStore::open(dir.path()).unwrap();
        s.put(&m, &base).unwrap();
        for (off, d, v) in &deltas {
            let stamp = ecstack_osd::DeltaStamp {
                from: 0,
                prior: v - 1,
                version: *v,
            };
            let e = *off..off + d.len() as u64;
            s.append(9, 2, LogPlace::Reserve, &[e], d, Change::Parity(stamp))
                .unwrap();
        }
        for _ in 0..1 + rng.below(3) {
            s.damage(9, 2, Part::Reserve(rng.below(4 * BLOCK_BYTES as u64)))
                .unwrap();
        }
        drop(s);
        let s = FileStore::open(dir.path()).unwrap();
        match s.read(9, 2, 0, len as u64) {
            Ok((got, data)) => assert!(
                states
                    .iter()
                    .any(|(sm, sd)| *sm == got && sd[..] == data[..]),
                "case {case}: a state the chunk never had (versions {:?})",
                got.applied
            ),
            Err(e) => assert!(e.is_corruption(), "case {case}: {e}"),
        }
    }
}

// ---- Block files of earlier formats ----

/// The bytes of block `id@version` written `generation`-th time in the block-file fixtures
/// (`tests/fixtures/block-format-*`): a formula, so that a test knows them without a copy.
fn fixture_block(id: u32, version: u64, generation: u32, len: u32) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            (i.wrapping_mul(7) ^ (i >> 8))
                .wrapping_add(u64::from(id) * 31 + version * 101 + u64::from(generation) * 53)
                as u8
        })
        .collect()
}

type FixtureObject = (u64, u32, Vec<(u32, u64, u32)>);

/// The block-file fixture's objects: object 0x1f (blocks of 5,000 bytes) in three batches, one
/// key stored again; object 0x20 (blocks of 100 bytes) in one batch, then one block deleted.
/// Each object as (object, block bytes, its blocks as (id, version, generation) in stored order).
fn fixture_objects() -> Vec<FixtureObject> {
    vec![
        (
            0x1f,
            5000,
            vec![
                (0, 1, 0),
                (2, 1, 0),
                (3, 1, 0),
                (4, 1, 0),
                (1, 1, 1),
                (0, 2, 0),
                (1, 2, 0),
            ],
        ),
        (0x20, 100, vec![(0, 1, 0), (2, 1, 0), (3, 1, 0)]),
    ]
}

/// Writes `tests/fixtures/block-format-<BLOCK_FILE_FORMAT>/` with this build's store (the
/// fixture of an earlier format is made by this test at the commit before the format changed;
/// README there). Run: `cargo test -p ecstack-osd --test chunk_store -- --ignored
/// make_block_file_fixture`.
#[test]
#[ignore]
fn make_block_file_fixture() {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "tests/fixtures/block-format-{}",
        chunk_store::BLOCK_FILE_FORMAT
    ));
    let dir = tempfile::tempdir().unwrap();
    let s = FileStore::open(dir.path()).unwrap();
    let k = |id, version| chunk_store::BlockKey { id, version };
    let put = |o: u64, bb: u32, blocks: &[(u32, u64, u32)]| {
        let data: Vec<_> = blocks
            .iter()
            .map(|&(id, v, g)| (k(id, v), fixture_block(id, v, g, bb)))
            .collect();
        let refs: Vec<_> = data.iter().map(|(k, d)| (*k, &d[..])).collect();
        s.put_blocks(o, bb, &refs).unwrap();
    };
    put(0x1f, 5000, &[(0, 1, 0), (1, 1, 0), (2, 1, 0)]);
    put(0x1f, 5000, &[(3, 1, 0), (4, 1, 0), (1, 1, 1)]);
    put(0x1f, 5000, &[(0, 2, 0), (1, 2, 0)]);
    put(0x20, 100, &[(0, 1, 0), (1, 1, 0), (2, 1, 0), (3, 1, 0)]);
    assert_eq!(s.delete_blocks(0x20, Some(&[k(1, 1)])).unwrap(), 1);
    for (o, bb, blocks) in fixture_objects() {
        let t = s.block_table(o).unwrap().unwrap();
        assert_eq!(t.block_bytes, bb);
        let keys: Vec<_> = blocks.iter().map(|&(id, v, _)| k(id, v)).collect();
        assert_eq!(t.blocks.iter().map(|b| b.key).collect::<Vec<_>>(), keys);
    }
    drop(s);
    std::fs::create_dir_all(&out).unwrap();
    for (o, ..) in fixture_objects() {
        let name = chunk_store::blocks_name(o);
        std::fs::copy(dir.path().join("chunks").join(&name), out.join(&name)).unwrap();
    }
}

/// Block files stored by the build before format 17 (`tests/fixtures/block-format-16`, README
/// there) open with today's store: every block reads back exactly; deleting one block of a file
/// rewrites its header as format 17 and appends a deletion record (the records before it are
/// byte for byte what they were); appending to the other keeps it format 16; after a reopen
/// both serve what they should, and a compaction makes a format-17 file of the first.
#[test]
fn block_files_of_format_16_open_and_take_deletions() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/block-format-16");
    let dir = tempfile::tempdir().unwrap();
    let chunks = dir.path().join("chunks");
    std::fs::create_dir_all(&chunks).unwrap();
    let objects = fixture_objects();
    for (o, ..) in &objects {
        let name = chunk_store::blocks_name(*o);
        std::fs::copy(fixtures.join(&name), chunks.join(&name)).unwrap();
    }
    let raw = |o: u64| std::fs::read(chunks.join(chunk_store::blocks_name(o))).unwrap();
    let format = |b: &[u8]| u32::from_le_bytes(b[8..12].try_into().unwrap());
    let k = |id, version| chunk_store::BlockKey { id, version };
    // Every block of `want` (id, version, generation) in order, byte for byte.
    let check = |s: &FileStore, o: u64, bb: u32, want: &[(u32, u64, u32)], ctx: &str| {
        let opened = s.open_blocks(o).unwrap().unwrap();
        let keys: Vec<_> = opened.table.blocks.iter().map(|b| b.key).collect();
        let want_keys: Vec<_> = want.iter().map(|&(id, v, _)| k(id, v)).collect();
        assert_eq!(keys, want_keys, "{ctx}: object {o:#x}");
        for (i, &(id, v, g)) in want.iter().enumerate() {
            let d = opened.read_block(i, &mut |_| true).unwrap().unwrap();
            assert!(
                d == fixture_block(id, v, g, bb),
                "{ctx}: block {id}@{v} of {o:#x}"
            );
        }
    };
    let s = FileStore::open(dir.path()).unwrap();
    assert_eq!(s.objects().unwrap(), vec![0x1f, 0x20]);
    for (o, bb, want) in &objects {
        assert_eq!(format(&raw(*o)), 16);
        check(&s, *o, *bb, want, "as stored");
    }
    let (o, bb, mut want) = objects[0].clone();
    let before = raw(o);
    assert_eq!(s.delete_blocks(o, Some(&[k(3, 1)])).unwrap(), 1);
    want.retain(|&(id, v, _)| k(id, v) != k(3, 1));
    let after = raw(o);
    assert_eq!(
        format(&after),
        17,
        "upgraded before its first deletion record"
    );
    assert_eq!(
        after.len() as u64,
        before.len() as u64 + chunk_store::record_span(bb)
    );
    assert_eq!(
        &after[4096..before.len()],
        &before[4096..],
        "nothing rewritten"
    );
    assert_eq!(&after[44..4096], &before[44..4096]);
    check(&s, o, bb, &want, "after a deletion");
    let (o2, bb2, mut want2) = objects[1].clone();
    let b = fixture_block(7, 1, 0, bb2);
    s.put_blocks(o2, bb2, &[(k(7, 1), &b[..])]).unwrap();
    want2.push((7, 1, 0));
    assert_eq!(format(&raw(o2)), 16, "appends keep format 16");
    drop(s);
    let s = FileStore::open(dir.path()).unwrap();
    check(&s, o, bb, &want, "reopened");
    check(&s, o2, bb2, &want2, "reopened");
    let c = s.compact_blocks(o, &mut || true).unwrap().unwrap();
    assert_eq!((c.slots_before, c.slots_after), (9, 6));
    assert_eq!(format(&raw(o)), 17);
    drop(s);
    let s = FileStore::open(dir.path()).unwrap();
    check(&s, o, bb, &want, "compacted, reopened");
    check(&s, o2, bb2, &want2, "reopened twice");
}
