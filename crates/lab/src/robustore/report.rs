//! Figures (SVG through `crate::plot`), per-group CSV and the Markdown report: our numbers, and beside
//! them what the seed's text says of its figures (it gives no data files, only numbers and shapes in
//! prose), each with a plain verdict.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ecstack_sim::robustore::Scheme;

use super::reasons;
use super::rows::{Row, GROUPS};
use crate::plot::{Bars, Lines, Scale, ScaledLines};
use crate::Result;

#[derive(Clone, Copy)]
enum Metric {
    Bandwidth,
    LatencyStd,
    IoOverhead,
    BgUtilization,
}

impl Metric {
    fn of(&self, r: &Row) -> f64 {
        match self {
            Metric::Bandwidth => r.bandwidth_mbps,
            Metric::LatencyStd => r.latency_std_s,
            Metric::IoOverhead => r.io_overhead,
            Metric::BgUtilization => r.bg_utilization,
        }
    }
    fn label(&self) -> &'static str {
        match self {
            Metric::Bandwidth => "bandwidth (MB/s)",
            Metric::LatencyStd => "latency std. deviation (s)",
            Metric::IoOverhead => "I/O overhead (x data size)",
            Metric::BgUtilization => "disk utilization by background",
        }
    }
}

fn x_label(group: &str) -> &'static str {
    match group {
        "6-5" | "6-24" => "background request interval (ms)",
        "6-6" => "number of disks",
        "6-9" => "block size (MB)",
        "6-12" => "network round-trip time (ms)",
        "6-35" => "filesystem cache",
        _ => "data redundancy D (N/K - 1)",
    }
}

/// (figure, variant, metric) drawn by each group.
fn figures(group: &str) -> Vec<(&'static str, &'static str, Metric)> {
    use Metric::*;
    match group {
        // Fig. 6-7(b): the same data as 6-7, log-log (drawn so by `log_log`).
        "6-6" => vec![
            ("6-6", "", Bandwidth),
            ("6-7", "", LatencyStd),
            ("6-7b", "", LatencyStd),
            ("6-8", "", IoOverhead),
        ],
        "6-5" => vec![
            ("6-5a", "one disk", BgUtilization),
            ("6-5b", "one disk", Bandwidth),
        ],
        "6-12" => vec![
            ("6-12a", "1024 MB", Bandwidth),
            ("6-12b", "128 MB", Bandwidth),
            ("6-13", "1024 MB", LatencyStd),
            ("6-14", "1024 MB", IoOverhead),
        ],
        "6-24" => vec![("6-24", "", Bandwidth), ("6-25", "", LatencyStd)],
        "6-35" => vec![("6-35", "", Bandwidth), ("6-36", "", LatencyStd)],
        g => {
            let figs = GROUPS.iter().find(|x| x.0 == g).map(|x| x.1).unwrap_or(&[]);
            figs.iter()
                .zip([Bandwidth, LatencyStd, IoOverhead])
                .map(|(f, m)| (*f, "", m))
                .collect()
        }
    }
}

/// The variant a group's claims refer to by default (6-12: the quick run shrinks sizes, so take the
/// first variant whatever its label).
fn rows_of<'a>(rows: &'a [Row], group: &str, variant: Option<&str>) -> Vec<&'a Row> {
    let first_variant = rows
        .iter()
        .find(|r| r.group == group)
        .map(|r| r.variant.clone());
    rows.iter()
        .filter(|r| r.group == group)
        .filter(|r| match variant {
            Some(v) => r.variant == v,
            None => Some(&r.variant) == first_variant.as_ref(),
        })
        .collect()
}

fn variant_rows<'a>(rows: &'a [Row], group: &str, fig_variant: &str) -> Vec<&'a Row> {
    // Variant labels name sizes; a quick run has smaller ones: map "1024 MB" / "128 MB" to the first
    // and second variant of the group.
    let mut variants: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.group == group) {
        if !variants.contains(&r.variant) {
            variants.push(r.variant.clone());
        }
    }
    let v = match fig_variant {
        "128 MB" => variants.get(1).cloned(),
        _ => variants.first().cloned(),
    };
    rows.iter()
        .filter(|r| r.group == group && Some(&r.variant) == v.as_ref())
        .collect()
}

/// The figures the seed draws on log-log axes (§6.3.1: "we show the results as a log-log plot in
/// Figure 6-7(b)").
fn log_log(fig: &str) -> bool {
    fig == "6-7b"
}

fn draw(out: &Path, group: &str, rows: &[Row]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (fig, variant, metric) in figures(group) {
        let rs = variant_rows(rows, group, variant);
        if rs.is_empty() {
            continue;
        }
        let path = out.join(format!("fig-{fig}.svg"));
        let title = format!("Fig. {fig} (ours): {}", metric.label());
        if group == "6-35" {
            let series = Scheme::ALL
                .iter()
                .map(|s| {
                    let v = [0.0, 1.0]
                        .iter()
                        .map(|&x| {
                            rs.iter()
                                .find(|r| r.scheme == *s && r.x == x)
                                .map(|r| metric.of(r))
                                .unwrap_or(0.0)
                        })
                        .collect();
                    (s.name().to_string(), v)
                })
                .collect();
            Bars {
                title: &title,
                x_label: x_label(group),
                y_label: metric.label(),
                categories: vec!["cache off".into(), "cache on".into()],
                series,
                stacked: false,
            }
            .write_svg(&path)?;
        } else {
            let xs: Vec<f64> = {
                let mut v: Vec<f64> = rs
                    .iter()
                    .map(|r| r.x)
                    .filter(|&x| x > 0.0 || group != "6-5")
                    .collect();
                v.sort_by(f64::total_cmp);
                v.dedup();
                v
            };
            let mut series = Vec::new();
            for s in Scheme::ALL {
                let mut pts: Vec<(f64, f64)> = rs
                    .iter()
                    .filter(|r| r.scheme == s && (r.x > 0.0 || group != "6-5"))
                    .map(|r| (r.x, metric.of(r)))
                    .collect();
                if pts.is_empty() {
                    continue;
                }
                let mut name = s.name().to_string();
                if pts.len() == 1 && xs.len() > 1 {
                    // RAID-0 in a redundancy sweep: its one point (D = 0) drawn across the axis.
                    let y = pts[0].1;
                    pts = vec![(xs[0], y), (xs[xs.len() - 1], y)];
                    name.push_str(" (D = 0)");
                }
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                series.push((name, pts));
            }
            if group == "6-5" {
                series
                    .iter_mut()
                    .for_each(|s| s.0 = "foreground read".into());
            }
            if log_log(fig) {
                ScaledLines {
                    title: &format!("{title}, log-log"),
                    x_label: x_label(group),
                    y_label: metric.label(),
                    series,
                    y_range: None,
                    x_scale: Scale::Log,
                    y_scale: Scale::Log,
                }
                .write_svg(&path)?;
            } else {
                Lines {
                    title: &title,
                    x_label: x_label(group),
                    y_label: metric.label(),
                    series,
                    y_range: None,
                }
                .write_svg(&path)?;
            }
        }
        files.push(path);
    }
    Ok(files)
}

/// Look up one value: group, variant (None: the group's first), x, scheme, metric.
fn get(
    rows: &[Row],
    group: &str,
    variant: Option<&str>,
    x: f64,
    s: Scheme,
    m: Metric,
) -> Option<f64> {
    rows_of(rows, group, variant)
        .into_iter()
        .find(|r| r.x == x && r.scheme == s)
        .map(|r| m.of(r))
}

fn series(
    rows: &[Row],
    group: &str,
    variant: Option<&str>,
    s: Scheme,
    m: Metric,
) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = rows_of(rows, group, variant)
        .into_iter()
        .filter(|r| r.scheme == s)
        .map(|r| (r.x, m.of(r)))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

fn f(v: Option<f64>) -> String {
    match v {
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 10.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
        None => "–".into(),
    }
}

/// A numeric claim: the seed's value and ours; "close" within 25%. A difference carries the plain
/// reason from [`super::reasons`] for its direction.
fn num_row(group: &str, claim: &str, seed: f64, ours: Option<f64>) -> String {
    let verdict = match ours {
        Some(o) if seed != 0.0 && (o / seed - 1.0).abs() <= 0.25 => {
            "close (within 25%)".to_string()
        }
        Some(o) if seed != 0.0 => format!(
            "**differs** (ours/seed = {:.2}): {}",
            o / seed,
            reasons::why(group, claim, o > seed)
        ),
        Some(o) if o.abs() < 0.05 => "close".into(),
        Some(o) => format!("**differs**: {}", reasons::why(group, claim, o > seed)),
        None => "not run at this scale".into(),
    };
    format!(
        "| {claim} | {} | {} | {verdict} |\n",
        f(Some(seed)),
        f(ours)
    )
}

/// A shape claim with our evidence and whether it holds; one that does not hold carries its reason.
fn shape_row(group: &str, claim: &str, evidence: String, holds: Option<bool>) -> String {
    let verdict = match holds {
        Some(true) => "reproduces".to_string(),
        Some(false) => format!(
            "**does not reproduce**: {}",
            reasons::why(group, claim, false)
        ),
        None => "not run at this scale".to_string(),
    };
    // A point this run did not reach leaves no evidence: say so rather than leave the cell empty.
    let evidence = if evidence.trim().is_empty() {
        "–".to_string()
    } else {
        evidence
    };
    format!("| {claim} | – | {evidence} | {verdict} |\n")
}

fn all_some<T>(v: Vec<Option<T>>) -> Option<Vec<T>> {
    v.into_iter().collect()
}

/// The rows of one group as a claim sees them: `variant` None is the group's first.
struct Fig<'a> {
    rows: &'a [Row],
    group: &'a str,
    variant: Option<&'a str>,
}

impl Fig<'_> {
    fn g(&self, x: f64, s: Scheme, m: Metric) -> Option<f64> {
        get(self.rows, self.group, self.variant, x, s, m)
    }
    fn series(&self, s: Scheme, m: Metric) -> Vec<(f64, f64)> {
        series(self.rows, self.group, self.variant, s, m)
    }
}

/// Where our number for a numeric claim comes from.
#[derive(Clone, Copy)]
enum Ours {
    /// One point: x, scheme, metric.
    At(f64, Scheme, Metric),
    /// The largest value of a scheme's series.
    Peak(Scheme, Metric),
    /// The value at the smallest x.
    First(Scheme, Metric),
    /// The value at the largest x.
    Last(Scheme, Metric),
}

impl Ours {
    fn of(self, fig: &Fig) -> Option<f64> {
        match self {
            Ours::At(x, s, m) => fig.g(x, s, m),
            Ours::Peak(s, m) => fig.series(s, m).iter().map(|p| p.1).reduce(f64::max),
            Ours::First(s, m) => fig.series(s, m).first().map(|p| p.1),
            Ours::Last(s, m) => fig.series(s, m).last().map(|p| p.1),
        }
    }
}

/// Our evidence for a shape claim, and whether the shape holds (None: not run at this scale).
type Evidence = (String, Option<bool>);

/// How a claim is compared: the seed's number against ours (close within 25%), or a shape.
#[derive(Clone, Copy)]
enum Check {
    Num(f64, Ours),
    Shape(fn(&Fig) -> Evidence),
}

/// One claim of the seed's text about a figure.
struct Claim {
    /// The groups whose report carries it.
    groups: &'static [&'static str],
    /// Only if the group has this variant (by order of appearance); its label replaces `{v}` in
    /// `name`. None: the group's first variant.
    variant: Option<usize>,
    name: &'static str,
    check: Check,
}

const fn num(groups: &'static [&'static str], name: &'static str, seed: f64, ours: Ours) -> Claim {
    Claim {
        groups,
        variant: None,
        name,
        check: Check::Num(seed, ours),
    }
}

const fn shape(
    groups: &'static [&'static str],
    name: &'static str,
    evidence: fn(&Fig) -> Evidence,
) -> Claim {
    Claim {
        groups,
        variant: None,
        name,
        check: Check::Shape(evidence),
    }
}

/// RRAID-A at the smallest and the largest RTT, in the `variant`-th object size of Fig. 6-12.
const fn rtt(variant: usize, name: &'static str, seed: f64, ours: Ours) -> Claim {
    Claim {
        groups: &["6-12"],
        variant: Some(variant),
        name,
        check: Check::Num(seed, ours),
    }
}

const D_SWEEP: &[&str] = &["6-15", "6-21", "6-26", "6-32"];
const HETEROGENEOUS_D: &[&str] = &["6-15", "6-21"];
const COMPETITIVE_D: &[&str] = &["6-26", "6-32"];
const WRITES: &[&str] = &["6-18", "6-29"];

/// Every claim, in report order within each group.
#[rustfmt::skip]
const CLAIMS: &[Claim] = {
    use Metric::*;
    use Ours::*;
    use Scheme::*;
    &[
        num(&["6-5"], "6 ms interval: background uses ~93% of the disk", 0.93, At(6.0, Raid0, BgUtilization)),
        num(&["6-5"], "6 ms interval: foreground bandwidth (MB/s)", 2.2, At(6.0, Raid0, Bandwidth)),
        num(&["6-5"], "200 ms interval: foreground bandwidth (MB/s)", 43.0, At(200.0, Raid0, Bandwidth)),
        num(&["6-5"], "interval uniform on 6..200 ms: mean bandwidth (MB/s)", 35.0, At(0.0, Raid0, Bandwidth)),

        num(&["6-6"], "64 disks, RAID-0 bandwidth (MB/s)", 31.0, At(64.0, Raid0, Bandwidth)),
        num(&["6-6"], "64 disks, RRAID-S bandwidth (MB/s)", 117.0, At(64.0, RraidS, Bandwidth)),
        num(&["6-6"], "64 disks, RRAID-A bandwidth (MB/s)", 228.0, At(64.0, RraidA, Bandwidth)),
        num(&["6-6"], "64 disks, RobuSTore bandwidth (MB/s)", 459.0, At(64.0, RobuStore, Bandwidth)),
        shape(&["6-6"], "at 64 disks RAID-0 < RRAID-S < RRAID-A < RobuSTore", ordered_at_64),
        shape(&["6-6"], "RobuSTore ≈ 15x RAID-0 for 16-128 disks", fifteen_times_raid0),
        shape(&["6-6"], "RobuSTore slightly below RRAID-A for < 8 disks", below_rraid_a_when_few),
        num(&["6-6"], "Fig. 6-7, 64 disks, RAID-0 latency std (s)", 1.9, At(64.0, Raid0, LatencyStd)),
        num(&["6-6"], "Fig. 6-7, 64 disks, RRAID-S latency std (s)", 7.3, At(64.0, RraidS, LatencyStd)),
        num(&["6-6"], "Fig. 6-7, 64 disks, RRAID-A latency std (s)", 1.9, At(64.0, RraidA, LatencyStd)),
        num(&["6-6"], "Fig. 6-7, 64 disks, RobuSTore latency std (s)", 0.5, At(64.0, RobuStore, LatencyStd)),
        num(&["6-6"], "Fig. 6-7, 128 disks, RAID-0 latency std (s)", 0.63, At(128.0, Raid0, LatencyStd)),
        num(&["6-6"], "Fig. 6-7, 128 disks, RRAID-S latency std (s)", 3.8, At(128.0, RraidS, LatencyStd)),
        num(&["6-6"], "Fig. 6-7, 128 disks, RRAID-A latency std (s)", 1.1, At(128.0, RraidA, LatencyStd)),
        num(&["6-6"], "Fig. 6-7, 128 disks, RobuSTore latency std (s)", 0.13, At(128.0, RobuStore, LatencyStd)),
        shape(&["6-6"], "Fig. 6-7: RobuSTore has the lowest deviation above 8 disks", lowest_std_above_8),
        num(&["6-6"], "Fig. 6-8, 64 disks, RobuSTore I/O overhead", 0.4, At(64.0, RobuStore, IoOverhead)),
        num(&["6-6"], "Fig. 6-8, 64 disks, RRAID-S I/O overhead (up to 2)", 2.0, At(64.0, RraidS, IoOverhead)),
        shape(&["6-6"], "Fig. 6-8: RRAID-A just above zero", rraid_a_overhead_near_zero),

        shape(&["6-9"], "RobuSTore bandwidth falls as blocks grow (from 1 MB)", falls_with_block_size),
        shape(&["6-9"], "Fig. 6-10: RobuSTore's deviation grows slightly with block size", std_grows_with_block_size),
        shape(&["6-9"], "block size has no impact on RAID-0, RRAID-S, RRAID-A (spread < 25%)", block_size_no_impact),
        shape(&["6-9"], "Fig. 6-11: RobuSTore's overhead grows with block size, below RRAID-S", overhead_grows_below_rraid_s),

        rtt(0, "RRAID-A {v}, smallest RTT (MB/s)", 228.0, First(RraidA, Bandwidth)),
        rtt(0, "RRAID-A {v}, largest RTT (MB/s)", 161.0, Last(RraidA, Bandwidth)),
        rtt(1, "RRAID-A {v}, smallest RTT (MB/s)", 131.0, First(RraidA, Bandwidth)),
        rtt(1, "RRAID-A {v}, largest RTT (MB/s)", 63.0, Last(RraidA, Bandwidth)),
        shape(&["6-12"], "RAID-0, RRAID-S, RobuSTore: RTT has little impact (change < 10%)", rtt_little_impact),

        shape(HETEROGENEOUS_D, "RobuSTore near its best (≥ 80% of peak) from D = 2", near_peak_from_2),
        shape(COMPETITIVE_D, "RobuSTore near its best (≥ 80% of peak) from D = 1.5", near_peak_from_1_5),
        shape(D_SWEEP, "RobuSTore has the highest bandwidth at every D it shares", highest_at_every_d),
        shape(D_SWEEP, "RobuSTore has the lowest deviation (D = 3)", lowest_std_at_3),
        num(&["6-15"], "Fig. 6-16: RobuSTore deviation above D = 2 (s)", 0.5, At(3.0, RobuStore, LatencyStd)),
        num(HETEROGENEOUS_D, "RobuSTore I/O overhead (D = 3)", 0.4, At(3.0, RobuStore, IoOverhead)),
        num(COMPETITIVE_D, "RobuSTore I/O overhead (D = 3)", 0.5, At(3.0, RobuStore, IoOverhead)),
        shape(D_SWEEP, "RRAID-S's I/O overhead grows with D", rraid_s_overhead_grows),
        shape(&["6-21"], "unbalanced striping: RobuSTore at most slightly below balanced (Fig. 6-15), D = 3", unbalanced_vs_6_15),
        shape(&["6-32"], "unbalanced striping: RobuSTore at most slightly below balanced (Fig. 6-26), D = 3", unbalanced_vs_6_26),

        num(&["6-18"], "D = 3, RobuSTore write bandwidth (MB/s)", 186.0, At(3.0, RobuStore, Bandwidth)),
        num(&["6-18"], "D = 3, RRAID-S write bandwidth (MB/s)", 7.5, At(3.0, RraidS, Bandwidth)),
        num(&["6-18"], "D = 3, RRAID-A write bandwidth (MB/s)", 7.5, At(3.0, RraidA, Bandwidth)),
        num(&["6-18"], "D = 0, RAID-0 write bandwidth (MB/s)", 30.0, At(0.0, Raid0, Bandwidth)),
        num(&["6-18"], "Fig. 6-19, D = 3, RobuSTore write latency std (s)", 0.5, At(3.0, RobuStore, LatencyStd)),
        num(&["6-18"], "Fig. 6-19, D = 3, RRAID-S write latency std (s)", 6.4, At(3.0, RraidS, LatencyStd)),
        shape(WRITES, "write bandwidth falls as D grows", write_falls_with_d),
        shape(WRITES, "Fig. 6-20/6-31: overhead ≈ D, RobuSTore slightly more", write_overhead_about_d),
        // Layout variation: the seed gives 186 against 7.5 MB/s (25x). Competitive workloads: only
        // "much higher bandwidth", no number; we read that as at least twice.
        shape(&["6-18"], "RobuSTore writes much faster than RRAID (D = 3, > 5x; seed 186 vs 7.5 MB/s)", writes_5x_faster),
        shape(&["6-29"], "RobuSTore writes much faster than RRAID (D = 3, > 2x; the seed gives no factor)", writes_2x_faster),

        num(&["6-24"], "peak RRAID-S bandwidth (MB/s)", 1650.0, Peak(RraidS, Bandwidth)),
        num(&["6-24"], "peak RobuSTore bandwidth (MB/s)", 1360.0, Peak(RobuStore, Bandwidth)),
        shape(&["6-24"], "every scheme gets faster as background requests thin out", faster_as_background_thins),

        shape(&["6-35"], "the cache raises every scheme's bandwidth", cache_raises_bandwidth),
        shape(&["6-35"], "Fig. 6-36: the cache raises latency deviation", cache_raises_deviation),
        shape(&["6-35"], "RobuSTore has the highest bandwidth with and without cache", highest_with_and_without_cache),
    ]
};

/// The claims of `group`, one Markdown table row each.
fn claims(rows: &[Row], group: &str) -> String {
    let mut variants: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.group == group) {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    let mut t = String::new();
    for c in CLAIMS.iter().filter(|c| c.groups.contains(&group)) {
        let (variant, name) = match c.variant {
            None => (None, c.name.to_string()),
            Some(i) => match variants.get(i) {
                Some(v) => (Some(*v), c.name.replace("{v}", v)),
                None => continue,
            },
        };
        let fig = Fig {
            rows,
            group,
            variant,
        };
        t += &match c.check {
            Check::Num(seed, ours) => num_row(group, &name, seed, ours.of(&fig)),
            Check::Shape(evidence) => {
                let (evidence, holds) = evidence(&fig);
                shape_row(group, &name, evidence, holds)
            }
        };
    }
    t
}

/// "x: y" for each point of a series.
fn points(v: &[(f64, f64)]) -> String {
    v.iter()
        .map(|(x, y)| format!("{x}: {}", f(Some(*y))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the last point is above the first (None: fewer than two points).
fn rises(v: &[(f64, f64)]) -> Option<bool> {
    (v.len() > 1).then(|| v.first().map(|p| p.1) < v.last().map(|p| p.1))
}

fn all_hold(v: &[bool]) -> Option<bool> {
    (!v.is_empty()).then(|| v.iter().all(|b| *b))
}

fn ordered_at_64(fig: &Fig) -> Evidence {
    let at64 = all_some(
        Scheme::ALL
            .iter()
            .map(|&s| fig.g(64.0, s, Metric::Bandwidth))
            .collect(),
    );
    (
        at64.as_ref()
            .map(|v| {
                v.iter()
                    .map(|x| f(Some(*x)))
                    .collect::<Vec<_>>()
                    .join(" / ")
            })
            .unwrap_or_default(),
        at64.map(|v| v.windows(2).all(|w| w[0] < w[1])),
    )
}

fn fifteen_times_raid0(fig: &Fig) -> Evidence {
    use Metric::Bandwidth;
    let ratios: Vec<(f64, f64)> = [16.0, 32.0, 64.0, 128.0]
        .iter()
        .filter_map(|&x| {
            Some((
                x,
                fig.g(x, Scheme::RobuStore, Bandwidth)? / fig.g(x, Scheme::Raid0, Bandwidth)?,
            ))
        })
        .collect();
    (
        ratios
            .iter()
            .map(|(x, r)| format!("{x}: {r:.1}x"))
            .collect::<Vec<_>>()
            .join(", "),
        (!ratios.is_empty()).then(|| ratios.iter().all(|(_, r)| *r > 10.0 && *r < 20.0)),
    )
}

fn below_rraid_a_when_few(fig: &Fig) -> Evidence {
    use Metric::Bandwidth;
    let small: Vec<bool> = [2.0, 4.0]
        .iter()
        .filter_map(|&x| {
            Some(fig.g(x, Scheme::RobuStore, Bandwidth)? < fig.g(x, Scheme::RraidA, Bandwidth)?)
        })
        .collect();
    (format!("{small:?} at 2, 4 disks"), all_hold(&small))
}

fn lowest_std_above_8(fig: &Fig) -> Evidence {
    let low: Vec<bool> = fig
        .series(Scheme::RobuStore, Metric::LatencyStd)
        .iter()
        .filter(|(x, _)| *x > 8.0)
        .map(|&(x, y)| {
            Scheme::ALL[..3]
                .iter()
                .all(|&s| fig.g(x, s, Metric::LatencyStd).is_none_or(|o| y <= o))
        })
        .collect();
    (format!("{low:?}"), all_hold(&low))
}

fn rraid_a_overhead_near_zero(fig: &Fig) -> Evidence {
    let v = fig.g(64.0, Scheme::RraidA, Metric::IoOverhead);
    (f(v), v.map(|v| (0.0..0.15).contains(&v)))
}

fn falls_with_block_size(fig: &Fig) -> Evidence {
    let bw = fig.series(Scheme::RobuStore, Metric::Bandwidth);
    let from1: Vec<f64> = bw.iter().filter(|p| p.0 >= 1.0).map(|p| p.1).collect();
    (
        points(&bw),
        (from1.len() > 1).then(|| from1.first() > from1.last()),
    )
}

fn std_grows_with_block_size(fig: &Fig) -> Evidence {
    let sd = fig.series(Scheme::RobuStore, Metric::LatencyStd);
    (points(&sd), rises(&sd))
}

fn block_size_no_impact(fig: &Fig) -> Evidence {
    let plain: Vec<(Scheme, f64)> = [Scheme::Raid0, Scheme::RraidS, Scheme::RraidA]
        .iter()
        .filter_map(|&s| {
            let v = fig.series(s, Metric::Bandwidth);
            let lo = v.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
            let hi = v.iter().map(|p| p.1).fold(0.0, f64::max);
            (v.len() > 1).then(|| (s, hi / lo - 1.0))
        })
        .collect();
    (
        plain
            .iter()
            .map(|(s, c)| format!("{s}: {:.0}%", c * 100.0))
            .collect::<Vec<_>>()
            .join(", "),
        (!plain.is_empty()).then(|| plain.iter().all(|(_, c)| *c < 0.25)),
    )
}

fn overhead_grows_below_rraid_s(fig: &Fig) -> Evidence {
    let ov = fig.series(Scheme::RobuStore, Metric::IoOverhead);
    let below = ov.iter().all(|&(x, y)| {
        fig.g(x, Scheme::RraidS, Metric::IoOverhead)
            .is_none_or(|s| y < s)
    });
    (points(&ov), rises(&ov).map(|r| r && below))
}

fn rtt_little_impact(fig: &Fig) -> Evidence {
    let flat: Vec<(Scheme, f64)> = [Scheme::Raid0, Scheme::RraidS, Scheme::RobuStore]
        .iter()
        .filter_map(|&s| {
            let v = fig.series(s, Metric::Bandwidth);
            Some((s, v.last()?.1 / v.first()?.1 - 1.0))
        })
        .collect();
    (
        flat.iter()
            .map(|(s, c)| format!("{s}: {:+.0}%", c * 100.0))
            .collect::<Vec<_>>()
            .join(", "),
        (!flat.is_empty()).then(|| flat.iter().all(|(_, c)| c.abs() < 0.1)),
    )
}

fn near_peak_from(fig: &Fig, knee: f64) -> Evidence {
    let bw = fig.series(Scheme::RobuStore, Metric::Bandwidth);
    let peak = bw.iter().map(|p| p.1).fold(0.0, f64::max);
    let at = bw.iter().find(|p| p.0 >= knee).map(|p| p.1);
    (
        format!("{} at D={knee}, peak {}", f(at), f(Some(peak))),
        at.map(|a| a >= 0.8 * peak),
    )
}

fn near_peak_from_2(fig: &Fig) -> Evidence {
    near_peak_from(fig, 2.0)
}

fn near_peak_from_1_5(fig: &Fig) -> Evidence {
    near_peak_from(fig, 1.5)
}

fn highest_at_every_d(fig: &Fig) -> Evidence {
    let others: Vec<bool> = fig
        .series(Scheme::RobuStore, Metric::Bandwidth)
        .iter()
        .filter(|p| p.0.fract() == 0.0)
        .map(|&(x, y)| {
            Scheme::ALL[..3]
                .iter()
                .all(|&s| fig.g(x, s, Metric::Bandwidth).is_none_or(|o| y > o))
        })
        .collect();
    (format!("{others:?}"), all_hold(&others))
}

fn lowest_std_at_3(fig: &Fig) -> Evidence {
    let sd = fig.g(3.0, Scheme::RobuStore, Metric::LatencyStd);
    let lowest = sd.map(|v| {
        [Scheme::RraidS, Scheme::RraidA]
            .iter()
            .all(|&s| fig.g(3.0, s, Metric::LatencyStd).is_none_or(|o| v < o))
    });
    (f(sd), lowest)
}

fn rraid_s_overhead_grows(fig: &Fig) -> Evidence {
    let rs = fig.series(Scheme::RraidS, Metric::IoOverhead);
    (points(&rs), rises(&rs))
}

/// RobuSTore at D = 3 with unbalanced striping against the `balanced` group's.
fn unbalanced_vs(fig: &Fig, balanced: &str) -> Evidence {
    let a = fig.g(3.0, Scheme::RobuStore, Metric::Bandwidth);
    let b = get(
        fig.rows,
        balanced,
        None,
        3.0,
        Scheme::RobuStore,
        Metric::Bandwidth,
    );
    (
        format!("{} vs {}", f(a), f(b)),
        a.zip(b).map(|(a, b)| a <= b * 1.05 && a >= 0.7 * b),
    )
}

fn unbalanced_vs_6_15(fig: &Fig) -> Evidence {
    unbalanced_vs(fig, "6-15")
}

fn unbalanced_vs_6_26(fig: &Fig) -> Evidence {
    unbalanced_vs(fig, "6-26")
}

fn write_falls_with_d(fig: &Fig) -> Evidence {
    let bw = fig.series(Scheme::RobuStore, Metric::Bandwidth);
    (
        points(&bw),
        (bw.len() > 1).then(|| bw.first().map(|p| p.1) > bw.last().map(|p| p.1)),
    )
}

fn write_overhead_about_d(fig: &Fig) -> Evidence {
    let ov3 = fig.g(3.0, Scheme::RobuStore, Metric::IoOverhead);
    (
        format!(
            "D=3: RobuSTore {}, RRAID-S {}",
            f(ov3),
            f(fig.g(3.0, Scheme::RraidS, Metric::IoOverhead))
        ),
        ov3.map(|o| (3.0..3.5).contains(&o)),
    )
}

/// RobuSTore's write bandwidth at D = 3 above `factor` times both RRAIDs'.
fn writes_faster(fig: &Fig, factor: f64) -> Evidence {
    let bw = |s| fig.g(3.0, s, Metric::Bandwidth);
    let hi = bw(Scheme::RobuStore).map(|v| {
        [Scheme::RraidS, Scheme::RraidA]
            .iter()
            .all(|&s| bw(s).is_none_or(|o| v > factor * o))
    });
    (
        format!(
            "D=3: RobuSTore {}, RRAID-S {}, RRAID-A {}",
            f(bw(Scheme::RobuStore)),
            f(bw(Scheme::RraidS)),
            f(bw(Scheme::RraidA))
        ),
        hi,
    )
}

fn writes_5x_faster(fig: &Fig) -> Evidence {
    writes_faster(fig, 5.0)
}

fn writes_2x_faster(fig: &Fig) -> Evidence {
    writes_faster(fig, 2.0)
}

fn faster_as_background_thins(fig: &Fig) -> Evidence {
    let ends = |s| {
        let v = fig.series(s, Metric::Bandwidth);
        (v.first().map(|p| p.1), v.last().map(|p| p.1))
    };
    (
        Scheme::ALL
            .iter()
            .map(|&s| {
                let (a, b) = ends(s);
                format!("{s}: {} → {}", f(a), f(b))
            })
            .collect::<Vec<_>>()
            .join(", "),
        Some(Scheme::ALL.iter().all(|&s| {
            let (a, b) = ends(s);
            a < b
        })),
    )
}

/// "off → on" per scheme (x 0: no cache, x 1: cache).
fn off_on(fig: &Fig, m: Metric) -> String {
    Scheme::ALL
        .iter()
        .map(|&s| format!("{s}: {} → {}", f(fig.g(0.0, s, m)), f(fig.g(1.0, s, m))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the cache raises metric `m` for every scheme that has both points.
fn cache_raises(fig: &Fig, m: Metric) -> Evidence {
    let up: Vec<bool> = Scheme::ALL
        .iter()
        .filter_map(|&s| Some(fig.g(1.0, s, m)? > fig.g(0.0, s, m)?))
        .collect();
    (off_on(fig, m), Some(up.iter().all(|b| *b)))
}

fn cache_raises_bandwidth(fig: &Fig) -> Evidence {
    cache_raises(fig, Metric::Bandwidth)
}

fn cache_raises_deviation(fig: &Fig) -> Evidence {
    cache_raises(fig, Metric::LatencyStd)
}

fn highest_with_and_without_cache(fig: &Fig) -> Evidence {
    let best = [0.0, 1.0].iter().all(|&x| {
        let r = fig
            .g(x, Scheme::RobuStore, Metric::Bandwidth)
            .unwrap_or(0.0);
        Scheme::ALL[..3]
            .iter()
            .all(|&s| fig.g(x, s, Metric::Bandwidth).is_none_or(|o| r > o))
    });
    (off_on(fig, Metric::Bandwidth), Some(best))
}

fn table(rows: &[Row], group: &str, variant: &str, metric: Metric) -> String {
    let rs: Vec<&Row> = rows
        .iter()
        .filter(|r| r.group == group && r.variant == variant)
        .collect();
    let mut xs: Vec<f64> = rs.iter().map(|r| r.x).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let schemes: Vec<Scheme> = Scheme::ALL
        .iter()
        .copied()
        .filter(|s| rs.iter().any(|r| r.scheme == *s))
        .collect();
    let mut t = format!("| {} |", x_label(group));
    for s in &schemes {
        let _ = write!(t, " {s} |");
    }
    t += "\n|---|";
    t += &"---:|".repeat(schemes.len());
    t += "\n";
    for x in xs {
        let xl = if group == "6-5" && x == 0.0 {
            "uniform 6..200".to_string()
        } else if group == "6-35" {
            if x == 0.0 {
                "off".into()
            } else {
                "on".into()
            }
        } else {
            format!("{x}")
        };
        let _ = write!(t, "| {xl} |");
        for s in &schemes {
            let v = rs
                .iter()
                .find(|r| r.x == x && r.scheme == *s)
                .map(|r| metric.of(r));
            let _ = write!(t, " {} |", f(v));
        }
        t += "\n";
    }
    t
}

/// Write per-group CSVs, the SVGs and report.md into `out`.
pub fn render(out: &Path, rows: &[Row]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut md = String::from("# RobuSTore ch. 6 on ecstack's simulator\n\n");
    let accesses = rows.iter().map(|r| r.accesses).max().unwrap_or(0);
    let _ = writeln!(
        md,
        "Generated by `ecstack experiment robustore`; {accesses} accesses per point; every number below \
         is a mean over them (bandwidth, I/O overhead) or their sample standard deviation (latency). \
         The seed publishes its figures only as images: the *seed* column holds the numbers its text \
         gives, and each shape its text describes is checked against ours. \"close\" means within 25%. \
         The model and its assumptions are in docs/robustore.md.\n"
    );
    let mut codes: Vec<&str> = rows.iter().map(|r| r.code.as_str()).collect();
    codes.dedup();
    let _ = writeln!(md, "RobuSTore's rateless code: {}.\n", codes.join(", "));
    let mut splits: Vec<&str> = rows.iter().map(|r| r.rraid_a_split.as_str()).collect();
    splits.dedup();
    let _ = writeln!(
        md,
        "RRAID-A halves a disk's unreceived data in units of: {}.\n",
        splits
            .iter()
            .map(|s| match *s {
                "block" => "whole blocks (`--rraid-a-split block`)",
                _ => "512-byte sectors (`--rraid-a-split sector`)",
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (group, figs, title) in GROUPS.iter() {
        let grows: Vec<Row> = rows.iter().filter(|r| r.group == *group).cloned().collect();
        if grows.is_empty() {
            continue;
        }
        let csv = out.join(format!("fig-{group}.csv"));
        crate::table::write_csv(&csv, &grows)?;
        files.push(csv);
        let svgs = draw(out, group, rows)?;
        let _ = writeln!(md, "## Figs. {}: {title}\n", figs.join(", "));
        for p in &svgs {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            let _ = writeln!(md, "![{name}]({name})");
        }
        md += "\n";
        let mut variants: Vec<String> = Vec::new();
        for r in &grows {
            if !variants.contains(&r.variant) {
                variants.push(r.variant.clone());
            }
        }
        for v in &variants {
            let metrics: &[Metric] = match *group {
                "6-5" => &[Metric::BgUtilization, Metric::Bandwidth],
                "6-24" | "6-35" => &[Metric::Bandwidth, Metric::LatencyStd, Metric::IoOverhead],
                _ => &[Metric::Bandwidth, Metric::LatencyStd, Metric::IoOverhead],
            };
            for m in metrics {
                let head = if v.is_empty() {
                    m.label().to_string()
                } else {
                    format!("{v}: {}", m.label())
                };
                let _ = writeln!(md, "**{head}**\n\n{}", table(rows, group, v, *m));
            }
        }
        let c = claims(rows, group);
        if !c.is_empty() {
            md += "**The seed's figure (from its text) beside ours**\n\n| claim | seed | ours | verdict |\n|---|---:|---|---|\n";
            md += &c;
            md += "\n";
        }
        files.extend(svgs);
    }
    let path = out.join("report.md");
    std::fs::write(&path, md).map_err(crate::io_at(&path))?;
    files.push(path);
    Ok(files)
}
