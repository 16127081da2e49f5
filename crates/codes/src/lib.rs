//! The `codes` layer of ecstack: systematic erasure codes (Reed-Solomon from a Vandermonde-derived or a
//! Cauchy generator, the latter byte-identical to ISA-L; XOR parity; RAID-6; RDP), parity deltas for small
//! updates, rateless codes (RobuSTore's improved LT code and RFC 6330 RaptorQ) and the shard-file format
//! used by `ecstack ec`. GF(2^8) arithmetic, matrices and the SIMD region kernels are internal.
//!
//! The API, in the shape of klauspost/reedsolomon:
//!
//! - [`new_code`] builds an [`ErasureCode`]: [`encode`](ErasureCode::encode) data into parity,
//!   [`reconstruct`](ErasureCode::reconstruct) any k of n shards (missing ones are `None`),
//!   [`parity_deltas`](ErasureCode::parity_deltas) and [`apply_delta`](ErasureCode::apply_delta) for
//!   small updates. [`LinearCode`] adds the generator matrix for benchmarks and cross-checks.
//! - [`RatelessCode`] ([`LtCode`], [`RaptorQ`]) encodes into as many packets as asked; its decoder takes
//!   packets in any order.
//! - [`shard`] splits a file into n shard files and rebuilds it from any k.
//!
//! Unlike klauspost/reedsolomon's `Encode(shards)`, [`encode`](ErasureCode::encode) takes the data
//! and the parity as two arguments, `(&[&[u8]], &mut [&mut [u8]])`, not one slice of all n shards.
//! The data often is borrowed immutably while parity is written: the array's eplog scheme encodes
//! a log stripe's log chunks straight from the slices of the caller's `write_at(&[u8])` buffer,
//! which it may not mutate, and the chunks are written out from those same slices. One `&mut`
//! slice of n shards would force such a caller to copy every data chunk into mutable buffers first. [`reconstruct`] is the
//! other way round: it fills missing shards of any position, so it takes the one slice of all n,
//! each `Some` (present) or `None` (to rebuild), and allocates what it fills.
//!
//! [`reconstruct`]: ErasureCode::reconstruct
//!
//! Codes cannot tell a corrupt shard from a good one: a caller passes only shards it has verified (the
//! CRC of each shard-file unit, the array's metadata, an OSD's chunk headers).
//!
//! ```
//! use ecstack_codes::{new_code, CodeKind};
//! let code = new_code(CodeKind::RsCauchy, 4, 2).unwrap();
//! let data: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8; 64]).collect();
//! let mut parity = vec![vec![0u8; 64]; 2];
//! let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
//! let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
//! code.encode(&d, &mut p).unwrap();
//!
//! // Lose data chunk 1 and parity chunk 0 (shard 4), rebuild them from the other four.
//! let mut shards: Vec<Option<Vec<u8>>> = data.iter().chain(&parity).cloned().map(Some).collect();
//! shards[1] = None;
//! shards[4] = None;
//! code.reconstruct(&mut shards).unwrap();
//! assert_eq!(shards[1].as_deref(), Some(data[1].as_slice()));
//! assert_eq!(shards[4].as_deref(), Some(parity[0].as_slice()));
//!
//! // Update the first 8 bytes of data chunk 2: only the parity deltas travel to the parity chunks.
//! let new = [0xffu8; 8];
//! let mut deltas = vec![vec![0u8; 8]; 2];
//! let mut dl: Vec<&mut [u8]> = deltas.iter_mut().map(|v| v.as_mut_slice()).collect();
//! code.parity_deltas(2, &data[2][..8], &new, &mut dl).unwrap();
//! for (p, d) in parity.iter_mut().zip(&deltas) {
//!     code.apply_delta(&mut p[..8], d).unwrap();
//! }
//! let mut updated = data.clone();
//! updated[2][..8].copy_from_slice(&new);
//! let all: Vec<&[u8]> = updated.iter().chain(&parity).map(|v| v.as_slice()).collect();
//! assert!(code.verify(&all).unwrap());
//! ```

mod blocks;
mod code;
mod decode_cache;
mod gf;
#[cfg(any(feature = "isal", feature = "isal-new"))]
pub mod isal;
mod kernels;
mod lt;
mod matrix;
mod raptor;
mod rateless;
mod rdp;
mod rng;
mod select;
pub mod shard;

pub use blocks::{BlockCode, BlockCodeKind, BlockDecoder, BlockEncoder};
pub use code::{
    new_linear_code, new_linear_code_with, CodeKind, CodeOptions, ErasureCode, LinearCode,
};
pub use decode_cache::{DecodeCacheStats, DECODE_CACHE_BYTES_MAX, DECODE_CACHE_ENTRIES_MAX};
pub use kernels::Simd;
pub use lt::{Graph as LtGraph, LtCode, LtDecoder, LtParams};
pub use matrix::Matrix;
pub use raptor::{RaptorQ, RaptorQDecoder};
pub use rateless::{Packet, RatelessCode, RatelessDecoder};
pub use select::{chunk_align_bytes_of, new_code, new_code_with};

/// `dst ^= src`, with the SIMD kernels: the one region operation callers need outside a code (summing
/// parity deltas, folding log chunks into parity). Both slices must have the same length.
pub fn xor_into(dst: &mut [u8], src: &[u8]) -> Result<()> {
    if dst.len() != src.len() {
        return Err(CodeError::ShardSize {
            what: "xor source",
            index: 0,
            got: src.len(),
            want: dst.len(),
        });
    }
    kernels::xor_into(dst, src);
    Ok(())
}

/// Errors of the codes layer: each one line that names the problem. Every method checks the shapes it is
/// given (counts, lengths, indexes) before touching data and returns one of these instead of panicking.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    /// [`CodeKind::parse`] was given a name it does not know.
    #[error("unknown code '{name}' (expected rs-vand, rs-cauchy, xor, raid6 or rdp)")]
    UnknownCode { name: String },
    /// A chunk length is not a multiple of what the code needs ([`ErasureCode::chunk_align_bytes`]: RDP's
    /// chunks are p - 1 rows).
    #[error("{code} chunk length {len} is not a multiple of {align} ({why})")]
    ChunkAlign {
        code: &'static str,
        len: u64,
        align: usize,
        why: &'static str,
    },
    /// [`new_linear_code`] was asked for a code that has no GF(2^8) generator matrix (RDP).
    #[error("{code} is not a GF(2^8) linear code: the linear view exists for rs-vand, rs-cauchy, xor and raid6 only")]
    NotLinear { code: &'static str },
    /// [`ErasureCode::parity_deltas`] was called on a code whose parity changes outside the updated range
    /// (RDP's diagonal parity).
    #[error("{code} parity deltas change bytes outside the updated range: use delta_ranges and ranged_parity_deltas")]
    RangedDeltasNeeded { code: &'static str },
    /// A byte range is reversed or reaches past the end of a chunk.
    #[error("byte range {lo}..{hi} is outside a chunk of {chunk_len} bytes")]
    RangeOutOfChunk { lo: u64, hi: u64, chunk_len: u64 },
    /// A constructor ([`new_code`], [`LtCode::new`], [`RaptorQ::new`], [`shard::encode_file`]) was given
    /// parameters outside the code's limits; `rule` states the limit, `got` the values given.
    #[error("invalid {code} parameters ({got}): {rule}")]
    Params {
        code: &'static str,
        got: String,
        rule: &'static str,
    },
    /// A slice of shards (data, parity, deltas, all n) has the wrong number of entries.
    #[error("expected {want} {what}s, got {got}")]
    ShardCount {
        what: &'static str,
        got: usize,
        want: usize,
    },
    /// A shard (or delta, range, packet) differs in length from the others or from what the code holds.
    #[error("{what} {index} is {got} bytes, expected {want}")]
    ShardSize {
        what: &'static str,
        index: usize,
        got: usize,
        want: usize,
    },
    /// [`ErasureCode::reconstruct`] was given fewer than k shards.
    #[error("too few shards: {present} present but {k} are needed")]
    TooFewShards { present: usize, k: usize },
    /// [`ErasureCode::reconstruct_in_place`] was asked to rebuild more shards than the code tolerates.
    #[error("too many erasures: {erased} shards lost but the code tolerates {m}")]
    TooManyErasures { erased: usize, m: usize },
    /// A shard, data-chunk or packet index is outside the code.
    #[error("shard index {index} out of range (n = {n})")]
    IndexOutOfRange { index: usize, n: usize },
    /// The list of erased shards names one shard twice.
    #[error("shard {index} is listed as erased twice")]
    DuplicateErasure { index: usize },
    /// A [`BlockCode`] was given a coded-block id outside its id space.
    #[error("coded block id {id} is outside the id space 0..{id_space}")]
    BlockId { id: u32, id_space: usize },
    /// A rateless code was given an object longer than the K source blocks it was built for.
    #[error("object is {got} bytes but the code holds at most {max}")]
    ObjectTooLarge { got: usize, max: usize },
    /// A rateless code was asked for more packets than it was built for.
    #[error("asked for {asked} packets but the code was built for {max}")]
    TooManyPackets { asked: usize, max: usize },
    /// A rateless decoder was finished before it could return the object.
    #[error(
        "{code}: {decoded} of {k} source blocks known after {received} packets, not decodable yet"
    )]
    Incomplete {
        code: &'static str,
        decoded: usize,
        k: usize,
        received: usize,
    },
    /// The surviving shards' generator rows are singular. Cannot happen for the MDS generators built here;
    /// reported rather than panicking.
    #[error("survivors {survivors:?} do not form an invertible matrix")]
    NotInvertible { survivors: Vec<usize> },
    /// [`Simd::set_active`] was given a level this CPU lacks, or came after the level was fixed.
    #[error("kernel level {level}: {why}")]
    SimdLevel { level: &'static str, why: String },
    /// A shard file's header is refused (see [`shard::HeaderError`]).
    #[error("shard {path}: {error}")]
    Header {
        path: String,
        #[source]
        error: shard::HeaderError,
    },
    /// A shard file's size differs from what its header implies (truncated, or trailing bytes).
    #[error("shard {path}: {} (expected {want} bytes, found {got})", if .got < .want { "truncated" } else { "has trailing bytes" })]
    ShardFileSize { path: String, got: u64, want: u64 },
    /// None of the shard files given to [`shard::decode_files`] is usable; `rejected` says why, one per file.
    #[error("no usable shard among {given} given{}", reasons(.rejected))]
    NoUsableShard { given: usize, rejected: Vec<String> },
    /// Fewer than k usable shard files of one encoding were given.
    #[error("need {k} shards to decode, only {usable} usable{}", reasons(.rejected))]
    TooFewShardFiles {
        usable: usize,
        k: usize,
        rejected: Vec<String>,
    },
    /// While decoding, so many units of one stripe were unreadable or corrupt that fewer than k remain.
    #[error("stripe {stripe}: only {intact} of the {k} needed shards are intact{}", reasons(.rejected))]
    StripeLost {
        stripe: u64,
        intact: usize,
        k: usize,
        rejected: Vec<String>,
    },
    /// The decoded file fails the whole-file CRC-32C its shards carry; the output was discarded.
    #[error(
        "decoded data fails the whole-file checksum ({got:08x} != {want:08x}); output discarded"
    )]
    FileChecksum { got: u32, want: u32 },
    /// Reading or writing a shard file or its original failed.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, CodeError>;

/// ": reason; reason" for the rejected shard files in an error line, or nothing.
fn reasons(rejected: &[String]) -> String {
    if rejected.is_empty() {
        String::new()
    } else {
        format!(": {}", rejected.join("; "))
    }
}
