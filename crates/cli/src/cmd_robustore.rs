//! `ecstack sim robustore`: one configuration of RobuSTore's ch. 6 world (`ecstack_sim::robustore`),
//! its accesses run in virtual time; prints bandwidth, latency spread and I/O overhead.
//! The chapter's sweeps are `ecstack experiment robustore` (ecstack-lab).

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use ecstack_base::parse_size;
use ecstack_sim::robustore::{
    run_point, BgInterval, Config, Op, Rateless, Scheme, Split, TestbedSpec, Variation,
};
use serde_json::json;

use crate::util::print_json;

#[derive(Clone, Copy, ValueEnum)]
enum OpArg {
    Read,
    Write,
    /// A speculative write, then a read of what it left (RobuSTore's unbalanced striping)
    ReadAfterWrite,
}

/// RRAID-A's halving unit (§6.2.1)
#[derive(Clone, Copy, ValueEnum)]
enum SplitArg {
    /// Whole blocks; the block a disk is reading stays with it
    Block,
    /// Bytes, to the 512-byte sector
    Sector,
}

impl SplitArg {
    fn split(self) -> Split {
        match self {
            SplitArg::Block => Split::Block,
            SplitArg::Sector => Split::Sector,
        }
    }
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum CodeArg {
    Lt,
    Raptorq,
}

#[derive(Args)]
pub struct RobustoreArgs {
    /// RAID-0, RRAID-S, RRAID-A or RobuSTore
    #[arg(long, default_value = "RobuSTore")]
    scheme: String,
    #[arg(long, value_enum, default_value = "read")]
    op: OpArg,
    /// Disks one access uses (of --total-disks)
    #[arg(long, default_value_t = 64)]
    disks: usize,
    #[arg(long, default_value_t = 128)]
    total_disks: usize,
    #[arg(long, default_value_t = 8)]
    disks_per_filer: usize,
    /// Size of the data object each access reads or writes
    #[arg(long, default_value = "1G")]
    size: String,
    #[arg(long, default_value = "1M")]
    block_size: String,
    /// Data redundancy D = N/K - 1 (default: 3, RAID-0: 0)
    #[arg(long)]
    redundancy: Option<f64>,
    /// Client-filer round trip, ms
    #[arg(long, default_value_t = 1.0)]
    rtt_ms: f64,
    /// Competitive workloads: every disk gets a background stream with this mean interval (ms) and
    /// the homogeneous fast layout; without it, in-disk layouts vary (Table 6-1 cells)
    #[arg(long, conflicts_with = "bg_random")]
    bg_interval_ms: Option<f64>,
    /// Competitive workloads with each disk's interval drawn per access, uniform on LO,HI ms
    #[arg(long, value_delimiter = ',')]
    bg_random: Option<Vec<f64>>,
    /// Fixed per-disk rates instead: a comma-separated list of MB/s (MB = 2^20 bytes), one per disk,
    /// or @FILE, a testbed JSON ({"version": 1, "disks": [{"mbps": 53, "delay_ms": 0}, ...]}, as
    /// `ecstack experiment robustore-cluster` writes it). Each disk transfers at its rate with no
    /// positioning or overhead; delay_ms adds to its round trip. The list is the pool each access
    /// draws its --disks from (--total-disks is not used)
    #[arg(long, value_name = "LIST|@FILE", conflicts_with_all = ["bg_interval_ms", "bg_random"])]
    disk_mbps: Option<String>,
    /// Filer caches on (2 GB, 4-way, 4 KiB lines unless set)
    #[arg(long)]
    cache: bool,
    #[arg(long, default_value = "2G")]
    cache_size: String,
    /// With --cache: accesses pick one of this many objects
    #[arg(long, default_value_t = 8)]
    objects: usize,
    #[arg(long, value_enum, default_value = "lt")]
    code: CodeArg,
    /// LT robust-soliton C
    #[arg(long, default_value_t = 1.0)]
    lt_c: f64,
    /// LT robust-soliton δ
    #[arg(long, default_value_t = 0.5)]
    lt_delta: f64,
    /// How RRAID-A halves a slow disk's unreceived data
    #[arg(long, value_enum, default_value = "block")]
    rraid_a_split: SplitArg,
    /// Accesses (the seed's points average 100)
    #[arg(long, default_value_t = 100)]
    accesses: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also print every access
    #[arg(long)]
    each: bool,
    /// Print one JSON object instead of text
    #[arg(long)]
    json: bool,
}

fn size(flag: &str, s: &str) -> Result<u64> {
    parse_size(s).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
}

pub fn run(a: RobustoreArgs) -> Result<()> {
    let Some(scheme) = Scheme::parse(&a.scheme) else {
        bail!(
            "--scheme: unknown scheme {:?} (RAID-0, RRAID-S, RRAID-A, RobuSTore)",
            a.scheme
        );
    };
    let base = Config::baseline(scheme);
    if a.bg_random.as_ref().is_some_and(|v| v.len() != 2) {
        bail!("--bg-random: expected LO,HI in ms, e.g. 6,200");
    }
    let variation = match (&a.disk_mbps, &a.bg_interval_ms, &a.bg_random) {
        (Some(list), _, _) => {
            Variation::Fixed(TestbedSpec::parse_arg(list).map_err(|e| anyhow::anyhow!("--{e}"))?)
        }
        (None, Some(x), _) => Variation::Background(BgInterval::Fixed(x / 1e3)),
        (None, None, Some(v)) => Variation::Background(BgInterval::Uniform {
            lo: v[0] / 1e3,
            hi: v[1] / 1e3,
        }),
        (None, None, None) => Variation::Layout,
    };
    let cfg = Config {
        op: match a.op {
            OpArg::Read => Op::Read,
            OpArg::Write => Op::Write,
            OpArg::ReadAfterWrite => Op::ReadAfterWrite,
        },
        disks: a.disks,
        total_disks: a.total_disks,
        disks_per_filer: a.disks_per_filer,
        data_bytes: size("size", &a.size)?,
        block_bytes: size("block-size", &a.block_size)?,
        redundancy: a.redundancy.unwrap_or(base.redundancy),
        rtt: a.rtt_ms / 1e3,
        variation,
        cache: a.cache,
        cache_bytes: size("cache-size", &a.cache_size)?,
        objects: a.objects,
        code: match a.code {
            CodeArg::Lt => Rateless::Lt {
                c: a.lt_c,
                delta: a.lt_delta,
            },
            CodeArg::Raptorq => Rateless::RaptorQ,
        },
        rraid_a_split: a.rraid_a_split.split(),
        accesses: a.accesses,
        seed: a.seed,
        ..base
    };
    let (p, all) = run_point(&cfg).map_err(|e| anyhow::anyhow!("--{e}"))?;
    if a.json {
        let mut v = json!({ "config": cfg, "result": p });
        if a.each {
            v["accesses"] = json!(all);
        }
        return print_json(&v);
    }
    println!(
        "{} {:?}: {} of {} disks, {} in {} blocks, D = {}, RTT {} ms, {} accesses",
        scheme,
        cfg.op,
        cfg.disks,
        cfg.pool(),
        ecstack_base::fmt_size(cfg.data_bytes),
        ecstack_base::fmt_size(cfg.block_bytes),
        cfg.redundancy,
        a.rtt_ms,
        cfg.accesses
    );
    println!(
        "  bandwidth        {:10.1} MB/s (mean over accesses)",
        p.bandwidth_mbps
    );
    println!(
        "  latency          {:10.3} s mean, {:.3} s stddev",
        p.latency_mean_s, p.latency_std_s
    );
    println!(
        "  I/O overhead     {:10.3} (network bytes / size - 1)",
        p.io_overhead
    );
    println!("  disk overhead    {:10.3}", p.disk_overhead);
    if let Some(r) = p.reception_overhead {
        println!("  reception ovh.   {r:10.3} (coded blocks to decode / K - 1)");
    }
    if p.bg_utilization > 0.0 {
        println!("  bg utilization   {:10.3}", p.bg_utilization);
    }
    if a.each {
        for (i, r) in all.iter().enumerate() {
            println!(
                "  access {i:3}: {:.3} s, net {} B, disk {} B",
                r.latency, r.net_bytes, r.disk_bytes
            );
        }
    }
    Ok(())
}

/// `ecstack experiment robustore`: the chapter's sweeps (ecstack_lab::robustore).
#[derive(Args)]
pub struct RobustoreExpArgs {
    /// Figures to regenerate (6-5 .. 6-36; any figure selects its experiment), or `all`
    #[arg(long, value_delimiter = ',', default_value = "all")]
    fig: Vec<String>,
    /// Output directory (CSV, SVG, report.md)
    #[arg(short = 'o', long, default_value = "robustore-results")]
    out: std::path::PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// CI scale: 64 MB objects, 3 points per sweep, 4 accesses per point
    #[arg(long)]
    quick: bool,
    /// Accesses per point (default 100, quick 4)
    #[arg(long)]
    accesses: Option<usize>,
    /// Worker threads (default: all cores)
    #[arg(long)]
    threads: Option<usize>,
    /// Run only jobs i, i+N, ... and write rows-shard-i-of-N.csv (then --merge)
    #[arg(long)]
    shard: Option<String>,
    /// Gather the shard files in this directory and render figures and report
    #[arg(long, conflicts_with_all = ["shard", "quick"])]
    merge: Option<std::path::PathBuf>,
    /// RobuSTore's rateless code: lt (the seed's, C = 1, δ = 0.5) or raptorq (the codes layer's
    /// RFC 6330 code; symbols needed sampled from its real decodes)
    #[arg(long, value_enum, default_value = "lt")]
    code: CodeArg,
    /// How RRAID-A halves a slow disk's unreceived data
    #[arg(long, value_enum, default_value = "block")]
    rraid_a_split: SplitArg,
    /// Print the files written as a JSON array
    #[arg(long)]
    json: bool,
}

pub fn experiment(a: RobustoreExpArgs) -> Result<()> {
    use ecstack_lab::robustore::{merge, run, RobustoreConfig};
    use ecstack_lab::LabError;
    let flag = |e: LabError| match e {
        LabError::Config { field, msg } => anyhow::anyhow!("--{field}: {msg}"),
        other => other.into(),
    };
    let files = if let Some(dir) = &a.merge {
        merge(dir).map_err(flag)?
    } else {
        let cfg = RobustoreConfig {
            groups: RobustoreConfig::parse_figs(&a.fig).map_err(flag)?,
            out: a.out.clone(),
            seed: a.seed,
            quick: a.quick,
            accesses: a.accesses,
            threads: a
                .threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            shard: a
                .shard
                .as_deref()
                .map(RobustoreConfig::parse_shard)
                .transpose()
                .map_err(flag)?,
            code: match a.code {
                CodeArg::Lt => Rateless::Lt { c: 1.0, delta: 0.5 },
                CodeArg::Raptorq => Rateless::RaptorQ,
            },
            rraid_a_split: a.rraid_a_split.split(),
        };
        crate::scratch::announce(
            "experiment robustore",
            &[&cfg.out],
            if cfg.quick {
                "about a minute (--quick)"
            } else {
                "tens of minutes per figure group on all cores (--shard i/N spreads it)"
            },
        );
        let start = std::time::Instant::now();
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let progress = move |done: usize, total: usize| {
            if tty {
                eprint!("\r{done}/{total} points");
            }
        };
        let files = run(&cfg, &progress).map_err(flag)?;
        if tty {
            eprintln!();
        }
        eprintln!(
            "{} in {:.1} s",
            cfg.out.display(),
            start.elapsed().as_secs_f64()
        );
        files
    };
    if a.json {
        return crate::util::print_json(&files);
    }
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}

/// `ecstack experiment robustore-cluster` (ecstack_lab::robustore::cluster).
#[derive(Args)]
pub struct RobustoreClusterArgs {
    /// Output directory (report.md, results.csv, bandwidth.svg, testbed.json, the cluster)
    #[arg(short = 'o', long, default_value = "robustore-cluster-results")]
    out: std::path::PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// CI scale: 3 accesses of 2 MiB files
    #[arg(long)]
    quick: bool,
    /// Accesses (default 20, quick 3)
    #[arg(long)]
    accesses: Option<usize>,
    /// Bytes per file (default 8M, quick 2M)
    #[arg(long, value_parser = ecstack_base::parse_size)]
    file_size: Option<u64>,
    /// Coded block size of the robust files
    #[arg(long, default_value = "256K", value_parser = ecstack_base::parse_size)]
    block_size: u64,
    /// Redundancy D of the robust files
    #[arg(long, default_value_t = 3.0)]
    redundancy: f64,
    /// Table 6-1's rates (0.52-53 MB/s) times this, for the 16 OSDs' stores
    #[arg(long, default_value_t = 0.5)]
    scale: f64,
    /// Skip the point with Poisson background load (not run with --quick either)
    #[arg(long)]
    no_background: bool,
    /// How busy the background reads keep each OSD's store (0.01-0.99)
    #[arg(long, default_value_t = 0.5)]
    background_busy: f64,
    /// Print the files written as a JSON array
    #[arg(long)]
    json: bool,
}

pub fn cluster_experiment(a: RobustoreClusterArgs) -> Result<()> {
    use ecstack_lab::robustore::cluster::{run, ClusterExpConfig};
    use ecstack_lab::LabError;
    let exe = std::env::current_exe()?;
    let mut cfg = ClusterExpConfig::new(exe, a.out.clone());
    cfg.seed = a.seed;
    cfg.quick = a.quick;
    cfg.accesses = a.accesses;
    cfg.file_bytes = a.file_size;
    cfg.block_bytes = u32::try_from(a.block_size)
        .map_err(|_| anyhow::anyhow!("--block-size {} is too large", a.block_size))?;
    cfg.redundancy = a.redundancy;
    cfg.scale = a.scale;
    cfg.background = !a.no_background;
    cfg.background_busy = a.background_busy;
    crate::scratch::announce(
        "experiment robustore-cluster",
        &[&cfg.out],
        if cfg.quick {
            "about a minute (--quick)"
        } else {
            "about ten minutes"
        },
    );
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let progress = move |done: usize, total: usize| {
        if tty {
            eprint!("\r{done}/{total} accesses");
        }
    };
    let files = run(&cfg, &progress).map_err(|e| match e {
        LabError::Config { field, msg } => anyhow::anyhow!("--{field}: {msg}"),
        other => other.into(),
    })?;
    if tty {
        eprintln!();
    }
    if a.json {
        return crate::util::print_json(&files);
    }
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}
