//! Byte-identity checks against one ISA-L build, shared by `tests/isal.rs` (Debian's 2.30) and
//! `tests/isal_new.rs` (the newest, from isal-sys): the Cauchy generator, parity from `ec_encode_data`,
//! decoding (ISA-L rebuilds what we encode, and our rebuilt shards equal ISA-L's) and parity deltas
//! against `ec_encode_data_update`, at ISA-L's own dispatch and at every kernel level it has that this
//! CPU runs.
#![allow(dead_code)]

use ecstack_base::rng::Rng;
use ecstack_codes::isal::Isal;
use ecstack_codes::{new_code, new_linear_code, CodeKind, Simd};

/// ISA-L's dispatch (`None`) and every forced level the build has and the CPU runs.
fn levels(lib: &Isal) -> Vec<Option<Simd>> {
    std::iter::once(None)
        .chain(lib.levels().into_iter().map(Some))
        .collect()
}

fn rand_bufs(rng: &mut Rng, count: usize, len: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| {
            let mut v = vec![0u8; len];
            rng.fill(&mut v);
            v
        })
        .collect()
}

/// The rows (the 1 MiB one shortened to keep the test quick) plus odd shapes: tiny, unaligned
/// tails, wide codes.
const SHAPES: [(usize, usize, usize); 8] = [
    (4, 2, 4096),
    (6, 2, 65536),
    (10, 4, 100_003),
    (12, 4, 262_144),
    (3, 3, 1),
    (7, 5, 4097),
    (32, 16, 1000),
    (20, 8, 100),
];

pub fn cauchy_matrix_is_isal_cauchy1(lib: &Isal) {
    for (k, m) in [
        (1usize, 1usize),
        (4, 2),
        (6, 3),
        (10, 4),
        (12, 4),
        (20, 8),
        (100, 50),
        (200, 56),
    ] {
        let ours = new_linear_code(CodeKind::RsCauchy, k, m).unwrap();
        assert_eq!(
            ours.generator().data,
            lib.cauchy1_matrix(k, m),
            "{lib:?} k={k} m={m}"
        );
    }
}

pub fn parity_is_byte_identical(lib: &Isal) {
    let mut rng = Rng::new(42);
    for (k, m, len) in SHAPES {
        let code = new_code(CodeKind::RsCauchy, k, m).unwrap();
        let data = rand_bufs(&mut rng, k, len);
        let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        let mut ours = vec![vec![0u8; len]; m];
        let mut o: Vec<&mut [u8]> = ours.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.encode(&d, &mut o).unwrap();
        let g = lib.cauchy1_matrix(k, m);
        for level in levels(lib) {
            let mut t = lib.tables(level, k, m, &g[k * k..]);
            let mut theirs = vec![vec![0xa5u8; len]; m];
            let mut th: Vec<&mut [u8]> = theirs.iter_mut().map(|v| v.as_mut_slice()).collect();
            t.encode(len, &d, &mut th);
            assert_eq!(ours, theirs, "{lib:?} {level:?} k={k} m={m} len={len}");
        }
    }
}

pub fn decode_is_byte_identical(lib: &Isal) {
    let mut rng = Rng::new(43);
    for (k, m, len) in SHAPES {
        let code = new_linear_code(CodeKind::RsCauchy, k, m).unwrap();
        let mut shards = rand_bufs(&mut rng, k + m, len);
        {
            let (a, b) = shards.split_at_mut(k);
            let d: Vec<&[u8]> = a.iter().map(|v| v.as_slice()).collect();
            let mut p: Vec<&mut [u8]> = b.iter_mut().map(|v| v.as_mut_slice()).collect();
            code.encode(&d, &mut p).unwrap();
        }
        // Three patterns: the first m data chunks, a mix of data and parity, the last m shards.
        let n = k + m;
        let mut patterns = vec![(0..m.min(k)).collect::<Vec<_>>()];
        patterns.push((0..m).map(|i| (i * 7 + 1) % n).collect());
        patterns.push((n - m..n).collect());
        for mut erased in patterns {
            erased.sort_unstable();
            erased.dedup();
            // Ours, in place.
            let mut mine = shards.clone();
            for &e in &erased {
                mine[e].fill(0);
            }
            let mut refs: Vec<&mut [u8]> = mine.iter_mut().map(|v| v.as_mut_slice()).collect();
            code.reconstruct_in_place(&mut refs, &erased).unwrap();
            for &e in &erased {
                assert_eq!(mine[e], shards[e], "ours k={k} m={m} {erased:?}");
            }
            // ISA-L, from the first k survivors (the same ones we read), with rows it computed itself.
            let (survivors, our_rows) = code.decode_plan(&erased).unwrap();
            let g = lib.cauchy1_matrix(k, m);
            let rows = lib.decode_rows(&g, k, &survivors, &erased).unwrap();
            assert_eq!(
                rows, our_rows.data,
                "{lib:?} decode rows k={k} m={m} {erased:?}"
            );
            let srcs: Vec<&[u8]> = survivors.iter().map(|&i| shards[i].as_slice()).collect();
            for level in levels(lib) {
                let mut t = lib.tables(level, k, erased.len(), &rows);
                let mut out = vec![vec![0x5au8; len]; erased.len()];
                let mut o: Vec<&mut [u8]> = out.iter_mut().map(|v| v.as_mut_slice()).collect();
                t.encode(len, &srcs, &mut o);
                for (i, &e) in erased.iter().enumerate() {
                    assert_eq!(out[i], mine[e], "{lib:?} {level:?} k={k} m={m} {erased:?}");
                }
            }
        }
    }
}

pub fn delta_is_byte_identical(lib: &Isal) {
    let mut rng = Rng::new(44);
    for (k, m, len) in SHAPES {
        let code = new_code(CodeKind::RsCauchy, k, m).unwrap();
        let data = rand_bufs(&mut rng, k, len);
        let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        let mut parity = vec![vec![0u8; len]; m];
        let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.encode(&d, &mut p).unwrap();
        let l = (k * 5 + 3) % k;
        let new = rand_bufs(&mut rng, 1, len).remove(0);
        // Ours: parity deltas, applied.
        let mut deltas = vec![vec![0u8; len]; m];
        let mut dl: Vec<&mut [u8]> = deltas.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.parity_deltas(l, &data[l], &new, &mut dl).unwrap();
        let mut ours = parity.clone();
        for (pp, dd) in ours.iter_mut().zip(&deltas) {
            code.apply_delta(pp, dd).unwrap();
        }
        // A fresh encode of the updated data agrees (an oracle independent of the delta path).
        let mut updated = data.clone();
        updated[l].copy_from_slice(&new);
        let ud: Vec<&[u8]> = updated.iter().map(|v| v.as_slice()).collect();
        let mut fresh = vec![vec![0u8; len]; m];
        let mut f: Vec<&mut [u8]> = fresh.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.encode(&ud, &mut f).unwrap();
        assert_eq!(ours, fresh, "k={k} m={m} len={len}");
        // ISA-L: parity ^= coef * (old ^ new) with ec_encode_data_update, column l of the parity tables.
        let diff: Vec<u8> = data[l].iter().zip(&new).map(|(a, b)| a ^ b).collect();
        let g = lib.cauchy1_matrix(k, m);
        for level in levels(lib) {
            let mut t = lib.tables(level, k, m, &g[k * k..]);
            let mut theirs = parity.clone();
            let mut th: Vec<&mut [u8]> = theirs.iter_mut().map(|v| v.as_mut_slice()).collect();
            t.update(len, l, &diff, &mut th);
            assert_eq!(ours, theirs, "{lib:?} {level:?} k={k} m={m} len={len}");
            // The deltas alone: update into zeroed buffers.
            let mut z = vec![vec![0u8; len]; m];
            let mut zr: Vec<&mut [u8]> = z.iter_mut().map(|v| v.as_mut_slice()).collect();
            t.update(len, l, &diff, &mut zr);
            assert_eq!(deltas, z, "{lib:?} {level:?} deltas k={k} m={m} len={len}");
        }
    }
}
