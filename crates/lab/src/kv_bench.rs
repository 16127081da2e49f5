//! `ecstack kv bench`: redis-benchmark SET/GET against `ecstack kv serve`'s server over a
//! memory-backed erasure-coded array, and against a real redis-server (Debian's `redis-server`,
//! persistence off) in the same run; the ratio measures protocol and server overhead (issue 14's
//! target: within 2×).

use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ecstack_array::{Array, ArrayConfig, ArrayDevices, SchemeKind};
use ecstack_device::{BlockDevice, MemDevice};
use ecstack_kv::server::{spawn, ServerConfig};
use ecstack_kv::{Durability, KvConfig, KvStore};
use serde::Serialize;

use crate::{LabError, Result};

/// What the benchmark runs.
#[derive(Clone, Debug, Serialize)]
pub struct KvBenchConfig {
    pub scheme: SchemeKind,
    pub k: usize,
    pub m: usize,
    /// redis-benchmark -n
    pub requests: u64,
    /// redis-benchmark -c
    pub clients: usize,
    /// redis-benchmark -P
    pub pipeline: usize,
    /// redis-benchmark -d
    pub value_bytes: usize,
    /// redis-benchmark -r
    pub keys: u64,
    /// The server's group commit (ServerConfig::group_commit).
    pub group_commit: bool,
}

impl Default for KvBenchConfig {
    fn default() -> Self {
        KvBenchConfig {
            scheme: SchemeKind::Eplog,
            k: 6,
            m: 2,
            requests: 100_000,
            clients: 50,
            pipeline: 16,
            value_bytes: 100,
            keys: 10_000,
            group_commit: true,
        }
    }
}

/// One redis-benchmark test against one server.
#[derive(Clone, Debug, Serialize)]
pub struct KvBenchRow {
    pub server: String,
    pub test: String,
    pub requests_per_s: f64,
    /// CPU time of the server's process (user + system, from /proc) per request of the test:
    /// a figure other processes on a shared machine disturb far less than requests/s. None where
    /// /proc is not readable.
    pub server_cpu_us_per_request: Option<f64>,
}

/// What a server held after the run, read back with MGET over every key redis-benchmark could
/// have written (`key:%012d` for 0..keys).
#[derive(Clone, Debug, Serialize)]
pub struct KvBenchCheck {
    pub server: String,
    /// DBSIZE after the run.
    pub dbsize: u64,
    /// Keys found by MGET; every one held the run's payload (`value_bytes` bytes, one payload for
    /// every SET of the run).
    pub keys_found: u64,
}

/// The rows, the ecstack / redis-server ratio per test, and the redis-benchmark arguments.
#[derive(Clone, Debug, Serialize)]
pub struct KvBenchReport {
    pub config: KvBenchConfig,
    pub redis_benchmark_args: String,
    pub rows: Vec<KvBenchRow>,
    pub checks: Vec<KvBenchCheck>,
    /// (test, ecstack requests/s ÷ redis-server requests/s)
    pub ratios: Vec<(String, f64)>,
    /// (test, redis-server's CPU per request ÷ ecstack's): ≥ 0.5 is "within 2×" in CPU work.
    pub cpu_ratios: Vec<(String, f64)>,
}

fn run_err(msg: String) -> LabError {
    LabError::Run(msg)
}

/// A memory-backed array big enough for `keys` one-chunk records written twice over.
pub(crate) fn memory_array(cfg: &KvBenchConfig) -> Result<Arc<Array>> {
    let chunk: u64 = 4096;
    let chunks_per_record = (24 + 16 + cfg.value_bytes as u64).div_ceil(chunk);
    let data_chunks = cfg.keys * chunks_per_record * 3 + 1024;
    let per_device = (data_chunks.div_ceil(cfg.k as u64) * chunk * 2).max(16 << 20);
    let dev = |bytes: u64| -> Result<Arc<dyn BlockDevice>> { Ok(Arc::new(MemDevice::new(bytes)?)) };
    let n = cfg.k + cfg.m;
    let nlog = if cfg.scheme == SchemeKind::Md {
        0
    } else {
        cfg.m
    };
    let devices = ArrayDevices {
        main: (0..n).map(|_| dev(per_device)).collect::<Result<_>>()?,
        log: (0..nlog)
            .map(|_| dev(per_device / 2))
            .collect::<Result<_>>()?,
        meta: dev(256 << 20)?,
        specs: None,
    };
    let acfg = ArrayConfig {
        chunk_size: chunk as u32,
        ..ArrayConfig::with_geometry(cfg.scheme, cfg.k, cfg.m)
    };
    Ok(Arc::new(Array::create(&acfg, devices)?))
}

fn bench_args(cfg: &KvBenchConfig) -> Vec<String> {
    let s = |x: &dyn ToString| x.to_string();
    vec![
        s(&"-t"),
        s(&"set,get"),
        s(&"-n"),
        s(&cfg.requests),
        s(&"-r"),
        s(&cfg.keys),
        s(&"-d"),
        s(&cfg.value_bytes),
        s(&"-c"),
        s(&cfg.clients),
        s(&"-P"),
        s(&cfg.pipeline),
        s(&"-q"),
        s(&"--csv"),
    ]
}

/// CPU seconds (user + system) process `pid` has used, from `/proc/<pid>/stat`.
fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces, inside parentheses): utime and stime
    // are fields 14 and 15 of the line, in clock ticks (100 per second on Linux).
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Run redis-benchmark against `port`, SET then GET, one invocation each; (test, requests/s, CPU
/// µs per request of process `pid`, the server) per test.
fn redis_benchmark(
    port: u16,
    cfg: &KvBenchConfig,
    pid: u32,
) -> Result<Vec<(String, f64, Option<f64>)>> {
    let mut rows = Vec::new();
    for test in ["set", "get"] {
        let before = process_cpu_seconds(pid);
        let mut r = redis_benchmark_test(port, cfg, test)?;
        let cpu = before
            .zip(process_cpu_seconds(pid))
            .map(|(a, b)| (b - a) * 1e6 / cfg.requests as f64);
        rows.extend(r.drain(..).map(|(t, rps)| (t, rps, cpu)));
    }
    Ok(rows)
}

/// One redis-benchmark invocation of `-t test`; (test, requests/s) from its CSV.
fn redis_benchmark_test(port: u16, cfg: &KvBenchConfig, test: &str) -> Result<Vec<(String, f64)>> {
    let mut args = bench_args(cfg);
    args[1] = test.to_string();
    let o = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .map_err(|e| run_err(format!("redis-benchmark: {e} (install redis-tools)")))?;
    if !o.status.success() {
        return Err(run_err(format!(
            "redis-benchmark failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    let out = String::from_utf8_lossy(&o.stdout);
    let mut rows = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split(',').map(|x| x.trim_matches('"')).collect();
        if f.len() >= 2 && f[0] != "test" {
            if let Ok(rps) = f[1].parse::<f64>() {
                rows.push((f[0].to_string(), rps));
            }
        }
    }
    if rows.is_empty() {
        return Err(run_err(format!(
            "no results in redis-benchmark's output: {out}"
        )));
    }
    Ok(rows)
}

/// A redis-server on 127.0.0.1:`port` with persistence off (the peer of both benchmarks).
pub(crate) fn spawn_redis_server(port: u16) -> Result<std::process::Child> {
    Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| run_err(format!("redis-server: {e} (install redis-server)")))
}

/// Wait until something answers PING on `port`.
pub(crate) fn wait_ping(port: u16) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let mut b = [0u8; 7];
            if s.write_all(b"PING\r\n").is_ok()
                && s.read_exact(&mut b).is_ok()
                && &b == b"+PONG\r\n"
            {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(run_err(format!(
        "nothing answered PING on port {port} within 10 s"
    )))
}

/// One RESP reply: the few kinds DBSIZE and MGET return (errors are turned into `Err`).
pub(crate) enum Reply {
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

pub(crate) fn read_reply(r: &mut impl std::io::BufRead) -> Result<Reply> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)
        .map_err(|e| run_err(format!("read reply: {e}")))?;
    if line.len() < 3 || !line.ends_with(b"\r\n") {
        return Err(run_err(format!(
            "truncated reply {:?}",
            String::from_utf8_lossy(&line)
        )));
    }
    let body = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
    let int = |s: &str| {
        s.parse::<i64>()
            .map_err(|_| run_err(format!("bad reply line {s:?}")))
    };
    match line[0] {
        b':' => Ok(Reply::Int(int(&body)?)),
        b'$' => {
            let n = int(&body)?;
            if n < 0 {
                return Ok(Reply::Bulk(None));
            }
            let mut b = vec![0u8; n as usize + 2];
            r.read_exact(&mut b)
                .map_err(|e| run_err(format!("read reply: {e}")))?;
            b.truncate(n as usize);
            Ok(Reply::Bulk(Some(b)))
        }
        b'*' => {
            let n = int(&body)?.max(0);
            (0..n)
                .map(|_| read_reply(r))
                .collect::<Result<_>>()
                .map(Reply::Array)
        }
        b'-' => Err(run_err(format!("server error: {body}"))),
        other => Err(run_err(format!(
            "unexpected reply type {:?}",
            other as char
        ))),
    }
}

pub(crate) fn command(w: &mut impl std::io::Write, args: &[&[u8]]) -> Result<()> {
    let mut b = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        b.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        b.extend_from_slice(a);
        b.extend_from_slice(b"\r\n");
    }
    w.write_all(&b).map_err(|e| run_err(format!("send: {e}")))
}

/// Read back what redis-benchmark left on the server at `port`: DBSIZE, then MGET over every key
/// it could have written; each value found must be the run's one payload of `value_bytes` bytes
/// (random printable bytes since Redis 7, 'x's before), and the keys found must be DBSIZE.
fn check(port: u16, server: &str, cfg: &KvBenchConfig) -> Result<KvBenchCheck> {
    use std::io::BufReader;
    let s =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| run_err(format!("connect: {e}")))?;
    let mut w = s.try_clone().map_err(|e| run_err(e.to_string()))?;
    let mut r = BufReader::new(s);
    command(&mut w, &[b"DBSIZE"])?;
    let Reply::Int(dbsize) = read_reply(&mut r)? else {
        return Err(run_err(format!(
            "{server}: DBSIZE did not answer an integer"
        )));
    };
    let mut payload: Option<Vec<u8>> = None;
    let mut found = 0u64;
    const BATCH: u64 = 256;
    let mut first = 0;
    while first < cfg.keys {
        let names: Vec<String> = (first..cfg.keys.min(first + BATCH))
            .map(|i| format!("key:{i:012}"))
            .collect();
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(names.iter().map(|n| n.as_bytes()));
        command(&mut w, &args)?;
        let Reply::Array(vals) = read_reply(&mut r)? else {
            return Err(run_err(format!("{server}: MGET did not answer an array")));
        };
        if vals.len() != names.len() {
            return Err(run_err(format!(
                "{server}: MGET of {} keys answered {}",
                names.len(),
                vals.len()
            )));
        }
        for (name, v) in names.iter().zip(vals) {
            match v {
                Reply::Bulk(None) => {}
                Reply::Bulk(Some(v)) => {
                    if v.len() != cfg.value_bytes {
                        return Err(run_err(format!(
                            "{server}: {name} holds {} bytes, redis-benchmark wrote {}",
                            v.len(),
                            cfg.value_bytes
                        )));
                    }
                    let p = payload.get_or_insert_with(|| v.clone());
                    if *p != v {
                        return Err(run_err(format!(
                            "{server}: {name} holds another payload than the other keys"
                        )));
                    }
                    found += 1;
                }
                _ => {
                    return Err(run_err(format!(
                        "{server}: MGET answered a non-bulk element"
                    )))
                }
            }
        }
        first += BATCH;
    }
    if found != dbsize as u64 {
        return Err(run_err(format!(
            "{server}: DBSIZE {dbsize} but {found} of redis-benchmark's keys found"
        )));
    }
    if found == 0 {
        return Err(run_err(format!(
            "{server}: no key of redis-benchmark's was found"
        )));
    }
    Ok(KvBenchCheck {
        server: server.to_string(),
        dbsize: dbsize as u64,
        keys_found: found,
    })
}

/// Run the benchmark: ecstack's server first, then redis-server, with the same arguments.
pub fn run(cfg: &KvBenchConfig, progress: &dyn Fn(&str)) -> Result<KvBenchReport> {
    let mut rows = Vec::new();
    let mut checks = Vec::new();
    // ecstack: a store over a memory-backed array, everysec like redis's default appendfsync.
    let array = memory_array(cfg)?;
    let kcfg = KvConfig {
        durability: Durability::EverySec,
        cache_entries: cfg.keys as usize,
        ..KvConfig::default()
    };
    let store = Arc::new(
        KvStore::create(Arc::clone(&array) as Arc<dyn BlockDevice>, &kcfg)
            .map_err(|e| run_err(e.to_string()))?,
    );
    store.spawn_syncer(Duration::from_secs(1));
    let scfg = ServerConfig {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        group_commit: cfg.group_commit,
        // A memory array: a read never waits long, so read-only batches run on the tokio task.
        inline_reads: true,
        ..ServerConfig::default()
    };
    let server = spawn(Arc::clone(&store), scfg).map_err(|e| run_err(format!("kv server: {e}")))?;
    let name = format!(
        "ecstack kv ({} {}+{} memory array)",
        cfg.scheme, cfg.k, cfg.m
    );
    progress(&format!("redis-benchmark against {name}"));
    for (test, rps, cpu) in redis_benchmark(server.addr().port(), cfg, std::process::id())? {
        rows.push(KvBenchRow {
            server: name.clone(),
            test,
            requests_per_s: rps,
            server_cpu_us_per_request: cpu,
        });
    }
    checks.push(check(server.addr().port(), &name, cfg)?);
    server
        .stop()
        .map_err(|e| run_err(format!("kv server: {e}")))?;
    store.sync().map_err(|e| run_err(e.to_string()))?;
    drop(store);
    array.close()?;
    // redis-server, persistence off.
    let port = crate::free_loopback_port()?;
    let mut child = spawn_redis_server(port)?;
    let pid = child.id();
    let res = wait_ping(port).and_then(|()| {
        progress("redis-benchmark against redis-server");
        let rows = redis_benchmark(port, cfg, pid)?;
        Ok((rows, check(port, "redis-server", cfg)?))
    });
    let _ = child.kill();
    let _ = child.wait();
    let (res, chk) = res?;
    checks.push(chk);
    for (test, rps, cpu) in res {
        rows.push(KvBenchRow {
            server: "redis-server".into(),
            test,
            requests_per_s: rps,
            server_cpu_us_per_request: cpu,
        });
    }
    let mut ratios = Vec::new();
    let mut cpu_ratios = Vec::new();
    for r in rows.iter().filter(|r| r.server != "redis-server") {
        if let Some(peer) = rows
            .iter()
            .find(|p| p.server == "redis-server" && p.test == r.test)
        {
            ratios.push((r.test.clone(), r.requests_per_s / peer.requests_per_s));
            if let (Some(ours), Some(theirs)) =
                (r.server_cpu_us_per_request, peer.server_cpu_us_per_request)
            {
                if ours > 0.0 {
                    cpu_ratios.push((r.test.clone(), theirs / ours));
                }
            }
        }
    }
    Ok(KvBenchReport {
        config: cfg.clone(),
        redis_benchmark_args: bench_args(cfg).join(" "),
        rows,
        checks,
        ratios,
        cpu_ratios,
    })
}

impl KvBenchReport {
    /// A Markdown table in the lab's report style.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "redis-benchmark {} (one invocation per test)\n\n| server | test | requests/s | server CPU µs per request |\n|---|---|---:|---:|\n",
            self.redis_benchmark_args
        );
        for r in &self.rows {
            let cpu = r
                .server_cpu_us_per_request
                .map_or("-".to_string(), |c| format!("{c:.2}"));
            s.push_str(&format!(
                "| {} | {} | {:.0} | {cpu} |\n",
                r.server, r.test, r.requests_per_s
            ));
        }
        s.push_str("\n| server | DBSIZE after | keys read back with the run's payload |\n|---|---:|---:|\n");
        for c in &self.checks {
            s.push_str(&format!(
                "| {} | {} | {} |\n",
                c.server, c.dbsize, c.keys_found
            ));
        }
        s.push_str("\n| test | ecstack ÷ redis-server |\n|---|---:|\n");
        for (t, x) in &self.ratios {
            s.push_str(&format!("| {t} | {x:.2} |\n"));
        }
        if !self.cpu_ratios.is_empty() {
            s.push_str(
                "\n| test | CPU per request, redis-server ÷ ecstack (≥ 0.5: within 2×) |\n|---|---:|\n",
            );
            for (t, x) in &self.cpu_ratios {
                s.push_str(&format!("| {t} | {x:.2} |\n"));
            }
        }
        s
    }
}
