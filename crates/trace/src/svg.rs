//! Hand-written SVG plots: the update-size distribution (CodFS Fig 3.1, stacked bars per volume)
//! and the address-reuse CDF (ZombieNAND Fig 4.5, one curve per volume).

use crate::analyze::{Report, SIZE_CLASS_LABELS};
use std::fmt::Write;

const W: f64 = 720.0;
const H: f64 = 420.0;
const ML: f64 = 60.0;
const MR: f64 = 160.0;
const MT: f64 = 30.0;
const MB: f64 = 70.0;
const COLORS: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn header(s: &mut String, title: &str) {
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="18" text-anchor="middle" font-size="14">{}</text>"#,
        (W - MR + ML) / 2.0,
        esc(title)
    );
}

fn axes(s: &mut String, ylabel: &str, xlabel: &str) {
    let (x0, y0, x1, y1) = (ML, H - MB, W - MR, MT);
    let _ = writeln!(
        s,
        r#"<path d="M{x0},{y1} L{x0},{y0} L{x1},{y0}" stroke="black" fill="none"/>"#
    );
    for i in 0..=10 {
        let f = i as f64 / 10.0;
        let y = y0 - f * (y0 - y1);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}%</text>"##,
            x0 - 4.0,
            y + 4.0,
            i * 10
        );
    }
    let _ = writeln!(
        s,
        r#"<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (y0 + y1) / 2.0,
        esc(ylabel)
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        H - 12.0,
        esc(xlabel)
    );
}

/// Stacked bars: per volume, the share of update writes in each size class.
pub fn size_distribution_svg(report: &Report) -> String {
    let mut s = String::new();
    header(&mut s, "Update size distribution");
    axes(&mut s, "update writes", "volume");
    let n = report.volumes.len().max(1) as f64;
    let (x0, y0, x1, y1) = (ML, H - MB, W - MR, MT);
    let slot = (x1 - x0) / n;
    let bw = (slot * 0.7).max(1.0);
    for (i, v) in report.volumes.iter().enumerate() {
        let x = x0 + slot * i as f64 + (slot - bw) / 2.0;
        let mut acc = 0.0;
        for (c, p) in v.update_size_pct.iter().enumerate() {
            let h = p / 100.0 * (y0 - y1);
            let y = y0 - acc - h;
            let _ = writeln!(
                s,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{bw:.1}" height="{h:.1}" fill="{}"><title>{} {}: {:.2}%</title></rect>"#,
                COLORS[c],
                esc(&v.volume),
                esc(SIZE_CLASS_LABELS[c]),
                p
            );
            acc += h;
        }
        let _ = writeln!(
            s,
            r#"<text transform="translate({:.1},{}) rotate(-45)" text-anchor="end">{}</text>"#,
            x + bw / 2.0,
            y0 + 12.0,
            esc(&v.volume)
        );
    }
    for (c, l) in SIZE_CLASS_LABELS.iter().enumerate() {
        let y = MT + 10.0 + 18.0 * c as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{}" y="{y}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            W - MR + 16.0,
            COLORS[c],
            W - MR + 34.0,
            y + 10.0,
            esc(l)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// One CDF curve per volume: x = fraction of the working set (hottest blocks first),
/// y = fraction of all accesses.
pub fn reuse_cdf_svg(report: &Report) -> String {
    let mut s = String::new();
    header(&mut s, "Address reuse CDF");
    axes(
        &mut s,
        "fraction of accesses",
        "fraction of working set (hottest first)",
    );
    let (x0, y0, x1, y1) = (ML, H - MB, W - MR, MT);
    for i in 0..=10 {
        let x = x0 + i as f64 / 10.0 * (x1 - x0);
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{}" text-anchor="middle">{}%</text>"#,
            y0 + 14.0,
            i * 10
        );
    }
    for (i, v) in report.volumes.iter().enumerate() {
        if v.reuse_cdf.is_empty() {
            continue;
        }
        let color = COLORS[i % COLORS.len()];
        let mut d = String::new();
        for (k, p) in v.reuse_cdf.iter().enumerate() {
            let x = x0 + p[0] * (x1 - x0);
            let y = y0 - p[1] * (y0 - y1);
            let _ = write!(d, "{}{x:.1},{y:.1} ", if k == 0 { "M" } else { "L" });
        }
        let _ = writeln!(
            s,
            r#"<path d="{}" stroke="{color}" stroke-width="1.5" fill="none"><title>{}</title></path>"#,
            d.trim_end(),
            esc(&v.volume)
        );
        let y = MT + 10.0 + 16.0 * i as f64;
        if y < H - MB {
            let _ = writeln!(
                s,
                r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
                W - MR + 16.0,
                y + 6.0,
                W - MR + 30.0,
                y + 6.0,
                W - MR + 34.0,
                y + 10.0,
                esc(&v.volume)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}
