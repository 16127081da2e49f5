//! Small helpers shared by the subcommands: sizes, progress bars, JSON output.

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// Parse a size such as `4096`, `64K`, `1M`, `2GiB`, `1.5G` (binary units).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("invalid size '{s}' (examples: 4096, 64K, 1M, 2G)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => bail!("invalid size unit in '{s}' (use K, M, G or T)"),
    };
    if !(n >= 0.0 && n.is_finite()) {
        bail!("invalid size '{s}'");
    }
    Ok((n * mult as f64).round() as u64)
}

/// Human-readable binary size.
pub fn fmt_size(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 && (v / 1024.0).fract() == 0.0
        || v >= 1024.0 * 10.0 && i < U.len() - 1
    {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{} {}", v as u64, U[i])
    } else {
        format!("{v:.1} {}", U[i])
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("abc").is_err());
        assert_eq!(fmt_size(1 << 20), "1 MiB");
        assert_eq!(fmt_size(4096), "4 KiB");
    }
}
