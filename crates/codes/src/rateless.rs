//! The rateless-code seam: an encoder emits as many encoded packets as asked, a decoder takes packets in
//! any order until it can return the data. RobuSTore reads "all then cancel": any sufficiently large
//! subset of packets decodes.

use crate::Result;

/// One encoded block with the identifier the decoder needs to place it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub id: u32,
    pub data: Vec<u8>,
}

/// A rateless (fountain) code configured for one object.
pub trait RatelessCode: Send + Sync {
    fn name(&self) -> &'static str;
    /// Number of source blocks the object is split into.
    fn source_blocks(&self) -> usize;
    /// Encode `data` (at most the configured object length) into `count` packets.
    fn encode(&self, data: &[u8], count: usize) -> Result<Vec<Packet>>;
    /// A fresh decoder for one object of the configured length.
    fn decoder(&self) -> Box<dyn RatelessDecoder>;
}

/// Receives packets in any order.
pub trait RatelessDecoder {
    /// Add a packet; returns true once the whole object can be returned.
    fn push(&mut self, packet: &Packet) -> Result<bool>;
    fn is_complete(&self) -> bool;
    /// Packets taken so far (including redundant ones).
    fn received(&self) -> usize;
    /// The decoded object; an error if not complete.
    fn finish(self: Box<Self>) -> Result<Vec<u8>>;
}
