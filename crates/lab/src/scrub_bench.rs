//! `ecstack array scrub-bench`: scrub's read bandwidth against the devices' own sequential read
//! bandwidth, side by side in one run (issue 45's targets: the default scrub at ≥ 0.80 of it,
//! `--checksums-only` at ≥ 0.95).
//!
//! The bench creates an array on O_DIRECT files in a directory, fills it whole with seeded bytes
//! and syncs it. Each round then (the order rotating between rounds) scrubs the array in the
//! default mode (`Array::scrub`: checksums verified, every stripe's parity recomputed), scrubs it
//! with `checksums_only` (parity skipped where every chunk matched its checksum), and reads the
//! same bytes of every main device file as one `dd iflag=direct` per device, all devices at once:
//! the devices' sequential bandwidth as the operating system delivers it, measured by a tool that
//! is not ours. The ratios are each mode's MB/s over dd's, per round; the report gives the
//! medians.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use ecstack_array::{Array, ArrayConfig, ArrayDevices, BlockDevice, SchemeKind, ScrubOptions};
use ecstack_base::rng::Rng;
use ecstack_device::open_spec;
use serde::Serialize;

use crate::{LabError, Result};

/// What `ecstack array scrub-bench` measures.
#[derive(Clone, Debug)]
pub struct ScrubBenchConfig {
    /// Directory for the device files (created if missing; the files are removed afterwards).
    pub dir: PathBuf,
    pub scheme: SchemeKind,
    pub k: usize,
    pub m: usize,
    pub chunk_bytes: u32,
    /// Size of each main device file.
    pub device_bytes: u64,
    /// Scrub's data stripes per step (`ScrubOptions::batch_stripes`).
    pub batch_stripes: usize,
    /// Rounds of (scrub, scrub --checksums-only, sequential read), the order rotating.
    pub rounds: usize,
    /// Per-chunk checksums on (verified by scrub) or off (parity check only).
    pub checksums: bool,
}

impl Default for ScrubBenchConfig {
    fn default() -> Self {
        ScrubBenchConfig {
            dir: PathBuf::from("scrub-bench"),
            scheme: SchemeKind::Md,
            k: 6,
            m: 2,
            chunk_bytes: 4096,
            device_bytes: 256 << 20,
            batch_stripes: ScrubOptions::default().batch_stripes,
            rounds: 3,
            checksums: true,
        }
    }
}

/// One round.
#[derive(Clone, Debug, Serialize)]
pub struct ScrubBenchRound {
    pub round: usize,
    /// The order the three runs took this round, e.g. `["scrub", "checksums-only", "dd"]`.
    pub order: Vec<&'static str>,
    /// The default scrub's read throughput over the main devices (`ScrubReport::mb_per_s`,
    /// 10^6 B/s).
    pub scrub_mb_per_s: f64,
    /// `--checksums-only`'s.
    pub checksums_only_mb_per_s: f64,
    /// The same bytes read by one `dd iflag=direct bs=1M` per main device, all at once.
    pub sequential_mb_per_s: f64,
    /// scrub / sequential.
    pub ratio: f64,
    /// checksums-only / sequential.
    pub checksums_only_ratio: f64,
    pub scrub_seconds: f64,
    pub checksums_only_seconds: f64,
    pub stripes: u64,
    /// Stripes `--checksums-only` took as consistent by their checksums (parity not recomputed).
    pub parity_skipped_stripes: u64,
    /// Over both scrubs.
    pub checksum_errors: u64,
    pub inconsistent_stripes: u64,
}

/// What the bench found.
#[derive(Clone, Debug, Serialize)]
pub struct ScrubBenchReport {
    pub scheme: String,
    pub k: usize,
    pub m: usize,
    pub chunk_bytes: u32,
    pub device_bytes: u64,
    pub batch_stripes: usize,
    pub checksums: bool,
    /// Bytes of each main device scrub and dd read per round.
    pub bytes_per_device: u64,
    pub fill_mb_per_s: f64,
    pub rounds: Vec<ScrubBenchRound>,
    /// Medians of the rounds' ratios: the default scrub, `--checksums-only`.
    pub ratio_median: f64,
    pub checksums_only_ratio_median: f64,
}

fn io_at(p: &Path) -> impl Fn(std::io::Error) -> LabError + '_ {
    move |source| LabError::Io {
        path: p.to_path_buf(),
        source,
    }
}

fn config_err(field: &'static str, msg: impl Into<String>) -> LabError {
    LabError::Config {
        field,
        msg: msg.into(),
    }
}

/// Run the bench (`progress` gets one line per phase).
pub fn scrub_bench(cfg: &ScrubBenchConfig, progress: &dyn Fn(&str)) -> Result<ScrubBenchReport> {
    if cfg.rounds == 0 {
        return Err(config_err("rounds", "at least 1"));
    }
    if cfg.k == 0 || cfg.m == 0 {
        return Err(config_err("k", "k and m must be at least 1"));
    }
    std::fs::create_dir_all(&cfg.dir).map_err(io_at(&cfg.dir))?;
    let n = cfg.k + cfg.m;
    let nlog = if cfg.scheme == SchemeKind::Md {
        0
    } else {
        cfg.m
    };
    let main_paths: Vec<PathBuf> = (0..n)
        .map(|i| cfg.dir.join(format!("main{i}.img")))
        .collect();
    let log_paths: Vec<PathBuf> = (0..nlog)
        .map(|i| cfg.dir.join(format!("log{i}.img")))
        .collect();
    let meta_path = cfg.dir.join("meta.img");
    let result = run(cfg, &main_paths, &log_paths, &meta_path, progress);
    for p in main_paths
        .iter()
        .chain(&log_paths)
        .chain(std::iter::once(&meta_path))
    {
        let _ = std::fs::remove_file(p);
    }
    result
}

fn file(p: &Path, bytes: u64, prealloc: bool) -> Result<Arc<dyn BlockDevice>> {
    Ok(open_spec(&format!(
        "file:{}?size={bytes}&direct=1&prealloc={}",
        p.display(),
        prealloc as u8
    ))?)
}

fn run(
    cfg: &ScrubBenchConfig,
    main_paths: &[PathBuf],
    log_paths: &[PathBuf],
    meta_path: &Path,
    progress: &dyn Fn(&str),
) -> Result<ScrubBenchReport> {
    let devices = ArrayDevices {
        main: main_paths
            .iter()
            .map(|p| file(p, cfg.device_bytes, true))
            .collect::<Result<_>>()?,
        log: log_paths
            .iter()
            .map(|p| file(p, cfg.device_bytes / 4, true))
            .collect::<Result<_>>()?,
        meta: file(meta_path, 1 << 30, false)?,
        specs: None,
    };
    let acfg = ArrayConfig {
        chunk_size: cfg.chunk_bytes,
        ..ArrayConfig::with_geometry(cfg.scheme, cfg.k, cfg.m)
    };
    // The benchmark's own scratch files, rewritten by every run.
    let force = ecstack_array::OpenOptions {
        force: true,
        ..ecstack_array::OpenOptions::default()
    };
    let array = Array::create_with(&acfg, devices, &force)?;
    array.set_checksums(cfg.checksums);
    // Fill whole, in writes of 256 full stripes.
    let g = array.geometry().clone();
    let piece = (g.k as u64 * g.chunk * 256) as usize;
    let mut buf = vec![0u8; piece];
    let mut rng = Rng::new(15);
    let t = Instant::now();
    let mut off = 0u64;
    progress(&format!(
        "filling {} MB ({} stripes)",
        array.size() / 1_000_000,
        g.stripes
    ));
    while off < array.size() {
        let len = (piece as u64).min(array.size() - off) as usize;
        rng.fill(&mut buf[..len]);
        array.write(&buf[..len], off)?;
        off += len as u64;
    }
    array.sync()?;
    let fill_mb_per_s = array.size() as f64 / t.elapsed().as_secs_f64() / 1e6;
    let opts = ScrubOptions {
        repair: true,
        batch_stripes: cfg.batch_stripes,
        mb_per_s_max: 0.0,
        checksums_only: false,
    };
    let cheap = ScrubOptions {
        checksums_only: true,
        ..opts.clone()
    };
    const RUNS: [&str; 3] = ["scrub", "checksums-only", "dd"];
    let mut rounds = Vec::new();
    let mut bytes_per_device = 0;
    for round in 0..cfg.rounds {
        // Each run goes first, second and third in turn.
        let order: Vec<&'static str> = (0..RUNS.len())
            .map(|i| RUNS[(i + round) % RUNS.len()])
            .collect();
        let (mut full, mut quick, mut seq) = (None, None, None);
        for &run in &order {
            progress(&format!("round {round}: {run}"));
            if run == "dd" {
                // Before any scrub has run, dd needs the byte count: scrub's data area is every
                // slot of every written stripe (md: all of them), so read the stripes' chunks.
                let bytes = match bytes_per_device {
                    0 => g.stripes * g.chunk,
                    b => b,
                };
                seq = Some(sequential(main_paths, g.off(0), bytes)?);
                continue;
            }
            let r = array.scrub(if run == "scrub" { &opts } else { &cheap }, &|_, _| {})?;
            bytes_per_device = r.bytes_read / g.n as u64;
            match run {
                "scrub" => full = Some(r),
                _ => quick = Some(r),
            }
        }
        let (r, q, seq) = (
            full.expect("scrubbed"),
            quick.expect("scrubbed"),
            seq.expect("read"),
        );
        rounds.push(ScrubBenchRound {
            round,
            order,
            scrub_mb_per_s: r.mb_per_s,
            checksums_only_mb_per_s: q.mb_per_s,
            sequential_mb_per_s: seq,
            ratio: r.mb_per_s / seq,
            checksums_only_ratio: q.mb_per_s / seq,
            scrub_seconds: r.seconds,
            checksums_only_seconds: q.seconds,
            stripes: r.stripes,
            parity_skipped_stripes: q.parity_skipped_stripes,
            checksum_errors: r.checksum_errors + q.checksum_errors,
            inconsistent_stripes: r.inconsistent_stripes + q.inconsistent_stripes,
        });
    }
    array.close()?;
    let median = |f: fn(&ScrubBenchRound) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        match v.len() % 2 {
            1 => v[v.len() / 2],
            _ => (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0,
        }
    };
    Ok(ScrubBenchReport {
        scheme: cfg.scheme.to_string(),
        k: cfg.k,
        m: cfg.m,
        chunk_bytes: cfg.chunk_bytes,
        device_bytes: cfg.device_bytes,
        batch_stripes: cfg.batch_stripes,
        checksums: cfg.checksums,
        bytes_per_device,
        fill_mb_per_s,
        ratio_median: median(|r| r.ratio),
        checksums_only_ratio_median: median(|r| r.checksums_only_ratio),
        rounds,
    })
}

/// Read `bytes` from `start` of every file with one `dd iflag=direct bs=1M` each, all at once;
/// MB/s (10^6) over all of them.
fn sequential(paths: &[PathBuf], start: u64, bytes: u64) -> Result<f64> {
    let t = Instant::now();
    let children = paths
        .iter()
        .map(|p| {
            Command::new("dd")
                .arg(format!("if={}", p.display()))
                .arg("of=/dev/null")
                .arg("bs=1M")
                .arg(format!("skip={start}"))
                .arg(format!("count={bytes}"))
                .arg("iflag=direct,skip_bytes,count_bytes")
                .arg("status=none")
                .spawn()
                .map_err(|e| LabError::Run(format!("dd (coreutils) could not be started: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    for mut c in children {
        let st = c.wait().map_err(|e| LabError::Run(format!("dd: {e}")))?;
        if !st.success() {
            return Err(LabError::Run(format!("dd failed: {st}")));
        }
    }
    Ok((bytes * paths.len() as u64) as f64 / t.elapsed().as_secs_f64() / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny bench runs end to end: scrub finds the filled array clean and reads what dd reads.
    #[test]
    fn tiny_bench_scrubs_clean_and_compares_with_dd() {
        let dir = std::env::temp_dir().join(format!("ecstack-scrub-bench-{}", std::process::id()));
        let cfg = ScrubBenchConfig {
            dir: dir.clone(),
            k: 2,
            m: 1,
            device_bytes: 8 << 20,
            rounds: 2,
            ..ScrubBenchConfig::default()
        };
        let r = scrub_bench(&cfg, &|_| {}).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(r.rounds.len(), 2);
        for round in &r.rounds {
            assert!(round.stripes > 0, "{round:?}");
            assert_eq!(round.checksum_errors + round.inconsistent_stripes, 0);
            assert!(round.scrub_mb_per_s > 0.0 && round.sequential_mb_per_s > 0.0);
            assert!(round.checksums_only_mb_per_s > 0.0, "{round:?}");
            // Every chunk has its checksum from the fill: checksums-only skips every parity.
            assert_eq!(round.parity_skipped_stripes, round.stripes, "{round:?}");
        }
        // Each run goes first once in three rounds; here, two.
        assert_eq!(r.rounds[0].order, ["scrub", "checksums-only", "dd"]);
        assert_eq!(r.rounds[1].order, ["checksums-only", "dd", "scrub"]);
        assert_eq!(r.bytes_per_device % 4096, 0);
        assert!(r.bytes_per_device > 0);
    }
}
