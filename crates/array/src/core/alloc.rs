//! The chunk-slot allocator (eplog) and the in-memory metadata it lives in.

use std::collections::BTreeSet;

use crate::format::Geometry;
use crate::meta::{MetaState, Rec};

/// Free chunk slots per main device (eplog), handed out in ascending order from a moving cursor so
/// out-of-place writes land sequentially in the spare area.
#[derive(Debug, Default)]
pub(crate) struct Alloc {
    free: Vec<BTreeSet<u64>>,
    cursor: Vec<u64>,
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
    pub fn put(&mut self, dev: usize, slot: u64) {
        if let Some(set) = self.free.get_mut(dev) {
            set.insert(slot);
        }
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
        }
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
