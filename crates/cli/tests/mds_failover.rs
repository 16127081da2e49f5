//! Active and standby MDSs on one PostgreSQL database (issue 43), real processes: the active MDS
//! SIGKILLed while `tar` extracts a source tree through `ecstack cluster mount` (the extract
//! completes, `diff -r` is clean), and an MDS stopped (SIGSTOP) past its lease that, continued,
//! commits nothing and answers as a standby, and an OSD started while the active MDS is stopped
//! registers with the one that took over. PostgreSQL is the testkit's throwaway server; without
//! it, `/dev/fuse`, `tar` or `diff` these fail under CI=true and say SKIPPED otherwise.
//!
//! Long mode: `ECSTACK_FAILOVER_KILLS=20 cargo test -p ecstack --test mds_failover` kills the
//! active MDS during 20 extracts (CI: 1).

mod cluster_common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cluster_common::mount::{run, tar_of, Mount};
use cluster_common::*;
use ecstack_lab::mds_failover::{active_mds, wait_active, wait_standby, DirLoad};
use ecstack_mds_proto::{MdsClient, MdsError};

fn kills() -> usize {
    std::env::var("ECSTACK_FAILOVER_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// Files under `dir`, counted.
fn files_under(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => 1 + files_under(&e.path()),
                    _ => 1,
                })
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_active_mds_killed_during_a_tar_extract_through_the_mount_loses_nothing() {
    let Some(pg) = ecstack_testkit::postgres::shared() else {
        return;
    };
    if !(ecstack_testkit::require("/dev/fuse", Path::new("/dev/fuse").exists(), "fuse3")
        && ecstack_testkit::require_tool("tar", "tar")
        && ecstack_testkit::require_tool("diff", "diffutils"))
    {
        return;
    }
    let url = pg.create_db("failover_tar");
    let mut rig = Rig::start(RigSpec {
        osds: 4,
        k: 2,
        m: 1,
        mds_store: Some(url),
        mds_standbys: 1,
        ..RigSpec::default()
    })
    .await;
    let sec = rig.security();
    // A real tree: the MDS's and the client's sources.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let work = rig.dir.path().join("work");
    let tree = work.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    run(Command::new("cp")
        .arg("-r")
        .arg(root.join("crates/cluster/mds"))
        .arg(root.join("crates/cluster/client"))
        .arg(&tree));
    let tarball = work.join("tree.tar");
    tar_of(&tree, &tarball);
    let total = files_under(&tree);
    let mnt = Mount::start(&rig, &rig.dir.path().join("mnt"), "256M");
    for round in 0..kills() {
        let active = wait_active(&rig.cluster, &sec, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", rig.logs()));
        let standby = (active + 1) % 2;
        wait_standby(&rig.cluster, standby, &sec).await.unwrap();
        let into = mnt.dir.join(format!("src-{round}"));
        std::fs::create_dir(&into).unwrap();
        let mut tar = Command::new("tar")
            .arg("-xf")
            .arg(&tarball)
            .arg("-C")
            .arg(&into)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Kill once a quarter of the tree is in.
        let start = Instant::now();
        while files_under(&into) < total / 4 && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            tar.try_wait().unwrap().is_none(),
            "tar finished before the kill"
        );
        let killed_at = Instant::now();
        rig.cluster.kill_mds_at(active);
        let out = tar.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "tar failed across the failover: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            rig.logs()
        );
        eprintln!(
            "round {round}: MDS {active} killed; tar finished {:.1} s later",
            killed_at.elapsed().as_secs_f64()
        );
        run(Command::new("diff").arg("-r").arg(&tree).arg(&into));
        assert_eq!(active_mds(&rig.cluster, &sec).await, Some(standby));
        rig.cluster.start_mds_at(active).unwrap();
    }
    drop(mnt);
    rig.cluster.check_alive().unwrap();
}

/// An active MDS stopped past its lease: the standby takes over; continued, the old one commits
/// nothing (a call queued at it while stopped fails), answers as a standby naming the new active,
/// and every directory acknowledged through the failover is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_mds_commits_nothing() {
    let Some(pg) = ecstack_testkit::postgres::shared() else {
        return;
    };
    let url = pg.create_db("failover_stop");
    let rig = Rig::start(RigSpec {
        osds: 0,
        mds_store: Some(url),
        mds_standbys: 1,
        ..RigSpec::default()
    })
    .await;
    let sec = rig.security();
    let active = wait_active(&rig.cluster, &sec, Duration::from_secs(60))
        .await
        .unwrap();
    let standby = (active + 1) % 2;
    wait_standby(&rig.cluster, standby, &sec).await.unwrap();
    let addrs = rig.cluster.config().mds_addrs();
    let load = DirLoad::start(rig.client.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Stopped, with a call on its way to it.
    let old = MdsClient::connect(&addrs[active], &sec).unwrap();
    old.stat_fs().await.unwrap();
    rig.cluster.signal_mds(active, libc::SIGSTOP);
    let queued = tokio::spawn({
        let old = old.clone();
        async move { old.mkdir(1, b"from-the-deposed", 0o755, 0, 0).await }
    });
    let took = wait_active(&rig.cluster, &sec, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(took, standby);
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.cluster.signal_mds(active, libc::SIGCONT);

    let e = queued.await.unwrap().unwrap_err();
    assert!(matches!(e, MdsError::Unavailable(_)), "{e}");
    wait_standby(&rig.cluster, active, &sec).await.unwrap();
    match old.stat_fs().await {
        Err(MdsError::Unavailable(m)) => {
            assert!(
                m.contains(&format!("the active MDS is {}", addrs[standby])),
                "{m}"
            )
        }
        other => panic!("the deposed MDS answered {other:?}"),
    }
    let e = rig.client.lookup(1, b"from-the-deposed").await.unwrap_err();
    assert!(
        matches!(e, ecstack_client::ClientError::Mds(MdsError::NotFound(_))),
        "{e}"
    );
    let (acknowledged, lost) = load.check(&rig.client).await.unwrap();
    load.stop().await.unwrap();
    assert!(acknowledged > 0);
    assert_eq!(
        lost, 0,
        "{lost} of {acknowledged} acknowledged directories lost"
    );
}

/// An OSD started while the active MDS is stopped (hung, not dead) registers with the MDS that
/// took over within a metadata call's deadline: its registration attempt at the stopped MDS, the
/// first listed (where a new client's first call goes), is given up rather than held for the
/// channel's 30 s request timeout. Two such waits once used an OSD's whole 60 s registration
/// patience, and the OSD exited (fault seed 310 with MDS failovers, `cluster_faults.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_osd_started_while_the_active_mds_is_stopped_registers_promptly() {
    let Some(pg) = ecstack_testkit::postgres::shared() else {
        return;
    };
    let url = pg.create_db("failover_register");
    let mut rig = Rig::start(RigSpec {
        osds: 0,
        mds_store: Some(url),
        mds_standbys: 1,
        ..RigSpec::default()
    })
    .await;
    let sec = rig.security();
    let mut active = wait_active(&rig.cluster, &sec, Duration::from_secs(60))
        .await
        .unwrap();
    if active == 1 {
        rig.cluster.kill_mds_at(1);
        active = wait_active(&rig.cluster, &sec, Duration::from_secs(60))
            .await
            .unwrap();
        rig.cluster.start_mds_at(1).unwrap();
    }
    assert_eq!(active, 0);
    wait_standby(&rig.cluster, 1, &sec).await.unwrap();
    rig.cluster.signal_mds(0, libc::SIGSTOP);
    let took = wait_active(&rig.cluster, &sec, Duration::from_secs(30)).await;
    assert_eq!(took.unwrap(), 1);
    let started = Instant::now();
    rig.cluster.add_osd().unwrap();
    let registered = rig.client.wait_for_osds(1, Duration::from_secs(60)).await;
    let after = started.elapsed();
    rig.cluster.signal_mds(0, libc::SIGCONT);
    registered.unwrap_or_else(|e| panic!("{e}\n{}", rig.logs()));
    assert!(
        after < Duration::from_secs(20),
        "the OSD was up {after:?} after its start\n{}",
        rig.logs()
    );
    rig.cluster.check_alive().unwrap();
}
