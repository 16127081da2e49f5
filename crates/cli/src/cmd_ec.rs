//! `ecstack ec`: erasure-code files into shard files and back.

use crate::util::{fmt_size, parse_size, print_json, progress_bar};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use ecstack_codes::shard::{self, EncodeOptions};
use ecstack_codes::CodeKind;
use ecstack_lab::ec_demo::gbps;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct EcArgs {
    #[command(subcommand)]
    cmd: EcCmd,
}

#[derive(Subcommand)]
enum EcCmd {
    /// Split a file into k data + m parity shard files (`<file>.<index>.shard`)
    Encode(EncodeArgs),
    /// Rebuild a file from any k of its shard files (corrupt or foreign shards are detected and skipped)
    Decode(DecodeArgs),
    /// Print a shard file's header
    Info(InfoArgs),
    /// End-to-end demonstration: generate a file, encode it, lose m shards, decode, verify, report speed
    Demo(DemoArgs),
}

#[derive(Args, Clone)]
struct CodeOpts {
    /// Code: rs-cauchy (ISA-L compatible), rs-vand (Vandermonde-derived), xor (RAID-5, m=1), raid6 (m=2),
    /// rdp (m=2; the unit is a multiple of p - 1, p the smallest prime >= k + 1) [default: by m: xor
    /// for 1, raid6 for 2, rs-cauchy for 3 or more]
    #[arg(long)]
    code: Option<String>,
    /// Data shards
    #[arg(short, long, default_value_t = 10)]
    k: usize,
    /// Parity shards (failures tolerated)
    #[arg(short, long, default_value_t = 4)]
    m: usize,
    /// Shard unit (bytes per shard per stripe, e.g. 64K, 1M); default: min(1 MiB, file/k)
    #[arg(long)]
    unit: Option<String>,
}

impl CodeOpts {
    fn to_options(&self) -> Result<EncodeOptions> {
        Ok(EncodeOptions {
            code: match &self.code {
                Some(c) => CodeKind::parse(c)?,
                None => CodeKind::default_for_parity(self.m),
            },
            k: self.k,
            m: self.m,
            unit: self
                .unit
                .as_deref()
                .map(parse_size)
                .transpose()?
                .map(|u| u as usize),
            set_id: None,
        })
    }
}

#[derive(Args)]
struct EncodeArgs {
    /// The file to encode
    input: PathBuf,
    /// Directory for the shard files (default: next to the input)
    #[arg(short = 'o', long = "out", alias = "out-dir", value_name = "DIR")]
    out_dir: Option<PathBuf>,
    #[command(flatten)]
    code: CodeOpts,
    /// Print a JSON report
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct DecodeArgs {
    /// Shard files (any k of one encoding; extra or damaged ones are fine)
    #[arg(required = true)]
    shards: Vec<PathBuf>,
    /// Where to write the rebuilt file (written to <out>.partial, renamed when verified)
    #[arg(short = 'o', long = "out", alias = "output", value_name = "FILE")]
    output: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct InfoArgs {
    shard: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct DemoArgs {
    /// Size of the generated file
    #[arg(long, default_value = "256M")]
    size: String,
    #[command(flatten)]
    code: CodeOpts,
    /// Work directory (default: a temporary directory, removed afterwards)
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seed for the generated data and the choice of lost shards
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

pub fn run(a: EcArgs) -> Result<()> {
    match a.cmd {
        EcCmd::Encode(e) => encode(e),
        EcCmd::Decode(d) => decode(d),
        EcCmd::Info(i) => info(i),
        EcCmd::Demo(d) => demo(d),
    }
}

fn encode_with_bar(input: &Path, dir: &Path, opts: &EncodeOptions) -> Result<shard::Report> {
    let total = std::fs::metadata(input)
        .with_context(|| format!("{}", input.display()))?
        .len();
    let pb = progress_bar(total, "encode");
    let r = shard::encode_file_with_progress(input, dir, opts, &mut |d, _| pb.set_position(d));
    pb.finish_and_clear();
    Ok(r?)
}

fn decode_with_bar(shards: &[PathBuf], out: &Path) -> Result<shard::Report> {
    let pb = progress_bar(0, "decode");
    let r = shard::decode_files_with_progress(shards, out, &mut |d, t| {
        pb.set_length(t);
        pb.set_position(d)
    });
    pb.finish_and_clear();
    Ok(r?)
}

fn encode(a: EncodeArgs) -> Result<()> {
    let opts = a.code.to_options()?;
    let dir = match a.out_dir {
        Some(d) => d,
        None => a
            .input
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(".")),
    };
    let r = encode_with_bar(&a.input, &dir, &opts)?;
    if a.json {
        return print_json(&serde_json::json!({
            "input": a.input, "code": opts.code, "k": opts.k, "m": opts.m, "unit": r.unit,
            "bytes": r.bytes, "stripes": r.stripes, "shards": r.shards,
            "coding_gbps": gbps(r.bytes, r.coding_seconds), "total_seconds": r.total_seconds,
        }));
    }
    println!(
        "encoded {} ({}) into {}+{} {} shards of unit {} in {}",
        a.input.display(),
        fmt_size(r.bytes),
        opts.k,
        opts.m,
        opts.code,
        fmt_size(r.unit as u64),
        dir.display()
    );
    println!(
        "coding {:.2} GB/s, total {:.2} s ({:.2} GB/s with I/O)",
        gbps(r.bytes, r.coding_seconds),
        r.total_seconds,
        gbps(r.bytes, r.total_seconds)
    );
    Ok(())
}

/// The shard indices of one set among `paths` (the set of the first readable header): (k, m, the
/// indices present, the indices missing).
fn shard_census(paths: &[PathBuf]) -> Option<(u16, u16, Vec<u16>, Vec<u16>)> {
    let headers: Vec<shard::ShardHeader> = paths
        .iter()
        .filter_map(|p| shard::read_header(p).ok())
        .collect();
    let first = headers.first()?;
    let mut present: Vec<u16> = headers
        .iter()
        .filter(|h| h.set_id == first.set_id)
        .map(|h| h.index)
        .collect();
    present.sort_unstable();
    present.dedup();
    let n = first.k.saturating_add(first.m);
    let missing = (0..n).filter(|i| !present.contains(i)).collect();
    Some((first.k, first.m, present, missing))
}

fn list(v: &[u16]) -> String {
    v.iter().map(u16::to_string).collect::<Vec<_>>().join(", ")
}

fn decode(a: DecodeArgs) -> Result<()> {
    let r = match decode_with_bar(&a.shards, &a.output) {
        Ok(r) => r,
        Err(e) => match shard_census(&a.shards) {
            Some((k, m, present, missing)) if !missing.is_empty() => {
                return Err(e.context(format!(
                    "shards missing: {} of {}+{} (given: {})",
                    list(&missing),
                    k,
                    m,
                    list(&present)
                )))
            }
            _ => return Err(e),
        },
    };
    // Missing: not given, or unreadable (a given shard the decoder did not need is not missing).
    let census = shard_census(&a.shards);
    let missing = census.map(|c| c.3).unwrap_or_default();
    if a.json {
        return print_json(&serde_json::json!({
            "output": a.output, "bytes": r.bytes, "used": r.shards, "rejected": r.rejected,
            "missing": missing,
            "coding_gbps": gbps(r.bytes, r.coding_seconds), "total_seconds": r.total_seconds,
        }));
    }
    for x in &r.rejected {
        eprintln!("warning: {x}");
    }
    if !missing.is_empty() {
        println!(
            "shards missing: {} (decoded from {} others)",
            list(&missing),
            r.shards.len()
        );
    }
    println!(
        "rebuilt {} ({}) and verified its checksum; coding {:.2} GB/s, total {:.2} s",
        a.output.display(),
        fmt_size(r.bytes),
        gbps(r.bytes, r.coding_seconds),
        r.total_seconds
    );
    Ok(())
}

fn info(a: InfoArgs) -> Result<()> {
    let h = shard::read_header(&a.shard)?;
    if a.json {
        // The code by its CLI name (`rs-cauchy`), as every other report names it.
        return print_json(&serde_json::json!({
            "code": h.code.name(),
            "k": h.k,
            "m": h.m,
            "index": h.index,
            "unit": h.unit,
            "length": h.length,
            "stripes": h.stripes(),
            "set_id": h.set_id,
            "data_crc": h.data_crc,
        }));
    }
    println!(
        "{}: {} k={} m={} index={} unit={} length={} stripes={} set={:016x} crc={:08x}",
        a.shard.display(),
        h.code,
        h.k,
        h.m,
        h.index,
        h.unit,
        h.length,
        h.stripes(),
        h.set_id,
        h.data_crc
    );
    Ok(())
}

fn demo(a: DemoArgs) -> Result<()> {
    use ecstack_lab::ec_demo::{run, DemoEvent, EcDemoConfig};
    let size = parse_size(&a.size)?;
    let opts = a.code.to_options()?;
    let tmp;
    let dir = match &a.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("{}", d.display()))?;
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir().context("creating a temporary directory")?;
            tmp.path().to_path_buf()
        }
    };
    let c = EcDemoConfig {
        bytes: size,
        options: opts.clone(),
        dir,
        seed: a.seed,
    };
    let json = a.json;
    let mut pb = indicatif::ProgressBar::hidden();
    let r = run(&c, &mut |e| match e {
        DemoEvent::Generating { input } if !json => println!(
            "1. generating {} of pseudo-random data in {}",
            fmt_size(size),
            input.display()
        ),
        DemoEvent::Encoding { total } => {
            if !json {
                println!(
                    "2. encoding with {} k={} m={} (kernels: {})",
                    opts.code,
                    opts.k,
                    opts.m,
                    ecstack_codes::Simd::active().name()
                );
            }
            pb = progress_bar(total, "encode");
        }
        DemoEvent::EncodeAt(d) => pb.set_position(d),
        DemoEvent::Deleted { lost } if !json => {
            println!("3. deleted {} shard files: indices {:?}", lost.len(), lost)
        }
        DemoEvent::Decoding => pb = progress_bar(0, "decode"),
        DemoEvent::DecodeAt { done, total } => {
            pb.set_length(total);
            pb.set_position(done)
        }
        DemoEvent::EncodeDone | DemoEvent::DecodeDone => pb.finish_and_clear(),
        _ => {}
    })?;
    if a.json {
        return print_json(&r.to_json());
    }
    print!("{}", r.text());
    Ok(())
}
