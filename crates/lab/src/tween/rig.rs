//! The arrays TWEEN's evaluation runs on: md, eplog and tween over simulated SSDs (sized to each
//! scheme's footprint, aged by a full sequential fill, their write point aligned to a flash block)
//! or over O_DIRECT files, and the one write/sync interface the replays drive.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ecstack_array::{
    Array, ArrayConfig, ArrayDevices, BackgroundGc, GcMode, NvramSpec, OpenOptions, SchemeKind,
    Tween, TweenConfig,
};
use ecstack_device::{open_spec, BlockDevice, MemDevice, SimSsd, SsdConfig};

use super::workload::Work;
use crate::eplog::{Setting, CHUNK_BYTES};
use crate::{io_at, LabError, Result};

/// The simulated SSDs of a run (the device layer's FTL model, EPLOG's defaults otherwise).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SsdSetup {
    /// Pages of 4 KiB per flash block (TWEEN's chunk is a multiple of a block).
    pub block_pages: u32,
    /// Over-provisioning: fraction of the flash not exposed to the host.
    pub op: f64,
    /// Fill every logical page once before the array is made (an aged, full device: its only free
    /// flash is the over-provisioning). Off: a fresh device, whose unwritten pages act as extra
    /// over-provisioning.
    pub aged: bool,
    /// After the pre-write, pad each SSD's write point to a flash-block boundary, so a chunk of
    /// whole blocks lands in whole blocks (the alignment TWEEN's design assumes).
    pub align: bool,
    /// tween's SSDs at equal raw flash: the model's GC free pool at its minimum (2 blocks) instead
    /// of its default (5 % of the blocks, at least 2). TWEEN writes whole, aligned flash blocks, so
    /// its SSDs never relocate a page and their pool only has to hold the blocks being erased; the
    /// blocks this frees become TWEEN segments. md and eplog keep the model's pool (they need it).
    pub tween_min_pool: bool,
}

impl Default for SsdSetup {
    fn default() -> Self {
        SsdSetup {
            block_pages: 64,
            op: 0.15,
            aged: true,
            align: true,
            tween_min_pool: true,
        }
    }
}

impl SsdSetup {
    pub fn block_bytes(&self) -> u64 {
        self.block_pages as u64 * SsdConfig::default().page_size as u64
    }

    /// An SSD whose logical capacity holds `bytes` plus one spare block (the alignment pad's page).
    pub(crate) fn config(&self, bytes: u64) -> SsdConfig {
        let base = SsdConfig::default();
        let pages = bytes.div_ceil(base.page_size as u64) + self.block_pages as u64;
        let per_block = self.block_pages as f64 * (1.0 - self.op);
        let blocks = ((pages as f64 / per_block).ceil() as u32 + 1).max(32);
        SsdConfig {
            blocks,
            pages_per_block: self.block_pages,
            op: self.op,
            ..base
        }
    }

    /// An SSD of exactly `blocks` flash blocks with the least over-provisioning the model's GC
    /// watermarks accept (the free pool + 2 blocks outside the logical pages): tween at equal raw
    /// flash, whose full-block writes never need the SSD's own spare. With `tween_min_pool` the
    /// pool is the model's minimum, 2 blocks (watermarks at 0: `low_blocks` is at least 2).
    pub(crate) fn config_raw(&self, blocks: u32) -> SsdConfig {
        let mut base = SsdConfig {
            blocks,
            pages_per_block: self.block_pages,
            ..SsdConfig::default()
        };
        if self.tween_min_pool {
            base.gc_low = 0.0;
            base.gc_high = 0.0;
        }
        let outside = (base.high_blocks() as u64 + 2) * self.block_pages as u64;
        let total = blocks as u64 * self.block_pages as u64;
        // The smallest op whose floor(total · (1 − op)) leaves `outside` pages out.
        let op = outside as f64 / total as f64 + 1e-9;
        SsdConfig { op, ..base }
    }
}

/// How tween's SSDs are sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlashBasis {
    /// The same raw flash per SSD as md's (footprint-sized md SSDs): the SSDs get the least
    /// over-provisioning their GC accepts and every other block becomes TWEEN segments (TWEEN's
    /// own spare is what is left beyond the working set).
    EqualRaw,
    /// Sized to TWEEN's footprint: its segments (with TWEEN's over-provisioning) on SSDs with the
    /// same over-provisioning as md's (the experiment's defaults before issue 45).
    Footprint,
}

impl FlashBasis {
    pub fn label(self) -> &'static str {
        match self {
            FlashBasis::EqualRaw => "equal raw flash",
            FlashBasis::Footprint => "footprint",
        }
    }
}

/// Where the main devices are.
#[derive(Debug, Clone, PartialEq)]
pub enum Backing {
    Sim(SsdSetup),
    /// Device files in `dir`, opened with O_DIRECT (made and removed per run); TWEEN's NVRAM is a
    /// file in `nvram_dir` mapped with mmap and persisted with msync.
    Files {
        dir: PathBuf,
        nvram_dir: PathBuf,
    },
}

/// TWEEN's parameters of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct TweenParams {
    pub tween: TweenConfig,
    /// Chunk = this many flash blocks (the NVRAM holds groups × k chunks).
    pub chunk_blocks: u32,
    /// Periodic mode: idle GC runs after every this many requests (outside their latency);
    /// background mode: an idle period there lets the worker finish (outside their latency).
    pub idle_every: u64,
}

/// Files made for one run, removed on drop.
struct RunFiles(Vec<PathBuf>);

impl Drop for RunFiles {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

pub(crate) enum Target {
    Array(Array),
    Tween(Arc<Tween>),
}

/// One scheme's array ready for a replay.
pub(crate) struct Rig {
    pub scheme: SchemeKind,
    pub target: Target,
    pub ssds: Vec<Arc<SimSsd>>,
    pub nvram_bytes: Option<u64>,
    /// tween: TWEEN's over-provisioning in effect (derived at equal raw flash).
    pub tween_op: Option<f64>,
    /// tween: NVRAM buffers in effect (fewer at equal raw flash when md's flash is tight).
    pub tween_groups: Option<usize>,
    /// tween: how its SSDs were sized in the end.
    pub basis: Option<FlashBasis>,
    pub idle_every: u64,
    /// tween in background mode: its worker (stopped before the files go).
    _background: Option<BackgroundGc>,
    _files: Option<RunFiles>,
}

impl Rig {
    pub fn array(&self) -> &Array {
        match &self.target {
            Target::Array(a) => a,
            Target::Tween(t) => t.array(),
        }
    }

    pub fn tween(&self) -> Option<&Tween> {
        match &self.target {
            Target::Tween(t) => Some(t.as_ref()),
            _ => None,
        }
    }

    pub fn write(&self, buf: &[u8], off: u64) -> Result<()> {
        match &self.target {
            Target::Array(a) => a.write(buf, off)?,
            Target::Tween(t) => t.write(buf, off)?,
        }
        Ok(())
    }

    /// What an fsync asks of the device: md and eplog persist their metadata and flush the
    /// devices; tween's acknowledged writes are already persistent in NVRAM (its flush is empty).
    pub fn sync(&self) -> Result<()> {
        match &self.target {
            Target::Array(a) => a.sync()?,
            Target::Tween(t) => BlockDevice::flush(t.as_ref())?,
        }
        Ok(())
    }

    /// End of a replay: eplog's parity commit (its deferred parity work is part of its cost).
    pub fn finish(&self) -> Result<()> {
        if self.scheme == SchemeKind::Eplog {
            self.array().commit()?;
        }
        Ok(())
    }

    /// Pre-write the working set sequentially (every replayed write is then an update); with
    /// `align`, the SSDs' write points are aligned before (the aging fill and the array's labels
    /// leave them inside a block) and after.
    pub fn prewrite(&self, wss: u64, align: bool) -> Result<()> {
        if align {
            for s in &self.ssds {
                align_write_point(s)?;
            }
        }
        let sb = self.array().geometry().stripe_bytes();
        let piece = (sb * 4).max(1 << 20).div_ceil(sb) * sb;
        let end = match self.target {
            Target::Array(_) => wss.div_ceil(sb) * sb,
            Target::Tween(_) => wss,
        };
        let buf = vec![0x5au8; piece as usize];
        let mut off = 0;
        while off < end {
            let len = piece.min(end - off);
            self.write(&buf[..len as usize], off)?;
            off += len;
        }
        if let Target::Array(a) = &self.target {
            a.commit()?;
        }
        if align {
            for s in &self.ssds {
                align_write_point(s)?;
            }
        }
        Ok(())
    }
}

/// Fill every logical page of `s` once, sequentially (an aged, full device).
fn age(s: &SimSsd) -> Result<()> {
    const PIECE_BYTES: u64 = 1 << 20;
    let zero = vec![0u8; PIECE_BYTES as usize];
    let cap = s.capacity();
    let mut off = 0;
    while off < cap {
        let len = PIECE_BYTES.min(cap - off);
        s.write_at(&zero[..len as usize], off)?;
        off += len;
    }
    Ok(())
}

/// Rewrite the SSD's last logical page (outside every array's footprint: `SsdSetup::config` adds a
/// block) until the open flash block is full, so the next host write starts a block. The FTL has
/// one write point and fills each block completely, so its offset in the open block is the flash
/// page writes so far modulo the block's pages.
fn align_write_point(s: &SimSsd) -> Result<()> {
    let st = s.ssd_stats();
    let ppb = s.with_model(|m| m.config().pages_per_block) as u64;
    let page = s.with_model(|m| m.config().page_size) as u64;
    let used = st.flash_page_writes % ppb;
    if used == 0 {
        return Ok(());
    }
    let last = s.capacity() / page - 1;
    let buf = vec![0u8; page as usize];
    for _ in used..ppb {
        s.write_at(&buf, last * page)?;
    }
    Ok(())
}

fn sim_ssds(setup: &SsdSetup, n: usize, bytes: u64) -> Result<Vec<Arc<SimSsd>>> {
    sim_ssds_with(setup, n, setup.config(bytes))
}

fn sim_ssds_with(setup: &SsdSetup, n: usize, c: SsdConfig) -> Result<Vec<Arc<SimSsd>>> {
    (0..n)
        .map(|_| {
            let s = Arc::new(SimSsd::new(c.clone())?);
            if setup.aged {
                age(&s)?;
            }
            Ok(s)
        })
        .collect()
}

fn file_devices(
    dir: &Path,
    tag: &str,
    n: usize,
    bytes: u64,
    files: &mut Vec<PathBuf>,
) -> Result<Vec<Arc<dyn BlockDevice>>> {
    // The directory is the caller's (made once per experiment): never made again here, or a
    // scratch directory removed on SIGINT would come back under a run still going.
    ensure_dir(dir)?;
    (0..n)
        .map(|i| {
            let p = dir.join(format!("tween-exp-{}-{tag}{i}.img", std::process::id()));
            write_zeros(&p, bytes)?;
            files.push(p.clone());
            Ok(open_spec(&format!("file:{}?direct=1", p.display()))?)
        })
        .collect()
}

fn ensure_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        Ok(())
    } else {
        Err(LabError::Run(format!(
            "the device directory {} is gone (or was never made)",
            dir.display()
        )))
    }
}

/// Written through (no holes), so no run pays the file system's block allocation.
fn write_zeros(p: &Path, size: u64) -> Result<()> {
    use std::io::Write as _;
    const PIECE_BYTES: u64 = 1 << 20;
    let zero = vec![0u8; PIECE_BYTES as usize];
    let mut f = std::fs::File::create(p).map_err(io_at(p))?;
    let mut left = size;
    while left > 0 {
        let len = PIECE_BYTES.min(left);
        f.write_all(&zero[..len as usize]).map_err(io_at(p))?;
        left -= len;
    }
    f.sync_all().map_err(io_at(p))
}

fn meta() -> Result<Arc<dyn BlockDevice>> {
    Ok(Arc::new(MemDevice::new(1 << 30)?))
}

fn as_dyn(s: &[Arc<SimSsd>]) -> Vec<Arc<dyn BlockDevice>> {
    s.iter()
        .map(|d| Arc::clone(d) as Arc<dyn BlockDevice>)
        .collect()
}

/// An md or eplog array for `w` (4 KiB chunks, as in the EPLOG experiment): md's footprint is its
/// stripes, eplog's adds the spare area for out-of-place versions; eplog's log devices are
/// simulated HDDs (or files), not counted among the SSDs.
/// The bytes one of md's main devices holds for `w` (its stripes of 4 KiB chunks and the labels).
fn md_main_bytes(w: &Work, s: Setting) -> u64 {
    CHUNK_BYTES + w.sizing(s).stripes * CHUNK_BYTES
}

pub(crate) fn baseline(w: &Work, scheme: SchemeKind, s: Setting, backing: &Backing) -> Result<Rig> {
    let sz = w.sizing(s);
    let (slots, stripes) = match scheme {
        SchemeKind::Md => (sz.stripes, sz.stripes),
        _ => (sz.slots, sz.stripes),
    };
    let main_bytes = CHUNK_BYTES + slots * CHUNK_BYTES;
    let nlog = if scheme.uses_log() { s.m } else { 0 };
    let mut files = Vec::new();
    let (ssds, main, log) = match backing {
        Backing::Sim(setup) => {
            let ssds = sim_ssds(setup, s.n(), main_bytes)?;
            let log = (0..nlog)
                .map(|_| {
                    Ok(open_spec(&format!(
                        "hdd:capacity={},data=0",
                        sz.log_bytes()
                    ))?)
                })
                .collect::<Result<_>>()?;
            let main = as_dyn(&ssds);
            (ssds, main, log)
        }
        Backing::Files { dir, .. } => {
            let main = file_devices(dir, "main", s.n(), main_bytes, &mut files)?;
            let log = file_devices(dir, "log", nlog, sz.log_bytes(), &mut files)?;
            (Vec::new(), main, log)
        }
    };
    let cfg = ArrayConfig {
        chunk_size: CHUNK_BYTES as u32,
        reserve: if scheme == SchemeKind::Eplog {
            (slots - stripes) as f64 / slots as f64 * 0.999
        } else {
            0.0
        },
        max_stripes: Some(stripes),
        ..ArrayConfig::with_geometry(scheme, s.k, s.m)
    };
    let opts = OpenOptions {
        parallel_io: matches!(backing, Backing::Files { .. }),
        // The experiment's own scratch files, rewritten by every run.
        force: true,
        ..OpenOptions::default()
    };
    let devices = ArrayDevices {
        main,
        log,
        meta: meta()?,
        specs: None,
    };
    let array = Array::create_with(&cfg, devices, &opts)?;
    Ok(Rig {
        scheme,
        target: Target::Array(array),
        ssds,
        nvram_bytes: None,
        tween_op: None,
        tween_groups: None,
        basis: None,
        idle_every: 0,
        _background: None,
        _files: Some(RunFiles(files)),
    })
}

/// A tween array for `w`: chunk = `chunk_blocks` flash blocks, segments for the working set plus
/// TWEEN's spare (over-provisioning, at least N + 3), NVRAM in memory (simulated SSDs) or a file.
///
/// `EqualRaw` (simulated SSDs only): the SSDs get md's raw flash (`md_raw_blocks`), the least
/// over-provisioning their GC accepts, and TWEEN's over-provisioning becomes whatever the segments
/// beyond the working set are (the `tween.over_provisioning` given is ignored).
pub(crate) fn tween(
    w: &Work,
    s: Setting,
    p: &TweenParams,
    backing: &Backing,
    basis: FlashBasis,
) -> Result<Rig> {
    let block = match backing {
        Backing::Sim(setup) => setup.block_bytes(),
        Backing::Files { .. } => SsdSetup::default().block_bytes(),
    };
    let chunk = block * p.chunk_blocks.max(1) as u64;
    let stripe = s.k as u64 * chunk;
    let mut t = p.tween.clone();
    let data = w.wss.div_ceil(stripe);
    let mut segments = t.segments_for(data);
    let mut raw: Option<SsdConfig> = None;
    let mut basis = basis;
    if let (FlashBasis::EqualRaw, Backing::Sim(setup)) = (basis, backing) {
        let md = setup.config(md_main_bytes(w, s));
        let c = setup.config_raw(md.blocks);
        let logical = c.logical_pages() * c.page_size as u64;
        // The alignment pad's block and the array's first chunk (labels) stay outside.
        let fit = logical.saturating_sub(block + chunk) / chunk;
        // TWEEN keeps at least N + 3 spare segments (`gc.rs`); where md's flash leaves fewer, it
        // runs with fewer NVRAM buffers (the variant shows N); below 4 (one buffer) it cannot run
        // there at all, and the run is footprint-sized instead (labelled so: tiny `--quick` sets).
        let spare = fit.saturating_sub(data);
        if spare >= 4 {
            segments = fit;
            t.groups = t.groups.min((spare - 3) as usize);
            // Just below (S − data)/S, so that ⌈S · op⌉ = S − data.
            t.over_provisioning = (spare as f64 / fit as f64 - 1e-9).max(0.0);
            raw = Some(c);
        } else {
            basis = FlashBasis::Footprint;
        }
    }
    let t = &t;
    let main_bytes = chunk + segments * chunk;
    let mut files = Vec::new();
    let (ssds, main, nv) = match backing {
        Backing::Sim(setup) => {
            let ssds = match raw {
                Some(c) => sim_ssds_with(setup, s.n(), c)?,
                None => sim_ssds(setup, s.n(), main_bytes)?,
            };
            let main = as_dyn(&ssds);
            (ssds, main, NvramSpec::memory().0)
        }
        Backing::Files { dir, nvram_dir } => {
            let main = file_devices(dir, "tween", s.n(), main_bytes, &mut files)?;
            ensure_dir(nvram_dir)?;
            let p = nvram_dir.join(format!("tween-exp-{}-nvram", std::process::id()));
            let _ = std::fs::remove_file(&p);
            files.push(p.clone());
            (Vec::new(), main, NvramSpec::file(p))
        }
    };
    let devices = ArrayDevices {
        main,
        log: Vec::new(),
        meta: meta()?,
        specs: None,
    };
    let acfg = ArrayConfig {
        chunk_size: chunk as u32,
        max_stripes: Some(segments),
        ..ArrayConfig::with_geometry(SchemeKind::Tween, s.k, s.m)
    };
    // The experiment's own scratch files, rewritten by every run.
    let force = OpenOptions {
        force: true,
        ..OpenOptions::default()
    };
    let tw = Arc::new(Tween::create_with(&acfg, devices, t, &nv, &force)?);
    let background = (t.gc_mode == GcMode::Background).then(|| tw.start_background());
    if tw.size() < w.wss {
        return Err(LabError::Run(format!(
            "tween capacity {} below the working set {}",
            tw.size(),
            w.wss
        )));
    }
    Ok(Rig {
        scheme: SchemeKind::Tween,
        target: Target::Tween(tw),
        ssds,
        nvram_bytes: Some(t.groups as u64 * stripe),
        tween_op: Some(t.over_provisioning),
        tween_groups: Some(t.groups),
        basis: Some(basis),
        idle_every: if matches!(t.gc_mode, GcMode::Periodic | GcMode::Background) {
            p.idle_every.max(1)
        } else {
            0
        },
        _background: background,
        _files: Some(RunFiles(files)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tween's equal-raw-flash SSDs: the model's pool keeps 5 % of the blocks + 2 outside the
    /// logical pages; the minimal pool 2 + 2, and those blocks become logical (TWEEN segments).
    #[test]
    fn minimal_pool_gives_the_model_pool_to_the_logical_space() {
        let blocks = 101; // USR's md SSD at scale 0.05
        let model = SsdSetup {
            tween_min_pool: false,
            ..SsdSetup::default()
        };
        let min = SsdSetup::default();
        assert!(min.tween_min_pool, "the minimal pool is the default");
        let (m, n) = (model.config_raw(blocks), min.config_raw(blocks));
        assert_eq!(m.blocks, n.blocks);
        let outside =
            |c: &SsdConfig| c.blocks as u64 * c.pages_per_block as u64 - c.logical_pages();
        // At least the pool + 2 blocks (the op's rounding may leave one page more out).
        assert!((4 * 64..5 * 64).contains(&outside(&n)), "{}", outside(&n));
        assert_eq!(outside(&m) - outside(&n), 4 * 64); // ⌈0.05 · 101⌉ = 6 blocks against 2
        assert!(m.validate().is_ok() && n.validate().is_ok());
    }
}
