//! A continuous-time Markov chain with one absorbing state (data loss), and its mean time to
//! absorption solved exactly.
//!
//! The solve is Gaussian elimination of the transient states, done in the GTH form (Grassmann,
//! Taksar and Heyman, 1985): a state's pivot (its total outflow) is the *sum* of its remaining
//! outgoing rates and absorption rate, never a difference of diagonal entries. Every step adds and
//! multiplies positive numbers, so a stiff chain (failure rates 10^-6 of the repair rates, a mean
//! time to data loss of 10^12 hours) loses no digits to cancellation, where a plain `(-Q) t = 1`
//! solve would lose about log10(MTTDL × fastest rate) of its 16 digits.

use super::params::ReliabilityError;

/// A chain of `n` transient states (index 0 is the start: every device healthy) plus one implicit
/// absorbing state, "data loss". Rates are per hour.
#[derive(Clone, Debug)]
pub struct Chain {
    names: Vec<String>,
    /// `rates[i]`: (to, rate) for transitions between transient states (summed per pair).
    rates: Vec<Vec<(usize, f64)>>,
    /// Rate from each transient state straight to data loss.
    loss: Vec<f64>,
}

impl Chain {
    pub fn new() -> Chain {
        Chain {
            names: Vec::new(),
            rates: Vec::new(),
            loss: Vec::new(),
        }
    }

    /// Add a transient state; returns its index.
    pub fn state(&mut self, name: impl Into<String>) -> usize {
        self.names.push(name.into());
        self.rates.push(Vec::new());
        self.loss.push(0.0);
        self.names.len() - 1
    }

    /// Add `rate` (per hour) to the transition `from → to` (both transient).
    pub fn edge(&mut self, from: usize, to: usize, rate: f64) {
        assert!(from < self.names.len() && to < self.names.len() && from != to);
        assert!(rate.is_finite() && rate >= 0.0, "rate {rate}");
        if rate == 0.0 {
            return;
        }
        match self.rates[from].iter_mut().find(|(j, _)| *j == to) {
            Some((_, r)) => *r += rate,
            None => self.rates[from].push((to, rate)),
        }
    }

    /// Add `rate` (per hour) to the transition `from → data loss`.
    pub fn to_loss(&mut self, from: usize, rate: f64) {
        assert!(rate.is_finite() && rate >= 0.0, "rate {rate}");
        self.loss[from] += rate;
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Outgoing transitions of state `i`: (to, rate) pairs and the rate to data loss.
    pub fn transitions(&self, i: usize) -> (&[(usize, f64)], f64) {
        (&self.rates[i], self.loss[i])
    }

    /// Mean time (hours) from `start` until data loss. `Infinite` when loss cannot be reached.
    pub fn mean_time_to_loss(&self, start: usize) -> Result<f64, ReliabilityError> {
        let n = self.len();
        assert!(start < n);
        // Dense embedded jump chain: p[i][j] = probability that the next jump of i goes to j,
        // pa[i] = to data loss, h[i] = mean time accumulated per visit of i (1 / outflow).
        let mut p = vec![vec![0.0f64; n]; n];
        let mut pa = vec![0.0f64; n];
        let mut h = vec![0.0f64; n];
        for i in 0..n {
            let out: f64 = self.rates[i].iter().map(|(_, r)| r).sum::<f64>() + self.loss[i];
            if out == 0.0 {
                // A transient state with no way out would hold forever: loss is never reached.
                return Err(ReliabilityError::NeverLost);
            }
            for &(j, r) in &self.rates[i] {
                p[i][j] = r / out;
            }
            pa[i] = self.loss[i] / out;
            h[i] = 1.0 / out;
        }
        // Eliminate every state but `start`, last first. Eliminating s: a jump i → s continues
        // from s, which (after looping on itself) leaves to j with p[s][j] / (1 - p[s][s]); the
        // time spent meanwhile is h[s] / (1 - p[s][s]) per pass. 1 - p[s][s] is computed as the
        // sum of s's other exits (GTH), which are the remaining states and loss.
        let mut alive: Vec<bool> = vec![true; n];
        for s in (0..n).rev() {
            if s == start {
                continue;
            }
            alive[s] = false;
            let exit: f64 = (0..n).filter(|&j| alive[j]).map(|j| p[s][j]).sum::<f64>() + pa[s];
            if exit == 0.0 {
                // s only loops on itself: it is never left, so it never reaches loss.
                // (Reachable from start? Then MTTDL is infinite.)
                if (0..n).any(|i| alive[i] && p[i][s] > 0.0) {
                    return Err(ReliabilityError::NeverLost);
                }
                continue;
            }
            for i in 0..n {
                if !alive[i] || p[i][s] == 0.0 {
                    continue;
                }
                let via = p[i][s] / exit;
                p[i][s] = 0.0;
                for j in 0..n {
                    if alive[j] && p[s][j] != 0.0 {
                        p[i][j] += via * p[s][j];
                    }
                }
                pa[i] += via * pa[s];
                h[i] += via * h[s];
            }
        }
        if pa[start] == 0.0 {
            return Err(ReliabilityError::NeverLost);
        }
        // Only `start` remains: each pass takes h[start] and ends in loss with probability
        // pa[start] (otherwise it returns to start).
        let t = h[start] / pa[start];
        if !t.is_finite() {
            return Err(ReliabilityError::Invalid(format!(
                "the mean time to data loss overflows ({t} hours): the parameters are too extreme"
            )));
        }
        Ok(t)
    }

    /// Probability that data is lost within `hours`, starting from `start`: the chain's transient
    /// solution P(absorbed by t) = (e^{Qt})[start][loss], not the exponential approximation
    /// 1 − e^{−t/MTTDL} (which ignores the time the chain needs to reach a state near loss).
    ///
    /// Uniformization plus scaling and squaring, in nonnegative arithmetic only: with Λ the
    /// largest outflow, P = I + Q/Λ is a stochastic matrix (loss included as an absorbing
    /// column); e^{Qτ} = e^{−Λτ} Σ_k (Λτ)^k/k! · P^k for τ = t / 2^s with Λτ ≤ 1/2, then squared s
    /// times. Every step adds and multiplies nonnegative numbers, so a loss probability of 1e-12
    /// keeps its digits (computing 1 − P(survive) would not). Cost: s = log2(2Λt) dense products
    /// of (states + 1)² entries.
    pub fn loss_probability_within(
        &self,
        start: usize,
        hours: f64,
    ) -> Result<f64, ReliabilityError> {
        let n = self.len();
        assert!(start < n);
        if !(hours.is_finite() && hours >= 0.0) {
            return Err(ReliabilityError::Invalid(format!(
                "mission time must be a finite number of hours >= 0, got {hours}"
            )));
        }
        let out: Vec<f64> = (0..n)
            .map(|i| self.rates[i].iter().map(|(_, r)| r).sum::<f64>() + self.loss[i])
            .collect();
        let lambda = out.iter().cloned().fold(0.0, f64::max);
        if hours == 0.0 || lambda == 0.0 {
            return Ok(0.0);
        }
        // Squarings so that Λτ ≤ 1/2; bounded so that absurd inputs end with an error.
        const SQUARINGS_MAX: u32 = 200;
        let mut s = 0u32;
        while lambda * hours / 2f64.powi(s as i32) > 0.5 {
            s += 1;
            if s > SQUARINGS_MAX {
                return Err(ReliabilityError::Invalid(format!(
                    "mission time {hours} h is too long for this chain's rates (Λt = {})",
                    lambda * hours
                )));
            }
        }
        let tau = hours / 2f64.powi(s as i32);
        let dim = n + 1; // index n: data loss (absorbing)
        let mut p = vec![0.0f64; dim * dim];
        for i in 0..n {
            for &(j, r) in &self.rates[i] {
                p[i * dim + j] = r / lambda;
            }
            p[i * dim + n] = self.loss[i] / lambda;
            p[i * dim + i] = (lambda - out[i]) / lambda;
        }
        p[n * dim + n] = 1.0;
        let mul = |a: &[f64], b: &[f64]| -> Vec<f64> {
            let mut c = vec![0.0f64; dim * dim];
            for i in 0..dim {
                for k in 0..dim {
                    let x = a[i * dim + k];
                    if x == 0.0 {
                        continue;
                    }
                    for j in 0..dim {
                        c[i * dim + j] += x * b[k * dim + j];
                    }
                }
            }
            c
        };
        // e^{Qτ}: the Poisson-weighted powers of P until a term is negligible.
        let x = lambda * tau;
        let mut e = vec![0.0f64; dim * dim];
        let mut power = vec![0.0f64; dim * dim];
        for i in 0..dim {
            power[i * dim + i] = 1.0;
        }
        let mut weight = (-x).exp();
        for k in 0..64 {
            for (ei, pi) in e.iter_mut().zip(&power) {
                *ei += weight * pi;
            }
            weight *= x / (k + 1) as f64;
            if weight < 1e-40 {
                break;
            }
            power = mul(&power, &p);
        }
        for _ in 0..s {
            e = mul(&e, &e);
        }
        Ok(e[start * dim + n].min(1.0))
    }
}

impl Default for Chain {
    fn default() -> Self {
        Chain::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain Gaussian elimination with partial pivoting on (-Q) t = 1: an independent solve to
    /// compare the GTH reduction with on well-conditioned chains.
    fn naive(chain: &Chain, start: usize) -> f64 {
        let n = chain.len();
        let mut a = vec![vec![0.0f64; n + 1]; n];
        for (i, row) in a.iter_mut().enumerate() {
            let (edges, loss) = chain.transitions(i);
            let out: f64 = edges.iter().map(|(_, r)| r).sum::<f64>() + loss;
            row[i] = out;
            for &(j, r) in edges {
                row[j] -= r;
            }
            row[n] = 1.0;
        }
        for c in 0..n {
            let piv = (c..n)
                .max_by(|&x, &y| a[x][c].abs().total_cmp(&a[y][c].abs()))
                .unwrap();
            a.swap(c, piv);
            let pivot = a[c].clone();
            for (r, row) in a.iter_mut().enumerate() {
                if r != c {
                    let f = row[c] / pivot[c];
                    for (x, p) in row.iter_mut().zip(&pivot).skip(c) {
                        *x -= f * p;
                    }
                }
            }
        }
        a[start][n] / a[start][start]
    }

    #[test]
    fn one_state_is_its_exponential_mean() {
        let mut c = Chain::new();
        let s = c.state("0");
        c.to_loss(s, 0.25);
        assert_eq!(c.mean_time_to_loss(s).unwrap(), 4.0);
    }

    #[test]
    fn gth_agrees_with_plain_elimination_on_a_random_chain() {
        let mut rng = ecstack_base::Rng::new(7);
        for trial in 0..50 {
            let n = 2 + rng.below(7) as usize;
            let mut c = Chain::new();
            for i in 0..n {
                c.state(format!("{i}"));
            }
            for i in 0..n {
                for j in 0..n {
                    if i != j && rng.chance(0.6) {
                        c.edge(i, j, 0.1 + rng.next_f64());
                    }
                }
                if rng.chance(0.5) || i == n - 1 {
                    c.to_loss(i, 0.01 + rng.next_f64());
                }
            }
            for start in 0..n {
                let (g, p) = match c.mean_time_to_loss(start) {
                    Ok(g) => (g, naive(&c, start)),
                    Err(_) => continue,
                };
                assert!(
                    ((g - p) / p).abs() < 1e-9,
                    "trial {trial} start {start}: {g} vs {p}"
                );
            }
        }
    }

    #[test]
    fn transient_loss_of_one_state_is_its_exponential() {
        let mut c = Chain::new();
        let s = c.state("0");
        c.to_loss(s, 0.25);
        for t in [1e-9f64, 0.1, 4.0, 100.0] {
            let want = -(-0.25 * t).exp_m1();
            let got = c.loss_probability_within(s, t).unwrap();
            assert!(
                ((got - want) / want).abs() < 1e-12,
                "t {t}: {got} vs {want}"
            );
        }
        assert_eq!(c.loss_probability_within(s, 0.0).unwrap(), 0.0);
    }

    /// Two states, 0 → 1 at a, 1 → 0 at b, 1 → loss at c: the survival function is
    /// (s1·e^{−s2 t} − s2·e^{−s1 t}) / (s1 − s2), with s1, s2 the roots of s² − (a+b+c)s + ac
    /// (S(0) = 1, S'(0) = 0 since state 0 cannot lose data at once, S''(0) = −ac).
    #[test]
    fn transient_loss_of_two_states_matches_the_closed_form() {
        let (a, b, c_) = (0.02, 1.0, 0.05);
        let mut c = Chain::new();
        let s0 = c.state("0");
        let s1 = c.state("1");
        c.edge(s0, s1, a);
        c.edge(s1, s0, b);
        c.to_loss(s1, c_);
        let sum = a + b + c_;
        let disc = (sum * sum - 4.0 * a * c_).sqrt();
        let (r1, r2) = ((sum + disc) / 2.0, (sum - disc) / 2.0);
        for t in [5.0f64, 50.0, 500.0, 5000.0] {
            let surv = (r1 * (-r2 * t).exp() - r2 * (-r1 * t).exp()) / (r1 - r2);
            let got = c.loss_probability_within(s0, t).unwrap();
            assert!(
                ((got - (1.0 - surv)) / (1.0 - surv)).abs() < 1e-9,
                "t {t}: {got} vs {}",
                1.0 - surv
            );
        }
        // Short missions: far below the exponential approximation 1 − e^{−t/MTTDL} (the chain first
        // has to reach state 1), which this test would catch if the transient were that formula.
        let mttdl = c.mean_time_to_loss(s0).unwrap();
        let exact = c.loss_probability_within(s0, 0.5).unwrap();
        assert!(exact < 0.5 * -(-0.5 / mttdl).exp_m1(), "{exact}");
        assert!(exact > 0.0);
    }

    #[test]
    fn unreachable_loss_is_an_error() {
        let mut c = Chain::new();
        let a = c.state("a");
        let b = c.state("b");
        c.edge(a, b, 1.0);
        c.edge(b, a, 1.0);
        assert!(matches!(
            c.mean_time_to_loss(a),
            Err(ReliabilityError::NeverLost)
        ));
    }
}
