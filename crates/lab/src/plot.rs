//! Plots, one path for every experiment: charts drawn with `plotters` into SVG (its SVG backend only),
//! with round ticks chosen by plotters on linear axes, tick labels in a compact unit form (`20k`,
//! `1.5M`) and the quantity and unit on each axis.
//!
//! * [`Bars`]: grouped (or stacked) bars, one group per category (a trace, a setting, a client
//!   count), one bar (or bar segment) per series (a scheme, a size class).
//! * [`Lines`]: one curve per series over a numeric x axis (a CDF, a sweep).
//! * [`ScaledLines`]: the same chart with a chosen [`Scale`] per axis (log-log figures, as RobuSTore's
//!   Fig. 6-7(b)); [`Lines`] is its linear case.
//! * [`RatioMap`]: a heat map of ratios to a baseline over two categorical axes (ZombieNAND's grid).

use std::path::Path;

use plotters::coord::ranged1d::Ranged;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::{io_at, LabError, Result};

const SIZE: (u32, u32) = (760, 400);
const COLORS: [RGBColor; 8] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0x9c, 0x75, 0x5f),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// A tick label: at most three significant digits, with k / M / G for thousands, millions and
/// billions (`0`, `0.25`, `12.5`, `20k`, `1.5M`).
pub fn tick_label(v: f64) -> String {
    let a = v.abs();
    let (x, suffix) = match a {
        _ if a >= 1e9 => (v / 1e9, "G"),
        _ if a >= 1e6 => (v / 1e6, "M"),
        _ if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let digits = if x.abs() >= 100.0 || x == x.round() {
        0
    } else if x.abs() >= 10.0 {
        1
    } else {
        2
    };
    let s = format!("{x:.digits$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("{s}{suffix}")
}

fn draw_error<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> LabError {
    LabError::Run(format!("drawing a plot: {e}"))
}

fn write(path: &Path, svg: String) -> Result<()> {
    std::fs::write(path, svg).map_err(io_at(path))
}

/// The top of a value axis: the largest value plus headroom (1 when every value is 0).
fn axis_top(max: f64) -> f64 {
    if max > 0.0 && max.is_finite() {
        max * 1.08
    } else {
        1.0
    }
}

/// A grouped bar chart: one group per category, one bar per series.
pub struct Bars<'a> {
    pub title: &'a str,
    /// What the categories are, e.g. "trace" or "concurrent clients".
    pub x_label: &'a str,
    /// The value axis: quantity and unit, e.g. "requests/s" or "SSD writes (MiB)".
    pub y_label: &'a str,
    pub categories: Vec<String>,
    /// (name, one value per category; a missing value is drawn as no bar).
    pub series: Vec<(String, Vec<f64>)>,
    /// Stack the series in one bar per category instead of a bar each side by side.
    pub stacked: bool,
}

impl Bars<'_> {
    /// Write the chart to `path` as SVG.
    pub fn write_svg(&self, path: &Path) -> Result<()> {
        write(path, self.svg()?)
    }

    /// The chart as SVG text.
    pub fn svg(&self) -> Result<String> {
        render_svg(|root| self.draw(root))
    }

    fn draw(&self, root: &DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<()> {
        let ncat = self.categories.len().max(1);
        let max = if self.stacked {
            (0..ncat)
                .map(|c| {
                    self.series
                        .iter()
                        .filter_map(|(_, v)| v.get(c))
                        .sum::<f64>()
                })
                .fold(0.0, f64::max)
        } else {
            self.series
                .iter()
                .flat_map(|(_, v)| v.iter().copied())
                .fold(0.0, f64::max)
        };
        // Categories sit at 0.5, 1.5, …; their names are drawn under the axis at those centres.
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..ncat as f64, 0.0..axis_top(max))
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .disable_x_mesh()
            .x_labels(0)
            .x_desc(self.x_label)
            .y_desc(self.y_label)
            .y_label_formatter(&|v| tick_label(*v))
            .draw()
            .map_err(draw_error)?;
        let under =
            TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        for (i, name) in self.categories.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
            let label = Text::new(name.as_str(), (px, py + 6), under.clone());
            root.draw(&label).map_err(draw_error)?;
        }
        let (nbars, width) = match self.stacked {
            true => (1, 0.7),
            false => (
                self.series.len().max(1),
                0.8 / self.series.len().max(1) as f64,
            ),
        };
        let mut base = vec![0.0; ncat];
        for (si, (name, values)) in self.series.iter().enumerate() {
            let c = color(si);
            let slot = if nbars == 1 { 0 } else { si };
            let margin = (1.0 - width * nbars as f64) / 2.0;
            let mut bars = Vec::new();
            for (ci, &v) in values.iter().enumerate().filter(|(_, v)| v.is_finite()) {
                let x0 = ci as f64 + margin + width * slot as f64;
                let y0 = if self.stacked { base[ci] } else { 0.0 };
                bars.push(Rectangle::new(
                    [(x0, y0), (x0 + width * 0.92, y0 + v)],
                    c.filled(),
                ));
                if self.stacked && ci < ncat {
                    base[ci] += v;
                }
            }
            chart
                .draw_series(bars)
                .map_err(draw_error)?
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled()));
        }
        legend(&mut chart)
    }
}

fn legend<'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(draw_error)
}

/// Draw on a white SVG canvas of the standard size and return the SVG text (the one rendering
/// path of every chart type).
fn render_svg(
    draw: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<()>,
) -> Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        draw(&root)?;
        root.present().map_err(draw_error)?;
    }
    Ok(out)
}

/// A line chart: one curve per series over a numeric x axis.
pub struct Lines<'a> {
    pub title: &'a str,
    /// The x axis: quantity and unit.
    pub x_label: &'a str,
    /// The y axis: quantity and unit.
    pub y_label: &'a str,
    /// (name, points (x, y) in increasing x).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// Fixed y range (e.g. 0..1 for a CDF); from the data when `None`.
    pub y_range: Option<(f64, f64)>,
}

impl Lines<'_> {
    /// Write the chart to `path` as SVG.
    pub fn write_svg(&self, path: &Path) -> Result<()> {
        write(path, self.svg()?)
    }

    /// The chart as SVG text.
    pub fn svg(&self) -> Result<String> {
        ScaledLines {
            title: self.title,
            x_label: self.x_label,
            y_label: self.y_label,
            series: self.series.clone(),
            y_range: self.y_range,
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
        }
        .svg()
    }
}

/// An axis scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

/// A line chart with a chosen scale per axis. Points with a coordinate ≤ 0 cannot sit on a log axis
/// and are left out (the reports' tables keep every number).
pub struct ScaledLines<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// (name, points (x, y) in increasing x).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// Fixed y range (e.g. 0..1 for a CDF); from the data when `None`.
    pub y_range: Option<(f64, f64)>,
    pub x_scale: Scale,
    pub y_scale: Scale,
}

/// The range an axis shows for values in [lo, hi]: linear axes from 0 to [`axis_top`]; log axes
/// from the decade (or half decade) below to the one above.
fn span(scale: Scale, lo: f64, hi: f64) -> (f64, f64) {
    match scale {
        Scale::Linear => (0.0, axis_top(hi)),
        Scale::Log => {
            if !(lo > 0.0 && hi.is_finite()) {
                return (0.1, 10.0);
            }
            let down = 10f64.powf(lo.log10().floor());
            let up = 10f64.powf(hi.log10().ceil());
            let lo = if down * 2.0 <= lo { down * 2.0 } else { down };
            let hi = if up / 2.0 >= hi { up / 2.0 } else { up };
            if hi > lo {
                (lo, hi)
            } else {
                (lo / 2.0, hi * 2.0)
            }
        }
    }
}

impl ScaledLines<'_> {
    /// The series with the points a log axis cannot show left out.
    fn drawable(&self) -> Vec<(String, Vec<(f64, f64)>)> {
        let ok = |v: f64, s: Scale| v.is_finite() && (s == Scale::Linear || v > 0.0);
        self.series
            .iter()
            .map(|(n, p)| {
                let p = p
                    .iter()
                    .copied()
                    .filter(|&(x, y)| ok(x, self.x_scale) && ok(y, self.y_scale))
                    .collect();
                (n.clone(), p)
            })
            .collect()
    }

    /// Write the chart to `path` as SVG.
    pub fn write_svg(&self, path: &Path) -> Result<()> {
        write(path, self.svg()?)
    }

    /// The chart as SVG text.
    pub fn svg(&self) -> Result<String> {
        let series = self.drawable();
        let pts = || series.iter().flat_map(|(_, p)| p.iter().copied());
        let fold = |f: fn(&(f64, f64)) -> f64| {
            pts()
                .map(|p| f(&p))
                .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)))
        };
        let (x0, x1) = fold(|p| p.0);
        let (y0, y1) = fold(|p| p.1);
        let xs = match self.x_scale {
            // A linear x axis ends at the last point.
            Scale::Linear => (0.0, axis_top(x1) / 1.08),
            Scale::Log => span(Scale::Log, x0, x1),
        };
        let ys = self.y_range.unwrap_or_else(|| span(self.y_scale, y0, y1));
        render_svg(|root| {
            let mut b = ChartBuilder::on(root);
            b.caption(self.title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(44)
                .y_label_area_size(64);
            // plotters types a chart by its ranges: one arm per combination.
            macro_rules! draw {
                ($xr:expr, $yr:expr) => {{
                    let mut chart = b.build_cartesian_2d($xr, $yr).map_err(draw_error)?;
                    chart
                        .configure_mesh()
                        .light_line_style(WHITE)
                        .x_desc(self.x_label)
                        .y_desc(self.y_label)
                        .x_label_formatter(&|v| tick_label(*v))
                        .y_label_formatter(&|v| tick_label(*v))
                        .draw()
                        .map_err(draw_error)?;
                    for (si, (name, p)) in series.iter().enumerate() {
                        let c = color(si);
                        chart
                            .draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(2)))
                            .map_err(draw_error)?
                            .label(name.as_str())
                            .legend(move |(x, y)| {
                                PathElement::new([(x, y), (x + 14, y)], c.stroke_width(2))
                            });
                    }
                    legend(&mut chart)
                }};
            }
            match (self.x_scale, self.y_scale) {
                (Scale::Linear, Scale::Linear) => draw!(xs.0..xs.1, ys.0..ys.1),
                (Scale::Log, Scale::Linear) => draw!((xs.0..xs.1).log_scale(), ys.0..ys.1),
                (Scale::Linear, Scale::Log) => draw!(xs.0..xs.1, (ys.0..ys.1).log_scale()),
                (Scale::Log, Scale::Log) => {
                    draw!((xs.0..xs.1).log_scale(), (ys.0..ys.1).log_scale())
                }
            }
        })
    }
}

/// A heat map of ratios to a baseline: one cell per (row, column), coloured by how far its ratio is
/// from 1 on a log scale (white at 1; green when better, red when worse, full colour at 8x either
/// way; grey when missing) and labelled with the ratio.
pub struct RatioMap<'a> {
    pub title: &'a str,
    /// What the columns are (the x axis), e.g. "working set".
    pub x_label: &'a str,
    /// What the rows are (the y axis), e.g. "reserve".
    pub y_label: &'a str,
    /// Column names, left to right.
    pub columns: Vec<String>,
    /// Row names, top to bottom.
    pub rows: Vec<String>,
    /// `cells[row][column]`: the ratio, `None` where there is none.
    pub cells: Vec<Vec<Option<f64>>>,
    /// Whether a ratio above 1 is better (a lifetime) or worse (a latency).
    pub higher_is_better: bool,
}

impl RatioMap<'_> {
    /// Write the chart to `path` as SVG.
    pub fn write_svg(&self, path: &Path) -> Result<()> {
        write(path, self.svg()?)
    }

    /// The chart as SVG text.
    pub fn svg(&self) -> Result<String> {
        render_svg(|root| self.draw(root))
    }

    /// The fill of a cell: white at 1, towards green when better and red when worse, saturated at
    /// 8x; grey for a missing or non-positive ratio.
    fn fill(&self, ratio: Option<f64>) -> RGBColor {
        match ratio {
            Some(v) if v > 0.0 && v.is_finite() => {
                let good = if self.higher_is_better {
                    v.ln()
                } else {
                    -v.ln()
                };
                let t = (good.abs() / 8f64.ln()).min(1.0);
                let k = (255.0 * (1.0 - t)) as u8;
                if good >= 0.0 {
                    RGBColor(k, 255, k)
                } else {
                    RGBColor(255, k, k)
                }
            }
            _ => RGBColor(200, 200, 200),
        }
    }

    fn draw(&self, root: &DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<()> {
        let (ncol, nrow) = (self.columns.len().max(1), self.rows.len().max(1));
        // Row 0 at the top: y runs from nrow (bottom) down to 0.
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(90)
            .build_cartesian_2d(0.0..ncol as f64, nrow as f64..0.0)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(0)
            .y_labels(0)
            .x_desc(self.x_label)
            .y_desc(self.y_label)
            .draw()
            .map_err(draw_error)?;
        let font = ("sans-serif", 13).into_font();
        let under = TextStyle::from(font.clone()).pos(Pos::new(HPos::Center, VPos::Top));
        for (j, name) in self.columns.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(j as f64 + 0.5, nrow as f64));
            root.draw(&Text::new(name.as_str(), (px, py + 6), under.clone()))
                .map_err(draw_error)?;
        }
        let left = TextStyle::from(font.clone()).pos(Pos::new(HPos::Right, VPos::Center));
        for (i, name) in self.rows.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(0.0, i as f64 + 0.5));
            root.draw(&Text::new(name.as_str(), (px - 6, py), left.clone()))
                .map_err(draw_error)?;
        }
        let centre = TextStyle::from(font).pos(Pos::new(HPos::Center, VPos::Center));
        for (i, row) in self.cells.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                let (x, y) = (j as f64, i as f64);
                chart
                    .draw_series([Rectangle::new(
                        [(x, y), (x + 1.0, y + 1.0)],
                        self.fill(v).filled(),
                    )])
                    .map_err(draw_error)?;
                chart
                    .draw_series([Rectangle::new([(x, y), (x + 1.0, y + 1.0)], BLACK)])
                    .map_err(draw_error)?;
                let label = v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
                chart
                    .draw_series([Text::new(label, (x + 0.5, y + 0.5), centre.clone())])
                    .map_err(draw_error)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_compact_with_units() {
        let cases = [
            (0.0, "0"),
            (0.25, "0.25"),
            (12.5, "12.5"),
            (100.0, "100"),
            (20_000.0, "20k"),
            (12_500.0, "12.5k"),
            (1_500_000.0, "1.5M"),
            (2e9, "2G"),
        ];
        for (v, want) in cases {
            assert_eq!(tick_label(v), want, "{v}");
        }
    }

    /// The `<text>` elements of an SVG, in order.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                Some(
                    t.split_once('>')?
                        .1
                        .split_once("</text>")?
                        .0
                        .trim()
                        .to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn bars_label_categories_axes_and_round_ticks() {
        let bars = Bars {
            title: "Exp 4: requests/s",
            x_label: "concurrent clients",
            y_label: "requests/s",
            categories: vec!["1".into(), "8".into(), "32".into()],
            series: vec![
                ("md".into(), vec![4_866.0, 13_391.0, 16_237.0]),
                ("eplog".into(), vec![11_234.0, 31_050.0, 53_696.0]),
            ],
            stacked: false,
        };
        let svg = bars.svg().unwrap();
        if let Ok(dir) = std::env::var("ECSTACK_PLOT_DIR") {
            std::fs::write(format!("{dir}/bars.svg"), &svg).unwrap();
        }
        let t = texts(&svg);
        for want in [
            "Exp 4: requests/s",
            "concurrent clients",
            "requests/s",
            "1",
            "8",
            "32",
            "md",
            "eplog",
        ] {
            assert!(t.iter().any(|x| x == want), "{want} missing from {t:?}");
        }
        // Value ticks are round numbers in a compact form, up to the largest bar.
        for want in ["0", "10k", "20k", "50k"] {
            assert!(
                t.iter().any(|x| x == want),
                "tick {want} missing from {t:?}"
            );
        }
        assert!(!t.iter().any(|x| x.contains('.')), "{t:?}");
        // One bar per value, plus the legend's swatches.
        assert!(svg.matches("<rect").count() >= 6, "{svg}");
    }

    #[test]
    fn lines_draw_one_curve_per_series() {
        let cdf = |k: f64| {
            (0..=20)
                .map(|i| (i as f64 * 50.0, 1.0 - (-(i as f64) / k).exp()))
                .collect()
        };
        let lines = Lines {
            title: "reuse CDF",
            x_label: "reuse distance (MiB)",
            y_label: "fraction of writes",
            series: vec![("a".into(), cdf(3.0)), ("b".into(), cdf(8.0))],
            y_range: Some((0.0, 1.0)),
        };
        let svg = lines.svg().unwrap();
        if let Ok(dir) = std::env::var("ECSTACK_PLOT_DIR") {
            std::fs::write(format!("{dir}/lines.svg"), &svg).unwrap();
        }
        let curves = svg.matches("<polyline").filter(|_| true).count();
        assert!(curves >= 4, "{svg}");
        let wide = svg
            .lines()
            .filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"2\""));
        assert_eq!(
            wide.count(),
            2 + 2,
            "two curves and two legend lines: {svg}"
        );
        let t = texts(&svg);
        for want in [
            "0",
            "0.5",
            "1",
            "500",
            "900",
            "reuse distance (MiB)",
            "fraction of writes",
        ] {
            assert!(t.iter().any(|x| x == want), "{want} missing from {t:?}");
        }
    }

    fn chart(x_scale: Scale, y_scale: Scale) -> String {
        ScaledLines {
            title: "t",
            x_label: "number of disks",
            y_label: "latency std. deviation (s)",
            series: vec![
                ("A".into(), vec![(2.0, 0.05), (8.0, 0.5), (128.0, 3.0)]),
                ("B".into(), vec![(2.0, 0.0), (8.0, 0.1), (128.0, 0.2)]),
            ],
            y_range: None,
            x_scale,
            y_scale,
        }
        .svg()
        .unwrap()
    }

    #[test]
    fn log_axes_tick_by_decades_and_drop_points_they_cannot_show() {
        let svg = chart(Scale::Log, Scale::Log);
        let t = texts(&svg);
        // Decade ticks on the y axis (0.02 .. 5), none at 0.
        for want in ["0.1", "1"] {
            assert!(t.iter().any(|x| x == want), "tick {want} missing: {t:?}");
        }
        assert!(!t.iter().any(|x| x == "0"), "a log axis has no 0: {t:?}");
        // B's point at y = 0 is left out; its two others are drawn.
        let s = ScaledLines {
            title: "t",
            x_label: "x",
            y_label: "y",
            series: vec![("B".into(), vec![(2.0, 0.0), (8.0, 0.1), (128.0, 0.2)])],
            y_range: None,
            x_scale: Scale::Log,
            y_scale: Scale::Log,
        };
        assert_eq!(s.drawable()[0].1, vec![(8.0, 0.1), (128.0, 0.2)]);
        // The same data on linear axes starts at 0.
        let lin = texts(&chart(Scale::Linear, Scale::Linear));
        assert!(lin.iter().any(|x| x == "0"), "{lin:?}");
        assert!(texts(&svg).iter().any(|x| x == "number of disks"));
    }

    #[test]
    fn log_spans_cover_the_data() {
        assert_eq!(span(Scale::Log, 0.05, 3.0), (0.02, 5.0));
        let (lo, hi) = span(Scale::Log, 2.0, 128.0);
        assert!(lo <= 2.0 && hi >= 128.0, "{lo} {hi}");
        assert_eq!(span(Scale::Linear, 0.0, 10.0).0, 0.0);
    }

    #[test]
    fn ratio_maps_label_rows_columns_and_cells() {
        let map = RatioMap {
            title: "TLC lifetime relative to baseline, 50% reads",
            x_label: "working set",
            y_label: "reserve",
            columns: vec!["10%".into(), "50%".into()],
            rows: vec!["10% reserve".into(), "30% reserve".into()],
            cells: vec![vec![Some(1.0), Some(0.5)], vec![Some(8.0), None]],
            higher_is_better: true,
        };
        let svg = map.svg().unwrap();
        if let Ok(dir) = std::env::var("ECSTACK_PLOT_DIR") {
            std::fs::write(format!("{dir}/ratio-map.svg"), &svg).unwrap();
        }
        let t = texts(&svg);
        for want in [
            "TLC lifetime relative to baseline, 50% reads",
            "working set",
            "reserve",
            "10%",
            "50%",
            "10% reserve",
            "30% reserve",
            "1.00",
            "0.50",
            "8.00",
            "-",
        ] {
            assert!(t.iter().any(|x| x == want), "{want} missing from {t:?}");
        }
        // White at 1, full green at 8x better, full red at 2x worse only partly, grey when missing.
        assert_eq!(map.fill(Some(1.0)), RGBColor(255, 255, 255));
        assert_eq!(map.fill(Some(8.0)), RGBColor(0, 255, 0));
        assert_eq!(map.fill(Some(0.5)), RGBColor(255, 170, 170));
        assert_eq!(map.fill(None), RGBColor(200, 200, 200));
        let latency = RatioMap {
            higher_is_better: false,
            ..map
        };
        assert_eq!(latency.fill(Some(8.0)), RGBColor(255, 0, 0));
    }
}
