//! Small helpers shared by the subcommands: sizes, progress bars, JSON output.

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

pub use ecstack_base::fmt_size;

/// Parse a size such as `4096`, `64K`, `1M`, `2GiB`, `1.5G` (binary units).
pub fn parse_size(s: &str) -> Result<u64> {
    ecstack_base::parse_size(s).map_err(|e| anyhow::anyhow!(e))
}

/// A flag given in seconds (such as `--runtime 2.5`) as a `Duration`: a finite, non-negative
/// number small enough to represent (at most 10^9 s); otherwise one line naming the flag.
pub fn secs_arg(flag: &str, secs: f64) -> Result<std::time::Duration> {
    const SECS_MAX: f64 = 1e9;
    if !(secs.is_finite() && (0.0..=SECS_MAX).contains(&secs)) {
        let got = if secs.abs() >= 1e6 {
            format!("{secs:e}")
        } else {
            secs.to_string()
        };
        anyhow::bail!("{flag} must be a number of seconds in [0, {SECS_MAX:e}], got {got}");
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// A byte progress bar drawn only when stderr is a terminal (quiet when piped or in CI).
pub fn progress_bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// A progress line of long work on stderr, prefixed with the seconds since the first one; only
/// when stderr is a terminal (quiet when piped or in CI).
pub fn progress_line(line: &str) {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(std::time::Instant::now);
    if std::io::stderr().is_terminal() {
        eprintln!("[{:>5.0} s] {line}", start.elapsed().as_secs_f64());
    }
}

/// Print a value as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// A report on stdout: the JSON with `--json`, otherwise its Markdown.
pub fn print_json_or<T: serde::Serialize>(
    report: &T,
    markdown: impl FnOnce() -> String,
    json: bool,
) -> Result<()> {
    if json {
        return print_json(report);
    }
    println!("{}", markdown());
    Ok(())
}

/// An experiment's report, already written to `out`: the JSON with `--json`, otherwise its Markdown
/// on stdout and where the files are on stderr.
pub fn print_report<T: serde::Serialize>(
    report: &T,
    markdown: impl FnOnce() -> String,
    out: &std::path::Path,
    json: bool,
) -> Result<()> {
    if json {
        return print_json(report);
    }
    println!("{}", markdown());
    eprintln!("report, CSV and SVG files in {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_flags_refuse_hostile_values() {
        assert_eq!(secs_arg("--t", 1.5).unwrap().as_millis(), 1500);
        assert!(secs_arg("--t", 0.0).unwrap().is_zero());
        for bad in [
            -1.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e300,
            1e10,
        ] {
            let e = secs_arg("--t", bad).unwrap_err().to_string();
            assert!(
                e.starts_with("--t must be") && !e.contains('\n'),
                "{bad}: {e}"
            );
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM: how the daemons (`ecstack mds`, `ecstack osd`) learn to stop.
pub async fn shutdown_signal() {
    crate::signals::stopped().await
}
