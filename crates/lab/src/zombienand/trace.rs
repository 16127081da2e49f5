//! §4.4.4's trace-driven runs: each trace's first distinct addresses (512 MB in the seed, half the
//! raw flash of the 1 GiB drive) remapped densely into the drive's logical space, looped until the
//! drive dies, baseline against ZombieNAND at reserves 10/20/30%; lifetime relative to the
//! baseline per trace (Fig. 4.6), the address-reuse CDF of the part used (Fig. 4.5, computed by the
//! trace layer's analyzer) and latency over the lifetime (Fig. 4.7).
//!
//! Traces come through `ecstack-trace`: named presets of the seeds' tables (the seed does not name
//! its ten traces; the default set is the ten MSR volumes of CodFS Table 3.2) or files in any
//! format the trace layer parses (UMass/SPC, SNIA/MSR, blkparse, ...).
//!
//! # Remapping
//! Records are taken in trace order; discards and empty requests are dropped; every 4 KiB page a
//! request touches (per volume and file) gets the next dense logical page number the first time it
//! is seen. The trace is cut before the first request that would bring the distinct pages past the
//! limit. A request becomes one access per run of consecutive remapped pages, so new sequential
//! data stays sequential, and a rewrite of it too.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ecstack_device::{CellMode, DeathRule, LifeAverage, WearPhysics};
use ecstack_trace::synth::SynthStream;
use ecstack_trace::{AnalyzeOptions, Analyzer, GroupBy, Names, Op, ParseOptions, Record};
use serde::{Deserialize, Serialize};

use super::journal;
use super::life::{
    mode_label, run_lifetime, Access, Checkpoint, Drive, LifeConfig, Lifetime, Scheme, Workload,
    LIFE_THRESHOLD, PAGE_BYTES,
};
use crate::plot::{Bars, Lines};
use crate::table::{csv_text, round_to};
use crate::{io_at, LabError, Result};

/// The seed's ten traces are not named; these presets (CodFS Table 3.2's MSR volumes) stand in.
pub const DEFAULT_PRESETS: [&str; 10] = [
    "msr-src22",
    "msr-mds0",
    "msr-rsrch0",
    "msr-usr0",
    "msr-web0",
    "msr-ts0",
    "msr-stg0",
    "msr-hm0",
    "msr-prn1",
    "msr-proj0",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRunConfig {
    pub drive: Drive,
    pub modes: Vec<CellMode>,
    pub reserves: Vec<f64>,
    /// `preset:NAME` or a trace file path.
    pub traces: Vec<String>,
    /// Scale of the presets (1.0 = the published size).
    pub scale: f64,
    /// Distinct pages kept as a fraction of the drive's raw pages (the seed: 512 MB of 1 GB).
    pub distinct_fraction: f64,
    pub seed: u64,
    pub physics: WearPhysics,
    /// When a drive is dead (`--death-rule`).
    #[serde(default)]
    pub death_rule: DeathRule,
    /// Algorithm 6's avg_life (`--life-average`).
    #[serde(default)]
    pub average: LifeAverage,
}

impl TraceRunConfig {
    /// The seed's setup: the 1 GiB drive, TLC and MLC, reserves 10/20/30%, ten traces.
    pub fn full() -> TraceRunConfig {
        TraceRunConfig {
            drive: Drive::Trace,
            modes: vec![CellMode::Tlc, CellMode::Mlc],
            reserves: vec![0.10, 0.20, 0.30],
            traces: DEFAULT_PRESETS
                .iter()
                .map(|p| format!("preset:{p}"))
                .collect(),
            scale: 1.0,
            distinct_fraction: 0.5,
            seed: 1,
            physics: WearPhysics::OxideStress,
            death_rule: DeathRule::Capacity,
            average: LifeAverage::Group,
        }
    }
    /// CI scale (seconds): the tiny drive, TLC, reserves 20/30% (10% leaves the tiny drive no
    /// room, see `Drive::default_reserve`), two presets at 1% of their size.
    pub fn quick() -> TraceRunConfig {
        TraceRunConfig {
            drive: Drive::Tiny,
            modes: vec![CellMode::Tlc],
            reserves: vec![0.20, 0.30],
            traces: vec!["preset:msr-rsrch0".into(), "preset:msr-web0".into()],
            scale: 0.01,
            ..TraceRunConfig::full()
        }
    }
    fn limit_pages(&self) -> u64 {
        let (elements, per, ppb) = self.drive.geometry();
        ((elements as u64 * per as u64 * ppb as u64) as f64 * self.distinct_fraction) as u64
    }

    /// One lifetime's configuration: the configured drive in `mode` with `reserve`, under
    /// `scheme`.
    pub fn life_config(&self, mode: CellMode, reserve: f64, scheme: Scheme) -> LifeConfig {
        LifeConfig {
            drive: self.drive,
            mode,
            reserve,
            scheme,
            physics: self.physics,
            life_threshold: LIFE_THRESHOLD,
            death_rule: self.death_rule,
            average: self.average,
            seed: self.seed,
        }
    }
}

/// A trace cut and remapped for the drive, with its statistics.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreparedTrace {
    pub name: String,
    /// Records taken (reads and writes before the cut).
    pub records: u64,
    /// Whether the trace was cut at the distinct-page limit (else all of it fits and is looped).
    pub cut: bool,
    pub distinct_pages: u64,
    pub read_pages: u64,
    pub write_pages: u64,
    /// Page writes / distinct pages written: how often a written address is rewritten per loop.
    pub write_reuse: f64,
    /// `[fraction of the WSS (hottest first), fraction of accesses]` (Fig. 4.5).
    pub reuse_cdf: Vec<[f64; 2]>,
    #[serde(skip)]
    pub accesses: Arc<Vec<Access>>,
}

impl PreparedTrace {
    /// The workload of a lifetime: these accesses, looped until the drive dies.
    pub fn workload(&self) -> Workload {
        Workload::Trace {
            name: self.name.clone(),
            accesses: self.accesses.clone(),
        }
    }
}

/// Remap `records` (in trace order) into dense logical pages, keeping at most `limit_pages`
/// distinct pages (module docs).
pub fn remap(
    name: &str,
    records: impl Iterator<Item = Result<Record>>,
    volumes: &dyn Fn() -> Names,
    limit_pages: u64,
) -> Result<PreparedTrace> {
    let ps = PAGE_BYTES as u64;
    let mut map: HashMap<(u32, u32, u64), u32> = HashMap::new();
    let mut accesses = Vec::new();
    let mut analyzer = Analyzer::new(AnalyzeOptions {
        group_by: GroupBy::All,
        reuse_cdf: true,
        cdf_points: 101,
    });
    let (mut used, mut read_pages, mut write_pages, mut cut) = (0u64, 0u64, 0u64, false);
    let mut written: std::collections::HashSet<u32> = std::collections::HashSet::new();
    for r in records {
        let r = r?;
        if r.op == Op::Discard || r.len == 0 {
            continue;
        }
        let (first, last) = (r.offset / ps, (r.end() - 1) / ps);
        let fresh = (first..=last)
            .filter(|&p| !map.contains_key(&(r.volume, r.file, p)))
            .count() as u64;
        if map.len() as u64 + fresh > limit_pages {
            cut = true;
            break;
        }
        analyzer.add(&r);
        used += 1;
        let write = r.op == Op::Write;
        let mut run: Option<Access> = None;
        for p in first..=last {
            let n = map.len() as u32;
            let lpn = *map.entry((r.volume, r.file, p)).or_insert(n);
            if write {
                written.insert(lpn);
            }
            run = match run {
                Some(mut a) if a.lpn + a.pages == lpn => {
                    a.pages += 1;
                    Some(a)
                }
                other => {
                    if let Some(a) = other {
                        accesses.push(a);
                    }
                    Some(Access {
                        write,
                        lpn,
                        pages: 1,
                    })
                }
            };
        }
        if let Some(a) = run {
            accesses.push(a);
        }
        let pages = last - first + 1;
        if write {
            write_pages += pages;
        } else {
            read_pages += pages;
        }
    }
    if accesses.is_empty() {
        return Err(LabError::Run(format!(
            "{name}: no read or write fits the first {limit_pages} distinct pages"
        )));
    }
    let report = analyzer.report(&volumes());
    let reuse_cdf = report
        .volumes
        .first()
        .map(|v| v.reuse_cdf.clone())
        .unwrap_or_default();
    Ok(PreparedTrace {
        name: name.to_string(),
        records: used,
        cut,
        distinct_pages: map.len() as u64,
        read_pages,
        write_pages,
        write_reuse: write_pages as f64 / written.len().max(1) as f64,
        reuse_cdf,
        accesses: Arc::new(accesses),
    })
}

/// Load and remap one trace source (`preset:NAME` or a file).
pub fn prepare(source: &str, cfg: &TraceRunConfig) -> Result<PreparedTrace> {
    let limit = cfg.limit_pages();
    if let Some(name) = source.strip_prefix("preset:") {
        let preset = ecstack_trace::synth::preset(name)?;
        let stream = SynthStream::new(&preset.generator, cfg.scale, cfg.seed)?;
        let volumes = stream.volumes().clone();
        remap(name, stream.map(Ok), &|| volumes.clone(), limit)
    } else {
        let path = PathBuf::from(source);
        let mut reader = ecstack_trace::TraceReader::open(&path, ParseOptions::default())?;
        let it = std::iter::from_fn(|| reader.next_record().map_err(LabError::from).transpose());
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| source.to_string());
        // The analyzer only names the one "all" group: no volume names are needed.
        remap(&name, it, &Names::new, limit)
    }
}

/// One trace at one mode and reserve: both lifetimes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceResult {
    pub trace: String,
    pub mode: CellMode,
    pub reserve: f64,
    pub baseline: Lifetime,
    pub zombie: Lifetime,
    pub lifetime_ratio: f64,
    pub latency_ratio: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceReport {
    pub config: TraceRunConfig,
    pub traces: Vec<PreparedTrace>,
    pub results: Vec<TraceResult>,
}

/// Prepare every trace, then run every (trace, mode, reserve) to death as baseline and
/// ZombieNAND on `jobs` threads; `done` is called after each lifetime pair.
pub fn run_traces(
    cfg: &TraceRunConfig,
    jobs: usize,
    done: &(dyn Fn(&TraceResult) + Sync),
) -> Result<TraceReport> {
    run_traces_inner(cfg, jobs, done, None)
}

/// Where a trace-driven run keeps what lets a killed run continue: a journal of the finished
/// (trace, mode, reserve) pairs, and the model checkpoints of the lifetimes under way (the binary
/// checkpoint of `ecstack sim zombienand`, one file per lifetime, removed once its pair is
/// journaled).
#[derive(Debug, Clone, Copy)]
pub struct Resume<'a> {
    /// The journal (JSON Lines: a header naming the configuration and a digest of every remapped
    /// trace, then one line per finished pair). The caller removes it once the report is written.
    pub journal: &'a Path,
    /// Directory of the lifetimes' checkpoints ([`checkpoint_path`]).
    pub checkpoint_dir: &'a Path,
    /// Wall seconds between two checkpoints of one lifetime.
    pub checkpoint_every_s: f64,
}

/// The checkpoint file of one lifetime of a resumable run: `item` numbers the (trace, mode,
/// reserve) triples in report order.
pub fn checkpoint_path(dir: &Path, item: usize, scheme: Scheme) -> PathBuf {
    let s = match scheme {
        Scheme::Baseline => "baseline",
        Scheme::Zombie => "zombie",
    };
    dir.join(format!("trace-ck-{item}-{s}.ck"))
}

/// [`run_traces`] that survives being killed: finished pairs are journaled, lifetimes under way are
/// checkpointed every `checkpoint_every_s`; a rerun with the same configuration and the same traces
/// (their remapped requests are digested into the journal's header) takes the finished pairs, resumes
/// the checkpointed lifetimes and runs the rest, and reports exactly what an uninterrupted run
/// would. A journal of another run is refused before anything runs.
pub fn run_traces_resumable(
    cfg: &TraceRunConfig,
    jobs: usize,
    done: &(dyn Fn(&TraceResult) + Sync),
    resume: Resume,
) -> Result<TraceReport> {
    run_traces_inner(cfg, jobs, done, Some(resume))
}

const JOURNAL_FORMAT: &str = "ecstack-zombienand-trace-journal";

#[derive(Serialize, Deserialize, PartialEq)]
struct JournalHeader {
    format: String,
    version: u32,
    config: TraceRunConfig,
    /// (name, FNV-1a 64 of the remapped requests) per trace: a changed trace file is another run.
    traces: Vec<(String, u64)>,
}

#[derive(Serialize, Deserialize)]
struct JournalEntry {
    item: usize,
    result: TraceResult,
}

#[derive(Serialize)]
struct JournalEntryRef<'a> {
    item: usize,
    result: &'a TraceResult,
}

/// FNV-1a 64 over the remapped requests (op, first page, pages).
fn accesses_digest(accesses: &[Access]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for a in accesses {
        let mut b = [0u8; 9];
        b[0] = a.write as u8;
        b[1..5].copy_from_slice(&a.lpn.to_le_bytes());
        b[5..].copy_from_slice(&a.pages.to_le_bytes());
        for x in b {
            h ^= x as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn remove_if_there(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_at(path)(e)),
        _ => Ok(()),
    }
}

fn run_traces_inner(
    cfg: &TraceRunConfig,
    jobs: usize,
    done: &(dyn Fn(&TraceResult) + Sync),
    resume: Option<Resume>,
) -> Result<TraceReport> {
    if !(cfg.distinct_fraction > 0.0 && cfg.distinct_fraction < 1.0) {
        return Err(LabError::Config {
            field: "distinct-fraction",
            msg: format!("{} is not a fraction in (0, 1)", cfg.distinct_fraction),
        });
    }
    // Refuse a drive/reserve the model cannot take before anything runs.
    for &mode in &cfg.modes {
        for &reserve in &cfg.reserves {
            for scheme in [Scheme::Baseline, Scheme::Zombie] {
                cfg.life_config(mode, reserve, scheme).model()?;
            }
        }
    }
    let traces = cfg
        .traces
        .iter()
        .map(|s| prepare(s, cfg))
        .collect::<Result<Vec<_>>>()?;
    // Items in report order: (item, trace, mode, reserve).
    let mut items = Vec::new();
    for t in 0..traces.len() {
        for &mode in &cfg.modes {
            for &reserve in &cfg.reserves {
                items.push((items.len(), t, mode, reserve));
            }
        }
    }
    let mut slots: Vec<Option<TraceResult>> = vec![None; items.len()];
    let journal = match &resume {
        Some(rs) => {
            let header = JournalHeader {
                format: JOURNAL_FORMAT.into(),
                version: 1,
                config: cfg.clone(),
                traces: traces
                    .iter()
                    .map(|t| (t.name.clone(), accesses_digest(&t.accesses)))
                    .collect(),
            };
            let o = journal::open::<_, JournalEntry>(rs.journal, &header, &|_| {
                "a journal of another trace-driven run (other options or changed traces); remove it or write to another --out".into()
            })?;
            if o.fresh {
                // Checkpoints left by another run would be taken for this one's.
                for &(item, ..) in &items {
                    for scheme in [Scheme::Baseline, Scheme::Zombie] {
                        remove_if_there(&checkpoint_path(rs.checkpoint_dir, item, scheme))?;
                    }
                }
            }
            for e in o.done {
                let slot = slots.get_mut(e.item).ok_or_else(|| {
                    LabError::Run(format!(
                        "{}: item {} is not one of this run's",
                        rs.journal.display(),
                        e.item
                    ))
                })?;
                slot.get_or_insert(e.result);
            }
            Some(o.journal)
        }
        None => None,
    };
    let todo: Vec<_> = items
        .into_iter()
        .filter(|&(item, ..)| slots[item].is_none())
        .collect();
    let fresh = journal::run_parallel(
        &todo,
        jobs,
        &|&(item, t, mode, reserve)| {
            let ck = resume.map(|rs| (rs.checkpoint_dir, item, rs.checkpoint_every_s));
            run_one(cfg, &traces[t], mode, reserve, ck)
        },
        &|&(item, ..), r| {
            let (Some(j), Some(rs)) = (&journal, &resume) else {
                return Ok(());
            };
            j.append(&JournalEntryRef { item, result: r })?;
            for scheme in [Scheme::Baseline, Scheme::Zombie] {
                remove_if_there(&checkpoint_path(rs.checkpoint_dir, item, scheme))?;
            }
            Ok(())
        },
        done,
    )?;
    for (&(item, ..), r) in todo.iter().zip(fresh) {
        slots[item] = Some(r);
    }
    let results = slots
        .into_iter()
        .map(|r| r.ok_or_else(|| LabError::Run("a trace-driven item did not run".into())))
        .collect::<Result<Vec<_>>>()?;
    Ok(TraceReport {
        config: cfg.clone(),
        traces,
        results,
    })
}

fn run_one(
    cfg: &TraceRunConfig,
    t: &PreparedTrace,
    mode: CellMode,
    reserve: f64,
    checkpoint: Option<(&Path, usize, f64)>,
) -> Result<TraceResult> {
    let life = |scheme| -> Result<Lifetime> {
        let (lc, w) = (cfg.life_config(mode, reserve, scheme), t.workload());
        let path = checkpoint.map(|(dir, item, _)| checkpoint_path(dir, item, scheme));
        let ck = checkpoint
            .zip(path.as_deref())
            .map(|((.., every_s), path)| Checkpoint { path, every_s });
        let mut l = run_lifetime(&lc, &w, ck, &mut |_| {})?;
        l.wall_s = 0.0;
        l.ops_per_wall_s = 0.0;
        Ok(l)
    };
    let baseline = life(Scheme::Baseline)?;
    let zombie = life(Scheme::Zombie)?;
    Ok(TraceResult {
        trace: t.name.clone(),
        mode,
        reserve,
        lifetime_ratio: zombie.host_bytes_written as f64
            / baseline.host_bytes_written.max(1) as f64,
        latency_ratio: zombie.mean_latency_us / baseline.mean_latency_us.max(1e-9),
        baseline,
        zombie,
    })
}

/// Table 4.3-like trace table plus one row per run.
pub fn markdown(r: &TraceReport) -> String {
    let mut s = format!(
        "Death rule: {}; Algorithm 6 average: {}.\n\n",
        r.config.death_rule.name(),
        r.config.average.name()
    );
    s.push_str(
        "| trace | records used | cut at limit | distinct MiB | reads (pages %) | write reuse |\n|---|---|---|---|---|---|\n",
    );
    for t in &r.traces {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {:.1}% | {:.2} |",
            t.name,
            t.records,
            if t.cut { "yes" } else { "no (looped whole)" },
            t.distinct_pages as f64 * PAGE_BYTES as f64 / (1u64 << 20) as f64,
            100.0 * t.read_pages as f64 / (t.read_pages + t.write_pages).max(1) as f64,
            t.write_reuse
        );
    }
    s.push_str(
        "\n| trace | mode | reserve | baseline life (host GiB) | ZombieNAND life (host GiB) | life × | latency × | switches | WA base / zombie | erases pool / rest |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for x in &r.results {
        let _ = writeln!(
            s,
            "| {} | {} | {:.0}% | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.2} / {:.2} | {:.0} / {:.0} |",
            x.trace,
            mode_label(x.mode),
            x.reserve * 100.0,
            x.baseline.host_bytes_written as f64 / (1u64 << 30) as f64,
            x.zombie.host_bytes_written as f64 / (1u64 << 30) as f64,
            x.lifetime_ratio,
            x.latency_ratio,
            x.zombie.stats.mode_switches,
            x.baseline.stats.write_amplification,
            x.zombie.stats.write_amplification,
            x.zombie.early_erase_mean,
            x.zombie.normal_erase_mean,
        );
    }
    s
}

/// One line of `traces.csv`: a trace at one (mode, reserve) and the two drives' outcomes.
#[derive(Serialize)]
struct CsvRow<'a> {
    trace: &'a str,
    mode: &'static str,
    reserve: f64,
    baseline_host_bytes: u64,
    zombie_host_bytes: u64,
    lifetime_ratio: f64,
    baseline_latency_us: f64,
    zombie_latency_us: f64,
    latency_ratio: f64,
    mode_switches: u64,
    baseline_wa: f64,
    zombie_wa: f64,
}

/// The results as CSV (`traces.csv`): one line per (trace, mode, reserve).
pub fn csv(r: &TraceReport) -> Result<String> {
    let rows: Vec<CsvRow> = r
        .results
        .iter()
        .map(|x| CsvRow {
            trace: &x.trace,
            mode: mode_label(x.mode),
            reserve: x.reserve,
            baseline_host_bytes: x.baseline.host_bytes_written,
            zombie_host_bytes: x.zombie.host_bytes_written,
            lifetime_ratio: round_to(x.lifetime_ratio, 6),
            baseline_latency_us: round_to(x.baseline.mean_latency_us, 3),
            zombie_latency_us: round_to(x.zombie.mean_latency_us, 3),
            latency_ratio: round_to(x.latency_ratio, 6),
            mode_switches: x.zombie.stats.mode_switches,
            baseline_wa: round_to(x.baseline.stats.write_amplification, 4),
            zombie_wa: round_to(x.zombie.stats.write_amplification, 4),
        })
        .collect();
    csv_text(&rows)
}

/// ZombieNAND's latency over its life relative to the baseline's (Fig. 4.7): x is requests as a
/// percentage of the baseline's lifetime (100 = baseline death), y the window's mean latency over
/// the baseline's window at the same point (after the baseline's death: over its last window).
pub fn latency_over_life(x: &TraceResult) -> Vec<(f64, f64)> {
    let base_end = x.baseline.ops.max(1) as f64;
    let base = &x.baseline.series;
    let mut j = 0;
    let mut out = Vec::new();
    for &(ops, lat) in &x.zombie.series {
        while j + 1 < base.len() && base[j].0 < ops {
            j += 1;
        }
        if let Some(&(_, b)) = base.get(j) {
            if b > 0.0 {
                out.push((100.0 * ops as f64 / base_end, lat / b));
            }
        }
    }
    out
}

/// Write report.json, traces.md, traces.csv and the SVG figures into `dir`.
pub fn write_outputs(r: &TraceReport, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io_at(dir))?;
    let json = serde_json::to_vec_pretty(r).map_err(|e| LabError::Run(e.to_string()))?;
    let p = dir.join("report.json");
    std::fs::write(&p, json).map_err(io_at(&p))?;
    let p = dir.join("traces.md");
    std::fs::write(&p, markdown(r)).map_err(io_at(&p))?;
    let p = dir.join("traces.csv");
    std::fs::write(&p, csv(r)?).map_err(io_at(&p))?;
    Lines {
        title: "Address reuse CDF of the part of each trace used (Fig. 4.5)",
        x_label: "fraction of the addresses (most used first)",
        y_label: "fraction of accesses",
        series: r
            .traces
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    t.reuse_cdf.iter().map(|p| (p[0], p[1])).collect(),
                )
            })
            .collect(),
        y_range: Some((0.0, 1.0)),
    }
    .write_svg(&dir.join("reuse-cdf.svg"))?;
    let c = &r.config;
    for &mode in &c.modes {
        let m = mode_label(mode);
        let traces: Vec<String> = r.traces.iter().map(|t| t.name.clone()).collect();
        let find = |t: &str, res: f64| {
            r.results
                .iter()
                .find(|x| x.trace == t && x.mode == mode && x.reserve == res)
        };
        Bars {
            title: &format!("{m}: ZombieNAND lifetime relative to the baseline (Fig. 4.6)"),
            x_label: "trace",
            y_label: "lifetime / baseline",
            categories: traces.clone(),
            series: c
                .reserves
                .iter()
                .map(|&res| {
                    (
                        format!("{:.0}% reserve", res * 100.0),
                        traces
                            .iter()
                            .map(|t| find(t, res).map(|x| x.lifetime_ratio).unwrap_or(f64::NAN))
                            .collect(),
                    )
                })
                .collect(),
            stacked: false,
        }
        .write_svg(&dir.join(format!("lifetime-{}.svg", m.to_lowercase())))?;
        for &res in &c.reserves {
            Lines {
                title: &format!(
                    "{m}, {:.0}% reserve: latency over life relative to the baseline (Fig. 4.7)",
                    res * 100.0
                ),
                x_label: "requests, % of the baseline's lifetime (100 = baseline death)",
                y_label: "latency / baseline",
                series: traces
                    .iter()
                    .filter_map(|t| find(t, res).map(|x| (t.clone(), latency_over_life(x))))
                    .collect(),
                y_range: None,
            }
            .write_svg(&dir.join(format!(
                "latency-{}-reserve{:.0}.svg",
                m.to_lowercase(),
                res * 100.0
            )))?;
        }
    }
    Ok(())
}
