//! `ecstack bench backup`: an online backup of the metadata of a namespace of many files, under a
//! metadata load, with the load's client-visible latency during the backup beside its latency
//! without one (issue 43: 100,000 files).
//!
//! For each store (SQLite; PostgreSQL too when the caller gives an empty database), a fresh
//! [`LocalCluster`] (one real `ecstack mds`, no OSDs: everything here is metadata), then:
//!
//! 1. **Fill**: `files` empty regular files (`mknod`, no data, no segments) in directories of
//!    [`FILES_PER_DIR`] under `/fill`, made by `fill_tasks` client tasks at once.
//! 2. **Load**: `load_tasks` client tasks, each repeating without pause a `lookup` of a random
//!    filled file, a `mknod` of a file of its own under `/load` and its `unlink`; every
//!    operation's latency goes into an HDR histogram of the window it started in.
//! 3. **Idle window**: the load alone for `seconds`.
//! 4. **Backup window**: `ecstack cluster backup FILE --json` (the command an operator runs: the
//!    MDS's copy streamed, written, synced and checked; `pg_dump` for PostgreSQL) again and again,
//!    back to back, until `seconds` passed (at least once), under the same load.
//! 5. **Restore**: the load stops, the MDS is killed, `ecstack cluster restore` puts the last
//!    backup back, the MDS starts again, and every filled file must be listed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ecstack_base::{LatencyHistogram, Rng};
use ecstack_client::{Client, ClientOptions};
use ecstack_mds_proto::FileKind;
use serde::Serialize;

use crate::codfs_bench::{client_error, ours_security};
use crate::codfs_local::{LocalCluster, LocalSpec};
use crate::mds_bench::ROOT;
use crate::mount_bench::run_tool;
use crate::{LabError, Result};

/// Filled files per directory.
pub const FILES_PER_DIR: u64 = 1000;
/// The load's operations, in the order each task repeats them.
pub const LOAD_OPS: [&str; 3] = ["stat", "create", "unlink"];
/// How long the load runs before the idle window (connections made, caches warm).
const WARM_UP: Duration = Duration::from_secs(1);

/// The window a load operation starts in.
const PHASE_UNTIMED: u8 = 0;
const PHASE_IDLE: u8 = 1;
const PHASE_BACKUP: u8 = 2;
const PHASE_STOP: u8 = 3;

#[derive(Debug, Clone)]
pub struct BackupBenchConfig {
    /// The `ecstack` binary the MDS, `cluster backup` and `cluster restore` run from.
    pub exe: PathBuf,
    /// Files in the namespace.
    pub files: u64,
    /// Client tasks filling it at once.
    pub fill_tasks: usize,
    /// Client tasks of the load.
    pub load_tasks: usize,
    /// Length of the idle window, and least length of the backup window.
    pub seconds: f64,
    /// An empty PostgreSQL database (`postgresql://…`) to run against too.
    pub postgres_url: Option<String>,
    /// No TLS between the clients and the MDS.
    pub insecure: bool,
    /// Where each store's cluster and backups live (default: a temporary directory).
    pub dir: Option<PathBuf>,
}

impl BackupBenchConfig {
    pub fn new(exe: PathBuf) -> BackupBenchConfig {
        BackupBenchConfig {
            exe,
            files: 100_000,
            fill_tasks: 16,
            load_tasks: 4,
            seconds: 10.0,
            postgres_url: None,
            insecure: false,
            dir: None,
        }
    }

    fn validate(&self) -> Result<()> {
        crate::count_within("files", self.files, 1..=u64::MAX)?;
        crate::count_within("fill-tasks", self.fill_tasks as u64, 1..=1024)?;
        crate::count_within("load-tasks", self.load_tasks as u64, 1..=1024)?;
        if !(self.seconds > 0.0 && self.seconds <= 3600.0) {
            return Err(LabError::Config {
                field: "seconds",
                msg: format!("{} is outside (0, 3600]", self.seconds),
            });
        }
        Ok(())
    }
}

/// Latency and rate of some operations of one window.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyFigures {
    /// `all`, or one of [`LOAD_OPS`].
    pub op: &'static str,
    pub ops: u64,
    pub ops_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl LatencyFigures {
    fn of(op: &'static str, h: &LatencyHistogram, secs: f64) -> LatencyFigures {
        let ms = |ns: u64| ns as f64 / 1e6;
        LatencyFigures {
            op,
            ops: h.count(),
            ops_per_sec: h.count() as f64 / secs.max(1e-9),
            p50_ms: ms(h.quantile(0.5)),
            p99_ms: ms(h.quantile(0.99)),
            p999_ms: ms(h.quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

/// The load's figures in one window.
#[derive(Debug, Clone, Serialize)]
pub struct WindowFigures {
    pub secs: f64,
    /// Every operation first, then each of [`LOAD_OPS`].
    pub latency: Vec<LatencyFigures>,
}

/// One `cluster backup`.
#[derive(Debug, Clone, Serialize)]
pub struct BackupRun {
    /// The command's wall time, start to exit.
    pub secs: f64,
    /// The backup file's size.
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StoreFigures {
    /// `SQLite` or `PostgreSQL`.
    pub store: &'static str,
    pub fill_secs: f64,
    pub idle: WindowFigures,
    pub during_backup: WindowFigures,
    pub backups: Vec<BackupRun>,
    /// `cluster restore` of the last backup, MDS stopped.
    pub restore_secs: f64,
    /// Filled files listed after the restore and a restart of the MDS (all of them, or the run
    /// fails).
    pub files_after_restore: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BackupBenchReport {
    pub files: u64,
    pub fill_tasks: usize,
    pub load_tasks: usize,
    pub seconds: f64,
    pub stores: Vec<StoreFigures>,
}

impl BackupBenchReport {
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "Online metadata backup: {} files (empty, made with mknod, {} per directory); load: {} client tasks each repeating stat + create + unlink without pause; idle window {} s, backups back to back for at least {} s (one MDS, no OSDs)\n\n| store | window | op | ops/s | p50 ms | p99 ms | p99.9 ms | max ms |\n|---|---|---|---:|---:|---:|---:|---:|\n",
            self.files, FILES_PER_DIR, self.load_tasks, self.seconds, self.seconds
        );
        for st in &self.stores {
            for (window, w) in [("idle", &st.idle), ("during backup", &st.during_backup)] {
                for l in &w.latency {
                    s += &format!(
                        "| {} | {window} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
                        st.store, l.op, l.ops_per_sec, l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms
                    );
                }
            }
        }
        s += "\n| store | fill s | backups | backup s: min / median / max | backup size | restore s | files after restore |\n|---|---:|---:|---|---:|---:|---:|\n";
        for st in &self.stores {
            let mut secs: Vec<f64> = st.backups.iter().map(|b| b.secs).collect();
            secs.sort_by(f64::total_cmp);
            let size = st.backups.last().map_or(0, |b| b.bytes);
            s += &format!(
                "| {} | {:.1} | {} | {:.2} / {:.2} / {:.2} | {} | {:.2} | {} |\n",
                st.store,
                st.fill_secs,
                secs.len(),
                secs[0],
                secs[secs.len() / 2],
                secs[secs.len() - 1],
                ecstack_base::fmt_size(size),
                st.restore_secs,
                st.files_after_restore
            );
        }
        s
    }
}

/// Runs the benchmark on each store; every process it started is stopped whatever happens.
pub fn run(cfg: &BackupBenchConfig, log: &dyn Fn(&str)) -> Result<BackupBenchReport> {
    cfg.validate()?;
    let rt = crate::codfs_bench::runtime()?;
    let mut stores = Vec::new();
    let mut which = vec![("SQLite", None)];
    if let Some(url) = &cfg.postgres_url {
        which.push(("PostgreSQL", Some(url.clone())));
    }
    for (name, store) in which {
        let temp = match &cfg.dir {
            Some(d) => tempfile::Builder::new()
                .prefix("ecstack-bench-backup-")
                .tempdir_in(d),
            None => tempfile::Builder::new()
                .prefix("ecstack-bench-backup-")
                .tempdir(),
        }
        .map_err(|e| LabError::Run(format!("cannot make a temporary directory: {e}")))?;
        let mut spec = LocalSpec::new(cfg.exe.clone(), temp.path().join("cluster"), 0);
        spec.insecure = cfg.insecure;
        spec.mds_store = store;
        log(&format!(
            "{name}: starting an MDS in {}",
            temp.path().display()
        ));
        let mut cluster = LocalCluster::start(spec).map_err(client_error)?;
        let r = rt.block_on(one_store(cfg, &mut cluster, temp.path(), name, log));
        let alive = cluster.check_alive().map_err(client_error);
        cluster.stop();
        stores.push(r.and_then(|r| alive.map(|()| r))?);
    }
    Ok(BackupBenchReport {
        files: cfg.files,
        fill_tasks: cfg.fill_tasks,
        load_tasks: cfg.load_tasks,
        seconds: cfg.seconds,
        stores,
    })
}

async fn one_store(
    cfg: &BackupBenchConfig,
    cluster: &mut LocalCluster,
    dir: &Path,
    store: &'static str,
    log: &dyn Fn(&str),
) -> Result<StoreFigures> {
    let client = Client::connect_with(
        cluster.config(),
        ours_security(cluster)?,
        ClientOptions::default(),
    )
    .map_err(client_error)?;
    // The MDS answers (no OSDs needed for metadata).
    client
        .wait_for_osds(0, Duration::from_secs(30))
        .await
        .map_err(client_error)?;

    let start = Instant::now();
    let dirs = fill(cfg, &client, store, log).await?;
    let fill_secs = start.elapsed().as_secs_f64();
    log(&format!(
        "{store}: {} files in {fill_secs:.1} s ({:.0}/s)",
        cfg.files,
        cfg.files as f64 / fill_secs.max(1e-9)
    ));

    let load_dir = client
        .mkdir(ROOT, b"load", 0o755, 0, 0)
        .await
        .map_err(client_error)?
        .ino;
    let load = Load::start(cfg, &client, Arc::new(dirs.clone()), load_dir);
    tokio::time::sleep(WARM_UP).await;
    let window = Duration::from_secs_f64(cfg.seconds);
    load.phase.store(PHASE_IDLE, Ordering::Relaxed);
    let idle_start = Instant::now();
    tokio::time::sleep(window).await;
    let idle_secs = idle_start.elapsed().as_secs_f64();
    log(&format!(
        "{store}: idle window: {} load operations in {idle_secs:.1} s",
        load.done.load(Ordering::Relaxed)
    ));

    let file = dir.join("meta.backup");
    let mut backups = Vec::new();
    load.phase.store(PHASE_BACKUP, Ordering::Relaxed);
    let backup_start = Instant::now();
    while backups.is_empty() || backup_start.elapsed() < window {
        let b = backup(&cfg.exe, cluster, &file).await;
        let b = match b {
            Ok(b) => b,
            Err(e) => {
                load.stop().await.ok();
                return Err(e);
            }
        };
        log(&format!(
            "{store}: backup {}: {} in {:.2} s",
            backups.len() + 1,
            ecstack_base::fmt_size(b.bytes),
            b.secs
        ));
        backups.push(b);
    }
    let backup_secs = backup_start.elapsed().as_secs_f64();
    load.phase.store(PHASE_UNTIMED, Ordering::Relaxed);
    let [idle, during] = load.stop().await?;

    // The last backup back in place, with the MDS stopped.
    cluster.kill_mds();
    let restore_start = Instant::now();
    ecstack_cli(&cfg.exe, cluster, &["cluster", "restore"], &file).await?;
    let restore_secs = restore_start.elapsed().as_secs_f64();
    cluster.start_mds().map_err(client_error)?;
    let mut listed = 0u64;
    for d in &dirs {
        listed += client.read_dir_all(*d).await.map_err(client_error)?.len() as u64;
    }
    log(&format!(
        "{store}: restored in {restore_secs:.2} s; {listed} of {} files listed",
        cfg.files
    ));
    if listed != cfg.files {
        return Err(LabError::Run(format!(
            "{store}: after the restore {listed} of the {} files are listed",
            cfg.files
        )));
    }
    Ok(StoreFigures {
        store,
        fill_secs,
        idle: window_figures(&idle, idle_secs),
        during_backup: window_figures(&during, backup_secs),
        backups,
        restore_secs,
        files_after_restore: listed,
    })
}

/// Makes the namespace; the directories' inodes, in order (file `i` is `f<i>` in directory
/// `i / FILES_PER_DIR`).
async fn fill(
    cfg: &BackupBenchConfig,
    client: &Client,
    store: &str,
    log: &dyn Fn(&str),
) -> Result<Vec<u64>> {
    let top = client
        .mkdir(ROOT, b"fill", 0o755, 0, 0)
        .await
        .map_err(client_error)?
        .ino;
    let mut dirs = Vec::new();
    for d in 0..cfg.files.div_ceil(FILES_PER_DIR) {
        let name = format!("d{d}");
        let a = client
            .mkdir(top, name.as_bytes(), 0o755, 0, 0)
            .await
            .map_err(client_error)?;
        dirs.push(a.ino);
    }
    let dirs = Arc::new(dirs);
    let made = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..cfg.fill_tasks {
        let (client, dirs, made, next, files) = (
            client.clone(),
            dirs.clone(),
            made.clone(),
            next.clone(),
            cfg.files,
        );
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= files {
                    return Ok::<(), String>(());
                }
                let name = format!("f{i}");
                client
                    .mknod(
                        dirs[(i / FILES_PER_DIR) as usize],
                        name.as_bytes(),
                        FileKind::File,
                        0o644,
                        0,
                        0,
                        0,
                        true,
                    )
                    .await
                    .map_err(|e| format!("mknod of file {i}: {e}"))?;
                made.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let start = Instant::now();
    let mut every = tokio::time::interval(Duration::from_secs(5));
    every.tick().await;
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                None => break,
                Some(r) => {
                    if let Err(e) = r.map_err(|e| e.to_string()).and_then(|r| r) {
                        tasks.abort_all();
                        return Err(LabError::Run(format!("{store}: fill: {e}")));
                    }
                }
            },
            _ = every.tick() => {
                let n = made.load(Ordering::Relaxed);
                log(&format!(
                    "{store}: fill: {n}/{} files ({:.0}/s)",
                    cfg.files,
                    n as f64 / start.elapsed().as_secs_f64().max(1e-9)
                ));
            }
        }
    }
    Ok(Arc::try_unwrap(dirs).unwrap_or_else(|d| (*d).clone()))
}

/// Per window (idle, during backup), per op of [`LOAD_OPS`], the latencies.
type WindowHists = [[LatencyHistogram; 3]; 2];

/// The load's tasks and the window they record into.
struct Load {
    phase: Arc<AtomicU8>,
    /// Operations done in any window.
    done: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<std::result::Result<WindowHists, String>>>,
}

impl Load {
    fn start(cfg: &BackupBenchConfig, client: &Client, dirs: Arc<Vec<u64>>, load_dir: u64) -> Load {
        let phase = Arc::new(AtomicU8::new(PHASE_UNTIMED));
        let done = Arc::new(AtomicU64::new(0));
        let files = cfg.files;
        let tasks = (0..cfg.load_tasks)
            .map(|t| {
                let (client, dirs, phase, done) =
                    (client.clone(), dirs.clone(), phase.clone(), done.clone());
                tokio::spawn(async move {
                    let mut hists: WindowHists = Default::default();
                    let mut rng = Rng::new(0x6261_636b_7570 ^ t as u64);
                    let mut i = 0u64;
                    loop {
                        let name = format!("t{t}-{i}");
                        for (k, op) in LOAD_OPS.iter().enumerate() {
                            let p = phase.load(Ordering::Relaxed);
                            if p == PHASE_STOP {
                                return Ok(hists);
                            }
                            let began = Instant::now();
                            let r = match k {
                                0 => {
                                    let f = rng.below(files);
                                    let n = format!("f{f}");
                                    client
                                        .lookup(dirs[(f / FILES_PER_DIR) as usize], n.as_bytes())
                                        .await
                                        .map(drop)
                                }
                                1 => client
                                    .mknod(
                                        load_dir,
                                        name.as_bytes(),
                                        FileKind::File,
                                        0o644,
                                        0,
                                        0,
                                        0,
                                        true,
                                    )
                                    .await
                                    .map(drop),
                                _ => client.unlink(load_dir, name.as_bytes()).await,
                            };
                            r.map_err(|e| format!("{op} of {name}: {e}"))?;
                            if p == PHASE_IDLE || p == PHASE_BACKUP {
                                hists[usize::from(p - PHASE_IDLE)][k]
                                    .record_duration(began.elapsed());
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        Load { phase, done, tasks }
    }

    /// Stops the tasks; the merged histograms of the idle and the backup window.
    async fn stop(self) -> Result<WindowHists> {
        self.phase.store(PHASE_STOP, Ordering::Relaxed);
        let mut all: WindowHists = Default::default();
        let mut first_error = None;
        for t in self.tasks {
            match t.await.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok(h) => {
                    for (a, h) in all.iter_mut().zip(&h) {
                        for (a, h) in a.iter_mut().zip(h) {
                            a.merge(h);
                        }
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(LabError::Run(format!("the load: {e}"))),
            None => Ok(all),
        }
    }
}

fn window_figures(h: &[LatencyHistogram; 3], secs: f64) -> WindowFigures {
    let mut all = LatencyHistogram::new();
    for h in h {
        all.merge(h);
    }
    let mut latency = vec![LatencyFigures::of("all", &all, secs)];
    latency.extend(
        LOAD_OPS
            .iter()
            .zip(h)
            .map(|(op, h)| LatencyFigures::of(op, h, secs)),
    );
    WindowFigures { secs, latency }
}

/// Runs `ecstack <args> FILE --config … --json` against the cluster (off the async threads); its
/// standard output.
async fn ecstack_cli(
    exe: &Path,
    cluster: &LocalCluster,
    args: &[&str],
    file: &Path,
) -> Result<Vec<u8>> {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .arg(file)
        .arg("--config")
        .arg(cluster.config_path())
        .arg("--json");
    if cluster.insecure() {
        cmd.arg("--insecure");
    }
    tokio::task::spawn_blocking(move || run_tool(&mut cmd))
        .await
        .map_err(|e| LabError::Run(e.to_string()))?
}

/// One `ecstack cluster backup` into `file`, timed.
async fn backup(exe: &Path, cluster: &LocalCluster, file: &Path) -> Result<BackupRun> {
    let start = Instant::now();
    ecstack_cli(exe, cluster, &["cluster", "backup"], file).await?;
    let secs = start.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(file).map_err(crate::io_at(file))?.len();
    Ok(BackupRun { secs, bytes })
}
