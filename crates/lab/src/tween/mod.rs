//! `ecstack experiment tween`: the first evaluation of TWEEN (issue 15; `docs/tween.md`).
//!
//! Parts ([`Part`]):
//! * `traces`: EPLOG's synthesized traces (FIN, WEB, USR, MDS presets, prepared as in the EPLOG
//!   experiment), each replayed after a sequential pre-write of its working set on a (k+m) array of
//!   simulated SSDs (the device layer's FTL model) under md, eplog and tween, one client.
//! * `sync`: a small-synchronous-write workload (4 KiB writes, 80% to a hot 20%, an fsync after each).
//! * `sensitivity`: tween alone over hotness groups N, α, β and NVRAM size (chunk = 1, 2, 4 flash
//!   blocks), and the flash alignment TWEEN assumes.
//! * `gc`: TWEEN's GC modes, active (threshold, inside writes) against periodic (idle, between
//!   bursts of requests) and background (a worker thread beside the requests).
//! * `cleaner`: issue 45's changes to TWEEN's cleaner, each alone on the seed's design (greedy,
//!   active, N fixed groups, cleaning output re-classified with host writes) and all together (the
//!   defaults), with md, at equal raw flash, on every trace and SYNC4K.
//! * `files`: md vs eplog vs tween on O_DIRECT device files (TWEEN's NVRAM a mapped file), the traces
//!   and the sync workload, for real request latencies.
//!
//! The simulated SSDs are **aged**: every logical page is written once before the array is made, so
//! the only free flash is the over-provisioning, and each scheme's SSDs are sized to its footprint
//! (md: its stripes; eplog: plus its spare area; tween: its segments, with TWEEN's own spare). GC of
//! such a device must relocate valid pages whenever a victim block still holds some, which is what
//! separates the schemes' write amplification. Measured over the replay: bytes written to the main
//! SSDs, SSD GC victims and relocated pages per SSD, flash write amplification (flash page writes /
//! host page writes on the main SSDs), flash writes per byte the host wrote (end to end: parity,
//! read-modify-write, TWEEN's GC and the SSD's GC together), modeled SSD busy time, requests/s and
//! latency percentiles. TWEEN's NVRAM is in memory on simulated SSDs (its latency not modelled:
//! TWEEN's latencies there are a lower bound).

mod rig;
mod workload;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ecstack_array::{GcMode, SchemeKind, TweenConfig, VictimPolicy};
use ecstack_device::SimSsd;
use serde::Serialize;

pub use rig::{Backing, FlashBasis, SsdSetup, TweenParams};
pub use workload::Work;

use crate::eplog::{Setting, TraceName};
use crate::{LabError, Result};

/// A part of the evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    Traces,
    Sync,
    Sensitivity,
    Gc,
    Cleaner,
    Files,
}

impl Part {
    pub const ALL: [Part; 6] = [
        Part::Traces,
        Part::Sync,
        Part::Sensitivity,
        Part::Gc,
        Part::Cleaner,
        Part::Files,
    ];

    pub fn parse(s: &str) -> Result<Part> {
        match s.trim().to_ascii_lowercase().as_str() {
            "traces" => Ok(Part::Traces),
            "sync" => Ok(Part::Sync),
            "sensitivity" => Ok(Part::Sensitivity),
            "gc" => Ok(Part::Gc),
            "cleaner" => Ok(Part::Cleaner),
            "files" => Ok(Part::Files),
            o => Err(LabError::Config {
                field: "parts",
                msg: format!("unknown part '{o}' (traces, sync, sensitivity, gc, cleaner, files)"),
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Part::Traces => "traces",
            Part::Sync => "sync",
            Part::Sensitivity => "sensitivity",
            Part::Gc => "gc",
            Part::Cleaner => "cleaner",
            Part::Files => "files",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct TweenExpConfig {
    pub parts: Vec<Part>,
    pub traces: Vec<TraceName>,
    /// Trace scale relative to the published traces; the sync workload's working set is this
    /// fraction of 4 GiB.
    pub scale: f64,
    /// Scale of the `files` part (device files are real bytes on this machine's disk).
    pub files_scale: f64,
    pub setting: Setting,
    pub ssd: SsdSetup,
    /// Over-provisioning of tween's footprint-sized SSDs when it differs from md's and eplog's
    /// (`ssd.op`). (At equal raw flash tween's SSDs always get the least the model accepts.)
    pub tween_ssd_op: Option<f64>,
    /// `traces` and `sync`: beside tween at equal raw flash with md, also tween on SSDs sized to
    /// its footprint (labelled).
    pub footprint_too: bool,
    /// TWEEN's defaults of every run outside the sweeps (groups, α, β, GC mode, seed).
    pub tween: TweenConfig,
    /// TWEEN's chunk in flash blocks.
    pub chunk_blocks: u32,
    /// Periodic GC: idle periods after every this many requests.
    pub idle_every: u64,
    /// Traces of the sensitivity sweep.
    pub sweep_traces: Vec<TraceName>,
    /// Device files of the `files` part, and TWEEN's NVRAM file there.
    pub files_dir: PathBuf,
    pub nvram_dir: PathBuf,
    pub seed: u64,
}

impl TweenExpConfig {
    /// `quick`: CI-sized (seconds); otherwise the documented long run.
    pub fn new(quick: bool) -> TweenExpConfig {
        let shm = PathBuf::from("/dev/shm");
        TweenExpConfig {
            parts: Part::ALL.to_vec(),
            traces: TraceName::ALL.to_vec(),
            scale: if quick { 0.004 } else { 0.05 },
            files_scale: if quick { 0.001 } else { 0.01 },
            setting: Setting::SIX_TWO,
            ssd: SsdSetup {
                // Quick: 64 KiB flash blocks, so the tiny traces still span many segments.
                block_pages: if quick { 16 } else { 64 },
                ..SsdSetup::default()
            },
            tween_ssd_op: None,
            footprint_too: true,
            tween: TweenConfig::default(),
            chunk_blocks: 1,
            idle_every: 256,
            sweep_traces: if quick {
                vec![TraceName::Fin]
            } else {
                vec![TraceName::Fin, TraceName::Web]
            },
            files_dir: std::env::temp_dir().join("ecstack-tween-exp"),
            nvram_dir: if shm.is_dir() {
                shm
            } else {
                std::env::temp_dir()
            },
            seed: 1,
        }
    }

    pub fn validate(&self) -> Result<()> {
        let cfg = |field, msg: String| Err(LabError::Config { field, msg });
        for (field, s) in [("scale", self.scale), ("files-scale", self.files_scale)] {
            if !(s > 0.0 && s <= 1.0) {
                return cfg(field, format!("{s} must lie in (0, 1]"));
            }
        }
        for (field, op) in [
            ("ssd-op", self.ssd.op),
            ("tween-ssd-op", self.tween_ssd_op.unwrap_or(self.ssd.op)),
        ] {
            if !(op > 0.0 && op < 0.5) {
                return cfg(field, format!("{op} must lie in (0, 0.5)"));
            }
        }
        if !(4..=1024).contains(&self.ssd.block_pages) {
            return cfg(
                "ssd-block-pages",
                format!("{} must lie in [4, 1024]", self.ssd.block_pages),
            );
        }
        if self.chunk_blocks == 0 || self.chunk_blocks > 16 {
            return cfg(
                "chunk-blocks",
                format!("{} must lie in [1, 16]", self.chunk_blocks),
            );
        }
        Ok(())
    }

    fn params(&self, tween: TweenConfig, chunk_blocks: u32) -> TweenParams {
        TweenParams {
            tween,
            chunk_blocks,
            idle_every: self.idle_every,
        }
    }

    fn sim(&self) -> Backing {
        Backing::Sim(self.ssd)
    }

    /// The sync workload at `scale`.
    fn sync_work(&self, scale: f64) -> Work {
        Work::sync_writes(((4u64 << 30) as f64 * scale) as u64, self.seed)
    }
}

/// One (part, workload, scheme, variant) run.
#[derive(Debug, Clone, Serialize)]
pub struct TweenRow {
    pub part: Part,
    pub testbed: String,
    pub workload: String,
    pub scheme: String,
    /// tween: its parameters (N, α, β, NVRAM, GC mode); md/eplog: "-".
    pub variant: String,
    /// tween: how its SSDs were sized (equal raw flash with md's, or its footprint); md/eplog:
    /// None (always their footprint).
    pub flash_basis: Option<FlashBasis>,
    pub requests: u64,
    pub host_write_bytes: u64,
    /// Simulated SSDs only: raw flash of one main SSD (blocks × block bytes, over-provisioning
    /// included): what the scheme's footprint costs.
    pub ssd_raw_bytes: Option<u64>,
    pub ssd_write_bytes: u64,
    pub ssd_read_bytes: u64,
    /// eplog's log devices (simulated HDDs or files), not among the SSDs.
    pub log_write_bytes: u64,
    /// Simulated SSDs only: GC victims (blocks cleaned) per SSD.
    pub gc_per_ssd: Option<f64>,
    /// Simulated SSDs only: valid pages GC relocated, per SSD.
    pub gc_copies_per_ssd: Option<f64>,
    /// Flash page writes / host page writes on the main SSDs.
    pub flash_write_amplification: Option<f64>,
    /// Flash bytes written on the main SSDs per byte the host wrote (end to end).
    pub flash_per_host_byte: Option<f64>,
    /// Modeled busy time of the busiest main SSD over the replay, seconds.
    pub ssd_busy_s: Option<f64>,
    /// Requests over the time spent in them (idle periods excluded).
    pub requests_per_s: f64,
    /// Requests over the replay's wall time, idle periods (periodic and background modes)
    /// included: the rate without idle time to hide work in.
    pub wall_requests_per_s: f64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub latency_p999_us: f64,
    pub latency_max_us: f64,
    pub nvram_bytes: Option<u64>,
    /// tween only: segments collected inside writes / off the request path (periodic mode's idle
    /// periods, or the background worker), extents GC moved through NVRAM, full-stripe flushes
    /// (and how many of them the background worker did).
    pub tween_gc_segments: Option<u64>,
    pub tween_idle_gc_segments: Option<u64>,
    pub tween_background_flushes: Option<u64>,
    /// tween only: host writes that waited for the background worker's flush (TWEEN's pacing).
    pub tween_paced_waits: Option<u64>,
    /// tween only: hotness groups taking host writes at the end (of at most), the layer's skew
    /// estimate, and the share of epochs it used more than one group.
    pub tween_host_groups: Option<String>,
    pub tween_skew: Option<f64>,
    pub tween_gc_extents: Option<u64>,
    pub tween_flushes: Option<u64>,
    /// tween only: the hotness groups' cluster centers after the replay (JSON only).
    pub tween_centers: Option<Vec<f64>>,
}

/// tween against md on one workload and testbed: negative percentages are reductions.
#[derive(Debug, Clone, Serialize)]
pub struct VersusMd {
    pub part: Part,
    pub workload: String,
    /// How tween's SSDs were sized (md's are footprint-sized).
    pub flash_basis: FlashBasis,
    pub md_raw_flash_bytes: Option<u64>,
    pub tween_raw_flash_bytes: Option<u64>,
    pub md_gc_per_ssd: f64,
    pub tween_gc_per_ssd: f64,
    pub gc_change_pct: f64,
    pub md_flash_wa: f64,
    pub tween_flash_wa: f64,
    pub wa_change_pct: f64,
    pub md_flash_per_host_byte: f64,
    pub tween_flash_per_host_byte: f64,
    pub flash_change_pct: f64,
    pub ssd_write_change_pct: f64,
    /// tween's requests/s over md's (target ≥ 1), and the same over wall time (idle included).
    pub requests_per_s_ratio: f64,
    pub wall_requests_per_s_ratio: f64,
    /// tween's p99.9 latency over md's (target ≤ 2).
    pub p999_ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TweenReport {
    pub rows: Vec<TweenRow>,
    pub versus_md: Vec<VersusMd>,
    /// Parts that failed (their error); the rows above are those of the parts that ran.
    pub failed: Vec<PartFailure>,
}

/// A part of the experiment that stopped with an error.
#[derive(Debug, Clone, Serialize)]
pub struct PartFailure {
    pub part: Part,
    pub error: String,
}

/// Sums over the main SSDs at one moment.
#[derive(Default)]
struct SsdSnap {
    host: u64,
    flash: u64,
    victims: u64,
    copies: u64,
    busy_ns: Vec<u64>,
}

impl SsdSnap {
    fn of(ssds: &[std::sync::Arc<SimSsd>]) -> SsdSnap {
        let mut s = SsdSnap::default();
        for d in ssds {
            let st = d.ssd_stats();
            s.host += st.host_page_writes;
            s.flash += st.flash_page_writes;
            s.victims += st.gc_victims;
            s.copies += st.gc_copies;
            s.busy_ns.push(st.modeled_ns);
        }
        s
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Wait (up to `IDLE_MAX`) until tween's background worker has nothing left to do.
const IDLE_MAX: Duration = Duration::from_secs(2);

/// Replay `w` on `rig`, timing each request (its fsync included). Periodic-mode idle GC runs
/// between requests, outside the clock: it stands for the device's idle time; in background mode
/// the same idle periods let the worker catch up (waiting until it is idle). Returns the request
/// time, the latencies, the segments idle GC collected and the wall time (idle periods included).
fn replay(rig: &rig::Rig, w: &Work) -> Result<(f64, Vec<f64>, u64, f64)> {
    let start = Instant::now();
    let buf: Vec<u8> = (0..w.max_len())
        .map(|i| (i as u8).wrapping_mul(7))
        .collect();
    let mut lat = Vec::with_capacity(w.reqs.len());
    let mut busy = Duration::ZERO;
    let mut idle_gc = 0;
    for (i, &(off, len)) in w.reqs.iter().enumerate() {
        let t0 = Instant::now();
        rig.write(&buf[..len as usize], off)?;
        if w.sync {
            rig.sync()?;
        }
        let dt = t0.elapsed();
        busy += dt;
        lat.push(dt.as_secs_f64() * 1e6);
        if rig.idle_every > 0 && (i as u64 + 1).is_multiple_of(rig.idle_every) {
            if let Some(t) = rig.tween() {
                if t.gc_mode() == GcMode::Background {
                    let until = Instant::now() + IDLE_MAX;
                    while !t.background_idle() && Instant::now() < until {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                } else {
                    idle_gc += t.collect_idle(Duration::ZERO)?;
                }
            }
        }
    }
    lat.sort_by(f64::total_cmp);
    Ok((
        busy.as_secs_f64(),
        lat,
        idle_gc,
        start.elapsed().as_secs_f64(),
    ))
}

/// Pre-write, replay and measure one rig.
fn measure(
    part: Part,
    variant: String,
    basis: Option<FlashBasis>,
    w: &Work,
    rig: &rig::Rig,
    align: bool,
    testbed: &str,
) -> Result<TweenRow> {
    rig.prewrite(w.wss, align)?;
    let a = rig.array();
    a.reset_stats();
    let before = SsdSnap::of(&rig.ssds);
    let t0 = rig.tween().map(|t| t.stats());
    let (secs, lat, idle_gc, wall) = replay(rig, w)?;
    rig.finish()?;
    let after = SsdSnap::of(&rig.ssds);
    let st = a.status();
    let sim = !rig.ssds.is_empty();
    let n = rig.ssds.len().max(1) as f64;
    let host_pages = after.host - before.host;
    let flash_pages = after.flash - before.flash;
    let page = ecstack_device::SsdConfig::default().page_size as u64;
    let t1 = rig.tween().map(|t| t.stats());
    let tw = t0.zip(t1);
    let rt = rig.tween().map(|t| t.runtime());
    let bg_gc = rt.map(|r| r.background_gc_segments).unwrap_or(0);
    let on_sim = |x: f64| sim.then_some(x);
    Ok(TweenRow {
        part,
        testbed: testbed.into(),
        workload: w.name.clone(),
        scheme: rig.scheme.name().into(),
        variant,
        flash_basis: basis,
        requests: w.reqs.len() as u64,
        host_write_bytes: w.bytes(),
        ssd_raw_bytes: rig.ssds.first().map(|d| {
            d.with_model(|m| {
                let c = m.config();
                c.blocks as u64 * c.pages_per_block as u64 * c.page_size as u64
            })
        }),
        ssd_write_bytes: st.main.io.write_bytes,
        ssd_read_bytes: st.main.io.read_bytes,
        log_write_bytes: st.log.io.write_bytes,
        gc_per_ssd: on_sim((after.victims - before.victims) as f64 / n),
        gc_copies_per_ssd: on_sim((after.copies - before.copies) as f64 / n),
        flash_write_amplification: on_sim(flash_pages as f64 / host_pages.max(1) as f64),
        flash_per_host_byte: on_sim((flash_pages * page) as f64 / w.bytes().max(1) as f64),
        ssd_busy_s: on_sim(
            after
                .busy_ns
                .iter()
                .zip(&before.busy_ns)
                .map(|(a, b)| a - b)
                .max()
                .unwrap_or(0) as f64
                / 1e9,
        ),
        requests_per_s: w.reqs.len() as f64 / secs.max(1e-9),
        wall_requests_per_s: w.reqs.len() as f64 / wall.max(1e-9),
        latency_p50_us: percentile(&lat, 0.5),
        latency_p99_us: percentile(&lat, 0.99),
        latency_p999_us: percentile(&lat, 0.999),
        latency_max_us: lat.last().copied().unwrap_or(0.0),
        nvram_bytes: rig.nvram_bytes,
        tween_gc_segments: tw.map(|(a, b)| b.gc_segments - a.gc_segments - idle_gc - bg_gc),
        tween_idle_gc_segments: tw.map(|_| idle_gc + bg_gc),
        tween_background_flushes: rt.map(|r| r.background_flushes),
        tween_paced_waits: rt.map(|r| r.paced_waits),
        tween_host_groups: rt.map(|r| {
            format!(
                "{}/{} ({}/{} epochs grouped)",
                r.host_groups, r.host_groups_max, r.grouped_epochs, r.epochs
            )
        }),
        tween_skew: rt.map(|r| r.skew),
        tween_gc_extents: tw.map(|(a, b)| b.gc_extents - a.gc_extents),
        tween_flushes: tw.map(|(a, b)| b.flushes - a.flushes),
        tween_centers: rig.tween().map(|t| t.centers()),
    })
}

fn variant(t: &TweenConfig, nvram: Option<u64>, op: f64, align: bool) -> String {
    let mut v = format!(
        "N={} a={} b={} NVRAM={} op={:.3} gc={} victim={} groups={} gc-stream={}",
        t.groups,
        t.alpha,
        t.beta,
        fmt_bytes(nvram.unwrap_or(0)),
        op,
        t.gc_mode.name(),
        t.victim.name(),
        if t.adaptive_groups {
            "adaptive"
        } else {
            "fixed"
        },
        if t.gc_stream { "yes" } else { "no" },
    );
    if let Some(thr) = t.gc_threshold {
        v.push_str(&format!(" thr={thr}"));
    }
    if !align {
        v.push_str(" unaligned");
    }
    v
}

fn fmt_bytes(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{:.1}MiB", b as f64 / (1 << 20) as f64)
    } else {
        format!("{}KiB", b >> 10)
    }
}

struct Runner<'a> {
    cfg: &'a TweenExpConfig,
    rows: Vec<TweenRow>,
}

impl Runner<'_> {
    fn baselines(&mut self, part: Part, w: &Work, backing: &Backing) -> Result<()> {
        for scheme in [SchemeKind::Md, SchemeKind::Eplog] {
            let rig = rig::baseline(w, scheme, self.cfg.setting, backing)?;
            let row = measure(part, "-".into(), None, w, &rig, true, testbed(backing))?;
            self.rows.push(row);
        }
        Ok(())
    }

    fn tween(
        &mut self,
        part: Part,
        w: &Work,
        backing: &Backing,
        t: TweenConfig,
        chunk_blocks: u32,
        align: bool,
        basis: FlashBasis,
    ) -> Result<()> {
        let backing = match (backing, self.cfg.tween_ssd_op, basis) {
            (Backing::Sim(s), Some(op), FlashBasis::Footprint) => {
                Backing::Sim(SsdSetup { op, ..*s })
            }
            (b, _, _) => b.clone(),
        };
        // Equal raw flash is a property of simulated SSDs; device files are sized to the footprint.
        let basis = match backing {
            Backing::Sim(_) => basis,
            Backing::Files { .. } => FlashBasis::Footprint,
        };
        let rig = rig::tween(
            w,
            self.cfg.setting,
            &self.cfg.params(t.clone(), chunk_blocks),
            &backing,
            basis,
        )?;
        let op = rig.tween_op.unwrap_or(t.over_provisioning);
        let t = TweenConfig {
            groups: rig.tween_groups.unwrap_or(t.groups),
            ..t
        };
        let v = variant(&t, rig.nvram_bytes, op, align);
        let basis = rig.basis.unwrap_or(basis);
        let row = measure(part, v, Some(basis), w, &rig, align, testbed(&backing))?;
        self.rows.push(row);
        Ok(())
    }

    /// md, eplog, then tween at equal raw flash with md and (simulated SSDs) tween on SSDs sized
    /// to its footprint, labelled.
    fn all_three(&mut self, part: Part, w: &Work, backing: &Backing) -> Result<()> {
        self.baselines(part, w, backing)?;
        let t = self.cfg.tween.clone();
        let cb = self.cfg.chunk_blocks;
        self.tween(part, w, backing, t.clone(), cb, true, FlashBasis::EqualRaw)?;
        if matches!(backing, Backing::Sim(_)) && self.cfg.footprint_too {
            self.tween(part, w, backing, t, cb, true, FlashBasis::Footprint)?;
        }
        Ok(())
    }

    /// The cleaner's changes (issue 45), each alone on the seed's design and all together, at
    /// equal raw flash with md (run first, same process).
    fn cleaner(&mut self, w: &Work) -> Result<()> {
        let sim = self.cfg.sim();
        let md = rig::baseline(w, SchemeKind::Md, self.cfg.setting, &sim)?;
        let row = measure(Part::Cleaner, "-".into(), None, w, &md, true, testbed(&sim))?;
        self.rows.push(row);
        drop(md);
        let seed = TweenConfig {
            groups: self.cfg.tween.groups,
            ..TweenConfig::seed_design()
        };
        let d = self.cfg.tween.clone();
        let variants = [
            seed.clone(),
            TweenConfig {
                victim: VictimPolicy::CostBenefit,
                ..seed.clone()
            },
            TweenConfig {
                gc_stream: d.gc_stream,
                ..seed.clone()
            },
            TweenConfig {
                gc_mode: d.gc_mode,
                ..seed.clone()
            },
            TweenConfig {
                adaptive_groups: d.adaptive_groups,
                ..seed.clone()
            },
            TweenConfig {
                groups: 1,
                ..seed.clone()
            },
            d.clone(),
            TweenConfig {
                victim: VictimPolicy::CostBenefit,
                ..d.clone()
            },
            TweenConfig {
                adaptive_groups: false,
                ..d.clone()
            },
        ];
        let cb = self.cfg.chunk_blocks;
        for t in variants {
            self.tween(Part::Cleaner, w, &sim, t, cb, true, FlashBasis::EqualRaw)?;
        }
        Ok(())
    }

    fn sweep(&mut self, w: &Work) -> Result<()> {
        let base = self.cfg.tween.clone();
        let sim = self.cfg.sim();
        let cb = self.cfg.chunk_blocks;
        // At equal raw flash with md, except the rows that vary TWEEN's over-provisioning (which
        // equal raw flash derives): those are footprint-sized.
        let mut runs: Vec<(TweenConfig, u32, bool)> = Vec::new();
        for groups in [1, 2, 4, 8] {
            runs.push((
                TweenConfig {
                    groups,
                    ..base.clone()
                },
                cb,
                true,
            ));
        }
        for alpha in [0.1, 0.9] {
            runs.push((
                TweenConfig {
                    alpha,
                    ..base.clone()
                },
                cb,
                true,
            ));
        }
        for beta in [0.01, 0.5] {
            runs.push((
                TweenConfig {
                    beta,
                    ..base.clone()
                },
                cb,
                true,
            ));
        }
        for over_provisioning in [0.2, 0.3] {
            let t = TweenConfig {
                over_provisioning,
                ..base.clone()
            };
            runs.push((t, cb, true));
        }
        for blocks in [2, 4] {
            runs.push((base.clone(), cb * blocks, true));
        }
        runs.push((base.clone(), cb, false));
        for (t, blocks, align) in runs {
            let basis = if t.over_provisioning != base.over_provisioning {
                FlashBasis::Footprint
            } else {
                FlashBasis::EqualRaw
            };
            self.tween(Part::Sensitivity, w, &sim, t, blocks, align, basis)?;
        }
        Ok(())
    }
}

fn testbed(b: &Backing) -> &'static str {
    match b {
        Backing::Sim(_) => "simulated SSD",
        Backing::Files { .. } => "O_DIRECT files",
    }
}

/// The parts of `cfg`, in order. A part that fails is recorded in
/// [`TweenReport::failed`] and the next part still runs, so one failure does not hide what the
/// others measured (the caller reports both and exits non-zero).
pub fn run(cfg: &TweenExpConfig) -> Result<TweenReport> {
    cfg.validate()?;
    let mut r = Runner {
        cfg,
        rows: Vec::new(),
    };
    let mut failed = Vec::new();
    for &part in Part::ALL.iter().filter(|p| cfg.parts.contains(p)) {
        if let Err(e) = run_part(&mut r, part) {
            failed.push(PartFailure {
                part,
                error: e.to_string(),
            });
        }
    }
    let versus_md = versus_md(&r.rows);
    Ok(TweenReport {
        rows: r.rows,
        versus_md,
        failed,
    })
}

fn run_part(r: &mut Runner<'_>, part: Part) -> Result<()> {
    let cfg = r.cfg;
    let sim = cfg.sim();
    let load = |name: TraceName, scale: f64| Work::trace(name, scale, cfg.seed);
    match part {
        Part::Traces => {
            for &name in &cfg.traces {
                r.all_three(Part::Traces, &load(name, cfg.scale)?, &sim)?;
            }
        }
        Part::Sync => r.all_three(Part::Sync, &cfg.sync_work(cfg.scale), &sim)?,
        Part::Sensitivity => {
            for &name in &cfg.sweep_traces {
                let w = load(name, cfg.scale)?;
                r.baselines(Part::Sensitivity, &w, &sim)?;
                r.sweep(&w)?;
            }
        }
        Part::Gc => {
            for &name in &cfg.traces {
                let w = load(name, cfg.scale)?;
                for gc_mode in [GcMode::Active, GcMode::Periodic, GcMode::Background] {
                    let t = TweenConfig {
                        gc_mode,
                        ..cfg.tween.clone()
                    };
                    let basis = FlashBasis::EqualRaw;
                    r.tween(Part::Gc, &w, &sim, t, cfg.chunk_blocks, true, basis)?;
                }
            }
        }
        Part::Cleaner => {
            let mut works = Vec::new();
            for &name in &cfg.traces {
                works.push(load(name, cfg.scale)?);
            }
            works.push(cfg.sync_work(cfg.scale));
            for w in &works {
                r.cleaner(w)?;
            }
        }
        Part::Files => {
            let files = Backing::Files {
                dir: cfg.files_dir.clone(),
                nvram_dir: cfg.nvram_dir.clone(),
            };
            let made = !cfg.files_dir.exists();
            // Both directories are made here, once: the runs use them as they find them.
            for d in [&cfg.files_dir, &cfg.nvram_dir] {
                std::fs::create_dir_all(d).map_err(crate::io_at(d))?;
            }
            let result = (|| {
                for &name in &cfg.traces {
                    r.all_three(Part::Files, &load(name, cfg.files_scale)?, &files)?;
                }
                r.all_three(Part::Files, &cfg.sync_work(cfg.files_scale), &files)
            })();
            // The images are removed run by run; the directory too when this run made it.
            if made {
                let _ = std::fs::remove_dir(&cfg.files_dir);
            }
            result?;
        }
    }
    Ok(())
}

fn change_pct(from: f64, to: f64) -> f64 {
    if from == 0.0 {
        if to == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (to - from) / from * 100.0
    }
}

/// tween (default parameters) against md on every simulated workload of the `traces` and `sync`
/// parts, one entry per flash basis tween ran at.
fn versus_md(rows: &[TweenRow]) -> Vec<VersusMd> {
    let mut out = Vec::new();
    for md in rows
        .iter()
        .filter(|r| matches!(r.part, Part::Traces | Part::Sync) && r.scheme == "md")
    {
        for tw in rows
            .iter()
            .filter(|r| r.part == md.part && r.workload == md.workload && r.scheme == "tween")
        {
            let Some(basis) = tw.flash_basis else {
                continue;
            };
            let g = |r: &TweenRow, f: fn(&TweenRow) -> Option<f64>| f(r).unwrap_or(0.0);
            let (mg, tg) = (g(md, |r| r.gc_per_ssd), g(tw, |r| r.gc_per_ssd));
            let (mw, twa) = (
                g(md, |r| r.flash_write_amplification),
                g(tw, |r| r.flash_write_amplification),
            );
            let (mf, tf) = (
                g(md, |r| r.flash_per_host_byte),
                g(tw, |r| r.flash_per_host_byte),
            );
            out.push(VersusMd {
                part: md.part,
                workload: md.workload.clone(),
                flash_basis: basis,
                md_raw_flash_bytes: md.ssd_raw_bytes,
                tween_raw_flash_bytes: tw.ssd_raw_bytes,
                md_gc_per_ssd: mg,
                tween_gc_per_ssd: tg,
                gc_change_pct: change_pct(mg, tg),
                md_flash_wa: mw,
                tween_flash_wa: twa,
                wa_change_pct: change_pct(mw, twa),
                md_flash_per_host_byte: mf,
                tween_flash_per_host_byte: tf,
                flash_change_pct: change_pct(mf, tf),
                ssd_write_change_pct: change_pct(
                    md.ssd_write_bytes as f64,
                    tw.ssd_write_bytes as f64,
                ),
                requests_per_s_ratio: tw.requests_per_s / md.requests_per_s.max(1e-9),
                wall_requests_per_s_ratio: tw.wall_requests_per_s
                    / md.wall_requests_per_s.max(1e-9),
                p999_ratio: tw.latency_p999_us / md.latency_p999_us.max(1e-9),
            });
        }
    }
    out
}

fn opt(x: Option<f64>, prec: usize) -> String {
    x.map(|v| format!("{v:.prec$}"))
        .unwrap_or_else(|| "-".into())
}

fn opt_u(x: Option<u64>) -> String {
    x.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// The report as Markdown tables, one per part, then tween against md.
pub fn render(rep: &TweenReport) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut out = String::new();
    for part in Part::ALL {
        let rows: Vec<&TweenRow> = rep.rows.iter().filter(|r| r.part == part).collect();
        if rows.is_empty() {
            continue;
        }
        out.push_str(&format!("\n## {} ({})\n\n", part.name(), rows[0].testbed));
        out.push_str("| workload | scheme | SSDs sized | variant | groups used | skew | requests | raw flash/SSD MiB | SSD writes MiB | SSD reads MiB | log writes MiB | GC/SSD | GC copies/SSD | flash WA | flash/host | SSD busy s | req/s | p50 us | p99 us | p99.9 us | tween GC segs (off path) |\n");
        out.push_str("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for r in rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {} |\n",
                r.workload,
                r.scheme,
                r.flash_basis.map(|b| b.label()).unwrap_or("footprint"),
                r.variant,
                r.tween_host_groups.as_deref().unwrap_or("-"),
                opt(r.tween_skew, 2),
                r.requests,
                opt(r.ssd_raw_bytes.map(mib), 1),
                mib(r.ssd_write_bytes),
                mib(r.ssd_read_bytes),
                mib(r.log_write_bytes),
                opt(r.gc_per_ssd, 1),
                opt(r.gc_copies_per_ssd, 0),
                opt(r.flash_write_amplification, 3),
                opt(r.flash_per_host_byte, 2),
                opt(r.ssd_busy_s, 2),
                r.requests_per_s,
                r.latency_p50_us,
                r.latency_p99_us,
                r.latency_p999_us,
                match (r.tween_gc_segments, r.tween_idle_gc_segments) {
                    (Some(g), Some(i)) if i > 0 => format!("{g} ({i})"),
                    (g, _) => opt_u(g),
                }
            ));
        }
    }
    for f in &rep.failed {
        out.push_str(&format!("\n## {} FAILED\n\n{}\n", f.part.name(), f.error));
    }
    if !rep.versus_md.is_empty() {
        out.push_str("\n## tween against md (simulated SSDs; negative = tween lower; targets at equal raw flash: GC change ≤ 0, flash WA 1.00, req/s ratio ≥ 1, p99.9 ratio ≤ 2)\n\n");
        out.push_str("| workload | tween SSDs | raw flash/SSD MiB md / tween | GC/SSD md | GC/SSD tween | change | flash WA md | flash WA tween | change | flash/host md | flash/host tween | change | SSD writes change | req/s tween/md | wall req/s tween/md | p99.9 tween/md |\n");
        out.push_str(
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for v in &rep.versus_md {
            out.push_str(&format!(
                "| {} | {} | {} / {} | {:.1} | {:.1} | {:+.1}% | {:.3} | {:.3} | {:+.1}% | {:.2} | {:.2} | {:+.1}% | {:+.1}% | {:.2} | {:.2} | {:.2} |\n",
                v.workload,
                v.flash_basis.label(),
                opt(v.md_raw_flash_bytes.map(mib), 1),
                opt(v.tween_raw_flash_bytes.map(mib), 1),
                v.md_gc_per_ssd,
                v.tween_gc_per_ssd,
                v.gc_change_pct,
                v.md_flash_wa,
                v.tween_flash_wa,
                v.wa_change_pct,
                v.md_flash_per_host_byte,
                v.tween_flash_per_host_byte,
                v.flash_change_pct,
                v.ssd_write_change_pct,
                v.requests_per_s_ratio,
                v.wall_requests_per_s_ratio,
                v.p999_ratio,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(parts: Vec<Part>) -> TweenExpConfig {
        TweenExpConfig {
            parts,
            traces: vec![TraceName::Fin],
            scale: 0.0005,
            ..TweenExpConfig::new(true)
        }
    }

    /// A tiny FIN replay: all three schemes run, and tween's main-device traffic is exactly its
    /// full-stripe flushes (n chunks of one SSD block each), nothing else.
    #[test]
    fn tiny_fin_replay_tween_writes_only_full_stripes() {
        let cfg = tiny(vec![Part::Traces]);
        let rep = run(&cfg).unwrap();
        let rows = &rep.rows;
        assert_eq!(rows.len(), 4);
        // md's SSDs and tween's at equal raw flash have the same raw size.
        let md = rows.iter().find(|r| r.scheme == "md").unwrap();
        let eq = |b| {
            rows.iter()
                .find(|r| r.scheme == "tween" && r.flash_basis == Some(b))
                .unwrap()
        };
        assert_eq!(eq(FlashBasis::EqualRaw).ssd_raw_bytes, md.ssd_raw_bytes);
        assert!(eq(FlashBasis::Footprint).ssd_raw_bytes.is_some());
        let tw = eq(FlashBasis::EqualRaw);
        let chunk = cfg.ssd.block_bytes() * cfg.chunk_blocks as u64;
        let flushes = tw.tween_flushes.unwrap();
        assert!(flushes > 0, "no flush during the replay");
        assert_eq!(
            tw.ssd_write_bytes,
            flushes * cfg.setting.n() as u64 * chunk,
            "tween wrote something other than full stripes"
        );
        assert!(rows
            .iter()
            .all(|r| r.requests > 0 && r.requests_per_s > 0.0));
        assert_eq!(rep.versus_md.len(), 2);
    }

    /// Aged SSDs aligned to flash blocks: every flash block TWEEN overwrites is whole, so the
    /// SSDs' GC never relocates a valid page under tween, while md's random chunk updates on the
    /// same aged model do make GC relocate.
    #[test]
    fn aligned_tween_never_makes_ssd_gc_relocate() {
        let mut cfg = tiny(vec![Part::Traces, Part::Sync]);
        cfg.scale = 0.002;
        let rep = run(&cfg).unwrap();
        for r in rep.rows.iter().filter(|r| r.scheme == "tween") {
            assert_eq!(r.gc_copies_per_ssd, Some(0.0), "{}", r.workload);
            assert_eq!(r.flash_write_amplification, Some(1.0), "{}", r.workload);
        }
        let md_sync = rep
            .rows
            .iter()
            .find(|r| r.part == Part::Sync && r.scheme == "md")
            .unwrap();
        assert!(md_sync.gc_copies_per_ssd.unwrap() > 0.0);
        assert!(md_sync.flash_write_amplification.unwrap() > 1.0);
    }

    #[test]
    fn parts_parse_and_reject() {
        assert_eq!(Part::parse(" GC ").unwrap(), Part::Gc);
        assert!(Part::parse("fast").is_err());
    }
}
