//! Trace characterisation: the metrics of CodFS Tables 3.1–3.2, EPLOG Table 2 and ZombieNAND
//! Fig 4.5, per volume (or per whole trace).
//!
//! Definitions (all at 4 KiB block granularity, [`BLOCK_SIZE`]):
//! - **working set size (WSS)**: bytes of distinct blocks accessed (read or written) — "the size
//!   of unique data accessed throughout the trace" (EPLOG §5.1, CodFS Table 3.2);
//! - **update write**: a write request that touches at least one block accessed before (CodFS
//!   §3.2.2: first-write = the address is first accessed, update = the address is re-accessed);
//!   **update writes %** = update writes / writes;
//! - **updated WSS %**: blocks written while already accessed, over WSS (CodFS: "the fraction of
//!   data in the working set that is updated at least once");
//! - **average update size** and the **update-size distribution** (< 4 KiB, 4–16, 16–64, 64–512,
//!   ≥ 512 KiB) over update write requests (CodFS Fig 3.1, Table 3.1);
//! - **updated files %** (file traces): files with at least one update write over files accessed;
//! - **random write %** (EPLOG §5.1): writes whose start differs from the end of the previous write
//!   (of the same volume; another file counts as a jump) by at least 64 KiB;
//! - **read/write mix**: read requests over all requests, read bytes over all bytes;
//! - **address-reuse CDF** (ZombieNAND Fig 4.5): blocks sorted by descending access count; the
//!   curve gives, for the hottest fraction x of the WSS, the fraction y of all block accesses.

use crate::bitmap::BlockMap;
use crate::error::Result;
use crate::hash::FxHashMap;
use crate::parse::{ParseOptions, TraceReader};
use crate::record::{Names, Op, Record, BLOCK_SIZE};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// EPLOG's random-write threshold.
pub const RANDOM_JUMP: u64 = 64 * 1024;

/// Upper bounds (exclusive) of the update-size classes, bytes; the last class is open.
pub const SIZE_CLASS_BOUNDS: [u64; 4] = [4 << 10, 16 << 10, 64 << 10, 512 << 10];
/// Labels of the update-size classes.
pub const SIZE_CLASS_LABELS: [&str; 5] = ["<4K", "4-16K", "16-64K", "64-512K", ">=512K"];

pub fn size_class(len: u64) -> usize {
    SIZE_CLASS_BOUNDS
        .iter()
        .position(|&b| len < b)
        .unwrap_or(SIZE_CLASS_BOUNDS.len())
}

/// How records are grouped into rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupBy {
    /// One row per volume (MSR `host_disk`, SPC ASU, device, NFS server).
    #[default]
    Volume,
    /// One row for the whole trace (volumes keep separate address spaces).
    All,
}

#[derive(Debug, Clone)]
pub struct AnalyzeOptions {
    pub group_by: GroupBy,
    /// Keep per-block access counts for the reuse CDF (1 byte per block of WSS).
    pub reuse_cdf: bool,
    /// Number of points of the reuse CDF (evenly spaced in the WSS fraction).
    pub cdf_points: usize,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            group_by: GroupBy::Volume,
            reuse_cdf: true,
            cdf_points: 101,
        }
    }
}

struct Group {
    reads: u64,
    writes: u64,
    discards: u64,
    read_bytes: u64,
    write_bytes: u64,
    first_ns: u64,
    last_ns: u64,
    wss_blocks: u64,
    written_blocks: u64,
    updated_blocks: u64,
    update_writes: u64,
    update_bytes: u64,
    update_hist: [u64; 5],
    random_writes: u64,
    prev_write: Option<(u64, u64)>,
    files: FxHashMap<u64, bool>,
    map: BlockMap,
}

impl Group {
    fn new(cdf: bool) -> Self {
        Group {
            reads: 0,
            writes: 0,
            discards: 0,
            read_bytes: 0,
            write_bytes: 0,
            first_ns: u64::MAX,
            last_ns: 0,
            wss_blocks: 0,
            written_blocks: 0,
            updated_blocks: 0,
            update_writes: 0,
            update_bytes: 0,
            update_hist: [0; 5],
            random_writes: 0,
            prev_write: None,
            files: FxHashMap::default(),
            map: BlockMap::new(cdf),
        }
    }
}

/// Streaming analyzer: feed records with [`Analyzer::add`], then [`Analyzer::report`].
pub struct Analyzer {
    opts: AnalyzeOptions,
    groups: Vec<Option<Group>>,
    records: u64,
}

impl Analyzer {
    pub fn new(opts: AnalyzeOptions) -> Self {
        Analyzer {
            opts,
            groups: Vec::new(),
            records: 0,
        }
    }

    /// Account one record.
    #[inline]
    pub fn add(&mut self, r: &Record) {
        self.records += 1;
        let (gi, space) = match self.opts.group_by {
            GroupBy::Volume => (r.volume as usize, r.file as u64),
            GroupBy::All => (0, ((r.volume as u64) << 32) | r.file as u64),
        };
        if gi >= self.groups.len() {
            self.groups.resize_with(gi + 1, || None);
        }
        let cdf = self.opts.reuse_cdf;
        let g = self.groups[gi].get_or_insert_with(|| Group::new(cdf));
        g.first_ns = g.first_ns.min(r.time_ns);
        g.last_ns = g.last_ns.max(r.time_ns);
        let b0 = r.offset / BLOCK_SIZE;
        let b1 = r.end().div_ceil(BLOCK_SIZE);
        match r.op {
            Op::Discard => {
                g.discards += 1;
            }
            Op::Read => {
                g.reads += 1;
                g.read_bytes += r.len;
                let t = g.map.touch(space, b0, b1, false);
                g.wss_blocks += t.new_blocks;
                if r.file != 0 && r.len > 0 {
                    g.files.entry(space).or_insert(false);
                }
            }
            Op::Write => {
                g.writes += 1;
                g.write_bytes += r.len;
                if let Some((pspace, pend)) = g.prev_write {
                    if pspace != space || r.offset.abs_diff(pend) >= RANDOM_JUMP {
                        g.random_writes += 1;
                    }
                }
                g.prev_write = Some((space, r.end()));
                let t = g.map.touch(space, b0, b1, true);
                g.wss_blocks += t.new_blocks;
                g.written_blocks += t.new_written;
                g.updated_blocks += t.new_updated;
                if t.any_prev {
                    g.update_writes += 1;
                    g.update_bytes += r.len;
                    g.update_hist[size_class(r.len)] += 1;
                }
                if r.file != 0 && r.len > 0 {
                    let f = g.files.entry(space).or_insert(false);
                    *f |= t.any_prev;
                }
            }
        }
    }

    pub fn records(&self) -> u64 {
        self.records
    }

    /// Approximate heap bytes held (the block maps dominate).
    pub fn heap_bytes(&self) -> u64 {
        self.groups
            .iter()
            .flatten()
            .map(|g| g.map.heap_bytes() + g.files.capacity() as u64 * 17)
            .sum()
    }

    /// Build the report; `volumes` names the groups.
    pub fn report(&self, volumes: &Names) -> Report {
        let mut rows = Vec::new();
        for (i, g) in self.groups.iter().enumerate() {
            let Some(g) = g else { continue };
            let name = match self.opts.group_by {
                GroupBy::Volume => volumes.name(i as u32).to_string(),
                GroupBy::All => "all".to_string(),
            };
            rows.push(volume_report(name, g, &self.opts));
        }
        Report {
            block_size: BLOCK_SIZE,
            records: self.records,
            skipped: 0,
            ignored: 0,
            volumes: rows,
        }
    }
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn volume_report(volume: String, g: &Group, opts: &AnalyzeOptions) -> VolumeReport {
    let files_accessed = g.files.len() as u64;
    let files_updated = g.files.values().filter(|u| **u).count() as u64;
    let is_file = files_accessed > 0;
    let reuse_cdf = if opts.reuse_cdf {
        reuse_cdf(g.map.count_histogram(), opts.cdf_points.max(2))
    } else {
        Vec::new()
    };
    let mut update_size_pct = [0.0; 5];
    for (i, p) in update_size_pct.iter_mut().enumerate() {
        *p = pct(g.update_hist[i], g.update_writes);
    }
    VolumeReport {
        volume,
        reads: g.reads,
        writes: g.writes,
        discards: g.discards,
        read_bytes: g.read_bytes,
        write_bytes: g.write_bytes,
        read_pct: pct(g.reads, g.reads + g.writes),
        read_bytes_pct: pct(g.read_bytes, g.read_bytes + g.write_bytes),
        avg_read_size: ratio(g.read_bytes, g.reads),
        avg_write_size: ratio(g.write_bytes, g.writes),
        wss_bytes: g.wss_blocks * BLOCK_SIZE,
        write_wss_bytes: g.written_blocks * BLOCK_SIZE,
        updated_wss_bytes: g.updated_blocks * BLOCK_SIZE,
        updated_wss_pct: pct(g.updated_blocks, g.wss_blocks),
        update_writes: g.update_writes,
        update_writes_pct: pct(g.update_writes, g.writes),
        avg_update_size: ratio(g.update_bytes, g.update_writes),
        update_size_hist: g.update_hist,
        update_size_pct,
        random_writes: g.random_writes,
        random_write_pct: pct(g.random_writes, g.writes),
        files_accessed: is_file.then_some(files_accessed),
        files_updated: is_file.then_some(files_updated),
        updated_files_pct: is_file.then(|| pct(files_updated, files_accessed)),
        first_ns: if g.first_ns == u64::MAX {
            0
        } else {
            g.first_ns
        },
        last_ns: g.last_ns,
        duration_s: g.last_ns.saturating_sub(g.first_ns.min(g.last_ns)) as f64 / 1e9,
        reuse_cdf,
    }
}

/// The reuse CDF from a histogram `(access count, blocks)`: `points` pairs `[x, y]` with x the
/// fraction of the WSS (hottest first) and y the fraction of all accesses they account for.
pub fn reuse_cdf(mut hist: Vec<(u64, u64)>, points: usize) -> Vec<[f64; 2]> {
    hist.retain(|h| h.1 > 0);
    hist.sort_unstable_by_key(|h| std::cmp::Reverse(h.0));
    let total_blocks: u64 = hist.iter().map(|h| h.1).sum();
    let total_acc: u128 = hist.iter().map(|h| h.0 as u128 * h.1 as u128).sum();
    if total_blocks == 0 || total_acc == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(points);
    let mut it = hist.iter();
    let mut cur = it.next().copied();
    let (mut blocks_done, mut acc_done) = (0u64, 0u128);
    for p in 0..points {
        let x = p as f64 / (points - 1) as f64;
        let target = (x * total_blocks as f64).round() as u64;
        // advance whole buckets
        while let Some((c, n)) = cur {
            if blocks_done + n <= target {
                blocks_done += n;
                acc_done += c as u128 * n as u128;
                cur = it.next().copied();
            } else {
                break;
            }
        }
        let partial = match cur {
            Some((c, _)) => (target - blocks_done) as u128 * c as u128,
            None => 0,
        };
        let y = (acc_done + partial) as f64 / total_acc as f64;
        out.push([x, y.min(1.0)]);
    }
    out
}

/// Per-volume statistics (one table row).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VolumeReport {
    pub volume: String,
    pub reads: u64,
    pub writes: u64,
    pub discards: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Reads over reads + writes (requests), %.
    pub read_pct: f64,
    /// Read bytes over read + write bytes, %.
    pub read_bytes_pct: f64,
    pub avg_read_size: f64,
    pub avg_write_size: f64,
    pub wss_bytes: u64,
    /// Distinct blocks written.
    pub write_wss_bytes: u64,
    pub updated_wss_bytes: u64,
    pub updated_wss_pct: f64,
    pub update_writes: u64,
    pub update_writes_pct: f64,
    pub avg_update_size: f64,
    /// Update writes per size class (see [`SIZE_CLASS_LABELS`]).
    pub update_size_hist: [u64; 5],
    pub update_size_pct: [f64; 5],
    pub random_writes: u64,
    pub random_write_pct: f64,
    pub files_accessed: Option<u64>,
    pub files_updated: Option<u64>,
    pub updated_files_pct: Option<f64>,
    pub first_ns: u64,
    pub last_ns: u64,
    pub duration_s: f64,
    /// `[fraction of WSS (hottest first), fraction of accesses]`.
    pub reuse_cdf: Vec<[f64; 2]>,
}

/// The result of `ecstack trace analyze`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub block_size: u64,
    pub records: u64,
    pub skipped: u64,
    pub ignored: u64,
    pub volumes: Vec<VolumeReport>,
}

impl Report {
    pub fn volume(&self, name: &str) -> Option<&VolumeReport> {
        self.volumes.iter().find(|v| v.volume == name)
    }

    /// A plain-text table (one row per volume).
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<14} {:>11} {:>11} {:>6} {:>9} {:>10} {:>8} {:>8} {:>9} {:>7} {:>8}",
            "volume",
            "writes",
            "reads",
            "read%",
            "avg_wr_KB",
            "WSS_GiB",
            "updWSS%",
            "updWr%",
            "avg_upKB",
            "rand%",
            "updFile%"
        );
        for v in &self.volumes {
            let _ = writeln!(
                s,
                "{:<14} {:>11} {:>11} {:>6.2} {:>9.2} {:>10.3} {:>8.2} {:>8.2} {:>9.2} {:>7.2} {:>8}",
                trunc(&v.volume, 14),
                v.writes,
                v.reads,
                v.read_pct,
                v.avg_write_size / 1024.0,
                v.wss_bytes as f64 / (1u64 << 30) as f64,
                v.updated_wss_pct,
                v.update_writes_pct,
                v.avg_update_size / 1024.0,
                v.random_write_pct,
                v.updated_files_pct
                    .map(|p| format!("{p:.2}"))
                    .unwrap_or_else(|| "-".into()),
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<14} {:>8} {:>8} {:>8} {:>8} {:>8}   reuse: top 1% / 10% / 50% of WSS",
            "update sizes %",
            SIZE_CLASS_LABELS[0],
            SIZE_CLASS_LABELS[1],
            SIZE_CLASS_LABELS[2],
            SIZE_CLASS_LABELS[3],
            SIZE_CLASS_LABELS[4]
        );
        for v in &self.volumes {
            let at = |x: f64| -> String {
                if v.reuse_cdf.is_empty() {
                    return "-".into();
                }
                let i = ((x * (v.reuse_cdf.len() - 1) as f64).round() as usize)
                    .min(v.reuse_cdf.len() - 1);
                format!("{:.1}%", v.reuse_cdf[i][1] * 100.0)
            };
            let _ = writeln!(
                s,
                "{:<14} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}   {} / {} / {}",
                trunc(&v.volume, 14),
                v.update_size_pct[0],
                v.update_size_pct[1],
                v.update_size_pct[2],
                v.update_size_pct[3],
                v.update_size_pct[4],
                at(0.01),
                at(0.10),
                at(0.50)
            );
        }
        if self.skipped > 0 {
            let _ = writeln!(s, "\nskipped {} malformed line(s)", self.skipped);
        }
        s
    }
}

fn trunc(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n).collect()
    }
}

/// Analyze in-memory records.
pub fn analyze_records(records: &[Record], volumes: &Names, opts: AnalyzeOptions) -> Report {
    let mut a = Analyzer::new(opts);
    for r in records {
        a.add(r);
    }
    a.report(volumes)
}

/// Parse and analyze trace files (one trace: several files share volume names), streaming.
pub fn analyze_files(
    paths: &[&Path],
    parse: &ParseOptions,
    opts: AnalyzeOptions,
    mut progress: impl FnMut(u64),
) -> Result<Report> {
    let mut a = Analyzer::new(opts);
    let mut volumes = Names::new();
    let mut files = Names::new();
    let (mut skipped, mut ignored) = (0, 0);
    for p in paths {
        let mut r = TraceReader::open_with(p, parse.clone(), volumes, files)?;
        let mut n = 0u64;
        while let Some(rec) = r.next_record()? {
            a.add(&rec);
            n += 1;
            if n & ((1 << 20) - 1) == 0 {
                progress(1 << 20);
            }
        }
        progress(n % (1 << 20));
        skipped += r.skipped();
        ignored += r.ignored();
        (volumes, files) = r.into_names();
    }
    let mut rep = a.report(&volumes);
    rep.skipped = skipped;
    rep.ignored = ignored;
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_uniform_and_skewed() {
        let c = reuse_cdf(vec![(1, 100)], 11);
        assert!((c[5][1] - 0.5).abs() < 1e-9);
        // 1 block with 90 accesses, 9 blocks with 10/9 each ... use integers: 1x90, 10x1
        let c = reuse_cdf(vec![(90, 1), (1, 10)], 12);
        // x = 1/11 of blocks = the hot block = 90% of accesses
        assert!((c[1][1] - 0.9).abs() < 1e-9, "{c:?}");
        assert!((c[11][1] - 1.0).abs() < 1e-9);
    }

    #[test]
    fn size_classes() {
        assert_eq!(size_class(4095), 0);
        assert_eq!(size_class(4096), 1);
        assert_eq!(size_class(16384), 2);
        assert_eq!(size_class(65535), 2);
        assert_eq!(size_class(65536), 3);
        assert_eq!(size_class(512 << 10), 4);
    }
}
