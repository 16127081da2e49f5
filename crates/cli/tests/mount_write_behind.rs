//! The mount's write-behind when the cluster fails under it: a full segment of a file still open
//! is written in the background; when that write fails, the file's next write answers EIO and the
//! bytes stay dirty in the mount until they can be written. A test binary of its own: it holds a
//! file of the mount open while the cluster is down, and every process another test in the same
//! binary started meanwhile would close that file at its exec (a FUSE flush, which waits for the
//! cluster) and take the error meant for this one.

mod cluster_common;

use std::time::{Duration, Instant};

use cluster_common::mount::{fuse_present, metric, Mount};
use cluster_common::*;
use ecstack_base::Rng;

/// Write-behind: a full segment of a file still open is written before the close (the dirty bytes
/// fall to the last, partial segment's). A background write that fails (every OSD killed, the
/// MDS not told: the segment was placed on them) is logged and answers EIO at the file's next
/// write; its bytes stay dirty in the mount, through a close that cannot write them either, until
/// the OSDs are back: then an fsync through a new open (or the release) writes them, and every
/// byte the accepted writes wrote reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_background_write_answers_eio_and_loses_nothing() {
    use std::io::Write;
    if !fuse_present() {
        return;
    }
    let mut rig = Rig::start(RigSpec {
        osds: 6,
        k: 4,
        m: 2,
        segment_bytes: 1 << 20,
        // The MDS keeps the killed OSDs up, so the next segment is placed on them.
        configure: Some(|c| c.mds.down_after_ms = 600_000),
        ..RigSpec::default()
    })
    .await;
    let seg = rig.segment_bytes as usize;
    let a = Mount::start(&rig, &rig.dir.path().join("mnt"), "8M");
    let mut rng = Rng::new(9);
    let first = random_bytes(&mut rng, seg + 10);
    let second = random_bytes(&mut rng, seg - 10);
    let path = a.path("behind.bin");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&first).unwrap();
    let dirty = || metric(&a.scrape(), "ecstack_mount_cache_dirty_bytes");
    let start = Instant::now();
    while dirty() != 10 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "segment 0 was not written before the close: {}",
            a.scrape()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    for i in 0..6 {
        rig.cluster.kill_osd(i);
    }
    // Fills segment 1: accepted; its write runs in the background and fails (after the
    // client's retries).
    f.write_all(&second).unwrap();
    let start = Instant::now();
    while !a.log().contains("a background segment write failed") {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no failed background write logged: {}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let e = f.write_all(b"refused").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    // The close tries again and fails too. (No process may start while this one holds a file of
    // the mount open: closing it at exec is a flush, which waits for the cluster.)
    drop(f);
    rig.restart_and_wait(&[0, 1, 2, 3, 4, 5]).await;
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.sync_all()
        .unwrap_or_else(|e| panic!("fsync after the OSDs came back: {e}\n{}", a.log()));
    drop(f);
    assert_eq!(dirty(), 0);
    let got = std::fs::read(&path).unwrap();
    assert_eq!(got.len(), 2 * seg);
    assert!(got[..seg + 10] == first[..] && got[seg + 10..] == second[..]);
}
