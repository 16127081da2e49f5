//! `ecstack nbd`: export any device spec over NBD (`serve`), talk to a server's admin socket (`admin`),
//! and measure fio 4 KiB random-write IOPS over NBD beside fio on a raw file (`bench`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ecstack_device::{open_spec, BlockDevice};
use ecstack_nbd::bench::{fio_available, fio_has_nbd_engine};
use ecstack_nbd::{
    admin_request, fio_randwrite, FioParams, FioResult, FioTarget, ServeConfig, Server,
};
use serde_json::json;

use crate::util::{fmt_size, parse_size, print_json};

#[derive(Args)]
pub struct NbdArgs {
    #[command(subcommand)]
    cmd: NbdCmd,
}

#[derive(Subcommand)]
enum NbdCmd {
    /// Export a device (any device spec: a file, mem:1G, ssd:, …) over NBD until Ctrl-C / SIGTERM
    Serve(ServeArgs),
    /// Send one command to a running server's admin socket and print the answer
    Admin(AdminArgs),
    /// fio 4 KiB random writes over NBD (fio's nbd ioengine) beside fio psync on a raw file
    Bench(BenchArgs),
}

#[derive(Args)]
struct ServeArgs {
    /// Device spec to export (see docs/devices.md), e.g. file:/tmp/disk.img?size=1G or mem:256M
    #[arg(long)]
    device: String,
    /// Address to listen on (loopback by default; the NBD port is 10809)
    #[arg(long, default_value = "127.0.0.1:10809")]
    addr: SocketAddr,
    /// Export name clients ask for (nbd://HOST:PORT/NAME)
    #[arg(long, default_value = "ecstack")]
    name: String,
    /// Refuse writes, trims and zeroing (EPERM)
    #[arg(long)]
    read_only: bool,
    /// Serve the admin channel on this Unix socket (ping, nbd-stats, device-stats, shutdown)
    #[arg(long)]
    admin_socket: Option<PathBuf>,
    /// Worker threads running device I/O
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Print the final server and device counters as JSON when the server stops
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct AdminArgs {
    /// The server's admin socket
    #[arg(long)]
    socket: PathBuf,
    /// The command, e.g. `status`, `fail 2`, `nbd-stats`, `shutdown`
    #[arg(required = true, trailing_var_arg = true)]
    command: Vec<String>,
}

#[derive(Args)]
struct BenchArgs {
    /// Device spec to export for the NBD runs
    #[arg(long, default_value = "mem:256M")]
    device: String,
    /// Raw file for the psync baseline (default: a temporary file under --dir)
    #[arg(long)]
    raw_file: Option<PathBuf>,
    /// Directory for the temporary raw file
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Bytes of the device / file written (random offsets inside)
    #[arg(long, default_value = "64M")]
    size: String,
    /// Seconds per fio run
    #[arg(long, default_value_t = 5.0)]
    runtime: f64,
    /// fio iodepths for the NBD runs (comma-separated)
    #[arg(long, default_value = "1,16", value_delimiter = ',')]
    iodepth: Vec<u32>,
    /// Block size
    #[arg(long, default_value = "4K")]
    bs: String,
    /// Use O_DIRECT for the raw-file baseline
    #[arg(long)]
    direct: bool,
    /// JSON output
    #[arg(long)]
    json: bool,
}

pub fn run(a: NbdArgs) -> Result<()> {
    match a.cmd {
        NbdCmd::Serve(s) => serve(s),
        NbdCmd::Admin(s) => admin(s),
        NbdCmd::Bench(b) => bench(b),
    }
}

pub(crate) fn init_logging(default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

fn serve(a: ServeArgs) -> Result<()> {
    init_logging("info");
    let dev = open_spec(&a.device)?;
    let cfg = ServeConfig {
        addr: a.addr,
        export_name: a.name,
        read_only: a.read_only,
        admin_socket: a.admin_socket,
        workers: a.workers,
        description: Some(format!("ecstack export of {}", dev.name())),
        ..ServeConfig::default()
    };
    eprintln!(
        "ecstack nbd: exporting {} ({}) at nbd://{}/{}; Ctrl-C stops",
        dev.name(),
        fmt_size(dev.capacity()),
        a.addr,
        cfg.export_name
    );
    let dev2 = Arc::clone(&dev);
    ecstack_nbd::serve(dev, None, cfg, crate::nbd_export::stop_on_signals)?;
    if a.json {
        print_json(&json!({ "device": dev2.name(), "device_stats": dev2.stats() }))?;
    }
    Ok(())
}

fn admin(a: AdminArgs) -> Result<()> {
    let line = a.command.join(" ");
    let answer = admin_request(&a.socket, &line)?;
    println!("{answer}");
    Ok(())
}

fn bench(a: BenchArgs) -> Result<()> {
    init_logging("warn");
    if !fio_available() {
        bail!("fio is not installed (apt install fio)");
    }
    if !fio_has_nbd_engine() {
        bail!("this fio has no nbd ioengine (Debian's fio >= 3.33 has it)");
    }
    let runtime = crate::util::secs_arg("--runtime", a.runtime)?;
    if runtime.is_zero() {
        bail!("--runtime must be positive");
    }
    let bs = parse_size(&a.bs)?;
    let dev: Arc<dyn BlockDevice> = open_spec(&a.device)?;
    let size = parse_size(&a.size)?.min(dev.capacity());
    if size < bs {
        bail!("size {size} is smaller than the block size {bs}");
    }
    let params = |iodepth: u32| FioParams {
        bs,
        size,
        runtime,
        iodepth,
        numjobs: 1,
        direct: a.direct,
        timeout: runtime * 4 + Duration::from_secs(120),
    };
    let mut rows: Vec<(String, u32, FioResult)> = Vec::new();
    let server = Server::start(
        Arc::clone(&dev),
        None,
        ServeConfig {
            addr: "127.0.0.1:0".parse()?,
            ..ServeConfig::default()
        },
    )?;
    for &d in &a.iodepth {
        let r = fio_randwrite(&FioTarget::Nbd(server.uri()), &params(d))
            .with_context(|| format!("fio over NBD at iodepth {d}"))?;
        rows.push((format!("nbd {}", dev.name()), d, r));
    }
    server.shutdown()?;
    let tmp;
    let raw = match &a.raw_file {
        Some(p) => p.clone(),
        None => {
            tmp = match &a.dir {
                Some(d) => tempfile::tempdir_in(d)?,
                None => tempfile::tempdir()?,
            };
            tmp.path().join("raw.img")
        }
    };
    let r = fio_randwrite(&FioTarget::File(raw.clone()), &params(1))
        .context("fio psync on the raw file")?;
    rows.push((format!("raw file {}", raw.display()), 1, r));
    let raw_iops = rows.last().map(|r| r.2.write.iops).unwrap_or(0.0);

    if a.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(t, d, r)| {
                json!({
                    "target": t, "iodepth": d, "iops": r.write.iops, "bw_bytes": r.write.bw_bytes,
                    "lat_mean_us": r.write.lat_mean_us, "clat_p99_us": r.write.clat_p99_us,
                    "ratio_vs_raw": if raw_iops > 0.0 { r.write.iops / raw_iops } else { 0.0 },
                    "command": r.command,
                })
            })
            .collect();
        return print_json(&json!({ "bs": bs, "size": size, "runtime_s": a.runtime, "rows": out }));
    }
    println!(
        "fio randwrite bs={} size={} runtime={}s",
        fmt_size(bs),
        fmt_size(size),
        a.runtime
    );
    println!(
        "{:<40} {:>7} {:>10} {:>9} {:>10} {:>8}",
        "target", "iodepth", "IOPS", "MiB/s", "p99 us", "vs raw"
    );
    for (t, d, r) in &rows {
        println!(
            "{:<40} {:>7} {:>10.0} {:>9.1} {:>10.1} {:>7.2}x",
            t,
            d,
            r.write.iops,
            r.write.bw_bytes / (1 << 20) as f64,
            r.write.clat_p99_us,
            if raw_iops > 0.0 {
                r.write.iops / raw_iops
            } else {
                0.0
            }
        );
    }
    for (_, _, r) in &rows {
        println!("  {}", r.command);
    }
    Ok(())
}
