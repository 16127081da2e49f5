//! OSDs' inventories at the MDS core (issue 43): `ReportInventory` pages checked and judged by
//! [`crate::orphans`] (the orphan rule), the segment counter moved past each pass's largest id,
//! orphans' delete tasks committed with one log line per batch; and, after a restore
//! (`cluster restore` leaves [`COUNTER_RESTORED`] set), no new segment or object id until every
//! OSD reported the largest id it holds (registration or an inventory's first page), so running
//! OSDs need no restart: heartbeat replies ask the OSDs that have not reported for an inventory.

use super::*;
use crate::store::COUNTER_RESTORED;
use ecstack_mds_proto::{InventoryPage, INVENTORY_PAGE_ENTRIES_MAX};

impl MdsCore {
    /// The OSDs new ids still wait for after a restore (empty: ids are free).
    fn ids_waiting_for(&self) -> Result<Vec<String>, MdsError> {
        let Some(w) = &self.inventories.ids_wait else {
            return Ok(Vec::new());
        };
        let osds = self.store.osds().map_err(internal)?;
        Ok(w.waiting_for(
            &osds,
            &self.last_seen,
            self.clock.now_ms(),
            u64::from(self.settings.params.down_after_ms),
        ))
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
        let silent = w.never_reported(&self.store.osds().map_err(internal)?);
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
        let now = self.clock.now_ms();
        let osds = self.osd_map()?;
        let Some(osd) = osds.get(&p.osd_id) else {
            self.inventories.stranger_heard(p.osd_id, now);
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
        if let Some((s, c)) = p.segments.iter().find_map(|s| {
            s.chunks
                .iter()
                .find(|&&c| c >= n)
                .map(|c| (s.segment_id, c))
        }) {
            return Err(MdsError::InvalidArgument(format!(
                "OSD {} reports chunk {c} of segment {s}; the cluster's chunks are 0..{n}",
                p.osd_id
            )));
        }
        let name = osd.name.clone();
        let counter = self.store.counter(COUNTER_SEGMENT).map_err(internal)?;
        let judged = self
            .inventories
            .page(
                self.store.as_ref(),
                p,
                counter,
                now,
                self.settings.orphan_grace_ms,
            )
            .map_err(internal)?;
        if p.page == 0 {
            let mut batch = Batch::new();
            self.counter_past(&mut batch, &name, p.max_segment_id)?;
            batch.commit(self.store.as_mut())?;
            self.inventories.ids_reported(p.osd_id);
            self.settle_ids_wait()?;
        }
        let Some(d) = judged else {
            return Ok(true);
        };
        if d.mutations.is_empty() {
            return Ok(false);
        }
        self.store.apply(&d.mutations).map_err(internal)?;
        self.inventories.deleted(&d);
        tracing::warn!(
            osd_id = p.osd_id,
            osd = %name,
            chunks = d.chunks,
            segments = d.segments,
            block_files = d.objects,
            grace_ms = self.settings.orphan_grace_ms,
            "deleting orphans: chunks and robust block files this OSD holds that the metadata has not known for longer than the grace"
        );
        Ok(false)
    }
}
