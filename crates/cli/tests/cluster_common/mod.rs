//! The multi-process test rig: a real cluster (`ecstack mds` + N `ecstack osd` processes of the
//! built binary on 127.0.0.1, OSDs on port 0, everything under a temporary directory) with fast
//! failure detection, a client, and a byte model of what every file must read as. Every daemon is
//! killed when the rig is dropped (a failing test leaves no process behind) and a failure prints
//! the seed and the daemons' log tails.

#![allow(dead_code)]

pub mod mount;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use ecstack_base::Rng;
use ecstack_client::{Client, ClientOptions, ReadPath};
use ecstack_lab::codfs_local::{LocalCluster, LocalSpec};
use ecstack_rpc::{Backoff, Security};

pub const HEARTBEAT_MS: u64 = 100;
pub const DOWN_AFTER_MS: u64 = 700;

/// The one seed `ECSTACK_SEED=<n>` asks to replay.
fn replayed_seed() -> Option<u64> {
    std::env::var("ECSTACK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
}

/// Whether `ECSTACK_SEED` replays one seed ([`seeds`]). A fault run's invariants hold for every
/// seed; the checks that the runs reached their paths (an MDS stopped, a degraded read) hold over
/// the CI set of seeds, which one replayed seed need not reach.
pub fn replaying_one_seed() -> bool {
    replayed_seed().is_some()
}

/// Seeds a test runs: `ECSTACK_SEED=<n>` reruns one, `ECSTACK_CLUSTER_SEEDS=<count>` runs many
/// (the long mode), otherwise `default` seeds from 1.
pub fn seeds(default: u64) -> Vec<u64> {
    if let Some(s) = replayed_seed() {
        return vec![s];
    }
    let env = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let n = env("ECSTACK_CLUSTER_SEEDS").unwrap_or(default);
    // A long mode split over several processes: ECSTACK_CLUSTER_SEED_FROM=101 with
    // ECSTACK_CLUSTER_SEEDS=100 runs seeds 101..=200.
    let from = env("ECSTACK_CLUSTER_SEED_FROM").unwrap_or(1);
    (from..from + n).collect()
}

/// The text of a daemon's metrics endpoint (`GET /metrics` at the address the last line of its
/// log `NAME.log` that says "metrics on http://…" names): `mds`, `osd-3`.
pub fn scrape_daemon(rig: &Rig, name: &str) -> String {
    let log = std::fs::read_to_string(rig.cluster.log_dir().join(format!("{name}.log")))
        .unwrap_or_default();
    scrape_logged(&log, name)
}

/// `GET /metrics` at the address the last "metrics on http://…" line of `log` (`who`'s) names:
/// the whole HTTP response.
pub fn scrape_logged(log: &str, who: &str) -> String {
    use std::io::{Read, Write};
    let addr = log
        .lines()
        .rev()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no metrics address in the log of {who}:\n{log}"))
        .to_owned();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

pub struct Rig {
    pub cluster: LocalCluster,
    pub client: Client,
    pub dir: tempfile::TempDir,
    pub k: u32,
    pub m: u32,
    pub segment_bytes: u64,
}

pub struct RigSpec {
    pub osds: usize,
    /// Code family (`rs-vand`, `rdp`, ...).
    pub family: String,
    pub k: u32,
    pub m: u32,
    pub segment_bytes: u64,
    /// The client gives up on a retryable error after this long.
    pub retry_secs: u64,
    /// How the rig's client reads.
    pub read_path: ReadPath,
    /// Worker threads of each OSD (`ecstack osd --threads`); `None`: one per core.
    pub osd_threads: Option<u16>,
    /// `[update.reserve]` of the cluster (`None`: the defaults).
    pub reserve: Option<ecstack_rpc::config::ReserveConfig>,
    /// `[mds] store` (a PostgreSQL URL); `None`: the SQLite file in the cluster's directory.
    pub mds_store: Option<String>,
    /// Standby MDSs (`[mds] addrs`; needs a PostgreSQL `mds_store`).
    pub mds_standbys: usize,
    /// Every OSD's store on a device (`LocalSpec::store_device`, `{osd}` its index).
    pub store_device: Option<String>,
    /// Any other change to the cluster's `cluster.toml` (`LocalSpec::configure`).
    pub configure: Option<fn(&mut ecstack_rpc::ClusterConfig)>,
}

impl Default for RigSpec {
    fn default() -> Self {
        RigSpec {
            osds: 8,
            family: "rs-vand".into(),
            k: 4,
            m: 2,
            segment_bytes: 1 << 20,
            retry_secs: 20,
            read_path: ReadPath::Primary,
            osd_threads: None,
            reserve: None,
            mds_store: None,
            mds_standbys: 0,
            store_device: None,
            configure: None,
        }
    }
}

pub fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ecstack"))
}

/// Runs the built `ecstack` with `args` (no `ECSTACK_CLUSTER` from the environment).
/// The lines `ecstack cluster up` prints on `stdout` until it is ready (its last line starts
/// with `try:`), or until the stream ends.
pub fn up_lines(stdout: impl std::io::Read) -> Vec<String> {
    use std::io::BufRead;
    let mut lines = Vec::new();
    for l in std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
    {
        let done = l.starts_with("try:");
        lines.push(l);
        if done {
            break;
        }
    }
    lines
}

pub fn ecstack(args: &[&str]) -> std::process::Output {
    std::process::Command::new(exe())
        .args(args)
        .env_remove("ECSTACK_CLUSTER")
        .output()
        .expect("run ecstack")
}

/// A failed command's one error line (asserting there is exactly one, as `ecstack: error: …`).
pub fn stderr_line(o: &std::process::Output) -> String {
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one error line, got: {e}");
    assert!(lines[0].starts_with("ecstack: error: "), "{e}");
    lines[0].to_owned()
}

/// The rig's process index (`osd-N`) of the OSD with id `osd_id` in `status`.
pub fn osd_index(status: &ecstack_mds_proto::ClusterStatus, osd_id: u32) -> usize {
    let name = &status
        .osds
        .iter()
        .find(|o| o.osd_id == osd_id)
        .unwrap_or_else(|| panic!("osd id {osd_id} is not in the status"))
        .name;
    name.trim_start_matches("osd-").parse().unwrap()
}

pub fn client_options(retry_secs: u64) -> ClientOptions {
    ClientOptions {
        metadata_timeout: Duration::from_secs(5),
        data_timeout: Duration::from_secs(30),
        ack_timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(2),
        retry: Backoff {
            initial: Duration::from_millis(30),
            delay_max: Duration::from_millis(500),
            multiplier: 2.0,
            jitter: 0.5,
            attempts_max: 1000,
            total_max: Duration::from_secs(retry_secs),
            seed: Some(7),
        },
        window_segments_max: 4,
        progress: None,
        received: None,
        sent: None,
        read_path: ReadPath::Primary,
        failed_attempts: None,
    }
}

impl Rig {
    pub async fn start(spec: RigSpec) -> Rig {
        // ECSTACK_TEST_KEEP=1 keeps the cluster's directory (logs, MDS database, chunk files) to
        // diagnose a failing seed.
        let dir = tempfile::Builder::new()
            .prefix("ecstack-cluster-test-")
            .disable_cleanup(std::env::var_os("ECSTACK_TEST_KEEP").is_some())
            .tempdir()
            .expect("temp dir");
        let mut s = LocalSpec::new(exe(), dir.path().join("cluster"), spec.osds);
        s.family = spec.family.clone();
        s.k = spec.k;
        s.m = spec.m;
        s.segment_bytes = spec.segment_bytes;
        s.heartbeat_ms = HEARTBEAT_MS;
        s.down_after_ms = DOWN_AFTER_MS;
        s.out_after_ms = 3_600_000;
        s.osd_threads = spec.osd_threads;
        s.reserve = spec.reserve.clone();
        s.mds_store = spec.mds_store.clone();
        s.mds_standbys = spec.mds_standbys;
        s.store_device = spec.store_device.clone();
        s.configure = spec.configure;
        let cluster = LocalCluster::start(s).expect("start the cluster");
        let security =
            Security::load(&cluster.config().certs_dir(), "client").expect("client cert");
        let options = ClientOptions {
            read_path: spec.read_path,
            ..client_options(spec.retry_secs)
        };
        let client = Client::connect_with(cluster.config(), security, options).expect("client");
        let rig = Rig {
            cluster,
            client,
            dir,
            k: spec.k,
            m: spec.m,
            segment_bytes: spec.segment_bytes,
        };
        let up = rig
            .client
            .wait_for_osds(spec.osds, Duration::from_secs(30))
            .await;
        if let Err(e) = up {
            panic!("cluster did not come up: {e}\n{}", rig.logs());
        }
        rig
    }

    /// Another client of the rig's cluster (its own connections) reading by `read_path`.
    pub fn client_with(&self, read_path: ReadPath) -> Client {
        self.client_with_options(ClientOptions {
            read_path,
            ..client_options(20)
        })
    }

    /// Another client of the rig's cluster with `options`.
    pub fn client_with_options(&self, options: ClientOptions) -> Client {
        Client::connect_with(self.cluster.config(), self.security(), options).expect("client")
    }

    /// The `client` certificate of the rig's cluster (for an `MdsClient` of a test's own).
    pub fn security(&self) -> Security {
        Security::load(&self.cluster.config().certs_dir(), "client").expect("client cert")
    }

    /// A client of the rig's cluster with the `admin` certificate (`osd out` needs it).
    pub fn admin(&self) -> Client {
        let security =
            Security::load(&self.cluster.config().certs_dir(), "admin").expect("admin cert");
        Client::connect_with(self.cluster.config(), security, client_options(20)).expect("admin")
    }

    /// The last lines of every daemon's log, for failure messages; the whole logs are kept in
    /// a directory under the target's tmp dir, named in the message (the rig's own directory goes
    /// when the test ends).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let Ok(entries) = std::fs::read_dir(self.cluster.log_dir()) else {
            return out;
        };
        let kept = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "cluster-logs-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
        ));
        if std::fs::create_dir_all(&kept).is_ok() {
            for e in std::fs::read_dir(self.cluster.log_dir())
                .into_iter()
                .flatten()
                .flatten()
            {
                let _ = std::fs::copy(e.path(), kept.join(e.file_name()));
            }
            out.push_str(&format!("whole logs kept in {}\n", kept.display()));
        }
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(8)..];
            out.push_str(&format!("--- {}\n{}\n", p.display(), tail.join("\n")));
        }
        out
    }

    /// Starts the OSDs `down` again and waits until the MDS has each up at its new address. A
    /// restarted OSD listens on a new port, and an MDS that never noticed it was down hands out
    /// the old one until it registers: a read made then meets refused connections (fault seed
    /// 367350 read its files in that window after its final restarts and failed).
    pub async fn restart_and_wait(&mut self, down: &[usize]) {
        let before = self
            .client
            .status()
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", self.logs()));
        let old: Vec<(String, String)> = down
            .iter()
            .map(|&i| {
                let name = LocalCluster::osd_name(i);
                let addr = before
                    .osds
                    .iter()
                    .find(|o| o.name == name)
                    .map(|o| o.addr.clone())
                    .unwrap_or_default();
                (name, addr)
            })
            .collect();
        for &i in down {
            self.cluster.start_osd(i).unwrap();
        }
        self.client
            .wait_status(
                "the restarted OSDs registered",
                Duration::from_secs(60),
                move |s| {
                    old.iter().all(|(name, addr)| {
                        s.osds.iter().any(|o| {
                            &o.name == name
                                && o.state == ecstack_mds_proto::OsdState::Up
                                && &o.addr != addr
                        })
                    })
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", self.logs()));
    }

    /// Waits until the MDS sees OSD `name` in a state other than up.
    pub async fn wait_down(&self, name: &str) {
        let n = name.to_owned();
        self.client
            .wait_status(&format!("{name} down"), Duration::from_secs(30), move |s| {
                s.osds
                    .iter()
                    .any(|o| o.name == n && o.state != ecstack_mds_proto::OsdState::Up)
            })
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", self.logs()));
    }

    pub async fn wait_healthy(&self) {
        self.client
            .wait_for_health(Duration::from_secs(120))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", self.logs()));
    }
}

/// What a file must read as: byte i is `cur[i]`, or `alt[i]` where an update failed (an FO update
/// that was not acknowledged may or may not have reached each segment).
#[derive(Clone, Debug)]
pub struct FileModel {
    /// The bytes every acknowledged write and update left.
    pub cur: Vec<u8>,
    /// Other values a byte may read as: the bytes of failed updates (each may have reached some
    /// chunks and not others), kept until an acknowledged write covers that byte again.
    maybe: BTreeMap<usize, Vec<u8>>,
}

impl FileModel {
    pub fn new(data: Vec<u8>) -> FileModel {
        FileModel {
            cur: data,
            maybe: BTreeMap::new(),
        }
    }

    pub fn updated(&mut self, offset: usize, data: &[u8]) {
        self.cur[offset..offset + data.len()].copy_from_slice(data);
        let touched: Vec<usize> = self
            .maybe
            .range(offset..offset + data.len())
            .map(|(&j, _)| j)
            .collect();
        for j in touched {
            self.maybe.remove(&j);
        }
    }

    pub fn maybe_updated(&mut self, offset: usize, data: &[u8]) {
        for (i, &b) in data.iter().enumerate() {
            let choices = self.maybe.entry(offset + i).or_default();
            if !choices.contains(&b) {
                choices.push(b);
            }
        }
    }

    /// `None` when `got` is what the range may read as; else the first differing offset.
    pub fn check(&self, offset: usize, got: &[u8]) -> Option<usize> {
        for (i, &b) in got.iter().enumerate() {
            let j = offset + i;
            if b != self.cur[j] && !self.maybe.get(&j).is_some_and(|c| c.contains(&b)) {
                return Some(j);
            }
        }
        None
    }
}

pub type Model = BTreeMap<String, FileModel>;

pub fn random_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}
