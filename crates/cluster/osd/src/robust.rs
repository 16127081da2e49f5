//! PutBlocks, GetBlocks and DeleteBlocks at an OSD (RobuSTore's coded blocks; docs/robustore.md
//! "On the cluster"): a stream is admitted or refused (`admission.rs`), then its blocks go through
//! the OSD's block I/O queue (`blockio.rs`). A PutBlocks stream's blocks are appended in groups
//! (those that arrived while the previous group was written: one fdatasync each) and acknowledged
//! once durable. A GetBlocks stream reads the object's blocks in stored order, a few ahead of what
//! the client has taken; dropping the reply cancels the rest. DeleteBlocks appends a deletion
//! record (no rewrite); [`Osd::compact_blocks_pass`] (the daemon runs it periodically) gives the
//! dead space back through the block I/O queue's low lane.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio_stream::{Stream, StreamExt};

use crate::admission::{StreamKind, Ticket, Verdict};
use crate::api::{BlockKey, StreamPriority};
use crate::blockio::{BlockIo, StreamCtl};
use crate::chunk_store::{BlockTable, ChunkStoreError};
use crate::error::OsdError;
use crate::metrics::Metrics;
use crate::service::Osd;

/// Blocks of a GetBlocks stream read ahead of the one the client takes.
pub const READ_AHEAD_BLOCKS: usize = 2;
/// A PutBlocks group is written once it holds this many bytes (or the stream waits).
pub const WRITE_GROUP_BYTES: usize = 8 << 20;

/// One block of a PutBlocks stream.
pub(crate) struct InBlock {
    pub key: BlockKey,
    pub data: Bytes,
}

/// What a GetBlocks stream sends: a block, or how it ended.
pub(crate) type OutBlock = Result<(BlockKey, Bytes), OsdError>;

/// A GetBlocks reply: its blocks as they are read; dropping it cancels the reads not done.
pub(crate) struct BlockFrames {
    rx: tokio::sync::mpsc::Receiver<OutBlock>,
    io: Arc<BlockIo>,
    ctl: Arc<StreamCtl>,
}

impl Stream for BlockFrames {
    type Item = OutBlock;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<OutBlock>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for BlockFrames {
    fn drop(&mut self) {
        self.io.cancel(&self.ctl);
    }
}

/// Of each coded id, the newest block whose version is at most `max_version` (0: any), in
/// stored order: the positions in the table to read.
pub fn blocks_to_serve(table: &BlockTable, max_version: u64) -> Vec<usize> {
    let mut newest: HashMap<u32, (u64, usize)> = HashMap::new();
    for (i, b) in table.blocks.iter().enumerate() {
        if max_version != 0 && b.key.version > max_version {
            continue;
        }
        let e = newest.entry(b.key.id).or_insert((b.key.version, i));
        if b.key.version >= e.0 {
            *e = (b.key.version, i);
        }
    }
    let mut out: Vec<usize> = newest.into_values().map(|(_, i)| i).collect();
    out.sort_unstable();
    out
}

impl Osd {
    /// Admits a stream or refuses it ([`OsdError::Refused`]), counting either.
    pub(crate) fn admit(
        &self,
        kind: StreamKind,
        priority: StreamPriority,
        what: &str,
    ) -> Result<Ticket, OsdError> {
        let io = self.block_io();
        let config = self.admission_config();
        let (ticket, verdict) = self
            .inner
            .admission
            .admit(config, kind, priority, io.rates());
        let m = &self.inner.metrics;
        match (ticket, verdict) {
            (Some(t), Verdict::Admitted { preempted }) => {
                Metrics::add(&m.streams_admitted, 1);
                Metrics::add(&m.streams_preempted, preempted as u64);
                Ok(t)
            }
            (_, verdict) => {
                let why = match verdict {
                    Verdict::Refused(why) => why,
                    Verdict::Admitted { .. } => "could not admit the stream".to_owned(),
                };
                Metrics::add(&m.streams_refused, 1);
                Err(OsdError::Refused(format!(
                    "{what}: osd {} {why}; try another OSD",
                    self.osd_id()
                )))
            }
        }
    }

    fn preempted(&self, what: &str) -> OsdError {
        OsdError::Refused(format!(
            "{what}: osd {} gave this stream's place to a high-priority stream; try another OSD",
            self.osd_id()
        ))
    }

    /// PutBlocks after its header: `blocks` appended in groups as they come, each key sent on
    /// `acks` once durable. Ends when `blocks` ends (everything written) or fails.
    pub(crate) async fn put_blocks_here(
        &self,
        object: u64,
        block_bytes: u32,
        priority: StreamPriority,
        ticket: Ticket,
        mut blocks: impl Stream<Item = Result<InBlock, OsdError>> + Unpin + Send,
        acks: tokio::sync::mpsc::Sender<Result<BlockKey, OsdError>>,
    ) {
        let what = format!("PutBlocks of object {object:#x}");
        let io = self.block_io();
        let ctl = io.stream();
        let high = priority == StreamPriority::High;
        let mut group: Vec<(BlockKey, Bytes)> = Vec::new();
        let mut group_bytes = 0usize;
        // The group being written: its durability, its keys.
        type Writing = (
            tokio::sync::oneshot::Receiver<Result<(), ChunkStoreError>>,
            Vec<BlockKey>,
        );
        let mut writing: Option<Writing> = None;
        let mut ended = false;
        let fail = |e: OsdError| {
            let acks = acks.clone();
            async move {
                let _ = acks.send(Err(e)).await;
            }
        };
        loop {
            if ticket.is_preempted() {
                return fail(self.preempted(&what)).await;
            }
            if writing.is_none() && !group.is_empty() {
                let keys = group.iter().map(|(k, _)| *k).collect();
                let batch = std::mem::take(&mut group);
                group_bytes = 0;
                writing = Some((io.write(&ctl, high, object, block_bytes, batch), keys));
            }
            if writing.is_none() && ended {
                return;
            }
            tokio::select! {
                done = async { (&mut writing.as_mut().expect("a write in flight").0).await },
                    if writing.is_some() =>
                {
                    let (_, keys) = writing.take().expect("a write in flight");
                    match done {
                        Ok(Ok(())) => {
                            for k in keys {
                                if acks.send(Ok(k)).await.is_err() {
                                    return; // the client is gone
                                }
                            }
                        }
                        Ok(Err(e)) => return fail(e.into()).await,
                        Err(_) => {
                            return fail(OsdError::Internal(format!(
                                "{what}: the block I/O queue stopped"
                            )))
                            .await
                        }
                    }
                }
                next = blocks.next(), if !ended && group_bytes < WRITE_GROUP_BYTES => {
                    match next {
                        Some(Ok(b)) => {
                            if b.data.len() != block_bytes as usize {
                                return fail(OsdError::Invalid(format!(
                                    "{what}: block {}@{} has {} bytes, the stream's blocks have {block_bytes}",
                                    b.key.id,
                                    b.key.version,
                                    b.data.len()
                                )))
                                .await;
                            }
                            Metrics::add(&self.inner.metrics.bytes_in, b.data.len() as u64);
                            group_bytes += b.data.len();
                            group.push((b.key, b.data));
                        }
                        Some(Err(e)) => return fail(e).await,
                        None => ended = true,
                    }
                }
            }
        }
    }

    /// GetBlocks: admits the stream, then reads the object's blocks (see [`blocks_to_serve`]) in
    /// stored order. A block failing its checks is lost: skipped (counted, logged), never sent.
    pub(crate) async fn get_blocks_here(
        &self,
        object: u64,
        max_version: u64,
        priority: StreamPriority,
    ) -> Result<BlockFrames, OsdError> {
        let what = format!("GetBlocks of object {object:#x}");
        let opened = self.blocking(move |s| s.open_blocks(object)).await?;
        let Some(opened) = opened else {
            return Err(OsdError::NotFound(format!(
                "object {object:#x}: no block of it is stored on osd {}",
                self.osd_id()
            )));
        };
        let order = blocks_to_serve(&opened.table, max_version);
        let ticket = self.admit(StreamKind::Read, priority, &what)?;
        let io = self.block_io();
        let ctl = io.stream();
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let high = priority == StreamPriority::High;
        let blocks = Arc::new(opened);
        let (osd, io2, ctl2) = (self.clone(), io.clone(), ctl.clone());
        tokio::spawn(async move {
            let _ticket = &ticket;
            let mut ahead = VecDeque::new();
            let mut next = order.into_iter();
            loop {
                if ticket.is_preempted() {
                    let _ = tx.send(Err(osd.preempted(&what))).await;
                    return;
                }
                while ahead.len() < READ_AHEAD_BLOCKS {
                    let Some(i) = next.next() else { break };
                    ahead.push_back((i, io2.read(&ctl2, high, blocks.clone(), i)));
                }
                let Some((i, rx)) = ahead.pop_front() else {
                    return; // every block sent
                };
                let key = blocks.table.blocks[i].key;
                match rx.await {
                    Ok(Ok(Some(data))) => {
                        Metrics::add(&osd.inner.metrics.bytes_out, data.len() as u64);
                        if tx.send(Ok((key, Bytes::from(data)))).await.is_err() {
                            return; // dropped: the reply's guard cancels the rest
                        }
                    }
                    Ok(Ok(None)) | Err(_) => return, // cancelled
                    Ok(Err(e)) if e.is_corruption() => {
                        tracing::warn!(osd = osd.osd_id(), "{e}: not served");
                    }
                    Ok(Err(e)) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                }
            }
        });
        Ok(BlockFrames { rx, io, ctl })
    }

    /// DeleteBlocks and delete tasks: the listed blocks (empty: every block of the object);
    /// how many were stored.
    pub async fn delete_blocks_here(
        &self,
        object: u64,
        blocks: Vec<BlockKey>,
    ) -> Result<u32, OsdError> {
        let n = self
            .blocking(move |s| s.delete_blocks(object, (!blocks.is_empty()).then_some(&blocks[..])))
            .await?;
        Ok(n)
    }

    /// Compacts every block file that wants it ([`crate::chunk_store::ChunkStore::compactable`]),
    /// one at a time through the block I/O queue at low priority (streams' jobs first); how
    /// many were compacted. A failure is logged and the others go on.
    pub async fn compact_blocks_pass(&self) -> u64 {
        let io = self.block_io();
        let mut done = 0;
        for object in self.store().compactable() {
            let started = std::time::Instant::now();
            match io.compact(object).await {
                Ok(Ok(Some(c))) => {
                    done += 1;
                    tracing::info!(
                        object,
                        slots_before = c.slots_before,
                        slots_after = c.slots_after,
                        blocks = c.blocks,
                        ms = started.elapsed().as_millis() as u64,
                        "block file compacted"
                    );
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => tracing::warn!(object, "block file compaction failed: {e}"),
                Err(_) => return done, // the queue stopped
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk_store::StoredBlock;

    #[test]
    fn the_newest_version_of_each_id_is_served_in_stored_order() {
        let b = |id, version, slot| StoredBlock {
            key: BlockKey { id, version },
            slot,
        };
        let table = BlockTable {
            object: 1,
            block_bytes: 8,
            blocks: vec![b(5, 1, 0), b(2, 1, 1), b(5, 3, 2), b(7, 2, 3), b(2, 2, 4)],
            lost: 0,
            slots: 5,
        };
        assert_eq!(blocks_to_serve(&table, 0), vec![2, 3, 4]);
        assert_eq!(blocks_to_serve(&table, 1), vec![0, 1]);
        assert_eq!(blocks_to_serve(&table, 2), vec![0, 3, 4]);
    }
}
