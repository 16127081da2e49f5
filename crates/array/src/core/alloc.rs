//! The chunk-slot allocator (eplog) and the in-memory metadata it lives in.

use crate::extent_set::ExtentSet;
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
///
/// The free slots of a device are extents: the spare area starts as one extent, and every slot
/// taken or freed since splits or joins at most one, so memory and [`Alloc::build`] grow with the
/// chunks that were updated, not with the capacity.
#[derive(Debug, Default)]
pub(crate) struct Alloc {
    free: Vec<ExtentSet>,
    cursor: Vec<u64>,
    /// Chunk slots per device.
    slots: u64,
}

/// Whether the home slot of data chunk `pos` of stripe `s` is reserved: the chunk was never
/// written (its stripe unwritten, or written out of place only since) or is committed at home.
fn home_reserved(st: &MetaState, s: u64, pos: usize) -> bool {
    match st.data_chunk(s, pos) {
        None => true,
        Some((c, l)) => c == Some(s) || (c.is_none() && l.is_none()),
    }
}

impl Alloc {
    pub fn take(&mut self, dev: usize) -> Option<u64> {
        let set = self.free.get_mut(dev)?;
        let s = set
            .first_from(self.cursor[dev])
            .or_else(|| set.first_from(0))?;
        set.remove(s);
        self.cursor[dev] = s + 1;
        Some(s)
    }
    /// Take a specific free slot; false when it is not free.
    pub fn take_exact(&mut self, dev: usize, slot: u64) -> bool {
        self.free.get_mut(dev).is_some_and(|set| set.remove(slot))
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
        self.free.iter().map(|s| s.len()).min().unwrap_or(0)
    }
    /// Extents of free slots over all devices (what the allocator's memory grows with).
    #[cfg(test)]
    pub fn extents(&self) -> usize {
        self.free.iter().map(|s| s.extents()).sum()
    }

    /// Free slots implied by the metadata (eplog): everything no data stripe, log stripe or parity
    /// references, and not the reserved home slot of a chunk never written. Only stripes with an
    /// entry of their own can have a free home slot or reference a slot elsewhere, so this visits
    /// those and the log stripes, never every stripe.
    pub(crate) fn build(g: &Geometry, st: &MetaState) -> Alloc {
        // The spare area (beyond the last stripe's home slot) on every device.
        let mut free: Vec<ExtentSet> = (0..g.n)
            .map(|_| {
                let mut f = ExtentSet::default();
                if g.stripes < g.slots {
                    f.push_extent(g.stripes, g.slots);
                }
                f
            })
            .collect();
        // Home slots whose data chunk moved away (parity never moves).
        for (s, _) in st.changed() {
            for p in 0..g.k {
                if !home_reserved(st, s, p) {
                    free[g.dev_of(s, p)].insert(s);
                }
            }
        }
        // Then every slot a committed or latest version or a log-stripe member lives in (a chunk
        // committed at its own home slot is not in the set: only its stripe could have put it).
        for (s, ds) in st.changed() {
            for p in 0..g.k {
                let d = g.dev_of(s, p);
                if let Some(c) = ds.committed[p].filter(|&c| c != s) {
                    free[d].remove(c);
                }
                if let Some((l, _)) = ds.latest[p] {
                    free[d].remove(l);
                }
            }
        }
        for ls in st.logs.values() {
            for m in &ls.members {
                if let Some(f) = free.get_mut(m.dev as usize) {
                    f.remove(m.slot);
                }
            }
        }
        Alloc {
            free,
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
            if p >= g.k || home_reserved(st, slot, p) {
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
        let mut first = ExtentSet::default();
        first.push_extent(5, 7);
        Alloc {
            free: vec![first, ExtentSet::default()],
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

    /// `build` against a slot-by-slot scan of what the metadata references (`referenced`), over
    /// states built by random full-stripe writes, log stripes into free slots and parity commits.
    #[test]
    fn build_frees_exactly_the_unreferenced_slots() {
        use crate::meta::Member;
        let g = Geometry {
            n: 5,
            k: 3,
            m: 2,
            chunk: 4096,
            data_start: 4096,
            slots: 40,
            stripes: 28,
            log_slots: 1 << 20,
        };
        for seed in 1..=20u64 {
            let mut rng = ecstack_base::Rng::new(seed);
            let mut st = MetaState::new(&g);
            let mut next = 0u64;
            for step in 0..60 {
                match rng.below(10) {
                    0 => st.apply(&Rec::CommitDone),
                    1 => st.apply(&Rec::FullStripe {
                        stripe: rng.below(g.stripes),
                    }),
                    _ => {
                        // Up to k updates on distinct devices, each into a slot nothing references
                        // (a chunk never written goes to its home slot, as eplog's write path does).
                        let mut members: Vec<Member> = Vec::new();
                        for _ in 0..1 + rng.below(g.k as u64) {
                            let (s, p) = (rng.below(g.stripes), rng.below(g.k as u64) as usize);
                            let d = g.dev_of(s, p);
                            if members.iter().any(|m| m.dev as usize == d) {
                                continue;
                            }
                            let slot = match st.data_chunk(s, p) {
                                None | Some((None, None)) => s,
                                Some(_) => {
                                    let free: Vec<u64> = (0..g.slots)
                                        .filter(|&x| !Alloc::referenced(&g, &st, d, x))
                                        .collect();
                                    if free.is_empty() {
                                        continue;
                                    }
                                    free[rng.below(free.len() as u64) as usize]
                                }
                            };
                            members.push(Member {
                                dev: d as u16,
                                slot,
                                stripe: s,
                                pos: p as u16,
                            });
                        }
                        if !members.is_empty() {
                            st.apply(&Rec::LogStripe {
                                id: next,
                                off: next,
                                members,
                            });
                            next += 1;
                        }
                    }
                }
                let a = Alloc::build(&g, &st);
                for d in 0..g.n {
                    let want: Vec<u64> = (0..g.slots)
                        .filter(|&x| !Alloc::referenced(&g, &st, d, x))
                        .collect();
                    let got: Vec<u64> = a.free[d].iter().collect();
                    assert_eq!(got, want, "seed {seed} step {step} device {d}");
                }
            }
        }
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
