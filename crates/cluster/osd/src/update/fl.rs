//! FL, full logging (CodFS §2.1.2, Fig. 4.1): a data chunk's new bytes and every parity delta
//! are appended to the chunk's log (a log file beside the chunk file, growing with each record as
//! the file system allocates it), never written in place. Updates write sequentially and read
//! nothing of the parity, but the up-to-date chunk is scattered over the chunk and its records
//! (Table 5.1: FL's data and parity chunks fragment), so a read merges them (the store's merged
//! read) and sequential reads and recovery slow down (Fig. 5.2c, 5.2d). The OSD's GC (the Monitor
//! Module, `crate::daemon`) merges logs in the background ([`super::gc_due`]).

use super::{DataChange, ParityDelta};
use crate::api::ChunkMeta;
use crate::chunk_store::{Change, ChunkStore, ChunkStoreError, LogPlace};

/// The new bytes appended to the chunk's log; the bytes they replace (read merged) and the
/// header before.
pub(super) fn data(
    s: &dyn ChunkStore,
    c: &DataChange,
) -> Result<(Vec<u8>, ChunkMeta), ChunkStoreError> {
    let (_, old) = s.read(c.segment, c.index, c.offset, c.new.len() as u64)?;
    let end = c.offset + c.new.len() as u64;
    let before = s.append(
        c.segment,
        c.index,
        LogPlace::Log,
        &[c.offset..end],
        &c.new,
        Change::Data {
            expected: c.expected,
            version: c.version,
        },
    )?;
    Ok((old.to_vec(), before))
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
