//! `ecstack bench ec`: our erasure-code kernels against ISA-L on the same buffers at the same kernel
//! level, one thread, best of interleaved rounds; every result is checked byte for byte (ours against
//! the data, ISA-L against ours). LT and RaptorQ rows: throughput and reception overhead.
//!
//! The peer is the newest ISA-L (feature `isal-new`, ISA-L 2.31 built statically) when built in, else
//! Debian's (feature `isal`, loaded at run time); without either, only our figures are given.

use std::time::Instant;

use ecstack_base::rng::Rng;
use ecstack_codes::{
    new_code_with, new_linear_code_with, CodeKind, CodeOptions, LtCode, LtDecoder, LtParams,
    RaptorQ, RatelessCode, Simd,
};
use serde::Serialize;

use crate::{LabError, Result};

/// What `ecstack bench ec` measures.
#[derive(Clone, Debug)]
pub struct EcBenchConfig {
    /// (k, m, chunk bytes) per row.
    pub rows: Vec<(usize, usize, usize)>,
    /// The code of the RS rows.
    pub kind: CodeKind,
    /// Kernel levels, each supported by this CPU (see [`bench_levels`]).
    pub levels: Vec<Simd>,
    /// Seconds per measurement, on `clock`.
    pub time: f64,
    /// What measurements are timed with.
    pub clock: BenchClock,
    /// Diagnostic: start the i-th buffer made `(i * skew_bytes) % 4096` bytes after its page
    /// boundary instead of on it (16 imitates glibc's heap placement), for both sides alike; 0 (the
    /// default) puts every buffer on a page boundary.
    pub skew_bytes: usize,
    /// Interleaved rounds per measurement; the best round counts, for both sides alike.
    pub rounds: usize,
    /// The LT / RaptorQ rows, if wanted.
    pub rateless: Option<RatelessConfig>,
}

/// The rateless rows: K source blocks of `block` bytes, `trials` random reception orders.
#[derive(Clone, Copy, Debug)]
pub struct RatelessConfig {
    pub k: usize,
    pub block: usize,
    pub trials: usize,
}

/// One figure: one op of one (k, m, chunk) row at one kernel level.
#[derive(Clone, Debug, Serialize)]
pub struct EcRow {
    pub simd: &'static str,
    pub code: String,
    pub k: usize,
    pub m: usize,
    pub chunk: usize,
    pub op: &'static str,
    pub ours_gbps: f64,
    pub isal_gbps: Option<f64>,
    pub ratio: Option<f64>,
}

/// Throughput and reception overhead of one rateless code.
#[derive(Clone, Debug, Serialize)]
pub struct RatelessRow {
    pub code: &'static str,
    pub k: usize,
    pub block: usize,
    pub coded_blocks: usize,
    pub encode_gbps: f64,
    pub decode_gbps: f64,
    pub overhead_mean: f64,
    pub overhead_max: f64,
    pub overhead_trials: usize,
}

/// The clock measurements are timed with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BenchClock {
    /// This thread's CPU time on Linux (time spent descheduled while other processes share the
    /// cores counts for neither side), else wall time.
    #[default]
    Cpu,
    /// Wall time.
    Wall,
}

impl BenchClock {
    /// What figures are timed with on this machine: "CPU time" or "wall time".
    pub fn name(self) -> &'static str {
        if thread_cpu_seconds(self).is_some() {
            "CPU time"
        } else {
            "wall time"
        }
    }
}

/// Everything one run measured.

#[derive(Clone, Debug, Serialize)]
pub struct EcBenchReport {
    pub simd: Vec<&'static str>,
    /// Whether an ISA-L peer was built in.
    pub isal: bool,
    pub peer: Option<&'static str>,
    /// What the figures were timed with ([`BenchClock::name`]).
    pub clock: &'static str,
    pub rows: Vec<EcRow>,
    pub rateless: Vec<RatelessRow>,
}

fn cfg(field: &'static str, msg: impl Into<String>) -> LabError {
    LabError::Config {
        field,
        msg: msg.into(),
    }
}

fn failed(msg: String) -> LabError {
    LabError::Run(msg)
}

/// The name of the ISA-L build compared with, if one is built in.
pub fn peer_name() -> Result<Option<&'static str>> {
    #[cfg(any(feature = "isal", feature = "isal-new"))]
    return Ok(Some(peer()?.name()));
    #[cfg(not(any(feature = "isal", feature = "isal-new")))]
    return Ok(None);
}

/// The levels `arg` names (`None`: every level from avx2 up that this CPU has, or its best;
/// `"all"`: every supported level; else a comma-separated list), each supported by this CPU.
pub fn bench_levels(arg: Option<&str>) -> Result<Vec<Simd>> {
    let supported: Vec<Simd> = Simd::ALL.into_iter().filter(|l| l.supported()).collect();
    match arg {
        None => {
            let v: Vec<Simd> = supported
                .iter()
                .copied()
                .filter(|&l| l >= Simd::Avx2)
                .collect();
            Ok(if v.is_empty() {
                vec![*supported.last().expect("scalar is always supported")]
            } else {
                v
            })
        }
        Some("all") => Ok(supported),
        Some(list) => list
            .split(',')
            .map(|l| {
                let lvl = Simd::parse(l.trim())
                    .ok_or_else(|| cfg("simd", format!("unknown SIMD level '{l}'")))?;
                if !lvl.supported() {
                    return Err(cfg("simd", format!("this CPU does not support {l}")));
                }
                Ok(lvl)
            })
            .collect(),
    }
}

/// Runs the benchmark; `on_row` sees each figure as soon as it is measured (progress for a terminal).
pub fn run(c: &EcBenchConfig, on_row: &mut dyn FnMut(&EcRow)) -> Result<EcBenchReport> {
    // measure() loops until this much time has passed: NaN, infinity or zero would never end well.
    if !(c.time.is_finite() && c.time > 0.0) {
        return Err(cfg(
            "time",
            format!("{}: must be a positive number of seconds", c.time),
        ));
    }
    if c.levels.is_empty() {
        return Err(cfg("simd", "no kernel level to measure"));
    }
    let peer_name = peer_name()?;
    SETTINGS.with(|s| {
        s.set(Settings {
            clock: c.clock,
            skew_bytes: c.skew_bytes,
        })
    });
    let mut out = Vec::new();
    let mut rng = Rng::new(1);
    for &(k, m, chunk) in &c.rows {
        let data = rand_bufs(&mut rng, k, chunk);
        let new = rand_bufs(&mut rng, 1, chunk).remove(0);
        for &level in &c.levels {
            let peer = peer_at(level)?;
            let mut fig = |op: &'static str, (ours, isal): (f64, Option<f64>)| {
                let r = EcRow {
                    simd: level.name(),
                    code: c.kind.name().into(),
                    k,
                    m,
                    chunk,
                    op,
                    ours_gbps: ours,
                    isal_gbps: isal,
                    ratio: isal.map(|i| ours / i),
                };
                on_row(&r);
                out.push(r);
            };
            if c.kind == CodeKind::Rdp {
                bench_rdp_level(c, level, k, m, &data, &new, &mut fig)?;
            } else {
                bench_ec_level(c, level, peer, k, m, &data, &new, &mut fig)?;
            }
        }
    }
    let mut rateless = Vec::new();
    if let Some(r) = c.rateless {
        rateless.push(bench_lt(r.k, r.block, r.trials)?);
        rateless.push(bench_raptorq(r.k, r.block.min(65528), r.trials)?);
    }
    Ok(EcBenchReport {
        simd: c.levels.iter().map(|l| l.name()).collect(),
        isal: peer_name.is_some(),
        peer: peer_name,
        clock: c.clock.name(),
        rows: out,
        rateless,
    })
}

/// Run `f` repeatedly for about `secs`; return GB/s for `bytes` per call.
fn measure(bytes: usize, secs: f64, f: &mut dyn FnMut()) -> f64 {
    f(); // warm caches and page in buffers
    let clock = Clock::start();
    let mut iters = 0u64;
    let mut batch = 1u64;
    loop {
        for _ in 0..batch {
            f();
        }
        iters += batch;
        let el = clock.elapsed();
        if el >= secs {
            return bytes as f64 * iters as f64 / el / 1e9;
        }
        batch = (batch * 2).min(1 << 16);
    }
}

/// The settings of the run in progress on this thread ([`run`] sets them from its config).
#[derive(Clone, Copy, Default)]
struct Settings {
    clock: BenchClock,
    skew_bytes: usize,
}

thread_local! {
    static SETTINGS: std::cell::Cell<Settings> = std::cell::Cell::new(Settings::default());
}

/// The clock of [`measure`] ([`BenchClock`], from the run's config).
struct Clock(Instant, f64, BenchClock);

impl Clock {
    fn start() -> Clock {
        let kind = SETTINGS.with(|s| s.get().clock);
        Clock(
            Instant::now(),
            thread_cpu_seconds(kind).unwrap_or(0.0),
            kind,
        )
    }
    fn elapsed(&self) -> f64 {
        match thread_cpu_seconds(self.2) {
            Some(now) => now - self.1,
            None => self.0.elapsed().as_secs_f64(),
        }
    }
}

fn thread_cpu_seconds(clock: BenchClock) -> Option<f64> {
    if clock == BenchClock::Wall {
        return None;
    }
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write; the clock id is a constant Linux provides.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc == 0 {
            return Some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9);
        }
    }
    None
}

const PAGE: usize = 4096;

/// A buffer whose bytes start on a 4 KiB page boundary. Every shard, parity and delta buffer of the
/// RS rows is one, and both sides of a figure run on the same ones, so no figure depends on where the
/// allocator placed a buffer (glibc serves 1 MiB from fresh mmaps at page + 16 B, or from the heap at
/// any 16-byte offset once earlier rows freed theirs, which moved figures by 2x).
struct PageBuf {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl PageBuf {
    fn zeroed(len: usize) -> PageBuf {
        PageBuf::zeroed_at(len, skew())
    }
    /// `len` zero bytes starting `skew` bytes after a page boundary.
    fn zeroed_at(len: usize, skew: usize) -> PageBuf {
        let raw = vec![0u8; len + PAGE + skew];
        let off = raw.as_ptr().align_offset(PAGE) + skew;
        PageBuf { raw, off, len }
    }
    fn copy_of(b: &[u8]) -> PageBuf {
        let mut p = PageBuf::zeroed(b.len());
        p.copy_from_slice(b);
        p
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.raw[self.off..self.off + self.len]
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.off..self.off + self.len]
    }
}

/// Where the next buffer starts after its page boundary ([`EcBenchConfig::skew_bytes`]).
fn skew() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let step = SETTINGS.with(|s| s.get().skew_bytes);
    let i = NEXT.fetch_add(1, Ordering::Relaxed);
    (i * step) % PAGE
}

fn rand_bufs(rng: &mut Rng, count: usize, len: usize) -> Vec<PageBuf> {
    (0..count)
        .map(|_| {
            let mut v = PageBuf::zeroed(len);
            rng.fill(&mut v);
            v
        })
        .collect()
}

fn zeroed_bufs(count: usize, len: usize) -> Vec<PageBuf> {
    (0..count).map(|_| PageBuf::zeroed(len)).collect()
}

fn slices(bufs: &[PageBuf]) -> Vec<&[u8]> {
    bufs.iter().map(|b| &**b).collect()
}

fn slices_mut(bufs: &mut [PageBuf]) -> Vec<&mut [u8]> {
    bufs.iter_mut().map(|b| &mut **b).collect()
}

/// Shared views of the `survivors` and mutable views of the `erased` buffers among `base`.
///
/// # Safety
/// Every pointer is valid for `chunk` bytes, nothing else accesses those buffers while the views
/// live, and `survivors` and `erased` are disjoint sets of indexes without repeats.
#[cfg(any(feature = "isal", feature = "isal-new"))]
unsafe fn split_views<'a>(
    base: &[*mut u8],
    chunk: usize,
    survivors: &[usize],
    erased: &[usize],
) -> (Vec<&'a [u8]>, Vec<&'a mut [u8]>) {
    (
        survivors
            .iter()
            .map(|&i| std::slice::from_raw_parts(base[i] as *const u8, chunk))
            .collect(),
        erased
            .iter()
            .map(|&e| std::slice::from_raw_parts_mut(base[e], chunk))
            .collect(),
    )
}

/// What one figure's ISA-L side runs, when built with a peer feature.
#[cfg(any(feature = "isal", feature = "isal-new"))]
type Peer = &'static ecstack_codes::isal::Isal;
#[cfg(not(any(feature = "isal", feature = "isal-new")))]
type Peer = ();

/// The ISA-L peer at `level`, if it has kernels for it.
#[cfg(any(feature = "isal", feature = "isal-new"))]
fn peer_at(level: Simd) -> Result<Option<Peer>> {
    let lib = peer()?;
    Ok(lib.levels().contains(&level).then_some(lib))
}
#[cfg(not(any(feature = "isal", feature = "isal-new")))]
fn peer_at(_level: Simd) -> Result<Option<Peer>> {
    Ok(None)
}

/// `Some(the peer's timing closure)` when built with a peer feature; `None` without one (the closure is
/// not compiled then: it names ISA-L).
macro_rules! peer_timing {
    ($closure:expr) => {{
        #[cfg(any(feature = "isal", feature = "isal-new"))]
        let theirs = $closure;
        #[cfg(not(any(feature = "isal", feature = "isal-new")))]
        let theirs: Option<fn(f64) -> f64> = None;
        theirs
    }};
}

/// Best of `rounds` interleaved rounds of ours and the peer: (ours GB/s, peer GB/s). One warm-up
/// round (a quarter of the time per side, not counted) comes first, so neither side's first round
/// pays for page faults, cold caches or a clock ramping up.
fn best_of(
    rounds: usize,
    ours: &mut dyn FnMut(f64) -> f64,
    secs: f64,
    mut theirs: Option<impl FnMut(f64) -> f64>,
) -> (f64, Option<f64>) {
    ours(secs / 4.0);
    if let Some(t) = theirs.as_mut() {
        t(secs / 4.0);
    }
    let mut best = (0f64, None::<f64>);
    for round in 0..rounds.max(1) {
        // Alternate who goes first, so neither side always runs right after the other's writes.
        let (o, t) = if round % 2 == 0 {
            let o = ours(secs);
            (o, theirs.as_mut().map(|t| t(secs)))
        } else {
            let t = theirs.as_mut().map(|t| t(secs));
            (ours(secs), t)
        };
        best.0 = best.0.max(o);
        if let Some(x) = t {
            best.1 = Some(best.1.unwrap_or(0f64).max(x));
        }
    }
    best
}

/// One (k, m, chunk) row at one kernel level: encode, decode (plan prepared once), decode-inv (plan
/// made every call), delta. Both sides run on the same page-aligned buffers (encode: the same data
/// in, the same parity buffers out; decode: the same survivors in, the same erased buffers rebuilt);
/// each side's result is checked once before timing (ours against the data, ISA-L against ours) and
/// again after.
#[allow(clippy::too_many_arguments, unused_variables, unused_mut)]
fn bench_ec_level(
    a: &EcBenchConfig,
    level: Simd,
    peer: Option<Peer>,
    k: usize,
    m: usize,
    data: &[PageBuf],
    new: &[u8],
    fig: &mut dyn FnMut(&'static str, (f64, Option<f64>)),
) -> Result<()> {
    let kind = a.kind;
    let chunk = data[0].len();
    let opts = CodeOptions {
        simd: Some(level),
        ..CodeOptions::default()
    };
    let code = new_linear_code_with(kind, k, m, opts)?;
    let d = slices(data);
    #[cfg(any(feature = "isal", feature = "isal-new"))]
    let g = code.generator().data.clone();
    let at = level.name();

    // Encode: ours first into `parity` (the reference), ISA-L's once into a second set to check, then
    // both timed into `parity`.
    let mut parity = zeroed_bufs(m, chunk);
    code.encode(&d, &mut slices_mut(&mut parity))?;
    let reference: Vec<Vec<u8>> = parity.iter().map(|p| p.to_vec()).collect();
    #[cfg(any(feature = "isal", feature = "isal-new"))]
    if let Some(lib) = peer {
        let mut check = zeroed_bufs(m, chunk);
        lib.tables(Some(level), k, m, &g[k * k..])
            .encode(chunk, &d, &mut slices_mut(&mut check));
        if check.iter().zip(&reference).any(|(x, y)| **x != y[..]) {
            return Err(failed(format!(
                "ours and ISA-L disagree on parity for k={k} m={m} chunk={chunk} at {at}"
            )));
        }
    }
    {
        let mut p = slices_mut(&mut parity);
        #[cfg(any(feature = "isal", feature = "isal-new"))]
        let mut t = peer.map(|lib| lib.tables(Some(level), k, m, &g[k * k..]));
        let (code, d) = (&code, &d);
        let p = std::cell::RefCell::new(&mut p);
        let mut ours = |s: f64| {
            let mut p = p.borrow_mut();
            measure(k * chunk, s, &mut || {
                code.encode(d, &mut p).expect("encode")
            })
        };
        let theirs = peer_timing!(t.as_mut().map(|t| {
            let p = &p;
            move |s: f64| {
                let mut p = p.borrow_mut();
                measure(k * chunk, s, &mut || t.encode(chunk, d, &mut p))
            }
        }));
        fig("encode", best_of(a.rounds, &mut ours, a.time, theirs));
    }
    if parity.iter().zip(&reference).any(|(x, y)| **x != y[..]) {
        return Err(failed(format!(
            "encode check failed for k={k} m={m} chunk={chunk} at {at}"
        )));
    }

    // Decode with m data chunks lost (all data and some parity when m > k): once with the decode plan
    // prepared once, once with a plan made every call. Both sides read the same survivors of `shards`
    // and rebuild the same erased buffers of it.
    let erased: Vec<usize> = (0..m.min(k)).chain(k..k + m.saturating_sub(k)).collect();
    let survivors: Vec<usize> = (0..k + m).filter(|i| !erased.contains(i)).take(k).collect();
    let uncached = new_linear_code_with(
        kind,
        k,
        m,
        CodeOptions {
            decode_cache_entries_max: 0,
            ..opts
        },
    )?;
    let mut shards: Vec<PageBuf> = data
        .iter()
        .chain(parity.iter())
        .map(|b| PageBuf::copy_of(b))
        .collect();
    let want: Vec<Vec<u8>> = erased
        .iter()
        .map(|&e| {
            if e < k {
                data[e].to_vec()
            } else {
                reference[e - k].clone()
            }
        })
        .collect();
    let rebuilt = |shards: &[PageBuf]| erased.iter().zip(&want).all(|(&e, w)| *shards[e] == w[..]);
    for (op, ours_code, prepared) in [("decode", &code, true), ("decode-inv", &uncached, false)] {
        // Erased buffers are zeroed before each side's first call, so each side's check sees its own work.
        let wipe = |shards: &mut [PageBuf]| {
            for &e in &erased {
                shards[e].fill(0);
            }
        };
        wipe(&mut shards);
        ours_code.reconstruct_in_place(&mut slices_mut(&mut shards), &erased)?;
        if !rebuilt(&shards) {
            return Err(failed(format!(
                "{op} check failed for k={k} m={m} chunk={chunk} at {at}"
            )));
        }
        // Each side makes its slices of `shards` from these pointers for the span of one timing
        // (`measure` call) only, so the two sides' views are never alive at the same time.
        let base: Vec<*mut u8> = shards.iter_mut().map(|b| b.as_mut_ptr()).collect();
        let base = &base;
        #[cfg(any(feature = "isal", feature = "isal-new"))]
        let mut isal_prepared = peer.filter(|_| prepared).map(|lib| {
            let rows = lib
                .decode_rows(&g, k, &survivors, &erased)
                .expect("invertible");
            lib.tables(Some(level), k, erased.len(), &rows)
        });
        // ISA-L: the survivors as sources, the erased shards as outputs.
        #[cfg(any(feature = "isal", feature = "isal-new"))]
        let mut isal_run = |s: Option<f64>| -> f64 {
            let lib = peer.expect("peer");
            // SAFETY: `shards` is borrowed by nothing else while these views live (this call);
            // survivors and erased indexes are disjoint, so the sources never overlap the outputs.
            let (srcs, mut outs) = unsafe { split_views(base, chunk, &survivors, &erased) };
            let mut call = || match isal_prepared.as_mut() {
                Some(t) => t.encode(chunk, &srcs, &mut outs),
                None => {
                    let rows = lib
                        .decode_rows(&g, k, &survivors, &erased)
                        .expect("invertible");
                    lib.tables(Some(level), k, erased.len(), &rows)
                        .encode(chunk, &srcs, &mut outs)
                }
            };
            match s {
                Some(s) => measure(k * chunk, s, &mut call),
                None => {
                    call();
                    0.0
                }
            }
        };
        #[cfg(any(feature = "isal", feature = "isal-new"))]
        if peer.is_some() {
            wipe(&mut shards);
            isal_run(None);
            if !rebuilt(&shards) {
                return Err(failed(format!(
                    "ISA-L {op} check failed for k={k} m={m} chunk={chunk} at {at}"
                )));
            }
        }
        let mut ours = |s: f64| {
            // SAFETY: as above; ours rebuilds in place over all n shards.
            let mut all: Vec<&mut [u8]> = base
                .iter()
                .map(|&p| unsafe { std::slice::from_raw_parts_mut(p, chunk) })
                .collect();
            measure(k * chunk, s, &mut || {
                ours_code
                    .reconstruct_in_place(&mut all, &erased)
                    .expect("decode")
            })
        };
        let theirs = peer_timing!(peer.map(|_| |s: f64| isal_run(Some(s))));
        fig(op, best_of(a.rounds, &mut ours, a.time, theirs));
        if !rebuilt(&shards) {
            return Err(failed(format!(
                "{op} check failed after timing for k={k} m={m} chunk={chunk} at {at}"
            )));
        }
    }
    let stats = code.decode_cache_stats();
    if stats.misses != 1 || uncached.decode_cache_stats().hits != 0 {
        return Err(failed(format!(
            "decode cache: expected one miss (prepared) and no hits (every call), got {stats:?}"
        )));
    }

    // Parity delta for an update of the whole of data chunk 0: ours into `deltas`, ISA-L (which
    // accumulates) into `isal_deltas`.
    let new = PageBuf::copy_of(new);
    let mut deltas = zeroed_bufs(m, chunk);
    let mut isal_deltas = zeroed_bufs(m, chunk);
    // ISA-L's xor_gen needs 32-byte aligned buffers: its side of the delta reads page-aligned copies
    // (they differ from ours only with a `skew_bytes`).
    #[cfg(any(feature = "isal", feature = "isal-new"))]
    let (isal_old, isal_new, mut diff_buf) = {
        let copy = |b: &[u8]| {
            let mut p = PageBuf::zeroed_at(b.len(), 0);
            p.copy_from_slice(b);
            p
        };
        (copy(&data[0]), copy(&new), PageBuf::zeroed_at(chunk, 0))
    };
    {
        let mut dl = slices_mut(&mut deltas);
        let (code, old, new) = (&code, &data[0], &new);
        let mut ours = |s: f64| {
            measure(chunk, s, &mut || {
                code.parity_deltas(0, old, new, &mut dl).expect("delta")
            })
        };
        let mut o = slices_mut(&mut isal_deltas);
        let theirs = peer_timing!(peer.map(|lib| {
            let diff = &mut *diff_buf;
            let mut t = lib.tables(Some(level), k, m, &g[k * k..]);
            move |s: f64| {
                measure(chunk, s, &mut || {
                    lib.xor(&[&*isal_old, &*isal_new], &mut *diff);
                    t.update(chunk, 0, diff, &mut o);
                })
            }
        }));
        fig("delta", best_of(a.rounds, &mut ours, a.time, theirs));
    }
    // Ours against a fresh encode's difference; ISA-L's update (it accumulates) once from zeroed
    // buffers against ours.
    {
        let mut d2: Vec<&[u8]> = d.clone();
        d2[0] = &new;
        let mut p2 = zeroed_bufs(m, chunk);
        code.encode(&d2, &mut slices_mut(&mut p2))?;
        let ok = deltas
            .iter()
            .zip(p2.iter().zip(&reference))
            .all(|(dl, (n, o))| {
                dl.iter()
                    .zip(n.iter().zip(o))
                    .all(|(x, (y, z))| *x == y ^ z)
            });
        if !ok {
            return Err(failed(format!(
                "delta check failed for k={k} m={m} chunk={chunk} at {at}"
            )));
        }
    }
    #[cfg(any(feature = "isal", feature = "isal-new"))]
    if let Some(lib) = peer {
        let diff: Vec<u8> = data[0].iter().zip(new.iter()).map(|(x, y)| x ^ y).collect();
        let mut z = zeroed_bufs(m, chunk);
        lib.tables(Some(level), k, m, &g[k * k..])
            .update(chunk, 0, &diff, &mut slices_mut(&mut z));
        if z.iter().zip(&deltas).any(|(x, y)| **x != **y) {
            return Err(failed(format!(
                "ours and ISA-L disagree on parity deltas for k={k} m={m} at {at}"
            )));
        }
    }
    let _ = &isal_deltas;
    Ok(())
}

/// One RDP row at one kernel level: encode, decode (data chunks 0 and 1 lost: the chains, whole
/// chunks) and delta (a whole-chunk update of data chunk 0 through the ranged form). ISA-L has no RDP,
/// so there is no peer figure; run an `rs-cauchy` row of the same (k, m, chunk) beside it to compare.
/// Every result is checked once (decode against the data, the delta against a fresh encode).
fn bench_rdp_level(
    a: &EcBenchConfig,
    level: Simd,
    k: usize,
    m: usize,
    data: &[PageBuf],
    new: &[u8],
    fig: &mut dyn FnMut(&'static str, (f64, Option<f64>)),
) -> Result<()> {
    let chunk = data[0].len();
    let opts = CodeOptions {
        simd: Some(level),
        ..CodeOptions::default()
    };
    let code = new_code_with(CodeKind::Rdp, k, m, opts)?;
    let d = slices(data);
    let at = level.name();
    let no_peer = None::<fn(f64) -> f64>;
    let mut parity = zeroed_bufs(m, chunk);
    code.encode(&d, &mut slices_mut(&mut parity))?;
    {
        let mut p = slices_mut(&mut parity);
        let mut ours = |s: f64| {
            measure(k * chunk, s, &mut || {
                code.encode(&d, &mut p).expect("encode")
            })
        };
        fig("encode", best_of(a.rounds, &mut ours, a.time, no_peer));
    }
    // Data chunks 0 and 1 (with k = 1: the data chunk and P).
    let erased = [0usize, 1];
    let mut shards: Vec<PageBuf> = data
        .iter()
        .chain(parity.iter())
        .map(|b| PageBuf::copy_of(b))
        .collect();
    for &e in &erased {
        shards[e].fill(0);
    }
    code.reconstruct_in_place(&mut slices_mut(&mut shards), &erased)?;
    let want = |e: usize| if e < k { &*data[e] } else { &*parity[e - k] };
    if erased.iter().any(|&e| *shards[e] != *want(e)) {
        return Err(failed(format!(
            "rdp decode check failed for k={k} chunk={chunk} at {at}"
        )));
    }
    {
        let mut all = slices_mut(&mut shards);
        let mut ours = |s: f64| {
            measure(k * chunk, s, &mut || {
                code.reconstruct_in_place(&mut all, &erased)
                    .expect("decode")
            })
        };
        fig("decode", best_of(a.rounds, &mut ours, a.time, no_peer));
    }
    let len = chunk as u64;
    let extents = code.delta_ranges(0, len, 0..len)?;
    let mut deltas: Vec<PageBuf> = extents
        .iter()
        .map(|e| PageBuf::zeroed(e.iter().map(|r| (r.end - r.start) as usize).sum()))
        .collect();
    {
        let mut dl = slices_mut(&mut deltas);
        let mut ours = |s: f64| {
            measure(chunk, s, &mut || {
                code.ranged_parity_deltas(0, len, 0, &data[0], new, &mut dl)
                    .expect("delta")
            })
        };
        fig("delta", best_of(a.rounds, &mut ours, a.time, no_peer));
    }
    let mut d2 = d.clone();
    d2[0] = new;
    let mut fresh = zeroed_bufs(m, chunk);
    code.encode(&d2, &mut slices_mut(&mut fresh))?;
    for ((p, ext), delta) in parity.iter_mut().zip(&extents).zip(&deltas) {
        code.apply_ranged_delta(p, ext, delta)?;
    }
    if parity.iter().zip(&fresh).any(|(x, y)| **x != **y) {
        return Err(failed(format!(
            "rdp delta check failed for k={k} chunk={chunk} at {at}"
        )));
    }
    Ok(())
}

/// The ISA-L build compared with: the newest (feature `isal-new`) when built in, else Debian's.
#[cfg(any(feature = "isal", feature = "isal-new"))]
fn peer() -> Result<&'static ecstack_codes::isal::Isal> {
    #[cfg(feature = "isal-new")]
    return Ok(ecstack_codes::isal::newest());
    #[cfg(not(feature = "isal-new"))]
    return ecstack_codes::isal::debian().map_err(|e| LabError::Run(e.to_string()));
}

fn bench_lt(k: usize, block: usize, trials: usize) -> Result<RatelessRow> {
    let n = 3 * k;
    let code = LtCode::new(LtParams::new(k, n, block))?;
    let mut data = vec![0u8; k * block];
    Rng::new(5).fill(&mut data);
    // Encode into a reused output buffer (as the RS rows reuse their parity buffers).
    let mut coded = vec![0u8; n * block];
    let enc_gbps = measure(data.len(), 0.5, &mut || {
        code.encode_into(&data, n, &mut coded).expect("encode")
    });
    // Decode from a random reception order into a reused output buffer; only decoding is timed, best of 3.
    let mut order: Vec<usize> = (0..n).collect();
    Rng::new(6).shuffle(&mut order);
    let mut out = vec![0u8; data.len()];
    let mut dec_gbps = 0f64;
    for _ in 0..3 {
        let feed: Vec<(usize, Vec<u8>)> = order
            .iter()
            .map(|&i| (i, coded[i * block..(i + 1) * block].to_vec()))
            .collect();
        let mut dec = LtDecoder::with_output(code.clone(), std::mem::take(&mut out));
        let t = Instant::now();
        for (id, buf) in feed {
            if dec.push_block(id, buf)? {
                break;
            }
        }
        let dect = t.elapsed().as_secs_f64();
        dec_gbps = dec_gbps.max(data.len() as f64 / dect / 1e9);
        out = ecstack_codes::RatelessDecoder::finish(Box::new(dec))?;
        if out != data {
            return Err(failed("LT decode check failed".into()));
        }
    }
    let o = code.reception_overhead(trials, 7);
    Ok(RatelessRow {
        code: "lt",
        k,
        block,
        coded_blocks: n,
        encode_gbps: enc_gbps,
        decode_gbps: dec_gbps,
        overhead_mean: o.iter().sum::<f64>() / o.len().max(1) as f64,
        overhead_max: o.iter().cloned().fold(0.0, f64::max),
        overhead_trials: trials,
    })
}

fn bench_raptorq(k: usize, symbol: usize, trials: usize) -> Result<RatelessRow> {
    let n = k + k / 2;
    let code = RaptorQ::new(k, symbol)?;
    let mut data = vec![0u8; k * symbol];
    Rng::new(8).fill(&mut data);
    let t = Instant::now();
    let mut packets = code.encode(&data, n)?;
    let enc = t.elapsed().as_secs_f64();
    // Decode after losing a random third: receive repair and source symbols in random order.
    let mut rng = Rng::new(9);
    rng.shuffle(&mut packets);
    let mut dec = code.decoder();
    let t = Instant::now();
    for p in &packets {
        if dec.push(p)? {
            break;
        }
    }
    let dect = t.elapsed().as_secs_f64();
    if dec.finish()? != data {
        return Err(failed("RaptorQ decode check failed".into()));
    }
    // Reception overhead does not depend on the symbol size: measure it with 16-byte symbols.
    let small = RaptorQ::new(k, 16)?;
    let mut obj = vec![0u8; k * 16];
    rng.fill(&mut obj);
    let all = small.encode(&obj, n)?;
    let mut ratios = Vec::with_capacity(trials);
    for _ in 0..trials {
        let mut ps = all.clone();
        rng.shuffle(&mut ps);
        let mut d = small.decoder();
        let mut used = 0;
        for p in &ps {
            used += 1;
            if d.push(p)? {
                break;
            }
        }
        if !d.is_complete() {
            return Err(failed(format!("RaptorQ failed to decode from {n} symbols")));
        }
        ratios.push(used as f64 / k as f64);
    }
    Ok(RatelessRow {
        code: "raptorq",
        k,
        block: symbol,
        coded_blocks: n,
        encode_gbps: data.len() as f64 / enc / 1e9,
        decode_gbps: data.len() as f64 / dect / 1e9,
        overhead_mean: ratios.iter().sum::<f64>() / ratios.len().max(1) as f64,
        overhead_max: ratios.iter().cloned().fold(0.0, f64::max),
        overhead_trials: trials,
    })
}
