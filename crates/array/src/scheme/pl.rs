//! `pl`: classic parity logging (Stodolsky et al.; EPLOG §2.2, Fig 1a). A partial-stripe update
//! pre-reads the old data chunks, computes per data stripe the parity deltas of old ⊕ new (one log
//! chunk per parity chunk, so the log tolerates n − k failures like the parity), appends them to the
//! log devices and updates the data chunks in place. The current parity of a stripe is its parity
//! chunks plus all its logged deltas; a parity commit recomputes parity from the data and empties
//! the log. New stripes and full-stripe writes go to the main array with parity.

use std::ops::Range;
use std::time::Instant;

use super::md::{by_stripe, read_in_place, write_full_journaled, write_full_stripes};
use super::{ChunkRead, ChunkWrite, CommitReport, UpdateScheme, WriteOutcome};
use crate::core::Core;
use crate::io::{Rd, Wr};
use crate::meta::Rec;
use crate::{ArrayError, Result, SchemeKind};

pub struct Pl;

impl Pl {
    /// Decode stripe `s` with the current parity (parity chunks ⊕ logged deltas).
    fn degraded(&self, core: &Core, s: u64) -> Result<Vec<Vec<u8>>> {
        let g = &core.geo;
        let mut last = None;
        let mut reread = false;
        for _ in 0..=g.m + 1 {
            let logs: Vec<u64> = core
                .meta()
                .state
                .pl_logs
                .get(&s)
                .cloned()
                .unwrap_or_default();
            // Parity row i is usable only if its log device holds the deltas.
            let unusable: Vec<usize> = if logs.is_empty() {
                Vec::new()
            } else {
                // (or one of its log chunks failed its checksum).
                (0..g.m)
                    .filter(|&i| logs.iter().any(|&o| !core.devs.usable(g.log_dev(i), o)))
                    .map(|i| g.k + i)
                    .collect()
            };
            let adjust = |p: usize, buf: &mut [u8]| -> Result<()> {
                let i = p - g.k;
                let mut tmp = vec![vec![0u8; g.chunk as usize]; logs.len()];
                let mut ops: Vec<Rd> = logs
                    .iter()
                    .zip(tmp.iter_mut())
                    .map(|(&off, b)| Rd::new(g.log_dev(i), g.off(off), b.as_mut_slice()))
                    .collect();
                core.devs.read(&mut ops);
                if ops.iter().any(|o| !o.ok) {
                    return Err(ArrayError::DataLoss(format!(
                        "stripe {s}: log device {i} failed while reading its log chunks"
                    )));
                }
                for t in &tmp {
                    ecstack_codes::xor_into(buf, t)?;
                }
                Ok(())
            };
            match core.decode_stripe(s, &vec![Some(s); g.n], &unusable, &adjust) {
                Ok(v) => return Ok(v),
                Err(e) => last = Some(e),
            }
            // A log chunk that failed its checksum may have been read wrong, not stored wrong:
            // the next attempt reads it again (once).
            if let Some(c) = core.devs.crcs().filter(|_| !reread) {
                reread = true;
                for &o in &logs {
                    for i in 0..g.m {
                        c.unmark_bad(g.log_dev(i), o);
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| ArrayError::DataLoss(format!("stripe {s}: decode failed"))))
    }
}

impl Pl {
    /// The data of each partial stripe as its update will leave it: the written chunks, and the
    /// others read (what the journal saves). `None` if a read failed (the device is failed now).
    #[allow(clippy::type_complexity)]
    fn new_content(
        &self,
        core: &Core,
        partial: &[(u64, &Vec<&ChunkWrite<'_>>)],
    ) -> Result<Option<Vec<Vec<Vec<u8>>>>> {
        let g = &core.geo;
        let c = g.chunk as usize;
        let mut out: Vec<Vec<Vec<u8>>> = partial
            .iter()
            .map(|(_, wl)| {
                let mut d = vec![Vec::new(); g.k];
                for w in wl.iter() {
                    d[w.pos] = w.data.to_vec();
                }
                d
            })
            .collect();
        let mut ops = Vec::new();
        for ((s, _), d) in partial.iter().zip(out.iter_mut()) {
            for (p, b) in d.iter_mut().enumerate() {
                if b.is_empty() {
                    *b = vec![0u8; c];
                    ops.push(Rd::new(g.dev_of(*s, p), g.off(*s), b.as_mut_slice()));
                }
            }
        }
        core.devs.read(&mut ops);
        let ok = ops.iter().all(|o| o.ok);
        drop(ops);
        Ok(ok.then_some(out))
    }
}

impl UpdateScheme for Pl {
    fn kind(&self) -> SchemeKind {
        SchemeKind::Pl
    }

    fn read(&self, core: &Core, reqs: &mut [ChunkRead<'_>]) -> Result<()> {
        read_in_place(core, reqs, &|s| self.degraded(core, s))
    }

    fn write(&self, core: &Core, ws: &[ChunkWrite<'_>]) -> Result<WriteOutcome> {
        core.check_tolerance()?;
        let g = &core.geo;
        let (k, m, c) = (g.k, g.m, g.chunk as usize);
        let groups = by_stripe(ws);
        let mut full: Vec<(u64, Vec<Vec<u8>>)> = Vec::new();
        let mut new_stripes = Vec::new();
        let mut reset = Vec::new();
        let mut partial = Vec::new();
        // Written stripes with a failed main device: decoded, patched and written whole under the
        // journal (a log entry cannot make a torn in-place update of a degraded stripe safe).
        let mut degraded = Vec::new();
        // Every in-place update of a written stripe under the journal: whole-stripe writes as
        // degraded ones, partial ones saving the stripe's new content before the logged update.
        let journal_all = core.journal_all();
        {
            let mi = core.meta();
            for (&s, wl) in &groups {
                // A chunk that failed its checksum counts as lost: the stripe is decoded
                // around it and written whole, which rewrites it.
                let failed = (0..g.n).any(|p| !core.devs.usable(g.dev_of(s, p), s));
                let whole = journal_all && wl.len() == k;
                if (failed || whole) && mi.state.is_written(s) {
                    // Its log entries are dropped with its writes (`write_full_journaled`).
                    degraded.push((s, wl));
                } else if !mi.state.is_written(s) {
                    let mut data = vec![vec![0u8; c]; k];
                    for w in wl {
                        data[w.pos].copy_from_slice(w.data);
                    }
                    new_stripes.push(s);
                    full.push((s, data));
                } else if wl.len() == k {
                    let data = wl.iter().map(|w| w.data.to_vec()).collect::<Vec<_>>();
                    let mut ordered = vec![Vec::new(); k];
                    for (w, d) in wl.iter().zip(data) {
                        ordered[w.pos] = d;
                    }
                    if mi.state.pl_logs.contains_key(&s) {
                        reset.push(s);
                    }
                    full.push((s, ordered));
                } else {
                    partial.push((s, wl));
                }
            }
            if mi.state.log_next + partial.len() as u64 > g.log_slots {
                return Ok(WriteOutcome::NeedCommit);
            }
        }
        let mut journaled: Vec<(u64, Vec<Vec<u8>>)> = Vec::with_capacity(degraded.len());
        for (s, wl) in degraded {
            let mut data = if wl.len() == k {
                vec![vec![0u8; c]; k]
            } else {
                let mut sh = self.degraded(core, s)?;
                sh.truncate(k);
                sh
            };
            for w in wl {
                data[w.pos].copy_from_slice(w.data);
            }
            journaled.push((s, data));
        }
        write_full_journaled(core, &journaled)?;
        // Pre-read the old data chunks of partial stripes (decoding chunks on failed devices).
        let mut olds: Vec<Vec<Vec<u8>>> = Vec::with_capacity(partial.len());
        let mut need_decode = Vec::new();
        {
            let mut bufs: Vec<Vec<Vec<u8>>> = partial
                .iter()
                .map(|(_, wl)| vec![vec![0u8; c]; wl.len()])
                .collect();
            let mut ops = Vec::new();
            let mut who = Vec::new();
            for (i, ((s, wl), b)) in partial.iter().zip(bufs.iter_mut()).enumerate() {
                for (j, (w, buf)) in wl.iter().zip(b.iter_mut()).enumerate() {
                    ops.push(Rd::new(g.dev_of(*s, w.pos), g.off(*s), buf.as_mut_slice()));
                    who.push((i, j));
                }
            }
            core.devs.read(&mut ops);
            for (o, w) in ops.iter().zip(&who) {
                if !o.ok {
                    need_decode.push(*w);
                }
            }
            if !need_decode.is_empty() && core.devs.failed_count() > 0 {
                // A device failed under us: start over, its stripes now degraded (journaled).
                drop(ops);
                return self.write(core, ws);
            }
            drop(ops);
            olds.append(&mut bufs);
        }
        for (i, j) in need_decode {
            let (s, wl) = &partial[i];
            let sh = self.degraded(core, *s)?;
            olds[i][j].copy_from_slice(&sh[wl[j].pos]);
        }
        let saved = if journal_all {
            match self.new_content(core, &partial)? {
                Some(v) => v,
                // A device failed under us: start over, its stripes now degraded.
                None => return self.write(core, ws),
            }
        } else {
            Vec::new()
        };
        // Parity deltas per partial stripe: delta_i = sum_l gamma(i, l) (old_l ^ new_l).
        let mut deltas: Vec<Vec<Vec<u8>>> = Vec::with_capacity(partial.len());
        for ((_, wl), old) in partial.iter().zip(&olds) {
            let mut acc = vec![vec![0u8; c]; m];
            let mut tmp = vec![vec![0u8; c]; m];
            for (w, o) in wl.iter().zip(old) {
                let mut tr: Vec<&mut [u8]> = tmp.iter_mut().map(|v| v.as_mut_slice()).collect();
                core.code.parity_deltas(w.pos, o, w.data, &mut tr)?;
                for (a, t) in acc.iter_mut().zip(&tmp) {
                    ecstack_codes::xor_into(a, t)?;
                }
            }
            deltas.push(acc);
        }
        // Reserve log slots (append-only) and write data in place + log chunks in one batch.
        let base = {
            let mut mi = core.meta();
            if mi.state.log_next + partial.len() as u64 > g.log_slots {
                return Ok(WriteOutcome::NeedCommit);
            }
            let b = mi.state.log_next;
            mi.state.log_next += partial.len() as u64;
            b
        };
        let logged = |r: Range<usize>| -> Result<()> {
            let mut ops = Vec::new();
            for (i, ((s, wl), d)) in partial.iter().zip(&deltas).enumerate().skip(r.start) {
                if i >= r.end {
                    break;
                }
                for w in wl.iter() {
                    ops.push(Wr::new(g.dev_of(*s, w.pos), g.off(*s), w.data));
                }
                for (li, dl) in d.iter().enumerate() {
                    ops.push(Wr::new(g.log_dev(li), g.off(base + i as u64), dl));
                }
            }
            core.devs.write(&mut ops);
            drop(ops);
            core.check_tolerance()?;
            // Recorded with the writes: a journal save of the next group syncs them.
            let mut mi = core.meta();
            for (i, (s, _)) in partial.iter().enumerate().take(r.end).skip(r.start) {
                mi.record(Rec::PlLog {
                    stripe: *s,
                    off: base + i as u64,
                });
            }
            Ok(())
        };
        if journal_all {
            core.journaled(
                partial.len(),
                &|i| {
                    let chunks = saved[i]
                        .iter()
                        .enumerate()
                        .map(|(p, c)| (p as u16, c.clone()))
                        .collect();
                    (partial[i].0, chunks)
                },
                &mut |r| logged(r),
            )?;
        } else {
            logged(0..partial.len())?;
        }
        if !full.is_empty() {
            write_full_stripes(core, &full)?;
        }
        let mut mi = core.meta();
        for s in new_stripes {
            mi.record(Rec::StripeWritten { stripe: s });
        }
        for s in reset {
            mi.record(Rec::PlReset { stripe: s });
        }
        Ok(WriteOutcome::Done)
    }

    fn commit(&self, core: &Core) -> Result<CommitReport> {
        let t = Instant::now();
        let g = &core.geo;
        let k = g.k;
        let (mut touched, log_used): (Vec<u64>, u64) = {
            let mi = core.meta();
            (
                mi.state.pl_logs.keys().copied().collect(),
                mi.state.log_next,
            )
        };
        if touched.is_empty() && !core.meta().state.commit_in_progress {
            return Ok(CommitReport::default());
        }
        touched.sort_unstable();
        let before = core.main_counters();
        core.begin_commit()?;
        // Stripes with a chunk on a failed device: their data from a degraded decode.
        core.rewrite_parity(&touched, &|s| {
            let mut sh = self.degraded(core, s)?;
            sh.truncate(k);
            Ok(sh)
        })?;
        core.finish_commit(Vec::new())?;
        let after = core.main_counters();
        Ok(CommitReport {
            stripes: touched.len() as u64,
            chunks: 0,
            decoded_from_log: 0,
            freed_slots: 0,
            freed_log_slots: log_used,
            bytes_read: after.read_bytes - before.read_bytes,
            bytes_written: after.write_bytes - before.write_bytes,
            seconds: t.elapsed().as_secs_f64(),
        })
    }

    fn has_pending(&self, core: &Core) -> bool {
        let mi = core.meta();
        !mi.state.pl_logs.is_empty() || mi.state.commit_in_progress
    }
}
