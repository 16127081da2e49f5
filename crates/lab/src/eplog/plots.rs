//! The experiment's figures: Exps 1–2 by trace, Exp 4 by setting and by clients, Exp 5 by batch.

use std::path::{Path, PathBuf};

use super::config::{Setting, Testbed};
use super::exps::{RecoveryCase, RECOVERY_BATCHES};
use super::report::{mib, Report};
use super::rig::Backing;
use super::run::{find, RunKey, RunRow, Variant};
use super::targets::client_counts;
use super::workload::TraceName;
use crate::plot::Bars;
use crate::Result;

/// One bar series per variant, one value per category (0 where `value` has none).
fn series<C>(
    variants: &[Variant],
    cats: &[C],
    value: impl Fn(Variant, &C) -> Option<f64>,
) -> Vec<(String, Vec<f64>)> {
    variants
        .iter()
        .map(|&v| {
            let vals = cats.iter().map(|c| value(v, c).unwrap_or(0.0)).collect();
            (v.to_string(), vals)
        })
        .collect()
}

const SCHEMES: [Variant; 3] = [Variant::MD, Variant::PL, Variant::EPLOG];

/// Exp 4 plots of one testbed: requests/s by setting (one client) and by clients at (6+2).
fn exp4(rows: &[RunRow], out: &Path, prefix: &str, backing: Backing) -> Result<Vec<PathBuf>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let by_setting = Bars {
        title: &format!("Exp 4: FIN requests/s ({backing}, one client)"),
        x_label: "RAID setting (k+m)",
        y_label: "requests/s",
        categories: Setting::ALL.iter().map(|s| s.to_string()).collect(),
        series: series(&SCHEMES, &Setting::ALL, |v, &s| {
            find(rows, RunKey::plain(TraceName::Fin, s, v, 1)).map(|x| x.requests_per_s)
        }),
        stacked: false,
    };
    let mut files = vec![out.join(format!("{prefix}-throughput.svg"))];
    by_setting.write_svg(&files[0])?;
    let clients = client_counts(rows);
    if clients.len() > 1 {
        let variants = [
            Variant::MD,
            Variant::PL,
            Variant::EPLOG,
            Variant::EplogNoStripeBuffer,
        ];
        let by_clients = Bars {
            title: &format!("Exp 4: FIN (6+2) requests/s by concurrent clients ({backing})"),
            x_label: "concurrent clients",
            y_label: "requests/s",
            categories: clients.iter().map(|c| c.to_string()).collect(),
            series: series(&variants, &clients, |v, &c| {
                find(rows, RunKey::fin(v, c)).map(|x| x.requests_per_s)
            }),
            stacked: false,
        };
        files.push(out.join(format!("{prefix}-clients.svg")));
        by_clients.write_svg(&files[1])?;
    }
    Ok(files)
}

/// Exps 1–2 at (6+2) by trace.
fn simulated(r: &Report, out: &Path) -> Result<Vec<PathBuf>> {
    if r.sim.is_empty() {
        return Ok(Vec::new());
    }
    let traces: Vec<TraceName> = r.traces.iter().map(|t| t.name).collect();
    let by_trace = |f: fn(&RunRow) -> f64| {
        series(&SCHEMES, &traces, |v, &t| {
            find(&r.sim, RunKey::plain(t, Setting::SIX_TWO, v, 1)).map(f)
        })
    };
    let cats: Vec<String> = traces.iter().map(|t| t.to_string()).collect();
    let plots = [
        (
            "exp1-write-traffic.svg",
            "Exp 1: SSD write traffic, (6+2)",
            "SSD writes (MiB)",
            by_trace(|x| mib(x.ssd_write_bytes)),
        ),
        (
            "exp2-gc.svg",
            "Exp 2: GC requests per SSD, (6+2)",
            "GC requests per SSD",
            by_trace(|x| x.gc_per_ssd),
        ),
    ];
    let mut files = Vec::new();
    for (name, title, y_label, series) in plots {
        let bars = Bars {
            title,
            x_label: "trace",
            y_label,
            categories: cats.clone(),
            series,
            stacked: false,
        };
        files.push(out.join(name));
        bars.write_svg(files.last().expect("just pushed"))?;
    }
    Ok(files)
}

/// Exp 5: recovery throughput by batch size, one series per case.
fn recovery(r: &Report, out: &Path) -> Result<Vec<PathBuf>> {
    if r.recovery.is_empty() {
        return Ok(Vec::new());
    }
    let series = RecoveryCase::ALL
        .iter()
        .map(|&case| {
            let v = RECOVERY_BATCHES.iter().map(|&b| {
                r.recovery
                    .iter()
                    .find(|x| x.case == case && x.batch == b)
                    .map_or(0.0, |x| x.mb_per_s)
            });
            (case.to_string(), v.collect())
        })
        .collect();
    let bars = Bars {
        title: "Exp 5: recovery throughput vs batch size",
        x_label: "rebuild batch (stripes)",
        y_label: "recovery throughput (MB/s)",
        categories: RECOVERY_BATCHES
            .iter()
            .map(|b| format!("{b} stripes"))
            .collect(),
        series,
        stacked: false,
    };
    let path = out.join("exp5-recovery.svg");
    bars.write_svg(&path)?;
    Ok(vec![path])
}

/// Every figure of the report, written into `out`; returns the files written.
pub fn write_all(r: &Report, out: &Path) -> Result<Vec<PathBuf>> {
    let mut files = simulated(r, out)?;
    files.extend(exp4(
        &r.perf,
        out,
        "exp4",
        Backing::Testbed(Testbed::Files),
    )?);
    files.extend(exp4(
        &r.paper,
        out,
        "exp4-paper",
        Backing::Testbed(Testbed::Paper),
    )?);
    files.extend(recovery(r, out)?);
    files.extend(super::kv::plots(&r.kv, out)?);
    Ok(files)
}
