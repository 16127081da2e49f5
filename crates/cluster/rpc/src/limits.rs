//! Message sizes, deadlines and HTTP/2 windows every cluster process applies, in one place so that a
//! sender never builds a message its receiver refuses.
//!
//! tonic limits message sizes per service (`max_decoding_message_size` /
//! `max_encoding_message_size` on the generated server and client), not per method, so each
//! service takes the limit of its largest message and streamed RPCs keep their frames small:
//!
//! | what | limit |
//! |---|---|
//! | data bytes in one streamed frame (`WriteSegment`, `PutChunk`, `ReadSegment`, `GetChunk`) | [`FRAME_DATA_BYTES`] = 1 MiB |
//! | one streamed message, frame plus header, as the receiver checks it | [`STREAM_MESSAGE_BYTES_MAX`] = 4 MiB |
//! | one unary message (a whole 64 MiB segment update plus its header) | [`UNARY_MESSAGE_BYTES_MAX`] = 80 MiB |
//! | any MDS message (metadata only) | [`MDS_MESSAGE_BYTES_MAX`] = 16 MiB |
//! | any OSD message (unary updates carry data) | [`OSD_MESSAGE_BYTES_MAX`] = 80 MiB |

use std::time::Duration;

use crate::config::MAX_SEGMENT_BYTES;

/// Data bytes a sender puts in one streamed frame.
pub const FRAME_DATA_BYTES: usize = 1 << 20;
/// The largest streamed message a receiver accepts: one frame of [`FRAME_DATA_BYTES`] plus its
/// header, with room to spare for a sender that chose bigger frames.
pub const STREAM_MESSAGE_BYTES_MAX: usize = 4 << 20;
/// The largest unary message: a whole segment ([`MAX_SEGMENT_BYTES`] = 64 MiB) in one update,
/// plus 16 MiB for its header and encoding.
pub const UNARY_MESSAGE_BYTES_MAX: usize = MAX_SEGMENT_BYTES as usize + (16 << 20);
/// Every message of the MDS service (layouts, listings, heartbeats; never file data).
pub const MDS_MESSAGE_BYTES_MAX: usize = 16 << 20;
/// Every message of the OSD service: its unary updates (`UpdateSegment`, `UpdateChunk`,
/// `ApplyDelta`) can carry up to a whole segment.
pub const OSD_MESSAGE_BYTES_MAX: usize = UNARY_MESSAGE_BYTES_MAX;

/// How long a channel waits for a TCP + TLS connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Deadline of one metadata RPC (MDS calls, heartbeats, small OSD calls).
pub const METADATA_RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// Deadline of one data RPC (a whole segment streamed, encoded and stored, or read back).
pub const DATA_RPC_TIMEOUT: Duration = Duration::from_secs(120);
/// Deadline of an OSD's call to a peer OSD, up to its response's headers. A primary's forward of a
/// data chunk stays open while the client's segment arrives, and the client bounds its call by
/// progress (no byte for `DATA_RPC_TIMEOUT`), not by its length: with 40 segments of 64 MiB in
/// flight over 8 OSDs on 100 Mbit/s links a forward lasted over 120 s when every client started at
/// once, and at a 120 s deadline the primary stored those segments with a chunk missing (recovery
/// then rebuilt them, holding their locks, while reads waited). A peer that dies or stops answering
/// is dropped sooner by the HTTP/2 keep-alive (`KEEPALIVE_TIMEOUT`).
pub const PEER_RPC_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a primary waits for the next part of a chunk read from a peer (`GetChunk`: its
/// headers, then each message of at most [`FRAME_DATA_BYTES`]) before it reads those bytes another
/// way (from the other holders, decoded). A megabyte has no reason to take this long even on a
/// saturated 100 Mbit/s link (a primary asks each holder for at most a few pieces of a read at
/// once), and a fetch that waited as long as [`PEER_RPC_TIMEOUT`] outlived its client's idle
/// deadline: a 480 s read of the model experiment had attempts fail with "no byte moved for
/// 120000 ms" instead of falling back to a degraded read. Twice this leaves the fallback time
/// within [`DATA_RPC_TIMEOUT`]; a dead peer is dropped sooner by the keep-alive.
pub const PEER_FETCH_IDLE: Duration = Duration::from_secs(45);

/// HTTP/2 flow-control windows: the defaults (64 KiB) throttle megabyte frames on fast links.
pub const STREAM_WINDOW_BYTES: u32 = 4 << 20;
pub const CONNECTION_WINDOW_BYTES: u32 = 16 << 20;
/// The largest HTTP/2 frame a peer may send us (the protocol's default is 16 KiB). With 16 KiB frames
/// every frame became one TLS record and one `writev`, and loopback TCP handled one 16 KiB packet per
/// call: per-call and per-packet kernel work was a large share of a get's CPU. With 64 KiB frames a
/// sender hands TLS 64 KiB at a time, so each `writev` carries four records and TCP moves 64 KiB
/// packets. Larger frames gain nothing more (rustls buffers at most 64 KiB of records before they
/// are written) and hold a connection's other streams back longer: a 1 MiB frame is 84 ms of a
/// 100 Mbit/s link.
pub const FRAME_BYTES_MAX: u32 = 64 << 10;
/// HTTP/2 keep-alive pings: a peer that does not answer within the timeout is dropped, so a call
/// to a dead (not cleanly closed) process or across a broken link fails instead of hanging until
/// its deadline (a killed process is noticed at once anyway: its kernel resets the connection).
///
/// The answer to a ping queues behind the data already in the peer's socket buffer (up to
/// `tcp_wmem`'s 4 MiB) and its HTTP/2 send buffer, drained at the connection's share of a
/// saturated link: with ten connections on a 100 Mbit/s link that is ≈ 3–7 s. A 5 s timeout
/// dropped healthy connections under load (every stream on them failed with "http2 error"), so
/// the timeout is 20 s.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

// The limits nest; checked when the crate compiles.
const _: () = {
    assert!(FRAME_DATA_BYTES * 2 <= STREAM_MESSAGE_BYTES_MAX);
    // HTTP/2 allows frames of 16 KiB to 16 MiB - 1; a frame no larger than a stream window.
    assert!(FRAME_BYTES_MAX >= 1 << 14 && FRAME_BYTES_MAX < 1 << 24);
    assert!(FRAME_BYTES_MAX <= STREAM_WINDOW_BYTES);
    assert!(STREAM_MESSAGE_BYTES_MAX <= MDS_MESSAGE_BYTES_MAX);
    assert!(MAX_SEGMENT_BYTES as usize + (1 << 20) <= UNARY_MESSAGE_BYTES_MAX);
    assert!(OSD_MESSAGE_BYTES_MAX >= UNARY_MESSAGE_BYTES_MAX);
    assert!(CONNECT_TIMEOUT.as_millis() < METADATA_RPC_TIMEOUT.as_millis());
    assert!(METADATA_RPC_TIMEOUT.as_millis() < DATA_RPC_TIMEOUT.as_millis());
    assert!(DATA_RPC_TIMEOUT.as_millis() < PEER_RPC_TIMEOUT.as_millis());
    assert!(KEEPALIVE_TIMEOUT.as_millis() < PEER_RPC_TIMEOUT.as_millis());
    assert!(KEEPALIVE_TIMEOUT.as_millis() < PEER_FETCH_IDLE.as_millis());
    assert!(2 * PEER_FETCH_IDLE.as_millis() < DATA_RPC_TIMEOUT.as_millis());
};
