//! The OSD's gRPC handlers (`proto/osd.proto`): each decodes its request into domain types, calls
//! the operation (`write.rs`, `read.rs`, `update/`, `chunk.rs`, `delete.rs`), records its result
//! and latency, and turns an [`OsdError`] into a status code here, at the edge, only:
//!
//! | [`OsdError`] | status code | the caller's [`crate::api::OsdCallError`] |
//! |---|---|---|
//! | `Invalid` | `INVALID_ARGUMENT` | `Invalid` |
//! | `OutOfRange` | `OUT_OF_RANGE` | `Invalid` |
//! | `NotFound` | `NOT_FOUND` | `NotFound` |
//! | `StaleLayout` | `FAILED_PRECONDITION` | `StaleLayout` (retryable) |
//! | `NoLease`, `Mds` | `UNAVAILABLE` | `Unreachable` (retryable) |
//! | `NotDurable` | `ABORTED` | `NotDurable` (retryable) |
//! | `Unrecoverable` | `DATA_LOSS` | `Unrecoverable` |
//! | `Request` | the request stream's own status, unchanged | |
//! | `Internal` | `INTERNAL` | `Remote` |
//! | `Refused` | `RESOURCE_EXHAUSTED` with metadata `ecstack-refused: 1` | `Refused` (go elsewhere) |
//!
//! The four calls that carry chunk data reach the same handlers through [`crate::wire`] too
//! (`server.rs`).

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::admission::StreamKind;
use crate::api::{
    self, layout_from_proto, meta_from_proto, meta_to_proto, DeltaStamp, Layout, SegmentAge,
    StreamPriority,
};
use crate::error::OsdError;
use crate::metrics::{Metrics, OPS};
use crate::proto;
use crate::robust::InBlock;
use crate::service::{check_layout, Osd};
use crate::update::ChunkUpdate;
use crate::update::Scheme;
use crate::wire;

impl From<OsdError> for Status {
    fn from(e: OsdError) -> Status {
        match e {
            OsdError::Invalid(m) => Status::invalid_argument(m),
            OsdError::OutOfRange(m) => Status::out_of_range(m),
            OsdError::NotFound(m) => Status::not_found(m),
            OsdError::StaleLayout(m) => Status::failed_precondition(m),
            OsdError::NoLease(m) | OsdError::Mds(m) => Status::unavailable(m),
            OsdError::NotDurable(m) => Status::aborted(m),
            OsdError::Unrecoverable(m) => Status::data_loss(m),
            OsdError::Request(source) => match source.downcast::<Status>() {
                Ok(s) => *s,
                Err(e) => Status::internal(e.to_string()),
            },
            OsdError::Internal(m) => Status::internal(m),
            OsdError::Refused(m) => {
                let mut s = Status::resource_exhausted(m);
                s.metadata_mut().insert(
                    api::REFUSED_KEY,
                    tonic::metadata::MetadataValue::from_static("1"),
                );
                s
            }
        }
    }
}

/// A request stream's own failure, kept as it came for the reply.
fn request_error(s: Status) -> OsdError {
    OsdError::Request(Box::new(s))
}

/// What a WriteSegment's metadata says of its segment (the value of [`api::NEW_SEGMENT_KEY`]).
pub(crate) fn segment_age(value: Option<&[u8]>) -> SegmentAge {
    match value {
        Some(b"1") => SegmentAge::New,
        _ => SegmentAge::Existing,
    }
}

type FrameStream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

fn frames<T: Send + 'static>(
    first: Option<T>,
    data: impl Into<Bytes>,
    wrap: fn(Bytes) -> T,
) -> FrameStream<T> {
    let mut items: Vec<Result<T, Status>> = first.into_iter().map(Ok).collect();
    items.extend(
        api::slice_frames(data.into())
            .into_iter()
            .map(|c| Ok(wrap(c))),
    );
    Box::pin(tokio_stream::iter(items))
}

/// The layout of a request, decoded.
fn request_layout(l: Option<&proto::Layout>) -> Result<Layout, OsdError> {
    l.map(layout_from_proto)
        .ok_or_else(|| OsdError::Invalid("request carries no layout".into()))?
        .map_err(OsdError::Invalid)
}

impl Osd {
    /// Run one RPC's work and record its result and latency under `op` (an index of [`OPS`]);
    /// its error as a status.
    async fn timed<T>(
        &self,
        op: &str,
        f: impl Future<Output = Result<T, OsdError>>,
    ) -> Result<T, Status> {
        let started = std::time::Instant::now();
        let r = f.await;
        let i = OPS.iter().position(|o| *o == op).unwrap_or(OPS.len());
        self.inner.metrics.record(i, r.is_ok(), started.elapsed());
        r.map_err(Status::from)
    }

    /// WriteSegment's handler over any stream of its messages (tonic's, or [`crate::wire`]'s).
    pub(crate) async fn write_segment_from(
        &self,
        mut s: impl tokio_stream::Stream<Item = Result<wire::Reply<proto::SegmentWrite>, Status>>
            + Unpin
            + Send,
        age: SegmentAge,
    ) -> Result<proto::WriteSegmentReply, Status> {
        self.timed("write_segment", async move {
            let layout = match s.next().await {
                Some(Ok(wire::Reply::Message(proto::SegmentWrite {
                    part: Some(proto::segment_write::Part::Layout(l)),
                }))) => layout_from_proto(&l).map_err(OsdError::Invalid)?,
                Some(Err(e)) => return Err(request_error(e)),
                _ => {
                    return Err(OsdError::Invalid(
                        "WriteSegment must start with the layout".into(),
                    ))
                }
            };
            check_layout(&layout, self.n()).map_err(OsdError::Invalid)?;
            let frames = s.map(|m| match m.map_err(request_error)? {
                wire::Reply::Data(slices) => Ok(slices),
                wire::Reply::Message(_) => {
                    Err(OsdError::Invalid("WriteSegment: a second layout".into()))
                }
            });
            let ack = self.write_frames(layout, age, frames).await?;
            Ok(proto::WriteSegmentReply {
                version: ack.version,
                stale: ack.stale,
            })
        })
        .await
    }

    /// PutChunk's handler over any stream of its messages (tonic's, or [`crate::wire`]'s).
    pub(crate) async fn put_chunk_from(
        &self,
        mut s: impl tokio_stream::Stream<Item = Result<wire::Reply<proto::ChunkWrite>, Status>>
            + Unpin
            + Send,
    ) -> Result<proto::PutChunkReply, Status> {
        self.timed("put_chunk", async move {
            let meta = match s.next().await {
                Some(Ok(wire::Reply::Message(proto::ChunkWrite {
                    part: Some(proto::chunk_write::Part::Header(h)),
                }))) => {
                    self.check_target(h.target_osd)?;
                    meta_from_proto(&h).map_err(OsdError::Invalid)?
                }
                Some(Err(e)) => return Err(request_error(e)),
                _ => {
                    return Err(OsdError::Invalid(
                        "PutChunk must start with the header".into(),
                    ))
                }
            };
            let frames = s.map(|m| match m.map_err(request_error)? {
                wire::Reply::Data(slices) => Ok(slices),
                wire::Reply::Message(_) => {
                    Err(OsdError::Invalid("PutChunk: a second header".into()))
                }
            });
            self.put_chunk_here(meta, frames).await?;
            Ok(proto::PutChunkReply {})
        })
        .await
    }
}

#[tonic::async_trait]
impl proto::osd_server::Osd for Osd {
    async fn write_segment(
        &self,
        req: Request<Streaming<proto::SegmentWrite>>,
    ) -> Result<Response<proto::WriteSegmentReply>, Status> {
        let age = segment_age(
            req.metadata()
                .get(api::NEW_SEGMENT_KEY)
                .map(|v| v.as_bytes()),
        );
        let messages = req.into_inner().map(|m| m.map(wire::Reply::from_message));
        self.write_segment_from(messages, age)
            .await
            .map(Response::new)
    }

    type ReadSegmentStream = FrameStream<proto::DataFrame>;

    async fn read_segment(
        &self,
        req: Request<proto::ReadSegmentRequest>,
    ) -> Result<Response<Self::ReadSegmentStream>, Status> {
        self.timed("read_segment", async move {
            let r = req.into_inner();
            let l = request_layout(r.layout.as_ref())?;
            let frames = self.read_stream(l, r.offset, r.length).await?;
            let reply: Self::ReadSegmentStream = Box::pin(frames.map(|f| {
                f.map(|f| proto::DataFrame {
                    data: f.data,
                    at: f.at,
                })
                .map_err(Status::from)
            }));
            Ok(Response::new(reply))
        })
        .await
    }

    async fn read_plan(
        &self,
        req: Request<proto::ReadPlanRequest>,
    ) -> Result<Response<proto::ReadPlanReply>, Status> {
        self.timed("read_plan", async move {
            let r = req.into_inner();
            let l = request_layout(r.layout.as_ref())?;
            let plan = self.plan_read(l, r.offset, r.length).await?;
            Ok(Response::new(proto::ReadPlanReply {
                direct: plan.is_some(),
                versions: plan.unwrap_or_default(),
            }))
        })
        .await
    }

    async fn update_segment(
        &self,
        req: Request<proto::UpdateSegmentRequest>,
    ) -> Result<Response<proto::UpdateSegmentReply>, Status> {
        self.timed("update_segment", async move {
            let r = req.into_inner();
            let l = request_layout(r.layout.as_ref())?;
            Metrics::add(&self.inner.metrics.bytes_in, r.data.len() as u64);
            let ack = self.update(l, r.offset, Vec::from(r.data)).await?;
            Ok(Response::new(proto::UpdateSegmentReply {
                version: ack.version,
                stale: ack.stale,
            }))
        })
        .await
    }

    async fn put_chunk(
        &self,
        req: Request<Streaming<proto::ChunkWrite>>,
    ) -> Result<Response<proto::PutChunkReply>, Status> {
        let messages = req.into_inner().map(|m| m.map(wire::Reply::from_message));
        self.put_chunk_from(messages).await.map(Response::new)
    }

    type GetChunkStream = FrameStream<proto::ChunkFrame>;

    async fn get_chunk(
        &self,
        req: Request<proto::GetChunkRequest>,
    ) -> Result<Response<Self::GetChunkStream>, Status> {
        self.timed("get_chunk", async move {
            let r = req.into_inner();
            self.check_target(r.target_osd)?;
            let (meta, data) = self
                .get_chunk_here(r.segment_id, r.index, r.offset, r.length)
                .await?;
            let header = proto::ChunkFrame {
                part: Some(proto::chunk_frame::Part::Header(meta_to_proto(&meta))),
            };
            Ok(Response::new(frames(Some(header), data, |d| {
                proto::ChunkFrame {
                    part: Some(proto::chunk_frame::Part::Data(d)),
                }
            })))
        })
        .await
    }

    async fn update_chunk(
        &self,
        req: Request<proto::UpdateChunkRequest>,
    ) -> Result<Response<proto::UpdateChunkReply>, Status> {
        self.timed("update_chunk", async move {
            let r = req.into_inner();
            self.check_target(r.target_osd)?;
            let update = ChunkUpdate {
                segment: r.segment_id,
                index: r.index,
                offset: r.offset,
                data: Vec::from(r.data),
                version: r.version,
                expected: r.expected_version,
                parity: r.parity.iter().map(api::holder_from_proto).collect(),
                scheme: Scheme::from_code(r.update_scheme).map_err(OsdError::Invalid)?,
            };
            let stale = self.update_chunk_here(update).await?;
            Ok(Response::new(proto::UpdateChunkReply { stale }))
        })
        .await
    }

    async fn apply_delta(
        &self,
        req: Request<proto::ApplyDeltaRequest>,
    ) -> Result<Response<proto::ApplyDeltaReply>, Status> {
        self.timed("apply_delta", async move {
            let r = req.into_inner();
            self.check_target(r.target_osd)?;
            let stamp = DeltaStamp {
                from: r.from_index,
                prior: r.prior_version,
                version: r.version,
            };
            let extents =
                api::extents_from_proto(r.offset, r.delta.len(), &r.extents).map_err(|e| {
                    OsdError::Invalid(format!(
                        "segment {:#x} chunk {}: {e}",
                        r.segment_id, r.index
                    ))
                })?;
            let scheme = Scheme::from_code(r.update_scheme).map_err(OsdError::Invalid)?;
            self.apply_delta_here(
                r.segment_id,
                r.index,
                extents,
                Vec::from(r.delta),
                stamp,
                scheme,
            )
            .await?;
            Ok(Response::new(proto::ApplyDeltaReply {}))
        })
        .await
    }

    async fn chunk_version(
        &self,
        req: Request<proto::ChunkVersionRequest>,
    ) -> Result<Response<proto::ChunkVersionReply>, Status> {
        self.timed("chunk_version", async move {
            let r = req.into_inner();
            self.check_target(r.target_osd)?;
            let meta = self.chunk_meta_here(r.segment_id, r.index).await?;
            Ok(Response::new(match meta {
                Some(m) => proto::ChunkVersionReply {
                    present: true,
                    version: m.version,
                    applied: m.applied,
                },
                None => proto::ChunkVersionReply::default(),
            }))
        })
        .await
    }

    type PutBlocksStream = FrameStream<proto::BlockAck>;

    /// The header, the admission, then the blocks' acknowledgements as they become durable
    /// (`robust.rs`); a refusal is the call's status, before any reply.
    async fn put_blocks(
        &self,
        req: Request<Streaming<proto::BlockWrite>>,
    ) -> Result<Response<Self::PutBlocksStream>, Status> {
        self.timed("put_blocks", async move {
            let mut s = req.into_inner();
            let h = match s.next().await {
                Some(Ok(proto::BlockWrite {
                    part: Some(proto::block_write::Part::Header(h)),
                })) => h,
                Some(Err(e)) => return Err(request_error(e)),
                _ => {
                    return Err(OsdError::Invalid(
                        "PutBlocks must start with the header".into(),
                    ))
                }
            };
            self.check_target(h.target_osd)?;
            let object = h.object_id;
            if h.block_bytes == 0 || h.block_bytes > api::MAX_BLOCK_BYTES {
                return Err(OsdError::Invalid(format!(
                    "PutBlocks of object {object:#x}: block size {} is outside 1..={}",
                    h.block_bytes,
                    api::MAX_BLOCK_BYTES
                )));
            }
            let priority = StreamPriority::from_proto(h.priority);
            let what = format!("PutBlocks of object {object:#x}");
            let ticket = self.admit(StreamKind::Write, priority, &what)?;
            let blocks = s.map(move |m| match m.map_err(request_error)?.part {
                Some(proto::block_write::Part::Block(b)) => Ok(InBlock {
                    key: api::BlockKey {
                        id: b.id,
                        version: b.version,
                    },
                    data: b.data,
                }),
                _ => Err(OsdError::Invalid(format!(
                    "PutBlocks of object {object:#x}: a second header"
                ))),
            });
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            let osd = self.clone();
            let block_bytes = h.block_bytes;
            tokio::spawn(async move {
                osd.put_blocks_here(object, block_bytes, priority, ticket, blocks, tx)
                    .await
            });
            let admitted = proto::BlockAck {
                admitted: true,
                block: None,
            };
            let acks = tokio_stream::wrappers::ReceiverStream::new(rx).map(|a| {
                a.map(|k| proto::BlockAck {
                    admitted: false,
                    block: Some(proto::BlockKey {
                        id: k.id,
                        version: k.version,
                    }),
                })
                .map_err(Status::from)
            });
            let reply: Self::PutBlocksStream =
                Box::pin(tokio_stream::iter([Ok(admitted)]).chain(acks));
            Ok(Response::new(reply))
        })
        .await
    }

    type GetBlocksStream = FrameStream<proto::BlockFrame>;

    async fn get_blocks(
        &self,
        req: Request<proto::GetBlocksRequest>,
    ) -> Result<Response<Self::GetBlocksStream>, Status> {
        self.timed("get_blocks", async move {
            let r = req.into_inner();
            self.check_target(r.target_osd)?;
            let priority = StreamPriority::from_proto(r.priority);
            let frames = self
                .get_blocks_here(r.object_id, r.max_version, priority)
                .await?;
            let admitted = proto::BlockFrame {
                admitted: true,
                ..Default::default()
            };
            let blocks = frames.map(|b| {
                b.map(|(k, data)| proto::BlockFrame {
                    admitted: false,
                    block: Some(proto::BlockKey {
                        id: k.id,
                        version: k.version,
                    }),
                    data,
                })
                .map_err(Status::from)
            });
            let reply: Self::GetBlocksStream =
                Box::pin(tokio_stream::iter([Ok(admitted)]).chain(blocks));
            Ok(Response::new(reply))
        })
        .await
    }

    async fn delete_blocks(
        &self,
        req: Request<proto::DeleteBlocksRequest>,
    ) -> Result<Response<proto::DeleteBlocksReply>, Status> {
        self.timed("delete_blocks", async move {
            let r = req.into_inner();
            self.check_target(r.target_osd)?;
            let keys = r
                .blocks
                .iter()
                .map(|k| api::BlockKey {
                    id: k.id,
                    version: k.version,
                })
                .collect();
            let deleted = self.delete_blocks_here(r.object_id, keys).await?;
            Ok(Response::new(proto::DeleteBlocksReply { deleted }))
        })
        .await
    }

    async fn delete_chunk(
        &self,
        req: Request<proto::DeleteChunkRequest>,
    ) -> Result<Response<proto::DeleteChunkReply>, Status> {
        self.timed("delete_chunk", async move {
            let r = req.into_inner();
            self.check_target(r.target_osd)?;
            self.delete_chunk_here(r.segment_id, r.index).await?;
            Ok(Response::new(proto::DeleteChunkReply {}))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every domain error travels as the code the caller's `OsdCallError::from_status` maps back
    /// to the same meaning (and the same retryability).
    #[test]
    fn domain_errors_map_to_the_codes_callers_read() {
        use crate::api::OsdCallError;
        let m = || "segment 0x1: m".to_owned();
        let cases = [
            (OsdError::Invalid(m()), tonic::Code::InvalidArgument),
            (OsdError::OutOfRange(m()), tonic::Code::OutOfRange),
            (OsdError::NotFound(m()), tonic::Code::NotFound),
            (OsdError::StaleLayout(m()), tonic::Code::FailedPrecondition),
            (OsdError::NoLease(m()), tonic::Code::Unavailable),
            (OsdError::Mds(m()), tonic::Code::Unavailable),
            (OsdError::NotDurable(m()), tonic::Code::Aborted),
            (OsdError::Unrecoverable(m()), tonic::Code::DataLoss),
            (OsdError::Internal(m()), tonic::Code::Internal),
            (OsdError::Refused(m()), tonic::Code::ResourceExhausted),
        ];
        for (e, code) in cases {
            let retryable = e.retryable();
            let s = Status::from(e);
            assert_eq!((s.code(), s.message()), (code, m().as_str()));
            let back = OsdCallError::from_status("a:1", &s);
            assert_eq!(back.is_retryable(), retryable, "{back:?}");
        }
        let s = Status::from(request_error(Status::cancelled("gone")));
        assert_eq!((s.code(), s.message()), (tonic::Code::Cancelled, "gone"));
    }
}
