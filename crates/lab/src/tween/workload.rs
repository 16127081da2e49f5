//! The workloads of TWEEN's evaluation: EPLOG's traces (FIN, WEB, USR, MDS presets, prepared as in
//! the EPLOG experiment) and a small-synchronous-write workload (4 KiB writes, an fsync after each).

use ecstack_base::rng::SplitMix64;

use crate::eplog::{Setting, Trace, TraceName, CHUNK_BYTES};
use crate::Result;

/// A replayable workload: write requests (byte offset, length), its working set, and whether each
/// write is followed by an fsync.
pub struct Work {
    pub name: String,
    pub reqs: Vec<(u64, u64)>,
    pub wss: u64,
    pub sync: bool,
}

/// The small-synchronous-write workload's shape: 4 KiB writes, 80% of them to a hot 20% of the
/// working set (uniform inside each part), each followed by an fsync; twice as many writes as the
/// working set has pages.
pub const SYNC_HOT_FRACTION: f64 = 0.2;
pub const SYNC_HOT_WRITES: f64 = 0.8;
pub const SYNC_OVERWRITES: u64 = 2;

impl Work {
    pub fn trace(name: TraceName, scale: f64, seed: u64) -> Result<Work> {
        let t = Trace::load(name, scale, seed)?;
        Ok(Work {
            name: name.to_string(),
            reqs: t.reqs,
            wss: t.wss,
            sync: false,
        })
    }

    /// The small-synchronous-write workload over `wss` bytes (rounded to 4 KiB pages).
    pub fn sync_writes(wss: u64, seed: u64) -> Work {
        let pages = (wss / CHUNK_BYTES).max(16);
        let hot = ((pages as f64 * SYNC_HOT_FRACTION) as u64).max(1);
        let mut rng = SplitMix64::new(seed ^ 0x5eed_5_f5);
        let reqs = (0..pages * SYNC_OVERWRITES)
            .map(|_| {
                let p = if rng.chance(SYNC_HOT_WRITES) {
                    rng.below(hot)
                } else {
                    hot + rng.below(pages - hot)
                };
                (p * CHUNK_BYTES, CHUNK_BYTES)
            })
            .collect();
        Work {
            name: "SYNC4K".into(),
            reqs,
            wss: pages * CHUNK_BYTES,
            sync: true,
        }
    }

    /// Bytes the host writes over the replay.
    pub fn bytes(&self) -> u64 {
        self.reqs.iter().map(|r| r.1).sum()
    }

    pub fn max_len(&self) -> usize {
        self.reqs.iter().map(|r| r.1).max().unwrap_or(CHUNK_BYTES) as usize
    }

    /// The md/eplog array size of the EPLOG experiment (eplog's spare area from the chunks written).
    pub fn sizing(&self, s: Setting) -> Sizing {
        let n = s.n() as u64;
        let stripes = self.wss.div_ceil(s.k as u64 * CHUNK_BYTES);
        let chunks: u64 = self.bytes() / CHUNK_BYTES;
        let spare = (chunks as f64 / n as f64 * 1.3).ceil() as u64 + 256;
        Sizing {
            stripes,
            slots: stripes + spare,
            log_slots: chunks + 256,
        }
    }
}

/// How large an md or eplog array for a workload is (chunk slots of 4 KiB per device).
pub struct Sizing {
    pub stripes: u64,
    /// The stripes plus eplog's spare area for out-of-place versions.
    pub slots: u64,
    pub log_slots: u64,
}

impl Sizing {
    pub fn log_bytes(&self) -> u64 {
        CHUNK_BYTES + self.log_slots * CHUNK_BYTES
    }
}
