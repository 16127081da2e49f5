//! The array core's side of the journal ([`super::journal`]): journaled in-place updates, the
//! entries found on open, and their release.

use std::collections::BTreeMap;
use std::ops::Range;

use super::journal::{group_bytes, GROUP_AREA_DIVISOR};
use super::{lock, Core};
use crate::meta::{JournalEntry, Rec};
use crate::Result;

/// The chunks one journal entry saves of one stripe: (stripe, [(data position, content)]).
pub(crate) type StripeSave = (u64, Vec<(u16, Vec<u8>)>);

impl Core {
    /// Run in-place updates of `n` stripes under the journal: `saved(i)` is stripe i's number and
    /// the chunks to save (none: the stripe needs no protection), `write(range)` writes the
    /// stripes of `range` in place. Stripes go in groups whose records fit one frame; each group's
    /// entries are durable before its writes.
    pub(crate) fn journaled(
        &self,
        n: usize,
        saved: &dyn Fn(usize) -> StripeSave,
        write: &mut dyn FnMut(Range<usize>) -> Result<()>,
    ) -> Result<()> {
        let budget = group_bytes(&lock(&self.metavol).layout);
        let _gate = lock(&self.journal_gate);
        let mut start = 0;
        while start < n {
            let mut entries = Vec::new();
            let mut bytes = 0u64;
            let mut end = start;
            while end < n {
                let (stripe, chunks) = saved(end);
                let len = JournalEntry::encoded_len(chunks.len(), self.geo.chunk);
                if !chunks.is_empty() && !entries.is_empty() && bytes + len > budget {
                    break;
                }
                if !chunks.is_empty() {
                    if len > budget {
                        return Err(crate::ArrayError::Meta(format!(
                            "stripe {stripe}: its journal record of {len} bytes does not fit the metadata volume's incremental area ({} bytes); give the metadata volume more room",
                            budget * GROUP_AREA_DIVISOR
                        )));
                    }
                    bytes += len;
                    entries.push((stripe, chunks));
                }
                end += 1;
            }
            let ids = self.journal_save(entries)?;
            let r = write(start..end);
            // Done even when the writes failed: what reached the devices is durable at the next
            // flush either way, and a stale entry must never be replayed over later updates.
            lock(&self.journal).done.extend(ids);
            r?;
            start = end;
        }
        Ok(())
    }

    /// Save entries durably and keep them live until [`Core::journal_release`] (for chunks a
    /// whole operation, not one group of writes, depends on).
    pub(crate) fn journal_hold(&self, entries: Vec<StripeSave>) -> Result<Vec<u64>> {
        let budget = group_bytes(&lock(&self.metavol).layout);
        let bytes: u64 = entries
            .iter()
            .map(|(_, c)| JournalEntry::encoded_len(c.len(), self.geo.chunk))
            .sum();
        if bytes > budget {
            return Err(crate::ArrayError::Meta(format!(
                "{bytes} bytes of journal records do not fit the metadata volume's incremental area ({} bytes); give the metadata volume more room",
                budget * GROUP_AREA_DIVISOR
            )));
        }
        self.journal_save(entries)
    }

    /// Entries of [`Core::journal_hold`] no longer needed: dropped by the next metadata sync.
    pub(crate) fn journal_release(&self, ids: Vec<u64>) {
        lock(&self.journal).done.extend(ids);
    }

    /// Whether device `d` was failed in the metadata the array was opened with (not found failed
    /// while opening).
    pub(crate) fn failed_at_open(&self, d: usize) -> bool {
        lock(&self.journal).failed_at_open.contains(&(d as u16))
    }

    /// Save entries durably; their ids.
    fn journal_save(&self, entries: Vec<StripeSave>) -> Result<Vec<u64>> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let recs: Vec<JournalEntry> = {
            let mut j = lock(&self.journal);
            entries
                .into_iter()
                .map(|(stripe, chunks)| {
                    let e = JournalEntry {
                        id: j.next_id,
                        stripe,
                        chunks,
                    };
                    j.next_id += 1;
                    j.live.insert(e.id, e.clone());
                    e
                })
                .collect()
        };
        let ids = recs.iter().map(|e| e.id).collect();
        {
            let mut mi = self.meta();
            for e in recs {
                mi.record(Rec::Journal(e));
            }
        }
        self.persist()?;
        Ok(ids)
    }

    /// The chunk (stripe, pos) as a journal entry found on open saved it.
    pub(crate) fn journal_saved(&self, stripe: u64, pos: usize) -> Option<Vec<u8>> {
        lock(&self.journal).replay.get(&(stripe, pos)).cloned()
    }

    /// The stripes with entries found on open, and their saved chunks by position.
    pub(crate) fn journal_replay(&self) -> BTreeMap<u64, BTreeMap<usize, Vec<u8>>> {
        let mut out: BTreeMap<u64, BTreeMap<usize, Vec<u8>>> = BTreeMap::new();
        for ((s, p), data) in &lock(&self.journal).replay {
            out.entry(*s).or_default().insert(*p, data.clone());
        }
        out
    }

    /// Recovery is done and durable: drop the entries found on open.
    pub(crate) fn journal_forget_recovered(&self) -> Result<()> {
        {
            let mut j = lock(&self.journal);
            if j.replay_ids.is_empty() {
                return Ok(());
            }
            j.replay.clear();
            let ids = std::mem::take(&mut j.replay_ids);
            j.done.extend(ids);
        }
        self.persist()
    }
}
