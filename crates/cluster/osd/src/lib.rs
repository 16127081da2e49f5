//! The CodFS object storage daemon (thesis §4.3): a `ChunkStore` of chunk files, the primary OSD's
//! work (encode a segment, keep one data chunk, send n−1 to the secondaries; read; split updates
//! into sub-updates), full-overwrite (FO) parity-delta updates, degraded reads and recovery.
//!
//! Layout (dependencies point down): `proto` (generated, private) → `wire` (chunk data on the gRPC
//! wire without copies: a streamed reply's data kept as the slices it arrived in, sent from the
//! buffer it was read into) → `api` (the typed client [`api::OsdClient`] and domain types, what
//! other crates use) → `chunk_store` (the `ChunkStore` seam and `FileStore`, chunk files with
//! versioned headers and per-block crc32c) → `service` (the OSD service: primary work, chunk calls,
//! recovery) → `server` (the gRPC service a daemon mounts: the generated one, with the chunk-data
//! replies sent through `wire`) → `daemon` (the process: register with the MDS, heartbeat, run
//! recovery and delete tasks); `lease` (a primary acts only while the MDS cannot have declared it
//! down).

#[allow(clippy::all)]
mod proto {
    tonic::include_proto!("ecstack.osd.v1");
}

pub mod api;
pub mod chunk_store;
#[doc(hidden)]
pub mod chunk_store_suite;
pub mod daemon;
pub mod lease;
pub mod metrics;
pub mod server;
pub mod service;
pub mod store_dir;
mod view;
mod wire;

pub use api::{Ack, ChunkMeta, ChunkVersions, DeltaStamp, Holder, Layout, OsdClient, OsdError};

#[cfg(test)]
mod fuzz;
