//! The extent allocator of a [`DeviceStore`](super::DeviceStore): the free runs of the data
//! region's blocks in a B-tree (start → length, in blocks), first fit. A run freed is merged with
//! its free neighbours, so the tree holds maximal runs.

use std::collections::BTreeMap;

/// A run of blocks: (first block, blocks), counted from the start of the data region.
pub type Extent = (u64, u64);

/// The free runs of the data region.
#[derive(Debug, Clone, Default)]
pub struct FreeSpace {
    runs: BTreeMap<u64, u64>,
    free_blocks: u64,
}

impl FreeSpace {
    /// Everything free except `used` (any order; must not overlap each other): what a table
    /// loaded from the device leaves. `blocks` is the data region's size.
    pub fn with_used(blocks: u64, used: &[Extent]) -> FreeSpace {
        let mut used: Vec<Extent> = used.iter().copied().filter(|e| e.1 > 0).collect();
        used.sort_unstable();
        let mut space = FreeSpace::default();
        let mut at = 0;
        for (start, len) in used {
            debug_assert!(start >= at, "used extents overlap");
            if start > at {
                space.free(at, start - at);
            }
            at = start + len;
        }
        if blocks > at {
            space.free(at, blocks - at);
        }
        space
    }

    pub fn free_blocks(&self) -> u64 {
        self.free_blocks
    }

    /// `blocks` blocks: from the run starting at `hint` first if there is one (a file growing
    /// stays contiguous), then the first run that holds the rest whole, else the first run in
    /// address order and again for what is left. `None` (nothing taken) if fewer blocks are free.
    pub fn alloc(&mut self, hint: Option<u64>, blocks: u64) -> Option<Vec<Extent>> {
        if blocks > self.free_blocks {
            return None;
        }
        let mut out: Vec<Extent> = Vec::new();
        let mut need = blocks;
        if let Some(h) = hint {
            if let Some(&len) = self.runs.get(&h) {
                let take = len.min(need);
                self.take(h, take);
                out.push((h, take));
                need -= take;
            }
        }
        while need > 0 {
            let fit = self
                .runs
                .iter()
                .find(|(_, &len)| len >= need)
                .or_else(|| self.runs.iter().next())
                .map(|(&s, &l)| (s, l));
            let Some((start, len)) = fit else {
                unreachable!("free_blocks counts the runs")
            };
            let take = len.min(need);
            self.take(start, take);
            push_extent(&mut out, (start, take));
            need -= take;
        }
        Some(out)
    }

    /// Takes the first `len` blocks of the free run at `start`.
    fn take(&mut self, start: u64, len: u64) {
        let run = self.runs.remove(&start).expect("a free run");
        assert!(len <= run, "taking more than the run holds");
        if run > len {
            self.runs.insert(start + len, run - len);
        }
        self.free_blocks -= len;
    }

    /// Gives a run back (it must not be free already).
    pub fn free(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (mut s, mut l) = (start, len);
        if let Some((&ps, &pl)) = self.runs.range(..start).next_back() {
            assert!(ps + pl <= start, "freeing a block that is free");
            if ps + pl == start {
                self.runs.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some((&ns, _)) = self.runs.range(start..).next() {
            assert!(ns >= start + len, "freeing a block that is free");
        }
        if let Some(nl) = self.runs.remove(&(start + len)) {
            l += nl;
        }
        self.runs.insert(s, l);
        self.free_blocks += len;
    }
}

/// Appends `e` to `extents`, merged with the last one when it follows it on the device.
pub fn push_extent(extents: &mut Vec<Extent>, e: Extent) {
    if e.1 == 0 {
        return;
    }
    match extents.last_mut() {
        Some(last) if last.0 + last.1 == e.0 => last.1 += e.1,
        _ => extents.push(e),
    }
}

/// Blocks the extents hold.
pub fn blocks_of(extents: &[Extent]) -> u64 {
    extents.iter().map(|e| e.1).sum()
}

/// Splits `extents` after their first `keep` blocks: (kept, cut off).
pub fn split_extents(extents: &[Extent], keep: u64) -> (Vec<Extent>, Vec<Extent>) {
    let (mut kept, mut cut) = (Vec::new(), Vec::new());
    let mut left = keep;
    for &(s, l) in extents {
        let k = l.min(left);
        if k > 0 {
            kept.push((s, k));
        }
        if l > k {
            cut.push((s + k, l - k));
        }
        left -= k;
    }
    (kept, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_hint_and_merge() {
        let mut f = FreeSpace::with_used(100, &[(10, 10), (50, 5)]);
        assert_eq!(f.free_blocks(), 85);
        // First fit: the first run that holds 10 whole is 0..10.
        assert_eq!(f.alloc(None, 10), Some(vec![(0, 10)]));
        // 20..50 holds 25.
        assert_eq!(f.alloc(None, 25), Some(vec![(20, 25)]));
        // The hint (a file ending at block 45) grows in place, then first fit for the rest.
        assert_eq!(f.alloc(Some(45), 7), Some(vec![(45, 5), (55, 2)]));
        assert_eq!(f.alloc(None, 1000), None);
        f.free(45, 5);
        f.free(0, 10);
        assert_eq!(f.alloc(None, 10), Some(vec![(0, 10)]));
        // Fragmented when no run holds it whole: the first run, then first fit for the rest.
        let mut g = FreeSpace::with_used(10, &[(2, 1), (5, 1)]);
        assert_eq!(g.alloc(None, 6), Some(vec![(0, 2), (6, 4)]));
        assert_eq!(g.free_blocks(), 2);
    }

    #[test]
    #[should_panic(expected = "freeing a block that is free")]
    fn double_free_is_caught() {
        let mut f = FreeSpace::with_used(10, &[(0, 5)]);
        f.free(4, 2);
    }

    #[test]
    fn split_keeps_a_prefix() {
        let e = [(0, 3), (10, 4)];
        assert_eq!(split_extents(&e, 5), (vec![(0, 3), (10, 2)], vec![(12, 2)]));
        assert_eq!(split_extents(&e, 0), (vec![], vec![(0, 3), (10, 4)]));
    }
}
