//! A line chart on logarithmic axes, for the figures the seed draws log-log (Fig. 6-7(b): "to
//! distinguish the details, we show the results as a log-log plot"). `crate::plot::Lines` draws linear
//! axes only; this draws the same kind of chart (canvas size, palette, compact tick labels from
//! `crate::plot::tick_label`, legend) with plotters' logarithmic ranges on either axis.

use std::path::Path;

use plotters::prelude::*;

use crate::plot::tick_label;
use crate::{io_at, LabError, Result};

const SIZE: (u32, u32) = (760, 400);
/// `crate::plot`'s palette, in its order, so a scheme has the same colour in both kinds of chart.
const COLORS: [RGBColor; 4] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xe1, 0x57, 0x59),
];

/// An axis scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

/// A line chart with a chosen scale per axis. Points with a coordinate ≤ 0 cannot sit on a log axis
/// and are left out (the report's tables keep every number).
pub struct ScaledLines<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// (name, points (x, y) in increasing x).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    pub x_scale: Scale,
    pub y_scale: Scale,
}

fn draw_error<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> LabError {
    LabError::Run(format!("drawing a plot: {e}"))
}

/// The range an axis shows for values in [lo, hi]: log axes from the decade (or half decade) below
/// to the one above; linear axes from 0 with 8% headroom.
fn span(scale: Scale, lo: f64, hi: f64) -> (f64, f64) {
    match scale {
        Scale::Linear => (0.0, if hi > 0.0 { hi * 1.08 } else { 1.0 }),
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

    pub fn write_svg(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.svg()?).map_err(io_at(path))
    }

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
            Scale::Linear => (0.0, if x1 > 0.0 { x1 } else { 1.0 }),
            Scale::Log => span(Scale::Log, x0, x1),
        };
        let ys = span(self.y_scale, y0, y1);
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
            root.fill(&WHITE).map_err(draw_error)?;
            let mut b = ChartBuilder::on(&root);
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
                        let c = COLORS[si % COLORS.len()];
                        chart
                            .draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(2)))
                            .map_err(draw_error)?
                            .label(name.as_str())
                            .legend(move |(x, y)| {
                                PathElement::new([(x, y), (x + 14, y)], c.stroke_width(2))
                            });
                    }
                    chart
                        .configure_series_labels()
                        .position(SeriesLabelPosition::UpperRight)
                        .background_style(WHITE.mix(0.85))
                        .border_style(BLACK.mix(0.3))
                        .draw()
                        .map_err(draw_error)?;
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
            root.present().map_err(draw_error)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn chart(x_scale: Scale, y_scale: Scale) -> String {
        ScaledLines {
            title: "t",
            x_label: "number of disks",
            y_label: "latency std. deviation (s)",
            series: vec![
                ("A".into(), vec![(2.0, 0.05), (8.0, 0.5), (128.0, 3.0)]),
                ("B".into(), vec![(2.0, 0.0), (8.0, 0.1), (128.0, 0.2)]),
            ],
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
}
