//! Throttled wrapper: requests take at least the configured transfer time and latency, and the latency
//! draws are reproducible from the seed.

use std::time::{Duration, Instant};

use ecstack_device::{BlockDevice, LatencyDist, MemDevice, SplitMix64, ThrottleConfig, Throttled};

#[test]
fn bandwidth_and_latency_are_imposed() {
    // 256 KiB at 4 MiB/s = 62.5 ms of transfer, plus 4 x 5 ms of latency.
    let cfg = ThrottleConfig {
        bandwidth: Some(4.0 * 1024.0 * 1024.0),
        latency: LatencyDist::Fixed { ns: 5_000_000 },
        seed: 1,
    };
    let t = Throttled::new(MemDevice::new(1 << 20).unwrap(), cfg);
    let buf = vec![0u8; 64 * 1024];
    let start = Instant::now();
    for i in 0..4u64 {
        t.write_at(&buf, i * 65_536).unwrap();
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_micros(62_500 + 20_000),
        "took {took:?}"
    );
    let s = t.stats();
    assert_eq!(s.write_ops, 4);
    assert!(s.modeled_ns >= 82_000_000, "delayed {} ns", s.modeled_ns);
}

#[test]
fn latency_distributions_are_seeded_and_shaped() {
    let draw = |d: LatencyDist, seed| {
        let mut r = SplitMix64::new(seed);
        (0..20_000).map(|_| d.sample(&mut r)).collect::<Vec<u64>>()
    };
    let u = LatencyDist::Uniform {
        min_ns: 100,
        max_ns: 200,
    };
    let a = draw(u, 3);
    assert_eq!(a, draw(u, 3));
    assert!(a.iter().all(|&x| (100..=200).contains(&x)));
    let e = draw(LatencyDist::Exponential { mean_ns: 1000 }, 4);
    let mean = e.iter().sum::<u64>() as f64 / e.len() as f64;
    assert!((900.0..1100.0).contains(&mean), "exponential mean {mean}");
    let mut l = draw(
        LatencyDist::LogNormal {
            median_ns: 1000,
            sigma: 1.0,
        },
        5,
    );
    l.sort_unstable();
    let median = l[l.len() / 2] as f64;
    assert!(
        (900.0..1100.0).contains(&median),
        "log-normal median {median}"
    );
    assert!(
        l[l.len() * 99 / 100] > 5 * 1000,
        "log-normal tail too light"
    );
    assert_eq!(draw(LatencyDist::None, 1)[0], 0);
}
