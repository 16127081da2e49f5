//! TWEEN's hotness module (§6.2.2): the per-extent hotness H = α/(t − t̂) + (1 − α)·H and the
//! sequential k-means classification of hotness values into N hotness groups with aging factor β.
//! The seed's Algorithm 2 has no body in its text; `classify` is reconstructed from its prose
//! (see `docs/tween.md`).

/// The new hotness of an extent written (or re-assessed, see `Tween`'s GC) at host time `t`, last
/// written by the host at `t_hat` with hotness `h` (`t_hat == 0`: never written, so nothing is
/// known and the extent starts coldest, H = 0). Time is the host-write clock: it ticks once per
/// extent the host writes, never for TWEEN's own GC moves (`docs/tween.md`, "time").
pub(crate) fn update_hotness(alpha: f64, h: f64, t_hat: u64, t: u64) -> f64 {
    if t_hat == 0 || t <= t_hat {
        return if t_hat == 0 { 0.0 } else { h };
    }
    alpha / (t - t_hat) as f64 + (1.0 - alpha) * h
}

/// Sequential k-means over N cluster centers with a constant learning rate β (the aging factor).
///
/// Initial guesses (§6.2.2 "initial random guesses", its reference [40], MacQueen 1967): the first
/// N distinct hotness values classified become the N centers, one each, in arrival order — samples
/// of the data itself. An unset center is NaN (so it persists as a plain f64). Before version 2 the
/// guesses were N uniform draws in [0, 1), far above the H values a trace produces (10⁻⁵–10⁻²): the
/// upper centers were never nearest to any value and never moved, leaving one or two live groups.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HotnessGroups {
    pub centers: Vec<f64>,
    pub beta: f64,
}

impl HotnessGroups {
    pub fn new(n: usize, beta: f64) -> HotnessGroups {
        HotnessGroups {
            centers: vec![f64::NAN; n],
            beta,
        }
    }

    /// The group whose (set) center is closest to `h` (ties: the lowest index), without learning;
    /// group 0 while no center is set.
    #[cfg(test)]
    pub fn nearest(&self, h: f64) -> usize {
        let mut best: Option<usize> = None;
        for (i, c) in self.centers.iter().enumerate() {
            if c.is_nan() {
                continue;
            }
            if best.is_none_or(|b| (h - c).abs() < (h - self.centers[b]).abs()) {
                best = Some(i);
            }
        }
        best.unwrap_or(0)
    }

    /// Classify `h`: a value unlike every set center while a center is unset becomes that center;
    /// else the nearest center moves toward it, C_i = (1 − β)·C_i + β·h.
    #[cfg(test)]
    pub fn classify(&mut self, h: f64) -> usize {
        self.classify_among(h, self.centers.len())
    }

    /// `classify` over the first `n` centers only (the hotness groups in use; the others keep
    /// their values for when they are used again).
    pub fn classify_among(&mut self, h: f64, n: usize) -> usize {
        let n = n.clamp(1, self.centers.len());
        let used = &self.centers[..n];
        if let Some(free) = used.iter().position(|c| c.is_nan()) {
            if !used.contains(&h) {
                self.centers[free] = h;
                return free;
            }
        }
        let mut i = 0;
        for j in 1..n {
            let (cj, ci) = (self.centers[j], self.centers[i]);
            if !cj.is_nan() && (ci.is_nan() || (h - cj).abs() < (h - ci).abs()) {
                i = j;
            }
        }
        if self.centers[i].is_nan() {
            self.centers[i] = h;
        } else {
            self.centers[i] = (1.0 - self.beta) * self.centers[i] + self.beta * h;
        }
        i
    }

    /// The center of group `g` as a hotness (an unset center counts as coldest).
    pub fn hotness_of(&self, g: usize) -> f64 {
        self.centers
            .get(g)
            .copied()
            .filter(|c| !c.is_nan())
            .unwrap_or(0.0)
    }
}

/// The share of host rewrites that come back within an eighth of the working set (in host extent
/// writes) when every extent is equally likely: 1 − e^(−1/8). Uniform random updates give this;
/// skewed ones (a hot minority taking most writes) give more.
pub(crate) const UNIFORM_SHORT_SHARE: f64 = 0.117_503_097;

/// Skew above which hotness groups are used. Uniform updates give 1.0, an 80/20 workload ≈ 2.3 (80 %
/// of writes to 20 % of the extents: a hot rewrite gap of W/4 on average, so 1 − e^(−1/2) of them
/// are short), 95/5 ≈ 5.6, 99/1 ≈ 8.4 (`skew_estimate_tells_uniform_from_hot_cold`). Set from
/// measurements (issue 45, docs/tween.md): on EPLOG's FIN, WEB, USR, MDS and the 80/20 SYNC4K
/// (skew 2.7–4.8) one group erased least with every cleaner we tried, so groups are kept for
/// stronger skew than any of them shows.
pub(crate) const SKEW_GROUPS_MIN: f64 = 6.0;

/// The layer's own choice of how many hotness groups take host writes: it watches the host's
/// rewrite gaps (host time since an extent's last host write) over epochs of one working set of
/// host writes, and uses every group when short gaps are at least `SKEW_GROUPS_MIN` times as common
/// as under uniform updates, one group otherwise (hot/cold separation only pays when some data
/// dies much sooner than the rest; without skew it spreads the same data over more, fuller
/// segments). Not persisted: a reopened array starts with one group and decides again.
#[derive(Debug, Clone, Default)]
pub(crate) struct SkewEstimate {
    /// Extents the host has written at least once (the working set W).
    pub working_set: u64,
    epoch_writes: u64,
    epoch_short: u64,
    /// Short-rewrite share of the last whole epoch over the uniform share (0 before one ended).
    pub skew: f64,
}

impl SkewEstimate {
    /// Record a host write of an extent last written by the host at `t_hat` (0: never), now `t`.
    /// Returns true when an epoch ended (the skew was re-estimated).
    pub fn record(&mut self, t_hat: u64, t: u64) -> bool {
        if t_hat == 0 {
            self.working_set += 1;
            return false;
        }
        self.epoch_writes += 1;
        if (t - t_hat) * 8 < self.working_set {
            self.epoch_short += 1;
        }
        if self.epoch_writes >= self.working_set.max(1024) {
            let share = self.epoch_short as f64 / self.epoch_writes as f64;
            self.skew = share / UNIFORM_SHORT_SHARE;
            self.epoch_writes = 0;
            self.epoch_short = 0;
            return true;
        }
        false
    }

    /// Groups to use out of `max`.
    pub fn groups(&self, max: usize) -> usize {
        if self.skew >= SKEW_GROUPS_MIN {
            max.max(1)
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hotness_follows_the_formula_on_hand_worked_inputs() {
        // First write: coldest.
        assert_eq!(update_hotness(0.5, 0.0, 0, 7), 0.0);
        // Written at t̂ = 10, again at t = 12 with H = 0.2, α = 0.5: 0.5/2 + 0.5·0.2 = 0.35.
        assert!((update_hotness(0.5, 0.2, 10, 12) - 0.35).abs() < 1e-12);
        // α = 0.25, back-to-back (t − t̂ = 1), H = 0.6: 0.25 + 0.75·0.6 = 0.7.
        assert!((update_hotness(0.25, 0.6, 4, 5) - 0.7).abs() < 1e-12);
        // A long gap decays towards (1 − α)·H: 0.5/1000 + 0.5·0.8 = 0.4005.
        assert!((update_hotness(0.5, 0.8, 1, 1001) - 0.4005).abs() < 1e-12);
    }

    #[test]
    fn sequential_kmeans_picks_the_nearest_center_and_ages_it() {
        // Dyadic values, so every distance and update below is exact.
        let mut g = HotnessGroups {
            centers: vec![0.125, 0.5, 0.875],
            beta: 0.5,
        };
        // 0.375 is nearest 0.5 (0.125 < 0.25): center 1 moves to 0.5·0.5 + 0.5·0.375 = 0.4375.
        assert_eq!(g.classify(0.375), 1);
        assert_eq!(g.centers[1], 0.4375);
        // 0.75 is nearest 0.875 (0.125 < 0.3125): center 2 → 0.8125.
        assert_eq!(g.classify(0.75), 2);
        assert_eq!(g.centers[2], 0.8125);
        // A tie (0.28125 is 0.15625 from both 0.125 and 0.4375) goes to the lowest index:
        // center 0 → 0.203125.
        assert_eq!(g.classify(0.28125), 0);
        assert_eq!(g.centers, vec![0.203125, 0.4375, 0.8125]);
        // `nearest` answers without learning.
        assert_eq!(g.nearest(0.9), 2);
        assert_eq!(g.centers, vec![0.203125, 0.4375, 0.8125]);
    }

    #[test]
    fn two_populations_separate_into_two_groups() {
        // Hot extents (H ≈ 0.9) and cold ones (H ≈ 0.01) interleaved: with two centers, after a
        // warm-up every hot value lands in one group and every cold value in the other.
        let mut g = HotnessGroups::new(2, 0.1);
        for i in 0..200 {
            g.classify(if i % 2 == 0 { 0.9 } else { 0.01 });
        }
        let hot = g.classify(0.9);
        let cold = g.classify(0.01);
        assert_ne!(hot, cold);
        assert!(
            g.centers[hot] > 0.8 && g.centers[cold] < 0.1,
            "{:?}",
            g.centers
        );
    }

    /// Uniform random rewrites give a skew near 1 and 80 % of the writes to 20 % of the extents
    /// about 2.3, 95 % to 5 % about 5.6 (one group); 99 % to 1 % more than `SKEW_GROUPS_MIN` (all
    /// groups).
    #[test]
    fn skew_estimate_tells_uniform_from_hot_cold() {
        let run = |hot_share: f64, hot_fifths: u64| {
            let w = 10_000u64;
            let mut rng = ecstack_base::Rng::new(3);
            let mut last = vec![0u64; w as usize];
            let mut s = SkewEstimate::default();
            for t in 1..=12 * w {
                let hot = w / hot_fifths;
                let e = if rng.next_f64() < hot_share {
                    rng.below(hot)
                } else {
                    hot + rng.below(w - hot)
                };
                s.record(last[e as usize], t);
                last[e as usize] = t;
            }
            s
        };
        let uniform = run(0.2, 5);
        assert!((0.8..1.25).contains(&uniform.skew), "{}", uniform.skew);
        assert_eq!(uniform.groups(3), 1);
        let eighty_twenty = run(0.8, 5);
        assert!(
            (1.9..2.8).contains(&eighty_twenty.skew),
            "{}",
            eighty_twenty.skew
        );
        assert_eq!(eighty_twenty.groups(3), 1);
        let skewed = run(0.99, 100);
        assert!(skewed.skew > SKEW_GROUPS_MIN, "{}", skewed.skew);
        assert_eq!(skewed.groups(3), 3);
    }

    #[test]
    fn classify_among_uses_only_the_groups_in_use() {
        let mut g = HotnessGroups::new(3, 0.5);
        assert_eq!(g.classify_among(0.5, 1), 0);
        assert_eq!(g.classify_among(0.9, 1), 0);
        assert_eq!(g.centers[0], 0.7);
        assert!(g.centers[1].is_nan() && g.centers[2].is_nan());
        assert_eq!(g.classify_among(0.1, 2), 1);
        assert_eq!(g.classify_among(0.6, 2), 0);
    }

    /// The fault version 2 fixes: with hotness values on a trace's scale (all below 0.01), every
    /// group must receive data and every center must move. The old initial guesses (uniform in
    /// [0, 1)) left the centers above the data untouched forever.
    #[test]
    fn centers_start_from_the_data_and_all_groups_are_used() {
        let mut g = HotnessGroups::new(4, 0.1);
        assert!(g.centers.iter().all(|c| c.is_nan()));
        // The first distinct values become the centers, in arrival order; a repeat joins its twin.
        assert_eq!(g.classify(0.0), 0);
        assert_eq!(g.classify(0.0), 0);
        assert_eq!(g.classify(0.001), 1);
        assert_eq!(g.centers[..2], [0.0, 0.001]);
        // Four populations on a trace's scale: 0, 10⁻⁴, 10⁻³, 10⁻² (plus a little noise).
        let mut rng = ecstack_base::Rng::new(5);
        let pops = [0.0, 1e-4, 1e-3, 1e-2];
        let mut used = [0u32; 4];
        for i in 0..4000 {
            let h = pops[i % 4] * (1.0 + 0.05 * rng.next_f64());
            used[g.classify(h)] += 1;
        }
        assert!(used.iter().all(|&u| u > 500), "groups used {used:?}");
        let mut c = g.centers.clone();
        c.sort_by(f64::total_cmp);
        for (c, p) in c.iter().zip(pops) {
            assert!((c - p).abs() <= 0.1 * p + 1e-6, "centers {c:?} vs {pops:?}");
        }
        assert_eq!(g.hotness_of(3), g.centers[3]);
        assert_eq!(HotnessGroups::new(2, 0.1).hotness_of(1), 0.0);
    }
}
