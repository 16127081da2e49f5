//! `ecstack cluster backup` and `ecstack cluster restore` on a real cluster, for a SQLite store
//! (the MDS streams a consistent copy while it serves) and a PostgreSQL one (`pg_dump`,
//! `pg_restore`; the testkit's throwaway server): files put, a backup taken, one more file put, the
//! metadata wiped, the backup restored with the daemons stopped, the cluster restarted; every file
//! of the backup reads back, and a new put gets segment ids past every chunk the OSDs hold (the
//! file put after the backup left chunks the restored metadata does not know).

mod cluster_common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use cluster_common::*;
use ecstack_base::Rng;
use ecstack_client::robust::RobustOptions;
use ecstack_client::Bytes;
use ecstack_mds_proto::{OsdState, RobustCode};

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

/// The grace of the orphan test's MDS, and its OSDs' inventory period.
const GRACE_MS: u64 = 10_000;
const INVENTORY_MS: u64 = 400;

/// Chunk and block files in OSD `i`'s store named for one of `ids` (`<id, 16 hex>.…`).
fn held_files(rig: &Rig, osds: usize, ids: &BTreeSet<u64>) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..osds {
        let dir = rig.cluster.osd_store(i).join("chunks");
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = name
                .split('.')
                .next()
                .and_then(|h| u64::from_str_radix(h, 16).ok());
            if id.is_some_and(|id| ids.contains(&id)) && !name.ends_with(".tmp") {
                out.push(format!("osd-{i}/{name}"));
            }
        }
    }
    out.sort();
    out
}

/// Segment ids and robust object ids of a file.
fn ids_of(info: &ecstack_mds_proto::FileInfo) -> BTreeSet<u64> {
    let mut ids: BTreeSet<u64> = info.segments.iter().map(|s| s.segment_id).collect();
    if let Some(r) = &info.robust {
        ids.extend(r.objects.iter().map(|o| o.object_id));
    }
    ids
}

/// Issue 43's second half, on a real cluster and without restarting an OSD: files put (RS and
/// robust), a backup, then more files (RS, and a robust one by `cluster put --mode robust`) and
/// one more OSD; the MDS killed, the backup restored, the MDS started again. A put right away
/// waits until every OSD (the new one registers again by itself) reported its ids, and reuses
/// none. Every backed-up file reads back; the later files' chunks and block files are still on
/// the OSDs while the MDS counts them as candidates, and go only after the grace; files written
/// after the restore keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restore_the_later_files_chunks_go_after_the_grace_without_an_osd_restart() {
    let mut rig = Rig::start(RigSpec {
        osds: 4,
        k: 2,
        m: 1,
        configure: Some(|c| {
            c.mds.orphan_grace_ms = GRACE_MS;
            c.osd.inventory_period_ms = INVENTORY_MS;
        }),
        ..RigSpec::default()
    })
    .await;
    let config = rig.cluster.config_path();
    let config = config.to_str().unwrap().to_owned();
    let mut rng = Rng::new(43);
    let robust = RobustOptions {
        code: RobustCode::RaptorQ,
        block_bytes: 64 << 10,
        redundancy: Some(1.0),
        object_blocks: Some(8),
        ..RobustOptions::default()
    };
    let mut kept: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..2 {
        let data = random_bytes(&mut rng, 700_000 + i * 900_000);
        let path = format!("/o/f{i}");
        rig.client.put(&path, &data[..]).await.unwrap();
        kept.push((path, data));
    }
    let data = random_bytes(&mut rng, 9 * (64 << 10) + 5_000);
    rig.client
        .put_robust("/o/robust", Bytes::from(data.clone()), &robust)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", rig.logs()));
    kept.push(("/o/robust".into(), data));
    let backup = rig.dir.path().join("meta.backup");
    let cli = |cmd: &str| {
        ecstack(&[
            "cluster",
            cmd,
            backup.to_str().unwrap(),
            "--config",
            &config,
            "--json",
        ])
    };
    let o = cli("backup");
    assert!(o.status.success(), "{}", stderr_line(&o));

    // After the backup: one more OSD, an RS file and a robust one (through the CLI).
    let added = rig.cluster.add_osd().unwrap();
    let osds = added + 1;
    rig.client
        .wait_for_osds(osds, Duration::from_secs(30))
        .await
        .unwrap();
    let late = random_bytes(&mut rng, 2_500_000);
    rig.client.put("/o/late", &late[..]).await.unwrap();
    let local = rig.dir.path().join("late-robust.bin");
    std::fs::write(&local, random_bytes(&mut rng, 5 * (64 << 10) + 77)).unwrap();
    let o = ecstack(&[
        "cluster",
        "put",
        local.to_str().unwrap(),
        "/o/late-robust",
        "--mode",
        "robust",
        "--block-size",
        "64K",
        "--redundancy",
        "1",
        "--config",
        &config,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut late_ids = ids_of(&rig.client.stat("/o/late").await.unwrap());
    let late_robust = ids_of(&rig.client.stat("/o/late-robust").await.unwrap());
    assert!(!late_robust.is_empty());
    late_ids.extend(&late_robust);
    let late_files = held_files(&rig, osds, &late_ids);
    assert!(
        late_files.iter().any(|f| f.ends_with(".chunk"))
            && late_files.iter().any(|f| f.ends_with(".blocks")),
        "{late_files:?}"
    );
    let late_max = *late_ids.last().unwrap();

    // The MDS loses its metadata and gets the backup back; the OSDs keep running.
    let osd_pids: Vec<(String, u32)> = rig
        .cluster
        .pids()
        .into_iter()
        .filter(|(n, _)| n.starts_with("osd-"))
        .collect();
    rig.cluster.kill_mds();
    let o = cli("restore");
    assert!(o.status.success(), "{}", stderr_line(&o));
    rig.cluster.start_mds().unwrap();
    let started = std::time::Instant::now();

    // A put right away waits for the OSDs' ids (retried), then gets ids past all of them.
    let new = random_bytes(&mut rng, 1_300_000);
    rig.client
        .put("/o/new", &new[..])
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", rig.logs()));
    let new_robust = random_bytes(&mut rng, 3 * (64 << 10) + 9);
    rig.client
        .put_robust("/o/new-robust", Bytes::from(new_robust.clone()), &robust)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", rig.logs()));
    let mut new_ids = ids_of(&rig.client.stat("/o/new").await.unwrap());
    new_ids.extend(ids_of(&rig.client.stat("/o/new-robust").await.unwrap()));
    assert!(
        new_ids.iter().all(|&id| id > late_max),
        "ids reused: {new_ids:?}, the OSDs hold up to {late_max}"
    );
    let new_files = held_files(&rig, osds, &new_ids);
    assert!(!new_files.is_empty());
    assert!(rig.client.stat("/o/late").await.is_err());
    assert!(rig.client.stat("/o/late-robust").await.is_err());

    // Inventories arrive: the later files' chunks and block files are candidates, still on disk.
    let st = rig
        .client
        .wait_status("orphan candidates", Duration::from_secs(30), |s| {
            s.orphans.chunks_pending > 0 && s.orphans.objects_pending > 0
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", rig.logs()));
    let seen_at = started.elapsed();
    assert!(
        seen_at < Duration::from_millis(GRACE_MS),
        "the check before the grace came too late ({seen_at:?}); {st:?}"
    );
    assert_eq!(st.orphans.chunks_deleted + st.orphans.objects_deleted, 0);
    assert_eq!(held_files(&rig, osds, &late_ids), late_files);

    // After the grace they go, and not before it.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let left = held_files(&rig, osds, &late_ids);
        if left.len() < late_files.len() {
            assert!(
                started.elapsed() >= Duration::from_millis(GRACE_MS),
                "orphans deleted {:?} after the MDS started, within the grace",
                started.elapsed()
            );
        }
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still on the OSDs: {left:?}\n{}",
            rig.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let st = rig.client.status().await.unwrap();
    assert!(
        st.orphans.chunks_deleted > 0 && st.orphans.objects_deleted > 0,
        "{:?}",
        st.orphans
    );
    // `cluster status` shows them too.
    let o = ecstack(&["cluster", "status", "--json", "--config", &config]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        j["orphans"]["chunks_deleted"], st.orphans.chunks_deleted,
        "{j}"
    );
    assert_eq!(
        j["orphans"]["objects_deleted"], st.orphans.objects_deleted,
        "{j}"
    );
    let o = ecstack(&["cluster", "status", "--config", &config]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(&format!(
            "{} chunks and {} block files deleted",
            st.orphans.chunks_deleted, st.orphans.objects_deleted
        )),
        "{text}"
    );

    // No OSD was restarted; the one the backup did not know is up under its old id.
    let now: Vec<(String, u32)> = rig
        .cluster
        .pids()
        .into_iter()
        .filter(|(n, _)| n.starts_with("osd-"))
        .collect();
    assert_eq!(now, osd_pids);
    let name = format!("osd-{added}");
    assert!(
        st.osds
            .iter()
            .any(|o| o.name == name && o.osd_id == added as u32 && o.state == OsdState::Up),
        "{:?}",
        st.osds
    );

    // Everything else is whole: the backup's files, and those written after the restore.
    assert_eq!(held_files(&rig, osds, &new_ids), new_files);
    for (path, data) in &kept {
        let mut got = Vec::new();
        rig.client
            .get(path, 0, None, &mut got)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}\n{}", rig.logs()));
        assert!(&got == data, "{path} read back differs after the restore");
    }
    let got = rig
        .client
        .read("/o/new", 0, new.len() as u64)
        .await
        .unwrap();
    assert!(got == new);
    let mut got = Vec::new();
    rig.client
        .get("/o/new-robust", 0, None, &mut got)
        .await
        .unwrap();
    assert!(got == new_robust);
}

/// `ecstack bench backup` at a small scale (2,000 files, 1 s windows, SQLite): the load ran in
/// both windows, at least one backup was made, and every file is listed after its restore.
#[test]
fn the_backup_bench_runs_at_a_small_scale() {
    let dir = tempfile::tempdir().unwrap();
    let o = ecstack(&[
        "bench",
        "backup",
        "--files",
        "2000",
        "--seconds",
        "1",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let stores = report["stores"].as_array().unwrap();
    assert_eq!(stores.len(), 1, "{report}");
    let s = &stores[0];
    assert_eq!(s["store"], "SQLite");
    for window in ["idle", "during_backup"] {
        let all = &s[window]["latency"][0];
        assert_eq!(all["op"], "all");
        assert!(all["ops"].as_u64().unwrap() > 0, "{window}: {report}");
        assert!(all["p50_ms"].as_f64().unwrap() > 0.0, "{window}: {report}");
        assert!(
            all["max_ms"].as_f64().unwrap() >= all["p99_ms"].as_f64().unwrap(),
            "{report}"
        );
    }
    let backups = s["backups"].as_array().unwrap();
    assert!(!backups.is_empty());
    assert!(backups.iter().all(|b| b["bytes"].as_u64().unwrap() > 0));
    assert_eq!(s["files_after_restore"], 2000);
}
