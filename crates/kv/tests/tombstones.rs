//! Deleted pairs stay dead through tombstones (format version 4), and an UPDATE costs one record
//! write: the record it retires is left on the device (outranked by the new record's sequence
//! number) instead of being zeroed. Power cuts are in `tests/model.rs`; this file checks the
//! bookkeeping: device writes per UPDATE, what a reopen keeps, what a compaction zeroes and
//! frees, and (property) that any sequence of SET / UPDATE / DELETE / sync / compact / reopen
//! reads back as a `HashMap` model.

use std::collections::HashMap;
use std::sync::Arc;

use ecstack_device::{BlockDevice, MemDevice, Metered};
use ecstack_kv::{Durability, KvConfig, KvStore};
use proptest::prelude::*;

fn cfg(tombstones_max: usize) -> KvConfig {
    KvConfig {
        chunk_bytes: 4096,
        durability: Durability::EverySec,
        salt: Some(7),
        tombstones_max: Some(tombstones_max),
        ..KvConfig::default()
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("user{i:020}").into_bytes()
}

/// The seed's Exp 6 pair: a 24-byte key and a value that fills a 4 KiB chunk with the header.
fn pair_value(i: usize, round: u8) -> Vec<u8> {
    vec![round ^ (i as u8); 4096 - 24 - 24]
}

/// An UPDATE of a 4 KiB pair writes its new record (one chunk) and nothing else, also across
/// syncs: no zeroing write of the retired record, no second flush. Before format version 4 it
/// was about two chunk writes per UPDATE.
#[test]
fn update_of_a_4k_pair_writes_one_chunk() {
    let dev = Arc::new(Metered::new(MemDevice::new(64 << 20).unwrap()));
    // Every pair in the cache: an UPDATE reads nothing to find its pair.
    let c = KvConfig {
        cache_entries: 4096,
        ..cfg(1024)
    };
    let kv = KvStore::create(Arc::clone(&dev) as Arc<dyn BlockDevice>, &c).unwrap();
    let n = 2000;
    for i in 0..n {
        kv.set(&key(i), &pair_value(i, 0)).unwrap();
    }
    kv.sync().unwrap();
    dev.reset();
    let updates = 6000;
    for u in 0..updates {
        let i = (u * 7919) % n;
        assert!(kv
            .update(&key(i), &pair_value(i, 1 + (u % 200) as u8))
            .unwrap());
        if u % 100 == 99 {
            kv.sync().unwrap();
        }
    }
    kv.sync().unwrap();
    let st = dev.snapshot();
    assert_eq!(st.write_ops, updates as u64, "one device write per UPDATE");
    assert_eq!(st.write_bytes, updates as u64 * 4096);
    assert_eq!(st.flushes, (updates / 100) as u64, "one flush per sync");
    assert_eq!(st.read_ops, 0, "no read to zero a retired record");
    // Space is reused: the store does not grow with updates.
    assert!(kv.stats().chunks_used <= n as u64 + 200, "{:?}", kv.stats());
    // Every pair reads back its last value after a reopen, from the highest sequence number.
    let last: HashMap<usize, u8> = (0..updates)
        .map(|u| ((u * 7919) % n, 1 + (u % 200) as u8))
        .collect();
    drop(kv);
    let kv = KvStore::open(dev as Arc<dyn BlockDevice>, &cfg(1024)).unwrap();
    for i in 0..n {
        let want = pair_value(i, last.get(&i).copied().unwrap_or(0));
        assert_eq!(
            kv.get(&key(i)).unwrap().as_deref(),
            Some(&want[..]),
            "key {i}"
        );
    }
}

/// A key updated, then deleted: its older records are still on the device (freed, not zeroed),
/// so the tombstone stays live across a reopen until a compaction zeroes them; then it is freed,
/// and the key stays deleted across more reopenings.
#[test]
fn tombstone_outlives_stale_records_until_a_compaction() {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4 << 20).unwrap());
    let kv = KvStore::create(Arc::clone(&dev), &cfg(1000)).unwrap();
    kv.set(b"gone", b"version 1").unwrap();
    kv.set(b"kept", b"stays").unwrap();
    kv.sync().unwrap();
    kv.set(b"gone", b"version 2").unwrap();
    kv.sync().unwrap();
    assert!(kv.delete(b"gone").unwrap());
    kv.sync().unwrap();
    assert_eq!(kv.stats().tombstones, 1);
    drop(kv);
    let kv = KvStore::open(Arc::clone(&dev), &cfg(1000)).unwrap();
    assert_eq!(
        kv.get(b"gone").unwrap(),
        None,
        "deleted key back after a reopen"
    );
    assert_eq!(
        kv.stats().tombstones,
        1,
        "older records of the key are on the device"
    );
    kv.compact().unwrap();
    let st = kv.stats();
    assert_eq!((st.tombstones, st.compactions), (0, 1));
    assert!(st.compacted_records >= 1, "{st:?}");
    drop(kv);
    let kv = KvStore::open(Arc::clone(&dev), &cfg(1000)).unwrap();
    assert_eq!(
        kv.get(b"gone").unwrap(),
        None,
        "deleted key back after compaction"
    );
    assert_eq!(kv.get(b"kept").unwrap().as_deref(), Some(&b"stays"[..]));
    assert_eq!(kv.stats().tombstones, 0);
    assert_eq!(kv.len(), 1);
    // SET after DELETE: the new record outranks the tombstone, which goes.
    kv.set(b"gone", b"version 3").unwrap();
    kv.sync().unwrap();
    drop(kv);
    let kv = KvStore::open(dev, &cfg(1000)).unwrap();
    assert_eq!(kv.get(b"gone").unwrap().as_deref(), Some(&b"version 3"[..]));
}

/// A tombstone whose key has no other record on the device is freed by the reopen that finds it.
#[test]
fn a_lone_tombstone_is_freed_on_open() {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4 << 20).unwrap());
    let kv = KvStore::create(Arc::clone(&dev), &cfg(1000)).unwrap();
    kv.set(b"k", b"v").unwrap();
    kv.sync().unwrap();
    kv.delete(b"k").unwrap();
    kv.sync().unwrap();
    // The compaction zeroes the record and frees the tombstone, which stays on the device alone.
    kv.compact().unwrap();
    drop(kv);
    let kv = KvStore::open(dev, &cfg(1000)).unwrap();
    assert_eq!(kv.stats().tombstones, 0);
    assert_eq!(kv.get(b"k").unwrap(), None);
}

/// Deleting more keys than `tombstones_max` runs compactions by itself.
#[test]
fn deletes_beyond_the_limit_compact() {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(8 << 20).unwrap());
    let kv = KvStore::create(Arc::clone(&dev), &cfg(16)).unwrap();
    for i in 0..200 {
        kv.set(&key(i), &[i as u8; 300]).unwrap();
    }
    for i in 0..200 {
        kv.set(&key(i), &[i as u8 ^ 1; 300]).unwrap();
    }
    kv.sync().unwrap();
    for i in (0..200).step_by(2) {
        assert!(kv.delete(&key(i)).unwrap());
    }
    let st = kv.stats();
    assert!(st.compactions >= 5, "{st:?}");
    assert!(st.tombstones <= 16, "{st:?}");
    kv.sync().unwrap();
    drop(kv);
    let kv = KvStore::open(dev, &cfg(16)).unwrap();
    for i in 0..200 {
        let want = (i % 2 == 1).then(|| vec![i as u8 ^ 1; 300]);
        assert_eq!(kv.get(&key(i)).unwrap(), want, "key {i}");
    }
    assert_eq!(kv.len(), 100);
}

#[derive(Debug, Clone)]
enum Op {
    Set(usize, usize),
    Update(usize, usize),
    Delete(usize),
    Sync,
    Compact,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..12usize, 0..5000usize).prop_map(|(k, n)| Op::Set(k, n)),
        3 => (0..12usize, 0..5000usize).prop_map(|(k, n)| Op::Update(k, n)),
        3 => (0..12usize).prop_map(Op::Delete),
        1 => Just(Op::Sync),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any sequence of operations (values packed or several chunks long), with syncs,
    /// compactions and clean reopenings anywhere, reads back exactly as a map.
    #[test]
    fn operations_read_back_as_a_map(ops in proptest::collection::vec(op(), 1..80), max in 0..4usize) {
        let c = KvConfig { chunk_bytes: 512, ..cfg(max) };
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(1 << 20).unwrap());
        let mut kv = KvStore::create(Arc::clone(&dev), &c).unwrap();
        let mut model: HashMap<usize, Vec<u8>> = HashMap::new();
        for (step, o) in ops.iter().enumerate() {
            match *o {
                Op::Set(k, n) => {
                    let v = vec![(step % 251) as u8; n % 1500];
                    kv.set(&key(k), &v).unwrap();
                    model.insert(k, v);
                }
                Op::Update(k, n) => {
                    let v = vec![(step % 241) as u8; n % 300];
                    let done = kv.update(&key(k), &v).unwrap();
                    prop_assert_eq!(done, model.contains_key(&k));
                    if done {
                        model.insert(k, v);
                    }
                }
                Op::Delete(k) => {
                    prop_assert_eq!(kv.delete(&key(k)).unwrap(), model.remove(&k).is_some());
                }
                Op::Sync => kv.sync().unwrap(),
                Op::Compact => kv.compact().unwrap(),
                Op::Reopen => {
                    kv.sync().unwrap();
                    drop(kv);
                    kv = KvStore::open(Arc::clone(&dev), &c).unwrap();
                }
            }
            for k in 0..12 {
                prop_assert_eq!(kv.get(&key(k)).unwrap(), model.get(&k).cloned(), "key {} after {:?}", k, o);
            }
            prop_assert_eq!(kv.len(), model.len());
        }
    }
}
