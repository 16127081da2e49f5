//! What every ecstack layer shares and nothing else: the seeded PRNGs (so a stored seed regenerates the
//! same coding graph, fault schedule or synthetic trace whatever the dependency versions) and the parsing
//! and printing of byte sizes. No dependencies.

pub mod rng;
pub mod size;

pub use rng::{Rng, SplitMix64};
pub use size::{fmt_size, parse_size};
