//! `ecstack mds` as a process: it starts on port 0 from a cluster.toml, prints its bound
//! addresses, serves the MDS protocol and metrics, keeps acknowledged metadata across a restart,
//! and refuses a missing certificate with one line.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use ecstack_mds_proto::{MdsClient, OsdRegistration};
use ecstack_rpc::Security;

fn write_config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("cluster.toml");
    std::fs::write(
        &path,
        r#"cluster_id = "cli-test"
segment_bytes = 1048576
certs = "certs"
[code]
family = "rs-vand"
k = 2
m = 1
[placement]
[mds]
addr = "127.0.0.1:0"
metrics_addr = "127.0.0.1:0"
store = "mds.sqlite"
heartbeat_ms = 500
down_after_ms = 60000
out_after_ms = 120000
"#,
    )
    .unwrap();
    path
}

struct Mds {
    child: Child,
    _stdout: std::io::Lines<BufReader<std::process::ChildStdout>>,
    addr: String,
    metrics: String,
}

impl Drop for Mds {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(config: &Path) -> Mds {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(["mds", "--insecure", "--config"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = |prefix: &str| -> String {
        let line = lines
            .next()
            .expect("ecstack mds printed its addresses")
            .unwrap();
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("unexpected line {line:?}"))
            .to_string()
    };
    let addr = next("ecstack mds: listening on ");
    let metrics = next("ecstack mds: metrics on http://")
        .trim_end_matches("/metrics")
        .to_string();
    Mds {
        child,
        _stdout: lines,
        addr,
        metrics,
    }
}

/// `ecstack mds --insecure` on `config` that must fail: its one error line (the warning about
/// --insecure aside).
fn failed_start(config: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(["mds", "--insecure", "--config"])
        .arg(config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.contains("WARNING")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    lines[0].to_owned()
}

fn get_metrics(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn mds_serves_on_port_zero_and_keeps_its_metadata_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mds = start(&config);
    // A second MDS on the same store is refused (before it serves anything), naming the first.
    let err = failed_start(&config);
    let store = dir.path().join("mds.sqlite");
    assert!(
        err.starts_with(&format!(
            "ecstack: error: metadata store {} is in use by another MDS (pid {}: ecstack mds --insecure --config ",
            store.display(),
            mds.child.id()
        )),
        "{err}"
    );
    let id = rt.block_on(async {
        let c = MdsClient::connect(&mds.addr, &Security::Insecure).unwrap();
        let mut id = 0;
        for i in 0..3 {
            id = c
                .register_osd(&OsdRegistration {
                    name: format!("osd-{i}"),
                    addr: format!("127.0.0.1:{}", 20000 + i),
                    labels: Default::default(),
                    capacity_bytes: 1 << 30,
                    used_bytes: 0,
                    max_segment_id: 0,
                })
                .await
                .unwrap()
                .osd_id;
        }
        let f = c.create_file("a").await.unwrap();
        c.allocate_segments(f, &[100]).await.unwrap();
        c.commit_file(f, 100).await.unwrap();
        id
    });
    let m = get_metrics(&mds.metrics);
    assert!(m.starts_with("HTTP/1.1 200 OK"), "{m}");
    assert!(m.contains("ecstack_mds_osds{state=\"up\"} 3"), "{m}");
    assert!(
        m.contains("ecstack_mds_requests_total{op=\"commit_file\"} 1"),
        "{m}"
    );
    drop(mds);

    let mds = start(&config);
    rt.block_on(async {
        let c = MdsClient::connect(&mds.addr, &Security::Insecure).unwrap();
        let st = c.status().await.unwrap();
        assert_eq!((st.files, st.bytes, st.osds.len()), (1, 100, 3));
        assert_eq!(c.lookup_file("a").await.unwrap().segments.len(), 1);
        assert_eq!(st.osds[2].osd_id, id);
    });
    drop(mds);

    let out = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(["mds", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("ca.pem"), "{err}");
}

/// `[mds] store` naming a PostgreSQL server that is not there: one line naming the URL (without
/// its password) and the reason, and no hang.
#[test]
fn an_unreachable_postgresql_store_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "store = \"mds.sqlite\"",
        "store = \"postgresql://mds:secret@127.0.0.1:1/ecstack\"",
    );
    std::fs::write(&config, text).unwrap();
    let err = failed_start(&config);
    assert!(
        err.starts_with(
            "ecstack: error: cannot open metadata store postgresql://mds:***@127.0.0.1:1/ecstack: error connecting to server"
        ),
        "{err}"
    );
}
