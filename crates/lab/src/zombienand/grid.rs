//! §4.4.3's synthetic grid: reserved area × working-set size × read share × starting mode, every
//! point run to death twice (baseline and ZombieNAND), in parallel, shardable (`--shard i/N`) and
//! mergeable into the result one machine would produce; Markdown/CSV tables and SVG heat maps of
//! lifetime and mean latency relative to the baseline.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ecstack_device::{CellMode, DeathRule, LifeAverage, WearPhysics};
use serde::{Deserialize, Serialize};

use super::journal;
use super::life::{
    mode_label, run_lifetime, Drive, LifeConfig, Lifetime, Scheme, Workload, LIFE_THRESHOLD,
};
use crate::plot::RatioMap;
use crate::table::{csv_text, round_to};
use crate::{io_at, LabError, Result};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GridConfig {
    pub drive: Drive,
    pub modes: Vec<CellMode>,
    pub reserves: Vec<f64>,
    pub working_sets: Vec<f64>,
    pub read_shares: Vec<f64>,
    pub seed: u64,
    pub physics: WearPhysics,
    /// When a drive is dead (`--death-rule`).
    #[serde(default)]
    pub death_rule: DeathRule,
    /// Algorithm 6's avg_life (`--life-average`).
    #[serde(default)]
    pub average: LifeAverage,
}

impl GridConfig {
    /// The seed's grid (Figures 4.3/4.4): reserves 10–30%, working sets 10–100%, three read
    /// shares. 5% does not fit the synthetic drive: its GC high watermark (7 of 128 blocks) plus
    /// the open block already take 6.3% of the flash.
    pub fn full() -> GridConfig {
        GridConfig {
            drive: Drive::Synthetic,
            modes: vec![CellMode::Tlc, CellMode::Mlc],
            reserves: vec![0.10, 0.15, 0.20, 0.25, 0.30],
            working_sets: vec![0.1, 0.25, 0.5, 0.75, 1.0],
            read_shares: vec![0.25, 0.5, 0.75],
            seed: 1,
            physics: WearPhysics::OxideStress,
            death_rule: DeathRule::Capacity,
            average: LifeAverage::Group,
        }
    }
    /// CI scale: a 32-block drive, TLC only, 2 × 2 × 1 points (seconds). The working sets cover
    /// both regimes of §4.4.3: a small one (10%), where the early-switch pool is cycled and the
    /// drive outlives the baseline, and a large one (50%), where it barely does.
    pub fn quick() -> GridConfig {
        GridConfig {
            drive: Drive::Tiny,
            modes: vec![CellMode::Tlc],
            reserves: vec![0.15, 0.30],
            working_sets: vec![0.1, 0.5],
            read_shares: vec![0.5],
            seed: 1,
            physics: WearPhysics::OxideStress,
            death_rule: DeathRule::Capacity,
            average: LifeAverage::Group,
        }
    }

    pub fn points(&self) -> Vec<GridPoint> {
        let mut v = Vec::new();
        for &mode in &self.modes {
            for &read_share in &self.read_shares {
                for &reserve in &self.reserves {
                    for &working_set in &self.working_sets {
                        let index = v.len();
                        v.push(GridPoint {
                            index,
                            mode,
                            reserve,
                            working_set,
                            read_share,
                        });
                    }
                }
            }
        }
        v
    }

    /// The lifetime of point `p` under `scheme`: the same stream for both schemes of a point,
    /// points differ (the seed plays no part in `LifeConfig::model`).
    pub fn life_config(&self, p: &GridPoint, scheme: Scheme) -> LifeConfig {
        LifeConfig {
            drive: self.drive,
            mode: p.mode,
            reserve: p.reserve,
            scheme,
            physics: self.physics,
            life_threshold: LIFE_THRESHOLD,
            death_rule: self.death_rule,
            average: self.average,
            seed: self
                .seed
                .wrapping_mul(1_000_003)
                .wrapping_add(p.index as u64),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GridPoint {
    pub index: usize,
    pub mode: CellMode,
    pub reserve: f64,
    pub working_set: f64,
    pub read_share: f64,
}

/// One point's two lifetimes (the latency series are dropped to keep results small).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PointResult {
    pub point: GridPoint,
    pub baseline: Lifetime,
    pub zombie: Lifetime,
    /// ZombieNAND host bytes written / baseline's.
    pub lifetime_ratio: f64,
    /// ZombieNAND mean latency over its life / baseline's over its life.
    pub latency_ratio: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GridReport {
    pub config: GridConfig,
    /// `(i, n)`: this report holds the points with `index % n == i`; `(0, 1)` is the whole grid.
    pub shard: (usize, usize),
    pub results: Vec<PointResult>,
}

fn run_point(cfg: &GridConfig, p: GridPoint) -> Result<PointResult> {
    let life = |scheme| -> Result<Lifetime> {
        let lc = cfg.life_config(&p, scheme);
        let w = Workload::Uniform {
            working_set: p.working_set,
            read_share: p.read_share,
        };
        let mut l = run_lifetime(&lc, &w, None, &mut |_| {})?;
        l.series.clear();
        l.wall_s = 0.0; // keep merged results byte-identical to one machine's
        l.ops_per_wall_s = 0.0;
        Ok(l)
    };
    let baseline = life(Scheme::Baseline)?;
    let zombie = life(Scheme::Zombie)?;
    Ok(PointResult {
        point: p,
        lifetime_ratio: zombie.host_bytes_written as f64
            / baseline.host_bytes_written.max(1) as f64,
        latency_ratio: zombie.mean_latency_us / baseline.mean_latency_us.max(1e-9),
        baseline,
        zombie,
    })
}

/// Run this shard's points on `jobs` threads; `done` is called after each point.
pub fn run_grid(
    cfg: &GridConfig,
    shard: (usize, usize),
    jobs: usize,
    done: &(dyn Fn(&PointResult) + Sync),
) -> Result<GridReport> {
    run_grid_inner(cfg, shard, jobs, done, None)
}

/// [`run_grid`] that survives being killed: every finished point is appended to `journal` (one JSON
/// line, synced) after a header naming the grid and shard; a run that finds the journal takes the
/// points it holds and runs only the others, so a resumed grid reports exactly what an uninterrupted
/// one would (every point is seeded by its index). A torn last line (killed while writing it) is
/// dropped and that point runs again; a journal of another grid or shard is refused by name. The
/// journal is left in place: the caller removes it once the report is written.
pub fn run_grid_resumable(
    cfg: &GridConfig,
    shard: (usize, usize),
    jobs: usize,
    done: &(dyn Fn(&PointResult) + Sync),
    journal: &Path,
) -> Result<GridReport> {
    run_grid_inner(cfg, shard, jobs, done, Some(journal))
}

const JOURNAL_FORMAT: &str = "ecstack-zombienand-grid-journal";

#[derive(Serialize, Deserialize, PartialEq)]
struct JournalHeader {
    format: String,
    version: u32,
    config: GridConfig,
    shard: (usize, usize),
}

fn run_grid_inner(
    cfg: &GridConfig,
    shard: (usize, usize),
    jobs: usize,
    done: &(dyn Fn(&PointResult) + Sync),
    journal: Option<&Path>,
) -> Result<GridReport> {
    if shard.1 == 0 || shard.0 >= shard.1 {
        return Err(LabError::Config {
            field: "shard",
            msg: format!("{}/{} is not i/N with i < N", shard.0, shard.1),
        });
    }
    let points: Vec<GridPoint> = cfg
        .points()
        .into_iter()
        .filter(|p| p.index % shard.1 == shard.0)
        .collect();
    // Refuse a point the drive cannot take before anything runs (not after hours of the others).
    for p in &cfg.points() {
        for scheme in [Scheme::Baseline, Scheme::Zombie] {
            cfg.life_config(p, scheme).model()?;
        }
    }
    let (earlier, journal) = match journal {
        Some(path) => {
            let header = JournalHeader {
                format: JOURNAL_FORMAT.into(),
                version: 1,
                config: cfg.clone(),
                shard,
            };
            let o = journal::open::<_, PointResult>(path, &header, &|got| {
                format!(
                    "a journal of another grid or shard ({}/{}); remove it or write to another --out",
                    got.shard.0, got.shard.1
                )
            })?;
            let mut earlier: Vec<PointResult> = Vec::new();
            for r in o.done {
                if !points.contains(&r.point) {
                    return Err(LabError::Run(format!(
                        "{}: point {} is not one of this shard's",
                        path.display(),
                        r.point.index
                    )));
                }
                if !earlier.iter().any(|d| d.point.index == r.point.index) {
                    earlier.push(r);
                }
            }
            (earlier, Some(o.journal))
        }
        None => (Vec::new(), None),
    };
    let todo: Vec<GridPoint> = points
        .into_iter()
        .filter(|p| !earlier.iter().any(|d| d.point.index == p.index))
        .collect();
    let fresh = journal::run_parallel(
        &todo,
        jobs,
        &|&p| run_point(cfg, p),
        &|_, r| journal.as_ref().map_or(Ok(()), |j| j.append(r)),
        done,
    )?;
    let mut results = earlier;
    results.extend(fresh);
    results.sort_by_key(|r| r.point.index);
    Ok(GridReport {
        config: cfg.clone(),
        shard,
        results,
    })
}

/// Merge shard reports of one grid into the whole grid's report (refuses mixed grids, missing or
/// repeated points).
pub fn merge(parts: Vec<GridReport>) -> Result<GridReport> {
    let bad = |m: String| LabError::Run(format!("merge: {m}"));
    let first = parts.first().ok_or_else(|| bad("no shard given".into()))?;
    let cfg = first.config.clone();
    let mut results = Vec::new();
    for p in &parts {
        if p.config != cfg {
            return Err(bad("shards of different grids".into()));
        }
        results.extend(p.results.iter().cloned());
    }
    results.sort_by_key(|r| r.point.index);
    let n = cfg.points().len();
    if results.len() != n || results.iter().enumerate().any(|(i, r)| r.point.index != i) {
        return Err(bad(format!(
            "{} point results for a grid of {n} points (a shard missing or repeated)",
            results.len()
        )));
    }
    Ok(GridReport {
        config: cfg,
        shard: (0, 1),
        results,
    })
}

pub fn read_report(path: &Path) -> Result<GridReport> {
    let b = std::fs::read(path).map_err(io_at(path))?;
    serde_json::from_slice(&b)
        .map_err(|e| LabError::Run(format!("{}: not a grid report: {e}", path.display())))
}

pub fn write_report(r: &GridReport, path: &Path) -> Result<()> {
    let b = serde_json::to_vec_pretty(r).map_err(|e| LabError::Run(e.to_string()))?;
    std::fs::write(path, b).map_err(io_at(path))
}

/// The journal of shard `(i, n)` of a grid run into `out` (see [`run_grid_resumable`]).
pub fn journal_path(out: &Path, shard: (usize, usize)) -> PathBuf {
    out.join(format!("grid-journal-{}-of-{}.jsonl", shard.0, shard.1))
}

/// How many of `cfg`'s points shard `(i, n)` runs.
pub fn shard_points(cfg: &GridConfig, shard: (usize, usize)) -> usize {
    cfg.points()
        .iter()
        .filter(|p| p.index % shard.1.max(1) == shard.0)
        .count()
}

/// Write a grid report into `out`: `report.json` (a shard's `report-i-of-n.json`, for
/// [`merge`]) and, for the whole grid, `grid.md`, `grid.csv` and the heat maps. Returns the path
/// of the JSON report.
pub fn write_outputs(r: &GridReport, out: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out).map_err(io_at(out))?;
    let name = if r.shard.1 > 1 {
        format!("report-{}-of-{}.json", r.shard.0, r.shard.1)
    } else {
        "report.json".into()
    };
    let report = out.join(name);
    write_report(r, &report)?;
    if r.shard.1 == 1 {
        let write = |f: &str, text: &str| {
            let p = out.join(f);
            std::fs::write(&p, text).map_err(io_at(&p))
        };
        write("grid.md", &markdown(r))?;
        write("grid.csv", &csv(r)?)?;
        for (f, svg) in heat_maps(r)? {
            write(&f, &svg)?;
        }
    }
    Ok(report)
}

/// Markdown table of every point.
pub fn markdown(r: &GridReport) -> String {
    let mut s = format!(
        "Death rule: {}; Algorithm 6 average: {}.\n\n",
        r.config.death_rule.name(),
        r.config.average.name()
    );
    s.push_str(
        "| mode | reads | reserve | working set | early blocks | baseline life (host GiB) | ZombieNAND life (host GiB) | life × | latency × | switches | WA base / zombie | erases pool / rest | death (ZombieNAND) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for x in &r.results {
        let p = &x.point;
        let _ = writeln!(
            s,
            "| {} | {:.0}% | {:.0}% | {:.0}% | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.2} / {:.2} | {:.0} / {:.0} | {} |",
            mode_label(p.mode),
            p.read_share * 100.0,
            p.reserve * 100.0,
            p.working_set * 100.0,
            x.zombie.early_switch_blocks,
            x.baseline.host_bytes_written as f64 / (1u64 << 30) as f64,
            x.zombie.host_bytes_written as f64 / (1u64 << 30) as f64,
            x.lifetime_ratio,
            x.latency_ratio,
            x.zombie.stats.mode_switches,
            x.baseline.stats.write_amplification,
            x.zombie.stats.write_amplification,
            x.zombie.early_erase_mean,
            x.zombie.normal_erase_mean,
            x.zombie.death.replace('|', "/"),
        );
    }
    s
}

/// One line of `grid.csv`: a grid point and the two drives' outcomes.
#[derive(Serialize)]
struct CsvRow {
    mode: &'static str,
    read_share: f64,
    reserve: f64,
    working_set: f64,
    early_switch_blocks: u32,
    baseline_host_bytes: u64,
    zombie_host_bytes: u64,
    lifetime_ratio: f64,
    baseline_latency_us: f64,
    zombie_latency_us: f64,
    latency_ratio: f64,
    mode_switches: u64,
    baseline_wa: f64,
    zombie_wa: f64,
    zombie_pool_erase_mean: f64,
    zombie_rest_erase_mean: f64,
    baseline_erase_mean: f64,
}

/// The grid as CSV (`grid.csv`): one line per point.
pub fn csv(r: &GridReport) -> Result<String> {
    let rows: Vec<CsvRow> = r
        .results
        .iter()
        .map(|x| CsvRow {
            mode: mode_label(x.point.mode),
            read_share: x.point.read_share,
            reserve: x.point.reserve,
            working_set: x.point.working_set,
            early_switch_blocks: x.zombie.early_switch_blocks,
            baseline_host_bytes: x.baseline.host_bytes_written,
            zombie_host_bytes: x.zombie.host_bytes_written,
            lifetime_ratio: round_to(x.lifetime_ratio, 6),
            baseline_latency_us: round_to(x.baseline.mean_latency_us, 3),
            zombie_latency_us: round_to(x.zombie.mean_latency_us, 3),
            latency_ratio: round_to(x.latency_ratio, 6),
            mode_switches: x.zombie.stats.mode_switches,
            baseline_wa: round_to(x.baseline.stats.write_amplification, 4),
            zombie_wa: round_to(x.zombie.stats.write_amplification, 4),
            zombie_pool_erase_mean: round_to(x.zombie.early_erase_mean, 1),
            zombie_rest_erase_mean: round_to(x.zombie.normal_erase_mean, 1),
            baseline_erase_mean: round_to(x.baseline.normal_erase_mean, 1),
        })
        .collect();
    csv_text(&rows)
}

/// One SVG heat map per (mode, read share, metric): rows reserve, columns working set, each cell
/// coloured by its value relative to the baseline ([`RatioMap`]: 1.0 = white; better = green, worse
/// = red on a log scale) and labelled with the value. Returns (file name, SVG).
pub fn heat_maps(r: &GridReport) -> Result<Vec<(String, String)>> {
    let c = &r.config;
    let mut out = Vec::new();
    for &mode in &c.modes {
        for &rs in &c.read_shares {
            for (metric, higher_is_better) in [("lifetime", true), ("latency", false)] {
                let cell = |res: f64, ws: f64| {
                    r.results
                        .iter()
                        .find(|x| {
                            x.point.mode == mode
                                && x.point.read_share == rs
                                && x.point.reserve == res
                                && x.point.working_set == ws
                        })
                        .map(|x| match metric {
                            "lifetime" => x.lifetime_ratio,
                            _ => x.latency_ratio,
                        })
                };
                let title = format!(
                    "{} {metric} relative to baseline, {:.0}% reads",
                    mode_label(mode),
                    rs * 100.0
                );
                let map = RatioMap {
                    title: &title,
                    x_label: "working set",
                    y_label: "reserve",
                    columns: c
                        .working_sets
                        .iter()
                        .map(|ws| format!("{:.0}%", ws * 100.0))
                        .collect(),
                    rows: c
                        .reserves
                        .iter()
                        .map(|res| format!("{:.0}% reserve", res * 100.0))
                        .collect(),
                    cells: c
                        .reserves
                        .iter()
                        .map(|&res| c.working_sets.iter().map(|&ws| cell(res, ws)).collect())
                        .collect(),
                    higher_is_better,
                };
                out.push((
                    format!(
                        "zombienand-{}-{metric}-reads{:.0}.svg",
                        mode_label(mode).to_lowercase(),
                        rs * 100.0
                    ),
                    map.svg()?,
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_the_points_and_name_their_files() {
        let cfg = GridConfig::quick();
        let all = cfg.points().len();
        assert_eq!(shard_points(&cfg, (0, 1)), all);
        assert_eq!(
            shard_points(&cfg, (0, 3)) + shard_points(&cfg, (1, 3)) + shard_points(&cfg, (2, 3)),
            all
        );
        assert_eq!(
            journal_path(Path::new("/o"), (1, 3)),
            Path::new("/o/grid-journal-1-of-3.jsonl")
        );
    }

    #[test]
    fn a_shard_writes_only_its_json_report() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let r = GridReport {
            config: GridConfig::quick(),
            shard: (1, 2),
            results: Vec::new(),
        };
        let p = write_outputs(&r, &out).unwrap();
        assert_eq!(p, out.join("report-1-of-2.json"));
        assert_eq!(read_report(&p).unwrap().shard, (1, 2));
        assert!(!out.join("grid.md").exists());
    }
}
