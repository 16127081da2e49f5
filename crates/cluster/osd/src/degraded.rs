//! The ordinary read and the degraded read at the primary. The primary reads the range from the
//! data chunks it covers (each over its own in-chunk range), checking each chunk's version against
//! the one it must have. If one is missing (unusable in the layout, unreachable, absent), failed
//! its checksum, or is older than it must be (stale), the read is **degraded**: the same in-chunk
//! range from any k usable chunks (data first, then parity), decoded with `reconstruct`
//! (byte-position-wise codes decode any range; RDP reads what `ErasureCode::decode_span` says:
//! the range of every other chunk for one lost data chunk, whole chunks for two, see
//! [`Osd::gather`]). A chunk that failed its checksum or was stale is
//! rebuilt whole and rewritten at its holder (repair) with the version it must have. A chunk newer
//! than the primary knows means its view is old: it forgets the segment's versions and refuses
//! ([`OsdError::StaleLayout`]); the client retries. [`Osd::gather`] also serves the FO update's
//! degraded deltas and recovery.

use bytes::Bytes;

use crate::api::{Holder, Layout};
use crate::error::OsdError;
use crate::holder::Miss;
use crate::metrics::Metrics;
use crate::segment::SegState;
use crate::service::{futures_join_all, newer, Osd};

/// Each data chunk's part of a read: its index and its bytes, or why not.
type Parts = Vec<(usize, Result<Bytes, Miss>)>;

/// What a gather has so far: each chunk's bytes (over the range asked), which holders were asked,
/// the chunks that failed their checksum or were stale, and why each failed chunk did.
struct Gathered {
    shards: Vec<Option<Vec<u8>>>,
    tried: Vec<bool>,
    corrupt: Vec<u32>,
    reasons: Vec<String>,
}

impl Gathered {
    /// Starting from the chunks given (their holders count as asked).
    fn new(have: Vec<Option<Vec<u8>>>) -> Gathered {
        Gathered {
            tried: have.iter().map(|s| s.is_some()).collect(),
            shards: have,
            corrupt: Vec::new(),
            reasons: Vec::new(),
        }
    }
}

/// The in-chunk range `[a, b)` of data chunk `i` that a read of `[offset, offset + len)` covers.
fn part_of(i: usize, offset: u64, len: u64, cb: u64) -> (u64, u64) {
    let first = (offset / cb) as usize;
    let last = ((offset + len - 1) / cb) as usize;
    let a = if i == first {
        offset - i as u64 * cb
    } else {
        0
    };
    let b = if i == last {
        offset + len - i as u64 * cb
    } else {
        cb
    };
    (a, b)
}

impl Osd {
    /// A read of `[offset, offset + len)` once the segment's lock is held and the request checked
    /// (`len` > 0): the data chunks' parts, or, when one cannot be had, the degraded read.
    pub(crate) async fn read_locked(
        &self,
        l: &Layout,
        st: &mut SegState,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, OsdError> {
        self.learn_view(l, st).await;
        let got = self.read_parts(l, st, offset, len).await;
        if let Some((i, Err(Miss::Newer(e)))) =
            got.iter().find(|(_, r)| matches!(r, Err(Miss::Newer(_))))
        {
            st.forget();
            return Err(newer(l.segment_id, *i as u32, e));
        }
        if got.iter().all(|(_, r)| r.is_ok()) {
            let mut out = Vec::with_capacity(len as usize);
            for (_, r) in got {
                out.extend_from_slice(&r.unwrap_or_default());
            }
            return Ok(out);
        }
        Metrics::add(&self.inner.metrics.degraded_reads, 1);
        self.read_degraded(l, st, offset, len, got).await
    }

    /// Normal read: the needed data chunks, each over its own range.
    async fn read_parts(&self, l: &Layout, st: &SegState, offset: u64, len: u64) -> Parts {
        let cb = self.chunk_bytes(l.length);
        let first = (offset / cb) as usize;
        let last = ((offset + len - 1) / cb) as usize;
        let asks = (first..=last).map(|i| {
            let h = &l.holders[i];
            let (lo, hi) = part_of(i, offset, len, cb);
            async move {
                if !h.usable {
                    return (i, Err(Miss::Other("not usable".into())));
                }
                (i, self.fetch_checked(l, st, h, lo, hi - lo).await)
            }
        });
        futures_join_all(asks).await
    }

    /// Degraded read: the same in-chunk range of any k chunks, decoded (the parts already `got`
    /// reused where whole). A chunk that failed its checksum (or is older than it should be) is
    /// rebuilt whole and rewritten.
    async fn read_degraded(
        &self,
        l: &Layout,
        st: &mut SegState,
        offset: u64,
        len: u64,
        got: Parts,
    ) -> Result<Vec<u8>, OsdError> {
        let cb = self.chunk_bytes(l.length);
        let first = (offset / cb) as usize;
        let last = ((offset + len - 1) / cb) as usize;
        let repair = got
            .iter()
            .any(|(_, r)| matches!(r, Err(Miss::Corrupt(_) | Miss::Stale(_))));
        let (lo, hi) = if repair || first != last {
            (0, cb)
        } else {
            (offset - first as u64 * cb, offset + len - first as u64 * cb)
        };
        let mut have = vec![None; self.n()];
        let mut tried_bad = Vec::new();
        let mut to_repair = Vec::new();
        for (i, r) in got {
            match r {
                Ok(d) if lo == 0 && hi == cb && d.len() as u64 == cb => {
                    have[i] = Some(Vec::from(d))
                }
                Ok(_) => {}
                Err(e) => {
                    if matches!(e, Miss::Corrupt(_) | Miss::Stale(_)) {
                        to_repair.push(i as u32);
                    }
                    tried_bad.push(i);
                }
            }
        }
        let l2 = Layout {
            holders: l
                .holders
                .iter()
                .map(|h| Holder {
                    usable: h.usable && !tried_bad.contains(&(h.index as usize)),
                    ..h.clone()
                })
                .collect(),
            ..l.clone()
        };
        let gathered = self.gather(&l2, st, lo, hi, have).await;
        if matches!(gathered, Err(OsdError::StaleLayout(_))) {
            st.forget();
        }
        let (shards, mut corrupt) = gathered?;
        corrupt.extend(to_repair);
        let mut out = Vec::with_capacity(len as usize);
        for (i, shard) in shards.iter().enumerate().take(last + 1).skip(first) {
            let (a, b) = part_of(i, offset, len, cb);
            out.extend_from_slice(&shard[(a - lo) as usize..(b - lo) as usize]);
        }
        if repair && lo == 0 && hi == cb {
            corrupt.sort_unstable();
            corrupt.dedup();
            self.repair(l, st, &shards, &corrupt).await;
        }
        Ok(out)
    }

    /// Gather the in-chunk range `[lo, hi)` of every chunk: the chunks given in `have` (over that
    /// range), then any usable chunk, data chunks first, until k are present; decode the missing
    /// ones. Returns all n shards over `[lo, hi)` and the chunks that failed their checksum or
    /// were stale (to be repaired).
    ///
    /// A code that mixes rows (RDP) may need more than the range to decode it
    /// (`ErasureCode::decode_span` of the chunks erased): then the range of the other usable
    /// chunks is asked for too (RDP rebuilds one lost data chunk from the range of all the
    /// others, its diagonal parity included), and if the span is still wider (two chunks lost),
    /// the span of k chunks is gathered afresh, decoded, and the range cut out of it. A
    /// byte-position-wise code (RS, XOR, RAID-6) always decodes the range from k chunks.
    pub(crate) async fn gather(
        &self,
        l: &Layout,
        st: &SegState,
        lo: u64,
        hi: u64,
        have: Vec<Option<Vec<u8>>>,
    ) -> Result<(Vec<Vec<u8>>, Vec<u32>), OsdError> {
        let cb = self.chunk_bytes(l.length);
        let mut g = Gathered::new(have);
        self.fetch_until(l, st, lo, hi, &mut g, self.k()).await?;
        let mut span = self.decode_span(l, cb, lo..hi, &g)?;
        if span != (lo..hi) {
            self.fetch_until(l, st, lo, hi, &mut g, self.n()).await?;
            span = self.decode_span(l, cb, lo..hi, &g)?;
        }
        if span == (lo..hi) {
            let shards = self.decode(l, g.shards).await?;
            return Ok((shards, g.corrupt));
        }
        // Afresh over the span, without asking again the holders that failed.
        let mut whole = Gathered::new(vec![None; self.n()]);
        for i in 0..self.n() {
            whole.tried[i] = g.tried[i] && g.shards[i].is_none();
        }
        whole.corrupt = g.corrupt;
        whole.reasons = g.reasons;
        self.fetch_until(l, st, span.start, span.end, &mut whole, self.k())
            .await?;
        let again = self.decode_span(l, cb, span.clone(), &whole)?;
        if again != span {
            return Err(OsdError::Internal(format!(
                "segment {:#x}: decoding bytes {}..{} needs {}..{}, wider than the {}..{} gathered",
                l.segment_id, span.start, span.end, again.start, again.end, span.start, span.end
            )));
        }
        let shards = self.decode(l, whole.shards).await?;
        let (a, b) = ((lo - span.start) as usize, (hi - span.start) as usize);
        Ok((
            shards.into_iter().map(|s| s[a..b].to_vec()).collect(),
            whole.corrupt,
        ))
    }

    /// Asks usable holders not tried yet for `[lo, hi)`, data chunks first, until `want` chunks
    /// are present or none is left to ask; fewer than k present is [`OsdError::Unrecoverable`].
    async fn fetch_until(
        &self,
        l: &Layout,
        st: &SegState,
        lo: u64,
        hi: u64,
        g: &mut Gathered,
        want: usize,
    ) -> Result<(), OsdError> {
        let k = self.k();
        loop {
            let present = g.shards.iter().filter(|s| s.is_some()).count();
            if present >= want {
                return Ok(());
            }
            // Ask as many more usable holders as are still missing, data chunks first.
            let next: Vec<&Holder> = l
                .holders
                .iter()
                .filter(|h| h.usable && !g.tried[h.index as usize])
                .take(want - present)
                .collect();
            if next.is_empty() {
                if present >= k {
                    return Ok(());
                }
                let unusable: Vec<u32> = l
                    .holders
                    .iter()
                    .filter(|h| !h.usable)
                    .map(|h| h.index)
                    .collect();
                return Err(OsdError::Unrecoverable(format!(
                    "segment {:#x}: only {present} of the k = {k} chunks needed are readable (unusable: {unusable:?}; {})",
                    l.segment_id,
                    g.reasons.join("; ")
                )));
            }
            let asks = next
                .iter()
                .map(|h| async move { (h.index, self.fetch_checked(l, st, h, lo, hi - lo).await) });
            for (i, r) in futures_join_all(asks).await {
                g.tried[i as usize] = true;
                match r {
                    Ok(d) => g.shards[i as usize] = Some(Vec::from(d)),
                    Err(Miss::Newer(e)) => return Err(newer(l.segment_id, i, &e)),
                    Err(e) => {
                        if matches!(e, Miss::Corrupt(_) | Miss::Stale(_)) {
                            g.corrupt.push(i);
                        }
                        g.reasons.push(format!("chunk {i}: {e}"));
                    }
                }
            }
        }
    }

    /// What the code must read of every present chunk to rebuild `range` of the missing ones.
    fn decode_span(
        &self,
        l: &Layout,
        cb: u64,
        range: std::ops::Range<u64>,
        g: &Gathered,
    ) -> Result<std::ops::Range<u64>, OsdError> {
        let erased: Vec<usize> = (0..self.n()).filter(|&i| g.shards[i].is_none()).collect();
        if erased.is_empty() {
            return Ok(range);
        }
        self.code()
            .decode_span(cb, range, &erased)
            .map_err(|e| OsdError::Internal(format!("decode of segment {:#x}: {e}", l.segment_id)))
    }

    /// Every missing shard rebuilt from the present ones (all of one length), on a blocking thread.
    async fn decode(
        &self,
        l: &Layout,
        mut shards: Vec<Option<Vec<u8>>>,
    ) -> Result<Vec<Vec<u8>>, OsdError> {
        if shards.iter().any(|s| s.is_none()) {
            let code = self.code().clone();
            shards =
                tokio::task::spawn_blocking(move || code.reconstruct(&mut shards).map(|_| shards))
                    .await
                    .map_err(|e| OsdError::Internal(e.to_string()))?
                    .map_err(|e| {
                        OsdError::Internal(format!("decode of segment {:#x}: {e}", l.segment_id))
                    })?;
        }
        debug_assert_eq!(shards.len(), self.n());
        Ok(shards.into_iter().map(|s| s.unwrap_or_default()).collect())
    }

    /// Rewrite chunks that failed their checksum (or were stale) from decoded shards, best effort:
    /// a failed repair leaves the chunk as it was (it stays detectable).
    async fn repair(&self, l: &Layout, st: &SegState, shards: &[Vec<u8>], chunks: &[u32]) {
        for &i in chunks {
            if self.check_lease(l.segment_id).is_err() {
                return;
            }
            let h = &l.holders[i as usize];
            let meta = self.meta_for(l, &st.view, i);
            let data = Bytes::copy_from_slice(&shards[i as usize]);
            match self.put_to(h, meta, data).await {
                Ok(()) => {
                    Metrics::add(&self.inner.metrics.repairs, 1);
                    tracing::warn!(
                        segment = l.segment_id,
                        chunk = i,
                        osd = h.osd_id,
                        "repaired a chunk that failed its checksum or was stale"
                    )
                }
                Err(e) => tracing::warn!(
                    segment = l.segment_id,
                    chunk = i,
                    osd = h.osd_id,
                    "could not repair chunk: {e}"
                ),
            }
        }
    }
}
