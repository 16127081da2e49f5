//! The CodFS metadata server (thesis §4.2): the namespace of files → segments, per segment its
//! primary OSD and the OSD of each of its n chunks, the OSD registry and its health.
//!
//! Layout (dependencies point down): `api` (domain types and the typed client other crates use,
//! over the private generated `proto`) → `store` (the `MetadataStore` trait and its SQLite
//! implementation) → `placement` → `engine` (the MDS logic on an injectable clock) → `service`
//! (the gRPC server, failure detector task and metrics).

#![forbid(unsafe_code)]

#[allow(clippy::all)]
mod proto {
    tonic::include_proto!("ecstack.mds.v1");
}

pub mod api;
pub mod engine;
pub mod placement;
pub mod service;
pub mod store;

#[cfg(test)]
mod engine_tests;
#[cfg(test)]
mod store_suite;

pub use api::{
    ChunkPlacement, ChunkState, ClusterParams, ClusterStatus, DeleteTask, FileInfo, FileSummary,
    Heartbeat, HeartbeatReply, MdsClient, MdsError, OsdInfo, OsdRegistration, OsdState, OsdTask,
    RecoverTask, RecoveryProgress, Registered, SegmentLayout,
};
