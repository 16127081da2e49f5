//! `ecstack osd`: a CodFS object storage daemon (crates/cluster/osd). Opens (and locks) its chunk
//! store, binds its service (port 0: any free port), registers with the MDS under `--name` with the
//! address it actually bound, heartbeats, runs recovery and delete tasks, and serves Prometheus
//! metrics on a loopback port. Prints its bound addresses on stdout, one line each, so scripts and
//! tests that start it on port 0 can find them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use ecstack_osd::chunk_store::FileStoreOptions;
use ecstack_osd::daemon::{Daemon, DaemonConfig, StoreDevice};
use ecstack_osd::device_store::DeviceStoreOptions;
use ecstack_osd::service::BlockConfig;
use ecstack_rpc::{ClusterConfig, Security};

use crate::util::shutdown_signal;

#[derive(Args)]
pub struct OsdArgs {
    /// The cluster's config file (cluster.toml, made by `ecstack cluster init`)
    #[arg(long)]
    config: PathBuf,
    /// Directory of this OSD's chunk store (created if missing; one OSD per store)
    #[arg(
        long,
        required_unless_present = "store_device",
        conflicts_with = "store_device"
    )]
    store: Option<PathBuf>,
    /// Keep the chunks on one block device instead, with the store's own extent allocator: a
    /// device spec (docs/devices.md), e.g. throttled:profile=eplog-hdd:file:osd3.img?size=8G.
    /// A blank device gets a new store; one holding other data is refused without --force
    #[arg(long, value_name = "SPEC")]
    store_device: Option<String>,
    /// With --store-device: make a new store on a device that holds other data (overwriting it)
    #[arg(long, requires = "store_device")]
    force: bool,
    /// This OSD's name (osd-0, osd-1, ...): the MDS keeps its id for the name across restarts, and
    /// its certificate is <certs>/<name>.pem and .key
    #[arg(long)]
    name: String,
    /// Address of the OSD service (port 0 picks a free one)
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: String,
    /// Loopback address of the Prometheus metrics endpoint (port 0 picks a free one)
    #[arg(long, default_value = "127.0.0.1:0")]
    metrics_addr: String,
    /// A failure-domain label, KEY=VALUE (host=a, rack=r1); repeatable
    #[arg(long = "label")]
    labels: Vec<String>,
    /// Plain HTTP/2 without TLS or client certificates (loopback experiments only)
    #[arg(long)]
    insecure: bool,
    /// Worker threads of the OSD's async runtime (default: one per core). Chunk-file reads and
    /// writes run on blocking threads beside them. Several OSDs sharing one machine's cores (a
    /// local cluster, `bench cluster`) spend less on cross-thread wake-ups with fewer each
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Write whole chunks with O_DIRECT (true) or through the page cache (false); default: the
    /// config's [osd] direct_io (true)
    #[arg(long, value_name = "BOOL")]
    direct_io: Option<bool>,
    /// Admission control of robust files' block streams (PutBlocks, GetBlocks): admit a new
    /// stream only if every admitted one keeps at least --admission-floor of the store's measured
    /// throughput, first come first admitted; a refused client goes to another OSD, and a
    /// high-priority stream may preempt a normal one (docs/robustore.md "Admission control on
    /// OSDs"). false: admit every stream. Default: the config's [osd] admission (true)
    #[arg(long, value_name = "BOOL")]
    admission: Option<bool>,
    /// The throughput each admitted block stream must keep, per second (a size: 4M = 4 MiB/s).
    /// Default: the config's [osd] admission_floor_bytes_per_s (4 MiB/s)
    #[arg(long, value_name = "SIZE", value_parser = parse_floor)]
    admission_floor: Option<u64>,
    /// Worker threads that read and write robust files' blocks (the OSD's block I/O queue: a
    /// dropped stream's queued reads are taken back from it). Default: the config's [osd]
    /// block_io_threads (4)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    block_io_threads: Option<u32>,
}

fn parse_floor(s: &str) -> Result<u64, String> {
    match ecstack_base::parse_size(s)? {
        0 => Err("must be positive".into()),
        n => Ok(n),
    }
}

fn parse_labels(labels: &[String]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for l in labels {
        let Some((k, v)) = l.split_once('=') else {
            bail!("--label {l:?}: expected KEY=VALUE, e.g. host=a");
        };
        if k.is_empty() || v.is_empty() {
            bail!("--label {l:?}: key and value must not be empty");
        }
        if out.insert(k.to_string(), v.to_string()).is_some() {
            bail!("--label {k}: given twice");
        }
    }
    Ok(out)
}

pub fn run(a: OsdArgs) -> Result<()> {
    crate::cmd_nbd::init_logging("info");
    if let Some(why) = a
        .store_device
        .as_deref()
        .and_then(ecstack_osd::device_store::refuse_virtual_time)
    {
        bail!("{why}");
    }
    let config = ClusterConfig::load(&a.config)?;
    let labels = parse_labels(&a.labels)?;
    let security = if a.insecure {
        eprintln!(
            "ecstack osd: WARNING: --insecure: no TLS, no client certificates; anyone who can reach the port can read and overwrite this OSD's chunks"
        );
        Security::Insecure
    } else {
        Security::load(&config.certs_dir(), &a.name)
            .with_context(|| format!("loading the certificate of {:?}", a.name))?
    };
    let store_device = a.store_device.clone().map(|spec| StoreDevice {
        spec,
        options: DeviceStoreOptions {
            force: a.force,
            ..Default::default()
        },
    });
    let store_line = match (&a.store, &a.store_device) {
        (_, Some(spec)) => format!("device {spec}"),
        (Some(dir), None) => dir.display().to_string(),
        (None, None) => bail!("give --store DIR or --store-device SPEC"),
    };
    let cfg = DaemonConfig {
        name: a.name.clone(),
        addr: a.addr.clone(),
        labels,
        store: a.store.clone().unwrap_or_default(),
        store_device,
        store_options: FileStoreOptions {
            direct: a.direct_io.unwrap_or(config.osd.direct_io),
        },
        mds_addr: config.mds_addrs().join(","),
        security,
        recovery_bytes_per_sec: config.mds.recovery_bytes_per_sec,
        update: config.update.clone(),
        blocks: BlockConfig::from_config(&ecstack_rpc::OsdConfig {
            admission: a.admission.unwrap_or(config.osd.admission),
            admission_floor_bytes_per_s: a
                .admission_floor
                .unwrap_or(config.osd.admission_floor_bytes_per_s),
            block_io_threads: a.block_io_threads.unwrap_or(config.osd.block_io_threads),
            ..config.osd.clone()
        }),
        inventory_period: std::time::Duration::from_millis(config.osd.inventory_period_ms),
    };
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = a.threads {
        rt.worker_threads(n as usize);
    }
    let rt = rt
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let daemon = Daemon::start(&cfg).await?;
        let osd = daemon.osd.clone();
        let (metrics_addr, _metrics) =
            ecstack_rpc::metrics::serve_metrics(&a.metrics_addr, move || {
                let osd = osd.clone();
                async move { osd.metrics_text() }
            })
            .await
            .with_context(|| format!("cannot serve metrics on {}", a.metrics_addr))?;
        println!(
            "ecstack osd: {} (osd {}) listening on {}",
            cfg.name, daemon.osd_id, daemon.addr
        );
        println!("ecstack osd: metrics on http://{metrics_addr}/metrics");
        println!("ecstack osd: store {store_line}");
        daemon.run(shutdown_signal()).await?;
        eprintln!("ecstack osd: stopped");
        Ok(())
    })
}
