//! The [`ReliabilityModel`] trait every model implements: its exact chain, and the MTTDL and
//! Monte-Carlo estimates derived from it once for all models.

use super::chain::Chain;
use super::montecarlo::{self, McEstimate, RepairTimes};
use super::params::{Mttdl, ReliabilityError};

/// A reliability model: an exact chain for its MTTDL, and a Monte-Carlo simulation of its own (one
/// lifetime at a time, [`montecarlo::MonteCarloModel`], sealed in this module) that checks it.
pub trait ReliabilityModel: montecarlo::MonteCarloModel {
    /// The model's chain, state 0 with every device healthy; checks the parameters first.
    fn chain(&self) -> Result<Chain, ReliabilityError>;

    /// Mean time to data loss: the chain's mean time to absorption from state 0.
    fn mttdl(&self) -> Result<Mttdl, ReliabilityError> {
        Ok(Mttdl {
            hours: self.chain()?.mean_time_to_loss(0)?,
        })
    }

    /// Monte-Carlo: `runs` independent lifetimes from one generator seeded with `seed` (so the seed
    /// replays the estimate), each rebuild's duration exponential as the chain assumes.
    fn monte_carlo(&self, runs: u64, seed: u64) -> Result<McEstimate, ReliabilityError> {
        self.monte_carlo_with(runs, seed, RepairTimes::Exponential)
    }

    /// Monte-Carlo with each rebuild's duration drawn by `times` ([`RepairTimes::Exponential`] is
    /// [`ReliabilityModel::monte_carlo`]). With other durations the chain is no longer exact: the
    /// difference measures what its exponential assumption costs (docs/reliability.md). Checks the
    /// model, then `times`, then `runs`, before the first run.
    fn monte_carlo_with(
        &self,
        runs: u64,
        seed: u64,
        times: RepairTimes,
    ) -> Result<McEstimate, ReliabilityError> {
        montecarlo::estimate(self, runs, seed, times)
    }
}
