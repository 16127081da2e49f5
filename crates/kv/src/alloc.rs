//! Space allocation in chunks: free extents kept both by start (to coalesce neighbours) and by
//! length (best fit), above a high-water mark that only grows. Deleted and relocated records give
//! their chunks back here, so space is reused.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone)]
pub(crate) struct Alloc {
    /// First chunk records may use (chunk 0 is the superblock).
    first: u64,
    /// Chunks the device holds.
    end: u64,
    /// Chunks at and above this were never allocated.
    high: u64,
    by_start: BTreeMap<u64, u64>,
    by_len: BTreeSet<(u64, u64)>,
    free_chunks: u64,
}

impl Alloc {
    pub(crate) fn new(first: u64, end: u64) -> Alloc {
        Alloc {
            first,
            end,
            high: first,
            by_start: BTreeMap::new(),
            by_len: BTreeSet::new(),
            free_chunks: 0,
        }
    }

    /// Rebuild from the extents a scan found in use (any order, not overlapping).
    pub(crate) fn from_used(first: u64, end: u64, mut used: Vec<(u64, u64)>) -> Alloc {
        used.sort_unstable();
        let mut a = Alloc::new(first, end);
        let mut at = first;
        for (start, len) in used {
            assert!(start >= at, "scanned records overlap at chunk {start}");
            if start > at {
                a.insert_free(at, start - at);
            }
            at = start + len;
        }
        a.high = at;
        a
    }

    fn insert_free(&mut self, start: u64, len: u64) {
        self.by_start.insert(start, len);
        self.by_len.insert((len, start));
        self.free_chunks += len;
    }

    fn take_free(&mut self, start: u64, len: u64) {
        self.by_start.remove(&start);
        self.by_len.remove(&(len, start));
        self.free_chunks -= len;
    }

    /// Allocate `len` contiguous chunks: the smallest free extent that fits, else above the high-water
    /// mark; `None` when neither has room.
    pub(crate) fn alloc(&mut self, len: u64) -> Option<u64> {
        assert!(len > 0);
        if let Some(&(flen, start)) = self.by_len.range((len, 0)..).next() {
            self.take_free(start, flen);
            if flen > len {
                self.insert_free(start + len, flen - len);
            }
            return Some(start);
        }
        if self.end - self.high >= len {
            let start = self.high;
            self.high += len;
            return Some(start);
        }
        None
    }

    /// Give back `len` chunks at `start`, merging with free neighbours (and the high-water mark).
    pub(crate) fn free(&mut self, mut start: u64, mut len: u64) {
        assert!(
            start >= self.first && start + len <= self.high,
            "free of chunks never allocated"
        );
        if let Some((&ps, &pl)) = self.by_start.range(..start).next_back() {
            assert!(ps + pl <= start, "double free at chunk {start}");
            if ps + pl == start {
                self.take_free(ps, pl);
                start = ps;
                len += pl;
            }
        }
        if let Some((&ns, &nl)) = self.by_start.range(start..).next() {
            assert!(start + len <= ns, "double free at chunk {ns}");
            if start + len == ns {
                self.take_free(ns, nl);
                len += nl;
            }
        }
        if start + len == self.high {
            self.high = start;
        } else {
            self.insert_free(start, len);
        }
    }

    /// Chunks available (free extents plus the room above the high-water mark).
    pub(crate) fn available(&self) -> u64 {
        self.free_chunks + (self.end - self.high)
    }

    #[cfg(test)]
    pub(crate) fn high(&self) -> u64 {
        self.high
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_coalesce_and_high_water() {
        let mut a = Alloc::new(1, 11);
        let x = a.alloc(2).unwrap();
        let y = a.alloc(3).unwrap();
        let z = a.alloc(1).unwrap();
        assert_eq!((x, y, z), (1, 3, 6));
        a.free(x, 2);
        assert_eq!(a.alloc(1), Some(1), "a freed extent is reused first");
        a.free(1, 1);
        a.free(y, 3);
        assert_eq!(a.by_start.get(&1), Some(&5), "neighbours coalesce");
        a.free(z, 1);
        assert_eq!(a.high(), 1, "freeing the top lowers the high-water mark");
        assert_eq!(a.available(), 10);
        assert_eq!(a.alloc(10), Some(1));
        assert_eq!(a.alloc(1), None);
    }
}
