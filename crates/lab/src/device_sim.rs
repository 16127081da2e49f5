//! `ecstack sim ssd|hdd`: a synthetic workload or a block trace against a simulated device, and the
//! report of what the model saw — write amplification, GC and the erase histogram for the SSD; seeks
//! and rotation for the HDD; modeled throughput and latency percentiles for both. The SSD report
//! also gives the simulator's own speed (host page writes per second of wall and CPU time).
//!
//! Requests come from a synthetic generator (sequential, uniform, Zipf) or from a block trace (any
//! format `ecstack-trace` parses). Trace offsets are folded into the simulated device's address
//! space modulo its capacity, as ZombieNAND's trace-driven runs map the first addresses of a trace
//! onto a small simulated SSD.
//!
//! The caller (the CLI) validates its flags; [`run_ssd`] and [`run_hdd`] check what depends on the
//! model (page size, capacity) and return a report that renders as JSON ([`SsdSimReport::to_json`])
//! or text ([`SsdSimReport::text`]).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use ecstack_device::{
    hdd_config, ssd_config, HddConfig, HddModel, HddStats, LatencyHistogram, Pattern, SplitMix64,
    SsdConfig, SsdModel, SsdStats, Workload,
};
use ecstack_trace::{Format, Op, ParseOptions, TraceReader};
use serde_json::json;

use crate::{LabError, Result};

/// The workload of one run.
#[derive(Clone, Debug)]
pub struct WorkloadOptions {
    /// The synthetic access pattern (reported even when a trace gives the requests).
    pub pattern: Pattern,
    /// What the text report calls the pattern (`Uniform`, `Zipf`, ...).
    pub pattern_name: String,
    /// Replay this block trace instead of the synthetic pattern.
    pub trace: Option<PathBuf>,
    /// The trace's format (`None`: detected from the first lines).
    pub trace_format: Option<Format>,
    /// Number of requests (default: per device; a trace runs to its end).
    pub ops: Option<u64>,
    /// Total bytes to issue instead of `ops` (synthetic workloads).
    pub bytes: Option<u64>,
    /// Request size in bytes (positive).
    pub io_size: u64,
    /// Percentage of requests that are reads, in [0, 100].
    pub read_pct: f64,
    /// Fraction of the address space touched (from offset 0), in (0, 1].
    pub working_set: f64,
    /// Seed of the workload generator.
    pub seed: u64,
}

/// `ecstack sim ssd`.
#[derive(Clone, Debug)]
pub struct SsdSimOptions {
    /// Model parameters in device-spec syntax (docs/devices.md).
    pub params: String,
    /// Fill the logical space sequentially before the workload.
    pub prefill: bool,
    /// Percentage of requests that are TRIMs, in [0, 100 - read_pct].
    pub trim_pct: f64,
    /// Bins of the erase-count histogram.
    pub bins: usize,
    pub workload: WorkloadOptions,
}

/// `ecstack sim hdd`.
#[derive(Clone, Debug)]
pub struct HddSimOptions {
    /// Model parameters in device-spec syntax (docs/devices.md).
    pub params: String,
    /// Requests kept outstanding (at least 1; the scheduler picks among them).
    pub queue_depth: usize,
    pub workload: WorkloadOptions,
}

/// Progress of a run, for a progress bar: a phase starts (`total` 0 when unknown), moves on, ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Progress {
    Start { what: &'static str, total: u64 },
    At(u64),
    Done,
}

#[derive(Clone, Copy, PartialEq, Debug)]
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
    /// `units` request slots of `io` bytes for a synthetic workload; a trace folds into `space`
    /// bytes with requests aligned out to `align`.
    fn new(w: &WorkloadOptions, units: u64, p_trim: f64, space: u64, align: u64) -> Result<Source> {
        if let Some(path) = &w.trace {
            let opts = ParseOptions {
                format: w.trace_format,
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
            w: Workload::new(w.pattern, units, w.seed).map_err(LabError::Run)?,
            io: w.io_size,
            rng: SplitMix64::new(w.seed ^ 0x5EED_0F0B5),
            p_read: w.read_pct / 100.0,
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
                let (start, len) = fold(rec.offset, rec.end(), *space, *align);
                return Ok(Some((kind, start, len)));
            },
        }
    }
}

/// Fold the request `[offset, end)` into a device of `space` bytes: its start aligned down to
/// `align`, modulo the space; its end aligned up, clipped at the end of the space.
fn fold(offset: u64, end: u64, space: u64, align: u64) -> (u64, u64) {
    let aligned = offset / align * align;
    let start = aligned % space;
    let end = end.div_ceil(align) * align;
    (start, (end - aligned).min(space - start))
}

impl WorkloadOptions {
    /// What the workload line of the text report calls the request source.
    fn source_name(&self) -> String {
        match &self.trace {
            Some(p) => format!("trace {}", p.display()),
            None => self.pattern_name.clone(),
        }
    }

    /// Requests to issue: `ops`, else `bytes / io_size`, else `default`.
    fn ops_or(&self, default: u64) -> u64 {
        match (self.ops, self.bytes) {
            (Some(n), _) => n,
            (None, Some(b)) => b / self.io_size,
            (None, None) => default,
        }
    }
}

/// CPU time this thread has run, ns (Linux `/proc/thread-self/schedstat`), to report the simulator's
/// speed independently of how busy a shared machine is. `None` elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
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

fn latency_line(out: &mut String, h: &LatencyHistogram) {
    let us = |q: f64| h.quantile(q) as f64 / 1e3;
    let _ = writeln!(
        out,
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
pub fn erase_histogram(counts: &[u32], bins: usize) -> Vec<(u32, u32, u64)> {
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

fn rate(x: f64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        x / seconds
    } else {
        0.0
    }
}

/// What `ecstack sim ssd` measured.
#[derive(Clone, Debug)]
pub struct SsdSimReport {
    pub options: SsdSimOptions,
    pub config: SsdConfig,
    pub logical_pages: u64,
    /// Requests issued.
    pub ops: u64,
    /// Counters over the workload (after the prefill).
    pub host_page_writes: u64,
    pub host_page_reads: u64,
    pub flash_page_writes: u64,
    pub write_amplification: f64,
    pub gc_invocations: u64,
    pub gc_victims: u64,
    pub gc_copies: u64,
    pub erases: u64,
    /// (lo, hi inclusive, blocks).
    pub erase_histogram: Vec<(u32, u32, u64)>,
    pub modeled_seconds: f64,
    pub iops: f64,
    pub mb_per_s: f64,
    pub latency: LatencyHistogram,
    pub wall_seconds: f64,
    pub cpu_seconds: Option<f64>,
    pub host_page_writes_per_sec: f64,
    pub host_page_writes_per_cpu_sec: Option<f64>,
    /// The model's counters since it was made (prefill included).
    pub totals: SsdStats,
}

/// Run `ecstack sim ssd`.
pub fn run_ssd(o: &SsdSimOptions, progress: &mut dyn FnMut(Progress)) -> Result<SsdSimReport> {
    let w = &o.workload;
    let io = w.io_size;
    let cfg = ssd_config(&format!("ssd:{}", o.params), &o.params)?;
    let ps = cfg.page_size as u64;
    if io % ps != 0 {
        return Err(LabError::Run(format!(
            "--io-size {io} must be a multiple of the page size {ps}"
        )));
    }
    let mut m = SsdModel::new(cfg.clone()).map_err(|e| LabError::Run(format!("ssd: {e}")))?;
    let ppio = io / ps;
    let space = ((m.logical_pages() as f64 * w.working_set) as u64 / ppio).max(1);
    if space * ppio > m.logical_pages() {
        return Err(LabError::Run("--io-size is larger than the device".into()));
    }
    let ops = w.ops_or(4 * m.logical_pages() / ppio);
    let mut src = Source::new(w, space, o.trim_pct / 100.0, space * ppio * ps, ps)?;
    let ops = if src.is_trace() {
        w.ops.unwrap_or(u64::MAX)
    } else {
        ops
    };

    if o.prefill {
        progress(Progress::Start {
            what: "prefill",
            total: m.logical_pages(),
        });
        for lpn in 0..m.logical_pages() {
            m.write_page(lpn)?;
            if lpn & 0xFFFF == 0 {
                progress(Progress::At(lpn));
            }
        }
        progress(Progress::Done);
    }
    let before = m.stats();
    let mut hist = LatencyHistogram::new();
    progress(Progress::Start {
        what: "ssd",
        total: if src.is_trace() { 0 } else { ops },
    });
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
            progress(Progress::At(issued));
        }
        issued += 1;
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = match (cpu0, thread_cpu_ns()) {
        (Some(a), Some(b)) if b > a => Some((b - a) as f64 / 1e9),
        _ => None,
    };
    progress(Progress::Done);
    let after = m.stats();

    let host_w = after.host_page_writes - before.host_page_writes;
    let host_r = after.host_page_reads - before.host_page_reads;
    let flash_w = after.flash_page_writes - before.flash_page_writes;
    let modeled_s = (after.modeled_ns - before.modeled_ns) as f64 / 1e9;
    Ok(SsdSimReport {
        options: o.clone(),
        logical_pages: m.logical_pages(),
        ops: issued,
        host_page_writes: host_w,
        host_page_reads: host_r,
        flash_page_writes: flash_w,
        write_amplification: if host_w == 0 {
            0.0
        } else {
            flash_w as f64 / host_w as f64
        },
        gc_invocations: after.gc_invocations - before.gc_invocations,
        gc_victims: after.gc_victims - before.gc_victims,
        gc_copies: after.gc_copies - before.gc_copies,
        erases: after.erases - before.erases,
        erase_histogram: erase_histogram(&m.erase_counts(), o.bins),
        modeled_seconds: modeled_s,
        iops: rate(issued as f64, modeled_s),
        mb_per_s: rate(((host_w + host_r) * ps) as f64, modeled_s) / 1e6,
        latency: hist,
        wall_seconds: wall,
        cpu_seconds: cpu,
        host_page_writes_per_sec: rate(host_w as f64, wall),
        host_page_writes_per_cpu_sec: cpu.map(|c| host_w as f64 / c),
        totals: after,
        config: cfg,
    })
}

impl SsdSimReport {
    /// The `--json` report.
    pub fn to_json(&self) -> serde_json::Value {
        let (o, w) = (&self.options, &self.options.workload);
        json!({
            "model": "ssd",
            "config": self.config,
            "logical_pages": self.logical_pages,
            "workload": {
                "pattern": w.pattern, "trace": w.trace, "ops": self.ops, "io_size": w.io_size,
                "read_pct": w.read_pct, "trim_pct": o.trim_pct, "working_set": w.working_set,
                "seed": w.seed, "prefill": o.prefill,
            },
            "host_page_writes": self.host_page_writes,
            "host_page_reads": self.host_page_reads,
            "flash_page_writes": self.flash_page_writes,
            "write_amplification": self.write_amplification,
            "gc_invocations": self.gc_invocations,
            "gc_victims": self.gc_victims,
            "gc_copies": self.gc_copies,
            "erases": self.erases,
            "erase_histogram": self.erase_histogram.iter()
                .map(|&(lo, hi, n)| json!({"lo": lo, "hi": hi, "blocks": n}))
                .collect::<Vec<_>>(),
            "modeled": {
                "seconds": self.modeled_seconds, "iops": self.iops, "mb_per_s": self.mb_per_s,
            },
            "latency_us": latency_json(&self.latency),
            "wall": {
                "seconds": self.wall_seconds,
                "host_page_writes_per_sec": self.host_page_writes_per_sec,
                "cpu_seconds": self.cpu_seconds,
                "host_page_writes_per_cpu_sec": self.host_page_writes_per_cpu_sec,
            },
            "totals": self.totals,
        })
    }

    /// The text report, one line per measure.
    pub fn text(&self) -> String {
        let (o, w, cfg) = (&self.options, &self.options.workload, &self.config);
        let mut s = String::new();
        let _ = writeln!(
            s,
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
        let _ = writeln!(
            s,
            "workload: {}, {} requests of {} B, {}% reads, {}% trims, working set {:.0}%, seed {}{}",
            w.source_name(),
            self.ops,
            w.io_size,
            w.read_pct,
            o.trim_pct,
            w.working_set * 100.0,
            w.seed,
            if o.prefill {
                ", after a sequential prefill"
            } else {
                ""
            }
        );
        let _ = writeln!(s, "host page writes    {}", self.host_page_writes);
        let _ = writeln!(s, "flash page writes   {}", self.flash_page_writes);
        let _ = writeln!(s, "write amplification {:.3}", self.write_amplification);
        let _ = writeln!(
            s,
            "GC                  {} invocations, {} victims, {} page copies, {} erases",
            self.gc_invocations, self.gc_victims, self.gc_copies, self.erases
        );
        let t = &self.totals;
        let _ = writeln!(
            s,
            "erase counts        min {} max {} mean {:.2}",
            t.erase_min, t.erase_max, t.erase_mean
        );
        for (lo, hi, n) in &self.erase_histogram {
            let _ = writeln!(s, "  erases {lo:>6}..={hi:<6} {n:>8} blocks");
        }
        let _ = writeln!(
            s,
            "modeled             {:.3} s, {:.0} IOPS, {:.1} MB/s",
            self.modeled_seconds, self.iops, self.mb_per_s
        );
        latency_line(&mut s, &self.latency);
        let per_cpu = match (self.host_page_writes_per_cpu_sec, self.cpu_seconds) {
            (Some(w), Some(c)) => format!(", {:.2} M per CPU-second (CPU {c:.3} s)", w / 1e6),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "simulator speed     {:.2} M host page writes/s (wall {:.3} s){per_cpu}",
            self.host_page_writes_per_sec / 1e6,
            self.wall_seconds
        );
        s
    }
}

/// What `ecstack sim hdd` measured.
#[derive(Clone, Debug)]
pub struct HddSimReport {
    pub options: HddSimOptions,
    pub config: HddConfig,
    /// Requests completed (TRIMs from a trace are skipped: they cost a disk nothing).
    pub ops: u64,
    pub modeled_seconds: f64,
    pub iops: f64,
    pub mb_per_s: f64,
    pub latency: LatencyHistogram,
    pub wall_seconds: f64,
    pub totals: HddStats,
}

/// Run `ecstack sim hdd`: a closed loop with `queue_depth` requests outstanding; a new one arrives
/// when one completes, and the disk's scheduler picks which to serve.
pub fn run_hdd(o: &HddSimOptions, progress: &mut dyn FnMut(Progress)) -> Result<HddSimReport> {
    let w = &o.workload;
    let io = w.io_size;
    let cfg = hdd_config(&format!("hdd:{}", o.params), &o.params)?;
    let mut m = HddModel::new(cfg.clone()).map_err(|e| LabError::Run(format!("hdd: {e}")))?;
    let space = ((m.capacity() as f64 * w.working_set) as u64 / io).max(1);
    if space * io > m.capacity() {
        return Err(LabError::Run("--io-size is larger than the disk".into()));
    }
    let ops = w.ops_or(100_000);
    let mut src = Source::new(w, space, 0.0, space * io, 512)?;
    let ops = if src.is_trace() {
        w.ops.unwrap_or(u64::MAX)
    } else {
        ops
    };
    let depth = o.queue_depth.max(1);
    let mut pending: Vec<(u64, u64, u64, bool)> = Vec::with_capacity(depth); // (offset, len, arrival, write)
    let mut offsets: Vec<u64> = Vec::with_capacity(depth);
    let mut issued = 0u64;
    let mut exhausted = false;
    let mut hist = LatencyHistogram::new();
    progress(Progress::Start {
        what: "hdd",
        total: if src.is_trace() { 0 } else { ops },
    });
    let t0 = Instant::now();
    let mut done = 0u64;
    loop {
        while pending.len() < depth && issued < ops && !exhausted {
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
            progress(Progress::At(done));
        }
    }
    progress(Progress::Done);
    let wall = t0.elapsed().as_secs_f64();
    let s = m.stats();
    let secs = s.modeled_ns as f64 / 1e9;
    Ok(HddSimReport {
        options: o.clone(),
        config: cfg,
        ops: done,
        modeled_seconds: secs,
        iops: rate(done as f64, secs),
        mb_per_s: rate(s.bytes as f64, secs) / 1e6,
        latency: hist,
        wall_seconds: wall,
        totals: s,
    })
}

impl HddSimReport {
    /// Mean of a per-request counter in ms.
    fn per_request_ms(&self, ns: u64) -> f64 {
        if self.ops == 0 {
            0.0
        } else {
            ns as f64 / self.ops as f64 / 1e6
        }
    }

    /// The `--json` report.
    pub fn to_json(&self) -> serde_json::Value {
        let (o, w, s) = (&self.options, &self.options.workload, &self.totals);
        let per = |x| self.per_request_ms(x);
        json!({
            "model": "hdd",
            "config": self.config,
            "workload": {
                "pattern": w.pattern, "trace": w.trace, "ops": self.ops, "io_size": w.io_size,
                "read_pct": w.read_pct, "working_set": w.working_set, "seed": w.seed,
                "queue_depth": o.queue_depth,
            },
            "modeled": {
                "seconds": self.modeled_seconds, "iops": self.iops, "mb_per_s": self.mb_per_s,
            },
            "mean_ms": {
                "seek": per(s.seek_ns), "rotation": per(s.rotation_ns),
                "transfer": per(s.transfer_ns),
            },
            "latency_us": latency_json(&self.latency),
            "wall": { "seconds": self.wall_seconds },
            "totals": s,
        })
    }

    /// The text report, one line per measure.
    pub fn text(&self) -> String {
        let (o, w, cfg, st) = (
            &self.options,
            &self.options.workload,
            &self.config,
            &self.totals,
        );
        let per = |x| self.per_request_ms(x);
        let mut s = String::new();
        let _ = writeln!(
            s,
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
            o.queue_depth
        );
        let _ = writeln!(
            s,
            "workload: {}, {} requests of {} B, {}% reads, working set {:.0}%, seed {}",
            w.source_name(),
            self.ops,
            w.io_size,
            w.read_pct,
            w.working_set * 100.0,
            w.seed
        );
        let _ = writeln!(
            s,
            "modeled             {:.3} s, {:.1} IOPS, {:.1} MB/s",
            self.modeled_seconds, self.iops, self.mb_per_s
        );
        let _ = writeln!(
            s,
            "per request (ms)    seek {:.3}  rotation {:.3}  transfer {:.3}  ({} seeks, {} sequential)",
            per(st.seek_ns),
            per(st.rotation_ns),
            per(st.transfer_ns),
            st.seeks,
            st.sequential
        );
        latency_line(&mut s, &self.latency);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(pattern: Pattern, ops: u64) -> WorkloadOptions {
        WorkloadOptions {
            pattern,
            pattern_name: format!("{pattern:?}"),
            trace: None,
            trace_format: None,
            ops: Some(ops),
            bytes: None,
            io_size: 4096,
            read_pct: 0.0,
            working_set: 1.0,
            seed: 1,
        }
    }

    #[test]
    fn erase_histogram_bins_cover_every_block() {
        assert!(erase_histogram(&[], 8).is_empty());
        assert_eq!(erase_histogram(&[5, 5, 5], 8), vec![(5, 5, 3)]);
        let h = erase_histogram(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 5);
        assert_eq!(
            h,
            vec![(0, 1, 2), (2, 3, 2), (4, 5, 2), (6, 7, 2), (8, 9, 2)]
        );
        assert_eq!(h.iter().map(|b| b.2).sum::<u64>(), 10);
        // zero bins is one bin
        assert_eq!(erase_histogram(&[1, 2], 0), vec![(1, 2, 2)]);
    }

    #[test]
    fn fold_aligns_wraps_and_clips() {
        // inside the space: aligned out on both ends
        assert_eq!(fold(4096 + 100, 4096 + 200, 1 << 20, 4096), (4096, 4096));
        // beyond the space: modulo the space
        assert_eq!(
            fold((1 << 20) + 8192, (1 << 20) + 12288, 1 << 20, 4096),
            (8192, 4096)
        );
        // running off the end: clipped
        assert_eq!(
            fold((1 << 20) - 4096, (1 << 20) + 8192, 1 << 20, 4096),
            ((1 << 20) - 4096, 4096)
        );
    }

    #[test]
    fn ssd_sequential_fill_writes_each_page_once() {
        let o = SsdSimOptions {
            params: "blocks=64,pages=16".into(),
            prefill: false,
            trim_pct: 0.0,
            bins: 4,
            workload: workload(Pattern::Sequential, 100),
        };
        let mut events = Vec::new();
        let r = run_ssd(&o, &mut |p| events.push(p)).unwrap();
        assert_eq!(r.ops, 100);
        assert_eq!(r.host_page_writes, 100);
        assert_eq!(r.flash_page_writes, 100);
        assert_eq!(r.write_amplification, 1.0);
        assert_eq!(r.gc_invocations, 0);
        assert_eq!(r.latency.count(), 100);
        assert_eq!(
            events.first(),
            Some(&Progress::Start {
                what: "ssd",
                total: 100
            })
        );
        assert_eq!(events.last(), Some(&Progress::Done));
        let j = r.to_json();
        assert_eq!(j["host_page_writes"], 100);
        assert_eq!(j["workload"]["ops"], 100);
        assert!(r.text().contains("write amplification 1.000\n"));
    }

    #[test]
    fn ssd_rejects_an_io_size_off_the_page_size() {
        let mut w = workload(Pattern::Uniform, 10);
        w.io_size = 1000;
        let o = SsdSimOptions {
            params: "blocks=64,pages=16".into(),
            prefill: false,
            trim_pct: 0.0,
            bins: 4,
            workload: w,
        };
        let e = run_ssd(&o, &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains("multiple of the page size"), "{e}");
    }

    #[test]
    fn hdd_sequential_reads_mostly_skip_seeks() {
        let mut w = workload(Pattern::Sequential, 200);
        w.read_pct = 100.0;
        let o = HddSimOptions {
            params: String::new(),
            queue_depth: 1,
            workload: w,
        };
        let r = run_hdd(&o, &mut |_| {}).unwrap();
        assert_eq!(r.ops, 200);
        assert_eq!(r.totals.requests, 200);
        assert!(r.totals.sequential >= 198, "{:?}", r.totals);
        assert!(r.modeled_seconds > 0.0 && r.iops > 0.0);
        let j = r.to_json();
        assert_eq!(j["workload"]["queue_depth"], 1);
        assert!(r.text().starts_with("hdd: "));
    }
}
