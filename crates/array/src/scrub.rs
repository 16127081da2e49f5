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

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use crate::core::Core;
use crate::io::{Rd, Wr};
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
}

impl Default for ScrubOptions {
    fn default() -> Self {
        ScrubOptions {
            repair: true,
            batch_stripes: 256,
            mb_per_s_max: 0.0,
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
fn consistent(core: &Core, shards: &[Vec<u8>], known: &[usize]) -> Result<Option<Vec<Vec<u8>>>> {
    let g = &core.geo;
    let basis = &known[..g.k];
    let mut work: Vec<Vec<u8>> = shards.to_vec();
    let erased: Vec<usize> = (0..g.n).filter(|p| !basis.contains(p)).collect();
    {
        let mut refs: Vec<&mut [u8]> = work.iter_mut().map(|v| v.as_mut_slice()).collect();
        core.code.reconstruct_in_place(&mut refs, &erased)?;
    }
    let same = known[g.k..].iter().all(|&p| work[p] == shards[p]);
    Ok(same.then_some(work))
}

/// Whether the parity chunks of `shards` are the encoding of its data chunks.
fn parity_matches(core: &Core, shards: &[Vec<u8>]) -> Result<bool> {
    let g = &core.geo;
    let data: Vec<&[u8]> = shards[..g.k].iter().map(|v| v.as_slice()).collect();
    let mut parity = vec![vec![0u8; g.chunk as usize]; g.m];
    {
        let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        core.code.encode(&data, &mut refs)?;
    }
    Ok(parity.iter().zip(&shards[g.k..]).all(|(a, b)| a == b))
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
    shards: &[Vec<u8>],
    known: &[bool],
    stored: &[bool],
    crc_bad: &[usize],
) -> Result<Verdict> {
    let g = &core.geo;
    let have: Vec<usize> = (0..g.n).filter(|&p| known[p]).collect();
    if have.len() < g.k {
        return Ok(Verdict::Unreadable(have.len()));
    }
    if have.len() == g.k && crc_bad.is_empty() {
        return Ok(Verdict::Unverifiable);
    }
    if have.len() == g.n && parity_matches(core, shards)? {
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

/// Data stripes per read of a step: a step of `ScrubOptions::batch_stripes` is read in parts of
/// this many stripes, the next part (on the read-ahead thread) while the current one is checked.
pub(crate) const SCRUB_READ_STRIPES: usize = 64;

/// One stripe of a read part: its committed layout, its chunks as read, which are known (read and
/// matching their checksum, or a data chunk that reads as zeros) and which failed their checksum.
struct Item {
    s: u64,
    layout: Vec<Option<u64>>,
    shards: Vec<Vec<u8>>,
    known: Vec<bool>,
    crc_bad: Vec<usize>,
    /// Chunks read (or that failed their checksum) for the report.
    read: u64,
}

/// Read the stored chunks of `items` (every device in parallel, checksums verified by
/// `Devs::read`), and once more those that failed their checksum: a flip on the way reads right
/// the second time (as the read path does: a chunk that checks out is good again), one on the
/// device fails again and is an erasure.
fn read_items(core: &Core, items: &mut [Item]) {
    let g = &core.geo;
    for pass in 0..2 {
        let mut ops = Vec::new();
        let mut who = Vec::new();
        for (ii, it) in items.iter_mut().enumerate() {
            let again = std::mem::take(&mut it.crc_bad);
            for (p, buf) in it.shards.iter_mut().enumerate() {
                let d = g.dev_of(it.s, p);
                let Some(slot) = it.layout[p] else { continue };
                if core.devs.is_failed(d) || (pass == 1 && !again.contains(&p)) {
                    continue;
                }
                ops.push(Rd::new(d, g.off(slot), buf.as_mut_slice()));
                who.push((ii, p));
            }
        }
        if ops.is_empty() {
            return;
        }
        core.devs.read(&mut ops);
        let ok: Vec<bool> = ops.iter().map(|o| o.ok).collect();
        drop(ops);
        for (&ok, &(ii, p)) in ok.iter().zip(&who) {
            let it = &mut items[ii];
            let bad = !ok
                && core
                    .devs
                    .is_bad(g.dev_of(it.s, p), it.layout[p].expect("read"));
            if pass == 0 && (ok || bad) {
                it.read += 1;
            }
            if ok {
                it.known[p] = true;
            } else if bad {
                it.crc_bad.push(p);
            }
        }
    }
}

/// The read-ahead thread of a scrub: it reads the parts the scrub sends it, in order, and sends
/// them back read (one thread for the whole scrub, so its io_uring ring and buffers are reused).
pub(crate) struct ReadAhead {
    jobs: SyncSender<Vec<Item>>,
    done: Receiver<Vec<Item>>,
}

impl ReadAhead {
    /// Start the thread in `scope`; it ends when the `ReadAhead` is dropped.
    pub(crate) fn spawn<'s, 'e: 's>(
        scope: &'s std::thread::Scope<'s, 'e>,
        core: &'e Core,
    ) -> ReadAhead {
        let (jobs, job_rx) = sync_channel::<Vec<Item>>(2);
        let (done_tx, done) = sync_channel::<Vec<Item>>(2);
        scope.spawn(move || {
            for mut items in job_rx {
                read_items(core, &mut items);
                if done_tx.send(items).is_err() {
                    return;
                }
            }
        });
        ReadAhead { jobs, done }
    }
}

/// Scrub the data stripes `stripes` (the caller holds the array still: no writes, no pending
/// parity work), adding to `report`. With a read-ahead thread, the stripes are read in parts of
/// [`SCRUB_READ_STRIPES`], the next part while the current one is checked and repaired (the parts
/// are disjoint, so a repair never races a read of its stripe); without, on this thread.
pub(crate) fn scrub_stripes(
    core: &Core,
    scheme: &dyn UpdateScheme,
    stripes: &[u64],
    repair: bool,
    report: &mut ScrubReport,
    read_ahead: Option<&ReadAhead>,
) -> Result<()> {
    let Some(ra) = read_ahead else {
        let mut items = plan_items(core, scheme, stripes, report, &mut Vec::new());
        read_items(core, &mut items);
        return check_items(core, items, repair, report).map(|_| ());
    };
    let parts: Vec<&[u64]> = stripes.chunks(SCRUB_READ_STRIPES).collect();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut sent = 0;
    let send = |i: usize, pool: &mut Vec<Vec<u8>>, report: &mut ScrubReport| -> Result<()> {
        let items = plan_items(core, scheme, parts[i], report, pool);
        ra.jobs
            .send(items)
            .map_err(|_| crate::ArrayError::Admin("scrub read-ahead thread ended".into()))
    };
    // Two parts in flight at most: the one being checked and the one being read.
    let mut result = Ok(());
    for i in 0..parts.len() {
        while sent < parts.len() && sent <= i + 1 {
            send(sent, &mut pool, report)?;
            sent += 1;
        }
        let items = ra
            .done
            .recv()
            .map_err(|_| crate::ArrayError::Admin("scrub read-ahead thread ended".into()))?;
        match result {
            Ok(()) => match check_items(core, items, repair, report) {
                Ok(bufs) => pool.extend(bufs),
                Err(e) => result = Err(e),
            },
            // Receive what was sent all the same: the next step must not find it.
            Err(_) => {}
        }
    }
    result
}

/// The stripes of `stripes` to check, with buffers for their chunks (from `pool` when it has
/// them); stripes whose parity holds nothing yet are counted as skipped.
fn plan_items(
    core: &Core,
    scheme: &dyn UpdateScheme,
    stripes: &[u64],
    report: &mut ScrubReport,
    pool: &mut Vec<Vec<u8>>,
) -> Vec<Item> {
    let g = &core.geo;
    let c = g.chunk as usize;
    let mut items = Vec::new();
    for &s in stripes {
        let Some(layout) = scheme.committed_layout(core, s) else {
            continue;
        };
        if layout[g.k..].iter().any(|p| p.is_none()) {
            report.skipped_stripes += 1;
            continue;
        }
        let known: Vec<bool> = (0..g.n).map(|p| layout[p].is_none()).collect();
        let shards = (0..g.n)
            .map(|p| match (layout[p], pool.pop()) {
                // A chunk that reads as zeros must hold zeros; a read one is overwritten.
                (Some(_), Some(b)) => b,
                (_, b) => {
                    if let Some(b) = b {
                        pool.push(b);
                    }
                    vec![0u8; c]
                }
            })
            .collect();
        items.push(Item {
            s,
            layout,
            shards,
            known,
            crc_bad: Vec::new(),
            read: 0,
        });
    }
    items
}

/// Check and repair a part that was read; returns its chunk buffers for reuse.
fn check_items(
    core: &Core,
    items: Vec<Item>,
    repair: bool,
    report: &mut ScrubReport,
) -> Result<Vec<Vec<u8>>> {
    let g = &core.geo;
    let c = g.chunk as usize;
    for it in &items {
        report.chunks_read += it.read;
        report.bytes_read += it.read * c as u64;
        report.checksum_errors += it.crc_bad.len() as u64;
    }
    let mut writes: Vec<(u64, usize, u64, Vec<u8>)> = Vec::new();
    for Item {
        s,
        layout,
        shards,
        known,
        crc_bad,
        ..
    } in &items
    {
        report.stripes += 1;
        let stored: Vec<bool> = layout.iter().map(|l| l.is_some()).collect();
        match check_stripe(core, shards, known, &stored, crc_bad)? {
            Verdict::Clean => {
                // Every chunk read and consistent: the ones without a checksum get theirs.
                if let Some(crcs) = core.devs.crcs().filter(|c| c.enabled()) {
                    for (p, slot) in layout.iter().enumerate() {
                        let (Some(slot), true) = (slot, known[p]) else {
                            continue;
                        };
                        let d = g.dev_of(*s, p);
                        if crcs.get(d, *slot).is_none() {
                            crcs.learn(d, *slot, &shards[p]);
                            report.checksums_learned += 1;
                        }
                    }
                }
            }
            Verdict::Unverifiable => report.unverifiable_stripes += 1,
            Verdict::Unreadable(have) => {
                report.unreadable_stripes += 1;
                report.problem(*s, format!("only {have} chunks readable, {} needed", g.k));
            }
            Verdict::Mismatch(why) => {
                report.inconsistent_stripes += 1;
                report.unrepaired_stripes += 1;
                report.problem(*s, why);
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
                        format!("position {p} on device {} ({how})", g.dev_of(*s, *p))
                    })
                    .collect();
                if !repair {
                    report.unrepaired_stripes += 1;
                    report.problem(
                        *s,
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
                    writes.push((*s, g.dev_of(*s, p), slot, bytes));
                }
            }
        }
    }
    let bufs = || items.into_iter().flat_map(|it| it.shards).collect();
    if writes.is_empty() {
        return Ok(bufs());
    }
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
    for (o, (s, d, _, _)) in ops.iter().zip(&writes) {
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
    Ok(bufs())
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
