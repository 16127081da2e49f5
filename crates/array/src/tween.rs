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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use ecstack_device::{AlignedBuf, BlockDevice, DeviceError, DeviceStats};

use crate::array::{Array, ArrayDevices, OpenOptions};
use crate::format::ArrayConfig;
use crate::{ArrayError, Result, SchemeKind};

pub use gc::{GcMode, VictimPolicy};
pub use nvram::{NvramImage, NvramSpec};

use gc::SegmentUse;
use hotness::{update_hotness, HotnessGroups, SkewEstimate};
use nvram::{
    BufferEntry, Header, Layout, MapEntry, Region, ENTRY_BYTES, LOC_NVRAM, POLICY_ADAPTIVE_GROUPS,
    POLICY_COST_BENEFIT, POLICY_GC_STREAM,
};

/// TWEEN's parameters (the stripe size is the array's: k · chunk size).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TweenConfig {
    /// NVRAM buffers N (each one segment). They serve the hotness groups, the cleaning stream
    /// (`gc_stream`) and, in background mode, one spare that lets a full buffer be flushed off the
    /// request path (`BufferPlan`); with none of those, one hotness group per buffer (the seed's).
    pub groups: usize,
    /// Logical extent: the unit of hotness and of the map (divides the stripe).
    pub extent_bytes: u32,
    /// Smoothing factor α of the hotness EWMA.
    pub alpha: f64,
    /// Aging factor β of the sequential k-means.
    pub beta: f64,
    pub gc_mode: GcMode,
    /// How GC chooses its victim.
    pub victim: VictimPolicy,
    /// The layer chooses how many hotness groups take host writes (one unless the host's writes
    /// are skewed, `hotness::SkewEstimate`); false: every host group always.
    pub adaptive_groups: bool,
    /// Cleaning output goes to a buffer of its own, never mixed with host writes (false: it is
    /// re-classified into the hotness groups, as the seed does).
    pub gc_stream: bool,
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
            gc_mode: GcMode::Background,
            // Measured (issue 45, docs/tween.md): with the cleaning stream and one hotness group,
            // greedy erased less than cost-benefit on every workload.
            victim: VictimPolicy::Greedy,
            adaptive_groups: true,
            gc_stream: true,
            gc_threshold: None,
            over_provisioning: 0.1,
            seed: 1,
        }
    }
}

impl TweenConfig {
    /// The seed's TWEEN as issue 15 built it: greedy victims, cleaning inside writes (active),
    /// N fixed hotness groups, cleaning output re-classified with host writes.
    pub fn seed_design() -> TweenConfig {
        TweenConfig {
            gc_mode: GcMode::Active,
            victim: VictimPolicy::Greedy,
            adaptive_groups: false,
            gc_stream: false,
            ..TweenConfig::default()
        }
    }

    fn policy(&self) -> u32 {
        let mut p = 0;
        if self.victim == VictimPolicy::CostBenefit {
            p |= POLICY_COST_BENEFIT;
        }
        if self.adaptive_groups {
            p |= POLICY_ADAPTIVE_GROUPS;
        }
        if self.gc_stream {
            p |= POLICY_GC_STREAM;
        }
        p
    }

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

/// Counters of this process's run (not persisted): where flushes and collections ran, and the
/// hotness groups in use.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct TweenRuntime {
    /// Buffers flushed and segments collected by the background worker (off the request path).
    pub background_flushes: u64,
    pub background_gc_segments: u64,
    /// Hotness groups taking host writes now, and at most.
    pub host_groups: usize,
    pub host_groups_max: usize,
    /// The last skew estimate (short-rewrite share over the uniform share; 0 before one epoch).
    pub skew: f64,
    /// Epochs (one working set of host writes each) spent with more than one group in use.
    pub grouped_epochs: u64,
    pub epochs: u64,
    /// Buffers of hotness groups not in use serving as spares now.
    pub lent_buffers: u64,
    /// Host writes that waited for the background worker's flush ([`Tween::pace`]).
    pub paced_waits: u64,
}

/// How the N NVRAM buffers are used: `host` hotness-group streams, then (`gc`) one cleaning
/// stream, and `spare` buffers that let a full buffer wait for the background worker while its
/// stream goes on in a spare. Streams are numbered 0..host (hotness groups), host (cleaning).
#[derive(Debug, Clone, Copy, PartialEq)]
struct BufferPlan {
    host: usize,
    gc: bool,
    spare: usize,
}

impl BufferPlan {
    fn new(buffers: usize, mode: GcMode, gc_stream: bool) -> BufferPlan {
        let spare = usize::from(mode == GcMode::Background && buffers >= 2);
        let gc = gc_stream && buffers - spare >= 2;
        BufferPlan {
            host: buffers - spare - usize::from(gc),
            gc,
            spare,
        }
    }
    fn streams(&self) -> usize {
        self.host + usize::from(self.gc)
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
    /// The stream that filled each segment (a hotness group, or the cleaning stream).
    seg_group: Vec<u16>,
    /// Host time of the youngest host write of the extents a segment was written with (the age of
    /// cost-benefit counts from it). Not persisted: recomputed from the map on open.
    seg_stamp: Vec<u64>,
    /// The extent each segment slot was written with (`segments · slots`; live when the map
    /// still names that slot): GC's victims find their live extents without a scan of the map.
    seg_ext: Vec<u64>,
    groups: HotnessGroups,
    plan: BufferPlan,
    /// Each stream's open buffer: every stream in use always has one; a hotness group not in use
    /// may have lent its empty buffer to the spares ([`NO_BUFFER`], [`State::lend_idle_buffers`]).
    stream_buf: Vec<usize>,
    /// Each buffer's stream when open for one (None: empty spare, or full and waiting).
    buf_stream: Vec<Option<usize>>,
    /// The stream that last filled each buffer (recorded with its segment).
    buf_filler: Vec<u16>,
    /// Full buffers no stream writes to, oldest first, waiting for a flush.
    full: VecDeque<usize>,
    /// The flush the background worker is doing without the lock.
    flushing: Option<Flushing>,
    /// Seconds a background flush takes, a moving average (0 before the first).
    flush_secs: f64,
    /// Hotness groups in use and the layer's skew estimate behind it.
    host_groups: usize,
    skew: SkewEstimate,
    runtime: TweenRuntime,
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

/// A background flush in progress ([`State::flushing`]).
#[derive(Debug, Clone, Copy)]
struct Flushing {
    /// The buffer being written out, and its segment (reserved: never another buffer's, never
    /// counted free).
    buf: usize,
    seg: u64,
    /// When it began, and how full the fullest host stream's buffer was then (the start of
    /// [`Tween::pace`]'s allowance).
    began: Instant,
    base_fill: f64,
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
    /// Signals the background worker: a buffer filled, or free segments fell.
    work: Condvar,
    /// Requests waiting for the lock: the background worker, which takes it many times in a row
    /// (a buffer's pieces, GC's batches), lets them in first (`lock_worker`); std's mutex is not
    /// fair, and a request woken by an unlock lost the race to the worker's next lock.
    waiting: AtomicUsize,
    /// Background flushes ended (counted without the lock, so a paced write can watch for the
    /// next without taking the lock the flush needs: [`Tween::pace`]).
    flushes_ended: AtomicU64,
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
            return Err(buffered_extent_corrupt(g, slot));
        }
        Ok(())
    }

    fn slots(&self) -> u64 {
        self.lay.slots
    }

    /// The slots of buffer `b` whose extent the map still places there, with their data CRC32C.
    fn live_slots(&self, b: usize) -> Vec<(u64, u32)> {
        (0..self.slots())
            .filter_map(|slot| {
                let ent = self.entries[b][slot as usize];
                let m = self.map[ent.extent as usize];
                (m.loc == nv_loc(b, slot) && m.seq == ent.seq).then_some((slot, ent.data_crc))
            })
            .collect()
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

    /// Segments with no live extent, the one a background flush is writing excepted.
    fn free_segments(&self) -> u64 {
        let reserved = self.flushing.map(|f| f.seg);
        self.live
            .iter()
            .enumerate()
            .filter(|&(i, &l)| l == 0 && Some(i as u64) != reserved)
            .count() as u64
    }

    fn free_segment(&self) -> Result<u64> {
        let reserved = self.flushing.map(|f| f.seg);
        (0..self.live.len() as u64)
            .find(|&s| self.live[s as usize] == 0 && Some(s) != reserved)
            .ok_or_else(|| ArrayError::NoSpace("TWEEN has no free log segment".into()))
    }

    /// NVRAM buffers that can take appends or wait for a flush: all N, except that hotness groups
    /// the layer does not use now (adaptive grouping) receive nothing, so no collection run has to
    /// find segments for their buffers.
    fn active_buffers(&self) -> usize {
        self.active_buffers_with(self.host_groups)
    }

    fn active_buffers_with(&self, host_groups: usize) -> usize {
        // Without a cleaning stream, cleaning output is classified over every hotness group, the
        // unused ones too: all N buffers take appends.
        if self.hdr.policy & POLICY_ADAPTIVE_GROUPS == 0 || !self.plan.gc {
            return self.lay.groups;
        }
        // An unused group's own buffer takes nothing; one it lent to the spares does.
        let idle = (host_groups.min(self.plan.host)..self.plan.host)
            .filter(|&s| self.stream_buf.get(s) != Some(&NO_BUFFER))
            .count();
        self.lay.groups - idle
    }

    /// Hotness groups not in use lend their empty buffers to the spares (background mode with a
    /// cleaning stream and adaptive groups): with one host group, a burst of host writes then
    /// fills two spares before a request has to flush a buffer itself, which the background
    /// worker had not written out yet (request-path flushes were tween's p99.9). A lent buffer
    /// counts among the buffers in use (the floor and the threshold rise by one), so it is lent
    /// only when free segments are not below the floor that counts it: no collection run starts
    /// below its floor (`gc.rs`); else a later epoch tries again.
    fn lend_idle_buffers(&mut self) {
        if self.hdr.policy & POLICY_ADAPTIVE_GROUPS == 0 || !self.plan.gc || self.plan.spare == 0 {
            return;
        }
        for s in self.host_groups..self.plan.host {
            let b = self.stream_buf[s];
            if b == NO_BUFFER || self.fill[b] != 0 {
                continue;
            }
            if self.free_segments() < gc::threshold_floor(self.active_buffers() + 1) {
                return;
            }
            self.stream_buf[s] = NO_BUFFER;
            self.buf_stream[b] = None;
        }
    }

    /// Hotness groups `host_groups..want` about to be used get a buffer back from the spares for
    /// each that lent its own; false (nothing taken) when the spares have too few empty buffers.
    fn take_back_buffers(&mut self, want: usize) -> bool {
        let lent: Vec<usize> = (self.host_groups..want)
            .filter(|&s| self.stream_buf[s] == NO_BUFFER)
            .collect();
        let mut spares = Vec::new();
        for _ in &lent {
            let Some(b) = (0..self.lay.groups).find(|&b| self.is_spare(b) && !spares.contains(&b))
            else {
                return false;
            };
            spares.push(b);
        }
        for (s, b) in lent.into_iter().zip(spares) {
            self.stream_buf[s] = b;
            self.buf_stream[b] = Some(s);
            self.buf_filler[b] = s as u16;
        }
        true
    }

    /// The free-segment floor at which the request path collects (`gc.rs`'s N + 2 over the
    /// buffers in use).
    fn floor(&self) -> u64 {
        gc::threshold_floor(self.active_buffers())
    }

    /// The threshold below which GC collects (active mode; the background worker): the recorded
    /// one, lowered by the buffers not in use, never below the floor. Free segments kept beyond
    /// what the buffers in use need are spare that holds no stale data.
    fn threshold(&self) -> u64 {
        let unused = (self.lay.groups - self.active_buffers()) as u64;
        self.hdr
            .gc_threshold
            .saturating_sub(unused)
            .max(self.floor())
    }

    fn victim_policy(&self) -> VictimPolicy {
        if self.hdr.policy & POLICY_COST_BENEFIT != 0 {
            VictimPolicy::CostBenefit
        } else {
            VictimPolicy::Greedy
        }
    }

    /// The hotness of the stream that filled a segment (the cleaning stream: coldest).
    fn stream_hotness(&self, stream: usize) -> f64 {
        if stream < self.plan.host {
            self.groups.hotness_of(stream)
        } else {
            0.0
        }
    }

    fn segment_uses(&self) -> Vec<SegmentUse> {
        let slots = self.slots() as u32;
        (0..self.live.len())
            .map(|i| SegmentUse {
                live: self.live[i],
                written: slots,
                hotness: self.stream_hotness(self.seg_group[i] as usize),
                age: self.host_clock.saturating_sub(self.seg_stamp[i]),
            })
            .collect()
    }

    fn pick_victim(&self) -> Option<u64> {
        gc::pick_victim(self.victim_policy(), &self.segment_uses(), &|_| false)
    }

    /// The live extents of segment `seg`: (slot, extent, seq), in slot order.
    fn live_of(&self, seg: u64) -> Vec<(u64, u64, u64)> {
        let slots = self.slots();
        (0..slots)
            .filter_map(|slot| {
                let e = self.seg_ext[(seg * slots + slot) as usize];
                let m = self.map.get(e as usize)?;
                (m.loc == self.dev_loc(seg, slot)).then_some((slot, e, m.seq))
            })
            .collect()
    }

    /// Buffer `b` now holds a segment's worth: record what the segment `seg` it was written to
    /// holds (map, live counts, reverse index, age stamp). Returns the NVRAM offsets to persist.
    fn settle_flush(&mut self, b: usize, seg: u64) -> Vec<u64> {
        let mut offs = Vec::new();
        let mut stamp = 0;
        let slots = self.slots();
        for slot in 0..slots {
            let ent = self.entries[b][slot as usize];
            let m = self.map[ent.extent as usize];
            if m.loc == nv_loc(b, slot) && m.seq == ent.seq {
                debug_assert_eq!(m.data_crc, ent.data_crc, "extent {}", ent.extent);
                let loc = self.dev_loc(seg, slot);
                offs.push(self.put_map(ent.extent, MapEntry { loc, ..m }));
                self.live[seg as usize] += 1;
                self.seg_ext[(seg * slots + slot) as usize] = ent.extent;
                stamp = stamp.max(m.t_hat);
            }
        }
        self.seg_group[seg as usize] = self.buf_filler[b];
        self.seg_stamp[seg as usize] = stamp;
        offs.push(self.put_usage(seg));
        self.stats.flushes += 1;
        offs.extend(self.stage_stats());
        offs
    }

    /// Buffer `b` is empty again: persist its fill, and give it back to the pool when no stream
    /// writes to it.
    fn reset_buffer(&mut self, b: usize) -> Result<()> {
        self.fill[b] = 0;
        let at = self.lay.fill_at(b);
        self.put_u64(at, 0);
        self.persist(at, 8)?;
        self.full.retain(|&x| x != b);
        Ok(())
    }

    /// An empty buffer no stream writes to (not the one being flushed).
    /// The fill (0..=1) of the fullest open buffer of a hotness-group stream.
    fn host_fill(&self) -> f64 {
        let slots = self.slots() as f64;
        (0..self.plan.host)
            .map(|s| self.stream_buf[s])
            .filter(|&b| b != NO_BUFFER)
            .map(|b| self.fill[b] as f64 / slots)
            .fold(0.0, f64::max)
    }

    fn spare_buffer(&self) -> Option<usize> {
        (0..self.lay.groups).find(|&b| self.is_spare(b))
    }

    /// Whether buffer `b` is an empty spare: no stream's, empty, not waiting, not being flushed.
    fn is_spare(&self, b: usize) -> bool {
        self.buf_stream[b].is_none()
            && self.fill[b] == 0
            && !self.full.contains(&b)
            && self.flushing.map(|f| f.buf) != Some(b)
    }

    /// Hotness groups not in use whose buffer is lent to the spares now.
    fn lent_buffers(&self) -> u64 {
        self.stream_buf.iter().filter(|&&b| b == NO_BUFFER).count() as u64
    }

    /// The stream a write goes to: host writes to their hotness group (Algorithm 2 over the
    /// groups in use), cleaning output to the cleaning stream when there is one.
    fn stream_for(&mut self, hot: f64, host: bool) -> usize {
        if !host && self.plan.gc {
            return self.plan.host;
        }
        let n = if host {
            self.host_groups
        } else {
            // Cleaning output without a stream of its own: any hotness group (the seed's
            // re-classification).
            self.plan.host
        };
        self.groups.classify_among(hot, n)
    }

    /// A host write of an extent last written by the host at `t_hat`: the skew estimate, and the
    /// hotness groups in use when an epoch ends.
    fn observe_host_write(&mut self, t_hat: u64, now: u64) {
        if self.skew.record(t_hat, now) {
            self.runtime.epochs += 1;
            self.runtime.skew = self.skew.skew;
            if self.hdr.policy & POLICY_ADAPTIVE_GROUPS != 0 {
                let want = self.skew.groups(self.plan.host);
                // More groups raise the floor: only when free segments already clear the new one
                // (else a later epoch tries again), so no collection run starts below its floor.
                let floor = gc::threshold_floor(self.active_buffers_with(want));
                if want <= self.host_groups
                    || (self.free_segments() > floor && self.take_back_buffers(want))
                {
                    self.host_groups = want;
                }
                self.lend_idle_buffers();
            }
            if self.host_groups > 1 {
                self.runtime.grouped_epochs += 1;
            }
        }
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
            policy: tcfg.policy(),
            version: nvram::NV_VERSION,
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
        let t = Tween {
            array,
            st: Mutex::new(st),
            work: Condvar::new(),
            waiting: AtomicUsize::new(0),
            flushes_ended: AtomicU64::new(0),
            name,
        };
        {
            // Buffers a crash left full are written out now.
            let mut st = t.lock();
            for b in 0..st.lay.groups {
                if st.fill[b] == st.slots() {
                    t.flush(&mut st, b)?;
                }
            }
        }
        Ok(t)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lock for a request (read, write, discard): counted as waiting while it waits.
    fn lock_request(&self) -> MutexGuard<'_, State> {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let st = self.lock();
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        st
    }

    /// The lock for the background worker: while a request waits for it (at most
    /// [`WORKER_YIELD`]), the worker lets it go first.
    fn lock_worker(&self) -> MutexGuard<'_, State> {
        let until = Instant::now() + WORKER_YIELD;
        while self.waiting.load(Ordering::Acquire) > 0 && Instant::now() < until {
            std::thread::yield_now();
        }
        self.lock()
    }

    /// Host writes paced to the background worker while it flushes and no spare buffer is left:
    /// the fullest host stream's buffer may fill only as fast as the flush progresses (by its
    /// average duration), from where it stood when the flush began, so that it is full when the
    /// flush frees a buffer. Without pacing, one request in a buffer's worth flushed that buffer
    /// itself (~0.5 ms; WEB: 0.23 % of requests, its whole p99.9); paced, each waits a few µs with
    /// the lock released. A request waits at most [`PACE_MAX`] in all, then goes on (and flushes
    /// itself if it must).
    fn pace<'a>(&'a self, mut st: MutexGuard<'a, State>, bytes: u64) -> MutexGuard<'a, State> {
        let until = Instant::now() + PACE_MAX;
        let mut counted = false;
        loop {
            let Some(Flushing {
                began,
                base_fill: base,
                ..
            }) = st.flushing
            else {
                return st;
            };
            if st.flush_secs == 0.0 || st.spare_buffer().is_some() {
                return st;
            }
            let after = st.host_fill() + bytes.div_ceil(st.ext()) as f64 / st.slots() as f64;
            let elapsed = began.elapsed().as_secs_f64();
            let now = Instant::now();
            let Some(wait) = pace_wait(base, st.flush_secs, elapsed, after) else {
                return st;
            };
            if now >= until {
                return st;
            }
            if !counted {
                st.runtime.paced_waits += 1;
                counted = true;
            }
            let ended = self.flushes_ended.load(Ordering::Acquire);
            drop(st);
            let end = now + wait.min(until - now);
            while Instant::now() < end && self.flushes_ended.load(Ordering::Acquire) == ended {
                std::thread::yield_now();
            }
            st = self.lock_request();
        }
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

    pub fn victim_policy(&self) -> VictimPolicy {
        self.lock().victim_policy()
    }

    /// This process's counters (background work, hotness groups in use).
    pub fn runtime(&self) -> TweenRuntime {
        let st = self.lock();
        TweenRuntime {
            host_groups: st.host_groups,
            host_groups_max: st.plan.host,
            lent_buffers: st.lent_buffers(),
            ..st.runtime
        }
    }

    /// The segment GC would collect now under the array's victim policy (None: none has stale
    /// data).
    pub fn next_victim(&self) -> Option<u64> {
        self.lock().pick_victim()
    }

    /// Live extents per log segment (0: free).
    pub fn segment_live(&self) -> Vec<u32> {
        self.lock().live.clone()
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
        let mut st = self.lock_request();
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
        let st = self.lock_request();
        let mut st = self.pace(st, buf.len() as u64);
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
            if host {
                st.observe_host_write(m.t_hat, now);
            }
            let hot = update_hotness(st.hdr.alpha, m.hot as f64, m.t_hat, now);
            let t_hat = if host { now } else { m.t_hat };
            let stream = st.stream_for(hot, host);
            let mut g = st.stream_buf[stream];
            let mut slot = st.fill[g] + st.pending.iter().filter(|p| p.group == g).count() as u64;
            if slot == st.slots() {
                // A buffer found full: GC appending while its flush makes room.
                self.commit_pending(st)?;
                self.buffer_full(st, stream)?;
                g = st.stream_buf[stream];
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
                self.buffer_full(st, stream)?;
            }
        }
        self.commit_pending(st)
    }

    /// The open buffer of `stream` is full: the stream goes on in a spare buffer and the full one
    /// waits for the background worker; with no spare, a waiting buffer (or else this one) is
    /// flushed here, on the request path.
    fn buffer_full(&self, st: &mut State, stream: usize) -> Result<()> {
        for _ in 0..=st.lay.groups + 1 {
            let b = st.stream_buf[stream];
            if st.fill[b] < st.slots() {
                return Ok(()); // a nested flush emptied it
            }
            if let Some(sp) = st.spare_buffer() {
                st.buf_stream[b] = None;
                st.full.push_back(b);
                st.buf_stream[sp] = Some(stream);
                st.buf_filler[sp] = stream as u16;
                st.stream_buf[stream] = sp;
                self.work.notify_one();
                return Ok(());
            }
            match st.full.front() {
                Some(&q) => self.flush(st, q)?,
                None => return self.flush(st, b),
            }
        }
        Err(ArrayError::Meta(format!(
            "tween: stream {stream} found no buffer to continue in"
        )))
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
            let floor = st.floor();
            let want = match GcMode::from_id(st.hdr.gc_mode) {
                Some(GcMode::Active) => st.threshold(),
                _ => floor,
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

    /// Write buffer `g` (full) as one full-stripe write, then move its live entries to the segment.
    /// The GC that makes room first may append to this very buffer and flush it itself.
    fn flush(&self, st: &mut State, g: usize) -> Result<()> {
        assert!(st.pending.is_empty() && st.fill[g] == st.slots());
        self.ensure_free(st)?;
        if st.fill[g] < st.slots() {
            return Ok(());
        }
        let seg = st.free_segment()?;
        self.array.write_segment(seg, buffer_image(st, g)?)?;
        let offs = st.settle_flush(g, seg);
        st.persist_entries(offs)?;
        st.reset_buffer(g)?;
        st.check_live("flush");
        Ok(())
    }

    /// A write of whole extents `e..e + slots` straight to a free segment (§6.2.2).
    fn direct(&self, st: &mut State, e: u64, data: &[u8]) -> Result<()> {
        self.commit_pending(st)?;
        self.ensure_free(st)?;
        let seg = st.free_segment()?;
        self.array.write_segment(seg, data)?;
        let mut offs = Vec::new();
        let ext = st.ext() as usize;
        for slot in 0..st.slots() {
            st.clock += 1;
            st.host_clock += 1;
            let (t, now) = (st.clock, st.host_clock);
            let x = e + slot;
            let m = st.map[x as usize];
            st.observe_host_write(m.t_hat, now);
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
            let slots = st.slots();
            st.seg_ext[(seg * slots + slot) as usize] = x;
        }
        st.seg_group[seg as usize] = 0;
        st.seg_stamp[seg as usize] = st.host_clock;
        offs.push(st.put_usage(seg));
        st.stats.direct_stripes += 1;
        st.stats.flushes += 1;
        offs.extend(st.stage_stats());
        st.persist_entries(offs)?;
        st.check_live("direct");
        Ok(())
    }

    /// Collect one segment on the request path (the lock held throughout); false when none has
    /// stale data.
    fn collect_one(&self, st: &mut State) -> Result<bool> {
        let Some(victim) = st.pick_victim() else {
            return Ok(false);
        };
        let live = st.live_of(victim);
        let mut seg = vec![0u8; st.hdr.stripe_bytes as usize];
        self.array
            .read_stripes(&mut seg, victim * st.hdr.stripe_bytes)?;
        let items = self.gc_items(st, victim, &seg, &live)?;
        debug_assert_eq!(items.len(), live.len());
        self.append_gc(st, &items)?;
        // Every live extent has a newer copy now (the victim itself may already be refilled by
        // a flush that took it once it was free).
        assert!(
            live.iter().all(|&(_, e, seq)| st.map[e as usize].seq > seq),
            "GC left live extents in segment {victim}"
        );
        st.stats.gc_segments += 1;
        Ok(true)
    }

    /// The extents of `live` (slot, extent, seq when the victim was chosen) still in `victim` at
    /// that seq, with their data from `seg` (the victim read), each checked against its map entry's
    /// CRC32C: the array checked whole chunks; the extent's own checksum must agree before the
    /// data is logged again (a mismatch would otherwise get a fresh, matching checksum).
    fn gc_items(
        &self,
        st: &State,
        victim: u64,
        seg: &[u8],
        live: &[(u64, u64, u64)],
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        let ext = st.ext() as usize;
        let check = self.array.core.devs.keeps_data();
        let mut items = Vec::with_capacity(live.len());
        for &(slot, e, seq) in live {
            let m = st.map[e as usize];
            if m.seq != seq || m.loc != st.dev_loc(victim, slot) {
                continue; // overwritten (or moved) since the victim was chosen
            }
            let a = slot as usize * ext;
            let data = seg[a..a + ext].to_vec();
            if check && crc32c::crc32c(&data) != m.data_crc {
                return Err(ArrayError::DataLoss(format!(
                    "tween: GC of segment {victim}: slot {slot} (extent {e}): extent checksum mismatch"
                )));
            }
            items.push((e, data));
        }
        Ok(items)
    }

    fn append_gc(&self, st: &mut State, items: &[(u64, Vec<u8>)]) -> Result<()> {
        let was = st.in_gc;
        st.in_gc = true;
        let r = self.append(st, items, false);
        st.in_gc = was;
        r
    }

    /// Whether the background worker has something to do now.
    fn has_background_work(st: &State) -> bool {
        let floor = st.floor();
        let free = st.free_segments();
        (!st.full.is_empty() && st.flushing.is_none() && free > floor) || free < st.threshold()
    }

    /// True when the background worker has nothing to do (no full buffer waiting, free segments
    /// at or above the threshold): what an idle period lets it reach.
    pub fn background_idle(&self) -> bool {
        let st = self.lock();
        !Tween::has_background_work(&st) && st.flushing.is_none()
    }

    /// One piece of the background worker's work (`start_background` runs it in a loop): flush
    /// the oldest full buffer, or collect one segment while fewer than the threshold are free.
    /// Device I/O runs without the lock, so requests go on meanwhile. At the floor of free
    /// segments it collects as the request path would (lock held). True when it did something.
    pub fn background_step(&self) -> Result<bool> {
        let mut st = self.lock_worker();
        let floor = st.floor();
        let free = st.free_segments();
        if free < floor && !st.in_gc {
            let n = st.stats.gc_segments;
            self.ensure_free(&mut st)?;
            return Ok(st.stats.gc_segments > n);
        }
        if !st.full.is_empty() && st.flushing.is_none() && free > floor {
            self.flush_background(st)?;
            return Ok(true);
        }
        if free < st.threshold() {
            return self.clean_background(st);
        }
        Ok(false)
    }

    /// Write the oldest full buffer to a free segment without holding the lock (the segment is
    /// reserved meanwhile and the buffer is no stream's), then record it as `flush` does.
    ///
    /// The buffer's image is copied in pieces of [`IMAGE_PIECE`] bytes with the lock released
    /// between them, and its live extents are checked against their CRCs on the copy, outside the
    /// lock: a request waits for one piece at most, not for the whole buffer (a copy and check of
    /// a 1.5 MiB buffer held the lock ~150–200 µs, the largest part of tween's tail latency). The
    /// bytes cannot change meanwhile: only a stream's open buffer takes appends, and this one is
    /// reserved (`flushing`) until it is settled and reset.
    fn flush_background(&self, mut st: MutexGuard<'_, State>) -> Result<()> {
        let Some(b) = st.full.pop_front() else {
            return Ok(());
        };
        let seg = match st.free_segment() {
            Ok(s) => s,
            Err(e) => {
                st.full.push_front(b);
                return Err(e);
            }
        };
        st.flushing = Some(Flushing {
            buf: b,
            seg,
            began: Instant::now(),
            base_fill: st.host_fill(),
        });
        let live = st.live_slots(b);
        let ext = st.ext() as usize;
        let from = st.lay.buffer_data_at(b, 0) as usize;
        let len = st.hdr.stripe_bytes as usize;
        drop(st);
        // Aligned, so that the array writes each chunk from it without another copy.
        let mut data = AlignedBuf::with_capacity(len);
        for at in (0..len).step_by(IMAGE_PIECE) {
            let n = IMAGE_PIECE.min(len - at);
            let st = self.lock_worker();
            data.push(&st.nv.bytes()[from + at..from + at + n]);
        }
        let data = data.as_slice();
        let bad = live.iter().find(|&&(slot, crc)| {
            let a = slot as usize * ext;
            crc32c::crc32c(&data[a..a + ext]) != crc
        });
        let written = match bad {
            Some(&(slot, _)) => Err(buffered_extent_corrupt(b, slot)),
            None => self.array.write_segment(seg, data),
        };
        let mut st = self.lock_worker();
        self.flushes_ended.fetch_add(1, Ordering::AcqRel);
        if let Some(f) = st.flushing.take() {
            let secs = f.began.elapsed().as_secs_f64();
            st.flush_secs = if st.flush_secs == 0.0 {
                secs
            } else {
                0.8 * st.flush_secs + 0.2 * secs
            };
        }
        if let Err(e) = written {
            st.full.push_front(b);
            return Err(e);
        }
        let offs = st.settle_flush(b, seg);
        st.persist_entries(offs)?;
        st.reset_buffer(b)?;
        st.runtime.background_flushes += 1;
        st.check_live("background flush");
        Ok(())
    }

    /// Collect one segment with the victim's read outside the lock and its live extents appended
    /// in small batches (the lock released between them). Before each batch a waiting full buffer
    /// is flushed (off the lock) if a free segment above the floor takes it, so host buffers
    /// never wait for a whole victim. A batch never fills the cleaning stream's buffer unless a
    /// spare buffer takes over.
    fn clean_background(&self, st: MutexGuard<'_, State>) -> Result<bool> {
        const BATCH_EXTENTS: usize = 16;
        let Some(victim) = st.pick_victim() else {
            return Ok(false);
        };
        let live = st.live_of(victim);
        let sbytes = st.hdr.stripe_bytes;
        drop(st);
        let mut seg = vec![0u8; sbytes as usize];
        self.array.read_stripes(&mut seg, victim * sbytes)?;
        let mut i = 0;
        while i < live.len() {
            let st = self.lock_worker();
            // Host buffers that filled while this victim is being cleaned go first: a request
            // that finds no spare flushes one itself (~1 ms), the tail this worker is for.
            if !st.full.is_empty() && st.flushing.is_none() && st.free_segments() > st.floor() {
                self.flush_background(st)?;
                continue;
            }
            let mut st = st;
            let mut batch = BATCH_EXTENTS.min(live.len() - i);
            if st.plan.gc {
                let b = st.stream_buf[st.plan.host];
                let room = (st.slots() - st.fill[b]) as usize;
                if st.spare_buffer().is_none() {
                    batch = batch.min(room.saturating_sub(1)).max(1);
                } else if room > 0 {
                    batch = batch.min(room);
                }
            }
            let items = self.gc_items(&st, victim, &seg, &live[i..i + batch])?;
            self.append_gc(&mut st, &items)?;
            i += batch;
            drop(st);
            std::thread::yield_now();
        }
        let mut st = self.lock();
        st.stats.gc_segments += 1;
        st.runtime.background_gc_segments += 1;
        Ok(true)
    }

    /// A thread running `background_step` while there is work, waiting for a full buffer or a
    /// fall in free segments otherwise; it stops when the handle is dropped (or the `Tween` is).
    pub fn start_background(self: &Arc<Self>) -> BackgroundGc {
        let stop = Arc::new(AtomicBool::new(false));
        let weak: Weak<Tween> = Arc::downgrade(self);
        let (s, w) = (Arc::clone(&stop), weak.clone());
        let handle = std::thread::spawn(move || loop {
            if s.load(Ordering::Acquire) {
                return;
            }
            let Some(t) = w.upgrade() else { return };
            match t.background_step() {
                // Let a waiting request take the lock before the next step (std's mutex is not
                // fair: the worker could re-take it at once).
                Ok(true) => std::thread::yield_now(),
                Ok(false) => {
                    let st = t.lock();
                    if !s.load(Ordering::Acquire) && !Tween::has_background_work(&st) {
                        let _ = t.work.wait_timeout(st, Duration::from_millis(20));
                    }
                }
                Err(e) => {
                    tracing_free_log(&e);
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        BackgroundGc {
            stop,
            tween: weak,
            handle: Some(handle),
        }
    }

    /// Periodic GC: collect while fewer segments than the threshold are free. Returns the number of
    /// segments collected.
    pub fn collect(&self) -> Result<u64> {
        let mut st = self.lock();
        let mut n = 0;
        while st.free_segments() < st.threshold() && n < st.hdr.segments {
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
            let st = self.lock_request();
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
    eprintln!("tween: background GC: {e}");
}

/// The background worker of a `Tween` (`Tween::start_background`); dropping it stops the worker
/// and waits for it (work in progress finishes; what is left is done on the request path).
pub struct BackgroundGc {
    stop: Arc<AtomicBool>,
    tween: Weak<Tween>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for BackgroundGc {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.tween.upgrade() {
            t.work.notify_all();
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The bytes of full buffer `b`, every extent still live in it checked first: a flip in NVRAM
/// must not become a consistent, wrong stripe under fresh parity.
fn buffer_image(st: &State, b: usize) -> Result<&[u8]> {
    for (slot, _) in st.live_slots(b) {
        st.check_slot(b, slot)?;
    }
    let a = st.lay.buffer_data_at(b, 0) as usize;
    Ok(&st.nv.bytes()[a..a + st.hdr.stripe_bytes as usize])
}

/// A buffered extent (buffer `g`, slot `slot`) whose bytes fail its buffer entry's data CRC32C.
fn buffered_extent_corrupt(g: usize, slot: u64) -> ArrayError {
    ArrayError::DataLoss(format!(
        "nvram: buffer {g} slot {slot}: data checksum mismatch"
    ))
}

/// How long the background worker lets waiting requests take TWEEN's lock before it takes it
/// again (`Tween::lock_worker`).
const WORKER_YIELD: Duration = Duration::from_micros(200);

/// The longest a host write waits for the background worker's flush before it goes on
/// ([`Tween::pace`]): about 2× md's p99.9 on the EPLOG traces.
const PACE_MAX: Duration = Duration::from_micros(60);

/// How long a host write waits under [`Tween::pace`] before it looks again (None: it goes on),
/// `elapsed` seconds into a flush that takes `flush_secs` on average and began with the fullest
/// host buffer `base` full, the write leaving it `after` full (both as shares of a buffer). The
/// allowance grows from `base` to a full buffer over [`PACE_MARGIN`] × `flush_secs`; a write
/// behind it waits until it catches up; a write that would fill the buffer waits (in
/// [`PACE_STEP`]s) for the flush to end.
fn pace_wait(base: f64, flush_secs: f64, elapsed: f64, after: f64) -> Option<Duration> {
    let secs = PACE_MARGIN * flush_secs;
    let progress = (elapsed / secs).min(1.0);
    let allowed = base + (1.0 - base) * progress;
    if after <= allowed && after < 1.0 {
        return None;
    }
    let behind = if after < 1.0 {
        (after - allowed) / (1.0 - base).max(1e-9) * secs
    } else {
        0.0
    };
    Some(Duration::from_secs_f64(behind).max(PACE_STEP))
}

/// Host writes are paced to a flush this much slower than the average one ([`Tween::pace`]).
const PACE_MARGIN: f64 = 1.5;

/// How long a paced write waits before it looks again whether the flush has ended.
const PACE_STEP: Duration = Duration::from_micros(5);

/// [`State::stream_buf`] of a hotness group not in use that lent its buffer to the spares.
const NO_BUFFER: usize = usize::MAX;

/// Bytes of a full buffer the background flush copies per hold of the lock (~5–10 µs each).
const IMAGE_PIECE: usize = 64 << 10;

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
    let plan = BufferPlan::new(
        lay.groups,
        GcMode::from_id(hdr.gc_mode).unwrap_or(GcMode::Active),
        hdr.policy & POLICY_GC_STREAM != 0,
    );
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
    let host_groups = if hdr.policy & POLICY_ADAPTIVE_GROUPS != 0 {
        1
    } else {
        plan.host
    };
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
        seg_stamp: Vec::new(),
        seg_ext: Vec::new(),
        plan,
        stream_buf: Vec::new(),
        buf_stream: vec![None; n],
        buf_filler: vec![0; n],
        full: VecDeque::new(),
        flushing: None,
        flush_secs: 0.0,
        host_groups,
        skew: SkewEstimate::default(),
        runtime: TweenRuntime::default(),
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
    // Every map entry names a place that holds its write; the usage cache, the reverse index and
    // the age stamps follow from the map.
    st.live = vec![0; st.hdr.segments as usize];
    st.seg_group = vec![0; st.hdr.segments as usize];
    st.seg_stamp = vec![0; st.hdr.segments as usize];
    st.seg_ext = vec![u64::MAX; (st.hdr.segments * st.slots()) as usize];
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
                let i = (m.loc - 1) as usize;
                st.seg_ext[i] = e;
                st.seg_stamp[seg as usize] = st.seg_stamp[seg as usize].max(m.t_hat);
                // The skew estimate's working set: extents the host has written.
            }
        }
        if m.t_hat != 0 {
            st.skew.working_set += 1;
        }
    }
    assign_buffers(&mut st)?;
    if st.hdr.version < nvram::NV_VERSION {
        // A version-2 region: the same layout; its header is rewritten as version 3 (policy 0,
        // i.e. what version 2 did), persisted below with everything else.
        st.hdr.version = nvram::NV_VERSION;
        let h = st.hdr.clone();
        h.encode(&mut st.nv.bytes_mut()[..4096]);
        offs.extend(ranges(0, 4096));
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

/// Give every stream an open buffer: the partly filled buffers first (a crash keeps what each
/// stream had appended; which stream gets which only affects placement), then empty ones, then
/// (only if no empty is left) a full one, which the stream's next append flushes. The other full
/// buffers wait in `full` (the open flushes them).
fn assign_buffers(st: &mut State) -> Result<()> {
    let slots = st.slots();
    let n = st.lay.groups;
    let streams = st.plan.streams();
    let partial: Vec<usize> = (0..n)
        .filter(|&b| st.fill[b] > 0 && st.fill[b] < slots)
        .collect();
    if partial.len() > streams {
        return Err(nvram::nvram_error(format!(
            "{} partly filled buffers, more than the {streams} streams that write to buffers",
            partial.len()
        )));
    }
    let empty = (0..n).filter(|&b| st.fill[b] == 0);
    let full: Vec<usize> = (0..n).filter(|&b| st.fill[b] == slots).collect();
    let mut order: Vec<usize> = partial.into_iter().chain(empty).collect();
    order.extend(full.iter().copied());
    st.stream_buf = order[..streams].to_vec();
    for (s, &b) in st.stream_buf.clone().iter().enumerate() {
        st.buf_stream[b] = Some(s);
        st.buf_filler[b] = s as u16;
    }
    st.full = full
        .into_iter()
        .filter(|&b| st.buf_stream[b].is_none())
        .collect();
    Ok(())
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

    /// The pacing rule: a write inside the allowance goes on; one ahead of it waits the time the
    /// flush needs to catch up; one that would fill the buffer waits for the flush to end (in
    /// steps) however far the flush is; the allowance starts where the buffer stood.
    #[test]
    fn host_writes_are_paced_to_the_flush_in_progress() {
        let us = |d: Option<Duration>| d.map(|d| d.as_micros());
        // A 400 µs average flush is paced over 600 µs. Half-way (300 µs) from an empty buffer, a
        // write to 0.4 goes on, one to 0.6 waits 0.1 of 600 µs.
        assert_eq!(pace_wait(0.0, 400e-6, 300e-6, 0.4), None);
        assert_eq!(us(pace_wait(0.0, 400e-6, 300e-6, 0.6)), Some(60));
        // From a buffer half full at the flush's start: at 300 µs the allowance is 0.75.
        assert_eq!(pace_wait(0.5, 400e-6, 300e-6, 0.7), None);
        assert_eq!(us(pace_wait(0.5, 400e-6, 300e-6, 0.8)), Some(60));
        // A write that would fill the buffer waits for the flush, even past its expected end.
        assert_eq!(
            us(pace_wait(0.0, 400e-6, 900e-6, 1.0)),
            Some(PACE_STEP.as_micros())
        );
        assert_eq!(
            us(pace_wait(0.9, 400e-6, 10e-6, 1.2)),
            Some(PACE_STEP.as_micros())
        );
        // A small wait is never below one step; a base of a full buffer never divides by zero.
        assert_eq!(
            us(pace_wait(0.0, 400e-6, 299e-6, 0.5)),
            Some(PACE_STEP.as_micros())
        );
        assert_eq!(pace_wait(1.0, 400e-6, 0.0, 0.5), None);
    }

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

    /// With one hotness group in use (uniform writes), the unused group's empty buffer serves as a
    /// second spare: two buffers' worth of host writes wait for the background worker without a
    /// flush on the request path (one spare alone would flush the first of them inline), and a
    /// group added later takes a buffer back.
    #[test]
    fn an_unused_hotness_group_lends_its_buffer_to_the_spares() {
        let t = small_tween(4);
        let ext = 512u64;
        let n = t.size() / ext;
        let mut rng = ecstack_base::rng::Rng::new(11);
        let mut write = |t: &Tween| {
            let e = rng.below(n);
            t.write(&[e as u8; 512], e * ext).unwrap();
        };
        for _ in 0..3000 {
            write(&t);
            while t.background_step().unwrap() {}
        }
        let rt = t.runtime();
        assert_eq!((rt.host_groups, rt.host_groups_max), (1, 2));
        assert_eq!(rt.lent_buffers, 1, "the unused group's buffer is a spare");
        let slots = {
            let st = t.lock();
            st.slots() - st.fill[st.stream_buf[0]]
        };
        let flushes = t.stats().flushes;
        for _ in 0..slots + 6 {
            write(&t);
        }
        {
            let st = t.lock();
            assert_eq!(st.stats.flushes, flushes, "no flush on the request path");
            assert_eq!(st.full.len(), 2, "both full buffers wait for the worker");
        }
        while t.background_step().unwrap() {}
        assert!(t.stats().flushes >= flushes + 2);
        assert!(t.lock().full.is_empty(), "the worker wrote both out");
        // A second group in use takes a buffer back from the spares.
        let mut st = t.lock();
        assert!(st.take_back_buffers(2));
        assert_eq!(st.lent_buffers(), 0);
        assert_ne!(st.stream_buf[1], NO_BUFFER);
        let b = st.stream_buf[1];
        assert_eq!(st.buf_stream[b], Some(1));
    }
}
