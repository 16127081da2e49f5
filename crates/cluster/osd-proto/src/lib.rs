//! The CodFS object storage daemon's protocol (`proto/osd.proto`): what OSDs and clients share,
//! so that a client links no OSD (and no MDS) internals.
//!
//! Layout (dependencies point down): [`proto`] (the generated messages and service;
//! `proto::osd_server::Osd` is what an OSD implements) → [`wire`] (chunk data on the gRPC wire
//! without copies, both ends: a streamed reply's data kept as the slices it arrived in, sent from
//! the buffer it was read into) → `api` (the domain types [`Layout`], [`Holder`], [`ChunkMeta`],
//! [`Ack`], the typed client [`OsdClient`] and its error [`OsdCallError`], the OSD's view of an
//! MDS [`ecstack_mds_proto::SegmentLayout`]) and `blocks` (a robust object's coded blocks:
//! [`OsdClient::put_blocks`], [`OsdClient::get_blocks`], [`OsdClient::delete_blocks`]).

#![forbid(unsafe_code)]

#[allow(clippy::all)]
pub mod proto {
    tonic::include_proto!("ecstack.osd.v1");
}

mod api;
mod blocks;
pub mod wire;

pub use api::*;
pub use blocks::*;
