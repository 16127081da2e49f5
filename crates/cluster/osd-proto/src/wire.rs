//! Chunk data on the gRPC wire without copies.
//!
//! tonic receives a stream by copying every HTTP/2 DATA frame into one buffer and cutting the
//! messages out of it, and sends one by encoding each message into another buffer: for the calls
//! that carry chunk data (`GetChunk` and `ReadSegment` out of an OSD, `WriteSegment` and `PutChunk`
//! into one) each is one more copy of every byte moved (docs/cluster.md "Chunk data on the wire").
//! This module speaks the same protocol on the same channels and TLS connections — gRPC messages
//! with their 5-byte prefix, the `.proto`'s own messages, trailers with `grpc-status` — so a stock
//! gRPC client or server on the other end sees no difference; it only keeps the bytes field of a
//! data message as the slices of the DATA frames it arrived in, and sends it from the buffer it is
//! in.
//!
//! - Client: [`server_streaming`] makes a call with a streamed reply and returns a [`ReplyReader`],
//!   whose [`ReplyReader::next`] yields each message either as the data slices ([`Reply::Data`],
//!   the fast path: a message that is exactly one bytes field, as every sender of these calls
//!   encodes data) or decoded by prost ([`Reply::Message`], anything else); [`client_streaming`]
//!   makes a call with a streamed request, each data message sent as its header bytes followed by
//!   the data `Bytes` itself.
//! - Server: [`streaming_response`] turns a handler's reply stream into an HTTP response sent the
//!   same way; [`RequestStream`] yields a streamed request's messages, a data message as the
//!   slices it arrived in; [`read_request`] reads a unary request; [`unary_response`]
//!   sends a unary reply.
//! - Both: [`MessageReader`] cuts gRPC messages out of an HTTP body.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::{Body as _, Frame};
use tokio_stream::StreamExt as _;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tower_service::Service;

use crate::proto;

/// Paths of the chunk-data calls (checked against the generated service name in the tests).
pub const GET_CHUNK_PATH: &str = "/ecstack.osd.v1.Osd/GetChunk";
pub const READ_SEGMENT_PATH: &str = "/ecstack.osd.v1.Osd/ReadSegment";
pub const WRITE_SEGMENT_PATH: &str = "/ecstack.osd.v1.Osd/WriteSegment";
pub const PUT_CHUNK_PATH: &str = "/ecstack.osd.v1.Osd/PutChunk";

/// gRPC's message prefix: a compressed flag (0: not compressed) and a big-endian length.
const PREFIX_BYTES: usize = 5;
/// A protobuf key and a length varint: at most 5 + 10 bytes.
const FIELD_HEADER_MAX: usize = 15;

/// A streamed reply message whose chunk data is one `bytes` field.
pub trait DataMessage: prost::Message + Default + Send + 'static {
    /// The number of the `bytes` field.
    const DATA_FIELD: u32;
    /// The data, when the message is that field and nothing else; otherwise the message.
    fn into_data(self) -> Result<Bytes, Self>;
}

impl DataMessage for proto::ChunkFrame {
    const DATA_FIELD: u32 = 2;
    fn into_data(self) -> Result<Bytes, Self> {
        match self.part {
            Some(proto::chunk_frame::Part::Data(d)) => Ok(d),
            part => Err(proto::ChunkFrame { part }),
        }
    }
}

impl DataMessage for proto::DataFrame {
    const DATA_FIELD: u32 = 1;
    fn into_data(self) -> Result<Bytes, Self> {
        match self.at {
            None => Ok(self.data),
            Some(_) => Err(self),
        }
    }
}

impl DataMessage for proto::SegmentWrite {
    const DATA_FIELD: u32 = 2;
    fn into_data(self) -> Result<Bytes, Self> {
        match self.part {
            Some(proto::segment_write::Part::Data(d)) => Ok(d),
            part => Err(proto::SegmentWrite { part }),
        }
    }
}

impl DataMessage for proto::ChunkWrite {
    const DATA_FIELD: u32 = 2;
    fn into_data(self) -> Result<Bytes, Self> {
        match self.part {
            Some(proto::chunk_write::Part::Data(d)) => Ok(d),
            part => Err(proto::ChunkWrite { part }),
        }
    }
}

/// One message of a streamed reply, as [`ReplyReader::next`] returns it.
#[derive(Debug)]
pub enum Reply<T> {
    /// A data message: its bytes, as slices of the frames they arrived in (in order; no copy).
    Data(Vec<Bytes>),
    /// Any other message, decoded.
    Message(T),
}

impl<T: DataMessage> Reply<T> {
    /// `message` as a data message when it is one, else as it is.
    pub fn from_message(message: T) -> Reply<T> {
        match message.into_data() {
            Ok(d) => Reply::Data(vec![d]),
            Err(m) => Reply::Message(m),
        }
    }
}

/// Cuts gRPC messages out of an HTTP body: each message is returned as the slices of the body's
/// frames it spans (no copy).
pub struct MessageReader {
    body: Body,
    /// Received bytes not yet returned, in order, none empty.
    queue: VecDeque<Bytes>,
    queued: usize,
    /// The largest message accepted.
    max_message: usize,
    trailers: Option<http::HeaderMap>,
    ended: bool,
}

impl MessageReader {
    pub fn new(body: Body, max_message: usize) -> MessageReader {
        MessageReader {
            body,
            queue: VecDeque::new(),
            queued: 0,
            max_message,
            trailers: None,
            ended: false,
        }
    }

    /// Receives until `n` bytes are queued; false if the body ended first.
    async fn fill(&mut self, n: usize) -> Result<bool, Status> {
        while self.queued < n && !self.ended {
            let frame = std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await;
            match frame {
                None => self.ended = true,
                Some(Err(status)) => return Err(status),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        if self.trailers.is_some() {
                            return Err(Status::internal(
                                "gRPC stream has data after its trailers",
                            ));
                        }
                        if !data.is_empty() {
                            self.queued += data.len();
                            self.queue.push_back(data);
                        }
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.trailers = Some(trailers);
                        }
                    }
                },
            }
        }
        Ok(self.queued >= n)
    }

    /// The first `n` queued bytes, as slices.
    fn take(&mut self, mut n: usize) -> Vec<Bytes> {
        debug_assert!(n <= self.queued);
        self.queued -= n;
        let mut out = Vec::new();
        while n > 0 {
            let Some(front) = self.queue.front_mut() else {
                break;
            };
            if front.len() <= n {
                n -= front.len();
                out.extend(self.queue.pop_front());
            } else {
                out.push(front.split_to(n));
                n = 0;
            }
        }
        out
    }

    /// The next message's bytes (without its prefix), or `None` at a clean end of the body.
    pub async fn next_message(&mut self) -> Result<Option<Vec<Bytes>>, Status> {
        if !self.fill(PREFIX_BYTES).await? {
            if self.queued == 0 {
                return Ok(None);
            }
            return Err(Status::internal(
                "gRPC stream ended inside a message prefix",
            ));
        }
        let mut prefix = [0u8; PREFIX_BYTES];
        copy_front(&self.take(PREFIX_BYTES), &mut prefix);
        match prefix[0] {
            0 => {}
            1 => {
                return Err(Status::unimplemented(
                    "compressed gRPC messages are not accepted",
                ))
            }
            flag => {
                return Err(Status::internal(format!(
                    "gRPC message prefix has flag {flag} (0 or 1 expected)"
                )))
            }
        }
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        if len > self.max_message {
            return Err(Status::out_of_range(format!(
                "gRPC message of {len} bytes is larger than the limit of {} bytes",
                self.max_message
            )));
        }
        if !self.fill(len).await? {
            return Err(Status::internal(format!(
                "gRPC stream ended inside a message of {len} bytes ({} received)",
                self.queued
            )));
        }
        Ok(Some(self.take(len)))
    }

    /// The trailers received (after the body's end).
    fn trailers(&self) -> Option<&http::HeaderMap> {
        self.trailers.as_ref()
    }
}

/// Copies the first `out.len()` bytes of `slices` into `out` (the slices hold at least that many).
fn copy_front(slices: &[Bytes], out: &mut [u8]) -> usize {
    let mut at = 0;
    for s in slices {
        if at == out.len() {
            break;
        }
        let n = s.len().min(out.len() - at);
        out[at..at + n].copy_from_slice(&s[..n]);
        at += n;
    }
    at
}

/// The slices as one buffer: the slice itself when there is one, else a copy.
pub fn contiguous(mut slices: Vec<Bytes>) -> Bytes {
    if slices.len() == 1 {
        return slices.pop().unwrap_or_default();
    }
    let total = slices.iter().map(Bytes::len).sum();
    let mut joined = BytesMut::with_capacity(total);
    for s in &slices {
        joined.extend_from_slice(s);
    }
    joined.freeze()
}

/// A message's bytes, as [`Reply::Data`] when they are exactly one `bytes` field number
/// `T::DATA_FIELD` (the data is then the rest of the slices), else decoded by prost.
pub fn split_message<T: DataMessage>(mut slices: Vec<Bytes>) -> Result<Reply<T>, Status> {
    let total: usize = slices.iter().map(Bytes::len).sum();
    let mut head = [0u8; FIELD_HEADER_MAX];
    let got = copy_front(&slices, &mut head);
    let mut h = &head[..got];
    let key = u64::from((T::DATA_FIELD << 3) | 2);
    if let (Ok(k), true) = (prost::encoding::decode_varint(&mut h), total > 0) {
        if k == key {
            if let Ok(len) = prost::encoding::decode_varint(&mut h) {
                let header = got - h.len();
                if (header as u64).checked_add(len) == Some(total as u64) {
                    // Drop the header bytes from the front of the slices.
                    let mut skip = header;
                    let mut data = Vec::with_capacity(slices.len());
                    for mut s in slices {
                        if skip >= s.len() {
                            skip -= s.len();
                            continue;
                        }
                        s.advance(skip);
                        skip = 0;
                        data.push(s);
                    }
                    return Ok(Reply::Data(data));
                }
            }
        }
    }
    let bytes = contiguous(std::mem::take(&mut slices));
    let message = T::decode(bytes)
        .map_err(|e| Status::internal(format!("cannot decode a streamed message: {e}")))?;
    Ok(Reply::from_message(message))
}

/// A streamed reply being received ([`server_streaming`]).
pub struct ReplyReader<T> {
    messages: MessageReader,
    done: bool,
    _reply: std::marker::PhantomData<fn() -> T>,
}

impl<T: DataMessage> ReplyReader<T> {
    /// A reader of the reply whose body is `body` (its headers checked by the caller).
    fn new(messages: MessageReader) -> ReplyReader<T> {
        ReplyReader {
            messages,
            done: false,
            _reply: std::marker::PhantomData,
        }
    }

    /// The next message, or `None` after the last (the call then ended with status OK); a
    /// non-OK status in the trailers, a broken stream or a malformed message is an error.
    pub async fn next(&mut self) -> Result<Option<Reply<T>>, Status> {
        if self.done {
            return Ok(None);
        }
        match self.messages.next_message().await? {
            Some(slices) => split_message(slices).map(Some),
            None => {
                self.done = true;
                match self.messages.trailers().and_then(Status::from_header_map) {
                    Some(s) if s.code() == Code::Ok => Ok(None),
                    Some(s) => Err(s),
                    None => Err(Status::internal(
                        "gRPC stream ended without a status (no grpc-status trailer)",
                    )),
                }
            }
        }
    }
}

/// `message` as a gRPC message: prefix, then its protobuf encoding.
fn encode_message(message: &impl prost::Message) -> Bytes {
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(PREFIX_BYTES + len);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    message
        .encode(&mut buf)
        .expect("the buffer was sized by encoded_len");
    buf.freeze()
}

/// The prefix of a data message carrying `data_len` bytes in field `field`: the gRPC prefix, the
/// field's key and the data's length (the data follows as its own `Bytes`).
fn data_header(field: u32, data_len: usize) -> Bytes {
    let key = u64::from((field << 3) | 2);
    let body_len = prost::encoding::encoded_len_varint(key)
        + prost::encoding::encoded_len_varint(data_len as u64)
        + data_len;
    let mut buf = BytesMut::with_capacity(PREFIX_BYTES + FIELD_HEADER_MAX);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(body_len).expect("a streamed message is far below 4 GiB"));
    prost::encoding::encode_varint(key, &mut buf);
    prost::encoding::encode_varint(data_len as u64, &mut buf);
    buf.freeze()
}

/// The status as a transport error tonic's generated client would have returned.
fn transport_status(e: impl std::error::Error + Send + Sync + 'static) -> Status {
    Status::from_error(Box::new(e))
}

/// Calls the server-streaming method `path` (`/package.Service/Method`) with `request` over
/// `channel`; messages larger than `max_message` bytes are refused.
pub async fn server_streaming<T: DataMessage>(
    channel: &Channel,
    path: &'static str,
    request: &impl prost::Message,
    max_message: usize,
) -> Result<ReplyReader<T>, Status> {
    let body = Body::new(http_body_util::Full::new(encode_message(request)));
    let (response, trailers_only) = call(channel, path, &[], body).await?;
    let mut messages = MessageReader::new(response.into_body(), max_message);
    if trailers_only.is_some() {
        // Status OK in the headers: an empty stream, nothing more to read.
        messages.ended = true;
        messages.trailers = Some(status_headers(&Status::ok("")));
    }
    Ok(ReplyReader::new(messages))
}

/// Checks a reply's headers: the status of a "trailers-only" reply (an error, or `Some(OK)` for a
/// reply without messages), or an HTTP status that is not 200.
fn check_reply_head(path: &str, response: &http::Response<Body>) -> Result<Option<Status>, Status> {
    let trailers_only = Status::from_header_map(response.headers());
    if let Some(s) = &trailers_only {
        if s.code() != Code::Ok {
            return Err(s.clone());
        }
    }
    if response.status() != http::StatusCode::OK {
        let code = match response.status() {
            http::StatusCode::UNAUTHORIZED => Code::Unauthenticated,
            http::StatusCode::FORBIDDEN => Code::PermissionDenied,
            http::StatusCode::NOT_FOUND => Code::Unimplemented,
            http::StatusCode::TOO_MANY_REQUESTS
            | http::StatusCode::BAD_GATEWAY
            | http::StatusCode::SERVICE_UNAVAILABLE
            | http::StatusCode::GATEWAY_TIMEOUT => Code::Unavailable,
            _ => Code::Unknown,
        };
        return Err(Status::new(
            code,
            format!("{path} answered HTTP {}", response.status()),
        ));
    }
    Ok(trailers_only)
}

/// Sends `body` as the request of method `path` over `channel`, with the request metadata
/// `metadata` (ASCII keys and values); the response's head checked.
async fn call(
    channel: &Channel,
    path: &'static str,
    metadata: &[(&'static str, &'static str)],
    body: Body,
) -> Result<(http::Response<Body>, Option<Status>), Status> {
    let mut channel = channel.clone();
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .map_err(transport_status)?;
    let mut req = http::Request::builder()
        .method(http::Method::POST)
        .uri(path)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers");
    for &(key, value) in metadata {
        req = req.header(key, value);
    }
    let req = req
        .body(body)
        .map_err(|e| Status::internal(format!("cannot build the request for {path}: {e}")))?;
    let response = channel.call(req).await.map_err(transport_status)?;
    let trailers_only = check_reply_head(path, &response)?;
    Ok((response, trailers_only))
}

/// Calls the client-streaming method `path` with the request metadata `metadata` and the messages
/// of `requests` (a data message sent from the buffers its slices are in) and returns its one
/// reply message; replies larger than `max_message` bytes are refused.
pub async fn client_streaming<T, R>(
    channel: &Channel,
    path: &'static str,
    metadata: &[(&'static str, &'static str)],
    requests: impl tokio_stream::Stream<Item = Reply<T>> + Send + 'static,
    max_message: usize,
) -> Result<R, Status>
where
    T: DataMessage,
    R: prost::Message + Default,
{
    let body = Body::new(MessageBody {
        stream: Box::pin(requests.map(Ok)),
        data: VecDeque::new(),
        trailers: false,
        done: false,
    });
    let (response, trailers_only) = call(channel, path, metadata, body).await?;
    if trailers_only.is_some() {
        return Err(Status::internal(format!(
            "{path} answered without a reply message"
        )));
    }
    let mut messages = MessageReader::new(response.into_body(), max_message);
    let reply = messages.next_message().await?;
    if messages.next_message().await?.is_some() {
        return Err(Status::internal(format!(
            "{path} answered more than one message"
        )));
    }
    match messages.trailers().and_then(Status::from_header_map) {
        Some(s) if s.code() == Code::Ok => {}
        Some(s) => return Err(s),
        None => {
            return Err(Status::internal(
                "gRPC reply ended without a status (no grpc-status trailer)",
            ))
        }
    }
    let Some(reply) = reply else {
        return Err(Status::internal(format!(
            "{path} answered without a reply message"
        )));
    };
    R::decode(contiguous(reply))
        .map_err(|e| Status::internal(format!("cannot decode the reply of {path}: {e}")))
}

type Next =
    Pin<Box<dyn Future<Output = (MessageReader, Result<Option<Vec<Bytes>>, Status>)> + Send>>;

/// A streamed request as the messages of type `T` it carries, read from the request body: a data
/// message comes out as [`Reply::Data`], the slices it arrived in (no copy).
pub struct RequestStream<T> {
    reader: Option<MessageReader>,
    next: Option<Next>,
    done: bool,
    _message: std::marker::PhantomData<fn() -> T>,
}

impl<T: DataMessage> RequestStream<T> {
    pub fn new(body: Body, max_message: usize) -> RequestStream<T> {
        RequestStream {
            reader: Some(MessageReader::new(body, max_message)),
            next: None,
            done: false,
            _message: std::marker::PhantomData,
        }
    }
}

impl<T: DataMessage> tokio_stream::Stream for RequestStream<T> {
    type Item = Result<Reply<T>, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.next.is_none() {
            let Some(mut reader) = self.reader.take() else {
                self.done = true;
                return Poll::Ready(None);
            };
            self.next = Some(Box::pin(async move {
                let m = reader.next_message().await;
                (reader, m)
            }));
        }
        let Some(next) = self.next.as_mut() else {
            return Poll::Ready(None);
        };
        let (reader, message) = std::task::ready!(next.as_mut().poll(cx));
        self.next = None;
        self.reader = Some(reader);
        match message.and_then(|m| m.map(split_message::<T>).transpose()) {
            Ok(Some(reply)) => Poll::Ready(Some(Ok(reply))),
            Ok(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Err(status) => {
                self.done = true;
                Poll::Ready(Some(Err(status)))
            }
        }
    }
}

/// The HTTP response of a unary result: the message and trailers with status OK, or a
/// "trailers-only" response carrying the error.
pub fn unary_response(result: Result<impl prost::Message, Status>) -> http::Response<Body> {
    match result {
        Err(status) => status.into_http(),
        Ok(message) => {
            let frames = [
                Frame::data(encode_message(&message)),
                Frame::trailers(status_headers(&Status::ok(""))),
            ];
            let mut http = http::Response::new(Body::new(http_body_util::StreamBody::new(
                tokio_stream::iter(frames.map(Ok::<_, Status>)),
            )));
            http.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/grpc"),
            );
            http
        }
    }
}

/// Reads a unary request (one message) from a request body.
pub async fn read_request<R: prost::Message + Default>(
    body: Body,
    max_message: usize,
) -> Result<R, Status> {
    let mut reader = MessageReader::new(body, max_message);
    let Some(slices) = reader.next_message().await? else {
        return Err(Status::invalid_argument("the request carries no message"));
    };
    if reader.next_message().await?.is_some() {
        return Err(Status::invalid_argument(
            "a unary request carries more than one message",
        ));
    }
    R::decode(contiguous(slices))
        .map_err(|e| Status::invalid_argument(format!("cannot decode the request: {e}")))
}

pub type ReplyStream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;
type OutStream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<Reply<T>, Status>> + Send>>;

/// The body of a stream of messages: each as a gRPC message, a data message as its header bytes
/// then the slices of its data themselves (one message however many slices). A reply's body ends
/// with trailers carrying the stream's end or its error; a request's body just ends (an error in
/// it resets the stream).
struct MessageBody<T> {
    stream: OutStream<T>,
    /// Data slices of the message whose header was just sent.
    data: VecDeque<Bytes>,
    trailers: bool,
    done: bool,
}

impl<T: DataMessage> http_body::Body for MessageBody<T> {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(data) = self.data.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if self.done {
            return Poll::Ready(None);
        }
        let item = std::task::ready!(self.stream.as_mut().poll_next(cx));
        let frame = match item {
            Some(Ok(Reply::Data(slices))) => {
                let len = slices.iter().map(Bytes::len).sum();
                self.data
                    .extend(slices.into_iter().filter(|s| !s.is_empty()));
                Frame::data(data_header(T::DATA_FIELD, len))
            }
            Some(Ok(Reply::Message(message))) => Frame::data(encode_message(&message)),
            Some(Err(status)) => {
                self.done = true;
                if !self.trailers {
                    return Poll::Ready(Some(Err(status)));
                }
                Frame::trailers(status_headers(&status))
            }
            None => {
                self.done = true;
                if !self.trailers {
                    return Poll::Ready(None);
                }
                Frame::trailers(status_headers(&Status::ok("")))
            }
        };
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.data.is_empty()
    }
}

/// `grpc-status` (and `grpc-message`) headers for `status`.
fn status_headers(status: &Status) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    if let Err(e) = status.add_header(&mut headers) {
        // Only a message that cannot be a header value gets here; its code still goes out.
        headers.clear();
        let _ = Status::new(
            status.code(),
            format!("{} (message not sendable)", e.message()),
        )
        .add_header(&mut headers);
    }
    headers
}

/// The HTTP response of a server-streaming handler's result: on success a 200 with the handler's
/// metadata and a [`MessageBody`]; on failure a "trailers-only" response carrying the status.
pub fn streaming_response<T: DataMessage>(
    result: Result<tonic::Response<ReplyStream<T>>, Status>,
) -> http::Response<Body> {
    match result {
        Err(status) => status.into_http(),
        Ok(response) => {
            let (metadata, stream, _) = response.into_parts();
            let stream: OutStream<T> = Box::pin(stream.map(|m| m.map(Reply::from_message)));
            let mut http = http::Response::new(Body::new(MessageBody {
                stream,
                data: VecDeque::new(),
                trailers: true,
                done: false,
            }));
            *http.headers_mut() = metadata.into_headers();
            http.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/grpc"),
            );
            http
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// A body of these frames (data and trailers), in order.
    fn body_of(frames: Vec<Frame<Bytes>>) -> Body {
        Body::new(http_body_util::StreamBody::new(tokio_stream::iter(
            frames.into_iter().map(Ok::<_, Status>),
        )))
    }

    /// Every frame `body` yields.
    async fn frames_of(mut body: Body) -> Vec<Frame<Bytes>> {
        let mut out = Vec::new();
        while let Some(f) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            out.push(f.unwrap());
        }
        out
    }

    /// The wire bytes and trailers of `frames`.
    fn split_wire(frames: Vec<Frame<Bytes>>) -> (Vec<u8>, Option<http::HeaderMap>) {
        let (mut wire, mut trailers) = (Vec::new(), None);
        for f in frames {
            match f.into_data() {
                Ok(d) => wire.extend_from_slice(&d),
                Err(f) => trailers = f.into_trailers().ok(),
            }
        }
        (wire, trailers)
    }

    /// `wire` cut at `cuts` (offsets, any order) into DATA frames, then the trailers.
    fn reframe(wire: &[u8], cuts: &[usize], trailers: Option<http::HeaderMap>) -> Body {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
        at.push(0);
        at.push(wire.len());
        at.sort_unstable();
        let mut frames: Vec<Frame<Bytes>> = at
            .windows(2)
            .map(|w| Frame::data(Bytes::copy_from_slice(&wire[w[0]..w[1]])))
            .collect();
        frames.extend(trailers.map(Frame::trailers));
        body_of(frames)
    }

    async fn read_all(body: Body) -> (Vec<Reply<proto::ChunkFrame>>, Result<(), Status>) {
        let mut reader = ReplyReader::new(MessageReader::new(body, 4 << 20));
        let mut out = Vec::new();
        loop {
            match reader.next().await {
                Ok(Some(r)) => out.push(r),
                Ok(None) => return (out, Ok(())),
                Err(s) => return (out, Err(s)),
            }
        }
    }

    fn header(i: u64) -> proto::ChunkFrame {
        proto::ChunkFrame {
            part: Some(proto::chunk_frame::Part::Header(proto::ChunkHeader {
                reserve_bytes: 0,
                update_scheme: 0,
                segment_id: i,
                index: 3,
                version: 7,
                chunk_bytes: 1000,
                segment_length: 6000,
                applied: vec![1, 2],
                target_osd: None,
            })),
        }
    }

    fn data_frame(d: Bytes) -> proto::ChunkFrame {
        proto::ChunkFrame {
            part: Some(proto::chunk_frame::Part::Data(d)),
        }
    }

    fn joined(slices: &[Bytes]) -> Vec<u8> {
        slices.iter().flat_map(|s| s.iter().copied()).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the DATA frames the reply was cut into, every message comes back: data as
        /// its bytes, the header decoded, the stream's end or error as sent; data encoded by
        /// prost (a stock gRPC sender) reads the same as data sent by `MessageBody`.
        #[test]
        fn replies_read_back_whatever_the_framing(
            sizes in proptest::collection::vec((0usize..70_000, any::<bool>()), 0..6),
            cuts in proptest::collection::vec(any::<usize>(), 0..40),
            fail in any::<bool>(),
            seed in any::<u8>(),
        ) {
            let mut sent = vec![header(u64::from(seed))];
            for (i, (n, _)) in sizes.iter().enumerate() {
                let d: Vec<u8> = (0..*n).map(|j| (j as u8).wrapping_mul(31).wrapping_add(i as u8 ^ seed)).collect();
                sent.push(data_frame(Bytes::from(d)));
            }
            let mut items: Vec<Result<proto::ChunkFrame, Status>> = sent.iter().cloned().map(Ok).collect();
            if fail {
                items.push(Err(Status::data_loss("chunk 3 failed its checksum")));
            }
            // Our sender, except the data messages marked for prost.
            let ours = streaming_response(Ok(tonic::Response::new(
                Box::pin(tokio_stream::iter(items)) as ReplyStream<proto::ChunkFrame>,
            )));
            prop_assert_eq!(ours.headers()["content-type"].as_bytes(), b"application/grpc");
            let (mut wire, trailers) = split_wire(block_on(frames_of(ours.into_body())));
            let mut by_prost = Vec::new();
            for m in &sent {
                by_prost.extend_from_slice(&encode_message(m));
            }
            if sizes.iter().any(|(_, p)| *p) {
                // Mixed: the header and prost-marked messages by prost, the rest by MessageBody.
                wire.clear();
                wire.extend_from_slice(&encode_message(&sent[0]));
                for (m, (_, p)) in sent[1..].iter().zip(&sizes) {
                    if *p {
                        wire.extend_from_slice(&encode_message(m));
                    } else {
                        let d = m.clone().into_data().unwrap();
                        wire.extend_from_slice(&data_header(2, d.len()));
                        wire.extend_from_slice(&d);
                    }
                }
            } else {
                prop_assert_eq!(&wire, &by_prost, "MessageBody sends what prost encodes");
            }
            let (got, end) = block_on(read_all(reframe(&wire, &cuts, trailers)));
            prop_assert_eq!(got.len(), sent.len());
            for (g, s) in got.iter().zip(&sent) {
                match (g, s.clone().into_data()) {
                    (Reply::Data(slices), Ok(d)) => prop_assert_eq!(joined(slices), d.to_vec()),
                    (Reply::Message(m), Err(h)) => prop_assert_eq!(m, &h),
                    _ => prop_assert!(false, "a message came back as the other kind"),
                }
            }
            match end {
                Ok(()) => prop_assert!(!fail),
                Err(s) => {
                    prop_assert!(fail);
                    prop_assert_eq!(s.code(), Code::DataLoss);
                    prop_assert_eq!(s.message(), "chunk 3 failed its checksum");
                }
            }
        }

        /// A streamed request, sent by `MessageBody` (or by prost) and cut into any DATA frames,
        /// comes out of `RequestStream` as its header, then its data in order.
        #[test]
        fn requests_read_back_whatever_the_framing(
            sizes in proptest::collection::vec(0usize..70_000, 0..5),
            cuts in proptest::collection::vec(any::<usize>(), 0..40),
            by_prost in any::<bool>(),
        ) {
            let head = proto::ChunkWrite {
                part: Some(proto::chunk_write::Part::Header(proto::ChunkHeader {
                    reserve_bytes: 0,
                    update_scheme: 0,
                    segment_id: 4,
                    index: 1,
                    version: 2,
                    chunk_bytes: 9,
                    segment_length: 18,
                    applied: vec![],
                    target_osd: Some(3),
                })),
            };
            let data: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(i, n)| (0..*n).map(|j| (j * 7 + i) as u8).collect())
                .collect();
            let mut sent = vec![head.clone()];
            sent.extend(data.iter().map(|d| proto::ChunkWrite {
                part: Some(proto::chunk_write::Part::Data(Bytes::from(d.clone()))),
            }));
            let wire: Vec<u8> = if by_prost {
                sent.iter().flat_map(|m| encode_message(m).to_vec()).collect()
            } else {
                // Each data message sent as several slices (cut in three), one message each.
                let items: Vec<Result<Reply<proto::ChunkWrite>, Status>> = std::iter::once(
                    Reply::Message(head.clone()),
                )
                .chain(data.iter().map(|d| {
                    let b = Bytes::from(d.clone());
                    let (x, y) = (b.len() / 3, 2 * b.len() / 3);
                    Reply::Data(vec![b.slice(..x), b.slice(x..y), b.slice(y..)])
                }))
                .map(Ok)
                .collect();
                let body = Body::new(MessageBody {
                    stream: Box::pin(tokio_stream::iter(items)),
                    data: VecDeque::new(),
                    trailers: false,
                    done: false,
                });
                let (wire, trailers) = split_wire(block_on(frames_of(body)));
                prop_assert!(trailers.is_none(), "a request has no trailers");
                prop_assert_eq!(
                    &wire,
                    &sent.iter().flat_map(|m| encode_message(m).to_vec()).collect::<Vec<u8>>(),
                    "MessageBody sends what prost encodes"
                );
                wire
            };
            let got: Vec<Result<Reply<proto::ChunkWrite>, Status>> = block_on(async {
                RequestStream::<proto::ChunkWrite>::new(reframe(&wire, &cuts, None), 4 << 20)
                    .collect()
                    .await
            });
            prop_assert_eq!(got.len(), sent.len(), "one item per message");
            let mut got = got.into_iter().map(Result::unwrap);
            match got.next() {
                Some(Reply::Message(m)) => prop_assert_eq!(m, head),
                other => prop_assert!(false, "{:?}", other),
            }
            for (g, d) in got.zip(&data) {
                match g {
                    Reply::Data(slices) => prop_assert_eq!(&joined(&slices), d),
                    other => prop_assert!(false, "{:?}", other),
                }
            }
        }

        /// Any bytes and any framing end in messages or a clean error, never a panic.
        #[test]
        fn garbage_ends_in_a_clean_error(
            wire in proptest::collection::vec(any::<u8>(), 0..300),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
            trailers in any::<bool>(),
        ) {
            let t = trailers.then(|| status_headers(&Status::ok("")));
            let _ = block_on(read_all(reframe(&wire, &cuts, t)));
        }
    }

    fn ok_trailers() -> Option<http::HeaderMap> {
        Some(status_headers(&Status::ok("")))
    }

    fn error_of(wire: &[u8], trailers: Option<http::HeaderMap>) -> Status {
        block_on(read_all(reframe(wire, &[3], trailers)))
            .1
            .unwrap_err()
    }

    #[test]
    fn malformed_replies_are_named() {
        let s = error_of(&[1, 0, 0, 0, 2, 0x12, 0], ok_trailers());
        assert_eq!(s.code(), Code::Unimplemented);
        assert!(s.message().contains("compressed"), "{s:?}");
        let s = error_of(&[7, 0, 0, 0, 0], ok_trailers());
        assert!(s.message().contains("flag 7"), "{s:?}");
        let s = error_of(&[0, 0xff, 0, 0, 0], ok_trailers());
        assert_eq!(s.code(), Code::OutOfRange);
        let s = error_of(&[0, 0, 0, 0, 9, 0x12, 7, 1, 2], ok_trailers());
        assert!(
            s.message().contains("ended inside a message of 9 bytes"),
            "{s:?}"
        );
        let s = error_of(&[0, 0, 0], ok_trailers());
        assert!(s.message().contains("inside a message prefix"), "{s:?}");
        let s = error_of(&[0, 0, 0, 0, 2, 0x12, 0], None);
        assert!(s.message().contains("without a status"), "{s:?}");
        // A length beyond the message: not the fast path, and prost refuses it.
        let s = error_of(&[0, 0, 0, 0, 3, 0x12, 9, 1], ok_trailers());
        assert!(s.message().contains("cannot decode"), "{s:?}");
    }

    #[test]
    fn a_data_message_with_other_fields_still_decodes() {
        // DataFrame's data (field 1) followed by an unknown field 5 (varint 1): not the fast
        // path; prost skips the unknown field.
        let msg = [0x0a, 3, b'a', b'b', b'c', 0x28, 1];
        let mut wire = vec![0, 0, 0, 0, msg.len() as u8];
        wire.extend_from_slice(&msg);
        let mut reader: ReplyReader<proto::DataFrame> = ReplyReader::new(MessageReader::new(
            reframe(&wire, &[2, 9], ok_trailers()),
            1 << 20,
        ));
        match block_on(reader.next()).unwrap() {
            Some(Reply::Data(d)) => assert_eq!(joined(&d), b"abc"),
            other => panic!("{other:?}"),
        }
        assert!(block_on(reader.next()).unwrap().is_none());
    }

    #[test]
    fn a_request_is_one_message() {
        let req = proto::GetChunkRequest {
            segment_id: 5,
            index: 1,
            offset: 2,
            length: 3,
            target_osd: Some(4),
        };
        let wire = encode_message(&req);
        let got: proto::GetChunkRequest =
            block_on(read_request(reframe(&wire, &[1, 6], None), 1 << 10)).unwrap();
        assert_eq!(got, req);
        let mut two = wire.to_vec();
        two.extend_from_slice(&wire);
        let e = block_on(read_request::<proto::GetChunkRequest>(
            reframe(&two, &[], None),
            1 << 10,
        ))
        .unwrap_err();
        assert!(e.message().contains("more than one message"), "{e:?}");
        let e = block_on(read_request::<proto::GetChunkRequest>(
            reframe(&[], &[], None),
            1 << 10,
        ))
        .unwrap_err();
        assert!(e.message().contains("no message"), "{e:?}");
    }

    #[test]
    fn the_data_paths_are_the_generated_services() {
        for (path, method) in [
            (GET_CHUNK_PATH, "GetChunk"),
            (READ_SEGMENT_PATH, "ReadSegment"),
        ] {
            assert_eq!(
                path,
                format!("/{}/{method}", proto::osd_server::SERVICE_NAME)
            );
        }
    }
}
