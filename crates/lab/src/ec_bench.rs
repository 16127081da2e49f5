//! `ecstack bench ec`: our erasure-code kernels against ISA-L on the same buffers at the same kernel
//! level, one thread, best of interleaved rounds; every result is checked byte for byte (ours against
//! the data, ISA-L against ours). LT and RaptorQ rows: throughput and reception overhead.
//!
//! The peer is the newest ISA-L (feature `isal-new`, ISA-L 2.31 built statically) when built in, else
//! Debian's (feature `isal`, loaded at run time); without either, only our figures are given.

use std::time::Instant;

use ecstack_base::rng::Rng;
use ecstack_codes::{
    new_linear_code_with, CodeKind, CodeOptions, LtCode, LtDecoder, LtParams, RaptorQ,
    RatelessCode, Simd,
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
    /// Seconds per measurement.
    pub time: f64,
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

/// Everything one run measured.
#[derive(Clone, Debug, Serialize)]
pub struct EcBenchReport {
    pub simd: Vec<&'static str>,
    /// Whether an ISA-L peer was built in.
    pub isal: bool,
    pub peer: Option<&'static str>,
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
            bench_ec_level(c, level, peer, k, m, &data, &new, &mut fig)?;
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
        rows: out,
        rateless,
    })
}

/// Run `f` repeatedly for about `secs`; return GB/s for `bytes` per call.
fn measure(bytes: usize, secs: f64, f: &mut dyn FnMut()) -> f64 {
    f(); // warm caches and page in buffers
    let start = Instant::now();
    let mut iters = 0u64;
    let mut batch = 1u64;
    loop {
        for _ in 0..batch {
            f();
        }
        iters += batch;
        let el = start.elapsed().as_secs_f64();
        if el >= secs {
            return bytes as f64 * iters as f64 / el / 1e9;
        }
        batch = (batch * 2).min(1 << 16);
    }
}

fn rand_bufs(rng: &mut Rng, count: usize, len: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| {
            let mut v = vec![0u8; len];
            rng.fill(&mut v);
            v
        })
        .collect()
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

/// Best of `rounds` interleaved rounds of ours and the peer: (ours GB/s, peer GB/s).
fn best_of(
    rounds: usize,
    ours: &mut dyn FnMut() -> f64,
    mut theirs: Option<&mut dyn FnMut() -> f64>,
) -> (f64, Option<f64>) {
    let mut best = (0f64, None::<f64>);
    for _ in 0..rounds.max(1) {
        best.0 = best.0.max(ours());
        if let Some(t) = theirs.as_mut() {
            let x = t();
            best.1 = Some(best.1.unwrap_or(0f64).max(x));
        }
    }
    best
}

/// One (k, m, chunk) row at one kernel level: encode, decode (plan prepared once), decode-inv (plan
/// made every call), delta; each result checked (ours against the data, ISA-L against ours).
#[allow(clippy::too_many_arguments, unused_variables, unused_mut)]
fn bench_ec_level(
    a: &EcBenchConfig,
    level: Simd,
    peer: Option<Peer>,
    k: usize,
    m: usize,
    data: &[Vec<u8>],
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
    let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let mut parity = vec![vec![0u8; chunk]; m];
    #[cfg(any(feature = "isal", feature = "isal-new"))]
    let g = code.generator().data.clone();

    // Encode.
    let mut isal_parity = vec![vec![0u8; chunk]; m];
    {
        let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        let mut ours = || {
            measure(k * chunk, a.time, &mut || {
                code.encode(&d, &mut p).expect("encode")
            })
        };
        #[cfg(any(feature = "isal", feature = "isal-new"))]
        let mut t = peer.map(|lib| lib.tables(Some(level), k, m, &g[k * k..]));
        let mut ip: Vec<&mut [u8]> = isal_parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        let dr = &d;
        #[cfg(any(feature = "isal", feature = "isal-new"))]
        let mut theirs = t
            .as_mut()
            .map(|t| move || measure(k * chunk, a.time, &mut || t.encode(chunk, dr, &mut ip)));
        #[cfg(not(any(feature = "isal", feature = "isal-new")))]
        let mut theirs: Option<fn() -> f64> = None;
        let r = best_of(
            a.rounds,
            &mut ours,
            theirs.as_mut().map(|f| f as &mut dyn FnMut() -> f64),
        );
        fig("encode", r);
    }
    if peer.is_some() && parity != isal_parity {
        return Err(failed(format!(
            "ours and ISA-L disagree on parity for k={k} m={m} chunk={chunk} at {}",
            level.name()
        )));
    }

    // Decode with m data chunks lost (all data and some parity when m > k): once with the decode plan
    // prepared once, once with a plan made every call.
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
    // Both sides work on copies made the same way at the same time (buffer age and placement moved
    // the figures by 2x otherwise): ours rebuilds in place in `shards`, ISA-L reads the survivors of
    // `isal_shards` and writes its erased buffers (`outs`).
    let mut shards: Vec<Vec<u8>> = data.iter().chain(parity.iter()).cloned().collect();
    let mut isal_shards = shards.clone();
    let mut outs: Vec<Vec<u8>> = erased
        .iter()
        .map(|&e| std::mem::take(&mut isal_shards[e]))
        .collect();
    let srcs: Vec<&[u8]> = survivors
        .iter()
        .map(|&i| isal_shards[i].as_slice())
        .collect();
    for (op, ours_code, prepared) in [("decode", &code, true), ("decode-inv", &uncached, false)] {
        {
            let mut s: Vec<&mut [u8]> = shards.iter_mut().map(|v| v.as_mut_slice()).collect();
            let mut ours = || {
                measure(k * chunk, a.time, &mut || {
                    ours_code
                        .reconstruct_in_place(&mut s, &erased)
                        .expect("decode")
                })
            };
            let mut o: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
            #[cfg(any(feature = "isal", feature = "isal-new"))]
            let mut theirs = peer.map(|lib| {
                // Prepared: rows and tables made once. Not prepared: the steps ISA-L's own
                // erasure_code_perf times on every call (invert, rows, tables, dot product).
                let mut once = prepared.then(|| {
                    let rows = lib
                        .decode_rows(&g, k, &survivors, &erased)
                        .expect("invertible");
                    lib.tables(Some(level), k, erased.len(), &rows)
                });
                let (g, survivors, erased, srcs) = (&g, &survivors, &erased, &srcs);
                move || {
                    measure(k * chunk, a.time, &mut || match once.as_mut() {
                        Some(t) => t.encode(chunk, srcs, &mut o),
                        None => {
                            let rows = lib
                                .decode_rows(g, k, survivors, erased)
                                .expect("invertible");
                            lib.tables(Some(level), k, erased.len(), &rows)
                                .encode(chunk, srcs, &mut o)
                        }
                    })
                }
            });
            #[cfg(not(any(feature = "isal", feature = "isal-new")))]
            let mut theirs: Option<fn() -> f64> = None;
            let r = best_of(
                a.rounds,
                &mut ours,
                theirs.as_mut().map(|f| f as &mut dyn FnMut() -> f64),
            );
            fig(op, r);
        }
        for (i, &e) in erased.iter().enumerate() {
            let want = if e < k { &data[e] } else { &parity[e - k] };
            if &shards[e] != want {
                return Err(failed(format!(
                    "decode check failed for k={k} m={m} chunk={chunk} at {}",
                    level.name()
                )));
            }
            if peer.is_some() && &outs[i] != want {
                return Err(failed(format!(
                    "ISA-L decode check failed for k={k} m={m} at {}",
                    level.name()
                )));
            }
        }
    }
    let stats = code.decode_cache_stats();
    if stats.misses != 1 || uncached.decode_cache_stats().hits != 0 {
        return Err(failed(format!(
            "decode cache: expected one miss (prepared) and no hits (every call), got {stats:?}"
        )));
    }

    // Parity delta for an update of the whole of data chunk 0.
    let mut deltas = vec![vec![0u8; chunk]; m];
    let mut isal_deltas = vec![vec![0u8; chunk]; m];
    {
        let mut dl: Vec<&mut [u8]> = deltas.iter_mut().map(|v| v.as_mut_slice()).collect();
        let mut ours = || {
            measure(chunk, a.time, &mut || {
                code.parity_deltas(0, &data[0], new, &mut dl)
                    .expect("delta")
            })
        };
        // xor_gen needs 32-byte aligned buffers.
        #[cfg(any(feature = "isal", feature = "isal-new"))]
        let (mut old_buf, mut new_buf, mut diff_buf) = (
            vec![0u8; chunk + 32],
            vec![0u8; chunk + 32],
            vec![0u8; chunk + 32],
        );
        let mut o: Vec<&mut [u8]> = isal_deltas.iter_mut().map(|v| v.as_mut_slice()).collect();
        #[cfg(any(feature = "isal", feature = "isal-new"))]
        let mut theirs = peer.map(|lib| {
            let old_a: &[u8] = {
                let s = aligned32(&mut old_buf, chunk);
                s.copy_from_slice(&data[0]);
                s
            };
            let new_a: &[u8] = {
                let s = aligned32(&mut new_buf, chunk);
                s.copy_from_slice(new);
                s
            };
            let diff = aligned32(&mut diff_buf, chunk);
            let mut t = lib.tables(Some(level), k, m, &g[k * k..]);
            move || {
                measure(chunk, a.time, &mut || {
                    lib.xor(&[old_a, new_a], &mut *diff);
                    t.update(chunk, 0, diff, &mut o);
                })
            }
        });
        #[cfg(not(any(feature = "isal", feature = "isal-new")))]
        let mut theirs: Option<fn() -> f64> = None;
        let r = best_of(
            a.rounds,
            &mut ours,
            theirs.as_mut().map(|f| f as &mut dyn FnMut() -> f64),
        );
        fig("delta", r);
    }
    // ISA-L's update accumulates into its outputs; check it once from zeroed buffers.
    #[cfg(any(feature = "isal", feature = "isal-new"))]
    if let Some(lib) = peer {
        let diff: Vec<u8> = data[0].iter().zip(new).map(|(x, y)| x ^ y).collect();
        let mut z = vec![vec![0u8; chunk]; m];
        let mut zr: Vec<&mut [u8]> = z.iter_mut().map(|v| v.as_mut_slice()).collect();
        lib.tables(Some(level), k, m, &g[k * k..])
            .update(chunk, 0, &diff, &mut zr);
        if z != deltas {
            return Err(failed(format!(
                "ours and ISA-L disagree on parity deltas for k={k} m={m} at {}",
                level.name()
            )));
        }
    }
    let _ = &isal_deltas;
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

/// The `len` bytes of `buf` (which has 32 to spare) that start on a 32-byte boundary.
#[cfg(any(feature = "isal", feature = "isal-new"))]
fn aligned32(buf: &mut [u8], len: usize) -> &mut [u8] {
    let off = buf.as_ptr().align_offset(32);
    &mut buf[off..off + len]
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
