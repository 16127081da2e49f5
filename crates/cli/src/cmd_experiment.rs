//! `ecstack experiment eplog`: EPLOG §5 Experiments 1–5 re-run on this machine with the array layer.
//!
//! Traces: the trace crate's synthesized FIN/WEB/USR/MDS presets (EPLOG Table 2 statistics), writes
//! only, rounded to the 4 KiB chunk and compacted by 1 MiB segments (§5.1); the working set is written
//! sequentially (whole stripes) before each replay, so every replayed write is an update.
//!
//! * Exp 1 (write traffic to SSDs) and Exp 2 (GC requests per SSD) share runs on simulated SSDs
//!   (page-mapped FTL, greedy GC, 15 % over-provisioning, GC below 5 % clean blocks, 64 × 4 KiB pages
//!   per block as §5.2; the number of blocks is scaled to the array, see the report).
//! * Exp 3: eplog with parity commit nil / all / every 1K / every 10K writes (+ md), traffic and GC.
//! * Exp 4: requests/s replaying as fast as possible on file-backed devices with O_DIRECT (main and log
//!   devices are files; parity commit nil/all/10K; degraded commit with two failed SSDs).
//! * Exp 5: recovery throughput of a double failure vs batch size, before/after replay, prefetch on/off.
//!
//! Exp 4 also runs on an emulated copy of the paper's testbed (`--testbed paper`): every device is a
//! RAM device behind a `Throttled` wrapper that charges each request the service time of the paper's
//! devices (Table 1: Plextor SSDs for the main array, Seagate HDDs for the logs; one request at a time
//! per device, devices independent of each other). On this machine all device files share one
//! virtual disk, which serves requests nearly one after another; the emulation shows what the schemes
//! do on separate devices with the paper's read/write costs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ecstack_array::{Array, ArrayConfig, ArrayDevices, OpenOptions, SchemeKind};
use ecstack_device::{
    open_spec, BlockDevice, MemDevice, ServiceProfile, SimSsd, SsdConfig, ThrottleConfig, Throttled,
};
use ecstack_trace::record::Op;
use ecstack_trace::synth::synthesize_preset;
use ecstack_trace::transform::eplog_prepare;
use serde::Serialize;

use crate::util::print_json;

#[derive(Args)]
pub struct ExperimentArgs {
    #[command(subcommand)]
    cmd: ExpCmd,
}

#[derive(Subcommand)]
enum ExpCmd {
    /// EPLOG §5 Exps 1-5: write traffic, GC, commit frequency, requests/s, recovery (md vs pl vs eplog)
    Eplog(EplogArgs),
}

#[derive(Args)]
struct EplogArgs {
    /// Small traces and a subset of the runs (a few minutes)
    #[arg(long)]
    quick: bool,
    /// Trace scale relative to the published traces (default 0.004 with --quick, 0.02 otherwise)
    #[arg(long)]
    scale: Option<f64>,
    /// Experiments to run
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5")]
    exp: Vec<u32>,
    /// Output directory for the Markdown report, CSV and SVG files
    #[arg(long, default_value = "eplog-results")]
    out: PathBuf,
    /// Directory for the file-backed devices of Exps 4-5 (removed afterwards)
    #[arg(long)]
    dir: Option<PathBuf>,
    /// RAID settings k+m to run (Exps 1, 2 and 4; the others always use 6+2)
    #[arg(long, value_delimiter = ',', default_value = "4+1,6+1,4+2,6+2")]
    settings: Vec<String>,
    /// Schemes to run (Exps 1, 2 and 4)
    #[arg(long, value_delimiter = ',', default_value = "md,pl,eplog")]
    schemes: Vec<String>,
    /// Exp 4 is also run with these numbers of concurrent clients (FIN, every setting; the
    /// one-client runs always happen). Each scheme's peak over them is its "as fast as possible"
    /// requests/s
    #[arg(long, value_delimiter = ',', default_value = "8,32,128")]
    clients: Vec<usize>,
    /// eplog stripe buffer in the multi-client runs: batches written at once (0 = off)
    #[arg(long, default_value_t = ecstack_array::scheme::DEFAULT_IN_FLIGHT)]
    stripe_buffer: usize,
    /// Exp 4 testbeds: `files` (O_DIRECT files in --dir), `paper` (EPLOG's SSDs and HDDs, Table 1,
    /// emulated: RAM devices charged the paper's per-request service times)
    #[arg(long, value_delimiter = ',', default_value = "files,paper")]
    testbed: Vec<String>,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print all results as JSON
    #[arg(long)]
    json: bool,
}

pub fn run(a: ExperimentArgs) -> Result<()> {
    match a.cmd {
        ExpCmd::Eplog(e) => eplog(e),
    }
}

const CHUNK: u64 = 4096;

struct Trace {
    name: &'static str,
    reqs: Vec<(u64, u64)>,
    wss: u64,
    chunks: u64,
}

fn load_trace(preset: &str, name: &'static str, scale: f64, seed: u64) -> Result<Trace> {
    let t = synthesize_preset(preset, scale, seed)?;
    let writes: Vec<_> = t
        .records
        .into_iter()
        .filter(|r| r.op == Op::Write && r.len > 0)
        .collect();
    let (recs, wss) = eplog_prepare(&writes, CHUNK);
    let reqs: Vec<(u64, u64)> = recs.iter().map(|r| (r.offset, r.len)).collect();
    let chunks = reqs.iter().map(|(_, l)| l / CHUNK).sum();
    Ok(Trace {
        name,
        reqs,
        wss,
        chunks,
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Backing {
    /// Simulated SSDs (metadata only) for main devices, simulated HDDs for log devices.
    Sim,
    /// Files with O_DIRECT.
    File,
    /// EPLOG's testbed emulated: RAM devices with the service times of its SSDs (main) and HDDs
    /// (logs), Table 1.
    Paper,
}

impl Backing {
    fn label(self) -> &'static str {
        match self {
            Backing::Sim => "simulated",
            Backing::File => "O_DIRECT files",
            Backing::Paper => "EPLOG testbed emulated",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Commit {
    Nil,
    All,
    Every(u64),
}

impl Commit {
    fn label(self) -> String {
        match self {
            Commit::Nil => "nil".into(),
            Commit::All => "all".into(),
            Commit::Every(n) => format!("{}K", n / 1000),
        }
    }
}

struct Sizing {
    stripes: u64,
    slots: u64,
    log_slots: u64,
}

fn sizing(t: &Trace, k: usize, m: usize) -> Sizing {
    let n = (k + m) as u64;
    let stripes = t.wss.div_ceil(k as u64 * CHUNK);
    let spare = (t.chunks as f64 / n as f64 * 1.3).ceil() as u64 + 256;
    Sizing {
        stripes,
        slots: stripes + spare,
        log_slots: t.chunks + 256,
    }
}

fn ssd_config(dev_bytes: u64) -> SsdConfig {
    let base = SsdConfig::default();
    let per_block = (base.pages_per_block as u64 * base.page_size as u64) as f64 * (1.0 - base.op);
    let blocks = ((dev_bytes as f64 / per_block).ceil() as u32 + 8).max(64);
    SsdConfig { blocks, ..base }
}

struct Rig {
    array: Array,
    ssd_blocks: u32,
}

/// Create the device files of Exps 4-5 once, written through with zeros (so no run writes into holes
/// of a sparse file, which costs extent allocation that a real SSD does not have).
fn prefill(dir: &Path, traces: &[Trace]) -> Result<()> {
    let (mut main, mut log) = (0u64, 0u64);
    for t in traces {
        for (k, m) in [(4usize, 1usize), (6, 1), (4, 2), (6, 2)] {
            let sz = sizing(t, k, m);
            main = main.max(CHUNK + sz.slots * CHUNK);
            log = log.max(CHUNK + sz.log_slots * CHUNK);
        }
    }
    let zero = vec![0u8; 1 << 20];
    for (name, size) in (0..8)
        .map(|i| (format!("main{i}.img"), main))
        .chain((0..2).map(|i| (format!("log{i}.img"), log)))
    {
        use std::io::Write;
        let p = dir.join(name);
        let mut f =
            std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?;
        let mut left = size.div_ceil(1 << 20) << 20;
        while left > 0 {
            f.write_all(&zero)?;
            left -= zero.len() as u64;
        }
        f.sync_all()?;
    }
    Ok(())
}

fn build(
    t: &Trace,
    scheme: SchemeKind,
    k: usize,
    m: usize,
    backing: Backing,
    dir: &Path,
    tag: &str,
) -> Result<Rig> {
    let sz = sizing(t, k, m);
    let n = k + m;
    let dev_bytes = CHUNK + sz.slots * CHUNK;
    let log_bytes = CHUNK + sz.log_slots * CHUNK;
    let nlog = if scheme.uses_log() { m } else { 0 };
    let ssd = ssd_config(dev_bytes);
    let _ = tag;
    type Devices = Vec<Arc<dyn BlockDevice>>;
    let (main, log): (Devices, Devices) = match backing {
        Backing::Sim => (
            (0..n)
                .map(|_| Ok(Arc::new(SimSsd::new(ssd.clone())?) as Arc<dyn BlockDevice>))
                .collect::<Result<_>>()?,
            (0..nlog)
                .map(|_| open_spec(&format!("hdd:capacity={log_bytes},data=0")).map_err(Into::into))
                .collect::<Result<_>>()?,
        ),
        Backing::File => {
            // Pre-filled files shared by every run (see `prefill`): writes land on allocated blocks,
            // as on an SSD that has been written before, whatever slot a scheme picks.
            let f = |name: String, need: u64| -> Result<Arc<dyn BlockDevice>> {
                let p = dir.join(name);
                let d = open_spec(&format!("file:{}?direct=1", p.display()))?;
                if d.capacity() < need {
                    bail!(
                        "{} holds {} bytes, this run needs {need}",
                        p.display(),
                        d.capacity()
                    );
                }
                Ok(d)
            };
            let main = (0..n)
                .map(|i| f(format!("main{i}.img"), dev_bytes))
                .collect::<Result<_>>()?;
            let log = (0..nlog)
                .map(|i| f(format!("log{i}.img"), log_bytes))
                .collect::<Result<_>>()?;
            (main, log)
        }
        Backing::Paper => {
            let dev = |profile: &str, bytes: u64, seed: u64| -> Result<Arc<dyn BlockDevice>> {
                let cfg = ThrottleConfig {
                    profile: ServiceProfile::preset(profile),
                    seed,
                    ..ThrottleConfig::default()
                };
                // Pre-faulted: eplog writes out of place into slots never written before, and
                // a page fault on each first write would charge it a cost an SSD does not have.
                let mem = MemDevice::new(bytes)?.prefaulted();
                Ok(Arc::new(Throttled::new(mem, cfg)))
            };
            (
                (0..n)
                    .map(|i| dev("eplog-ssd", dev_bytes, i as u64))
                    .collect::<Result<_>>()?,
                (0..nlog)
                    .map(|i| dev("eplog-hdd", log_bytes, 100 + i as u64))
                    .collect::<Result<_>>()?,
            )
        }
    };
    let meta: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(1 << 30)?);
    let cfg = ArrayConfig {
        chunk_size: CHUNK as u32,
        reserve: (sz.slots - sz.stripes) as f64 / sz.slots as f64 * 0.999,
        max_stripes: Some(sz.stripes),
        ..ArrayConfig::with_geometry(scheme, k, m)
    };
    let opts = OpenOptions {
        parallel_io: backing != Backing::Sim,
        ..OpenOptions::default()
    };
    let array = Array::create_with(
        &cfg,
        ArrayDevices {
            main,
            log,
            meta,
            specs: None,
        },
        &opts,
    )?;
    Ok(Rig {
        array,
        ssd_blocks: ssd.blocks,
    })
}

/// Write the whole working set sequentially in stripe-aligned pieces.
fn prewrite(a: &Array, wss: u64) -> Result<()> {
    let sb = a.geometry().stripe_bytes();
    let piece = sb * 32;
    let end = wss.div_ceil(sb) * sb;
    let buf = vec![0x5au8; piece as usize];
    let mut off = 0;
    while off < end {
        let len = piece.min(end - off);
        a.write(&buf[..len as usize], off)?;
        off += len;
    }
    a.commit()?;
    Ok(())
}

fn gc_total(a: &Array) -> (f64, u64) {
    let st = a.status();
    let v: Vec<u64> = st
        .devices
        .iter()
        .filter(|d| d.role == "main")
        .map(|d| d.ssd.as_ref().map(|s| s.gc_victims).unwrap_or(0))
        .collect();
    let t: u64 = v.iter().sum();
    (t as f64 / v.len().max(1) as f64, t)
}

#[derive(Serialize, Clone, Debug)]
struct RunRow {
    /// Where it ran: simulated, O_DIRECT files, EPLOG testbed emulated.
    testbed: String,
    trace: String,
    setting: String,
    scheme: String,
    /// Concurrent replay clients.
    clients: usize,
    /// eplog stripe buffer: write requests per batch (None when off or not eplog).
    batch: Option<f64>,
    /// eplog stripe buffer: mean time to write one batch (µs).
    batch_us: Option<f64>,
    /// Device requests (main reads + main writes + log writes) per replayed write.
    dev_ops_per_req: f64,
    /// CPU time of the whole process (user + system) per wall-clock second of the replay.
    cpu_load: f64,
    commit: String,
    degraded: bool,
    requests: u64,
    seconds: f64,
    requests_per_s: f64,
    ssd_write_bytes: u64,
    ssd_read_bytes: u64,
    log_write_bytes: u64,
    gc_per_ssd: f64,
    commit_seconds: f64,
    commits: u64,
    ssd_blocks: u32,
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    t: &Trace,
    scheme: SchemeKind,
    k: usize,
    m: usize,
    backing: Backing,
    commit: Commit,
    degraded: bool,
    dir: &Path,
) -> Result<RunRow> {
    let opts = RunOpts::default();
    run_buf(t, scheme, k, m, backing, commit, degraded, dir, opts)
}

/// How a run replays: eplog device buffers (chunks per device, 0 = off), concurrent clients, and
/// whether the eplog stripe buffer is on.
#[derive(Clone, Copy)]
struct RunOpts {
    buffer: usize,
    clients: usize,
    /// eplog stripe buffer: batches in flight (0 = off).
    stripe_buffer: usize,
}

impl Default for RunOpts {
    fn default() -> Self {
        RunOpts {
            buffer: 0,
            clients: 1,
            stripe_buffer: ecstack_array::scheme::DEFAULT_IN_FLIGHT,
        }
    }
}

/// User + system CPU seconds of this process so far (Linux: /proc/self/stat; 0 elsewhere).
fn process_cpu_seconds() -> f64 {
    let Ok(st) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = st.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the file: 12 and 13 after the name and state.
    (ticks(11) + ticks(12)) / 100.0
}

/// Replay the trace's writes with `clients` threads; client `c` issues requests c, c+N, c+2N, …
/// in order, each waiting for the previous one.
fn replay(a: &Array, reqs: &[(u64, u64)], clients: usize) -> Result<()> {
    let maxlen = reqs.iter().map(|r| r.1).max().unwrap_or(CHUNK) as usize;
    let buf: Vec<u8> = (0..maxlen).map(|i| (i * 7 + 3) as u8).collect();
    if clients <= 1 {
        for &(off, len) in reqs {
            a.write(&buf[..len as usize], off)?;
        }
        return Ok(());
    }
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..clients)
            .map(|c| {
                let buf = &buf;
                sc.spawn(move || -> Result<()> {
                    for &(off, len) in reqs.iter().skip(c).step_by(clients) {
                        a.write(&buf[..len as usize], off)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join()
                .map_err(|_| anyhow::anyhow!("a replay client panicked"))??;
        }
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
fn run_buf(
    t: &Trace,
    scheme: SchemeKind,
    k: usize,
    m: usize,
    backing: Backing,
    commit: Commit,
    degraded: bool,
    dir: &Path,
    opts: RunOpts,
) -> Result<RunRow> {
    let buffer = opts.buffer;
    let tag = format!("{}-{}-{k}{m}-{}", t.name, scheme, commit.label());
    let rig = build(t, scheme, k, m, backing, dir, &tag)?;
    let a = &rig.array;
    prewrite(a, t.wss)?;
    a.set_device_buffer(buffer)?;
    a.set_stripe_buffer(opts.stripe_buffer);
    a.reset_stats();
    let (gc0, _) = gc_total(a);
    if let Commit::Every(nw) = commit {
        a.set_commit_every(nw);
    }
    let start = Instant::now();
    let cpu0 = process_cpu_seconds();
    replay(a, &t.reqs, opts.clients)?;
    if degraded {
        a.fail_device(0)?;
        a.fail_device(1)?;
    }
    if commit != Commit::Nil {
        a.commit()?;
    } else if buffer > 0 {
        a.sync()?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - cpu0;
    let st = a.status();
    let (gc1, _) = gc_total(a);
    Ok(RunRow {
        testbed: backing.label().into(),
        trace: t.name.into(),
        setting: format!("({k}+{m})"),
        scheme: if buffer > 0 {
            format!("{scheme}+buf{buffer}")
        } else if scheme == SchemeKind::Eplog && opts.stripe_buffer == 0 {
            format!("{scheme}-nosb")
        } else {
            scheme.to_string()
        },
        clients: opts.clients,
        cpu_load: cpu / seconds.max(1e-9),
        dev_ops_per_req: (st.main.io.read_ops + st.main.io.write_ops + st.log.io.write_ops) as f64
            / t.reqs.len().max(1) as f64,
        batch: st
            .stripe_buffer
            .map(|b| b.requests as f64 / b.batches.max(1) as f64),
        batch_us: st
            .stripe_buffer
            .map(|b| b.write_seconds * 1e6 / b.batches.max(1) as f64),
        commit: commit.label(),
        degraded,
        requests: t.reqs.len() as u64,
        seconds,
        requests_per_s: t.reqs.len() as f64 / seconds.max(1e-9),
        ssd_write_bytes: st.main.io.write_bytes,
        ssd_read_bytes: st.main.io.read_bytes,
        log_write_bytes: st.log.io.write_bytes,
        gc_per_ssd: gc1 - gc0,
        commit_seconds: st.commits.seconds,
        commits: st.commits.commits,
        ssd_blocks: rig.ssd_blocks,
    })
}

/// Exp 4's grid on one testbed: FIN at every setting and scheme, for each number of clients (no
/// commit, normal mode); with several clients also eplog without the stripe buffer at (6+2).
#[allow(clippy::too_many_arguments)]
fn exp4_grid(
    fin: &Trace,
    settings: &[(usize, usize)],
    schemes: &[SchemeKind],
    clients: &[usize],
    stripe_buffer: usize,
    backing: Backing,
    dir: &Path,
    rows: &mut Vec<RunRow>,
) -> Result<()> {
    for &nc in clients {
        let run = |s, k, m, stripe_buffer| {
            let opts = RunOpts {
                clients: nc,
                stripe_buffer,
                ..RunOpts::default()
            };
            run_buf(fin, s, k, m, backing, Commit::Nil, false, dir, opts)
        };
        for &(k, m) in settings {
            for &s in schemes {
                eprintln!(
                    "exp 4: FIN ({k}+{m}) {s}, {nc} client(s), {}",
                    backing.label()
                );
                rows.push(run(s, k, m, stripe_buffer)?);
            }
        }
        if nc > 1 && settings.contains(&(6, 2)) && schemes.contains(&SchemeKind::Eplog) {
            eprintln!(
                "exp 4: FIN (6+2) eplog without the stripe buffer, {nc} clients, {}",
                backing.label()
            );
            rows.push(run(SchemeKind::Eplog, 6, 2, 0)?);
        }
    }
    Ok(())
}

/// Exps 4b/4c on one testbed: the other traces' md/pl/eplog runs at (6+2), and eplog with a commit
/// at the end or every 10K writes, normal and with two SSDs failed before the last commit.
fn exp4_traces(ts: &[&Trace], backing: Backing, dir: &Path, rows: &mut Vec<RunRow>) -> Result<()> {
    let label = backing.label();
    for t in ts {
        if t.name != "FIN" {
            for s in [SchemeKind::Md, SchemeKind::Pl, SchemeKind::Eplog] {
                eprintln!("exp 4b: {} (6+2) {s}, {label}", t.name);
                rows.push(run_one(t, s, 6, 2, backing, Commit::Nil, false, dir)?);
            }
        }
        for c in [Commit::All, Commit::Every(10_000)] {
            for deg in [false, true] {
                eprintln!(
                    "exp 4b/c: {} (6+2) eplog commit {} {}, {label}",
                    t.name,
                    c.label(),
                    if deg { "degraded" } else { "normal" }
                );
                rows.push(run_one(t, SchemeKind::Eplog, 6, 2, backing, c, deg, dir)?);
            }
        }
    }
    Ok(())
}

#[derive(Serialize, Clone, Debug)]
struct RecoveryRow {
    case: String,
    batch: usize,
    prefetch: bool,
    recovered_bytes: u64,
    seconds: f64,
    mb_per_s: f64,
}

fn recovery(t: &Trace, batches: &[usize], dir: &Path) -> Result<Vec<RecoveryRow>> {
    let rig = build(t, SchemeKind::Eplog, 6, 2, Backing::File, dir, "recovery")?;
    let a = &rig.array;
    prewrite(a, t.wss)?;
    let devs = a.devices();
    let mut rows = Vec::new();
    let measure = |case: &str, prefetch: bool, rows: &mut Vec<RecoveryRow>| -> Result<()> {
        for &b in batches {
            a.set_rebuild(b, prefetch);
            let r =
                a.rebuild_devices(vec![(0, Arc::clone(&devs[0])), (1, Arc::clone(&devs[1]))])?;
            rows.push(RecoveryRow {
                case: case.into(),
                batch: b,
                prefetch,
                recovered_bytes: r.bytes,
                seconds: r.seconds,
                mb_per_s: r.mb_per_s,
            });
        }
        Ok(())
    };
    measure("before replay", false, &mut rows)?;
    let maxlen = t.reqs.iter().map(|r| r.1).max().unwrap_or(CHUNK) as usize;
    let buf = vec![0xa5u8; maxlen];
    for &(off, len) in &t.reqs {
        a.write(&buf[..len as usize], off)?;
    }
    a.commit()?;
    measure("after replay", false, &mut rows)?;
    measure("after replay + prefetch", true, &mut rows)?;
    Ok(rows)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

fn find<'a>(
    rows: &'a [RunRow],
    trace: &str,
    setting: &str,
    scheme: &str,
    commit: &str,
    deg: bool,
) -> Option<&'a RunRow> {
    find_n(rows, trace, setting, scheme, commit, deg, 1)
}

/// Like `find`, for runs with `clients` concurrent clients.
fn find_n<'a>(
    rows: &'a [RunRow],
    trace: &str,
    setting: &str,
    scheme: &str,
    commit: &str,
    deg: bool,
    clients: usize,
) -> Option<&'a RunRow> {
    rows.iter().find(|r| {
        r.trace == trace
            && r.setting == setting
            && r.scheme == scheme
            && r.commit == commit
            && r.degraded == deg
            && r.clients == clients
    })
}

/// A scheme's fastest FIN (6+2) run without commits over every number of clients tried: the
/// requests/s of replaying "as fast as possible" (§5.3 Exp 4), and where it was reached.
fn peak<'a>(rows: &'a [RunRow], scheme: &str) -> Option<&'a RunRow> {
    rows.iter()
        .filter(|r| {
            r.trace == "FIN"
                && r.setting == "(6+2)"
                && r.scheme == scheme
                && r.commit == "nil"
                && !r.degraded
        })
        .max_by(|a, b| a.requests_per_s.total_cmp(&b.requests_per_s))
}

/// The client counts a testbed's FIN (6+2) runs used, ascending.
fn client_counts(rows: &[RunRow]) -> Vec<usize> {
    let mut cs: Vec<usize> = rows
        .iter()
        .filter(|r| r.trace == "FIN" && r.setting == "(6+2)")
        .map(|r| r.clients)
        .collect();
    cs.sort_unstable();
    cs.dedup();
    cs
}

/// A grouped bar chart: one group per category, one bar per series.
fn svg_bars(title: &str, ylabel: &str, cats: &[String], series: &[(String, Vec<f64>)]) -> String {
    let (w, h, left, bottom, top) = (720.0, 360.0, 70.0, 60.0, 40.0);
    let maxv = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let colors = [
        "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2",
    ];
    let plot_w = w - left - 20.0;
    let plot_h = h - bottom - top;
    let gw = plot_w / cats.len().max(1) as f64;
    let bw = gw * 0.8 / series.len().max(1) as f64;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{title}</text>\n<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{ylabel}</text>\n",
        w / 2.0,
        top + plot_h / 2.0,
        top + plot_h / 2.0
    );
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>",
        top + plot_h,
        left + plot_w,
        top + plot_h
    );
    for i in 0..=4 {
        let v = maxv * i as f64 / 4.0;
        let y = top + plot_h - plot_h * i as f64 / 4.0;
        let _ = writeln!(s, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><line x1=\"{left}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/>", left - 4.0, y + 4.0, fmt_num(v), left + plot_w);
    }
    for (ci, c) in cats.iter().enumerate() {
        let gx = left + gw * ci as f64 + gw * 0.1;
        for (si, (_, v)) in series.iter().enumerate() {
            let val = v.get(ci).copied().unwrap_or(0.0);
            let bh = plot_h * val / maxv;
            let _ = writeln!(
                s,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>",
                gx + bw * si as f64,
                top + plot_h - bh,
                bw * 0.95,
                bh,
                colors[si % colors.len()]
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{c}</text>",
            gx + gw * 0.4,
            top + plot_h + 16.0
        );
    }
    for (si, (name, _)) in series.iter().enumerate() {
        let x = left + 10.0 + 110.0 * si as f64;
        let _ = writeln!(s, "<rect x=\"{x}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{name}</text>", h - 24.0, colors[si % colors.len()], x + 14.0, h - 15.0);
    }
    s.push_str("</svg>\n");
    s
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn write_csv<T: Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        let v = serde_json::to_value(r)?;
        let obj = v.as_object().context("row is an object")?;
        if i == 0 {
            out.push_str(&obj.keys().cloned().collect::<Vec<_>>().join(","));
            out.push('\n');
        }
        let vals: Vec<String> = obj
            .values()
            .map(|x| match x {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        out.push_str(&vals.join(","));
        out.push('\n');
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

#[derive(Serialize)]
struct Report {
    scale: f64,
    quick: bool,
    traces: Vec<TraceInfo>,
    sim: Vec<RunRow>,
    /// Exp 4 on O_DIRECT files.
    perf: Vec<RunRow>,
    /// Exp 4 on the emulated EPLOG testbed.
    paper: Vec<RunRow>,
    recovery: Vec<RecoveryRow>,
    targets: Vec<TargetCheck>,
}

#[derive(Serialize, Clone)]
struct TraceInfo {
    name: String,
    writes: u64,
    avg_write_kib: f64,
    wss_mib: f64,
}

#[derive(Serialize, Clone)]
struct TargetCheck {
    what: String,
    ratio: f64,
    target: String,
    met: bool,
}

fn eplog(a: EplogArgs) -> Result<()> {
    let scale = a.scale.unwrap_or(if a.quick { 0.004 } else { 0.02 });
    if !(scale > 0.0 && scale <= 1.0) {
        bail!("--scale must be in (0, 1]");
    }
    let testbeds = a
        .testbed
        .iter()
        .map(|tb| match tb.as_str() {
            "files" => Ok(Backing::File),
            "paper" => Ok(Backing::Paper),
            other => bail!("--testbed: unknown testbed '{other}' (expected files, paper)"),
        })
        .collect::<Result<Vec<_>>>()?;
    let mut settings = Vec::new();
    for st in &a.settings {
        let (k, m) = st
            .split_once('+')
            .and_then(|(k, m)| {
                Some((
                    k.trim().parse::<usize>().ok()?,
                    m.trim().parse::<usize>().ok()?,
                ))
            })
            .with_context(|| format!("--settings: '{st}' is not k+m (e.g. 6+2)"))?;
        if !(1..=6).contains(&k) || !(1..=2).contains(&m) {
            bail!("--settings: {k}+{m} is outside what the pre-filled device files hold (k <= 6, m <= 2)");
        }
        settings.push((k, m));
    }
    let schemes = a
        .schemes
        .iter()
        .map(|s| SchemeKind::parse(s).with_context(|| "--schemes"))
        .collect::<Result<Vec<_>>>()?;
    if let Some(e) = a.exp.iter().find(|e| !(1..=5).contains(*e)) {
        bail!("--exp: {e} is not one of EPLOG's experiments 1-5");
    }
    if a.clients.contains(&0) {
        bail!("--clients: 0 is not a number of clients (use 1 or more)");
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let base_dir = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("ecstack-eplog-{}", std::process::id()))
    });
    std::fs::create_dir_all(&base_dir)?;
    let t_all = Instant::now();
    let presets = [
        ("eplog-fin", "FIN"),
        ("eplog-web", "WEB"),
        ("eplog-usr", "USR"),
        ("eplog-mds", "MDS"),
    ];
    let mut traces = Vec::new();
    for (p, n) in presets {
        eprintln!("synthesizing {n} (scale {scale})");
        traces.push(load_trace(p, n, scale, a.seed)?);
    }
    let info: Vec<TraceInfo> = traces
        .iter()
        .map(|t| TraceInfo {
            name: t.name.into(),
            writes: t.reqs.len() as u64,
            avg_write_kib: t.chunks as f64 * 4.0 / t.reqs.len().max(1) as f64,
            wss_mib: mib(t.wss),
        })
        .collect();
    let fin = &traces[0];
    let want = |e: u32| a.exp.contains(&e);
    let files4 = want(4) && testbeds.contains(&Backing::File);
    let mut sim = Vec::new();
    let mut perf = Vec::new();
    let mut paper = Vec::new();
    let mut rec = Vec::new();
    let dir = base_dir.as_path();
    // Exps 1-2: every trace at (6+2), FIN at every setting; simulated SSDs.
    if want(1) || want(2) || want(3) {
        for t in &traces {
            for &(k, m) in &settings {
                if t.name != "FIN" && (k, m) != (6, 2) {
                    continue;
                }
                for &s in &schemes {
                    eprintln!("exp 1/2: {} ({k}+{m}) {s}", t.name);
                    sim.push(run_one(t, s, k, m, Backing::Sim, Commit::Nil, false, dir)?);
                }
                if (k, m) == (6, 2) {
                    eprintln!(
                        "exp 1/2: {} ({k}+{m}) eplog with device buffers of 16 chunks",
                        t.name
                    );
                    let opts = RunOpts {
                        buffer: 16,
                        ..RunOpts::default()
                    };
                    sim.push(run_buf(
                        t,
                        SchemeKind::Eplog,
                        k,
                        m,
                        Backing::Sim,
                        Commit::Nil,
                        false,
                        dir,
                        opts,
                    )?);
                }
            }
        }
    }
    if want(3) {
        for t in &traces {
            for c in [Commit::All, Commit::Every(1000), Commit::Every(10_000)] {
                eprintln!("exp 3: {} eplog commit {}", t.name, c.label());
                sim.push(run_one(
                    t,
                    SchemeKind::Eplog,
                    6,
                    2,
                    Backing::Sim,
                    c,
                    false,
                    dir,
                )?);
            }
        }
    }
    if files4 || want(5) {
        eprintln!(
            "pre-filling the device files of exps 4-5 in {}",
            dir.display()
        );
        prefill(dir, &traces)?;
    }
    let grid = |backing: Backing, clients: &[usize], rows: &mut Vec<RunRow>| {
        exp4_grid(
            fin,
            &settings,
            &schemes,
            clients,
            a.stripe_buffer,
            backing,
            dir,
            rows,
        )
    };
    let many: Vec<usize> = a.clients.iter().copied().filter(|&c| c > 1).collect();
    // Exps 4b/4c: every trace (FIN and MDS with --quick) at (6+2): md/pl/eplog, and eplog with
    // commits, normal and degraded.
    let ts: Vec<&Trace> = if a.quick {
        vec![&traces[0], &traces[3]]
    } else {
        traces.iter().collect()
    };
    if files4 {
        grid(Backing::File, &[1], &mut perf)?;
        exp4_traces(&ts, Backing::File, dir, &mut perf)?;
        grid(Backing::File, &many, &mut perf)?;
    }
    if want(4) && testbeds.contains(&Backing::Paper) {
        let all: Vec<usize> = std::iter::once(1).chain(many.iter().copied()).collect();
        grid(Backing::Paper, &all, &mut paper)?;
        exp4_traces(&ts, Backing::Paper, dir, &mut paper)?;
    }
    if want(5) {
        eprintln!("exp 5: recovery, FIN (6+2) eplog on O_DIRECT files");
        rec = recovery(fin, &[1, 10, 100, 1000], dir)?;
    }
    let _ = std::fs::remove_dir_all(&base_dir);

    // Targets (FIN, (6+2)).
    let mut targets = Vec::new();
    let ratio = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
        _ => None,
    };
    let simv =
        |s: &str, f: &dyn Fn(&RunRow) -> f64| find(&sim, "FIN", "(6+2)", s, "nil", false).map(f);
    if let Some(r) = ratio(
        simv("eplog", &|r| r.ssd_write_bytes as f64),
        simv("md", &|r| r.ssd_write_bytes as f64),
    ) {
        targets.push(TargetCheck {
            what: "SSD write traffic eplog / md".into(),
            ratio: r,
            target: "<= 0.6".into(),
            met: r <= 0.6,
        });
    }
    if let Some(r) = ratio(
        simv("eplog", &|r| r.gc_per_ssd),
        simv("md", &|r| r.gc_per_ssd),
    ) {
        targets.push(TargetCheck {
            what: "GC requests per SSD eplog / md".into(),
            ratio: r,
            target: "<= 0.3".into(),
            met: r <= 0.3,
        });
    }
    for (rows, label) in [
        (&perf, Backing::File.label()),
        (&paper, Backing::Paper.label()),
    ] {
        let cs = client_counts(rows);
        if cs.len() > 1 {
            // The paper's metric: each scheme replayed as fast as possible, i.e. at the number of
            // clients where it peaks.
            let span = cs
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join("/");
            for (peer, want) in [("md", 1.3), ("pl", 2.0)] {
                if let (Some(e), Some(p)) = (peak(rows, "eplog"), peak(rows, peer)) {
                    let r = e.requests_per_s / p.requests_per_s.max(1e-9);
                    targets.push(TargetCheck {
                        what: format!(
                            "requests/s eplog / {peer}, each at its peak over {span} clients ({label}): eplog {:.0} at {}, {peer} {:.0} at {}",
                            e.requests_per_s, e.clients, p.requests_per_s, p.clients
                        ),
                        ratio: r,
                        target: format!(">= {want}"),
                        met: r >= want,
                    });
                }
            }
        }
        for nc in cs {
            let perfn = |s: &str| {
                find_n(rows, "FIN", "(6+2)", s, "nil", false, nc).map(|r| r.requests_per_s)
            };
            let who = if nc == 1 {
                label.to_string()
            } else {
                format!("{label}, {nc} clients")
            };
            for (peer, want) in [("md", 1.3), ("pl", 2.0)] {
                if let Some(r) = ratio(perfn("eplog"), perfn(peer)) {
                    targets.push(TargetCheck {
                        what: format!("requests/s eplog / {peer} ({who})"),
                        ratio: r,
                        target: format!(">= {want}"),
                        met: r >= want,
                    });
                }
            }
        }
    }
    let recv = |b: usize| {
        rec.iter()
            .find(|r| r.case == "before replay" && r.batch == b)
            .map(|r| r.mb_per_s)
    };
    if let Some(r) = ratio(recv(100), recv(1)) {
        targets.push(TargetCheck {
            what: "recovery throughput batch 100 / batch 1 (before replay)".into(),
            ratio: r,
            target: ">= 2".into(),
            met: r >= 2.0,
        });
    }

    let report = Report {
        scale,
        quick: a.quick,
        traces: info,
        sim,
        perf,
        paper,
        recovery: rec,
        targets,
    };
    let md = markdown(&report, t_all.elapsed().as_secs_f64());
    std::fs::write(a.out.join("eplog.md"), &md)?;
    if !report.sim.is_empty() {
        write_csv(&a.out.join("eplog-sim.csv"), &report.sim)?;
    }
    if !report.perf.is_empty() {
        write_csv(&a.out.join("eplog-perf.csv"), &report.perf)?;
    }
    if !report.paper.is_empty() {
        write_csv(&a.out.join("eplog-perf-paper.csv"), &report.paper)?;
    }
    if !report.recovery.is_empty() {
        write_csv(&a.out.join("eplog-recovery.csv"), &report.recovery)?;
    }
    write_svgs(&report, &a.out)?;
    if a.json {
        print_json(&report)?;
    } else {
        println!("{md}");
        eprintln!("report, CSV and SVG files in {}", a.out.display());
    }
    Ok(())
}

fn markdown(r: &Report, secs: f64) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Scale {} of the published traces ({:.0} s).\n",
        r.scale, secs
    );
    let _ = writeln!(
        s,
        "| trace | writes | avg write (KiB) | WSS after compaction (MiB) |\n|---|---|---|---|"
    );
    for t in &r.traces {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.1} |",
            t.name, t.writes, t.avg_write_kib, t.wss_mib
        );
    }
    if let Some(b) = r.sim.first().map(|x| x.ssd_blocks) {
        let _ = writeln!(
            s,
            "\nSimulated SSDs (Exps 1-3): page-mapped FTL, greedy GC, 64 pages x 4 KiB per block, 15% over-provisioning, GC below 5% clean blocks, no wear leveling; {b} blocks per SSD for the first run (sized to the array: data + eplog spare area), vs 16,384 blocks in §5.2. Log devices: simulated HDDs. GC requests = blocks reclaimed per SSD, averaged over the main array."
        );
    }
    let nil: Vec<&RunRow> = r.sim.iter().filter(|x| x.commit == "nil").collect();
    if !nil.is_empty() {
        let _ = writeln!(s, "\n### Exp 1-2: SSD write traffic and GC per SSD (no parity commit)\n\n| trace | setting | scheme | SSD writes (MiB) | vs md | log writes (MiB) | GC per SSD | vs md |\n|---|---|---|---|---|---|---|---|");
        for x in &nil {
            let md = find(&r.sim, &x.trace, &x.setting, "md", "nil", false);
            let wr = md
                .map(|m| x.ssd_write_bytes as f64 / m.ssd_write_bytes.max(1) as f64)
                .unwrap_or(0.0);
            let gr = md
                .map(|m| {
                    if m.gc_per_ssd > 0.0 {
                        format!("{:.2}", x.gc_per_ssd / m.gc_per_ssd)
                    } else {
                        "-".into()
                    }
                })
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} | {:.2} | {:.1} | {:.1} | {} |",
                x.trace,
                x.setting,
                x.scheme,
                mib(x.ssd_write_bytes),
                wr,
                mib(x.log_write_bytes),
                x.gc_per_ssd,
                gr
            );
        }
    }
    let c3: Vec<&RunRow> = r
        .sim
        .iter()
        .filter(|x| x.scheme == "eplog" && x.setting == "(6+2)")
        .collect();
    if c3.iter().any(|x| x.commit != "nil") {
        let _ = writeln!(s, "\n### Exp 3: parity commit frequency, eplog (6+2)\n\n| trace | commit | SSD writes (MiB) | vs nil | vs md | GC per SSD | commits |\n|---|---|---|---|---|---|---|");
        for x in &c3 {
            let nilr = find(&r.sim, &x.trace, "(6+2)", "eplog", "nil", false);
            let md = find(&r.sim, &x.trace, "(6+2)", "md", "nil", false);
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {:.3} | {:.2} | {:.1} | {} |",
                x.trace,
                x.commit,
                mib(x.ssd_write_bytes),
                nilr.map(|n| x.ssd_write_bytes as f64 / n.ssd_write_bytes.max(1) as f64)
                    .unwrap_or(0.0),
                md.map(|n| x.ssd_write_bytes as f64 / n.ssd_write_bytes.max(1) as f64)
                    .unwrap_or(0.0),
                x.gc_per_ssd,
                x.commits
            );
        }
    }
    perf_table(
        &mut s,
        "Exp 4: requests/s on O_DIRECT files (as fast as possible)",
        &r.perf,
    );
    peak_table(
        &mut s,
        "Exp 4: peak requests/s on O_DIRECT files (FIN (6+2), each scheme at its best client count)",
        &r.perf,
    );
    perf_table(
        &mut s,
        "Exp 4 on the EPLOG testbed, emulated (Table 1 service times: SSD main array, HDD logs)",
        &r.paper,
    );
    peak_table(
        &mut s,
        "Exp 4 on the EPLOG testbed, emulated: peak requests/s (FIN (6+2))",
        &r.paper,
    );
    if !r.recovery.is_empty() {
        let _ = writeln!(s, "\n### Exp 5: recovery throughput, FIN (6+2) eplog, two failed SSDs rebuilt in place (O_DIRECT files)\n\n| case | batch | MB/s | recovered (MiB) | s |\n|---|---|---|---|---|");
        for x in &r.recovery {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {:.1} | {:.3} |",
                x.case,
                x.batch,
                x.mb_per_s,
                mib(x.recovered_bytes),
                x.seconds
            );
        }
    }
    if !r.targets.is_empty() {
        let _ = writeln!(
            s,
            "\n### Targets (FIN, (6+2))\n\n| target | measured | wanted | met |\n|---|---|---|---|"
        );
        for t in &r.targets {
            let _ = writeln!(
                s,
                "| {} | {:.2} | {} | {} |",
                t.what,
                t.ratio,
                t.target,
                if t.met { "yes" } else { "no" }
            );
        }
    }
    s
}

/// Each scheme's peak requests/s over the client counts of one testbed (FIN (6+2), no commit).
fn peak_table(s: &mut String, title: &str, rows: &[RunRow]) {
    if client_counts(rows).len() < 2 {
        return;
    }
    let _ = writeln!(
        s,
        "\n### {title}\n\n| scheme | peak req/s | at clients | vs md peak | vs pl peak |\n|---|---|---|---|---|"
    );
    let vs = |x: &RunRow, peer: &str| {
        peak(rows, peer)
            .map(|p| format!("{:.2}", x.requests_per_s / p.requests_per_s.max(1e-9)))
            .unwrap_or_else(|| "-".into())
    };
    for sch in ["md", "pl", "eplog", "eplog-nosb"] {
        if let Some(x) = peak(rows, sch) {
            let _ = writeln!(
                s,
                "| {sch} | {:.0} | {} | {} | {} |",
                x.requests_per_s,
                x.clients,
                vs(x, "md"),
                vs(x, "pl")
            );
        }
    }
}

/// One Exp 4 table: a row per run, with ratios to md and pl at the same setting and clients.
fn perf_table(s: &mut String, title: &str, rows: &[RunRow]) {
    if !rows.is_empty() {
        let _ = writeln!(s, "\n### {title}\n\n| trace | setting | clients | scheme | commit | mode | req/s | vs md | vs pl | device ops per write | device KiB per write | device MB/s | writes per batch | CPU load | commit s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for x in rows {
            // Bytes the devices moved (main reads and writes, log writes), commit work included.
            let moved = x.ssd_read_bytes + x.ssd_write_bytes + x.log_write_bytes;
            let vs = |sch: &str| {
                find_n(rows, &x.trace, &x.setting, sch, "nil", false, x.clients)
                    .map(|m| format!("{:.2}", x.requests_per_s / m.requests_per_s))
                    .unwrap_or_else(|| "-".into())
            };
            let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.0} | {} | {} | {:.2} | {:.1} | {:.0} | {} | {:.2} | {:.3} |",
            x.trace,
            x.setting,
            x.clients,
            x.scheme,
            x.commit,
            if x.degraded { "degraded" } else { "normal" },
            x.requests_per_s,
            vs("md"),
            vs("pl"),
            x.dev_ops_per_req,
            moved as f64 / 1024.0 / x.requests.max(1) as f64,
            moved as f64 / 1e6 / x.seconds.max(1e-9),
            x.batch
                .map(|b| format!("{b:.2} ({:.0} µs)", x.batch_us.unwrap_or(0.0)))
                .unwrap_or_else(|| "-".into()),
            x.cpu_load,
            x.commit_seconds
        );
        }
    }
}

/// One bar series per name, one value per category (0 where `value` has none).
fn bar_series<C>(
    names: &[&str],
    cats: &[C],
    value: impl Fn(&str, &C) -> Option<f64>,
) -> Vec<(String, Vec<f64>)> {
    names
        .iter()
        .map(|n| {
            let v = cats.iter().map(|c| value(n, c).unwrap_or(0.0)).collect();
            (n.to_string(), v)
        })
        .collect()
}

/// Exp 4 plots of one testbed: requests/s by setting (one client) and by clients at (6+2).
fn perf_svgs(rows: &[RunRow], out: &Path, prefix: &str, label: &str) -> Result<()> {
    if !rows.is_empty() {
        let sets: Vec<String> = ["(4+1)", "(6+1)", "(4+2)", "(6+2)"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let ser = bar_series(&["md", "pl", "eplog"], &sets, |s, st| {
            find(rows, "FIN", st, s, "nil", false).map(|x| x.requests_per_s)
        });
        std::fs::write(
            out.join(format!("{prefix}-throughput.svg")),
            svg_bars(
                &format!("Exp 4: FIN requests/s ({label}, one client)"),
                "requests/s",
                &sets,
                &ser,
            ),
        )?;
        // FIN (6+2) at every client count that ran.
        let mut clients: Vec<usize> = rows.iter().map(|x| x.clients).collect();
        clients.sort_unstable();
        clients.dedup();
        if clients.len() > 1 {
            let cats: Vec<String> = clients.iter().map(|c| format!("{c} clients")).collect();
            let ser = bar_series(&["md", "pl", "eplog", "eplog-nosb"], &clients, |s, &c| {
                find_n(rows, "FIN", "(6+2)", s, "nil", false, c).map(|x| x.requests_per_s)
            });
            std::fs::write(
                out.join(format!("{prefix}-clients.svg")),
                svg_bars(
                    &format!("Exp 4: FIN (6+2) requests/s by concurrent clients ({label})"),
                    "requests/s",
                    &cats,
                    &ser,
                ),
            )?;
        }
    }
    Ok(())
}

fn write_svgs(r: &Report, out: &Path) -> Result<()> {
    let schemes = ["md", "pl", "eplog"];
    let cats: Vec<String> = r.traces.iter().map(|t| t.name.clone()).collect();
    let series = |f: &dyn Fn(&RunRow) -> f64, rows: &[RunRow], setting: &str| {
        bar_series(&schemes, &cats, |s, c| {
            find(rows, c, setting, s, "nil", false).map(f)
        })
    };
    if !r.sim.is_empty() {
        std::fs::write(
            out.join("exp1-write-traffic.svg"),
            svg_bars(
                "Exp 1: SSD write traffic, (6+2)",
                "MiB",
                &cats,
                &series(&|x| mib(x.ssd_write_bytes), &r.sim, "(6+2)"),
            ),
        )?;
        std::fs::write(
            out.join("exp2-gc.svg"),
            svg_bars(
                "Exp 2: GC requests per SSD, (6+2)",
                "GC requests",
                &cats,
                &series(&|x| x.gc_per_ssd, &r.sim, "(6+2)"),
            ),
        )?;
    }
    perf_svgs(&r.perf, out, "exp4", Backing::File.label())?;
    perf_svgs(&r.paper, out, "exp4-paper", Backing::Paper.label())?;
    if !r.recovery.is_empty() {
        let mut batches: Vec<usize> = r.recovery.iter().map(|x| x.batch).collect();
        batches.sort_unstable();
        batches.dedup();
        let cats: Vec<String> = batches.iter().map(|b| b.to_string()).collect();
        let cases = ["before replay", "after replay", "after replay + prefetch"];
        let ser = bar_series(&cases, &batches, |c, b| {
            r.recovery
                .iter()
                .find(|x| x.case == c && x.batch == *b)
                .map(|x| x.mb_per_s)
        });
        std::fs::write(
            out.join("exp5-recovery.svg"),
            svg_bars(
                "Exp 5: recovery throughput vs batch size",
                "MB/s",
                &cats,
                &ser,
            ),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scheme: &str, clients: usize, commit: &str, degraded: bool, rps: f64) -> RunRow {
        RunRow {
            testbed: "O_DIRECT files".into(),
            trace: "FIN".into(),
            setting: "(6+2)".into(),
            scheme: scheme.into(),
            clients,
            batch: None,
            batch_us: None,
            dev_ops_per_req: 0.0,
            cpu_load: 0.0,
            commit: commit.into(),
            degraded,
            requests: 1000,
            seconds: 1000.0 / rps,
            requests_per_s: rps,
            ssd_write_bytes: 0,
            ssd_read_bytes: 0,
            log_write_bytes: 0,
            gc_per_ssd: 0.0,
            commit_seconds: 0.0,
            commits: 0,
            ssd_blocks: 0,
        }
    }

    #[test]
    fn peak_is_the_fastest_plain_run_over_all_client_counts() {
        let rows = vec![
            row("pl", 1, "nil", false, 5_000.0),
            row("pl", 32, "nil", false, 21_000.0),
            row("pl", 128, "nil", false, 20_000.0),
            row("eplog", 1, "nil", false, 9_000.0),
            row("eplog", 1, "all", false, 90_000.0),
            row("eplog", 1, "10K", true, 95_000.0),
            row("eplog", 128, "nil", false, 60_000.0),
        ];
        let p = peak(&rows, "pl").unwrap();
        assert_eq!((p.clients, p.requests_per_s), (32, 21_000.0));
        // Runs with commits or failures are not the "as fast as possible" figure.
        let e = peak(&rows, "eplog").unwrap();
        assert_eq!((e.clients, e.requests_per_s), (128, 60_000.0));
        assert!(peak(&rows, "md").is_none());
        assert_eq!(client_counts(&rows), vec![1, 32, 128]);
        let mut s = String::new();
        peak_table(&mut s, "peak", &rows);
        assert!(s.contains("| pl | 21000 | 32 | - | 1.00 |"), "{s}");
        assert!(s.contains("| eplog | 60000 | 128 | - | 2.86 |"), "{s}");
        // One client count: no peak table.
        let mut one = String::new();
        peak_table(&mut one, "peak", &rows[..1]);
        assert!(one.is_empty());
    }
}
