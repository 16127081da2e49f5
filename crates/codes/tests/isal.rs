//! Cross-check against ISA-L (built with `--features isal`, Debian libisal-dev): the Cauchy code's
//! generator and parity are byte-identical to `gf_gen_cauchy1_matrix` + `ec_encode_data`, and ISA-L
//! decodes what we encode.
#![cfg(feature = "isal")]

use ecstack_base::rng::Rng;
use ecstack_codes::isal::{self, IsalTables};
use ecstack_codes::{new_code, new_linear_code, CodeKind};

#[test]
fn cauchy_matrix_is_isal_cauchy1() {
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
            isal::cauchy1_matrix(k, m),
            "k={k} m={m}"
        );
    }
}

#[test]
fn cauchy_parity_is_byte_identical_to_isal() {
    let mut rng = Rng::new(42);
    for (k, m, len) in [
        (4usize, 2usize, 4096usize),
        (6, 2, 65536),
        (10, 4, 1 << 20),
        (12, 4, 262_144),
        (3, 3, 1),
        (7, 5, 4097),
        (32, 16, 1000),
    ] {
        let code = new_code(CodeKind::RsCauchy, k, m).unwrap();
        let data: Vec<Vec<u8>> = (0..k)
            .map(|_| {
                let mut v = vec![0u8; len];
                rng.fill(&mut v);
                v
            })
            .collect();
        let d: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        let mut ours = vec![vec![0u8; len]; m];
        let mut o: Vec<&mut [u8]> = ours.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.encode(&d, &mut o).unwrap();
        let g = isal::cauchy1_matrix(k, m);
        let mut t = IsalTables::new(k, m, &g[k * k..]);
        let mut theirs = vec![vec![0u8; len]; m];
        let mut th: Vec<&mut [u8]> = theirs.iter_mut().map(|v| v.as_mut_slice()).collect();
        t.encode(len, &d, &mut th);
        assert_eq!(ours, theirs, "k={k} m={m} len={len}");
    }
}

#[test]
fn isal_decodes_our_parity() {
    let mut rng = Rng::new(43);
    let (k, m, len) = (8usize, 3usize, 10_000usize);
    let code = new_code(CodeKind::RsCauchy, k, m).unwrap();
    let mut shards: Vec<Vec<u8>> = (0..k + m).map(|_| vec![0u8; len]).collect();
    for s in shards.iter_mut().take(k) {
        rng.fill(s);
    }
    {
        let (a, b) = shards.split_at_mut(k);
        let d: Vec<&[u8]> = a.iter().map(|v| v.as_slice()).collect();
        let mut p: Vec<&mut [u8]> = b.iter_mut().map(|v| v.as_mut_slice()).collect();
        code.encode(&d, &mut p).unwrap();
    }
    // Lose data 0, 5 and 7; ISA-L rebuilds them from the first k survivors.
    let survivors: Vec<usize> = (0..k + m)
        .filter(|i| ![0, 5, 7].contains(i))
        .take(k)
        .collect();
    let g = isal::cauchy1_matrix(k, m);
    let mut b = Vec::new();
    for &s in &survivors {
        b.extend_from_slice(&g[s * k..(s + 1) * k]);
    }
    let inv = isal::invert(&b, k).unwrap();
    let mut rows = Vec::new();
    for e in [0usize, 5, 7] {
        rows.extend_from_slice(&inv[e * k..(e + 1) * k]);
    }
    let mut t = IsalTables::new(k, 3, &rows);
    let srcs: Vec<&[u8]> = survivors.iter().map(|&i| shards[i].as_slice()).collect();
    let mut out = vec![vec![0u8; len]; 3];
    let mut o: Vec<&mut [u8]> = out.iter_mut().map(|v| v.as_mut_slice()).collect();
    t.encode(len, &srcs, &mut o);
    assert_eq!(out[0], shards[0]);
    assert_eq!(out[1], shards[5]);
    assert_eq!(out[2], shards[7]);
}
