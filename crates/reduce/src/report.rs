//! `ecstack reduce report`: the Stacker of the seed (§3.6) — aggregate statistics per configuration
//! (original bytes, bytes after reduction, ratio, time), per extension and per directory, and beside each
//! exact figure a sampling estimate with a 95% confidence interval.
//!
//! The estimate is the ratio estimator over a sample of files chosen by a hash of their path (the rule
//! `analyze --sample` uses): R̂ = Σ reduced / Σ original over sampled files, variance
//! (1 − n/N) · Σ(yᵢ − R̂xᵢ)² / (n − 1) / (n · x̄²) (cluster sampling with files as clusters, Cochran §6).
//! For dedup the per-file figure is the file's bytes minus its duplicates (first occurrence in walk
//! order is the original), which sums to the exact total over all files, so the estimate is of that total.

use crate::analyze::{byte_sampled, sampled};
use crate::config::Method;
use crate::results::{open_db, Manifest};
use crate::ReduceError;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Report settings.
#[derive(Clone, Debug)]
pub struct ReportOptions {
    /// Rows in the per-extension and per-directory tables (largest first).
    pub top: usize,
    /// File sample for the estimate beside each exact figure (0 = no estimate).
    pub estimate_fraction: f64,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            top: 20,
            estimate_fraction: 0.05,
        }
    }
}

/// A sampling estimate of a configuration's reduction.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Estimate {
    /// `files` (a fraction of the files by path hash) or `bytes` (bytes-weighted: a file in with
    /// probability min(1, bytes / spacing_bytes)).
    pub design: String,
    /// The fraction of the files (bytes-weighted: expected; in an `analyze --sample-bytes` run: the
    /// fraction of the tree's bytes analysed).
    pub fraction: f64,
    /// Bytes-weighted: the spacing of the sample points (0 for a file sample).
    pub spacing_bytes: u64,
    pub files_sampled: u64,
    pub bytes_sampled: u64,
    /// Estimated (bytes after / original bytes) and its 95% interval.
    pub ratio: f64,
    pub ratio_low: f64,
    pub ratio_high: f64,
}

/// One configuration's totals.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Total {
    pub id: u32,
    pub label: String,
    pub kind: String,
    pub original_bytes: u64,
    pub reduced_bytes: u64,
    /// reduced / original (1.0 = nothing saved).
    pub ratio: f64,
    /// Time spent by this configuration (compression, or chunking + fingerprinting), CPU-seconds summed over workers.
    pub seconds: f64,
    pub estimate: Option<Estimate>,
    /// The bytes-weighted estimate: in a full run with as many files expected as the file sample
    /// (`estimate_fraction` of the files); in an `analyze --sample-bytes` run, from that sample.
    pub estimate_bytes: Option<Estimate>,
}

/// One extension or directory.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct GroupRow {
    pub name: String,
    pub files: u64,
    pub bytes: u64,
    /// Bytes after reduction, per configuration (in configuration order).
    pub reduced_bytes: Vec<u64>,
}

/// The whole report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    pub root: String,
    pub sample_fraction: f64,
    /// The spacing of an `analyze --sample-bytes` run.
    pub sample_bytes: Option<u64>,
    pub files: u64,
    pub bytes: u64,
    pub walk_files: u64,
    pub walk_bytes: u64,
    pub problems: BTreeMap<String, u64>,
    pub totals: Vec<Total>,
    pub dedup: BTreeMap<u32, crate::DedupTotals>,
    pub extensions: Vec<GroupRow>,
    pub directories: Vec<GroupRow>,
}

pub fn report(dir: &Path, opts: &ReportOptions) -> Result<Report, ReduceError> {
    let m = Manifest::load(dir)?;
    let conn = open_db(dir)?;
    let mut totals = Vec::new();
    for c in &m.configurations {
        let (orig, red, nanos): (i64, i64, i64) = conn.query_row(
            "SELECT COALESCE(SUM(f.bytes),0), COALESCE(SUM(o.reduced_bytes),0), COALESCE(SUM(o.nanos),0)
             FROM outcome o JOIN file f ON f.seq = o.seq WHERE o.config = ?1",
            [c.id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let full = m.sample_fraction >= 1.0 && m.sample_bytes.is_none();
        let wanted = opts.estimate_fraction > 0.0 && opts.estimate_fraction < 1.0;
        let estimate = if full && wanted {
            estimate(&conn, c.id, opts.estimate_fraction)?
        } else {
            None
        };
        let estimate_bytes = match m.sample_bytes {
            Some(s) => bytes_estimate(&conn, c.id, BytesDesign::Run(s, m.walk.bytes))?,
            None if full && wanted => {
                bytes_estimate(&conn, c.id, BytesDesign::Fraction(opts.estimate_fraction))?
            }
            None => None,
        };
        totals.push(Total {
            id: c.id,
            label: c.label.clone(),
            kind: match c.method {
                Method::Compression { .. } => "compression".into(),
                Method::Dedup { .. } => "dedup".into(),
            },
            original_bytes: orig as u64,
            reduced_bytes: red as u64,
            ratio: if orig > 0 {
                red as f64 / orig as f64
            } else {
                1.0
            },
            seconds: nanos as f64 / 1e9,
            estimate,
            estimate_bytes,
        });
    }
    let extensions = groups(&conn, "ext", m.configurations.len(), opts.top)?;
    let directories = groups(&conn, "dir", m.configurations.len(), opts.top)?;
    Ok(Report {
        root: m.root,
        sample_fraction: m.sample_fraction,
        sample_bytes: m.sample_bytes,
        files: m.files,
        bytes: m.bytes,
        walk_files: m.walk.files,
        walk_bytes: m.walk.bytes,
        problems: m.problems,
        totals,
        dedup: m.dedup,
        extensions,
        directories,
    })
}

fn groups(
    conn: &rusqlite::Connection,
    col: &str,
    configs: usize,
    top: usize,
) -> Result<Vec<GroupRow>, ReduceError> {
    let mut st = conn.prepare(&format!(
        "SELECT {col}, COUNT(*), SUM(bytes) FROM file GROUP BY {col} ORDER BY SUM(bytes) DESC, {col} LIMIT ?1"
    ))?;
    let mut rows: Vec<GroupRow> = st
        .query_map([top as i64], |r| {
            Ok(GroupRow {
                name: r.get(0)?,
                files: r.get::<_, i64>(1)? as u64,
                bytes: r.get::<_, i64>(2)? as u64,
                reduced_bytes: vec![0; configs],
            })
        })?
        .collect::<Result<_, _>>()?;
    let mut st = conn.prepare(&format!(
        "SELECT o.config, SUM(o.reduced_bytes) FROM outcome o JOIN file f ON f.seq = o.seq WHERE f.{col} = ?1 GROUP BY o.config"
    ))?;
    for g in &mut rows {
        let v = st.query_map([&g.name], |r| {
            Ok((r.get::<_, i64>(0)? as usize, r.get::<_, i64>(1)? as u64))
        })?;
        for x in v {
            let (c, b) = x?;
            if c < configs {
                g.reduced_bytes[c] = b;
            }
        }
    }
    Ok(rows)
}

/// The ratio estimator over the files whose path hash falls in the sample.
fn estimate(
    conn: &rusqlite::Connection,
    config: u32,
    fraction: f64,
) -> Result<Option<Estimate>, ReduceError> {
    let mut st = conn.prepare("SELECT f.path, f.bytes, o.reduced_bytes FROM outcome o JOIN file f ON f.seq = o.seq WHERE o.config = ?1")?;
    let rows = st.query_map([config], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)? as f64,
            r.get::<_, i64>(2)? as f64,
        ))
    })?;
    let (mut n_all, mut xs) = (0u64, Vec::new());
    for row in rows {
        let (path, x, y) = row?;
        n_all += 1;
        if sampled(path.as_bytes(), fraction) {
            xs.push((x, y));
        }
    }
    Ok(ratio_estimate(&xs, n_all).map(|(r, lo, hi)| Estimate {
        design: "files".into(),
        fraction,
        spacing_bytes: 0,
        files_sampled: xs.len() as u64,
        bytes_sampled: xs.iter().map(|p| p.0 as u64).sum(),
        ratio: r,
        ratio_low: lo,
        ratio_high: hi,
    }))
}

/// Which bytes-weighted sample an estimate is of.
#[derive(Clone, Copy)]
enum BytesDesign {
    /// Drawn here from a full run's files, with the spacing whose expected number of files is this
    /// fraction of the files (as many as the file sample, `spacing_for_fraction`).
    Fraction(f64),
    /// The files of an `analyze --sample-bytes SPACING` run (all of them are the sample), and the
    /// bytes of the whole tree's walk.
    Run(u64, u64),
}

/// The spacing s at which a bytes-weighted sample takes, in expectation, as many files as a file
/// sample of `fraction`: Σ min(1, xᵢ/s) = fraction·N (decreasing in s: bisection). It reads more
/// bytes than the file sample (each file in proportion to its size, the large ones whole).
pub(crate) fn spacing_for_fraction(sizes: &[u64], fraction: f64) -> u64 {
    let total: f64 = sizes.iter().map(|&x| x as f64).sum();
    let read = |s: f64| -> f64 { sizes.iter().map(|&x| (x as f64 / s).min(1.0)).sum() };
    let want = fraction * sizes.len() as f64;
    let (mut lo, mut hi) = (1.0f64, total.max(2.0) / fraction.max(1e-12));
    for _ in 0..200 {
        let mid = (lo * hi).sqrt();
        if read(mid) > want {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi / lo < 1.000_001 {
            break;
        }
    }
    hi.round().max(1.0) as u64
}

/// The bytes-weighted estimate: Horvitz–Thompson ratio R̂ = Σ yᵢ/πᵢ / Σ xᵢ/πᵢ over the sampled files,
/// πᵢ = min(1, xᵢ/s), and its 95% interval from the linearised variance of Poisson sampling,
/// V = Σ (1 − πᵢ)·((yᵢ − R̂xᵢ)/πᵢ)² / X̂² (Särndal et al. §5.6; systematic sampling in walk order is
/// treated as Poisson, which leaves out the gain from walk order and so errs on the wide side).
/// Files with xᵢ ≥ s are certain (πᵢ = 1) and add no variance: the giants that a file sample misses.
fn bytes_estimate(
    conn: &rusqlite::Connection,
    config: u32,
    design: BytesDesign,
) -> Result<Option<Estimate>, ReduceError> {
    let mut st = conn.prepare(
        "SELECT f.bytes, o.reduced_bytes FROM outcome o JOIN file f ON f.seq = o.seq WHERE o.config = ?1 ORDER BY f.seq",
    )?;
    let rows: Vec<(u64, u64)> = st
        .query_map([config], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
        })?
        .collect::<Result<_, _>>()?;
    let (spacing, fraction, sample): (u64, f64, Vec<(u64, u64)>) = match design {
        BytesDesign::Run(s, walk_bytes) => {
            let read: u64 = rows.iter().map(|r| r.0).sum();
            (s, read as f64 / walk_bytes.max(1) as f64, rows)
        }
        BytesDesign::Fraction(f) => {
            let sizes: Vec<u64> = rows.iter().map(|r| r.0).collect();
            let s = spacing_for_fraction(&sizes, f);
            let mut start = 0u64;
            let mut picked = Vec::new();
            for &(x, y) in &rows {
                if byte_sampled(start, x, s) {
                    picked.push((x, y));
                }
                start += x;
            }
            (s, f, picked)
        }
    };
    Ok(
        ht_ratio_estimate(&sample, spacing).map(|(r, lo, hi)| Estimate {
            design: "bytes".into(),
            fraction,
            spacing_bytes: spacing,
            files_sampled: sample.len() as u64,
            bytes_sampled: sample.iter().map(|p| p.0).sum(),
            ratio: r,
            ratio_low: lo,
            ratio_high: hi,
        }),
    )
}

/// R̂ and its 95% interval for a bytes-weighted sample of spacing `s` (see [`bytes_estimate`]).
pub(crate) fn ht_ratio_estimate(sample: &[(u64, u64)], s: u64) -> Option<(f64, f64, f64)> {
    let pi = |x: u64| (x as f64 / s as f64).min(1.0);
    let (mut xh, mut yh) = (0.0, 0.0);
    for &(x, y) in sample {
        if x > 0 {
            xh += x as f64 / pi(x);
            yh += y as f64 / pi(x);
        }
    }
    if sample.len() < 2 || xh <= 0.0 {
        return None;
    }
    let r = yh / xh;
    let v: f64 = sample
        .iter()
        .filter(|p| p.0 > 0)
        .map(|&(x, y)| {
            let p = pi(x);
            (1.0 - p) * ((y as f64 - r * x as f64) / p).powi(2)
        })
        .sum::<f64>()
        / (xh * xh);
    let se = v.sqrt();
    Some((r, (r - 1.96 * se).max(0.0), r + 1.96 * se))
}

/// R̂ and its 95% interval from sampled (xᵢ, yᵢ) out of a population of `n_all` files.
pub(crate) fn ratio_estimate(xs: &[(f64, f64)], n_all: u64) -> Option<(f64, f64, f64)> {
    let n = xs.len();
    let sx: f64 = xs.iter().map(|p| p.0).sum();
    if n < 2 || sx <= 0.0 {
        return None;
    }
    let r = xs.iter().map(|p| p.1).sum::<f64>() / sx;
    let xbar = sx / n as f64;
    let s2 = xs.iter().map(|&(x, y)| (y - r * x).powi(2)).sum::<f64>() / (n - 1) as f64;
    let fpc = (1.0 - n as f64 / n_all.max(1) as f64).max(0.0);
    let se = (fpc * s2 / (n as f64 * xbar * xbar)).sqrt();
    Some((r, (r - 1.96 * se).max(0.0), r + 1.96 * se))
}

fn pct(red: u64, orig: u64) -> String {
    if orig == 0 {
        "-".into()
    } else {
        format!("{:+.2}%", (red as f64 / orig as f64 - 1.0) * 100.0)
    }
}

impl Report {
    /// The anonymised export, for sharing results: no root and no paths — each directory becomes the
    /// first 16 hex digits of BLAKE3(salt ‖ path) (the same directory hashes alike within one salt, so two
    /// exports with one salt can be compared), and the problem paths never leave the results directory.
    /// Extension statistics stay as they are.
    pub fn anonymized(mut self, salt: &str) -> Report {
        self.root = "(anonymised)".into();
        for d in &mut self.directories {
            let mut h = blake3::Hasher::new();
            h.update(salt.as_bytes());
            h.update(&[0]);
            h.update(d.name.as_bytes());
            d.name = h.finalize().to_hex()[..16].to_string();
        }
        self
    }

    /// The text tables (the seed's Stacker output, as tables).
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "root {}: {} files, {} bytes analysed",
            self.root, self.files, self.bytes
        );
        if self.sample_fraction < 1.0 {
            let _ = writeln!(
                s,
                "SAMPLED run: {:.4} of the files ({} of {} files, {} of {} bytes in the tree); figures are of the sample",
                self.sample_fraction, self.files, self.walk_files, self.bytes, self.walk_bytes
            );
        }
        if let Some(sp) = self.sample_bytes {
            let _ = writeln!(
                s,
                "SAMPLED run, bytes-weighted: one point every {sp} bytes ({} of {} files, {} of {} bytes in the tree); figures are of the sample, the bytes-weighted estimate is of the tree",
                self.files, self.walk_files, self.bytes, self.walk_bytes
            );
        }
        if !self.problems.is_empty() {
            let p: Vec<String> = self
                .problems
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let _ = writeln!(
                s,
                "problems (counted, skipped or partly read): {}",
                p.join(", ")
            );
        }
        let _ = writeln!(
            s,
            "\n{:<34} {:>16} {:>16} {:>7} {:>9} {:>10}  {:<44} estimate, bytes-weighted (95% CI)",
            "configuration",
            "original bytes",
            "after",
            "ratio",
            "change",
            "seconds",
            "estimate, file sample (95% CI)"
        );
        for t in &self.totals {
            let show = |e: &Option<Estimate>| {
                e.as_ref().map_or("-".to_string(), |e| {
                    format!(
                        "{:.4} [{:.4}, {:.4}] from {} files",
                        e.ratio, e.ratio_low, e.ratio_high, e.files_sampled
                    )
                })
            };
            let est = format!("{:<44} {}", show(&t.estimate), show(&t.estimate_bytes));
            let _ = writeln!(
                s,
                "{:<34} {:>16} {:>16} {:>7.4} {:>9} {:>10.3}  {}",
                t.label,
                t.original_bytes,
                t.reduced_bytes,
                t.ratio,
                pct(t.reduced_bytes, t.original_bytes),
                t.seconds,
                est
            );
        }
        if !self.dedup.is_empty() {
            let _ = writeln!(
                s,
                "\n{:<34} {:>14} {:>14} {:>16}",
                "dedup index", "chunks", "unique chunks", "unique bytes"
            );
            for t in &self.totals {
                if let Some(d) = self.dedup.get(&t.id) {
                    let _ = writeln!(
                        s,
                        "{:<34} {:>14} {:>14} {:>16}",
                        t.label, d.chunks, d.unique_chunks, d.unique_bytes
                    );
                }
            }
        }
        for (title, rows) in [
            ("extension", &self.extensions),
            ("directory", &self.directories),
        ] {
            let _ = writeln!(
                s,
                "\nper {title} (largest first): change in bytes per configuration"
            );
            let mut head = format!("{:<40} {:>8} {:>14}", title, "files", "bytes");
            for t in &self.totals {
                let _ = write!(head, " {:>9}", format!("#{}", t.id));
            }
            let _ = writeln!(s, "{head}");
            for g in rows {
                let name = if g.name.is_empty() { "(none)" } else { &g.name };
                let mut line = format!("{:<40} {:>8} {:>14}", name, g.files, g.bytes);
                for r in &g.reduced_bytes {
                    let _ = write!(line, " {:>9}", pct(*r, g.bytes));
                }
                let _ = writeln!(s, "{line}");
            }
        }
        let _ = writeln!(
            s,
            "\n#N = configuration id: {}",
            self.totals
                .iter()
                .map(|t| format!("#{} {}", t.id, t.label))
                .collect::<Vec<_>>()
                .join(", ")
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_estimate_of_a_constant_ratio_is_exact() {
        let xs: Vec<(f64, f64)> = (1..50)
            .map(|i| (i as f64 * 100.0, i as f64 * 25.0))
            .collect();
        let (r, lo, hi) = ratio_estimate(&xs, 1000).unwrap();
        assert!((r - 0.25).abs() < 1e-12 && (lo - 0.25).abs() < 1e-9 && (hi - 0.25).abs() < 1e-9);
        assert!(ratio_estimate(&xs[..1], 10).is_none());
    }
}
