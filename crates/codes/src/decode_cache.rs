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
//!
//! In front of the shared LRU each thread keeps the last cached plan it used (`LAST`: the cache's id,
//! the key and an `Arc` of the plan). A thread that decodes the same pattern again with the same code
//! takes the plan from there: no lock, no hash, no reference count, one relaxed counter increment —
//! what matters at 4 KiB chunks, where a call is ~0.2 µs and the shared lookup's four atomic
//! operations were ~10 % of it. The fast path counts as a hit and marks the plan used (LRU order), so
//! the counters and the eviction order are those of the shared cache alone; the one difference is that
//! a thread's last plan stays usable (and its memory held, at most `LAST_BYTES_MAX` per thread) after
//! the LRU has evicted it, until that thread uses another plan, drops the code, or exits.

use crate::kernels::Tables;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
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
    /// Tick of the last use: the smallest among the cached plans is the least recently used.
    used: AtomicU64,
}

impl DecodePlan {
    pub(crate) fn new(survivors: Vec<usize>, tables: Tables) -> DecodePlan {
        DecodePlan {
            survivors,
            tables,
            used: AtomicU64::new(0),
        }
    }

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

struct Inner {
    map: HashMap<Box<[u16]>, Arc<DecodePlan>>,
    stats: DecodeCacheStats,
}

pub(crate) struct DecodeCache {
    /// Unique per cache (never reused), so a thread's `LAST` names the cache it came from.
    id: u64,
    entries_max: usize,
    bytes_max: usize,
    /// The LRU clock: written under the lock, read by the fast path to mark its plan used.
    tick: AtomicU64,
    /// Hits answered by a thread's `LAST` (the rest are counted in `Inner::stats`).
    fast_hits: AtomicU64,
    /// Misses of [`DecodeCache::with_plan`] with the cache off.
    off_misses: AtomicU64,
    inner: Mutex<Inner>,
}

/// Keys up to this many erased shards take the per-thread fast path.
const LAST_KEY_MAX: usize = 8;
/// Plans up to this many bytes are kept as a thread's last plan ((12,4) with 4 lost: ~3 KiB).
const LAST_BYTES_MAX: usize = 64 << 10;

/// A thread's last cached plan, with the cache and key it answers.
struct Last {
    cache: u64,
    key_len: usize,
    key: [u16; LAST_KEY_MAX],
    plan: Arc<DecodePlan>,
}

thread_local! {
    static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

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
            id: NEXT_ID.fetch_add(1, Relaxed),
            entries_max,
            bytes_max,
            tick: AtomicU64::new(0),
            fast_hits: AtomicU64::new(0),
            off_misses: AtomicU64::new(0),
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                stats: DecodeCacheStats::default(),
            }),
        }
    }

    /// Advance the LRU clock (under the lock: the only writers). By two: the fast path stamps the
    /// odd tick between, so a fast use is newer than every earlier lookup and older than every later
    /// one.
    fn next_tick(&self, _held: &Inner) -> u64 {
        let t = self.tick.load(Relaxed) + 2;
        self.tick.store(t, Relaxed);
        t
    }

    /// Run `f` on the plan for `key` (the erased indexes, each < 256 as n <= 256): this thread's last
    /// plan when it is the one, else the shared LRU's, else one made with `build` (see
    /// [`DecodeCache::lookup`]).
    pub(crate) fn with_plan<R, E>(
        &self,
        key: &[u16],
        build: impl FnOnce() -> Result<DecodePlan, E>,
        f: impl FnOnce(&DecodePlan) -> R,
    ) -> Result<R, E> {
        if self.entries_max == 0 {
            // The cache off: a plan made for this call alone (no lock, no `Arc`).
            self.off_misses.fetch_add(1, Relaxed);
            return build().map(|plan| f(&plan));
        }
        let mut f = Some(f);
        if key.len() <= LAST_KEY_MAX {
            let fast = LAST.try_with(|l| {
                let l = l.try_borrow().ok()?;
                let last = l.as_ref()?;
                if last.cache != self.id || last.key[..last.key_len] != *key {
                    return None;
                }
                self.fast_hits.fetch_add(1, Relaxed);
                last.plan.used.store(self.tick.load(Relaxed) + 1, Relaxed);
                Some((f.take().expect("f unused"))(&last.plan))
            });
            if let Ok(Some(r)) = fast {
                return Ok(r);
            }
        }
        let (plan, cached) = self.lookup(key, build)?;
        if cached && key.len() <= LAST_KEY_MAX && plan.bytes() <= LAST_BYTES_MAX {
            let mut k = [0u16; LAST_KEY_MAX];
            k[..key.len()].copy_from_slice(key);
            let last = Last {
                cache: self.id,
                key_len: key.len(),
                key: k,
                plan: plan.clone(),
            };
            // The old last plan (maybe the last reference to an evicted one) is dropped here.
            let _ = LAST.try_with(|l| {
                if let Ok(mut l) = l.try_borrow_mut() {
                    *l = Some(last);
                }
            });
        }
        Ok((f.take().expect("f unused"))(&plan))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves a consistent map (every mutation is one insert or
        // remove), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The plan for `key` from the shared LRU, built with `build` on a miss, and whether it is (now)
    /// in the cache. `build` runs outside the lock; two threads missing on one key at once both build,
    /// one result is kept.
    fn lookup<E>(
        &self,
        key: &[u16],
        build: impl FnOnce() -> Result<DecodePlan, E>,
    ) -> Result<(Arc<DecodePlan>, bool), E> {
        if self.entries_max == 0 {
            let mut g = self.lock();
            g.stats.misses += 1;
            drop(g);
            return build().map(|p| (Arc::new(p), false));
        }
        {
            let mut g = self.lock();
            let tick = self.next_tick(&g);
            if let Some(plan) = g.map.get(key) {
                plan.used.store(tick, Relaxed);
                let plan = plan.clone();
                g.stats.hits += 1;
                return Ok((plan, true));
            }
            g.stats.misses += 1;
        }
        let plan = Arc::new(build()?);
        let bytes = plan.bytes();
        if bytes > self.bytes_max {
            return Ok((plan, false));
        }
        let mut g = self.lock();
        if let Some(kept) = g.map.get(key) {
            return Ok((kept.clone(), true));
        }
        while !g.map.is_empty()
            && (g.map.len() >= self.entries_max || g.stats.bytes + bytes > self.bytes_max)
        {
            let oldest = g
                .map
                .iter()
                .min_by_key(|(_, p)| p.used.load(Relaxed))
                .map(|(k, _)| k.clone())
                .expect("map is not empty");
            let gone = g.map.remove(&oldest).expect("key just found");
            g.stats.bytes -= gone.bytes();
            g.stats.evictions += 1;
        }
        let used = self.next_tick(&g);
        plan.used.store(used, Relaxed);
        g.map.insert(key.into(), plan.clone());
        g.stats.bytes += bytes;
        g.stats.entries = g.map.len();
        assert!(g.map.len() <= self.entries_max && g.stats.bytes <= self.bytes_max);
        Ok((plan, true))
    }

    pub(crate) fn stats(&self) -> DecodeCacheStats {
        let g = self.lock();
        let mut s = g.stats;
        s.entries = g.map.len();
        s.hits += self.fast_hits.load(Relaxed);
        s.misses += self.off_misses.load(Relaxed);
        s
    }
}

impl Drop for DecodeCache {
    /// This thread's last plan, if it is this cache's, goes with the cache (other threads' go when
    /// they use another plan or exit: a cache id is never reused, so they are never answered again).
    fn drop(&mut self) {
        let _ = LAST.try_with(|l| {
            if let Ok(mut l) = l.try_borrow_mut() {
                if l.as_ref().is_some_and(|x| x.cache == self.id) {
                    *l = None;
                }
            }
        });
    }
}
