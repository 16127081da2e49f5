//! The report of an EPLOG experiment and its Markdown text.

use std::fmt::Write as _;

use serde::Serialize;

use super::config::Setting;
use super::exps::RecoveryRow;
use super::run::{find, Commit, RunKey, RunRow, Variant};
use super::targets::{client_counts, exp4_summary, peak, Figure, TargetCheck};
use super::workload::{Trace, TraceName, CHUNK_BYTES};

/// Everything one run of the experiment measured.
#[derive(Serialize, Clone, Debug)]
pub struct Report {
    pub scale: f64,
    pub quick: bool,
    pub traces: Vec<TraceInfo>,
    /// Exps 1–3 on simulated SSDs.
    pub sim: Vec<RunRow>,
    /// Exp 4 on O_DIRECT files.
    pub perf: Vec<RunRow>,
    /// Exp 4 on the emulated EPLOG testbed.
    pub paper: Vec<RunRow>,
    /// Exp 5.
    pub recovery: Vec<RecoveryRow>,
    /// Exp 6.
    pub kv: Vec<super::kv::KvRow>,
    pub targets: Vec<TargetCheck>,
    /// Wall-clock seconds of the whole experiment.
    pub seconds: f64,
}

/// A replayed trace after preparation.
#[derive(Serialize, Clone, Debug)]
pub struct TraceInfo {
    pub name: TraceName,
    pub writes: u64,
    pub avg_write_kib: f64,
    pub wss_mib: f64,
}

impl TraceInfo {
    pub fn of(t: &Trace) -> TraceInfo {
        TraceInfo {
            name: t.name,
            writes: t.reqs.len() as u64,
            avg_write_kib: (t.chunks * CHUNK_BYTES) as f64 / 1024.0 / t.reqs.len().max(1) as f64,
            wss_mib: mib(t.wss),
        }
    }
}

pub(crate) fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// `x / y` with two decimals, or `-` without a peer row.
fn vs(x: f64, y: Option<f64>) -> String {
    y.map(|y| format!("{:.2}", x / y.max(1e-9)))
        .unwrap_or_else(|| "-".into())
}

impl Report {
    /// The report as Markdown: one table per experiment, then the targets.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        self.traces_table(&mut s);
        self.exp12_table(&mut s);
        self.exp3_table(&mut s);
        let files = "Exp 4: requests/s on O_DIRECT files (as fast as possible)";
        perf_table(&mut s, files, &self.perf);
        let files_peak = "Exp 4, secondary: peak requests/s on O_DIRECT files (FIN (6+2), each scheme at its best client count)";
        peak_table(&mut s, files_peak, &self.perf);
        let paper = "Exp 4 on the EPLOG testbed, emulated (Table 1 service times: SSD main array, HDD logs)";
        perf_table(&mut s, paper, &self.paper);
        let paper_peak = "Exp 4 on the EPLOG testbed, emulated, secondary: peak requests/s (FIN (6+2), each scheme at its best client count)";
        peak_table(&mut s, paper_peak, &self.paper);
        self.exp5_table(&mut s);
        super::kv::markdown(&self.kv, &mut s);
        self.targets_table(&mut s);
        s
    }

    fn traces_table(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "Scale {} of the published traces ({:.0} s).\n",
            self.scale, self.seconds
        );
        let _ = writeln!(
            s,
            "| trace | writes | avg write (KiB) | WSS after compaction (MiB) |\n|---|---|---|---|"
        );
        for t in &self.traces {
            let _ = writeln!(
                s,
                "| {} | {} | {:.2} | {:.1} |",
                t.name, t.writes, t.avg_write_kib, t.wss_mib
            );
        }
        if let Some(b) = self.sim.first().map(|x| x.ssd_blocks) {
            let _ = writeln!(s, "\nSimulated SSDs (Exps 1-3): page-mapped FTL, greedy GC, 64 pages x 4 KiB per block, 15% over-provisioning, GC below 5% clean blocks, no wear leveling; {b} blocks per SSD for the first run (sized to the array: data + eplog spare area), vs 16,384 blocks in §5.2. Log devices: simulated HDDs. GC requests = blocks reclaimed per SSD, averaged over the main array.");
        }
    }

    fn exp12_table(&self, s: &mut String) {
        let nil: Vec<&RunRow> = self
            .sim
            .iter()
            .filter(|x| x.commit == Commit::Nil)
            .collect();
        if nil.is_empty() {
            return;
        }
        let _ = writeln!(s, "\n### Exp 1-2: SSD write traffic and GC per SSD (no parity commit)\n\n| trace | setting | scheme | SSD writes (MiB) | vs md | log writes (MiB) | GC per SSD | vs md |\n|---|---|---|---|---|---|---|---|");
        for x in nil {
            let md = find(&self.sim, RunKey::plain(x.trace, x.setting, Variant::MD, 1));
            let wr = md.map(|m| x.ssd_write_bytes as f64 / m.ssd_write_bytes.max(1) as f64);
            let gr = match md {
                Some(m) if m.gc_per_ssd > 0.0 => format!("{:.2}", x.gc_per_ssd / m.gc_per_ssd),
                Some(_) => "-".into(),
                None => String::new(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} | {:.2} | {:.1} | {:.1} | {gr} |",
                x.trace,
                x.setting,
                x.scheme,
                mib(x.ssd_write_bytes),
                wr.unwrap_or(0.0),
                mib(x.log_write_bytes),
                x.gc_per_ssd,
            );
        }
    }

    fn exp3_table(&self, s: &mut String) {
        let c3: Vec<&RunRow> = self
            .sim
            .iter()
            .filter(|x| x.scheme == Variant::EPLOG && x.setting == Setting::SIX_TWO)
            .collect();
        if !c3.iter().any(|x| x.commit != Commit::Nil) {
            return;
        }
        let _ = writeln!(s, "\n### Exp 3: parity commit frequency, eplog (6+2)\n\n| trace | commit | SSD writes (MiB) | vs nil | vs md | GC per SSD | commits |\n|---|---|---|---|---|---|---|");
        for x in c3 {
            let writes = |v| {
                find(&self.sim, RunKey::plain(x.trace, Setting::SIX_TWO, v, 1))
                    .map(|n| x.ssd_write_bytes as f64 / n.ssd_write_bytes.max(1) as f64)
                    .unwrap_or(0.0)
            };
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {:.3} | {:.2} | {:.1} | {} |",
                x.trace,
                x.commit,
                mib(x.ssd_write_bytes),
                writes(Variant::EPLOG),
                writes(Variant::MD),
                x.gc_per_ssd,
                x.commits
            );
        }
    }

    fn exp5_table(&self, s: &mut String) {
        if self.recovery.is_empty() {
            return;
        }
        let _ = writeln!(s, "\n### Exp 5: recovery throughput, FIN (6+2) eplog, two failed SSDs rebuilt in place (O_DIRECT files)\n\n| case | batch | MB/s | recovered (MiB) | s |\n|---|---|---|---|---|");
        for x in &self.recovery {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {:.1} | {:.3} |",
                x.case,
                x.batch,
                x.mb_per_s,
                mib(x.recovered_bytes),
                x.seconds
            );
        }
    }

    /// The primary targets, a plain statement of which Exp 4 targets are met where, then the
    /// secondary rows under their own heading.
    fn targets_table(&self, s: &mut String) {
        if self.targets.is_empty() {
            return;
        }
        let _ = writeln!(s, "\n### Targets ((6+2); Exps 1-5 on FIN)\n");
        target_rows(
            s,
            self.targets.iter().filter(|t| t.figure == Figure::Primary),
        );
        let summary = exp4_summary(&self.targets);
        if !summary.is_empty() {
            let _ = writeln!(
                s,
                "\nExp 4, primary figures (each client count, every scheme under the same load):\n"
            );
            for line in summary {
                let _ = writeln!(s, "- {line}");
            }
        }
        let mut secondary = self
            .targets
            .iter()
            .filter(|t| t.figure == Figure::Secondary)
            .peekable();
        if secondary.peek().is_some() {
            let _ = writeln!(s, "\n#### Secondary: each scheme at its own peak client count\n\nThese compare runs at different client counts; they do not replace a primary row above.\n");
            target_rows(s, secondary);
        }
    }
}

fn target_rows<'a>(s: &mut String, targets: impl Iterator<Item = &'a TargetCheck>) {
    let _ = writeln!(s, "| target | measured | wanted | met |\n|---|---|---|---|");
    for t in targets {
        let met = if t.met { "yes" } else { "no" };
        let _ = writeln!(s, "| {} | {:.2} | {} | {met} |", t.what, t.ratio, t.target);
    }
}

/// Each scheme's peak requests/s over the client counts of one testbed (FIN (6+2), no commit).
pub(crate) fn peak_table(s: &mut String, title: &str, rows: &[RunRow]) {
    if client_counts(rows).len() < 2 {
        return;
    }
    let _ = writeln!(s, "\n### {title}\n\n| scheme | peak req/s | at clients | vs md peak | vs pl peak |\n|---|---|---|---|---|");
    let peak_rps = |v| peak(rows, v).map(|p| p.requests_per_s);
    for v in [
        Variant::MD,
        Variant::PL,
        Variant::EPLOG,
        Variant::EplogNoStripeBuffer,
    ] {
        if let Some(x) = peak(rows, v) {
            let _ = writeln!(
                s,
                "| {v} | {:.0} | {} | {} | {} |",
                x.requests_per_s,
                x.clients,
                vs(x.requests_per_s, peak_rps(Variant::MD)),
                vs(x.requests_per_s, peak_rps(Variant::PL))
            );
        }
    }
}

/// One Exp 4 table: a row per run, with ratios to md and pl at the same setting and clients.
fn perf_table(s: &mut String, title: &str, rows: &[RunRow]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n### {title}\n\n| trace | setting | clients | scheme | commit | mode | req/s | vs md | vs pl | device ops per write | device KiB per write | device MB/s | writes per batch | CPU load | commit s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for x in rows {
        // Bytes the devices moved (main reads and writes, log writes), commit work included.
        let moved = x.ssd_read_bytes + x.ssd_write_bytes + x.log_write_bytes;
        let peer = |v| {
            find(rows, RunKey::plain(x.trace, x.setting, v, x.clients)).map(|m| m.requests_per_s)
        };
        let batch = x
            .batch
            .map(|b| format!("{b:.2} ({:.0} µs)", x.batch_us.unwrap_or(0.0)))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.0} | {} | {} | {:.2} | {:.1} | {:.0} | {batch} | {:.2} | {:.3} |",
            x.trace,
            x.setting,
            x.clients,
            x.scheme,
            x.commit,
            if x.degraded { "degraded" } else { "normal" },
            x.requests_per_s,
            vs(x.requests_per_s, peer(Variant::MD)),
            vs(x.requests_per_s, peer(Variant::PL)),
            x.dev_ops_per_req,
            moved as f64 / 1024.0 / x.requests.max(1) as f64,
            moved as f64 / 1e6 / x.seconds.max(1e-9),
            x.cpu_load,
            x.commit_seconds
        );
    }
}
