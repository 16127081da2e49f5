//! One holder's chunk as the primary (or a data holder sending deltas) reaches it: from this OSD's
//! own chunk store when the holder is this OSD, over the holder's [`OsdClient`] otherwise. Every
//! call ends in the chunk's bytes or versions, or a [`Miss`] saying why the chunk could not be had
//! (the operations decide what a miss means: read around it, mark it stale, retry).

use std::ops::Range;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::api::{ChunkMeta, ChunkVersions, DeltaStamp, Holder, Layout, OsdCallError};
use crate::chunk_store::ChunkStoreError;
use crate::error::OsdError;
use crate::metrics::Metrics;
use crate::segment::SegState;
use crate::service::Osd;
use crate::update::{ParityDelta, Scheme};
use crate::view::Verdict;

/// A chunk read from a peer that takes this long is counted and logged (a megabyte piece takes
/// well under a second on an idle 100 Mbit/s link, a few seconds on a saturated one).
const SLOW_PEER_FETCH: Duration = Duration::from_secs(10);

/// Why a chunk could not be had from its holder.
#[derive(Debug)]
pub(crate) enum Miss {
    Unreachable(String),
    Corrupt(String),
    /// Older than the version the primary expects: it missed a write or an update.
    Stale(String),
    /// The request certainly never reached the holder (the connection could not be made).
    NotSent(String),
    /// The holder refused the request before changing anything (its chunk is not at the version
    /// the primary expects).
    Refused(String),
    /// Newer than the primary expects: the primary's view of the segment is out of date.
    Newer(String),
    Absent,
    Other(String),
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Miss::Unreachable(m) => write!(f, "unreachable: {m}"),
            Miss::Corrupt(m) => write!(f, "corrupt: {m}"),
            Miss::Stale(m) => write!(f, "stale: {m}"),
            Miss::NotSent(m) => write!(f, "unreachable: {m}"),
            Miss::Refused(m) => write!(f, "refused: {m}"),
            Miss::Newer(m) => write!(f, "newer: {m}"),
            Miss::Absent => f.write_str("not stored"),
            Miss::Other(m) => f.write_str(m),
        }
    }
}

fn store_miss(e: ChunkStoreError) -> Miss {
    match e {
        ChunkStoreError::NotFound { .. } => Miss::Absent,
        ChunkStoreError::Conflict { .. } => Miss::Refused(e.to_string()),
        e if e.is_corruption() => Miss::Corrupt(e.to_string()),
        e => Miss::Other(e.to_string()),
    }
}

pub(crate) fn remote_miss(e: OsdCallError) -> Miss {
    match e {
        OsdCallError::NotFound { .. } => Miss::Absent,
        OsdCallError::Unrecoverable { .. } => Miss::Corrupt(e.to_string()),
        // tonic reports a connection that could not be made as "tcp connect error": the request
        // never left this process.
        OsdCallError::Unreachable { ref message, .. } if message.contains("connect error") => {
            Miss::NotSent(e.to_string())
        }
        OsdCallError::Security(_) => Miss::NotSent(e.to_string()),
        OsdCallError::Unreachable { .. } => Miss::Unreachable(e.to_string()),
        OsdCallError::StaleLayout { .. } => Miss::Refused(e.to_string()),
        e => Miss::Other(e.to_string()),
    }
}

impl Osd {
    /// `len` bytes of holder `h`'s chunk from `offset` (0: to the end), with its header.
    pub(crate) async fn get_from(
        &self,
        segment: u64,
        h: &Holder,
        offset: u64,
        len: u64,
    ) -> Result<(ChunkMeta, Bytes), Miss> {
        let index = h.index;
        if self.is_local(h) {
            return self
                .blocking(move |s| s.read(segment, index, offset, len))
                .await
                .map_err(store_miss);
        }
        let idle = self.peer_fetch_idle();
        let started = Instant::now();
        let got = self
            .peer(h)?
            .get_chunk(segment, index, offset, len, Some(idle))
            .await;
        let took = started.elapsed();
        if took >= SLOW_PEER_FETCH.min(idle) {
            Metrics::add(&self.inner.metrics.slow_peer_fetches, 1);
            tracing::warn!(
                segment,
                chunk = index,
                osd = h.osd_id,
                "a read of {len} bytes of the chunk from {} took {} ms ({})",
                h.addr,
                took.as_millis(),
                match &got {
                    Ok(_) => "done".to_owned(),
                    Err(e) => e.to_string(),
                }
            );
        }
        got.map_err(remote_miss)
    }

    /// The versions of holder `h`'s chunk (`None`: not stored).
    pub(crate) async fn versions_from(
        &self,
        segment: u64,
        h: &Holder,
    ) -> Result<Option<ChunkVersions>, Miss> {
        let index = h.index;
        if self.is_local(h) {
            return self
                .blocking(move |s| s.meta(segment, index))
                .await
                .map(|m| {
                    m.map(|m| ChunkVersions {
                        version: m.version,
                        applied: m.applied,
                    })
                })
                .map_err(store_miss);
        }
        self.peer(h)?
            .chunk_version(segment, index)
            .await
            .map_err(remote_miss)
    }

    /// Stores (creates or replaces) holder `h`'s whole chunk.
    pub(crate) async fn put_to(
        &self,
        h: &Holder,
        meta: ChunkMeta,
        data: Bytes,
    ) -> Result<(), Miss> {
        if self.is_local(h) {
            return self
                .blocking(move |s| s.put(&meta, &data))
                .await
                .map_err(store_miss);
        }
        self.peer(h)?
            .put_chunk(&meta, data)
            .await
            .map_err(remote_miss)
    }

    /// A sub-update of data chunk `stamp.from` from version `stamp.prior` to `stamp.version` at its
    /// holder `h` (UpdateChunk); the parity chunks that did not take their delta.
    pub(crate) async fn update_at(
        &self,
        segment: u64,
        h: &Holder,
        offset: u64,
        data: Vec<u8>,
        stamp: DeltaStamp,
        parity: Vec<Holder>,
        scheme: Scheme,
    ) -> Result<Vec<u32>, Miss> {
        let (version, expected) = (stamp.version, stamp.prior);
        if self.is_local(h) {
            let update = crate::update::ChunkUpdate {
                segment,
                index: h.index,
                offset,
                data,
                version,
                expected,
                parity,
                scheme,
            };
            return self.update_chunk_here(update).await.map_err(|e| match e {
                OsdError::StaleLayout(m) => Miss::Refused(m),
                e => Miss::Other(e.to_string()),
            });
        }
        self.peer(h)?
            .update_chunk(
                segment, h.index, offset, &data, version, expected, &parity, scheme,
            )
            .await
            .map_err(remote_miss)
    }

    /// A parity delta over `extents` into holder `h`'s parity chunk (ApplyDelta).
    pub(crate) async fn apply_delta_at(
        &self,
        segment: u64,
        h: &Holder,
        extents: Vec<Range<u64>>,
        delta: Vec<u8>,
        stamp: DeltaStamp,
        scheme: Scheme,
    ) -> Result<(), Miss> {
        if self.is_local(h) {
            let d = ParityDelta {
                segment,
                index: h.index,
                extents,
                delta,
                stamp,
            };
            return crate::update::apply_delta_local(self, scheme, d)
                .await
                .map_err(store_miss);
        }
        self.peer(h)?
            .apply_delta(segment, h.index, &extents, &delta, stamp, scheme)
            .await
            .map_err(remote_miss)
    }

    /// Fetch chunk `h` over `[offset, offset+len)` and check its version against what the primary
    /// expects; an older chunk is stale (missing), a newer one means the primary's view is old.
    pub(crate) async fn fetch_checked(
        &self,
        l: &Layout,
        st: &SegState,
        h: &Holder,
        offset: u64,
        len: u64,
    ) -> Result<Bytes, Miss> {
        let (meta, data) = self.get_from(l.segment_id, h, offset, len).await?;
        let got = ChunkVersions {
            version: meta.version,
            applied: meta.applied.clone(),
        };
        let why = || {
            format!(
                "version {} applied {:?}, the view is {:?}",
                got.version, got.applied, st.view.applied
            )
        };
        match st.view.verdict(h.index as usize, &got) {
            Verdict::Current => {}
            Verdict::Stale => return Err(Miss::Stale(why())),
            Verdict::Newer => return Err(Miss::Newer(why())),
        }
        if meta.segment_length != l.length {
            return Err(Miss::Other(format!(
                "chunk says the segment has {} bytes, the layout {}",
                meta.segment_length, l.length
            )));
        }
        Ok(data)
    }
}
