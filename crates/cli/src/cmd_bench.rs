//! `ecstack bench`: throughput measurements, side by side with the peer (library or server) in the same run.

use crate::util::{fmt_size, parse_size, print_json};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ecstack_base::rng::Rng;
use ecstack_codes::{
    new_linear_code_with, CodeKind, CodeOptions, LtCode, LtDecoder, LtParams, RaptorQ,
    RatelessCode, Simd,
};
use ecstack_lab::codfs_bench::{self, ClusterBenchConfig};
use ecstack_lab::LabError;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(Subcommand)]
enum BenchWhat {
    /// Erasure-code throughput: RS encode / decode / parity delta per (k, m, chunk), LT and RaptorQ.
    /// Built with `--features isal-new` (or `isal`), ISA-L runs on the same buffers at the same kernel
    /// level and the ratio ours/ISA-L is printed.
    Ec(EcBench),
    /// The CodFS cluster on loopback (real daemons): one client with a big file, then N clients
    /// against MinIO (8 drives, EC:m) in the same run, and a small update (FO) against MinIO's
    /// whole-object rewrite. The logic is `ecstack_lab::codfs_bench`
    Cluster(ClusterBench),
}

#[derive(Args)]
struct ClusterBench {
    /// OSDs to start
    #[arg(long, default_value_t = 8)]
    osds: usize,
    /// Data chunks per segment
    #[arg(short = 'k', default_value_t = 6)]
    k: u32,
    /// Parity chunks per segment (MinIO runs with EC:m)
    #[arg(short = 'm', default_value_t = 2)]
    m: u32,
    /// Segment size
    #[arg(long, default_value = "16M")]
    segment_size: String,
    /// The one-client file (0: skip)
    #[arg(long, default_value = "1G")]
    file_size: String,
    /// Concurrent clients on each side
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Object size of the side-by-side runs
    #[arg(long, default_value = "16M")]
    object_size: String,
    /// Objects each side puts and gets
    #[arg(long, default_value_t = 64)]
    objects: usize,
    /// Bytes changed in one object per update
    #[arg(long, default_value = "4K")]
    update_size: String,
    /// Updates timed on each side
    #[arg(long, default_value_t = 20)]
    updates: usize,
    /// The MinIO server binary (default: $HOME/peers/bin/minio, as scripts/install-minio.sh puts it)
    #[arg(long)]
    minio: Option<PathBuf>,
    /// Ours only: do not run MinIO
    #[arg(long, conflicts_with = "minio")]
    no_minio: bool,
    /// Keep the cluster's and MinIO's files here (default: a temporary directory, removed at the end)
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Run our daemons without TLS (MinIO runs plain HTTP either way)
    #[arg(long)]
    insecure: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct EcBench {
    /// Rows as k,m,chunk separated by ';'
    #[arg(long, default_value = "10,4,1M;6,2,64K;4,2,4K;12,4,256K")]
    rows: String,
    /// Code for the RS rows (rs-cauchy, rs-vand, ...)
    #[arg(long, default_value = "rs-cauchy")]
    code: String,
    /// Kernel levels to measure, comma-separated (scalar, ssse3, avx2, avx512, avx2-gfni, avx512-gfni)
    /// or "all"; default: every level from avx2 up that this CPU has. Ours and ISA-L run at the same
    /// level (ISA-L's `ec_encode_data_<level>` forced). The rateless rows run at the first level.
    #[arg(long)]
    simd: Option<String>,
    /// Seconds per measurement
    #[arg(long, default_value_t = 0.25)]
    time: f64,
    /// Interleaved rounds per measurement (the best round counts, for both sides alike)
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Skip the LT / RaptorQ rows
    #[arg(long)]
    no_rateless: bool,
    /// Rateless source blocks K
    #[arg(long, default_value_t = 1024)]
    rateless_k: usize,
    /// Rateless block size (RaptorQ symbols are capped at 65528 bytes)
    #[arg(long, default_value = "64K")]
    rateless_block: String,
    /// Trials for the reception-overhead statistics
    #[arg(long, default_value_t = 200)]
    trials: usize,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Row {
    simd: &'static str,
    code: String,
    k: usize,
    m: usize,
    chunk: usize,
    op: &'static str,
    ours_gbps: f64,
    isal_gbps: Option<f64>,
    ratio: Option<f64>,
}

#[derive(Serialize)]
struct RatelessRow {
    code: &'static str,
    k: usize,
    block: usize,
    coded_blocks: usize,
    encode_gbps: f64,
    decode_gbps: f64,
    overhead_mean: f64,
    overhead_max: f64,
    overhead_trials: usize,
}

pub fn run(a: BenchArgs) -> Result<()> {
    match a.what {
        BenchWhat::Ec(e) => bench_ec(e),
        BenchWhat::Cluster(c) => bench_cluster(c),
    }
}

fn bench_cluster(a: ClusterBench) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the ecstack binary")?;
    let mut cfg = ClusterBenchConfig::new(exe);
    cfg.osds = a.osds;
    cfg.k = a.k;
    cfg.m = a.m;
    cfg.segment_bytes = parse_size(&a.segment_size)?;
    cfg.big_file_bytes = parse_size(&a.file_size)?;
    cfg.clients = a.clients;
    cfg.object_bytes = parse_size(&a.object_size)?;
    cfg.objects = a.objects;
    cfg.update_bytes = parse_size(&a.update_size)?;
    cfg.updates = a.updates;
    cfg.dir = a.dir;
    cfg.insecure = a.insecure;
    cfg.seed = a.seed;
    cfg.minio = if a.no_minio {
        None
    } else {
        Some(match a.minio {
            Some(p) => p,
            None => std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join("peers/bin/minio"))
                .context("--minio: no path given and HOME is not set")?,
        })
    };
    let report = codfs_bench::run(&cfg, &|line| eprintln!("• {line}")).map_err(flag_error)?;
    if a.json {
        print_json(&report)
    } else {
        println!("{}", report.markdown());
        Ok(())
    }
}

/// A library configuration error as the flag it came from: `--objects: 4 objects for 8 clients`.
fn flag_error(e: LabError) -> anyhow::Error {
    match e {
        LabError::Config { field, msg } => anyhow::anyhow!("--{field}: {msg}"),
        other => other.into(),
    }
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

fn parse_rows(s: &str) -> Result<Vec<(usize, usize, usize)>> {
    s.split(';')
        .filter(|r| !r.trim().is_empty())
        .map(|r| {
            let p: Vec<&str> = r.split(',').map(str::trim).collect();
            if p.len() != 3 {
                bail!("bad row '{r}': expected k,m,chunk such as 10,4,1M");
            }
            Ok((p[0].parse()?, p[1].parse()?, parse_size(p[2])? as usize))
        })
        .collect()
}

/// The levels `--simd` names (or the default), each supported by this CPU.
fn bench_levels(arg: Option<&str>) -> Result<Vec<Simd>> {
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
                    .ok_or_else(|| anyhow::anyhow!("--simd: unknown SIMD level '{l}'"))?;
                if !lvl.supported() {
                    bail!("--simd: this CPU does not support {l}");
                }
                Ok(lvl)
            })
            .collect(),
    }
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

fn bench_ec(a: EcBench) -> Result<()> {
    // measure() loops until this much time has passed: NaN or infinity would never end.
    if crate::util::secs_arg("--time", a.time)?.is_zero() {
        bail!("--time must be positive");
    }
    let levels = bench_levels(a.simd.as_deref())?;
    // The rateless rows (and anything else built without a level) run at the first level asked for.
    // Read once by kernels::active(), before any code is built.
    std::env::set_var("ECSTACK_SIMD", levels[0].name());
    let kind = CodeKind::parse(&a.code)?;
    let rows = parse_rows(&a.rows)?;
    #[cfg(any(feature = "isal", feature = "isal-new"))]
    let peer_name = Some(peer()?.name());
    #[cfg(not(any(feature = "isal", feature = "isal-new")))]
    let peer_name: Option<&str> = None;
    let mut out = Vec::new();
    let mut rng = Rng::new(1);
    if !a.json {
        println!(
            "ecstack bench ec: one thread, {} s x {} rounds per figure (best round), peer: {}",
            a.time,
            a.rounds,
            peer_name.unwrap_or("none (build with --features isal-new or isal)")
        );
        println!("GB/s = input data bytes per second (encode, decode: k chunks; delta: the updated chunk)");
        println!("decode = decode plan prepared once (ours: cached; ISA-L: tables made once); decode-inv = invert + tables every call");
        println!(
            "delta = ours parity_deltas; ISA-L xor_gen (its own dispatch) + ec_encode_data_update"
        );
        println!(
            "{:<12} {:<10} {:>4} {:>3} {:>8}  {:<10} {:>10} {:>10} {:>10}",
            "simd", "code", "k", "m", "chunk", "op", "ours", "isa-l", "ours/isa-l"
        );
    }
    for (k, m, chunk) in rows {
        let data = rand_bufs(&mut rng, k, chunk);
        let new = rand_bufs(&mut rng, 1, chunk).remove(0);
        for &level in &levels {
            let peer = peer_at(level)?;
            let mut fig = |op: &'static str, (ours, isal): (f64, Option<f64>)| {
                let r = Row {
                    simd: level.name(),
                    code: kind.name().into(),
                    k,
                    m,
                    chunk,
                    op,
                    ours_gbps: ours,
                    isal_gbps: isal,
                    ratio: isal.map(|i| ours / i),
                };
                if !a.json {
                    println!(
                        "{:<12} {:<10} {:>4} {:>3} {:>8}  {:<10} {:>10.2} {:>10} {:>10}",
                        r.simd,
                        r.code,
                        k,
                        m,
                        fmt_size(chunk as u64),
                        op,
                        ours,
                        isal.map(|x| format!("{x:.2}"))
                            .unwrap_or_else(|| "-".into()),
                        r.ratio
                            .map(|x| format!("{x:.2}x"))
                            .unwrap_or_else(|| "-".into())
                    );
                }
                out.push(r);
            };
            bench_ec_level(&a, kind, level, peer, k, m, &data, &new, &mut fig)?;
        }
    }

    let mut rl = Vec::new();
    if !a.no_rateless {
        let block = parse_size(&a.rateless_block)? as usize;
        rl.push(bench_lt(a.rateless_k, block, a.trials)?);
        rl.push(bench_raptorq(a.rateless_k, block.min(65528), a.trials)?);
        if !a.json {
            println!();
            println!(
                "{:<8} {:>5} {:>8} {:>6} {:>11} {:>11} {:>16} {:>13}",
                "rateless",
                "K",
                "block",
                "N",
                "encode GB/s",
                "decode GB/s",
                "overhead (N/K)",
                "max"
            );
            for r in &rl {
                println!(
                    "{:<8} {:>5} {:>8} {:>6} {:>11.2} {:>11.2} {:>16.4} {:>13.4}",
                    r.code,
                    r.k,
                    fmt_size(r.block as u64),
                    r.coded_blocks,
                    r.encode_gbps,
                    r.decode_gbps,
                    r.overhead_mean,
                    r.overhead_max
                );
            }
            println!("overhead = coded blocks received before the object decoded / K, mean over {} random orders", a.trials);
        }
    }
    if a.json {
        print_json(&serde_json::json!({
            "simd": levels.iter().map(|l| l.name()).collect::<Vec<_>>(),
            "isal": peer_name.is_some(),
            "peer": peer_name,
            "rows": out,
            "rateless": rl,
        }))?;
    }
    Ok(())
}

/// One (k, m, chunk) row at one kernel level: encode, decode (plan prepared once), decode-inv (plan
/// made every call), delta; each result checked (ours against the data, ISA-L against ours).
#[allow(clippy::too_many_arguments, unused_variables, unused_mut)]
fn bench_ec_level(
    a: &EcBench,
    kind: CodeKind,
    level: Simd,
    peer: Option<Peer>,
    k: usize,
    m: usize,
    data: &[Vec<u8>],
    new: &[u8],
    fig: &mut dyn FnMut(&'static str, (f64, Option<f64>)),
) -> Result<()> {
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
        bail!(
            "ours and ISA-L disagree on parity for k={k} m={m} chunk={chunk} at {}",
            level.name()
        );
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
                bail!(
                    "decode check failed for k={k} m={m} chunk={chunk} at {}",
                    level.name()
                );
            }
            if peer.is_some() && &outs[i] != want {
                bail!(
                    "ISA-L decode check failed for k={k} m={m} at {}",
                    level.name()
                );
            }
        }
    }
    let stats = code.decode_cache_stats();
    if stats.misses != 1 || uncached.decode_cache_stats().hits != 0 {
        bail!("decode cache: expected one miss (prepared) and no hits (every call), got {stats:?}");
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
            bail!(
                "ours and ISA-L disagree on parity deltas for k={k} m={m} at {}",
                level.name()
            );
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
    return ecstack_codes::isal::debian().map_err(anyhow::Error::msg);
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
            bail!("LT decode check failed");
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
        bail!("RaptorQ decode check failed");
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
            bail!("RaptorQ failed to decode from {n} symbols");
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
