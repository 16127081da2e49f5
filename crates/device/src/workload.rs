//! Synthetic access patterns over `n` units (pages or requests), deterministic from a seed:
//! sequential (wrapping), uniform random, and Zipf (YCSB's generator after Gray et al., "Quickly
//! generating billion-record synthetic databases", SIGMOD 1994), with ranks scattered over the space by
//! a fixed permutation so the hot units are not all adjacent.

use crate::SplitMix64;

/// An access pattern.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(tag = "pattern", rename_all = "lowercase")]
pub enum Pattern {
    Sequential,
    Uniform,
    /// Zipf with skew `theta` in (0, 1); YCSB uses 0.99.
    Zipf {
        theta: f64,
    },
}

#[derive(Debug, Clone)]
struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    half_pow: f64,
    mult: u64,
}

fn zeta(n: u64, theta: f64) -> f64 {
    const EXACT: u64 = 1 << 20;
    let m = n.min(EXACT);
    let mut s = 0.0;
    for i in 1..=m {
        s += (i as f64).powf(-theta);
    }
    if n > m {
        // Euler–Maclaurin tail: ∫_m^n x^-θ dx + (n^-θ − m^-θ)/2.
        let (nf, mf) = (n as f64, m as f64);
        s += (nf.powf(1.0 - theta) - mf.powf(1.0 - theta)) / (1.0 - theta)
            + (nf.powf(-theta) - mf.powf(-theta)) / 2.0;
    }
    s
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Zipf {
    fn new(n: u64, theta: f64) -> Zipf {
        let zetan = zeta(n, theta);
        let zeta2 = 1.0 + 0.5f64.powf(theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        let mut mult = 0x9E37_79B9_7F4A_7C15 % n.max(1);
        while n > 1 && (mult == 0 || gcd(mult, n) != 1) {
            mult = (mult + 1) % n;
        }
        Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
            half_pow: 0.5f64.powf(theta),
            mult: mult.max(1),
        }
    }

    fn rank(&self, rng: &mut SplitMix64) -> u64 {
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }

    fn next(&self, rng: &mut SplitMix64) -> u64 {
        let r = self.rank(rng);
        ((r as u128 * self.mult as u128) % self.n as u128) as u64
    }
}

/// A generator of unit indices in `[0, n)`.
#[derive(Debug, Clone)]
pub struct Workload {
    n: u64,
    pattern: Pattern,
    rng: SplitMix64,
    pos: u64,
    zipf: Option<Zipf>,
}

impl Workload {
    /// `n` must be positive; Zipf `theta` must be in (0, 1).
    pub fn new(pattern: Pattern, n: u64, seed: u64) -> Result<Workload, String> {
        if n == 0 {
            return Err("workload needs a non-empty address space".into());
        }
        let zipf = match pattern {
            Pattern::Zipf { theta } => {
                if theta.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || theta >= 1.0 {
                    return Err(format!("zipf theta must be in (0, 1), got {theta}"));
                }
                Some(Zipf::new(n, theta))
            }
            _ => None,
        };
        Ok(Workload {
            n,
            pattern,
            rng: SplitMix64::new(seed),
            pos: 0,
            zipf,
        })
    }

    pub fn pattern(&self) -> Pattern {
        self.pattern
    }

    /// The next unit index.
    #[inline]
    pub fn next_unit(&mut self) -> u64 {
        match self.pattern {
            Pattern::Sequential => {
                let p = self.pos;
                self.pos = if p + 1 == self.n { 0 } else { p + 1 };
                p
            }
            Pattern::Uniform => self.rng.below(self.n),
            Pattern::Zipf { .. } => match &self.zipf {
                Some(z) => z.next(&mut self.rng),
                None => 0,
            },
        }
    }

    /// Access to the workload's RNG (e.g. to draw read/write mixes from the same seed).
    pub fn rng(&mut self) -> &mut SplitMix64 {
        &mut self.rng
    }

    pub fn theta(&self) -> Option<f64> {
        self.zipf.as_ref().map(|z| z.theta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_in_range_and_skewed() {
        let mut s = Workload::new(Pattern::Sequential, 3, 1).unwrap();
        assert_eq!(
            (0..7).map(|_| s.next_unit()).collect::<Vec<_>>(),
            vec![0, 1, 2, 0, 1, 2, 0]
        );
        let n = 10_000;
        let mut z = Workload::new(Pattern::Zipf { theta: 0.99 }, n, 7).unwrap();
        let mut counts = vec![0u32; n as usize];
        for _ in 0..200_000 {
            let u = z.next_unit();
            assert!(u < n);
            counts[u as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top1pct: u32 = counts[..100].iter().sum();
        // Zipf 0.99 over 10k: the top 1% of items draw well over a third of the accesses.
        assert!(top1pct > 200_000 / 3, "top 1% got {top1pct}");
        let mut u = Workload::new(Pattern::Uniform, n, 7).unwrap();
        assert!((0..1000).all(|_| u.next_unit() < n));
        assert!(Workload::new(Pattern::Zipf { theta: 1.0 }, n, 1).is_err());
        assert!(Workload::new(Pattern::Uniform, 0, 1).is_err());
    }
}
