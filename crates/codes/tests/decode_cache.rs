//! The decode-matrix cache: repeated decodes with one erasure pattern invert once (hits), the LRU keeps
//! at most its limits and evicts the least recently used pattern, a cache of size 0 inverts every time,
//! and decoding stays correct through any sequence of patterns (proptest, against the original data).

use ecstack_base::rng::Rng;
use ecstack_codes::{
    new_linear_code, new_linear_code_with, CodeError, CodeKind, CodeOptions, DecodeCacheStats,
    LinearCode,
};
use proptest::prelude::*;

fn encode_random(code: &dyn LinearCode, len: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
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

/// Lose `erased`, rebuild in place, compare with the originals.
fn decode_checked(code: &dyn LinearCode, shards: &[Vec<u8>], erased: &[usize]) {
    let mut work = shards.to_vec();
    for &e in erased {
        work[e].fill(0xee);
    }
    let mut w: Vec<&mut [u8]> = work.iter_mut().map(|v| v.as_mut_slice()).collect();
    code.reconstruct_in_place(&mut w, erased).unwrap();
    for &e in erased {
        assert_eq!(work[e], shards[e], "{code:?} lost {erased:?}: shard {e}");
    }
}

fn opts(entries: usize, bytes: usize) -> CodeOptions {
    CodeOptions {
        decode_cache_entries_max: entries,
        decode_cache_bytes_max: bytes,
        ..CodeOptions::default()
    }
}

#[test]
fn repeated_pattern_inverts_once() {
    let code = new_linear_code(CodeKind::RsCauchy, 4, 2).unwrap();
    let shards = encode_random(&*code, 4096, 1);
    for _ in 0..100 {
        decode_checked(&*code, &shards, &[0, 3]);
    }
    let s = code.decode_cache_stats();
    assert_eq!((s.misses, s.hits, s.evictions, s.entries), (1, 99, 0, 1));
    assert!(s.bytes > 0);
    // The order of the erased list is part of the key (the rebuilt rows follow it).
    decode_checked(&*code, &shards, &[3, 0]);
    assert_eq!(code.decode_cache_stats().misses, 2);
}

#[test]
fn lru_evicts_least_recently_used() {
    let code = new_linear_code_with(CodeKind::RsVandermonde, 6, 3, opts(2, usize::MAX)).unwrap();
    let shards = encode_random(&*code, 1000, 2);
    let (a, b, c) = ([0usize, 1], [2usize, 7], [8usize]);
    decode_checked(&*code, &shards, &a); // miss
    decode_checked(&*code, &shards, &b); // miss
    decode_checked(&*code, &shards, &a); // hit: a is now more recent than b
    decode_checked(&*code, &shards, &c); // miss: evicts b
    decode_checked(&*code, &shards, &a); // hit
    decode_checked(&*code, &shards, &b); // miss: evicts c
    let s = code.decode_cache_stats();
    assert_eq!(
        (s.hits, s.misses, s.evictions, s.entries),
        (2, 4, 2, 2),
        "{s:?}"
    );
    decode_checked(&*code, &shards, &c); // miss: c was evicted
    assert_eq!(code.decode_cache_stats().misses, 5);
}

#[test]
fn byte_limit_bounds_the_cache() {
    // One (10,4) plan with 4 erasures holds 40 coefficients' tables (2,560+ bytes at the SIMD levels,
    // 40 at scalar): a 1-byte limit keeps none, and decoding still works.
    let code = new_linear_code_with(CodeKind::RsCauchy, 10, 4, opts(64, 1)).unwrap();
    let shards = encode_random(&*code, 333, 3);
    for _ in 0..3 {
        decode_checked(&*code, &shards, &[0, 1, 2, 3]);
    }
    let s = code.decode_cache_stats();
    assert_eq!(
        (s.hits, s.misses, s.entries, s.bytes),
        (0, 3, 0, 0),
        "{s:?}"
    );
    // A limit that holds about two plans never holds more than it allows.
    let one = {
        let probe = new_linear_code(CodeKind::RsCauchy, 10, 4).unwrap();
        decode_checked(&*probe, &shards, &[0, 1, 2, 3]);
        probe.decode_cache_stats().bytes
    };
    let code =
        new_linear_code_with(CodeKind::RsCauchy, 10, 4, opts(64, 2 * one + one / 2)).unwrap();
    for first in 0..8 {
        decode_checked(&*code, &shards, &[first, first + 1, first + 2, first + 3]);
        let s = code.decode_cache_stats();
        assert!(s.bytes <= 2 * one + one / 2 && s.entries <= 2, "{s:?}");
    }
    assert_eq!(code.decode_cache_stats().evictions, 6);
}

#[test]
fn zero_entries_turns_the_cache_off() {
    let code = new_linear_code_with(CodeKind::RsCauchy, 4, 2, opts(0, usize::MAX)).unwrap();
    let shards = encode_random(&*code, 100, 4);
    for _ in 0..5 {
        decode_checked(&*code, &shards, &[1, 4]);
    }
    assert_eq!(
        code.decode_cache_stats(),
        DecodeCacheStats {
            hits: 0,
            misses: 5,
            evictions: 0,
            entries: 0,
            bytes: 0
        }
    );
}

#[test]
fn bad_patterns_are_refused_and_never_cached() {
    let code = new_linear_code(CodeKind::RsCauchy, 4, 2).unwrap();
    let shards = encode_random(&*code, 64, 5);
    for _ in 0..2 {
        let mut work = shards.clone();
        let mut w: Vec<&mut [u8]> = work.iter_mut().map(|v| v.as_mut_slice()).collect();
        assert!(matches!(
            code.reconstruct_in_place(&mut w, &[1, 1]),
            Err(CodeError::DuplicateErasure { index: 1 })
        ));
        assert!(matches!(
            code.reconstruct_in_place(&mut w, &[9]),
            Err(CodeError::IndexOutOfRange { index: 9, n: 6 })
        ));
        assert!(matches!(
            code.reconstruct_in_place(&mut w, &[0, 1, 2]),
            Err(CodeError::TooManyErasures { erased: 3, m: 2 })
        ));
    }
    assert_eq!(code.decode_cache_stats().entries, 0);
}

#[test]
fn shared_between_threads() {
    let code = new_linear_code(CodeKind::RsCauchy, 6, 3).unwrap();
    let shards = encode_random(&*code, 2048, 6);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (code, shards) = (&code, &shards);
            s.spawn(move || {
                for i in 0..50 {
                    decode_checked(&**code, shards, &[(t + i) % 9, (t + i + 4) % 9]);
                }
            });
        }
    });
    let st = code.decode_cache_stats();
    assert_eq!(st.hits + st.misses, 200);
    assert!(st.entries <= 9 * 8, "{st:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any sequence of erasure patterns through a small cache (so it hits and evicts) decodes exactly,
    /// and the counters add up.
    #[test]
    fn cached_decodes_stay_correct(
        kind_i in 0usize..2,
        k in 1usize..12,
        m in 1usize..5,
        entries in 1usize..4,
        picks in proptest::collection::vec(any::<u64>(), 1..40),
        seed in any::<u64>(),
    ) {
        let kind = [CodeKind::RsCauchy, CodeKind::RsVandermonde][kind_i];
        let code = new_linear_code_with(kind, k, m, opts(entries, usize::MAX)).unwrap();
        let shards = encode_random(&*code, 67, seed);
        let n = k + m;
        for p in &picks {
            // A pattern of 1..=m distinct shards from the pick, few enough distinct ones to hit.
            let count = 1 + (*p as usize % m);
            let start = (*p >> 8) as usize % 3;
            let erased: Vec<usize> = (0..count).map(|i| (start + i * 2) % n).collect();
            let mut dedup = erased.clone();
            dedup.sort_unstable();
            dedup.dedup();
            if dedup.len() != erased.len() {
                continue;
            }
            decode_checked(&*code, &shards, &erased);
        }
        let s = code.decode_cache_stats();
        prop_assert!(s.entries <= entries);
        prop_assert_eq!(s.misses, s.entries as u64 + s.evictions);
    }
}

/// The cache pays: with many patterns in turn and a cache that holds them all, only the first round
/// misses.
#[test]
fn every_pattern_of_a_small_code_misses_once() {
    let code = new_linear_code(CodeKind::RsCauchy, 4, 2).unwrap();
    let shards = encode_random(&*code, 256, 7);
    let patterns: Vec<Vec<usize>> = (0..6)
        .flat_map(|a| (a + 1..6).map(move |b| vec![a, b]))
        .collect();
    for _ in 0..3 {
        for p in &patterns {
            decode_checked(&*code, &shards, p);
        }
    }
    let s = code.decode_cache_stats();
    assert_eq!((s.misses, s.hits), (15, 30));
}

/// A thread's last plan (the fast path in front of the shared LRU) answers only its own code and
/// pattern: codes alternated on one thread, a code dropped and another made, patterns alternated.
#[test]
fn last_plan_answers_only_its_code_and_pattern() {
    let cauchy = new_linear_code(CodeKind::RsCauchy, 4, 2).unwrap();
    let vand = new_linear_code(CodeKind::RsVandermonde, 4, 2).unwrap();
    let (sc, sv) = (
        encode_random(&*cauchy, 512, 8),
        encode_random(&*vand, 512, 9),
    );
    for _ in 0..3 {
        decode_checked(&*cauchy, &sc, &[0, 1]);
        decode_checked(&*cauchy, &sc, &[0, 1]);
        decode_checked(&*vand, &sv, &[0, 1]);
        decode_checked(&*cauchy, &sc, &[1, 0]);
        decode_checked(&*cauchy, &sc, &[0, 5]);
    }
    let s = cauchy.decode_cache_stats();
    assert_eq!((s.misses, s.hits), (3, 9), "{s:?}");
    assert_eq!(vand.decode_cache_stats().misses, 1);
    for kind in [
        CodeKind::RsCauchy,
        CodeKind::RsVandermonde,
        CodeKind::RsCauchy,
    ] {
        let code = new_linear_code(kind, 4, 2).unwrap();
        let shards = encode_random(&*code, 256, 10);
        decode_checked(&*code, &shards, &[2, 3]);
        decode_checked(&*code, &shards, &[2, 3]);
        assert_eq!(
            (
                code.decode_cache_stats().misses,
                code.decode_cache_stats().hits
            ),
            (1, 1)
        );
    }
}

/// A use answered by a thread's last plan counts as a use in the LRU order: the plan another thread
/// used less recently is the one evicted.
#[test]
fn last_plan_uses_keep_the_lru_order() {
    let code = new_linear_code_with(CodeKind::RsCauchy, 6, 3, opts(2, usize::MAX)).unwrap();
    let shards = encode_random(&*code, 1000, 11);
    let (a, b, c) = ([0usize, 1], [2usize, 7], [8usize]);
    decode_checked(&*code, &shards, &a); // miss
    std::thread::scope(|s| {
        s.spawn(|| decode_checked(&*code, &shards, &b)); // miss, on another thread
    });
    decode_checked(&*code, &shards, &a); // hit: this thread's last plan; a is now newer than b
    decode_checked(&*code, &shards, &c); // miss: evicts b
    decode_checked(&*code, &shards, &a); // hit (from the LRU: this thread's last plan is c)
    let s = code.decode_cache_stats();
    assert_eq!(
        (s.hits, s.misses, s.evictions, s.entries),
        (2, 3, 1, 2),
        "{s:?}"
    );
    decode_checked(&*code, &shards, &b); // miss: b was evicted
    assert_eq!(code.decode_cache_stats().misses, 4);
}
