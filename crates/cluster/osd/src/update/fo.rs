//! FO, full overwrite (CodFS §2.1.1, §4.3.1): a data chunk's new bytes are written in place, and
//! each parity delta is XORed into the parity in place (`ChunkStore::modify_extents`, under the
//! dirty-flag cycle). Nothing is logged, so nothing fragments (Table 5.1: F_avg 0) and nothing needs
//! merging; every update reads and rewrites the parity's range (the cost FO pays in update
//! throughput, Fig. 5.2b).

use super::{DataChange, ParityDelta};
use crate::api::ChunkMeta;
use crate::chunk_store::{Change, ChunkStore, ChunkStoreError};

/// The new bytes in place; the bytes they replace and the header before.
pub(super) fn data(
    s: &dyn ChunkStore,
    c: &DataChange,
) -> Result<(Vec<u8>, ChunkMeta), ChunkStoreError> {
    let mut old = Vec::new();
    let before = s.modify(
        c.segment,
        c.index,
        c.offset,
        c.new.len() as u64,
        Change::Data {
            expected: c.expected,
            version: c.version,
        },
        &mut |b| {
            old = b.to_vec();
            b.copy_from_slice(&c.new);
            Ok(())
        },
    )?;
    Ok((old, before))
}

/// The delta XORed into the parity in place over its extents, as one change.
pub(super) fn delta(s: &dyn ChunkStore, d: &ParityDelta) -> Result<(), ChunkStoreError> {
    let starts = d.starts()?;
    s.modify_extents(
        d.segment,
        d.index,
        &d.extents,
        Change::Parity(d.stamp),
        &mut |i, b| {
            ecstack_codes::xor_into(b, &d.delta[starts[i]..starts[i] + b.len()])
                .map_err(|e| e.to_string())
        },
    )
    .map(|_| ())
}
