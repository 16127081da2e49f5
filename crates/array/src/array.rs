//! The array facade: the [`BlockDevice`] implementation, stripe and admin locking, write intent and
//! the admin operations, around the core ([`Core`]) and an update scheme.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use ecstack_codes::new_code;
use ecstack_device::{BlockDevice, DeviceError, DeviceStats};

use crate::clock::Clock;
use crate::core::{lock, store_superblock, Alloc, CommitReport, Core, MetaInner, RebuildReport};
use crate::format::{
    decode_label, encode_label, ArrayConfig, Geometry, MetaLayout, SchemeKind, Superblock,
    DEVICE_HEADER, LABEL_SIZE, SB_SLOT,
};
use crate::io::Devs;
use crate::meta::{
    checkpoint_area_max, crc_area_bytes, crc_area_of, inc_area_min, MetaState, MetaVolume, Rec,
    CHECKPOINT_AREA_INITIAL_BYTES, INC_AREA_MIN_BYTES, JOURNAL_GROUP_DIVISOR, REGION_STRIPES,
};
use crate::scheme::eplog::Eplog;
use crate::scheme::md::Md;
use crate::scheme::pl::Pl;
use crate::scheme::segments::Segments;
use crate::scheme::{ChunkRead, ChunkWrite, UpdateScheme, WriteOutcome};
use crate::scrub::{ScrubOptions, ScrubReport};
use crate::{ArrayError, Result};

/// Stripe lock table size (a request locks the entries of its stripes in ascending order).
const LOCKS: usize = 1024;
/// Pending metadata records that force a metadata sync even without a flush.
const MAX_PENDING: usize = 8192;

/// Parity commits one write may ask for when it runs out of chunk slots or log space, before it
/// gives up with `NoSpace` (concurrent writers can take the space a commit freed).
const SPACE_COMMITS_MAX: u32 = 8;

/// The devices of an array.
#[derive(Debug, Clone)]
pub struct ArrayDevices {
    /// The n devices of the main array.
    pub main: Vec<Arc<dyn BlockDevice>>,
    /// The n − k log devices (pl, eplog; none for md).
    pub log: Vec<Arc<dyn BlockDevice>>,
    /// The metadata volume.
    pub meta: Arc<dyn BlockDevice>,
    /// Specs to record in the superblock (main, log, meta), so the CLI can reopen by spec.
    pub specs: Option<Vec<String>>,
}

impl ArrayDevices {
    fn members(&self) -> crate::exclusive::Members<'_> {
        crate::exclusive::Members {
            main: &self.main,
            log: &self.log,
            meta: &self.meta,
            specs: self.specs.as_deref(),
        }
    }

    /// The devices of an array from handles of one concrete type, with no specs recorded: for
    /// callers that keep typed handles to inject faults (the simulator, tests).
    pub fn from_handles<D: BlockDevice + 'static>(
        main: &[Arc<D>],
        log: &[Arc<D>],
        meta: &Arc<D>,
    ) -> ArrayDevices {
        let erase = |d: &Arc<D>| Arc::clone(d) as Arc<dyn BlockDevice>;
        ArrayDevices {
            main: main.iter().map(erase).collect(),
            log: log.iter().map(erase).collect(),
            meta: erase(meta),
            specs: None,
        }
    }
}

/// What [`Array::discard`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DiscardReport {
    /// Whole data stripes dropped from the metadata, their chunk slots discarded on the devices.
    pub stripes: u64,
    /// Bytes overwritten with zeros instead (partly covered stripes, and eplog stripes that could
    /// not be dropped).
    pub zeroed_bytes: u64,
}

/// Run-time options (not stored on disk).
#[derive(Debug, Clone, PartialEq)]
pub struct OpenOptions {
    /// Issue I/O to different devices in parallel.
    pub parallel_io: bool,
    /// Override the stored commit-every-N-writes trigger.
    pub commit_every: Option<u64>,
    /// Recovery batch size B (data stripes per batch).
    pub rebuild_batch: usize,
    /// Prefetch the next batch's chunks during the metadata scan.
    pub rebuild_prefetch: bool,
    /// The clock for time-driven decisions (idle commit, stripe buffer mode); a simulation passes
    /// a manual one.
    pub clock: Clock,
    /// On create: the array's uuid (salts every label and metadata frame) instead of a fresh one
    /// from the operating system's randomness (`ecstack_base::random_id`), so two runs of one
    /// simulation seed write identical bytes.
    pub uuid: Option<u64>,
    /// md/pl: journal every in-place update of a written stripe, not only those of a degraded
    /// array, closing the write hole of a device lost with updates unflushed that the array had
    /// not noticed (docs/array.md, "Write hole"; Linux md's `--consistency-policy=journal`). Off by
    /// default: the seed's md and pl do not journal. eplog ignores it (it has no such hole).
    pub journal_updates: bool,
    /// Compute and verify per-chunk checksums (on by default; off only to measure what they cost,
    /// see [`Array::set_checksums`]; `ecstack array ... --no-checksums`).
    pub checksums: bool,
    /// On create: overwrite devices that hold something (an ecstack label or superblock, or any
    /// non-zero byte in their first MiB); without it `create` refuses them
    /// (`ecstack array create --force`).
    pub force: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            parallel_io: true,
            commit_every: None,
            rebuild_batch: 100,
            rebuild_prefetch: true,
            clock: Clock::system(),
            uuid: None,
            journal_updates: false,
            checksums: true,
            force: false,
        }
    }
}

fn new_scheme(kind: SchemeKind) -> Box<dyn UpdateScheme> {
    match kind {
        SchemeKind::Md => Box::new(Md),
        SchemeKind::Pl => Box::new(Pl),
        SchemeKind::Eplog => Box::new(Eplog::default()),
        SchemeKind::Tween => Box::new(Segments),
    }
}

/// An erasure-coded block array (see the crate docs).
pub struct Array {
    pub(crate) core: Core,
    pub(crate) scheme: Box<dyn UpdateScheme>,
    name: String,
    admin: RwLock<()>,
    locks: Vec<Mutex<()>>,
    /// md/pl write-intent regions known durable on the metadata volume, and the lock that makes
    /// new ones durable one caller at a time.
    intent: RwLock<std::collections::BTreeSet<u64>>,
    writes: AtomicU64,
    commit_every: AtomicU64,
    pub(crate) rebuild_batch: AtomicU64,
    pub(crate) rebuild_prefetch: AtomicBool,
    piece_stripes: u64,
    clock: Clock,
    last_io: Mutex<Instant>,
    /// Failed devices at the last metadata sync that followed a failure found by I/O.
    failed_seen: AtomicU64,
    /// The exclusive locks on the files and block devices behind the array's devices, held for
    /// the array's lifetime (released on drop).
    device_locks: Mutex<Vec<ecstack_device::DeviceLock>>,
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Array({})", self.name)
    }
}

fn cfg_err(s: impl Into<String>) -> ArrayError {
    ArrayError::Config(s.into())
}

impl Array {
    /// Check a configuration against the devices and compute the superblock, writing nothing.
    pub fn plan(cfg: &ArrayConfig, devices: &ArrayDevices) -> Result<Superblock> {
        let (k, m) = (cfg.k, cfg.m);
        Geometry::check_shape(k, m, cfg.chunk_size as u64)?;
        let code = new_code(cfg.code, k, m).map_err(|e| cfg_err(e.to_string()))?;
        crate::format::refuse_unaligned_code(code.as_ref())?;
        let n = k + m;
        if devices.main.len() != n {
            return Err(cfg_err(format!(
                "a ({k}+{m}) array needs {n} main devices, got {}",
                devices.main.len()
            )));
        }
        let want_log = if cfg.scheme.uses_log() { m } else { 0 };
        if devices.log.len() != want_log {
            return Err(cfg_err(if cfg.scheme.uses_log() {
                format!(
                    "scheme {} needs n - k = {m} log devices, got {}",
                    cfg.scheme,
                    devices.log.len()
                )
            } else {
                format!(
                    "scheme {} uses no log devices, got {}",
                    cfg.scheme,
                    devices.log.len()
                )
            }));
        }
        let chunk = cfg.chunk_size as u64;
        if !(cfg.reserve.is_finite() && (0.0..0.95).contains(&cfg.reserve)) {
            return Err(cfg_err(format!(
                "reserve {} must be in [0, 0.95)",
                cfg.reserve
            )));
        }
        let data_start = DEVICE_HEADER.max(chunk).div_ceil(chunk) * chunk;
        let min_main = devices.main.iter().map(|d| d.capacity()).min().unwrap_or(0);
        let slots = min_main.saturating_sub(data_start) / chunk;
        if slots < 2 {
            return Err(cfg_err(format!(
                "main devices are too small: the smallest has {min_main} bytes, need at least {} for two {chunk}-byte chunks",
                data_start + 2 * chunk
            )));
        }
        let mut stripes = match cfg.scheme {
            SchemeKind::Eplog => {
                let s = ((slots as f64) * (1.0 - cfg.reserve)).floor() as u64;
                s.min(slots - 1)
            }
            _ => slots,
        };
        if let Some(ms) = cfg.max_stripes {
            stripes = stripes.min(ms.max(1));
        }
        let log_slots = if cfg.scheme.uses_log() {
            let min_log = devices.log.iter().map(|d| d.capacity()).min().unwrap_or(0);
            let ls = min_log.saturating_sub(data_start) / chunk;
            if ls < 4 {
                return Err(cfg_err(format!(
                    "log devices are too small: the smallest has {min_log} bytes, need at least {}",
                    data_start + 4 * chunk
                )));
            }
            ls
        } else {
            0
        };
        let geometry = Geometry {
            n,
            k,
            m,
            chunk,
            data_start,
            slots,
            stripes,
            log_slots,
        };
        geometry.validate(cfg.scheme)?;
        // Checkpoint areas start at the worst case of the geometry or 1 MiB, whichever is
        // smaller, and grow with the checkpoints (`MetaVolume::write_checkpoint_growing`).
        let cp_size = checkpoint_area_max(&geometry).min(CHECKPOINT_AREA_INITIAL_BYTES);
        let inc_min = inc_area_min(&geometry);
        // The checksum area (format version 6) takes the end of the volume.
        let crc_bytes = crc_area_bytes(&geometry);
        let need = (2 * SB_SLOT + 2 * cp_size)
            .saturating_add(inc_min)
            .saturating_add(crc_bytes);
        let meta_cap = devices.meta.capacity();
        if meta_cap < need {
            let why = if inc_min > INC_AREA_MIN_BYTES {
                format!(
                    ": its incremental area must hold {JOURNAL_GROUP_DIVISOR} journal records of a whole stripe ({k} chunks of {chunk} bytes)"
                )
            } else {
                String::new()
            };
            return Err(cfg_err(format!(
                "metadata volume is too small: {meta_cap} bytes, this geometry needs at least {need} ({} MiB){why}",
                need.div_ceil(1 << 20)
            )));
        }
        let cp0 = 2 * SB_SLOT;
        let layout = MetaLayout {
            cp_off: [cp0, cp0 + cp_size],
            cp_size,
            inc_off: cp0 + 2 * cp_size,
            inc_size: (meta_cap - cp0 - 2 * cp_size - crc_bytes) / 4096 * 4096,
        };
        let specs = match &devices.specs {
            Some(s) => {
                if s.len() != n + devices.log.len() + 1 {
                    return Err(cfg_err(format!(
                        "{} device specs given for {} devices",
                        s.len(),
                        n + devices.log.len() + 1
                    )));
                }
                s.clone()
            }
            None => devices
                .main
                .iter()
                .chain(devices.log.iter())
                .chain(std::iter::once(&devices.meta))
                .map(|d| d.name().to_string())
                .collect(),
        };
        let sb = Superblock {
            generation: 1,
            uuid: ecstack_base::random_id(),
            scheme: cfg.scheme,
            code: cfg.code,
            geometry,
            layout,
            commit_every: cfg.commit_every,
            trim_on_commit: cfg.trim_on_commit,
            specs,
        };
        sb.validate()?;
        sb.encode()?;
        Ok(sb)
    }

    /// Create a new array on `devices` (everything on them is overwritten). Misconfigurations are
    /// refused before anything is written.
    pub fn create(cfg: &ArrayConfig, devices: ArrayDevices) -> Result<Array> {
        Self::create_with(cfg, devices, &OpenOptions::default())
    }

    pub fn create_with(
        cfg: &ArrayConfig,
        devices: ArrayDevices,
        opts: &OpenOptions,
    ) -> Result<Array> {
        let mut sb = Self::plan(cfg, &devices)?;
        let held = crate::exclusive::lock_devices(&devices.members())?;
        if !opts.force {
            crate::exclusive::check_blank(&devices.members())?;
        }
        if let Some(uuid) = opts.uuid {
            sb.uuid = uuid;
        }
        // Labels, an empty checkpoint, then the superblock copies.
        for (i, d) in devices.main.iter().chain(devices.log.iter()).enumerate() {
            d.write_at(&encode_label(sb.uuid, i as u16), 0)?;
            d.flush()?;
        }
        let g = &sb.geometry;
        let mut mv = MetaVolume::new(Arc::clone(&devices.meta), sb.layout.clone(), sb.uuid);
        mv.cp_size_max = checkpoint_area_max(g);
        mv.inc_min = inc_area_min(g);
        mv.crc_area = Some(crc_area_of(g, &sb.layout));
        mv.paged = true;
        // Invalidate a previous array's second checkpoint area and first frame.
        devices.meta.write_at(&[0u8; 64], sb.layout.cp_off[0])?;
        devices.meta.write_at(&[0u8; 64], sb.layout.cp_off[1])?;
        devices.meta.write_at(&[0u8; 64], sb.layout.inc_off)?;
        mv.write_checkpoint(&MetaState::new(g).encode_paged())?;
        let raw = sb.encode()?;
        devices.meta.write_at(&raw, 0)?;
        devices.meta.write_at(&raw, SB_SLOT)?;
        devices.meta.flush()?;
        Self::assemble(sb, devices, mv, opts, true, held)
    }

    /// Read the superblock of a metadata volume (the newer valid copy).
    pub fn read_superblock(meta: &dyn BlockDevice) -> Result<Superblock> {
        let mut best: Option<Superblock> = None;
        let mut io_err = None;
        for off in [0, SB_SLOT] {
            let len = SB_SLOT.min(meta.capacity().saturating_sub(off)) as usize;
            if len < 20 {
                continue;
            }
            let mut raw = vec![0u8; len];
            if let Err(e) = meta.read_at(&mut raw, off) {
                io_err = Some(e);
                continue;
            }
            if let Some(sb) = Superblock::decode(&raw)? {
                if best.as_ref().is_none_or(|b| sb.generation > b.generation) {
                    best = Some(sb);
                }
            }
        }
        if let (None, Some(e)) = (&best, io_err) {
            return Err(e.into());
        }
        best.ok_or_else(|| {
            ArrayError::Meta(format!(
                "{}: no valid array superblock (not an ecstack array metadata volume?)",
                meta.name()
            ))
        })
    }

    /// Open an existing array: superblock, newest valid checkpoint + incremental records, device
    /// labels. An interrupted parity commit is completed.
    pub fn open(devices: ArrayDevices) -> Result<Array> {
        Self::open_with(devices, &OpenOptions::default())
    }

    pub fn open_with(devices: ArrayDevices, opts: &OpenOptions) -> Result<Array> {
        let held = crate::exclusive::lock_devices(&devices.members())?;
        let sb = Self::read_superblock(devices.meta.as_ref())?;
        sb.check_devices(&devices.main, &devices.log)?;
        let mut mv = MetaVolume::new(Arc::clone(&devices.meta), sb.layout.clone(), sb.uuid);
        mv.cp_size_max = checkpoint_area_max(&sb.geometry);
        mv.inc_min = inc_area_min(&sb.geometry);
        // Used if the live checkpoint is of version 6 (`MetaVolume::load` checks it fits).
        mv.crc_area = Some(crc_area_of(&sb.geometry, &sb.layout));
        if sb.layout.inc_size < mv.inc_min {
            let g = &sb.geometry;
            return Err(ArrayError::Meta(format!(
                "the metadata volume's incremental area of {} bytes cannot hold {JOURNAL_GROUP_DIVISOR} journal records of a whole stripe ({} chunks of {} bytes; {} bytes needed): recreate the array with a larger metadata volume",
                sb.layout.inc_size, g.k, g.chunk, mv.inc_min
            )));
        }
        Self::assemble(sb, devices, mv, opts, false, held)
    }

    /// `fresh`: the labels were just written (devices that do not keep data, such as metadata-only
    /// simulated SSDs, cannot read them back).
    fn assemble(
        sb: Superblock,
        devices: ArrayDevices,
        mut mv: MetaVolume,
        opts: &OpenOptions,
        fresh: bool,
        held: Vec<ecstack_device::DeviceLock>,
    ) -> Result<Array> {
        let g = sb.geometry.clone();
        let mut state = mv.load(&g)?;
        let all: Vec<Arc<dyn BlockDevice>> = devices
            .main
            .iter()
            .chain(devices.log.iter())
            .cloned()
            .collect();
        let devs = Devs::new(all.clone(), opts.parallel_io);
        // Labels: a device that cannot be read is failed; a wrong device is refused.
        let mut newly_failed = Vec::new();
        for (i, d) in all.iter().enumerate() {
            if state.failed.contains(&(i as u16)) {
                devs.mark_failed(i);
                continue;
            }
            if fresh {
                continue;
            }
            let mut b = vec![0u8; LABEL_SIZE];
            match d.read_at(&mut b, 0) {
                Err(_) => {
                    devs.mark_failed(i);
                    newly_failed.push(i);
                }
                Ok(()) => match decode_label(&b)? {
                    Some((u, idx)) if u == sb.uuid && idx as usize == i => {}
                    Some((u, idx)) if u == sb.uuid => {
                        return Err(cfg_err(format!(
                            "device {} ({}) is member {idx} of this array, not member {i}: check the device order",
                            i,
                            d.name()
                        )))
                    }
                    _ => {
                        return Err(cfg_err(format!(
                            "device {} ({}) does not belong to this array",
                            i,
                            d.name()
                        )))
                    }
                },
            }
        }
        if devices.meta.capacity() < sb.layout.inc_off + sb.layout.inc_size {
            return Err(cfg_err(
                "metadata volume is smaller than its recorded layout",
            ));
        }
        let failed_at_open = state.failed.clone();
        let mut pending = Vec::new();
        for i in newly_failed {
            let r = Rec::DeviceFailed { dev: i as u16 };
            state.apply(&r);
            pending.push(r);
        }
        let alloc = if sb.scheme == SchemeKind::Eplog {
            Alloc::build(&g, &state)
        } else {
            Alloc::default()
        };
        let code = new_code(sb.code, g.k, g.m)?;
        let spare = g.slots - g.stripes;
        let piece_stripes = match sb.scheme {
            SchemeKind::Md | SchemeKind::Tween => 64,
            SchemeKind::Pl => (g.log_slots / 2).clamp(1, 64),
            SchemeKind::Eplog => (spare / 2).min(g.log_slots / 2).clamp(1, 64),
        };
        let name = format!("array:{}({}+{})", sb.scheme, g.k, g.m);
        let commit_every = opts.commit_every.unwrap_or(sb.commit_every);
        let core = Core::new(
            &sb,
            code,
            devs,
            MetaInner {
                state,
                pending,
                alloc,
            },
            mv,
        );
        let array = Array {
            scheme: new_scheme(sb.scheme),
            core,
            name,
            admin: RwLock::new(()),
            locks: (0..LOCKS).map(|_| Mutex::new(())).collect(),
            intent: RwLock::new(std::collections::BTreeSet::new()),
            writes: AtomicU64::new(0),
            commit_every: AtomicU64::new(commit_every),
            rebuild_batch: AtomicU64::new(opts.rebuild_batch.max(1) as u64),
            rebuild_prefetch: AtomicBool::new(opts.rebuild_prefetch),
            piece_stripes,
            clock: opts.clock.clone(),
            last_io: Mutex::new(opts.clock.now()),
            failed_seen: AtomicU64::new(0),
            device_locks: Mutex::new(held),
        };
        array.scheme.set_clock(opts.clock.clone());
        // Off when asked (measuring what checksums cost), and (whatever is asked) when a device
        // keeps no data (`set_checksums`).
        array.set_checksums(opts.checksums);
        array.set_journal_updates(opts.journal_updates);
        lock(&array.core.journal).failed_at_open = failed_at_open;
        if sb.scheme != SchemeKind::Eplog {
            // md/pl after an unclean shutdown: the in-place writes since the last sync may have
            // reached their chunks or not, so the checksums of the dirty regions' stripes are
            // forgotten; the resync (or the next write) takes the bytes it finds there.
            let dirty = array.dirty_stripes();
            array.core.forget_crcs(&dirty);
            // Degraded updates a crash interrupted: written again whole from the journal.
            crate::scheme::md::replay_journal(&array.core)?;
        }
        if array.core.meta().state.commit_in_progress {
            // Finish the parity commit a crash interrupted (its parity writes may be torn). With
            // dirty md/pl regions, only the scheme's commit: `commit` would record the regions
            // clean before the resync below recomputed their parity.
            if array.core.meta().state.dirty.is_empty() {
                array.commit()?;
            } else {
                array.scheme.commit(&array.core)?;
            }
        }
        if !array.core.meta().state.dirty.is_empty() {
            // md/pl after an unclean shutdown: writes may have reached data but not parity.
            array.resync()?;
        }
        // Every stripe a journal entry protected is consistent and durable now (eplog: the
        // interrupted commit, which took the lost chunks from the journal, is done).
        array.core.journal_forget_recovered()?;
        Ok(array)
    }

    pub fn geometry(&self) -> &Geometry {
        &self.core.geo
    }

    pub fn scheme_kind(&self) -> SchemeKind {
        self.scheme.kind()
    }

    pub fn superblock(&self) -> Superblock {
        lock(&self.core.sb).clone()
    }

    /// Logical capacity in bytes.
    pub fn size(&self) -> u64 {
        self.core.geo.capacity()
    }

    pub fn set_commit_every(&self, n: u64) {
        self.commit_every.store(n, Relaxed);
    }

    pub fn set_parallel_io(&self, on: bool) {
        self.core.devs.parallel.store(on, Relaxed);
    }

    pub fn set_rebuild(&self, batch: usize, prefetch: bool) {
        self.rebuild_batch.store(batch.max(1) as u64, Relaxed);
        self.rebuild_prefetch.store(prefetch, Relaxed);
    }

    /// Turn [`OpenOptions::journal_updates`] on or off.
    pub fn set_journal_updates(&self, on: bool) {
        self.core.journal_updates.store(on, Relaxed);
    }

    /// Compute and verify per-chunk checksums (on by default). Off is for measuring what they
    /// cost: writes then forget their chunks' checksums (those chunks are read unverified until
    /// written again with checksums on), and reads verify nothing. They stay off, whatever `on`
    /// says, while any main or log device keeps no data ([`BlockDevice::keeps_data`]: a
    /// metadata-only simulated SSD reads back zeros, which no checksum matches).
    pub fn set_checksums(&self, on: bool) {
        if let Some(c) = self.core.devs.crcs() {
            c.set_enabled(on && self.core.devs.keeps_data());
        }
    }

    /// Whether per-chunk checksums are computed and verified now ([`Array::set_checksums`]).
    pub fn checksums(&self) -> bool {
        self.core.devs.crcs().is_some_and(|c| c.enabled())
    }

    pub fn set_trim_on_commit(&self, on: bool) {
        self.core.trim_on_commit.store(on, Relaxed);
    }

    /// Zero all counters (device meters, requests, commits).
    pub fn reset_stats(&self) {
        for m in &self.core.devs.meters {
            m.reset();
        }
        self.core.stats.reset();
        self.scheme.stripe_buffer_stats(true);
    }

    /// The devices in array order (main then log).
    pub fn devices(&self) -> Vec<Arc<dyn BlockDevice>> {
        self.core.devs.all()
    }

    pub fn failed_devices(&self) -> Vec<usize> {
        self.core.devs.failed_list()
    }

    fn admin_read(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.admin.read().unwrap_or_else(|p| p.into_inner())
    }

    fn admin_write(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.admin.write().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_stripes(&self, first: u64, last: u64) -> Vec<MutexGuard<'_, ()>> {
        let mut idx: Vec<usize> = (first..=last.min(first + LOCKS as u64))
            .map(|s| (s % LOCKS as u64) as usize)
            .collect();
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter().map(|i| lock(&self.locks[i])).collect()
    }

    fn check_range(&self, off: u64, len: u64) -> Result<()> {
        match off.checked_add(len) {
            Some(e) if e <= self.size() => Ok(()),
            _ => Err(ArrayError::Device(DeviceError::OutOfRange {
                device: self.name.clone(),
                offset: off,
                len,
                capacity: self.size(),
            })),
        }
    }

    fn touch(&self) {
        *lock(&self.last_io) = self.clock.now();
    }

    /// [`Array::touch`] with `now` already read from the system clock (one clock read per small
    /// read instead of two); a manual clock is asked as before.
    fn touch_at(&self, now: Instant) {
        let now = if self.clock.is_manual() {
            self.clock.now()
        } else {
            now
        };
        *lock(&self.last_io) = now;
    }

    /// Time since the last read or write.
    pub fn idle_for(&self) -> Duration {
        let last = *lock(&self.last_io);
        self.clock.now().saturating_duration_since(last)
    }

    /// A tween array is read and written through its log layer (`Tween`), which maps logical
    /// extents to segments; the array's own byte interface would bypass that map.
    fn refuse_tween(&self) -> Result<()> {
        if self.scheme.kind() == SchemeKind::Tween {
            return Err(cfg_err(
                "a tween array is read and written through its TWEEN layer (ecstack_array::Tween), not directly",
            ));
        }
        Ok(())
    }

    /// Read `buf.len()` bytes at logical byte `off`.
    pub fn read(&self, buf: &mut [u8], off: u64) -> Result<()> {
        self.refuse_tween()?;
        self.read_stripes(buf, off)
    }

    /// TWEEN: write one whole log segment (data stripe `seg`) and make it durable.
    pub(crate) fn write_segment(&self, seg: u64, data: &[u8]) -> Result<()> {
        debug_assert_eq!(data.len() as u64, self.core.geo.stripe_bytes());
        self.write_stripes(data, seg * self.core.geo.stripe_bytes())?;
        self.sync()
    }

    /// The byte interface over the data stripes as they are (TWEEN reads its segments with it).
    pub(crate) fn read_stripes(&self, buf: &mut [u8], off: u64) -> Result<()> {
        self.check_range(off, buf.len() as u64)?;
        let t = Instant::now();
        self.touch_at(t);
        let g = &self.core.geo;
        if let Some(r) = one_chunk_read(g, buf, off) {
            // The small-read fast path (a key-value GET): one chunk, one stripe lock, no vectors.
            let _a = self.admin_read();
            let _l = lock(&self.locks[(r.stripe % LOCKS as u64) as usize]);
            self.scheme.read(&self.core, &mut [r])?;
            self.core.stats.read(buf.len() as u64, t.elapsed());
            return self.settle_failures();
        }
        let sb = g.stripe_bytes();
        let piece = self.piece_stripes * sb;
        let mut done = 0usize;
        while done < buf.len() {
            let poff = off + done as u64;
            let plen = (piece - poff % piece).min((buf.len() - done) as u64) as usize;
            let pbuf = &mut buf[done..done + plen];
            let _a = self.admin_read();
            let _l = self.lock_stripes(poff / sb, (poff + plen as u64 - 1) / sb);
            let mut reqs = split_reads(g, pbuf, poff);
            self.scheme.read(&self.core, &mut reqs)?;
            done += plen;
        }
        self.core.stats.read(buf.len() as u64, t.elapsed());
        self.settle_failures()?;
        Ok(())
    }

    /// Write `buf` at logical byte `off`.
    pub fn write(&self, buf: &[u8], off: u64) -> Result<()> {
        self.refuse_tween()?;
        self.write_stripes(buf, off)
    }

    fn write_stripes(&self, buf: &[u8], off: u64) -> Result<()> {
        self.check_range(off, buf.len() as u64)?;
        let t = Instant::now();
        self.touch();
        let g = &self.core.geo;
        let sb = g.stripe_bytes();
        let piece = self.piece_stripes * sb;
        let mut done = 0usize;
        while done < buf.len() {
            let poff = off + done as u64;
            let plen = (piece - poff % piece).min((buf.len() - done) as u64) as usize;
            let mut tries = 0;
            loop {
                let outcome = {
                    let _a = self.admin_read();
                    let (first, last) = (poff / sb, (poff + plen as u64 - 1) / sb);
                    self.mark_dirty(first, last)?;
                    let _l = self.lock_stripes(first, last);
                    self.write_piece(&buf[done..done + plen], poff)?
                };
                match outcome {
                    WriteOutcome::Done => break,
                    WriteOutcome::NeedCommit if tries < SPACE_COMMITS_MAX => {
                        tries += 1;
                        // Concurrent writers that ran out of space together all ask; the first
                        // commit does the work, and only a commit that did work counts. Other
                        // writers may use up the freed space before this one retries, so it may
                        // take a few rounds.
                        let r = self.commit()?;
                        if r.stripes > 0 || r.seconds > 0.0 {
                            self.core.stats.space_commits.fetch_add(1, Relaxed);
                        }
                    }
                    WriteOutcome::NeedCommit => {
                        return Err(ArrayError::NoSpace(
                            "no free chunk slots or log space even after a parity commit".into(),
                        ))
                    }
                }
            }
            done += plen;
        }
        self.core.stats.write(buf.len() as u64, t.elapsed());
        self.settle_failures()?;
        let w = self.writes.fetch_add(1, Relaxed) + 1;
        let every = self.commit_every.load(Relaxed);
        if every > 0 && w.is_multiple_of(every) {
            self.commit()?;
        }
        if self.core.meta().pending.len() > MAX_PENDING {
            let _a = self.admin_read();
            self.core.persist()?;
        }
        Ok(())
    }

    /// A device failure found by I/O: flush the surviving devices and record the failure at once.
    /// In-place updates made while the array was whole (md, pl) become durable before a crash can
    /// tear them: a stripe that lost a device can no longer be resynced, and only updates made
    /// after the failure go through the journal. What is left is a crash before this flush.
    fn settle_failures(&self) -> Result<()> {
        let now = self.core.devs.failed_count() as u64;
        if now > self.failed_seen.load(Relaxed) {
            let _a = self.admin_read();
            self.core.persist()?;
        }
        self.failed_seen.store(now, Relaxed);
        Ok(())
    }

    /// Write one piece (stripes locked): complete partial chunks from their current content, then
    /// hand whole chunks to the scheme.
    fn write_piece(&self, buf: &[u8], off: u64) -> Result<WriteOutcome> {
        let g = &self.core.geo;
        let c = g.chunk;
        let mut writes: Vec<(u64, usize, usize, usize)> = Vec::new(); // stripe, pos, chunk off, buf idx
        let mut p = 0usize;
        while p < buf.len() {
            let a = off + p as u64;
            let ci = a / c;
            let co = (a % c) as usize;
            let len = ((c as usize) - co).min(buf.len() - p);
            writes.push((ci / g.k as u64, (ci % g.k as u64) as usize, co, p));
            p += len;
        }
        // Current content of partially covered chunks.
        let mut fills: Vec<(usize, Vec<u8>)> = Vec::new();
        for (i, &(_, _, co, bp)) in writes.iter().enumerate() {
            let len = ((c as usize) - co).min(buf.len() - bp);
            if len < c as usize {
                fills.push((i, vec![0u8; c as usize]));
            }
        }
        if !fills.is_empty() {
            let mut reqs: Vec<ChunkRead> = fills
                .iter_mut()
                .map(|(i, b)| ChunkRead {
                    stripe: writes[*i].0,
                    pos: writes[*i].1,
                    off: 0,
                    buf: b.as_mut_slice(),
                })
                .collect();
            self.scheme.read(&self.core, &mut reqs)?;
            for (i, b) in fills.iter_mut() {
                let (_, _, co, bp) = writes[*i];
                let len = ((c as usize) - co).min(buf.len() - bp);
                b[co..co + len].copy_from_slice(&buf[bp..bp + len]);
            }
        }
        let mut fi = fills.iter().peekable();
        let mut cws: Vec<ChunkWrite> = Vec::with_capacity(writes.len());
        for (i, &(s, pos, _, bp)) in writes.iter().enumerate() {
            let data: &[u8] = match fi.peek() {
                Some((j, b)) if *j == i => {
                    fi.next();
                    b.as_slice()
                }
                _ => &buf[bp..bp + c as usize],
            };
            cws.push(ChunkWrite {
                stripe: s,
                pos,
                data,
            });
        }
        self.scheme.write(&self.core, &cws)
    }

    /// Discard (TRIM) `[off, off + len)`: the range reads as zeros from then on, also after a reopen,
    /// a device failure or a rebuild. Whole data stripes inside the range are dropped from the
    /// metadata (durably, before any device drops data) and their chunk slots discarded on the
    /// devices, so SSDs can reclaim them; eplog stripes with updates not yet committed get a parity
    /// commit first. The rest (partly covered stripes, and eplog stripes one of whose home slots
    /// another chunk has taken meanwhile) is overwritten with zeros through the ordinary write
    /// path, skipping stripes that already read as zeros.
    pub fn discard(&self, off: u64, len: u64) -> Result<DiscardReport> {
        self.refuse_tween()?;
        self.check_range(off, len)?;
        let sb = self.core.geo.stripe_bytes();
        let end_byte = off + len;
        let (first, end) = (off.div_ceil(sb), end_byte / sb);
        let eplog = self.scheme.kind() == SchemeKind::Eplog;
        if eplog {
            // Chunks held in device buffers must reach the metadata before it is consulted (as in
            // `sync`); stripes with uncommitted updates get them committed, so they can be dropped.
            let drained = {
                let _a = self.admin_read();
                self.scheme.drain(&self.core)?
            };
            let pending = first < end && {
                let mi = self.core.meta();
                let pending = mi
                    .state
                    .changed()
                    .any(|(s, ds)| (first..end).contains(&s) && ds.pending());
                pending
            };
            if drained == WriteOutcome::NeedCommit || pending {
                self.commit()?;
            }
        }
        let mut report = DiscardReport::default();
        if first >= end {
            report.zeroed_bytes = self.write_zeros(off, len)?;
            return Ok(report);
        }
        report.zeroed_bytes += self.write_zeros(off, first * sb - off)?;
        report.zeroed_bytes += self.write_zeros(end * sb, end_byte - end * sb)?;
        let (stripes, left) = self.discard_stripes(first, end)?;
        report.stripes = stripes;
        for s in left {
            report.zeroed_bytes += self.write_zeros(s * sb, sb)?;
        }
        Ok(report)
    }

    /// Write zeros over `[off, off + len)` in pieces, skipping stripes that already read as zeros
    /// (never written, or discarded; eplog device buffers drained by the caller). Returns the bytes
    /// written.
    fn write_zeros(&self, off: u64, len: u64) -> Result<u64> {
        const PIECE_BYTES: u64 = 1 << 20;
        let sb = self.core.geo.stripe_bytes();
        let zeros = vec![0u8; len.min(PIECE_BYTES) as usize];
        let eplog = self.scheme.kind() == SchemeKind::Eplog;
        let mut written = 0u64;
        let mut a = off;
        while a < off + len {
            let s = a / sb;
            let stripe_end = ((s + 1) * sb).min(off + len);
            let blank = {
                let mi = self.core.meta();
                if eplog {
                    mi.state.data_stripe(s).is_none()
                } else {
                    !mi.state.is_written(s)
                }
            };
            if blank {
                a = stripe_end;
                continue;
            }
            while a < stripe_end {
                let l = (stripe_end - a).min(PIECE_BYTES);
                self.write(&zeros[..l as usize], a)?;
                written += l;
                a += l;
            }
        }
        Ok(written)
    }

    /// Drop the whole stripes `first..end` from the metadata and discard their chunk slots. Returns
    /// the stripes dropped, and those left for zeroing: eplog stripes with uncommitted updates (a
    /// write that raced the discard) or whose home slot another chunk now holds.
    fn discard_stripes(&self, first: u64, end: u64) -> Result<(u64, Vec<u64>)> {
        let g = &self.core.geo;
        let eplog = self.scheme.kind() == SchemeKind::Eplog;
        let mut left = Vec::new();
        let mut total = 0u64;
        let mut start = first;
        while start < end {
            let last = (start + self.piece_stripes).min(end) - 1;
            let _a = self.admin_read();
            if eplog {
                // Buffered chunks become ordinary (pending) updates, which keep their stripe.
                self.scheme.drain(&self.core)?;
            }
            let _l = self.lock_stripes(start, last);
            // (device, slot) to discard on the devices, and slots to free once durable.
            let mut drop_slots: Vec<(usize, u64)> = Vec::new();
            let mut frees: Vec<(usize, u64)> = Vec::new();
            let mut n = 0u64;
            {
                let mut mi = self.core.meta();
                for s in start..=last {
                    if eplog {
                        let Some(ds) = mi.state.data_stripe(s) else {
                            continue;
                        };
                        if ds.pending() {
                            left.push(s);
                            continue;
                        }
                        // An absent stripe owns its home slots: reclaim those its chunks moved
                        // away from, or leave the stripe alone if another chunk lives there now.
                        let moved: Vec<(usize, u64)> = (0..g.k)
                            .filter_map(|p| match ds.committed[p] {
                                Some(c) if c != s => Some((g.dev_of(s, p), c)),
                                _ => None,
                            })
                            .collect();
                        let mut got = Vec::new();
                        let all = moved.iter().all(|&(d, _)| {
                            let ok = mi.alloc.take_exact(d, s);
                            if ok {
                                got.push(d);
                            }
                            ok
                        });
                        if !all {
                            for d in got {
                                mi.alloc.put(d, s);
                            }
                            left.push(s);
                            continue;
                        }
                        frees.extend(moved.iter().copied());
                        drop_slots.extend(moved.iter().copied());
                        for p in 0..g.n {
                            let at_home = if p < g.k {
                                ds.committed[p] == Some(s)
                            } else {
                                ds.parity
                            };
                            if at_home {
                                drop_slots.push((g.dev_of(s, p), s));
                            }
                        }
                    } else {
                        if !mi.state.is_written(s) {
                            continue;
                        }
                        drop_slots.extend((0..g.n).map(|p| (g.dev_of(s, p), s)));
                    }
                    mi.record(Rec::Discard { stripe: s });
                    n += 1;
                }
            }
            if n > 0 {
                self.core.persist()?;
                let mut mi = self.core.meta();
                for (d, sl) in frees {
                    mi.alloc.put(d, sl);
                }
                drop(mi);
                for (d, sl) in drop_slots {
                    if !self.core.devs.is_failed(d) {
                        // Advisory: a device that cannot discard keeps the bytes.
                        let _ = self.core.devs.get(d).discard(g.off(sl), g.chunk);
                    }
                }
            }
            total += n;
            start = last + 1;
        }
        Ok((total, left))
    }

    /// Make every completed write durable (buffers drained, devices flushed, metadata records
    /// persisted).
    pub fn sync(&self) -> Result<()> {
        {
            let _a = self.admin_read();
            if self.scheme.drain(&self.core)? == WriteOutcome::Done {
                return self.core.persist();
            }
        }
        // The buffers need space: a parity commit frees it, drains them and persists.
        self.commit().map(|_| ())
    }

    /// eplog device buffers (§3.1): hold up to `chunks` updated chunks per device in memory so log
    /// stripes leave full width and rewrites are absorbed (0 = off, the default). Buffered writes are
    /// durable after the next flush, like any write.
    pub fn set_device_buffer(&self, chunks: usize) -> Result<()> {
        let _a = self.admin_write();
        self.scheme.set_buffer(&self.core, chunks)
    }

    /// eplog stripe buffer (§3.1, on by default with
    /// [`DEFAULT_IN_FLIGHT`](crate::scheme::DEFAULT_IN_FLIGHT) batches in flight): write requests in
    /// flight at the same time share log stripes and leave in one round of device writes; each
    /// returns once its batch is written (group commit, no write-back). `in_flight` bounds the
    /// batches being written at once (fewer: larger batches, fewer log chunks); 0 turns the buffer
    /// off (every request forms its own log stripes).
    pub fn set_stripe_buffer(&self, in_flight: usize) {
        let _a = self.admin_write();
        self.scheme.set_stripe_buffer(in_flight);
    }

    /// Parity commit (EPLOG §3.3). Also makes every completed write durable (for md that is all it
    /// does).
    pub fn commit(&self) -> Result<CommitReport> {
        let _a = self.admin_write();
        self.commit_locked()
    }

    pub(crate) fn commit_locked(&self) -> Result<CommitReport> {
        let r = self.scheme.commit(&self.core)?;
        if r.stripes > 0 || r.seconds > 0.0 {
            self.core.stats.commit(&r);
        }
        // A durability point for everything written so far, whatever the scheme did: a parity
        // commit persists its own records, but eplog's commit then drains the device buffers, and
        // a drained chunk pair that forms a new full stripe is written in place with no parity
        // commit after it (seed 8835 lost such a stripe at the next power cut). Nothing to write:
        // a device flush and no metadata record.
        self.core.persist()?;
        self.clean_locked()?;
        Ok(r)
    }

    /// md/pl write intent: before the first write into a region, make "region may be inconsistent"
    /// durable, so a crash mid-write leads to a parity resync of the region on the next open (the
    /// RAID write hole closed like Linux md's write-intent bitmap). Called with `admin_read` held.
    fn mark_dirty(&self, first: u64, last: u64) -> Result<()> {
        if self.scheme.kind() == SchemeKind::Eplog {
            return Ok(());
        }
        let regions = first / REGION_STRIPES..=last / REGION_STRIPES;
        // Hot path: every region already durable; writers share the read lock.
        {
            let durable = self.intent.read().unwrap_or_else(|p| p.into_inner());
            if regions.clone().all(|r| durable.contains(&r)) {
                return Ok(());
            }
        }
        let mut durable = self.intent.write().unwrap_or_else(|p| p.into_inner());
        if regions.clone().all(|r| durable.contains(&r)) {
            return Ok(());
        }
        {
            let mut mi = self.core.meta();
            for r in regions.clone() {
                if !mi.state.dirty.contains(&r) {
                    mi.record(Rec::Dirty { region: r });
                }
            }
        }
        self.core.persist()?;
        durable.extend(regions);
        Ok(())
    }

    /// With no write in flight (`admin_write` held) and everything flushed: every region is
    /// consistent again.
    fn clean_locked(&self) -> Result<()> {
        let mut durable = self.intent.write().unwrap_or_else(|p| p.into_inner());
        let dirty = !self.core.meta().state.dirty.is_empty();
        if dirty && self.core.devs.failed_count() == 0 {
            self.core.meta().record(Rec::Clean);
            self.core.persist()?;
            durable.clear();
        }
        Ok(())
    }

    /// After an unclean shutdown (md/pl): recompute the parity of every written stripe of the dirty
    /// regions from its data (pl: after a parity commit, which does that for logged stripes and
    /// empties the log). Skipped while devices are failed: their stripes cannot be recomputed, as
    /// with md's bitmap on a degraded array.
    fn resync(&self) -> Result<()> {
        let _a = self.admin_write();
        // A failed main device: its chunks cannot be recomputed (as with md's bitmap on a degraded
        // array; the updates made while it was failed went through the journal). Failed log
        // devices do not matter: the resync recomputes parity from the main devices alone.
        let g = &self.core.geo;
        if (0..g.n).any(|d| self.core.devs.is_failed(d))
            || self.core.meta().state.commit_in_progress
        {
            return Ok(());
        }
        if self.scheme.kind() == SchemeKind::Pl {
            self.scheme.commit(&self.core)?;
        }
        let stripes = self.dirty_stripes();
        // A chunk that cannot be read (a device that fails now, a latent sector error) fails its
        // device; the stripe is decoded from the others, like a degraded read would.
        let k = self.core.geo.k;
        let c = self.core.geo.chunk as usize;
        self.core.rewrite_parity(&stripes, &|s| {
            let mut data = vec![vec![0u8; c]; k];
            let mut reqs: Vec<ChunkRead> = data
                .iter_mut()
                .enumerate()
                .map(|(pos, buf)| ChunkRead {
                    stripe: s,
                    pos,
                    off: 0,
                    buf: buf.as_mut_slice(),
                })
                .collect();
            self.scheme.read(&self.core, &mut reqs)?;
            drop(reqs);
            Ok(data)
        })?;
        self.core
            .stats
            .resync_stripes
            .fetch_add(stripes.len() as u64, Relaxed);
        self.core.persist()?;
        self.clean_locked()
    }

    /// The written stripes of the dirty write-intent regions (md/pl), ascending.
    fn dirty_stripes(&self) -> Vec<u64> {
        let mi = self.core.meta();
        mi.state
            .dirty
            .iter()
            .flat_map(|r| r * REGION_STRIPES..((r + 1) * REGION_STRIPES).min(self.core.geo.stripes))
            .filter(|&s| mi.state.is_written(s))
            .collect()
    }

    /// Whether there are updates not yet committed to the main array's parity.
    pub fn has_pending(&self) -> bool {
        self.scheme.has_pending(&self.core)
    }

    /// Take device `i` (main 0..n, log n..n+m) out of service. A failed log device makes the array
    /// commit, so pending updates are protected by the main array's parity again.
    pub fn fail_device(&self, i: usize) -> Result<()> {
        let _a = self.admin_write();
        if i >= self.core.devs.len() {
            return Err(ArrayError::Admin(format!(
                "no device {i} (the array has {} devices: main 0..{}, log {}..{})",
                self.core.devs.len(),
                self.core.geo.n,
                self.core.geo.n,
                self.core.devs.len()
            )));
        }
        self.core.devs.mark_failed(i);
        self.core.persist()?;
        if i >= self.core.geo.n && self.scheme.has_pending(&self.core) {
            self.commit_locked()?;
        }
        Ok(())
    }

    /// Rebuild device `i` onto `replacement` (which may be the same device, wiped): parity commit
    /// first, then the lost chunks stripe by stripe in batches (EPLOG §3.4).
    pub fn rebuild_device(
        &self,
        i: usize,
        replacement: Arc<dyn BlockDevice>,
    ) -> Result<RebuildReport> {
        self.rebuild_devices(vec![(i, replacement)])
    }

    /// Rebuild several failed devices in one pass.
    pub fn rebuild_devices(
        &self,
        targets: Vec<(usize, Arc<dyn BlockDevice>)>,
    ) -> Result<RebuildReport> {
        let _a = self.admin_write();
        {
            let mut held = lock(&self.device_locks);
            for (i, d) in &targets {
                let role = format!("replacement for array device {i} ({})", d.name());
                crate::exclusive::lock_replacement(&mut held, &role, d)?;
            }
        }
        let batch = self.rebuild_batch.load(Relaxed) as usize;
        let prefetch = self.rebuild_prefetch.load(Relaxed);
        let r = crate::recovery::rebuild(
            &self.core,
            self.scheme.as_ref(),
            targets,
            batch,
            prefetch,
            &|| self.commit_locked(),
        )?;
        self.core.stats.set_rebuild(&r);
        Ok(r)
    }

    /// Scrub: read every written data stripe, check its parity against its data and repair the bad
    /// chunks that can be located (see `scrub.rs`). Runs in steps of `batch_stripes` stripes, each
    /// under the admin lock after a parity commit (so parity reflects the data); writers wait for
    /// one step at most, and the bandwidth limit sleeps between steps without the lock.
    /// `progress(done, total)` is called after every step.
    pub fn scrub(&self, opts: &ScrubOptions, progress: &dyn Fn(u64, u64)) -> Result<ScrubReport> {
        let t = Instant::now();
        let stripes = {
            let _a = self.admin_read();
            self.scheme.written_stripes(&self.core)
        };
        let total = stripes.len() as u64;
        let mut r = ScrubReport {
            repair: opts.repair,
            checksums_only: opts.checksums_only,
            ..ScrubReport::default()
        };
        let mut done = 0u64;
        // Read-ahead threads for the whole scrub (none where device I/O stays on the calling
        // thread, as in the simulator).
        let threaded = self.core.devs.parallel.load(Relaxed);
        let batch = opts.batch_stripes.max(1);
        let steps: Vec<&[u64]> = stripes.chunks(batch).collect();
        std::thread::scope(|sc| -> Result<()> {
            let mut pipe =
                crate::scrub::Pipeline::new(sc, &self.core, self.scheme.as_ref(), batch, threaded);
            for (i, step) in steps.iter().enumerate() {
                {
                    let _a = self.admin_write();
                    if self.scheme.has_pending(&self.core) {
                        self.commit_locked()?;
                        r.commits += 1;
                    }
                    // The next step's first parts are read while this one is checked (kept only
                    // if nothing changed on the devices before that step takes the lock).
                    let next = steps.get(i + 1).copied().unwrap_or(&[]);
                    pipe.step(step, next, opts, &mut r)?;
                }
                done += step.len() as u64;
                progress(done, total);
                if opts.mb_per_s_max > 0.0 {
                    let due =
                        Duration::from_secs_f64(r.bytes_read as f64 / (opts.mb_per_s_max * 1e6));
                    if let Some(wait) = due.checked_sub(t.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
            }
            Ok(())
        })?;
        self.settle_failures()?;
        r.seconds = t.elapsed().as_secs_f64();
        r.mb_per_s = if r.seconds > 0.0 {
            r.bytes_read as f64 / r.seconds / 1e6
        } else {
            0.0
        };
        Ok(r)
    }

    /// Record a new spec string for device `i` (main, log, then meta) in the superblock.
    pub fn set_device_spec(&self, i: usize, spec: &str) -> Result<()> {
        let _a = self.admin_write();
        // Lock order: the metadata volume before the superblock (a checkpoint that grows its
        // areas holds the first and takes the second).
        let meta = Arc::clone(&lock(&self.core.metavol).dev);
        let mut sb = lock(&self.core.sb);
        if i >= sb.specs.len() {
            return Err(ArrayError::Admin(format!("no device {i}")));
        }
        let old = std::mem::replace(&mut sb.specs[i], spec.to_string());
        store_superblock(&mut sb, &*meta).inspect_err(|_| sb.specs[i] = old)
    }

    /// Flush everything and write a full checkpoint (a clean shutdown point).
    pub fn close(&self) -> Result<()> {
        self.sync()?;
        let _a = self.admin_write();
        self.clean_locked()?;
        self.core.checkpoint()
    }

    /// Commit if the array has been idle for `idle` (by its clock) and has pending updates or
    /// dirty md/pl regions: what the idle committer does on each wake-up. True if it committed.
    pub fn commit_if_idle(&self, idle: Duration) -> Result<bool> {
        let dirty = !self.core.meta().state.dirty.is_empty();
        if self.idle_for() >= idle && (self.has_pending() || dirty) {
            self.core.stats.idle_commits.fetch_add(1, Relaxed);
            self.commit()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Commit whenever the array has been idle for `idle` (EPLOG §3.3 trigger (i)). The thread ends
    /// when the array is dropped.
    pub fn spawn_idle_committer(self: &Arc<Self>, idle: Duration) -> std::thread::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        std::thread::spawn(move || loop {
            std::thread::sleep(
                idle.min(Duration::from_millis(500))
                    .max(Duration::from_millis(10)),
            );
            match weak.upgrade() {
                Some(a) => {
                    let _ = a.commit_if_idle(idle);
                }
                None => return,
            }
        })
    }

    pub(crate) fn total_stats(&self) -> DeviceStats {
        let s = &self.core.stats;
        DeviceStats {
            read_ops: s.reads.load(Relaxed),
            read_bytes: s.read_bytes.load(Relaxed),
            write_ops: s.writes.load(Relaxed),
            write_bytes: s.write_bytes.load(Relaxed),
            ..DeviceStats::default()
        }
    }
}

/// The chunk read of a logical read that lies inside one chunk (`None` for an empty read or one
/// that crosses a chunk boundary: [`split_reads`]).
fn one_chunk_read<'a>(g: &Geometry, buf: &'a mut [u8], off: u64) -> Option<ChunkRead<'a>> {
    let ci = off / g.chunk;
    let co = (off % g.chunk) as usize;
    if buf.is_empty() || co + buf.len() > g.chunk as usize {
        return None;
    }
    Some(ChunkRead {
        stripe: ci / g.k as u64,
        pos: (ci % g.k as u64) as usize,
        off: co,
        buf,
    })
}

/// Split a logical read into chunk reads.
fn split_reads<'a>(g: &Geometry, mut buf: &'a mut [u8], off: u64) -> Vec<ChunkRead<'a>> {
    let c = g.chunk;
    let mut v = Vec::new();
    let mut a = off;
    while !buf.is_empty() {
        let ci = a / c;
        let co = (a % c) as usize;
        let len = ((c as usize) - co).min(buf.len());
        let (head, tail) = std::mem::take(&mut buf).split_at_mut(len);
        v.push(ChunkRead {
            stripe: ci / g.k as u64,
            pos: (ci % g.k as u64) as usize,
            off: co,
            buf: head,
        });
        buf = tail;
        a += len as u64;
    }
    v
}

fn to_dev_err(name: &str, e: ArrayError) -> DeviceError {
    match e {
        ArrayError::Device(d @ DeviceError::OutOfRange { .. }) => d,
        other => DeviceError::io(name, std::io::Error::other(other.to_string())),
    }
}

impl BlockDevice for Array {
    fn name(&self) -> &str {
        &self.name
    }
    fn capacity(&self) -> u64 {
        self.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> ecstack_device::Result<()> {
        self.read(buf, offset)
            .map_err(|e| to_dev_err(&self.name, e))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> ecstack_device::Result<()> {
        self.write(buf, offset)
            .map_err(|e| to_dev_err(&self.name, e))
    }
    fn flush(&self) -> ecstack_device::Result<()> {
        self.sync().map_err(|e| to_dev_err(&self.name, e))
    }
    fn discard(&self, offset: u64, len: u64) -> ecstack_device::Result<()> {
        Array::discard(self, offset, len)
            .map(|_| ())
            .map_err(|e| to_dev_err(&self.name, e))
    }
    fn stats(&self) -> DeviceStats {
        self.total_stats()
    }
    /// Only if every main and log device does.
    fn keeps_data(&self) -> bool {
        self.core.devs.keeps_data()
    }
}
