//! `Cached`: a model of the operating system's page cache in front of a device, for experiments
//! whose devices model service times (`throttled:profile=eplog-hdd:…`) of machines that had one.
//! CodFS's OSDs stored chunks in ext4 files on 8 GB machines and dropped the buffer cache before
//! each test (§5.2), not during it: a delta logged a moment ago, or a chunk read for the previous
//! update, was read again from memory. Without this wrapper every such read pays a modeled disk
//! request.
//!
//! Write-through: a write goes to the inner device first (and is as durable as the inner device
//! makes it), then the pages it covers whole are cached and cached pages it covers in part are
//! patched. A read served wholly from cached pages does not reach the inner device; otherwise the
//! span of pages from the first missing one to the last missing one is read as one request (the
//! inner device charges it like any read) and cached. Least recently used pages go first once
//! `capacity_bytes` is reached. A discard drops the pages. Nothing here survives the process: a
//! restart is a dropped cache. Concurrent writes to one page have no defined order here, as on
//! any device (callers do not issue them).
//!
//! **Write-back** (`cached:size=…,writeback=BYTES:`, [`Cached::with_writeback`]), a model of a
//! program that writes through the buffer cache and never syncs — as CodFS's prototype did (the
//! seed names no sync and drops the cache before each test): a write only changes cached pages
//! (a page it covers in part is read first if not cached) and marks them dirty; `flush` does
//! nothing, so **nothing is durable until written back**. Once `BYTES` of pages are dirty (Linux
//! starts writing back at `dirty_background_ratio`, 10 % of memory) the writer that crossed the
//! mark writes every dirty page back, in address order, consecutive pages as one request of up to
//! 1 MiB (the elevator's sort); so does dropping the device (a daemon's clean stop). Dirty pages
//! and pages being written back are never evicted, so a read never sees the device's older bytes.
//! An experiment setting, never a store's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard};

use crate::{BlockDevice, DeviceStats, Result};

/// Bytes of one cached page.
pub const PAGE_BYTES: u64 = 4096;

/// Largest request write-back sends: consecutive dirty pages up to this many bytes.
const WRITEBACK_RUN_BYTES: u64 = 1 << 20;

/// A page-cache model over `D` (see the module doc).
pub struct Cached<D: BlockDevice> {
    inner: D,
    name: String,
    pages_max: usize,
    /// Write-back: dirty pages written back once this many are dirty (None: write-through).
    writeback_pages: Option<usize>,
    state: Mutex<Pages>,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Writes started: a read that went to the inner device caches what it read only if no write
    /// started meanwhile (it may have read bytes that write then replaced).
    writes: AtomicU64,
}

#[derive(Default)]
struct Pages {
    /// page index → (bytes, last use).
    map: HashMap<u64, (Box<[u8]>, u64)>,
    /// last use → page index: the least recently used first.
    by_use: BTreeMap<u64, u64>,
    tick: u64,
    /// Write-back: pages changed since they were last written to the device.
    dirty: BTreeSet<u64>,
    /// Write-back: pages on their way to the device (not evictable until there).
    writing: HashMap<u64, u32>,
}

impl Pages {
    fn touch(&mut self, page: u64) {
        self.tick += 1;
        let tick = self.tick;
        if let Some((_, used)) = self.map.get_mut(&page) {
            self.by_use.remove(used);
            *used = tick;
            self.by_use.insert(tick, page);
        }
    }

    fn insert(&mut self, page: u64, bytes: &[u8], pages_max: usize) {
        debug_assert_eq!(bytes.len() as u64, PAGE_BYTES);
        self.tick += 1;
        let tick = self.tick;
        if let Some((old, used)) = self.map.insert(page, (bytes.into(), tick)) {
            drop(old);
            self.by_use.remove(&used);
        }
        self.by_use.insert(tick, page);
        // Least recently used clean pages go; dirty ones and ones being written back stay (and
        // are passed over: at most one look at each page).
        let mut looked = 0;
        while self.map.len() > pages_max && looked < self.by_use.len() {
            let Some((_, victim)) = self.by_use.pop_first() else {
                break;
            };
            looked += 1;
            if self.dirty.contains(&victim) || self.writing.contains_key(&victim) {
                self.tick += 1;
                let t = self.tick;
                self.by_use.insert(t, victim);
                if let Some(entry) = self.map.get_mut(&victim) {
                    entry.1 = t;
                }
                continue;
            }
            self.map.remove(&victim);
        }
        debug_assert_eq!(self.map.len(), self.by_use.len());
    }

    fn drop_page(&mut self, page: u64) {
        if let Some((_, used)) = self.map.remove(&page) {
            self.by_use.remove(&used);
        }
        self.dirty.remove(&page);
    }
}

impl<D: BlockDevice> std::fmt::Debug for Cached<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cached")
            .field("name", &self.name)
            .field("pages_max", &self.pages_max)
            .finish_non_exhaustive()
    }
}

impl<D: BlockDevice> Cached<D> {
    /// A write-through cache of at most `capacity_bytes` (rounded down to whole pages, at least
    /// one page).
    pub fn new(inner: D, capacity_bytes: u64) -> Cached<D> {
        Cached::with_writeback(inner, capacity_bytes, None)
    }

    /// A cache that writes back once `dirty_bytes` are dirty and ignores flushes (the module
    /// doc's write-back: nothing is durable until written back); `None`: write-through.
    pub fn with_writeback(inner: D, capacity_bytes: u64, dirty_bytes: Option<u64>) -> Cached<D> {
        let name = format!("cached:{}", inner.name());
        Cached {
            inner,
            name,
            pages_max: (capacity_bytes / PAGE_BYTES).max(1) as usize,
            writeback_pages: dirty_bytes.map(|b| (b / PAGE_BYTES).max(1) as usize),
            state: Mutex::new(Pages::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }

    /// Reads served from the cache, and reads that went to the inner device.
    pub fn hits_misses(&self) -> (u64, u64) {
        (self.hits.load(Relaxed), self.misses.load(Relaxed))
    }

    /// Pages cached now.
    pub fn cached_pages(&self) -> usize {
        self.lock().map.len()
    }

    /// Pages changed and not yet written back (always 0 when writing through).
    pub fn dirty_pages(&self) -> usize {
        self.lock().dirty.len()
    }

    /// Writes every dirty page back, in address order, consecutive pages as one request of up
    /// to [`WRITEBACK_RUN_BYTES`] (not flushed: the device's own flush makes them durable). A
    /// page written again meanwhile stays dirty; one that failed to go is dirty again.
    pub fn write_back(&self) -> Result<()> {
        let runs: Vec<(u64, Vec<u8>)> = {
            let mut st = self.lock();
            let dirty = std::mem::take(&mut st.dirty);
            let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
            for page in dirty {
                let Some((bytes, _)) = st.map.get(&page) else {
                    continue; // dropped by a discard
                };
                let bytes = bytes.clone();
                *st.writing.entry(page).or_insert(0) += 1;
                match runs.last_mut() {
                    Some((first, b))
                        if *first + (b.len() as u64 / PAGE_BYTES) == page
                            && (b.len() as u64) < WRITEBACK_RUN_BYTES =>
                    {
                        b.extend_from_slice(&bytes)
                    }
                    _ => runs.push((page, bytes.into_vec())),
                }
            }
            runs
        };
        let mut result = Ok(());
        let cap = self.inner.capacity();
        for (first, bytes) in &runs {
            let at = first * PAGE_BYTES;
            // The device's last page may be partial: only what it holds goes.
            let len = (bytes.len() as u64).min(cap.saturating_sub(at)) as usize;
            let r = self.inner.write_at(&bytes[..len], at);
            let mut st = self.lock();
            for page in *first..*first + bytes.len() as u64 / PAGE_BYTES {
                if r.is_err() && st.map.contains_key(&page) {
                    st.dirty.insert(page);
                }
                if let Some(n) = st.writing.get_mut(&page) {
                    *n -= 1;
                    if *n == 0 {
                        st.writing.remove(&page);
                    }
                }
            }
            if result.is_ok() {
                result = r;
            }
        }
        result
    }

    /// Write-back: a write changes the cached pages only (pages it covers in part read first if
    /// not cached) and marks them dirty; the writer that takes the dirty pages to the mark writes
    /// them all back.
    fn write_behind(&self, buf: &[u8], offset: u64, mark: usize) -> Result<()> {
        let end = offset + buf.len() as u64;
        if end > self.inner.capacity() {
            return self.inner.write_at(buf, offset); // beyond capacity: the device says so
        }
        let pages = offset / PAGE_BYTES..end.div_ceil(PAGE_BYTES);
        self.writes.fetch_add(1, SeqCst);
        let dirty = {
            let mut st = self.lock();
            for page in pages {
                let p0 = page * PAGE_BYTES;
                let (a, b) = (offset.max(p0), end.min(p0 + PAGE_BYTES));
                let src = &buf[(a - offset) as usize..(b - offset) as usize];
                let mut bytes = if b - a == PAGE_BYTES {
                    src.to_vec()
                } else if let Some((cached, _)) = st.map.get(&page) {
                    cached.to_vec()
                } else {
                    // A page covered in part is read first (zeros past the device's end).
                    drop(st);
                    let len = PAGE_BYTES.min(self.inner.capacity() - p0) as usize;
                    let mut whole = vec![0u8; PAGE_BYTES as usize];
                    self.inner.read_at(&mut whole[..len], p0)?;
                    st = self.lock();
                    match st.map.get(&page) {
                        Some((cached, _)) => cached.to_vec(), // newer, written meanwhile
                        None => whole,
                    }
                };
                bytes[(a - p0) as usize..(b - p0) as usize].copy_from_slice(src);
                // Dirty first: the insertion's eviction passes over dirty pages.
                st.dirty.insert(page);
                st.insert(page, &bytes, self.pages_max);
            }
            st.dirty.len()
        };
        if dirty >= mark {
            self.write_back()?;
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Pages> {
        // A panic elsewhere cannot leave `Pages` inconsistent in a way that returns wrong bytes:
        // at worst a page is missing from `by_use` and never evicted.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Copies what the cache holds of `[offset, offset + buf.len())` into `buf`; the pages it
    /// lacks, first and last (None: it holds all).
    fn from_cache(&self, buf: &mut [u8], offset: u64) -> Option<(u64, u64)> {
        let end = offset + buf.len() as u64;
        let mut missing: Option<(u64, u64)> = None;
        let mut st = self.lock();
        for page in offset / PAGE_BYTES..end.div_ceil(PAGE_BYTES) {
            let p0 = page * PAGE_BYTES;
            let (a, b) = (offset.max(p0), end.min(p0 + PAGE_BYTES));
            match st.map.get(&page) {
                Some((bytes, _)) => {
                    buf[(a - offset) as usize..(b - offset) as usize]
                        .copy_from_slice(&bytes[(a - p0) as usize..(b - p0) as usize]);
                    st.touch(page);
                }
                None => {
                    missing = Some(match missing {
                        None => (page, page),
                        Some((f, _)) => (f, page),
                    })
                }
            }
        }
        missing
    }
}

impl<D: BlockDevice> BlockDevice for Cached<D> {
    fn name(&self) -> &str {
        &self.name
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if buf.is_empty() {
            return self.inner.read_at(buf, offset);
        }
        let Some((first, last)) = self.from_cache(buf, offset) else {
            self.hits.fetch_add(1, Relaxed);
            return Ok(());
        };
        self.misses.fetch_add(1, Relaxed);
        // The missing span, whole pages, clipped to the device (its last page may be partial).
        let cap = self.inner.capacity();
        let from = first * PAGE_BYTES;
        let to = ((last + 1) * PAGE_BYTES).min(cap);
        if from >= to {
            return self.inner.read_at(buf, offset); // beyond capacity: the inner device says so
        }
        let mut span = vec![0u8; (to - from) as usize];
        let writes_before = self.writes.load(SeqCst);
        self.inner.read_at(&mut span, from)?;
        let end = offset + buf.len() as u64;
        let mut st = self.lock();
        let unchanged = self.writes.load(SeqCst) == writes_before;
        for page in first..=last {
            let p0 = page * PAGE_BYTES;
            let in_span = (p0 - from) as usize;
            let (a, b) = (offset.max(p0), end.min(p0 + PAGE_BYTES).min(to));
            // A page of the span that is cached is newer than the device's (under write-back it
            // may be dirty): the caller gets it, and it stays.
            if let Some((bytes, _)) = st.map.get(&page) {
                if a < b {
                    buf[(a - offset) as usize..(b - offset) as usize]
                        .copy_from_slice(&bytes[(a - p0) as usize..(b - p0) as usize]);
                }
                continue;
            }
            if unchanged && p0 + PAGE_BYTES <= to {
                st.insert(
                    page,
                    &span[in_span..in_span + PAGE_BYTES as usize],
                    self.pages_max,
                );
            }
            // Copy what the caller asked for from the fresh bytes.
            if a < b {
                let at = (a - from) as usize;
                buf[(a - offset) as usize..(b - offset) as usize]
                    .copy_from_slice(&span[at..at + (b - a) as usize]);
            }
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        if let Some(mark) = self.writeback_pages {
            if !buf.is_empty() {
                return self.write_behind(buf, offset, mark);
            }
        }
        let end = offset + buf.len() as u64;
        let pages = offset / PAGE_BYTES..end.div_ceil(PAGE_BYTES);
        self.writes.fetch_add(1, SeqCst);
        if let Err(e) = self.inner.write_at(buf, offset) {
            // The device may hold some of the bytes: the cache must not claim either version.
            let mut st = self.lock();
            for page in pages {
                st.drop_page(page);
            }
            return Err(e);
        }
        let mut st = self.lock();
        for page in pages {
            let p0 = page * PAGE_BYTES;
            let (a, b) = (offset.max(p0), end.min(p0 + PAGE_BYTES));
            let src = &buf[(a - offset) as usize..(b - offset) as usize];
            if b - a == PAGE_BYTES {
                st.insert(page, src, self.pages_max);
            } else if let Some((bytes, _)) = st.map.get_mut(&page) {
                bytes[(a - p0) as usize..(b - p0) as usize].copy_from_slice(src);
                st.touch(page);
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        if self.writeback_pages.is_some() {
            return Ok(()); // the modelled program never syncs: see the module doc
        }
        self.inner.flush()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        if self.writeback_pages.is_some() {
            // Dirty bytes beside the range, on pages it covers in part, must not go with them.
            self.write_back()?;
        }
        {
            let mut st = self.lock();
            for page in offset / PAGE_BYTES..(offset + len).div_ceil(PAGE_BYTES) {
                st.drop_page(page);
            }
        }
        self.inner.discard(offset, len)
    }

    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
    fn keeps_data(&self) -> bool {
        self.inner.keeps_data()
    }
    fn backing_paths(&self) -> Vec<std::path::PathBuf> {
        self.inner.backing_paths()
    }
}

impl<D: BlockDevice> Drop for Cached<D> {
    /// A clean stop writes every dirty page back and flushes (errors can only be logged).
    fn drop(&mut self) {
        if self.writeback_pages.is_some() {
            if let Err(e) = self.write_back().and_then(|()| self.inner.flush()) {
                eprintln!("{}: write-back at close failed: {e}", self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SplitMix64;
    use crate::{MemDevice, Metered};

    fn dev(cap: u64, cache: u64) -> Cached<Metered<MemDevice>> {
        Cached::new(Metered::new(MemDevice::new(cap).unwrap()), cache)
    }

    #[test]
    fn a_second_read_and_a_read_of_what_was_written_stay_in_memory() {
        let d = dev(1 << 20, 64 << 10);
        d.write_at(&[7u8; 8192], 4096).unwrap();
        let mut b = vec![0u8; 8192];
        d.read_at(&mut b, 4096).unwrap();
        assert_eq!(b, vec![7u8; 8192]);
        assert_eq!(d.inner.stats().read_ops, 0, "written pages are cached");
        d.read_at(&mut b, 65536).unwrap();
        d.read_at(&mut b, 65536).unwrap();
        assert_eq!(d.inner.stats().read_ops, 1);
        assert_eq!(d.hits_misses(), (2, 1));
    }

    #[test]
    fn least_recently_used_pages_go_first() {
        let d = dev(1 << 20, 2 * PAGE_BYTES);
        let mut b = vec![0u8; 4096];
        d.read_at(&mut b, 0).unwrap();
        d.read_at(&mut b, 4096).unwrap();
        d.read_at(&mut b, 0).unwrap(); // page 0 used last
        d.read_at(&mut b, 8192).unwrap(); // evicts page 1
        assert_eq!(d.cached_pages(), 2);
        let reads = d.inner.stats().read_ops;
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(d.inner.stats().read_ops, reads);
        d.read_at(&mut b, 4096).unwrap();
        assert_eq!(d.inner.stats().read_ops, reads + 1);
    }

    #[test]
    fn a_failed_write_leaves_no_cached_page_of_its_range() {
        let d = dev(16384, 1 << 20);
        d.write_at(&[1u8; 4096], 12288).unwrap();
        assert!(d.write_at(&[2u8; 8192], 12288).is_err()); // beyond capacity
        let mut b = vec![0u8; 4096];
        let before = d.inner.stats().read_ops;
        d.read_at(&mut b, 12288).unwrap();
        assert_eq!(d.inner.stats().read_ops, before + 1, "the page was dropped");
    }

    /// Up to 80 reads, writes and discards at any offsets and sizes (of a 64 KiB device), the
    /// same on `plain` and `d`: every read of `d` must return what `plain` returns.
    fn mixed_ops(rng: &mut SplitMix64, seed: u64, plain: &MemDevice, d: &dyn BlockDevice) {
        let cap = plain.capacity();
        for _ in 0..1 + rng.below(80) {
            let off = rng.below(60_000);
            let len = (1 + rng.below(9_000)).min(cap - off) as usize;
            let fill = rng.below(256) as u8;
            match rng.below(3) {
                0 => {
                    let bytes: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
                    plain.write_at(&bytes, off).unwrap();
                    d.write_at(&bytes, off).unwrap();
                }
                1 => {
                    let (mut a, mut b) = (vec![0u8; len], vec![1u8; len]);
                    plain.read_at(&mut a, off).unwrap();
                    d.read_at(&mut b, off).unwrap();
                    assert!(a == b, "seed {seed}: read of {len} at {off} differs");
                }
                _ => {
                    // MemDevice zeroes a discarded range; both see the same.
                    plain.discard(off, len as u64).unwrap();
                    d.discard(off, len as u64).unwrap();
                }
            }
        }
    }

    /// Write-back: writes stay in memory (no device write, flush ignored) until the dirty mark,
    /// then go in address order, consecutive pages as one request; reads see the newest bytes
    /// throughout; dropping the cache writes the rest back.
    #[test]
    fn write_back_holds_writes_until_the_mark_then_writes_them_sorted() {
        let plain = std::sync::Arc::new(Metered::new(MemDevice::new(1 << 20).unwrap()));
        let d = Cached::with_writeback(plain.clone(), 64 << 10, Some(4 * PAGE_BYTES));
        d.write_at(&[1u8; 4096], 40960).unwrap();
        d.write_at(&[2u8; 8192], 8192).unwrap();
        d.flush().unwrap();
        assert_eq!(plain.stats().write_ops, 0, "written before the mark");
        assert_eq!(d.dirty_pages(), 3);
        let mut b = vec![0u8; 4096];
        d.read_at(&mut b, 40960).unwrap();
        assert_eq!(b, vec![1u8; 4096]);
        // A write covering a page in part reads it first, then the fourth dirty page writes all.
        let reads = plain.stats().read_ops;
        d.write_at(&[3u8; 100], 16384 + 50).unwrap();
        assert_eq!(
            plain.stats().read_ops,
            reads + 1,
            "page 4 read before it was patched"
        );
        assert_eq!(d.dirty_pages(), 0);
        let s = plain.stats();
        assert_eq!(
            s.write_ops, 2,
            "pages 2–4 as one request, page 10 as another"
        );
        let mut got = vec![0u8; 4096];
        plain.read_at(&mut got, 8192).unwrap();
        assert_eq!(got, vec![2u8; 4096]);
        plain.read_at(&mut got, 16384).unwrap();
        assert_eq!(&got[..50], &[0u8; 50][..]);
        assert_eq!(&got[50..150], &[3u8; 100][..]);
        d.write_at(&[4u8; 4096], 0).unwrap();
        drop(d);
        plain.read_at(&mut got, 0).unwrap();
        assert_eq!(got, vec![4u8; 4096], "the drop wrote the rest back");
    }

    /// Write-back with a cache of few pages: dirty pages are never evicted, so every read returns
    /// what the device without the cache returns, and after the drop the device holds it (300
    /// seeds of writes, reads and discards at any offsets and sizes).
    #[test]
    fn write_back_reads_match_the_device_without_a_cache_and_lands_at_drop() {
        let cap = 65536u64;
        for seed in 0..300u64 {
            let mut rng = SplitMix64::new(seed);
            let plain = MemDevice::new(cap).unwrap();
            let under = std::sync::Arc::new(MemDevice::new(cap).unwrap());
            let pages = 2 + rng.below(8);
            let d = Cached::with_writeback(
                under.clone(),
                pages * PAGE_BYTES,
                Some((1 + rng.below(pages)) * PAGE_BYTES),
            );
            mixed_ops(&mut rng, seed, &plain, &d);
            drop(d);
            let (mut a, mut b) = (vec![0u8; cap as usize], vec![1u8; cap as usize]);
            plain.read_at(&mut a, 0).unwrap();
            under.read_at(&mut b, 0).unwrap();
            assert!(a == b, "seed {seed}: the device after the drop differs");
        }
    }

    /// Any mix of reads, writes and discards, at any offsets and sizes, with a cache smaller than
    /// the device: every read returns what the device without the cache returns (500 seeds).
    #[test]
    fn reads_match_the_device_without_a_cache() {
        let cap = 65536u64;
        for seed in 0..500u64 {
            let mut rng = SplitMix64::new(seed);
            let plain = MemDevice::new(cap).unwrap();
            let d = dev(cap, (1 + rng.below(8)) * PAGE_BYTES);
            mixed_ops(&mut rng, seed, &plain, &d);
        }
    }
}
