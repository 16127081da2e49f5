//! Trace synthesis: deterministic generators that match target statistics, with named presets
//! built from the statistics the seeds publish.
//!
//! Two generator families:
//! - [`Targets`]: number of writes, average write size, EPLOG random-write %, WSS, updated WSS %,
//!   update writes %, read %, Zipf skew of hot updates / re-reads, duration and (file traces)
//!   number of files and updated files %. The generator reproduces each target by construction
//!   (see [`TargetGen`] for the method), so `analyze(synthesize(t))` matches `t` within a few %.
//! - patterns: IOzone-style uniform random fixed-size updates after a sequential pre-write
//!   (CodFS §5.2.2) and YCSB-style Zipf updates/reads over fixed-size records after a load phase.
//!
//! Everything is a function of the seed (xoshiro256** seeded by splitmix64).

use crate::analyze::{VolumeReport, RANDOM_JUMP};
use crate::error::{Result, TraceError};
use crate::record::{Names, Op, Record, BLOCK_SIZE};
use serde::{Deserialize, Serialize};

const GIB: f64 = (1u64 << 30) as f64;
const KIB: f64 = 1024.0;
const JUMP_BLOCKS: u64 = RANDOM_JUMP / BLOCK_SIZE;

// ------------------------------------------------------------------------------------------ rng

pub use ecstack_base::rng::Rng;

// ----------------------------------------------------------------------------------------- zipf

/// Zipf(n, s) on {1..n} by rejection-inversion (Hörmann & Derflinger 1996); O(1) set-up, so a new
/// sampler per draw is cheap when n grows.
#[derive(Debug, Clone, Copy)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    sc: f64,
}

fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))
    }
}

impl Zipf {
    pub fn new(n: u64, s: f64) -> Zipf {
        let n = n.max(1) as f64;
        let mut z = Zipf {
            n,
            s,
            h_x1: 0.0,
            h_n: 0.0,
            sc: 0.0,
        };
        z.h_x1 = z.hi(1.5) - 1.0;
        z.h_n = z.hi(n + 0.5);
        z.sc = 2.0 - z.hinv(z.hi(2.5) - z.h(2.0));
        z
    }
    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }
    fn hi(&self, x: f64) -> f64 {
        let lx = x.ln();
        helper2((1.0 - self.s) * lx) * lx
    }
    fn hinv(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }
    /// A rank in 1..=n (1 the most popular).
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        if self.s <= 0.0 {
            return 1 + rng.below(self.n as u64);
        }
        loop {
            let u = self.h_n + rng.next_f64() * (self.h_x1 - self.h_n);
            let x = self.hinv(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.sc || u >= self.hi(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }
}

/// A fixed pseudo-random map of ranks onto `[0, n)` (hot items spread over the space).
fn scatter(rank: u64, n: u64) -> u64 {
    let mut z = rank.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z ^= z >> 31;
    z % n.max(1)
}

// -------------------------------------------------------------------------------------- targets

/// File-level targets (file traces such as Harvard NFS).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileTargets {
    pub files: u64,
    pub updated_files_pct: f64,
}

/// Target statistics (definitions as in [`crate::analyze`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Targets {
    /// Volume name of the generated records.
    pub name: String,
    pub writes: u64,
    /// Bytes (sizes are whole 4 KiB blocks, geometric around this mean).
    pub avg_write_size: f64,
    /// EPLOG random writes, %.
    pub random_pct: f64,
    pub wss_bytes: u64,
    pub updated_wss_pct: f64,
    pub update_writes_pct: f64,
    /// Reads over reads + writes, %.
    pub read_pct: f64,
    /// Zipf skew of hot updates and re-reads (0 = uniform).
    pub zipf: f64,
    pub duration_s: f64,
    pub files: Option<FileTargets>,
}

impl Targets {
    /// Scale the sizes of the trace (writes, WSS, files) keeping every ratio.
    pub fn scaled(&self, scale: f64) -> Targets {
        let mut t = self.clone();
        if scale != 1.0 {
            t.writes = ((self.writes as f64 * scale).round() as u64).max(1);
            t.wss_bytes = ((self.wss_bytes as f64 * scale / BLOCK_SIZE as f64).round() as u64)
                .max(1)
                * BLOCK_SIZE;
            if let Some(f) = &mut t.files {
                f.files = ((f.files as f64 * scale).round() as u64).max(1);
            }
            t.duration_s *= scale;
        }
        t
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(TraceError::InvalidTarget(m));
        for (n, v) in [
            ("random_pct", self.random_pct),
            ("updated_wss_pct", self.updated_wss_pct),
            ("update_writes_pct", self.update_writes_pct),
        ] {
            if !(0.0..=100.0).contains(&v) {
                return bad(format!("{n} = {v} is not a percentage"));
            }
        }
        if !(0.0..100.0).contains(&self.read_pct) {
            return bad(format!("read_pct = {} must be in [0, 100)", self.read_pct));
        }
        if self.writes == 0 || self.wss_bytes < BLOCK_SIZE {
            return bad("need at least one write and one block of working set".into());
        }
        if self.avg_write_size.is_nan() || self.avg_write_size < BLOCK_SIZE as f64 {
            return bad(format!(
                "avg_write_size {} is below one {BLOCK_SIZE}-byte block",
                self.avg_write_size
            ));
        }
        let b = (self.wss_bytes / BLOCK_SIZE) as f64;
        let k = self.avg_write_size / BLOCK_SIZE as f64;
        let nu = (self.update_writes_pct / 100.0 * self.writes as f64).round();
        let nf = self.writes as f64 - nu;
        let nr = self.read_pct / (100.0 - self.read_pct) * self.writes as f64;
        if nf * k > b * 1.02 {
            return bad(format!(
                "{nf} first-writes of {:.1} KiB need {:.3} GiB, more than the WSS {:.3} GiB: raise WSS or update_writes_pct",
                self.avg_write_size / KIB,
                nf * k * BLOCK_SIZE as f64 / GIB,
                b * BLOCK_SIZE as f64 / GIB
            ));
        }
        let fresh_read = (b - nf * k).max(0.0);
        if fresh_read > b * 0.02 && fresh_read > nr * 256.0 {
            return bad(format!(
                "the WSS not covered by first-writes ({:.3} GiB) must be first read, but {nr:.0} reads of at most 1 MiB cannot cover it: raise read_pct",
                fresh_read * BLOCK_SIZE as f64 / GIB
            ));
        }
        let bu = self.updated_wss_pct / 100.0 * b;
        if bu > 0.0 && nu * k < bu {
            return bad(format!(
                "{nu} update writes of {:.1} KiB cannot cover {:.3} GiB of updated WSS: raise avg_write_size or lower updated_wss_pct",
                self.avg_write_size / KIB,
                bu * BLOCK_SIZE as f64 / GIB
            ));
        }
        if bu > 0.0 && nu == 0.0 {
            return bad("updated WSS without update writes".into());
        }
        if let Some(f) = &self.files {
            let fu = (f.updated_files_pct / 100.0 * f.files as f64).round();
            if f.files == 0 || fu as u64 > f.files {
                return bad("bad file counts".into());
            }
            if (f.files as f64) > b {
                return bad("more files than blocks of working set".into());
            }
            if (bu > 0.0) != (fu > 0.0) {
                return bad(
                    "updated WSS and updated files must both be zero or both positive".into(),
                );
            }
            if fu > bu || (f.files as f64 - fu) > (b - bu) {
                return bad("too many files for the working set split".into());
            }
        }
        Ok(())
    }
}

/// A streaming generator for [`Targets`].
///
/// Method: the working set is a linear space of B blocks, first accessed in address order by a
/// moving frontier (first-writes at the frontier, and "fresh" reads at the frontier for the part of
/// the WSS that first-writes do not cover). The first Bu = updated-WSS blocks form the update
/// region; update writes only go there, so exactly the right number of writes are first-writes vs
/// updates and no block outside the region is ever updated. Updates are either *cover* runs
/// (starting at the first not-yet-updated block of a random 256 KiB granule, adaptively frequent
/// enough to update every block of the region by the end) or *hot* runs (Zipf over the accessed
/// part of the region). Writes come in runs of sequential requests whose first request jumps
/// (≥ 64 KiB away from the previous write's end); run lengths are geometric with the mean that
/// keeps the random-write count on target. Reads are interleaved uniformly; fresh reads size
/// themselves adaptively so the WSS ends exactly at B, the rest re-read Zipf-hot blocks.
pub struct TargetGen {
    t: Targets,
    rng: Rng,
    b: u64,
    bu: u64,
    k: f64,
    w_total: u64,
    nu_total: u64,
    nf_total: u64,
    nr_total: u64,
    random_target: u64,
    // progress
    writes_done: u64,
    updates_done: u64,
    fresh_done: u64,
    reads_done: u64,
    random_done: u64,
    accessed_count: u64,
    updated_count: u64,
    frontier: u64,
    accessed: Vec<u64>,
    updated: Vec<u64>,
    pending_granules: Vec<u64>,
    granules_pushed: u64,
    prev_write_end: Option<u64>,
    run_left: u64,
    run_class: RunClass,
    run_pos: u64,
    time_ns: f64,
    mean_gap_ns: f64,
    queue: std::collections::VecDeque<Record>,
    files: Option<FileLayout>,
    read_k: f64,
    written_blocks: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunClass {
    Fresh,
    Update,
}

/// Files laid over the linear space: `fu` files over [0, bu), `fn_` files over [bu, b).
#[derive(Debug, Clone, Copy)]
struct FileLayout {
    fu: u64,
    fn_: u64,
    bu: u64,
    b: u64,
}

impl FileLayout {
    /// (file index, file start, file end) of linear block `a`.
    fn locate(&self, a: u64) -> (u64, u64, u64) {
        let span = |lo: u64, len: u64, n: u64, a: u64| -> (u64, u64, u64) {
            let i = (((a - lo) as u128 * n as u128) / len as u128) as u64;
            let start = |i: u64| lo + ((i as u128 * len as u128).div_ceil(n as u128)) as u64;
            // integer rounding can put a at the boundary of the next file
            let mut i = i.min(n - 1);
            while i + 1 < n && start(i + 1) <= a {
                i += 1;
            }
            while i > 0 && start(i) > a {
                i -= 1;
            }
            (i, start(i), start(i + 1))
        };
        if a < self.bu && self.fu > 0 {
            span(0, self.bu, self.fu, a)
        } else if self.fn_ > 0 && a < self.b {
            let (i, s, e) = span(self.bu, self.b - self.bu, self.fn_, a);
            (self.fu + i, s, e)
        } else {
            // beyond the planned space (holes pushed the frontier): one extra file per 1 MiB
            let i = (a - self.b) / 256;
            (
                self.fu + self.fn_ + i,
                self.b + i * 256,
                self.b + (i + 1) * 256,
            )
        }
    }
}

const GRANULE: u64 = 64;
const MAX_READ_BLOCKS: u64 = 256;

impl TargetGen {
    pub fn new(t: &Targets, seed: u64) -> Result<TargetGen> {
        t.validate()?;
        let b = t.wss_bytes / BLOCK_SIZE;
        let bu = ((t.updated_wss_pct / 100.0) * b as f64).round() as u64;
        let k = t.avg_write_size / BLOCK_SIZE as f64;
        let nu = ((t.update_writes_pct / 100.0) * t.writes as f64).round() as u64;
        let nf = t.writes - nu.min(t.writes);
        let nr = (t.read_pct / (100.0 - t.read_pct) * t.writes as f64).round() as u64;
        let total_ops = t.writes + nr;
        let files = t.files.as_ref().map(|f| {
            let fu = ((f.updated_files_pct / 100.0) * f.files as f64).round() as u64;
            FileLayout {
                fu,
                fn_: f.files - fu,
                bu,
                b,
            }
        });
        let fresh_read_blocks = (b as f64 - nf as f64 * k).max(0.0);
        let read_k = if nr > 0 {
            (fresh_read_blocks / nr as f64).max(k)
        } else {
            k
        };
        Ok(TargetGen {
            t: t.clone(),
            rng: Rng::new(seed ^ 0x7472_6163_6573_796e),
            b,
            bu,
            k,
            w_total: t.writes,
            nu_total: nu,
            nf_total: nf,
            nr_total: nr,
            random_target: ((t.random_pct / 100.0) * t.writes as f64).round() as u64,
            writes_done: 0,
            updates_done: 0,
            fresh_done: 0,
            reads_done: 0,
            random_done: 0,
            accessed_count: 0,
            updated_count: 0,
            frontier: 0,
            accessed: vec![0; (b as usize).div_ceil(64) + 1],
            updated: vec![0; (b as usize).div_ceil(64) + 1],
            pending_granules: Vec::new(),
            granules_pushed: 0,
            prev_write_end: None,
            run_left: 0,
            run_class: RunClass::Fresh,
            run_pos: 0,
            time_ns: 0.0,
            mean_gap_ns: t.duration_s * 1e9 / total_ops.max(1) as f64,
            queue: Default::default(),
            files,
            read_k,
            written_blocks: 0,
        })
    }

    fn is_acc(&self, a: u64) -> bool {
        self.accessed
            .get((a / 64) as usize)
            .is_some_and(|w| w & (1 << (a % 64)) != 0)
    }
    fn is_upd(&self, a: u64) -> bool {
        self.updated
            .get((a / 64) as usize)
            .is_some_and(|w| w & (1 << (a % 64)) != 0)
    }
    fn grow(&mut self, a: u64) {
        let need = (a / 64) as usize + 1;
        if need > self.accessed.len() {
            self.accessed.resize(need, 0);
            self.updated.resize(need, 0);
        }
    }
    fn mark_acc(&mut self, a0: u64, a1: u64) {
        self.grow(a1);
        for a in a0..a1 {
            let w = &mut self.accessed[(a / 64) as usize];
            if *w & (1 << (a % 64)) == 0 {
                *w |= 1 << (a % 64);
                self.accessed_count += 1;
            }
        }
    }

    /// The end (exclusive) of the extent allowed from `a`: file boundary, or `limit`.
    fn extent_end(&self, a: u64, limit: u64) -> u64 {
        match &self.files {
            Some(f) => f.locate(a).2.min(limit),
            None => limit,
        }
    }

    fn emit(&mut self, op: Op, a0: u64, a1: u64) {
        self.time_ns += self.rng.exp(self.mean_gap_ns);
        let (file, offset) = match &self.files {
            Some(f) => {
                let (i, s, _) = f.locate(a0);
                (i as u32 + 1, (a0 - s) * BLOCK_SIZE)
            }
            None => (0, a0 * BLOCK_SIZE),
        };
        self.queue.push_back(Record {
            time_ns: self.time_ns as u64,
            volume: 0,
            file,
            op,
            offset,
            len: (a1 - a0) * BLOCK_SIZE,
        });
    }

    /// Advance the frontier over `[f, f + n)`; newly passed granules of the update region become
    /// coverable.
    fn advance_frontier(&mut self, n: u64) {
        let f0 = self.frontier;
        self.mark_acc(f0, f0 + n);
        self.frontier += n;
        let done = self.frontier.min(self.bu) / GRANULE;
        while self.granules_pushed < done {
            self.pending_granules.push(self.granules_pushed);
            self.granules_pushed += 1;
        }
        if self.frontier >= self.bu && self.granules_pushed * GRANULE < self.bu {
            self.pending_granules.push(self.granules_pushed);
            self.granules_pushed += 1;
        }
    }

    fn remaining_fresh_read_blocks(&self) -> f64 {
        let expected_fresh_writes = (self.nf_total - self.fresh_done) as f64 * self.k;
        (self.b as f64 - self.accessed_count as f64 - expected_fresh_writes).max(0.0)
    }

    fn do_read(&mut self, force_fresh_min: u64) {
        self.reads_done += 1;
        let reads_left = (self.nr_total - self.reads_done + 1) as f64;
        let need = self.remaining_fresh_read_blocks();
        let fresh_reads_left = (need / self.read_k).ceil().min(reads_left);
        let fresh = force_fresh_min > 0
            || (need >= 1.0 && self.rng.next_f64() * reads_left < fresh_reads_left.max(1.0));
        if fresh && need >= 1.0 {
            let mean = (need / fresh_reads_left.max(1.0)).max(1.0);
            let mut n = self
                .rng
                .geometric(mean)
                .clamp(force_fresh_min.max(1), MAX_READ_BLOCKS);
            n = n
                .min(need.ceil() as u64)
                .max(force_fresh_min.min(need as u64))
                .max(1);
            let f = self.frontier;
            let end = self.extent_end(f, f + n);
            let n = (end - f).max(1);
            self.advance_frontier(n);
            self.emit(Op::Read, f, f + n);
            return;
        }
        // re-read: Zipf over the accessed space
        if self.frontier == 0 {
            // nothing accessed yet: read the frontier (counts toward the WSS)
            let f = self.frontier;
            let end = self.extent_end(f, f + 1);
            self.advance_frontier(end - f);
            self.emit(Op::Read, f, end);
            return;
        }
        let z = Zipf::new(self.frontier, self.t.zipf);
        for _ in 0..8 {
            let a = scatter(z.sample(&mut self.rng), self.frontier);
            if !self.is_acc(a) {
                continue;
            }
            let want = self.rng.geometric(self.k).min(MAX_READ_BLOCKS);
            let lim = self.extent_end(a, (a + want).min(self.frontier));
            let mut e = a + 1;
            while e < lim && self.is_acc(e) {
                e += 1;
            }
            self.emit(Op::Read, a, e);
            return;
        }
        // fall back to the first block
        self.emit(Op::Read, 0, 1);
    }

    fn is_jump_from(&self, p: u64, a: u64) -> bool {
        a.abs_diff(p) >= JUMP_BLOCKS
    }

    fn is_jump(&self, a: u64) -> bool {
        match self.prev_write_end {
            Some(p) => a.abs_diff(p) >= JUMP_BLOCKS,
            None => true,
        }
    }

    /// Start of a cover run (first not-yet-updated accessed block of a random pending granule).
    fn cover_start(&mut self) -> Option<u64> {
        for _ in 0..64 {
            if self.pending_granules.is_empty() {
                return None;
            }
            let i = self.rng.below(self.pending_granules.len() as u64) as usize;
            let g = self.pending_granules[i];
            let lo = g * GRANULE;
            let hi = ((g + 1) * GRANULE).min(self.bu).min(self.frontier);
            let mut found = None;
            for a in lo..hi {
                if self.is_acc(a) && !self.is_upd(a) {
                    found = Some(a);
                    break;
                }
            }
            match found {
                None => {
                    self.pending_granules.swap_remove(i);
                }
                Some(a) if self.is_jump(a) => return Some(a),
                Some(_) => {}
            }
        }
        None
    }

    fn hot_start(&mut self) -> Option<u64> {
        let n = self.frontier.min(self.bu);
        if n == 0 {
            return None;
        }
        let z = Zipf::new(n, self.t.zipf);
        for _ in 0..16 {
            let a = scatter(z.sample(&mut self.rng), n);
            if self.is_acc(a) && self.is_jump(a) {
                return Some(a);
            }
        }
        None
    }

    /// Emit an update write at `a` (sequential continuation or run start); returns false when no
    /// block can be written there.
    fn update_write(&mut self, a: u64) -> bool {
        if a >= self.bu.min(self.frontier) || !self.is_acc(a) {
            return false;
        }
        let want = self.rng.geometric(self.write_mean());
        let lim = self.extent_end(a, (a + want).min(self.bu).min(self.frontier));
        let mut e = a + 1;
        while e < lim && self.is_acc(e) {
            e += 1;
        }
        for x in a..e {
            let w = &mut self.updated[(x / 64) as usize];
            if *w & (1 << (x % 64)) == 0 {
                *w |= 1 << (x % 64);
                self.updated_count += 1;
            }
        }
        self.finish_write(a, e);
        self.updates_done += 1;
        true
    }

    fn fresh_write(&mut self, limit_blocks: Option<u64>) {
        let f = self.frontier;
        let left = self.nf_total - self.fresh_done;
        let want = if self.nr_total == 0 {
            // No reads: first-writes alone must build the WSS.
            let need = (self.b - self.accessed_count.min(self.b)) as f64;
            self.rng.geometric((need / left.max(1) as f64).max(1.0))
        } else {
            self.rng.geometric(self.write_mean())
        };
        let want = limit_blocks.map_or(want, |l| want.min(l)).max(1);
        let e = self.extent_end(f, f + want);
        self.advance_frontier(e - f);
        self.finish_write(f, e);
        self.fresh_done += 1;
    }

    /// Mean size of the next write: the target mean, corrected for what truncation at region and
    /// file ends has cost so far.
    fn write_mean(&self) -> f64 {
        let left = (self.w_total - self.writes_done).max(1) as f64;
        let need = self.k * self.w_total as f64 - self.written_blocks as f64;
        (need / left).clamp(1.0, 4.0 * self.k)
    }

    fn finish_write(&mut self, a0: u64, a1: u64) {
        self.written_blocks += a1 - a0;
        if self.writes_done > 0 && self.is_jump(a0) {
            self.random_done += 1;
        }
        self.writes_done += 1;
        self.emit(Op::Write, a0, a1);
        self.prev_write_end = Some(a1);
        self.run_pos = a1;
    }

    fn plan_run(&mut self) -> u64 {
        let left = self.w_total - self.writes_done;
        let rand_left = self.random_target.saturating_sub(self.random_done);
        if rand_left == 0 {
            return u64::MAX / 4;
        }
        self.rng.geometric(left as f64 / rand_left as f64)
    }

    fn do_write(&mut self) {
        let fresh_left = self.nf_total - self.fresh_done;
        let upd_left = self.nu_total - self.updates_done;
        // Continue the current run when possible.
        if self.run_left > 0 {
            let cont = match self.run_class {
                RunClass::Fresh if fresh_left > 0 => {
                    let at_boundary = self
                        .files
                        .as_ref()
                        .is_some_and(|f| f.locate(self.frontier).1 == self.frontier);
                    if self.run_pos == self.frontier && !at_boundary {
                        self.fresh_write(None);
                        true
                    } else {
                        false
                    }
                }
                RunClass::Update if upd_left > 0 => {
                    let a = self.run_pos;
                    let at_boundary = self.files.as_ref().is_some_and(|f| f.locate(a).1 == a);
                    !at_boundary && self.update_write(a)
                }
                _ => false,
            };
            if cont {
                self.run_left -= 1;
                return;
            }
        }
        // Start a new run (a jump).
        self.run_left = self.plan_run().saturating_sub(1);
        let can_update = self.frontier.min(self.bu) > 0 && upd_left > 0;
        // A fresh run right after a write that ended at the frontier could not jump; prefer an
        // update run then (holes or inserted reads are the fallback when updates are scarce).
        let after_fresh = self
            .prev_write_end
            .is_some_and(|p| !self.is_jump_from(p, self.frontier));
        let update = can_update
            && (fresh_left == 0
                || (after_fresh && upd_left >= fresh_left)
                || self.rng.below(fresh_left + upd_left) < upd_left);
        if update {
            self.run_class = RunClass::Update;
            let uncovered = self.bu - self.updated_count;
            let cover_p = (uncovered as f64 * 1.3 / (upd_left as f64 * self.k).max(1.0)).min(1.0);
            let start = if self.rng.next_f64() < cover_p {
                self.cover_start().or_else(|| self.hot_start())
            } else {
                self.hot_start().or_else(|| self.cover_start())
            };
            if let Some(a) = start {
                if self.update_write(a) {
                    return;
                }
            }
            if fresh_left == 0 {
                // Nothing better: update block 0 (keeps the counts exact).
                if !self.update_write(0) {
                    self.fresh_write(None);
                }
                return;
            }
        }
        // Fresh run: must jump away from the previous write's end.
        self.run_class = RunClass::Fresh;
        if self.writes_done > 0 && !self.is_jump(self.frontier) {
            let reads_left = self.nr_total - self.reads_done;
            let gap = JUMP_BLOCKS - self.frontier.abs_diff(self.prev_write_end.unwrap_or(0));
            if reads_left > 0 && self.remaining_fresh_read_blocks() >= gap as f64 {
                self.do_read(gap);
            } else {
                // leave a hole nobody accesses
                self.frontier += gap;
                self.grow(self.frontier);
            }
        }
        self.fresh_write(None);
    }

    /// The next record, `None` when the trace is complete.
    pub fn next_record(&mut self) -> Option<Record> {
        loop {
            if let Some(r) = self.queue.pop_front() {
                return Some(r);
            }
            let w_left = self.w_total - self.writes_done;
            let r_left = self.nr_total - self.reads_done;
            if w_left == 0 && r_left == 0 {
                return None;
            }
            if self.rng.below(w_left + r_left) < r_left {
                self.do_read(0);
            } else {
                self.do_write();
            }
        }
    }
}

impl Iterator for TargetGen {
    type Item = Record;
    fn next(&mut self) -> Option<Record> {
        self.next_record()
    }
}

// ------------------------------------------------------------------------------------- patterns

/// IOzone-style: sequential pre-write of `wss` in `record`-sized writes, then `updates` uniform
/// random record-aligned `record`-sized updates (CodFS §5.2.2).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UniformSpec {
    pub name: String,
    pub wss_bytes: u64,
    pub record: u64,
    pub updates: u64,
    pub duration_s: f64,
}

/// YCSB-style: load `records` fixed-size records sequentially, then `ops` operations, `read_pct`
/// of them reads, each on a Zipf(`theta`) record (scrambled over the key space).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ZipfSpec {
    pub name: String,
    pub records: u64,
    pub record: u64,
    pub ops: u64,
    pub read_pct: f64,
    pub theta: f64,
    pub duration_s: f64,
}

fn coprime_multiplier(n: u64) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let mut a = 0x9e37_79b9u64 % n.max(2);
    if a == 0 {
        a = 1;
    }
    while gcd(a, n) != 1 {
        a += 1;
    }
    a
}

struct PatternGen {
    rng: Rng,
    slots: u64,
    record: u64,
    prewrite_left: u64,
    next_pre: u64,
    ops_left: u64,
    reads_left: u64,
    zipf: Option<Zipf>,
    mult: u64,
    time_ns: f64,
    gap_ns: f64,
}

impl PatternGen {
    fn slot(&mut self) -> u64 {
        match &self.zipf {
            Some(z) => {
                ((z.sample(&mut self.rng) - 1) as u128 * self.mult as u128 % self.slots as u128)
                    as u64
            }
            None => self.rng.below(self.slots),
        }
    }
    fn next_record(&mut self) -> Option<Record> {
        self.time_ns += self.rng.exp(self.gap_ns);
        let mk = |op, slot: u64, t: f64, rec: u64| Record {
            time_ns: t as u64,
            volume: 0,
            file: 0,
            op,
            offset: slot * rec,
            len: rec,
        };
        if self.prewrite_left > 0 {
            self.prewrite_left -= 1;
            let s = self.next_pre;
            self.next_pre += 1;
            return Some(mk(Op::Write, s, self.time_ns, self.record));
        }
        if self.ops_left == 0 {
            return None;
        }
        let read = self.rng.below(self.ops_left) < self.reads_left;
        self.ops_left -= 1;
        if read {
            self.reads_left -= 1;
        }
        let s = self.slot();
        Some(mk(
            if read { Op::Read } else { Op::Write },
            s,
            self.time_ns,
            self.record,
        ))
    }
}

// -------------------------------------------------------------------------------------- presets

/// How a preset generates.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Generator {
    Targets(Targets),
    Uniform(UniformSpec),
    Zipf(ZipfSpec),
}

/// A named workload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Preset {
    pub name: String,
    /// Where the numbers come from.
    pub source: String,
    pub generator: Generator,
}

/// A metric checked by the round trip `analyze(synthesize(preset))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Writes,
    AvgWriteSize,
    RandomPct,
    WssBytes,
    UpdatedWssPct,
    UpdateWritesPct,
    ReadPct,
    UpdatedFilesPct,
    FilesAccessed,
    AvgUpdateSize,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Writes => "writes",
            Metric::AvgWriteSize => "avg_write_size",
            Metric::RandomPct => "random_write_pct",
            Metric::WssBytes => "wss_bytes",
            Metric::UpdatedWssPct => "updated_wss_pct",
            Metric::UpdateWritesPct => "update_writes_pct",
            Metric::ReadPct => "read_pct",
            Metric::UpdatedFilesPct => "updated_files_pct",
            Metric::FilesAccessed => "files_accessed",
            Metric::AvgUpdateSize => "avg_update_size",
        }
    }
    pub fn measure(self, v: &VolumeReport) -> f64 {
        match self {
            Metric::Writes => v.writes as f64,
            Metric::AvgWriteSize => v.avg_write_size,
            Metric::RandomPct => v.random_write_pct,
            Metric::WssBytes => v.wss_bytes as f64,
            Metric::UpdatedWssPct => v.updated_wss_pct,
            Metric::UpdateWritesPct => v.update_writes_pct,
            Metric::ReadPct => v.read_pct,
            Metric::UpdatedFilesPct => v.updated_files_pct.unwrap_or(0.0),
            Metric::FilesAccessed => v.files_accessed.unwrap_or(0) as f64,
            Metric::AvgUpdateSize => v.avg_update_size,
        }
    }
    fn is_pct(self) -> bool {
        matches!(
            self,
            Metric::RandomPct
                | Metric::UpdatedWssPct
                | Metric::UpdateWritesPct
                | Metric::ReadPct
                | Metric::UpdatedFilesPct
        )
    }
}

/// One target vs measured value.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub metric: Metric,
    pub target: f64,
    pub measured: f64,
    /// Relative error (percentage metrics: relative, but at least 1 point counts as 1%).
    pub error: f64,
    pub ok: bool,
}

impl Preset {
    /// The statistics a synthesized trace at `scale` should show.
    pub fn expected(&self, scale: f64) -> Vec<(Metric, f64)> {
        match &self.generator {
            Generator::Targets(t) => {
                let t = t.scaled(scale);
                let mut v = vec![
                    (Metric::Writes, t.writes as f64),
                    (Metric::AvgWriteSize, t.avg_write_size),
                    (Metric::RandomPct, t.random_pct),
                    (Metric::WssBytes, t.wss_bytes as f64),
                    (Metric::UpdatedWssPct, t.updated_wss_pct),
                    (Metric::UpdateWritesPct, t.update_writes_pct),
                    (Metric::ReadPct, t.read_pct),
                ];
                if let Some(f) = &t.files {
                    v.push((Metric::FilesAccessed, f.files as f64));
                    v.push((Metric::UpdatedFilesPct, f.updated_files_pct));
                    // Table 3.1 publishes the average update size; updates share the write sizes
                    v.push((Metric::AvgUpdateSize, t.avg_write_size));
                }
                v
            }
            Generator::Uniform(u) => {
                let u = scale_uniform(u, scale);
                let slots = (u.wss_bytes / u.record) as f64;
                let writes = slots + u.updates as f64;
                let upd = 1.0 - (1.0 - 1.0 / slots).powf(u.updates as f64);
                // an update is sequential only when it lands on the slot after the previous one
                let random = u.updates as f64 * (1.0 - 1.0 / slots);
                vec![
                    (Metric::Writes, writes),
                    (Metric::AvgWriteSize, u.record as f64),
                    (Metric::RandomPct, 100.0 * random / writes),
                    (Metric::WssBytes, slots * u.record as f64),
                    (Metric::UpdatedWssPct, 100.0 * upd),
                    (Metric::UpdateWritesPct, 100.0 * u.updates as f64 / writes),
                    (Metric::ReadPct, 0.0),
                ]
            }
            Generator::Zipf(z) => {
                let z = scale_zipf(z, scale);
                let n = z.records;
                let reads = (z.ops as f64 * z.read_pct / 100.0).round();
                let updates = z.ops as f64 - reads;
                let writes = n as f64 + updates;
                // exact Zipf probabilities, placed at their scrambled positions
                let h: f64 = (1..=n).map(|i| (i as f64).powf(-z.theta)).sum();
                let mult = coprime_multiplier(n);
                let mut p_at = vec![0.0; n as usize];
                let mut upd = 0.0;
                for i in 1..=n {
                    let p = (i as f64).powf(-z.theta) / h;
                    p_at[((i - 1) as u128 * mult as u128 % n as u128) as usize] = p;
                    upd += 1.0 - (1.0 - p).powf(updates);
                }
                // P(an update starts within 64 KiB of the previous update's end)
                let w = (RANDOM_JUMP / z.record.max(1)).max(1) as i64;
                let mut seq = 0.0;
                let prefix: Vec<f64> = std::iter::once(0.0)
                    .chain(p_at.iter().scan(0.0, |s, p| {
                        *s += p;
                        Some(*s)
                    }))
                    .collect();
                for (q, p) in p_at.iter().enumerate() {
                    // positions b with |b - (q+1)| < w  (in record units; records >= 4 KiB)
                    let lo = (q as i64 + 1 - w + 1).max(0) as usize;
                    let hi = ((q as i64 + 1 + w) as usize).min(n as usize);
                    if lo < hi {
                        seq += p * (prefix[hi] - prefix[lo]);
                    }
                }
                let random = updates * (1.0 - seq);
                vec![
                    (Metric::Writes, writes),
                    (Metric::AvgWriteSize, z.record as f64),
                    (Metric::RandomPct, 100.0 * random / writes),
                    (Metric::WssBytes, (n * z.record) as f64),
                    (Metric::UpdatedWssPct, 100.0 * upd / n as f64),
                    (Metric::UpdateWritesPct, 100.0 * updates / writes),
                    (Metric::ReadPct, 100.0 * reads / (reads + writes)),
                ]
            }
        }
    }

    /// Compare a report row against [`Preset::expected`]; `tolerance` is relative (0.03 = 3%).
    pub fn check(&self, v: &VolumeReport, scale: f64, tolerance: f64) -> Vec<Check> {
        self.expected(scale)
            .into_iter()
            .map(|(metric, target)| {
                let measured = metric.measure(v);
                let denom = if metric.is_pct() {
                    target.abs().max(33.3)
                } else {
                    target.abs().max(1e-9)
                };
                let error = (measured - target).abs() / denom;
                Check {
                    metric,
                    target,
                    measured,
                    error,
                    ok: error <= tolerance,
                }
            })
            .collect()
    }
}

fn scale_uniform(u: &UniformSpec, scale: f64) -> UniformSpec {
    let mut u = u.clone();
    let slots = ((u.wss_bytes / u.record) as f64 * scale).round().max(1.0) as u64;
    u.wss_bytes = slots * u.record;
    u.updates = ((u.updates as f64 * scale).round() as u64).max(1);
    u
}

fn scale_zipf(z: &ZipfSpec, scale: f64) -> ZipfSpec {
    let mut z = z.clone();
    z.records = ((z.records as f64 * scale).round() as u64).max(1);
    z.ops = ((z.ops as f64 * scale).round() as u64).max(1);
    z
}

fn gib(x: f64) -> u64 {
    ((x * GIB / BLOCK_SIZE as f64).round() as u64) * BLOCK_SIZE
}

const WEEK_S: f64 = 7.0 * 86400.0;

#[allow(clippy::too_many_arguments)]
fn t(
    name: &str,
    writes: u64,
    avg_kib: f64,
    random: f64,
    wss_gib: f64,
    upd_wss: f64,
    upd_wr: f64,
    read: f64,
    duration_s: f64,
) -> Targets {
    Targets {
        name: name.into(),
        writes,
        avg_write_size: avg_kib * KIB,
        random_pct: random,
        wss_bytes: gib(wss_gib),
        updated_wss_pct: upd_wss,
        update_writes_pct: upd_wr,
        read_pct: read,
        zipf: 0.9,
        duration_s,
        files: None,
    }
}

/// Every preset. Values the seeds publish are cited in `source`; the others are stated assumptions
/// (see docs/traces.md).
pub fn presets() -> Vec<Preset> {
    let mut v = Vec::new();
    let mut p = |name: &str, source: &str, g: Generator| {
        v.push(Preset {
            name: name.into(),
            source: source.into(),
            generator: g,
        })
    };
    // EPLOG Table 2 (writes, avg write size, random %, WSS). Updated-WSS % and update-writes % of
    // WEB/USR/MDS are those of the same MSR volumes (web0, usr0, mds0) in CodFS Table 3.2; FIN's
    // and every read % are assumptions.
    let eplog = "EPLOG Table 2 (writes, avg size, random %, WSS)";
    p(
        "eplog-fin",
        &format!("{eplog}; upd WSS 60%, upd writes 90%, reads 23% assumed"),
        Generator::Targets(t(
            "FIN",
            4_110_563,
            7.19,
            76.17,
            3.67,
            60.0,
            90.0,
            23.0,
            12.0 * 3600.0,
        )),
    );
    p(
        "eplog-web",
        &format!("{eplog}; upd WSS/writes of web0 (CodFS Table 3.2); reads 30% assumed"),
        Generator::Targets(t(
            "WEB", 1_431_628, 12.50, 77.62, 7.26, 37.25, 96.23, 30.0, WEEK_S,
        )),
    );
    p(
        "eplog-usr",
        &format!("{eplog}; upd WSS/writes of usr0 (CodFS Table 3.2); reads 40% assumed"),
        Generator::Targets(t(
            "USR", 1_363_855, 10.05, 76.19, 2.44, 42.54, 96.08, 40.0, WEEK_S,
        )),
    );
    p(
        "eplog-mds",
        &format!("{eplog}; upd WSS/writes of mds0 (CodFS Table 3.2); reads 12% assumed"),
        Generator::Targets(t(
            "MDS", 1_069_421, 7.22, 82.99, 3.09, 29.27, 95.77, 12.0, WEEK_S,
        )),
    );
    // CodFS Table 3.2, the ten volumes selected for evaluation (writes, WSS, upd WSS %, upd writes
    // %). Avg write size and random % from EPLOG Table 2 where the volume is the same; otherwise
    // 8 KiB (larger where the updated WSS needs it) and 75% random; read % assumed.
    let codfs = "CodFS Table 3.2 (writes, WSS, upd WSS %, upd writes %)";
    type Row = (&'static str, u64, f64, f64, f64, f64, f64, f64);
    let msr: [Row; 10] = [
        // name, writes, wss GiB, upd wss %, upd writes %, avg KiB, random %, read %
        ("src22", 805_955, 20.17, 99.57, 99.68, 48.0, 75.0, 50.0),
        ("mds0", 1_067_061, 3.09, 29.27, 95.77, 7.22, 82.99, 12.0),
        ("rsrch0", 1_300_030, 0.36, 69.53, 97.41, 8.0, 75.0, 10.0),
        ("usr0", 1_333_406, 2.44, 42.54, 96.08, 10.05, 76.19, 40.0),
        ("web0", 1_423_458, 7.26, 37.25, 96.23, 12.50, 77.62, 30.0),
        ("ts0", 1_485_042, 0.91, 49.84, 95.65, 8.0, 75.0, 18.0),
        ("stg0", 1_722_478, 6.31, 21.04, 97.82, 8.0, 75.0, 15.0),
        ("hm0", 2_575_568, 2.31, 73.16, 93.21, 8.0, 75.0, 35.0),
        ("prn1", 2_769_610, 80.9, 18.55, 73.43, 16.0, 75.0, 25.0),
        ("proj0", 3_697_143, 3.16, 56.67, 98.89, 8.0, 75.0, 12.0),
    ];
    for (name, w, wss, uw, up, kib, rnd, rd) in msr {
        p(
            &format!("msr-{name}"),
            &format!("{codfs}; avg size {kib} KiB, random {rnd}%, reads {rd}%"),
            Generator::Targets(t(name, w, kib, rnd, wss, uw, up, rd, WEEK_S)),
        );
    }
    // CodFS Table 3.1: Harvard DEAS03 NFS.
    let mut h = t(
        "deas03",
        172_702_071,
        10.58,
        50.0,
        174.73,
        68.39,
        91.56,
        30.0,
        41.0 * 86400.0,
    );
    h.files = Some(FileTargets {
        files: 2_039_724,
        updated_files_pct: 12.10,
    });
    p("harvard-deas03",
        "CodFS Table 3.1 (writes, WSS, upd WSS %, upd writes %, files, upd files %, avg update size); random 50% and reads 30% assumed; use --scale (full size is 173M writes)",
        Generator::Targets(h));
    // CodFS §5.2.2: IOzone uniform random 128 KiB updates, 16 MiB of updates per 16 MiB segment.
    p("iozone-128k",
        "CodFS §5.2.2: sequential pre-write, then uniform random 128 KiB record updates, 16 MiB of updates per 16 MiB segment (1 GiB = 64 segments)",
        Generator::Uniform(UniformSpec {
            name: "iozone".into(),
            wss_bytes: 1 << 30,
            record: 128 << 10,
            updates: (1 << 30) / (128 << 10),
            duration_s: 600.0,
        }));
    // YCSB workload A style: 50/50 reads/updates, Zipf 0.99, 4 KiB records.
    p("ycsb-zipf099",
        "YCSB-style (workload A): load 1 GiB of 4 KiB records, then 1M ops, 50% reads / 50% updates, Zipf 0.99 scrambled",
        Generator::Zipf(ZipfSpec {
            name: "ycsb".into(),
            records: 262_144,
            record: 4096,
            ops: 1_000_000,
            read_pct: 50.0,
            theta: 0.99,
            duration_s: 600.0,
        }));
    v
}

/// Names of every preset.
pub fn preset_names() -> Vec<String> {
    presets().into_iter().map(|p| p.name).collect()
}

/// Look a preset up by name.
pub fn preset(name: &str) -> Result<Preset> {
    presets()
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| TraceError::UnknownPreset(name.into()))
}

/// A synthesized trace held in memory.
#[derive(Debug, Clone)]
pub struct SynthTrace {
    pub records: Vec<Record>,
    pub volumes: Names,
}

/// A streaming synthesizer (for traces too large for memory).
pub struct SynthStream {
    inner: StreamInner,
    volumes: Names,
}

enum StreamInner {
    Targets(Box<TargetGen>),
    Pattern(PatternGen),
}

impl SynthStream {
    pub fn new(g: &Generator, scale: f64, seed: u64) -> Result<SynthStream> {
        let mut volumes = Names::new();
        let inner = match g {
            Generator::Targets(t) => {
                let t = t.scaled(scale);
                volumes.intern(t.name.as_bytes());
                StreamInner::Targets(Box::new(TargetGen::new(&t, seed)?))
            }
            Generator::Uniform(u) => {
                let u = scale_uniform(u, scale);
                if u.record == 0 || u.wss_bytes < u.record {
                    return Err(TraceError::InvalidTarget("record larger than WSS".into()));
                }
                volumes.intern(u.name.as_bytes());
                let slots = u.wss_bytes / u.record;
                StreamInner::Pattern(PatternGen {
                    rng: Rng::new(seed),
                    slots,
                    record: u.record,
                    prewrite_left: slots,
                    next_pre: 0,
                    ops_left: u.updates,
                    reads_left: 0,
                    zipf: None,
                    mult: 1,
                    time_ns: 0.0,
                    gap_ns: u.duration_s * 1e9 / (slots + u.updates) as f64,
                })
            }
            Generator::Zipf(z) => {
                let z = scale_zipf(z, scale);
                if z.record == 0 || z.records == 0 {
                    return Err(TraceError::InvalidTarget("empty key space".into()));
                }
                volumes.intern(z.name.as_bytes());
                let reads = (z.ops as f64 * z.read_pct / 100.0).round() as u64;
                StreamInner::Pattern(PatternGen {
                    rng: Rng::new(seed),
                    slots: z.records,
                    record: z.record,
                    prewrite_left: z.records,
                    next_pre: 0,
                    ops_left: z.ops,
                    reads_left: reads.min(z.ops),
                    zipf: Some(Zipf::new(z.records, z.theta)),
                    mult: coprime_multiplier(z.records),
                    time_ns: 0.0,
                    gap_ns: z.duration_s * 1e9 / (z.records + z.ops) as f64,
                })
            }
        };
        Ok(SynthStream { inner, volumes })
    }
    pub fn volumes(&self) -> &Names {
        &self.volumes
    }
}

impl Iterator for SynthStream {
    type Item = Record;
    fn next(&mut self) -> Option<Record> {
        match &mut self.inner {
            StreamInner::Targets(g) => g.next_record(),
            StreamInner::Pattern(g) => g.next_record(),
        }
    }
}

/// Synthesize from a generator into memory.
pub fn synthesize(g: &Generator, scale: f64, seed: u64) -> Result<SynthTrace> {
    let s = SynthStream::new(g, scale, seed)?;
    let volumes = s.volumes().clone();
    Ok(SynthTrace {
        records: s.collect(),
        volumes,
    })
}

/// Synthesize a named preset into memory (`scale` 1.0 = the published size).
pub fn synthesize_preset(name: &str, scale: f64, seed: u64) -> Result<SynthTrace> {
    synthesize(&preset(name)?.generator, scale, seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = Rng::new(1);
        let mut ones = 0;
        for _ in 0..100_000 {
            let k = z.sample(&mut rng);
            assert!((1..=1000).contains(&k));
            if k == 1 {
                ones += 1;
            }
        }
        // P(1) = 1/H(1000, 0.99) ~ 0.133
        assert!((11_000..15_500).contains(&ones), "{ones}");
    }

    #[test]
    fn geometric_mean() {
        let mut rng = Rng::new(7);
        let n = 200_000;
        let s: u64 = (0..n).map(|_| rng.geometric(2.5)).sum();
        let m = s as f64 / n as f64;
        assert!((m - 2.5).abs() < 0.03, "{m}");
    }

    #[test]
    fn file_layout_is_consistent() {
        let l = FileLayout {
            fu: 7,
            fn_: 13,
            bu: 100,
            b: 250,
        };
        let mut prev = (0, 0, 0);
        for a in 0..250 {
            let (i, s, e) = l.locate(a);
            assert!(s <= a && a < e, "{a}: {s}..{e}");
            assert!(i >= prev.0);
            prev = (i, s, e);
        }
        assert_eq!(l.locate(249).0, 19);
    }
}
