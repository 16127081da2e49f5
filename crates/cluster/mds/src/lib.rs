//! The CodFS metadata server (thesis §4.2): the namespace of files → segments, per segment its
//! primary OSD and the OSD of each of its n chunks, the OSD registry and its health.
//!
//! Layout (dependencies point down): `proto` (generated, private) → `store` (the `MetadataStore`
//! trait and its SQLite implementation) → `placement` → `service` (the gRPC server); `api` is the
//! typed client other crates use (OSDs and the client library), with domain types only.

#[allow(clippy::all)]
mod proto {
    tonic::include_proto!("ecstack.mds.v1");
}

pub mod api;

pub use api::{
    ChunkPlacement, ChunkState, ClusterParams, ClusterStatus, DeleteTask, FileInfo, FileSummary,
    Heartbeat, HeartbeatReply, MdsClient, MdsError, OsdInfo, OsdRegistration, OsdState, OsdTask,
    RecoverTask, RecoveryProgress, Registered, SegmentLayout,
};
