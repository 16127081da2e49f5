//! The CodFS metadata server (thesis §4.2): the namespace of files → segments, per segment its
//! primary OSD and the OSD of each of its n chunks, the OSD registry and its health.
//!
//! Layout (dependencies point down): the protocol crate `ecstack_mds_proto` (generated messages,
//! domain types and the typed client, shared with OSDs and clients) → `store` (the `MetadataStore` trait and its SQLite
//! engine; `store_sql`, the store over any SQL engine; `store_pg`, the PostgreSQL engine) → `placement`, `orphans` (OSDs' inventories and the orphan rule) → `engine` (the MDS logic on an injectable clock) → `service`
//! (the gRPC server, failure detector task and metrics).

#![forbid(unsafe_code)]

pub mod backup;
pub mod engine;
pub mod lease;
pub mod orphans;
pub mod placement;
pub mod service;
pub mod standby;
pub mod store;
pub mod store_pg;
pub mod store_robust;
pub mod store_sql;

#[cfg(test)]
mod engine_tests;
#[cfg(test)]
mod inventory_tests;
#[cfg(test)]
mod store_suite;

pub use ecstack_mds_proto::{
    Attr, ChunkPlacement, ChunkState, ClusterParams, ClusterStatus, DeleteTask, DirEntry, Errno,
    FileInfo, FileKind, FileSummary, FsStats, Heartbeat, HeartbeatReply, HeldSegment,
    InventoryPage, MdsClient, MdsError, OrphanCounts, OsdInfo, OsdRegistration, OsdState, OsdTask,
    RecoverTask, RecoveryProgress, Registered, RenameFlags, SegmentLayout, SetAttr, SetTime,
    UpdateScheme,
};
pub use ecstack_mds_proto::{
    BlockPlacement, DeleteObjectTask, OsdLoad, RobustBlockKey, RobustCode, RobustInfo,
    RobustObject, RobustParams, RobustUpdate,
};
