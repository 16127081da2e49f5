//! `ecstack cluster ...`: the CodFS cluster's commands. `init` and `cert` make a cluster's config
//! and certificates (the work is in `ecstack_rpc::init`); the client commands (put, get, update, rm,
//! ls, stat, status, osd out) and `cluster up`, a local cluster of child processes, are arguments
//! only: the work is in `ecstack_client`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use ecstack_client::robust::{blocks_per_osd, RobustOptions};
use ecstack_client::{Client, ClientOptions, PutOptions, ReadPath, UpdateScheme};
use ecstack_codes::{new_code, CodeKind};
use ecstack_lab::codfs_local::{LocalCluster, LocalSpec};
use ecstack_mds::backup;
use ecstack_mds_proto::{ChunkState, ClusterStatus, FileInfo, OsdState, RobustCode, NO_OSD};
use ecstack_rpc::init::{init_cluster, InitOptions, DEFAULT_MDS_ADDR};
use ecstack_rpc::{ClusterConfig, MdsStore};
use serde_json::json;

use crate::util::{fmt_size, parse_size, print_json};

#[derive(Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    cmd: ClusterCmd,
}

/// How a client finds and authenticates to its cluster.
#[derive(Args, Clone)]
struct Conn {
    /// The cluster's config (default: $ECSTACK_CLUSTER, a file or a directory holding cluster.toml,
    /// else ./ecstack-cluster/cluster.toml)
    #[arg(long)]
    config: Option<PathBuf>,
    /// Certificate to authenticate with (certs/NAME.pem in the cluster's directory; default:
    /// `admin` for `osd out`, else `client`)
    #[arg(long)]
    name: Option<String>,
    /// Plain HTTP/2 without TLS (loopback experiments only; the daemons must run --insecure too)
    #[arg(long)]
    insecure: bool,
}

#[derive(Subcommand)]
enum ClusterCmd {
    /// Create a cluster in DIR: its id, a certificate authority, one certificate per process, cluster.toml
    Init(InitArgs),
    /// Issue one more certificate from the cluster's CA (an extra OSD, client or admin), or
    /// reissue one (--force) made before certificates carried roles
    Cert(CertArgs),
    /// Store a local file in the cluster as PATH (replaces PATH when it completes)
    Put {
        local: PathBuf,
        path: String,
        /// The file's update scheme: fo, fl, codfs-pl or plr (default: the scheme of the file
        /// PATH replaces, else the cluster's [update] scheme). A file keeps its scheme: another
        /// one for an existing PATH is refused
        #[arg(long, value_parser = parse_scheme_arg)]
        update_scheme: Option<UpdateScheme>,
        /// How the file is stored: "segments" (CodFS: erasure-coded segments through primary
        /// OSDs) or "robust" (RobuSTore: rateless-coded blocks written until N are durable on
        /// --disks OSDs, read all-then-cancel; docs/robustore.md "On the cluster")
        #[arg(long, default_value = "segments", value_parser = ["segments", "robust"])]
        mode: String,
        /// Robust mode: the rateless code, raptorq or lt (C = 1, δ = 0.5)
        #[arg(long, default_value = "raptorq")]
        code: String,
        /// Robust mode: bytes per coded block (RaptorQ: a multiple of 32)
        #[arg(long, default_value = "1M", value_parser = parse_size_arg)]
        block_size: u64,
        /// Robust mode: redundancy D, N = (1 + D)·K blocks stored (default: (1 + ε)·max_i(B_ir /
        /// B_iw) − 1 over the chosen OSDs' measured rates, at least 0.2)
        #[arg(long)]
        redundancy: Option<f64>,
        /// Robust mode: H, the OSDs written to (default: the 8 best by bandwidth, load and free
        /// space, or all that are up if fewer)
        #[arg(long)]
        disks: Option<usize>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Read PATH (or a byte range of it) into LOCAL, or to stdout with `-` or no LOCAL
    Get {
        path: String,
        local: Option<String>,
        /// First byte to read
        #[arg(long, default_value = "0", value_parser = parse_size_arg)]
        offset: u64,
        /// Bytes to read (default: to the end of the file)
        #[arg(long, value_parser = parse_size_arg)]
        length: Option<u64>,
        /// Where the bytes come from: "direct" (straight from the data chunks' holders at the
        /// versions the primary names; a degraded segment is still read through its primary) or
        /// "primary" (through each segment's primary, as CodFS reads: two hops per byte)
        #[arg(long, default_value = "direct")]
        read_path: ReadPath,
        #[command(flatten)]
        conn: Conn,
    },
    /// Overwrite a byte range inside an existing file (an FO update at each segment's primary OSD)
    Update {
        path: String,
        /// First byte to overwrite
        #[arg(long, value_parser = parse_size_arg)]
        offset: u64,
        /// The new bytes, from a local file
        #[arg(long, conflicts_with = "data", required_unless_present = "data")]
        file: Option<PathBuf>,
        /// The new bytes, as a string
        #[arg(long)]
        data: Option<String>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Remove a file
    Rm {
        path: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// List files (whose path starts with PREFIX)
    Ls {
        prefix: Option<String>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// A file's size and the layout of its segments (primary OSD, chunk holders and states)
    Stat {
        path: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Mount the cluster as a POSIX file system at MOUNTPOINT (FUSE, close-to-open consistency);
    /// serves until unmounted (`fusermount3 -u MOUNTPOINT`, `umount`) or SIGTERM / SIGINT
    Mount {
        mountpoint: PathBuf,
        /// The segment cache: an LRU of whole segments in which writes are coalesced until close
        /// or fsync (0: off; reads ask the OSDs for their bytes, writes inside a file are updates
        /// before they return, only new bytes past its end wait for close or fsync)
        #[arg(long, default_value = "256M", value_parser = parse_size_arg)]
        cache_size: u64,
        /// Seconds the kernel keeps attributes and directory entries (0: ask the MDS at every
        /// stat and lookup); an open always revalidates at the MDS
        #[arg(long, default_value_t = 1.0)]
        attr_timeout: f64,
        /// Loopback address of the Prometheus metrics endpoint (the segment cache's counters;
        /// port 0 picks a free one, printed at mount)
        #[arg(long, default_value = "127.0.0.1:0")]
        metrics_addr: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// OSDs up/down/out, segments healthy/degraded/recovering/lost, recovery progress
    Status {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// OSD administration
    Osd {
        #[command(subcommand)]
        cmd: OsdCmd,
    },
    /// Back the metadata up into FILE while the cluster runs: a consistent copy of a SQLite
    /// store streamed by the MDS (admin certificate), or `pg_dump` of a PostgreSQL store
    Backup {
        file: PathBuf,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Replace the metadata by the backup FILE, with the MDS stopped; then start the MDS (the OSDs
    /// need no restart: new ids wait until each reported the largest it holds, and the chunks of
    /// files written after the backup are deleted after [mds] orphan_grace_ms)
    Restore {
        file: PathBuf,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Start an MDS and N OSDs on 127.0.0.1 as child processes (a new cluster in DIR unless one is
    /// there); Ctrl-C stops them all
    Up(UpArgs),
}

#[derive(Subcommand)]
enum OsdCmd {
    /// Declare an OSD (id or name) out: its chunks are rebuilt on other OSDs
    Out {
        osd: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Conn,
    },
}

#[derive(Args)]
struct UpArgs {
    /// Number of OSDs
    #[arg(long, default_value_t = 8)]
    osds: usize,
    /// The cluster's directory (config, certificates, MDS database, OSD stores, logs), or its
    /// cluster.toml: what clients then pass as --config
    #[arg(long = "config", alias = "dir", default_value = "ecstack-cluster")]
    dir: PathBuf,
    /// Data chunks per segment (a new cluster only)
    #[arg(short = 'k', long = "k", default_value_t = 6)]
    k: u32,
    /// Parity chunks per segment (a new cluster only)
    #[arg(short = 'm', long = "m", default_value_t = 2)]
    m: u32,
    /// Code family (a new cluster only): rs-vand, rs-cauchy, xor (m = 1), raid6 (m = 2), rdp (m = 2)
    /// [default: by m: xor for 1, raid6 for 2, rs-cauchy for 3 or more]
    #[arg(long = "code", alias = "family")]
    family: Option<String>,
    /// Segment size (a new cluster only), 1M-64M, a multiple of k
    #[arg(long, default_value = DEFAULT_SEGMENT_SIZE, value_parser = parse_size_arg)]
    segment_size: u64,
    /// Run the daemons without TLS (loopback experiments only)
    #[arg(long)]
    insecure: bool,
    /// The update scheme of files put without one (a new cluster only; written to cluster.toml
    /// as [update] scheme): fo, fl, codfs-pl or plr [default: fo]
    #[arg(long, value_parser = parse_scheme_arg)]
    update_scheme: Option<UpdateScheme>,
}

/// The segment size of a new cluster, `cluster up` and `cluster init` alike: 12 MiB, a multiple of
/// the default k = 6 (CodFS's §5 runs use 16 MiB with k = 4).
const DEFAULT_SEGMENT_SIZE: &str = "12M";

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
    #[arg(short, long, default_value_t = 6)]
    k: u32,
    /// Parity chunks per segment
    #[arg(short, long, default_value_t = 2)]
    m: u32,
    /// Code family: rs-vand, rs-cauchy, xor (m = 1), raid6 (m = 2), rdp (m = 2, k ≤ p − 1; chunks a
    /// multiple of p − 1) [default: by m: xor for 1, raid6 for 2, rs-cauchy for 3 or more]
    #[arg(long)]
    code: Option<String>,
    /// Segment size, 1M-64M, a multiple of k
    #[arg(long, default_value = DEFAULT_SEGMENT_SIZE)]
    segment_size: String,
    /// Spread each segment's chunks over distinct values of this OSD label
    #[arg(long, value_parser = ["host", "rack"])]
    failure_domain: Option<String>,
    /// Address of the MDS (clients and OSDs connect here)
    #[arg(long, default_value = DEFAULT_MDS_ADDR)]
    mds_addr: String,
    /// The update scheme of files put without one (written to cluster.toml as [update] scheme):
    /// fo, fl, codfs-pl or plr
    #[arg(long, default_value = "fo", value_parser = parse_scheme_arg)]
    update_scheme: UpdateScheme,
    /// Replace an existing cluster in DIR (deletes its config, certificates and MDS database)
    #[arg(long)]
    force: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CertArgs {
    /// Process name: osd-N, client-N, admin-N, ... (a-z, 0-9, '-')
    name: String,
    /// What the certificate may call: mds, osd, client or admin (default: the one its name
    /// implies: mds, osd-*, client*, admin*)
    #[arg(long)]
    role: Option<ecstack_rpc::Role>,
    /// The cluster's config
    #[arg(long)]
    config: PathBuf,
    /// Replace an existing certificate of that name
    #[arg(long)]
    force: bool,
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    ecstack_base::parse_size(s)
}

/// `fo`, `fl`, `codfs-pl`, `plr`; a bare `pl` is refused with one line naming `codfs-pl`.
fn parse_scheme_arg(s: &str) -> Result<UpdateScheme, String> {
    s.parse()
}

/// The config path: `--config`, else $ECSTACK_CLUSTER, else ./ecstack-cluster/cluster.toml; a
/// directory means its cluster.toml.
fn config_path(conn: &Conn) -> PathBuf {
    let p = conn
        .config
        .clone()
        .or_else(|| std::env::var_os("ECSTACK_CLUSTER").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("ecstack-cluster"));
    if p.is_dir() {
        p.join("cluster.toml")
    } else {
        p
    }
}

fn connect(conn: &Conn) -> Result<Client> {
    connect_with(conn, ClientOptions::default())
}

/// The certificate of an administrative command (`osd out`): `--name`, else `admin`.
fn connect_admin(conn: &Conn) -> Result<Client> {
    let conn = Conn {
        name: Some(conn.name.clone().unwrap_or_else(|| "admin".to_owned())),
        ..conn.clone()
    };
    connect(&conn)
}

fn connect_with(conn: &Conn, options: ClientOptions) -> Result<Client> {
    if conn.insecure {
        eprintln!(
            "ecstack: WARNING: --insecure: no TLS, no authentication (loopback experiments only)"
        );
    }
    let path = config_path(conn);
    if conn.config.is_none() && !path.exists() {
        anyhow::bail!(
            "no cluster config at {} (the default without --config or $ECSTACK_CLUSTER): pass --config FILE or set ECSTACK_CLUSTER to the cluster.toml (or its directory) that `cluster up` or `cluster init` made",
            path.display()
        );
    }
    Ok(Client::from_config_file_with(
        &path,
        conn.name.as_deref().unwrap_or("client"),
        conn.insecure,
        options,
    )?)
}

/// `cluster get`: `path` (or its range) to stdout (`None` or `-`) or into a new file, synced.
async fn get_to(
    client: &Client,
    path: &str,
    local: Option<&str>,
    offset: u64,
    length: Option<u64>,
) -> Result<u64> {
    match local {
        None | Some("-") => {
            use std::os::fd::AsFd;
            let fd = std::io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .context("cannot write to stdout")?;
            let mut out = tokio::fs::File::from_std(std::fs::File::from(fd));
            Ok(client.get(path, offset, length, &mut out).await?)
        }
        Some(file) => {
            let mut out = tokio::fs::File::create(file)
                .await
                .with_context(|| format!("cannot create {file}"))?;
            let n = client.get(path, offset, length, &mut out).await?;
            out.sync_all()
                .await
                .with_context(|| format!("cannot write {file}"))?;
            Ok(n)
        }
    }
}

/// A put or get with a progress bar on stderr when it is a terminal: the client counts the bytes
/// (put: segments durable; get: bytes delivered) and a task draws them twice a second.
struct Transfer {
    client: Client,
    bar: Option<(indicatif::ProgressBar, tokio::task::JoinHandle<()>)>,
}

impl Transfer {
    fn start(conn: &Conn, options: ClientOptions) -> Result<Transfer> {
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return Ok(Transfer {
                client: connect_with(conn, options)?,
                bar: None,
            });
        }
        let counter = Arc::new(AtomicU64::new(0));
        let options = ClientOptions {
            progress: Some(counter.clone()),
            ..options
        };
        let client = connect_with(conn, options)?;
        let bar = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec}, eta {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        let b = bar.clone();
        let task = tokio::spawn(async move {
            loop {
                b.set_position(counter.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Ok(Transfer {
            client,
            bar: Some((bar, task)),
        })
    }

    fn set_total(&self, what: &str, bytes: u64) {
        if let Some((bar, _)) = &self.bar {
            bar.set_message(what.to_owned());
            bar.set_length(bytes);
        }
    }

    fn finish(self) {
        if let Some((bar, task)) = self.bar {
            task.abort();
            bar.finish_and_clear();
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

pub fn run(a: ClusterArgs) -> Result<()> {
    if let ClusterCmd::Mount {
        mountpoint,
        cache_size,
        attr_timeout,
        metrics_addr,
        conn,
    } = &a.cmd
    {
        if !(attr_timeout.is_finite() && (0.0..=3600.0).contains(attr_timeout)) {
            anyhow::bail!("--attr-timeout {attr_timeout}: give seconds from 0 to 3600");
        }
        // The mount runs its own runtime and blocks this thread until it is unmounted; its log
        // lines (a failed cluster call, a background segment write that failed, the unmount) go
        // to stderr.
        crate::cmd_nbd::init_logging("info");
        let config = config_path(conn);
        if conn.config.is_none() && !config.exists() {
            anyhow::bail!(
                "no cluster config at {} (the default without --config or $ECSTACK_CLUSTER): pass --config FILE or set ECSTACK_CLUSTER",
                config.display()
            );
        }
        ecstack_mount::run(&ecstack_mount::MountSpec {
            mountpoint: mountpoint.clone(),
            config,
            name: conn.name.clone().unwrap_or_else(|| "client".to_owned()),
            insecure: conn.insecure,
            cache_bytes: *cache_size,
            attr_timeout: std::time::Duration::from_secs_f64(*attr_timeout),
            metrics_addr: metrics_addr.clone(),
        })?;
        return Ok(());
    }
    let rt = runtime()?;
    rt.block_on(run_async(a))
}

async fn run_async(a: ClusterArgs) -> Result<()> {
    match a.cmd {
        ClusterCmd::Put {
            local,
            path,
            mode,
            code,
            block_size,
            redundancy,
            disks,
            json,
            conn,
            ..
        } if mode == "robust" => {
            let code = RobustCode::parse(&code).map_err(anyhow::Error::msg)?;
            let block_bytes = u32::try_from(block_size)
                .map_err(|_| anyhow::anyhow!("--block-size {block_size} is too large"))?;
            let data = std::fs::read(&local)
                .with_context(|| format!("cannot read {}", local.display()))?;
            let client = connect(&conn)?;
            let opts = RobustOptions {
                code,
                block_bytes,
                redundancy,
                disks,
                ..RobustOptions::default()
            };
            let report = client.put_robust(&path, data.into(), &opts).await?;
            if json {
                print_json(
                    &json!({"path": path, "local": local, "mode": "robust", "code": code.name(), "report": report}),
                )?;
            } else {
                println!(
                    "stored {} as {path} ({}, robust: {code}, D = {:.2}, {} blocks on {} OSDs, {} refused streams moved)",
                    local.display(),
                    fmt_size(report.bytes),
                    report.redundancy,
                    report.blocks,
                    report.per_osd.len(),
                    report.refused
                );
            }
        }
        ClusterCmd::Put {
            local,
            path,
            update_scheme,
            json,
            conn,
            ..
        } => {
            let t = Transfer::start(&conn, ClientOptions::default())?;
            if let Ok(m) = std::fs::metadata(&local) {
                t.set_total("put", m.len());
            }
            let client = t.client.clone();
            let options = PutOptions {
                scheme: update_scheme,
                ..PutOptions::default()
            };
            let size = client.put_file_with(&path, &local, options).await;
            t.finish();
            let size = size?;
            let info = client.stat(&path).await.ok();
            let warning = info.as_ref().and_then(redundancy_warning);
            if let Some(w) = &warning {
                eprintln!("ecstack: warning: {w}");
            }
            if json {
                print_json(&json!({
                    "path": path, "local": local, "bytes": size,
                    "segments": info.as_ref().map(|i| i.segments.len()),
                    "update_scheme": info.as_ref().map(|i| i.scheme.name()),
                    "full_redundancy": warning.is_none(),
                }))?;
            } else {
                let scheme = info
                    .as_ref()
                    .map(|i| format!(", update scheme {}", i.scheme))
                    .unwrap_or_default();
                println!(
                    "stored {} as {path} ({}{scheme})",
                    local.display(),
                    fmt_size(size)
                );
            }
        }
        ClusterCmd::Get {
            path,
            local,
            offset,
            length,
            read_path,
            conn,
        } => {
            let options = ClientOptions {
                read_path,
                ..ClientOptions::default()
            };
            let t = Transfer::start(&conn, options)?;
            if t.bar.is_some() {
                let size = t.client.stat(&path).await?.size;
                t.set_total("get", length.unwrap_or(size.saturating_sub(offset)));
            }
            let client = t.client.clone();
            let got = get_to(&client, &path, local.as_deref(), offset, length).await;
            t.finish();
            if let (Some(file), n) = (local.as_deref().filter(|f| *f != "-"), got?) {
                eprintln!("read {path} into {file} ({})", fmt_size(n));
            }
        }
        ClusterCmd::Update {
            path,
            offset,
            file,
            data,
            json,
            conn,
        } => {
            let bytes = match (file, data) {
                (Some(f), _) => {
                    std::fs::read(&f).with_context(|| format!("cannot read {}", f.display()))?
                }
                (None, Some(d)) => d.into_bytes(),
                (None, None) => anyhow::bail!("update needs --file or --data"),
            };
            let client = connect(&conn)?;
            client.update(&path, offset, &bytes).await?;
            if json {
                print_json(&json!({"path": path, "offset": offset, "bytes": bytes.len()}))?;
            } else {
                println!(
                    "updated {path}: {} at offset {offset}",
                    fmt_size(bytes.len() as u64)
                );
            }
        }
        ClusterCmd::Rm { path, json, conn } => {
            connect(&conn)?.remove(&path).await?;
            if json {
                print_json(&json!({"removed": path}))?;
            } else {
                println!("removed {path}");
            }
        }
        ClusterCmd::Ls { prefix, json, conn } => {
            let files = connect(&conn)?
                .list(prefix.as_deref().unwrap_or(""))
                .await?;
            if json {
                let v: Vec<_> = files
                    .iter()
                    .map(|f| {
                        json!({"path": f.path, "size": f.size, "mtime_ms": f.mtime_ms, "segments": f.segments})
                    })
                    .collect();
                print_json(&v)?;
            } else {
                for f in &files {
                    println!("{:>12}  {:>4} seg  {}", f.size, f.segments, f.path);
                }
            }
        }
        ClusterCmd::Stat { path, json, conn } => {
            let client = connect(&conn)?;
            let info = client.stat(&path).await?;
            if json {
                print_json(&file_json(&info))?;
            } else {
                let names = match client.status().await {
                    Ok(st) => st.osds.into_iter().map(|o| (o.osd_id, o.name)).collect(),
                    Err(_) => BTreeMap::new(),
                };
                print_stat(&info, &names);
            }
        }
        ClusterCmd::Mount { .. } => anyhow::bail!("`cluster mount` runs before the runtime starts"),
        ClusterCmd::Status { json, conn } => {
            let status = connect(&conn)?.status().await?;
            if json {
                print_json(&status_json(&status))?;
            } else {
                print_status(&status);
            }
        }
        ClusterCmd::Osd {
            cmd: OsdCmd::Out { osd, json, conn },
        } => {
            let client = connect_admin(&conn)?;
            let (id, chunks) = client.osd_out(&osd).await?;
            let name = client
                .status()
                .await
                .ok()
                .and_then(|st| st.osds.into_iter().find(|o| o.osd_id == id))
                .map(|o| o.name)
                .unwrap_or_else(|| osd.clone());
            if json {
                print_json(&json!({"osd_id": id, "name": name, "chunks_to_rebuild": chunks}))?;
            } else {
                println!("OSD {id} ({name}) is out; {chunks} chunks will be rebuilt on other OSDs");
            }
        }
        ClusterCmd::Backup { file, json, conn } => {
            let config = ClusterConfig::load(&config_path(&conn))?;
            let bytes = match config.mds_store() {
                MdsStore::Sqlite(_) => {
                    let mut data = Vec::new();
                    let n = connect_admin(&conn)?
                        .backup_metadata(|b| {
                            data.extend_from_slice(b);
                            Ok(())
                        })
                        .await?;
                    backup::write_atomically(&file, |f| {
                        std::io::Write::write_all(f, &data).map_err(|source| {
                            backup::BackupError::Io {
                                what: "cannot write",
                                path: file.clone(),
                                source,
                            }
                        })
                    })?;
                    n
                }
                MdsStore::PostgreSql(url) => {
                    let to = file.clone();
                    tokio::task::spawn_blocking(move || backup::pg_dump(&url, &to)).await??;
                    std::fs::metadata(&file)?.len()
                }
            };
            let files = match config.mds_store() {
                MdsStore::Sqlite(_) => Some(backup::check_sqlite(&file)?),
                MdsStore::PostgreSql(_) => None,
            };
            if json {
                print_json(&json!({"file": file, "bytes": bytes, "files": files}))?;
            } else {
                println!(
                    "metadata backup in {}: {}{}",
                    file.display(),
                    fmt_size(bytes),
                    files.map(|n| format!(", {n} files")).unwrap_or_default()
                );
            }
        }
        ClusterCmd::Restore { file, json, conn } => {
            let config = ClusterConfig::load(&config_path(&conn))?;
            // The PostgreSQL client is synchronous: off the async threads.
            let from = file.clone();
            let files = tokio::task::spawn_blocking(move || match config.mds_store() {
                MdsStore::Sqlite(path) => backup::restore_sqlite(&from, &path),
                MdsStore::PostgreSql(url) => backup::pg_restore(&url, &from),
            })
            .await??;
            if json {
                print_json(&json!({"file": file, "files": files}))?;
            } else {
                println!(
                    "metadata restored from {}: {files} files; start the MDS (running OSDs need no restart)",
                    file.display()
                );
            }
        }
        ClusterCmd::Up(a) => up(a).await?,
        ClusterCmd::Init(a) => init(a)?,
        ClusterCmd::Cert(a) => cert(a)?,
    }
    Ok(())
}

fn state_name(s: OsdState) -> &'static str {
    match s {
        OsdState::Up => "up",
        OsdState::Down => "down",
        OsdState::Out => "out",
    }
}

fn file_json(f: &FileInfo) -> serde_json::Value {
    json!({
        "path": f.path,
        "file_id": f.file_id,
        "size": f.size,
        "mtime_ms": f.mtime_ms,
        "segment_bytes": f.segment_bytes,
        "update_scheme": f.scheme.name(),
        "segments": f.segments.iter().map(|s| json!({
            "index": s.index,
            "segment_id": s.segment_id,
            "length": s.length,
            "primary": s.primary,
            "primary_addr": s.primary_addr,
            "epoch": s.epoch,
            "chunks": s.chunks.iter().map(|c| json!({
                "index": c.index,
                "osd_id": (c.osd_id != NO_OSD).then_some(c.osd_id),
                "addr": c.addr,
                "state": format!("{:?}", c.state).to_lowercase(),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "robust": f.robust.as_ref().map(|r| json!({
            "code": r.params.code.name(),
            "block_bytes": r.params.block_bytes,
            "redundancy": r.params.redundancy,
            "object_blocks": r.params.object_blocks,
            "objects_below_n": r.objects_below_n,
            "blocks_per_osd": blocks_per_osd(r),
            "objects": r.objects.iter().map(|o| json!({
                "index": o.index, "object_id": o.object_id, "length": o.length, "k": o.k,
                "n": o.n, "id_space": o.id_space, "version": o.version, "blocks": o.blocks.len(),
            })).collect::<Vec<_>>(),
        })),
    })
}

/// How `stat` shows an OSD: its id and, when it differs from `osd-<id>`, its name.
fn osd_label(id: u32, names: &BTreeMap<u32, String>) -> String {
    match names.get(&id) {
        Some(n) if *n != format!("osd-{id}") => format!("{id}({n})"),
        _ => id.to_string(),
    }
}

fn print_stat(f: &FileInfo, names: &BTreeMap<u32, String>) {
    if let Some(r) = &f.robust {
        println!(
            "{}: {} ({} bytes), robust: {} blocks of {}, D = {:.3}, {} objects, {} below N",
            f.path,
            fmt_size(f.size),
            f.size,
            r.params.code,
            fmt_size(u64::from(r.params.block_bytes)),
            r.params.redundancy,
            r.objects.len(),
            r.objects_below_n
        );
        for o in &r.objects {
            println!(
                "  object {:>4}  id {:<8} {:>10}  K {}  N {}  N' {}  version {}  blocks {}",
                o.index,
                o.object_id,
                fmt_size(o.length),
                o.k,
                o.n,
                o.id_space,
                o.version,
                o.blocks.len()
            );
        }
        let per: Vec<String> = blocks_per_osd(r)
            .iter()
            .map(|(id, n)| format!("{}:{n}", osd_label(*id, names)))
            .collect();
        println!("  blocks per OSD: {}", per.join(" "));
        return;
    }
    println!(
        "{}: {} ({} bytes), {} segments of up to {}, update scheme {}",
        f.path,
        fmt_size(f.size),
        f.size,
        f.segments.len(),
        fmt_size(f.segment_bytes),
        f.scheme
    );
    for s in &f.segments {
        let chunks: Vec<String> = s
            .chunks
            .iter()
            .map(|c| {
                if c.osd_id == NO_OSD {
                    return format!("{}@lost", c.index);
                }
                let state = format!("{:?}", c.state).to_lowercase();
                let at = osd_label(c.osd_id, names);
                if state == "healthy" {
                    format!("{}@{at}", c.index)
                } else {
                    format!("{}@{at}({state})", c.index)
                }
            })
            .collect();
        println!(
            "  segment {:>4}  id {:<8} {:>10}  primary osd {}  chunks {}",
            s.index,
            s.segment_id,
            fmt_size(s.length),
            osd_label(s.primary, names),
            chunks.join(" ")
        );
    }
}

/// A warning when some segment of a file just stored lacks chunks (fewer than n OSDs were up).
fn redundancy_warning(f: &FileInfo) -> Option<String> {
    let short = |s: &&ecstack_mds_proto::SegmentLayout| {
        s.chunks
            .iter()
            .any(|c| c.osd_id == NO_OSD || c.state != ChunkState::Healthy)
    };
    let below = f.segments.iter().filter(short).count();
    if below == 0 {
        return None;
    }
    let n = f.segments.first().map_or(0, |s| s.chunks.len());
    let fewest = f
        .segments
        .iter()
        .map(|s| {
            s.chunks
                .iter()
                .filter(|c| c.osd_id != NO_OSD && c.state == ChunkState::Healthy)
                .count()
        })
        .min()
        .unwrap_or(0);
    Some(format!(
        "{} is stored below full redundancy: {below} of {} segments have as few as {fewest} of their {n} chunks (too few OSDs up); the missing chunks are placed when OSDs join",
        f.path,
        f.segments.len()
    ))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Seconds recovery has run (to its end, or to now while it runs); `None` when none ran.
fn recovery_secs(s: &ClusterStatus) -> Option<f64> {
    let r = &s.recovery;
    if r.started_ms == 0 {
        return None;
    }
    let end = if r.finished_ms == 0 {
        now_ms()
    } else {
        r.finished_ms
    };
    Some(end.saturating_sub(r.started_ms) as f64 / 1000.0)
}

fn status_json(s: &ClusterStatus) -> serde_json::Value {
    let count = |st: OsdState| s.osds.iter().filter(|o| o.state == st).count();
    json!({
        "cluster_id": s.cluster_id,
        "code": {"family": s.params.code, "k": s.params.k, "m": s.params.m},
        "segment_bytes": s.params.segment_bytes,
        "osds_up": count(OsdState::Up),
        "osds_down": count(OsdState::Down),
        "osds_out": count(OsdState::Out),
        "osds": s.osds.iter().map(|o| json!({
            "osd_id": o.osd_id, "name": o.name, "addr": o.addr, "state": state_name(o.state),
            "labels": o.labels, "capacity_bytes": o.capacity_bytes, "used_bytes": o.used_bytes,
            "reserve_bytes": o.reserve_bytes, "log_bytes": o.log_bytes, "merges": o.merges,
            "read_bytes_per_s": o.load.read_bytes_per_s, "write_bytes_per_s": o.load.write_bytes_per_s,
            "queue_depth": o.load.queue_depth, "robust_blocks": o.load.robust_blocks,
            "last_heartbeat_ms_ago": o.last_heartbeat_ms_ago,
        })).collect::<Vec<_>>(),
        "files": s.files,
        "bytes": s.bytes,
        "robust_files": s.robust_files,
        "robust_objects_below_n": s.robust_objects_below_n,
        "orphans": {
            "chunks_pending": s.orphans.chunks_pending,
            "chunks_deleted": s.orphans.chunks_deleted,
            "objects_pending": s.orphans.objects_pending,
            "objects_deleted": s.orphans.objects_deleted,
        },
        "segments": {
            "healthy": s.segments_healthy,
            "degraded": s.segments_degraded,
            "recovering": s.segments_recovering,
            "lost": s.segments_lost,
        },
        "recovery": {
            "chunks_total": s.recovery.chunks_total,
            "chunks_done": s.recovery.chunks_done,
            "bytes_done": s.recovery.bytes_done,
            "started_ms": s.recovery.started_ms,
            "finished_ms": s.recovery.finished_ms,
            "running": s.recovery.started_ms != 0 && s.recovery.finished_ms == 0,
            "secs": recovery_secs(s),
        },
    })
}

fn print_status(s: &ClusterStatus) {
    let count = |st: OsdState| s.osds.iter().filter(|o| o.state == st).count();
    println!(
        "cluster {}  code {} k={} m={}  segments of {}",
        s.cluster_id,
        s.params.code,
        s.params.k,
        s.params.m,
        fmt_size(s.params.segment_bytes)
    );
    println!(
        "OSDs: {} up, {} down, {} out",
        count(OsdState::Up),
        count(OsdState::Down),
        count(OsdState::Out)
    );
    for o in &s.osds {
        println!(
            "  {:>3} {:<10} {:<22} {:<5} used {:>10}  reserve {:>10}  log {:>10}  merges {:>6}  read {:>9}/s  write {:>9}/s  queue {:>3}  blocks {:>6}  heartbeat {} ms ago",
            o.osd_id,
            o.name,
            o.addr,
            state_name(o.state),
            fmt_size(o.used_bytes),
            fmt_size(o.reserve_bytes),
            fmt_size(o.log_bytes),
            o.merges,
            fmt_size(o.load.read_bytes_per_s),
            fmt_size(o.load.write_bytes_per_s),
            o.load.queue_depth,
            o.load.robust_blocks,
            o.last_heartbeat_ms_ago
        );
    }
    println!("files: {} ({})", s.files, fmt_size(s.bytes));
    if s.robust_files > 0 {
        println!(
            "robust files: {} ({} objects below N)",
            s.robust_files, s.robust_objects_below_n
        );
    }
    println!(
        "segments: {} healthy, {} degraded, {} recovering, {} lost",
        s.segments_healthy, s.segments_degraded, s.segments_recovering, s.segments_lost
    );
    let o = &s.orphans;
    if *o != Default::default() {
        println!(
            "orphans (on OSDs, unknown to the metadata): {} chunks and {} block files waiting out the grace, {} chunks and {} block files deleted",
            o.chunks_pending, o.objects_pending, o.chunks_deleted, o.objects_deleted
        );
    }
    let r = &s.recovery;
    match recovery_secs(s) {
        None => println!("recovery: none ran"),
        Some(secs) => println!(
            "recovery: {}/{} chunks, {} in {secs:.1} s{}",
            r.chunks_done,
            r.chunks_total,
            fmt_size(r.bytes_done),
            if r.finished_ms == 0 {
                " (running)"
            } else {
                " (done)"
            }
        ),
    }
}

async fn up(a: UpArgs) -> Result<()> {
    if a.insecure {
        eprintln!("ecstack: WARNING: --insecure: the daemons run without TLS or authentication (loopback experiments only)");
    }
    let exe = std::env::current_exe().context("cannot find the ecstack binary")?;
    // --config names the directory or the cluster.toml in it, as for the clients.
    let dir = match a.dir.file_name() {
        Some(f) if f == ecstack_rpc::init::CONFIG_FILE => a
            .dir
            .parent()
            .map_or_else(|| PathBuf::from("."), PathBuf::from),
        _ => a.dir.clone(),
    };
    let mut spec = LocalSpec::new(exe, dir, a.osds);
    spec.k = a.k;
    spec.m = a.m;
    spec.family = code_name(a.family.as_deref(), a.m);
    spec.segment_bytes = a.segment_size;
    spec.insecure = a.insecure;
    spec.update_scheme = a.update_scheme.unwrap_or_default();
    let fresh = !spec.config_path().exists();
    if fresh {
        cluster_code(&spec.family, spec.k, spec.m)
            .with_context(|| format!("--code {} -k {} -m {}", spec.family, spec.k, spec.m))?;
    } else if let Some(wanted) = a.update_scheme {
        // An existing cluster keeps its config; say so rather than ignore the flag.
        let config = ClusterConfig::load(&spec.config_path())?;
        if config.update.scheme != wanted {
            anyhow::bail!(
                "--update-scheme {wanted}: the cluster in {} has [update] scheme = \"{}\"; the flag sets a new cluster's (edit its cluster.toml to change the default of new files)",
                spec.dir.display(),
                config.update.scheme
            );
        }
    }
    let stop = StopSignals::watch()?;
    let mut cluster = LocalCluster::start(spec)?;
    let config_path = cluster.config_path();
    let client = Client::from_config_file(&config_path, "client", a.insecure)?;
    let ready = client.wait_for_osds(a.osds, Duration::from_secs(30)).await;
    cluster.check_alive()?;
    let status = ready?;
    println!(
        "{} cluster {} in {}",
        if fresh { "new" } else { "existing" },
        status.cluster_id,
        cluster.dir().display()
    );
    println!(
        "  MDS   {}  (pid {})",
        cluster.config().mds.addr,
        pid_of(&cluster, "mds")
    );
    for o in &status.osds {
        println!(
            "  {:<6} {}  (id {}, pid {}, store {})",
            o.name,
            o.addr,
            o.osd_id,
            pid_of(&cluster, &o.name),
            cluster.dir().join(&o.name).display()
        );
    }
    println!("  logs  {}", cluster.log_dir().display());
    println!("  config {}", config_path.display());
    println!(
        "try: ecstack cluster put FILE /path --config {}   (Ctrl-C stops the cluster)",
        config_path.display()
    );
    wait_for_stop(&mut cluster, stop).await?;
    eprintln!("stopping the cluster");
    cluster.stop();
    Ok(())
}

fn pid_of(cluster: &LocalCluster, name: &str) -> String {
    cluster
        .pids()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| p.to_string())
        .unwrap_or_else(|| "-".into())
}

/// SIGINT and SIGTERM, watched from before `cluster up` says it is ready (a signal that arrives
/// right after the "try:" line must stop the cluster, not kill this process and orphan it).
struct StopSignals;

impl StopSignals {
    fn watch() -> Result<StopSignals> {
        crate::signals::watch_stop()?;
        Ok(StopSignals)
    }
}

/// Returns on SIGINT or SIGTERM; meanwhile reports a daemon that died (once).
async fn wait_for_stop(cluster: &mut LocalCluster, _stop: StopSignals) -> Result<()> {
    let mut reported = false;
    let stopped = crate::signals::stopped();
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            _ = &mut stopped => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                if let Err(e) = cluster.check_alive() {
                    if !reported {
                        eprintln!("ecstack: warning: {e}");
                        reported = true;
                    }
                }
            }
        }
    }
}

/// Check a new cluster's code: it builds with these k and m (one clear line if not: an unknown
/// family, RDP with m ≠ 2 or k > p − 1, ...). Every code runs on the cluster: chunks are sized to
/// the code's alignment, ApplyDelta carries the extents an update changes, and degraded reads read
/// the code's decode span (docs/cluster.md "Codes on the cluster").
fn cluster_code(name: &str, k: u32, m: u32) -> Result<CodeKind> {
    let kind = CodeKind::parse(name)?;
    new_code(kind, k as usize, m as usize)?;
    Ok(kind)
}

/// The code a new cluster gets: the one named, else the default for m parity chunks (docs/cli.md).
fn code_name(given: Option<&str>, m: u32) -> String {
    given.map_or_else(
        || CodeKind::default_for_parity(m as usize).name().to_owned(),
        str::to_owned,
    )
}

fn init(a: InitArgs) -> Result<()> {
    let code = code_name(a.code.as_deref(), a.m);
    let kind = cluster_code(&code, a.k, a.m)
        .with_context(|| format!("--code {code} -k {} -m {}", a.k, a.m))?;
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
        update_scheme: a.update_scheme,
        force: a.force,
    };
    let config = init_cluster(&a.dir, &opts)?;
    let config_path = a.dir.join(ecstack_rpc::init::CONFIG_FILE);
    if a.json {
        return print_json(&json!({
            "cluster_id": config.cluster_id,
            "config": config_path,
            "code": {"family": config.code.family, "k": config.code.k, "m": config.code.m},
            "segment_bytes": config.segment_bytes,
            "update_scheme": config.update.scheme.name(),
            "mds_addr": config.mds.addr,
            "certs": config.certs_dir(),
            "osds": opts.osds,
            "clients": opts.clients,
        }));
    }
    println!(
        "cluster {} in {}: {} {}+{}, {} segments, update scheme {}, MDS at {}",
        config.cluster_id,
        a.dir.display(),
        config.code.family,
        config.code.k,
        config.code.m,
        fmt_size(config.segment_bytes),
        config.update.scheme,
        config.mds.addr
    );
    println!(
        "certificates for mds, {} OSDs, {} clients and admin in {}",
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
    let role = match a.role {
        Some(r) => r,
        None => ecstack_rpc::init::role_of_name(&a.name)?,
    };
    let issued =
        ecstack_rpc::init::issue_certificate_with_role(&config, &a.name, Some(role), a.force)?;
    println!(
        "{} ({role}): certificate {} and key {}",
        issued.name,
        issued.cert.display(),
        issued.key.display()
    );
    Ok(())
}
