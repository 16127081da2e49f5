//! Monte-Carlo estimates: independent runs from "every device healthy" to the first data loss, the
//! sample mean and its standard error (the runs are i.i.d., so the central limit theorem gives the
//! confidence interval).

use ecstack_base::Rng;

use super::params::{invalid, positive, ReliabilityError, HOURS_PER_YEAR};

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

/// How long the Monte-Carlo's recoveries take: the chain's exponential times, or a fluid model of
/// the work where durations are not memoryless (a check of the chain's exponential assumption).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum RepairTimes {
    /// The chain's assumption: one failed OSD comes back at rate ρ_j (the doc of
    /// [`ClusterModel`](super::ClusterModel)).
    Exponential,
    /// Fluid recovery: a failed OSD is detected exactly `detect_hours` after it fails; then its
    /// C bytes are rebuilt by the N − j survivors, whose combined pace (N − j)·r is shared equally
    /// by the detected OSDs still being rebuilt; it returns when its bytes are done. Alone, it
    /// takes exactly D + C / ((N − 1)·r), the chain's mean 1/ρ_1.
    Deterministic,
    /// Fluid recovery as above with each failed OSD's bytes scaled by a lognormal factor of mean 1
    /// and log-standard deviation `sigma` (some OSDs hold more, or rebuild slower).
    Lognormal { sigma: f64 },
}

/// A lognormal factor of mean 1 and log-standard deviation `sigma`: exp(σZ − σ²/2), Z standard
/// normal by Box-Muller (two uniforms).
pub(crate) fn lognormal_factor(rng: &mut Rng, sigma: f64) -> f64 {
    let u1 = 1.0 - rng.next_f64();
    let u2 = rng.next_f64();
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    (sigma * z - sigma * sigma / 2.0).exp()
}

impl RepairTimes {
    /// One rebuild's duration of mean `mean_hours` for the array and EPLOG Monte-Carlos:
    /// exponential (the chains' assumption; one `rng.exp` draw, the stream of
    /// `ReliabilityModel::monte_carlo` of the array), exactly the mean (deterministic), or the mean times a lognormal
    /// factor of mean 1. (The cluster's fluid recovery uses the kinds differently: see the variants.)
    pub(crate) fn draw(self, rng: &mut Rng, mean_hours: f64) -> f64 {
        match self {
            RepairTimes::Exponential => rng.exp(mean_hours),
            RepairTimes::Deterministic => mean_hours,
            RepairTimes::Lognormal { sigma } => mean_hours * lognormal_factor(rng, sigma),
        }
    }

    pub(crate) fn validate(self) -> Result<(), ReliabilityError> {
        if let RepairTimes::Lognormal { sigma } = self {
            positive("lognormal sigma", "log units", sigma, false)?;
        }
        Ok(())
    }
}

impl std::str::FromStr for RepairTimes {
    type Err = ReliabilityError;
    fn from_str(s: &str) -> Result<RepairTimes, ReliabilityError> {
        match s {
            "exponential" => Ok(RepairTimes::Exponential),
            "deterministic" => Ok(RepairTimes::Deterministic),
            _ => match s.strip_prefix("lognormal:").map(str::parse::<f64>) {
                Some(Ok(sigma)) if sigma.is_finite() && sigma > 0.0 => {
                    Ok(RepairTimes::Lognormal { sigma })
                }
                _ => Err(invalid(format!(
                    "repair times must be exponential, deterministic or lognormal:SIGMA (SIGMA > 0), got {s:?}"
                ))),
            },
        }
    }
}

/// One lifetime of a Monte-Carlo run: hours from "every device healthy" to the first data loss, or
/// why the run could not end.
pub type Lifetime = Result<f64, ReliabilityError>;

/// A model with a Monte-Carlo simulation of its own (the array, EPLOG and cluster models). Public
/// in a private module: other crates see it only as the sealed supertrait of
/// [`ReliabilityModel`](super::ReliabilityModel), and cannot implement it.
pub trait MonteCarloModel {
    /// The model's checks before any run: its parameters and the limits of its simulation.
    fn check(&self) -> Result<(), ReliabilityError>;

    /// One lifetime, each rebuild's duration drawn by `times`; adds the device failures it
    /// simulated to `failures`.
    fn lifetime(&self, rng: &mut Rng, failures: &mut u64, times: RepairTimes) -> Lifetime;
}

/// The Monte-Carlo of every model: `runs` lifetimes of `model` from one generator seeded with
/// `seed` (so the seed replays the estimate), summarised. Checks the model, then `times`, then
/// `runs`, before the first run.
pub(crate) fn estimate<M: MonteCarloModel + ?Sized>(
    model: &M,
    runs: u64,
    seed: u64,
    times: RepairTimes,
) -> Result<McEstimate, ReliabilityError> {
    let (samples, failures) = lifetimes(model, runs, seed, times)?;
    McEstimate::from_samples(seed, &samples, failures)
}

/// The lifetimes of [`estimate`] themselves (same checks, same runs), and the device failures
/// simulated in all of them.
pub(crate) fn lifetimes<M: MonteCarloModel + ?Sized>(
    model: &M,
    runs: u64,
    seed: u64,
    times: RepairTimes,
) -> Result<(Vec<f64>, u64), ReliabilityError> {
    model.check()?;
    times.validate()?;
    check_runs(runs)?;
    let mut rng = Rng::new(seed);
    let mut samples = Vec::with_capacity(runs as usize);
    let mut failures = 0;
    for _ in 0..runs {
        samples.push(model.lifetime(&mut rng, &mut failures, times)?);
    }
    Ok((samples, failures))
}

fn check_runs(runs: u64) -> Result<(), ReliabilityError> {
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
const EVENTS_PER_RUN_MAX: u64 = 20_000_000;

/// The events of one run so far, at most [`EVENTS_PER_RUN_MAX`].
#[derive(Default)]
pub(crate) struct Events(u64);

impl Events {
    /// Counts the next event of the run: an error once the run passes the bound.
    pub(crate) fn tick(&mut self) -> Result<(), ReliabilityError> {
        self.0 += 1;
        if self.0 > EVENTS_PER_RUN_MAX {
            return Err(invalid(format!(
                "a Monte-Carlo run passed {} events without data loss: the MTTDL is too long for \
                 simulation with these parameters (use the exact chain, or raise failure rates to check the model)",
                self.0
            )));
        }
        Ok(())
    }
}
