//! The array layer: a local erasure-coded block device over several [`BlockDevice`]s with pluggable
//! update schemes, after EPLOG (Chan, Li, Lee, Xu; `../shared/seeds/eplog-paper.txt` §2–§3).
//!
//! * A **main array** of `n` devices holds data stripes (`k` data chunks + `n − k` parity chunks,
//!   parity rotating across devices); `n − k` **log devices** hold log chunks; a **metadata volume**
//!   holds the superblock, two alternating full checkpoints and an append-only incremental area
//!   (format in `docs/array-format.md`).
//! * Update schemes, one file each behind a crate-private `UpdateScheme` trait: `md` (read-modify-write or
//!   reconstruct-write, parity in place), `pl` (classic parity logging, §2.2) and `eplog` (elastic
//!   parity logging with out-of-place updates, log stripes, parity commit and recovery, §2.3–§3.4).
//! * [`Tween`]: TWEEN's log-structured layer with NVRAM stripe buffers per hotness group over an
//!   array of scheme `tween`, whose data stripes are its log segments (`docs/tween.md`).
//! * [`Array`] implements [`BlockDevice`] (any byte offset and length, concurrent callers, per-stripe
//!   locking, device I/O issued in parallel) and exposes the admin operations `fail_device`,
//!   `rebuild_device`, `commit`, `status`; the admin language of a running array (`fail log0`,
//!   `rebuild 3 --replacement SPEC`, `scrub`, …) is [`AdminCommand`], executed by [`Array::execute`], and
//!   [`Array::open_recorded`] reopens an array from the device specs its superblock records.
//!
//! ```
//! use std::sync::Arc;
//! use ecstack_array::{Array, ArrayConfig, ArrayDevices, SchemeKind};
//! use ecstack_device::{BlockDevice, MemDevice};
//! let dev = |mb: u64| -> Arc<dyn BlockDevice> { Arc::new(MemDevice::new(mb << 20).unwrap()) };
//! let devices = ArrayDevices {
//!     main: (0..5).map(|_| dev(1)).collect(),
//!     log: vec![dev(1)],
//!     meta: dev(2),
//!     specs: None,
//! };
//! let cfg = ArrayConfig { scheme: SchemeKind::Eplog, ..ArrayConfig::raid5(4) };
//! let array = Array::create(&cfg, devices).unwrap();
//! array.write_at(b"hello, elastic parity logging", 12345).unwrap();
//! array.commit().unwrap();
//! let mut back = [0u8; 29];
//! array.read_at(&mut back, 12345).unwrap();
//! assert_eq!(&back, b"hello, elastic parity logging");
//! ```

mod admin;
mod array;
mod clock;
mod core;
mod crc;
mod exclusive;
mod extent_set;
mod format;
#[cfg(test)]
mod fuzz;
mod io;
mod meta;
mod recovery;
pub mod scheme;
mod scrub;
pub mod sim;
mod status;
mod tween;

pub use crate::core::{CommitReport, RebuildReport};
pub use admin::{
    AdminCommand, AdminReply, DeviceName, Reopened, ScrubProgress, ScrubProgressReport,
    UnavailableDevice,
};
pub use array::{Array, ArrayDevices, DiscardReport, OpenOptions};
pub use clock::Clock;
pub use format::{ArrayConfig, Geometry, SchemeKind, Superblock};
pub use io::IoCounters;
pub use scheme::{BatchStats, DEFAULT_IN_FLIGHT};
pub use scrub::{ScrubOptions, ScrubProblem, ScrubReport, SCRUB_PROBLEMS_LISTED_MAX};
pub use status::{
    ArrayStatus, ChecksumStatus, ClassStatus, CommitStats, DeviceStatus, MetaStatus, PendingStatus,
    RequestStats, SsdSummary,
};
pub use tween::{
    BackgroundGc, GcMode, NvramImage, NvramSpec, Tween, TweenConfig, TweenRuntime, TweenStats,
    VictimPolicy,
};

pub use ecstack_codes::CodeKind;
pub use ecstack_device::BlockDevice;

/// Errors of the array layer: each one line that names the problem.
#[derive(Debug, thiserror::Error)]
pub enum ArrayError {
    #[error("invalid array configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Device(#[from] ecstack_device::DeviceError),
    #[error("erasure code: {0}")]
    Code(#[from] ecstack_codes::CodeError),
    #[error("metadata: {0}")]
    Meta(String),
    #[error("data unavailable: {0}")]
    DataLoss(String),
    #[error("no space: {0}")]
    NoSpace(String),
    #[error("{0}")]
    Admin(String),
    /// Another opener holds one of the array's devices (one line naming it).
    #[error("{0}")]
    Busy(String),
    /// `create` without `force` found something on a device (one line naming the device and
    /// what it holds).
    #[error("{0}")]
    NotBlank(String),
    /// An error of a write batched with others by the eplog stripe buffer, as every request of
    /// the batch sees it.
    #[error("{0}")]
    Batch(String),
}

pub type Result<T> = std::result::Result<T, ArrayError>;
