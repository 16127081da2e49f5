//! `ecstack bench mds`: metadata operations per second with the MDS's store in SQLite and in
//! PostgreSQL, side by side in one run (issue 43: PostgreSQL / SQLite ≥ 0.5 for each operation).
//!
//! For each store, a fresh [`LocalCluster`] (the real `ecstack mds`, no OSDs: these operations
//! touch metadata only) and one client of the library, both started first; `concurrency` tasks
//! share `files` names and run four phases, each timed whole: create (`mknod` of an empty regular
//! file), stat (`lookup`), rename (to a new name in the same directory), unlink. Every operation
//! is one RPC and, but for stat, one committed transaction at the MDS. The PostgreSQL database is
//! one the caller made (it must be empty: the MDS creates its tables).
//!
//! The two stores take turns phase by phase (SQLite's create, PostgreSQL's create, …; the other
//! one first in the next round), `rounds` times, so a load that comes and goes on the machine
//! falls on both alike; each operation's ratio is the median of its rounds' ratios.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ecstack_client::{Client, ClientOptions};
use ecstack_mds_proto::{FileKind, RenameFlags};
use serde::Serialize;

use crate::codfs_bench::{client_error, ours_security};
use crate::codfs_local::{LocalCluster, LocalSpec};
use crate::{LabError, Result};

/// The root directory's inode (FUSE's root id, the MDS's `ROOT_INO`).
pub(crate) const ROOT: u64 = 1;
/// The operations, in the order they run.
pub const OPS: [&str; 4] = ["create", "stat", "rename", "unlink"];

#[derive(Debug, Clone)]
pub struct MdsBenchConfig {
    /// The `ecstack` binary the MDS runs from.
    pub exe: PathBuf,
    /// Files per phase.
    pub files: u64,
    /// Client tasks issuing operations at once.
    pub concurrency: usize,
    /// An empty PostgreSQL database (`postgresql://…`).
    pub postgres_url: String,
    /// No TLS between client and MDS.
    pub insecure: bool,
    /// Rounds of the four phases on each store, taking turns.
    pub rounds: usize,
}

impl MdsBenchConfig {
    pub fn new(exe: PathBuf, postgres_url: String) -> MdsBenchConfig {
        MdsBenchConfig {
            exe,
            files: 10_000,
            concurrency: 8,
            postgres_url,
            insecure: false,
            rounds: 3,
        }
    }

    fn validate(&self) -> Result<()> {
        crate::count_within("files", self.files, 1..=u64::MAX)?;
        crate::count_within("concurrency", self.concurrency as u64, 1..=1024)?;
        crate::count_within("rounds", self.rounds as u64, 1..=100)?;
        Ok(())
    }
}

/// One operation's figures.
#[derive(Debug, Clone, Serialize)]
pub struct OpFigures {
    pub op: &'static str,
    /// Medians of the rounds.
    pub sqlite_ops_per_sec: f64,
    pub postgresql_ops_per_sec: f64,
    /// PostgreSQL / SQLite: the median of the rounds' ratios.
    pub ratio: f64,
    /// Each round's ratio.
    pub round_ratios: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MdsBenchReport {
    pub files: u64,
    pub concurrency: usize,
    pub rounds: usize,
    pub ops: Vec<OpFigures>,
}

impl MdsBenchReport {
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "Metadata ops/s, {} files, {} client tasks (one MDS per store, no OSDs), median of {} rounds taking turns\n\n| op | SQLite ops/s | PostgreSQL ops/s | PostgreSQL / SQLite | each round |\n|---|---:|---:|---:|---|\n",
            self.files, self.concurrency, self.rounds
        );
        for o in &self.ops {
            let rounds: Vec<String> = o.round_ratios.iter().map(|r| format!("{r:.2}")).collect();
            s += &format!(
                "| {} | {:.0} | {:.0} | {:.2} | {} |\n",
                o.op,
                o.sqlite_ops_per_sec,
                o.postgresql_ops_per_sec,
                o.ratio,
                rounds.join(", ")
            );
        }
        s
    }
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs the rounds of four phases against both stores; every process it started is stopped
/// whatever happens.
pub fn run(cfg: &MdsBenchConfig, log: &dyn Fn(&str)) -> Result<MdsBenchReport> {
    cfg.validate()?;
    let rt = crate::codfs_bench::runtime()?;
    let names = ["SQLite", "PostgreSQL"];
    let mut temps = Vec::new();
    let mut clusters: Vec<LocalCluster> = Vec::new();
    for (name, store) in names.iter().zip([None, Some(cfg.postgres_url.clone())]) {
        let temp = tempfile::Builder::new()
            .prefix("ecstack-bench-mds-")
            .tempdir()
            .map_err(|e| LabError::Run(format!("cannot make a temporary directory: {e}")))?;
        let mut spec = LocalSpec::new(cfg.exe.clone(), temp.path().join("cluster"), 0);
        spec.insecure = cfg.insecure;
        spec.mds_store = store;
        log(&format!(
            "{name}: starting an MDS in {}",
            temp.path().display()
        ));
        clusters.push(LocalCluster::start(spec).map_err(client_error)?);
        temps.push(temp);
    }
    // rates[store][op][round]
    let r = rt.block_on(async {
        let mut clients = Vec::new();
        for c in &clusters {
            clients.push(connect(c).await?);
        }
        let mut rates = vec![vec![Vec::new(); OPS.len()]; names.len()];
        for round in 0..cfg.rounds {
            for (o, op) in OPS.iter().enumerate() {
                let order = if (round + o) % 2 == 0 { [0, 1] } else { [1, 0] };
                for s in order {
                    let rate = phase(cfg, &clients[s], op, round).await?;
                    log(&format!(
                        "round {}: {}: {op}: {rate:.0} ops/s",
                        round + 1,
                        names[s]
                    ));
                    rates[s][o].push(rate);
                }
            }
        }
        Ok::<_, LabError>(rates)
    });
    let mut alive = Ok(());
    for c in &mut clusters {
        if alive.is_ok() {
            alive = c.check_alive().map_err(client_error);
        }
        c.stop();
    }
    let rates = r?;
    alive?;
    let ops = OPS
        .iter()
        .enumerate()
        .map(|(i, op)| {
            let round_ratios: Vec<f64> = rates[0][i]
                .iter()
                .zip(&rates[1][i])
                .map(|(s, p)| p / s.max(1e-9))
                .collect();
            OpFigures {
                op,
                sqlite_ops_per_sec: median(rates[0][i].clone()),
                postgresql_ops_per_sec: median(rates[1][i].clone()),
                ratio: median(round_ratios.clone()),
                round_ratios,
            }
        })
        .collect();
    Ok(MdsBenchReport {
        files: cfg.files,
        concurrency: cfg.concurrency,
        rounds: cfg.rounds,
        ops,
    })
}

/// A client of the cluster's MDS, once it answers.
async fn connect(cluster: &LocalCluster) -> Result<Arc<Client>> {
    let client = Arc::new(
        Client::connect_with(
            cluster.config(),
            ours_security(cluster)?,
            ClientOptions::default(),
        )
        .map_err(client_error)?,
    );
    // The MDS answers (no OSDs needed for metadata).
    client
        .wait_for_osds(0, Duration::from_secs(30))
        .await
        .map_err(client_error)?;
    Ok(client)
}

/// Ops/s of `op` over `files` names of round `round` (the names of the phases before it in the
/// round exist: stat, rename and unlink follow create).
async fn phase(
    cfg: &MdsBenchConfig,
    client: &Arc<Client>,
    op: &'static str,
    round: usize,
) -> Result<f64> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..cfg.concurrency)
        .map(|t| {
            let client = client.clone();
            let (files, step) = (cfg.files, cfg.concurrency as u64);
            tokio::spawn(async move {
                let mut i = t as u64;
                while i < files {
                    let (a, b) = (format!("r{round}f{i}"), format!("r{round}g{i}"));
                    match op {
                        "create" => client
                            .mknod(ROOT, a.as_bytes(), FileKind::File, 0o644, 0, 0, 0, true)
                            .await
                            .map(drop),
                        "stat" => client.lookup(ROOT, a.as_bytes()).await.map(drop),
                        "rename" => {
                            client
                                .rename(
                                    ROOT,
                                    a.as_bytes(),
                                    ROOT,
                                    b.as_bytes(),
                                    RenameFlags::default(),
                                )
                                .await
                        }
                        _ => client.unlink(ROOT, b.as_bytes()).await,
                    }
                    .map_err(|e| format!("{op} of file {i}: {e}"))?;
                    i += step;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for t in tasks {
        t.await
            .map_err(|e| LabError::Run(e.to_string()))?
            .map_err(LabError::Run)?;
    }
    Ok(cfg.files as f64 / start.elapsed().as_secs_f64().max(1e-9))
}
