//! The core's counters and the reports of its two long operations (parity commit, rebuild).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use ecstack_device::LatencyHistogram;

/// What one parity commit did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CommitReport {
    /// Data stripes whose parity was recomputed.
    pub stripes: u64,
    /// Latest data chunk versions that became committed.
    pub chunks: u64,
    /// Data chunks decoded from log stripes (degraded commit).
    pub decoded_from_log: u64,
    /// Chunk slots freed (old versions).
    pub freed_slots: u64,
    /// Log slots freed on each log device.
    pub freed_log_slots: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub seconds: f64,
}

impl CommitReport {
    /// Add another commit's work to this one.
    pub fn add(&mut self, r: &CommitReport) {
        self.stripes += r.stripes;
        self.chunks += r.chunks;
        self.decoded_from_log += r.decoded_from_log;
        self.freed_slots += r.freed_slots;
        self.freed_log_slots += r.freed_log_slots;
        self.bytes_read += r.bytes_read;
        self.bytes_written += r.bytes_written;
        self.seconds += r.seconds;
    }
}

/// What a rebuild did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RebuildReport {
    pub devices: Vec<usize>,
    /// Data stripes that had chunks on the rebuilt devices.
    pub stripes: u64,
    /// Chunks recovered.
    pub chunks: u64,
    /// Bytes recovered.
    pub bytes: u64,
    /// Time of the rebuild proper (after the parity commit).
    pub seconds: f64,
    /// Recovery throughput: recovered bytes / seconds, MB/s (10^6).
    pub mb_per_s: f64,
    pub batch: usize,
    pub prefetch: bool,
    /// The parity commit that preceded the rebuild, if there was anything to commit.
    pub commit: Option<CommitReport>,
}

/// Request latencies: the stack's one histogram type ([`LatencyHistogram`], HDR) behind a lock;
/// recording takes nanoseconds, far below the device requests it measures.
#[derive(Debug, Default)]
pub(crate) struct Hist(Mutex<LatencyHistogram>);

impl Hist {
    fn lock(&self) -> std::sync::MutexGuard<'_, LatencyHistogram> {
        // A panic while recording leaves a histogram that is still valid: keep using it.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn add(&self, d: Duration) {
        self.lock().record_duration(d);
    }
    /// The latency at quantile `q`, microseconds (0 when nothing was recorded).
    pub(crate) fn quantile_us(&self, q: f64) -> f64 {
        self.lock().quantile_us(q)
    }
    fn reset(&self) {
        self.lock().reset();
    }
}

#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub read_lat: Hist,
    pub write_lat: Hist,
    pub commits: AtomicU64,
    pub space_commits: AtomicU64,
    pub idle_commits: AtomicU64,
    /// md/pl: stripes whose parity was recomputed after an unclean shutdown.
    pub resync_stripes: AtomicU64,
    pub commit_stripes: AtomicU64,
    pub commit_chunks: AtomicU64,
    pub commit_decoded: AtomicU64,
    pub commit_read: AtomicU64,
    pub commit_written: AtomicU64,
    pub commit_ns: AtomicU64,
    pub meta_ns: AtomicU64,
    pub last_rebuild: Mutex<Option<RebuildReport>>,
}

impl Stats {
    pub fn read(&self, bytes: u64, d: Duration) {
        self.reads.fetch_add(1, Relaxed);
        self.read_bytes.fetch_add(bytes, Relaxed);
        self.read_lat.add(d);
    }
    pub fn write(&self, bytes: u64, d: Duration) {
        self.writes.fetch_add(1, Relaxed);
        self.write_bytes.fetch_add(bytes, Relaxed);
        self.write_lat.add(d);
    }
    pub fn commit(&self, r: &CommitReport) {
        self.commits.fetch_add(1, Relaxed);
        self.commit_stripes.fetch_add(r.stripes, Relaxed);
        self.commit_chunks.fetch_add(r.chunks, Relaxed);
        self.commit_decoded.fetch_add(r.decoded_from_log, Relaxed);
        self.commit_read.fetch_add(r.bytes_read, Relaxed);
        self.commit_written.fetch_add(r.bytes_written, Relaxed);
        self.commit_ns.fetch_add((r.seconds * 1e9) as u64, Relaxed);
    }
    pub fn set_rebuild(&self, r: &RebuildReport) {
        *self.last_rebuild.lock().unwrap_or_else(|p| p.into_inner()) = Some(r.clone());
    }
    pub fn reset(&self) {
        for a in [
            &self.reads,
            &self.writes,
            &self.read_bytes,
            &self.write_bytes,
            &self.commits,
            &self.space_commits,
            &self.idle_commits,
            &self.resync_stripes,
            &self.commit_stripes,
            &self.commit_chunks,
            &self.commit_decoded,
            &self.commit_read,
            &self.commit_written,
            &self.commit_ns,
            &self.meta_ns,
        ] {
            a.store(0, Relaxed);
        }
        self.read_lat.reset();
        self.write_lat.reset();
    }
}
