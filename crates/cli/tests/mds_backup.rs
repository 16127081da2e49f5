//! `ecstack cluster backup` and `ecstack cluster restore` on a real cluster, for a SQLite store
//! (the MDS streams a consistent copy while it serves) and a PostgreSQL one (`pg_dump`,
//! `pg_restore`; the testkit's throwaway server): files put, a backup taken, one more file put, the
//! metadata wiped, the backup restored with the daemons stopped, the cluster restarted; every file
//! of the backup reads back, and a new put gets segment ids past every chunk the OSDs hold (the
//! file put after the backup left chunks the restored metadata does not know).

mod cluster_common;

use std::process::Command;
use std::time::Duration;

use cluster_common::*;
use ecstack_base::Rng;

async fn backup_wipe_restore(store: Option<String>, wipe: impl FnOnce(&Rig)) {
    let mut rig = Rig::start(RigSpec {
        osds: 4,
        k: 2,
        m: 1,
        mds_store: store,
        ..RigSpec::default()
    })
    .await;
    let config = rig.cluster.config_path();
    let config = config.to_str().unwrap();
    let mut rng = Rng::new(7);
    let mut files = Vec::new();
    for i in 0..4 {
        let data = random_bytes(&mut rng, 300_000 + i * 700_000);
        let path = format!("/b/f{i}");
        rig.client.put(&path, &data[..]).await.unwrap();
        files.push((path, data));
    }
    let backup = rig.dir.path().join("meta.backup");
    // `ecstack cluster backup|restore FILE --config … --json`.
    let cli = |cmd: &str| {
        ecstack(&[
            "cluster",
            cmd,
            backup.to_str().unwrap(),
            "--config",
            config,
            "--json",
        ])
    };
    let o = cli("backup");
    assert!(o.status.success(), "{}", stderr_line(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(report["bytes"].as_u64().unwrap() > 0, "{report}");

    // After the backup: a file whose segments the restored metadata will not know.
    let late = random_bytes(&mut rng, 2_500_000);
    rig.client.put("/b/late", &late[..]).await.unwrap();
    let late_max = rig
        .client
        .stat("/b/late")
        .await
        .unwrap()
        .segments
        .iter()
        .map(|s| s.segment_id)
        .max()
        .unwrap();

    // A restore with the MDS running is refused.
    let o = cli("restore");
    assert!(!o.status.success());
    assert!(stderr_line(&o).contains("stop"), "{}", stderr_line(&o));

    rig.cluster.kill_mds();
    for i in 0..4 {
        rig.cluster.stop_osd(i);
    }
    wipe(&rig);
    let o = cli("restore");
    assert!(o.status.success(), "{}", stderr_line(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["files"], 4, "{report}");
    rig.cluster.start_mds().unwrap();
    rig.restart_and_wait(&[0, 1, 2, 3]).await;
    for (path, data) in &files {
        let got = rig
            .client
            .read(path, 0, data.len() as u64)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}\n{}", rig.logs()));
        assert!(&got == data, "{path} read back differs after the restore");
    }
    assert!(rig.client.stat("/b/late").await.is_err());
    let new = random_bytes(&mut rng, 1_200_000);
    rig.client.put("/b/new", &new[..]).await.unwrap();
    let info = rig.client.stat("/b/new").await.unwrap();
    for s in &info.segments {
        assert!(
            s.segment_id > late_max,
            "segment id {} reused (the OSDs hold chunks up to {late_max})",
            s.segment_id
        );
    }
    let got = rig
        .client
        .read("/b/new", 0, new.len() as u64)
        .await
        .unwrap();
    assert!(got == new);
    rig.client
        .wait_for_osds(4, Duration::from_secs(10))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_backed_up_online_wiped_and_restored_reads_back() {
    backup_wipe_restore(None, |rig| {
        let db = rig
            .cluster
            .config()
            .resolve(&rig.cluster.config().mds.store);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_store_dumped_wiped_and_restored_reads_back() {
    let Some(pg) = ecstack_testkit::postgres::shared() else {
        return;
    };
    if !ecstack_testkit::require_tool("pg_dump", "postgresql-client") {
        return;
    }
    let url = pg.create_db("backup");
    backup_wipe_restore(Some(url.clone()), move |_| {
        let o = Command::new("psql")
            .args(["-q", "-d", &url, "-c"])
            .arg("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    })
    .await;
}
