//! `ecstack sim zombienand`: one ZombieNAND lifetime to death (progress, `--json`, checkpoint/resume).
//! `ecstack experiment zombienand`: the §4.4.3 synthetic grid (parallel, `--shard i/N`, `--merge`),
//! or with `--trace-driven` the §4.4.4 trace-driven runs.
//! Argument parsing only: the work is in `ecstack_lab::zombienand` and `ecstack_device::sim`.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use ecstack_device::{CellMode, DeathRule, LifeAverage, WearPhysics};
use ecstack_lab::zombienand::grid::{self, GridConfig};
use ecstack_lab::zombienand::life::{
    mode_label, run_lifetime, Checkpoint, Drive, LifeConfig, Scheme, Workload, LIFE_THRESHOLD,
};
use ecstack_lab::zombienand::trace::{self as ztrace, TraceRunConfig};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Args)]
pub struct SimZombieArgs {
    /// Drive: `trace` (1 GiB, 4 × 512 blocks × 128 pages of 4 KiB, Table 4.2), `synthetic` (64 MiB,
    /// 128 blocks) or `tiny` (32 blocks × 16 pages)
    #[arg(long, default_value = "trace")]
    drive: String,
    /// Starting cell mode: tlc or mlc
    #[arg(long, default_value = "tlc")]
    mode: String,
    /// Reserved area: fraction of the raw flash hidden from the host (default per drive: 0.10 for
    /// trace and synthetic, 0.30 for tiny)
    #[arg(long)]
    reserve: Option<f64>,
    /// `zombie` (bit-mode fallback + wear-unleveling) or `baseline` (unswitching)
    #[arg(long, default_value = "zombie")]
    scheme: String,
    /// Death rule: oxide-stress (Algorithm 4), cumulative-counter, per-mode-counter
    #[arg(long, default_value = "oxide-stress")]
    physics: String,
    /// Algorithm 6's LIFE_THRESHOLD (not given by the seed)
    #[arg(long, default_value_t = LIFE_THRESHOLD)]
    life_threshold: f64,
    /// When the drive is dead: `capacity` (spare capacity below the GC high-watermark pool plus the
    /// open block) or `retired-blocks` (more than (R − W) · blocks retired, Eq. 4.1's reading)
    #[arg(long, default_value = "capacity")]
    death_rule: String,
    /// Algorithm 6's avg_life: `group` (normal blocks only) or `element` (every live block)
    #[arg(long, default_value = "group")]
    life_average: String,
    /// Working set: fraction of the logical space the uniform random accesses cover
    #[arg(long, default_value_t = 1.0)]
    working_set: f64,
    /// Probability that an access is a read
    #[arg(long, default_value_t = 0.0)]
    read_share: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Checkpoint file: resumed from when it exists, rewritten every --checkpoint-every seconds
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    #[arg(long, default_value_t = 60.0)]
    checkpoint_every: f64,
    /// Print the report as JSON (with the latency series)
    #[arg(long)]
    json: bool,
}

fn parse_mode(s: &str) -> Result<CellMode> {
    match CellMode::parse(s) {
        Some(m @ (CellMode::Tlc | CellMode::Mlc)) => Ok(m),
        _ => bail!("--mode {s}: expected tlc or mlc (a drive starts in TLC or MLC, §4.3.2)"),
    }
}

fn parse_rules(death_rule: &str, life_average: &str) -> Result<(DeathRule, LifeAverage)> {
    let d = DeathRule::parse(death_rule).with_context(|| {
        format!("--death-rule {death_rule}: expected capacity or retired-blocks")
    })?;
    let a = LifeAverage::parse(life_average)
        .with_context(|| format!("--life-average {life_average}: expected group or element"))?;
    Ok((d, a))
}

fn spinner(what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    if let Ok(st) = ProgressStyle::with_template("{spinner} {elapsed} {msg}") {
        pb.set_style(st);
    }
    pb.set_message(what.to_string());
    pb
}

pub fn run_sim(a: SimZombieArgs) -> Result<()> {
    let drive = Drive::parse(&a.drive)
        .with_context(|| format!("--drive {}: expected trace, synthetic or tiny", a.drive))?;
    let scheme = match a.scheme.as_str() {
        "zombie" => Scheme::Zombie,
        "baseline" => Scheme::Baseline,
        s => bail!("--scheme {s}: expected zombie or baseline"),
    };
    let physics = WearPhysics::parse(&a.physics).with_context(|| {
        format!(
            "--physics {}: expected oxide-stress, cumulative-counter or per-mode-counter",
            a.physics
        )
    })?;
    let (death_rule, average) = parse_rules(&a.death_rule, &a.life_average)?;
    let cfg = LifeConfig {
        death_rule,
        average,
        drive,
        mode: parse_mode(&a.mode)?,
        reserve: a.reserve.unwrap_or(drive.default_reserve()),
        scheme,
        physics,
        life_threshold: a.life_threshold,
        seed: a.seed,
    };
    let w = Workload::Uniform {
        working_set: a.working_set,
        read_share: a.read_share,
    };
    let pb = spinner("zombienand");
    let ck = a.checkpoint.as_deref().map(|path| Checkpoint {
        path,
        every_s: a.checkpoint_every,
    });
    let l = run_lifetime(&cfg, &w, ck, &mut |p| {
        pb.set_message(format!(
            "{} requests, {:.2} GiB written, blocks TLC/MLC/SLC {}/{}/{}, {} retired, {:.1} simulated h",
            p.ops,
            p.host_bytes_written as f64 / (1u64 << 30) as f64,
            p.stats.blocks_tlc,
            p.stats.blocks_mlc,
            p.stats.blocks_slc,
            p.stats.retired_blocks,
            p.stats.modeled_ns as f64 / 3.6e12
        ));
        pb.tick();
    })?;
    pb.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&l)?);
        return Ok(());
    }
    let s = &l.stats;
    println!(
        "ZombieNAND lifetime: {} {} drive, {:.0}% reserve, scheme {:?}, physics {:?}, death rule {}, average {}, workload {}",
        mode_label(cfg.mode),
        a.drive,
        cfg.reserve * 100.0,
        cfg.scheme,
        cfg.physics,
        cfg.death_rule.name(),
        cfg.average.name(),
        l.workload
    );
    println!(
        "  early-switch blocks {}   logical space {:.1} MiB",
        l.early_switch_blocks,
        l.logical_bytes as f64 / (1u64 << 20) as f64
    );
    println!(
        "  lifetime: {:.3} GiB host writes ({:.1} drive writes), {} requests ({} page writes, {} page reads), {:.2} simulated hours",
        l.host_bytes_written as f64 / (1u64 << 30) as f64,
        l.drive_writes,
        l.ops,
        s.host_page_writes,
        s.host_page_reads,
        l.simulated_s / 3600.0
    );
    println!(
        "  mean latency {:.1} µs (writes {:.1}, reads {:.1}); write amplification {:.3}",
        l.mean_latency_us, l.mean_write_latency_us, l.mean_read_latency_us, s.write_amplification
    );
    println!(
        "  erases {} (min {}, mean {:.0}, max {}), mode switches {}, retired {}, blocks TLC/MLC/SLC {}/{}/{}, capacity {} pages",
        s.erases,
        s.erase_min,
        s.erase_mean,
        s.erase_max,
        s.mode_switches,
        s.retired_blocks,
        s.blocks_tlc,
        s.blocks_mlc,
        s.blocks_slc,
        s.capacity_pages
    );
    println!("  death: {}", l.death);
    println!(
        "  simulator: {:.1} s wall, {:.2} M requests/s",
        l.wall_s,
        l.ops_per_wall_s / 1e6
    );
    Ok(())
}

#[derive(Args)]
pub struct ExpZombieArgs {
    /// CI scale: a 32-block drive, 4 points, seconds
    #[arg(long)]
    quick: bool,
    /// Run only points with index % N == i (a batch-scheduler array task), e.g. 3/16
    #[arg(long)]
    shard: Option<String>,
    /// Merge shard reports (JSON files written by --shard runs) instead of running
    #[arg(long, num_args = 1..)]
    merge: Vec<PathBuf>,
    /// Worker threads (default: every core)
    #[arg(long)]
    jobs: Option<usize>,
    /// Starting modes
    #[arg(long, value_delimiter = ',')]
    modes: Option<Vec<String>>,
    #[arg(long, value_delimiter = ',')]
    reserves: Option<Vec<f64>>,
    #[arg(long, value_delimiter = ',')]
    working_sets: Option<Vec<f64>>,
    #[arg(long, value_delimiter = ',')]
    read_shares: Option<Vec<f64>>,
    #[arg(long)]
    seed: Option<u64>,
    /// When the drive is dead: `capacity` (spare capacity below the GC high-watermark pool plus the
    /// open block) or `retired-blocks` (more than (R − W) · blocks retired, Eq. 4.1's reading)
    #[arg(long, default_value = "capacity")]
    death_rule: String,
    /// Algorithm 6's avg_life: `group` (normal blocks only) or `element` (every live block)
    #[arg(long, default_value = "group")]
    life_average: String,
    /// Trace-driven runs (§4.4.4) instead of the synthetic grid: the 1 GiB drive, reserves
    /// 10/20/30%, TLC and MLC, the ten MSR presets (or --traces); with --quick the tiny drive
    #[arg(long)]
    trace_driven: bool,
    /// Traces for --trace-driven: preset names (`ecstack trace presets`) or trace files (any format
    /// `ecstack trace` parses: UMass/SPC, SNIA/MSR, blkparse, ...)
    #[arg(long, value_delimiter = ',')]
    traces: Option<Vec<String>>,
    /// Scale of the presets for --trace-driven (1.0 = published size)
    #[arg(long)]
    scale: Option<f64>,
    /// Output directory (report.json, grid.md, grid.csv, heat maps). A killed run continues from
    /// the journal (and, for --trace-driven, the lifetime checkpoints) it left here
    #[arg(short = 'o', long, default_value = "zombienand-out")]
    out: PathBuf,
    /// --trace-driven: wall seconds between checkpoints of a lifetime under way
    #[arg(long, default_value_t = 60.0)]
    checkpoint_every: f64,
    #[arg(long)]
    json: bool,
}

fn run_trace_driven(a: &ExpZombieArgs) -> Result<()> {
    let mut cfg = if a.quick {
        TraceRunConfig::quick()
    } else {
        TraceRunConfig::full()
    };
    if let Some(m) = &a.modes {
        cfg.modes = m.iter().map(|s| parse_mode(s)).collect::<Result<_>>()?;
    }
    if let Some(v) = &a.reserves {
        cfg.reserves = v.clone();
    }
    if let Some(t) = &a.traces {
        let presets = ecstack_trace::preset_names();
        cfg.traces = t
            .iter()
            .map(|s| {
                if presets.iter().any(|p| p == s) {
                    format!("preset:{s}")
                } else {
                    s.clone()
                }
            })
            .collect();
    }
    if let Some(s) = a.scale {
        cfg.scale = s;
    }
    (cfg.death_rule, cfg.average) = parse_rules(&a.death_rule, &a.life_average)?;
    if let Some(s) = a.seed {
        cfg.seed = s;
    }
    if a.shard.is_some()
        || !a.merge.is_empty()
        || a.working_sets.is_some()
        || a.read_shares.is_some()
    {
        bail!("--shard, --merge, --working-sets and --read-shares are for the synthetic grid, not --trace-driven");
    }
    let jobs = a.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let total = cfg.traces.len() * cfg.modes.len() * cfg.reserves.len();
    let pb = if std::io::stderr().is_terminal() {
        ProgressBar::new(total as u64)
    } else {
        ProgressBar::hidden()
    };
    // A killed run continues where it stopped when the same command runs again: finished
    // (trace, mode, reserve) pairs from the journal, lifetimes under way from their checkpoints.
    std::fs::create_dir_all(&a.out).with_context(|| format!("{}", a.out.display()))?;
    let journal = a.out.join("trace-journal.jsonl");
    if journal.exists() {
        eprintln!(
            "resuming from {} (finished runs are not run again)",
            journal.display()
        );
    }
    let r = ztrace::run_traces_resumable(
        &cfg,
        jobs,
        &|_| pb.inc(1),
        ztrace::Resume {
            journal: &journal,
            checkpoint_dir: &a.out,
            checkpoint_every_s: a.checkpoint_every,
        },
    )?;
    pb.finish_and_clear();
    ztrace::write_outputs(&r, &a.out)?;
    // The report holds every run now.
    std::fs::remove_file(&journal).with_context(|| format!("removing {}", journal.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", ztrace::markdown(&r));
        eprintln!("wrote {}", a.out.join("report.json").display());
    }
    Ok(())
}

pub fn run_experiment(a: ExpZombieArgs) -> Result<()> {
    if a.trace_driven || a.traces.is_some() {
        return run_trace_driven(&a);
    }
    let (report, journal) = if !a.merge.is_empty() {
        let parts = a
            .merge
            .iter()
            .map(|p| grid::read_report(p))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        (grid::merge(parts)?, None)
    } else {
        let mut cfg = if a.quick {
            GridConfig::quick()
        } else {
            GridConfig::full()
        };
        if let Some(m) = &a.modes {
            cfg.modes = m.iter().map(|s| parse_mode(s)).collect::<Result<_>>()?;
        }
        if let Some(v) = &a.reserves {
            cfg.reserves = v.clone();
        }
        if let Some(v) = &a.working_sets {
            cfg.working_sets = v.clone();
        }
        if let Some(v) = &a.read_shares {
            cfg.read_shares = v.clone();
        }
        (cfg.death_rule, cfg.average) = parse_rules(&a.death_rule, &a.life_average)?;
        if let Some(s) = a.seed {
            cfg.seed = s;
        }
        let shard = match &a.shard {
            None => (0, 1),
            Some(s) => {
                let (i, n) = s
                    .split_once('/')
                    .with_context(|| format!("--shard {s}: expected i/N"))?;
                (
                    i.parse().with_context(|| format!("--shard {s}: i"))?,
                    n.parse().with_context(|| format!("--shard {s}: N"))?,
                )
            }
        };
        let jobs = a.jobs.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        let total = grid::shard_points(&cfg, shard);
        crate::scratch::announce(
            "experiment zombienand",
            &[&a.out],
            &format!(
                "{total} drive lifetimes on {jobs} threads: {} (the progress bar counts them on a terminal; a killed run resumes)",
                if a.quick { "about a minute" } else { "hours" }
            ),
        );
        let pb = if std::io::stderr().is_terminal() {
            ProgressBar::new(total as u64)
        } else {
            ProgressBar::hidden()
        };
        // A killed grid continues where it stopped when the same command runs again.
        std::fs::create_dir_all(&a.out).with_context(|| format!("{}", a.out.display()))?;
        let journal = grid::journal_path(&a.out, shard);
        if journal.exists() {
            eprintln!(
                "resuming from {} (points already finished are not run again)",
                journal.display()
            );
        }
        let r = grid::run_grid_resumable(&cfg, shard, jobs, &|_| pb.inc(1), &journal)?;
        pb.finish_and_clear();
        (r, Some(journal))
    };
    let written = grid::write_outputs(&report, &a.out)?;
    if let Some(j) = journal {
        // The report holds every point now.
        std::fs::remove_file(&j).with_context(|| format!("removing {}", j.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", grid::markdown(&report));
        eprintln!("wrote {}", written.display());
    }
    Ok(())
}
