//! WriteSegment at the primary: a whole segment is encoded and its chunks distributed. The
//! primary takes the segment's lock and view, picks version = newest + 1 (1 for a new segment),
//! forwards each data chunk to its holder *as its bytes arrive* (cut-through, [`Forward`]), encodes
//! the m parity chunks once the last byte is in, keeps its own chunk and sends the parity with
//! PutChunk. Holders that fail are marked stale at the MDS before the reply; fewer than k + 1
//! durable chunks is an error.
//!
//! A segment the MDS has just allocated has no versions to learn: its first write asks no holder
//! for ChunkVersion ([`Osd::view_for_write`]).

use bytes::Bytes;
use ecstack_codes::ErasureCode;
use tokio_stream::StreamExt;

use crate::api::{self, Ack, ChunkMeta, Layout, OsdClient, SegmentAge};
use crate::error::OsdError;
use crate::holder::{remote_miss, Miss};
use crate::metrics::Metrics;
use crate::segment::SegState;
use crate::service::{check_enough, futures_join_all, Osd};
use crate::view::View;

/// Each chunk's result: stored, or why not.
type Results = Vec<(u32, Result<(), Miss>)>;

impl Osd {
    /// A whole segment from memory (see [`Osd::write_frames`]); the fuzz targets seed chunks with it.
    #[cfg(test)]
    pub(crate) async fn write(&self, layout: Layout, data: Vec<u8>) -> Result<Ack, OsdError> {
        let frames: Vec<Result<Vec<Bytes>, OsdError>> = api::slice_frames(Bytes::from(data))
            .into_iter()
            .map(|f| Ok(vec![f]))
            .collect();
        self.write_frames(layout, SegmentAge::Existing, tokio_stream::iter(frames))
            .await
    }

    /// Writes a whole segment whose bytes arrive as `frames` (WriteSegment's stream): takes the
    /// segment's lock and its view first, then forwards each data chunk to its holder *as its
    /// bytes arrive* (cut-through, so the primary's inbound and outbound links work at once
    /// instead of one after the other), encodes the parity once the last byte is in, and sends it.
    ///
    /// The last frame of every forwarded chunk is held back until the lease has been checked
    /// after the whole segment arrived and was encoded: a holder stores a chunk only when its
    /// stream ends complete, so a write abandoned before that point (client gone, too many bytes,
    /// lease lost) leaves nothing new on any holder.
    pub(crate) async fn write_frames(
        &self,
        layout: Layout,
        age: SegmentAge,
        mut frames: impl tokio_stream::Stream<Item = Result<Vec<Bytes>, OsdError>> + Unpin,
    ) -> Result<Ack, OsdError> {
        let lock = self.segment_lock(layout.segment_id);
        let mut st = lock.lock().await;
        let untouched = !st.served;
        self.check_primary(&layout, &mut st).await?;
        check_enough(&layout, self.k(), "a write")?;
        self.view_for_write(&layout, &mut st, age == SegmentAge::New && untouched)
            .await;
        let version = st.issue();
        let k = self.k();
        let written = View::written(k, version);
        let cb = self.chunk_bytes(layout.length) as usize;
        self.check_lease(layout.segment_id)?;
        let (mut forwards, mut results) = self.start_forwards(&layout, &written);
        let mut data = receive(&layout, k, cb, &mut frames, &mut forwards).await?;
        Metrics::add(&self.inner.metrics.bytes_in, layout.length);
        let code = self.code().clone();
        data.resize(k * cb, 0);
        let data = Bytes::from(data);
        let chunks = tokio::task::spawn_blocking(move || encode_segment(&*code, data, cb))
            .await
            .map_err(|e| OsdError::Internal(e.to_string()))?
            .map_err(OsdError::Internal)?;
        self.check_lease(layout.segment_id)?;
        results.extend(self.distribute(&layout, &written, forwards, &chunks).await);
        self.settle_write(&layout, &mut st, written, results).await
    }

    /// The view a write starts from. A segment the MDS has just allocated has none to learn, and
    /// asking would cost a ChunkVersion round trip to all n − 1 holders before any byte moves. So
    /// when the client says its layout is AllocateSegments' reply on its first attempt
    /// (`may_be_new`: [`SegmentAge::New`], and no request of the segment has reached this OSD
    /// since it started) and this OSD holds none of the segment's chunks, the view is the empty
    /// one (version 0 everywhere: the write issues version 1) and no holder is asked. Anything
    /// else — a retry, a rewrite, a restarted or promoted primary — learns the view as every
    /// request does: only that holder's answers tell an existing segment's versions.
    async fn view_for_write(&self, l: &Layout, st: &mut SegState, may_be_new: bool) {
        if may_be_new && !st.view.is_known() && self.holds_none_of(l).await {
            st.view = View::written(self.k(), 0);
            st.provisional = false;
            Metrics::add(&self.inner.metrics.new_segment_writes, 1);
            return;
        }
        self.learn_view(l, st).await;
    }

    /// True when this OSD's store holds none of the chunks the layout places on it (false when
    /// the store cannot tell).
    async fn holds_none_of(&self, l: &Layout) -> bool {
        let segment = l.segment_id;
        let mine: Vec<u32> = l
            .holders
            .iter()
            .filter(|h| self.is_local(h))
            .map(|h| h.index)
            .collect();
        self.blocking(move |s| {
            for index in mine {
                if s.meta(segment, index)?.is_some() {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .await
        .unwrap_or(false)
    }

    /// Opens the cut-through forwards of the data chunks held elsewhere (by chunk index; `None`:
    /// local or unusable), and the results of those that could not be opened.
    fn start_forwards(&self, l: &Layout, written: &View) -> (Vec<Option<Forward>>, Results) {
        let k = self.k();
        let mut forwards: Vec<Option<Forward>> = (0..k).map(|_| None).collect();
        let mut results = Vec::new();
        for h in l.holders.iter().filter(|h| h.usable) {
            let j = h.index as usize;
            if j >= k || self.is_local(h) {
                continue;
            }
            match self.peer(h) {
                Ok(peer) => {
                    forwards[j] = Some(Forward::start(peer, self.meta_for(l, written, h.index)))
                }
                Err(miss) => results.push((h.index, Err(miss))),
            }
        }
        (forwards, results)
    }

    /// Completes the forwarded chunks (their held-back frames, with their zero padding) and
    /// stores the others: the parity and this OSD's own chunk.
    async fn distribute(
        &self,
        l: &Layout,
        written: &View,
        forwards: Vec<Option<Forward>>,
        chunks: &[Bytes],
    ) -> Results {
        let k = self.k();
        let forwarded = forwards.into_iter().enumerate().filter_map(|(j, f)| {
            let whole = chunks[j].clone();
            f.map(|f| async move { (j as u32, f.finish(whole).await) })
        });
        let puts = l
            .holders
            .iter()
            .filter(|h| h.usable && ((h.index as usize) >= k || self.is_local(h)))
            .map(|h| {
                let meta = self.meta_for(l, written, h.index);
                let data = chunks[h.index as usize].clone();
                async move { (h.index, self.put_to(h, meta, data).await) }
            });
        let (a, b) = tokio::join!(futures_join_all(forwarded), futures_join_all(puts));
        a.into_iter().chain(b).collect()
    }

    /// The end of a write: the view becomes `written` (the version is used up either way), the
    /// write is acknowledged only with k + 1 chunks durable, and every chunk that missed it is
    /// marked stale at the MDS first.
    async fn settle_write(
        &self,
        l: &Layout,
        st: &mut SegState,
        written: View,
        mut results: Results,
    ) -> Result<Ack, OsdError> {
        let (k, n, seg, version) = (self.k(), self.n(), l.segment_id, written.newest);
        results.sort_by_key(|(i, _)| *i);
        let mut failed = Vec::new();
        let mut reasons = Vec::new();
        for (i, r) in &results {
            if let Err(e) = r {
                failed.push(*i);
                reasons.push(format!("chunk {i}: {e}"));
            }
        }
        let durable = results.len() - failed.len();
        if !failed.is_empty() {
            tracing::warn!(
                segment = seg,
                version,
                durable,
                "write: {} chunk(s) not stored: {}",
                failed.len(),
                reasons.join("; ")
            );
        }
        st.view = written;
        st.provisional = false;
        if durable < k + 1 {
            // Not acknowledged: the version is used up so a retry writes a newer one.
            return Err(OsdError::NotDurable(format!(
                "segment {seg:#x}: only {durable} of {n} chunks durable, need k + 1 = {} ({})",
                k + 1,
                reasons.join("; ")
            )));
        }
        // Healthy chunks on holders the MDS sees down were skipped: they are stale now too.
        failed.extend(
            l.holders
                .iter()
                .filter(|h| !h.usable && h.down)
                .map(|h| h.index),
        );
        failed.sort_unstable();
        self.mark_stale(seg, &failed, version).await?;
        let mut stale: Vec<u32> = l
            .holders
            .iter()
            .filter(|h| !h.usable && !h.down)
            .map(|h| h.index)
            .chain(failed)
            .collect();
        stale.sort_unstable();
        Ok(Ack { version, stale })
    }
}

/// Takes in the segment's bytes as they arrive (each frame a message's data as the slices it
/// arrived in), handing each data chunk's bytes to its forward; the segment, in a buffer with room
/// for the zero padding of the last data chunk (the data chunks are slices of it).
async fn receive(
    l: &Layout,
    k: usize,
    cb: usize,
    frames: &mut (impl tokio_stream::Stream<Item = Result<Vec<Bytes>, OsdError>> + Unpin),
    forwards: &mut [Option<Forward>],
) -> Result<Vec<u8>, OsdError> {
    let (seg, len) = (l.segment_id, l.length as usize);
    let mut data = Vec::with_capacity(k * cb);
    while let Some(frame) = frames.next().await {
        let slices = frame?;
        let n: usize = slices.iter().map(Bytes::len).sum();
        if data.len() + n > len {
            return Err(OsdError::Invalid(format!(
                "segment {seg:#x}: more than its {len} bytes sent"
            )));
        }
        let from = data.len();
        for d in &slices {
            data.extend_from_slice(d);
        }
        forward_range(forwards, &slices, from, cb);
    }
    if data.len() != len {
        return Err(OsdError::Invalid(format!(
            "segment {seg:#x}: received {} bytes for a segment of {len}",
            data.len()
        )));
    }
    Ok(data)
}

/// A data chunk on its way to its holder while the segment is still arriving (see
/// [`Osd::write_frames`]). Every frame but the newest has been sent; the newest is held back so
/// the chunk cannot complete at the holder before [`Forward::finish`]. Dropped without `finish`,
/// the stream ends short and the holder stores nothing.
struct Forward {
    tx: Option<tokio::sync::mpsc::UnboundedSender<Vec<Bytes>>>,
    held: Option<Vec<Bytes>>,
    /// Bytes handed to the channel or held.
    sent: usize,
    task: tokio::task::JoinHandle<Result<(), Miss>>,
}

impl Forward {
    fn start(peer: OsdClient, meta: ChunkMeta) -> Forward {
        // Unbounded, so a slow holder never stalls the segment's arrival: what it queues is at
        // most the chunk (slices of frames the primary keeps for the encode anyway).
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            peer.put_chunk_groups(
                &meta,
                tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
            )
            .await
            .map_err(remote_miss)
        });
        Forward {
            tx: Some(tx),
            held: None,
            sent: 0,
            task,
        }
    }

    /// Queues `slices` (the chunk's next bytes, slices of a received frame: no copy; sent as one
    /// message): the frame before it goes out, so the newest frame is always held back.
    fn push(&mut self, slices: Vec<Bytes>) {
        let n: usize = slices.iter().map(Bytes::len).sum();
        if n == 0 {
            return;
        }
        self.sent += n;
        if let Some(full) = self.held.replace(slices) {
            // Fails only when the call already ended (an error it reports at finish).
            if let Some(tx) = &self.tx {
                if tx.send(full).is_err() {
                    self.tx = None;
                }
            }
        }
    }

    /// Sends the rest of the chunk (`whole` is all of it, zero padding included), closes the
    /// stream and waits for the holder's answer.
    async fn finish(mut self, whole: Bytes) -> Result<(), Miss> {
        for rest in api::slice_frames(whole.slice(self.sent..)) {
            self.push(vec![rest]);
        }
        if let (Some(last), Some(tx)) = (self.held.take(), self.tx.take()) {
            let _ = tx.send(last); // a failure shows in the task's result
        }
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) => Err(Miss::Other(format!("the forward of the chunk failed: {e}"))),
        }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        // Not finished: end the stream short (the holder refuses it) and stop the call.
        self.held = None;
        self.tx = None;
        self.task.abort();
    }
}

/// Hands the bytes of `frame` (the segment's bytes from `from` on, in the slices they arrived in)
/// that belong to forwarded data chunks to their forwards, as slices of the frame: one message per
/// chunk the frame touches.
fn forward_range(forwards: &mut [Option<Forward>], frame: &[Bytes], from: usize, cb: usize) {
    let mut at = from;
    let mut group: Vec<Bytes> = Vec::new();
    let mut group_chunk = from / cb;
    for slice in frame {
        let mut pos = 0;
        while pos < slice.len() {
            let j = at / cb;
            if j != group_chunk {
                if let Some(f) = forwards.get_mut(group_chunk).and_then(Option::as_mut) {
                    f.push(std::mem::take(&mut group));
                }
                group.clear();
                group_chunk = j;
            }
            let end = pos + ((j + 1) * cb - at).min(slice.len() - pos);
            group.push(slice.slice(pos..end));
            at += end - pos;
            pos = end;
        }
    }
    if let Some(f) = forwards.get_mut(group_chunk).and_then(Option::as_mut) {
        f.push(group);
    }
}

/// The n chunks of a segment: the k data chunks as slices of `data` (the segment zero-padded to
/// k chunks of `cb` bytes; no copy), then the m parity chunks computed from them.
fn encode_segment(code: &dyn ErasureCode, data: Bytes, cb: usize) -> Result<Vec<Bytes>, String> {
    let (k, m) = (code.k(), code.m());
    assert_eq!(data.len(), k * cb, "a segment padded to k whole chunks");
    let mut chunks: Vec<Bytes> = (0..k).map(|i| data.slice(i * cb..(i + 1) * cb)).collect();
    let mut parity = vec![vec![0u8; cb]; m];
    {
        let refs: Vec<&[u8]> = chunks.iter().map(|s| &s[..]).collect();
        let mut prefs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
        code.encode(&refs, &mut prefs).map_err(|e| e.to_string())?;
    }
    chunks.extend(parity.into_iter().map(Bytes::from));
    Ok(chunks)
}
