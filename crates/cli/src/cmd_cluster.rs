//! `ecstack cluster ...`: the CodFS cluster's commands. `init` and `cert` make a cluster's config
//! and certificates (the work is in `ecstack_rpc::init`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use ecstack_codes::{new_code, CodeKind};
use ecstack_rpc::init::{init_cluster, issue_certificate, InitOptions, DEFAULT_MDS_ADDR};
use ecstack_rpc::ClusterConfig;

use crate::util::{fmt_size, parse_size};

#[derive(Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    cmd: ClusterCmd,
}

#[derive(Subcommand)]
enum ClusterCmd {
    /// Create a cluster in DIR: its id, a certificate authority, one certificate per process, cluster.toml
    Init(InitArgs),
    /// Issue one more certificate from the cluster's CA (an extra OSD or client)
    Cert(CertArgs),
}

#[derive(Args)]
struct InitArgs {
    /// Directory of the new cluster (made if missing)
    dir: PathBuf,
    /// OSD certificates to make (osd-0 ... osd-N-1)
    #[arg(long, default_value_t = 8)]
    osds: u32,
    /// Client certificates to make (client, client-1, ...)
    #[arg(long, default_value_t = 1)]
    clients: u32,
    /// Data chunks per segment
    #[arg(short, default_value_t = 6)]
    k: u32,
    /// Parity chunks per segment
    #[arg(short, default_value_t = 2)]
    m: u32,
    /// Code family: rs-vand, rs-cauchy, xor (m = 1), raid6 (m = 2)
    #[arg(long, default_value = "rs-vand")]
    code: String,
    /// Segment size, 1M to 64M
    #[arg(long, default_value = "16M")]
    segment_size: String,
    /// Spread each segment's chunks over distinct values of this OSD label
    #[arg(long, value_parser = ["host", "rack"])]
    failure_domain: Option<String>,
    /// Address of the MDS (clients and OSDs connect here)
    #[arg(long, default_value = DEFAULT_MDS_ADDR)]
    mds_addr: String,
    /// Replace an existing cluster in DIR (deletes its config, certificates and MDS database)
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
struct CertArgs {
    /// Process name: osd-N, client-N, ... (a-z, 0-9, '-')
    name: String,
    /// The cluster's config
    #[arg(long)]
    config: PathBuf,
    /// Replace an existing certificate of that name
    #[arg(long)]
    force: bool,
}

pub fn run(a: ClusterArgs) -> Result<()> {
    match a.cmd {
        ClusterCmd::Init(a) => init(a),
        ClusterCmd::Cert(a) => cert(a),
    }
}

fn init(a: InitArgs) -> Result<()> {
    let kind = CodeKind::parse(&a.code).with_context(|| format!("--code {}", a.code))?;
    new_code(kind, a.k as usize, a.m as usize)
        .with_context(|| format!("--code {} -k {} -m {}", a.code, a.k, a.m))?;
    let segment_bytes = parse_size(&a.segment_size).context("--segment-size")?;
    let opts = InitOptions {
        osds: a.osds,
        clients: a.clients,
        code: kind.name().to_owned(),
        k: a.k,
        m: a.m,
        segment_bytes,
        failure_domain: a.failure_domain,
        mds_addr: a.mds_addr,
        force: a.force,
    };
    let config = init_cluster(&a.dir, &opts)?;
    let config_path = a.dir.join(ecstack_rpc::init::CONFIG_FILE);
    println!(
        "cluster {} in {}: {} {}+{}, {} segments, MDS at {}",
        config.cluster_id,
        a.dir.display(),
        config.code.family,
        config.code.k,
        config.code.m,
        fmt_size(config.segment_bytes),
        config.mds.addr
    );
    println!(
        "certificates for mds, {} OSDs and {} clients in {}",
        opts.osds,
        opts.clients,
        config.certs_dir().display()
    );
    println!(
        "next: ecstack mds --config {0} and ecstack osd --config {0} --name osd-0 --store DIR",
        config_path.display()
    );
    Ok(())
}

fn cert(a: CertArgs) -> Result<()> {
    let config = ClusterConfig::load(&a.config)?;
    let issued = issue_certificate(&config, &a.name, a.force)?;
    println!(
        "{}: certificate {} and key {}",
        issued.name,
        issued.cert.display(),
        issued.key.display()
    );
    Ok(())
}
