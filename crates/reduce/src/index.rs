//! The chunk index that does not have to fit in memory: sorted run files, merged at the end.
//!
//! Every dedup configuration's chunk records (fingerprint, bytes, file sequence number, offset) are
//! collected per worker up to a memory budget, sorted by (fingerprint, seq, offset) and written as a run
//! file `chunks/c<config>/<name>.run`. Dedup accounting k-way merges all runs of a configuration (from
//! all workers and, after `merge`, all shards): within one fingerprint, the record with the smallest
//! (seq, offset) is the original — seq is the file's number in the deterministic walk order (names
//! sorted byte-wise, depth first), so the original is the first occurrence in that order — and every
//! other record is a duplicate whose bytes are removed from its file. Duplicates within one file and
//! across files are counted alike.
//!
//! Run file format (version 1, little endian): a 32-byte header — magic `ECSRRUN\0` (8), version u32,
//! fingerprint bytes u32 (20 or 32), record count u64, body CRC-32C u32, header CRC-32C u32 (over the
//! first 28 bytes) — then `count` records of fingerprint (fp bytes), bytes u64, seq u64, offset u64.

use crate::ReduceError;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The largest fingerprint (SHA-256, BLAKE3).
pub const FP_BYTES_MAX: usize = 32;
const MAGIC: &[u8; 8] = b"ECSRRUN\0";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 32;

/// One chunk occurrence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ChunkRecord {
    pub fp: [u8; FP_BYTES_MAX],
    pub bytes: u64,
    pub seq: u64,
    pub offset: u64,
}

impl ChunkRecord {
    fn key(&self) -> ([u8; FP_BYTES_MAX], u64, u64) {
        (self.fp, self.seq, self.offset)
    }
}

fn record_bytes(fp_bytes: usize) -> usize {
    fp_bytes + 24
}

/// Write one sorted run.
pub fn write_run(
    path: &Path,
    fp_bytes: usize,
    records: &mut [ChunkRecord],
) -> Result<(), ReduceError> {
    records.sort_unstable_by_key(|a| a.key());
    let io = |e: std::io::Error| ReduceError::Io(format!("{}: {e}", path.display()));
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io)?);
    w.write_all(&[0u8; HEADER_BYTES]).map_err(io)?;
    let mut crc = 0u32;
    let mut rec = vec![0u8; record_bytes(fp_bytes)];
    for r in records.iter() {
        rec[..fp_bytes].copy_from_slice(&r.fp[..fp_bytes]);
        rec[fp_bytes..fp_bytes + 8].copy_from_slice(&r.bytes.to_le_bytes());
        rec[fp_bytes + 8..fp_bytes + 16].copy_from_slice(&r.seq.to_le_bytes());
        rec[fp_bytes + 16..].copy_from_slice(&r.offset.to_le_bytes());
        crc = crc32c::crc32c_append(crc, &rec);
        w.write_all(&rec).map_err(io)?;
    }
    let mut h = [0u8; HEADER_BYTES];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(fp_bytes as u32).to_le_bytes());
    h[16..24].copy_from_slice(&(records.len() as u64).to_le_bytes());
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    let hc = crc32c::crc32c(&h[..28]);
    h[28..32].copy_from_slice(&hc.to_le_bytes());
    w.seek(SeekFrom::Start(0)).map_err(io)?;
    w.write_all(&h).map_err(io)?;
    w.flush().map_err(io)?;
    Ok(())
}

/// Streaming reader of one run, checking the header now and the body CRC at its end.
pub struct RunReader {
    path: PathBuf,
    r: BufReader<File>,
    fp_bytes: usize,
    left: u64,
    crc: u32,
    want_crc: u32,
    rec: Vec<u8>,
}

impl RunReader {
    pub fn open(path: &Path) -> Result<RunReader, ReduceError> {
        let corrupt = |why: &str| ReduceError::Corrupt(format!("{}: {why}", path.display()));
        let mut r = BufReader::with_capacity(
            1 << 20,
            File::open(path).map_err(|e| ReduceError::Io(format!("{}: {e}", path.display())))?,
        );
        let mut h = [0u8; HEADER_BYTES];
        r.read_exact(&mut h)
            .map_err(|_| corrupt("shorter than a run header"))?;
        if &h[..8] != MAGIC {
            return Err(corrupt("not a chunk run file (bad magic)"));
        }
        if u32::from_le_bytes(h[28..32].try_into().unwrap()) != crc32c::crc32c(&h[..28]) {
            return Err(corrupt("run header checksum mismatch"));
        }
        let version = u32::from_le_bytes(h[8..12].try_into().unwrap());
        if version != VERSION {
            return Err(corrupt(&format!(
                "run format version {version}, this build reads {VERSION}"
            )));
        }
        let fp_bytes = u32::from_le_bytes(h[12..16].try_into().unwrap()) as usize;
        if fp_bytes != 20 && fp_bytes != 32 {
            return Err(corrupt("bad fingerprint size"));
        }
        Ok(RunReader {
            path: path.to_path_buf(),
            r,
            fp_bytes,
            left: u64::from_le_bytes(h[16..24].try_into().unwrap()),
            crc: 0,
            want_crc: u32::from_le_bytes(h[24..28].try_into().unwrap()),
            rec: vec![0u8; record_bytes(fp_bytes)],
        })
    }

    pub fn next_record(&mut self) -> Result<Option<ChunkRecord>, ReduceError> {
        if self.left == 0 {
            return Ok(None);
        }
        let corrupt = |why: &str| ReduceError::Corrupt(format!("{}: {why}", self.path.display()));
        self.r
            .read_exact(&mut self.rec)
            .map_err(|_| corrupt("truncated run file"))?;
        self.crc = crc32c::crc32c_append(self.crc, &self.rec);
        self.left -= 1;
        if self.left == 0 && self.crc != self.want_crc {
            return Err(corrupt("run body checksum mismatch"));
        }
        let f = self.fp_bytes;
        let mut fp = [0u8; FP_BYTES_MAX];
        fp[..f].copy_from_slice(&self.rec[..f]);
        let u = |a: usize| u64::from_le_bytes(self.rec[a..a + 8].try_into().unwrap());
        Ok(Some(ChunkRecord {
            fp,
            bytes: u(f),
            seq: u(f + 8),
            offset: u(f + 16),
        }))
    }
}

/// Collects one worker's records for one configuration, spilling sorted runs when full.
pub struct RunSpiller {
    dir: PathBuf,
    prefix: String,
    fp_bytes: usize,
    records: Vec<ChunkRecord>,
    records_max: usize,
    runs: usize,
}

impl RunSpiller {
    pub fn new(dir: PathBuf, prefix: String, fp_bytes: usize, memory_bytes: u64) -> RunSpiller {
        let records_max = (memory_bytes as usize / std::mem::size_of::<ChunkRecord>()).max(1024);
        RunSpiller {
            dir,
            prefix,
            fp_bytes,
            records: Vec::new(),
            records_max,
            runs: 0,
        }
    }

    pub fn push(&mut self, r: ChunkRecord) -> Result<(), ReduceError> {
        self.records.push(r);
        if self.records.len() >= self.records_max {
            self.spill()?;
        }
        Ok(())
    }

    pub fn spill(&mut self) -> Result<(), ReduceError> {
        if self.records.is_empty() {
            return Ok(());
        }
        let path = self
            .dir
            .join(format!("{}-{:05}.run", self.prefix, self.runs));
        write_run(&path, self.fp_bytes, &mut self.records)?;
        self.records.clear();
        self.runs += 1;
        Ok(())
    }
}

/// The totals of one configuration's dedup accounting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DedupTotals {
    /// Chunk occurrences.
    pub chunks: u64,
    /// Distinct fingerprints.
    pub unique_chunks: u64,
    /// Bytes of all occurrences.
    pub bytes: u64,
    /// Bytes of the originals (what a deduplicating store keeps).
    pub unique_bytes: u64,
    /// Equal fingerprints with different lengths (a fingerprint collision; expected 0).
    pub collisions: u64,
}

struct HeapItem {
    rec: ChunkRecord,
    run: usize,
}
impl PartialEq for HeapItem {
    fn eq(&self, o: &Self) -> bool {
        self.rec.key() == o.rec.key()
    }
}
impl Eq for HeapItem {}
impl PartialOrd for HeapItem {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for HeapItem {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap.
        o.rec.key().cmp(&self.rec.key()).then(o.run.cmp(&self.run))
    }
}

/// All run files under `dir` (sorted by name, so the merge is the same on every machine).
pub fn run_files(dir: &Path) -> Result<Vec<PathBuf>, ReduceError> {
    let mut v = Vec::new();
    if dir.exists() {
        for e in std::fs::read_dir(dir)
            .map_err(|e| ReduceError::Io(format!("{}: {e}", dir.display())))?
        {
            let p = e
                .map_err(|e| ReduceError::Io(format!("{}: {e}", dir.display())))?
                .path();
            if p.extension().is_some_and(|x| x == "run") {
                v.push(p);
            }
        }
    }
    v.sort();
    Ok(v)
}

/// Merge runs; call `duplicate(seq, bytes)` for every duplicate occurrence; return the totals.
pub fn account(
    runs: &[PathBuf],
    mut duplicate: impl FnMut(u64, u64) -> Result<(), ReduceError>,
) -> Result<DedupTotals, ReduceError> {
    let mut readers = runs
        .iter()
        .map(|p| RunReader::open(p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut heap = BinaryHeap::new();
    for (i, r) in readers.iter_mut().enumerate() {
        if let Some(rec) = r.next_record()? {
            heap.push(HeapItem { rec, run: i });
        }
    }
    let mut t = DedupTotals::default();
    let mut current: Option<ChunkRecord> = None;
    while let Some(HeapItem { rec, run }) = heap.pop() {
        if let Some(next) = readers[run].next_record()? {
            heap.push(HeapItem { rec: next, run });
        }
        t.chunks += 1;
        t.bytes += rec.bytes;
        match &current {
            Some(orig) if orig.fp == rec.fp && orig.bytes == rec.bytes => {
                duplicate(rec.seq, rec.bytes)?
            }
            Some(orig) if orig.fp == rec.fp => {
                t.collisions += 1;
                t.unique_bytes += rec.bytes;
            }
            _ => {
                t.unique_chunks += 1;
                t.unique_bytes += rec.bytes;
                current = Some(rec);
            }
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(fp: u8, bytes: u64, seq: u64, offset: u64) -> ChunkRecord {
        let mut f = [0u8; FP_BYTES_MAX];
        f[0] = fp;
        ChunkRecord {
            fp: f,
            bytes,
            seq,
            offset,
        }
    }

    #[test]
    fn merge_over_runs_finds_first_occurrence() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.run");
        let b = dir.path().join("b.run");
        write_run(
            &a,
            20,
            &mut [rec(1, 10, 5, 0), rec(2, 7, 1, 0), rec(1, 10, 2, 30)],
        )
        .unwrap();
        write_run(
            &b,
            20,
            &mut [rec(1, 10, 2, 10), rec(3, 4, 0, 0), rec(2, 7, 1, 7)],
        )
        .unwrap();
        let mut dups = Vec::new();
        let t = account(&[a.clone(), b], |s, n| {
            dups.push((s, n));
            Ok(())
        })
        .unwrap();
        // fp1: originals (2,10); duplicates (2,30) and (5,0). fp2: original (1,0); duplicate (1,7).
        dups.sort();
        assert_eq!(dups, vec![(1, 7), (2, 10), (5, 10)]);
        assert_eq!(
            t,
            DedupTotals {
                chunks: 6,
                unique_chunks: 3,
                bytes: 48,
                unique_bytes: 21,
                collisions: 0
            }
        );
        // A flipped body byte is caught.
        let mut bytes = std::fs::read(&a).unwrap();
        bytes[40] ^= 1;
        std::fs::write(&a, &bytes).unwrap();
        assert!(account(&[a], |_, _| Ok(())).is_err());
    }
}
