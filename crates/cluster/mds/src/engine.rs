//! The MDS's logic, synchronous and on an injectable clock: namespace operations, OSD registry and
//! health (down → primary promotion, out → re-placement and recovery), chunk states and the tasks
//! OSDs receive in heartbeat replies. Every mutating operation writes one atomic batch to the
//! [`MetadataStore`] before it returns, so an acknowledged RPC survives an MDS restart.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[path = "inventory.rs"]
mod inventory;
#[path = "namespace.rs"]
mod namespace;
#[path = "robust.rs"]
mod robust;

use crate::placement::{place_chunk, place_segment, Candidate};
use crate::store::{
    ChunkRecord, DeleteRecord, FileRecord, MetadataStore, Mutation, OsdRecord, RobustMutation,
    SegmentRecord, StoreError, COUNTER_EPOCH, COUNTER_FILE, COUNTER_OSD, COUNTER_RESTORED,
    COUNTER_SEGMENT,
};
use ecstack_mds_proto::{
    ChunkPlacement, ChunkState, ClusterParams, ClusterStatus, DeleteTask, FileInfo, FileSummary,
    Heartbeat, HeartbeatReply, MdsError, OsdInfo, OsdLoad, OsdRegistration, OsdState, OsdTask,
    RecoverTask, RecoveryProgress, Registered, SegmentLayout, UpdateScheme, NO_OSD,
};

/// Longest path the MDS accepts, bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Most segments one AllocateSegments call may add, and most segments of one file.
pub const MAX_SEGMENTS_PER_CALL: usize = 4096;
pub use crate::orphans::{IDS_WAIT_MAX_MS, ORPHAN_CANDIDATES_MAX, ORPHAN_DELETES_PER_PASS};
pub use ecstack_mds_proto::MAX_SEGMENTS_PER_FILE;
/// A file created but not committed for this long is removed (its chunks get DeleteTasks).
pub const DEFAULT_PENDING_TTL_MS: u64 = 60 * 60 * 1000;

/// Time in unix milliseconds. The MDS reads time only through this, so tests drive it.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told (tests).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(start_ms: u64) -> Arc<ManualClock> {
        Arc::new(ManualClock(AtomicU64::new(start_ms)))
    }
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// What the MDS needs from the cluster config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MdsSettings {
    pub params: ClusterParams,
    /// The OSD label naming a failure domain (`host`, `rack`), if any.
    pub failure_domain: Option<String>,
    /// (`down_after_ms` is in `params`: OSDs derive their primary lease from it.)
    pub out_after_ms: u64,
    pub pending_ttl_ms: u64,
    /// The scheme of a new file whose put names none (`[update] scheme`).
    pub default_scheme: UpdateScheme,
    /// How long a chunk or block file OSDs report must stay unknown before it is deleted
    /// (`[mds] orphan_grace_ms`; `engine::inventory`).
    pub orphan_grace_ms: u64,
}

impl MdsSettings {
    pub fn from_config(c: &ecstack_rpc::ClusterConfig) -> MdsSettings {
        MdsSettings {
            params: ClusterParams {
                cluster_id: c.cluster_id.clone(),
                code: c.code.family.clone(),
                k: c.code.k,
                m: c.code.m,
                segment_bytes: c.segment_bytes,
                heartbeat_ms: u32::try_from(c.mds.heartbeat_ms).unwrap_or(u32::MAX),
                down_after_ms: u32::try_from(c.mds.down_after_ms).unwrap_or(u32::MAX),
            },
            failure_domain: c.placement.failure_domain.clone(),
            out_after_ms: c.mds.out_after_ms,
            pending_ttl_ms: DEFAULT_PENDING_TTL_MS,
            default_scheme: c.update.scheme,
            orphan_grace_ms: c.mds.orphan_grace_ms,
        }
    }
}

fn internal(e: StoreError) -> MdsError {
    match e {
        // Retryable: the caller's retry reaches the MDS that took over.
        StoreError::Deposed { .. } => MdsError::Unavailable(e.to_string()),
        e => MdsError::Internal(e.to_string()),
    }
}

/// Mutations of one operation plus the counters it advanced; written in one transaction.
struct Batch {
    muts: Vec<Mutation>,
    counters: BTreeMap<&'static str, u64>,
}

impl Batch {
    fn new() -> Batch {
        Batch {
            muts: Vec::new(),
            counters: BTreeMap::new(),
        }
    }

    fn next(&mut self, store: &dyn MetadataStore, name: &'static str) -> Result<u64, MdsError> {
        let cur = match self.counters.get(name) {
            Some(v) => *v,
            None => store.counter(name).map_err(internal)?,
        };
        self.counters.insert(name, cur + 1);
        Ok(cur + 1)
    }

    fn push(&mut self, m: Mutation) {
        self.muts.push(m);
    }

    fn commit(mut self, store: &mut dyn MetadataStore) -> Result<(), MdsError> {
        for (name, value) in std::mem::take(&mut self.counters) {
            self.muts.push(Mutation::SetCounter { name, value });
        }
        if self.muts.is_empty() {
            return Ok(());
        }
        store.apply(&self.muts).map_err(internal)
    }
}

/// Ids an OSD can take by its name: `osd-N` asks for id N, so a new cluster's `osd-3` is OSD 3
/// whatever order the OSDs register in (issue 46). Bounded so a typo cannot reach the sentinel.
const OSD_ID_BY_NAME_MAX: u32 = 1 << 20;

/// The id `name` asks for (`osd-N` with N below [`OSD_ID_BY_NAME_MAX`], no leading zeros).
fn id_from_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("osd-")?;
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits
        .parse::<u32>()
        .ok()
        .filter(|&n| n < OSD_ID_BY_NAME_MAX)
}

/// What an OSD's latest heartbeat reported about its store; held in memory only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct OsdUsage {
    used_bytes: u64,
    reserve_bytes: u64,
    log_bytes: u64,
    merges: u64,
    load: OsdLoad,
}

/// One line for a put that would change a path's update scheme (issue 41: refused).
fn scheme_change_refused(path: &str, old: UpdateScheme, new: UpdateScheme) -> MdsError {
    MdsError::FailedPrecondition(format!(
        "changing a file's scheme is refused: {path} is {old}, this put asks for {new} (remove the file first)"
    ))
}

/// The metadata server's state machine.
pub struct MdsCore {
    store: Box<dyn MetadataStore>,
    settings: MdsSettings,
    clock: Arc<dyn Clock>,
    /// Last heartbeat per OSD (unix ms). After a restart every known OSD starts from the restart
    /// time, so none is declared down before it had `down_after_ms` to heartbeat again.
    last_seen: HashMap<u32, u64>,
    /// What each OSD's latest heartbeat reported (bytes used, reserved space, log bytes,
    /// merges). Kept in memory: a heartbeat that changes no state commits nothing (an fsync per
    /// heartbeat, 20 a second with ten OSDs, queued behind a disk the OSDs saturate, is what held
    /// heartbeats back until primary leases lapsed); the record's `used_bytes` is written with
    /// the next state change, the rest is never stored, and all of it is only shown by `status`.
    usage: HashMap<u32, OsdUsage>,
    /// The cluster code's `chunk_align_bytes` (1, or p − 1 for RDP): chunk sizes are multiples.
    chunk_align_bytes: u64,
    /// OSDs' inventories: passes under way, orphan candidates, and after a restore the wait for
    /// the OSDs' largest ids (memory only: a restarted MDS learns them again).
    inventories: crate::orphans::Inventories,
}

impl MdsCore {
    pub fn open(
        store: Box<dyn MetadataStore>,
        settings: MdsSettings,
        clock: Arc<dyn Clock>,
    ) -> Result<MdsCore, MdsError> {
        let p = &settings.params;
        let chunk_align_bytes =
            ecstack_codes::chunk_align_bytes_of(&p.code, p.k as usize, p.m as usize)
                .map_err(|e| MdsError::InvalidArgument(format!("cluster code {}: {e}", p.code)))?
                as u64;
        let now = clock.now_ms();
        let last_seen = store
            .osds()
            .map_err(internal)?
            .into_iter()
            .map(|o| (o.osd_id, o.last_heartbeat_ms.max(now)))
            .collect();
        let restored = store.counter(COUNTER_RESTORED).map_err(internal)? != 0;
        if restored {
            tracing::warn!(
                "the metadata store was restored from a backup: new ids wait until every OSD reported the largest id it holds"
            );
        }
        Ok(MdsCore {
            store,
            settings,
            clock,
            last_seen,
            usage: HashMap::new(),
            chunk_align_bytes,
            inventories: crate::orphans::Inventories::new(restored, now),
        })
    }

    /// The clock the core judges silence by (heartbeats are stamped with it on arrival).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Heartbeats that reached the MDS process (`arrivals`: OSD id → the clock's ms on arrival)
    /// count from their arrival, even if the core got to them later: a core held up (a commit's
    /// fsync waiting seconds behind a disk saturated by the OSDs' reads) saw every OSD silent at
    /// its next failure-detector round, their heartbeats queued behind it, and declared all eight
    /// down at once.
    pub fn note_arrivals(&mut self, arrivals: &HashMap<u32, u64>) {
        for (id, &at) in arrivals {
            if let Some(seen) = self.last_seen.get_mut(id) {
                *seen = (*seen).max(at);
            }
        }
    }

    pub fn settings(&self) -> &MdsSettings {
        &self.settings
    }

    /// The store under the core, for tests that change it behind the core's back.
    #[cfg(test)]
    pub(crate) fn store_mut(&mut self) -> &mut dyn MetadataStore {
        self.store.as_mut()
    }

    fn k(&self) -> u32 {
        self.settings.params.k
    }

    fn n(&self) -> u32 {
        self.settings.params.n()
    }

    fn chunk_bytes(&self, length: u64) -> u64 {
        ecstack_mds_proto::chunk_bytes(length, self.k() as usize, self.chunk_align_bytes)
    }

    /// Every OSD as stored, with the bytes its latest heartbeat reported (held in memory).
    fn osd_map(&self) -> Result<BTreeMap<u32, OsdRecord>, MdsError> {
        Ok(self
            .store
            .osds()
            .map_err(internal)?
            .into_iter()
            .map(|mut o| {
                if let Some(u) = self.usage.get(&o.osd_id) {
                    o.used_bytes = u.used_bytes;
                }
                (o.osd_id, o)
            })
            .collect())
    }

    fn domain_of(&self, o: &OsdRecord) -> Option<String> {
        self.settings
            .failure_domain
            .as_ref()
            .and_then(|d| o.labels.get(d).cloned())
    }

    /// UP OSDs with their loads, for placement.
    fn candidates(&self, osds: &BTreeMap<u32, OsdRecord>) -> Result<Vec<Candidate>, MdsError> {
        let loads = self
            .store
            .osd_loads(self.k(), self.chunk_align_bytes)
            .map_err(internal)?;
        Ok(osds
            .values()
            .filter(|o| o.state == OsdState::Up)
            .map(|o| Candidate {
                osd_id: o.osd_id,
                domain: self.domain_of(o),
                load: loads.get(&o.osd_id).cloned().unwrap_or_default(),
            })
            .collect())
    }

    fn segment(&self, segment_id: u64) -> Result<SegmentRecord, MdsError> {
        self.store
            .segment(segment_id)
            .map_err(internal)?
            .ok_or_else(|| MdsError::NotFound(format!("no segment {segment_id}")))
    }

    /// The update scheme of the file a segment belongs to.
    fn scheme_of_file(&self, file_id: u64) -> Result<UpdateScheme, MdsError> {
        self.store
            .file(file_id)
            .map_err(internal)?
            .map(|f| f.scheme)
            .ok_or_else(|| {
                MdsError::Internal(format!(
                    "a segment names file {file_id}, which is not stored"
                ))
            })
    }

    fn layout(
        &self,
        s: &SegmentRecord,
        osds: &BTreeMap<u32, OsdRecord>,
    ) -> Result<SegmentLayout, MdsError> {
        self.layout_in(s, osds, self.scheme_of_file(s.file_id)?)
    }

    /// [`Self::layout`] when the caller already has the file's scheme.
    fn layout_in(
        &self,
        s: &SegmentRecord,
        osds: &BTreeMap<u32, OsdRecord>,
        scheme: UpdateScheme,
    ) -> Result<SegmentLayout, MdsError> {
        let chunks = self.store.chunks(s.segment_id).map_err(internal)?;
        Ok(layout_of(s, &chunks, osds, scheme))
    }

    // ---- OSDs

    pub fn register_osd(&mut self, r: &OsdRegistration) -> Result<Registered, MdsError> {
        if r.name.trim().is_empty() {
            return Err(MdsError::InvalidArgument("OSD name is empty".into()));
        }
        if r.addr.trim().is_empty() {
            return Err(MdsError::InvalidArgument(format!(
                "OSD {} registered without an address",
                r.name
            )));
        }
        let now = self.clock.now_ms();
        let osds = self.osd_map()?;
        let mut batch = Batch::new();
        let osd_id = match osds.values().find(|o| o.name == r.name) {
            Some(o) => o.osd_id,
            None => match id_from_name(&r.name).filter(|id| !osds.contains_key(id)) {
                Some(id) => id,
                None => loop {
                    // The counter skips ids that OSDs named `osd-N` took by name.
                    let id = batch.next(self.store.as_ref(), COUNTER_OSD)? - 1;
                    let id = u32::try_from(id)
                        .ok()
                        .filter(|&id| id != NO_OSD)
                        .ok_or_else(|| MdsError::FailedPrecondition("OSD ids exhausted".into()))?;
                    if !osds.contains_key(&id) {
                        break id;
                    }
                },
            },
        };
        let previous = osds.get(&osd_id).map(|o| o.state);
        // Ids up to a segment the OSD holds chunks of are never handed out (the metadata may be a
        // restored backup that does not know the segment).
        self.counter_past(&mut batch, &r.name, r.max_segment_id)?;
        batch.push(Mutation::PutOsd(OsdRecord {
            osd_id,
            name: r.name.clone(),
            addr: r.addr.clone(),
            labels: r.labels.clone(),
            capacity_bytes: r.capacity_bytes,
            used_bytes: r.used_bytes,
            state: OsdState::Up,
            last_heartbeat_ms: now,
        }));
        batch.commit(self.store.as_mut())?;
        self.last_seen.insert(osd_id, now);
        tracing::info!(osd_id, name = %r.name, addr = %r.addr, ?previous, "OSD registered");
        self.inventories.ids_reported(osd_id);
        self.settle_ids_wait()?;
        Ok(Registered {
            osd_id,
            params: self.settings.params.clone(),
        })
    }

    pub fn heartbeat(&mut self, h: &Heartbeat) -> Result<HeartbeatReply, MdsError> {
        let now = self.clock.now_ms();
        let mut osds = self.osd_map()?;
        let Some(osd) = osds.get_mut(&h.osd_id) else {
            self.inventories.stranger_heard(h.osd_id, now);
            return Err(MdsError::NotFound(format!(
                "unknown OSD id {}; register first",
                h.osd_id
            )));
        };
        let mut batch = Batch::new();
        if osd.state == OsdState::Down {
            tracing::info!(osd_id = h.osd_id, "OSD is up again");
            osd.state = OsdState::Up;
            osd.used_bytes = h.used_bytes;
            osd.last_heartbeat_ms = now;
            batch.push(Mutation::PutOsd(osd.clone()));
        }
        for &segment_id in &h.deleted_segments {
            batch.push(Mutation::RemoveDeletes {
                osd_id: h.osd_id,
                segment_id,
            });
        }
        for &object_id in &h.deleted_objects {
            batch.push(Mutation::Robust(RobustMutation::RemoveDeletes {
                osd_id: h.osd_id,
                object_id,
            }));
        }
        batch.commit(self.store.as_mut())?;
        self.last_seen.insert(h.osd_id, now);
        self.usage.insert(
            h.osd_id,
            OsdUsage {
                used_bytes: h.used_bytes,
                reserve_bytes: h.reserve_bytes,
                log_bytes: h.log_bytes,
                merges: h.merges,
                load: h.load,
            },
        );

        let mut tasks = Vec::new();
        let mut deletes: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for d in self.store.deletes_for(h.osd_id).map_err(internal)? {
            deletes.entry(d.segment_id).or_default().push(d.chunk);
        }
        tasks.extend(
            deletes
                .into_iter()
                .map(|(segment_id, chunks)| OsdTask::Delete(DeleteTask { segment_id, chunks })),
        );
        tasks.extend(self.object_delete_tasks(h.osd_id)?);
        tasks.extend(
            self.recover_tasks(h.osd_id, &osds)?
                .into_iter()
                .map(OsdTask::Recover),
        );
        Ok(HeartbeatReply {
            epoch: self.store.counter(COUNTER_EPOCH).map_err(internal)?,
            tasks,
            inventory_wanted: self.inventories.wants_inventory(h.osd_id),
        })
    }

    /// Derived from chunk states: every segment with `primary` as its primary and a stale or
    /// recovering chunk whose holder is UP.
    fn recover_tasks(
        &self,
        primary: u32,
        osds: &BTreeMap<u32, OsdRecord>,
    ) -> Result<Vec<RecoverTask>, MdsError> {
        let mut wanted: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for state in [ChunkState::Stale, ChunkState::Recovering] {
            for c in self.store.chunks_in_state(state).map_err(internal)? {
                let holder_up = c
                    .osd_id
                    .and_then(|o| osds.get(&o))
                    .is_some_and(|o| o.state == OsdState::Up);
                if holder_up {
                    wanted.entry(c.segment_id).or_default().push(c.index);
                }
            }
        }
        let mut tasks = Vec::new();
        if wanted.is_empty() {
            // (Every heartbeat comes here: the pending files are read only when needed.)
            return Ok(tasks);
        }
        let pending = self.pending_segments()?;
        for (segment_id, mut chunks) in wanted {
            let Some(s) = self.store.segment(segment_id).map_err(internal)? else {
                continue;
            };
            // A segment of a file still being written (or whose put failed) may hold nothing to
            // rebuild from yet; it is recovered once its file is committed.
            if s.primary != primary || pending.contains(&segment_id) {
                continue;
            }
            chunks.sort_unstable();
            tasks.push(RecoverTask {
                layout: self.layout(&s, osds)?,
                chunks,
            });
        }
        Ok(tasks)
    }

    // ---- namespace

    /// Starts a put of `path` with the cluster's default scheme, or the scheme of the file it
    /// replaces ([`Self::create_file_with`] with `None`).
    pub fn create_file(&mut self, path: &str) -> Result<u64, MdsError> {
        self.create_file_with(path, None)
    }

    /// The segments of files created but not committed (being written, or left by a failed put
    /// until they expire): not counted in the segments' health, not recovered.
    fn pending_segments(&self) -> Result<std::collections::BTreeSet<u64>, MdsError> {
        let mut out = std::collections::BTreeSet::new();
        for f in self.store.pending_files().map_err(internal)? {
            for s in self.store.segments_of_file(f.file_id).map_err(internal)? {
                out.insert(s.segment_id);
            }
        }
        Ok(out)
    }

    fn pending_file(&self, file_id: u64) -> Result<FileRecord, MdsError> {
        let f = self
            .store
            .file(file_id)
            .map_err(internal)?
            .ok_or_else(|| MdsError::NotFound(format!("no file with id {file_id}")))?;
        if f.committed {
            return Err(MdsError::FailedPrecondition(format!(
                "file {file_id} ({}) is already committed",
                f.path
            )));
        }
        Ok(f)
    }

    pub fn allocate_segments(
        &mut self,
        file_id: u64,
        lengths: &[u64],
    ) -> Result<Vec<SegmentLayout>, MdsError> {
        self.allocate_segments_on(file_id, lengths, &[])
    }

    /// [`Self::allocate_segments`] on the OSDs of `osd_hint` only (empty: any), e.g. an RS file
    /// on the OSDs a robust file it is compared with uses; refused unless n of them are UP.
    pub fn allocate_segments_on(
        &mut self,
        file_id: u64,
        lengths: &[u64],
        osd_hint: &[u32],
    ) -> Result<Vec<SegmentLayout>, MdsError> {
        let f = self.pending_file(file_id)?;
        if self.store.robust_file(file_id).map_err(internal)?.is_some() {
            return Err(MdsError::InvalidArgument(format!(
                "file {} is a robust file: it has blocks, not segments",
                f.path
            )));
        }
        let existing = self.store.segments_of_file(file_id).map_err(internal)?;
        let mut batch = Batch::new();
        let layouts =
            self.place_segments(&mut batch, &f, existing.len() as u32, lengths, osd_hint)?;
        batch.commit(self.store.as_mut())?;
        Ok(layouts)
    }

    /// Places new segments of `f` at indexes `first..` into `batch`: their records and chunks,
    /// with one new epoch; returns their layouts.
    fn place_segments(
        &self,
        batch: &mut Batch,
        f: &FileRecord,
        first: u32,
        lengths: &[u64],
        osd_hint: &[u32],
    ) -> Result<Vec<SegmentLayout>, MdsError> {
        let seg_bytes = self.settings.params.segment_bytes;
        if lengths.is_empty() {
            return Err(MdsError::InvalidArgument("no segment lengths given".into()));
        }
        if lengths.len() > MAX_SEGMENTS_PER_CALL {
            return Err(MdsError::InvalidArgument(format!(
                "{} segments in one call; the limit is {MAX_SEGMENTS_PER_CALL}",
                lengths.len()
            )));
        }
        if let Some((i, l)) = lengths
            .iter()
            .enumerate()
            .find(|(_, &l)| l == 0 || l > seg_bytes)
        {
            return Err(MdsError::InvalidArgument(format!(
                "segment length #{i} is {l}; it must be 1..={seg_bytes} (segment_bytes)"
            )));
        }
        if u64::from(first) + lengths.len() as u64 > MAX_SEGMENTS_PER_FILE {
            return Err(MdsError::InvalidArgument(format!(
                "file {} would have {} segments; the limit is {MAX_SEGMENTS_PER_FILE}",
                f.path,
                u64::from(first) + lengths.len() as u64
            )));
        }
        self.ids_free()?;
        let osds = self.osd_map()?;
        let mut candidates = self.candidates(&osds)?;
        let (k, n) = (self.k(), self.n());
        if !osd_hint.is_empty() {
            candidates.retain(|c| osd_hint.contains(&c.osd_id));
            if candidates.len() < n as usize {
                return Err(MdsError::FailedPrecondition(format!(
                    "the placement hint names {} OSDs that are up; a segment needs n = {n}",
                    candidates.len()
                )));
            }
        }
        let epoch = batch.next(self.store.as_ref(), COUNTER_EPOCH)?;
        let mut records = Vec::with_capacity(lengths.len());
        for (i, &length) in lengths.iter().enumerate() {
            let placed = place_segment(&mut candidates, k, n, self.chunk_bytes(length))
                .map_err(|e| MdsError::FailedPrecondition(e.to_string()))?;
            let segment_id = batch.next(self.store.as_ref(), COUNTER_SEGMENT)?;
            let seg = SegmentRecord {
                segment_id,
                file_id: f.file_id,
                index: first + i as u32,
                length,
                primary: placed[0].expect("chunk 0 is always placed"),
                epoch,
                version: 0,
            };
            batch.push(Mutation::PutSegment(seg.clone()));
            let chunks: Vec<ChunkRecord> = placed
                .iter()
                .enumerate()
                .map(|(index, osd)| ChunkRecord {
                    segment_id,
                    index: index as u32,
                    osd_id: *osd,
                    state: if osd.is_some() {
                        ChunkState::Healthy
                    } else {
                        ChunkState::Lost
                    },
                })
                .collect();
            for c in &chunks {
                batch.push(Mutation::PutChunk(c.clone()));
            }
            records.push((seg, chunks));
        }
        Ok(records
            .iter()
            .map(|(s, c)| layout_of(s, c, &osds, f.scheme))
            .collect())
    }

    /// Delete tasks for every chunk of a file, and the file's removal.
    fn drop_file(&self, batch: &mut Batch, file_id: u64) -> Result<(), MdsError> {
        let segments = self.store.segments_of_file(file_id).map_err(internal)?;
        let empty = segments.is_empty();
        for s in segments {
            for c in self.store.chunks(s.segment_id).map_err(internal)? {
                if let Some(osd_id) = c.osd_id {
                    batch.push(Mutation::PutDelete(DeleteRecord {
                        osd_id,
                        segment_id: s.segment_id,
                        chunk: c.index,
                    }));
                }
            }
        }
        let objects = self.drop_robust_blocks(batch, file_id)?;
        // A file with neither (an empty file, a create's): its records only.
        batch.push(if empty && objects == 0 {
            Mutation::DeleteEmptyFile(file_id)
        } else {
            Mutation::DeleteFile(file_id)
        });
        Ok(())
    }

    pub fn get_segment(&self, segment_id: u64) -> Result<SegmentLayout, MdsError> {
        let s = self.segment(segment_id)?;
        self.layout(&s, &self.osd_map()?)
    }

    // ---- chunk states

    fn check_chunks(&self, segment_id: u64, chunks: &[u32]) -> Result<(), MdsError> {
        if let Some(c) = chunks.iter().find(|&&c| c >= self.n()) {
            return Err(MdsError::InvalidArgument(format!(
                "segment {segment_id} has chunks 0..{}; got chunk {c}",
                self.n()
            )));
        }
        Ok(())
    }

    fn progress_add(&self, batch: &mut Batch, chunks: u64) -> Result<(), MdsError> {
        if chunks == 0 {
            return Ok(());
        }
        let mut r = self.store.recovery().map_err(internal)?;
        if r.chunks_done >= r.chunks_total {
            r = RecoveryProgress {
                started_ms: self.clock.now_ms(),
                ..RecoveryProgress::default()
            };
        }
        r.chunks_total += chunks;
        r.finished_ms = 0;
        batch.push(Mutation::SetRecovery(r));
        Ok(())
    }

    pub fn mark_stale(
        &mut self,
        segment_id: u64,
        chunks: &[u32],
        version: u64,
    ) -> Result<(), MdsError> {
        let mut s = self.segment(segment_id)?;
        self.check_chunks(segment_id, chunks)?;
        if chunks.is_empty() {
            return Err(MdsError::InvalidArgument(format!(
                "MarkStale for segment {segment_id} names no chunk"
            )));
        }
        let mut batch = Batch::new();
        let mut newly = 0;
        for c in self.store.chunks(segment_id).map_err(internal)? {
            if chunks.contains(&c.index)
                && matches!(c.state, ChunkState::Healthy | ChunkState::Recovering)
            {
                if c.state == ChunkState::Healthy {
                    newly += 1;
                }
                batch.push(Mutation::PutChunk(ChunkRecord {
                    state: ChunkState::Stale,
                    ..c
                }));
            }
        }
        s.version = s.version.max(version);
        s.epoch = batch.next(self.store.as_ref(), COUNTER_EPOCH)?;
        batch.push(Mutation::PutSegment(s));
        self.progress_add(&mut batch, newly)?;
        batch.commit(self.store.as_mut())?;
        tracing::info!(
            segment = segment_id,
            ?chunks,
            version,
            "chunks marked stale"
        );
        Ok(())
    }

    /// Chunk `chunk` was rebuilt onto `osd_id` at `version` by `reporter` (`None`: unchecked), which
    /// must be the segment's primary: a primary deposed by a promotion (its heartbeats late, not
    /// dead) may still finish a task with an old view, and must not make a chunk healthy.
    /// Returns the segment's epoch with the chunk healthy: the primary refuses older layouts from
    /// then on, since they still call the chunk stale and an update under one would skip it.
    pub fn chunk_recovered(
        &mut self,
        segment_id: u64,
        chunk: u32,
        osd_id: u32,
        version: u64,
        reporter: Option<u32>,
    ) -> Result<u64, MdsError> {
        let mut s = self.segment(segment_id)?;
        self.check_chunks(segment_id, &[chunk])?;
        if let Some(reporter) = reporter.filter(|&r| r != s.primary) {
            return Err(MdsError::FailedPrecondition(format!(
                "segment {segment_id}'s primary is OSD {}, not OSD {reporter}; its rebuild is not recorded",
                s.primary
            )));
        }
        let c = self
            .store
            .chunks(segment_id)
            .map_err(internal)?
            .into_iter()
            .find(|c| c.index == chunk)
            .ok_or_else(|| {
                MdsError::NotFound(format!("segment {segment_id} has no chunk {chunk}"))
            })?;
        if c.osd_id != Some(osd_id) {
            return Err(MdsError::FailedPrecondition(format!(
                "chunk {chunk} of segment {segment_id} is assigned to {}, not OSD {osd_id}",
                c.osd_id
                    .map_or("no OSD".to_string(), |o| format!("OSD {o}"))
            )));
        }
        if c.state == ChunkState::Healthy {
            return Ok(s.epoch);
        }
        if version < s.version {
            return Err(MdsError::FailedPrecondition(format!(
                "segment {segment_id} is at version {}; a rebuild at version {version} is outdated",
                s.version
            )));
        }
        let mut batch = Batch::new();
        batch.push(Mutation::PutChunk(ChunkRecord {
            state: ChunkState::Healthy,
            ..c
        }));
        s.version = version;
        s.epoch = batch.next(self.store.as_ref(), COUNTER_EPOCH)?;
        let epoch = s.epoch;
        let bytes = self.chunk_bytes(s.length);
        batch.push(Mutation::PutSegment(s));
        let mut r = self.store.recovery().map_err(internal)?;
        r.chunks_done += 1;
        r.bytes_done += bytes;
        if r.chunks_done >= r.chunks_total {
            r.chunks_total = r.chunks_total.max(r.chunks_done);
            r.finished_ms = self.clock.now_ms();
        }
        batch.push(Mutation::SetRecovery(r));
        batch.commit(self.store.as_mut())?;
        tracing::info!(
            segment = segment_id,
            chunk,
            osd_id,
            version,
            "chunk healthy again"
        );
        Ok(epoch)
    }

    // ---- failures

    pub fn osd_out(&mut self, osd_id: u32) -> Result<u64, MdsError> {
        let osds = self.osd_map()?;
        if !osds.contains_key(&osd_id) {
            return Err(MdsError::NotFound(format!("no OSD with id {osd_id}")));
        }
        self.declare_out(osd_id, true)
    }

    /// For every segment whose primary is `osd_id`: the usable holder with the lowest chunk index
    /// that is UP becomes the primary.
    /// Changed segments go into `touched` (the caller writes them, once each).
    fn promote(
        &self,
        batch: &mut Batch,
        osd_id: u32,
        osds: &BTreeMap<u32, OsdRecord>,
        touched: &mut BTreeMap<u64, SegmentRecord>,
    ) -> Result<(), MdsError> {
        for mut s in self.store.segments_with_primary(osd_id).map_err(internal)? {
            let chunks = self.store.chunks(s.segment_id).map_err(internal)?;
            let next = chunks.iter().find_map(|c| {
                let o = c.osd_id?;
                (o != osd_id
                    && c.state == ChunkState::Healthy
                    && osds.get(&o).is_some_and(|r| r.state == OsdState::Up))
                .then_some(o)
            });
            match next {
                Some(p) => {
                    tracing::info!(
                        segment = s.segment_id,
                        from = osd_id,
                        to = p,
                        "primary promoted"
                    );
                    s.primary = p;
                    s.epoch = batch.next(self.store.as_ref(), COUNTER_EPOCH)?;
                    touched.insert(s.segment_id, s);
                }
                None => tracing::warn!(
                    segment = s.segment_id,
                    "primary is not up and no usable holder is up; segment unavailable"
                ),
            }
        }
        Ok(())
    }

    fn set_state(
        &self,
        batch: &mut Batch,
        osds: &mut BTreeMap<u32, OsdRecord>,
        osd_id: u32,
        state: OsdState,
    ) {
        if let Some(o) = osds.get_mut(&osd_id) {
            o.state = state;
            batch.push(Mutation::PutOsd(o.clone()));
        }
    }

    fn declare_down(&mut self, osd_id: u32) -> Result<(), MdsError> {
        let mut osds = self.osd_map()?;
        let mut batch = Batch::new();
        self.set_state(&mut batch, &mut osds, osd_id, OsdState::Down);
        let mut touched = BTreeMap::new();
        self.promote(&mut batch, osd_id, &osds, &mut touched)?;
        for s in touched.into_values() {
            batch.push(Mutation::PutSegment(s));
        }
        tracing::warn!(osd_id, "OSD is down (missed heartbeats)");
        batch.commit(self.store.as_mut())
    }

    /// Out: promote where it is primary, then give each of its chunks a new holder by placement
    /// (RECOVERING, rebuilt by the primary) or mark it LOST when no UP OSD can take it (placed
    /// once one can). An administrator's out (`refuse_loss`) changes nothing and fails instead
    /// when the OSD is up and a chunk would be LOST (taking a live OSD out must not lower
    /// redundancy), or when a chunk could never be placed: every OSD still in (up or down)
    /// already holds a chunk of its segment. A down OSD's chunks are unusable already, so its
    /// out goes ahead when another OSD, down for now, could take them later.
    fn declare_out(&mut self, osd_id: u32, refuse_loss: bool) -> Result<u64, MdsError> {
        let mut osds = self.osd_map()?;
        let was_up = osds.get(&osd_id).is_some_and(|o| o.state == OsdState::Up);
        let mut batch = Batch::new();
        self.set_state(&mut batch, &mut osds, osd_id, OsdState::Out);
        let mut touched = BTreeMap::new();
        self.promote(&mut batch, osd_id, &osds, &mut touched)?;
        let mut candidates = self.candidates(&osds)?;
        let mut by_segment: BTreeMap<u64, Vec<ChunkRecord>> = BTreeMap::new();
        for c in self.store.chunks_on_osd(osd_id).map_err(internal)? {
            by_segment.entry(c.segment_id).or_default().push(c);
        }
        let mut moved = 0u64;
        let mut recovering = 0u64;
        let mut homeless = 0u64;
        // Homeless chunks that no OSD still in could ever take.
        let mut hopeless = 0u64;
        for (segment_id, lost) in by_segment {
            let mut s = match touched.remove(&segment_id) {
                Some(s) => s,
                None => match self.store.segment(segment_id).map_err(internal)? {
                    Some(s) => s,
                    None => continue,
                },
            };
            let mut holders: Vec<u32> = self
                .store
                .chunks(segment_id)
                .map_err(internal)?
                .iter()
                .filter_map(|c| c.osd_id)
                .filter(|&o| o != osd_id)
                .collect();
            for c in lost {
                let domains: Vec<Option<String>> = holders
                    .iter()
                    .map(|o| osds.get(o).and_then(|r| self.domain_of(r)))
                    .collect();
                let target = place_chunk(
                    &mut candidates,
                    &holders,
                    &domains,
                    self.chunk_bytes(s.length),
                );
                let (osd, state) = match target {
                    Some(t) => {
                        holders.push(t);
                        recovering += 1;
                        (Some(t), ChunkState::Recovering)
                    }
                    None => {
                        homeless += 1;
                        let spare = osds.values().any(|o| {
                            o.state != OsdState::Out
                                && o.osd_id != osd_id
                                && !holders.contains(&o.osd_id)
                        });
                        hopeless += u64::from(!spare);
                        (None, ChunkState::Lost)
                    }
                };
                batch.push(Mutation::PutChunk(ChunkRecord {
                    osd_id: osd,
                    state,
                    ..c
                }));
                moved += 1;
            }
            s.epoch = batch.next(self.store.as_ref(), COUNTER_EPOCH)?;
            batch.push(Mutation::PutSegment(s));
        }
        for s in touched.into_values() {
            batch.push(Mutation::PutSegment(s));
        }
        if refuse_loss && (hopeless > 0 || (was_up && homeless > 0)) {
            let name = osds.get(&osd_id).map(|o| o.name.as_str()).unwrap_or("?");
            let why = if hopeless > 0 {
                format!("{hopeless} of its {moved} chunks have no other OSD to go to (their segments already have a chunk on every OSD still in)")
            } else {
                format!("it is up and {homeless} of its {moved} chunks have no other up OSD to go to now")
            };
            return Err(MdsError::FailedPrecondition(format!(
                "OSD {osd_id} ({name}) stays in: {why}; add an OSD first"
            )));
        }
        self.progress_add(&mut batch, recovering)?;
        tracing::warn!(
            osd_id,
            chunks = moved,
            recovering,
            "OSD is out; its chunks are rebuilt elsewhere"
        );
        batch.commit(self.store.as_mut())?;
        Ok(moved)
    }

    /// LOST chunks get a holder as soon as an UP OSD can take them.
    fn place_lost(&mut self) -> Result<(), MdsError> {
        let lost = self
            .store
            .chunks_in_state(ChunkState::Lost)
            .map_err(internal)?;
        if lost.is_empty() {
            return Ok(());
        }
        let osds = self.osd_map()?;
        let mut candidates = self.candidates(&osds)?;
        let mut batch = Batch::new();
        let mut placed = 0;
        let mut touched: BTreeMap<u64, SegmentRecord> = BTreeMap::new();
        for c in lost {
            let s = match touched.get(&c.segment_id) {
                Some(s) => s.clone(),
                None => match self.store.segment(c.segment_id).map_err(internal)? {
                    Some(s) => s,
                    None => continue,
                },
            };
            let mut holders: Vec<u32> = self
                .store
                .chunks(c.segment_id)
                .map_err(internal)?
                .iter()
                .filter_map(|c| c.osd_id)
                .collect();
            // Chunks placed earlier in this batch for the same segment.
            for m in &batch.muts {
                if let Mutation::PutChunk(p) = m {
                    if p.segment_id == c.segment_id {
                        holders.extend(p.osd_id);
                    }
                }
            }
            let domains: Vec<Option<String>> = holders
                .iter()
                .map(|o| osds.get(o).and_then(|r| self.domain_of(r)))
                .collect();
            if let Some(t) = place_chunk(
                &mut candidates,
                &holders,
                &domains,
                self.chunk_bytes(s.length),
            ) {
                batch.push(Mutation::PutChunk(ChunkRecord {
                    osd_id: Some(t),
                    state: ChunkState::Recovering,
                    ..c
                }));
                placed += 1;
                touched.insert(c.segment_id, s);
            }
        }
        for (_, mut s) in touched {
            s.epoch = batch.next(self.store.as_ref(), COUNTER_EPOCH)?;
            batch.push(Mutation::PutSegment(s));
        }
        self.progress_add(&mut batch, placed)?;
        batch.commit(self.store.as_mut())
    }

    /// Pending files older than `pending_ttl_ms` are dropped (a client died mid-put).
    fn expire_pending(&mut self) -> Result<(), MdsError> {
        let now = self.clock.now_ms();
        let mut batch = Batch::new();
        for f in self.store.pending_files().map_err(internal)? {
            if now.saturating_sub(f.mtime_ms) > self.settings.pending_ttl_ms {
                tracing::info!(file_id = f.file_id, path = %f.path, "dropping an uncommitted file");
                self.drop_file(&mut batch, f.file_id)?;
            }
        }
        batch.commit(self.store.as_mut())
    }

    /// One round of the failure detector: down after `down_after_ms` without heartbeat, out after
    /// `out_after_ms`; retries promotions that found no usable holder; places LOST chunks.
    pub fn tick(&mut self) -> Result<(), MdsError> {
        let now = self.clock.now_ms();
        let osds = self.osd_map()?;
        for o in osds.values() {
            let seen = *self.last_seen.entry(o.osd_id).or_insert(now);
            let silent = now.saturating_sub(seen);
            match o.state {
                OsdState::Up if silent > u64::from(self.settings.params.down_after_ms) => {
                    self.declare_down(o.osd_id)?;
                    if silent > self.settings.out_after_ms {
                        self.declare_out(o.osd_id, false)?;
                    }
                }
                OsdState::Down if silent > self.settings.out_after_ms => {
                    self.declare_out(o.osd_id, false)?;
                }
                OsdState::Down | OsdState::Out => {
                    if !self
                        .store
                        .segments_with_primary(o.osd_id)
                        .map_err(internal)?
                        .is_empty()
                    {
                        let osds = self.osd_map()?;
                        let mut batch = Batch::new();
                        let mut touched = BTreeMap::new();
                        self.promote(&mut batch, o.osd_id, &osds, &mut touched)?;
                        if touched.is_empty() {
                            continue;
                        }
                        for s in touched.into_values() {
                            batch.push(Mutation::PutSegment(s));
                        }
                        batch.commit(self.store.as_mut())?;
                    }
                }
                OsdState::Up => {}
            }
        }
        self.place_lost()?;
        self.settle_ids_wait()?;
        self.expire_pending()
    }

    // ---- status

    /// The database file an online backup copies (SQLite stores; `crate::backup::snapshot_sqlite`
    /// copies it without the core).
    pub fn backup_source(&self) -> Result<std::path::PathBuf, MdsError> {
        self.store.backup_source().map_err(|e| match e {
            StoreError::Db(m) => MdsError::FailedPrecondition(m),
            e => internal(e),
        })
    }

    pub fn status(&self) -> Result<ClusterStatus, MdsError> {
        let now = self.clock.now_ms();
        let osds = self.osd_map()?;
        let (files, bytes) = self.store.totals().map_err(internal)?;
        let mut counts = [0u64; 4];
        let mut by_segment: BTreeMap<u64, Vec<ChunkRecord>> = BTreeMap::new();
        let pending = self.pending_segments()?;
        for c in self.store.all_chunks().map_err(internal)? {
            if !pending.contains(&c.segment_id) {
                by_segment.entry(c.segment_id).or_default().push(c);
            }
        }
        for chunks in by_segment.values() {
            counts[segment_health(chunks, &osds, self.k(), self.n()) as usize] += 1;
        }
        let (robust_files, robust_objects_below_n) = self.robust_census(&osds)?;
        Ok(ClusterStatus {
            robust_files,
            robust_objects_below_n,
            orphans: self.inventories.counts(),
            cluster_id: self.settings.params.cluster_id.clone(),
            params: self.settings.params.clone(),
            osds: osds
                .values()
                .map(|o| {
                    let usage = self.usage.get(&o.osd_id).copied().unwrap_or_default();
                    OsdInfo {
                        osd_id: o.osd_id,
                        name: o.name.clone(),
                        addr: o.addr.clone(),
                        labels: o.labels.clone(),
                        capacity_bytes: o.capacity_bytes,
                        used_bytes: o.used_bytes,
                        reserve_bytes: usage.reserve_bytes,
                        log_bytes: usage.log_bytes,
                        merges: usage.merges,
                        load: usage.load,
                        state: o.state,
                        last_heartbeat_ms_ago: now.saturating_sub(
                            self.last_seen
                                .get(&o.osd_id)
                                .copied()
                                .unwrap_or(o.last_heartbeat_ms),
                        ),
                    }
                })
                .collect(),
            files,
            bytes,
            segments_healthy: counts[Health::Healthy as usize],
            segments_degraded: counts[Health::Degraded as usize],
            segments_recovering: counts[Health::Recovering as usize],
            segments_lost: counts[Health::Lost as usize],
            recovery: self.store.recovery().map_err(internal)?,
        })
    }
}

/// A segment's health for status and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Healthy = 0,
    /// Readable, with fewer than n usable chunks.
    Degraded = 1,
    /// Readable, with a chunk being rebuilt (recovering or stale, on an UP holder).
    Recovering = 2,
    /// Fewer than k usable chunks.
    Lost = 3,
}

fn usable(c: &ChunkRecord, osds: &BTreeMap<u32, OsdRecord>) -> bool {
    c.state == ChunkState::Healthy
        && c.osd_id
            .and_then(|o| osds.get(&o))
            .is_some_and(|o| o.state == OsdState::Up)
}

pub fn segment_health(
    chunks: &[ChunkRecord],
    osds: &BTreeMap<u32, OsdRecord>,
    k: u32,
    n: u32,
) -> Health {
    let ok = chunks.iter().filter(|c| usable(c, osds)).count() as u32;
    if ok < k {
        Health::Lost
    } else if chunks.iter().any(|c| {
        matches!(c.state, ChunkState::Recovering | ChunkState::Stale)
            && c.osd_id
                .and_then(|o| osds.get(&o))
                .is_some_and(|o| o.state == OsdState::Up)
    }) {
        Health::Recovering
    } else if ok < n {
        Health::Degraded
    } else {
        Health::Healthy
    }
}

/// The one place a [`SegmentLayout`] is built (allocation, lookup, GetSegment, recover tasks,
/// after promotions): `scheme` is its file's.
fn layout_of(
    s: &SegmentRecord,
    chunks: &[ChunkRecord],
    osds: &BTreeMap<u32, OsdRecord>,
    scheme: UpdateScheme,
) -> SegmentLayout {
    let addr = |o: u32| osds.get(&o).map(|r| r.addr.clone()).unwrap_or_default();
    SegmentLayout {
        scheme,
        segment_id: s.segment_id,
        file_id: s.file_id,
        index: s.index,
        length: s.length,
        primary: s.primary,
        primary_addr: addr(s.primary),
        chunks: chunks
            .iter()
            .map(|c| ChunkPlacement {
                index: c.index,
                osd_id: c.osd_id.unwrap_or(NO_OSD),
                addr: c.osd_id.map(addr).unwrap_or_default(),
                state: c.state,
                up: c
                    .osd_id
                    .and_then(|o| osds.get(&o))
                    .is_some_and(|o| o.state == OsdState::Up),
            })
            .collect(),
        epoch: s.epoch,
        version: s.version,
    }
}
