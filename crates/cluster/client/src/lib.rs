//! The CodFS client library: files split into segments; metadata from the MDS, data through each
//! segment's primary OSD, with deadlines, retries with backoff and re-fetching a segment's layout
//! after a primary promotion. The FUSE mount and RobuSTore build on this crate. It uses the MDS and
//! OSD protocols through their typed clients, never their internals.
//!
//! Layout (dependencies point down): `error` → `segments` (file ranges → segment pieces) →
//! `window` (a put's or a get's bytes in transit) → `client`
//! ([`Client`]) → `ns` (the POSIX namespace calls and a mount's segment calls) and `cache` (the
//! mount's LRU segment cache, CodFS §4.4.4). It depends on the protocol crates `ecstack_mds_proto` and `ecstack_osd_proto`
//! only: a client links neither server (no SQLite, no chunk store). A cluster of local processes
//! (`ecstack cluster up`, `ecstack demo`, tests) is `ecstack_lab::codfs_local`.

#![forbid(unsafe_code)]

pub mod cache;
mod client;
mod error;
mod ns;
pub mod robust;
pub mod segments;
mod window;

pub use window::{Leg, Transit};

/// The frames [`Client::read_frames`] returns.
pub use bytes::Bytes;
pub use cache::{CacheStats, SegmentCache};
pub use client::{
    summary, Client, ClientOptions, FailedAttempts, FileHandle, PutOptions, ReadPath, ReadStats,
};
pub use ecstack_mds_proto::{
    Attr, DirEntry, Errno, FileInfo, FileKind, FsStats, MdsError, RenameFlags, SegmentLayout,
    SetAttr, SetTime, UpdateScheme, MAX_SEGMENTS_PER_FILE, ROOT_INO,
};
pub use ecstack_osd_proto::OsdCallError;
pub use error::ClientError;
