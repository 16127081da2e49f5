//! The OSD service (`proto/osd.proto`): the primary's work on a segment (write: encode and
//! distribute; read: gather k chunks, degraded when needed, repairing corrupt chunks; FO update:
//! sub-updates per data chunk) and the chunk calls every OSD answers (PutChunk, GetChunk,
//! UpdateChunk with its parity deltas, ApplyDelta, ChunkVersion, DeleteChunk), and recovery.
//!
//! All requests of one segment are serialized at its primary by a per-segment async lock; the
//! primary keeps the segment's consistent view (`view.rs`: the version of each data chunk, which
//! every parity chunk read beside it must include), learned from the usable holders (ChunkVersion)
//! when it does not know it (after a restart, a promotion or a refusal).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ecstack_codes::ErasureCode;
use ecstack_rpc::Security;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::api::{
    self, layout_from_proto, meta_from_proto, meta_to_proto, ChunkMeta, ChunkVersions, DeltaStamp,
    Holder, Layout, OsdClient, OsdError,
};
use crate::chunk_store::{Change, ChunkImage, ChunkStore, ChunkStoreError};
use crate::metrics::{Metrics, OPS};
use crate::proto;
use crate::view::{Verdict, View};
use crate::wire;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What an OSD tells the MDS about chunks (the daemon implements it with the MDS client; tests
/// record the calls).
pub trait MdsLink: Send + Sync {
    /// Durably mark chunks of a segment stale (their holder missed version `version`).
    fn mark_stale<'a>(
        &'a self,
        segment: u64,
        chunks: &'a [u32],
        version: u64,
    ) -> BoxFuture<'a, Result<(), String>>;
    /// A chunk was rebuilt onto `osd_id` at `version` by `reporter` (this OSD, the primary).
    fn chunk_recovered(
        &self,
        segment: u64,
        chunk: u32,
        osd_id: u32,
        version: u64,
        reporter: Option<u32>,
    ) -> BoxFuture<'_, Result<(), String>>;
}

/// The erasure code and the identity an OSD works with.
#[derive(Clone)]
pub struct OsdSetup {
    pub osd_id: u32,
    pub code: Arc<dyn ErasureCode>,
    pub store: Arc<dyn ChunkStore>,
    pub security: Security,
    pub mds: Arc<dyn MdsLink>,
}

/// Pieces of a pipelined read fetched at once (each at most [`api::FRAME_BYTES`]), shared among its
/// lanes: 16 MiB, a whole segment of the default size. Fetched in the file's order, 8 made a 16 MiB
/// read go through its four chunks two at a time, and a primary whose next pieces sat on busy
/// holders left its own link idle (the model experiment's read: 71–78 % of the bound with 8, 80–83 %
/// with 16; docs/benchmarks.md); at 64 MiB even 16 covered one chunk, hence the lanes.
const READ_PIPELINE_PIECES: usize = 16;

/// Pieces fetched at once from each data chunk of a pipelined read, at least (with more data chunks
/// than [`READ_PIPELINE_PIECES`] / 4, a read holds up to this many per chunk).
const READ_LANE_PIECES_MIN: usize = 4;

/// Pieces of pipelined reads a primary has on their way from one holder at once, over all its
/// reads (each waits for a slot, in the order asked, before it is asked for). HTTP/2 shares a
/// connection among its streams: with every read asking each of its holders for 4 pieces at once,
/// a holder had dozens of one primary's pieces on their way together, and each took about as long
/// as all of them (the 480 s 64 MiB read of the model experiment: 4,206 pieces of 1 MiB took 10 s
/// or more, median 16 s, the slowest 74 s; docs/benchmarks.md "Session of 2026-11-28 07:41"),
/// which left a client's read without a byte for long stretches once the primary's own chunk was
/// sent. A few at a time, a piece takes about its own share of the link, and 8 per holder for each
/// of the other primaries still keep every link busy.
const READ_PIECES_PER_PEER: usize = 8;

/// Frames of a pipelined read's reply waiting for the client's connection: few, so that a frame
/// from a holder is not queued behind this OSD's own chunk (which is always ready).
const READ_REPLY_FRAMES: usize = 2;

/// A chunk read from a peer that takes this long is counted and logged (a megabyte piece takes
/// well under a second on an idle 100 Mbit/s link, a few seconds on a saturated one).
const SLOW_PEER_FETCH: Duration = Duration::from_secs(10);

/// Recovery attempts made without the segment's lock before one that holds it throughout
/// ([`Osd::recover`]): each is rebuilt again only if the stripe changed while its chunks moved.
const RECOVERY_UNLOCKED_ATTEMPTS: usize = 2;

/// Why [`Osd::pipeline`] stopped before the end of its range.
enum Halt {
    /// The read fails with this status.
    Failed(Status),
    /// A piece of data chunk `chunk` could not be had as it should: the rest is read the ordinary
    /// way.
    Piece { chunk: usize, miss: Miss },
}

/// One data chunk's part of a pipelined read ([`Osd::pipeline`]); offsets are the segment's.
struct Lane {
    chunk: usize,
    /// The next byte to fetch; the end of the lane's part of the range.
    next: u64,
    end: u64,
    /// Every byte of the lane before this one has been sent.
    sent: u64,
    /// The chunk is on this OSD.
    local: bool,
    /// Fetched frames not yet sent, by their first byte.
    ready: BTreeMap<u64, Bytes>,
    in_flight: usize,
}

/// Sends `frames` (contiguous bytes from segment offset `at`) to the client of a pipelined read,
/// preceded by a frame with `at` when they do not follow the last one sent (`place`, moved past
/// them); false when the client went away.
async fn send_placed(
    tx: &tokio::sync::mpsc::Sender<Result<proto::DataFrame, Status>>,
    place: &mut u64,
    at: u64,
    frames: impl IntoIterator<Item = Bytes>,
) -> bool {
    if at != *place {
        let moved = proto::DataFrame {
            data: Bytes::new(),
            at: Some(at),
        };
        if tx.send(Ok(moved)).await.is_err() {
            return false;
        }
        *place = at;
    }
    for data in frames {
        *place += data.len() as u64;
        if tx
            .send(Ok(proto::DataFrame { data, at: None }))
            .await
            .is_err()
        {
            return false;
        }
    }
    true
}

/// What the primary knows about a segment.
#[derive(Debug, Default, Clone)]
struct SegState {
    /// The consistent view (empty: not known yet; learned from the holders).
    view: View,
    /// Highest layout epoch seen.
    epoch: u64,
    /// The view was learned from fewer than k chunks that agree with it (more than m holders
    /// unreachable): a guess for the chunks that did not answer (a data chunk no parity reported
    /// on is taken at version 0). It serves the operation that learned it and is learned afresh
    /// by the next, so a holder that comes back is heard instead of being judged stale by a guess
    /// (a read after three of six OSDs came back once found the returning chunk "stale" against
    /// version 0 for good).
    provisional: bool,
}

impl SegState {
    fn forget(&mut self) {
        self.view = View::default();
        self.provisional = false;
    }
}

/// Why a chunk could not be had from its holder.
#[derive(Debug)]
enum Miss {
    Unreachable(String),
    Corrupt(String),
    /// Older than the version the primary expects: it missed a write or an update.
    Stale(String),
    /// The request certainly never reached the holder (the connection could not be made).
    NotSent(String),
    /// The holder refused the request before changing anything (its chunk is not at the version
    /// the primary expects).
    Refused(String),
    /// Newer than the primary expects: the primary's view of the segment is out of date.
    Newer(String),
    Absent,
    Other(String),
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Miss::Unreachable(m) => write!(f, "unreachable: {m}"),
            Miss::Corrupt(m) => write!(f, "corrupt: {m}"),
            Miss::Stale(m) => write!(f, "stale: {m}"),
            Miss::NotSent(m) => write!(f, "unreachable: {m}"),
            Miss::Refused(m) => write!(f, "refused: {m}"),
            Miss::Newer(m) => write!(f, "newer: {m}"),
            Miss::Absent => f.write_str("not stored"),
            Miss::Other(m) => f.write_str(m),
        }
    }
}

fn store_miss(e: ChunkStoreError) -> Miss {
    match e {
        ChunkStoreError::NotFound { .. } => Miss::Absent,
        ChunkStoreError::Conflict { .. } => Miss::Refused(e.to_string()),
        e if e.is_corruption() => Miss::Corrupt(e.to_string()),
        e => Miss::Other(e.to_string()),
    }
}

fn remote_miss(e: OsdError) -> Miss {
    match e {
        OsdError::NotFound { .. } => Miss::Absent,
        OsdError::Unrecoverable { .. } => Miss::Corrupt(e.to_string()),
        // tonic reports a connection that could not be made as "tcp connect error": the request
        // never left this process.
        OsdError::Unreachable { ref message, .. } if message.contains("connect error") => {
            Miss::NotSent(e.to_string())
        }
        OsdError::Security(_) => Miss::NotSent(e.to_string()),
        OsdError::Unreachable { .. } => Miss::Unreachable(e.to_string()),
        OsdError::StaleLayout { .. } => Miss::Refused(e.to_string()),
        e => Miss::Other(e.to_string()),
    }
}

/// The gRPC status for a chunk store error (the client maps it back, see [`OsdError::from_status`]).
pub fn store_status(e: ChunkStoreError) -> Status {
    match &e {
        ChunkStoreError::NotFound { .. } => Status::not_found(e.to_string()),
        ChunkStoreError::Range { .. } => Status::out_of_range(e.to_string()),
        ChunkStoreError::Invalid { .. } => Status::invalid_argument(e.to_string()),
        ChunkStoreError::Conflict { .. } => Status::failed_precondition(e.to_string()),
        e if e.is_corruption() => Status::data_loss(e.to_string()),
        _ => Status::internal(e.to_string()),
    }
}

/// Bytes per chunk of a segment of `length` bytes.
pub fn chunk_bytes(length: u64, k: usize) -> u64 {
    length.div_ceil(k as u64)
}

/// Checks a layout against the code: n holders with indexes 0..n in order, a length within the
/// largest segment, the primary among the holders. One line naming the problem.
pub fn check_layout(l: &Layout, n: usize) -> Result<(), String> {
    if l.holders.len() != n {
        return Err(format!(
            "segment {:#x}: layout has {} holders, the code has n = {n}",
            l.segment_id,
            l.holders.len()
        ));
    }
    if let Some((i, h)) = l
        .holders
        .iter()
        .enumerate()
        .find(|(i, h)| h.index as usize != *i)
    {
        return Err(format!(
            "segment {:#x}: holder {i} names chunk {}",
            l.segment_id, h.index
        ));
    }
    if l.length == 0 || l.length > ecstack_rpc::config::MAX_SEGMENT_BYTES {
        return Err(format!(
            "segment {:#x}: length {} is outside 1..={}",
            l.segment_id,
            l.length,
            ecstack_rpc::config::MAX_SEGMENT_BYTES
        ));
    }
    if !l.holders.iter().any(|h| h.osd_id == l.primary) {
        return Err(format!(
            "segment {:#x}: primary osd {} holds no chunk",
            l.segment_id, l.primary
        ));
    }
    Ok(())
}

/// Refuses a write or update up front when fewer than k + 1 holders are usable (nothing changes).
fn check_enough(l: &Layout, k: usize, what: &str) -> Result<(), Status> {
    let usable = l.holders.iter().filter(|h| h.usable).count();
    if usable < k + 1 {
        return Err(Status::aborted(format!(
            "segment {:#x}: {what} needs k + 1 = {} usable chunks, the layout has {usable}",
            l.segment_id,
            k + 1
        )));
    }
    Ok(())
}

/// Checks a byte range inside a segment.
pub fn check_range(l: &Layout, offset: u64, len: u64) -> Result<(), String> {
    if offset.checked_add(len).is_none_or(|e| e > l.length) {
        return Err(format!(
            "segment {:#x}: range {offset}+{len} is outside its {} bytes",
            l.segment_id, l.length
        ));
    }
    Ok(())
}

/// The OSD: its chunk store, its peers, the segments it is primary of.
#[derive(Clone)]
pub struct Osd {
    inner: Arc<Inner>,
}

struct Inner {
    setup: OsdSetup,
    peers: Mutex<HashMap<String, OsdClient>>,
    segments: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<SegState>>>>,
    recovery: tokio::sync::Mutex<RateLimit>,
    metrics: Metrics,
    lease: crate::lease::Lease,
    /// [`ecstack_rpc::limits::PEER_FETCH_IDLE`] in milliseconds (tests shorten it).
    peer_fetch_idle_ms: AtomicU64,
    /// Per holder address, the pieces of pipelined reads on their way from it
    /// ([`READ_PIECES_PER_PEER`]).
    piece_slots: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
}

/// A byte-rate limit (0 = unlimited) shared by the recoveries of one OSD.
#[derive(Debug)]
struct RateLimit {
    bytes_per_sec: u64,
    next_free: tokio::time::Instant,
}

/// One sub-update: data chunk `index` gets `data` at `offset` inside the chunk.
#[derive(Debug, Clone)]
struct SubUpdate {
    index: usize,
    offset: u64,
    data: Vec<u8>,
}

/// Split an update of `data` at segment byte `offset` into sub-updates per data chunk.
fn split_update(offset: u64, data: &[u8], cb: u64) -> Vec<SubUpdate> {
    let mut out = Vec::new();
    let mut at = offset;
    let end = offset + data.len() as u64;
    while at < end {
        let index = (at / cb) as usize;
        let chunk_end = ((index as u64 + 1) * cb).min(end);
        out.push(SubUpdate {
            index,
            offset: at - index as u64 * cb,
            data: data[(at - offset) as usize..(chunk_end - offset) as usize].to_vec(),
        });
        at = chunk_end;
    }
    out
}

impl Osd {
    pub fn new(setup: OsdSetup, recovery_bytes_per_sec: u64) -> Osd {
        Osd {
            inner: Arc::new(Inner {
                setup,
                peers: Mutex::new(HashMap::new()),
                segments: Mutex::new(HashMap::new()),
                recovery: tokio::sync::Mutex::new(RateLimit {
                    bytes_per_sec: recovery_bytes_per_sec,
                    next_free: tokio::time::Instant::now(),
                }),
                metrics: Metrics::default(),
                lease: crate::lease::Lease::default(),
                peer_fetch_idle_ms: AtomicU64::new(
                    ecstack_rpc::limits::PEER_FETCH_IDLE.as_millis() as u64,
                ),
                piece_slots: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// How long a chunk read from a peer may wait for its reply's next part before the bytes are
    /// read another way (default [`ecstack_rpc::limits::PEER_FETCH_IDLE`]).
    pub fn set_peer_fetch_idle(&self, idle: Duration) {
        self.inner
            .peer_fetch_idle_ms
            .store(idle.as_millis().max(1) as u64, Ordering::Relaxed);
    }

    fn peer_fetch_idle(&self) -> Duration {
        Duration::from_millis(self.inner.peer_fetch_idle_ms.load(Ordering::Relaxed))
    }

    /// The slots for pipelined-read pieces from holder `h` ([`READ_PIECES_PER_PEER`]).
    fn piece_slots(&self, h: &Holder) -> Arc<tokio::sync::Semaphore> {
        let mut slots = self
            .inner
            .piece_slots
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        slots
            .entry(h.addr.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(READ_PIECES_PER_PEER)))
            .clone()
    }

    pub fn osd_id(&self) -> u32 {
        self.inner.setup.osd_id
    }

    pub fn store(&self) -> &Arc<dyn ChunkStore> {
        &self.inner.setup.store
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The primary lease the daemon's heartbeats renew (`lease.rs`).
    pub fn lease(&self) -> &crate::lease::Lease {
        &self.inner.lease
    }

    /// `UNAVAILABLE` unless this OSD holds its primary lease: before each batch of chunk
    /// mutations it sends (a request's first check waits out a short lapse: [`Osd::await_lease`]).
    fn check_lease(&self, segment: u64) -> Result<(), Status> {
        self.inner
            .lease
            .check()
            .map_err(|ago| self.no_lease(segment, ago))
    }

    /// [`Osd::check_lease`] at the start of a request: a lapsed lease is given
    /// [`crate::lease::Lease::grace`] to be renewed (a heartbeat reply on its way) before the
    /// request is refused.
    async fn await_lease(&self, segment: u64) -> Result<(), Status> {
        self.inner
            .lease
            .wait()
            .await
            .map_err(|ago| self.no_lease(segment, ago))
    }

    fn no_lease(&self, segment: u64, ago: Duration) -> Status {
        Metrics::add(&self.inner.metrics.lease_refusals, 1);
        Status::unavailable(format!(
            "segment {segment:#x}: osd {} has no primary lease (it ended {} ms ago: its heartbeats are late, the MDS may have promoted another primary)",
            self.osd_id(),
            ago.as_millis()
        ))
    }

    /// This OSD's metrics in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        let u = self.store().usage();
        self.inner.metrics.render(self.osd_id(), u.chunks, u.bytes)
    }

    /// Run one RPC's work and record its result and latency under `op` (an index of [`OPS`]).
    /// WriteSegment's handler over any stream of its messages (tonic's, or [`crate::wire`]'s).
    pub(crate) async fn write_segment_from(
        &self,
        mut s: impl tokio_stream::Stream<Item = Result<wire::Reply<proto::SegmentWrite>, Status>>
            + Unpin
            + Send,
    ) -> Result<proto::WriteSegmentReply, Status> {
        self.timed("write_segment", async move {
            let layout = match s.next().await {
                Some(Ok(wire::Reply::Message(proto::SegmentWrite {
                    part: Some(proto::segment_write::Part::Layout(l)),
                }))) => layout_from_proto(&l),
                Some(Err(e)) => return Err(e),
                _ => {
                    return Err(Status::invalid_argument(
                        "WriteSegment must start with the layout",
                    ))
                }
            };
            check_layout(&layout, self.n()).map_err(Status::invalid_argument)?;
            let frames = s.map(|m| match m? {
                wire::Reply::Data(slices) => Ok(slices),
                wire::Reply::Message(_) => {
                    Err(Status::invalid_argument("WriteSegment: a second layout"))
                }
            });
            let ack = self.write_frames(layout, frames).await?;
            Ok(proto::WriteSegmentReply {
                version: ack.version,
                stale: ack.stale,
            })
        })
        .await
    }

    /// PutChunk's handler over any stream of its messages (tonic's, or [`crate::wire`]'s).
    pub(crate) async fn put_chunk_from(
        &self,
        mut s: impl tokio_stream::Stream<Item = Result<wire::Reply<proto::ChunkWrite>, Status>>
            + Unpin
            + Send,
    ) -> Result<proto::PutChunkReply, Status> {
        self.timed("put_chunk", async move {
            let meta = match s.next().await {
                Some(Ok(wire::Reply::Message(proto::ChunkWrite {
                    part: Some(proto::chunk_write::Part::Header(h)),
                }))) => {
                    self.check_target(h.target_osd)?;
                    meta_from_proto(&h)
                }
                Some(Err(e)) => return Err(e),
                _ => {
                    return Err(Status::invalid_argument(
                        "PutChunk must start with the header",
                    ))
                }
            };
            // Each frame is copied once, into the image of the file the store writes.
            let mut image = ChunkImage::new(&meta).map_err(Status::invalid_argument)?;
            while let Some(m) = s.next().await {
                match m? {
                    wire::Reply::Data(slices) => {
                        for d in &slices {
                            image.push(d).map_err(Status::invalid_argument)?
                        }
                    }
                    wire::Reply::Message(_) => {
                        return Err(Status::invalid_argument("PutChunk: a second header"))
                    }
                }
            }
            // A stream that ended short is refused by the store (nothing written).
            self.blocking(move |st| st.put_image(image))
                .await
                .map_err(store_status)?;
            Ok(proto::PutChunkReply {})
        })
        .await
    }

    async fn timed<T>(
        &self,
        op: &str,
        f: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        let started = std::time::Instant::now();
        let r = f.await;
        let i = OPS.iter().position(|o| *o == op).unwrap_or(OPS.len());
        self.inner.metrics.record(i, r.is_ok(), started.elapsed());
        r
    }

    fn code(&self) -> &Arc<dyn ErasureCode> {
        &self.inner.setup.code
    }

    fn k(&self) -> usize {
        self.code().k()
    }

    fn n(&self) -> usize {
        self.code().n()
    }

    /// A client of holder `h`'s OSD (connections cached by address), its calls meant for that
    /// OSD's id only.
    fn peer(&self, h: &Holder) -> Result<OsdClient, Miss> {
        let mut peers = self.inner.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = peers.get(&h.addr) {
            return Ok(c.clone().for_osd(h.osd_id));
        }
        let c = OsdClient::connect(&h.addr, &self.inner.setup.security)
            .map_err(|e| Miss::NotSent(e.to_string()))?;
        peers.insert(h.addr.clone(), c.clone());
        Ok(c.for_osd(h.osd_id))
    }

    /// Refuses a chunk call meant for another OSD (`None`: any).
    fn check_target(&self, target: Option<u32>) -> Result<(), Status> {
        if let Some(target) = target.filter(|&t| t != self.osd_id()) {
            return Err(Status::failed_precondition(format!(
                "this is osd {}, not osd {target}: the caller's address for osd {target} is out of date",
                self.osd_id()
            )));
        }
        Ok(())
    }

    fn is_local(&self, h: &Holder) -> bool {
        h.osd_id == self.osd_id()
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn ChunkStore) -> Result<T, ChunkStoreError> + Send + 'static,
    ) -> Result<T, ChunkStoreError> {
        let store = self.inner.setup.store.clone();
        match tokio::task::spawn_blocking(move || f(&*store)).await {
            Ok(r) => r,
            Err(e) => Err(ChunkStoreError::Invalid {
                segment: 0,
                index: 0,
                message: format!("chunk store task failed: {e}"),
            }),
        }
    }

    // ---- one holder's chunk, local or remote ----

    async fn get_chunk(
        &self,
        segment: u64,
        h: &Holder,
        offset: u64,
        len: u64,
    ) -> Result<(ChunkMeta, Bytes), Miss> {
        let index = h.index;
        if self.is_local(h) {
            return self
                .blocking(move |s| s.read(segment, index, offset, len))
                .await
                .map_err(store_miss);
        }
        let idle = self.peer_fetch_idle();
        let started = Instant::now();
        let got = self
            .peer(h)?
            .get_chunk(segment, index, offset, len, Some(idle))
            .await;
        let took = started.elapsed();
        if took >= SLOW_PEER_FETCH.min(idle) {
            Metrics::add(&self.inner.metrics.slow_peer_fetches, 1);
            tracing::warn!(
                segment,
                chunk = index,
                osd = h.osd_id,
                "a read of {len} bytes of the chunk from {} took {} ms ({})",
                h.addr,
                took.as_millis(),
                match &got {
                    Ok(_) => "done".to_owned(),
                    Err(e) => e.to_string(),
                }
            );
        }
        got.map_err(remote_miss)
    }

    async fn chunk_version(&self, segment: u64, h: &Holder) -> Result<Option<ChunkVersions>, Miss> {
        let index = h.index;
        if self.is_local(h) {
            return self
                .blocking(move |s| s.meta(segment, index))
                .await
                .map(|m| {
                    m.map(|m| ChunkVersions {
                        version: m.version,
                        applied: m.applied,
                    })
                })
                .map_err(store_miss);
        }
        self.peer(h)?
            .chunk_version(segment, index)
            .await
            .map_err(remote_miss)
    }

    async fn put_chunk(&self, h: &Holder, meta: ChunkMeta, data: Bytes) -> Result<(), Miss> {
        if self.is_local(h) {
            return self
                .blocking(move |s| s.put(&meta, &data))
                .await
                .map_err(store_miss);
        }
        self.peer(h)?
            .put_chunk(&meta, data)
            .await
            .map_err(remote_miss)
    }

    /// A sub-update of data chunk `stamp.from` from version `stamp.prior` to `stamp.version`.
    async fn update_chunk_at(
        &self,
        segment: u64,
        h: &Holder,
        offset: u64,
        data: Vec<u8>,
        stamp: DeltaStamp,
        parity: Vec<Holder>,
    ) -> Result<Vec<u32>, Miss> {
        let (version, expected) = (stamp.version, stamp.prior);
        if self.is_local(h) {
            return self
                .update_chunk_local(segment, h.index, offset, data, version, expected, parity)
                .await
                .map_err(|s| match s.code() {
                    tonic::Code::FailedPrecondition => Miss::Refused(s.message().to_owned()),
                    _ => Miss::Other(s.message().to_owned()),
                });
        }
        self.peer(h)?
            .update_chunk(segment, h.index, offset, &data, version, expected, &parity)
            .await
            .map_err(remote_miss)
    }

    async fn apply_delta_at(
        &self,
        segment: u64,
        h: &Holder,
        offset: u64,
        delta: Vec<u8>,
        stamp: DeltaStamp,
    ) -> Result<(), Miss> {
        if self.is_local(h) {
            return self
                .apply_delta_local(segment, h.index, offset, delta, stamp)
                .await
                .map_err(store_miss);
        }
        self.peer(h)?
            .apply_delta(segment, h.index, offset, &delta, stamp)
            .await
            .map_err(remote_miss)
    }

    async fn apply_delta_local(
        &self,
        segment: u64,
        index: u32,
        offset: u64,
        delta: Vec<u8>,
        stamp: DeltaStamp,
    ) -> Result<(), ChunkStoreError> {
        let code = self.code().clone();
        self.blocking(move |s| {
            s.modify(
                segment,
                index,
                offset,
                delta.len() as u64,
                Change::Parity(stamp),
                &mut |b| code.apply_delta(b, &delta).map_err(|e| e.to_string()),
            )
        })
        .await
        .map(|_| ())
    }

    // ---- the segment lock and version ----

    fn segment_lock(&self, segment: u64) -> Arc<tokio::sync::Mutex<SegState>> {
        let mut map = self
            .inner
            .segments
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.entry(segment).or_default().clone()
    }

    /// Refuses a layout this OSD is not the primary of, or one older than the newest it has seen.
    async fn check_primary(&self, l: &Layout, st: &mut SegState) -> Result<(), Status> {
        check_layout(l, self.n()).map_err(Status::invalid_argument)?;
        self.await_lease(l.segment_id).await?;
        if l.primary != self.osd_id() {
            return Err(Status::failed_precondition(format!(
                "segment {:#x}: osd {} is not its primary (the layout names osd {})",
                l.segment_id,
                self.osd_id(),
                l.primary
            )));
        }
        if l.epoch < st.epoch {
            return Err(Status::failed_precondition(format!(
                "segment {:#x}: layout epoch {} is older than epoch {} seen before",
                l.segment_id, l.epoch, st.epoch
            )));
        }
        if l.epoch > st.epoch {
            // The layout changed (promotion, recovery): another primary may have written since;
            // learn the view afresh.
            st.forget();
            st.epoch = l.epoch;
        }
        if st.provisional {
            st.forget();
        }
        Ok(())
    }

    /// Learns the segment's view from its usable holders unless known (`view.rs`).
    async fn learn_view(&self, l: &Layout, st: &mut SegState) {
        if st.view.is_known() {
            return;
        }
        let asks =
            l.holders.iter().filter(|h| h.usable).map(|h| async move {
                (h.index as usize, self.chunk_version(l.segment_id, h).await)
            });
        let mut reports = vec![None; self.n()];
        for (i, a) in futures_join_all(asks).await {
            if let Ok(Some(v)) = a {
                reports[i] = Some(v);
            }
        }
        let view = View::choose(self.k(), &reports);
        let agreeing = reports
            .iter()
            .enumerate()
            .filter(|(i, r)| {
                r.as_ref()
                    .is_some_and(|r| view.verdict(*i, r) == Verdict::Current)
            })
            .count();
        st.provisional = agreeing < self.k();
        st.view = view;
    }

    /// The header a chunk written whole (write, recovery, repair) carries under `view`.
    fn meta_for(&self, l: &Layout, view: &View, index: u32) -> ChunkMeta {
        let stamp = view.stamp_of(index as usize);
        ChunkMeta {
            segment_id: l.segment_id,
            index,
            version: stamp.version,
            chunk_bytes: chunk_bytes(l.length, self.k()),
            segment_length: l.length,
            applied: stamp.applied,
        }
    }

    // ---- write ----

    /// A whole segment from memory (see [`Osd::write_frames`]); the fuzz targets seed chunks with it.
    #[cfg(test)]
    pub(crate) async fn write(&self, layout: Layout, data: Vec<u8>) -> Result<api::Ack, Status> {
        let frames: Vec<Result<Vec<Bytes>, Status>> = api::slice_frames(Bytes::from(data))
            .into_iter()
            .map(|f| Ok(vec![f]))
            .collect();
        self.write_frames(layout, tokio_stream::iter(frames)).await
    }

    /// Writes a whole segment whose bytes arrive as `frames` (WriteSegment's stream): takes the
    /// segment's lock and its view first, then forwards each data chunk to its holder *as its
    /// bytes arrive* (cut-through, so the primary's inbound and outbound links work at once
    /// instead of one after the other), encodes the parity once the last byte is in, and sends it.
    ///
    /// The last frame of every forwarded chunk is held back until the lease has been checked
    /// after the whole segment arrived and was encoded: a holder stores a chunk only when its
    /// stream ends complete, so a write abandoned before that point (client gone, too many bytes,
    /// lease lost) leaves nothing new on any holder.
    pub(crate) async fn write_frames(
        &self,
        layout: Layout,
        mut frames: impl tokio_stream::Stream<Item = Result<Vec<Bytes>, Status>> + Unpin,
    ) -> Result<api::Ack, Status> {
        let lock = self.segment_lock(layout.segment_id);
        let mut st = lock.lock().await;
        self.check_primary(&layout, &mut st).await?;
        check_enough(&layout, self.k(), "a write")?;
        self.learn_view(&layout, &mut st).await;
        let version = st.view.newest + 1;
        let (k, n) = (self.k(), self.n());
        let written = View::written(k, version);
        let len = layout.length as usize;
        let cb = chunk_bytes(layout.length, k) as usize;
        let seg = layout.segment_id;
        self.check_lease(seg)?;
        // Cut-through forwards of the data chunks held elsewhere.
        let mut forwards: Vec<Option<Forward>> = (0..k).map(|_| None).collect();
        let mut results: Vec<(u32, Result<(), Miss>)> = Vec::new();
        for h in layout.holders.iter().filter(|h| h.usable) {
            let j = h.index as usize;
            if j >= k || self.is_local(h) {
                continue;
            }
            match self.peer(h) {
                Ok(peer) => {
                    forwards[j] = Some(Forward::start(
                        peer,
                        self.meta_for(&layout, &written, h.index),
                    ))
                }
                Err(miss) => results.push((h.index, Err(miss))),
            }
        }
        // Room for the zero padding of the last data chunk: the data chunks are slices of it.
        let mut data = Vec::with_capacity(k * cb);
        // Each frame is a message's data as the slices it arrived in.
        while let Some(frame) = frames.next().await {
            let slices = frame?;
            let n: usize = slices.iter().map(Bytes::len).sum();
            if data.len() + n > len {
                return Err(Status::invalid_argument(format!(
                    "segment {seg:#x}: more than its {len} bytes sent"
                )));
            }
            let from = data.len();
            for d in &slices {
                data.extend_from_slice(d);
            }
            forward_range(&mut forwards, &slices, from, cb);
        }
        if data.len() != len {
            return Err(Status::invalid_argument(format!(
                "segment {seg:#x}: received {} bytes for a segment of {len}",
                data.len()
            )));
        }
        Metrics::add(&self.inner.metrics.bytes_in, len as u64);
        let code = self.code().clone();
        data.resize(k * cb, 0);
        let data = Bytes::from(data);
        let chunks = tokio::task::spawn_blocking(move || encode_segment(&*code, data, cb))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(Status::internal)?;
        self.check_lease(seg)?;
        // The held-back frames: the forwarded chunks complete (with their zero padding).
        let forwarded = forwards.into_iter().enumerate().filter_map(|(j, f)| {
            let whole = chunks[j].clone();
            f.map(|f| async move { (j as u32, f.finish(whole).await) })
        });
        let puts = layout
            .holders
            .iter()
            .filter(|h| h.usable && ((h.index as usize) >= k || self.is_local(h)))
            .map(|h| {
                let meta = self.meta_for(&layout, &written, h.index);
                let data = chunks[h.index as usize].clone();
                async move { (h.index, self.put_chunk(h, meta, data).await) }
            });
        let (a, b) = tokio::join!(futures_join_all(forwarded), futures_join_all(puts));
        results.extend(a);
        results.extend(b);
        results.sort_by_key(|(i, _)| *i);
        let mut failed = Vec::new();
        let mut reasons = Vec::new();
        for (i, r) in &results {
            if let Err(e) = r {
                failed.push(*i);
                reasons.push(format!("chunk {i}: {e}"));
            }
        }
        let durable = results.len() - failed.len();
        if !failed.is_empty() {
            tracing::warn!(
                segment = seg,
                version,
                durable,
                "write: {} chunk(s) not stored: {}",
                failed.len(),
                reasons.join("; ")
            );
        }
        st.view = written;
        st.provisional = false;
        if durable < k + 1 {
            // Not acknowledged: the version is used up so a retry writes a newer one.
            return Err(Status::aborted(format!(
                "segment {seg:#x}: only {durable} of {n} chunks durable, need k + 1 = {} ({})",
                k + 1,
                reasons.join("; ")
            )));
        }
        // Healthy chunks on holders the MDS sees down were skipped: they are stale now too.
        failed.extend(
            layout
                .holders
                .iter()
                .filter(|h| !h.usable && h.down)
                .map(|h| h.index),
        );
        failed.sort_unstable();
        self.mark_stale(seg, &failed, version).await?;
        let mut stale: Vec<u32> = layout
            .holders
            .iter()
            .filter(|h| !h.usable && !h.down)
            .map(|h| h.index)
            .chain(failed)
            .collect();
        stale.sort_unstable();
        Ok(api::Ack { version, stale })
    }

    async fn mark_stale(&self, segment: u64, chunks: &[u32], version: u64) -> Result<(), Status> {
        if chunks.is_empty() {
            return Ok(());
        }
        self.inner
            .setup
            .mds
            .mark_stale(segment, chunks, version)
            .await
            .map(|()| Metrics::add(&self.inner.metrics.stale_marked, chunks.len() as u64))
            .map_err(|e| {
                Status::aborted(format!(
                    "segment {segment:#x}: chunks {chunks:?} were not written and the MDS could not mark them stale: {e}"
                ))
            })
    }

    // ---- read ----

    /// Fetch chunk `h` over `[offset, offset+len)` and check its version against what the primary
    /// expects; an older chunk is stale (missing), a newer one means the primary's view is old.
    async fn fetch_checked(
        &self,
        l: &Layout,
        st: &SegState,
        h: &Holder,
        offset: u64,
        len: u64,
    ) -> Result<Bytes, Miss> {
        let (meta, data) = self.get_chunk(l.segment_id, h, offset, len).await?;
        let got = ChunkVersions {
            version: meta.version,
            applied: meta.applied.clone(),
        };
        let why = || {
            format!(
                "version {} applied {:?}, the view is {:?}",
                got.version, got.applied, st.view.applied
            )
        };
        match st.view.verdict(h.index as usize, &got) {
            Verdict::Current => {}
            Verdict::Stale => return Err(Miss::Stale(why())),
            Verdict::Newer => return Err(Miss::Newer(why())),
        }
        if meta.segment_length != l.length {
            return Err(Miss::Other(format!(
                "chunk says the segment has {} bytes, the layout {}",
                meta.segment_length, l.length
            )));
        }
        Ok(data)
    }

    /// Gather the in-chunk range `[lo, hi)` of every chunk: first the ones in `prefer`, then any
    /// usable chunk, until k are present; decode the missing ones. Returns all n shards and the
    /// chunks that failed their checksum (to be repaired).
    async fn gather(
        &self,
        l: &Layout,
        st: &SegState,
        lo: u64,
        hi: u64,
        have: Vec<Option<Vec<u8>>>,
    ) -> Result<(Vec<Vec<u8>>, Vec<u32>), Status> {
        let (k, n) = (self.k(), self.n());
        let mut shards = have;
        let mut corrupt = Vec::new();
        let mut reasons = Vec::new();
        let mut tried: Vec<bool> = shards.iter().map(|s| s.is_some()).collect();
        loop {
            let present = shards.iter().filter(|s| s.is_some()).count();
            if present >= k {
                break;
            }
            // Ask as many more usable holders as are still missing, data chunks first.
            let next: Vec<&Holder> = l
                .holders
                .iter()
                .filter(|h| h.usable && !tried[h.index as usize])
                .take(k - present)
                .collect();
            if next.is_empty() {
                let unusable: Vec<u32> = l
                    .holders
                    .iter()
                    .filter(|h| !h.usable)
                    .map(|h| h.index)
                    .collect();
                return Err(Status::data_loss(format!(
                    "segment {:#x}: only {present} of the k = {k} chunks needed are readable (unusable: {unusable:?}; {})",
                    l.segment_id,
                    reasons.join("; ")
                )));
            }
            let asks = next
                .iter()
                .map(|h| async move { (h.index, self.fetch_checked(l, st, h, lo, hi - lo).await) });
            for (i, r) in futures_join_all(asks).await {
                tried[i as usize] = true;
                match r {
                    Ok(d) => shards[i as usize] = Some(Vec::from(d)),
                    Err(Miss::Newer(e)) => return Err(newer(l.segment_id, i, &e)),
                    Err(e) => {
                        if matches!(e, Miss::Corrupt(_) | Miss::Stale(_)) {
                            corrupt.push(i);
                        }
                        reasons.push(format!("chunk {i}: {e}"));
                    }
                }
            }
        }
        if shards.iter().filter(|s| s.is_none()).count() > 0 {
            let code = self.code().clone();
            shards =
                tokio::task::spawn_blocking(move || code.reconstruct(&mut shards).map(|_| shards))
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?
                    .map_err(|e| {
                        Status::internal(format!("decode of segment {:#x}: {e}", l.segment_id))
                    })?;
        }
        debug_assert_eq!(shards.len(), n);
        Ok((
            shards.into_iter().map(|s| s.unwrap_or_default()).collect(),
            corrupt,
        ))
    }

    /// A whole read in memory (the fuzz targets'; the service streams with [`Osd::read_stream`]).
    #[cfg(test)]
    pub(crate) async fn read(&self, l: Layout, offset: u64, len: u64) -> Result<Vec<u8>, Status> {
        let mut frames = self.read_stream(l, offset, len).await?;
        let mut assembly = api::ReadAssembly::new(offset, len);
        while let Some(f) = frames.next().await {
            let f = f?;
            assembly
                .take(f.at, vec![f.data])
                .map_err(Status::internal)?;
        }
        Ok(assembly.finish().map_err(Status::internal)?.concat())
    }

    /// A read as a stream of frames, pipelined: while every data chunk the range needs is usable,
    /// the range goes out in pieces of at most [`api::FRAME_BYTES`] (never across a chunk), up to
    /// [`READ_PIPELINE_PIECES`] of them fetched at once from their holders, each sent as soon as
    /// it and the ones before it are in. The client thus gets the first megabyte after one piece's
    /// fetch instead of after the whole segment's gather (store-and-forward made a 16 MiB get wait
    /// for all k chunks before its first byte). If a piece cannot be had as it should (a holder
    /// unreachable, a chunk stale or corrupt), the rest of the range is read the ordinary way
    /// (degraded read, repair). The segment's lock is held until the last frame is queued.
    async fn read_stream(
        &self,
        l: Layout,
        offset: u64,
        len: u64,
    ) -> Result<FrameStream<proto::DataFrame>, Status> {
        let mut st = self.segment_lock(l.segment_id).lock_owned().await;
        self.check_primary(&l, &mut st).await?;
        check_range(&l, offset, len).map_err(Status::out_of_range)?;
        if len == 0 {
            return Ok(frames(None, Vec::new(), |data| proto::DataFrame {
                data,
                at: None,
            }));
        }
        self.learn_view(&l, &mut st).await;
        let cb = chunk_bytes(l.length, self.k());
        let first = (offset / cb) as usize;
        let last = ((offset + len - 1) / cb) as usize;
        if (first..=last).any(|i| !l.holders[i].usable) {
            let data = self.read_locked(&l, &mut st, offset, len).await?;
            Metrics::add(&self.inner.metrics.bytes_out, data.len() as u64);
            return Ok(frames(None, data, |data| proto::DataFrame {
                data,
                at: None,
            }));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(READ_REPLY_FRAMES);
        let osd = self.clone();
        tokio::spawn(async move { osd.pipeline(l, st, offset, len, tx).await });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    /// A plan for a read straight from the data holders (`ReadPlan`): under the segment's lock,
    /// the versions the data chunks must carry now (the view every read of this primary checks
    /// chunks against), or `None` when a data chunk the range needs is not usable. A chunk read
    /// later at exactly its planned version holds the bytes it held at the plan: versions only
    /// grow, and every change of a data chunk issues a new one.
    pub(crate) async fn read_plan(
        &self,
        l: Layout,
        offset: u64,
        len: u64,
    ) -> Result<Option<Vec<u64>>, Status> {
        let mut st = self.segment_lock(l.segment_id).lock_owned().await;
        self.check_primary(&l, &mut st).await?;
        check_range(&l, offset, len).map_err(Status::out_of_range)?;
        let cb = chunk_bytes(l.length, self.k());
        if len > 0 {
            let first = (offset / cb) as usize;
            let last = ((offset + len - 1) / cb) as usize;
            if (first..=last).any(|i| !l.holders[i].usable) {
                return Ok(None);
            }
        }
        self.learn_view(&l, &mut st).await;
        debug_assert_eq!(st.view.applied.len(), self.k());
        Ok(Some(st.view.applied.clone()))
    }

    /// The body of [`Osd::read_stream`]'s pipelined case (its own task). Each data chunk the range
    /// touches is a [`Lane`]: its frames fetched in order from its holder, a few at once, all lanes
    /// at the same time, so every data holder of the segment sends while the client's stream runs;
    /// a frame goes out as soon as it and the ones before it in its lane are in (a frame with `at`
    /// tells the client where, when it does not follow the frame sent before). Frames from other
    /// holders go first, this OSD's own chunk fills in while they are on their way: the primary's
    /// link then idles only when its own chunks are sent and every holder is slow. (Fetched in the
    /// file's order, a 64 MiB segment's read went through its chunks one holder at a time, and a
    /// primary whose reads all waited on busy holders left its link idle.)
    async fn pipeline(
        self,
        l: Layout,
        mut st: tokio::sync::OwnedMutexGuard<SegState>,
        offset: u64,
        len: u64,
        tx: tokio::sync::mpsc::Sender<Result<proto::DataFrame, Status>>,
    ) {
        let cb = chunk_bytes(l.length, self.k());
        let end = offset + len;
        let first = offset / cb;
        let last = (end - 1) / cb;
        let mut lanes: Vec<Lane> = (first..=last)
            .map(|i| {
                let lo = offset.max(i * cb);
                Lane {
                    chunk: i as usize,
                    next: lo,
                    end: end.min((i + 1) * cb),
                    sent: lo,
                    local: self.is_local(&l.holders[i as usize]),
                    ready: BTreeMap::new(),
                    in_flight: 0,
                }
            })
            .collect();
        let per_lane = (READ_PIPELINE_PIECES / lanes.len()).max(READ_LANE_PIECES_MIN);
        let (l, snap) = (Arc::new(l), Arc::new(st.clone()));
        let mut fetches = tokio::task::JoinSet::new();
        // Where the client puts the next data frame.
        let mut place = offset;
        let miss = 'read: loop {
            for (li, lane) in lanes.iter_mut().enumerate() {
                while lane.in_flight + lane.ready.len() < per_lane && lane.next < lane.end {
                    let (lo, hi) = (lane.next, lane.end.min(lane.next + api::FRAME_BYTES as u64));
                    lane.next = hi;
                    lane.in_flight += 1;
                    let (osd, l, snap, i) = (self.clone(), l.clone(), snap.clone(), lane.chunk);
                    let slots = (!lane.local).then(|| self.piece_slots(&l.holders[i]));
                    fetches.spawn(async move {
                        // Never closed; dropped (released) when the piece is in or the read ends.
                        let _slot = match slots {
                            Some(s) => s.acquire_owned().await.ok(),
                            None => None,
                        };
                        let at = lo - i as u64 * cb;
                        let got = osd
                            .fetch_checked(&l, &snap, &l.holders[i], at, hi - lo)
                            .await
                            .and_then(|d| match d.len() as u64 == hi - lo {
                                true => Ok(d),
                                false => Err(Miss::Other(format!(
                                    "chunk {i} gave {} bytes for a piece of {}",
                                    d.len(),
                                    hi - lo
                                ))),
                            });
                        (li, lo, got)
                    });
                }
            }
            // Take in every fetch that is done (waiting for one when no lane has a frame to send),
            // then send the first frame of a lane that can go.
            loop {
                let can_send = lanes.iter().any(|ln| ln.ready.contains_key(&ln.sent));
                let joined = if can_send {
                    fetches.try_join_next()
                } else {
                    fetches.join_next().await
                };
                let Some(joined) = joined else { break };
                match joined {
                    Ok((li, lo, Ok(data))) => {
                        lanes[li].in_flight -= 1;
                        lanes[li].ready.insert(lo, data);
                    }
                    Ok((li, _, Err(Miss::Newer(e)))) => {
                        break 'read Err(Halt::Failed(newer(
                            l.segment_id,
                            lanes[li].chunk as u32,
                            &e,
                        )))
                    }
                    Ok((li, _, Err(miss))) => {
                        break 'read Err(Halt::Piece {
                            chunk: lanes[li].chunk,
                            miss,
                        })
                    }
                    Err(e) => {
                        break 'read Err(Halt::Failed(Status::internal(format!("read task: {e}"))))
                    }
                }
            }
            // Nothing to send and nothing on its way: every lane is sent.
            let Some(li) = (0..lanes.len())
                .filter(|&i| lanes[i].ready.contains_key(&lanes[i].sent))
                .min_by_key(|&i| (lanes[i].local, i))
            else {
                break 'read Ok(());
            };
            let lane = &mut lanes[li];
            let at = lane.sent;
            let data = lane
                .ready
                .remove(&at)
                .expect("the picked lane has its next frame");
            lane.sent += data.len() as u64;
            Metrics::add(&self.inner.metrics.bytes_out, data.len() as u64);
            if !send_placed(&tx, &mut place, at, [data]).await {
                return; // the client went away
            }
        };
        fetches.abort_all();
        let rest: Result<(), Status> = match miss {
            Ok(()) => {
                debug_assert!(lanes.iter().all(|ln| ln.sent == ln.end));
                return;
            }
            Err(Halt::Failed(s)) => {
                st.forget();
                Err(s)
            }
            // A piece could not be had as it should: the rest of each lane the ordinary way. A
            // holder that did not answer (or stopped sending: `PEER_FETCH_IDLE`) is read around,
            // not asked again (a stale or corrupt chunk is asked again, to be repaired).
            Err(Halt::Piece { chunk, miss }) => {
                let around = matches!(miss, Miss::Unreachable(_) | Miss::NotSent(_));
                tracing::info!(
                    segment = l.segment_id,
                    chunk,
                    "a pipelined read continues the ordinary way{}: {miss}",
                    if around {
                        ", around the chunk's holder"
                    } else {
                        ""
                    }
                );
                let mut l = Layout::clone(&l);
                if around {
                    l.holders[chunk].usable = false;
                }
                let mut r = Ok(());
                for lane in lanes.iter().filter(|ln| ln.sent < ln.end) {
                    match self
                        .read_locked(&l, &mut st, lane.sent, lane.end - lane.sent)
                        .await
                    {
                        Ok(data) => {
                            Metrics::add(&self.inner.metrics.bytes_out, data.len() as u64);
                            let frames = api::slice_frames(Bytes::from(data));
                            if !send_placed(&tx, &mut place, lane.sent, frames).await {
                                return;
                            }
                        }
                        Err(s) => {
                            r = Err(s);
                            break;
                        }
                    }
                }
                r
            }
        };
        if let Err(s) = rest {
            let _ = tx.send(Err(s)).await;
        }
    }

    /// [`Osd::read`] once the segment's lock is held and the request checked (`len` > 0).
    async fn read_locked(
        &self,
        l: &Layout,
        st: &mut SegState,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, Status> {
        self.learn_view(l, st).await;
        let (k, n) = (self.k(), self.n());
        let cb = chunk_bytes(l.length, k);
        let first = (offset / cb) as usize;
        let last = ((offset + len - 1) / cb) as usize;
        // Normal read: the needed data chunks, each over its own range.
        let lref = l;
        let asks = (first..=last).map(|i| {
            let h = &lref.holders[i];
            let lo = if i == first {
                offset - i as u64 * cb
            } else {
                0
            };
            let hi = if i == last {
                offset + len - i as u64 * cb
            } else {
                cb
            };
            let st = &*st;
            async move {
                if !h.usable {
                    return (i, Err(Miss::Other("not usable".into())));
                }
                (i, self.fetch_checked(lref, st, h, lo, hi - lo).await)
            }
        });
        let got = futures_join_all(asks).await;
        if let Some((i, Err(Miss::Newer(e)))) =
            got.iter().find(|(_, r)| matches!(r, Err(Miss::Newer(_))))
        {
            st.forget();
            return Err(newer(l.segment_id, *i as u32, e));
        }
        if got.iter().all(|(_, r)| r.is_ok()) {
            let mut out = Vec::with_capacity(len as usize);
            for (_, r) in got {
                out.extend_from_slice(&r.unwrap_or_default());
            }
            return Ok(out);
        }
        Metrics::add(&self.inner.metrics.degraded_reads, 1);
        // Degraded read: the same in-chunk range of any k chunks, decoded. A chunk that failed its
        // checksum (or is older than it should be) is rebuilt whole and rewritten.
        let repair = got
            .iter()
            .any(|(_, r)| matches!(r, Err(Miss::Corrupt(_) | Miss::Stale(_))));
        let (lo, hi) = if repair || first != last {
            (0, cb)
        } else {
            (offset - first as u64 * cb, offset + len - first as u64 * cb)
        };
        let mut have = vec![None; n];
        let mut tried_bad = Vec::new();
        let mut to_repair = Vec::new();
        for (i, r) in got {
            match r {
                Ok(d) if lo == 0 && hi == cb && d.len() as u64 == cb => {
                    have[i] = Some(Vec::from(d))
                }
                Ok(_) => {}
                Err(e) => {
                    if matches!(e, Miss::Corrupt(_) | Miss::Stale(_)) {
                        to_repair.push(i as u32);
                    }
                    tried_bad.push(i);
                }
            }
        }
        let l2 = Layout {
            holders: l
                .holders
                .iter()
                .map(|h| Holder {
                    usable: h.usable && !tried_bad.contains(&(h.index as usize)),
                    ..h.clone()
                })
                .collect(),
            ..l.clone()
        };
        let gathered = self.gather(&l2, &st, lo, hi, have).await;
        if gathered
            .as_ref()
            .is_err_and(|s| s.code() == tonic::Code::FailedPrecondition)
        {
            st.forget();
        }
        let (shards, mut corrupt) = gathered?;
        corrupt.extend(to_repair);
        let mut out = Vec::with_capacity(len as usize);
        for i in first..=last {
            let a = if i == first {
                offset - i as u64 * cb
            } else {
                0
            };
            let b = if i == last {
                offset + len - i as u64 * cb
            } else {
                cb
            };
            out.extend_from_slice(&shards[i][(a - lo) as usize..(b - lo) as usize]);
        }
        if repair && lo == 0 && hi == cb {
            corrupt.sort_unstable();
            corrupt.dedup();
            self.repair(&l, &st, &shards, &corrupt).await;
        }
        Ok(out)
    }

    /// Rewrite chunks that failed their checksum (or were stale) from decoded shards, best effort:
    /// a failed repair leaves the chunk as it was (it stays detectable).
    async fn repair(&self, l: &Layout, st: &SegState, shards: &[Vec<u8>], chunks: &[u32]) {
        for &i in chunks {
            if self.check_lease(l.segment_id).is_err() {
                return;
            }
            let h = &l.holders[i as usize];
            let meta = self.meta_for(l, &st.view, i);
            let data = Bytes::copy_from_slice(&shards[i as usize]);
            match self.put_chunk(h, meta, data).await {
                Ok(()) => {
                    Metrics::add(&self.inner.metrics.repairs, 1);
                    tracing::warn!(
                        segment = l.segment_id,
                        chunk = i,
                        osd = h.osd_id,
                        "repaired a chunk that failed its checksum or was stale"
                    )
                }
                Err(e) => tracing::warn!(
                    segment = l.segment_id,
                    chunk = i,
                    osd = h.osd_id,
                    "could not repair chunk: {e}"
                ),
            }
        }
    }

    // ---- FO update ----

    pub(crate) async fn update(
        &self,
        l: Layout,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<api::Ack, Status> {
        let lock = self.segment_lock(l.segment_id);
        let mut st = lock.lock().await;
        self.check_primary(&l, &mut st).await?;
        check_range(&l, offset, data.len() as u64).map_err(Status::out_of_range)?;
        if data.is_empty() {
            return Err(Status::invalid_argument(format!(
                "segment {:#x}: empty update",
                l.segment_id
            )));
        }
        check_enough(&l, self.k(), "an update")?;
        self.learn_view(&l, &mut st).await;
        let (k, n) = (self.k(), self.n());
        let seg = l.segment_id;
        // The version is used up whether or not this update is acknowledged.
        let version = st.view.newest + 1;
        st.view.newest = version;
        let cb = chunk_bytes(l.length, k);
        let subs = split_update(offset, &data, cb);
        let parity: Vec<Holder> = l.holders[k..]
            .iter()
            .filter(|h| h.usable)
            .cloned()
            .collect();
        if let Err(e) = self.check_lease(seg) {
            st.forget();
            return Err(e);
        }
        // Phase 1: every sub-update at its (usable) data holder, in parallel; deltas commute.
        let asks = subs.iter().filter(|s| l.holders[s.index].usable).map(|s| {
            let h = &l.holders[s.index];
            let parity = parity.clone();
            let stamp = DeltaStamp {
                from: s.index as u32,
                prior: st.view.applied[s.index],
                version,
            };
            async move {
                (
                    s.index,
                    self.update_chunk_at(seg, h, s.offset, s.data.clone(), stamp, parity)
                        .await,
                )
            }
        });
        let mut stale: Vec<u32> = Vec::new();
        let mut failed: Vec<usize> = subs
            .iter()
            .filter(|s| !l.holders[s.index].usable)
            .map(|s| s.index)
            .collect();
        let mut reasons = Vec::new();
        for (i, r) in futures_join_all(asks).await {
            match r {
                Ok(p) => stale.extend(p),
                Err(e) => {
                    reasons.push(format!("chunk {i}: {e}"));
                    failed.push(i);
                }
            }
        }
        // The view after phase 1: the data chunks that took their sub-update are at `version`, and
        // so is their entry in every parity chunk not marked stale.
        let mut now = st.clone();
        for s in subs.iter().filter(|s| !failed.contains(&s.index)) {
            now.view.applied[s.index] = version;
        }
        // Phase 2: sub-updates whose data holder is unusable, refused or failed (whether or not it
        // wrote its bytes): decode the old bytes of the range from k other chunks that agree with
        // the view, compute the deltas and apply them at the parity holders. A parity holder that
        // already took the delta from the data holder before it failed takes it again as a no-op.
        let failed_idx: Vec<u32> = failed.iter().map(|&i| i as u32).collect();
        for &i in &failed {
            stale.push(i as u32);
            let s = subs
                .iter()
                .find(|s| s.index == i)
                .cloned()
                .ok_or_else(|| Status::internal("sub-update vanished"))?;
            self.degraded_deltas(&l, &mut now, &s, version, &failed_idx, &parity, &mut stale)
                .await
                .map_err(|e| {
                    st.forget();
                    Status::aborted(format!(
                        "segment {seg:#x}: update of chunk {i} failed ({}) and the primary cannot finish it: {e}",
                        reasons.join("; ")
                    ))
                })?;
        }
        stale.sort_unstable();
        stale.dedup();
        // The view: every data chunk this update touched is at `version` (or marked stale below),
        // and so is every parity chunk not marked stale.
        st.view = now.view;
        let unusable: Vec<u32> = l
            .holders
            .iter()
            .filter(|h| !h.usable)
            .map(|h| h.index)
            .collect();
        // Newly stale: what failed now, chunks on down holders this update touched (its data
        // chunks, every parity chunk); already stale, recovering or lost ones stay as they are.
        let down: Vec<u32> = l
            .holders
            .iter()
            .filter(|h| !h.usable && h.down)
            .map(|h| h.index)
            .collect();
        let mut newly: Vec<u32> = stale
            .iter()
            .copied()
            .filter(|i| !unusable.contains(i) || down.contains(i))
            .chain(down.iter().copied().filter(|&i| i as usize >= k))
            .collect();
        newly.sort_unstable();
        newly.dedup();
        let durable = n - unusable.len() - stale.iter().filter(|i| !unusable.contains(i)).count();
        if durable < k + 1 {
            // Not acknowledged, but some chunks may hold the new bytes: the ones that do not are
            // marked stale (best effort) so they are never read beside the ones that do.
            if let Err(e) = self.mark_stale(seg, &newly, version).await {
                tracing::warn!(segment = seg, "{}", e.message());
            }
            st.forget();
            return Err(Status::aborted(format!(
                "segment {seg:#x}: update durable on only {durable} of {n} chunks, need k + 1 = {} ({})",
                k + 1,
                reasons.join("; ")
            )));
        }
        self.mark_stale(seg, &newly, version).await?;
        let touched_unusable = subs
            .iter()
            .map(|s| s.index as u32)
            .filter(|i| unusable.contains(i));
        let mut all: Vec<u32> = stale
            .iter()
            .copied()
            .chain(touched_unusable)
            .chain(newly.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        Ok(api::Ack {
            version,
            stale: all,
        })
    }

    /// A sub-update whose data holder did not (certainly) apply it: decode the old bytes of its
    /// range from k other chunks that agree with the view `now` (the failed data chunks and stale
    /// parity excluded), compute the parity deltas and apply them at the parity holders.
    #[allow(clippy::too_many_arguments)]
    async fn degraded_deltas(
        &self,
        l: &Layout,
        now: &mut SegState,
        s: &SubUpdate,
        version: u64,
        failed: &[u32],
        parity: &[Holder],
        stale: &mut Vec<u32>,
    ) -> Result<(), String> {
        let (k, n) = (self.k(), self.n());
        let without = Layout {
            holders: l
                .holders
                .iter()
                .map(|h| Holder {
                    usable: h.usable && !failed.contains(&h.index) && !stale.contains(&h.index),
                    ..h.clone()
                })
                .collect(),
            ..l.clone()
        };
        let (lo, hi) = (s.offset, s.offset + s.data.len() as u64);
        let (shards, _) = self
            .gather(&without, now, lo, hi, vec![None; n])
            .await
            .map_err(|e| e.message().to_owned())?;
        let code = self.code().clone();
        let m = code.m();
        let (old, new, index) = (shards[s.index].clone(), s.data.clone(), s.index);
        let deltas = tokio::task::spawn_blocking(move || {
            let mut deltas = vec![vec![0u8; new.len()]; m];
            let mut refs: Vec<&mut [u8]> = deltas.iter_mut().map(|d| d.as_mut_slice()).collect();
            code.parity_deltas(index, &old, &new, &mut refs)
                .map(|_| deltas)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let stamp = DeltaStamp {
            from: s.index as u32,
            prior: now.view.applied[s.index],
            version,
        };
        let sends = parity
            .iter()
            .filter(|h| !stale.contains(&h.index))
            .map(|h| {
                let delta = deltas[h.index as usize - k].clone();
                async move {
                    (
                        h.index,
                        self.apply_delta_at(l.segment_id, h, lo, delta, stamp).await,
                    )
                }
            });
        for (i, r) in futures_join_all(sends).await {
            if let Err(e) = r {
                tracing::warn!(
                    segment = l.segment_id,
                    chunk = i,
                    "parity delta not applied: {e}"
                );
                stale.push(i);
            }
        }
        now.view.applied[s.index] = version;
        Ok(())
    }

    /// UpdateChunk at the holder: write the new bytes in place (refused unless the chunk is at
    /// version `expected`, 0: any), send one delta per parity holder, all durable before
    /// returning; the parity chunks that did not acknowledge.
    #[allow(clippy::too_many_arguments)]
    async fn update_chunk_local(
        &self,
        segment: u64,
        index: u32,
        offset: u64,
        data: Vec<u8>,
        version: u64,
        expected: u64,
        parity: Vec<Holder>,
    ) -> Result<Vec<u32>, Status> {
        let k = self.k();
        if index as usize >= k {
            return Err(Status::invalid_argument(format!(
                "segment {segment:#x}: chunk {index} is a parity chunk; sub-updates go to data chunks"
            )));
        }
        if let Some(h) = parity
            .iter()
            .find(|h| (h.index as usize) < k || h.index as usize >= self.n())
        {
            return Err(Status::invalid_argument(format!(
                "segment {segment:#x}: holder of chunk {} is not a parity holder",
                h.index
            )));
        }
        let new = Arc::new(data);
        let new2 = new.clone();
        let (old, before) = self
            .blocking(move |s| {
                let mut old = Vec::new();
                s.modify(
                    segment,
                    index,
                    offset,
                    new2.len() as u64,
                    Change::Data { expected, version },
                    &mut |b| {
                        old = b.to_vec();
                        b.copy_from_slice(&new2);
                        Ok(())
                    },
                )
                .map(|before| (old, before))
            })
            .await
            .map_err(store_status)?;
        if parity.is_empty() {
            return Ok(Vec::new());
        }
        let code = self.code().clone();
        let m = code.m();
        let len = new.len();
        let new3 = new.clone();
        let deltas = tokio::task::spawn_blocking(move || {
            let mut deltas = vec![vec![0u8; len]; m];
            let mut refs: Vec<&mut [u8]> = deltas.iter_mut().map(|d| d.as_mut_slice()).collect();
            code.parity_deltas(index as usize, &old, &new3, &mut refs)
                .map(|_| deltas)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let stamp = DeltaStamp {
            from: index,
            prior: before.version,
            version,
        };
        let sends = parity.iter().map(|h| {
            let delta = deltas[h.index as usize - k].clone();
            async move {
                (
                    h.index,
                    self.apply_delta_at(segment, h, offset, delta, stamp).await,
                )
            }
        });
        let mut stale = Vec::new();
        for (i, r) in futures_join_all(sends).await {
            if let Err(e) = r {
                tracing::warn!(segment, chunk = i, "parity delta not applied: {e}");
                stale.push(i);
            }
        }
        Ok(stale)
    }

    // ---- recovery ----

    /// Rebuild `chunks` of a segment (this OSD is its primary) from k usable chunks and store each
    /// on the OSD its placement names; reports each to the MDS. The bytes moved are rate-limited.
    pub async fn recover(&self, l: &Layout, chunks: &[u32]) -> Result<u64, String> {
        // The rate limit is waited for before the segment's lock is taken (k chunks gathered, one
        // stored per lost chunk), so the segment's reads and writes do not wait out the pacing.
        check_layout(l, self.n())?;
        let cb = chunk_bytes(l.length, self.k());
        for &i in chunks {
            if l.holders.get(i as usize).is_none() {
                return Err(format!("segment {:#x}: no chunk {i}", l.segment_id));
            }
        }
        self.pace(cb * (self.k() + chunks.len()) as u64).await;
        let usable = Layout {
            holders: l
                .holders
                .iter()
                .map(|h| Holder {
                    usable: h.usable && !chunks.contains(&h.index),
                    ..h.clone()
                })
                .collect(),
            ..l.clone()
        };
        let lock = self.segment_lock(l.segment_id);
        // The gather and the stores of the rebuilt chunks (the bulk of the time: k chunks in,
        // one out per lost chunk, over links the segment's clients share) run without the
        // segment's lock, so its reads and writes go on meanwhile; the lock is taken at the end
        // to check that the stripe did not change (the view learned again equals the one the
        // chunks were rebuilt from) before the MDS hears the chunks are back. A stripe that
        // changed is rebuilt again; the last attempt holds the lock throughout, so a segment
        // updated without pause still recovers. (Held throughout, a 64 MiB segment's recovery
        // kept a read waiting 66-136 s on saturated links, past the client's idle deadline.)
        for attempt in 0..=RECOVERY_UNLOCKED_ATTEMPTS {
            let throughout = attempt == RECOVERY_UNLOCKED_ATTEMPTS;
            let mut held = Some(lock.clone().lock_owned().await);
            let mut rebuilt_from = SegState::default();
            if let Some(st) = held.as_mut() {
                self.check_lease(l.segment_id)
                    .map_err(|s| s.message().to_owned())?;
                if l.epoch >= st.epoch {
                    st.epoch = l.epoch;
                }
                rebuilt_from.epoch = st.epoch;
            }
            if !throughout {
                held = None;
            }
            // Always learn afresh: the rebuilt chunks must carry what the live holders have.
            self.learn_view(&usable, &mut rebuilt_from).await;
            let (shards, _) = match self
                .gather(&usable, &rebuilt_from, 0, cb, vec![None; self.n()])
                .await
            {
                Ok(g) => g,
                // Without the lock an update may land between the view and the chunks (a chunk
                // then reads as newer, or too few agree with the view): rebuild again.
                Err(s) if !throughout => {
                    tracing::info!(
                        segment = l.segment_id,
                        attempt,
                        "the stripe changed while its chunks were gathered ({}); rebuilding again",
                        s.message()
                    );
                    continue;
                }
                Err(s) => return Err(s.message().to_owned()),
            };
            // A rebuilt chunk carries the view's versions (those of the chunks it was decoded
            // from); the MDS hears the segment's newest version (it refuses rebuilds older than a
            // stale mark).
            let mut versions = Vec::with_capacity(chunks.len());
            for &i in chunks {
                let h = &l.holders[i as usize];
                let meta = self.meta_for(l, &rebuilt_from.view, i);
                versions.push(rebuilt_from.view.newest.max(meta.version));
                self.check_lease(l.segment_id)
                    .map_err(|s| s.message().to_owned())?;
                self.put_chunk(h, meta, Bytes::copy_from_slice(&shards[i as usize]))
                    .await
                    .map_err(|e| {
                        format!(
                            "segment {:#x} chunk {i} onto osd {}: {e}",
                            l.segment_id, h.osd_id
                        )
                    })?;
            }
            let mut st = match held {
                Some(st) => st,
                None => lock.clone().lock_owned().await,
            };
            self.check_lease(l.segment_id)
                .map_err(|s| s.message().to_owned())?;
            if throughout {
                *st = rebuilt_from;
            } else {
                st.forget();
                self.learn_view(&usable, &mut st).await;
                if st.view != rebuilt_from.view {
                    tracing::info!(
                        segment = l.segment_id,
                        attempt,
                        "the stripe changed during recovery; rebuilding again"
                    );
                    continue;
                }
            }
            let mut moved = 0;
            for (&i, version) in chunks.iter().zip(versions) {
                let h = &l.holders[i as usize];
                self.inner
                    .setup
                    .mds
                    .chunk_recovered(l.segment_id, i, h.osd_id, version, Some(self.osd_id()))
                    .await?;
                moved += cb;
                Metrics::add(&self.inner.metrics.recovery_chunks, 1);
                Metrics::add(&self.inner.metrics.recovery_bytes, cb);
            }
            return Ok(moved);
        }
        unreachable!("the last recovery attempt holds the lock throughout and returns")
    }

    /// Wait until `bytes` more fit the recovery rate limit.
    async fn pace(&self, bytes: u64) {
        let wait = {
            let mut r = self.inner.recovery.lock().await;
            if r.bytes_per_sec == 0 {
                return;
            }
            let now = tokio::time::Instant::now();
            let start = r.next_free.max(now);
            let cost = std::time::Duration::from_secs_f64(bytes as f64 / r.bytes_per_sec as f64);
            r.next_free = start + cost;
            start
        };
        tokio::time::sleep_until(wait).await;
    }

    /// Remove chunks (a DeleteTask).
    pub async fn delete_chunks(&self, segment: u64, chunks: &[u32]) -> Result<(), String> {
        for &i in chunks {
            self.blocking(move |s| s.delete(segment, i))
                .await
                .map_err(|e| e.to_string())?;
        }
        self.inner
            .segments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&segment);
        Ok(())
    }
}

fn newer(segment: u64, chunk: u32, e: &str) -> Status {
    Status::failed_precondition(format!(
        "segment {segment:#x} chunk {chunk} is newer than this primary knows ({e}); re-fetch the layout and retry"
    ))
}

/// Split a segment into k zero-padded data chunks of `cb` bytes and encode the m parity chunks.
/// A data chunk on its way to its holder while the segment is still arriving (see
/// [`Osd::write_frames`]). Every frame but the newest has been sent; the newest is held back so
/// the chunk cannot complete at the holder before [`Forward::finish`]. Dropped without `finish`,
/// the stream ends short and the holder stores nothing.
struct Forward {
    tx: Option<tokio::sync::mpsc::UnboundedSender<Vec<Bytes>>>,
    held: Option<Vec<Bytes>>,
    /// Bytes handed to the channel or held.
    sent: usize,
    task: tokio::task::JoinHandle<Result<(), Miss>>,
}

impl Forward {
    fn start(peer: OsdClient, meta: ChunkMeta) -> Forward {
        // Unbounded, so a slow holder never stalls the segment's arrival: what it queues is at
        // most the chunk (slices of frames the primary keeps for the encode anyway).
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            peer.put_chunk_groups(
                &meta,
                tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
            )
            .await
            .map_err(remote_miss)
        });
        Forward {
            tx: Some(tx),
            held: None,
            sent: 0,
            task,
        }
    }

    /// Queues `slices` (the chunk's next bytes, slices of a received frame: no copy; sent as one
    /// message): the frame before it goes out, so the newest frame is always held back.
    fn push(&mut self, slices: Vec<Bytes>) {
        let n: usize = slices.iter().map(Bytes::len).sum();
        if n == 0 {
            return;
        }
        self.sent += n;
        if let Some(full) = self.held.replace(slices) {
            // Fails only when the call already ended (an error it reports at finish).
            if let Some(tx) = &self.tx {
                if tx.send(full).is_err() {
                    self.tx = None;
                }
            }
        }
    }

    /// Sends the rest of the chunk (`whole` is all of it, zero padding included), closes the
    /// stream and waits for the holder's answer.
    async fn finish(mut self, whole: Bytes) -> Result<(), Miss> {
        for rest in api::slice_frames(whole.slice(self.sent..)) {
            self.push(vec![rest]);
        }
        if let (Some(last), Some(tx)) = (self.held.take(), self.tx.take()) {
            let _ = tx.send(last); // a failure shows in the task's result
        }
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) => Err(Miss::Other(format!("the forward of the chunk failed: {e}"))),
        }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        // Not finished: end the stream short (the holder refuses it) and stop the call.
        self.held = None;
        self.tx = None;
        self.task.abort();
    }
}

/// Hands the bytes of `frame` (the segment's bytes from `from` on, in the slices they arrived in)
/// that belong to forwarded data chunks to their forwards, as slices of the frame: one message per
/// chunk the frame touches.
fn forward_range(forwards: &mut [Option<Forward>], frame: &[Bytes], from: usize, cb: usize) {
    let mut at = from;
    let mut group: Vec<Bytes> = Vec::new();
    let mut group_chunk = from / cb;
    for slice in frame {
        let mut pos = 0;
        while pos < slice.len() {
            let j = at / cb;
            if j != group_chunk {
                if let Some(f) = forwards.get_mut(group_chunk).and_then(Option::as_mut) {
                    f.push(std::mem::take(&mut group));
                }
                group.clear();
                group_chunk = j;
            }
            let end = pos + ((j + 1) * cb - at).min(slice.len() - pos);
            group.push(slice.slice(pos..end));
            at += end - pos;
            pos = end;
        }
    }
    if let Some(f) = forwards.get_mut(group_chunk).and_then(Option::as_mut) {
        f.push(group);
    }
}

/// The n chunks of a segment: the k data chunks as slices of `data` (the segment zero-padded to
/// k chunks of `cb` bytes; no copy), then the m parity chunks computed from them.
fn encode_segment(code: &dyn ErasureCode, data: Bytes, cb: usize) -> Result<Vec<Bytes>, String> {
    let (k, m) = (code.k(), code.m());
    assert_eq!(data.len(), k * cb, "a segment padded to k whole chunks");
    let mut chunks: Vec<Bytes> = (0..k).map(|i| data.slice(i * cb..(i + 1) * cb)).collect();
    let mut parity = vec![vec![0u8; cb]; m];
    {
        let refs: Vec<&[u8]> = chunks.iter().map(|s| &s[..]).collect();
        let mut prefs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
        code.encode(&refs, &mut prefs).map_err(|e| e.to_string())?;
    }
    chunks.extend(parity.into_iter().map(Bytes::from));
    Ok(chunks)
}

/// Run futures concurrently, results in input order.
async fn futures_join_all<F: Future>(fs: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in fs {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

type FrameStream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

fn frames<T: Send + 'static>(
    first: Option<T>,
    data: impl Into<Bytes>,
    wrap: fn(Bytes) -> T,
) -> FrameStream<T> {
    let mut items: Vec<Result<T, Status>> = first.into_iter().map(Ok).collect();
    items.extend(
        api::slice_frames(data.into())
            .into_iter()
            .map(|c| Ok(wrap(c))),
    );
    Box::pin(tokio_stream::iter(items))
}

/// The layout of a request, decoded and checked.
fn request_layout(l: Option<&proto::Layout>) -> Result<Layout, Status> {
    l.map(layout_from_proto)
        .ok_or_else(|| Status::invalid_argument("request carries no layout"))
}

#[tonic::async_trait]
impl proto::osd_server::Osd for Osd {
    async fn write_segment(
        &self,
        req: Request<Streaming<proto::SegmentWrite>>,
    ) -> Result<Response<proto::WriteSegmentReply>, Status> {
        let messages = req.into_inner().map(|m| m.map(wire::Reply::from_message));
        self.write_segment_from(messages).await.map(Response::new)
    }

    type ReadSegmentStream = FrameStream<proto::DataFrame>;

    async fn read_segment(
        &self,
        req: Request<proto::ReadSegmentRequest>,
    ) -> Result<Response<Self::ReadSegmentStream>, Status> {
        self.timed("read_segment", async move {
            let r = req.into_inner();
            let l = request_layout(r.layout.as_ref())?;
            Ok(Response::new(
                self.read_stream(l, r.offset, r.length).await?,
            ))
        })
        .await
    }

    async fn read_plan(
        &self,
        req: Request<proto::ReadPlanRequest>,
    ) -> Result<Response<proto::ReadPlanReply>, Status> {
        self.timed("read_plan", async move {
            let r = req.into_inner();
            let l = request_layout(r.layout.as_ref())?;
            let plan = self.read_plan(l, r.offset, r.length).await?;
            Ok(Response::new(proto::ReadPlanReply {
                direct: plan.is_some(),
                versions: plan.unwrap_or_default(),
            }))
        })
        .await
    }

    async fn update_segment(
        &self,
        req: Request<proto::UpdateSegmentRequest>,
    ) -> Result<Response<proto::UpdateSegmentReply>, Status> {
        self.timed("update_segment", async move {
            let r = req.into_inner();
            let l = request_layout(r.layout.as_ref())?;
            Metrics::add(&self.inner.metrics.bytes_in, r.data.len() as u64);
            let ack = self.update(l, r.offset, Vec::from(r.data)).await?;
            Ok(Response::new(proto::UpdateSegmentReply {
                version: ack.version,
                stale: ack.stale,
            }))
        })
        .await
    }

    async fn put_chunk(
        &self,
        req: Request<Streaming<proto::ChunkWrite>>,
    ) -> Result<Response<proto::PutChunkReply>, Status> {
        let messages = req.into_inner().map(|m| m.map(wire::Reply::from_message));
        self.put_chunk_from(messages).await.map(Response::new)
    }

    type GetChunkStream = FrameStream<proto::ChunkFrame>;

    async fn get_chunk(
        &self,
        req: Request<proto::GetChunkRequest>,
    ) -> Result<Response<Self::GetChunkStream>, Status> {
        self.timed("get_chunk", async move {
            let r = req.into_inner();
            self.check_target(r.target_osd)?;
            let (seg, index, offset, length) = (r.segment_id, r.index, r.offset, r.length);
            let (meta, data) = self
                .blocking(move |s| {
                    let len = if length == 0 {
                        let meta = s.meta(seg, index)?.ok_or(ChunkStoreError::NotFound {
                            segment: seg,
                            index,
                        })?;
                        meta.chunk_bytes.saturating_sub(offset)
                    } else {
                        length
                    };
                    s.read(seg, index, offset, len)
                })
                .await
                .map_err(store_status)?;
            let header = proto::ChunkFrame {
                part: Some(proto::chunk_frame::Part::Header(meta_to_proto(&meta))),
            };
            Ok(Response::new(frames(Some(header), data, |d| {
                proto::ChunkFrame {
                    part: Some(proto::chunk_frame::Part::Data(d)),
                }
            })))
        })
        .await
    }

    async fn update_chunk(
        &self,
        req: Request<proto::UpdateChunkRequest>,
    ) -> Result<Response<proto::UpdateChunkReply>, Status> {
        self.timed("update_chunk", async move {
            let r = req.into_inner();
            self.check_target(r.target_osd)?;
            let parity = r.parity.iter().map(api::holder_from_proto).collect();
            let stale = self
                .update_chunk_local(
                    r.segment_id,
                    r.index,
                    r.offset,
                    Vec::from(r.data),
                    r.version,
                    r.expected_version,
                    parity,
                )
                .await?;
            Ok(Response::new(proto::UpdateChunkReply { stale }))
        })
        .await
    }

    async fn apply_delta(
        &self,
        req: Request<proto::ApplyDeltaRequest>,
    ) -> Result<Response<proto::ApplyDeltaReply>, Status> {
        self.timed("apply_delta", async move {
            let r = req.into_inner();
            self.check_target(r.target_osd)?;
            if (r.index as usize) < self.k() {
                return Err(Status::invalid_argument(format!(
                    "segment {:#x}: chunk {} is a data chunk; deltas go to parity chunks",
                    r.segment_id, r.index
                )));
            }
            if r.from_index as usize >= self.k() {
                return Err(Status::invalid_argument(format!(
                    "segment {:#x}: a delta from chunk {}, which is not a data chunk",
                    r.segment_id, r.from_index
                )));
            }
            let stamp = DeltaStamp {
                from: r.from_index,
                prior: r.prior_version,
                version: r.version,
            };
            self.apply_delta_local(r.segment_id, r.index, r.offset, Vec::from(r.delta), stamp)
                .await
                .map_err(store_status)?;
            Ok(Response::new(proto::ApplyDeltaReply {}))
        })
        .await
    }

    async fn chunk_version(
        &self,
        req: Request<proto::ChunkVersionRequest>,
    ) -> Result<Response<proto::ChunkVersionReply>, Status> {
        self.timed("chunk_version", async move {
            let r = req.into_inner();
            self.check_target(r.target_osd)?;
            let (seg, index) = (r.segment_id, r.index);
            let meta = self
                .blocking(move |s| s.meta(seg, index))
                .await
                .map_err(store_status)?;
            Ok(Response::new(match meta {
                Some(m) => proto::ChunkVersionReply {
                    present: true,
                    version: m.version,
                    applied: m.applied,
                },
                None => proto::ChunkVersionReply::default(),
            }))
        })
        .await
    }

    async fn delete_chunk(
        &self,
        req: Request<proto::DeleteChunkRequest>,
    ) -> Result<Response<proto::DeleteChunkReply>, Status> {
        self.timed("delete_chunk", async move {
            let r = req.into_inner();
            self.check_target(r.target_osd)?;
            let (seg, index) = (r.segment_id, r.index);
            self.blocking(move |s| s.delete(seg, index))
                .await
                .map_err(store_status)?;
            Ok(Response::new(proto::DeleteChunkReply {}))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_split_at_chunk_boundaries() {
        let data: Vec<u8> = (0..25).collect();
        let subs = split_update(5, &data, 10);
        let got: Vec<(usize, u64, usize)> = subs
            .iter()
            .map(|s| (s.index, s.offset, s.data.len()))
            .collect();
        assert_eq!(got, vec![(0, 5, 5), (1, 0, 10), (2, 0, 10)]);
        assert_eq!(subs[1].data[0], 5);
        let subs = split_update(29, &data[..1], 10);
        assert_eq!((subs[0].index, subs[0].offset), (2, 9));
    }
}
