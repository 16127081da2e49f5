//! The OSD ([`Osd`]): its identity, code and chunk store, its peers, the segments it is primary
//! of, and what every operation shares (the primary lease, the request checks, the chunk store on
//! a blocking thread). The operations themselves live one per module, each as `impl Osd` over the
//! domain error [`OsdError`]:
//!
//! - `write.rs`: WriteSegment at the primary (encode and distribute, cut-through);
//! - `read.rs` and `pipeline.rs`: ReadSegment and ReadPlan at the primary (the pipelined read);
//! - `degraded.rs`: the ordinary and degraded read (gather k chunks, decode, repair);
//! - `update/`: UpdateSegment at the primary, and UpdateChunk and ApplyDelta at the holders, one
//!   file per update scheme behind [`crate::update::Scheme`] (`fo.rs`, `fl.rs`, `codfs_pl.rs`, `plr.rs`);
//! - `recover.rs`: rebuilding lost chunks (a recovery task);
//! - `delete.rs`: DeleteChunk and delete tasks;
//! - `chunk.rs`: PutChunk, GetChunk and ChunkVersion at a holder;
//! - `holder.rs`: one holder's chunk as the primary reaches it, local or remote;
//! - `segment.rs`: the primary's per-segment lock and view.
//!
//! The gRPC service (`handlers.rs`, `server.rs`) only decodes requests, calls these and maps
//! [`OsdError`] to status codes.
//!
//! All requests of one segment are serialized at its primary by a per-segment async lock; the
//! primary keeps the segment's consistent view (`view.rs`: the version of each data chunk, which
//! every parity chunk read beside it must include), learned from the usable holders (ChunkVersion)
//! when it does not know it (after a restart, a promotion or a refusal).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ecstack_codes::ErasureCode;
use ecstack_mds_proto::OsdLoad;
use ecstack_rpc::Security;

use crate::admission::{Admission, AdmissionConfig};
use crate::blockio::BlockIo;

use crate::api::{Holder, Layout, OsdClient};
use crate::chunk_store::{ChunkStore, ChunkStoreError};
use crate::error::OsdError;
use crate::holder::Miss;
use crate::metrics::Metrics;
use crate::recover::RateLimit;
use crate::segment::SegState;

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
    /// A chunk was rebuilt onto `osd_id` at `version` by `reporter` (this OSD, the primary); the
    /// segment's layout epoch with the chunk healthy.
    fn chunk_recovered(
        &self,
        segment: u64,
        chunk: u32,
        osd_id: u32,
        version: u64,
        reporter: Option<u32>,
    ) -> BoxFuture<'_, Result<u64, String>>;
    /// A segment's layout epoch at the MDS now (asked once per segment by a primary's first
    /// update: [`crate::segment::SegState::epoch_checked`]).
    fn segment_epoch(&self, segment: u64) -> BoxFuture<'_, Result<u64, String>>;
}

/// An [`MdsLink`] that agrees to everything: an OSD without an MDS (tests, and benchmarks of the
/// block calls, which never reach the MDS).
#[doc(hidden)]
pub struct NoMds;

impl MdsLink for NoMds {
    fn mark_stale<'a>(&'a self, _: u64, _: &'a [u32], _: u64) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
    fn chunk_recovered(
        &self,
        _: u64,
        _: u32,
        _: u32,
        _: u64,
        _: Option<u32>,
    ) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async { Ok(0) })
    }
    fn segment_epoch(&self, _: u64) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async { Ok(0) })
    }
}

/// The PLR reserve after each new parity chunk unless the config says otherwise (`[update.reserve]
/// size_bytes`).
pub use ecstack_rpc::config::DEFAULT_RESERVE_BYTES;

/// The erasure code and the identity an OSD works with.
#[derive(Clone)]
pub struct OsdSetup {
    pub osd_id: u32,
    pub code: Arc<dyn ErasureCode>,
    pub store: Arc<dyn ChunkStore>,
    pub security: Security,
    pub mds: Arc<dyn MdsLink>,
}

/// The OSD: its chunk store, its peers, the segments it is primary of.
#[derive(Clone)]
pub struct Osd {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) setup: OsdSetup,
    /// Bytes reserved after each new PLR parity chunk ([`Osd::set_initial_reserve`]).
    pub(crate) initial_reserve: AtomicU64,
    /// PLR parities due for a merge off the update path ([`Osd::merge_ahead`]).
    pub(crate) merge_ahead: Arc<crate::update::plr::MergeAhead>,
    pub(crate) peers: Mutex<HashMap<String, OsdClient>>,
    pub(crate) segments: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<SegState>>>>,
    pub(crate) recovery: tokio::sync::Mutex<RateLimit>,
    pub(crate) metrics: Metrics,
    pub(crate) lease: crate::lease::Lease,
    /// [`ecstack_rpc::limits::PEER_FETCH_IDLE`] in milliseconds (tests shorten it).
    pub(crate) peer_fetch_idle_ms: AtomicU64,
    /// Per holder address, the pieces of pipelined reads on their way from it
    /// ([`crate::pipeline::READ_PIECES_PER_PEER`]).
    pub(crate) piece_slots: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
    /// Robust objects' blocks: the block I/O queue (started on first use, with the threads
    /// [`Osd::configure_blocks`] set), admission control and its settings.
    pub(crate) block_io: OnceLock<Arc<BlockIo>>,
    pub(crate) block_config: Mutex<BlockConfig>,
    pub(crate) admission: Arc<Admission>,
    /// Chunk-store calls on blocking threads now (the heartbeat's queue depth counts them).
    pub(crate) chunk_jobs: AtomicU32,
}

/// How an OSD serves robust objects' blocks (`[osd]` in `cluster.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockConfig {
    /// Worker threads of the block I/O queue.
    pub threads: usize,
    pub admission: AdmissionConfig,
}

impl BlockConfig {
    /// The settings of `cluster.toml`'s `[osd]`.
    pub fn from_config(c: &ecstack_rpc::OsdConfig) -> BlockConfig {
        BlockConfig {
            threads: c.block_io_threads as usize,
            admission: AdmissionConfig {
                enabled: c.admission,
                floor_bytes_per_s: c.admission_floor_bytes_per_s,
            },
        }
    }
}

/// `[osd] block_io_threads` by default.
pub const DEFAULT_BLOCK_IO_THREADS: usize = ecstack_rpc::config::DEFAULT_BLOCK_IO_THREADS as usize;

impl Default for BlockConfig {
    fn default() -> Self {
        BlockConfig {
            threads: DEFAULT_BLOCK_IO_THREADS,
            admission: AdmissionConfig::default(),
        }
    }
}

impl Osd {
    pub fn new(setup: OsdSetup, recovery_bytes_per_sec: u64) -> Osd {
        Osd {
            inner: Arc::new(Inner {
                setup,
                initial_reserve: AtomicU64::new(DEFAULT_RESERVE_BYTES),
                merge_ahead: Arc::default(),
                peers: Mutex::new(HashMap::new()),
                segments: Mutex::new(HashMap::new()),
                recovery: tokio::sync::Mutex::new(RateLimit::new(recovery_bytes_per_sec)),
                metrics: Metrics::default(),
                lease: crate::lease::Lease::default(),
                peer_fetch_idle_ms: AtomicU64::new(
                    ecstack_rpc::limits::PEER_FETCH_IDLE.as_millis() as u64,
                ),
                piece_slots: Mutex::new(HashMap::new()),
                block_io: OnceLock::new(),
                block_config: Mutex::new(BlockConfig::default()),
                admission: Arc::default(),
                chunk_jobs: AtomicU32::new(0),
            }),
        }
    }

    /// Sets how this OSD serves blocks; the queue's threads count only before its first use.
    pub fn configure_blocks(&self, config: BlockConfig) {
        *self
            .inner
            .block_config
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = config;
    }

    pub(crate) fn admission_config(&self) -> AdmissionConfig {
        self.inner
            .block_config
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admission
    }

    /// The block I/O queue (started now if it was not).
    pub fn block_io(&self) -> Arc<BlockIo> {
        self.inner
            .block_io
            .get_or_init(|| {
                let threads = self
                    .inner
                    .block_config
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .threads;
                Arc::new(BlockIo::new(
                    self.inner.setup.store.clone(),
                    threads,
                    self.inner.metrics.blocks.clone(),
                ))
            })
            .clone()
    }

    /// What the heartbeats report of this OSD's store and load ([`OsdLoad`]).
    pub fn load(&self) -> OsdLoad {
        let io = self.block_io();
        let (read, write) = io.rates();
        OsdLoad {
            read_bytes_per_s: read.unwrap_or(0.0) as u64,
            write_bytes_per_s: write.unwrap_or(0.0) as u64,
            queue_depth: io.depth() + self.inner.chunk_jobs.load(Ordering::Relaxed),
            robust_blocks: self.store().usage().blocks,
        }
    }

    /// How long a chunk read from a peer may wait for its reply's next part before the bytes are
    /// read another way (default [`ecstack_rpc::limits::PEER_FETCH_IDLE`]).
    pub fn set_peer_fetch_idle(&self, idle: Duration) {
        self.inner
            .peer_fetch_idle_ms
            .store(idle.as_millis().max(1) as u64, Ordering::Relaxed);
    }

    pub(crate) fn peer_fetch_idle(&self) -> Duration {
        Duration::from_millis(self.inner.peer_fetch_idle_ms.load(Ordering::Relaxed))
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

    /// Bytes reserved after each PLR parity chunk this OSD writes as a segment's primary (a new
    /// segment's, or a rebuilt chunk's): `[update.reserve] size_bytes` in `cluster.toml`.
    pub fn initial_reserve(&self) -> u64 {
        self.inner.initial_reserve.load(Ordering::Relaxed)
    }

    pub fn set_initial_reserve(&self, bytes: u64) {
        self.inner.initial_reserve.store(bytes, Ordering::Relaxed);
    }

    /// The queue of PLR parities due for a merge ahead (`[update.reserve] merge_ahead`: its
    /// fraction is set here, the Monitor Module drains it).
    pub fn merge_ahead(&self) -> &Arc<crate::update::plr::MergeAhead> {
        &self.inner.merge_ahead
    }

    /// The primary lease the daemon's heartbeats renew (`lease.rs`).
    pub fn lease(&self) -> &crate::lease::Lease {
        &self.inner.lease
    }

    /// [`OsdError::NoLease`] unless this OSD holds its primary lease: before each batch of chunk
    /// mutations it sends (a request's first check waits out a short lapse: [`Osd::await_lease`]).
    pub(crate) fn check_lease(&self, segment: u64) -> Result<(), OsdError> {
        self.inner
            .lease
            .check()
            .map_err(|ago| self.no_lease(segment, ago))
    }

    /// [`Osd::check_lease`] at the start of a request: a lapsed lease is given
    /// [`crate::lease::Lease::grace`] to be renewed (a heartbeat reply on its way) before the
    /// request is refused.
    pub(crate) async fn await_lease(&self, segment: u64) -> Result<(), OsdError> {
        self.inner
            .lease
            .wait()
            .await
            .map_err(|ago| self.no_lease(segment, ago))
    }

    fn no_lease(&self, segment: u64, ago: Duration) -> OsdError {
        Metrics::add(&self.inner.metrics.lease_refusals, 1);
        OsdError::NoLease(format!(
            "segment {segment:#x}: osd {} has no primary lease (it ended {} ms ago: its heartbeats are late, the MDS may have promoted another primary)",
            self.osd_id(),
            ago.as_millis()
        ))
    }

    /// This OSD's metrics in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        let u = self.store().usage();
        let load = self.load();
        self.inner.metrics.render(
            self.osd_id(),
            u.chunks,
            u.bytes,
            &crate::metrics::BlockGauges {
                robust_blocks: u.blocks,
                queue_depth: load.queue_depth as u64,
                read_bytes_per_s: load.read_bytes_per_s,
                write_bytes_per_s: load.write_bytes_per_s,
                streams: self.inner.admission.streams() as u64,
            },
        )
    }

    pub(crate) fn code(&self) -> &Arc<dyn ErasureCode> {
        &self.inner.setup.code
    }

    pub(crate) fn k(&self) -> usize {
        self.code().k()
    }

    pub(crate) fn n(&self) -> usize {
        self.code().n()
    }

    /// Bytes per chunk of a segment of `length` bytes ([`chunk_bytes`] under this OSD's code: a
    /// multiple of its `chunk_align_bytes`).
    pub(crate) fn chunk_bytes(&self, length: u64) -> u64 {
        chunk_bytes(length, self.k(), self.code().chunk_align_bytes() as u64)
    }

    /// A client of holder `h`'s OSD (connections cached by address), its calls meant for that
    /// OSD's id only.
    pub(crate) fn peer(&self, h: &Holder) -> Result<OsdClient, Miss> {
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
    pub(crate) fn check_target(&self, target: Option<u32>) -> Result<(), OsdError> {
        if let Some(target) = target.filter(|&t| t != self.osd_id()) {
            return Err(OsdError::StaleLayout(format!(
                "this is osd {}, not osd {target}: the caller's address for osd {target} is out of date",
                self.osd_id()
            )));
        }
        Ok(())
    }

    pub(crate) fn is_local(&self, h: &Holder) -> bool {
        h.osd_id == self.osd_id()
    }

    /// Runs `f` on the chunk store on a blocking thread.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn ChunkStore) -> Result<T, ChunkStoreError> + Send + 'static,
    ) -> Result<T, ChunkStoreError> {
        let store = self.inner.setup.store.clone();
        /// Counts the call while it runs (a dropped caller included).
        struct Running<'a>(&'a AtomicU32);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.inner.chunk_jobs.fetch_add(1, Ordering::Relaxed);
        let _running = Running(&self.inner.chunk_jobs);
        match tokio::task::spawn_blocking(move || f(&*store)).await {
            Ok(r) => r,
            Err(e) => Err(ChunkStoreError::Invalid {
                segment: 0,
                index: 0,
                message: format!("chunk store task failed: {e}"),
            }),
        }
    }
}

pub use ecstack_osd_proto::chunk_bytes;

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
pub(crate) fn check_enough(l: &Layout, k: usize, what: &str) -> Result<(), OsdError> {
    let usable = l.holders.iter().filter(|h| h.usable).count();
    if usable < k + 1 {
        return Err(OsdError::NotDurable(format!(
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

/// The refusal of a chunk newer than the primary's view: its view is out of date.
pub(crate) fn newer(segment: u64, chunk: u32, e: &str) -> OsdError {
    OsdError::StaleLayout(format!(
        "segment {segment:#x} chunk {chunk} is newer than this primary knows ({e}); re-fetch the layout and retry"
    ))
}

/// Run futures concurrently, results in input order.
pub(crate) async fn futures_join_all<F: Future>(fs: impl IntoIterator<Item = F>) -> Vec<F::Output> {
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
