//! `ecstack bench mount`: file-system work through FUSE mounts, side by side in one run:
//! our cluster's mount (`ecstack cluster mount` over local MDS and OSD processes, RS k+m),
//! bindfs over a local directory (the FUSE-overhead floor) and, when given its mountpoint, a
//! GlusterFS disperse volume set up per `../shared/peers/glusterfs.md`.
//!
//! Each target runs the same work in a fresh directory: create, stat, rename and unlink of small
//! files (each create writes a few bytes and closes), `tar` extract of a real source tree and
//! `git status` on it, a sequential write (then fsync) and read of one big file in 1 MiB requests.
//! Reads come after the kernel's page cache is dropped (when the process may) and through a new
//! open. Ratios are ours / GlusterFS (and ours / bindfs).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::codfs_local::{LocalCluster, LocalSpec};
use crate::{LabError, Result};

/// The degraded read's row.
const DEGRADED_ROW: &str = "sequential read, 2 OSDs / bricks killed (1 MiB)";
/// How long a mount gets to appear.
const MOUNT_WAIT_SECS_MAX: u64 = 30;
/// OSDs (bricks) killed for the degraded read: m of RS 6+2, the most the read survives.
const DEGRADED_KILLED: usize = 2;
/// How long after the kill the degraded read starts: the MDS has declared the OSDs down (its
/// `down_after_ms`, 2 s, and a heartbeat) and promoted new primaries.
const DEGRADED_SETTLE: Duration = Duration::from_secs(4);
/// Bytes each small file gets.
const SMALL_FILE_BYTES: usize = 64;
/// The request size of the sequential write and read.
const SEQ_REQUEST_BYTES: usize = 1 << 20;
/// The random writes' size and queue depth (fio, O_DIRECT).
const RANDOM_BLOCK_BYTES: u64 = 4096;
const RANDOM_DEPTH: u32 = 16;
/// The row of the random writes with our mount's cache off.
const RANDOM_ROW: &str = "4 KiB random writes (O_DIRECT, depth 16, fsync)";
const RANDOM_OFF_ROW: &str = "4 KiB random writes, cache off (--cache-size 0)";

/// The workloads of a run; `ecstack bench mount --only` picks some.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountWorkload {
    /// Create, stat, rename and unlink of small files.
    Metadata,
    /// `tar` extract of `--tree` and `git status` on it.
    Tree,
    /// The sequential write and read, and `cluster put|get` of as many bytes on the same cluster.
    Sequential,
    /// The sequential file read again with two OSDs (bricks) killed (needs `Sequential`'s file).
    Degraded,
    /// fio 4 KiB random writes (O_DIRECT, queue depth 16) inside a file written first, then an
    /// fsync; on ours with the segment cache on and off.
    Random,
}

impl MountWorkload {
    pub const ALL: [MountWorkload; 5] = [
        MountWorkload::Metadata,
        MountWorkload::Tree,
        MountWorkload::Sequential,
        MountWorkload::Degraded,
        MountWorkload::Random,
    ];
}

impl std::fmt::Display for MountWorkload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MountWorkload::Metadata => "metadata",
            MountWorkload::Tree => "tree",
            MountWorkload::Sequential => "sequential",
            MountWorkload::Degraded => "degraded",
            MountWorkload::Random => "random",
        })
    }
}

impl std::str::FromStr for MountWorkload {
    type Err = LabError;

    fn from_str(s: &str) -> Result<MountWorkload> {
        MountWorkload::ALL
            .into_iter()
            .find(|w| w.to_string() == s.trim())
            .ok_or_else(|| LabError::Config {
                field: "only",
                msg: format!(
                    "unknown workload '{}' (expected metadata, tree, sequential, degraded, random)",
                    s.trim()
                ),
            })
    }
}

/// What `ecstack bench mount` runs.
#[derive(Debug, Clone)]
pub struct MountBenchConfig {
    /// The `ecstack` binary (starts the daemons and the mount).
    pub exe: PathBuf,
    pub osds: usize,
    pub k: u32,
    pub m: u32,
    pub segment_bytes: u64,
    /// The mount's segment cache.
    pub cache_bytes: u64,
    /// Small files of the metadata runs.
    pub files: usize,
    /// The sequential file's size.
    pub seq_bytes: u64,
    /// The file the random writes land in (written whole first).
    pub random_file_bytes: u64,
    /// 4 KiB random writes, all targets alike.
    pub random_writes: u64,
    /// A source tree to `tar` into each target (and run `git status` on); None: skipped.
    pub tree: Option<PathBuf>,
    /// A mounted GlusterFS volume to run on (None: not run).
    pub gluster: Option<PathBuf>,
    /// Set up a GlusterFS disperse k+m volume for the run ([`crate::gluster_peer`]) and run on
    /// it (instead of `gluster`).
    pub gluster_setup: bool,
    /// Run bindfs over a local directory too.
    pub bindfs: bool,
    /// Where everything lives (None: a temporary directory).
    pub dir: Option<PathBuf>,
    /// The workloads to run (all by default).
    pub workloads: Vec<MountWorkload>,
    /// Our MDS's store: `None` SQLite (the default), or a PostgreSQL URL (an empty database).
    pub mds_store: Option<String>,
}

impl MountBenchConfig {
    pub fn new(exe: PathBuf) -> MountBenchConfig {
        MountBenchConfig {
            exe,
            osds: 8,
            k: 6,
            m: 2,
            segment_bytes: 16 << 20,
            cache_bytes: 256 << 20,
            files: 10_000,
            seq_bytes: 1 << 30,
            random_file_bytes: 1 << 30,
            random_writes: 16_384,
            tree: None,
            gluster: None,
            gluster_setup: false,
            bindfs: true,
            dir: None,
            workloads: MountWorkload::ALL.to_vec(),
            mds_store: None,
        }
    }

    /// Whether the run includes `w`.
    pub fn runs(&self, w: MountWorkload) -> bool {
        self.workloads.contains(&w)
    }

    fn validate(&self) -> Result<()> {
        if self.osds < (self.k + self.m) as usize {
            return Err(LabError::Config {
                field: "osds",
                msg: format!(
                    "{}: RS {}+{} needs at least {} OSDs",
                    self.osds,
                    self.k,
                    self.m,
                    self.k + self.m
                ),
            });
        }
        if self.files == 0 || self.seq_bytes == 0 {
            return Err(LabError::Config {
                field: "files",
                msg: "--files and --seq-size must be above 0".into(),
            });
        }
        if self.random_writes == 0 || self.random_file_bytes < RANDOM_BLOCK_BYTES {
            return Err(LabError::Config {
                field: "random_writes",
                msg: format!(
                    "--random-writes must be above 0 and --random-file-size at least {RANDOM_BLOCK_BYTES} bytes"
                ),
            });
        }
        if self.workloads.is_empty() {
            return Err(LabError::Config {
                field: "only",
                msg: "no workload to run".into(),
            });
        }
        if self.runs(MountWorkload::Degraded) && !self.runs(MountWorkload::Sequential) {
            return Err(LabError::Config {
                field: "only",
                msg: "degraded reads the sequential run's file: add sequential".into(),
            });
        }
        if self.gluster.is_some() && self.gluster_setup {
            return Err(LabError::Config {
                field: "gluster",
                msg: "--gluster names a mounted volume, --gluster-setup makes one: not both".into(),
            });
        }
        if let Some(g) = &self.gluster {
            if !is_mountpoint(g) {
                return Err(LabError::Config {
                    field: "gluster",
                    msg: format!(
                        "{}: not a mountpoint (mount the volume first: ../shared/peers/glusterfs.md)",
                        g.display()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// One measured workload: a figure per target, in `unit`.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub workload: String,
    pub unit: String,
    /// (target, figure), in the report's target order.
    pub figures: Vec<(String, f64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MountBenchReport {
    pub targets: Vec<String>,
    pub rows: Vec<Row>,
    pub files: usize,
    pub seq_bytes: u64,
    pub osds: usize,
    pub k: u32,
    pub m: u32,
    pub segment_bytes: u64,
    pub cache_bytes: u64,
    /// The workloads run (`--only`).
    pub workloads: Vec<String>,
}

impl MountBenchReport {
    fn figure(row: &Row, target: &str) -> Option<f64> {
        row.figures.iter().find(|(t, _)| t == target).map(|x| x.1)
    }

    /// The table: one column per target, then ours / GlusterFS and ours / bindfs where both ran
    /// (higher is better for every unit here).
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "Mount benchmark ({}): {} small files, a {} MiB sequential file; ours = {} OSDs, RS {}+{}, {} MiB segments, {} MiB cache\n\n",
            self.workloads.join(", "),
            self.files,
            self.seq_bytes >> 20,
            self.osds,
            self.k,
            self.m,
            self.segment_bytes >> 20,
            self.cache_bytes >> 20
        );
        let ratios: Vec<&str> = ["gluster", "bindfs"]
            .into_iter()
            .filter(|t| self.targets.iter().any(|x| x == t))
            .collect();
        out.push_str("| workload | unit |");
        for t in &self.targets {
            out.push_str(&format!(" {t} |"));
        }
        for r in &ratios {
            out.push_str(&format!(" ours / {r} |"));
        }
        out.push_str("\n|---|---|");
        out.push_str(&"---:|".repeat(self.targets.len() + ratios.len()));
        out.push('\n');
        for row in &self.rows {
            out.push_str(&format!("| {} | {} |", row.workload, row.unit));
            for t in &self.targets {
                match Self::figure(row, t) {
                    Some(v) => out.push_str(&format!(" {v:.1} |")),
                    None => out.push_str(" – |"),
                }
            }
            for r in &ratios {
                match (Self::figure(row, "ours"), Self::figure(row, r)) {
                    (Some(a), Some(b)) if b > 0.0 => out.push_str(&format!(" {:.2} |", a / b)),
                    _ => out.push_str(" – |"),
                }
            }
            out.push('\n');
        }
        out
    }
}

fn run_err(what: &str, e: impl std::fmt::Display) -> LabError {
    LabError::Run(format!("{what}: {e}"))
}

/// Whether `dir` is a mountpoint now (listed in /proc/self/mounts).
pub fn is_mountpoint(dir: &Path) -> bool {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1) == dir.to_str())
}

fn wait_mounted(dir: &Path, what: &str) -> Result<()> {
    let start = Instant::now();
    while !is_mountpoint(dir) {
        if start.elapsed() > Duration::from_secs(MOUNT_WAIT_SECS_MAX) {
            return Err(LabError::Run(format!(
                "{what} did not mount at {} within {MOUNT_WAIT_SECS_MAX} s",
                dir.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Runs `cmd` to its end; its standard output, or its standard error in the error.
pub(crate) fn run_tool(cmd: &mut Command) -> Result<Vec<u8>> {
    let o = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| run_err(&format!("{cmd:?}"), e))?;
    if !o.status.success() {
        return Err(LabError::Run(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    Ok(o.stdout)
}

/// A mount this benchmark made; unmounted (and its process stopped) on drop.
struct Mounted {
    dir: PathBuf,
    child: Option<Child>,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
        if let Some(mut c) = self.child.take() {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Drops the kernel's clean page cache (root only; otherwise the read may be served from it,
/// and the report says nothing different: run as root).
fn drop_page_cache() {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

fn per_sec(n: usize, t: Duration) -> f64 {
    n as f64 / t.as_secs_f64().max(1e-9)
}

/// The metadata runs in `dir`: (create, stat, rename, unlink) ops/s.
fn metadata(dir: &Path, files: usize) -> Result<[f64; 4]> {
    let name = |i: usize| dir.join(format!("f{i:06}"));
    let moved = |i: usize| dir.join(format!("g{i:06}"));
    let body = [b'x'; SMALL_FILE_BYTES];
    let io = |what: &str, e: std::io::Error| run_err(what, e);
    let t = Instant::now();
    for i in 0..files {
        let mut f = File::create(name(i)).map_err(|e| io("create", e))?;
        f.write_all(&body).map_err(|e| io("write", e))?;
    }
    let create = per_sec(files, t.elapsed());
    let t = Instant::now();
    for i in 0..files {
        std::fs::metadata(name(i)).map_err(|e| io("stat", e))?;
    }
    let stat = per_sec(files, t.elapsed());
    let t = Instant::now();
    for i in 0..files {
        std::fs::rename(name(i), moved(i)).map_err(|e| io("rename", e))?;
    }
    let rename = per_sec(files, t.elapsed());
    let t = Instant::now();
    for i in 0..files {
        std::fs::remove_file(moved(i)).map_err(|e| io("unlink", e))?;
    }
    Ok([create, stat, rename, per_sec(files, t.elapsed())])
}

/// Sequential write (with fsync) then read of `bytes` at `path`: (write, read) MB/s.
fn sequential(path: &Path, bytes: u64) -> Result<(f64, f64)> {
    let t = Instant::now();
    write_file(path, bytes)?;
    let write = bytes as f64 / 1e6 / t.elapsed().as_secs_f64().max(1e-9);
    Ok((write, read_back(path, bytes)?))
}

/// Writes `bytes` at `path` in 1 MiB requests, then fsync.
fn write_file(path: &Path, bytes: u64) -> Result<()> {
    let mut buf = vec![0u8; SEQ_REQUEST_BYTES];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    let mut f = File::create(path).map_err(|e| run_err("create", e))?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..n]).map_err(|e| run_err("write", e))?;
        left -= n as u64;
    }
    f.sync_all().map_err(|e| run_err("fsync", e))
}

/// fio's 4 KiB random writes into a file of `file_bytes` at `path` (written whole first, not
/// timed): `writes` of them, O_DIRECT, libaio at queue depth 16, the same seed on every target,
/// then an fsync. Writes per second over the whole fio run, its final fsync included (a cache
/// that only holds the writes gains nothing until they are stored).
fn random_writes(path: &Path, file_bytes: u64, writes: u64) -> Result<f64> {
    write_file(path, file_bytes)?;
    let t = Instant::now();
    run_tool(
        Command::new("fio")
            .arg("--name=randwrite")
            .arg(format!("--filename={}", path.display()))
            .args(["--rw=randwrite", "--direct=1", "--ioengine=libaio"])
            .arg(format!("--bs={RANDOM_BLOCK_BYTES}"))
            .arg(format!("--iodepth={RANDOM_DEPTH}"))
            .arg(format!("--size={file_bytes}"))
            .arg(format!("--io_size={}", writes * RANDOM_BLOCK_BYTES))
            .args(["--end_fsync=1", "--randseed=42", "--output-format=terse"]),
    )?;
    Ok(per_sec(writes as usize, t.elapsed()))
}

/// Reads `path` whole in 1 MiB requests through a new open after dropping the page cache: MB/s.
fn read_back(path: &Path, bytes: u64) -> Result<f64> {
    let mut buf = vec![0u8; SEQ_REQUEST_BYTES];
    drop_page_cache();
    let t = Instant::now();
    let mut f = File::open(path).map_err(|e| run_err("open", e))?;
    let mut got = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| run_err("read", e))?;
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    if got != bytes {
        return Err(LabError::Run(format!(
            "{}: read {got} bytes back of {bytes}",
            path.display()
        )));
    }
    Ok(bytes as f64 / 1e6 / t.elapsed().as_secs_f64().max(1e-9))
}

/// `ecstack cluster put` of a local file of `bytes` and `cluster get` of it back, on the cluster
/// the mount runs on: (put, get) MB/s, the figures the mount's sequential ones are set against.
fn put_get(exe: &Path, config: &Path, dir: &Path, bytes: u64) -> Result<(f64, f64)> {
    let local = dir.join("put-source.bin");
    let mut buf = vec![0u8; SEQ_REQUEST_BYTES];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    {
        let mut f = File::create(&local).map_err(|e| run_err("create", e))?;
        let mut left = bytes;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            f.write_all(&buf[..n]).map_err(|e| run_err("write", e))?;
            left -= n as u64;
        }
    }
    let cluster = |args: &[&std::ffi::OsStr]| -> Result<f64> {
        let t = Instant::now();
        run_tool(
            Command::new(exe)
                .arg("cluster")
                .args(args)
                .arg("--config")
                .arg(config),
        )?;
        Ok(bytes as f64 / 1e6 / t.elapsed().as_secs_f64().max(1e-9))
    };
    let put = cluster(&["put".as_ref(), local.as_os_str(), "/bench-put.bin".as_ref()])?;
    let _ = std::fs::remove_file(&local);
    drop_page_cache();
    let got = dir.join("get-copy.bin");
    let get = cluster(&["get".as_ref(), "/bench-put.bin".as_ref(), got.as_os_str()])?;
    let _ = std::fs::remove_file(&got);
    cluster(&["rm".as_ref(), "/bench-put.bin".as_ref()])?;
    Ok((put, get))
}

/// The GlusterFS volume mounted at `mnt` (from /proc/self/mounts: `host:/volume`).
fn gluster_volume_of(mnt: &Path) -> Result<String> {
    let mnt = mnt.canonicalize().unwrap_or_else(|_| mnt.to_owned());
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let mut f = l.split(' ');
            let (src, at) = (f.next()?, f.next()?);
            (at == mnt.to_str()?)
                .then(|| src.rsplit_once(":/").map(|(_, v)| v.to_owned()))
                .flatten()
        })
        .ok_or_else(|| {
            LabError::Run(format!(
                "{}: no GlusterFS volume mounted there",
                mnt.display()
            ))
        })
}

/// SIGKILLs `count` brick processes of GlusterFS volume `volume` (pids from `gluster volume
/// status`): the peer's failed OSDs.
fn kill_gluster_bricks(volume: &str, count: usize) -> Result<()> {
    let out = Command::new("gluster")
        .args(["volume", "status", volume])
        .output()
        .map_err(|e| run_err("gluster volume status", e))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pids: Vec<i32> = brick_pids(&stdout).into_iter().take(count).collect();
    if pids.len() < count {
        let said = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
        return Err(LabError::Run(format!(
            "gluster volume status {volume}: {} running bricks, {count} to kill (it said: {})",
            pids.len(),
            said.split_whitespace().collect::<Vec<_>>().join(" ")
        )));
    }
    for pid in pids {
        run_tool(Command::new("kill").args(["-KILL", &pid.to_string()]))?;
    }
    Ok(())
}

/// The pids of the running bricks in a `gluster volume status` table: `Brick HOST:PATH  PORT
/// RDMA-PORT  ONLINE  PID`, where a long `HOST:PATH` wraps the rest onto the next line.
fn brick_pids(status: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    let mut lines = status.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("Brick ") {
            continue;
        }
        let mut fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 {
            fields.extend(lines.next().unwrap_or("").split_whitespace());
        }
        if let Some(pid) = fields.last().and_then(|p| p.parse::<i32>().ok()) {
            if pid > 0 {
                pids.push(pid);
            }
        }
    }
    pids
}

/// `tar -xf` of `tarball` into `dir/tree`, then `git status` there (after an untimed
/// `git init`, `add`, `commit`): (files/s of the extract, runs/s of `git status`).
fn tree_work(dir: &Path, tarball: &Path, files: usize, home: &Path) -> Result<(f64, f64)> {
    let tree = dir.join("tree");
    std::fs::create_dir(&tree).map_err(|e| run_err("mkdir", e))?;
    let t = Instant::now();
    run_tool(
        Command::new("tar")
            .arg("-xf")
            .arg(tarball)
            .arg("-C")
            .arg(&tree),
    )?;
    let extract = per_sec(files, t.elapsed());
    let git = |args: &[&str]| {
        run_tool(
            Command::new("git")
                .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
                .args(args)
                .current_dir(&tree)
                .env("HOME", home)
                .env("GIT_CONFIG_NOSYSTEM", "1"),
        )
    };
    git(&["init", "-q"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-q", "-m", "bench"])?;
    const RUNS: usize = 3;
    let t = Instant::now();
    for _ in 0..RUNS {
        git(&["status", "--porcelain"])?;
    }
    Ok((extract, per_sec(RUNS, t.elapsed())))
}

/// `ecstack cluster mount` of the cluster at `config` on `mnt` (made), its log beside it.
fn mount_ours(
    cfg: &MountBenchConfig,
    config: &Path,
    mnt: &Path,
    cache_bytes: u64,
) -> Result<Mounted> {
    std::fs::create_dir_all(mnt).map_err(|e| run_err("mkdir", e))?;
    let log = File::create(mnt.with_extension("log")).map_err(|e| run_err("log", e))?;
    let child = Command::new(&cfg.exe)
        .args(["cluster", "mount"])
        .arg(mnt)
        .arg("--cache-size")
        .arg(cache_bytes.to_string())
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| run_err("ecstack cluster mount", e))?;
    let mounted = Mounted {
        dir: mnt.to_owned(),
        child: Some(child),
    };
    wait_mounted(mnt, "ecstack cluster mount")?;
    Ok(mounted)
}

/// Every workload on one target (`work` is a fresh directory inside its mount).
fn run_target(
    cfg: &MountBenchConfig,
    work: &Path,
    tarball: Option<&(PathBuf, usize)>,
    home: &Path,
    log: &dyn Fn(&str),
) -> Result<Vec<(String, &'static str, f64)>> {
    std::fs::create_dir_all(work).map_err(|e| run_err("mkdir", e))?;
    let mut rows = Vec::new();
    if cfg.runs(MountWorkload::Metadata) {
        let meta = work.join("meta");
        std::fs::create_dir(&meta).map_err(|e| run_err("mkdir", e))?;
        let [create, stat, rename, unlink] = metadata(&meta, cfg.files)?;
        log(&format!("  metadata: create {create:.0}/s, stat {stat:.0}/s, rename {rename:.0}/s, unlink {unlink:.0}/s"));
        rows.extend([
            (
                "create (small file, write, close)".to_owned(),
                "ops/s",
                create,
            ),
            ("stat".to_owned(), "ops/s", stat),
            ("rename".to_owned(), "ops/s", rename),
            ("unlink".to_owned(), "ops/s", unlink),
        ]);
    }
    if let Some((tarball, files)) = tarball {
        let (extract, status) = tree_work(work, tarball, *files, home)?;
        log(&format!(
            "  tree: tar extract {extract:.0} files/s, git status {status:.2}/s"
        ));
        rows.push(("tar extract".to_owned(), "files/s", extract));
        rows.push(("git status".to_owned(), "runs/s", status));
    }
    if cfg.runs(MountWorkload::Sequential) {
        let (write, read) = sequential(&work.join("seq.bin"), cfg.seq_bytes)?;
        log(&format!(
            "  sequential: write {write:.0} MB/s, read {read:.0} MB/s"
        ));
        rows.push(("sequential write (1 MiB, fsync)".to_owned(), "MB/s", write));
        rows.push(("sequential read (1 MiB)".to_owned(), "MB/s", read));
    }
    if cfg.runs(MountWorkload::Random) {
        let path = work.join("random.bin");
        let iops = random_writes(&path, cfg.random_file_bytes, cfg.random_writes)?;
        log(&format!(
            "  random: {iops:.0} writes/s (4 KiB, O_DIRECT, depth {RANDOM_DEPTH}, fsync included)"
        ));
        rows.push((RANDOM_ROW.to_owned(), "writes/s", iops));
        std::fs::remove_file(&path).map_err(|e| run_err("rm", e))?;
    }
    Ok(rows)
}

/// Runs the benchmark; every process and mount it started is stopped whatever happens.
pub fn run(cfg: &MountBenchConfig, log: &dyn Fn(&str)) -> Result<MountBenchReport> {
    cfg.validate()?;
    let temp;
    let dir = match &cfg.dir {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("ecstack-bench-mount-")
                .tempdir()
                .map_err(|e| run_err("cannot make a temporary directory", e))?;
            temp.path().to_owned()
        }
    };
    std::fs::create_dir_all(&dir).map_err(|e| run_err(&format!("mkdir {}", dir.display()), e))?;
    let stamp = std::process::id();
    let tarball = match &cfg.tree {
        Some(tree) if cfg.runs(MountWorkload::Tree) => {
            let tarball = dir.join("tree.tar");
            run_tool(
                Command::new("tar")
                    .arg("-cf")
                    .arg(&tarball)
                    .arg("--exclude=./target")
                    .arg("--exclude=./.git")
                    .arg("-C")
                    .arg(tree)
                    .arg("."),
            )?;
            let out = Command::new("tar")
                .arg("-tf")
                .arg(&tarball)
                .output()
                .map_err(|e| run_err("tar -tf", e))?;
            Some((tarball, out.stdout.split(|&b| b == b'\n').count()))
        }
        _ => None,
    };

    let mut spec = LocalSpec::new(cfg.exe.clone(), dir.join("cluster"), cfg.osds);
    spec.k = cfg.k;
    spec.m = cfg.m;
    spec.segment_bytes = cfg.segment_bytes;
    spec.mds_store = cfg.mds_store.clone();
    log(&format!(
        "starting the cluster: {} OSDs, RS {}+{}, metadata in {}",
        cfg.osds,
        cfg.k,
        cfg.m,
        if cfg.mds_store.is_some() {
            "PostgreSQL"
        } else {
            "SQLite"
        }
    ));
    let mut cluster = LocalCluster::start(spec).map_err(|e| run_err("cluster", e))?;
    // Every OSD registered before the mount writes.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| run_err("cannot start the async runtime", e))?;
    rt.block_on(async {
        let client = ecstack_client::Client::from_config_file_with(
            &cluster.config_path(),
            "client",
            false,
            ecstack_client::ClientOptions::default(),
        )?;
        client
            .wait_for_osds(cfg.osds, Duration::from_secs(60))
            .await
    })
    .map_err(|e| run_err("waiting for the OSDs", e))?;
    let ours_dir = dir.join("mnt-ours");
    let ours = mount_ours(cfg, &cluster.config_path(), &ours_dir, cfg.cache_bytes)?;

    let mut targets: Vec<(String, PathBuf, Option<Mounted>)> =
        vec![("ours".into(), ours_dir, None)];
    let _ours = ours;
    if cfg.bindfs {
        let src = dir.join("bindfs-src");
        let mnt = dir.join("mnt-bindfs");
        std::fs::create_dir_all(&src).map_err(|e| run_err("mkdir", e))?;
        std::fs::create_dir_all(&mnt).map_err(|e| run_err("mkdir", e))?;
        run_tool(Command::new("bindfs").arg(&src).arg(&mnt))?;
        wait_mounted(&mnt, "bindfs")?;
        targets.push((
            "bindfs".into(),
            mnt.clone(),
            Some(Mounted {
                dir: mnt,
                child: None,
            }),
        ));
    }
    let mut made_volume = None;
    if cfg.gluster_setup {
        log(&format!(
            "setting up GlusterFS: disperse {}+{} over {} bricks",
            cfg.k,
            cfg.m,
            cfg.k + cfg.m
        ));
        let v = crate::gluster_peer::GlusterVolume::create(
            &dir.join("gluster"),
            &format!("ecstack{stamp}"),
            cfg.k,
            cfg.m,
        )?;
        targets.push(("gluster".into(), v.mountpoint.clone(), None));
        made_volume = Some(v);
    }
    if let Some(g) = &cfg.gluster {
        targets.push(("gluster".into(), g.clone(), None));
    }

    let mut rows: Vec<Row> = Vec::new();
    for (name, mnt, _) in &targets {
        log(&format!("{name}: {}", mnt.display()));
        let work = mnt.join(format!("ecstack-bench-{stamp}"));
        let mut figures = run_target(cfg, &work, tarball.as_ref(), &dir, log)?;
        let seq = work.join("seq.bin");
        if name == "ours" && cfg.runs(MountWorkload::Sequential) {
            let (put, get) = put_get(&cfg.exe, &cluster.config_path(), &dir, cfg.seq_bytes)?;
            log(&format!(
                "  cluster put {put:.0} MB/s, cluster get {get:.0} MB/s (same cluster)"
            ));
            figures.push(("cluster put (same cluster)".to_owned(), "MB/s", put));
            figures.push(("cluster get (same cluster)".to_owned(), "MB/s", get));
        }
        if name == "ours" && cfg.runs(MountWorkload::Random) {
            let off_dir = dir.join("mnt-ours-cache-off");
            let off = mount_ours(cfg, &cluster.config_path(), &off_dir, 0)?;
            let path = off_dir.join(format!("random-{stamp}.bin"));
            let iops = random_writes(&path, cfg.random_file_bytes, cfg.random_writes)?;
            log(&format!("  random, cache off: {iops:.0} writes/s"));
            figures.push((RANDOM_OFF_ROW.to_owned(), "writes/s", iops));
            std::fs::remove_file(&path).map_err(|e| run_err("rm", e))?;
            drop(off);
        }
        match name.as_str() {
            _ if !cfg.runs(MountWorkload::Degraded) => {}
            "ours" => {
                for i in 0..DEGRADED_KILLED {
                    cluster.kill_osd(i);
                }
                std::thread::sleep(DEGRADED_SETTLE);
                let read = read_back(&seq, cfg.seq_bytes)?;
                log(&format!(
                    "  degraded read ({DEGRADED_KILLED} OSDs killed): {read:.0} MB/s"
                ));
                figures.push((DEGRADED_ROW.to_owned(), "MB/s", read));
                for i in 0..DEGRADED_KILLED {
                    cluster
                        .start_osd(i)
                        .map_err(|e| run_err("restarting an OSD", e))?;
                }
            }
            "gluster" => {
                let volume = gluster_volume_of(mnt)?;
                kill_gluster_bricks(&volume, DEGRADED_KILLED)?;
                std::thread::sleep(DEGRADED_SETTLE);
                let read = read_back(&seq, cfg.seq_bytes);
                run_tool(Command::new("gluster").args(["volume", "start", &volume, "force"]))?;
                let read = read?;
                log(&format!(
                    "  degraded read ({DEGRADED_KILLED} bricks killed): {read:.0} MB/s"
                ));
                figures.push((DEGRADED_ROW.to_owned(), "MB/s", read));
            }
            _ => {}
        }
        for (workload, unit, v) in figures {
            match rows.iter_mut().find(|r| r.workload == workload) {
                Some(r) => r.figures.push((name.clone(), v)),
                None => rows.push(Row {
                    workload,
                    unit: unit.to_owned(),
                    figures: vec![(name.clone(), v)],
                }),
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&work) {
            log(&format!(
                "{name}: could not clean up {}: {e}",
                work.display()
            ));
        }
    }
    drop(targets);
    drop(made_volume);
    drop(_ours);
    cluster.stop();
    Ok(MountBenchReport {
        targets: rows
            .first()
            .map(|r| r.figures.iter().map(|f| f.0.clone()).collect())
            .unwrap_or_default(),
        rows,
        files: cfg.files,
        seq_bytes: cfg.seq_bytes,
        osds: cfg.osds,
        k: cfg.k,
        m: cfg.m,
        segment_bytes: cfg.segment_bytes,
        cache_bytes: cfg.cache_bytes,
        workloads: cfg.workloads.iter().map(|w| w.to_string()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_column_per_target_and_ratios_to_the_peers() {
        let report = MountBenchReport {
            targets: vec!["ours".into(), "bindfs".into(), "gluster".into()],
            rows: vec![Row {
                workload: "stat".into(),
                unit: "ops/s".into(),
                figures: vec![
                    ("ours".into(), 300.0),
                    ("bindfs".into(), 600.0),
                    ("gluster".into(), 200.0),
                ],
            }],
            files: 10,
            seq_bytes: 1 << 20,
            osds: 8,
            k: 6,
            m: 2,
            segment_bytes: 16 << 20,
            cache_bytes: 256 << 20,
            workloads: vec!["metadata".into()],
        };
        let md = report.markdown();
        assert!(
            md.contains("| stat | ops/s | 300.0 | 600.0 | 200.0 | 1.50 | 0.50 |"),
            "{md}"
        );
        assert!(md.starts_with("Mount benchmark (metadata):"), "{md}");
    }

    #[test]
    fn brick_pids_are_read_from_wrapped_status_lines_too() {
        let status = "Status of volume: v\n\
Gluster process                             TCP Port  RDMA Port  Online  Pid\n\
------------------------------------------------------------------------------\n\
Brick vm:/var/tmp/a/b0                      51865     0          Y       14383\n\
Brick vm:/var/tmp/mb/full2/gluster/bricks/b\n\
1                                           51138     0          Y       14399\n\
Brick vm:/var/tmp/a/b2                      N/A       N/A        N       N/A\n\
Self-heal Daemon on localhost               N/A       N/A        Y       14512\n";
        assert_eq!(brick_pids(status), vec![14383, 14399]);
    }

    #[test]
    fn only_names_the_workloads_and_degraded_needs_sequential() {
        for w in MountWorkload::ALL {
            assert_eq!(w.to_string().parse::<MountWorkload>().unwrap(), w);
        }
        assert!("fio".parse::<MountWorkload>().is_err());
        let mut cfg = MountBenchConfig::new(PathBuf::from("ecstack"));
        cfg.workloads = vec![MountWorkload::Sequential];
        assert!(cfg.validate().is_ok());
        cfg.workloads = vec![MountWorkload::Degraded];
        assert!(cfg.validate().is_err());
        cfg.workloads.clear();
        assert!(cfg.validate().is_err());
    }
}
