//! `ecstack nbd`: export any device spec over NBD (`serve`), talk to a server's admin socket (`admin`),
//! and measure fio 4 KiB random-write IOPS over NBD beside fio on a raw file (`bench`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use ecstack_device::{open_spec, BlockDevice};
use ecstack_nbd::bench::{fio_available, fio_has_nbd_engine, run_nbd_bench, NbdBench};
use ecstack_nbd::{admin_request, ServeConfig};
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
    #[arg(long = "admin", alias = "admin-socket", value_name = "SOCKET")]
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
    if !dev.keeps_data() {
        // A client would read back zeros for what it wrote (issue 46).
        bail!(
            "{} keeps no data (a simulated device models timing and wear only): add data=1 to its spec to export it, e.g. --device '{},data=1'",
            a.device,
            a.device
        );
    }
    let cfg = ServeConfig {
        addr: a.addr,
        export_name: a.name,
        read_only: a.read_only,
        admin_socket: a.admin_socket,
        workers: a.workers,
        description: Some(format!("ecstack export of {}", dev.name())),
        ..ServeConfig::default()
    };
    let announce = format!(
        "ecstack nbd: exporting {} ({}) at nbd://{}/{}; Ctrl-C stops",
        dev.name(),
        fmt_size(dev.capacity()),
        a.addr,
        cfg.export_name
    );
    let dev2 = Arc::clone(&dev);
    // Announced once it listens (a port in use is then the only line).
    ecstack_nbd::serve(dev, None, cfg, |h| {
        eprintln!("{announce}");
        crate::nbd_export::stop_on_signals(h)
    })?;
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
    let tmp;
    let raw_file = match &a.raw_file {
        Some(p) => p.clone(),
        None => {
            tmp = match &a.dir {
                Some(d) => tempfile::tempdir_in(d)?,
                None => tempfile::tempdir()?,
            };
            tmp.path().join("raw.img")
        }
    };
    let report = run_nbd_bench(&NbdBench {
        device: dev,
        raw_file,
        bs,
        size,
        runtime,
        iodepths: a.iodepth.clone(),
        direct: a.direct,
    })?;
    if a.json {
        return print_json(&report.to_json());
    }
    print!("{}", report.text());
    Ok(())
}
