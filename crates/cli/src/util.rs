//! Small helpers shared by the subcommands: sizes, progress bars, JSON output.

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

pub use ecstack_base::fmt_size;

/// Parse a size such as `4096`, `64K`, `1M`, `2GiB`, `1.5G` (binary units).
pub fn parse_size(s: &str) -> Result<u64> {
    ecstack_base::parse_size(s).map_err(|e| anyhow::anyhow!(e))
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

/// Print a value as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}
