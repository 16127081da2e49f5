//! Simulators that are not devices (ARCHITECTURE.md, layer `sim`). Each lives in its own module and
//! shares only `ecstack-base`'s seeded PRNGs, so a stored seed replays a run exactly:
//!
//! - `robustore`: RobuSTore's ch. 6 world (seed `robustore-thesis.txt`): one client, filers with caches
//!   and disks under background load, RAID-0 / RRAID-S / RRAID-A / RobuSTore access schemes, in virtual
//!   time;
//! - `reserve`: CodFS's workload-aware reserved space (Algorithm 1) and a one-pass simulator of it
//!   over a file write trace (seed `codfs-tween-thesis.txt` §4.1.2, §5.3.2);
//! - `reliability`: MTTDL models (Markov chains solved exactly, checked by Monte-Carlo) of the array and
//!   cluster layouts ecstack builds.
//!
//! Flash wear (ZombieNAND) is not here: it is a device model, in `ecstack-device`'s SSD.

#![forbid(unsafe_code)]

pub mod reliability;
pub mod reserve;
pub mod robustore;
