//! [`Client`]: files as segments (CodFS §4.3.1). Metadata goes to the MDS; each segment's bytes go to
//! its primary OSD, several segments in flight at once. Every call has a deadline; a retryable error
//! (MDS or OSD unreachable, stale layout, too few durable holders this time) is retried with
//! exponential backoff, and a segment call re-fetches the segment's layout before the next attempt
//! (its primary may have been promoted or its chunks moved by recovery).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes};
use ecstack_mds_proto::{
    ClusterStatus, FileInfo, FileSummary, MdsClient, MdsError, OsdState, SegmentLayout,
    UpdateScheme,
};
use ecstack_osd_proto::{Layout, OsdCallError, OsdClient, SegmentAge};
use ecstack_rpc::{limits, retry_with_progress, Backoff, ClusterConfig, Security};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinSet;

use crate::error::ClientError;
use crate::segments::{segment_lengths, split_range, ReadOrder};
use crate::window::{Leg, Transit};

/// How one put stores its file ([`Client::put_with`] and friends). The default is what
/// [`Client::put`] does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutOptions {
    /// The file's update scheme. `None` (the default): the scheme of the file the put replaces,
    /// else the cluster's `[update] scheme`, as the MDS decides. A scheme other than the
    /// replaced file's is refused with one line (a file's scheme is fixed at creation).
    pub scheme: Option<UpdateScheme>,
    /// Place the segments' chunks on these OSDs only (empty: where the MDS chooses), e.g. an RS
    /// file on the OSDs of a robust file it is compared with.
    pub osd_hint: Vec<u32>,
}

/// Deadlines, retries and parallelism of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Deadline of one metadata call (MDS).
    pub metadata_timeout: Duration,
    /// Deadline of one data call at a segment's primary, on progress: a write or a read fails
    /// when none of its bytes moved for this long (a 64 MiB segment sharing a slow link may take
    /// longer than that in all, moving all along); an update, whose bytes go in one message,
    /// must finish within it.
    pub data_timeout: Duration,
    /// How long a write waits for its segment's acknowledgement once every byte of it has been
    /// sent: the primary still forwards chunks and sends parity over links other segments share,
    /// and stores, and its calls to its peers are bounded by [`limits::PEER_RPC_TIMEOUT`] (the
    /// default). A dead or unreachable primary is noticed sooner, by the connection's keep-alive.
    pub ack_timeout: Duration,
    /// How long to wait for a TCP + TLS connection.
    pub connect_timeout: Duration,
    /// Retries of a call that failed with a retryable error. The time budget must outlast failure
    /// detection and primary promotion (the MDS's `down_after_ms` plus a heartbeat or two).
    pub retry: Backoff,
    /// A put's or a get's window, in segments: it starts another segment while the bytes of those
    /// in flight still to move are fewer than this many segments', with at most one segment more
    /// than this in flight (`window.rs`). An update runs this many segments' sub-updates at once.
    pub window_segments_max: usize,
    /// Progress of puts and gets, in bytes: a put adds each segment's length once its primary
    /// acknowledged it durable, a get adds the bytes it wrote to its output. Shared by every call of
    /// the client (for a progress bar, or a throughput measured while transfers run).
    pub progress: Option<Arc<AtomicU64>>,
    /// Bytes of get replies as they arrive, before they are put in order: a frame (1 MiB) at a
    /// time through the primary, a data chunk's range at a time when reading directly. A piece
    /// read again after a failure counts again. Smoother than `progress` (which moves a segment
    /// at a time, in order), for a throughput sampled while reads run.
    pub received: Option<Arc<AtomicU64>>,
    /// Bytes of put segments as they are handed to their primary's connection, before it
    /// acknowledges them: a frame (1 MiB) at a time. An attempt sent again counts again (its bytes
    /// also go to `failed_attempts`), so once a put has ended, `sent` = the bytes acknowledged
    /// (`progress`) + those of failed attempts. Smoother than `progress` (a segment at a time),
    /// for a throughput sampled while puts run: the payload moved, not yet acknowledged.
    pub sent: Option<Arc<AtomicU64>>,
    /// Where a get's bytes come from (default: straight from the data chunks' holders; through the
    /// primary as CodFS reads is [`ReadPath::Primary`]).
    pub read_path: ReadPath,
    /// Attempts at a segment's primary (a write, a read, an update) that failed, and the bytes
    /// they had moved (sent or received) before failing: each is retried unless it was the last,
    /// so those bytes cross the links again.
    pub failed_attempts: Option<Arc<FailedAttempts>>,
}

/// What [`ClientOptions::failed_attempts`] counts.
#[derive(Debug, Default)]
pub struct FailedAttempts {
    pub attempts: AtomicU64,
    pub bytes: AtomicU64,
    /// The error of the most recent failed attempt, with what it was (`put PATH: segment I`).
    pub last_error: std::sync::Mutex<Option<String>>,
}

impl FailedAttempts {
    /// [`FailedAttempts::last_error`]'s message, if an attempt failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().map_or(None, |e| e.clone())
    }
}

/// Where a get's bytes come from. The default is [`ReadPath::Direct`]: faster (one hop per byte)
/// and, in the seeded fault runs (`crates/cli/tests/cluster_faults.rs`, 200 seeds in long mode),
/// exactly as consistent as CodFS's path through the primary, which stays one option away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadPath {
    /// Through the segment's primary, which gathers the data chunks and sends them on (CodFS
    /// §4.3): every byte crosses two hops (holder → primary → client).
    Primary,
    /// Straight from the data chunks' holders (beyond CodFS; HDFS-EC reads this way): the primary
    /// only names, under the segment's lock, the version each data chunk must carry (`ReadPlan`),
    /// and the client reads each chunk's range from its holder and accepts it only at that version,
    /// so a read still returns the segment as it was at one moment. A degraded segment, an
    /// unreachable holder, a failed checksum or a chunk at another version (an update in between)
    /// makes the client read that piece again through the primary.
    #[default]
    Direct,
}

impl ReadPath {
    pub fn name(self) -> &'static str {
        match self {
            ReadPath::Primary => "primary",
            ReadPath::Direct => "direct",
        }
    }
}

impl std::str::FromStr for ReadPath {
    type Err = String;
    fn from_str(s: &str) -> Result<ReadPath, String> {
        match s {
            "primary" => Ok(ReadPath::Primary),
            "direct" => Ok(ReadPath::Direct),
            _ => Err(format!(
                "read path {s:?}: expected \"primary\" (through each segment's primary, as CodFS) or \"direct\" (from the data chunks' holders)"
            )),
        }
    }
}

/// How a client's get pieces were read (see [`ReadPath`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Pieces read through the primary because the client reads that way.
    pub primary: u64,
    /// Pieces read straight from the data chunks' holders.
    pub direct: u64,
    /// Pieces a direct read gave back to the primary (degraded segment, a holder failed, a chunk
    /// at another version than planned).
    pub fallbacks: u64,
}

impl std::ops::Add for ReadStats {
    type Output = ReadStats;
    /// Two clients' counts together.
    fn add(self, o: ReadStats) -> ReadStats {
        ReadStats {
            primary: self.primary + o.primary,
            direct: self.direct + o.direct,
            fallbacks: self.fallbacks + o.fallbacks,
        }
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            metadata_timeout: limits::METADATA_RPC_TIMEOUT,
            data_timeout: limits::DATA_RPC_TIMEOUT,
            ack_timeout: limits::PEER_RPC_TIMEOUT,
            connect_timeout: limits::CONNECT_TIMEOUT,
            retry: Backoff {
                initial: Duration::from_millis(50),
                delay_max: Duration::from_secs(1),
                multiplier: 2.0,
                jitter: 0.5,
                attempts_max: 100,
                total_max: Duration::from_secs(30),
                seed: None,
            },
            window_segments_max: 4,
            progress: None,
            received: None,
            sent: None,
            read_path: ReadPath::default(),
            failed_attempts: None,
        }
    }
}

/// A client of one cluster. Cheap to clone; clones share their connections.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    config: ClusterConfig,
    security: Security,
    options: ClientOptions,
    mds: MdsClient,
    /// One client per OSD address (an OSD that restarts comes back on a new port, a new entry).
    osds: Mutex<HashMap<String, OsdClient>>,
    /// [`ReadStats`]: primary, direct, fallbacks.
    reads: [AtomicU64; 3],
    /// Requests to the MDS (attempts, retries included).
    mds_requests: AtomicU64,
    /// The cluster code's `chunk_align_bytes` (1, or p − 1 for RDP): chunk sizes are multiples.
    chunk_align_bytes: u64,
}

impl Client {
    /// A client of the cluster `config` describes, authenticated by `security`. Connections are
    /// made on first use.
    pub fn connect(config: &ClusterConfig, security: Security) -> Result<Client, ClientError> {
        Client::connect_with(config, security, ClientOptions::default())
    }

    pub fn connect_with(
        config: &ClusterConfig,
        security: Security,
        options: ClientOptions,
    ) -> Result<Client, ClientError> {
        let mds = MdsClient::connect_any(&config.mds_addrs(), &security)?;
        let c = &config.code;
        let chunk_align_bytes =
            ecstack_codes::chunk_align_bytes_of(&c.family, c.k as usize, c.m as usize)
                .map_err(|e| ClientError::Layout(format!("cluster code {}: {e}", c.family)))?
                as u64;
        Ok(Client {
            inner: Arc::new(Inner {
                config: config.clone(),
                security,
                options,
                mds,
                osds: Mutex::new(HashMap::new()),
                chunk_align_bytes,
                reads: Default::default(),
                mds_requests: AtomicU64::new(0),
            }),
        })
    }

    /// Loads `cluster.toml` and the certificate of `name` from the cluster's certificate directory
    /// (or none with `insecure`).
    pub fn from_config_file(
        path: &Path,
        name: &str,
        insecure: bool,
    ) -> Result<Client, ClientError> {
        Client::from_config_file_with(path, name, insecure, ClientOptions::default())
    }

    /// [`Client::from_config_file`] with `options`.
    pub fn from_config_file_with(
        path: &Path,
        name: &str,
        insecure: bool,
        options: ClientOptions,
    ) -> Result<Client, ClientError> {
        let config = ClusterConfig::load(path)?;
        let security = if insecure {
            Security::Insecure
        } else {
            Security::load(&config.certs_dir(), name)?
        };
        Client::connect_with(&config, security, options)
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.inner.config
    }

    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    async fn deadline<T, E: Into<ClientError>>(
        &self,
        what: &str,
        timeout: Duration,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, ClientError> {
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r.map_err(Into::into),
            Err(_) => Err(ClientError::Timeout {
                what: what.to_owned(),
                ms: timeout.as_millis() as u64,
            }),
        }
    }

    /// Requests this client (all its clones together) has sent the MDS so far, each attempt of a
    /// retried call counted: a [`FileHandle`]'s updates and reads send none until a segment's
    /// layout goes out of date.
    pub fn mds_requests(&self) -> u64 {
        self.inner.mds_requests.load(Ordering::Relaxed)
    }

    /// How this client's get pieces were read so far (all its clones together).
    pub fn read_stats(&self) -> ReadStats {
        let r = |i: usize| self.inner.reads[i].load(Ordering::Relaxed);
        ReadStats {
            primary: r(0),
            direct: r(1),
            fallbacks: r(2),
        }
    }

    /// Counts `bytes` into [`ClientOptions::progress`].
    fn advance(&self, bytes: u64) {
        if let Some(p) = &self.inner.options.progress {
            p.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// The typed MDS client underneath (no deadline, no retries), for one request (counted:
    /// [`Client::mds_requests`]).
    pub(crate) fn mds(&self) -> &MdsClient {
        self.inner.mds_requests.fetch_add(1, Ordering::Relaxed);
        &self.inner.mds
    }

    fn meta_timeout(&self) -> Duration {
        self.inner.options.metadata_timeout
    }

    pub(crate) fn osd_client(&self, addr: &str) -> Result<OsdClient, ClientError> {
        self.osd(addr)
    }

    fn osd(&self, addr: &str) -> Result<OsdClient, ClientError> {
        let mut osds = self.inner.osds.lock().expect("OSD client map poisoned");
        if let Some(c) = osds.get(addr) {
            return Ok(c.clone());
        }
        let o = &self.inner.options;
        let c = OsdClient::connect_with(
            addr,
            &self.inner.security,
            o.connect_timeout,
            None, // data calls are bounded by `idle_deadline`, on progress
        )?;
        osds.insert(addr.to_owned(), c.clone());
        Ok(c)
    }

    /// Drops the cached connection to `addr` (after it failed), so the next call dials afresh.
    fn forget_osd(&self, addr: &str) {
        self.inner
            .osds
            .lock()
            .expect("OSD client map poisoned")
            .remove(addr);
    }

    /// Runs a metadata call under its deadline, retried by the client's policy.
    pub(crate) async fn meta<T, F, Fut>(&self, what: &str, call: F) -> Result<T, ClientError>
    where
        F: Fn(MdsClient) -> Fut,
        Fut: Future<Output = Result<T, MdsError>>,
    {
        let this = self;
        let call = &call;
        let timeout = self.meta_timeout();
        self.retrying(
            what,
            || false,
            move |_| async move { this.deadline(what, timeout, call(this.mds().clone())).await },
        )
        .await
    }

    /// Runs `op(attempt)` under the client's retry policy, whose time budget starts again after
    /// an attempt that `progressed()` says moved data ([`retry_with_progress`]); a retryable error
    /// that outlives the policy becomes [`ClientError::GaveUp`], naming `what`, the attempts and
    /// the last error.
    async fn retrying<T, F, Fut>(
        &self,
        what: &str,
        progressed: impl FnMut() -> bool,
        mut op: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let start = Instant::now();
        let attempts = AtomicU32::new(0);
        let attempts_ref = &attempts;
        let res = retry_with_progress(
            &self.inner.options.retry,
            ClientError::is_retryable,
            progressed,
            |a| {
                attempts_ref.store(a + 1, Ordering::Relaxed);
                op(a)
            },
        )
        .await;
        match res {
            Err(e) if e.is_retryable() => Err(ClientError::GaveUp {
                what: what.to_owned(),
                attempts: attempts.load(Ordering::Relaxed),
                ms: start.elapsed().as_millis() as u64,
                last: e.to_string(),
            }),
            r => r,
        }
    }

    /// Runs `op` against the segment's primary; every retry (after a backoff) first re-fetches
    /// the segment's layout from the MDS, so it reaches the new primary after a promotion and the
    /// new holders after a recovery. `op` adds the bytes it moves to its counter: an attempt fails
    /// once they stayed the same for `data_timeout` ([`idle_deadline`]). An attempt that moved bytes before
    /// it failed (a connection reset under a long read) restarts the retry policy's time budget, and
    /// so does the first attempt that ran out its deadline: the deadline outlasts the budget, so
    /// otherwise a primary that once stalled (a segment's lock held by a long rebuild) got no retry.
    pub(crate) async fn on_primary<T, F, Fut>(
        &self,
        segment: &SegmentLayout,
        what: &str,
        total: Option<u64>,
        op: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(OsdClient, Layout, Arc<AtomicU64>) -> Fut,
        Fut: Future<Output = Result<T, OsdCallError>>,
    {
        self.on_primary_tracking(segment, what, total, None, op)
            .await
    }

    /// [`Client::on_primary`] that leaves the layout a retry fetched from the MDS in `fresh` (a
    /// [`FileHandle`] keeps it for its next call).
    async fn on_primary_tracking<T, F, Fut>(
        &self,
        segment: &SegmentLayout,
        what: &str,
        total: Option<u64>,
        fresh: Option<&Mutex<Option<SegmentLayout>>>,
        op: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(OsdClient, Layout, Arc<AtomicU64>) -> Fut,
        Fut: Future<Output = Result<T, OsdCallError>>,
    {
        let this = self;
        let op = &op;
        let deadline = Idle {
            idle: self.inner.options.data_timeout,
            sent: total.map(|t| (t, self.inner.options.ack_timeout)),
        };
        // Whether the attempt that just failed had moved bytes (then the retry budget restarts).
        let progressed = AtomicBool::new(false);
        let progressed = &progressed;
        let stalled_before = AtomicBool::new(false);
        let stalled_before = &stalled_before;
        let check = || progressed.swap(false, Ordering::Relaxed);
        self.retrying(what, check, move |attempt| async move {
            let layout = if attempt == 0 {
                segment.clone()
            } else {
                let l = this
                    .deadline(
                        what,
                        this.meta_timeout(),
                        this.mds().get_segment(segment.segment_id),
                    )
                    .await?;
                if let Some(fresh) = fresh {
                    *fresh.lock().unwrap_or_else(|p| p.into_inner()) = Some(l.clone());
                }
                l
            };
            if layout.primary_addr.is_empty() {
                return Err(ClientError::Osd(OsdCallError::Unreachable {
                    addr: "(none)".into(),
                    message: format!("segment {} has no primary OSD now", layout.segment_id),
                }));
            }
            let osd = this.osd(&layout.primary_addr)?;
            let moved = Arc::new(AtomicU64::new(0));
            let res = idle_deadline(
                what,
                deadline,
                &moved,
                op(osd, Layout::from(&layout), moved.clone()),
            )
            .await;
            if matches!(
                res,
                Err(ClientError::Osd(OsdCallError::Unreachable { .. }))
                    | Err(ClientError::Timeout { .. })
                    | Err(ClientError::Stalled { .. })
            ) {
                this.forget_osd(&layout.primary_addr);
            }
            if res.is_err() {
                let bytes = moved.load(Ordering::Relaxed);
                progressed.store(
                    restarts_budget(bytes, &res, stalled_before),
                    Ordering::Relaxed,
                );
                if let Some(f) = &this.inner.options.failed_attempts {
                    f.attempts.fetch_add(1, Ordering::Relaxed);
                    f.bytes.fetch_add(bytes, Ordering::Relaxed);
                    if let (Ok(mut last), Err(e)) = (f.last_error.lock(), &res) {
                        *last = Some(format!(
                            "{what} at primary osd {} {} (after {bytes} bytes): {e}",
                            layout.primary, layout.primary_addr
                        ));
                    }
                }
            }
            res
        })
        .await
    }

    /// Stores the bytes of `reader` as `path` (replacing a file of that path when it commits).
    /// Returns the file's size. Segments are written `window_segments_max` segments' bytes in
    /// transit at a time (`window.rs`); each is read into its own buffer and sent from it (one
    /// copy: the read).
    pub async fn put<R: AsyncRead + Unpin>(
        &self,
        path: &str,
        reader: R,
    ) -> Result<u64, ClientError> {
        self.put_with(path, reader, PutOptions::default()).await
    }

    /// [`Client::put`] with [`PutOptions`] (the file's update scheme).
    pub async fn put_with<R: AsyncRead + Unpin>(
        &self,
        path: &str,
        reader: R,
        options: PutOptions,
    ) -> Result<u64, ClientError> {
        self.put_from(path, ReaderSegments(reader), options).await
    }

    /// [`Client::put`] of bytes in memory: each segment is sent as slices of `data` (no copy).
    pub async fn put_bytes(&self, path: &str, data: Bytes) -> Result<u64, ClientError> {
        self.put_bytes_with(path, data, PutOptions::default()).await
    }

    /// [`Client::put_bytes`] with [`PutOptions`].
    pub async fn put_bytes_with(
        &self,
        path: &str,
        data: Bytes,
        options: PutOptions,
    ) -> Result<u64, ClientError> {
        self.put_from(path, data, options).await
    }

    async fn put_from<S: SegmentSource>(
        &self,
        path: &str,
        mut source: S,
        options: PutOptions,
    ) -> Result<u64, ClientError> {
        let what = format!("put {path}");
        let scheme = options.scheme;
        let file_id = self
            .meta(
                &what,
                |m| async move { m.create_file_with(path, scheme).await },
            )
            .await?;
        let segment_bytes = self.inner.config.segment_bytes;
        let window = self.inner.options.window_segments_max.max(1);
        let transit = Transit::new(window, segment_bytes);
        let mut in_flight: JoinSet<Result<(), ClientError>> = JoinSet::new();
        let mut size = 0u64;
        let mut eof = false;
        while !eof {
            // The segments to start next: as many as the window has room for (all of it at the
            // start, so the first window costs one MDS call, not `window` calls in a row — with
            // many clients those queue at the MDS's durable commits and the links idle meanwhile),
            // then one as each finishes. Read and allocated before waiting for the room, so the
            // MDS call overlaps the segments in flight.
            let room = window.saturating_sub(in_flight.len()).clamp(1, 1024);
            let mut batch = Vec::with_capacity(room);
            while batch.len() < room {
                let data = source
                    .next_segment(segment_bytes as usize)
                    .await
                    .map_err(|e| ClientError::io(format!("{what}: reading the input"), e))?;
                if data.is_empty() {
                    eof = true;
                    break;
                }
                size += data.len() as u64;
                eof = (data.len() as u64) < segment_bytes;
                batch.push(data);
                if eof {
                    break;
                }
            }
            if batch.is_empty() {
                break;
            }
            let lens: Vec<u64> = batch.iter().map(|d| d.len() as u64).collect();
            let lens = &lens;
            let hint = &options.osd_hint;
            let layouts = self
                .meta(&what, |m| async move {
                    m.allocate_segments_on(file_id, lens, hint).await
                })
                .await?;
            if layouts.len() != batch.len() {
                return Err(ClientError::Layout(format!(
                    "asked for {} segment(s), got {}",
                    batch.len(),
                    layouts.len()
                )));
            }
            for (layout, data) in layouts.into_iter().zip(batch) {
                while !transit.has_room(in_flight.len()) {
                    tokio::select! {
                        r = join_one(&mut in_flight) => r?,
                        () = transit.moved() => {}
                    }
                }
                let leg = transit.start(data.len() as u64);
                let client = self.clone();
                let seg_what = format!("{what}: segment {}", layout.index);
                let sent = self.inner.options.sent.clone();
                // The first attempt writes the layout AllocateSegments just returned: the
                // primary need not ask the holders for versions a new segment cannot have. A
                // retry may find chunks of the attempt before, so it says nothing.
                let first = AtomicBool::new(true);
                in_flight.spawn(async move {
                    client
                        .on_primary(
                            &layout,
                            &seg_what,
                            Some(data.len() as u64),
                            |osd, l, moved| {
                                let (data, sent, leg) = (data.clone(), sent.clone(), leg.clone());
                                let age = match first.swap(false, Ordering::Relaxed) {
                                    true => SegmentAge::New,
                                    false => SegmentAge::Existing,
                                };
                                async move {
                                    osd.write_segment_bytes_with(&l, data, age, move |n| {
                                        moved.fetch_add(n, Ordering::Relaxed);
                                        leg.moved(n);
                                        if let Some(s) = &sent {
                                            s.fetch_add(n, Ordering::Relaxed);
                                        }
                                    })
                                    .await
                                }
                            },
                        )
                        .await?;
                    client.advance(data.len() as u64);
                    Ok(())
                });
            }
        }
        while !in_flight.is_empty() {
            join_one(&mut in_flight).await?;
        }
        self.meta(&what, |m| async move { m.commit_file(file_id, size).await })
            .await?;
        Ok(size)
    }

    /// [`Client::put`] from a local file.
    pub async fn put_file(&self, path: &str, local: &Path) -> Result<u64, ClientError> {
        self.put_file_with(path, local, PutOptions::default()).await
    }

    /// [`Client::put_file`] with [`PutOptions`].
    pub async fn put_file_with(
        &self,
        path: &str,
        local: &Path,
        options: PutOptions,
    ) -> Result<u64, ClientError> {
        let f = tokio::fs::File::open(local)
            .await
            .map_err(|e| ClientError::io(format!("cannot open {}", local.display()), e))?;
        self.put_with(
            path,
            tokio::io::BufReader::with_capacity(1 << 20, f),
            options,
        )
        .await
    }

    /// The committed file `path` with the layout of every segment.
    pub async fn stat(&self, path: &str) -> Result<FileInfo, ClientError> {
        let what = format!("stat {path}");
        self.meta(&what, |m| async move { m.lookup_file(path).await })
            .await
    }

    /// Writes `length` bytes of `path` from `offset` (`None`: to the end) to `writer`, in order.
    /// `window_segments_max` segments' bytes are in transit at once (`window.rs`), the segments
    /// chosen by [`ReadOrder`] within twice that many from the first one not yet written (the
    /// next in order first, then those whose OSDs this read loads least). Returns the bytes
    /// written.
    pub async fn get<W: AsyncWrite + Unpin>(
        &self,
        path: &str,
        offset: u64,
        length: Option<u64>,
        writer: &mut W,
    ) -> Result<u64, ClientError> {
        self.get_ranges(path, &[(offset, length)], writer).await
    }

    /// Writes the ranges `(offset, length)` of `path` (a `None` length: to the end of the file) to
    /// `writer`, one after another, as one read: fetched as [`Client::get`] fetches, with one window
    /// across the ranges — the next range's first segments are in flight while the last ones of
    /// the range before arrive (a client reading ranges one `get` at a time drains its window at
    /// the end of each). Every range is checked against the file before anything is written.
    /// Returns the bytes written.
    pub async fn get_ranges<W: AsyncWrite + Unpin>(
        &self,
        path: &str,
        ranges: &[(u64, Option<u64>)],
        writer: &mut W,
    ) -> Result<u64, ClientError> {
        let what = format!("get {path}");
        let mut sink = WriteSink {
            writer,
            what: &what,
        };
        let written = self.fetch(path, ranges, &what, &mut sink).await?;
        sink.writer
            .flush()
            .await
            .map_err(|e| ClientError::io(format!("{what}: writing the output"), e))?;
        Ok(written)
    }

    /// `length` bytes of `path` from `offset` as the frames they arrived in, in order, without
    /// joining them (no copy of the data in the client; [`Client::read`] joins them). Fetched as
    /// [`Client::get`] fetches.
    pub async fn read_frames(
        &self,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<Vec<Bytes>, ClientError> {
        let what = format!("get {path}");
        let mut frames = Vec::new();
        self.fetch(path, &[(offset, Some(length))], &what, &mut frames)
            .await?;
        Ok(frames)
    }

    /// The read behind [`Client::get_ranges`] and [`Client::read_frames`]: every piece of the
    /// ranges, fetched `window_segments_max` segments' bytes at once, handed to `sink` in order.
    /// Returns the bytes handed.
    async fn fetch<S: FrameSink>(
        &self,
        path: &str,
        ranges: &[(u64, Option<u64>)],
        what: &str,
        sink: &mut S,
    ) -> Result<u64, ClientError> {
        let file = self.stat(path).await?;
        if file.robust.is_some() {
            return self.fetch_robust(&file, ranges, sink).await;
        }
        self.fetch_of(&file, None, ranges, what, sink).await
    }

    /// [`Client::fetch`] of a robust file: the whole file read (all, then cancel), the ranges
    /// written from it.
    async fn fetch_robust<S: FrameSink>(
        &self,
        file: &FileInfo,
        ranges: &[(u64, Option<u64>)],
        sink: &mut S,
    ) -> Result<u64, ClientError> {
        let mut spans = Vec::with_capacity(ranges.len());
        for &(offset, length) in ranges {
            let length = length.unwrap_or(file.size.saturating_sub(offset));
            check_range(file, offset, length)?;
            spans.push((offset, length));
        }
        let (bytes, _) = self
            .get_robust(file, ecstack_osd_proto::StreamPriority::Normal)
            .await?;
        let mut written = 0;
        for (offset, length) in spans {
            let piece = bytes.slice(offset as usize..(offset + length) as usize);
            sink.take(vec![piece]).await?;
            self.advance(length);
            written += length;
        }
        Ok(written)
    }

    /// [`Client::fetch`] of `file` as looked up already. With `kept` (a [`FileHandle`]'s layouts,
    /// one per entry of `file.segments`), each piece starts from the kept layout of its segment,
    /// and a layout a retry fetched from the MDS replaces it.
    async fn fetch_of<S: FrameSink>(
        &self,
        file: &FileInfo,
        kept: Option<&Arc<Vec<Mutex<SegmentLayout>>>>,
        ranges: &[(u64, Option<u64>)],
        what: &str,
        sink: &mut S,
    ) -> Result<u64, ClientError> {
        let mut pieces = Vec::new();
        for &(offset, length) in ranges {
            let length = length.unwrap_or(file.size.saturating_sub(offset));
            check_range(&file, offset, length)?;
            pieces.extend(split_range(offset, length, file.segment_bytes));
        }
        let window = self.inner.options.window_segments_max.max(1);
        let k = self.config().code.k;
        let mut costs = Vec::with_capacity(pieces.len());
        for piece in &pieces {
            let layout = segment_of(&file, piece.segment)?;
            let data_holders: Vec<u32> = layout
                .chunks
                .iter()
                .filter(|c| c.index > 0 && c.index < k)
                .map(|c| c.osd_id)
                .collect();
            costs.push(ReadOrder::piece_cost(
                layout.primary,
                &data_holders,
                piece.length,
                k,
            ));
        }
        let transit = Transit::new(window, file.segment_bytes);
        let mut order = ReadOrder::new(costs, window.saturating_mul(2));
        let mut in_flight: JoinSet<(usize, Result<Vec<Bytes>, ClientError>)> = JoinSet::new();
        let mut arrived: BTreeMap<usize, Vec<Bytes>> = BTreeMap::new();
        let mut next_to_write = 0usize;
        let mut written = 0u64;
        loop {
            while transit.has_room(in_flight.len()) {
                let Some(i) = order.start_next(next_to_write) else {
                    break;
                };
                let piece = pieces[i];
                let at = segment_at(&file, piece.segment)?;
                let kept = kept.cloned();
                let layout = match &kept {
                    Some(k) => k[at].lock().unwrap_or_else(|p| p.into_inner()).clone(),
                    None => file.segments[at].clone(),
                };
                let client = self.clone();
                let seg_what = format!("{what}: segment {}", piece.segment);
                let leg = transit.start(piece.length);
                in_flight.spawn(async move {
                    let fresh = Mutex::new(None);
                    let r = client
                        .read_piece(
                            &layout,
                            &seg_what,
                            piece.offset,
                            piece.length,
                            &leg,
                            Some(&fresh),
                        )
                        .await;
                    keep_fresh(kept.as_deref().map(Vec::as_slice), at, fresh);
                    (i, r)
                });
            }
            let joined = tokio::select! {
                joined = in_flight.join_next() => joined,
                () = transit.moved(), if !in_flight.is_empty() => continue,
            };
            let Some(joined) = joined else {
                break;
            };
            let (i, data) =
                joined.map_err(|e| ClientError::Local(format!("{what}: read task failed: {e}")))?;
            order.finished(i);
            arrived.insert(i, data?);
            while let Some(frames) = arrived.remove(&next_to_write) {
                let bytes = frames_len(&frames);
                debug_assert_eq!(bytes, pieces[next_to_write].length);
                sink.take(frames).await?;
                written += bytes;
                self.advance(bytes);
                next_to_write += 1;
            }
        }
        debug_assert!(arrived.is_empty() && next_to_write == pieces.len());
        Ok(written)
    }

    /// `length` bytes of one segment from `offset` (inside the segment), by the client's
    /// [`ReadPath`]; `leg` hears the bytes as they arrive; `fresh` gets a layout a retry fetched.
    pub(crate) async fn read_piece(
        &self,
        layout: &SegmentLayout,
        what: &str,
        offset: u64,
        length: u64,
        leg: &Arc<Leg>,
        fresh: Option<&Mutex<Option<SegmentLayout>>>,
    ) -> Result<Vec<Bytes>, ClientError> {
        if self.inner.options.read_path == ReadPath::Direct {
            if let Some(frames) = self
                .read_direct(layout, what, offset, length, fresh)
                .await?
            {
                self.inner.reads[1].fetch_add(1, Ordering::Relaxed);
                return Ok(frames);
            }
            self.inner.reads[2].fetch_add(1, Ordering::Relaxed);
        } else {
            self.inner.reads[0].fetch_add(1, Ordering::Relaxed);
        }
        let received = self.inner.options.received.clone();
        self.on_primary_tracking(layout, what, None, fresh, move |osd, l, moved| {
            let (received, leg) = (received.clone(), leg.clone());
            async move {
                osd.read_segment_frames_with(&l, offset, length, move |n| {
                    moved.fetch_add(n, Ordering::Relaxed);
                    leg.moved(n);
                    if let Some(r) = &received {
                        r.fetch_add(n, Ordering::Relaxed);
                    }
                })
                .await
            }
        })
        .await
    }

    /// A direct read ([`ReadPath::Direct`]): the plan from the primary (retried like any primary
    /// call), then each data chunk's range from its holder, all at once. `None`: read it through
    /// the primary instead (degraded, a holder failed, a chunk not at its planned version). Only
    /// the plan's errors are returned (the primary path would meet them too).
    async fn read_direct(
        &self,
        layout: &SegmentLayout,
        what: &str,
        offset: u64,
        length: u64,
        fresh: Option<&Mutex<Option<SegmentLayout>>>,
    ) -> Result<Option<Vec<Bytes>>, ClientError> {
        if length == 0 {
            return Ok(Some(Vec::new()));
        }
        let (plan, l) = self
            .on_primary_tracking(layout, what, None, fresh, |osd, l, _moved| async move {
                let plan = osd.read_plan(&l, offset, length).await?;
                Ok((plan, l))
            })
            .await?;
        let Some(versions) = plan else {
            return Ok(None);
        };
        let k = versions.len();
        if k != self.config().code.k as usize || l.holders.len() <= k {
            return Err(ClientError::Layout(format!(
                "segment {:#x}: a read plan of {k} data chunks for {} {}+{} over {} holders",
                l.segment_id,
                self.config().code.family,
                self.config().code.k,
                self.config().code.m,
                l.holders.len()
            )));
        }
        let cb = ecstack_osd_proto::chunk_bytes(l.length, k, self.inner.chunk_align_bytes);
        let (first, last) = (offset / cb, (offset + length - 1) / cb);
        let timeout = self.inner.options.data_timeout;
        let mut reads = JoinSet::new();
        for i in first..=last {
            let h = &l.holders[i as usize];
            let lo = offset.max(i * cb) - i * cb;
            let hi = (offset + length).min((i + 1) * cb) - i * cb;
            let osd = self.osd(&h.addr)?.for_osd(h.osd_id);
            let (segment, index) = (l.segment_id, h.index);
            reads.spawn(async move {
                let r = tokio::time::timeout(
                    timeout,
                    osd.get_chunk_frames(segment, index, lo, hi - lo, None),
                )
                .await;
                (i, osd, r)
            });
        }
        let mut got: Vec<Option<Vec<Bytes>>> = vec![None; (last - first + 1) as usize];
        let mut usable = true;
        while let Some(joined) = reads.join_next().await {
            let Ok((i, osd, r)) = joined else {
                usable = false;
                continue;
            };
            match r {
                Ok(Ok((meta, frames)))
                    if meta.index as u64 == i
                        && meta.applied.is_empty()
                        && meta.version == versions[i as usize]
                        && meta.segment_length == l.length =>
                {
                    if let Some(r) = &self.inner.options.received {
                        r.fetch_add(frames_len(&frames), Ordering::Relaxed);
                    }
                    got[(i - first) as usize] = Some(frames);
                }
                Ok(Ok(_)) => usable = false, // another version: an update came in between
                Ok(Err(e)) => {
                    if matches!(e, OsdCallError::Unreachable { .. }) {
                        self.forget_osd(osd.addr());
                    }
                    usable = false;
                }
                Err(_) => {
                    self.forget_osd(osd.addr());
                    usable = false;
                }
            }
        }
        if !usable {
            return Ok(None);
        }
        Ok(Some(got.into_iter().flatten().flatten().collect()))
    }

    /// `length` bytes of `path` from `offset`, in memory.
    pub async fn read(&self, path: &str, offset: u64, length: u64) -> Result<Vec<u8>, ClientError> {
        let mut out = Vec::with_capacity(length as usize);
        self.get(path, offset, Some(length), &mut out).await?;
        Ok(out)
    }

    /// Overwrites `data.len()` bytes of the existing file `path` at `offset` (the range must lie
    /// inside the file): one FO update at the primary of every segment the range touches. Looks
    /// the file up first; a program that updates one file often keeps a [`FileHandle`] instead.
    pub async fn update(&self, path: &str, offset: u64, data: &[u8]) -> Result<(), ClientError> {
        let handle = self.open(path).await?;
        if handle.info().robust.is_some() {
            // A robust file's update re-encodes the objects it touches (`robust.rs`).
            return self
                .update_robust(
                    path,
                    offset,
                    data,
                    ecstack_osd_proto::StreamPriority::Normal,
                )
                .await
                .map(drop);
        }
        handle.update(offset, data).await
    }

    /// The file `path` as it is now, for updates and reads without a lookup each
    /// ([`FileHandle`]).
    pub async fn open(&self, path: &str) -> Result<FileHandle, ClientError> {
        let file = self.stat(path).await?;
        Ok(FileHandle {
            client: self.clone(),
            layouts: Arc::new(
                file.segments
                    .iter()
                    .map(|l| Mutex::new(l.clone()))
                    .collect(),
            ),
            file: Arc::new(file),
        })
    }

    pub async fn remove(&self, path: &str) -> Result<(), ClientError> {
        let what = format!("rm {path}");
        self.meta(&what, |m| async move { m.remove_file(path).await })
            .await
    }

    /// Committed files whose path starts with `prefix`, sorted by path.
    pub async fn list(&self, prefix: &str) -> Result<Vec<FileSummary>, ClientError> {
        let what = format!("ls {prefix}");
        self.meta(&what, |m| async move { m.list_files(prefix).await })
            .await
    }

    pub async fn status(&self) -> Result<ClusterStatus, ClientError> {
        self.meta("status", |m| async move { m.status().await })
            .await
    }

    /// Declares an OSD out (given by id or by name); returns how many chunks will be rebuilt.
    pub async fn osd_out(&self, osd: &str) -> Result<(u32, u64), ClientError> {
        let status = self.status().await?;
        let id = status
            .osds
            .iter()
            .find(|o| o.name == osd || o.osd_id.to_string() == osd)
            .map(|o| o.osd_id)
            .ok_or_else(|| {
                let known: Vec<String> = status
                    .osds
                    .iter()
                    .map(|o| format!("{} ({})", o.osd_id, o.name))
                    .collect();
                ClientError::Local(format!(
                    "no OSD {osd:?} in the cluster; known: {}",
                    known.join(", ")
                ))
            })?;
        let what = format!("osd out {osd}");
        let chunks = self
            .meta(&what, |m| async move { m.osd_out(id).await })
            .await?;
        Ok((id, chunks))
    }

    /// Polls `status` until `pred` holds (or `timeout` passes: one error naming `what`).
    pub async fn wait_status(
        &self,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&ClusterStatus) -> bool,
    ) -> Result<ClusterStatus, ClientError> {
        let start = Instant::now();
        loop {
            let last = match self
                .deadline(what, self.meta_timeout(), self.mds().status())
                .await
            {
                Ok(s) if pred(&s) => return Ok(s),
                Ok(s) => summary(&s),
                Err(e) if e.is_retryable() => e.to_string(),
                Err(e) => return Err(e),
            };
            if start.elapsed() > timeout {
                return Err(ClientError::Local(format!(
                    "{what}: not reached within {} ms (now: {last})",
                    timeout.as_millis()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `n` OSDs are registered and up.
    pub async fn wait_for_osds(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<ClusterStatus, ClientError> {
        self.wait_status(&format!("waiting for {n} OSDs up"), timeout, |s| {
            s.osds.iter().filter(|o| o.state == OsdState::Up).count() >= n
        })
        .await
    }

    /// Waits until every segment is healthy (no degraded, recovering or lost segment).
    pub async fn wait_for_health(&self, timeout: Duration) -> Result<ClusterStatus, ClientError> {
        self.wait_status("waiting for full redundancy", timeout, |s| {
            s.segments_degraded == 0 && s.segments_recovering == 0 && s.segments_lost == 0
        })
        .await
    }
}

/// One line about a status (for timeouts and logs).
pub fn summary(s: &ClusterStatus) -> String {
    let count = |st: OsdState| s.osds.iter().filter(|o| o.state == st).count();
    format!(
        "OSDs {} up / {} down / {} out; segments {} healthy, {} degraded, {} recovering, {} lost",
        count(OsdState::Up),
        count(OsdState::Down),
        count(OsdState::Out),
        s.segments_healthy,
        s.segments_degraded,
        s.segments_recovering,
        s.segments_lost
    )
}

/// Whether a failed attempt at a primary that moved `bytes` and ended in `res` restarts the retry
/// budget ([`Client::on_primary`]): it moved bytes, or it is the call's first to run out its
/// deadline (`stalled_before` remembers one did).
fn restarts_budget<T>(
    bytes: u64,
    res: &Result<T, ClientError>,
    stalled_before: &AtomicBool,
) -> bool {
    let ran_out = matches!(
        res,
        Err(ClientError::Timeout { .. }) | Err(ClientError::Stalled { .. })
    );
    bytes > 0 || (ran_out && !stalled_before.swap(true, Ordering::Relaxed))
}

/// The deadline of one attempt at a primary ([`idle_deadline`]).
#[derive(Debug, Clone, Copy)]
struct Idle {
    /// The attempt fails once its bytes moved stayed the same this long...
    idle: Duration,
    /// ...or, once it has moved all of its `.0` bytes (a write waiting for its acknowledgement),
    /// this long (`.1`).
    sent: Option<(u64, Duration)>,
}

impl Idle {
    fn after(&self, moved: u64) -> Duration {
        match self.sent {
            Some((total, ack)) if moved >= total => ack.max(self.idle),
            _ => self.idle,
        }
    }
}

/// Runs `fut` until it ends, or fails once `moved` (the bytes it has moved so far) stayed the
/// same for the deadline's `idle` (its `sent` once every byte has moved).
async fn idle_deadline<T, E: Into<ClientError>>(
    what: &str,
    deadline: Idle,
    moved: &AtomicU64,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, ClientError> {
    tokio::pin!(fut);
    let tick = (deadline.idle / 8).max(Duration::from_millis(1));
    let mut seen = moved.load(Ordering::Relaxed);
    let mut since = Instant::now();
    loop {
        tokio::select! {
            r = &mut fut => return r.map_err(Into::into),
            () = tokio::time::sleep(tick) => {
                let now = moved.load(Ordering::Relaxed);
                let idle = deadline.after(now);
                if now != seen {
                    (seen, since) = (now, Instant::now());
                } else if since.elapsed() >= idle {
                    return Err(ClientError::Stalled {
                        what: what.to_owned(),
                        ms: idle.as_millis() as u64,
                    });
                }
            }
        }
    }
}

fn check_range(file: &FileInfo, offset: u64, length: u64) -> Result<(), ClientError> {
    let end = offset.checked_add(length);
    match end {
        Some(end) if end <= file.size => {}
        _ => {
            return Err(ClientError::Range {
                path: file.path.clone(),
                offset,
                end: end.unwrap_or(u64::MAX),
                size: file.size,
            })
        }
    }
    if file.robust.is_some() {
        // Blocks, not segments: the range is all there is to check.
        return Ok(());
    }
    if file.segment_bytes == 0 {
        return Err(ClientError::Layout(format!(
            "{}: segment size 0",
            file.path
        )));
    }
    let want = segment_lengths(file.size, file.segment_bytes).len();
    if file.segments.len() != want {
        return Err(ClientError::Layout(format!(
            "{}: {} bytes in segments of {} need {want} segments, the MDS lists {}",
            file.path,
            file.size,
            file.segment_bytes,
            file.segments.len()
        )));
    }
    Ok(())
}

fn segment_of(file: &FileInfo, index: usize) -> Result<&SegmentLayout, ClientError> {
    Ok(&file.segments[segment_at(file, index)?])
}

/// Where segment `index` is in `file.segments`.
fn segment_at(file: &FileInfo, index: usize) -> Result<usize, ClientError> {
    file.segments
        .iter()
        .position(|s| s.index as usize == index)
        .ok_or_else(|| {
            ClientError::Layout(format!("{}: the MDS lists no segment {index}", file.path))
        })
}

/// A layout a retry fetched (`fresh`) replaces entry `at` of a [`FileHandle`]'s `kept` layouts.
fn keep_fresh(
    kept: Option<&[Mutex<SegmentLayout>]>,
    at: usize,
    fresh: Mutex<Option<SegmentLayout>>,
) {
    if let (Some(kept), Some(l)) = (kept, fresh.into_inner().unwrap_or_else(|p| p.into_inner())) {
        *kept[at].lock().unwrap_or_else(|p| p.into_inner()) = l;
    }
}

async fn join_one(set: &mut JoinSet<Result<(), ClientError>>) -> Result<(), ClientError> {
    match set.join_next().await {
        Some(Ok(r)) => r,
        Some(Err(e)) => Err(ClientError::Local(format!("segment task failed: {e}"))),
        None => Ok(()),
    }
}

/// The bytes in `frames`.
fn frames_len(frames: &[Bytes]) -> u64 {
    frames.iter().map(|f| f.len() as u64).sum()
}

/// Reads until `max` bytes or the end of the input.
/// Where [`Client::put`] takes its segments from.
trait SegmentSource {
    /// The next at most `max` bytes (fewer only at the end; empty after it).
    async fn next_segment(&mut self, max: usize) -> std::io::Result<Bytes>;
}

/// A reader's bytes, each segment read into a buffer of its own (not zero-filled first).
struct ReaderSegments<R>(R);

impl<R: AsyncRead + Unpin> SegmentSource for ReaderSegments<R> {
    async fn next_segment(&mut self, max: usize) -> std::io::Result<Bytes> {
        let mut buf = Vec::with_capacity(max);
        while buf.len() < max {
            let room = max - buf.len();
            let mut rest = (&mut buf).limit(room);
            if self.0.read_buf(&mut rest).await? == 0 {
                break;
            }
        }
        Ok(Bytes::from(buf))
    }
}

/// Bytes in memory: each segment a slice of them.
impl SegmentSource for Bytes {
    async fn next_segment(&mut self, max: usize) -> std::io::Result<Bytes> {
        Ok(self.split_to(max.min(self.len())))
    }
}

/// Where [`Client::fetch`] hands each piece's frames, in order.
trait FrameSink {
    async fn take(&mut self, frames: Vec<Bytes>) -> Result<(), ClientError>;
}

/// [`Client::get`]: every frame written to the caller's writer.
struct WriteSink<'a, W> {
    writer: &'a mut W,
    what: &'a str,
}

impl<W: AsyncWrite + Unpin> FrameSink for WriteSink<'_, W> {
    async fn take(&mut self, frames: Vec<Bytes>) -> Result<(), ClientError> {
        for data in frames {
            self.writer
                .write_all(&data)
                .await
                .map_err(|e| ClientError::io(format!("{}: writing the output", self.what), e))?;
        }
        Ok(())
    }
}

/// [`Client::read_frames`]: the frames kept as they are.
impl FrameSink for Vec<Bytes> {
    async fn take(&mut self, frames: Vec<Bytes>) -> Result<(), ClientError> {
        self.extend(frames);
        Ok(())
    }
}

/// An open file ([`Client::open`]): its size and segment layouts as looked up once, so an update
/// or a read goes straight to each segment's primary (or, for a direct read, its holders) without
/// asking the MDS first. A segment whose primary moved since, or whose layout the primary refuses
/// as stale (an older epoch than one it has seen), is looked up again by the call's retry, and the
/// handle keeps that layout for its next call. A handle is of one file: if the path is removed
/// (or put anew) its calls fail with the OSDs' and the MDS's errors; open it again.
#[derive(Clone)]
pub struct FileHandle {
    client: Client,
    file: Arc<FileInfo>,
    layouts: Arc<Vec<Mutex<SegmentLayout>>>,
}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FileHandle({}, id {})",
            self.file.path, self.file.file_id
        )
    }
}

impl FileHandle {
    /// The file as it was when opened (its layouts may have moved on since).
    pub fn info(&self) -> &FileInfo {
        &self.file
    }

    /// [`Client::update`] of this file.
    pub async fn update(&self, offset: u64, data: &[u8]) -> Result<(), ClientError> {
        let file = &self.file;
        check_range(file, offset, data.len() as u64)?;
        let what = format!("update {}", file.path);
        let data = Arc::new(data.to_vec());
        let window = self.client.inner.options.window_segments_max.max(1);
        let mut in_flight: JoinSet<Result<(), ClientError>> = JoinSet::new();
        for piece in split_range(offset, data.len() as u64, file.segment_bytes) {
            let at = segment_at(file, piece.segment)?;
            let layout = self.layouts[at]
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            while in_flight.len() >= window {
                join_one(&mut in_flight).await?;
            }
            let (client, data, layouts) = (self.client.clone(), data.clone(), self.layouts.clone());
            let seg_what = format!("{what}: segment {}", piece.segment);
            in_flight.spawn(async move {
                let range = piece.at as usize..(piece.at + piece.length) as usize;
                let fresh = Mutex::new(None);
                let r = client
                    .on_primary_tracking(
                        &layout,
                        &seg_what,
                        None,
                        Some(&fresh),
                        |osd, l, _moved| {
                            let data = data.clone();
                            let range = range.clone();
                            async move { osd.update_segment(&l, piece.offset, &data[range]).await }
                        },
                    )
                    .await
                    .map(drop);
                keep_fresh(Some(&layouts[..]), at, fresh);
                r
            });
        }
        while !in_flight.is_empty() {
            join_one(&mut in_flight).await?;
        }
        Ok(())
    }

    /// `length` bytes of this file from `offset`, in memory: [`Client::read`] without the lookup,
    /// each segment from its kept layout (a layout a retry fetched is kept, as for updates).
    pub async fn read(&self, offset: u64, length: u64) -> Result<Vec<u8>, ClientError> {
        let mut frames = Vec::new();
        self.client
            .fetch_of(
                &self.file,
                Some(&self.layouts),
                &[(offset, Some(length))],
                &format!("get {}", self.file.path),
                &mut frames,
            )
            .await?;
        let mut out = Vec::with_capacity(length as usize);
        for f in frames {
            out.extend_from_slice(&f);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_or_a_first_stall_restarts_the_retry_budget() {
        let stalled_before = AtomicBool::new(false);
        let stall = || -> Result<(), ClientError> {
            Err(ClientError::Stalled {
                what: "get".into(),
                ms: 10,
            })
        };
        let reset = || -> Result<(), ClientError> { Err(ClientError::Local("reset".into())) };
        assert!(!restarts_budget(0, &reset(), &stalled_before));
        assert!(restarts_budget(5, &reset(), &stalled_before));
        assert!(
            restarts_budget(0, &stall(), &stalled_before),
            "the first stall"
        );
        assert!(
            !restarts_budget(0, &stall(), &stalled_before),
            "not the second"
        );
        assert!(
            restarts_budget(1, &stall(), &stalled_before),
            "progress still does"
        );
    }

    #[tokio::test]
    async fn a_call_that_keeps_moving_outlives_the_idle_deadline_and_a_stalled_one_does_not() {
        let idle = Duration::from_millis(200);
        // A byte every 50 ms for 600 ms: three deadlines in all, never one without progress.
        let moved = Arc::new(AtomicU64::new(0));
        let m = moved.clone();
        let slow = async move {
            for _ in 0..12 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                m.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, ClientError>(12u64)
        };
        let t = Instant::now();
        let plain = Idle { idle, sent: None };
        assert_eq!(
            idle_deadline("slow", plain, &moved, slow).await.unwrap(),
            12
        );
        assert!(t.elapsed() >= Duration::from_millis(600));
        // Three bytes, then nothing: stalled, retryable, within a tick of the deadline.
        let moved = Arc::new(AtomicU64::new(0));
        let m = moved.clone();
        let stalled = async move {
            m.fetch_add(3, Ordering::Relaxed);
            std::future::pending::<Result<u64, ClientError>>().await
        };
        let t = Instant::now();
        let e = idle_deadline("stalled", plain, &moved, stalled)
            .await
            .unwrap_err();
        assert!(matches!(e, ClientError::Stalled { ms: 200, .. }), "{e}");
        assert!(e.is_retryable());
        assert_eq!(e.to_string(), "stalled: no byte moved for 200 ms");
        assert!(t.elapsed() >= idle && t.elapsed() < Duration::from_secs(2));
        // A write whose bytes have all moved waits for its acknowledgement for longer: the
        // answer at 500 ms (past the idle deadline) is taken, and then the acknowledgement
        // deadline runs out as well.
        let sent = Idle {
            idle,
            sent: Some((3, Duration::from_millis(800))),
        };
        let m = AtomicU64::new(3);
        let acked = async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            Ok::<_, ClientError>(3u64)
        };
        assert_eq!(idle_deadline("acked", sent, &m, acked).await.unwrap(), 3);
        let m = AtomicU64::new(3);
        let t = Instant::now();
        let e = idle_deadline(
            "unacked",
            sent,
            &m,
            std::future::pending::<Result<u64, ClientError>>(),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, ClientError::Stalled { ms: 800, .. }), "{e}");
        assert!(t.elapsed() >= Duration::from_millis(800));
        // Bytes still to send: the idle deadline.
        let m = AtomicU64::new(2);
        let e = idle_deadline(
            "short",
            sent,
            &m,
            std::future::pending::<Result<u64, ClientError>>(),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, ClientError::Stalled { ms: 200, .. }), "{e}");
    }
}
