//! The gRPC face of the MDS: `mds.proto`'s service over an [`MdsCore`], the failure detector task
//! and the MDS's metrics. Each RPC runs its core operation on a blocking thread under one lock
//! (SQLite is synchronous; the MDS serializes its metadata mutations), and replies only after the
//! operation's batch is durable.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ecstack_rpc::roles::{Role, RoleTable};
use ecstack_rpc::Security;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

use crate::engine::MdsCore;
use ecstack_mds_proto::proto;
use ecstack_mds_proto::{
    Attr, BlockPlacement, FileKind, Heartbeat, InventoryPage, MdsError, OsdLoad, OsdRegistration,
    OsdState, RenameFlags, RobustObject, RobustParams, RobustUpdate, SetAttr, UpdateScheme,
};

const OSD: &[Role] = &[Role::Osd];
/// Clients, admins and OSDs: a primary asks for a segment's epoch before its first update of it.
const CLIENT_OR_OSD: &[Role] = &[Role::Client, Role::Admin, Role::Osd];
const CLIENT: &[Role] = &[Role::Client, Role::Admin];
const ADMIN: &[Role] = &[Role::Admin];

/// Who may call each RPC of `mds.proto` (docs/cluster.md, "Roles"): OSDs register, heartbeat,
/// report what they hold and chunk state and read a segment's layout; clients (and admins) use the namespace and read the cluster's status; only
/// admins declare an OSD out. The MDS's own certificate calls nothing here (the MDS never calls).
pub static MDS_ROLES: RoleTable = RoleTable {
    service: "ecstack.mds.v1.Mds",
    methods: &[
        ("RegisterOsd", OSD),
        ("Heartbeat", OSD),
        ("ReportInventory", OSD),
        ("CreateFile", CLIENT),
        ("AllocateSegments", CLIENT),
        ("CommitFile", CLIENT),
        ("LookupFile", CLIENT),
        ("ListFiles", CLIENT),
        ("RemoveFile", CLIENT),
        ("GetSegment", CLIENT_OR_OSD),
        ("MarkStale", OSD),
        ("ChunkRecovered", OSD),
        ("Lookup", CLIENT),
        ("GetAttr", CLIENT),
        ("SetAttr", CLIENT),
        ("Mknod", CLIENT),
        ("Mkdir", CLIENT),
        ("Unlink", CLIENT),
        ("Rmdir", CLIENT),
        ("Rename", CLIENT),
        ("Link", CLIENT),
        ("Symlink", CLIENT),
        ("ReadLink", CLIENT),
        ("ReadDir", CLIENT),
        ("StatFs", CLIENT),
        ("SetXattr", CLIENT),
        ("GetXattr", CLIENT),
        ("ListXattr", CLIENT),
        ("RemoveXattr", CLIENT),
        ("OpenFile", CLIENT),
        ("GrowFile", CLIENT),
        ("CreateRobustFile", CLIENT),
        ("CommitRobustFile", CLIENT),
        ("UpdateRobustObject", CLIENT),
        ("OsdOut", ADMIN),
        ("Status", CLIENT),
        ("Backup", ADMIN),
    ],
};

/// Bytes per message of a backup stream.
const BACKUP_CHUNK_BYTES: usize = 1 << 20;
/// Numbers the backups of this process (each copies into a file of its own: they run at once).
static BACKUP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The `op` label of a request metric.
type OpLabel = [(&'static str, &'static str); 1];

/// Requests, errors and latency per RPC (`prometheus-client` families; cheap to clone, shared).
#[derive(Debug, Clone)]
struct OpMetrics {
    requests: Family<OpLabel, Counter>,
    errors: Family<OpLabel, Counter>,
    seconds: Family<OpLabel, Histogram, fn() -> Histogram>,
}

impl Default for OpMetrics {
    fn default() -> Self {
        OpMetrics {
            requests: Family::default(),
            errors: Family::default(),
            seconds: Family::new_with_constructor(
                ecstack_rpc::metrics::latency_histogram as fn() -> Histogram,
            ),
        }
    }
}

/// Whether an MDS answers: the only MDS always; of an active and its standbys
/// ([`crate::standby`]) only the one holding the store's lease, until its lease could lapse.
#[derive(Debug, Clone)]
enum Gate {
    Always,
    /// Active until this instant (renewals move it on).
    Until(Instant),
    /// Not active; the lease row names the active MDS (or why none is known).
    Standby(String),
}

/// A running MDS: its core, shared by the RPC handlers and the failure detector. Cheap to clone.
#[derive(Clone)]
pub struct MdsHandle {
    /// `None` while a standby.
    core: Arc<Mutex<Option<MdsCore>>>,
    gate: Arc<Mutex<Gate>>,
    ops: OpMetrics,
    /// When each OSD's latest heartbeat reached this process, on the core's clock: the failure
    /// detector judges silence by it ([`MdsCore::note_arrivals`]), not by when the core got to the
    /// heartbeat.
    arrivals: Arc<Mutex<HashMap<u32, u64>>>,
    clock: Arc<dyn crate::engine::Clock>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("MDS server: {0}")]
    Security(#[from] ecstack_rpc::SecurityError),
    #[error("MDS server stopped: {0}")]
    Transport(#[from] tonic::transport::Error),
}

impl MdsHandle {
    pub fn new(core: MdsCore) -> MdsHandle {
        MdsHandle {
            clock: core.clock().clone(),
            core: Arc::new(Mutex::new(Some(core))),
            gate: Arc::new(Mutex::new(Gate::Always)),
            ops: OpMetrics::default(),
            arrivals: Arc::default(),
        }
    }

    /// An MDS that waits for the store's lease ([`crate::standby`]): it answers every call with
    /// `Unavailable` naming the active MDS until [`MdsHandle::activate`].
    pub fn standby(clock: Arc<dyn crate::engine::Clock>) -> MdsHandle {
        MdsHandle {
            clock,
            core: Arc::new(Mutex::new(None)),
            gate: Arc::new(Mutex::new(Gate::Standby("not known yet".into()))),
            ops: OpMetrics::default(),
            arrivals: Arc::default(),
        }
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This MDS took the lease: it answers with `core` until `until` (unless extended).
    pub fn activate(&self, core: MdsCore, until: Instant) {
        self.arrivals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        *self.core.lock().unwrap_or_else(|p| p.into_inner()) = Some(core);
        *self.gate() = Gate::Until(until);
    }

    /// A renewal: the active MDS answers until `until`.
    pub fn extend(&self, until: Instant) {
        let mut g = self.gate();
        if let Gate::Until(t) = *g {
            *g = Gate::Until(t.max(until));
        }
    }

    /// Not (or no longer) active: answer `Unavailable` naming `active`; the core, if any, is
    /// returned (dropped by the caller, off the async threads).
    pub fn depose(&self, active: String) -> Option<MdsCore> {
        *self.gate() = Gate::Standby(active);
        self.core.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Whether this MDS answers now; else the `Unavailable` to answer.
    fn check(&self) -> Result<(), MdsError> {
        match &*self.gate() {
            Gate::Always => Ok(()),
            Gate::Until(t) if Instant::now() < *t => Ok(()),
            Gate::Until(_) => Err(MdsError::Unavailable(
                "this MDS could not renew its lease in the metadata store; it answers nothing until it does or a standby takes over".into(),
            )),
            Gate::Standby(active) => Err(MdsError::Unavailable(format!(
                "this MDS is a standby; the active MDS is {active}"
            ))),
        }
    }

    /// The clock the MDS judges OSDs' silence by.
    pub fn clock(&self) -> &Arc<dyn crate::engine::Clock> {
        &self.clock
    }

    /// Whether this MDS answers now.
    pub fn is_active(&self) -> bool {
        self.check().is_ok()
    }

    /// Runs one core operation on a blocking thread and records its metrics.
    async fn run<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut MdsCore) -> Result<T, MdsError> + Send + 'static,
    ) -> Result<T, MdsError> {
        let start = Instant::now();
        self.check()?;
        let core = self.core.clone();
        let this = self.clone();
        let result = tokio::task::spawn_blocking(move || {
            // A panic inside the core is a bug; the store's transactions keep it consistent, so
            // the next operation may go on.
            let mut core = core.lock().unwrap_or_else(|p| p.into_inner());
            // Again under the lock: the lease may have lapsed while this call waited for it.
            this.check()?;
            match core.as_mut() {
                Some(core) => f(core),
                None => Err(MdsError::Unavailable("this MDS is a standby".into())),
            }
        })
        .await
        .unwrap_or_else(|e| {
            Err(MdsError::Internal(format!(
                "MDS operation {op} failed: {e}"
            )))
        });
        let label = [("op", op)];
        self.ops.requests.get_or_create(&label).inc();
        self.ops
            .errors
            .get_or_create(&label)
            .inc_by(u64::from(result.is_err()));
        self.ops
            .seconds
            .get_or_create(&label)
            .observe(start.elapsed().as_secs_f64());
        if let Err(e) = &result {
            tracing::debug!(op, error = %e, "MDS request failed");
        }
        result
    }

    /// One failure-detector round (tests call it after moving their clock).
    pub async fn tick(&self) -> Result<(), MdsError> {
        if !self.is_active() {
            return Ok(());
        }
        let arrivals = self.arrivals.clone();
        self.run("tick", move |c| {
            let arrived = arrivals.lock().unwrap_or_else(|p| p.into_inner()).clone();
            c.note_arrivals(&arrived);
            c.tick()
        })
        .await
    }

    /// Runs the failure detector every `every` until the runtime stops.
    pub fn spawn_failure_detector(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let handle = self.clone();
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                if let Err(e) = handle.tick().await {
                    tracing::error!(error = %e, "failure detector round failed");
                }
            }
        })
    }

    /// Serves the MDS protocol on `listener` until `shutdown` completes; each call's certificate
    /// role is checked against [`MDS_ROLES`] (none on an insecure server).
    pub async fn serve(
        &self,
        listener: TcpListener,
        security: &Security,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        security
            .server()?
            .add_service(security.guard(
                &MDS_ROLES,
                proto::mds_server::MdsServer::new(MdsService(self.clone())),
            ))
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await?;
        Ok(())
    }

    /// A test's MDS of `config` (a [`ManualClock`](crate::engine::ManualClock) at 1,000 s, its
    /// SQLite store and the `mds` certificate) serving on a fresh loopback port in a task of the
    /// current runtime: its address, and the sender that stops it. For the tests of this crate and
    /// of the OSD.
    #[doc(hidden)]
    pub async fn spawn_loopback(
        config: &ecstack_rpc::ClusterConfig,
    ) -> (String, tokio::sync::oneshot::Sender<()>) {
        let store = crate::store::SqliteStore::open(&config.resolve(&config.mds.store))
            .expect("open the MDS store");
        let core = MdsCore::open(
            Box::new(store),
            crate::engine::MdsSettings::from_config(config),
            crate::engine::ManualClock::new(1_000_000),
        )
        .expect("open the MDS");
        let handle = MdsHandle::new(core);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address").to_string();
        let security = Security::load(&config.certs_dir(), "mds").expect("the mds certificate");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            handle
                .serve(listener, &security, async {
                    let _ = stopped.await;
                })
                .await
                .expect("serve");
        });
        (addr, stop)
    }

    /// Prometheus text: requests, errors and latency per RPC, OSDs by state, segments by state,
    /// files, bytes and recovery progress.
    pub async fn metrics_text(&self) -> String {
        let mut r = Registry::default();
        // prometheus-client appends `_total` to counter names.
        r.register(
            "ecstack_mds_requests",
            "MDS requests by operation.",
            self.ops.requests.clone(),
        );
        r.register(
            "ecstack_mds_request_errors",
            "MDS requests that failed.",
            self.ops.errors.clone(),
        );
        r.register(
            "ecstack_mds_request_seconds",
            "Time spent in MDS requests.",
            self.ops.seconds.clone(),
        );
        let status = self.run("metrics", |c| c.status()).await;
        if let Ok(st) = &status {
            let osds = Family::<[(&str, &str); 1], Gauge>::default();
            for (state, name) in [
                (OsdState::Up, "up"),
                (OsdState::Down, "down"),
                (OsdState::Out, "out"),
            ] {
                let n = st.osds.iter().filter(|o| o.state == state).count();
                osds.get_or_create(&[("state", name)]).set(n as i64);
            }
            r.register("ecstack_mds_osds", "OSDs by state.", osds);
            let segments = Family::<[(&str, &str); 1], Gauge>::default();
            for (name, n) in [
                ("healthy", st.segments_healthy),
                ("degraded", st.segments_degraded),
                ("recovering", st.segments_recovering),
                ("lost", st.segments_lost),
            ] {
                segments
                    .get_or_create(&[("state", name)])
                    .set(gauge_value(n));
            }
            r.register("ecstack_mds_segments", "Segments by state.", segments);
            let rc = &st.recovery;
            for (name, help, v) in [
                ("ecstack_mds_files", "Files.", st.files),
                ("ecstack_mds_bytes", "Bytes in files.", st.bytes),
                (
                    "ecstack_mds_recovery_chunks_total",
                    "Chunks the latest recovery rebuilds.",
                    rc.chunks_total,
                ),
                (
                    "ecstack_mds_recovery_chunks_done",
                    "Chunks the latest recovery has rebuilt.",
                    rc.chunks_done,
                ),
                (
                    "ecstack_mds_recovery_bytes_done",
                    "Bytes the latest recovery has rebuilt.",
                    rc.bytes_done,
                ),
                (
                    "ecstack_mds_recovery_started_ms",
                    "When the latest recovery started (Unix ms; 0: none ran).",
                    rc.started_ms,
                ),
                (
                    "ecstack_mds_recovery_finished_ms",
                    "When the latest recovery finished (Unix ms; 0: still running).",
                    rc.finished_ms,
                ),
            ] {
                let g = Gauge::<i64>::default();
                g.set(gauge_value(v));
                r.register(name, help, g);
            }
        }
        let mut out = ecstack_rpc::metrics::encode(&r);
        if let Err(e) = status {
            let _ = writeln!(out, "# status unavailable: {e}");
        }
        out
    }
}

fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The tonic service (generated types stay here).
struct MdsService(MdsHandle);

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl proto::mds_server::Mds for MdsService {
    async fn register_osd(
        &self,
        r: Request<proto::RegisterOsdRequest>,
    ) -> Reply<proto::RegisterOsdReply> {
        let r = r.into_inner();
        let reg = OsdRegistration {
            name: r.name,
            addr: r.addr,
            labels: r.labels.into_iter().collect(),
            capacity_bytes: r.capacity_bytes,
            used_bytes: r.used_bytes,
            max_segment_id: r.max_segment_id,
        };
        let done = self
            .0
            .run("register_osd", move |c| c.register_osd(&reg))
            .await?;
        Ok(Response::new(proto::RegisterOsdReply {
            osd_id: done.osd_id,
            params: Some(done.params.into()),
        }))
    }

    async fn heartbeat(&self, r: Request<proto::HeartbeatRequest>) -> Reply<proto::HeartbeatReply> {
        let r = r.into_inner();
        // A standby, or an MDS whose lease lapsed, acknowledges no heartbeat: the
        // acknowledgements renew the OSDs' primary leases.
        self.0.check()?;
        let now = self.0.clock.now_ms();
        self.0
            .arrivals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(r.osd_id, now);
        let hb = Heartbeat {
            osd_id: r.osd_id,
            used_bytes: r.used_bytes,
            chunks: r.chunks,
            deleted_segments: r.deleted_segments,
            reserve_bytes: r.reserve_bytes,
            log_bytes: r.log_bytes,
            merges: r.merges,
            load: OsdLoad {
                read_bytes_per_s: r.read_bytes_per_s,
                write_bytes_per_s: r.write_bytes_per_s,
                queue_depth: r.queue_depth,
                robust_blocks: r.robust_blocks,
            },
            deleted_objects: r.deleted_objects,
        };
        let reply = self.0.run("heartbeat", move |c| c.heartbeat(&hb)).await?;
        Ok(Response::new(proto::HeartbeatReply {
            epoch: reply.epoch,
            tasks: reply.tasks.into_iter().map(Into::into).collect(),
            inventory_wanted: reply.inventory_wanted,
        }))
    }

    async fn report_inventory(
        &self,
        r: Request<proto::InventoryPage>,
    ) -> Reply<proto::InventoryReply> {
        let page = InventoryPage::from(r.into_inner());
        let pass_dropped = self
            .0
            .run("report_inventory", move |c| c.report_inventory(&page))
            .await?;
        Ok(Response::new(proto::InventoryReply { pass_dropped }))
    }

    async fn create_file(
        &self,
        r: Request<proto::CreateFileRequest>,
    ) -> Reply<proto::CreateFileReply> {
        let r = r.into_inner();
        let scheme = r
            .update_scheme
            .map(UpdateScheme::from_code)
            .transpose()
            .map_err(MdsError::InvalidArgument)?;
        let path = r.path;
        let file_id = self
            .0
            .run("create_file", move |c| c.create_file_with(&path, scheme))
            .await?;
        Ok(Response::new(proto::CreateFileReply { file_id }))
    }

    async fn allocate_segments(
        &self,
        r: Request<proto::AllocateSegmentsRequest>,
    ) -> Reply<proto::AllocateSegmentsReply> {
        let r = r.into_inner();
        let segs = self
            .0
            .run("allocate_segments", move |c| {
                c.allocate_segments_on(r.file_id, &r.lengths, &r.osd_hint)
            })
            .await?;
        Ok(Response::new(proto::AllocateSegmentsReply {
            segments: segs.into_iter().map(Into::into).collect(),
        }))
    }

    async fn commit_file(
        &self,
        r: Request<proto::CommitFileRequest>,
    ) -> Reply<proto::CommitFileReply> {
        let r = r.into_inner();
        self.0
            .run("commit_file", move |c| c.commit_file(r.file_id, r.size))
            .await?;
        Ok(Response::new(proto::CommitFileReply {}))
    }

    async fn create_robust_file(
        &self,
        r: Request<proto::CreateRobustFileRequest>,
    ) -> Reply<proto::CreateRobustFileReply> {
        let r = r.into_inner();
        let params: RobustParams = r
            .params
            .ok_or_else(|| MdsError::InvalidArgument("a robust file needs its parameters".into()))?
            .try_into()
            .map_err(|e: MdsError| MdsError::InvalidArgument(e.to_string()))?;
        let objects = robust_objects(r.objects)?;
        let (file_id, object_ids) = self
            .0
            .run("create_robust_file", move |c| {
                c.create_robust_file(&r.path, params, r.size, &objects)
            })
            .await?;
        Ok(Response::new(proto::CreateRobustFileReply {
            file_id,
            object_ids,
        }))
    }

    async fn commit_robust_file(
        &self,
        r: Request<proto::CommitRobustFileRequest>,
    ) -> Reply<proto::CommitFileReply> {
        let r = r.into_inner();
        let objects = robust_objects(r.objects)?;
        self.0
            .run("commit_robust_file", move |c| {
                c.commit_robust_file(r.file_id, &objects)
            })
            .await?;
        Ok(Response::new(proto::CommitFileReply {}))
    }

    async fn update_robust_object(
        &self,
        r: Request<proto::UpdateRobustObjectRequest>,
    ) -> Reply<proto::UpdateRobustObjectReply> {
        let r = r.into_inner();
        let added = r
            .added
            .into_iter()
            .map(BlockPlacement::try_from)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| MdsError::InvalidArgument(e.to_string()))?;
        let u = RobustUpdate {
            file_id: r.file_id,
            object_id: r.object_id,
            version: r.version,
            added,
            dropped: r.dropped.into_iter().map(Into::into).collect(),
            seed: r.seed,
        };
        let object = self
            .0
            .run("update_robust_object", move |c| c.update_robust_object(&u))
            .await?;
        Ok(Response::new(proto::UpdateRobustObjectReply {
            object: Some(object.into()),
        }))
    }

    async fn lookup_file(&self, r: Request<proto::LookupFileRequest>) -> Reply<proto::FileInfo> {
        let path = r.into_inner().path;
        let f = self
            .0
            .run("lookup_file", move |c| c.lookup_file(&path))
            .await?;
        Ok(Response::new(f.into()))
    }

    async fn list_files(
        &self,
        r: Request<proto::ListFilesRequest>,
    ) -> Reply<proto::ListFilesReply> {
        let prefix = r.into_inner().prefix;
        let files = self
            .0
            .run("list_files", move |c| c.list_files(&prefix))
            .await?;
        Ok(Response::new(proto::ListFilesReply {
            files: files.into_iter().map(Into::into).collect(),
        }))
    }

    async fn remove_file(
        &self,
        r: Request<proto::RemoveFileRequest>,
    ) -> Reply<proto::RemoveFileReply> {
        let path = r.into_inner().path;
        self.0
            .run("remove_file", move |c| c.remove_file(&path))
            .await?;
        Ok(Response::new(proto::RemoveFileReply {}))
    }

    async fn get_segment(
        &self,
        r: Request<proto::GetSegmentRequest>,
    ) -> Reply<proto::SegmentLayout> {
        let id = r.into_inner().segment_id;
        let s = self
            .0
            .run("get_segment", move |c| c.get_segment(id))
            .await?;
        Ok(Response::new(s.into()))
    }

    async fn mark_stale(
        &self,
        r: Request<proto::MarkStaleRequest>,
    ) -> Reply<proto::MarkStaleReply> {
        let r = r.into_inner();
        self.0
            .run("mark_stale", move |c| {
                c.mark_stale(r.segment_id, &r.chunks, r.version)
            })
            .await?;
        Ok(Response::new(proto::MarkStaleReply {}))
    }

    async fn chunk_recovered(
        &self,
        r: Request<proto::ChunkRecoveredRequest>,
    ) -> Reply<proto::ChunkRecoveredReply> {
        let r = r.into_inner();
        let epoch = self
            .0
            .run("chunk_recovered", move |c| {
                c.chunk_recovered(r.segment_id, r.chunk, r.osd_id, r.version, r.reporter)
            })
            .await?;
        Ok(Response::new(proto::ChunkRecoveredReply { epoch }))
    }

    async fn osd_out(&self, r: Request<proto::OsdOutRequest>) -> Reply<proto::OsdOutReply> {
        let id = r.into_inner().osd_id;
        let n = self.0.run("osd_out", move |c| c.osd_out(id)).await?;
        Ok(Response::new(proto::OsdOutReply {
            chunks_to_recover: n,
        }))
    }

    type BackupStream = std::pin::Pin<
        Box<
            dyn tonic::codegen::tokio_stream::Stream<Item = Result<proto::BackupChunk, Status>>
                + Send,
        >,
    >;

    async fn backup(&self, _: Request<proto::BackupRequest>) -> Reply<Self::BackupStream> {
        // Under the core's lock only the database's file: the copy is made outside it, by a
        // read-only connection of its own, while operations go on (`backup::snapshot_sqlite`).
        let db = self.0.run("backup", |c| c.backup_source()).await?;
        let file = std::env::temp_dir().join(format!(
            "ecstack-mds-backup-{}-{}.db",
            std::process::id(),
            BACKUP_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let bytes = tokio::task::spawn_blocking(move || {
            let _ = std::fs::remove_file(&file);
            let made = crate::backup::snapshot_sqlite(&db, &file)
                .map_err(|e| MdsError::Internal(format!("backup of {}: {e}", db.display())));
            let read = made.and_then(|()| {
                std::fs::read(&file).map_err(|e| {
                    MdsError::Internal(format!("backup: cannot read {}: {e}", file.display()))
                })
            });
            let _ = std::fs::remove_file(&file);
            read
        })
        .await
        .unwrap_or_else(|e| Err(MdsError::Internal(format!("backup failed: {e}"))))?;
        let chunks: Vec<Result<proto::BackupChunk, Status>> = bytes
            .chunks(BACKUP_CHUNK_BYTES)
            .map(|c| Ok(proto::BackupChunk { data: c.to_vec() }))
            .collect();
        Ok(Response::new(Box::pin(tonic::codegen::tokio_stream::iter(
            chunks,
        ))))
    }

    async fn status(&self, _: Request<proto::StatusRequest>) -> Reply<proto::StatusReply> {
        let s = self.0.run("status", |c| c.status()).await?;
        Ok(Response::new(s.into()))
    }

    async fn lookup(&self, r: Request<proto::LookupRequest>) -> Reply<proto::Attr> {
        let r = r.into_inner();
        attr_reply(
            self.0
                .run("lookup", move |c| c.lookup(r.parent, &r.name))
                .await,
        )
    }

    async fn get_attr(&self, r: Request<proto::GetAttrRequest>) -> Reply<proto::Attr> {
        let ino = r.into_inner().ino;
        attr_reply(self.0.run("get_attr", move |c| c.get_attr(ino)).await)
    }

    async fn set_attr(&self, r: Request<proto::SetAttrRequest>) -> Reply<proto::Attr> {
        let (ino, s): (u64, SetAttr) = r.into_inner().into();
        attr_reply(self.0.run("set_attr", move |c| c.set_attr(ino, &s)).await)
    }

    async fn mknod(&self, r: Request<proto::MknodRequest>) -> Reply<proto::Attr> {
        let r = r.into_inner();
        let kind = kind_of(r.kind)?;
        attr_reply(
            self.0
                .run("mknod", move |c| {
                    c.mknod(
                        r.parent,
                        &r.name,
                        kind,
                        r.mode,
                        r.uid,
                        r.gid,
                        r.rdev,
                        r.exclusive,
                    )
                })
                .await,
        )
    }

    async fn mkdir(&self, r: Request<proto::MkdirRequest>) -> Reply<proto::Attr> {
        let r = r.into_inner();
        attr_reply(
            self.0
                .run("mkdir", move |c| {
                    c.mkdir(r.parent, &r.name, r.mode, r.uid, r.gid)
                })
                .await,
        )
    }

    async fn unlink(&self, r: Request<proto::UnlinkRequest>) -> Reply<proto::UnlinkReply> {
        let r = r.into_inner();
        self.0
            .run("unlink", move |c| c.unlink(r.parent, &r.name))
            .await?;
        Ok(Response::new(proto::UnlinkReply {}))
    }

    async fn rmdir(&self, r: Request<proto::UnlinkRequest>) -> Reply<proto::UnlinkReply> {
        let r = r.into_inner();
        self.0
            .run("rmdir", move |c| c.rmdir(r.parent, &r.name))
            .await?;
        Ok(Response::new(proto::UnlinkReply {}))
    }

    async fn rename(&self, r: Request<proto::RenameRequest>) -> Reply<proto::RenameReply> {
        let r = r.into_inner();
        let flags = RenameFlags {
            noreplace: r.noreplace,
            exchange: r.exchange,
        };
        self.0
            .run("rename", move |c| {
                c.rename(r.parent, &r.name, r.new_parent, &r.new_name, flags)
            })
            .await?;
        Ok(Response::new(proto::RenameReply {}))
    }

    async fn link(&self, r: Request<proto::LinkRequest>) -> Reply<proto::Attr> {
        let r = r.into_inner();
        attr_reply(
            self.0
                .run("link", move |c| c.link(r.ino, r.new_parent, &r.new_name))
                .await,
        )
    }

    async fn symlink(&self, r: Request<proto::SymlinkRequest>) -> Reply<proto::Attr> {
        let r = r.into_inner();
        attr_reply(
            self.0
                .run("symlink", move |c| {
                    c.symlink(r.parent, &r.name, &r.target, r.uid, r.gid)
                })
                .await,
        )
    }

    async fn read_link(&self, r: Request<proto::GetAttrRequest>) -> Reply<proto::ReadLinkReply> {
        let ino = r.into_inner().ino;
        let target = self.0.run("read_link", move |c| c.read_link(ino)).await?;
        Ok(Response::new(proto::ReadLinkReply { target }))
    }

    async fn read_dir(&self, r: Request<proto::ReadDirRequest>) -> Reply<proto::ReadDirReply> {
        let r = r.into_inner();
        let (entries, more) = self
            .0
            .run("read_dir", move |c| c.read_dir(r.ino, &r.after, r.limit))
            .await?;
        Ok(Response::new(proto::ReadDirReply {
            entries: entries
                .into_iter()
                .map(|e| proto::DirEntry {
                    name: e.name,
                    attr: Some(e.attr.into()),
                })
                .collect(),
            more,
        }))
    }

    async fn stat_fs(&self, _: Request<proto::StatFsRequest>) -> Reply<proto::StatFsReply> {
        let s = self.0.run("stat_fs", |c| c.stat_fs()).await?;
        Ok(Response::new(s.into()))
    }

    async fn set_xattr(&self, r: Request<proto::SetXattrRequest>) -> Reply<proto::SetXattrReply> {
        let r = r.into_inner();
        self.0
            .run("set_xattr", move |c| {
                c.set_xattr(r.ino, &r.name, &r.value, r.create, r.replace)
            })
            .await?;
        Ok(Response::new(proto::SetXattrReply {}))
    }

    async fn get_xattr(&self, r: Request<proto::GetXattrRequest>) -> Reply<proto::GetXattrReply> {
        let r = r.into_inner();
        let value = self
            .0
            .run("get_xattr", move |c| c.get_xattr(r.ino, &r.name))
            .await?;
        Ok(Response::new(proto::GetXattrReply { value }))
    }

    async fn list_xattr(&self, r: Request<proto::GetAttrRequest>) -> Reply<proto::ListXattrReply> {
        let ino = r.into_inner().ino;
        let names = self.0.run("list_xattr", move |c| c.list_xattr(ino)).await?;
        Ok(Response::new(proto::ListXattrReply { names }))
    }

    async fn remove_xattr(
        &self,
        r: Request<proto::GetXattrRequest>,
    ) -> Reply<proto::SetXattrReply> {
        let r = r.into_inner();
        self.0
            .run("remove_xattr", move |c| c.remove_xattr(r.ino, &r.name))
            .await?;
        Ok(Response::new(proto::SetXattrReply {}))
    }

    async fn open_file(&self, r: Request<proto::GetAttrRequest>) -> Reply<proto::OpenFileReply> {
        let ino = r.into_inner().ino;
        let (attr, file) = self.0.run("open_file", move |c| c.open_file(ino)).await?;
        Ok(Response::new(proto::OpenFileReply {
            attr: Some(attr.into()),
            file: Some(file.into()),
        }))
    }

    async fn grow_file(
        &self,
        r: Request<proto::GrowFileRequest>,
    ) -> Reply<proto::AllocateSegmentsReply> {
        let r = r.into_inner();
        let segs = self
            .0
            .run("grow_file", move |c| {
                c.grow_file(r.ino, r.first_index, &r.lengths)
            })
            .await?;
        Ok(Response::new(proto::AllocateSegmentsReply {
            segments: segs.into_iter().map(Into::into).collect(),
        }))
    }
}

fn attr_reply(a: Result<Attr, MdsError>) -> Reply<proto::Attr> {
    Ok(Response::new(a?.into()))
}

fn kind_of(v: i32) -> Result<FileKind, Status> {
    u32::try_from(v)
        .ok()
        .and_then(FileKind::from_code)
        .ok_or_else(|| MdsError::InvalidArgument(format!("unknown file kind {v}")).into())
}

/// Robust objects of a request as domain types; a malformed one is the caller's error.
fn robust_objects(objects: Vec<proto::RobustObject>) -> Result<Vec<RobustObject>, MdsError> {
    objects
        .into_iter()
        .map(RobustObject::try_from)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| MdsError::InvalidArgument(e.to_string()))
}
