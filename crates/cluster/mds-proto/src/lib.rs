//! The CodFS metadata server's protocol (`proto/mds.proto`): what the MDS, the OSDs and clients
//! share, so that none of them depends on another's internals.
//!
//! - [`proto`]: the generated messages and service (`proto::mds_server::Mds` is what the MDS
//!   implements). Other crates use it only to serve the protocol; callers use the domain types.
//! - `api`: the domain types ([`SegmentLayout`], [`FileInfo`], [`OsdState`], …), their conversion
//!   from and to the wire (a malformed message is [`MdsError::Protocol`]), the error type
//!   [`MdsError`] with its mapping to and from status codes, and the typed client [`MdsClient`].

#![forbid(unsafe_code)]

#[allow(clippy::all)]
pub mod proto {
    tonic::include_proto!("ecstack.mds.v1");
}

mod api;
mod failover;
mod ns;
mod robust;

pub use api::*;
pub use ecstack_rpc::UpdateScheme;
pub use failover::FailoverChannel;
pub use ns::*;
pub use robust::*;
