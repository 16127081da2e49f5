//! Hand-built trees whose savings are computed independently (byte-wise chunk sets, not fingerprints),
//! error cases, and shard + merge = single run.

mod common;

use common::{replace_keeping_mtime, wait_until_started};
use ecstack_base::Rng;
use ecstack_reduce::{
    analyze, byte_sampled, merge, report, AnalyzeOptions, AnalyzeSummary, Config, Estimate, Report,
    ReportOptions, Shard, Total,
};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

fn random(seed: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    Rng::new(seed).fill(&mut v);
    v
}

fn write(root: &Path, rel: &str, data: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

/// The tree: duplicate files, a within-file repetition, shifted content, noise and zeros.
fn build(root: &Path) -> Vec<(String, Vec<u8>)> {
    let block = random(3, 64 << 10);
    let orig = random(2, 2 << 20);
    let mut shifted = random(4, 100);
    shifted.extend_from_slice(&orig);
    let files = vec![
        ("dup/a.bin".to_string(), random(1, 1 << 20)),
        ("dup/b.bin".to_string(), random(1, 1 << 20)),
        ("within/rep.bin".to_string(), block.repeat(4)),
        ("shift/orig.bin".to_string(), orig),
        ("shift/shifted.bin".to_string(), shifted),
        ("noise/noise.dat".to_string(), random(5, (1 << 20) + 12345)),
        ("zeros/z.txt".to_string(), vec![0u8; 1 << 20]),
        ("tiny/empty".to_string(), Vec::new()),
        ("tiny/one".to_string(), b"x".to_vec()),
    ];
    for (rel, d) in &files {
        write(root, rel, d);
    }
    files
}

fn config(specs_c: &[&str], specs_d: &[&str]) -> Config {
    Config {
        workers: 2,
        compression: specs_c.iter().map(|s| s.to_string()).collect(),
        dedup: specs_d.iter().map(|s| s.to_string()).collect(),
        follow_symlinks: false,
        index_memory_bytes: 1 << 20, // small: forces several spilled runs per worker
    }
}

fn opts(root: &Path, out: PathBuf, config: Config) -> AnalyzeOptions {
    AnalyzeOptions {
        root: root.to_path_buf(),
        out,
        config,
        config_path: None,
        workers_max: Some(3),
        shard: None,
        sample_fraction: 1.0,
        sample_bytes: None,
        progress: false,
    }
}

/// The report of the results in `res`: `top` rows per table, and beside each exact figure an
/// estimate from a sample of `estimate_fraction` of the files (0: none).
fn report_of(res: &Path, top: usize, estimate_fraction: f64) -> Report {
    report(
        res,
        &ReportOptions {
            top,
            estimate_fraction,
        },
    )
    .unwrap()
}

fn total<'a>(r: &'a Report, label: &str) -> &'a Total {
    r.totals
        .iter()
        .find(|t| t.label == label)
        .unwrap_or_else(|| panic!("no {label}"))
}

/// The estimate's interval holds the exact ratio of `t`.
fn assert_covers(e: &Estimate, t: &Total) {
    assert!(
        e.ratio_low <= t.ratio && t.ratio <= e.ratio_high,
        "exact {} outside [{}, {}] ({e:?})",
        t.ratio,
        e.ratio_low,
        e.ratio_high
    );
}

/// Unique bytes under static segmentation, from the chunk bytes themselves.
fn static_unique(files: &[(String, Vec<u8>)], size: usize) -> u64 {
    let mut seen = HashSet::new();
    let mut unique = 0;
    for (_, d) in files {
        for c in d.chunks(size) {
            if seen.insert(c.to_vec()) {
                unique += c.len() as u64;
            }
        }
    }
    unique
}

#[test]
fn hand_built_tree_savings() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    let files = build(&root);
    let all: u64 = files.iter().map(|f| f.1.len() as u64).sum();
    let c = config(
        &["lz4@64K", "zstd:3@64K", "zlib:6@64K"],
        &[
            "whole:sha1",
            "static:64K:sha256",
            "fastcdc:16K:blake3",
            "rabin:16K:sha1",
        ],
    );
    let s = analyze(&opts(&root, dir.path().join("res"), c)).unwrap();
    assert_eq!(s.manifest.files, files.len() as u64);
    assert_eq!(s.manifest.bytes, all);
    let r = report_of(&dir.path().join("res"), 100, 0.0);

    // Whole-file: b.bin duplicates a.bin; the 4-block file and the shifted copy are distinct files.
    assert_eq!(total(&r, "whole:sha1").reduced_bytes, all - (1 << 20));
    // Static 64K: a.bin/b.bin (1 MiB), 3 of rep.bin's 4 blocks and 15 of the zero file's 16 chunks;
    // the shifted copy matches nothing.
    let want_static = static_unique(&files, 64 << 10);
    assert_eq!(
        want_static,
        all - (1 << 20) - 3 * (64 << 10) - 15 * (64 << 10)
    );
    assert_eq!(total(&r, "static:64K:sha256").reduced_bytes, want_static);
    // CDC finds the shifted content: at most the segments around the edit (≤ 2 max-size ones) stay.
    for (label, max) in [
        ("fastcdc:16K-4K-64K:blake3", 64 << 10),
        ("rabin:16K-8K-32K-w48:sha1", 32 << 10),
    ] {
        let red = total(&r, label).reduced_bytes;
        assert!(
            red <= want_static - (2 << 20) + 2 * max + 100,
            "{label}: {red} vs static {want_static}"
        );
        assert!(
            red >= all - (1 << 20) - (2 << 20) - 3 * (64 << 10) - (1 << 20),
            "{label} saved more than exists: {red}"
        );
    }
    // The shifted copy, directory by directory: static finds nothing, CDC finds all but the segments
    // before it re-synchronises (a few segments: the min-size rule may pick other cut candidates first).
    let shift = r.directories.iter().find(|g| g.name == "shift").unwrap();
    assert_eq!(shift.bytes, (4 << 20) + 100);
    assert_eq!(
        shift.reduced_bytes[total(&r, "static:64K:sha256").id as usize],
        shift.bytes
    );
    for label in ["fastcdc:16K-4K-64K:blake3", "rabin:16K-8K-32K-w48:sha1"] {
        let kept = shift.reduced_bytes[total(&r, label).id as usize];
        // orig.bin (first in walk order) is kept whole; of shifted.bin at most 5% stays.
        assert!(
            kept <= (2 << 20) + (2 << 20) / 20,
            "{label} kept {kept} of the shifted pair"
        );
    }
    // Per directory: noise is stored raw by every compressor (exactly its size), zeros shrink to < 1%.
    let dir_row = |name: &str| r.directories.iter().find(|g| g.name == name).unwrap();
    for t in r.totals.iter().filter(|t| t.kind == "compression") {
        let noise = dir_row("noise");
        assert_eq!(
            noise.reduced_bytes[t.id as usize], noise.bytes,
            "{} on noise",
            t.label
        );
        let zeros = dir_row("zeros");
        assert!(
            zeros.reduced_bytes[t.id as usize] * 100 < zeros.bytes,
            "{} on zeros",
            t.label
        );
        // Never more than the original (raw fallback per chunk).
        assert!(t.reduced_bytes <= t.original_bytes);
    }
    // Dedup accounting: the original is the first occurrence in walk order, so b.bin (after a.bin) loses 100%.
    let dup_a = r.directories.iter().find(|g| g.name == "dup").unwrap();
    let whole = total(&r, "whole:sha1").id as usize;
    assert_eq!(dup_a.reduced_bytes[whole], 1 << 20);
    let d = &r.dedup[&(whole as u32)];
    assert_eq!((d.chunks, d.unique_chunks, d.collisions), (8, 7, 0)); // the empty file has no chunk
                                                                      // Extensions: "bin" holds dup/*, within, shift.
    let bin = r.extensions.iter().find(|g| g.name == "bin").unwrap();
    assert_eq!(bin.files, 5);

    // The tree picture: every directory a node, with its savings per configuration in configuration order.
    let html = dir.path().join("tree.html");
    let drawn = ecstack_reduce::html::write_html(&dir.path().join("res"), &html, 100).unwrap();
    assert_eq!(drawn, 7); // ".", dup, within, shift, noise, zeros, tiny — and no files
    let h = std::fs::read_to_string(&html).unwrap();
    assert!(h.contains("huge (TiBs and up)") && h.contains("<select id=\"cfg\">"));
    // dup/: whole-file dedup saves 50% (b.bin); noise/: nothing for lz4 (first configuration): white.
    let node = |path: &str| {
        h.lines()
            .find(|l| l.contains(&format!("data-path=\"{path}\"")))
            .unwrap()
            .to_string()
    };
    let savings = |path: &str| -> Vec<f64> {
        let l = node(path);
        let s = l
            .split("data-s=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_string();
        s.split(',').map(|x| x.parse().unwrap()).collect()
    };
    assert_eq!(savings("dup")[total(&r, "whole:sha1").id as usize], 0.5);
    assert!(node("noise").contains("fill=\"#ffffff\""));
    assert!(savings("zeros")[0] > 0.99);

    // The anonymised export: no path text left, the figures unchanged, hashes stable per salt.
    let a = r.clone().anonymized("s1");
    let json = serde_json::to_string(&a).unwrap();
    for name in ["dup", "shift", "noise", "tree", "zeros"] {
        assert!(!json.contains(&format!("\"{name}\"")), "{name} leaked");
    }
    assert_eq!(a.totals, r.totals);
    assert_eq!(a.extensions, r.extensions);
    assert_eq!(a.directories.len(), r.directories.len());
    assert_eq!(r.clone().anonymized("s1").directories, a.directories);
    assert_ne!(r.clone().anonymized("s2").directories, a.directories);
}

#[test]
fn problems_are_counted_never_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    write(&root, "ok/a.txt", &vec![b'a'; 10000]);
    // A FIFO (special file), a symlink loop and a file whose read fails (EIO at offset 0 of /proc/self/mem).
    let fifo = root.join("ok/fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::os::unix::fs::symlink("..", root.join("ok/loop")).unwrap();
    std::os::unix::fs::symlink("/proc/self/mem", root.join("ok/mem")).unwrap();
    let mut c = config(&["lz4@4K"], &["static:4K"]);
    c.follow_symlinks = true;
    let s = analyze(&opts(&root, dir.path().join("res"), c)).unwrap();
    let p = &s.manifest.problems;
    assert_eq!(p.get("special_file"), Some(&1), "{p:?}");
    assert_eq!(p.get("symlink_loop"), Some(&1), "{p:?}");
    assert_eq!(p.get("unreadable"), Some(&1), "{p:?}");
    assert_eq!(s.manifest.walk.files, 2); // a.txt and mem (a regular file of length 0)
    let r = report(&dir.path().join("res"), &ReportOptions::default()).unwrap();
    assert_eq!(r.bytes, 10000);
    // Not following links: the loop and mem are skipped symlinks, not problems.
    let mut c = config(&["lz4@4K"], &[]);
    c.follow_symlinks = false;
    let s = analyze(&opts(&root, dir.path().join("res2"), c)).unwrap();
    assert_eq!(s.manifest.walk.symlinks_skipped, 2);
    assert_eq!(s.manifest.problems.get("special_file"), Some(&1));
    assert_eq!(s.manifest.problems.len(), 1);
}

#[test]
fn bad_input_is_an_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = |tree: &str, res: &str, c: Config| {
        analyze(&opts(&dir.path().join(tree), dir.path().join(res), c))
    };
    let lz4 = || config(&["lz4@4K"], &[]);
    let e = run("missing", "res", lz4()).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    write(dir.path(), "t/f", b"abc");
    run("t", "res", lz4()).unwrap();
    let e = run("t", "res", lz4()).unwrap_err();
    assert!(e.to_string().contains("already holds results"), "{e}");
    let e = report(&dir.path().join("t"), &ReportOptions::default()).unwrap_err();
    assert!(e.to_string().contains("not a results directory"), "{e}");
    assert!(run("t", "r3", config(&[], &[])).is_err());
}

fn comparable(mut r: Report) -> Report {
    for t in &mut r.totals {
        t.seconds = 0.0;
    }
    r
}

#[test]
fn shards_merged_equal_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    build(&root);
    // More files so that every shard gets several, with duplicates across shards.
    for i in 0..30u64 {
        let d = random(100 + i % 7, 40_000 + (i as usize % 3) * 5000);
        write(&root, &format!("many/d{}/f{i}.dat", i % 4), &d);
    }
    let c = config(
        &["zstd:3@32K"],
        &[
            "whole:blake3",
            "static:32K",
            "fastcdc:8K:blake3",
            "rabin:8K:sha256",
        ],
    );
    analyze(&opts(&root, dir.path().join("single"), c.clone())).unwrap();
    let n = 3;
    let mut shards = Vec::new();
    for i in 0..n {
        let mut o = opts(&root, dir.path().join(format!("s{i}")), c.clone());
        o.shard = Some(Shard { index: i, count: n });
        let s = analyze(&o).unwrap();
        assert!(
            s.manifest.files > 0 && s.manifest.files < 39,
            "shard {i} has {} files",
            s.manifest.files
        );
        shards.push(dir.path().join(format!("s{i}")));
    }
    // Missing shard: refused.
    assert!(merge(&dir.path().join("bad"), &shards[..2]).is_err());
    merge(&dir.path().join("merged"), &shards).unwrap();
    let ro = ReportOptions {
        top: 1000,
        estimate_fraction: 0.3,
    };
    let single = comparable(report(&dir.path().join("single"), &ro).unwrap());
    let merged = comparable(report(&dir.path().join("merged"), &ro).unwrap());
    assert_eq!(single, merged);
    // And the cross-shard duplicates were found: whole-file dedup saves something.
    let w = total(&single, "whole:blake3");
    assert!(w.reduced_bytes < w.original_bytes);
}

#[test]
fn sampled_run_estimates_with_an_interval() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    // 200 files: half text-like (compressible), half random.
    for i in 0..200u64 {
        let d = if i % 2 == 0 {
            format!("line {i} of a text file\n")
                .repeat(300)
                .into_bytes()
        } else {
            random(i, 7000)
        };
        write(&root, &format!("d{}/f{i}", i % 10), &d);
    }
    let c = config(&["zstd:3@16K"], &[]);
    let mut o = opts(&root, dir.path().join("sample"), c.clone());
    o.sample_fraction = 0.3;
    let s = analyze(&o).unwrap();
    assert_eq!(s.manifest.walk.files, 200);
    assert!(
        s.manifest.files > 30 && s.manifest.files < 100,
        "{} sampled",
        s.manifest.files
    );
    analyze(&opts(&root, dir.path().join("full"), c)).unwrap();
    let full = report_of(&dir.path().join("full"), 5, 0.3);
    let t = &full.totals[0];
    let e = t.estimate.as_ref().unwrap();
    assert_covers(e, t);
    // The sampled run's ratio is the estimate's point value (same files, same rule).
    let sampled = report_of(&dir.path().join("sample"), 5, 0.0);
    assert!((sampled.totals[0].ratio - e.ratio).abs() < 1e-12);
}

/// A live-throttling run: `files` files of 2 MiB of 16-letter text (seeds `seed`, `seed + 1`, …)
/// in `dir/tree`, analysed into `dir/res` on a thread of its own, with at most 2 workers and the
/// configuration file `dir/treechunks.toml` (holding `config`) polled and re-read on SIGHUP.
/// Returns the configuration file and the analysis once it has started.
fn start_throttled(
    dir: &Path,
    files: u64,
    seed: u64,
    config: &str,
) -> (PathBuf, JoinHandle<AnalyzeSummary>) {
    let root = dir.join("tree");
    let letters = b"abcdefghijklmnop";
    for i in 0..files {
        let data: Vec<u8> = random(seed + i, 2 << 20)
            .iter()
            .map(|b| letters[(b & 15) as usize])
            .collect();
        write(&root, &format!("f{i:02}.txt"), &data);
    }
    let cfg = dir.join("treechunks.toml");
    std::fs::write(&cfg, config).unwrap();
    let out = dir.join("res");
    let mut o = opts(&root, out.clone(), Config::load(&cfg).unwrap());
    o.config_path = Some(cfg.clone());
    o.workers_max = Some(2);
    let run = std::thread::spawn(move || analyze(&o).unwrap());
    wait_until_started(&out);
    (cfg, run)
}

/// Live throttling end to end: the analysis polls its configuration file and applies a new `workers`
/// while running (1 → 2 here), and the summary lists the change.
#[test]
fn config_file_changes_the_worker_count_while_running() {
    let dir = tempfile::tempdir().unwrap();
    // 80 MB of 16-letter text under zlib:9: seconds of work at one worker, on any machine here.
    let text = |w: usize| format!("workers = {w}\ncompression = [\"zlib:9@16K\"]\ndedup = []\n");
    let (cfg, run) = start_throttled(dir.path(), 40, 100, &text(1));
    // The analysis has read the file's mtime; now change it.
    std::thread::sleep(std::time::Duration::from_millis(300));
    std::fs::write(&cfg, text(2)).unwrap();
    let s = run.join().unwrap();
    assert_eq!(s.manifest.files, 40);
    let limits = &s.worker_limits;
    assert_eq!(limits[0].1, 1, "{limits:?}");
    assert_eq!(
        limits.last().unwrap().1,
        2,
        "the new worker count was not applied (run took {:.2} s): {limits:?}",
        s.manifest.wall_seconds
    );
    assert!(limits.last().unwrap().0 < s.manifest.wall_seconds);
}

/// `reload_config` (the binary's SIGHUP hook) re-reads the configuration file at once: the new
/// `workers` is written with the old mtime (so the mtime poll cannot see it) and still applies,
/// after the request and not before.
#[test]
fn reload_rereads_the_config_file_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let text = |w: usize| {
        format!("workers = {w}\ncompression = [\"zlib:9@16K,64K\", \"deflate:9@16K,64K\"]\ndedup = []\n")
    };
    let (cfg, run) = start_throttled(dir.path(), 30, 200, &text(1));
    // The mtime is read.
    let started = std::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(300));
    // workers = 2, under the old mtime.
    replace_keeping_mtime(&cfg, &text(2));
    // A poll of the mtime (every 0.5 s) passes without a change; then the signal. Four zlib/deflate
    // configurations over 60 MB keep one worker busy for seconds after it (1.4 s was too short on an
    // idle core).
    std::thread::sleep(std::time::Duration::from_millis(600));
    let signalled = started.elapsed().as_secs_f64();
    ecstack_reduce::reload_config();
    let s = run.join().unwrap();
    assert_eq!(s.manifest.files, 30);
    let limits = &s.worker_limits;
    assert_eq!(limits[0].1, 1, "{limits:?}");
    let last = *limits.last().unwrap();
    assert_eq!(
        last.1, 2,
        "SIGHUP did not apply the new worker count (run took {:.2} s, signal at {signalled:.2} s): {limits:?}",
        s.manifest.wall_seconds
    );
    // The analysis clock starts before `started`, so the change is at least `signalled` in.
    assert!(
        last.0 >= signalled,
        "applied at {:.2} s, before the signal at {signalled:.2} s: {limits:?}",
        last.0
    );
}

/// A bytes-weighted sample takes a file of x bytes with probability min(1, x / spacing): over many
/// spacings (each with its own start) the share of spacings that take the file matches the mean of
/// min(1, x / spacing); a file at least one spacing long is always in, an empty file never.
#[test]
fn byte_sample_takes_files_in_proportion_to_size() {
    for (start, len) in [(0u64, 300u64), (12_345, 300), (999_999, 2_500), (7, 9_000)] {
        let (mut hits, mut want) = (0.0, 0.0);
        let spacings = 10_000..30_000u64;
        let n = (spacings.end - spacings.start) as f64;
        for s in spacings {
            hits += byte_sampled(start, len, s) as u8 as f64;
            want += (len as f64 / s as f64).min(1.0);
        }
        let (p, q) = (hits / n, want / n);
        // Binomial standard error at these n: < 0.004; allow 4 of them.
        assert!((p - q).abs() < 0.016, "start {start} len {len}: {p} vs {q}");
    }
    assert!((1000..5000).all(|s| byte_sampled(123, s, s)));
    assert!((1000..5000).all(|s| !byte_sampled(123, 0, s)));
}

/// The bytes-weighted estimate on a tree where one incompressible giant holds most of the bytes:
/// the giant is always in the sample (it is longer than the spacing), the exact figure lies inside
/// the interval, and an `analyze --sample-bytes` run with that spacing takes the same files (its
/// estimate equals the full run's, point and interval).
#[test]
fn bytes_weighted_estimate_covers_a_giant_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    write(&root, "big/giant.iso", &random(77, 4 << 20));
    let text = b"the quick brown fox jumps over the lazy dog; ".repeat(400);
    let mut sizes = 0u64;
    for i in 0..300u64 {
        let len = 2000 + (i * 7919) % 14_000;
        let noisy = (len * (i % 10)) / 10; // 0..90% of the file incompressible
        let mut d = random(1000 + i, noisy as usize);
        d.extend_from_slice(&text[..(len - noisy) as usize]);
        write(&root, &format!("d{}/f{i}.txt", i % 12), &d);
        sizes += len;
    }
    let c = config(&["lz4@64K"], &[]);
    analyze(&opts(&root, dir.path().join("full"), c.clone())).unwrap();
    let full = report_of(&dir.path().join("full"), 5, 0.05);
    let t = &full.totals[0];
    let e = t
        .estimate_bytes
        .as_ref()
        .expect("a bytes-weighted estimate");
    assert_eq!(e.design, "bytes");
    assert!(
        e.bytes_sampled >= 4 << 20,
        "the giant is not in the sample: {e:?}"
    );
    assert!(
        e.spacing_bytes < 4 << 20 && e.spacing_bytes > sizes / 300,
        "{e:?}"
    );
    assert!(
        e.files_sampled >= 8 && e.files_sampled <= 30,
        "{} files sampled (about 15 expected)",
        e.files_sampled
    );
    assert_covers(e, t);
    eprintln!(
        "exact {:.4}; bytes-weighted {:.4} [{:.4}, {:.4}] from {} files; file sample {:?}",
        t.ratio, e.ratio, e.ratio_low, e.ratio_high, e.files_sampled, t.estimate
    );
    // The same sample drawn by the analysis itself.
    let mut o = opts(&root, dir.path().join("sample"), c);
    o.sample_bytes = Some(e.spacing_bytes);
    let s = analyze(&o).unwrap();
    assert_eq!(s.manifest.files, e.files_sampled);
    assert_eq!(s.manifest.sample_bytes, Some(e.spacing_bytes));
    let sampled = report(&dir.path().join("sample"), &ReportOptions::default()).unwrap();
    let es = sampled.totals[0].estimate_bytes.as_ref().unwrap();
    assert!(sampled.totals[0].estimate.is_none());
    assert!((es.ratio - e.ratio).abs() < 1e-12, "{es:?} vs {e:?}");
    assert!((es.ratio_low - e.ratio_low).abs() < 1e-12);
    assert!(sampled.to_text().contains("bytes-weighted"));
    // Both kinds of sample at once is a usage error.
    let mut o = opts(&root, dir.path().join("both"), config(&["lz4@64K"], &[]));
    o.sample_bytes = Some(1 << 20);
    o.sample_fraction = 0.5;
    assert!(analyze(&o).is_err());
}
