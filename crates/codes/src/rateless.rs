//! The rateless-code seam: an encoder emits as many encoded packets as asked, a decoder takes packets in
//! any order until it can return the data. RobuSTore reads "all then cancel": any sufficiently large
//! subset of packets decodes.
//!
//! ```
//! use ecstack_codes::{LtCode, LtParams, RaptorQ, RatelessCode};
//! let object: Vec<u8> = (0..64 * 32).map(|i| i as u8).collect();
//! let lt = LtCode::new(LtParams::new(64, 160, 32)).unwrap(); // K = 64 blocks of 32 bytes, N = 160
//! let rq = RaptorQ::new(64, 32).unwrap();
//! for code in [&lt as &dyn RatelessCode, &rq] {
//!     let mut packets = code.encode(&object, 160).unwrap();
//!     packets.reverse(); // any order, and the first ones lost
//!     packets.truncate(120);
//!     let mut dec = code.decoder();
//!     for p in &packets {
//!         if dec.push(p).unwrap() {
//!             break;
//!         }
//!     }
//!     assert!(dec.received() <= 120);
//!     assert_eq!(dec.finish().unwrap(), object);
//! }
//! ```

use crate::Result;

/// One encoded block with the identifier the decoder needs to place it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub id: u32,
    pub data: Vec<u8>,
}

/// A rateless (fountain) code configured for one object. Packets carry no checksum: whoever delivers
/// them guarantees their contents (a corrupt packet decodes to a wrong object).
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
