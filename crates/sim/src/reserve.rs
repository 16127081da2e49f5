//! CodFS's workload-aware reserved space (seed `codfs-tween-thesis.txt` §4.1.2, Algorithm 1) and a
//! fast simulator of it over a write trace (§5.3.2).
//!
//! Under PLR every parity chunk p has a reserve next to it that takes its parity deltas. Every
//! `period` (§5.3.2: at 00:00 and 12:00) each storage node runs, for each of its parity chunks:
//!
//! - `getUtility`: u_t(p) = α·use(p) / r_t(p) + (1 − α)·u_{t−1}(p) ([`utility`]);
//! - `computeShrinkSize`: c(p) = ⌊(1 − u_t(p))·r_t(p) / ChunkSize⌋·ChunkSize ([`shrink_size`]);
//! - `doShrink`: r_{t+1}(p) = r_t(p) − c(p);
//! - `doMerge`: the deltas held are merged into the parity and use(p) is reset.
//!
//! Choices the seed leaves open, made here and stated in docs/cluster.md:
//!
//! - **use(p)** is the most bytes of deltas the reserve held at once during the interval (its
//!   peak occupancy, deltas carried over from the interval before included), so u ∈ [0, 1]: a
//!   reserve that filled up (and merged on the update path) counts as fully used.
//! - **u_0** ([`ReservePolicy::u0`], default 1): a reserve starts as if it had been fully used, so
//!   the first interval shrinks it by α·(unused share), not all at once on the evidence of a
//!   single half-day. Because c(p) rounds down to whole chunks, an idle reserve under u_0 > 0
//!   never reaches zero: at one chunk, c(p) = ⌊(1 − u)·1⌋ chunks = 0 while u > 0. With u_0 = 0 an
//!   idle reserve is gone at its first shrink.
//! - **r_t(p) = 0**: the chunk's updates are applied in place as in FO (the seed), nothing is
//!   measured and nothing shrinks; a reserve never grows back (Algorithm 1 has no growth step).
//! - **Shrink only** (§5.3.2's variant without `doMerge`): the deltas held stay, so a shrink never
//!   cuts below them: r_{t+1}(p) ≥ held bytes, rounded up to ChunkSize.
//! - **A delta that does not fit** in the free part of the reserve stalls its write for a merge
//!   (counted: §5.3.2's "merges per 1,000 writes"), then goes into the emptied reserve; a delta
//!   larger than the whole reserve is applied in place after that merge.

use serde::Serialize;

pub use ecstack_base::reserve::{next_size, shrink_size, utility, ReservePolicy, U0};

/// What appending one delta did ([`Reserve::append`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Append {
    /// The delta went into the free part of the reserve.
    Logged,
    /// The reserve was full: its deltas were merged first (the write waited), then the delta
    /// went in.
    MergedThenLogged,
    /// No reserve (r = 0): applied in place, as FO.
    InPlace,
    /// Larger than the whole reserve: merged, then applied in place.
    MergedThenInPlace,
}

impl Append {
    /// Whether the write waited for a merge.
    pub fn merged(self) -> bool {
        matches!(self, Append::MergedThenLogged | Append::MergedThenInPlace)
    }
}

/// One parity chunk's reserve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reserve {
    /// r_t(p), bytes.
    pub size: u64,
    /// u_{t−1}(p).
    pub utility: f64,
    /// Bytes of deltas it holds now.
    pub held: u64,
    /// The most it held at once since the last shrink (use(p)).
    pub peak: u64,
}

impl Reserve {
    pub fn new(size: u64, u0: f64) -> Reserve {
        Reserve {
            size,
            utility: u0,
            held: 0,
            peak: 0,
        }
    }

    /// Takes one parity delta of `len` bytes.
    pub fn append(&mut self, len: u64) -> Append {
        if self.size == 0 {
            return Append::InPlace;
        }
        let outcome = if self.held + len <= self.size {
            Append::Logged
        } else if len <= self.size {
            self.held = 0;
            Append::MergedThenLogged
        } else {
            self.held = 0;
            self.peak = self.size;
            return Append::MergedThenInPlace;
        };
        self.held += len;
        self.peak = self.peak.max(self.held);
        outcome
    }

    /// Algorithm 1's lines 5–7 at the end of an interval: the utility, the shrink size c(p) and
    /// the shrink; `keep_held` (no merge follows) keeps room for the deltas held. Returns c(p)
    /// as shrunk. Starts the next interval's use(p) from what is still held.
    pub fn shrink(&mut self, policy: &ReservePolicy, keep_held: bool) -> u64 {
        if self.size == 0 {
            return 0;
        }
        let (u, next) = next_size(
            policy,
            self.size,
            self.peak,
            self.held,
            self.utility,
            !keep_held,
        );
        self.utility = u;
        let c = self.size - next;
        self.size = next;
        self.peak = self.held;
        debug_assert!(
            !keep_held || self.held <= self.size,
            "a shrink cut into held deltas"
        );
        c
    }

    /// Algorithm 1's line 8: the deltas merged into the parity, use(p) reset.
    pub fn merge(&mut self) {
        self.held = 0;
        self.peak = 0;
    }
}

/// How a simulated cluster manages its reserves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Strategy {
    /// A fixed reserve of this many bytes, never adjusted (§5.3.2's baselines: 2, 8, 16 MiB).
    Fixed(u64),
    /// Algorithm 1 without its merge step.
    ShrinkOnly,
    /// Algorithm 1 as written: shrink, then merge.
    ShrinkMerge,
}

impl Strategy {
    pub fn label(self) -> String {
        match self {
            Strategy::Fixed(b) if b % (1 << 20) == 0 => format!("fixed {} MiB", b >> 20),
            Strategy::Fixed(b) => format!("fixed {b} B"),
            Strategy::ShrinkOnly => "shrink only".into(),
            Strategy::ShrinkMerge => "shrink+merge".into(),
        }
    }
}

/// One write of a file trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    pub time_ns: u64,
    pub file: u32,
    pub offset: u64,
    pub len: u64,
}

/// What the simulator is run with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReserveSimConfig {
    pub segment_bytes: u64,
    /// Data and parity chunks per segment (§5.3.2: rs-cauchy (10,8): k = 8, m = 2).
    pub k: u32,
    pub m: u32,
    /// α, u_0 and the initial size of the adaptive strategies (the chunk size is segment / k).
    pub alpha: f64,
    pub u0: f64,
    pub initial_bytes: u64,
    /// Hours of the day at which every node shrinks (§5.3.2: 0 and 12).
    pub shrink_hours: Vec<u32>,
    pub strategies: Vec<Strategy>,
    /// First-writes and updates are told apart per block of this many bytes.
    pub block_bytes: u64,
}

impl ReserveSimConfig {
    /// §5.3.2's setting.
    pub fn codfs() -> ReserveSimConfig {
        ReserveSimConfig {
            segment_bytes: 16 << 20,
            k: 8,
            m: 2,
            alpha: 0.3,
            u0: U0,
            initial_bytes: 16 << 20,
            shrink_hours: vec![0, 12],
            strategies: vec![
                Strategy::Fixed(2 << 20),
                Strategy::Fixed(8 << 20),
                Strategy::Fixed(16 << 20),
                Strategy::ShrinkOnly,
                Strategy::ShrinkMerge,
            ],
            block_bytes: 4096,
        }
    }

    pub fn chunk_bytes(&self) -> u64 {
        self.segment_bytes.div_ceil(u64::from(self.k.max(1)))
    }

    pub fn policy(&self) -> ReservePolicy {
        ReservePolicy {
            alpha: self.alpha,
            initial_bytes: self.initial_bytes,
            chunk_bytes: self.chunk_bytes(),
            u0: self.u0,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.k == 0 || self.m == 0 {
            return Err(format!(
                "k = {} and m = {} must be positive",
                self.k, self.m
            ));
        }
        if self.segment_bytes == 0 || self.segment_bytes % u64::from(self.k) != 0 {
            return Err(format!(
                "segment size {} is not a multiple of k = {}",
                self.segment_bytes, self.k
            ));
        }
        if self.block_bytes == 0 || self.segment_bytes % self.block_bytes != 0 {
            return Err(format!(
                "block size {} does not divide the segment size {}",
                self.block_bytes, self.segment_bytes
            ));
        }
        if self.strategies.is_empty() {
            return Err("no strategy to simulate".into());
        }
        if let Some(h) = self.shrink_hours.iter().find(|&&h| h >= 24) {
            return Err(format!("shrink hour {h} is not in 0..24"));
        }
        for s in &self.strategies {
            if let Strategy::Fixed(b) = s {
                if b % self.chunk_bytes() != 0 {
                    return Err(format!(
                        "{}: not a multiple of the chunk size ({} bytes)",
                        s.label(),
                        self.chunk_bytes()
                    ));
                }
            }
        }
        self.policy().validate()
    }
}

/// One strategy's figures at one shrink time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since the trace's start.
    pub time_s: f64,
    /// Γ = Σ reserved / Σ (data + parity) over the segments written so far (§5.3.2).
    pub gamma: f64,
    /// Parity chunks with no reserve left, %.
    pub zero_reserve_pct: f64,
}

/// One strategy's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyResult {
    pub strategy: Strategy,
    pub label: String,
    /// Γ after each shrink time (fixed strategies: at the same times).
    pub samples: Vec<Sample>,
    /// Writes that waited for a merge, per day.
    pub merges_per_day: Vec<u64>,
    pub merges: u64,
    /// Updates applied in place for want of a reserve.
    pub in_place: u64,
}

/// The simulator's output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReserveReport {
    pub config: ReserveSimConfig,
    pub writes: u64,
    /// Writes that touched at least one block written before (they make parity deltas).
    pub updates: u64,
    pub update_bytes: u64,
    pub segments: u64,
    /// Writes per day.
    pub writes_per_day: Vec<u64>,
    pub results: Vec<StrategyResult>,
}

impl ReserveReport {
    /// Merges per 1,000 writes on each day, for strategy `i`.
    pub fn merges_per_1000(&self, i: usize) -> Vec<f64> {
        self.results[i]
            .merges_per_day
            .iter()
            .zip(&self.writes_per_day)
            .map(|(&m, &w)| {
                if w == 0 {
                    0.0
                } else {
                    1000.0 * m as f64 / w as f64
                }
            })
            .collect()
    }
}

/// One segment: which of its blocks were written, and each strategy's m reserves.
struct Segment {
    written: Vec<u64>,
    reserves: Vec<Reserve>,
}

const DAY_NS: u64 = 86_400 * 1_000_000_000;

/// Runs every strategy of `cfg` over `writes` (in time order) in one pass. A segment is
/// `segment_bytes` of one file ((file, offset / segment_bytes)); it exists from its first write,
/// counted whole in Γ's denominator (data + parity = n/k of a segment), and gets its reserves then.
/// A write's blocks that were written before are an update: each parity chunk of the segment
/// takes a delta of that many bytes.
pub fn simulate(
    writes: impl IntoIterator<Item = Write>,
    cfg: &ReserveSimConfig,
) -> Result<ReserveReport, String> {
    cfg.validate()?;
    let policy = cfg.policy();
    let (m, s_count) = (cfg.m as usize, cfg.strategies.len());
    let blocks = cfg.segment_bytes / cfg.block_bytes;
    let initial: Vec<u64> = cfg
        .strategies
        .iter()
        .map(|s| match s {
            Strategy::Fixed(b) => *b,
            _ => cfg.initial_bytes,
        })
        .collect();
    let mut index: std::collections::HashMap<(u32, u64), u32> = std::collections::HashMap::new();
    let mut segments: Vec<Segment> = Vec::new();
    let mut reserved = initial.iter().map(|_| 0u64).collect::<Vec<_>>();
    let mut results: Vec<StrategyResult> = cfg
        .strategies
        .iter()
        .map(|&strategy| StrategyResult {
            strategy,
            label: strategy.label(),
            samples: Vec::new(),
            merges_per_day: Vec::new(),
            merges: 0,
            in_place: 0,
        })
        .collect();
    let mut hours: Vec<u32> = cfg.shrink_hours.clone();
    hours.sort_unstable();
    hours.dedup();
    let next_shrink = |after: u64| -> Option<u64> {
        let day = after / DAY_NS;
        (day..=day + 1)
            .flat_map(|d| {
                hours
                    .iter()
                    .map(move |&h| d * DAY_NS + u64::from(h) * 3_600_000_000_000)
            })
            .find(|&t| t > after)
    };
    let mut shrink_at = next_shrink(0).filter(|_| !hours.is_empty());
    let (mut n_writes, mut updates, mut update_bytes) = (0u64, 0u64, 0u64);
    let mut writes_per_day: Vec<u64> = Vec::new();
    let mut last_time = 0u64;
    let seg_total = cfg.segment_bytes * u64::from(cfg.k + cfg.m) / u64::from(cfg.k);
    let shrink = |t: u64,
                  segments: &mut Vec<Segment>,
                  reserved: &mut Vec<u64>,
                  results: &mut Vec<StrategyResult>| {
        for (si, r) in results.iter_mut().enumerate() {
            let adaptive = !matches!(r.strategy, Strategy::Fixed(_));
            let mut zero = 0u64;
            if adaptive {
                for seg in segments.iter_mut() {
                    for res in &mut seg.reserves[si * m..(si + 1) * m] {
                        reserved[si] -= res.shrink(&policy, r.strategy == Strategy::ShrinkOnly);
                        if r.strategy == Strategy::ShrinkMerge {
                            res.merge();
                        }
                        zero += u64::from(res.size == 0);
                    }
                }
            }
            let parities = (segments.len() * m).max(1) as f64;
            r.samples.push(Sample {
                time_s: t as f64 / 1e9,
                gamma: if segments.is_empty() {
                    0.0
                } else {
                    reserved[si] as f64 / (segments.len() as f64 * seg_total as f64)
                },
                zero_reserve_pct: 100.0 * zero as f64 / parities,
            });
        }
    };
    for w in writes {
        if w.time_ns < last_time {
            return Err(format!(
                "writes out of time order ({} ns after {} ns)",
                w.time_ns, last_time
            ));
        }
        last_time = w.time_ns;
        while let Some(t) = shrink_at.filter(|&t| t <= w.time_ns) {
            shrink(t, &mut segments, &mut reserved, &mut results);
            shrink_at = next_shrink(t);
        }
        let day = (w.time_ns / DAY_NS) as usize;
        if writes_per_day.len() <= day {
            writes_per_day.resize(day + 1, 0);
            for r in &mut results {
                r.merges_per_day.resize(day + 1, 0);
            }
        }
        writes_per_day[day] += 1;
        n_writes += 1;
        // The write's pieces, one per segment it touches.
        let mut merged = vec![false; s_count];
        let mut updated = 0u64;
        let mut at = w.offset;
        let end = w.offset.saturating_add(w.len);
        while at < end {
            let seg_no = at / cfg.segment_bytes;
            let piece_end = ((seg_no + 1) * cfg.segment_bytes).min(end);
            let id = *index.entry((w.file, seg_no)).or_insert_with(|| {
                segments.push(Segment {
                    written: Vec::new(),
                    reserves: initial
                        .iter()
                        .flat_map(|&b| std::iter::repeat_n(Reserve::new(b, policy.u0), m))
                        .collect(),
                });
                for (r, &b) in reserved.iter_mut().zip(&initial) {
                    *r += b * m as u64;
                }
                (segments.len() - 1) as u32
            });
            let seg = &mut segments[id as usize];
            let (b0, b1) = (
                (at % cfg.segment_bytes) / cfg.block_bytes,
                (piece_end - 1) % cfg.segment_bytes / cfg.block_bytes + 1,
            );
            debug_assert!(b1 <= blocks);
            let mut old = 0u64;
            for b in b0..b1 {
                let (word, bit) = ((b / 64) as usize, b % 64);
                if seg.written.len() <= word {
                    seg.written.resize(word + 1, 0);
                }
                old += (seg.written[word] >> bit) & 1;
                seg.written[word] |= 1 << bit;
            }
            if old > 0 {
                // The updated bytes of this piece (whole blocks, at most the piece).
                let delta = (old * cfg.block_bytes).min(piece_end - at);
                updated += delta;
                for (si, r) in results.iter_mut().enumerate() {
                    for res in &mut seg.reserves[si * m..(si + 1) * m] {
                        let before = res.size;
                        let a = res.append(delta);
                        merged[si] |= a.merged();
                        if matches!(a, Append::InPlace | Append::MergedThenInPlace) {
                            r.in_place += 1;
                        }
                        debug_assert_eq!(before, res.size);
                    }
                }
            }
            at = piece_end;
        }
        if updated > 0 {
            updates += 1;
            update_bytes += updated;
        }
        for (si, r) in results.iter_mut().enumerate() {
            if merged[si] {
                r.merges += 1;
                r.merges_per_day[day] += 1;
            }
        }
    }
    // The last shrink time inside the trace's last day, so every strategy ends with a sample.
    if let Some(t) = shrink_at.filter(|&t| t / DAY_NS == last_time / DAY_NS && !hours.is_empty()) {
        shrink(t, &mut segments, &mut reserved, &mut results);
    }
    Ok(ReserveReport {
        config: cfg.clone(),
        writes: n_writes,
        updates,
        update_bytes,
        segments: segments.len() as u64,
        writes_per_day,
        results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn policy() -> ReservePolicy {
        ReservePolicy {
            alpha: 0.3,
            initial_bytes: 16 * MIB,
            chunk_bytes: 2 * MIB,
            u0: U0,
        }
    }

    #[test]
    fn utility_and_shrink_size_by_hand() {
        // u = 0.3 · 4/16 + 0.7 · 1 = 0.775; (1 − 0.775) · 16 MiB = 3.6 MiB → one 2 MiB chunk.
        let u = utility(0.3, 4 * MIB, 16 * MIB, 1.0);
        assert!((u - 0.775).abs() < 1e-12);
        assert_eq!(shrink_size(u, 16 * MIB, 2 * MIB), 2 * MIB);
        // Unused all along from u_0 = 0: all of it goes.
        assert_eq!(
            shrink_size(utility(0.3, 0, 16 * MIB, 0.0), 16 * MIB, 2 * MIB),
            16 * MIB
        );
        // Fully used: nothing goes.
        assert_eq!(
            shrink_size(utility(0.3, 16 * MIB, 16 * MIB, 1.0), 16 * MIB, 2 * MIB),
            0
        );
        // A peak above the size (a merge on the update path) counts as full use.
        assert!((utility(0.5, 40 * MIB, 16 * MIB, 0.0) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn a_reserve_shrinks_by_algorithm_1_over_intervals() {
        let p = policy();
        let mut r = Reserve::new(16 * MIB, U0);
        // Interval 1: 1 MiB of deltas. u1 = 0.3/16 + 0.7 = 0.71875; c = ⌊0.28125 · 16⌋ = 4 MiB
        // rounded down to 2 MiB units: 4 MiB.
        assert_eq!(r.append(MIB), Append::Logged);
        assert_eq!(r.shrink(&p, false), 4 * MIB);
        r.merge();
        assert_eq!(r.size, 12 * MIB);
        // Interval 2: nothing. u2 = 0.7 · 0.71875 = 0.503125; c = ⌊0.496875 · 12⌋ = 5.9625 → 4 MiB.
        assert_eq!(r.shrink(&p, false), 4 * MIB);
        assert_eq!(r.size, 8 * MIB);
        assert!((r.utility - 0.503125).abs() < 1e-12);
    }

    #[test]
    fn a_full_reserve_merges_and_a_zero_one_updates_in_place() {
        let mut r = Reserve::new(2 * MIB, U0);
        assert_eq!(r.append(MIB), Append::Logged);
        assert_eq!(r.append(MIB), Append::Logged);
        assert_eq!(r.append(4096), Append::MergedThenLogged);
        assert_eq!(r.held, 4096);
        assert_eq!(r.peak, 2 * MIB);
        assert_eq!(r.append(3 * MIB), Append::MergedThenInPlace);
        assert_eq!(r.held, 0);
        let mut z = Reserve::new(0, U0);
        assert_eq!(z.append(4096), Append::InPlace);
        assert_eq!(z.shrink(&policy(), false), 0);
    }

    #[test]
    fn an_idle_reserve_stops_at_one_chunk_unless_u0_is_zero() {
        let p = policy();
        let mut r = Reserve::new(16 * MIB, U0);
        // u: 0.7, 0.49, 0.343, 0.2401, …: 16 → 12 → 6 → 4 → 2, then c = ⌊(1 − u)·1⌋ chunks = 0.
        let sizes: Vec<u64> = (0..8)
            .map(|_| {
                r.shrink(&p, false);
                r.merge();
                r.size / MIB
            })
            .collect();
        assert_eq!(sizes, vec![12, 6, 4, 2, 2, 2, 2, 2]);
        let mut r = Reserve::new(16 * MIB, 0.0);
        assert_eq!(r.shrink(&p, false), 16 * MIB);
    }

    #[test]
    fn shrink_only_keeps_room_for_held_deltas() {
        let p = ReservePolicy {
            alpha: 1.0,
            ..policy()
        };
        let mut r = Reserve::new(16 * MIB, U0);
        r.append(3 * MIB);
        // Utility 3/16: c = ⌊13/16 · 16 / 2⌋ · 2 = 12 MiB, but 3 MiB held need 4 MiB (2 chunks).
        assert_eq!(r.shrink(&p, true), 12 * MIB);
        assert_eq!(r.size, 4 * MIB);
        let mut r = Reserve::new(16 * MIB, U0);
        r.append(5 * MIB);
        r.merge();
        r.append(5 * MIB);
        // use(p) = 5 MiB, u = 5/16, c = 10 MiB; 5 MiB held keeps 6 MiB: 16 − 6 = 10. Equal here;
        // with 7 MiB held it would keep 8.
        assert_eq!(r.shrink(&p, true), 10 * MIB);
    }

    fn w(t_h: f64, file: u32, offset: u64, len: u64) -> Write {
        Write {
            time_ns: (t_h * 3_600e9) as u64,
            file,
            offset,
            len,
        }
    }

    #[test]
    fn fixed_baselines_give_the_seeds_gammas() {
        // Every segment counts whole: 10 chunks of 2 MiB; two parities of 2, 8, 16 MiB reserve.
        let writes = vec![
            w(1.0, 1, 0, 4096),
            w(2.0, 2, 20 * MIB, 8192),
            w(30.0, 1, 0, 4096),
        ];
        let r = simulate(writes, &ReserveSimConfig::codfs()).unwrap();
        assert_eq!((r.writes, r.updates, r.segments), (3, 1, 2));
        let end = |i: usize| r.results[i].samples.last().unwrap().gamma;
        assert!((end(0) - 0.2).abs() < 1e-12);
        assert!((end(1) - 0.8).abs() < 1e-12);
        assert!((end(2) - 1.6).abs() < 1e-12);
        // Shrinks at 12:00 day 0, then 00:00 and 12:00 day 1 (the last write is at 06:00 day 1).
        assert_eq!(r.results[3].samples.len(), 3);
        // Adaptive ones shrink: the idle reserves of file 2 go down first.
        assert!(end(3) < 1.6 && end(4) < 1.6, "{} {}", end(3), end(4));
    }

    #[test]
    fn updates_make_deltas_and_merges_are_counted_per_day() {
        let mut cfg = ReserveSimConfig::codfs();
        cfg.strategies = vec![Strategy::Fixed(2 * MIB)];
        let mut writes = vec![w(0.5, 1, 0, MIB)];
        // 3 updates of 1 MiB on day 0: the third does not fit the 2 MiB reserve.
        for h in [1.0, 2.0, 3.0] {
            writes.push(w(h, 1, 0, MIB));
        }
        let r = simulate(writes, &cfg).unwrap();
        assert_eq!(r.updates, 3);
        assert_eq!(r.update_bytes, 3 * MIB);
        assert_eq!(r.results[0].merges, 1);
        assert_eq!(r.results[0].merges_per_day, vec![1]);
        assert_eq!(r.merges_per_1000(0), vec![250.0]);
    }

    #[test]
    fn bad_configurations_and_out_of_order_writes_are_named() {
        let mut c = ReserveSimConfig::codfs();
        c.strategies = vec![Strategy::Fixed(3 * MIB)];
        assert!(simulate(Vec::new(), &c)
            .unwrap_err()
            .contains("multiple of the chunk size"));
        let mut c = ReserveSimConfig::codfs();
        c.alpha = 1.5;
        assert!(simulate(Vec::new(), &c).unwrap_err().contains("alpha"));
        let mut c = ReserveSimConfig::codfs();
        c.shrink_hours = vec![24];
        assert!(simulate(Vec::new(), &c)
            .unwrap_err()
            .contains("shrink hour"));
        let e = simulate(
            vec![w(2.0, 1, 0, 1), w(1.0, 1, 0, 1)],
            &ReserveSimConfig::codfs(),
        );
        assert!(e.unwrap_err().contains("out of time order"));
    }
}
