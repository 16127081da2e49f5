//! Prometheus metrics: counters, gauges and latency histograms in a [`Registry`] (a thin layer over
//! `prometheus-client`'s registry and metric families, for label names known only at run time),
//! rendered by `prometheus-client` in the Prometheus text exposition format (version 0.0.4), and
//! [`serve_metrics`], a minimal HTTP/1.1 server for `GET /metrics` on a loopback port.
//!
//! Metric names follow Prometheus conventions: `ecstack_<process>_<what>_<unit>`, counters end in
//! `_total`, latencies are histograms in seconds over [`LATENCY_BUCKETS_SECONDS`]. A metric has a
//! fixed list of label names; each combination of label values is one series, made on first use.
//! The endpoint is plain, unauthenticated HTTP: it binds loopback unless configured otherwise.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter as PromCounter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge as PromGauge;
use prometheus_client::metrics::histogram::Histogram as PromHistogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The `Content-Type` of the text the server answers with (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;
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
#[derive(Debug, Clone, Default)]
pub struct Counter(PromCounter);

impl Counter {
    pub fn inc(&self) {
        self.0.inc();
    }
    pub fn add(&self, n: u64) {
        self.0.inc_by(n);
    }
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

/// A value that goes up and down.
#[derive(Debug, Clone, Default)]
pub struct Gauge(PromGauge<f64, AtomicU64>);

impl Gauge {
    pub fn set(&self, v: f64) {
        self.0.set(v);
    }
    pub fn get(&self) -> f64 {
        self.0.get()
    }
}

/// A histogram of seconds over [`LATENCY_BUCKETS_SECONDS`].
#[derive(Debug, Clone)]
pub struct Histogram(PromHistogram);

impl Default for Histogram {
    fn default() -> Self {
        Histogram(latency_histogram())
    }
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        self.0.observe(d.as_secs_f64());
    }
}

/// A `prometheus-client` histogram over [`LATENCY_BUCKETS_SECONDS`] (the constructor of latency
/// families).
pub fn latency_histogram() -> PromHistogram {
    PromHistogram::new(LATENCY_BUCKETS_SECONDS)
}

/// Label values in label-name order, paired with their names.
type LabelSet = Vec<(String, String)>;

#[derive(Debug, Clone)]
enum Kind {
    Counter(Family<LabelSet, PromCounter>),
    Gauge(Family<LabelSet, PromGauge<f64, AtomicU64>>),
    Histogram(Family<LabelSet, PromHistogram, fn() -> PromHistogram>),
}

/// One metric with label names; `counter`/`gauge`/`histogram(&[values])` return the series of
/// those label values.
#[derive(Debug, Clone)]
pub struct Metric {
    labels: Arc<[String]>,
    kind: Kind,
    /// Series made so far (held while one is made, so the family stops at [`SERIES_MAX`]).
    series: Arc<Mutex<usize>>,
    /// Samples not recorded: label values that do not match the names, or a full family.
    dropped: Arc<AtomicU64>,
}

impl Metric {
    /// The series of `values` in `family`, made on first use; None (counted as dropped) when the
    /// values do not match the label names or the family already has [`SERIES_MAX`] series.
    fn series<M, C>(&self, family: &Family<LabelSet, M, C>, values: &[&str]) -> Option<M>
    where
        M: Clone,
        C: MetricConstructor<M>,
    {
        if values.len() != self.labels.len() {
            // A caller bug; never a panic in a daemon: the sample is not recorded.
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let set: LabelSet = self
            .labels
            .iter()
            .zip(values)
            .map(|(n, v)| (n.clone(), (*v).to_owned()))
            .collect();
        if let Some(m) = family.get(&set) {
            return Some(m.clone());
        }
        let mut made = self.series.lock().unwrap_or_else(|p| p.into_inner());
        if family.get(&set).is_none() {
            if *made >= SERIES_MAX {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            *made += 1;
        }
        Some(family.get_or_create_owned(&set))
    }

    /// The counter of these label values (a detached one when the metric is not a counter or
    /// the values do not match its labels).
    pub fn counter(&self, values: &[&str]) -> Counter {
        match &self.kind {
            Kind::Counter(f) => self.series(f, values).map(Counter).unwrap_or_default(),
            _ => Counter::default(),
        }
    }

    pub fn gauge(&self, values: &[&str]) -> Gauge {
        match &self.kind {
            Kind::Gauge(f) => self.series(f, values).map(Gauge).unwrap_or_default(),
            _ => Gauge::default(),
        }
    }

    pub fn histogram(&self, values: &[&str]) -> Histogram {
        match &self.kind {
            Kind::Histogram(f) => self.series(f, values).map(Histogram).unwrap_or_default(),
            _ => Histogram::default(),
        }
    }

    /// Samples not recorded (label values not matching the names, or past [`SERIES_MAX`]).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// All metrics of one process, in registration order.
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<RegistryInner>,
}

#[derive(Debug, Default)]
struct RegistryInner {
    prom: prometheus_client::registry::Registry,
    /// Registered metrics by name (as given), so registering a name again returns the same one.
    by_name: Vec<(String, Metric)>,
}

impl Registry {
    pub fn new() -> Arc<Registry> {
        Arc::new(Registry::default())
    }

    fn register(&self, name: &str, help: &str, labels: &[&str], kind: Kind) -> Metric {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, m)) = inner.by_name.iter().find(|(n, _)| n == name) {
            return m.clone();
        }
        let metric = Metric {
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
            kind,
            series: Arc::default(),
            dropped: Arc::default(),
        };
        match &metric.kind {
            // prometheus-client appends `_total` to a counter's name itself.
            Kind::Counter(f) => {
                let base = name.strip_suffix("_total").unwrap_or(name);
                inner.prom.register(base, help, f.clone());
            }
            Kind::Gauge(f) => inner.prom.register(name, help, f.clone()),
            Kind::Histogram(f) => inner.prom.register(name, help, f.clone()),
        }
        inner.by_name.push((name.to_owned(), metric.clone()));
        metric
    }

    /// A counter metric (`name` should end in `_total`) with these label names.
    pub fn counter(&self, name: &str, help: &str, labels: &[&str]) -> Metric {
        self.register(name, help, labels, Kind::Counter(Family::default()))
    }

    pub fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> Metric {
        self.register(name, help, labels, Kind::Gauge(Family::default()))
    }

    /// A latency histogram in seconds (`name` should end in `_seconds`).
    pub fn histogram(&self, name: &str, help: &str, labels: &[&str]) -> Metric {
        let family = Family::new_with_constructor(latency_histogram as fn() -> PromHistogram);
        self.register(name, help, labels, Kind::Histogram(family))
    }

    /// Every metric in the Prometheus text format.
    pub fn render(&self) -> String {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        encode(&inner.prom)
    }
}

/// A `prometheus-client` registry in the Prometheus text format (version 0.0.4).
pub fn encode(registry: &prometheus_client::registry::Registry) -> String {
    let mut out = String::new();
    // Writing into a String does not fail.
    let _ = prometheus_text::encode(&mut out, registry);
    out
}

/// Registers one gauge per (name, help, value) in `registry`, set to the value (a value past
/// `i64::MAX` reads as `i64::MAX`): for metrics rendered from a snapshot at scrape time.
pub fn register_gauges(
    registry: &mut prometheus_client::registry::Registry,
    gauges: &[(&str, &str, u64)],
) {
    for &(name, help, v) in gauges {
        let g = PromGauge::<i64>::default();
        g.set(i64::try_from(v).unwrap_or(i64::MAX));
        registry.register(name, help, g);
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
            respond(&mut stream, "200 OK", CONTENT_TYPE, &body).await
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
