//! One file, every configuration, one read: the per-worker state that turns a file's bytes into
//! per-configuration outcomes (compressed bytes) and chunk records (for deduplication).
//!
//! The file is read once, in windows of `WINDOW_BYTES`, into one buffer. Each configuration keeps its own
//! position in the file and consumes whole chunks from the buffer; the bytes of a chunk that is not yet
//! complete (a CDC segment that might still grow, a partial fixed-size chunk) stay in the buffer for the next
//! window. A content-defined cut is accepted only with at least `max_bytes` bytes after the segment start
//! or at the end of the file, so cuts are exactly those of chunking the whole file in one piece.

use crate::config::{Codec, Configuration, Fingerprint, Method, Segmentation};
use crate::index::{ChunkRecord, FP_BYTES_MAX};
use crate::rabin::Rabin;
use std::io::Read;
use std::time::Instant;

/// New bytes read per window.
pub const WINDOW_BYTES: usize = 8 << 20;

/// What one configuration made of one file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Bytes after reduction (compression: sum of stored chunks; dedup: the file's bytes until the
    /// dedup accounting subtracts duplicates).
    pub reduced_bytes: u64,
    /// Time spent by this configuration (compression or chunking + hashing), nanoseconds.
    pub nanos: u64,
}

enum Work {
    Compress {
        codec: Codec,
        level: i32,
        chunk_bytes: usize,
    },
    Static {
        chunk_bytes: usize,
    },
    Whole,
    FastCdc {
        min: u32,
        avg: u32,
        max: u32,
    },
    Rabin(Box<Rabin>),
}

enum Hasher {
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
    Blake3(Box<blake3::Hasher>),
}

/// Fingerprint of `data` into a fixed-size array (unused tail bytes zero). One-shot: no hasher state is
/// allocated per chunk (BLAKE3's `hash` also takes its multi-chunk SIMD path at once).
pub fn fingerprint(fp: Fingerprint, data: &[u8]) -> [u8; FP_BYTES_MAX] {
    use sha1::Digest;
    let mut out = [0u8; FP_BYTES_MAX];
    match fp {
        Fingerprint::Sha1 => out[..20].copy_from_slice(&sha1::Sha1::digest(data)),
        Fingerprint::Sha256 => out.copy_from_slice(&sha2::Sha256::digest(data)),
        Fingerprint::Blake3 => out.copy_from_slice(blake3::hash(data).as_bytes()),
    }
    out
}

impl Hasher {
    fn new(fp: Fingerprint) -> Hasher {
        use sha1::Digest;
        match fp {
            Fingerprint::Sha1 => Hasher::Sha1(sha1::Sha1::new()),
            Fingerprint::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Fingerprint::Blake3 => Hasher::Blake3(Box::new(blake3::Hasher::new())),
        }
    }
    fn update(&mut self, data: &[u8]) {
        use sha1::Digest;
        match self {
            Hasher::Sha1(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
            Hasher::Blake3(h) => {
                h.update(data);
            }
        }
    }
    fn finish(&mut self) -> [u8; FP_BYTES_MAX] {
        use sha1::Digest;
        let mut out = [0u8; FP_BYTES_MAX];
        match self {
            Hasher::Sha1(h) => out[..20].copy_from_slice(&h.finalize_reset()),
            Hasher::Sha256(h) => out.copy_from_slice(&h.finalize_reset()),
            Hasher::Blake3(h) => {
                out.copy_from_slice(h.finalize().as_bytes());
                h.reset();
            }
        }
        out
    }
}

/// The compressors of one worker, reused across chunks and files.
struct Compressors {
    zstd: Option<(i32, zstd::bulk::Compressor<'static>)>,
    /// (level, zlib wrapper, state): reset between chunks instead of reallocated.
    deflate: Option<(i32, bool, flate2::Compress)>,
    /// Output of lz4 and zstd (grown once to the largest bound, never shrunk or re-zeroed).
    out: Vec<u8>,
    /// Output of deflate (`compress_vec` appends to it, so it is cleared per chunk).
    dout: Vec<u8>,
}

/// liblz4's block compressor (`LZ4_compress_default`, the one `lz4 -1` runs per block): the compressed
/// size of `chunk`, or usize::MAX if liblz4 fails. `out` grows once to the largest bound, never per chunk.
/// Through C (lz4-sys, liblz4 1.10) rather than a port: the sizes are those of the lz4 CLI's blocks
/// byte for byte (`tests/lz4_cli.rs`), and it is the faster of the two here (docs/benchmarks.md).
pub(crate) fn lz4_block_bytes(chunk: &[u8], out: &mut Vec<u8>) -> usize {
    let Ok(n) = i32::try_from(chunk.len()) else {
        return usize::MAX;
    };
    // SAFETY: LZ4_compressBound is a pure function of its argument.
    let bound = unsafe { lz4_sys::LZ4_compressBound(n) };
    if bound <= 0 {
        return usize::MAX; // above LZ4_MAX_INPUT_SIZE
    }
    if out.len() < bound as usize {
        out.resize(bound as usize, 0);
    }
    // SAFETY: `chunk` is valid for reading `n` bytes and `out` for writing `bound` ≥ the capacity
    // passed; liblz4 reads and writes only within those lengths and keeps no pointer after returning
    // (its 16 KiB state lives on its own stack).
    let r = unsafe {
        lz4_sys::LZ4_compress_default(chunk.as_ptr().cast(), out.as_mut_ptr().cast(), n, bound)
    };
    if r > 0 {
        r as usize
    } else {
        usize::MAX
    }
}

impl Compressors {
    /// Stored bytes of one chunk: the compressed size, or the chunk's own size when it does not shrink
    /// (the file-system rule: such a chunk is stored raw).
    fn stored_bytes(&mut self, codec: Codec, level: i32, chunk: &[u8]) -> u64 {
        let n = chunk.len();
        let compressed = match codec {
            Codec::Lz4 => lz4_block_bytes(chunk, &mut self.out),
            Codec::Zstd => {
                if self.zstd.as_ref().is_none_or(|(l, _)| *l != level) {
                    self.zstd = zstd::bulk::Compressor::new(level).ok().map(|c| (level, c));
                }
                let bound = zstd::zstd_safe::compress_bound(n);
                if self.out.len() < bound {
                    self.out.resize(bound, 0);
                }
                match &mut self.zstd {
                    Some((_, c)) => c
                        .compress_to_buffer(chunk, &mut self.out[..])
                        .unwrap_or(usize::MAX),
                    None => usize::MAX,
                }
            }
            Codec::Zlib | Codec::Deflate => {
                let zlib = codec == Codec::Zlib;
                match &mut self.deflate {
                    Some((l, z, c)) if *l == level && *z == zlib => c.reset(),
                    d => {
                        *d = Some((
                            level,
                            zlib,
                            flate2::Compress::new(flate2::Compression::new(level as u32), zlib),
                        ))
                    }
                }
                let c = &mut self.deflate.as_mut().expect("set above").2;
                self.dout.clear();
                self.dout.reserve(n + n / 1000 + 64);
                match c.compress_vec(chunk, &mut self.dout, flate2::FlushCompress::Finish) {
                    Ok(flate2::Status::StreamEnd) => c.total_out() as usize,
                    _ => usize::MAX,
                }
            }
        };
        compressed.min(n) as u64
    }
}

/// Per-configuration state while one file is processed.
struct Slot {
    work: Work,
    fp: Option<Fingerprint>,
    hasher: Option<Hasher>,
    /// File offset up to which this configuration has consumed the file.
    pos: u64,
    outcome: Outcome,
}

/// Where chunk records go (one sink per dedup configuration: a spilling run writer).
pub trait ChunkSink {
    fn push(&mut self, config: u32, record: ChunkRecord) -> std::io::Result<()>;
}

/// A worker's engine: all configurations, reused file after file.
pub struct Engine {
    configs: Vec<Configuration>,
    slots: Vec<Slot>,
    compressors: Compressors,
    /// The window buffer: allocated and zeroed once per worker (not per file); only `..len` of it is
    /// the file's bytes.
    buf: Vec<u8>,
}

/// The result of one file.
pub struct FileResult {
    /// Bytes read.
    pub bytes: u64,
    /// Per configuration, in configuration order.
    pub outcomes: Vec<Outcome>,
    /// A read that failed part-way: the bytes before it were analysed as the whole file.
    pub read_error: Option<std::io::Error>,
}

impl Engine {
    pub fn new(configs: &[Configuration]) -> Engine {
        let slots = configs
            .iter()
            .map(|c| {
                let (work, fp) = match c.method {
                    Method::Compression {
                        codec,
                        level,
                        chunk_bytes,
                    } => (
                        Work::Compress {
                            codec,
                            level,
                            chunk_bytes: chunk_bytes as usize,
                        },
                        None,
                    ),
                    Method::Dedup {
                        segmentation,
                        fingerprint,
                    } => {
                        let w = match segmentation {
                            Segmentation::Whole => Work::Whole,
                            Segmentation::Static { chunk_bytes } => Work::Static {
                                chunk_bytes: chunk_bytes as usize,
                            },
                            Segmentation::FastCdc {
                                min_bytes,
                                avg_bytes,
                                max_bytes,
                            } => Work::FastCdc {
                                min: min_bytes as u32,
                                avg: avg_bytes as u32,
                                max: max_bytes as u32,
                            },
                            Segmentation::Rabin {
                                window_bytes,
                                min_bytes,
                                avg_bytes,
                                max_bytes,
                            } => Work::Rabin(Box::new(Rabin::new(
                                window_bytes as usize,
                                min_bytes as usize,
                                avg_bytes as usize,
                                max_bytes as usize,
                            ))),
                        };
                        (w, Some(fingerprint))
                    }
                };
                Slot {
                    work,
                    fp,
                    hasher: None,
                    pos: 0,
                    outcome: Outcome::default(),
                }
            })
            .collect();
        Engine {
            configs: configs.to_vec(),
            slots,
            compressors: Compressors {
                zstd: None,
                deflate: None,
                out: Vec::new(),
                dout: Vec::new(),
            },
            buf: Vec::new(),
        }
    }

    /// Read `reader` to its end once, running every configuration; chunk records of file `seq` go to `sink`.
    /// A read error ends the file there (reported in `read_error`); an error of `sink` is returned.
    pub fn process(
        &mut self,
        seq: u64,
        reader: &mut dyn Read,
        sink: &mut dyn ChunkSink,
    ) -> std::io::Result<FileResult> {
        for s in &mut self.slots {
            s.pos = 0;
            s.outcome = Outcome::default();
            s.hasher = match (&s.work, s.fp) {
                (Work::Whole, Some(fp)) => Some(Hasher::new(fp)),
                _ => None,
            };
        }
        let mut len = 0usize; // bytes of the file in buf
        let mut base = 0u64; // file offset of buf[0]
        let mut eof = false;
        let mut read_error = None;
        while !eof {
            // Read one window of new bytes after what is kept (the buffer grows, zeroed, only when
            // the kept bytes need more room than ever before: never per file).
            let kept = len;
            if self.buf.len() < kept + WINDOW_BYTES {
                self.buf.resize(kept + WINDOW_BYTES, 0);
            }
            let end = kept + WINDOW_BYTES;
            let mut filled = kept;
            while filled < end {
                match reader.read(&mut self.buf[filled..end]) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        read_error = Some(e);
                        eof = true;
                        break;
                    }
                }
            }
            len = filled;
            for (i, slot) in self.slots.iter_mut().enumerate() {
                let start = (slot.pos - base) as usize;
                let t = Instant::now();
                let used = feed(
                    slot,
                    self.configs[i].id,
                    seq,
                    &self.buf[start..len],
                    eof,
                    &mut self.compressors,
                    sink,
                )?;
                slot.pos += used as u64;
                slot.outcome.nanos += t.elapsed().as_nanos() as u64;
            }
            // Drop what every configuration has consumed.
            let low = self
                .slots
                .iter()
                .map(|s| s.pos)
                .min()
                .unwrap_or(base + len as u64);
            let drop = (low - base) as usize;
            if drop > 0 {
                self.buf.copy_within(drop..len, 0);
                len -= drop;
            }
            base = low;
        }
        let bytes = base + len as u64;
        Ok(FileResult {
            bytes,
            outcomes: self.slots.iter().map(|s| s.outcome).collect(),
            read_error,
        })
    }
}

/// Consume whole chunks of `data` (which starts at `slot.pos`); returns the bytes consumed.
fn feed(
    slot: &mut Slot,
    config: u32,
    seq: u64,
    data: &[u8],
    eof: bool,
    comp: &mut Compressors,
    sink: &mut dyn ChunkSink,
) -> std::io::Result<usize> {
    let mut off = 0usize;
    let pos = slot.pos;
    let fpk = slot.fp;
    let outcome = &mut slot.outcome;
    let mut emit = |outcome: &mut Outcome, off: usize, len: usize| -> std::io::Result<()> {
        let fp = fingerprint(fpk.expect("dedup slot"), &data[off..off + len]);
        outcome.reduced_bytes += len as u64;
        sink.push(
            config,
            ChunkRecord {
                fp,
                bytes: len as u64,
                seq,
                offset: pos + off as u64,
            },
        )
    };
    match &slot.work {
        Work::Compress {
            codec,
            level,
            chunk_bytes,
        } => {
            let (codec, level, cb) = (*codec, *level, *chunk_bytes);
            while data.len() - off >= cb || (eof && off < data.len()) {
                let len = cb.min(data.len() - off);
                outcome.reduced_bytes += comp.stored_bytes(codec, level, &data[off..off + len]);
                off += len;
            }
        }
        Work::Static { chunk_bytes } => {
            let cb = *chunk_bytes;
            while data.len() - off >= cb || (eof && off < data.len()) {
                let len = cb.min(data.len() - off);
                emit(outcome, off, len)?;
                off += len;
            }
        }
        Work::Whole => {
            let h = slot.hasher.as_mut().expect("whole-file hasher");
            h.update(data);
            off = data.len();
            if eof {
                let total = pos + data.len() as u64;
                if total > 0 {
                    let fp = h.finish();
                    outcome.reduced_bytes = total;
                    sink.push(
                        config,
                        ChunkRecord {
                            fp,
                            bytes: total,
                            seq,
                            offset: 0,
                        },
                    )?;
                }
            }
        }
        Work::FastCdc { min, avg, max } => {
            let (min, avg, max) = (*min, *avg, *max);
            if data.len() >= max as usize || eof {
                let cdc = fastcdc::v2020::FastCDC::new(data, min, avg, max);
                while data.len() - off >= max as usize || (eof && off < data.len()) {
                    let (_, end) = cdc.cut(off, data.len() - off);
                    emit(outcome, off, end - off)?;
                    off = end;
                }
            }
        }
        Work::Rabin(r) => {
            let max = r.max_bytes();
            while data.len() - off >= max || (eof && off < data.len()) {
                let len = r.cut(&data[off..]);
                emit(outcome, off, len)?;
                off += len;
            }
        }
    }
    Ok(off)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_compression, parse_dedup};
    use ecstack_base::Rng;

    struct Collect(Vec<(u32, ChunkRecord)>);
    impl ChunkSink for Collect {
        fn push(&mut self, c: u32, r: ChunkRecord) -> std::io::Result<()> {
            self.0.push((c, r));
            Ok(())
        }
    }

    /// A reader that returns short reads of varying sizes (as pipes and network file systems do).
    struct Jagged<'a>(&'a [u8], usize);
    impl Read for Jagged<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.1 = (self.1 * 7 + 3) % 100_003;
            let n = buf.len().min(self.0.len()).min(self.1 + 1);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn configs(specs: &[&str]) -> Vec<Configuration> {
        specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let method = if s.contains('@') {
                    parse_compression(s).unwrap()[0]
                } else {
                    parse_dedup(s).unwrap()
                };
                Configuration {
                    id: i as u32,
                    label: s.to_string(),
                    method,
                }
            })
            .collect()
    }

    /// Reading in windows cuts exactly where chunking the whole file in one piece cuts.
    #[test]
    fn windows_cut_like_the_whole_file() {
        let mut data = vec![0u8; 2 * WINDOW_BYTES + 777_777];
        Rng::new(42).fill(&mut data);
        // Some low-entropy stretches too (zeros cut at min size under both CDCs).
        data[3_000_000..3_500_000].fill(0);
        let cs = configs(&[
            "static:3000",
            "fastcdc:16K:blake3",
            "rabin:8K-2K-64K-w32:sha1",
            "whole:sha256",
            "lz4@100000",
        ]);
        let mut e = Engine::new(&cs);
        let mut sink = Collect(Vec::new());
        let r = e.process(9, &mut Jagged(&data, 1), &mut sink).unwrap();
        assert_eq!(r.bytes, data.len() as u64);
        let cuts = |c: u32| -> Vec<(u64, u64)> {
            sink.0
                .iter()
                .filter(|x| x.0 == c)
                .map(|x| (x.1.offset, x.1.bytes))
                .collect()
        };
        // Static: every 3000 bytes.
        let want: Vec<(u64, u64)> = data
            .chunks(3000)
            .enumerate()
            .map(|(i, c)| (i as u64 * 3000, c.len() as u64))
            .collect();
        assert_eq!(cuts(0), want);
        // FastCDC: the crate's own iterator over the whole buffer.
        let want: Vec<(u64, u64)> = fastcdc::v2020::FastCDC::new(&data, 4096, 16384, 65536)
            .map(|c| (c.offset as u64, c.length as u64))
            .collect();
        assert_eq!(cuts(1), want);
        // Rabin: repeated cuts over the whole buffer.
        let rabin = Rabin::new(32, 2048, 8192, 65536);
        let (mut pos, mut want) = (0usize, Vec::new());
        while pos < data.len() {
            let n = rabin.cut(&data[pos..]);
            want.push((pos as u64, n as u64));
            pos += n;
        }
        assert_eq!(cuts(2), want);
        // Fingerprints are of the right bytes.
        for (c, rec) in &sink.0 {
            if *c == 2 {
                let b = &data[rec.offset as usize..(rec.offset + rec.bytes) as usize];
                assert_eq!(rec.fp, fingerprint(crate::config::Fingerprint::Sha1, b));
            }
        }
        assert_eq!(cuts(3), vec![(0, data.len() as u64)]);
        assert_eq!(
            sink.0.iter().find(|x| x.0 == 3).unwrap().1.fp,
            fingerprint(crate::config::Fingerprint::Sha256, &data)
        );
        // lz4 on random data: stored raw except the zero stretch's chunks.
        assert!(r.outcomes[4].reduced_bytes < data.len() as u64 - 390_000);
        assert!(r.outcomes[4].reduced_bytes > data.len() as u64 - 500_000);
    }

    /// A read that fails part-way ends the file there; the bytes read are analysed.
    #[test]
    fn read_error_mid_file() {
        struct Failing(usize);
        impl Read for Failing {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("media error"));
                }
                let n = buf.len().min(self.0);
                buf[..n].fill(7);
                self.0 -= n;
                Ok(n)
            }
        }
        let cs = configs(&["static:4K", "zstd:3@4K"]);
        let mut e = Engine::new(&cs);
        let mut sink = Collect(Vec::new());
        let r = e.process(0, &mut Failing(10_000), &mut sink).unwrap();
        assert_eq!(r.bytes, 10_000);
        assert!(r.read_error.is_some());
        assert_eq!(sink.0.iter().map(|x| x.1.bytes).sum::<u64>(), 10_000);
        // The engine is reusable after the error.
        let r = e.process(1, &mut &[1u8; 5000][..], &mut sink).unwrap();
        assert_eq!((r.bytes, r.read_error.is_none()), (5000, true));
    }

    /// Reused compressor state gives the sizes a fresh compressor gives (and the zlib wrapper's 6 bytes).
    #[test]
    fn reused_compressors_match_fresh_ones() {
        let text = b"Alyosha and Ivan Karamazov talk in the tavern. ".repeat(400);
        let mut noise = vec![0u8; 20_000];
        Rng::new(3).fill(&mut noise);
        let mut c = Compressors {
            zstd: None,
            deflate: None,
            out: Vec::new(),
            dout: Vec::new(),
        };
        for chunk in [&text[..], &noise[..], &text[..1000], &text[..]] {
            for (codec, level) in [
                (Codec::Zlib, 6),
                (Codec::Deflate, 6),
                (Codec::Zlib, 9),
                (Codec::Zstd, 3),
                (Codec::Zstd, 9),
                (Codec::Lz4, 1),
            ] {
                let fresh = match codec {
                    Codec::Zlib | Codec::Deflate => {
                        use std::io::Write;
                        let out = if codec == Codec::Zlib {
                            let mut e = flate2::write::ZlibEncoder::new(
                                Vec::new(),
                                flate2::Compression::new(level as u32),
                            );
                            e.write_all(chunk).unwrap();
                            e.finish().unwrap()
                        } else {
                            let mut e = flate2::write::DeflateEncoder::new(
                                Vec::new(),
                                flate2::Compression::new(level as u32),
                            );
                            e.write_all(chunk).unwrap();
                            e.finish().unwrap()
                        };
                        out.len()
                    }
                    Codec::Zstd => zstd::bulk::compress(chunk, level).unwrap().len(),
                    Codec::Lz4 => {
                        // Its size is checked against the lz4 CLI in tests/lz4_cli.rs; here the
                        // block must decode (with lz4_flex, another implementation) to the chunk.
                        let mut o = Vec::new();
                        let k = lz4_block_bytes(chunk, &mut o);
                        assert_eq!(
                            lz4_flex::block::decompress(&o[..k], chunk.len()).unwrap(),
                            chunk
                        );
                        k
                    }
                };
                assert_eq!(
                    c.stored_bytes(codec, level, chunk),
                    fresh.min(chunk.len()) as u64,
                    "{codec:?}:{level}"
                );
            }
        }
        assert_eq!(c.stored_bytes(Codec::Zlib, 6, &noise), noise.len() as u64); // stored raw
    }
}
