//! The replayed workloads: the trace crate's synthesized FIN/WEB/USR/MDS presets (EPLOG Table 2
//! statistics), writes only, rounded to the chunk and compacted by 1 MiB segments (§5.1), and how
//! large an array each needs.

use std::fmt;

use ecstack_trace::record::Op;
use ecstack_trace::synth::synthesize_preset;
use ecstack_trace::transform::eplog_prepare;
use serde::Serialize;

use super::config::Setting;
use crate::Result;

/// Chunk size of every array in the experiment.
pub const CHUNK_BYTES: u64 = 4096;

/// One of EPLOG's four traces (Table 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceName {
    Fin,
    Web,
    Usr,
    Mds,
}

impl TraceName {
    pub const ALL: [TraceName; 4] = [
        TraceName::Fin,
        TraceName::Web,
        TraceName::Usr,
        TraceName::Mds,
    ];

    /// The trace crate's synthesis preset.
    fn preset(self) -> &'static str {
        match self {
            TraceName::Fin => "eplog-fin",
            TraceName::Web => "eplog-web",
            TraceName::Usr => "eplog-usr",
            TraceName::Mds => "eplog-mds",
        }
    }
}

impl fmt::Display for TraceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TraceName::Fin => "FIN",
            TraceName::Web => "WEB",
            TraceName::Usr => "USR",
            TraceName::Mds => "MDS",
        })
    }
}

impl Serialize for TraceName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        crate::serialize_display(self, s)
    }
}

/// A prepared trace: its write requests (byte offset, length) and working set.
pub struct Trace {
    pub name: TraceName,
    pub reqs: Vec<(u64, u64)>,
    /// Working-set size in bytes after compaction.
    pub wss: u64,
    /// Chunks written over the whole replay.
    pub chunks: u64,
}

impl Trace {
    pub fn load(name: TraceName, scale: f64, seed: u64) -> Result<Trace> {
        let t = synthesize_preset(name.preset(), scale, seed)?;
        let writes: Vec<_> = t
            .records
            .into_iter()
            .filter(|r| r.op == Op::Write && r.len > 0)
            .collect();
        let (recs, wss) = eplog_prepare(&writes, CHUNK_BYTES);
        let reqs: Vec<(u64, u64)> = recs.iter().map(|r| (r.offset, r.len)).collect();
        let chunks = reqs.iter().map(|(_, l)| l / CHUNK_BYTES).sum();
        Ok(Trace {
            name,
            reqs,
            wss,
            chunks,
        })
    }

    /// The longest request in bytes (one chunk for an empty trace).
    pub fn max_len(&self) -> usize {
        self.reqs.iter().map(|r| r.1).max().unwrap_or(CHUNK_BYTES) as usize
    }
}

/// How large an array replaying a trace must be.
pub struct Sizing {
    pub stripes: u64,
    /// Chunk slots per main device: the stripes plus eplog's spare area for out-of-place versions.
    pub slots: u64,
    pub log_slots: u64,
}

impl Sizing {
    pub fn of(t: &Trace, s: Setting) -> Sizing {
        let n = s.n() as u64;
        let stripes = t.wss.div_ceil(s.k as u64 * CHUNK_BYTES);
        let spare = (t.chunks as f64 / n as f64 * 1.3).ceil() as u64 + 256;
        Sizing {
            stripes,
            slots: stripes + spare,
            log_slots: t.chunks + 256,
        }
    }

    pub fn main_bytes(&self) -> u64 {
        CHUNK_BYTES + self.slots * CHUNK_BYTES
    }

    pub fn log_bytes(&self) -> u64 {
        CHUNK_BYTES + self.log_slots * CHUNK_BYTES
    }
}
