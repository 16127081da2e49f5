//! `md`: the Linux software RAID baseline. A write that covers whole stripes is a full-stripe write;
//! otherwise each stripe is updated by read-modify-write (read old data and parity, apply parity
//! deltas) or reconstruct-write (read the untouched data chunks, re-encode), whichever reads less.
//! Parity is updated in place. Degraded stripes are decoded, patched and re-encoded.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

use super::{ChunkRead, ChunkWrite, CommitReport, UpdateScheme, WriteOutcome};
use crate::core::Core;
use crate::io::{Rd, Wr};
use crate::meta::Rec;
use crate::{ArrayError, Result, SchemeKind};

pub struct Md;

/// Reads of schemes that keep data chunks in place (md, pl): a never-written stripe reads as zeros,
/// a chunk on a failed device is decoded with `degraded(stripe)` (which returns all n shards).
pub(crate) fn read_in_place(
    core: &Core,
    reqs: &mut [ChunkRead<'_>],
    degraded: &dyn Fn(u64) -> Result<Vec<Vec<u8>>>,
) -> Result<()> {
    let g = &core.geo;
    let written: Vec<bool> = {
        let mi = core.meta();
        reqs.iter().map(|r| mi.state.is_written(r.stripe)).collect()
    };
    let mut need = Vec::new();
    {
        let mut ops = Vec::new();
        let mut idx = Vec::new();
        for (i, r) in reqs.iter_mut().enumerate() {
            if !written[i] {
                r.buf.fill(0);
                continue;
            }
            let d = g.dev_of(r.stripe, r.pos);
            if !core.devs.usable(d, r.stripe) {
                need.push(i);
                continue;
            }
            idx.push(i);
            ops.push(Rd::new(d, g.off(r.stripe) + r.off as u64, &mut *r.buf));
        }
        core.devs.read(&mut ops);
        for (o, i) in ops.iter().zip(idx) {
            if !o.ok {
                need.push(i);
            }
        }
    }
    let mut cache: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
    for i in need {
        let r = &mut reqs[i];
        let shards = match cache.entry(r.stripe) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => e.insert(degraded(r.stripe)?),
        };
        r.buf
            .copy_from_slice(&shards[r.pos][r.off..r.off + r.buf.len()]);
    }
    Ok(())
}

/// Group chunk writes by stripe.
pub(crate) fn by_stripe<'a, 'b>(
    ws: &'a [ChunkWrite<'b>],
) -> BTreeMap<u64, Vec<&'a ChunkWrite<'b>>> {
    let mut m: BTreeMap<u64, Vec<&ChunkWrite>> = BTreeMap::new();
    for w in ws {
        m.entry(w.stripe).or_default().push(w);
    }
    m
}

/// Write whole stripes with parity, in place: `data[p]` is the content of data position p.
/// Used by md and pl for full-stripe writes, first writes and degraded writes.
pub(crate) fn write_full_stripes(core: &Core, stripes: &[(u64, Vec<Vec<u8>>)]) -> Result<()> {
    let g = &core.geo;
    let mut parities = Vec::with_capacity(stripes.len());
    for (_, data) in stripes {
        let refs: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        parities.push(core.encode_parity(&refs)?);
    }
    let mut ops = Vec::new();
    for ((s, data), parity) in stripes.iter().zip(&parities) {
        for (p, buf) in data.iter().chain(parity.iter()).enumerate() {
            ops.push(Wr::new(g.dev_of(*s, p), g.off(*s), buf));
        }
    }
    core.devs.write(&mut ops);
    core.check_tolerance()
}

/// Write whole stripes of a degraded array in place under the journal: each stripe's k data chunks
/// (its content after the write) are saved durably first, so a crash that tears the writes is
/// repaired on open by writing the stripe again from the journal ([`replay_journal`]). Without it
/// a torn data or parity chunk makes the failed device's chunk decode to bytes never written.
/// pl's log entries of each stripe are dropped (`PlReset`) with its writes.
pub(crate) fn write_full_journaled(core: &Core, stripes: &[(u64, Vec<Vec<u8>>)]) -> Result<()> {
    if stripes.is_empty() {
        return Ok(());
    }
    core.journaled(
        stripes.len(),
        &|i| {
            let (s, data) = &stripes[i];
            let chunks = data
                .iter()
                .enumerate()
                .map(|(p, c)| (p as u16, c.clone()))
                .collect();
            (*s, chunks)
        },
        &mut |r| {
            write_full_stripes(core, &stripes[r.clone()])?;
            // pl: the parity is whole again, so the stripe's logged deltas go, recorded before the
            // next group's journal save syncs the metadata (a synced stripe with its old log
            // entries would decode through parity and deltas to other bytes).
            let mut mi = core.meta();
            for (s, _) in &stripes[r] {
                if mi.state.pl_logs.contains_key(s) {
                    mi.record(Rec::PlReset { stripe: *s });
                }
            }
            Ok(())
        },
    )
}

/// On open (md, pl): rewrite every stripe a journal entry saved (data as saved, parity computed),
/// so a degraded update a crash interrupted ends as its new data, consistent with its parity; pl
/// drops the stripe's log entries (the parity is whole again). Made durable before returning.
pub(crate) fn replay_journal(core: &Core) -> Result<u64> {
    let g = &core.geo;
    let mut stripes = Vec::new();
    for (s, chunks) in core.journal_replay() {
        if !core.meta().state.is_written(s) {
            continue;
        }
        if chunks.len() != g.k {
            return Err(ArrayError::Meta(format!(
                "journal entry of stripe {s} saves {} of its {} data chunks",
                chunks.len(),
                g.k
            )));
        }
        stripes.push((s, chunks.into_values().collect::<Vec<_>>()));
    }
    if stripes.is_empty() {
        return Ok(0);
    }
    write_full_stripes(core, &stripes)?;
    {
        let mut mi = core.meta();
        for (s, _) in &stripes {
            if mi.state.pl_logs.contains_key(s) {
                mi.record(Rec::PlReset { stripe: *s });
            }
        }
    }
    core.persist()?;
    Ok(stripes.len() as u64)
}

impl UpdateScheme for Md {
    fn kind(&self) -> SchemeKind {
        SchemeKind::Md
    }

    fn read(&self, core: &Core, reqs: &mut [ChunkRead<'_>]) -> Result<()> {
        let n = core.geo.n;
        read_in_place(core, reqs, &|s| {
            core.decode_stripe(s, &vec![Some(s); n], &[], &|_, _| Ok(()))
        })
    }

    fn write(&self, core: &Core, ws: &[ChunkWrite<'_>]) -> Result<WriteOutcome> {
        core.check_tolerance()?;
        let g = &core.geo;
        let (k, m, n, c) = (g.k, g.m, g.n, g.chunk as usize);
        let groups = by_stripe(ws);
        let written: BTreeMap<u64, bool> = {
            let mi = core.meta();
            groups
                .keys()
                .map(|&s| (s, mi.state.is_written(s)))
                .collect()
        };
        // Stripes written whole (new stripes, full-stripe writes): the writes' own bytes when
        // they cover every data chunk, else the stripe's new content gathered.
        let mut full: Vec<(u64, Vec<Cow<'_, [u8]>>)> = Vec::new();
        // Written stripes with a failed device: written whole under the journal.
        let mut journaled: Vec<(u64, Vec<Vec<u8>>)> = Vec::new();
        let mut new_stripes = Vec::new();
        // Partial stripes: (stripe, writes, rmw?)
        let mut partial: Vec<(u64, &Vec<&ChunkWrite>, bool)> = Vec::new();
        // Every in-place update of a written stripe under the journal: partial stripes by
        // reconstruct-write, so the stripe's whole new content is at hand to save.
        let journal_all = core.journal_all();
        for (&s, wl) in &groups {
            // A chunk that failed its checksum is treated like one of a failed device: the
            // stripe is decoded around it and written whole, which rewrites it.
            let degraded = (0..n).any(|p| !core.devs.usable(g.dev_of(s, p), s));
            if wl.len() == k && (!written[&s] || !(degraded || journal_all)) {
                let mut data: Vec<Cow<'_, [u8]>> = vec![Cow::Borrowed(&[][..]); k];
                for w in wl {
                    debug_assert!(data[w.pos].is_empty(), "two writes to one chunk");
                    data[w.pos] = Cow::Borrowed(w.data);
                }
                if !written[&s] {
                    new_stripes.push(s);
                }
                full.push((s, data));
            } else if !written[&s] || wl.len() == k || degraded {
                let mut data = if written[&s] && wl.len() < k {
                    let mut sh = core.decode_stripe(s, &vec![Some(s); n], &[], &|_, _| Ok(()))?;
                    sh.truncate(k);
                    sh
                } else {
                    vec![vec![0u8; c]; k]
                };
                for w in wl {
                    data[w.pos].copy_from_slice(w.data);
                }
                if !written[&s] {
                    new_stripes.push(s);
                    full.push((s, data.into_iter().map(Cow::Owned).collect()));
                } else if degraded || journal_all {
                    journaled.push((s, data));
                } else {
                    full.push((s, data.into_iter().map(Cow::Owned).collect()));
                }
            } else {
                let w = wl.len();
                let rmw = !journal_all && w + m < k - w;
                partial.push((s, wl, rmw));
            }
        }
        // Phase 1: reads for partial stripes.
        // RMW: old data of written positions + all parity; RCW: untouched data positions.
        let mut bufs: Vec<Vec<Vec<u8>>> = partial.iter().map(|_| vec![Vec::new(); n]).collect();
        let mut failed_read = false;
        {
            let mut ops = Vec::new();
            for ((s, wl, rmw), sb) in partial.iter().zip(bufs.iter_mut()) {
                let wpos: Vec<usize> = wl.iter().map(|w| w.pos).collect();
                for (p, b) in sb.iter_mut().enumerate() {
                    let want = if *rmw {
                        p >= k || wpos.contains(&p)
                    } else {
                        p < k && !wpos.contains(&p)
                    };
                    if want {
                        *b = vec![0u8; c];
                        ops.push(Rd::new(g.dev_of(*s, p), g.off(*s), b.as_mut_slice()));
                    }
                }
            }
            core.devs.read(&mut ops);
            if ops.iter().any(|o| !o.ok) {
                failed_read = true;
            }
        }
        if failed_read {
            // A device failed under us: start over, now in degraded mode.
            return self.write(core, ws);
        }
        // Phase 2: new parity per partial stripe.
        #[allow(clippy::type_complexity)]
        let mut outs: Vec<(u64, Vec<(usize, Vec<u8>)>)> = Vec::new();
        for ((s, wl, rmw), sb) in partial.iter().zip(bufs.iter_mut()) {
            let mut parity: Vec<Vec<u8>>;
            if *rmw {
                parity = sb[k..].to_vec();
                let mut deltas = vec![vec![0u8; c]; m];
                for w in wl.iter() {
                    let mut dr: Vec<&mut [u8]> =
                        deltas.iter_mut().map(|v| v.as_mut_slice()).collect();
                    core.code
                        .parity_deltas(w.pos, &sb[w.pos], w.data, &mut dr)?;
                    for (pa, d) in parity.iter_mut().zip(&deltas) {
                        ecstack_codes::xor_into(pa, d)?;
                    }
                }
            } else {
                for w in wl.iter() {
                    sb[w.pos] = w.data.to_vec();
                }
                let refs: Vec<&[u8]> = sb[..k].iter().map(|v| v.as_slice()).collect();
                parity = core.encode_parity(&refs)?;
            }
            outs.push((
                *s,
                parity
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| (k + i, v))
                    .collect(),
            ));
        }
        // Phase 3: degraded stripes under the journal, then all other writes in one batch.
        write_full_journaled(core, &journaled)?;
        let mut parities = Vec::new();
        for (s, data) in &full {
            let refs: Vec<&[u8]> = data.iter().map(|v| v.as_ref()).collect();
            parities.push((*s, core.encode_parity(&refs)?));
        }
        let mut ops = Vec::new();
        for ((s, data), (_, parity)) in full.iter().zip(&parities) {
            let chunks = data
                .iter()
                .map(|b| b.as_ref())
                .chain(parity.iter().map(|b| &b[..]));
            for (p, b) in chunks.enumerate() {
                ops.push(Wr::new(g.dev_of(*s, p), g.off(*s), b));
            }
        }
        let partial_writes = |r: Range<usize>| {
            let mut ops = Vec::new();
            for ((s, wl, _), (_, par)) in partial[r.clone()].iter().zip(&outs[r]) {
                for w in wl.iter() {
                    ops.push(Wr::new(g.dev_of(*s, w.pos), g.off(*s), w.data));
                }
                for (p, b) in par {
                    ops.push(Wr::new(g.dev_of(*s, *p), g.off(*s), b));
                }
            }
            ops
        };
        if journal_all {
            // Journaled after the batch of new and whole stripes (nothing to save for those).
            core.devs.write(&mut ops);
            drop(ops);
            core.check_tolerance()?;
            core.journaled(
                partial.len(),
                &|i| {
                    // After reconstruct-write, the buffers hold the stripe's new data.
                    let chunks = bufs[i][..k]
                        .iter()
                        .enumerate()
                        .map(|(p, c)| (p as u16, c.clone()))
                        .collect();
                    (partial[i].0, chunks)
                },
                &mut |r| {
                    core.devs.write(&mut partial_writes(r));
                    core.check_tolerance()
                },
            )?;
        } else {
            ops.extend(partial_writes(0..partial.len()));
            core.devs.write(&mut ops);
            core.check_tolerance()?;
        }
        if !new_stripes.is_empty() {
            let mut mi = core.meta();
            for s in new_stripes {
                mi.record(Rec::StripeWritten { stripe: s });
            }
        }
        Ok(WriteOutcome::Done)
    }

    fn commit(&self, _core: &Core) -> Result<CommitReport> {
        Ok(CommitReport::default())
    }

    fn has_pending(&self, _core: &Core) -> bool {
        false
    }
}
