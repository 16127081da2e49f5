//! Coded blocks of robust objects (RobuSTore, docs/robustore.md "On the cluster"): one block file
//! per (object, OSD), its blocks in arrival order, so that "all my blocks" is one sequential read.
//!
//! A block file (all integers little-endian; docs/cluster.md "Robust blocks" has the table):
//!
//! ```text
//! 0      file header (4 KiB): magic "ECSOSDCK", format 16 (a block file; chunk files are 2 and
//!        3), block bytes B, object id, nonce (random per file), 0, crc32c of bytes 0..40
//! 4096   record 0, then record 1, ... each 4096 + B rounded up to 4 KiB bytes:
//!   head (4 KiB): magic "ECBK", pieces p = ⌈B / 4 KiB⌉, nonce, slot (the record's position),
//!        coded id, 0, object version, first slot of its batch, records in its batch, crc32c of
//!        the head (bytes 0..48 and the piece checksums), 0, p crc32c of the 4 KiB pieces
//!   data: B bytes, zeros to 4 KiB
//! ```
//!
//! The block table is the chain of record heads, read once when the store opens and kept in
//! memory (a key and a slot per block). An append writes a batch of records after the last one
//! and flushes once: the batch is durable on return. Replay (at open) checks every head and
//! every byte of the last batch: a record of it that fails (an append cut short, never
//! acknowledged; or rot) is dropped — it replaces nothing, its head is zeroed, the file is cut
//! after the last good record — and the batch's good records stay; earlier batches were flushed,
//! so a bad record among them is bit rot: that block is lost (its key too, if its head is bad),
//! never served. A
//! record whose key is stored before it replaces the older one (the newer record wins). A record
//! of another file (a nonce or a slot that does not match its place) is not this file's.
//! Deleting some blocks rewrites the file without them (a new file, renamed over the old one);
//! deleting all removes it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use ecstack_mds_proto::RobustBlockKey as BlockKey;

use super::{io, u32_at, u64_at, ChunkStoreError, FileStore, Result, MAGIC};
use crate::store_dir::{device_io, DirFile};

/// The format field of a block file's header (chunk files are formats 2 and 3).
pub const BLOCK_FILE_FORMAT: u32 = 16;
/// Bytes of a block file's header, and of each record's head.
pub const BLOCK_HEAD_BYTES: u64 = 4096;
/// The unit of a block's checksums, and of a cancellable read.
pub const BLOCK_PIECE_BYTES: usize = 4096;
const RECORD_MAGIC: [u8; 4] = *b"ECBK";
/// The fixed part of a record head, before the piece checksums.
const RECORD_FIXED: usize = 56;
/// The largest block: its piece checksums fit one head.
pub const STORE_MAX_BLOCK_BYTES: u32 =
    ((BLOCK_HEAD_BYTES as usize - RECORD_FIXED) / 4 * BLOCK_PIECE_BYTES) as u32;
/// A deletion rewrites the file in writes of about this many bytes.
const REWRITE_BYTES: usize = 16 << 20;

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
    /// Records whose head is damaged (bit rot): blocks lost, keys unknown.
    pub lost: u64,
}

/// What the store keeps of an object's block file.
#[derive(Debug, Clone)]
pub(super) struct ObjectState {
    pub table: BlockTable,
    pub nonce: u64,
    /// Records in the file (the next record's slot).
    pub slots: u64,
}

impl ObjectState {
    fn file_len(&self) -> u64 {
        record_offset(self.table.block_bytes, self.slots)
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

fn encode_file_header(object: u64, block_bytes: u32, nonce: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_HEAD_BYTES as usize];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..12].copy_from_slice(&BLOCK_FILE_FORMAT.to_le_bytes());
    b[12..16].copy_from_slice(&block_bytes.to_le_bytes());
    b[16..24].copy_from_slice(&object.to_le_bytes());
    b[24..32].copy_from_slice(&nonce.to_le_bytes());
    let crc = crc32c::crc32c(&b[0..40]);
    b[40..44].copy_from_slice(&crc.to_le_bytes());
    b
}

/// (block bytes, nonce) of a block file's header, or why it is refused.
fn decode_file_header(b: &[u8], object: u64) -> std::result::Result<(u32, u64), String> {
    if b.len() < 44 || b[0..8] != MAGIC {
        return Err("no block file magic".into());
    }
    if crc32c::crc32c(&b[0..40]) != u32_at(b, 40) {
        return Err("header checksum mismatch".into());
    }
    let format = u32_at(b, 8);
    if format != BLOCK_FILE_FORMAT {
        return Err(format!(
            "format {format}, this build reads block files of format {BLOCK_FILE_FORMAT}"
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
    Ok((block_bytes, u64_at(b, 24)))
}

/// A record head as decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Head {
    key: BlockKey,
    slot: u64,
    batch_first: u64,
    batch_len: u32,
    crcs: Vec<u32>,
}

fn head_crc(b: &[u8], p: usize) -> u32 {
    crc32c::crc32c_append(
        crc32c::crc32c(&b[0..48]),
        &b[RECORD_FIXED..RECORD_FIXED + 4 * p],
    )
}

/// A record's bytes: its head and `data` padded to 4 KiB.
fn encode_record(
    block_bytes: u32,
    nonce: u64,
    slot: u64,
    (batch_first, batch_len): (u64, u32),
    key: BlockKey,
    data: &[u8],
) -> Vec<u8> {
    let p = pieces(block_bytes);
    let mut b = vec![0u8; record_span(block_bytes) as usize];
    b[0..4].copy_from_slice(&RECORD_MAGIC);
    b[4..8].copy_from_slice(&(p as u32).to_le_bytes());
    b[8..16].copy_from_slice(&nonce.to_le_bytes());
    b[16..24].copy_from_slice(&slot.to_le_bytes());
    b[24..28].copy_from_slice(&key.id.to_le_bytes());
    b[32..40].copy_from_slice(&key.version.to_le_bytes());
    b[40..48].copy_from_slice(&batch_first.to_le_bytes());
    b[48..52].copy_from_slice(&batch_len.to_le_bytes());
    for (i, piece) in data.chunks(BLOCK_PIECE_BYTES).enumerate() {
        let at = RECORD_FIXED + 4 * i;
        b[at..at + 4].copy_from_slice(&crc32c::crc32c(piece).to_le_bytes());
    }
    let crc = head_crc(&b, p);
    b[52..56].copy_from_slice(&crc.to_le_bytes());
    let d = BLOCK_HEAD_BYTES as usize;
    b[d..d + data.len()].copy_from_slice(data);
    b
}

/// The head at the start of `b` if it is a valid head of record `slot` of this file.
fn decode_head(b: &[u8], block_bytes: u32, nonce: u64, slot: u64) -> Option<Head> {
    let p = pieces(block_bytes);
    if b.len() < RECORD_FIXED + 4 * p
        || b[0..4] != RECORD_MAGIC
        || u32_at(b, 4) as usize != p
        || u64_at(b, 8) != nonce
        || u64_at(b, 16) != slot
        || u32_at(b, 28) != 0
        || head_crc(b, p) != u32_at(b, 52)
    {
        return None;
    }
    let batch_first = u64_at(b, 40);
    let batch_len = u32_at(b, 48);
    if batch_first > slot || batch_len == 0 || slot - batch_first >= u64::from(batch_len) {
        return None;
    }
    Some(Head {
        key: BlockKey {
            id: u32_at(b, 24),
            version: u64_at(b, 32),
        },
        slot,
        batch_first,
        batch_len,
        crcs: (0..p).map(|i| u32_at(b, RECORD_FIXED + 4 * i)).collect(),
    })
}

/// Whether `data` (a record's data, padded) matches the head's piece checksums.
fn data_matches(head: &Head, block_bytes: u32, data: &[u8]) -> bool {
    let len = block_bytes as usize;
    data.len() >= len
        && data[..len]
            .chunks(BLOCK_PIECE_BYTES)
            .zip(&head.crcs)
            .all(|(piece, &crc)| crc32c::crc32c(piece) == crc)
}

/// The table of records `heads` (by slot; `None`: a bad head): each key where its newest record
/// is, lost heads counted.
fn table_of(object: u64, block_bytes: u32, heads: &[Option<Head>]) -> BlockTable {
    let mut newest: HashMap<BlockKey, u64> = HashMap::new();
    let mut lost = 0;
    for h in heads {
        match h {
            Some(h) => {
                newest.insert(h.key, h.slot);
            }
            None => lost += 1,
        }
    }
    let blocks = heads
        .iter()
        .flatten()
        .filter(|h| newest.get(&h.key) == Some(&h.slot))
        .map(|h| StoredBlock {
            key: h.key,
            slot: h.slot,
        })
        .collect();
    BlockTable {
        object,
        block_bytes,
        blocks,
        lost,
    }
}

/// An object's blocks open for reading ([`crate::chunk_store::ChunkStore::open_blocks`]): the
/// table as it was at the open and the file, kept open (a later deletion or append does not
/// change what this reads).
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
        let h = decode_head(&head, bb, self.nonce, b.slot)
            .ok_or_else(|| self.lost(b.key, format!("record {} has a bad head", b.slot)))?;
        if h.key != b.key {
            return Err(self.lost(
                b.key,
                format!(
                    "record {} holds block {}@{}",
                    b.slot, h.key.id, h.key.version
                ),
            ));
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

    /// Replays the block file `name` (at open): its state, with a batch cut short cut off the
    /// file; `None` (and the file removed) if its header is unreadable or nothing of it survives.
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
        let (block_bytes, nonce) = match decoded {
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
        let mut heads: Vec<Option<Head>> = Vec::with_capacity(records as usize);
        let mut head = vec![0u8; BLOCK_HEAD_BYTES as usize];
        for slot in 0..records {
            let off = record_offset(block_bytes, slot);
            let whole = off + span <= len;
            let h = if whole {
                file.read_at(&mut head, off)
                    .map_err(|e| io(&at, "read")(device_io(e)))?;
                decode_head(&head, block_bytes, nonce, slot)
            } else {
                None
            };
            heads.push(h);
        }
        // The last batch (from the first slot the last good head names): each of its records
        // stays only if its head and every byte check out. One that does not was never
        // acknowledged (an append cut short) or rotted since: it is dropped, and does not
        // replace an older record of its key; its head is zeroed if good records follow it, and
        // the file is cut after the last good one.
        let mut dropped = Vec::new();
        let keep = match heads.iter().rposition(Option::is_some) {
            None => 0,
            Some(last) => {
                let first = heads[last].as_ref().expect("a good head").batch_first;
                let mut data = vec![0u8; (span - BLOCK_HEAD_BYTES) as usize];
                let mut keep = first;
                for s in first..=last as u64 {
                    let ok = match &heads[s as usize] {
                        Some(r) if r.batch_first == first => {
                            let off = record_offset(block_bytes, s) + BLOCK_HEAD_BYTES;
                            file.read_at(&mut data, off)
                                .map_err(|e| io(&at, "read")(device_io(e)))?;
                            data_matches(r, block_bytes, &data)
                        }
                        _ => false,
                    };
                    if ok {
                        keep = s + 1;
                    } else {
                        heads[s as usize] = None;
                        dropped.push(s);
                    }
                }
                keep
            }
        };
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
        heads.truncate(keep as usize);
        drop(file);
        let want = record_offset(block_bytes, keep);
        if heads.iter().all(Option::is_none) {
            self.dir.remove(name).map_err(io(&at, "remove"))?;
            self.dir.sync().map_err(io(&at, "sync directory"))?;
            return Ok(None);
        }
        if want != len {
            self.dir
                .set_len(name, want)
                .map_err(io(&at, "cut a batch cut short"))?;
        }
        Ok(Some(ObjectState {
            table: table_of(object, block_bytes, &heads),
            nonce,
            slots: keep,
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
            Some(s) => (s.nonce, s.slots, Vec::new()),
            None => {
                let nonce = new_nonce(object);
                (nonce, 0, encode_file_header(object, block_bytes, nonce))
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
        let created = self
            .dir
            .write_grow(&name, write_at, &image)
            .map_err(io(&at, "append blocks"))?;
        if created || before.is_none() {
            self.dir.sync().map_err(io(&at, "sync directory"))?;
        }
        let mut after = before.clone().unwrap_or(ObjectState {
            table: BlockTable {
                object,
                block_bytes,
                blocks: Vec::new(),
                lost: 0,
            },
            nonce,
            slots: 0,
        });
        for (i, (key, _)) in blocks.iter().enumerate() {
            after.table.blocks.retain(|b| b.key != *key);
            after.table.blocks.push(StoredBlock {
                key: *key,
                slot: first + i as u64,
            });
        }
        after.slots = first + blocks.len() as u64;
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

    pub(super) fn delete_blocks_impl(&self, object: u64, keys: Option<&[BlockKey]>) -> Result<u32> {
        let _g = self.blocks_lock(object);
        let Some(before) = self.objects().get(&object).cloned() else {
            return Ok(0);
        };
        let name = blocks_name(object);
        let at = self.at(&name);
        let keep: Vec<StoredBlock> = match keys {
            None => Vec::new(),
            Some(keys) => before
                .table
                .blocks
                .iter()
                .filter(|b| !keys.contains(&b.key))
                .copied()
                .collect(),
        };
        let deleted = (before.table.blocks.len() - keep.len()) as u32;
        if keys.is_some() && deleted == 0 {
            return Ok(0);
        }
        if keep.is_empty() {
            self.dir.remove(&name).map_err(io(&at, "remove"))?;
            self.dir.sync().map_err(io(&at, "sync directory"))?;
            self.count_blocks(Some(&before), None);
            self.objects().remove(&object);
            return Ok(deleted);
        }
        // The kept records, copied into a new file (each its own batch, so a replay verifies
        // only the last one's bytes), renamed over the old one.
        let bb = before.table.block_bytes;
        let span = record_span(bb) as usize;
        let tmp = format!("{name}.tmp");
        let tmp_at = self.at(&tmp);
        self.dir.remove(&tmp).map_err(io(&tmp_at, "remove"))?;
        let file = self.open_block_file(&name, &at)?;
        let nonce = new_nonce(object);
        let mut image = encode_file_header(object, bb, nonce);
        let mut written = 0u64;
        let mut record = vec![0u8; span];
        let mut kept = Vec::with_capacity(keep.len());
        for b in &keep {
            file.read_at(&mut record, record_offset(bb, b.slot))
                .map_err(|e| io(&at, "read")(device_io(e)))?;
            let slot = kept.len() as u64;
            let head = decode_head(&record, bb, before.nonce, b.slot);
            // The data is copied as it is: a block whose bytes rotted stays lost.
            let mut out = record.clone();
            match head {
                Some(h) if h.key == b.key => {
                    out[8..16].copy_from_slice(&nonce.to_le_bytes());
                    out[16..24].copy_from_slice(&slot.to_le_bytes());
                    out[40..48].copy_from_slice(&slot.to_le_bytes());
                    out[48..52].copy_from_slice(&1u32.to_le_bytes());
                    let crc = head_crc(&out, pieces(bb));
                    out[52..56].copy_from_slice(&crc.to_le_bytes());
                }
                // A head that rotted since the open: the block is lost, not copied.
                _ => continue,
            }
            image.extend(out);
            kept.push(StoredBlock { key: b.key, slot });
            if image.len() >= REWRITE_BYTES {
                self.dir
                    .write_grow(&tmp, written, &image)
                    .map_err(io(&tmp_at, "write"))?;
                written += image.len() as u64;
                image.clear();
            }
        }
        drop(file);
        if !image.is_empty() || written == 0 {
            self.dir
                .write_grow(&tmp, written, &image)
                .map_err(io(&tmp_at, "write"))?;
        }
        self.dir.rename(&tmp, &name).map_err(io(&at, "rename"))?;
        self.dir.sync().map_err(io(&at, "sync directory"))?;
        let after = ObjectState {
            table: BlockTable {
                object,
                block_bytes: bb,
                blocks: kept.clone(),
                lost: 0,
            },
            nonce,
            slots: kept.len() as u64,
        };
        self.count_blocks(Some(&before), Some(&after));
        self.objects().insert(object, after);
        Ok(deleted)
    }

    pub(super) fn object_ids(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.objects().keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Corrupts `part` of the record of `key` behind the store's back, durably (tests: rot is
    /// reported lost, never served).
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
        let b = state
            .table
            .blocks
            .iter()
            .find(|b| b.key == key)
            .ok_or_else(|| {
                Self::blocks_invalid(
                    object,
                    format!("block {}@{} is not stored", key.id, key.version),
                )
            })?;
        let off = record_offset(state.table.block_bytes, b.slot)
            + match part {
                BlockPart::Head => 30,
                BlockPart::Piece(p) => BLOCK_HEAD_BYTES + (p * BLOCK_PIECE_BYTES) as u64 + 7,
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
        let h = decode_head(&r, 10_000, 99, 5).unwrap();
        assert_eq!((h.key, h.batch_first, h.batch_len), (key, 4, 3));
        assert!(data_matches(&h, 10_000, &r[BLOCK_HEAD_BYTES as usize..]));
        assert_eq!(decode_head(&r, 10_000, 98, 5), None, "another file's");
        assert_eq!(decode_head(&r, 10_000, 99, 6), None, "another slot's");
        assert_eq!(decode_head(&r, 4096, 99, 5), None, "another block size");
        let mut bad = r.clone();
        bad[20] ^= 1;
        assert_eq!(decode_head(&bad, 10_000, 99, 5), None);
        let mut rot = r.clone();
        rot[BLOCK_HEAD_BYTES as usize + 9000] ^= 1;
        assert!(!data_matches(&h, 10_000, &rot[BLOCK_HEAD_BYTES as usize..]));
        let f = encode_file_header(0xabc, 10_000, 99);
        assert_eq!(decode_file_header(&f, 0xabc), Ok((10_000, 99)));
        assert!(decode_file_header(&f, 0xabd)
            .unwrap_err()
            .contains("holds object 0xabc"));
        assert_eq!(parse_blocks_name(&blocks_name(0xabc)), Some(0xabc));
        assert_eq!(parse_blocks_name("00000000000abc.blocks"), None);
    }
}
