//! `ecstack ec` and `ecstack bench ec` driven as a user would, through the built binary.

use std::path::{Path, PathBuf};
use std::process::Command;

fn ecstack(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(args)
        .output()
        .expect("run ecstack")
}

fn shards_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "shard"))
        .collect();
    v.sort();
    v
}

#[test]
fn encode_lose_m_decode_roundtrip() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("file.bin");
    let data: Vec<u8> = (0..777_777u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&input, &data).unwrap();
    let sd = dir.path().join("shards");
    let o = ecstack(&[
        "ec",
        "encode",
        input.to_str().unwrap(),
        "-o",
        sd.to_str().unwrap(),
        "-k",
        "5",
        "-m",
        "3",
        "--unit",
        "16K",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rep: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rep["bytes"], 777_777);
    let shards = shards_in(&sd);
    assert_eq!(shards.len(), 8);
    // Lose three shards (two data, one parity).
    for i in [0, 3, 6] {
        std::fs::remove_file(&shards[i]).unwrap();
    }
    let keep: Vec<String> = shards_in(&sd)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let out = dir.path().join("out.bin");
    let mut args = vec!["ec", "decode", "-o", out.to_str().unwrap()];
    args.extend(keep.iter().map(|s| s.as_str()));
    let o = ecstack(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), data);

    // Info on a shard.
    let o = ecstack(&["ec", "info", &keep[0], "--json"]);
    let h: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (h["k"].as_u64(), h["m"].as_u64(), h["index"].as_u64()),
        (Some(5), Some(3), Some(1))
    );
    // The code by its CLI name, as `--code` takes it.
    assert!(
        ecstack_codes::CodeKind::parse(h["code"].as_str().unwrap()).is_ok(),
        "{h}"
    );

    // Lose one more: too few shards, one clear error line, exit code 1, no output written.
    std::fs::remove_file(&keep[0]).unwrap();
    let out2 = dir.path().join("out2.bin");
    let mut args = vec!["ec", "decode", "-o", out2.to_str().unwrap()];
    args.extend(keep[1..].iter().map(|s| s.as_str()));
    let o = ecstack(&args);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("ecstack: error:") && err.contains("need 5 shards"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!out2.exists());
}

#[test]
fn corrupt_shard_is_named_and_never_decoded_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("f");
    let data = vec![0x5au8; 100_000];
    std::fs::write(&input, &data).unwrap();
    let sd = dir.path().join("s");
    let o = ecstack(&[
        "ec",
        "encode",
        input.to_str().unwrap(),
        "-o",
        sd.to_str().unwrap(),
        "-k",
        "2",
        "-m",
        "1",
        "--code",
        "xor",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let shards = shards_in(&sd);
    let mut b = std::fs::read(&shards[1]).unwrap();
    b[1000] ^= 0xff;
    std::fs::write(&shards[1], &b).unwrap();
    let out = dir.path().join("o");
    // With only two shards, one of them corrupt: error naming it.
    let o = ecstack(&[
        "ec",
        "decode",
        "-o",
        out.to_str().unwrap(),
        shards[0].to_str().unwrap(),
        shards[1].to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("f.001.shard") && err.contains("checksum"),
        "{err}"
    );
    assert!(!out.exists());
    // With the parity shard too, decode succeeds around the corrupt one and warns about it.
    let all: Vec<&str> = shards.iter().map(|p| p.to_str().unwrap()).collect();
    let mut args = vec!["ec", "decode", "-o", out.to_str().unwrap()];
    args.extend(all);
    let o = ecstack(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("f.001.shard"));
    assert_eq!(std::fs::read(&out).unwrap(), data);
}

#[test]
fn bad_arguments_give_one_line_errors() {
    let o = ecstack(&["ec", "encode", "/nonexistent/x", "-k", "2", "-m", "1"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/nonexistent/x"), "{err}");
    let o = ecstack(&["ec", "encode", "/etc/hostname", "--code", "nope"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown code 'nope'"));
    let o = ecstack(&["ec", "encode", "/etc/hostname", "-k", "200", "-m", "100"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("k + m <= 256"));
}

#[test]
fn demo_verifies_end_to_end() {
    let o = ecstack(&["ec", "demo", "--size", "3M", "-k", "4", "-m", "2", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["verified"], true);
    assert_eq!(r["lost"].as_array().unwrap().len(), 2);
}

#[test]
fn bench_reports_rows_and_checks_results() {
    let o = ecstack(&[
        "bench",
        "ec",
        "--rows",
        "4,2,4K;3,3,8K",
        "--time",
        "0.01",
        "--rounds",
        "1",
        "--rateless-k",
        "64",
        "--rateless-block",
        "1K",
        "--trials",
        "5",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = r["rows"].as_array().unwrap();
    // Two (k, m, chunk) rows x four ops (encode, decode, decode-inv, delta) x every level measured.
    let levels = r["simd"].as_array().unwrap();
    assert!(!levels.is_empty());
    assert_eq!(rows.len(), 2 * 4 * levels.len());
    for op in ["encode", "decode", "decode-inv", "delta"] {
        assert_eq!(
            rows.iter().filter(|x| x["op"] == op).count(),
            2 * levels.len()
        );
    }
    assert!(rows.iter().all(|x| x["ours_gbps"].as_f64().unwrap() > 0.0));
    if r["isal"] == true {
        // Every level from avx2 up has an ISA-L kernel (GFNI ones only in the newest build).
        assert!(rows
            .iter()
            .filter(|x| !x["simd"].as_str().unwrap().contains("gfni")
                || r["peer"].as_str().unwrap().contains("2.31"))
            .all(|x| x["ratio"].as_f64().unwrap() > 0.0));
    }
    let rl = r["rateless"].as_array().unwrap();
    assert_eq!(rl.len(), 2);
    // RaptorQ decodes from K symbols almost always; LT needs noticeably more.
    assert!(rl[1]["overhead_mean"].as_f64().unwrap() < 1.05);
    assert!(rl[0]["overhead_mean"].as_f64().unwrap() > 1.0);
}

#[test]
fn help_lists_only_working_subcommands() {
    let o = ecstack(&["--help"]);
    let h = String::from_utf8_lossy(&o.stdout);
    assert!(h.contains("ec") && h.contains("bench"));
    assert!(!h.to_lowercase().contains("not implemented"));
}

/// The default code is by m (docs/cli.md): xor for 1, raid6 for 2, rs-cauchy for 3 or more; a
/// named code wins.
#[test]
fn the_default_code_is_by_m() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("f.bin");
    std::fs::write(&input, vec![7u8; 100_000]).unwrap();
    let input = input.to_str().unwrap();
    for (m, code, given) in [
        ("1", "xor", None),
        ("2", "raid6", None),
        ("3", "rs-cauchy", None),
        ("2", "rs-vand", Some("rs-vand")),
    ] {
        let out = dir.path().join(format!("s{m}{code}"));
        let mut args = vec!["ec", "encode", input, "-o", out.to_str().unwrap()];
        args.extend(["-k", "4", "-m", m]);
        if let Some(c) = given {
            args.extend(["--code", c]);
        }
        let o = ecstack(&args);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            text.contains(&format!("4+{m} {code} shards")),
            "m = {m}: {text}"
        );
    }
}

/// `ecstack … | head`: a reader that stops early ends ecstack quietly (the SIGPIPE status), never
/// with a panic.
#[test]
fn a_closed_stdout_is_no_panic() {
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{} sim ssd --workload uniform --seed 1 --json | head -c 1 >/dev/null; echo \"${{PIPESTATUS[0]}}\"",
            env!("CARGO_BIN_EXE_ecstack")
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    let status = String::from_utf8_lossy(&o.stdout);
    assert!(
        ["0", "141"].contains(&status.trim()),
        "status {status}: {err}"
    );
}
