//! `ecstack reduce` end to end through the binary: analyze → report (--json), a shard pair merged, and
//! bad input as one error line with exit status 1.

#[path = "../../reduce/tests/common/mod.rs"]
mod reduce_common;

use reduce_common::{replace_keeping_mtime, wait_until_started};
use std::process::Command;

fn ecstack(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(args)
        .output()
        .expect("run ecstack")
}

/// The JSON a successful run printed (a failed run's stderr in the message).
fn json_of(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `ecstack reduce analyze ROOT -o OUT OPTIONS... --json`.
fn analyze_json(root: &str, out: &str, options: &[&str]) -> serde_json::Value {
    let mut args = vec!["reduce", "analyze", root, "-o", out];
    args.extend_from_slice(options);
    args.push("--json");
    json_of(&ecstack(&args))
}

/// `ecstack reduce report RES --json`.
fn report_json(res: &str) -> serde_json::Value {
    json_of(&ecstack(&["reduce", "report", res, "--json"]))
}

#[test]
fn analyze_report_merge_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir_all(root.join("a")).unwrap();
    let text = "the brothers karamazov\n".repeat(5000);
    std::fs::write(root.join("a/one.txt"), &text).unwrap();
    std::fs::write(root.join("two.txt"), &text).unwrap();
    let d = |p: &str| dir.path().join(p).to_string_lossy().into_owned();
    let r = root.to_string_lossy().into_owned();
    let s = analyze_json(
        &r,
        &d("res"),
        &["--compress", "zstd:3@16K", "--dedup", "whole:blake3"],
    );
    assert_eq!(s["manifest"]["files"], 2);
    let rep = report_json(&d("res"));
    let totals = rep["totals"].as_array().unwrap();
    assert_eq!(totals[1]["label"], "whole:blake3");
    assert_eq!(totals[1]["reduced_bytes"], text.len());
    assert!(totals[0]["reduced_bytes"].as_u64().unwrap() < text.len() as u64 / 10);
    // Two shards merged: the same totals.
    for i in 0..2 {
        let o = ecstack(&[
            "reduce",
            "analyze",
            &r,
            "-o",
            &d(&format!("s{i}")),
            "--compress",
            "zstd:3@16K",
            "--dedup",
            "whole:blake3",
            "--shard",
            &format!("{i}/2"),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = ecstack(&["reduce", "merge", &d("s0"), &d("s1"), "-o", &d("m")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let merged = report_json(&d("m"));
    for k in ["original_bytes", "reduced_bytes"] {
        assert_eq!(merged["totals"][0][k], totals[0][k]);
        assert_eq!(merged["totals"][1][k], totals[1][k]);
    }
    // Bad input: one line, status 1.
    for args in [
        vec![
            "reduce",
            "analyze",
            &r,
            "-o",
            &d("x"),
            "--compress",
            "lzo@16K",
        ],
        vec![
            "reduce",
            "analyze",
            &r,
            "-o",
            &d("x"),
            "--dedup",
            "fastcdc:1000",
        ],
        vec!["reduce", "report", &r],
        vec!["reduce", "merge", &d("s0"), "-o", &d("y")],
    ] {
        let o = ecstack(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("ecstack: error: "), "{err}");
    }
}

/// Under CI=true / ECSTACK_REQUIRE_CLIENTS=1 a missing tool fails the test; elsewhere it is skipped.
/// `tools`: (tool, the apt package that installs it).
fn tools_or_skip(tools: &[(&str, &str)]) -> bool {
    tools
        .iter()
        .all(|&(tool, package)| ecstack_testkit::require_tool(tool, package))
}

/// `reduce anchors` on a hand-built tree: borg's fixed chunker deduplicates exactly what our static
/// segmentation does (borg adds only its own metadata), restic's whole small files exactly what our
/// Rabin at its parameters does, and the compressor CLIs agree with ours within their headers.
#[test]
fn anchors_against_borg_restic_and_the_clis() {
    if !tools_or_skip(&[
        ("borg", "borgbackup"),
        ("restic", "restic"),
        ("gzip", "gzip"),
        ("lz4", "lz4"),
        ("zstd", "zstd"),
    ]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir_all(root.join("a")).unwrap();
    let text: Vec<u8> = (0..300_000u32)
        .map(|i| b"the brothers karamazov, book one\n"[(i % 33) as usize] ^ ((i / 4096) as u8 & 1))
        .collect();
    std::fs::write(root.join("a/one.txt"), &text).unwrap();
    std::fs::write(root.join("two.txt"), &text).unwrap(); // a duplicate file
    let mut noise = vec![0u8; 100_000];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(root.join("noise.bin"), &noise).unwrap(); // stored raw by every rule
    let block: Vec<u8> = noise[..65536].iter().map(|b| b.wrapping_add(1)).collect();
    std::fs::write(root.join("blocks.bin"), block.repeat(4)).unwrap(); // 4 equal 64K blocks
    let o = ecstack(&[
        "reduce",
        "anchors",
        &root.to_string_lossy(),
        "--work",
        &dir.path().join("work").to_string_lossy(),
        "--static-size",
        "64K",
        "--require-tools",
        "--json",
    ]);
    let r = json_of(&o);
    let total = 2 * 300_000 + 100_000 + 4 * 65536u64;
    assert_eq!(r["bytes"], total);
    let dedup = r["dedup"].as_array().unwrap();
    assert_eq!(dedup.len(), 4, "{r}");
    // static:64K: one.txt once, noise once, one block of blocks.bin.
    assert_eq!(dedup[0]["ours"], "static:64K:sha256");
    assert_eq!(dedup[0]["ours_unique_bytes"], 300_000 + 100_000 + 65536u64);
    let borg = dedup[0]["tool_unique_bytes"].as_u64().unwrap();
    let ours = dedup[0]["ours_unique_bytes"].as_u64().unwrap();
    assert!(
        borg >= ours && borg - ours < 8192,
        "borg fixed,65536 {borg} vs ours {ours} (borg's metadata only)"
    );
    // restic: every file is below its 512 KiB minimum chunk: whole-file dedup, as ours at its
    // parameters (restic adds its directory trees), the same 3 data chunks.
    assert_eq!(dedup[3]["tool"], "restic stats");
    let ours = dedup[3]["ours_unique_bytes"].as_u64().unwrap();
    assert_eq!(ours, 300_000 + 100_000 + 4 * 65536u64);
    let restic = dedup[3]["tool_unique_bytes"].as_u64().unwrap();
    assert!(
        restic >= ours && restic - ours < 8192,
        "restic {restic} vs ours {ours} (restic's trees only)"
    );
    assert_eq!(dedup[3]["tool_chunks"], 3);
    assert_eq!(dedup[3]["ours_unique_chunks"], 3);
    assert_eq!(dedup[3]["tool_original_bytes"], total);
    // Compression: within 2% of the CLI (with the raw rule) for gzip -6, lz4 -1, zstd -3.
    let comp = r["compression"].as_array().unwrap();
    assert_eq!(comp.len(), 3, "{r}");
    for c in comp {
        let d = c["difference"].as_f64().unwrap();
        assert!(d.abs() < 0.02, "{c}");
        // The noise file does not shrink: the raw rule keeps at least its bytes.
        assert!(c["ours_bytes"].as_u64().unwrap() >= 100_000, "{c}");
    }
}

/// Live throttling by a signal, through the binary: `workers` is raised in the configuration file under
/// its old mtime (the poll cannot see it), then `kill -HUP` makes the running process apply it (its
/// --json summary lists the change). Also `--sample-bytes` and its bytes-weighted estimate.
#[test]
fn sighup_and_sample_bytes_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    std::fs::create_dir_all(&root).unwrap();
    // 60 MB of 16-letter text under four zlib/deflate configurations: seconds of work at one worker,
    // well past the signal at about 0.9 s.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..30 {
        let data: Vec<u8> = (0..2 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b'a' + (x & 15) as u8
            })
            .collect();
        std::fs::write(root.join(format!("f{i:02}.txt")), data).unwrap();
    }
    let cfg = dir.path().join("treechunks.toml");
    let text = |w: usize| {
        format!("workers = {w}\ncompression = [\"zlib:9@16K,64K\", \"deflate:9@16K,64K\"]\ndedup = []\n")
    };
    std::fs::write(&cfg, text(1)).unwrap();
    let out = dir.path().join("res");
    let child = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(["reduce", "analyze"])
        .arg(&root)
        .arg("-o")
        .arg(&out)
        .arg("--config")
        .arg(&cfg)
        .args(["--workers-max", "2", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_started(&out);
    std::thread::sleep(std::time::Duration::from_millis(300));
    replace_keeping_mtime(&cfg, &text(2));
    std::thread::sleep(std::time::Duration::from_millis(600));
    // SAFETY: kill with the pid of the child we started (still running: it is only waited for below).
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGHUP) },
        0
    );
    let o = child.wait_with_output().unwrap();
    let s = json_of(&o);
    let limits = s["worker_limits"].as_array().unwrap();
    assert_eq!(limits[0][1], 1, "{limits:?}");
    assert_eq!(
        limits.last().unwrap()[1],
        2,
        "SIGHUP did not apply workers = 2: {limits:?}"
    );
    // A bytes-weighted sample: every file here is 2 MiB, so a spacing of 1 MiB takes them all, and
    // the estimate (certain files only) is the exact figure with a zero-width interval.
    let r = root.to_string_lossy().into_owned();
    let d = |p: &str| dir.path().join(p).to_string_lossy().into_owned();
    let s = analyze_json(
        &r,
        &d("sb"),
        &[
            "--compress",
            "lz4@64K",
            "--no-dedup",
            "--sample-bytes",
            "1M",
        ],
    );
    assert_eq!(s["manifest"]["files"], 30);
    assert_eq!(s["manifest"]["sample_bytes"], 1 << 20);
    let rep = report_json(&d("sb"));
    let t = &rep["totals"][0];
    let e = &t["estimate_bytes"];
    assert_eq!(e["design"], "bytes");
    assert_eq!(e["files_sampled"], 30);
    assert!((e["ratio"].as_f64().unwrap() - t["ratio"].as_f64().unwrap()).abs() < 1e-12);
    assert_eq!(e["ratio_low"], e["ratio_high"]);
    let o = ecstack(&[
        "reduce",
        "analyze",
        &r,
        "-o",
        &d("bad"),
        "--sample",
        "0.5",
        "--sample-bytes",
        "1M",
    ]);
    assert!(!o.status.success());
}
