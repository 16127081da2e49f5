//! The MDS as other crates see it: domain types and a typed async client ([`MdsClient`]) over the
//! generated gRPC client. Callers see no generated type (only the MDS's server does); conversions check every enum
//! and required field, so a malformed reply is an [`MdsError::Protocol`], never a panic.

use std::collections::BTreeMap;
use std::time::Duration;

use ecstack_rpc::Security;
use tonic::transport::Channel;

use crate::proto;
use crate::proto::mds_client::MdsClient as RawClient;
use crate::FailoverChannel;
use crate::UpdateScheme;

/// How long a client waits to connect to the MDS, and for one MDS request.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Most segments of one file (so a file is at most this many `segment_bytes` long).
pub const MAX_SEGMENTS_PER_FILE: u64 = 1 << 20;

/// Health of an OSD as the MDS sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OsdState {
    /// Heartbeating.
    Up,
    /// Missed heartbeats for `down_after_ms`: its chunks are read degraded, it may come back.
    Down,
    /// Declared out (`out_after_ms` or `osd out`): its chunks are rebuilt elsewhere.
    Out,
}

/// State of one chunk of a segment at its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChunkState {
    Healthy,
    /// The holder missed a write or update; never read until caught up.
    Stale,
    /// Being rebuilt onto its (new or returning) holder.
    Recovering,
    /// No holder: its OSD is out (or there were fewer than n OSDs up) and no target was available.
    Lost,
}

/// Cluster-wide parameters the MDS hands to every OSD at registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterParams {
    pub cluster_id: String,
    /// An ecstack codes family name (`rs-vand`, ...).
    pub code: String,
    pub k: u32,
    pub m: u32,
    pub segment_bytes: u64,
    pub heartbeat_ms: u32,
    /// After this long without a heartbeat the MDS declares an OSD down and promotes new primaries
    /// for its segments; OSDs derive their primary lease from it (0: no lease).
    pub down_after_ms: u32,
}

/// Bytes per chunk of a segment of `length` bytes under a code with `k` data chunks whose chunk
/// lengths are multiples of `align_bytes` (the code's `chunk_align_bytes`: 1 for byte-position-wise
/// codes, p − 1 for RDP): ⌈length / k⌉ rounded up to a multiple of `align_bytes`. The bytes past
/// the segment's end are zeros in every data chunk that holds them. The one place a chunk size is
/// computed (MDS, client, OSD); with `align_bytes` = 1 it is ⌈length / k⌉, as stored clusters have.
pub fn chunk_bytes(length: u64, k: usize, align_bytes: u64) -> u64 {
    length
        .div_ceil(k.max(1) as u64)
        .next_multiple_of(align_bytes.max(1))
}

impl ClusterParams {
    /// Chunks per segment.
    pub fn n(&self) -> u32 {
        self.k + self.m
    }
}

/// One OSD of the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsdInfo {
    pub osd_id: u32,
    pub name: String,
    pub addr: String,
    /// Failure domains: `host`, `rack`.
    pub labels: BTreeMap<String, String>,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    /// Reserved space next to PLR parity chunks, bytes (latest heartbeat).
    pub reserve_bytes: u64,
    /// Bytes in FL / CodFS PL logs and used reserve (latest heartbeat).
    pub log_bytes: u64,
    /// Log or reserve merges since the OSD started (latest heartbeat).
    pub merges: u64,
    /// The OSD's measured store throughput and load (latest heartbeat; [`OsdLoad`]).
    pub load: OsdLoad,
    pub state: OsdState,
    pub last_heartbeat_ms_ago: u64,
}

/// Where chunk `index` of a segment lives. `osd_id`/`addr` are meaningless when `state` is `Lost`
/// (`osd_id` is then [`NO_OSD`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkPlacement {
    /// 0..k data, k..n parity.
    pub index: u32,
    pub osd_id: u32,
    pub addr: String,
    pub state: ChunkState,
    /// The holder is UP. A chunk on a down or out OSD is not usable whatever its state: a reader
    /// skips it, a writer treats its holder as unreachable (MarkStale).
    pub up: bool,
}

/// `osd_id` of a chunk that has no holder (a `Lost` chunk).
pub const NO_OSD: u32 = u32::MAX;

/// The layout of one segment: its primary and the holder of each of its n chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentLayout {
    pub segment_id: u64,
    pub file_id: u64,
    /// Position of the segment in its file.
    pub index: u32,
    /// Data bytes in this segment (the last one of a file may be short).
    pub length: u64,
    /// osd_id of the primary OSD.
    pub primary: u32,
    pub primary_addr: String,
    /// n entries, by chunk index.
    pub chunks: Vec<ChunkPlacement>,
    /// Bumped whenever the layout changes (promotion, recovery).
    pub epoch: u64,
    /// The file's update scheme.
    pub scheme: UpdateScheme,
    /// The largest segment version a primary reported (stale marks, rebuilds): new versions are
    /// issued above it, by whichever OSD is the primary.
    pub version: u64,
}

impl SegmentLayout {
    /// Chunks that may be read: `Healthy` ones on an UP holder.
    pub fn usable(&self) -> impl Iterator<Item = &ChunkPlacement> {
        self.chunks
            .iter()
            .filter(|c| c.state == ChunkState::Healthy && c.up)
    }
}

/// A committed file with the layout of every segment (or, for a robust file, its block map).
#[derive(Debug, Clone, PartialEq)]
pub struct FileInfo {
    pub file_id: u64,
    pub path: String,
    pub size: u64,
    pub mtime_ms: u64,
    pub segment_bytes: u64,
    pub segments: Vec<SegmentLayout>,
    /// How the file's updates are stored (chosen at creation, never changed).
    pub scheme: UpdateScheme,
    /// A robust file's coding and block map (then `segments` is empty).
    pub robust: Option<crate::RobustInfo>,
}

/// One line of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSummary {
    pub path: String,
    pub size: u64,
    pub mtime_ms: u64,
    pub segments: u32,
}

/// Work the MDS hands an OSD in a heartbeat reply. A task may arrive again (in later heartbeats,
/// after an MDS restart) until it is reported done, so running one twice must be harmless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OsdTask {
    /// To a segment's primary: rebuild these chunks onto the holders their placements name, then
    /// report each with `chunk_recovered`.
    Recover(RecoverTask),
    /// To a holder: drop these chunks of a removed or replaced segment, then report the segment in
    /// the next heartbeat's `deleted_segments`.
    Delete(DeleteTask),
    /// To a holder: drop blocks of a removed or updated robust object.
    DeleteObject(DeleteObjectTask),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoverTask {
    pub layout: SegmentLayout,
    /// Chunk indexes to rebuild (their placements name the target OSD, state `Recovering`).
    pub chunks: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteTask {
    pub segment_id: u64,
    pub chunks: Vec<u32>,
}

/// A coded block of a robust object: its coded id and the object version it was written at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RobustBlockKey {
    pub id: u32,
    pub version: u64,
}

/// To a holder: drop blocks of a robust object (`blocks` empty: every block of it), then report
/// the object in the next heartbeat's `deleted_objects`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteObjectTask {
    pub object_id: u64,
    pub blocks: Vec<RobustBlockKey>,
}

/// What an OSD measures of its store and reports in each heartbeat (RobuSTore §5.3.1: writers and
/// readers pick OSDs by bandwidth and load). Held in the MDS's memory, like `used_bytes`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OsdLoad {
    /// Store read and write throughput, bytes/s (bytes over busy time, decayed; a probe at start).
    pub read_bytes_per_s: u64,
    pub write_bytes_per_s: u64,
    /// Block and chunk requests queued or in service now.
    pub queue_depth: u32,
    /// Coded blocks of robust objects stored.
    pub robust_blocks: u64,
}

/// Recovery progress since the last time recovery started from idle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryProgress {
    pub chunks_total: u64,
    pub chunks_done: u64,
    pub bytes_done: u64,
    /// Unix ms; 0 when no recovery ran.
    pub started_ms: u64,
    /// Unix ms; 0 while running.
    pub finished_ms: u64,
}

/// What `ecstack cluster status` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    pub cluster_id: String,
    pub params: ClusterParams,
    pub osds: Vec<OsdInfo>,
    pub files: u64,
    pub bytes: u64,
    pub segments_healthy: u64,
    /// Readable, with fewer than n usable chunks (stale or lost chunks, or holders down) and
    /// nothing being rebuilt.
    pub segments_degraded: u64,
    /// Readable, with a chunk being rebuilt or caught up (recovering or stale on an UP holder).
    pub segments_recovering: u64,
    /// Fewer than k usable chunks.
    pub segments_lost: u64,
    pub recovery: RecoveryProgress,
    /// Committed robust files, and their objects with fewer than n blocks on OSDs not out.
    pub robust_files: u64,
    pub robust_objects_below_n: u64,
    /// What OSDs' inventories showed that the metadata does not know, since the MDS started.
    pub orphans: OrphanCounts,
}

/// Chunks and robust objects' block files OSDs hold that the MDS's metadata does not know
/// (docs/cluster.md "Orphans"), as counted in the MDS's memory since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrphanCounts {
    /// Chunks seen unknown, waiting out `[mds] orphan_grace_ms`.
    pub chunks_pending: u64,
    /// Chunks given delete tasks.
    pub chunks_deleted: u64,
    /// Block files (one per object and OSD) seen unknown, waiting out the grace.
    pub objects_pending: u64,
    /// Block files given delete tasks.
    pub objects_deleted: u64,
}

/// Most entries (chunks plus objects) an OSD puts in one [`InventoryPage`]; the MDS refuses a
/// page of more than [`INVENTORY_PAGE_ENTRIES_MAX`].
pub const INVENTORY_PAGE_ENTRIES: usize = 8192;
pub const INVENTORY_PAGE_ENTRIES_MAX: usize = 8 * INVENTORY_PAGE_ENTRIES;

/// The chunks of one segment an OSD holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldSegment {
    pub segment_id: u64,
    /// Chunk indexes, ascending.
    pub chunks: Vec<u32>,
}

/// One page of an OSD's inventory pass (`ReportInventory`): pages 0, 1, … of one listing of
/// its store, ids ascending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InventoryPage {
    pub osd_id: u32,
    /// The OSD's number for this pass (a new one per listing).
    pub pass: u64,
    pub page: u32,
    /// The pass's last page.
    pub last: bool,
    /// Page 0: the largest segment or robust object id the OSD holds (0: none).
    pub max_segment_id: u64,
    pub segments: Vec<HeldSegment>,
    /// Robust objects it holds a block file of.
    pub objects: Vec<u64>,
}

/// What an OSD tells the MDS when it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsdRegistration {
    pub name: String,
    /// host:port of its Osd service (the port it actually bound).
    pub addr: String,
    pub labels: BTreeMap<String, String>,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    /// The largest segment id of a chunk it holds (0: none): the MDS never hands out an id up to
    /// it (metadata restored from a backup may not know the segment).
    pub max_segment_id: u64,
}

/// The MDS's answer to a registration: the OSD's stable id (kept across restarts for its name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub osd_id: u32,
    pub params: ClusterParams,
}

/// One heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heartbeat {
    pub osd_id: u32,
    pub used_bytes: u64,
    pub chunks: u64,
    /// Segments whose DeleteTask for this OSD is done.
    pub deleted_segments: Vec<u64>,
    /// The store's usage (`ChunkStore::usage`): reserved space, log bytes, merges.
    pub reserve_bytes: u64,
    pub log_bytes: u64,
    pub merges: u64,
    /// Measured throughput and load ([`OsdLoad`]).
    pub load: OsdLoad,
    /// Robust objects whose DeleteObjectTask for this OSD is done.
    pub deleted_objects: Vec<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatReply {
    /// The MDS's global layout epoch (the largest segment epoch).
    pub epoch: u64,
    pub tasks: Vec<OsdTask>,
    /// The MDS wants this OSD's inventory now: it runs on metadata restored from a backup and
    /// waits for every OSD's largest id before it hands out new ones.
    pub inventory_wanted: bool,
}

/// The metadata key of a status that carries an [`MdsError::Fs`]'s errno.
const ERRNO_METADATA: &str = "ecstack-errno";

/// Everything an MDS call can fail with. The service maps its own errors to gRPC codes with
/// [`MdsError::to_status`]; the client maps codes back with `From<tonic::Status>`.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum MdsError {
    /// Bad input: empty path, length over segment_bytes, ...
    #[error("{0}")]
    InvalidArgument(String),
    /// No such file, segment, OSD.
    #[error("{0}")]
    NotFound(String),
    /// The cluster cannot do it now (too few OSDs up, ...).
    #[error("{0}")]
    FailedPrecondition(String),
    /// The MDS cannot be reached (or timed out); retry with backoff.
    #[error("MDS unavailable: {0}")]
    Unavailable(String),
    /// The caller's certificate role may not make this call (`ecstack_rpc::roles`); final.
    #[error("permission denied by the MDS: {0}")]
    PermissionDenied(String),
    /// The TLS handshake failed: a certificate of another cluster, or none; final (retrying
    /// cannot fix a certificate).
    #[error("cannot authenticate to the MDS: {0}")]
    Unauthenticated(String),
    /// The MDS's store failed.
    #[error("MDS internal error: {0}")]
    Internal(String),
    /// A reply this client cannot understand (version skew or a bug).
    #[error("malformed MDS reply: {0}")]
    Protocol(String),
    /// A namespace call failed as a file system call does with `errno` (EEXIST, ENOTEMPTY...).
    #[error("{message}")]
    Fs {
        errno: crate::Errno,
        message: String,
    },
    /// Any other gRPC status.
    #[error("MDS call failed ({code:?}): {message}")]
    Other { code: tonic::Code, message: String },
}

impl MdsError {
    /// Worth retrying after a backoff.
    pub fn is_retryable(&self) -> bool {
        matches!(self, MdsError::Unavailable(_))
    }

    pub fn to_status(&self) -> tonic::Status {
        match self {
            MdsError::InvalidArgument(m) => tonic::Status::invalid_argument(m.clone()),
            MdsError::NotFound(m) => tonic::Status::not_found(m.clone()),
            MdsError::FailedPrecondition(m) => tonic::Status::failed_precondition(m.clone()),
            MdsError::Unavailable(m) => tonic::Status::unavailable(m.clone()),
            MdsError::PermissionDenied(m) => tonic::Status::permission_denied(m.clone()),
            MdsError::Unauthenticated(m) => tonic::Status::unauthenticated(m.clone()),
            MdsError::Internal(m) => tonic::Status::internal(m.clone()),
            MdsError::Protocol(m) => tonic::Status::invalid_argument(m.clone()),
            MdsError::Fs { errno, message } => {
                let mut s = tonic::Status::failed_precondition(message.clone());
                s.metadata_mut().insert(
                    ERRNO_METADATA,
                    tonic::metadata::MetadataValue::from_static(errno.name()),
                );
                s
            }
            MdsError::Other { code, message } => tonic::Status::new(*code, message.clone()),
        }
    }
}

impl From<tonic::Status> for MdsError {
    fn from(s: tonic::Status) -> Self {
        // A refused handshake first, whatever its code (tonic says Unavailable: it could not
        // connect): it must not be retried as an unreachable MDS would be.
        if let Some(line) = ecstack_rpc::handshake_refusal(&s) {
            return MdsError::Unauthenticated(line);
        }
        let message = s.message().to_owned();
        if let Some(errno) = s
            .metadata()
            .get(ERRNO_METADATA)
            .and_then(|v| v.to_str().ok())
            .and_then(crate::Errno::from_name)
        {
            return MdsError::Fs { errno, message };
        }
        match s.code() {
            tonic::Code::InvalidArgument => MdsError::InvalidArgument(message),
            tonic::Code::NotFound => MdsError::NotFound(message),
            tonic::Code::FailedPrecondition => MdsError::FailedPrecondition(message),
            // Cancelled: tonic's answer when the connection under a call is torn down (an MDS
            // killed and restarted: "operation was canceled") and on a client-side timeout —
            // transient, as `ecstack_rpc::retry::is_transient` already treats it.
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
                MdsError::Unavailable(message)
            }
            // tonic reports a connection that failed or broke as Unknown "transport error".
            tonic::Code::Unknown if message.starts_with("transport error") => {
                MdsError::Unavailable(message)
            }
            tonic::Code::Internal => MdsError::Internal(message),
            tonic::Code::PermissionDenied => MdsError::PermissionDenied(message),
            tonic::Code::Unauthenticated => MdsError::Unauthenticated(message),
            code => MdsError::Other { code, message },
        }
    }
}

impl From<MdsError> for tonic::Status {
    fn from(e: MdsError) -> Self {
        e.to_status()
    }
}

// ---- conversions between domain and generated types (both directions: the service uses them too)

pub fn osd_state_to_proto(s: OsdState) -> proto::OsdState {
    match s {
        OsdState::Up => proto::OsdState::Up,
        OsdState::Down => proto::OsdState::Down,
        OsdState::Out => proto::OsdState::Out,
    }
}

fn osd_state_from_proto(v: i32) -> Result<OsdState, MdsError> {
    match proto::OsdState::try_from(v) {
        Ok(proto::OsdState::Up) => Ok(OsdState::Up),
        Ok(proto::OsdState::Down) => Ok(OsdState::Down),
        Ok(proto::OsdState::Out) => Ok(OsdState::Out),
        _ => Err(MdsError::Protocol(format!("unknown OSD state {v}"))),
    }
}

pub fn chunk_state_to_proto(s: ChunkState) -> proto::ChunkState {
    match s {
        ChunkState::Healthy => proto::ChunkState::Healthy,
        ChunkState::Stale => proto::ChunkState::Stale,
        ChunkState::Recovering => proto::ChunkState::Recovering,
        ChunkState::Lost => proto::ChunkState::Lost,
    }
}

fn chunk_state_from_proto(v: i32) -> Result<ChunkState, MdsError> {
    match proto::ChunkState::try_from(v) {
        Ok(proto::ChunkState::Healthy) => Ok(ChunkState::Healthy),
        Ok(proto::ChunkState::Stale) => Ok(ChunkState::Stale),
        Ok(proto::ChunkState::Recovering) => Ok(ChunkState::Recovering),
        Ok(proto::ChunkState::Lost) => Ok(ChunkState::Lost),
        _ => Err(MdsError::Protocol(format!("unknown chunk state {v}"))),
    }
}

pub(crate) fn required<T>(v: Option<T>, what: &str) -> Result<T, MdsError> {
    v.ok_or_else(|| MdsError::Protocol(format!("reply lacks {what}")))
}

impl From<ClusterParams> for proto::ClusterParams {
    fn from(p: ClusterParams) -> Self {
        proto::ClusterParams {
            cluster_id: p.cluster_id,
            code: p.code,
            k: p.k,
            m: p.m,
            segment_bytes: p.segment_bytes,
            heartbeat_ms: p.heartbeat_ms,
            down_after_ms: p.down_after_ms,
        }
    }
}

impl From<proto::ClusterParams> for ClusterParams {
    fn from(p: proto::ClusterParams) -> Self {
        ClusterParams {
            cluster_id: p.cluster_id,
            code: p.code,
            k: p.k,
            m: p.m,
            segment_bytes: p.segment_bytes,
            heartbeat_ms: p.heartbeat_ms,
            down_after_ms: p.down_after_ms,
        }
    }
}

impl From<OsdInfo> for proto::OsdInfo {
    fn from(o: OsdInfo) -> Self {
        proto::OsdInfo {
            osd_id: o.osd_id,
            name: o.name,
            addr: o.addr,
            labels: o.labels.into_iter().collect(),
            capacity_bytes: o.capacity_bytes,
            used_bytes: o.used_bytes,
            reserve_bytes: o.reserve_bytes,
            log_bytes: o.log_bytes,
            merges: o.merges,
            read_bytes_per_s: o.load.read_bytes_per_s,
            write_bytes_per_s: o.load.write_bytes_per_s,
            queue_depth: o.load.queue_depth,
            robust_blocks: o.load.robust_blocks,
            state: osd_state_to_proto(o.state) as i32,
            last_heartbeat_ms_ago: o.last_heartbeat_ms_ago,
        }
    }
}

impl TryFrom<proto::OsdInfo> for OsdInfo {
    type Error = MdsError;
    fn try_from(o: proto::OsdInfo) -> Result<Self, MdsError> {
        Ok(OsdInfo {
            osd_id: o.osd_id,
            name: o.name,
            addr: o.addr,
            labels: o.labels.into_iter().collect(),
            capacity_bytes: o.capacity_bytes,
            used_bytes: o.used_bytes,
            reserve_bytes: o.reserve_bytes,
            log_bytes: o.log_bytes,
            merges: o.merges,
            load: OsdLoad {
                read_bytes_per_s: o.read_bytes_per_s,
                write_bytes_per_s: o.write_bytes_per_s,
                queue_depth: o.queue_depth,
                robust_blocks: o.robust_blocks,
            },
            state: osd_state_from_proto(o.state)?,
            last_heartbeat_ms_ago: o.last_heartbeat_ms_ago,
        })
    }
}

impl From<SegmentLayout> for proto::SegmentLayout {
    fn from(s: SegmentLayout) -> Self {
        proto::SegmentLayout {
            segment_id: s.segment_id,
            file_id: s.file_id,
            index: s.index,
            length: s.length,
            primary: s.primary,
            primary_addr: s.primary_addr,
            chunks: s
                .chunks
                .into_iter()
                .map(|c| proto::ChunkPlacement {
                    index: c.index,
                    osd_id: c.osd_id,
                    addr: c.addr,
                    state: chunk_state_to_proto(c.state) as i32,
                    up: c.up,
                })
                .collect(),
            epoch: s.epoch,
            update_scheme: s.scheme.code(),
            version: s.version,
        }
    }
}

impl TryFrom<proto::SegmentLayout> for SegmentLayout {
    type Error = MdsError;
    fn try_from(s: proto::SegmentLayout) -> Result<Self, MdsError> {
        let chunks = s
            .chunks
            .into_iter()
            .map(|c| {
                Ok(ChunkPlacement {
                    index: c.index,
                    osd_id: c.osd_id,
                    addr: c.addr,
                    state: chunk_state_from_proto(c.state)?,
                    up: c.up,
                })
            })
            .collect::<Result<Vec<_>, MdsError>>()?;
        for (i, c) in chunks.iter().enumerate() {
            if c.index as usize != i {
                return Err(MdsError::Protocol(format!(
                    "segment {} lists chunk {} at position {i}",
                    s.segment_id, c.index
                )));
            }
        }
        Ok(SegmentLayout {
            segment_id: s.segment_id,
            file_id: s.file_id,
            index: s.index,
            length: s.length,
            primary: s.primary,
            primary_addr: s.primary_addr,
            chunks,
            epoch: s.epoch,
            scheme: UpdateScheme::from_code(s.update_scheme)
                .map_err(|e| MdsError::Protocol(format!("segment {}: {e}", s.segment_id)))?,
            version: s.version,
        })
    }
}

impl From<FileInfo> for proto::FileInfo {
    fn from(f: FileInfo) -> Self {
        proto::FileInfo {
            file_id: f.file_id,
            path: f.path,
            size: f.size,
            mtime_ms: f.mtime_ms,
            segment_bytes: f.segment_bytes,
            segments: f.segments.into_iter().map(Into::into).collect(),
            update_scheme: f.scheme.code(),
            robust: f.robust.map(Into::into),
        }
    }
}

impl TryFrom<proto::FileInfo> for FileInfo {
    type Error = MdsError;
    fn try_from(f: proto::FileInfo) -> Result<Self, MdsError> {
        Ok(FileInfo {
            file_id: f.file_id,
            path: f.path,
            size: f.size,
            mtime_ms: f.mtime_ms,
            segment_bytes: f.segment_bytes,
            segments: f
                .segments
                .into_iter()
                .map(TryInto::try_into)
                .collect::<Result<_, _>>()?,
            scheme: UpdateScheme::from_code(f.update_scheme)
                .map_err(|e| MdsError::Protocol(format!("file {}: {e}", f.file_id)))?,
            robust: f.robust.map(TryInto::try_into).transpose()?,
        })
    }
}

impl From<FileSummary> for proto::FileSummary {
    fn from(f: FileSummary) -> Self {
        proto::FileSummary {
            path: f.path,
            size: f.size,
            mtime_ms: f.mtime_ms,
            segments: f.segments,
        }
    }
}

impl From<proto::FileSummary> for FileSummary {
    fn from(f: proto::FileSummary) -> Self {
        FileSummary {
            path: f.path,
            size: f.size,
            mtime_ms: f.mtime_ms,
            segments: f.segments,
        }
    }
}

impl From<OsdTask> for proto::OsdTask {
    fn from(t: OsdTask) -> Self {
        let task = match t {
            OsdTask::Recover(r) => proto::osd_task::Task::Recover(proto::RecoverTask {
                layout: Some(r.layout.into()),
                chunks: r.chunks,
            }),
            OsdTask::Delete(d) => proto::osd_task::Task::Delete(proto::DeleteTask {
                segment_id: d.segment_id,
                chunks: d.chunks,
            }),
            OsdTask::DeleteObject(d) => {
                proto::osd_task::Task::DeleteObject(proto::DeleteObjectTask {
                    object_id: d.object_id,
                    blocks: d.blocks.into_iter().map(Into::into).collect(),
                })
            }
        };
        proto::OsdTask { task: Some(task) }
    }
}

impl TryFrom<proto::OsdTask> for OsdTask {
    type Error = MdsError;
    fn try_from(t: proto::OsdTask) -> Result<Self, MdsError> {
        Ok(match required(t.task, "a task")? {
            proto::osd_task::Task::Recover(r) => OsdTask::Recover(RecoverTask {
                layout: required(r.layout, "a recover task's layout")?.try_into()?,
                chunks: r.chunks,
            }),
            proto::osd_task::Task::Delete(d) => OsdTask::Delete(DeleteTask {
                segment_id: d.segment_id,
                chunks: d.chunks,
            }),
            proto::osd_task::Task::DeleteObject(d) => OsdTask::DeleteObject(DeleteObjectTask {
                object_id: d.object_id,
                blocks: d.blocks.into_iter().map(Into::into).collect(),
            }),
        })
    }
}

impl From<RobustBlockKey> for proto::RobustBlockKey {
    fn from(k: RobustBlockKey) -> Self {
        proto::RobustBlockKey {
            id: k.id,
            version: k.version,
        }
    }
}

impl From<proto::RobustBlockKey> for RobustBlockKey {
    fn from(k: proto::RobustBlockKey) -> Self {
        RobustBlockKey {
            id: k.id,
            version: k.version,
        }
    }
}

impl From<RecoveryProgress> for proto::RecoveryProgress {
    fn from(r: RecoveryProgress) -> Self {
        proto::RecoveryProgress {
            chunks_total: r.chunks_total,
            chunks_done: r.chunks_done,
            bytes_done: r.bytes_done,
            started_ms: r.started_ms,
            finished_ms: r.finished_ms,
        }
    }
}

impl From<proto::RecoveryProgress> for RecoveryProgress {
    fn from(r: proto::RecoveryProgress) -> Self {
        RecoveryProgress {
            chunks_total: r.chunks_total,
            chunks_done: r.chunks_done,
            bytes_done: r.bytes_done,
            started_ms: r.started_ms,
            finished_ms: r.finished_ms,
        }
    }
}

impl From<ClusterStatus> for proto::StatusReply {
    fn from(s: ClusterStatus) -> Self {
        proto::StatusReply {
            cluster_id: s.cluster_id,
            params: Some(s.params.into()),
            osds: s.osds.into_iter().map(Into::into).collect(),
            files: s.files,
            bytes: s.bytes,
            segments_healthy: s.segments_healthy,
            segments_degraded: s.segments_degraded,
            segments_recovering: s.segments_recovering,
            segments_lost: s.segments_lost,
            recovery: Some(s.recovery.into()),
            robust_files: s.robust_files,
            robust_objects_below_n: s.robust_objects_below_n,
            orphans: Some(proto::OrphanCounts {
                chunks_pending: s.orphans.chunks_pending,
                chunks_deleted: s.orphans.chunks_deleted,
                objects_pending: s.orphans.objects_pending,
                objects_deleted: s.orphans.objects_deleted,
            }),
        }
    }
}

impl TryFrom<proto::StatusReply> for ClusterStatus {
    type Error = MdsError;
    fn try_from(s: proto::StatusReply) -> Result<Self, MdsError> {
        Ok(ClusterStatus {
            cluster_id: s.cluster_id,
            params: required(s.params, "cluster params")?.into(),
            osds: s
                .osds
                .into_iter()
                .map(TryInto::try_into)
                .collect::<Result<_, _>>()?,
            files: s.files,
            bytes: s.bytes,
            segments_healthy: s.segments_healthy,
            segments_degraded: s.segments_degraded,
            segments_recovering: s.segments_recovering,
            segments_lost: s.segments_lost,
            recovery: s.recovery.map(Into::into).unwrap_or_default(),
            robust_files: s.robust_files,
            robust_objects_below_n: s.robust_objects_below_n,
            orphans: s
                .orphans
                .map(|o| OrphanCounts {
                    chunks_pending: o.chunks_pending,
                    chunks_deleted: o.chunks_deleted,
                    objects_pending: o.objects_pending,
                    objects_deleted: o.objects_deleted,
                })
                .unwrap_or_default(),
        })
    }
}

impl From<InventoryPage> for proto::InventoryPage {
    fn from(p: InventoryPage) -> Self {
        proto::InventoryPage {
            osd_id: p.osd_id,
            pass: p.pass,
            page: p.page,
            last: p.last,
            max_segment_id: p.max_segment_id,
            segments: p
                .segments
                .into_iter()
                .map(|s| proto::HeldSegment {
                    segment_id: s.segment_id,
                    chunks: s.chunks,
                })
                .collect(),
            objects: p.objects,
        }
    }
}

impl From<proto::InventoryPage> for InventoryPage {
    fn from(p: proto::InventoryPage) -> Self {
        InventoryPage {
            osd_id: p.osd_id,
            pass: p.pass,
            page: p.page,
            last: p.last,
            max_segment_id: p.max_segment_id,
            segments: p
                .segments
                .into_iter()
                .map(|s| HeldSegment {
                    segment_id: s.segment_id,
                    chunks: s.chunks,
                })
                .collect(),
            objects: p.objects,
        }
    }
}

/// A typed client of the MDS. Cheap to clone (one HTTP/2 channel per MDS underneath); every call
/// takes `&self`. With several MDSs (an active and its standbys) a call goes to the one that
/// answered last and a failed call moves the client on to the next ([`FailoverChannel`]).
#[derive(Debug, Clone)]
pub struct MdsClient {
    raw: RawClient<FailoverChannel>,
    channel: FailoverChannel,
}

impl MdsClient {
    /// A client of the MDS at `addr` (`host:port`), or of the MDSs a comma-separated list names
    /// (`[mds] addrs`: an active and its standbys); connects lazily, on the first call.
    pub fn connect(addr: &str, security: &Security) -> Result<MdsClient, MdsError> {
        let addrs: Vec<String> = addr.split(',').map(|a| a.trim().to_owned()).collect();
        MdsClient::connect_any(&addrs, security)
    }

    /// A client of the MDSs at `addrs`, tried in turn (`ClusterConfig::mds_addrs`).
    pub fn connect_any(addrs: &[String], security: &Security) -> Result<MdsClient, MdsError> {
        if addrs.is_empty() || addrs.iter().any(String::is_empty) {
            return Err(MdsError::InvalidArgument(format!(
                "no MDS address in {addrs:?}"
            )));
        }
        let channels = addrs
            .iter()
            .map(|addr| {
                security
                    .channel(addr, CONNECT_TIMEOUT, Some(REQUEST_TIMEOUT))
                    .map(|c| (addr.clone(), c))
                    .map_err(|e| MdsError::Unavailable(format!("MDS at {addr}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MdsClient::from_failover(FailoverChannel::new(channels)))
    }

    /// A client over a channel made elsewhere (`Security::channel`).
    pub fn from_channel(channel: Channel) -> MdsClient {
        MdsClient::from_failover(FailoverChannel::new(vec![(String::new(), channel)]))
    }

    fn from_failover(channel: FailoverChannel) -> MdsClient {
        MdsClient {
            raw: RawClient::new(channel.clone()),
            channel,
        }
    }

    /// The MDS the next call goes to.
    pub fn current_addr(&self) -> &str {
        self.channel.current_addr()
    }

    pub(crate) fn raw(&self) -> RawClient<FailoverChannel> {
        self.raw.clone()
    }

    /// Registers an OSD (a returning name keeps its id and updates its address).
    pub async fn register_osd(&self, r: &OsdRegistration) -> Result<Registered, MdsError> {
        let reply = self
            .raw()
            .register_osd(proto::RegisterOsdRequest {
                name: r.name.clone(),
                addr: r.addr.clone(),
                labels: r.labels.clone().into_iter().collect(),
                capacity_bytes: r.capacity_bytes,
                used_bytes: r.used_bytes,
                max_segment_id: r.max_segment_id,
            })
            .await?
            .into_inner();
        Ok(Registered {
            osd_id: reply.osd_id,
            params: required(reply.params, "cluster params")?.into(),
        })
    }

    /// One heartbeat; the reply carries this OSD's pending tasks.
    pub async fn heartbeat(&self, h: &Heartbeat) -> Result<HeartbeatReply, MdsError> {
        let reply = self
            .raw()
            .heartbeat(proto::HeartbeatRequest {
                osd_id: h.osd_id,
                used_bytes: h.used_bytes,
                chunks: h.chunks,
                deleted_segments: h.deleted_segments.clone(),
                reserve_bytes: h.reserve_bytes,
                log_bytes: h.log_bytes,
                merges: h.merges,
                read_bytes_per_s: h.load.read_bytes_per_s,
                write_bytes_per_s: h.load.write_bytes_per_s,
                queue_depth: h.load.queue_depth,
                robust_blocks: h.load.robust_blocks,
                deleted_objects: h.deleted_objects.clone(),
            })
            .await?
            .into_inner();
        Ok(HeartbeatReply {
            epoch: reply.epoch,
            tasks: reply
                .tasks
                .into_iter()
                .map(TryInto::try_into)
                .collect::<Result<_, _>>()?,
            inventory_wanted: reply.inventory_wanted,
        })
    }

    /// One page of an inventory pass; `true` when the MDS dropped the pass (it holds none this
    /// page continues): start a new one at page 0.
    pub async fn report_inventory(&self, page: InventoryPage) -> Result<bool, MdsError> {
        let reply = self
            .raw()
            .report_inventory(proto::InventoryPage::from(page))
            .await?
            .into_inner();
        Ok(reply.pass_dropped)
    }

    /// Starts a put of `path`; the file stays invisible until [`MdsClient::commit_file`]. Its
    /// update scheme is the replaced file's, or the cluster's default for a new path.
    pub async fn create_file(&self, path: &str) -> Result<u64, MdsError> {
        self.create_file_with(path, None).await
    }

    /// [`MdsClient::create_file`] with an update scheme (`None`: as `create_file`). A scheme
    /// other than that of the committed file at `path` is refused (`FailedPrecondition`).
    pub async fn create_file_with(
        &self,
        path: &str,
        scheme: Option<UpdateScheme>,
    ) -> Result<u64, MdsError> {
        let reply = self
            .raw()
            .create_file(proto::CreateFileRequest {
                path: path.to_owned(),
                update_scheme: scheme.map(UpdateScheme::code),
            })
            .await?
            .into_inner();
        Ok(reply.file_id)
    }

    /// Places new segments of a pending file (data bytes of each, in file order).
    pub async fn allocate_segments(
        &self,
        file_id: u64,
        lengths: &[u64],
    ) -> Result<Vec<SegmentLayout>, MdsError> {
        self.allocate_segments_on(file_id, lengths, &[]).await
    }

    /// [`MdsClient::allocate_segments`] with the chunks placed on the OSDs of `osd_hint` only
    /// (empty: anywhere), e.g. an RS file on the OSDs a robust file it is compared with uses.
    pub async fn allocate_segments_on(
        &self,
        file_id: u64,
        lengths: &[u64],
        osd_hint: &[u32],
    ) -> Result<Vec<SegmentLayout>, MdsError> {
        let reply = self
            .raw()
            .allocate_segments(proto::AllocateSegmentsRequest {
                file_id,
                lengths: lengths.to_vec(),
                osd_hint: osd_hint.to_vec(),
            })
            .await?
            .into_inner();
        reply.segments.into_iter().map(TryInto::try_into).collect()
    }

    /// Makes a pending file visible, replacing any committed file of the same path.
    pub async fn commit_file(&self, file_id: u64, size: u64) -> Result<(), MdsError> {
        self.raw()
            .commit_file(proto::CommitFileRequest { file_id, size })
            .await?;
        Ok(())
    }

    pub async fn lookup_file(&self, path: &str) -> Result<FileInfo, MdsError> {
        let reply = self
            .raw()
            .lookup_file(proto::LookupFileRequest {
                path: path.to_owned(),
            })
            .await?
            .into_inner();
        reply.try_into()
    }

    /// Committed files whose path starts with `prefix`, sorted by path.
    pub async fn list_files(&self, prefix: &str) -> Result<Vec<FileSummary>, MdsError> {
        let reply = self
            .raw()
            .list_files(proto::ListFilesRequest {
                prefix: prefix.to_owned(),
            })
            .await?
            .into_inner();
        Ok(reply.files.into_iter().map(Into::into).collect())
    }

    pub async fn remove_file(&self, path: &str) -> Result<(), MdsError> {
        self.raw()
            .remove_file(proto::RemoveFileRequest {
                path: path.to_owned(),
            })
            .await?;
        Ok(())
    }

    pub async fn get_segment(&self, segment_id: u64) -> Result<SegmentLayout, MdsError> {
        let reply = self
            .raw()
            .get_segment(proto::GetSegmentRequest { segment_id })
            .await?
            .into_inner();
        reply.try_into()
    }

    /// Marks chunks stale (durable at the MDS when this returns).
    pub async fn mark_stale(
        &self,
        segment_id: u64,
        chunks: &[u32],
        version: u64,
    ) -> Result<(), MdsError> {
        self.raw()
            .mark_stale(proto::MarkStaleRequest {
                segment_id,
                chunks: chunks.to_vec(),
                version,
            })
            .await?;
        Ok(())
    }

    /// Reports chunk `chunk` of a segment rebuilt on `osd_id` at `version` by `reporter` (the
    /// segment's primary; `None`: unchecked). Returns the segment's layout epoch with the chunk
    /// healthy: a layout older than it still calls the chunk stale.
    pub async fn chunk_recovered(
        &self,
        segment_id: u64,
        chunk: u32,
        osd_id: u32,
        version: u64,
        reporter: Option<u32>,
    ) -> Result<u64, MdsError> {
        let reply = self
            .raw()
            .chunk_recovered(proto::ChunkRecoveredRequest {
                segment_id,
                chunk,
                osd_id,
                version,
                reporter,
            })
            .await?;
        Ok(reply.into_inner().epoch)
    }

    /// Declares an OSD out; returns how many chunks will be rebuilt elsewhere.
    pub async fn osd_out(&self, osd_id: u32) -> Result<u64, MdsError> {
        let reply = self
            .raw()
            .osd_out(proto::OsdOutRequest { osd_id })
            .await?
            .into_inner();
        Ok(reply.chunks_to_recover)
    }

    pub async fn status(&self) -> Result<ClusterStatus, MdsError> {
        let reply = self
            .raw()
            .status(proto::StatusRequest {})
            .await?
            .into_inner();
        reply.try_into()
    }

    /// An online backup of a SQLite metadata store: each piece of the database file, in order,
    /// handed to `sink`; the bytes in all.
    pub async fn backup(
        &self,
        mut sink: impl FnMut(&[u8]) -> Result<(), MdsError>,
    ) -> Result<u64, MdsError> {
        let mut stream = self
            .raw()
            .backup(proto::BackupRequest {})
            .await?
            .into_inner();
        let mut bytes = 0;
        while let Some(chunk) = stream.message().await? {
            sink(&chunk.data)?;
            bytes += chunk.data.len() as u64;
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> SegmentLayout {
        SegmentLayout {
            scheme: Default::default(),
            segment_id: 7,
            file_id: 3,
            index: 1,
            length: 1000,
            primary: 2,
            primary_addr: "127.0.0.1:9".into(),
            chunks: (0..3)
                .map(|i| ChunkPlacement {
                    index: i,
                    osd_id: if i == 2 { NO_OSD } else { i + 2 },
                    addr: format!("a{i}"),
                    state: [ChunkState::Healthy, ChunkState::Stale, ChunkState::Lost][i as usize],
                    up: i != 2,
                })
                .collect(),
            epoch: 5,
            version: 12,
        }
    }

    #[test]
    fn layout_survives_the_wire_types() {
        let l = layout();
        let p: proto::SegmentLayout = l.clone().into();
        assert_eq!(SegmentLayout::try_from(p).unwrap(), l);
        assert_eq!(l.usable().count(), 1);
    }

    #[test]
    fn malformed_layouts_are_protocol_errors() {
        let mut p: proto::SegmentLayout = layout().into();
        p.chunks[1].state = 99;
        assert!(matches!(
            SegmentLayout::try_from(p),
            Err(MdsError::Protocol(_))
        ));
        let mut p: proto::SegmentLayout = layout().into();
        p.chunks.swap(0, 1);
        assert!(matches!(
            SegmentLayout::try_from(p),
            Err(MdsError::Protocol(_))
        ));
        assert!(OsdTask::try_from(proto::OsdTask { task: None }).is_err());
    }

    #[test]
    fn errors_map_to_codes_and_back() {
        for e in [
            MdsError::InvalidArgument("x".into()),
            MdsError::NotFound("x".into()),
            MdsError::FailedPrecondition("x".into()),
            MdsError::Unavailable("x".into()),
            MdsError::Internal("x".into()),
            MdsError::Fs {
                errno: crate::Errno::NotEmpty,
                message: "x".into(),
            },
        ] {
            assert_eq!(MdsError::from(e.to_status()), e);
        }
        assert!(MdsError::from(tonic::Status::deadline_exceeded("t")).is_retryable());
    }

    #[test]
    fn chunk_sizes_round_up_to_the_codes_alignment() {
        // Byte-position-wise codes: ⌈length / k⌉, as every stored cluster has it.
        assert_eq!(chunk_bytes(16 << 20, 6, 1), 2_796_203);
        assert_eq!(chunk_bytes(5, 4, 1), 2);
        // RDP with p = 5 (k = 4): multiples of p − 1 = 4.
        assert_eq!(chunk_bytes(10, 4, 4), 4);
        assert_eq!(chunk_bytes(16, 4, 4), 4);
        assert_eq!(chunk_bytes(17, 4, 4), 8);
        assert_eq!(chunk_bytes(16 << 20, 4, 4), 4 << 20);
        // Alignment 0 is taken as 1, k = 0 as 1 (never a division by zero).
        assert_eq!(chunk_bytes(7, 0, 0), 7);
    }
}
