//! TreeChunks (seed `rainfs-treechunks-zombienand-thesis.txt` ch. 3): how much would compression and
//! deduplication save on a file tree — measured in place, each file read once, with every configuration
//! run on that one buffer.
//!
//! - [`analyze`] walks a tree (deterministic order), feeds files to parallel workers (live-throttled) and
//!   writes a results directory (`docs/reduce.md` documents it);
//! - [`merge`] combines `--shard i/N` results into exactly the single-machine result;
//! - [`anchors::anchors`] sets our figures beside borg's, restic's and the compressor CLIs' on one tree;
//! - [`report`] aggregates a results directory per configuration, extension and directory, with a
//!   sampling estimate beside each exact figure; [`html::write_html`] draws the seed's tree picture.

mod analyze;
pub mod anchors;
pub mod config;
mod engine;
pub mod html;
mod index;
mod rabin;
mod report;
mod results;
mod signal;
mod throttle;

pub use analyze::{analyze, byte_sampled, shard_of, AnalyzeOptions, AnalyzeSummary, Shard};
pub use config::{Config, Configuration, Method};
pub use engine::{ChunkSink, Engine, Outcome};
pub use index::{ChunkRecord, DedupTotals};
pub use rabin::Rabin;
pub use report::{report, Estimate, GroupRow, Report, ReportOptions, Total};
pub use results::{merge, Manifest};
pub use signal::reload_config;
pub use throttle::Throttle;

/// Everything that can go wrong, as one line each.
#[derive(Debug, thiserror::Error)]
pub enum ReduceError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Io(String),
    #[error("results database: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("corrupt results: {0}")]
    Corrupt(String),
    #[error("{0}")]
    Usage(String),
}
