//! `ecstack experiment codfs --exp reserve`: CodFS §5.3.2 (Fig. 5.6, 5.7). Algorithm 1
//! (`ecstack_sim::reserve`) against fixed reserves of 2, 8 and 16 MiB over the Harvard DEAS03 NFS
//! trace: rs-cauchy (10,8), 16 MiB segments, α = 0.3, shrinks at 00:00 and 12:00, 16 MiB at first;
//! Γ (reserved space over data + parity) after each shrink and merges per 1,000 writes per day.
//!
//! The trace is `ecstack trace`'s preset `harvard-deas03` (synthesized to CodFS's Table 3.1) at
//! `scale`; a scaled trace also compresses its 41 days, so its clock is stretched back by 1/scale
//! and the shrinks still fall twice a day over 41 days.

use std::path::Path;

use ecstack_sim::reserve::{simulate, ReserveReport, ReserveSimConfig, Strategy, Write};
use ecstack_trace::record::Op;
use ecstack_trace::synth::{preset, SynthStream};
use serde::Serialize;

use crate::plot::Lines;
use crate::table::write_csv;
use crate::{LabError, Result};

/// The seed's figures at the end of the 41 days (§5.3.2): Γ per strategy.
pub const SEED_GAMMA: [(&str, f64); 5] = [
    ("fixed 2 MiB", 0.2),
    ("fixed 8 MiB", 0.8),
    ("fixed 16 MiB", 1.6),
    ("shrink only", 0.36),
    ("shrink+merge", 0.12),
];

pub const PRESET: &str = "harvard-deas03";

#[derive(Debug, Clone, Serialize)]
pub struct ReserveConfig {
    /// Size of the trace relative to the published one (173 M writes at 1.0).
    pub scale: f64,
    pub seed: u64,
    pub sim: ReserveSimConfig,
}

impl ReserveConfig {
    pub fn new(scale: f64, seed: u64) -> ReserveConfig {
        ReserveConfig {
            scale,
            seed,
            sim: ReserveSimConfig::codfs(),
        }
    }

    pub fn validate(&self) -> Result<()> {
        if !(self.scale > 0.0 && self.scale <= 1.0) {
            return Err(LabError::Config {
                field: "scale",
                msg: format!("{} is not in (0, 1]", self.scale),
            });
        }
        self.sim.validate().map_err(|msg| LabError::Config {
            field: "reserve",
            msg,
        })
    }
}

/// The experiment's report.
#[derive(Debug, Clone, Serialize)]
pub struct ReserveExperiment {
    pub scale: f64,
    pub seed: u64,
    pub report: ReserveReport,
}

/// One row of `codfs-reserve.csv`: a strategy at one shrink time.
#[derive(Serialize)]
struct GammaRow<'a> {
    strategy: &'a str,
    day: f64,
    gamma: f64,
    zero_reserve_pct: f64,
}

/// One row of `codfs-reserve-merges.csv`.
#[derive(Serialize)]
struct MergeRow<'a> {
    strategy: &'a str,
    day: usize,
    writes: u64,
    merges: u64,
    merges_per_1000_writes: f64,
}

/// Runs the simulation; `log` hears progress lines.
pub fn run(cfg: &ReserveConfig, log: &dyn Fn(&str)) -> Result<ReserveExperiment> {
    cfg.validate()?;
    let p = preset(PRESET).map_err(|e| LabError::Run(e.to_string()))?;
    let stream = SynthStream::new(&p.generator, cfg.scale, cfg.seed)
        .map_err(|e| LabError::Run(format!("{PRESET} at scale {}: {e}", cfg.scale)))?;
    log(&format!(
        "reserve: {PRESET} at scale {} (~{:.1} M writes), {} strategies in one pass",
        cfg.scale,
        172.7 * cfg.scale,
        cfg.sim.strategies.len()
    ));
    let stretch = 1.0 / cfg.scale;
    let writes = stream.filter(|r| r.op == Op::Write).map(|r| Write {
        time_ns: (r.time_ns as f64 * stretch) as u64,
        file: r.file,
        offset: r.offset,
        len: r.len,
    });
    let report = simulate(writes, &cfg.sim).map_err(LabError::Run)?;
    log(&format!(
        "reserve: {} writes ({} updates) over {} segments, {} days",
        report.writes,
        report.updates,
        report.segments,
        report.writes_per_day.len()
    ));
    Ok(ReserveExperiment {
        scale: cfg.scale,
        seed: cfg.seed,
        report,
    })
}

impl ReserveExperiment {
    fn end_gamma(&self, i: usize) -> f64 {
        self.report.results[i]
            .samples
            .last()
            .map_or(0.0, |s| s.gamma)
    }

    fn mean_merges_per_1000(&self, i: usize) -> f64 {
        let m: u64 = self.report.results[i].merges;
        if self.report.writes == 0 {
            0.0
        } else {
            1000.0 * m as f64 / self.report.writes as f64
        }
    }

    pub fn markdown(&self) -> String {
        let r = &self.report;
        let c = &r.config;
        let mut s = String::from("# CodFS reserved space (§5.3.2, Fig. 5.6 and 5.7)\n\n");
        s += &format!(
            "Trace `{PRESET}` (CodFS Table 3.1, synthesized) at scale {}, its clock stretched back to 41 days: {} writes, {} of them updates ({:.1} %, {:.1} GiB of deltas per parity chunk), {} segments of {} MiB. RS ({},{}), chunk {} MiB, α = {}, shrinks at {:?} h, adaptive reserves start at {} MiB; u_0 = {}; use(p) = the reserve's peak occupancy in the interval (docs/cluster.md \"Reserved space\").\n\n",
            self.scale,
            r.writes,
            r.updates,
            if r.writes == 0 { 0.0 } else { 100.0 * r.updates as f64 / r.writes as f64 },
            r.update_bytes as f64 / (1u64 << 30) as f64,
            r.segments,
            c.segment_bytes >> 20,
            c.k + c.m,
            c.k,
            c.chunk_bytes() >> 20,
            c.alpha,
            c.shrink_hours,
            c.initial_bytes >> 20,
            c.u0
        );
        s += "| strategy | Γ at the end: ours | the seed's | parity chunks with no reserve | merges per 1,000 writes (whole trace) | updates applied in place |\n|---|---:|---:|---:|---:|---:|\n";
        for (i, res) in r.results.iter().enumerate() {
            let seed = SEED_GAMMA
                .iter()
                .find(|(l, _)| *l == res.label)
                .map_or("-".to_string(), |(_, g)| format!("{g:.2}"));
            let zero = res.samples.last().map_or(0.0, |x| x.zero_reserve_pct);
            s += &format!(
                "| {} | {:.3} | {seed} | {zero:.1} % | {:.2} | {} |\n",
                res.label,
                self.end_gamma(i),
                self.mean_merges_per_1000(i),
                res.in_place
            );
        }
        s += "\nThe seed: the fixed reserves keep Γ at 0.2, 0.8 and 1.6; shrink only ends near 0.36 and shrink+merge near 0.12, with about 13 % of parity chunks at zero reserve; fewer than 1 % of writes wait for a merge under every strategy. Files: `codfs-reserve.csv` (Γ after each shrink), `codfs-reserve-merges.csv` (per day), `codfs-reserve-gamma.svg`, `codfs-reserve-merges.svg`.\n";
        s
    }

    /// `codfs-reserve.md`, the two CSVs and the two SVGs in `out`.
    pub fn write(&self, out: &Path) -> Result<()> {
        std::fs::create_dir_all(out).map_err(crate::io_at(out))?;
        let md = out.join("codfs-reserve.md");
        std::fs::write(&md, self.markdown()).map_err(crate::io_at(&md))?;
        let r = &self.report;
        let mut gamma = Vec::new();
        let mut merges = Vec::new();
        for (i, res) in r.results.iter().enumerate() {
            for x in &res.samples {
                gamma.push(GammaRow {
                    strategy: &res.label,
                    day: x.time_s / 86_400.0,
                    gamma: x.gamma,
                    zero_reserve_pct: x.zero_reserve_pct,
                });
            }
            for (day, (&w, per)) in r
                .writes_per_day
                .iter()
                .zip(r.merges_per_1000(i))
                .enumerate()
            {
                merges.push(MergeRow {
                    strategy: &res.label,
                    day,
                    writes: w,
                    merges: res.merges_per_day[day],
                    merges_per_1000_writes: per,
                });
            }
        }
        write_csv(&out.join("codfs-reserve.csv"), &gamma)?;
        write_csv(&out.join("codfs-reserve-merges.csv"), &merges)?;
        Lines {
            title: "Reserved space overhead Γ (CodFS Fig. 5.6)",
            x_label: "day",
            y_label: "Γ (reserved / data + parity)",
            series: r
                .results
                .iter()
                .map(|res| {
                    (
                        res.label.clone(),
                        res.samples
                            .iter()
                            .map(|x| (x.time_s / 86_400.0, x.gamma))
                            .collect(),
                    )
                })
                .collect(),
            y_range: None,
        }
        .write_svg(&out.join("codfs-reserve-gamma.svg"))?;
        Lines {
            title: "Merges per 1,000 writes (CodFS Fig. 5.7)",
            x_label: "day",
            y_label: "merges per 1,000 writes",
            series: (0..r.results.len())
                .map(|i| {
                    (
                        r.results[i].label.clone(),
                        r.merges_per_1000(i)
                            .into_iter()
                            .enumerate()
                            .map(|(d, v)| (d as f64, v))
                            .collect(),
                    )
                })
                .collect(),
            y_range: None,
        }
        .write_svg(&out.join("codfs-reserve-merges.svg"))
    }
}

/// Strategies by name: `fixed-2M`, `shrink-only`, `shrink-merge`.
pub fn parse_strategy(s: &str) -> Result<Strategy> {
    match s {
        "shrink-only" => Ok(Strategy::ShrinkOnly),
        "shrink-merge" | "shrink+merge" => Ok(Strategy::ShrinkMerge),
        _ => s
            .strip_prefix("fixed-")
            .and_then(|n| ecstack_base::size::parse_size(n).ok())
            .map(Strategy::Fixed)
            .ok_or_else(|| LabError::Config {
                field: "strategies",
                msg: format!(
                    "{s:?} is not a strategy (shrink-only, shrink-merge, fixed-SIZE such as fixed-8M)"
                ),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_reports_every_strategy_and_writes_its_files() {
        let cfg = ReserveConfig::new(0.0005, 1);
        let e = run(&cfg, &|_| {}).unwrap();
        assert!(
            e.report.writes > 50_000 && e.report.updates > 0,
            "{:?}",
            e.report.writes
        );
        // 41 days: 82 shrink times (the trace's first and last minutes aside).
        assert!(
            e.report.writes_per_day.len() >= 40,
            "{}",
            e.report.writes_per_day.len()
        );
        assert!((e.end_gamma(0) - 0.2).abs() < 1e-9);
        assert!((e.end_gamma(2) - 1.6).abs() < 1e-9);
        // The adaptive reserves end below the 16 MiB baseline, merge-after-shrink lowest.
        assert!(e.end_gamma(4) <= e.end_gamma(3) && e.end_gamma(3) < 1.6);
        let dir = tempfile::tempdir().unwrap();
        e.write(dir.path()).unwrap();
        for f in [
            "codfs-reserve.md",
            "codfs-reserve.csv",
            "codfs-reserve-merges.csv",
            "codfs-reserve-gamma.svg",
            "codfs-reserve-merges.svg",
        ] {
            assert!(dir.path().join(f).exists(), "{f}");
        }
        assert!(e.markdown().contains("shrink+merge"));
    }

    #[test]
    fn bad_settings_name_their_flag() {
        let e = ReserveConfig::new(2.0, 1).validate().unwrap_err();
        assert!(e.to_string().contains("scale"), "{e}");
        assert_eq!(
            parse_strategy("fixed-8M").unwrap(),
            Strategy::Fixed(8 << 20)
        );
        assert_eq!(
            parse_strategy("shrink-merge").unwrap(),
            Strategy::ShrinkMerge
        );
        assert!(parse_strategy("grow").is_err());
    }
}
