//! Recovery at the primary (a recovery task from the MDS): lost chunks of a segment are rebuilt
//! from k usable chunks and stored on the OSDs their placement names, and each is reported to the
//! MDS. The bytes moved are paced by a rate limit shared by the recoveries of one OSD
//! (`[mds] recovery_bytes_per_sec`), waited for before the segment's lock is taken.

use bytes::Bytes;

use crate::api::{Holder, Layout};
use crate::error::OsdError;
use crate::metrics::Metrics;
use crate::segment::SegState;
use crate::service::{check_layout, Osd};

/// Recovery attempts made without the segment's lock before one that holds it throughout
/// ([`Osd::recover`]): each is rebuilt again only if the stripe changed while its chunks moved.
const RECOVERY_UNLOCKED_ATTEMPTS: usize = 2;

/// A byte-rate limit (0 = unlimited) shared by the recoveries of one OSD.
#[derive(Debug)]
pub(crate) struct RateLimit {
    bytes_per_sec: u64,
    next_free: tokio::time::Instant,
}

impl RateLimit {
    pub(crate) fn new(bytes_per_sec: u64) -> RateLimit {
        RateLimit {
            bytes_per_sec,
            next_free: tokio::time::Instant::now(),
        }
    }
}

/// One recovery: the segment's layout, the same with the lost chunks unusable, the lost chunks.
struct Rebuild<'a> {
    l: &'a Layout,
    usable: Layout,
    chunks: &'a [u32],
    lock: std::sync::Arc<tokio::sync::Mutex<SegState>>,
}

impl Osd {
    /// Rebuild `chunks` of a segment (this OSD is its primary) from k usable chunks and store each
    /// on the OSD its placement names; reports each to the MDS. The bytes moved are rate-limited.
    pub async fn recover(&self, l: &Layout, chunks: &[u32]) -> Result<u64, OsdError> {
        // The rate limit is waited for before the segment's lock is taken (k chunks gathered, one
        // stored per lost chunk), so the segment's reads and writes do not wait out the pacing.
        check_layout(l, self.n()).map_err(OsdError::Invalid)?;
        let cb = self.chunk_bytes(l.length);
        for &i in chunks {
            if l.holders.get(i as usize).is_none() {
                return Err(OsdError::Invalid(format!(
                    "segment {:#x}: no chunk {i}",
                    l.segment_id
                )));
            }
        }
        self.pace(cb * (self.k() + chunks.len()) as u64).await;
        let usable = Layout {
            holders: l
                .holders
                .iter()
                .map(|h| Holder {
                    usable: h.usable && !chunks.contains(&h.index),
                    ..h.clone()
                })
                .collect(),
            ..l.clone()
        };
        let r = Rebuild {
            l,
            usable,
            chunks,
            lock: self.segment_lock(l.segment_id),
        };
        // The gather and the stores of the rebuilt chunks (the bulk of the time: k chunks in,
        // one out per lost chunk, over links the segment's clients share) run without the
        // segment's lock, so its reads and writes go on meanwhile; the lock is taken at the end
        // to check that the stripe did not change (the view learned again equals the one the
        // chunks were rebuilt from) before the MDS hears the chunks are back. A stripe that
        // changed is rebuilt again; the last attempt holds the lock throughout, so a segment
        // updated without pause still recovers. (Held throughout, a 64 MiB segment's recovery
        // kept a read waiting 66-136 s on saturated links, past the client's idle deadline.)
        for attempt in 0..=RECOVERY_UNLOCKED_ATTEMPTS {
            if let Some(moved) = self.recover_attempt(&r, attempt).await? {
                return Ok(moved);
            }
        }
        unreachable!("the last recovery attempt holds the lock throughout and returns")
    }

    /// One attempt of [`Osd::recover`]: the bytes moved, or `None` when the stripe changed while
    /// its chunks moved (rebuild again).
    async fn recover_attempt(
        &self,
        r: &Rebuild<'_>,
        attempt: usize,
    ) -> Result<Option<u64>, OsdError> {
        let (l, seg) = (r.l, r.l.segment_id);
        let throughout = attempt == RECOVERY_UNLOCKED_ATTEMPTS;
        let mut held = Some(r.lock.clone().lock_owned().await);
        let mut rebuilt_from = SegState::default();
        if let Some(st) = held.as_mut() {
            self.check_lease(seg)?;
            if l.epoch >= st.epoch {
                st.epoch = l.epoch;
            }
            rebuilt_from.epoch = st.epoch;
            st.issued = st.issued.max(l.version);
            rebuilt_from.issued = st.issued;
        }
        if !throughout {
            held = None;
        }
        // Always learn afresh: the rebuilt chunks must carry what the live holders have.
        self.learn_view(&r.usable, &mut rebuilt_from).await;
        let Some(versions) = self.rebuild(r, &rebuilt_from, attempt, throughout).await? else {
            return Ok(None);
        };
        let mut st = match held {
            Some(st) => st,
            None => r.lock.clone().lock_owned().await,
        };
        self.check_lease(seg)?;
        if throughout {
            *st = rebuilt_from;
        } else {
            st.forget();
            self.learn_view(&r.usable, &mut st).await;
            if st.view != rebuilt_from.view {
                tracing::info!(
                    segment = seg,
                    attempt,
                    "the stripe changed during recovery; rebuilding again"
                );
                return Ok(None);
            }
        }
        st.served = true;
        self.report_recovered(l, r.chunks, versions, &mut st)
            .await
            .map(Some)
    }

    /// Gathers k chunks under the view `from`, decodes and stores the lost ones; the version to
    /// report for each, or `None` when (without the lock) the stripe changed while gathered.
    async fn rebuild(
        &self,
        r: &Rebuild<'_>,
        from: &SegState,
        attempt: usize,
        throughout: bool,
    ) -> Result<Option<Vec<u64>>, OsdError> {
        let (l, seg) = (r.l, r.l.segment_id);
        let cb = self.chunk_bytes(l.length);
        let (shards, _) = match self
            .gather(&r.usable, from, 0, cb, vec![None; self.n()])
            .await
        {
            Ok(g) => g,
            // Without the lock an update may land between the view and the chunks (a chunk
            // then reads as newer, or too few agree with the view): rebuild again.
            Err(e) if !throughout => {
                tracing::info!(
                    segment = seg,
                    attempt,
                    "the stripe changed while its chunks were gathered ({e}); rebuilding again"
                );
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        // A rebuilt chunk carries the view's versions (those of the chunks it was decoded
        // from); the MDS hears the segment's newest version, and at least the newest this
        // primary issued (it refuses rebuilds older than a stale mark, which an unacknowledged
        // update may have made at a version no live chunk holds: `SegState::issued`).
        let mut versions = Vec::with_capacity(r.chunks.len());
        for &i in r.chunks {
            let h = &l.holders[i as usize];
            let meta = self.meta_for(l, &from.view, i);
            versions.push(from.view.newest.max(from.issued).max(meta.version));
            self.check_lease(seg)?;
            self.put_to(h, meta, Bytes::copy_from_slice(&shards[i as usize]))
                .await
                .map_err(|e| {
                    OsdError::NotDurable(format!(
                        "segment {seg:#x} chunk {i} onto osd {}: {e}",
                        h.osd_id
                    ))
                })?;
        }
        Ok(Some(versions))
    }

    /// Tells the MDS each rebuilt chunk is back at its version; the bytes moved. From then on the
    /// segment's layouts older than the MDS's new epoch are refused (`st.epoch`): they still call
    /// the chunk stale, and an update under one would leave it out without marking it, while the
    /// MDS counts it healthy (a rebuilt PLR parity missed 25 versions this way behind clients'
    /// file handles, and the segment could not be rebuilt when two more OSDs failed).
    async fn report_recovered(
        &self,
        l: &Layout,
        chunks: &[u32],
        versions: Vec<u64>,
        st: &mut SegState,
    ) -> Result<u64, OsdError> {
        let cb = self.chunk_bytes(l.length);
        let mut moved = 0;
        for (&i, version) in chunks.iter().zip(versions) {
            let h = &l.holders[i as usize];
            let epoch = self
                .inner
                .setup
                .mds
                .chunk_recovered(l.segment_id, i, h.osd_id, version, Some(self.osd_id()))
                .await
                .map_err(OsdError::Mds)?;
            st.epoch = st.epoch.max(epoch);
            moved += cb;
            Metrics::add(&self.inner.metrics.recovery_chunks, 1);
            Metrics::add(&self.inner.metrics.recovery_bytes, cb);
        }
        Ok(moved)
    }

    /// Wait until `bytes` more fit the recovery rate limit.
    async fn pace(&self, bytes: u64) {
        let wait = {
            let mut r = self.inner.recovery.lock().await;
            if r.bytes_per_sec == 0 {
                return;
            }
            let now = tokio::time::Instant::now();
            let start = r.next_free.max(now);
            let cost = std::time::Duration::from_secs_f64(bytes as f64 / r.bytes_per_sec as f64);
            r.next_free = start + cost;
            start
        };
        tokio::time::sleep_until(wait).await;
    }
}
