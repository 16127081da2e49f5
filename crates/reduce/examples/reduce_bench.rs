//! What the libraries of the TreeChunks target configuration cost per core on this CPU, and the analysis
//! itself without the CLI (for `perf record`).
//!
//! ```text
//! cargo build --release -p ecstack-reduce --example reduce_bench
//! target/release/examples/reduce_bench libs TREE [MB]      # each library alone on the tree's first MB
//! target/release/examples/reduce_bench analyze TREE OUT WORKERS [--follow-symlinks]
//! target/release/examples/reduce_bench anchors TREE WORK [--no-cli]   # = ecstack reduce anchors --keep
//! ```
//!
//! `libs` reads regular files of TREE (walk order, symlinks followed) into memory until MB (default 512)
//! and times, on one thread, each step of `fastcdc:16K:blake3` + `lz4@128K` + `zstd:3@128K` alone over
//! those bytes: FastCDC 2020 cut points (16K avg), BLAKE3 over the 16K segments, lz4 block compression
//! of 128 KiB chunks (lz4_flex, the pure-Rust port, and liblz4, what the engine runs), zstd level 3 of
//! 128 KiB chunks (one reused context). Figures are
//! MB/s of the thread's CPU time (`/proc/thread-self/schedstat`), so other load on the machine does not
//! count, and 1/Σ(1/xᵢ) is the ceiling of the whole configuration on one core (printed with either lz4).
//! `analyze` runs `ecstack_reduce::analyze` with that configuration and prints bytes / process CPU time.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// CPU time of the calling thread, seconds.
fn thread_cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    s.split_whitespace()
        .next()
        .and_then(|x| x.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 / 1e9)
}

/// CPU time of the whole process (user + sys), seconds.
fn process_cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses).
    let rest = &s[s.rfind(')').map_or(0, |i| i + 2)..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = 100.0; // USER_HZ on Linux
    let u: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0);
    let s: f64 = f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0.0);
    (u + s) / tick
}

fn load(root: &Path, limit: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(limit);
    let mut stack = vec![root.to_path_buf()];
    // Depth first, names sorted (the walk order of `analyze`).
    while let Some(p) = stack.pop() {
        if data.len() >= limit {
            break;
        }
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            let mut names: Vec<PathBuf> = match std::fs::read_dir(&p) {
                Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
                Err(_) => continue,
            };
            names.sort();
            names.reverse();
            stack.extend(names);
        } else if meta.is_file() {
            if let Ok(mut f) = std::fs::File::open(&p) {
                let want = (limit - data.len()) as u64;
                let _ = f.by_ref().take(want).read_to_end(&mut data);
            }
        }
    }
    data
}

fn time(name: &str, bytes: usize, mut f: impl FnMut() -> u64) -> f64 {
    // One warm-up pass, then the measured one.
    let _ = f();
    let (c0, w0) = (thread_cpu(), Instant::now());
    let out = f();
    let (cpu, wall) = (thread_cpu() - c0, w0.elapsed().as_secs_f64());
    let mbs = bytes as f64 / 1e6 / cpu;
    println!("{name:<34} {mbs:>9.1} MB/s per core   (cpu {cpu:.3} s, wall {wall:.3} s, out {out})");
    mbs
}

fn libs(root: &Path, mb: usize) {
    let data = load(root, mb << 20);
    let n = data.len();
    println!(
        "{} MB from {} (blake3 SIMD: {})",
        n >> 20,
        root.display(),
        if cfg!(target_arch = "x86_64") {
            format!(
                "avx512f {} avx2 {}",
                std::arch::is_x86_feature_detected!("avx512f"),
                std::arch::is_x86_feature_detected!("avx2")
            )
        } else {
            "n/a".into()
        }
    );
    let cuts: Vec<(usize, usize)> = fastcdc::v2020::FastCDC::new(&data, 4096, 16384, 65536)
        .map(|c| (c.offset, c.length))
        .collect();
    let mut inv = 0.0;
    inv += 1.0
        / time("fastcdc 2020 16K (cuts only)", n, || {
            fastcdc::v2020::FastCDC::new(&data, 4096, 16384, 65536).count() as u64
        });
    inv += 1.0
        / time("blake3 of the 16K segments", n, || {
            let mut x = 0u64;
            for &(o, l) in &cuts {
                x ^= blake3::hash(&data[o..o + l]).as_bytes()[0] as u64;
            }
            x
        });
    let mut out = vec![0u8; lz4_flex::block::get_maximum_output_size(128 << 10)];
    let flex_lz4 = time("lz4_flex block 128K", n, || {
        data.chunks(128 << 10)
            .map(|c| {
                lz4_flex::block::compress_into(c, &mut out)
                    .unwrap()
                    .min(c.len()) as u64
            })
            .sum()
    });
    let mut cout = vec![0u8; 1 << 18];
    let c_lz4 = time("liblz4 1.10 (C) block 128K", n, || {
        data.chunks(128 << 10)
            .map(|c| {
                // SAFETY: both pointers are valid for the lengths passed (cout holds the bound of a
                // 128 KiB input); liblz4 reads c and writes at most the capacity into cout.
                let r = unsafe {
                    lz4_sys::LZ4_compress_default(
                        c.as_ptr().cast(),
                        cout.as_mut_ptr().cast(),
                        c.len() as i32,
                        cout.len() as i32,
                    )
                };
                (r as usize).min(c.len()) as u64
            })
            .sum()
    });
    let mut z = zstd::bulk::Compressor::new(3).unwrap();
    let mut zout = vec![0u8; zstd::zstd_safe::compress_bound(128 << 10)];
    inv += 1.0
        / time("zstd -3 128K (reused context)", n, || {
            data.chunks(128 << 10)
                .map(|c| z.compress_to_buffer(c, &mut zout).unwrap().min(c.len()) as u64)
                .sum()
        });
    for (name, lz4) in [("lz4_flex", flex_lz4), ("liblz4", c_lz4)] {
        println!(
            "{:<34} {:>9.1} MB/s per core",
            format!("ceiling with {name} (1 / sum 1/x)"),
            1.0 / (inv + 1.0 / lz4)
        );
    }
    let _ = time("memcpy (reference)", n, || {
        let mut v = vec![0u8; n];
        v.copy_from_slice(&data);
        v[n / 2] as u64
    });
    let mut e = ecstack_reduce::Engine::new(
        &ecstack_reduce::Config {
            compression: vec!["lz4@128K".into(), "zstd:3@128K".into()],
            dedup: vec!["fastcdc:16K:blake3".into()],
            ..Default::default()
        }
        .configurations()
        .unwrap(),
    );
    struct Null(u64);
    impl ecstack_reduce::ChunkSink for Null {
        fn push(&mut self, _: u32, r: ecstack_reduce::ChunkRecord) -> std::io::Result<()> {
            self.0 += r.bytes;
            Ok(())
        }
    }
    let _ = time("Engine (one 512M 'file', no index)", n, || {
        let mut s = Null(0);
        e.process(0, &mut &data[..], &mut s).unwrap();
        s.0
    });
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(String::as_str) {
        Some("libs") => libs(
            Path::new(&a[2]),
            a.get(3).and_then(|x| x.parse().ok()).unwrap_or(512),
        ),
        Some("analyze") => {
            let workers: usize = a[4].parse().unwrap();
            let opts = ecstack_reduce::AnalyzeOptions {
                root: a[2].clone().into(),
                out: a[3].clone().into(),
                config: ecstack_reduce::Config {
                    workers,
                    compression: vec!["lz4@128K".into(), "zstd:3@128K".into()],
                    dedup: vec!["fastcdc:16K:blake3".into()],
                    follow_symlinks: a.iter().any(|x| x == "--follow-symlinks"),
                    ..Default::default()
                },
                config_path: None,
                workers_max: Some(workers),
                shard: None,
                sample_fraction: 1.0,
                sample_bytes: None,
                progress: false,
            };
            let (c0, w0) = (process_cpu(), Instant::now());
            let s = ecstack_reduce::analyze(&opts).unwrap();
            let (cpu, wall) = (process_cpu() - c0, w0.elapsed().as_secs_f64());
            println!(
                "{} files, {} bytes, cpu {cpu:.2} s, wall {wall:.2} s: {:.1} MB/s per core, {:.1} MB/s wall",
                s.manifest.files,
                s.manifest.bytes,
                s.manifest.bytes as f64 / 1e6 / cpu,
                s.manifest.bytes as f64 / 1e6 / wall
            );
        }
        Some("anchors") => {
            let r = ecstack_reduce::anchors::anchors(&ecstack_reduce::anchors::AnchorOptions {
                root: a[2].clone().into(),
                work: a[3].clone().into(),
                keep: true,
                static_bytes: 64 << 10,
                workers: 2,
                require_tools: true,
                no_cli: a.iter().any(|x| x == "--no-cli"),
            })
            .unwrap();
            print!("{}", r.to_text());
        }
        _ => eprintln!(
            "usage: reduce_bench libs TREE [MB] | analyze TREE OUT WORKERS [--follow-symlinks]"
        ),
    }
}
