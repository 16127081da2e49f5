//! Updates: how an overwrite of a byte range of a segment (UpdateSegment, at the primary) becomes
//! chunk work (CodFS §2.1, §4.3.1), and where each holder keeps it, one file per update scheme
//! ([`Scheme`], the file's, carried in its layout and in every UpdateChunk and ApplyDelta):
//! `fo.rs` (in place), `fl.rs` (data and parity logged), `codfs_pl.rs` (parity logged), `plr.rs`
//! (parity logged in space reserved after it; Algorithm 1 sizes the reserve).
//!
//! **The flow** (`flow.rs`) is the same for all four: CodFS's schemes are all delta-based
//! (§2.1.2). What every scheme shares stays here, in the primary's `Osd::update`: the segment's
//! lock and layout checks, refusing an update with fewer than k + 1 usable chunks, the new version
//! (newest seen + 1, used up whether or not the update is acknowledged), the split into one
//! `SubUpdate` per data chunk, the lease check before any chunk changes, and the end: stale chunks
//! marked at the MDS before the reply, fewer than k + 1 chunks holding the new version an error.
//! The data holder (UpdateChunk) stores its sub-update and sends one delta per parity chunk; the
//! parity holder (ApplyDelta) stores the delta, refused unless the parity includes exactly the
//! delta's prior version of that chunk, a no-op if it already includes the new one.
//!
//! **The schemes** differ only in how a holder stores a data change ([`store_data`]) and a parity
//! delta ([`store_delta`]). Whatever a scheme keeps beside a chunk (FL's and CodFS PL's logs, PLR's
//! reserve), the chunk store answers reads and versions with the chunk as of its logged changes
//! (a logged change counts once durable), so the primary's write, read, degraded read and
//! recovery (`write.rs`, `read.rs`, `degraded.rs`, `recover.rs`) and `view.rs` do not change per
//! scheme. Logs are merged on read (the store's merged read), by the GC task of the OSD daemon
//! (CodFS's Monitor Module, [`gc_due`]), and under PLR when a delta does not fit its reserve.

mod codfs_pl;
mod fl;
mod flow;
mod fo;
pub mod plr;

use std::ops::Range;

pub use ecstack_mds_proto::UpdateScheme as Scheme;

use crate::api::{Ack, ChunkMeta, DeltaStamp, Holder, Layout};
use crate::chunk_store::{ChunkStore, ChunkStoreError, LogState};
use crate::error::OsdError;
use crate::segment::SegState;
use crate::service::{check_enough, check_range, Osd};
use crate::view::View;

/// A data chunk's change at its holder: `new` at `offset`, from version `expected` (0: any) to
/// `version`.
pub(crate) struct DataChange {
    pub segment: u64,
    pub index: u32,
    pub offset: u64,
    pub new: std::sync::Arc<Vec<u8>>,
    pub expected: u64,
    pub version: u64,
}

/// A parity delta at its holder: `delta` is the bytes of `extents`, concatenated.
pub(crate) struct ParityDelta {
    pub segment: u64,
    pub index: u32,
    pub extents: Vec<Range<u64>>,
    pub delta: Vec<u8>,
    pub stamp: DeltaStamp,
}

impl ParityDelta {
    /// Where each extent's bytes start in `delta`; refused unless the extents add up to it.
    pub(crate) fn starts(&self) -> Result<Vec<usize>, ChunkStoreError> {
        let mut starts = Vec::with_capacity(self.extents.len());
        let mut at = 0usize;
        for e in &self.extents {
            starts.push(at);
            at = at.saturating_add((e.end.saturating_sub(e.start)) as usize);
        }
        if at != self.delta.len() {
            return Err(ChunkStoreError::Invalid {
                segment: self.segment,
                index: self.index,
                message: format!(
                    "the extents cover {at} bytes, the delta has {}",
                    self.delta.len()
                ),
            });
        }
        Ok(starts)
    }
}

/// Stores a data chunk's change by `scheme` (on a blocking thread's store); the bytes it replaces
/// and the chunk's header before.
pub(crate) fn store_data(
    scheme: Scheme,
    s: &dyn ChunkStore,
    c: &DataChange,
) -> Result<(Vec<u8>, ChunkMeta), ChunkStoreError> {
    match scheme {
        Scheme::Fo => fo::data(s, c),
        Scheme::Fl => fl::data(s, c),
        Scheme::ParityLog => codfs_pl::data(s, c),
        Scheme::Plr => plr::data(s, c),
    }
}

/// Stores a parity delta by `scheme` (on a blocking thread's store).
pub(crate) fn store_delta(
    scheme: Scheme,
    s: &dyn ChunkStore,
    d: &ParityDelta,
) -> Result<(), ChunkStoreError> {
    match scheme {
        Scheme::Fo => fo::delta(s, d),
        Scheme::Fl => fl::delta(s, d),
        Scheme::ParityLog => codfs_pl::delta(s, d),
        Scheme::Plr => plr::delta(s, d),
    }
}

/// A parity delta stored at this OSD, the parity holder (no request to check: the data holder is
/// this OSD too).
pub(crate) async fn apply_delta_local(
    osd: &Osd,
    scheme: Scheme,
    d: ParityDelta,
) -> Result<(), ChunkStoreError> {
    flow::apply_delta(osd, scheme, d).await
}

/// The GC's rule (FL, CodFS PL: the Monitor Module's garbage collection, §4.3): a chunk's log is
/// merged once it holds `max_records` changes or `max_bytes` bytes. PLR's reserves are merged when
/// full and by Algorithm 1, not by the GC; FO keeps no log.
pub fn gc_due(log: &LogState, max_records: u64, max_bytes: u64) -> bool {
    log.reserve_bytes == 0
        && log.records > 0
        && (log.records >= max_records || log.bytes >= max_bytes)
}

/// The chunks an update that is not acknowledged marks stale at the MDS. Going forward, those
/// that missed it (`newly`), so that they are never read beside the ones that took it. When that
/// would leave fewer than k chunks usable (the update reached too few holders to be finished, as
/// when three of six holders were unreachable at once: fault seed 367660 marked them stale and
/// the segment was lost, though every chunk still held the version before), it is rolled back
/// instead: the usable chunks it touched that did not miss it (they may hold it) are marked, and
/// the chunks it did not reach or did not touch keep the version before. A chunk whose outcome is
/// unknown is judged by its header's versions when the view is next learned (`view.rs`): the
/// marks keep the MDS's count of healthy chunks true, not the bytes read. If neither way leaves
/// k usable, the chunks that missed it are marked, as going forward.
pub(crate) fn unacknowledged_marks(
    n: usize,
    k: usize,
    unusable: &[u32],
    touched: &[u32],
    stale: &[u32],
    newly: &[u32],
) -> Vec<u32> {
    let usable_after = |marked: &[u32]| {
        (0..n as u32)
            .filter(|i| !unusable.contains(i) && !marked.contains(i))
            .count()
    };
    if usable_after(newly) >= k {
        return newly.to_vec();
    }
    let mut took: Vec<u32> = touched
        .iter()
        .copied()
        .filter(|i| !unusable.contains(i) && !stale.contains(i))
        .collect();
    took.sort_unstable();
    took.dedup();
    if usable_after(&took) >= k {
        took
    } else {
        newly.to_vec()
    }
}

/// One sub-update: data chunk `index` gets `data` at `offset` inside the chunk.
#[derive(Debug, Clone)]
pub(crate) struct SubUpdate {
    pub index: usize,
    pub offset: u64,
    pub data: Vec<u8>,
}

/// One update of one segment at its primary, ready for a scheme's chunk work.
pub(crate) struct Plan<'a> {
    pub layout: &'a Layout,
    /// The version the update issues.
    pub version: u64,
    pub subs: Vec<SubUpdate>,
    /// The usable parity holders.
    pub parity: Vec<Holder>,
}

/// What the chunk work of an update left (`flow::apply`).
pub(crate) struct Applied {
    /// The view afterwards: every data chunk the update touched is at its version (or among
    /// `stale`), and so is every parity chunk not among `stale`.
    pub view: View,
    /// Chunks that do not hold the update (failed, refused, unreachable), sorted, no repeats.
    pub stale: Vec<u32>,
    /// Why, one "chunk i: …" per failed sub-update.
    pub reasons: Vec<String>,
    /// Sub-updates whose data holder failed and that the primary could not finish either (one
    /// line each): the update is not durable, and `stale` still names every chunk that misses it.
    pub unfinished: Vec<String>,
}

/// UpdateChunk at a data holder: write `data` at `offset` of chunk `index` (refused unless the
/// chunk is at version `expected`, 0: any) and send the parity work to `parity`.
#[derive(Debug, Clone)]
pub(crate) struct ChunkUpdate {
    pub segment: u64,
    pub index: u32,
    pub offset: u64,
    pub data: Vec<u8>,
    pub version: u64,
    pub expected: u64,
    pub parity: Vec<Holder>,
    pub scheme: Scheme,
}

/// Split an update of `data` at segment byte `offset` into sub-updates per data chunk.
pub(crate) fn split_update(offset: u64, data: &[u8], cb: u64) -> Vec<SubUpdate> {
    let mut out = Vec::new();
    let mut at = offset;
    let end = offset + data.len() as u64;
    while at < end {
        let index = (at / cb) as usize;
        let chunk_end = ((index as u64 + 1) * cb).min(end);
        out.push(SubUpdate {
            index,
            offset: at - index as u64 * cb,
            data: data[(at - offset) as usize..(chunk_end - offset) as usize].to_vec(),
        });
        at = chunk_end;
    }
    out
}

impl Osd {
    /// UpdateSegment at the primary: overwrite `data.len()` bytes of the segment at `offset`
    /// through this OSD's [`Scheme`]; the version issued and the chunks that missed it (marked
    /// stale at the MDS before this returns).
    pub(crate) async fn update(
        &self,
        l: Layout,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<Ack, OsdError> {
        let lock = self.segment_lock(l.segment_id);
        let mut st = lock.lock().await;
        self.check_primary(&l, &mut st).await?;
        self.check_epoch_at_mds(&l, &mut st).await?;
        check_range(&l, offset, data.len() as u64).map_err(OsdError::OutOfRange)?;
        if data.is_empty() {
            return Err(OsdError::Invalid(format!(
                "segment {:#x}: empty update",
                l.segment_id
            )));
        }
        check_enough(&l, self.k(), "an update")?;
        self.learn_view(&l, &mut st).await;
        let k = self.k();
        // The version is used up whether or not this update is acknowledged.
        let version = st.issue();
        let plan = Plan {
            layout: &l,
            version,
            subs: split_update(offset, &data, self.chunk_bytes(l.length)),
            parity: l.holders[k..]
                .iter()
                .filter(|h| h.usable)
                .cloned()
                .collect(),
        };
        if let Err(e) = self.check_lease(l.segment_id) {
            st.forget();
            return Err(e);
        }
        let applied = match flow::apply(self, &plan, &st).await {
            Ok(a) => a,
            Err(e) => {
                st.forget();
                return Err(e);
            }
        };
        st.view = applied.view.clone();
        self.settle_update(&plan, &applied, &mut st).await
    }

    /// The end of an update, whatever the scheme: the chunks that missed it are marked stale at
    /// the MDS, and it is acknowledged only if at least k + 1 chunks hold the new version (else the
    /// view in `st` is forgotten).
    async fn settle_update(
        &self,
        plan: &Plan<'_>,
        applied: &Applied,
        st: &mut SegState,
    ) -> Result<Ack, OsdError> {
        let (k, n) = (self.k(), self.n());
        let (l, version, stale) = (plan.layout, plan.version, &applied.stale);
        let seg = l.segment_id;
        let unusable: Vec<u32> = l
            .holders
            .iter()
            .filter(|h| !h.usable)
            .map(|h| h.index)
            .collect();
        // Newly stale: what failed now, chunks on down holders this update touched (its data
        // chunks, every parity chunk); already stale, recovering or lost ones stay as they are.
        let down: Vec<u32> = l
            .holders
            .iter()
            .filter(|h| !h.usable && h.down)
            .map(|h| h.index)
            .collect();
        let mut newly: Vec<u32> = stale
            .iter()
            .copied()
            .filter(|i| !unusable.contains(i) || down.contains(i))
            .chain(down.iter().copied().filter(|&i| i as usize >= k))
            .collect();
        newly.sort_unstable();
        newly.dedup();
        let durable = n - unusable.len() - stale.iter().filter(|i| !unusable.contains(i)).count();
        if durable < k + 1 || !applied.unfinished.is_empty() {
            // Not acknowledged, but some chunks may hold the new bytes: the ones that do not are
            // marked stale (best effort) so they are never read beside the ones that do — unless
            // that leaves fewer than k usable, in which case the update is rolled back.
            let touched: Vec<u32> = plan
                .subs
                .iter()
                .map(|s| s.index as u32)
                .chain(plan.parity.iter().map(|h| h.index))
                .collect();
            let marks = unacknowledged_marks(n, k, &unusable, &touched, stale, &newly);
            if marks != newly {
                tracing::warn!(
                    segment = seg,
                    version,
                    missed = ?newly,
                    rolled_back = ?marks,
                    "an update that cannot be acknowledged missed too many chunks to go forward: \
                     the chunks that may hold it are marked stale instead"
                );
            }
            if let Err(e) = self.mark_stale(seg, &marks, version).await {
                tracing::warn!(segment = seg, "{e}");
            }
            st.forget();
            if !applied.unfinished.is_empty() {
                return Err(OsdError::NotDurable(format!(
                    "segment {seg:#x}: {}",
                    applied.unfinished.join("; ")
                )));
            }
            return Err(OsdError::NotDurable(format!(
                "segment {seg:#x}: update durable on only {durable} of {n} chunks, need k + 1 = {} ({})",
                k + 1,
                applied.reasons.join("; ")
            )));
        }
        self.mark_stale(seg, &newly, version).await?;
        let touched_unusable = plan
            .subs
            .iter()
            .map(|s| s.index as u32)
            .filter(|i| unusable.contains(i));
        let mut all: Vec<u32> = stale
            .iter()
            .copied()
            .chain(touched_unusable)
            .chain(newly.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        Ok(Ack {
            version,
            stale: all,
        })
    }

    /// UpdateChunk at this OSD, the data holder: the request checked, then the scheme's part.
    pub(crate) async fn update_chunk_here(&self, u: ChunkUpdate) -> Result<Vec<u32>, OsdError> {
        let (k, segment) = (self.k(), u.segment);
        if u.index as usize >= k {
            return Err(OsdError::Invalid(format!(
                "segment {segment:#x}: chunk {} is a parity chunk; sub-updates go to data chunks",
                u.index
            )));
        }
        if let Some(h) = u
            .parity
            .iter()
            .find(|h| (h.index as usize) < k || h.index as usize >= self.n())
        {
            return Err(OsdError::Invalid(format!(
                "segment {segment:#x}: holder of chunk {} is not a parity holder",
                h.index
            )));
        }
        flow::update_chunk(self, u).await
    }

    /// ApplyDelta at this OSD, the parity holder: the request checked, then the scheme's part.
    pub(crate) async fn apply_delta_here(
        &self,
        segment: u64,
        index: u32,
        extents: Vec<Range<u64>>,
        delta: Vec<u8>,
        stamp: DeltaStamp,
        scheme: Scheme,
    ) -> Result<(), OsdError> {
        if (index as usize) < self.k() {
            return Err(OsdError::Invalid(format!(
                "segment {segment:#x}: chunk {index} is a data chunk; deltas go to parity chunks"
            )));
        }
        if stamp.from as usize >= self.k() {
            return Err(OsdError::Invalid(format!(
                "segment {segment:#x}: a delta from chunk {}, which is not a data chunk",
                stamp.from
            )));
        }
        flow::apply_delta(
            self,
            scheme,
            ParityDelta {
                segment,
                index,
                extents,
                delta,
                stamp,
            },
        )
        .await
        .map_err(OsdError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_split_at_chunk_boundaries() {
        let data: Vec<u8> = (0..25).collect();
        let subs = split_update(5, &data, 10);
        let got: Vec<(usize, u64, usize)> = subs
            .iter()
            .map(|s| (s.index, s.offset, s.data.len()))
            .collect();
        assert_eq!(got, vec![(0, 5, 5), (1, 0, 10), (2, 0, 10)]);
        assert_eq!(subs[1].data[0], 5);
        let subs = split_update(29, &data[..1], 10);
        assert_eq!((subs[0].index, subs[0].offset), (2, 9));
    }

    /// (4, 2): an update of data chunks 1 and 2 that missed them and parity 5 (fault seed
    /// 367660) is rolled back: parity 4 is marked, and 0, 1, 2, 3, 5 keep the version before.
    /// One that missed only two goes forward; one whose roll-back would leave too few as well
    /// marks what missed it; chunks unusable before count in neither way.
    #[test]
    fn an_unacknowledged_update_goes_forward_or_back_by_what_leaves_k_usable() {
        let touched = [1, 2, 4, 5];
        assert_eq!(
            unacknowledged_marks(6, 4, &[], &touched, &[1, 2, 5], &[1, 2, 5]),
            vec![4]
        );
        assert_eq!(
            unacknowledged_marks(6, 4, &[], &touched, &[1, 5], &[1, 5]),
            vec![1, 5]
        );
        // Chunk 0 unusable before: forward leaves 2, 3, 4; back leaves 1, 3, 5.
        assert_eq!(
            unacknowledged_marks(6, 4, &[0], &touched, &[1, 5], &[1, 5]),
            vec![1, 5],
            "neither way leaves k: what missed it is marked"
        );
        assert_eq!(
            unacknowledged_marks(6, 4, &[3], &touched, &[5], &[5]),
            vec![5]
        );
        assert_eq!(
            unacknowledged_marks(6, 4, &[3], &[1, 4, 5], &[1, 5], &[1, 5]),
            vec![4],
            "forward leaves 0, 2, 4; back leaves 0, 1, 2, 5"
        );
    }
}
