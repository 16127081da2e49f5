//! The pipelined read ([`Osd::read_stream`]'s normal case, on its own task). Each data chunk the
//! range touches is a [`Lane`]: its frames fetched in order from its holder, a few at once, all
//! lanes at the same time, so every data holder of the segment sends while the client's stream
//! runs; a frame goes out as soon as it and the ones before it in its lane are in (a frame with
//! `at` tells the client where, when it does not follow the frame sent before). Frames from other
//! holders go first, this OSD's own chunk fills in while they are on their way: the primary's link
//! then idles only when its own chunks are sent and every holder is slow. (Fetched in the file's
//! order, a 64 MiB segment's read went through its chunks one holder at a time, and a primary
//! whose reads all waited on busy holders left its link idle.)

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc::Sender;
use tokio::sync::OwnedMutexGuard;
use tokio::task::JoinSet;

use crate::api::{self, Holder, Layout};
use crate::error::OsdError;
use crate::holder::Miss;
use crate::metrics::Metrics;
use crate::read::ReadFrame;
use crate::segment::SegState;
use crate::service::{newer, Osd};

/// Pieces of a pipelined read fetched at once (each at most [`api::FRAME_BYTES`]), shared among its
/// lanes: 16 MiB, a whole segment of the default size. Fetched in the file's order, 8 made a 16 MiB
/// read go through its four chunks two at a time, and a primary whose next pieces sat on busy
/// holders left its own link idle (the model experiment's read: 71–78 % of the bound with 8, 80–83 %
/// with 16; docs/benchmarks.md); at 64 MiB even 16 covered one chunk, hence the lanes.
pub(crate) const READ_PIPELINE_PIECES: usize = 16;

/// Pieces fetched at once from each data chunk of a pipelined read, at least (with more data chunks
/// than [`READ_PIPELINE_PIECES`] / 4, a read holds up to this many per chunk).
const READ_LANE_PIECES_MIN: usize = 4;

/// Pieces of pipelined reads a primary has on their way from one holder at once, over all its
/// reads (each waits for a slot, in the order asked, before it is asked for). HTTP/2 shares a
/// connection among its streams: with every read asking each of its holders for 4 pieces at once,
/// a holder had dozens of one primary's pieces on their way together, and each took about as long
/// as all of them (the 480 s 64 MiB read of the model experiment: 4,206 pieces of 1 MiB took 10 s
/// or more, median 16 s, the slowest 74 s),
/// which left a client's read without a byte for long stretches once the primary's own chunk was
/// sent. A few at a time, a piece takes about its own share of the link, and 8 per holder for each
/// of the other primaries still keep every link busy.
pub(crate) const READ_PIECES_PER_PEER: usize = 8;

/// Frames of a pipelined read's reply waiting for the client's connection: few, so that a frame
/// from a holder is not queued behind this OSD's own chunk (which is always ready).
pub(crate) const READ_REPLY_FRAMES: usize = 2;

/// Where a pipelined read's reply goes.
type ReplyTx = Sender<Result<ReadFrame, OsdError>>;

/// Why [`Osd::pipeline`] stopped before the end of its range.
enum Halt {
    /// The read fails with this error.
    Failed(OsdError),
    /// A piece of data chunk `chunk` could not be had as it should: the rest is read the ordinary
    /// way.
    Piece { chunk: usize, miss: Miss },
}

/// One data chunk's part of a pipelined read ([`Osd::pipeline`]); offsets are the segment's.
struct Lane {
    chunk: usize,
    /// The next byte to fetch; the end of the lane's part of the range.
    next: u64,
    end: u64,
    /// Every byte of the lane before this one has been sent.
    sent: u64,
    /// The chunk is on this OSD.
    local: bool,
    /// Fetched frames not yet sent, by their first byte.
    ready: BTreeMap<u64, Bytes>,
    in_flight: usize,
}

/// A fetched piece: its lane, its first byte, its bytes or why not.
type Fetched = (usize, u64, Result<Bytes, Miss>);

/// The state of one pipelined read.
struct Pipeline {
    osd: Osd,
    l: Arc<Layout>,
    /// The segment's state when the read started (the view pieces are checked against).
    snap: Arc<SegState>,
    cb: u64,
    lanes: Vec<Lane>,
    /// Pieces each lane keeps fetched or on their way.
    per_lane: usize,
    fetches: JoinSet<Fetched>,
    /// Where the client puts the next data frame.
    place: u64,
    tx: ReplyTx,
}

/// What [`Pipeline::send_next`] did.
enum Sent {
    Frame,
    /// Nothing to send and nothing on its way: every lane is sent.
    Done,
    /// The client went away.
    Gone,
}

/// Sends `frames` (contiguous bytes from segment offset `at`) to the client of a pipelined read,
/// preceded by a frame with `at` when they do not follow the last one sent (`place`, moved past
/// them); false when the client went away.
async fn send_placed(
    tx: &ReplyTx,
    place: &mut u64,
    at: u64,
    frames: impl IntoIterator<Item = Bytes>,
) -> bool {
    if at != *place {
        let moved = ReadFrame {
            data: Bytes::new(),
            at: Some(at),
        };
        if tx.send(Ok(moved)).await.is_err() {
            return false;
        }
        *place = at;
    }
    for data in frames {
        *place += data.len() as u64;
        if tx.send(Ok(ReadFrame { data, at: None })).await.is_err() {
            return false;
        }
    }
    true
}

impl Osd {
    /// The slots for pipelined-read pieces from holder `h` ([`READ_PIECES_PER_PEER`]).
    fn piece_slots(&self, h: &Holder) -> Arc<tokio::sync::Semaphore> {
        let mut slots = self
            .inner
            .piece_slots
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        slots
            .entry(h.addr.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(READ_PIECES_PER_PEER)))
            .clone()
    }

    /// The body of [`Osd::read_stream`]'s pipelined case (its own task; see the module doc).
    pub(crate) async fn pipeline(
        self,
        l: Layout,
        mut st: OwnedMutexGuard<SegState>,
        offset: u64,
        len: u64,
        tx: ReplyTx,
    ) {
        let mut p = Pipeline::new(self.clone(), l, &st, offset, len, tx);
        let halt = loop {
            p.start_fetches();
            if let Err(h) = p.take_fetched().await {
                break Err(h);
            }
            match p.send_next().await {
                Sent::Frame => {}
                Sent::Done => break Ok(()),
                Sent::Gone => return,
            }
        };
        p.fetches.abort_all();
        let rest = match halt {
            Ok(()) => {
                debug_assert!(p.lanes.iter().all(|ln| ln.sent == ln.end));
                return;
            }
            Err(Halt::Failed(e)) => {
                st.forget();
                Err(e)
            }
            Err(Halt::Piece { chunk, miss }) => {
                match self.finish_ordinary(&mut p, &mut st, chunk, miss).await {
                    Some(r) => r,
                    None => return, // the client went away
                }
            }
        };
        if let Err(e) = rest {
            let _ = p.tx.send(Err(e)).await;
        }
    }

    /// A piece could not be had as it should: the rest of each lane the ordinary way. A holder
    /// that did not answer (or stopped sending: `PEER_FETCH_IDLE`) is read around, not asked
    /// again (a stale or corrupt chunk is asked again, to be repaired). `None`: the client went
    /// away.
    async fn finish_ordinary(
        &self,
        p: &mut Pipeline,
        st: &mut SegState,
        chunk: usize,
        miss: Miss,
    ) -> Option<Result<(), OsdError>> {
        let around = matches!(miss, Miss::Unreachable(_) | Miss::NotSent(_));
        tracing::info!(
            segment = p.l.segment_id,
            chunk,
            "a pipelined read continues the ordinary way{}: {miss}",
            if around {
                ", around the chunk's holder"
            } else {
                ""
            }
        );
        let mut l = Layout::clone(&p.l);
        if around {
            l.holders[chunk].usable = false;
        }
        for lane in p.lanes.iter().filter(|ln| ln.sent < ln.end) {
            match self
                .read_locked(&l, st, lane.sent, lane.end - lane.sent)
                .await
            {
                Ok(data) => {
                    Metrics::add(&self.inner.metrics.bytes_out, data.len() as u64);
                    let frames = api::slice_frames(Bytes::from(data));
                    if !send_placed(&p.tx, &mut p.place, lane.sent, frames).await {
                        return None;
                    }
                }
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(()))
    }
}

impl Pipeline {
    fn new(osd: Osd, l: Layout, st: &SegState, offset: u64, len: u64, tx: ReplyTx) -> Pipeline {
        let cb = osd.chunk_bytes(l.length);
        let end = offset + len;
        let first = offset / cb;
        let last = (end - 1) / cb;
        let lanes: Vec<Lane> = (first..=last)
            .map(|i| {
                let lo = offset.max(i * cb);
                Lane {
                    chunk: i as usize,
                    next: lo,
                    end: end.min((i + 1) * cb),
                    sent: lo,
                    local: osd.is_local(&l.holders[i as usize]),
                    ready: BTreeMap::new(),
                    in_flight: 0,
                }
            })
            .collect();
        let per_lane = (READ_PIPELINE_PIECES / lanes.len()).max(READ_LANE_PIECES_MIN);
        Pipeline {
            osd,
            l: Arc::new(l),
            snap: Arc::new(st.clone()),
            cb,
            lanes,
            per_lane,
            fetches: JoinSet::new(),
            place: offset,
            tx,
        }
    }

    /// Asks for the next pieces of every lane that has room.
    fn start_fetches(&mut self) {
        let cb = self.cb;
        for (li, lane) in self.lanes.iter_mut().enumerate() {
            while lane.in_flight + lane.ready.len() < self.per_lane && lane.next < lane.end {
                let (lo, hi) = (lane.next, lane.end.min(lane.next + api::FRAME_BYTES as u64));
                lane.next = hi;
                lane.in_flight += 1;
                let (osd, l, snap, i) = (
                    self.osd.clone(),
                    self.l.clone(),
                    self.snap.clone(),
                    lane.chunk,
                );
                let slots = (!lane.local).then(|| self.osd.piece_slots(&l.holders[i]));
                self.fetches.spawn(async move {
                    // Never closed; dropped (released) when the piece is in or the read ends.
                    let _slot = match slots {
                        Some(s) => s.acquire_owned().await.ok(),
                        None => None,
                    };
                    let at = lo - i as u64 * cb;
                    let got = osd
                        .fetch_checked(&l, &snap, &l.holders[i], at, hi - lo)
                        .await
                        .and_then(|d| match d.len() as u64 == hi - lo {
                            true => Ok(d),
                            false => Err(Miss::Other(format!(
                                "chunk {i} gave {} bytes for a piece of {}",
                                d.len(),
                                hi - lo
                            ))),
                        });
                    (li, lo, got)
                });
            }
        }
    }

    /// Takes in every fetch that is done (waiting for one when no lane has a frame to send).
    async fn take_fetched(&mut self) -> Result<(), Halt> {
        loop {
            let can_send = self.lanes.iter().any(|ln| ln.ready.contains_key(&ln.sent));
            let joined = if can_send {
                self.fetches.try_join_next()
            } else {
                self.fetches.join_next().await
            };
            let Some(joined) = joined else {
                return Ok(());
            };
            match joined {
                Ok((li, lo, Ok(data))) => {
                    self.lanes[li].in_flight -= 1;
                    self.lanes[li].ready.insert(lo, data);
                }
                Ok((li, _, Err(Miss::Newer(e)))) => {
                    let chunk = self.lanes[li].chunk as u32;
                    return Err(Halt::Failed(newer(self.l.segment_id, chunk, &e)));
                }
                Ok((li, _, Err(miss))) => {
                    let chunk = self.lanes[li].chunk;
                    return Err(Halt::Piece { chunk, miss });
                }
                Err(e) => return Err(Halt::Failed(OsdError::Internal(format!("read task: {e}")))),
            }
        }
    }

    /// Sends the first frame of a lane that can go, other holders' lanes before this OSD's own.
    async fn send_next(&mut self) -> Sent {
        let lanes = &self.lanes;
        let Some(li) = (0..lanes.len())
            .filter(|&i| lanes[i].ready.contains_key(&lanes[i].sent))
            .min_by_key(|&i| (lanes[i].local, i))
        else {
            return Sent::Done;
        };
        let lane = &mut self.lanes[li];
        let at = lane.sent;
        let data = lane
            .ready
            .remove(&at)
            .expect("the picked lane has its next frame");
        lane.sent += data.len() as u64;
        Metrics::add(&self.osd.inner.metrics.bytes_out, data.len() as u64);
        if send_placed(&self.tx, &mut self.place, at, [data]).await {
            Sent::Frame
        } else {
            Sent::Gone
        }
    }
}
