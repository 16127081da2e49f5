//! The MDS service over a real socket on 127.0.0.1 (tonic in-process, insecure loopback), driven by
//! the typed `MdsClient`, on a manual clock: register, heartbeat, put, down and promotion, out and
//! recovery tasks, error codes, and an MDS restart that loses no acknowledged mutation.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use ecstack_mds::engine::{ManualClock, MdsCore, MdsSettings};
use ecstack_mds::service::MdsHandle;
use ecstack_mds::store::SqliteStore;
use ecstack_mds::*;
use ecstack_rpc::Security;
use tokio::sync::oneshot;

const DOWN: u64 = 3_000;
const OUT: u64 = 9_000;

fn settings() -> MdsSettings {
    MdsSettings {
        params: ClusterParams {
            cluster_id: "svc".into(),
            code: "rs-vand".into(),
            k: 2,
            m: 2,
            segment_bytes: 1 << 20,
            heartbeat_ms: 1000,
            down_after_ms: DOWN as u32,
        },
        failure_domain: None,
        out_after_ms: OUT,
        pending_ttl_ms: 3_600_000,
        default_scheme: UpdateScheme::Fo,
        orphan_grace_ms: 3_600_000,
    }
}

struct Server {
    handle: MdsHandle,
    addr: String,
    client: MdsClient,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(path: &Path, clock: &Arc<ManualClock>) -> Server {
    let store = SqliteStore::open(path).unwrap();
    let core = MdsCore::open(Box::new(store), settings(), clock.clone()).unwrap();
    let handle = MdsHandle::new(core);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    let h = handle.clone();
    let task = tokio::spawn(async move {
        h.serve(listener, &Security::Insecure, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    let client = MdsClient::connect(&addr, &Security::Insecure).unwrap();
    Server {
        handle,
        addr,
        client,
        stop: Some(stop),
        task,
    }
}

impl Server {
    async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap();
    }
}

fn reg(i: u32) -> OsdRegistration {
    OsdRegistration {
        name: format!("osd-{i}"),
        addr: format!("127.0.0.1:{}", 17000 + i),
        labels: BTreeMap::from([("host".to_string(), format!("h{i}"))]),
        capacity_bytes: 1 << 30,
        used_bytes: 0,
        max_segment_id: 0,
    }
}

async fn beat(c: &MdsClient, osd_id: u32) -> HeartbeatReply {
    c.heartbeat(&Heartbeat {
        osd_id,
        ..Heartbeat::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_life_cycle_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mds.sqlite");
    let clock = ManualClock::new(1_700_000_000_000);
    let srv = start(&path, &clock).await;
    let c = srv.client.clone();

    let mut ids = Vec::new();
    for i in 0..6 {
        let r = c.register_osd(&reg(i)).await.unwrap();
        assert_eq!(r.params.n(), 4);
        ids.push(r.osd_id);
    }
    assert_eq!(c.register_osd(&reg(3)).await.unwrap().osd_id, ids[3]);

    // A put: invisible until committed.
    let f = c.create_file("logs/a").await.unwrap();
    let segs = c
        .allocate_segments(f, &[1 << 20, 1 << 20, 5])
        .await
        .unwrap();
    assert!(matches!(
        c.lookup_file("logs/a").await,
        Err(MdsError::NotFound(_))
    ));
    c.commit_file(f, (2 << 20) + 5).await.unwrap();
    let info = c.lookup_file("logs/a").await.unwrap();
    assert_eq!(info.segments, segs);
    assert_eq!(c.list_files("logs/").await.unwrap().len(), 1);

    // Error codes come back as typed errors with one clear line.
    assert!(
        matches!(c.create_file("").await, Err(MdsError::InvalidArgument(m)) if m == "path is empty")
    );
    assert!(
        matches!(c.get_segment(12345).await, Err(MdsError::NotFound(m)) if m.contains("12345"))
    );
    let g = c.create_file("big").await.unwrap();
    assert!(matches!(
        c.allocate_segments(g, &[(1 << 20) + 1]).await,
        Err(MdsError::InvalidArgument(_))
    ));

    // Down: the primary of segment 0 stops heartbeating; the others keep going.
    let victim = segs[0].primary;
    for _ in 0..4 {
        clock.advance(1_000);
        for &id in &ids {
            if id != victim {
                beat(&c, id).await;
            }
        }
        srv.handle.tick().await.unwrap();
    }
    let st = c.status().await.unwrap();
    assert_eq!(
        st.osds.iter().find(|o| o.osd_id == victim).unwrap().state,
        OsdState::Down
    );
    let now = c.get_segment(segs[0].segment_id).await.unwrap();
    assert_ne!(now.primary, victim);
    assert_eq!(
        now.primary, now.chunks[1].osd_id,
        "chunk 1's holder is the lowest usable one"
    );
    assert!(now.epoch > segs[0].epoch);
    assert!(!now.chunks[0].up);

    // Out (by command): the victim's chunks move; their primaries get RecoverTasks.
    let moved = c.osd_out(victim).await.unwrap();
    assert!(moved >= 1);
    let now = c.get_segment(segs[0].segment_id).await.unwrap();
    assert_eq!(now.chunks[0].state, ChunkState::Recovering);
    assert_ne!(now.chunks[0].osd_id, victim);
    let tasks = beat(&c, now.primary).await.tasks;
    let task = tasks
        .iter()
        .find_map(|t| match t {
            OsdTask::Recover(r) if r.layout.segment_id == now.segment_id => Some(r.clone()),
            _ => None,
        })
        .expect("a RecoverTask for segment 0 at its primary");
    assert_eq!(task.chunks, vec![0]);
    c.chunk_recovered(now.segment_id, 0, now.chunks[0].osd_id, 0, None)
        .await
        .unwrap();
    assert_eq!(
        c.get_segment(now.segment_id).await.unwrap().chunks[0].state,
        ChunkState::Healthy
    );
    let st = c.status().await.unwrap();
    assert_eq!(st.recovery.chunks_total, moved);
    assert!(st.recovery.chunks_done >= 1);

    let metrics = srv.handle.metrics_text().await;
    assert!(
        metrics.contains("ecstack_mds_requests_total{op=\"heartbeat\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ecstack_mds_osds{state=\"out\"} 1"),
        "{metrics}"
    );

    // Restart: stop the server, reopen the store, serve again; every acknowledged mutation is there.
    let before = c.status().await.unwrap();
    let layout = c.get_segment(now.segment_id).await.unwrap();
    srv.shutdown().await;
    let srv = start(&path, &clock).await;
    let c = srv.client.clone();
    assert_eq!(c.lookup_file("logs/a").await.unwrap().size, (2 << 20) + 5);
    assert_eq!(c.get_segment(now.segment_id).await.unwrap(), layout);
    let after = c.status().await.unwrap();
    assert_eq!(after.recovery, before.recovery);
    assert_eq!(after.files, before.files);
    c.remove_file("logs/a").await.unwrap();
    let holder = segs[2].chunks[3].osd_id;
    let deletes = beat(&c, holder).await.tasks;
    assert!(deletes
        .iter()
        .any(|t| matches!(t, OsdTask::Delete(d) if d.segment_id == segs[2].segment_id)));
    srv.shutdown().await;
}

/// The update scheme and the store usage fields cross the wire: CreateFile's optional scheme,
/// the layouts and FileInfo, a refused change, and heartbeats' reserve, log bytes and merges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemes_and_store_usage_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let srv = start(&dir.path().join("mds.sqlite"), &clock).await;
    let c = srv.client.clone();
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(c.register_osd(&reg(i)).await.unwrap().osd_id);
    }
    for (path, scheme) in [("a", Some(UpdateScheme::Plr)), ("b", None)] {
        let f = c.create_file_with(path, scheme).await.unwrap();
        let segs = c.allocate_segments(f, &[7]).await.unwrap();
        let want = scheme.unwrap_or_default();
        assert_eq!(segs[0].scheme, want);
        c.commit_file(f, 7).await.unwrap();
        let info = c.lookup_file(path).await.unwrap();
        assert_eq!(info.scheme, want);
        assert_eq!(
            c.get_segment(segs[0].segment_id).await.unwrap().scheme,
            want
        );
    }
    let e = c
        .create_file_with("a", Some(UpdateScheme::Fl))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, MdsError::FailedPrecondition(m) if m.starts_with("changing a file's scheme is refused")),
        "{e:?}"
    );
    c.heartbeat(&Heartbeat {
        osd_id: ids[2],
        used_bytes: 1,
        reserve_bytes: 2,
        log_bytes: 3,
        merges: 4,
        ..Heartbeat::default()
    })
    .await
    .unwrap();
    let st = c.status().await.unwrap();
    let o = st.osds.iter().find(|o| o.osd_id == ids[2]).unwrap();
    assert_eq!(
        (o.used_bytes, o.reserve_bytes, o.log_bytes, o.merges),
        (1, 2, 3, 4)
    );
    srv.shutdown().await;
}

/// The MDS takes a new file's default scheme from `cluster.toml`'s `[update] scheme` (fo when the
/// section is absent).
#[test]
fn the_default_scheme_comes_from_the_config() {
    for scheme in [UpdateScheme::Fo, UpdateScheme::Plr] {
        let dir = tempfile::tempdir().unwrap();
        let opts = ecstack_rpc::InitOptions {
            osds: 1,
            update_scheme: scheme,
            ..ecstack_rpc::InitOptions::default()
        };
        ecstack_rpc::init_cluster(dir.path(), &opts).unwrap();
        let config = ecstack_rpc::ClusterConfig::load(&dir.path().join("cluster.toml")).unwrap();
        assert_eq!(MdsSettings::from_config(&config).default_scheme, scheme);
    }
}

/// A client given several MDS addresses (`[mds] addrs`) moves on from one that refuses
/// connections and from a standby (which answers `Unavailable` naming the active), and stays with
/// the one that answers.
#[tokio::test]
async fn a_client_of_several_mdss_moves_on_to_the_one_that_answers() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let server = start(&dir.path().join("mds.db"), &clock).await;
    // A standby: every call is `Unavailable`.
    let standby = MdsHandle::standby(clock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let standby_addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let _ = standby
            .serve(listener, &Security::Insecure, std::future::pending())
            .await;
    });
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let active_addr = server.addr.clone();
    let c = MdsClient::connect(
        &format!("{refused},{standby_addr},{active_addr}"),
        &Security::Insecure,
    )
    .unwrap();
    let mut errors = Vec::new();
    let status = loop {
        match c.status().await {
            Ok(s) => break s,
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                errors.push(e.to_string());
                assert!(errors.len() < 5, "{errors:?}");
            }
        }
    };
    assert_eq!(status.cluster_id, "svc");
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[1].contains("this MDS is a standby; the active MDS is not known yet"),
        "{errors:?}"
    );
    assert_eq!(c.current_addr(), active_addr);
    c.status().await.unwrap();
    server.shutdown().await;
}

/// An online backup of a SQLite store is copied outside the core's lock, by a read-only
/// connection of its own: directories made at full speed go on being acknowledged during the
/// backups (at a tenth of the rate without a backup at least), and each copy is one committed state (the root's link count matches its entries,
/// every entry's inode is there) holding every directory acknowledged before it began. The store's
/// lock still refuses a second handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_copies_one_committed_state_while_operations_go_on() {
    use ecstack_mds::store::{MetadataStore, StoreError, ROOT_INO};
    use std::sync::Mutex;
    use std::time::Instant;

    const PADS: usize = 192;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mds.sqlite");
    let clock = ManualClock::new(1_700_000_000_000);
    let srv = start(&path, &clock).await;
    // A database of some megabytes, so that a copy takes a while: directories with a 64 KiB
    // extended attribute each.
    let pad = vec![0x5a; 64 * 1024];
    let fills: Vec<_> = (0..4)
        .map(|t| {
            let (c, pad) = (srv.client.clone(), pad.clone());
            tokio::spawn(async move {
                for i in 0..PADS / 4 {
                    let name = format!("p{t}-{i}");
                    let a = c
                        .mkdir(ROOT_INO, name.as_bytes(), 0o755, 0, 0)
                        .await
                        .unwrap();
                    c.set_xattr(a.ino, b"user.pad", &pad, true, false)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for f in fills {
        f.await.unwrap();
    }

    // The load: directories made without pause, each acknowledged one with when it was asked
    // for and when it was answered.
    let start_at = Instant::now();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acked: Arc<Mutex<Vec<(String, f64, f64)>>> = Arc::default();
    let load: Vec<_> = (0..2)
        .map(|t| {
            let (c, stop, acked) = (srv.client.clone(), stop.clone(), acked.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let name = format!("d{t}-{i}");
                    let asked = start_at.elapsed().as_secs_f64();
                    c.mkdir(ROOT_INO, name.as_bytes(), 0o755, 0, 0)
                        .await
                        .unwrap();
                    let answered = start_at.elapsed().as_secs_f64();
                    acked.lock().unwrap().push((name, asked, answered));
                    i += 1;
                }
            })
        })
        .collect();
    // The load's rate without a backup.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let idle_rate = acked.lock().unwrap().len() as f64 / start_at.elapsed().as_secs_f64();
    let (mut during, mut backup_secs) = (0, 0.0);
    for b in 0..3 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let before: Vec<String> = acked.lock().unwrap().iter().map(|a| a.0.clone()).collect();
        let began = start_at.elapsed().as_secs_f64();
        let mut data = Vec::new();
        let n = srv
            .client
            .backup(|piece| {
                data.extend_from_slice(piece);
                Ok(())
            })
            .await
            .unwrap();
        let ended = start_at.elapsed().as_secs_f64();
        assert_eq!(n, data.len() as u64);
        let inside = acked
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, asked, answered)| *asked > began && *answered < ended)
            .count();
        eprintln!(
            "backup {b}: {n} bytes in {:.0} ms, {inside} directories asked for and made meanwhile",
            (ended - began) * 1e3
        );
        during += inside;
        backup_secs += ended - began;

        let copy = dir.path().join(format!("backup-{b}.db"));
        std::fs::write(&copy, &data).unwrap();
        ecstack_mds::backup::check_sqlite(&copy).unwrap();
        let store = SqliteStore::open(&copy).unwrap();
        let mut entries: Vec<(Vec<u8>, _)> = Vec::new();
        loop {
            let after = entries.last().map(|e| e.0.clone()).unwrap_or_default();
            let more = store.dir_entries(ROOT_INO, &after, 4096).unwrap();
            if more.is_empty() {
                break;
            }
            entries.extend(more);
        }
        let root = store.inode(ROOT_INO).unwrap().unwrap();
        assert_eq!(
            root.nlink as usize,
            2 + entries.len(),
            "backup {b}: the root's link count and its entries disagree"
        );
        assert_eq!(store.inode_count().unwrap() as usize, 1 + entries.len());
        for (name, i) in &entries {
            assert!(
                store.inode(i.ino).unwrap().is_some(),
                "backup {b}: {} names a missing inode",
                String::from_utf8_lossy(name)
            );
        }
        let names: std::collections::BTreeSet<&[u8]> =
            entries.iter().map(|(n, _)| n.as_slice()).collect();
        for name in &before {
            assert!(
                names.contains(name.as_bytes()),
                "backup {b}: {name}, acknowledged before the backup, is missing"
            );
        }
        let mut pads = 0;
        for (name, i) in &entries {
            if name.starts_with(b"p") {
                pads += store.xattrs(i.ino).unwrap().len();
            }
        }
        assert_eq!(pads, PADS);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    // Under the core's lock the load would stop for the copy (a few directories slip in before
    // the copy starts or while the copy is streamed: about 1/20 of the idle rate was measured so).
    let rate = during as f64 / backup_secs;
    assert!(
        rate * 10.0 >= idle_rate,
        "{rate:.0} directories/s were asked for and made during the backups, {idle_rate:.0}/s without"
    );
    // The backup's reader took no lock; the MDS's still refuses a second handle.
    assert!(matches!(
        SqliteStore::open(&path),
        Err(StoreError::Locked { .. })
    ));
    srv.shutdown().await;
}
