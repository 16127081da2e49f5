//! Concurrent callers: threads writing disjoint regions (sharing stripes at the borders) and readers
//! running alongside, with parity commits in between; the result matches each writer's model.

mod common;

use std::sync::Arc;

use common::*;
use ecstack_array::{Array, SchemeKind};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn array_is_send_and_sync() {
    assert_send_sync::<Array>();
}

/// Four threads write random extents (1 to `max_len` bytes, seeded by `seed`) into their own
/// quarter of the array, 150 each; after each write `after(thread, round, data, offset)` runs.
/// Returns the whole array's expected content.
fn write_quarters(
    a: &Array,
    seed: u64,
    max_len: usize,
    after: impl Fn(usize, usize, &[u8], u64) + Sync,
) -> Vec<u8> {
    let cap = a.size() as usize;
    let threads = 4;
    let region = cap / threads;
    let after = &after;
    let models: Vec<Vec<u8>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut rng = Rng::new(seed + t as u64);
                    let base = t * region;
                    let mut model = vec![0u8; region];
                    for i in 0..150 {
                        let len = 1 + rng.below(max_len as u64) as usize;
                        let off = rng.below((region - len) as u64) as usize;
                        let mut d = vec![0u8; len];
                        rng.fill(&mut d);
                        a.write(&d, (base + off) as u64).unwrap();
                        model[off..off + len].copy_from_slice(&d);
                        after(t, i, &d, (base + off) as u64);
                    }
                    model
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = vec![0u8; cap];
    for (t, m) in models.iter().enumerate() {
        all[t * region..(t + 1) * region].copy_from_slice(m);
    }
    all
}

fn concurrent(scheme: SchemeKind, k: usize, m: usize) {
    let rig = Rig::new(scheme, k, m, 77, false);
    let a = Array::create(&config(scheme, k, m), rig.devices()).unwrap();
    let max_len = a.size() as usize / 4 / 8;
    let all = write_quarters(&a, 1000, max_len, |t, i, d, off| {
        if i % 10 == 0 {
            let mut b = vec![0u8; d.len()];
            a.read(&mut b, off).unwrap();
            assert!(b == d, "thread {t}: read-your-write failed");
        }
        if t == 0 && i % 50 == 49 {
            a.commit().unwrap();
        }
    });
    verify_all(&a, &all, &format!("{scheme} concurrent"));
    a.fail_device(1).unwrap();
    verify_all(&a, &all, &format!("{scheme} concurrent, degraded"));
}

#[test]
fn concurrent_writers() {
    for s in SchemeKind::ALL {
        concurrent(s, 4, 2);
    }
}

/// The eplog stripe buffer: concurrent single-chunk updates share log stripes (fewer log-device
/// writes than requests), and every byte reads back, also with two devices failed (decoded from
/// log stripes that mix chunks of different requests). With the buffer off, each request writes its
/// own log chunks.
///
/// Returns (requests, batches, log writes, requests the buffer saw); the buffer sees a request
/// more than once when a write that found the spare slots full is retried after a parity commit.
fn stripe_buffer_run(in_flight: usize) -> (u64, u64, u64, u64) {
    let on = in_flight > 0;
    use ecstack_device::{LatencyDist, MemDevice, ThrottleConfig, Throttled};
    let (k, m) = (4, 2);
    let slow = |size: u64, seed: u64| -> Arc<dyn ecstack_device::BlockDevice> {
        let cfg = ThrottleConfig {
            bandwidth: None,
            profile: None,
            // Long enough that the other writers' next requests arrive while a batch is on the
            // devices even when this machine's scheduler is slow to wake them (at 300 µs the
            // batching check failed about 1 run in 6 under a loaded machine).
            latency: LatencyDist::Fixed { ns: 1_500_000 },
            seed,
        };
        Arc::new(Throttled::new(MemDevice::new(size).unwrap(), cfg))
    };
    let devices = ecstack_array::ArrayDevices {
        main: (0..k + m).map(|i| slow(MAIN_SIZE, i as u64)).collect(),
        log: (0..m).map(|i| slow(LOG_SIZE, 50 + i as u64)).collect(),
        meta: Arc::new(MemDevice::new(META_SIZE).unwrap()),
        specs: None,
    };
    let a = Arc::new(Array::create(&config(SchemeKind::Eplog, k, m), devices).unwrap());
    a.set_stripe_buffer(in_flight);
    let cap = a.size() as usize;
    let threads = 16;
    let chunks_per = cap / CHUNK as usize / threads;
    let per_thread = 12;
    a.reset_stats();
    let models: Vec<Vec<u8>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let a = Arc::clone(&a);
                s.spawn(move || {
                    let mut rng = Rng::new(500 + t as u64);
                    let region = chunks_per * CHUNK as usize;
                    let base = t * region;
                    let mut model = vec![0u8; region];
                    for _ in 0..per_thread {
                        let off = rng.below(chunks_per as u64) as usize * CHUNK as usize;
                        let mut d = vec![0u8; CHUNK as usize];
                        rng.fill(&mut d);
                        a.write(&d, (base + off) as u64).unwrap();
                        model[off..off + d.len()].copy_from_slice(&d);
                    }
                    model
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let st = a.status();
    let requests = (threads * per_thread) as u64;
    assert_eq!(st.requests.writes, requests);
    let log_ops = st.devices[k + m].io.write_ops;
    let (batches, buffered) = match st.stripe_buffer {
        Some(b) => {
            assert!(on);
            // At least once each (a write that found the spare slots full is retried after a
            // parity commit).
            assert!(
                b.requests >= requests,
                "every write went through the buffer"
            );
            // Every batch holds at least one request.
            assert!(
                b.batches <= b.requests,
                "{} batches for {} buffered requests",
                b.batches,
                b.requests
            );
            (b.batches, b.requests)
        }
        None => {
            assert!(!on);
            (requests, requests)
        }
    };
    let mut all = vec![0u8; cap];
    let region = chunks_per * CHUNK as usize;
    for (t, md) in models.iter().enumerate() {
        all[t * region..(t + 1) * region].copy_from_slice(md);
    }
    verify_all(&a, &all, "stripe buffer");
    a.fail_device(0).unwrap();
    a.fail_device(3).unwrap();
    verify_all(&a, &all, "stripe buffer, two main devices failed");
    (requests, batches, log_ops, buffered)
}

#[test]
fn stripe_buffer_shares_log_stripes_between_concurrent_requests() {
    // One batch in flight at a time: everything that arrives meanwhile joins the next one.
    let (requests, batches, log_ops, _) = stripe_buffer_run(1);
    eprintln!("stripe buffer on: {requests} requests, {batches} batches, {log_ops} log writes");
    assert!(
        batches * 2 <= requests,
        "{requests} requests in {batches} batches: the stripe buffer did not batch"
    );
    // One merged append per log device per batch.
    assert!(
        log_ops <= batches,
        "{log_ops} log writes for {batches} batches"
    );
    // The default: several batches in flight, every byte still reads back.
    let (_, batches, _, buffered) = stripe_buffer_run(ecstack_array::scheme::DEFAULT_IN_FLIGHT);
    assert!(batches <= buffered);
    let (requests, _, log_ops, _) = stripe_buffer_run(0);
    assert_eq!(
        log_ops, requests,
        "without the buffer every request appends its own log chunk"
    );
}

/// Paced devices (EPLOG's SSDs and HDDs emulated: `Throttled` with the Table 1 profiles over
/// memory) pace the array's batches (the work at once, one sleep per batch). Concurrent
/// writers on every scheme, one main device failing mid-run (its errors arrive through that path)
/// and a log device failing too: every byte reads back, and the failed devices are marked.
#[test]
fn paced_devices_with_failures_mid_run() {
    use ecstack_device::{
        FaultConfig, Faulty, MemDevice, ServiceProfile, ThrottleConfig, Throttled,
    };
    let paced =
        |size: u64, profile: &str, fail_at: Option<u64>| -> Arc<dyn ecstack_device::BlockDevice> {
            let inner = Faulty::new(
                MemDevice::new(size).unwrap(),
                FaultConfig {
                    fail_at_op: fail_at,
                    track_unflushed: false,
                    ..FaultConfig::default()
                },
            );
            let cfg = ThrottleConfig {
                profile: ServiceProfile::preset(profile),
                ..ThrottleConfig::default()
            };
            let d = Throttled::new(inner, cfg);
            Arc::new(d)
        };
    for scheme in SchemeKind::ALL {
        let (k, m) = (4, 2);
        let nlog = if scheme.uses_log() { m } else { 0 };
        let devices = ecstack_array::ArrayDevices {
            main: (0..k + m)
                .map(|i| paced(MAIN_SIZE, "eplog-ssd", (i == 2).then_some(400)))
                .collect(),
            log: (0..nlog)
                .map(|i| paced(LOG_SIZE, "eplog-hdd", (i == 1).then_some(60)))
                .collect(),
            meta: Arc::new(MemDevice::new(META_SIZE).unwrap()),
            specs: None,
        };
        let a = Array::create(&config(scheme, k, m), devices).unwrap();
        let all = write_quarters(&a, 500, 3 * CHUNK as usize, |_, _, _, _| {});
        let failed: Vec<usize> = a
            .status()
            .devices
            .iter()
            .filter(|d| d.failed)
            .map(|d| d.index)
            .collect();
        assert!(
            failed.contains(&2),
            "{scheme}: main device 2 failed mid-run: {failed:?}"
        );
        if nlog > 0 {
            assert!(
                failed.contains(&(k + m + 1)),
                "{scheme}: log device 1 failed: {failed:?}"
            );
        }
        verify_all(&a, &all, &format!("{scheme} on paced devices, degraded"));
    }
}
