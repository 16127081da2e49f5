//! Reed-Solomon, XOR and RAID-6 (RDP: tests/rdp.rs): decode of any k shards equals the data, exhaustively over every erasure
//! pattern for k + m <= 12 and randomly up to k + m = 256; parity deltas equal a fresh encode.

use ecstack_base::rng::Rng;
use ecstack_codes::{new_code, CodeError, CodeKind, ErasureCode};
use proptest::prelude::*;

fn encode_random(code: &dyn ErasureCode, len: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut shards: Vec<Vec<u8>> = (0..code.n()).map(|_| vec![0u8; len]).collect();
    for s in shards.iter_mut().take(code.k()) {
        rng.fill(s);
    }
    let (data, parity) = shards.split_at_mut(code.k());
    let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
    code.encode(&d, &mut p).unwrap();
    shards
}

/// Lose `erased` and rebuild them, both with missing shards as `None` and in place.
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
            "{code:?}: shard {i} wrong after losing {erased:?}"
        );
    }
    let mut work: Vec<Vec<u8>> = shards.to_vec();
    for &e in erased {
        work[e].fill(0xee);
    }
    let mut w: Vec<&mut [u8]> = work.iter_mut().map(|v| v.as_mut_slice()).collect();
    code.reconstruct_in_place(&mut w, erased)
        .unwrap_or_else(|e| panic!("{code:?} erased {erased:?}: {e}"));
    for &e in erased {
        assert_eq!(
            work[e], shards[e],
            "{code:?}: shard {e} wrong after losing {erased:?} (in place)"
        );
    }
}

/// Every subset of {0..n} of size `size`, as index lists.
fn subsets(n: usize, size: usize) -> Vec<Vec<usize>> {
    (0u32..1 << n)
        .filter(|m| m.count_ones() as usize == size)
        .map(|m| (0..n).filter(|i| m >> i & 1 == 1).collect())
        .collect()
}

#[test]
fn exhaustive_erasure_patterns_up_to_n_12() {
    let mut rng = Rng::new(1);
    let mut patterns = 0usize;
    // RDP's chunks are p - 1 rows (not 67 bytes): tests/rdp.rs covers its every pattern.
    for kind in CodeKind::ALL.into_iter().filter(|&k| k != CodeKind::Rdp) {
        for n in 2..=12usize {
            for m in 1..n {
                let k = n - m;
                if (kind == CodeKind::Xor && m != 1) || (kind == CodeKind::Raid6 && m != 2) {
                    continue;
                }
                let code = new_code(kind, k, m).unwrap();
                // An odd length exercises SIMD bodies and scalar tails.
                let shards = encode_random(code.as_ref(), 67, &mut rng);
                let sv: Vec<&[u8]> = shards.iter().map(|v| v.as_slice()).collect();
                assert!(code.verify(&sv).unwrap());
                for size in 1..=m {
                    for erased in subsets(n, size) {
                        check_pattern(code.as_ref(), &shards, &erased);
                        patterns += 1;
                    }
                }
            }
        }
    }
    eprintln!("{patterns} erasure patterns checked");
    assert!(patterns > 10_000);
}

#[test]
fn random_large_codes_up_to_256() {
    let mut rng = Rng::new(2);
    let mut cases = vec![
        (200usize, 56usize),
        (128, 128),
        (1, 255),
        (255, 1),
        (223, 32),
    ];
    for _ in 0..10 {
        let n = 13 + rng.below(244) as usize;
        let m = 1 + rng.below(n as u64 - 1) as usize;
        cases.push((n - m, m));
    }
    for (k, m) in cases {
        for kind in [CodeKind::RsVandermonde, CodeKind::RsCauchy] {
            let code = new_code(kind, k, m).unwrap();
            let shards = encode_random(code.as_ref(), 33, &mut rng);
            for _ in 0..2 {
                let mut idx: Vec<usize> = (0..k + m).collect();
                rng.shuffle(&mut idx);
                let lost = 1 + rng.below(m as u64) as usize;
                let mut erased = idx[..lost].to_vec();
                erased.sort();
                check_pattern(code.as_ref(), &shards, &erased);
            }
        }
    }
}

#[test]
fn raid6_large_k_and_xor_fast_paths() {
    let mut rng = Rng::new(3);
    let code = new_code(CodeKind::Raid6, 254, 2).unwrap();
    let shards = encode_random(code.as_ref(), 129, &mut rng);
    check_pattern(code.as_ref(), &shards, &[0, 253]);
    check_pattern(code.as_ref(), &shards, &[100, 255]);
    check_pattern(code.as_ref(), &shards, &[254]);
    let x = new_code(CodeKind::Xor, 20, 1).unwrap();
    let shards = encode_random(x.as_ref(), 4097, &mut rng);
    for e in [0, 7, 20] {
        check_pattern(x.as_ref(), &shards, &[e]);
    }
}

#[test]
fn errors_are_clear_not_panics() {
    let e = new_code(CodeKind::RsCauchy, 0, 2).unwrap_err();
    assert!(matches!(e, CodeError::Params { .. }), "{e}");
    assert!(e.to_string().contains("k >= 1"), "{e}");
    assert!(new_code(CodeKind::RsCauchy, 200, 57).is_err());
    assert!(new_code(CodeKind::Xor, 4, 2).is_err());
    assert!(new_code(CodeKind::Raid6, 4, 3).is_err());
    assert!(matches!(
        CodeKind::parse("rs-foo"),
        Err(CodeError::UnknownCode { .. })
    ));
    let code = new_code(CodeKind::RsVandermonde, 4, 2).unwrap();
    let mut rng = Rng::new(4);
    let mut shards = encode_random(code.as_ref(), 16, &mut rng);
    let mut w: Vec<&mut [u8]> = shards.iter_mut().map(|v| v.as_mut_slice()).collect();
    let e = code.reconstruct_in_place(&mut w, &[0, 1, 2]).unwrap_err();
    assert!(
        matches!(e, CodeError::TooManyErasures { erased: 3, m: 2 }),
        "{e}"
    );
    let e = code.reconstruct_in_place(&mut w, &[9]).unwrap_err();
    assert!(
        matches!(e, CodeError::IndexOutOfRange { index: 9, n: 6 }),
        "{e}"
    );
    let e = code.reconstruct_in_place(&mut w, &[1, 1]).unwrap_err();
    assert!(matches!(e, CodeError::DuplicateErasure { index: 1 }), "{e}");
    let e = code.reconstruct_in_place(&mut w[..5], &[0]).unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::ShardCount {
                got: 5,
                want: 6,
                ..
            }
        ),
        "{e}"
    );
    let mut short = vec![vec![0u8; 16]; 5];
    short.push(vec![0u8; 15]);
    let mut w: Vec<&mut [u8]> = short.iter_mut().map(|v| v.as_mut_slice()).collect();
    let e = code.reconstruct_in_place(&mut w, &[0]).unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::ShardSize {
                index: 5,
                got: 15,
                want: 16,
                ..
            }
        ),
        "{e}"
    );

    // Missing shards as `None`: too few present, a wrong count, a length mismatch.
    let mut opt: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
    opt[0] = None;
    opt[2] = None;
    opt[5] = None;
    let e = code.reconstruct(&mut opt).unwrap_err();
    assert!(
        matches!(e, CodeError::TooFewShards { present: 3, k: 4 }),
        "{e}"
    );
    assert!(
        opt[0].is_none() && opt[2].is_none(),
        "nothing rebuilt on error"
    );
    let e = code.reconstruct(&mut opt[..4]).unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::ShardCount {
                got: 4,
                want: 6,
                ..
            }
        ),
        "{e}"
    );
    let mut opt: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
    opt[0] = None;
    opt[3] = Some(vec![1u8; 17]);
    let e = code.reconstruct(&mut opt).unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::ShardSize {
                index: 3,
                got: 17,
                want: 16,
                ..
            }
        ),
        "{e}"
    );

    // Encode and deltas check counts and lengths.
    let data = vec![vec![0u8; 16]; 4];
    let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
    let mut parity = [vec![0u8; 16], vec![0u8; 8]];
    let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
    let e = code.encode(&d, &mut p).unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::ShardSize {
                index: 1,
                got: 8,
                want: 16,
                ..
            }
        ),
        "{e}"
    );
    let e = code.encode(&d[..3], &mut p).unwrap_err();
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
    let e = code.parity_deltas(4, &[0; 8], &[0; 8], &mut p).unwrap_err();
    assert!(
        matches!(e, CodeError::IndexOutOfRange { index: 4, .. }),
        "{e}"
    );
    let e = code.parity_deltas(0, &[0; 8], &[0; 7], &mut p).unwrap_err();
    assert!(matches!(e, CodeError::ShardSize { .. }), "{e}");
    let e = code.apply_delta(&mut [0u8; 8], &[0u8; 9]).unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::ShardSize {
                got: 9,
                want: 8,
                ..
            }
        ),
        "{e}"
    );
    let e = ecstack_codes::xor_into(&mut [0u8; 8], &[0u8; 7]).unwrap_err();
    assert!(
        matches!(
            e,
            CodeError::ShardSize {
                got: 7,
                want: 8,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn verify_detects_corruption() {
    let mut rng = Rng::new(5);
    // RDP (chunks of p - 1 rows) has its own corruption test in tests/rdp.rs.
    for kind in CodeKind::ALL.into_iter().filter(|&k| k != CodeKind::Rdp) {
        let m = match kind {
            CodeKind::Xor => 1,
            _ => 2,
        };
        let code = new_code(kind, 6, m).unwrap();
        let mut shards = encode_random(code.as_ref(), 100, &mut rng);
        shards[3][50] ^= 0x10;
        let sv: Vec<&[u8]> = shards.iter().map(|v| v.as_slice()).collect();
        assert!(!code.verify(&sv).unwrap(), "{kind}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// encode, then random partial updates applied through parity deltas only: parity equals a fresh
    /// encode of the updated data (the linearity equation of CodFS §2.1.1).
    #[test]
    fn deltas_keep_parity_equal_to_fresh_encode(
        kind_i in 0usize..4, k in 1usize..12, m_raw in 1usize..5, len in 1usize..600,
        seed in any::<u64>(), updates in 1usize..8,
    ) {
        let kind = CodeKind::ALL[kind_i];
        let m = match kind { CodeKind::Xor => 1, CodeKind::Raid6 => 2, _ => m_raw };
        let code = new_code(kind, k, m).unwrap();
        let mut rng = Rng::new(seed);
        let mut shards = encode_random(code.as_ref(), len, &mut rng);
        for _ in 0..updates {
            let l = rng.below(k as u64) as usize;
            let off = rng.below(len as u64) as usize;
            let n = 1 + rng.below((len - off) as u64) as usize;
            let old = shards[l][off..off + n].to_vec();
            let mut new = vec![0u8; n];
            rng.fill(&mut new);
            let mut deltas = vec![vec![0u8; n]; m];
            let mut dm: Vec<&mut [u8]> = deltas.iter_mut().map(|v| v.as_mut_slice()).collect();
            code.parity_deltas(l, &old, &new, &mut dm).unwrap();
            shards[l][off..off + n].copy_from_slice(&new);
            for (i, d) in deltas.iter().enumerate() {
                code.apply_delta(&mut shards[k + i][off..off + n], d).unwrap();
            }
        }
        let mut fresh = vec![vec![0u8; len]; m];
        let d: Vec<&[u8]> = shards[..k].iter().map(|v| v.as_slice()).collect();
        let mut p: Vec<&mut [u8]> = fresh.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.encode(&d, &mut p).unwrap();
        prop_assert_eq!(&fresh[..], &shards[k..]);
    }

    /// Any k of n shards decode, for random codes, lengths and erasure sets.
    #[test]
    fn any_k_of_n_decodes(kind_i in 0usize..2, k in 1usize..40, m in 1usize..16, len in 0usize..300, seed in any::<u64>()) {
        let code = new_code(CodeKind::ALL[kind_i], k, m).unwrap();
        let mut rng = Rng::new(seed);
        let shards = encode_random(code.as_ref(), len, &mut rng);
        let mut idx: Vec<usize> = (0..k + m).collect();
        rng.shuffle(&mut idx);
        let mut erased = idx[..m].to_vec();
        erased.sort();
        check_pattern(code.as_ref(), &shards, &erased);
    }
}
