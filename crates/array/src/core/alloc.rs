//! The chunk-slot allocator (eplog) and the in-memory metadata it lives in.

use std::collections::BTreeSet;

use crate::format::Geometry;
use crate::meta::{MetaState, Rec};

/// Free chunk slots per main device (eplog), handed out in ascending order from a moving cursor so
/// out-of-place writes land sequentially in the spare area.
///
/// A chunk slot's lifecycle: a *home* slot (slot s of stripe s) is reserved for its stripe's chunk
/// while that chunk is never written or committed there; a free slot is *taken* for an out-of-place
/// *latest* version (`take`, referenced by no stripe or log stripe at that moment); a parity commit
/// makes latest versions *committed* and frees the old versions and log-stripe members no longer
/// latest, handing them back with `put` only once `CommitDone` is durable. md and pl use no slots:
/// their allocator is empty and `put` on it is a programmer error.
#[derive(Debug, Default)]
pub(crate) struct Alloc {
    free: Vec<BTreeSet<u64>>,
    cursor: Vec<u64>,
    /// Chunk slots per device.
    slots: u64,
}

impl Alloc {
    pub fn take(&mut self, dev: usize) -> Option<u64> {
        let set = self.free.get_mut(dev)?;
        let c = self.cursor[dev];
        let s = set
            .range(c..)
            .next()
            .or_else(|| set.iter().next())
            .copied()?;
        set.remove(&s);
        self.cursor[dev] = s + 1;
        Some(s)
    }
    /// Take a specific free slot; false when it is not free.
    pub fn take_exact(&mut self, dev: usize, slot: u64) -> bool {
        self.free.get_mut(dev).is_some_and(|set| set.remove(&slot))
    }
    /// Give a slot back. It must be a slot of a known device, and not free already (a slot freed
    /// twice would be handed out twice).
    pub fn put(&mut self, dev: usize, slot: u64) {
        assert!(
            dev < self.free.len(),
            "slot {slot} put back on device {dev}: the allocator has {} devices",
            self.free.len()
        );
        assert!(
            slot < self.slots,
            "slot {slot} of device {dev} out of range"
        );
        let fresh = self.free[dev].insert(slot);
        assert!(fresh, "slot {slot} of device {dev} freed while free");
    }
    pub fn min_free(&self) -> u64 {
        self.free.iter().map(|s| s.len() as u64).min().unwrap_or(0)
    }

    /// Free slots implied by the metadata (eplog): everything no data stripe, log stripe or parity
    /// references, and not the reserved home slot of a chunk never written.
    pub(crate) fn build(g: &Geometry, st: &MetaState) -> Alloc {
        let mut used: Vec<Vec<bool>> = vec![vec![false; g.slots as usize]; g.n];
        let mark = |used: &mut Vec<Vec<bool>>, d: usize, s: u64| {
            if let Some(b) = used.get_mut(d).and_then(|u| u.get_mut(s as usize)) {
                *b = true;
            }
        };
        for s in 0..g.stripes {
            for p in 0..g.n {
                // Parity, a chunk never written (its home slot stays reserved) or one committed
                // at home.
                let home = p >= g.k
                    || match st.data_chunk(s, p) {
                        None => true,
                        Some((c, l)) => c == Some(s) || (c.is_none() && l.is_none()),
                    };
                if home {
                    mark(&mut used, g.dev_of(s, p), s);
                }
            }
        }
        for (s, ds) in st.changed() {
            for p in 0..g.k {
                let d = g.dev_of(s, p);
                if let Some(c) = ds.committed[p] {
                    mark(&mut used, d, c);
                }
                if let Some((l, _)) = ds.latest[p] {
                    mark(&mut used, d, l);
                }
            }
        }
        for ls in st.logs.values() {
            for m in &ls.members {
                mark(&mut used, m.dev as usize, m.slot);
            }
        }
        Alloc {
            free: used
                .iter()
                .map(|u| (0..g.slots).filter(|&s| !u[s as usize]).collect())
                .collect(),
            cursor: vec![g.stripes; g.n],
            slots: g.slots,
        }
    }

    /// Whether the metadata references slot `slot` of main device `dev`: a home slot reserved or
    /// in use, parity, a committed or latest version, or a log-stripe member. For assertions: it
    /// scans every changed stripe and log stripe.
    pub(crate) fn referenced(g: &Geometry, st: &MetaState, dev: usize, slot: u64) -> bool {
        if slot < g.stripes {
            let p = g.pos_of(slot, dev);
            let home = p >= g.k
                || match st.data_chunk(slot, p) {
                    None => true,
                    Some((c, l)) => c == Some(slot) || (c.is_none() && l.is_none()),
                };
            if home {
                return true;
            }
        }
        let in_stripe = st.changed().any(|(s, ds)| {
            (0..g.k).any(|p| {
                g.dev_of(s, p) == dev
                    && (ds.committed[p] == Some(slot)
                        || ds.latest[p].is_some_and(|(l, _)| l == slot))
            })
        });
        in_stripe
            || st.logs.values().any(|ls| {
                ls.members
                    .iter()
                    .any(|m| m.dev as usize == dev && m.slot == slot)
            })
    }
}

/// Metadata in memory: the state, records not yet on the metadata volume, the slot allocator.
#[derive(Debug)]
pub(crate) struct MetaInner {
    pub state: MetaState,
    pub pending: Vec<Rec>,
    pub alloc: Alloc,
}

impl MetaInner {
    /// Apply a change and queue its record for the metadata volume.
    pub fn record(&mut self, r: Rec) {
        self.state.apply(&r);
        self.pending.push(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc() -> Alloc {
        Alloc {
            free: vec![BTreeSet::from([5, 6]), BTreeSet::new()],
            cursor: vec![5, 5],
            slots: 10,
        }
    }

    #[test]
    fn slots_are_taken_and_put_back_once() {
        let mut a = alloc();
        assert_eq!(a.take(0), Some(5));
        assert_eq!(a.take(1), None);
        a.put(0, 5);
        a.put(1, 9);
        assert_eq!(a.min_free(), 1);
        assert!(a.take_exact(1, 9) && !a.take_exact(1, 9));
    }

    #[test]
    #[should_panic(expected = "freed while free")]
    fn a_free_slot_is_not_freed_again() {
        alloc().put(0, 6);
    }

    #[test]
    #[should_panic(expected = "the allocator has 2 devices")]
    fn an_unknown_device_is_refused() {
        alloc().put(2, 1);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn a_slot_past_the_device_is_refused() {
        alloc().put(1, 10);
    }
}
