//! `ecstack trace {analyze,transform,synth,replay}`: block and file trace tooling.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use ecstack_trace::analyze::{analyze_files, AnalyzeOptions, GroupBy};
use ecstack_trace::parse::{BlkAction, Format, ParseOptions, TraceReader};
use ecstack_trace::replay::{replay, Pace, ReplayOptions};
use ecstack_trace::synth::{preset, presets, FileTargets, Generator, Preset, SynthStream, Targets};
use ecstack_trace::transform::{client_of, Compactor, Pipeline, TransformOptions, CODFS_SEGMENT};
use ecstack_trace::write::{OutFormat, TraceWriter};
use ecstack_trace::{Names, Record};
use indicatif::{ProgressBar, ProgressStyle};
use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
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
    #[arg(short, long, value_name = "OUT")]
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
    #[arg(short, long, value_name = "OUT")]
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

fn create(path: &Path) -> Result<Box<dyn Write>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufWriter::new(std::io::stdout().lock())));
    }
    let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    Ok(Box::new(BufWriter::with_capacity(1 << 20, f)))
}

/// Read every record of the given files (replay needs them all to deal them to clients).
fn read_records(i: &InputArgs) -> Result<(Vec<Record>, Names, u64)> {
    let files = need_files(i)?;
    let opts = i.parse_options();
    let pb = spinner("reading");
    let (mut vols, mut fnames) = (Names::new(), Names::new());
    let mut out = Vec::new();
    let mut skipped = 0;
    for p in files {
        let mut r = TraceReader::open_with(p, opts.clone(), vols, fnames)?;
        while let Some(rec) = r.next_record()? {
            out.push(rec);
            if out.len() & 0xffff == 0 {
                pb.set_position(out.len() as u64);
            }
        }
        skipped += r.skipped();
        if let Some(first) = r.first_skipped() {
            eprintln!(
                "ecstack: skipped {} malformed line(s), first: {first}",
                r.skipped()
            );
        }
        (vols, fnames) = r.into_names();
    }
    pb.finish_and_clear();
    Ok((out, vols, skipped))
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

#[derive(serde::Serialize)]
struct TransformSummary {
    records_in: u64,
    records_out: u64,
    skipped: u64,
    compacted_bytes: Option<u64>,
    segments: Option<u64>,
    outputs: Vec<String>,
    per_output: Vec<u64>,
}

fn transform(a: TransformArgs) -> Result<()> {
    let files = need_files(&a.input)?;
    let popts = a.input.parse_options();
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

    // Run the select/merge/round pipeline over every file, calling `f` per output record.
    // Volume selection is by name, decided once per volume id as names appear.
    let run_pass = |f: &mut dyn FnMut(Record, &Names) -> Result<()>| -> Result<(u64, u64, Names)> {
        let (mut vols, mut fnames) = (Names::new(), Names::new());
        let (mut n_in, mut skipped) = (0u64, 0u64);
        let mut pipe = Pipeline::new(
            &TransformOptions {
                volumes: vec![],
                ..topts.clone()
            },
            &Names::new(),
        )?;
        let mut keep: Vec<Option<bool>> = Vec::new();
        let mut err: Option<anyhow::Error> = None;
        for p in &files {
            let mut r = TraceReader::open_with(p, popts.clone(), vols, fnames)?;
            while let Some(rec) = r.next_record()? {
                n_in += 1;
                let v = rec.volume as usize;
                if v >= keep.len() {
                    keep.resize(v + 1, None);
                }
                let k = *keep[v].get_or_insert_with(|| {
                    topts.volumes.is_empty()
                        || topts
                            .volumes
                            .iter()
                            .any(|n| n == r.volumes().name(rec.volume))
                });
                if !k {
                    continue;
                }
                let names = r.volumes();
                pipe.push(rec, &mut |x| {
                    if err.is_none() {
                        err = f(x, names).err();
                    }
                });
                if let Some(e) = err.take() {
                    return Err(e);
                }
            }
            skipped += r.skipped();
            if let Some(first) = r.first_skipped() {
                eprintln!(
                    "ecstack: skipped {} malformed line(s), first: {first}",
                    r.skipped()
                );
            }
            (vols, fnames) = r.into_names();
        }
        pipe.finish(&mut |x| {
            if err.is_none() {
                err = f(x, &vols).err();
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        for v in &topts.volumes {
            if vols.get(v).is_none() {
                bail!(
                    "volume `{v}` is not in the trace (volumes: {})",
                    vols.iter().take(20).collect::<Vec<_>>().join(", ")
                );
            }
        }
        Ok((n_in, skipped, vols))
    };

    let compactor = match topts.compact {
        Some(seg) => {
            let mut c = Compactor::new(seg, topts.flatten);
            run_pass(&mut |r, _| {
                c.learn(&r);
                Ok(())
            })?;
            c.finish();
            Some(c)
        }
        None => None,
    };
    let outputs: Vec<PathBuf> = if clients == 1 {
        vec![a.output.clone()]
    } else {
        (0..clients)
            .map(|i| PathBuf::from(format!("{}.{i}", a.output.display())))
            .collect()
    };
    let fmt: OutFormat = a.out_format.into();
    let mut writers: Vec<Option<TraceWriter<Box<dyn Write>>>> =
        outputs.iter().map(|_| None).collect();
    let mut counts = vec![0u64; clients];
    let (n_in, skipped, _vols) = run_pass(&mut |r, names| {
        let r = match &compactor {
            Some(c) => c.map(&r)?,
            None => r,
        };
        let i = client_of(&r, clients, segment);
        if writers[i].is_none() {
            writers[i] = Some(TraceWriter::new(
                create(&outputs[i])?,
                fmt,
                names,
                a.fio_file.clone(),
            )?);
        }
        let w = writers[i].as_mut().expect("created");
        w.sync_names(names);
        w.write(&r)?;
        counts[i] += 1;
        Ok(())
    })?;
    for (i, w) in writers.into_iter().enumerate() {
        match w {
            Some(w) => {
                w.finish()?;
            }
            None => {
                // an empty stream still gets a (valid, empty) file
                TraceWriter::new(create(&outputs[i])?, fmt, &Names::new(), a.fio_file.clone())?
                    .finish()?;
            }
        }
    }
    let summary = TransformSummary {
        records_in: n_in,
        records_out: counts.iter().sum(),
        skipped,
        compacted_bytes: compactor.as_ref().map(|c| c.compacted_bytes()),
        segments: compactor.as_ref().map(|c| c.segments()),
        outputs: outputs.iter().map(|p| p.display().to_string()).collect(),
        per_output: counts,
    };
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
    } else if a.output.as_os_str() != "-" {
        eprintln!(
            "{} records in, {} out{}{}",
            summary.records_in,
            summary.records_out,
            summary
                .compacted_bytes
                .map(|b| format!(", compacted address space {} MiB", b >> 20))
                .unwrap_or_default(),
            if skipped > 0 {
                format!(", {skipped} malformed line(s) skipped")
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

// ------------------------------------------------------------------------------------- synth

fn targets_from_args(a: &SynthArgs, base: Option<&Preset>) -> Result<Option<Generator>> {
    let custom = a.writes.is_some()
        || a.avg_write_size.is_some()
        || a.random_pct.is_some()
        || a.wss.is_some()
        || a.updated_wss_pct.is_some()
        || a.update_writes_pct.is_some()
        || a.read_pct.is_some()
        || a.zipf.is_some()
        || a.duration.is_some()
        || a.files.is_some()
        || a.updated_files_pct.is_some();
    if !custom {
        return Ok(base.map(|p| p.generator.clone()));
    }
    let mut t = match base.map(|p| &p.generator) {
        Some(Generator::Targets(t)) => t.clone(),
        Some(_) => bail!("target flags only apply to target presets (not iozone / ycsb patterns)"),
        None => Targets {
            name: "synth".into(),
            writes: a
                .writes
                .ok_or_else(|| anyhow::anyhow!("--writes is required without --preset"))?,
            avg_write_size: 8192.0,
            random_pct: 75.0,
            wss_bytes: crate::util::parse_size(
                a.wss
                    .as_deref()
                    .ok_or_else(|| anyhow::anyhow!("--wss is required without --preset"))?,
            )?,
            updated_wss_pct: 50.0,
            update_writes_pct: 90.0,
            read_pct: 30.0,
            zipf: 0.9,
            duration_s: 3600.0,
            files: None,
        },
    };
    if let Some(v) = a.writes {
        t.writes = v;
    }
    if let Some(v) = &a.avg_write_size {
        t.avg_write_size = crate::util::parse_size(v)? as f64;
    }
    if let Some(v) = a.random_pct {
        t.random_pct = v;
    }
    if let Some(v) = &a.wss {
        t.wss_bytes = crate::util::parse_size(v)? / 4096 * 4096;
    }
    if let Some(v) = a.updated_wss_pct {
        t.updated_wss_pct = v;
    }
    if let Some(v) = a.update_writes_pct {
        t.update_writes_pct = v;
    }
    if let Some(v) = a.read_pct {
        t.read_pct = v;
    }
    if let Some(v) = a.zipf {
        t.zipf = v;
    }
    if let Some(v) = a.duration {
        t.duration_s = v;
    }
    if a.files.is_some() || a.updated_files_pct.is_some() {
        let prev = t.files.clone().unwrap_or(FileTargets {
            files: 1000,
            updated_files_pct: 10.0,
        });
        t.files = Some(FileTargets {
            files: a.files.unwrap_or(prev.files),
            updated_files_pct: a.updated_files_pct.unwrap_or(prev.updated_files_pct),
        });
    }
    Ok(Some(Generator::Targets(t)))
}

#[derive(serde::Serialize)]
struct SynthSummary {
    preset: Option<String>,
    generator: Generator,
    scale: f64,
    seed: u64,
    records: u64,
    output: Option<String>,
    checks: Option<Vec<ecstack_trace::synth::Check>>,
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
    let Some(generator) = targets_from_args(&a, base.as_ref())? else {
        bail!("give --preset NAME (see --list) or targets (--writes, --wss, …)");
    };
    let p = Preset {
        name: a.preset.clone().unwrap_or_else(|| "custom".into()),
        source: String::new(),
        generator: generator.clone(),
    };
    let stream = SynthStream::new(&generator, a.scale, a.seed)?;
    let volumes = stream.volumes().clone();
    let file_trace = matches!(&generator, Generator::Targets(t) if t.files.is_some());
    let fmt: OutFormat = match a.out_format {
        Some(f) => f.into(),
        None if file_trace => OutFormat::Nfs,
        None => OutFormat::Msr,
    };
    if file_trace && !matches!(fmt, OutFormat::Nfs) {
        bail!("a file trace (files target) can only be written as --out-format nfs");
    }
    if a.output.is_none() && !a.verify {
        bail!("give -o OUT (or --verify to only check the targets)");
    }
    let mut writer = match &a.output {
        Some(p) => Some(TraceWriter::new(create(p)?, fmt, &volumes, None)?),
        None => None,
    };
    let mut analyzer = a.verify.then(|| {
        ecstack_trace::Analyzer::new(AnalyzeOptions {
            reuse_cdf: false,
            ..Default::default()
        })
    });
    let pb = spinner("synthesizing");
    let mut n = 0u64;
    for r in stream {
        if let Some(w) = writer.as_mut() {
            w.write(&r)?;
        }
        if let Some(an) = analyzer.as_mut() {
            an.add(&r);
        }
        n += 1;
        if n & 0xffff == 0 {
            pb.set_position(n);
        }
    }
    pb.finish_and_clear();
    if let Some(w) = writer {
        w.finish()?;
    }
    let checks = analyzer.map(|an| {
        let rep = an.report(&volumes);
        rep.volumes
            .first()
            .map(|v| p.check(v, a.scale, 0.03))
            .unwrap_or_default()
    });
    let failed = checks.as_ref().is_some_and(|c| c.iter().any(|c| !c.ok));
    if a.json {
        let s = SynthSummary {
            preset: a.preset.clone(),
            generator,
            scale: a.scale,
            seed: a.seed,
            records: n,
            output: a.output.as_ref().map(|p| p.display().to_string()),
            checks,
        };
        outln!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        if a.output.as_ref().is_some_and(|o| o.as_os_str() != "-") {
            eprintln!("{n} records written");
        }
        if let Some(cs) = &checks {
            outln!(
                "{:<20} {:>16} {:>16} {:>8}",
                "metric",
                "target",
                "measured",
                "error%"
            );
            for c in cs {
                outln!(
                    "{:<20} {:>16.3} {:>16.3} {:>8.3}{}",
                    c.metric.name(),
                    c.target,
                    c.measured,
                    c.error * 100.0,
                    if c.ok { "" } else { "  OFF" }
                );
            }
        }
    }
    if failed {
        bail!("synthesized trace is more than 3% off a target");
    }
    Ok(())
}

// ------------------------------------------------------------------------------------ replay

fn replay_cmd(a: ReplayArgs) -> Result<()> {
    let (mut records, _vols) = match &a.preset {
        Some(name) => {
            if !a.input.files.is_empty() {
                bail!("give trace files or --preset, not both");
            }
            let t = ecstack_trace::synthesize_preset(name, a.scale, a.seed)?;
            (t.records, t.volumes)
        }
        None => {
            let (r, v, _) = read_records(&a.input)?;
            (r, v)
        }
    };
    if a.writes_only {
        records.retain(|r| r.op == ecstack_trace::Op::Write);
    }
    if a.compact {
        let (r, _) = ecstack_trace::transform::eplog_prepare(
            &records,
            crate::util::parse_size(&a.round)?.max(1),
        );
        records = r;
    } else if records.iter().any(|r| r.file != 0) {
        bail!("a file trace needs --compact to be laid out on a block device");
    }
    if records.is_empty() {
        bail!("the trace has no requests");
    }
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
        outln!(
            "{}: {} requests ({} reads, {} writes) by {} client(s) in {:.3} s",
            rep.device,
            rep.requests,
            rep.reads,
            rep.writes,
            rep.clients,
            rep.elapsed_s
        );
        outln!(
            "{:.0} requests/s, {:.2} MB/s",
            rep.requests_per_s,
            rep.mb_per_s
        );
        for (what, l) in [
            ("all", &rep.latency),
            ("read", &rep.read_latency),
            ("write", &rep.write_latency),
        ] {
            outln!(
                "latency {what:<5} mean {:>9.1} us  p50 {:>9.1}  p90 {:>9.1}  p99 {:>9.1}  p99.9 {:>9.1}  max {:>9.1}",
                l.mean_us, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us
            );
        }
        if rep.prewrite_bytes > 0 {
            outln!(
                "pre-write: {} MiB in {:.3} s",
                rep.prewrite_bytes >> 20,
                rep.prewrite_s
            );
        }
    }
    Ok(())
}
