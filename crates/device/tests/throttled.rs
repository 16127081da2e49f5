//! Throttled wrapper: requests take at least the configured transfer time and latency, and the latency
//! draws are reproducible from the seed.

use std::time::{Duration, Instant};

use ecstack_device::{
    BlockDevice, LatencyDist, MemDevice, ServiceProfile, SplitMix64, ThrottleConfig, Throttled,
};

#[test]
fn bandwidth_and_latency_are_imposed() {
    // 256 KiB at 4 MiB/s = 62.5 ms of transfer, plus 4 x 5 ms of latency.
    let cfg = ThrottleConfig {
        bandwidth: Some(4.0 * 1024.0 * 1024.0),
        profile: None,
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
    // Sleeps are shortened by the mean wake-up lateness (tens of µs), hence the 1 % slack.
    assert!(took >= Duration::from_micros(81_600), "took {took:?}");
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

/// A service profile charges each request its kind's time: 4 KiB random reads on the EPLOG SSD take
/// 4096 B / 32.8 MB/s = 124.9 µs each, sequential 4 KiB writes on the EPLOG HDD 44.7 µs, random ones
/// 3.72 ms; and the device is one server, so requests from two threads queue behind each other.
#[test]
fn service_profile_charges_by_kind_and_queues() {
    let ssd = ServiceProfile::preset("eplog-ssd").unwrap();
    let hdd = ServiceProfile::preset("eplog-hdd").unwrap();
    let near = |got: u64, want: f64| (got as f64 - want).abs() < want * 0.01;
    assert!(near(ssd.service_ns(false, false, 4096), 124_878.0));
    assert!(near(ssd.service_ns(true, false, 4096), 43_995.0));
    assert!(near(hdd.service_ns(true, true, 4096), 44_716.0));
    assert!(near(hdd.service_ns(true, false, 4096), 3_723_636.0));
    // Long transfers approach the streaming rate: 1 MiB sequential on the SSD ≈ setup + 2.1 ms.
    let big = ssd.service_ns(false, true, 1 << 20);
    assert!((2_097_000..2_200_000).contains(&big), "1 MiB read {big} ns");
    assert!(ServiceProfile::preset("floppy").is_none());

    let dev = |p: ServiceProfile| {
        Throttled::new(
            MemDevice::new(64 << 20).unwrap(),
            ThrottleConfig {
                profile: Some(p),
                ..ThrottleConfig::default()
            },
        )
    };
    // 40 random 4 KiB reads (offsets 1 MiB apart) on the SSD: at least 40 × 124.9 µs.
    let d = dev(ssd);
    let mut buf = vec![0u8; 4096];
    let start = Instant::now();
    for i in 0..40u64 {
        d.read_at(&mut buf, (i * 7 % 40) << 20).unwrap();
    }
    // (5 % slack: sleeps end at the modeled time on average, some a little early.)
    assert!(
        start.elapsed() >= Duration::from_micros(40 * 118),
        "{:?}",
        start.elapsed()
    );
    // 20 appends on the HDD are sequential (fast); 20 scattered writes are random (slow).
    let h = dev(hdd);
    h.write_at(&buf, 0).unwrap(); // the first request has no predecessor: random
    let charged = |d: &Throttled<MemDevice>| d.service_charged().as_nanos() as u64;
    let (start, m0) = (Instant::now(), charged(&h));
    for i in 1..21u64 {
        h.write_at(&buf, i * 4096).unwrap();
    }
    let (seq, seq_ns) = (start.elapsed(), charged(&h) - m0);
    eprintln!("20 sequential HDD writes: {seq:?} (modeled 894 µs, charged {seq_ns} ns)");
    let (start, m0) = (Instant::now(), charged(&h));
    for i in 0..20u64 {
        h.write_at(&buf, ((i * 13 % 20) + 1) << 20).unwrap();
    }
    let (rand, rand_ns) = (start.elapsed(), charged(&h) - m0);
    // Wall time only bounds from below (a loaded machine makes any request slower than modeled);
    // the charges themselves (service time by kind, a function of the requests alone) are exact.
    assert!(seq >= Duration::from_micros(20 * 42), "sequential {seq:?}");
    assert!(rand >= Duration::from_micros(20 * 3_500), "random {rand:?}");
    let per_seq = hdd.service_ns(true, true, 4096);
    let per_rand = hdd.service_ns(true, false, 4096);
    assert_eq!(
        seq_ns,
        20 * per_seq,
        "20 sequential writes charged as sequential"
    );
    assert_eq!(
        rand_ns,
        20 * per_rand,
        "20 scattered writes charged as random"
    );
    assert!(
        per_rand > per_seq * 20,
        "random {per_rand} ns vs sequential {per_seq} ns"
    );
    // Two threads, 20 random SSD writes each: one server, so at least 40 × 44 µs in all.
    let d = std::sync::Arc::new(dev(ssd));
    let start = Instant::now();
    let hs: Vec<_> = (0..2u64)
        .map(|t| {
            let d = std::sync::Arc::clone(&d);
            std::thread::spawn(move || {
                let buf = vec![1u8; 4096];
                for i in 0..20u64 {
                    d.write_at(&buf, (t * 20 + i) << 20).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert!(
        start.elapsed() >= Duration::from_micros(40 * 41),
        "{:?}",
        start.elapsed()
    );
    assert!(d.stats().modeled_ns >= 40 * 43_000);
}

#[test]
fn profile_spec_parses_and_rejects() {
    let d = ecstack_device::open_spec("throttled:profile=eplog-hdd:mem:1M").unwrap();
    assert_eq!(d.capacity(), 1 << 20);
    let e = ecstack_device::open_spec("throttled:profile=tape:mem:1M")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown profile 'tape'") && e.contains("eplog-ssd"),
        "{e}"
    );
    let e = ecstack_device::open_spec("throttled:profile=eplog-ssd,bw=1M:mem:1M")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not both"), "{e}");
}

/// Two interleaved append streams: the HDD profile's sequential test looks at the last 32 ends
/// (NCQ), so both stay sequential; with `ncq=1` only the previous request counts, and every
/// request of the interleave is a random write (a seek each).
#[test]
fn ncq_sets_how_far_back_the_sequential_test_looks() {
    let charged = |spec: &str| {
        let d = ecstack_device::open_spec(spec).unwrap();
        let buf = vec![1u8; 4096];
        for i in 0..12u64 {
            let stream = (i % 2) << 19;
            d.write_at(&buf, stream + (i / 2) * 4096).unwrap();
        }
        d.stats().modeled_ns
    };
    let ncq32 = charged("throttled:profile=eplog-hdd:mem:1M");
    let ncq1 = charged("throttled:profile=eplog-hdd,ncq=1:mem:1M");
    // One request at a time: none is queued when the next arrives, so only the previous counts.
    let queued = charged("throttled:profile=eplog-hdd,ncq_queued=1:mem:1M");
    // Random 4 KiB writes at 1.1 MB/s take ~3.7 ms; sequential ones at 91.6 MB/s ~45 µs.
    assert!(ncq1 >= 11 * 3_500_000, "{ncq1}");
    assert!(queued >= 11 * 3_500_000, "{queued}");
    assert!(ncq32 <= 2 * 3_800_000 + 10 * 200_000, "{ncq32}");
    for (spec, want) in [
        ("throttled:ncq=1:mem:1M", "give a profile"),
        ("throttled:profile=eplog-hdd,ncq=0:mem:1M", "1 to 1024"),
        ("throttled:profile=eplog-hdd,ncq=x:mem:1M", "not a number"),
        ("throttled:ncq_queued=1:mem:1M", "give a profile"),
    ] {
        let e = ecstack_device::open_spec(spec).unwrap_err().to_string();
        assert!(e.contains(want), "{spec}: {e}");
    }
}
