//! README tour commands that failed or misled (issue 46 §2), run as a user runs them: a TWEEN array
//! with k = 6 and the default stripe, `nbd serve` of a simulated SSD that keeps no data, `ec
//! decode` with shards missing, `experiment tween --quick`'s files part, and an experiment stopped
//! with SIGINT, which must leave no scratch file behind.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn ecstack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(args)
        .output()
        .expect("run ecstack")
}

/// `ecstack ec encode INPUT FLAGS...`.
fn encode(input: &Path, flags: &[&str]) -> Output {
    let mut args = vec!["ec", "encode", input.to_str().unwrap()];
    args.extend_from_slice(flags);
    ecstack(&args)
}

fn ok(o: Output) -> Output {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o
}

/// The one `ecstack: error:` line of a refused run.
fn error_line(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "not refused: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].starts_with("ecstack: error: "), "{err}");
    lines[0].to_owned()
}

fn is_empty_dir(p: &Path) -> bool {
    std::fs::read_dir(p).unwrap().next().is_none()
}

#[test]
fn tween_with_k_6_takes_a_default_stripe_of_6_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().display().to_string();
    let main: Vec<String> = (0..8).map(|i| format!("file:{d}/m{i}?size=24M")).collect();
    let meta = format!("file:{d}/meta?size=64M");
    let nvram = format!("{d}/nvram");
    let o = ok(ecstack(&[
        "array",
        "create",
        "--scheme",
        "tween",
        "-k",
        "6",
        "-m",
        "2",
        "--main",
        &main.join(","),
        "--meta",
        &meta,
        "--nvram",
        &nvram,
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["array"]["chunk_size"], 1 << 20, "{v}");
    // A stripe that is not k chunks is still refused, in one line without a panic.
    let o = ecstack(&[
        "array",
        "create",
        "--scheme",
        "tween",
        "-k",
        "6",
        "-m",
        "2",
        "--main",
        &main.join(","),
        "--meta",
        &meta,
        "--nvram",
        &nvram,
        "--stripe",
        "8M",
        "--force",
    ]);
    assert!(error_line(&o).contains("try --stripe 6M"));
}

#[test]
fn nbd_serve_refuses_a_device_that_keeps_no_data() {
    let line = error_line(&ecstack(&[
        "nbd",
        "serve",
        "--device",
        "ssd:preset=eplog",
        "--addr",
        "127.0.0.1:0",
    ]));
    assert!(
        line.contains("keeps no data") && line.contains("ssd:preset=eplog,data=1"),
        "{line}"
    );
}

#[test]
fn ec_decode_names_the_missing_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("f");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&input, &data).unwrap();
    let shards = tmp.path().join("s");
    ok(encode(
        &input,
        &["-o", shards.to_str().unwrap(), "-k", "4", "-m", "2"],
    ));
    let shard = |i: usize| shards.join(format!("f.{i:03}.shard"));
    let given = |idx: &[usize]| -> Vec<String> {
        idx.iter()
            .map(|&i| shard(i).display().to_string())
            .collect()
    };
    let out = tmp.path().join("r");
    let decode = |idx: &[usize]| {
        let mut args = vec!["ec".to_owned(), "decode".to_owned()];
        args.extend(given(idx));
        args.extend(["-o".to_owned(), out.display().to_string()]);
        Command::new(env!("CARGO_BIN_EXE_ecstack"))
            .args(&args)
            .output()
            .unwrap()
    };
    let o = ok(decode(&[0, 2, 3, 4, 5]));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("shards missing: 1 "), "{text}");
    assert_eq!(std::fs::read(&out).unwrap(), data);
    let line = error_line(&decode(&[0, 3, 5]));
    assert!(
        line.contains("shards missing: 1, 2, 4 of 4+2 (given: 0, 3, 5)"),
        "{line}"
    );
}

#[test]
fn experiment_tween_quick_files_part_runs_and_cleans_up() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nv) = (tmp.path().join("dev"), tmp.path().join("nv"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&nv).unwrap();
    let o = ok(ecstack(&[
        "experiment",
        "tween",
        "--quick",
        "--parts",
        "files",
        "--traces",
        "fin",
        "--dir",
        dir.to_str().unwrap(),
        "--nvram-dir",
        nv.to_str().unwrap(),
    ]));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("## files (O_DIRECT files)"), "{out}");
    assert!(!out.contains("FAILED"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("experiment tween: writing to") && err.contains("expect"),
        "{err}"
    );
    // Piped stderr: the start line only, no progress lines.
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        is_empty_dir(&dir) && is_empty_dir(&nv),
        "scratch left behind"
    );
}

#[test]
fn an_interrupted_experiment_removes_its_scratch_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nv) = (tmp.path().join("dev"), tmp.path().join("nv"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&nv).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(["experiment", "tween", "--quick", "--parts", "files"])
        .args(["--scale", "0.01", "--files-scale", "0.01", "--dir"])
        .arg(&dir)
        .arg("--nvram-dir")
        .arg(&nv)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let scratch = dir.join(format!("ecstack-tween-{}", child.id()));
    // Wait until a device image is there.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(&scratch).map_or(true, |mut d| d.next().is_none()) {
        assert!(Instant::now() < deadline, "no device image appeared");
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended before it was stopped"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill(2) with our child's pid and SIGINT touches no memory.
    unsafe {
        libc_kill(child.id() as i32, 2);
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("interrupted: removed"), "{err}");
    assert!(
        is_empty_dir(&dir) && is_empty_dir(&nv),
        "scratch left behind: {:?} {:?} {err}",
        walk(&dir),
        walk(&nv)
    );
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// docs/cli.md: the convention's spellings work, and an old one still works with one note.
#[test]
fn flag_convention_with_deprecated_aliases() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("g");
    std::fs::write(&input, vec![5u8; 10_000]).unwrap();
    let shards = tmp.path().join("s");
    let o = ok(encode(
        &input,
        &[
            "--out-dir",
            shards.to_str().unwrap(),
            "--k",
            "3",
            "--m",
            "1",
        ],
    ));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.matches("ecstack: note: --out-dir is deprecated")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("use --out"), "{err}");
    let out = tmp.path().join("back");
    let o = ok(ecstack(&[
        "ec",
        "decode",
        shards.join("g.000.shard").to_str().unwrap(),
        shards.join("g.001.shard").to_str().unwrap(),
        shards.join("g.003.shard").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read(&out).unwrap(), vec![5u8; 10_000]);
    // `reliability array -k 6` (issue 46 §3) and the long forms elsewhere.
    ok(ecstack(&[
        "reliability",
        "array",
        "-k",
        "6",
        "-m",
        "2",
        "--json",
    ]));
    let o = ecstack(&["cluster", "up", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(
        help.contains("--code") && !help.contains("--family") && help.contains("--k"),
        "{help}"
    );
}

fn walk(p: &std::path::Path) -> Vec<String> {
    let mut v = Vec::new();
    if let Ok(d) = std::fs::read_dir(p) {
        for e in d.flatten() {
            v.push(e.path().display().to_string());
            v.extend(walk(&e.path()));
        }
    }
    v
}
