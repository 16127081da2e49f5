//! Plots: grouped bar charts written as SVG.

use std::fmt::Write as _;
use std::path::Path;

use crate::{io_at, Result};

/// A grouped bar chart: one group per category, one bar per series.
pub struct Bars<'a> {
    pub title: &'a str,
    /// The y axis: quantity and unit, e.g. "requests/s" or "MiB".
    pub y_label: &'a str,
    pub categories: Vec<String>,
    /// (name, one value per category).
    pub series: Vec<(String, Vec<f64>)>,
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

impl Bars<'_> {
    /// Write the chart to `path` as SVG.
    pub fn write_svg(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.svg()).map_err(io_at(path))
    }

    fn svg(&self) -> String {
        let (title, ylabel, cats, series) =
            (self.title, self.y_label, &self.categories, &self.series);
        let (w, h, left, bottom, top) = (720.0, 360.0, 70.0, 60.0, 40.0);
        let maxv = series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .fold(0.0f64, f64::max)
            .max(1e-9);
        let colors = [
            "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2",
        ];
        let plot_w = w - left - 20.0;
        let plot_h = h - bottom - top;
        let gw = plot_w / cats.len().max(1) as f64;
        let bw = gw * 0.8 / series.len().max(1) as f64;
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{title}</text>\n<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{ylabel}</text>\n",
            w / 2.0,
            top + plot_h / 2.0,
            top + plot_h / 2.0
        );
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>",
            top + plot_h,
            left + plot_w,
            top + plot_h
        );
        for i in 0..=4 {
            let v = maxv * i as f64 / 4.0;
            let y = top + plot_h - plot_h * i as f64 / 4.0;
            let _ = writeln!(s, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><line x1=\"{left}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/>", left - 4.0, y + 4.0, fmt_num(v), left + plot_w);
        }
        for (ci, c) in cats.iter().enumerate() {
            let gx = left + gw * ci as f64 + gw * 0.1;
            for (si, (_, v)) in series.iter().enumerate() {
                let val = v.get(ci).copied().unwrap_or(0.0);
                let bh = plot_h * val / maxv;
                let _ = writeln!(
                    s,
                    "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>",
                    gx + bw * si as f64,
                    top + plot_h - bh,
                    bw * 0.95,
                    bh,
                    colors[si % colors.len()]
                );
            }
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{c}</text>",
                gx + gw * 0.4,
                top + plot_h + 16.0
            );
        }
        for (si, (name, _)) in series.iter().enumerate() {
            let x = left + 10.0 + 110.0 * si as f64;
            let _ = writeln!(s, "<rect x=\"{x}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{name}</text>", h - 24.0, colors[si % colors.len()], x + 14.0, h - 15.0);
        }
        s.push_str("</svg>\n");
        s
    }
}
