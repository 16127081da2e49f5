//! `ecstack trace {analyze,transform,synth,replay}`: block and file trace tooling. The runs live in
//! `ecstack_trace` (`analyze`, `tools`, `replay`); this module parses the flags, checks them, and
//! prints the reports.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use ecstack_trace::analyze::{analyze_files, AnalyzeOptions, GroupBy};
use ecstack_trace::parse::{BlkAction, Format, ParseOptions};
use ecstack_trace::replay::{replay, Pace, ReplayOptions};
use ecstack_trace::synth::{preset, presets};
use ecstack_trace::tools::{
    prepare_for_replay, read_files, synth_file, transform_files, Event, SynthFile, TargetOverrides,
    TransformFiles,
};
use ecstack_trace::transform::{TransformOptions, CODFS_SEGMENT};
use ecstack_trace::write::OutFormat;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// Print to stdout; a closed pipe (`… | head`) ends output quietly instead of panicking.
fn emit(s: &str) -> Result<()> {
    let mut o = std::io::stdout().lock();
    match o.write_all(s.as_bytes()).and_then(|_| o.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(Into::into),
    }
}

macro_rules! outln {
    ($($t:tt)*) => {
        emit(&format!("{}\n", format_args!($($t)*)))?
    };
}

#[derive(Args)]
#[command(
    about = "Parse, analyze, transform, synthesize and replay block and file traces",
    long_about = "Trace tooling for the workloads the seeds evaluate with.\n\n\
Accepted inputs (plain, gzip or zstd, detected by magic bytes; format detected from the first lines or \
given with --format): MSR Cambridge CSV, SPC/UMass CSV, Harvard nfsdump text, blkparse text output, \
fio iolog v2/v3.\n\n\
  ecstack trace analyze web_0.csv.gz --json\n\
  ecstack trace transform usr_0.csv --round 4K --compact -o usr0.fio --out-format fio3\n\
  ecstack trace synth --preset eplog-fin --scale 0.1 -o fin.csv\n\
  ecstack trace replay --preset msr-mds0 --scale 0.01 --compact --device file:/tmp/d?size=1G --clients 4"
)]
pub struct TraceArgs {
    #[command(subcommand)]
    cmd: TraceCmd,
}

#[derive(Subcommand)]
enum TraceCmd {
    /// Per-volume statistics: writes, WSS, updated WSS %, update writes %, update sizes, random %, reuse CDF
    Analyze(AnalyzeArgs),
    /// Select, merge, round, compact (EPLOG), split into client streams, convert (e.g. to fio iolog)
    Transform(TransformArgs),
    /// Generate a trace matching target statistics or a named preset from the seeds' tables
    Synth(SynthArgs),
    /// Replay a trace against a block device (file, raw device, simulated SSD/HDD)
    Replay(ReplayArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Msr,
    Spc,
    Nfs,
    Blkparse,
    Fio,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Msr => Format::Msr,
            FormatArg::Spc => Format::Spc,
            FormatArg::Nfs => Format::Nfs,
            FormatArg::Blkparse => Format::Blkparse,
            FormatArg::Fio => Format::Fio,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum BlkActionArg {
    /// Q: queued (as the application issued it)
    Q,
    /// D: issued to the driver (after merging)
    D,
    /// C: completed
    C,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum OutFormatArg {
    Msr,
    Spc,
    Fio2,
    Fio3,
    Blkparse,
    Nfs,
}

impl From<OutFormatArg> for OutFormat {
    fn from(f: OutFormatArg) -> OutFormat {
        match f {
            OutFormatArg::Msr => OutFormat::Msr,
            OutFormatArg::Spc => OutFormat::Spc,
            OutFormatArg::Fio2 => OutFormat::Fio2,
            OutFormatArg::Fio3 => OutFormat::Fio3,
            OutFormatArg::Blkparse => OutFormat::Blkparse,
            OutFormatArg::Nfs => OutFormat::Nfs,
        }
    }
}

/// Input options shared by the subcommands that read traces.
#[derive(Args, Clone)]
struct InputArgs {
    /// Trace files (one trace; `-` reads stdin). Compressed input (gzip, zstd) is detected
    #[arg(value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Input format (default: detected from the first lines)
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
    /// Skip malformed lines (counted and reported) instead of stopping at the first one
    #[arg(long)]
    skip_bad: bool,
    /// blkparse: which event action makes a request
    #[arg(long, value_enum, default_value = "q")]
    blk_action: BlkActionArg,
}

impl InputArgs {
    fn parse_options(&self) -> ParseOptions {
        ParseOptions {
            format: self.format.map(Into::into),
            skip_bad: self.skip_bad,
            blk_action: match self.blk_action {
                BlkActionArg::Q => BlkAction::Queue,
                BlkActionArg::D => BlkAction::Issue,
                BlkActionArg::C => BlkAction::Complete,
            },
        }
    }
}

#[derive(Args)]
struct AnalyzeArgs {
    #[command(flatten)]
    input: InputArgs,
    /// One row for the whole trace instead of one per volume
    #[arg(long)]
    all: bool,
    /// Skip the address-reuse CDF (saves 1 byte per 4 KiB block of working set)
    #[arg(long)]
    no_cdf: bool,
    /// Points of the reuse CDF in the JSON output
    #[arg(long, default_value_t = 101)]
    cdf_points: usize,
    /// Write sizes.svg (update-size distribution) and reuse.svg (reuse CDF) into this directory
    #[arg(long, value_name = "DIR")]
    plot_dir: Option<PathBuf>,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct TransformArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Output file (`-` for stdout); with --clients N, files OUT.0 … OUT.{N-1}
    #[arg(short = 'o', long = "out", alias = "output", value_name = "OUT")]
    output: PathBuf,
    /// Output format
    #[arg(long, value_enum, default_value = "msr")]
    out_format: OutFormatArg,
    /// fio iolog: use this file name for every volume (e.g. /dev/nbd0)
    #[arg(long)]
    fio_file: Option<String>,
    /// Keep only this volume (repeatable; names as `analyze` prints them)
    #[arg(long = "volume", value_name = "NAME")]
    volumes: Vec<String>,
    /// Keep requests from this many seconds after the first request
    #[arg(long, value_name = "SECONDS")]
    from: Option<f64>,
    /// Keep requests before this many seconds after the first request
    #[arg(long, value_name = "SECONDS")]
    to: Option<f64>,
    /// Drop reads and discards
    #[arg(long)]
    writes_only: bool,
    /// Merge a request into the previous one when it continues it (CodFS §5.3.1)
    #[arg(long)]
    merge: bool,
    /// Largest merged request
    #[arg(long, value_name = "SIZE", default_value = "1M")]
    merge_max: String,
    /// Round requests out to multiples of this chunk size (EPLOG: 4K)
    #[arg(long, value_name = "SIZE")]
    round: Option<String>,
    /// Compact: drop untouched segments and shift later offsets (EPLOG: 1M segments)
    #[arg(long, value_name = "SEGMENT", num_args = 0..=1, default_missing_value = "1M")]
    compact: Option<String>,
    /// With --compact: pack all volumes into one address space
    #[arg(long)]
    flatten: bool,
    /// Split into N client streams, each segment's requests to one client
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Locality segment for --clients
    #[arg(long, value_name = "SIZE", default_value = "16M")]
    segment: String,
    /// Print a JSON summary
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SynthArgs {
    /// Named preset (see --list)
    #[arg(long)]
    preset: Option<String>,
    /// List the presets and their targets
    #[arg(long)]
    list: bool,
    /// Scale the size (writes, WSS, files) keeping every ratio; 1.0 = the published size
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Random seed (the output is a function of preset, scale and seed)
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Output file (`-` for stdout)
    #[arg(short = 'o', long = "out", alias = "output", value_name = "OUT")]
    output: Option<PathBuf>,
    /// Output format (default: msr, nfs for file traces)
    #[arg(long, value_enum)]
    out_format: Option<OutFormatArg>,
    /// Analyze the result and compare with the targets (exit status 1 if off by more than 3%)
    #[arg(long)]
    verify: bool,
    /// Target: number of writes
    #[arg(long)]
    writes: Option<u64>,
    /// Target: average write size (e.g. 8K)
    #[arg(long, value_name = "SIZE")]
    avg_write_size: Option<String>,
    /// Target: EPLOG random writes %
    #[arg(long)]
    random_pct: Option<f64>,
    /// Target: working set size (e.g. 2G)
    #[arg(long, value_name = "SIZE")]
    wss: Option<String>,
    /// Target: updated WSS %
    #[arg(long)]
    updated_wss_pct: Option<f64>,
    /// Target: update writes %
    #[arg(long)]
    update_writes_pct: Option<f64>,
    /// Target: reads % of requests
    #[arg(long)]
    read_pct: Option<f64>,
    /// Target: Zipf skew of hot updates and re-reads (0 = uniform)
    #[arg(long)]
    zipf: Option<f64>,
    /// Target: duration in seconds
    #[arg(long)]
    duration: Option<f64>,
    /// Target (file trace): number of files
    #[arg(long)]
    files: Option<u64>,
    /// Target (file trace): updated files %
    #[arg(long)]
    updated_files_pct: Option<f64>,
    /// Print a JSON summary (with --verify: the checks)
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ReplayArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Replay a synthesized preset instead of files
    #[arg(long)]
    preset: Option<String>,
    /// With --preset: scale
    #[arg(long, default_value_t = 0.01)]
    scale: f64,
    /// With --preset: seed
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Device spec: file:/path?size=1G, /dev/sdX, mem:256M, ssd:…, hdd:… (see docs/devices.md), or
    /// array:<metadata volume spec> for an array made with `ecstack array create`
    #[arg(long)]
    device: String,
    /// Concurrent client threads (requests dealt by segment, order kept per client)
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Timestamp-faithful replay, this many times faster than recorded (default: as fast as possible)
    #[arg(long, value_name = "FACTOR")]
    speed: Option<f64>,
    /// Pre-write every touched 1 MiB segment first (EPLOG's method)
    #[arg(long)]
    prewrite: bool,
    /// EPLOG preparation first: round to --round and compact by 1 MiB segments (volumes flattened)
    #[arg(long)]
    compact: bool,
    /// Chunk size for --compact rounding
    #[arg(long, value_name = "SIZE", default_value = "4K")]
    round: String,
    /// Only writes
    #[arg(long)]
    writes_only: bool,
    /// Fold offsets beyond the device capacity back into it
    #[arg(long)]
    wrap: bool,
    /// Locality segment for dealing requests to clients
    #[arg(long, value_name = "SIZE", default_value = "16M")]
    segment: String,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

pub fn run(a: TraceArgs) -> Result<()> {
    let res = match a.cmd {
        TraceCmd::Analyze(a) => analyze(a),
        TraceCmd::Transform(a) => transform(a),
        TraceCmd::Synth(a) => synth(a),
        TraceCmd::Replay(a) => replay_cmd(a),
    };
    // `ecstack trace synth -o - | head`: the reader went away, which is not an error.
    match res {
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            Ok(())
        }
        r => r,
    }
}

// ----------------------------------------------------------------------------------- helpers

fn spinner(what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} {pos} records ({per_sec})")
            .expect("static template"),
    );
    pb.set_message(what.to_string());
    pb
}

fn bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .expect("static template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

fn need_files(i: &InputArgs) -> Result<Vec<&Path>> {
    if i.files.is_empty() {
        bail!("no trace files given");
    }
    Ok(i.files.iter().map(|p| p.as_path()).collect())
}

/// Tell the user about malformed lines a file had (`--skip-bad`).
fn warn_skipped(e: Event) {
    if let Event::Skipped { count, first } = e {
        eprintln!("ecstack: skipped {count} malformed line(s), first: {first}");
    }
}

// ----------------------------------------------------------------------------------- analyze

fn analyze(a: AnalyzeArgs) -> Result<()> {
    let files = need_files(&a.input)?;
    let opts = AnalyzeOptions {
        group_by: if a.all { GroupBy::All } else { GroupBy::Volume },
        reuse_cdf: !a.no_cdf,
        cdf_points: a.cdf_points.max(2),
    };
    let pb = spinner("analyzing");
    let t = std::time::Instant::now();
    let rep = analyze_files(&files, &a.input.parse_options(), opts, |n| pb.inc(n))?;
    pb.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    if let Some(dir) = &a.plot_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        ecstack_lab::trace_plots::size_distribution(&rep).write_svg(&dir.join("sizes.svg"))?;
        if !a.no_cdf {
            ecstack_lab::trace_plots::reuse_cdf(&rep).write_svg(&dir.join("reuse.svg"))?;
        }
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        emit(&rep.table())?;
        eprintln!(
            "{} records in {:.2} s ({:.2} M records/s)",
            rep.records,
            secs,
            rep.records as f64 / secs.max(1e-9) / 1e6
        );
    }
    Ok(())
}

// --------------------------------------------------------------------------------- transform

fn transform(a: TransformArgs) -> Result<()> {
    let files = need_files(&a.input)?;
    let topts = TransformOptions {
        volumes: a.volumes.clone(),
        from_s: a.from,
        to_s: a.to,
        writes_only: a.writes_only,
        merge: a.merge,
        merge_max: crate::util::parse_size(&a.merge_max)?,
        round: a
            .round
            .as_deref()
            .map(crate::util::parse_size)
            .transpose()?,
        compact: a
            .compact
            .as_deref()
            .map(crate::util::parse_size)
            .transpose()?,
        flatten: a.flatten,
    };
    if topts.compact == Some(0) {
        bail!("--compact segment must be positive");
    }
    let clients = a.clients.max(1);
    let segment = crate::util::parse_size(&a.segment)?.max(1);
    if topts.compact.is_some() && files.iter().any(|p| p.as_os_str() == "-") {
        bail!("--compact reads the input twice; it cannot read stdin");
    }
    if clients > 1 && a.output.as_os_str() == "-" {
        bail!("--clients writes several files; give -o a path");
    }
    let run = TransformFiles {
        inputs: files.iter().map(|p| p.to_path_buf()).collect(),
        parse: a.input.parse_options(),
        transform: topts,
        output: a.output.clone(),
        format: a.out_format.into(),
        fio_file: a.fio_file.clone(),
        clients,
        segment,
    };
    let summary = transform_files(&run, &mut warn_skipped)?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
    } else if a.output.as_os_str() != "-" {
        eprintln!("{}", summary.line());
    }
    Ok(())
}

// ------------------------------------------------------------------------------------- synth

fn overrides(a: &SynthArgs) -> Result<TargetOverrides> {
    let size = |v: &Option<String>| v.as_deref().map(crate::util::parse_size).transpose();
    Ok(TargetOverrides {
        writes: a.writes,
        avg_write_bytes: size(&a.avg_write_size)?,
        random_pct: a.random_pct,
        wss_bytes: size(&a.wss)?,
        updated_wss_pct: a.updated_wss_pct,
        update_writes_pct: a.update_writes_pct,
        read_pct: a.read_pct,
        zipf: a.zipf,
        duration_s: a.duration,
        files: a.files,
        updated_files_pct: a.updated_files_pct,
    })
}

fn synth(a: SynthArgs) -> Result<()> {
    if a.list {
        let all = presets();
        if a.json {
            outln!("{}", serde_json::to_string_pretty(&all)?);
        } else {
            for p in all {
                outln!("{:<16} {}", p.name, p.source);
            }
        }
        return Ok(());
    }
    if !(a.scale > 0.0 && a.scale.is_finite()) {
        bail!("--scale must be positive");
    }
    let base = a.preset.as_deref().map(preset).transpose()?;
    let Some(generator) = overrides(&a)?.generator(base.as_ref())? else {
        bail!("give --preset NAME (see --list) or targets (--writes, --wss, …)");
    };
    let run = SynthFile {
        preset: a.preset.clone(),
        generator,
        scale: a.scale,
        seed: a.seed,
        output: a.output.clone(),
        format: a.out_format.map(Into::into),
        verify: a.verify,
    };
    let pb = spinner("synthesizing");
    let s = synth_file(&run, &mut |e| {
        if let Event::Records(n) = e {
            pb.set_position(n);
        }
    });
    pb.finish_and_clear();
    let s = s?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        if a.output.as_ref().is_some_and(|o| o.as_os_str() != "-") {
            eprintln!("{} records written", s.records);
        }
        emit(&s.checks_table())?;
    }
    if s.failed() {
        bail!("synthesized trace is more than 3% off a target");
    }
    Ok(())
}

// ------------------------------------------------------------------------------------ replay

fn replay_cmd(a: ReplayArgs) -> Result<()> {
    let records = match &a.preset {
        Some(name) => {
            if !a.input.files.is_empty() {
                bail!("give trace files or --preset, not both");
            }
            ecstack_trace::synthesize_preset(name, a.scale, a.seed)?.records
        }
        None => {
            let files = need_files(&a.input)?;
            let pb = spinner("reading");
            let r = read_files(&files, &a.input.parse_options(), &mut |e| match e {
                Event::Records(n) => pb.set_position(n),
                e => warn_skipped(e),
            });
            pb.finish_and_clear();
            r?.0
        }
    };
    let compact_chunk = if a.compact {
        Some(crate::util::parse_size(&a.round)?)
    } else {
        None
    };
    let records = prepare_for_replay(records, a.writes_only, compact_chunk)?;
    // `array:<meta spec>` replays against an ecstack array (EPLOG md / pl / eplog), any other spec
    // against a device.
    let array = match a.device.strip_prefix("array:") {
        Some(meta) => Some(crate::cmd_array::open_by_meta(meta)?),
        None => None,
    };
    let dev: std::sync::Arc<dyn ecstack_device::BlockDevice> = match &array {
        Some(arr) => arr.clone(),
        None => ecstack_device::open_spec(&a.device)?,
    };
    let pace = match a.speed {
        Some(s) if s > 0.0 && s.is_finite() => Pace::Timed { speed: s },
        Some(_) => bail!("--speed must be positive"),
        None => Pace::Fast,
    };
    let opts = ReplayOptions {
        clients: a.clients.max(1),
        pace,
        prewrite: a.prewrite,
        wrap: a.wrap,
        segment: crate::util::parse_size(&a.segment)
            .unwrap_or(CODFS_SEGMENT)
            .max(1),
        flush: true,
    };
    let pb = bar(records.len() as u64, "replay");
    let rep = replay(&dev, &records, &opts, &|n| pb.inc(n))?;
    if let Some(arr) = &array {
        // Persist the array's metadata (a checkpoint) so the next open need not replay a long log.
        arr.close()?;
    }
    pb.finish_and_clear();
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        emit(&rep.text())?;
    }
    Ok(())
}
