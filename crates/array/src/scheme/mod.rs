//! Update schemes: how a write becomes chunk writes, log chunks and parity work. One file per scheme
//! behind [`UpdateScheme`]; the array core ([`Core`]) provides geometry, devices, metadata and codes.

mod eplog;
mod md;
mod pl;
mod stripe_buffer;

pub use eplog::Eplog;
pub use md::Md;
pub use pl::Pl;
pub use stripe_buffer::{BatchStats, DEFAULT_IN_FLIGHT};

use crate::array::Core;
use crate::io::{Rd, Wr};
use crate::{ArrayError, Result, SchemeKind};

/// Read `buf.len()` bytes at byte `off` inside data chunk `pos` of data stripe `stripe`.
pub struct ChunkRead<'a> {
    pub stripe: u64,
    pub pos: usize,
    pub off: usize,
    pub buf: &'a mut [u8],
}

/// Write the whole data chunk `pos` of data stripe `stripe` (`data.len()` = chunk size).
pub struct ChunkWrite<'a> {
    pub stripe: u64,
    pub pos: usize,
    pub data: &'a [u8],
}

/// Whether a write went through or needs a parity commit first to free space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Done,
    /// Nothing was written: the spare chunk slots or the log devices are full.
    NeedCommit,
}

/// What one parity commit did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CommitReport {
    /// Data stripes whose parity was recomputed.
    pub stripes: u64,
    /// Latest data chunk versions that became committed.
    pub chunks: u64,
    /// Data chunks decoded from log stripes (degraded commit).
    pub decoded_from_log: u64,
    /// Chunk slots freed (old versions).
    pub freed_slots: u64,
    /// Log slots freed on each log device.
    pub freed_log_slots: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub seconds: f64,
}

impl CommitReport {
    /// Add another commit's work to this one.
    pub fn add(&mut self, r: &CommitReport) {
        self.stripes += r.stripes;
        self.chunks += r.chunks;
        self.decoded_from_log += r.decoded_from_log;
        self.freed_slots += r.freed_slots;
        self.freed_log_slots += r.freed_log_slots;
        self.bytes_read += r.bytes_read;
        self.bytes_written += r.bytes_written;
        self.seconds += r.seconds;
    }
}

/// One update scheme. All calls come from the array with the stripes involved locked; `commit`
/// runs with the whole array locked.
pub trait UpdateScheme: Send + Sync {
    fn kind(&self) -> SchemeKind;
    /// Read data chunk ranges (degraded reads decode lost chunks).
    fn read(&self, core: &Core, reqs: &mut [ChunkRead<'_>]) -> Result<()>;
    /// Write whole data chunks (at most one per chunk, any stripes).
    fn write(&self, core: &Core, writes: &[ChunkWrite<'_>]) -> Result<WriteOutcome>;
    /// Parity commit: make every data stripe's parity reflect its latest data and free old versions
    /// and log chunks.
    fn commit(&self, core: &Core) -> Result<CommitReport>;
    /// Whether there are updates since the last parity commit.
    fn has_pending(&self, core: &Core) -> bool;
    /// The committed layout of stripe `s`: for every position (data then parity) the chunk slot on
    /// its device, or None when the chunk reads as zeros (data) or holds nothing yet (parity).
    /// None for a stripe never written. Valid right after a parity commit.
    /// The default is the in-place layout of md and pl: chunk p of stripe s is slot s of device p.
    fn committed_layout(&self, core: &Core, s: u64) -> Option<Vec<Option<u64>>> {
        core.meta()
            .state
            .is_written(s)
            .then(|| vec![Some(s); core.geo.n])
    }
    /// Stripes that have ever been written, in ascending order.
    fn written_stripes(&self, core: &Core) -> Vec<u64> {
        let mi = core.meta();
        (0..core.geo.stripes)
            .filter(|&s| mi.state.is_written(s))
            .collect()
    }
    /// Write out anything held in memory (eplog device buffers) before a flush.
    fn drain(&self, _core: &Core) -> Result<WriteOutcome> {
        Ok(WriteOutcome::Done)
    }
    /// Hold up to `chunks` updated chunks per device in memory (eplog device buffers; 0 = off).
    fn set_buffer(&self, _core: &Core, _chunks: usize) -> Result<()> {
        Ok(())
    }
    /// Let concurrent write requests share log stripes, with up to `in_flight` batches written at
    /// once (eplog stripe buffer; 0 = off; other schemes ignore it).
    fn set_stripe_buffer(&self, _in_flight: usize) {}
    /// Stripe-buffer counters (None when the scheme has none or it is off); `reset` zeroes them.
    fn stripe_buffer_stats(&self, _reset: bool) -> Option<BatchStats> {
        None
    }
}

pub(crate) fn new_scheme(kind: SchemeKind) -> Box<dyn UpdateScheme> {
    match kind {
        SchemeKind::Md => Box::new(Md),
        SchemeKind::Pl => Box::new(Pl),
        SchemeKind::Eplog => Box::new(Eplog::default()),
    }
}

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
            let usable = !unusable.contains(&p) && !self.devs.is_failed(d);
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
        let g = &self.geo;
        let c = g.chunk as usize;
        for _attempt in 0..=g.n {
            let plan = self.plan_stripe(s, slots, unusable)?;
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
                self.code.reconstruct(&mut refs, &plan.erased)?;
            }
            return Ok(shards);
        }
        Err(ArrayError::DataLoss(format!(
            "stripe {s}: devices kept failing during decode"
        )))
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
            }
            for i in bad {
                data[i] = unreadable(batch[i])?;
            }
            let mut parities = Vec::with_capacity(batch.len());
            for d in &data {
                let refs: Vec<&[u8]> = d.iter().map(|v| v.as_slice()).collect();
                parities.push(self.encode_parity(&refs)?);
            }
            let mut ops = Vec::new();
            for (s, par) in batch.iter().zip(&parities) {
                for (i, b) in par.iter().enumerate() {
                    ops.push(Wr::new(g.dev_of(*s, g.k + i), g.off(*s), b));
                }
            }
            self.devs.write(&mut ops);
        }
        Ok(())
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
