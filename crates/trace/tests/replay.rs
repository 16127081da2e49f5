//! Replay against a temp file writes the expected bytes where the trace says.

use ecstack_device::{open_spec, BlockDevice};
use ecstack_trace::replay::{pattern_byte, replay, Pace, ReplayOptions};
use ecstack_trace::{Op, Record};
use std::sync::atomic::{AtomicU64, Ordering};

fn rec(t: u64, op: Op, off: u64, len: u64) -> Record {
    Record {
        time_ns: t,
        volume: 0,
        file: 0,
        op,
        offset: off,
        len,
    }
}

#[test]
fn replay_writes_expected_bytes() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("dev.img");
    let spec = format!("file:{}?size=64M", path.display());
    let dev = open_spec(&spec).unwrap();
    let mb = 1u64 << 20;
    let recs = vec![
        rec(0, Op::Write, 0, 4096),
        rec(1, Op::Write, 20 * mb + 512, 1000),
        rec(2, Op::Read, 0, 4096),
        rec(3, Op::Write, 40 * mb, 128 << 10),
        rec(4, Op::Write, 63 * mb, mb),
    ];
    let done = AtomicU64::new(0);
    let rep = replay(
        &dev,
        &recs,
        &ReplayOptions {
            clients: 3,
            ..Default::default()
        },
        &|n| {
            done.fetch_add(n, Ordering::Relaxed);
        },
    )
    .unwrap();
    assert_eq!(done.load(Ordering::Relaxed), 5);
    assert_eq!((rep.requests, rep.writes, rep.reads), (5, 4, 1));
    assert_eq!(rep.write_bytes, 4096 + 1000 + (128 << 10) + mb);
    assert!(rep.latency.max_us > 0.0);
    drop(dev);
    let img = std::fs::read(&path).unwrap();
    for r in recs.iter().filter(|r| r.op == Op::Write) {
        for a in r.offset..r.end() {
            assert_eq!(img[a as usize], pattern_byte(a), "byte {a}");
        }
    }
    // untouched bytes stay zero
    assert_eq!(img[4096], 0);
    assert_eq!(img[(20 * mb + 511) as usize], 0);
    assert_eq!(img[(20 * mb + 1512) as usize], 0);
}

#[test]
fn prewrite_timed_and_capacity_errors() {
    let dev = open_spec("mem:8M").unwrap();
    let recs = vec![
        rec(0, Op::Write, 4096, 4096),
        rec(20_000_000, Op::Read, 3 << 20, 4096),
    ];
    let rep = replay(
        &dev,
        &recs,
        &ReplayOptions {
            prewrite: true,
            pace: Pace::Timed { speed: 2.0 },
            ..Default::default()
        },
        &|_| {},
    )
    .unwrap();
    assert_eq!(rep.prewrite_bytes, 2 << 20);
    assert!(
        rep.elapsed_s >= 0.009,
        "timed replay waited {}",
        rep.elapsed_s
    );
    let mut b = vec![0u8; 16];
    dev.read_at(&mut b, 3 << 20).unwrap();
    assert_eq!(b[0], pattern_byte(3 << 20));
    // beyond capacity
    let far = vec![rec(0, Op::Write, 100 << 20, 4096)];
    let e = replay(&dev, &far, &ReplayOptions::default(), &|_| {}).unwrap_err();
    assert!(e.to_string().contains("--wrap"), "{e}");
    let rep = replay(
        &dev,
        &far,
        &ReplayOptions {
            wrap: true,
            ..Default::default()
        },
        &|_| {},
    )
    .unwrap();
    assert_eq!(rep.writes, 1);
}
