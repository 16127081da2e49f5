//! The cluster's transport layer: what every process of the CodFS cluster shares below its own
//! protocol. It knows no chunks, segments or files.
//!
//! - [`config`]: the cluster's TOML config (`cluster.toml`), validated on load.
//! - [`security`]: mutual TLS for every gRPC connection (or loudly insecure, for loopback experiments).
//!
//! The MDS and the OSD each own their `.proto` service (crates `ecstack-mds`, `ecstack-osd`); this
//! crate only builds the servers and channels that carry them.

pub mod config;
pub mod security;

pub use config::{ClusterConfig, CodeConfig, ConfigError, MdsConfig, PlacementConfig};
pub use security::{Security, SecurityError, CLUSTER_DNS_NAME};
