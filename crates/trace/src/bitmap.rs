//! A sparse block map: per 4 KiB block of the working set, whether it was accessed, written,
//! updated, and how often it was accessed (for the reuse CDF).
//!
//! Blocks are grouped in runs of 64 (256 KiB of address space); one hash entry per touched run holds
//! three 64-bit bitmaps and 64 saturating 8-bit access counters (88 bytes), with the rare counts
//! beyond 254 kept exactly in an overflow map. Memory therefore grows with the working set at block
//! granularity (about 0.05% of the working set for dense access), never with trace length.

use crate::hash::FxHashMap;

pub(crate) const RUN: u64 = 64;

#[derive(Clone)]
pub(crate) struct Entry {
    pub accessed: u64,
    pub written: u64,
    pub updated: u64,
    pub counts: [u8; 64],
}

impl Default for Entry {
    fn default() -> Self {
        Entry {
            accessed: 0,
            written: 0,
            updated: 0,
            counts: [0; 64],
        }
    }
}

/// What one access did to the map.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Touch {
    /// Blocks accessed for the first time.
    pub new_blocks: u64,
    /// Blocks written for the first time.
    pub new_written: u64,
    /// Blocks that became "updated" (written while already accessed) for the first time.
    pub new_updated: u64,
    /// Whether any block was accessed before (the request re-accesses an address).
    pub any_prev: bool,
}

#[derive(Default)]
pub(crate) struct BlockMap {
    map: FxHashMap<(u64, u64), Entry>,
    overflow: FxHashMap<(u64, u64), u64>,
    count_accesses: bool,
}

const SAT: u8 = 255;

impl BlockMap {
    pub fn new(count_accesses: bool) -> Self {
        BlockMap {
            map: FxHashMap::default(),
            overflow: FxHashMap::default(),
            count_accesses,
        }
    }

    /// Access blocks `[b0, b1)` of address space `space`.
    #[inline]
    pub fn touch(&mut self, space: u64, b0: u64, b1: u64, write: bool) -> Touch {
        let mut t = Touch::default();
        if b1 <= b0 {
            return t;
        }
        let mut run = b0 / RUN;
        let last = (b1 - 1) / RUN;
        while run <= last {
            let lo = if run == b0 / RUN { b0 % RUN } else { 0 };
            let hi = if run == last { (b1 - 1) % RUN + 1 } else { RUN };
            let mask = if hi - lo == 64 {
                u64::MAX
            } else {
                ((1u64 << (hi - lo)) - 1) << lo
            };
            let e = self.map.entry((space, run)).or_default();
            let prev = e.accessed & mask;
            t.new_blocks += (mask & !e.accessed).count_ones() as u64;
            if prev != 0 {
                t.any_prev = true;
            }
            e.accessed |= mask;
            if write {
                t.new_written += (mask & !e.written).count_ones() as u64;
                e.written |= mask;
                t.new_updated += (prev & !e.updated).count_ones() as u64;
                e.updated |= prev;
            }
            if self.count_accesses {
                for i in lo..hi {
                    let c = &mut e.counts[i as usize];
                    if *c < SAT - 1 {
                        *c += 1;
                    } else if *c == SAT - 1 {
                        *c = SAT;
                        self.overflow.insert((space, run * RUN + i), SAT as u64);
                    } else {
                        *self.overflow.entry((space, run * RUN + i)).or_insert(0) += 1;
                    }
                }
            }
            run += 1;
        }
        t
    }

    /// Histogram of access counts over accessed blocks: `(count, number of blocks)`, unsorted.
    pub fn count_histogram(&self) -> Vec<(u64, u64)> {
        let mut h: FxHashMap<u64, u64> = FxHashMap::default();
        for (&(space, run), e) in &self.map {
            let mut bits = e.accessed;
            while bits != 0 {
                let i = bits.trailing_zeros() as u64;
                bits &= bits - 1;
                let c = e.counts[i as usize];
                let c = if c == SAT {
                    self.overflow
                        .get(&(space, run * RUN + i))
                        .copied()
                        .unwrap_or(SAT as u64)
                } else {
                    c as u64
                };
                *h.entry(c).or_insert(0) += 1;
            }
        }
        h.into_iter().collect()
    }

    /// Approximate heap bytes in use.
    pub fn heap_bytes(&self) -> u64 {
        let e = std::mem::size_of::<((u64, u64), Entry)>() as u64 + 1;
        self.map.capacity() as u64 * e + self.overflow.capacity() as u64 * 25
    }
}
