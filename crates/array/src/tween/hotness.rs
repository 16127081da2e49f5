//! TWEEN's hotness module (§6.2.2): the per-extent hotness H = α/(t − t̂) + (1 − α)·H and the
//! sequential k-means classification of hotness values into N hotness groups with aging factor β.
//! The seed's Algorithm 2 has no body in its text; `classify` is reconstructed from its prose
//! (see `docs/tween.md`).

/// The new hotness of an extent written at logical time `t`, last written at `t_hat` with hotness
/// `h` (`t_hat == 0`: never written, so nothing is known and the extent starts coldest, H = 0).
pub(crate) fn update_hotness(alpha: f64, h: f64, t_hat: u64, t: u64) -> f64 {
    if t_hat == 0 || t <= t_hat {
        return if t_hat == 0 { 0.0 } else { h };
    }
    alpha / (t - t_hat) as f64 + (1.0 - alpha) * h
}

/// Sequential k-means over N cluster centers with a constant learning rate β (the aging factor).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HotnessGroups {
    pub centers: Vec<f64>,
    pub beta: f64,
}

impl HotnessGroups {
    /// Initial random guesses (§6.2.2): N seeded draws in [0, 1), sorted (H lies in [0, 1]).
    pub fn new(n: usize, beta: f64, seed: u64) -> HotnessGroups {
        let mut rng = ecstack_base::Rng::new(seed);
        let mut centers: Vec<f64> = (0..n).map(|_| rng.next_f64()).collect();
        centers.sort_by(f64::total_cmp);
        HotnessGroups { centers, beta }
    }

    /// The group whose center is closest to `h` (ties: the lowest index), without learning.
    pub fn nearest(&self, h: f64) -> usize {
        let mut best = 0;
        for (i, c) in self.centers.iter().enumerate() {
            if (h - c).abs() < (h - self.centers[best]).abs() {
                best = i;
            }
        }
        best
    }

    /// Classify `h` and move the chosen center toward it: C_i = (1 − β)·C_i + β·h.
    pub fn classify(&mut self, h: f64) -> usize {
        let i = self.nearest(h);
        self.centers[i] = (1.0 - self.beta) * self.centers[i] + self.beta * h;
        i
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
        let mut g = HotnessGroups::new(2, 0.1, 42);
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

    #[test]
    fn initial_centers_are_seeded_and_sorted() {
        let a = HotnessGroups::new(4, 0.1, 7);
        assert_eq!(a, HotnessGroups::new(4, 0.1, 7));
        assert!(a.centers.windows(2).all(|w| w[0] <= w[1]));
        assert!(a.centers.iter().all(|c| (0.0..1.0).contains(c)));
    }
}
