//! `ecstack kv`: the key-value store of EPLOG §4 on any device or array, spoken to over RESP2.
//! The work lives in `ecstack_kv`; this file only parses arguments and opens the device.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use ecstack_array::SchemeKind;
use ecstack_device::{open_spec, BlockDevice};
use ecstack_kv::server::{serve_on, ServerConfig};
use ecstack_kv::{Durability, KvConfig, KvStore};
use ecstack_lab::kv_bench::{self, KvBenchConfig};
use ecstack_lab::kv_bench_ycsb::{self, YcsbConfig};

use crate::util::{fmt_size, parse_size, print_json};

#[derive(Args)]
pub struct KvArgs {
    #[command(subcommand)]
    cmd: KvCmd,
}

#[derive(Subcommand)]
enum KvCmd {
    /// Serve a store over the Redis protocol (RESP2) until Ctrl-C / SIGTERM
    Serve(ServeArgs),
    /// redis-benchmark SET/GET against this server over a memory-backed array, then against a
    /// real redis-server (persistence off) with the same arguments; every key read back on both.
    /// The logic is `ecstack_lab::kv_bench`
    Bench(BenchArgs),
    /// YCSB core workloads A-F (real YCSB client: site.ycsb:core + a minimal Redis binding over
    /// Jedis in crates/kv/ycsb, built with Maven on first use) against this server over a
    /// memory-backed array, then against redis-server, same parameters; failed operations and
    /// key counts are checked. The logic is `ecstack_lab::kv_bench_ycsb`
    Ycsb(YcsbArgs),
}

#[derive(Args)]
struct YcsbArgs {
    /// Scheme of the memory-backed array: md, pl or eplog
    #[arg(long, default_value = "eplog")]
    scheme: String,
    /// Data chunks per stripe
    #[arg(short = 'k', long = "k", default_value_t = 6)]
    k: usize,
    /// Parity chunks per stripe
    #[arg(short = 'm', long = "m", default_value_t = 2)]
    m: usize,
    /// Workloads to run, letters a-f separated by commas
    #[arg(long, default_value = "a,b,c,d,e,f")]
    workloads: String,
    /// YCSB recordcount (records loaded per workload)
    #[arg(long, default_value_t = 10_000)]
    records: u64,
    /// YCSB operationcount (operations per run)
    #[arg(long, default_value_t = 10_000)]
    operations: u64,
    /// YCSB client threads (one connection each)
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// The YCSB client's Maven project (default: crates/kv/ycsb of the source tree, or ECSTACK_YCSB_DIR)
    #[arg(long)]
    client_dir: Option<std::path::PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BenchArgs {
    /// Scheme of the memory-backed array: md, pl or eplog
    #[arg(long, default_value = "eplog")]
    scheme: String,
    /// Data chunks per stripe
    #[arg(short = 'k', long = "k", default_value_t = 6)]
    k: usize,
    /// Parity chunks per stripe
    #[arg(short = 'm', long = "m", default_value_t = 2)]
    m: usize,
    /// Requests per test (redis-benchmark -n)
    #[arg(short = 'n', long, default_value_t = 100_000)]
    requests: u64,
    /// Concurrent connections (redis-benchmark -c)
    #[arg(short = 'c', long, default_value_t = 50)]
    clients: usize,
    /// Pipelined requests per connection (redis-benchmark -P)
    #[arg(short = 'P', long, default_value_t = 16)]
    pipeline: usize,
    /// Value size in bytes (redis-benchmark -d)
    #[arg(short = 'd', long, default_value_t = 100)]
    value_bytes: usize,
    /// Random keys (redis-benchmark -r)
    #[arg(short = 'r', long, default_value_t = 10_000)]
    keys: u64,
    /// Turn the server's group commit off (each pipelined SET its own device write)
    #[arg(long)]
    no_group_commit: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ServeArgs {
    /// Device spec (mem:256M, file:/path?size=1G, ...) or `array:<meta spec>` for an ecstack array
    #[arg(long)]
    device: String,
    /// Format the device as an empty store even if it holds one (default: open, or create on a zeroed device)
    #[arg(long)]
    create: bool,
    /// Address to listen on, HOST:PORT (port 0 picks a free one; the bound address is printed)
    #[arg(long, default_value = "127.0.0.1:6379")]
    addr: SocketAddr,
    /// Deprecated: the host part of --addr
    #[arg(long, hide = true)]
    bind: Option<IpAddr>,
    /// Deprecated: the port part of --addr
    #[arg(long, hide = true)]
    port: Option<u16>,
    /// Require AUTH with this password
    #[arg(long)]
    requirepass: Option<String>,
    /// When writes are durable: always (flushed before the reply) or everysec
    #[arg(long, default_value = "everysec")]
    appendfsync: String,
    /// Object metadata cache size as a fraction of the pairs the store is sized for (0 = off)
    #[arg(long, default_value_t = 0.1)]
    cache_fraction: f64,
    /// Most pairs the location table holds (default: one per chunk, at most 4 Mi)
    #[arg(long)]
    pairs_max: Option<usize>,
    /// Chunk size records are aligned to for a new store (default: the array's chunk size, else 4K)
    #[arg(long)]
    chunk: Option<String>,
    /// Connections served at once
    #[arg(long, default_value_t = 10_000)]
    maxclients: usize,
    /// Turn group commit off (each pipelined SET its own device write)
    #[arg(long)]
    no_group_commit: bool,
    /// Print the store's counters as JSON when stopping
    #[arg(long)]
    json: bool,
}

pub fn run(a: KvArgs) -> Result<()> {
    match a.cmd {
        KvCmd::Serve(s) => serve(s),
        KvCmd::Bench(b) => bench(b),
        KvCmd::Ycsb(y) => ycsb(y),
    }
}

fn ycsb(y: YcsbArgs) -> Result<()> {
    crate::cmd_nbd::init_logging("warn");
    let mut workloads = Vec::new();
    for w in y
        .workloads
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        let c = w.to_ascii_lowercase();
        match c.as_bytes() {
            [b @ b'a'..=b'f'] => workloads.push(*b as char),
            _ => anyhow::bail!("unknown YCSB workload '{w}' (a..f)"),
        }
    }
    let cfg = YcsbConfig {
        scheme: SchemeKind::parse(&y.scheme)?,
        k: y.k,
        m: y.m,
        workloads,
        records: y.records,
        operations: y.operations,
        threads: y.threads,
        client_dir: y
            .client_dir
            .unwrap_or_else(kv_bench_ycsb::default_client_dir),
        ..YcsbConfig::default()
    };
    let report = kv_bench_ycsb::run(&cfg, &crate::util::progress_line)?;
    if y.json {
        print_json(&report)?;
    } else {
        print!("{}", report.markdown());
    }
    Ok(())
}

fn bench(b: BenchArgs) -> Result<()> {
    crate::cmd_nbd::init_logging("warn");
    let cfg = KvBenchConfig {
        scheme: SchemeKind::parse(&b.scheme)?,
        k: b.k,
        m: b.m,
        requests: b.requests,
        clients: b.clients,
        pipeline: b.pipeline,
        value_bytes: b.value_bytes,
        keys: b.keys,
        group_commit: !b.no_group_commit,
    };
    let report = kv_bench::run(&cfg, &crate::util::progress_line)?;
    if b.json {
        print_json(&report)?;
    } else {
        print!("{}", report.markdown());
    }
    Ok(())
}

fn serve(s: ServeArgs) -> Result<()> {
    crate::cmd_nbd::init_logging("warn");
    let (dev, array) = match s.device.strip_prefix("array:") {
        Some(meta) => {
            let a = crate::cmd_array::open_by_meta(meta)?;
            (Arc::clone(&a) as Arc<dyn BlockDevice>, Some(a))
        }
        None => (open_spec(&s.device)?, None),
    };
    let array_chunk = array.as_ref().map(|a| a.geometry().chunk);
    let chunk_bytes = match &s.chunk {
        Some(c) => parse_size(c)? as usize,
        None => array_chunk.unwrap_or(4096) as usize,
    };
    if !(0.0..=1.0).contains(&s.cache_fraction) {
        anyhow::bail!("--cache-fraction {} is not in 0..=1", s.cache_fraction);
    }
    let pairs = s
        .pairs_max
        .unwrap_or(4 << 20)
        .min((dev.capacity() / chunk_bytes.max(1) as u64) as usize);
    let cfg = KvConfig {
        chunk_bytes,
        durability: s.appendfsync.parse()?,
        cache_entries: (s.cache_fraction * pairs as f64) as usize,
        pairs_max: s.pairs_max,
        ..KvConfig::default()
    };
    let store = if s.create {
        KvStore::create(Arc::clone(&dev), &cfg)?
    } else {
        KvStore::open_or_create(Arc::clone(&dev), &cfg)?
    };
    let store = Arc::new(store);
    if cfg.durability == Durability::EverySec {
        store.spawn_syncer(Duration::from_secs(1));
    }
    let scfg = ServerConfig {
        addr: SocketAddr::new(
            s.bind.unwrap_or(s.addr.ip()),
            s.port.unwrap_or(s.addr.port()),
        ),
        requirepass: s.requirepass.clone(),
        clients_max: s.maxclients,
        group_commit: !s.no_group_commit,
        // Reads of a memory device never wait long: read-only batches run on the tokio task.
        inline_reads: s.device.starts_with("mem:"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(ecstack_kv::server::network_threads())
        .enable_all()
        .build()?;
    let res: Result<()> = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(scfg.addr)
            .await
            .with_context(|| format!("bind {}", scfg.addr))?;
        let addr = listener.local_addr()?;
        eprintln!(
            "ecstack kv: serving {} ({}, {} pairs) on {addr}{}; Ctrl-C stops",
            dev.name(),
            fmt_size(dev.capacity()),
            store.len(),
            if scfg.requirepass.is_some() {
                " (AUTH required)"
            } else {
                ""
            }
        );
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            stop_signal().await;
            let _ = tx.send(true);
        });
        serve_on(listener, Arc::clone(&store), scfg, rx).await?;
        Ok(())
    });
    rt.shutdown_timeout(Duration::from_secs(2));
    res?;
    let stats = store.stats();
    match Arc::try_unwrap(store) {
        Ok(st) => {
            st.close()?;
        }
        Err(st) => st.sync()?,
    }
    drop(dev);
    if let Some(a) = array {
        a.close()?;
    }
    if s.json {
        print_json(&stats)?;
    }
    Ok(())
}

async fn stop_signal() {
    crate::signals::stopped().await
}
