//! RFC 6330 RaptorQ through the `raptorq` crate: the production rateless code, behind the same
//! `RatelessCode` trait as the LT code. One object is one source block of K symbols.

use crate::rateless::{Packet, RatelessCode, RatelessDecoder};
use crate::{CodeError, Result};
use raptorq::{
    EncodingPacket, ObjectTransmissionInformation, PayloadId, SourceBlockDecoder,
    SourceBlockEncoder,
};

/// RaptorQ for objects of `k` symbols of `symbol_size` bytes (symbols are at most 65,535 bytes).
#[derive(Clone, Debug)]
pub struct RaptorQ {
    k: usize,
    symbol_size: u16,
    config: ObjectTransmissionInformation,
}

/// RFC 6330's largest source block.
pub const MAX_SYMBOLS: usize = 56_403;

impl RaptorQ {
    pub fn new(k: usize, symbol_size: usize) -> Result<RaptorQ> {
        if k == 0 || k > MAX_SYMBOLS {
            return Err(CodeError::Params {
                code: "RaptorQ",
                got: format!("K={k}"),
                rule: "needs 1 <= K <= 56403 (RFC 6330's largest source block)",
            });
        }
        if symbol_size == 0 || symbol_size > u16::MAX as usize {
            return Err(CodeError::Params {
                code: "RaptorQ",
                got: format!("symbol size {symbol_size}"),
                rule: "symbols are 1..=65535 bytes",
            });
        }
        let align = if symbol_size.is_multiple_of(8) { 8 } else { 1 };
        let len = (k * symbol_size) as u64;
        let config = ObjectTransmissionInformation::new(len, symbol_size as u16, 1, 1, align);
        Ok(RaptorQ {
            k,
            symbol_size: symbol_size as u16,
            config,
        })
    }

    fn object_len(&self) -> usize {
        self.k * self.symbol_size as usize
    }
}

impl RatelessCode for RaptorQ {
    fn name(&self) -> &'static str {
        "raptorq"
    }
    fn source_blocks(&self) -> usize {
        self.k
    }
    fn encode(&self, data: &[u8], count: usize) -> Result<Vec<Packet>> {
        if data.len() > self.object_len() {
            return Err(CodeError::ObjectTooLarge {
                got: data.len(),
                max: self.object_len(),
            });
        }
        let mut padded = data.to_vec();
        padded.resize(self.object_len(), 0);
        let enc = SourceBlockEncoder::new(0, &self.config, &padded);
        let mut out: Vec<Packet> = enc
            .source_packets()
            .into_iter()
            .take(count)
            .map(|p| {
                let (id, data) = p.split();
                Packet {
                    id: id.encoding_symbol_id(),
                    data,
                }
            })
            .collect();
        if count > self.k {
            out.extend(
                enc.repair_packets(0, (count - self.k) as u32)
                    .into_iter()
                    .map(|p| {
                        let (id, data) = p.split();
                        Packet {
                            id: id.encoding_symbol_id(),
                            data,
                        }
                    }),
            );
        }
        Ok(out)
    }
    fn decoder(&self) -> Box<dyn RatelessDecoder> {
        Box::new(RaptorQDecoder {
            dec: SourceBlockDecoder::new(0, &self.config, self.object_len() as u64),
            k: self.k,
            symbol_size: self.symbol_size as usize,
            result: None,
            received: 0,
        })
    }
}

pub struct RaptorQDecoder {
    dec: SourceBlockDecoder,
    k: usize,
    symbol_size: usize,
    result: Option<Vec<u8>>,
    received: usize,
}

impl RatelessDecoder for RaptorQDecoder {
    fn push(&mut self, packet: &Packet) -> Result<bool> {
        if packet.data.len() != self.symbol_size {
            return Err(CodeError::ShardSize {
                what: "packet",
                index: packet.id as usize,
                got: packet.data.len(),
                want: self.symbol_size,
            });
        }
        if packet.id >= (1 << 24) {
            return Err(CodeError::IndexOutOfRange {
                index: packet.id as usize,
                n: 1 << 24,
            });
        }
        self.received += 1;
        if self.result.is_none() {
            let p = EncodingPacket::new(PayloadId::new(0, packet.id), packet.data.clone());
            self.result = self.dec.decode(std::iter::once(p));
        }
        Ok(self.result.is_some())
    }
    fn is_complete(&self) -> bool {
        self.result.is_some()
    }
    fn received(&self) -> usize {
        self.received
    }
    fn finish(self: Box<Self>) -> Result<Vec<u8>> {
        // RaptorQ decodes all at once, so until then no source symbol counts as known.
        self.result.ok_or(CodeError::Incomplete {
            code: "RaptorQ",
            decoded: 0,
            k: self.k,
            received: self.received,
        })
    }
}
