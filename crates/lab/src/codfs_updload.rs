//! The random-update load of `ecstack bench cluster` (issue 41): like fio's `randwrite`, one file
//! (1 GiB by default) takes `block_bytes` (4 KiB) updates at aligned offsets drawn uniformly over the
//! whole file, so over all its segments, from one client process at each queue depth: `depth` tasks
//! share one [`FileHandle`] (updates go straight to each segment's primary) and each waits for its
//! update's ack before it sends the next. Per depth: IOPS, mean, p50 and p99 latency (submission to
//! ack, as fio's `lat`). The file is made with the scheme under test (`PutOptions::scheme`).
//!
//! Correctness: every update's bytes are a function of (seed, block, version), the model keeps each
//! block's last acknowledged version, and no two updates of one block are in flight at once (so the
//! last ack is the last write). At the end the file is read back and compared with the model: all
//! of it when it is small, else whole segments drawn at random plus a sample of updated blocks.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ecstack_base::{LatencyHistogram, Rng};
use ecstack_client::{Bytes, Client, FileHandle, PutOptions, UpdateScheme};
use serde::Serialize;

use crate::{LabError, Result};

/// A file at most this big is read back whole after the load; a bigger one is sampled.
const VERIFY_WHOLE_BYTES_MAX: u64 = 64 << 20;
/// Segments read back whole from a big file, and updated blocks read one by one besides.
const VERIFY_SEGMENTS: u64 = 4;
const VERIFY_BLOCKS_MAX: usize = 256;
/// Draws of a block before a task gives up finding one that no other task is updating (only a
/// file of few blocks at a deep queue gets near it).
const PICK_TRIES_MAX: usize = 1000;

/// What the load runs.
#[derive(Debug, Clone)]
pub struct UpdateLoadConfig {
    pub file_bytes: u64,
    pub block_bytes: u64,
    /// Queue depths, each run in turn on the same file.
    pub depths: Vec<usize>,
    /// How long each depth runs ...
    pub seconds: f64,
    /// ... or, if set, how many updates each depth sends.
    pub count: Option<u64>,
    pub schemes: Vec<UpdateScheme>,
    pub seed: u64,
}

impl UpdateLoadConfig {
    pub fn validate(&self, segment_bytes: u64) -> Result<()> {
        let cfg = |field, msg: String| Err(LabError::Config { field, msg });
        if self.block_bytes == 0 || self.block_bytes % 4096 != 0 {
            return cfg(
                "update-size",
                format!(
                    "{}: a positive multiple of 4096 for the random load",
                    self.block_bytes
                ),
            );
        }
        if self.file_bytes < self.block_bytes || self.file_bytes % self.block_bytes != 0 {
            return cfg(
                "update-file-size",
                format!(
                    "{}: a positive multiple of the update size ({})",
                    self.file_bytes, self.block_bytes
                ),
            );
        }
        if segment_bytes % self.block_bytes != 0 {
            return cfg(
                "segment-size",
                format!("{segment_bytes}: a multiple of the update size ({}), so no update spans two segments", self.block_bytes),
            );
        }
        if self.depths.is_empty() || self.depths.iter().any(|&d| d == 0 || d > 1024) {
            return cfg("depths", format!("{:?}: each in 1..=1024", self.depths));
        }
        if self.count == Some(0)
            || (self.count.is_none() && !(self.seconds > 0.0 && self.seconds <= 86_400.0))
        {
            return cfg(
                "update-seconds",
                "positive (at most a day), or --update-count ≥ 1".into(),
            );
        }
        if self.schemes.is_empty() {
            return cfg("update-scheme", "at least one scheme".into());
        }
        Ok(())
    }
}

/// One queue depth's figures.
#[derive(Debug, Clone, Serialize)]
pub struct DepthFigures {
    pub depth: usize,
    pub updates: u64,
    pub secs: f64,
    pub iops: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// One scheme's run: its depths and what the read-back checked.
#[derive(Debug, Clone, Serialize)]
pub struct SchemeFigures {
    #[serde(serialize_with = "crate::serialize_display")]
    pub scheme: UpdateScheme,
    pub depths: Vec<DepthFigures>,
    /// Blocks compared with the model after the load, and how many of them had been updated.
    pub verified_blocks: u64,
    pub verified_updated: u64,
    /// Distinct segments the updates touched, of the file's.
    pub segments_touched: u64,
    pub segments: u64,
}

/// The offset of a block drawn uniformly over the file: aligned to `block_bytes`, inside the file.
pub fn random_block_offset(rng: &mut Rng, file_bytes: u64, block_bytes: u64) -> u64 {
    rng.below(file_bytes / block_bytes) * block_bytes
}

/// The bytes of `block` at `version` (0: as put).
fn block_content(seed: u64, block: u64, version: u64, out: &mut [u8]) {
    let key = seed
        ^ block.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ version.wrapping_mul(0xc2b2_ae3d_27d4_eb4f).rotate_left(29);
    Rng::new(key).fill(out);
}

/// Each block's last acknowledged version, and the blocks with an update in flight.
#[derive(Default)]
struct Model {
    versions: HashMap<u64, u64>,
    in_flight: HashSet<u64>,
    next_version: u64,
}

impl Model {
    /// A block no other task is updating, and the version its update writes.
    fn take(&mut self, rng: &mut Rng, file_bytes: u64, block_bytes: u64) -> Result<(u64, u64)> {
        let blocks = file_bytes / block_bytes;
        for _ in 0..PICK_TRIES_MAX {
            let b = random_block_offset(rng, file_bytes, block_bytes) / block_bytes;
            if self.in_flight.insert(b) {
                self.next_version += 1;
                return Ok((b, self.next_version));
            }
        }
        Err(LabError::Run(format!(
            "no block free of updates in flight after {PICK_TRIES_MAX} draws ({blocks} blocks): a bigger --update-file-size or a smaller depth"
        )))
    }

    fn acked(&mut self, block: u64, version: u64) {
        debug_assert!(self.in_flight.contains(&block));
        self.in_flight.remove(&block);
        self.versions.insert(block, version);
    }
}

/// Runs the load for one scheme on `client`'s cluster: puts the file, runs each depth, verifies,
/// removes the file.
pub async fn run_scheme(
    cfg: &UpdateLoadConfig,
    client: &Client,
    segment_bytes: u64,
    scheme: UpdateScheme,
    log: &dyn Fn(&str),
) -> Result<SchemeFigures> {
    let path = format!("/bench/random-updates-{}", scheme.name());
    log(&format!(
        "ecstack: random {} B updates, scheme {scheme}: putting a {} MiB file",
        cfg.block_bytes,
        cfg.file_bytes >> 20
    ));
    let mut data = vec![0u8; cfg.file_bytes as usize];
    for (b, chunk) in data.chunks_mut(cfg.block_bytes as usize).enumerate() {
        block_content(cfg.seed, b as u64, 0, chunk);
    }
    client
        .put_bytes_with(
            &path,
            Bytes::from(data),
            PutOptions {
                scheme: Some(scheme),
                ..PutOptions::default()
            },
        )
        .await
        .map_err(run_error)?;
    let handle = client.open(&path).await.map_err(run_error)?;
    let model = Arc::new(Mutex::new(Model::default()));
    let mut depths = Vec::new();
    for (i, &depth) in cfg.depths.iter().enumerate() {
        log(&format!(
            "ecstack: scheme {scheme}, depth {depth}: {}",
            match cfg.count {
                Some(n) => format!("{n} updates"),
                None => format!("{} s", cfg.seconds),
            }
        ));
        let seed = cfg.seed ^ (i as u64 + 1).wrapping_mul(0x5851_f42d_4c95_7f2d);
        depths.push(run_depth(cfg, &handle, &model, depth, seed).await?);
    }
    let model = std::mem::take(&mut *model.lock().unwrap_or_else(|p| p.into_inner()));
    let segments = cfg.file_bytes.div_ceil(segment_bytes);
    let touched: HashSet<u64> = model
        .versions
        .keys()
        .map(|b| b * cfg.block_bytes / segment_bytes)
        .collect();
    let (verified_blocks, verified_updated) =
        verify(cfg, client, &path, segment_bytes, &model).await?;
    client.remove(&path).await.map_err(run_error)?;
    Ok(SchemeFigures {
        scheme,
        depths,
        verified_blocks,
        verified_updated,
        segments_touched: touched.len() as u64,
        segments,
    })
}

fn run_error(e: ecstack_client::ClientError) -> LabError {
    LabError::Run(e.to_string())
}

async fn run_depth(
    cfg: &UpdateLoadConfig,
    handle: &FileHandle,
    model: &Arc<Mutex<Model>>,
    depth: usize,
    seed: u64,
) -> Result<DepthFigures> {
    let tickets = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(cfg.seconds.max(0.0));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..depth {
        let (cfg, handle, model, tickets) =
            (cfg.clone(), handle.clone(), model.clone(), tickets.clone());
        let mut rng = Rng::new(seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        tasks.spawn(async move {
            let mut hist = LatencyHistogram::new();
            let mut buf = vec![0u8; cfg.block_bytes as usize];
            loop {
                let more = match cfg.count {
                    Some(n) => tickets.fetch_add(1, Ordering::Relaxed) < n,
                    None => Instant::now() < deadline,
                };
                if !more {
                    break;
                }
                let (block, version) = model.lock().unwrap_or_else(|p| p.into_inner()).take(
                    &mut rng,
                    cfg.file_bytes,
                    cfg.block_bytes,
                )?;
                block_content(cfg.seed, block, version, &mut buf);
                let t = Instant::now();
                handle
                    .update(block * cfg.block_bytes, &buf)
                    .await
                    .map_err(run_error)?;
                hist.record_duration(t.elapsed());
                model
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .acked(block, version);
            }
            Ok::<_, LabError>(hist)
        });
    }
    let mut hist = LatencyHistogram::new();
    let mut first_error = None;
    while let Some(r) = tasks.join_next().await {
        match r
            .map_err(|e| LabError::Run(format!("an update task failed: {e}")))
            .and_then(|x| x)
        {
            Ok(h) => hist.merge(&h),
            Err(e) => {
                first_error.get_or_insert(e);
                tasks.abort_all();
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let secs = start.elapsed().as_secs_f64();
    let ms = |ns: u64| ns as f64 / 1e6;
    Ok(DepthFigures {
        depth,
        updates: hist.count(),
        secs,
        iops: hist.count() as f64 / secs.max(1e-9),
        mean_ms: hist.mean() / 1e6,
        p50_ms: ms(hist.quantile(0.5)),
        p99_ms: ms(hist.quantile(0.99)),
        max_ms: ms(hist.max()),
    })
}

/// Reads the file back (whole, or sampled when big) and compares it with the model; returns the
/// blocks compared and how many of them had been updated.
async fn verify(
    cfg: &UpdateLoadConfig,
    client: &Client,
    path: &str,
    segment_bytes: u64,
    model: &Model,
) -> Result<(u64, u64)> {
    let mut rng = Rng::new(cfg.seed ^ 0x7665_7269_6679);
    let ranges: Vec<(u64, u64)> = if cfg.file_bytes <= VERIFY_WHOLE_BYTES_MAX {
        vec![(0, cfg.file_bytes)]
    } else {
        let segments = cfg.file_bytes.div_ceil(segment_bytes);
        let mut picked: Vec<u64> = (0..segments).collect();
        rng.shuffle(&mut picked);
        let mut r: Vec<(u64, u64)> = picked
            .iter()
            .take(VERIFY_SEGMENTS as usize)
            .map(|s| {
                let at = s * segment_bytes;
                (at, segment_bytes.min(cfg.file_bytes - at))
            })
            .collect();
        let mut updated: Vec<u64> = model.versions.keys().copied().collect();
        updated.sort_unstable();
        rng.shuffle(&mut updated);
        r.extend(
            updated
                .iter()
                .take(VERIFY_BLOCKS_MAX)
                .map(|b| (b * cfg.block_bytes, cfg.block_bytes)),
        );
        r
    };
    let mut want = vec![0u8; cfg.block_bytes as usize];
    let (mut blocks, mut updated) = (0u64, 0u64);
    for (at, len) in ranges {
        let got = client.read(path, at, len).await.map_err(run_error)?;
        if got.len() as u64 != len {
            return Err(LabError::Run(format!(
                "{path}: read {} bytes at {at} after the updates, expected {len}",
                got.len()
            )));
        }
        for (i, chunk) in got.chunks(cfg.block_bytes as usize).enumerate() {
            let block = at / cfg.block_bytes + i as u64;
            let version = model.versions.get(&block).copied().unwrap_or(0);
            block_content(cfg.seed, block, version, &mut want);
            if chunk != &want[..] {
                let byte = chunk
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                return Err(LabError::Run(format!(
                    "{path}: block {block} (offset {}) differs from its update {version} at byte {byte}: wrong bytes after the random updates",
                    block * cfg.block_bytes
                )));
            }
            blocks += 1;
            updated += (version > 0) as u64;
        }
    }
    Ok((blocks, updated))
}

/// The Ceph side's figures at one depth, beside ours.
#[derive(Debug, Clone, Serialize)]
pub struct CephDepth {
    pub depth: usize,
    /// librbd's cache on (its default, as the recipe and the figures ran) or off (every
    /// write on the OSDs before it completes, as our acks are).
    pub rbd_cache: bool,
    #[serde(flatten)]
    pub fio: crate::ceph_peer::FioFigures,
}

/// The random-update section of the report.
#[derive(Debug, Clone, Serialize)]
pub struct UpdateLoadReport {
    pub file_bytes: u64,
    pub block_bytes: u64,
    pub seconds: f64,
    pub count: Option<u64>,
    pub schemes: Vec<SchemeFigures>,
    /// Ceph's EC pool with overwrites (`--ceph`), per depth.
    pub ceph: Option<Vec<CephDepth>>,
    /// ours / Ceph's IOPS per scheme and depth, with the target each is held to.
    pub ratios: Vec<Ratio>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub scheme: String,
    pub depth: usize,
    /// Against Ceph as the recipe runs it (librbd's cache on).
    pub iops_ratio: f64,
    /// Against Ceph with librbd's cache off, when that ran.
    pub iops_ratio_cache_off: Option<f64>,
    /// The target (PLR ≥ 1.3, FO ≥ 1.0) against `iops_ratio`, if the scheme has one.
    pub target: Option<f64>,
    pub met: Option<bool>,
    pub ours_p99_ms: f64,
    pub ceph_p99_ms: f64,
}

/// Issue 41's targets against Ceph's IOPS.
pub fn target_of(scheme: UpdateScheme) -> Option<f64> {
    match scheme {
        UpdateScheme::Plr => Some(1.3),
        UpdateScheme::Fo => Some(1.0),
        _ => None,
    }
}

impl UpdateLoadReport {
    pub fn new(
        cfg: &UpdateLoadConfig,
        schemes: Vec<SchemeFigures>,
        ceph: Option<Vec<CephDepth>>,
    ) -> UpdateLoadReport {
        let mut ratios = Vec::new();
        if let Some(c) = &ceph {
            for s in &schemes {
                for d in &s.depths {
                    let at = |cache: bool| {
                        c.iter()
                            .find(|c| c.depth == d.depth && c.rbd_cache == cache)
                            .map(|c| (d.iops / c.fio.iops.max(1e-9), c))
                    };
                    if let Some((r, cd)) = at(true) {
                        let target = target_of(s.scheme);
                        ratios.push(Ratio {
                            scheme: s.scheme.name().to_owned(),
                            depth: d.depth,
                            iops_ratio: r,
                            iops_ratio_cache_off: at(false).map(|(r, _)| r),
                            target,
                            met: target.map(|t| r >= t),
                            ours_p99_ms: d.p99_ms,
                            ceph_p99_ms: cd.fio.p99_ms,
                        });
                    }
                }
            }
        }
        UpdateLoadReport {
            file_bytes: cfg.file_bytes,
            block_bytes: cfg.block_bytes,
            seconds: cfg.seconds,
            count: cfg.count,
            schemes,
            ceph,
            ratios,
        }
    }

    pub fn markdown(&self) -> String {
        let mut s = format!(
            "Random {} B updates (fio randwrite-like) over one {} MiB file, {} per depth; latency = submission to ack\n\n",
            self.block_bytes,
            self.file_bytes >> 20,
            match self.count {
                Some(n) => format!("{n} updates"),
                None => format!("{} s", self.seconds),
            }
        );
        s += "| system | depth | IOPS | mean ms | p50 ms | p99 ms | ours / Ceph IOPS | target | ours / Ceph, rbd cache off |\n|---|---:|---:|---:|---:|---:|---:|---|---:|\n";
        for sc in &self.schemes {
            for d in &sc.depths {
                let r = self
                    .ratios
                    .iter()
                    .find(|r| r.scheme == sc.scheme.name() && r.depth == d.depth);
                let off = match r.and_then(|r| r.iops_ratio_cache_off) {
                    Some(x) => format!("{x:.2}x"),
                    None => "-".into(),
                };
                let (ratio, target) = match r {
                    Some(r) => (
                        format!("{:.2}x", r.iops_ratio),
                        match (r.target, r.met) {
                            (Some(t), Some(true)) => format!("≥ {t:.1}x: met"),
                            (Some(t), _) => format!("≥ {t:.1}x: **missed**"),
                            _ => "-".into(),
                        },
                    ),
                    None => ("-".into(), "-".into()),
                };
                s += &format!(
                    "| ecstack {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {ratio} | {target} | {off} |\n",
                    sc.scheme, d.depth, d.iops, d.mean_ms, d.p50_ms, d.p99_ms
                );
            }
        }
        match &self.ceph {
            Some(c) => {
                for d in c {
                    s += &format!(
                        "| Ceph EC pool, fio rbd ({}), rbd cache {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | | | |\n",
                        d.fio.latency,
                        if d.rbd_cache { "on (default)" } else { "off" },
                        d.depth,
                        d.fio.iops,
                        d.fio.mean_ms,
                        d.fio.p50_ms,
                        d.fio.p99_ms
                    );
                }
            }
            None => s += "\n(Ceph not run: pass --ceph)\n",
        }
        s += "\n";
        for sc in &self.schemes {
            s += &format!(
                "{}: updates touched {} of {} segments; read back {} blocks ({} updated): all as the model\n",
                sc.scheme, sc.segments_touched, sc.segments, sc.verified_blocks, sc.verified_updated
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_aligned_inside_and_uniform_over_segments() {
        let (file, block, segment) = (64u64 << 20, 4096u64, 4u64 << 20);
        let mut rng = Rng::new(7);
        let draws = 160_000;
        let mut per_segment = vec![0u64; (file / segment) as usize];
        let mut first_block = false;
        let mut last_block = false;
        for _ in 0..draws {
            let off = random_block_offset(&mut rng, file, block);
            assert_eq!(off % block, 0);
            assert!(off + block <= file);
            first_block |= off == 0;
            last_block |= off == file - block;
            per_segment[(off / segment) as usize] += 1;
        }
        assert!(first_block && last_block, "both ends of the file are drawn");
        // 16 segments, 10,000 expected each: a uniform draw stays within ±5 % (≈ 5 σ).
        let expected = draws / per_segment.len() as u64;
        for (s, &n) in per_segment.iter().enumerate() {
            assert!(
                n.abs_diff(expected) < expected / 20,
                "segment {s}: {n} draws, expected about {expected}"
            );
        }
        // A file of one block: always offset 0.
        assert_eq!(random_block_offset(&mut rng, 4096, 4096), 0);
    }

    #[test]
    fn the_model_never_hands_out_a_block_in_flight() {
        let mut m = Model::default();
        let mut rng = Rng::new(3);
        let a = m.take(&mut rng, 8192, 4096).unwrap();
        let b = m.take(&mut rng, 8192, 4096).unwrap();
        assert_ne!(a.0, b.0);
        assert!(b.1 > a.1);
        assert!(
            m.take(&mut rng, 8192, 4096).is_err(),
            "both blocks in flight"
        );
        m.acked(a.0, a.1);
        let c = m.take(&mut rng, 8192, 4096).unwrap();
        assert_eq!(c.0, a.0);
        m.acked(b.0, b.1);
        m.acked(c.0, c.1);
        assert_eq!(m.versions[&a.0], c.1, "the last ack wins");
    }

    #[test]
    fn block_contents_differ_by_block_and_version() {
        let mut x = [0u8; 64];
        let mut y = [0u8; 64];
        block_content(1, 5, 0, &mut x);
        block_content(1, 5, 1, &mut y);
        assert_ne!(x, y);
        block_content(1, 6, 0, &mut y);
        assert_ne!(x, y);
        block_content(1, 5, 0, &mut y);
        assert_eq!(x, y);
    }

    #[test]
    fn bad_configs_name_their_flag() {
        let ok = UpdateLoadConfig {
            file_bytes: 1 << 20,
            block_bytes: 4096,
            depths: vec![1, 16],
            seconds: 1.0,
            count: None,
            schemes: vec![UpdateScheme::Fo],
            seed: 1,
        };
        assert!(ok.validate(1 << 20).is_ok());
        let e = |c: UpdateLoadConfig, seg| c.validate(seg).unwrap_err().to_string();
        assert!(e(ok.clone(), 6 << 10).starts_with("segment-size:"));
        assert!(e(
            UpdateLoadConfig {
                depths: vec![0],
                ..ok.clone()
            },
            1 << 20
        )
        .starts_with("depths:"));
        assert!(e(
            UpdateLoadConfig {
                file_bytes: 5000,
                ..ok.clone()
            },
            1 << 20
        )
        .starts_with("update-file-size:"));
        assert!(e(
            UpdateLoadConfig {
                seconds: f64::NAN,
                ..ok.clone()
            },
            1 << 20
        )
        .starts_with("update-seconds:"));
        assert!(UpdateLoadConfig {
            seconds: 0.0,
            count: Some(5),
            ..ok.clone()
        }
        .validate(1 << 20)
        .is_ok());
        assert!(e(
            UpdateLoadConfig {
                schemes: vec![],
                ..ok
            },
            1 << 20
        )
        .starts_with("update-scheme:"));
    }
}
