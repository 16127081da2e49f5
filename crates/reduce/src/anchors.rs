//! `ecstack reduce anchors`: our figures beside the tools people trust, on the same tree in one run.
//!
//! - Dedup: `borg create --stats` (fixed-size chunker = our `static`, exactly; buzhash CDC with borg's
//!   default parameters beside our Rabin and FastCDC at the same min/avg/max/window) and `restic stats`
//!   (its Rabin chunker, fixed at min 512 KiB / avg 1 MiB / max 8 MiB / window 64, beside our Rabin at
//!   those parameters). Borg and restic each get a fresh repository without compression.
//! - Compression: the CLIs `gzip -6`, `lz4 -1`, `zstd -3` on every file (whole files, one process per
//!   file), beside our `deflate:6`, `lz4` and `zstd:3` with chunks as large as the CLI's own blocks.
//!
//! docs/reduce.md ("Anchors") explains each difference. A missing tool is a note in the report, or an
//! error with `require_tools` (the CI test sets it under CI=true).

use crate::{analyze, AnalyzeOptions, Config, ReduceError, ReportOptions};
use serde::Serialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What to compare and where the tools' repositories go.
#[derive(Clone, Debug)]
pub struct AnchorOptions {
    pub root: PathBuf,
    /// Scratch directory (our results, borg and restic repositories); created, and removed at the end
    /// unless `keep`.
    pub work: PathBuf,
    pub keep: bool,
    /// Block size of borg's fixed chunker and our static segmentation.
    pub static_bytes: u64,
    /// Our analysis' workers (and the threads running the compressor CLIs).
    pub workers: usize,
    /// A missing borg, restic, gzip, lz4 or zstd is an error (not a note).
    pub require_tools: bool,
    /// Skip the compressor CLIs (one process per file per tool: slow on trees of many files).
    pub no_cli: bool,
}

/// One dedup comparison.
#[derive(Clone, Debug, Serialize)]
pub struct DedupAnchor {
    pub tool: String,
    /// The tool's chunker parameters as given to it.
    pub tool_params: String,
    /// Our configuration.
    pub ours: String,
    /// Bytes of the files (the tool's own count).
    pub tool_original_bytes: u64,
    /// The tool's deduplicated data bytes (see `tool_figure`).
    pub tool_unique_bytes: u64,
    /// Which figure of the tool that is.
    pub tool_figure: String,
    pub ours_original_bytes: u64,
    pub ours_unique_bytes: u64,
    pub tool_ratio: f64,
    pub ours_ratio: f64,
    /// Our unique bytes over the tool's original bytes: the ratio comparable with `tool_ratio` when the
    /// tree has hard links (borg and restic count a hard-linked file once, we count every path and
    /// deduplicate the copies).
    pub ours_ratio_on_tool_original: f64,
    /// Chunks the tool stored (when it says), and ours (unique fingerprints).
    pub tool_chunks: Option<u64>,
    pub ours_unique_chunks: u64,
    /// (ours − tool) / tool, of the unique bytes.
    pub difference: f64,
}

/// One compression comparison.
#[derive(Clone, Debug, Serialize)]
pub struct CompressionAnchor {
    /// The command, with `FILE` for each file.
    pub tool: String,
    pub ours: String,
    pub original_bytes: u64,
    /// Sum of the CLI's output sizes, as written (headers, trailers; a file that does not shrink grows).
    pub tool_bytes: u64,
    /// Sum over files of min(CLI output, file size): the file-system rule ours applies per chunk.
    pub tool_bytes_raw_rule: u64,
    pub ours_bytes: u64,
    pub tool_ratio: f64,
    pub tool_ratio_raw_rule: f64,
    pub ours_ratio: f64,
    /// (ours − tool with raw rule) / tool with raw rule.
    pub difference: f64,
    /// Files the CLI failed on (not counted on either side would be unfair: counted on neither).
    pub failed_files: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct AnchorReport {
    pub root: String,
    pub files: u64,
    pub bytes: u64,
    pub dedup: Vec<DedupAnchor>,
    pub compression: Vec<CompressionAnchor>,
    /// Tools not found (their rows are absent).
    pub missing_tools: Vec<String>,
    /// Tool versions, as they print them.
    pub versions: Vec<String>,
    pub seconds: f64,
}

/// restic's chunker (chunker package): fixed parameters, not configurable from its CLI.
const RESTIC_MIN: u64 = 512 << 10;
const RESTIC_MAX: u64 = 8 << 20;
const RESTIC_AVG_BITS: u32 = 20;
const RESTIC_WINDOW: u64 = 64;
/// borg 1.2's default buzhash chunker: min 2^19, max 2^23, mask 21 bits, window 4095.
const BORG_BUZHASH: (u32, u32, u32, u64) = (19, 23, 21, 4095);

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn version(tool: &str, arg: &str) -> String {
    Command::new(tool)
        .arg(arg)
        .output()
        .map(|o| {
            let s = String::from_utf8_lossy(if o.stdout.is_empty() {
                &o.stderr
            } else {
                &o.stdout
            })
            .into_owned();
            s.lines().next().unwrap_or("").trim().to_string()
        })
        .unwrap_or_default()
}

fn run(mut cmd: Command, what: &str) -> Result<Vec<u8>, ReduceError> {
    let o = cmd
        .output()
        .map_err(|e| ReduceError::Io(format!("{what}: {e}")))?;
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        return Err(ReduceError::Io(format!(
            "{what} failed ({}): {}",
            o.status,
            err.lines().last().unwrap_or("").trim()
        )));
    }
    Ok(o.stdout)
}

fn json(bytes: &[u8], what: &str) -> Result<serde_json::Value, ReduceError> {
    // restic and borg may print progress lines before the JSON: take the last JSON object.
    let text = String::from_utf8_lossy(bytes);
    if let Ok(v) = serde_json::from_str(&text) {
        return Ok(v);
    }
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| ReduceError::Io(format!("{what}: no JSON in its output")))
}

fn u(v: &serde_json::Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_u64().unwrap_or(0)
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

fn size_spec(b: u64) -> String {
    if b % (1 << 20) == 0 {
        format!("{}M", b >> 20)
    } else if b % 1024 == 0 {
        format!("{}K", b >> 10)
    } else {
        b.to_string()
    }
}

/// Run every anchor on `opts.root`.
pub fn anchors(opts: &AnchorOptions) -> Result<AnchorReport, ReduceError> {
    let t0 = std::time::Instant::now();
    let tools = ["borg", "restic", "gzip", "lz4", "zstd"];
    let missing: Vec<String> = tools
        .iter()
        .filter(|t| !(opts.no_cli && matches!(**t, "gzip" | "lz4" | "zstd")) && !have(t))
        .map(|t| t.to_string())
        .collect();
    if opts.require_tools && !missing.is_empty() {
        return Err(ReduceError::Usage(format!(
            "anchors: missing {} (Debian: apt-get install borgbackup restic gzip lz4 zstd; \
             scripts/setup.sh installs them)",
            missing.join(", ")
        )));
    }
    let has = |t: &str| !missing.iter().any(|m| m == t);
    let root = std::fs::canonicalize(&opts.root)
        .map_err(|e| ReduceError::Usage(format!("{}: {e}", opts.root.display())))?;
    if opts.work.exists() {
        return Err(ReduceError::Usage(format!(
            "{} exists: anchors needs a fresh scratch directory",
            opts.work.display()
        )));
    }
    std::fs::create_dir_all(&opts.work)
        .map_err(|e| ReduceError::Io(format!("{}: {e}", opts.work.display())))?;
    let work = std::fs::canonicalize(&opts.work)
        .map_err(|e| ReduceError::Io(format!("{}: {e}", opts.work.display())))?;
    let r = run_all(opts, &root, &work, &has, missing.clone(), t0);
    if !opts.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    r
}

fn run_all(
    opts: &AnchorOptions,
    root: &Path,
    work: &Path,
    has: &dyn Fn(&str) -> bool,
    missing: Vec<String>,
    t0: std::time::Instant,
) -> Result<AnchorReport, ReduceError> {
    // Ours, every configuration in one read. The CLIs' block sizes: gzip and zstd compress a whole
    // file as one stream (our largest chunk, 64 MiB, is the nearest), lz4's CLI cuts 4 MiB independent
    // blocks (its default -B7).
    let s = size_spec(opts.static_bytes);
    let (bmin, bmax, bmask, bwin) = BORG_BUZHASH;
    let borg_cdc = format!(
        "{}-{}-{}",
        size_spec(1 << bmask),
        size_spec(1 << bmin),
        size_spec(1 << bmax)
    );
    let restic_cdc = format!(
        "{}-{}-{}",
        size_spec(1 << RESTIC_AVG_BITS),
        size_spec(RESTIC_MIN),
        size_spec(RESTIC_MAX)
    );
    let compression = vec![
        "deflate:6@64M".to_string(),
        "lz4@4M".to_string(),
        "zstd:3@64M".to_string(),
    ];
    let dedup = vec![
        format!("static:{s}:sha256"),
        format!("rabin:{borg_cdc}-w{bwin}:sha256"),
        format!("fastcdc:{borg_cdc}:blake3"),
        format!("rabin:{restic_cdc}-w{RESTIC_WINDOW}:sha256"),
    ];
    let out = work.join("ours");
    analyze(&AnalyzeOptions {
        root: root.to_path_buf(),
        out: out.clone(),
        config: Config {
            workers: opts.workers.max(1),
            compression: compression.clone(),
            dedup: dedup.clone(),
            follow_symlinks: false,
            ..Config::default()
        },
        config_path: None,
        workers_max: Some(opts.workers.max(1)),
        shard: None,
        sample_fraction: 1.0,
        sample_bytes: None,
        progress: false,
    })?;
    let rep = crate::report(
        &out,
        &ReportOptions {
            top: 0,
            estimate_fraction: 0.0,
        },
    )?;
    let total = |i: usize| &rep.totals[i];
    let nc = compression.len();
    let mut report = AnchorReport {
        root: root.to_string_lossy().into_owned(),
        files: rep.files,
        bytes: rep.bytes,
        dedup: Vec::new(),
        compression: Vec::new(),
        missing_tools: missing,
        versions: Vec::new(),
        seconds: 0.0,
    };
    let dedup_row = |tool: &str,
                     params: String,
                     i: usize,
                     figure: &str,
                     orig: u64,
                     uniq: u64,
                     chunks: Option<u64>| {
        let t = total(nc + i);
        let ours_chunks = rep.dedup.get(&t.id).map_or(0, |d| d.unique_chunks);
        DedupAnchor {
            tool: tool.into(),
            tool_params: params,
            ours: t.label.clone(),
            tool_original_bytes: orig,
            tool_unique_bytes: uniq,
            tool_figure: figure.into(),
            ours_original_bytes: t.original_bytes,
            ours_unique_bytes: t.reduced_bytes,
            tool_ratio: ratio(uniq, orig),
            ours_ratio: t.ratio,
            ours_ratio_on_tool_original: ratio(t.reduced_bytes, orig),
            tool_chunks: chunks,
            ours_unique_chunks: ours_chunks,
            difference: ratio(t.reduced_bytes, uniq) - 1.0,
        }
    };

    if has("borg") {
        report.versions.push(version("borg", "--version"));
        for (i, params) in [
            format!("fixed,{}", opts.static_bytes),
            format!("buzhash,{bmin},{bmax},{bmask},{bwin}"),
        ]
        .into_iter()
        .enumerate()
        {
            let repo = work.join(format!("borg{i}"));
            let borg = |args: &[&str]| {
                let mut c = Command::new("borg");
                c.args(args)
                    .current_dir(root)
                    .env("BORG_BASE_DIR", work.join("borg-base"))
                    .env("BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK", "yes")
                    .env("BORG_RELOCATED_REPO_ACCESS_IS_OK", "yes")
                    .env_remove("BORG_REPO")
                    .env_remove("BORG_PASSPHRASE");
                c
            };
            let repo_s = repo.to_string_lossy().into_owned();
            run(borg(&["init", "--encryption=none", &repo_s]), "borg init")?;
            let v = json(
                &run(
                    borg(&[
                        "create",
                        "--stats",
                        "--json",
                        "--compression",
                        "none",
                        "--chunker-params",
                        &params,
                        &format!("{repo_s}::a"),
                        ".",
                    ]),
                    "borg create",
                )?,
                "borg create",
            )?;
            // `cache.stats.unique_size`: the repository's unique chunks, uncompressed — the file
            // data plus borg's own metadata (the archive's item stream and archive object);
            // `archive.stats.original_size` counts the files plus the item stream.
            let unique = u(&v, &["cache", "stats", "unique_size"]);
            let orig = u(&v, &["archive", "stats", "original_size"]);
            let chunks = u(&v, &["cache", "stats", "total_unique_chunks"]);
            // Ours: static for fixed, Rabin (and FastCDC) at buzhash's parameters.
            report.dedup.push(dedup_row(
                "borg create --stats",
                params.clone(),
                if i == 0 { 0 } else { 1 },
                "cache.stats.unique_size (data + borg metadata)",
                orig,
                unique,
                Some(chunks),
            ));
            if i == 1 {
                report.dedup.push(dedup_row(
                    "borg create --stats",
                    params.clone(),
                    2,
                    "cache.stats.unique_size (data + borg metadata)",
                    orig,
                    unique,
                    Some(chunks),
                ));
            }
        }
    }

    if has("restic") {
        report.versions.push(version("restic", "version"));
        let repo = work.join("restic");
        let restic = |args: &[&str]| {
            let mut c = Command::new("restic");
            c.args(args)
                .current_dir(root)
                .env("RESTIC_REPOSITORY", &repo)
                .env("RESTIC_PASSWORD", "ecstack-anchors")
                .env("RESTIC_CACHE_DIR", work.join("restic-cache"))
                .env_remove("RESTIC_PASSWORD_FILE")
                .env_remove("RESTIC_PASSWORD_COMMAND");
            c
        };
        run(restic(&["init", "-q"]), "restic init")?;
        run(
            restic(&["backup", "-q", "--json", "--compression", "off", "."]),
            "restic backup",
        )?;
        // raw-data: every blob stored (data and tree), each with restic's 32 bytes of nonce and MAC
        // (no compression): minus those bytes it is the unique data plus restic's directory trees.
        // (`--mode blobs-per-file` in restic 0.14 counts a blob once per file, not once: not a dedup
        // figure.) restore-size: the files' bytes, a hard-linked file once.
        let v = json(
            &run(
                restic(&["stats", "--json", "--mode", "raw-data"]),
                "restic stats",
            )?,
            "restic stats",
        )?;
        let r = json(
            &run(
                restic(&["stats", "--json", "--mode", "restore-size"]),
                "restic stats",
            )?,
            "restic stats",
        )?;
        let list = run(restic(&["list", "blobs", "-q"]), "restic list blobs")?;
        let data_blobs = String::from_utf8_lossy(&list)
            .lines()
            .filter(|l| l.starts_with("data "))
            .count() as u64;
        let blobs = u(&v, &["total_blob_count"]);
        report.dedup.push(dedup_row(
            "restic stats",
            format!(
                "rabin min {} avg {} max {} window {} (restic's fixed chunker; random polynomial per repository)",
                size_spec(RESTIC_MIN),
                size_spec(1 << RESTIC_AVG_BITS),
                size_spec(RESTIC_MAX),
                RESTIC_WINDOW
            ),
            3,
            "stats --mode raw-data total_size - 32 B per blob (data + restic's trees)",
            u(&r, &["total_size"]),
            u(&v, &["total_size"]).saturating_sub(32 * blobs),
            Some(data_blobs),
        ));
    }

    if !opts.no_cli {
        let files = file_list(&out)?;
        let clis: [(&str, &[&str]); 3] = [
            ("gzip", &["-6", "-n", "-c"]),
            ("lz4", &["-1", "-c", "-q"]),
            ("zstd", &["-3", "-c", "-q"]),
        ];
        for (k, (tool, args)) in clis.iter().enumerate() {
            if !has(tool) {
                continue;
            }
            report.versions.push(version(tool, "--version"));
            let (sum, sum_raw, orig, failed) =
                cli_sizes(tool, args, root, &files, opts.workers.max(1));
            let t = total(k);
            let ours = t.reduced_bytes;
            report.compression.push(CompressionAnchor {
                tool: format!("{tool} {} FILE", args.join(" ")),
                ours: t.label.clone(),
                original_bytes: orig,
                tool_bytes: sum,
                tool_bytes_raw_rule: sum_raw,
                ours_bytes: ours,
                tool_ratio: ratio(sum, orig),
                tool_ratio_raw_rule: ratio(sum_raw, orig),
                ours_ratio: t.ratio,
                difference: ratio(ours, sum_raw) - 1.0,
                failed_files: failed,
            });
        }
    }
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// (relative path, bytes) of every analysed file.
fn file_list(results: &Path) -> Result<Vec<(String, u64)>, ReduceError> {
    let conn = crate::results::open_db(results)?;
    let mut st = conn.prepare("SELECT path, bytes FROM file ORDER BY seq")?;
    let rows = st
        .query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Run `tool args FILE` on every file (in `threads` threads); (Σ output, Σ min(output, size), Σ size,
/// failures). A failed file counts on neither side.
fn cli_sizes(
    tool: &str,
    args: &[&str],
    root: &Path,
    files: &[(String, u64)],
    threads: usize,
) -> (u64, u64, u64, u64) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let sums = std::sync::Mutex::new((0u64, 0u64, 0u64, 0u64));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((rel, bytes)) = files.get(i) else {
                    break;
                };
                let n = Command::new(tool)
                    .args(args)
                    .arg(root.join(rel))
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .ok()
                    .and_then(|mut c| {
                        let mut n = 0u64;
                        let mut buf = vec![0u8; 1 << 16];
                        let out = c.stdout.as_mut()?;
                        loop {
                            match out.read(&mut buf) {
                                Ok(0) => break,
                                Ok(k) => n += k as u64,
                                Err(_) => return None,
                            }
                        }
                        c.wait().ok()?.success().then_some(n)
                    });
                let mut g = sums.lock().unwrap_or_else(|e| e.into_inner());
                match n {
                    Some(n) => {
                        g.0 += n;
                        g.1 += n.min(*bytes);
                        g.2 += bytes;
                    }
                    None => g.3 += 1,
                }
            });
        }
    });
    sums.into_inner().unwrap_or_else(|e| e.into_inner())
}

impl AnchorReport {
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "anchors on {}: {} files, {} bytes ({:.1} s)\n",
            self.root, self.files, self.bytes, self.seconds
        );
        if !self.missing_tools.is_empty() {
            s += &format!(
                "missing (rows left out): {}\n",
                self.missing_tools.join(", ")
            );
        }
        s += "\ndedup (after / original)\n";
        for d in &self.dedup {
            s += &format!(
                "  {:<20} {:<26} {:.4}  ({} of {} B, {} chunks)   ours {:<34} {:.4} of the tool's original, {:.4} of ours  ({} of {} B, {} chunks)   unique bytes {:+.2}%\n",
                d.tool,
                d.tool_params.split(" (").next().unwrap_or(""),
                d.tool_ratio,
                d.tool_unique_bytes,
                d.tool_original_bytes,
                d.tool_chunks.map_or("?".into(), |c| c.to_string()),
                d.ours,
                d.ours_ratio_on_tool_original,
                d.ours_ratio,
                d.ours_unique_bytes,
                d.ours_original_bytes,
                d.ours_unique_chunks,
                d.difference * 100.0
            );
        }
        s += "\ncompression (after / original; CLI as written, and with a file that does not shrink stored raw)\n";
        for c in &self.compression {
            s += &format!(
                "  {:<18} {:.4}  raw rule {:.4}   ours {:<14} {:.4}   {:+.2}%{}\n",
                c.tool,
                c.tool_ratio,
                c.tool_ratio_raw_rule,
                c.ours,
                c.ours_ratio,
                c.difference * 100.0,
                if c.failed_files > 0 {
                    format!("  ({} files failed)", c.failed_files)
                } else {
                    String::new()
                }
            );
        }
        s += &format!("\n{}\n", self.versions.join("; "));
        s
    }
}
