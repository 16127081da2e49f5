//! A key-value store on any [`BlockDevice`] (normally an erasure-coded `Array`), after EPLOG §4
//! (`../shared/seeds/eplog-paper.txt`), and the RESP2 server that lets Redis clients use it.
//!
//! * **Records** ([`record`]): the seed's 5 bytes of metadata (1-byte key size, 4-byte value size) in a
//!   24-byte header with a magic, a sequence number and a CRC32C, then the key, then the value; small
//!   records are packed several to a chunk (format version 3), larger ones start on a chunk
//!   boundary and have whole chunks. The byte layout is in `docs/kv.md`.
//! * **Object location table** ([`CuckooTable`]): cuckoo hashing, two candidate buckets of four
//!   entries; an entry holds a 16-bit fingerprint of the key and the record's logical address (byte
//!   address). A lookup resolves fingerprint collisions by reading the key from storage; relocation finds
//!   an evicted entry's other bucket from its fingerprint alone (partial-key cuckoo hashing).
//! * **Object metadata cache** ([`ArcCache`]): key, sizes and address of recently used pairs, with ARC
//!   replacement (Megiddo & Modha, FAST 2003), indexed by a cuckoo table of its own.
//! * **Store** ([`KvStore`]): SET / GET / UPDATE / DELETE / EXISTS, out-of-place writes with free-space
//!   reuse, durability per [`Durability`] (`always`: acknowledged when flushed; `everysec`: flushed by
//!   a background syncer), reopen by scanning the records.
//! * **Server** ([`server`]): RESP2 over TCP (tokio), pipelining, many connections, AUTH; [`resp`] is
//!   the protocol parser.
//!
//! ```
//! use std::sync::Arc;
//! use ecstack_device::{BlockDevice, MemDevice};
//! use ecstack_kv::{KvConfig, KvStore};
//! let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(1 << 20).unwrap());
//! let kv = KvStore::create(Arc::clone(&dev), &KvConfig::default()).unwrap();
//! kv.set(b"user:1", b"alice").unwrap();
//! assert_eq!(kv.get(b"user:1").unwrap().as_deref(), Some(&b"alice"[..]));
//! drop(kv);
//! let kv = KvStore::open(dev, &KvConfig::default()).unwrap(); // rebuilt by scanning the records
//! assert!(kv.exists(b"user:1").unwrap());
//! ```

#![forbid(unsafe_code)]

mod alloc;
mod arc;
mod cuckoo;
pub mod hash;
pub mod record;
pub mod resp;
pub mod server;
mod store;

pub use arc::{ArcCache, Lookup};
pub use cuckoo::{key_hash, CuckooTable, VALUE_MAX as TABLE_VALUE_MAX};
pub use ecstack_device::BlockDevice;
pub use store::{Durability, KvConfig, KvStats, KvStore, SetCondition};

/// Errors of the key-value store: each one line that names the problem.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    #[error(transparent)]
    Device(#[from] ecstack_device::DeviceError),
    #[error("key of {0} bytes: keys are 1..=255 bytes (the record keeps a 1-byte key size)")]
    KeySize(usize),
    #[error("value of {got} bytes exceeds the limit of {max} bytes")]
    ValueSize { got: usize, max: usize },
    #[error("no space: {0}")]
    NoSpace(String),
    #[error("not a key-value store: {0}")]
    NotAStore(String),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("sorted-set key and member of {0} bytes together: at most 254 (a member's record key is 1 + key + member bytes, at most 255)")]
    MemberSize(usize),
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("corrupt record at chunk {chunk}: {why}")]
    Corrupt { chunk: u64, why: String },
}

pub type Result<T> = std::result::Result<T, KvError>;
