//! The client's segment cache (CodFS §4.4.4): an LRU of whole segments of open files, so that
//! repeated reads of a segment cost one fetch and small writes to it are coalesced into the ranges
//! written, one update each (or one whole write, for a segment that is new or changes length)
//! when the file is closed, fsync'd, or the segment has to make room.
//!
//! Close-to-open (§4.4.1) is kept by its user (the mount): every cached segment carries the file
//! version its clean bytes are of; an open that finds another version at the MDS drops the clean
//! segments of the file ([`SegmentCache::drop_stale`]). Dirty bytes are this client's own writes,
//! not yet flushed: they are never dropped, only flushed.
//!
//! Write-behind: a segment the caller writes whole while its file is still open (a full new
//! segment of a file written sequentially) is handed out as [`Bytes`] sharing the cached buffer
//! ([`SegmentCache::start_write`]); it counts as clean from then on, but stays cached (not evicted,
//! not dropped as stale) until the caller reports the write's end ([`SegmentCache::end_write`]); a
//! failed write makes it dirty again, to be written whole by the next flush.
//!
//! Partial segments: a write inside a segment that is not cached, which leaves its length as it
//! is, needs none of its other bytes ([`SegmentCache::patch`]): the segment is cached *partial*,
//! only the ranges written known (its other bytes are the cluster's), and counts only those bytes
//! against the capacity. A flush updates each range, as for any segment of unchanged length; a
//! read or a change of length needs the rest first ([`SegmentCache::fill`]); once flushed it goes
//! (it holds nothing a read could use). So random small writes over a file larger than the cache
//! read nothing and hold only what they wrote.
//!
//! Pure bookkeeping (no I/O): the caller fetches and flushes; the cache says what to.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

/// A cached segment: (inode, segment index in its file).
pub type Key = (u64, u32);

/// One cached segment's bytes and state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Every byte of the segment as this client sees it (its length is the segment's length).
    /// Shared with the [`Bytes`] of writes under way ([`Segment::bytes`]): a change while one is
    /// copies it first.
    pub data: Arc<Vec<u8>>,
    /// The segment's length in the cluster: 0 when the cluster does not have it yet.
    pub stored_len: u64,
    /// The file version the clean bytes were read at (or last flushed as).
    pub version: u64,
    /// Bytes written since the last flush: the range from the first to the last (the bytes
    /// between two writes are the cached ones, so one update of the range is exact).
    pub dirty: Option<Range<u64>>,
    /// The ranges actually written inside `dirty`, ascending, disjoint and not touching: a flush
    /// updates each (random small writes cost their own bytes, not the span between them). At
    /// most [`DIRTY_RUNS_MAX`]: past that the two closest merge.
    pub runs: Vec<Range<u64>>,
    /// A whole write of it is under way ([`SegmentCache::start_write`]).
    writing: bool,
    /// Only the bytes in `runs` are known (this client's writes); the rest of `data` is zeros
    /// standing for bytes in the cluster, not read ([`SegmentCache::patch`]).
    partial: bool,
    last_used: u64,
}

/// Written ranges a segment tracks apart at most (see [`Segment::runs`]).
pub const DIRTY_RUNS_MAX: usize = 64;

/// Written ranges a partial segment tracks apart at most: its runs cannot merge (the bytes between
/// them are not known), so past this a write needs the segment filled first.
pub const PARTIAL_RUNS_MAX: usize = 16384;

impl Segment {
    /// It must be written whole: new to the cluster, or of another length there.
    pub fn needs_whole_write(&self) -> bool {
        self.stored_len != self.data.len() as u64
    }

    /// Every byte of it was written (or is new zeros) since the last flush: one run from 0 to
    /// its end.
    pub fn fully_dirty(&self) -> bool {
        matches!(self.runs.as_slice(), [r] if r.start == 0 && r.end == self.data.len() as u64)
    }

    /// A whole write of it is under way ([`SegmentCache::start_write`]).
    pub fn is_writing(&self) -> bool {
        self.writing
    }

    /// Its bytes, sharing the cached buffer (no copy); `range` of them with [`Bytes::slice`].
    pub fn bytes(&self) -> Bytes {
        Bytes::from_owner(SharedBuf(self.data.clone()))
    }

    /// Only its written ranges (`runs`) are known: a read needs it filled
    /// ([`SegmentCache::fill`]).
    pub fn is_partial(&self) -> bool {
        self.partial
    }

    /// What it costs against the cache's capacity: its length, or for a partial segment the bytes
    /// written.
    fn cost(&self) -> u64 {
        if self.partial {
            self.runs.iter().map(|r| r.end - r.start).sum()
        } else {
            self.data.len() as u64
        }
    }
}

/// A cached segment's buffer as the owner of a [`Bytes`].
struct SharedBuf(Arc<Vec<u8>>);

impl AsRef<[u8]> for SharedBuf {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Counters of the cache's use (the mount exports them as metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    /// Segments read in the background ahead of a sequential reader, and used
    /// ([`SegmentCache::insert_read_ahead`]).
    pub read_ahead: u64,
    /// Clean segments dropped to make room.
    pub evictions: u64,
    /// Clean segments dropped because the file changed elsewhere (close-to-open).
    pub invalidations: u64,
    /// Bytes cached, all segments.
    pub bytes: u64,
    /// Bytes of the segments holding unflushed writes (whole segments: what a flush may write),
    /// and of those being written.
    pub dirty_bytes: u64,
    pub segments: u64,
}

/// An LRU of segments of at most `capacity` bytes (dirty segments may hold it over until they are
/// flushed: their bytes exist nowhere else).
#[derive(Debug)]
pub struct SegmentCache {
    capacity: u64,
    tick: u64,
    map: HashMap<Key, Segment>,
    lru: BTreeMap<u64, Key>,
    stats: CacheStats,
}

impl SegmentCache {
    pub fn new(capacity_bytes: u64) -> SegmentCache {
        SegmentCache {
            capacity: capacity_bytes,
            tick: 0,
            map: HashMap::new(),
            lru: BTreeMap::new(),
            stats: CacheStats::default(),
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes cached, all segments.
    pub fn bytes(&self) -> u64 {
        self.stats.bytes
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            segments: self.map.len() as u64,
            dirty_bytes: self
                .map
                .values()
                .filter(|s| s.dirty.is_some() || s.writing)
                .map(Segment::cost)
                .sum(),
            ..self.stats
        }
    }

    fn touch(&mut self, key: Key) {
        self.tick += 1;
        if let Some(s) = self.map.get_mut(&key) {
            self.lru.remove(&s.last_used);
            s.last_used = self.tick;
            self.lru.insert(self.tick, key);
        }
    }

    /// The segment, counted as a hit or a miss, and made the most recently used.
    pub fn get(&mut self, key: Key) -> Option<&Segment> {
        if self.map.contains_key(&key) {
            self.stats.hits += 1;
            self.touch(key);
            self.map.get(&key)
        } else {
            self.stats.misses += 1;
            None
        }
    }

    /// The segment without counting or touching it.
    pub fn peek(&self, key: Key) -> Option<&Segment> {
        self.map.get(&key)
    }

    /// Caches clean bytes of a segment read at `version` (replacing what was cached).
    pub fn insert(&mut self, key: Key, data: Vec<u8>, version: u64) {
        self.remove(key);
        self.stats.bytes += data.len() as u64;
        self.tick += 1;
        self.map.insert(
            key,
            Segment {
                stored_len: data.len() as u64,
                data: Arc::new(data),
                version,
                dirty: None,
                runs: Vec::new(),
                writing: false,
                partial: false,
                last_used: self.tick,
            },
        );
        self.lru.insert(self.tick, key);
    }

    /// Caches clean bytes of a segment read ahead of a reader, at `version` (counted apart from
    /// misses: the reader finds it cached). Nothing when it is cached already.
    pub fn insert_read_ahead(&mut self, key: Key, data: Vec<u8>, version: u64) {
        if !self.map.contains_key(&key) {
            self.insert(key, data, version);
            self.stats.read_ahead += 1;
        }
    }

    /// Caches a segment the cluster does not have yet: `len` zero bytes, all dirty.
    pub fn insert_new(&mut self, key: Key, len: u64, version: u64) {
        self.insert_new_from(key, vec![0; len as usize], version);
    }

    /// Caches a segment the cluster does not have yet: `data`, all dirty.
    fn insert_new_from(&mut self, key: Key, data: Vec<u8>, version: u64) {
        let len = data.len() as u64;
        self.insert(key, data, version);
        let s = self.map.get_mut(&key).expect("just inserted");
        s.stored_len = 0;
        s.dirty = Some(0..len);
        s.runs = std::iter::once(0..len).collect();
    }

    pub fn remove(&mut self, key: Key) -> Option<Segment> {
        let s = self.map.remove(&key)?;
        self.lru.remove(&s.last_used);
        self.stats.bytes -= s.cost();
        Some(s)
    }

    fn mark(s: &mut Segment, r: Range<u64>) {
        if r.is_empty() {
            return;
        }
        s.dirty = Some(match s.dirty.take() {
            Some(d) => d.start.min(r.start)..d.end.max(r.end),
            None => r.clone(),
        });
        // Merge `r` with every run it overlaps or touches.
        let first = s.runs.partition_point(|x| x.end < r.start);
        let last = s.runs.partition_point(|x| x.start <= r.end);
        let merged = if first < last {
            s.runs[first].start.min(r.start)..s.runs[last - 1].end.max(r.end)
        } else {
            r
        };
        s.runs.splice(first..last, [merged]);
        if !s.partial {
            Self::merge_closest(s);
        }
    }

    /// Merges a whole segment's two closest runs (with the cached bytes between them) until it
    /// has at most [`DIRTY_RUNS_MAX`].
    fn merge_closest(s: &mut Segment) {
        while s.runs.len() > DIRTY_RUNS_MAX {
            let i = (1..s.runs.len())
                .min_by_key(|&i| s.runs[i].start - s.runs[i - 1].end)
                .expect("more than one run");
            let end = s.runs.remove(i).end;
            s.runs[i - 1].end = end;
        }
    }

    /// Writes `bytes` at `offset` into a cached segment (which must be long enough: see
    /// [`SegmentCache::set_len`]). `false` when the segment is not cached, or is partial and
    /// would need more than [`PARTIAL_RUNS_MAX`] runs (fill it first).
    pub fn write(&mut self, key: Key, offset: u64, bytes: &[u8]) -> bool {
        let Some(s) = self.map.get_mut(&key) else {
            return false;
        };
        let end = offset as usize + bytes.len();
        assert!(end <= s.data.len(), "a write past the cached segment's end");
        if s.partial && !Self::fits_partial(s, offset..end as u64) {
            return false;
        }
        let before = s.cost();
        Arc::make_mut(&mut s.data)[offset as usize..end].copy_from_slice(bytes);
        Self::mark(s, offset..end as u64);
        self.stats.bytes = self.stats.bytes - before + s.cost();
        self.touch(key);
        true
    }

    /// Whether a partial segment may take a write of `r` (its runs stay within
    /// [`PARTIAL_RUNS_MAX`]).
    fn fits_partial(s: &Segment, r: Range<u64>) -> bool {
        let first = s.runs.partition_point(|x| x.end < r.start);
        let last = s.runs.partition_point(|x| x.start <= r.end);
        first < last || s.runs.len() < PARTIAL_RUNS_MAX
    }

    /// Whether [`SegmentCache::patch`] of `len` bytes at `offset` would be done: the segment is
    /// not cached, or cached whole, or partial with room for the run.
    pub fn can_patch(&self, key: Key, offset: u64, len: u64) -> bool {
        match self.map.get(&key) {
            None => true,
            Some(s) if offset + len > s.data.len() as u64 => false,
            Some(s) => !s.partial || Self::fits_partial(s, offset..offset + len),
        }
    }

    /// Writes `bytes` at `offset` into segment `key`, `len` bytes long in the cluster (and in
    /// this client's view: the write leaves its length as it is), without its other bytes: a
    /// segment not cached becomes a partial one holding only what is written. False, and nothing
    /// done, when [`SegmentCache::can_patch`] is not.
    pub fn patch(&mut self, key: Key, offset: u64, bytes: &[u8], len: u64, version: u64) -> bool {
        if !self.can_patch(key, offset, bytes.len() as u64) {
            return false;
        }
        if !self.map.contains_key(&key) {
            assert!(
                offset + bytes.len() as u64 <= len,
                "a patch past the segment's end"
            );
            self.tick += 1;
            self.map.insert(
                key,
                Segment {
                    // Zeros from the allocator: pages the writes never touch cost nothing.
                    data: Arc::new(vec![0; len as usize]),
                    stored_len: len,
                    version,
                    dirty: None,
                    runs: Vec::new(),
                    writing: false,
                    partial: true,
                    last_used: self.tick,
                },
            );
            self.lru.insert(self.tick, key);
        }
        self.write(key, offset, bytes)
    }

    /// A partial segment's other bytes, read from the cluster (`data`, its whole length): it is
    /// whole from now on, its written ranges on top (still dirty). Nothing when it is not cached
    /// or not partial; false, and nothing done, when `data` is not the segment's length.
    pub fn fill(&mut self, key: Key, mut data: Vec<u8>) -> bool {
        let Some(s) = self.map.get_mut(&key) else {
            return true;
        };
        if !s.partial {
            return true;
        }
        if data.len() as u64 != s.stored_len {
            return false;
        }
        for r in &s.runs {
            let r = r.start as usize..r.end as usize;
            data[r.clone()].copy_from_slice(&s.data[r]);
        }
        let before = s.cost();
        s.data = Arc::new(data);
        s.partial = false;
        Self::merge_closest(s);
        self.stats.bytes = self.stats.bytes - before + s.cost();
        true
    }

    /// Writes `bytes` at `at`, the end of segment `key`, growing it (or makes a new segment of
    /// them, as [`SegmentCache::insert_new`] and a write, when `at` is 0 and it is not cached):
    /// [`SegmentCache::set_len`] and [`SegmentCache::write`] in one, with no zeros written first.
    /// When its buffer must grow and `room` is past the new end, the buffer is made `room` long
    /// at once (a segment written in order is then not copied as it grows). False, and nothing
    /// done, when `at` is not the segment's end.
    pub fn append(&mut self, key: Key, at: u64, bytes: &[u8], room: u64, version: u64) -> bool {
        let n = bytes.len() as u64;
        let Some(s) = self.map.get_mut(&key) else {
            if at != 0 {
                return false;
            }
            let mut data = Vec::with_capacity(room.max(n) as usize);
            data.extend_from_slice(bytes);
            self.insert_new_from(key, data, version);
            return true;
        };
        if s.partial || s.data.len() as u64 != at {
            return false;
        }
        let data = Arc::make_mut(&mut s.data);
        let end = at + n;
        if end > data.capacity() as u64 && room > end {
            data.reserve_exact((room - at) as usize);
        }
        data.extend_from_slice(bytes);
        self.stats.bytes += n;
        Self::mark(s, at..end);
        self.touch(key);
        true
    }

    /// Makes a cached segment `len` bytes long (zeros added, or bytes cut); a change is dirty.
    /// False when it is not cached, or partial (fill it first).
    pub fn set_len(&mut self, key: Key, len: u64) -> bool {
        let Some(s) = self.map.get_mut(&key) else {
            return false;
        };
        if s.partial {
            return false;
        }
        let old = s.data.len() as u64;
        if old == len {
            return true;
        }
        Arc::make_mut(&mut s.data).resize(len as usize, 0);
        self.stats.bytes = self.stats.bytes - old + len;
        if len > old {
            Self::mark(s, old..len);
        } else {
            // A cut: nothing new to write, but the segment is written whole at its new length.
            match &mut s.dirty {
                Some(d) => {
                    d.end = d.end.min(len);
                    d.start = d.start.min(d.end);
                }
                None => s.dirty = Some(len..len),
            }
            s.runs.retain_mut(|r| {
                r.end = r.end.min(len);
                r.start < r.end
            });
        }
        true
    }

    /// The indexes of `ino`'s dirty segments, ascending.
    pub fn dirty_of(&self, ino: u64) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .map
            .iter()
            .filter(|((i, _), s)| *i == ino && s.dirty.is_some())
            .map(|((_, idx), _)| *idx)
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether `ino` has dirty segments or segments being written.
    pub fn is_dirty(&self, ino: u64) -> bool {
        self.map
            .iter()
            .any(|((i, _), s)| *i == ino && (s.dirty.is_some() || s.writing))
    }

    /// Starts a whole write of a cached segment: its bytes (shared, not copied), and it is clean
    /// from now on (at its length in the cluster; writes after this one make it dirty again) but
    /// held in the cache until [`SegmentCache::end_write`]. None when it is not cached, partial, or
    /// already being written.
    pub fn start_write(&mut self, key: Key) -> Option<Bytes> {
        let s = self.map.get_mut(&key)?;
        if s.writing || s.partial {
            return None;
        }
        s.writing = true;
        s.dirty = None;
        s.runs.clear();
        s.stored_len = s.data.len() as u64;
        Some(s.bytes())
    }

    /// The write [`SegmentCache::start_write`] started ended: the segment may go again. A failed
    /// one leaves the segment dirty, all of it, to be written whole (the cluster may not have it).
    /// Nothing when the segment is no longer cached (a truncation dropped it).
    pub fn end_write(&mut self, key: Key, ok: bool) {
        let Some(s) = self.map.get_mut(&key) else {
            return;
        };
        s.writing = false;
        if !ok {
            s.stored_len = 0;
            let len = s.data.len() as u64;
            Self::mark(s, 0..len);
        }
    }

    /// A flushed segment: clean, at `version`, stored at its current length (and its buffer no
    /// longer than that: an [`SegmentCache::append`] may have made it longer). A partial one goes
    /// (a read could use none of it).
    pub fn mark_clean(&mut self, key: Key, version: u64) {
        if self.map.get(&key).is_some_and(|s| s.partial) {
            self.remove(key);
            return;
        }
        if let Some(s) = self.map.get_mut(&key) {
            if let Some(d) = Arc::get_mut(&mut s.data) {
                d.shrink_to_fit();
            }
            s.dirty = None;
            s.runs.clear();
            s.stored_len = s.data.len() as u64;
            s.version = version;
        }
    }

    /// Every clean segment of `ino` now counts as of `version` (this client's own commit moved
    /// the version on).
    pub fn retag(&mut self, ino: u64, version: u64) {
        for ((i, _), s) in self.map.iter_mut() {
            if *i == ino && s.dirty.is_none() {
                s.version = version;
            }
        }
    }

    /// Drops `ino`'s segments at index `from` and above, dirty or not (a truncated file).
    pub fn drop_from(&mut self, ino: u64, from: u32) {
        let keys: Vec<Key> = self
            .map
            .keys()
            .filter(|(i, idx)| *i == ino && *idx >= from)
            .copied()
            .collect();
        for k in keys {
            self.remove(k);
        }
    }

    /// Close-to-open: drops `ino`'s clean segments that are not of `version`.
    pub fn drop_stale(&mut self, ino: u64, version: u64) -> u64 {
        let keys: Vec<Key> = self
            .map
            .iter()
            .filter(|((i, _), s)| {
                *i == ino && s.dirty.is_none() && !s.writing && s.version != version
            })
            .map(|(k, _)| *k)
            .collect();
        for &k in &keys {
            self.remove(k);
        }
        self.stats.invalidations += keys.len() as u64;
        keys.len() as u64
    }

    /// Drops every segment of `ino` (the file is gone).
    pub fn drop_file(&mut self, ino: u64) {
        self.drop_from(ino, 0);
    }

    /// Makes room: drops clean segments, least recently used first, until the cache fits; returns
    /// the inodes whose dirty segments still hold it over (the caller flushes those files and
    /// calls again). Segments being written stay (their writes end on their own).
    pub fn evict(&mut self) -> Vec<u64> {
        let mut over = Vec::new();
        let order: Vec<Key> = self.lru.values().copied().collect();
        for key in order {
            if self.stats.bytes <= self.capacity {
                break;
            }
            let Some(s) = self.map.get(&key) else {
                continue;
            };
            if s.writing {
                continue;
            }
            if s.dirty.is_some() {
                if !over.contains(&key.0) {
                    over.push(key.0);
                }
            } else {
                self.remove(key);
                self.stats.evictions += 1;
            }
        }
        over
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runs against a byte map of what was written, over seeded random writes: every written
    /// byte is in a run, the runs are sorted, disjoint and apart, at most DIRTY_RUNS_MAX, and
    /// inside the hull.
    #[test]
    fn dirty_runs_cover_every_written_byte() {
        let mut rng = ecstack_base::Rng::new(11);
        for round in 0..50 {
            let len = 4096u64;
            let mut c = SegmentCache::new(1 << 20);
            c.insert((1, 0), vec![0; len as usize], 1);
            let mut written = vec![false; len as usize];
            for _ in 0..rng.below(200) + 1 {
                let at = rng.below(len);
                let n = (rng.below(64) + 1).min(len - at);
                c.write((1, 0), at, &vec![1; n as usize]);
                written[at as usize..(at + n) as usize].fill(true);
            }
            let s = c.peek((1, 0)).unwrap();
            let hull = s.dirty.clone().unwrap();
            assert!(s.runs.len() <= DIRTY_RUNS_MAX, "round {round}");
            for w in s.runs.windows(2) {
                assert!(w[0].end < w[1].start, "round {round}: {:?}", s.runs);
            }
            for (i, &w) in written.iter().enumerate() {
                let i = i as u64;
                if w {
                    assert!(
                        s.runs.iter().any(|r| r.contains(&i)),
                        "round {round}: byte {i}"
                    );
                }
            }
            assert_eq!(s.runs.first().unwrap().start, hull.start);
            assert_eq!(s.runs.last().unwrap().end, hull.end);
        }
    }

    #[test]
    fn reads_hit_writes_coalesce_and_lru_evicts_clean_segments_only() {
        let mut c = SegmentCache::new(100);
        assert!(c.get((1, 0)).is_none());
        c.insert((1, 0), vec![1; 40], 7);
        c.insert((1, 1), vec![2; 40], 7);
        assert_eq!(c.get((1, 0)).unwrap().data[0], 1);
        assert_eq!((c.stats().hits, c.stats().misses), (1, 1));
        // Two small writes become one dirty range covering both.
        assert!(c.write((1, 1), 3, b"ab"));
        assert!(c.write((1, 1), 10, b"c"));
        let s = c.peek((1, 1)).unwrap();
        assert_eq!(s.dirty, Some(3..11));
        assert_eq!(s.runs, vec![3..5, 10..11]);
        assert!(!s.needs_whole_write());
        assert_eq!(c.dirty_of(1), vec![1]);
        // Over capacity: the least recently used clean segment goes; (1, 0) was read after
        // (1, 1) was inserted, but (1, 1) is dirty and stays.
        c.insert((2, 0), vec![3; 40], 1);
        assert_eq!(c.evict(), Vec::<u64>::new());
        assert!(
            c.peek((1, 0)).is_none(),
            "the LRU clean segment was evicted"
        );
        assert!(c.peek((1, 1)).is_some() && c.peek((2, 0)).is_some());
        assert_eq!(c.stats().evictions, 1);
        // Only dirty bytes left over capacity: the caller must flush that file.
        c.insert((3, 0), vec![0; 30], 1);
        c.write((3, 0), 0, b"x");
        c.insert_new((3, 1), 30, 1);
        assert_eq!(c.stats().bytes, 140);
        assert_eq!(c.stats().dirty_bytes, 40 + 30 + 30);
        // (1, 1) is dirty and stays; (2, 0) goes, and then it fits.
        assert_eq!(c.evict(), vec![1]);
        assert_eq!(c.stats().evictions, 2);
        c.insert((4, 0), vec![0; 10], 1);
        assert_eq!(
            c.evict(),
            vec![1, 3],
            "dirty segments of files 1 and 3 hold it over"
        );
        assert!(c.peek((4, 0)).is_none());
        // Once flushed, a segment is clean and may go.
        c.mark_clean((1, 1), 8);
        assert_eq!(c.peek((1, 1)).unwrap().version, 8);
        c.insert((5, 0), vec![0; 10], 1);
        assert!(c.evict().is_empty());
        assert!(c.peek((1, 1)).is_none());
        assert_eq!(c.stats().bytes, 70);
    }

    /// A segment being written is handed out without a copy, is clean but stays cached (no
    /// eviction, no stale drop) until its write ends; a write meanwhile copies the buffer (the
    /// bytes handed out do not change) and makes it dirty by that range only; a failed write makes
    /// it dirty whole.
    #[test]
    fn segments_being_written_stay_until_their_write_ends() {
        let mut c = SegmentCache::new(10);
        c.insert_new((1, 0), 8, 1);
        c.write((1, 0), 0, b"abcdefgh");
        let s = c.peek((1, 0)).unwrap();
        assert!(s.fully_dirty() && s.needs_whole_write());
        let sent = c.start_write((1, 0)).unwrap();
        assert_eq!(&sent[..], b"abcdefgh");
        assert_eq!(
            sent.as_ptr(),
            c.peek((1, 0)).unwrap().data.as_ptr(),
            "shared, not copied"
        );
        assert!(c.start_write((1, 0)).is_none(), "one write at a time");
        let s = c.peek((1, 0)).unwrap();
        assert!(s.is_writing() && s.dirty.is_none() && !s.needs_whole_write());
        assert!(c.dirty_of(1).is_empty());
        assert!(c.is_dirty(1));
        assert_eq!(c.stats().dirty_bytes, 8);
        // Over capacity, and a new version elsewhere: it stays all the same.
        c.insert((2, 0), vec![0; 8], 1);
        assert!(c.evict().is_empty());
        assert!(c.peek((1, 0)).is_some() && c.peek((2, 0)).is_none());
        assert_eq!(c.drop_stale(1, 9), 0);
        // A write during the write: copied first.
        c.write((1, 0), 2, b"XY");
        assert_eq!(&sent[..], b"abcdefgh");
        let s = c.peek((1, 0)).unwrap();
        assert_eq!(&s.data[..], b"abXYefgh");
        assert_eq!(s.runs, vec![2..4]);
        assert!(!s.needs_whole_write());
        drop(sent);
        c.end_write((1, 0), true);
        assert!(!c.peek((1, 0)).unwrap().is_writing());
        // A failed write: dirty whole again, to be written whole.
        c.mark_clean((1, 0), 2);
        c.start_write((1, 0)).unwrap();
        c.end_write((1, 0), false);
        let s = c.peek((1, 0)).unwrap();
        assert!(s.fully_dirty() && s.needs_whole_write() && !s.is_writing());
        assert_eq!(c.dirty_of(1), vec![0]);
        // Clean and done: it may go.
        c.mark_clean((1, 0), 3);
        c.insert((2, 0), vec![0; 8], 1);
        assert!(c.evict().is_empty());
        assert!(c.peek((1, 0)).is_none());
        // The end of a write of a segment a truncation dropped: nothing.
        c.end_write((1, 0), false);
        assert!(c.peek((1, 0)).is_none());
    }

    /// Appends grow a segment as `set_len` and `write` would, reserving the room asked for once;
    /// an append not at the end does nothing.
    #[test]
    fn appends_grow_segments_in_place() {
        let mut c = SegmentCache::new(1 << 20);
        assert!(
            !c.append((1, 0), 4, b"late", 64, 1),
            "no segment to append to"
        );
        assert!(c.append((1, 0), 0, b"abcd", 64, 1));
        let s = c.peek((1, 0)).unwrap();
        assert_eq!(&s.data[..], b"abcd");
        assert!(s.data.capacity() >= 64 && s.fully_dirty() && s.needs_whole_write());
        let before = s.data.as_ptr();
        assert!(c.append((1, 0), 4, b"efgh", 64, 1));
        assert!(!c.append((1, 0), 3, b"x", 64, 1));
        let s = c.peek((1, 0)).unwrap();
        assert_eq!(&s.data[..], b"abcdefgh");
        assert_eq!(s.data.as_ptr(), before, "grown in place");
        assert_eq!(s.runs, vec![0..8]);
        assert_eq!(c.stats().bytes, 8);
        // On a clean segment: dirty from the old end only, and it is still stored whole there.
        c.insert((2, 0), b"0123".to_vec(), 3);
        assert!(c.append((2, 0), 4, b"45", 0, 3));
        let s = c.peek((2, 0)).unwrap();
        assert_eq!((s.dirty.clone(), s.runs.clone()), (Some(4..6), vec![4..6]));
        assert!(s.needs_whole_write());
        assert_eq!(c.stats().bytes, 14);
        // Flushed: the room it did not use is given back.
        c.mark_clean((1, 0), 2);
        assert_eq!(c.peek((1, 0)).unwrap().data.capacity(), 8);
    }

    #[test]
    fn lengths_change_whole_and_stale_versions_drop_at_open() {
        let mut c = SegmentCache::new(1 << 20);
        c.insert((1, 0), vec![9; 10], 3);
        assert!(c.set_len((1, 0), 16));
        let s = c.peek((1, 0)).unwrap();
        assert_eq!(&s.data[8..], &[9, 9, 0, 0, 0, 0, 0, 0]);
        assert!(s.needs_whole_write());
        assert_eq!(s.dirty, Some(10..16));
        c.insert((1, 1), vec![1; 10], 3);
        assert!(c.set_len((1, 1), 4));
        assert!(c.peek((1, 1)).unwrap().needs_whole_write());
        assert!(c.peek((1, 1)).unwrap().dirty.is_some());
        c.insert((1, 2), vec![1; 10], 3);
        c.insert_new((1, 3), 5, 3);
        assert_eq!(c.peek((1, 3)).unwrap().stored_len, 0);
        // Another version at the MDS: clean segments go, dirty ones stay.
        assert_eq!(c.drop_stale(1, 4), 1);
        assert!(c.peek((1, 2)).is_none());
        assert_eq!(c.dirty_of(1), vec![0, 1, 3]);
        c.drop_from(1, 1);
        assert_eq!(c.dirty_of(1), vec![0]);
        c.drop_file(1);
        assert_eq!(c.stats().bytes, 0);
        assert!(!c.is_dirty(1));
    }

    /// Partial segments against a model, over seeded random writes: a patch reads nothing and
    /// costs only the bytes written; a fill puts the cluster's bytes under the writes (the
    /// written bytes win) and merges runs down to DIRTY_RUNS_MAX; a partial segment does not
    /// grow, append, start a whole write or stay once flushed.
    #[test]
    fn partial_segments_hold_only_their_writes_until_filled() {
        let mut rng = ecstack_base::Rng::new(23);
        for round in 0..40 {
            let len = 1u64 << 16;
            let mut c = SegmentCache::new(1 << 30);
            let key = (7, 3);
            let mut model: Vec<Option<u8>> = vec![None; len as usize];
            for _ in 0..rng.below(300) + 1 {
                let at = rng.below(len);
                let n = (rng.below(512) + 1).min(len - at);
                let b = rng.below(255) as u8 + 1;
                assert!(
                    c.patch(key, at, &vec![b; n as usize], len, 5),
                    "round {round}"
                );
                model[at as usize..(at + n) as usize].fill(Some(b));
            }
            let written = model.iter().filter(|m| m.is_some()).count() as u64;
            let s = c.peek(key).unwrap();
            assert!(s.is_partial() && !s.needs_whole_write(), "round {round}");
            assert_eq!(
                c.bytes(),
                written,
                "round {round}: only written bytes count"
            );
            for r in &s.runs {
                for i in r.clone() {
                    assert_eq!(Some(s.data[i as usize]), model[i as usize], "round {round}");
                }
            }
            let covered: u64 = s.runs.iter().map(|r| r.end - r.start).sum();
            assert_eq!(
                covered, written,
                "round {round}: the runs are exactly the writes"
            );
            assert!(!c.set_len(key, len + 1) && !c.append(key, len, b"x", 0, 5));
            assert!(c.start_write(key).is_none());
            let cluster: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            assert!(!c.fill(key, vec![0; 3]), "another length");
            assert!(c.fill(key, cluster.clone()));
            let s = c.peek(key).unwrap();
            assert!(
                !s.is_partial() && s.runs.len() <= DIRTY_RUNS_MAX,
                "round {round}"
            );
            for (i, m) in model.iter().enumerate() {
                assert_eq!(
                    s.data[i],
                    m.unwrap_or(cluster[i]),
                    "round {round}: byte {i}"
                );
                if m.is_some() {
                    assert!(
                        s.runs.iter().any(|r| r.contains(&(i as u64))),
                        "round {round}"
                    );
                }
            }
            assert_eq!(c.bytes(), len, "round {round}: whole now");
        }
        // Flushed, a partial segment goes; one at its run limit takes no new run.
        let mut c = SegmentCache::new(1 << 30);
        assert!(c.patch((1, 0), 10, b"ab", 100, 1));
        c.mark_clean((1, 0), 2);
        assert!(c.peek((1, 0)).is_none() && c.bytes() == 0);
        let big = (PARTIAL_RUNS_MAX as u64) * 2 + 2;
        for i in 0..PARTIAL_RUNS_MAX as u64 {
            assert!(c.patch((2, 0), i * 2, b"x", big, 1));
        }
        assert!(!c.can_patch((2, 0), big - 1, 1) && !c.write((2, 0), big - 1, b"y"));
        assert!(
            c.patch((2, 0), 1, b"y", big, 1),
            "a write joining runs still fits"
        );
        assert_eq!(c.stats().dirty_bytes, PARTIAL_RUNS_MAX as u64 + 1);
    }
}
