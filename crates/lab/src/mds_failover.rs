//! `ecstack bench failover`: how long metadata is unavailable when the active MDS dies (issue 43:
//! ≤ 10 s with the default settings, zero acknowledged metadata lost, over 20 kills).
//!
//! A [`LocalCluster`] of two real `ecstack mds` processes on one PostgreSQL database (`[mds]
//! addrs`; no OSDs: the load touches metadata only) and one client of the library making
//! directories in `/` without pause, recording each acknowledged one. Each round finds the active
//! MDS, SIGKILLs it, and times from the kill to the first successful metadata call (`statfs`,
//! polled every [`PROBE_EVERY`]) at the other one; then it lists `/` and counts the acknowledged
//! directories missing, and starts the killed MDS again (a standby now) for the next round.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ecstack_client::{Client, ClientOptions};
use ecstack_mds_proto::{Errno, MdsClient, MdsError};
use ecstack_rpc::Security;
use serde::Serialize;

use crate::codfs_bench::{client_error, ours_security};
use crate::codfs_local::{LocalCluster, LocalSpec};
use crate::{LabError, Result};

/// The root directory's inode.
const ROOT: u64 = 1;
/// How often the probe asks the standby after the kill.
pub const PROBE_EVERY: Duration = Duration::from_millis(5);
/// How long a round waits for an MDS to take over before it fails.
const TAKEOVER_MAX: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct FailoverBenchConfig {
    /// The `ecstack` binary the MDSs run from.
    pub exe: PathBuf,
    /// An empty PostgreSQL database (`postgresql://…`) the two MDSs share.
    pub postgres_url: String,
    /// Rounds (kills of the active MDS).
    pub kills: usize,
    /// Load between a takeover and the next kill.
    pub load_between: Duration,
    /// `[mds] lease_ms` (`None`: the default).
    pub lease_ms: Option<u64>,
    /// No TLS.
    pub insecure: bool,
}

impl FailoverBenchConfig {
    pub fn new(exe: PathBuf, postgres_url: String) -> FailoverBenchConfig {
        FailoverBenchConfig {
            exe,
            postgres_url,
            kills: 20,
            load_between: Duration::from_millis(500),
            lease_ms: None,
            insecure: false,
        }
    }
}

/// One kill.
#[derive(Debug, Clone, Serialize)]
pub struct KillFigures {
    /// The MDS killed (its address).
    pub killed: String,
    /// From the SIGKILL to the first successful call at the MDS that took over, ms.
    pub takeover_ms: f64,
    /// Directories the load had acknowledged when the round checked.
    pub acknowledged: usize,
    /// Of them, missing from `/`.
    pub lost: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct FailoverReport {
    pub lease_ms: u64,
    pub kills: Vec<KillFigures>,
    pub takeover_ms_min: f64,
    pub takeover_ms_median: f64,
    pub takeover_ms_max: f64,
    /// Acknowledged directories lost, over every round.
    pub lost: usize,
}

impl FailoverReport {
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "MDS failover, {} kills, lease {} ms: SIGKILL of the active MDS → first successful call at the standby\n\n| | ms |\n|---|---:|\n| min | {:.0} |\n| median | {:.0} |\n| max | {:.0} |\n\nacknowledged metadata lost: {}\n\n| kill | killed | takeover ms | acknowledged | lost |\n|---:|---|---:|---:|---:|\n",
            self.kills.len(),
            self.lease_ms,
            self.takeover_ms_min,
            self.takeover_ms_median,
            self.takeover_ms_max,
            self.lost
        );
        for (i, k) in self.kills.iter().enumerate() {
            s += &format!(
                "| {} | {} | {:.0} | {} | {} |\n",
                i + 1,
                k.killed,
                k.takeover_ms,
                k.acknowledged,
                k.lost
            );
        }
        s
    }
}

/// Which of the cluster's MDSs answers now (the others say they are standbys, or are dead).
pub async fn active_mds(cluster: &LocalCluster, security: &Security) -> Option<usize> {
    for (i, addr) in cluster.config().mds_addrs().iter().enumerate() {
        let Ok(c) = MdsClient::connect(addr, security) else {
            continue;
        };
        // A stopped MDS never answers.
        let answered = tokio::time::timeout(Duration::from_secs(1), c.stat_fs()).await;
        if matches!(answered, Ok(Ok(_))) {
            return Some(i);
        }
    }
    None
}

/// Waits until an MDS answers; its index.
pub async fn wait_active(
    cluster: &LocalCluster,
    security: &Security,
    max: Duration,
) -> Result<usize> {
    let start = Instant::now();
    loop {
        if let Some(i) = active_mds(cluster, security).await {
            return Ok(i);
        }
        if start.elapsed() > max {
            return Err(LabError::Run(format!(
                "no MDS of {:?} became active in {max:?}",
                cluster.config().mds_addrs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until MDS `i` answers as a standby (it runs and read the lease).
pub async fn wait_standby(cluster: &LocalCluster, i: usize, security: &Security) -> Result<()> {
    let addr = &cluster.config().mds_addrs()[i];
    let c = MdsClient::connect(addr, security).map_err(|e| LabError::Run(e.to_string()))?;
    let start = Instant::now();
    loop {
        match tokio::time::timeout(Duration::from_secs(1), c.stat_fs()).await {
            Ok(Err(MdsError::Unavailable(m))) if m.contains("the active MDS is") => return Ok(()),
            _ if start.elapsed() > TAKEOVER_MAX => {
                return Err(LabError::Run(format!(
                    "MDS {addr} did not come up as a standby"
                )))
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// SIGKILLs the active MDS; how long until the MDS `standby` answers a metadata call.
pub async fn kill_and_time(
    cluster: &mut LocalCluster,
    active: usize,
    standby: usize,
    security: &Security,
) -> Result<Duration> {
    let addr = cluster.config().mds_addrs()[standby].clone();
    let probe = MdsClient::connect(&addr, security).map_err(|e| LabError::Run(e.to_string()))?;
    // The probe's connection is made before the kill.
    let _ = probe.stat_fs().await;
    let killed = Instant::now();
    cluster.kill_mds_at(active);
    loop {
        if probe.stat_fs().await.is_ok() {
            return Ok(killed.elapsed());
        }
        if killed.elapsed() > TAKEOVER_MAX {
            return Err(LabError::Run(format!(
                "MDS {addr} did not take over in {TAKEOVER_MAX:?}"
            )));
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// A task making directories `d0`, `d1`, … in `/` until stopped; the acknowledged ones.
pub struct DirLoad {
    pub acknowledged: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<std::result::Result<(), String>>,
}

impl DirLoad {
    pub fn start(client: Client) -> DirLoad {
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (acked, stopped) = (acknowledged.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut i = 0u64;
            while !stopped.load(Ordering::Relaxed) {
                let name = format!("d{i}");
                match client.mkdir(ROOT, name.as_bytes(), 0o755, 0, 0).await {
                    Ok(_) => {}
                    // A retry after a reply the killed MDS committed but never sent.
                    Err(ecstack_client::ClientError::Mds(MdsError::Fs {
                        errno: Errno::Exist,
                        ..
                    })) => {}
                    Err(e) => return Err(format!("mkdir /{name}: {e}")),
                }
                acked.lock().unwrap_or_else(|p| p.into_inner()).push(name);
                i += 1;
            }
            Ok(())
        });
        DirLoad {
            acknowledged,
            stop,
            task,
        }
    }

    /// (acknowledged, of them missing from `/`) now.
    pub async fn check(&self, client: &Client) -> Result<(usize, usize)> {
        let acked = self
            .acknowledged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let listed: std::collections::HashSet<Vec<u8>> = client
            .read_dir_all(ROOT)
            .await
            .map_err(client_error)?
            .into_iter()
            .map(|e| e.name)
            .collect();
        let lost = acked
            .iter()
            .filter(|n| !listed.contains(n.as_bytes()))
            .count();
        Ok((acked.len(), lost))
    }

    pub async fn stop(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.task
            .await
            .map_err(|e| LabError::Run(e.to_string()))?
            .map_err(LabError::Run)
    }
}

/// Runs the rounds; every process it started is stopped whatever happens.
pub fn run(cfg: &FailoverBenchConfig, log: &dyn Fn(&str)) -> Result<FailoverReport> {
    if cfg.kills == 0 {
        return Err(LabError::Config {
            field: "kills",
            msg: "must be at least 1".into(),
        });
    }
    let rt = crate::codfs_bench::runtime()?;
    let temp = tempfile::Builder::new()
        .prefix("ecstack-bench-failover-")
        .tempdir()
        .map_err(|e| LabError::Run(format!("cannot make a temporary directory: {e}")))?;
    let mut spec = LocalSpec::new(cfg.exe.clone(), temp.path().join("cluster"), 0);
    spec.insecure = cfg.insecure;
    spec.mds_store = Some(cfg.postgres_url.clone());
    spec.mds_standbys = 1;
    spec.mds_lease_ms = cfg.lease_ms;
    log(&format!(
        "starting two MDSs on one PostgreSQL database in {}",
        temp.path().display()
    ));
    let mut cluster = LocalCluster::start(spec).map_err(client_error)?;
    let r = rt.block_on(rounds(cfg, &mut cluster, log));
    cluster.stop();
    r
}

async fn rounds(
    cfg: &FailoverBenchConfig,
    cluster: &mut LocalCluster,
    log: &dyn Fn(&str),
) -> Result<FailoverReport> {
    let security = ours_security(cluster)?;
    let client = Client::connect_with(cluster.config(), security.clone(), ClientOptions::default())
        .map_err(client_error)?;
    wait_active(cluster, &security, TAKEOVER_MAX).await?;
    let load = DirLoad::start(client.clone());
    let mut kills = Vec::new();
    for round in 0..cfg.kills {
        let active = wait_active(cluster, &security, TAKEOVER_MAX).await?;
        let standby = (active + 1) % cluster.mds_count();
        wait_standby(cluster, standby, &security).await?;
        tokio::time::sleep(cfg.load_between).await;
        let killed = cluster.config().mds_addrs()[active].clone();
        let took = kill_and_time(cluster, active, standby, &security).await?;
        // Load through the new active MDS, then the check.
        tokio::time::sleep(cfg.load_between).await;
        let (acknowledged, lost) = load.check(&client).await?;
        let k = KillFigures {
            killed,
            takeover_ms: took.as_secs_f64() * 1e3,
            acknowledged,
            lost,
        };
        log(&format!(
            "kill {}/{}: MDS {} killed, the standby answered after {:.0} ms; {} acknowledged, {} lost",
            round + 1,
            cfg.kills,
            k.killed,
            k.takeover_ms,
            k.acknowledged,
            k.lost
        ));
        kills.push(k);
        cluster.start_mds_at(active).map_err(client_error)?;
    }
    load.stop().await?;
    cluster.check_alive().map_err(client_error)?;
    let mut ms: Vec<f64> = kills.iter().map(|k| k.takeover_ms).collect();
    ms.sort_by(f64::total_cmp);
    Ok(FailoverReport {
        lease_ms: cluster.config().mds.lease_ms,
        takeover_ms_min: ms[0],
        takeover_ms_median: ms[ms.len() / 2],
        takeover_ms_max: ms[ms.len() - 1],
        lost: kills.iter().map(|k| k.lost).sum(),
        kills,
    })
}
