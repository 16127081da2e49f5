//! MTTDL of a CodFS cluster (docs/cluster.md): N OSDs, S segments coded k-of-n (n = k + m), the n
//! chunks of each segment on n distinct OSDs, a failed OSD's chunks rebuilt by the segments'
//! primaries on the surviving OSDs (CodFS §4.5: recovery is spread over the cluster).
//!
//! State j: j OSDs failed and no segment lost yet. A segment is lost when more than m of its
//! chunks are on failed OSDs. With placement uniform over n-subsets and independent per segment,
//! one segment has more than m chunks on a set of j failed OSDs with the hypergeometric tail
//!
//! ```text
//!   h_j = Σ_{x=m+1..min(n,j)} C(j,x) C(N-j,n-x) / C(N,n),   and no segment does with (1-h_j)^S.
//! ```
//!
//! The failure that takes state j to j+1 loses data with the conditional probability
//! c_j = 1 - ((1-h_{j+1}) / (1-h_j))^S (the failed set taken as uniformly random; exact for j ≤ m,
//! where no set is fatal yet). Chain:
//!
//! ```text
//!          Nλ           (N-1)λ(1-c_1)       (N-j)λ(1-c_j)
//!   0 ─────────▶ 1 ─────────────▶ 2 ··· j ─────────────▶ j+1 ···  J ──(N-J)λ──▶ LOSS
//!     ◀───────── ◀─────────────         ◀─────────────
//!        ρ_1          ρ_2                  ρ_{j+1}           (N-j)λ·c_j: j ──▶ LOSS
//! ```
//!
//! Recovery: the j failed OSDs are detected (out after `detect_hours`) and rebuilt together; the
//! survivors share the work, each rebuilding at `osd_recovery_bytes_per_sec`, so the lost bytes
//! j·C (C = bytes per OSD) take j·C / ((N-j)·r) and one OSD comes back at the rate
//! ρ_j = j / (detect + j·C / ((N-j)·r)): CodFS's recovery parallelism (more OSDs, shorter
//! rebuild). The rebuilt chunks return to a replacement OSD (placement unchanged).
//!
//! URE: the failure that leaves m failed OSDs starts rebuilds of the segments with m lost chunks,
//! each reading k chunks with no redundancy left; on average S·C(N-m, n-m)/C(N,n) such segments.
//! J is the last state whose probability of no lost segment is above 1e-12 (and at most
//! [`STATES_MAX`] − 1); the failure beyond it is counted as loss.

use ecstack_base::Rng;

use super::chain::Chain;
use super::model::ReliabilityModel;
use super::montecarlo::{lognormal_factor, Events, Lifetime, MonteCarloModel, RepairTimes};
use super::params::{check_uber, invalid, positive, ure_probability, ReliabilityError};

#[derive(Clone, Debug, serde::Serialize)]
pub struct ClusterModel {
    pub osds: usize,
    pub k: usize,
    pub m: usize,
    /// Segments stored (each k data + m parity chunks).
    pub segments: f64,
    /// Bytes of one chunk (segment size / k).
    pub chunk_bytes: f64,
    /// MTTF of one OSD (hours).
    pub mttf_hours: f64,
    /// Rebuild throughput of one surviving OSD (bytes of lost chunks rebuilt per second): the
    /// cluster's measured recovery throughput divided by its surviving OSDs, or `[mds]
    /// recovery_bytes_per_sec` when that pace is the bottleneck.
    pub osd_recovery_bytes_per_sec: f64,
    /// Time from a failure until recovery starts: down_after + out_after (hours).
    pub detect_hours: f64,
    /// Unrecoverable read errors per bit read (0: none).
    pub uber: f64,
}

/// ln C(n, r).
fn ln_choose(n: usize, r: usize) -> f64 {
    if r > n {
        return f64::NEG_INFINITY;
    }
    let r = r.min(n - r);
    (0..r)
        .map(|i| ((n - i) as f64).ln() - ((i + 1) as f64).ln())
        .sum()
}

/// At most this many states (failed OSDs 0..STATES_MAX-1): the failure beyond the last counts as
/// loss. Reaching hundreds of concurrent failures has a negligible probability whenever the MTTDL
/// is worth computing; the bound keeps the dense solve small.
pub const STATES_MAX: usize = 512;

/// Above this many segments the Monte-Carlo (which places every segment) refuses.
pub const MC_SEGMENTS_MAX: f64 = 1e6;

impl ClusterModel {
    pub fn validate(&self) -> Result<(), ReliabilityError> {
        const OSDS_MAX: usize = 100_000;
        if self.k == 0 || self.k + self.m > 255 {
            return Err(invalid(format!(
                "a segment needs k >= 1 and k + m <= 255 chunks, got k = {}, m = {}",
                self.k, self.m
            )));
        }
        if self.osds < self.n() || self.osds > OSDS_MAX {
            return Err(invalid(format!(
                "a cluster of RS({}, {}) needs at least n = {} OSDs (and at most {OSDS_MAX}), got {}",
                self.k,
                self.m,
                self.n(),
                self.osds
            )));
        }
        if !(self.segments.is_finite() && self.segments >= 1.0) {
            return Err(invalid(format!(
                "the cluster must hold at least 1 segment, got {}",
                self.segments
            )));
        }
        positive("chunk size", "bytes", self.chunk_bytes, false)?;
        positive("OSD MTTF", "hours", self.mttf_hours, false)?;
        positive(
            "recovery throughput per OSD",
            "bytes/s",
            self.osd_recovery_bytes_per_sec,
            false,
        )?;
        positive("detection delay", "hours", self.detect_hours, true)?;
        check_uber(self.uber)
    }

    pub fn n(&self) -> usize {
        self.k + self.m
    }

    /// Average bytes of chunks one OSD holds.
    pub fn osd_bytes(&self) -> f64 {
        self.segments * self.n() as f64 * self.chunk_bytes / self.osds as f64
    }

    /// Hours to rebuild one failed OSD alone (no other failure): detection plus C / ((N-1)·r).
    pub fn single_rebuild_hours(&self) -> f64 {
        self.detect_hours + self.rebuild_hours(1)
    }

    /// Hours for the survivors to rebuild the chunks of `j` failed OSDs (without detection).
    fn rebuild_hours(&self, j: usize) -> f64 {
        j as f64 * self.osd_bytes()
            / ((self.osds - j) as f64 * self.osd_recovery_bytes_per_sec)
            / 3600.0
    }

    /// ln(1 - h_j): the log probability that one segment keeps at most m chunks on j failed OSDs.
    fn ln_segment_survives(&self, j: usize) -> f64 {
        let (nn, n, m) = (self.osds, self.n(), self.m);
        if j <= m {
            return 0.0;
        }
        let total = ln_choose(nn, n);
        // Sum the survivable side (x <= m) when it is the smaller one; either way no cancellation
        // that matters at the precision needed.
        let lost: f64 = (m + 1..=n.min(j))
            .filter(|&x| n - x <= nn - j)
            .map(|x| (ln_choose(j, x) + ln_choose(nn - j, n - x) - total).exp())
            .sum();
        if lost >= 1.0 {
            return f64::NEG_INFINITY;
        }
        (-lost).ln_1p()
    }

    /// Probability that a failure taking j failed OSDs to j+1 loses a segment, given none was lost.
    pub fn loss_on_failure(&self, j: usize) -> f64 {
        let a = self.ln_segment_survives(j);
        let b = self.ln_segment_survives(j + 1);
        if b == f64::NEG_INFINITY {
            return 1.0;
        }
        -(self.segments * (b - a)).exp_m1()
    }

    /// Expected segments with chunks on all of m given failed OSDs.
    pub fn critical_segments(&self) -> f64 {
        let (nn, n, m) = (self.osds, self.n(), self.m);
        self.segments * (ln_choose(nn - m, n - m) - ln_choose(nn, n)).exp()
    }

    /// Placement as in `one_run`; explicit per-OSD detection times and remaining bytes.
    fn one_fluid_run(&self, rng: &mut Rng, failures: &mut u64, times: RepairTimes) -> Lifetime {
        let nn = self.osds;
        let mut chunks = LostChunks::new(self, rng);
        let mut fails_at: Vec<f64> = (0..nn).map(|_| rng.exp(self.mttf_hours)).collect();
        let mut failed = vec![false; nn];
        let mut detected_at = vec![f64::INFINITY; nn];
        // Bytes left to rebuild, in "hours of one survivor's pace" (bytes / r / 3600).
        let mut left = vec![0.0f64; nn];
        let mut down = 0usize;
        let work = self.osd_bytes() / self.osd_recovery_bytes_per_sec / 3600.0;
        let mut now = 0.0f64;
        let mut events = Events::default();
        loop {
            events.tick()?;
            // Survivors' pace, shared by the detected OSDs under rebuild.
            let rebuilding = (0..nn)
                .filter(|&o| failed[o] && detected_at[o] <= now)
                .count();
            let share = if rebuilding == 0 {
                0.0
            } else {
                (nn - down) as f64 / rebuilding as f64
            };
            // The next event: a failure, a detection, or a rebuild that completes.
            let (mut t, mut what) = (f64::INFINITY, (0usize, 0u8));
            for o in 0..nn {
                if !failed[o] {
                    if fails_at[o] < t {
                        (t, what) = (fails_at[o], (o, 0));
                    }
                } else if detected_at[o] > now {
                    if detected_at[o] < t {
                        (t, what) = (detected_at[o], (o, 1));
                    }
                } else if now + left[o] / share < t {
                    (t, what) = (now + left[o] / share, (o, 2));
                }
            }
            for o in 0..nn {
                if failed[o] && detected_at[o] <= now {
                    left[o] = (left[o] - (t - now) * share).max(0.0);
                }
            }
            now = t;
            let (o, kind) = what;
            match kind {
                0 => {
                    *failures += 1;
                    failed[o] = true;
                    down += 1;
                    detected_at[o] = now + self.detect_hours;
                    left[o] = match times {
                        RepairTimes::Lognormal { sigma } => work * lognormal_factor(rng, sigma),
                        _ => work,
                    };
                    if chunks.fail(o, down, rng) {
                        return Ok(now);
                    }
                }
                1 => {} // detected: its rebuild shares the pace from now on
                _ => {
                    failed[o] = false;
                    down -= 1;
                    detected_at[o] = f64::INFINITY;
                    left[o] = 0.0;
                    chunks.repair(o);
                    fails_at[o] = now + rng.exp(self.mttf_hours);
                }
            }
        }
    }

    fn one_run(&self, rng: &mut Rng, failures: &mut u64) -> Lifetime {
        let nn = self.osds;
        let mut chunks = LostChunks::new(self, rng);
        let mut fails_at: Vec<f64> = (0..nn).map(|_| rng.exp(self.mttf_hours)).collect();
        let mut failed = vec![false; nn];
        let mut order: std::collections::VecDeque<usize> = Default::default();
        let mut repair_at = f64::INFINITY;
        let mut events = Events::default();
        loop {
            events.tick()?;
            let (mut t, mut dev) = (repair_at, None);
            for o in 0..nn {
                if !failed[o] && fails_at[o] < t {
                    (t, dev) = (fails_at[o], Some(o));
                }
            }
            let now = t;
            match dev {
                Some(o) => {
                    *failures += 1;
                    failed[o] = true;
                    order.push_back(o);
                    if chunks.fail(o, order.len(), rng) {
                        return Ok(now);
                    }
                }
                None => {
                    let o = order.pop_front().expect("a repair needs a failed OSD");
                    failed[o] = false;
                    chunks.repair(o);
                    fails_at[o] = now + rng.exp(self.mttf_hours);
                }
            }
            let j = order.len();
            repair_at = if j == 0 {
                f64::INFINITY
            } else {
                now + rng.exp((self.detect_hours + self.rebuild_hours(j)) / j as f64)
            };
        }
    }
}

/// The chunks one Monte-Carlo run has lost: every segment placed on n distinct OSDs, and per
/// segment its chunks on failed OSDs.
struct LostChunks<'a> {
    model: &'a ClusterModel,
    /// The segments on each OSD.
    on_osd: Vec<Vec<u32>>,
    /// Per segment, its chunks on failed OSDs.
    lost: Vec<u8>,
    /// Segments with exactly m lost chunks.
    critical: usize,
}

impl<'a> LostChunks<'a> {
    /// A fresh placement: per segment the first n of a partial Fisher-Yates shuffle of the OSDs
    /// (every segment's n chunks on n distinct OSDs, uniformly).
    fn new(model: &'a ClusterModel, rng: &mut Rng) -> LostChunks<'a> {
        let (nn, n) = (model.osds, model.n());
        let mut on_osd: Vec<Vec<u32>> = vec![Vec::new(); nn];
        let mut ids: Vec<usize> = (0..nn).collect();
        for s in 0..model.segments as usize {
            for i in 0..n {
                let j = i + rng.below((nn - i) as u64) as usize;
                ids.swap(i, j);
                on_osd[ids[i]].push(s as u32);
            }
        }
        LostChunks {
            model,
            on_osd,
            lost: vec![0; model.segments as usize],
            critical: 0,
        }
    }

    /// OSD `o` fails, leaving `down` OSDs failed (itself included). True when data is lost: a
    /// segment with more than m chunks lost, or, when the m-th OSD fails, a URE drawn bit by bit
    /// over the k chunks of every segment that has m lost chunks.
    fn fail(&mut self, o: usize, down: usize, rng: &mut Rng) -> bool {
        let m = self.model.m;
        for &s in &self.on_osd[o] {
            let c = &mut self.lost[s as usize];
            *c += 1;
            if *c as usize > m {
                return true;
            }
            if *c as usize == m {
                self.critical += 1;
            }
        }
        if m > 0 && down == m && self.model.uber > 0.0 {
            let bits_per_critical = 8.0 * self.model.k as f64 * self.model.chunk_bytes;
            let bits = self.critical as f64 * bits_per_critical;
            if rng.exp(1.0 / self.model.uber) < bits {
                return true;
            }
        }
        false
    }

    /// OSD `o` is back: its chunks are no longer lost.
    fn repair(&mut self, o: usize) {
        let m = self.model.m;
        for &s in &self.on_osd[o] {
            let c = &mut self.lost[s as usize];
            if *c as usize == m {
                self.critical -= 1;
            }
            *c -= 1;
        }
    }
}

impl ReliabilityModel for ClusterModel {
    /// The chain of the module doc (state j: j OSDs failed, no segment lost yet).
    fn chain(&self) -> Result<Chain, ReliabilityError> {
        self.validate()?;
        let (nn, m) = (self.osds, self.m);
        let lambda = 1.0 / self.mttf_hours;
        let p_ure = if m == 0 {
            0.0
        } else {
            ure_probability(
                self.critical_segments() * self.k as f64 * self.chunk_bytes,
                self.uber,
            )
        };
        // Last state: no segment lost with probability >= 1e-12, at most N-1 failed.
        let mut last = 0;
        while last + 1 < nn
            && last + 1 < STATES_MAX
            && self.segments * self.ln_segment_survives(last + 1) > (1e-12f64).ln()
        {
            last += 1;
        }
        let mut c = Chain::new();
        for j in 0..=last {
            c.state(format!("{j} OSDs failed"));
        }
        for j in 0..=last {
            let fail = (nn - j) as f64 * lambda;
            if j == last {
                c.to_loss(j, fail);
            } else {
                let mut lose = self.loss_on_failure(j);
                if j + 1 == m {
                    lose = 1.0 - (1.0 - lose) * (1.0 - p_ure);
                }
                c.edge(j, j + 1, fail * (1.0 - lose));
                c.to_loss(j, fail * lose);
            }
            if j > 0 {
                c.edge(
                    j,
                    j - 1,
                    j as f64 / (self.detect_hours + self.rebuild_hours(j)),
                );
            }
        }
        Ok(c)
    }
}

impl MonteCarloModel for ClusterModel {
    /// The model's parameters, and at most [`MC_SEGMENTS_MAX`] segments (the simulation places
    /// every one).
    fn check(&self) -> Result<(), ReliabilityError> {
        self.validate()?;
        if self.segments > MC_SEGMENTS_MAX {
            return Err(invalid(format!(
                "the Monte-Carlo places every segment: at most {MC_SEGMENTS_MAX:e} segments, got {:e}",
                self.segments
            )));
        }
        Ok(())
    }

    /// Monte-Carlo with an explicit placement: each run places every segment on n distinct OSDs
    /// drawn uniformly, fails OSDs on their own exponential clocks, counts each segment's failed
    /// chunks and stops at the first segment with more than m; a URE is drawn bit by bit over the k
    /// chunks of every segment that has m failed chunks when the m-th OSD fails. Exponential
    /// recoveries replay the chain's rates (`one_run`: the longest-failed OSD returns at the rate
    /// ρ_j of the module doc); the other kinds are the fluid recovery of [`RepairTimes`]
    /// (`one_fluid_run`).
    fn lifetime(&self, rng: &mut Rng, failures: &mut u64, times: RepairTimes) -> Lifetime {
        match times {
            RepairTimes::Exponential => self.one_run(rng, failures),
            _ => self.one_fluid_run(rng, failures, times),
        }
    }
}
