//! Counters and the serializable status report.

use std::sync::atomic::Ordering::Relaxed;

use ecstack_device::{BlockDevice, ModelStats};

use crate::array::Array;
use crate::core::RebuildReport;
use crate::io::IoCounters;
use crate::scheme::BatchStats;

/// Simulated-SSD counters of a device (when it is one).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SsdSummary {
    pub host_page_writes: u64,
    pub flash_page_writes: u64,
    /// GC requests: blocks reclaimed by garbage collection.
    pub gc_victims: u64,
    pub gc_invocations: u64,
    pub gc_copies: u64,
    pub erases: u64,
    pub write_amplification: f64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeviceStatus {
    pub index: usize,
    pub role: String,
    pub name: String,
    pub failed: bool,
    pub io: IoCounters,
    pub ssd: Option<SsdSummary>,
}

/// Totals of a device class (main array or log devices).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClassStatus {
    pub devices: usize,
    pub failed: usize,
    pub io: IoCounters,
    /// Mean GC requests per device (simulated SSDs only).
    pub gc_per_device: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PendingStatus {
    /// md/pl write-intent regions marked dirty (resynced on open after an unclean shutdown).
    #[serde(default)]
    pub dirty_regions: u64,
    /// Data chunks updated since the last parity commit.
    pub updated_chunks: u64,
    /// Data stripes with updated chunks.
    pub updated_stripes: u64,
    pub log_stripes: u64,
    /// pl: log entries (one per updated stripe and write).
    pub log_entries: u64,
    pub log_slots_used: u64,
    pub log_slots: u64,
    /// eplog: free chunk slots on the fullest main device.
    pub min_free_slots: u64,
    pub commit_in_progress: bool,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CommitStats {
    pub commits: u64,
    pub space_commits: u64,
    pub idle_commits: u64,
    pub stripes: u64,
    pub chunks: u64,
    pub decoded_from_log: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub seconds: f64,
    /// md/pl: stripes whose parity was recomputed on open after an unclean shutdown (write intent).
    #[serde(default)]
    pub resync_stripes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RequestStats {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_p50_us: f64,
    pub read_p99_us: f64,
    pub write_p50_us: f64,
    pub write_p99_us: f64,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MetaStatus {
    pub frames: u64,
    pub checkpoints: u64,
    pub incremental_bytes: u64,
    pub incremental_size: u64,
    pub checkpoint_size: u64,
    pub seconds: f64,
}

/// Per-chunk checksums (issue 15): every chunk read is checked against the CRC32C its slot got when
/// it was written; a mismatch is an erasure, decoded from the rest of its stripe and written back.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChecksumStatus {
    /// Checksums computed and verified (off only for measuring their cost).
    pub enabled: bool,
    /// Chunk reads that did not match their checksum (every detection counts).
    pub checksum_errors: u64,
    /// Chunks that failed their checksum and were rewritten with their decoded bytes (by a read,
    /// a write of their stripe does it too without counting here, or scrub).
    pub chunks_repaired: u64,
    /// Chunks that failed their checksum and were not written since.
    pub bad_chunks: u64,
    /// Pages of the checksum area (format version 6) that failed their check when the array was
    /// opened: their slots are read unverified until written again or scrubbed.
    #[serde(default)]
    pub checksum_page_errors: u64,
}

/// `Array::status()`: geometry, per-device and per-class I/O, pending updates, commit work.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ArrayStatus {
    pub name: String,
    pub scheme: String,
    pub code: String,
    pub k: usize,
    pub m: usize,
    pub chunk_size: u64,
    pub capacity: u64,
    pub data_stripes: u64,
    pub slots_per_device: u64,
    pub devices: Vec<DeviceStatus>,
    pub main: ClassStatus,
    pub log: ClassStatus,
    pub pending: PendingStatus,
    pub commits: CommitStats,
    pub requests: RequestStats,
    pub metadata: MetaStatus,
    pub last_rebuild: Option<RebuildReport>,
    /// eplog stripe buffer: batches written and the write requests they carried (None when off or
    /// not eplog).
    #[serde(default)]
    pub stripe_buffer: Option<BatchStats>,
    #[serde(default)]
    pub checksums: ChecksumStatus,
}

impl Array {
    /// A snapshot of the array's state and counters.
    pub fn status(&self) -> ArrayStatus {
        let core = &self.core;
        let g = &core.geo;
        let sb = self.superblock();
        let mut devices = Vec::new();
        let mut main = ClassStatus::default();
        let mut log = ClassStatus::default();
        let (mut main_gc, mut log_gc) = (None::<u64>, None::<u64>);
        for (i, d) in core.devs.all().iter().enumerate() {
            let is_main = i < g.n;
            let ssd = match d.stats().model {
                Some(ModelStats::Ssd(s)) => Some(SsdSummary {
                    host_page_writes: s.host_page_writes,
                    flash_page_writes: s.flash_page_writes,
                    gc_victims: s.gc_victims,
                    gc_invocations: s.gc_invocations,
                    gc_copies: s.gc_copies,
                    erases: s.erases,
                    write_amplification: s.write_amplification,
                }),
                _ => None,
            };
            let io = core.devs.meters[i].get();
            let failed = core.devs.is_failed(i);
            let (cls, gc) = if is_main {
                (&mut main, &mut main_gc)
            } else {
                (&mut log, &mut log_gc)
            };
            cls.devices += 1;
            cls.failed += failed as usize;
            cls.io.add(&io);
            if let Some(s) = &ssd {
                *gc = Some(gc.unwrap_or(0) + s.gc_victims);
            }
            devices.push(DeviceStatus {
                index: i,
                role: if is_main { "main" } else { "log" }.into(),
                name: d.name().to_string(),
                failed,
                io,
                ssd,
            });
        }
        main.gc_per_device = main_gc.map(|t| t as f64 / main.devices.max(1) as f64);
        log.gc_per_device = log_gc.map(|t| t as f64 / log.devices.max(1) as f64);
        let pending = {
            let mi = core.meta();
            let st = &mi.state;
            let mut p = PendingStatus {
                log_slots_used: st.log_next,
                log_slots: g.log_slots,
                commit_in_progress: st.commit_in_progress,
                log_stripes: st.logs.len() as u64,
                log_entries: st.pl_logs.values().map(|v| v.len() as u64).sum(),
                min_free_slots: mi.alloc.min_free(),
                dirty_regions: st.dirty.len() as u64,
                ..PendingStatus::default()
            };
            for (_, ds) in st.changed() {
                let u = ds.latest.iter().filter(|l| l.is_some()).count() as u64;
                p.updated_chunks += u;
                p.updated_stripes += (u > 0) as u64;
            }
            p.updated_stripes += st.pl_logs.len() as u64;
            p
        };
        let s = &core.stats;
        let commits = CommitStats {
            commits: s.commits.load(Relaxed),
            space_commits: s.space_commits.load(Relaxed),
            resync_stripes: s.resync_stripes.load(Relaxed),
            idle_commits: s.idle_commits.load(Relaxed),
            stripes: s.commit_stripes.load(Relaxed),
            chunks: s.commit_chunks.load(Relaxed),
            decoded_from_log: s.commit_decoded.load(Relaxed),
            bytes_read: s.commit_read.load(Relaxed),
            bytes_written: s.commit_written.load(Relaxed),
            seconds: s.commit_ns.load(Relaxed) as f64 / 1e9,
        };
        let requests = RequestStats {
            reads: s.reads.load(Relaxed),
            writes: s.writes.load(Relaxed),
            read_bytes: s.read_bytes.load(Relaxed),
            write_bytes: s.write_bytes.load(Relaxed),
            read_p50_us: s.read_lat.quantile_us(0.5),
            read_p99_us: s.read_lat.quantile_us(0.99),
            write_p50_us: s.write_lat.quantile_us(0.5),
            write_p99_us: s.write_lat.quantile_us(0.99),
        };
        let metadata = {
            let mv = core.metavol.lock().unwrap_or_else(|p| p.into_inner());
            MetaStatus {
                frames: mv.frames,
                checkpoints: mv.checkpoints,
                incremental_bytes: mv.inc_pos,
                incremental_size: mv.layout.inc_size,
                checkpoint_size: mv.layout.cp_size,
                seconds: s.meta_ns.load(Relaxed) as f64 / 1e9,
            }
        };
        ArrayStatus {
            name: self.name().to_string(),
            scheme: sb.scheme.to_string(),
            code: sb.code.to_string(),
            k: g.k,
            m: g.m,
            chunk_size: g.chunk,
            capacity: g.capacity(),
            data_stripes: g.stripes,
            slots_per_device: g.slots,
            devices,
            main,
            log,
            pending,
            commits,
            requests,
            metadata,
            last_rebuild: s
                .last_rebuild
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            stripe_buffer: self.scheme.stripe_buffer_stats(false),
            checksums: core
                .devs
                .crcs()
                .map(|c| ChecksumStatus {
                    enabled: c.enabled(),
                    checksum_errors: c.errors.load(Relaxed),
                    chunks_repaired: c.repaired.load(Relaxed),
                    bad_chunks: c.bad_count() as u64,
                    checksum_page_errors: c.page_errors.load(Relaxed),
                })
                .unwrap_or_default(),
        }
    }
}
