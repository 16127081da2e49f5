//! PLR, parity logging with reserved space (CodFS §4.1, the seed's contribution): a data chunk's
//! new bytes go in place as under FO; each parity delta is appended to the space reserved right
//! after its parity chunk in the same file (allocated with it by `fallocate`), so a parity and its
//! deltas read back in one sequential read (Table 5.1: F_avg 0). A delta that does not fit the
//! free part of the reserve makes the OSD merge the reserve into the parity first (§4.1.2: "we
//! adopt the merge alternative since it preserves the property of no fragmentation"), then it goes
//! into the emptied reserve; a delta larger than the whole reserve (or a reserve of 0 bytes) is
//! applied in place after that merge, as FO. How large each reserve is, is Algorithm 1's job
//! ([`next_size`], run by the OSD's Monitor Module in `crate::daemon`).
//!
//! **Merge ahead** (`[update.reserve] merge_ahead`, off by default): a delta that leaves its
//! reserve at least that fraction full puts the parity on a [`MergeAhead`] queue, and the Monitor
//! Module merges it off the update path (`crate::monitor`), so that the update which would have
//! found the reserve full does not wait for the merge. The merge is the store's own
//! ([`ChunkStore::merge`], under the chunk's lock and the dirty-flag cycle), so nothing about
//! durability changes: a delta that arrives during it waits for the lock, then finds room.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::{fo, DataChange, ParityDelta};
use crate::api::ChunkMeta;
use crate::chunk_store::{Change, ChunkStore, ChunkStoreError, LogPlace, LogState};

pub use ecstack_base::reserve::{next_size, ReservePolicy};

/// In place, as FO.
pub(super) fn data(
    s: &dyn ChunkStore,
    c: &DataChange,
) -> Result<(Vec<u8>, ChunkMeta), ChunkStoreError> {
    fo::data(s, c)
}

/// The delta appended to the parity's reserve; a full reserve merged first; a delta larger than
/// the reserve, or one that another delta beat to the emptied reserve, applied in place.
pub(super) fn delta(s: &dyn ChunkStore, d: &ParityDelta) -> Result<(), ChunkStoreError> {
    delta_racing(s, d, &mut || Ok(()))
}

/// [`delta`], with `between` run after a merge and before the append that follows it: where
/// another delta to the same parity can come in (the test's way to make it come).
fn delta_racing(
    s: &dyn ChunkStore,
    d: &ParityDelta,
    between: &mut dyn FnMut() -> Result<(), ChunkStoreError>,
) -> Result<(), ChunkStoreError> {
    d.starts()?;
    let append = || {
        s.append(
            d.segment,
            d.index,
            LogPlace::Reserve,
            &d.extents,
            &d.delta,
            Change::Parity(d.stamp),
        )
        .map(|_| ())
    };
    match append() {
        Err(ChunkStoreError::ReserveFull { need, .. }) => {
            let reserve = s
                .log_state(d.segment, d.index)?
                .ok_or(ChunkStoreError::NotFound {
                    segment: d.segment,
                    index: d.index,
                })?
                .reserve_bytes;
            if need <= reserve {
                s.merge(d.segment, d.index)?;
                between()?;
                match append() {
                    // Another delta to this parity (each data holder sends its own, at once) took
                    // the emptied reserve between the merge and this append: in place, as FO.
                    Err(ChunkStoreError::ReserveFull { .. }) => fo::delta(s, d),
                    r => r,
                }
            } else {
                // In place merges the reserve first (`modify_extents`).
                fo::delta(s, d)
            }
        }
        r => r,
    }
}

/// Whether a reserve whose state is `log` is due for a merge ahead at `fraction` (0: never).
pub fn merge_ahead_due(log: &LogState, fraction: f64) -> bool {
    fraction > 0.0
        && log.reserve_bytes > 0
        && log.records > 0
        && log.bytes as f64 >= fraction * log.reserve_bytes as f64
}

/// The parity chunks waiting for a merge ahead (each once), and the fraction that puts them there.
#[derive(Debug, Default)]
pub struct MergeAhead {
    /// The fraction, as `f64` bits (0: off).
    fraction: AtomicU64,
    due: Mutex<BTreeSet<(u64, u32)>>,
    wake: tokio::sync::Notify,
}

impl MergeAhead {
    pub fn fraction(&self) -> f64 {
        f64::from_bits(self.fraction.load(Ordering::Relaxed))
    }

    /// Sets the fraction (`[update.reserve] merge_ahead`, checked by the config: in [0, 1]).
    pub fn set_fraction(&self, fraction: f64) {
        debug_assert!((0.0..=1.0).contains(&fraction), "merge_ahead {fraction}");
        self.fraction.store(fraction.to_bits(), Ordering::Relaxed);
    }

    /// After a delta to a PLR parity was stored (blocking: reads the chunk's log state): queues
    /// the parity if its reserve is now due. A chunk gone or corrupt is not queued (its read names
    /// the corruption).
    pub fn note(&self, s: &dyn ChunkStore, segment: u64, index: u32) {
        let fraction = self.fraction();
        if fraction <= 0.0 {
            return;
        }
        if let Ok(Some(log)) = s.log_state(segment, index) {
            if merge_ahead_due(&log, fraction) {
                let fresh = self
                    .due
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert((segment, index));
                if fresh {
                    self.wake.notify_one();
                }
            }
        }
    }

    /// The parities queued so far (the queue emptied), in key order.
    pub fn take(&self) -> Vec<(u64, u32)> {
        let mut due = self.due.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *due).into_iter().collect()
    }

    /// Until a parity is queued (at once if one was queued since the last wait).
    pub async fn wait(&self) {
        self.wake.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DeltaStamp;
    use crate::chunk_store::{FileStore, BLOCK_BYTES};
    use ecstack_rpc::UpdateScheme;

    /// Data chunk `from`'s delta (version 1 to 2) of `len` bytes at `at`, each byte `from + 1`.
    fn change(from: u32, at: u64, len: u64) -> ParityDelta {
        ParityDelta {
            segment: 7,
            index: 3,
            extents: vec![at..at + len],
            delta: vec![from as u8 + 1; len as usize],
            stamp: DeltaStamp {
                from,
                prior: 1,
                version: 2,
            },
        }
    }

    /// Three data chunks' deltas to one parity of a 2-block reserve: the first fills most of it,
    /// the second does not fit, and between its merge and its append the third takes the emptied
    /// reserve. The second then goes in place: every delta counts, once.
    #[test]
    fn a_delta_beaten_to_the_emptied_reserve_goes_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let chunk = 3 * BLOCK_BYTES as u64;
        let meta = ChunkMeta {
            segment_id: 7,
            index: 3,
            version: 1,
            chunk_bytes: chunk,
            segment_length: 3 * chunk,
            applied: vec![1, 1, 1],
            scheme: UpdateScheme::Plr,
            reserve_bytes: 2 * BLOCK_BYTES as u64,
        };
        store.put(&meta, &vec![0u8; chunk as usize]).unwrap();
        delta(&store, &change(0, 0, 5000)).unwrap();
        let mut raced = 0;
        delta_racing(&store, &change(1, 1000, 5000), &mut || {
            raced += 1;
            delta(&store, &change(2, 2000, 5000))
        })
        .unwrap();
        assert_eq!(raced, 1, "the second delta did not merge");
        let mut want = vec![0u8; chunk as usize];
        for (from, at) in [(0u8, 0usize), (1, 1000), (2, 2000)] {
            for b in &mut want[at..at + 5000] {
                *b ^= from + 1;
            }
        }
        let (m, got) = store.read(7, 3, 0, chunk).unwrap();
        assert_eq!(m.applied, vec![2, 2, 2]);
        assert!(got[..] == want[..], "a delta lost or doubled");
    }
}
