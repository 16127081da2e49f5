//! The array core: geometry, devices, metadata and codes, with the stripe-level operations every
//! update scheme, recovery and the status report share. It depends only on `format`, `meta` and
//! `io`; the schemes, `recovery`, `status` and the `Array` facade depend on it.

mod alloc;
mod journal;
mod journaled;
mod stats;
mod stripe;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use ecstack_codes::{new_code, ErasureCode};

use ecstack_device::BlockDevice;

use crate::crc::PageWrite;
use crate::format::{Geometry, MetaLayout, Superblock, SB_SLOT};
use crate::io::{Devs, IoCounters};
use crate::meta::{MetaVolume, Rec};
use crate::{ArrayError, Result};

pub(crate) use alloc::{Alloc, MetaInner};
pub(crate) use journal::Journal;
pub(crate) use stats::Stats;
pub use stats::{CommitReport, RebuildReport};

/// Everything the update schemes work with.
pub(crate) struct Core {
    pub(crate) geo: Geometry,
    pub(crate) code: Box<dyn ErasureCode>,
    log_codes: Vec<OnceLock<Box<dyn ErasureCode>>>,
    pub(crate) devs: Devs,
    pub(crate) meta: Mutex<MetaInner>,
    pub(crate) metavol: Mutex<MetaVolume>,
    pub(crate) sb: Mutex<Superblock>,
    pub(crate) stats: Stats,
    /// Scheme pl: a decoded parity chunk holds its logged deltas, so it is not written back as a
    /// repair.
    pub(crate) pl: bool,
    pub(crate) trim_on_commit: AtomicBool,
    /// md/pl: journal every in-place update of a written stripe ([`crate::OpenOptions::journal_updates`]).
    pub(crate) journal_updates: AtomicBool,
    /// The journal of degraded in-place updates (lock order: `metavol`, then `journal`, then
    /// `meta`).
    pub(crate) journal: Mutex<Journal>,
    /// Held by one journaled update at a time, from saving its entries to its last write, so the
    /// live entries stay within one group (they must fit the incremental area after a checkpoint).
    pub(crate) journal_gate: Mutex<()>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Core({:?})", self.geo)
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn lock_sb(core: &Core) -> MutexGuard<'_, Superblock> {
    lock(&core.sb)
}

/// Record a changed superblock: the next generation, written over the older of the two copies
/// and flushed (a torn write leaves the other copy, which the open picks).
pub(crate) fn store_superblock(sb: &mut Superblock, meta: &dyn BlockDevice) -> Result<()> {
    let mut next = sb.clone();
    next.generation += 1;
    let raw = next.encode()?;
    let off = if next.generation.is_multiple_of(2) {
        SB_SLOT
    } else {
        0
    };
    meta.write_at(&raw, off)?;
    meta.flush()?;
    *sb = next;
    Ok(())
}

/// The body of the next full checkpoint, and (format version 6) the checksum pages to write
/// before it (taken under the metadata lock, so they and the body describe one state).
fn checkpoint_image(mi: &MetaInner, mv: &MetaVolume) -> (Vec<u8>, Vec<PageWrite>) {
    match mv.paged {
        true => {
            let pages = mi.state.crcs.0.take_dirty_pages(mv.epoch + 1, mv.salt);
            (mi.state.encode_paged(), pages)
        }
        false => (mi.state.encode(), Vec::new()),
    }
}

/// The queued checksum changes of `crcs` as records (runs of consecutive slots).
fn crc_records(crcs: &crate::crc::ChunkCrcs) -> Vec<Rec> {
    crcs.take_changes()
        .into_iter()
        .map(|(dev, slot, run)| match run[0] {
            Some(_) => Rec::ChunkCrcs {
                dev,
                slot,
                crcs: run
                    .into_iter()
                    .map(|c| c.expect("a run of set checksums"))
                    .collect(),
            },
            None => Rec::ChunkCrcForget {
                dev,
                slot,
                count: run.len() as u32,
            },
        })
        .collect()
}

impl Core {
    /// Assemble a core from an opened array's parts.
    pub(crate) fn new(
        sb: &Superblock,
        code: Box<dyn ErasureCode>,
        devs: Devs,
        meta: MetaInner,
        mut metavol: MetaVolume,
    ) -> Core {
        let g = sb.geometry.clone();
        let journal = Journal::recovered(std::mem::take(&mut metavol.journal));
        devs.set_crcs(std::sync::Arc::clone(&meta.state.crcs.0));
        Core {
            journal: Mutex::new(journal),
            journal_gate: Mutex::new(()),
            log_codes: (0..=g.n).map(|_| OnceLock::new()).collect(),
            code,
            devs,
            meta: Mutex::new(meta),
            metavol: Mutex::new(metavol),
            sb: Mutex::new(sb.clone()),
            stats: Stats::default(),
            pl: sb.scheme == crate::format::SchemeKind::Pl,
            trim_on_commit: AtomicBool::new(sb.trim_on_commit),
            journal_updates: AtomicBool::new(false),
            geo: g,
        }
    }

    /// Whether md/pl journal every in-place update of a written stripe, degraded or not.
    pub(crate) fn journal_all(&self) -> bool {
        self.journal_updates.load(Relaxed)
    }

    pub(crate) fn meta(&self) -> MutexGuard<'_, MetaInner> {
        lock(&self.meta)
    }

    /// The k'-of-(k'+m) code of a log stripe with k' data chunks.
    pub(crate) fn log_code(&self, kp: usize) -> Result<&dyn ErasureCode> {
        let cell = self
            .log_codes
            .get(kp)
            .ok_or_else(|| ArrayError::Meta(format!("log stripe of {kp} chunks")))?;
        if cell.get().is_none() {
            let c = new_code(self.code.kind(), kp, self.geo.m)?;
            let _ = cell.set(c);
        }
        Ok(cell.get().expect("set above").as_ref())
    }

    pub(crate) fn main_counters(&self) -> IoCounters {
        let mut c = IoCounters::default();
        for i in 0..self.geo.n {
            c.add(&self.devs.meters[i].get());
        }
        c
    }

    /// Make everything done so far durable: flush the devices, then append the pending metadata
    /// records (or a full checkpoint when the incremental area is full) and flush the volume.
    pub(crate) fn persist(&self) -> Result<()> {
        let mut mv = lock(&self.metavol);
        // Journal entries whose writes returned before the flush are dead after it.
        let done = lock(&self.journal).take_done();
        self.devs.flush_all();
        let (recs, cp) = {
            let mut mi = self.meta();
            for id in done {
                mi.record(Rec::JournalDone { id });
            }
            for d in self.devs.failed_list() {
                if !mi.state.failed.contains(&(d as u16)) {
                    mi.record(Rec::DeviceFailed { dev: d as u16 });
                }
            }
            let mut recs = std::mem::take(&mut mi.pending);
            // The checksums of the chunks written since the last sync, in the frame with the
            // records that make those chunks live.
            recs.extend(crc_records(&mi.state.crcs.0));
            if recs.is_empty() || mv.fits_records(&recs) {
                (recs, None)
            } else {
                (Vec::new(), Some(checkpoint_image(&mi, &mv)))
            }
        };
        let t = Instant::now();
        if let Some((body, pages)) = cp {
            self.write_checkpoint(&mut mv, &body, &pages)?;
            self.append_live_journal(&mut mv)?;
        } else if !recs.is_empty() {
            mv.append(&recs)?;
        }
        self.stats
            .meta_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
        Ok(())
    }

    /// Write a full checkpoint of the current state (after flushing the devices).
    pub(crate) fn checkpoint(&self) -> Result<()> {
        let mut mv = lock(&self.metavol);
        lock(&self.journal).take_done();
        self.devs.flush_all();
        let body = {
            let mut mi = self.meta();
            for d in self.devs.failed_list() {
                if !mi.state.failed.contains(&(d as u16)) {
                    mi.record(Rec::DeviceFailed { dev: d as u16 });
                }
            }
            mi.pending.clear();
            // The checkpoint holds the whole table (inline, or its changed pages).
            mi.state.crcs.0.clear_changes();
            checkpoint_image(&mi, &mv)
        };
        self.write_checkpoint(&mut mv, &body.0, &body.1)?;
        self.append_live_journal(&mut mv)
    }

    /// Write a full checkpoint: first the checksum pages it names (flushed), then the
    /// checkpoint; when its areas grow, the superblock records the new layout (lock order: the
    /// metadata volume, then the superblock). If it fails, the pages stay dirty and the page map
    /// names the old copies again.
    fn write_checkpoint(
        &self,
        mv: &mut MetaVolume,
        body: &[u8],
        pages: &[PageWrite],
    ) -> Result<()> {
        let r = mv.write_crc_pages(pages).and_then(|()| {
            mv.write_checkpoint_growing(body, &mut |dev: &dyn BlockDevice, layout: &MetaLayout| {
                let mut sb = lock_sb(self);
                let old = std::mem::replace(&mut sb.layout, layout.clone());
                store_superblock(&mut sb, dev).inspect_err(|_| sb.layout = old)
            })
        });
        if r.is_err() {
            self.meta().state.crcs.0.undo_pages(pages);
        }
        r
    }

    /// After a full checkpoint (which does not hold the journal): the live journal entries again,
    /// in frames of at most a group each.
    fn append_live_journal(&self, mv: &mut MetaVolume) -> Result<()> {
        let live = lock(&self.journal).live_records();
        let limit = journal::group_bytes(&mv.layout);
        let mut start = 0;
        while start < live.len() {
            let mut end = start + 1;
            while end < live.len() && crate::meta::frame_len(&live[start..=end]) <= limit {
                end += 1;
            }
            mv.append(&live[start..end])?;
            start = end;
        }
        Ok(())
    }

    pub(crate) fn begin_commit(&self) -> Result<()> {
        self.meta().record(Rec::CommitBegin);
        self.persist()
    }

    /// End a parity commit: durable CommitDone, then hand the freed slots back (and TRIM them).
    pub(crate) fn finish_commit(&self, frees: Vec<(usize, u64)>) -> Result<()> {
        {
            let mut mi = self.meta();
            mi.record(Rec::CommitDone);
            // Postcondition of a parity commit: no log stripe, pl log entry or latest version is
            // left, and the log devices are empty.
            let st = &mi.state;
            assert!(
                st.logs.is_empty()
                    && st.pl_logs.is_empty()
                    && st.log_next == 0
                    && !st.commit_in_progress,
                "logs left after a parity commit"
            );
            assert!(
                st.changed().all(|(_, ds)| !ds.pending()),
                "latest versions left after a parity commit"
            );
        }
        self.persist()?;
        {
            let mut mi = self.meta();
            for &(d, s) in &frees {
                mi.alloc.put(d, s);
            }
        }
        // The log devices hold nothing live now: a log chunk that failed its checksum (a flip on
        // the way or on the device) is no longer bad, its slot is rewritten before it is read.
        if let Some(crcs) = self.devs.crcs() {
            for d in self.geo.n..self.devs.len() {
                crcs.clear_bad_of(d);
            }
        }
        if self.trim_on_commit.load(Relaxed) {
            for &(d, s) in &frees {
                if !self.devs.is_failed(d) {
                    let _ = self.devs.get(d).discard(self.geo.off(s), self.geo.chunk);
                }
            }
        }
        Ok(())
    }
}
