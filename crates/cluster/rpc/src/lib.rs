//! The cluster's transport layer: what every process of the CodFS cluster shares below its own
//! protocol. It knows no chunks, segments or files.
//!
//! - [`config`]: the cluster's TOML config (`cluster.toml`), validated on load.
//! - [`init`]: `ecstack cluster init` / `cluster cert`: cluster id, certificate authority, one
//!   certificate per process, `cluster.toml`.
//! - [`security`]: mutual TLS for every gRPC connection (or loudly insecure, for loopback experiments).
//! - [`limits`]: message sizes, deadlines and HTTP/2 windows.
//! - [`metrics`]: counters, gauges, latency histograms; Prometheus text on `GET /metrics`.
//! - [`retry`]: bounded retries with backoff and jitter; which gRPC failures are transient.
//! - [`roles`]: the role in each certificate (mds, osd, client, admin) and the guard that checks
//!   it on every RPC against the service's table.
//!
//! The MDS and the OSD each own their `.proto` service (crates `ecstack-mds`, `ecstack-osd`); this
//! crate only builds the servers and channels that carry them.

#![forbid(unsafe_code)]

pub mod config;
pub mod init;
pub mod limits;
pub mod metrics;
pub mod retry;
pub mod roles;
pub mod scheme;
pub mod security;

pub use config::{
    ClusterConfig, CodeConfig, ConfigError, MdsConfig, MdsStore, OsdConfig, PlacementConfig,
    ReserveConfig, ShrinkSchedule, UpdateConfig,
};
pub use init::{init_cluster, issue_certificate, InitError, InitOptions};
pub use metrics::{serve_metrics, serve_registry, Registry};
pub use retry::{
    handshake_refusal, is_refusal, is_transient, retry, retry_with_progress, status_detail, Backoff,
};
pub use roles::{Role, RoleGuard, RoleTable};
pub use scheme::UpdateScheme;
pub use security::{Security, SecurityError, CLUSTER_DNS_NAME};
