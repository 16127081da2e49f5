//! Roles on the OSD over real mutual TLS on 127.0.0.1 with the certificates `cluster init` makes:
//! a real MDS and a real OSD daemon (`Daemon::start` registers with its `osd` certificate, `run`
//! mounts the service as the `ecstack osd` process does); every RPC of `osd.proto` is called with
//! the certificate of every role, and of one issued before roles, and is refused with
//! `PermissionDenied` exactly where docs/cluster.md's table says (garbage arguments fail otherwise,
//! with other codes). Also: another cluster's certificate fails once, finally, in one line.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use ecstack_mds::service::MdsHandle;
use ecstack_osd::api::{DeltaStamp, StreamPriority};
use ecstack_osd::daemon::{Daemon, DaemonConfig};
use ecstack_osd::roles::OSD_ROLES;
use ecstack_osd::{ChunkMeta, Layout, OsdCallError, OsdClient};
use ecstack_rpc::init::{init_cluster, issue_certificate_with_role, InitOptions};
use ecstack_rpc::roles::proto_rpcs;
use ecstack_rpc::{ClusterConfig, Security};
use tokio::sync::oneshot;
use tonic::Code;

const TIMEOUT: Duration = Duration::from_secs(20);

/// Who may call what: docs/cluster.md's table, written out here again (not read from
/// `OSD_ROLES`, which is what is under test).
const EXPECTED: &[(&str, &[&str])] = &[
    ("WriteSegment", &["client", "admin"]),
    ("ReadSegment", &["client", "admin"]),
    ("UpdateSegment", &["client", "admin"]),
    ("ReadPlan", &["client", "admin"]),
    ("PutChunk", &["osd"]),
    ("GetChunk", &["osd", "client", "admin"]),
    ("UpdateChunk", &["osd"]),
    ("ApplyDelta", &["osd"]),
    ("ChunkVersion", &["osd"]),
    ("DeleteChunk", &["osd"]),
    ("PutBlocks", &["client", "admin"]),
    ("GetBlocks", &["client", "admin"]),
    ("DeleteBlocks", &["client", "admin"]),
];

#[test]
fn the_table_and_this_test_cover_every_rpc_of_the_proto() {
    let rpcs = proto_rpcs(include_str!("../../osd-proto/proto/osd.proto"));
    assert_eq!(rpcs.len(), 13, "{rpcs:?}");
    assert!(EXPECTED
        .iter()
        .map(|(m, _)| *m)
        .eq(rpcs.iter().map(String::as_str)));
    assert_eq!(OSD_ROLES.method_names(), rpcs);
}

fn cluster(dir: &Path) -> ClusterConfig {
    let opts = InitOptions {
        osds: 1,
        clients: 1,
        k: 2,
        m: 1,
        segment_bytes: 1 << 20,
        ..InitOptions::default()
    };
    init_cluster(dir, &opts).unwrap();
    ClusterConfig::load(&dir.join("cluster.toml")).unwrap()
}

/// A real MDS and one real OSD daemon of `config`, each with its own certificate; returns the
/// OSD's address and id.
async fn start(config: &ClusterConfig, store: &Path) -> (String, u32, Vec<oneshot::Sender<()>>) {
    let (mds_addr, stop_mds) = MdsHandle::spawn_loopback(config).await;

    let daemon = Daemon::start(&DaemonConfig {
        name: "osd-0".into(),
        addr: "127.0.0.1:0".into(),
        labels: BTreeMap::new(),
        store: store.to_owned(),
        mds_addr,
        security: Security::load(&config.certs_dir(), "osd-0").unwrap(),
        recovery_bytes_per_sec: 0,
        store_options: Default::default(),
        update: config.update.clone(),
        store_device: None,
        blocks: Default::default(),
        inventory_period: std::time::Duration::from_millis(config.osd.inventory_period_ms),
    })
    .await
    .unwrap();
    let (addr, osd_id) = (daemon.addr.to_string(), daemon.osd_id);
    let (stop_osd, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        daemon
            .run(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (addr, osd_id, vec![stop_mds, stop_osd])
}

fn layout(osd_id: u32) -> Layout {
    Layout {
        scheme: Default::default(),
        segment_id: 1,
        length: 8,
        primary: osd_id,
        holders: Vec::new(),
        epoch: 1,
        version: 0,
    }
}

/// Calls `method` with arguments the OSD will mostly refuse for other reasons (no holders, no
/// such chunk): only the role check matters here.
async fn call(c: &OsdClient, osd_id: u32, method: &str) -> Result<(), OsdCallError> {
    let l = layout(osd_id);
    match method {
        "WriteSegment" => c.write_segment(&l, b"abcdefgh").await.map(drop),
        "ReadSegment" => c.read_segment(&l, 0, 1).await.map(drop),
        "UpdateSegment" => c.update_segment(&l, 0, b"x").await.map(drop),
        "ReadPlan" => c.read_plan(&l, 0, 1).await.map(drop),
        "PutChunk" => {
            let meta = ChunkMeta {
                reserve_bytes: 0,
                scheme: Default::default(),
                segment_id: 1,
                index: 0,
                version: 1,
                chunk_bytes: 4,
                segment_length: 8,
                applied: Vec::new(),
            };
            c.put_chunk(&meta, Bytes::from_static(b"abcd")).await
        }
        "GetChunk" => c.get_chunk(1, 0, 0, 0, None).await.map(drop),
        "UpdateChunk" => c
            .update_chunk(1, 0, 0, b"x", 9, 8, &[], Default::default())
            .await
            .map(drop),
        "ApplyDelta" => {
            let stamp = DeltaStamp {
                from: 0,
                prior: 8,
                version: 9,
            };
            c.apply_delta(1, 2, &[0..1], b"x", stamp, Default::default())
                .await
        }
        "ChunkVersion" => c.chunk_version(1, 0).await.map(drop),
        "DeleteChunk" => c.delete_chunk(1, 1).await,
        "PutBlocks" => c
            .put_blocks(1, 8, StreamPriority::Normal, 0)
            .await
            .map(drop),
        "GetBlocks" => c.get_blocks(1, 0, StreamPriority::Normal).await.map(drop),
        "DeleteBlocks" => c.delete_blocks(1, &[]).await.map(drop),
        other => panic!("no call for {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_with_every_role() {
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(&dir.path().join("cluster"));
    issue_certificate_with_role(&config, "client-old", None, false).unwrap();
    let (addr, osd_id, _stop) = start(&config, &dir.path().join("store")).await;

    let mut checked = 0;
    for (cert, role) in [
        ("mds", Some("mds")),
        ("osd-0", Some("osd")),
        ("client", Some("client")),
        ("admin", Some("admin")),
        ("client-old", None),
    ] {
        let security = Security::load(&config.certs_dir(), cert).unwrap();
        let c = OsdClient::connect_with(&addr, &security, TIMEOUT, Some(TIMEOUT))
            .unwrap()
            .for_osd(osd_id);
        for (method, allowed) in EXPECTED {
            let may = role.is_some_and(|r| allowed.contains(&r));
            let r = tokio::time::timeout(TIMEOUT, call(&c, osd_id, method))
                .await
                .unwrap_or_else(|_| panic!("{method} as {cert}: no answer"));
            match r {
                Err(OsdCallError::Remote {
                    code: Code::PermissionDenied,
                    message,
                    ..
                }) => {
                    assert!(!may, "{method} as {cert} refused: {message}");
                    assert!(!message.contains('\n'), "{message}");
                    assert!(message.contains(cert), "{message}");
                    if role.is_none() {
                        assert!(
                            message.contains("`ecstack cluster cert client-old --force`"),
                            "{message}"
                        );
                    } else {
                        assert!(message.contains(method), "{message}");
                    }
                }
                Err(
                    e @ (OsdCallError::Unreachable { .. } | OsdCallError::Unauthenticated { .. }),
                ) => {
                    panic!("{method} as {cert}: transport failure {e}")
                }
                other => assert!(may, "{method} as {cert} was let through: {other:?}"),
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 5 * EXPECTED.len());
}

/// Another cluster's certificate, straight to an OSD: final (not `Unreachable`, which the client
/// and the OSDs retry), one line saying the certificate is not of this cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clusters_certificate_is_final() {
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(&dir.path().join("a"));
    let other = cluster(&dir.path().join("b"));
    let (addr, osd_id, _stop) = start(&config, &dir.path().join("store")).await;
    for name in ["client", "osd-0"] {
        let security = Security::load(&other.certs_dir(), name).unwrap();
        let c = OsdClient::connect(&addr, &security)
            .unwrap()
            .for_osd(osd_id);
        let e = c.chunk_version(1, 0).await.unwrap_err();
        let line = e.to_string();
        assert!(
            matches!(e, OsdCallError::Unauthenticated { .. }),
            "{name}: {line}"
        );
        assert!(!e.is_retryable(), "{line}");
        assert!(
            line.contains("the certificate is not of this cluster") && !line.contains('\n'),
            "{line}"
        );
        // The data path (through `wire`) says the same.
        let e = c.get_chunk(1, 0, 0, 0, None).await.unwrap_err();
        assert!(matches!(e, OsdCallError::Unauthenticated { .. }), "{e}");
    }
}
