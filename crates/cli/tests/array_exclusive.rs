//! One opener per array (issue 46 §1), with real processes: while `ecstack array serve` serves an
//! array on files, a second `array serve`, `trace replay --device array:…` and `array create` over
//! the same files are each refused with one line naming the server's pid and its admin socket;
//! `array status --admin` still answers; once the server stops, the array opens again.

mod nbd_common;
use nbd_common::{ecstack, free_port, Served};

/// The refusal: failed, one line on stderr, naming the holder's pid and admin socket.
fn refused(o: &std::process::Output, pid: u32, sock: &str, what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{what} was let in: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{what}: not one line: {err}"
    );
    assert!(
        err.contains(&format!("is open in pid {pid} (")),
        "{what}: {err}"
    );
    assert!(err.contains(&format!("--admin {sock}")), "{what}: {err}");
}

#[test]
fn a_served_array_refuses_other_openers_until_the_server_stops() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let main: Vec<String> = (0..3).map(|i| format!("file:{d}/m{i}?size=4M")).collect();
    let log = format!("file:{d}/l0?size=4M");
    let meta = format!("file:{d}/meta?size=8M");
    let main_arg = main.join(",");
    let create = |extra: &[&str]| {
        let mut args = vec![
            "array", "create", "--scheme", "eplog", "-k", "2", "-m", "1", "--main", &main_arg,
            "--log", &log, "--meta", &meta,
        ];
        args.extend_from_slice(extra);
        ecstack(&args)
    };
    let o = create(&[]);
    assert!(
        o.status.success(),
        "create: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    let sock = dir.path().join("admin.sock");
    let sock_s = sock.display().to_string();
    let addr = format!("127.0.0.1:{}", free_port());
    let served = Served::start(&["--meta", &meta, "--addr", &addr], &sock);
    let pid = served.0.id();

    let addr2 = format!("127.0.0.1:{}", free_port());
    let o = ecstack(&["array", "serve", "--meta", &meta, "--addr", &addr2]);
    refused(&o, pid, &sock_s, "a second array serve");
    // The metadata volume is named first: the one every opener names.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("array meta {meta}")), "{err}");

    let device = format!("array:{meta}");
    let o = ecstack(&[
        "trace",
        "replay",
        "--preset",
        "eplog-mds",
        "--scale",
        "0.001",
        "--compact",
        "--device",
        &device,
    ]);
    refused(&o, pid, &sock_s, "trace replay");

    let o = ecstack(&["array", "status", "--meta", &meta]);
    refused(&o, pid, &sock_s, "array status --meta");

    // Even --force does not reformat an array that is open.
    let o = create(&["--force"]);
    refused(&o, pid, &sock_s, "array create --force");

    // Status through the server's admin socket still works.
    let o = ecstack(&["array", "status", "--admin", &sock_s, "--json"]);
    assert!(
        o.status.success(),
        "status --admin: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    // A parity commit and a rebuild through the socket print text, as without a server (JSON
    // only with --json).
    let o = ecstack(&["array", "commit", "--admin", &sock_s]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.starts_with("parity commit: "),
        "{out}"
    );
    let o = ecstack(&["array", "commit", "--admin", &sock_s, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["stripes"].is_u64(), "{v}");
    let o = ecstack(&["array", "fail", "1", "--admin", &sock_s]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = ecstack(&["array", "rebuild", "1", "--admin", &sock_s]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.starts_with("rebuilt device 1: "),
        "{out}"
    );

    served.stop(&sock);

    let o = ecstack(&["array", "status", "--meta", &meta, "--json"]);
    assert!(
        o.status.success(),
        "status after stop: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    // create over the stopped array's devices: refused without --force, naming what is there.
    let o = create(&[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "create overwrote an array: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("array device 0") && err.contains("label of member 0"),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    assert!(!err.contains("invalid array configuration"), "{err}");
    let o = create(&["--force"]);
    assert!(
        o.status.success(),
        "create --force: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A loop device, detached when dropped.
struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("losetup")
            .args(["-d", &self.0])
            .status();
    }
}

/// A block device member is claimed with `O_EXCL` while the array is open (the kernel's exclusive
/// claim, as for a mounted device), not only `flock`ed: a second ecstack opener is refused with one
/// line naming the server, and so is any other program's `O_EXCL` open (mkfs, mount, mdadm) with
/// EBUSY. Needs root and losetup: under CI their absence fails the test.
#[test]
fn a_block_device_member_is_held_with_o_excl() {
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    if !ecstack_testkit::require("root (to attach a loop device)", root, "sudo")
        || !ecstack_testkit::require_tool("losetup", "mount")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let backing = dir.path().join("loop.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let o = std::process::Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&backing)
        .output()
        .unwrap();
    let attached = o.status.success();
    let why = String::from_utf8_lossy(&o.stderr).trim().to_owned();
    if !ecstack_testkit::require(
        &format!("a free loop device (losetup --find: {why})"),
        attached,
        "a kernel with loop devices (modprobe loop)",
    ) {
        return;
    }
    let dev = Loop(String::from_utf8_lossy(&o.stdout).trim().to_owned());
    // `other`: the loop device with files and a metadata volume of another array.
    let create = |other: &str| {
        let main_arg = format!(
            "file:{},file:{d}/{other}m1?size=16M,file:{d}/{other}m2?size=16M",
            dev.0
        );
        let meta = format!("file:{d}/{other}meta?size=8M");
        ecstack(&[
            "array", "create", "--scheme", "md", "-k", "2", "-m", "1", "--main", &main_arg,
            "--meta", &meta, "--force",
        ])
    };
    let meta = format!("file:{d}/meta?size=8M");
    let o = create("");
    assert!(
        o.status.success(),
        "create over {}: {}",
        dev.0,
        String::from_utf8_lossy(&o.stderr)
    );

    let sock = dir.path().join("admin.sock");
    let addr = format!("127.0.0.1:{}", free_port());
    let served = Served::start(&["--meta", &meta, "--addr", &addr], &sock);
    let pid = served.0.id();

    // Another ecstack, for another array over the same block device: one line, naming the device
    // and the server.
    let o = create("other-");
    refused(&o, pid, &sock.display().to_string(), "array create --force");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&dev.0), "the device is not named: {err}");

    // Any other program asking for the kernel's exclusive claim: EBUSY.
    let excl = |path: &str| {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(path)
    };
    let e = excl(&dev.0).expect_err("O_EXCL open of a member the array holds");
    assert_eq!(e.raw_os_error(), Some(libc::EBUSY), "{e}");

    // Once the server stops, the claim is gone.
    served.stop(&sock);
    drop(excl(&dev.0).expect("O_EXCL open once the array is closed"));
}
