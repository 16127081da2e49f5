//! `ecstack experiment robustore`: every experiment of RobuSTore's ch. 6 (Table 6-2) on the simulator
//! of `ecstack_sim::robustore`, 100 accesses per point, as CSV + SVG + a Markdown report with the
//! seed's figures (as far as its text gives numbers) beside ours.
//!
//! An experiment *group* is named by its first figure (`6-6` draws Figs. 6-6, 6-7 and 6-8: bandwidth,
//! latency deviation and I/O overhead of one sweep); any of its figures selects it. A run is a list of
//! *jobs* (group, variant, x, scheme), each one simulator point with its own seed derived from the
//! run's seed, the group, the variant and the x index (all schemes of a point share it). Jobs run in
//! parallel on `threads` workers; results are placed by job index, so the output does not depend on
//! the thread count. `--shard i/N` runs jobs i, i+N, i+2N, ... and writes their rows alone;
//! `merge` gathers the shard files and renders exactly what one machine would have.

pub mod cluster;
mod reasons;
mod report;
mod rows;

pub use rows::{Row, GROUPS};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use ecstack_sim::robustore::{
    run_point, BgInterval, Config, Op, Rateless, Scheme, Split, Variation,
};

use crate::{io_at, LabError, Result};

/// What to run.
#[derive(Clone, Debug)]
pub struct RobustoreConfig {
    /// Group ids (first figures), in chapter order.
    pub groups: Vec<&'static str>,
    pub out: PathBuf,
    pub seed: u64,
    /// Small sizes, few points and accesses (seconds): the CI scale.
    pub quick: bool,
    /// Accesses per point (default 100; quick 4).
    pub accesses: Option<usize>,
    pub threads: usize,
    /// (i, N): run only jobs with index ≡ i (mod N) and write their rows alone.
    pub shard: Option<(usize, usize)>,
    /// RobuSTore's rateless code (the seed's: LT, C = 1, δ = 0.5). Points keep their seeds, so an LT
    /// and a RaptorQ run see the same disks.
    pub code: Rateless,
    /// How RRAID-A halves a disk's unreceived data (default: whole blocks, §6.2.1).
    pub rraid_a_split: Split,
}

/// RRAID-A's halving unit's label in rows and report.
pub fn split_label(split: Split) -> &'static str {
    match split {
        Split::Block => "block",
        Split::Sector => "sector",
    }
}

/// A code's label in rows and report.
pub fn code_label(code: Rateless) -> String {
    match code {
        Rateless::Lt { c, delta } => format!("LT C={c} delta={delta}"),
        Rateless::RaptorQ => "RaptorQ".into(),
    }
}

impl RobustoreConfig {
    /// Groups named by any of their figures ("6-7" selects 6-6) or `all`.
    pub fn parse_figs(figs: &[String]) -> Result<Vec<&'static str>> {
        let mut out: Vec<&'static str> = Vec::new();
        for f in figs {
            let f = f
                .trim()
                .trim_start_matches("fig")
                .trim_start_matches(['-', ' ']);
            if f.eq_ignore_ascii_case("all") {
                return Ok(GROUPS.iter().map(|g| g.0).collect());
            }
            let f = f.replace('.', "-");
            let f = f.trim_end_matches(['a', 'b']);
            match GROUPS.iter().find(|g| g.1.contains(&f)) {
                Some(g) => {
                    if !out.contains(&g.0) {
                        out.push(g.0)
                    }
                }
                None => {
                    return Err(LabError::Config {
                        field: "fig",
                        msg: format!("no experiment draws figure {f:?} (6-5 .. 6-36, or all)"),
                    })
                }
            }
        }
        out.sort_by_key(|g| GROUPS.iter().position(|x| x.0 == *g));
        Ok(out)
    }

    /// Parse `i/N`.
    pub fn parse_shard(s: &str) -> Result<(usize, usize)> {
        let err = || LabError::Config {
            field: "shard",
            msg: format!("{s:?}: expected i/N with 0 <= i < N"),
        };
        let (i, n) = s.split_once('/').ok_or_else(err)?;
        let (i, n): (usize, usize) = (
            i.trim().parse().map_err(|_| err())?,
            n.trim().parse().map_err(|_| err())?,
        );
        if n == 0 || i >= n {
            return Err(err());
        }
        Ok((i, n))
    }
}

/// One simulator point of a group.
#[derive(Clone, Debug)]
pub struct Job {
    pub group: &'static str,
    pub variant: String,
    pub x: f64,
    pub x_index: usize,
    pub cfg: Config,
}

fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const MIB: u64 = 1 << 20;

fn redundancy_points(quick: bool) -> Vec<f64> {
    if quick {
        vec![0.0, 1.0, 3.0]
    } else {
        vec![0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    }
}

fn pick(quick: bool, full: &[f64]) -> Vec<f64> {
    if quick {
        vec![full[0], full[full.len() / 2], full[full.len() - 1]]
    } else {
        full.to_vec()
    }
}

/// Is `scheme` defined at redundancy `d` (RAID-0 only at 0; RRAID whole replicas; RobuSTore D > 0)?
fn scheme_at(scheme: Scheme, d: f64) -> bool {
    match scheme {
        Scheme::Raid0 => d == 0.0,
        Scheme::RraidS | Scheme::RraidA => d.fract() == 0.0,
        Scheme::RobuStore => d > 0.0,
    }
}

const COMPETITIVE: Variation = Variation::Background(BgInterval::Uniform {
    lo: 6e-3,
    hi: 200e-3,
});

/// Every job of the given groups, in order.
pub fn jobs(c: &RobustoreConfig) -> Vec<Job> {
    let q = c.quick;
    let accesses = c.accesses.unwrap_or(if q { 4 } else { 100 });
    let size = if q { 64 * MIB } else { 1024 * MIB };
    let mut out = Vec::new();
    for &group in &c.groups {
        let gidx = GROUPS
            .iter()
            .position(|g| g.0 == group)
            .expect("known group") as u64;
        // (variant, x values, config at x for scheme) per group.
        type Make = Box<dyn Fn(f64, Scheme) -> Option<Config>>;
        let code = c.code;
        let rraid_a_split = c.rraid_a_split;
        let base = move |s: Scheme| Config {
            data_bytes: size,
            accesses,
            code,
            rraid_a_split,
            ..Config::baseline(s)
        };
        let variants: Vec<(String, Vec<f64>, Make)> = match group {
            "6-5" => vec![(
                "one disk".into(),
                if q {
                    vec![6.0, 50.0, 200.0]
                } else {
                    vec![
                        0.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 200.0,
                    ]
                },
                Box::new(move |x, s| {
                    (s == Scheme::Raid0).then(|| Config {
                        disks: 1,
                        total_disks: 1,
                        disks_per_filer: 1,
                        data_bytes: if q { 16 * MIB } else { 64 * MIB },
                        // x = 0 stands for intervals drawn uniformly on 6..200 ms.
                        variation: if x == 0.0 {
                            COMPETITIVE
                        } else {
                            Variation::Background(BgInterval::Fixed(x / 1e3))
                        },
                        ..base(s)
                    })
                }),
            )],
            "6-6" => vec![(
                String::new(),
                pick(q, &[2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]),
                Box::new(move |x, s| {
                    Some(Config {
                        disks: x as usize,
                        ..base(s)
                    })
                }),
            )],
            // Only RobuSTore's coded blocks have a size that matters: the plain schemes "can use
            // fractions of data blocks and ignore block boundaries" (§6.3.1), so they keep the
            // baseline's 1 MB stripe unit (at 64 MB they would otherwise stripe 1 GB over 16 disks).
            "6-9" => vec![(
                String::new(),
                pick(q, &[0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
                Box::new(move |x, s| {
                    Some(Config {
                        block_bytes: if s == Scheme::RobuStore {
                            (x * MIB as f64) as u64
                        } else {
                            MIB
                        },
                        ..base(s)
                    })
                }),
            )],
            "6-12" => [size, size / 8]
                .into_iter()
                .map(|sz| {
                    let make: Make = Box::new(move |x, s| {
                        Some(Config {
                            rtt: x / 1e3,
                            data_bytes: sz,
                            ..base(s)
                        })
                    });
                    (
                        format!("{} MB", sz / MIB),
                        pick(q, &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]),
                        make,
                    )
                })
                .collect(),
            "6-15" | "6-18" | "6-21" | "6-26" | "6-29" | "6-32" => {
                let op = match group {
                    "6-15" | "6-26" => Op::Read,
                    "6-18" | "6-29" => Op::Write,
                    _ => Op::ReadAfterWrite,
                };
                let variation = if matches!(group, "6-26" | "6-29" | "6-32") {
                    COMPETITIVE
                } else {
                    Variation::Layout
                };
                vec![(
                    String::new(),
                    redundancy_points(q),
                    Box::new(move |x, s| {
                        scheme_at(s, x).then(|| Config {
                            op,
                            redundancy: x,
                            variation: variation.clone(),
                            ..base(s)
                        })
                    }),
                )]
            }
            "6-24" => vec![(
                String::new(),
                pick(q, &[6.0, 10.0, 20.0, 50.0, 100.0, 200.0]),
                Box::new(move |x, s| {
                    Some(Config {
                        variation: Variation::Background(BgInterval::Fixed(x / 1e3)),
                        ..base(s)
                    })
                }),
            )],
            "6-35" => vec![(
                String::new(),
                vec![0.0, 1.0],
                Box::new(move |x, s| {
                    Some(Config {
                        variation: COMPETITIVE,
                        cache: x == 1.0,
                        ..base(s)
                    })
                }),
            )],
            _ => unreachable!("group list"),
        };
        for (vi, (variant, xs, make)) in variants.into_iter().enumerate() {
            for (xi, &x) in xs.iter().enumerate() {
                let seed = mix(mix(mix(c.seed, gidx), vi as u64), xi as u64);
                for s in Scheme::ALL {
                    if let Some(mut cfg) = make(x, s) {
                        cfg.seed = seed;
                        out.push(Job {
                            group,
                            variant: variant.clone(),
                            x,
                            x_index: xi,
                            cfg,
                        });
                    }
                }
            }
        }
    }
    out
}

fn run_job(i: usize, j: &Job) -> Result<Row> {
    let (p, _) = run_point(&j.cfg).map_err(|e| {
        LabError::Run(format!(
            "figure {} {} x={} {}: {e}",
            j.group, j.variant, j.x, j.cfg.scheme
        ))
    })?;
    Ok(Row {
        group: j.group.to_string(),
        variant: j.variant.clone(),
        x: j.x,
        scheme: j.cfg.scheme,
        bandwidth_mbps: p.bandwidth_mbps,
        latency_mean_s: p.latency_mean_s,
        latency_std_s: p.latency_std_s,
        io_overhead: p.io_overhead,
        disk_overhead: p.disk_overhead,
        reception_overhead: p.reception_overhead,
        bg_utilization: p.bg_utilization,
        accesses: p.accesses,
        seed: j.cfg.seed,
        job: i,
        code: code_label(j.cfg.code),
        rraid_a_split: split_label(j.cfg.rraid_a_split).to_string(),
    })
}

/// Run the selected jobs (all, or one shard) on `threads` workers; rows in job order.
pub fn run_jobs(c: &RobustoreConfig, progress: &(dyn Fn(usize, usize) + Sync)) -> Result<Vec<Row>> {
    let all = jobs(c);
    let mine: Vec<usize> = match c.shard {
        Some((i, n)) => (0..all.len()).filter(|j| j % n == i).collect(),
        None => (0..all.len()).collect(),
    };
    // Longest first: big points (many disks, much redundancy, RRAID-S) would otherwise finish last.
    let mut order = mine.clone();
    order.sort_by_key(|&j| {
        let c = &all[j].cfg;
        std::cmp::Reverse((c.disks as f64 * (1.0 + c.redundancy)) as u64)
    });
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Row>>>> =
        Mutex::new((0..all.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..c.threads.max(1) {
            s.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let Some(&j) = order.get(n) else { break };
                let r = run_job(j, &all[j]);
                results.lock().expect("no worker panicked")[j] = Some(r);
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, order.len());
            });
        }
    });
    let mut results = results.into_inner().expect("no worker panicked");
    let mut rows = Vec::with_capacity(mine.len());
    for j in mine {
        rows.push(results[j].take().expect("every job ran")?);
    }
    Ok(rows)
}

/// The rows file of a run or shard.
pub fn rows_file(out: &Path, shard: Option<(usize, usize)>) -> PathBuf {
    match shard {
        Some((i, n)) => out.join(format!("rows-shard-{i}-of-{n}.csv")),
        None => out.join("rows.csv"),
    }
}

/// Run, and (for a whole run) render figures and report. Returns the files written.
pub fn run(c: &RobustoreConfig, progress: &(dyn Fn(usize, usize) + Sync)) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(&c.out).map_err(io_at(&c.out))?;
    let rows = run_jobs(c, progress)?;
    let file = rows_file(&c.out, c.shard);
    crate::table::write_csv(&file, &rows)?;
    if c.shard.is_some() {
        return Ok(vec![file]);
    }
    let mut files = vec![file];
    files.extend(report::render(&c.out, &rows)?);
    Ok(files)
}

/// Gather `rows-shard-*-of-N.csv` in `dir` (all N shards must be there), write `rows.csv`, figures and
/// report exactly as one machine would have.
pub fn merge(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut rows: Vec<Row> = Vec::new();
    let mut shards: Vec<(usize, usize)> = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(io_at(dir))?;
    for e in entries {
        let e = e.map_err(io_at(dir))?;
        let name = e.file_name().to_string_lossy().to_string();
        let Some(rest) = name
            .strip_prefix("rows-shard-")
            .and_then(|r| r.strip_suffix(".csv"))
        else {
            continue;
        };
        let Some((i, n)) = rest.split_once("-of-") else {
            continue;
        };
        let (Ok(i), Ok(n)) = (i.parse::<usize>(), n.parse::<usize>()) else {
            continue;
        };
        shards.push((i, n));
        let path = e.path();
        let mut r = csv::Reader::from_path(&path)
            .map_err(|e| LabError::Run(format!("{}: {e}", path.display())))?;
        for row in r.deserialize() {
            let row: Row = row.map_err(|e| LabError::Run(format!("{}: {e}", path.display())))?;
            rows.push(row);
        }
    }
    if shards.is_empty() {
        return Err(LabError::Config {
            field: "merge",
            msg: format!("no rows-shard-i-of-N.csv in {}", dir.display()),
        });
    }
    let n = shards[0].1;
    shards.sort();
    shards.dedup();
    if shards.iter().any(|s| s.1 != n) || shards.len() != n {
        return Err(LabError::Config {
            field: "merge",
            msg: format!(
                "{}: need shards 0..{n} of one split, found {:?}",
                dir.display(),
                shards
            ),
        });
    }
    rows.sort_by_key(|r| r.job);
    let file = rows_file(dir, None);
    crate::table::write_csv(&file, &rows)?;
    let mut files = vec![file];
    files.extend(report::render(dir, &rows)?);
    Ok(files)
}
