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
    pub fn classify(&mut self, h: f64) -> usize {
        if let Some(free) = self.centers.iter().position(|c| c.is_nan()) {
            if !self.centers.contains(&h) {
                self.centers[free] = h;
                return free;
            }
        }
        let i = self.nearest(h);
        self.centers[i] = (1.0 - self.beta) * self.centers[i] + self.beta * h;
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
