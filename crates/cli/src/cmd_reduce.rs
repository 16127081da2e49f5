//! `ecstack reduce`: TreeChunks (seed ch. 3) — what compression and deduplication would save on a file
//! tree. Argument parsing only; the work is in `ecstack_reduce` (docs/reduce.md).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use ecstack_reduce::{AnalyzeOptions, Config, ReportOptions, Shard};

use crate::util::print_json;

#[derive(Args)]
pub struct ReduceArgs {
    #[command(subcommand)]
    cmd: ReduceCmd,
}

#[derive(Subcommand)]
enum ReduceCmd {
    /// Read every file under ROOT once and measure each compression and dedup configuration on it
    Analyze(AnalyzeArgs),
    /// Aggregate a results directory: per configuration, per extension, per directory, with estimates
    Report(ReportArgs),
    /// Combine the results of `analyze --shard i/N` (all N shards) into the single-machine result
    Merge(MergeArgs),
    /// Our dedup and compression figures beside borg's, restic's and the compressor CLIs' on one tree
    Anchors(AnchorsArgs),
}

#[derive(Args)]
struct AnchorsArgs {
    /// The tree
    root: PathBuf,
    /// Scratch directory to create (our results, the borg and restic repositories); removed at the end
    #[arg(long)]
    work: Option<PathBuf>,
    /// Keep the scratch directory
    #[arg(long)]
    keep: bool,
    /// Block size of borg's fixed chunker and our static segmentation
    #[arg(long, default_value = "64K")]
    static_size: String,
    /// Workers of our analysis and threads running the compressor CLIs (default: the number of cores)
    #[arg(short, long)]
    workers: Option<usize>,
    /// A missing tool (borg, restic, gzip, lz4, zstd) is an error, not a note
    #[arg(long)]
    require_tools: bool,
    /// Leave out the compressor CLIs (one process per file and tool: slow on trees of many files)
    #[arg(long)]
    no_cli: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct AnalyzeArgs {
    /// The tree to analyse
    root: PathBuf,
    /// The results directory to create
    #[arg(short, long)]
    out: PathBuf,
    /// TOML configuration (workers, compression, dedup, follow_symlinks, index_memory_bytes); re-read
    /// while running: changing `workers` in it throttles the analysis live
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// Compression configurations, replacing the file's: ALGO[:LEVEL]@SIZE[,SIZE...] (zlib:6@16K,128K,
    /// deflate:9@128K, lz4@64K, zstd:3@128K)
    #[arg(long = "compress", value_name = "SPEC")]
    compress: Vec<String>,
    /// Dedup configurations, replacing the file's: whole[:FP], static:SIZE[:FP], fastcdc:AVG[-MIN-MAX][:FP],
    /// rabin:AVG[-MIN-MAX][-wWINDOW][:FP]; FP sha1 | sha256 | blake3
    #[arg(long = "dedup", value_name = "SPEC")]
    dedup: Vec<String>,
    /// Measure no compression (only dedup)
    #[arg(long)]
    no_compress: bool,
    /// Measure no dedup (only compression)
    #[arg(long)]
    no_dedup: bool,
    /// Worker threads taking files (default: the configuration's, else the number of cores)
    #[arg(short, long)]
    workers: Option<usize>,
    /// Threads started (the most `workers` can be raised to while running; default max(workers, cores))
    #[arg(long)]
    workers_max: Option<usize>,
    /// Follow symbolic links (loops are detected and counted)
    #[arg(long)]
    follow_symlinks: bool,
    /// Analyse only shard i of N (files split by a hash of their path); combine with `reduce merge`
    #[arg(long)]
    shard: Option<Shard>,
    /// Analyse only this fraction of the files (chosen by a hash of their path) for a first answer
    #[arg(long, default_value_t = 1.0)]
    sample: f64,
    /// Bytes-weighted sample instead: one sample point every SIZE bytes of the tree (e.g. 64M); a file
    /// is analysed when a point falls in it (probability min(1, size / SIZE): files of SIZE or more always)
    #[arg(long, value_name = "SIZE", value_parser = ecstack_base::parse_size)]
    sample_bytes: Option<u64>,
    /// Print the summary as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ReportArgs {
    /// A results directory (from analyze or merge)
    results: PathBuf,
    /// Rows in the per-extension and per-directory tables
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// File sample for the estimate printed beside each exact figure (0 = none)
    #[arg(long, default_value_t = 0.05)]
    estimate_fraction: f64,
    /// Also write the tree picture (directories sized by class, coloured by savings) as one HTML file
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Directories drawn in the HTML picture (the largest, with their ancestors)
    #[arg(long, default_value_t = 2000)]
    html_nodes: usize,
    /// Anonymised export: no root, directories as salted BLAKE3 hashes of their paths, extension stats kept
    #[arg(long, value_name = "SALT")]
    anonymize: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct MergeArgs {
    /// The shards' results directories
    #[arg(required = true)]
    shards: Vec<PathBuf>,
    /// The merged results directory to create
    #[arg(short, long)]
    out: PathBuf,
    #[arg(long)]
    json: bool,
}

pub fn run(a: ReduceArgs) -> Result<()> {
    match a.cmd {
        ReduceCmd::Analyze(a) => analyze(a),
        ReduceCmd::Report(a) => {
            if !(0.0..=1.0).contains(&a.estimate_fraction) {
                bail!("--estimate-fraction is in [0, 1]");
            }
            if let Some(h) = &a.html {
                let n = ecstack_reduce::html::write_html(&a.results, h, a.html_nodes)?;
                eprintln!("tree picture: {} ({n} directories)", h.display());
            }
            let r = ecstack_reduce::report(
                &a.results,
                &ReportOptions {
                    top: a.top,
                    estimate_fraction: a.estimate_fraction,
                },
            )?;
            if a.json {
                print_json(&r)
            } else {
                print!("{}", r.to_text());
                Ok(())
            }
        }
        ReduceCmd::Anchors(a) => anchors(a),
        ReduceCmd::Merge(a) => {
            let m = ecstack_reduce::merge(&a.out, &a.shards)?;
            if a.json {
                print_json(&m)
            } else {
                println!(
                    "merged {} shards into {}: {} files, {} bytes",
                    a.shards.len(),
                    a.out.display(),
                    m.files,
                    m.bytes
                );
                Ok(())
            }
        }
    }
}

fn analyze(a: AnalyzeArgs) -> Result<()> {
    let mut config = match &a.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    if !a.compress.is_empty() {
        config.compression = a.compress.clone();
    }
    if !a.dedup.is_empty() {
        config.dedup = a.dedup.clone();
    }
    if a.no_compress {
        config.compression.clear();
    }
    if a.no_dedup {
        config.dedup.clear();
    }
    if let Some(w) = a.workers {
        config.workers = w;
    }
    config.follow_symlinks |= a.follow_symlinks;
    let opts = AnalyzeOptions {
        root: a.root,
        out: a.out,
        config,
        config_path: a.config,
        workers_max: a.workers_max,
        shard: a.shard,
        sample_fraction: a.sample,
        sample_bytes: a.sample_bytes,
        progress: !a.json && std::io::stderr().is_terminal(),
    };
    if opts.config_path.is_some() {
        // SIGHUP re-reads the configuration file at once (docs/reduce.md).
        crate::signals::on_hangup(ecstack_reduce::reload_config)?;
    }
    let s = ecstack_reduce::analyze(&opts)?;
    if a.json {
        return print_json(&s);
    }
    let m = &s.manifest;
    println!(
        "{} files, {} bytes analysed in {:.2} s ({:.1} MB/s) → {}",
        m.files,
        m.bytes,
        m.wall_seconds,
        s.bytes_per_second / 1e6,
        s.results
    );
    if !m.problems.is_empty() {
        let p: Vec<String> = m.problems.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("problems (counted, never fatal): {}", p.join(", "));
    }
    println!("report: ecstack reduce report {}", s.results);
    Ok(())
}

fn anchors(a: AnchorsArgs) -> Result<()> {
    let static_bytes = ecstack_base::parse_size(&a.static_size)
        .map_err(|e| anyhow::anyhow!("--static-size: {e}"))?;
    let workers = a.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let work = a.work.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("ecstack-anchors-{}", std::process::id()))
    });
    let r = ecstack_reduce::anchors::anchors(&ecstack_reduce::anchors::AnchorOptions {
        root: a.root,
        work,
        keep: a.keep,
        static_bytes,
        workers,
        require_tools: a.require_tools,
        no_cli: a.no_cli,
    })?;
    if a.json {
        print_json(&r)
    } else {
        print!("{}", r.to_text());
        Ok(())
    }
}
