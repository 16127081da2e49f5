//! The OSD process: open the chunk store, bind the service, register with the MDS (the address it
//! actually bound), heartbeat every `heartbeat_ms` (with the store's measured load, after a short
//! probe at start) and run the tasks the replies carry (recover segments as their primary, delete
//! chunks, delete robust objects' blocks); send the MDS its inventory (what the store holds, in
//! pages) after registering and every `[osd] inventory_period_ms`, and at once when a heartbeat
//! reply asks; register again when the MDS no longer knows it (metadata restored from a backup
//! older than the OSD); run the Monitor Module (GC of logs, Algorithm 1) and compact robust
//! objects' block files that are mostly dead slots (every [`COMPACT_EVERY`]).

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ecstack_codes::{new_code, CodeKind};
use ecstack_mds_proto::{
    Heartbeat, HeldSegment, InventoryPage, MdsClient, MdsError, OsdRegistration, OsdTask,
    INVENTORY_PAGE_ENTRIES,
};
use ecstack_rpc::Security;

use crate::api::Layout;
use crate::blockio::PROBE_OBJECT;
use crate::chunk_store::{ChunkStore, FileStore, FileStoreOptions};
use crate::device_store::{DeviceStore, DeviceStoreOptions};
use crate::monitor::{Monitor, MonitorOptions};
use crate::service::{BlockConfig, BoxFuture, MdsLink, Osd, OsdSetup};

/// How many segments one OSD recovers at once (the byte rate is limited separately).
pub const RECOVERY_PARALLELISM: usize = 4;
/// How long an OSD keeps trying to register with an MDS that does not answer yet.
pub const REGISTER_PATIENCE: Duration = Duration::from_secs(60);

/// One registration call, given up (as `Unavailable`, which moves the client on to the next
/// listed MDS) after a metadata call's deadline: an MDS that is stopped, not dead, accepts the
/// connection and then holds its TLS handshake, and with it the call, until it runs again, beyond
/// the channel's request timeout (an OSD started while the active MDS was SIGSTOPped never
/// registered with the standby that had taken over).
async fn register_once(
    mds: &MdsClient,
    reg: &OsdRegistration,
) -> Result<ecstack_mds_proto::Registered, MdsError> {
    let deadline = ecstack_rpc::limits::METADATA_RPC_TIMEOUT;
    let addr = mds.current_addr().to_owned();
    tokio::time::timeout(deadline, mds.register_osd(reg))
        .await
        .unwrap_or_else(|_| {
            Err(MdsError::Unavailable(format!(
                "the MDS at {addr} did not answer within {deadline:?}"
            )))
        })
}

impl MdsLink for MdsClient {
    fn mark_stale<'a>(
        &'a self,
        segment: u64,
        chunks: &'a [u32],
        version: u64,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            MdsClient::mark_stale(self, segment, chunks, version)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn chunk_recovered(
        &self,
        segment: u64,
        chunk: u32,
        osd_id: u32,
        version: u64,
        reporter: Option<u32>,
    ) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            MdsClient::chunk_recovered(self, segment, chunk, osd_id, version, reporter)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn segment_epoch(&self, segment: u64) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            MdsClient::get_segment(self, segment)
                .await
                .map(|l| l.epoch)
                .map_err(|e| e.to_string())
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Store(#[from] crate::chunk_store::ChunkStoreError),
    #[error("cannot bind the OSD service to {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("MDS at {addr}: {message}")]
    Mds { addr: String, message: String },
    #[error("the cluster's code {code} k={k} m={m}: {message}")]
    Code {
        code: String,
        k: u32,
        m: u32,
        message: String,
    },
    #[error("OSD service: {0}")]
    Serve(String),
}

/// What an OSD process needs.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// `osd-N`: the name the MDS knows it by (kept across restarts).
    pub name: String,
    /// Where to bind (`127.0.0.1:0`: any free port, registered as bound).
    pub addr: String,
    pub labels: BTreeMap<String, String>,
    /// The chunk store's directory ([`FileStore`]), unless `store_device` is given.
    pub store: PathBuf,
    pub store_options: FileStoreOptions,
    /// The chunk store on one block device instead ([`DeviceStore`], `--store-device SPEC`).
    pub store_device: Option<StoreDevice>,
    /// The MDS's address, or a comma-separated list of an active MDS and its standbys (tried in
    /// turn, `MdsClient::connect`).
    pub mds_addr: String,
    pub security: Security,
    pub recovery_bytes_per_sec: u64,
    /// `cluster.toml`'s `[update]`: PLR's reserved space (`reserve.size_bytes` for a new PLR
    /// parity chunk) and Algorithm 1's parameters and schedule for this OSD's reserve task.
    pub update: ecstack_rpc::UpdateConfig,
    /// How robust objects' blocks are served: the block I/O queue's threads, admission control
    /// (`[osd]` in `cluster.toml`, `ecstack osd --admission …`).
    pub blocks: BlockConfig,
    /// How often the OSD sends the MDS its inventory (`[osd] inventory_period_ms`).
    pub inventory_period: Duration,
}

/// A [`DeviceStore`] backend: the device spec (`ecstack_device::spec`) and how to open it.
#[derive(Debug, Clone)]
pub struct StoreDevice {
    pub spec: String,
    pub options: DeviceStoreOptions,
}

/// Opens the configured chunk store; its capacity in bytes (the device's, or the file system's).
fn open_store(cfg: &DaemonConfig) -> Result<(Arc<dyn ChunkStore>, u64), DaemonError> {
    Ok(match &cfg.store_device {
        Some(d) => {
            let store = DeviceStore::open_spec(&d.spec, d.options)?;
            let bytes = store.capacity();
            (Arc::new(store), bytes)
        }
        None => (
            Arc::new(FileStore::open_with(&cfg.store, cfg.store_options)?),
            capacity(&cfg.store),
        ),
    })
}

/// A running OSD.
pub struct Daemon {
    pub osd: Osd,
    pub osd_id: u32,
    pub addr: SocketAddr,
    mds: MdsClient,
    heartbeat: Duration,
    /// How long a heartbeat waits for its reply (the MDS's `down_after_ms`: a later answer could
    /// not renew the lease anyway).
    heartbeat_patience: Duration,
    listener: tokio::net::TcpListener,
    security: Security,
    monitor: Arc<Monitor>,
    /// What it registered with (sent again, with a fresh largest id, when the MDS forgets it).
    registration: OsdRegistration,
    inventory_period: Duration,
}

/// Bytes the filesystem of `path` can hold in total.
fn capacity(path: &Path) -> u64 {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return 0;
    };
    // SAFETY: statvfs writes into the zeroed struct we pass; the path is NUL-terminated.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut s) != 0 {
            return 0;
        }
        s.f_blocks as u64 * s.f_frsize as u64
    }
}

impl Daemon {
    /// Open the store, bind, register with the MDS (retrying while it does not answer).
    pub async fn start(cfg: &DaemonConfig) -> Result<Daemon, DaemonError> {
        let (store, capacity_bytes) = open_store(cfg)?;
        let mut monitor_options = MonitorOptions::from_config(&cfg.update.reserve);
        if let Some(ms) = cfg.update.gc_period_ms {
            monitor_options.gc_every = Duration::from_millis(ms.max(1));
        }
        let monitor = Arc::new(Monitor::new(store.clone(), monitor_options));
        let listener = tokio::net::TcpListener::bind(&cfg.addr)
            .await
            .map_err(|source| DaemonError::Bind {
                addr: cfg.addr.clone(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| DaemonError::Bind {
            addr: cfg.addr.clone(),
            source,
        })?;
        let mds_err = |message: String| DaemonError::Mds {
            addr: cfg.mds_addr.clone(),
            message,
        };
        let mds =
            MdsClient::connect(&cfg.mds_addr, &cfg.security).map_err(|e| mds_err(e.to_string()))?;
        let reg = OsdRegistration {
            name: cfg.name.clone(),
            addr: addr.to_string(),
            labels: cfg.labels.clone(),
            capacity_bytes,
            used_bytes: store.usage().bytes,
            max_segment_id: Listing::of(store.as_ref())?.max_id(),
        };
        let deadline = tokio::time::Instant::now() + REGISTER_PATIENCE;
        let mut wait = Duration::from_millis(100);
        let (registered, sent) = loop {
            let sent = std::time::Instant::now();
            match register_once(&mds, &reg).await {
                Ok(r) => break (r, sent),
                Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                    tracing::info!("MDS not answering yet ({e}); retrying in {wait:?}");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
                Err(e) => return Err(mds_err(format!("registration failed: {e}"))),
            }
        };
        let p = &registered.params;
        let code_err = |message: String| DaemonError::Code {
            code: p.code.clone(),
            k: p.k,
            m: p.m,
            message,
        };
        let kind = CodeKind::parse(&p.code).map_err(|e| code_err(e.to_string()))?;
        let code =
            new_code(kind, p.k as usize, p.m as usize).map_err(|e| code_err(e.to_string()))?;
        let osd = Osd::new(
            OsdSetup {
                osd_id: registered.osd_id,
                code: code.into(),
                store,
                security: cfg.security.clone(),
                mds: Arc::new(mds.clone()),
            },
            cfg.recovery_bytes_per_sec,
        );
        osd.set_initial_reserve(cfg.update.reserve.size_bytes);
        osd.merge_ahead()
            .set_fraction(cfg.update.reserve.merge_ahead);
        osd.configure_blocks(cfg.blocks);
        // The registration counts as the first heartbeat.
        osd.lease()
            .enable(Duration::from_millis(u64::from(p.down_after_ms)), sent);
        tracing::info!(
            name = %cfg.name,
            osd_id = registered.osd_id,
            %addr,
            "OSD registered with the MDS at {}",
            cfg.mds_addr
        );
        Ok(Daemon {
            osd,
            osd_id: registered.osd_id,
            addr,
            mds,
            heartbeat: Duration::from_millis(u64::from(p.heartbeat_ms.max(1))),
            heartbeat_patience: Duration::from_millis(u64::from(p.down_after_ms))
                .max(Duration::from_millis(4 * u64::from(p.heartbeat_ms.max(1)))),
            listener,
            security: cfg.security.clone(),
            monitor,
            registration: reg,
            inventory_period: cfg.inventory_period.max(Duration::from_millis(1)),
        })
    }

    /// Serve and heartbeat until `shutdown` completes.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), DaemonError> {
        let server = self
            .security
            .server()
            .map_err(|e| DaemonError::Serve(e.to_string()))?
            .add_service(
                self.security
                    .guard(&crate::roles::OSD_ROLES, self.osd.grpc()),
            )
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(self.listener),
                shutdown,
            );
        // A figure of the store's throughput before any traffic (admission control and the
        // MDS's choice of OSDs for robust files use it).
        let probe = {
            let osd = self.osd.clone();
            async move {
                let started = std::time::Instant::now();
                match osd.block_io().probe().await {
                    Ok(()) => {
                        let l = osd.load();
                        tracing::info!(
                            read_mb_s = l.read_bytes_per_s as f64 / 1e6,
                            write_mb_s = l.write_bytes_per_s as f64 / 1e6,
                            ms = started.elapsed().as_millis() as u64,
                            "store probed"
                        );
                    }
                    Err(e) => tracing::warn!("store probe failed: {e}"),
                }
                std::future::pending::<()>().await
            }
        };
        let link = Link {
            osd: self.osd.clone(),
            mds: self.mds.clone(),
            osd_id: self.osd_id,
            inventory_wanted: Arc::default(),
            forgotten: Arc::default(),
        };
        let beats = heartbeat_loop(link.clone(), self.heartbeat, self.heartbeat_patience);
        let inventories = inventory_loop(link.clone(), self.inventory_period);
        let reregister = reregister_loop(link, self.registration);
        tokio::select! {
            r = server => r.map_err(|e| DaemonError::Serve(e.to_string())),
            () = beats => Ok(()),
            () = inventories => Ok(()),
            e = reregister => Err(e),
            () = crate::monitor::run(self.monitor, self.osd.merge_ahead().clone()) => Ok(()),
            () = probe => Ok(()),
            () = compaction_loop(self.osd.clone()) => Ok(()),
        }
    }
}

/// How often the OSD looks for block files to compact.
pub const COMPACT_EVERY: Duration = Duration::from_secs(5);

/// Compacts robust objects' block files that want it, every [`COMPACT_EVERY`], off the write
/// path: deletions only append deletion records, and the block I/O queue serves the
/// compactions after every stream's jobs.
async fn compaction_loop(osd: Osd) {
    let mut tick = tokio::time::interval(COMPACT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        osd.compact_blocks_pass().await;
    }
}

/// What the OSD's loops with the MDS share.
#[derive(Clone)]
struct Link {
    osd: Osd,
    mds: MdsClient,
    osd_id: u32,
    /// A heartbeat reply asked for an inventory now.
    inventory_wanted: Arc<tokio::sync::Notify>,
    /// The MDS answered that it does not know this OSD: register again.
    forgotten: Arc<tokio::sync::Notify>,
}

impl Link {
    /// Notes an MDS error of a call made as this OSD: an MDS that no longer knows the OSD (its
    /// metadata restored from a backup older than the OSD's registration) gets a registration.
    fn note_error(&self, e: &MdsError) {
        if matches!(e, MdsError::NotFound(m) if m.starts_with("unknown OSD id")) {
            self.forgotten.notify_one();
        }
    }
}

/// What the store holds: chunks by segment (ids ascending) and robust objects' block files.
struct Listing {
    segments: Vec<HeldSegment>,
    objects: Vec<u64>,
}

impl Listing {
    fn of(store: &dyn ChunkStore) -> Result<Listing, crate::chunk_store::ChunkStoreError> {
        let mut segments: Vec<HeldSegment> = Vec::new();
        for (segment_id, chunk) in store.list()? {
            match segments.last_mut() {
                Some(s) if s.segment_id == segment_id => s.chunks.push(chunk),
                _ => segments.push(HeldSegment {
                    segment_id,
                    chunks: vec![chunk],
                }),
            }
        }
        let mut objects: Vec<u64> = store
            .objects()?
            .into_iter()
            .filter(|&o| o != PROBE_OBJECT)
            .collect();
        objects.sort_unstable();
        Ok(Listing { segments, objects })
    }

    /// The largest segment or object id held (robust objects' ids come from the same counter as
    /// segments'); 0 for none.
    fn max_id(&self) -> u64 {
        let s = self.segments.last().map_or(0, |s| s.segment_id);
        s.max(self.objects.last().copied().unwrap_or(0))
    }

    /// The pages of one inventory pass: at most [`INVENTORY_PAGE_ENTRIES`] chunks and objects
    /// each (a segment's chunks stay on one page), always at least one.
    fn pages(self, osd_id: u32, pass: u64) -> Vec<InventoryPage> {
        let max_segment_id = self.max_id();
        let mut pages = vec![InventoryPage {
            osd_id,
            pass,
            max_segment_id,
            ..InventoryPage::default()
        }];
        let mut entries = 0usize;
        let mut room = |pages: &mut Vec<InventoryPage>, n: usize| {
            if entries + n > INVENTORY_PAGE_ENTRIES && entries > 0 {
                let page = pages.len() as u32;
                pages.push(InventoryPage {
                    osd_id,
                    pass,
                    page,
                    ..InventoryPage::default()
                });
                entries = 0;
            }
            entries += n;
        };
        for s in self.segments {
            room(&mut pages, s.chunks.len());
            pages.last_mut().expect("one page").segments.push(s);
        }
        for o in self.objects {
            room(&mut pages, 1);
            pages.last_mut().expect("one page").objects.push(o);
        }
        pages.last_mut().expect("one page").last = true;
        pages
    }
}

/// Attempts of one inventory page that meets an unavailable MDS.
const INVENTORY_PAGE_ATTEMPTS: u32 = 5;

/// One inventory pass: the store listed now, sent page by page.
async fn inventory_pass(link: &Link, pass: u64) -> Result<(), String> {
    let store = link.osd.store().clone();
    let listing = tokio::task::spawn_blocking(move || Listing::of(store.as_ref()))
        .await
        .map_err(|e| format!("listing the store: {e}"))?
        .map_err(|e| format!("listing the store: {e}"))?;
    let pages = listing.pages(link.osd_id, pass);
    let count = pages.len();
    for page in pages {
        let n = page.page;
        let mut wait = Duration::from_millis(200);
        let mut attempt = 1;
        let dropped = loop {
            match link.mds.report_inventory(page.clone()).await {
                Ok(dropped) => break dropped,
                Err(e) if e.is_retryable() && attempt < INVENTORY_PAGE_ATTEMPTS => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(5));
                    attempt += 1;
                }
                Err(e) => {
                    link.note_error(&e);
                    return Err(format!("page {n} of {count}: {e}"));
                }
            }
        };
        if dropped {
            return Err(format!(
                "the MDS dropped the pass at page {n} of {count} (it restarted since)"
            ));
        }
    }
    tracing::debug!(pass, pages = count, "inventory sent");
    Ok(())
}

/// Inventories: one right after registration, then every `period`, and one at once when a
/// heartbeat reply asks (a pass asked for while one runs follows it).
async fn inventory_loop(link: Link, period: Duration) {
    let mut pass = 0u64;
    loop {
        pass += 1;
        if let Err(e) = inventory_pass(&link, pass).await {
            tracing::warn!(pass, "inventory not sent: {e}");
        }
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            () = link.inventory_wanted.notified() => {}
        }
    }
}

/// Registers again whenever the MDS answers that it does not know this OSD (its metadata was
/// restored from a backup older than the OSD): under its name it gets its id back (`osd-N` is id
/// N), and the registration carries the largest id it holds. Returns only if the MDS gives it
/// another id, which a running OSD cannot take (restart it).
async fn reregister_loop(link: Link, mut reg: OsdRegistration) -> DaemonError {
    loop {
        link.forgotten.notified().await;
        let store = link.osd.store().clone();
        let listed = tokio::task::spawn_blocking(move || Listing::of(store.as_ref())).await;
        match listed {
            Ok(Ok(l)) => reg.max_segment_id = l.max_id(),
            Ok(Err(e)) => tracing::warn!("listing the store to register again: {e}"),
            Err(e) => tracing::warn!("listing the store to register again: {e}"),
        }
        reg.used_bytes = link.osd.store().usage().bytes;
        let sent = std::time::Instant::now();
        match register_once(&link.mds, &reg).await {
            Ok(r) if r.osd_id == link.osd_id => {
                link.osd.lease().renew(sent);
                tracing::warn!(
                    osd_id = r.osd_id,
                    "the MDS did not know this OSD (restored metadata?): registered again"
                );
                link.inventory_wanted.notify_one();
            }
            Ok(r) => {
                return DaemonError::Mds {
                    addr: link.mds.current_addr().to_owned(),
                    message: format!(
                        "registered again after the MDS forgot this OSD, it got id {} instead of {}; restart the OSD",
                        r.osd_id, link.osd_id
                    ),
                }
            }
            Err(e) => tracing::warn!("registering again failed: {e}"),
        }
    }
}

/// Heartbeats one OSD keeps on their way to the MDS at once. Beats leave on schedule whether
/// or not earlier ones were answered: each reply renews the primary lease from its own sending, so
/// an MDS that answers late but answers keeps the lease alive (a beat sent only after the previous
/// reply let one slow answer, seconds behind a busy disk, lapse the lease and refuse clients).
pub const HEARTBEATS_IN_FLIGHT: usize = 8;

/// Heartbeat forever on schedule; run the tasks of the replies (recoveries in the background, at
/// most [`RECOVERY_PARALLELISM`] at once, each segment once at a time; deletions in order,
/// reported in the heartbeats after them until one is answered).
async fn heartbeat_loop(link: Link, every: Duration, patience: Duration) {
    let (osd, mds, osd_id) = (link.osd.clone(), link.mds.clone(), link.osd_id);
    let deleted: Arc<Mutex<Vec<u64>>> = Arc::default();
    let deleted_objects: Arc<Mutex<Vec<u64>>> = Arc::default();
    let in_flight = Arc::new(tokio::sync::Semaphore::new(HEARTBEATS_IN_FLIGHT));
    // Replies wait here for the task runner; one that finds it full is dropped (the MDS hands
    // every task again until it is done, so the next reply carries them).
    let (replies, mut to_run) = tokio::sync::mpsc::channel(2);
    let beats = {
        let (osd, deleted, deleted_objects) =
            (osd.clone(), deleted.clone(), deleted_objects.clone());
        async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Ok(slot) = in_flight.clone().try_acquire_owned() else {
                    continue; // every slot waits on the MDS: the beats already sent say as much
                };
                let usage = osd.store().usage();
                let reported = lock(&deleted).clone();
                let reported_objects = lock(&deleted_objects).clone();
                let beat = Heartbeat {
                    osd_id,
                    used_bytes: usage.bytes,
                    chunks: usage.chunks,
                    deleted_segments: reported.clone(),
                    reserve_bytes: usage.reserve_bytes,
                    log_bytes: usage.log_bytes,
                    merges: usage.merges,
                    load: osd.load(),
                    deleted_objects: reported_objects.clone(),
                };
                let (osd, mds, deleted, deleted_objects, replies, link) = (
                    osd.clone(),
                    mds.clone(),
                    deleted.clone(),
                    deleted_objects.clone(),
                    replies.clone(),
                    link.clone(),
                );
                tokio::spawn(async move {
                    let _slot = slot;
                    let sent = std::time::Instant::now();
                    match tokio::time::timeout(patience, mds.heartbeat(&beat)).await {
                        Ok(Ok(reply)) => {
                            osd.lease().renew(sent);
                            lock(&deleted).retain(|s| !reported.contains(s));
                            lock(&deleted_objects).retain(|o| !reported_objects.contains(o));
                            if reply.inventory_wanted {
                                link.inventory_wanted.notify_one();
                            }
                            let _ = replies.try_send(reply);
                        }
                        Ok(Err(e)) => {
                            link.note_error(&e);
                            tracing::warn!("heartbeat to the MDS failed: {e}")
                        }
                        Err(_) => tracing::warn!(
                            "heartbeat to the MDS got no answer in {} ms",
                            patience.as_millis()
                        ),
                    }
                });
            }
        }
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(RECOVERY_PARALLELISM));
    let running: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let tasks = async move {
        while let Some(reply) = to_run.recv().await {
            let done = Done {
                segments: &deleted,
                objects: &deleted_objects,
            };
            run_tasks(&osd, reply, done, &slots, &running).await;
        }
    };
    tokio::join!(beats, tasks);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Deletions done, reported in the next heartbeats until one is answered.
struct Done<'a> {
    segments: &'a Mutex<Vec<u64>>,
    objects: &'a Mutex<Vec<u64>>,
}

fn note_done(list: &Mutex<Vec<u64>>, id: u64) {
    let mut d = lock(list);
    if !d.contains(&id) {
        d.push(id);
    }
}

/// One heartbeat reply's tasks.
async fn run_tasks(
    osd: &Osd,
    reply: ecstack_mds_proto::HeartbeatReply,
    done: Done<'_>,
    slots: &Arc<tokio::sync::Semaphore>,
    running: &Arc<Mutex<HashSet<u64>>>,
) {
    for task in reply.tasks {
        match task {
            OsdTask::Delete(t) => match osd.delete_chunks(t.segment_id, &t.chunks).await {
                Ok(()) => note_done(done.segments, t.segment_id),
                Err(e) => tracing::warn!(segment = t.segment_id, "delete failed: {e}"),
            },
            OsdTask::DeleteObject(t) => match osd.delete_blocks_here(t.object_id, t.blocks).await {
                Ok(_) => note_done(done.objects, t.object_id),
                Err(e) => tracing::warn!(object = t.object_id, "block delete failed: {e}"),
            },
            OsdTask::Recover(t) => {
                let seg = t.layout.segment_id;
                if !lock(running).insert(seg) {
                    continue;
                }
                let (osd, slots, running) = (osd.clone(), slots.clone(), running.clone());
                tokio::spawn(async move {
                    let _slot = slots.acquire_owned().await;
                    let layout = Layout::from(&t.layout);
                    let started = std::time::Instant::now();
                    match osd.recover(&layout, &t.chunks).await {
                        Ok(bytes) => tracing::info!(
                            segment = seg,
                            chunks = ?t.chunks,
                            bytes,
                            ms = started.elapsed().as_millis() as u64,
                            "recovered"
                        ),
                        Err(e) => {
                            crate::metrics::Metrics::add(&osd.metrics().recovery_failures, 1);
                            tracing::warn!(segment = seg, "recovery failed: {e}")
                        }
                    }
                    lock(&running).remove(&seg);
                });
            }
        }
    }
}
