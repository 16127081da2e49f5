//! OSDs' inventories at the MDS (issue 43; docs/cluster.md "Orphans"). After it registers and
//! then every `[osd] inventory_period_ms`, each OSD sends what it holds — the segments it has
//! chunks of, the robust objects it has block files of — in pages of one listing (a pass,
//! `ReportInventory`). What the store does not know is an orphan candidate: left by files
//! written after the backup a restore went back to, it would take space forever.
//!
//! The rule, safety first:
//!
//! - **Unknown** is: neither a segment's nor a robust object's id (committed or pending, so a put
//!   under way is known from its allocation on), no delete task of that OSD for it, and not above
//!   the segment counter as it was when the pass began (an id past the counter is never a
//!   candidate; the pass's first page moves the counter past it, so a later pass judges it).
//! - A candidate becomes a delete task (`DeleteTask` for its chunks, `DeleteObjectTask` for the
//!   whole block file) only when a pass that ends over `[mds] orphan_grace_ms` after the pass
//!   that first found it still reports it, and only if the store still does not know it then.
//!   So at least two listings, a grace apart, saw it.
//! - Candidates live in memory: an MDS that starts (or a standby that takes over) has none, and
//!   judges only passes it received from their first page on.
//!
//! Also here: after a restore (`cluster restore` leaves [`COUNTER_RESTORED`] set) the MDS hands
//! out no new segment or object id until every OSD reported the largest id it holds (registration
//! or an inventory's first page), so running OSDs need no restart: heartbeat replies ask the
//! OSDs that have not reported for an inventory at once.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::*;
use crate::store::{ObjectDeleteRecord, COUNTER_RESTORED};
use ecstack_mds_proto::{InventoryPage, OrphanCounts, INVENTORY_PAGE_ENTRIES_MAX};

/// Most candidates the MDS holds (and most unknown entries one pass collects); past it new ones
/// wait until deletions make room.
pub const ORPHAN_CANDIDATES_MAX: usize = 1 << 20;
/// Most chunks and block files one pass turns into delete tasks; the rest stay candidates and go
/// at the next pass (delete tasks ride every heartbeat reply until done).
pub const ORPHAN_DELETES_PER_PASS: usize = 16_384;
/// After a restore, new ids wait at most this long for the OSDs' largest ids; past it the MDS
/// names the OSDs that never reported and goes on.
pub const IDS_WAIT_MAX_MS: u64 = 120_000;

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

/// After a restore: who reported the largest id it holds since this MDS started.
#[derive(Debug)]
pub(super) struct IdsWait {
    since_ms: u64,
    reported: BTreeSet<u32>,
    /// OSD ids the restored store does not know that called (registered after the backup; they
    /// register again) and when they last did.
    strangers: BTreeMap<u32, u64>,
}

/// The MDS's memory of inventories: passes under way, candidates, counts, and the wait for ids
/// after a restore.
#[derive(Debug, Default)]
pub(super) struct Inventories {
    passes: HashMap<u32, Pass>,
    candidates: BTreeMap<(u32, Held), Candidate>,
    chunks_deleted: u64,
    objects_deleted: u64,
    ids_wait: Option<IdsWait>,
}

impl Inventories {
    /// Fresh memory; `restored`: the store is a restored backup (new ids wait for the OSDs).
    pub(super) fn new(restored: bool, now: u64) -> Inventories {
        Inventories {
            ids_wait: restored.then(|| IdsWait {
                since_ms: now,
                reported: BTreeSet::new(),
                strangers: BTreeMap::new(),
            }),
            ..Inventories::default()
        }
    }

    pub(super) fn counts(&self) -> OrphanCounts {
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
    pub(super) fn wants_inventory(&self, osd_id: u32) -> bool {
        self.ids_wait
            .as_ref()
            .is_some_and(|w| !w.reported.contains(&osd_id))
    }

    /// `osd_id` told this MDS the largest id it holds.
    pub(super) fn ids_reported(&mut self, osd_id: u32) {
        if let Some(w) = &mut self.ids_wait {
            w.reported.insert(osd_id);
        }
    }

    /// An OSD id the store does not know called at `now` (it is told to register again): while
    /// new ids wait, it is waited for too.
    pub(super) fn stranger_heard(&mut self, osd_id: u32, now: u64) {
        if let Some(w) = &mut self.ids_wait {
            if w.strangers.len() < 4096 || w.strangers.contains_key(&osd_id) {
                w.strangers.insert(osd_id, now);
            }
        }
    }
}

impl MdsCore {
    /// The OSDs new ids still wait for after a restore: not out, not reported, heard from within
    /// `down_after_ms` (a silent OSD registers, with its ids, when it returns), while the wait is
    /// younger than [`IDS_WAIT_MAX_MS`]. Empty: ids are free.
    fn ids_waiting_for(&self) -> Result<Vec<String>, MdsError> {
        let Some(w) = &self.inventories.ids_wait else {
            return Ok(Vec::new());
        };
        let now = self.clock.now_ms();
        if now.saturating_sub(w.since_ms) > IDS_WAIT_MAX_MS {
            return Ok(Vec::new());
        }
        let down_after = u64::from(self.settings.params.down_after_ms);
        let osds = self.store.osds().map_err(internal)?;
        let mut waiting: Vec<String> = osds
            .iter()
            .filter(|o| {
                o.state != OsdState::Out
                    && !w.reported.contains(&o.osd_id)
                    && self
                        .last_seen
                        .get(&o.osd_id)
                        .is_some_and(|&seen| now.saturating_sub(seen) <= down_after)
            })
            .map(|o| o.name.clone())
            .collect();
        waiting.extend(
            w.strangers
                .iter()
                .filter(|&(id, &seen)| {
                    !w.reported.contains(id)
                        && !osds.iter().any(|o| o.osd_id == *id)
                        && now.saturating_sub(seen) <= down_after
                })
                .map(|(id, _)| format!("OSD id {id}, unknown to the restored metadata")),
        );
        Ok(waiting)
    }

    /// Refuses new segment and object ids (retryably) while a restored store waits for OSDs'
    /// largest ids.
    pub(super) fn ids_free(&self) -> Result<(), MdsError> {
        let waiting = self.ids_waiting_for()?;
        if waiting.is_empty() {
            return Ok(());
        }
        Err(MdsError::Unavailable(format!(
            "the metadata was restored from a backup: new ids wait until every OSD reported the largest it holds ({} not yet: {})",
            waiting.len(),
            waiting.join(", ")
        )))
    }

    /// Ends the wait for ids once nothing holds it: the store's restore mark is cleared.
    pub(super) fn settle_ids_wait(&mut self) -> Result<(), MdsError> {
        let Some(w) = &self.inventories.ids_wait else {
            return Ok(());
        };
        if !self.ids_waiting_for()?.is_empty() {
            return Ok(());
        }
        let silent: Vec<String> = self
            .store
            .osds()
            .map_err(internal)?
            .into_iter()
            .filter(|o| o.state != OsdState::Out && !w.reported.contains(&o.osd_id))
            .map(|o| o.name)
            .collect();
        let mut batch = Batch::new();
        batch.push(Mutation::SetCounter {
            name: COUNTER_RESTORED,
            value: 0,
        });
        batch.commit(self.store.as_mut())?;
        self.inventories.ids_wait = None;
        if silent.is_empty() {
            tracing::info!("every OSD reported the ids it holds: new ids are handed out again");
        } else {
            tracing::warn!(
                osds = %silent.join(", "),
                "new ids are handed out again though these OSDs never reported the ids they hold (silent, or past the wait); they report when they register"
            );
        }
        Ok(())
    }

    /// Moves the segment counter past `max_id` (an id an OSD holds) in `batch`.
    pub(super) fn counter_past(
        &self,
        batch: &mut Batch,
        osd: &str,
        max_id: u64,
    ) -> Result<(), MdsError> {
        let counter = match batch.counters.get(COUNTER_SEGMENT) {
            Some(&c) => c,
            None => self.store.counter(COUNTER_SEGMENT).map_err(internal)?,
        };
        if max_id > counter {
            tracing::info!(
                osd = %osd,
                max_segment_id = max_id,
                "segment ids move past the largest an OSD holds"
            );
            batch.counters.insert(COUNTER_SEGMENT, max_id);
        }
        Ok(())
    }

    /// One page of an OSD's inventory pass. Returns whether the pass was dropped (this MDS holds
    /// no pass the page continues: it started since, or a page went missing); the OSD starts
    /// again at page 0.
    pub fn report_inventory(&mut self, p: &InventoryPage) -> Result<bool, MdsError> {
        let osds = self.osd_map()?;
        let Some(osd) = osds.get(&p.osd_id) else {
            self.inventories
                .stranger_heard(p.osd_id, self.clock.now_ms());
            return Err(MdsError::NotFound(format!(
                "unknown OSD id {}; register first",
                p.osd_id
            )));
        };
        let entries: usize = p.objects.len()
            + p.segments
                .iter()
                .map(|s| s.chunks.len().max(1))
                .sum::<usize>();
        if entries > INVENTORY_PAGE_ENTRIES_MAX {
            return Err(MdsError::InvalidArgument(format!(
                "an inventory page of OSD {} names {entries} chunks and objects; a page holds at most {INVENTORY_PAGE_ENTRIES_MAX}",
                p.osd_id
            )));
        }
        let n = self.n();
        if let Some((s, c)) = p
            .segments
            .iter()
            .find_map(|s| s.chunks.iter().find(|&&c| c >= n).map(|c| (s.segment_id, c)))
        {
            return Err(MdsError::InvalidArgument(format!(
                "OSD {} reports chunk {c} of segment {s}; the cluster's chunks are 0..{n}",
                p.osd_id
            )));
        }
        let name = osd.name.clone();
        if p.page == 0 {
            let counter = self.store.counter(COUNTER_SEGMENT).map_err(internal)?;
            self.inventories.passes.insert(
                p.osd_id,
                Pass {
                    pass: p.pass,
                    next_page: 0,
                    counter,
                    unknown: BTreeMap::new(),
                },
            );
            let mut batch = Batch::new();
            self.counter_past(&mut batch, &name, p.max_segment_id)?;
            batch.commit(self.store.as_mut())?;
            self.inventories.ids_reported(p.osd_id);
            self.settle_ids_wait()?;
        }
        let Some(pass) = self
            .inventories
            .passes
            .get(&p.osd_id)
            .filter(|s| s.pass == p.pass && s.next_page == p.page)
        else {
            self.inventories.passes.remove(&p.osd_id);
            return Ok(true);
        };
        let held: Vec<(Held, &[u32])> = p
            .segments
            .iter()
            .map(|s| (Held::Segment(s.segment_id), &s.chunks[..]))
            .chain(p.objects.iter().map(|&o| (Held::Object(o), &[][..])))
            .filter(|(h, _)| h.id() <= pass.counter)
            .collect();
        let ids: Vec<u64> = held.iter().map(|(h, _)| h.id()).collect();
        let known = self.store.known_ids(p.osd_id, &ids).map_err(internal)?;
        let pass = self
            .inventories
            .passes
            .get_mut(&p.osd_id)
            .expect("checked above");
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
        if p.last {
            let pass = self
                .inventories
                .passes
                .remove(&p.osd_id)
                .expect("checked above");
            self.end_pass(p.osd_id, &name, pass)?;
        }
        Ok(false)
    }

    /// A whole pass of `osd_id` arrived: its candidates are what it named unknown (the others
    /// are gone from the OSD, or known now); those first found over the grace ago, and still
    /// unknown, become delete tasks.
    fn end_pass(&mut self, osd_id: u32, name: &str, pass: Pass) -> Result<(), MdsError> {
        let now = self.clock.now_ms();
        let grace = self.settings.orphan_grace_ms;
        let inv = &mut self.inventories;
        inv.candidates
            .retain(|(o, h), _| *o != osd_id || pass.unknown.contains_key(h));
        let mut due: Vec<Held> = Vec::new();
        let mut due_entries = 0usize;
        for (h, chunks) in pass.unknown {
            let room = inv.candidates.len() < ORPHAN_CANDIDATES_MAX;
            match inv.candidates.get_mut(&(osd_id, h)) {
                Some(c) => {
                    c.chunks = chunks;
                    if now.saturating_sub(c.first_seen_ms) > grace
                        && due_entries < ORPHAN_DELETES_PER_PASS
                    {
                        due_entries += c.chunks.len().max(1);
                        due.push(h);
                    }
                }
                None if room => {
                    inv.candidates.insert(
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
        if due.is_empty() {
            return Ok(());
        }
        // Still unknown now? (The store may have changed since the pass's pages were judged.)
        let ids: Vec<u64> = due.iter().map(|h| h.id()).collect();
        let known = self.store.known_ids(osd_id, &ids).map_err(internal)?;
        let counter = self.store.counter(COUNTER_SEGMENT).map_err(internal)?;
        let mut batch = Batch::new();
        let (mut chunks, mut segments, mut objects) = (0u64, 0u64, 0u64);
        for h in due {
            let Some(c) = self.inventories.candidates.remove(&(osd_id, h)) else {
                continue;
            };
            if known.contains(&h.id()) || h.id() > counter {
                continue;
            }
            match h {
                Held::Segment(segment_id) => {
                    segments += 1;
                    for chunk in c.chunks {
                        chunks += 1;
                        batch.push(Mutation::PutDelete(DeleteRecord {
                            osd_id,
                            segment_id,
                            chunk,
                        }));
                    }
                }
                Held::Object(object_id) => {
                    objects += 1;
                    batch.push(Mutation::Robust(RobustMutation::PutDelete(
                        ObjectDeleteRecord {
                            osd_id,
                            object_id,
                            block: None,
                        },
                    )));
                }
            }
        }
        if batch.muts.is_empty() {
            return Ok(());
        }
        batch.commit(self.store.as_mut())?;
        self.inventories.chunks_deleted += chunks;
        self.inventories.objects_deleted += objects;
        tracing::warn!(
            osd_id,
            osd = %name,
            chunks,
            segments,
            block_files = objects,
            grace_ms = grace,
            "deleting orphans: chunks and robust block files this OSD holds that the metadata has not known for longer than the grace"
        );
        Ok(())
    }
}
