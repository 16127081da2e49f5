//! fio 4 KiB random-write IOPS over NBD beside fio psync on a raw file, without the CLI:
//!
//! ```sh
//! cargo run --release -p ecstack-nbd --example nbd_bench -- DEVICE_SPEC [SIZE_MIB] [RUNTIME_S] [IODEPTH,...] [RAW_DIR]
//! cargo run --release -p ecstack-nbd --example nbd_bench -- mem:256M 64 5 1,16 /tmp
//! ```
//!
//! `NBD_WORKERS=N` sets the server's worker threads (default 8). Prints one line per run and the exact fio command. `ecstack nbd bench` does the same with flags.

use std::sync::Arc;
use std::time::Duration;

use ecstack_device::{open_spec, BlockDevice};
use ecstack_nbd::{fio_randwrite, FioParams, FioTarget, ServeConfig, Server};

fn main() {
    if let Err(e) = run() {
        eprintln!("nbd_bench: error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let spec = args.first().map(String::as_str).unwrap_or("mem:256M");
    let size_mib: u64 = args
        .get(1)
        .map_or(Ok(64), |s| s.parse())
        .map_err(|e| format!("size: {e}"))?;
    let secs: f64 = args
        .get(2)
        .map_or(Ok(5.0), |s| s.parse())
        .map_err(|e| format!("runtime: {e}"))?;
    let depths: Vec<u32> = args
        .get(3)
        .map_or("1,16", String::as_str)
        .split(',')
        .map(|d| d.parse().map_err(|e| format!("iodepth: {e}")))
        .collect::<Result<_, _>>()?;
    let dir = args
        .get(4)
        .cloned()
        .unwrap_or_else(|| std::env::temp_dir().display().to_string());

    let dev: Arc<dyn BlockDevice> = open_spec(spec).map_err(|e| e.to_string())?;
    let size = (size_mib << 20).min(dev.capacity());
    let params = |iodepth| FioParams {
        size,
        runtime: Duration::from_secs_f64(secs),
        iodepth,
        ..FioParams::default()
    };
    let workers = std::env::var("NBD_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(ServeConfig::default().workers);
    let cfg = ServeConfig {
        addr: "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
        workers,
        ..ServeConfig::default()
    };
    let server = Server::start(Arc::clone(&dev), None, cfg).map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for d in depths {
        let r =
            fio_randwrite(&FioTarget::Nbd(server.uri()), &params(d)).map_err(|e| e.to_string())?;
        rows.push((format!("nbd {} iodepth={d}", dev.name()), r));
    }
    server.shutdown().map_err(|e| e.to_string())?;
    let tmp = std::path::Path::new(&dir).join(format!("nbd_bench_raw.{}", std::process::id()));
    let r = fio_randwrite(&FioTarget::File(tmp.clone()), &params(1));
    let _ = std::fs::remove_file(&tmp);
    rows.push((
        format!("raw file psync ({dir})"),
        r.map_err(|e| e.to_string())?,
    ));
    let raw = rows.last().map_or(0.0, |r| r.1.write.iops);
    for (name, r) in &rows {
        println!(
            "{name:<45} {:>9.0} IOPS  p99 {:>8.1} us  {:>5.2}x raw",
            r.write.iops,
            r.write.clat_p99_us,
            r.write.iops / raw.max(1e-9)
        );
    }
    for (_, r) in &rows {
        println!("  {}", r.command);
    }
    Ok(())
}
