//! Metadata (EPLOG §3.5): data-stripe and log-stripe metadata in in-memory hash maps, changed only
//! through [`Rec`] records (so replaying the records after a checkpoint rebuilds the same state), and
//! persisted on the metadata volume as two alternating full checkpoints plus an append-only
//! incremental area of checksummed frames.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use ecstack_device::BlockDevice;

use crate::crc::{decode_page, ChunkCrcs, CrcArea, PageWrite, MAP_A, MAP_B, MAP_NONE, PAGE_BYTES};
use crate::extent_set::ExtentSet;
use crate::format::{Dec, Enc, Geometry, MetaLayout, CP_HEADER};
use crate::{ArrayError, Result};

/// Format version of the checkpoints and frames this build writes. The frames of an epoch have the
/// version of the checkpoint they follow. History in `docs/array-format.md`:
/// 1. the first format (frames had no version field);
/// 2. frames carry a version; the write-intent section of the checkpoint is always present;
/// 3. the checkpoint is sparse: written stripes as extents, and only the data chunks whose
///    committed version left its home slot or that have a latest version;
/// 4. frames may hold journal records (types 13 and 14, [`JournalEntry`]); the checkpoint body is
///    that of version 3.
/// 5. per-chunk checksums: the checkpoint body ends with the checksum table, frames may hold
///    `ChunkCrcs` and `ChunkCrcForget` records (types 15 and 16).
/// 6. the checksum table moves out of the checkpoint into the paged checksum area
///    ([`crate::crc::CrcArea`]); the checkpoint body ends with the page map instead. Frames as in
///    version 5. Arrays without room for the area (created before version 6) keep writing
///    version 5 ([`INLINE_CRC_META_VERSION`]); one whose metadata volume has room (grown) is
///    upgraded by its first sync ([`MetaVolume::load`]).
pub(crate) const META_VERSION: u32 = 6;
/// The version a metadata volume without a checksum area writes (the table in the checkpoint).
pub(crate) const INLINE_CRC_META_VERSION: u32 = 5;
/// The first version with the paged checksum area.
pub(crate) const PAGED_CRC_META_VERSION: u32 = 6;
/// The first version whose frames may hold journal records.
pub(crate) const JOURNAL_META_VERSION: u32 = 4;
/// The first version with per-chunk checksums (checkpoint table, records 15 and 16).
pub(crate) const CRC_META_VERSION: u32 = 5;
/// Oldest version this build still reads (an array in it is rewritten in `META_VERSION` by its
/// next metadata sync, which writes a full checkpoint).
pub(crate) const META_VERSION_MIN: u32 = 1;

const CP_MAGIC: &[u8; 8] = b"ECSTKCKP";
const FRAME_MAGIC: u32 = 0x4543_5246; // "FREC"

/// The header in front of a full checkpoint body (layout in `docs/array-format.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckpointHeader {
    pub version: u32,
    pub salt: u64,
    pub epoch: u64,
    pub body_len: u64,
    pub body_crc: u32,
}

impl CheckpointHeader {
    const VERSION_AT: usize = 8;
    const SALT_AT: usize = Self::VERSION_AT + 4;
    const EPOCH_AT: usize = Self::SALT_AT + 8;
    const LEN_AT: usize = Self::EPOCH_AT + 8;
    const BODY_CRC_AT: usize = Self::LEN_AT + 8;
    const CRC_AT: usize = Self::BODY_CRC_AT + 4;
    const END: usize = Self::CRC_AT + 4;

    pub fn encode(&self) -> [u8; CP_HEADER] {
        let mut h = [0u8; CP_HEADER];
        h[..Self::VERSION_AT].copy_from_slice(CP_MAGIC);
        h[Self::VERSION_AT..Self::SALT_AT].copy_from_slice(&self.version.to_le_bytes());
        h[Self::SALT_AT..Self::EPOCH_AT].copy_from_slice(&self.salt.to_le_bytes());
        h[Self::EPOCH_AT..Self::LEN_AT].copy_from_slice(&self.epoch.to_le_bytes());
        h[Self::LEN_AT..Self::BODY_CRC_AT].copy_from_slice(&self.body_len.to_le_bytes());
        h[Self::BODY_CRC_AT..Self::CRC_AT].copy_from_slice(&self.body_crc.to_le_bytes());
        let crc = crc32c::crc32c(&h[..Self::CRC_AT]);
        h[Self::CRC_AT..Self::END].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// `None` when the bytes are not a checkpoint header (magic or header CRC wrong). The version
    /// is returned as read: the caller checks it against the salt first (an area may still hold a
    /// checkpoint of an older array on the same volume).
    pub fn decode(h: &[u8]) -> Option<CheckpointHeader> {
        if h.len() < CP_HEADER || &h[..Self::VERSION_AT] != CP_MAGIC {
            return None;
        }
        if crc32c::crc32c(&h[..Self::CRC_AT]) != le_u32(h, Self::CRC_AT) {
            return None;
        }
        Some(CheckpointHeader {
            version: le_u32(h, Self::VERSION_AT),
            salt: le_u64(h, Self::SALT_AT),
            epoch: le_u64(h, Self::EPOCH_AT),
            body_len: le_u64(h, Self::LEN_AT),
            body_crc: le_u32(h, Self::BODY_CRC_AT),
        })
    }
}

const _: () = assert!(CheckpointHeader::END <= CP_HEADER);

/// The header in front of each frame of records in the incremental area. Version 1 frames (no
/// version field) are read for arrays written by version 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub version: u32,
    pub salt: u64,
    pub epoch: u64,
    pub seq: u64,
    pub payload_len: u32,
    /// CRC32C of the header bytes before it, followed by the payload.
    pub crc: u32,
}

impl FrameHeader {
    // Version 2 and later.
    const VERSION_AT: usize = 4;
    const SALT_AT: usize = Self::VERSION_AT + 4;
    const EPOCH_AT: usize = Self::SALT_AT + 8;
    const SEQ_AT: usize = Self::EPOCH_AT + 8;
    const LEN_AT: usize = Self::SEQ_AT + 8;
    const CRC_AT: usize = Self::LEN_AT + 4;
    /// Header bytes of a version 2 frame.
    pub const LEN: usize = Self::CRC_AT + 4;
    // Version 1: magic, payload length, salt, epoch, sequence, CRC.
    const V1_LEN_AT: usize = 4;
    const V1_SALT_AT: usize = Self::V1_LEN_AT + 4;
    const V1_EPOCH_AT: usize = Self::V1_SALT_AT + 8;
    const V1_SEQ_AT: usize = Self::V1_EPOCH_AT + 8;
    const V1_CRC_AT: usize = Self::V1_SEQ_AT + 8;
    const V1_END: usize = Self::V1_CRC_AT + 4;

    /// Header bytes of a frame of format `version`.
    pub fn len(version: u32) -> usize {
        if version == 1 {
            Self::V1_END
        } else {
            Self::LEN
        }
    }

    /// Header bytes with the CRC computed over them and `payload` (current version only).
    pub fn encode(&self, payload: &[u8]) -> [u8; Self::LEN] {
        let mut h = [0u8; Self::LEN];
        h[..Self::VERSION_AT].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        h[Self::VERSION_AT..Self::SALT_AT].copy_from_slice(&self.version.to_le_bytes());
        h[Self::SALT_AT..Self::EPOCH_AT].copy_from_slice(&self.salt.to_le_bytes());
        h[Self::EPOCH_AT..Self::SEQ_AT].copy_from_slice(&self.epoch.to_le_bytes());
        h[Self::SEQ_AT..Self::LEN_AT].copy_from_slice(&self.seq.to_le_bytes());
        h[Self::LEN_AT..Self::CRC_AT].copy_from_slice(&self.payload_len.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&h[..Self::CRC_AT]), payload);
        h[Self::CRC_AT..Self::LEN].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decode a header of the layout of format `version` (the version of the epoch's checkpoint);
    /// `None` when the magic is wrong. The version field of a version 2+ frame is returned as read.
    pub fn decode(h: &[u8], version: u32) -> Option<FrameHeader> {
        if h.len() < Self::len(version) || le_u32(h, 0) != FRAME_MAGIC {
            return None;
        }
        Some(if version == 1 {
            FrameHeader {
                version: 1,
                payload_len: le_u32(h, Self::V1_LEN_AT),
                salt: le_u64(h, Self::V1_SALT_AT),
                epoch: le_u64(h, Self::V1_EPOCH_AT),
                seq: le_u64(h, Self::V1_SEQ_AT),
                crc: le_u32(h, Self::V1_CRC_AT),
            }
        } else {
            FrameHeader {
                version: le_u32(h, Self::VERSION_AT),
                salt: le_u64(h, Self::SALT_AT),
                epoch: le_u64(h, Self::EPOCH_AT),
                seq: le_u64(h, Self::SEQ_AT),
                payload_len: le_u32(h, Self::LEN_AT),
                crc: le_u32(h, Self::CRC_AT),
            }
        })
    }

    /// Whether the CRC matches the header bytes `h` (exactly the header, as read; the CRC is its
    /// last field in every version) and `payload`.
    pub fn crc_ok(&self, h: &[u8], payload: &[u8]) -> bool {
        let at = h.len() - 4;
        crc32c::crc32c_append(crc32c::crc32c(&h[..at]), payload) == self.crc
    }
}

const _: () = assert!(FrameHeader::LEN == 40 && FrameHeader::V1_END == 36);

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The error for a checksummed header of a version this build does not know.
fn unknown_version(what: &str, version: u32) -> ArrayError {
    ArrayError::Meta(format!(
        "{what} has unknown format version {version} (this build reads versions {META_VERSION_MIN} to {META_VERSION}): corrupt, or written by a newer ecstack"
    ))
}

/// A member of a log stripe: a data chunk version written out of place on a main device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub dev: u16,
    pub slot: u64,
    pub stripe: u64,
    pub pos: u16,
}

/// Log stripe metadata: the slot its log chunks use on every log device, and its data chunks in code
/// order (log chunk i is parity i of a k'-of-(k'+m) code over the members, k' = members.len()).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStripe {
    pub off: u64,
    pub members: Vec<Member>,
}

/// Data stripe metadata (eplog): per data position the committed version (the one the parity chunks
/// reflect; None = never written, reads as zeros) and the latest version if updated since the last
/// parity commit, with the log stripe protecting it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataStripe {
    pub committed: Vec<Option<u64>>,
    pub latest: Vec<Option<(u64, u64)>>,
    /// Whether the parity chunks on the main array are valid for the committed versions.
    pub parity: bool,
}

impl DataStripe {
    pub fn new(k: usize) -> DataStripe {
        DataStripe {
            committed: vec![None; k],
            latest: vec![None; k],
            parity: false,
        }
    }
    pub fn pending(&self) -> bool {
        self.latest.iter().any(|l| l.is_some())
    }
}

/// One metadata change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rec {
    /// md/pl: stripe written for the first time (full-stripe write with parity).
    StripeWritten {
        stripe: u64,
    },
    /// eplog: a new stripe written whole with parity; every chunk at its home slot.
    FullStripe {
        stripe: u64,
    },
    /// eplog: a log stripe was written; each member becomes the latest version of its chunk.
    LogStripe {
        id: u64,
        off: u64,
        members: Vec<Member>,
    },
    /// pl: a log entry (per-stripe parity deltas) at log slot `off`.
    PlLog {
        stripe: u64,
        off: u64,
    },
    /// pl: a full-stripe write rewrote the parity; the stripe's log entries are obsolete.
    PlReset {
        stripe: u64,
    },
    /// A parity commit starts writing parity chunks.
    CommitBegin,
    /// A parity commit finished: latest versions become committed, logs are empty.
    CommitDone,
    DeviceFailed {
        dev: u16,
    },
    DeviceReplaced {
        dev: u16,
    },
    /// md/pl write-intent: region `region` (of [`REGION_STRIPES`] stripes) may have data and parity
    /// out of step; persisted before the first write into it.
    Dirty {
        region: u64,
    },
    /// md/pl: every region is consistent again (after a commit, a clean close or a resync).
    Clean,
    /// The stripe was discarded (TRIM): it reads as zeros and is written whole again next time.
    Discard {
        stripe: u64,
    },
    /// Journal: chunks of one stripe saved before a degraded in-place update (not metadata state:
    /// [`MetaVolume::load`] collects the live entries for recovery).
    Journal(JournalEntry),
    /// Journal: the in-place writes entry `id` protected are durable; the entry is dead.
    JournalDone {
        id: u64,
    },
    /// Checksums of consecutive chunk slots `slot..slot + crcs.len()` of device `dev` (main or
    /// log), as last written.
    ChunkCrcs {
        dev: u16,
        slot: u64,
        crcs: Vec<u32>,
    },
    /// The checksums of `count` slots from `slot` of device `dev` are no longer known (their
    /// chunks are read unverified until written again).
    ChunkCrcForget {
        dev: u16,
        slot: u64,
        count: u32,
    },
}

/// Version of the journal record's own layout.
pub(crate) const JOURNAL_VERSION: u8 = 1;

/// A journal entry (record type 13, layout in `docs/array-format.md`): the content of data chunks
/// of stripe `stripe` that an in-place update while devices are failed puts at risk, made durable
/// before the update's first in-place write. md and pl save every data chunk of the stripe as it
/// will be after the update (recovery rewrites the stripe whole); an eplog parity commit saves the
/// committed versions of the lost chunks it decoded through the parity it is about to overwrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    pub id: u64,
    pub stripe: u64,
    /// (data position, chunk content) in ascending position order, each a whole chunk.
    pub chunks: Vec<(u16, Vec<u8>)>,
}

impl JournalEntry {
    /// Everything the record's CRC covers: version, id, stripe, chunk length, the chunks.
    fn encode_body(&self, e: &mut Enc) {
        e.u8(JOURNAL_VERSION);
        e.u64(self.id);
        e.u64(self.stripe);
        e.u32(self.chunks.first().map_or(0, |(_, c)| c.len()) as u32);
        e.u16(self.chunks.len() as u16);
        for (pos, data) in &self.chunks {
            e.u16(*pos);
            e.0.extend_from_slice(data);
        }
    }

    fn encode(&self, e: &mut Enc) {
        let mut body = Enc::default();
        self.encode_body(&mut body);
        e.0.extend_from_slice(&body.0);
        e.u32(crc32c::crc32c(&body.0));
    }

    /// Bytes the record takes in a frame (type byte included).
    pub(crate) fn encoded_len(chunks: usize, chunk: u64) -> u64 {
        1 + 1 + 8 + 8 + 4 + 2 + chunks as u64 * (2 + chunk) + 4
    }

    /// Bytes this entry's record takes in a frame.
    pub(crate) fn record_len(&self) -> u64 {
        let chunk = self.chunks.first().map_or(0, |(_, c)| c.len() as u64);
        Self::encoded_len(self.chunks.len(), chunk)
    }

    fn decode(d: &mut Dec) -> Result<JournalEntry> {
        let version = d.u8()?;
        if version != JOURNAL_VERSION {
            return Err(meta_err(format!(
                "journal record has unknown version {version} (this build reads {JOURNAL_VERSION})"
            )));
        }
        let id = d.u64()?;
        let stripe = d.u64()?;
        let len = d.u32()? as usize;
        let n = d.u16()? as usize;
        if n == 0 || len == 0 || (n as u64) * (2 + len as u64) > d.remaining() as u64 {
            return Err(meta_err(format!(
                "journal record of {n} chunks of {len} bytes"
            )));
        }
        let mut chunks: Vec<(u16, Vec<u8>)> = Vec::with_capacity(n);
        for _ in 0..n {
            let pos = d.u16()?;
            if chunks.last().is_some_and(|(p, _)| *p >= pos) {
                return Err(meta_err(format!(
                    "journal record of stripe {stripe}: positions not ascending"
                )));
            }
            chunks.push((pos, d.bytes(len)?.to_vec()));
        }
        let crc = d.u32()?;
        let j = JournalEntry { id, stripe, chunks };
        let mut body = Enc::default();
        j.encode_body(&mut body);
        if crc32c::crc32c(&body.0) != crc {
            return Err(meta_err(format!(
                "journal record {id} of stripe {stripe}: CRC mismatch"
            )));
        }
        Ok(j)
    }
}

/// Chunk kinds of a version 3 checkpoint entry (bits 0-1), and the latest-version bit.
const CHUNK_KIND: u8 = 3;
const CHUNK_ZEROS: u8 = 0;
const CHUNK_HOME: u8 = 1;
const CHUNK_MOVED: u8 = 2;
const CHUNK_LATEST: u8 = 4;
/// Encodings of the written stripes in a version 3 checkpoint.
const WRITTEN_EXTENTS: u8 = 1;
const WRITTEN_BITMAP: u8 = 2;

/// Stripes per write-intent region (md/pl).
pub const REGION_STRIPES: u64 = 1024;

impl Rec {
    pub(crate) fn encode(&self, e: &mut Enc) {
        match self {
            Rec::StripeWritten { stripe } => {
                e.u8(1);
                e.u64(*stripe);
            }
            Rec::FullStripe { stripe } => {
                e.u8(2);
                e.u64(*stripe);
            }
            Rec::LogStripe { id, off, members } => {
                e.u8(3);
                e.u64(*id);
                e.u64(*off);
                e.u16(members.len() as u16);
                for m in members {
                    enc_member(e, m);
                }
            }
            Rec::PlLog { stripe, off } => {
                e.u8(4);
                e.u64(*stripe);
                e.u64(*off);
            }
            Rec::PlReset { stripe } => {
                e.u8(5);
                e.u64(*stripe);
            }
            Rec::CommitBegin => e.u8(6),
            Rec::CommitDone => e.u8(7),
            Rec::DeviceFailed { dev } => {
                e.u8(8);
                e.u16(*dev);
            }
            Rec::DeviceReplaced { dev } => {
                e.u8(9);
                e.u16(*dev);
            }
            Rec::Dirty { region } => {
                e.u8(10);
                e.u64(*region);
            }
            Rec::Clean => e.u8(11),
            Rec::Discard { stripe } => {
                e.u8(12);
                e.u64(*stripe);
            }
            Rec::Journal(j) => {
                e.u8(13);
                j.encode(e);
            }
            Rec::JournalDone { id } => {
                e.u8(14);
                e.u64(*id);
            }
            Rec::ChunkCrcs { dev, slot, crcs } => {
                e.u8(15);
                e.u16(*dev);
                e.u64(*slot);
                e.u32(crcs.len() as u32);
                for c in crcs {
                    e.u32(*c);
                }
            }
            Rec::ChunkCrcForget { dev, slot, count } => {
                e.u8(16);
                e.u16(*dev);
                e.u64(*slot);
                e.u32(*count);
            }
        }
    }

    pub(crate) fn decode(d: &mut Dec) -> Result<Rec> {
        Ok(match d.u8()? {
            1 => Rec::StripeWritten { stripe: d.u64()? },
            2 => Rec::FullStripe { stripe: d.u64()? },
            3 => {
                let id = d.u64()?;
                let off = d.u64()?;
                let members = dec_members(d)?;
                Rec::LogStripe { id, off, members }
            }
            4 => Rec::PlLog {
                stripe: d.u64()?,
                off: d.u64()?,
            },
            5 => Rec::PlReset { stripe: d.u64()? },
            6 => Rec::CommitBegin,
            7 => Rec::CommitDone,
            8 => Rec::DeviceFailed { dev: d.u16()? },
            9 => Rec::DeviceReplaced { dev: d.u16()? },
            10 => Rec::Dirty { region: d.u64()? },
            11 => Rec::Clean,
            12 => Rec::Discard { stripe: d.u64()? },
            13 => Rec::Journal(JournalEntry::decode(d)?),
            14 => Rec::JournalDone { id: d.u64()? },
            15 => {
                let dev = d.u16()?;
                let slot = d.u64()?;
                let n = d.u32()? as usize;
                if n == 0 || n.saturating_mul(4) > d.remaining() {
                    return Err(meta_err(format!("checksum record of {n} slots")));
                }
                let crcs = (0..n).map(|_| d.u32()).collect::<Result<Vec<u32>>>()?;
                Rec::ChunkCrcs { dev, slot, crcs }
            }
            16 => Rec::ChunkCrcForget {
                dev: d.u16()?,
                slot: d.u64()?,
                count: d.u32()?,
            },
            t => return Err(ArrayError::Meta(format!("unknown record type {t}"))),
        })
    }
}

fn enc_member(e: &mut Enc, m: &Member) {
    e.u16(m.dev);
    e.u64(m.slot);
    e.u64(m.stripe);
    e.u16(m.pos);
}

fn dec_member(d: &mut Dec) -> Result<Member> {
    Ok(Member {
        dev: d.u16()?,
        slot: d.u64()?,
        stripe: d.u64()?,
        pos: d.u16()?,
    })
}

/// Bytes one encoded member takes.
const MEMBER_BYTES: usize = 20;

/// A member count, then the members; a log stripe holds at most one member per device.
fn dec_members(d: &mut Dec) -> Result<Vec<Member>> {
    let n = d.u16()? as usize;
    if n == 0 || n * MEMBER_BYTES > d.remaining() {
        return Err(meta_err(format!("log stripe with {n} members")));
    }
    let mut members: Vec<Member> = Vec::with_capacity(n);
    for _ in 0..n {
        let m = dec_member(d)?;
        if members.iter().any(|o| o.dev == m.dev) {
            return Err(meta_err(format!(
                "log stripe has two members on device {}",
                m.dev
            )));
        }
        members.push(m);
    }
    Ok(members)
}

fn meta_err(msg: String) -> ArrayError {
    ArrayError::Meta(msg)
}

/// The whole metadata state. Its size grows with what was updated, not with the capacity: the
/// written stripes are extents, and a data stripe has an entry only while it differs from the
/// implicit layout (every data chunk committed at its home slot, no latest version, parity valid).
#[derive(Debug, Clone, PartialEq)]
pub struct MetaState {
    pub k: usize,
    /// The geometry every record and checkpoint entry is range-checked against.
    pub geo: Geometry,
    pub failed: BTreeSet<u16>,
    /// Stripes written at least once (all schemes); the others read as zeros.
    pub written: ExtentSet,
    /// eplog: the written data stripes that differ from the implicit layout (read through
    /// [`MetaState::data_stripe`]).
    changed: HashMap<u64, DataStripe>,
    /// eplog: log stripes since the last parity commit.
    pub logs: HashMap<u64, LogStripe>,
    /// pl: per stripe, the log slots of its log entries since the last parity commit.
    pub pl_logs: HashMap<u64, Vec<u64>>,
    /// Next free slot on the log devices (append-only, reset by a parity commit).
    pub log_next: u64,
    pub next_log_id: u64,
    pub commit_in_progress: bool,
    /// md/pl write-intent regions that may hold stripes whose parity lags their data.
    pub dirty: BTreeSet<u64>,
    /// Per-chunk checksums of the main and log devices (shared with the device I/O layer).
    pub crcs: CrcTable,
}

/// The checksum table of a [`MetaState`]: shared (an `Arc`) with the device I/O layer, which
/// updates it on every write; a clone of the state copies it, and states compare by its known
/// checksums.
pub struct CrcTable(pub Arc<ChunkCrcs>);

/// Chunk slots of each device of the geometry (main `0..n`, then the log devices).
fn device_slots(geo: &Geometry) -> Vec<u64> {
    (0..geo.devices())
        .map(|d| if d < geo.n { geo.slots } else { geo.log_slots })
        .collect()
}

/// The checksum area of an array of geometry `geo` whose metadata layout is `layout`: right
/// after the incremental area (whose end never moves, even when the checkpoint areas grow).
pub(crate) fn crc_area_of(geo: &Geometry, layout: &MetaLayout) -> CrcArea {
    CrcArea::new(layout.inc_off + layout.inc_size, &device_slots(geo))
}

const PAGE_MAP_RUNS: u8 = 1;
const PAGE_MAP_DENSE: u8 = 2;

/// The checksum page map as the version 6 checkpoint body holds it: `u16 devices`, then per
/// device either `u8 1, u64 runs, runs × { u64 first page, u64 count, ceil(count / 8) bytes }`
/// (runs of named pages, bit set: copy B) or `u8 2, ceil(pages / 4) bytes` (2 bits per page: 0
/// never written, 1 copy A, 2 copy B), whichever is smaller.
fn encode_page_map(map: &[Vec<u8>], e: &mut Enc) {
    e.u16(map.len() as u16);
    for pages in map {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (p, &x) in pages.iter().enumerate() {
            if x == MAP_NONE {
                continue;
            }
            match runs.last_mut() {
                Some(r) if r.0 + r.1 == p => r.1 += 1,
                _ => runs.push((p, 1)),
            }
        }
        let runs_bytes: usize = 8 + runs.iter().map(|r| 16 + r.1.div_ceil(8)).sum::<usize>();
        if runs_bytes <= pages.len().div_ceil(4) {
            e.u8(PAGE_MAP_RUNS);
            e.u64(runs.len() as u64);
            for (first, count) in runs {
                e.u64(first as u64);
                e.u64(count as u64);
                let mut bits = vec![0u8; count.div_ceil(8)];
                for i in 0..count {
                    bits[i / 8] |= ((pages[first + i] == MAP_B) as u8) << (i % 8);
                }
                e.0.extend_from_slice(&bits);
            }
        } else {
            e.u8(PAGE_MAP_DENSE);
            let mut bits = vec![0u8; pages.len().div_ceil(4)];
            for (p, &x) in pages.iter().enumerate() {
                bits[p / 4] |= x << (2 * (p % 4));
            }
            e.0.extend_from_slice(&bits);
        }
    }
}

/// Read a page map for devices of `pages[d]` checksum pages (range-checked).
fn decode_page_map(d: &mut Dec, pages: &[usize]) -> Result<Vec<Vec<u8>>> {
    let devices = d.u16()? as usize;
    if devices != pages.len() {
        return Err(meta_err(format!(
            "checksum page map: {devices} devices, the array has {}",
            pages.len()
        )));
    }
    let mut map = Vec::with_capacity(devices);
    for &n in pages {
        let mut m = vec![MAP_NONE; n];
        match d.u8()? {
            PAGE_MAP_RUNS => {
                let runs = d.u64()?;
                let mut prev_end: Option<u64> = None;
                for _ in 0..runs {
                    let first = d.u64()?;
                    let count = d.u64()?;
                    let end = first.checked_add(count).filter(|&e| {
                        count > 0 && e <= n as u64 && prev_end.is_none_or(|p| first > p)
                    });
                    let Some(end) = end else {
                        return Err(meta_err(format!(
                            "checksum page map: run {first}+{count} is empty, out of range or out of order"
                        )));
                    };
                    let bytes = d.bytes(count.div_ceil(8) as usize)?;
                    for i in 0..count as usize {
                        m[first as usize + i] = match bytes[i / 8] >> (i % 8) & 1 {
                            1 => MAP_B,
                            _ => MAP_A,
                        };
                    }
                    if count % 8 != 0 && bytes[bytes.len() - 1] >> (count % 8) != 0 {
                        return Err(meta_err(
                            "checksum page map: a run has bits past its end".into(),
                        ));
                    }
                    prev_end = Some(end);
                }
            }
            PAGE_MAP_DENSE => {
                let bytes = d.bytes(n.div_ceil(4))?;
                for (p, x) in m.iter_mut().enumerate() {
                    *x = bytes[p / 4] >> (2 * (p % 4)) & 3;
                    if *x > MAP_B {
                        return Err(meta_err(format!(
                            "checksum page map: entry {x} of page {p}"
                        )));
                    }
                }
                if n % 4 != 0 && bytes[bytes.len() - 1] >> (2 * (n % 4)) != 0 {
                    return Err(meta_err(
                        "checksum page map: entries past the last page".into(),
                    ));
                }
            }
            t => return Err(meta_err(format!("checksum page map: unknown encoding {t}"))),
        }
        map.push(m);
    }
    Ok(map)
}

/// Bytes of the checksum area of an array of geometry `geo`.
pub(crate) fn crc_area_bytes(geo: &Geometry) -> u64 {
    CrcArea::new(0, &device_slots(geo)).bytes()
}

impl CrcTable {
    pub fn new(geo: &Geometry) -> CrcTable {
        CrcTable(Arc::new(ChunkCrcs::new(
            geo.chunk,
            geo.data_start,
            device_slots(geo),
        )))
    }
}

impl Clone for CrcTable {
    fn clone(&self) -> Self {
        CrcTable(Arc::new(self.0.deep_clone()))
    }
}

impl PartialEq for CrcTable {
    fn eq(&self, other: &Self) -> bool {
        self.0.known() == other.0.known()
    }
}

impl std::fmt::Debug for CrcTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl MetaState {
    pub fn new(geo: &Geometry) -> MetaState {
        MetaState {
            k: geo.k,
            geo: geo.clone(),
            failed: BTreeSet::new(),
            written: ExtentSet::default(),
            changed: HashMap::new(),
            logs: HashMap::new(),
            pl_logs: HashMap::new(),
            log_next: 0,
            next_log_id: 0,
            commit_in_progress: false,
            dirty: BTreeSet::new(),
            crcs: CrcTable::new(geo),
        }
    }

    pub fn is_written(&self, s: u64) -> bool {
        self.written.contains(s)
    }

    /// Stripes written at least once, ascending.
    pub fn written_stripes(&self) -> Vec<u64> {
        self.written.iter().collect()
    }

    /// eplog: the metadata of data stripe `s`, None if it was never written.
    pub fn data_stripe(&self, s: u64) -> Option<DataStripe> {
        match self.changed.get(&s) {
            Some(ds) => Some(ds.clone()),
            None => self.is_written(s).then(|| self.implicit(s)),
        }
    }

    /// eplog: (committed, latest) version of data chunk `pos` of stripe `s`; None if the stripe
    /// was never written.
    #[allow(clippy::type_complexity)]
    pub fn data_chunk(&self, s: u64, pos: usize) -> Option<(Option<u64>, Option<(u64, u64)>)> {
        match self.changed.get(&s) {
            Some(ds) => Some((ds.committed[pos], ds.latest[pos])),
            None => self.is_written(s).then_some((Some(s), None)),
        }
    }

    /// eplog: the data stripes with latest versions (updated since the last parity commit),
    /// ascending.
    pub fn pending_stripes(&self) -> Vec<(u64, DataStripe)> {
        let mut v: Vec<(u64, DataStripe)> = self
            .changed
            .iter()
            .filter(|(_, ds)| ds.pending())
            .map(|(s, ds)| (*s, ds.clone()))
            .collect();
        v.sort_unstable_by_key(|(s, _)| *s);
        v
    }

    /// The data stripes with an entry of their own (they differ from the implicit layout).
    pub fn changed(&self) -> impl Iterator<Item = (u64, &DataStripe)> + '_ {
        self.changed.iter().map(|(s, ds)| (*s, ds))
    }

    /// A written stripe at its home slots with valid parity.
    fn implicit(&self, s: u64) -> DataStripe {
        DataStripe {
            committed: vec![Some(s); self.k],
            latest: vec![None; self.k],
            parity: true,
        }
    }

    fn is_implicit(s: u64, ds: &DataStripe) -> bool {
        ds.parity
            && ds.latest.iter().all(|l| l.is_none())
            && ds.committed.iter().all(|&c| c == Some(s))
    }

    fn check_stripe(&self, stripe: u64) -> Result<()> {
        if stripe >= self.geo.stripes {
            return Err(meta_err(format!(
                "stripe {stripe} out of range (the array has {})",
                self.geo.stripes
            )));
        }
        Ok(())
    }

    fn check_log_slot(&self, off: u64) -> Result<()> {
        if off >= self.geo.log_slots {
            return Err(meta_err(format!(
                "log slot {off} out of range (log devices have {})",
                self.geo.log_slots
            )));
        }
        Ok(())
    }

    fn check_dev(&self, dev: u16) -> Result<()> {
        if dev as usize >= self.geo.devices() {
            return Err(meta_err(format!(
                "device {dev} out of range (the array has {})",
                self.geo.devices()
            )));
        }
        Ok(())
    }

    fn check_slot(&self, slot: u64) -> Result<()> {
        if slot >= self.geo.slots {
            return Err(meta_err(format!(
                "chunk slot {slot} out of range (main devices have {})",
                self.geo.slots
            )));
        }
        Ok(())
    }

    /// A log stripe: a log slot, 1..=n members at distinct positions on their own main devices.
    fn check_log_stripe(&self, off: u64, members: &[Member]) -> Result<()> {
        self.check_log_slot(off)?;
        if members.is_empty() || members.len() > self.geo.n {
            return Err(meta_err(format!(
                "log stripe with {} members (at most n = {})",
                members.len(),
                self.geo.n
            )));
        }
        for (i, m) in members.iter().enumerate() {
            self.check_stripe(m.stripe)?;
            self.check_slot(m.slot)?;
            if m.pos as usize >= self.k {
                return Err(meta_err(format!(
                    "log stripe member at position {} (k = {})",
                    m.pos, self.k
                )));
            }
            if m.dev as usize != self.geo.dev_of(m.stripe, m.pos as usize) {
                return Err(meta_err(format!(
                    "log stripe member of stripe {} position {} on device {}, not on its device {}",
                    m.stripe,
                    m.pos,
                    m.dev,
                    self.geo.dev_of(m.stripe, m.pos as usize)
                )));
            }
            if members[..i].iter().any(|o| o.dev == m.dev) {
                return Err(meta_err(format!(
                    "log stripe has two members on device {}",
                    m.dev
                )));
            }
        }
        Ok(())
    }

    /// Whether `r` can be applied: every device, stripe, slot and position in range (a record
    /// read from the metadata volume is checked before it is applied).
    pub fn check(&self, r: &Rec) -> Result<()> {
        match r {
            Rec::StripeWritten { stripe }
            | Rec::FullStripe { stripe }
            | Rec::PlReset { stripe }
            | Rec::Discard { stripe } => self.check_stripe(*stripe),
            Rec::LogStripe { id, off, members } => {
                if *id == u64::MAX {
                    return Err(meta_err("log stripe id out of range".into()));
                }
                self.check_log_stripe(*off, members)
            }
            Rec::PlLog { stripe, off } => {
                self.check_stripe(*stripe)?;
                self.check_log_slot(*off)
            }
            Rec::DeviceFailed { dev } | Rec::DeviceReplaced { dev } => self.check_dev(*dev),
            Rec::Dirty { region } => {
                if *region >= self.geo.stripes.div_ceil(REGION_STRIPES) {
                    return Err(meta_err(format!(
                        "write-intent region {region} out of range"
                    )));
                }
                Ok(())
            }
            Rec::CommitBegin | Rec::CommitDone | Rec::Clean | Rec::JournalDone { .. } => Ok(()),
            Rec::Journal(j) => self.check_journal(j),
            Rec::ChunkCrcs { dev, slot, crcs } => self.check_crc_slots(*dev, *slot, crcs.len()),
            Rec::ChunkCrcForget { dev, slot, count } => {
                self.check_crc_slots(*dev, *slot, *count as usize)
            }
        }
    }

    /// `count` ≥ 1 checksum slots from `slot` of device `dev`, all inside the device.
    fn check_crc_slots(&self, dev: u16, slot: u64, count: usize) -> Result<()> {
        self.check_dev(dev)?;
        let slots = self.crcs.0.slots(dev as usize);
        if count == 0 || slot.checked_add(count as u64).is_none_or(|e| e > slots) {
            return Err(meta_err(format!(
                "checksums of slots {slot}+{count} of device {dev} out of range (it has {slots})"
            )));
        }
        Ok(())
    }

    /// A journal entry names a stripe in range and at most k whole data chunks of it.
    fn check_journal(&self, j: &JournalEntry) -> Result<()> {
        self.check_stripe(j.stripe)?;
        if j.id == u64::MAX || j.chunks.is_empty() || j.chunks.len() > self.k {
            return Err(meta_err(format!(
                "journal record {} of stripe {} with {} chunks",
                j.id,
                j.stripe,
                j.chunks.len()
            )));
        }
        for (i, (pos, data)) in j.chunks.iter().enumerate() {
            if *pos as usize >= self.k || data.len() as u64 != self.geo.chunk {
                return Err(meta_err(format!(
                    "journal record {} of stripe {}: chunk at position {pos} of {} bytes",
                    j.id,
                    j.stripe,
                    data.len()
                )));
            }
            if i > 0 && j.chunks[i - 1].0 >= *pos {
                return Err(meta_err(format!(
                    "journal record {} of stripe {}: positions not ascending",
                    j.id, j.stripe
                )));
            }
        }
        Ok(())
    }

    /// Apply a record read from the metadata volume: checked first, an error if out of range.
    pub fn apply_checked(&mut self, r: &Rec) -> Result<()> {
        self.check(r)?;
        self.apply(r);
        Ok(())
    }

    /// Apply one record the array built. A record out of range is a bug in the array, so it
    /// panics (records read from the metadata volume go through [`MetaState::apply_checked`]).
    pub fn apply(&mut self, r: &Rec) {
        if let Err(e) = self.check(r) {
            panic!("the array built an invalid metadata record {r:?}: {e}");
        }
        match r {
            Rec::StripeWritten { stripe } => {
                self.written.insert(*stripe);
            }
            Rec::FullStripe { stripe } => {
                self.written.insert(*stripe);
                self.changed.remove(stripe);
            }
            Rec::LogStripe { id, off, members } => {
                for m in members {
                    if !self.changed.contains_key(&m.stripe) {
                        let ds = match self.is_written(m.stripe) {
                            true => self.implicit(m.stripe),
                            false => DataStripe::new(self.k),
                        };
                        self.changed.insert(m.stripe, ds);
                        self.written.insert(m.stripe);
                    }
                    let ds = self.changed.get_mut(&m.stripe).expect("inserted above");
                    ds.latest[m.pos as usize] = Some((m.slot, *id));
                }
                self.logs.insert(
                    *id,
                    LogStripe {
                        off: *off,
                        members: members.clone(),
                    },
                );
                self.log_next = self.log_next.max(off + 1);
                self.next_log_id = self.next_log_id.max(id + 1);
            }
            Rec::PlLog { stripe, off } => {
                self.pl_logs.entry(*stripe).or_default().push(*off);
                self.log_next = self.log_next.max(off + 1);
            }
            Rec::PlReset { stripe } => {
                self.pl_logs.remove(stripe);
            }
            Rec::CommitBegin => self.commit_in_progress = true,
            Rec::CommitDone => {
                for ds in self.changed.values_mut() {
                    for (c, l) in ds.committed.iter_mut().zip(ds.latest.iter_mut()) {
                        if let Some((slot, _)) = l.take() {
                            *c = Some(slot);
                        }
                    }
                    ds.parity = true;
                }
                // Stripes whose chunks are all back at home need no entry.
                self.changed.retain(|&s, ds| !Self::is_implicit(s, ds));
                self.logs.clear();
                self.pl_logs.clear();
                self.log_next = 0;
                self.commit_in_progress = false;
            }
            Rec::DeviceFailed { dev } => {
                self.failed.insert(*dev);
            }
            Rec::DeviceReplaced { dev } => {
                self.failed.remove(dev);
            }
            Rec::Dirty { region } => {
                self.dirty.insert(*region);
            }
            Rec::Clean => self.dirty.clear(),
            Rec::Discard { stripe } => {
                self.written.remove(*stripe);
                self.pl_logs.remove(stripe);
                self.changed.remove(stripe);
            }
            // The journal is not part of the state (see `MetaVolume::journal`).
            Rec::Journal(_) | Rec::JournalDone { .. } => {}
            Rec::ChunkCrcs { dev, slot, crcs } => {
                for (i, c) in crcs.iter().enumerate() {
                    self.crcs.0.store(*dev as usize, slot + i as u64, Some(*c));
                }
            }
            Rec::ChunkCrcForget { dev, slot, count } => {
                for i in 0..*count as u64 {
                    self.crcs.0.store(*dev as usize, slot + i, None);
                }
            }
        }
    }

    /// Full checkpoint body of version 5 (the checksum table inline), written by a metadata
    /// volume without a checksum area (layout in `docs/array-format.md`).
    pub fn encode(&self) -> Vec<u8> {
        let mut e = self.encode_common();
        self.encode_crcs(&mut e);
        e.0
    }

    /// Full checkpoint body of version 6: the checksum table is in the checksum area, the body
    /// holds its page map (take the dirty pages first: [`ChunkCrcs::take_dirty_pages`]).
    pub fn encode_paged(&self) -> Vec<u8> {
        let mut e = self.encode_common();
        encode_page_map(&self.crcs.0.page_map(), &mut e);
        e.0
    }

    /// The body up to the checksums (the whole body of versions 3 and 4).
    fn encode_common(&self) -> Enc {
        let mut e = Enc::default();
        e.u16(self.failed.len() as u16);
        for f in &self.failed {
            e.u16(*f);
        }
        self.encode_written(&mut e);
        let mut ids: Vec<&u64> = self.changed.keys().collect();
        ids.sort_unstable();
        e.u64(ids.len() as u64);
        for &id in ids {
            let ds = &self.changed[&id];
            e.u64(id);
            e.u8(ds.parity as u8);
            let listed: Vec<usize> = (0..self.k)
                .filter(|&p| ds.committed[p] != Some(id) || ds.latest[p].is_some())
                .collect();
            e.u16(listed.len() as u16);
            for p in listed {
                let (c, l) = (ds.committed[p], ds.latest[p]);
                let kind = match c {
                    None => CHUNK_ZEROS,
                    Some(c) if c == id => CHUNK_HOME,
                    Some(_) => CHUNK_MOVED,
                };
                e.u16(p as u16);
                e.u8(kind | if l.is_some() { CHUNK_LATEST } else { 0 });
                if kind == CHUNK_MOVED {
                    e.u64(c.expect("moved"));
                }
                if let Some((slot, log)) = l {
                    e.u64(slot);
                    e.u64(log);
                }
            }
        }
        let mut lids: Vec<&u64> = self.logs.keys().collect();
        lids.sort_unstable();
        e.u64(lids.len() as u64);
        for id in lids {
            let ls = &self.logs[id];
            e.u64(*id);
            e.u64(ls.off);
            e.u16(ls.members.len() as u16);
            for m in &ls.members {
                enc_member(&mut e, m);
            }
        }
        let mut pids: Vec<&u64> = self.pl_logs.keys().collect();
        pids.sort_unstable();
        e.u64(pids.len() as u64);
        for s in pids {
            let v = &self.pl_logs[s];
            e.u64(*s);
            e.u32(v.len() as u32);
            for o in v {
                e.u64(*o);
            }
        }
        e.u64(self.log_next);
        e.u64(self.next_log_id);
        e.u8(self.commit_in_progress as u8);
        e.u64(self.dirty.len() as u64);
        for r in &self.dirty {
            e.u64(*r);
        }
        e
    }

    /// Version 5: the known checksums as runs of consecutive slots, ascending by device and slot:
    /// `u64 nruns, nruns × { u16 device, u64 first slot, u32 count, count × u32 crc32c }`.
    fn encode_crcs(&self, e: &mut Enc) {
        let mut runs: Vec<(usize, u64, Vec<u32>)> = Vec::new();
        for (d, s, c) in self.crcs.0.known() {
            match runs.last_mut() {
                Some(r)
                    if r.0 == d && r.1 + r.2.len() as u64 == s && r.2.len() < u32::MAX as usize =>
                {
                    r.2.push(c)
                }
                _ => runs.push((d, s, vec![c])),
            }
        }
        e.u64(runs.len() as u64);
        for (d, s, cs) in runs {
            e.u16(d as u16);
            e.u64(s);
            e.u32(cs.len() as u32);
            for c in cs {
                e.u32(c);
            }
        }
    }

    fn decode_crcs(&mut self, d: &mut Dec) -> Result<()> {
        let mut last: Option<(u16, u64)> = None;
        for _ in 0..d.u64()? {
            let dev = d.u16()?;
            let slot = d.u64()?;
            let n = d.u32()? as usize;
            if n.saturating_mul(4) > d.remaining() {
                return Err(meta_err(format!("checksum run of {n} slots is truncated")));
            }
            self.check_crc_slots(dev, slot, n)?;
            if last.is_some_and(|(ld, le)| (dev, slot) < (ld, le)) {
                return Err(meta_err(format!(
                    "checksum run at slot {slot} of device {dev} overlaps or is out of order"
                )));
            }
            for i in 0..n as u64 {
                self.crcs.0.store(dev as usize, slot + i, Some(d.u32()?));
            }
            last = Some((dev, slot + n as u64));
        }
        Ok(())
    }

    /// The written stripes, as extents or as a bitmap over all stripes, whichever is smaller.
    fn encode_written(&self, e: &mut Enc) {
        let words = self.geo.stripes.div_ceil(64);
        if (self.written.extents() as u64) * 16 <= words * 8 {
            e.u8(WRITTEN_EXTENTS);
            e.u64(self.written.extents() as u64);
            for (b, end) in self.written.ranges() {
                e.u64(b);
                e.u64(end - b);
            }
        } else {
            e.u8(WRITTEN_BITMAP);
            let mut w = vec![0u64; words as usize];
            for s in self.written.iter() {
                w[(s / 64) as usize] |= 1 << (s % 64);
            }
            for x in w {
                e.u64(x);
            }
        }
    }

    fn decode_written(&mut self, d: &mut Dec) -> Result<()> {
        match d.u8()? {
            WRITTEN_EXTENTS => {
                let n = d.u64()?;
                let mut last_end = None;
                for _ in 0..n {
                    let (b, len) = (d.u64()?, d.u64()?);
                    let end = b
                        .checked_add(len)
                        .filter(|&e| len > 0 && e <= self.geo.stripes);
                    let Some(end) = end.filter(|_| last_end.is_none_or(|l| b > l)) else {
                        return Err(meta_err(format!(
                            "written extent {b}+{len} is empty, out of range or out of order"
                        )));
                    };
                    self.written.push_extent(b, end);
                    last_end = Some(end);
                }
            }
            WRITTEN_BITMAP => self.decode_bitmap(d)?,
            t => return Err(meta_err(format!("unknown written-stripe encoding {t}"))),
        }
        Ok(())
    }

    /// A bitmap of `ceil(stripes / 64)` words (version 3's bitmap form; versions 1 and 2 after
    /// their word count).
    fn decode_bitmap(&mut self, d: &mut Dec) -> Result<()> {
        let words = self.geo.stripes.div_ceil(64);
        if words.saturating_mul(8) > d.remaining() as u64 {
            return Err(meta_err("truncated stripe bitmap".into()));
        }
        let tail = self.geo.stripes % 64;
        for i in 0..words {
            let w = d.u64()?;
            if i + 1 == words && tail != 0 && w >> tail != 0 {
                return Err(meta_err(
                    "checkpoint marks stripes beyond the last one as written".into(),
                ));
            }
            for bit in 0..64 {
                if w & (1 << bit) != 0 {
                    self.written.insert(i * 64 + bit);
                }
            }
        }
        Ok(())
    }

    /// Decode a checkpoint body of format `version`, range-checking every entry against `geo`.
    pub fn decode(geo: &Geometry, version: u32, body: &[u8]) -> Result<MetaState> {
        if !(META_VERSION_MIN..=META_VERSION).contains(&version) {
            return Err(unknown_version("checkpoint", version));
        }
        let mut st = MetaState::new(geo);
        let mut d = Dec::new(body);
        for _ in 0..d.u16()? {
            let dev = d.u16()?;
            st.check_dev(dev)?;
            st.failed.insert(dev);
        }
        if version >= 3 {
            st.decode_written(&mut d)?;
            st.decode_changed(&mut d)?;
        } else {
            let nw = d.u64()?;
            if nw != geo.stripes.div_ceil(64) {
                return Err(ArrayError::Meta(format!(
                    "checkpoint has a {nw}-word stripe bitmap, geometry needs {}",
                    geo.stripes.div_ceil(64)
                )));
            }
            st.decode_bitmap(&mut d)?;
            st.decode_changed_v1(&mut d)?;
        }
        for _ in 0..d.u64()? {
            let id = d.u64()?;
            let off = d.u64()?;
            let members = dec_members(&mut d)?;
            st.check_log_stripe(off, &members)?;
            if st.logs.insert(id, LogStripe { off, members }).is_some() {
                return Err(meta_err(format!("checkpoint lists log stripe {id} twice")));
            }
        }
        for _ in 0..d.u64()? {
            let s = d.u64()?;
            st.check_stripe(s)?;
            let n = d.u32()? as usize;
            if n.saturating_mul(8) > d.remaining() {
                return Err(meta_err(format!("stripe {s} has {n} pl log entries")));
            }
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                let off = d.u64()?;
                st.check_log_slot(off)?;
                v.push(off);
            }
            if st.pl_logs.insert(s, v).is_some() {
                return Err(meta_err(format!(
                    "checkpoint lists pl logs of stripe {s} twice"
                )));
            }
        }
        st.log_next = d.u64()?;
        st.next_log_id = d.u64()?;
        st.commit_in_progress = d.u8()? != 0;
        // Version 1 checkpoints written before write intent existed end here.
        if version >= 2 || !d.done() {
            for _ in 0..d.u64()? {
                let region = d.u64()?;
                st.check(&Rec::Dirty { region })?;
                st.dirty.insert(region);
            }
        }
        if version >= PAGED_CRC_META_VERSION {
            let pages: Vec<usize> = (0..st.crcs.0.devices())
                .map(|dev| st.crcs.0.slots(dev).div_ceil(crate::crc::PAGE_SLOTS) as usize)
                .collect();
            let map = decode_page_map(&mut d, &pages)?;
            st.crcs
                .0
                .set_page_map(map)
                .map_err(|e| meta_err(format!("checksum page map: {e}")))?;
        } else if version >= CRC_META_VERSION {
            st.decode_crcs(&mut d)?;
        }
        if !d.done() {
            return Err(ArrayError::Meta("trailing bytes after checkpoint".into()));
        }
        st.check_references()?;
        Ok(st)
    }

    /// Version 3: the data stripes that differ from the implicit layout, listing only their chunks
    /// that differ.
    fn decode_changed(&mut self, d: &mut Dec) -> Result<()> {
        for _ in 0..d.u64()? {
            let id = d.u64()?;
            self.check_stripe(id)?;
            if !self.is_written(id) {
                return Err(meta_err(format!(
                    "data stripe {id} has metadata but was never written"
                )));
            }
            let mut ds = self.implicit(id);
            ds.parity = d.u8()? != 0;
            let n = d.u16()? as usize;
            let mut last = None;
            for _ in 0..n {
                let p = d.u16()? as usize;
                if p >= self.k || last.is_some_and(|l| p <= l) {
                    return Err(meta_err(format!(
                        "data stripe {id}: position {p} out of range or order"
                    )));
                }
                last = Some(p);
                let f = d.u8()?;
                if f & !(CHUNK_KIND | CHUNK_LATEST) != 0 || f & CHUNK_KIND == CHUNK_KIND {
                    return Err(meta_err(format!("data stripe {id}: chunk flags {f:#x}")));
                }
                ds.committed[p] = match f & CHUNK_KIND {
                    CHUNK_ZEROS => None,
                    CHUNK_HOME => Some(id),
                    _ => {
                        let slot = d.u64()?;
                        self.check_slot(slot)?;
                        Some(slot)
                    }
                };
                if f & CHUNK_LATEST != 0 {
                    let slot = d.u64()?;
                    self.check_slot(slot)?;
                    ds.latest[p] = Some((slot, d.u64()?));
                }
            }
            if Self::is_implicit(id, &ds) {
                return Err(meta_err(format!(
                    "data stripe {id} listed without a difference"
                )));
            }
            if self.changed.insert(id, ds).is_some() {
                return Err(meta_err(format!("checkpoint lists data stripe {id} twice")));
            }
        }
        Ok(())
    }

    /// Versions 1 and 2: every written eplog data stripe with all its chunks.
    fn decode_changed_v1(&mut self, d: &mut Dec) -> Result<()> {
        let k = self.k;
        let mut seen = BTreeSet::new();
        for _ in 0..d.u64()? {
            let id = d.u64()?;
            self.check_stripe(id)?;
            let mut ds = DataStripe::new(k);
            ds.parity = d.u8()? != 0;
            for p in 0..k {
                let f = d.u8()?;
                if f & !3 != 0 {
                    return Err(meta_err(format!("data stripe {id}: flags {f:#x}")));
                }
                if f & 1 != 0 {
                    let slot = d.u64()?;
                    self.check_slot(slot)?;
                    ds.committed[p] = Some(slot);
                }
                if f & 2 != 0 {
                    let slot = d.u64()?;
                    self.check_slot(slot)?;
                    ds.latest[p] = Some((slot, d.u64()?));
                }
            }
            if !seen.insert(id) {
                return Err(meta_err(format!("checkpoint lists data stripe {id} twice")));
            }
            self.written.insert(id);
            if !Self::is_implicit(id, &ds) {
                self.changed.insert(id, ds);
            }
        }
        Ok(())
    }

    /// Cross-references of a decoded state: the log cursor and ids cover every log stripe, and
    /// every latest version names a log stripe that exists.
    fn check_references(&self) -> Result<()> {
        if self.log_next > self.geo.log_slots {
            return Err(meta_err(format!(
                "next log slot {} beyond the {} log slots",
                self.log_next, self.geo.log_slots
            )));
        }
        for (id, ls) in &self.logs {
            if *id >= self.next_log_id || ls.off >= self.log_next {
                return Err(meta_err(format!(
                    "log stripe {id} at log slot {} lies beyond the log cursor",
                    ls.off
                )));
            }
        }
        if self.pl_logs.values().flatten().any(|&o| o >= self.log_next) {
            return Err(meta_err("a pl log entry lies beyond the log cursor".into()));
        }
        for (s, ds) in &self.changed {
            for (_, log) in ds.latest.iter().flatten() {
                if !self.logs.contains_key(log) {
                    return Err(meta_err(format!(
                        "data stripe {s} names log stripe {log}, which does not exist"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Largest checkpoint body a geometry can need (used to size the checkpoint areas).
    pub fn max_encoded(k: usize, n: usize, stripes: u64, slots: u64, log_slots: u64) -> u64 {
        // Failed devices and counters; written stripes (never more than the bitmap); data
        // stripes; log stripes (at most one per log slot); pl entries; write-intent regions.
        // Saturating: a geometry read from a superblock is range-checked, but this must not
        // overflow on the way.
        let (k, n) = (k as u64, n as u64);
        let words = stripes.div_ceil(64);
        [
            256 + 2 * 64 + 9,
            words.saturating_mul(8),
            (stripes.div_ceil(REGION_STRIPES) + 1).saturating_mul(8),
            stripes.saturating_mul(11 + 27 * k),
            log_slots.saturating_mul(18 + 20 * n),
            n.saturating_mul(slots).saturating_mul(20),
            stripes.saturating_mul(12),
            log_slots.saturating_mul(20),
            // Checksums: 4 bytes per slot, and a run header (14 bytes) per slot at worst.
            8u64.saturating_add(
                n.saturating_mul(slots)
                    .saturating_add(n.saturating_mul(log_slots))
                    .saturating_mul(18),
            ),
        ]
        .into_iter()
        .fold(0u64, u64::saturating_add)
    }
}

/// Bytes the journal records among `recs` take in a frame.
pub(crate) fn journal_len(recs: &[Rec]) -> u64 {
    recs.iter()
        .map(|r| match r {
            Rec::Journal(j) => j.record_len(),
            _ => 0,
        })
        .sum()
}

/// Bytes one frame of `recs` takes in the incremental area.
pub(crate) fn frame_len(recs: &[Rec]) -> u64 {
    let mut e = Enc::default();
    for r in recs {
        r.encode(&mut e);
    }
    (FrameHeader::LEN + e.0.len()) as u64
}

/// The metadata volume's writer side: where the next frame goes and which checkpoint epoch is live.
#[derive(Debug)]
pub(crate) struct MetaVolume {
    pub dev: Arc<dyn BlockDevice>,
    pub layout: MetaLayout,
    pub salt: u64,
    pub epoch: u64,
    pub inc_pos: u64,
    pub seq: u64,
    pub frames: u64,
    pub checkpoints: u64,
    /// Format version of the live checkpoint (and so of the frames that follow it).
    pub version: u32,
    /// Body bytes of the live checkpoint.
    pub body_len: u64,
    /// Checkpoint area that holds any state of the geometry ([`checkpoint_area_max`]); an area
    /// smaller than this grows (see [`MetaVolume::write_checkpoint_growing`]).
    pub cp_size_max: u64,
    /// The incremental area never shrinks below this when checkpoint areas grow (set it to
    /// [`inc_area_min`] of the geometry).
    pub inc_min: u64,
    /// Journal entries of the loaded epoch's frames not followed by their `JournalDone`, by id:
    /// in-place updates a crash may have torn (filled by [`MetaVolume::load`]).
    pub journal: BTreeMap<u64, JournalEntry>,
    /// Bytes of journal records in the live epoch's frames: they take room in the incremental
    /// area but never grow the next checkpoint.
    pub journal_bytes: u64,
    /// The checksum area the volume has room for (after the incremental area), if any.
    pub crc_area: Option<CrcArea>,
    /// Whether the checksums are in `crc_area` (format version 6: set at creation, or by loading
    /// a version 6 checkpoint); otherwise checkpoints hold them inline (version 5).
    pub paged: bool,
}

/// Bytes a frame may grow the next checkpoint body by, per byte of the frame, at most. The worst
/// record is a log stripe: a member takes 20 bytes in the frame, and in the checkpoint 20 (the
/// log stripe) + 11 (a new data stripe entry) + 27 (its chunk entry) + 16 (a new written extent)
/// = 74. `checkpoint_growth_per_record_byte_is_bounded` checks it for every record kind.
pub(crate) const CHECKPOINT_BYTES_PER_FRAME_BYTE_MAX: u64 = 4;

/// Checkpoint areas reserved at creation when the geometry's worst case is larger: they grow with
/// the checkpoints, so a large array's metadata volume starts small.
pub(crate) const CHECKPOINT_AREA_INITIAL_BYTES: u64 = 1 << 20;

/// Smallest incremental area a layout keeps (at creation and when checkpoint areas grow), for any
/// geometry; [`inc_area_min`] adds the journal's need.
pub(crate) const INC_AREA_MIN_BYTES: u64 = 256 << 10;

/// One group of journaled updates may save journal records of at most this fraction of the
/// incremental area (the group's records and the live entries appended again after a checkpoint
/// must fit in it).
pub(crate) const JOURNAL_GROUP_DIVISOR: u64 = 4;

/// Smallest incremental area of an array of geometry `g`: [`INC_AREA_MIN_BYTES`], and room for the
/// largest journal record (all k chunks of a stripe) in one group's share of it, so a journaled
/// update never finds its record too large for the metadata volume.
pub(crate) fn inc_area_min(g: &Geometry) -> u64 {
    JournalEntry::encoded_len(g.k, g.chunk)
        .saturating_mul(JOURNAL_GROUP_DIVISOR)
        .div_ceil(4096)
        .saturating_mul(4096)
        .max(INC_AREA_MIN_BYTES)
}

/// A checkpoint area that holds any checkpoint of the geometry (in 4 KiB units).
pub(crate) fn checkpoint_area_max(g: &Geometry) -> u64 {
    (CP_HEADER as u64)
        .saturating_add(MetaState::max_encoded(
            g.k,
            g.n,
            g.stripes,
            g.slots,
            g.log_slots,
        ))
        .div_ceil(4096)
        .saturating_mul(4096)
}

impl MetaVolume {
    /// A volume whose checkpoint areas never grow (`cp_size_max` is their size; set it to
    /// [`checkpoint_area_max`] to let them grow).
    pub fn new(dev: Arc<dyn BlockDevice>, layout: MetaLayout, salt: u64) -> MetaVolume {
        let layout_cp_size = layout.cp_size;
        MetaVolume {
            dev,
            layout,
            salt,
            epoch: 0,
            inc_pos: 0,
            seq: 0,
            frames: 0,
            checkpoints: 0,
            version: META_VERSION,
            body_len: 0,
            cp_size_max: layout_cp_size,
            inc_min: INC_AREA_MIN_BYTES,
            journal: BTreeMap::new(),
            journal_bytes: 0,
            crc_area: None,
            paged: false,
        }
    }

    /// The format version this volume writes: 6 with a checksum area, else 5.
    pub fn write_version(&self) -> u32 {
        match self.paged {
            true => META_VERSION,
            false => INLINE_CRC_META_VERSION,
        }
    }

    /// Write the checksum pages a full checkpoint names (each into the copy the live checkpoint
    /// does not name) and flush, before the checkpoint itself is written.
    pub fn write_crc_pages(&self, writes: &[PageWrite]) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        let area = self
            .crc_area
            .as_ref()
            .filter(|_| self.paged)
            .expect("checksum pages written only to a volume with a checksum area");
        for w in writes {
            self.dev
                .write_at(&w.bytes, area.page_off(w.dev, w.page, w.copy))?;
        }
        self.dev.flush()?;
        Ok(())
    }

    /// Read the pages the loaded version 6 checkpoint names into the state's checksum table. A
    /// page that does not check out (torn, corrupt, unreadable) is not trusted: its slots stay
    /// unknown (read unverified), it is counted in `page_errors` and logged, and the next
    /// checkpoint writes it again. The other copy is never used instead: it may hold older
    /// checksums, or a newer page of a checkpoint that was never completed.
    fn load_crc_pages(&self, st: &MetaState, epoch: u64) -> Result<()> {
        let area = self.crc_area.as_ref().expect("checked by load");
        let crcs = &st.crcs.0;
        let pages = crcs.mapped_pages();
        // Reads of up to 256 pages whose copies lie next to each other.
        let mut i = 0;
        while i < pages.len() {
            let off = |j: usize| area.page_off(pages[j].0, pages[j].1, pages[j].2);
            let mut end = i + 1;
            while end < pages.len()
                && end - i < 256
                && off(end) == off(i) + (end - i) as u64 * PAGE_BYTES
            {
                end += 1;
            }
            let mut buf = vec![0u8; (end - i) * PAGE_BYTES as usize];
            let read = self.dev.read_at(&mut buf, off(i));
            for (j, b) in (i..end).zip(buf.chunks(PAGE_BYTES as usize)) {
                let (d, p, c) = pages[j];
                let why = match &read {
                    Err(e) => Err(format!("read error: {e}")),
                    Ok(_) => decode_page(b, d as u16, p, self.salt, epoch)
                        .and_then(|(v, _)| crcs.load_page(d, p, &v)),
                };
                if let Err(why) = why {
                    tracing::warn!(
                        dev = d,
                        page = p,
                        copy = c,
                        "checksum page {p} of device {d} (copy {}) is not valid ({why}): its {} slots are read unverified until written or scrubbed",
                        ["A", "B"][c as usize],
                        crate::crc::PAGE_SLOTS
                    );
                    crcs.page_lost(d, p);
                }
            }
            i = end;
        }
        Ok(())
    }

    /// Whether a frame of `len` bytes still fits in the incremental area. Never after a checkpoint
    /// of an older version: frames follow their checkpoint's format, so the next sync upgrades
    /// the array by writing a full checkpoint instead.
    /// It also must leave room for the next checkpoint in its area: each frame byte may grow the
    /// checkpoint by [`CHECKPOINT_BYTES_PER_FRAME_BYTE_MAX`] bytes.
    #[cfg(test)]
    pub fn fits(&self, len: u64) -> bool {
        self.fits_with_journal(len, 0)
    }

    /// [`MetaVolume::fits`] for a frame of `recs`: its journal records (and those of the frames
    /// before it) take room in the incremental area but do not grow the next checkpoint.
    pub fn fits_records(&self, recs: &[Rec]) -> bool {
        self.fits_with_journal(frame_len(recs), journal_len(recs))
    }

    fn fits_with_journal(&self, len: u64, journal: u64) -> bool {
        let frames = self.inc_pos + len;
        let growth = frames - (self.journal_bytes + journal);
        let checkpoint_fits = self.layout.cp_size >= self.cp_size_max
            || (CP_HEADER as u64 + self.body_len)
                .saturating_add(growth.saturating_mul(CHECKPOINT_BYTES_PER_FRAME_BYTE_MAX))
                <= self.layout.cp_size;
        self.version == self.write_version() && frames <= self.layout.inc_size && checkpoint_fits
    }

    /// Write a full checkpoint of `body` at the next epoch into the other area, flush, and start a
    /// fresh incremental area.
    pub fn write_checkpoint(&mut self, body: &[u8]) -> Result<()> {
        let total = (CP_HEADER + body.len()) as u64;
        if total > self.layout.cp_size {
            return Err(ArrayError::Meta(format!(
                "checkpoint of {total} bytes exceeds its {} byte area, and the metadata volume has no room to grow it (incremental area of {} bytes): use a larger metadata volume",
                self.layout.cp_size, self.layout.inc_size
            )));
        }
        let off = self.layout.cp_off[((self.epoch + 1) % 2) as usize];
        self.write_checkpoint_at(off, body)
    }

    /// Write a full checkpoint, growing the checkpoint areas when it fills more than half of its
    /// area (or does not fit at all): the new areas lie in the incremental area after its live
    /// frames, and the checkpoint is written there (the old areas stay as they are, unused).
    /// `store_layout` must make the new layout durable in the superblock before it returns; only
    /// then does the volume use it. A power cut before that leaves the old layout, its live
    /// checkpoint and frames untouched (the new areas lie beyond the frames, and a frame replay
    /// stops at a checkpoint header); after it, the new layout's live checkpoint holds everything
    /// (layout and crash order in `docs/array-format.md`, "Checkpoint areas").
    pub fn write_checkpoint_growing(
        &mut self,
        body: &[u8],
        store_layout: &mut dyn FnMut(&dyn BlockDevice, &MetaLayout) -> Result<()>,
    ) -> Result<()> {
        let total = (CP_HEADER + body.len()) as u64;
        let fits = total <= self.layout.cp_size;
        if fits {
            self.write_checkpoint(body)?;
        }
        let half_full = 2 * total > self.layout.cp_size && self.layout.cp_size < self.cp_size_max;
        if fits && !half_full {
            return Ok(());
        }
        let Some(layout) = self.grown_layout(total) else {
            // No room to grow: a checkpoint that fits is written; frames get fewer until the next
            // one does not, which is the error.
            return match fits {
                true => Ok(()),
                false => self.write_checkpoint(body),
            };
        };
        let epoch = self.epoch + 1;
        self.write_at_epoch(layout.cp_off[(epoch % 2) as usize], epoch, body)?;
        store_layout(&*self.dev, &layout)?;
        self.layout = layout;
        self.commit_checkpoint(epoch, body.len() as u64);
        Ok(())
    }

    /// Checkpoint areas for a checkpoint of `total` bytes (header included): four times its size
    /// (room for it to double again before the next growth), at least the current areas, at most
    /// [`MetaVolume::cp_size_max`], placed after the live frames; None if the incremental area
    /// cannot hold them and its minimum.
    fn grown_layout(&self, total: u64) -> Option<MetaLayout> {
        let size = total
            .checked_mul(4)?
            .min(self.cp_size_max)
            .max(total)
            .max(self.layout.cp_size)
            .div_ceil(4096)
            .checked_mul(4096)?;
        let start = self.layout.inc_off + self.inc_pos.div_ceil(4096) * 4096;
        let inc_off = start.checked_add(size.checked_mul(2)?)?;
        let end = self.layout.inc_off + self.layout.inc_size;
        if inc_off.checked_add(self.inc_min)? > end {
            return None;
        }
        Some(MetaLayout {
            cp_off: [start, start + size],
            cp_size: size,
            inc_off,
            inc_size: end - inc_off,
        })
    }

    /// Write the checkpoint of the next epoch at `off` and make it the live one.
    fn write_checkpoint_at(&mut self, off: u64, body: &[u8]) -> Result<()> {
        let epoch = self.epoch + 1;
        self.write_at_epoch(off, epoch, body)?;
        self.commit_checkpoint(epoch, body.len() as u64);
        Ok(())
    }

    /// The volume's state once the checkpoint of `epoch` is durable: a fresh incremental area.
    fn commit_checkpoint(&mut self, epoch: u64, body_len: u64) {
        self.epoch = epoch;
        self.version = self.write_version();
        self.inc_pos = 0;
        self.seq = 0;
        self.checkpoints += 1;
        self.body_len = body_len;
        self.journal_bytes = 0;
    }

    /// Write a checkpoint of `body` with `epoch` at `off` and flush.
    fn write_at_epoch(&mut self, off: u64, epoch: u64, body: &[u8]) -> Result<()> {
        let header = CheckpointHeader {
            version: self.write_version(),
            salt: self.salt,
            epoch,
            body_len: body.len() as u64,
            body_crc: crc32c::crc32c(body),
        };
        let mut h = header.encode().to_vec();
        h.extend_from_slice(body);
        self.dev.write_at(&h, off)?;
        self.dev.flush()?;
        Ok(())
    }

    /// Append one frame holding `recs` to the incremental area and flush.
    pub fn append(&mut self, recs: &[Rec]) -> Result<()> {
        let mut e = Enc::default();
        for r in recs {
            r.encode(&mut e);
        }
        let payload = e.0;
        let header = FrameHeader {
            version: self.write_version(),
            salt: self.salt,
            epoch: self.epoch,
            seq: self.seq,
            payload_len: payload.len() as u32,
            crc: 0,
        };
        debug_assert_eq!(header.version, self.write_version());
        let mut f = Vec::with_capacity(FrameHeader::LEN + payload.len());
        f.extend_from_slice(&header.encode(&payload));
        f.extend_from_slice(&payload);
        let journal = journal_len(recs);
        if !self.fits_with_journal(f.len() as u64, journal) {
            return Err(ArrayError::Meta(
                "incremental area full (or its checkpoint is of an older version)".into(),
            ));
        }
        self.dev.write_at(&f, self.layout.inc_off + self.inc_pos)?;
        self.dev.flush()?;
        self.inc_pos += f.len() as u64;
        self.journal_bytes += journal;
        self.seq += 1;
        self.frames += 1;
        Ok(())
    }

    /// Load the newest valid checkpoint and replay the incremental frames of its epoch.
    pub fn load(&mut self, geo: &Geometry) -> Result<MetaState> {
        let end = self.layout.inc_off + self.layout.inc_size;
        if self.dev.capacity() < end {
            return Err(ArrayError::Meta(format!(
                "metadata volume of {} bytes is smaller than its recorded layout ({end} bytes)",
                self.dev.capacity()
            )));
        }
        let mut best: Option<(CheckpointHeader, Vec<u8>)> = None;
        for &off in &self.layout.cp_off {
            let mut h = vec![0u8; CP_HEADER];
            self.dev.read_at(&mut h, off)?;
            // Not a checkpoint, or one of another array that used this volume before.
            let Some(ch) = CheckpointHeader::decode(&h).filter(|c| c.salt == self.salt) else {
                continue;
            };
            if !(META_VERSION_MIN..=META_VERSION).contains(&ch.version) {
                return Err(unknown_version(
                    &format!("checkpoint at byte {off} of the metadata volume"),
                    ch.version,
                ));
            }
            if ch.body_len > self.layout.cp_size - CP_HEADER as u64 {
                continue;
            }
            let mut body = vec![0u8; ch.body_len as usize];
            self.dev.read_at(&mut body, off + CP_HEADER as u64)?;
            if crc32c::crc32c(&body) != ch.body_crc {
                continue;
            }
            if best.as_ref().is_none_or(|(b, _)| ch.epoch > b.epoch) {
                best = Some((ch, body));
            }
        }
        let (ch, body) = best.ok_or_else(|| {
            ArrayError::Meta("no valid full checkpoint on the metadata volume".into())
        })?;
        // An older checkpoint on a volume that has room for the checksum area after its
        // incremental area (a version 5 array whose metadata volume was grown) is upgraded: the
        // table loads as before, every page holding a checksum is dirty, and since the loaded
        // version is not the one written, the next sync writes a full version 6 checkpoint (its
        // pages first, then the checkpoint: the order of every version 6 checkpoint, so a power
        // cut leaves the version 5 checkpoint and its frames live, and the next open upgrades
        // again). `a_version_5_volume_with_room_upgrades_and_survives_a_power_cut_at_every_step`.
        let room =
            matches!(&self.crc_area, Some(a) if a.off >= end && a.end() <= self.dev.capacity());
        self.paged = ch.version >= PAGED_CRC_META_VERSION || room;
        if ch.version >= PAGED_CRC_META_VERSION {
            match &self.crc_area {
                Some(a) if a.off >= end && a.end() <= self.dev.capacity() => {}
                _ => {
                    return Err(ArrayError::Meta(format!(
                        "version {} checkpoint, but the metadata volume of {} bytes has no checksum area after its incremental area (which ends at byte {end})",
                        ch.version,
                        self.dev.capacity()
                    )))
                }
            }
        }
        let mut st = MetaState::decode(geo, ch.version, &body)?;
        if ch.version >= PAGED_CRC_META_VERSION {
            self.load_crc_pages(&st, ch.epoch)?;
        }
        self.body_len = ch.body_len;
        self.epoch = ch.epoch;
        self.version = ch.version;
        self.inc_pos = 0;
        self.seq = 0;
        self.journal.clear();
        self.journal_bytes = 0;
        // Replay frames of this epoch in sequence; stop at the first one that does not check out
        // (the end of the log, or a frame torn by a power cut).
        let hlen = FrameHeader::len(ch.version);
        loop {
            if self.inc_pos + hlen as u64 > self.layout.inc_size {
                break;
            }
            let base = self.layout.inc_off + self.inc_pos;
            let mut h = vec![0u8; hlen];
            self.dev.read_at(&mut h, base)?;
            let Some(fh) = FrameHeader::decode(&h, ch.version) else {
                break;
            };
            let len = fh.payload_len as u64;
            if fh.salt != self.salt
                || fh.epoch != ch.epoch
                || fh.seq != self.seq
                || self.inc_pos + hlen as u64 + len > self.layout.inc_size
            {
                break;
            }
            let mut payload = vec![0u8; len as usize];
            self.dev.read_at(&mut payload, base + hlen as u64)?;
            if !fh.crc_ok(&h, &payload) {
                break;
            }
            if fh.version != ch.version {
                return Err(unknown_version(
                    &format!(
                        "frame {} of epoch {} (its checkpoint has version {})",
                        fh.seq, fh.epoch, ch.version
                    ),
                    fh.version,
                ));
            }
            let mut d = Dec::new(&payload);
            while !d.done() {
                let r = Rec::decode(&mut d).map_err(|e| frame_err(&fh, &e))?;
                st.apply_checked(&r).map_err(|e| frame_err(&fh, &e))?;
                match r {
                    Rec::Journal(_) | Rec::JournalDone { .. }
                        if fh.version < JOURNAL_META_VERSION =>
                    {
                        return Err(frame_err(
                            &fh,
                            &meta_err(format!("journal record in a version {} frame", fh.version)),
                        ));
                    }
                    Rec::ChunkCrcs { .. } | Rec::ChunkCrcForget { .. }
                        if fh.version < CRC_META_VERSION =>
                    {
                        return Err(frame_err(
                            &fh,
                            &meta_err(format!("checksum record in a version {} frame", fh.version)),
                        ));
                    }
                    Rec::Journal(j) => {
                        self.journal_bytes += j.record_len();
                        self.journal.insert(j.id, j);
                    }
                    Rec::JournalDone { id } => {
                        self.journal.remove(&id);
                    }
                    _ => {}
                }
            }
            self.inc_pos += hlen as u64 + len;
            self.seq += 1;
        }
        Ok(st)
    }
}

fn frame_err(fh: &FrameHeader, e: &ArrayError) -> ArrayError {
    ArrayError::Meta(format!(
        "frame {} of epoch {}: {}",
        fh.seq,
        fh.epoch,
        match e {
            ArrayError::Meta(s) => s.clone(),
            other => other.to_string(),
        }
    ))
}

/// The checkpoint body of versions 3 and 4: that of version 5 without the checksum table.
#[cfg(test)]
pub(crate) fn encode_v4(st: &MetaState) -> Vec<u8> {
    st.encode_common().0
}

/// The checkpoint body of versions 1 and 2, written out field by field as
/// `docs/array-format.md` describes it (every written stripe's bit, every eplog data stripe
/// with all its chunks).
#[cfg(test)]
pub(crate) fn encode_v1(st: &MetaState) -> Vec<u8> {
    let mut e = Enc::default();
    e.u16(st.failed.len() as u16);
    for f in &st.failed {
        e.u16(*f);
    }
    let words = st.geo.stripes.div_ceil(64);
    e.u64(words);
    for i in 0..words {
        let w = (0..64).fold(0u64, |w, b| w | (st.is_written(i * 64 + b) as u64) << b);
        e.u64(w);
    }
    // (In versions 1 and 2 the md/pl bitmap and the eplog stripe list were kept apart; a
    // stripe in both decodes the same.)
    let written = st.written_stripes();
    e.u64(written.len() as u64);
    for s in written {
        let ds = st.data_stripe(s).unwrap();
        e.u64(s);
        e.u8(ds.parity as u8);
        for (c, l) in ds.committed.iter().zip(&ds.latest) {
            e.u8(c.is_some() as u8 | (l.is_some() as u8) << 1);
            if let Some(c) = c {
                e.u64(*c);
            }
            if let Some((slot, log)) = l {
                e.u64(*slot);
                e.u64(*log);
            }
        }
    }
    let v3 = encode_v4(st);
    // The log stripes, pl logs, counters and write intent are unchanged since version 1:
    // they are the tail of the version 3 body after its data stripes.
    let mut d = Dec::new(&v3);
    d.u16().unwrap();
    for _ in 0..st.failed.len() {
        d.u16().unwrap();
    }
    let mut probe = MetaState::new(&st.geo);
    probe.decode_written(&mut d).unwrap();
    probe.decode_changed(&mut d).unwrap();
    e.0.extend_from_slice(&v3[v3.len() - d.remaining()..]);
    e.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (k+2) eplog-like geometry: 5000 stripes (5 write-intent regions), 6000 slots, 10 log slots.
    fn geo(k: usize) -> Geometry {
        Geometry {
            n: k + 2,
            k,
            m: 2,
            chunk: 4096,
            data_start: 4096,
            slots: 6000,
            stripes: 5000,
            log_slots: 10,
        }
    }

    fn sample(k: usize) -> MetaState {
        let g = geo(k);
        let mut st = MetaState::new(&g);
        let recs = vec![
            Rec::StripeWritten { stripe: 5 },
            Rec::StripeWritten { stripe: 299 },
            Rec::FullStripe { stripe: 7 },
            Rec::LogStripe {
                id: 0,
                off: 0,
                members: vec![
                    Member {
                        dev: g.dev_of(7, 2) as u16,
                        slot: 301,
                        stripe: 7,
                        pos: 2,
                    },
                    Member {
                        dev: g.dev_of(9, 1) as u16,
                        slot: 9,
                        stripe: 9,
                        pos: 1,
                    },
                ],
            },
            Rec::PlLog { stripe: 5, off: 1 },
            Rec::PlLog { stripe: 5, off: 2 },
            Rec::DeviceFailed { dev: 4 },
            Rec::CommitBegin,
            Rec::Dirty { region: 3 },
            Rec::Dirty { region: 0 },
        ];
        for r in &recs {
            st.apply(r);
        }
        st
    }

    #[test]
    fn version_1_checkpoints_decode_to_the_same_state() {
        let mut st = sample(4);
        for v in [1, 2] {
            assert_eq!(MetaState::decode(&geo(4), v, &encode_v1(&st)).unwrap(), st);
        }
        st.apply(&Rec::CommitDone);
        st.apply(&Rec::FullStripe { stripe: 40 });
        assert_eq!(MetaState::decode(&geo(4), 2, &encode_v1(&st)).unwrap(), st);
        assert!(!st.changed.contains_key(&40) && st.is_written(40));
    }

    fn journal_entry(g: &Geometry) -> JournalEntry {
        let c = g.chunk as usize;
        JournalEntry {
            id: 7,
            stripe: 3,
            chunks: vec![(0, vec![1; c]), (2, vec![2; c])],
        }
    }

    #[test]
    fn journal_records_round_trip_and_are_validated() {
        let g = geo(4);
        let st = MetaState::new(&g);
        let j = journal_entry(&g);
        let r = Rec::Journal(j.clone());
        let mut e = Enc::default();
        r.encode(&mut e);
        assert_eq!(e.0.len() as u64, JournalEntry::encoded_len(2, g.chunk));
        let back = Rec::decode(&mut Dec::new(&e.0)).unwrap();
        assert_eq!(back, r);
        st.check(&back).unwrap();
        let err = |b: &[u8]| match Rec::decode(&mut Dec::new(b)) {
            Err(ArrayError::Meta(m)) => m,
            other => panic!("decoded {other:?}"),
        };
        // A flipped bit in a saved chunk, in the id, in the CRC.
        for at in [40, 3, e.0.len() - 1] {
            let mut b = e.0.clone();
            b[at] ^= 0x10;
            assert!(err(&b).contains("CRC mismatch"), "{}", err(&b));
        }
        let mut b = e.0.clone();
        b[1] = 9;
        assert!(err(&b).contains("unknown version 9"), "{}", err(&b));
        for cut in (0..e.0.len()).step_by(97) {
            err(&e.0[..cut]);
        }
        // Decodable but out of the geometry.
        let c = g.chunk as usize;
        let bad = [
            JournalEntry {
                chunks: vec![(4, vec![0; c])],
                ..j.clone()
            },
            JournalEntry {
                chunks: vec![(0, vec![0; c - 512])],
                ..j.clone()
            },
            JournalEntry {
                stripe: g.stripes,
                ..j.clone()
            },
            JournalEntry {
                chunks: vec![(2, vec![0; c]), (1, vec![0; c])],
                ..j.clone()
            },
            JournalEntry {
                chunks: Vec::new(),
                ..j.clone()
            },
        ];
        for b in bad {
            assert!(
                st.check(&Rec::Journal(b.clone())).is_err(),
                "{b:?} accepted"
            );
        }
        // The journal is not metadata state.
        let mut after = st.clone();
        after.apply(&r);
        after.apply(&Rec::JournalDone { id: 7 });
        assert_eq!(after, st);
    }

    #[test]
    fn load_returns_the_live_journal_entries() {
        let g = geo(4);
        let layout = MetaLayout {
            cp_off: [2 << 16, 3 << 16],
            cp_size: 1 << 16,
            inc_off: 4 << 16,
            inc_size: 1 << 16,
        };
        let dev: Arc<dyn BlockDevice> = Arc::new(ecstack_device::MemDevice::new(5 << 16).unwrap());
        let mut mv = MetaVolume::new(Arc::clone(&dev), layout.clone(), 5);
        let st = sample(4);
        mv.write_checkpoint(&st.encode()).unwrap();
        let a = journal_entry(&g);
        let b = JournalEntry {
            id: 8,
            stripe: 9,
            ..a.clone()
        };
        mv.append(&[Rec::Journal(a.clone()), Rec::Journal(b.clone())])
            .unwrap();
        mv.append(&[Rec::JournalDone { id: 7 }, Rec::Dirty { region: 1 }])
            .unwrap();
        let mut again = MetaVolume::new(Arc::clone(&dev), layout.clone(), 5);
        let loaded = again.load(&g).unwrap();
        assert_eq!(again.journal.values().collect::<Vec<_>>(), vec![&b]);
        let mut want = st.clone();
        want.apply(&Rec::Dirty { region: 1 });
        assert_eq!(loaded, want);
        // A checkpoint starts an epoch without them (the array appends the live ones again).
        again.write_checkpoint(&loaded.encode()).unwrap();
        let mut third = MetaVolume::new(dev, layout, 5);
        third.load(&g).unwrap();
        assert!(third.journal.is_empty());
    }

    #[test]
    fn checkpoint_roundtrip() {
        let st = sample(4);
        let back = MetaState::decode(&geo(4), INLINE_CRC_META_VERSION, &st.encode()).unwrap();
        assert_eq!(back, st);
        assert!(back.is_written(299) && !back.is_written(6));
        assert_eq!(back.changed[&7].latest[2], Some((301, 0)));
        assert_eq!(back.log_next, 3);
        assert!(back.commit_in_progress);
        let enc = st.encode();
        assert!((enc.len() as u64) < MetaState::max_encoded(4, 6, 5000, 6000, 10));
    }

    #[test]
    fn truncated_or_garbage_checkpoints_are_errors_not_panics() {
        let st = sample(4);
        let enc = st.encode();
        for cut in 0..enc.len() {
            let r = MetaState::decode(&geo(4), INLINE_CRC_META_VERSION, &enc[..cut]);
            assert!(r.is_err(), "cut {cut}");
        }
        // In version 1 the write-intent section is optional (checkpoints from before it existed
        // end without it; the checkpoint's CRC catches a real truncation there).
        let enc = encode_v1(&st);
        let without_intent = enc.len() - 8 - 8 * st.dirty.len();
        for cut in 0..enc.len() {
            let r = MetaState::decode(&geo(4), 2, &enc[..cut]);
            assert!(r.is_err(), "cut {cut}");
            let r = MetaState::decode(&geo(4), 1, &enc[..cut]);
            if cut == without_intent {
                assert!(r.unwrap().dirty.is_empty());
            } else {
                assert!(r.is_err(), "cut {cut}");
            }
        }
        let mut x = 0x1234_5678u64;
        for _ in 0..200 {
            let v: Vec<u8> = (0..64)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            // Any outcome but a panic; a decoded state must pass its own checks again.
            if let Ok(st) = MetaState::decode(&geo(4), INLINE_CRC_META_VERSION, &v) {
                MetaState::decode(&geo(4), INLINE_CRC_META_VERSION, &st.encode()).unwrap();
            }
        }
    }

    #[test]
    fn commit_done_folds_latest_into_committed() {
        let mut st = sample(4);
        st.apply(&Rec::CommitDone);
        assert_eq!(st.changed[&7].committed[2], Some(301));
        assert_eq!(st.changed[&9].committed[1], Some(9));
        assert!(st.changed.values().all(|d| !d.pending() && d.parity));
        assert!(st.logs.is_empty() && st.pl_logs.is_empty());
        assert_eq!(st.log_next, 0);
        assert!(!st.commit_in_progress);
    }

    #[test]
    fn checkpoint_header_round_trip_and_rejects() {
        let h = CheckpointHeader {
            version: META_VERSION,
            salt: 0x0123_4567_89ab_cdef,
            epoch: 77,
            body_len: 1 << 40,
            body_crc: 0xdead_beef,
        };
        let b = h.encode();
        assert_eq!(&b[..8], CP_MAGIC);
        assert_eq!(CheckpointHeader::decode(&b), Some(h));
        assert!(b[CheckpointHeader::END..].iter().all(|&x| x == 0));
        for i in 0..CheckpointHeader::END {
            let mut x = b;
            x[i] ^= 0x10;
            assert_eq!(CheckpointHeader::decode(&x), None, "flip in byte {i}");
        }
        assert_eq!(CheckpointHeader::decode(&b[..CP_HEADER - 1]), None);
    }

    #[test]
    fn frame_header_round_trip_and_rejects() {
        let h = FrameHeader {
            version: META_VERSION,
            salt: 9,
            epoch: 3,
            seq: 12,
            payload_len: 5,
            crc: 0,
        };
        let payload = b"hello";
        let b = h.encode(payload);
        let back = FrameHeader::decode(&b, META_VERSION).unwrap();
        assert_eq!(FrameHeader { crc: back.crc, ..h }, back);
        assert!(back.crc_ok(&b, payload));
        assert!(!back.crc_ok(&b, b"hellO"));
        for i in 0..FrameHeader::LEN {
            let mut x = b;
            x[i] ^= 1;
            let ok = FrameHeader::decode(&x, META_VERSION).is_some_and(|f| f.crc_ok(&x, payload));
            assert!(!ok, "flip in byte {i}");
        }
        // A version 1 header (magic, length, salt, epoch, sequence, CRC) decodes by its layout.
        let mut v1 = Vec::new();
        v1.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
        v1.extend_from_slice(&5u32.to_le_bytes());
        v1.extend_from_slice(&9u64.to_le_bytes());
        v1.extend_from_slice(&3u64.to_le_bytes());
        v1.extend_from_slice(&12u64.to_le_bytes());
        let c = crc32c::crc32c_append(crc32c::crc32c(&v1), payload);
        v1.extend_from_slice(&c.to_le_bytes());
        let f1 = FrameHeader::decode(&v1, 1).unwrap();
        assert_eq!(
            (f1.version, f1.salt, f1.epoch, f1.seq, f1.payload_len),
            (1, 9, 3, 12, 5)
        );
        assert!(f1.crc_ok(&v1, payload));
    }

    #[test]
    fn out_of_range_records_are_refused() {
        let g = geo(4);
        let st = sample(4);
        let member = |stripe: u64, pos: u16| Member {
            dev: g.dev_of(stripe, pos as usize) as u16,
            slot: 350,
            stripe,
            pos,
        };
        let bad = [
            Rec::StripeWritten { stripe: 5000 },
            Rec::FullStripe { stripe: u64::MAX },
            Rec::Discard { stripe: 5000 },
            Rec::PlLog { stripe: 1, off: 10 },
            Rec::PlReset { stripe: 1 << 40 },
            Rec::DeviceFailed { dev: 10 },
            Rec::DeviceReplaced { dev: u16::MAX },
            Rec::Dirty { region: 5 },
            // Position >= k, a repeated device, a member off its device, a slot out of range.
            Rec::LogStripe {
                id: 5,
                off: 3,
                members: vec![member(2, 4)],
            },
            Rec::LogStripe {
                id: 5,
                off: 3,
                members: vec![member(2, 1), member(2, 1)],
            },
            Rec::LogStripe {
                id: 5,
                off: 3,
                members: vec![Member {
                    dev: 0,
                    ..member(2, 1)
                }],
            },
            Rec::LogStripe {
                id: 5,
                off: 3,
                members: vec![Member {
                    slot: 6000,
                    ..member(2, 1)
                }],
            },
            Rec::LogStripe {
                id: 5,
                off: 10,
                members: vec![member(2, 1)],
            },
            Rec::LogStripe {
                id: 5,
                off: 3,
                members: vec![],
            },
        ];
        for r in &bad {
            let mut s = st.clone();
            assert!(
                matches!(s.apply_checked(r), Err(ArrayError::Meta(_))),
                "{r:?} accepted"
            );
            assert_eq!(s, st, "a refused record changed the state");
        }
        let mut s = st.clone();
        s.apply_checked(&Rec::LogStripe {
            id: 5,
            off: 3,
            members: vec![member(2, 1), member(2, 3)],
        })
        .unwrap();
        // Rec::decode refuses a repeated device before any state sees it.
        let mut e = Enc::default();
        Rec::LogStripe {
            id: 1,
            off: 0,
            members: vec![member(2, 1), member(2, 1)],
        }
        .encode(&mut e);
        assert!(Rec::decode(&mut Dec::new(&e.0)).is_err());
    }

    #[test]
    fn checkpoint_entries_out_of_range_are_refused() {
        let g = geo(4);
        let st = sample(4);
        // A stripe beyond the geometry is refused.
        let mut wide = st.clone();
        wide.changed.insert(5000, DataStripe::new(4));
        assert!(MetaState::decode(&g, INLINE_CRC_META_VERSION, &wide.encode()).is_err());
        let mut slot = st.clone();
        slot.changed.get_mut(&7).unwrap().committed[0] = Some(6000);
        assert!(MetaState::decode(&g, INLINE_CRC_META_VERSION, &slot.encode()).is_err());
        let mut dangling = st.clone();
        dangling.logs.clear();
        assert!(MetaState::decode(&g, INLINE_CRC_META_VERSION, &dangling.encode()).is_err());
        let mut bits = st.clone();
        bits.written.push_extent(5000, 5001);
        assert!(MetaState::decode(&g, INLINE_CRC_META_VERSION, &bits.encode()).is_err());
        for v in [0, META_VERSION + 1, u32::MAX] {
            let e = MetaState::decode(&g, v, &st.encode())
                .unwrap_err()
                .to_string();
            assert!(e.contains("unknown format version"), "{e}");
        }
    }

    /// A random record of every kind (the match in `kind` fails to compile when a kind is added,
    /// so a new kind gets its case here).
    fn random_record(g: &Geometry, rng: &mut ecstack_base::Rng, next_log: &mut u64) -> Rec {
        fn kind(r: &Rec) -> u64 {
            match r {
                Rec::StripeWritten { .. } => 0,
                Rec::FullStripe { .. } => 1,
                Rec::LogStripe { .. } => 2,
                Rec::PlLog { .. } => 3,
                Rec::PlReset { .. } => 4,
                Rec::CommitBegin => 5,
                Rec::CommitDone => 6,
                Rec::DeviceFailed { .. } => 7,
                Rec::DeviceReplaced { .. } => 8,
                Rec::Dirty { .. } => 9,
                Rec::Clean => 10,
                Rec::Discard { .. } => 11,
                Rec::Journal(_) => 12,
                Rec::JournalDone { .. } => 13,
                Rec::ChunkCrcs { .. } => 14,
                Rec::ChunkCrcForget { .. } => 15,
            }
        }
        let stripe = rng.below(g.stripes);
        let r = match rng.below(20) {
            0 => Rec::StripeWritten { stripe },
            1 => Rec::FullStripe { stripe },
            2 => Rec::PlLog {
                stripe,
                off: rng.below(g.log_slots),
            },
            3 => Rec::PlReset { stripe },
            4 => Rec::CommitBegin,
            5 => Rec::CommitDone,
            6 => Rec::DeviceFailed {
                dev: rng.below(g.n as u64) as u16,
            },
            7 => Rec::DeviceReplaced {
                dev: rng.below(g.n as u64) as u16,
            },
            8 => Rec::Dirty {
                region: rng.below(g.stripes.div_ceil(REGION_STRIPES)),
            },
            9 => Rec::Clean,
            10 => Rec::Discard { stripe },
            11 => Rec::Journal(JournalEntry {
                id: rng.below(100),
                stripe,
                chunks: vec![(rng.below(g.k as u64) as u16, vec![7; g.chunk as usize])],
            }),
            12 => Rec::JournalDone { id: rng.below(100) },
            13 | 14 => {
                let dev = rng.below(g.devices() as u64) as u16;
                let slots = if (dev as usize) < g.n {
                    g.slots
                } else {
                    g.log_slots
                };
                let slot = rng.below(slots);
                let count = 1 + rng.below((slots - slot).min(20));
                match rng.below(4) {
                    0 => Rec::ChunkCrcForget {
                        dev,
                        slot,
                        count: count as u32,
                    },
                    _ => Rec::ChunkCrcs {
                        dev,
                        slot,
                        crcs: (0..count).map(|_| rng.below(1 << 32) as u32).collect(),
                    },
                }
            }
            _ => {
                let mut members: Vec<Member> = Vec::new();
                for _ in 0..1 + rng.below(g.k as u64) {
                    let (s, p) = (rng.below(g.stripes), rng.below(g.k as u64) as usize);
                    let dev = g.dev_of(s, p) as u16;
                    if members.iter().all(|m| m.dev != dev) {
                        members.push(Member {
                            dev,
                            slot: rng.below(g.slots),
                            stripe: s,
                            pos: p as u16,
                        });
                    }
                }
                *next_log += 1;
                Rec::LogStripe {
                    id: *next_log,
                    off: *next_log % g.log_slots,
                    members,
                }
            }
        };
        assert!(kind(&r) < 16);
        r
    }

    /// The bound `MetaVolume::fits` relies on: a record grows the checkpoint body by at most
    /// `CHECKPOINT_BYTES_PER_FRAME_BYTE_MAX` bytes per byte of the record.
    #[test]
    fn checkpoint_growth_per_record_byte_is_bounded() {
        let mut g = geo(4);
        g.log_slots = 1 << 20;
        let mut worst = 0f64;
        for seed in 1..=30u64 {
            let mut rng = ecstack_base::Rng::new(seed);
            let mut st = MetaState::new(&g);
            let mut next_log = 0;
            let mut before = st.encode().len() as u64;
            for _ in 0..400 {
                let r = random_record(&g, &mut rng, &mut next_log);
                let mut e = Enc::default();
                r.encode(&mut e);
                st.apply(&r);
                let after = st.encode().len() as u64;
                let grown = after.saturating_sub(before);
                worst = worst.max(grown as f64 / e.0.len() as f64);
                assert!(
                    grown <= CHECKPOINT_BYTES_PER_FRAME_BYTE_MAX * e.0.len() as u64,
                    "seed {seed}: {r:?} ({} bytes) grew the checkpoint by {grown} bytes",
                    e.0.len()
                );
                before = after;
            }
        }
        println!("largest growth: {worst:.2} checkpoint bytes per record byte");
    }

    /// A (4+2) geometry with 7 checksum pages per main device and one per log device.
    fn paged_layout(g: &Geometry) -> (MetaLayout, CrcArea) {
        let sb = 2 * crate::format::SB_SLOT;
        let layout = MetaLayout {
            cp_off: [sb, sb + (1 << 20)],
            cp_size: 1 << 20,
            inc_off: sb + (2 << 20),
            inc_size: 1 << 20,
        };
        let area = crc_area_of(g, &layout);
        (layout, area)
    }

    fn paged_volume(dev: Arc<dyn BlockDevice>, g: &Geometry) -> MetaVolume {
        let (layout, area) = paged_layout(g);
        let mut mv = MetaVolume::new(dev, layout, 7);
        mv.crc_area = Some(area);
        mv.paged = true;
        mv
    }

    /// What `Core::checkpoint` does: the dirty pages, flushed, then the checkpoint (undone if
    /// either fails).
    fn paged_checkpoint(mv: &mut MetaVolume, st: &MetaState) -> Result<()> {
        let pages = st.crcs.0.take_dirty_pages(mv.epoch + 1, mv.salt);
        let r = mv
            .write_crc_pages(&pages)
            .and_then(|()| mv.write_checkpoint(&st.encode_paged()));
        if r.is_err() {
            st.crcs.0.undo_pages(&pages);
        }
        r
    }

    /// Checksums of `count` slots from `first` of every device, seeded.
    /// A copy of `image` on a device that loses power before operation `at` (writes may survive,
    /// tear or reorder; `seed` varies which).
    fn cut_copy(
        image: &[u8],
        at: u64,
        seed: u64,
    ) -> Arc<ecstack_device::faulty::Faulty<ecstack_device::mem::MemDevice>> {
        use ecstack_device::faulty::{FaultConfig, Faulty, PowerCutPolicy};
        use ecstack_device::mem::MemDevice;
        let mem = MemDevice::new(image.len() as u64).unwrap();
        mem.write_at(image, 0).unwrap();
        let cfg = FaultConfig {
            seed: at * 10 + seed,
            power_cut_at_op: Some(at),
            power_cut: PowerCutPolicy {
                survive_prob: 0.5,
                torn_prob: 0.7,
                reorder: true,
                sector: 512,
            },
            ..FaultConfig::default()
        };
        Arc::new(Faulty::new(mem, cfg))
    }

    /// Runs `attempt(at, seed)` for a power cut before operation `at = 0, 1, …` with three seeds
    /// each, until an attempt finishes without meeting its cut (`None`); an attempt that was cut
    /// returns which of the two allowed states it loaded (0 before, 1 after). Asserts more than 10
    /// cuts and both outcomes seen.
    fn every_cut(mut attempt: impl FnMut(u64, u64) -> Option<usize>) {
        let mut cuts = 0;
        let mut outcomes = [0u32; 2];
        'cuts: for at in 0.. {
            for seed in 0..3u64 {
                match attempt(at, seed) {
                    None => break 'cuts,
                    Some(which) => {
                        cuts += 1;
                        outcomes[which] += 1;
                    }
                }
            }
        }
        println!("{cuts} cuts: {outcomes:?} (before, after)");
        assert!(
            cuts > 10 && outcomes[0] > 0 && outcomes[1] > 0,
            "{cuts} cuts: {outcomes:?}"
        );
    }

    fn set_crcs(st: &MetaState, first: u64, count: u64, seed: u64) -> Vec<Rec> {
        let mut rng = ecstack_base::Rng::new(seed);
        let mut recs = Vec::new();
        for d in 0..st.crcs.0.devices() {
            let n = count.min(st.crcs.0.slots(d).saturating_sub(first));
            if n == 0 {
                continue;
            }
            let crcs: Vec<u32> = (0..n).map(|_| rng.below(1 << 32) as u32).collect();
            recs.push(Rec::ChunkCrcs {
                dev: d as u16,
                slot: first,
                crcs,
            });
        }
        recs.push(Rec::ChunkCrcForget {
            dev: 1,
            slot: first + 1,
            count: 2,
        });
        recs
    }

    /// Version 6 keeps the checksum table out of the checkpoint: with every slot's checksum
    /// known, the body is the version 4 body plus a page map of at most 2 bits per 960 slots,
    /// whereas version 5 adds 4 bytes per slot.
    #[test]
    fn paged_checkpoint_size_does_not_grow_with_written_chunks() {
        let mut g = geo(6);
        g.slots = 200_000;
        g.stripes = 150_000;
        let one = MetaState::new(&g);
        one.crcs.0.store(0, 5, Some(1));
        let all = MetaState::new(&g);
        for d in 0..all.crcs.0.devices() {
            for s in 0..all.crcs.0.slots(d) {
                all.crcs.0.store(d, s, Some(s as u32));
            }
        }
        let mut sizes = Vec::new();
        for st in [&one, &all] {
            st.crcs.0.take_dirty_pages(1, 7);
            let paged = st.encode_paged();
            let v4 = encode_v4(st);
            let map = (paged.len() - v4.len()) as u64;
            let pages = g.slots.div_ceil(crate::crc::PAGE_SLOTS);
            assert!(
                map <= 2 + g.devices() as u64 * (1 + pages.div_ceil(4)),
                "page map of {map} bytes"
            );
            let back = MetaState::decode(&g, META_VERSION, &paged).unwrap();
            assert_eq!(back.crcs.0.mapped_pages(), st.crcs.0.mapped_pages());
            sizes.push((paged.len(), st.encode().len()));
        }
        println!(
            "one checksum known: v6 {} B, v5 {} B; all {} known: v6 {} B, v5 {} B",
            sizes[0].0,
            sizes[0].1,
            8 * g.slots + 20,
            sizes[1].0,
            sizes[1].1
        );
        // Every page named costs at most 2 bits: 0.03 % of the version 5 table here.
        let pages = g.slots.div_ceil(crate::crc::PAGE_SLOTS) as usize;
        assert!(
            sizes[1].0 <= sizes[0].0 + g.devices() * pages.div_ceil(4),
            "{sizes:?}"
        );
        assert!(sizes[1].1 as u64 > 4 * g.n as u64 * g.slots, "{sizes:?}");
    }

    /// The order of a version 6 checkpoint: a power cut at every write and flush of it (unflushed
    /// writes lost, torn at 512-byte sectors or reordered, seeded) loads either the state before
    /// (the old checkpoint, its frames and the pages it names) or the state after, never a page
    /// error; and the next checkpoint after the reload (whose epoch repeats the cut one's) never
    /// lets a page left over from the cut one through.
    #[test]
    fn paged_checksums_survive_a_power_cut_at_every_step() {
        let g = geo(4);
        let (_, area) = paged_layout(&g);
        // The state before: a checkpoint naming pages, then frames with checksum records.
        let base = volume_dev(area.end());
        let mut mv = paged_volume(Arc::clone(&base), &g);
        let mut before = MetaState::new(&g);
        for r in set_crcs(&before, 0, 3000, 1) {
            before.apply(&r);
        }
        paged_checkpoint(&mut mv, &before).unwrap();
        let recs = set_crcs(&before, 2500, 1500, 2);
        mv.append(&recs).unwrap();
        for r in &recs {
            before.apply(r);
        }
        let mut image = vec![0u8; area.end() as usize];
        base.read_at(&mut image, 0).unwrap();
        // The state after: more checksums, and a checkpoint of it.
        let mut after = before.clone();
        for r in set_crcs(&after, 4000, 2000, 3) {
            after.apply(&r);
        }
        let errors = |s: &MetaState| {
            s.crcs
                .0
                .page_errors
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        every_cut(|at, seed| {
            // Load the state before (reads only), change it to the state after.
            let mut mv = paged_volume(Arc::clone(&base), &g);
            let mut cur = mv.load(&g).unwrap();
            assert!(cur == before, "the image loads the state before");
            for r in set_crcs(&cur, 4000, 2000, 3) {
                cur.apply(&r);
            }
            assert!(cur == after);
            // Its checkpoint on a copy of the image that loses power before operation `at`.
            let f = cut_copy(&image, at, seed);
            let dev: Arc<dyn BlockDevice> = f.clone();
            mv.dev = Arc::clone(&dev);
            if paged_checkpoint(&mut mv, &cur).is_ok() {
                return None;
            }
            f.power_on();
            let mut again = paged_volume(Arc::clone(&dev), &g);
            let mut got = again.load(&g).unwrap();
            assert_eq!(errors(&got), 0, "cut at op {at}, seed {seed}");
            let which = if got == before {
                0
            } else if got == after {
                1
            } else {
                panic!("cut at op {at}, seed {seed}: loaded a state that was never synced")
            };
            // Epoch reuse: a checkpoint of the reloaded state changed elsewhere (the pages
            // the cut checkpoint wrote are not dirty now) loads exactly that state.
            for r in set_crcs(&got, 100, 50, 4) {
                got.apply(&r);
            }
            paged_checkpoint(&mut again, &got).unwrap();
            let mut third = paged_volume(Arc::clone(&dev), &g);
            let loaded = third.load(&g).unwrap();
            assert_eq!(errors(&loaded), 0);
            assert!(
                loaded == got,
                "cut at op {at}, seed {seed}: a page of the cut checkpoint leaked"
            );
            Some(which)
        });
    }

    /// A named checksum page that fails its check after the checkpoint was durable (bit rot on the
    /// metadata volume, a torn write the device did not report): the load succeeds, that page's
    /// slots are unknown (read unverified, never checked against stale checksums of the other
    /// copy), the page is counted, and the next checkpoint writes it again.
    #[test]
    fn a_corrupt_checksum_page_is_read_as_unknown_and_rewritten() {
        let g = geo(4);
        let (_, area) = paged_layout(&g);
        let dev = volume_dev(area.end());
        let mut mv = paged_volume(Arc::clone(&dev), &g);
        let mut st = MetaState::new(&g);
        for r in set_crcs(&st, 0, 3000, 1) {
            st.apply(&r);
        }
        paged_checkpoint(&mut mv, &st).unwrap();
        // Page 1 of device 2 again, with other checksums: copy B is named, copy A holds older ones.
        for r in set_crcs(&st, 960, 960, 5) {
            st.apply(&r);
        }
        paged_checkpoint(&mut mv, &st).unwrap();
        let named = area.page_off(2, 1, 1);
        let mut b = [0u8; 1];
        dev.read_at(&mut b, named + 700).unwrap();
        dev.write_at(&[b[0] ^ 4], named + 700).unwrap();
        let mut again = paged_volume(Arc::clone(&dev), &g);
        let got = again.load(&g).unwrap();
        let errors = |s: &MetaState| {
            s.crcs
                .0
                .page_errors
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        assert_eq!(errors(&got), 1);
        for slot in 0..g.slots {
            let want = match slot / crate::crc::PAGE_SLOTS {
                1 => None,
                _ => st.crcs.0.get(2, slot),
            };
            assert_eq!(got.crcs.0.get(2, slot), want, "slot {slot}");
        }
        for d in [0, 1, 3, 4, 5, 6, 7] {
            for slot in 0..g.slots.min(st.crcs.0.slots(d)) {
                assert_eq!(got.crcs.0.get(d, slot), st.crcs.0.get(d, slot));
            }
        }
        paged_checkpoint(&mut again, &got).unwrap();
        let mut third = paged_volume(Arc::clone(&dev), &g);
        let reloaded = third.load(&g).unwrap();
        assert_eq!(errors(&reloaded), 0);
        assert!(reloaded == got);
        // A checkpoint that names pages of a volume without the area is refused by name.
        let mut plain = MetaVolume::new(Arc::clone(&dev), paged_layout(&g).0, 7);
        plain.crc_area = None;
        let e = plain.load(&g).unwrap_err().to_string();
        assert!(e.contains("no checksum area"), "{e}");
    }

    /// The upgrade of a version 5 volume that has room for the checksum area (grown after the
    /// array was made): loading it makes the volume paged, the next sync writes a full version 6
    /// checkpoint, and a power cut at every write and flush of that checkpoint (unflushed writes
    /// lost, torn or reordered, seeded) loads either the version 5 state before (which upgrades
    /// again on the next sync) or the version 6 state after, never a page error or a lost
    /// checksum. Without room the volume stays version 5.
    #[test]
    fn a_version_5_volume_with_room_upgrades_and_survives_a_power_cut_at_every_step() {
        use ecstack_device::mem::MemDevice;
        let g = geo(4);
        let (layout, area) = paged_layout(&g);
        let inc_end = layout.inc_off + layout.inc_size;
        // A version 5 volume (no checksum area: it ends with its incremental area): a checkpoint
        // with the checksum table inline, then frames with checksum records.
        let v5_dev = volume_dev(inc_end);
        let mut v5 = MetaVolume::new(Arc::clone(&v5_dev), layout.clone(), 7);
        let mut before = MetaState::new(&g);
        for r in set_crcs(&before, 0, 3000, 1) {
            before.apply(&r);
        }
        v5.write_checkpoint(&before.encode()).unwrap();
        assert_eq!(v5.version, INLINE_CRC_META_VERSION);
        let recs = set_crcs(&before, 2500, 1500, 2);
        v5.append(&recs).unwrap();
        for r in &recs {
            before.apply(r);
        }
        // Not grown: loads as version 5 and keeps appending version 5 frames.
        let mut same = MetaVolume::new(Arc::clone(&v5_dev), layout.clone(), 7);
        same.crc_area = Some(area.clone());
        assert!(same.load(&g).unwrap() == before);
        assert!(!same.paged && same.write_version() == INLINE_CRC_META_VERSION);
        assert!(
            same.fits_records(&recs),
            "a version 5 volume without room appends frames"
        );
        // Grown: the same bytes on a volume with room for the area after them.
        let mut image = vec![0u8; area.end() as usize];
        v5_dev.read_at(&mut image[..inc_end as usize], 0).unwrap();
        let upgrading = |dev: Arc<dyn BlockDevice>| {
            let mut mv = MetaVolume::new(dev, layout.clone(), 7);
            mv.crc_area = Some(area.clone());
            mv
        };
        let checkpoint_version = |dev: &dyn BlockDevice| {
            (0..2)
                .filter_map(|i| {
                    let mut h = vec![0u8; CP_HEADER];
                    dev.read_at(&mut h, layout.cp_off[i]).unwrap();
                    CheckpointHeader::decode(&h).map(|c| (c.epoch, c.version))
                })
                .max()
                .map(|(_, v)| v)
                .unwrap()
        };
        let errors = |s: &MetaState| {
            s.crcs
                .0
                .page_errors
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let mut after = before.clone();
        for r in set_crcs(&after, 4000, 2000, 3) {
            after.apply(&r);
        }
        every_cut(|at, seed| {
            let f = cut_copy(&image, at, seed);
            let dev: Arc<dyn BlockDevice> = f.clone();
            // Open (reads only, from the grown image), change the state, sync: a frame does
            // not fit (the loaded checkpoint is of version 5), so a full checkpoint of version
            // 6 is written, on the copy that loses power.
            let grown = MemDevice::new(image.len() as u64).unwrap();
            grown.write_at(&image, 0).unwrap();
            let mut mv = upgrading(Arc::new(grown));
            let mut cur = mv.load(&g).unwrap();
            mv.dev = Arc::clone(&dev);
            assert!(cur == before, "the grown image loads the state before");
            assert!(mv.paged && mv.write_version() == META_VERSION);
            let recs = set_crcs(&cur, 4000, 2000, 3);
            assert!(
                !mv.fits_records(&recs),
                "no version 6 frame after a version 5 checkpoint"
            );
            for r in &recs {
                cur.apply(r);
            }
            assert!(cur == after);
            if paged_checkpoint(&mut mv, &cur).is_ok() {
                // Everything is flushed: read what the device holds (a read through `f`
                // would meet the power cut, which lies past the checkpoint's operations).
                let mut bytes = vec![0u8; image.len()];
                f.inner().read_at(&mut bytes, 0).unwrap();
                let held = MemDevice::new(image.len() as u64).unwrap();
                held.write_at(&bytes, 0).unwrap();
                assert_eq!(checkpoint_version(&held), META_VERSION);
                let got = upgrading(Arc::new(held)).load(&g).unwrap();
                assert!(got == after && errors(&got) == 0);
                return None;
            }
            f.power_on();
            let mut again = upgrading(Arc::clone(&dev));
            let mut got = again.load(&g).unwrap();
            assert_eq!(errors(&got), 0, "cut at op {at}, seed {seed}");
            let which = if got == before {
                assert_eq!(checkpoint_version(dev.as_ref()), INLINE_CRC_META_VERSION);
                0
            } else if got == after {
                assert_eq!(checkpoint_version(dev.as_ref()), META_VERSION);
                1
            } else {
                panic!("cut at op {at}, seed {seed}: loaded a state that was never synced")
            };
            // The reopened volume upgrades (again, or goes on in version 6): a checkpoint of
            // the reloaded state changed elsewhere loads exactly that state, in version 6.
            for r in set_crcs(&got, 100, 50, 4) {
                got.apply(&r);
            }
            paged_checkpoint(&mut again, &got).unwrap();
            assert_eq!(checkpoint_version(dev.as_ref()), META_VERSION);
            let loaded = upgrading(Arc::clone(&dev)).load(&g).unwrap();
            assert_eq!(errors(&loaded), 0);
            assert!(
                loaded == got,
                "cut at op {at}, seed {seed}: a checksum was lost or a stale page leaked"
            );
            Some(which)
        });
    }

    fn volume_dev(bytes: u64) -> Arc<dyn BlockDevice> {
        Arc::new(ecstack_device::MemDevice::new(bytes).unwrap())
    }

    /// A state whose checkpoint body is about `updates` x 50 bytes (pending log stripes).
    fn grown_state(g: &Geometry, updates: u64) -> MetaState {
        let mut st = MetaState::new(g);
        for i in 0..updates {
            let s = i % g.stripes;
            st.apply(&Rec::LogStripe {
                id: i,
                off: i % g.log_slots,
                members: vec![Member {
                    dev: g.dev_of(s, 0) as u16,
                    slot: g.stripes + i % (g.slots - g.stripes),
                    stripe: s,
                    pos: 0,
                }],
            });
        }
        st
    }

    /// Checkpoint areas grow when a checkpoint fills more than half of one, or does not fit:
    /// the volume loads the same state before the superblock records the new layout (the old
    /// layout, checkpoint and frames are untouched) and after it.
    #[test]
    fn checkpoint_areas_grow_and_survive_a_cut_at_every_step() {
        let mut g = geo(4);
        g.log_slots = 1 << 20;
        let layout = MetaLayout {
            cp_off: [
                2 * crate::format::SB_SLOT,
                2 * crate::format::SB_SLOT + 8192,
            ],
            cp_size: 8192,
            inc_off: 2 * crate::format::SB_SLOT + 16384,
            inc_size: 4 << 20,
        };
        let dev = volume_dev(layout.inc_off + layout.inc_size);
        let mut mv = MetaVolume::new(Arc::clone(&dev), layout.clone(), 7);
        mv.cp_size_max = checkpoint_area_max(&g);
        let load = |layout: &MetaLayout| {
            let mut v = MetaVolume::new(Arc::clone(&dev), layout.clone(), 7);
            v.load(&g).unwrap()
        };
        let mut stored: Option<MetaLayout> = None;
        let mut store = |_: &dyn BlockDevice, l: &MetaLayout| {
            stored = Some(l.clone());
            Ok(())
        };
        // Small: written in place, no growth.
        let small = grown_state(&g, 20);
        mv.write_checkpoint_growing(&small.encode(), &mut store)
            .unwrap();
        assert_eq!(mv.layout, layout);
        // Frames are limited by the room the next checkpoint needs in its area.
        let frame = [Rec::StripeWritten { stripe: 1 }];
        assert!(mv.fits(frame_len(&frame)));
        assert!(!mv.fits(8192 / CHECKPOINT_BYTES_PER_FRAME_BYTE_MAX));
        mv.append(&frame).unwrap();
        let mut small_after = small.clone();
        small_after.apply(&frame[0]);
        assert!(load(&layout) == small_after);

        // A checkpoint that does not fit, with live frames: a cut before the superblock leaves
        // the old layout's checkpoint and frames.
        let big = grown_state(&g, 400);
        let body = big.encode();
        assert!(body.len() > 8192);
        let mut cut = |_: &dyn BlockDevice, _: &MetaLayout| -> Result<()> {
            Err(ArrayError::Meta("power cut".into()))
        };
        let mut mv2 = MetaVolume::new(Arc::clone(&dev), layout.clone(), 7);
        mv2.cp_size_max = mv.cp_size_max;
        assert!(mv2.load(&g).unwrap() == small_after);
        assert!(mv2.write_checkpoint_growing(&body, &mut cut).is_err());
        assert!(load(&layout) == small_after, "old layout after a cut");
        // Without the cut: the new layout holds the big state, the old one still loads its own.
        let mut stored: Option<MetaLayout> = None;
        mv.write_checkpoint_growing(&body, &mut |_: &dyn BlockDevice, l: &MetaLayout| {
            stored = Some(l.clone());
            Ok(())
        })
        .unwrap();
        let grown = stored.expect("the layout grew");
        assert_eq!(mv.layout, grown);
        grown.validate(CP_HEADER as u64).unwrap();
        assert!(grown.cp_size >= 4 * (CP_HEADER + body.len()) as u64);
        assert!(
            grown.cp_off[0] >= layout.inc_off + 4096,
            "after the live frame"
        );
        assert!(load(&grown) == big);
        // Frames and checkpoints in the grown areas.
        mv.append(&frame).unwrap();
        let mut big_after = big.clone();
        big_after.apply(&frame[0]);
        assert!(load(&grown) == big_after);
        mv.write_checkpoint_growing(
            &big_after.encode(),
            &mut |_: &dyn BlockDevice, _: &MetaLayout| {
                panic!("no growth while the area is less than half full")
            },
        )
        .unwrap();
        assert!(load(&grown) == big_after);

        // More than half full after a checkpoint: written in place, then again in larger areas
        // at the start of the (now empty) incremental area.
        let bigger = grown_state(&g, 400 * 3);
        let body = bigger.encode();
        assert!(2 * (body.len() + CP_HEADER) as u64 > grown.cp_size);
        assert!(((body.len() + CP_HEADER) as u64) < grown.cp_size);
        let mut stored: Option<MetaLayout> = None;
        mv.write_checkpoint_growing(&body, &mut |_: &dyn BlockDevice, l: &MetaLayout| {
            stored = Some(l.clone());
            Ok(())
        })
        .unwrap();
        let regrown = stored.expect("grew again");
        assert_eq!(regrown.cp_off[0], grown.inc_off);
        assert!(load(&grown) == bigger, "the in-place copy");
        assert!(load(&regrown) == bigger);
        let _ = store;
    }

    /// A volume with no room to grow writes what fits, then refuses the checkpoint that does not.
    #[test]
    fn checkpoint_areas_without_room_to_grow_are_an_error() {
        let mut g = geo(4);
        g.log_slots = 1 << 20;
        let layout = MetaLayout {
            cp_off: [
                2 * crate::format::SB_SLOT,
                2 * crate::format::SB_SLOT + 8192,
            ],
            cp_size: 8192,
            inc_off: 2 * crate::format::SB_SLOT + 16384,
            inc_size: INC_AREA_MIN_BYTES,
        };
        let dev = volume_dev(layout.inc_off + layout.inc_size);
        let mut mv = MetaVolume::new(Arc::clone(&dev), layout, 7);
        mv.cp_size_max = checkpoint_area_max(&g);
        let mut never =
            |_: &dyn BlockDevice, _: &MetaLayout| -> Result<()> { panic!("no room to grow") };
        mv.write_checkpoint_growing(&grown_state(&g, 100).encode(), &mut never)
            .unwrap();
        let e = mv
            .write_checkpoint_growing(&grown_state(&g, 400).encode(), &mut never)
            .unwrap_err()
            .to_string();
        assert!(e.contains("use a larger metadata volume"), "{e}");
    }

    /// An eplog (6+2) array on 8 main devices of 4 TB (and 2 log devices of 4 TB), 4 KiB chunks,
    /// the default 25% spare area: every stripe written once.
    fn geo_8x4tb() -> Geometry {
        let chunk = 4096u64;
        let slots = (4_000_000_000_000 - chunk) / chunk;
        Geometry {
            n: 8,
            k: 6,
            m: 2,
            chunk,
            data_start: chunk,
            slots,
            stripes: (slots as f64 * 0.75) as u64,
            log_slots: slots,
        }
    }

    /// `updates` distinct data chunks, chosen at random, each rewritten once out of place through
    /// log stripes of up to k chunks on distinct devices (as eplog's write path records them).
    /// Returns the state with the updates pending, and the same state after a parity commit.
    fn updated_state(g: &Geometry, updates: usize, seed: u64) -> (MetaState, MetaState) {
        g.validate(crate::SchemeKind::Eplog).unwrap();
        let mut st = MetaState::new(g);
        st.written.push_extent(0, g.stripes);
        let mut rng = ecstack_base::Rng::new(seed);
        let mut chosen = std::collections::HashSet::new();
        let mut spare = vec![g.stripes; g.n];
        let mut group: Vec<Member> = Vec::new();
        let mut next_id = 0u64;
        let mut flush = |st: &mut MetaState, group: &mut Vec<Member>| {
            if !group.is_empty() {
                st.apply(&Rec::LogStripe {
                    id: next_id,
                    off: next_id,
                    members: std::mem::take(group),
                });
                next_id += 1;
            }
        };
        while chosen.len() < updates {
            let (stripe, pos) = (rng.below(g.stripes), rng.below(g.k as u64) as usize);
            if !chosen.insert((stripe, pos)) {
                continue;
            }
            let dev = g.dev_of(stripe, pos);
            if group.iter().any(|m| m.dev as usize == dev) || group.len() == g.k {
                flush(&mut st, &mut group);
            }
            group.push(Member {
                dev: dev as u16,
                slot: spare[dev],
                stripe,
                pos: pos as u16,
            });
            spare[dev] += 1;
        }
        flush(&mut st, &mut group);
        let mut committed = st.clone();
        committed.apply(&Rec::CommitDone);
        (st, committed)
    }

    #[test]
    fn checkpoint_size_grows_with_updates_not_capacity() {
        // 1,000 and 10,000 updated chunks of the 8 x 4 TB array: about 20 and 50 bytes per chunk
        // (committed, pending), nothing per stripe of the capacity.
        for updates in [1_000usize, 10_000] {
            let (pending, committed) = updated_state(&geo_8x4tb(), updates, 7);
            for (what, st) in [("pending", &pending), ("committed", &committed)] {
                let body = st.encode();
                let per_chunk = body.len() as f64 / updates as f64;
                println!("{updates} updated chunks, {what}: {} bytes", body.len());
                assert!(
                    per_chunk < 64.0,
                    "{what}: {per_chunk} bytes per updated chunk"
                );
                let back = MetaState::decode(&st.geo, INLINE_CRC_META_VERSION, &body).unwrap();
                assert!(back == *st, "{what}: round trip");
            }
        }
    }

    /// Heap bytes in use (glibc `mallinfo2`: small blocks plus mmapped ones), to measure what a
    /// structure keeps: the difference across building it.
    fn heap_bytes() -> u64 {
        // SAFETY: mallinfo2 only reads the allocator's counters.
        let m = unsafe { libc::mallinfo2() };
        (m.uordblks + m.hblkhd) as u64
    }

    /// CPU time of the calling thread, seconds (`/proc/thread-self/schedstat`): on the shared,
    /// loaded machine wall time overstates the work several times.
    fn thread_cpu_s() -> f64 {
        let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
        let ns: u64 = s.split_whitespace().next().unwrap().parse().unwrap();
        ns as f64 / 1e9
    }

    /// Wall and thread CPU seconds of `f`.
    fn timed<T>(f: impl FnOnce() -> T) -> (T, f64, f64) {
        let (t, c) = (std::time::Instant::now(), thread_cpu_s());
        let r = f();
        (r, t.elapsed().as_secs_f64(), thread_cpu_s() - c)
    }

    /// The figures in docs/array-format.md ("Metadata size"): `cargo test -p ecstack-array --lib
    /// checkpoint_size_8x4tb_1m_updates -- --ignored --nocapture` (the test profile optimizes).
    /// The checkpoint sizes, then what opening the array costs: the state decoded, the slot
    /// allocator built (time and memory), and a whole `Array::open` of an array on 8 + 2 sparse
    /// files of 4 TB whose metadata volume holds that checkpoint (in `ECSTACK_BIG_DIR`, default
    /// /var/tmp; the files take a few MiB of disk).
    #[test]
    #[ignore = "measurement: builds 10^6 updated chunks (about 1 GB of memory)"]
    fn checkpoint_size_8x4tb_1m_updates() {
        let (pending, committed) = updated_state(&geo_8x4tb(), 1_000_000, 1);
        let g = &pending.geo;
        println!(
            "geometry: 8 x 4 TB main devices (6+2), 4 KiB chunks, {} slots and {} stripes per device, capacity {} bytes",
            g.slots,
            g.stripes,
            g.capacity()
        );
        println!(
            "checkpoint area for any state of this geometry (the reservation before areas grew): {} bytes",
            checkpoint_area_max(g)
        );
        for (what, st) in [("pending", &pending), ("committed", &committed)] {
            let (body, enc_s, enc_cpu) = timed(|| st.encode());
            let (back, dec_s, dec_cpu) =
                timed(|| MetaState::decode(g, INLINE_CRC_META_VERSION, &body).unwrap());
            assert!(back == *st, "{what}: round trip");
            drop(back);
            let heap = heap_bytes();
            let (alloc, build_s, build_cpu) = timed(|| crate::core::Alloc::build(g, st));
            let alloc_heap = heap_bytes().saturating_sub(heap);
            println!(
                "10^6 updated chunks, {what}: checkpoint body {} bytes ({:.1} MiB; {} log stripes, {} data stripes with entries); encoded in {enc_s:.2} s ({enc_cpu:.2} s CPU), decoded in {dec_s:.2} s ({dec_cpu:.2} s CPU); slot allocator built in {build_s:.2} s ({build_cpu:.2} s CPU): {} free-slot extents, {:.1} MiB of heap, {} free slots on the fullest device",
                body.len(),
                body.len() as f64 / (1 << 20) as f64,
                st.logs.len(),
                st.changed.len(),
                alloc.extents(),
                alloc_heap as f64 / (1 << 20) as f64,
                alloc.min_free()
            );
            assert!(body.len() <= 64 << 20, "{what}: over the 64 MB goal");
        }
        drop(committed);
        open_8x4tb_files(pending);
    }

    /// Create an eplog (6+2) array on sparse 4 TB files, put `updated`'s checkpoint (rebuilt for
    /// the created geometry) on its metadata volume through the growing checkpoint areas, and
    /// time `Array::open` and the memory it keeps.
    fn open_8x4tb_files(updated: MetaState) {
        use crate::{Array, ArrayConfig, ArrayDevices, SchemeKind};
        use ecstack_device::FileDevice;
        let base = std::env::var("ECSTACK_BIG_DIR").unwrap_or_else(|_| "/var/tmp".into());
        let dir = std::path::Path::new(&base).join(format!("ecstack-8x4tb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tb4 = 4_000_000_000_000u64;
        let files = |meta_bytes: u64| {
            let dev = |name: String, bytes: u64| -> Arc<dyn BlockDevice> {
                Arc::new(FileDevice::create(dir.join(name), bytes).unwrap())
            };
            ArrayDevices {
                main: (0..8).map(|i| dev(format!("main{i}"), tb4)).collect(),
                log: (0..2).map(|i| dev(format!("log{i}"), tb4)).collect(),
                meta: dev("meta".into(), meta_bytes),
                specs: None,
            }
        };
        let meta_bytes = 1u64 << 30;
        let cfg = ArrayConfig {
            scheme: SchemeKind::Eplog,
            ..ArrayConfig::rs(6, 2)
        };
        let array = Array::create(&cfg, files(meta_bytes)).unwrap();
        let sb0 = array.superblock();
        array.close().unwrap();
        drop(array);
        let g = sb0.geometry.clone();
        drop(updated);
        let (pending, _) = updated_state(&g, 1_000_000, 1);
        let devices = files(meta_bytes);
        let mut sb = Array::read_superblock(devices.meta.as_ref()).unwrap();
        let mut mv = MetaVolume::new(Arc::clone(&devices.meta), sb.layout.clone(), sb.uuid);
        mv.cp_size_max = checkpoint_area_max(&g);
        mv.load(&g).unwrap();
        let body = pending.encode();
        let (changed, logs) = (pending.changed.len(), pending.logs.len());
        drop(pending);
        mv.write_checkpoint_growing(&body, &mut |dev: &dyn BlockDevice, l: &MetaLayout| {
            sb.layout = l.clone();
            crate::core::store_superblock(&mut sb, dev)
        })
        .unwrap();
        drop((mv, devices, body));
        println!(
            "array on 8 + 2 sparse 4 TB files: checkpoint areas {} bytes each at creation, {} bytes each after the 10^6-update checkpoint grew them; incremental area {} bytes",
            sb0.layout.cp_size, sb.layout.cp_size, sb.layout.inc_size
        );
        let heap = heap_bytes();
        let (array, open_s, open_cpu) = timed(|| Array::open(files(meta_bytes)).unwrap());
        let kept = heap_bytes().saturating_sub(heap);
        let st = array.status();
        println!(
            "Array::open with 10^6 pending updated chunks ({changed} data stripes with entries, {logs} log stripes): {open_s:.2} s ({open_cpu:.2} s CPU of the opening thread), {:.0} MiB of heap kept by the open array; {} free slots on the fullest device",
            kept as f64 / (1 << 20) as f64,
            st.pending.min_free_slots
        );
        drop(array);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
