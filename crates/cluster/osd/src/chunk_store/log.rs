//! Logged changes of a chunk (FL, CodFS PL, PLR): records appended to a log region — the space
//! reserved after a PLR parity chunk in its own file, or the chunk's log file under FL and CodFS
//! PL — replayed into an index when the chunk is first touched, and merged into the chunk.
//!
//! A record (all integers little-endian; docs/cluster.md "Logged changes"):
//!
//! ```text
//! 0   magic "ECLR", kind (1 data, 2 parity delta), 0, e = number of extents (u16)
//! 8   log generation: the chunk header's; a record of another generation is not of this
//!     log (left from before a merge) and is ignored
//! 16  sequence number (1, 2, … in the log), payload bytes
//! 24  from (the data chunk a delta is of; a data record: its own index), 0
//! 32  prior version, new version (the DeltaStamp; a data record: the chunk's versions)
//! 48  crc32c of the payload, crc32c of bytes 0..52 and the extents
//! 56  e extents (offset, length: 8 bytes each), sorted and disjoint, inside the chunk
//! …   payload: the extents' bytes, concatenated (new data, or the parity delta)
//! ```
//!
//! Records start at multiples of [`RECORD_ALIGN`] (512 bytes, a sector): a 4 KiB delta takes
//! 4.5 KiB. A record is acknowledged after one fdatasync. Replay reads the region in order: a
//! record that does not decode, has the wrong sequence number or a bad payload ends the log if no
//! record of this log follows it (a torn tail: its append was never acknowledged), and makes the
//! chunk corrupt if one does (a bad middle: acknowledged changes would be lost). Records apply by
//! the ApplyDelta rule: a record whose stamp the state already includes is a no-op, one that does
//! not follow on the state is corruption, so each change counts exactly once.

use std::ops::Range;

use super::{u16_at, u32_at, u64_at};
use crate::api::DeltaStamp;

pub const RECORD_MAGIC: [u8; 4] = *b"ECLR";
/// Records start at multiples of this.
pub const RECORD_ALIGN: u64 = 512;
/// The fixed part of a record, before its extents.
pub const RECORD_FIXED: usize = 56;
/// At most this many extents in a record (an RDP diagonal delta has p − 1 ≤ 256 row spans).
pub const RECORD_EXTENTS_MAX: usize = 4096;

/// What a record changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// New bytes of a data chunk (FL): they replace the chunk's bytes over the extents.
    Data,
    /// A parity delta: XORed into the parity over the extents.
    Parity,
}

impl RecordKind {
    fn code(self) -> u8 {
        match self {
            RecordKind::Data => 1,
            RecordKind::Parity => 2,
        }
    }
}

/// A record's head (everything but the payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHead {
    pub kind: RecordKind,
    pub log_gen: u64,
    pub seq: u32,
    pub stamp: DeltaStamp,
    pub extents: Vec<Range<u64>>,
    pub payload_len: u32,
    pub payload_crc: u32,
}

impl RecordHead {
    /// Bytes of the head (fixed part and extents).
    pub fn head_len(&self) -> usize {
        RECORD_FIXED + 16 * self.extents.len()
    }

    /// Bytes the record takes in its log, padding included.
    pub fn span(&self) -> u64 {
        (self.head_len() as u64 + u64::from(self.payload_len)).next_multiple_of(RECORD_ALIGN)
    }
}

/// The record's bytes, padded with zeros to [`RECORD_ALIGN`]. `payload` is the extents' bytes.
pub fn encode_record(
    kind: RecordKind,
    log_gen: u64,
    seq: u32,
    stamp: DeltaStamp,
    extents: &[Range<u64>],
    payload: &[u8],
) -> Vec<u8> {
    debug_assert_eq!(
        extents.iter().map(|e| e.end - e.start).sum::<u64>(),
        payload.len() as u64,
        "a record's payload is its extents' bytes"
    );
    let head_len = RECORD_FIXED + 16 * extents.len();
    let span = (head_len + payload.len()).next_multiple_of(RECORD_ALIGN as usize);
    let mut b = vec![0u8; span];
    b[0..4].copy_from_slice(&RECORD_MAGIC);
    b[4] = kind.code();
    b[6..8].copy_from_slice(&(extents.len() as u16).to_le_bytes());
    b[8..16].copy_from_slice(&log_gen.to_le_bytes());
    b[16..20].copy_from_slice(&seq.to_le_bytes());
    b[20..24].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    b[24..28].copy_from_slice(&stamp.from.to_le_bytes());
    b[32..40].copy_from_slice(&stamp.prior.to_le_bytes());
    b[40..48].copy_from_slice(&stamp.version.to_le_bytes());
    b[48..52].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    for (i, e) in extents.iter().enumerate() {
        let at = RECORD_FIXED + 16 * i;
        b[at..at + 8].copy_from_slice(&e.start.to_le_bytes());
        b[at + 8..at + 16].copy_from_slice(&(e.end - e.start).to_le_bytes());
    }
    let crc = head_crc(&b[..head_len]);
    b[52..56].copy_from_slice(&crc.to_le_bytes());
    b[head_len..head_len + payload.len()].copy_from_slice(payload);
    b
}

fn head_crc(head: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&head[0..52]), &head[RECORD_FIXED..])
}

/// Decodes the head of a record at the start of `b` (a chunk's bytes are `chunk_bytes` long):
/// `None` if `b` does not start with a whole, valid head whose extents are sorted, disjoint, inside
/// the chunk and add up to its payload. Never panics, whatever the bytes.
pub fn decode_head(b: &[u8], chunk_bytes: u64) -> Option<RecordHead> {
    if b.len() < RECORD_FIXED || b[0..4] != RECORD_MAGIC || b[5] != 0 || u32_at(b, 28) != 0 {
        return None;
    }
    let kind = match b[4] {
        1 => RecordKind::Data,
        2 => RecordKind::Parity,
        _ => return None,
    };
    let e = u16_at(b, 6) as usize;
    if e > RECORD_EXTENTS_MAX {
        return None;
    }
    let head_len = RECORD_FIXED + 16 * e;
    let head = b.get(..head_len)?;
    if head_crc(head) != u32_at(b, 52) {
        return None;
    }
    let payload_len = u32_at(b, 20);
    let mut extents = Vec::with_capacity(e);
    let (mut end, mut sum) = (0u64, 0u64);
    for i in 0..e {
        let at = RECORD_FIXED + 16 * i;
        let (start, len) = (u64_at(b, at), u64_at(b, at + 8));
        let stop = start.checked_add(len)?;
        if start < end || stop > chunk_bytes {
            return None;
        }
        end = stop;
        sum += len;
        extents.push(start..stop);
    }
    if sum != u64::from(payload_len) {
        return None;
    }
    Some(RecordHead {
        kind,
        log_gen: u64_at(b, 8),
        seq: u32_at(b, 16),
        stamp: DeltaStamp {
            from: u32_at(b, 24),
            prior: u64_at(b, 32),
            version: u64_at(b, 40),
        },
        extents,
        payload_len,
        payload_crc: u32_at(b, 48),
    })
}

/// A record of a log, as the index keeps it: its head and where its payload is in the region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub head: RecordHead,
    /// Offset of the payload from the start of the region.
    pub payload_at: u64,
}

/// What a scan of a log region found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scan {
    /// The records of log `log_gen` in order, and where the next one goes.
    Records { records: Vec<Record>, end: u64 },
    /// A record in the middle of the log is unreadable while later ones are: one line saying
    /// which.
    Corrupt(String),
}

/// Replays the records of generation `log_gen` in `region` (the log region's bytes, from its start):
/// see the module doc for the rules on bad records.
pub fn scan(region: &[u8], log_gen: u64, chunk_bytes: u64) -> Scan {
    let mut records = Vec::new();
    let mut at = 0u64;
    loop {
        let seq = records.len() as u32 + 1;
        let ok = region.get(at as usize..).and_then(|b| {
            let head = decode_head(b, chunk_bytes)?;
            let from = head.head_len();
            let payload = b.get(from..from + head.payload_len as usize)?;
            (head.log_gen == log_gen
                && head.seq == seq
                && crc32c::crc32c(payload) == head.payload_crc)
                .then_some(head)
        });
        match ok {
            Some(head) => {
                let payload_at = at + head.head_len() as u64;
                let span = head.span();
                records.push(Record { head, payload_at });
                at += span;
            }
            None => {
                // The end, unless a later record of this log shows acknowledged changes past it.
                let mut probe = at + RECORD_ALIGN;
                while (probe as usize) < region.len() {
                    if let Some(h) = decode_head(&region[probe as usize..], chunk_bytes) {
                        if h.log_gen == log_gen && h.seq > seq {
                            return Scan::Corrupt(format!(
                                "logged change {seq} (at byte {at} of its log) is unreadable while change {} after it is not",
                                h.seq
                            ));
                        }
                    }
                    probe += RECORD_ALIGN;
                }
                return Scan::Records { records, end: at };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stamp(from: u32, prior: u64, version: u64) -> DeltaStamp {
        DeltaStamp {
            from,
            prior,
            version,
        }
    }

    fn log(n: u32, id: u64) -> (Vec<u8>, Vec<u64>) {
        let mut region = Vec::new();
        let mut starts = Vec::new();
        for seq in 1..=n {
            starts.push(region.len() as u64);
            let payload = vec![seq as u8; 100 + seq as usize];
            region.extend(encode_record(
                RecordKind::Parity,
                id,
                seq,
                stamp(0, u64::from(seq), u64::from(seq) + 1),
                &[10..10 + payload.len() as u64],
                &payload,
            ));
        }
        region.resize(region.len() + 4096, 0);
        (region, starts)
    }

    #[test]
    fn records_replay_in_order_and_a_torn_tail_ends_the_log() {
        let (mut region, starts) = log(3, 7);
        let Scan::Records { records, end } = scan(&region, 7, 1000) else {
            panic!("clean log")
        };
        assert_eq!(records.len(), 3);
        assert_eq!(end, starts[2] + RECORD_ALIGN);
        assert_eq!(records[1].head.stamp, stamp(0, 2, 3));
        // Another log's records are not this one's.
        assert!(
            matches!(scan(&region, 8, 1000), Scan::Records { records, .. } if records.is_empty())
        );
        // A torn last record: the log ends before it.
        region[starts[2] as usize + 70] ^= 1;
        assert!(
            matches!(scan(&region, 7, 1000), Scan::Records { records, .. } if records.len() == 2)
        );
    }

    #[test]
    fn a_bad_record_in_the_middle_is_corruption() {
        for byte in [0usize, 20, 53, 60, 70] {
            let (mut region, starts) = log(3, 7);
            region[starts[1] as usize + byte] ^= 0x40;
            assert!(
                matches!(scan(&region, 7, 1000), Scan::Corrupt(ref m) if m.contains("change 2")),
                "byte {byte}"
            );
        }
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused_and_heads_round_trip(
            b in proptest::collection::vec(any::<u8>(), 0..200),
            starts in proptest::collection::vec(0u64..50, 0..5),
            id in any::<u64>(),
        ) {
            let _ = decode_head(&b, 1 << 20);
            let _ = scan(&b, id, 1 << 20);
            let mut extents = Vec::new();
            let mut at = 0;
            for s in starts {
                extents.push(at + s..at + s + 3);
                at += s + 3;
            }
            let payload = vec![5u8; 3 * extents.len()];
            let r = encode_record(RecordKind::Data, id, 4, stamp(1, 2, 3), &extents, &payload);
            let head = decode_head(&r, 1 << 20).unwrap();
            prop_assert_eq!(&head.extents, &extents);
            prop_assert_eq!(head.span(), r.len() as u64);
            prop_assert_eq!(head.kind, RecordKind::Data);
        }
    }
}
