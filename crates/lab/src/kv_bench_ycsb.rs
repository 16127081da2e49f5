//! `ecstack kv ycsb`: YCSB's core workloads A–F through a real YCSB client (site.ycsb:core 0.17.0
//! and the minimal Redis binding in `crates/kv/ycsb`, built with Maven on first use) against
//! `ecstack kv serve`'s server over a memory-backed erasure-coded array and against a real
//! redis-server (persistence off), with the same parameters in the same run.
//!
//! Per workload and server: a fresh server, YCSB's load phase (`-load`, `recordcount` records of
//! `fieldcount` × `fieldlength` bytes, one hash each plus a member of the sorted set `_indices`),
//! then the run phase (`-t`, `operationcount` operations, request distribution zipfian with YCSB's
//! constant 0.99, `latest` for D). Results are checked, not only timed: YCSB must report no failed
//! operation (reads must find their record), and after each phase DBSIZE and ZCARD `_indices` must
//! equal the records loaded plus those inserted.

use std::io::BufReader;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ecstack_array::SchemeKind;
use ecstack_device::BlockDevice;
use ecstack_kv::server::{spawn, ServerConfig};
use ecstack_kv::{Durability, KvConfig, KvStore};
use serde::Serialize;

use crate::kv_bench::{
    command, memory_array, read_reply, spawn_redis_server, wait_ping, KvBenchConfig, Reply,
};
use crate::{LabError, Result};

/// What the benchmark runs.
#[derive(Clone, Debug, Serialize)]
pub struct YcsbConfig {
    pub scheme: SchemeKind,
    pub k: usize,
    pub m: usize,
    /// Workloads, letters a..=f.
    pub workloads: Vec<char>,
    /// YCSB recordcount.
    pub records: u64,
    /// YCSB operationcount.
    pub operations: u64,
    /// YCSB -threads (one connection each).
    pub threads: usize,
    /// YCSB fieldcount and fieldlength.
    pub field_count: usize,
    pub field_bytes: usize,
    /// The Maven project of the YCSB client (default: `crates/kv/ycsb` of this source tree, or
    /// `ECSTACK_YCSB_DIR`).
    pub client_dir: PathBuf,
}

impl Default for YcsbConfig {
    fn default() -> Self {
        YcsbConfig {
            scheme: SchemeKind::Eplog,
            k: 6,
            m: 2,
            workloads: vec!['a', 'b', 'c', 'd', 'e', 'f'],
            records: 10_000,
            operations: 10_000,
            threads: 8,
            field_count: 10,
            field_bytes: 100,
            client_dir: default_client_dir(),
        }
    }
}

/// `ECSTACK_YCSB_DIR`, else `crates/kv/ycsb` of the source tree this crate was built from.
pub fn default_client_dir() -> PathBuf {
    match std::env::var_os("ECSTACK_YCSB_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../kv/ycsb"),
    }
}

/// YCSB's core workload `w` (its `workloads/workload{w}` files) as properties.
pub fn workload_properties(w: char) -> Option<Vec<(&'static str, &'static str)>> {
    let mut p = match w {
        'a' => vec![("readproportion", "0.5"), ("updateproportion", "0.5")],
        'b' => vec![("readproportion", "0.95"), ("updateproportion", "0.05")],
        'c' => vec![("readproportion", "1")],
        'd' => vec![
            ("readproportion", "0.95"),
            ("insertproportion", "0.05"),
            ("requestdistribution", "latest"),
        ],
        'e' => vec![
            ("scanproportion", "0.95"),
            ("insertproportion", "0.05"),
            ("maxscanlength", "100"),
            ("scanlengthdistribution", "uniform"),
        ],
        'f' => vec![
            ("readproportion", "0.5"),
            ("readmodifywriteproportion", "0.5"),
        ],
        _ => return None,
    };
    for k in [
        "readproportion",
        "updateproportion",
        "scanproportion",
        "insertproportion",
        "readmodifywriteproportion",
    ] {
        if !p.iter().any(|(x, _)| *x == k) {
            p.push((k, "0"));
        }
    }
    if !p.iter().any(|(x, _)| *x == "requestdistribution") {
        p.push(("requestdistribution", "zipfian"));
    }
    p.push(("readallfields", "true"));
    Some(p)
}

/// One operation kind of one run: YCSB's `[READ]`, `[UPDATE]`, … lines.
#[derive(Clone, Debug, Serialize)]
pub struct YcsbOp {
    pub op: String,
    pub operations: u64,
    pub average_us: f64,
    pub p99_us: f64,
}

/// One YCSB run phase against one server.
#[derive(Clone, Debug, Serialize)]
pub struct YcsbRun {
    pub server: String,
    pub workload: char,
    pub ops_per_s: f64,
    pub ops: Vec<YcsbOp>,
    /// DBSIZE after the run (= records + inserts + 1 for `_indices`).
    pub dbsize: u64,
}

/// ecstack ÷ redis-server for one workload.
#[derive(Clone, Debug, Serialize)]
pub struct YcsbRatio {
    pub workload: char,
    pub throughput: f64,
    /// (operation, average latency ratio, p99 latency ratio); above 1 means ecstack is slower.
    pub latency: Vec<(String, f64, f64)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct YcsbReport {
    pub config: YcsbConfig,
    pub runs: Vec<YcsbRun>,
    pub ratios: Vec<YcsbRatio>,
}

fn run_err(msg: String) -> LabError {
    LabError::Run(msg)
}

fn newest_mtime(p: &Path) -> Option<SystemTime> {
    let md = std::fs::metadata(p).ok()?;
    let mut t = md.modified().ok()?;
    if md.is_dir() {
        for e in std::fs::read_dir(p).ok()?.flatten() {
            if let Some(x) = newest_mtime(&e.path()) {
                t = t.max(x);
            }
        }
    }
    Some(t)
}

/// Build the YCSB client if its jar is missing or older than its sources; its classpath.
pub fn ensure_client(dir: &Path) -> Result<String> {
    for tool in ["java", "mvn"] {
        let ok = Command::new(tool)
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(run_err(format!(
                "the YCSB client needs '{tool}' (Debian: maven, default-jdk-headless; scripts/setup.sh installs them)"
            )));
        }
    }
    let jar = dir.join("target/ecstack-ycsb.jar");
    let lib = dir.join("target/lib");
    let src = [dir.join("pom.xml"), dir.join("src")]
        .iter()
        .filter_map(|p| newest_mtime(p))
        .max()
        .ok_or_else(|| {
            run_err(format!(
                "no YCSB client project in {} (set ECSTACK_YCSB_DIR)",
                dir.display()
            ))
        })?;
    let fresh = std::fs::metadata(&jar)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= src)
        && lib.is_dir();
    if !fresh {
        let o = Command::new("mvn")
            .args(["-q", "-B", "package"])
            .current_dir(dir)
            .output()
            .map_err(|e| run_err(format!("mvn: {e}")))?;
        if !o.status.success() {
            return Err(run_err(format!(
                "building the YCSB client (mvn -q -B package in {}) failed: {}{}",
                dir.display(),
                String::from_utf8_lossy(&o.stdout).trim(),
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
    }
    Ok(format!("{}:{}/*", jar.display(), lib.display()))
}

/// Run one YCSB phase; its output.
fn ycsb(cp: &str, load: bool, w: char, port: u16, cfg: &YcsbConfig) -> Result<String> {
    let mut c = Command::new("java");
    c.args([
        "-cp",
        cp,
        "site.ycsb.Client",
        if load { "-load" } else { "-t" },
    ])
    .args(["-db", "org.ecstack.ycsb.RedisHashClient"])
    .args(["-threads", &cfg.threads.to_string()]);
    let mut props: Vec<(String, String)> = vec![
        ("workload".into(), "site.ycsb.workloads.CoreWorkload".into()),
        ("recordcount".into(), cfg.records.to_string()),
        ("operationcount".into(), cfg.operations.to_string()),
        ("fieldcount".into(), cfg.field_count.to_string()),
        ("fieldlength".into(), cfg.field_bytes.to_string()),
        ("redis.host".into(), "127.0.0.1".into()),
        ("redis.port".into(), port.to_string()),
    ];
    let wp = workload_properties(w).ok_or_else(|| run_err(format!("no YCSB workload '{w}'")))?;
    props.extend(wp.into_iter().map(|(k, v)| (k.to_string(), v.to_string())));
    for (k, v) in props {
        c.args(["-p", &format!("{k}={v}")]);
    }
    let o = c
        .output()
        .map_err(|e| run_err(format!("java: {e} (install default-jdk-headless)")))?;
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    if !o.status.success() {
        return Err(run_err(format!(
            "YCSB {} of workload {w} failed: {}",
            if load { "load" } else { "run" },
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    Ok(out)
}

/// Parse YCSB's summary (`[SECTION], metric, value` lines); fail on any failed operation.
fn parse(out: &str, what: &str) -> Result<(f64, Vec<YcsbOp>, u64)> {
    let mut throughput = None;
    let mut ops: Vec<YcsbOp> = Vec::new();
    let mut inserts = 0;
    for line in out.lines() {
        let f: Vec<&str> = line.splitn(3, ',').map(str::trim).collect();
        if f.len() != 3 || !f[0].starts_with('[') {
            continue;
        }
        let sec = f[0].trim_matches(|c| c == '[' || c == ']');
        let val = f[2].parse::<f64>().ok();
        if sec == "OVERALL" && f[1] == "Throughput(ops/sec)" {
            throughput = val;
            continue;
        }
        if sec == "CLEANUP" || sec.ends_with("-FAILED") || sec == "OVERALL" {
            if sec.ends_with("-FAILED") && val.is_some_and(|v| v > 0.0) && f[1] == "Operations" {
                return Err(run_err(format!(
                    "{what}: YCSB reports failed {sec}: {line}"
                )));
            }
            continue;
        }
        if f[1].starts_with("Return=") && f[1] != "Return=OK" {
            return Err(run_err(format!(
                "{what}: YCSB reports {sec} {}",
                f[1..].join(" ")
            )));
        }
        if !sec.chars().all(|c| c.is_ascii_uppercase() || c == '-') {
            continue;
        }
        let i = match ops.iter().position(|o| o.op == sec) {
            Some(i) => i,
            None => {
                ops.push(YcsbOp {
                    op: sec.to_string(),
                    operations: 0,
                    average_us: 0.0,
                    p99_us: 0.0,
                });
                ops.len() - 1
            }
        };
        let Some(v) = val else { continue };
        match f[1] {
            "Operations" => {
                ops[i].operations = v as u64;
                if sec == "INSERT" {
                    inserts = v as u64;
                }
            }
            "AverageLatency(us)" => ops[i].average_us = v,
            "99thPercentileLatency(us)" => ops[i].p99_us = v,
            _ => {}
        }
    }
    ops.retain(|o| o.operations > 0);
    let t = throughput.ok_or_else(|| {
        run_err(format!(
            "{what}: no [OVERALL] throughput in YCSB's output: {out}"
        ))
    })?;
    Ok((t, ops, inserts))
}

/// DBSIZE and ZCARD _indices must both equal `keys` (+1 for `_indices` in DBSIZE).
fn check_keys(port: u16, keys: u64, what: &str) -> Result<u64> {
    let s =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| run_err(format!("connect: {e}")))?;
    let mut w = s.try_clone().map_err(|e| run_err(e.to_string()))?;
    let mut r = BufReader::new(s);
    command(&mut w, &[b"DBSIZE"])?;
    let Reply::Int(dbsize) = read_reply(&mut r)? else {
        return Err(run_err(format!("{what}: DBSIZE did not answer an integer")));
    };
    command(&mut w, &[b"ZCARD", b"_indices"])?;
    let Reply::Int(zcard) = read_reply(&mut r)? else {
        return Err(run_err(format!("{what}: ZCARD did not answer an integer")));
    };
    if dbsize as u64 != keys + 1 || zcard as u64 != keys {
        return Err(run_err(format!(
            "{what}: DBSIZE {dbsize} and ZCARD _indices {zcard}; YCSB wrote {keys} records"
        )));
    }
    Ok(dbsize as u64)
}

/// A running server of either kind.
enum Server {
    Ecstack {
        server: ecstack_kv::server::ServerHandle,
        store: Arc<KvStore>,
        array: Arc<ecstack_array::Array>,
    },
    Redis(std::process::Child),
}

impl Server {
    fn stop(self) -> Result<()> {
        match self {
            Server::Ecstack {
                server,
                store,
                array,
            } => {
                server
                    .stop()
                    .map_err(|e| run_err(format!("kv server: {e}")))?;
                store.sync().map_err(|e| run_err(e.to_string()))?;
                drop(store);
                array.close()?;
            }
            Server::Redis(mut c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        Ok(())
    }
}

fn start_ecstack(cfg: &YcsbConfig) -> Result<(Server, u16)> {
    // Room for every record (a hash and an `_indices` member each) written three times over.
    let bcfg = KvBenchConfig {
        scheme: cfg.scheme,
        k: cfg.k,
        m: cfg.m,
        keys: 2 * (cfg.records + cfg.operations / 10) + 64,
        value_bytes: cfg.field_count * (cfg.field_bytes + 16),
        ..KvBenchConfig::default()
    };
    let array = memory_array(&bcfg)?;
    let kcfg = KvConfig {
        durability: Durability::EverySec,
        cache_entries: bcfg.keys as usize,
        ..KvConfig::default()
    };
    let store = Arc::new(
        KvStore::create(Arc::clone(&array) as Arc<dyn BlockDevice>, &kcfg)
            .map_err(|e| run_err(e.to_string()))?,
    );
    store.spawn_syncer(Duration::from_secs(1));
    let scfg = ServerConfig {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        // A memory array: a read never waits long, so read-only batches run on the tokio task.
        inline_reads: true,
        ..ServerConfig::default()
    };
    let server = spawn(Arc::clone(&store), scfg).map_err(|e| run_err(format!("kv server: {e}")))?;
    let port = server.addr().port();
    Ok((
        Server::Ecstack {
            server,
            store,
            array,
        },
        port,
    ))
}

fn start_redis() -> Result<(Server, u16)> {
    let port = crate::free_loopback_port()?;
    let child = spawn_redis_server(port)?;
    let server = Server::Redis(child);
    if let Err(e) = wait_ping(port) {
        let _ = server.stop();
        return Err(e);
    }
    Ok((server, port))
}

/// Run the workloads: per workload, ecstack then redis-server, each fresh, loaded and run.
pub fn run(cfg: &YcsbConfig, progress: &dyn Fn(&str)) -> Result<YcsbReport> {
    for &w in &cfg.workloads {
        if workload_properties(w).is_none() {
            return Err(run_err(format!("no YCSB workload '{w}' (a..f)")));
        }
    }
    let cp = ensure_client(&cfg.client_dir)?;
    let ecstack_name = format!(
        "ecstack kv ({} {}+{} memory array)",
        cfg.scheme, cfg.k, cfg.m
    );
    let mut runs = Vec::new();
    for &w in &cfg.workloads {
        for redis in [false, true] {
            let name = if redis {
                "redis-server".to_string()
            } else {
                ecstack_name.clone()
            };
            let (server, port) = if redis {
                start_redis()?
            } else {
                start_ecstack(cfg)?
            };
            let res = (|| -> Result<YcsbRun> {
                progress(&format!("YCSB workload {w}: load against {name}"));
                let what = format!("{name}, workload {w} load");
                let out = ycsb(&cp, true, w, port, cfg)?;
                parse(&out, &what)?;
                check_keys(port, cfg.records, &what)?;
                progress(&format!("YCSB workload {w}: run against {name}"));
                let what = format!("{name}, workload {w} run");
                let out = ycsb(&cp, false, w, port, cfg)?;
                let (ops_per_s, ops, inserts) = parse(&out, &what)?;
                let dbsize = check_keys(port, cfg.records + inserts, &what)?;
                Ok(YcsbRun {
                    server: name.clone(),
                    workload: w,
                    ops_per_s,
                    ops,
                    dbsize,
                })
            })();
            server.stop()?;
            runs.push(res?);
        }
    }
    let mut ratios = Vec::new();
    for &w in &cfg.workloads {
        let ours = runs
            .iter()
            .find(|r| r.workload == w && r.server != "redis-server");
        let peer = runs
            .iter()
            .find(|r| r.workload == w && r.server == "redis-server");
        let (Some(a), Some(b)) = (ours, peer) else {
            continue;
        };
        let latency = a
            .ops
            .iter()
            .filter_map(|o| {
                let p = b.ops.iter().find(|p| p.op == o.op)?;
                Some((
                    o.op.clone(),
                    o.average_us / p.average_us.max(1e-9),
                    o.p99_us / p.p99_us.max(1e-9),
                ))
            })
            .collect();
        ratios.push(YcsbRatio {
            workload: w,
            throughput: a.ops_per_s / b.ops_per_s.max(1e-9),
            latency,
        });
    }
    Ok(YcsbReport {
        config: cfg.clone(),
        runs,
        ratios,
    })
}

impl YcsbReport {
    /// Markdown tables: throughput and latency per run, then the ratios.
    pub fn markdown(&self) -> String {
        let c = &self.config;
        let mut s = format!(
            "YCSB 0.17.0 core workloads, recordcount={} operationcount={} threads={} fieldcount={} fieldlength={} (zipfian 0.99; D: latest)\n\n\
             | workload | server | ops/s | operation: average / p99 latency (µs) |\n|---|---|---:|---|\n",
            c.records, c.operations, c.threads, c.field_count, c.field_bytes
        );
        for r in &self.runs {
            let ops: Vec<String> = r
                .ops
                .iter()
                .map(|o| format!("{} {:.0} / {:.0}", o.op, o.average_us, o.p99_us))
                .collect();
            s.push_str(&format!(
                "| {} | {} | {:.0} | {} |\n",
                r.workload.to_ascii_uppercase(),
                r.server,
                r.ops_per_s,
                ops.join("; ")
            ));
        }
        s.push_str(
            "\n| workload | throughput ecstack ÷ redis-server | latency ecstack ÷ redis-server (average, p99) |\n|---|---:|---|\n",
        );
        for r in &self.ratios {
            let lat: Vec<String> = r
                .latency
                .iter()
                .map(|(op, a, p)| format!("{op} {a:.2}, {p:.2}"))
                .collect();
            s.push_str(&format!(
                "| {} | {:.2} | {} |\n",
                r.workload.to_ascii_uppercase(),
                r.throughput,
                lat.join("; ")
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ycsb_summary_and_refuses_failures() {
        let out = "[OVERALL], RunTime(ms), 100\n[OVERALL], Throughput(ops/sec), 2500.0\n\
                   [READ], Operations, 120\n[READ], AverageLatency(us), 310.5\n\
                   [READ], 99thPercentileLatency(us), 900\n[READ], Return=OK, 120\n\
                   [INSERT], Operations, 5\n[INSERT], AverageLatency(us), 400\n\
                   [INSERT], 99thPercentileLatency(us), 800\n[INSERT], Return=OK, 5\n\
                   [CLEANUP], Operations, 1\n";
        let (t, ops, inserts) = parse(out, "t").unwrap();
        assert_eq!((t, inserts, ops.len()), (2500.0, 5, 2));
        assert_eq!(ops[0].op, "READ");
        assert_eq!((ops[0].average_us, ops[0].p99_us), (310.5, 900.0));
        let bad = format!("{out}[READ], Return=NOT_FOUND, 3\n");
        assert!(parse(&bad, "t").is_err());
        let failed = format!("{out}[READ-FAILED], Operations, 2\n");
        assert!(parse(&failed, "t").is_err());
        assert!(workload_properties('g').is_none());
        for w in 'a'..='f' {
            assert!(workload_properties(w).is_some());
        }
    }
}
