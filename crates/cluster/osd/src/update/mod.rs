//! Updates: how an overwrite of a byte range of a segment (UpdateSegment, at the primary) becomes
//! chunk work, one file per update scheme behind [`Scheme`] (CodFS §2.1, §4.3.1). Today there is
//! one scheme, [`Scheme::Fo`] (`fo.rs`, full overwrite: the data holder writes the new bytes in
//! place and sends one parity delta per parity chunk with ApplyDelta, which the parity holder XORs
//! in place).
//!
//! **The seam.** What every scheme shares stays here, in the primary's `Osd::update`: the
//! segment's lock and layout checks, refusing an update with fewer than k + 1 usable chunks, the
//! new version (newest seen + 1, used up whether or not the update is acknowledged), the split into
//! one `SubUpdate` per data chunk, the lease check before any chunk changes, and the end: stale
//! chunks marked at the MDS before the reply, fewer than k + 1 chunks holding the new version an
//! error. A scheme supplies three steps:
//!
//! - `Scheme::apply`, at the primary: carry out the sub-updates at the holders and say which
//!   chunks did not take them and what the view is afterwards (`Applied`);
//! - `Scheme::update_chunk`, at a data holder (UpdateChunk): apply one sub-update, refused unless
//!   the chunk is at the version the primary expects, and pass its deltas on;
//! - `Scheme::apply_delta`, at a parity holder (ApplyDelta): take one data chunk's delta, refused
//!   unless the parity includes exactly the delta's prior version of that chunk, a no-op if it
//!   already includes the new one.
//!
//! Whatever a scheme keeps beside a chunk (FL's log, CodFS PL's appended deltas, PLR's reserved
//! space), a holder answers GetChunk and ChunkVersion with the chunk as of its versions, so the
//! primary's write, read, degraded read and recovery (`write.rs`, `read.rs`, `degraded.rs`,
//! `recover.rs`) do not change per scheme. Schemes FL, CodFS PL and PLR are to come as variants
//! and files beside `fo.rs`.

mod fo;

use std::ops::Range;

use crate::api::{Ack, DeltaStamp, Holder, Layout};
use crate::chunk_store::ChunkStoreError;
use crate::error::OsdError;
use crate::segment::SegState;
use crate::service::{check_enough, check_range, Osd};
use crate::view::View;

/// An update scheme: how sub-updates become chunk changes and parity work (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scheme {
    /// Full overwrite (CodFS FO): data and parity changed in place, parity by deltas (`fo.rs`).
    #[default]
    Fo,
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

/// What a scheme's chunk work left ([`Scheme::apply`]).
pub(crate) struct Applied {
    /// The view afterwards: every data chunk the update touched is at its version (or among
    /// `stale`), and so is every parity chunk not among `stale`.
    pub view: View,
    /// Chunks that do not hold the update (failed, refused, unreachable), sorted, no repeats.
    pub stale: Vec<u32>,
    /// Why, one "chunk i: …" per failed sub-update.
    pub reasons: Vec<String>,
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
}

impl Scheme {
    /// Its name in logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Fo => "fo",
        }
    }

    /// The primary's chunk work of `plan` (the segment's lock held, the view in `st` known).
    pub(crate) async fn apply(
        self,
        osd: &Osd,
        plan: &Plan<'_>,
        st: &SegState,
    ) -> Result<Applied, OsdError> {
        match self {
            Scheme::Fo => fo::apply(osd, plan, st).await,
        }
    }

    /// A data holder's part of a sub-update (its request checked); the parity chunks that did not
    /// take their part.
    pub(crate) async fn update_chunk(
        self,
        osd: &Osd,
        u: ChunkUpdate,
    ) -> Result<Vec<u32>, OsdError> {
        match self {
            Scheme::Fo => fo::update_chunk(osd, u).await,
        }
    }

    /// A parity holder's part of a sub-update: data chunk `stamp.from`'s delta into parity chunk
    /// `index` over `extents` (the delta is their bytes concatenated).
    pub(crate) async fn apply_delta(
        self,
        osd: &Osd,
        segment: u64,
        index: u32,
        extents: Vec<Range<u64>>,
        delta: Vec<u8>,
        stamp: DeltaStamp,
    ) -> Result<(), ChunkStoreError> {
        match self {
            Scheme::Fo => fo::apply_delta(osd, segment, index, extents, delta, stamp).await,
        }
    }
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
        let version = st.view.newest + 1;
        st.view.newest = version;
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
        let applied = match self.scheme().apply(self, &plan, &st).await {
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
        if durable < k + 1 {
            // Not acknowledged, but some chunks may hold the new bytes: the ones that do not are
            // marked stale (best effort) so they are never read beside the ones that do.
            if let Err(e) = self.mark_stale(seg, &newly, version).await {
                tracing::warn!(segment = seg, "{e}");
            }
            st.forget();
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
        self.scheme().update_chunk(self, u).await
    }

    /// ApplyDelta at this OSD, the parity holder: the request checked, then the scheme's part.
    pub(crate) async fn apply_delta_here(
        &self,
        segment: u64,
        index: u32,
        extents: Vec<Range<u64>>,
        delta: Vec<u8>,
        stamp: DeltaStamp,
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
        self.scheme()
            .apply_delta(self, segment, index, extents, delta, stamp)
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
}
