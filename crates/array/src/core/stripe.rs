//! Stripe-level operations of the core: plan and decode a stripe, encode and rewrite parity.

use super::Core;
use crate::io::{Rd, Wr};
use crate::{ArrayError, Result};

/// Which shards of a stripe to read and which to reconstruct.
pub(crate) struct StripePlan {
    /// (position, device, slot) to read.
    pub reads: Vec<(usize, usize, u64)>,
    /// Positions to reconstruct (exactly m when decoding is needed).
    pub erased: Vec<usize>,
}

impl Core {
    /// Plan a decode of stripe `s` whose chunks sit at `slots` (None: data reads as zeros / parity not
    /// valid). `unusable` lists positions that must not be used (e.g. parity without its log).
    /// Reads exactly enough chunks (k minus the known-zero ones).
    pub(crate) fn plan_stripe(
        &self,
        s: u64,
        slots: &[Option<u64>],
        unusable: &[usize],
    ) -> Result<StripePlan> {
        let g = &self.geo;
        let mut known = 0usize;
        let mut reads = Vec::new();
        let mut erased = Vec::new();
        for (p, slot) in slots.iter().enumerate().take(g.n) {
            let d = g.dev_of(s, p);
            let usable = !unusable.contains(&p)
                && !self.devs.is_failed(d)
                && slot.is_none_or(|sl| !self.devs.is_bad(d, sl));
            match slot {
                None if p < g.k => known += 1,
                Some(sl) if usable && known < g.k => {
                    known += 1;
                    reads.push((p, d, *sl));
                }
                _ => erased.push(p),
            }
        }
        if known < g.k {
            return Err(ArrayError::DataLoss(format!(
                "stripe {s}: only {known} of the {} chunks needed are available",
                g.k
            )));
        }
        Ok(StripePlan { reads, erased })
    }

    /// Decode stripe `s`: returns all n shards (data then parity). `adjust(p, buf)` is applied to
    /// every parity shard read (parity logging folds its log chunks in there).
    pub(crate) fn decode_stripe(
        &self,
        s: u64,
        slots: &[Option<u64>],
        unusable: &[usize],
        adjust: &dyn Fn(usize, &mut [u8]) -> Result<()>,
    ) -> Result<Vec<Vec<u8>>> {
        self.decode_stripe_repairing(s, slots, unusable, adjust, true)
    }

    /// [`Core::decode_stripe`]; `repair`: write the decoded chunks back over those that failed
    /// their checksum (off for a speculative decode whose result is checked afterwards: a decode
    /// through a parity that does not match the data must write nothing).
    pub(crate) fn decode_stripe_repairing(
        &self,
        s: u64,
        slots: &[Option<u64>],
        unusable: &[usize],
        adjust: &dyn Fn(usize, &mut [u8]) -> Result<()>,
        repair: bool,
    ) -> Result<Vec<Vec<u8>>> {
        let g = &self.geo;
        let c = g.chunk as usize;
        let mut reread = false;
        // Each attempt loses at least one more chunk (a device failed, a checksum failed); one
        // round of re-reading the chunks that failed their checksum is allowed.
        for _attempt in 0..=2 * g.n + 1 {
            let plan = match self.plan_stripe(s, slots, unusable) {
                // Too few chunks left: the bad ones may have been read wrong, not stored wrong (a
                // flip on the way); read them once more, and a chunk that checks out is good again.
                Err(_) if !reread && self.unmark_bad(s, slots) => {
                    reread = true;
                    continue;
                }
                r => r?,
            };
            let mut shards = vec![vec![0u8; c]; g.n];
            let mut ok = true;
            {
                let mut bufs: Vec<Option<&mut Vec<u8>>> = shards.iter_mut().map(Some).collect();
                let mut ops: Vec<Rd<'_>> = plan
                    .reads
                    .iter()
                    .map(|&(p, d, slot)| {
                        Rd::new(
                            d,
                            g.off(slot),
                            bufs[p].take().expect("read once").as_mut_slice(),
                        )
                    })
                    .collect();
                self.devs.read(&mut ops);
                if ops.iter().any(|o| !o.ok) {
                    ok = false;
                }
            }
            if !ok {
                continue; // a device failed under us: plan again around it
            }
            for &(p, _, _) in &plan.reads {
                if p >= g.k {
                    adjust(p, &mut shards[p])?;
                }
            }
            if !plan.erased.is_empty() {
                let mut refs: Vec<&mut [u8]> =
                    shards.iter_mut().map(|v| v.as_mut_slice()).collect();
                self.code.reconstruct_in_place(&mut refs, &plan.erased)?;
                if repair {
                    self.repair_bad_chunks(s, slots, &plan.erased, unusable, &shards);
                }
            }
            return Ok(shards);
        }
        Err(ArrayError::DataLoss(format!(
            "stripe {s}: devices kept failing during decode"
        )))
    }

    /// Clear the bad marks of stripe `s`'s chunks (at `slots`); true if there were any.
    fn unmark_bad(&self, s: u64, slots: &[Option<u64>]) -> bool {
        let Some(c) = self.devs.crcs() else {
            return false;
        };
        let mut any = false;
        for (p, slot) in slots.iter().enumerate().take(self.geo.n) {
            if let Some(sl) = slot {
                any |= c.unmark_bad(self.geo.dev_of(s, p), *sl);
            }
        }
        any
    }

    /// Write back the chunks of stripe `s` that failed their checksum and were just decoded: data
    /// chunks always; parity chunks only when nothing was folded into them (`unusable` empty, and
    /// not pl, whose decoded parity includes its logged deltas, unlike the chunk on the device).
    /// Best effort: a write that fails marks its device failed, as any write does.
    pub(crate) fn repair_bad_chunks(
        &self,
        s: u64,
        slots: &[Option<u64>],
        erased: &[usize],
        unusable: &[usize],
        shards: &[Vec<u8>],
    ) {
        let g = &self.geo;
        let parity_as_stored = unusable.is_empty() && !self.pl;
        let mut ops = Vec::new();
        for &p in erased {
            let Some(Some(slot)) = slots.get(p) else {
                continue;
            };
            let d = g.dev_of(s, p);
            if self.devs.is_bad(d, *slot) && (p < g.k || parity_as_stored) {
                ops.push(Wr::new(d, g.off(*slot), &shards[p]));
            }
        }
        self.write_repairs(&mut ops);
    }

    /// Issue repair writes of bad chunks and count those that reached their device.
    pub(crate) fn write_repairs(&self, ops: &mut [Wr<'_>]) {
        if ops.is_empty() {
            return;
        }
        self.devs.write(ops);
        let done = ops.iter().filter(|o| o.ok).count() as u64;
        if let Some(c) = self.devs.crcs() {
            c.repaired
                .fetch_add(done, std::sync::atomic::Ordering::Relaxed);
        }
        tracing::info!(
            repaired = done,
            "chunks that failed their checksum rewritten"
        );
    }

    /// Encode parity of `data` (k chunks) into m new buffers.
    pub(crate) fn encode_parity(&self, data: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let mut parity = vec![vec![0u8; self.geo.chunk as usize]; self.geo.m];
        let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        self.code.encode(data, &mut refs)?;
        Ok(parity)
    }

    /// Recompute the parity of `stripes` (in-place layout: chunk p of stripe s at slot s) from their
    /// data chunks and write it, in batches read and written in parallel. `unreadable(s)` supplies
    /// the k data chunks of a stripe whose reads failed (a degraded decode, or an error).
    pub(crate) fn rewrite_parity(
        &self,
        stripes: &[u64],
        unreadable: &dyn Fn(u64) -> Result<Vec<Vec<u8>>>,
    ) -> Result<()> {
        let g = &self.geo;
        let c = g.chunk as usize;
        for batch in stripes.chunks(256) {
            let mut data: Vec<Vec<Vec<u8>>> =
                batch.iter().map(|_| vec![vec![0u8; c]; g.k]).collect();
            let mut bad = Vec::new();
            {
                let mut ops: Vec<Rd> = Vec::new();
                let mut who = Vec::new();
                for (i, (s, d)) in batch.iter().zip(data.iter_mut()).enumerate() {
                    for (p, b) in d.iter_mut().enumerate() {
                        ops.push(Rd::new(g.dev_of(*s, p), g.off(*s), b.as_mut_slice()));
                        who.push(i);
                    }
                }
                self.devs.read(&mut ops);
                for (o, &i) in ops.iter().zip(&who) {
                    if !o.ok && !bad.contains(&i) {
                        bad.push(i);
                    }
                }
                // A data chunk whose checksum is not known (forgotten for a resync after a
                // crash) gets the checksum of the bytes the new parity is computed from.
                if let Some(c) = self.devs.crcs() {
                    for o in ops.iter().filter(|o| o.ok) {
                        c.learn(o.dev, (o.off - g.data_start) / g.chunk, o.buf);
                    }
                }
            }
            for i in bad {
                data[i] = unreadable(batch[i])?;
            }
            let mut parities = Vec::with_capacity(batch.len());
            for d in &data {
                let refs: Vec<&[u8]> = d.iter().map(|v| v.as_slice()).collect();
                parities.push(self.encode_parity(&refs)?);
            }
            // With a main device failed every stripe is degraded: a torn parity write would make
            // its lost chunk decode to bytes never written, so the stripes go through the journal
            // (their data saved whole; recovery rewrites them from it).
            let degraded = (0..g.n).any(|d| self.devs.is_failed(d));
            self.journaled(
                batch.len(),
                &|i| {
                    let saved = match degraded {
                        true => data[i]
                            .iter()
                            .enumerate()
                            .map(|(p, c)| (p as u16, c.clone()))
                            .collect(),
                        false => Vec::new(),
                    };
                    (batch[i], saved)
                },
                &mut |r| {
                    let mut ops = Vec::new();
                    for (s, par) in batch[r.clone()].iter().zip(&parities[r]) {
                        for (i, b) in par.iter().enumerate() {
                            ops.push(Wr::new(g.dev_of(*s, g.k + i), g.off(*s), b));
                        }
                    }
                    self.devs.write(&mut ops);
                    Ok(())
                },
            )?;
        }
        Ok(())
    }

    /// Forget the checksums of every chunk of `stripes` (in-place layout, main devices): after a
    /// crash, writes since the last sync may have reached their chunks or not, so md and pl trust
    /// what the resync reads there, as they do for its parity.
    pub(crate) fn forget_crcs(&self, stripes: &[u64]) {
        if let Some(c) = self.devs.crcs() {
            for &s in stripes {
                for p in 0..self.geo.n {
                    c.forget(self.geo.dev_of(s, p), s);
                }
            }
        }
    }

    /// Fail with DataLoss if more devices failed than the code tolerates.
    pub(crate) fn check_tolerance(&self) -> Result<()> {
        let f = self.devs.failed_count();
        if f > self.geo.m {
            return Err(ArrayError::DataLoss(format!(
                "{f} devices failed but the array tolerates {}",
                self.geo.m
            )));
        }
        Ok(())
    }
}
