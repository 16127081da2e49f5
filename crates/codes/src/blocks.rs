//! Block-level rateless object codes for RobuSTore on the cluster (RobuSTore thesis §4.1.2, §5.3).
//!
//! An object of K source blocks (`block_bytes` each) is stored as coded blocks whose ids lie in an id
//! space N′ fixed when the object is opened. The writer produces blocks by id, in any order, until
//! enough are durable; the reader pushes whichever blocks arrive until the object decodes. Before
//! committing, the writer asks [`BlockCode::decodable`] whether the acknowledged ids decode, a dry run
//! on the ids alone.
//!
//! - **LT** ([`BlockCodeKind::Lt`]): the improved LT code of [`LtCode`] with a graph over all N′ coded
//!   blocks, checked to decode from all of them. Coded block `id` is the XOR of its graph neighbours;
//!   an update regenerates only the coded blocks that use a changed source block.
//! - **RaptorQ** ([`BlockCodeKind::RaptorQ`]): RFC 6330 with the object as one source block of
//!   K·32 symbols of `block_bytes / 32` bytes; coded block j carries the encoding symbols
//!   32j..32j+31, so blocks 0..K are the data itself (systematic) and the rest are repair symbols.
//!
//! ```
//! use ecstack_codes::{BlockCode, BlockCodeKind};
//! let k = 4;
//! let code = BlockCode::new(BlockCodeKind::RaptorQ, k, 64, 16, 1).unwrap();
//! let object: Vec<u8> = (0..k * 64).map(|i| i as u8).collect();
//! let enc = code.encoder(&object).unwrap();
//! let ids = [9u32, 2, 14, 5, 7]; // any ids, any order
//! assert!(code.decodable(&ids));
//! let mut dec = code.decoder();
//! for &id in &ids {
//!     if dec.push(id, enc.block(id).unwrap()).unwrap() {
//!         break;
//!     }
//! }
//! assert_eq!(dec.finish().unwrap(), object);
//! ```

use std::ops::Range;
use std::sync::Arc;

use raptorq::{
    EncodingPacket, ObjectTransmissionInformation, PayloadId, SourceBlockDecoder,
    SourceBlockEncoder,
};

use crate::lt::{LtCode, LtDecoder, LtParams};
use crate::raptor::MAX_SYMBOLS;
use crate::{CodeError, Result};

/// RaptorQ symbols per coded block.
pub const SYMBOLS_PER_BLOCK: usize = 32;
/// RFC 6330's encoding symbol ids are 24-bit.
const MAX_ESI: usize = 1 << 24;

/// Which rateless code a [`BlockCode`] uses.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum BlockCodeKind {
    /// RobuSTore's improved LT code with robust soliton parameters C and δ.
    Lt { c: f64, delta: f64 },
    /// RFC 6330 RaptorQ, 32 symbols per coded block.
    RaptorQ,
}

impl BlockCodeKind {
    /// The simulator's LT parameters (`ecstack sim robustore`): C = 1, δ = 0.5.
    pub const LT_DEFAULT: BlockCodeKind = BlockCodeKind::Lt { c: 1.0, delta: 0.5 };

    /// [`BlockCodeKind::LT_DEFAULT`].
    pub fn lt_default() -> BlockCodeKind {
        BlockCodeKind::LT_DEFAULT
    }

    /// "lt" (with [`BlockCodeKind::LT_DEFAULT`]'s parameters) or "raptorq", case-insensitive.
    pub fn parse(name: &str) -> Option<BlockCodeKind> {
        match name.to_ascii_lowercase().as_str() {
            "lt" => Some(BlockCodeKind::LT_DEFAULT),
            "raptorq" => Some(BlockCodeKind::RaptorQ),
            _ => None,
        }
    }

    /// "lt" or "raptorq".
    pub fn name(&self) -> &'static str {
        match self {
            BlockCodeKind::Lt { .. } => "lt",
            BlockCodeKind::RaptorQ => "raptorq",
        }
    }
}

#[derive(Clone, Debug)]
enum Inner {
    Lt(Arc<LtCode>),
    RaptorQ {
        config: ObjectTransmissionInformation,
    },
}

/// A rateless code for one object of K blocks over an id space of coded blocks. Cheap to clone.
#[derive(Clone, Debug)]
pub struct BlockCode {
    kind: BlockCodeKind,
    k: usize,
    block_bytes: usize,
    id_space: usize,
    seed: u64,
    inner: Inner,
}

impl BlockCode {
    /// LT: the graph over `id_space` coded blocks from `seed`, or the next seed whose graph decodes
    /// from all `id_space` blocks ([`BlockCode::seed`] tells which). RaptorQ: `block_bytes` a multiple
    /// of 32 with symbols of at most 65,535 bytes, K·32 ≤ 56,403 symbols; `seed` is kept but unused.
    pub fn new(
        kind: BlockCodeKind,
        k: usize,
        block_bytes: usize,
        id_space: usize,
        seed: u64,
    ) -> Result<BlockCode> {
        if k == 0 || block_bytes == 0 || id_space < k || id_space > u32::MAX as usize / 2 {
            return Err(CodeError::Params {
                code: "block code",
                got: format!("K={k}, block={block_bytes}, id space={id_space}"),
                rule: "needs K >= 1, a non-empty block and K <= id space < 2^31",
            });
        }
        let (inner, seed) = match &kind {
            BlockCodeKind::Lt { c, delta } => {
                let code = LtCode::new(LtParams {
                    k,
                    n: id_space,
                    block_size: block_bytes,
                    c: *c,
                    delta: *delta,
                    seed,
                })?;
                let used = code.seed();
                (Inner::Lt(Arc::new(code)), used)
            }
            BlockCodeKind::RaptorQ => {
                let symbol = block_bytes / SYMBOLS_PER_BLOCK;
                if !block_bytes.is_multiple_of(SYMBOLS_PER_BLOCK) || symbol > u16::MAX as usize {
                    return Err(CodeError::Params {
                        code: "RaptorQ",
                        got: format!("block {block_bytes} bytes"),
                        rule: "a block is 32 symbols: a multiple of 32 bytes, at most 32 x 65535",
                    });
                }
                if k * SYMBOLS_PER_BLOCK > MAX_SYMBOLS {
                    return Err(CodeError::Params {
                        code: "RaptorQ",
                        got: format!("K={k} blocks ({} symbols)", k * SYMBOLS_PER_BLOCK),
                        rule: "K x 32 symbols must fit RFC 6330's largest source block of 56403: K <= 1762",
                    });
                }
                if id_space * SYMBOLS_PER_BLOCK > MAX_ESI {
                    return Err(CodeError::Params {
                        code: "RaptorQ",
                        got: format!("id space {id_space}"),
                        rule: "encoding symbol ids are 24-bit: id space <= 524288 blocks",
                    });
                }
                let align = if symbol.is_multiple_of(8) { 8 } else { 1 };
                let config = ObjectTransmissionInformation::new(
                    (k * block_bytes) as u64,
                    symbol as u16,
                    1,
                    1,
                    align,
                );
                (Inner::RaptorQ { config }, seed)
            }
        };
        Ok(BlockCode {
            kind,
            k,
            block_bytes,
            id_space,
            seed,
            inner,
        })
    }

    pub fn kind(&self) -> &BlockCodeKind {
        &self.kind
    }
    /// Source blocks.
    pub fn k(&self) -> usize {
        self.k
    }
    pub fn block_bytes(&self) -> usize {
        self.block_bytes
    }
    /// Coded-block ids are `0..id_space()`.
    pub fn id_space(&self) -> usize {
        self.id_space
    }
    /// LT: the seed of the graph in use (may be past the one asked for). RaptorQ: the seed given.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The LT code underneath (its graph), if this is LT.
    pub fn lt(&self) -> Option<&LtCode> {
        match &self.inner {
            Inner::Lt(c) => Some(c),
            Inner::RaptorQ { .. } => None,
        }
    }

    fn object_len(&self) -> usize {
        self.k * self.block_bytes
    }

    fn check_id(&self, id: u32) -> Result<()> {
        if id as usize >= self.id_space {
            return Err(CodeError::BlockId {
                id,
                id_space: self.id_space,
            });
        }
        Ok(())
    }

    /// An encoder for `data` (at most K·block_bytes, zero-padded). The expensive setup happens here
    /// once (RaptorQ's intermediate symbols); every [`BlockEncoder::block`] after is cheap.
    pub fn encoder(&self, data: &[u8]) -> Result<BlockEncoder> {
        if data.len() > self.object_len() {
            return Err(CodeError::ObjectTooLarge {
                got: data.len(),
                max: self.object_len(),
            });
        }
        let mut padded = Vec::with_capacity(self.object_len());
        padded.extend_from_slice(data);
        padded.resize(self.object_len(), 0);
        let enc = match &self.inner {
            Inner::Lt(_) => None,
            Inner::RaptorQ { config } => Some(SourceBlockEncoder::new(0, config, &padded)),
        };
        Ok(BlockEncoder {
            code: self.clone(),
            padded,
            rq: enc,
        })
    }

    /// A decoder for one object.
    pub fn decoder(&self) -> BlockDecoder {
        let inner = match &self.inner {
            Inner::Lt(code) => DecoderInner::Lt(Box::new(LtDecoder::new(LtCode::clone(code)))),
            Inner::RaptorQ { config } => DecoderInner::RaptorQ {
                dec: Box::new(SourceBlockDecoder::new(0, config, self.object_len() as u64)),
                result: None,
            },
        };
        BlockDecoder {
            code: self.clone(),
            inner,
            received: 0,
        }
    }

    /// Would these coded blocks decode the object? A dry run on the ids alone (no data). LT peels the
    /// graph; RaptorQ, whose decodability depends only on the encoding symbol ids, decodes all-zero
    /// symbols of one byte with the same ids (exact: the solver's pivots depend on the matrix alone).
    /// Ids outside the id space and repeats add nothing.
    pub fn decodable(&self, ids: &[u32]) -> bool {
        let mut seen = vec![false; self.id_space];
        let mut distinct = Vec::with_capacity(ids.len());
        for &id in ids {
            if (id as usize) < self.id_space && !std::mem::replace(&mut seen[id as usize], true) {
                distinct.push(id);
            }
        }
        if distinct.len() < self.k {
            return false;
        }
        match &self.inner {
            Inner::Lt(code) => code.decodable(distinct.iter().map(|&i| i as usize)),
            Inner::RaptorQ { .. } => {
                if seen[..self.k].iter().all(|&s| s) {
                    return true;
                }
                let symbols = (self.k * SYMBOLS_PER_BLOCK) as u64;
                let config = ObjectTransmissionInformation::new(symbols, 1, 1, 1, 1);
                let mut dec = SourceBlockDecoder::new(0, &config, symbols);
                let packets = distinct.iter().flat_map(|&id| {
                    esis(id).map(|esi| EncodingPacket::new(PayloadId::new(0, esi), vec![0u8]))
                });
                dec.decode(packets).is_some()
            }
        }
    }

    /// The source blocks the byte range `range` of the object touches (clamped to `0..K`; empty for
    /// an empty range).
    pub fn source_blocks_of(&self, range: Range<u64>) -> Range<usize> {
        if range.start >= range.end {
            return 0..0;
        }
        let bs = self.block_bytes as u64;
        let first = (range.start / bs).min(self.k as u64) as usize;
        let end = range.end.div_ceil(bs).min(self.k as u64) as usize;
        first..end.max(first)
    }

    /// The coded blocks among `ids` that change when the source blocks `sources` change: what an
    /// update must regenerate. LT: those with a neighbour in `sources`. RaptorQ: every repair block
    /// (each depends on all source symbols) and the systematic blocks in `sources`. Ids outside the
    /// id space are left out.
    pub fn coded_using(&self, sources: Range<usize>, ids: &[u32]) -> Vec<u32> {
        if sources.is_empty() {
            return Vec::new();
        }
        let in_space = ids
            .iter()
            .copied()
            .filter(|&id| (id as usize) < self.id_space);
        match &self.inner {
            Inner::Lt(code) => {
                let g = code.graph();
                in_space
                    .filter(|&id| {
                        g.neighbours(id as usize)
                            .iter()
                            .any(|&s| sources.contains(&(s as usize)))
                    })
                    .collect()
            }
            Inner::RaptorQ { .. } => in_space
                .filter(|&id| id as usize >= self.k || sources.contains(&(id as usize)))
                .collect(),
        }
    }
}

/// The 32 encoding symbol ids of RaptorQ coded block `id`.
fn esis(id: u32) -> Range<u32> {
    let first = id * SYMBOLS_PER_BLOCK as u32;
    first..first + SYMBOLS_PER_BLOCK as u32
}

/// Produces coded blocks of one object by id. `Send + Sync`: one encoder can serve many threads.
pub struct BlockEncoder {
    code: BlockCode,
    padded: Vec<u8>,
    rq: Option<SourceBlockEncoder>,
}

impl BlockEncoder {
    /// Coded block `id` (any id in the id space, any order): `block_bytes` bytes.
    pub fn block(&self, id: u32) -> Result<Vec<u8>> {
        self.code.check_id(id)?;
        let bs = self.code.block_bytes;
        let idx = id as usize;
        match (&self.code.inner, &self.rq) {
            (Inner::Lt(code), _) => {
                let mut out = vec![0u8; bs];
                code.encode_block(&self.padded, idx, &mut out)?;
                Ok(out)
            }
            (Inner::RaptorQ { .. }, Some(enc)) => {
                if idx < self.code.k {
                    return Ok(self.padded[idx * bs..(idx + 1) * bs].to_vec());
                }
                let k_symbols = (self.code.k * SYMBOLS_PER_BLOCK) as u32;
                let mut out = Vec::with_capacity(bs);
                for p in enc.repair_packets(esis(id).start - k_symbols, SYMBOLS_PER_BLOCK as u32) {
                    out.extend_from_slice(p.data());
                }
                Ok(out)
            }
            (Inner::RaptorQ { .. }, None) => unreachable!("a RaptorQ encoder is built with one"),
        }
    }
}

enum DecoderInner {
    Lt(Box<LtDecoder>),
    RaptorQ {
        dec: Box<SourceBlockDecoder>,
        result: Option<Vec<u8>>,
    },
}

/// Takes coded blocks in any order until the object decodes.
pub struct BlockDecoder {
    code: BlockCode,
    inner: DecoderInner,
    received: usize,
}

impl BlockDecoder {
    /// Add coded block `id`; true once the object can be returned. Repeats are taken and ignored.
    pub fn push(&mut self, id: u32, data: Vec<u8>) -> Result<bool> {
        self.code.check_id(id)?;
        if data.len() != self.code.block_bytes {
            return Err(CodeError::ShardSize {
                what: "coded block",
                index: id as usize,
                got: data.len(),
                want: self.code.block_bytes,
            });
        }
        self.received += 1;
        match &mut self.inner {
            DecoderInner::Lt(dec) => dec.push_block(id as usize, data),
            DecoderInner::RaptorQ { dec, result } => {
                if result.is_none() {
                    let sym = self.code.block_bytes / SYMBOLS_PER_BLOCK;
                    let packets = esis(id)
                        .zip(data.chunks_exact(sym))
                        .map(|(esi, s)| EncodingPacket::new(PayloadId::new(0, esi), s.to_vec()));
                    *result = dec.decode(packets);
                }
                Ok(result.is_some())
            }
        }
    }

    pub fn is_complete(&self) -> bool {
        match &self.inner {
            DecoderInner::Lt(dec) => crate::RatelessDecoder::is_complete(dec.as_ref()),
            DecoderInner::RaptorQ { result, .. } => result.is_some(),
        }
    }

    /// Blocks pushed so far (repeats included).
    pub fn received(&self) -> usize {
        self.received
    }

    /// The object, K·block_bytes bytes; an error if not complete.
    pub fn finish(self) -> Result<Vec<u8>> {
        match self.inner {
            DecoderInner::Lt(dec) => {
                crate::RatelessDecoder::finish(dec as Box<dyn crate::RatelessDecoder>)
            }
            DecoderInner::RaptorQ { result, .. } => result.ok_or(CodeError::Incomplete {
                code: "RaptorQ",
                decoded: 0,
                k: self.code.k,
                received: self.received,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_send<T: Send>() {}

    #[test]
    fn thread_safety() {
        assert_send_sync::<BlockCode>();
        // One encoder can serve every OSD stream of a write at once (`Arc<BlockEncoder>`).
        assert_send_sync::<BlockEncoder>();
        assert_send::<BlockDecoder>();
    }
}
