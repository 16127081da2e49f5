//! `ecstack mds`: the CodFS metadata server (crates/cluster/mds). Serves the MDS protocol over
//! mutual TLS (or loudly insecure), runs the failure detector, and serves Prometheus metrics on a
//! loopback port. Prints its bound addresses on stdout, one line each, so scripts and tests that
//! start it on port 0 can find it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use ecstack_mds::engine::{MdsCore, MdsSettings, SystemClock};
use ecstack_mds::service::MdsHandle;
use ecstack_mds::standby::{self, StandbyOptions};
use ecstack_mds::store::open_store;
use ecstack_rpc::{ClusterConfig, MdsStore, Security};

use crate::util::shutdown_signal;
use tokio::net::TcpListener;

#[derive(Args)]
pub struct MdsArgs {
    /// The cluster's config file (cluster.toml, made by `ecstack cluster init`)
    #[arg(long)]
    config: PathBuf,
    /// This process's name: its certificate is <certs>/<name>.pem and .key
    #[arg(long, default_value = "mds")]
    name: String,
    /// Plain HTTP/2 without TLS or client certificates (loopback experiments only)
    #[arg(long)]
    insecure: bool,
    /// Address of the MDS service (default: the config's [mds] addr, the first of [mds] addrs;
    /// port 0 picks one). A standby gives its own, one of [mds] addrs
    #[arg(long)]
    addr: Option<String>,
    /// Loopback address of the Prometheus metrics endpoint (default: the config's [mds] metrics_addr)
    #[arg(long)]
    metrics_addr: Option<String>,
}

pub fn run(a: MdsArgs) -> Result<()> {
    crate::cmd_nbd::init_logging("info");
    let config = ClusterConfig::load(&a.config)?;
    let security = if a.insecure {
        eprintln!(
            "ecstack mds: WARNING: --insecure: no TLS, no client certificates; anyone who can reach the port can change the cluster's metadata"
        );
        Security::Insecure
    } else {
        Security::load(&config.certs_dir(), &a.name)
            .with_context(|| format!("loading the certificate of {:?}", a.name))?
    };
    let settings = MdsSettings::from_config(&config);
    // With [mds] addrs on PostgreSQL, this MDS is one of an active and its standbys: the lease
    // loop (ecstack_mds::standby) opens the core when it takes the store's lease.
    let shared = match config.mds_store() {
        MdsStore::PostgreSql(url) if !config.mds.addrs.is_empty() => Some(url),
        _ => None,
    };
    let (handle, store_name) = match &shared {
        Some(url) => (
            MdsHandle::standby(Arc::new(SystemClock)),
            format!(
                "{} (shared by [mds] addrs; lease {} ms)",
                ecstack_mds::store_pg::redact_url(url),
                config.mds.lease_ms
            ),
        ),
        None => {
            let (store, store_name) = open_store(&config.mds_store())?;
            let core = MdsCore::open(store, settings.clone(), Arc::new(SystemClock))?;
            (MdsHandle::new(core), store_name)
        }
    };
    let addr = a.addr.unwrap_or_else(|| config.mds.addr.clone());
    if shared.is_some() && !config.mds.addrs.contains(&addr) {
        anyhow::bail!(
            "--addr {addr} is not one of [mds] addrs {:?}: clients and OSDs would never reach this MDS",
            config.mds.addrs
        );
    }
    let metrics_addr = a
        .metrics_addr
        .unwrap_or_else(|| config.mds.metrics_addr.clone());
    let detector_every = Duration::from_millis((config.mds.heartbeat_ms / 2).max(1));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let listener = TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot bind the MDS address {addr}"))?;
        let h = handle.clone();
        let (metrics, _metrics_task) =
            ecstack_rpc::metrics::serve_metrics(&metrics_addr, move || {
                let h = h.clone();
                async move { h.metrics_text().await }
            })
            .await
            .with_context(|| format!("cannot serve metrics on {metrics_addr}"))?;
        // A closed stdout (a parent that stopped reading) must not stop the MDS.
        let say = |line: String| {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}").and_then(|_| out.flush());
        };
        let bound = listener.local_addr()?;
        say(format!("ecstack mds: listening on {bound}"));
        say(format!("ecstack mds: metrics on http://{metrics}/metrics"));
        say(format!("ecstack mds: store {store_name}"));
        let stop = Arc::new(AtomicBool::new(false));
        let lease_loop = shared.map(|url| {
            let opts = StandbyOptions {
                url,
                holder: format!("{addr} (pid {})", std::process::id()),
                lease_ms: config.mds.lease_ms,
                settings,
            };
            standby::spawn(handle.clone(), opts, stop.clone())
        });
        handle.spawn_failure_detector(detector_every);
        let served = handle.serve(listener, &security, shutdown_signal()).await;
        stop.store(true, Ordering::Relaxed);
        if let Some(t) = lease_loop {
            // Gives the lease up, so a standby takes over at once.
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        served?;
        eprintln!("ecstack mds: stopped");
        Ok(())
    })
}
