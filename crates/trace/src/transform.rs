//! Trace transformations used by the seeds before replay.
//!
//! Applied in this order by [`Pipeline`]: select (volumes, time window, writes only) → CodFS merge
//! of consecutive requests → rounding to a chunk size → EPLOG compaction → split into client
//! streams. Compaction needs the set of touched segments first, so it is a two-pass
//! [`Compactor`]: [`Compactor::learn`] every record, [`Compactor::finish`], then
//! [`Compactor::map`] every record again.

use crate::error::{Result, TraceError};
use crate::hash::{FxBuild, FxHashMap, FxHasher};
use crate::record::{Names, Op, Record};
use std::collections::HashSet;
use std::hash::Hasher;

/// EPLOG's compaction segment (1 MiB).
pub const EPLOG_SEGMENT: u64 = 1 << 20;
/// CodFS's segment (16 MiB), the default locality unit for splitting into clients.
pub const CODFS_SEGMENT: u64 = 16 << 20;

/// What to do to a trace (everything off by default).
#[derive(Debug, Clone, Default)]
pub struct TransformOptions {
    /// Keep only these volumes (names); empty keeps all.
    pub volumes: Vec<String>,
    /// Keep records at or after this many seconds from the first record.
    pub from_s: Option<f64>,
    /// Keep records before this many seconds from the first record.
    pub to_s: Option<f64>,
    /// Drop reads and discards.
    pub writes_only: bool,
    /// Merge a request into the previous one when it continues it (same volume, file and op,
    /// offset = previous end), up to `merge_max` bytes (CodFS §5.3.1).
    pub merge: bool,
    pub merge_max: u64,
    /// Round every request out to multiples of this chunk size (start down, end up; EPLOG §5.1).
    pub round: Option<u64>,
    /// Compact: drop untouched segments of this size and shift later offsets down (EPLOG §5.1).
    pub compact: Option<u64>,
    /// With compaction: lay all volumes / files one after another in a single address space
    /// (always done for file traces, whose records then carry file 0).
    pub flatten: bool,
}

/// Select, merge and round, streaming.
pub struct Pipeline {
    keep: Option<Vec<bool>>,
    from_ns: Option<u64>,
    to_ns: Option<u64>,
    t0: Option<u64>,
    writes_only: bool,
    merge: bool,
    merge_max: u64,
    round: Option<u64>,
    pending: Option<Record>,
}

impl Pipeline {
    pub fn new(opts: &TransformOptions, volumes: &Names) -> Result<Pipeline> {
        let keep = if opts.volumes.is_empty() {
            None
        } else {
            let mut k = vec![false; volumes.len()];
            for v in &opts.volumes {
                let id = volumes.get(v).ok_or_else(|| {
                    TraceError::Invalid(format!(
                        "volume `{v}` is not in the trace (volumes: {})",
                        volumes.iter().take(20).collect::<Vec<_>>().join(", ")
                    ))
                })?;
                k[id as usize] = true;
            }
            Some(k)
        };
        if let Some(c) = opts.round {
            if c == 0 {
                return Err(TraceError::Invalid("chunk size must be positive".into()));
            }
        }
        Ok(Pipeline {
            keep,
            from_ns: opts.from_s.map(|s| (s * 1e9) as u64),
            to_ns: opts.to_s.map(|s| (s * 1e9) as u64),
            t0: None,
            writes_only: opts.writes_only,
            merge: opts.merge,
            merge_max: if opts.merge_max == 0 {
                u64::MAX
            } else {
                opts.merge_max
            },
            round: opts.round,
            pending: None,
        })
    }

    fn finish_one(&self, mut r: Record) -> Record {
        if let Some(c) = self.round {
            let start = r.offset / c * c;
            let end = r.end().div_ceil(c) * c;
            r.offset = start;
            r.len = end - start;
        }
        r
    }

    /// Feed one record; transformed records are passed to `out`.
    pub fn push(&mut self, r: Record, out: &mut impl FnMut(Record)) {
        // Time window relative to the first record of the whole trace.
        let t0 = *self.t0.get_or_insert(r.time_ns);
        let rel = r.time_ns.saturating_sub(t0);
        if self.from_ns.is_some_and(|f| rel < f) || self.to_ns.is_some_and(|t| rel >= t) {
            return;
        }
        if let Some(k) = &self.keep {
            if !k.get(r.volume as usize).copied().unwrap_or(false) {
                return;
            }
        }
        if self.writes_only && r.op != Op::Write {
            return;
        }
        if !self.merge {
            out(self.finish_one(r));
            return;
        }
        if let Some(p) = &mut self.pending {
            if p.volume == r.volume
                && p.file == r.file
                && p.op == r.op
                && p.end() == r.offset
                && p.len + r.len <= self.merge_max
            {
                p.len += r.len;
                return;
            }
            let done = *p;
            out(self.finish_one(done));
        }
        self.pending = Some(r);
    }

    /// Flush the request being merged.
    pub fn finish(&mut self, out: &mut impl FnMut(Record)) {
        if let Some(p) = self.pending.take() {
            out(self.finish_one(p));
        }
    }
}

/// EPLOG compaction: every address space (volume, file) is cut into segments; untouched segments
/// are dropped and the touched ones packed in order, so offsets inside a segment are kept, request
/// order is kept, requests stay contiguous (a request spanning segments touches all of them and
/// they pack adjacently) and no two distinct addresses map to one.
#[derive(Debug, Default)]
pub struct Compactor {
    segment: u64,
    flatten: bool,
    /// space → touched segments (a set: memory follows the working set, not the trace length)
    learning: FxHashMap<u64, HashSet<u64, FxBuild>>,
    /// space → (sorted touched segments, base offset in the output space)
    spaces: FxHashMap<u64, (Vec<u64>, u64)>,
    order: Vec<u64>,
    finished: bool,
    total: u64,
}

fn space_of(r: &Record) -> u64 {
    ((r.volume as u64) << 32) | r.file as u64
}

impl Compactor {
    pub fn new(segment: u64, flatten: bool) -> Compactor {
        Compactor {
            segment: segment.max(1),
            flatten,
            ..Default::default()
        }
    }

    /// Pass 1: note the segments `r` touches.
    pub fn learn(&mut self, r: &Record) {
        let s = space_of(r);
        let v = self.learning.entry(s).or_insert_with(|| {
            self.order.push(s);
            HashSet::default()
        });
        if r.len == 0 {
            return;
        }
        let first = r.offset / self.segment;
        let last = (r.end() - 1) / self.segment;
        for seg in first..=last {
            v.insert(seg);
        }
    }

    /// End of pass 1.
    pub fn finish(&mut self) {
        let mut base = 0;
        for s in &self.order {
            let mut v: Vec<u64> = self
                .learning
                .remove(s)
                .unwrap_or_default()
                .into_iter()
                .collect();
            v.sort_unstable();
            let size = v.len() as u64 * self.segment;
            let flat = self.flatten || (*s & 0xffff_ffff) != 0;
            let b = if flat { base } else { 0 };
            if flat {
                base += size;
            }
            self.total = self.total.max(b + size);
            self.spaces.insert(*s, (v, b));
        }
        self.finished = true;
    }

    /// Bytes of the largest compacted address space (the device size a replay needs).
    pub fn compacted_bytes(&self) -> u64 {
        self.total
    }

    /// Number of touched segments over all spaces.
    pub fn segments(&self) -> u64 {
        self.spaces.values().map(|(v, _)| v.len() as u64).sum()
    }

    /// Pass 2: the compacted record. Records not seen in pass 1 are an error.
    pub fn map(&self, r: &Record) -> Result<Record> {
        let s = space_of(r);
        let (segs, base) = self
            .spaces
            .get(&s)
            .ok_or_else(|| TraceError::Invalid("compaction: record not seen in pass 1".into()))?;
        let seg = r.offset / self.segment;
        let rank = segs
            .binary_search(&seg)
            .map_err(|_| TraceError::Invalid("compaction: segment not seen in pass 1".into()))?;
        let mut out = *r;
        out.offset = base + rank as u64 * self.segment + r.offset % self.segment;
        if self.flatten || r.file != 0 {
            out.file = 0;
        }
        Ok(out)
    }
}

/// Which of `n` client streams a record goes to: all requests starting in one segment go to the
/// same client (per-segment locality and order are preserved), segments are dealt round robin.
pub fn client_of(r: &Record, n: usize, segment: u64) -> usize {
    if n <= 1 {
        return 0;
    }
    let mut h = FxHasher::default();
    h.write_u64(space_of(r));
    let mix = if r.volume == 0 && r.file == 0 {
        0
    } else {
        h.finish()
    };
    ((r.offset / segment.max(1)).wrapping_add(mix) % n as u64) as usize
}

/// Split into `n` client streams by segment (see [`client_of`]); each stream keeps trace order.
pub fn split_streams(records: &[Record], n: usize, segment: u64) -> Vec<Vec<Record>> {
    let mut out = vec![Vec::new(); n.max(1)];
    for r in records {
        out[client_of(r, n, segment)].push(*r);
    }
    out
}

/// Apply `opts` to in-memory records (both compaction passes included).
pub fn apply(records: &[Record], volumes: &Names, opts: &TransformOptions) -> Result<Vec<Record>> {
    let mut p = Pipeline::new(opts, volumes)?;
    let mut mid = Vec::with_capacity(records.len());
    for r in records {
        p.push(*r, &mut |x| mid.push(x));
    }
    p.finish(&mut |x| mid.push(x));
    if let Some(seg) = opts.compact {
        let mut c = Compactor::new(seg, opts.flatten);
        for r in &mid {
            c.learn(r);
        }
        c.finish();
        for r in mid.iter_mut() {
            *r = c.map(r)?;
        }
    }
    Ok(mid)
}

/// EPLOG's preparation (§5.1): round every request to `chunk`, then compact by 1 MiB segments
/// (volumes flattened into one address space). Returns the records and the compacted size.
pub fn eplog_prepare(records: &[Record], chunk: u64) -> (Vec<Record>, u64) {
    let mut out: Vec<Record> = records
        .iter()
        .map(|r| {
            let c = chunk.max(1);
            let start = r.offset / c * c;
            let end = r.end().div_ceil(c) * c;
            Record {
                offset: start,
                len: end - start,
                ..*r
            }
        })
        .collect();
    let mut c = Compactor::new(EPLOG_SEGMENT, true);
    for r in &out {
        c.learn(r);
    }
    c.finish();
    for r in out.iter_mut() {
        *r = c.map(r).expect("learned above");
    }
    (out, c.compacted_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(off: u64, len: u64) -> Record {
        Record {
            time_ns: 0,
            volume: 0,
            file: 0,
            op: Op::Write,
            offset: off,
            len,
        }
    }

    #[test]
    fn merge_and_round() {
        let names = Names::new();
        let opts = TransformOptions {
            merge: true,
            round: Some(4096),
            ..Default::default()
        };
        let recs = [w(0, 4096), w(4096, 4096), w(100_000, 10), w(100_010, 10)];
        let out = apply(&recs, &names, &opts).unwrap();
        assert_eq!(out, vec![w(0, 8192), w(98304, 4096)]);
    }

    #[test]
    fn compaction_packs_segments() {
        let mb = 1 << 20;
        let recs = [w(10 * mb + 5, 100), w(3 * mb, 2 * mb), w(100 * mb, 1)];
        let (out, size) = eplog_prepare(&recs, 1);
        // touched segments: 3, 4, 10, 100 -> ranks 0..4
        assert_eq!(out[0].offset, 2 * mb + 5);
        assert_eq!(out[1].offset, 0);
        assert_eq!(out[1].len, 2 * mb);
        assert_eq!(out[2].offset, 3 * mb);
        assert_eq!(size, 4 * mb);
    }
}
