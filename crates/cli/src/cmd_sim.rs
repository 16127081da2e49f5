//! `ecstack sim array`: the deterministic array simulator (`ecstack_array::sim`), one seed or a sweep
//! (the run and its report: `ecstack_lab::array_sim`).
//!
//! `ecstack sim ssd|hdd`: a synthetic workload or a block trace (`--trace FILE`) against a simulated
//! device, and what the model saw (the run and its report: `ecstack_lab::device_sim`).
//!
//! This module parses the flags, checks them, and prints the report.

use std::io::IsTerminal;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use ecstack_device::{parse_size, Pattern};
use ecstack_lab::device_sim::{
    run_hdd, run_ssd, HddSimOptions, Progress, SsdSimOptions, WorkloadOptions,
};
use ecstack_trace::Format;
use indicatif::{ProgressBar, ProgressStyle};

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
        SimCmd::Ssd(s) => run_ssd_cmd(s),
        SimCmd::Hdd(h) => run_hdd_cmd(h),
        SimCmd::Array(a) => run_array(a),
        SimCmd::Robustore(r) => crate::cmd_robustore::run(r),
        SimCmd::Zombienand(z) => crate::cmd_zombienand::run_sim(z),
    }
}

fn run_array(a: ArraySimArgs) -> Result<()> {
    use ecstack_array::sim::SimOptions;
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
    let r = ecstack_lab::array_sim::run(a.seed, a.seeds, &opts, || pb.inc(1));
    pb.finish_and_clear();
    let r = match r {
        Ok(r) => r,
        Err(f) => {
            if a.json {
                println!("{}", ecstack_lab::array_sim::failure_json(&f));
            }
            bail!("{f}");
        }
    };
    if a.json {
        println!("{}", r.to_json());
    } else {
        print!("{}", r.text());
    }
    Ok(())
}

/// A progress bar for a run's phases, drawn on a terminal for phases of a million steps or more.
fn progress() -> impl FnMut(Progress) {
    let mut pb = ProgressBar::hidden();
    move |p| match p {
        Progress::Start { what, total } => {
            pb = if !std::io::stderr().is_terminal() || total < 1_000_000 {
                ProgressBar::hidden()
            } else {
                let pb = ProgressBar::new(total);
                if let Ok(style) = ProgressStyle::with_template(
                    "{msg} [{bar:40}] {human_pos}/{human_len} {per_sec} eta {eta}",
                ) {
                    pb.set_style(style.progress_chars("=> "));
                }
                pb.set_message(what.to_string());
                pb
            };
        }
        Progress::At(n) => pb.set_position(n),
        Progress::Done => pb.finish_and_clear(),
    }
}

/// The checked workload flags as the library's options.
fn workload(c: &Common) -> Result<WorkloadOptions> {
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
    let pattern = match c.workload {
        WorkloadKind::Seq => Pattern::Sequential,
        WorkloadKind::Uniform => Pattern::Uniform,
        WorkloadKind::Zipf => {
            if !(c.theta > 0.0 && c.theta < 1.0) {
                bail!("--theta must be in (0, 1), got {}", c.theta);
            }
            Pattern::Zipf { theta: c.theta }
        }
    };
    let trace_format = match &c.trace_format {
        Some(f) => Some(Format::from_name(f).with_context(|| {
            format!("unknown trace format '{f}' (msr, spc, nfs, blkparse, fio)")
        })?),
        None => None,
    };
    let bytes = match &c.bytes {
        Some(b) => Some(parse_size(b).map_err(|e| anyhow::anyhow!("--bytes: {e}"))?),
        None => None,
    };
    Ok(WorkloadOptions {
        pattern,
        pattern_name: format!("{:?}", c.workload),
        trace: c.trace.clone(),
        trace_format,
        ops: c.ops,
        bytes,
        io_size: io,
        read_pct: c.read_pct,
        working_set: c.working_set,
        seed: c.seed,
    })
}

fn print_report(json: bool, value: serde_json::Value, text: String) -> Result<()> {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&value).context("serializing the report")?
        );
    } else {
        print!("{text}");
    }
    Ok(())
}

fn run_ssd_cmd(a: SsdArgs) -> Result<()> {
    let workload = workload(&a.common)?;
    if !(0.0..=100.0).contains(&a.trim_pct) || a.trim_pct + a.common.read_pct > 100.0 {
        bail!("--trim-pct must be between 0 and 100 - --read-pct");
    }
    let o = SsdSimOptions {
        params: a.params,
        prefill: !a.no_prefill,
        trim_pct: a.trim_pct,
        bins: a.bins,
        workload,
    };
    let r = run_ssd(&o, &mut progress())?;
    print_report(a.common.json, r.to_json(), r.text())
}

fn run_hdd_cmd(a: HddArgs) -> Result<()> {
    let workload = workload(&a.common)?;
    if a.queue_depth == 0 {
        bail!("--queue-depth must be at least 1");
    }
    let o = HddSimOptions {
        params: a.params,
        queue_depth: a.queue_depth,
        workload,
    };
    let r = run_hdd(&o, &mut progress())?;
    print_report(a.common.json, r.to_json(), r.text())
}
