//! `ecstack reduce analyze`: walk a tree, analyse each selected file once with every configuration on
//! parallel workers, record per-file outcomes and chunk runs, then do the dedup accounting.
//!
//! The walk (one thread) sorts names byte-wise and numbers every regular file in that order (`seq`);
//! files go through a bounded queue to the workers as they are found, so walking and processing overlap.
//! The first `limit` of the workers take files (`Throttle`); the limit follows the configuration file.

use crate::config::{Config, Configuration, Method};
use crate::engine::{ChunkSink, Engine, Outcome};
use crate::index::{ChunkRecord, RunSpiller};
use crate::results::{self, Manifest, WalkCounts};
use crate::throttle::Throttle;
use crate::ReduceError;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rusqlite::params;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Shard `index` of `count` (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("'{s}' is not a shard (i/N, e.g. 0/4)"))?;
        let (i, n): (u32, u32) = match (i.parse(), n.parse()) {
            (Ok(i), Ok(n)) => (i, n),
            _ => return Err(format!("'{s}' is not a shard (i/N, e.g. 0/4)")),
        };
        if n == 0 || i >= n {
            return Err(format!("shard {i}/{n}: need 0 <= i < N"));
        }
        Ok(Shard { index: i, count: n })
    }
}

/// What to analyse and how.
#[derive(Clone, Debug)]
pub struct AnalyzeOptions {
    pub root: PathBuf,
    pub out: PathBuf,
    pub config: Config,
    /// The configuration file, re-read while running for the worker count (live throttling): when its
    /// mtime changes (polled every 0.5 s) and at once on [`crate::reload_config`] (which the binary
    /// calls on SIGHUP).
    pub config_path: Option<PathBuf>,
    /// Threads started; the configured `workers` (≤ this) take files. Default: max(workers, cores).
    pub workers_max: Option<usize>,
    pub shard: Option<Shard>,
    /// Analyse only files whose path hash falls below this fraction (1.0 = all).
    pub sample_fraction: f64,
    /// Bytes-weighted sample instead: one sample point every this many bytes of the tree (in walk
    /// order); a file is analysed when a point falls in it ([`byte_sampled`]). None = not sampled so.
    pub sample_bytes: Option<u64>,
    /// Draw a progress bar on stderr (only when it is a terminal).
    pub progress: bool,
}

/// What `analyze` prints.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AnalyzeSummary {
    pub results: String,
    pub manifest: Manifest,
    pub bytes_per_second: f64,
    /// (seconds since start, worker limit) each time the limit changed.
    pub worker_limits: Vec<(f64, usize)>,
}

/// FNV-1a 64 of a relative path with a salt: the shard and sample rules (stable across machines).
fn path_hash(rel: &[u8], salt: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ salt;
    for &b in rel {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // Finalise (FNV's low bits mix poorly for `% N`).
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// The shard a relative path belongs to.
pub fn shard_of(rel: &[u8], count: u32) -> u32 {
    (path_hash(rel, 0) % count as u64) as u32
}

/// Whether a relative path is in the sample of `fraction`.
pub fn sampled(rel: &[u8], fraction: f64) -> bool {
    fraction >= 1.0
        || (path_hash(rel, 0x5a3e_11d7) as f64) < fraction * 18_446_744_073_709_551_616.0
}

/// The start of the sample points of a bytes-weighted sample of spacing `spacing` (fixed by a salt).
fn byte_sample_start(spacing: u64) -> u64 {
    path_hash(&spacing.to_le_bytes(), 0x6b79_7465_735f_7331) % spacing.max(1)
}

/// Bytes-weighted (size-proportional) sample: the sample points are at u + k·spacing bytes of the
/// tree's bytes concatenated in walk order (u fixed by a salt, in [0, spacing)); a file whose bytes
/// are `start..start + len` of that concatenation is in the sample when a point falls inside. Over
/// the start u, a file's inclusion probability is exactly min(1, len / spacing): a file at least
/// `spacing` long is always in it, an empty one never (systematic PPS sampling, Särndal et al.,
/// *Model Assisted Survey Sampling*, §3.6).
pub fn byte_sampled(start: u64, len: u64, spacing: u64) -> bool {
    if len == 0 || spacing == 0 {
        return len > 0;
    }
    let u = byte_sample_start(spacing) as u128;
    let (start, len, s) = (start as u128, len as u128, spacing as u128);
    // The first point at or after `start`.
    let first = if start <= u {
        u
    } else {
        u + (start - u).div_ceil(s) * s
    };
    first < start + len
}

struct Job {
    seq: u64,
    path: PathBuf,
    rel: String,
}

/// The walk hands files to the workers in batches of up to `BATCH_FILES` files or `BATCH_BYTES` bytes
/// (a larger file goes alone), and a worker reports a batch's results in one event: one channel
/// message and at most one wakeup per batch, not per file (on a tree of small files the per-file
/// messages and wakeups cost more CPU than the chunking and hashing of those files).
const BATCH_FILES: usize = 64;
const BATCH_BYTES: u64 = 16 << 20;

/// One file's results.
struct Done {
    seq: u64,
    rel: String,
    bytes: u64,
    outcomes: Vec<Outcome>,
}

enum Event {
    Walked {
        bytes: u64,
    },
    Done(Vec<Done>),
    Problem {
        rel: String,
        kind: &'static str,
        message: String,
    },
    WalkEnd(WalkCounts),
    WorkerEnd(Result<(), ReduceError>),
}

fn rel_of(root: &Path, p: &Path) -> String {
    let r = p
        .strip_prefix(root)
        .unwrap_or(p)
        .to_string_lossy()
        .replace('\\', "/");
    if r.is_empty() {
        ".".into()
    } else {
        r
    }
}

fn io_kind(e: &std::io::Error) -> &'static str {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        "permission_denied"
    } else {
        "unreadable"
    }
}

/// Run an analysis; the results directory is complete when this returns Ok.
pub fn analyze(opts: &AnalyzeOptions) -> Result<AnalyzeSummary, ReduceError> {
    let t0 = Instant::now();
    opts.config.validate()?;
    if !(opts.sample_fraction > 0.0 && opts.sample_fraction <= 1.0) {
        return Err(ReduceError::Usage(
            "the sample fraction is in (0, 1]".into(),
        ));
    }
    match opts.sample_bytes {
        Some(0) => {
            return Err(ReduceError::Usage(
                "the bytes-weighted sample's spacing is at least 1 byte".into(),
            ))
        }
        Some(_) if opts.sample_fraction < 1.0 => {
            return Err(ReduceError::Usage(
                "a sample is either by files (--sample) or by bytes (--sample-bytes), not both"
                    .into(),
            ))
        }
        _ => {}
    }
    let meta = std::fs::metadata(&opts.root)
        .map_err(|e| ReduceError::Usage(format!("{}: {e}", opts.root.display())))?;
    if !meta.is_dir() {
        return Err(ReduceError::Usage(format!(
            "{} is not a directory",
            opts.root.display()
        )));
    }
    let configs = opts.config.configurations()?;
    let mut hangups_seen = crate::signal::reloads();
    let mut conn = results::create_dir(&opts.out, &configs)?;
    // The results directory by (device, inode): one stat per directory of the walk to skip it.
    let out_abs = std::fs::metadata(&opts.out).ok().map(|m| dev_ino(&m));
    let workers_max = opts
        .workers_max
        .unwrap_or_else(|| opts.config.workers.max(cores()))
        .max(1);
    let throttle = Arc::new(Throttle::new(opts.config.workers, workers_max));
    let (ev_tx, ev_rx) = mpsc::channel::<Event>();
    let (job_tx, job_rx) = mpsc::sync_channel::<Vec<Job>>(2 * workers_max);
    let job_rx = Arc::new(Mutex::new(job_rx));
    let stop = Arc::new(AtomicBool::new(false));

    // The walk.
    let walker = {
        let (root, tx, shard, follow, stop) = (
            opts.root.clone(),
            ev_tx.clone(),
            opts.shard,
            opts.config.follow_symlinks,
            stop.clone(),
        );
        let sample = match opts.sample_bytes {
            Some(s) => Sample::Bytes(s),
            None => Sample::Files(opts.sample_fraction),
        };
        std::thread::spawn(move || walk(&root, out_abs, follow, shard, sample, &job_tx, &tx, &stop))
    };
    // The workers.
    let mut handles = Vec::new();
    for k in 0..workers_max {
        let (configs, rx, tx, th, out) = (
            configs.clone(),
            job_rx.clone(),
            ev_tx.clone(),
            throttle.clone(),
            opts.out.clone(),
        );
        let memory = opts.config.index_memory_bytes;
        handles.push(std::thread::spawn(move || {
            let r = worker(k, &configs, &rx, &tx, &th, &out, memory);
            let _ = tx.send(Event::WorkerEnd(r));
        }));
    }
    drop(ev_tx);

    let bar = if opts.progress {
        ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    let mut first_error: Option<ReduceError> = None;
    let (mut files, mut bytes, mut workers_left) = (0u64, 0u64, workers_max);
    let mut worker_limits = vec![(0.0, throttle.limit())];
    let mut cfg_mtime = opts.config_path.as_ref().and_then(|p| mtime(p));
    let mut last_poll = Instant::now();
    let mut tx = conn.transaction()?;
    let mut in_tx = 0usize;
    while workers_left > 0 {
        match ev_rx.recv_timeout(Duration::from_millis(250)) {
            Ok(Event::Walked { bytes }) => bar.inc_length(bytes),
            Ok(Event::Done(batch)) => {
                let mut fst = tx.prepare_cached("INSERT INTO file VALUES (?1, ?2, ?3, ?4, ?5)")?;
                let mut st = tx.prepare_cached("INSERT INTO outcome VALUES (?1, ?2, ?3, ?4)")?;
                for d in batch {
                    files += 1;
                    bytes += d.bytes;
                    bar.inc(d.bytes);
                    let (dir, ext) = dir_ext(&d.rel);
                    fst.execute(params![d.seq as i64, d.rel, dir, ext, d.bytes as i64])?;
                    for (c, o) in configs.iter().zip(&d.outcomes) {
                        st.execute(params![
                            c.id,
                            d.seq as i64,
                            o.reduced_bytes as i64,
                            o.nanos as i64
                        ])?;
                    }
                    in_tx += 1;
                }
            }
            Ok(Event::Problem { rel, kind, message }) => {
                tx.prepare_cached("INSERT INTO problem VALUES (?1, ?2, ?3)")?
                    .execute(params![rel, kind, message])?;
                in_tx += 1;
            }
            Ok(Event::WalkEnd(w)) => bar.set_message(format!("{} files walked", w.files)),
            Ok(Event::WorkerEnd(r)) => {
                workers_left -= 1;
                if let Err(e) = r {
                    stop.store(true, Ordering::SeqCst);
                    // Release the workers waiting their turn; the walk stops.
                    throttle.close();
                    first_error.get_or_insert(e);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if in_tx >= 4096 {
            tx.commit()?;
            tx = conn.transaction()?;
            in_tx = 0;
        }
        // SIGHUP: re-read now, whatever the mtime says; otherwise poll the mtime every 0.5 s.
        let hangup = crate::signal::reloads() != hangups_seen;
        if hangup || last_poll.elapsed() >= Duration::from_millis(500) {
            last_poll = Instant::now();
            hangups_seen = crate::signal::reloads();
            if let Some(p) = &opts.config_path {
                let m = mtime(p);
                if hangup || m != cfg_mtime {
                    cfg_mtime = m;
                    // A half-written or broken file keeps the current limit.
                    if let Ok(n) = Config::load_workers(p) {
                        let applied = throttle.set_limit(n);
                        if applied != worker_limits.last().map_or(0, |l| l.1) {
                            worker_limits.push((t0.elapsed().as_secs_f64(), applied));
                            bar.println(format!("workers: {applied}"));
                        }
                    }
                }
            }
        }
    }
    tx.commit()?;
    bar.finish_and_clear();
    for h in handles {
        let _ = h.join();
    }
    let walk_counts = walker
        .join()
        .map_err(|_| ReduceError::Io("the walk thread failed".into()))?;
    if let Some(e) = first_error {
        return Err(e);
    }
    let walk_counts = walk_counts?;
    let dedup = results::account_dedup(&opts.out, &mut conn, &configs)?;
    let manifest = Manifest {
        format: results::FORMAT.into(),
        version: results::FORMAT_VERSION,
        root: opts.root.to_string_lossy().into_owned(),
        shard: opts.shard.map(|s| [s.index, s.count]),
        sample_fraction: opts.sample_fraction,
        sample_bytes: opts.sample_bytes,
        configurations: configs,
        walk: walk_counts,
        files,
        bytes,
        problems: results::problem_counts(&conn)?,
        wall_seconds: t0.elapsed().as_secs_f64(),
        dedup,
    };
    manifest.save(&opts.out)?;
    let secs = manifest.wall_seconds.max(1e-9);
    Ok(AnalyzeSummary {
        results: opts.out.to_string_lossy().into_owned(),
        bytes_per_second: bytes as f64 / secs,
        manifest,
        worker_limits,
    })
}

fn dev_ino(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// The directory ("." for the root) and extension ("" for none) of a relative path.
pub(crate) fn dir_ext(rel: &str) -> (String, String) {
    let (dir, name) = match rel.rfind('/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (".", rel),
    };
    let ext = match name.rfind('.') {
        Some(i) if i > 0 && i + 1 < name.len() => &name[i + 1..],
        _ => "",
    };
    (dir.to_string(), ext.to_string())
}

/// Which files of the walk are analysed.
#[derive(Clone, Copy)]
enum Sample {
    /// By path hash, this fraction of the files (1.0 = all).
    Files(f64),
    /// Bytes-weighted, one point every this many bytes ([`byte_sampled`]).
    Bytes(u64),
}

#[allow(clippy::too_many_arguments)]
fn walk(
    root: &Path,
    skip: Option<(u64, u64)>,
    follow: bool,
    shard: Option<Shard>,
    sample: Sample,
    jobs: &mpsc::SyncSender<Vec<Job>>,
    events: &mpsc::Sender<Event>,
    stop: &AtomicBool,
) -> Result<WalkCounts, ReduceError> {
    let mut w = WalkCounts::default();
    let mine = |rel: &str| shard.is_none_or(|s| shard_of(rel.as_bytes(), s.count) == s.index);
    let problem = |rel: String, kind: &'static str, message: String| {
        if mine(&rel) {
            let _ = events.send(Event::Problem { rel, kind, message });
        }
    };
    let (mut batch, mut batch_bytes) = (Vec::with_capacity(BATCH_FILES), 0u64);
    let send = |batch: &mut Vec<Job>, batch_bytes: &mut u64| -> bool {
        let _ = events.send(Event::Walked {
            bytes: *batch_bytes,
        });
        *batch_bytes = 0;
        jobs.send(std::mem::replace(batch, Vec::with_capacity(BATCH_FILES)))
            .is_ok()
    };
    let mut it = walkdir::WalkDir::new(root)
        .follow_links(follow)
        .sort_by(|a, b| a.file_name().cmp(b.file_name()))
        .into_iter();
    while let Some(entry) = it.next() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let e = match entry {
            Ok(e) => e,
            Err(err) => {
                let rel = err
                    .path()
                    .map_or_else(|| ".".to_string(), |p| rel_of(root, p));
                let kind = if err.loop_ancestor().is_some() {
                    "symlink_loop"
                } else if err
                    .io_error()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
                {
                    "permission_denied"
                } else {
                    "walk_error"
                };
                problem(rel, kind, err.to_string());
                continue;
            }
        };
        let ft = e.file_type();
        if ft.is_dir() {
            // Never analyse our own output (results written inside the tree).
            if e.depth() > 0
                && skip.is_some_and(|s| e.metadata().ok().map(|m| dev_ino(&m)) == Some(s))
            {
                it.skip_current_dir();
                continue;
            }
            w.directories += 1;
            continue;
        }
        let rel = rel_of(root, e.path());
        if ft.is_symlink() {
            // Not followed (a followed link reports its target's type).
            w.symlinks_skipped += 1;
            continue;
        }
        if !ft.is_file() {
            problem(
                rel,
                "special_file",
                "not a regular file (device, FIFO or socket): skipped".into(),
            );
            continue;
        }
        let seq = w.files;
        w.files += 1;
        let len = e.metadata().map(|m| m.len()).unwrap_or(0);
        let start = w.bytes; // this file's first byte in the walk's concatenation (every shard's alike)
        w.bytes += len;
        let in_sample = match sample {
            Sample::Files(f) => sampled(rel.as_bytes(), f),
            Sample::Bytes(s) => byte_sampled(start, len, s),
        };
        if mine(&rel) && in_sample {
            // A large file starts a batch of its own.
            if !batch.is_empty()
                && batch_bytes + len > BATCH_BYTES
                && !send(&mut batch, &mut batch_bytes)
            {
                break; // every worker stopped (an error is on its way)
            }
            batch.push(Job {
                seq,
                path: e.into_path(),
                rel,
            });
            batch_bytes += len;
            if (batch.len() >= BATCH_FILES || batch_bytes >= BATCH_BYTES)
                && !send(&mut batch, &mut batch_bytes)
            {
                break;
            }
        }
    }
    if !batch.is_empty() {
        send(&mut batch, &mut batch_bytes);
    }
    let _ = events.send(Event::WalkEnd(w.clone()));
    Ok(w)
}

/// Spilling sinks for the dedup configurations of one worker.
struct Sinks {
    spillers: HashMap<u32, RunSpiller>,
    error: Option<ReduceError>,
}

impl ChunkSink for Sinks {
    fn push(&mut self, config: u32, record: ChunkRecord) -> std::io::Result<()> {
        let s = self
            .spillers
            .get_mut(&config)
            .expect("a spiller per dedup configuration");
        s.push(record).map_err(|e| {
            let msg = e.to_string();
            self.error = Some(e);
            std::io::Error::other(msg)
        })
    }
}

fn worker(
    k: usize,
    configs: &[Configuration],
    jobs: &Mutex<mpsc::Receiver<Vec<Job>>>,
    events: &mpsc::Sender<Event>,
    throttle: &Throttle,
    out: &Path,
    memory_bytes: u64,
) -> Result<(), ReduceError> {
    let dedup: Vec<&Configuration> = configs
        .iter()
        .filter(|c| matches!(c.method, Method::Dedup { .. }))
        .collect();
    let per = memory_bytes / dedup.len().max(1) as u64;
    let mut sinks = Sinks {
        spillers: dedup
            .iter()
            .map(|c| {
                let fp = match c.method {
                    Method::Dedup { fingerprint, .. } => fingerprint.bytes(),
                    _ => unreachable!(),
                };
                (
                    c.id,
                    RunSpiller::new(results::chunk_dir(out, c.id), format!("w{k:03}"), fp, per),
                )
            })
            .collect(),
        error: None,
    };
    let mut engine = Engine::new(configs);
    loop {
        // The limit is checked per batch: a worker above a lowered limit finishes its batch (at most
        // BATCH_FILES files or BATCH_BYTES bytes, or one large file) and waits.
        if !throttle.wait_turn(k) {
            break;
        }
        let batch = match jobs.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(j) => j,
            Err(_) => {
                // The queue is empty and the walk is over: release the workers waiting their turn.
                throttle.close();
                break;
            }
        };
        let mut done = Vec::with_capacity(batch.len());
        for job in batch {
            process_one(job, &mut engine, &mut sinks, events, throttle, &mut done)?;
        }
        let _ = events.send(Event::Done(done));
    }
    for s in sinks.spillers.values_mut() {
        s.spill()?;
    }
    Ok(())
}

/// Analyse one file; its results go to `done`, its problems to `events`.
fn process_one(
    job: Job,
    engine: &mut Engine,
    sinks: &mut Sinks,
    events: &mpsc::Sender<Event>,
    throttle: &Throttle,
    done: &mut Vec<Done>,
) -> Result<(), ReduceError> {
    {
        let _busy = throttle.start();
        let problem = |kind: &'static str, message: String| {
            let _ = events.send(Event::Problem {
                rel: job.rel.clone(),
                kind,
                message,
            });
        };
        let mut f = match std::fs::File::open(&job.path) {
            Ok(f) => f,
            Err(e) => {
                problem(io_kind(&e), e.to_string());
                return Ok(());
            }
        };
        let before = f.metadata().ok();
        if before.as_ref().is_some_and(|m| !m.is_file()) {
            problem(
                "special_file",
                "not a regular file when opened: skipped".into(),
            );
            return Ok(());
        }
        let r = match engine.process(job.seq, &mut f, sinks) {
            Ok(r) => r,
            // Only our own output (a run file) fails here: fatal.
            Err(e) => {
                return Err(sinks
                    .error
                    .take()
                    .unwrap_or_else(|| ReduceError::Io(e.to_string())))
            }
        };
        if let Some(e) = &r.read_error {
            problem(
                io_kind(e),
                format!(
                    "read failed after {} bytes ({e}); the bytes read are analysed",
                    r.bytes
                ),
            );
        } else {
            // fstat of the open file (no path lookup): its size or mtime changed while read.
            let after = f.metadata().ok();
            let changed = match (&before, &after) {
                (Some(b), Some(a)) => {
                    b.len() != a.len()
                        || b.modified().ok() != a.modified().ok()
                        || a.len() != r.bytes
                }
                _ => true,
            };
            if changed {
                problem(
                    "changed_while_read",
                    format!(
                        "the file changed while read; {} bytes analysed as read",
                        r.bytes
                    ),
                );
            }
        }
        done.push(Done {
            seq: job.seq,
            rel: job.rel,
            bytes: r.bytes,
            outcomes: r.outcomes,
        });
    }
    Ok(())
}
