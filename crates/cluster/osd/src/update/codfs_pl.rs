//! CodFS PL, parity logging (CodFS §2.1.2, Fig. 4.1; not the local array's EPLOG `pl`): a data
//! chunk's new bytes go in place as under FO, and each parity delta is appended to the parity's log
//! (a log file beside the parity's file). Updates read nothing of the parity; the parity's deltas
//! scatter (Table 5.1: PL's parity chunks fragment as FL's), so rebuilding a parity merges them
//! (recovery slows, Fig. 5.2d). The GC merges logs in the background ([`super::gc_due`]).

use super::{fo, DataChange, ParityDelta};
use crate::api::ChunkMeta;
use crate::chunk_store::{Change, ChunkStore, ChunkStoreError, LogPlace};

/// In place, as FO.
pub(super) fn data(
    s: &dyn ChunkStore,
    c: &DataChange,
) -> Result<(Vec<u8>, ChunkMeta), ChunkStoreError> {
    fo::data(s, c)
}

/// The delta appended to the parity's log.
pub(super) fn delta(s: &dyn ChunkStore, d: &ParityDelta) -> Result<(), ChunkStoreError> {
    d.starts()?;
    s.append(
        d.segment,
        d.index,
        LogPlace::Log,
        &d.extents,
        &d.delta,
        Change::Parity(d.stamp),
    )
    .map(|_| ())
}
