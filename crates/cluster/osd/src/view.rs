//! Which chunks of a stripe agree: the primary's consistent view of a segment.
//!
//! A data chunk carries the version of the last change that touched it; a parity chunk carries, for
//! each data chunk i, the version of chunk i whose delta it includes (`applied`). A set of chunks
//! decodes to the right bytes only if they agree: every data chunk in it is at the version every
//! parity chunk in it includes. Updates cut short by a crash (a data holder that wrote its bytes but
//! not all its deltas, a primary that died between sub-updates) leave chunks that disagree, and a
//! chunk's own version says nothing about which ones; the applied versions do.
//!
//! The view is a vector of k versions. A primary that does not know it (after a restart, a promotion
//! or a refusal) asks every usable holder and takes the candidate vector most chunks agree with (each
//! parity's vector, and the data chunks' versions with the parity's newest entries where a data
//! chunk did not answer); ties go to the newer vector. Chunks that disagree are stale: never read,
//! rebuilt from the view. Only an unacknowledged change can be lost this way: an acknowledged one is
//! on every usable holder it touched, or its holder is marked stale at the MDS (not usable).

use crate::api::ChunkVersions;

/// How a chunk compares with the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Current,
    /// It disagrees with the view (missed a change, or holds one the view does not): rebuild it.
    Stale,
    /// It holds a version newer than any the primary has seen: the primary's view is out of date.
    Newer,
}

/// The view: per data chunk the version the stripe holds, and the newest version seen anywhere
/// (new versions are issued above it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct View {
    pub applied: Vec<u64>,
    pub newest: u64,
}

impl View {
    /// The view after a full write at `version`.
    pub fn written(k: usize, version: u64) -> View {
        View {
            applied: vec![version; k],
            newest: version,
        }
    }

    pub fn is_known(&self) -> bool {
        !self.applied.is_empty()
    }

    /// The version chunk `index` must carry: a data chunk's own; a parity chunk's is the newest
    /// of its applied versions.
    pub fn version_of(&self, index: usize) -> u64 {
        match self.applied.get(index) {
            Some(&v) => v,
            None => self.applied.iter().copied().max().unwrap_or(0),
        }
    }

    /// What a rebuilt chunk `index` (of a stripe with k = `self.applied.len()`) must carry.
    pub fn stamp_of(&self, index: usize) -> ChunkVersions {
        let k = self.applied.len();
        ChunkVersions {
            version: self.version_of(index).max(1),
            applied: if index < k {
                Vec::new()
            } else {
                self.applied.clone()
            },
        }
    }

    /// Compare chunk `index`'s reported versions with the view.
    pub fn verdict(&self, index: usize, got: &ChunkVersions) -> Verdict {
        let k = self.applied.len();
        if got.version > self.newest || got.applied.iter().any(|&a| a > self.newest) {
            return Verdict::Newer;
        }
        let agrees = if index < k {
            got.applied.is_empty() && got.version == self.applied[index]
        } else {
            got.applied == self.applied
        };
        if agrees {
            Verdict::Current
        } else {
            Verdict::Stale
        }
    }

    /// Choose the view from what the usable holders reported (`reports[i]` for chunk i; `None`:
    /// no answer or no chunk).
    pub fn choose(k: usize, reports: &[Option<ChunkVersions>]) -> View {
        let newest = reports
            .iter()
            .flatten()
            .flat_map(|r| std::iter::once(r.version).chain(r.applied.iter().copied()))
            .max()
            .unwrap_or(0);
        let parities: Vec<&Vec<u64>> = reports
            .iter()
            .skip(k)
            .flatten()
            .map(|r| &r.applied)
            .filter(|a| a.len() == k)
            .collect();
        let mut candidates: Vec<Vec<u64>> = Vec::new();
        let from_data: Vec<u64> = (0..k)
            .map(|i| match reports.get(i).and_then(|r| r.as_ref()) {
                Some(r) if r.applied.is_empty() => r.version,
                _ => parities.iter().map(|a| a[i]).max().unwrap_or(0),
            })
            .collect();
        candidates.push(from_data);
        for p in &parities {
            if !candidates.contains(p) {
                candidates.push((*p).clone());
            }
        }
        let score = |c: &Vec<u64>| {
            let view = View {
                applied: c.clone(),
                newest,
            };
            reports
                .iter()
                .enumerate()
                .filter(|(i, r)| {
                    r.as_ref()
                        .is_some_and(|r| view.verdict(*i, r) == Verdict::Current)
                })
                .count()
        };
        let best = candidates
            .into_iter()
            .max_by_key(|c| (score(c), c.iter().sum::<u64>(), c.clone()))
            .unwrap_or_default();
        View {
            applied: best,
            newest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(v: u64) -> Option<ChunkVersions> {
        Some(ChunkVersions {
            version: v,
            applied: Vec::new(),
        })
    }

    fn parity(a: &[u64]) -> Option<ChunkVersions> {
        Some(ChunkVersions {
            version: a.iter().copied().max().unwrap_or(1),
            applied: a.to_vec(),
        })
    }

    #[test]
    fn a_consistent_stripe_is_its_own_view() {
        let r = vec![data(3), data(5), parity(&[3, 5]), parity(&[3, 5])];
        let v = View::choose(2, &r);
        assert_eq!(v.applied, vec![3, 5]);
        assert_eq!(v.newest, 5);
        for (i, c) in r.iter().enumerate() {
            assert_eq!(v.verdict(i, c.as_ref().unwrap()), Verdict::Current);
        }
        assert_eq!(v.stamp_of(0).version, 3);
        assert_eq!(v.stamp_of(3).applied, vec![3, 5]);
    }

    #[test]
    fn a_parity_that_missed_a_delta_is_stale() {
        // Data chunk 1 went to 6; parity 2 got the delta, parity 3 did not.
        let r = vec![data(3), data(6), parity(&[3, 6]), parity(&[3, 5])];
        let v = View::choose(2, &r);
        assert_eq!(v.applied, vec![3, 6]);
        assert_eq!(
            v.verdict(3, r[3].as_ref().unwrap()),
            Verdict::Stale,
            "parity 3 lacks the delta"
        );
    }

    #[test]
    fn a_data_chunk_no_parity_heard_of_is_rolled_back() {
        // Data chunk 0 wrote version 7 and died before any delta (k = 3, m = 2): the parities and
        // the two other data chunks outvote it.
        let r = vec![
            data(7),
            data(4),
            data(4),
            parity(&[4, 4, 4]),
            parity(&[4, 4, 4]),
        ];
        let v = View::choose(3, &r);
        assert_eq!(v.applied, vec![4, 4, 4]);
        assert_eq!(v.verdict(0, r[0].as_ref().unwrap()), Verdict::Stale);
        assert_eq!(v.newest, 7, "version 7 is never issued again");
    }

    #[test]
    fn a_parity_with_a_later_delta_but_a_gap_is_stale() {
        // Parity 3 missed data chunk 0's change to 5 and then took data chunk 1's change to 6:
        // its own version (6) is the newest, yet it is wrong.
        let r = vec![data(5), data(6), parity(&[5, 6]), parity(&[4, 6])];
        let v = View::choose(2, &r);
        assert_eq!(v.applied, vec![5, 6]);
        assert_eq!(v.verdict(3, r[3].as_ref().unwrap()), Verdict::Stale);
    }

    #[test]
    fn missing_data_chunks_take_the_parities_versions() {
        let r = vec![None, data(2), parity(&[9, 2]), None];
        let v = View::choose(2, &r);
        assert_eq!(v.applied, vec![9, 2]);
        let unknown = View::choose(2, &[None, None, None, None]);
        assert_eq!(unknown.applied, vec![0, 0]);
    }

    #[test]
    fn newer_than_seen_is_newer() {
        let v = View::written(2, 4);
        assert_eq!(v.verdict(0, data(5).as_ref().unwrap()), Verdict::Newer);
        assert_eq!(
            v.verdict(2, parity(&[4, 5]).as_ref().unwrap()),
            Verdict::Newer
        );
        assert_eq!(v.verdict(1, data(3).as_ref().unwrap()), Verdict::Stale);
    }
}
