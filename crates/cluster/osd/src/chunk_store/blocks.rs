//! Coded blocks of robust objects (RobuSTore, docs/robustore.md "On the cluster"): one block file
//! per (object, OSD), its blocks in arrival order, so that "all my blocks" is one sequential read.
//!
//! A block file (all integers little-endian; docs/cluster.md "Robust blocks" has the tables):
//!
//! ```text
//! 0      file header (4 KiB): magic "ECSOSDCK", format 17 (16: no deletion records; chunk files
//!        are 2 and 3), block bytes B, object id, nonce (random per file), 0, crc32c of bytes 0..40
//! 4096   slot 0, then slot 1, ... each S = 4096 + B rounded up to 4 KiB bytes, one record each:
//!   a block record: head (4 KiB): magic "ECBK", pieces p = ⌈B / 4 KiB⌉, nonce, slot (the
//!        record's position), coded id, 0, object version, first slot of its batch, records in its
//!        batch, crc32c of the head (bytes 0..48 and the piece checksums), 0, p crc32c of the
//!        4 KiB pieces; data: B bytes, zeros to 4 KiB
//!   a deletion record (format 17): head (4 KiB): magic "ECBD", keys n, nonce, slot, pieces q of
//!        its data area holding the keys (0: they are in the head), 0, 0, first slot of its batch,
//!        records in its batch, crc32c of bytes 0..52 and 56..4096, then q crc32c of those pieces
//!        or (q = 0) the n keys (coded id u32, object version u64); data: n keys from its start
//!        when q > 0, zeros to q · 4 KiB; the rest of the slot is not written (a hole)
//! ```
//!
//! Format 17 (this build) added deletion records; format 16 files (block records only) are read
//! as they are and take appends as they are; before the first deletion record is appended to one,
//! its header is rewritten as format 17 and flushed, so that a reader of format 16 never meets a
//! record it does not know (`tests/fixtures/block-format-16` is a file of the build before).
//!
//! The block table is the chain of record heads, read once when the store opens and kept in
//! memory (a key and a slot per block). An append writes a batch of records after the last one
//! and flushes once: the batch is durable on return. A deletion of some blocks appends a batch of
//! deletion records (a head, and a few pieces when the keys do not fit it; one flush); deleting
//! every block removes the file. Replay (at open) applies the records in slot order: a block record
//! stores its key (a key stored again: the newer record wins), a deletion record removes its keys
//! (until a later block record stores one again). It checks every head, and every byte of the last
//! batch: a record of it that fails (an append cut short, never acknowledged; or rot) is dropped —
//! it replaces and deletes nothing, its head is zeroed, the file is cut after the last good record
//! — and the batch's good records stay; earlier batches were flushed, so a bad record among them is
//! bit rot: a block record's block is lost (its key too, if its head is bad), never served; a
//! deletion record that cannot be read (or a head whose kind cannot be told) may have deleted any
//! block stored before it, so those blocks count as lost (a warning names the record): a deleted
//! block is never served again. A record of another file (a nonce or a slot that does not match
//! its place) is not this file's.
//!
//! Dead slots (replaced and deleted blocks, deletion records, bad records) are given back by
//! **compaction**, off the write path ([`crate::chunk_store::ChunkStore::compact_blocks`], run by
//! the OSD's block I/O queue at low priority when dead slots are more than half a file's and at
//! least [`COMPACT_MIN_DEAD`]): the live records are copied into a new file (format 17) without
//! the object's lock, then, under it, the records appended meanwhile, and deletion records for
//! blocks deleted meanwhile; the new file is renamed over the old one. A reader that opened the
//! object before keeps reading the file it opened.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use ecstack_mds_proto::RobustBlockKey as BlockKey;

use super::{io, u32_at, u64_at, ChunkStoreError, FileStore, Result, MAGIC};
use crate::store_dir::{device_io, DirFile};

/// The format field of a block file's header as this build writes it (chunk files are formats 2
/// and 3; 16 is a block file without deletion records).
pub const BLOCK_FILE_FORMAT: u32 = 17;
/// The oldest block-file format this build reads.
pub const BLOCK_FILE_FORMAT_MIN: u32 = 16;
/// The first format with deletion records.
const FORMAT_DELETIONS: u32 = 17;
/// Bytes of a block file's header, and of each record's head.
pub const BLOCK_HEAD_BYTES: u64 = 4096;
/// The unit of a block's checksums, and of a cancellable read.
pub const BLOCK_PIECE_BYTES: usize = 4096;
const RECORD_MAGIC: [u8; 4] = *b"ECBK";
const DELETION_MAGIC: [u8; 4] = *b"ECBD";
/// The fixed part of a record head, before the piece checksums (or a deletion's keys).
const RECORD_FIXED: usize = 56;
/// Bytes of a key in a deletion record: coded id (4), object version (8).
const KEY_BYTES: usize = 12;
/// Keys a deletion record's head holds; a record of more keeps them in its data area.
pub const HEAD_KEYS: usize = (BLOCK_HEAD_BYTES as usize - RECORD_FIXED) / KEY_BYTES;
/// The largest block: its piece checksums fit one head.
pub const STORE_MAX_BLOCK_BYTES: u32 =
    ((BLOCK_HEAD_BYTES as usize - RECORD_FIXED) / 4 * BLOCK_PIECE_BYTES) as u32;
/// A compaction writes the new file in writes of about this many bytes.
const REWRITE_BYTES: usize = 16 << 20;
/// A block file is compacted when its dead slots are more than half of its slots and at least
/// this many ([`FileStore::compactable_objects`]).
pub const COMPACT_MIN_DEAD: u64 = 8;

const _: () = assert!(crate::api::MAX_BLOCK_BYTES <= STORE_MAX_BLOCK_BYTES);

/// The file name of an object's blocks.
pub fn blocks_name(object: u64) -> String {
    format!("{object:016x}.blocks")
}

pub(super) fn parse_blocks_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".blocks")?;
    (stem.len() == 16).then(|| u64::from_str_radix(stem, 16).ok())?
}

/// Bytes of one record of blocks of `block_bytes`: its head and its data padded to 4 KiB.
pub fn record_span(block_bytes: u32) -> u64 {
    BLOCK_HEAD_BYTES + (block_bytes as u64).next_multiple_of(BLOCK_PIECE_BYTES as u64)
}

/// Where record `slot` starts in a block file.
pub fn record_offset(block_bytes: u32, slot: u64) -> u64 {
    BLOCK_HEAD_BYTES + slot * record_span(block_bytes)
}

fn pieces(block_bytes: u32) -> usize {
    (block_bytes as usize).div_ceil(BLOCK_PIECE_BYTES)
}

/// The most keys one deletion record of a file of blocks of `block_bytes` lists: its head's, or
/// its data area's (the slot's).
pub fn deletion_capacity(block_bytes: u32) -> usize {
    HEAD_KEYS.max(pieces(block_bytes) * BLOCK_PIECE_BYTES / KEY_BYTES)
}

/// One stored block: its key and its record's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredBlock {
    pub key: BlockKey,
    pub slot: u64,
}

/// An object's blocks on this store ([`crate::chunk_store::ChunkStore::block_table`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockTable {
    pub object: u64,
    pub block_bytes: u32,
    /// Every block in stored order, each key once (where its newest record is).
    pub blocks: Vec<StoredBlock>,
    /// Blocks lost to bit rot found at the open: records whose head is damaged (keys unknown),
    /// and blocks a deletion record that cannot be read may have deleted.
    pub lost: u64,
    /// Slots in the file: its records, live or dead (replaced or deleted blocks, deletion
    /// records, bad records).
    pub slots: u64,
}

impl BlockTable {
    /// Slots that hold no live block.
    pub fn dead_slots(&self) -> u64 {
        self.slots - self.blocks.len() as u64
    }

    /// Whether compaction would give back enough: dead slots more than half of the slots and at
    /// least [`COMPACT_MIN_DEAD`].
    pub fn wants_compaction(&self) -> bool {
        let dead = self.dead_slots();
        dead >= COMPACT_MIN_DEAD && 2 * dead > self.slots
    }
}

/// What a compaction did ([`crate::chunk_store::ChunkStore::compact_blocks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    pub slots_before: u64,
    pub slots_after: u64,
    /// Live blocks in the new file.
    pub blocks: u64,
}

/// What the store keeps of an object's block file.
#[derive(Debug, Clone)]
pub(super) struct ObjectState {
    pub table: BlockTable,
    pub nonce: u64,
    /// The file's format (16 or 17).
    pub format: u32,
}

impl ObjectState {
    fn file_len(&self) -> u64 {
        record_offset(self.table.block_bytes, self.table.slots)
    }
}

/// A fresh nonce for a new block file (distinct per file and per process).
fn new_nonce(object: u64) -> u64 {
    static FILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = nanos
        ^ object.rotate_left(17)
        ^ (u64::from(std::process::id()) << 40)
        ^ FILES.fetch_add(1, Ordering::Relaxed).rotate_left(29);
    // splitmix64's finalizer: nearby inputs give unrelated nonces.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)).max(1)
}

fn encode_file_header(format: u32, object: u64, block_bytes: u32, nonce: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_HEAD_BYTES as usize];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..12].copy_from_slice(&format.to_le_bytes());
    b[12..16].copy_from_slice(&block_bytes.to_le_bytes());
    b[16..24].copy_from_slice(&object.to_le_bytes());
    b[24..32].copy_from_slice(&nonce.to_le_bytes());
    let crc = crc32c::crc32c(&b[0..40]);
    b[40..44].copy_from_slice(&crc.to_le_bytes());
    b
}

/// A block file's header as decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileHeader {
    format: u32,
    block_bytes: u32,
    nonce: u64,
}

/// A block file's header, or why it is refused.
fn decode_file_header(b: &[u8], object: u64) -> std::result::Result<FileHeader, String> {
    if b.len() < 44 || b[0..8] != MAGIC {
        return Err("no block file magic".into());
    }
    if crc32c::crc32c(&b[0..40]) != u32_at(b, 40) {
        return Err("header checksum mismatch".into());
    }
    let format = u32_at(b, 8);
    if !(BLOCK_FILE_FORMAT_MIN..=BLOCK_FILE_FORMAT).contains(&format) {
        return Err(format!(
            "format {format}, this build reads block files of formats \
             {BLOCK_FILE_FORMAT_MIN}..={BLOCK_FILE_FORMAT}"
        ));
    }
    let block_bytes = u32_at(b, 12);
    if block_bytes == 0 || block_bytes > STORE_MAX_BLOCK_BYTES {
        return Err(format!("block size {block_bytes}"));
    }
    let got = u64_at(b, 16);
    if got != object {
        return Err(format!("holds object {got:#x}"));
    }
    Ok(FileHeader {
        format,
        block_bytes,
        nonce: u64_at(b, 24),
    })
}

/// What a record holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A block (its data follows the head).
    Block(BlockKey),
    /// A deletion of `n` keys: `keys` holds them once known (from the head, or from the data
    /// area once read and checked).
    Deletion { n: u32, keys: Vec<BlockKey> },
}

/// A record head as decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Head {
    kind: Kind,
    slot: u64,
    batch_first: u64,
    batch_len: u32,
    /// The crc32c of each 4 KiB piece of the data: a block's p pieces, or the q pieces of a
    /// deletion's keys (none when they are in the head).
    crcs: Vec<u32>,
}

/// Why a slot holds no good record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// Zeros: a record an open dropped (an append cut short, never acknowledged), or a slot cut
    /// short at the end of the file.
    Zero,
    /// A block record (its magic says so) that fails its checks: its block is lost.
    Block,
    /// A deletion record that fails its checks, or a head whose kind cannot be told (format
    /// 17): it may have deleted any block stored before it.
    Deletion,
}

/// A slot as replay sees it.
type Slot = std::result::Result<Head, Damage>;

fn block_head_crc(b: &[u8], p: usize) -> u32 {
    crc32c::crc32c_append(
        crc32c::crc32c(&b[0..48]),
        &b[RECORD_FIXED..RECORD_FIXED + 4 * p],
    )
}

fn deletion_head_crc(b: &[u8]) -> u32 {
    crc32c::crc32c_append(
        crc32c::crc32c(&b[0..52]),
        &b[RECORD_FIXED..BLOCK_HEAD_BYTES as usize],
    )
}

/// The fields every record head shares: nonce, slot, batch.
fn put_common(b: &mut [u8], nonce: u64, slot: u64, (batch_first, batch_len): (u64, u32)) {
    b[8..16].copy_from_slice(&nonce.to_le_bytes());
    b[16..24].copy_from_slice(&slot.to_le_bytes());
    b[40..48].copy_from_slice(&batch_first.to_le_bytes());
    b[48..52].copy_from_slice(&batch_len.to_le_bytes());
}

/// A record's bytes: its head and `data` padded to 4 KiB.
fn encode_record(
    block_bytes: u32,
    nonce: u64,
    slot: u64,
    batch: (u64, u32),
    key: BlockKey,
    data: &[u8],
) -> Vec<u8> {
    let p = pieces(block_bytes);
    let mut b = vec![0u8; record_span(block_bytes) as usize];
    b[0..4].copy_from_slice(&RECORD_MAGIC);
    b[4..8].copy_from_slice(&(p as u32).to_le_bytes());
    put_common(&mut b, nonce, slot, batch);
    b[24..28].copy_from_slice(&key.id.to_le_bytes());
    b[32..40].copy_from_slice(&key.version.to_le_bytes());
    for (i, piece) in data.chunks(BLOCK_PIECE_BYTES).enumerate() {
        let at = RECORD_FIXED + 4 * i;
        b[at..at + 4].copy_from_slice(&crc32c::crc32c(piece).to_le_bytes());
    }
    let crc = block_head_crc(&b, p);
    b[52..56].copy_from_slice(&crc.to_le_bytes());
    let d = BLOCK_HEAD_BYTES as usize;
    b[d..d + data.len()].copy_from_slice(data);
    b
}

/// A block record moved to slot `slot` of a file of nonce `nonce`, its own batch.
fn restamp_record(record: &mut [u8], block_bytes: u32, nonce: u64, slot: u64) {
    put_common(record, nonce, slot, (slot, 1));
    let crc = block_head_crc(record, pieces(block_bytes));
    record[52..56].copy_from_slice(&crc.to_le_bytes());
}

/// The bytes a deletion record of `keys` writes at its slot: its head, and the pieces of its data
/// area that hold the keys when the head cannot (the rest of the slot is not written).
fn encode_deletion(
    block_bytes: u32,
    nonce: u64,
    slot: u64,
    batch: (u64, u32),
    keys: &[BlockKey],
) -> Vec<u8> {
    debug_assert!(!keys.is_empty() && keys.len() <= deletion_capacity(block_bytes));
    let mut list = Vec::with_capacity(keys.len() * KEY_BYTES);
    for k in keys {
        list.extend_from_slice(&k.id.to_le_bytes());
        list.extend_from_slice(&k.version.to_le_bytes());
    }
    let q = if keys.len() <= HEAD_KEYS {
        0
    } else {
        list.len().div_ceil(BLOCK_PIECE_BYTES)
    };
    let h = BLOCK_HEAD_BYTES as usize;
    let mut b = vec![0u8; h + q * BLOCK_PIECE_BYTES];
    b[0..4].copy_from_slice(&DELETION_MAGIC);
    b[4..8].copy_from_slice(&(keys.len() as u32).to_le_bytes());
    put_common(&mut b, nonce, slot, batch);
    b[24..28].copy_from_slice(&(q as u32).to_le_bytes());
    if q == 0 {
        b[RECORD_FIXED..RECORD_FIXED + list.len()].copy_from_slice(&list);
    } else {
        b[h..h + list.len()].copy_from_slice(&list);
        for i in 0..q {
            let piece = &b[h + i * BLOCK_PIECE_BYTES..h + (i + 1) * BLOCK_PIECE_BYTES];
            let crc = crc32c::crc32c(piece);
            let at = RECORD_FIXED + 4 * i;
            b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }
    let crc = deletion_head_crc(&b);
    b[52..56].copy_from_slice(&crc.to_le_bytes());
    b
}

fn parse_keys(list: &[u8], n: usize) -> Vec<BlockKey> {
    list.chunks_exact(KEY_BYTES)
        .take(n)
        .map(|k| BlockKey {
            id: u32_at(k, 0),
            version: u64_at(k, 4),
        })
        .collect()
}

fn batch_ok(slot: u64, batch_first: u64, batch_len: u32) -> bool {
    batch_first <= slot && batch_len > 0 && slot - batch_first < u64::from(batch_len)
}

/// The head at the start of `b` (4 KiB) if it is a valid head of record `slot` of this file,
/// else what kind of damage it is.
fn decode_head(b: &[u8], block_bytes: u32, nonce: u64, slot: u64, format: u32) -> Slot {
    debug_assert!(b.len() >= BLOCK_HEAD_BYTES as usize);
    if b[0..4] == RECORD_MAGIC {
        return decode_block_head(b, block_bytes, nonce, slot).ok_or(Damage::Block);
    }
    if b.iter().all(|&x| x == 0) {
        return Err(Damage::Zero);
    }
    if format < FORMAT_DELETIONS {
        // No record of a format-16 file deletes: any bad head there is a lost block's.
        return Err(Damage::Block);
    }
    if b[0..4] == DELETION_MAGIC {
        return decode_deletion_head(b, block_bytes, nonce, slot).ok_or(Damage::Deletion);
    }
    Err(Damage::Deletion)
}

fn decode_block_head(b: &[u8], block_bytes: u32, nonce: u64, slot: u64) -> Option<Head> {
    let p = pieces(block_bytes);
    if b.len() < RECORD_FIXED + 4 * p
        || b[0..4] != RECORD_MAGIC
        || u32_at(b, 4) as usize != p
        || u64_at(b, 8) != nonce
        || u64_at(b, 16) != slot
        || u32_at(b, 28) != 0
        || block_head_crc(b, p) != u32_at(b, 52)
    {
        return None;
    }
    let (batch_first, batch_len) = (u64_at(b, 40), u32_at(b, 48));
    if !batch_ok(slot, batch_first, batch_len) {
        return None;
    }
    Some(Head {
        kind: Kind::Block(BlockKey {
            id: u32_at(b, 24),
            version: u64_at(b, 32),
        }),
        slot,
        batch_first,
        batch_len,
        crcs: (0..p).map(|i| u32_at(b, RECORD_FIXED + 4 * i)).collect(),
    })
}

fn decode_deletion_head(b: &[u8], block_bytes: u32, nonce: u64, slot: u64) -> Option<Head> {
    if b.len() < BLOCK_HEAD_BYTES as usize
        || b[0..4] != DELETION_MAGIC
        || u64_at(b, 8) != nonce
        || u64_at(b, 16) != slot
        || u32_at(b, 28) != 0
        || u64_at(b, 32) != 0
        || deletion_head_crc(b) != u32_at(b, 52)
    {
        return None;
    }
    let n = u32_at(b, 4) as usize;
    let q = u32_at(b, 24) as usize;
    let (batch_first, batch_len) = (u64_at(b, 40), u32_at(b, 48));
    let keys_fit = if q == 0 {
        (1..=HEAD_KEYS).contains(&n)
    } else {
        n > HEAD_KEYS
            && q == (n * KEY_BYTES).div_ceil(BLOCK_PIECE_BYTES)
            && q <= pieces(block_bytes)
    };
    if !keys_fit || !batch_ok(slot, batch_first, batch_len) {
        return None;
    }
    let keys = if q == 0 {
        parse_keys(&b[RECORD_FIXED..RECORD_FIXED + n * KEY_BYTES], n)
    } else {
        Vec::new()
    };
    Some(Head {
        kind: Kind::Deletion { n: n as u32, keys },
        slot,
        batch_first,
        batch_len,
        crcs: (0..q).map(|i| u32_at(b, RECORD_FIXED + 4 * i)).collect(),
    })
}

/// Whether `data` (a record's data area) matches the head's piece checksums.
fn data_matches(head: &Head, block_bytes: u32, data: &[u8]) -> bool {
    let len = match head.kind {
        Kind::Block(_) => block_bytes as usize,
        Kind::Deletion { .. } => head.crcs.len() * BLOCK_PIECE_BYTES,
    };
    data.len() >= len
        && data[..len]
            .chunks(BLOCK_PIECE_BYTES)
            .zip(&head.crcs)
            .all(|(piece, &crc)| crc32c::crc32c(piece) == crc)
}

/// A deletion record whose keys are in its data area: `data` (its q pieces) checked, the keys
/// filled in; whether they were good.
fn fill_deletion_keys(head: &mut Head, block_bytes: u32, data: &[u8]) -> bool {
    if !data_matches(head, block_bytes, data) {
        return false;
    }
    match &mut head.kind {
        Kind::Deletion { n, keys } => {
            *keys = parse_keys(data, *n as usize);
            keys.len() == *n as usize
        }
        Kind::Block(_) => false,
    }
}

/// The table of `slots` (every slot of the file, in order): block records store their keys,
/// deletion records remove theirs, the newest record of a key wins; a bad block record is one
/// block lost, a bad deletion record (or one of unknown kind) makes every block stored before it
/// lost (it may have deleted them; `suspects` gets its slot and how many).
fn table_of(
    object: u64,
    block_bytes: u32,
    slots: &[Slot],
    suspects: &mut Vec<(u64, u64)>,
) -> BlockTable {
    let mut newest: HashMap<BlockKey, u64> = HashMap::new();
    let mut lost = 0;
    for (s, r) in slots.iter().enumerate() {
        match r {
            Ok(h) => match &h.kind {
                Kind::Block(k) => {
                    newest.insert(*k, h.slot);
                }
                Kind::Deletion { keys, .. } => {
                    for k in keys {
                        newest.remove(k);
                    }
                }
            },
            Err(Damage::Zero) | Err(Damage::Block) => lost += 1,
            Err(Damage::Deletion) => {
                suspects.push((s as u64, newest.len() as u64));
                lost += newest.len() as u64;
                newest.clear();
            }
        }
    }
    let blocks = slots
        .iter()
        .flatten()
        .filter_map(|h| match h.kind {
            Kind::Block(k) if newest.get(&k) == Some(&h.slot) => Some(StoredBlock {
                key: k,
                slot: h.slot,
            }),
            _ => None,
        })
        .collect();
    BlockTable {
        object,
        block_bytes,
        blocks,
        lost,
        slots: slots.len() as u64,
    }
}

/// An object's blocks open for reading ([`crate::chunk_store::ChunkStore::open_blocks`]): the
/// table as it was at the open and the file, kept open (a later deletion, append or compaction
/// does not change what this reads).
pub struct ObjectBlocks {
    pub table: BlockTable,
    file: DirFile,
    nonce: u64,
    at: String,
}

impl std::fmt::Debug for ObjectBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ObjectBlocks({}, {} blocks)",
            self.at,
            self.table.blocks.len()
        )
    }
}

impl ObjectBlocks {
    fn lost(&self, key: BlockKey, message: String) -> ChunkStoreError {
        ChunkStoreError::BlockLost {
            object: self.table.object,
            id: key.id,
            version: key.version,
            message,
        }
    }

    /// Reads block `i` of the table (its head, then its data 4 KiB at a time, each piece verified),
    /// calling `go_on` before each piece with the bytes read so far: `Ok(None)` as soon as it says
    /// stop. A block failing a check is [`ChunkStoreError::BlockLost`], never returned.
    pub fn read_block(
        &self,
        i: usize,
        go_on: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<Vec<u8>>> {
        let b = self.table.blocks[i];
        let bb = self.table.block_bytes;
        let at = record_offset(bb, b.slot);
        let read = |buf: &mut [u8], off: u64| {
            self.file
                .read_at(buf, off)
                .map_err(|e| io(&self.at, "read block")(device_io(e)))
        };
        if !go_on(0) {
            return Ok(None);
        }
        let mut head = vec![0u8; BLOCK_HEAD_BYTES as usize];
        read(&mut head, at)?;
        let h = decode_block_head(&head, bb, self.nonce, b.slot)
            .ok_or_else(|| self.lost(b.key, format!("record {} has a bad head", b.slot)))?;
        if h.kind != Kind::Block(b.key) {
            let held = match h.kind {
                Kind::Block(k) => format!("block {}@{}", k.id, k.version),
                Kind::Deletion { .. } => "a deletion".into(),
            };
            return Err(self.lost(b.key, format!("record {} holds {held}", b.slot)));
        }
        let len = bb as usize;
        let mut data = vec![0u8; len];
        let mut done = BLOCK_HEAD_BYTES;
        for (p, piece) in data.chunks_mut(BLOCK_PIECE_BYTES).enumerate() {
            if !go_on(done) {
                return Ok(None);
            }
            let off = at + BLOCK_HEAD_BYTES + (p * BLOCK_PIECE_BYTES) as u64;
            read(piece, off)?;
            done += piece.len() as u64;
            if crc32c::crc32c(piece) != h.crcs[p] {
                return Err(self.lost(
                    b.key,
                    format!(
                        "checksum mismatch in piece {p} (bytes {}..{} of the block, {})",
                        p * BLOCK_PIECE_BYTES,
                        p * BLOCK_PIECE_BYTES + piece.len(),
                        self.at
                    ),
                ));
            }
        }
        Ok(Some(data))
    }
}

/// What [`FileStore::damage_block`] corrupts (tests).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockPart {
    /// A byte of the record's head.
    Head,
    /// A byte of the record's data piece `p`.
    Piece(usize),
    /// A byte of the head of the record in slot `s`, whatever it holds (a deletion record); the
    /// key is not looked at.
    SlotHead(u64),
    /// A byte of piece `p` of the data area of the record in slot `s`.
    SlotPiece(u64, usize),
}

/// A compaction's new file while it is written: its image not yet written, and what it holds.
struct NewFile {
    name: String,
    at: String,
    nonce: u64,
    block_bytes: u32,
    image: Vec<u8>,
    written: u64,
    /// Records in it so far.
    slots: u64,
}

impl NewFile {
    fn push(&mut self, dir: &dyn crate::store_dir::StoreDir, bytes: &[u8]) -> Result<()> {
        self.image.extend_from_slice(bytes);
        if self.image.len() >= REWRITE_BYTES {
            self.write(dir)?;
        }
        Ok(())
    }

    fn write(&mut self, dir: &dyn crate::store_dir::StoreDir) -> Result<()> {
        dir.write_grow(&self.name, self.written, &self.image)
            .map_err(io(&self.at, "write"))?;
        self.written += self.image.len() as u64;
        self.image.clear();
        Ok(())
    }

    /// Copies the block record of `b` (slot `b.slot` of `file`, of nonce `nonce`) as its next
    /// record; its new slot, `None` if the record's head no longer checks out (rot since the
    /// open: the block is lost, not copied; its data is copied as it is, rot and all).
    fn copy(
        &mut self,
        dir: &dyn crate::store_dir::StoreDir,
        file: &DirFile,
        at: &str,
        nonce: u64,
        b: StoredBlock,
        record: &mut [u8],
    ) -> Result<Option<u64>> {
        let bb = self.block_bytes;
        file.read_at(record, record_offset(bb, b.slot))
            .map_err(|e| io(at, "read")(device_io(e)))?;
        match decode_block_head(record, bb, nonce, b.slot) {
            Some(h) if h.kind == Kind::Block(b.key) => {}
            _ => return Ok(None),
        }
        let slot = self.slots;
        restamp_record(record, bb, self.nonce, slot);
        self.push(dir, record)?;
        self.slots += 1;
        Ok(Some(slot))
    }
}

impl FileStore {
    fn blocks_lock(&self, object: u64) -> std::sync::MutexGuard<'_, ()> {
        let m = &self.block_stripes[(object as usize) % self.block_stripes.len()];
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The block file `name` of an object the store knows.
    fn open_block_file(&self, name: &str, at: &str) -> Result<DirFile> {
        self.dir
            .open(name, false)
            .map_err(io(at, "open"))?
            .ok_or_else(|| {
                io(at, "open")(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the block file is gone",
                ))
            })
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, HashMap<u64, ObjectState>> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn blocks_invalid(object: u64, message: String) -> ChunkStoreError {
        ChunkStoreError::BlocksInvalid { object, message }
    }

    fn count_blocks(&self, before: Option<&ObjectState>, after: Option<&ObjectState>) {
        let n = |s: Option<&ObjectState>| s.map_or(0, |s| s.table.blocks.len() as u64);
        let len = |s: Option<&ObjectState>| s.map_or(0, |s| s.file_len());
        self.blocks.fetch_add(n(after), Ordering::Relaxed);
        self.blocks.fetch_sub(n(before), Ordering::Relaxed);
        self.block_bytes.fetch_add(len(after), Ordering::Relaxed);
        self.block_bytes.fetch_sub(len(before), Ordering::Relaxed);
    }

    /// After an append that failed: the file cut back to the records the state knows, or removed
    /// if it knows none (best effort), so that no record of the failed batch stays after the next append's (which
    /// starts where the known records end) to be replayed as part of its batch. A power cut
    /// makes this fail too; the next open drops a torn batch anyway.
    fn cut_back(&self, name: &str, state: Option<&ObjectState>) {
        let _ = match state {
            Some(s) => self.dir.set_len(name, s.file_len()),
            // A file the failed append created: no record of it was acknowledged.
            None => self.dir.remove(name).map(|_| ()),
        };
    }

    /// Replays the block file `name` (at open): its state, with a batch cut short cut off the
    /// file; `None` (and the file removed) if its header is unreadable or no block of it is left.
    pub(super) fn replay_blocks(&self, name: &str, object: u64) -> Result<Option<ObjectState>> {
        let at = self.at(name);
        let Some(file) = self.dir.open(name, false).map_err(io(&at, "open"))? else {
            return Ok(None);
        };
        let len = file.capacity();
        let mut header = vec![0u8; BLOCK_HEAD_BYTES as usize];
        let header_ok = len >= BLOCK_HEAD_BYTES && {
            file.read_at(&mut header, 0)
                .map_err(|e| io(&at, "read")(device_io(e)))?;
            true
        };
        let decoded = if header_ok {
            decode_file_header(&header, object)
        } else {
            Err("shorter than its header".into())
        };
        let FileHeader {
            format,
            block_bytes,
            nonce,
        } = match decoded {
            Ok(h) => h,
            Err(why) => {
                // A file whose first append was cut short, or whose header rotted: nothing
                // of it can be trusted (the nonce and the block size are in the header).
                tracing::warn!("{at}: block file refused ({why}); its blocks are lost");
                drop(file);
                self.dir.remove(name).map_err(io(&at, "remove"))?;
                self.dir.sync().map_err(io(&at, "sync directory"))?;
                return Ok(None);
            }
        };
        let span = record_span(block_bytes);
        let records = (len - BLOCK_HEAD_BYTES).div_ceil(span);
        let mut slots: Vec<Slot> = Vec::with_capacity(records as usize);
        let mut head = vec![0u8; BLOCK_HEAD_BYTES as usize];
        for slot in 0..records {
            let off = record_offset(block_bytes, slot);
            let r = if off + span <= len {
                file.read_at(&mut head, off)
                    .map_err(|e| io(&at, "read")(device_io(e)))?;
                decode_head(&head, block_bytes, nonce, slot, format)
            } else {
                Err(Damage::Zero)
            };
            slots.push(r);
        }
        // A record's data area: a block's bytes, or the pieces of a deletion's keys.
        let mut data = Vec::new();
        let read_data = |h: &Head, data: &mut Vec<u8>| -> Result<()> {
            let n = match h.kind {
                Kind::Block(_) => (span - BLOCK_HEAD_BYTES) as usize,
                Kind::Deletion { .. } => h.crcs.len() * BLOCK_PIECE_BYTES,
            };
            data.resize(n, 0);
            file.read_at(data, record_offset(block_bytes, h.slot) + BLOCK_HEAD_BYTES)
                .map_err(|e| io(&at, "read")(device_io(e)))
        };
        // The last batch (from the first slot the last good head names): each of its records
        // stays only if its head and every byte check out. One that does not was never
        // acknowledged (an append or a deletion cut short) or rotted since: it is dropped, and
        // neither replaces nor deletes anything; its head is zeroed if good records follow it,
        // and the file is cut after the last good one.
        let mut dropped = Vec::new();
        let (first, keep) = match slots.iter().rposition(Result::is_ok) {
            None => (0, 0),
            Some(last) => {
                let first = slots[last].as_ref().map_or(0, |h| h.batch_first);
                let mut keep = first;
                for s in first..=last as u64 {
                    let ok = match &mut slots[s as usize] {
                        Ok(r) if r.batch_first == first => match r.kind {
                            Kind::Block(_) => {
                                read_data(r, &mut data)?;
                                data_matches(r, block_bytes, &data)
                            }
                            Kind::Deletion { .. } if r.crcs.is_empty() => true,
                            Kind::Deletion { .. } => {
                                read_data(r, &mut data)?;
                                fill_deletion_keys(r, block_bytes, &data)
                            }
                        },
                        _ => false,
                    };
                    if ok {
                        keep = s + 1;
                    } else {
                        slots[s as usize] = Err(Damage::Zero);
                        dropped.push(s);
                    }
                }
                (first, keep)
            }
        };
        // Earlier batches were flushed: a deletion record whose keys are in its data area has
        // them read and checked now (the table needs them); one that fails is rot.
        for slot in &mut slots[..first.min(keep) as usize] {
            if let Ok(h) = slot {
                if matches!(h.kind, Kind::Deletion { .. }) && !h.crcs.is_empty() {
                    read_data(h, &mut data)?;
                    if !fill_deletion_keys(h, block_bytes, &data) {
                        *slot = Err(Damage::Deletion);
                    }
                }
            }
        }
        dropped.retain(|&s| s < keep);
        if !dropped.is_empty() {
            tracing::warn!(
                "{at}: {} record(s) of the last append failed their checks at open (cut short or rotted): dropped",
                dropped.len()
            );
            let w = self
                .dir
                .open(name, true)
                .map_err(io(&at, "open"))?
                .ok_or_else(|| Self::blocks_invalid(object, "the block file is gone".into()))?;
            let zeros = vec![0u8; BLOCK_HEAD_BYTES as usize];
            for &s in &dropped {
                w.write_at(&zeros, record_offset(block_bytes, s))
                    .map_err(|e| io(&at, "write")(device_io(e)))?;
            }
            w.flush().map_err(|e| io(&at, "flush")(device_io(e)))?;
        }
        slots.truncate(keep as usize);
        drop(file);
        let mut suspects = Vec::new();
        let table = table_of(object, block_bytes, &slots, &mut suspects);
        for (s, n) in suspects {
            tracing::warn!(
                "{at}: record {s} is a deletion record that fails its checks (or a record of unknown kind): \
                 the {n} block(s) stored before it are lost (it may have deleted them)"
            );
        }
        if table.blocks.is_empty() {
            self.dir.remove(name).map_err(io(&at, "remove"))?;
            self.dir.sync().map_err(io(&at, "sync directory"))?;
            return Ok(None);
        }
        let want = record_offset(block_bytes, keep);
        if want != len {
            self.dir
                .set_len(name, want)
                .map_err(io(&at, "cut a batch cut short"))?;
        }
        Ok(Some(ObjectState {
            table,
            nonce,
            format,
        }))
    }

    pub(super) fn note_object(&self, object: u64, state: ObjectState) {
        self.count_blocks(None, Some(&state));
        self.objects().insert(object, state);
    }

    pub(super) fn put_blocks_impl(
        &self,
        object: u64,
        block_bytes: u32,
        blocks: &[(BlockKey, &[u8])],
    ) -> Result<()> {
        if block_bytes == 0 || block_bytes > STORE_MAX_BLOCK_BYTES {
            return Err(Self::blocks_invalid(
                object,
                format!("block size {block_bytes} is outside 1..={STORE_MAX_BLOCK_BYTES}"),
            ));
        }
        if let Some((k, d)) = blocks.iter().find(|(_, d)| d.len() != block_bytes as usize) {
            return Err(Self::blocks_invalid(
                object,
                format!(
                    "block {}@{} has {} bytes, the object's blocks have {block_bytes}",
                    k.id,
                    k.version,
                    d.len()
                ),
            ));
        }
        if blocks.is_empty() {
            return Ok(());
        }
        let _g = self.blocks_lock(object);
        let name = blocks_name(object);
        let at = self.at(&name);
        let before = self.objects().get(&object).cloned();
        let (nonce, first, mut image) = match &before {
            Some(s) if s.table.block_bytes != block_bytes => {
                return Err(Self::blocks_invalid(
                    object,
                    format!(
                        "blocks of {block_bytes} bytes, the stored ones have {}",
                        s.table.block_bytes
                    ),
                ))
            }
            Some(s) => (s.nonce, s.table.slots, Vec::new()),
            None => {
                let nonce = new_nonce(object);
                let header = encode_file_header(BLOCK_FILE_FORMAT, object, block_bytes, nonce);
                (nonce, 0, header)
            }
        };
        let batch = (first, blocks.len() as u32);
        image.reserve(blocks.len() * record_span(block_bytes) as usize);
        for (i, (key, data)) in blocks.iter().enumerate() {
            image.extend(encode_record(
                block_bytes,
                nonce,
                first + i as u64,
                batch,
                *key,
                data,
            ));
        }
        let write_at = match &before {
            Some(s) => s.file_len(),
            None => 0,
        };
        let created = match self.dir.write_grow(&name, write_at, &image) {
            Ok(c) => c,
            Err(e) => {
                self.cut_back(&name, before.as_ref());
                return Err(io(&at, "append blocks")(e));
            }
        };
        if created || before.is_none() {
            self.dir.sync().map_err(io(&at, "sync directory"))?;
        }
        let mut after = before.clone().unwrap_or(ObjectState {
            table: BlockTable {
                object,
                block_bytes,
                blocks: Vec::new(),
                lost: 0,
                slots: 0,
            },
            nonce,
            format: BLOCK_FILE_FORMAT,
        });
        // Each key's last record in the batch (a key twice: the later one wins).
        let last: HashMap<BlockKey, usize> = blocks
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (*k, i))
            .collect();
        after.table.blocks.retain(|b| !last.contains_key(&b.key));
        for (i, (key, _)) in blocks.iter().enumerate() {
            if last[key] == i {
                after.table.blocks.push(StoredBlock {
                    key: *key,
                    slot: first + i as u64,
                });
            }
        }
        after.table.slots = first + blocks.len() as u64;
        self.count_blocks(before.as_ref(), Some(&after));
        self.objects().insert(object, after);
        Ok(())
    }

    pub(super) fn block_table_impl(&self, object: u64) -> Option<BlockTable> {
        self.objects().get(&object).map(|s| s.table.clone())
    }

    pub(super) fn open_blocks_impl(&self, object: u64) -> Result<Option<ObjectBlocks>> {
        let _g = self.blocks_lock(object);
        let Some(state) = self.objects().get(&object).cloned() else {
            return Ok(None);
        };
        let name = blocks_name(object);
        let at = self.at(&name);
        let file = self.open_block_file(&name, &at)?;
        Ok(Some(ObjectBlocks {
            table: state.table,
            file,
            nonce: state.nonce,
            at,
        }))
    }

    /// Deletes blocks: all of them (the file removed), or the listed ones that are stored, by
    /// appending a batch of deletion records (one flush; a format-16 file's header is rewritten
    /// as format 17 and flushed first). The file is not rewritten: compaction does that later.
    pub(super) fn delete_blocks_impl(&self, object: u64, keys: Option<&[BlockKey]>) -> Result<u32> {
        let _g = self.blocks_lock(object);
        let Some(before) = self.objects().get(&object).cloned() else {
            return Ok(0);
        };
        let name = blocks_name(object);
        let at = self.at(&name);
        let listed: Option<HashSet<BlockKey>> = keys.map(|k| k.iter().copied().collect());
        let gone: Vec<BlockKey> = before
            .table
            .blocks
            .iter()
            .map(|b| b.key)
            .filter(|k| listed.as_ref().is_none_or(|l| l.contains(k)))
            .collect();
        let deleted = gone.len() as u32;
        if deleted == 0 && keys.is_some() {
            return Ok(0);
        }
        if gone.len() == before.table.blocks.len() {
            self.dir.remove(&name).map_err(io(&at, "remove"))?;
            self.dir.sync().map_err(io(&at, "sync directory"))?;
            self.count_blocks(Some(&before), None);
            self.objects().remove(&object);
            return Ok(deleted);
        }
        let bb = before.table.block_bytes;
        if before.format < FORMAT_DELETIONS {
            // A reader of format 16 must never meet a deletion record: the header says 17
            // (durably) before the first one is written.
            let w = self
                .dir
                .open(&name, true)
                .map_err(io(&at, "open"))?
                .ok_or_else(|| Self::blocks_invalid(object, "the block file is gone".into()))?;
            let header = encode_file_header(FORMAT_DELETIONS, object, bb, before.nonce);
            w.write_at(&header, 0)
                .map_err(|e| io(&at, "upgrade the header")(device_io(e)))?;
            w.flush().map_err(|e| io(&at, "flush")(device_io(e)))?;
        }
        let first = before.table.slots;
        let cap = deletion_capacity(bb);
        let n = gone.len().div_ceil(cap) as u64;
        let records: Vec<Vec<u8>> = gone
            .chunks(cap)
            .enumerate()
            .map(|(i, keys)| {
                encode_deletion(bb, before.nonce, first + i as u64, (first, n as u32), keys)
            })
            .collect();
        let pieces: Vec<(u64, &[u8])> = records
            .iter()
            .enumerate()
            .map(|(i, r)| (record_offset(bb, first + i as u64), &r[..]))
            .collect();
        if let Err(e) = self
            .dir
            .write_sparse(&name, &pieces, record_offset(bb, first + n))
        {
            self.cut_back(&name, Some(&before));
            return Err(io(&at, "append a deletion")(e));
        }
        let gone: HashSet<BlockKey> = gone.into_iter().collect();
        let mut after = before.clone();
        after.format = FORMAT_DELETIONS;
        after.table.blocks.retain(|b| !gone.contains(&b.key));
        after.table.slots = first + n;
        debug_assert!(!after.table.blocks.is_empty());
        self.count_blocks(Some(&before), Some(&after));
        self.objects().insert(object, after);
        Ok(deleted)
    }

    /// Objects whose block files want compaction ([`BlockTable::wants_compaction`]), sorted.
    pub(super) fn compactable_objects(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .objects()
            .iter()
            .filter(|(_, s)| s.table.wants_compaction())
            .map(|(&o, _)| o)
            .collect();
        v.sort_unstable();
        v
    }

    /// Rewrites an object's block file with only its live blocks (module doc): the live records
    /// are copied without the object's lock (`go_on` called before each; `false` abandons the
    /// compaction), then, under it, the records appended since, and deletion records for the
    /// copied blocks deleted since; the new file is renamed over the old one. `None`: nothing
    /// done (no such object, no dead slot, abandoned, or the file was replaced meanwhile).
    pub(super) fn compact_blocks_impl(
        &self,
        object: u64,
        go_on: &mut dyn FnMut() -> bool,
    ) -> Result<Option<Compacted>> {
        let _one = self.compaction.lock().unwrap_or_else(|p| p.into_inner());
        let name = blocks_name(object);
        let at = self.at(&name);
        let (s0, file) = {
            let _g = self.blocks_lock(object);
            let Some(s) = self.objects().get(&object).cloned() else {
                return Ok(None);
            };
            if s.table.dead_slots() == 0 {
                return Ok(None);
            }
            let file = self.open_block_file(&name, &at)?;
            (s, file)
        };
        let bb = s0.table.block_bytes;
        let tmp = format!("{name}.tmp");
        let tmp_at = self.at(&tmp);
        self.dir.remove(&tmp).map_err(io(&tmp_at, "remove"))?;
        let nonce = new_nonce(object);
        let mut new = NewFile {
            name: tmp.clone(),
            at: tmp_at.clone(),
            nonce,
            block_bytes: bb,
            image: encode_file_header(BLOCK_FILE_FORMAT, object, bb, nonce),
            written: 0,
            slots: 0,
        };
        let mut record = vec![0u8; record_span(bb) as usize];
        // Old slot → new slot of the blocks copied before the lock, and their keys.
        let mut moved: HashMap<u64, u64> = HashMap::new();
        let mut copied: Vec<BlockKey> = Vec::new();
        let abandon = |e: Option<ChunkStoreError>| -> Result<Option<Compacted>> {
            let removed = self.dir.remove(&tmp).map_err(io(&tmp_at, "remove"));
            match e {
                Some(e) => Err(e),
                None => removed.map(|_| None),
            }
        };
        let mut copy_live = || -> Result<bool> {
            for b in &s0.table.blocks {
                if !go_on() {
                    return Ok(false);
                }
                if let Some(slot) = new.copy(&*self.dir, &file, &at, s0.nonce, *b, &mut record)? {
                    moved.insert(b.slot, slot);
                    copied.push(b.key);
                }
            }
            Ok(true)
        };
        // What was copied is written out before the lock is taken: under it, only what was
        // appended or deleted meanwhile is written.
        let copied_all = copy_live().and_then(|all| {
            if all && !new.image.is_empty() {
                new.write(&*self.dir)?;
            }
            Ok(all)
        });
        drop(file);
        match copied_all {
            Ok(true) => {}
            Ok(false) => return abandon(None),
            Err(e) => return abandon(Some(e)),
        }
        let _g = self.blocks_lock(object);
        let s1 = match self.objects().get(&object).cloned() {
            Some(s) if s.nonce == s0.nonce => s,
            _ => return abandon(None),
        };
        let mut finish = || -> Result<Vec<StoredBlock>> {
            let file = self.open_block_file(&name, &at)?;
            let mut kept = Vec::with_capacity(s1.table.blocks.len());
            for b in &s1.table.blocks {
                let slot = if b.slot < s0.table.slots {
                    moved.get(&b.slot).copied()
                } else {
                    new.copy(&*self.dir, &file, &at, s1.nonce, *b, &mut record)?
                };
                if let Some(slot) = slot {
                    kept.push(StoredBlock { key: b.key, slot });
                }
            }
            drop(file);
            // Blocks copied before the lock and deleted since are deleted in the new file too.
            let live: HashSet<BlockKey> = kept.iter().map(|b| b.key).collect();
            let gone: Vec<BlockKey> = copied
                .iter()
                .filter(|k| !live.contains(k))
                .copied()
                .collect();
            if !gone.is_empty() {
                let cap = deletion_capacity(bb);
                let n = gone.len().div_ceil(cap) as u64;
                let first = new.slots;
                for (i, keys) in gone.chunks(cap).enumerate() {
                    let mut r =
                        encode_deletion(bb, nonce, first + i as u64, (first, n as u32), keys);
                    r.resize(record_span(bb) as usize, 0);
                    new.push(&*self.dir, &r)?;
                }
                new.slots += n;
            }
            if !new.image.is_empty() || new.written == 0 {
                new.write(&*self.dir)?;
            }
            Ok(kept)
        };
        let kept = match finish() {
            Ok(k) => k,
            Err(e) => return abandon(Some(e)),
        };
        if kept.is_empty() {
            // Every block rotted since the open: nothing to keep.
            self.dir.remove(&tmp).map_err(io(&tmp_at, "remove"))?;
            self.dir.remove(&name).map_err(io(&at, "remove"))?;
            self.dir.sync().map_err(io(&at, "sync directory"))?;
            self.count_blocks(Some(&s1), None);
            self.objects().remove(&object);
            return Ok(Some(Compacted {
                slots_before: s1.table.slots,
                slots_after: 0,
                blocks: 0,
            }));
        }
        if let Err(e) = self.dir.rename(&tmp, &name) {
            return abandon(Some(io(&at, "rename")(e)));
        }
        // Renamed: the new file is the object's from now on (its nonce above all), synced or not.
        let after = ObjectState {
            table: BlockTable {
                object,
                block_bytes: bb,
                blocks: kept,
                lost: 0,
                slots: new.slots,
            },
            nonce,
            format: BLOCK_FILE_FORMAT,
        };
        let done = Compacted {
            slots_before: s1.table.slots,
            slots_after: new.slots,
            blocks: after.table.blocks.len() as u64,
        };
        self.count_blocks(Some(&s1), Some(&after));
        self.objects().insert(object, after);
        self.dir.sync().map_err(io(&at, "sync directory"))?;
        Ok(Some(done))
    }

    pub(super) fn object_ids(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.objects().keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Corrupts `part` of the record of `key` (or of a slot) behind the store's back, durably
    /// (tests: rot is reported lost, never served).
    pub(super) fn damage_block_impl(
        &self,
        object: u64,
        key: BlockKey,
        part: BlockPart,
    ) -> Result<()> {
        let _g = self.blocks_lock(object);
        let name = blocks_name(object);
        let at = self.at(&name);
        let state =
            self.objects().get(&object).cloned().ok_or_else(|| {
                Self::blocks_invalid(object, "no block of it is stored here".into())
            })?;
        let bb = state.table.block_bytes;
        let slot_of_key = || {
            state
                .table
                .blocks
                .iter()
                .find(|b| b.key == key)
                .map(|b| b.slot)
                .ok_or_else(|| {
                    Self::blocks_invalid(
                        object,
                        format!("block {}@{} is not stored", key.id, key.version),
                    )
                })
        };
        let piece = |p: usize| BLOCK_HEAD_BYTES + (p * BLOCK_PIECE_BYTES) as u64 + 7;
        let off = match part {
            BlockPart::Head => record_offset(bb, slot_of_key()?) + 30,
            BlockPart::Piece(p) => record_offset(bb, slot_of_key()?) + piece(p),
            BlockPart::SlotHead(s) => record_offset(bb, s) + 30,
            BlockPart::SlotPiece(s, p) => record_offset(bb, s) + piece(p),
        };
        let file = self
            .dir
            .open(&name, true)
            .map_err(io(&at, "open"))?
            .ok_or_else(|| Self::blocks_invalid(object, "the block file is gone".into()))?;
        let mut byte = [0u8; 1];
        file.read_at(&mut byte, off)
            .map_err(|e| io(&at, "read")(device_io(e)))?;
        byte[0] ^= 0x5a;
        file.write_at(&byte, off)
            .map_err(|e| io(&at, "write")(device_io(e)))?;
        file.flush().map_err(|e| io(&at, "flush")(device_io(e)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_round_trip_and_refuse_other_places() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 13) as u8).collect();
        let key = BlockKey { id: 7, version: 3 };
        let r = encode_record(10_000, 99, 5, (4, 3), key, &data);
        assert_eq!(r.len() as u64, record_span(10_000));
        let h = decode_head(&r, 10_000, 99, 5, BLOCK_FILE_FORMAT).unwrap();
        assert_eq!(
            (h.kind.clone(), h.batch_first, h.batch_len),
            (Kind::Block(key), 4, 3)
        );
        assert!(data_matches(&h, 10_000, &r[BLOCK_HEAD_BYTES as usize..]));
        let bad = |r: &[u8], bb, nonce, slot| decode_head(r, bb, nonce, slot, 17).unwrap_err();
        assert_eq!(bad(&r, 10_000, 98, 5), Damage::Block, "another file's");
        assert_eq!(bad(&r, 10_000, 99, 6), Damage::Block, "another slot's");
        assert_eq!(bad(&r, 4096, 99, 5), Damage::Block, "another block size");
        let mut flipped = r.clone();
        flipped[20] ^= 1;
        assert_eq!(bad(&flipped, 10_000, 99, 5), Damage::Block);
        let mut rot = r.clone();
        rot[BLOCK_HEAD_BYTES as usize + 9000] ^= 1;
        assert!(!data_matches(&h, 10_000, &rot[BLOCK_HEAD_BYTES as usize..]));
        let zeros = vec![0u8; BLOCK_HEAD_BYTES as usize];
        assert_eq!(bad(&zeros, 10_000, 99, 5), Damage::Zero);
        let mut unknown = r.clone();
        unknown[0] ^= 0x40;
        assert_eq!(
            bad(&unknown, 10_000, 99, 5),
            Damage::Deletion,
            "kind unknown"
        );
        assert_eq!(
            decode_head(&unknown, 10_000, 99, 5, 16).unwrap_err(),
            Damage::Block,
            "a format-16 file has no deletions"
        );
        let f = encode_file_header(17, 0xabc, 10_000, 99);
        let want = FileHeader {
            format: 17,
            block_bytes: 10_000,
            nonce: 99,
        };
        assert_eq!(decode_file_header(&f, 0xabc), Ok(want));
        let f16 = encode_file_header(16, 0xabc, 10_000, 99);
        assert_eq!(decode_file_header(&f16, 0xabc).unwrap().format, 16);
        let f18 = encode_file_header(18, 0xabc, 10_000, 99);
        assert!(decode_file_header(&f18, 0xabc)
            .unwrap_err()
            .contains("format 18, this build reads block files of formats 16..=17"));
        assert!(decode_file_header(&f, 0xabd)
            .unwrap_err()
            .contains("holds object 0xabc"));
        assert_eq!(parse_blocks_name(&blocks_name(0xabc)), Some(0xabc));
        assert_eq!(parse_blocks_name("00000000000abc.blocks"), None);
    }

    #[test]
    fn deletion_records_round_trip_in_the_head_and_in_pieces() {
        let keys = |n: u32| -> Vec<BlockKey> {
            (0..n)
                .map(|i| BlockKey {
                    id: i * 3 + 1,
                    version: u64::from(i) << 33 | 5,
                })
                .collect()
        };
        // In the head: only the head is written.
        let few = keys(HEAD_KEYS as u32);
        let r = encode_deletion(100, 7, 9, (9, 1), &few);
        assert_eq!(r.len(), BLOCK_HEAD_BYTES as usize);
        let h = decode_head(&r, 100, 7, 9, 17).unwrap();
        assert_eq!(
            h.kind,
            Kind::Deletion {
                n: HEAD_KEYS as u32,
                keys: few.clone()
            }
        );
        assert!(h.crcs.is_empty());
        let mut flipped = r.clone();
        flipped[4000] ^= 1;
        assert_eq!(
            decode_head(&flipped, 100, 7, 9, 17).unwrap_err(),
            Damage::Deletion,
            "the crc covers the whole head"
        );
        assert_eq!(
            decode_head(&r, 100, 8, 9, 17).unwrap_err(),
            Damage::Deletion,
            "another file's"
        );
        // In the data area: the head and the pieces holding the keys.
        let bb = 3 * BLOCK_PIECE_BYTES as u32;
        let cap = deletion_capacity(bb);
        assert_eq!(cap, 3 * BLOCK_PIECE_BYTES / KEY_BYTES);
        assert_eq!(
            deletion_capacity(1),
            HEAD_KEYS.max(BLOCK_PIECE_BYTES / KEY_BYTES)
        );
        let many = keys(cap as u32);
        let r = encode_deletion(bb, 7, 2, (1, 2), &many);
        assert_eq!(r.len(), BLOCK_HEAD_BYTES as usize + 3 * BLOCK_PIECE_BYTES);
        let mut h = decode_head(&r, bb, 7, 2, 17).unwrap();
        assert_eq!(h.crcs.len(), 3);
        let data = &r[BLOCK_HEAD_BYTES as usize..];
        assert!(fill_deletion_keys(&mut h, bb, data));
        assert_eq!(
            h.kind,
            Kind::Deletion {
                n: cap as u32,
                keys: many
            }
        );
        let mut rot = data.to_vec();
        rot[5000] ^= 1;
        let mut h = decode_head(&r, bb, 7, 2, 17).unwrap();
        assert!(!fill_deletion_keys(&mut h, bb, &rot));
        // Pieces beyond the slot's data area are refused.
        assert_eq!(
            decode_head(&r, 2 * BLOCK_PIECE_BYTES as u32, 7, 2, 17).unwrap_err(),
            Damage::Deletion
        );
    }

    #[test]
    fn replay_applies_deletions_in_order_and_distrusts_a_bad_one() {
        let k = |id| BlockKey { id, version: 1 };
        let block = |slot, id| {
            Ok(Head {
                kind: Kind::Block(k(id)),
                slot,
                batch_first: slot,
                batch_len: 1,
                crcs: Vec::new(),
            })
        };
        let deletion = |slot, ids: &[u32]| {
            Ok(Head {
                kind: Kind::Deletion {
                    n: ids.len() as u32,
                    keys: ids.iter().map(|&i| k(i)).collect(),
                },
                slot,
                batch_first: slot,
                batch_len: 1,
                crcs: Vec::new(),
            })
        };
        let ids = |t: &BlockTable| {
            t.blocks
                .iter()
                .map(|b| (b.key.id, b.slot))
                .collect::<Vec<_>>()
        };
        // Deleted, stored again, deleted keys that are not there.
        let slots = vec![
            block(0, 1),
            block(1, 2),
            deletion(2, &[1, 2, 9]),
            block(3, 2),
            block(4, 3),
            deletion(5, &[3]),
        ];
        let mut suspects = Vec::new();
        let t = table_of(5, 10, &slots, &mut suspects);
        assert_eq!(ids(&t), vec![(2, 3)]);
        assert_eq!((t.lost, t.slots, t.dead_slots()), (0, 6, 5));
        assert!(suspects.is_empty());
        // A bad deletion record: what was stored before it is lost, what came after is not.
        let slots = vec![
            block(0, 1),
            block(1, 2),
            Err(Damage::Deletion),
            block(3, 2),
            block(4, 3),
            Err(Damage::Block),
            Err(Damage::Zero),
        ];
        let t = table_of(5, 10, &slots, &mut suspects);
        assert_eq!(ids(&t), vec![(2, 3), (3, 4)]);
        assert_eq!(t.lost, 2 + 2);
        assert_eq!(suspects, vec![(2, 2)]);
    }

    #[test]
    fn compaction_is_wanted_past_half_dead_and_a_minimum() {
        let table = |slots, live: u64| BlockTable {
            object: 1,
            block_bytes: 1,
            blocks: (0..live)
                .map(|s| StoredBlock {
                    key: BlockKey {
                        id: s as u32,
                        version: 1,
                    },
                    slot: s,
                })
                .collect(),
            lost: 0,
            slots,
        };
        assert!(!table(10, 10).wants_compaction());
        assert!(
            !table(7, 0).wants_compaction(),
            "fewer dead than the minimum"
        );
        assert!(!table(16, 8).wants_compaction(), "half, not more");
        assert!(table(17, 8).wants_compaction());
        assert!(table(8, 0).wants_compaction());
    }
}
