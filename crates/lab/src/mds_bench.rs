//! `ecstack bench mds`: metadata operations per second with the MDS's store in SQLite and in
//! PostgreSQL, side by side in one run (issue 43: PostgreSQL / SQLite ≥ 0.5 for each operation).
//!
//! For each store, a fresh [`LocalCluster`] (the real `ecstack mds`, no OSDs: these operations
//! touch metadata only) and one client of the library; `concurrency` tasks share `files` names and
//! run four phases, each timed whole: create (`mknod` of an empty regular file), stat (`lookup`),
//! rename (to a new name in the same directory), unlink. Every operation is one RPC and, but for
//! stat, one committed transaction at the MDS. The PostgreSQL database is one the caller made (it
//! must be empty: the MDS creates its tables).

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
}

impl MdsBenchConfig {
    pub fn new(exe: PathBuf, postgres_url: String) -> MdsBenchConfig {
        MdsBenchConfig {
            exe,
            files: 10_000,
            concurrency: 8,
            postgres_url,
            insecure: false,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.files == 0 {
            return Err(LabError::Config {
                field: "files",
                msg: "must be at least 1".into(),
            });
        }
        if self.concurrency == 0 || self.concurrency > 1024 {
            return Err(LabError::Config {
                field: "concurrency",
                msg: format!("{} is outside 1..=1024", self.concurrency),
            });
        }
        Ok(())
    }
}

/// One operation's figures.
#[derive(Debug, Clone, Serialize)]
pub struct OpFigures {
    pub op: &'static str,
    pub sqlite_ops_per_sec: f64,
    pub postgresql_ops_per_sec: f64,
    /// PostgreSQL / SQLite.
    pub ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct MdsBenchReport {
    pub files: u64,
    pub concurrency: usize,
    pub ops: Vec<OpFigures>,
}

impl MdsBenchReport {
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "Metadata ops/s, {} files, {} client tasks (one MDS, no OSDs)\n\n| op | SQLite ops/s | PostgreSQL ops/s | PostgreSQL / SQLite |\n|---|---:|---:|---:|\n",
            self.files, self.concurrency
        );
        for o in &self.ops {
            s += &format!(
                "| {} | {:.0} | {:.0} | {:.2} |\n",
                o.op, o.sqlite_ops_per_sec, o.postgresql_ops_per_sec, o.ratio
            );
        }
        s
    }
}

/// Runs the four phases against both stores; every process it started is stopped whatever happens.
pub fn run(cfg: &MdsBenchConfig, log: &dyn Fn(&str)) -> Result<MdsBenchReport> {
    cfg.validate()?;
    let rt = crate::codfs_bench::runtime()?;
    let mut per_store = Vec::new();
    for (name, store) in [
        ("SQLite", None),
        ("PostgreSQL", Some(cfg.postgres_url.clone())),
    ] {
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
        let mut cluster = LocalCluster::start(spec).map_err(client_error)?;
        let r = rt.block_on(phases(cfg, &cluster, log, name));
        let alive = cluster.check_alive().map_err(client_error);
        cluster.stop();
        per_store.push(r.and_then(|r| alive.map(|()| r))?);
    }
    let ops = OPS
        .iter()
        .enumerate()
        .map(|(i, op)| OpFigures {
            op,
            sqlite_ops_per_sec: per_store[0][i],
            postgresql_ops_per_sec: per_store[1][i],
            ratio: per_store[1][i] / per_store[0][i].max(1e-9),
        })
        .collect();
    Ok(MdsBenchReport {
        files: cfg.files,
        concurrency: cfg.concurrency,
        ops,
    })
}

/// Ops/s of each of [`OPS`] on the cluster's MDS.
async fn phases(
    cfg: &MdsBenchConfig,
    cluster: &LocalCluster,
    log: &dyn Fn(&str),
    store: &str,
) -> Result<Vec<f64>> {
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
    let mut out = Vec::new();
    for op in OPS {
        let start = Instant::now();
        let tasks: Vec<_> = (0..cfg.concurrency)
            .map(|t| {
                let client = client.clone();
                let (files, step) = (cfg.files, cfg.concurrency as u64);
                tokio::spawn(async move {
                    let mut i = t as u64;
                    while i < files {
                        let (a, b) = (format!("f{i}"), format!("g{i}"));
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
        let rate = cfg.files as f64 / start.elapsed().as_secs_f64().max(1e-9);
        log(&format!("{store}: {op}: {rate:.0} ops/s"));
        out.push(rate);
    }
    Ok(out)
}
