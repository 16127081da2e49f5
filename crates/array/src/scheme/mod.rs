//! Update schemes: how a write becomes chunk writes, log chunks and parity work. One file per scheme
//! behind `UpdateScheme` (crate-private); the array core (`Core`) provides geometry, devices,
//! metadata and codes. This file holds what the schemes share; the array picks a scheme.

pub(crate) mod eplog;
pub(crate) mod md;
pub(crate) mod pl;
pub(crate) mod segments;
pub(crate) mod stripe_buffer;

pub use crate::core::CommitReport;

use crate::core::Core;
use crate::{Result, SchemeKind};

/// Batches that may be written at the same time by default (more keep the devices busier, fewer
/// make batches larger: fewer log chunks per data chunk).
pub const DEFAULT_IN_FLIGHT: usize = 2;

/// Read `buf.len()` bytes at byte `off` inside data chunk `pos` of data stripe `stripe`.
pub(crate) struct ChunkRead<'a> {
    pub stripe: u64,
    pub pos: usize,
    pub off: usize,
    pub buf: &'a mut [u8],
}

/// Write the whole data chunk `pos` of data stripe `stripe` (`data.len()` = chunk size).
pub(crate) struct ChunkWrite<'a> {
    pub stripe: u64,
    pub pos: usize,
    pub data: &'a [u8],
}

/// Whether a write went through or needs a parity commit first to free space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteOutcome {
    Done,
    /// Nothing was written: the spare chunk slots or the log devices are full.
    NeedCommit,
}

/// One update scheme. All calls come from the array with the stripes involved locked; `commit`
/// runs with the whole array locked.
pub(crate) trait UpdateScheme: Send + Sync {
    fn kind(&self) -> SchemeKind;
    /// Read data chunk ranges (degraded reads decode lost chunks).
    fn read(&self, core: &Core, reqs: &mut [ChunkRead<'_>]) -> Result<()>;
    /// Write whole data chunks (at most one per chunk, any stripes).
    fn write(&self, core: &Core, writes: &[ChunkWrite<'_>]) -> Result<WriteOutcome>;
    /// Parity commit: make every data stripe's parity reflect its latest data and free old versions
    /// and log chunks.
    fn commit(&self, core: &Core) -> Result<CommitReport>;
    /// Whether there are updates since the last parity commit.
    fn has_pending(&self, core: &Core) -> bool;
    /// The committed layout of stripe `s`: for every position (data then parity) the chunk slot on
    /// its device, or None when the chunk reads as zeros (data) or holds nothing yet (parity).
    /// None for a stripe never written. Valid right after a parity commit.
    /// The default is the in-place layout of md and pl: chunk p of stripe s is slot s of device p.
    fn committed_layout(&self, core: &Core, s: u64) -> Option<Vec<Option<u64>>> {
        core.meta()
            .state
            .is_written(s)
            .then(|| vec![Some(s); core.geo.n])
    }
    /// Stripes that have ever been written, in ascending order.
    fn written_stripes(&self, core: &Core) -> Vec<u64> {
        core.meta().state.written_stripes()
    }
    /// Write out anything held in memory (eplog device buffers) before a flush.
    fn drain(&self, _core: &Core) -> Result<WriteOutcome> {
        Ok(WriteOutcome::Done)
    }
    /// Hold up to `chunks` updated chunks per device in memory (eplog device buffers; 0 = off).
    fn set_buffer(&self, _core: &Core, _chunks: usize) -> Result<()> {
        Ok(())
    }
    /// Let concurrent write requests share log stripes, with up to `in_flight` batches written at
    /// once (eplog stripe buffer; 0 = off; other schemes ignore it).
    fn set_stripe_buffer(&self, _in_flight: usize) {}
    /// The clock of time-driven decisions (eplog stripe buffer mode choice; others ignore it).
    fn set_clock(&self, _clock: crate::clock::Clock) {}
    /// Stripe-buffer counters (None when the scheme has none or it is off); `reset` zeroes them.
    fn stripe_buffer_stats(&self, _reset: bool) -> Option<BatchStats> {
        None
    }
}

/// Counters: batches written and the requests they carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BatchStats {
    pub batches: u64,
    pub requests: u64,
    /// Time spent writing batches (summed over batches written at the same time).
    #[serde(default)]
    pub write_seconds: f64,
    /// Measuring epochs spent in eager mode and in batching mode.
    #[serde(default)]
    pub eager_epochs: u64,
    #[serde(default)]
    pub batch_epochs: u64,
}
