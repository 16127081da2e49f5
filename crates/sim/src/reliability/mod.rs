//! Reliability (MTTDL) models of the layouts ecstack builds (docs/reliability.md).
//!
//! Each model is a continuous-time Markov chain ([`Chain`]) solved exactly for the mean time to
//! data loss, and has a Monte-Carlo simulation of its own that replays failures and repairs of
//! individual devices (seeded with [`ecstack_base::Rng`], so a seed replays a run) to check it:
//!
//! - [`ArrayModel`]: RAID-5, RAID-6 and RS(k, m) arrays of `k + m` devices;
//! - [`EplogModel`]: EPLOG's main array plus `m` log devices, with uncommitted updates (log
//!   stripes) that depend on the log devices until the next parity commit;
//! - [`ClusterModel`]: a CodFS cluster of OSDs, segments placed on `k + m` distinct OSDs, recovery
//!   spread over the surviving OSDs;
//! - [`rainfs`]: RainFS Table 2.1, the disks and racks each architecture tolerates.
//!
//! The three Markov models share one interface, [`ReliabilityModel`]: each gives its chain and
//! simulates one lifetime; the MTTDL and the Monte-Carlo estimates are the trait's, written once.
//!
//! Times are hours inside the models; reports convert to years of 365.25 days.

mod array;
mod chain;
mod cluster;
mod eplog;
mod montecarlo;
mod params;
pub mod rainfs;

pub use array::{ArrayModel, Repair};
pub use chain::Chain;
pub use cluster::ClusterModel;
pub use eplog::EplogModel;
pub use montecarlo::{McEstimate, RepairTimes, Z_99};
pub use params::{
    mttf_from_afr, rebuild_hours, ure_probability, Mttdl, ReliabilityError, HOURS_PER_YEAR,
};

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
