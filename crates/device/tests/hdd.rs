//! HDD model: random vs sequential ratios in the expected range, reproducible modeled time.

use ecstack_device::{BlockDevice, HddConfig, HddModel, SimHdd, SplitMix64};

const IO: u64 = 4096;

fn random_run(seed: u64, n: usize) -> (u64, HddModel) {
    let mut m = HddModel::new(HddConfig::default()).unwrap();
    let mut rng = SplitMix64::new(seed);
    let slots = m.capacity() / IO;
    let mut t = 0;
    for _ in 0..n {
        t += m.access(rng.below(slots) * IO, IO, false);
    }
    (t, m)
}

#[test]
fn random_vs_sequential_4k() {
    let n = 20_000;
    let (t_rand, m) = random_run(1, n);
    let rand_iops = n as f64 / (t_rand as f64 / 1e9);
    let mut s = HddModel::new(HddConfig::default()).unwrap();
    let mut t_seq = 0;
    for i in 0..n as u64 {
        t_seq += s.access(i * IO, IO, true);
    }
    let seq_mbps = (n as u64 * IO) as f64 / (t_seq as f64 / 1e9) / 1e6;
    let ratio = (t_rand as f64) / (t_seq as f64);
    eprintln!(
        "random 4K: {rand_iops:.1} IOPS; sequential: {seq_mbps:.1} MB/s; time ratio {ratio:.0}x"
    );
    // 7200 rpm SATA disk: ~100-200 random 4K IOPS, ~144 MB/s sequential at the outer edge.
    assert!(
        (85.0..=200.0).contains(&rand_iops),
        "random IOPS {rand_iops}"
    );
    assert!(
        (135.0..=150.0).contains(&seq_mbps),
        "sequential {seq_mbps} MB/s"
    );
    assert!(
        (200.0..=500.0).contains(&ratio),
        "random/sequential time ratio {ratio}"
    );
    let st = m.stats();
    assert_eq!(st.requests, n as u64);
    assert!(st.seeks > (n as u64) * 99 / 100);
    // Mean rotational latency is about half a revolution (4.17 ms at 7200 rpm).
    let rot_ms = st.rotation_ns as f64 / n as f64 / 1e6;
    assert!((3.7..4.6).contains(&rot_ms), "mean rotation {rot_ms} ms");
    // Inner zone is slower.
    let mut inner = HddModel::new(HddConfig::default()).unwrap();
    let base = inner.capacity() - (n as u64 + 1) * IO;
    let mut t_in = 0;
    inner.access(base, IO, false);
    for i in 1..=n as u64 {
        t_in += inner.access(base + i * IO, IO, false);
    }
    assert!(t_in > t_seq * 18 / 10, "inner {t_in} vs outer {t_seq}");
}

#[test]
fn modeled_time_is_reproducible_for_a_seed() {
    let (a, _) = random_run(7, 5000);
    let (b, _) = random_run(7, 5000);
    let (c, _) = random_run(8, 5000);
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn seek_curve_hits_its_three_points() {
    let m = HddModel::new(HddConfig::default()).unwrap();
    let c = m.cylinders();
    assert!((m.seek_ns(1) - 0.8e6).abs() < 1.0);
    assert!((m.seek_ns(c / 3) - 6.0e6).abs() < 1e3);
    assert!((m.seek_ns(c) - 13.0e6).abs() < 1e3);
    assert_eq!(m.seek_ns(0), 0.0);
    let mut prev = 0.0;
    for d in (1..c).step_by((c / 1000) as usize) {
        assert!(m.seek_ns(d) >= prev);
        prev = m.seek_ns(d);
    }
}

#[test]
fn sim_hdd_device_counts_time_and_keeps_data() {
    let dev = SimHdd::new(HddConfig {
        capacity: 1 << 30,
        keep_data: true,
        ..HddConfig::default()
    })
    .unwrap();
    dev.write_at(b"chunk", 123_456).unwrap();
    let mut b = [0u8; 5];
    dev.read_at(&mut b, 123_456).unwrap();
    assert_eq!(&b, b"chunk");
    let s = dev.stats();
    assert_eq!((s.write_ops, s.read_ops), (1, 1));
    assert!(s.modeled_ns > 0);
    assert!(dev.read_at(&mut b, 1 << 30).is_err());
}
