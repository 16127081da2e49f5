//! Monte-Carlo estimates: independent runs from "every device healthy" to the first data loss, the
//! sample mean and its standard error (the runs are i.i.d., so the central limit theorem gives the
//! confidence interval).

use ecstack_base::Rng;

use super::params::{invalid, ReliabilityError, HOURS_PER_YEAR};

/// Normal quantile of a two-sided 99 % confidence interval.
pub const Z_99: f64 = 2.5758;

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct McEstimate {
    /// Independent runs, each to its first data loss.
    pub runs: u64,
    /// The seed that replays the estimate exactly.
    pub seed: u64,
    pub mean_hours: f64,
    /// Standard error of the mean (sample standard deviation / sqrt(runs)).
    pub std_error_hours: f64,
    /// Device failures simulated in all runs (a check that the runs did work).
    pub failures: u64,
}

impl McEstimate {
    /// `runs` lifetimes from one seeded generator, each drawn by `one_run` (which adds the device
    /// failures it simulated to its counter), summarised.
    pub(crate) fn sample(
        runs: u64,
        seed: u64,
        mut one_run: impl FnMut(&mut Rng, &mut u64) -> Result<f64, ReliabilityError>,
    ) -> Result<McEstimate, ReliabilityError> {
        let (samples, failures) = draw(runs, seed, &mut one_run)?;
        McEstimate::from_samples(seed, &samples, failures)
    }

    pub(crate) fn from_samples(
        seed: u64,
        samples: &[f64],
        failures: u64,
    ) -> Result<McEstimate, ReliabilityError> {
        if samples.len() < 2 {
            return Err(invalid(format!(
                "Monte-Carlo needs at least 2 runs, got {}",
                samples.len()
            )));
        }
        let n = samples.len() as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
        Ok(McEstimate {
            runs: samples.len() as u64,
            seed,
            mean_hours: mean,
            std_error_hours: (var / n).sqrt(),
            failures,
        })
    }

    /// The two-sided confidence interval mean ± z · standard error (hours).
    pub fn interval_hours(&self, z: f64) -> (f64, f64) {
        (
            self.mean_hours - z * self.std_error_hours,
            self.mean_hours + z * self.std_error_hours,
        )
    }

    /// True when `hours` lies in the interval of quantile `z`.
    pub fn contains(&self, hours: f64, z: f64) -> bool {
        let (lo, hi) = self.interval_hours(z);
        lo <= hours && hours <= hi
    }

    pub fn mean_years(&self) -> f64 {
        self.mean_hours / HOURS_PER_YEAR
    }
}

/// `runs` lifetimes (hours to the first loss) from one seeded generator, and the device failures
/// simulated in all of them.
pub(crate) fn draw(
    runs: u64,
    seed: u64,
    one_run: &mut impl FnMut(&mut Rng, &mut u64) -> Result<f64, ReliabilityError>,
) -> Result<(Vec<f64>, u64), ReliabilityError> {
    let mut rng = Rng::new(seed);
    let mut samples = Vec::with_capacity(runs as usize);
    let mut failures = 0;
    for _ in 0..runs {
        samples.push(one_run(&mut rng, &mut failures)?);
    }
    Ok((samples, failures))
}

pub(crate) fn check_runs(runs: u64) -> Result<(), ReliabilityError> {
    const RUNS_MAX: u64 = 100_000_000;
    if (2..=RUNS_MAX).contains(&runs) {
        Ok(())
    } else {
        Err(invalid(format!(
            "Monte-Carlo runs must be in [2, {RUNS_MAX}], got {runs}"
        )))
    }
}

/// A bound on the events of one run, so a model whose loss is practically unreachable with the
/// given parameters ends with an error instead of running for days.
pub(crate) const EVENTS_PER_RUN_MAX: u64 = 20_000_000;

pub(crate) fn too_long(events: u64) -> ReliabilityError {
    invalid(format!(
        "a Monte-Carlo run passed {events} events without data loss: the MTTDL is too long for \
         simulation with these parameters (use the exact chain, or raise failure rates to check the model)"
    ))
}
