//! Scrub: read every written data stripe, check every chunk against its checksum and the parity
//! against the data, and repair what can be located without doubt (`docs/array.md`, "Scrub").
//!
//! A chunk that fails its checksum (`crate::crc`) is located by it: it is an erasure, and up to `m`
//! erasures per stripe (failed devices, read errors and bad chunks together) are decoded from the
//! rest and written back, whatever the code. The parity check then covers the chunks whose
//! checksums matched or are not known (written before checksums existed, or forgotten by a resync).
//!
//! For those, a parity mismatch says that a stripe is wrong, not which chunk is. Scrub locates bad
//! chunks the way a decoder of an MDS code does: with `e` erasures, the `n − e` chunks read form a
//! code of distance `m − e + 1`, which locates up to `⌊(m − e)/2⌋` bad chunks. Scrub tries sets of
//! `t = 1, 2, …` chunks up to that bound and repairs only when exactly one set of the smallest size
//! explains the mismatch; anything else is reported, never guessed. Beyond the bound a mismatch is
//! still detected, but a wrong chunk set could look like the smallest explanation; with checksums
//! that case needs a chunk whose checksum matches and whose bytes are wrong.
//!
//! A stripe found consistent with all its chunks read gives the chunks whose checksum was not known
//! theirs (an array from before checksums gets them from its first scrub).
//!
//! Speed: the chunks are read ahead by [`SCRUB_READERS`] threads into reused aligned buffers, one
//! request per run of consecutive slots on a device, without verification or copies; the checking
//! thread verifies the checksums where the bytes lie and recomputes the parity (into reused
//! buffers) while the next parts are on their way, also across the admin lock's steps
//! ([`Pipeline`]). With [`ScrubOptions::checksums_only`] a stripe whose every chunk matched its
//! checksum skips the parity check.

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use ecstack_device::AlignedBuf;

use crate::core::Core;
use crate::io::{Rd, Wr, MAX_MERGE};
use crate::scheme::UpdateScheme;
use crate::Result;

/// How to scrub.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrubOptions {
    /// Write repaired chunks back (false: report only).
    pub repair: bool,
    /// Data stripes checked per step; the array's writers wait for one step at most.
    pub batch_stripes: usize,
    /// Read bandwidth limit in MB/s (10^6 bytes) over the main devices; 0 = none.
    pub mb_per_s_max: f64,
    /// The cheap mode: a stripe whose every chunk was read and matched its known checksum is
    /// taken as consistent without recomputing its parity (its chunks are what was written, and
    /// what was written was consistent). Stripes with a chunk that failed its checksum, has none
    /// or could not be read get the full check. Off (the default): every stripe's parity is
    /// recomputed and compared.
    pub checksums_only: bool,
}

impl Default for ScrubOptions {
    fn default() -> Self {
        ScrubOptions {
            repair: true,
            batch_stripes: 256,
            mb_per_s_max: 0.0,
            checksums_only: false,
        }
    }
}

/// A stripe scrub found wrong and could not repair (or was told not to).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScrubProblem {
    pub stripe: u64,
    pub problem: String,
}

/// Most problems a report lists one by one (the count covers all of them).
pub const SCRUB_PROBLEMS_LISTED_MAX: usize = 100;

/// What one scrub did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScrubReport {
    /// Written data stripes checked.
    pub stripes: u64,
    /// Chunks read from the main devices.
    pub chunks_read: u64,
    pub bytes_read: u64,
    /// Stripes found wrong: a chunk failed its checksum, or the parity did not match the data.
    pub inconsistent_stripes: u64,
    /// Chunks that failed their checksum.
    #[serde(default)]
    pub checksum_errors: u64,
    /// Chunks whose checksum was not known and that got one from a consistent stripe.
    #[serde(default)]
    pub checksums_learned: u64,
    /// Of those, the stripes repaired and the chunks rewritten.
    pub repaired_stripes: u64,
    pub repaired_chunks: u64,
    /// Stripes found wrong and not repaired (bad chunks not locatable, or `repair` off).
    pub unrepaired_stripes: u64,
    /// Stripes with exactly k chunks readable: nothing to check them against.
    pub unverifiable_stripes: u64,
    /// Stripes with fewer than k chunks readable.
    pub unreadable_stripes: u64,
    /// Stripes with a parity chunk that holds nothing yet (skipped).
    pub skipped_stripes: u64,
    /// The first [`SCRUB_PROBLEMS_LISTED_MAX`] stripes not repaired, with the reason.
    pub problems: Vec<ScrubProblem>,
    /// Parity commits run before steps so every parity reflects its data (eplog, pl).
    pub commits: u64,
    pub repair: bool,
    /// Run with [`ScrubOptions::checksums_only`].
    #[serde(default)]
    pub checksums_only: bool,
    /// Stripes taken as consistent by their checksums alone, parity not recomputed
    /// ([`ScrubOptions::checksums_only`]).
    #[serde(default)]
    pub parity_skipped_stripes: u64,
    pub seconds: f64,
    /// Read throughput: bytes read / seconds, MB/s (10^6).
    pub mb_per_s: f64,
}

impl ScrubReport {
    fn problem(&mut self, stripe: u64, problem: String) {
        tracing::warn!(stripe, "scrub: {problem}");
        if self.problems.len() < SCRUB_PROBLEMS_LISTED_MAX {
            self.problems.push(ScrubProblem { stripe, problem });
        }
    }

    /// Whether the array was found consistent (or repaired to consistency).
    pub fn clean(&self) -> bool {
        self.unrepaired_stripes == 0 && self.unreadable_stripes == 0
    }
}

/// The verdict on one stripe.
#[derive(Debug, PartialEq)]
enum Verdict {
    Clean,
    /// Exactly k chunks known: nothing to check against.
    Unverifiable,
    /// Fewer than k chunks known.
    Unreadable(usize),
    /// The located bad chunks: (position, correct contents).
    Located(Vec<(usize, Vec<u8>)>),
    /// A mismatch that cannot be located without doubt.
    Mismatch(String),
}

/// Whether the `known` chunks of `shards` are one codeword: decode from the first k of them and
/// compare the rest. Returns the decoded stripe when they are.
fn consistent(core: &Core, shards: &[&[u8]], known: &[usize]) -> Result<Option<Vec<Vec<u8>>>> {
    let g = &core.geo;
    let basis = &known[..g.k];
    let mut work: Vec<Vec<u8>> = shards.iter().map(|s| s.to_vec()).collect();
    let erased: Vec<usize> = (0..g.n).filter(|p| !basis.contains(p)).collect();
    {
        let mut refs: Vec<&mut [u8]> = work.iter_mut().map(|v| v.as_mut_slice()).collect();
        core.code.reconstruct_in_place(&mut refs, &erased)?;
    }
    let same = known[g.k..]
        .iter()
        .all(|&p| work[p].as_slice() == shards[p]);
    Ok(same.then_some(work))
}

/// Whether the parity chunks of `shards` are the encoding of its data chunks: a fresh encode into
/// `parity` (reused between stripes) by the code's kernels at the process's best SIMD level
/// (`ecstack_codes::Simd::active`), compared with the parity read.
fn parity_matches(core: &Core, shards: &[&[u8]], parity: &mut Vec<Vec<u8>>) -> Result<bool> {
    let g = &core.geo;
    parity.resize_with(g.m, Vec::new);
    for p in parity.iter_mut() {
        p.resize(g.chunk as usize, 0);
    }
    {
        let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        core.code.encode(&shards[..g.k], &mut refs)?;
    }
    Ok(parity
        .iter()
        .zip(&shards[g.k..])
        .all(|(a, b)| a.as_slice() == *b))
}

/// The `t`-element subsets of `from`, in lexicographic order.
fn subsets(from: &[usize], t: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut idx: Vec<usize> = (0..t).collect();
    if t == 0 || t > from.len() {
        return out;
    }
    loop {
        out.push(idx.iter().map(|&i| from[i]).collect());
        // Advance the rightmost index that can move.
        let mut i = t;
        while i > 0 && idx[i - 1] == from.len() - t + i - 1 {
            i -= 1;
        }
        if i == 0 {
            return out;
        }
        idx[i - 1] += 1;
        for j in i..t {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

/// The chunks at `crc_bad` (they failed their checksum) with their bytes from the decoded stripe.
fn decoded(crc_bad: &[usize], work: &[Vec<u8>]) -> Vec<(usize, Vec<u8>)> {
    crc_bad.iter().map(|&p| (p, work[p].clone())).collect()
}

/// Check one stripe: `known[p]` says whether position p's contents are known (read and not failing
/// its checksum, or a data chunk that reads as zeros); `stored[p]` whether it is a chunk on a
/// device (a repair candidate); `crc_bad` lists the chunks that failed their checksum (erasures
/// to repair).
fn check_stripe(
    core: &Core,
    shards: &[&[u8]],
    known: &[bool],
    stored: &[bool],
    crc_bad: &[usize],
    parity: &mut Vec<Vec<u8>>,
) -> Result<Verdict> {
    let g = &core.geo;
    let have: Vec<usize> = (0..g.n).filter(|&p| known[p]).collect();
    if have.len() < g.k {
        return Ok(Verdict::Unreadable(have.len()));
    }
    if have.len() == g.k && crc_bad.is_empty() {
        return Ok(Verdict::Unverifiable);
    }
    if have.len() == g.n && parity_matches(core, shards, parity)? {
        // The common case, every chunk read and consistent: a fresh encode of the data equals the
        // parity read (what `consistent` finds too, without copying the stripe).
        return Ok(Verdict::Clean);
    }
    if let Some(work) = consistent(core, shards, &have)? {
        return Ok(match crc_bad.is_empty() {
            true => Verdict::Clean,
            false => Verdict::Located(decoded(crc_bad, &work)),
        });
    }
    let missing = g.n - have.len();
    let locatable = (g.m - missing) / 2;
    let candidates: Vec<usize> = have.iter().copied().filter(|&p| stored[p]).collect();
    for t in 1..=locatable {
        let mut found: Vec<(Vec<usize>, Vec<Vec<u8>>)> = Vec::new();
        for bad in subsets(&candidates, t) {
            let rest: Vec<usize> = have.iter().copied().filter(|p| !bad.contains(p)).collect();
            if let Some(fixed) = consistent(core, shards, &rest)? {
                found.push((bad, fixed));
                if found.len() > 1 {
                    break;
                }
            }
        }
        match found.len() {
            0 => continue,
            1 => {
                let (bad, fixed) = found.pop().expect("one");
                let mut fixes = decoded(crc_bad, &fixed);
                fixes.extend(bad.into_iter().map(|p| (p, fixed[p].clone())));
                return Ok(Verdict::Located(fixes));
            }
            _ => {
                return Ok(Verdict::Mismatch(format!(
                    "parity mismatch: more than one set of {t} chunks explains it; not repaired"
                )))
            }
        }
    }
    Ok(Verdict::Mismatch(format!(
        "parity mismatch that cannot be located: {} chunks readable of {}, the code locates at most {locatable} bad chunks",
        have.len(),
        g.n
    )))
}

/// Bytes of each device one read part covers at most: a step is read in parts of
/// `SCRUB_READ_BYTES / chunk` stripes (at least 1, at most the step), one request per run of
/// consecutive chunk slots on a device.
pub(crate) const SCRUB_READ_BYTES: u64 = 512 << 10;
/// Read-ahead threads (each reads one part at a time through its own io_uring ring), and so the
/// parts being read while one is checked.
const SCRUB_READERS: usize = 2;

/// The stripes of one read part, as planned and read: every stored chunk of the part lands in one
/// aligned buffer per device (the device's chunks of the part in slot order, so that consecutive
/// slots are one request), which the checker reads in place; parts and their buffers are reused.
pub(crate) struct Part {
    /// The part's stripes, each with the committed layout it was planned with (None: not written).
    stripes: Vec<(u64, Option<Vec<Option<u64>>>)>,
    /// [`Devs::generation`](crate::io::Devs::generation) when it was planned.
    generation: u64,
    /// Per device: its chunks of the part, one after another in slot order.
    bufs: Vec<AlignedBuf>,
    /// Per stripe and position (`i * n + p`): where the chunk is in its device's buffer, if read.
    at: Vec<Option<u32>>,
    /// The reads: (device, first slot, chunks, first chunk in the device's buffer).
    runs: Vec<(usize, u64, usize, usize)>,
    /// Per run: whether it was read.
    ok: Vec<bool>,
}

impl Part {
    fn new() -> Part {
        Part {
            stripes: Vec::new(),
            generation: 0,
            bufs: Vec::new(),
            at: Vec::new(),
            runs: Vec::new(),
            ok: Vec::new(),
        }
    }
}

/// Plan `part` for `stripes`: their committed layouts (stripes whose parity holds nothing yet are
/// not read), and one run per device for each range of consecutive slots. Call under the admin
/// lock: the generation taken here is what the checker compares.
fn plan_part(core: &Core, scheme: &dyn UpdateScheme, stripes: &[u64], part: &mut Part) {
    let g = &core.geo;
    let c = g.chunk as usize;
    part.generation = core.devs.generation();
    part.stripes.clear();
    part.runs.clear();
    part.at.clear();
    part.at.resize(stripes.len() * g.n, None);
    let mut per_dev: Vec<Vec<(u64, usize)>> = vec![Vec::new(); core.devs.len()];
    for (i, &s) in stripes.iter().enumerate() {
        let layout = scheme.committed_layout(core, s);
        if let Some(l) = layout
            .as_ref()
            .filter(|l| l[g.k..].iter().all(Option::is_some))
        {
            for (p, slot) in l.iter().enumerate() {
                let d = g.dev_of(s, p);
                if let (Some(slot), false) = (slot, core.devs.is_failed(d)) {
                    per_dev[d].push((*slot, i * g.n + p));
                }
            }
        }
        part.stripes.push((s, layout));
    }
    if part.bufs.len() < per_dev.len() {
        part.bufs.resize_with(per_dev.len(), || AlignedBuf::new(0));
    }
    for (d, mut chunks) in per_dev.into_iter().enumerate() {
        chunks.sort_unstable();
        if part.bufs[d].len() < chunks.len() * c {
            part.bufs[d] = AlignedBuf::new(chunks.len() * c);
        }
        for (j, &(slot, key)) in chunks.iter().enumerate() {
            part.at[key] = Some(j as u32);
            match part.runs.last_mut() {
                Some(r)
                    if r.0 == d
                        && r.1 + r.2 as u64 == slot
                        && ((r.2 + 1) * c) as u64 <= MAX_MERGE =>
                {
                    r.2 += 1
                }
                _ => part.runs.push((d, slot, 1, j)),
            }
        }
    }
    part.ok.clear();
    part.ok.resize(part.runs.len(), false);
}

/// Read a planned part: every run straight into its device's buffer, all devices in one batch
/// (`Devs::read_raw`: no verification, no copy; the checker verifies).
fn read_part(core: &Core, part: &mut Part) {
    let c = core.geo.chunk as usize;
    let Part { bufs, runs, ok, .. } = part;
    let mut rest: Vec<(&mut [u8], usize)> =
        bufs.iter_mut().map(|b| (b.as_mut_slice(), 0)).collect();
    let mut ops = Vec::with_capacity(runs.len());
    for &(d, slot, chunks, first) in runs.iter() {
        // A device's runs come in buffer order: cut each off the front of what is left.
        let (buf, at) = std::mem::take(&mut rest[d]);
        let (_, tail) = buf.split_at_mut(first * c - at);
        let (run, tail) = tail.split_at_mut(chunks * c);
        rest[d] = (tail, (first + chunks) * c);
        ops.push(Rd::new(d, core.geo.off(slot), run));
    }
    core.devs.read_raw(&mut ops);
    for (o, ok) in ops.iter().zip(ok.iter_mut()) {
        *ok = o.ok;
    }
}

/// Whether what `part` read is still what the devices hold: no write, failure or replacement
/// since it was planned, and every stripe's committed layout the same.
fn still_valid(core: &Core, scheme: &dyn UpdateScheme, part: &Part) -> bool {
    part.generation == core.devs.generation()
        && part
            .stripes
            .iter()
            .all(|(s, l)| scheme.committed_layout(core, *s) == *l)
}

/// A read-ahead thread: it reads the parts sent to it, in order, and sends them back read.
struct Reader {
    jobs: SyncSender<Part>,
    done: Receiver<Part>,
}

/// Scrub's reading and checking: parts of each step are read ahead by [`SCRUB_READERS`] threads
/// (round robin, so that while one part is checked the next ones are on their way to the devices),
/// and the first parts of the next step are read while the last of this one is checked. Parts are
/// planned under the admin lock; a part whose devices changed before it is checked (a write, a
/// failure, a repair of an earlier part, the next step's parity commit: [`still_valid`]) is read
/// again under the lock. Without parallel device I/O (the simulator) every part is read inline.
pub(crate) struct Pipeline<'e> {
    core: &'e Core,
    scheme: &'e dyn UpdateScheme,
    readers: Vec<Reader>,
    next_reader: usize,
    /// Parts sent to the readers, in the order they are checked: (reader, first stripe).
    inflight: VecDeque<(usize, u64)>,
    pool: Vec<Part>,
    part_stripes: usize,
    /// Reused by the checks: the parity a fresh encode gives, a chunk of zeros.
    parity: Vec<Vec<u8>>,
    zeros: Vec<u8>,
}

impl<'e> Pipeline<'e> {
    /// Start the read-ahead threads in `scope` (none when `threaded` is off); they end when the
    /// pipeline is dropped.
    pub(crate) fn new<'s>(
        scope: &'s std::thread::Scope<'s, 'e>,
        core: &'e Core,
        scheme: &'e dyn UpdateScheme,
        batch_stripes: usize,
        threaded: bool,
    ) -> Pipeline<'e>
    where
        'e: 's,
    {
        let readers = (0..SCRUB_READERS)
            .filter(|_| threaded)
            .map(|_| {
                let (jobs, job_rx) = sync_channel::<Part>(SCRUB_READERS + 1);
                let (done_tx, done) = sync_channel::<Part>(SCRUB_READERS + 1);
                scope.spawn(move || {
                    for mut part in job_rx {
                        read_part(core, &mut part);
                        if done_tx.send(part).is_err() {
                            return;
                        }
                    }
                });
                Reader { jobs, done }
            })
            .collect();
        Pipeline {
            core,
            scheme,
            readers,
            next_reader: 0,
            inflight: VecDeque::new(),
            pool: Vec::new(),
            part_stripes: ((SCRUB_READ_BYTES / core.geo.chunk.max(1)) as usize)
                .clamp(1, batch_stripes.max(1)),
            parity: Vec::new(),
            zeros: vec![0u8; core.geo.chunk as usize],
        }
    }

    fn ended() -> crate::ArrayError {
        crate::ArrayError::Admin("scrub read-ahead thread ended".into())
    }

    /// Plan `stripes` and hand them to the next reader.
    fn send(&mut self, stripes: &[u64]) -> Result<()> {
        let mut part = self.pool.pop().unwrap_or_else(Part::new);
        plan_part(self.core, self.scheme, stripes, &mut part);
        let r = self.next_reader;
        self.next_reader = (r + 1) % self.readers.len();
        self.readers[r].jobs.send(part).map_err(|_| Self::ended())?;
        self.inflight.push_back((r, stripes[0]));
        Ok(())
    }

    /// Check the data stripes `step` (the caller holds the admin lock: no writes, no pending parity
    /// work), adding to `report`; `next` is the next step's stripes, whose first parts are read
    /// ahead meanwhile (empty after the last step).
    pub(crate) fn step(
        &mut self,
        step: &[u64],
        next: &[u64],
        opts: &ScrubOptions,
        report: &mut ScrubReport,
    ) -> Result<()> {
        let parts: Vec<&[u64]> = step.chunks(self.part_stripes).collect();
        let ahead: Vec<&[u64]> = next.chunks(self.part_stripes).collect();
        for (j, stripes) in parts.iter().enumerate() {
            if !self.readers.is_empty() {
                // This part and SCRUB_READERS more on their way: the rest of this step, then the
                // next step's.
                let want: Vec<&[u64]> = parts[j..]
                    .iter()
                    .chain(&ahead)
                    .take(self.readers.len() + 1)
                    .copied()
                    .collect();
                for p in want.into_iter().skip(self.inflight.len()) {
                    self.send(p)?;
                }
            }
            let mut part = match self.inflight.pop_front() {
                Some((r, first)) => {
                    let part = self.readers[r].done.recv().map_err(|_| Self::ended())?;
                    debug_assert_eq!(part.stripes.first().map(|x| x.0), Some(first));
                    part
                }
                None => {
                    let mut part = self.pool.pop().unwrap_or_else(Part::new);
                    plan_part(self.core, self.scheme, stripes, &mut part);
                    read_part(self.core, &mut part);
                    part
                }
            };
            if !still_valid(self.core, self.scheme, &part) {
                plan_part(self.core, self.scheme, stripes, &mut part);
                read_part(self.core, &mut part);
            }
            let checked = self.check_part(&part, opts, report);
            self.pool.push(part);
            checked?;
        }
        Ok(())
    }

    /// Verify, check and repair a part that was read.
    fn check_part(
        &mut self,
        part: &Part,
        opts: &ScrubOptions,
        report: &mut ScrubReport,
    ) -> Result<()> {
        let core = self.core;
        let g = &core.geo;
        let c = g.chunk as usize;
        let crcs = core.devs.crcs().filter(|t| t.enabled());
        // Per device and chunk of its buffer: whether its run was read.
        let mut read_ok: Vec<Vec<bool>> = vec![Vec::new(); part.bufs.len()];
        for (&(d, _, chunks, first), &ok) in part.runs.iter().zip(&part.ok) {
            if read_ok[d].len() < first + chunks {
                read_ok[d].resize(first + chunks, false);
            }
            read_ok[d][first..first + chunks].fill(ok);
        }
        let mut writes: Vec<(u64, usize, u64, Vec<u8>)> = Vec::new();
        for (i, (s, layout)) in part.stripes.iter().enumerate() {
            let s = *s;
            let Some(layout) = layout else { continue };
            if layout[g.k..].iter().any(|p| p.is_none()) {
                report.skipped_stripes += 1;
                continue;
            }
            report.stripes += 1;
            // A chunk that reads as zeros is known; a stored one once read and not failing its
            // checksum. Every stored chunk read with a known, matching checksum: `all_crc`.
            let mut known: Vec<bool> = layout.iter().map(|l| l.is_none()).collect();
            let mut crc_bad: Vec<usize> = Vec::new();
            let mut all_crc = true;
            for (p, slot) in layout.iter().enumerate() {
                let Some(slot) = *slot else { continue };
                let d = g.dev_of(s, p);
                let Some(j) = part.at[i * g.n + p].map(|j| j as usize) else {
                    all_crc = false;
                    continue;
                };
                if !read_ok[d].get(j).copied().unwrap_or(false) {
                    all_crc = false;
                    continue;
                }
                report.chunks_read += 1;
                report.bytes_read += c as u64;
                let bytes = &part.bufs[d].as_slice()[j * c..(j + 1) * c];
                let had = crcs.is_some_and(|t| t.get(d, slot).is_some());
                if crcs.is_none_or(|t| t.verify(d, g.off(slot), bytes)) {
                    known[p] = true;
                    all_crc &= had;
                } else {
                    crc_bad.push(p);
                    all_crc = false;
                }
            }
            // Those that failed their checksum are read once more: a flip on the way reads right
            // the second time (as on the read path), one on the device fails again (an erasure).
            let mut again: Vec<(usize, Vec<u8>)> = Vec::new();
            if !crc_bad.is_empty() {
                let mut bufs: Vec<Vec<u8>> = crc_bad.iter().map(|_| vec![0u8; c]).collect();
                let mut ops: Vec<Rd<'_>> = crc_bad
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|(&p, b)| {
                        let slot = layout[p].expect("stored");
                        Rd::new(g.dev_of(s, p), g.off(slot), b.as_mut_slice())
                    })
                    .collect();
                core.devs.read(&mut ops);
                let oks: Vec<bool> = ops.iter().map(|o| o.ok).collect();
                drop(ops);
                let was = std::mem::take(&mut crc_bad);
                for ((p, ok), b) in was.into_iter().zip(oks).zip(bufs) {
                    let slot = layout[p].expect("stored");
                    if ok {
                        known[p] = true;
                        again.push((p, b));
                    } else if core.devs.is_bad(g.dev_of(s, p), slot) {
                        crc_bad.push(p);
                    }
                }
            }
            report.checksum_errors += crc_bad.len() as u64;
            if opts.checksums_only && all_crc {
                // Every chunk is what was written: the parity was consistent when written.
                report.parity_skipped_stripes += 1;
                continue;
            }
            let shards: Vec<&[u8]> = (0..g.n)
                .map(|p| {
                    if let Some((_, b)) = again.iter().find(|(q, _)| *q == p) {
                        return b.as_slice();
                    }
                    match (layout[p], part.at[i * g.n + p]) {
                        (Some(_), Some(j)) if known[p] => {
                            let (d, j) = (g.dev_of(s, p), j as usize);
                            &part.bufs[d].as_slice()[j * c..(j + 1) * c]
                        }
                        _ => self.zeros.as_slice(),
                    }
                })
                .collect();
            let stored: Vec<bool> = layout.iter().map(|l| l.is_some()).collect();
            match check_stripe(core, &shards, &known, &stored, &crc_bad, &mut self.parity)? {
                Verdict::Clean => {
                    // Every chunk read and consistent: the ones without a checksum get theirs.
                    if let Some(crcs) = crcs {
                        for (p, slot) in layout.iter().enumerate() {
                            let (Some(slot), true) = (slot, known[p]) else {
                                continue;
                            };
                            let d = g.dev_of(s, p);
                            if crcs.get(d, *slot).is_none() {
                                crcs.learn(d, *slot, shards[p]);
                                report.checksums_learned += 1;
                            }
                        }
                    }
                }
                Verdict::Unverifiable => report.unverifiable_stripes += 1,
                Verdict::Unreadable(have) => {
                    report.unreadable_stripes += 1;
                    report.problem(s, format!("only {have} chunks readable, {} needed", g.k));
                }
                Verdict::Mismatch(why) => {
                    report.inconsistent_stripes += 1;
                    report.unrepaired_stripes += 1;
                    report.problem(s, why);
                }
                Verdict::Located(fixes) => {
                    report.inconsistent_stripes += 1;
                    let what: Vec<String> = fixes
                        .iter()
                        .map(|(p, _)| {
                            let how = match crc_bad.contains(p) {
                                true => "checksum",
                                false => "parity",
                            };
                            format!("position {p} on device {} ({how})", g.dev_of(s, *p))
                        })
                        .collect();
                    if !opts.repair {
                        report.unrepaired_stripes += 1;
                        report.problem(
                            s,
                            format!(
                                "bad chunk at {} (not repaired: report only)",
                                what.join(", ")
                            ),
                        );
                        continue;
                    }
                    tracing::warn!(
                        stripe = s,
                        "scrub: repairing bad chunk at {}",
                        what.join(", ")
                    );
                    for (p, bytes) in fixes {
                        let slot = layout[p].expect("a located chunk is stored");
                        writes.push((s, g.dev_of(s, p), slot, bytes));
                    }
                }
            }
        }
        if !writes.is_empty() {
            repair(core, &writes, report);
        }
        Ok(())
    }
}

/// Write the located chunks back, flush, and count what was repaired.
fn repair(core: &Core, writes: &[(u64, usize, u64, Vec<u8>)], report: &mut ScrubReport) {
    let g = &core.geo;
    let was_bad: Vec<bool> = writes
        .iter()
        .map(|(_, d, slot, _)| core.devs.is_bad(*d, *slot))
        .collect();
    let mut ops: Vec<Wr<'_>> = writes
        .iter()
        .map(|(_, d, slot, b)| Wr::new(*d, g.off(*slot), b))
        .collect();
    core.devs.write(&mut ops);
    if let Some(crcs) = core.devs.crcs() {
        let n = ops
            .iter()
            .zip(&was_bad)
            .filter(|(o, b)| o.ok && **b)
            .count();
        crcs.repaired
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
    core.devs.flush_all();
    let mut failed: Vec<u64> = Vec::new();
    for (o, (s, d, _, _)) in ops.iter().zip(writes) {
        if o.ok {
            report.repaired_chunks += 1;
        } else if !failed.contains(s) {
            failed.push(*s);
            report.problem(*s, format!("repair write to device {d} failed"));
        }
    }
    let mut repaired: Vec<u64> = writes.iter().map(|w| w.0).collect();
    repaired.dedup();
    report.unrepaired_stripes += failed.len() as u64;
    report.repaired_stripes += repaired.iter().filter(|s| !failed.contains(s)).count() as u64;
}

#[cfg(test)]
mod tests {
    use super::subsets;

    #[test]
    fn subsets_lists_every_combination_once() {
        assert_eq!(subsets(&[3, 5, 7], 1), vec![vec![3], vec![5], vec![7]]);
        assert_eq!(
            subsets(&[1, 2, 3, 4], 2),
            vec![
                vec![1, 2],
                vec![1, 3],
                vec![1, 4],
                vec![2, 3],
                vec![2, 4],
                vec![3, 4]
            ]
        );
        assert_eq!(subsets(&[1, 2], 3), Vec::<Vec<usize>>::new());
        assert_eq!(subsets(&[1, 2], 0), Vec::<Vec<usize>>::new());
    }
}
