//! `DeviceStore` (a chunk store on one block device, `ecstack osd --store-device`) through the
//! `ChunkStore` suite — functional, corruption, and power cuts at every operation over a
//! `Faulty<MemDevice>` under four policies, with a journal small enough that checkpoints happen
//! mid-workload — and its own cases: fragments (a PLR parity and its reserve are one; FL logs
//! growing in turn fragment), the device lock, refusing a device that holds other data, and
//! FileStore's fragments through FIEMAP.

use std::sync::Arc;

use ecstack_base::Rng;
use ecstack_device::{BlockDevice, Cached, MemDevice, PowerCutPolicy};
use ecstack_osd::chunk_store::{
    f_avg, Change, ChunkStore, ChunkStoreError, FileStore, LogPlace, BLOCK_BYTES,
};
use ecstack_osd::chunk_store_suite::{self, Crashable};
use ecstack_osd::device_store::{DeviceStore, DeviceStoreOptions, SimDevice};
use ecstack_osd::{ChunkMeta, DeltaStamp, UpdateScheme};

const MIB: u64 = 1 << 20;

fn meta(segment_id: u64, index: u32, chunk_bytes: u64) -> ChunkMeta {
    ChunkMeta {
        reserve_bytes: 0,
        scheme: Default::default(),
        segment_id,
        index,
        version: 1,
        chunk_bytes,
        segment_length: chunk_bytes * 4,
        applied: Vec::new(),
    }
}

fn bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    rng.fill(&mut b);
    b
}

fn mem(capacity: u64) -> Arc<dyn BlockDevice> {
    Arc::new(MemDevice::new(capacity).unwrap())
}

fn open(dev: &Arc<dyn BlockDevice>) -> DeviceStore {
    DeviceStore::open(dev.clone(), "mem", DeviceStoreOptions::default()).unwrap()
}

#[test]
fn device_store_suite() {
    let dev = mem(64 * MIB);
    chunk_store_suite::run(&|| Box::new(open(&dev)) as Box<dyn ChunkStore>);
    // With a journal of two blocks, most table changes go through a checkpoint.
    let dev = mem(64 * MIB);
    let small = DeviceStoreOptions {
        journal_bytes: Some(8192),
        ..Default::default()
    };
    chunk_store_suite::run(&|| {
        Box::new(DeviceStore::open(dev.clone(), "mem", small).unwrap()) as Box<dyn ChunkStore>
    });
}

/// The suite over a store whose device is behind a write-back page-cache model
/// (`cached:…,writeback=…`, what `experiment codfs --writeback` gives each OSD), a new cache at
/// each open over the same device: what a store wrote reaches the device when the store is dropped
/// (an OSD's clean stop), so every reopen finds it.
#[test]
fn device_store_suite_on_a_write_back_cache() {
    let dev = mem(64 * MIB);
    chunk_store_suite::run(&|| {
        let cached: Arc<dyn BlockDevice> =
            Arc::new(Cached::with_writeback(dev.clone(), 4 * MIB, Some(MIB)));
        Box::new(DeviceStore::open(cached, "mem", DeviceStoreOptions::default()).unwrap())
            as Box<dyn ChunkStore>
    });
}

/// Robust objects' blocks on a device: the suite's block cases, rot and torn appends.
#[test]
fn device_store_blocks_suite() {
    let dev = mem(64 * MIB);
    chunk_store_suite::blocks(&|| Box::new(open(&dev)) as Box<dyn ChunkStore>);
    let dev = mem(64 * MIB);
    chunk_store_suite::block_rot(&|| Box::new(open(&dev)) as Box<dyn ChunkStore>);
}

/// Deletions as appended records and compaction on a device.
#[test]
fn device_store_block_deletions() {
    let dev = mem(64 * MIB);
    chunk_store_suite::block_deletions(&|| Box::new(open(&dev)) as Box<dyn ChunkStore>);
}

/// Random puts, deletions, reopens and compactions against a model on a device;
/// `ECSTACK_SEED=<seed>` replays one seed, `ECSTACK_FUZZ_CASES` sets how many.
#[test]
fn device_store_block_model() {
    let seed = ecstack_base::mutate::fuzz_seed(100);
    for case in 0..ecstack_base::mutate::fuzz_cases(12) {
        let dev = mem(64 * MIB);
        chunk_store_suite::block_model(
            &|| Box::new(open(&dev)) as Box<dyn ChunkStore>,
            seed + case,
            60,
        );
    }
}

/// Power cuts at every operation of the block workload on a device under every policy.
#[test]
fn device_store_block_power_cuts() {
    let journal_bytes = Some(8192);
    let options = DeviceStoreOptions {
        journal_bytes,
        ..Default::default()
    };
    let mut outcomes = std::collections::BTreeSet::new();
    for (name, policy) in policies() {
        let report = chunk_store_suite::block_power_cuts(
            &|seed| {
                Box::new(OnSimDevice {
                    dev: Arc::new(SimDevice::new(seed, policy, 16 * MIB, journal_bytes)),
                    options,
                }) as Box<dyn Crashable>
            },
            4,
        );
        assert_eq!(report.cuts, report.ops * 4, "{name}");
        assert!(report.ops > 20, "{name}: {} operations", report.ops);
        outcomes.extend(report.outcomes);
    }
    for want in [
        ("put blocks", "old"),
        ("put blocks", "new"),
        ("delete blocks", "old"),
        ("delete blocks", "new"),
        ("compact", "old"),
    ] {
        let want = (want.0.to_string(), want.1.to_string());
        assert!(outcomes.contains(&want), "never {want:?}: {outcomes:?}");
    }
}

#[test]
fn device_store_corruption_suite() {
    let s = open(&mem(64 * MIB));
    chunk_store_suite::corruption(&s, &|seg, idx, part| s.damage(seg, idx, part).unwrap());
}

/// A DeviceStore over a [`SimDevice`].
struct OnSimDevice {
    dev: Arc<SimDevice>,
    options: DeviceStoreOptions,
}

impl Crashable for OnSimDevice {
    fn open(&self) -> Result<Box<dyn ChunkStore>, ChunkStoreError> {
        Ok(Box::new(DeviceStore::open(
            self.dev.clone(),
            "sim",
            self.options,
        )?))
    }
    fn cut_at(&self, op: Option<u64>) {
        self.dev.cut_at(op);
    }
    fn ops(&self) -> u64 {
        self.dev.ops()
    }
    fn is_powered_off(&self) -> bool {
        self.dev.is_powered_off()
    }
    fn power_on(&self) {
        self.dev.power_on()
    }
    fn last_cut(&self) -> Option<String> {
        self.dev.last_cut()
    }
    fn torn_writes(&self) -> u64 {
        self.dev.torn_writes()
    }
}

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

const SEEDS: u64 = 4;

/// Power cut before every device operation of the suite's workload, under every policy; every
/// path is reached: a cut in each region's reads and writes and at flushes, torn writes, and
/// each outcome a change cut short may have; puts, deletes and appends are never corrupt.
#[test]
fn device_store_power_cuts_at_every_operation() {
    let mut cut_points = std::collections::BTreeSet::new();
    let mut outcomes = std::collections::BTreeSet::new();
    let mut torn = 0;
    // A journal of 8 KiB: checkpoints happen in the workload, so cuts land inside them.
    let journal_bytes = Some(8192);
    let options = DeviceStoreOptions {
        journal_bytes,
        ..Default::default()
    };
    for (name, policy) in policies() {
        let report = chunk_store_suite::power_cuts(
            &|seed| {
                Box::new(OnSimDevice {
                    dev: Arc::new(SimDevice::new(seed, policy, 16 * MIB, journal_bytes)),
                    options,
                }) as Box<dyn Crashable>
            },
            SEEDS,
        );
        assert_eq!(
            report.cuts,
            report.ops * SEEDS,
            "{name}: cuts per operation"
        );
        assert!(report.ops > 100, "{name}: {} operations", report.ops);
        if policy.torn_prob > 0.0 {
            assert!(report.torn_writes > 0, "{name}: no cut tore a write");
        }
        torn += report.torn_writes;
        cut_points.extend(report.cut_points);
        outcomes.extend(report.outcomes);
    }
    for p in [
        "read superblock",
        "write superblock",
        "read checkpoint",
        "write checkpoint",
        "read journal",
        "write journal",
        "read data",
        "write data",
        "flush",
    ] {
        assert!(
            cut_points.contains(p),
            "no cut during `{p}`: {cut_points:?}"
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
            "no cut during {k} left it {o}: {outcomes:?}"
        );
    }
    for k in [
        "put",
        "put image",
        "delete",
        "append to reserve",
        "append to log",
    ] {
        assert!(
            !outcomes.contains(&(k.to_string(), "corrupt".to_string())),
            "a {k} cut short left a corrupt chunk"
        );
    }
    assert!(torn > 0);
}

fn plr_parity(segment: u64, index: u32, chunk_bytes: u64, reserve_bytes: u64) -> ChunkMeta {
    ChunkMeta {
        scheme: UpdateScheme::Plr,
        reserve_bytes,
        applied: vec![1; 4],
        ..meta(segment, index, chunk_bytes)
    }
}

fn fl_chunk(segment: u64, index: u32, chunk_bytes: u64) -> ChunkMeta {
    ChunkMeta {
        scheme: UpdateScheme::Fl,
        ..meta(segment, index, chunk_bytes)
    }
}

/// The seed's Table 5.1 on the device: PLR parities filled with deltas in their reserves stay one
/// fragment each (F_avg 0); FO chunks too; two FL chunks whose logs grow in turn fragment: each
/// record after the first lands after the other log's, so every record is a fragment of its own
/// (chunk, then one per record), and a merge brings the chunk back to one.
#[test]
fn plr_reserves_are_contiguous_and_interleaved_logs_fragment() {
    let s = open(&mem(256 * MIB));
    let mut rng = Rng::new(9);
    let len = 64 * BLOCK_BYTES as u64;
    let reserve = 16 * BLOCK_BYTES as u64;
    for p in 0..4u32 {
        let m = plr_parity(1, 4 + p, len, reserve);
        s.put(&m, &bytes(&mut rng, len as usize)).unwrap();
        s.put(&meta(2, p, len), &bytes(&mut rng, len as usize))
            .unwrap();
    }
    for round in 0..3u64 {
        for p in 0..4u32 {
            let stamp = DeltaStamp {
                from: p,
                prior: 1 + round,
                version: 2 + round,
            };
            let delta = bytes(&mut rng, BLOCK_BYTES);
            s.append(
                1,
                4 + p,
                LogPlace::Reserve,
                &[0..BLOCK_BYTES as u64],
                &delta,
                Change::Parity(stamp),
            )
            .unwrap();
        }
    }
    let plr: Vec<u64> = (0..4).map(|p| s.fragments(1, 4 + p).unwrap()).collect();
    assert_eq!(
        plr,
        vec![1; 4],
        "a PLR parity and its reserve are one piece"
    );
    let fo: Vec<u64> = (0..4).map(|p| s.fragments(2, p).unwrap()).collect();
    assert_eq!(fo, vec![1; 4]);
    assert_eq!(f_avg(&plr), 0.0);
    // A reserve grown after other chunks took the blocks beside it is a second piece.
    s.put(&meta(3, 0, len), &bytes(&mut rng, len as usize))
        .unwrap();
    s.set_reserve(1, 7, 2 * reserve).unwrap();
    assert_eq!(s.fragments(1, 7).unwrap(), 2);

    // Two FL chunks, updated in turn: their logs interleave.
    let (a, b) = (fl_chunk(5, 0, len), fl_chunk(5, 1, len));
    s.put(&a, &bytes(&mut rng, len as usize)).unwrap();
    s.put(&b, &bytes(&mut rng, len as usize)).unwrap();
    let records = 6u64;
    for v in 0..records {
        for idx in [0u32, 1] {
            let change = Change::Data {
                expected: 1 + v,
                version: 2 + v,
            };
            let new = bytes(&mut rng, BLOCK_BYTES);
            let at = v * BLOCK_BYTES as u64;
            s.append(
                5,
                idx,
                LogPlace::Log,
                &[at..at + BLOCK_BYTES as u64],
                &new,
                change,
            )
            .unwrap();
        }
    }
    // A 4 KiB record takes 4.5 KiB, so each takes two blocks, the next record starting in the
    // second: each append after the first continues the log's last block and then needs one
    // more, which the other log took meanwhile.
    let fa = s.fragments(5, 0).unwrap();
    let fb = s.fragments(5, 1).unwrap();
    assert!(
        fa > records && fb > records,
        "interleaved logs: {fa} and {fb} fragments for {records} records each"
    );
    assert!(f_avg(&[fa, fb]) >= records as f64);
    // A log growing alone stays in one piece: a third chunk's log.
    let c = fl_chunk(5, 2, len);
    s.put(&c, &bytes(&mut rng, len as usize)).unwrap();
    for v in 0..records {
        let at = v * BLOCK_BYTES as u64;
        s.append(
            5,
            2,
            LogPlace::Log,
            &[at..at + BLOCK_BYTES as u64],
            &bytes(&mut rng, BLOCK_BYTES),
            Change::Data {
                expected: 1 + v,
                version: 2 + v,
            },
        )
        .unwrap();
    }
    // The log's first blocks may follow the chunk's last (one piece) or not (two).
    let fc = s.fragments(5, 2).unwrap();
    assert!((1..=2).contains(&fc), "a log growing alone: {fc} fragments");
    // A merge folds the log in and drops it: one piece again.
    s.merge(5, 0).unwrap();
    assert_eq!(s.fragments(5, 0).unwrap(), 1);
    // The same after a reopen (the table replayed from the device).
    let dev = s.dir().device().clone();
    drop(s);
    let s = open(&dev);
    assert_eq!(s.fragments(5, 1).unwrap(), fb);
    assert_eq!(s.fragments(1, 4).unwrap(), 1);
    let e = s.fragments(9, 9).unwrap_err();
    assert!(matches!(e, ChunkStoreError::NotFound { .. }), "{e}");
}

/// Deleted chunks give their blocks back (after the delete is durable) and a reopen counts the
/// same free space.
#[test]
fn space_is_given_back_and_counted_the_same_after_reopen() {
    let dev = mem(64 * MIB);
    let s = open(&dev);
    let empty = s.free_bytes();
    let mut rng = Rng::new(3);
    for i in 0..20u32 {
        s.put(&meta(7, i, 100_000), &bytes(&mut rng, 100_000))
            .unwrap();
    }
    assert!(s.free_bytes() <= empty - 20 * 100_000);
    for i in 0..20u32 {
        assert!(s.delete(7, i).unwrap());
    }
    assert_eq!(s.free_bytes(), empty);
    s.put(&meta(7, 0, 5000), &bytes(&mut rng, 5000)).unwrap();
    let free = s.free_bytes();
    drop(s);
    assert_eq!(open(&dev).free_bytes(), free);
    // Full: a clear error, and nothing stored.
    let s = open(&dev);
    let huge = 64 * MIB;
    let m = ChunkMeta {
        segment_length: huge,
        ..meta(8, 0, huge)
    };
    let e = s.put(&m, &vec![0u8; huge as usize]).unwrap_err();
    assert!(e.to_string().contains("no room"), "{e}");
    assert_eq!(s.meta(8, 0).unwrap(), None);
}

/// A file-backed device is locked while a store is open on it; a device holding other data is
/// refused unless forced; a virtual-time device is refused by name.
#[test]
fn devices_are_locked_and_other_data_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("osd.img");
    let spec = format!("file:{}?size=32M", path.display());
    let a = DeviceStore::open_spec(&spec, DeviceStoreOptions::default()).unwrap();
    a.put(&meta(1, 0, 10), &[5u8; 10]).unwrap();
    let e = DeviceStore::open_spec(&spec, DeviceStoreOptions::default()).unwrap_err();
    assert!(matches!(e, ChunkStoreError::Locked { .. }), "{e}");
    assert!(e.to_string().contains("in use by another OSD"), "{e}");
    drop(a);
    let b = DeviceStore::open_spec(&spec, DeviceStoreOptions::default()).unwrap();
    assert_eq!(b.read(1, 0, 0, 10).unwrap().1, vec![5u8; 10]);
    drop(b);

    let other = dir.path().join("other.img");
    std::fs::write(&other, vec![0u8; 32 << 20]).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&other)
            .unwrap();
        f.write_all_at(b"some file system", 2048).unwrap();
    }
    let spec = format!("file:{}", other.display());
    let e = DeviceStore::open_spec(&spec, DeviceStoreOptions::default()).unwrap_err();
    let t = e.to_string();
    assert!(
        t.contains("offset 2048") && t.contains("without --force") && !t.contains('\n'),
        "{t}"
    );
    let forced = DeviceStoreOptions {
        force: true,
        ..Default::default()
    };
    let s = DeviceStore::open_spec(&spec, forced).unwrap();
    assert!(s.list().unwrap().is_empty());
    drop(s);
    // Made now: opened without --force.
    DeviceStore::open_spec(&spec, DeviceStoreOptions::default()).unwrap();

    for (spec, kind) in [
        ("hdd:capacity=1G", "hdd:"),
        ("metered:throttled:bw=1M:hdd:", "hdd:"),
        ("faulty:seed=1:ssd:blocks=64", "ssd:"),
    ] {
        let e = DeviceStore::open_spec(spec, DeviceStoreOptions::default()).unwrap_err();
        let t = e.to_string();
        assert!(
            t.contains(&format!(
                "--store-device {kind} keeps virtual time; use throttled:profile="
            )),
            "{t}"
        );
    }
}

/// A damaged superblock or table is one clear error, never an empty store.
#[test]
fn a_damaged_table_is_refused() {
    let dev = mem(64 * MIB);
    {
        let s = open(&dev);
        s.put(&meta(1, 0, 10), &[5u8; 10]).unwrap();
    }
    let g = open(&dev).geometry();
    // Both checkpoint slots' headers flipped.
    for slot in 0..2 {
        let at = g.slot_at(slot) + 20;
        let mut b = [0u8];
        dev.read_at(&mut b, at).unwrap();
        dev.write_at(&[b[0] ^ 1], at).unwrap();
    }
    let e = DeviceStore::open(dev.clone(), "mem", DeviceStoreOptions::default()).unwrap_err();
    assert!(e.to_string().contains("no checkpoint"), "{e}");
    let mut b = [0u8];
    dev.read_at(&mut b, 17).unwrap();
    dev.write_at(&[b[0] ^ 1], 17).unwrap();
    let e = DeviceStore::open(dev.clone(), "mem", DeviceStoreOptions::default()).unwrap_err();
    assert!(e.to_string().contains("superblock checksum"), "{e}");
}

/// FileStore's fragments through FIEMAP on a real file system: a small preallocated chunk file is
/// one piece (one extent on ext4); its log file maps too, and a merge removes it.
#[test]
fn file_store_fragments_through_fiemap() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStore::open(dir.path()).unwrap();
    let len = 16 * BLOCK_BYTES as u64;
    let mut rng = Rng::new(1);
    s.put(&fl_chunk(2, 0, len), &bytes(&mut rng, len as usize))
        .unwrap();
    assert_eq!(s.fragments(2, 0).unwrap(), 1);
    s.append(
        2,
        0,
        LogPlace::Log,
        &[0..10],
        &[1u8; 10],
        Change::Data {
            expected: 1,
            version: 2,
        },
    )
    .unwrap();
    assert!(s.fragments(2, 0).unwrap() >= 1);
    s.merge(2, 0).unwrap();
    assert_eq!(s.fragments(2, 0).unwrap(), 1);
    let e = s.fragments(9, 9).unwrap_err();
    assert!(matches!(e, ChunkStoreError::NotFound { .. }), "{e}");
}

/// A figure, not a check: what deleting 2 blocks of an 8 MiB block file costs on a device store
/// over a throttled device (20 MB/s), now (a deletion record) and as before format 17 (the file
/// rewritten without them: what a compaction does today). Run:
/// `cargo test --release -p ecstack-osd --test device_store -- --ignored --nocapture deletion_cost`.
#[test]
#[ignore]
fn deletion_cost_figure() {
    use ecstack_osd::chunk_store::BlockKey;
    let s =
        DeviceStore::open_spec("throttled:bw=20M:mem:512M", DeviceStoreOptions::default()).unwrap();
    let bb = 128 << 10;
    let mut rng = Rng::new(9);
    let data: Vec<(BlockKey, Vec<u8>)> = (0..64)
        .map(|id| (BlockKey { id, version: 1 }, bytes(&mut rng, bb as usize)))
        .collect();
    let refs: Vec<(BlockKey, &[u8])> = data.iter().map(|(k, d)| (*k, &d[..])).collect();
    let mut deletes = Vec::new();
    for round in 0..3u64 {
        let o = 0x100 + round;
        s.put_blocks(o, bb, &refs).unwrap();
        let t = std::time::Instant::now();
        let gone = [
            BlockKey { id: 5, version: 1 },
            BlockKey { id: 9, version: 1 },
        ];
        assert_eq!(s.delete_blocks(o, Some(&gone)).unwrap(), 2);
        let delete = t.elapsed();
        let t = std::time::Instant::now();
        s.compact_blocks(o, &mut || true).unwrap().unwrap();
        let rewrite = t.elapsed();
        deletes.push((delete, rewrite));
    }
    for (d, r) in &deletes {
        println!(
            "delete 2 of 64 blocks of 128 KiB (8 MiB file) at 20 MB/s: deletion record {:.1} ms, \
             rewrite (format 16's deletion, today's compaction) {:.1} ms",
            d.as_secs_f64() * 1e3,
            r.as_secs_f64() * 1e3
        );
    }
}
