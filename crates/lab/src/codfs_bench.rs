//! `ecstack bench cluster`: the CodFS cluster's throughput on loopback, side by side with MinIO in
//! the same run (issue 12, "Benchmarks").
//!
//! Three measurements, all through the real daemons (`ecstack mds`, `ecstack osd` child processes of
//! a [`LocalCluster`]) and real sockets on 127.0.0.1:
//! 1. one client puts and gets one big file (1 GiB by default);
//! 2. `clients` concurrent clients put and then get `objects` objects of `object_bytes` each, on our
//!    cluster (`osds` OSDs, RS k+m) and on MinIO (8 drive directories, EC:m): aggregate MB/s and the
//!    ratio ours/MinIO;
//! 3. changing `update_bytes` inside one object: ours ships an FO update (`Client::update`), MinIO
//!    must rewrite the whole object (a PUT of all of it; the client already holds the bytes, which
//!    is the cheapest MinIO can do). The ratio is MinIO's time over ours.
//!
//! Both sides' clients run as tasks of one tokio runtime in this process; MinIO's speak S3
//! ([`crate::codfs_s3`]). Both sides pay for the same security: by default ecstack runs with mTLS
//! and MinIO serves HTTPS with a certificate from the cluster's CA (`--certs-dir`); with
//! `insecure` ecstack runs without TLS and MinIO serves plain HTTP. Every object read back is compared with what was stored (in the timed
//! loop, on both sides alike). MB is 10^6 bytes, as MinIO's own tools report.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ecstack_base::Rng;
use ecstack_client::{Client, ClientError, ClientOptions, ReadPath, ReadStats};
use ecstack_rpc::Security;
use serde::Serialize;

use crate::ceph_peer::{Ceph, CephConfig};
use crate::codfs_local::{LocalCluster, LocalSpec};
use crate::codfs_s3::{S3Client, S3Endpoint, S3Tls};
use crate::codfs_updload::{self, CephDepth, SchemeFigures, UpdateLoadConfig, UpdateLoadReport};
use crate::{LabError, Result};

/// MinIO's drive directories (the peer's fixed shape: 8 drives, `EC:m` parity per erasure set).
pub const MINIO_DRIVES: usize = 8;
/// How long MinIO gets to accept a bucket after it starts.
const MINIO_START_SECS_MAX: u64 = 60;
const BUCKET: &str = "bench";
/// The MDS marks an OSD down after this long without a heartbeat (see [`run_async`]).
const DOWN_AFTER_MS: u64 = 60_000;

/// What `ecstack bench cluster` runs.
#[derive(Debug, Clone)]
pub struct ClusterBenchConfig {
    /// The `ecstack` binary (the daemons are its subcommands).
    pub exe: PathBuf,
    /// Where the cluster and MinIO's drives live; `None`: a temporary directory, removed at the end.
    pub dir: Option<PathBuf>,
    pub osds: usize,
    pub k: u32,
    pub m: u32,
    pub segment_bytes: u64,
    /// The one-client file (0: skip that measurement).
    pub big_file_bytes: u64,
    pub clients: usize,
    pub object_bytes: u64,
    pub objects: usize,
    /// Bytes changed by one update, and how many updates are timed.
    pub update_bytes: u64,
    pub updates: usize,
    /// The MinIO server binary; `None`: ours only.
    pub minio: Option<PathBuf>,
    pub insecure: bool,
    /// How our clients read (through the primary, as CodFS, or straight from the holders).
    pub read_path: ReadPath,
    /// Rounds of both sides, each in a fresh cluster and a fresh MinIO, alternating which side goes
    /// first (a side that always ran second would always meet what the first left behind); the
    /// figures are medians over the rounds.
    pub rounds: usize,
    /// Read every object once, untimed, before the timed get (both sides).
    pub warm: bool,
    /// Worker threads of each of our OSDs (`ecstack osd --threads`); `None`: one per core.
    pub osd_threads: Option<u16>,
    pub seed: u64,
    /// The random-update load (fio randwrite-like, [`crate::codfs_updload`]) in a fresh cluster
    /// after the rounds; `None`: not run.
    pub update_load: Option<UpdateLoadConfig>,
    /// Run Ceph's EC pool with overwrites beside the random-update load ([`crate::ceph_peer`]).
    pub ceph: bool,
}

impl ClusterBenchConfig {
    pub fn new(exe: PathBuf) -> ClusterBenchConfig {
        ClusterBenchConfig {
            exe,
            dir: None,
            osds: 8,
            k: 6,
            m: 2,
            segment_bytes: 16 << 20,
            big_file_bytes: 1 << 30,
            clients: 8,
            object_bytes: 16 << 20,
            objects: 64,
            update_bytes: 4096,
            updates: 20,
            minio: None,
            insecure: false,
            read_path: ReadPath::Direct,
            rounds: 1,
            warm: false,
            osd_threads: None,
            seed: 1,
            update_load: None,
            ceph: false,
        }
    }

    pub fn validate(&self) -> Result<()> {
        let cfg = |field, msg: String| Err(LabError::Config { field, msg });
        if self.osds < (self.k + self.m) as usize {
            return cfg(
                "osds",
                format!(
                    "{} is fewer than k + m = {}: every chunk of a segment needs its own OSD",
                    self.osds,
                    self.k + self.m
                ),
            );
        }
        if self.clients == 0 || self.objects < self.clients {
            return cfg(
                "objects",
                format!(
                    "{} objects for {} clients: each client needs at least one",
                    self.objects, self.clients
                ),
            );
        }
        if self.object_bytes < 8 {
            return cfg("object-size", "at least 8 bytes".into());
        }
        if self.update_bytes == 0 || self.update_bytes > self.object_bytes {
            return cfg(
                "update-size",
                format!(
                    "{} bytes: must be 1..=object size ({})",
                    self.update_bytes, self.object_bytes
                ),
            );
        }
        if self.updates == 0 {
            return cfg("updates", "at least 1".into());
        }
        if self.rounds == 0 {
            return cfg("rounds", "at least 1".into());
        }
        if self.minio.is_some() && self.m as usize >= MINIO_DRIVES / 2 {
            return cfg(
                "m",
                format!(
                    "MinIO allows at most EC:{} on {MINIO_DRIVES} drives",
                    MINIO_DRIVES / 2
                ),
            );
        }
        if let Some(u) = &self.update_load {
            u.validate(self.segment_bytes)?;
        }
        if self.ceph {
            if self.update_load.is_none() {
                return cfg(
                    "ceph",
                    "Ceph runs beside the random-update load only".into(),
                );
            }
            crate::ceph_peer::check_installed()?;
        }
        if let Some(p) = &self.minio {
            if !p.is_file() {
                return cfg(
                    "minio",
                    format!(
                        "no MinIO server at {} (install it with scripts/install-minio.sh, or pass --no-minio for ours only)",
                        p.display()
                    ),
                );
            }
        }
        Ok(())
    }
}

/// Aggregate throughput of one side.
#[derive(Debug, Clone, Serialize)]
pub struct SideFigures {
    pub put_mb_per_sec: f64,
    pub get_mb_per_sec: f64,
    pub put_secs: f64,
    pub get_secs: f64,
    /// Mean and median milliseconds to change `update_bytes` in one object (ours: an FO update;
    /// MinIO: a PUT of the whole object).
    pub update_ms_mean: f64,
    pub update_ms_median: f64,
    /// CPU seconds (user + system, from `/proc`) per GB moved in the timed put and get: this
    /// process (the side's clients) and the side's server processes.
    pub put_cpu: CpuPerGb,
    pub get_cpu: CpuPerGb,
}

/// CPU seconds per GB (10^9 bytes) moved, on each end of a timed phase, and the whole machine's.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuPerGb {
    pub client: f64,
    pub servers: f64,
    /// Busy CPU seconds of the whole machine (`/proc/stat`: user, nice, system, irq, softirq):
    /// also the kernel's threads and interrupts no process is charged for (loopback networking
    /// in softirq, page-cache writeback) and anything else running.
    pub machine: f64,
    /// CPU seconds the hypervisor gave other guests while this one wanted to run (`steal`).
    pub steal: f64,
}

impl CpuPerGb {
    pub fn total(&self) -> f64 {
        self.client + self.servers
    }
}

/// CPU time of this process and of a side's servers over a phase: user + system time from
/// `/proc/<pid>/stat` (every thread of the process), read at the start and at the end.
struct CpuMeter {
    servers: Vec<u32>,
    start: (f64, f64),
    machine: (f64, f64),
}

impl CpuMeter {
    fn start(servers: Vec<u32>) -> CpuMeter {
        let start = cpu_now(&servers);
        let machine = machine_cpu_secs().unwrap_or_default();
        CpuMeter {
            servers,
            start,
            machine,
        }
    }

    /// CPU seconds per GB of `bytes` moved since [`CpuMeter::start`].
    fn per_gb(&self, bytes: u64) -> CpuPerGb {
        let (c, s) = cpu_now(&self.servers);
        let (busy, steal) = machine_cpu_secs().unwrap_or(self.machine);
        let gb = bytes as f64 / 1e9;
        CpuPerGb {
            client: (c - self.start.0).max(0.0) / gb,
            servers: (s - self.start.1).max(0.0) / gb,
            machine: (busy - self.machine.0).max(0.0) / gb,
            steal: (steal - self.machine.1).max(0.0) / gb,
        }
    }
}

/// (busy, steal) CPU seconds of the whole machine so far, from `/proc/stat`'s `cpu` line.
fn machine_cpu_secs() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_machine_ticks(&stat).map(|(b, s)| {
        let t = clock_ticks_per_sec();
        (b as f64 / t, s as f64 / t)
    })
}

/// (user + nice + system + irq + softirq, steal) ticks of `/proc/stat`'s first line.
fn parse_machine_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().next()?;
    let mut f = line.split_whitespace();
    if f.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = f.map(|x| x.parse().ok()).collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal …
    if v.len() < 8 {
        return None;
    }
    Some((v[0] + v[1] + v[2] + v[5] + v[6], v[7]))
}

/// (this process, the sum over `servers`) CPU seconds so far; a process that is gone counts 0.
fn cpu_now(servers: &[u32]) -> (f64, f64) {
    let own = proc_cpu_secs("self").unwrap_or(0.0);
    let theirs = servers
        .iter()
        .map(|p| proc_cpu_secs(&p.to_string()).unwrap_or(0.0))
        .sum();
    (own, theirs)
}

/// utime + stime of `/proc/<pid>/stat`, in seconds.
fn proc_cpu_secs(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu_ticks(&stat).map(|t| t as f64 / clock_ticks_per_sec())
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line, in clock ticks. The command
/// name (field 2) is in parentheses and may hold spaces, so fields are counted after its `)`.
fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf reads a constant of the system; no memory of ours is touched.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// One round of both sides (see [`ClusterBenchConfig::rounds`]).
#[derive(Debug, Clone, Serialize)]
pub struct Round {
    /// The side that ran first: "ecstack" or "minio".
    pub first: &'static str,
    pub ours: SideFigures,
    pub minio: Option<SideFigures>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClusterBenchReport {
    pub osds: usize,
    pub k: u32,
    pub m: u32,
    pub segment_bytes: u64,
    pub tls: bool,
    /// The timed gets read objects already read once (`--warm`).
    pub warm: bool,
    /// How our clients read: "primary" or "direct".
    pub read_path: &'static str,
    /// Worker threads of each OSD (`None`: one per core).
    pub osd_threads: Option<u16>,
    /// Our get pieces read straight from the holders, and those given back to the primary.
    pub direct_pieces: u64,
    pub direct_fallbacks: u64,
    pub big_file_bytes: u64,
    /// One client, one big file.
    pub big_put_mb_per_sec: Option<f64>,
    pub big_get_mb_per_sec: Option<f64>,
    pub clients: usize,
    pub objects: usize,
    pub object_bytes: u64,
    pub update_bytes: u64,
    pub updates: usize,
    /// Medians over the rounds (one round: its figures).
    pub ours: SideFigures,
    pub minio: Option<SideFigures>,
    pub rounds: Vec<Round>,
    /// ours / MinIO, of the medians.
    pub put_ratio: Option<f64>,
    pub get_ratio: Option<f64>,
    /// MinIO's time to change the bytes over ours (> 1: ours is faster).
    pub update_speedup: Option<f64>,
    /// The random-update load, ours per scheme and Ceph's (`--ceph`).
    pub random_updates: Option<UpdateLoadReport>,
}

impl ClusterBenchReport {
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let mb = |v: f64| format!("{v:.0}");
        if let (Some(p), Some(g)) = (self.big_put_mb_per_sec, self.big_get_mb_per_sec) {
            s += &format!(
                "one client, one {} MiB file ({} OSDs, RS {}+{}, {} MiB segments, {}): put {} MB/s, get {} MB/s\n\n",
                self.big_file_bytes >> 20,
                self.osds,
                self.k,
                self.m,
                self.segment_bytes >> 20,
                if self.tls { "mTLS" } else { "no TLS" },
                mb(p),
                mb(g)
            );
        }
        s += &format!(
            "{} clients, {} objects of {} MiB{}; changing {} bytes in one object ({} times)\n\n",
            self.clients,
            self.objects,
            self.object_bytes >> 20,
            if self.warm {
                " (gets timed on a second read: --warm)"
            } else {
                ""
            },
            self.update_bytes,
            self.updates
        );
        if self.rounds.len() > 1 {
            s += &format!(
                "{} rounds, each with a fresh cluster and a fresh MinIO, alternating which side goes first:\n\n",
                self.rounds.len()
            );
            s += "| round | first | ours put / get MB/s | MinIO put / get MB/s | put ratio | get ratio |\n|---:|---|---:|---:|---:|---:|\n";
            for (i, r) in self.rounds.iter().enumerate() {
                let (mp, mg, rp, rg) = match &r.minio {
                    Some(m) => (
                        mb(m.put_mb_per_sec),
                        mb(m.get_mb_per_sec),
                        format!("{:.2}x", r.ours.put_mb_per_sec / m.put_mb_per_sec),
                        format!("{:.2}x", r.ours.get_mb_per_sec / m.get_mb_per_sec),
                    ),
                    None => ("-".into(), "-".into(), "-".into(), "-".into()),
                };
                s += &format!(
                    "| {} | {} | {} / {} | {mp} / {mg} | {rp} | {rg} |\n",
                    i + 1,
                    r.first,
                    mb(r.ours.put_mb_per_sec),
                    mb(r.ours.get_mb_per_sec)
                );
            }
            s += "\nMedians over the rounds:\n\n";
        }
        s += "| system | put MB/s | get MB/s | change: mean ms | change: median ms |\n|---|---:|---:|---:|---:|\n";
        let row = |name: &str, f: &SideFigures| {
            format!(
                "| {name} | {} | {} | {:.1} | {:.1} |\n",
                mb(f.put_mb_per_sec),
                mb(f.get_mb_per_sec),
                f.update_ms_mean,
                f.update_ms_median
            )
        };
        s += &row(
            &format!(
                "ecstack ({} OSDs{}, RS {}+{}, FO update, {}, reads {})",
                self.osds,
                self.osd_threads.map_or(String::new(), |n| format!(
                    " of {n} worker thread{}",
                    if n == 1 { "" } else { "s" }
                )),
                self.k,
                self.m,
                if self.tls { "mTLS" } else { "no TLS" },
                match self.read_path {
                    "direct" => format!(
                        "from the holders: {} pieces direct, {} through the primary",
                        self.direct_pieces, self.direct_fallbacks
                    ),
                    _ => "through the primary".to_owned(),
                }
            ),
            &self.ours,
        );
        if let Some(mf) = &self.minio {
            s += &row(
                &format!(
                    "MinIO ({MINIO_DRIVES} drives, EC:{}, whole-object PUT, {})",
                    self.m,
                    if self.tls { "HTTPS" } else { "HTTP" }
                ),
                mf,
            );
        }
        if let (Some(p), Some(g), Some(u)) = (self.put_ratio, self.get_ratio, self.update_speedup) {
            s += &format!(
                "| ours / MinIO | {p:.2}x | {g:.2}x | {u:.1}x faster (MinIO ms / ours ms, means) | |\n"
            );
        } else {
            s += "\n(MinIO not run: --no-minio)\n";
        }
        s += "\nCPU seconds (user + system) per GB moved in the timed phases: the clients (this process) + the servers; in brackets the whole machine's busy seconds (kernel threads and interrupts too) and, if any, the hypervisor's steal\n\n";
        s += "| system | put: clients + servers = total (machine) | get: clients + servers = total (machine) |\n|---|---:|---:|\n";
        let cpu = |c: &CpuPerGb| {
            let steal = if c.steal > 0.005 {
                format!(", steal {:.2}", c.steal)
            } else {
                String::new()
            };
            format!(
                "{:.2} + {:.2} = {:.2} ({:.2}{steal})",
                c.client,
                c.servers,
                c.total(),
                c.machine
            )
        };
        s += &format!(
            "| ecstack | {} | {} |\n",
            cpu(&self.ours.put_cpu),
            cpu(&self.ours.get_cpu)
        );
        if let Some(mf) = &self.minio {
            s += &format!("| MinIO | {} | {} |\n", cpu(&mf.put_cpu), cpu(&mf.get_cpu));
        }
        if let Some(u) = &self.random_updates {
            s += "\n";
            s += &u.markdown();
        }
        s
    }
}

/// A multi-threaded tokio runtime for a benchmark's clients.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| LabError::Run(format!("cannot start the async runtime: {e}")))
}

pub(crate) fn client_error(e: ClientError) -> LabError {
    LabError::Run(e.to_string())
}

fn mb_per_sec(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs.max(1e-9)
}

/// Runs the benchmark; every process it started is stopped whatever happens.
pub fn run(cfg: &ClusterBenchConfig, log: &dyn Fn(&str)) -> Result<ClusterBenchReport> {
    cfg.validate()?;
    let temp;
    let dir = match &cfg.dir {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("ecstack-bench-cluster-")
                .tempdir()
                .map_err(|e| LabError::Run(format!("cannot make a temporary directory: {e}")))?;
            temp.path().to_owned()
        }
    };
    let rt = runtime()?;
    let mut report = rt.block_on(run_async(cfg, &dir, log))?;
    report.random_updates = random_updates(cfg, &rt, &dir, log)?;
    Ok(report)
}

/// `ecstack bench cluster --updates-only`: the random-update load (and Ceph's, `--ceph`) alone.
pub fn run_updates_only(cfg: &ClusterBenchConfig, log: &dyn Fn(&str)) -> Result<UpdateLoadReport> {
    cfg.validate()?;
    if cfg.update_load.is_none() {
        return Err(LabError::Config {
            field: "updates-only",
            msg: "needs the random-update load (--update-seconds or --update-count)".into(),
        });
    }
    let temp;
    let dir = match &cfg.dir {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("ecstack-bench-cluster-")
                .tempdir()
                .map_err(|e| LabError::Run(format!("cannot make a temporary directory: {e}")))?;
            temp.path().to_owned()
        }
    };
    let rt = runtime()?;
    random_updates(cfg, &rt, &dir, log)?
        .ok_or_else(|| LabError::Run("no random-update load".into()))
}

/// The random-update load: ours in a fresh cluster (one file per scheme), then, with `--ceph`,
/// Ceph's EC pool on the same machine once our daemons are stopped and their files removed.
fn random_updates(
    cfg: &ClusterBenchConfig,
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    log: &dyn Fn(&str),
) -> Result<Option<UpdateLoadReport>> {
    let Some(load) = &cfg.update_load else {
        return Ok(None);
    };
    let ours_dir = dir.join("random-updates");
    let schemes = rt.block_on(ours_random_updates(cfg, load, &ours_dir, log));
    if cfg.dir.is_none() {
        let _ = std::fs::remove_dir_all(&ours_dir);
    }
    let schemes = schemes?;
    let ceph = if cfg.ceph {
        match ceph_random_updates(cfg, load, &dir.join("ceph"), log) {
            Ok(c) => Some(c),
            // Ours was measured: keep its figures in the one failure line's message.
            Err(e) => {
                return Err(LabError::Run(format!(
                    "{e}\n\nours, measured before Ceph:\n{}",
                    UpdateLoadReport::new(load, schemes, None).markdown()
                )))
            }
        }
    } else {
        None
    };
    Ok(Some(UpdateLoadReport::new(load, schemes, ceph)))
}

async fn ours_random_updates(
    cfg: &ClusterBenchConfig,
    load: &UpdateLoadConfig,
    dir: &Path,
    log: &dyn Fn(&str),
) -> Result<Vec<SchemeFigures>> {
    let mut spec = LocalSpec::new(cfg.exe.clone(), dir.to_owned(), cfg.osds);
    spec.k = cfg.k;
    spec.m = cfg.m;
    spec.segment_bytes = cfg.segment_bytes;
    spec.insecure = cfg.insecure;
    spec.osd_threads = cfg.osd_threads;
    spec.heartbeat_ms = 1_000;
    spec.down_after_ms = DOWN_AFTER_MS;
    log(&format!(
        "random updates: starting an MDS and {} OSDs (RS {}+{}, {} MiB segments) in {}",
        cfg.osds,
        cfg.k,
        cfg.m,
        cfg.segment_bytes >> 20,
        dir.display()
    ));
    let mut cluster = LocalCluster::start(spec).map_err(client_error)?;
    let r = async {
        let client = Client::connect_with(
            cluster.config(),
            ours_security(&cluster)?,
            ClientOptions {
                read_path: cfg.read_path,
                ..ClientOptions::default()
            },
        )
        .map_err(client_error)?;
        client
            .wait_for_osds(cfg.osds, Duration::from_secs(30))
            .await
            .map_err(client_error)?;
        let mut out = Vec::new();
        for &scheme in &load.schemes {
            out.push(
                codfs_updload::run_scheme(load, &client, cfg.segment_bytes, scheme, log).await?,
            );
            cluster.check_alive().map_err(client_error)?;
        }
        Ok::<_, LabError>(out)
    }
    .await;
    cluster.stop();
    r
}

/// Ceph's side: a scratch cluster, the image written once, then fio's randwrite at each depth.
fn ceph_random_updates(
    cfg: &ClusterBenchConfig,
    load: &UpdateLoadConfig,
    dir: &Path,
    log: &dyn Fn(&str),
) -> Result<Vec<CephDepth>> {
    let ceph = Ceph::start(
        &CephConfig {
            dir: dir.to_owned(),
            osds: cfg.osds,
            k: cfg.k,
            m: cfg.m,
            block_file_bytes: ceph_block_file_bytes(cfg, load.file_bytes),
            image_bytes: load.file_bytes,
        },
        log,
    )?;
    log("ceph: writing the whole image once (fio, sequential 4 MiB)");
    ceph.prefill()?;
    let seconds = if load.count.is_some() {
        load.seconds.max(1.0)
    } else {
        load.seconds
    };
    let mut out = Vec::new();
    for &depth in &load.depths {
        for rbd_cache in [true, false] {
            log(&format!(
                "ceph: fio randwrite {} B, depth {depth}, {seconds} s, rbd cache {}",
                load.block_bytes,
                if rbd_cache { "on" } else { "off" }
            ));
            out.push(CephDepth {
                depth,
                rbd_cache,
                fio: ceph.randwrite(depth, seconds, load.block_bytes, rbd_cache)?,
            });
        }
    }
    log(&format!(
        "ceph: stopping {} daemons by pid, removing {}",
        ceph.pids().len(),
        dir.display()
    ));
    drop(ceph);
    Ok(out)
}

/// Each OSD's BlueStore block file: twice its share of the image's chunks, and at least 1.5 GiB
/// (BlueFS keeps RocksDB there too). Sparse: only what is written takes disk.
fn ceph_block_file_bytes(cfg: &ClusterBenchConfig, image_bytes: u64) -> u64 {
    let share = image_bytes / cfg.k as u64 * (cfg.k + cfg.m) as u64 / cfg.osds.max(1) as u64;
    (2 * share).max(3 << 29).next_multiple_of(1 << 20)
}

async fn run_async(
    cfg: &ClusterBenchConfig,
    dir: &Path,
    log: &dyn Fn(&str),
) -> Result<ClusterBenchReport> {
    let mut spec = LocalSpec::new(cfg.exe.clone(), dir.join("ecstack"), cfg.osds);
    spec.k = cfg.k;
    spec.m = cfg.m;
    spec.segment_bytes = cfg.segment_bytes;
    spec.insecure = cfg.insecure;
    spec.osd_threads = cfg.osd_threads;
    // Failure detection is not measured here. With the defaults (down after 2 s without a
    // heartbeat), OSDs busy with a 1 GiB put on a loaded 2-core machine were marked down and the
    // reads that followed failed as "data lost" (every holder on a "down" OSD is unusable).
    spec.heartbeat_ms = 1_000;
    spec.down_after_ms = DOWN_AFTER_MS;
    log(&format!(
        "starting an MDS and {} OSDs (RS {}+{}, {} MiB segments) in {}",
        cfg.osds,
        cfg.k,
        cfg.m,
        cfg.segment_bytes >> 20,
        spec.dir.display()
    ));
    let mut rounds = Vec::with_capacity(cfg.rounds);
    let mut big = None;
    let mut reads = ReadStats::default();
    for r in 0..cfg.rounds {
        // Only the first round measures the one-client file.
        let mut round_cfg = cfg.clone();
        if r > 0 {
            round_cfg.big_file_bytes = 0;
        }
        let round_dir = if cfg.rounds > 1 {
            dir.join(format!("round-{}", r + 1))
        } else {
            dir.to_owned()
        };
        let minio_first = r % 2 == 1 && cfg.minio.is_some();
        if cfg.rounds > 1 {
            log(&format!(
                "round {} of {} ({} first)",
                r + 1,
                cfg.rounds,
                if minio_first { "MinIO" } else { "ecstack" }
            ));
        }
        let mut spec = spec.clone();
        spec.dir = round_dir.join("ecstack");
        // The cluster comes first either way: MinIO's certificate comes from its CA. When MinIO
        // goes first the daemons idle meanwhile (heartbeats only).
        let mut cluster = LocalCluster::start(spec).map_err(client_error)?;
        let cluster_config = cluster.config().clone();
        // MinIO's certificate comes from our cluster's CA (the S3 client trusts that CA only).
        let tls = (!cfg.insecure).then_some(&cluster_config);
        let mut minio = None;
        if minio_first {
            if let Some(exe) = &cfg.minio {
                let m = minio_side(&round_cfg, exe, &round_dir.join("minio"), tls, log).await;
                if m.is_err() {
                    cluster.stop();
                }
                minio = Some(m?);
            }
        }
        let ours = ours_side(&round_cfg, &mut cluster, log).await;
        cluster.stop();
        let (b, ours, rd) = ours?;
        if r == 0 {
            big = b;
        }
        reads = reads + rd;
        if !minio_first {
            if let Some(exe) = &cfg.minio {
                minio =
                    Some(minio_side(&round_cfg, exe, &round_dir.join("minio"), tls, log).await?);
            }
        }
        rounds.push(Round {
            first: if minio_first { "minio" } else { "ecstack" },
            ours,
            minio,
        });
        if cfg.rounds > 1 && cfg.dir.is_none() {
            // A round's data is several GiB on each side: gone before the next round writes its own.
            let _ = std::fs::remove_dir_all(&round_dir);
        }
    }
    let ours = median_figures(rounds.iter().map(|r| &r.ours));
    let minio = if cfg.minio.is_some() {
        Some(median_figures(
            rounds.iter().filter_map(|r| r.minio.as_ref()),
        ))
    } else {
        None
    };
    let ratio = |f: fn(&SideFigures) -> f64| minio.as_ref().map(|mf| f(&ours) / f(mf));
    Ok(ClusterBenchReport {
        osds: cfg.osds,
        k: cfg.k,
        m: cfg.m,
        segment_bytes: cfg.segment_bytes,
        tls: !cfg.insecure,
        warm: cfg.warm,
        read_path: cfg.read_path.name(),
        osd_threads: cfg.osd_threads,
        direct_pieces: reads.direct,
        direct_fallbacks: reads.fallbacks,
        big_file_bytes: cfg.big_file_bytes,
        big_put_mb_per_sec: big.map(|b| b.0),
        big_get_mb_per_sec: big.map(|b| b.1),
        clients: cfg.clients,
        objects: cfg.objects,
        object_bytes: cfg.object_bytes,
        update_bytes: cfg.update_bytes,
        updates: cfg.updates,
        put_ratio: ratio(|f| f.put_mb_per_sec),
        get_ratio: ratio(|f| f.get_mb_per_sec),
        update_speedup: minio
            .as_ref()
            .map(|mf| mf.update_ms_mean / ours.update_ms_mean.max(1e-9)),
        ours,
        minio,
        rounds,
        random_updates: None,
    })
}

/// The median of each figure over `sides` (the upper one of an even count).
fn median_figures<'a>(sides: impl Iterator<Item = &'a SideFigures>) -> SideFigures {
    let sides: Vec<&SideFigures> = sides.collect();
    let median = |f: fn(&SideFigures) -> f64| {
        let mut v: Vec<f64> = sides.iter().map(|s| f(s)).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    SideFigures {
        put_mb_per_sec: median(|s| s.put_mb_per_sec),
        get_mb_per_sec: median(|s| s.get_mb_per_sec),
        put_secs: median(|s| s.put_secs),
        get_secs: median(|s| s.get_secs),
        update_ms_mean: median(|s| s.update_ms_mean),
        update_ms_median: median(|s| s.update_ms_median),
        put_cpu: CpuPerGb {
            client: median(|s| s.put_cpu.client),
            servers: median(|s| s.put_cpu.servers),
            machine: median(|s| s.put_cpu.machine),
            steal: median(|s| s.put_cpu.steal),
        },
        get_cpu: CpuPerGb {
            client: median(|s| s.get_cpu.client),
            servers: median(|s| s.get_cpu.servers),
            machine: median(|s| s.get_cpu.machine),
            steal: median(|s| s.get_cpu.steal),
        },
    }
}

/// The bytes of object `index`: the client's buffer with the index in its first 8 bytes (so no two
/// objects are equal, and a read of the wrong object is caught).
fn stamp(buf: &mut [u8], index: usize) {
    buf[..8].copy_from_slice(&(index as u64).to_le_bytes());
}

fn check_object(what: &str, got: &[u8], want: &[u8]) -> Result<()> {
    if got == want {
        return Ok(());
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    Err(LabError::Run(format!(
        "{what}: read {} bytes that differ from the {} stored at byte {at}",
        got.len(),
        want.len()
    )))
}

/// [`check_object`] for an object read as frames ([`Client::read_frames`]: no join copy).
fn check_frames(what: &str, got: &[ecstack_client::Bytes], want: &[u8]) -> Result<()> {
    let mut at = 0usize;
    let same = got.iter().all(|f| {
        let end = at + f.len();
        let ok = want.get(at..end) == Some(&f[..]);
        at = end;
        ok
    });
    if same && at == want.len() {
        return Ok(());
    }
    // Only on a mismatch: join them for check_object's message (where, how long).
    check_object(what, &got.concat(), want)
}

fn buffers(cfg: &ClusterBenchConfig, salt: u64) -> Vec<Vec<u8>> {
    (0..cfg.clients)
        .map(|c| {
            let mut b = vec![0u8; cfg.object_bytes as usize];
            Rng::new(cfg.seed ^ salt ^ (c as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .fill(&mut b);
            b
        })
        .collect()
}

/// The objects client `c` owns: c, c + clients, c + 2·clients, ...
fn objects_of(cfg: &ClusterBenchConfig, c: usize) -> impl Iterator<Item = usize> {
    (c..cfg.objects).step_by(cfg.clients)
}

/// Offsets of the timed updates (seeded, aligned to the update size when it fits).
fn update_offsets(cfg: &ClusterBenchConfig) -> Vec<u64> {
    let mut rng = Rng::new(cfg.seed ^ 0x7570_6461_7465);
    let slots = cfg.object_bytes / cfg.update_bytes;
    (0..cfg.updates)
        .map(|_| rng.below(slots) * cfg.update_bytes)
        .collect()
}

fn mean_median(ms: &mut [f64]) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let mean = ms.iter().sum::<f64>() / ms.len().max(1) as f64;
    (mean, ms.get(ms.len() / 2).copied().unwrap_or(0.0))
}

pub(crate) fn ours_security(cluster: &LocalCluster) -> Result<Security> {
    if cluster.insecure() {
        Ok(Security::Insecure)
    } else {
        Security::load(&cluster.config().certs_dir(), "client")
            .map_err(|e| LabError::Run(e.to_string()))
    }
}

async fn ours_side(
    cfg: &ClusterBenchConfig,
    cluster: &mut LocalCluster,
    log: &dyn Fn(&str),
) -> Result<(Option<(f64, f64)>, SideFigures, ReadStats)> {
    let options = ClientOptions {
        read_path: cfg.read_path,
        ..ClientOptions::default()
    };
    let connect = |cluster: &LocalCluster| {
        Client::connect_with(cluster.config(), ours_security(cluster)?, options.clone())
            .map_err(client_error)
    };
    let first = connect(cluster)?;
    let ready = first.wait_for_osds(cfg.osds, Duration::from_secs(30)).await;
    cluster.check_alive().map_err(client_error)?;
    ready.map_err(client_error)?;

    let big = if cfg.big_file_bytes > 0 {
        Some(big_file(cfg, &first, log).await?)
    } else {
        None
    };

    log(&format!(
        "ecstack: {} clients put {} objects of {} MiB",
        cfg.clients,
        cfg.objects,
        cfg.object_bytes >> 20
    ));
    let mut clients = Vec::new();
    for _ in 0..cfg.clients {
        clients.push(connect(cluster)?);
    }
    let bufs = buffers(cfg, 0x6f75_7273);
    let total = cfg.objects as u64 * cfg.object_bytes;
    let servers: Vec<u32> = cluster.pids().into_iter().map(|(_, p)| p).collect();
    let meter = CpuMeter::start(servers.clone());
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (c, (client, mut buf)) in clients.iter().cloned().zip(bufs.clone()).enumerate() {
        let cfg = cfg.clone();
        tasks.spawn(async move {
            for i in objects_of(&cfg, c) {
                stamp(&mut buf, i);
                // Sent from the buffer itself, as the S3 client sends its body; the buffer comes
                // back once the put has dropped every slice of it (a copy only if it has not).
                let data = ecstack_client::Bytes::from(std::mem::take(&mut buf));
                client
                    .put_bytes(&format!("/bench/o{i}"), data.clone())
                    .await
                    .map_err(client_error)?;
                buf = data
                    .try_into_mut()
                    .map(Vec::from)
                    .unwrap_or_else(|d| d.to_vec());
            }
            Ok::<_, LabError>(())
        });
    }
    join_all(&mut tasks).await?;
    let put_secs = t.elapsed().as_secs_f64();
    let put_cpu = meter.per_gb(total);

    let (get_secs, get_cpu) = timed_gets(cfg, "ecstack", &servers, log, || {
        let mut tasks = tokio::task::JoinSet::new();
        for (c, (client, mut buf)) in clients.iter().cloned().zip(bufs.clone()).enumerate() {
            let cfg = cfg.clone();
            tasks.spawn(async move {
                for i in objects_of(&cfg, c) {
                    let path = format!("/bench/o{i}");
                    let got = client
                        .read_frames(&path, 0, cfg.object_bytes)
                        .await
                        .map_err(client_error)?;
                    stamp(&mut buf, i);
                    check_frames(&format!("ecstack get {path}"), &got, &buf)?;
                }
                Ok::<_, LabError>(())
            });
        }
        async move { join_all(&mut tasks).await }
    })
    .await?;
    let reads = clients
        .iter()
        .chain([&first])
        .map(Client::read_stats)
        .fold(ReadStats::default(), |a, b| a + b);

    log(&format!(
        "ecstack: {} FO updates of {} bytes in one object",
        cfg.updates, cfg.update_bytes
    ));
    let mut model = buffers(cfg, 0x7570).swap_remove(0);
    first
        .put("/bench/updated", &model[..])
        .await
        .map_err(client_error)?;
    // The object stays open, as MinIO's client keeps its object's name: each update goes
    // straight to the segment's primary, with no lookup at the MDS (`FileHandle`).
    let handle = first.open("/bench/updated").await.map_err(client_error)?;
    let mut rng = Rng::new(cfg.seed ^ 0x6f_7572);
    let mut ms = Vec::new();
    for off in update_offsets(cfg) {
        let range = off as usize..(off + cfg.update_bytes) as usize;
        rng.fill(&mut model[range.clone()]);
        let t = Instant::now();
        handle
            .update(off, &model[range])
            .await
            .map_err(client_error)?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let got = first
        .read("/bench/updated", 0, cfg.object_bytes)
        .await
        .map_err(client_error)?;
    check_object("ecstack get after the updates", &got, &model)?;
    cluster.check_alive().map_err(client_error)?;
    let (update_ms_mean, update_ms_median) = mean_median(&mut ms);
    Ok((
        big,
        SideFigures {
            put_mb_per_sec: mb_per_sec(total, put_secs),
            get_mb_per_sec: mb_per_sec(total, get_secs),
            put_secs,
            get_secs,
            update_ms_mean,
            update_ms_median,
            put_cpu,
            get_cpu,
        },
        reads,
    ))
}

/// A side's timed get: `pass` reads every object once. With `--warm` an untimed pass goes first, so
/// the timed one reads page-cached chunk files (cold reads of files written with `O_DIRECT` depend on
/// the host's disk cache on a VM). Returns the timed pass's seconds and CPU per GB (this process and
/// `servers`).
async fn timed_gets<Fut: std::future::Future<Output = Result<()>>>(
    cfg: &ClusterBenchConfig,
    side: &str,
    servers: &[u32],
    log: &dyn Fn(&str),
    mut pass: impl FnMut() -> Fut,
) -> Result<(f64, CpuPerGb)> {
    let mut secs = 0.0;
    let mut cpu = CpuPerGb::default();
    for p in 0..1 + cfg.warm as usize {
        log(&format!(
            "{side}: {}",
            if p == 0 && cfg.warm {
                "an untimed get of every object (--warm)"
            } else {
                "the same clients get them back"
            }
        ));
        let meter = CpuMeter::start(servers.to_vec());
        let t = Instant::now();
        pass().await?;
        secs = t.elapsed().as_secs_f64();
        cpu = meter.per_gb(cfg.objects as u64 * cfg.object_bytes);
    }
    Ok((secs, cpu))
}

async fn join_all(tasks: &mut tokio::task::JoinSet<Result<()>>) -> Result<()> {
    let mut first_error = None;
    while let Some(r) = tasks.join_next().await {
        let r = r.map_err(|e| LabError::Run(format!("a benchmark client failed: {e}")));
        if let Err(e) = r.and_then(|x| x) {
            first_error.get_or_insert(e);
            tasks.abort_all();
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// One client puts and gets one big file: MB/s both ways.
async fn big_file(
    cfg: &ClusterBenchConfig,
    client: &Client,
    log: &dyn Fn(&str),
) -> Result<(f64, f64)> {
    log(&format!(
        "ecstack: one client puts and gets a {} MiB file",
        cfg.big_file_bytes >> 20
    ));
    let mut data = vec![0u8; cfg.big_file_bytes as usize];
    Rng::new(cfg.seed ^ 0x6269_67).fill(&mut data);
    let data = ecstack_client::Bytes::from(data);
    let t = Instant::now();
    client
        .put_bytes("/bench/big", data.clone())
        .await
        .map_err(client_error)?;
    let put = mb_per_sec(cfg.big_file_bytes, t.elapsed().as_secs_f64());
    let mut got = Vec::with_capacity(data.len());
    let t = Instant::now();
    client
        .get("/bench/big", 0, None, &mut got)
        .await
        .map_err(client_error)?;
    let get = mb_per_sec(cfg.big_file_bytes, t.elapsed().as_secs_f64());
    check_object("ecstack get /bench/big", &got, &data)?;
    drop(got);
    client.remove("/bench/big").await.map_err(client_error)?;
    Ok((put, get))
}

/// A MinIO server child: SIGTERM, then SIGKILL, when dropped.
struct Minio {
    child: Child,
    log: PathBuf,
}

impl Drop for Minio {
    fn drop(&mut self) {
        // SAFETY: kill(2) touches no memory of ours; the pid is our unreaped child.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill(); // exited meanwhile: nothing to kill, wait() still reaps
        let _ = self.child.wait();
    }
}

/// The name MinIO's certificate is issued under. It carries no role: MinIO only serves HTTPS with
/// it, and every RPC of our cluster refuses a certificate without a role.
const MINIO_CERT_NAME: &str = "minio";

/// MinIO's `--certs-dir` (`public.crt`, `private.key`: a certificate from `cluster`'s CA) and the
/// S3 client's trust in that CA.
fn minio_tls(cluster: &ecstack_rpc::ClusterConfig, dir: &Path) -> Result<(PathBuf, S3Tls)> {
    let cert = ecstack_rpc::init::issue_certificate_with_role(cluster, MINIO_CERT_NAME, None, true)
        .map_err(|e| LabError::Run(format!("a certificate for MinIO: {e}")))?;
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).map_err(crate::io_at(&certs))?;
    for (from, to) in [(&cert.cert, "public.crt"), (&cert.key, "private.key")] {
        let to = certs.join(to);
        std::fs::copy(from, &to).map_err(crate::io_at(&to))?;
    }
    let tls = S3Tls::from_ca_pem(
        &cluster.certs_dir().join("ca.pem"),
        ecstack_rpc::security::CLUSTER_DNS_NAME,
    )?;
    Ok((certs, tls))
}

async fn start_minio(
    cfg: &ClusterBenchConfig,
    exe: &Path,
    dir: &Path,
    cluster_tls: Option<&ecstack_rpc::ClusterConfig>,
) -> Result<(Minio, S3Endpoint)> {
    for d in 1..=MINIO_DRIVES {
        let p = dir.join(format!("d{d}"));
        std::fs::create_dir_all(&p).map_err(crate::io_at(&p))?;
    }
    let (certs_dir, tls) = match cluster_tls {
        Some(c) => {
            let (d, t) = minio_tls(c, dir)?;
            (Some(d), Some(t))
        }
        None => (None, None),
    };
    let log = dir.join("minio.log");
    let out = std::fs::File::create(&log).map_err(crate::io_at(&log))?;
    let err = out.try_clone().map_err(crate::io_at(&log))?;
    let endpoint = S3Endpoint {
        host: format!("127.0.0.1:{}", crate::free_loopback_port()?),
        access_key: "ecstack-bench".into(),
        secret_key: "ecstack-bench-secret".into(),
        region: "us-east-1".into(),
        tls,
    };
    let mut command = Command::new(exe);
    command.args([
        "server",
        "--quiet",
        "--address",
        &endpoint.host,
        "--console-address",
        &format!("127.0.0.1:{}", crate::free_loopback_port()?),
    ]);
    if let Some(d) = &certs_dir {
        command.arg("--certs-dir").arg(d);
    }
    let child = command
        .arg(format!("{}/d{{1...{MINIO_DRIVES}}}", dir.display()))
        // Drives that share one disk are allowed only in this mode (the peer doc's setup).
        .env("MINIO_CI_CD", "1")
        .env("MINIO_ROOT_USER", &endpoint.access_key)
        .env("MINIO_ROOT_PASSWORD", &endpoint.secret_key)
        .env("MINIO_STORAGE_CLASS_STANDARD", format!("EC:{}", cfg.m))
        .env("MINIO_BROWSER", "off")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| LabError::Run(format!("cannot start MinIO {}: {e}", exe.display())))?;
    let mut server = Minio { child, log };
    let deadline = Instant::now() + Duration::from_secs(MINIO_START_SECS_MAX);
    let mut s3 = S3Client::new(endpoint.clone());
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(LabError::Run(format!(
                "MinIO exited ({status}): {}",
                crate::codfs_local::last_line(&server.log)
            )));
        }
        match s3.create_bucket(BUCKET).await {
            Ok(()) => return Ok((server, endpoint)),
            Err(e) if Instant::now() > deadline => {
                return Err(LabError::Run(format!(
                    "MinIO did not accept a bucket within {MINIO_START_SECS_MAX} s: {e} (log: {})",
                    server.log.display()
                )))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn minio_side(
    cfg: &ClusterBenchConfig,
    exe: &Path,
    dir: &Path,
    tls: Option<&ecstack_rpc::ClusterConfig>,
    log: &dyn Fn(&str),
) -> Result<SideFigures> {
    log(&format!(
        "starting MinIO on {MINIO_DRIVES} drive directories (EC:{}, {}) in {}",
        cfg.m,
        if tls.is_some() { "HTTPS" } else { "HTTP" },
        dir.display()
    ));
    let (server, endpoint) = start_minio(cfg, exe, dir, tls).await?;
    log(&format!(
        "MinIO: {} clients put {} objects of {} MiB",
        cfg.clients,
        cfg.objects,
        cfg.object_bytes >> 20
    ));
    let bufs = buffers(cfg, 0x6d69_6e69_6f);
    let total = cfg.objects as u64 * cfg.object_bytes;
    let clients: Vec<_> = (0..cfg.clients)
        .map(|_| Arc::new(tokio::sync::Mutex::new(S3Client::new(endpoint.clone()))))
        .collect();
    let servers = vec![server.child.id()];
    let mut tasks = tokio::task::JoinSet::new();
    let meter = CpuMeter::start(servers.clone());
    let t = Instant::now();
    for (c, (client, mut buf)) in clients.iter().cloned().zip(bufs.clone()).enumerate() {
        let cfg = cfg.clone();
        tasks.spawn(async move {
            let mut s3 = client.lock().await;
            for i in objects_of(&cfg, c) {
                stamp(&mut buf, i);
                s3.put(BUCKET, &format!("o{i}"), &buf).await?;
            }
            Ok::<_, LabError>(())
        });
    }
    join_all(&mut tasks).await?;
    let put_secs = t.elapsed().as_secs_f64();
    let put_cpu = meter.per_gb(total);

    let (get_secs, get_cpu) = timed_gets(cfg, "MinIO", &servers, log, || {
        let mut tasks = tokio::task::JoinSet::new();
        for (c, (client, mut buf)) in clients.iter().cloned().zip(bufs.clone()).enumerate() {
            let cfg = cfg.clone();
            tasks.spawn(async move {
                let mut s3 = client.lock().await;
                for i in objects_of(&cfg, c) {
                    let key = format!("o{i}");
                    let got = s3.get(BUCKET, &key).await?;
                    stamp(&mut buf, i);
                    check_object(&format!("MinIO GET {key}"), &got, &buf)?;
                }
                Ok::<_, LabError>(())
            });
        }
        async move { join_all(&mut tasks).await }
    })
    .await?;

    log(&format!(
        "MinIO: {} whole-object rewrites to change {} bytes",
        cfg.updates, cfg.update_bytes
    ));
    let mut s3 = clients[0].lock().await;
    let mut model = buffers(cfg, 0x7570).swap_remove(0);
    s3.put(BUCKET, "updated", &model).await?;
    let mut rng = Rng::new(cfg.seed ^ 0x6f_7572);
    let mut ms = Vec::new();
    for off in update_offsets(cfg) {
        let range = off as usize..(off + cfg.update_bytes) as usize;
        rng.fill(&mut model[range]);
        let t = Instant::now();
        s3.put(BUCKET, "updated", &model).await?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let got = s3.get(BUCKET, "updated").await?;
    check_object("MinIO GET after the rewrites", &got, &model)?;
    drop(s3);
    drop(server);
    let (update_ms_mean, update_ms_median) = mean_median(&mut ms);
    Ok(SideFigures {
        put_mb_per_sec: mb_per_sec(total, put_secs),
        get_mb_per_sec: mb_per_sec(total, get_secs),
        put_secs,
        get_secs,
        update_ms_mean,
        update_ms_median,
        put_cpu,
        get_cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_line_gives_busy_and_steal_ticks() {
        let stat = "cpu  100 5 50 9000 30 7 3 11 0 0\ncpu0 50 2 25 4500 15 3 1 5 0 0\n";
        assert_eq!(parse_machine_ticks(stat), Some((165, 11)));
        assert_eq!(parse_machine_ticks("intr 1 2 3\n"), None);
        assert_eq!(parse_machine_ticks("cpu 1 2 x\n"), None);
    }

    #[test]
    fn stat_lines_give_user_plus_system_ticks() {
        let line = "4242 (tokio rt) worker) S 1 2 3 4 5 6 7 8 9 10 250 31 0 0 20 0 9 0 77";
        assert_eq!(parse_stat_cpu_ticks(line), Some(281));
        assert_eq!(parse_stat_cpu_ticks("4242 (x) S 1 2"), None);
        assert_eq!(parse_stat_cpu_ticks("garbage"), None);
        assert!(proc_cpu_secs("self").is_some());
    }

    /// MinIO's certificate comes from the cluster's CA with no role (its name is no process of
    /// ours), in the two files MinIO's `--certs-dir` wants.
    #[test]
    fn minio_gets_a_certificate_without_a_role() {
        let dir = tempfile::tempdir().unwrap();
        let opts = ecstack_rpc::InitOptions {
            osds: 2,
            clients: 1,
            code: "rs".into(),
            k: 1,
            m: 1,
            segment_bytes: 1 << 20,
            failure_domain: None,
            mds_addr: "127.0.0.1:1".into(),
            update_scheme: ecstack_rpc::UpdateScheme::Fo,
            force: false,
        };
        let config = ecstack_rpc::init_cluster(dir.path(), &opts).unwrap();
        let (certs, _tls) = minio_tls(&config, &dir.path().join("minio")).unwrap();
        let pem = std::fs::read_to_string(certs.join("public.crt")).unwrap();
        assert!(pem.contains("BEGIN CERTIFICATE"));
        assert!(certs.join("private.key").exists());
    }

    #[test]
    fn frames_are_checked_as_the_object_they_join_to() {
        let want: Vec<u8> = (0..100u8).collect();
        let frames = |cuts: &[usize], data: &[u8]| -> Vec<ecstack_client::Bytes> {
            let mut at = 0;
            let mut out = Vec::new();
            for &c in cuts.iter().chain([&data.len()]) {
                out.push(ecstack_client::Bytes::copy_from_slice(&data[at..c]));
                at = c;
            }
            out
        };
        check_frames("t", &frames(&[], &want), &want).unwrap();
        check_frames("t", &frames(&[0, 7, 7, 64], &want), &want).unwrap();
        let mut bad = want.clone();
        bad[70] ^= 1;
        let e = check_frames("t", &frames(&[7, 64], &bad), &want).unwrap_err();
        assert!(e.to_string().contains("at byte 70"), "{e}");
        let e = check_frames("t", &frames(&[7], &want[..99]), &want).unwrap_err();
        assert!(e.to_string().contains("read 99 bytes"), "{e}");
        let long: Vec<u8> = (0..101u8).collect();
        let e = check_frames("t", &frames(&[50], &long), &want).unwrap_err();
        assert!(e.to_string().contains("read 101 bytes"), "{e}");
    }

    #[test]
    fn config_errors_name_the_flag() {
        let mut c = ClusterBenchConfig::new("ecstack".into());
        assert!(c.validate().is_ok());
        c.osds = 7;
        assert!(c.validate().unwrap_err().to_string().starts_with("osds:"));
        c.osds = 8;
        c.objects = 4;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("objects:"));
        c.objects = 64;
        c.rounds = 0;
        assert!(c.validate().unwrap_err().to_string().starts_with("rounds:"));
        c.rounds = 3;
        c.minio = Some("/no/such/minio".into());
        let e = c.validate().unwrap_err().to_string();
        assert!(e.starts_with("minio:") && e.contains("--no-minio"), "{e}");
    }

    #[test]
    fn medians_over_rounds_take_each_figure_on_its_own() {
        let side = |put: f64, get: f64, ms: f64| SideFigures {
            put_mb_per_sec: put,
            get_mb_per_sec: get,
            put_secs: 1.0 / put,
            get_secs: 1.0 / get,
            update_ms_mean: ms,
            update_ms_median: ms,
            put_cpu: CpuPerGb::default(),
            get_cpu: CpuPerGb {
                client: ms,
                servers: get,
                ..CpuPerGb::default()
            },
        };
        let rounds = [
            side(400.0, 900.0, 2.0),
            side(500.0, 700.0, 9.0),
            side(450.0, 1300.0, 1.0),
        ];
        let m = median_figures(rounds.iter());
        assert_eq!(
            (m.put_mb_per_sec, m.get_mb_per_sec, m.update_ms_mean),
            (450.0, 900.0, 2.0)
        );
        assert_eq!((m.get_cpu.client, m.get_cpu.servers), (2.0, 900.0));
        let one = median_figures(rounds[..1].iter());
        assert_eq!(one.get_mb_per_sec, 900.0);
        let two = median_figures(rounds[..2].iter());
        assert_eq!(two.put_mb_per_sec, 500.0, "the upper one of an even count");
    }

    #[test]
    fn every_object_has_one_owner_and_updates_stay_inside() {
        let mut c = ClusterBenchConfig::new("ecstack".into());
        c.objects = 13;
        c.clients = 4;
        let mut seen: Vec<usize> = (0..4).flat_map(|i| objects_of(&c, i)).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..13).collect::<Vec<_>>());
        for off in update_offsets(&c) {
            assert!(off + c.update_bytes <= c.object_bytes);
            assert_eq!(off % c.update_bytes, 0);
        }
    }
}
