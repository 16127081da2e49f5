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
//! [`report`] holds what `ecstack reliability` reports of a model, as JSON and as text.
//!
//! The three Markov models share one interface, [`ReliabilityModel`]: each gives its chain and
//! simulates one lifetime; the MTTDL and the Monte-Carlo estimates are the trait's, written once.
//!
//! Times are hours inside the models; reports convert to years of 365.25 days.

mod array;
mod chain;
mod cluster;
mod eplog;
mod model;
mod montecarlo;
mod params;
pub mod rainfs;
pub mod report;

pub use array::{ArrayModel, Repair};
pub use chain::Chain;
pub use cluster::ClusterModel;
pub use eplog::EplogModel;
pub use model::ReliabilityModel;
pub use montecarlo::{McEstimate, RepairTimes, Z_99};
pub use params::{
    mttf_from_afr, rebuild_hours, ure_probability, Mttdl, ReliabilityError, HOURS_PER_YEAR,
};
