//! Compaction invariants: order kept, no overlap introduced, sizes preserved.

use ecstack_trace::transform::{apply, eplog_prepare, split_streams, TransformOptions};
use ecstack_trace::{synthesize_preset, Names, Op, Record};
use std::collections::HashMap;

fn rec(t: u64, vol: u32, off: u64, len: u64) -> Record {
    Record {
        time_ns: t,
        volume: vol,
        file: 0,
        op: Op::Write,
        offset: off,
        len,
    }
}

/// Pairwise: two requests overlap after compaction iff they overlapped before, and their relative
/// order of addresses is unchanged.
fn check_invariants(before: &[Record], after: &[Record]) {
    assert_eq!(before.len(), after.len());
    for (a, b) in before.iter().zip(after) {
        assert_eq!(a.time_ns, b.time_ns, "order kept");
        assert_eq!(a.len, b.len, "size preserved");
        assert_eq!(a.op, b.op);
        assert_eq!(
            a.offset % (1 << 20),
            b.offset % (1 << 20),
            "offset in segment kept"
        );
    }
    let n = before.len().min(400);
    for i in 0..n {
        for j in 0..n {
            let (a, b) = (&before[i], &before[j]);
            if a.volume != b.volume {
                continue;
            }
            let (x, y) = (&after[i], &after[j]);
            let ov0 = a.offset < b.end() && b.offset < a.end();
            let ov1 = x.offset < y.end() && y.offset < x.end();
            assert_eq!(ov0, ov1, "overlap changed between {a:?} and {b:?}");
            assert_eq!(
                a.offset < b.offset,
                x.offset < y.offset,
                "address order changed"
            );
        }
    }
}

#[test]
fn compaction_invariants_hand_built() {
    let mb = 1u64 << 20;
    let before = vec![
        rec(1, 0, 7 * mb + 100, 4096),
        rec(2, 0, 900 * mb, 3 * mb),
        rec(3, 0, 7 * mb + 4000, 200),
        rec(4, 0, 902 * mb + 10, 1),
        rec(5, 0, 5000 * mb - 1, 2),
        rec(6, 0, 0, mb),
    ];
    let (after, size) = eplog_prepare(&before, 1);
    check_invariants(&before, &after);
    // touched segments: 0, 7, 900, 901, 902, 4999, 5000 -> 7 MiB
    assert_eq!(size, 7 * mb);
    assert!(after.iter().all(|r| r.end() <= size));
    assert_eq!(after[5].offset, 0);
    assert_eq!(after[0].offset, mb + 100);
    assert_eq!(after[1].offset, 2 * mb);
    assert_eq!(after[4].offset, 6 * mb - 1);
}

#[test]
fn compaction_invariants_synthesized() {
    let t = synthesize_preset("msr-mds0", 0.005, 11).unwrap();
    // spread the addresses out over a large space first (multiply segment numbers)
    let spread: Vec<Record> = t
        .records
        .iter()
        .map(|r| Record {
            offset: (r.offset >> 20) * 37 * (1 << 20) + (r.offset & ((1 << 20) - 1)),
            ..*r
        })
        .collect();
    let opts = TransformOptions {
        compact: Some(1 << 20),
        ..Default::default()
    };
    let after = apply(&spread, &t.volumes, &opts).unwrap();
    check_invariants(&spread, &after);
    let max = after.iter().map(|r| r.end()).max().unwrap();
    let wss_segments: std::collections::BTreeSet<u64> = spread
        .iter()
        .flat_map(|r| (r.offset >> 20)..=((r.end() - 1) >> 20))
        .collect();
    assert!(max <= wss_segments.len() as u64 * (1 << 20));
}

#[test]
fn multi_volume_flatten_keeps_volumes_apart() {
    let mb = 1u64 << 20;
    let before = vec![
        rec(1, 0, 5 * mb, 4096),
        rec(2, 1, 5 * mb, 4096),
        rec(3, 0, 9 * mb, 10),
    ];
    let opts = TransformOptions {
        compact: Some(mb),
        flatten: true,
        ..Default::default()
    };
    let after = apply(&before, &Names::new(), &opts).unwrap();
    assert_eq!(after[0].offset, 0);
    assert_eq!(after[2].offset, mb);
    assert_eq!(after[1].offset, 2 * mb);
}

#[test]
fn split_preserves_segment_locality_and_order() {
    let t = synthesize_preset("msr-usr0", 0.002, 5).unwrap();
    let seg = 16u64 << 20;
    let streams = split_streams(&t.records, 4, seg);
    assert_eq!(
        streams.iter().map(|s| s.len()).sum::<usize>(),
        t.records.len()
    );
    let mut owner: HashMap<u64, usize> = HashMap::new();
    for (i, s) in streams.iter().enumerate() {
        for w in s.windows(2) {
            assert!(w[0].time_ns <= w[1].time_ns);
        }
        for r in s {
            let o = owner.entry(r.offset / seg).or_insert(i);
            assert_eq!(*o, i, "a segment was split across clients");
        }
    }
}

#[test]
fn select_window_and_writes_only() {
    let s = 1_000_000_000u64;
    let mut before = vec![
        rec(10 * s, 0, 0, 4096),
        rec(11 * s, 0, 4096, 4096),
        rec(15 * s, 1, 0, 1),
    ];
    before.push(Record {
        op: Op::Read,
        ..rec(12 * s, 0, 0, 1)
    });
    let mut names = Names::new();
    names.intern(b"a");
    names.intern(b"b");
    let opts = TransformOptions {
        volumes: vec!["a".into()],
        from_s: Some(0.5),
        to_s: Some(4.0),
        writes_only: true,
        ..Default::default()
    };
    let after = apply(&before, &names, &opts).unwrap();
    assert_eq!(after, vec![rec(11 * s, 0, 4096, 4096)]);
    let bad = TransformOptions {
        volumes: vec!["zzz".into()],
        ..Default::default()
    };
    assert!(apply(&before, &names, &bad).is_err());
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn arb_records() -> impl Strategy<Value = Vec<Record>> {
        // offsets over a sparse 64 GiB space, sizes up to 3 MiB, two volumes
        prop::collection::vec((0u32..2, 0u64..(64u64 << 30), 1u64..(3 << 20)), 1..120).prop_map(
            |v| {
                v.into_iter()
                    .enumerate()
                    .map(|(i, (vol, off, len))| rec(i as u64, vol, off, len))
                    .collect()
            },
        )
    }

    proptest! {
        #[test]
        fn compaction_keeps_order_sizes_and_overlaps(recs in arb_records()) {
            let opts = TransformOptions { compact: Some(1 << 20), ..Default::default() };
            let after = apply(&recs, &Names::new(), &opts).unwrap();
            check_invariants(&recs, &after);
            // per volume, the compacted space is exactly the touched segments
            for vol in 0..2u32 {
                let segs: std::collections::BTreeSet<u64> = recs
                    .iter()
                    .filter(|r| r.volume == vol)
                    .flat_map(|r| (r.offset >> 20)..=((r.end() - 1) >> 20))
                    .collect();
                let max = after.iter().filter(|r| r.volume == vol).map(|r| r.end()).max();
                if let Some(m) = max {
                    prop_assert!(m <= segs.len() as u64 * (1 << 20));
                }
            }
        }

        #[test]
        fn rounding_covers_the_request(recs in arb_records(), shift in 9u32..17) {
            let c = 1u64 << shift;
            let opts = TransformOptions { round: Some(c), ..Default::default() };
            let after = apply(&recs, &Names::new(), &opts).unwrap();
            for (a, b) in recs.iter().zip(&after) {
                prop_assert!(b.offset <= a.offset && b.end() >= a.end());
                prop_assert_eq!(b.offset % c, 0);
                prop_assert_eq!(b.len % c, 0);
                prop_assert!(b.len < a.len + 2 * c);
            }
        }
    }
}
