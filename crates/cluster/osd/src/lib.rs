//! The CodFS object storage daemon (thesis §4.3): a `ChunkStore` of chunk files, the primary OSD's
//! work (encode a segment, keep one data chunk, send n−1 to the secondaries; read; split updates
//! into sub-updates), full-overwrite (FO) parity-delta updates, degraded reads and recovery.
//!
//! Layout (dependencies point down): the protocol crates `ecstack_mds_proto` and
//! `ecstack_osd_proto` (re-exported as [`api`]: generated messages, chunk data on the wire without
//! copies, the typed clients [`api::OsdClient`] and `MdsClient`, the domain types; shared with
//! clients, which link none of this crate) → `chunk_store` (the
//! `ChunkStore` seam: `FileStore`, chunk files with versioned headers, per-block crc32c and logged
//! changes, and `device_store`, the same on one block device with an extent allocator) →
//! `service` (the [`service::Osd`] type and what its operations share) with one module per
//! operation, each over the domain error [`OsdError`] (`error`): `write`, `read` and `pipeline`
//! (the pipelined read), `degraded` (the ordinary and degraded read, repair), [`update`] (one file
//! per update scheme behind [`update::Scheme`]: `fo`, `fl`, `codfs_pl`, `plr`; the delta flow they
//! share in `update/flow.rs`), `recover`, `delete`, `chunk` (PutChunk,
//! GetChunk, ChunkVersion at a holder), over `holder` (one holder's chunk, local or remote) and
//! `segment` (the primary's per-segment lock and view, `view`) → `handlers` (the gRPC handlers:
//! requests decoded, [`OsdError`] mapped to status codes) → `server` (the gRPC service a daemon
//! mounts: the generated one, with the chunk-data replies sent through `wire`) → `daemon` (the
//! process: register with the MDS, heartbeat, run recovery and delete tasks, and `monitor`, the
//! Monitor Module: GC of logs and Algorithm 1 on reserves); `lease` (a primary
//! acts only while the MDS cannot have declared it down); `roles` (which certificate role may call
//! which RPC, checked where the daemon builds its server).

pub use ecstack_osd_proto as api;
use ecstack_osd_proto::{proto, wire};

pub mod admission;
pub mod blockio;
mod chunk;
pub mod chunk_store;
#[doc(hidden)]
pub mod chunk_store_suite;
pub mod daemon;
mod degraded;
mod delete;
pub mod device_store;
pub mod error;
mod handlers;
mod holder;
pub mod lease;
pub mod metrics;
pub mod monitor;
mod pipeline;
mod read;
mod recover;
mod robust;
pub mod roles;
mod segment;
pub mod server;
pub mod service;
pub mod store_dir;
pub mod update;
mod view;
mod write;

pub use ecstack_osd_proto::{
    Ack, ChunkMeta, ChunkVersions, DeltaStamp, Holder, Layout, OsdCallError, OsdClient, SegmentAge,
};
pub use ecstack_rpc::UpdateScheme;
pub use error::OsdError;

#[cfg(test)]
mod fuzz;
