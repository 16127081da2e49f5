//! What to measure: compression and deduplication configurations, from a TOML file and/or flags.
//!
//! One grammar serves the TOML file and the command line (see docs/reduce.md):
//! - compression `ALGO[:LEVEL]@SIZE[,SIZE...]`: `zlib:6@16K,128K`, `deflate:9@128K`, `lz4@64K`, `zstd:3@128K`;
//!   each size makes one configuration (the file is cut into chunks of that size, each compressed alone).
//! - deduplication `whole[:FP]`, `static:SIZE[:FP]`, `fastcdc:AVG[-MIN-MAX][:FP]`,
//!   `rabin:AVG[-MIN-MAX][-wWINDOW][:FP]` with FP one of `sha1`, `sha256`, `blake3` (default `sha1` as in the seed).

use crate::ReduceError;
use ecstack_base::size::parse_size;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A compressor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// DEFLATE with the zlib wrapper (2-byte header, Adler-32 trailer), as the seed's ZLIB.
    Zlib,
    /// Raw DEFLATE (no wrapper).
    Deflate,
    /// LZ4 block format (liblz4's `LZ4_compress_default`, as `lz4 -1` per block).
    Lz4,
    /// Zstandard (libzstd), one frame per chunk.
    Zstd,
}

/// A chunk fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fingerprint {
    Sha1,
    Sha256,
    Blake3,
}

impl Fingerprint {
    /// Bytes of one fingerprint.
    pub fn bytes(self) -> usize {
        match self {
            Fingerprint::Sha1 => 20,
            Fingerprint::Sha256 | Fingerprint::Blake3 => 32,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Fingerprint::Sha1 => "sha1",
            Fingerprint::Sha256 => "sha256",
            Fingerprint::Blake3 => "blake3",
        }
    }
}

/// How a file is cut into segments for deduplication (seed §3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Segmentation {
    /// One segment per file (Single Instance Storage).
    Whole,
    /// Fixed-size segments ("static segmentation").
    Static { chunk_bytes: u64 },
    /// FastCDC 2020 (the `fastcdc` crate, normalization level 1).
    FastCdc {
        min_bytes: u64,
        avg_bytes: u64,
        max_bytes: u64,
    },
    /// The seed's Rabin segmentation with a sliding window (ours, `rabin.rs`).
    Rabin {
        window_bytes: u64,
        min_bytes: u64,
        avg_bytes: u64,
        max_bytes: u64,
    },
}

/// One thing measured: a compressor at a level and chunk size, or a segmentation with a fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "lowercase")]
pub enum Method {
    Compression {
        codec: Codec,
        level: i32,
        chunk_bytes: u64,
    },
    Dedup {
        segmentation: Segmentation,
        fingerprint: Fingerprint,
    },
}

/// A numbered configuration; `label` is its spec in the grammar above (it parses back to the same method).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Configuration {
    pub id: u32,
    pub label: String,
    pub method: Method,
}

/// Chunk sizes accepted for compression (a chunk must fit in one read window).
pub const CHUNK_BYTES_MAX: u64 = 64 << 20;

/// The settings of one analysis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Worker threads processing files (changeable while running: edit the file, it is re-read).
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Compression specs (`zstd:3@128K`).
    #[serde(default)]
    pub compression: Vec<String>,
    /// Deduplication specs (`fastcdc:16K:blake3`).
    #[serde(default)]
    pub dedup: Vec<String>,
    /// Follow symbolic links (loops are detected, counted and skipped).
    #[serde(default)]
    pub follow_symlinks: bool,
    /// Memory for chunk records before they spill to a sorted run file, per worker.
    #[serde(default = "default_index_memory")]
    pub index_memory_bytes: u64,
}

fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn default_index_memory() -> u64 {
    64 << 20
}

impl Default for Config {
    /// The seed's exemplary set (§3.6) plus today's lz4/zstd and FastCDC with BLAKE3.
    fn default() -> Config {
        Config {
            workers: default_workers(),
            compression: vec![
                "zlib:3@16K,128K".into(),
                "zlib:9@16K,128K".into(),
                "lz4@16K,128K".into(),
                "zstd:3@16K,128K".into(),
            ],
            dedup: vec![
                "whole:sha1".into(),
                "static:16K:sha1".into(),
                "static:128K:sha1".into(),
                "rabin:16K-8K-32K-w48:sha1".into(),
                "rabin:128K-64K-256K-w48:sha1".into(),
                "fastcdc:16K:blake3".into(),
            ],
            follow_symlinks: false,
            index_memory_bytes: default_index_memory(),
        }
    }
}

impl Config {
    /// Read a TOML configuration file; missing keys take the defaults.
    pub fn load(path: &Path) -> Result<Config, ReduceError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ReduceError::Config(format!("cannot read {}: {e}", path.display())))?;
        let mut c: Config = toml::from_str(&text)
            .map_err(|e| ReduceError::Config(format!("{}: {}", path.display(), one_line(&e))))?;
        let d = Config::default();
        if !text_has_key(&text, "compression") {
            c.compression = d.compression;
        }
        if !text_has_key(&text, "dedup") {
            c.dedup = d.dedup;
        }
        c.validate()?;
        Ok(c)
    }

    /// The worker count only, for live throttling (re-read while running).
    pub fn load_workers(path: &Path) -> Result<usize, ReduceError> {
        let c = Config::load(path)?;
        Ok(c.workers)
    }

    /// Check every spec and the limits.
    pub fn validate(&self) -> Result<(), ReduceError> {
        if self.workers == 0 {
            return Err(ReduceError::Config("workers must be at least 1".into()));
        }
        if self.index_memory_bytes < 1 << 20 {
            return Err(ReduceError::Config(
                "index_memory_bytes must be at least 1 MiB".into(),
            ));
        }
        let list = self.configurations()?;
        if list.is_empty() {
            return Err(ReduceError::Config(
                "nothing to measure: no compression and no dedup configuration".into(),
            ));
        }
        Ok(())
    }

    /// Expand the specs into numbered configurations (compression first, then dedup, in spec order).
    pub fn configurations(&self) -> Result<Vec<Configuration>, ReduceError> {
        let mut methods = Vec::new();
        for s in &self.compression {
            methods.extend(parse_compression(s)?);
        }
        for s in &self.dedup {
            methods.push(parse_dedup(s)?);
        }
        let mut out: Vec<Configuration> = Vec::new();
        for m in methods {
            let label = label(&m);
            if out.iter().any(|c| c.label == label) {
                return Err(ReduceError::Config(format!(
                    "configuration {label} is listed twice"
                )));
            }
            out.push(Configuration {
                id: out.len() as u32,
                label,
                method: m,
            });
        }
        Ok(out)
    }
}

fn text_has_key(text: &str, key: &str) -> bool {
    text.lines().any(|l| {
        let t = l.trim_start();
        t.strip_prefix(key)
            .is_some_and(|r| r.trim_start().starts_with('='))
    })
}

fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn size(s: &str, spec: &str) -> Result<u64, ReduceError> {
    parse_size(s).map_err(|e| ReduceError::Config(format!("{spec}: {e}")))
}

fn bad(spec: &str, why: &str) -> ReduceError {
    ReduceError::Config(format!("'{spec}': {why}"))
}

/// Parse `ALGO[:LEVEL]@SIZE[,SIZE...]` into one method per size.
pub fn parse_compression(spec: &str) -> Result<Vec<Method>, ReduceError> {
    let (head, sizes) = spec.split_once('@').ok_or_else(|| {
        bad(
            spec,
            "compression is ALGO[:LEVEL]@SIZE[,SIZE...], e.g. zstd:3@128K",
        )
    })?;
    let (algo, level) = match head.split_once(':') {
        Some((a, l)) => {
            let l: i32 = l
                .parse()
                .map_err(|_| bad(spec, "the level is not an integer"))?;
            (a, Some(l))
        }
        None => (head, None),
    };
    let (codec, level) = match (algo.to_ascii_lowercase().as_str(), level) {
        ("zlib", l) => (Codec::Zlib, l.unwrap_or(6)),
        ("deflate", l) => (Codec::Deflate, l.unwrap_or(6)),
        ("lz4", None | Some(1)) => (Codec::Lz4, 1),
        ("lz4", Some(_)) => return Err(bad(spec, "lz4 (liblz4 block format, lz4 -1) has one level")),
        ("zstd", l) => (Codec::Zstd, l.unwrap_or(3)),
        ("lzo", _) => {
            return Err(bad(
                spec,
                "LZO is left out: its implementations are GPL-2.0, which the project's Apache-2.0 licence cannot take in (docs/reduce.md)",
            ))
        }
        _ => return Err(bad(spec, "unknown compressor (zlib, deflate, lz4, zstd)")),
    };
    match codec {
        Codec::Zlib | Codec::Deflate if !(0..=9).contains(&level) => {
            return Err(bad(spec, "zlib/deflate levels are 0..=9"))
        }
        Codec::Zstd if !(1..=22).contains(&level) => {
            return Err(bad(spec, "zstd levels are 1..=22"))
        }
        _ => {}
    }
    let mut out = Vec::new();
    for s in sizes.split(',') {
        let chunk_bytes = size(s, spec)?;
        if chunk_bytes == 0 || chunk_bytes > CHUNK_BYTES_MAX {
            return Err(bad(spec, "chunk sizes are 1 byte .. 64 MiB"));
        }
        out.push(Method::Compression {
            codec,
            level,
            chunk_bytes,
        });
    }
    Ok(out)
}

fn parse_fingerprint(s: &str, spec: &str) -> Result<Fingerprint, ReduceError> {
    match s.to_ascii_lowercase().as_str() {
        "sha1" | "sha-1" => Ok(Fingerprint::Sha1),
        "sha256" | "sha-256" => Ok(Fingerprint::Sha256),
        "blake3" => Ok(Fingerprint::Blake3),
        _ => Err(bad(spec, "unknown fingerprint (sha1, sha256, blake3)")),
    }
}

/// Parse a dedup spec (see the module doc).
pub fn parse_dedup(spec: &str) -> Result<Method, ReduceError> {
    let parts: Vec<&str> = spec.split(':').collect();
    let kind = parts[0].to_ascii_lowercase();
    let (params, fp) = match (kind.as_str(), parts.len()) {
        ("whole", 1) => (None, Fingerprint::Sha1),
        ("whole", 2) => (None, parse_fingerprint(parts[1], spec)?),
        (_, 2) => (Some(parts[1]), Fingerprint::Sha1),
        (_, 3) => (Some(parts[1]), parse_fingerprint(parts[2], spec)?),
        _ => return Err(bad(spec, "dedup is whole[:FP], static:SIZE[:FP], fastcdc:AVG[-MIN-MAX][:FP] or rabin:AVG[-MIN-MAX][-wWINDOW][:FP]")),
    };
    let segmentation = match (kind.as_str(), params) {
        ("whole", None) => Segmentation::Whole,
        ("static", Some(p)) => {
            let chunk_bytes = size(p, spec)?;
            if chunk_bytes == 0 || chunk_bytes > CHUNK_BYTES_MAX {
                return Err(bad(spec, "static segment sizes are 1 byte .. 64 MiB"));
            }
            Segmentation::Static { chunk_bytes }
        }
        ("fastcdc", Some(p)) => {
            let (avg, min, max, window) = cdc_params(p, spec, 4)?;
            if window.is_some() {
                return Err(bad(spec, "FastCDC has no window parameter"));
            }
            // The fastcdc crate's limits (it asserts them; we check first).
            if !(64..=1 << 20).contains(&min)
                || !(256..=4 << 20).contains(&avg)
                || !(1024..=16 << 20).contains(&max)
            {
                return Err(bad(spec, "FastCDC needs 64 B <= min <= 1 MiB, 256 B <= avg <= 4 MiB, 1 KiB <= max <= 16 MiB"));
            }
            Segmentation::FastCdc {
                min_bytes: min,
                avg_bytes: avg,
                max_bytes: max,
            }
        }
        ("rabin", Some(p)) => {
            // The seed's exemplary Rabin settings: min = avg/2, max = 2·avg, window 48.
            let (avg, min, max, window) = cdc_params(p, spec, 2)?;
            let window = window.unwrap_or(48);
            if !(8..=4096).contains(&window) {
                return Err(bad(spec, "the Rabin window is 8..=4096 bytes"));
            }
            if max > CHUNK_BYTES_MAX {
                return Err(bad(spec, "Rabin max is at most 64 MiB"));
            }
            Segmentation::Rabin {
                window_bytes: window,
                min_bytes: min,
                avg_bytes: avg,
                max_bytes: max,
            }
        }
        _ => {
            return Err(bad(
                spec,
                "unknown dedup method (whole, static, fastcdc, rabin)",
            ))
        }
    };
    Ok(Method::Dedup {
        segmentation,
        fingerprint: fp,
    })
}

/// `AVG[-MIN-MAX][-wWINDOW]`; AVG a power of two; defaults min = avg/spread, max = avg·spread.
fn cdc_params(
    p: &str,
    spec: &str,
    spread: u64,
) -> Result<(u64, u64, u64, Option<u64>), ReduceError> {
    let mut nums = Vec::new();
    let mut window = None;
    for t in p.split('-') {
        if let Some(w) = t.strip_prefix('w') {
            window = Some(size(w, spec)?);
        } else {
            nums.push(size(t, spec)?);
        }
    }
    let (avg, min, max) = match nums[..] {
        [a] => (a, a / spread, a * spread),
        [a, mi, ma] => (a, mi, ma),
        _ => return Err(bad(spec, "give AVG or AVG-MIN-MAX")),
    };
    if !avg.is_power_of_two() {
        return Err(bad(
            spec,
            "the average segment size must be a power of two (the cut mask is avg-1)",
        ));
    }
    if !(min < avg && avg < max) {
        return Err(bad(spec, "need min < avg < max"));
    }
    Ok((avg, min, max, window))
}

/// The spec text of a method (parses back to the same method).
pub fn label(m: &Method) -> String {
    match *m {
        Method::Compression {
            codec: Codec::Lz4,
            chunk_bytes,
            ..
        } => format!("lz4@{}", sz(chunk_bytes)),
        Method::Compression {
            codec,
            level,
            chunk_bytes,
        } => {
            let name = match codec {
                Codec::Zlib => "zlib",
                Codec::Deflate => "deflate",
                Codec::Zstd => "zstd",
                Codec::Lz4 => unreachable!(),
            };
            format!("{name}:{level}@{}", sz(chunk_bytes))
        }
        Method::Dedup {
            segmentation,
            fingerprint,
        } => {
            let fp = fingerprint.name();
            match segmentation {
                Segmentation::Whole => format!("whole:{fp}"),
                Segmentation::Static { chunk_bytes } => format!("static:{}:{fp}", sz(chunk_bytes)),
                Segmentation::FastCdc {
                    min_bytes,
                    avg_bytes,
                    max_bytes,
                } => {
                    format!(
                        "fastcdc:{}-{}-{}:{fp}",
                        sz(avg_bytes),
                        sz(min_bytes),
                        sz(max_bytes)
                    )
                }
                Segmentation::Rabin {
                    window_bytes,
                    min_bytes,
                    avg_bytes,
                    max_bytes,
                } => format!(
                    "rabin:{}-{}-{}-w{window_bytes}:{fp}",
                    sz(avg_bytes),
                    sz(min_bytes),
                    sz(max_bytes)
                ),
            }
        }
    }
}

/// `16K`, `1M` where exact, bytes otherwise (parse_size reads it back).
fn sz(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        b.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_back() {
        let c = Config::default();
        for conf in c.configurations().unwrap() {
            let again = match conf.method {
                Method::Compression { .. } => parse_compression(&conf.label).unwrap()[0],
                Method::Dedup { .. } => parse_dedup(&conf.label).unwrap(),
            };
            assert_eq!(again, conf.method, "{}", conf.label);
        }
    }

    #[test]
    fn bad_specs_are_one_line_errors() {
        for s in [
            "zstd:30@128K",
            "lz4:5@1K",
            "zlib@0",
            "gzip@4K",
            "lzo@16K",
            "zlib:x@4K",
            "zstd:3",
        ] {
            assert!(parse_compression(s).is_err(), "{s}");
        }
        for s in [
            "static",
            "static:0",
            "fastcdc:1000",
            "fastcdc:16K-32K-64K",
            "rabin:16K-w2",
            "foo:1K",
            "whole:md5",
        ] {
            assert!(parse_dedup(s).is_err(), "{s}");
        }
        assert_eq!(
            parse_dedup("rabin:16K:sha256").unwrap(),
            Method::Dedup {
                segmentation: Segmentation::Rabin {
                    window_bytes: 48,
                    min_bytes: 8192,
                    avg_bytes: 16384,
                    max_bytes: 32768
                },
                fingerprint: Fingerprint::Sha256
            }
        );
    }
}
