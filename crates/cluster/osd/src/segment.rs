//! What the primary keeps per segment ([`SegState`]) and the steps every primary operation starts
//! with: take the segment's lock, check the layout ([`Osd::check_primary`]: lease, primary, epoch),
//! learn the view from the usable holders when it is not known ([`Osd::learn_view`], `view.rs`);
//! and the headers of chunks written whole under a view, and stale marks at the MDS.

use std::sync::Arc;

use ecstack_rpc::UpdateScheme;

use crate::api::{ChunkMeta, Layout};
use crate::error::OsdError;
use crate::metrics::Metrics;
use crate::service::{check_layout, futures_join_all, Osd};
use crate::view::{Verdict, View};

/// What the primary knows about a segment.
#[derive(Debug, Default, Clone)]
pub(crate) struct SegState {
    /// The consistent view (empty: not known yet; learned from the holders).
    pub view: View,
    /// Highest layout epoch seen.
    pub epoch: u64,
    /// The view was learned from fewer than k chunks that agree with it (more than m holders
    /// unreachable): a guess for the chunks that did not answer (a data chunk no parity reported
    /// on is taken at version 0). It serves the operation that learned it and is learned afresh
    /// by the next, so a holder that comes back is heard instead of being judged stale by a guess
    /// (a read after three of six OSDs came back once found the returning chunk "stale" against
    /// version 0 for good).
    pub provisional: bool,
    /// A request of the segment got past [`Osd::check_primary`] on this OSD since it started: the
    /// state was never empty (a new segment's first write is the only one that finds it so).
    pub served: bool,
    /// The highest version issued for the segment that this OSD knows of: the ones it issued as
    /// its primary, and the one the MDS last heard of (the layout's `version`: a primary that
    /// restarted or was promoted learns there what an earlier primary issued). Kept by
    /// [`SegState::forget`]. An update that is not acknowledged may leave its version on no
    /// chunk a view is learned from, yet the MDS has heard it (the chunks that missed it are
    /// marked stale at it, and the MDS refuses rebuilds reported below it): new versions are
    /// issued above it, and rebuilds are reported at it at least. (Seed 367173 of the fault runs:
    /// an update at version 5 whose data holder and degraded path both failed marked its chunk
    /// stale at 5 while every live chunk stayed at 4; each rebuild, reported at 4, was refused.)
    pub issued: u64,
    /// This OSD asked the MDS for the segment's epoch since it started (its first update did).
    /// A layout held by a client may be older than a rebuild a previous run of this OSD reported:
    /// it calls the rebuilt chunk stale, and an update under it would leave that chunk out while
    /// the MDS counts it healthy. A primary that reported the rebuild itself raises `epoch`
    /// (`recover.rs`); one that restarted since knows nothing of it, so it asks once.
    pub epoch_checked: bool,
}

impl SegState {
    pub fn forget(&mut self) {
        self.view = View::default();
        self.provisional = false;
    }

    /// The next version to issue for a change: above every version seen and every one issued.
    pub fn issue(&mut self) -> u64 {
        let version = self.view.newest.max(self.issued) + 1;
        self.view.newest = version;
        self.issued = version;
        version
    }
}

impl Osd {
    pub(crate) fn segment_lock(&self, segment: u64) -> Arc<tokio::sync::Mutex<SegState>> {
        let mut map = self
            .inner
            .segments
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.entry(segment).or_default().clone()
    }

    /// Refuses a layout this OSD is not the primary of, or one older than the newest it has seen.
    pub(crate) async fn check_primary(
        &self,
        l: &Layout,
        st: &mut SegState,
    ) -> Result<(), OsdError> {
        check_layout(l, self.n()).map_err(OsdError::Invalid)?;
        self.await_lease(l.segment_id).await?;
        if l.primary != self.osd_id() {
            return Err(OsdError::StaleLayout(format!(
                "segment {:#x}: osd {} is not its primary (the layout names osd {})",
                l.segment_id,
                self.osd_id(),
                l.primary
            )));
        }
        if l.epoch < st.epoch {
            return Err(OsdError::StaleLayout(format!(
                "segment {:#x}: layout epoch {} is older than epoch {} seen before",
                l.segment_id, l.epoch, st.epoch
            )));
        }
        if l.epoch > st.epoch {
            // The layout changed (promotion, recovery): another primary may have written since;
            // learn the view afresh.
            st.forget();
            st.epoch = l.epoch;
        }
        if st.provisional {
            st.forget();
        }
        st.issued = st.issued.max(l.version);
        st.served = true;
        Ok(())
    }

    /// Before a primary's first update of a segment since it started: refuses a layout older
    /// than the segment's epoch at the MDS ([`SegState::epoch_checked`]). An MDS that does not
    /// answer fails the update as not durable (the client retries).
    pub(crate) async fn check_epoch_at_mds(
        &self,
        l: &Layout,
        st: &mut SegState,
    ) -> Result<(), OsdError> {
        if st.epoch_checked {
            return Ok(());
        }
        let epoch = self
            .inner
            .setup
            .mds
            .segment_epoch(l.segment_id)
            .await
            .map_err(|e| {
                OsdError::NotDurable(format!(
                    "segment {:#x}: the MDS could not confirm the layout is current: {e}",
                    l.segment_id
                ))
            })?;
        st.epoch_checked = true;
        if l.epoch < epoch {
            st.epoch = st.epoch.max(epoch);
            st.forget();
            return Err(OsdError::StaleLayout(format!(
                "segment {:#x}: layout epoch {} is older than epoch {epoch} at the MDS",
                l.segment_id, l.epoch
            )));
        }
        Ok(())
    }

    /// Learns the segment's view from its usable holders unless known (`view.rs`).
    pub(crate) async fn learn_view(&self, l: &Layout, st: &mut SegState) {
        if st.view.is_known() {
            return;
        }
        let asks =
            l.holders.iter().filter(|h| h.usable).map(|h| async move {
                (h.index as usize, self.versions_from(l.segment_id, h).await)
            });
        let mut reports = vec![None; self.n()];
        for (i, a) in futures_join_all(asks).await {
            if let Ok(Some(v)) = a {
                reports[i] = Some(v);
            }
        }
        let view = View::choose(self.k(), &reports);
        let agreeing = reports
            .iter()
            .enumerate()
            .filter(|(i, r)| {
                r.as_ref()
                    .is_some_and(|r| view.verdict(*i, r) == Verdict::Current)
            })
            .count();
        st.provisional = agreeing < self.k();
        st.view = view;
    }

    /// The header a chunk written whole (write, recovery, repair) carries under `view`.
    pub(crate) fn meta_for(&self, l: &Layout, view: &View, index: u32) -> ChunkMeta {
        let stamp = view.stamp_of(index as usize);
        let plr_parity = l.scheme == UpdateScheme::Plr && index as usize >= self.k();
        ChunkMeta {
            reserve_bytes: if plr_parity {
                self.initial_reserve()
            } else {
                0
            },
            scheme: l.scheme,
            segment_id: l.segment_id,
            index,
            version: stamp.version,
            chunk_bytes: self.chunk_bytes(l.length),
            segment_length: l.length,
            applied: stamp.applied,
        }
    }

    /// Durably marks `chunks` stale at the MDS (they missed `version`) before a reply; a failure
    /// is [`OsdError::NotDurable`].
    pub(crate) async fn mark_stale(
        &self,
        segment: u64,
        chunks: &[u32],
        version: u64,
    ) -> Result<(), OsdError> {
        if chunks.is_empty() {
            return Ok(());
        }
        self.inner
            .setup
            .mds
            .mark_stale(segment, chunks, version)
            .await
            .map(|()| Metrics::add(&self.inner.metrics.stale_marked, chunks.len() as u64))
            .map_err(|e| {
                OsdError::NotDurable(format!(
                    "segment {segment:#x}: chunks {chunks:?} were not written and the MDS could not mark them stale: {e}"
                ))
            })
    }
}
