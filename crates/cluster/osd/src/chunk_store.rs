//! Where an OSD keeps its chunks. [`ChunkStore`] is the seam (a directory of files today, a
//! `BlockDevice` with an extent allocator later); [`FileStore`] keeps one preallocated file per chunk.
//!
//! A chunk file (all integers little-endian; docs/cluster.md "The OSD chunk store" has the table):
//!
//! ```text
//! 0    header (64 bytes): magic "ECSOSDCK", format version, block size, segment id, chunk index,
//!      flags (bit 0: dirty), a = number of applied versions, version, chunk bytes, segment length,
//!      crc32c of bytes 0..56 and of the applied versions
//! 64   applied versions (8 bytes each, a entries: k for a parity chunk, 0 for a data chunk)
//! T    crc32c of every data block (4 bytes each, ⌈chunk_bytes / BLOCK_BYTES⌉ entries), T = 64 + 8a
//! D    chunk bytes, D = T + 4·blocks rounded up to 4 KiB
//! ```
//!
//! Blocks are [`BLOCK_BYTES`] = 4 KiB: the page size, and the granularity of the small in-place FO
//! updates CodFS measures (§5.2), so an update re-reads and re-checksums at most one block more than it
//! touches on each side; the checksum table costs 0.1% of the chunk. Every read verifies the crc32c of
//! each block it touches. An in-place change is ordered so that a crash at any point leaves either
//! the old chunk, the new chunk, or a chunk marked dirty: the header is first rewritten with the dirty
//! flag (fsynced), then the touched blocks and their checksums (fsynced), then the header with the
//! new version and without the flag (fsynced). A dirty chunk is never read: it counts as corrupt and
//! is rebuilt from the others. A whole chunk is written to a temporary file, preallocated with
//! `fallocate`, fsynced, renamed over the old one, and the directory fsynced. The files are reached
//! through a [`StoreDir`] (a real directory of `FileDevice`s, or a simulated one with power cuts).

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use ecstack_device::{AlignedBuf, BlockDevice, DeviceError, DIRECT_ALIGN};

use ecstack_rpc::UpdateScheme;

use crate::api::{ChunkMeta, DeltaStamp};
use crate::store_dir::{device_io, DirFile, OsDir, StoreDir};

pub const MAGIC: [u8; 8] = *b"ECSOSDCK";
/// The format this build writes. Format 3 added the update scheme (header flags), the PLR reserve
/// and the log generation; format 2 (applied versions and the dirty flag) is still read, as FO, and
/// changed in place in its own layout; format 1 files are refused.
pub const FORMAT_VERSION: u32 = 3;
/// The oldest format this build reads.
pub const FORMAT_OLDEST: u32 = 2;
/// The fixed part of a format-3 header; the applied versions follow it.
pub const HEADER_BYTES: usize = 80;
/// The fixed part of a format-2 header.
pub const HEADER_BYTES_V2: usize = 64;
/// Header flag: an in-place change was under way (the chunk cannot be trusted).
pub const FLAG_DIRTY: u16 = 1;
/// Header flags bits 1–2 (format 3): the update scheme's number.
const SCHEME_SHIFT: u16 = 1;
const SCHEME_MASK: u16 = 0b110;
pub const BLOCK_BYTES: usize = 4096;
/// A chunk is at most a whole segment (k = 1).
pub const MAX_CHUNK_BYTES: u64 = ecstack_rpc::config::MAX_SEGMENT_BYTES;
/// A PLR reserve is at most this large (four times the largest chunk).
pub const MAX_RESERVE_BYTES: u64 = 4 * MAX_CHUNK_BYTES;
/// Chunk indexes are below 256 (n = k + m ≤ 255).
pub const MAX_CHUNKS: u32 = 256;

/// Why a chunk header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("header is {got} bytes, need {need}")]
    TooShort { got: usize, need: usize },
    #[error("bad magic (not an ecstack chunk file)")]
    BadMagic,
    #[error("header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum { stored: u32, computed: u32 },
    #[error(
        "unknown chunk format version {got} (this build reads {FORMAT_OLDEST} to {FORMAT_VERSION})"
    )]
    UnknownVersion { got: u32 },
    #[error("{0}")]
    Field(String),
}

/// A chunk's header as stored: its fields, the dirty flag, the format it is stored in, and the
/// generation of its log (format 3: records of another generation are not of this chunk's log; a
/// merge starts the next one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub meta: ChunkMeta,
    pub dirty: bool,
    pub format: u32,
    pub log_gen: u64,
}

impl Header {
    /// A new chunk's header: format 3, log generation 1.
    pub fn new(meta: ChunkMeta) -> Header {
        Header {
            meta,
            dirty: false,
            format: FORMAT_VERSION,
            log_gen: 1,
        }
    }

    /// Bytes of the header: the fixed part and 8 per applied version.
    pub fn len(&self) -> usize {
        fixed_bytes(self.format) + 8 * self.meta.applied.len()
    }

    /// File offset of the block checksum table.
    pub fn table_offset(&self) -> u64 {
        self.len() as u64
    }

    /// File offset of the chunk bytes.
    pub fn data_offset(&self) -> u64 {
        (self.table_offset() + 4 * blocks(self.meta.chunk_bytes)).next_multiple_of(4096)
    }

    /// File offset of the PLR reserve (right after the chunk bytes, 4 KiB aligned).
    pub fn reserve_offset(&self) -> u64 {
        (self.data_offset() + self.meta.chunk_bytes).next_multiple_of(4096)
    }

    /// The chunk file's length: the data's end, or the reserve's.
    pub fn file_len(&self) -> u64 {
        match self.meta.reserve_bytes {
            0 => self.data_offset() + self.meta.chunk_bytes,
            r => self.reserve_offset() + r,
        }
    }

    /// The header's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let meta = &self.meta;
        let fixed = fixed_bytes(self.format);
        let mut b = vec![0u8; self.len()];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.format.to_le_bytes());
        b[12..16].copy_from_slice(&(BLOCK_BYTES as u32).to_le_bytes());
        b[16..24].copy_from_slice(&meta.segment_id.to_le_bytes());
        b[24..28].copy_from_slice(&meta.index.to_le_bytes());
        let mut flags = if self.dirty { FLAG_DIRTY } else { 0 };
        if self.format >= 3 {
            flags |= (meta.scheme.code() as u16) << SCHEME_SHIFT;
            b[64..72].copy_from_slice(&meta.reserve_bytes.to_le_bytes());
            b[72..80].copy_from_slice(&self.log_gen.to_le_bytes());
        }
        b[28..30].copy_from_slice(&flags.to_le_bytes());
        b[30..32].copy_from_slice(&(meta.applied.len() as u16).to_le_bytes());
        b[32..40].copy_from_slice(&meta.version.to_le_bytes());
        b[40..48].copy_from_slice(&meta.chunk_bytes.to_le_bytes());
        b[48..56].copy_from_slice(&meta.segment_length.to_le_bytes());
        for (i, a) in meta.applied.iter().enumerate() {
            b[fixed + 8 * i..fixed + 8 * i + 8].copy_from_slice(&a.to_le_bytes());
        }
        let crc = header_crc(&b);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

/// The fixed part of a header of `format`.
fn fixed_bytes(format: u32) -> usize {
    if format >= 3 {
        HEADER_BYTES
    } else {
        HEADER_BYTES_V2
    }
}

/// Bytes of a format-3 header with `applied` versions: the fixed 80 bytes and 8 per version.
pub fn header_bytes(applied: usize) -> usize {
    HEADER_BYTES + 8 * applied
}

/// Encode a new (format-3, generation-1) chunk header, with the dirty flag if `dirty`.
pub fn encode_header(meta: &ChunkMeta, dirty: bool) -> Vec<u8> {
    Header {
        dirty,
        ..Header::new(meta.clone())
    }
    .encode()
}

/// The header checksum: bytes 0..56 and everything from byte 64 (format 3's reserve and log
/// generation, and the applied versions).
fn header_crc(b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&b[0..56]), &b[HEADER_BYTES_V2..])
}

/// Little-endian integers at byte offsets of a checked buffer (chunk headers, log records, the
/// device store's table).
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    let mut w = [0u8; 2];
    w.copy_from_slice(&b[at..at + 2]);
    u16::from_le_bytes(w)
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Checks a chunk's fields (for headers read from disk and chunks arriving over the network).
pub fn check_meta(meta: &ChunkMeta) -> Result<(), String> {
    if meta.index >= MAX_CHUNKS {
        return Err(format!(
            "chunk index {} is not below {MAX_CHUNKS}",
            meta.index
        ));
    }
    if meta.chunk_bytes == 0 || meta.chunk_bytes > MAX_CHUNK_BYTES {
        return Err(format!(
            "chunk size {} is outside 1..={MAX_CHUNK_BYTES}",
            meta.chunk_bytes
        ));
    }
    if meta.segment_length == 0
        || meta.segment_length > ecstack_rpc::config::MAX_SEGMENT_BYTES
        || meta.segment_length > meta.chunk_bytes * u64::from(MAX_CHUNKS)
    {
        return Err(format!(
            "segment length {} does not fit chunks of {} bytes",
            meta.segment_length, meta.chunk_bytes
        ));
    }
    if meta.version == 0 {
        return Err("chunk version 0 (versions start at 1)".into());
    }
    if meta.applied.len() >= MAX_CHUNKS as usize {
        return Err(format!(
            "{} applied versions (a parity chunk has one per data chunk, below {MAX_CHUNKS})",
            meta.applied.len()
        ));
    }
    if let Some(a) = meta.applied.iter().find(|&&a| a == 0 || a > meta.version) {
        return Err(format!(
            "applied version {a} is outside 1..={} (the chunk's version)",
            meta.version
        ));
    }
    if meta.reserve_bytes > 0
        && (meta.scheme != UpdateScheme::Plr
            || meta.applied.is_empty()
            || !meta.reserve_bytes.is_multiple_of(BLOCK_BYTES as u64)
            || meta.reserve_bytes > MAX_RESERVE_BYTES)
    {
        return Err(format!(
            "a reserve of {} bytes: only a PLR parity chunk has one, a multiple of {BLOCK_BYTES} up to {MAX_RESERVE_BYTES}",
            meta.reserve_bytes
        ));
    }
    Ok(())
}

/// The number of applied versions a header announces (0 if the fixed part is unreadable).
pub fn applied_count(b: &[u8]) -> usize {
    b.get(30..32).map_or(0, |w| u16_at(w, 0) as usize)
}

/// Bytes of the header that starts `b` (its fixed part and applied versions), from its first 64
/// bytes: how much to read before [`decode_header`]. At least 64.
pub fn header_len_of(b: &[u8]) -> usize {
    let format = b.get(8..12).map_or(FORMAT_VERSION, |w| u32_at(w, 0));
    fixed_bytes(format) + 8 * applied_count(b)
}

/// Parse and validate a chunk header (format 2 or 3): any byte string gives a header or an error,
/// never a panic; an accepted header re-encodes to the same bytes.
pub fn decode_header(b: &[u8]) -> Result<Header, HeaderError> {
    if b.len() < HEADER_BYTES_V2 {
        return Err(HeaderError::TooShort {
            got: b.len(),
            need: HEADER_BYTES_V2,
        });
    }
    if b[0..8] != MAGIC {
        return Err(HeaderError::BadMagic);
    }
    let format = u32_at(b, 8);
    if !(FORMAT_OLDEST..=FORMAT_VERSION).contains(&format) {
        return Err(HeaderError::UnknownVersion { got: format });
    }
    let need = header_len_of(b);
    let Some(b) = b.get(..need) else {
        return Err(HeaderError::TooShort { got: b.len(), need });
    };
    let stored = u32_at(b, 56);
    let computed = header_crc(b);
    if stored != computed {
        return Err(HeaderError::Checksum { stored, computed });
    }
    let block = u32_at(b, 12);
    if block as usize != BLOCK_BYTES {
        return Err(HeaderError::Field(format!(
            "block size {block} (this build uses {BLOCK_BYTES})"
        )));
    }
    let flags = u16_at(b, 28);
    let known = if format >= 3 {
        FLAG_DIRTY | SCHEME_MASK
    } else {
        FLAG_DIRTY
    };
    if flags & !known != 0 || u32_at(b, 60) != 0 {
        return Err(HeaderError::Field(
            "reserved header bytes are not zero".into(),
        ));
    }
    let (scheme, reserve_bytes, log_gen) = if format >= 3 {
        let scheme = UpdateScheme::from_code(u32::from((flags & SCHEME_MASK) >> SCHEME_SHIFT))
            .map_err(HeaderError::Field)?;
        let gen = u64_at(b, 72);
        if gen == 0 {
            return Err(HeaderError::Field("log generation 0".into()));
        }
        (scheme, u64_at(b, 64), gen)
    } else {
        (UpdateScheme::Fo, 0, 1)
    };
    let fixed = fixed_bytes(format);
    let meta = ChunkMeta {
        segment_id: u64_at(b, 16),
        index: u32_at(b, 24),
        version: u64_at(b, 32),
        chunk_bytes: u64_at(b, 40),
        segment_length: u64_at(b, 48),
        applied: (0..applied_count(b))
            .map(|i| u64_at(b, fixed + 8 * i))
            .collect(),
        scheme,
        reserve_bytes,
    };
    check_meta(&meta).map_err(HeaderError::Field)?;
    if format < 3 && log_gen != 1 {
        return Err(HeaderError::Field("format 2 has no log".into()));
    }
    Ok(Header {
        meta,
        dirty: flags & FLAG_DIRTY != 0,
        format,
        log_gen,
    })
}

/// Data blocks of a chunk.
pub fn blocks(chunk_bytes: u64) -> u64 {
    chunk_bytes.div_ceil(BLOCK_BYTES as u64)
}

/// File offset of the block checksum table of a new (format-3) chunk.
pub fn table_offset(meta: &ChunkMeta) -> u64 {
    header_bytes(meta.applied.len()) as u64
}

/// File offset of the chunk bytes of a new (format-3) chunk.
pub fn data_offset(meta: &ChunkMeta) -> u64 {
    Header::new(meta.clone()).data_offset()
}

/// The chunk file's bytes before its data: header, checksum table (one crc32c per block of
/// `data`) and the zero padding up to [`data_offset`].
pub fn encode_prefix(meta: &ChunkMeta, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; data_offset(meta) as usize];
    write_prefix(&Header::new(meta.clone()), &mut b, data);
    b
}

/// Writes the header and the checksum table of `data` into `head` (at least the data offset's
/// bytes, zero after the table).
fn write_prefix(h: &Header, head: &mut [u8], data: &[u8]) {
    let t = h.table_offset() as usize;
    head[..t].copy_from_slice(&h.encode());
    for (i, block) in data.chunks(BLOCK_BYTES).enumerate() {
        let at = t + 4 * i;
        head[at..at + 4].copy_from_slice(&crc32c::crc32c(block).to_le_bytes());
    }
}

/// The whole chunk file image (header, checksum table, data) of a new chunk, without its reserve.
pub fn encode_chunk(meta: &ChunkMeta, data: &[u8]) -> Vec<u8> {
    let mut b = encode_prefix(meta, data);
    b.extend_from_slice(data);
    b
}

/// A whole chunk laid out as its file will be — room for the header and the checksum table, then
/// the data, zero-padded to [`DIRECT_ALIGN`] — in one buffer aligned for `O_DIRECT`, filled as the
/// data arrives: the holder of a forwarded chunk copies each frame once, straight into the bytes it
/// writes ([`ChunkStore::put_image`]).
pub struct ChunkImage {
    header: Header,
    buf: AlignedBuf,
    /// [`data_offset`] of `meta`.
    data_at: usize,
    /// Data bytes pushed so far.
    filled: usize,
}

impl ChunkImage {
    /// An empty image for `meta` (checked).
    pub fn new(meta: &ChunkMeta) -> std::result::Result<ChunkImage, String> {
        check_meta(meta)?;
        let header = Header::new(meta.clone());
        let data_at = header.data_offset() as usize;
        let len = (data_at + meta.chunk_bytes as usize).next_multiple_of(DIRECT_ALIGN);
        Ok(ChunkImage {
            header,
            buf: AlignedBuf::new(len),
            data_at,
            filled: 0,
        })
    }

    pub fn meta(&self) -> &ChunkMeta {
        &self.header.meta
    }

    /// Appends the chunk's next bytes; more than `chunk_bytes` in all is refused.
    pub fn push(&mut self, bytes: &[u8]) -> std::result::Result<(), String> {
        let cb = self.header.meta.chunk_bytes as usize;
        if bytes.len() > cb - self.filled {
            return Err(format!(
                "segment {:#x} chunk {}: more than its {cb} bytes sent",
                self.header.meta.segment_id, self.header.meta.index
            ));
        }
        let at = self.data_at + self.filled;
        self.buf.as_mut_slice()[at..at + bytes.len()].copy_from_slice(bytes);
        self.filled += bytes.len();
        Ok(())
    }

    /// Data bytes pushed so far.
    pub fn filled(&self) -> u64 {
        self.filled as u64
    }

    /// The data pushed so far.
    pub fn data(&self) -> &[u8] {
        &self.buf.as_slice()[self.data_at..self.data_at + self.filled]
    }

    /// The file's bytes (header and checksums written now), padded to [`DIRECT_ALIGN`], and the
    /// file's length. Only a complete image is sealed.
    fn seal(&mut self) -> (&[u8], usize) {
        debug_assert_eq!(
            self.filled as u64, self.header.meta.chunk_bytes,
            "sealed complete"
        );
        let (head, data) = self.buf.as_mut_slice().split_at_mut(self.data_at);
        write_prefix(&self.header, head, &data[..self.filled]);
        (self.buf.as_slice(), self.data_at + self.filled)
    }
}

/// What a [`ChunkStore`] refuses, one line each. `at` says where the backend keeps the chunk (a
/// file's path, a device and extent).
#[derive(Debug, thiserror::Error)]
pub enum ChunkStoreError {
    #[error("chunk store {at}: {op}: {source}")]
    Io {
        at: String,
        op: &'static str,
        source: std::io::Error,
    },
    #[error("chunk store {at} is in use by another OSD ({holder}); stop it first")]
    Locked { at: String, holder: String },
    /// The backing storage cannot hold or open a store (a device holding other data, a damaged
    /// device table, a spec the store refuses).
    #[error("chunk store {at}: {message}")]
    Backing { at: String, message: String },
    #[error("segment {segment:#x} chunk {index}: not stored here")]
    NotFound { segment: u64, index: u32 },
    #[error("segment {segment:#x} chunk {index}: corrupt header ({at}): {error}")]
    Header {
        segment: u64,
        index: u32,
        at: String,
        error: HeaderError,
    },
    #[error("{at} holds segment {got_segment:#x} chunk {got_index}, not segment {segment:#x} chunk {index}")]
    Misplaced {
        at: String,
        segment: u64,
        index: u32,
        got_segment: u64,
        got_index: u32,
    },
    #[error("segment {segment:#x} chunk {index}: {at} is {got} bytes, its header needs {want}")]
    Truncated {
        at: String,
        segment: u64,
        index: u32,
        got: u64,
        want: u64,
    },
    #[error("segment {segment:#x} chunk {index}: checksum mismatch in block {block} (bytes {}..{})", block * BLOCK_BYTES as u64, (block + 1) * BLOCK_BYTES as u64)]
    Checksum {
        segment: u64,
        index: u32,
        block: u64,
    },
    #[error("segment {segment:#x} chunk {index}: range {offset}+{len} is outside the chunk's {chunk_bytes} bytes")]
    Range {
        segment: u64,
        index: u32,
        offset: u64,
        len: u64,
        chunk_bytes: u64,
    },
    #[error(
        "segment {segment:#x} chunk {index}: an in-place change was cut short (dirty, {at}); the chunk must be rebuilt"
    )]
    Dirty {
        segment: u64,
        index: u32,
        at: String,
    },
    #[error("segment {segment:#x} chunk {index}: {message}")]
    Conflict {
        segment: u64,
        index: u32,
        message: String,
    },
    #[error("segment {segment:#x} chunk {index}: the reserve has {free} bytes free, the change needs {need}")]
    ReserveFull {
        segment: u64,
        index: u32,
        need: u64,
        free: u64,
    },
    #[error("segment {segment:#x} chunk {index}: corrupt log ({at}): {message}")]
    CorruptLog {
        segment: u64,
        index: u32,
        at: String,
        message: String,
    },
    #[error("segment {segment:#x} chunk {index}: {message}")]
    Invalid {
        segment: u64,
        index: u32,
        message: String,
    },
    /// A coded block failed a check (its record's head, a 4 KiB piece's checksum): it is lost,
    /// never served.
    #[error("object {object:#x} block {id}@{version}: lost: {message}")]
    BlockLost {
        object: u64,
        id: u32,
        version: u64,
        message: String,
    },
    /// Blocks the store refuses (a size other than the object's, too large).
    #[error("object {object:#x}: {message}")]
    BlocksInvalid { object: u64, message: String },
}

impl ChunkStoreError {
    /// The chunk's bytes cannot be trusted (checksum, header, size): treat it as missing and repair it.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            ChunkStoreError::Header { .. }
                | ChunkStoreError::Misplaced { .. }
                | ChunkStoreError::Truncated { .. }
                | ChunkStoreError::Checksum { .. }
                | ChunkStoreError::Dirty { .. }
                | ChunkStoreError::CorruptLog { .. }
                | ChunkStoreError::BlockLost { .. }
        )
    }
}

/// An in-place change of a chunk ([`ChunkStore::modify`]) and the versions it moves between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A data chunk's new bytes: refused unless the chunk is at version `expected` (0: any).
    Data { expected: u64, version: u64 },
    /// A parity delta: refused unless the parity includes exactly version `prior` of data chunk
    /// `from`; a no-op (the delta is not applied again) if it already includes `version`.
    Parity(DeltaStamp),
}

mod blocks;
mod log;

pub use blocks::{
    blocks_name, deletion_capacity, record_offset, record_span, BlockPart, BlockTable, Compacted,
    ObjectBlocks, StoredBlock, BLOCK_FILE_FORMAT, BLOCK_FILE_FORMAT_MIN, BLOCK_HEAD_BYTES,
    BLOCK_PIECE_BYTES, COMPACT_MIN_DEAD, HEAD_KEYS, STORE_MAX_BLOCK_BYTES,
};
pub use ecstack_mds_proto::RobustBlockKey as BlockKey;

use log::Record;
pub use log::{RecordKind, RECORD_ALIGN};

pub type Result<T, E = ChunkStoreError> = std::result::Result<T, E>;

/// What a store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreUsage {
    pub chunks: u64,
    /// Bytes of the chunk files (headers included) and of the block files.
    pub bytes: u64,
    /// PLR: bytes reserved after parity chunks for their deltas (used or not).
    pub reserve_bytes: u64,
    /// Bytes of logged changes not yet merged (FL, CodFS PL, PLR records).
    pub log_bytes: u64,
    /// Merges of logged changes into their chunks since the store was opened.
    pub merges: u64,
    /// Coded blocks of robust objects (each key once); their files' bytes are in `bytes`.
    pub blocks: u64,
}

/// A change applied to a chunk range in place by [`ChunkStore::modify`]: it receives the range's
/// current (verified) bytes and overwrites them.
pub type Modify<'a> = &'a mut dyn FnMut(&mut [u8]) -> std::result::Result<(), String>;

/// A change applied in place to several ranges (extents) of a chunk by
/// [`ChunkStore::modify_extents`]: called once per extent, in order, with the extent's position in
/// the list and its current (verified) bytes, which it overwrites.
pub type ModifyExtents<'a> = &'a mut dyn FnMut(usize, &mut [u8]) -> std::result::Result<(), String>;

/// The chunks of one OSD: the seam between the OSD's work and where chunks live (a directory of
/// files, [`FileStore`]; a block device with an extent allocator). Nothing in it names a file
/// system. What every backend guarantees, checked by [`crate::chunk_store_suite`] (every backend
/// runs it, power cuts at every operation included):
///
/// * **Durability on return.** A `put`, `put_image`, `modify` or `delete` that returns `Ok` has
///   reached stable media: it survives a power cut at any later point, and a reopened store serves
///   it.
/// * **Atomic puts and deletes.** A `put` or `delete` cut short by a power cut leaves the old chunk
///   (or none) or the new one, whole: never a mix, never a corrupt chunk.
/// * **In-place changes land whole or are detected.** A `modify` cut short leaves the old bytes
///   under the old header, the new bytes under the new header, or a chunk every read refuses as
///   corrupt ([`ChunkStoreError::is_corruption`]); never new bytes under the old versions or old
///   bytes under the new ones. The header (versions, applied versions, dirty flag) is updated
///   atomically: it is read whole, old or new, or refused.
/// * **Never served wrong.** A read returns the bytes last stored for that chunk and range or an
///   error; every byte it returns is verified (a checksum per [`BLOCK_BYTES`] block). Corruption is
///   one error line naming the segment and the chunk.
/// * **`list` after a power cut** names every chunk whose last acknowledged change was a put or
///   modify; a chunk whose put or delete was cut short may or may not be listed; a listed chunk
///   reads whole or is refused as corrupt. `usage` agrees with `list` after a reopen.
/// * **Exclusive.** One store (one OSD) uses the backing storage at a time; a second open is refused
///   ([`ChunkStoreError::Locked`]).
///
/// ```
/// use ecstack_osd::chunk_store::{Change, ChunkStore, FileStore, LogPlace};
/// use ecstack_osd::{ChunkMeta, UpdateScheme};
///
/// let dir = std::env::temp_dir().join(format!("ecstack-doc-{}", std::process::id()));
/// let store = FileStore::open(&dir).unwrap();
/// let meta = ChunkMeta {
///     segment_id: 7,
///     index: 0,
///     version: 1,
///     chunk_bytes: 5,
///     segment_length: 20,
///     applied: Vec::new(),
///     scheme: UpdateScheme::Fl,
///     reserve_bytes: 0,
/// };
/// store.put(&meta, b"hello").unwrap();
/// let change = Change::Data { expected: 1, version: 2 };
/// store.modify(7, 0, 0, 1, change, &mut |b| { b[0] = b'j'; Ok(()) }).unwrap();
/// assert_eq!(&store.read(7, 0, 0, 5).unwrap().1[..], b"jello");
/// // Under FL a change is logged beside the chunk; reads merge it.
/// let change = Change::Data { expected: 2, version: 3 };
/// store.append(7, 0, LogPlace::Log, &[4..5], b"y", change).unwrap();
/// assert_eq!(&store.read(7, 0, 0, 5).unwrap().1[..], b"jelly");
/// assert_eq!(store.merge(7, 0).unwrap(), 1);
/// assert_eq!(store.list().unwrap(), vec![(7, 0)]);
/// # drop(store);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub trait ChunkStore: Send + Sync {
    /// Store a whole chunk (create, or replace atomically). `data.len()` must be `meta.chunk_bytes`.
    fn put(&self, meta: &ChunkMeta, data: &[u8]) -> Result<()>;
    /// [`ChunkStore::put`] of a chunk received into an image (all `chunk_bytes` pushed).
    fn put_image(&self, image: ChunkImage) -> Result<()>;
    /// The header of a stored chunk (not its data), `None` if absent.
    fn meta(&self, segment: u64, index: u32) -> Result<Option<ChunkMeta>>;
    /// `len` bytes from `offset`, every touched block verified. The bytes may live in a buffer
    /// the store reuses once every clone of them is dropped.
    fn read(&self, segment: u64, index: u32, offset: u64, len: u64) -> Result<(ChunkMeta, Bytes)>;
    /// Change `len` bytes at `offset` in place and stamp the chunk with `change`'s version; returns
    /// the header as it was before (unchanged if the change was already applied). One extent of
    /// [`ChunkStore::modify_extents`].
    fn modify(
        &self,
        segment: u64,
        index: u32,
        offset: u64,
        len: u64,
        change: Change,
        f: Modify<'_>,
    ) -> Result<ChunkMeta> {
        let extent = offset..offset.saturating_add(len);
        self.modify_extents(segment, index, &[extent], change, &mut |_, b| f(b))
    }
    /// Change several ranges of a chunk in place as one change with one version stamp (an RDP
    /// parity delta touches rows apart from each other): `extents` sorted and disjoint (empty ones
    /// allowed), each inside the chunk, else refused before anything changes. Only the blocks the
    /// extents touch are read, verified and written, under one dirty-flag cycle: a crash leaves
    /// the old chunk, the new one (every extent changed), or a chunk refused as corrupt. Returns
    /// the header as it was before (unchanged, and `f` not called, if the change was already
    /// applied).
    fn modify_extents(
        &self,
        segment: u64,
        index: u32,
        extents: &[Range<u64>],
        change: Change,
        f: ModifyExtents<'_>,
    ) -> Result<ChunkMeta>;
    /// Remove a chunk; whether it was there.
    fn delete(&self, segment: u64, index: u32) -> Result<bool>;
    /// Every stored chunk, as (segment, index), sorted.
    fn list(&self) -> Result<Vec<(u64, u32)>>;
    fn usage(&self) -> StoreUsage;
    /// Appends a change to the chunk's log instead of changing it in place (FL, CodFS PL, PLR:
    /// the scheme's rules in `crate::update` choose `place`): `payload` is the bytes of `extents`
    /// (sorted, disjoint, inside the chunk) concatenated — a data chunk's new bytes
    /// ([`Change::Data`]: they replace the chunk's over the extents) or a parity delta
    /// ([`Change::Parity`]: XORed in). Checked against the chunk's merged versions as
    /// [`ChunkStore::modify_extents`] checks them (a parity delta already included is a no-op);
    /// durable on return (one fdatasync). Returns the merged header as it was before. A reserve
    /// without room for the record is [`ChunkStoreError::ReserveFull`], and nothing changes.
    fn append(
        &self,
        segment: u64,
        index: u32,
        place: LogPlace,
        extents: &[Range<u64>],
        payload: &[u8],
        change: Change,
    ) -> Result<ChunkMeta>;
    /// Merges the chunk's logged changes into its bytes in place (the dirty-flag cycle of
    /// [`ChunkStore::modify_extents`]) and empties its log; the number of changes merged.
    fn merge(&self, segment: u64, index: u32) -> Result<u64>;
    /// What the chunk's log holds, `None` if the chunk is absent.
    fn log_state(&self, segment: u64, index: u32) -> Result<Option<LogState>>;
    /// Sets the PLR reserve after a parity chunk to `bytes` (a multiple of [`BLOCK_BYTES`]); a
    /// shrink below the changes the reserve holds merges them first; the space cut off is given
    /// back to the file system. Starts a new measuring interval ([`LogState::peak_bytes`]).
    fn set_reserve(&self, segment: u64, index: u32, bytes: u64) -> Result<()>;
    /// The chunks that may hold logged changes or a reserve (a superset; sorted): what the OSD's
    /// Monitor Module looks at, without opening every chunk.
    fn logged(&self) -> Vec<(u64, u32)>;
    /// The pieces, contiguous on the storage below, that rebuilding the chunk reads: its bytes
    /// (header, checksums, data and PLR reserve) followed by its log (FL, CodFS PL), pieces that
    /// follow each other on the storage counted as one ([`count_fragments`]). At least 1 for a
    /// stored chunk; a parity and its contiguous reserve are 1. The seed's F_avg (Table 5.1,
    /// "non-contiguous fragments", 0 for FO and PLR) is the mean of `fragments − 1` over the
    /// chunks ([`f_avg`]).
    fn fragments(&self, segment: u64, index: u32) -> Result<u64>;

    // ---- Coded blocks of robust objects (`chunk_store/blocks.rs`) ----

    /// Appends coded blocks of robust object `object` (each `block_bytes` long, every block of an
    /// object the same size) after its stored ones, in the order given: durable on return (one
    /// fdatasync for the batch). A key already stored is replaced (the newer record wins).
    fn put_blocks(&self, object: u64, block_bytes: u32, blocks: &[(BlockKey, &[u8])])
        -> Result<()>;
    /// The object's block table (its blocks in stored order), `None` if no block of it is here.
    fn block_table(&self, object: u64) -> Result<Option<BlockTable>>;
    /// The object's blocks opened for reading ([`ObjectBlocks::read_block`]: verified, stoppable
    /// between 4 KiB pieces), `None` if no block of it is here.
    fn open_blocks(&self, object: u64) -> Result<Option<ObjectBlocks>>;
    /// Deletes the listed blocks of an object (`None`: all of them); how many were stored.
    /// Durable on return; some blocks: one small append (a deletion record, one fdatasync), the
    /// file is not rewritten ([`ChunkStore::compact_blocks`] gives the space back later).
    fn delete_blocks(&self, object: u64, keys: Option<&[BlockKey]>) -> Result<u32>;
    /// Every object with blocks here, sorted.
    fn objects(&self) -> Result<Vec<u64>>;
    /// Objects whose block files want compaction ([`BlockTable::wants_compaction`]: dead slots
    /// more than half of the file's and at least [`COMPACT_MIN_DEAD`]), sorted.
    fn compactable(&self) -> Vec<u64>;
    /// Rewrites an object's block file with only its live blocks, if it has dead slots: the live
    /// records are copied without the object's lock, `go_on` called before each (it may do other
    /// work, appends and deletions of this object included; `false` abandons the compaction),
    /// then the new file takes the place of the old one under the lock. A reader that opened the
    /// object before keeps reading what it opened. `None`: nothing done.
    fn compact_blocks(
        &self,
        object: u64,
        go_on: &mut dyn FnMut() -> bool,
    ) -> Result<Option<Compacted>>;
    /// Corrupts `part` of a stored block behind the store's back, durably (tests: rot is
    /// reported lost, never served).
    #[doc(hidden)]
    fn damage_block(&self, object: u64, key: BlockKey, part: BlockPart) -> Result<()>;
}

/// Pieces (offset, length) on the storage, in the order a reader reads them: how many contiguous
/// runs they make (empty pieces ignored; a piece starting where the last ended continues its run).
pub fn count_fragments(pieces: &[(u64, u64)]) -> u64 {
    let mut runs = 0;
    let mut end = None;
    for &(at, len) in pieces.iter().filter(|p| p.1 > 0) {
        if end != Some(at) {
            runs += 1;
        }
        end = Some(at + len);
    }
    runs
}

/// The seed's F_avg (§5.2, Table 5.1) of chunks with these [`ChunkStore::fragments`]: the mean
/// number of fragments beyond the first; 0 for no chunks.
pub fn f_avg(fragments: &[u64]) -> f64 {
    if fragments.is_empty() {
        return 0.0;
    }
    fragments.iter().map(|f| f.saturating_sub(1)).sum::<u64>() as f64 / fragments.len() as f64
}

/// Where [`ChunkStore::append`] puts a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogPlace {
    /// The chunk's log, apart from the chunk (FL, CodFS PL): a log file beside the chunk file.
    Log,
    /// The space reserved right after the chunk in its own file (PLR).
    Reserve,
}

/// A chunk's logged changes ([`ChunkStore::log_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogState {
    /// Changes logged and not merged.
    pub records: u64,
    /// Bytes they take in their log (padding included).
    pub bytes: u64,
    /// The PLR reserve's size (0: none).
    pub reserve_bytes: u64,
    /// The most bytes the log held at once since the last merge or reserve change (Algorithm 1's
    /// use(p)).
    pub peak_bytes: u64,
}

const LOCK_STRIPES: usize = 64;

/// How a [`FileStore`] writes. The OSD daemon sets it from `cluster.toml`'s `[osd]` section (and
/// `ecstack osd --direct-io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStoreOptions {
    /// Whole chunks are written with `O_DIRECT` where the file system takes it (the default), or
    /// through the page cache (for A/B measurements; docs/cluster.md "The OSD chunk store").
    pub direct: bool,
}

impl Default for FileStoreOptions {
    fn default() -> Self {
        FileStoreOptions { direct: true }
    }
}

/// [`ChunkStore`] over a directory ([`StoreDir`]): `<root>/LOCK` (held with `flock` while the
/// store is open), `<root>/chunks/<segment id, 16 hex digits>.<index, 3 digits>.chunk`, and beside
/// a chunk under FL or CodFS PL its log, `….log` ([`ChunkStore::append`] with [`LogPlace::Log`]).
pub struct FileStore {
    dir: Arc<dyn StoreDir>,
    root: PathBuf,
    stripes: Vec<Mutex<()>>,
    chunks: AtomicU64,
    bytes: AtomicU64,
    /// Bytes of PLR reserves, of logged changes not merged (log files and reserves), and merges.
    reserved: AtomicU64,
    logged: AtomicU64,
    merges: AtomicU64,
    options: FileStoreOptions,
    /// Buffers [`ChunkStore::read`] reads into, reused.
    buffers: Arc<ReadBuffers>,
    /// The log index of every chunk touched since the store opened that has one (replayed on
    /// first touch; kept up to date under the chunk's stripe lock).
    logs: Mutex<HashMap<(u64, u32), LogIndex>>,
    /// [`ChunkStore::logged`]: chunks with a reserve or a log file (from the open, then kept).
    with_logs: Mutex<std::collections::BTreeSet<(u64, u32)>>,
    /// Robust objects' block files: each one's table (replayed at the open, then kept), a lock
    /// per object (striped) for appends and deletions, the blocks and their files' bytes.
    objects: Mutex<HashMap<u64, blocks::ObjectState>>,
    block_stripes: Vec<Mutex<()>>,
    /// Held by a block-file compaction (one at a time: they share no state, but a temporary
    /// name each and the disk).
    compaction: Mutex<()>,
    blocks: AtomicU64,
    block_bytes: AtomicU64,
}

/// A chunk's logged changes, replayed: the records that change it (in order; repeated ones
/// dropped), where the next record goes, and the chunk's header with every record applied.
#[derive(Debug, Clone)]
struct LogIndex {
    records: Vec<Record>,
    /// Bytes of the log region in use (the next record's offset).
    end: u64,
    /// The most bytes in use at once since the last merge or reserve change.
    peak: u64,
    merged: ChunkMeta,
}

/// Buffers that chunk reads go into, taken back when the bytes handed out (and every slice of
/// them) are dropped. A fresh buffer of megabytes is zero-filled and then faulted in page by page
/// by the kernel's first copy into it: a tenth of an OSD's CPU in a get of page-cached chunks
/// (docs/benchmarks.md, issue 12). Buffers stay fully initialized, so reuse needs no `unsafe`.
#[derive(Default)]
struct ReadBuffers {
    free: Mutex<Vec<Vec<u8>>>,
}

/// At most this many buffers, and this many bytes, wait for reuse; the rest are freed.
const READ_BUFFERS_MAX: usize = 16;
const READ_BUFFER_BYTES_MAX: usize = 128 << 20;

impl ReadBuffers {
    /// A buffer of at least `n` bytes (contents unspecified): a free one no more than twice as
    /// large, or a new one.
    fn take(&self, n: usize) -> Vec<u8> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        match free
            .iter()
            .position(|b| b.len() >= n && b.len() <= n.saturating_mul(2).max(BLOCK_BYTES))
        {
            Some(i) => free.swap_remove(i),
            None => vec![0u8; n],
        }
    }

    fn give_back(&self, buf: Vec<u8>) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let held: usize = free.iter().map(Vec::len).sum();
        if free.len() < READ_BUFFERS_MAX && held + buf.len() <= READ_BUFFER_BYTES_MAX {
            free.push(buf);
        }
    }
}

/// The owner of a read's bytes inside a [`Bytes`]: the first `len` bytes of a pooled buffer,
/// returned to the pool on drop.
struct PooledRead {
    buf: Vec<u8>,
    len: usize,
    pool: Arc<ReadBuffers>,
}

impl AsRef<[u8]> for PooledRead {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for PooledRead {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileStore({})", self.root.display())
    }
}

fn io<'a>(at: &'a str, op: &'static str) -> impl FnOnce(std::io::Error) -> ChunkStoreError + 'a {
    move |source| ChunkStoreError::Io {
        at: at.to_owned(),
        op,
        source,
    }
}

fn dev<'a>(at: &'a str, op: &'static str) -> impl FnOnce(DeviceError) -> ChunkStoreError + 'a {
    move |e| io(at, op)(device_io(e))
}

/// The file name of a chunk.
pub fn chunk_name(segment: u64, index: u32) -> String {
    format!("{segment:016x}.{index:03}.chunk")
}

/// The file name of a chunk's log (FL, CodFS PL).
pub fn log_name(segment: u64, index: u32) -> String {
    format!("{segment:016x}.{index:03}.log")
}

fn parse_log_name(name: &str) -> Option<(u64, u32)> {
    parse_name(&format!("{}.chunk", name.strip_suffix(".log")?))
}

fn parse_name(name: &str) -> Option<(u64, u32)> {
    let stem = name.strip_suffix(".chunk")?;
    let (seg, idx) = stem.split_once('.')?;
    if seg.len() != 16 || idx.len() != 3 {
        return None;
    }
    Some((u64::from_str_radix(seg, 16).ok()?, idx.parse().ok()?))
}

/// A part of a stored chunk that [`FileStore::damage`] corrupts (tests).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// A byte of the header (the version field).
    Header,
    /// The checksum of data block `b`.
    Checksum(u64),
    /// A byte of data block `b`.
    Block(u64),
    /// The header rewritten with the dirty flag, as an in-place change cut short leaves it.
    Dirty,
    /// Byte `b` of the PLR reserve (where logged changes are).
    Reserve(u64),
}

impl FileStore {
    /// Open (or create) a store directory with the default options and lock it for this process.
    pub fn open(root: &Path) -> Result<FileStore> {
        Self::open_with(root, FileStoreOptions::default())
    }

    /// Open (or create) a store directory and lock it for this process.
    pub fn open_with(root: &Path, options: FileStoreOptions) -> Result<FileStore> {
        Self::on_dir(Arc::new(OsDir::open(root)?), options)
    }

    /// A store over any [`StoreDir`] (tests put one with power cuts under it): drops the leftovers
    /// of puts cut short and counts what the directory holds (reading each chunk's header for its
    /// reserve).
    pub fn on_dir(dir: Arc<dyn StoreDir>, options: FileStoreOptions) -> Result<FileStore> {
        let root = dir.root();
        let store = FileStore {
            root,
            dir,
            stripes: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            chunks: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            logged: AtomicU64::new(0),
            merges: AtomicU64::new(0),
            buffers: Arc::default(),
            options,
            logs: Mutex::default(),
            with_logs: Mutex::default(),
            objects: Mutex::default(),
            block_stripes: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            compaction: Mutex::new(()),
            blocks: AtomicU64::new(0),
            block_bytes: AtomicU64::new(0),
        };
        let at = store.root.display().to_string();
        // Leftovers of a put interrupted by a crash, and the usage counters.
        for (name, len) in store.dir.list().map_err(io(&at, "list"))? {
            if name.ends_with(".tmp") {
                store
                    .dir
                    .remove(&name)
                    .map_err(io(&store.at(&name), "remove temporary file"))?;
            } else if let Some((segment, index)) = parse_name(&name) {
                store.chunks.fetch_add(1, Ordering::Relaxed);
                store.bytes.fetch_add(len, Ordering::Relaxed);
                // A corrupt chunk counts no reserve; reads name its corruption.
                match store.open_chunk(segment, index, false) {
                    Ok(Some((_, _, h))) => {
                        store
                            .reserved
                            .fetch_add(h.meta.reserve_bytes, Ordering::Relaxed);
                        if h.meta.reserve_bytes > 0 {
                            store.note_logged(segment, index, true);
                        }
                    }
                    Ok(None) => {}
                    Err(e) if e.is_corruption() => {}
                    Err(e) => return Err(e),
                }
            } else if let Some(key) = parse_log_name(&name) {
                store.logged.fetch_add(len, Ordering::Relaxed);
                store.note_logged(key.0, key.1, true);
            } else if let Some(object) = blocks::parse_blocks_name(&name) {
                if let Some(state) = store.replay_blocks(&name, object)? {
                    store.note_object(object, state);
                }
            }
        }
        Ok(store)
    }

    pub fn options(&self) -> FileStoreOptions {
        self.options
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file of a chunk.
    pub fn chunk_path(&self, segment: u64, index: u32) -> PathBuf {
        self.dir.path(&chunk_name(segment, index))
    }

    /// The log file of a chunk (FL, CodFS PL), whether or not it exists.
    pub fn log_path(&self, segment: u64, index: u32) -> PathBuf {
        self.dir.path(&log_name(segment, index))
    }

    /// Where file `name` is, for messages.
    fn at(&self, name: &str) -> String {
        self.dir.path(name).display().to_string()
    }

    fn stripe(&self, segment: u64, index: u32) -> std::sync::MutexGuard<'_, ()> {
        let mut h = DefaultHasher::new();
        (segment, index).hash(&mut h);
        let m = &self.stripes[h.finish() as usize % LOCK_STRIPES];
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a chunk to [`ChunkStore::logged`] (or takes it out).
    fn note_logged(&self, segment: u64, index: u32, logged: bool) {
        let mut set = self.with_logs.lock().unwrap_or_else(|p| p.into_inner());
        if logged {
            set.insert((segment, index));
        } else {
            set.remove(&(segment, index));
        }
    }

    fn logs(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, u32), LogIndex>> {
        self.logs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Open a chunk file and read its validated header; `None` if absent.
    fn open_chunk(
        &self,
        segment: u64,
        index: u32,
        write: bool,
    ) -> Result<Option<(DirFile, String, Header)>> {
        let at = self.at(&chunk_name(segment, index));
        let Some(file) = self
            .dir
            .open(&chunk_name(segment, index), write)
            .map_err(io(&at, "open chunk"))?
        else {
            return Ok(None);
        };
        let len = file.capacity();
        let mut h = vec![0u8; (HEADER_BYTES_V2 as u64).min(len) as usize];
        file.read_at(&mut h, 0).map_err(dev(&at, "read header"))?;
        if h.len() == HEADER_BYTES_V2 && h[0..8] == MAGIC {
            let want = (header_len_of(&h) as u64).min(len) as usize;
            if want > h.len() {
                h.resize(want, 0);
                file.read_at(&mut h[HEADER_BYTES_V2..], HEADER_BYTES_V2 as u64)
                    .map_err(dev(&at, "read header"))?;
            }
        }
        let header = decode_header(&h).map_err(|error| ChunkStoreError::Header {
            segment,
            index,
            at: at.clone(),
            error,
        })?;
        if header.dirty {
            return Err(ChunkStoreError::Dirty { segment, index, at });
        }
        let meta = &header.meta;
        if meta.segment_id != segment || meta.index != index {
            return Err(ChunkStoreError::Misplaced {
                at,
                segment,
                index,
                got_segment: meta.segment_id,
                got_index: meta.index,
            });
        }
        let want = header.file_len();
        if len < want {
            return Err(ChunkStoreError::Truncated {
                at,
                segment,
                index,
                got: len,
                want,
            });
        }
        Ok(Some((file, at, header)))
    }

    /// Read and verify blocks `b0..b1` of an open chunk.
    fn read_blocks(
        file: &dyn BlockDevice,
        at: &str,
        h: &Header,
        b0: u64,
        b1: u64,
    ) -> Result<(Vec<u8>, Vec<u32>)> {
        let mut data = vec![0u8; Self::blocks_len(&h.meta, b0, b1)];
        let crcs = Self::read_blocks_into(file, at, h, b0, b1, &mut data)?;
        Ok((data, crcs))
    }

    /// Bytes of blocks `[b0, b1)` of the chunk (the last block may be short).
    fn blocks_len(meta: &ChunkMeta, b0: u64, b1: u64) -> usize {
        let start = b0 * BLOCK_BYTES as u64;
        let end = (b1 * BLOCK_BYTES as u64).min(meta.chunk_bytes);
        (end - start) as usize
    }

    /// Reads blocks `[b0, b1)` into `data` (exactly [`FileStore::blocks_len`] bytes) and verifies
    /// each against its crc32c; returns the checksums. The file is at least as long as its header
    /// says ([`FileStore::open_chunk`] checked).
    fn read_blocks_into(
        file: &dyn BlockDevice,
        at: &str,
        h: &Header,
        b0: u64,
        b1: u64,
        data: &mut [u8],
    ) -> Result<Vec<u32>> {
        let meta = &h.meta;
        debug_assert_eq!(data.len(), Self::blocks_len(meta, b0, b1));
        let start = b0 * BLOCK_BYTES as u64;
        file.read_at(data, h.data_offset() + start)
            .map_err(dev(at, "read chunk data"))?;
        let mut crcs = vec![0u8; 4 * (b1 - b0) as usize];
        file.read_at(&mut crcs, h.table_offset() + 4 * b0)
            .map_err(dev(at, "read checksums"))?;
        let crcs: Vec<u32> = (0..(b1 - b0) as usize)
            .map(|i| u32_at(&crcs, 4 * i))
            .collect();
        for (i, block) in data.chunks(BLOCK_BYTES).enumerate() {
            if crc32c::crc32c(block) != crcs[i] {
                return Err(ChunkStoreError::Checksum {
                    segment: meta.segment_id,
                    index: meta.index,
                    block: b0 + i as u64,
                });
            }
        }
        Ok(crcs)
    }

    fn check_range(meta: &ChunkMeta, offset: u64, len: u64) -> Result<()> {
        if offset.checked_add(len).is_none_or(|e| e > meta.chunk_bytes) {
            return Err(ChunkStoreError::Range {
                segment: meta.segment_id,
                index: meta.index,
                offset,
                len,
                chunk_bytes: meta.chunk_bytes,
            });
        }
        Ok(())
    }

    /// The bytes `[0, len)` of a chunk's log region: its reserve, or its log file (empty if there
    /// is none).
    fn read_region(
        &self,
        file: &dyn BlockDevice,
        at: &str,
        h: &Header,
        len: u64,
    ) -> Result<Vec<u8>> {
        let (segment, index) = (h.meta.segment_id, h.meta.index);
        if h.meta.reserve_bytes > 0 {
            let mut b = vec![0u8; len.min(h.meta.reserve_bytes) as usize];
            file.read_at(&mut b, h.reserve_offset())
                .map_err(dev(at, "read reserve"))?;
            return Ok(b);
        }
        let name = log_name(segment, index);
        let log_at = self.at(&name);
        let Some(log) = self
            .dir
            .open(&name, false)
            .map_err(io(&log_at, "open log"))?
        else {
            return Ok(Vec::new());
        };
        let mut b = vec![0u8; len.min(log.capacity()) as usize];
        log.read_at(&mut b, 0).map_err(dev(&log_at, "read log"))?;
        Ok(b)
    }

    /// The chunk's log index (replayed on first touch, then cached). Call under the stripe lock.
    /// A chunk that cannot have logged changes (format 2, FO, a data chunk under CodFS PL or PLR)
    /// is neither read for them nor cached: the get path of an FO cluster stays as it was.
    fn index(&self, file: &dyn BlockDevice, at: &str, h: &Header) -> Result<LogIndex> {
        if !may_log(h) {
            return Ok(LogIndex {
                records: Vec::new(),
                end: 0,
                peak: 0,
                merged: h.meta.clone(),
            });
        }
        let key = (h.meta.segment_id, h.meta.index);
        if let Some(i) = self.logs().get(&key) {
            return Ok(i.clone());
        }
        let idx = self.replay(file, at, h)?;
        self.logs().insert(key, idx.clone());
        Ok(idx)
    }

    /// Replays a chunk's log from its region (module `log`'s rules).
    fn replay(&self, file: &dyn BlockDevice, at: &str, h: &Header) -> Result<LogIndex> {
        let (segment, index) = (h.meta.segment_id, h.meta.index);
        let empty = LogIndex {
            records: Vec::new(),
            end: 0,
            peak: 0,
            merged: h.meta.clone(),
        };
        if h.format < 3 {
            return Ok(empty);
        }
        let region = self.read_region(file, at, h, u64::MAX)?;
        let corrupt = |message: String| ChunkStoreError::CorruptLog {
            segment,
            index,
            at: at.to_owned(),
            message,
        };
        let (records, end) = match log::scan(&region, h.log_gen, h.meta.chunk_bytes) {
            log::Scan::Records { records, end } => (records, end),
            log::Scan::Corrupt(m) => return Err(corrupt(m)),
        };
        let mut idx = LogIndex {
            end,
            peak: end,
            ..empty
        };
        for r in records {
            match stamped(&idx.merged, record_change(&r.head)) {
                Ok(Some(next)) => {
                    idx.merged = next;
                    idx.records.push(r);
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(corrupt(format!(
                        "logged change {} does not follow the ones before it: {e}",
                        r.head.seq
                    )))
                }
            }
        }
        Ok(idx)
    }

    /// Applies the logged changes of `idx` that overlap chunk bytes `[start, start + buf.len())`
    /// to `buf` (those bytes as stored in place), reading the log region once.
    fn overlay(
        &self,
        file: &dyn BlockDevice,
        at: &str,
        h: &Header,
        idx: &LogIndex,
        start: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let end = start + buf.len() as u64;
        let spans = payload_spans(idx, start, end);
        if spans.is_empty() {
            return Ok(());
        }
        // Only the payloads of the records that touch the range are read (runs of them whose
        // gaps are small read as one): a small read of a chunk with a long log (FL's data chunks
        // hold one record per update) reads what it needs, not the whole log.
        let log = if h.meta.reserve_bytes > 0 {
            None
        } else {
            let name = log_name(h.meta.segment_id, h.meta.index);
            let log_at = self.at(&name);
            match self
                .dir
                .open(&name, false)
                .map_err(io(&log_at, "open log"))?
            {
                Some(f) => Some((f, log_at)),
                None => {
                    return Err(ChunkStoreError::CorruptLog {
                        segment: h.meta.segment_id,
                        index: h.meta.index,
                        at: at.to_owned(),
                        message: "its log file is gone".into(),
                    })
                }
            }
        };
        // A span past the end of the region is cut there: its records then fail as corrupt.
        let limit = match &log {
            None => h.meta.reserve_bytes,
            Some((f, _)) => f.capacity(),
        };
        let mut pieces = Vec::with_capacity(spans.len());
        for (from, to) in spans {
            let mut b = vec![0u8; to.min(limit).saturating_sub(from) as usize];
            match &log {
                None => file
                    .read_at(&mut b, h.reserve_offset() + from)
                    .map_err(dev(at, "read reserve"))?,
                Some((f, log_at)) => f.read_at(&mut b, from).map_err(dev(log_at, "read log"))?,
            }
            pieces.push((from, b));
        }
        apply_records(&pieces, h, at, idx, start, buf)
    }

    /// Merges `idx`'s records into the chunk in place (dirty flag, blocks, clean header with the
    /// merged versions and the next log generation) and drops its log file; the new header.
    fn merge_locked(
        &self,
        file: &dyn BlockDevice,
        at: &str,
        h: &Header,
        idx: &LogIndex,
        reserve_bytes: u64,
    ) -> Result<Header> {
        let (segment, index) = (h.meta.segment_id, h.meta.index);
        let new = Header {
            meta: ChunkMeta {
                reserve_bytes,
                ..idx.merged.clone()
            },
            log_gen: h.log_gen + 1,
            ..h.clone()
        };
        if idx.records.is_empty() && idx.end == 0 && reserve_bytes == h.meta.reserve_bytes {
            return Ok(h.clone());
        }
        let runs = merge_runs(idx);
        let pieces = [(0, self.read_region(file, at, h, idx.end)?)];
        let mut bufs = Vec::with_capacity(runs.len());
        for &(b0, b1) in &runs {
            let (mut data, _) = Self::read_blocks(file, at, h, b0, b1)?;
            apply_records(&pieces, h, at, idx, b0 * BLOCK_BYTES as u64, &mut data)?;
            bufs.push((b0, data));
        }
        let dirty = Header {
            dirty: true,
            ..h.clone()
        };
        file.write_at(&dirty.encode(), 0)
            .map_err(dev(at, "write header"))?;
        file.flush().map_err(dev(at, "fsync chunk file"))?;
        for (b0, data) in &bufs {
            Self::write_blocks(file, at, h, *b0, data)?;
        }
        file.flush().map_err(dev(at, "fsync chunk file"))?;
        file.write_at(&new.encode(), 0)
            .map_err(dev(at, "write header"))?;
        file.flush().map_err(dev(at, "fsync chunk file"))?;
        // The log's records are of the old generation now: the file can go (a crash first leaves
        // a log of another generation, ignored and overwritten).
        if h.meta.reserve_bytes == 0 {
            let name = log_name(segment, index);
            if self
                .dir
                .remove(&name)
                .map_err(io(&self.at(&name), "remove log"))?
            {
                self.logged.fetch_sub(
                    idx.end.min(self.logged.load(Ordering::Relaxed)),
                    Ordering::Relaxed,
                );
            }
        } else {
            self.logged.fetch_sub(
                idx.end.min(self.logged.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
        }
        if !idx.records.is_empty() {
            self.merges.fetch_add(1, Ordering::Relaxed);
        }
        self.logs().insert(
            (segment, index),
            LogIndex {
                records: Vec::new(),
                end: 0,
                peak: 0,
                merged: new.meta.clone(),
            },
        );
        Ok(new)
    }

    /// Writes blocks from `b0` and their checksums (not flushed).
    fn write_blocks(
        file: &dyn BlockDevice,
        at: &str,
        h: &Header,
        b0: u64,
        data: &[u8],
    ) -> Result<()> {
        let mut crcs = Vec::with_capacity(4 * data.len().div_ceil(BLOCK_BYTES));
        for block in data.chunks(BLOCK_BYTES) {
            crcs.extend_from_slice(&crc32c::crc32c(block).to_le_bytes());
        }
        file.write_at(data, h.data_offset() + b0 * BLOCK_BYTES as u64)
            .map_err(dev(at, "write chunk data"))?;
        file.write_at(&crcs, h.table_offset() + 4 * b0)
            .map_err(dev(at, "write checksums"))
    }

    /// Opens a chunk for a change: its file, header and log index; not found is an error.
    fn open_for_change(
        &self,
        segment: u64,
        index: u32,
    ) -> Result<(DirFile, String, Header, LogIndex)> {
        let (file, at, h) = self
            .open_chunk(segment, index, true)?
            .ok_or(ChunkStoreError::NotFound { segment, index })?;
        let idx = self.index(&*file, &at, &h)?;
        Ok((file, at, h, idx))
    }

    /// Corrupts `part` of a stored chunk behind the store's back, durably (tests: every backend's
    /// corruption is named and never served). The header is read raw, so a chunk whose header is
    /// already corrupt can only take [`Part::Header`] and [`Part::Dirty`].
    #[doc(hidden)]
    pub fn damage(&self, segment: u64, index: u32, part: Part) -> Result<()> {
        let name = chunk_name(segment, index);
        let at = self.at(&name);
        let file = self
            .dir
            .open(&name, true)
            .map_err(io(&at, "open chunk"))?
            .ok_or(ChunkStoreError::NotFound { segment, index })?;
        let mut h = vec![0u8; HEADER_BYTES_V2];
        file.read_at(&mut h, 0).map_err(dev(&at, "read header"))?;
        h.resize(header_len_of(&h), 0);
        file.read_at(&mut h[HEADER_BYTES_V2..], HEADER_BYTES_V2 as u64)
            .map_err(dev(&at, "read header"))?;
        let flip = |offset: u64| -> Result<()> {
            let mut b = [0u8];
            file.read_at(&mut b, offset).map_err(dev(&at, "read"))?;
            b[0] ^= 0x10;
            file.write_at(&b, offset).map_err(dev(&at, "write"))
        };
        let decoded = || {
            decode_header(&h).map_err(|error| ChunkStoreError::Header {
                segment,
                index,
                at: at.clone(),
                error,
            })
        };
        match part {
            Part::Header => flip(33)?,
            Part::Dirty => {
                let header = Header {
                    dirty: true,
                    ..decoded()?
                };
                file.write_at(&header.encode(), 0)
                    .map_err(dev(&at, "write header"))?;
            }
            Part::Checksum(b) => flip(h.len() as u64 + 4 * b + 1)?,
            Part::Block(b) => flip(decoded()?.data_offset() + b * BLOCK_BYTES as u64 + 5)?,
            Part::Reserve(byte) => flip(decoded()?.reserve_offset() + byte)?,
        }
        file.flush().map_err(dev(&at, "flush"))?;
        self.logs().remove(&(segment, index));
        Ok(())
    }
}

/// Whether a record changes any of chunk bytes `[start, end)`.
fn touches(r: &Record, start: u64, end: u64) -> bool {
    r.head
        .extents
        .iter()
        .any(|e| e.start < end && e.end > start)
}

/// Records apart by at most this many bytes of the log are read as one piece.
const LOG_READ_GAP_BYTES: u64 = 64 << 10;

/// Runs of chunk blocks a merge rewrites that lie at most this many bytes apart are read and
/// written as one piece, the blocks between them rewritten as they were: on a disk a seek costs
/// about a MiB of transfer (the `eplog-hdd` profile: 6.8 ms per random 4 KiB read, 150 MB/s), and
/// a PLR parity's reserve of 128 KiB deltas spread over its chunk otherwise merged as one random
/// read and one random write per delta, where the seed's merge reads the parity and its reserve
/// sequentially (CodFS §4.1.2).
const MERGE_GAP_BYTES: u64 = 1 << 20;

/// The runs of chunk blocks `[b0, b1)` a merge of `idx`'s records reads and rewrites, in order:
/// the blocks the records' extents touch, runs at most [`MERGE_GAP_BYTES`] apart joined.
fn merge_runs(idx: &LogIndex) -> Vec<(u64, u64)> {
    let gap_blocks = MERGE_GAP_BYTES / BLOCK_BYTES as u64;
    let mut spans: Vec<(u64, u64)> = idx
        .records
        .iter()
        .flat_map(|r| r.head.extents.iter())
        .filter(|e| !e.is_empty())
        .map(|e| {
            (
                e.start / BLOCK_BYTES as u64,
                e.end.div_ceil(BLOCK_BYTES as u64),
            )
        })
        .collect();
    spans.sort_unstable();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (b0, b1) in spans {
        match runs.last_mut() {
            Some(last) if b0 <= last.1.saturating_add(gap_blocks) => last.1 = last.1.max(b1),
            _ => runs.push((b0, b1)),
        }
    }
    runs
}

/// The byte ranges of the log (from its start) holding the payloads of the records of `idx` that
/// touch chunk bytes `[start, end)`, in order, runs closer than [`LOG_READ_GAP_BYTES`] joined.
fn payload_spans(idx: &LogIndex, start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for r in idx.records.iter().filter(|r| touches(r, start, end)) {
        let (from, to) = (r.payload_at, r.payload_at + u64::from(r.head.payload_len));
        match spans.last_mut() {
            Some(last) if from >= last.1 && from - last.1 <= LOG_READ_GAP_BYTES => last.1 = to,
            _ => spans.push((from, to)),
        }
    }
    spans
}

/// Applies the records of `idx` touching `[start, start + buf.len())` to `buf`, their payloads
/// taken from `pieces` (log bytes read: (offset in the log, bytes)); a payload that is not in
/// them, or fails its crc, makes the log corrupt.
fn apply_records(
    pieces: &[(u64, Vec<u8>)],
    h: &Header,
    at: &str,
    idx: &LogIndex,
    start: u64,
    buf: &mut [u8],
) -> Result<()> {
    let end = start + buf.len() as u64;
    for r in idx.records.iter().filter(|r| touches(r, start, end)) {
        let (from, to) = (r.payload_at, r.payload_at + u64::from(r.head.payload_len));
        let payload = pieces
            .iter()
            .find(|(at, b)| *at <= from && to <= at + b.len() as u64)
            .map(|(at, b)| &b[(from - at) as usize..(to - at) as usize])
            .filter(|p| crc32c::crc32c(p) == r.head.payload_crc)
            .ok_or_else(|| ChunkStoreError::CorruptLog {
                segment: h.meta.segment_id,
                index: h.meta.index,
                at: at.to_owned(),
                message: format!("logged change {} no longer reads back", r.head.seq),
            })?;
        let mut from = 0usize;
        for e in &r.head.extents {
            let len = (e.end - e.start) as usize;
            let (lo, hi) = (e.start.max(start), e.end.min(end));
            if lo < hi {
                let src = &payload[from + (lo - e.start) as usize..from + (hi - e.start) as usize];
                let dst = &mut buf[(lo - start) as usize..(hi - start) as usize];
                match r.head.kind {
                    RecordKind::Data => dst.copy_from_slice(src),
                    RecordKind::Parity => {
                        // Equal lengths by construction.
                        let _ = ecstack_codes::xor_into(dst, src);
                    }
                }
            }
            from += len;
        }
    }
    Ok(())
}

/// Whether a chunk can hold logged changes: format 3, and its scheme logs its kind of change (or it
/// has a reserve).
fn may_log(h: &Header) -> bool {
    let m = &h.meta;
    h.format >= 3
        && (m.reserve_bytes > 0
            || m.scheme.logs_data()
            || (m.scheme.logs_parity() && !m.applied.is_empty()))
}

/// The change a record makes, as [`stamped`] checks it.
fn record_change(head: &log::RecordHead) -> Change {
    match head.kind {
        RecordKind::Data => Change::Data {
            expected: head.stamp.prior,
            version: head.stamp.version,
        },
        RecordKind::Parity => Change::Parity(head.stamp),
    }
}

/// Refuses extents that are not sorted and disjoint, or reach outside the chunk (nothing changes).
fn check_extents(meta: &ChunkMeta, extents: &[Range<u64>]) -> Result<()> {
    let mut end = 0;
    for e in extents {
        if e.start > e.end || e.end > meta.chunk_bytes {
            return Err(ChunkStoreError::Range {
                segment: meta.segment_id,
                index: meta.index,
                offset: e.start,
                len: e.end.saturating_sub(e.start),
                chunk_bytes: meta.chunk_bytes,
            });
        }
        if e.start < end {
            return Err(ChunkStoreError::Invalid {
                segment: meta.segment_id,
                index: meta.index,
                message: format!(
                    "extent {}..{} starts before the one before it ends ({end}): extents must be sorted and disjoint",
                    e.start, e.end
                ),
            });
        }
        end = e.end;
    }
    Ok(())
}

/// The runs of blocks `[b0, b1)` that sorted, disjoint `extents` touch, in order; extents sharing
/// a block or in adjacent blocks make one run.
fn block_runs(extents: &[Range<u64>]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for e in extents.iter().filter(|e| !e.is_empty()) {
        let (b0, b1) = (
            e.start / BLOCK_BYTES as u64,
            e.end.div_ceil(BLOCK_BYTES as u64),
        );
        match runs.last_mut() {
            Some(last) if b0 <= last.1 => last.1 = last.1.max(b1),
            _ => runs.push((b0, b1)),
        }
    }
    runs
}

/// The header after `change`, `None` if the change is already applied (a repeated parity delta), or
/// a conflict if the chunk is not at the versions the change was computed against.
fn stamped(meta: &ChunkMeta, change: Change) -> Result<Option<ChunkMeta>> {
    let conflict = |message: String| ChunkStoreError::Conflict {
        segment: meta.segment_id,
        index: meta.index,
        message,
    };
    let invalid = |message: String| ChunkStoreError::Invalid {
        segment: meta.segment_id,
        index: meta.index,
        message,
    };
    match change {
        Change::Data { expected, version } => {
            if !meta.applied.is_empty() {
                return Err(invalid("a parity chunk takes deltas, not data".into()));
            }
            if version <= meta.version {
                return Err(conflict(format!(
                    "new version {version} is not above the chunk's {}",
                    meta.version
                )));
            }
            if expected != 0 && meta.version != expected {
                return Err(conflict(format!(
                    "chunk is at version {}, the primary expects {expected}: stale, not updated",
                    meta.version
                )));
            }
            Ok(Some(ChunkMeta {
                version,
                ..meta.clone()
            }))
        }
        Change::Parity(d) => {
            let Some(&have) = meta.applied.get(d.from as usize) else {
                return Err(invalid(format!(
                    "a delta of data chunk {} for a parity chunk of {} data chunks",
                    d.from,
                    meta.applied.len()
                )));
            };
            if have == d.version {
                return Ok(None);
            }
            if have != d.prior || d.version <= d.prior {
                return Err(conflict(format!(
                    "parity includes version {have} of data chunk {}, the delta goes from {} to {}: stale, not applied",
                    d.from, d.prior, d.version
                )));
            }
            let mut applied = meta.applied.clone();
            applied[d.from as usize] = d.version;
            Ok(Some(ChunkMeta {
                version: meta.version.max(d.version),
                applied,
                ..meta.clone()
            }))
        }
    }
}

impl ChunkStore for FileStore {
    fn put(&self, meta: &ChunkMeta, data: &[u8]) -> Result<()> {
        let invalid = |message: String| ChunkStoreError::Invalid {
            segment: meta.segment_id,
            index: meta.index,
            message,
        };
        if data.len() as u64 != meta.chunk_bytes {
            check_meta(meta).map_err(invalid)?;
            return Err(invalid(format!(
                "{} data bytes for a chunk of {}",
                data.len(),
                meta.chunk_bytes
            )));
        }
        let mut image = ChunkImage::new(meta).map_err(invalid)?;
        image.push(data).map_err(invalid)?;
        self.put_image(image)
    }

    /// The chunk's old log file (if any) goes first, so that no record of the chunk this put
    /// replaces can apply to the new one; the image goes to `….chunk.tmp` (preallocated,
    /// `O_DIRECT` unless the options say otherwise, its reserve allocated after it), which is
    /// flushed, renamed over the chunk's file, and the directory synced.
    fn put_image(&self, mut image: ChunkImage) -> Result<()> {
        let meta = image.header.meta.clone();
        if image.filled() != meta.chunk_bytes {
            return Err(ChunkStoreError::Invalid {
                segment: meta.segment_id,
                index: meta.index,
                message: format!(
                    "{} data bytes for a chunk of {}",
                    image.filled(),
                    meta.chunk_bytes
                ),
            });
        }
        let (segment, index) = (meta.segment_id, meta.index);
        let _g = self.stripe(segment, index);
        let old_reserve = match self.open_chunk(segment, index, false) {
            Ok(Some((_, _, h))) => h.meta.reserve_bytes,
            _ => 0,
        };
        let log = log_name(segment, index);
        if let Some(len) = self.dir.len(&log).map_err(io(&self.at(&log), "stat log"))? {
            self.dir
                .remove(&log)
                .map_err(io(&self.at(&log), "remove log"))?;
            self.logged.fetch_sub(
                len.min(self.logged.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
        }
        self.logs().remove(&(segment, index));
        let name = chunk_name(segment, index);
        let tmp = format!("{name}.tmp");
        let (at, tmp_at) = (self.at(&name), self.at(&tmp));
        let total = image.header.file_len();
        let (bytes, file_len) = image.seal();
        let file = self
            .dir
            .create(&tmp, bytes, file_len, self.options.direct)
            .map_err(io(&tmp_at, "write chunk file"))?;
        file.flush().map_err(dev(&tmp_at, "fsync chunk file"))?;
        drop(file);
        if total > file_len as u64 {
            self.dir
                .set_len(&tmp, total)
                .map_err(io(&tmp_at, "allocate reserve"))?;
        }
        let old = self.dir.len(&name).map_err(io(&at, "stat chunk"))?;
        self.dir
            .rename(&tmp, &name)
            .map_err(io(&at, "rename chunk file"))?;
        self.dir
            .sync()
            .map_err(io(&self.root.display().to_string(), "fsync directory"))?;
        match old {
            Some(len) => {
                self.bytes.fetch_sub(len, Ordering::Relaxed);
            }
            None => {
                self.chunks.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.bytes.fetch_add(total, Ordering::Relaxed);
        self.reserved.fetch_sub(
            old_reserve.min(self.reserved.load(Ordering::Relaxed)),
            Ordering::Relaxed,
        );
        self.reserved
            .fetch_add(meta.reserve_bytes, Ordering::Relaxed);
        self.note_logged(segment, index, meta.reserve_bytes > 0);
        Ok(())
    }

    fn meta(&self, segment: u64, index: u32) -> Result<Option<ChunkMeta>> {
        let _g = self.stripe(segment, index);
        let Some((file, at, h)) = self.open_chunk(segment, index, false)? else {
            return Ok(None);
        };
        Ok(Some(self.index(&*file, &at, &h)?.merged))
    }

    fn read(&self, segment: u64, index: u32, offset: u64, len: u64) -> Result<(ChunkMeta, Bytes)> {
        let _g = self.stripe(segment, index);
        let (file, at, h) = self
            .open_chunk(segment, index, false)?
            .ok_or(ChunkStoreError::NotFound { segment, index })?;
        let idx = self.index(&*file, &at, &h)?;
        Self::check_range(&h.meta, offset, len)?;
        if len == 0 {
            return Ok((idx.merged, Bytes::new()));
        }
        let b0 = offset / BLOCK_BYTES as u64;
        let b1 = (offset + len).div_ceil(BLOCK_BYTES as u64);
        let n = Self::blocks_len(&h.meta, b0, b1);
        let mut buf = self.buffers.take(n);
        Self::read_blocks_into(&*file, &at, &h, b0, b1, &mut buf[..n])?;
        self.overlay(
            &*file,
            &at,
            &h,
            &idx,
            b0 * BLOCK_BYTES as u64,
            &mut buf[..n],
        )?;
        let from = (offset - b0 * BLOCK_BYTES as u64) as usize;
        let data = Bytes::from_owner(PooledRead {
            buf,
            len: n,
            pool: self.buffers.clone(),
        });
        // The range inside the whole blocks read: a slice, no copy.
        Ok((idx.merged, data.slice(from..from + len as usize)))
    }

    /// Merges the chunk's logged changes first (if any); then reads and verifies the runs of
    /// blocks the extents touch (adjacent or shared blocks read once), lets `f` change each
    /// extent, then writes, in order, each step flushed before the next: the header with the dirty
    /// flag, every run's blocks and checksums, the header with the new versions and without the
    /// flag (three fdatasyncs, however many extents).
    fn modify_extents(
        &self,
        segment: u64,
        index: u32,
        extents: &[Range<u64>],
        change: Change,
        f: ModifyExtents<'_>,
    ) -> Result<ChunkMeta> {
        let _g = self.stripe(segment, index);
        let (file, at, mut h, idx) = self.open_for_change(segment, index)?;
        check_extents(&idx.merged, extents)?;
        let Some(stamp) = stamped(&idx.merged, change)? else {
            return Ok(idx.merged);
        };
        let before = idx.merged.clone();
        if !idx.records.is_empty() {
            h = self.merge_locked(&*file, &at, &h, &idx, h.meta.reserve_bytes)?;
        }
        let new = Header {
            meta: stamp,
            ..h.clone()
        };
        let mut runs = Vec::new();
        for (b0, b1) in block_runs(extents) {
            let (data, _) = Self::read_blocks(&*file, &at, &h, b0, b1)?;
            runs.push((b0, data));
        }
        let mut run = 0;
        for (i, e) in extents.iter().enumerate() {
            let mut empty = [0u8; 0];
            let bytes: &mut [u8] = if e.is_empty() {
                &mut empty
            } else {
                // Runs and extents are both in order: the extent's run is this one or a later one.
                while runs[run].0 * BLOCK_BYTES as u64 + runs[run].1.len() as u64 <= e.start {
                    run += 1;
                }
                let (b0, data) = &mut runs[run];
                let from = (e.start - *b0 * BLOCK_BYTES as u64) as usize;
                &mut data[from..from + (e.end - e.start) as usize]
            };
            f(i, bytes).map_err(|message| ChunkStoreError::Invalid {
                segment,
                index,
                message,
            })?;
        }
        // Dirty first (durable), so that a crash between the blocks and the header never leaves
        // new bytes under the old versions (or the reverse) looking valid.
        let dirty = Header {
            dirty: true,
            ..h.clone()
        };
        file.write_at(&dirty.encode(), 0)
            .map_err(dev(&at, "write header"))?;
        file.flush().map_err(dev(&at, "fsync chunk file"))?;
        for (b0, data) in &runs {
            Self::write_blocks(&*file, &at, &h, *b0, data)?;
        }
        // And the blocks durable before the clean header: writes between two flushes reach the
        // media in any order, and the new header over the old blocks (and their old checksums)
        // would read back as valid (found by chunk_store_suite::power_cuts, any-order policy).
        file.flush().map_err(dev(&at, "fsync chunk file"))?;
        file.write_at(&new.encode(), 0)
            .map_err(dev(&at, "write header"))?;
        file.flush().map_err(dev(&at, "fsync chunk file"))?;
        if may_log(&new) {
            self.logs().insert(
                (segment, index),
                LogIndex {
                    records: Vec::new(),
                    end: if idx.records.is_empty() { idx.end } else { 0 },
                    peak: if idx.records.is_empty() { idx.peak } else { 0 },
                    merged: new.meta.clone(),
                },
            );
        }
        Ok(before)
    }

    fn delete(&self, segment: u64, index: u32) -> Result<bool> {
        let _g = self.stripe(segment, index);
        let name = chunk_name(segment, index);
        let at = self.at(&name);
        let reserve = match self.open_chunk(segment, index, false) {
            Ok(Some((_, _, h))) => h.meta.reserve_bytes,
            _ => 0,
        };
        let Some(len) = self.dir.len(&name).map_err(io(&at, "stat chunk"))? else {
            return Ok(false);
        };
        self.dir
            .remove(&name)
            .map_err(io(&at, "remove chunk file"))?;
        let log = log_name(segment, index);
        if let Some(log_len) = self.dir.len(&log).map_err(io(&self.at(&log), "stat log"))? {
            self.dir
                .remove(&log)
                .map_err(io(&self.at(&log), "remove log"))?;
            self.logged.fetch_sub(
                log_len.min(self.logged.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
        }
        self.dir
            .sync()
            .map_err(io(&self.root.display().to_string(), "fsync directory"))?;
        self.logs().remove(&(segment, index));
        self.note_logged(segment, index, false);
        self.chunks.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(len, Ordering::Relaxed);
        self.reserved.fetch_sub(
            reserve.min(self.reserved.load(Ordering::Relaxed)),
            Ordering::Relaxed,
        );
        Ok(true)
    }

    fn list(&self) -> Result<Vec<(u64, u32)>> {
        let at = self.root.display().to_string();
        let mut out: Vec<(u64, u32)> = (self.dir.list().map_err(io(&at, "list"))?)
            .iter()
            .filter_map(|(name, _)| parse_name(name))
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    fn usage(&self) -> StoreUsage {
        StoreUsage {
            chunks: self.chunks.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed) + self.block_bytes.load(Ordering::Relaxed),
            blocks: self.blocks.load(Ordering::Relaxed),
            reserve_bytes: self.reserved.load(Ordering::Relaxed),
            log_bytes: self.logged.load(Ordering::Relaxed),
            merges: self.merges.load(Ordering::Relaxed),
        }
    }

    /// The record goes right after the log's last one: in the reserve (one write and one
    /// fdatasync of the chunk file), or in the log file (the same, the file growing; a new log
    /// file's name is synced too).
    fn append(
        &self,
        segment: u64,
        index: u32,
        place: LogPlace,
        extents: &[Range<u64>],
        payload: &[u8],
        change: Change,
    ) -> Result<ChunkMeta> {
        let _g = self.stripe(segment, index);
        let (file, at, h, mut idx) = self.open_for_change(segment, index)?;
        let invalid = |message: String| ChunkStoreError::Invalid {
            segment,
            index,
            message,
        };
        if h.format < 3 {
            return Err(invalid(format!(
                "chunk format {} keeps no log (its changes are in place)",
                h.format
            )));
        }
        check_extents(&idx.merged, extents)?;
        let sum: u64 = extents.iter().map(|e| e.end - e.start).sum();
        if sum != payload.len() as u64 || extents.len() > log::RECORD_EXTENTS_MAX {
            return Err(invalid(format!(
                "{} extents cover {sum} bytes, the change has {}",
                extents.len(),
                payload.len()
            )));
        }
        let Some(next) = stamped(&idx.merged, change)? else {
            return Ok(idx.merged);
        };
        let (kind, stamp) = match change {
            Change::Data { version, .. } => (
                RecordKind::Data,
                DeltaStamp {
                    from: index,
                    prior: idx.merged.version,
                    version,
                },
            ),
            Change::Parity(s) => (RecordKind::Parity, s),
        };
        let seq = idx.records.len() as u32 + 1;
        let record = log::encode_record(kind, h.log_gen, seq, stamp, extents, payload);
        let span = record.len() as u64;
        match place {
            LogPlace::Reserve => {
                let free = h.meta.reserve_bytes.saturating_sub(idx.end);
                if span > free {
                    return Err(ChunkStoreError::ReserveFull {
                        segment,
                        index,
                        need: span,
                        free,
                    });
                }
                file.write_at(&record, h.reserve_offset() + idx.end)
                    .map_err(dev(&at, "append to reserve"))?;
                file.flush().map_err(dev(&at, "fsync chunk file"))?;
            }
            LogPlace::Log => {
                let logs = match kind {
                    RecordKind::Data => h.meta.scheme.logs_data(),
                    RecordKind::Parity => {
                        h.meta.scheme.logs_parity() && h.meta.scheme != UpdateScheme::Plr
                    }
                };
                if h.meta.reserve_bytes > 0 || !logs {
                    return Err(invalid(format!(
                        "a chunk stored under {} keeps no log of this change",
                        h.meta.scheme
                    )));
                }
                let name = log_name(segment, index);
                let log_at = self.at(&name);
                if self
                    .dir
                    .write_grow(&name, idx.end, &record)
                    .map_err(io(&log_at, "append to log"))?
                {
                    self.dir
                        .sync()
                        .map_err(io(&self.root.display().to_string(), "fsync directory"))?;
                }
            }
        }
        let before = idx.merged.clone();
        idx.records.push(Record {
            payload_at: idx.end + head_len(extents.len()),
            head: log::RecordHead {
                kind,
                log_gen: h.log_gen,
                seq,
                stamp,
                extents: extents.to_vec(),
                payload_len: payload.len() as u32,
                payload_crc: crc32c::crc32c(payload),
            },
        });
        idx.end += span;
        idx.peak = idx.peak.max(idx.end);
        idx.merged = next;
        self.logged.fetch_add(span, Ordering::Relaxed);
        self.note_logged(segment, index, true);
        self.logs().insert((segment, index), idx);
        Ok(before)
    }

    fn merge(&self, segment: u64, index: u32) -> Result<u64> {
        let _g = self.stripe(segment, index);
        let (file, at, h, idx) = self.open_for_change(segment, index)?;
        let n = idx.records.len() as u64;
        if n > 0 {
            self.merge_locked(&*file, &at, &h, &idx, h.meta.reserve_bytes)?;
        }
        Ok(n)
    }

    fn log_state(&self, segment: u64, index: u32) -> Result<Option<LogState>> {
        let _g = self.stripe(segment, index);
        let Some((file, at, h)) = self.open_chunk(segment, index, false)? else {
            return Ok(None);
        };
        let idx = self.index(&*file, &at, &h)?;
        Ok(Some(LogState {
            records: idx.records.len() as u64,
            bytes: idx.end,
            reserve_bytes: h.meta.reserve_bytes,
            peak_bytes: idx.peak,
        }))
    }

    fn logged(&self) -> Vec<(u64, u32)> {
        self.logged_keys()
    }

    /// From the directory's map of each file (`FIEMAP` on a real one, the allocator's extents on
    /// a device): the chunk file's pieces, then its log file's.
    fn fragments(&self, segment: u64, index: u32) -> Result<u64> {
        let _g = self.stripe(segment, index);
        let (name, log) = (chunk_name(segment, index), log_name(segment, index));
        let mut pieces = self
            .dir
            .extents(&name)
            .map_err(io(&self.at(&name), "map chunk file"))?
            .ok_or(ChunkStoreError::NotFound { segment, index })?;
        if let Some(l) = self
            .dir
            .extents(&log)
            .map_err(io(&self.at(&log), "map log file"))?
        {
            pieces.extend(l);
        }
        Ok(count_fragments(&pieces))
    }

    /// A shrink below the bytes in use merges first; the header (new size) is flushed before the
    /// file is cut, so a crash leaves a file longer than its header needs, never shorter.
    fn set_reserve(&self, segment: u64, index: u32, bytes: u64) -> Result<()> {
        let _g = self.stripe(segment, index);
        let (file, at, mut h, mut idx) = self.open_for_change(segment, index)?;
        let wanted = ChunkMeta {
            reserve_bytes: bytes,
            ..h.meta.clone()
        };
        check_meta(&wanted).map_err(|message| ChunkStoreError::Invalid {
            segment,
            index,
            message,
        })?;
        let old = h.meta.reserve_bytes;
        if bytes < idx.end {
            h = self.merge_locked(&*file, &at, &h, &idx, old)?;
            idx = self.index(&*file, &at, &h)?;
        }
        let new = Header {
            meta: ChunkMeta {
                reserve_bytes: bytes,
                ..h.meta.clone()
            },
            ..h.clone()
        };
        if bytes > old {
            // Room first, then the header that claims it.
            drop(file);
            let name = chunk_name(segment, index);
            self.dir
                .set_len(&name, new.file_len())
                .map_err(io(&at, "grow reserve"))?;
            let file = self
                .dir
                .open(&name, true)
                .map_err(io(&at, "open chunk"))?
                .ok_or(ChunkStoreError::NotFound { segment, index })?;
            file.write_at(&new.encode(), 0)
                .map_err(dev(&at, "write header"))?;
            file.flush().map_err(dev(&at, "fsync chunk file"))?;
        } else {
            file.write_at(&new.encode(), 0)
                .map_err(dev(&at, "write header"))?;
            file.flush().map_err(dev(&at, "fsync chunk file"))?;
            drop(file);
            self.dir
                .set_len(&chunk_name(segment, index), new.file_len())
                .map_err(io(&at, "cut reserve"))?;
        }
        let was = self.bytes.load(Ordering::Relaxed);
        self.bytes.store(
            (was + new.file_len()).saturating_sub(h.file_len()),
            Ordering::Relaxed,
        );
        self.reserved.fetch_add(bytes, Ordering::Relaxed);
        self.reserved.fetch_sub(
            old.min(self.reserved.load(Ordering::Relaxed)),
            Ordering::Relaxed,
        );
        idx.peak = idx.end;
        idx.merged.reserve_bytes = bytes;
        self.logs().insert((segment, index), idx);
        Ok(())
    }

    fn put_blocks(
        &self,
        object: u64,
        block_bytes: u32,
        blocks: &[(BlockKey, &[u8])],
    ) -> Result<()> {
        self.put_blocks_impl(object, block_bytes, blocks)
    }

    fn block_table(&self, object: u64) -> Result<Option<BlockTable>> {
        Ok(self.block_table_impl(object))
    }

    fn open_blocks(&self, object: u64) -> Result<Option<ObjectBlocks>> {
        self.open_blocks_impl(object)
    }

    fn delete_blocks(&self, object: u64, keys: Option<&[BlockKey]>) -> Result<u32> {
        self.delete_blocks_impl(object, keys)
    }

    fn objects(&self) -> Result<Vec<u64>> {
        Ok(self.object_ids())
    }

    fn compactable(&self) -> Vec<u64> {
        self.compactable_objects()
    }

    fn compact_blocks(
        &self,
        object: u64,
        go_on: &mut dyn FnMut() -> bool,
    ) -> Result<Option<Compacted>> {
        self.compact_blocks_impl(object, go_on)
    }

    fn damage_block(&self, object: u64, key: BlockKey, part: BlockPart) -> Result<()> {
        self.damage_block_impl(object, key, part)
    }
}

impl FileStore {
    fn logged_keys(&self) -> Vec<(u64, u32)> {
        let set = self.with_logs.lock().unwrap_or_else(|p| p.into_inner());
        set.iter().copied().collect()
    }
}

/// Bytes of a record head with `extents` extents.
fn head_len(extents: usize) -> u64 {
    (log::RECORD_FIXED + 16 * extents) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data record of `len` bytes at chunk offset `at`, its payload at `payload_at` of the log.
    fn record(at: u64, len: u64, payload_at: u64) -> Record {
        Record {
            head: log::RecordHead {
                kind: RecordKind::Data,
                log_gen: 1,
                seq: 1,
                stamp: DeltaStamp {
                    from: 0,
                    prior: 1,
                    version: 2,
                },
                extents: vec![at..at + len],
                payload_len: len as u32,
                payload_crc: 0,
            },
            payload_at,
        }
    }

    /// A small read of a chunk with a long log reads the payloads of the records it touches, not
    /// the log (FL's data chunks hold a record per update: a 4 KiB read read 4 MiB of log).
    #[test]
    fn a_read_takes_only_the_payloads_of_the_records_it_touches() {
        let rec = 128 << 10;
        let step = rec + 512;
        // 32 records of 128 KiB, one after the other in the log, record i at chunk offset i·rec.
        let idx = LogIndex {
            records: (0..32)
                .map(|i| record(i * rec, rec, 512 + i * step))
                .collect(),
            end: 32 * step,
            peak: 32 * step,
            merged: ChunkMeta {
                segment_id: 1,
                index: 0,
                version: 2,
                chunk_bytes: 32 * rec,
                segment_length: 128 * rec,
                applied: Vec::new(),
                scheme: UpdateScheme::Fl,
                reserve_bytes: 0,
            },
        };
        assert_eq!(
            payload_spans(&idx, 5 * rec + 10, 5 * rec + 4096),
            vec![(512 + 5 * step, 512 + 5 * step + rec)]
        );
        // Two neighbours in the log read as one piece; records far apart in the log do not.
        assert_eq!(
            payload_spans(&idx, 5 * rec + 10, 6 * rec + 10),
            vec![(512 + 5 * step, 512 + 6 * step + rec)]
        );
        let mut far = idx.clone();
        far.records[20] = record(7 * rec, rec, 512 + 20 * step);
        assert_eq!(
            payload_spans(&far, 6 * rec + 10, 7 * rec + 10),
            vec![
                (512 + 6 * step, 512 + 7 * step + rec),
                (512 + 20 * step, 512 + 20 * step + rec)
            ]
        );
        assert!(payload_spans(&idx, 40 * rec, 41 * rec).is_empty());
    }

    /// A merge of deltas spread over the chunk rewrites it as one run (a PLR reserve of 128 KiB
    /// deltas merged as 32 random reads and writes on a disk); runs farther apart than
    /// [`MERGE_GAP_BYTES`] stay apart.
    #[test]
    fn a_merge_joins_runs_closer_than_the_gap() {
        let rec = 128 << 10;
        let blocks = |b: u64| b / BLOCK_BYTES as u64;
        let mut idx = LogIndex {
            // Every other 128 KiB of a 4 MiB chunk, out of order.
            records: (0..16)
                .rev()
                .map(|i| record(2 * i * rec, rec, 512 + i * (rec + 512)))
                .collect(),
            end: 16 * (rec + 512),
            peak: 16 * (rec + 512),
            merged: ChunkMeta {
                segment_id: 1,
                index: 4,
                version: 2,
                chunk_bytes: 32 * rec,
                segment_length: 128 * rec,
                applied: vec![2, 1, 1, 1],
                scheme: UpdateScheme::Plr,
                reserve_bytes: 32 * rec,
            },
        };
        assert_eq!(merge_runs(&idx), vec![(0, blocks(31 * rec))]);
        // Two deltas 3 MiB apart: two runs.
        idx.records = vec![record(0, 4096, 512), record(3 << 20, 4096, 5000)];
        assert_eq!(
            merge_runs(&idx),
            vec![(0, 1), (blocks(3 << 20), blocks(3 << 20) + 1)]
        );
        idx.records.clear();
        assert!(merge_runs(&idx).is_empty());
    }
}
