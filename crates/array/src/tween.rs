//! TWEEN (`../shared/seeds/codfs-tween-thesis.txt` ch. 6): a log-structured layer over a `tween`
//! array. Host writes go through the hotness module (`tween/hotness.rs`) into one NVRAM buffer per
//! hotness group; a full buffer leaves as one full-stripe write to a free log segment (a data
//! stripe); writes of a stripe or more go to a segment directly; the GC module (`tween/gc.rs`)
//! moves the live extents of the segment with the most stale data back through the hotness module
//! into NVRAM. All TWEEN metadata lives in the NVRAM region (`tween/nvram.rs`). Design, layout and
//! write ordering: `docs/tween.md`.

mod gc;
mod hotness;
mod nvram;

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use ecstack_device::{AlignedBuf, BlockDevice, DeviceError, DeviceStats};

use crate::array::{Array, ArrayDevices, OpenOptions};
use crate::format::ArrayConfig;
use crate::{ArrayError, Result, SchemeKind};

pub use gc::GcMode;
pub use nvram::{NvramImage, NvramSpec};

use gc::SegmentUse;
use hotness::{update_hotness, HotnessGroups};
use nvram::{BufferEntry, Header, Layout, MapEntry, Region, ENTRY_BYTES, LOC_NVRAM};

/// TWEEN's parameters (the stripe size is the array's: k · chunk size).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TweenConfig {
    /// Hotness groups N (= NVRAM buffers).
    pub groups: usize,
    /// Logical extent: the unit of hotness and of the map (divides the stripe).
    pub extent_bytes: u32,
    /// Smoothing factor α of the hotness EWMA.
    pub alpha: f64,
    /// Aging factor β of the sequential k-means.
    pub beta: f64,
    pub gc_mode: GcMode,
    /// Collect while fewer segments are free (at least N + 2, below the spare segments; default
    /// N + 3 when the spare allows, see `gc.rs`).
    pub gc_threshold: Option<u64>,
    /// Fraction of the segments kept out of the logical capacity (at least N + 3 segments).
    pub over_provisioning: f64,
    /// Recorded in the NVRAM header; since version 2 nothing random is drawn from it (the initial
    /// centers are the first hotness values, `tween/hotness.rs`).
    pub seed: u64,
}

impl Default for TweenConfig {
    fn default() -> Self {
        TweenConfig {
            groups: 4,
            extent_bytes: 4096,
            alpha: 0.5,
            beta: 0.1,
            gc_mode: GcMode::Active,
            gc_threshold: None,
            over_provisioning: 0.1,
            seed: 1,
        }
    }
}

impl TweenConfig {
    /// The fewest log segments whose logical capacity holds `data_segments` segments' worth of
    /// extents under this configuration (its spare included).
    pub fn segments_for(&self, data_segments: u64) -> u64 {
        // Small counts keep more spare (N + 3 at least) than they have segments: at least one
        // segment beyond the spare, and no subtraction below zero.
        let mut s = data_segments + 1;
        loop {
            let spare = gc::spare_segments(s, self.groups, self.over_provisioning);
            if s > spare && s - spare >= data_segments {
                break;
            }
            s += 1;
        }
        s
    }
}

/// Counters of the log layer, persisted in NVRAM with every request (a reopen continues them).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct TweenStats {
    pub host_write_bytes: u64,
    /// Extents appended to NVRAM buffers by host writes and by GC.
    pub logged_extents: u64,
    pub gc_extents: u64,
    /// Full-stripe writes from NVRAM buffers and direct full-stripe writes.
    pub flushes: u64,
    pub direct_stripes: u64,
    /// Segments collected.
    pub gc_segments: u64,
    /// NVRAM persist calls (msync).
    pub nvram_persists: u64,
    /// Reads of flushed extents verified by their map entry's CRC32C that had to fall back to the
    /// array's checked whole-chunk read (a device error or a checksum mismatch on the direct read).
    pub extent_crc_fallbacks: u64,
}

impl TweenStats {
    fn fields(&self, host_clock: u64) -> [u64; nvram::STATS_FIELDS] {
        [
            self.host_write_bytes,
            self.logged_extents,
            self.gc_extents,
            self.flushes,
            self.direct_stripes,
            self.gc_segments,
            self.nvram_persists,
            self.extent_crc_fallbacks,
            host_clock,
        ]
    }
    fn from_fields(v: &[u64; nvram::STATS_FIELDS]) -> (TweenStats, u64) {
        (
            TweenStats {
                host_write_bytes: v[0],
                logged_extents: v[1],
                gc_extents: v[2],
                flushes: v[3],
                direct_stripes: v[4],
                gc_segments: v[5],
                nvram_persists: v[6],
                extent_crc_fallbacks: v[7],
            },
            v[8],
        )
    }
}

fn cfg_err(s: impl Into<String>) -> ArrayError {
    ArrayError::Config(s.into())
}

/// TWEEN's state, all of it mirrored in the NVRAM region.
struct State {
    nv: Region,
    lay: Layout,
    hdr: Header,
    map: Vec<MapEntry>,
    fill: Vec<u64>,
    entries: Vec<Vec<BufferEntry>>,
    live: Vec<u32>,
    seg_group: Vec<u16>,
    groups: HotnessGroups,
    /// Write clock: ticks for every extent write (host or GC); orders copies (`seq`).
    clock: u64,
    /// Host-write clock: ticks for every extent the host writes; the time t of the hotness
    /// formula (t̂ is on it). GC moves do not make time pass.
    host_clock: u64,
    stats: TweenStats,
    in_gc: bool,
    /// Appended to buffers but not yet recorded in the map (steps 2–3 of the write ordering).
    pending: Vec<Pending>,
    last_io: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    extent: u64,
    group: usize,
    slot: u64,
    entry: MapEntry,
}

/// The TWEEN block device over a `tween` array.
pub struct Tween {
    array: Array,
    st: Mutex<State>,
    name: String,
}

impl std::fmt::Debug for Tween {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tween({})", self.name)
    }
}

/// Offsets of `ENTRY_BYTES` pieces covering `[at, at + len)` (for `persist_entries`).
fn ranges(at: u64, len: u64) -> Vec<u64> {
    (0..len.div_ceil(ENTRY_BYTES as u64))
        .map(|i| at + i * ENTRY_BYTES as u64)
        .collect()
}

fn nv_loc(g: usize, slot: u64) -> u64 {
    LOC_NVRAM | (g as u64) << 32 | slot
}

enum Loc {
    Zero,
    Nvram(usize, u64),
    Segment(u64, u64),
}

impl State {
    /// The buffered extent in `(g, slot)` against the data CRC32C of its buffer entry (written
    /// with it, checked on open): a mismatch is an error, never bytes returned or flushed.
    fn check_slot(&self, g: usize, slot: u64) -> Result<()> {
        let at = self.lay.buffer_data_at(g, slot) as usize;
        let data = &self.nv.bytes()[at..at + self.ext() as usize];
        let want = self.entries[g][slot as usize].data_crc;
        if crc32c::crc32c(data) != want {
            return Err(ArrayError::DataLoss(format!(
                "nvram: buffer {g} slot {slot}: data checksum mismatch"
            )));
        }
        Ok(())
    }

    fn slots(&self) -> u64 {
        self.lay.slots
    }
    fn ext(&self) -> u64 {
        self.lay.extent_bytes
    }
    fn dev_loc(&self, seg: u64, slot: u64) -> u64 {
        1 + seg * self.slots() + slot
    }
    fn loc(&self, l: u64) -> Loc {
        if l == 0 {
            Loc::Zero
        } else if l & LOC_NVRAM != 0 {
            Loc::Nvram(((l >> 32) & 0xffff) as usize, l & 0xffff_ffff)
        } else {
            Loc::Segment((l - 1) / self.slots(), (l - 1) % self.slots())
        }
    }

    fn persist(&mut self, off: u64, len: u64) -> Result<()> {
        self.stats.nvram_persists += 1;
        self.nv.persist(off, len)
    }

    /// Persist a set of NVRAM offsets (each `ENTRY_BYTES` or less long) in coalesced ranges.
    fn persist_entries(&mut self, mut offs: Vec<u64>) -> Result<()> {
        offs.sort_unstable();
        let mut i = 0;
        while i < offs.len() {
            let start = offs[i];
            let mut end = start + ENTRY_BYTES as u64;
            while i + 1 < offs.len() && offs[i + 1] <= end + (64 << 10) {
                i += 1;
                end = offs[i] + ENTRY_BYTES as u64;
            }
            self.persist(start, end - start)?;
            i += 1;
        }
        Ok(())
    }

    fn put_map(&mut self, e: u64, m: MapEntry) -> u64 {
        let at = self.lay.map_at(e);
        self.nv.bytes_mut()[at as usize..at as usize + ENTRY_BYTES].copy_from_slice(&m.encode());
        self.map[e as usize] = m;
        at
    }

    /// Write the counters and the host clock to their NVRAM record; the offsets to persist.
    fn stage_stats(&mut self) -> Vec<u64> {
        let rec = nvram::encode_stats(&self.stats.fields(self.host_clock));
        let at = nvram::STATS_AT as usize;
        self.nv.bytes_mut()[at..at + rec.len()].copy_from_slice(&rec);
        ranges(at as u64, rec.len() as u64)
    }

    fn put_u64(&mut self, at: u64, v: u64) {
        self.nv.bytes_mut()[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
    }

    fn put_usage(&mut self, seg: u64) -> u64 {
        let v = self.live[seg as usize] as u64 | (self.seg_group[seg as usize] as u64) << 32;
        let at = self.lay.usage_at(seg);
        self.put_u64(at, v);
        at
    }

    fn free_segments(&self) -> u64 {
        self.live.iter().filter(|&&l| l == 0).count() as u64
    }

    fn segment_uses(&self) -> Vec<SegmentUse> {
        let slots = self.slots() as u32;
        self.live
            .iter()
            .zip(&self.seg_group)
            .map(|(&live, &g)| SegmentUse {
                live,
                written: slots,
                hotness: self.groups.hotness_of(g as usize),
            })
            .collect()
    }

    /// Debug builds: the live counts follow from the map.
    fn check_live(&self, what: &str) {
        if !cfg!(debug_assertions) {
            return;
        }
        let mut live = vec![0u32; self.live.len()];
        for m in &self.map {
            if let Loc::Segment(seg, _) = self.loc(m.loc) {
                live[seg as usize] += 1;
            }
        }
        assert_eq!(live, self.live, "{what}: live counts disagree with the map");
    }

    /// Account for extent `e` leaving its current location.
    fn release(&mut self, old: u64) -> Option<u64> {
        if let Loc::Segment(seg, _) = self.loc(old) {
            let l = &mut self.live[seg as usize];
            assert!(*l > 0, "segment {seg}: live count underflow");
            *l -= 1;
            return Some(seg);
        }
        None
    }
}

impl Tween {
    /// Create a `tween` array on `devices` (`cfg.scheme` must be `SchemeKind::Tween`) and its NVRAM
    /// region.
    pub fn create(
        cfg: &ArrayConfig,
        devices: ArrayDevices,
        tcfg: &TweenConfig,
        nvram: &NvramSpec,
    ) -> Result<Tween> {
        Self::create_with(cfg, devices, tcfg, nvram, &OpenOptions::default())
    }

    /// [`Tween::create`] with open options (`force` to overwrite devices that hold something).
    pub fn create_with(
        cfg: &ArrayConfig,
        devices: ArrayDevices,
        tcfg: &TweenConfig,
        nvram: &NvramSpec,
        opts: &OpenOptions,
    ) -> Result<Tween> {
        if cfg.scheme != SchemeKind::Tween {
            return Err(cfg_err(format!(
                "Tween::create needs scheme tween, got {}",
                cfg.scheme
            )));
        }
        if !(tcfg.over_provisioning.is_finite() && (0.0..0.9).contains(&tcfg.over_provisioning)) {
            return Err(cfg_err(format!(
                "over-provisioning {} must lie in [0, 0.9)",
                tcfg.over_provisioning
            )));
        }
        let stripe = cfg.k as u64 * cfg.chunk_size as u64;
        let ext = tcfg.extent_bytes as u64;
        if ext == 0 || !stripe.is_multiple_of(ext) || !ext.is_multiple_of(512) {
            return Err(cfg_err(format!(
                "extent size {ext} must be a multiple of 512 dividing the stripe size {stripe}"
            )));
        }
        let unit = |x: f64| x > 0.0 && x <= 1.0;
        if !unit(tcfg.alpha) || !unit(tcfg.beta) {
            return Err(cfg_err(format!(
                "alpha {} and beta {} must lie in (0, 1]",
                tcfg.alpha, tcfg.beta
            )));
        }
        if tcfg.groups == 0 || tcfg.groups > 64 {
            return Err(cfg_err(format!(
                "{} hotness groups: need 1 to 64",
                tcfg.groups
            )));
        }
        let sb = Array::plan(cfg, &devices)?;
        let segments = sb.geometry.stripes;
        let spare = gc::spare_segments(segments, tcfg.groups, tcfg.over_provisioning);
        if segments <= spare {
            return Err(cfg_err(format!(
                "{segments} segments of {stripe} bytes: TWEEN keeps {spare} spare for GC and {} buffers; use larger devices or a smaller stripe",
                tcfg.groups
            )));
        }
        let floor = gc::threshold_floor(tcfg.groups);
        let threshold = tcfg
            .gc_threshold
            .unwrap_or(gc::default_threshold(tcfg.groups, spare));
        if threshold < floor || threshold >= spare {
            return Err(cfg_err(format!(
                "GC threshold {threshold} free segments must lie in [{floor}, {spare})"
            )));
        }
        let array = Array::create_with(cfg, devices, opts)?;
        let hdr = Header {
            uuid: array.superblock().uuid,
            stripe_bytes: stripe,
            extent_bytes: ext,
            groups: tcfg.groups as u32,
            segments,
            extents: (segments - spare) * (stripe / ext),
            alpha: tcfg.alpha,
            beta: tcfg.beta,
            gc_mode: tcfg.gc_mode.id(),
            gc_threshold: threshold,
            seed: tcfg.seed,
        };
        let lay = Layout::new(&hdr)?;
        let mut nv = Region::open(nvram, lay.end, true)?;
        if nv.len() < lay.end {
            return Err(cfg_err(format!(
                "NVRAM region {} holds {} bytes, TWEEN needs {}",
                nv.describe(),
                nv.len(),
                lay.end
            )));
        }
        {
            let b = nv.bytes_mut();
            b[..lay.end as usize].fill(0);
            hdr.encode(&mut b[..4096]);
            let c = nvram::encode_centers(&HotnessGroups::new(tcfg.groups, tcfg.beta).centers);
            b[lay.centers as usize..lay.centers as usize + c.len()].copy_from_slice(&c);
        }
        nv.persist(0, lay.end)?;
        Tween::assemble(array, nv)
    }

    /// Open a `tween` array and its NVRAM region; writes a crash left in the buffers are recovered
    /// (`docs/tween.md`, write ordering).
    pub fn open(devices: ArrayDevices, nvram: &NvramSpec) -> Result<Tween> {
        Self::open_with(devices, nvram, &OpenOptions::default())
    }

    pub fn open_with(
        devices: ArrayDevices,
        nvram: &NvramSpec,
        opts: &OpenOptions,
    ) -> Result<Tween> {
        Tween::from_array(Array::open_with(devices, opts)?, nvram)
    }

    /// The log layer over an already opened `tween` array (e.g. one `Array::open_recorded` found
    /// from its metadata volume) and its NVRAM region.
    pub fn from_array(array: Array, nvram: &NvramSpec) -> Result<Tween> {
        if array.scheme_kind() != SchemeKind::Tween {
            return Err(cfg_err(format!(
                "the array's scheme is {}, not tween",
                array.scheme_kind()
            )));
        }
        let nv = Region::open(nvram, 0, false)?;
        Tween::assemble(array, nv)
    }

    fn assemble(array: Array, nv: Region) -> Result<Tween> {
        let st = load(&array, nv)?;
        let name = format!("tween:{}", st.nv.describe());
        let full: Vec<usize> = (0..st.lay.groups)
            .filter(|&g| st.fill[g] == st.slots())
            .collect();
        let t = Tween {
            array,
            st: Mutex::new(st),
            name,
        };
        {
            let mut st = t.lock();
            for g in full {
                t.flush(&mut st, g)?;
            }
        }
        Ok(t)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The array under the log layer (status, device failure, rebuild).
    pub fn array(&self) -> &Array {
        &self.array
    }

    /// Logical capacity in bytes.
    pub fn size(&self) -> u64 {
        let st = self.lock();
        st.hdr.extents * st.ext()
    }

    pub fn stats(&self) -> TweenStats {
        self.lock().stats
    }

    /// Free log segments now.
    pub fn free_segments(&self) -> u64 {
        self.lock().free_segments()
    }

    pub fn gc_mode(&self) -> GcMode {
        GcMode::from_id(self.lock().hdr.gc_mode).unwrap_or(GcMode::Active)
    }

    /// Current cluster centers of the hotness groups.
    pub fn centers(&self) -> Vec<f64> {
        self.lock().groups.centers.clone()
    }

    fn check_range(&self, st: &State, off: u64, len: u64) -> Result<()> {
        let cap = st.hdr.extents * st.ext();
        match off.checked_add(len) {
            Some(e) if e <= cap => Ok(()),
            _ => Err(ArrayError::Device(DeviceError::OutOfRange {
                device: self.name.clone(),
                offset: off,
                len,
                capacity: cap,
            })),
        }
    }

    /// Read `buf.len()` bytes at logical byte `off`.
    pub fn read(&self, buf: &mut [u8], off: u64) -> Result<()> {
        let mut st = self.lock();
        self.check_range(&st, off, buf.len() as u64)?;
        st.last_io = Instant::now();
        self.read_locked(&mut st, buf, off)
    }

    fn read_locked(&self, st: &mut State, buf: &mut [u8], off: u64) -> Result<()> {
        let ext = st.ext();
        let mut done = 0usize;
        while done < buf.len() {
            let a = off + done as u64;
            let e = a / ext;
            let inner = a % ext;
            let mut len = ((ext - inner) as usize).min(buf.len() - done);
            match st.loc(st.map[e as usize].loc) {
                Loc::Zero => buf[done..done + len].fill(0),
                Loc::Nvram(g, slot) => {
                    st.check_slot(g, slot)?;
                    let at = (st.lay.buffer_data_at(g, slot) + inner) as usize;
                    buf[done..done + len].copy_from_slice(&st.nv.bytes()[at..at + len]);
                }
                Loc::Segment(seg, slot) => {
                    // Extend over the following extents stored right after this one.
                    let mut next = e + 1;
                    let mut s2 = slot + 1;
                    while done + len < buf.len() && s2 < st.slots() {
                        match st.loc(st.map[next as usize].loc) {
                            Loc::Segment(sg, sl) if sg == seg && sl == s2 => {
                                len = (len + ext as usize).min(buf.len() - done);
                                next += 1;
                                s2 += 1;
                            }
                            _ => break,
                        }
                    }
                    // Whole extents, each checked against its map entry's CRC32C.
                    let crcs: Vec<u32> = (e..next).map(|x| st.map[x as usize].data_crc).collect();
                    let mut whole = vec![0u8; crcs.len() * ext as usize];
                    self.read_segment_extents(st, seg, slot, &crcs, &mut whole)?;
                    buf[done..done + len]
                        .copy_from_slice(&whole[inner as usize..inner as usize + len]);
                }
            }
            done += len;
        }
        Ok(())
    }

    /// Whole extents `slot..` of segment `seg` into `buf`, each checked against its map entry's
    /// data CRC32C (`crcs`). First straight from the devices, only the bytes asked for (the array's
    /// own read would read and check every whole chunk touched); on a device error or a mismatch,
    /// through the array's checked read (whole chunks, a bad chunk decoded from the stripe and
    /// repaired), checked again: a mismatch then is an error, never bytes returned. On devices that
    /// keep no data (metadata-only simulated SSDs) there is nothing to check and the array reads.
    fn read_segment_extents(
        &self,
        st: &mut State,
        seg: u64,
        slot: u64,
        crcs: &[u32],
        buf: &mut [u8],
    ) -> Result<()> {
        let ext = st.ext() as usize;
        debug_assert_eq!(buf.len(), crcs.len() * ext);
        let at = seg * st.hdr.stripe_bytes + slot * ext as u64;
        if !self.array.core.devs.keeps_data() {
            return self.array.read_stripes(buf, at);
        }
        let bad = |b: &[u8]| {
            b.chunks_exact(ext)
                .zip(crcs)
                .position(|(d, &c)| crc32c::crc32c(d) != c)
        };
        if self.read_direct(seg, slot * ext as u64, buf) && bad(buf).is_none() {
            return Ok(());
        }
        st.stats.extent_crc_fallbacks += 1;
        self.array.read_stripes(buf, at)?;
        if let Some(i) = bad(buf) {
            return Err(ArrayError::DataLoss(format!(
                "tween: segment {seg} slot {}: extent checksum mismatch",
                slot + i as u64
            )));
        }
        Ok(())
    }

    /// Bytes `[from, from + buf.len())` of segment `seg`'s data straight from the devices holding
    /// them (md's layout: data chunk `pos` of stripe `seg` at its home slot). False when a device
    /// is failed, a chunk is known bad or a read errs: the caller then reads through the array.
    fn read_direct(&self, seg: u64, from: u64, buf: &mut [u8]) -> bool {
        let core = &self.array.core;
        let g = &core.geo;
        let mut done = 0usize;
        while done < buf.len() {
            let b = from + done as u64;
            let pos = (b / g.chunk) as usize;
            let inner = b % g.chunk;
            let len = ((g.chunk - inner) as usize).min(buf.len() - done);
            let d = g.dev_of(seg, pos);
            if !core.devs.usable(d, seg) {
                return false;
            }
            let off = g.off(seg) + inner;
            let mut piece = AlignedBuf::new(len);
            if core.devs.get(d).read_at(piece.as_mut_slice(), off).is_err() {
                return false;
            }
            core.devs.meters[d].record(false, off, len as u64);
            buf[done..done + len].copy_from_slice(piece.as_slice());
            done += len;
        }
        true
    }

    /// Write `buf` at logical byte `off`; acknowledged once persistent in NVRAM (or, for whole
    /// stripes written directly, on the devices).
    pub fn write(&self, buf: &[u8], off: u64) -> Result<()> {
        let mut st = self.lock();
        self.check_range(&st, off, buf.len() as u64)?;
        st.last_io = Instant::now();
        st.stats.host_write_bytes += buf.len() as u64;
        let ext = st.ext();
        let slots = st.slots();
        let first = off / ext;
        let end = (off + buf.len() as u64).div_ceil(ext);
        // Whole extents covered: [a, b).
        let a = off.div_ceil(ext);
        let b = (off + buf.len() as u64) / ext;
        let mut items: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut e = first;
        while e < end {
            if e >= a && e + slots <= b {
                let from = (e * ext - off) as usize;
                let data = &buf[from..from + (slots * ext) as usize];
                self.direct(&mut st, e, data)?;
                e += slots;
                continue;
            }
            let lo = (e * ext).max(off);
            let hi = ((e + 1) * ext).min(off + buf.len() as u64);
            let mut data = vec![0u8; ext as usize];
            if hi - lo < ext {
                self.read_locked(&mut st, &mut data, e * ext)?;
            }
            data[(lo - e * ext) as usize..(hi - e * ext) as usize]
                .copy_from_slice(&buf[(lo - off) as usize..(hi - off) as usize]);
            items.push((e, data));
            e += 1;
        }
        self.append(&mut st, &items, true)
    }

    /// Append extents to the buffers of their hotness groups, recording them as the write ordering
    /// says, flushing buffers that fill up. Every extent goes through the hotness module, which
    /// updates its hotness at the current host time and classifies it (moving a center, §6.2.2).
    /// `host`: a host write (t̂ becomes now); else a GC move, whose hotness is re-assessed at now
    /// with t̂ unchanged (the extent was not modified): live data that has gone cold since its last
    /// write cools (by (1 − α) per move) and joins a colder group — the seed's "iterative hotness
    /// grouping". (Version 1 classified GC moves by the hotness of their last write, without
    /// re-assessing it, so once-hot data went back into the hot groups.)
    fn append(&self, st: &mut State, items: &[(u64, Vec<u8>)], host: bool) -> Result<()> {
        for (e, data) in items {
            st.clock += 1;
            let t = st.clock;
            if host {
                st.host_clock += 1;
            }
            let now = st.host_clock;
            let m = st.map[*e as usize];
            let hot = update_hotness(st.hdr.alpha, m.hot as f64, m.t_hat, now);
            let t_hat = if host { now } else { m.t_hat };
            let g = st.groups.classify(hot);
            let mut slot = st.fill[g] + st.pending.iter().filter(|p| p.group == g).count() as u64;
            if slot == st.slots() {
                // A buffer found full: GC appending while its flush makes room.
                self.commit_pending(st)?;
                self.flush(st, g)?;
                slot = st.fill[g];
            }
            assert!(slot < st.slots(), "buffer {g} overfilled");
            let dat = st.lay.buffer_data_at(g, slot) as usize;
            let data_crc = crc32c::crc32c(data);
            let ent = BufferEntry {
                extent: *e,
                seq: t,
                data_crc,
                host,
            };
            let eat = st.lay.buffer_entry_at(g, slot) as usize;
            {
                let b = st.nv.bytes_mut();
                b[dat..dat + data.len()].copy_from_slice(data);
                b[eat..eat + ENTRY_BYTES].copy_from_slice(&ent.encode());
            }
            st.entries[g][slot as usize] = ent;
            st.pending.push(Pending {
                extent: *e,
                group: g,
                slot,
                entry: MapEntry {
                    loc: nv_loc(g, slot),
                    seq: t,
                    t_hat,
                    hot: hot as f32,
                    data_crc,
                },
            });
            if host {
                st.stats.logged_extents += 1;
            } else {
                st.stats.gc_extents += 1;
            }
            if slot + 1 == st.slots() {
                self.commit_pending(st)?;
                self.flush(st, g)?;
            }
        }
        self.commit_pending(st)
    }

    /// Steps 1–3 of the write ordering for the pending appends.
    fn commit_pending(&self, st: &mut State) -> Result<()> {
        if st.pending.is_empty() {
            return Ok(());
        }
        let pend = std::mem::take(&mut st.pending);
        let ext = st.ext();
        // 1. Data and buffer entries.
        let mut groups: Vec<usize> = pend.iter().map(|p| p.group).collect();
        groups.sort_unstable();
        groups.dedup();
        for &g in &groups {
            let (lo, hi) = pend
                .iter()
                .filter(|p| p.group == g)
                .fold((u64::MAX, 0), |(lo, hi), p| {
                    (lo.min(p.slot), hi.max(p.slot))
                });
            let d = st.lay.buffer_data_at(g, lo);
            st.persist(d, (hi - lo + 1) * ext)?;
            let en = st.lay.buffer_entry_at(g, lo);
            st.persist(en, (hi - lo + 1) * ENTRY_BYTES as u64)?;
        }
        // 2. Fill counts.
        for &g in &groups {
            let n = pend.iter().filter(|p| p.group == g).count() as u64;
            st.fill[g] += n;
            let at = st.lay.fill_at(g);
            let v = st.fill[g];
            st.put_u64(at, v);
            st.persist(at, 8)?;
        }
        // 3. Map entries (and the usage cache of the segments they leave), then the centers.
        let mut offs = Vec::with_capacity(pend.len() * 2);
        for p in &pend {
            let old = st.map[p.extent as usize].loc;
            if let Some(seg) = st.release(old) {
                offs.push(st.put_usage(seg));
            }
            offs.push(st.put_map(p.extent, p.entry));
        }
        let c = nvram::encode_centers(&st.groups.centers);
        let at = st.lay.centers as usize;
        st.nv.bytes_mut()[at..at + c.len()].copy_from_slice(&c);
        offs.extend(ranges(at as u64, c.len() as u64));
        offs.extend(st.stage_stats());
        st.persist_entries(offs)?;
        st.check_live("commit");
        let _ = ext;
        Ok(())
    }

    /// Make room before a segment is taken: the active rule (or the floor, in periodic mode or
    /// inside GC's own flushes).
    fn ensure_free(&self, st: &mut State) -> Result<()> {
        if !st.in_gc {
            let floor = gc::threshold_floor(st.lay.groups);
            let want = match GcMode::from_id(st.hdr.gc_mode) {
                Some(GcMode::Periodic) => floor,
                _ => st.hdr.gc_threshold,
            };
            let mut rounds = st.hdr.segments;
            while st.free_segments() < want && rounds > 0 {
                if !self.collect_one(st)? {
                    break;
                }
                rounds -= 1;
            }
        }
        if st.free_segments() == 0 {
            return Err(ArrayError::NoSpace(
                "TWEEN has no free log segment and nothing to collect".into(),
            ));
        }
        Ok(())
    }

    fn free_segment(&self, st: &State) -> Result<u64> {
        match st.live.iter().position(|&l| l == 0) {
            Some(s) => Ok(s as u64),
            None => Err(ArrayError::NoSpace("TWEEN has no free log segment".into())),
        }
    }

    /// Write buffer `g` (full) as one full-stripe write, then move its live entries to the segment.
    /// The GC that makes room first may append to this very buffer and flush it itself.
    fn flush(&self, st: &mut State, g: usize) -> Result<()> {
        assert!(st.pending.is_empty() && st.fill[g] == st.slots());
        self.ensure_free(st)?;
        if st.fill[g] < st.slots() {
            return Ok(());
        }
        let seg = self.free_segment(st)?;
        let (a, len) = (
            st.lay.buffer_data_at(g, 0) as usize,
            st.hdr.stripe_bytes as usize,
        );
        // Every extent still live in this buffer is checked before fresh parity is computed over
        // it: a flip in NVRAM must not become a consistent, wrong stripe.
        for slot in 0..st.slots() {
            let ent = st.entries[g][slot as usize];
            let m = st.map[ent.extent as usize];
            if m.loc == nv_loc(g, slot) && m.seq == ent.seq {
                st.check_slot(g, slot)?;
            }
        }
        let data = st.nv.bytes()[a..a + len].to_vec();
        self.array.write_segment(seg, &data)?;
        let mut offs = Vec::new();
        for slot in 0..st.slots() {
            let ent = st.entries[g][slot as usize];
            let m = st.map[ent.extent as usize];
            if m.loc == nv_loc(g, slot) && m.seq == ent.seq {
                debug_assert_eq!(m.data_crc, ent.data_crc, "extent {}", ent.extent);
                let loc = st.dev_loc(seg, slot);
                offs.push(st.put_map(ent.extent, MapEntry { loc, ..m }));
                st.live[seg as usize] += 1;
            }
        }
        st.seg_group[seg as usize] = g as u16;
        offs.push(st.put_usage(seg));
        st.stats.flushes += 1;
        offs.extend(st.stage_stats());
        st.persist_entries(offs)?;
        st.fill[g] = 0;
        let at = st.lay.fill_at(g);
        st.put_u64(at, 0);
        st.persist(at, 8)?;
        st.check_live("flush");
        Ok(())
    }

    /// A write of whole extents `e..e + slots` straight to a free segment (§6.2.2).
    fn direct(&self, st: &mut State, e: u64, data: &[u8]) -> Result<()> {
        self.commit_pending(st)?;
        self.ensure_free(st)?;
        let seg = self.free_segment(st)?;
        self.array.write_segment(seg, data)?;
        let mut offs = Vec::new();
        let ext = st.ext() as usize;
        for slot in 0..st.slots() {
            st.clock += 1;
            st.host_clock += 1;
            let (t, now) = (st.clock, st.host_clock);
            let x = e + slot;
            let m = st.map[x as usize];
            let hot = update_hotness(st.hdr.alpha, m.hot as f64, m.t_hat, now) as f32;
            let data_crc = crc32c::crc32c(&data[slot as usize * ext..(slot as usize + 1) * ext]);
            if let Some(s) = st.release(m.loc) {
                offs.push(st.put_usage(s));
            }
            let loc = st.dev_loc(seg, slot);
            offs.push(st.put_map(
                x,
                MapEntry {
                    loc,
                    seq: t,
                    t_hat: now,
                    hot,
                    data_crc,
                },
            ));
            st.live[seg as usize] += 1;
        }
        offs.push(st.put_usage(seg));
        st.stats.direct_stripes += 1;
        st.stats.flushes += 1;
        offs.extend(st.stage_stats());
        st.persist_entries(offs)?;
        st.check_live("direct");
        Ok(())
    }

    /// Collect one segment (greedy); false when none has stale data.
    fn collect_one(&self, st: &mut State) -> Result<bool> {
        let Some(victim) = gc::pick_victim(&st.segment_uses(), &|_| false) else {
            return Ok(false);
        };
        let sbytes = st.hdr.stripe_bytes;
        let ext = st.ext();
        let mut seg = vec![0u8; sbytes as usize];
        self.array.read_stripes(&mut seg, victim * sbytes)?;
        let lo = st.dev_loc(victim, 0);
        let hi = lo + st.slots();
        let mut live: Vec<(u64, u64)> = st
            .map
            .iter()
            .enumerate()
            .filter(|(_, m)| (lo..hi).contains(&m.loc))
            .map(|(e, m)| (m.loc - lo, e as u64))
            .collect();
        live.sort_unstable();
        let old_seqs: Vec<u64> = live.iter().map(|&(_, e)| st.map[e as usize].seq).collect();
        let check = self.array.core.devs.keeps_data();
        let mut items: Vec<(u64, Vec<u8>)> = Vec::with_capacity(live.len());
        for &(slot, e) in &live {
            let a = (slot * ext) as usize;
            let data = seg[a..a + ext as usize].to_vec();
            // The array checked whole chunks; the extent's own CRC32C must agree before the data
            // is logged again (a mismatch would otherwise get a fresh, matching checksum).
            if check && crc32c::crc32c(&data) != st.map[e as usize].data_crc {
                return Err(ArrayError::DataLoss(format!(
                    "tween: GC of segment {victim}: slot {slot} (extent {e}): extent checksum mismatch"
                )));
            }
            items.push((e, data));
        }
        let was = st.in_gc;
        st.in_gc = true;
        let r = self.append(st, &items, false);
        st.in_gc = was;
        r?;
        // Every live extent has a newer copy now (the victim itself may already be refilled by
        // a flush that took it once it was free).
        let seqs: Vec<u64> = live.iter().map(|&(_, e)| st.map[e as usize].seq).collect();
        assert!(
            seqs.iter().zip(&old_seqs).all(|(n, o)| n > o),
            "GC left live extents in segment {victim}"
        );
        st.stats.gc_segments += 1;
        Ok(true)
    }

    /// Periodic GC: collect while fewer segments than the threshold are free. Returns the number of
    /// segments collected.
    pub fn collect(&self) -> Result<u64> {
        let mut st = self.lock();
        let mut n = 0;
        while st.free_segments() < st.hdr.gc_threshold && n < st.hdr.segments {
            if !self.collect_one(&mut st)? {
                break;
            }
            n += 1;
        }
        Ok(n)
    }

    /// Periodic GC when the device has been idle for `idle`.
    pub fn collect_idle(&self, idle: Duration) -> Result<u64> {
        if self.lock().last_io.elapsed() < idle {
            return Ok(0);
        }
        self.collect()
    }

    /// A thread running `collect_idle(idle)` until the `Tween` is dropped.
    pub fn spawn_idle_gc(self: &Arc<Self>, idle: Duration) -> std::thread::JoinHandle<()> {
        let weak: Weak<Tween> = Arc::downgrade(self);
        std::thread::spawn(move || loop {
            std::thread::sleep((idle / 4).max(Duration::from_millis(1)));
            let Some(t) = weak.upgrade() else { return };
            if let Err(e) = t.collect_idle(idle) {
                tracing_free_log(&e);
            }
        })
    }

    /// Discard whole extents (they read as zeros); partial extents at the ends are zeroed.
    pub fn discard(&self, off: u64, len: u64) -> Result<()> {
        let (a, b, cap) = {
            let st = self.lock();
            self.check_range(&st, off, len)?;
            let ext = st.ext();
            (
                off.div_ceil(ext) * ext,
                (off + len) / ext * ext,
                st.hdr.extents * ext,
            )
        };
        let _ = cap;
        if a >= b {
            return self.write(&vec![0u8; len as usize], off);
        }
        self.write(&vec![0u8; (a - off) as usize], off)?;
        self.write(&vec![0u8; (off + len - b) as usize], b)?;
        let mut st = self.lock();
        let ext = st.ext();
        let mut offs = Vec::new();
        for e in a / ext..b / ext {
            let m = st.map[e as usize];
            if m.loc == 0 {
                continue;
            }
            st.clock += 1;
            let t = st.clock;
            if let Some(s) = st.release(m.loc) {
                offs.push(st.put_usage(s));
            }
            offs.push(st.put_map(
                e,
                MapEntry {
                    loc: 0,
                    seq: t,
                    data_crc: 0,
                    ..m
                },
            ));
        }
        offs.extend(st.stage_stats());
        st.persist_entries(offs)
    }
}

fn tracing_free_log(e: &ArrayError) {
    eprintln!("tween: idle GC: {e}");
}

/// Load and check the NVRAM region against the array, and recover the writes a crash left between
/// the buffers and the map.
fn load(array: &Array, nv: Region) -> Result<State> {
    use nvram::nvram_error as err;
    let hdr = Header::decode(nv.bytes())?;
    let sb = array.superblock();
    let g = &sb.geometry;
    if hdr.uuid != sb.uuid {
        return Err(err(format!(
            "{} belongs to another array (uuid {:016x}, this array {:016x})",
            nv.describe(),
            hdr.uuid,
            sb.uuid
        )));
    }
    if hdr.stripe_bytes != g.stripe_bytes() || hdr.segments != g.stripes {
        return Err(err(format!(
            "header says {} segments of {} bytes, the array has {} stripes of {}",
            hdr.segments,
            hdr.stripe_bytes,
            g.stripes,
            g.stripe_bytes()
        )));
    }
    if GcMode::from_id(hdr.gc_mode).is_none() {
        return Err(err(format!("unknown GC mode {}", hdr.gc_mode)));
    }
    let lay = Layout::new(&hdr)?;
    let spare_floor = gc::threshold_floor(lay.groups) + 1;
    if hdr.extents > hdr.segments.saturating_sub(spare_floor) * lay.slots {
        return Err(err(format!(
            "{} logical extents do not fit {} segments with their spare",
            hdr.extents, hdr.segments
        )));
    }
    if nv.len() < lay.end {
        return Err(err(format!(
            "{} holds {} bytes, its layout needs {}",
            nv.describe(),
            nv.len(),
            lay.end
        )));
    }
    let b = nv.bytes();
    let n = lay.groups;
    let centers = nvram::decode_centers(&b[lay.centers as usize..], n)
        .ok_or_else(|| err("cluster centers: checksum mismatch"))?;
    let (stats, mut host_clock) = TweenStats::from_fields(
        &nvram::decode_stats(&b[nvram::STATS_AT as usize..])
            .ok_or_else(|| err("counters: checksum mismatch"))?,
    );
    let mut map = Vec::with_capacity(hdr.extents as usize);
    for e in 0..hdr.extents {
        let at = lay.map_at(e) as usize;
        let m = MapEntry::decode(&b[at..at + ENTRY_BYTES])
            .ok_or_else(|| err(format!("map entry {e}: checksum mismatch")))?;
        map.push(m);
    }
    let slots = lay.slots;
    let mut fill = Vec::with_capacity(n);
    let mut entries = Vec::with_capacity(n);
    let mut clock = map.iter().map(|m| m.seq).max().unwrap_or(0);
    for gi in 0..n {
        let f = nvram::read_u64(b, lay.fill_at(gi));
        if f > slots {
            return Err(err(format!(
                "buffer {gi}: fill {f} exceeds its {slots} slots"
            )));
        }
        let mut ents = vec![
            BufferEntry {
                extent: 0,
                seq: 0,
                data_crc: 0,
                host: false,
            };
            slots as usize
        ];
        for (slot, ent) in ents.iter_mut().enumerate().take(f as usize) {
            let at = lay.buffer_entry_at(gi, slot as u64) as usize;
            let e = BufferEntry::decode(&b[at..at + ENTRY_BYTES])
                .ok_or_else(|| err(format!("buffer {gi} entry {slot}: checksum mismatch")))?;
            let d = lay.buffer_data_at(gi, slot as u64) as usize;
            if crc32c::crc32c(&b[d..d + lay.extent_bytes as usize]) != e.data_crc {
                return Err(err(format!(
                    "buffer {gi} slot {slot}: data checksum mismatch"
                )));
            }
            if e.extent >= hdr.extents {
                return Err(err(format!(
                    "buffer {gi} entry {slot}: extent {} beyond the {} logical extents",
                    e.extent, hdr.extents
                )));
            }
            clock = clock.max(e.seq);
            *ent = e;
        }
        fill.push(f);
        entries.push(ents);
    }
    let mut st = State {
        nv,
        lay,
        groups: HotnessGroups {
            centers,
            beta: hdr.beta,
        },
        hdr,
        map,
        fill,
        entries,
        live: Vec::new(),
        seg_group: Vec::new(),
        clock,
        host_clock: 0,
        stats: TweenStats::default(),
        in_gc: false,
        pending: Vec::new(),
        last_io: Instant::now(),
    };
    // The host clock: the persisted one, or later if a map entry says so (the counters record
    // and the map entries share a `persist_entries` call, which a crash may cut between ranges).
    host_clock = st.map.iter().map(|m| m.t_hat).fold(host_clock, u64::max);
    // Recover: buffer entries newer than their extent's map entry (a crash before step 3), in
    // write order; a host write among them gets the next host time.
    let mut offs = Vec::new();
    let mut found: Vec<(u64, usize, u64)> = Vec::new();
    for gi in 0..n {
        for slot in 0..st.fill[gi] {
            let ent = st.entries[gi][slot as usize];
            if ent.seq > st.map[ent.extent as usize].seq {
                found.push((ent.seq, gi, slot));
            }
        }
    }
    found.sort_unstable();
    for (_, gi, slot) in found {
        let ent = st.entries[gi][slot as usize];
        let m = st.map[ent.extent as usize];
        if ent.seq <= m.seq {
            // Superseded by a newer write already recovered or mapped (entries go in seq order).
            continue;
        }
        let (hot, t_hat) = if ent.host {
            host_clock += 1;
            (
                update_hotness(st.hdr.alpha, m.hot as f64, m.t_hat, host_clock) as f32,
                host_clock,
            )
        } else {
            (m.hot, m.t_hat)
        };
        let e = MapEntry {
            loc: nv_loc(gi, slot),
            seq: ent.seq,
            t_hat,
            hot,
            data_crc: ent.data_crc,
        };
        offs.push(st.put_map(ent.extent, e));
    }
    st.host_clock = host_clock;
    // Every map entry names a place that holds its write; the usage cache follows from the map.
    st.live = vec![0; st.hdr.segments as usize];
    st.seg_group = vec![0; st.hdr.segments as usize];
    for e in 0..st.hdr.extents {
        let m = st.map[e as usize];
        match st.loc(m.loc) {
            Loc::Zero => {}
            Loc::Nvram(gi, slot) => {
                let ok = gi < n
                    && slot < st.fill[gi]
                    && st.entries[gi][slot as usize].extent == e
                    && st.entries[gi][slot as usize].seq == m.seq;
                if !ok {
                    return Err(err(format!(
                        "map entry {e} names NVRAM buffer {gi} slot {slot}, which holds no such write"
                    )));
                }
            }
            Loc::Segment(seg, _) => {
                if seg >= st.hdr.segments {
                    return Err(err(format!(
                        "map entry {e} names segment {seg} of {}",
                        st.hdr.segments
                    )));
                }
                st.live[seg as usize] += 1;
            }
        }
    }
    for seg in 0..st.hdr.segments {
        let v = nvram::read_u64(st.nv.bytes(), st.lay.usage_at(seg));
        st.seg_group[seg as usize] = ((v >> 32) as u16).min(n as u16 - 1);
        offs.push(st.put_usage(seg));
    }
    st.stats = stats;
    offs.extend(st.stage_stats());
    st.persist_entries(offs)?;
    Ok(st)
}

fn to_dev_err(name: &str, e: ArrayError) -> DeviceError {
    match e {
        ArrayError::Device(d) => d,
        other => DeviceError::other(name, other.to_string()),
    }
}

impl BlockDevice for Tween {
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
    /// Every acknowledged write is already persistent (in NVRAM or on the devices).
    fn flush(&self) -> ecstack_device::Result<()> {
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> ecstack_device::Result<()> {
        Tween::discard(self, offset, len).map_err(|e| to_dev_err(&self.name, e))
    }
    fn stats(&self) -> DeviceStats {
        self.array.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecstack_device::MemDevice;

    /// Issue 46: a working set of a segment or two (`experiment tween --quick`'s files part)
    /// overflowed `s - spare` and panicked (or, unchecked, planned too few segments).
    #[test]
    fn segments_for_small_working_sets_keeps_the_spare() {
        for groups in [1, 4, 8] {
            let t = TweenConfig {
                groups,
                ..TweenConfig::default()
            };
            for data in 0..64 {
                let s = t.segments_for(data);
                let spare = gc::spare_segments(s, groups, t.over_provisioning);
                assert!(
                    s > spare && s - spare >= data,
                    "{groups} groups, {data}: {s}"
                );
            }
        }
    }

    fn small_tween(groups: usize) -> Tween {
        let main: Vec<Arc<MemDevice>> = (0..4)
            .map(|_| Arc::new(MemDevice::new(96 << 10).unwrap()))
            .collect();
        let meta = Arc::new(MemDevice::new(2 << 20).unwrap());
        let cfg = ArrayConfig {
            chunk_size: 1024,
            ..ArrayConfig::with_geometry(SchemeKind::Tween, 3, 1)
        };
        let tcfg = TweenConfig {
            groups,
            extent_bytes: 512,
            ..TweenConfig::default()
        };
        let devices = ArrayDevices::from_handles(&main, &[] as &[Arc<MemDevice>], &meta);
        Tween::create(&cfg, devices, &tcfg, &NvramSpec::memory().0).unwrap()
    }

    /// The fault version 2 fixes (§6.2.1: GC "re-assess[es] the hotness of the reclaimed live
    /// data"): an extent written hot long ago and not since is re-assessed when GC moves it and
    /// joins the colder group, moving that group's center; version 1 kept its old H and sent it
    /// back to the hot group without learning anything.
    #[test]
    fn gc_moves_reassess_hotness_and_classify() {
        let t = small_tween(2);
        let mut st = t.lock();
        st.groups.centers = vec![0.2, 0.6];
        st.host_clock = 100_000;
        st.clock = 200_000;
        let e = 7u64;
        let m = MapEntry {
            loc: 0,
            seq: 150_000,
            t_hat: 10,
            hot: 0.6,
            data_crc: 0,
        };
        st.put_map(e, m);
        t.append(&mut st, &[(e, vec![0u8; 512])], false).unwrap();
        let now = st.map[e as usize];
        // H' = 0.5 / (100000 − 10) + 0.5 · 0.6, t̂ unchanged, seq from the write clock.
        let want = 0.5 / 99_990.0 + 0.5 * (0.6f32 as f64);
        assert!((now.hot as f64 - want).abs() < 1e-6, "H = {}", now.hot);
        assert_eq!(now.t_hat, 10);
        assert_eq!(now.seq, 200_001);
        assert_eq!(st.host_clock, 100_000, "a GC move is not host time");
        assert!(
            matches!(st.loc(now.loc), Loc::Nvram(0, _)),
            "the cooled extent joins the colder group"
        );
        assert!((st.groups.centers[0] - (0.9 * 0.2 + 0.1 * want)).abs() < 1e-9);
        assert_eq!(st.groups.centers[1], 0.6);
        // A host write of the same extent: t̂ = now (host time), H from the gap since t̂.
        t.append(&mut st, &[(e, vec![1u8; 512])], true).unwrap();
        let w = st.map[e as usize];
        assert_eq!((st.host_clock, w.t_hat), (100_001, 100_001));
        assert!((w.hot as f64 - (0.5 / 99_991.0 + 0.5 * now.hot as f64)).abs() < 1e-6);
        assert_eq!(w.data_crc, crc32c::crc32c(&[1u8; 512]));
    }
}
