//! What every ecstack layer shares and nothing else: the seeded PRNGs (so a stored seed regenerates the
//! same coding graph, fault schedule or synthetic trace whatever the dependency versions), the parsing
//! and printing of byte sizes, the mutation of byte images for decoder fuzzing, and the one latency
//! histogram (on `hdrhistogram`), CodFS's reserve arithmetic (Algorithm 1, for the OSD and the simulator),
//! and the random ids that tell one array, mirror or shard set from
//! another (on `uuid`).

#![forbid(unsafe_code)]

pub mod hist;
pub mod id;
pub mod mutate;
pub mod reserve;
pub mod rng;
pub mod size;

pub use hist::LatencyHistogram;
pub use id::random_id;
pub use rng::{Rng, SplitMix64};
pub use size::{fmt_size, parse_size};
