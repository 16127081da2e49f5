//! Simulated devices in virtual time: deterministic, fast, and `BlockDevice`s like any other.

pub mod hdd;
pub mod sparse;
pub mod ssd;
pub mod wear;
