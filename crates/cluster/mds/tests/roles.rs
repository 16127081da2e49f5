//! Roles on the MDS over real mutual TLS on 127.0.0.1 with the certificates `cluster init` makes:
//! every RPC of `mds.proto` is called with the certificate of every role, and of one issued before
//! roles, and is refused with `PermissionDenied` exactly where docs/cluster.md's table says
//! (garbage arguments fail otherwise, with other codes). Also: a client of another cluster fails
//! once, with one line saying its certificate is not of this cluster.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use ecstack_mds::service::{MdsHandle, MDS_ROLES};
use ecstack_mds::{
    FileKind, Heartbeat, InventoryPage, MdsClient, MdsError, OsdRegistration, RenameFlags,
    RobustCode, RobustParams, RobustUpdate, SetAttr,
};
use ecstack_rpc::init::{init_cluster, issue_certificate_with_role, InitOptions};
use ecstack_rpc::roles::proto_rpcs;
use ecstack_rpc::{ClusterConfig, Security};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Who may call what: docs/cluster.md's table, written out here again (not read from
/// `MDS_ROLES`, which is what is under test).
const EXPECTED: &[(&str, &[&str])] = &[
    ("RegisterOsd", &["osd"]),
    ("Heartbeat", &["osd"]),
    ("ReportInventory", &["osd"]),
    ("CreateFile", &["client", "admin"]),
    ("AllocateSegments", &["client", "admin"]),
    ("CommitFile", &["client", "admin"]),
    ("LookupFile", &["client", "admin"]),
    ("ListFiles", &["client", "admin"]),
    ("RemoveFile", &["client", "admin"]),
    ("GetSegment", &["osd", "client", "admin"]),
    ("MarkStale", &["osd"]),
    ("ChunkRecovered", &["osd"]),
    ("Lookup", &["client", "admin"]),
    ("GetAttr", &["client", "admin"]),
    ("SetAttr", &["client", "admin"]),
    ("Mknod", &["client", "admin"]),
    ("Mkdir", &["client", "admin"]),
    ("Unlink", &["client", "admin"]),
    ("Rmdir", &["client", "admin"]),
    ("Rename", &["client", "admin"]),
    ("Link", &["client", "admin"]),
    ("Symlink", &["client", "admin"]),
    ("ReadLink", &["client", "admin"]),
    ("ReadDir", &["client", "admin"]),
    ("StatFs", &["client", "admin"]),
    ("SetXattr", &["client", "admin"]),
    ("GetXattr", &["client", "admin"]),
    ("ListXattr", &["client", "admin"]),
    ("RemoveXattr", &["client", "admin"]),
    ("OpenFile", &["client", "admin"]),
    ("GrowFile", &["client", "admin"]),
    ("CreateRobustFile", &["client", "admin"]),
    ("CommitRobustFile", &["client", "admin"]),
    ("UpdateRobustObject", &["client", "admin"]),
    ("OsdOut", &["admin"]),
    ("Status", &["client", "admin"]),
    ("Backup", &["admin"]),
];

#[test]
fn the_table_and_this_test_cover_every_rpc_of_the_proto() {
    let rpcs = proto_rpcs(include_str!("../../mds-proto/proto/mds.proto"));
    assert_eq!(rpcs.len(), 37, "{rpcs:?}");
    assert!(EXPECTED
        .iter()
        .map(|(m, _)| *m)
        .eq(rpcs.iter().map(String::as_str)));
    assert_eq!(MDS_ROLES.method_names(), rpcs);
}

fn cluster(dir: &Path) -> ClusterConfig {
    let opts = InitOptions {
        osds: 1,
        clients: 1,
        k: 2,
        m: 1,
        ..InitOptions::default()
    };
    init_cluster(dir, &opts).unwrap();
    ClusterConfig::load(&dir.join("cluster.toml")).unwrap()
}

fn client(config: &ClusterConfig, name: &str, addr: &str) -> MdsClient {
    let security = Security::load(&config.certs_dir(), name).unwrap();
    MdsClient::from_channel(security.channel(addr, TIMEOUT, Some(TIMEOUT)).unwrap())
}

/// Calls `method` with arguments the MDS will mostly refuse for other reasons (no such file,
/// segment or OSD): only the role check matters here.
async fn call(c: &MdsClient, method: &str) -> Result<(), MdsError> {
    match method {
        "RegisterOsd" => c
            .register_osd(&OsdRegistration {
                name: "osd-0".into(),
                addr: "127.0.0.1:9".into(),
                labels: BTreeMap::new(),
                capacity_bytes: 1 << 30,
                used_bytes: 0,
                max_segment_id: 0,
            })
            .await
            .map(drop),
        "Heartbeat" => c
            .heartbeat(&Heartbeat {
                osd_id: 77,
                ..Heartbeat::default()
            })
            .await
            .map(drop),
        "ReportInventory" => c
            .report_inventory(InventoryPage {
                osd_id: 77,
                last: true,
                ..InventoryPage::default()
            })
            .await
            .map(drop),
        "CreateFile" => c.create_file("/roles/new").await.map(drop),
        "AllocateSegments" => c.allocate_segments(999, &[1]).await.map(drop),
        "CommitFile" => c.commit_file(999, 1).await,
        "LookupFile" => c.lookup_file("/roles/none").await.map(drop),
        "ListFiles" => c.list_files("/").await.map(drop),
        "RemoveFile" => c.remove_file("/roles/none").await,
        "GetSegment" => c.get_segment(999).await.map(drop),
        "MarkStale" => c.mark_stale(999, &[0], 1).await,
        "ChunkRecovered" => c.chunk_recovered(999, 0, 0, 1, Some(0)).await.map(drop),
        "Lookup" => c.lookup(999, b"x").await.map(drop),
        "GetAttr" => c.get_attr(999).await.map(drop),
        "SetAttr" => c.set_attr(999, SetAttr::default()).await.map(drop),
        "Mknod" => c
            .mknod(999, b"x", FileKind::File, 0o644, 0, 0, 0, true)
            .await
            .map(drop),
        "Mkdir" => c.mkdir(999, b"x", 0o755, 0, 0).await.map(drop),
        "Unlink" => c.unlink(999, b"x").await,
        "Rmdir" => c.rmdir(999, b"x").await,
        "Rename" => c.rename(999, b"x", 999, b"y", RenameFlags::default()).await,
        "Link" => c.link(999, 999, b"x").await.map(drop),
        "Symlink" => c.symlink(999, b"x", b"t", 0, 0).await.map(drop),
        "ReadLink" => c.read_link(999).await.map(drop),
        "ReadDir" => c.read_dir(999, b"", 0).await.map(drop),
        "StatFs" => c.stat_fs().await.map(drop),
        "SetXattr" => c.set_xattr(999, b"user.x", b"v", false, false).await,
        "GetXattr" => c.get_xattr(999, b"user.x").await.map(drop),
        "ListXattr" => c.list_xattr(999).await.map(drop),
        "RemoveXattr" => c.remove_xattr(999, b"user.x").await,
        "OpenFile" => c.open_file(999).await.map(drop),
        "GrowFile" => c.grow_file(999, 0, &[1]).await.map(drop),
        "CreateRobustFile" => c
            .create_robust_file(
                "/roles/robust",
                RobustParams {
                    code: RobustCode::RaptorQ,
                    block_bytes: 0,
                    redundancy: 1.0,
                    object_blocks: 1,
                    lt_c: 0.0,
                    lt_delta: 0.0,
                },
                0,
                &[],
            )
            .await
            .map(drop),
        "CommitRobustFile" => c.commit_robust_file(999, &[]).await,
        "UpdateRobustObject" => c
            .update_robust_object(&RobustUpdate {
                file_id: 999,
                object_id: 999,
                version: 2,
                added: Vec::new(),
                dropped: Vec::new(),
                seed: 0,
            })
            .await
            .map(drop),
        "OsdOut" => c.osd_out(999).await.map(drop),
        "Status" => c.status().await.map(drop),
        "Backup" => c.backup(|_| Ok(())).await.map(drop),
        other => panic!("no call for {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_with_every_role() {
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(dir.path());
    // A certificate as `init` made them before roles.
    issue_certificate_with_role(&config, "client-old", None, false).unwrap();
    let (addr, _stop) = MdsHandle::spawn_loopback(&config).await;

    let mut checked = 0;
    for (cert, role) in [
        ("mds", Some("mds")),
        ("osd-0", Some("osd")),
        ("client", Some("client")),
        ("admin", Some("admin")),
        ("client-old", None),
    ] {
        let c = client(&config, cert, &addr);
        for (method, allowed) in EXPECTED {
            let may = role.is_some_and(|r| allowed.contains(&r));
            let r = tokio::time::timeout(TIMEOUT, call(&c, method))
                .await
                .unwrap_or_else(|_| panic!("{method} as {cert}: no answer"));
            match r {
                Err(MdsError::PermissionDenied(m)) => {
                    assert!(!may, "{method} as {cert} refused: {m}");
                    assert!(!m.contains('\n'), "{m}");
                    assert!(m.contains(cert), "the refusal names the certificate: {m}");
                    if role.is_none() {
                        assert!(
                            m.contains("carries no role")
                                && m.contains("`ecstack cluster cert client-old --force`"),
                            "{m}"
                        );
                    } else {
                        assert!(m.contains(method), "the refusal names the call: {m}");
                    }
                    let e = MdsError::PermissionDenied(m);
                    assert!(!e.is_retryable(), "a refusal is final");
                }
                Err(MdsError::Unavailable(m) | MdsError::Unauthenticated(m)) => {
                    panic!("{method} as {cert}: transport failure {m}")
                }
                other => assert!(may, "{method} as {cert} was let through: {other:?}"),
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 5 * 37);
}

/// A client holding another cluster's certificates: the handshake fails, and the error is final
/// and says so in one line (retrying cannot fix a certificate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clusters_certificate_is_final() {
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(&dir.path().join("a"));
    let other = cluster(&dir.path().join("b"));
    let (addr, _stop) = MdsHandle::spawn_loopback(&config).await;
    for name in ["client", "admin", "osd-0"] {
        let e = client(&other, name, &addr).status().await.unwrap_err();
        let line = e.to_string();
        assert!(matches!(e, MdsError::Unauthenticated(_)), "{name}: {line}");
        assert!(!e.is_retryable(), "{line}");
        assert!(
            line.contains("the certificate is not of this cluster") && !line.contains('\n'),
            "{line}"
        );
    }
    // And this cluster's own client still gets in.
    client(&config, "client", &addr).status().await.unwrap();
}
