//! Format version 3's decoders on arbitrary bytes: the record and superblock decoders never panic
//! and refuse garbage, any single bit flip in a packed record makes it fail, and opening a device
//! whose chunks hold arbitrary bytes (with packed records of the store among them) never panics and
//! finds exactly the records that were written whole.

use std::sync::Arc;

use ecstack_device::{BlockDevice, MemDevice};
use ecstack_kv::record::{
    encode_record_into, packed_bytes, record_bytes, verify_record, RecordHeader, Superblock,
    ValueKind,
};
use ecstack_kv::{KvConfig, KvStore};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600), salt: u64) {
        let _ = RecordHeader::decode(&bytes);
        prop_assert!(verify_record(&bytes, salt).is_none() || bytes.len() >= 24);
        let sb = Superblock::decode(&bytes);
        if let Err(e) = sb {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn a_flipped_bit_fails_the_record(
        key in proptest::collection::vec(any::<u8>(), 1..40),
        value in proptest::collection::vec(any::<u8>(), 0..200),
        seq: u64,
        salt: u64,
        bit in 0usize..10_000,
    ) {
        let n = record_bytes(key.len(), value.len());
        let mut b = vec![0u8; packed_bytes(n)];
        encode_record_into(&mut b, salt, seq, ValueKind::String, &key, &value);
        let h = verify_record(&b, salt).expect("a record passes");
        prop_assert_eq!((h.seq, h.value_bytes as usize), (seq, value.len()));
        let bit = bit % (n * 8);
        b[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(verify_record(&b, salt).is_none(), "flip of bit {} passed", bit);
    }

    /// A store of 512-byte chunks; some chunks then get arbitrary bytes, some arbitrary bytes with a
    /// valid record at an arbitrary aligned offset (a record of the store, so it must be found),
    /// some a record cut short. Open never panics and keeps what it can prove.
    #[test]
    fn open_on_garbage_never_panics(
        fills in proptest::collection::vec(
            (0u8..3, proptest::collection::vec(any::<u8>(), 512), 0usize..60, 1u8..80),
            1..24,
        ),
    ) {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(32 << 10).unwrap());
        let cfg = KvConfig { chunk_bytes: 512, salt: Some(7), ..KvConfig::default() };
        drop(KvStore::create(Arc::clone(&dev), &cfg).unwrap());
        let mut expect = Vec::new();
        for (i, (mode, mut chunk, slot, vlen)) in fills.into_iter().enumerate() {
            let key = format!("k{i}").into_bytes();
            let value = vec![i as u8; vlen as usize];
            let n = record_bytes(key.len(), value.len());
            let off = (slot * 8).min(512 - packed_bytes(n));
            match mode {
                0 => {}
                1 => {
                    encode_record_into(&mut chunk[off..], 7, 1000 + i as u64, ValueKind::String, &key, &value);
                    expect.push((key, value));
                }
                _ => {
                    encode_record_into(&mut chunk[off..], 7, 1000 + i as u64, ValueKind::String, &key, &value);
                    chunk[off + n - 1] ^= 0x5a; // the last value byte: the checksum fails
                }
            }
            dev.write_at(&chunk, (1 + i as u64) * 512).unwrap();
        }
        let kv = KvStore::open(Arc::clone(&dev), &cfg).unwrap();
        for (k, v) in &expect {
            prop_assert_eq!(kv.get(k).unwrap(), Some(v.clone()));
        }
        prop_assert_eq!(kv.len(), expect.len());
        // The store still works on top of what it found.
        kv.set(b"after", b"open").unwrap();
        prop_assert_eq!(kv.get(b"after").unwrap(), Some(b"open".to_vec()));
    }
}
