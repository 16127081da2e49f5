//! The `BlockDevice` seam and everything that implements it.
//!
//! Every layer above (array, OSD chunk store, KV store) stores bytes on a `BlockDevice`. Real devices,
//! wrappers and simulated devices all implement the same trait so an experiment can swap a file for a
//! simulated SSD without touching the code above.
//!
//! * real devices: [`FileDevice`] (regular file or raw block device, optional `O_DIRECT`), [`MemDevice`];
//! * wrappers, composable around any device: [`Metered`], [`Throttled`], [`Faulty`];
//! * simulated devices in virtual time: [`SimHdd`] (over [`HddModel`]) and [`SimSsd`] (over [`SsdModel`]);
//! * [`open_spec`]: build any of the above from a one-line spec such as
//!   `metered:faulty:seed=7,fail_at=1000:ssd:blocks=1024,op=0.15` (syntax in `docs/devices.md`).

use std::fmt;
use std::sync::Arc;

pub mod batch;
pub mod cached;
pub mod faulty;
pub mod file;
pub mod hist;
pub mod lock;
pub mod mem;
pub mod metered;
pub mod mirror;
pub mod rng;
pub mod sim;
pub mod spec;
pub mod throttled;
pub(crate) mod uring;
pub mod workload;

pub use batch::{Batch, IoKind, IoRequest};
pub use cached::Cached;
pub use faulty::{
    CutWrite, FaultConfig, FaultCounts, Faulty, Outcome, PowerCutPolicy, PowerCutReport,
};
pub use file::{AlignedBuf, FileDevice, FileOptions, DIRECT_ALIGN};
pub use hist::LatencyHistogram;
pub use lock::{holder_line, lock_exclusive, lock_file_with_pid, DeviceLock, Holder, LockError};
pub use mem::MemDevice;
pub use metered::Metered;
pub use mirror::{Mirror, MirrorReport};
pub use rng::SplitMix64;
pub use sim::hdd::{HddConfig, HddModel, HddStats, Scheduler, SimHdd};
pub use sim::ssd::{
    BlockInfo, BlockStatus, CellMode, DeathRule, GcPolicy, LifeAverage, NoWear, SimSsd, SsdConfig,
    SsdModel, SsdStats, WearAction, WearModel,
};
pub use sim::wear::{WearPhysics, ZombieWear};
pub use spec::{hdd_config, open_spec, parse_duration, parse_size, ssd_config};
pub use throttled::{LatencyDist, ServiceProfile, ThrottleConfig, Throttled};
pub use uring::set_enabled as set_uring_enabled;
pub use workload::{Pattern, Workload};

/// Errors a device reports. One line each, naming the device where it can.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("{device}: I/O error: {source}")]
    Io {
        device: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{device}: access [{offset}, {offset}+{len}) is beyond capacity {capacity}")]
    OutOfRange {
        device: String,
        offset: u64,
        len: u64,
        capacity: u64,
    },
    #[error("{device}: device has failed")]
    Failed { device: String },
    #[error("{device}: {what}")]
    Other { device: String, what: String },
}

impl DeviceError {
    /// Shorthand for [`DeviceError::Other`].
    pub fn other(device: impl Into<String>, what: impl Into<String>) -> Self {
        DeviceError::Other {
            device: device.into(),
            what: what.into(),
        }
    }
    /// Shorthand for [`DeviceError::Io`].
    pub fn io(device: impl Into<String>, source: std::io::Error) -> Self {
        DeviceError::Io {
            device: device.into(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, DeviceError>;

/// Counters every device exposes (wrappers such as `Metered` fill in more detail).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeviceStats {
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
    pub seq_reads: u64,
    pub rand_reads: u64,
    pub seq_writes: u64,
    pub rand_writes: u64,
    pub flushes: u64,
    pub discards: u64,
    pub discard_bytes: u64,
    /// Modeled (virtual) time in nanoseconds for simulated devices; time spent sleeping for
    /// `Throttled`; 0 for real devices.
    #[serde(default)]
    pub modeled_ns: u64,
    /// Requests that failed (kept by observers such as `Metered` and the array's meters).
    #[serde(default)]
    pub errors: u64,
    /// Model counters (write amplification, GC, seeks…) of a simulated device, or of the one a
    /// wrapper holds; None for real devices. Not summed by [`DeviceStats::add`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelStats>,
}

impl DeviceStats {
    /// Count one read or write of `len` bytes, sequential or random.
    pub fn count(&mut self, write: bool, sequential: bool, len: u64) {
        let (ops, bytes, seq, rand) = if write {
            (
                &mut self.write_ops,
                &mut self.write_bytes,
                &mut self.seq_writes,
                &mut self.rand_writes,
            )
        } else {
            (
                &mut self.read_ops,
                &mut self.read_bytes,
                &mut self.seq_reads,
                &mut self.rand_reads,
            )
        };
        *ops += 1;
        *bytes += len;
        if sequential {
            *seq += 1;
        } else {
            *rand += 1;
        }
    }

    /// Add another device's counters (totals of a device class; `model` is left as it is).
    pub fn add(&mut self, o: &DeviceStats) {
        self.read_ops += o.read_ops;
        self.read_bytes += o.read_bytes;
        self.write_ops += o.write_ops;
        self.write_bytes += o.write_bytes;
        self.seq_reads += o.seq_reads;
        self.rand_reads += o.rand_reads;
        self.seq_writes += o.seq_writes;
        self.rand_writes += o.rand_writes;
        self.flushes += o.flushes;
        self.discards += o.discards;
        self.discard_bytes += o.discard_bytes;
        self.modeled_ns += o.modeled_ns;
        self.errors += o.errors;
    }
}

/// Model-specific counters of a simulated device ([`DeviceStats::model`]; wrappers pass them on).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "model", rename_all = "lowercase")]
pub enum ModelStats {
    Ssd(SsdStats),
    Hdd(HddStats),
}

/// A byte-addressed block device. Object-safe and shareable between threads: the array issues I/O to
/// several devices in parallel, so implementations use interior mutability where they need state.
pub trait BlockDevice: Send + Sync + fmt::Debug {
    /// Human-readable name used in errors and reports.
    fn name(&self) -> &str;
    /// Capacity in bytes.
    fn capacity(&self) -> u64;
    /// Read exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// Write all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()>;
    /// Make every completed write durable.
    fn flush(&self) -> Result<()>;
    /// Tell the device a range no longer holds data (TRIM / punch hole). Reads of it may return zeros.
    fn discard(&self, offset: u64, len: u64) -> Result<()>;
    /// A snapshot of the device's counters.
    fn stats(&self) -> DeviceStats {
        DeviceStats::default()
    }
    /// Whether reads return the bytes written (true for every real device). False for a device
    /// that models only timing and wear, such as a simulated SSD or HDD without `keep_data`: its
    /// reads return zeros, so a layer that checks data it reads back (the array's per-chunk
    /// checksums) must not check it. Wrappers answer for the device they wrap.
    fn keeps_data(&self) -> bool {
        true
    }
    /// The files and block devices that hold this device's bytes, which an exclusive opener (the
    /// array, see [`lock`]) locks. None for devices in memory or simulated; wrappers answer for
    /// the devices they wrap.
    fn backing_paths(&self) -> Vec<std::path::PathBuf> {
        Vec::new()
    }
    /// Run a batch of requests (each answered exactly once, through `batch`): the one path for
    /// issuing several requests at once. The default runs them one after another with
    /// [`read_at`](Self::read_at)/[`write_at`](Self::write_at) ([`Batch::run_now`]); a file device
    /// queues them for the batch's io_uring submission, `Throttled` paces them with one sleep per
    /// batch, `Metered` counts them and forwards. Requests to one device must not overlap. Callers
    /// usually go through [`Batch::submit_to`].
    fn submit<'a>(&'a self, reqs: Vec<IoRequest<'a>>, batch: &mut Batch<'a>) {
        batch.run_now(self, reqs);
    }
    /// Read `scratch.len()` bytes at `offset` and show them to `f` (at most once; not when the
    /// read fails), with the device's *write generation* when it has one. The default reads them
    /// into `scratch` as one request through [`submit`](Self::submit), so io_uring, pacing, fault
    /// and counting wrappers see an ordinary read, and shows `scratch` with no generation. A
    /// device that holds its bytes in memory ([`MemDevice`]) shows them where they lie and leaves
    /// `scratch` alone: a caller that checks a whole chunk and keeps a few bytes of it (the
    /// array's small read) copies only those. `f` must not call back into the device (a memory
    /// device holds its read lock while `f` runs).
    ///
    /// The write generation, `Some(g)`, is a promise: the bytes shown are the device's bytes at
    /// generation `g`, and the device shows `g` again only while no write or discard has changed
    /// any of its bytes since. So bytes checked once at `g` need no second check at `g` (the
    /// array remembers whole chunks whose checksum matched). Only a device whose bytes cannot
    /// change behind its API may give one: never a file (another process, the medium) nor a
    /// wrapper that injects faults on reads.
    fn read_with(
        &self,
        offset: u64,
        scratch: &mut [u8],
        f: &mut dyn FnMut(&[u8], Option<u64>),
    ) -> Result<()> {
        let mut batch = Batch::new();
        let req = batch.read(scratch, offset);
        self.submit(vec![req], &mut batch);
        let r = batch
            .finish()
            .pop()
            .unwrap_or_else(|| Err(DeviceError::other(self.name(), "a read went unanswered")));
        r?;
        f(scratch, None);
        Ok(())
    }
}

/// Smart pointers to a device are devices: every method goes to the pointee.
macro_rules! forward_block_device {
    ($($ptr:ident),*) => {$(
        impl<D: BlockDevice + ?Sized> BlockDevice for $ptr<D> {
            fn submit<'a>(&'a self, reqs: Vec<IoRequest<'a>>, batch: &mut Batch<'a>) {
                (**self).submit(reqs, batch)
            }
            fn name(&self) -> &str {
                (**self).name()
            }
            fn capacity(&self) -> u64 {
                (**self).capacity()
            }
            fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
                (**self).read_at(buf, offset)
            }
            fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
                (**self).write_at(buf, offset)
            }
            fn flush(&self) -> Result<()> {
                (**self).flush()
            }
            fn discard(&self, offset: u64, len: u64) -> Result<()> {
                (**self).discard(offset, len)
            }
            fn stats(&self) -> DeviceStats {
                (**self).stats()
            }
            fn keeps_data(&self) -> bool {
                (**self).keeps_data()
            }
            fn backing_paths(&self) -> Vec<std::path::PathBuf> {
                (**self).backing_paths()
            }
            fn read_with(
                &self,
                offset: u64,
                scratch: &mut [u8],
                f: &mut dyn FnMut(&[u8], Option<u64>),
            ) -> Result<()> {
                (**self).read_with(offset, scratch, f)
            }
        }
    )*};
}

forward_block_device!(Arc, Box);

/// Lock-free basic counters (ops, bytes, flushes, discards) that real devices keep for `stats()`.
/// Sequential/random classification is left to [`Metered`].
#[derive(Debug, Default)]
pub struct BasicCounters {
    read_ops: std::sync::atomic::AtomicU64,
    read_bytes: std::sync::atomic::AtomicU64,
    write_ops: std::sync::atomic::AtomicU64,
    write_bytes: std::sync::atomic::AtomicU64,
    flushes: std::sync::atomic::AtomicU64,
    discards: std::sync::atomic::AtomicU64,
    discard_bytes: std::sync::atomic::AtomicU64,
}

impl BasicCounters {
    pub fn read(&self, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.read_ops.fetch_add(1, Relaxed);
        self.read_bytes.fetch_add(bytes, Relaxed);
    }
    pub fn write(&self, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.write_ops.fetch_add(1, Relaxed);
        self.write_bytes.fetch_add(bytes, Relaxed);
    }
    pub fn flush(&self) {
        self.flushes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    pub fn discard(&self, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.discards.fetch_add(1, Relaxed);
        self.discard_bytes.fetch_add(bytes, Relaxed);
    }
    pub fn snapshot(&self) -> DeviceStats {
        use std::sync::atomic::Ordering::Relaxed;
        DeviceStats {
            read_ops: self.read_ops.load(Relaxed),
            read_bytes: self.read_bytes.load(Relaxed),
            write_ops: self.write_ops.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            flushes: self.flushes.load(Relaxed),
            discards: self.discards.load(Relaxed),
            discard_bytes: self.discard_bytes.load(Relaxed),
            ..DeviceStats::default()
        }
    }
}

/// Check that `[offset, offset+len)` lies inside `capacity`; the error names the device.
pub fn check_range(name: &str, offset: u64, len: u64, capacity: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= capacity => Ok(()),
        _ => Err(DeviceError::OutOfRange {
            device: name.to_string(),
            offset,
            len,
            capacity,
        }),
    }
}
