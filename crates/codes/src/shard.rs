//! Shard files: a file erasure-coded into n shard files, any k of which rebuild it.
//!
//! On-disk format, version 1 (all integers little-endian):
//!
//! ```text
//! header, 64 bytes
//!   0  magic        8   "ECSSHARD"
//!   8  version      u16 1
//!  10  code         u8  1 rs-vand, 2 rs-cauchy, 3 xor, 4 raid6, 5 rdp (p: the smallest prime >= k + 1)
//!  11  flags        u8  0 (reserved)
//!  12  k            u16 data shards
//!  14  m            u16 parity shards
//!  16  index        u16 this shard's index, 0..k+m (data first)
//!  18  reserved     u16 0
//!  20  unit         u32 bytes of one shard unit
//!  24  length       u64 original file length
//!  32  set_id       u64 random id shared by the shards of one encoding
//!  40  data_crc     u32 CRC-32C of the whole original file
//!  44  reserved     16  zeros
//!  60  header_crc   u32 CRC-32C of bytes 0..60
//! body: for each stripe s = 0 .. ceil(length / (k * unit)):
//!   unit bytes, then u32 CRC-32C of (those bytes ‖ s as u64 ‖ index as u16)
//! ```
//!
//! Stripe s holds original bytes [s·k·unit, (s+1)·k·unit), zero-padded at the end of the file; data
//! shard j holds the j-th unit of every stripe, parity shard k+i the i-th parity unit. The per-unit CRC
//! binds each unit to its stripe and shard, so a corrupt, truncated or misplaced unit is detected before
//! use and the decoder switches to another shard; the whole-file CRC is checked before the output file is
//! renamed into place, so a decode never leaves wrong bytes behind.
//!
//! Code 5 (rdp) came later within version 1: files of codes 1–4 are unchanged, and a reader from before
//! it refuses an rdp shard as an unknown code. An rdp header whose m is not 2 parses, and decoding
//! refuses it when the code is built.
//!
//! A header is accepted only if every field is valid: known version and code, k ≥ 1, m ≥ 1, k + m ≤ 256,
//! index < k + m, unit ≥ 1, every reserved byte (11, 18–19, 44–59) zero, and a file size
//! `64 + stripes · (unit + 4)` that fits in 64 bits (a forged length cannot overflow the arithmetic).

use crate::code::{CodeKind, Systematic};
use crate::kernels::{self, Tables};
use crate::select::new_code;
use crate::{CodeError, Result};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"ECSSHARD";
pub const VERSION: u16 = 1;
pub const HEADER_LEN: usize = 64;
/// Default shard unit: large enough for full-speed coding, small enough to stream.
pub const DEFAULT_UNIT: usize = 1 << 20;

/// Why a 64-byte shard header was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("too short for a shard header ({got} of {HEADER_LEN} bytes)")]
    TooShort { got: usize },
    #[error("not a shard file (bad magic)")]
    BadMagic,
    #[error("unsupported shard format version {got} (this build reads {VERSION})")]
    Version { got: u16 },
    #[error("header checksum mismatch (corrupt header)")]
    Checksum,
    #[error("unknown code id {id}")]
    UnknownCode { id: u8 },
    #[error("invalid geometry k={k} m={m} (need k >= 1, m >= 1, k + m <= 256)")]
    Geometry { k: u16, m: u16 },
    #[error("shard index {index} out of range for k={k} m={m}")]
    Index { index: u16, k: u16, m: u16 },
    #[error("zero shard unit")]
    ZeroUnit,
    #[error("reserved header byte {offset} is {value:#04x}, not zero")]
    Reserved { offset: usize, value: u8 },
    #[error(
        "length {length} with k={k} and unit {unit} gives a shard file larger than 2^64 bytes"
    )]
    TooLong { length: u64, k: u16, unit: u32 },
}

/// Header bytes that must be zero in version 1: flags, the u16 after the index, the 16 bytes before the
/// header CRC.
const RESERVED: [std::ops::Range<usize>; 3] = [11..12, 18..20, 44..60];

/// A parsed shard header.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ShardHeader {
    pub code: CodeKind,
    pub k: u16,
    pub m: u16,
    pub index: u16,
    pub unit: u32,
    pub length: u64,
    pub set_id: u64,
    pub data_crc: u32,
}

impl ShardHeader {
    /// Stripes in the file (0 for a header with k = 0 or unit = 0, which `parse` refuses).
    pub fn stripes(&self) -> u64 {
        if self.k == 0 || self.unit == 0 {
            return 0;
        }
        stripes(self.length, self.k as u64, self.unit as u64)
    }

    /// Exact size of a complete shard file with this header; `None` if it does not fit in 64 bits (never
    /// for a header [`parse`](ShardHeader::parse) accepted).
    pub fn file_len(&self) -> Option<u64> {
        if self.k == 0 || self.unit == 0 {
            return None;
        }
        self.stripes()
            .checked_mul(self.unit as u64 + 4)?
            .checked_add(HEADER_LEN as u64)
    }

    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(MAGIC);
        b[8..10].copy_from_slice(&VERSION.to_le_bytes());
        b[10] = self.code.id();
        b[12..14].copy_from_slice(&self.k.to_le_bytes());
        b[14..16].copy_from_slice(&self.m.to_le_bytes());
        b[16..18].copy_from_slice(&self.index.to_le_bytes());
        b[20..24].copy_from_slice(&self.unit.to_le_bytes());
        b[24..32].copy_from_slice(&self.length.to_le_bytes());
        b[32..40].copy_from_slice(&self.set_id.to_le_bytes());
        b[40..44].copy_from_slice(&self.data_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parse and validate a header (see the module doc for what is checked). Any byte string gives either
    /// a header or an error, never a panic; an accepted header re-encodes to the same 64 bytes.
    pub fn parse(b: &[u8]) -> std::result::Result<ShardHeader, HeaderError> {
        let Some(b) = b.get(..HEADER_LEN) else {
            return Err(HeaderError::TooShort { got: b.len() });
        };
        if &b[0..8] != MAGIC {
            return Err(HeaderError::BadMagic);
        }
        let u16at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64at = |o: usize| (u32at(o) as u64) | (u32at(o + 4) as u64) << 32;
        let version = u16at(8);
        if version != VERSION {
            return Err(HeaderError::Version { got: version });
        }
        if crc32c::crc32c(&b[..60]) != u32at(60) {
            return Err(HeaderError::Checksum);
        }
        for offset in RESERVED.into_iter().flatten() {
            if b[offset] != 0 {
                return Err(HeaderError::Reserved {
                    offset,
                    value: b[offset],
                });
            }
        }
        let code = CodeKind::from_id(b[10]).ok_or(HeaderError::UnknownCode { id: b[10] })?;
        let (k, m, index, unit) = (u16at(12), u16at(14), u16at(16), u32at(20));
        if k == 0 || m == 0 || k as usize + m as usize > 256 {
            return Err(HeaderError::Geometry { k, m });
        }
        if index >= k + m {
            return Err(HeaderError::Index { index, k, m });
        }
        if unit == 0 {
            return Err(HeaderError::ZeroUnit);
        }
        let h = ShardHeader {
            code,
            k,
            m,
            index,
            unit,
            length: u64at(24),
            set_id: u64at(32),
            data_crc: u32at(40),
        };
        if h.file_len().is_none() {
            return Err(HeaderError::TooLong {
                length: h.length,
                k,
                unit,
            });
        }
        Ok(h)
    }
}

fn stripes(length: u64, k: u64, unit: u64) -> u64 {
    length.div_ceil(k * unit)
}

fn unit_crc(unit: &[u8], stripe: u64, index: u16) -> u32 {
    let c = crc32c::crc32c(unit);
    let c = crc32c::crc32c_append(c, &stripe.to_le_bytes());
    crc32c::crc32c_append(c, &index.to_le_bytes())
}

/// Options for [`encode_file`].
#[derive(Clone, Debug)]
pub struct EncodeOptions {
    pub code: CodeKind,
    pub k: usize,
    pub m: usize,
    /// Shard unit; `None` picks min(1 MiB, the file split k ways, rounded up to 64 bytes), rounded up to
    /// a multiple of the code's chunk alignment (RDP: p - 1). A given unit must be such a multiple.
    pub unit: Option<usize>,
    /// The id shared by the shards of this encoding; `None` draws a random one. Deterministic tests
    /// pass one so two encodes of a file write the same bytes.
    pub set_id: Option<u64>,
}

/// What an encode or decode did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub bytes: u64,
    pub stripes: u64,
    pub unit: usize,
    pub shards: Vec<PathBuf>,
    /// Seconds spent in the coding kernels only.
    pub coding_seconds: f64,
    /// Wall-clock seconds, I/O included.
    pub total_seconds: f64,
    /// Shards that were given but not used, with the reason.
    pub rejected: Vec<String>,
}

fn io_err(path: &Path, source: std::io::Error) -> CodeError {
    CodeError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn shard_name(out_dir: &Path, input: &Path, index: usize) -> PathBuf {
    let base = input
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "data".into());
    out_dir.join(format!("{base}.{index:03}.shard"))
}

/// Split `input` into k data shards and m parity shards in `out_dir`, named `<file>.<index>.shard`.
pub fn encode_file(input: &Path, out_dir: &Path, opts: &EncodeOptions) -> Result<Report> {
    encode_file_with_progress(input, out_dir, opts, &mut |_, _| {})
}

/// [`encode_file`], calling `progress(bytes_done, total)` after every stripe.
pub fn encode_file_with_progress(
    input: &Path,
    out_dir: &Path,
    opts: &EncodeOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report> {
    let start = std::time::Instant::now();
    let code = new_code(opts.code, opts.k, opts.m)?;
    let (k, m) = (opts.k, opts.m);
    let mut f = File::open(input).map_err(|e| io_err(input, e))?;
    let length = f.metadata().map_err(|e| io_err(input, e))?.len();
    let unit = match opts.unit {
        Some(0) => {
            return Err(CodeError::Params {
                code: "shard file",
                got: "unit 0".into(),
                rule: "the shard unit is at least 1 byte",
            })
        }
        Some(u) => u,
        None => {
            let u = (length.div_ceil(k as u64).div_ceil(64) * 64).clamp(64, DEFAULT_UNIT as u64);
            // RDP's units are p - 1 rows: round up to its alignment (1 for the other codes).
            u.next_multiple_of(code.chunk_align_bytes() as u64) as usize
        }
    };
    // Refused before any shard file is created.
    if unit % code.chunk_align_bytes() != 0 {
        return Err(CodeError::ChunkAlign {
            code: opts.code.name(),
            len: unit as u64,
            align: code.chunk_align_bytes(),
            why: "the shard unit is the code's chunk",
        });
    }
    if unit > u32::MAX as usize {
        return Err(CodeError::Params {
            code: "shard file",
            got: format!("unit {unit}"),
            rule: "the shard unit is below 4 GiB",
        });
    }
    // First pass: whole-file CRC (the file is read twice so that headers can be written first and a
    // huge file never sits in memory).
    let mut data_crc = 0u32;
    let mut buf = zeroed(k * unit)?;
    loop {
        let n = read_full(&mut f, &mut buf).map_err(|e| io_err(input, e))?;
        if n == 0 {
            break;
        }
        data_crc = crc32c::crc32c_append(data_crc, &buf[..n]);
    }
    let mut f = File::open(input).map_err(|e| io_err(input, e))?;
    std::fs::create_dir_all(out_dir).map_err(|e| io_err(out_dir, e))?;
    let set_id = opts.set_id.unwrap_or_else(ecstack_base::random_id);
    let paths: Vec<PathBuf> = (0..k + m).map(|i| shard_name(out_dir, input, i)).collect();
    let mut outs = Vec::with_capacity(k + m);
    for (i, p) in paths.iter().enumerate() {
        let mut w = BufWriter::with_capacity(1 << 20, File::create(p).map_err(|e| io_err(p, e))?);
        let h = ShardHeader {
            code: opts.code,
            k: k as u16,
            m: m as u16,
            index: i as u16,
            unit: unit as u32,
            length,
            set_id,
            data_crc,
        };
        w.write_all(&h.to_bytes()).map_err(|e| io_err(p, e))?;
        outs.push(w);
    }
    let nstripes = stripes(length, k as u64, unit as u64);
    let mut parity = zeroed(m * unit)?;
    let mut coding = 0f64;
    for s in 0..nstripes {
        let n = read_full(&mut f, &mut buf).map_err(|e| io_err(input, e))?;
        buf[n..].fill(0);
        let t = std::time::Instant::now();
        {
            let data: Vec<&[u8]> = buf.chunks_exact(unit).collect();
            let mut par: Vec<&mut [u8]> = parity.chunks_exact_mut(unit).collect();
            code.encode(&data, &mut par)?;
        }
        coding += t.elapsed().as_secs_f64();
        for (i, w) in outs.iter_mut().enumerate() {
            let u = if i < k {
                &buf[i * unit..(i + 1) * unit]
            } else {
                &parity[(i - k) * unit..(i - k + 1) * unit]
            };
            w.write_all(u).map_err(|e| io_err(&paths[i], e))?;
            w.write_all(&unit_crc(u, s, i as u16).to_le_bytes())
                .map_err(|e| io_err(&paths[i], e))?;
        }
        progress(((s + 1) * (k * unit) as u64).min(length), length);
    }
    for (i, w) in outs.into_iter().enumerate() {
        let f = w
            .into_inner()
            .map_err(|e| io_err(&paths[i], e.into_error()))?;
        f.sync_all().map_err(|e| io_err(&paths[i], e))?;
    }
    Ok(Report {
        bytes: length,
        stripes: nstripes,
        unit,
        shards: paths,
        coding_seconds: coding,
        total_seconds: start.elapsed().as_secs_f64(),
        rejected: Vec::new(),
    })
}

/// A zeroed buffer, or an error if the allocation fails.
fn zeroed(len: usize) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| CodeError::Params {
        code: "shard file",
        got: format!("a {len}-byte buffer"),
        rule: "the geometry's buffers must fit in memory",
    })?;
    v.resize(len, 0);
    Ok(v)
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(x) => n += x,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Read and check the header of one shard file (including that the file has the exact expected size).
pub fn read_header(path: &Path) -> Result<ShardHeader> {
    let f = File::open(path).map_err(|e| io_err(path, e))?;
    let mut b = [0u8; HEADER_LEN];
    let got = f.read_at(&mut b, 0).map_err(|e| io_err(path, e))?;
    let h = ShardHeader::parse(&b[..got]).map_err(|error| CodeError::Header {
        path: path.display().to_string(),
        error,
    })?;
    // `parse` refuses a header whose file size overflows, so this is always `Some`.
    let want = h.file_len().unwrap_or(u64::MAX);
    let len = f.metadata().map_err(|e| io_err(path, e))?.len();
    if len != want {
        return Err(CodeError::ShardFileSize {
            path: path.display().to_string(),
            got: len,
            want,
        });
    }
    Ok(h)
}

struct OpenShard {
    path: PathBuf,
    file: File,
    header: ShardHeader,
    bad: bool,
}

/// Rebuild the original file from the given shard files (any k valid ones suffice) into `output`.
/// Shards that are missing, truncated, from another encoding, duplicated or corrupt are named in the
/// report (or in the error when fewer than k usable ones remain). The output appears only if the whole
/// file's checksum matches.
pub fn decode_files(shards: &[PathBuf], output: &Path) -> Result<Report> {
    decode_files_with_progress(shards, output, &mut |_, _| {})
}

/// [`decode_files`], calling `progress(bytes_done, total)` after every stripe.
pub fn decode_files_with_progress(
    shards: &[PathBuf],
    output: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report> {
    let start = std::time::Instant::now();
    let mut rejected = Vec::new();
    let mut open: Vec<OpenShard> = Vec::new();
    for p in shards {
        let h = match read_header(p) {
            Ok(h) => h,
            Err(e) => {
                rejected.push(e.to_string());
                continue;
            }
        };
        if let Some(first) = open.first() {
            let f = &first.header;
            if (h.code, h.k, h.m, h.unit, h.length, h.set_id, h.data_crc)
                != (f.code, f.k, f.m, f.unit, f.length, f.set_id, f.data_crc)
            {
                rejected.push(format!(
                    "shard {}: belongs to a different encoding than {} (set {:016x} vs {:016x})",
                    p.display(),
                    first.path.display(),
                    h.set_id,
                    f.set_id
                ));
                continue;
            }
        }
        if let Some(dup) = open.iter().find(|o| o.header.index == h.index) {
            rejected.push(format!(
                "shard {}: duplicate of shard index {} ({})",
                p.display(),
                h.index,
                dup.path.display()
            ));
            continue;
        }
        let file = File::open(p).map_err(|e| io_err(p, e))?;
        open.push(OpenShard {
            path: p.clone(),
            file,
            header: h,
            bad: false,
        });
    }
    let Some(first) = open.first() else {
        return Err(CodeError::NoUsableShard {
            given: shards.len(),
            rejected,
        });
    };
    let h0 = first.header.clone();
    let (k, m, unit) = (h0.k as usize, h0.m as usize, h0.unit as usize);
    if open.len() < k {
        return Err(CodeError::TooFewShardFiles {
            usable: open.len(),
            k,
            rejected,
        });
    }
    let code = new_code(h0.code, k, m)?;
    // Linear codes rebuild only the lost data units from the generator; RDP has no generator and
    // rebuilds through `reconstruct_in_place`.
    let linear = match h0.code {
        CodeKind::Rdp => None,
        kind => Some(Systematic::new(kind, k, m, Default::default())?),
    };
    // Prefer data shards (no decoding needed), then parity, in index order.
    open.sort_by_key(|o| o.header.index);
    let tmp = output.with_extension(format!(
        "{}partial",
        output
            .extension()
            .map(|e| format!("{}.", e.to_string_lossy()))
            .unwrap_or_default()
    ));
    let out_file = File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
    let result = (|| -> Result<f64> {
        let mut w = BufWriter::with_capacity(1 << 20, out_file);
        // Headers are validated, but a unit of up to 4 GiB is legal: allocate fallibly so that an absurd
        // (for this machine) geometry is an error, not an abort.
        let mut units: Vec<Vec<u8>> = Vec::with_capacity(k + m);
        for _ in 0..k + m {
            units.push(zeroed(unit + 4)?);
        }
        let mut stripe_buf = zeroed(k * unit)?;
        let mut crc = 0u32;
        let mut coding = 0f64;
        let mut remaining = h0.length;
        for s in 0..h0.stripes() {
            // Choose k shards that read back with a good checksum for this stripe.
            let mut chosen: Vec<usize> = Vec::with_capacity(k);
            for (oi, o) in open.iter_mut().enumerate() {
                if chosen.len() == k {
                    break;
                }
                if o.bad {
                    continue;
                }
                let idx = o.header.index as usize;
                let off = HEADER_LEN as u64 + s * (unit as u64 + 4);
                let buf = &mut units[idx];
                if let Err(e) = o.file.read_exact_at(buf, off) {
                    o.bad = true;
                    rejected.push(format!(
                        "shard {}: read error at stripe {s}: {e}",
                        o.path.display()
                    ));
                    continue;
                }
                let want = u32::from_le_bytes(buf[unit..].try_into().expect("4 bytes"));
                if unit_crc(&buf[..unit], s, idx as u16) != want {
                    o.bad = true;
                    rejected.push(format!(
                        "shard {}: checksum mismatch in stripe {s} (corrupt)",
                        o.path.display()
                    ));
                    continue;
                }
                chosen.push(oi);
            }
            if chosen.len() < k {
                return Err(CodeError::StripeLost {
                    stripe: s,
                    intact: chosen.len(),
                    k,
                    rejected: std::mem::take(&mut rejected),
                });
            }
            let have: Vec<usize> = chosen
                .iter()
                .map(|&oi| open[oi].header.index as usize)
                .collect();
            let t = std::time::Instant::now();
            for (j, dst) in stripe_buf.chunks_exact_mut(unit).enumerate() {
                if have.contains(&j) {
                    dst.copy_from_slice(&units[j][..unit]);
                }
            }
            let missing: Vec<usize> = (0..k).filter(|j| !have.contains(j)).collect();
            if !missing.is_empty() {
                let erased: Vec<usize> = (0..k + m).filter(|i| !have.contains(i)).collect();
                if let Some(linear) = &linear {
                    let (survivors, rows) = linear.plan(&erased)?;
                    // Keep only the rows that rebuild data chunks.
                    let mut coef = Vec::with_capacity(missing.len() * k);
                    for (r, &e) in erased.iter().enumerate() {
                        if e < k {
                            coef.extend_from_slice(rows.row(r));
                        }
                    }
                    let tables = Tables::new(missing.len(), k, &coef);
                    let srcs: Vec<&[u8]> = survivors.iter().map(|&i| &units[i][..unit]).collect();
                    let mut outs: Vec<Option<&mut [u8]>> =
                        stripe_buf.chunks_exact_mut(unit).map(Some).collect();
                    let mut dsts: Vec<&mut [u8]> = missing
                        .iter()
                        .map(|&j| outs[j].take().expect("once"))
                        .collect();
                    kernels::dot_prod(&tables, &srcs, &mut dsts, unit, false);
                } else {
                    let mut all: Vec<&mut [u8]> =
                        units.iter_mut().map(|u| &mut u[..unit]).collect();
                    code.reconstruct_in_place(&mut all, &erased)?;
                    for &j in &missing {
                        stripe_buf[j * unit..(j + 1) * unit].copy_from_slice(&units[j][..unit]);
                    }
                }
            }
            coding += t.elapsed().as_secs_f64();
            let take = remaining.min((k * unit) as u64) as usize;
            crc = crc32c::crc32c_append(crc, &stripe_buf[..take]);
            w.write_all(&stripe_buf[..take])
                .map_err(|e| io_err(&tmp, e))?;
            remaining -= take as u64;
            progress(h0.length - remaining, h0.length);
        }
        if crc != h0.data_crc {
            return Err(CodeError::FileChecksum {
                got: crc,
                want: h0.data_crc,
            });
        }
        let f = w.into_inner().map_err(|e| io_err(&tmp, e.into_error()))?;
        f.sync_all().map_err(|e| io_err(&tmp, e))?;
        Ok(coding)
    })();
    match result {
        Ok(coding) => {
            std::fs::rename(&tmp, output).map_err(|e| io_err(output, e))?;
            Ok(Report {
                bytes: h0.length,
                stripes: h0.stripes(),
                unit,
                shards: open.iter().map(|o| o.path.clone()).collect(),
                coding_seconds: coding,
                total_seconds: start.elapsed().as_secs_f64(),
                rejected,
            })
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip() {
        let h = ShardHeader {
            code: CodeKind::RsCauchy,
            k: 10,
            m: 4,
            index: 13,
            unit: 4096,
            length: 123_456_789,
            set_id: 0xdead_beef,
            data_crc: 42,
        };
        assert_eq!(ShardHeader::parse(&h.to_bytes()).unwrap(), h);
        let mut b = h.to_bytes();
        b[17] ^= 1;
        assert_eq!(ShardHeader::parse(&b), Err(HeaderError::Checksum));
    }
}
