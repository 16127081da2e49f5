//! The CodFS object storage daemon (thesis §4.3): a `ChunkStore` of chunk files, the primary OSD's
//! work (encode a segment, keep one data chunk, send n−1 to the secondaries; read; split updates
//! into sub-updates), full-overwrite (FO) parity-delta updates, degraded reads and recovery.
//!
//! Layout (dependencies point down): `proto` (generated, private) → `api` (the typed client
//! [`api::OsdClient`] and domain types, what other crates use).

#[allow(clippy::all)]
mod proto {
    tonic::include_proto!("ecstack.osd.v1");
}

pub mod api;

pub use api::{Ack, ChunkMeta, Holder, Layout, OsdClient, OsdError};
