//! EPLOG §5 Experiments 1–5 re-run on this machine with the array layer.
//!
//! Traces: the trace crate's synthesized FIN/WEB/USR/MDS presets (EPLOG Table 2 statistics), writes
//! only, rounded to the 4 KiB chunk and compacted by 1 MiB segments (§5.1); the working set is written
//! sequentially (whole stripes) before each replay, so every replayed write is an update.
//!
//! * Exp 1 (write traffic to SSDs) and Exp 2 (GC requests per SSD) share runs on simulated SSDs
//!   (page-mapped FTL, greedy GC, 15 % over-provisioning, GC below 5 % clean blocks, 64 × 4 KiB pages
//!   per block as §5.2; the number of blocks is scaled to the array, see the report).
//! * Exp 3: eplog with parity commit nil / all / every 1K / every 10K writes (+ md), traffic and GC.
//! * Exp 4: requests/s replaying as fast as possible on file-backed devices with O_DIRECT (main and log
//!   devices are files; parity commit nil/all/10K; degraded commit with two failed SSDs).
//! * Exp 5: recovery throughput of a double failure vs batch size, before/after replay, prefetch on/off.
//!
//! Exp 4 also runs on an emulated copy of the paper's testbed ([`Testbed::Paper`]): every device is
//! a RAM device behind a `Throttled` wrapper that charges each request the service time of the
//! paper's devices (Table 1: Plextor SSDs for the main array, Seagate HDDs for the logs; one request
//! at a time per device, devices independent of each other). On this machine all device files share
//! one virtual disk, which serves requests nearly one after another; the emulation shows what the
//! schemes do on separate devices with the paper's read/write costs.
//!
//! ```no_run
//! use ecstack_lab::eplog::{run, EplogConfig, Exp, Setting, Testbed};
//! let mut cfg = EplogConfig::new(true, std::env::temp_dir().join("eplog-devices"));
//! cfg.exps = vec![Exp::RequestsPerSecond];
//! cfg.settings = vec![Setting::SIX_TWO];
//! cfg.testbeds = vec![Testbed::Paper];
//! let report = run(&cfg, &|line| eprintln!("{line}")).unwrap();
//! report.write(std::path::Path::new("eplog-results")).unwrap();
//! ```

mod config;
mod exps;
mod kv;
mod plots;
mod report;
mod rig;
mod run;
mod targets;
mod workload;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::Instant;

pub use config::{EplogConfig, Exp, KvCells, KvScale, Setting, Testbed};
pub use exps::{RecoveryCase, RecoveryRow, RECOVERY_BATCHES};
pub use kv::{KvRow, KvWorkload, CACHE_PCT, PAIR_BYTES};
pub use report::{Report, TraceInfo};
pub use rig::{build, prewrite, Backing};
pub use run::{find, Commit, RunKey, RunRow, Variant};
pub use targets::{client_counts, exp4_summary, peak, Figure, TargetCheck};
pub use workload::{Trace, TraceName, CHUNK_BYTES};

use crate::{io_at, Result};
use exps::Ctx;
use rig::DeviceFiles;

/// Run the experiments `cfg` asks for; `progress` gets one line per run.
pub fn run(cfg: &EplogConfig, progress: &dyn Fn(&str)) -> Result<Report> {
    cfg.validate()?;
    let start = Instant::now();
    let mut traces = Vec::new();
    // Exp 6 replays no trace.
    let names = if cfg.exps.iter().all(|&e| e == Exp::KvStore) {
        &[][..]
    } else {
        &TraceName::ALL[..]
    };
    for &name in names {
        progress(&format!("synthesizing {name} (scale {})", cfg.scale));
        traces.push(Trace::load(name, cfg.scale, cfg.seed)?);
    }
    std::fs::create_dir_all(&cfg.dir).map_err(io_at(&cfg.dir))?;
    let cx = Ctx {
        cfg,
        dir: &cfg.dir,
        progress,
    };
    let needs_files = cfg.on(Testbed::Files) || cfg.wants(Exp::Recovery);
    let files = if needs_files {
        progress(&format!(
            "pre-filling the device files of exps 4-5 in {}",
            cfg.dir.display()
        ));
        Some(DeviceFiles::create(&cfg.dir, &traces)?)
    } else {
        None
    };
    let mut report = runs(&cx, &traces)?;
    drop(files);
    report.targets = targets::simulated(&report.sim);
    report.targets.extend(targets::exp4(
        &report.perf,
        Backing::Testbed(Testbed::Files),
    ));
    report.targets.extend(targets::exp4(
        &report.paper,
        Backing::Testbed(Testbed::Paper),
    ));
    report.targets.extend(targets::recovery(&report.recovery));
    report.targets.extend(kv::targets(&report.kv));
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}

/// Every run `cx.cfg` asks for, into a report without targets.
fn runs(cx: &Ctx, traces: &[Trace]) -> Result<Report> {
    let cfg = cx.cfg;
    let mut r = Report {
        scale: cfg.scale,
        quick: cfg.quick,
        traces: traces.iter().map(TraceInfo::of).collect(),
        sim: Vec::new(),
        perf: Vec::new(),
        paper: Vec::new(),
        recovery: Vec::new(),
        kv: Vec::new(),
        targets: Vec::new(),
        seconds: 0.0,
    };
    if cfg.wants(Exp::KvStore) {
        r.kv = kv::runs(cx)?;
    }
    let Some(fin) = traces.first() else {
        return Ok(r);
    };
    if [Exp::WriteTraffic, Exp::Gc, Exp::CommitFrequency]
        .iter()
        .any(|&e| cfg.wants(e))
    {
        r.sim = exps::simulated(cx, traces)?;
    }
    // Exps 4b/4c: every trace (FIN and MDS with `quick`) at (6+2).
    let per_trace: Vec<&Trace> = if cfg.quick {
        traces
            .iter()
            .filter(|t| matches!(t.name, TraceName::Fin | TraceName::Mds))
            .collect()
    } else {
        traces.iter().collect()
    };
    let many: Vec<usize> = cfg.clients.iter().copied().filter(|&c| c > 1).collect();
    if cfg.on(Testbed::Files) {
        r.perf = exps::exp4_grid(cx, fin, &[1], Testbed::Files)?;
        r.perf
            .extend(exps::exp4_traces(cx, &per_trace, Testbed::Files)?);
        r.perf
            .extend(exps::exp4_grid(cx, fin, &many, Testbed::Files)?);
    }
    if cfg.on(Testbed::Paper) {
        let all: Vec<usize> = std::iter::once(1).chain(many.iter().copied()).collect();
        r.paper = exps::exp4_grid(cx, fin, &all, Testbed::Paper)?;
        r.paper
            .extend(exps::exp4_traces(cx, &per_trace, Testbed::Paper)?);
    }
    if cfg.wants(Exp::Recovery) {
        r.recovery = exps::recovery(cx, fin)?;
    }
    Ok(r)
}

impl Report {
    /// Write the report into `out` (created if missing): `eplog.md`, a CSV file per non-empty table
    /// and the SVG figures. Returns the files written.
    pub fn write(&self, out: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(out).map_err(io_at(out))?;
        let md = out.join("eplog.md");
        std::fs::write(&md, self.markdown()).map_err(io_at(&md))?;
        let mut files = vec![md];
        let tables = [
            ("eplog-sim.csv", &self.sim),
            ("eplog-perf.csv", &self.perf),
            ("eplog-perf-paper.csv", &self.paper),
        ];
        for (name, rows) in tables {
            if !rows.is_empty() {
                files.push(out.join(name));
                crate::table::write_csv(&out.join(name), rows)?;
            }
        }
        if !self.kv.is_empty() {
            files.push(out.join("eplog-kv.csv"));
            crate::table::write_csv(&out.join("eplog-kv.csv"), &self.kv)?;
        }
        if !self.recovery.is_empty() {
            files.push(out.join("eplog-recovery.csv"));
            crate::table::write_csv(&out.join("eplog-recovery.csv"), &self.recovery)?;
        }
        files.extend(plots::write_all(self, out)?);
        Ok(files)
    }
}
