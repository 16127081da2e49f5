//! The decode-matrix cache: an LRU of decode plans keyed by the erasure pattern, as Ceph's ISA plugin
//! keeps its decoding tables. A plan (the k survivors to read and the kernel tables of the rows that
//! rebuild each lost shard) costs a k x k inversion, a matrix product per lost parity chunk and the table
//! expansion; an array or cluster that decodes many small stripes with the same failures pays that once.
//!
//! The key is the list of erased shard indexes in the caller's order (the rows of a plan follow that
//! order; the survivors are a function of the erased set: the first k shards not erased). Limits: at
//! most `entries_max` plans and `bytes_max` bytes of tables; the least recently used plan goes first
//! when either would be exceeded, and a plan larger than `bytes_max` alone is used once and not kept.
//! Lookups take one short mutex hold (clone of an `Arc`), so concurrent decoders share the cache.

use crate::kernels::Tables;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Default cap on cached plans per code.
pub const DECODE_CACHE_ENTRIES_MAX: usize = 256;
/// Default cap on the bytes of cached tables per code (a (12,4) plan is about 3 KiB, a (200,56) one
/// about 700 KiB).
pub const DECODE_CACHE_BYTES_MAX: usize = 16 << 20;

/// A decode plan: read `survivors` (k shard indexes), multiply by `tables` (one row per erased shard).
#[derive(Debug)]
pub(crate) struct DecodePlan {
    pub survivors: Vec<usize>,
    pub tables: Tables,
}

impl DecodePlan {
    fn bytes(&self) -> usize {
        self.tables.bytes() + self.survivors.len() * std::mem::size_of::<usize>()
    }
}

/// Counters of one code's cache, for tests and benchmarks ([`crate::LinearCode::decode_cache_stats`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DecodeCacheStats {
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that had to build a plan (each one inversion).
    pub misses: u64,
    /// Plans dropped to stay within the limits.
    pub evictions: u64,
    /// Plans held now.
    pub entries: usize,
    /// Bytes of tables held now.
    pub bytes: usize,
}

struct Slot {
    plan: Arc<DecodePlan>,
    /// Tick of the last use: the smallest is the least recently used.
    used: u64,
}

struct Inner {
    map: HashMap<Box<[u16]>, Slot>,
    tick: u64,
    stats: DecodeCacheStats,
}

pub(crate) struct DecodeCache {
    entries_max: usize,
    bytes_max: usize,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for DecodeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DecodeCache({:?})", self.stats())
    }
}

impl Clone for DecodeCache {
    /// A clone starts empty with the same limits.
    fn clone(&self) -> Self {
        DecodeCache::new(self.entries_max, self.bytes_max)
    }
}

impl DecodeCache {
    pub(crate) fn new(entries_max: usize, bytes_max: usize) -> DecodeCache {
        DecodeCache {
            entries_max,
            bytes_max,
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                tick: 0,
                stats: DecodeCacheStats::default(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves a consistent map (every mutation is one insert or
        // remove), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The plan for `key` (the erased indexes, each < 256 as n <= 256), built with `build` on a miss.
    /// `build` runs outside the lock; two threads missing on one key at once both build, one result is
    /// kept.
    pub(crate) fn get_or_build<E>(
        &self,
        key: &[u16],
        build: impl FnOnce() -> Result<DecodePlan, E>,
    ) -> Result<Arc<DecodePlan>, E> {
        if self.entries_max == 0 {
            let mut g = self.lock();
            g.stats.misses += 1;
            drop(g);
            return build().map(Arc::new);
        }
        {
            let mut g = self.lock();
            g.tick += 1;
            let tick = g.tick;
            if let Some(slot) = g.map.get_mut(key) {
                slot.used = tick;
                let plan = slot.plan.clone();
                g.stats.hits += 1;
                return Ok(plan);
            }
            g.stats.misses += 1;
        }
        let plan = Arc::new(build()?);
        let bytes = plan.bytes();
        if bytes > self.bytes_max {
            return Ok(plan);
        }
        let mut g = self.lock();
        if g.map.contains_key(key) {
            return Ok(plan);
        }
        while !g.map.is_empty()
            && (g.map.len() >= self.entries_max || g.stats.bytes + bytes > self.bytes_max)
        {
            let oldest = g
                .map
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
                .expect("map is not empty");
            let gone = g.map.remove(&oldest).expect("key just found");
            g.stats.bytes -= gone.plan.bytes();
            g.stats.evictions += 1;
        }
        g.tick += 1;
        let used = g.tick;
        g.map.insert(
            key.into(),
            Slot {
                plan: plan.clone(),
                used,
            },
        );
        g.stats.bytes += bytes;
        g.stats.entries = g.map.len();
        assert!(g.map.len() <= self.entries_max && g.stats.bytes <= self.bytes_max);
        Ok(plan)
    }

    pub(crate) fn stats(&self) -> DecodeCacheStats {
        let g = self.lock();
        let mut s = g.stats;
        s.entries = g.map.len();
        s
    }
}
