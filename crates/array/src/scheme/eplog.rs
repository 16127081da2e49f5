//! `eplog`: elastic parity logging (EPLOG §2.3, §3.2–§3.4).
//!
//! * A new write that covers a whole data stripe goes to the main array with its parity.
//! * Every other write (new partial-stripe writes and updates) is written **out of place**: each new
//!   data chunk goes to a free chunk slot of the device that holds its position (no-overwrite; the
//!   old version stays until the next parity commit). The new chunks of a request are grouped into log
//!   stripes holding at most one chunk per device; a log stripe of k' chunks is encoded k'-of-(k'+m)
//!   and its m log chunks are appended to the m log devices. No pre-reads.
//! * Parity commit (Algorithm 1): for every data stripe with updated chunks, read the latest versions
//!   (decoding any lost one from its log stripe), recompute the parity, write it in place, then free
//!   the old versions and all log chunks.
//! * Degraded reads: a lost chunk updated since the last commit is decoded from its log stripe,
//!   otherwise from its data stripe (committed versions + parity).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use super::md::by_stripe;
use super::stripe_buffer::StripeBuffer;
use super::{BatchStats, ChunkRead, ChunkWrite, CommitReport, UpdateScheme, WriteOutcome};
use crate::core::{Alloc, Core, MetaInner};
use crate::format::Geometry;
use crate::io::{Rd, Wr};
use crate::meta::{DataStripe, LogStripe, Member, Rec};
use crate::{ArrayError, Result, SchemeKind};

pub struct Eplog {
    buffer: Mutex<DeviceBuffers>,
    /// Stripe buffer (§3.1): concurrent requests share log stripes (on by default).
    stripes: StripeBuffer<Vec<OwnedWrite>>,
    stripes_on: AtomicBool,
}

impl Default for Eplog {
    fn default() -> Self {
        Eplog {
            buffer: Mutex::default(),
            stripes: StripeBuffer::default(),
            stripes_on: AtomicBool::new(true),
        }
    }
}

/// A chunk write copied into the stripe buffer.
struct OwnedWrite {
    stripe: u64,
    pos: usize,
    data: Vec<u8>,
}

/// Device buffers (§3.1, optional): updated data chunks wait in memory, one FIFO per device, until
/// every device has one (then they leave as a full-width log stripe, k' = n), until the buffers hold
/// more than `cap` chunks per device, or until a flush / parity commit drains them. A chunk written
/// again while buffered is replaced in memory (one SSD write instead of two).
#[derive(Default)]
struct DeviceBuffers {
    cap: usize,
    data: HashMap<(u64, usize), Vec<u8>>,
    queues: Vec<VecDeque<(u64, usize)>>,
}

/// Data stripes a parity commit reads, re-encodes and writes per round.
const COMMIT_BATCH_STRIPES: usize = 256;

/// Most bytes of lost chunks a degraded commit decodes ahead, in log order.
const EARLY_DECODE_BYTES: u64 = 256 << 20;

/// Log stripes decoded per round of the log-order pass.
const EARLY_DECODE_GROUP: usize = 1024;

/// Where the current version of a data chunk lives.
#[derive(Clone, Copy)]
enum Loc {
    Zero,
    At { dev: usize, slot: u64 },
}

/// Where one write's chunks go, decided under the metadata lock (`Eplog::plan_write`).
struct WritePlan<'a, 'w> {
    /// New whole data stripes: written in place with their parity.
    full_new: Vec<(u64, Vec<&'w [u8]>)>,
    /// Every other chunk write: out of place, in a log stripe.
    logged: Vec<&'a ChunkWrite<'w>>,
    /// The slot of each logged chunk on its position's device.
    slots: Vec<u64>,
    /// The log stripes, as indexes into `logged` (at most one per device).
    lgroups: Vec<Vec<usize>>,
    /// The first log slot and the first log-stripe id reserved for them.
    base: u64,
    id0: u64,
}

/// A commit batch's chunks that could not be read (`Eplog::recover_lost`).
struct LostChunks<'l> {
    /// (stripe index in the batch, position).
    lost: Vec<(usize, usize)>,
    logs: &'l HashMap<u64, LogStripe>,
    /// The commit reruns one a crash interrupted.
    rerun: bool,
}

impl Eplog {
    #[allow(clippy::type_complexity)]
    fn locate(
        core: &Core,
        chunk: Option<(Option<u64>, Option<(u64, u64)>)>,
        s: u64,
        pos: usize,
    ) -> Loc {
        let dev = core.geo.dev_of(s, pos);
        match chunk {
            None => Loc::Zero,
            Some((committed, latest)) => match (latest, committed) {
                (Some((slot, _)), _) => Loc::At { dev, slot },
                (None, Some(slot)) => Loc::At { dev, slot },
                (None, None) => Loc::Zero,
            },
        }
    }

    /// Which chunks of a log stripe to read (the first `k'` available of its members, then of its
    /// log chunks): (shard index, device, offset), and the shards left out (erased).
    #[allow(clippy::type_complexity)]
    fn log_reads(core: &Core, ls: &LogStripe) -> Result<(Vec<(usize, usize, u64)>, Vec<usize>)> {
        let g = &core.geo;
        let kp = ls.members.len();
        let mut reads = Vec::new();
        let mut erased = Vec::new();
        for (j, mem) in ls.members.iter().enumerate() {
            if reads.len() < kp && core.devs.usable(mem.dev as usize, mem.slot) {
                reads.push((j, mem.dev as usize, g.off(mem.slot)));
            } else {
                erased.push(j);
            }
        }
        for i in 0..g.m {
            if reads.len() < kp && core.devs.usable(g.log_dev(i), ls.off) {
                reads.push((kp + i, g.log_dev(i), g.off(ls.off)));
            } else {
                erased.push(kp + i);
            }
        }
        if reads.len() < kp {
            return Err(ArrayError::DataLoss(format!(
                "log stripe at log slot {}: only {} of the {kp} chunks needed are available",
                ls.off,
                reads.len()
            )));
        }
        Ok((reads, erased))
    }

    /// Decode member `idx` of a log stripe from the other members and the log chunks.
    pub(crate) fn decode_from_log(core: &Core, ls: &LogStripe, idx: usize) -> Result<Vec<u8>> {
        Ok(Self::decode_many_from_log(core, &[(ls, idx)])?.remove(0))
    }

    /// Decode several log-stripe members at once. The reads of every log stripe involved go out as
    /// one batch, which the io layer sorts and merges per device, so the log devices are read in log
    /// order, in long runs where the log stripes are consecutive (§3.4's batching applied to the
    /// log). A device that fails during the batch is marked failed and the batch is planned again
    /// without it.
    pub(crate) fn decode_many_from_log(
        core: &Core,
        want: &[(&LogStripe, usize)],
    ) -> Result<Vec<Vec<u8>>> {
        let g = &core.geo;
        let (m, c) = (g.m, g.chunk as usize);
        // The distinct log stripes (by log slot) and which wanted member each item is.
        let mut uniq: Vec<&LogStripe> = Vec::new();
        let mut at: HashMap<u64, usize> = HashMap::new();
        let item: Vec<(usize, usize)> = want
            .iter()
            .map(|&(ls, idx)| {
                let u = *at.entry(ls.off).or_insert_with(|| {
                    uniq.push(ls);
                    uniq.len() - 1
                });
                (u, idx)
            })
            .collect();
        let mut reread = false;
        for _ in 0..=2 * (g.n + m) + 1 {
            let plans = match uniq
                .iter()
                .map(|ls| Self::log_reads(core, ls))
                .collect::<Result<Vec<_>>>()
            {
                // Too few chunks left: read the ones that failed their checksum once more (a flip
                // on the way, not on the device, reads right the second time).
                Err(_) if !reread && Self::unmark_bad(core, &uniq) => {
                    reread = true;
                    continue;
                }
                r => r?,
            };
            let mut shards: Vec<Vec<Vec<u8>>> = uniq
                .iter()
                .map(|ls| vec![vec![0u8; c]; ls.members.len() + m])
                .collect();
            let ok = {
                let mut ops: Vec<Rd> = Vec::new();
                for ((reads, _), sh) in plans.iter().zip(shards.iter_mut()) {
                    let mut bufs: Vec<Option<&mut Vec<u8>>> = sh.iter_mut().map(Some).collect();
                    for &(j, d, off) in reads {
                        ops.push(Rd::new(
                            d,
                            off,
                            bufs[j].take().expect("once").as_mut_slice(),
                        ));
                    }
                }
                core.devs.read(&mut ops);
                ops.iter().all(|o| o.ok)
            };
            if !ok {
                continue;
            }
            for (u, ((_, erased), sh)) in plans.iter().zip(shards.iter_mut()).enumerate() {
                if item.iter().any(|&(w, idx)| w == u && erased.contains(&idx)) {
                    let code = core.log_code(uniq[u].members.len())?;
                    let mut refs: Vec<&mut [u8]> =
                        sh.iter_mut().map(|v| v.as_mut_slice()).collect();
                    code.reconstruct_in_place(&mut refs, erased)?;
                    Self::repair_log_stripe(core, uniq[u], erased, sh);
                }
            }
            return Ok(item
                .iter()
                .map(|&(u, idx)| shards[u][idx].clone())
                .collect());
        }
        Err(ArrayError::DataLoss(
            "devices kept failing while decoding a log stripe".into(),
        ))
    }

    /// Clear the bad marks of the members and log chunks of `lss`; true if there were any.
    fn unmark_bad(core: &Core, lss: &[&LogStripe]) -> bool {
        let Some(c) = core.devs.crcs() else {
            return false;
        };
        let mut any = false;
        for ls in lss {
            for mem in &ls.members {
                any |= c.unmark_bad(mem.dev as usize, mem.slot);
            }
            for i in 0..core.geo.m {
                any |= c.unmark_bad(core.geo.log_dev(i), ls.off);
            }
        }
        any
    }

    /// Write back the members and log chunks of a decoded log stripe that failed their checksum.
    fn repair_log_stripe(core: &Core, ls: &LogStripe, erased: &[usize], shards: &[Vec<u8>]) {
        let g = &core.geo;
        let kp = ls.members.len();
        let mut ops = Vec::new();
        for &j in erased {
            let (d, slot) = match j < kp {
                true => (ls.members[j].dev as usize, ls.members[j].slot),
                false => (g.log_dev(j - kp), ls.off),
            };
            if core.devs.is_bad(d, slot) {
                ops.push(Wr::new(d, g.off(slot), &shards[j]));
            }
        }
        core.write_repairs(&mut ops);
    }

    /// Decode the committed version of data chunk `pos` of stripe `s` from its data stripe.
    fn decode_committed(
        core: &Core,
        s: u64,
        ds: &DataStripe,
        pos: usize,
        rerun: bool,
    ) -> Result<Vec<u8>> {
        let g = &core.geo;
        if !ds.parity {
            return Err(ArrayError::DataLoss(format!(
                "stripe {s}: chunk {pos} is lost and the stripe has no parity yet"
            )));
        }
        if rerun && ds.pending() {
            // The interrupted commit saved it before overwriting the parity.
            if let Some(saved) = core.journal_saved(s, pos) {
                return Ok(saved);
            }
            // Not saved, but its device was failed in the metadata the interrupted commit left:
            // the commit saw it failed (or saved what it had read before it failed) and would have
            // saved the chunk before overwriting this stripe's parity, so the parity is untouched.
            if core.failed_at_open(g.dev_of(s, pos)) {
                return Self::decode_through_parity(core, s, &ds.committed, pos);
            }
            // Its device was alive at open and failed since (a latent sector error the rerun
            // met): the interrupted commit may have read the chunk and rewritten this stripe's
            // parity without saving it, or may have met the same error and stopped before the
            // parity (seeds 1030424, 1040238). A decode that reproduces the chunk's recorded
            // checksum tells that the parity is whole, old or new.
            if let Some(b) = Self::decode_checked(core, s, ds, pos) {
                return Ok(b);
            }
            return Err(ArrayError::DataLoss(format!(
                "stripe {s}: chunk {pos} is lost and an interrupted parity commit may have torn the parity"
            )));
        }
        Self::decode_through_parity(core, s, &ds.committed, pos)
    }

    /// Committed-only chunk `pos` of stripe `s` decoded through a parity that an interrupted commit
    /// may have rewritten: with the committed versions (the parity untouched) or the latest ones
    /// (the parity rewritten whole), whichever reproduces the chunk's recorded checksum; None if
    /// neither does or no checksum is known (a torn parity).
    fn decode_checked(core: &Core, s: u64, ds: &DataStripe, pos: usize) -> Option<Vec<u8>> {
        let g = &core.geo;
        let slot = ds.committed[pos]?;
        let want = core
            .devs
            .crcs()
            .filter(|c| c.enabled())?
            .get(g.dev_of(s, pos), slot)?;
        let latest: Vec<Option<u64>> = (0..g.k)
            .map(|q| ds.latest[q].map(|(sl, _)| sl).or(ds.committed[q]))
            .collect();
        let checked = |layout: &[Option<u64>]| {
            let mut slots = layout.to_vec();
            slots.extend((0..g.m).map(|_| Some(s)));
            // No repairs: with the wrong layout the other decoded chunks are wrong too.
            let mut sh = core
                .decode_stripe_repairing(s, &slots, &[], &|_, _| Ok(()), false)
                .ok()?;
            Some(std::mem::take(&mut sh[pos])).filter(|b| crc32c::crc32c(b) == want)
        };
        checked(&ds.committed).or_else(|| checked(&latest))
    }

    /// Decode data chunk `pos` of stripe `s` from the data chunks at `data_slots` and the parity.
    fn decode_through_parity(
        core: &Core,
        s: u64,
        data_slots: &[Option<u64>],
        pos: usize,
    ) -> Result<Vec<u8>> {
        let mut slots: Vec<Option<u64>> = data_slots.to_vec();
        slots.extend((0..core.geo.m).map(|_| Some(s)));
        let mut sh = core.decode_stripe(s, &slots, &[], &|_, _| Ok(()))?;
        Ok(std::mem::take(&mut sh[pos]))
    }

    /// A device failed during a parity commit, after the commit had read its chunks of the stripes
    /// `done` and rewritten their parity from them. Make that parity durable, then save the
    /// committed-only chunks of those stripes on the devices newly failed (decoded from the latest
    /// versions and the new parity): a rerun after a crash finds them in the journal, and a lost
    /// chunk it does not find there sits in a stripe whose parity the commit never touched.
    /// Returns the ids to release when the commit is done.
    fn save_after_failure(
        core: &Core,
        done: &[(u64, DataStripe)],
        newly: &[usize],
    ) -> Result<Vec<u64>> {
        let g = &core.geo;
        core.persist()?;
        let mut entries = Vec::new();
        for (s, ds) in done {
            let mut chunks = Vec::new();
            for p in 0..g.k {
                if ds.latest[p].is_some() || ds.committed[p].is_none() {
                    continue;
                }
                if newly.contains(&g.dev_of(*s, p)) {
                    let latest: Vec<Option<u64>> = (0..g.k)
                        .map(|q| ds.latest[q].map(|(slot, _)| slot).or(ds.committed[q]))
                        .collect();
                    chunks.push((p as u16, Self::decode_through_parity(core, *s, &latest, p)?));
                }
            }
            if !chunks.is_empty() {
                entries.push((*s, chunks));
            }
        }
        core.journal_hold(entries)
    }

    /// A device failed while this batch was being read (a fail-stop or a latent sector error found
    /// by `read_latest` or by a decode), after some of its chunks had been read. The committed-only
    /// ones among them (no latest version, so no log stripe to decode them from) would be lost
    /// with the device if a crash tore the parity the batch is about to write: add them to the
    /// chunks the journal saves before that write (`saved`, per stripe), from the data in hand. A
    /// rerun after a crash then finds every committed-only chunk of a device failed in its
    /// metadata either in the journal or in a stripe whose parity was never touched
    /// (`decode_committed`). Seed 732813: a latent error failed device 4 in the middle of a
    /// rebuild's parity commit, and a power cut tore the parity of stripe 7, whose chunk on
    /// device 4 had been read before the error.
    fn save_read_before_failure(
        g: &Geometry,
        batch: &[(u64, DataStripe)],
        newly: &[usize],
        saved: &mut [Vec<usize>],
    ) {
        for ((s, ds), sv) in batch.iter().zip(saved.iter_mut()) {
            for p in 0..g.k {
                let committed_only = ds.latest[p].is_none() && ds.committed[p].is_some();
                if committed_only && newly.contains(&g.dev_of(*s, p)) && !sv.contains(&p) {
                    sv.push(p);
                }
            }
        }
    }

    /// The full current content of data chunk (s, pos) when its device cannot serve it.
    fn decode_current(core: &Core, s: u64, pos: usize) -> Result<Vec<u8>> {
        let (ds, ls, rerun) = {
            let mi = core.meta();
            let ds = mi.state.data_stripe(s);
            let ls = ds
                .as_ref()
                .and_then(|d| d.latest[pos])
                .and_then(|(_, id)| mi.state.logs.get(&id).cloned());
            (ds, ls, mi.state.commit_in_progress)
        };
        let c = core.geo.chunk as usize;
        let Some(ds) = ds else {
            return Ok(vec![0u8; c]);
        };
        match (ds.latest[pos], ds.committed[pos]) {
            (Some((slot, id)), _) => {
                let ls = ls.ok_or_else(|| {
                    ArrayError::Meta(format!(
                        "log stripe {id} of stripe {s} chunk {pos} is missing"
                    ))
                })?;
                let idx = ls
                    .members
                    .iter()
                    .position(|m| m.stripe == s && m.pos as usize == pos && m.slot == slot)
                    .ok_or_else(|| {
                        ArrayError::Meta(format!(
                            "log stripe {id} does not list stripe {s} chunk {pos}"
                        ))
                    })?;
                Self::decode_from_log(core, &ls, idx)
            }
            (None, Some(_)) => Self::decode_committed(core, s, &ds, pos, rerun),
            (None, None) => Ok(vec![0u8; c]),
        }
    }
}

impl Eplog {
    fn kind_now(&self) -> SchemeKind {
        SchemeKind::Eplog
    }

    fn read_now(&self, core: &Core, reqs: &mut [ChunkRead<'_>]) -> Result<()> {
        if let [r] = reqs {
            return Self::read_one(core, r);
        }
        let g = &core.geo;
        let locs: Vec<Loc> = {
            let mi = core.meta();
            reqs.iter()
                .map(|r| Self::locate(core, mi.state.data_chunk(r.stripe, r.pos), r.stripe, r.pos))
                .collect()
        };
        let mut need = Vec::new();
        {
            let mut ops = Vec::new();
            let mut idx = Vec::new();
            for (i, (r, loc)) in reqs.iter_mut().zip(&locs).enumerate() {
                match *loc {
                    Loc::Zero => r.buf.fill(0),
                    Loc::At { dev, slot } => {
                        if !core.devs.usable(dev, slot) {
                            need.push(i);
                        } else {
                            idx.push(i);
                            ops.push(Rd::new(dev, g.off(slot) + r.off as u64, &mut *r.buf));
                        }
                    }
                }
            }
            core.devs.read(&mut ops);
            for (o, i) in ops.iter().zip(idx) {
                if !o.ok {
                    need.push(i);
                }
            }
        }
        for i in need {
            let r = &mut reqs[i];
            let full = Self::decode_current(core, r.stripe, r.pos)?;
            r.buf.copy_from_slice(&full[r.off..r.off + r.buf.len()]);
        }
        Ok(())
    }

    /// [`Eplog::read_now`] of one chunk read (the small-read fast path, e.g. a key-value GET):
    /// the same steps (locate under the metadata lock, one verified device read, decode from the
    /// stripe or log stripe when the chunk's device is failed or the chunk fails its checksum)
    /// without the per-call vectors of the general path.
    fn read_one(core: &Core, r: &mut ChunkRead<'_>) -> Result<()> {
        let loc = {
            let mi = core.meta();
            Self::locate(core, mi.state.data_chunk(r.stripe, r.pos), r.stripe, r.pos)
        };
        match loc {
            Loc::Zero => {
                r.buf.fill(0);
                return Ok(());
            }
            Loc::At { dev, slot } if core.devs.usable(dev, slot) => {
                let mut op = [Rd::new(dev, core.geo.off(slot) + r.off as u64, &mut *r.buf)];
                core.devs.read(&mut op);
                if op[0].ok {
                    return Ok(());
                }
            }
            Loc::At { .. } => {}
        }
        let full = Self::decode_current(core, r.stripe, r.pos)?;
        r.buf.copy_from_slice(&full[r.off..r.off + r.buf.len()]);
        Ok(())
    }

    fn write_now(&self, core: &Core, ws: &[ChunkWrite<'_>]) -> Result<WriteOutcome> {
        core.check_tolerance()?;
        let groups = by_stripe(ws);
        let Some(plan) = Self::plan_write(core, &groups) else {
            return Ok(WriteOutcome::NeedCommit);
        };
        let (parities, logchunks) = Self::encode_write(core, &plan)?;
        Self::issue_write(core, &plan, &parities, &logchunks);
        core.check_tolerance()?;
        Self::record_write(core, &plan);
        Ok(WriteOutcome::Done)
    }

    /// Decide, under the metadata lock, where a write's chunks go: new whole stripes in place,
    /// every other chunk to a free slot of its device, grouped in log stripes whose log slots are
    /// reserved. `None` if slots or log space ran out (a parity commit must run first); nothing is
    /// taken then.
    fn plan_write<'a, 'w>(
        core: &Core,
        groups: &BTreeMap<u64, Vec<&'a ChunkWrite<'w>>>,
    ) -> Option<WritePlan<'a, 'w>> {
        let g = &core.geo;
        let mut mi = core.meta();
        let (full_new, logged) = Self::split_new_stripes(&mi, g.k, groups);
        let (slots, taken) = Self::take_slots(g, &mut mi, &logged)?;
        let lgroups = Self::group_log_stripes(g, &logged);
        if mi.state.log_next + lgroups.len() as u64 > g.log_slots {
            for (d, sl) in taken {
                mi.alloc.put(d, sl);
            }
            return None;
        }
        let base = mi.state.log_next;
        let id0 = mi.state.next_log_id;
        mi.state.log_next += lgroups.len() as u64;
        mi.state.next_log_id += lgroups.len() as u64;
        Some(WritePlan {
            full_new,
            logged,
            slots,
            lgroups,
            base,
            id0,
        })
    }

    /// New whole data stripes (written in place with parity) and the other chunk writes (logged).
    #[allow(clippy::type_complexity)]
    fn split_new_stripes<'a, 'w>(
        mi: &MetaInner,
        k: usize,
        groups: &BTreeMap<u64, Vec<&'a ChunkWrite<'w>>>,
    ) -> (Vec<(u64, Vec<&'w [u8]>)>, Vec<&'a ChunkWrite<'w>>) {
        let mut full_new = Vec::new();
        let mut logged = Vec::new();
        for (&s, wl) in groups {
            if wl.len() == k && !mi.state.is_written(s) {
                let mut data: Vec<&[u8]> = vec![&[]; k];
                for w in wl {
                    data[w.pos] = w.data;
                }
                full_new.push((s, data));
            } else {
                logged.extend(wl.iter().copied());
            }
        }
        (full_new, logged)
    }

    /// An out-of-place slot on each logged chunk's device (a chunk never written yet uses its home
    /// slot, which nothing else references): the slots, and those taken from the allocator.
    /// `None` (everything given back) if a device has no free slot.
    #[allow(clippy::type_complexity)]
    fn take_slots(
        g: &Geometry,
        mi: &mut MetaInner,
        logged: &[&ChunkWrite<'_>],
    ) -> Option<(Vec<u64>, Vec<(usize, u64)>)> {
        let mut slots = Vec::with_capacity(logged.len());
        let mut taken: Vec<(usize, u64)> = Vec::new();
        for w in logged {
            let d = g.dev_of(w.stripe, w.pos);
            let home = match mi.state.data_chunk(w.stripe, w.pos) {
                None => true,
                Some((committed, latest)) => committed.is_none() && latest.is_none(),
            };
            if home {
                slots.push(w.stripe);
            } else if let Some(sl) = mi.alloc.take(d) {
                slots.push(sl);
                taken.push((d, sl));
            } else {
                for (d, sl) in taken {
                    mi.alloc.put(d, sl);
                }
                return None;
            }
        }
        // A slot just taken holds no version anything refers to (the allocator and the metadata
        // agree).
        debug_assert!(
            taken
                .iter()
                .all(|&(d, sl)| !Alloc::referenced(g, &mi.state, d, sl)),
            "write_now: a slot taken from the allocator is referenced: {taken:?}"
        );
        Some((slots, taken))
    }

    /// Log stripes of the logged chunks: at most one chunk per device, first fit in request order
    /// (indexes into `logged`).
    fn group_log_stripes(g: &Geometry, logged: &[&ChunkWrite<'_>]) -> Vec<Vec<usize>> {
        let mut used: Vec<Vec<bool>> = Vec::new();
        let mut lgroups: Vec<Vec<usize>> = Vec::new();
        for (i, w) in logged.iter().enumerate() {
            let d = g.dev_of(w.stripe, w.pos);
            match used.iter().position(|u| !u[d]) {
                Some(j) => {
                    used[j][d] = true;
                    lgroups[j].push(i);
                }
                None => {
                    let mut u = vec![false; g.n];
                    u[d] = true;
                    used.push(u);
                    lgroups.push(vec![i]);
                }
            }
        }
        // Pair of `check_log_stripe` on the read path: one member per device, so k' <= n.
        for grp in &lgroups {
            assert!(
                !grp.is_empty() && grp.len() <= g.n,
                "log stripe of {} chunks",
                grp.len()
            );
            let mut devs: Vec<usize> = grp
                .iter()
                .map(|&i| g.dev_of(logged[i].stripe, logged[i].pos))
                .collect();
            devs.sort_unstable();
            devs.dedup();
            assert_eq!(devs.len(), grp.len(), "a log stripe repeats a device");
        }
        lgroups
    }

    /// Encode the parity of the new whole stripes and the log chunks of the log stripes.
    #[allow(clippy::type_complexity)]
    fn encode_write(
        core: &Core,
        plan: &WritePlan<'_, '_>,
    ) -> Result<(Vec<Vec<Vec<u8>>>, Vec<Vec<Vec<u8>>>)> {
        let g = &core.geo;
        let mut parities = Vec::with_capacity(plan.full_new.len());
        for (_, data) in &plan.full_new {
            parities.push(core.encode_parity(data)?);
        }
        let mut logchunks = Vec::with_capacity(plan.lgroups.len());
        for grp in &plan.lgroups {
            let code = core.log_code(grp.len())?;
            let data: Vec<&[u8]> = grp.iter().map(|&i| plan.logged[i].data).collect();
            let mut out = vec![vec![0u8; g.chunk as usize]; g.m];
            let mut refs: Vec<&mut [u8]> = out.iter_mut().map(|v| v.as_mut_slice()).collect();
            code.encode(&data, &mut refs)?;
            logchunks.push(out);
        }
        Ok((parities, logchunks))
    }

    /// One batch of device writes: new whole stripes, logged chunks in their slots, log chunks.
    fn issue_write(
        core: &Core,
        plan: &WritePlan<'_, '_>,
        parities: &[Vec<Vec<u8>>],
        logchunks: &[Vec<Vec<u8>>],
    ) {
        let g = &core.geo;
        let mut ops = Vec::new();
        for ((s, data), par) in plan.full_new.iter().zip(parities) {
            for (p, b) in data
                .iter()
                .copied()
                .chain(par.iter().map(|v| v.as_slice()))
                .enumerate()
            {
                ops.push(Wr::new(g.dev_of(*s, p), g.off(*s), b));
            }
        }
        for (w, &slot) in plan.logged.iter().zip(&plan.slots) {
            ops.push(Wr::new(g.dev_of(w.stripe, w.pos), g.off(slot), w.data));
        }
        for (j, lc) in logchunks.iter().enumerate() {
            for (i, b) in lc.iter().enumerate() {
                ops.push(Wr::new(g.log_dev(i), g.off(plan.base + j as u64), b));
            }
        }
        core.devs.write(&mut ops);
    }

    /// Record the written stripes and log stripes (durable with the next metadata sync).
    fn record_write(core: &Core, plan: &WritePlan<'_, '_>) {
        let g = &core.geo;
        let mut mi = core.meta();
        for (s, _) in &plan.full_new {
            mi.record(Rec::FullStripe { stripe: *s });
        }
        for (j, grp) in plan.lgroups.iter().enumerate() {
            let members = grp
                .iter()
                .map(|&i| {
                    let w = plan.logged[i];
                    Member {
                        dev: g.dev_of(w.stripe, w.pos) as u16,
                        slot: plan.slots[i],
                        stripe: w.stripe,
                        pos: w.pos as u16,
                    }
                })
                .collect();
            mi.record(Rec::LogStripe {
                id: plan.id0 + j as u64,
                off: plan.base + j as u64,
                members,
            });
        }
    }

    /// Degraded commit: the latest versions of the touched chunks on failed devices can only come
    /// from their log stripes. Decoding them stripe batch by stripe batch reads the log devices in
    /// scattered order (random reads, which an HDD log device serves at a few ms each); this pass
    /// decodes them first, in log order, in groups of consecutive log stripes, so the log devices
    /// are read front to back. Bounded by `EARLY_DECODE_BYTES`: beyond it, the rest is decoded with
    /// its stripe batch. Returns the decoded chunks by (stripe, position).
    #[allow(clippy::type_complexity)]
    fn decode_lost_in_log_order(
        core: &Core,
        touched: &[(u64, DataStripe)],
        logs: &HashMap<u64, LogStripe>,
    ) -> Result<HashMap<(u64, usize), Vec<u8>>> {
        let g = &core.geo;
        let mut out = HashMap::new();
        if core.devs.failed_count() == 0 {
            return Ok(out);
        }
        let mut items: Vec<(u64, usize, &LogStripe, usize)> = Vec::new();
        for (s, ds) in touched {
            for (p, l) in ds.latest.iter().enumerate() {
                let Some((slot, id)) = l else { continue };
                if !core.devs.is_failed(g.dev_of(*s, p)) {
                    continue;
                }
                let Some(ls) = logs.get(id) else { continue };
                let Some(idx) = ls
                    .members
                    .iter()
                    .position(|m| m.stripe == *s && m.pos as usize == p && m.slot == *slot)
                else {
                    continue;
                };
                items.push((*s, p, ls, idx));
            }
        }
        let cap = (EARLY_DECODE_BYTES / g.chunk).max(1) as usize;
        items.truncate(cap);
        items.sort_unstable_by_key(|&(s, p, ls, _)| (ls.off, s, p));
        // Groups of whole log stripes (a log stripe's lost members are decoded together).
        let mut start = 0;
        while start < items.len() {
            let mut end = start;
            let mut stripes = 0;
            while end < items.len() && stripes < EARLY_DECODE_GROUP {
                let off = items[end].2.off;
                stripes += 1;
                while end < items.len() && items[end].2.off == off {
                    end += 1;
                }
            }
            let group = &items[start..end];
            let want: Vec<(&LogStripe, usize)> =
                group.iter().map(|&(_, _, ls, idx)| (ls, idx)).collect();
            let got = Self::decode_many_from_log(core, &want)?;
            for (&(s, p, _, _), b) in group.iter().zip(got) {
                out.insert((s, p), b);
            }
            start = end;
        }
        Ok(out)
    }

    fn commit_now(&self, core: &Core) -> Result<CommitReport> {
        let t = Instant::now();
        let (touched, logs, rerun, log_used) = {
            let mi = core.meta();
            (
                mi.state.pending_stripes(),
                mi.state.logs.clone(),
                mi.state.commit_in_progress,
                mi.state.log_next,
            )
        };
        if touched.is_empty() && !rerun {
            return Ok(CommitReport::default());
        }
        let before = core.main_counters();
        core.begin_commit()?;
        let mut chunks = 0u64;
        let mut early = Self::decode_lost_in_log_order(core, &touched, &logs)?;
        let mut decoded = early.len() as u64;
        let mut failed = core.devs.failed_list();
        let mut held = Vec::new();
        for (b, batch) in touched.chunks(COMMIT_BATCH_STRIPES).enumerate() {
            // Line 2: read the latest version of every data chunk of the touched stripes.
            let (mut data, lost) = Self::read_latest(core, batch);
            // Lines 3-6: recover the unavailable ones.
            let lost = LostChunks {
                lost,
                logs: &logs,
                rerun,
            };
            let (mut saved, from_log) =
                Self::recover_lost(core, batch, lost, &mut early, &mut data)?;
            decoded += from_log;
            let now = core.devs.failed_list();
            if now != failed {
                let newly: Vec<usize> = now
                    .iter()
                    .filter(|d| !failed.contains(d))
                    .copied()
                    .collect();
                let done = &touched[..b * COMMIT_BATCH_STRIPES];
                held.extend(Self::save_after_failure(core, done, &newly)?);
                Self::save_read_before_failure(&core.geo, batch, &newly, &mut saved);
                failed = now;
            }
            // Lines 8-12: new parity from the latest data, written in place.
            Self::write_parity(core, batch, &data, &saved)?;
            for (_, ds) in batch {
                chunks += ds.latest.iter().filter(|l| l.is_some()).count() as u64;
            }
        }
        // Lines 13-14: free old versions and obsolete log chunks (after the commit is durable).
        let frees = Self::obsolete_versions(&core.geo, &touched, &logs);
        let freed = frees.len() as u64;
        core.journal_release(held);
        core.finish_commit(frees)?;
        let after = core.main_counters();
        Ok(CommitReport {
            stripes: touched.len() as u64,
            chunks,
            decoded_from_log: decoded,
            freed_slots: freed,
            freed_log_slots: log_used,
            bytes_read: after.read_bytes - before.read_bytes,
            bytes_written: after.write_bytes - before.write_bytes,
            seconds: t.elapsed().as_secs_f64(),
        })
    }

    /// Read the latest version of every data chunk of a commit batch (zeros where never written):
    /// the data by stripe and position, and the (stripe index, position) of the chunks whose device
    /// is failed or whose read failed.
    #[allow(clippy::type_complexity)]
    fn read_latest(
        core: &Core,
        batch: &[(u64, DataStripe)],
    ) -> (Vec<Vec<Vec<u8>>>, Vec<(usize, usize)>) {
        let g = &core.geo;
        let (k, c) = (g.k, g.chunk as usize);
        let mut data: Vec<Vec<Vec<u8>>> = batch.iter().map(|_| vec![vec![0u8; c]; k]).collect();
        let mut lost = Vec::new();
        let mut ops = Vec::new();
        let mut who = Vec::new();
        for (i, ((s, ds), d)) in batch.iter().zip(data.iter_mut()).enumerate() {
            for (p, b) in d.iter_mut().enumerate() {
                if let Loc::At { dev, slot } =
                    Self::locate(core, Some((ds.committed[p], ds.latest[p])), *s, p)
                {
                    if !core.devs.usable(dev, slot) {
                        lost.push((i, p));
                    } else {
                        who.push((i, p));
                        ops.push(Rd::new(dev, g.off(slot), b.as_mut_slice()));
                    }
                }
            }
        }
        core.devs.read(&mut ops);
        for (o, w) in ops.iter().zip(who) {
            if !o.ok {
                lost.push(w);
            }
        }
        drop(ops);
        (data, lost)
    }

    /// Fill in a commit batch's lost chunks: decoded ahead in log order (`early`), from their log
    /// stripe if updated (all of the batch's log stripes read in one round), otherwise from the
    /// data stripe through its parity. Returns, per stripe, the positions decoded through the
    /// parity (the journal saves them before that parity is overwritten), and the number of chunks
    /// decoded from log stripes.
    #[allow(clippy::type_complexity)]
    fn recover_lost(
        core: &Core,
        batch: &[(u64, DataStripe)],
        lost: LostChunks<'_>,
        early: &mut HashMap<(u64, usize), Vec<u8>>,
        data: &mut [Vec<Vec<u8>>],
    ) -> Result<(Vec<Vec<usize>>, u64)> {
        let mut from_log: Vec<((usize, usize), &LogStripe, usize)> = Vec::new();
        let mut through_parity: Vec<Vec<usize>> = vec![Vec::new(); batch.len()];
        for (i, p) in lost.lost {
            let (s, ds) = &batch[i];
            if let Some(b) = early.remove(&(*s, p)) {
                data[i][p] = b;
                continue;
            }
            match ds.latest[p] {
                Some((slot, id)) => {
                    let ls = lost
                        .logs
                        .get(&id)
                        .ok_or_else(|| ArrayError::Meta(format!("log stripe {id} is missing")))?;
                    let idx = ls
                        .members
                        .iter()
                        .position(|m| m.stripe == *s && m.pos as usize == p && m.slot == slot)
                        .ok_or_else(|| {
                            ArrayError::Meta(format!("log stripe {id} lacks its member"))
                        })?;
                    from_log.push(((i, p), ls, idx));
                }
                None => {
                    data[i][p] = Self::decode_committed(core, *s, ds, p, lost.rerun)?;
                    through_parity[i].push(p);
                }
            }
        }
        if from_log.is_empty() {
            return Ok((through_parity, 0));
        }
        let want: Vec<(&LogStripe, usize)> =
            from_log.iter().map(|&(_, ls, idx)| (ls, idx)).collect();
        let got = Self::decode_many_from_log(core, &want)?;
        let decoded = got.len() as u64;
        for (((i, p), _, _), b) in from_log.iter().zip(got) {
            data[*i][*p] = b;
        }
        Ok((through_parity, decoded))
    }

    /// Encode a commit batch's parity from its latest data and write it in place under the
    /// journal, which first saves the chunks of `through_parity` (per stripe: the lost chunks
    /// decoded through the parity being overwritten, and those of devices that failed during the
    /// batch), or a rerun after a crash could not decode them from the torn parity.
    fn write_parity(
        core: &Core,
        batch: &[(u64, DataStripe)],
        data: &[Vec<Vec<u8>>],
        through_parity: &[Vec<usize>],
    ) -> Result<()> {
        let g = &core.geo;
        let mut parities = Vec::with_capacity(batch.len());
        for d in data {
            let refs: Vec<&[u8]> = d.iter().map(|v| v.as_slice()).collect();
            parities.push(core.encode_parity(&refs)?);
        }
        core.journaled(
            batch.len(),
            &|i| {
                let mut ps = through_parity[i].clone();
                ps.sort_unstable();
                let saved = ps.into_iter().map(|p| (p as u16, data[i][p].clone()));
                (batch[i].0, saved.collect())
            },
            &mut |r| {
                let mut ops = Vec::new();
                for ((s, _), par) in batch[r.clone()].iter().zip(&parities[r]) {
                    for (i, b) in par.iter().enumerate() {
                        ops.push(Wr::new(g.dev_of(*s, g.k + i), g.off(*s), b));
                    }
                }
                core.devs.write(&mut ops);
                Ok(())
            },
        )
    }

    /// The slots a finished commit frees, sorted: log-stripe members that are not their chunk's
    /// latest version, and committed versions that a latest version replaces. Never a latest
    /// version (it is the committed version from now on).
    fn obsolete_versions(
        g: &Geometry,
        touched: &[(u64, DataStripe)],
        logs: &HashMap<u64, LogStripe>,
    ) -> Vec<(usize, u64)> {
        let mut frees: Vec<(usize, u64)> = Vec::new();
        let latest: HashMap<(u64, usize), u64> = touched
            .iter()
            .flat_map(|(s, ds)| {
                ds.latest
                    .iter()
                    .enumerate()
                    .filter_map(move |(p, l)| l.map(|(slot, _)| ((*s, p), slot)))
            })
            .collect();
        for ls in logs.values() {
            for mem in &ls.members {
                if latest.get(&(mem.stripe, mem.pos as usize)) != Some(&mem.slot) {
                    frees.push((mem.dev as usize, mem.slot));
                }
            }
        }
        for (s, ds) in touched {
            for (p, (l, cm)) in ds.latest.iter().zip(&ds.committed).enumerate() {
                if let (Some((slot, _)), Some(old)) = (l, cm) {
                    if slot != old {
                        frees.push((g.dev_of(*s, p), *old));
                    }
                }
            }
        }
        frees.sort_unstable();
        frees.dedup();
        for (&(s, p), &slot) in &latest {
            let at = (g.dev_of(s, p), slot);
            assert!(
                frees.binary_search(&at).is_err(),
                "commit_now: the latest version of stripe {s} chunk {p} (slot {slot}) would be freed"
            );
        }
        frees
    }

    fn has_pending_now(&self, core: &Core) -> bool {
        let mi = core.meta();
        !mi.state.logs.is_empty() || mi.state.commit_in_progress
    }

    fn committed_layout_now(&self, core: &Core, s: u64) -> Option<Vec<Option<u64>>> {
        let mi = core.meta();
        let ds = mi.state.data_stripe(s)?;
        let mut v: Vec<Option<u64>> = (0..core.geo.k)
            .map(|p| ds.latest[p].map(|(slot, _)| slot).or(ds.committed[p]))
            .collect();
        v.extend((0..core.geo.m).map(|_| ds.parity.then_some(s)));
        Some(v)
    }

    fn written_stripes_now(&self, core: &Core) -> Vec<u64> {
        core.meta().state.written_stripes()
    }
}

impl Eplog {
    fn buffers(&self) -> MutexGuard<'_, DeviceBuffers> {
        self.buffer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Write buffered chunks out as log stripes (one chunk per device each): while every device has
    /// one, while the buffers are over capacity, or (`all`) until they are empty.
    fn drain_locked(&self, core: &Core, b: &mut DeviceBuffers, all: bool) -> Result<WriteOutcome> {
        let n = core.geo.n;
        loop {
            let DeviceBuffers { data, queues, cap } = &mut *b;
            for q in queues.iter_mut() {
                while q.front().is_some_and(|k| !data.contains_key(k)) {
                    q.pop_front();
                }
            }
            let full = queues.len() == n && queues.iter().all(|q| !q.is_empty());
            let over = data.len() > *cap * n;
            if data.is_empty() || !(full || over || all) {
                return Ok(WriteOutcome::Done);
            }
            let keys: Vec<(u64, usize)> =
                queues.iter().filter_map(|q| q.front().copied()).collect();
            let chunks: Vec<ChunkWrite> = keys
                .iter()
                .map(|k| ChunkWrite {
                    stripe: k.0,
                    pos: k.1,
                    data: data[k].as_slice(),
                })
                .collect();
            if self.write_now(core, &chunks)? == WriteOutcome::NeedCommit {
                return Ok(WriteOutcome::NeedCommit);
            }
            drop(chunks);
            for k in keys {
                data.remove(&k);
                queues[core.geo.dev_of(k.0, k.1)].pop_front();
            }
        }
    }
}

impl UpdateScheme for Eplog {
    fn kind(&self) -> SchemeKind {
        self.kind_now()
    }

    fn read(&self, core: &Core, reqs: &mut [ChunkRead<'_>]) -> Result<()> {
        let b = self.buffers();
        if b.data.is_empty() {
            drop(b);
            return self.read_now(core, reqs);
        }
        // Serve buffered chunks from memory; read the rest while the buffers cannot drain.
        let mut miss: Vec<ChunkRead> = Vec::new();
        for r in reqs.iter_mut() {
            match b.data.get(&(r.stripe, r.pos)) {
                Some(d) => r.buf.copy_from_slice(&d[r.off..r.off + r.buf.len()]),
                None => miss.push(ChunkRead {
                    stripe: r.stripe,
                    pos: r.pos,
                    off: r.off,
                    buf: &mut *r.buf,
                }),
            }
        }
        self.read_now(core, &mut miss)
    }

    fn write(&self, core: &Core, ws: &[ChunkWrite<'_>]) -> Result<WriteOutcome> {
        let mut b = self.buffers();
        if b.cap == 0 && b.data.is_empty() {
            drop(b);
            if !self.stripes_on.load(Relaxed) {
                return self.write_now(core, ws);
            }
            let job: Vec<OwnedWrite> = ws
                .iter()
                .map(|w| OwnedWrite {
                    stripe: w.stripe,
                    pos: w.pos,
                    data: w.data.to_vec(),
                })
                .collect();
            return self.stripes.submit(job, |jobs| {
                let cws: Vec<ChunkWrite> = jobs
                    .iter()
                    .flatten()
                    .map(|w| ChunkWrite {
                        stripe: w.stripe,
                        pos: w.pos,
                        data: &w.data,
                    })
                    .collect();
                self.write_now(core, &cws)
            });
        }
        core.check_tolerance()?;
        let g = &core.geo;
        let groups = by_stripe(ws);
        let mut direct: Vec<ChunkWrite> = Vec::new();
        let mut buffered: Vec<&ChunkWrite> = Vec::new();
        {
            let mi = core.meta();
            for (&s, wl) in &groups {
                if wl.len() == g.k && !mi.state.is_written(s) {
                    direct.extend(wl.iter().map(|w| ChunkWrite {
                        stripe: w.stripe,
                        pos: w.pos,
                        data: w.data,
                    }));
                } else {
                    buffered.extend(wl.iter().copied());
                }
            }
        }
        if !direct.is_empty() {
            // A new full stripe supersedes whatever of it is buffered.
            for w in &direct {
                b.data.remove(&(w.stripe, w.pos));
            }
            if self.write_now(core, &direct)? == WriteOutcome::NeedCommit {
                return Ok(WriteOutcome::NeedCommit);
            }
        }
        if b.queues.len() != g.n {
            b.queues = vec![VecDeque::new(); g.n];
        }
        for w in buffered {
            let key = (w.stripe, w.pos);
            if b.data.insert(key, w.data.to_vec()).is_none() {
                b.queues[g.dev_of(w.stripe, w.pos)].push_back(key);
            }
        }
        self.drain_locked(core, &mut b, false)
    }

    fn commit(&self, core: &Core) -> Result<CommitReport> {
        let mut b = self.buffers();
        let mut total = CommitReport::default();
        for _ in 0..4 {
            let r = self.commit_now(core)?;
            total.add(&r);
            if b.data.is_empty() {
                return Ok(total);
            }
            // The buffered chunks go out now that the commit freed space; commit them too.
            self.drain_locked(core, &mut b, true)?;
        }
        Err(ArrayError::NoSpace(
            "the device buffers do not fit in the spare chunk slots".into(),
        ))
    }

    fn drain(&self, core: &Core) -> Result<WriteOutcome> {
        let mut b = self.buffers();
        self.drain_locked(core, &mut b, true)
    }

    fn set_buffer(&self, core: &Core, chunks: usize) -> Result<()> {
        let mut b = self.buffers();
        if self.drain_locked(core, &mut b, true)? == WriteOutcome::NeedCommit {
            return Err(ArrayError::NoSpace(
                "commit before changing the device buffers".into(),
            ));
        }
        let g = &core.geo;
        let limit = ((g.slots - g.stripes) / 4).min(g.log_slots / 4) as usize;
        b.cap = chunks.min(limit);
        Ok(())
    }

    fn has_pending(&self, core: &Core) -> bool {
        !self.buffers().data.is_empty() || self.has_pending_now(core)
    }

    fn set_clock(&self, clock: crate::clock::Clock) {
        self.stripes.set_clock(clock);
    }

    fn set_stripe_buffer(&self, in_flight: usize) {
        self.stripes_on.store(in_flight > 0, Relaxed);
        if in_flight > 0 {
            self.stripes.set_in_flight(in_flight);
        }
    }

    fn stripe_buffer_stats(&self, reset: bool) -> Option<BatchStats> {
        let st = self.stripes.stats();
        if reset {
            self.stripes.reset_stats();
        }
        self.stripes_on.load(Relaxed).then_some(st)
    }

    fn committed_layout(&self, core: &Core, s: u64) -> Option<Vec<Option<u64>>> {
        self.committed_layout_now(core, s)
    }

    fn written_stripes(&self, core: &Core) -> Vec<u64> {
        self.written_stripes_now(core)
    }
}
