//! The typed client of the OSD protocol (`proto/osd.proto`) and its domain types. Clients use
//! [`OsdClient::write_segment`], [`OsdClient::read_segment`] and [`OsdClient::update_segment`] against a
//! segment's primary; OSDs use the chunk calls against each other. Callers see no generated type
//! (only an OSD's server does): [`Layout`], [`Holder`], [`ChunkMeta`], [`Ack`] and [`OsdCallError`].

use std::future::Future;
use std::ops::Range;
use std::time::Duration;

use bytes::Bytes;
use ecstack_mds_proto::UpdateScheme;
use ecstack_rpc::Security;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::proto;
use crate::proto::osd_client::OsdClient as RawClient;
use crate::wire::{self, Reply};
use ecstack_mds_proto::{ChunkState, SegmentLayout};

/// The largest streamed message a client accepts in a reply ([`ecstack_rpc::limits`]).
const STREAM_MESSAGE_BYTES_MAX: usize = ecstack_rpc::limits::STREAM_MESSAGE_BYTES_MAX;

/// Bytes per streamed frame (segment data, chunk data). Below every gRPC message limit.
pub const FRAME_BYTES: usize = 1 << 20;

/// `data` as frames of at most [`FRAME_BYTES`]: one copy into a shared buffer, then slices of it.
pub fn split_frames(data: &[u8]) -> Vec<Bytes> {
    slice_frames(Bytes::copy_from_slice(data))
}

/// `data` as frames of at most [`FRAME_BYTES`], each a slice of it (no copy).
pub fn slice_frames(data: Bytes) -> Vec<Bytes> {
    (0..data.len())
        .step_by(FRAME_BYTES)
        .map(|at| data.slice(at..(at + FRAME_BYTES).min(data.len())))
        .collect()
}

/// A `ReadSegment` reply put back in order: each data frame goes right after the one before it,
/// unless a frame with `at` moved the place first (a primary sends each data chunk's bytes as they
/// come in from its holder). [`ReadAssembly::finish`] checks that the frames cover the requested
/// range exactly once.
#[derive(Debug)]
pub struct ReadAssembly {
    start: u64,
    end: u64,
    /// Where the next data frame goes.
    at: u64,
    /// Every frame with its place, in arrival order.
    parts: Vec<(u64, Bytes)>,
}

impl ReadAssembly {
    /// For a read of `length` bytes of a segment from `offset`.
    pub fn new(offset: u64, length: u64) -> ReadAssembly {
        ReadAssembly {
            start: offset,
            end: offset.saturating_add(length),
            at: offset,
            parts: Vec::new(),
        }
    }

    /// Takes one reply message; returns its data bytes.
    pub fn take(&mut self, at: Option<u64>, data: Vec<Bytes>) -> Result<u64, String> {
        if let Some(at) = at {
            if at < self.start || at > self.end {
                return Err(format!(
                    "a frame placed at {at}, outside the read of {}..{}",
                    self.start, self.end
                ));
            }
            self.at = at;
        }
        let mut n = 0u64;
        for d in data.into_iter().filter(|d| !d.is_empty()) {
            let len = d.len() as u64;
            if self.at + len > self.end {
                return Err(format!(
                    "a frame of {len} bytes at {} runs past the read's end {}",
                    self.at, self.end
                ));
            }
            self.parts.push((self.at, d));
            self.at += len;
            n += len;
        }
        Ok(n)
    }

    /// The frames in segment order, once they cover the range exactly once.
    pub fn finish(mut self) -> Result<Vec<Bytes>, String> {
        self.parts.sort_by_key(|&(at, _)| at);
        let mut next = self.start;
        for (at, d) in &self.parts {
            if *at != next {
                return Err(format!(
                    "the reply {} at {next} (next frame at {at})",
                    if *at > next {
                        "leaves a gap"
                    } else {
                        "overlaps itself"
                    }
                ));
            }
            next += d.len() as u64;
        }
        if next != self.end {
            return Err(format!(
                "the reply covers {}..{next} of the read {}..{}",
                self.start, self.start, self.end
            ));
        }
        Ok(self.parts.into_iter().map(|(_, d)| d).collect())
    }
}

/// Largest gRPC message an OSD accepts or sends: a whole segment's update (at most the largest
/// segment, 64 MiB) plus its envelope.
pub const MAX_MESSAGE_BYTES: usize = (ecstack_rpc::config::MAX_SEGMENT_BYTES as usize) + (1 << 20);

/// Connect timeout and per-request deadline of [`OsdClient::connect`]: the cluster's
/// ([`ecstack_rpc::limits`]). An OSD's calls to its peers use the peer deadline, longer than the
/// client's idle deadline: a primary's forward of a chunk stays open while the client's segment
/// arrives, so on saturated links it lasts as long as the client's call, which is bounded by its
/// progress, not its length (deadlines of 60 s and then 120 s here failed forwards of calls the
/// client was still willing to wait for; see [`ecstack_rpc::limits::PEER_RPC_TIMEOUT`]).
pub const CONNECT_TIMEOUT: Duration = ecstack_rpc::limits::CONNECT_TIMEOUT;
pub const REQUEST_TIMEOUT: Duration = ecstack_rpc::limits::PEER_RPC_TIMEOUT;

/// One chunk of a segment and the OSD that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// 0..k data, k..n parity.
    pub index: u32,
    pub osd_id: u32,
    /// `host:port` of the holder's OSD service.
    pub addr: String,
    /// false: the chunk is stale, recovering or lost (never read from, never waited for).
    pub usable: bool,
    /// A healthy chunk whose holder the MDS sees down (so `usable` is false): a write or update
    /// skips it and marks it stale at the MDS before acknowledging.
    pub down: bool,
}

/// A segment's layout as the primary needs it (mirrors the MDS's segment layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub segment_id: u64,
    /// Data bytes in the segment.
    pub length: u64,
    /// osd_id of the primary OSD.
    pub primary: u32,
    /// n entries, by chunk index.
    pub holders: Vec<Holder>,
    /// The MDS's layout epoch; a primary refuses a layout older than one it has seen.
    pub epoch: u64,
    /// The file's update scheme: where holders keep its updates.
    pub scheme: UpdateScheme,
    /// The largest segment version the MDS has heard of (stale marks, rebuilds): a primary
    /// issues new versions above it, even one that never saw them (promoted, restarted).
    pub version: u64,
}

impl Layout {
    /// The address of the primary (the holder whose osd_id is `primary`), if it holds a chunk.
    pub fn primary_addr(&self) -> Option<&str> {
        self.holders
            .iter()
            .find(|h| h.osd_id == self.primary)
            .map(|h| h.addr.as_str())
    }
}

/// What a chunk file stores besides its bytes (the chunk header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkMeta {
    pub segment_id: u64,
    pub index: u32,
    /// The segment version of the last write or update that touched this chunk.
    pub version: u64,
    /// Bytes in the chunk (every chunk of a segment has the same size: ⌈length / k⌉).
    pub chunk_bytes: u64,
    /// Data bytes of the whole segment.
    pub segment_length: u64,
    /// A parity chunk: for each data chunk i (k entries), the version of the last change of chunk
    /// i whose delta this parity includes; empty for a data chunk. A stripe decodes correctly only
    /// from data chunks and parity chunks that agree on these versions (docs/cluster.md
    /// "Consistency of a stripe").
    pub applied: Vec<u64>,
    /// The file's update scheme (a chunk of chunk format 2 is FO).
    pub scheme: UpdateScheme,
    /// PLR: bytes reserved after a parity chunk for its deltas (0 otherwise).
    pub reserve_bytes: u64,
}

/// What a holder reports of a chunk without its bytes (ChunkVersion).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkVersions {
    pub version: u64,
    /// A parity chunk's [`ChunkMeta::applied`]; empty for a data chunk.
    pub applied: Vec<u64>,
}

/// Which change of which data chunk a parity delta carries: data chunk `from` went from version
/// `prior` to `version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaStamp {
    pub from: u32,
    pub prior: u64,
    pub version: u64,
}

/// A write or an update the primary acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// The segment's version after the operation.
    pub version: u64,
    /// Chunks not written (holder unreachable); already marked stale at the MDS.
    pub stale: Vec<u32>,
}

/// Whether a WriteSegment writes a segment the MDS has just allocated. A primary that knows nothing
/// of a new segment (and holds none of its chunks) then asks no holder for its versions: there are
/// none. Say [`SegmentAge::New`] only for the layout AllocateSegments returned, on the first attempt
/// to write it; a retry may find chunks of the attempt before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentAge {
    /// Just allocated, never written: the first attempt.
    New,
    /// Anything else (a retry, a rewrite); the primary learns the segment's versions if it does
    /// not know them.
    Existing,
}

/// The gRPC request metadata key by which WriteSegment carries [`SegmentAge::New`] (value `1`;
/// absent: [`SegmentAge::Existing`]). Metadata, not a field of the request, so a peer that does not
/// know it writes as before.
pub const NEW_SEGMENT_KEY: &str = "ecstack-new-segment";

/// What can go wrong talking to an OSD. [`OsdCallError::is_retryable`] says whether a client should
/// re-fetch the layout and try again.
#[derive(Debug, thiserror::Error)]
pub enum OsdCallError {
    #[error("OSD {addr} unreachable: {message}")]
    Unreachable { addr: String, message: String },
    #[error("OSD {addr}: stale layout: {message}")]
    StaleLayout { addr: String, message: String },
    #[error("OSD {addr}: not durable: {message}")]
    NotDurable { addr: String, message: String },
    #[error("OSD {addr}: data lost: {message}")]
    Unrecoverable { addr: String, message: String },
    #[error("OSD {addr}: not found: {message}")]
    NotFound { addr: String, message: String },
    #[error("OSD {addr}: invalid request: {message}")]
    Invalid { addr: String, message: String },
    #[error("OSD {addr}: {code:?}: {message}")]
    Remote {
        addr: String,
        code: Code,
        message: String,
    },
    /// The TLS handshake failed (a certificate of another cluster, or none); final.
    #[error("cannot authenticate to OSD {addr}: {message}")]
    Unauthenticated { addr: String, message: String },
    #[error("OSD {addr}: protocol violation: {message}")]
    Protocol { addr: String, message: String },
    #[error("cannot connect to OSD: {0}")]
    Security(#[from] ecstack_rpc::SecurityError),
    /// The OSD refused a block stream (admission control: it cannot serve one more without
    /// collapsing the ones it serves, or a high-priority stream preempted this one). Final at this
    /// OSD: go to another.
    #[error("OSD {addr} refused the stream: {msg}")]
    Refused { addr: String, msg: String },
}

impl OsdCallError {
    /// The error a gRPC status from `addr` means (the OSD service picks its codes to match).
    pub fn from_status(addr: &str, s: &Status) -> OsdCallError {
        let addr = addr.to_owned();
        if let Some(message) = ecstack_rpc::handshake_refusal(s) {
            // tonic says Unavailable (it could not connect), but no retry fixes a certificate.
            return OsdCallError::Unauthenticated { addr, message };
        }
        let message = ecstack_rpc::status_detail(s);
        if ecstack_rpc::is_refusal(s) {
            return OsdCallError::Refused { addr, msg: message };
        }
        match s.code() {
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => {
                OsdCallError::Unreachable { addr, message }
            }
            // tonic's code for a connection that broke under a call ("h2 protocol error: error
            // reading a body from connection: connection reset"); OSDs never answer Unknown
            // themselves. A refused TLS handshake stays final (`is_transient` says which).
            Code::Unknown if ecstack_rpc::is_transient(s) => {
                OsdCallError::Unreachable { addr, message }
            }
            Code::FailedPrecondition => OsdCallError::StaleLayout { addr, message },
            Code::Aborted => OsdCallError::NotDurable { addr, message },
            Code::DataLoss => OsdCallError::Unrecoverable { addr, message },
            Code::NotFound => OsdCallError::NotFound { addr, message },
            Code::InvalidArgument | Code::OutOfRange => OsdCallError::Invalid { addr, message },
            code => OsdCallError::Remote {
                addr,
                code,
                message,
            },
        }
    }

    /// Worth retrying after re-fetching the layout (with backoff): the OSD or a holder was
    /// unreachable, the layout changed, or too few holders were durable this time.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            OsdCallError::Unreachable { .. }
                | OsdCallError::StaleLayout { .. }
                | OsdCallError::NotDurable { .. }
        )
    }
}

/// A typed async client of one OSD.
#[derive(Clone)]
pub struct OsdClient {
    pub(crate) addr: String,
    pub(crate) raw: RawClient<Channel>,
    /// The channel `raw` uses: the chunk-data calls go through [`crate::wire`].
    channel: Channel,
    /// The OSD id chunk calls are meant for (`None`: whoever answers at `addr`).
    pub(crate) target: Option<u32>,
}

impl std::fmt::Debug for OsdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OsdClient({})", self.addr)
    }
}

impl OsdClient {
    /// A lazily connecting client of the OSD at `addr` (`host:port`), with the default deadlines.
    pub fn connect(addr: &str, security: &Security) -> Result<OsdClient, OsdCallError> {
        OsdClient::connect_with(addr, security, CONNECT_TIMEOUT, Some(REQUEST_TIMEOUT))
    }

    /// `timeout`: each call's deadline up to its response's headers (`None`: the caller bounds
    /// its calls; see [`Security::channel`]).
    pub fn connect_with(
        addr: &str,
        security: &Security,
        connect_timeout: Duration,
        timeout: Option<Duration>,
    ) -> Result<OsdClient, OsdCallError> {
        let channel = security.channel(addr, connect_timeout, timeout)?;
        let raw = RawClient::new(channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(OsdClient {
            addr: addr.to_owned(),
            raw,
            channel,
            target: None,
        })
    }

    /// The same connection, with chunk calls meant for OSD `osd_id`: an OSD with another id
    /// refuses them (an address that now belongs to another OSD, after restarts on new ports).
    pub fn for_osd(mut self, osd_id: u32) -> OsdClient {
        self.target = Some(osd_id);
        self
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub(crate) fn err(&self, s: Status) -> OsdCallError {
        OsdCallError::from_status(&self.addr, &s)
    }

    pub(crate) fn protocol(&self, message: impl Into<String>) -> OsdCallError {
        OsdCallError::Protocol {
            addr: self.addr.clone(),
            message: message.into(),
        }
    }

    /// Client → primary: store a whole segment (`data.len()` must equal `layout.length`); the bytes
    /// travel in frames of [`FRAME_BYTES`].
    pub async fn write_segment(&self, layout: &Layout, data: &[u8]) -> Result<Ack, OsdCallError> {
        self.write_segment_frames(layout, tokio_stream::iter(split_frames(data)))
            .await
    }

    /// Client → primary: store a whole segment whose bytes arrive as `frames` while the call
    /// runs (they must add up to `layout.length`; a stream that ends short or is dropped stores
    /// nothing new).
    pub async fn write_segment_frames(
        &self,
        layout: &Layout,
        frames: impl tokio_stream::Stream<Item = Bytes> + Send + 'static,
    ) -> Result<Ack, OsdCallError> {
        self.write_segment_frames_as(layout, SegmentAge::Existing, frames)
            .await
    }

    /// [`OsdClient::write_segment_frames`] of a segment of the given [`SegmentAge`].
    pub async fn write_segment_frames_as(
        &self,
        layout: &Layout,
        age: SegmentAge,
        frames: impl tokio_stream::Stream<Item = Bytes> + Send + 'static,
    ) -> Result<Ack, OsdCallError> {
        let metadata: &[(&'static str, &'static str)] = match age {
            SegmentAge::New => &[(NEW_SEGMENT_KEY, "1")],
            SegmentAge::Existing => &[],
        };
        let head = proto::SegmentWrite {
            part: Some(proto::segment_write::Part::Layout(layout_to_proto(layout))),
        };
        let data = frames.map(|d| Reply::Data(vec![d]));
        let reply: proto::WriteSegmentReply = wire::client_streaming(
            &self.channel,
            wire::WRITE_SEGMENT_PATH,
            metadata,
            tokio_stream::iter([Reply::Message(head)]).chain(data),
            STREAM_MESSAGE_BYTES_MAX,
        )
        .await
        .map_err(|s| self.err(s))?;
        Ok(Ack {
            version: reply.version,
            stale: reply.stale,
        })
    }

    /// [`OsdClient::write_segment`] of bytes already in a shared buffer: the frames are slices of
    /// `data` (no copy).
    pub async fn write_segment_bytes(
        &self,
        layout: &Layout,
        data: Bytes,
    ) -> Result<Ack, OsdCallError> {
        self.write_segment_bytes_with(layout, data, SegmentAge::Existing, |_| {})
            .await
    }

    /// [`OsdClient::write_segment_bytes`] of a segment of the given [`SegmentAge`], calling
    /// `on_frame` with each frame's length as the transport takes it (HTTP/2 flow control holds
    /// the frames back until the primary reads).
    pub async fn write_segment_bytes_with(
        &self,
        layout: &Layout,
        data: Bytes,
        age: SegmentAge,
        mut on_frame: impl FnMut(u64) + Send + 'static,
    ) -> Result<Ack, OsdCallError> {
        let frames = tokio_stream::iter(slice_frames(data)).map(move |f| {
            on_frame(f.len() as u64);
            f
        });
        self.write_segment_frames_as(layout, age, frames).await
    }

    /// Client → primary: `length` bytes of the segment from `offset` (degraded if chunks are missing).
    pub async fn read_segment(
        &self,
        layout: &Layout,
        offset: u64,
        length: u64,
    ) -> Result<Vec<u8>, OsdCallError> {
        let frames = self.read_segment_frames(layout, offset, length).await?;
        let mut out = Vec::with_capacity(length as usize);
        for f in &frames {
            out.extend_from_slice(f);
        }
        Ok(out)
    }

    /// [`OsdClient::read_segment`] as the frames the primary sent, in order (no copy into one
    /// buffer: a get hands them to its writer as they are). Their lengths add up to `length`.
    pub async fn read_segment_frames(
        &self,
        layout: &Layout,
        offset: u64,
        length: u64,
    ) -> Result<Vec<Bytes>, OsdCallError> {
        self.read_segment_frames_with(layout, offset, length, |_| {})
            .await
    }

    /// [`OsdClient::read_segment_frames`], calling `on_frame` with each frame's length as it
    /// arrives (a throughput counted while the read runs).
    pub async fn read_segment_frames_with(
        &self,
        layout: &Layout,
        offset: u64,
        length: u64,
        mut on_frame: impl FnMut(u64) + Send,
    ) -> Result<Vec<Bytes>, OsdCallError> {
        let req = proto::ReadSegmentRequest {
            layout: Some(layout_to_proto(layout)),
            offset,
            length,
        };
        let mut stream = wire::server_streaming::<proto::DataFrame>(
            &self.channel,
            wire::READ_SEGMENT_PATH,
            &req,
            STREAM_MESSAGE_BYTES_MAX,
        )
        .await
        .map_err(|s| self.err(s))?;
        let mut assembly = ReadAssembly::new(offset, length);
        while let Some(reply) = stream.next().await.map_err(|s| self.err(s))? {
            let (at, data) = match reply {
                Reply::Data(data) => (None, data),
                Reply::Message(m) => (m.at, vec![m.data]),
            };
            let n = assembly
                .take(at, data)
                .map_err(|e| self.protocol(format!("ReadSegment reply: {e}")))?;
            on_frame(n);
        }
        assembly
            .finish()
            .map_err(|e| self.protocol(format!("ReadSegment reply: {e}")))
    }

    /// Client → primary: overwrite `data.len()` bytes of the segment at `offset` (FO update).
    pub async fn update_segment(
        &self,
        layout: &Layout,
        offset: u64,
        data: &[u8],
    ) -> Result<Ack, OsdCallError> {
        let req = proto::UpdateSegmentRequest {
            layout: Some(layout_to_proto(layout)),
            offset,
            data: Bytes::copy_from_slice(data),
        };
        let reply = self
            .raw
            .clone()
            .update_segment(req)
            .await
            .map_err(|s| self.err(s))?
            .into_inner();
        Ok(Ack {
            version: reply.version,
            stale: reply.stale,
        })
    }

    /// OSD → OSD: store (create or replace) a whole chunk.
    pub async fn put_chunk(&self, meta: &ChunkMeta, data: Bytes) -> Result<(), OsdCallError> {
        self.put_chunk_frames(meta, tokio_stream::iter(slice_frames(data)))
            .await
    }

    /// OSD → OSD: store a whole chunk whose bytes arrive as `frames` (at most [`FRAME_BYTES`]
    /// each) while the call runs: the primary forwards a data chunk as its bytes come in from the
    /// client. The holder stores the chunk only if the stream ends with exactly `chunk_bytes`
    /// bytes, so a sender that gives up early (drops the stream short) stores nothing.
    pub async fn put_chunk_frames(
        &self,
        meta: &ChunkMeta,
        frames: impl tokio_stream::Stream<Item = Bytes> + Send + 'static,
    ) -> Result<(), OsdCallError> {
        self.put_chunk_groups(meta, frames.map(|f| vec![f])).await
    }

    /// [`OsdClient::put_chunk_frames`] with each frame given as slices (sent as one message, no
    /// copy): a primary forwards a received frame's slices this way.
    pub async fn put_chunk_groups(
        &self,
        meta: &ChunkMeta,
        frames: impl tokio_stream::Stream<Item = Vec<Bytes>> + Send + 'static,
    ) -> Result<(), OsdCallError> {
        let header = proto::ChunkWrite {
            part: Some(proto::chunk_write::Part::Header(proto::ChunkHeader {
                target_osd: self.target,
                ..meta_to_proto(meta)
            })),
        };
        let data = frames.map(Reply::Data);
        let _: proto::PutChunkReply = wire::client_streaming(
            &self.channel,
            wire::PUT_CHUNK_PATH,
            &[],
            tokio_stream::iter([Reply::Message(header)]).chain(data),
            STREAM_MESSAGE_BYTES_MAX,
        )
        .await
        .map_err(|s| self.err(s))?;
        Ok(())
    }

    /// OSD → OSD (and a client's direct read): `length` bytes of chunk `index` from `offset` (0: to
    /// the end of the chunk), with the chunk's header, in one buffer: a reply that arrived in one
    /// HTTP/2 DATA frame is returned as received; one that spans several (any read over 64 KiB) is
    /// joined, one copy ([`OsdClient::get_chunk_frames`] returns the slices instead). With `idle`,
    /// the read gives up (`Unreachable`) once the reply's next part (its headers, then each message
    /// of at most [`FRAME_BYTES`]) has not arrived for that long: a primary's read falls back to
    /// other holders well before its client's idle deadline
    /// ([`ecstack_rpc::limits::PEER_FETCH_IDLE`]); `None`: the channel's deadline only.
    pub async fn get_chunk(
        &self,
        segment_id: u64,
        index: u32,
        offset: u64,
        length: u64,
        idle: Option<Duration>,
    ) -> Result<(ChunkMeta, Bytes), OsdCallError> {
        let (meta, frames) = self
            .get_chunk_frames(segment_id, index, offset, length, idle)
            .await?;
        Ok((meta, wire::contiguous(frames)))
    }

    /// [`OsdClient::get_chunk`] as the frames received (slices of the receive buffers, no copy).
    pub async fn get_chunk_frames(
        &self,
        segment_id: u64,
        index: u32,
        offset: u64,
        length: u64,
        idle: Option<Duration>,
    ) -> Result<(ChunkMeta, Vec<Bytes>), OsdCallError> {
        let req = proto::GetChunkRequest {
            segment_id,
            index,
            offset,
            length,
            target_osd: self.target,
        };
        let what =
            || format!("GetChunk of segment {segment_id:#x} chunk {index} bytes {offset}+{length}");
        let mut stream = self
            .within(idle, &what, async {
                wire::server_streaming::<proto::ChunkFrame>(
                    &self.channel,
                    wire::GET_CHUNK_PATH,
                    &req,
                    STREAM_MESSAGE_BYTES_MAX,
                )
                .await
                .map_err(|s| self.err(s))
            })
            .await?;
        let first = self
            .within(idle, &what, async {
                stream.next().await.map_err(|s| self.err(s))
            })
            .await?;
        let meta = match first {
            Some(Reply::Message(proto::ChunkFrame {
                part: Some(proto::chunk_frame::Part::Header(h)),
            })) => meta_from_proto(&h).map_err(|e| self.protocol(&e))?,
            _ => return Err(self.protocol("GetChunk reply does not start with a header")),
        };
        let want = if length == 0 {
            meta.chunk_bytes.saturating_sub(offset)
        } else {
            length
        };
        let mut frames = Vec::new();
        let mut got = 0u64;
        while let Some(reply) = self
            .within(idle, &what, async {
                stream.next().await.map_err(|s| self.err(s))
            })
            .await?
        {
            let Reply::Data(data) = reply else {
                return Err(self.protocol("GetChunk reply has a second header"));
            };
            got += data.iter().map(|d| d.len() as u64).sum::<u64>();
            if got > want {
                return Err(self.protocol("GetChunk reply longer than asked"));
            }
            frames.extend(data);
        }
        if got != want {
            return Err(self.protocol(format!("GetChunk of {want} bytes returned {got}")));
        }
        Ok((meta, frames))
    }

    /// `fut`, or `Unreachable` once it has run for `idle` (`None`: as long as it takes).
    async fn within<T>(
        &self,
        idle: Option<Duration>,
        what: &(dyn Fn() -> String + Sync),
        fut: impl Future<Output = Result<T, OsdCallError>>,
    ) -> Result<T, OsdCallError> {
        let Some(idle) = idle else {
            return fut.await;
        };
        match tokio::time::timeout(idle, fut).await {
            Ok(r) => r,
            Err(_) => Err(OsdCallError::Unreachable {
                addr: self.addr.clone(),
                message: format!("{}: nothing arrived for {} ms", what(), idle.as_millis()),
            }),
        }
    }

    /// Client → primary: the versions the data chunks must carry for a read of `[offset,
    /// offset+length)` straight from their holders, or `None` when a chunk the range needs is not
    /// usable (read through the primary then: [`OsdClient::read_segment_frames`]).
    pub async fn read_plan(
        &self,
        layout: &Layout,
        offset: u64,
        length: u64,
    ) -> Result<Option<Vec<u64>>, OsdCallError> {
        let req = proto::ReadPlanRequest {
            layout: Some(layout_to_proto(layout)),
            offset,
            length,
        };
        let reply = self
            .raw
            .clone()
            .read_plan(req)
            .await
            .map_err(|s| self.err(s))?
            .into_inner();
        if !reply.direct {
            return Ok(None);
        }
        if reply.versions.is_empty() || reply.versions.len() >= layout.holders.len() {
            return Err(self.protocol(format!(
                "ReadPlan reply with {} versions for a stripe of {} chunks",
                reply.versions.len(),
                layout.holders.len()
            )));
        }
        Ok(Some(reply.versions))
    }

    /// Primary → data holder: a sub-update of one data chunk; the holder sends the parity deltas to
    /// `parity` and returns the parity chunks whose holder did not acknowledge. A holder whose chunk
    /// is not at `expected_version` (0: any) refuses and changes nothing.
    #[allow(clippy::too_many_arguments)]
    pub async fn update_chunk(
        &self,
        segment_id: u64,
        index: u32,
        offset: u64,
        data: &[u8],
        version: u64,
        expected_version: u64,
        parity: &[Holder],
        scheme: UpdateScheme,
    ) -> Result<Vec<u32>, OsdCallError> {
        let req = proto::UpdateChunkRequest {
            segment_id,
            index,
            offset,
            data: Bytes::copy_from_slice(data),
            version,
            parity: parity.iter().map(holder_to_proto).collect(),
            expected_version,
            update_scheme: scheme.code(),
            target_osd: self.target,
        };
        let reply = self
            .raw
            .clone()
            .update_chunk(req)
            .await
            .map_err(|s| self.err(s))?
            .into_inner();
        Ok(reply.stale)
    }

    /// Data holder → parity holder: XOR `delta` (data chunk `stamp.from` going from version
    /// `stamp.prior` to `stamp.version`) into the parity chunk over `extents` (sorted, disjoint;
    /// `delta` is their bytes concatenated), as one change. The holder refuses
    /// (FailedPrecondition) unless the parity includes exactly version `prior` of that data chunk.
    /// One extent goes as `offset` alone, as before extents existed, so older holders take it.
    pub async fn apply_delta(
        &self,
        segment_id: u64,
        index: u32,
        extents: &[Range<u64>],
        delta: &[u8],
        stamp: DeltaStamp,
        scheme: UpdateScheme,
    ) -> Result<(), OsdCallError> {
        let (offset, extents) = extents_to_proto(extents);
        let req = proto::ApplyDeltaRequest {
            segment_id,
            index,
            offset,
            delta: Bytes::copy_from_slice(delta),
            version: stamp.version,
            from_index: stamp.from,
            prior_version: stamp.prior,
            update_scheme: scheme.code(),
            target_osd: self.target,
            extents,
        };
        self.raw
            .clone()
            .apply_delta(req)
            .await
            .map_err(|s| self.err(s))?;
        Ok(())
    }

    /// The stored versions of a chunk, `None` if the OSD does not hold it.
    pub async fn chunk_version(
        &self,
        segment_id: u64,
        index: u32,
    ) -> Result<Option<ChunkVersions>, OsdCallError> {
        let reply = self
            .raw
            .clone()
            .chunk_version(proto::ChunkVersionRequest {
                segment_id,
                index,
                target_osd: self.target,
            })
            .await
            .map_err(|s| self.err(s))?
            .into_inner();
        Ok(reply.present.then_some(ChunkVersions {
            version: reply.version,
            applied: reply.applied,
        }))
    }

    /// Remove a chunk (no error if it is absent).
    pub async fn delete_chunk(&self, segment_id: u64, index: u32) -> Result<(), OsdCallError> {
        self.raw
            .clone()
            .delete_chunk(proto::DeleteChunkRequest {
                segment_id,
                index,
                target_osd: self.target,
            })
            .await
            .map_err(|s| self.err(s))?;
        Ok(())
    }
}

impl From<&SegmentLayout> for Layout {
    /// The OSD's view of an MDS layout: only `Healthy` chunks are usable.
    fn from(s: &SegmentLayout) -> Layout {
        Layout {
            segment_id: s.segment_id,
            length: s.length,
            primary: s.primary,
            holders: s
                .chunks
                .iter()
                .map(|c| Holder {
                    index: c.index,
                    osd_id: c.osd_id,
                    addr: c.addr.clone(),
                    usable: c.state == ChunkState::Healthy && c.up,
                    down: c.state == ChunkState::Healthy && !c.up,
                })
                .collect(),
            epoch: s.epoch,
            scheme: s.scheme,
            version: s.version,
        }
    }
}

pub use ecstack_mds_proto::chunk_bytes;

/// At most this many extents in one ApplyDelta (RDP's diagonal parity has at most p − 1 ≤ 256).
pub const DELTA_EXTENTS_MAX: usize = 4096;

/// ApplyDelta's `offset` and `extents` for a delta over `extents`: one extent (or none) as
/// `offset` alone, the form older holders read; more as the list.
pub fn extents_to_proto(extents: &[Range<u64>]) -> (u64, Vec<proto::Extent>) {
    match extents {
        [] => (0, Vec::new()),
        [e] => (e.start, Vec::new()),
        _ => (
            0,
            extents
                .iter()
                .map(|e| proto::Extent {
                    offset: e.start,
                    len: e.end - e.start,
                })
                .collect(),
        ),
    }
}

/// The extents an ApplyDelta's delta of `delta_len` bytes covers: `extents`, or, when empty, the
/// one range `offset..offset + delta_len`. Refuses (one line) an overflowing range, more than
/// [`DELTA_EXTENTS_MAX`] extents, or extents whose lengths do not add up to the delta's. (Order
/// and bounds are the chunk store's to check.)
pub fn extents_from_proto(
    offset: u64,
    delta_len: usize,
    extents: &[proto::Extent],
) -> Result<Vec<Range<u64>>, String> {
    let range = |offset: u64, len: u64| {
        offset
            .checked_add(len)
            .map(|end| offset..end)
            .ok_or_else(|| format!("extent {offset}+{len} overflows"))
    };
    if extents.is_empty() {
        return Ok(vec![range(offset, delta_len as u64)?]);
    }
    if extents.len() > DELTA_EXTENTS_MAX {
        return Err(format!(
            "{} extents in one delta, at most {DELTA_EXTENTS_MAX}",
            extents.len()
        ));
    }
    let out = extents
        .iter()
        .map(|e| range(e.offset, e.len))
        .collect::<Result<Vec<_>, _>>()?;
    let total = extents
        .iter()
        .try_fold(0u64, |t, e| t.checked_add(e.len))
        .unwrap_or(u64::MAX);
    if total != delta_len as u64 {
        return Err(format!(
            "the extents cover {total} bytes, the delta has {delta_len}"
        ));
    }
    Ok(out)
}

pub fn holder_to_proto(h: &Holder) -> proto::Holder {
    proto::Holder {
        index: h.index,
        osd_id: h.osd_id,
        addr: h.addr.clone(),
        usable: h.usable,
        down: h.down,
    }
}

pub fn holder_from_proto(h: &proto::Holder) -> Holder {
    Holder {
        index: h.index,
        osd_id: h.osd_id,
        addr: h.addr.clone(),
        usable: h.usable,
        down: h.down,
    }
}

pub fn layout_to_proto(l: &Layout) -> proto::Layout {
    proto::Layout {
        segment_id: l.segment_id,
        length: l.length,
        primary: l.primary,
        holders: l.holders.iter().map(holder_to_proto).collect(),
        epoch: l.epoch,
        update_scheme: l.scheme.code(),
        version: l.version,
    }
}

/// A layout off the wire; an unknown update scheme is refused with one line.
pub fn layout_from_proto(l: &proto::Layout) -> Result<Layout, String> {
    Ok(Layout {
        segment_id: l.segment_id,
        length: l.length,
        primary: l.primary,
        holders: l.holders.iter().map(holder_from_proto).collect(),
        epoch: l.epoch,
        scheme: UpdateScheme::from_code(l.update_scheme)
            .map_err(|e| format!("segment {:#x}: {e}", l.segment_id))?,
        version: l.version,
    })
}

pub fn meta_to_proto(m: &ChunkMeta) -> proto::ChunkHeader {
    proto::ChunkHeader {
        segment_id: m.segment_id,
        index: m.index,
        version: m.version,
        chunk_bytes: m.chunk_bytes,
        segment_length: m.segment_length,
        applied: m.applied.clone(),
        target_osd: None,
        update_scheme: m.scheme.code(),
        reserve_bytes: m.reserve_bytes,
    }
}

/// A chunk header off the wire; an unknown update scheme is refused with one line.
pub fn meta_from_proto(h: &proto::ChunkHeader) -> Result<ChunkMeta, String> {
    Ok(ChunkMeta {
        segment_id: h.segment_id,
        index: h.index,
        version: h.version,
        chunk_bytes: h.chunk_bytes,
        segment_length: h.segment_length,
        applied: h.applied.clone(),
        scheme: UpdateScheme::from_code(h.update_scheme)
            .map_err(|e| format!("segment {:#x} chunk {}: {e}", h.segment_id, h.index))?,
        reserve_bytes: h.reserve_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_extents_round_trip_and_bad_ones_are_refused() {
        // One extent travels as the offset alone (what holders before extents read).
        assert_eq!(extents_to_proto(&[5..9]), (5, Vec::new()));
        assert_eq!(extents_from_proto(5, 4, &[]).unwrap(), vec![5..9]);
        assert_eq!(extents_to_proto(&[]), (0, Vec::new()));
        assert_eq!(extents_from_proto(0, 0, &[]).unwrap(), vec![0..0]);
        let many = [0..3, 10..12, 40..41];
        let (offset, wire) = extents_to_proto(&many);
        assert_eq!(wire.len(), 3);
        assert_eq!(extents_from_proto(offset, 6, &wire).unwrap(), many.to_vec());
        // The delta's length must match the extents'.
        let e = extents_from_proto(offset, 7, &wire).unwrap_err();
        assert_eq!(e, "the extents cover 6 bytes, the delta has 7");
        let e = extents_from_proto(u64::MAX, 2, &[]).unwrap_err();
        assert!(e.contains("overflows"), "{e}");
        let huge = vec![proto::Extent { offset: 0, len: 0 }; DELTA_EXTENTS_MAX + 1];
        let e = extents_from_proto(0, 0, &huge).unwrap_err();
        assert!(e.contains("at most"), "{e}");
        let wrap = [
            proto::Extent {
                offset: 0,
                len: u64::MAX,
            },
            proto::Extent { offset: 0, len: 2 },
        ];
        assert!(extents_from_proto(0, 1, &wrap).is_err());
    }

    #[test]
    fn layout_round_trips_through_proto() {
        let l = Layout {
            scheme: UpdateScheme::Plr,
            segment_id: 7,
            length: 1000,
            primary: 3,
            holders: (0..4)
                .map(|i| Holder {
                    index: i,
                    osd_id: 3 + i,
                    addr: format!("127.0.0.1:{}", 4000 + i),
                    usable: i != 2,
                    down: i == 2,
                })
                .collect(),
            epoch: 9,
            version: 41,
        };
        assert_eq!(layout_from_proto(&layout_to_proto(&l)), Ok(l.clone()));
        assert_eq!(l.primary_addr(), Some("127.0.0.1:4000"));
        let m = ChunkMeta {
            reserve_bytes: 8192,
            scheme: UpdateScheme::Fl,
            segment_id: 1,
            index: 2,
            version: 3,
            chunk_bytes: 4,
            segment_length: 5,
            applied: vec![3, 1],
        };
        assert_eq!(meta_from_proto(&meta_to_proto(&m)), Ok(m));
        let mut bad = layout_to_proto(&l);
        bad.update_scheme = 9;
        assert!(layout_from_proto(&bad)
            .unwrap_err()
            .contains("update scheme"));
    }

    /// A range cut into random frames, sent lane by lane in a random interleaving with an `at`
    /// before every frame that does not follow the one sent before (as a primary sends them),
    /// comes back in order; a gap, an overlap, a frame past the end or a place outside the read is
    /// refused by name.
    #[test]
    fn read_assembly_puts_frames_back_in_order() {
        let mut rng = ecstack_base::Rng::new(5);
        for _ in 0..500 {
            let offset = rng.below(100);
            let length = rng.below(400);
            let data: Vec<u8> = (0..length).map(|i| (i * 7 + offset) as u8).collect();
            let lanes = 1 + rng.below(4);
            let lane_bytes = length.div_ceil(lanes).max(1);
            // Per lane, its frames in order.
            let mut queues: Vec<Vec<(u64, u64)>> = Vec::new();
            let mut at = 0;
            while at < length {
                let lane_end = (at + lane_bytes).min(length);
                let mut q = Vec::new();
                while at < lane_end {
                    let n = (1 + rng.below(40)).min(lane_end - at);
                    q.push((at, n));
                    at += n;
                }
                q.reverse();
                queues.push(q);
            }
            let mut a = ReadAssembly::new(offset, length);
            let mut place = 0;
            while queues.iter().any(|q| !q.is_empty()) {
                let live: Vec<usize> = (0..queues.len())
                    .filter(|&i| !queues[i].is_empty())
                    .collect();
                let q = live[rng.below(live.len() as u64) as usize];
                let (at, n) = queues[q].pop().unwrap();
                if at != place {
                    assert_eq!(a.take(Some(offset + at), Vec::new()), Ok(0));
                }
                let frame = Bytes::copy_from_slice(&data[at as usize..(at + n) as usize]);
                assert_eq!(a.take(None, vec![frame]), Ok(n));
                place = at + n;
            }
            assert_eq!(a.finish().unwrap().concat(), data);
        }
        let frame = |n: usize| vec![Bytes::from(vec![1u8; n])];
        let mut a = ReadAssembly::new(10, 20);
        a.take(None, frame(5)).unwrap();
        a.take(Some(20), frame(10)).unwrap();
        assert!(a.finish().unwrap_err().contains("leaves a gap at 15"));
        let mut a = ReadAssembly::new(10, 20);
        a.take(None, frame(15)).unwrap();
        a.take(Some(20), frame(10)).unwrap();
        assert!(a.finish().unwrap_err().contains("overlaps itself at 25"));
        let mut a = ReadAssembly::new(10, 20);
        assert!(a
            .take(None, frame(21))
            .unwrap_err()
            .contains("past the read's end 30"));
        assert!(a
            .take(Some(31), Vec::new())
            .unwrap_err()
            .contains("outside the read"));
        assert!(a
            .take(Some(9), Vec::new())
            .unwrap_err()
            .contains("outside the read"));
        let mut a = ReadAssembly::new(10, 20);
        a.take(None, frame(19)).unwrap();
        assert!(a
            .finish()
            .unwrap_err()
            .contains("covers 10..29 of the read 10..30"));
    }

    #[test]
    fn status_codes_map_to_errors() {
        let e = |c| OsdCallError::from_status("a:1", &Status::new(c, "x"));
        assert!(matches!(
            e(Code::Unavailable),
            OsdCallError::Unreachable { .. }
        ));
        assert!(matches!(
            e(Code::DeadlineExceeded),
            OsdCallError::Unreachable { .. }
        ));
        assert!(matches!(
            e(Code::FailedPrecondition),
            OsdCallError::StaleLayout { .. }
        ));
        assert!(matches!(e(Code::Aborted), OsdCallError::NotDurable { .. }));
        assert!(matches!(
            e(Code::DataLoss),
            OsdCallError::Unrecoverable { .. }
        ));
        assert!(matches!(e(Code::NotFound), OsdCallError::NotFound { .. }));
        assert!(matches!(
            e(Code::InvalidArgument),
            OsdCallError::Invalid { .. }
        ));
        assert!(matches!(e(Code::Internal), OsdCallError::Remote { .. }));
        // A connection that broke mid-call is worth another try.
        assert!(matches!(e(Code::Unknown), OsdCallError::Unreachable { .. }));
        assert!(e(Code::Unknown).is_retryable());
        assert!(e(Code::Unavailable).is_retryable());
        assert!(!e(Code::DataLoss).is_retryable());
        assert_eq!(e(Code::Aborted).to_string(), "OSD a:1: not durable: x");
        // A refusal sends the client elsewhere: not retried here.
        let mut s = Status::resource_exhausted("full");
        s.metadata_mut().insert(
            ecstack_rpc::retry::REFUSED_KEY,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        let r = OsdCallError::from_status("a:1", &s);
        assert!(matches!(r, OsdCallError::Refused { .. }), "{r:?}");
        assert!(!r.is_retryable());
        assert_eq!(r.to_string(), "OSD a:1 refused the stream: full");
    }
}
