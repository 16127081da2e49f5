//! LT and RaptorQ: decoding from a random subset in random order returns the object.

use ecstack_base::rng::Rng;
use ecstack_codes::RaptorQ;
use ecstack_codes::RatelessCode;
use ecstack_codes::{LtCode, LtParams};

fn roundtrip(code: &dyn RatelessCode, data: &[u8], count: usize, seed: u64) -> usize {
    let mut packets = code.encode(data, count).unwrap();
    let mut rng = Rng::new(seed);
    rng.shuffle(&mut packets);
    let mut dec = code.decoder();
    let mut used = 0;
    for p in &packets {
        used += 1;
        if dec.push(p).unwrap() {
            break;
        }
    }
    assert!(
        dec.is_complete(),
        "{} did not decode from all {count} packets",
        code.name()
    );
    let out = dec.finish().unwrap();
    assert_eq!(&out[..data.len()], data);
    assert!(out[data.len()..].iter().all(|&b| b == 0));
    used
}

#[test]
fn lt_roundtrip_random_orders() {
    let mut rng = Rng::new(9);
    for (k, n, bs) in [
        (16usize, 48usize, 64usize),
        (128, 384, 100),
        (1024, 3072, 32),
    ] {
        let code = LtCode::new(LtParams::new(k, n, bs)).unwrap();
        let mut data = vec![0u8; k * bs - 5];
        rng.fill(&mut data);
        for t in 0..3 {
            let used = roundtrip(&code, &data, n, t);
            assert!(used >= k && used <= n);
        }
    }
}

#[test]
fn lt_incomplete_is_an_error() {
    let code = LtCode::new(LtParams::new(32, 96, 8)).unwrap();
    let packets = code.encode(&[1u8; 256], 96).unwrap();
    let mut dec = code.decoder();
    for p in &packets[..10] {
        dec.push(p).unwrap();
    }
    assert!(dec.finish().is_err());
    let mut dec = code.decoder();
    assert!(dec
        .push(&ecstack_codes::Packet {
            id: 500,
            data: vec![0; 8]
        })
        .is_err());
    assert!(dec
        .push(&ecstack_codes::Packet {
            id: 1,
            data: vec![0; 7]
        })
        .is_err());
}

/// Mean and largest blocks/K over `trials` random reception orders.
fn lt_overhead(k: usize, n: usize, graph_seed: u64, trials: usize, order_seed: u64) -> (f64, f64) {
    let mut p = LtParams::new(k, n, 1);
    p.seed = graph_seed;
    let o = LtCode::new(p)
        .unwrap()
        .reception_overhead(trials, order_seed);
    let mean = o.iter().sum::<f64>() / o.len() as f64;
    (mean, o.iter().cloned().fold(0.0, f64::max))
}

#[test]
fn lt_overhead_is_the_documented_figure() {
    // docs/codes.md and docs/benchmarks.md: K = 1024, N = 3K, C = 1, δ = 0.1 (RobuSTore §5.2.4's point,
    // which reports blocks/K of about 1.5) needs 1.445 blocks/K on average over 200 random reception
    // orders (the `ecstack bench ec` configuration: graph seed 1, order seed 7), at most 1.924.
    let (mean, max) = lt_overhead(1024, 3072, 1, 200, 7);
    assert!((1.44..=1.45).contains(&mean), "mean blocks/K = {mean}");
    assert!(max <= 1.93, "largest blocks/K = {max}");
    // Other graphs of the same code stay at about 1.5: 1.42-1.53 over graph seeds 1-5 (documented).
    for graph_seed in 2..=5 {
        let (mean, _) = lt_overhead(1024, 3072, graph_seed, 200, 3);
        assert!(
            (1.40..=1.55).contains(&mean),
            "graph seed {graph_seed}: mean blocks/K = {mean}"
        );
    }
}

#[test]
fn raptorq_roundtrip_with_losses() {
    let mut rng = Rng::new(10);
    let code = RaptorQ::new(64, 256).unwrap();
    let mut data = vec![0u8; 64 * 256 - 100];
    rng.fill(&mut data);
    // Drop a third of 96 packets at random: any 64-ish of them decode.
    let mut packets = code.encode(&data, 96).unwrap();
    rng.shuffle(&mut packets);
    packets.truncate(70);
    let mut dec = code.decoder();
    for p in &packets {
        if dec.push(p).unwrap() {
            break;
        }
    }
    let out = dec.finish().unwrap();
    assert_eq!(&out[..data.len()], &data[..]);
    assert!(RaptorQ::new(0, 10).is_err());
    assert!(RaptorQ::new(10, 70_000).is_err());
}
