//! The metrics endpoint over a real socket: `GET /metrics` returns Prometheus text that parses
//! (every sample belongs to a family with HELP and TYPE, histogram buckets are cumulative and end
//! in `+Inf` equal to `_count`), other requests get clean HTTP errors.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use ecstack_rpc::metrics::{serve_registry, Registry, LATENCY_BUCKETS_SECONDS};

/// One blocking HTTP/1.1 request over a raw socket (what curl or Prometheus would send).
fn http(addr: std::net::SocketAddr, request: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("a head and a body");
    (head.to_owned(), body.to_owned())
}

/// A sample line: `name{labels} value`.
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn parse_sample(line: &str) -> Sample {
    let (series, value) = line.rsplit_once(' ').expect("name and value");
    let value = match value {
        "+Inf" => f64::INFINITY,
        v => v
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}")),
    };
    let (name, labels) = match series.split_once('{') {
        None => (series.to_owned(), BTreeMap::new()),
        Some((name, rest)) => {
            let inner = rest.strip_suffix('}').expect("closing brace");
            let labels = inner
                .split(',')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("k=v");
                    let v = v
                        .strip_prefix('"')
                        .and_then(|v| v.strip_suffix('"'))
                        .expect("quoted");
                    (k.to_owned(), v.to_owned())
                })
                .collect();
            (name.to_owned(), labels)
        }
    };
    assert!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "bad metric name {name:?}"
    );
    Sample {
        name,
        labels,
        value,
    }
}

#[test]
fn metrics_endpoint_serves_parseable_prometheus_text() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let registry = Registry::new();
    let ops = registry.counter("ecstack_test_requests_total", "Requests by op.", &["op"]);
    let osds = registry.gauge("ecstack_test_osds", "OSDs by state.", &["state"]);
    let lat = registry.histogram("ecstack_test_request_seconds", "Request latency.", &["op"]);
    ops.counter(&["put"]).add(3);
    ops.counter(&["get"]).inc();
    osds.gauge(&["up"]).set(7.0);
    osds.gauge(&["down"]).set(1.0);
    let delays_ms = [0u64, 1, 3, 20, 200, 20_000];
    for ms in delays_ms {
        lat.histogram(&["put"]).observe(Duration::from_millis(ms));
    }
    // A caller bug (wrong label count) is dropped, not a panic.
    ops.counter(&["put", "extra"]).inc();

    let (addr, task) = rt
        .block_on(serve_registry("127.0.0.1:0", registry.clone()))
        .unwrap();
    assert!(addr.ip().is_loopback());

    let (head, body) = http(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");

    let mut types = BTreeMap::new();
    let mut helps = 0;
    let mut samples = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "TYPE twice: {name}"
            );
        } else if line.starts_with("# HELP ") {
            helps += 1;
        } else if !line.is_empty() {
            samples.push(parse_sample(line));
        }
    }
    assert_eq!(helps, types.len());
    for s in &samples {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                s.name
                    .strip_suffix(suffix)
                    .filter(|f| types.get(*f).map(String::as_str) == Some("histogram"))
            })
            .unwrap_or(&s.name);
        assert!(types.contains_key(family), "sample {} without TYPE", s.name);
    }
    let value = |name: &str, labels: &[(&str, &str)]| -> f64 {
        samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .unwrap_or_else(|| panic!("no sample {name} {labels:?}"))
            .value
    };
    assert_eq!(types["ecstack_test_requests_total"], "counter");
    assert_eq!(value("ecstack_test_requests_total", &[("op", "put")]), 3.0);
    assert_eq!(value("ecstack_test_requests_total", &[("op", "get")]), 1.0);
    assert_eq!(value("ecstack_test_osds", &[("state", "up")]), 7.0);

    // Histogram: cumulative buckets in increasing `le`, the last `+Inf` == _count, and each
    // bucket counts exactly the observations at or below its bound (checked against the delays).
    assert_eq!(types["ecstack_test_request_seconds"], "histogram");
    let buckets: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.name == "ecstack_test_request_seconds_bucket")
        .map(|s| {
            let le = &s.labels["le"];
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            (le, s.value)
        })
        .collect();
    assert_eq!(buckets.len(), LATENCY_BUCKETS_SECONDS.len() + 1);
    assert_eq!(buckets.last().unwrap().0, f64::INFINITY);
    for w in buckets.windows(2) {
        assert!(w[0].0 < w[1].0 && w[0].1 <= w[1].1, "{w:?}");
    }
    for (le, count) in &buckets {
        let expected = delays_ms
            .iter()
            .filter(|&&ms| ms as f64 / 1000.0 <= *le)
            .count();
        assert_eq!(*count, expected as f64, "le={le}");
    }
    let count = value("ecstack_test_request_seconds_count", &[("op", "put")]);
    assert_eq!(count, delays_ms.len() as f64);
    let sum = value("ecstack_test_request_seconds_sum", &[("op", "put")]);
    let expected_sum = delays_ms.iter().sum::<u64>() as f64 / 1000.0;
    assert!((sum - expected_sum).abs() < 1e-9, "{sum} vs {expected_sum}");

    // Counters grow between scrapes.
    ops.counter(&["put"]).add(2);
    let (_, body) = http(addr, "GET /metrics HTTP/1.0\r\n\r\n");
    assert!(
        body.contains("ecstack_test_requests_total{op=\"put\"} 5\n"),
        "{body}"
    );

    let (head, _) = http(addr, "GET / HTTP/1.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    let (head, _) = http(addr, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 405"), "{head}");
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(10_000));
    let (head, _) = http(addr, &huge);
    assert!(head.starts_with("HTTP/1.1 431"), "{head}");
    task.abort();
}
