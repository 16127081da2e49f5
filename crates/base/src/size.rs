//! Byte sizes: `4096`, `4K`, `256MiB`, `1.5G` (powers of 1024) in, `1 MiB` out.

/// Parse a size such as `4096`, `4K`, `1.5G`, `256MiB` (powers of 1024).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let stripped = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (num, mult) = match stripped.chars().last() {
        Some('k') => (&stripped[..stripped.len() - 1], 1u64 << 10),
        Some('m') => (&stripped[..stripped.len() - 1], 1 << 20),
        Some('g') => (&stripped[..stripped.len() - 1], 1 << 30),
        Some('t') => (&stripped[..stripped.len() - 1], 1 << 40),
        _ => (stripped, 1),
    };
    if let Ok(v) = num.parse::<u64>() {
        return v
            .checked_mul(mult)
            .ok_or_else(|| format!("size '{s}' is too large"));
    }
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * (mult as f64) < 1.8e19 => {
            Ok((v * mult as f64).round() as u64)
        }
        _ => Err(format!(
            "'{s}' is not a size (examples: 4096, 4K, 256M, 1.5G)"
        )),
    }
}

/// Human-readable binary size: whole units where exact (`4 KiB`, `1 MiB`), one decimal otherwise.
pub fn fmt_size(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while i < U.len() - 1 && (v >= 1024.0 && (v / 1024.0).fract() == 0.0 || v >= 10.0 * 1024.0) {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{} {}", v as u64, U[i])
    } else {
        format!("{v:.1} {}", U[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("64k").unwrap(), 65536);
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("abc").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(fmt_size(1 << 20), "1 MiB");
        assert_eq!(fmt_size(4096), "4 KiB");
        assert_eq!(fmt_size(1536), "1536 B");
        assert_eq!(fmt_size(15 << 20), "15 MiB");
    }
}
