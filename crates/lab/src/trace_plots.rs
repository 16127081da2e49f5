//! Figures of a trace analysis (`ecstack trace analyze --plot-dir`), drawn through [`crate::plot`]:
//! the update-size distribution (CodFS Fig 3.1) and the address-reuse CDF (ZombieNAND Fig 4.5).

use ecstack_trace::analyze::{Report, SIZE_CLASS_LABELS};

use crate::plot::{Bars, Lines};

/// Stacked bars: per volume, the share of update writes in each size class (percent).
pub fn size_distribution(report: &Report) -> Bars<'static> {
    let series = SIZE_CLASS_LABELS
        .iter()
        .enumerate()
        .map(|(c, label)| {
            let v = report
                .volumes
                .iter()
                .map(|v| v.update_size_pct[c])
                .collect();
            (label.to_string(), v)
        })
        .collect();
    Bars {
        title: "Update size distribution",
        x_label: "volume",
        y_label: "update writes (%)",
        categories: report.volumes.iter().map(|v| v.volume.clone()).collect(),
        series,
        stacked: true,
    }
}

/// One CDF curve per volume: x = fraction of the working set (hottest blocks first), y = fraction
/// of all accesses. Volumes without a CDF (analysis run without it) are left out.
pub fn reuse_cdf(report: &Report) -> Lines<'static> {
    let series = report
        .volumes
        .iter()
        .filter(|v| !v.reuse_cdf.is_empty())
        .map(|v| {
            let points = v.reuse_cdf.iter().map(|p| (p[0], p[1])).collect();
            (v.volume.clone(), points)
        })
        .collect();
    Lines {
        title: "Address reuse CDF",
        x_label: "fraction of working set (hottest first)",
        y_label: "fraction of accesses",
        series,
        y_range: Some((0.0, 1.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecstack_trace::{analyze_records, synthesize_preset, AnalyzeOptions};

    #[test]
    fn trace_figures_name_every_volume_and_escape_labels() {
        let t = synthesize_preset("eplog-usr", 0.002, 1).unwrap();
        let rep = analyze_records(&t.records, &t.volumes, AnalyzeOptions::default());
        assert!(!rep.volumes.is_empty());
        let sizes = size_distribution(&rep).svg().unwrap();
        let cdf = reuse_cdf(&rep).svg().unwrap();
        for svg in [&sizes, &cdf] {
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
            // Every '<' opens a tag: labels such as "<4K" are escaped.
            for (i, _) in svg.match_indices('<') {
                let next = svg[i + 1..].chars().next().unwrap();
                assert!(
                    next.is_ascii_alphabetic() || next == '/',
                    "unescaped '<' at {i}"
                );
            }
            for v in &rep.volumes {
                assert!(svg.contains(&v.volume), "{} missing", v.volume);
            }
        }
        assert!(
            sizes.contains("&lt;4K"),
            "the smallest size class is labelled"
        );
        assert!(sizes.contains("update writes (%)") && cdf.contains("fraction of accesses"));
    }
}
