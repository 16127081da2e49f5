//! A set of integers (stripes, chunk slots) kept as disjoint, non-adjacent half-open extents: its
//! memory grows with the number of extents, not with the number of members. The written stripes of
//! the metadata and the free chunk slots of the allocator are both mostly a few long runs.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ExtentSet {
    /// start -> end (exclusive); no two extents overlap or touch.
    extents: BTreeMap<u64, u64>,
    count: u64,
}

impl ExtentSet {
    /// The extent holding `x`, if any.
    fn extent_of(&self, x: u64) -> Option<(u64, u64)> {
        self.extents
            .range(..=x)
            .next_back()
            .filter(|(_, &e)| x < e)
            .map(|(&b, &e)| (b, e))
    }
    pub fn contains(&self, x: u64) -> bool {
        self.extent_of(x).is_some()
    }
    /// Members of the set.
    pub fn len(&self) -> u64 {
        self.count
    }
    /// Extents in the set.
    pub fn extents(&self) -> usize {
        self.extents.len()
    }
    /// The extents as (start, end exclusive), ascending.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.extents.iter().map(|(&b, &e)| (b, e))
    }
    /// Add `x`; false if it was a member already.
    pub fn insert(&mut self, x: u64) -> bool {
        if self.contains(x) {
            return false;
        }
        self.count += 1;
        let mut start = x;
        let mut end = x + 1;
        // Merge with the extent ending at x and the one starting at x + 1.
        if let Some((&b, &e)) = self.extents.range(..x).next_back() {
            if e == x {
                start = b;
            }
        }
        if let Some(e) = self.extents.remove(&end) {
            end = e;
        }
        self.extents.insert(start, end);
        true
    }
    /// Add the extent `start..end`, which must not overlap or touch the set (for decoders and
    /// builders that produce extents in order).
    pub fn push_extent(&mut self, start: u64, end: u64) {
        debug_assert!(start < end, "empty extent {start}..{end}");
        debug_assert!(
            self.extents
                .range(..=end)
                .next_back()
                .is_none_or(|(_, &e)| e < start),
            "extent {start}..{end} overlaps or touches the set"
        );
        self.count += end - start;
        self.extents.insert(start, end);
    }
    /// Remove `x`; false if it was not a member.
    pub fn remove(&mut self, x: u64) -> bool {
        let Some((b, e)) = self.extent_of(x) else {
            return false;
        };
        self.count -= 1;
        self.extents.remove(&b);
        if b < x {
            self.extents.insert(b, x);
        }
        if x + 1 < e {
            self.extents.insert(x + 1, e);
        }
        true
    }
    /// The smallest member at or after `x`.
    pub fn first_from(&self, x: u64) -> Option<u64> {
        match self.extent_of(x) {
            Some(_) => Some(x),
            None => self.extents.range(x..).next().map(|(&b, _)| b),
        }
    }
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.extents.iter().flat_map(|(&b, &e)| b..e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_merge_and_split() {
        let mut w = ExtentSet::default();
        for s in [5, 7, 6, 9, 8, 100] {
            assert!(w.insert(s));
        }
        assert!(!w.insert(6));
        assert_eq!(w.extents(), 2);
        assert_eq!(w.len(), 6);
        assert!(w.remove(7));
        assert_eq!(w.iter().collect::<Vec<_>>(), vec![5, 6, 8, 9, 100]);
        assert_eq!(w.extents(), 3);
        assert!(!w.remove(42));
        w.insert(7);
        assert_eq!(w.extents(), 2);
        assert!(w.contains(9) && !w.contains(10) && !w.contains(4));
        assert_eq!(w.ranges().collect::<Vec<_>>(), vec![(5, 10), (100, 101)]);
    }

    #[test]
    fn first_from_finds_the_next_member() {
        let mut w = ExtentSet::default();
        w.push_extent(10, 20);
        w.push_extent(30, 31);
        assert_eq!(w.first_from(0), Some(10));
        assert_eq!(w.first_from(15), Some(15));
        assert_eq!(w.first_from(20), Some(30));
        assert_eq!(w.first_from(31), None);
        assert_eq!(w.len(), 11);
    }

    /// Against a plain set of members, over random inserts and removes.
    #[test]
    fn random_inserts_and_removes_match_a_plain_set() {
        let mut rng = ecstack_base::Rng::new(11);
        let mut w = ExtentSet::default();
        let mut plain = std::collections::BTreeSet::new();
        for _ in 0..20_000 {
            let x = rng.below(300);
            if rng.below(2) == 0 {
                assert_eq!(w.insert(x), plain.insert(x));
            } else {
                assert_eq!(w.remove(x), plain.remove(&x));
            }
            let from = rng.below(310);
            assert_eq!(w.first_from(from), plain.range(from..).next().copied());
        }
        assert_eq!(
            w.iter().collect::<Vec<_>>(),
            plain.iter().copied().collect::<Vec<_>>()
        );
        assert_eq!(w.len(), plain.len() as u64);
        let r: Vec<(u64, u64)> = w.ranges().collect();
        assert!(
            r.windows(2).all(|p| p[0].1 < p[1].0),
            "extents touch: {r:?}"
        );
    }
}
