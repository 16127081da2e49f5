//! ReadSegment and ReadPlan at the primary. A read checks the layout under the segment's lock,
//! learns the view if needed and then, while every data chunk the range needs is usable, streams
//! the range pipelined from the data holders (`pipeline.rs`); otherwise (or when a piece cannot be
//! had as it should) the range is read the ordinary way, degraded if needed (`degraded.rs`). A
//! read plan hands a client the versions the data chunks must carry for a direct read.

use std::pin::Pin;

use bytes::Bytes;

use crate::api::{self, Layout};
use crate::error::OsdError;
use crate::metrics::Metrics;
use crate::pipeline::READ_REPLY_FRAMES;
use crate::service::{check_range, Osd};

/// One frame of a read's reply: `data` placed right after the frame before it, or, with `at` (and
/// no data), a move of the place of the frames after it to segment offset `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadFrame {
    pub data: Bytes,
    pub at: Option<u64>,
}

/// A read's reply as it is produced.
pub(crate) type ReadFrames =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<ReadFrame, OsdError>> + Send>>;

/// `data` as a reply of frames of at most [`api::FRAME_BYTES`], each placed after the one before.
fn whole_reply(data: Vec<u8>) -> ReadFrames {
    let items: Vec<Result<ReadFrame, OsdError>> = api::slice_frames(Bytes::from(data))
        .into_iter()
        .map(|data| Ok(ReadFrame { data, at: None }))
        .collect();
    Box::pin(tokio_stream::iter(items))
}

impl Osd {
    /// A whole read in memory (the fuzz targets'; the service streams with [`Osd::read_stream`]).
    #[cfg(test)]
    pub(crate) async fn read(&self, l: Layout, offset: u64, len: u64) -> Result<Vec<u8>, OsdError> {
        use tokio_stream::StreamExt;
        let mut frames = self.read_stream(l, offset, len).await?;
        let mut assembly = api::ReadAssembly::new(offset, len);
        while let Some(f) = frames.next().await {
            let f = f?;
            assembly
                .take(f.at, vec![f.data])
                .map_err(OsdError::Internal)?;
        }
        Ok(assembly.finish().map_err(OsdError::Internal)?.concat())
    }

    /// A read as a stream of frames, pipelined: while every data chunk the range needs is usable,
    /// the range goes out in pieces of at most [`api::FRAME_BYTES`] (never across a chunk), up to
    /// [`crate::pipeline::READ_PIPELINE_PIECES`] of them fetched at once from their holders, each
    /// sent as soon as it and the ones before it are in. The client thus gets the first megabyte
    /// after one piece's fetch instead of after the whole segment's gather (store-and-forward made
    /// a 16 MiB get wait for all k chunks before its first byte). If a piece cannot be had as it
    /// should (a holder unreachable, a chunk stale or corrupt), the rest of the range is read the
    /// ordinary way (degraded read, repair). The segment's lock is held until the last frame is
    /// queued.
    pub(crate) async fn read_stream(
        &self,
        l: Layout,
        offset: u64,
        len: u64,
    ) -> Result<ReadFrames, OsdError> {
        let mut st = self.segment_lock(l.segment_id).lock_owned().await;
        self.check_primary(&l, &mut st).await?;
        check_range(&l, offset, len).map_err(OsdError::OutOfRange)?;
        if len == 0 {
            return Ok(whole_reply(Vec::new()));
        }
        self.learn_view(&l, &mut st).await;
        let cb = self.chunk_bytes(l.length);
        let first = (offset / cb) as usize;
        let last = ((offset + len - 1) / cb) as usize;
        if (first..=last).any(|i| !l.holders[i].usable) {
            let data = self.read_locked(&l, &mut st, offset, len).await?;
            Metrics::add(&self.inner.metrics.bytes_out, data.len() as u64);
            return Ok(whole_reply(data));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(READ_REPLY_FRAMES);
        let osd = self.clone();
        tokio::spawn(async move { osd.pipeline(l, st, offset, len, tx).await });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    /// A plan for a read straight from the data holders (`ReadPlan`): under the segment's lock,
    /// the versions the data chunks must carry now (the view every read of this primary checks
    /// chunks against), or `None` when a data chunk the range needs is not usable. A chunk read
    /// later at exactly its planned version holds the bytes it held at the plan: versions only
    /// grow, and every change of a data chunk issues a new one.
    pub(crate) async fn plan_read(
        &self,
        l: Layout,
        offset: u64,
        len: u64,
    ) -> Result<Option<Vec<u64>>, OsdError> {
        let mut st = self.segment_lock(l.segment_id).lock_owned().await;
        self.check_primary(&l, &mut st).await?;
        check_range(&l, offset, len).map_err(OsdError::OutOfRange)?;
        let cb = self.chunk_bytes(l.length);
        if len > 0 {
            let first = (offset / cb) as usize;
            let last = ((offset + len - 1) / cb) as usize;
            if (first..=last).any(|i| !l.holders[i].usable) {
                return Ok(None);
            }
        }
        self.learn_view(&l, &mut st).await;
        debug_assert_eq!(st.view.applied.len(), self.k());
        Ok(Some(st.view.applied.clone()))
    }
}
