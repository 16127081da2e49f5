//! PLR, parity logging with reserved space (CodFS §4.1, the seed's contribution): a data chunk's
//! new bytes go in place as under FO; each parity delta is appended to the space reserved right
//! after its parity chunk in the same file (allocated with it by `fallocate`), so a parity and its
//! deltas read back in one sequential read (Table 5.1: F_avg 0). A delta that does not fit the
//! free part of the reserve makes the OSD merge the reserve into the parity first (§4.1.2: "we
//! adopt the merge alternative since it preserves the property of no fragmentation"), then it goes
//! into the emptied reserve; a delta larger than the whole reserve (or a reserve of 0 bytes) is
//! applied in place after that merge, as FO. How large each reserve is, is Algorithm 1's job
//! ([`next_size`], run by the OSD's Monitor Module in `crate::daemon`).

use super::{fo, DataChange, ParityDelta};
use crate::api::ChunkMeta;
use crate::chunk_store::{Change, ChunkStore, ChunkStoreError, LogPlace};

pub use ecstack_base::reserve::{next_size, ReservePolicy};

/// In place, as FO.
pub(super) fn data(
    s: &dyn ChunkStore,
    c: &DataChange,
) -> Result<(Vec<u8>, ChunkMeta), ChunkStoreError> {
    fo::data(s, c)
}

/// The delta appended to the parity's reserve; a full reserve merged first; a delta larger than
/// the reserve applied in place.
pub(super) fn delta(s: &dyn ChunkStore, d: &ParityDelta) -> Result<(), ChunkStoreError> {
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
                append()
            } else {
                // In place merges the reserve first (`modify_extents`).
                fo::delta(s, d)
            }
        }
        r => r,
    }
}
