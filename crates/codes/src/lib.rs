//! The `codes` layer of ecstack: GF(2^8) region kernels with run-time SIMD dispatch, systematic
//! Reed-Solomon codes (Vandermonde-derived and Cauchy, the latter byte-identical to ISA-L), XOR and
//! RAID-6 fast paths, parity deltas for small updates, rateless codes (RobuSTore's improved LT code and
//! RFC 6330 RaptorQ) and the shard-file format used by `ecstack ec`.
//!
//! ```
//! use ecstack_codes::{new_code, CodeKind};
//! let code = new_code(CodeKind::RsCauchy, 4, 2).unwrap();
//! let data: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8; 64]).collect();
//! let mut parity = vec![vec![0u8; 64]; 2];
//! let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
//! let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
//! code.encode(&d, &mut p).unwrap();
//! // Lose data chunk 1 and parity chunk 0, rebuild them.
//! let mut shards: Vec<Vec<u8>> = data.iter().chain(parity.iter()).cloned().collect();
//! shards[1].fill(0);
//! shards[4].fill(0);
//! let mut s: Vec<&mut [u8]> = shards.iter_mut().map(|v| v.as_mut_slice()).collect();
//! code.reconstruct(&mut s, &[1, 4]).unwrap();
//! assert_eq!(shards[1], data[1]);
//! ```

pub mod code;
pub mod gf;
#[cfg(feature = "isal")]
pub mod isal;
pub mod kernels;
pub mod lt;
pub mod matrix;
pub mod raptor;
pub mod rateless;
pub mod rng;
pub mod shard;

pub use code::{new_code, CodeKind, ErasureCode, LinearCode};
pub use kernels::Simd;
pub use rateless::{Packet, RatelessCode, RatelessDecoder};

/// Errors of the codes layer: each one line that names the problem.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    #[error("invalid code parameters: {0}")]
    InvalidParams(String),
    #[error("expected {want} {what}s, got {got}")]
    ShardCount {
        what: String,
        got: usize,
        want: usize,
    },
    #[error("length mismatch: {0}")]
    LengthMismatch(String),
    #[error("too many erasures: {erased} shards lost but the code tolerates {m}")]
    TooManyErasures { erased: usize, m: usize },
    #[error("shard index {index} out of range (n = {n})")]
    IndexOutOfRange { index: usize, n: usize },
    #[error("decoding failed: {0}")]
    DecodeFailed(String),
    #[error("{0}")]
    Shard(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, CodeError>;
