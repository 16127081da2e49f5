//! Prometheus metrics: counters, gauges and latency histograms in a [`Registry`], rendered in the
//! Prometheus text exposition format (version 0.0.4), and [`serve_metrics`], a minimal HTTP/1.1
//! server for `GET /metrics` on a loopback port.
//!
//! Metric names follow Prometheus conventions: `ecstack_<process>_<what>_<unit>`, counters end in
//! `_total`, latencies are histograms in seconds over [`LATENCY_BUCKETS_SECONDS`]. A metric has a
//! fixed list of label names; each combination of label values is one series, made on first use.
//! The endpoint is plain, unauthenticated HTTP: it binds loopback unless configured otherwise.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Upper bounds of latency buckets, seconds (100 µs to 10 s; `+Inf` is implicit).
pub const LATENCY_BUCKETS_SECONDS: [f64; 15] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    10.0,
];
/// Largest HTTP request head the metrics server reads.
pub const REQUEST_HEAD_BYTES_MAX: usize = 8 << 10;
/// Bytes of unread request the server drains after answering, at most.
const DRAIN_BYTES_MAX: usize = 64 << 10;
/// How long the metrics server waits for a request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Series per metric (label combinations) at most; later ones are dropped and counted.
pub const SERIES_MAX: usize = 10_000;

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down (stored as f64 bits).
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    pub fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// A histogram of seconds over [`LATENCY_BUCKETS_SECONDS`].
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per-bucket (not cumulative) counts; the last one is `+Inf`.
    buckets: [AtomicU64; LATENCY_BUCKETS_SECONDS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS_SECONDS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(LATENCY_BUCKETS_SECONDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }
}

#[derive(Debug)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

#[derive(Debug, Clone)]
enum Series {
    Counter(Arc<Counter>),
    Gauge(Arc<Gauge>),
    Histogram(Arc<Histogram>),
}

#[derive(Debug)]
struct Family {
    name: String,
    help: String,
    kind: Kind,
    labels: Vec<String>,
    series: Mutex<BTreeMap<Vec<String>, Series>>,
    dropped: AtomicU64,
}

/// One metric with label names; `with(&[values])` returns the series of those label values.
#[derive(Debug, Clone)]
pub struct Metric(Arc<Family>);

impl Metric {
    fn series(&self, values: &[&str]) -> Option<Series> {
        let f = &self.0;
        if values.len() != f.labels.len() {
            // A caller bug; never a panic in a daemon: the sample is not recorded.
            f.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        let mut map = f.series.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = map.get(&key) {
            return Some(s.clone());
        }
        if map.len() >= SERIES_MAX {
            f.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let s = match f.kind {
            Kind::Counter => Series::Counter(Arc::default()),
            Kind::Gauge => Series::Gauge(Arc::default()),
            Kind::Histogram => Series::Histogram(Arc::default()),
        };
        map.insert(key, s.clone());
        Some(s)
    }

    /// The counter of these label values (a detached one when the metric is not a counter or
    /// the values do not match its labels).
    pub fn counter(&self, values: &[&str]) -> Arc<Counter> {
        match self.series(values) {
            Some(Series::Counter(c)) => c,
            _ => Arc::default(),
        }
    }

    pub fn gauge(&self, values: &[&str]) -> Arc<Gauge> {
        match self.series(values) {
            Some(Series::Gauge(g)) => g,
            _ => Arc::default(),
        }
    }

    pub fn histogram(&self, values: &[&str]) -> Arc<Histogram> {
        match self.series(values) {
            Some(Series::Histogram(h)) => h,
            _ => Arc::default(),
        }
    }
}

/// All metrics of one process, in registration order.
#[derive(Debug, Default)]
pub struct Registry {
    families: Mutex<Vec<Arc<Family>>>,
}

impl Registry {
    pub fn new() -> Arc<Registry> {
        Arc::new(Registry::default())
    }

    fn register(&self, name: &str, help: &str, kind: Kind, labels: &[&str]) -> Metric {
        let mut families = self.families.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = families.iter().find(|f| f.name == name) {
            return Metric(f.clone());
        }
        let f = Arc::new(Family {
            name: name.to_owned(),
            help: help.to_owned(),
            kind,
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
            series: Mutex::new(BTreeMap::new()),
            dropped: AtomicU64::new(0),
        });
        families.push(f.clone());
        Metric(f)
    }

    /// A counter metric (`name` should end in `_total`) with these label names.
    pub fn counter(&self, name: &str, help: &str, labels: &[&str]) -> Metric {
        self.register(name, help, Kind::Counter, labels)
    }

    pub fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> Metric {
        self.register(name, help, Kind::Gauge, labels)
    }

    /// A latency histogram in seconds (`name` should end in `_seconds`).
    pub fn histogram(&self, name: &str, help: &str, labels: &[&str]) -> Metric {
        self.register(name, help, Kind::Histogram, labels)
    }

    /// Every metric in the Prometheus text format.
    pub fn render(&self) -> String {
        let families = self
            .families
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut out = String::new();
        for f in &families {
            render_family(&mut out, f);
        }
        out
    }
}

/// Escapes a label value or help text for the text format.
fn escape(s: &str, quote: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// `{a="x",b="y"}` (empty when there are no labels), with an optional extra label.
fn label_set(names: &[String], values: &[String], extra: Option<(&str, &str)>) -> String {
    let mut parts: Vec<String> = names
        .iter()
        .zip(values)
        .map(|(n, v)| format!("{n}=\"{}\"", escape(v, true)))
        .collect();
    if let Some((n, v)) = extra {
        parts.push(format!("{n}=\"{v}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// A float as Prometheus writes it (`+Inf`, integers without a fraction).
fn fmt_value(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else if v.is_nan() {
        "NaN".to_owned()
    } else {
        format!("{v}")
    }
}

fn render_family(out: &mut String, f: &Family) {
    let _ = writeln!(out, "# HELP {} {}", f.name, escape(&f.help, false));
    let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.name());
    let series = f.series.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for (values, s) in &series {
        match s {
            Series::Counter(c) => {
                let _ = writeln!(
                    out,
                    "{}{} {}",
                    f.name,
                    label_set(&f.labels, values, None),
                    c.get()
                );
            }
            Series::Gauge(g) => {
                let labels = label_set(&f.labels, values, None);
                let _ = writeln!(out, "{}{labels} {}", f.name, fmt_value(g.get()));
            }
            Series::Histogram(h) => {
                let mut cumulative = 0u64;
                for (i, b) in h.buckets.iter().enumerate() {
                    cumulative += b.load(Ordering::Relaxed);
                    let le = LATENCY_BUCKETS_SECONDS
                        .get(i)
                        .map_or("+Inf".to_owned(), |b| fmt_value(*b));
                    let labels = label_set(&f.labels, values, Some(("le", &le)));
                    let _ = writeln!(out, "{}_bucket{labels} {cumulative}", f.name);
                }
                let labels = label_set(&f.labels, values, None);
                let sum = h.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
                let _ = writeln!(out, "{}_sum{labels} {}", f.name, fmt_value(sum));
                let _ = writeln!(out, "{}_count{labels} {cumulative}", f.name);
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on {addr}: {source}")]
pub struct MetricsError {
    pub addr: String,
    pub source: std::io::Error,
}

/// Serves `GET /metrics` on `addr` (`127.0.0.1:0` picks a free port) with the text `render`
/// returns, until the returned task is aborted or the runtime stops. Returns the bound address
/// (for the daemon to log) and the server task. Other paths get 404, other methods 405.
pub async fn serve_metrics<F, Fut>(
    addr: &str,
    render: F,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), MetricsError>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = String> + Send + 'static,
{
    let err = |source| MetricsError {
        addr: addr.to_owned(),
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(err)?;
    let local = listener.local_addr().map_err(err)?;
    if !local.ip().is_loopback() {
        tracing::warn!(%local, "metrics endpoint is not on a loopback address; it has no authentication");
    }
    let render = Arc::new(render);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of file descriptors and the like: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let render = render.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &*render)).await;
            });
        }
    });
    Ok((local, task))
}

/// [`serve_metrics`] for a [`Registry`].
pub async fn serve_registry(
    addr: &str,
    registry: Arc<Registry>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), MetricsError> {
    serve_metrics(addr, move || {
        let r = registry.clone();
        async move { r.render() }
    })
    .await
}

/// Reads one request head and answers it; the connection closes after the answer.
async fn answer<F, Fut>(mut stream: TcpStream, render: &F) -> std::io::Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = String>,
{
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > REQUEST_HEAD_BYTES_MAX {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "request head too large\n",
            )
            .await;
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => {
            let body = render().await;
            respond(
                &mut stream,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
            )
            .await
        }
        (_, "/metrics") => {
            respond(
                &mut stream,
                "405 Method Not Allowed",
                "text/plain",
                "only GET\n",
            )
            .await
        }
        _ => {
            respond(
                &mut stream,
                "404 Not Found",
                "text/plain",
                "metrics are at /metrics\n",
            )
            .await
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await?;
    // Read what the client still sends (bounded in bytes and time) so that closing with unread
    // input does not reset the connection before the client has read the answer.
    let mut buf = [0u8; 4096];
    let mut drained = 0usize;
    while drained < DRAIN_BYTES_MAX {
        match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => break,
        }
    }
    Ok(())
}
