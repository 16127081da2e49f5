//! The on-device layout of a [`DeviceStore`](super::DeviceStore) (docs/cluster.md "The OSD chunk
//! store on a block device"; all integers little-endian):
//!
//! ```text
//! 0            superblock (one 4 KiB block): magic "ECSOSDDV", format, block size, capacity,
//!              checkpoint slot bytes, journal bytes, crc32c
//! 4096         checkpoint slot 0, then slot 1 (S bytes each): the whole file table of an epoch
//! 4096 + 2S    journal (J bytes): the table's changes since the newest checkpoint, as records
//! 4096 + 2S + J  data region: 4 KiB blocks, allocated to files as extents
//! ```
//!
//! The table maps file names (the chunk store's `….chunk`, `….log`, `….chunk.tmp`) to inodes: a
//! length and the extents that hold it. A checkpoint (slot `epoch % 2`) is the whole table;
//! journal records of the same epoch follow it, numbered 1, 2, …; replay stops at the first record
//! that does not decode (a torn tail). A new checkpoint goes to the other slot, so a torn one leaves
//! the last (and its journal) whole.

use std::collections::{BTreeMap, HashMap};

use super::alloc::Extent;
use crate::chunk_store::{u16_at, u32_at, u64_at};

pub const SUPER_MAGIC: [u8; 8] = *b"ECSOSDDV";
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"ECSOSDCP";
pub const JOURNAL_MAGIC: [u8; 4] = *b"ECSJ";
/// The layout this build writes and reads.
pub const DEVICE_FORMAT: u32 = 1;
pub const BLOCK: u64 = 4096;
/// Journal batches start at multiples of this.
pub const SECTOR: u64 = 512;
const CHECKPOINT_HEAD: usize = 48;
const RECORD_HEAD: usize = 32;
/// A file name in the table is at most this long.
pub const NAME_MAX_BYTES: usize = 255;

/// Where the regions are, from the superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub capacity: u64,
    pub slot_bytes: u64,
    pub journal_bytes: u64,
}

impl Geometry {
    /// The layout for a new store on `capacity` bytes: slots and journal of capacity / 256 each,
    /// 256 KiB to 64 MiB (a 64-byte table entry per 16 KiB of device), unless `journal_bytes`
    /// says otherwise (tests make checkpoints frequent with a small journal).
    pub fn for_capacity(capacity: u64, journal_bytes: Option<u64>) -> Result<Geometry, String> {
        let table = (capacity / 256).clamp(256 << 10, 64 << 20) / BLOCK * BLOCK;
        let journal = journal_bytes
            .unwrap_or(table)
            .next_multiple_of(BLOCK)
            .max(BLOCK);
        let g = Geometry {
            capacity,
            slot_bytes: table,
            journal_bytes: journal,
        };
        g.check()?;
        Ok(g)
    }

    fn check(&self) -> Result<(), String> {
        let aligned = |v: u64| v > 0 && v.is_multiple_of(BLOCK);
        if !aligned(self.slot_bytes) || !aligned(self.journal_bytes) {
            return Err(format!(
                "table regions of {} and {} bytes are not whole 4 KiB blocks",
                self.slot_bytes, self.journal_bytes
            ));
        }
        let meta = BLOCK
            .checked_add(self.slot_bytes.saturating_mul(2))
            .and_then(|m| m.checked_add(self.journal_bytes));
        match meta {
            Some(m) if m + 16 * BLOCK <= self.capacity => Ok(()),
            _ => Err(format!(
                "{} bytes do not hold the table ({} bytes) and 16 blocks of data",
                self.capacity,
                BLOCK + 2 * self.slot_bytes + self.journal_bytes
            )),
        }
    }

    pub fn slot_at(&self, slot: u64) -> u64 {
        BLOCK + slot * self.slot_bytes
    }

    pub fn journal_at(&self) -> u64 {
        BLOCK + 2 * self.slot_bytes
    }

    pub fn data_at(&self) -> u64 {
        self.journal_at() + self.journal_bytes
    }

    /// Blocks of the data region.
    pub fn data_blocks(&self) -> u64 {
        (self.capacity - self.data_at()) / BLOCK
    }

    /// The region a device offset is in (power-cut reports).
    pub fn region(&self, offset: u64) -> &'static str {
        if offset < BLOCK {
            "superblock"
        } else if offset < self.journal_at() {
            "checkpoint"
        } else if offset < self.data_at() {
            "journal"
        } else {
            "data"
        }
    }

    /// The superblock's block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK as usize];
        b[0..8].copy_from_slice(&SUPER_MAGIC);
        b[8..12].copy_from_slice(&DEVICE_FORMAT.to_le_bytes());
        b[12..16].copy_from_slice(&(BLOCK as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.capacity.to_le_bytes());
        b[24..32].copy_from_slice(&self.slot_bytes.to_le_bytes());
        b[32..40].copy_from_slice(&self.journal_bytes.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..40]);
        b[40..44].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The superblock in `b` (at least 44 bytes): `Ok(None)` if `b` does not start with the magic
    /// (not a store), an error line if it is a store this build cannot use.
    pub fn decode(b: &[u8], device_capacity: u64) -> Result<Option<Geometry>, String> {
        if b.len() < 44 || b[0..8] != SUPER_MAGIC {
            return Ok(None);
        }
        let (stored, computed) = (u32_at(b, 40), crc32c::crc32c(&b[0..40]));
        if stored != computed {
            return Err(format!(
                "superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        let format = u32_at(b, 8);
        if format != DEVICE_FORMAT {
            return Err(format!(
                "unknown device store format {format} (this build reads {DEVICE_FORMAT})"
            ));
        }
        if u32_at(b, 12) as u64 != BLOCK {
            return Err(format!(
                "block size {} (this build uses {BLOCK})",
                u32_at(b, 12)
            ));
        }
        let g = Geometry {
            capacity: u64_at(b, 16),
            slot_bytes: u64_at(b, 24),
            journal_bytes: u64_at(b, 32),
        };
        g.check()?;
        if g.capacity > device_capacity {
            return Err(format!(
                "the store was made on {} bytes, the device has {device_capacity}",
                g.capacity
            ));
        }
        Ok(Some(g))
    }
}

/// A file's length and the extents that hold it (blocks of the data region, in file order; they
/// may hold more than the length: room allocated ahead, as for a PLR reserve).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inode {
    pub len: u64,
    pub extents: Vec<Extent>,
}

/// One change of the table, as the journal records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Inode `ino` is now `inode` (created, grown or cut).
    Set {
        ino: u64,
        inode: Inode,
    },
    /// `name` names `ino` (replacing what it named).
    Link {
        name: String,
        ino: u64,
    },
    /// `from` is renamed `to` (replacing what `to` named).
    Rename {
        from: String,
        to: String,
    },
    Unlink {
        name: String,
    },
}

/// The file table: names and inodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Files {
    pub names: BTreeMap<String, u64>,
    pub inodes: HashMap<u64, Inode>,
}

impl Files {
    /// Applies `op`; returns the inode it left without a name (if any), removed from the table.
    pub fn apply(&mut self, op: &Op) -> Option<(u64, Inode)> {
        let displaced = match op {
            Op::Set { ino, inode } => {
                self.inodes.insert(*ino, inode.clone());
                None
            }
            Op::Link { name, ino } => self.names.insert(name.clone(), *ino),
            Op::Rename { from, to } => match self.names.remove(from) {
                Some(ino) => self.names.insert(to.clone(), ino).filter(|&old| old != ino),
                None => None,
            },
            Op::Unlink { name } => self.names.remove(name),
        }?;
        if self.names.values().any(|&i| i == displaced) {
            return None;
        }
        self.inodes.remove(&displaced).map(|i| (displaced, i))
    }

    /// Drops inodes no name refers to (created, never linked before a cut).
    pub fn drop_unnamed(&mut self) {
        let named: std::collections::HashSet<u64> = self.names.values().copied().collect();
        self.inodes.retain(|ino, _| named.contains(ino));
    }

    /// Checks that every name has an inode and that no two extents overlap or leave the data
    /// region of `blocks` blocks.
    pub fn check(&self, blocks: u64) -> Result<(), String> {
        let mut all: Vec<(u64, u64, &str)> = Vec::new();
        for (name, ino) in &self.names {
            let Some(inode) = self.inodes.get(ino) else {
                return Err(format!("{name} names inode {ino}, which the table lacks"));
            };
            let held = super::alloc::blocks_of(&inode.extents);
            if inode.len > held * BLOCK {
                return Err(format!(
                    "{name} is {} bytes long but holds {held} blocks",
                    inode.len
                ));
            }
            for &(s, l) in &inode.extents {
                if s.checked_add(l).is_none_or(|e| e > blocks) {
                    return Err(format!(
                        "{name} has blocks {s}+{l} outside the {blocks} data blocks"
                    ));
                }
                all.push((s, l, name));
            }
        }
        all.sort_unstable();
        for w in all.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!("{} and {} share block {}", w[0].2, w[1].2, w[1].0));
            }
        }
        Ok(())
    }
}

/// Writes `name`: its length (u16) and bytes.
fn put_name(b: &mut Vec<u8>, name: &str) {
    b.extend_from_slice(&(name.len() as u16).to_le_bytes());
    b.extend_from_slice(name.as_bytes());
}

fn put_inode(b: &mut Vec<u8>, ino: u64, inode: &Inode) {
    b.extend_from_slice(&ino.to_le_bytes());
    b.extend_from_slice(&inode.len.to_le_bytes());
    b.extend_from_slice(&(inode.extents.len() as u32).to_le_bytes());
    for &(s, l) in &inode.extents {
        b.extend_from_slice(&s.to_le_bytes());
        b.extend_from_slice(&l.to_le_bytes());
    }
}

/// A bounds-checked reader over a record's or checkpoint's body: every read is `None` past the
/// end, so any bytes decode or are refused, never panic.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u16(&mut self) -> Option<u16> {
        self.bytes(2).map(|b| u16_at(b, 0))
    }
    fn u32(&mut self) -> Option<u32> {
        self.bytes(4).map(|b| u32_at(b, 0))
    }
    fn u64(&mut self) -> Option<u64> {
        self.bytes(8).map(|b| u64_at(b, 0))
    }
    fn name(&mut self) -> Option<String> {
        let n = self.u16()? as usize;
        if n == 0 || n > NAME_MAX_BYTES {
            return None;
        }
        String::from_utf8(self.bytes(n)?.to_vec()).ok()
    }
    fn inode(&mut self) -> Option<(u64, Inode)> {
        let ino = self.u64()?;
        let len = self.u64()?;
        let n = self.u32()? as usize;
        // Each extent takes 16 bytes: a count the body cannot hold is refused before allocating.
        if n > (self.b.len() - self.at) / 16 {
            return None;
        }
        let mut extents = Vec::with_capacity(n);
        for _ in 0..n {
            let (s, l) = (self.u64()?, self.u64()?);
            if l == 0 {
                return None;
            }
            extents.push((s, l));
        }
        Some((ino, Inode { len, extents }))
    }
}

/// A checkpoint: the header and the table of `epoch`, padded to whole blocks.
///
/// ```text
/// 0   magic "ECSOSDCP", format (u32), 0 (u32)
/// 16  epoch, entries, body bytes
/// 40  crc32c of the body, crc32c of bytes 0..44
/// 48  entries: name (u16 length, bytes), inode (ino, length, extent count u32, extents)
/// ```
pub fn encode_checkpoint(epoch: u64, files: &Files) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, ino) in &files.names {
        put_name(&mut body, name);
        put_inode(&mut body, *ino, &files.inodes[ino]);
    }
    let mut b = vec![0u8; CHECKPOINT_HEAD];
    b[0..8].copy_from_slice(&CHECKPOINT_MAGIC);
    b[8..12].copy_from_slice(&DEVICE_FORMAT.to_le_bytes());
    b[16..24].copy_from_slice(&epoch.to_le_bytes());
    b[24..32].copy_from_slice(&(files.names.len() as u64).to_le_bytes());
    b[32..40].copy_from_slice(&(body.len() as u64).to_le_bytes());
    b[40..44].copy_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    let crc = crc32c::crc32c(&b[0..44]);
    b[44..48].copy_from_slice(&crc.to_le_bytes());
    b.extend_from_slice(&body);
    b.resize((b.len() as u64).next_multiple_of(BLOCK) as usize, 0);
    b
}

/// Bytes of the checkpoint whose first 48 bytes are `head` (header and body), `None` if `head`
/// is not a valid checkpoint header.
pub fn checkpoint_len(head: &[u8]) -> Option<u64> {
    if head.len() < CHECKPOINT_HEAD
        || head[0..8] != CHECKPOINT_MAGIC
        || u32_at(head, 8) != DEVICE_FORMAT
        || u32_at(head, 44) != crc32c::crc32c(&head[0..44])
    {
        return None;
    }
    (CHECKPOINT_HEAD as u64).checked_add(u64_at(head, 32))
}

/// The epoch and table of a whole checkpoint, `None` if it does not decode (torn, or never
/// written).
pub fn decode_checkpoint(b: &[u8]) -> Option<(u64, Files)> {
    let len = checkpoint_len(b)?;
    let body = b.get(CHECKPOINT_HEAD..usize::try_from(len).ok()?)?;
    if crc32c::crc32c(body) != u32_at(b, 40) {
        return None;
    }
    let mut r = Reader { b: body, at: 0 };
    let mut files = Files::default();
    for _ in 0..u64_at(b, 24) {
        let name = r.name()?;
        let (ino, inode) = r.inode()?;
        if files.names.insert(name, ino).is_some() || files.inodes.insert(ino, inode).is_some() {
            return None;
        }
    }
    (r.at == body.len()).then_some((u64_at(b, 16), files))
}

/// A journal record (packed one after another; a batch of them padded to [`SECTOR`]):
///
/// ```text
/// 0   magic "ECSJ", op (1 set, 2 link, 3 rename, 4 unlink), 0, 0, 0
/// 8   epoch (the checkpoint's it follows), sequence number (1, 2, … in the epoch)
/// 24  body bytes (u32), crc32c of bytes 0..28 and the body
/// 32  body: set: inode; link: ino, name; rename: from, to; unlink: name
/// ```
pub fn encode_record(epoch: u64, seq: u64, op: &Op) -> Vec<u8> {
    let mut body = Vec::new();
    let code = match op {
        Op::Set { ino, inode } => {
            put_inode(&mut body, *ino, inode);
            1
        }
        Op::Link { name, ino } => {
            body.extend_from_slice(&ino.to_le_bytes());
            put_name(&mut body, name);
            2
        }
        Op::Rename { from, to } => {
            put_name(&mut body, from);
            put_name(&mut body, to);
            3
        }
        Op::Unlink { name } => {
            put_name(&mut body, name);
            4
        }
    };
    let mut b = vec![0u8; RECORD_HEAD];
    b[0..4].copy_from_slice(&JOURNAL_MAGIC);
    b[4] = code;
    b[8..16].copy_from_slice(&epoch.to_le_bytes());
    b[16..24].copy_from_slice(&seq.to_le_bytes());
    b[24..28].copy_from_slice(&(body.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&b[0..28]), &body);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    b.extend_from_slice(&body);
    b
}

/// The record at the start of `b` if it is record `seq` of `epoch`, with its length.
pub fn decode_record(b: &[u8], epoch: u64, seq: u64) -> Option<(Op, usize)> {
    let head = b.get(..RECORD_HEAD)?;
    if head[0..4] != JOURNAL_MAGIC
        || head[5..8] != [0, 0, 0]
        || u64_at(head, 8) != epoch
        || u64_at(head, 16) != seq
    {
        return None;
    }
    let n = u32_at(head, 24) as usize;
    let body = b.get(RECORD_HEAD..RECORD_HEAD.checked_add(n)?)?;
    if crc32c::crc32c_append(crc32c::crc32c(&head[0..28]), body) != u32_at(head, 28) {
        return None;
    }
    let mut r = Reader { b: body, at: 0 };
    let op = match head[4] {
        1 => {
            let (ino, inode) = r.inode()?;
            Op::Set { ino, inode }
        }
        2 => {
            let ino = r.u64()?;
            Op::Link {
                name: r.name()?,
                ino,
            }
        }
        3 => Op::Rename {
            from: r.name()?,
            to: r.name()?,
        },
        4 => Op::Unlink { name: r.name()? },
        _ => return None,
    };
    (r.at == body.len()).then_some((op, RECORD_HEAD + n))
}

/// Replays the journal region `b` of `epoch`: the records in order, up to the first that does not
/// decode (a batch that follows another starts at the next [`SECTOR`]).
pub fn scan_journal(b: &[u8], epoch: u64) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut at = 0usize;
    loop {
        let seq = ops.len() as u64 + 1;
        let found = b
            .get(at..)
            .and_then(|rest| decode_record(rest, epoch, seq))
            .map(|(op, n)| (op, at + n))
            .or_else(|| {
                let next = (at as u64).next_multiple_of(SECTOR) as usize;
                (next != at)
                    .then(|| {
                        decode_record(b.get(next..)?, epoch, seq).map(|(op, n)| (op, next + n))
                    })
                    .flatten()
            });
        match found {
            Some((op, end)) => {
                ops.push(op);
                at = end;
            }
            None => return ops,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn files() -> Files {
        let mut f = Files::default();
        f.apply(&Op::Set {
            ino: 1,
            inode: Inode {
                len: 5000,
                extents: vec![(0, 1), (7, 1)],
            },
        });
        f.apply(&Op::Link {
            name: "a.chunk".into(),
            ino: 1,
        });
        f
    }

    #[test]
    fn checkpoints_and_records_round_trip() {
        let f = files();
        let b = encode_checkpoint(9, &f);
        assert_eq!(decode_checkpoint(&b), Some((9, f.clone())));
        let mut torn = b.clone();
        torn[60] ^= 1;
        assert_eq!(decode_checkpoint(&torn), None);
        let ops = [
            Op::Rename {
                from: "a.chunk".into(),
                to: "b.chunk".into(),
            },
            Op::Unlink {
                name: "b.chunk".into(),
            },
        ];
        let mut j = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            j.extend(encode_record(9, i as u64 + 1, op));
        }
        j.resize(4096, 0);
        assert_eq!(scan_journal(&j, 9), ops.to_vec());
        assert!(scan_journal(&j, 8).is_empty(), "another epoch's records");
        // A torn second record ends the journal after the first.
        let first = encode_record(9, 1, &ops[0]).len();
        j[first + 40] ^= 1;
        assert_eq!(scan_journal(&j, 9), ops[..1].to_vec());
    }

    #[test]
    fn renames_and_unlinks_give_back_unnamed_inodes() {
        let mut f = files();
        f.apply(&Op::Set {
            ino: 2,
            inode: Inode::default(),
        });
        f.apply(&Op::Link {
            name: "a.tmp".into(),
            ino: 2,
        });
        let gone = f.apply(&Op::Rename {
            from: "a.tmp".into(),
            to: "a.chunk".into(),
        });
        assert_eq!(gone.map(|g| g.0), Some(1));
        assert_eq!(f.names.get("a.chunk"), Some(&2));
        assert!(f.check(100).is_ok());
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_checkpoint(&b);
            let _ = scan_journal(&b, 1);
            let _ = Geometry::decode(&b, 1 << 30);
        }
    }
}
