//! A robust object's coded blocks on an OSD (RobuSTore, docs/robustore.md "On the cluster"): the
//! client side of `PutBlocks`, `GetBlocks` and `DeleteBlocks`. A block stream is admitted or
//! refused as it opens ([`OsdCallError::Refused`]: go to another OSD); a [`BlockWriter`] sends
//! blocks and hears which are durable, a [`BlockReader`] receives every block the OSD holds of the
//! object in stored order, and dropping it cancels the rest at the OSD.

use std::collections::VecDeque;

use bytes::Bytes;
use tokio_stream::StreamExt;

use crate::api::{OsdCallError, OsdClient};
use crate::proto;

pub use ecstack_mds_proto::RobustBlockKey as BlockKey;
pub use ecstack_rpc::retry::REFUSED_KEY;

/// The largest coded block an OSD stores: a block and its framing fit one streamed message
/// ([`ecstack_rpc::limits::STREAM_MESSAGE_BYTES_MAX`]) with room to spare, and its 4 KiB
/// checksums fit the record head of the block file (docs/cluster.md "Robust blocks").
pub const MAX_BLOCK_BYTES: u32 = 2 << 20;

const _: () =
    assert!(2 * MAX_BLOCK_BYTES as usize <= ecstack_rpc::limits::STREAM_MESSAGE_BYTES_MAX);

/// Blocks a [`BlockWriter`] queues ahead of the stream before [`BlockWriter::send`] waits.
pub const WRITER_BLOCKS_AHEAD: usize = 4;

/// The admission class of a block stream: a high-priority stream may preempt a normal one at a
/// full OSD (the preempted stream ends with [`OsdCallError::Refused`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum StreamPriority {
    #[default]
    Normal,
    High,
}

impl StreamPriority {
    pub fn to_proto(self) -> proto::StreamPriority {
        match self {
            StreamPriority::Normal => proto::StreamPriority::Normal,
            StreamPriority::High => proto::StreamPriority::High,
        }
    }

    /// The priority a request carries (an unknown value counts as normal).
    pub fn from_proto(code: i32) -> StreamPriority {
        match proto::StreamPriority::try_from(code) {
            Ok(proto::StreamPriority::High) => StreamPriority::High,
            _ => StreamPriority::Normal,
        }
    }
}

fn key_to_proto(k: BlockKey) -> proto::BlockKey {
    proto::BlockKey {
        id: k.id,
        version: k.version,
    }
}

fn key_from_proto(k: &proto::BlockKey) -> BlockKey {
    BlockKey {
        id: k.id,
        version: k.version,
    }
}

impl OsdClient {
    /// Opens a PutBlocks stream and waits for the admission reply; Err(OsdCallError::Refused{..})
    /// if refused. Every block sent must be `block_bytes` long (at most [`MAX_BLOCK_BYTES`]);
    /// `expected_bytes` is what the stream will carry (0: unknown).
    pub async fn put_blocks(
        &self,
        object_id: u64,
        block_bytes: u32,
        priority: StreamPriority,
        expected_bytes: u64,
    ) -> Result<BlockWriter, OsdCallError> {
        if block_bytes == 0 || block_bytes > MAX_BLOCK_BYTES {
            return Err(OsdCallError::Invalid {
                addr: self.addr.clone(),
                message: format!(
                    "object {object_id:#x}: block size {block_bytes} is outside 1..={MAX_BLOCK_BYTES}"
                ),
            });
        }
        let header = proto::BlockWrite {
            part: Some(proto::block_write::Part::Header(proto::BlocksHeader {
                object_id,
                block_bytes,
                target_osd: self.target,
                priority: priority.to_proto() as i32,
                expected_bytes,
            })),
        };
        let (tx, rx) = tokio::sync::mpsc::channel(WRITER_BLOCKS_AHEAD);
        let requests =
            tokio_stream::iter([header]).chain(tokio_stream::wrappers::ReceiverStream::new(rx));
        let mut acks = self
            .raw
            .clone()
            .put_blocks(requests)
            .await
            .map_err(|s| self.err(s))?
            .into_inner();
        match acks.message().await.map_err(|s| self.err(s))? {
            Some(proto::BlockAck { admitted: true, .. }) => {}
            Some(_) => return Err(self.protocol("PutBlocks reply does not start with admitted")),
            None => return Err(self.protocol("PutBlocks ended before its admission reply")),
        }
        Ok(BlockWriter {
            addr: self.addr.clone(),
            object_id,
            block_bytes,
            tx: Some(tx),
            acks,
            pending: VecDeque::new(),
            ended: None,
        })
    }

    /// Opens a GetBlocks stream and waits for the admission frame. `max_version`: of each coded
    /// id, the newest block whose version is at most this (0: any).
    pub async fn get_blocks(
        &self,
        object_id: u64,
        max_version: u64,
        priority: StreamPriority,
    ) -> Result<BlockReader, OsdCallError> {
        let req = proto::GetBlocksRequest {
            object_id,
            target_osd: self.target,
            priority: priority.to_proto() as i32,
            max_version,
        };
        let mut frames = self
            .raw
            .clone()
            .get_blocks(req)
            .await
            .map_err(|s| self.err(s))?
            .into_inner();
        match frames.message().await.map_err(|s| self.err(s))? {
            Some(proto::BlockFrame { admitted: true, .. }) => {}
            Some(_) => return Err(self.protocol("GetBlocks reply does not start with admitted")),
            None => return Err(self.protocol("GetBlocks ended before its admission frame")),
        }
        Ok(BlockReader {
            addr: self.addr.clone(),
            object_id,
            frames,
        })
    }

    /// Deletes blocks of an object (`blocks` empty: every block of it this OSD holds); how many
    /// were deleted. Blocks already gone are not an error.
    pub async fn delete_blocks(
        &self,
        object_id: u64,
        blocks: &[BlockKey],
    ) -> Result<u32, OsdCallError> {
        let reply = self
            .raw
            .clone()
            .delete_blocks(proto::DeleteBlocksRequest {
                object_id,
                target_osd: self.target,
                blocks: blocks.iter().map(|&k| key_to_proto(k)).collect(),
            })
            .await
            .map_err(|s| self.err(s))?
            .into_inner();
        Ok(reply.deleted)
    }
}

/// An admitted PutBlocks stream ([`OsdClient::put_blocks`]).
pub struct BlockWriter {
    addr: String,
    object_id: u64,
    block_bytes: u32,
    /// `None` once closed.
    tx: Option<tokio::sync::mpsc::Sender<proto::BlockWrite>>,
    acks: tonic::Streaming<proto::BlockAck>,
    /// Acknowledgements read while finding out why the stream ended under a send.
    pending: VecDeque<BlockKey>,
    /// How the stream ended, once known: `Ok` for a clean end.
    ended: Option<Result<(), OsdCallError>>,
}

impl std::fmt::Debug for BlockWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "BlockWriter({}, object {:#x})",
            self.addr, self.object_id
        )
    }
}

impl BlockWriter {
    fn err(&self, s: tonic::Status) -> OsdCallError {
        OsdCallError::from_status(&self.addr, &s)
    }

    /// Reads the reply stream to its end (a send found the stream gone): its acknowledgements wait
    /// in `pending` for [`BlockWriter::ack`], its end in `ended`.
    async fn drain(&mut self) {
        while self.ended.is_none() {
            match self.acks.message().await {
                Ok(Some(a)) => match a.block {
                    Some(k) => self.pending.push_back(key_from_proto(&k)),
                    None => {
                        self.ended = Some(Err(OsdCallError::Protocol {
                            addr: self.addr.clone(),
                            message: "PutBlocks acknowledgement without a block".into(),
                        }))
                    }
                },
                Ok(None) => self.ended = Some(Ok(())),
                Err(s) => self.ended = Some(Err(self.err(s))),
            }
        }
    }

    /// Queues one block (bounded: waits when the stream is a few blocks ahead). If the OSD ended
    /// the stream (an error, a preemption), that end is the error; the acknowledgements that came
    /// before it are still [`BlockWriter::ack`]'s.
    pub async fn send(&mut self, key: BlockKey, data: Bytes) -> Result<(), OsdCallError> {
        if data.len() != self.block_bytes as usize {
            return Err(OsdCallError::Invalid {
                addr: self.addr.clone(),
                message: format!(
                    "object {:#x} block {}@{}: {} bytes, the stream's blocks are {}",
                    self.object_id,
                    key.id,
                    key.version,
                    data.len(),
                    self.block_bytes
                ),
            });
        }
        let Some(tx) = &self.tx else {
            return Err(OsdCallError::Invalid {
                addr: self.addr.clone(),
                message: format!("object {:#x}: send after close", self.object_id),
            });
        };
        let block = proto::BlockWrite {
            part: Some(proto::block_write::Part::Block(proto::Block {
                id: key.id,
                version: key.version,
                data,
            })),
        };
        if tx.send(block).await.is_ok() {
            return Ok(());
        }
        // The call ended under us: its status says why (the acknowledgements before it stay
        // for ack()).
        self.tx = None;
        self.drain().await;
        match &self.ended {
            // The stream's own end (a refusal stays a refusal: the writer moves elsewhere).
            Some(Err(e)) => Err(clone_error(e)),
            _ => Err(OsdCallError::Protocol {
                addr: self.addr.clone(),
                message: "the OSD ended the PutBlocks stream before its blocks did".into(),
            }),
        }
    }

    /// The next durable block; Ok(None) once the stream ended after close(). Cancel-safe (usable
    /// in tokio::select!).
    pub async fn ack(&mut self) -> Result<Option<BlockKey>, OsdCallError> {
        if let Some(k) = self.pending.pop_front() {
            return Ok(Some(k));
        }
        if let Some(end) = &self.ended {
            return match end {
                Ok(()) => Ok(None),
                Err(e) => Err(clone_error(e)),
            };
        }
        match self.acks.message().await {
            Ok(Some(proto::BlockAck { block: Some(k), .. })) => Ok(Some(key_from_proto(&k))),
            Ok(Some(_)) => {
                let e = OsdCallError::Protocol {
                    addr: self.addr.clone(),
                    message: "PutBlocks acknowledgement without a block".into(),
                };
                self.ended = Some(Err(clone_error(&e)));
                Err(e)
            }
            Ok(None) => {
                self.ended = Some(Ok(()));
                Ok(None)
            }
            Err(s) => {
                let e = self.err(s);
                self.ended = Some(Err(clone_error(&e)));
                Err(e)
            }
        }
    }

    /// No more blocks: the OSD finishes what it has and the acks end.
    pub fn close(&mut self) {
        self.tx = None;
    }
}

/// The same error again (an ended stream answers every later call with its end).
fn clone_error(e: &OsdCallError) -> OsdCallError {
    use OsdCallError as E;
    match e {
        E::Unreachable { addr, message } => E::Unreachable {
            addr: addr.clone(),
            message: message.clone(),
        },
        E::StaleLayout { addr, message } => E::StaleLayout {
            addr: addr.clone(),
            message: message.clone(),
        },
        E::NotDurable { addr, message } => E::NotDurable {
            addr: addr.clone(),
            message: message.clone(),
        },
        E::Unrecoverable { addr, message } => E::Unrecoverable {
            addr: addr.clone(),
            message: message.clone(),
        },
        E::NotFound { addr, message } => E::NotFound {
            addr: addr.clone(),
            message: message.clone(),
        },
        E::Invalid { addr, message } => E::Invalid {
            addr: addr.clone(),
            message: message.clone(),
        },
        E::Remote {
            addr,
            code,
            message,
        } => E::Remote {
            addr: addr.clone(),
            code: *code,
            message: message.clone(),
        },
        E::Unauthenticated { addr, message } => E::Unauthenticated {
            addr: addr.clone(),
            message: message.clone(),
        },
        E::Protocol { addr, message } => E::Protocol {
            addr: addr.clone(),
            message: message.clone(),
        },
        E::Refused { addr, msg } => E::Refused {
            addr: addr.clone(),
            msg: msg.clone(),
        },
        E::Security(s) => E::Protocol {
            addr: String::new(),
            message: s.to_string(),
        },
    }
}

/// An admitted GetBlocks stream ([`OsdClient::get_blocks`]). Dropping it cancels the blocks the
/// OSD has not read yet (the one it is reading stops at its next 4 KiB).
pub struct BlockReader {
    addr: String,
    object_id: u64,
    frames: tonic::Streaming<proto::BlockFrame>,
}

impl std::fmt::Debug for BlockReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "BlockReader({}, object {:#x})",
            self.addr, self.object_id
        )
    }
}

impl BlockReader {
    /// The next block in stored order; Ok(None) at the end. Dropping the reader cancels the rest
    /// at the OSD. Cancel-safe.
    pub async fn next(&mut self) -> Result<Option<(BlockKey, Bytes)>, OsdCallError> {
        match self.frames.message().await {
            Ok(Some(proto::BlockFrame {
                block: Some(k),
                data,
                admitted: false,
            })) => Ok(Some((key_from_proto(&k), data))),
            Ok(Some(_)) => Err(OsdCallError::Protocol {
                addr: self.addr.clone(),
                message: format!(
                    "GetBlocks of object {:#x}: a frame without a block",
                    self.object_id
                ),
            }),
            Ok(None) => Ok(None),
            Err(s) => Err(OsdCallError::from_status(&self.addr, &s)),
        }
    }
}
