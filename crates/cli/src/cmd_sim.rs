//! `ecstack sim array`: the deterministic array simulator (`ecstack_array::sim`), one seed or a sweep.
//!
//! `ecstack sim ssd|hdd`: run a synthetic workload against a simulated device and report what the
//! model saw — write amplification, GC, erase histogram for the SSD; seeks and rotation for the HDD;
//! modeled throughput and latency percentiles for both. The SSD report also gives the simulator's own
//! speed (host page writes per second of wall time).
//!
//! Requests come from a synthetic generator (sequential, uniform, Zipf) or from a block trace
//! (`--trace FILE`, any format `ecstack-trace` parses). Trace offsets are folded into the simulated
//! device's address space modulo its capacity, as ZombieNAND's trace-driven runs map the first
//! addresses of a trace onto a small simulated SSD.

use std::io::IsTerminal;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use ecstack_device::{
    hdd_config, parse_size, ssd_config, HddModel, LatencyHistogram, Pattern, SplitMix64, SsdModel,
    Workload,
};
use ecstack_trace::{Format, Op, ParseOptions, TraceReader};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

#[derive(Args)]
pub struct SimArgs {
    #[command(subcommand)]
    cmd: SimCmd,
}

#[derive(Subcommand)]
enum SimCmd {
    /// Simulated SSD: page-mapped FTL with greedy GC (default geometry: EPLOG §5.2 Exp 2)
    Ssd(SsdArgs),
    /// Simulated 7200 rpm SATA HDD: seek curve, rotation, zoned transfer, request queue
    Hdd(HddArgs),
    /// Deterministic array simulation: workload, power cuts, device failures and rebuilds, every
    /// acknowledged byte checked against a model (a failing seed replays exactly)
    Array(ArraySimArgs),
    /// RobuSTore's ch. 6 world: RAID-0 / RRAID-S / RRAID-A / RobuSTore over heterogeneous disks
    Robustore(crate::cmd_robustore::RobustoreArgs),
    /// ZombieNAND: one SSD lifetime to death (bit-mode fallback, wear-unleveling; docs/zombienand.md)
    Zombienand(crate::cmd_zombienand::SimZombieArgs),
}

#[derive(Args)]
struct ArraySimArgs {
    /// First seed (with --seeds, the sweep runs seeds N, N+1, ...)
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Number of seeds to run
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Steps per seed
    #[arg(long, default_value_t = ecstack_array::sim::DEFAULT_STEPS)]
    steps: usize,
    /// Also cut the power of md/pl arrays with unflushed writes while a device is impaired that
    /// the array has not noticed yet (the remaining write hole; see docs/array.md)
    #[arg(long)]
    strict: bool,
    /// md/pl journal every in-place update (closes the hole --strict adds; on with --strict
    /// unless --no-journal)
    #[arg(long)]
    journal: bool,
    /// With --strict: run md/pl without the update journal (shows the write hole)
    #[arg(long, requires = "strict", conflicts_with = "journal")]
    no_journal: bool,
    /// Print every step of each seed to stderr
    #[arg(long)]
    trace: bool,
    /// Print one JSON object instead of text
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Debug)]
enum WorkloadKind {
    /// Sequential, wrapping around the address space
    Seq,
    /// Uniform random
    Uniform,
    /// Zipf-distributed (skew --theta)
    Zipf,
}

#[derive(Args)]
struct Common {
    /// Access pattern
    #[arg(long, short, value_enum, default_value = "uniform")]
    workload: WorkloadKind,
    /// Zipf skew (YCSB uses 0.99)
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
    /// Number of requests (default: 4 x the logical space for ssd, 100,000 for hdd, the whole trace)
    #[arg(long, conflicts_with = "bytes")]
    ops: Option<u64>,
    /// Total bytes to issue instead of --ops (e.g. 10G)
    #[arg(long)]
    bytes: Option<String>,
    /// Request size (a multiple of the SSD page size)
    #[arg(long, default_value = "4K")]
    io_size: String,
    /// Percentage of requests that are reads
    #[arg(long, default_value_t = 0.0)]
    read_pct: f64,
    /// Fraction of the address space the workload touches (from offset 0)
    #[arg(long, default_value_t = 1.0)]
    working_set: f64,
    /// Seed for the workload generator
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replay a block trace instead of a synthetic workload (MSR, SPC, blkparse, fio; gzip/zstd ok)
    #[arg(long)]
    trace: Option<std::path::PathBuf>,
    /// Trace format (default: detected from the first lines)
    #[arg(long, requires = "trace")]
    trace_format: Option<String>,
    /// Print one JSON object instead of text
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SsdArgs {
    /// Model parameters in device-spec syntax, e.g. blocks=16384,pages=64,page=4K,op=0.15,gc_low=0.05,
    /// gc_high=0.05,mode=mlc or preset=zombienand (see docs/devices.md)
    #[arg(long, default_value = "")]
    params: String,
    /// Do not fill the logical space sequentially before the workload
    #[arg(long)]
    no_prefill: bool,
    /// Percentage of requests that are TRIMs
    #[arg(long, default_value_t = 0.0)]
    trim_pct: f64,
    /// Bins of the erase-count histogram
    #[arg(long, default_value_t = 8)]
    bins: usize,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct HddArgs {
    /// Model parameters in device-spec syntax, e.g. capacity=500G,rpm=7200,seek=6,sched=sstf
    #[arg(long, default_value = "")]
    params: String,
    /// Requests kept outstanding (the scheduler picks among them)
    #[arg(long, default_value_t = 1)]
    queue_depth: usize,
    #[command(flatten)]
    common: Common,
}

pub fn run(a: SimArgs) -> Result<()> {
    match a.cmd {
        SimCmd::Ssd(s) => run_ssd(s),
        SimCmd::Hdd(h) => run_hdd(h),
        SimCmd::Array(a) => run_array(a),
        SimCmd::Robustore(r) => crate::cmd_robustore::run(r),
        SimCmd::Zombienand(z) => crate::cmd_zombienand::run_sim(z),
    }
}

fn run_array(a: ArraySimArgs) -> Result<()> {
    use ecstack_array::sim::{sweep, SimOptions};
    if a.seeds == 0 || a.steps == 0 {
        bail!("--seeds and --steps must be at least 1");
    }
    let opts = SimOptions {
        steps: a.steps,
        strict: a.strict,
        journal: a.journal || (a.strict && !a.no_journal),
        trace: a.trace,
    };
    let pb = if std::io::stderr().is_terminal() && a.seeds > 1 {
        let pb = ProgressBar::new(a.seeds);
        if let Ok(style) = ProgressStyle::with_template("seeds [{bar:40}] {pos}/{len} eta {eta}") {
            pb.set_style(style.progress_chars("=> "));
        }
        pb
    } else {
        ProgressBar::hidden()
    };
    let t = Instant::now();
    let mut last = None;
    let r = sweep(a.seed, a.seeds, &opts, |r| {
        pb.inc(1);
        last = Some((r.array.clone(), r.digest));
    });
    pb.finish_and_clear();
    let seconds = t.elapsed().as_secs_f64();
    let r = match r {
        Ok(r) => r,
        Err(f) => {
            if a.json {
                println!("{}", json!({ "ok": false, "failure": f }));
            }
            bail!("{f}");
        }
    };
    if a.json {
        let mut v = json!({ "ok": true, "seconds": seconds, "sweep": r });
        if let (1, Some((array, digest))) = (a.seeds, &last) {
            v["array"] = json!(array);
            v["digest"] = json!(format!("{digest:016x}"));
        }
        println!("{v}");
        return Ok(());
    }
    let x = &r.reached;
    match (a.seeds, &last) {
        (1, Some((array, digest))) => println!(
            "seed {}: {array}, {} steps, passed (device digest {digest:016x})",
            a.seed, a.steps
        ),
        _ => println!(
            "seeds {}..{}: {} passed in {seconds:.1} s (md {}, pl {}, eplog {}), {} steps each",
            r.first,
            r.first + r.seeds,
            r.seeds,
            r.per_scheme[0],
            r.per_scheme[1],
            r.per_scheme[2],
            a.steps
        ),
    }
    println!(
        "  {} writes, {} reads, {} syncs, {} parity commits, {} idle commits, {} discards, {} reopens",
        x.writes, x.reads, x.syncs, x.commits, x.idle_commits, x.discards, x.reopens
    );
    println!(
        "  {} power cuts ({} mid-operation; {} device writes torn, {} dropped), {} device failures, {} latent sector errors, {} rebuilds, {} degraded reads",
        x.power_cuts,
        x.mid_op_cuts,
        x.torn_writes,
        x.dropped_writes,
        x.device_failures,
        x.latent_errors,
        x.rebuilds,
        x.degraded_reads
    );
    println!(
        "  {} bytes checked against the model, 0 lost acknowledged writes",
        x.bytes_checked
    );
    println!(
        "  {} power cuts while degraded (journal replays and commit reruns included)",
        x.degraded_power_cuts
    );
    if !a.strict {
        println!(
            "  md/pl kept out of the unnoticed-failure hole: {} flushes before a power cut with a device impaired that the array had not noticed, {} silent faults deferred while a mid-operation cut was pending (--strict to include it)",
            x.unnoticed_cut_syncs, x.faults_deferred
        );
    }
    if a.seeds > 1 {
        let missing = x.missing();
        if !missing.is_empty() {
            println!("  never reached: {}", missing.join(", "));
        }
    }
    Ok(())
}

fn progress(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() || total < 1_000_000 {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:40}] {human_pos}/{human_len} {per_sec} eta {eta}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}

fn pattern(c: &Common) -> Result<Pattern> {
    Ok(match c.workload {
        WorkloadKind::Seq => Pattern::Sequential,
        WorkloadKind::Uniform => Pattern::Uniform,
        WorkloadKind::Zipf => {
            if !(c.theta > 0.0 && c.theta < 1.0) {
                bail!("--theta must be in (0, 1), got {}", c.theta);
            }
            Pattern::Zipf { theta: c.theta }
        }
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Read,
    Write,
    Trim,
}

/// Where requests come from: `(kind, offset, len)` in bytes, inside `[0, space)`.
enum Source {
    Synthetic {
        w: Workload,
        io: u64,
        rng: SplitMix64,
        p_read: f64,
        p_trim: f64,
    },
    Trace {
        r: Box<TraceReader>,
        space: u64,
        align: u64,
    },
}

impl Source {
    fn new(c: &Common, io: u64, units: u64, p_trim: f64, space: u64, align: u64) -> Result<Source> {
        if let Some(path) = &c.trace {
            let format = match &c.trace_format {
                Some(f) => Some(Format::from_name(f).with_context(|| {
                    format!("unknown trace format '{f}' (msr, spc, nfs, blkparse, fio)")
                })?),
                None => None,
            };
            let opts = ParseOptions {
                format,
                ..ParseOptions::default()
            };
            let r = TraceReader::open(path, opts)?;
            return Ok(Source::Trace {
                r: Box::new(r),
                space,
                align,
            });
        }
        Ok(Source::Synthetic {
            w: Workload::new(pattern(c)?, units, c.seed).map_err(|e| anyhow::anyhow!("{e}"))?,
            io,
            rng: SplitMix64::new(c.seed ^ 0x5EED_0F0B5),
            p_read: c.read_pct / 100.0,
            p_trim,
        })
    }

    fn is_trace(&self) -> bool {
        matches!(self, Source::Trace { .. })
    }

    fn next(&mut self) -> Result<Option<(Kind, u64, u64)>> {
        match self {
            Source::Synthetic {
                w,
                io,
                rng,
                p_read,
                p_trim,
            } => {
                let off = w.next_unit() * *io;
                let r = if *p_read > 0.0 || *p_trim > 0.0 {
                    rng.next_f64()
                } else {
                    1.0
                };
                let kind = if r < *p_read {
                    Kind::Read
                } else if r < *p_read + *p_trim {
                    Kind::Trim
                } else {
                    Kind::Write
                };
                Ok(Some((kind, off, *io)))
            }
            Source::Trace { r, space, align } => loop {
                let rec = match r.next_record()? {
                    Some(rec) => rec,
                    None => return Ok(None),
                };
                if rec.len == 0 {
                    continue;
                }
                let kind = match rec.op {
                    Op::Read => Kind::Read,
                    Op::Write => Kind::Write,
                    Op::Discard => Kind::Trim,
                };
                // Fold into the device: aligned start modulo the space, clipped at its end.
                let start = (rec.offset / *align * *align) % *space;
                let end = rec.end().div_ceil(*align) * *align;
                let len = (end - rec.offset / *align * *align).min(*space - start);
                return Ok(Some((kind, start, len)));
            },
        }
    }
}

/// What the workload line of the text report calls the request source.
fn source_name(c: &Common) -> String {
    match &c.trace {
        Some(p) => format!("trace {}", p.display()),
        None => format!("{:?}", c.workload),
    }
}

/// CPU time this thread has run, ns (Linux `/proc/thread-self/schedstat`), to report the simulator's
/// speed independently of how busy a shared machine is. `None` elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn check_common(c: &Common) -> Result<u64> {
    if !(0.0..=100.0).contains(&c.read_pct) {
        bail!("--read-pct must be between 0 and 100");
    }
    if !(c.working_set > 0.0 && c.working_set <= 1.0) {
        bail!("--working-set must be in (0, 1]");
    }
    let io = parse_size(&c.io_size).map_err(|e| anyhow::anyhow!("--io-size: {e}"))?;
    if io == 0 {
        bail!("--io-size must be positive");
    }
    Ok(io)
}

fn latency_json(h: &LatencyHistogram) -> serde_json::Value {
    let us = |ns: u64| ns as f64 / 1e3;
    json!({
        "count": h.count(),
        "mean": h.mean() / 1e3,
        "p50": us(h.quantile(0.50)),
        "p90": us(h.quantile(0.90)),
        "p99": us(h.quantile(0.99)),
        "p999": us(h.quantile(0.999)),
        "max": us(h.max()),
    })
}

fn print_latency(h: &LatencyHistogram) {
    let us = |q: f64| h.quantile(q) as f64 / 1e3;
    println!(
        "latency (us)        mean {:.1}  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
        h.mean() / 1e3,
        us(0.5),
        us(0.9),
        us(0.99),
        us(0.999),
        h.max() as f64 / 1e3
    );
}

/// Equal-width histogram of erase counts: (lo, hi inclusive, blocks).
fn erase_histogram(counts: &[u32], bins: usize) -> Vec<(u32, u32, u64)> {
    let (mn, mx) = match (counts.iter().min(), counts.iter().max()) {
        (Some(&a), Some(&b)) => (a, b),
        _ => return Vec::new(),
    };
    let bins = bins.max(1);
    let width = ((mx - mn) as usize / bins + 1) as u32;
    let n = ((mx - mn) / width + 1) as usize;
    let mut out: Vec<(u32, u32, u64)> = (0..n)
        .map(|i| (mn + i as u32 * width, mn + (i as u32 + 1) * width - 1, 0))
        .collect();
    for &c in counts {
        out[((c - mn) / width) as usize].2 += 1;
    }
    out
}

fn run_ssd(a: SsdArgs) -> Result<()> {
    let c = &a.common;
    let io = check_common(c)?;
    if !(0.0..=100.0).contains(&a.trim_pct) || a.trim_pct + c.read_pct > 100.0 {
        bail!("--trim-pct must be between 0 and 100 - --read-pct");
    }
    let cfg = ssd_config(&format!("ssd:{}", a.params), &a.params)?;
    let ps = cfg.page_size as u64;
    if io % ps != 0 {
        bail!("--io-size {io} must be a multiple of the page size {ps}");
    }
    let mut m = SsdModel::new(cfg.clone()).map_err(|e| anyhow::anyhow!("ssd: {e}"))?;
    let ppio = io / ps;
    let space = ((m.logical_pages() as f64 * c.working_set) as u64 / ppio).max(1);
    if space * ppio > m.logical_pages() {
        bail!("--io-size is larger than the device");
    }
    let ops = match (c.ops, &c.bytes) {
        (Some(n), _) => n,
        (None, Some(b)) => parse_size(b).map_err(|e| anyhow::anyhow!("--bytes: {e}"))? / io,
        (None, None) => 4 * m.logical_pages() / ppio,
    };
    let mut src = Source::new(c, io, space, a.trim_pct / 100.0, space * ppio * ps, ps)?;
    let ops = if src.is_trace() {
        c.ops.unwrap_or(u64::MAX)
    } else {
        ops
    };

    let prefill = !a.no_prefill;
    if prefill {
        let pb = progress(m.logical_pages(), "prefill");
        for lpn in 0..m.logical_pages() {
            m.write_page(lpn)?;
            if lpn & 0xFFFF == 0 {
                pb.set_position(lpn);
            }
        }
        pb.finish_and_clear();
    }
    let before = m.stats();
    let mut hist = LatencyHistogram::new();
    let pb = progress(if src.is_trace() { 0 } else { ops }, "ssd");
    let cpu0 = thread_cpu_ns();
    let t0 = Instant::now();
    let mut issued = 0u64;
    while issued < ops {
        let (kind, off, len) = match src.next()? {
            Some(r) => r,
            None => break,
        };
        let (first, end) = (off / ps, (off + len).div_ceil(ps));
        let mut lat = 0;
        match kind {
            Kind::Read => {
                for p in first..end {
                    lat += m.read_page(p)?;
                }
            }
            Kind::Trim => {
                for p in first..end {
                    m.trim_page(p)?;
                }
            }
            Kind::Write => {
                for p in first..end {
                    lat += m.write_page(p)?;
                }
            }
        }
        hist.record(lat);
        if issued & 0xFFFF == 0 {
            pb.set_position(issued);
        }
        issued += 1;
    }
    let ops = issued;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = match (cpu0, thread_cpu_ns()) {
        (Some(a), Some(b)) if b > a => Some((b - a) as f64 / 1e9),
        _ => None,
    };
    pb.finish_and_clear();
    let after = m.stats();

    let host_w = after.host_page_writes - before.host_page_writes;
    let host_r = after.host_page_reads - before.host_page_reads;
    let flash_w = after.flash_page_writes - before.flash_page_writes;
    let wa = if host_w == 0 {
        0.0
    } else {
        flash_w as f64 / host_w as f64
    };
    let gc = after.gc_invocations - before.gc_invocations;
    let victims = after.gc_victims - before.gc_victims;
    let copies = after.gc_copies - before.gc_copies;
    let erases = after.erases - before.erases;
    let modeled_s = (after.modeled_ns - before.modeled_ns) as f64 / 1e9;
    let host_bytes = (host_w + host_r) * ps;
    let mbps = if modeled_s > 0.0 {
        host_bytes as f64 / modeled_s / 1e6
    } else {
        0.0
    };
    let iops = if modeled_s > 0.0 {
        ops as f64 / modeled_s
    } else {
        0.0
    };
    let wps = if wall > 0.0 {
        host_w as f64 / wall
    } else {
        0.0
    };
    let wps_cpu = cpu.map(|c| host_w as f64 / c);
    let hist_e = erase_histogram(&m.erase_counts(), a.bins);

    if c.json {
        let out = json!({
            "model": "ssd",
            "config": cfg,
            "logical_pages": m.logical_pages(),
            "workload": {
                "pattern": pattern(c)?, "trace": c.trace, "ops": ops, "io_size": io, "read_pct": c.read_pct,
                "trim_pct": a.trim_pct, "working_set": c.working_set, "seed": c.seed, "prefill": prefill,
            },
            "host_page_writes": host_w,
            "host_page_reads": host_r,
            "flash_page_writes": flash_w,
            "write_amplification": wa,
            "gc_invocations": gc,
            "gc_victims": victims,
            "gc_copies": copies,
            "erases": erases,
            "erase_histogram": hist_e.iter().map(|&(lo, hi, n)| json!({"lo": lo, "hi": hi, "blocks": n})).collect::<Vec<_>>(),
            "modeled": { "seconds": modeled_s, "iops": iops, "mb_per_s": mbps },
            "latency_us": latency_json(&hist),
            "wall": {
                "seconds": wall, "host_page_writes_per_sec": wps,
                "cpu_seconds": cpu, "host_page_writes_per_cpu_sec": wps_cpu,
            },
            "totals": after,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).context("serializing the report")?
        );
        return Ok(());
    }
    println!(
        "ssd: {} blocks x {} pages x {} B, OP {:.0}%, GC {:.0}%/{:.0}% ({} / {} free blocks), {:?}",
        cfg.blocks,
        cfg.pages_per_block,
        cfg.page_size,
        cfg.op * 100.0,
        cfg.gc_low * 100.0,
        cfg.gc_high * 100.0,
        cfg.low_blocks(),
        cfg.high_blocks(),
        cfg.mode
    );
    println!(
        "workload: {}, {} requests of {} B, {}% reads, {}% trims, working set {:.0}%, seed {}{}",
        source_name(c),
        ops,
        io,
        c.read_pct,
        a.trim_pct,
        c.working_set * 100.0,
        c.seed,
        if prefill {
            ", after a sequential prefill"
        } else {
            ""
        }
    );
    println!("host page writes    {host_w}");
    println!("flash page writes   {flash_w}");
    println!("write amplification {wa:.3}");
    println!("GC                  {gc} invocations, {victims} victims, {copies} page copies, {erases} erases");
    println!(
        "erase counts        min {} max {} mean {:.2}",
        after.erase_min, after.erase_max, after.erase_mean
    );
    for (lo, hi, n) in &hist_e {
        println!("  erases {lo:>6}..={hi:<6} {n:>8} blocks");
    }
    println!("modeled             {modeled_s:.3} s, {iops:.0} IOPS, {mbps:.1} MB/s");
    print_latency(&hist);
    let per_cpu = match (wps_cpu, cpu) {
        (Some(w), Some(c)) => format!(", {:.2} M per CPU-second (CPU {c:.3} s)", w / 1e6),
        _ => String::new(),
    };
    println!(
        "simulator speed     {:.2} M host page writes/s (wall {wall:.3} s){per_cpu}",
        wps / 1e6
    );
    Ok(())
}

fn run_hdd(a: HddArgs) -> Result<()> {
    let c = &a.common;
    let io = check_common(c)?;
    if a.queue_depth == 0 {
        bail!("--queue-depth must be at least 1");
    }
    let cfg = hdd_config(&format!("hdd:{}", a.params), &a.params)?;
    let mut m = HddModel::new(cfg.clone()).map_err(|e| anyhow::anyhow!("hdd: {e}"))?;
    let space = ((m.capacity() as f64 * c.working_set) as u64 / io).max(1);
    if space * io > m.capacity() {
        bail!("--io-size is larger than the disk");
    }
    let ops = match (c.ops, &c.bytes) {
        (Some(n), _) => n,
        (None, Some(b)) => parse_size(b).map_err(|e| anyhow::anyhow!("--bytes: {e}"))? / io,
        (None, None) => 100_000,
    };
    let mut src = Source::new(c, io, space, 0.0, space * io, 512)?;
    let ops = if src.is_trace() {
        c.ops.unwrap_or(u64::MAX)
    } else {
        ops
    };
    // Closed loop: `queue_depth` requests outstanding; a new one arrives when one completes.
    // TRIMs from a trace cost nothing on a disk and are skipped.
    let mut pending: Vec<(u64, u64, u64, bool)> = Vec::with_capacity(a.queue_depth); // (offset, len, arrival, write)
    let mut offsets: Vec<u64> = Vec::with_capacity(a.queue_depth);
    let mut issued = 0u64;
    let mut exhausted = false;
    let mut hist = LatencyHistogram::new();
    let pb = progress(if src.is_trace() { 0 } else { ops }, "hdd");
    let t0 = Instant::now();
    let mut done = 0u64;
    loop {
        while pending.len() < a.queue_depth && issued < ops && !exhausted {
            match src.next()? {
                Some((Kind::Trim, _, _)) => {}
                Some((kind, off, len)) => {
                    pending.push((off, len, m.now_ns(), kind == Kind::Write));
                    issued += 1;
                }
                None => exhausted = true,
            }
        }
        if pending.is_empty() {
            break;
        }
        offsets.clear();
        offsets.extend(pending.iter().map(|p| p.0));
        let i = m.pick(&offsets);
        let (off, len, arrival, write) = pending.swap_remove(i);
        m.access(off, len, write);
        hist.record(m.now_ns() - arrival);
        done += 1;
        if done & 0xFFFF == 0 {
            pb.set_position(done);
        }
    }
    let ops = done;
    pb.finish_and_clear();
    let wall = t0.elapsed().as_secs_f64();
    let s = m.stats();
    let secs = s.modeled_ns as f64 / 1e9;
    let iops = if secs > 0.0 { ops as f64 / secs } else { 0.0 };
    let mbps = if secs > 0.0 {
        s.bytes as f64 / secs / 1e6
    } else {
        0.0
    };
    let per = |x: u64| {
        if ops == 0 {
            0.0
        } else {
            x as f64 / ops as f64 / 1e6
        }
    };
    if c.json {
        let out = json!({
            "model": "hdd",
            "config": cfg,
            "workload": {
                "pattern": pattern(c)?, "trace": c.trace, "ops": ops, "io_size": io, "read_pct": c.read_pct,
                "working_set": c.working_set, "seed": c.seed, "queue_depth": a.queue_depth,
            },
            "modeled": { "seconds": secs, "iops": iops, "mb_per_s": mbps },
            "mean_ms": { "seek": per(s.seek_ns), "rotation": per(s.rotation_ns), "transfer": per(s.transfer_ns) },
            "latency_us": latency_json(&hist),
            "wall": { "seconds": wall },
            "totals": s,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).context("serializing the report")?
        );
        return Ok(());
    }
    println!(
        "hdd: {} B, {} rpm, {} zones {:.0}->{:.0} MB/s, seek {}/{}/{} ms, {:?}, queue depth {}",
        cfg.capacity,
        cfg.rpm,
        cfg.zones,
        cfg.outer_mbps,
        cfg.inner_mbps,
        cfg.track_to_track_ms,
        cfg.avg_seek_ms,
        cfg.full_stroke_ms,
        cfg.scheduler,
        a.queue_depth
    );
    println!(
        "workload: {}, {} requests of {} B, {}% reads, working set {:.0}%, seed {}",
        source_name(c),
        ops,
        io,
        c.read_pct,
        c.working_set * 100.0,
        c.seed
    );
    println!("modeled             {secs:.3} s, {iops:.1} IOPS, {mbps:.1} MB/s");
    println!(
        "per request (ms)    seek {:.3}  rotation {:.3}  transfer {:.3}  ({} seeks, {} sequential)",
        per(s.seek_ns),
        per(s.rotation_ns),
        per(s.transfer_ns),
        s.seeks,
        s.sequential
    );
    print_latency(&hist);
    Ok(())
}
