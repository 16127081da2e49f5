//! Orphans (issue 43; docs/cluster.md "Orphans"): what the MDS remembers of OSDs' inventories and
//! the rule that turns chunks and robust block files the metadata does not know into delete
//! tasks. After it registers and then every `[osd] inventory_period_ms`, each OSD sends what it
//! holds — the segments it has chunks of, the robust objects it has block files of — in pages of
//! one listing (a pass, `ReportInventory`). Left by files written after the backup a restore went
//! back to, or by a robust put that never committed, such files would take space forever.
//!
//! The rule, safety first:
//!
//! - **Unknown** is: neither a segment's nor a robust object's id (committed or pending, so a put
//!   under way is known from its allocation on), no delete task of that OSD for it
//!   ([`MetadataStore::known_ids`]), and not above the segment counter as it was when the pass
//!   began (an id past the counter is never a candidate; the pass's first page moves the counter
//!   past it, so a later pass judges it).
//! - A candidate becomes a delete task (`DeleteTask` for its chunks, `DeleteObjectTask` for the
//!   whole block file) only when a pass that ends over `[mds] orphan_grace_ms` after the pass
//!   that first found it still reports it, and only if the store still does not know it then.
//!   So at least two listings, a grace apart, saw it.
//! - Candidates live in memory: an MDS that starts (or a standby that takes over) has none, and
//!   judges only passes it received from their first page on.
//!
//! Also here: after a restore the MDS waits for every OSD's largest id before it hands out new
//! ones ([`IdsWait`]). The engine (`engine::inventory`) feeds this module and commits what it
//! returns; this module reads the store, and never writes it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::store::{
    DeleteRecord, MetadataStore, Mutation, ObjectDeleteRecord, OsdRecord, RobustMutation,
    StoreError,
};
use ecstack_mds_proto::{InventoryPage, OrphanCounts, OsdState};

/// Most candidates the MDS holds (and most unknown entries one pass collects); past it new ones
/// wait until deletions make room.
pub const ORPHAN_CANDIDATES_MAX: usize = 1 << 20;
/// Most chunks and block files one pass turns into delete tasks; the rest stay candidates and go
/// at the next pass (delete tasks ride every heartbeat reply until done).
pub const ORPHAN_DELETES_PER_PASS: usize = 16_384;
/// After a restore, new ids wait at most this long for the OSDs' largest ids; past it the MDS
/// names the OSDs that never reported and goes on.
pub const IDS_WAIT_MAX_MS: u64 = 120_000;
/// Most OSD ids unknown to a restored store that [`IdsWait`] remembers.
const STRANGERS_MAX: usize = 4096;

/// What an OSD holds that may be an orphan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Held {
    /// Chunks of a segment.
    Segment(u64),
    /// A robust object's block file.
    Object(u64),
}

impl Held {
    fn id(self) -> u64 {
        match self {
            Held::Segment(id) | Held::Object(id) => id,
        }
    }
}

/// An inventory pass being received from one OSD.
#[derive(Debug)]
struct Pass {
    pass: u64,
    next_page: u32,
    /// The segment counter when the pass began: ids above it are never candidates.
    counter: u64,
    /// What its pages named that the store does not know (chunk indexes of a segment).
    unknown: BTreeMap<Held, Vec<u32>>,
}

#[derive(Debug)]
struct Candidate {
    /// When the pass that first found it unknown ended (the MDS's clock).
    first_seen_ms: u64,
    chunks: Vec<u32>,
}

/// Delete tasks for orphans one pass made due: to commit, then to count with [`Inventories::deleted`].
#[derive(Debug, Default)]
pub struct Deletions {
    pub mutations: Vec<Mutation>,
    pub chunks: u64,
    pub segments: u64,
    pub objects: u64,
}

/// After a restore: who reported the largest id it holds since this MDS started.
#[derive(Debug)]
pub struct IdsWait {
    since_ms: u64,
    reported: BTreeSet<u32>,
    /// OSD ids the restored store does not know that called (registered after the backup; they
    /// register again) and when they last did.
    strangers: BTreeMap<u32, u64>,
}

impl IdsWait {
    /// The OSDs new ids still wait for at `now`: not out, not reported, heard from within
    /// `down_after_ms` (`last_seen`: the MDS's last heartbeat of each; a silent OSD registers,
    /// with its ids, when it returns), while the wait is younger than [`IDS_WAIT_MAX_MS`].
    /// Empty: ids are free.
    pub fn waiting_for(
        &self,
        osds: &[OsdRecord],
        last_seen: &HashMap<u32, u64>,
        now: u64,
        down_after_ms: u64,
    ) -> Vec<String> {
        if now.saturating_sub(self.since_ms) > IDS_WAIT_MAX_MS {
            return Vec::new();
        }
        let heard = |seen: u64| now.saturating_sub(seen) <= down_after_ms;
        let mut waiting: Vec<String> = osds
            .iter()
            .filter(|o| {
                o.state != OsdState::Out
                    && !self.reported.contains(&o.osd_id)
                    && last_seen.get(&o.osd_id).is_some_and(|&s| heard(s))
            })
            .map(|o| o.name.clone())
            .collect();
        waiting.extend(
            self.strangers
                .iter()
                .filter(|&(id, &seen)| {
                    !self.reported.contains(id)
                        && !osds.iter().any(|o| o.osd_id == *id)
                        && heard(seen)
                })
                .map(|(id, _)| format!("OSD id {id}, unknown to the restored metadata")),
        );
        waiting
    }

    /// The OSDs (not out) that never reported.
    pub fn never_reported(&self, osds: &[OsdRecord]) -> Vec<String> {
        osds.iter()
            .filter(|o| o.state != OsdState::Out && !self.reported.contains(&o.osd_id))
            .map(|o| o.name.clone())
            .collect()
    }
}

/// The MDS's memory of inventories: passes under way, candidates, counts, and the wait for ids
/// after a restore.
#[derive(Debug, Default)]
pub struct Inventories {
    passes: HashMap<u32, Pass>,
    candidates: BTreeMap<(u32, Held), Candidate>,
    chunks_deleted: u64,
    objects_deleted: u64,
    /// `Some` while new ids wait for the OSDs after a restore.
    pub ids_wait: Option<IdsWait>,
}

impl Inventories {
    /// Fresh memory; `restored`: the store is a restored backup (new ids wait for the OSDs).
    pub fn new(restored: bool, now: u64) -> Inventories {
        Inventories {
            ids_wait: restored.then(|| IdsWait {
                since_ms: now,
                reported: BTreeSet::new(),
                strangers: BTreeMap::new(),
            }),
            ..Inventories::default()
        }
    }

    pub fn counts(&self) -> OrphanCounts {
        let mut c = OrphanCounts {
            chunks_deleted: self.chunks_deleted,
            objects_deleted: self.objects_deleted,
            ..OrphanCounts::default()
        };
        for ((_, held), cand) in &self.candidates {
            match held {
                Held::Segment(_) => c.chunks_pending += cand.chunks.len() as u64,
                Held::Object(_) => c.objects_pending += 1,
            }
        }
        c
    }

    /// Whether a heartbeat reply asks `osd_id` for its inventory now.
    pub fn wants_inventory(&self, osd_id: u32) -> bool {
        self.ids_wait
            .as_ref()
            .is_some_and(|w| !w.reported.contains(&osd_id))
    }

    /// `osd_id` told this MDS the largest id it holds.
    pub fn ids_reported(&mut self, osd_id: u32) {
        if let Some(w) = &mut self.ids_wait {
            w.reported.insert(osd_id);
        }
    }

    /// An OSD id the store does not know called at `now` (it is told to register again): while
    /// new ids wait, it is waited for too.
    pub fn stranger_heard(&mut self, osd_id: u32, now: u64) {
        if let Some(w) = &mut self.ids_wait {
            if w.strangers.len() < STRANGERS_MAX || w.strangers.contains_key(&osd_id) {
                w.strangers.insert(osd_id, now);
            }
        }
    }

    /// Judges page `p` (checked by the caller: a known OSD, sizes, chunk indexes) against
    /// `store`; `counter`: the segment counter now (a first page begins a pass with it, before
    /// the page's largest id moves it). `Ok(None)`: the pass is dropped (no pass this page
    /// continues). `Ok(Some(d))` with the delete tasks the pass made due when `p` was its last
    /// page (at `now`, after `grace_ms`), to commit.
    pub fn page(
        &mut self,
        store: &dyn MetadataStore,
        p: &InventoryPage,
        counter: u64,
        now: u64,
        grace_ms: u64,
    ) -> Result<Option<Deletions>, StoreError> {
        if p.page == 0 {
            self.passes.insert(
                p.osd_id,
                Pass {
                    pass: p.pass,
                    next_page: 0,
                    counter,
                    unknown: BTreeMap::new(),
                },
            );
        }
        let Some(pass) = self
            .passes
            .get_mut(&p.osd_id)
            .filter(|s| s.pass == p.pass && s.next_page == p.page)
        else {
            self.passes.remove(&p.osd_id);
            return Ok(None);
        };
        let held: Vec<(Held, &[u32])> = p
            .segments
            .iter()
            .map(|s| (Held::Segment(s.segment_id), &s.chunks[..]))
            .chain(p.objects.iter().map(|&o| (Held::Object(o), &[][..])))
            .filter(|(h, _)| h.id() <= pass.counter)
            .collect();
        let ids: Vec<u64> = held.iter().map(|(h, _)| h.id()).collect();
        let known = store.known_ids(p.osd_id, &ids)?;
        for (h, chunks) in held {
            if known.contains(&h.id()) || pass.unknown.len() >= ORPHAN_CANDIDATES_MAX {
                continue;
            }
            let mut chunks = chunks.to_vec();
            chunks.sort_unstable();
            chunks.dedup();
            pass.unknown.insert(h, chunks);
        }
        pass.next_page += 1;
        if !p.last {
            return Ok(Some(Deletions::default()));
        }
        let pass = self.passes.remove(&p.osd_id).expect("found above");
        self.end_pass(store, p.osd_id, pass, now, grace_ms)
            .map(Some)
    }

    /// A whole pass of `osd_id` arrived: its candidates are what it named unknown (the others
    /// are gone from the OSD, or known now); those first found over the grace ago, and still
    /// unknown, become delete tasks.
    fn end_pass(
        &mut self,
        store: &dyn MetadataStore,
        osd_id: u32,
        pass: Pass,
        now: u64,
        grace_ms: u64,
    ) -> Result<Deletions, StoreError> {
        self.candidates
            .retain(|(o, h), _| *o != osd_id || pass.unknown.contains_key(h));
        let mut due: Vec<Held> = Vec::new();
        let mut due_entries = 0usize;
        for (h, chunks) in pass.unknown {
            let room = self.candidates.len() < ORPHAN_CANDIDATES_MAX;
            match self.candidates.get_mut(&(osd_id, h)) {
                Some(c) => {
                    c.chunks = chunks;
                    if now.saturating_sub(c.first_seen_ms) > grace_ms
                        && due_entries < ORPHAN_DELETES_PER_PASS
                    {
                        due_entries += c.chunks.len().max(1);
                        due.push(h);
                    }
                }
                None if room => {
                    self.candidates.insert(
                        (osd_id, h),
                        Candidate {
                            first_seen_ms: now,
                            chunks,
                        },
                    );
                }
                None => {}
            }
        }
        let mut d = Deletions::default();
        if due.is_empty() {
            return Ok(d);
        }
        // Still unknown now? (The store may have changed since the pass's pages were judged.)
        let ids: Vec<u64> = due.iter().map(|h| h.id()).collect();
        let known = store.known_ids(osd_id, &ids)?;
        let counter = store.counter(crate::store::COUNTER_SEGMENT)?;
        for h in due {
            let Some(c) = self.candidates.remove(&(osd_id, h)) else {
                continue;
            };
            if known.contains(&h.id()) || h.id() > counter {
                continue;
            }
            match h {
                Held::Segment(segment_id) => {
                    d.segments += 1;
                    for chunk in c.chunks {
                        d.chunks += 1;
                        d.mutations.push(Mutation::PutDelete(DeleteRecord {
                            osd_id,
                            segment_id,
                            chunk,
                        }));
                    }
                }
                Held::Object(object_id) => {
                    d.objects += 1;
                    d.mutations.push(Mutation::Robust(RobustMutation::PutDelete(
                        ObjectDeleteRecord {
                            osd_id,
                            object_id,
                            block: None,
                        },
                    )));
                }
            }
        }
        Ok(d)
    }

    /// `d`'s tasks were committed.
    pub fn deleted(&mut self, d: &Deletions) {
        self.chunks_deleted += d.chunks;
        self.objects_deleted += d.objects;
    }
}
