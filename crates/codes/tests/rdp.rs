//! RDP against a direct, deliberately naive implementation of its definition (Corbett et al., FAST'04)
//! for p = 5, 7, 11, 13 and every k from 2 to p - 1; every single and double erasure decodes back; ranged
//! parity deltas applied over their ranges equal a fresh encode; bad inputs give errors, not panics.

use ecstack_base::rng::Rng;
use ecstack_codes::shard::{decode_files, encode_file, EncodeOptions};
use ecstack_codes::{
    new_code, new_code_with, new_linear_code, CodeError, CodeKind, CodeOptions, ErasureCode,
};
use proptest::prelude::*;
use std::ops::Range;

const PRIMES: [usize; 4] = [5, 7, 11, 13];

fn rdp(k: usize, p: usize) -> Box<dyn ErasureCode> {
    let opts = CodeOptions {
        rdp_prime: Some(p),
        ..CodeOptions::default()
    };
    new_code_with(CodeKind::Rdp, k, 2, opts).unwrap()
}

/// The definition, byte by byte: p - 1 rows of `len / (p - 1)` bytes per chunk; columns 0..k data,
/// k..p-1 zero, p - 1 the row parity P; P row r = XOR of row r of the data; Q row d = XOR of every symbol
/// (r, c) of columns 0..=p-1 with (r + c) mod p = d.
fn naive(data: &[Vec<u8>], p: usize, len: usize) -> [Vec<u8>; 2] {
    let s = len / (p - 1);
    let k = data.len();
    let mut pp = vec![0u8; len];
    for r in 0..p - 1 {
        for j in 0..s {
            for col in data {
                pp[r * s + j] ^= col[r * s + j];
            }
        }
    }
    let symbol = |c: usize, r: usize, j: usize| -> u8 {
        if c < k {
            data[c][r * s + j]
        } else if c == p - 1 {
            pp[r * s + j]
        } else {
            0
        }
    };
    let mut q = vec![0u8; len];
    for d in 0..p - 1 {
        for j in 0..s {
            let mut x = 0u8;
            for c in 0..p {
                for r in 0..p - 1 {
                    if (r + c) % p == d {
                        x ^= symbol(c, r, j);
                    }
                }
            }
            q[d * s + j] = x;
        }
    }
    [pp.clone(), q]
}

fn random_data(k: usize, len: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..k)
        .map(|_| {
            let mut v = vec![0u8; len];
            rng.fill(&mut v);
            v
        })
        .collect()
}

fn encode(code: &dyn ErasureCode, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let mut parity = vec![vec![0u8; len]; 2];
    let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let mut pm: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
    code.encode(&d, &mut pm).unwrap();
    parity
}

#[test]
fn encode_matches_the_definition_bit_for_bit() {
    let mut rng = Rng::new(41);
    let mut cases = 0;
    for p in PRIMES {
        for k in 2..p {
            let code = rdp(k, p);
            assert_eq!(code.chunk_align_bytes(), p - 1);
            // Row lengths: one byte, odd, and longer than a SIMD register.
            for s in [1usize, 7, 67] {
                let len = (p - 1) * s;
                let data = random_data(k, len, &mut rng);
                let parity = encode(code.as_ref(), &data);
                assert_eq!(parity, naive(&data, p, len), "p={p} k={k} s={s}");
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 3 * (3 + 5 + 9 + 11));
}

#[test]
fn default_prime_is_the_smallest_above_k() {
    for (k, p) in [
        (1, 2),
        (2, 3),
        (3, 5),
        (4, 5),
        (5, 7),
        (6, 7),
        (7, 11),
        (12, 13),
        (13, 17),
    ] {
        let code = new_code(CodeKind::Rdp, k, 2).unwrap();
        assert_eq!(code.chunk_align_bytes(), p - 1, "k={k}");
        assert_eq!((code.k(), code.m(), code.kind()), (k, 2, CodeKind::Rdp));
    }
    // k = 254, the largest (k + m <= 256): p = 257.
    assert_eq!(
        new_code(CodeKind::Rdp, 254, 2).unwrap().chunk_align_bytes(),
        256
    );
    // The default code agrees with the definition too.
    let mut rng = Rng::new(7);
    let code = new_code(CodeKind::Rdp, 4, 2).unwrap();
    let data = random_data(4, 4 * 33, &mut rng);
    assert_eq!(encode(code.as_ref(), &data), naive(&data, 5, 4 * 33));
}

/// Lose `erased`, rebuild it with missing shards as `None` and in place (lost buffers scribbled over).
fn check_pattern(code: &dyn ErasureCode, shards: &[Vec<u8>], erased: &[usize]) {
    let mut opt: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
    for &e in erased {
        opt[e] = None;
    }
    code.reconstruct(&mut opt)
        .unwrap_or_else(|e| panic!("{code:?} erased {erased:?}: {e}"));
    for (i, s) in opt.iter().enumerate() {
        assert_eq!(
            s.as_ref(),
            Some(&shards[i]),
            "{code:?}: shard {i} lost {erased:?}"
        );
    }
    let mut work = shards.to_vec();
    for &e in erased {
        work[e].fill(0xee);
    }
    let mut w: Vec<&mut [u8]> = work.iter_mut().map(|v| v.as_mut_slice()).collect();
    code.reconstruct_in_place(&mut w, erased)
        .unwrap_or_else(|e| panic!("{code:?} erased {erased:?}: {e}"));
    assert_eq!(work, shards, "{code:?}: lost {erased:?} (in place)");
}

#[test]
fn every_single_and_double_erasure_decodes() {
    let mut rng = Rng::new(42);
    let mut patterns = 0;
    let mut codes = vec![(1, 2), (2, 3)];
    for p in PRIMES {
        codes.extend((2..p).map(|k| (k, p)));
    }
    for (k, p) in codes {
        let code = rdp(k, p);
        let n = k + 2;
        for s in [1usize, 35] {
            let data = random_data(k, (p - 1) * s, &mut rng);
            let mut shards = data.clone();
            shards.extend(encode(code.as_ref(), &data));
            let sv: Vec<&[u8]> = shards.iter().map(|v| v.as_slice()).collect();
            assert!(code.verify(&sv).unwrap());
            for a in 0..n {
                check_pattern(code.as_ref(), &shards, &[a]);
                patterns += 1;
                for b in a + 1..n {
                    check_pattern(code.as_ref(), &shards, &[a, b]);
                    // The order of `erased` does not matter.
                    check_pattern(code.as_ref(), &shards, &[b, a]);
                    patterns += 2;
                }
            }
        }
    }
    eprintln!("{patterns} erasure patterns checked");
    assert!(patterns > 2000, "{patterns}");
}

#[test]
fn verify_detects_corruption_in_any_shard() {
    let mut rng = Rng::new(43);
    let code = rdp(4, 7);
    let data = random_data(4, 6 * 10, &mut rng);
    let mut shards = data.clone();
    shards.extend(encode(code.as_ref(), &data));
    for i in 0..6 {
        let mut bad = shards.clone();
        bad[i][31] ^= 0x40;
        let sv: Vec<&[u8]> = bad.iter().map(|v| v.as_slice()).collect();
        assert!(!code.verify(&sv).unwrap(), "shard {i}");
    }
}

#[test]
fn decode_span_and_row_parity_ranges() {
    let mut rng = Rng::new(44);
    let (k, p, s) = (4usize, 5usize, 16usize);
    let len = (p - 1) * s;
    let code = rdp(k, p);
    let data = random_data(k, len, &mut rng);
    let mut shards = data.clone();
    shards.extend(encode(code.as_ref(), &data));
    let l = len as u64;
    // One lost data chunk or P: rebuilt by row parity, any range (here 13 bytes, not a multiple of 4).
    for e in [0, 3, k] {
        assert_eq!(code.decode_span(l, 5..18, &[e]).unwrap(), 5..18);
        let mut part: Vec<Vec<u8>> = shards.iter().map(|v| v[5..18].to_vec()).collect();
        part[e].fill(0);
        let mut w: Vec<&mut [u8]> = part.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.reconstruct_in_place(&mut w, &[e]).unwrap();
        assert_eq!(part[e], shards[e][5..18], "lost {e}");
    }
    // Q, or two chunks: whole chunks.
    for erased in [&[k + 1][..], &[0, 1], &[2, k], &[1, k + 1]] {
        assert_eq!(code.decode_span(l, 5..18, erased).unwrap(), 0..l);
    }
    assert_eq!(code.decode_span(l, 5..18, &[]).unwrap(), 5..18);
    // Position-wise codes: the range itself, whatever is lost.
    let rs = new_code(CodeKind::RsCauchy, 4, 2).unwrap();
    assert_eq!(rs.decode_span(l, 5..18, &[0, 1]).unwrap(), 5..18);
    assert_eq!(rs.chunk_align_bytes(), 1);
}

/// One random update of every data chunk's rows: the ranges RDP reports, checked by hand for p = 5.
#[test]
fn delta_ranges_follow_the_diagonals() {
    let code = rdp(4, 5);
    let s = 10u64;
    let l = 4 * s;
    // Column 2, row 0 bytes 3..5: P over the same bytes; Q row (0 + 2) = 2 (P's row 0 is on diagonal 4,
    // not stored).
    let r = code.delta_ranges(2, l, 3..5).unwrap();
    assert_eq!(r, vec![vec![3..5], vec![2 * s + 3..2 * s + 5]]);
    // Column 2, row 1 bytes 12..14: Q rows 3 (data) and 0 (P's row 1), same bytes of the row.
    let r = code.delta_ranges(2, l, 12..14).unwrap();
    assert_eq!(r, vec![vec![12..14], vec![2..4, 3 * s + 2..3 * s + 4]]);
    // Column 0, rows 1..=2 whole: Q rows 1, 2 (data) and 0, 1 (P): rows 0..3, one extent.
    let r = code.delta_ranges(0, l, s..3 * s).unwrap();
    assert_eq!(r, vec![vec![s..3 * s], vec![0..3 * s]]);
    // Nothing changes for an empty range.
    assert_eq!(
        code.delta_ranges(1, l, 7..7).unwrap(),
        vec![Vec::<Range<u64>>::new(); 2]
    );
    // Position-wise codes: the range itself for every parity.
    let rs = new_code(CodeKind::RsVandermonde, 3, 3).unwrap();
    assert_eq!(rs.delta_ranges(1, 100, 7..9).unwrap(), vec![vec![7..9]; 3]);
}

#[test]
fn shard_files_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut data = vec![0u8; 50_001];
    Rng::new(45).fill(&mut data);
    let input = dir.path().join("input.bin");
    std::fs::write(&input, &data).unwrap();
    // k = 5: p = 7, units of 6 rows; the default unit is rounded up to a multiple of 6.
    for unit in [None, Some(600)] {
        let opts = EncodeOptions {
            code: CodeKind::Rdp,
            k: 5,
            m: 2,
            unit,
            set_id: Some(1),
        };
        let rep = encode_file(&input, &dir.path().join("s"), &opts).unwrap();
        assert_eq!(rep.unit % 6, 0, "{}", rep.unit);
        for (a, b) in [(0, 1), (2, 5), (4, 6), (5, 6)] {
            let keep: Vec<_> = (0..7)
                .filter(|&i| i != a && i != b)
                .map(|i| rep.shards[i].clone())
                .collect();
            let out = dir.path().join("out.bin");
            decode_files(&keep, &out).unwrap();
            assert_eq!(std::fs::read(&out).unwrap(), data, "lost {a},{b}");
        }
    }
    let opts = EncodeOptions {
        code: CodeKind::Rdp,
        k: 5,
        m: 2,
        unit: Some(64),
        set_id: Some(1),
    };
    let e = encode_file(&input, &dir.path().join("bad"), &opts).unwrap_err();
    assert!(matches!(e, CodeError::ChunkAlign { align: 6, .. }), "{e}");
    assert!(!dir.path().join("bad").exists(), "refused before writing");
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let params = |r: Result<Box<dyn ErasureCode>, CodeError>, what: &str| {
        let e = r.unwrap_err();
        assert!(matches!(e, CodeError::Params { .. }), "{what}: {e}");
        assert!(!e.to_string().contains('\n'), "{e}");
        e.to_string()
    };
    let with_p = |k, m, p| {
        new_code_with(
            CodeKind::Rdp,
            k,
            m,
            CodeOptions {
                rdp_prime: Some(p),
                ..CodeOptions::default()
            },
        )
    };
    assert!(params(new_code(CodeKind::Rdp, 4, 3), "m = 3").contains("m = 2"));
    assert!(params(new_code(CodeKind::Rdp, 4, 1), "m = 1").contains("m = 2"));
    params(new_code(CodeKind::Rdp, 0, 2), "k = 0");
    params(new_code(CodeKind::Rdp, 255, 2), "k + m > 256");
    assert!(params(with_p(5, 2, 5), "k > p - 1").contains("k <= p - 1"));
    assert!(params(with_p(4, 2, 9), "p = 9").contains("prime"));
    params(with_p(4, 2, 263), "p > 257");
    params(with_p(1, 2, 1), "p = 1");
    let e = new_linear_code(CodeKind::Rdp, 4, 2).unwrap_err();
    assert!(matches!(e, CodeError::NotLinear { code: "rdp" }), "{e}");
    assert_eq!(CodeKind::parse("rdp").unwrap(), CodeKind::Rdp);
    assert_eq!(CodeKind::Rdp.name(), "rdp");
    assert_eq!(CodeKind::from_id(CodeKind::Rdp.id()), Some(CodeKind::Rdp));
    assert!(CodeKind::parse("rdq")
        .unwrap_err()
        .to_string()
        .contains("rdp"));

    let code = rdp(4, 5);
    // Encode: a length not a multiple of p - 1, a wrong count.
    let data = vec![vec![0u8; 10]; 4];
    let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let mut parity = vec![vec![0u8; 10]; 2];
    let mut pm: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
    let e = code.encode(&d, &mut pm).unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::ChunkAlign {
                len: 10,
                align: 4,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("multiple of 4"), "{e}");
    let e = code.encode(&d[..3], &mut pm).unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::ShardCount {
                got: 3,
                want: 4,
                ..
            }
        ),
        "{e}"
    );

    // Reconstruct: too many, repeated, out of range, misaligned (and nothing written).
    let mut rng = Rng::new(46);
    let data = random_data(4, 8, &mut rng);
    let mut shards = data.clone();
    shards.extend(encode(code.as_ref(), &data));
    let mut w: Vec<&mut [u8]> = shards.iter_mut().map(|v| v.as_mut_slice()).collect();
    let e = code.reconstruct_in_place(&mut w, &[0, 1, 2]).unwrap_err();
    assert!(
        matches!(e, CodeError::TooManyErasures { erased: 3, m: 2 }),
        "{e}"
    );
    let e = code.reconstruct_in_place(&mut w, &[1, 1]).unwrap_err();
    assert!(matches!(e, CodeError::DuplicateErasure { index: 1 }), "{e}");
    let e = code.reconstruct_in_place(&mut w, &[6]).unwrap_err();
    assert!(
        matches!(e, CodeError::IndexOutOfRange { index: 6, n: 6 }),
        "{e}"
    );
    let mut odd: Vec<Vec<u8>> = shards.iter().map(|v| v[..7].to_vec()).collect();
    let before = odd.clone();
    let mut w: Vec<&mut [u8]> = odd.iter_mut().map(|v| v.as_mut_slice()).collect();
    let e = code.reconstruct_in_place(&mut w, &[0, 5]).unwrap_err();
    assert!(matches!(e, CodeError::ChunkAlign { len: 7, .. }), "{e}");
    assert_eq!(odd, before, "a refused rebuild writes nothing");
    let mut opt: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
    opt[0] = None;
    opt[1] = None;
    opt[2] = None;
    let e = code.reconstruct(&mut opt).unwrap_err();
    assert!(
        matches!(e, CodeError::TooFewShards { present: 3, k: 4 }),
        "{e}"
    );

    // Deltas: the plain form is refused; ranges outside the chunk, a misaligned chunk, a bad index,
    // buffers of the wrong size.
    let mut dl = vec![vec![0u8; 4]; 2];
    let mut dm: Vec<&mut [u8]> = dl.iter_mut().map(|v| v.as_mut_slice()).collect();
    let e = code
        .parity_deltas(0, &[0; 4], &[1; 4], &mut dm)
        .unwrap_err();
    assert!(
        matches!(e, CodeError::RangedDeltasNeeded { code: "rdp" }),
        "{e}"
    );
    assert!(e.to_string().contains("delta_ranges"), "{e}");
    let e = code.delta_ranges(0, 40, 30..41).unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::RangeOutOfChunk {
                lo: 30,
                hi: 41,
                chunk_len: 40
            }
        ),
        "{e}"
    );
    #[allow(clippy::reversed_empty_ranges)]
    let e = code.delta_ranges(0, 40, 9..8).unwrap_err();
    assert!(matches!(e, CodeError::RangeOutOfChunk { .. }), "{e}");
    let e = code.delta_ranges(0, 42, 0..4).unwrap_err();
    assert!(matches!(e, CodeError::ChunkAlign { len: 42, .. }), "{e}");
    let e = code.delta_ranges(4, 40, 0..4).unwrap_err();
    assert!(
        matches!(e, CodeError::IndexOutOfRange { index: 4, n: 4 }),
        "{e}"
    );
    let e = code
        .ranged_parity_deltas(0, 40, 38, &[0; 4], &[1; 4], &mut dm)
        .unwrap_err();
    assert!(matches!(e, CodeError::RangeOutOfChunk { .. }), "{e}");
    let e = code
        .ranged_parity_deltas(0, 40, u64::MAX - 1, &[0; 4], &[1; 4], &mut dm)
        .unwrap_err();
    assert!(matches!(e, CodeError::RangeOutOfChunk { .. }), "{e}");
    let e = code
        .ranged_parity_deltas(0, 40, 0, &[0; 4], &[1; 3], &mut dm)
        .unwrap_err();
    assert!(matches!(e, CodeError::ShardSize { .. }), "{e}");
    // Column 1, bytes 12..16 (row 1): Q changes 4 bytes in each of two rows, so its delta is 8 bytes.
    let e = code
        .ranged_parity_deltas(1, 40, 12, &[0; 4], &[1; 4], &mut dm)
        .unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::ShardSize {
                what: "delta",
                index: 1,
                got: 4,
                want: 8
            }
        ),
        "{e}"
    );
    let e = code
        .ranged_parity_deltas(1, 40, 12, &[0; 4], &[1; 4], &mut dm[..1])
        .unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::ShardCount {
                got: 1,
                want: 2,
                ..
            }
        ),
        "{e}"
    );
    let e = code
        .apply_ranged_delta(&mut [0u8; 40], std::slice::from_ref(&(38..42)), &[0; 4])
        .unwrap_err();
    assert!(matches!(e, CodeError::RangeOutOfChunk { .. }), "{e}");
    let e = code
        .apply_ranged_delta(&mut [0u8; 40], &[0..4, 8..12], &[0; 4])
        .unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::ShardSize {
                got: 4,
                want: 8,
                ..
            }
        ),
        "{e}"
    );
}

/// Apply random updates of random ranges to the stripe `shards`, its parity through ranged deltas only.
fn update_through_ranged_deltas(
    code: &dyn ErasureCode,
    shards: &mut [Vec<u8>],
    updates: usize,
    rng: &mut Rng,
) {
    let (k, m) = (code.k(), code.m());
    let len = shards[0].len();
    for _ in 0..updates {
        let l = rng.below(k as u64) as usize;
        let lo = rng.below(len as u64 + 1) as usize;
        let hi = lo + rng.below((len - lo) as u64 + 1) as usize;
        let old = shards[l][lo..hi].to_vec();
        let mut new = vec![0u8; hi - lo];
        rng.fill(&mut new);
        let extents = code
            .delta_ranges(l, len as u64, lo as u64..hi as u64)
            .unwrap();
        assert_eq!(extents.len(), m);
        let mut deltas: Vec<Vec<u8>> = extents
            .iter()
            .map(|ext| {
                // Sorted, disjoint, not adjacent, inside the chunk, not empty.
                for w in ext.windows(2) {
                    assert!(w[0].end < w[1].start, "{ext:?}");
                }
                assert!(ext.iter().all(|e| e.start < e.end && e.end <= len as u64));
                vec![0xa5u8; ext.iter().map(|e| (e.end - e.start) as usize).sum()]
            })
            .collect();
        let mut dm: Vec<&mut [u8]> = deltas.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.ranged_parity_deltas(l, len as u64, lo as u64, &old, &new, &mut dm)
            .unwrap();
        shards[l][lo..hi].copy_from_slice(&new);
        for (i, (ext, delta)) in extents.iter().zip(&deltas).enumerate() {
            code.apply_ranged_delta(&mut shards[k + i], ext, delta)
                .unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random updates of random ranges, parity changed only through ranged deltas over their ranges:
    /// parity equals the definition applied to the updated data (for RDP) and a fresh encode (every
    /// code; the position-wise ones through the default methods).
    #[test]
    fn ranged_deltas_equal_a_fresh_encode(
        p_i in 0usize..6, k_raw in 1usize..13, s in 0usize..24, seed in any::<u64>(), updates in 1usize..10,
    ) {
        let p = [2usize, 3, 5, 7, 11, 13][p_i];
        let k = 1 + (k_raw - 1) % (p - 1);
        let code = rdp(k, p);
        let mut rng = Rng::new(seed);
        let len = (p - 1) * s;
        let data = random_data(k, len, &mut rng);
        let mut shards = data.clone();
        shards.extend(encode(code.as_ref(), &data));
        update_through_ranged_deltas(code.as_ref(), &mut shards, updates, &mut rng);
        let want = naive(&shards[..k], p, len);
        prop_assert_eq!(&shards[k..], &want[..]);
    }

    #[test]
    fn ranged_deltas_of_position_wise_codes(
        kind_i in 0usize..4, k in 1usize..8, len in 1usize..200, seed in any::<u64>(),
    ) {
        let kind = CodeKind::ALL[kind_i];
        let m = match kind { CodeKind::Xor => 1, CodeKind::Raid6 => 2, _ => 3 };
        let code = new_code(kind, k, m).unwrap();
        let mut rng = Rng::new(seed);
        let mut shards = random_data(k, len, &mut rng);
        shards.extend(vec![vec![0u8; len]; m]);
        {
            let (d, p) = shards.split_at_mut(k);
            let d: Vec<&[u8]> = d.iter().map(|v| v.as_slice()).collect();
            let mut pm: Vec<&mut [u8]> = p.iter_mut().map(|v| v.as_mut_slice()).collect();
            code.encode(&d, &mut pm).unwrap();
        }
        update_through_ranged_deltas(code.as_ref(), &mut shards, 5, &mut rng);
        let sv: Vec<&[u8]> = shards.iter().map(|v| v.as_slice()).collect();
        prop_assert!(code.verify(&sv).unwrap());
    }
}
