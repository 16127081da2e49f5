//! Hashes and sorted sets (format version 2's value kinds): Redis semantics of the store API,
//! WRONGTYPE between kinds, and reopen by scan rebuilding hashes and the in-memory sorted sets.

use std::ops::Bound;
use std::sync::Arc;

use ecstack_device::{BlockDevice, MemDevice};
use ecstack_kv::{KvConfig, KvError, KvStore};

fn cfg(cache: usize) -> KvConfig {
    KvConfig {
        chunk_bytes: 512,
        cache_entries: cache,
        ..KvConfig::default()
    }
}

#[test]
fn hashes_and_sorted_sets_survive_reopen() {
    for cache in [0, 16] {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(1 << 20).unwrap());
        let kv = KvStore::create(Arc::clone(&dev), &cfg(cache)).unwrap();
        assert_eq!(
            kv.hset(b"user1", &[(b"f0", b"a"), (b"f1", b"b")]).unwrap(),
            2
        );
        assert_eq!(
            kv.hset(b"user1", &[(b"f1", b"B"), (b"f2", b"c")]).unwrap(),
            1
        );
        assert_eq!(
            kv.zadd(b"_indices", &[(2.5, b"user1"), (-1.0, b"user2")])
                .unwrap(),
            2
        );
        assert_eq!(
            kv.zadd(b"_indices", &[(3.0, b"user2"), (f64::INFINITY, b"u3")])
                .unwrap(),
            1
        );
        kv.set(b"plain", b"v").unwrap();
        assert_eq!(kv.len(), 3, "user1, _indices, plain");
        // Kinds do not mix.
        assert!(matches!(kv.get(b"user1"), Err(KvError::WrongType)));
        assert!(matches!(kv.get(b"_indices"), Err(KvError::WrongType)));
        assert!(matches!(kv.hgetall(b"plain"), Err(KvError::WrongType)));
        assert!(matches!(
            kv.zadd(b"plain", &[(1.0, b"x")]),
            Err(KvError::WrongType)
        ));
        assert!(matches!(
            kv.hset(b"_indices", &[(b"f", b"v")]),
            Err(KvError::WrongType)
        ));
        assert_eq!(kv.kind_of(b"_indices").unwrap(), Some("zset"));
        assert_eq!(kv.kind_of(b"user1").unwrap(), Some("hash"));
        assert!(kv.zadd(b"z", &[(f64::NAN, b"m")]).is_err());
        drop(kv);

        let kv = KvStore::open(Arc::clone(&dev), &cfg(cache)).unwrap();
        let f = kv.hgetall(b"user1").unwrap();
        assert_eq!(
            f,
            vec![
                (b"f0".to_vec(), b"a".to_vec()),
                (b"f1".to_vec(), b"B".to_vec()),
                (b"f2".to_vec(), b"c".to_vec())
            ]
        );
        let all = kv
            .zrange_by_score(b"_indices", Bound::Unbounded, Bound::Unbounded, 0, None)
            .unwrap();
        let names: Vec<&[u8]> = all.iter().map(|(m, _)| &m[..]).collect();
        assert_eq!(names, vec![&b"user1"[..], b"user2", b"u3"]);
        let some = kv
            .zrange_by_score(
                b"_indices",
                Bound::Excluded(2.5),
                Bound::Included(f64::INFINITY),
                0,
                Some(1),
            )
            .unwrap();
        assert_eq!(some, vec![(b"user2".to_vec(), 3.0)]);
        assert_eq!(kv.zcard(b"_indices").unwrap(), 3);
        assert_eq!(kv.len(), 3);
        // HDEL of every field deletes the hash; ZREM of every member the set; DEL a whole set.
        assert_eq!(
            kv.hdel(b"user1", &[b"f0", b"f1", b"f2", b"nope"]).unwrap(),
            3
        );
        assert!(!kv.exists(b"user1").unwrap());
        assert_eq!(kv.zrem(b"_indices", &[b"user1", b"nope"]).unwrap(), 1);
        kv.zadd(b"z2", &[(1.0, b"a"), (2.0, b"b")]).unwrap();
        assert!(kv.delete(b"z2").unwrap());
        assert_eq!(kv.zcard(b"z2").unwrap(), 0);
        // SET replaces a sorted set, as in Redis.
        kv.set(b"_indices", b"now a string").unwrap();
        assert_eq!(kv.get(b"_indices").unwrap().unwrap(), b"now a string");
        kv.sync().unwrap();
        drop(kv);

        let kv = KvStore::open(dev, &cfg(cache)).unwrap();
        assert_eq!(kv.len(), 2, "plain and _indices");
        assert_eq!(kv.zcard(b"z2").unwrap(), 0);
        assert!(matches!(kv.zcard(b"_indices"), Err(KvError::WrongType)));
        assert_eq!(kv.get(b"plain").unwrap().unwrap(), b"v");
    }
}

#[test]
fn member_and_key_sizes_are_checked() {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(1 << 20).unwrap());
    let kv = KvStore::create(dev, &cfg(0)).unwrap();
    let long = vec![b'm'; 251];
    assert!(matches!(
        kv.zadd(b"zset", &[(1.0, &long)]),
        Err(KvError::MemberSize(256))
    ));
    assert!(kv.zadd(b"zs", &[(1.0, &long)]).is_ok());
    assert!(kv.hset(&[b'k'; 256], &[(b"f", b"v")]).is_err());
}
