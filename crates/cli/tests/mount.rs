//! `ecstack cluster mount` with real clients: two mounts (separate `ecstack` processes) of one real
//! local cluster; `tar` extracts a real source tree into one and `diff -r` compares it through
//! both; close-to-open across the mounts (a reader's cached segments are dropped at its next open
//! after the writer's close); renames, links, symlinks, modes, truncation and xattrs through the
//! kernel; files written through a mount read back with `cluster get` and the other way round;
//! unmounting by SIGTERM and by `umount`; the segment cache's counters on the mount's metrics
//! endpoint; fio's crc32c verify and git through a mount. Without `/dev/fuse` (or `tar`, `diff`,
//! `fio`, `git`) these fail under CI=true and say SKIPPED otherwise (`ecstack_testkit::require`).

mod cluster_common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, UNIX_EPOCH};

use cluster_common::mount::{fuse_present, metric, mounted, run, tar_of, Mount};
use cluster_common::*;
use ecstack_base::Rng;

/// The cluster the mounts run on: 6 OSD processes, RS 4+2, 1 MiB segments.
async fn mount_rig() -> Rig {
    Rig::start(RigSpec {
        osds: 6,
        k: 4,
        m: 2,
        segment_bytes: 1 << 20,
        ..RigSpec::default()
    })
    .await
}

/// A real tree to copy: this crate's sources and the MDS's, with a file of several segments.
fn source_tree(into: &Path, rng: &mut Rng, segment: usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::create_dir_all(into).unwrap();
    run(Command::new("cp")
        .arg("-r")
        .arg(root.join("crates/cluster/mds"))
        .arg(root.join("crates/cluster/client"))
        .arg(into));
    std::fs::write(
        into.join("big.bin"),
        random_bytes(rng, 3 * segment + 12_345),
    )
    .unwrap();
    std::fs::write(into.join("empty"), b"").unwrap();
    std::os::unix::fs::symlink("mds/Cargo.toml", into.join("link")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_mounts_run_tar_and_diff_and_see_each_others_closes() {
    if !(fuse_present()
        && ecstack_testkit::require_tool("tar", "tar")
        && ecstack_testkit::require_tool("diff", "diffutils"))
    {
        return;
    }
    let rig = mount_rig().await;
    let seg = rig.segment_bytes as usize;
    let mut rng = Rng::new(42);
    let work = rig.dir.path().join("work");
    let tree = work.join("tree");
    source_tree(&tree, &mut rng, seg);
    let tarball = work.join("tree.tar");
    tar_of(&tree, &tarball);

    // A small cache on one mount: reads and writes of the big file go through evictions.
    let mut a = Mount::start(&rig, &rig.dir.path().join("mnt-a"), "2M");
    // B keeps no attribute or entry in the kernel, so it sees A's namespace changes at once
    // (with the default --attr-timeout 1, within a second).
    let mut b = Mount::start_with(
        &rig,
        &rig.dir.path().join("mnt-b"),
        "64M",
        &["--attr-timeout", "0"],
    );

    // tar extracts into A; the tree reads back identical through A and through B.
    std::fs::create_dir(a.path("src")).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(a.path("src")));
    run(Command::new("diff").arg("-r").arg(&tree).arg(a.path("src")));
    run(Command::new("diff").arg("-r").arg(&tree).arg(b.path("src")));
    assert_eq!(
        std::fs::read_link(b.path("src/link")).unwrap(),
        Path::new("mds/Cargo.toml")
    );
    cache_metrics_count_what_the_mount_did(&a, seg);
    a_segment_read_ahead_is_not_served_after_the_file_changes(&a, seg);
    attributes_set_through_a_descriptor_commit_with_its_writes(&a, &b);
    xattrs_are_kept_by_the_mount_and_asked_again_at_an_open(&rig, &a, &b);

    // What a mount wrote, `cluster get` reads; what `cluster put` stored, a mount lists.
    let config = rig.cluster.config_path();
    let config = config.to_str().unwrap();
    let o = ecstack(&["cluster", "get", "/src/big.bin", "--config", config]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout == std::fs::read(tree.join("big.bin")).unwrap());
    let put = work.join("put.bin");
    std::fs::write(&put, random_bytes(&mut rng, seg + 7)).unwrap();
    let o = ecstack(&[
        "cluster",
        "put",
        put.to_str().unwrap(),
        "/fromput/p.bin",
        "--config",
        config,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(a.path("fromput/p.bin")).unwrap() == std::fs::read(&put).unwrap());

    // Close-to-open: B reads (and caches) a file, A rewrites part of it and closes, B's next
    // open sees A's bytes, never its cached old ones.
    let f = "src/big.bin";
    let mut want = std::fs::read(b.path(f)).unwrap();
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .open(a.path(f))
            .unwrap();
        w.seek(SeekFrom::Start(seg as u64 - 3)).unwrap();
        w.write_all(b"close-to-open").unwrap();
        // Grown past its last segment too.
        w.seek(SeekFrom::Start(want.len() as u64 + 100)).unwrap();
        w.write_all(b"tail").unwrap();
    }
    want[seg - 3..seg + 10].copy_from_slice(b"close-to-open");
    want.resize(want.len() + 100, 0);
    want.extend_from_slice(b"tail");
    assert!(
        std::fs::read(b.path(f)).unwrap() == want,
        "B sees A's close"
    );
    let o = ecstack(&["cluster", "get", "/src/big.bin", "--config", config]);
    assert!(o.stdout == want);

    // Namespace operations through the kernel, seen from the other mount.
    std::fs::rename(a.path("src/mds"), a.path("mds-moved")).unwrap();
    assert!(b.path("mds-moved/src/store.rs").exists() && !b.path("src/mds").exists());
    std::fs::hard_link(a.path("fromput/p.bin"), a.path("hard")).unwrap();
    assert_eq!(std::fs::metadata(b.path("hard")).unwrap().nlink(), 2);
    std::fs::set_permissions(a.path("hard"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        std::fs::metadata(b.path("fromput/p.bin")).unwrap().mode() & 0o7777,
        0o600
    );
    std::fs::remove_file(a.path("fromput/p.bin")).unwrap();
    assert!(std::fs::read(b.path("hard")).unwrap() == std::fs::read(&put).unwrap());
    // Truncation, down and up (the new bytes read as zeros).
    let t = std::fs::OpenOptions::new()
        .write(true)
        .open(a.path("hard"))
        .unwrap();
    t.set_len(10).unwrap();
    t.set_len(seg as u64 + 5).unwrap();
    drop(t);
    let got = std::fs::read(b.path("hard")).unwrap();
    assert_eq!(got.len(), seg + 5);
    assert!(got[..10] == std::fs::read(&put).unwrap()[..10]);
    assert!(got[10..].iter().all(|&x| x == 0));
    // A directory that is not empty stays; rmdir of an empty one works.
    let e = std::fs::remove_dir(a.path("mds-moved")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY));
    std::fs::create_dir(a.path("d")).unwrap();
    std::fs::remove_dir(b.path("d")).unwrap();
    // Long names are refused by name.
    let e = std::fs::write(a.path(&"n".repeat(300)), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    // statfs reports the cluster's room.
    let o = run(Command::new("df").arg("-k").arg(&a.dir));
    assert!(String::from_utf8_lossy(&o.stdout).contains("ecstack"));

    // Unmounting: B by umount (the process then exits 0), A by SIGTERM.
    run(Command::new("umount").arg(&b.dir));
    let mut child = b.child.take().unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{}", b.log());
    a.stop();
    // After a remount, everything is still there.
    let a2 = Mount::start(&rig, &rig.dir.path().join("mnt-a"), "64M");
    assert!(std::fs::read(a2.path(f)).unwrap() == want);
    assert_eq!(std::fs::read(a2.path("hard")).unwrap().len(), seg + 5);
}

/// The segment cache's counters on the mount's metrics endpoint: `a` (a 2 MiB cache) has read
/// the multi-segment `src/big.bin` through `diff`; a file held open with a write shows dirty bytes
/// until its close.
fn cache_metrics_count_what_the_mount_did(a: &Mount, seg: usize) {
    use std::io::Write;
    let before = a.scrape();
    // Its four segments: read when first touched, or read ahead of the reader.
    assert!(
        metric(&before, "ecstack_mount_cache_misses_total")
            + metric(&before, "ecstack_mount_cache_read_ahead_total")
            >= 3,
        "{before}"
    );
    // diff reads a segment in many requests: all but the first hit.
    assert!(
        metric(&before, "ecstack_mount_cache_hits_total") >= 3,
        "{before}"
    );
    assert!(
        metric(&before, "ecstack_mount_cache_evictions_total") >= 1,
        "{before}"
    );
    assert_eq!(
        metric(&before, "ecstack_mount_cache_capacity_bytes"),
        2 << 20
    );
    assert_eq!(metric(&before, "ecstack_mount_cache_dirty_bytes"), 0);
    let mut f = std::fs::File::create(a.path("dirty")).unwrap();
    f.write_all(&vec![7; seg + 10]).unwrap();
    let open = a.scrape();
    // The full first segment is being written in the background, or is written already.
    let dirty = metric(&open, "ecstack_mount_cache_dirty_bytes");
    assert!(dirty == seg as u64 + 10 || dirty == 10, "{open}");
    drop(f);
    let closed = a.scrape();
    assert_eq!(metric(&closed, "ecstack_mount_cache_dirty_bytes"), 0);
    let misses = metric(&closed, "ecstack_mount_cache_misses_total");
    // Read back after the close: the flushed segments are still cached, clean.
    assert_eq!(std::fs::read(a.path("dirty")).unwrap().len(), seg + 10);
    let read = a.scrape();
    assert_eq!(
        metric(&read, "ecstack_mount_cache_misses_total"),
        misses,
        "{read}"
    );
    std::fs::remove_file(a.path("dirty")).unwrap();
}

/// `name`'s value on `path` (None: ENODATA), through the kernel.
fn get_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let x = xattr_args(path, name);
    let mut buf = vec![0u8; 256];
    // SAFETY: FFI with NUL-terminated strings and a buffer of the length given.
    let n = unsafe {
        libc::getxattr(
            x.0.as_ptr(),
            x.1.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::ENODATA),
            "getxattr {name}: {e}"
        );
        return None;
    }
    buf.truncate(n as usize);
    Some(buf)
}

/// Sets `name` to `value` on `path` (None: removes it), through the kernel.
fn set_xattr(path: &Path, name: &str, value: Option<&[u8]>) {
    let x = xattr_args(path, name);
    // SAFETY: FFI with NUL-terminated strings and a value of the length given.
    let r = unsafe {
        match value {
            Some(v) => libc::setxattr(x.0.as_ptr(), x.1.as_ptr(), v.as_ptr().cast(), v.len(), 0),
            None => libc::removexattr(x.0.as_ptr(), x.1.as_ptr()),
        }
    };
    assert_eq!(r, 0, "{name}: {}", std::io::Error::last_os_error());
}

fn xattr_args(path: &Path, name: &str) -> (std::ffi::CString, std::ffi::CString) {
    use std::os::unix::ffi::OsStrExt;
    (
        std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap(),
        std::ffi::CString::new(name).unwrap(),
    )
}

/// The MDS's count of GetXattr calls.
fn mds_get_xattrs(rig: &Rig) -> u64 {
    metric(
        &scrape_daemon(rig, "mds"),
        "ecstack_mds_requests_total{op=\"get_xattr\"}",
    )
}

/// The kernel asks for `security.capability` before every write request: `a` (attribute timeout
/// 1 s) answers from what the MDS last said, so 64 writes do not make 64 MDS calls. A name set or
/// removed through `a` is seen by `a` at once; one changed through `b` is seen by `a` at its next
/// open of the file (close-to-open), and by `b` (timeout 0) always.
fn xattrs_are_kept_by_the_mount_and_asked_again_at_an_open(rig: &Rig, a: &Mount, b: &Mount) {
    use std::io::Write;
    let (pa, pb) = (a.path("xattrs"), b.path("xattrs"));
    std::fs::write(&pa, b"x").unwrap();
    assert_eq!(get_xattr(&pb, "user.k"), None);
    let before = mds_get_xattrs(rig);
    let mut f = std::fs::OpenOptions::new().append(true).open(&pa).unwrap();
    for _ in 0..64 {
        f.write_all(&[1u8; 4096]).unwrap();
    }
    drop(f);
    let asked = mds_get_xattrs(rig) - before;
    // One after the open, and one more per second the writes took (a loaded machine).
    assert!(
        asked < 16,
        "64 writes asked the MDS for xattrs {asked} times"
    );

    set_xattr(&pa, "user.k", Some(b"one"));
    assert_eq!(get_xattr(&pa, "user.k").as_deref(), Some(&b"one"[..]));
    assert_eq!(get_xattr(&pb, "user.k").as_deref(), Some(&b"one"[..]));
    set_xattr(&pb, "user.k", Some(b"two"));
    assert_eq!(get_xattr(&pb, "user.k").as_deref(), Some(&b"two"[..]));
    drop(std::fs::File::open(&pa).unwrap());
    assert_eq!(
        get_xattr(&pa, "user.k").as_deref(),
        Some(&b"two"[..]),
        "A asks again after an open"
    );
    set_xattr(&pa, "user.k", None);
    assert_eq!(get_xattr(&pa, "user.k"), None, "A's own removal, at once");
    assert_eq!(get_xattr(&pb, "user.k"), None);
    std::fs::remove_file(&pa).unwrap();
}

/// tar's way of restoring a file: create, write, then `futimens`, `fchown` and `fchmod` on the
/// descriptor, then close. The mtime, owner and mode set after the write are what the other mount
/// sees after the close (a close used to set the mtime to its own time), and what the writing
/// mount shows before it.
fn attributes_set_through_a_descriptor_commit_with_its_writes(a: &Mount, b: &Mount) {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let then = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let mut f = std::fs::File::create(a.path("restored")).unwrap();
    f.write_all(b"restored bytes").unwrap();
    f.set_times(std::fs::FileTimes::new().set_modified(then))
        .unwrap();
    std::os::unix::fs::fchown(&f, Some(4321), Some(8765)).unwrap();
    f.set_permissions(std::fs::Permissions::from_mode(0o640))
        .unwrap();
    let shown = f.metadata().unwrap();
    assert_eq!(shown.modified().unwrap(), then);
    assert_eq!(
        (shown.uid(), shown.gid(), shown.mode() & 0o7777),
        (4321, 8765, 0o640)
    );
    drop(f);
    for (m, which) in [(a, "the writing mount"), (b, "the other mount")] {
        let md = std::fs::metadata(m.path("restored")).unwrap();
        assert_eq!(md.modified().unwrap(), then, "{which}: mtime");
        assert_eq!(
            (md.uid(), md.gid(), md.mode() & 0o7777, md.len()),
            (4321, 8765, 0o640, 14),
            "{which}"
        );
    }
    std::fs::remove_file(a.path("restored")).unwrap();
}

/// A read at the start of a file makes the mount read its second segment ahead; a write into
/// that segment and an fsync follow (the write goes into the cache without the segment's bytes,
/// and the flush drops what it cached); the next read of the written range must see the write,
/// not the segment read ahead before it. O_DIRECT keeps the kernel's page cache out of the way.
fn a_segment_read_ahead_is_not_served_after_the_file_changes(a: &Mount, seg: usize) {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    const BLOCK: usize = 4096;
    // Four segments through a cache of two: the first two are not cached when it is read.
    std::fs::write(a.path("ahead"), vec![b'a'; 4 * seg]).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(a.path("ahead"))
        .unwrap();
    // O_DIRECT wants aligned buffers: a block-aligned window of a larger allocation.
    let mut mem = vec![0u8; 3 * BLOCK];
    let skip = mem.as_ptr().align_offset(BLOCK);
    let buf = &mut mem[skip..skip + BLOCK];
    assert_eq!(f.read_at(buf, 0).unwrap(), BLOCK);
    assert!(buf.iter().all(|&b| b == b'a'));
    // Let the read-ahead of segment 1 finish: what it holds is now older than the file.
    std::thread::sleep(Duration::from_millis(500));
    let at = (seg + 2 * BLOCK) as u64;
    buf.fill(b'b');
    assert_eq!(f.write_at(buf, at).unwrap(), BLOCK);
    f.sync_all().unwrap();
    buf.fill(0);
    assert_eq!(f.read_at(buf, at).unwrap(), BLOCK);
    assert!(
        buf.iter().all(|&b| b == b'b'),
        "a read after a write and fsync saw {:?}, not the write",
        buf[0] as char
    );
    drop(f);
    std::fs::remove_file(a.path("ahead")).unwrap();
}

/// Real clients that check their own bytes: fio writes 4 KiB blocks at random with crc32c
/// headers through O_DIRECT at queue depth 16 (concurrent requests on one file, through a cache
/// too small for the file, so flushes happen mid-run; the writes land in partial segments, filled
/// when fio reads them back) and verifies them, then verifies them again through a second mount
/// (reading what the cluster stores); the same through a third mount with the cache off (every
/// write an update before its reply, reads of exactly the bytes asked), verified again through
/// the first; git commits a real tree and `git fsck --full` rereads every object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fio_verifies_and_git_commits_through_a_mount() {
    if !(fuse_present()
        && ecstack_testkit::require_tool("fio", "fio")
        && ecstack_testkit::require_tool("git", "git"))
    {
        return;
    }
    let rig = mount_rig().await;
    let a = Mount::start(&rig, &rig.dir.path().join("mnt-a"), "2M");
    let b = Mount::start(&rig, &rig.dir.path().join("mnt-b"), "64M");
    let c = Mount::start(&rig, &rig.dir.path().join("mnt-c"), "0");
    let fio = |m: &Mount, file: &str, extra: &[&str]| {
        let out = Command::new("fio")
            .args([
                "--name=verify",
                "--size=4M",
                "--bs=4k",
                "--rw=randwrite",
                "--ioengine=libaio",
                "--direct=1",
                "--iodepth=16",
                "--verify=crc32c",
                "--verify_fatal=1",
                "--randseed=7",
            ])
            .args(extra)
            .arg(format!("--filename={}", m.path(file).display()))
            // fio saves its verify state in the working directory.
            .current_dir(m.dir.parent().expect("the mountpoint has a parent"))
            .output()
            .expect("run fio");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "fio {extra:?} failed: {text}{}",
            m.log()
        );
        assert!(!text.contains("verify: bad"), "{text}");
        text
    };
    let t = Instant::now();
    let written = fio(&a, "fio.dat", &[]);
    eprintln!("fio write + verify through A: {:?}", t.elapsed());
    assert!(written.contains("WRITE:"), "{written}");
    let t = Instant::now();
    let reread = fio(&b, "fio.dat", &["--verify_only"]);
    eprintln!("fio verify through B: {:?}", t.elapsed());
    assert!(reread.contains("verify"), "{reread}");
    let t = Instant::now();
    let written = fio(&c, "fio-off.dat", &[]);
    assert!(written.contains("WRITE:"), "{written}");
    let reread = fio(&a, "fio-off.dat", &["--verify_only"]);
    assert!(reread.contains("verify"), "{reread}");
    eprintln!(
        "fio write + verify through C (cache off), verify through A: {:?}",
        t.elapsed()
    );
    let t = Instant::now();

    let repo = a.path("repo");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cluster/client");
    run(Command::new("cp").arg("-r").arg(&src).arg(&repo));
    let git = |args: &[&str]| {
        run(Command::new("git")
            .args([
                "-c",
                "user.name=ecstack",
                "-c",
                "user.email=ecstack@localhost",
            ])
            .args(args)
            .current_dir(&repo)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", rig.dir.path()))
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "through the mount"]);
    let log = git(&["log", "--oneline"]);
    assert!(String::from_utf8_lossy(&log.stdout).contains("through the mount"));
    assert!(git(&["status", "--porcelain"]).stdout.is_empty());
    git(&["fsck", "--full"]);
    // The other mount sees the same repository.
    let o = run(Command::new("git")
        .args(["log", "--oneline"])
        .current_dir(b.path("repo"))
        .env("HOME", rig.dir.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env(
            "GIT_CONFIG_PARAMETERS",
            format!("'safe.directory={}'", b.path("repo").display()),
        ));
    assert!(String::from_utf8_lossy(&o.stdout).contains("through the mount"));
    eprintln!("git through A and B: {:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_mount_input_is_one_line_before_mounting() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("c");
    ecstack_rpc::init_cluster(&c, &ecstack_rpc::InitOptions::default()).unwrap();
    let config = c.join("cluster.toml");
    let config = config.to_str().unwrap();
    let missing = dir.path().join("nope");
    let line = stderr_line(&ecstack(&[
        "cluster",
        "mount",
        missing.to_str().unwrap(),
        "--config",
        config,
    ]));
    assert!(line.contains("does not exist"), "{line}");
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), b"x").unwrap();
    let line = stderr_line(&ecstack(&[
        "cluster",
        "mount",
        full.to_str().unwrap(),
        "--config",
        config,
    ]));
    assert!(line.contains("is not empty"), "{line}");
    // No MDS runs for this cluster: refused before mounting.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    if !fuse_present() {
        return;
    }
    let t = Instant::now();
    let line = stderr_line(&ecstack(&[
        "cluster",
        "mount",
        empty.to_str().unwrap(),
        "--config",
        config,
    ]));
    assert!(line.contains("cannot reach the cluster's MDS"), "{line}");
    assert!(t.elapsed() < Duration::from_secs(15));
    assert!(!mounted(&empty));
}

/// pjdfstest failures of the mount that are known, each with its reason (docs/mount.md "What is
/// not POSIX"): (test file under `tests/`, test numbers).
const PJDFSTEST_KNOWN: &[(&str, &[u32], &str)] = &[
    (
        "unlink/14.t",
        &[4],
        "an unlinked file's data goes with its last link, even while it is open",
    ),
    (
        "open/25.t",
        &[2],
        "a write past 2 GiB materializes the zeros before it (no sparse files)",
    ),
];

/// The pjdfstest syscalls CI runs (`ECSTACK_PJDFSTEST=all` runs every one: the long mode).
const PJDFSTEST_SUBSET: &[&str] = &["mkdir", "rmdir", "symlink", "unlink", "link", "rename"];

/// pjdfstest built once under the target's tmp dir from `../shared/peers/pjdfstest.tar.gz`
/// (autoreconf, configure, make, as its build notes say).
fn pjdfstest() -> Option<PathBuf> {
    let tarball =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/peers/pjdfstest.tar.gz");
    if !(ecstack_testkit::require(
        "../shared/peers/pjdfstest.tar.gz",
        tarball.exists(),
        "(the shared peers directory)",
    ) && ecstack_testkit::require_tool("autoreconf", "autoconf automake")
        && ecstack_testkit::require_tool("make", "make")
        && ecstack_testkit::require_tool("cc", "gcc")
        && ecstack_testkit::require_tool("prove", "perl"))
    {
        return None;
    }
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pjdfstest-build");
    let src = root.join("pjdfstest");
    if !src.join("pjdfstest").exists() {
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        run(Command::new("tar")
            .arg("xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(&root));
        run(Command::new("autoreconf").arg("-ifs").current_dir(&src));
        run(Command::new("./configure").current_dir(&src));
        run(Command::new("make").arg("pjdfstest").current_dir(&src));
    }
    Some(src)
}

/// The failed tests `prove` reports: (file under `tests/`, test numbers).
fn prove_failures(out: &str) -> Vec<(String, Vec<u32>)> {
    let mut failures = Vec::new();
    let mut lines = out.lines().peekable();
    while let Some(l) = lines.next() {
        let Some((file, counts)) = l.split_once(" (Wstat:") else {
            continue;
        };
        // A file listed only for "TODO passed" (Failed: 0) has no failure.
        if counts.contains("Failed: 0)") {
            continue;
        }
        let file = file
            .split("/tests/")
            .nth(1)
            .unwrap_or(file)
            .trim()
            .to_owned();
        let mut tests = Vec::new();
        while let Some(next) = lines.peek() {
            let Some(list) = next.trim().strip_prefix("Failed test") else {
                break;
            };
            let list = list.trim_start_matches('s').trim_start_matches(':');
            for part in list.split(',') {
                match part.trim().split_once('-') {
                    Some((a, b)) => {
                        let (a, b): (u32, u32) = (a.parse().unwrap_or(0), b.parse().unwrap_or(0));
                        tests.extend(a..=b);
                    }
                    None => tests.extend(part.trim().parse::<u32>().ok()),
                }
            }
            lines.next();
        }
        failures.push((file, tests));
    }
    failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pjdfstest_passes_in_a_mount_but_for_the_known_list() {
    if !fuse_present() {
        return;
    }
    let Some(pjd) = pjdfstest() else {
        return;
    };
    let rig = mount_rig().await;
    let m = Mount::start(&rig, &rig.dir.path().join("mnt"), "64M");
    let all = std::env::var("ECSTACK_PJDFSTEST").is_ok_and(|v| v == "all");
    let dirs: Vec<PathBuf> = if all {
        vec![pjd.join("tests")]
    } else {
        PJDFSTEST_SUBSET
            .iter()
            .map(|d| pjd.join("tests").join(d))
            .collect()
    };
    std::fs::create_dir(m.path("pjd")).unwrap();
    let out = Command::new("prove")
        .arg("-r")
        .args(&dirs)
        .current_dir(m.path("pjd"))
        .output()
        .expect("run prove");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let summary = text
        .lines()
        .find(|l| l.starts_with("Files="))
        .unwrap_or("(no summary)");
    eprintln!("pjdfstest in the mount: {summary}");
    let mut unknown = Vec::new();
    let failures = prove_failures(&text);
    eprintln!("pjdfstest failures (known ones included): {failures:?}");
    for (file, tests) in failures {
        let known = PJDFSTEST_KNOWN.iter().find(|(f, _, _)| *f == file);
        let extra: Vec<u32> = tests
            .into_iter()
            .filter(|t| !known.is_some_and(|(_, k, _)| k.contains(t)))
            .collect();
        if !extra.is_empty() || known.is_none() {
            unknown.push(format!("{file}: {extra:?}"));
        }
    }
    assert!(
        unknown.is_empty(),
        "pjdfstest failures not on the known list: {unknown:?}\n{summary}\n{}",
        m.log()
    );
    assert!(
        summary.contains("Tests="),
        "prove ran no test: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn prove_failures_are_read_from_its_summary() {
    let out = "\
Test Summary Report
-------------------
/x/pjdfstest/tests/unlink/14.t (Wstat: 0 Tests: 7 Failed: 1)
  Failed test:  4
/x/pjdfstest/tests/chown/00.t          (Wstat: 0 Tests: 1280 Failed: 0)
  TODO passed:   1054, 1058, 1064, 1069, 1073, 1079, 1084
                1088, 1094
/x/pjdfstest/tests/chmod/12.t (Wstat: 0 Tests: 14 Failed: 3)
  Failed tests:  3-4, 9
Files=57, Tests=798, 73 wallclock secs
Result: FAIL";
    assert_eq!(
        prove_failures(out),
        vec![
            ("unlink/14.t".to_string(), vec![4]),
            ("chmod/12.t".to_string(), vec![3, 4, 9])
        ]
    );
}
