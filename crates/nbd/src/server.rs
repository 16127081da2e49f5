//! The NBD server: an accept thread, one reader thread per connection that negotiates the export
//! (fixed newstyle) and then parses requests, a small worker pool shared by all connections that runs
//! the device operations, and replies serialized on a per-connection write lock.
//!
//! Requests of one connection are pipelined: the reader keeps parsing while earlier requests run, so
//! replies may come back out of order (the protocol allows it; the cookie matches them). In-flight work
//! per connection is bounded (count and payload bytes), so a client that streams writes faster than the
//! device absorbs them is slowed down by TCP back-pressure rather than by server memory growth.

use std::collections::HashMap;
use std::io::{self, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use ecstack_device::{BlockDevice, DeviceError};
use tracing::{debug, info, warn};

use crate::admin::{Admin, AdminServer, Export};
use crate::proto::*;
use crate::NbdError;

/// How to serve an export.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to listen on. Default `127.0.0.1:10809` (the IANA NBD port, loopback only); port 0
    /// picks a free port (see [`Server::addr`]).
    pub addr: SocketAddr,
    /// Export name clients ask for. The empty name is accepted as the default export too.
    pub export_name: String,
    /// Optional description sent with `NBD_INFO_DESCRIPTION` when the client asks for it.
    pub description: Option<String>,
    /// Refuse writes, trims and zeroing with `EPERM`; the export is advertised read-only.
    pub read_only: bool,
    /// Serve the admin channel on this Unix socket.
    pub admin_socket: Option<PathBuf>,
    /// Worker threads running device operations (shared by all connections).
    pub workers: usize,
    /// Concurrent client connections; more are closed right after accept.
    pub max_connections: usize,
    /// Minimum block size advertised (1 = any byte offset and length; the array handles unaligned I/O).
    /// Requests not aligned to it get `EINVAL`.
    pub min_block_size: u32,
    /// Preferred block size advertised.
    pub preferred_block_size: u32,
    /// Time a client has to finish negotiation.
    pub handshake_timeout: Duration,
    /// While the device's recent service time (moving average) is below this, requests run on the
    /// connection's reader thread (no thread hand-off: best for fast devices such as `mem:` or the page
    /// cache); slower devices go through the worker pool so a connection's requests overlap. A request
    /// that finds its connection otherwise idle always runs inline. `Duration::ZERO`: pool only.
    pub inline_below: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 10809),
            export_name: "ecstack".to_string(),
            description: None,
            read_only: false,
            admin_socket: None,
            workers: 8,
            max_connections: 64,
            min_block_size: 1,
            preferred_block_size: 4096,
            handshake_timeout: Duration::from_secs(30),
            inline_below: Duration::from_micros(20),
        }
    }
}

impl ServeConfig {
    fn validate(&self) -> Result<(), NbdError> {
        let bad = |m: String| Err(NbdError::Config(m));
        if self.export_name.len() > MAX_NAME_LEN || self.export_name.contains('\0') {
            return bad("export name must be at most 4096 bytes without NUL".into());
        }
        if self.workers == 0 || self.max_connections == 0 {
            return bad("workers and max_connections must be at least 1".into());
        }
        let min = self.min_block_size;
        if !min.is_power_of_two() || min > 65536 {
            return bad(format!(
                "min_block_size {min} must be a power of two <= 65536"
            ));
        }
        let pref = self.preferred_block_size;
        if !pref.is_power_of_two() || pref < min.max(512) || pref > MAX_PAYLOAD {
            return bad(format!(
                "preferred_block_size {pref} must be a power of two between max(min_block_size, 512) and 32 MiB"
            ));
        }
        Ok(())
    }
}

/// Counters of a running server (`nbd-stats` on the admin socket).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ServerStats {
    pub connections_total: u64,
    pub connections_active: u64,
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub trims: u64,
    pub trim_bytes: u64,
    pub write_zeroes: u64,
    /// Replies carrying an error value.
    pub error_replies: u64,
    /// Connections ended because of protocol violations (bad magic, oversized payloads, …).
    pub protocol_errors: u64,
}

#[derive(Default)]
struct Counters {
    connections_total: AtomicU64,
    reads: AtomicU64,
    read_bytes: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    flushes: AtomicU64,
    trims: AtomicU64,
    trim_bytes: AtomicU64,
    write_zeroes: AtomicU64,
    error_replies: AtomicU64,
    protocol_errors: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Fixed-size thread pool fed by a channel.
struct Pool {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Pool {
    fn new(n: usize) -> Result<Pool, NbdError> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let rx = Arc::clone(&rx);
            let h = thread::Builder::new()
                .name(format!("nbd-worker-{i}"))
                .spawn(move || loop {
                    let job = lock(&rx).recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => break,
                    }
                })
                .map_err(|e| NbdError::Io {
                    what: "spawning NBD worker thread".into(),
                    err: e,
                })?;
            threads.push(h);
        }
        Ok(Pool {
            tx: Mutex::new(Some(tx)),
            threads: Mutex::new(threads),
        })
    }

    /// Queue `job`; when the pool is closed it runs on the caller's thread.
    fn submit(&self, job: Job) {
        let job = match &*lock(&self.tx) {
            Some(tx) => match tx.send(job) {
                Ok(()) => return,
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        job()
    }

    fn close(&self) {
        lock(&self.tx).take();
        for h in lock(&self.threads).drain(..) {
            let _ = h.join();
        }
    }
}

/// Stop request shared by [`Server`], its [`ShutdownHandle`]s and the admin `shutdown` command.
#[derive(Default)]
pub(crate) struct StopSignal {
    requested: Mutex<bool>,
    cv: Condvar,
}

impl StopSignal {
    pub(crate) fn request(&self) {
        *lock(&self.requested) = true;
        self.cv.notify_all();
    }
    fn wait(&self) {
        let mut g = lock(&self.requested);
        while !*g {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
    fn is_requested(&self) -> bool {
        *lock(&self.requested)
    }
}

/// A cloneable, thread-safe way to ask a [`Server`] to stop (from a signal handler thread, an admin
/// command, another test thread). [`Server::wait`] returns once the server is down.
#[derive(Clone)]
pub struct ShutdownHandle {
    pub(crate) stop: Arc<StopSignal>,
}

impl ShutdownHandle {
    /// Ask the server to stop; returns at once.
    pub fn shutdown(&self) {
        self.stop.request()
    }
    /// Has a stop been requested?
    pub fn is_requested(&self) -> bool {
        self.stop.is_requested()
    }
}

struct ConnEntry {
    stream: TcpStream,
    thread: Option<JoinHandle<()>>,
}

pub(crate) struct Shared {
    pub(crate) dev: Arc<dyn BlockDevice>,
    cfg: ServeConfig,
    size: u64,
    tflags: u16,
    counters: Counters,
    stopping: AtomicBool,
    pub(crate) stop: Arc<StopSignal>,
    conns: Mutex<HashMap<u64, ConnEntry>>,
    next_conn: AtomicU64,
    pool: Pool,
}

impl Export for Shared {
    fn stats_json(&self) -> Result<serde_json::Value, String> {
        let mut v = serde_json::to_value(self.stats()).map_err(|e| e.to_string())?;
        v["export"] = self.export_name().into();
        v["size"] = self.size().into();
        v["device"] = self.dev.name().into();
        Ok(v)
    }

    fn device(&self) -> &dyn BlockDevice {
        self.dev.as_ref()
    }

    fn request_stop(&self) {
        self.stop.request();
    }
}

impl Shared {
    pub(crate) fn stats(&self) -> ServerStats {
        let c = &self.counters;
        ServerStats {
            connections_total: c.connections_total.load(Relaxed),
            connections_active: lock(&self.conns).len() as u64,
            reads: c.reads.load(Relaxed),
            read_bytes: c.read_bytes.load(Relaxed),
            writes: c.writes.load(Relaxed),
            write_bytes: c.write_bytes.load(Relaxed),
            flushes: c.flushes.load(Relaxed),
            trims: c.trims.load(Relaxed),
            trim_bytes: c.trim_bytes.load(Relaxed),
            write_zeroes: c.write_zeroes.load(Relaxed),
            error_replies: c.error_replies.load(Relaxed),
            protocol_errors: c.protocol_errors.load(Relaxed),
        }
    }

    pub(crate) fn export_name(&self) -> &str {
        &self.cfg.export_name
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }
}

/// A running NBD server. Dropping it shuts it down (like [`Server::shutdown`], ignoring errors).
pub struct Server {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: Option<JoinHandle<()>>,
    admin: Option<AdminServer>,
    down: bool,
}

impl Server {
    /// Bind `cfg.addr` (and `cfg.admin_socket`), start the accept thread and the worker pool, and
    /// return at once. The export's size is `dev.capacity()`.
    pub fn start(
        dev: Arc<dyn BlockDevice>,
        admin: Option<Arc<dyn Admin>>,
        cfg: ServeConfig,
    ) -> Result<Server, NbdError> {
        cfg.validate()?;
        let listener = TcpListener::bind(cfg.addr).map_err(|e| NbdError::Bind {
            addr: cfg.addr.to_string(),
            err: e,
        })?;
        let addr = listener.local_addr().map_err(|e| NbdError::Io {
            what: "reading the bound address".into(),
            err: e,
        })?;
        let mut tflags = FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_FUA | FLAG_CAN_MULTI_CONN;
        if cfg.read_only {
            tflags |= FLAG_READ_ONLY;
        } else {
            tflags |= FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES;
        }
        let pool = Pool::new(cfg.workers)?;
        let shared = Arc::new(Shared {
            size: dev.capacity(),
            dev,
            tflags,
            counters: Counters::default(),
            stopping: AtomicBool::new(false),
            stop: Arc::new(StopSignal::default()),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            pool,
            cfg,
        });
        let admin_server = match &shared.cfg.admin_socket {
            Some(path) => match AdminServer::start(
                path.clone(),
                admin,
                Arc::clone(&shared) as Arc<dyn Export>,
            ) {
                Ok(a) => Some(a),
                Err(e) => {
                    shared.pool.close();
                    return Err(e);
                }
            },
            None => None,
        };
        let sh = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("nbd-accept".into())
            .spawn(move || accept_loop(sh, listener));
        let accept = match accept {
            Ok(h) => h,
            Err(e) => {
                shared.pool.close();
                if let Some(a) = admin_server {
                    a.stop();
                }
                return Err(NbdError::Io {
                    what: "spawning NBD accept thread".into(),
                    err: e,
                });
            }
        };
        info!(
            "nbd: serving {} ({} bytes{}) at nbd://{}/{}",
            shared.dev.name(),
            shared.size,
            if shared.cfg.read_only {
                ", read-only"
            } else {
                ""
            },
            addr,
            shared.cfg.export_name
        );
        Ok(Server {
            shared,
            addr,
            accept: Some(accept),
            admin: admin_server,
            down: false,
        })
    }

    /// The address the server listens on (with the real port when `cfg.addr` had port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `nbd://HOST:PORT/NAME`, the URI libnbd clients (nbdinfo, nbdcopy, fio) take.
    pub fn uri(&self) -> String {
        let host = match self.addr.ip() {
            IpAddr::V6(ip) => format!("[{ip}]"),
            IpAddr::V4(ip) => ip.to_string(),
        };
        format!(
            "nbd://{host}:{}/{}",
            self.addr.port(),
            self.shared.cfg.export_name
        )
    }

    /// Counters so far.
    pub fn stats(&self) -> ServerStats {
        self.shared.stats()
    }

    /// A handle that asks this server to stop.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            stop: Arc::clone(&self.shared.stop),
        }
    }

    /// Block until a stop is requested (a [`ShutdownHandle`], the admin `shutdown` command, or a signal
    /// when started through [`crate::serve`]), then shut down like [`Server::shutdown`].
    pub fn wait(mut self) -> Result<(), NbdError> {
        self.shared.stop.wait();
        self.teardown()
    }

    /// Stop accepting, close every connection (requests already running finish first), stop the
    /// workers and the admin socket, and flush the device.
    pub fn shutdown(mut self) -> Result<(), NbdError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), NbdError> {
        if self.down {
            return Ok(());
        }
        self.down = true;
        self.shared.stop.request();
        self.shared.stopping.store(true, Relaxed);
        if let Some(h) = self.accept.take() {
            // Wake the blocking accept() with a connection of our own.
            let mut wake = self.addr;
            if wake.ip().is_unspecified() {
                wake.set_ip(match wake.ip() {
                    IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
                });
            }
            if TcpStream::connect_timeout(&wake, Duration::from_secs(2)).is_ok() {
                let _ = h.join();
            }
        }
        let entries: Vec<ConnEntry> = lock(&self.shared.conns).drain().map(|(_, e)| e).collect();
        for e in &entries {
            let _ = e.stream.shutdown(Shutdown::Both);
        }
        for e in entries {
            if let Some(t) = e.thread {
                let _ = t.join();
            }
        }
        self.shared.pool.close();
        if let Some(a) = self.admin.take() {
            a.stop();
        }
        let res = self.shared.dev.flush();
        info!("nbd: server at {} stopped", self.addr);
        res.map_err(NbdError::Device)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            warn!("nbd: shutting down: {e}");
        }
    }
}

fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    for incoming in listener.incoming() {
        if shared.stopping.load(Relaxed) {
            break;
        }
        let stream = match incoming {
            Ok(s) => s,
            Err(e) => {
                warn!("nbd: accept failed: {e}");
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        if lock(&shared.conns).len() >= shared.cfg.max_connections {
            warn!(
                "nbd: {peer}: refused, {} connections already open",
                shared.cfg.max_connections
            );
            continue;
        }
        let clone = match stream.try_clone() {
            Ok(c) => c,
            Err(e) => {
                warn!("nbd: {peer}: cannot clone socket: {e}");
                continue;
            }
        };
        let id = shared.next_conn.fetch_add(1, Relaxed);
        shared.counters.connections_total.fetch_add(1, Relaxed);
        lock(&shared.conns).insert(
            id,
            ConnEntry {
                stream: clone,
                thread: None,
            },
        );
        let sh = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name(format!("nbd-conn-{id}"))
            .spawn(move || {
                run_connection(&sh, stream, &peer);
                lock(&sh.conns).remove(&id);
            });
        match spawned {
            Ok(h) => {
                if let Some(e) = lock(&shared.conns).get_mut(&id) {
                    e.thread = Some(h);
                }
            }
            Err(e) => {
                warn!("nbd: cannot spawn connection thread: {e}");
                if let Some(e) = lock(&shared.conns).remove(&id) {
                    let _ = e.stream.shutdown(Shutdown::Both);
                }
            }
        }
    }
}

/// Per-connection bound on queued work.
const MAX_INFLIGHT_REQUESTS: usize = 128;
const MAX_INFLIGHT_BYTES: u64 = 96 << 20;

#[derive(Default)]
struct Inflight {
    st: Mutex<(usize, u64)>,
    cv: Condvar,
}

impl Inflight {
    fn acquire(&self, bytes: u64) {
        let mut g = lock(&self.st);
        while g.0 >= MAX_INFLIGHT_REQUESTS || (g.0 > 0 && g.1 + bytes > MAX_INFLIGHT_BYTES) {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g.0 += 1;
        g.1 += bytes;
    }
    fn release(&self, bytes: u64) {
        let mut g = lock(&self.st);
        g.0 -= 1;
        g.1 -= bytes;
        self.cv.notify_all();
    }
    fn count(&self) -> usize {
        lock(&self.st).0
    }
    fn wait_idle(&self) {
        let mut g = lock(&self.st);
        while g.0 > 0 {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

struct Conn {
    shared: Arc<Shared>,
    peer: String,
    writer: Mutex<TcpStream>,
    broken: AtomicBool,
    inflight: Inflight,
    /// Moving average of the device service time of this connection's requests, in ns.
    service_ns: AtomicU64,
}

/// Why the reader stopped.
enum End {
    /// Normal end (client closed, DISC, server stopping): log at debug level.
    Quiet(String),
    /// Protocol violation or I/O failure: one warning line.
    Bad(String),
}

fn run_connection(shared: &Arc<Shared>, stream: TcpStream, peer: &str) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(shared.cfg.handshake_timeout));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(60)));
    let writer = match stream.try_clone() {
        Ok(w) => w,
        Err(e) => {
            warn!("nbd: {peer}: cannot clone socket: {e}");
            return;
        }
    };
    let conn = Arc::new(Conn {
        shared: Arc::clone(shared),
        peer: peer.to_string(),
        writer: Mutex::new(writer),
        broken: AtomicBool::new(false),
        inflight: Inflight::default(),
        service_ns: AtomicU64::new(0),
    });
    let mut reader = BufReader::with_capacity(256 << 10, stream);
    let end = match conn.negotiate(&mut reader) {
        Ok(true) => {
            debug!(
                "nbd: {peer}: negotiated export '{}'",
                shared.cfg.export_name
            );
            let _ = reader.get_ref().set_read_timeout(None);
            conn.transmission(&mut reader)
        }
        Ok(false) => End::Quiet("client ended negotiation".into()),
        Err(e) => e,
    };
    conn.inflight.wait_idle();
    let _ = reader.get_ref().shutdown(Shutdown::Both);
    match end {
        End::Quiet(m) => debug!("nbd: {peer}: disconnected ({m})"),
        End::Bad(m) => {
            if shared.stopping.load(Relaxed) {
                debug!("nbd: {peer}: disconnected at shutdown ({m})");
            } else {
                warn!("nbd: {peer}: {m}; disconnected");
            }
        }
    }
}

/// Read exactly `buf.len()` bytes; `Ok(false)` on a clean EOF before the first byte.
fn read_full_or_eof(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) if n == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Map a device error to the NBD error value.
pub(crate) fn errno_of(e: &DeviceError, writing: bool) -> u32 {
    match e {
        DeviceError::OutOfRange { .. } => {
            if writing {
                ENOSPC
            } else {
                EINVAL
            }
        }
        DeviceError::Io { source, .. } => match source.raw_os_error() {
            // Linux errno values: ENOSPC, EFBIG, EDQUOT → ENOSPC (as the protocol asks).
            Some(28) | Some(27) | Some(122) => ENOSPC,
            // EPERM, EACCES, EROFS.
            Some(1) | Some(13) | Some(30) => EPERM,
            Some(22) => EINVAL,
            _ => match source.kind() {
                io::ErrorKind::PermissionDenied => EPERM,
                io::ErrorKind::InvalidInput => EINVAL,
                _ => EIO,
            },
        },
        DeviceError::Failed { .. } | DeviceError::Other { .. } => EIO,
    }
}

impl Conn {
    fn io_end(&self, what: &str, e: io::Error) -> End {
        if self.shared.stopping.load(Relaxed) {
            End::Quiet(format!("{what}: {e}"))
        } else {
            End::Bad(format!("{what}: {e}"))
        }
    }

    fn protocol_end(&self, m: String) -> End {
        self.shared.counters.protocol_errors.fetch_add(1, Relaxed);
        End::Bad(m)
    }

    fn send_raw(&self, bytes: &[u8]) -> Result<(), End> {
        lock(&self.writer)
            .write_all(bytes)
            .map_err(|e| self.io_end("sending", e))
    }

    fn send_option_error(&self, opt: u32, typ: u32, msg: &str) -> Result<(), End> {
        debug!(
            "nbd: {}: option {} refused: {msg}",
            self.peer,
            opt_name(opt)
        );
        self.send_raw(&option_reply(opt, typ, msg.as_bytes()))
    }

    fn name_matches(&self, name: &[u8]) -> bool {
        name.is_empty() || name == self.shared.cfg.export_name.as_bytes()
    }

    /// Fixed-newstyle negotiation. `Ok(true)`: enter transmission; `Ok(false)`: the client aborted.
    fn negotiate(&self, r: &mut impl Read) -> Result<bool, End> {
        let mut hello = Vec::with_capacity(18);
        hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
        hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
        hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
        self.send_raw(&hello)?;
        let mut cf = [0u8; 4];
        r.read_exact(&mut cf)
            .map_err(|e| self.io_end("reading client flags", e))?;
        let cflags = be32(&cf);
        if cflags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
            return Err(self.protocol_end(format!("unknown client flags {cflags:#x}")));
        }
        let fixed = cflags & FLAG_C_FIXED_NEWSTYLE != 0;
        let no_zeroes = cflags & FLAG_C_NO_ZEROES != 0;
        loop {
            let mut h = [0u8; 16];
            r.read_exact(&mut h)
                .map_err(|e| self.io_end("reading option", e))?;
            let magic = be64(&h[0..8]);
            if magic != IHAVEOPT {
                return Err(self.protocol_end(format!("bad option magic {magic:#018x}")));
            }
            let opt = be32(&h[8..12]);
            let len = be32(&h[12..16]);
            if len > MAX_OPTION_LEN {
                let msg = format!(
                    "option {} payload of {len} bytes exceeds {MAX_OPTION_LEN}",
                    opt_name(opt)
                );
                if fixed {
                    let _ = self.send_option_error(opt, REP_ERR_TOO_BIG, &msg);
                }
                return Err(self.protocol_end(msg));
            }
            let mut data = vec![0u8; len as usize];
            r.read_exact(&mut data)
                .map_err(|e| self.io_end("reading option data", e))?;
            match opt {
                OPT_EXPORT_NAME => {
                    if !self.name_matches(&data) {
                        // The protocol gives no error reply here: the server closes.
                        return Err(End::Bad(format!(
                            "client asked for unknown export '{}'",
                            String::from_utf8_lossy(&data)
                        )));
                    }
                    let mut v = Vec::with_capacity(10 + 124);
                    v.extend_from_slice(&self.shared.size.to_be_bytes());
                    v.extend_from_slice(&self.shared.tflags.to_be_bytes());
                    if !no_zeroes {
                        v.extend_from_slice(&[0u8; 124]);
                    }
                    self.send_raw(&v)?;
                    return Ok(true);
                }
                OPT_ABORT => {
                    let _ = self.send_raw(&option_reply(opt, REP_ACK, &[]));
                    return Ok(false);
                }
                OPT_LIST => {
                    if !data.is_empty() {
                        self.send_option_error(opt, REP_ERR_INVALID, "NBD_OPT_LIST takes no data")?;
                        continue;
                    }
                    let name = self.shared.cfg.export_name.as_bytes();
                    let mut d = Vec::with_capacity(4 + name.len());
                    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
                    d.extend_from_slice(name);
                    let mut v = option_reply(opt, REP_SERVER, &d);
                    v.extend_from_slice(&option_reply(opt, REP_ACK, &[]));
                    self.send_raw(&v)?;
                }
                OPT_INFO | OPT_GO => {
                    let (name, infos) = match parse_info_request(&data) {
                        Ok(x) => x,
                        Err(m) => {
                            self.send_option_error(opt, REP_ERR_INVALID, &m)?;
                            continue;
                        }
                    };
                    if !self.name_matches(name) {
                        let m = format!(
                            "unknown export '{}' (this server exports '{}')",
                            String::from_utf8_lossy(name),
                            self.shared.cfg.export_name
                        );
                        self.send_option_error(opt, REP_ERR_UNKNOWN, &m)?;
                        continue;
                    }
                    self.send_raw(&self.info_replies(opt, &infos))?;
                    if opt == OPT_GO {
                        return Ok(true);
                    }
                }
                _ if !fixed => {
                    return Err(self.protocol_end(format!(
                        "option {opt} ({}) from a client without fixed newstyle",
                        opt_name(opt)
                    )));
                }
                OPT_STARTTLS => {
                    self.send_option_error(opt, REP_ERR_UNSUP, "TLS is not supported")?
                }
                OPT_STRUCTURED_REPLY
                | OPT_LIST_META_CONTEXT
                | OPT_SET_META_CONTEXT
                | OPT_EXTENDED_HEADERS => self.send_option_error(
                    opt,
                    REP_ERR_UNSUP,
                    "not supported: this server sends simple replies",
                )?,
                _ => {
                    self.send_option_error(opt, REP_ERR_UNSUP, &format!("unknown option {opt}"))?
                }
            }
        }
    }

    /// `NBD_REP_INFO` replies (export, block size, and name/description when asked) and the ACK.
    fn info_replies(&self, opt: u32, asked: &[u16]) -> Vec<u8> {
        let cfg = &self.shared.cfg;
        let mut out = Vec::new();
        let mut d = Vec::with_capacity(12);
        d.extend_from_slice(&INFO_EXPORT.to_be_bytes());
        d.extend_from_slice(&self.shared.size.to_be_bytes());
        d.extend_from_slice(&self.shared.tflags.to_be_bytes());
        out.extend_from_slice(&option_reply(opt, REP_INFO, &d));
        // Block sizes may be sent whether or not the client asked for them.
        let mut d = Vec::with_capacity(14);
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        d.extend_from_slice(&cfg.min_block_size.to_be_bytes());
        d.extend_from_slice(&cfg.preferred_block_size.to_be_bytes());
        d.extend_from_slice(&MAX_PAYLOAD.to_be_bytes());
        out.extend_from_slice(&option_reply(opt, REP_INFO, &d));
        if asked.contains(&INFO_NAME) {
            let mut d = INFO_NAME.to_be_bytes().to_vec();
            d.extend_from_slice(cfg.export_name.as_bytes());
            out.extend_from_slice(&option_reply(opt, REP_INFO, &d));
        }
        if let (true, Some(desc)) = (asked.contains(&INFO_DESCRIPTION), &cfg.description) {
            let mut d = INFO_DESCRIPTION.to_be_bytes().to_vec();
            let desc = desc.as_bytes();
            d.extend_from_slice(&desc[..desc.len().min(MAX_NAME_LEN)]);
            out.extend_from_slice(&option_reply(opt, REP_INFO, &d));
        }
        out.extend_from_slice(&option_reply(opt, REP_ACK, &[]));
        out
    }

    fn transmission(self: &Arc<Self>, r: &mut BufReader<TcpStream>) -> End {
        let mut hdr = [0u8; REQUEST_LEN];
        loop {
            if self.broken.load(Relaxed) {
                return End::Quiet("reply channel closed".into());
            }
            match read_full_or_eof(r, &mut hdr) {
                Ok(true) => {}
                Ok(false) => return End::Quiet("client closed the connection".into()),
                Err(e) => return self.io_end("reading request", e),
            }
            let Some(req) = Request::decode(&hdr) else {
                return self.protocol_end(format!("bad request magic {:#010x}", be32(&hdr[0..4])));
            };
            match req.typ {
                CMD_DISC => return End::Quiet("NBD_CMD_DISC".into()),
                CMD_WRITE => {
                    if req.len > MAX_PAYLOAD {
                        // The payload cannot be skipped safely: answer, then close.
                        let _ = self.reply_error(req.cookie, EINVAL);
                        return self.protocol_end(format!(
                            "WRITE of {} bytes exceeds the 32 MiB maximum",
                            req.len
                        ));
                    }
                    let bytes = u64::from(req.len);
                    self.inflight.acquire(bytes);
                    let mut buf = vec![0u8; req.len as usize];
                    if let Err(e) = r.read_exact(&mut buf) {
                        self.inflight.release(bytes);
                        return self.io_end("reading WRITE payload", e);
                    }
                    if let Some(err) = self.check(&req) {
                        self.inflight.release(bytes);
                        if self.reply_error(req.cookie, err).is_err() {
                            return End::Quiet("reply channel closed".into());
                        }
                        continue;
                    }
                    self.dispatch(req, buf, bytes, !r.buffer().is_empty());
                }
                CMD_READ | CMD_FLUSH | CMD_TRIM | CMD_WRITE_ZEROES => {
                    if req.typ == CMD_READ && req.len > MAX_PAYLOAD {
                        debug!(
                            "nbd: {}: READ of {} bytes exceeds the 32 MiB maximum",
                            self.peer, req.len
                        );
                        if self.reply_error(req.cookie, EINVAL).is_err() {
                            return End::Quiet("reply channel closed".into());
                        }
                        continue;
                    }
                    if let Some(err) = self.check(&req) {
                        if self.reply_error(req.cookie, err).is_err() {
                            return End::Quiet("reply channel closed".into());
                        }
                        continue;
                    }
                    let bytes = if req.typ == CMD_READ {
                        u64::from(req.len)
                    } else {
                        0
                    };
                    self.inflight.acquire(bytes);
                    self.dispatch(req, Vec::new(), bytes, !r.buffer().is_empty());
                }
                other => {
                    debug!(
                        "nbd: {}: unsupported command {other} ({})",
                        self.peer,
                        cmd_name(other)
                    );
                    if self.reply_error(req.cookie, EINVAL).is_err() {
                        return End::Quiet("reply channel closed".into());
                    }
                }
            }
        }
    }

    /// Validate flags, permissions, range and alignment; `Some(errno)` when the request is refused.
    fn check(&self, req: &Request) -> Option<u32> {
        let writing = matches!(req.typ, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
        let allowed = match req.typ {
            CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
            _ => CMD_FLAG_FUA,
        };
        let why = if req.flags & !allowed != 0 {
            Some((EINVAL, format!("unsupported flags {:#x}", req.flags)))
        } else if writing && self.shared.cfg.read_only {
            Some((EPERM, "export is read-only".to_string()))
        } else if req.typ == CMD_FLUSH {
            None
        } else if req
            .offset
            .checked_add(u64::from(req.len))
            .is_none_or(|end| end > self.shared.size)
        {
            Some((
                if writing { ENOSPC } else { EINVAL },
                format!("range beyond the export size {}", self.shared.size),
            ))
        } else {
            let min = u64::from(self.shared.cfg.min_block_size);
            // `min` is a power of two (validated).
            if min > 1 && (req.offset | u64::from(req.len)) & (min - 1) != 0 {
                Some((EINVAL, format!("not aligned to {min} bytes")))
            } else {
                None
            }
        };
        why.map(|(errno, m)| {
            debug!(
                "nbd: {}: {} offset {} length {} refused: {m}",
                self.peer,
                cmd_name(req.typ),
                req.offset,
                req.len
            );
            errno
        })
    }

    fn reply_error(&self, cookie: u64, errno: u32) -> Result<(), ()> {
        self.shared.counters.error_replies.fetch_add(1, Relaxed);
        let mut b = [0u8; SIMPLE_REPLY_LEN];
        put_simple_reply(&mut b, errno, cookie);
        self.send_reply(&b)
    }

    fn send_reply(&self, bytes: &[u8]) -> Result<(), ()> {
        if self.broken.load(Relaxed) {
            return Err(());
        }
        let mut w = lock(&self.writer);
        if let Err(e) = w.write_all(bytes) {
            if !self.broken.swap(true, Relaxed) {
                debug!("nbd: {}: sending reply failed: {e}", self.peer);
            }
            let _ = w.shutdown(Shutdown::Both);
            return Err(());
        }
        Ok(())
    }

    fn dispatch(self: &Arc<Self>, req: Request, payload: Vec<u8>, bytes: u64, more_buffered: bool) {
        // A fast device, or nothing else of this connection queued or running and no further request
        // already read: run it on the reader thread and save a hand-off. Otherwise, the pool.
        let fast =
            u128::from(self.service_ns.load(Relaxed)) < self.shared.cfg.inline_below.as_nanos();
        if fast || (!more_buffered && self.inflight.count() == 1) {
            self.execute(req, payload);
            self.inflight.release(bytes);
            return;
        }
        let conn = Arc::clone(self);
        self.shared.pool.submit(Box::new(move || {
            conn.execute(req, payload);
            conn.inflight.release(bytes);
        }));
    }

    /// Run one request on the device and send its reply.
    fn execute(&self, req: Request, payload: Vec<u8>) {
        let dev = &self.shared.dev;
        let c = &self.shared.counters;
        let fua = req.flags & CMD_FLAG_FUA != 0;
        let guarded = |f: &mut dyn FnMut() -> Result<(), DeviceError>| -> Result<(), DeviceError> {
            match catch_unwind(AssertUnwindSafe(f)) {
                Ok(r) => r,
                Err(_) => Err(DeviceError::other(dev.name(), "device operation panicked")),
            }
        };
        let writing = req.typ != CMD_READ;
        let started = std::time::Instant::now();
        let mut reply_buf;
        let result = match req.typ {
            CMD_READ => {
                reply_buf = vec![0u8; SIMPLE_REPLY_LEN + req.len as usize];
                let r =
                    guarded(&mut || dev.read_at(&mut reply_buf[SIMPLE_REPLY_LEN..], req.offset));
                if r.is_ok() {
                    c.reads.fetch_add(1, Relaxed);
                    c.read_bytes.fetch_add(u64::from(req.len), Relaxed);
                }
                r
            }
            CMD_WRITE => {
                reply_buf = vec![0u8; SIMPLE_REPLY_LEN];
                let r = guarded(&mut || {
                    dev.write_at(&payload, req.offset)?;
                    if fua {
                        dev.flush()?;
                    }
                    Ok(())
                });
                if r.is_ok() {
                    c.writes.fetch_add(1, Relaxed);
                    c.write_bytes.fetch_add(u64::from(req.len), Relaxed);
                }
                r
            }
            CMD_FLUSH => {
                reply_buf = vec![0u8; SIMPLE_REPLY_LEN];
                let r = guarded(&mut || dev.flush());
                if r.is_ok() {
                    c.flushes.fetch_add(1, Relaxed);
                }
                r
            }
            CMD_TRIM => {
                reply_buf = vec![0u8; SIMPLE_REPLY_LEN];
                let r = guarded(&mut || {
                    if req.len > 0 {
                        dev.discard(req.offset, u64::from(req.len))?;
                    }
                    if fua {
                        dev.flush()?;
                    }
                    Ok(())
                });
                if r.is_ok() {
                    c.trims.fetch_add(1, Relaxed);
                    c.trim_bytes.fetch_add(u64::from(req.len), Relaxed);
                }
                r
            }
            CMD_WRITE_ZEROES => {
                reply_buf = vec![0u8; SIMPLE_REPLY_LEN];
                let r = guarded(&mut || {
                    let zeros = vec![0u8; (req.len as usize).min(1 << 20)];
                    let end = req.offset + u64::from(req.len);
                    let mut off = req.offset;
                    while off < end {
                        let n = (end - off).min(zeros.len() as u64) as usize;
                        dev.write_at(&zeros[..n], off)?;
                        off += n as u64;
                    }
                    if fua {
                        dev.flush()?;
                    }
                    Ok(())
                });
                if r.is_ok() {
                    c.write_zeroes.fetch_add(1, Relaxed);
                }
                r
            }
            _ => {
                reply_buf = vec![0u8; SIMPLE_REPLY_LEN];
                Err(DeviceError::other(dev.name(), "unsupported command"))
            }
        };
        if matches!(req.typ, CMD_READ | CMD_WRITE) {
            let ns = started.elapsed().as_nanos().min(u128::from(u32::MAX)) as u64;
            let old = self.service_ns.load(Relaxed);
            self.service_ns.store((old * 7 + ns) / 8, Relaxed);
        }
        match result {
            Ok(()) => {
                put_simple_reply(&mut reply_buf, 0, req.cookie);
                let _ = self.send_reply(&reply_buf);
            }
            Err(e) => {
                let errno = errno_of(&e, writing);
                warn!(
                    "nbd: {}: {} offset {} length {} failed: {e}",
                    self.peer,
                    cmd_name(req.typ),
                    req.offset,
                    req.len
                );
                let _ = self.reply_error(req.cookie, errno);
            }
        }
    }
}

/// Parse the data of `NBD_OPT_INFO` / `NBD_OPT_GO`: name length, name, count, info types.
fn parse_info_request(d: &[u8]) -> Result<(&[u8], Vec<u16>), String> {
    if d.len() < 6 {
        return Err(format!("option data of {} bytes is too short", d.len()));
    }
    let nlen = be32(&d[0..4]) as usize;
    if nlen > MAX_NAME_LEN || 4 + nlen + 2 > d.len() {
        return Err(format!(
            "export name length {nlen} does not fit the option data"
        ));
    }
    let name = &d[4..4 + nlen];
    let rest = &d[4 + nlen..];
    let n = be16(&rest[0..2]) as usize;
    if rest.len() != 2 + 2 * n {
        return Err(format!(
            "{n} information requests do not match the {} remaining bytes",
            rest.len() - 2
        ));
    }
    let infos = rest[2..].chunks_exact(2).map(be16).collect();
    Ok((name, infos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_request_parsing() {
        let mut d = Vec::new();
        d.extend_from_slice(&7u32.to_be_bytes());
        d.extend_from_slice(b"ecstack");
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        d.extend_from_slice(&INFO_NAME.to_be_bytes());
        let (name, infos) = parse_info_request(&d).unwrap();
        assert_eq!(name, b"ecstack");
        assert_eq!(infos, vec![INFO_BLOCK_SIZE, INFO_NAME]);
        assert!(parse_info_request(&d[..d.len() - 1]).is_err());
        assert!(parse_info_request(&[0xff, 0xff, 0xff, 0xff, 0, 0]).is_err());
        assert!(parse_info_request(&[]).is_err());
    }

    #[test]
    fn errno_mapping() {
        let oor = DeviceError::OutOfRange {
            device: "d".into(),
            offset: 0,
            len: 1,
            capacity: 0,
        };
        assert_eq!(errno_of(&oor, true), ENOSPC);
        assert_eq!(errno_of(&oor, false), EINVAL);
        let full = DeviceError::io("d", io::Error::from_raw_os_error(28));
        assert_eq!(errno_of(&full, true), ENOSPC);
        let rofs = DeviceError::io("d", io::Error::from_raw_os_error(30));
        assert_eq!(errno_of(&rofs, true), EPERM);
        let eio = DeviceError::Failed { device: "d".into() };
        assert_eq!(errno_of(&eio, false), EIO);
    }

    #[test]
    fn config_validation() {
        assert!(ServeConfig::default().validate().is_ok());
        let c = ServeConfig {
            min_block_size: 3,
            ..ServeConfig::default()
        };
        assert!(c.validate().is_err());
        let c = ServeConfig {
            preferred_block_size: 256,
            ..ServeConfig::default()
        };
        assert!(c.validate().is_err());
    }
}
