//! CodFS's Monitor Module (§4.3, Fig. 4.3): an OSD's background work on logged changes.
//!
//! - **GC** (FL, CodFS PL): every [`MonitorOptions::gc_every`], each chunk whose log holds
//!   [`MonitorOptions::gc_records`] changes or [`MonitorOptions::gc_bytes`] bytes is merged
//!   (`update::gc_due`), so logs stay bounded and reads merge few records.
//! - **Algorithm 1** (PLR, §4.1.2): on [`MonitorOptions::schedule`] (`[update.reserve]`: hours of
//!   the day in UTC, by default the seed's §5.3.2 00:00 and 12:00, or a period), every parity chunk with a reserve gets its utility
//!   u_t(p) from the most bytes its reserve held during the interval, shrinks by c(p)
//!   (`ecstack_base::reserve::next_size`), and — unless `shrink_only` — is merged. u_{t−1}(p) is
//!   kept in memory per chunk, starting at u_0 ([`ReservePolicy::u0`]); after an OSD restart every
//!   reserve starts again from u_0 (a restart forgets the history, it does not shrink anything).
//! - **Merge ahead** (PLR, `[update.reserve] merge_ahead`): the parities that deltas left at least
//!   that full ([`MergeAhead`], filled on the update path) are merged as soon as they are queued,
//!   one at a time, off the update path ([`Monitor::merge_ahead_pass`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ecstack_base::reserve::{next_size, ReservePolicy};
use ecstack_rpc::config::{ReserveConfig, ShrinkSchedule};

use crate::chunk_store::{ChunkStore, ChunkStoreError};
use crate::update::gc_due;
use crate::update::plr::{merge_ahead_due, MergeAhead};

/// How the Monitor Module runs.
#[derive(Debug, Clone, PartialEq)]
pub struct MonitorOptions {
    pub gc_every: Duration,
    pub gc_records: u64,
    pub gc_bytes: u64,
    pub reserve: ReservePolicy,
    /// When Algorithm 1 runs.
    pub schedule: ShrinkSchedule,
    /// Algorithm 1 without its merge step (§5.3.2's "shrink only").
    pub shrink_only: bool,
}

impl Default for MonitorOptions {
    fn default() -> Self {
        MonitorOptions::from_config(&ReserveConfig::default())
    }
}

impl MonitorOptions {
    /// The GC's defaults (a pass every 10 s; a log of 64 changes or 4 MiB is merged) and
    /// Algorithm 1 as `[update.reserve]` says.
    pub fn from_config(r: &ReserveConfig) -> MonitorOptions {
        MonitorOptions {
            gc_every: Duration::from_secs(10),
            gc_records: 64,
            gc_bytes: 4 << 20,
            reserve: ReservePolicy {
                alpha: r.alpha,
                initial_bytes: r.size_bytes,
                chunk_bytes: r.granularity_bytes,
                u0: r.u0,
            },
            schedule: r.schedule(),
            shrink_only: r.shrink_only,
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Chunks looked at.
    pub chunks: u64,
    /// Chunks whose logged changes were merged.
    pub merged: u64,
    /// Reserve bytes given back (Algorithm 1).
    pub shrunk_bytes: u64,
}

/// The Monitor Module of one chunk store.
pub struct Monitor {
    store: Arc<dyn ChunkStore>,
    options: MonitorOptions,
    /// u_{t−1}(p) per parity chunk with a reserve.
    utility: Mutex<HashMap<(u64, u32), f64>>,
}

impl Monitor {
    pub fn new(store: Arc<dyn ChunkStore>, options: MonitorOptions) -> Monitor {
        Monitor {
            store,
            options,
            utility: Mutex::default(),
        }
    }

    pub fn options(&self) -> &MonitorOptions {
        &self.options
    }

    /// One GC pass over the chunks with logs (blocking I/O). A chunk deleted or found corrupt
    /// meanwhile is skipped (a read names its corruption, and the MDS has it rebuilt).
    pub fn gc_pass(&self) -> Result<PassReport, ChunkStoreError> {
        let mut r = PassReport::default();
        for (segment, index) in self.store.logged() {
            r.chunks += 1;
            let state = match self.store.log_state(segment, index) {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) if e.is_corruption() => continue,
                Err(e) => return Err(e),
            };
            if gc_due(&state, self.options.gc_records, self.options.gc_bytes) {
                match self.store.merge(segment, index) {
                    Ok(_) => r.merged += 1,
                    Err(ChunkStoreError::NotFound { .. }) => {}
                    Err(e) if e.is_corruption() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(r)
    }

    /// Algorithm 1 over every reserve (blocking I/O): shrink, then merge unless `shrink_only`.
    pub fn shrink_pass(&self) -> Result<PassReport, ChunkStoreError> {
        let mut r = PassReport::default();
        let policy = self.options.reserve;
        let mut utility = self.utility.lock().unwrap_or_else(|p| p.into_inner());
        let keys = self.store.logged();
        utility.retain(|k, _| keys.binary_search(k).is_ok());
        for (segment, index) in keys {
            let state = match self.store.log_state(segment, index) {
                Ok(Some(s)) if s.reserve_bytes > 0 => s,
                Ok(_) => continue,
                Err(e) if e.is_corruption() => continue,
                Err(e) => return Err(e),
            };
            r.chunks += 1;
            let u_prev = *utility.get(&(segment, index)).unwrap_or(&policy.u0);
            let merge = !self.options.shrink_only;
            let (u, next) = next_size(
                &policy,
                state.reserve_bytes,
                state.peak_bytes,
                state.bytes,
                u_prev,
                merge,
            );
            utility.insert((segment, index), u);
            let result = self.store.set_reserve(segment, index, next).and_then(|()| {
                if merge {
                    self.store.merge(segment, index)
                } else {
                    Ok(0)
                }
            });
            match result {
                Ok(n) => {
                    r.shrunk_bytes += state.reserve_bytes - next;
                    if n > 0 || (next < state.bytes) {
                        r.merged += 1;
                    }
                }
                Err(ChunkStoreError::NotFound { .. }) => {}
                Err(e) if e.is_corruption() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(r)
    }

    /// Merges each listed PLR parity whose reserve is still due at `fraction` (blocking I/O): the
    /// queue of a [`MergeAhead`], drained. A chunk deleted, found corrupt, or merged meanwhile (by
    /// an update that found its reserve full) is skipped.
    pub fn merge_ahead_pass(
        &self,
        keys: &[(u64, u32)],
        fraction: f64,
    ) -> Result<PassReport, ChunkStoreError> {
        let mut r = PassReport::default();
        for &(segment, index) in keys {
            r.chunks += 1;
            let due = match self.store.log_state(segment, index) {
                Ok(Some(s)) => merge_ahead_due(&s, fraction),
                Ok(None) => false,
                Err(e) if e.is_corruption() => false,
                Err(e) => return Err(e),
            };
            if due {
                match self.store.merge(segment, index) {
                    Ok(n) if n > 0 => r.merged += 1,
                    Ok(_) | Err(ChunkStoreError::NotFound { .. }) => {}
                    Err(e) if e.is_corruption() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(r)
    }

    /// The u_{t−1} Algorithm 1 keeps for a chunk (tests, reports).
    pub fn utility_of(&self, segment: u64, index: u32) -> Option<f64> {
        let utility = self.utility.lock().unwrap_or_else(|p| p.into_inner());
        utility.get(&(segment, index)).copied()
    }
}

/// The hour of the day (UTC) of a Unix time in seconds.
fn utc_hour(secs: u64) -> u32 {
    ((secs / 3600) % 24) as u32
}

/// Runs the Monitor Module forever: a GC pass every `gc_every`, Algorithm 1 whenever the UTC hour
/// turns into one of the schedule's hours, or every period, and the merges `ahead` queues as they
/// come (each pass on a blocking thread; failures logged).
pub async fn run(monitor: Arc<Monitor>, ahead: Arc<MergeAhead>) {
    let now_secs = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    let mut hour = utc_hour(now_secs());
    let started = tokio::time::Instant::now();
    let mut shrinks = 0u32;
    let every = match &monitor.options.schedule {
        ShrinkSchedule::Period(p) => monitor.options.gc_every.min(*p),
        ShrinkSchedule::Hours(_) => monitor.options.gc_every,
    };
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = ahead.wait() => {
                let keys = ahead.take();
                let (m, fraction) = (monitor.clone(), ahead.fraction());
                match tokio::task::spawn_blocking(move || m.merge_ahead_pass(&keys, fraction)).await {
                    Ok(Ok(r)) if r.merged > 0 => {
                        tracing::debug!(merged = r.merged, "merged reserves ahead")
                    }
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::warn!("merge ahead failed: {e}"),
                    Err(e) => tracing::warn!("merge ahead failed: {e}"),
                }
                continue;
            }
        }
        let m = monitor.clone();
        match tokio::task::spawn_blocking(move || m.gc_pass()).await {
            Ok(Ok(r)) if r.merged > 0 => tracing::info!(merged = r.merged, "GC merged logs"),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("GC pass failed: {e}"),
            Err(e) => tracing::warn!("GC pass failed: {e}"),
        }
        let h = utc_hour(now_secs());
        let due = match &monitor.options.schedule {
            ShrinkSchedule::Hours(hours) => h != hour && hours.contains(&h),
            ShrinkSchedule::Period(p) => {
                let n = (started.elapsed().as_millis() / p.as_millis().max(1)) as u32;
                std::mem::replace(&mut shrinks, n) != n
            }
        };
        if due {
            let m = monitor.clone();
            match tokio::task::spawn_blocking(move || m.shrink_pass()).await {
                Ok(Ok(r)) => tracing::info!(
                    reserves = r.chunks,
                    shrunk_bytes = r.shrunk_bytes,
                    merged = r.merged,
                    "Algorithm 1 ran"
                ),
                Ok(Err(e)) => tracing::warn!("Algorithm 1 failed: {e}"),
                Err(e) => tracing::warn!("Algorithm 1 failed: {e}"),
            }
        }
        hour = h;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ChunkMeta, DeltaStamp};
    use crate::chunk_store::{Change, FileStore, LogPlace};
    use ecstack_rpc::UpdateScheme;

    fn parity(segment: u64, scheme: UpdateScheme, reserve_bytes: u64) -> ChunkMeta {
        ChunkMeta {
            segment_id: segment,
            index: 2,
            version: 1,
            chunk_bytes: 64 << 10,
            segment_length: 128 << 10,
            applied: vec![1, 1],
            scheme,
            reserve_bytes,
        }
    }

    fn delta(s: &dyn ChunkStore, segment: u64, place: LogPlace, v: u64, len: u64) {
        let stamp = DeltaStamp {
            from: 0,
            prior: v - 1,
            version: v,
        };
        s.append(
            segment,
            2,
            place,
            &[0..len],
            &vec![v as u8; len as usize],
            Change::Parity(stamp),
        )
        .unwrap();
    }

    /// Algorithm 1 against hand-computed cases: a 64 KiB reserve that held 16 KiB at most, α = 0.5,
    /// u_0 = 1: u_1 = 0.5·0.25 + 0.5·1 = 0.625, c = ⌊0.375·64 KiB / 4 KiB⌋·4 KiB = 24 KiB, so 40 KiB
    /// remain; the next interval (nothing held) u_2 = 0.3125, c = ⌊0.6875·40/4⌋·4 = 24 KiB → 16 KiB.
    /// An idle reserve with u_0 = 0 is gone at its first shrink. The merge empties the reserve.
    #[test]
    fn algorithm_1_shrinks_as_computed_by_hand_and_the_gc_merges_logs() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ChunkStore> = Arc::new(FileStore::open(dir.path()).unwrap());
        let data = vec![7u8; 64 << 10];
        store
            .put(&parity(1, UpdateScheme::Plr, 64 << 10), &data)
            .unwrap();
        store
            .put(&parity(2, UpdateScheme::ParityLog, 0), &data)
            .unwrap();
        // 16 KiB of records: 3 deltas of 5,000 bytes take 3 × 5,120 + … ≤ 16 KiB.
        for v in 2..5 {
            delta(&*store, 1, LogPlace::Reserve, v, 5000);
        }
        for v in 2..5 {
            delta(&*store, 2, LogPlace::Log, v, 100);
        }
        let held = store.log_state(1, 2).unwrap().unwrap().bytes;
        assert_eq!(held, 3 * 5120);
        let options = MonitorOptions {
            reserve: ReservePolicy {
                alpha: 0.5,
                initial_bytes: 64 << 10,
                chunk_bytes: 4096,
                u0: 1.0,
            },
            gc_records: 3,
            ..MonitorOptions::default()
        };
        assert_eq!(
            MonitorOptions::default().schedule,
            ShrinkSchedule::Hours(vec![0, 12])
        );
        let m = Monitor::new(store.clone(), options.clone());
        let r = m.shrink_pass().unwrap();
        let u1 = 0.5 * (held as f64 / 65536.0) + 0.5;
        assert!((m.utility_of(1, 2).unwrap() - u1).abs() < 1e-12);
        let c = (((1.0 - u1) * 65536.0).floor() as u64) / 4096 * 4096;
        let s = store.log_state(1, 2).unwrap().unwrap();
        assert_eq!(
            (s.reserve_bytes, s.records, r.shrunk_bytes),
            (65536 - c, 0, c)
        );
        assert_eq!(r.chunks, 1, "only the PLR parity has a reserve");
        // The merged parity reads as the deltas applied.
        let (meta, bytes) = store.read(1, 2, 0, 10).unwrap();
        assert_eq!(meta.applied, vec![4, 1]);
        assert_eq!(bytes[0], 7 ^ 2 ^ 3 ^ 4);
        m.shrink_pass().unwrap();
        let u2 = 0.5 * u1;
        let size1 = 65536 - c;
        let c2 = (((1.0 - u2) * size1 as f64).floor() as u64) / 4096 * 4096;
        assert_eq!(
            store.log_state(1, 2).unwrap().unwrap().reserve_bytes,
            size1 - c2
        );
        // GC: the CodFS PL log of three records is due (gc_records = 3) and merged.
        let g = m.gc_pass().unwrap();
        assert_eq!(g.merged, 1);
        assert_eq!(store.log_state(2, 2).unwrap().unwrap().records, 0);
        assert_eq!(store.read(2, 2, 0, 1).unwrap().1[0], 7 ^ 2 ^ 3 ^ 4);
        // u_0 = 0: an idle reserve is gone at its first shrink.
        store
            .put(&parity(3, UpdateScheme::Plr, 64 << 10), &data)
            .unwrap();
        let zero = Monitor::new(
            store.clone(),
            MonitorOptions {
                reserve: ReservePolicy {
                    u0: 0.0,
                    ..options.reserve
                },
                ..options
            },
        );
        zero.shrink_pass().unwrap();
        assert_eq!(store.log_state(3, 2).unwrap().unwrap().reserve_bytes, 0);
        // Shrink only keeps the deltas held.
        store
            .put(&parity(4, UpdateScheme::Plr, 64 << 10), &data)
            .unwrap();
        delta(&*store, 4, LogPlace::Reserve, 2, 20_000);
        let keep = Monitor::new(
            store.clone(),
            MonitorOptions {
                reserve: ReservePolicy {
                    u0: 0.0,
                    ..options.reserve
                },
                shrink_only: true,
                ..MonitorOptions::default()
            },
        );
        keep.shrink_pass().unwrap();
        let s = store.log_state(4, 2).unwrap().unwrap();
        assert_eq!((s.records, s.reserve_bytes), (1, 20_480));
    }

    /// Merge ahead at 1/2 of a 16 KiB reserve: the first 5,000-byte delta (5,120 bytes logged)
    /// queues nothing, the second (10,240 ≥ 8,192) queues the parity once, however often it is
    /// noted; the pass merges it (the bytes read back as the deltas applied, once) and skips it
    /// when nothing is due any more. Off (0), nothing is ever queued.
    #[test]
    fn merge_ahead_queues_a_reserve_past_its_fraction_and_the_monitor_merges_it() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ChunkStore> = Arc::new(FileStore::open(dir.path()).unwrap());
        let data = vec![7u8; 64 << 10];
        store
            .put(&parity(1, UpdateScheme::Plr, 16 << 10), &data)
            .unwrap();
        let ahead = MergeAhead::default();
        delta(&*store, 1, LogPlace::Reserve, 2, 5000);
        ahead.note(&*store, 1, 2);
        assert!(ahead.take().is_empty(), "queued while off");
        ahead.set_fraction(0.5);
        ahead.note(&*store, 1, 2);
        assert!(ahead.take().is_empty(), "5,120 of 16,384 bytes is not half");
        delta(&*store, 1, LogPlace::Reserve, 3, 5000);
        ahead.note(&*store, 1, 2);
        ahead.note(&*store, 1, 2);
        let keys = ahead.take();
        assert_eq!(keys, vec![(1, 2)]);
        let m = Monitor::new(store.clone(), MonitorOptions::default());
        let r = m.merge_ahead_pass(&keys, ahead.fraction()).unwrap();
        assert_eq!((r.chunks, r.merged), (1, 1));
        let s = store.log_state(1, 2).unwrap().unwrap();
        assert_eq!((s.records, s.bytes, s.reserve_bytes), (0, 0, 16 << 10));
        let (meta, bytes) = store.read(1, 2, 0, 5000).unwrap();
        assert_eq!(meta.applied, vec![3, 1]);
        assert!(
            bytes.iter().all(|&b| b == 7 ^ 2 ^ 3),
            "a delta lost or doubled"
        );
        // Already merged (an update found it full first): skipped. A chunk gone: skipped.
        let again = m.merge_ahead_pass(&[(1, 2), (9, 9)], 0.5).unwrap();
        assert_eq!((again.chunks, again.merged), (2, 0));
        assert!(!merge_ahead_due(&s, 0.0));
    }

    #[test]
    fn hours_are_utc() {
        assert_eq!(utc_hour(0), 0);
        assert_eq!(utc_hour(12 * 3600 + 59), 12);
        assert_eq!(utc_hour(36 * 3600), 12);
    }
}
