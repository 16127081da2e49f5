//! The journal (closes the write hole of a degraded array; layout in `docs/array-format.md`).
//!
//! An in-place update of a stripe while one of its devices is failed cannot be redone after a
//! crash from the stripe alone: a torn parity or data chunk makes the failed device's chunk decode
//! to bytes that were never written (md and pl), and an interrupted eplog parity commit cannot
//! decode a lost chunk through the parity it was overwriting. So before the first such in-place
//! write, the chunks recovery will need are saved as [`JournalEntry`] records in a frame of the
//! metadata volume and made durable (as Linux md's journal and partial parity log do):
//!
//! * md and pl (every in-place update of a written stripe with `journal_updates` on): every data
//!   chunk of the stripe as the update leaves it; recovery rewrites the
//!   stripe whole (data and parity), so it holds the update's new data whatever was torn;
//! * eplog parity commit: the committed version of every lost chunk the commit decoded through the
//!   stripe's parity; the rerun of the interrupted commit takes it from the journal.
//!
//! Lifecycle of an entry: *saved* (record queued, then durable with a metadata sync) → the
//! update's in-place writes → *done* (the writes returned) → *dropped*: the next metadata sync
//! flushes the devices, which makes those writes durable, and then appends `JournalDone{id}`.
//! A full checkpoint does not hold the journal: the live entries (saved and not dropped) are
//! appended again right after it. On open, [`MetaVolume::load`] returns the live entries; the
//! array replays them (md, pl) or hands them to the commit rerun (eplog), syncs, and drops them.

use std::collections::{BTreeMap, BTreeSet};

use crate::format::MetaLayout;
use crate::meta::{JournalEntry, Rec};

/// Most bytes of journal records one group of in-place updates saves, as a fraction of the
/// incremental area (`inc_area_min` keeps room for one stripe's record in it).
pub(crate) const GROUP_AREA_DIVISOR: u64 = crate::meta::JOURNAL_GROUP_DIVISOR;

/// The journal's in-memory side.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    pub(crate) next_id: u64,
    /// Entries saved and not yet dropped, by id: appended again after a full checkpoint.
    pub(crate) live: BTreeMap<u64, JournalEntry>,
    /// Entries whose in-place writes returned: dropped by the next metadata sync, after its flush.
    pub(crate) done: Vec<u64>,
    /// Chunks saved by the entries found on open, by (stripe, position); the newest entry wins.
    pub(crate) replay: BTreeMap<(u64, usize), Vec<u8>>,
    /// Ids of the entries found on open.
    pub(crate) replay_ids: Vec<u64>,
    /// Devices failed in the metadata loaded on open.
    pub(crate) failed_at_open: BTreeSet<u16>,
}

impl Journal {
    /// The journal of an array just opened: the live entries `load` found.
    pub(crate) fn recovered(found: BTreeMap<u64, JournalEntry>) -> Journal {
        let mut j = Journal {
            next_id: found.keys().next_back().map_or(0, |id| id + 1),
            ..Journal::default()
        };
        for (id, e) in found {
            for (pos, data) in &e.chunks {
                j.replay.insert((e.stripe, *pos as usize), data.clone());
            }
            j.replay_ids.push(id);
            // Live until recovery is durable: a checkpoint before then appends them again.
            j.live.insert(id, e);
        }
        j
    }

    /// Ids done since the last sync: the caller flushes the devices, then records their drop.
    pub(crate) fn take_done(&mut self) -> Vec<u64> {
        let done = std::mem::take(&mut self.done);
        for id in &done {
            let gone = self.live.remove(id);
            assert!(gone.is_some(), "journal entry {id} done twice");
        }
        done
    }

    /// The live entries as records, for appending after a full checkpoint.
    pub(crate) fn live_records(&self) -> Vec<Rec> {
        self.live.values().cloned().map(Rec::Journal).collect()
    }
}

/// Bytes of journal records one group may save.
pub(crate) fn group_bytes(layout: &MetaLayout) -> u64 {
    layout.inc_size / GROUP_AREA_DIVISOR
}
