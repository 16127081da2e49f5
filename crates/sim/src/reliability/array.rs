//! MTTDL of one array of `n = k + m` devices coded k-of-n (RAID-5: m = 1, RAID-6: m = 2, RS(k, m)).
//!
//! States `0..=m`: the number of failed devices; data loss on the (m+1)-th concurrent failure.
//!
//! ```text
//!        nλ          (n-1)λ              (n-m+1)λ·(1-p)            (n-m)λ
//!   0 ───────▶ 1 ─────────▶ 2 ··· m-1 ────────────────▶ m ───────────────▶ LOSS
//!     ◀─────── ◀─────────          ◀────────────────                 
//!        μ₁          μ₂                    μ_m          (n-m+1)λ·p: m-1 ──▶ LOSS
//! ```
//!
//! μ_i = μ (one rebuild at a time, [`Repair::Sequential`]) or i·μ (every failed device rebuilt at
//! once, [`Repair::Parallel`]), μ = 1 / MTTR. p is the probability that the rebuild that starts
//! when the array has no redundancy left (m failed) hits an unrecoverable read error on one of the
//! k devices it reads whole: a URE there loses a stripe.

use ecstack_base::Rng;

use super::chain::Chain;
use super::model::ReliabilityModel;
use super::montecarlo::{lifetimes, Events, Lifetime, MonteCarloModel, RepairTimes};
use super::params::{check_uber, invalid, positive, ure_probability, ReliabilityError};

/// How failed devices are rebuilt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Repair {
    /// One rebuild at a time (one spare, or the bandwidth of the rebuild is the bottleneck).
    Sequential,
    /// Every failed device is rebuilt at once, each in one MTTR.
    Parallel,
}

impl std::str::FromStr for Repair {
    type Err = ReliabilityError;
    fn from_str(s: &str) -> Result<Repair, ReliabilityError> {
        match s {
            "sequential" => Ok(Repair::Sequential),
            "parallel" => Ok(Repair::Parallel),
            _ => Err(invalid(format!(
                "repair must be sequential or parallel, got {s:?}"
            ))),
        }
    }
}

impl Repair {
    /// The repair rate with `failed` devices down, each rebuild taking `1 / mu` on average.
    pub(crate) fn rate(self, failed: usize, mu: f64) -> f64 {
        match (self, failed) {
            (_, 0) => 0.0,
            (Repair::Sequential, _) => mu,
            (Repair::Parallel, f) => f as f64 * mu,
        }
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct ArrayModel {
    /// Data chunks per stripe.
    pub k: usize,
    /// Parity chunks per stripe (failures tolerated).
    pub m: usize,
    /// Mean time to failure of one device (hours).
    pub mttf_hours: f64,
    /// Mean time to repair one device: detection + replacement + rebuild (hours).
    pub mttr_hours: f64,
    /// Bytes a rebuild reads from each surviving device (its capacity, for a full rebuild).
    pub device_bytes: f64,
    /// Unrecoverable read errors per bit read (0: none).
    pub uber: f64,
    pub repair: Repair,
    /// Latent sector errors arising on one device per hour (0: none): bad sectors that appear
    /// while the data sits unread and stay until a scrub reads and repairs them.
    pub latent_per_hour: f64,
    /// Hours between two array-wide scrubs (a pass over every stripe that repairs latent errors
    /// while redundancy remains); needed when `latent_per_hour` > 0.
    pub scrub_hours: f64,
}

impl ArrayModel {
    pub fn validate(&self) -> Result<(), ReliabilityError> {
        const DEVICES_MAX: usize = 255;
        if self.k == 0 || self.k + self.m > DEVICES_MAX {
            return Err(invalid(format!(
                "an array needs k >= 1 and k + m <= {DEVICES_MAX} devices, got k = {}, m = {}",
                self.k, self.m
            )));
        }
        positive("MTTF", "hours", self.mttf_hours, false)?;
        positive("MTTR", "hours", self.mttr_hours, false)?;
        positive("device size", "bytes", self.device_bytes, true)?;
        positive(
            "latent sector error rate",
            "errors per device-hour",
            self.latent_per_hour,
            true,
        )?;
        if self.latent_per_hour > 0.0 {
            positive("scrub interval", "hours", self.scrub_hours, false)?;
        }
        check_uber(self.uber)
    }

    pub fn n(&self) -> usize {
        self.k + self.m
    }

    /// Probability that the rebuild started with m devices failed hits a URE (it reads the k
    /// surviving devices whole).
    pub fn critical_ure_probability(&self) -> f64 {
        if self.m == 0 {
            return 0.0;
        }
        ure_probability(self.k as f64 * self.device_bytes, self.uber)
    }

    /// Probability that one of the k devices the rebuild without redundancy reads holds a latent
    /// sector error. Latent errors arise at ν = `latent_per_hour` on each device and last until
    /// the next array-wide scrub, every T = `scrub_hours` (all devices at once); the rebuild starts
    /// at a time independent of the scrub phase, so the time since the last scrub A is uniform on
    /// [0, T) and P(none on k devices) = E[e^{−kνA}] = (1 − e^{−kνT}) / (kνT).
    pub fn critical_latent_probability(&self) -> f64 {
        if self.m == 0 || self.latent_per_hour == 0.0 {
            return 0.0;
        }
        let x = self.k as f64 * self.latent_per_hour * self.scrub_hours;
        // 1 − (1 − e^{−x})/x, written without cancellation for small x.
        let none = -(-x).exp_m1() / x;
        1.0 - none
    }

    /// Probability that the rebuild started with m devices failed loses a stripe: a URE while it
    /// reads, or a latent error already on a device it reads.
    pub fn critical_read_loss_probability(&self) -> f64 {
        1.0 - (1.0 - self.critical_ure_probability()) * (1.0 - self.critical_latent_probability())
    }

    /// Monte-Carlo draw of a latent error on the k read devices at time `now`, for a run whose
    /// scrubs happen at `phase + i·T`: the time since the last scrub, then the first latent error
    /// on the k devices (exponential with rate kν) before it or not.
    pub(crate) fn draw_latent(&self, rng: &mut Rng, now: f64, phase: f64) -> bool {
        if self.m == 0 || self.latent_per_hour == 0.0 {
            return false;
        }
        let since_scrub = (now + phase).rem_euclid(self.scrub_hours);
        rng.exp(1.0 / (self.k as f64 * self.latent_per_hour)) < since_scrub
    }

    /// The Monte-Carlo lifetimes themselves (hours to the first loss, same seed, same runs as
    /// [`ReliabilityModel::monte_carlo`]): their empirical distribution checks
    /// [`Chain::loss_probability_within`].
    pub fn monte_carlo_samples(&self, runs: u64, seed: u64) -> Result<Vec<f64>, ReliabilityError> {
        Ok(lifetimes(self, runs, seed, RepairTimes::Exponential)?.0)
    }
}

impl ReliabilityModel for ArrayModel {
    /// The chain of the module doc (state i: i devices failed).
    fn chain(&self) -> Result<Chain, ReliabilityError> {
        self.validate()?;
        let (n, m) = (self.n(), self.m);
        let lambda = 1.0 / self.mttf_hours;
        let mu = 1.0 / self.mttr_hours;
        let p = self.critical_read_loss_probability();
        let mut c = Chain::new();
        for i in 0..=m {
            c.state(format!("{i} failed"));
        }
        for i in 0..=m {
            let fail = (n - i) as f64 * lambda;
            if i == m {
                c.to_loss(i, fail);
            } else if i + 1 == m {
                c.edge(i, i + 1, fail * (1.0 - p));
                c.to_loss(i, fail * p);
            } else {
                c.edge(i, i + 1, fail);
            }
            if i > 0 {
                c.edge(i, i - 1, self.repair.rate(i, mu));
            }
        }
        Ok(c)
    }
}

impl MonteCarloModel for ArrayModel {
    fn check(&self) -> Result<(), ReliabilityError> {
        self.validate()
    }

    /// Monte-Carlo: each device with its own exponential lifetime, failed devices rebuilt by the
    /// repair policy (rebuild durations drawn by `times`), a URE drawn bit by bit (the position of
    /// the first error, geometric) for each rebuild that starts without redundancy.
    fn lifetime(&self, rng: &mut Rng, failures: &mut u64, times: RepairTimes) -> Lifetime {
        let n = self.n();
        let bits_read = 8.0 * self.k as f64 * self.device_bytes;
        // Per device: when it fails next (if working) or when its rebuild ends (if being rebuilt,
        // f64::INFINITY while waiting for a sequential rebuild).
        let mut fails_at: Vec<f64> = (0..n).map(|_| rng.exp(self.mttf_hours)).collect();
        let mut repaired_at = vec![f64::INFINITY; n];
        let mut failed: Vec<bool> = vec![false; n];
        let mut queue: std::collections::VecDeque<usize> = Default::default();
        let mut down = 0usize;
        let mut events = Events::default();
        // This run's scrub schedule: a uniform phase.
        let phase = if self.latent_per_hour > 0.0 {
            rng.next_f64() * self.scrub_hours
        } else {
            0.0
        };
        loop {
            events.tick()?;
            // The next event: the earliest failure of a working device or end of a rebuild.
            let (mut t, mut dev, mut is_fail) = (f64::INFINITY, 0, true);
            for d in 0..n {
                if !failed[d] && fails_at[d] < t {
                    (t, dev, is_fail) = (fails_at[d], d, true);
                }
                if failed[d] && repaired_at[d] < t {
                    (t, dev, is_fail) = (repaired_at[d], d, false);
                }
            }
            if is_fail {
                *failures += 1;
                failed[dev] = true;
                down += 1;
                if down > self.m {
                    return Ok(t);
                }
                if down == self.m && self.uber > 0.0 {
                    // Bits read until the first URE: geometric with parameter uber.
                    let first_error_bit = rng.exp(1.0 / self.uber);
                    if first_error_bit < bits_read {
                        return Ok(t);
                    }
                }
                if down == self.m && self.draw_latent(rng, t, phase) {
                    return Ok(t);
                }
                match self.repair {
                    Repair::Parallel => repaired_at[dev] = t + times.draw(rng, self.mttr_hours),
                    Repair::Sequential => {
                        if queue.is_empty() {
                            repaired_at[dev] = t + times.draw(rng, self.mttr_hours);
                        }
                        queue.push_back(dev);
                    }
                }
            } else {
                failed[dev] = false;
                down -= 1;
                repaired_at[dev] = f64::INFINITY;
                fails_at[dev] = t + rng.exp(self.mttf_hours);
                if self.repair == Repair::Sequential {
                    assert_eq!(queue.pop_front(), Some(dev));
                    if let Some(&next) = queue.front() {
                        repaired_at[next] = t + times.draw(rng, self.mttr_hours);
                    }
                }
            }
        }
    }
}
