//! The delta-based update flow every scheme shares (CodFS §2.1.2, §4.3.1). The primary sends
//! every sub-update in parallel as UpdateChunk to its data holder (its own chunk locally), naming
//! the version the chunk must be at and the file's scheme. The data holder stores the new bytes by
//! the scheme (`super::store_data`: in place, or logged under FL), computes per parity the extents
//! the update changes and the delta over them (`ErasureCode::delta_ranges` and
//! `ranged_parity_deltas`: the data's own range for RS, XOR and RAID-6; for RDP's diagonal parity,
//! row spans elsewhere in the chunk) and sends each to its parity holder with ApplyDelta, stamped
//! with the data chunk's index and its versions before and after; the parity holder stores it by
//! the scheme (`super::store_delta`: XORed in place over its extents as one change, or logged), so
//! deltas of different data chunks to one parity commute. Every change is durable before the
//! reply, and parity holders that did not acknowledge (or refused: they missed an earlier delta)
//! come back as stale.
//!
//! A sub-update whose data holder is unusable, refused or failed (whether or not it wrote) is
//! finished by the primary ([`degraded_deltas`]): it decodes the old bytes of the range from k
//! other chunks that agree with its view, computes the deltas and applies them at the parity
//! holders, and the data chunk is marked stale.

use std::ops::Range;
use std::sync::Arc;

use ecstack_codes::ErasureCode;

use super::{
    store_data, store_delta, Applied, ChunkUpdate, DataChange, ParityDelta, Plan, Scheme, SubUpdate,
};
use crate::api::{DeltaStamp, Holder, Layout};
use crate::chunk_store::ChunkStoreError;
use crate::error::OsdError;
use crate::segment::SegState;
use crate::service::{futures_join_all, Osd};

/// The primary's chunk work of an update.
pub(super) async fn apply(osd: &Osd, plan: &Plan<'_>, st: &SegState) -> Result<Applied, OsdError> {
    let (l, version) = (plan.layout, plan.version);
    // Phase 1: every sub-update at its (usable) data holder, in parallel; deltas commute.
    let (mut stale, failed, reasons) = at_data_holders(osd, plan, st).await;
    // The view after phase 1: the data chunks that took their sub-update are at `version`, and
    // so is their entry in every parity chunk not marked stale.
    let mut now = st.clone();
    for s in plan.subs.iter().filter(|s| !failed.contains(&s.index)) {
        now.view.applied[s.index] = version;
    }
    // Phase 2: sub-updates whose data holder is unusable, refused or failed (whether or not it
    // wrote its bytes): decode the old bytes of the range from k other chunks that agree with
    // the view, compute the deltas and apply them at the parity holders. A parity holder that
    // already took the delta from the data holder before it failed takes it again as a no-op.
    let failed_idx: Vec<u32> = failed.iter().map(|&i| i as u32).collect();
    let mut unfinished = Vec::new();
    for &i in &failed {
        stale.push(i as u32);
        let s = plan
            .subs
            .iter()
            .find(|s| s.index == i)
            .ok_or_else(|| OsdError::Internal("sub-update vanished".into()))?;
        // A sub-update the primary cannot finish leaves its data chunk stale (its bytes
        // unknown) and the parity chunks as they were for it; the chunks that missed other
        // sub-updates' deltas are in `stale` all the same, so the update still ends with every
        // chunk that misses it marked at the MDS (`settle_update`) before the error.
        if let Err(e) = degraded_deltas(
            osd,
            l,
            &mut now,
            s,
            version,
            &failed_idx,
            &plan.parity,
            &mut stale,
        )
        .await
        {
            unfinished.push(format!(
                "update of chunk {i} failed ({}) and the primary cannot finish it: {e}",
                reasons.join("; ")
            ));
        }
    }
    stale.sort_unstable();
    stale.dedup();
    Ok(Applied {
        view: now.view,
        stale,
        reasons,
        unfinished,
    })
}

/// Phase 1: UpdateChunk at every usable data holder the update touches. Returns the parity
/// chunks that missed a delta, the data chunks whose sub-update failed or whose holder is
/// unusable (those first), and why each failed.
async fn at_data_holders(
    osd: &Osd,
    plan: &Plan<'_>,
    st: &SegState,
) -> (Vec<u32>, Vec<usize>, Vec<String>) {
    let (l, version) = (plan.layout, plan.version);
    let asks = plan
        .subs
        .iter()
        .filter(|s| l.holders[s.index].usable)
        .map(|s| {
            let h = &l.holders[s.index];
            let parity = plan.parity.clone();
            let stamp = DeltaStamp {
                from: s.index as u32,
                prior: st.view.applied[s.index],
                version,
            };
            async move {
                let r = osd
                    .update_at(
                        l.segment_id,
                        h,
                        s.offset,
                        s.data.clone(),
                        stamp,
                        parity,
                        l.scheme,
                    )
                    .await;
                (s.index, r)
            }
        });
    let mut stale: Vec<u32> = Vec::new();
    let mut failed: Vec<usize> = plan
        .subs
        .iter()
        .filter(|s| !l.holders[s.index].usable)
        .map(|s| s.index)
        .collect();
    let mut reasons = Vec::new();
    for (i, r) in futures_join_all(asks).await {
        match r {
            Ok(p) => stale.extend(p),
            Err(e) => {
                reasons.push(format!("chunk {i}: {e}"));
                failed.push(i);
            }
        }
    }
    (stale, failed, reasons)
}

/// A sub-update whose data holder did not (certainly) apply it: decode the old bytes of its
/// range from k other chunks that agree with the view `now` (the failed data chunks and stale
/// parity excluded), compute the parity deltas and apply them at the parity holders.
#[allow(clippy::too_many_arguments)]
async fn degraded_deltas(
    osd: &Osd,
    l: &Layout,
    now: &mut SegState,
    s: &SubUpdate,
    version: u64,
    failed: &[u32],
    parity: &[Holder],
    stale: &mut Vec<u32>,
) -> Result<(), String> {
    let without = Layout {
        holders: l
            .holders
            .iter()
            .map(|h| Holder {
                usable: h.usable && !failed.contains(&h.index) && !stale.contains(&h.index),
                ..h.clone()
            })
            .collect(),
        ..l.clone()
    };
    let (lo, hi) = (s.offset, s.offset + s.data.len() as u64);
    let (shards, _) = osd
        .gather(&without, now, lo, hi, vec![None; osd.n()])
        .await
        .map_err(|e| e.to_string())?;
    let old = shards[s.index].clone();
    let cb = osd.chunk_bytes(l.length);
    let deltas = ranged_deltas(osd.code(), s.index, cb, lo, old, Arc::new(s.data.clone()))
        .await
        .map_err(|e| e.to_string())?;
    let stamp = DeltaStamp {
        from: s.index as u32,
        prior: now.view.applied[s.index],
        version,
    };
    let targets: Vec<&Holder> = parity
        .iter()
        .filter(|h| !stale.contains(&h.index))
        .collect();
    let missed = send_deltas(osd, l.segment_id, l.scheme, &targets, &deltas, stamp).await;
    stale.extend(missed);
    now.view.applied[s.index] = version;
    Ok(())
}

/// UpdateChunk at the holder: store the new bytes by the scheme (refused unless the chunk is at
/// version `expected`, 0: any), send one delta per parity holder, all durable before returning;
/// the parity chunks that did not acknowledge.
pub(super) async fn update_chunk(osd: &Osd, u: ChunkUpdate) -> Result<Vec<u32>, OsdError> {
    let ChunkUpdate {
        segment,
        index,
        offset,
        data,
        version,
        expected,
        parity,
        scheme,
    } = u;
    let new = Arc::new(data);
    let change = DataChange {
        segment,
        index,
        offset,
        new: new.clone(),
        expected,
        version,
    };
    let (old, before) = osd
        .blocking(move |s| store_data(scheme, s, &change))
        .await?;
    if parity.is_empty() {
        return Ok(Vec::new());
    }
    let deltas = ranged_deltas(
        osd.code(),
        index as usize,
        before.chunk_bytes,
        offset,
        old,
        new,
    )
    .await?;
    let stamp = DeltaStamp {
        from: index,
        prior: before.version,
        version,
    };
    let targets: Vec<&Holder> = parity.iter().collect();
    Ok(send_deltas(osd, segment, scheme, &targets, &deltas, stamp).await)
}

/// ApplyDelta at the parity holder: store the delta by the scheme (the chunk store refuses it
/// unless the parity includes exactly `stamp.prior` of chunk `stamp.from`, and takes it as a no-op
/// if it already includes `stamp.version`).
pub(super) async fn apply_delta(
    osd: &Osd,
    scheme: Scheme,
    d: ParityDelta,
) -> Result<(), ChunkStoreError> {
    let ahead = osd.merge_ahead().clone();
    osd.blocking(move |s| {
        store_delta(scheme, s, &d)?;
        if scheme == Scheme::Plr {
            ahead.note(s, d.segment, d.index);
        }
        Ok(())
    })
    .await
}

/// One parity chunk's change: the extents it covers and its bytes over them, concatenated.
pub(super) struct RangedDelta {
    pub extents: Vec<Range<u64>>,
    pub delta: Vec<u8>,
}

/// The m ranged parity deltas of data chunk `index` (of a stripe of `chunk_bytes`-byte chunks)
/// going from `old` to `new` at `offset` (on a blocking thread): one path for every code, the
/// data's own range for byte-position-wise ones, RDP's row spans for its diagonal parity.
async fn ranged_deltas(
    code: &Arc<dyn ErasureCode>,
    index: usize,
    chunk_bytes: u64,
    offset: u64,
    old: Vec<u8>,
    new: Arc<Vec<u8>>,
) -> Result<Vec<RangedDelta>, OsdError> {
    let code = code.clone();
    tokio::task::spawn_blocking(move || {
        let range = offset..offset + new.len() as u64;
        let extents = code.delta_ranges(index, chunk_bytes, range)?;
        let mut deltas: Vec<Vec<u8>> = extents
            .iter()
            .map(|es| vec![0u8; es.iter().map(|e| (e.end - e.start) as usize).sum()])
            .collect();
        let mut refs: Vec<&mut [u8]> = deltas.iter_mut().map(|d| d.as_mut_slice()).collect();
        code.ranged_parity_deltas(index, chunk_bytes, offset, &old, &new, &mut refs)?;
        Ok(extents
            .into_iter()
            .zip(deltas)
            .map(|(extents, delta)| RangedDelta { extents, delta })
            .collect())
    })
    .await
    .map_err(|e| OsdError::Internal(e.to_string()))?
    .map_err(|e: ecstack_codes::CodeError| OsdError::Invalid(e.to_string()))
}

/// Sends each of `targets` (parity holders) its ranged delta (`deltas[index - k]`) with
/// ApplyDelta, all at once; the parity chunks that did not take it (each logged).
async fn send_deltas(
    osd: &Osd,
    segment: u64,
    scheme: Scheme,
    targets: &[&Holder],
    deltas: &[RangedDelta],
    stamp: DeltaStamp,
) -> Vec<u32> {
    let k = osd.k();
    let sends = targets.iter().map(|h| {
        let d = &deltas[h.index as usize - k];
        let (extents, delta) = (d.extents.clone(), d.delta.clone());
        async move {
            let r = osd
                .apply_delta_at(segment, h, extents, delta, stamp, scheme)
                .await;
            (h.index, r)
        }
    });
    let mut missed = Vec::new();
    for (i, r) in futures_join_all(sends).await {
        if let Err(e) = r {
            tracing::warn!(segment, chunk = i, "parity delta not applied: {e}");
            missed.push(i);
        }
    }
    missed
}
