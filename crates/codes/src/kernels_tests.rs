//! Every SIMD level against the scalar kernels, on random inputs of every length 0..=4097. (Unit tests,
//! since the kernels are internal to the crate.)

use crate::gf;
use crate::kernels::{self, Simd, Tables};
use crate::rng::Rng;

fn rand_vec(rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill(&mut v);
    v
}

#[test]
fn mul_table_matches_field() {
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            assert_eq!(kernels::MUL_TABLE[a as usize][b as usize], gf::mul(a, b));
        }
    }
    assert_eq!(kernels::MUL2_MATRIX, gf::affine_matrix(2));
}

/// The per-coefficient tables (built from `MUL_TABLE` and the compile-time affine table) are the
/// field's nibble products and bit matrices.
#[test]
fn tables_hold_nibble_products_and_affine_matrices() {
    let coef: Vec<u8> = (0..=255u8).collect();
    let nib = Tables::for_level(Simd::Avx2, 16, 16, &coef);
    let aff = Tables::for_level(Simd::Avx2Gfni, 16, 16, &coef);
    for c in 0..=255u8 {
        let t = gf::nibble_tables(c);
        let w = &nib.nib[c as usize];
        assert_eq!(
            (&w[..16], &w[16..32], &w[32..48], &w[48..]),
            (&t[..16], &t[..16], &t[16..], &t[16..]),
            "c={c}"
        );
        assert_eq!(aff.aff[c as usize], gf::affine_matrix(c), "c={c}");
    }
}

#[test]
fn dot_prod_every_level_every_length() {
    let levels = kernels::supported_levels();
    eprintln!("testing levels {levels:?}");
    let mut rng = Rng::new(7);
    // Shapes: single multiply, the multi-output groups (1..=8 rows and beyond), odd column counts.
    let shapes = [
        (1usize, 1usize),
        (2, 3),
        (4, 10),
        (5, 6),
        (8, 4),
        (9, 3),
        (3, 17),
    ];
    for len in 0..=4097usize {
        let (rows, cols) = shapes[len % shapes.len()];
        let coef = rand_vec(&mut rng, rows * cols);
        let srcs: Vec<Vec<u8>> = (0..cols).map(|_| rand_vec(&mut rng, len)).collect();
        let init: Vec<Vec<u8>> = (0..rows).map(|_| rand_vec(&mut rng, len)).collect();
        let s: Vec<&[u8]> = srcs.iter().map(|v| v.as_slice()).collect();
        // The scalar level's (overwrite, accumulate) outputs, which every other level must match.
        type Outputs = (Vec<Vec<u8>>, Vec<Vec<u8>>);
        let mut want: Option<Outputs> = None;
        for &level in &levels {
            let t = Tables::for_level(level, rows, cols, &coef);
            let mut over = init.clone();
            let mut acc = init.clone();
            {
                let mut o: Vec<&mut [u8]> = over.iter_mut().map(|v| v.as_mut_slice()).collect();
                kernels::dot_prod(&t, &s, &mut o, len, false);
                let mut a: Vec<&mut [u8]> = acc.iter_mut().map(|v| v.as_mut_slice()).collect();
                kernels::dot_prod(&t, &s, &mut a, len, true);
            }
            match &want {
                None => want = Some((over, acc)),
                Some((wo, wa)) => {
                    assert_eq!(
                        &over, wo,
                        "overwrite: level {level:?} len {len} shape {rows}x{cols}"
                    );
                    assert_eq!(
                        &acc, wa,
                        "accumulate: level {level:?} len {len} shape {rows}x{cols}"
                    );
                }
            }
        }
        // The scalar result (first level) is checked against the definition on a few bytes.
        let (wo, _) = want.unwrap();
        if len > 0 {
            let i = len / 2;
            for r in 0..rows {
                let mut x = 0u8;
                for c in 0..cols {
                    x ^= gf::mul(coef[r * cols + c], srcs[c][i]);
                }
                assert_eq!(wo[r][i], x);
            }
        }
    }
}

#[test]
fn delta_xor_and_raid6_every_level() {
    let levels = kernels::supported_levels();
    let mut rng = Rng::new(11);
    for len in (0..=4097usize).step_by(7).chain([4095, 4096, 4097]) {
        let cols = 1 + len % 9;
        let srcs: Vec<Vec<u8>> = (0..cols).map(|_| rand_vec(&mut rng, len)).collect();
        let news: Vec<Vec<u8>> = (0..cols).map(|_| rand_vec(&mut rng, len)).collect();
        let s: Vec<&[u8]> = srcs.iter().map(|v| v.as_slice()).collect();
        let nw: Vec<&[u8]> = news.iter().map(|v| v.as_slice()).collect();
        let coef = rand_vec(&mut rng, 3 * cols);
        let mut results = Vec::new();
        for &level in &levels {
            let t = Tables::for_level(level, 3, cols, &coef);
            let mut d = vec![vec![0u8; len]; 3];
            let mut dm: Vec<&mut [u8]> = d.iter_mut().map(|v| v.as_mut_slice()).collect();
            kernels::dot_prod_delta(&t, &s, &nw, &mut dm, len, false);
            let mut x = vec![0xa5u8; len];
            kernels::xor_multi_level(level, &mut x, &s, true);
            let mut p = vec![0u8; len];
            let mut q = vec![0u8; len];
            kernels::raid6_pq_level(level, &s, &mut p, &mut q);
            results.push((level, d, x, p, q));
        }
        let (_, d0, x0, p0, q0) = &results[0];
        for (level, d, x, p, q) in &results[1..] {
            assert_eq!(d, d0, "delta level {level:?} len {len}");
            assert_eq!(x, x0, "xor level {level:?} len {len}");
            assert_eq!(p, p0, "raid6 P level {level:?} len {len}");
            assert_eq!(q, q0, "raid6 Q level {level:?} len {len}");
        }
        // Definitions, on the scalar result.
        for i in (0..len).step_by(97) {
            let mut xp = 0u8;
            let mut xq = 0u8;
            let mut xx = 0xa5u8;
            for (j, sj) in srcs.iter().enumerate() {
                xp ^= sj[i];
                xx ^= sj[i];
                xq ^= gf::mul(gf::pow(2, j), sj[i]);
            }
            assert_eq!((p0[i], q0[i], x0[i]), (xp, xq, xx));
            let mut dd = 0u8;
            for c in 0..cols {
                dd ^= gf::mul(coef[c], srcs[c][i] ^ news[c][i]);
            }
            assert_eq!(d0[0][i], dd);
        }
    }
}

#[test]
fn simd_level_names_roundtrip() {
    for l in Simd::ALL {
        assert_eq!(Simd::parse(l.name()), Some(l));
    }
    assert!(Simd::Scalar.supported());
    assert!(kernels::detected().supported());
}

/// Sources and outputs cut from one buffer in both orders (outputs after the sources, which makes the
/// dot product walk its sources from the last, and outputs before them), plain and paired (delta)
/// sources: every level matches the scalar kernel.
#[test]
fn dot_prod_walks_sources_either_way() {
    let mut rng = Rng::new(11);
    let (rows, cols, len) = (3usize, 5usize, 1000usize);
    let coef = rand_vec(&mut rng, rows * cols);
    let n_src = 2 * cols;
    for outputs_first in [false, true] {
        let mut buf = rand_vec(&mut rng, (n_src + rows) * len);
        let (a, b) = buf.split_at_mut(if outputs_first {
            rows * len
        } else {
            n_src * len
        });
        let (src_area, out_area) = if outputs_first { (b, a) } else { (a, b) };
        let srcs: Vec<&[u8]> = src_area.chunks(len).collect();
        assert!(
            kernels::away_from_outputs(
                &srcs.iter().map(|s| s.as_ptr()).collect::<Vec<_>>(),
                false,
                &[out_area.as_mut_ptr()]
            ) != outputs_first
        );
        let mut want: Option<(Vec<u8>, Vec<u8>)> = None;
        for level in kernels::supported_levels() {
            let t = Tables::for_level(level, rows, cols, &coef);
            let mut outs: Vec<&mut [u8]> = out_area.chunks_mut(len).collect();
            kernels::dot_prod(&t, &srcs[..cols], &mut outs, len, false);
            let plain = outs.concat();
            let mut outs: Vec<&mut [u8]> = out_area.chunks_mut(len).collect();
            kernels::dot_prod_delta(&t, &srcs[..cols], &srcs[cols..], &mut outs, len, false);
            let delta = outs.concat();
            match &want {
                None => want = Some((plain, delta)),
                Some((wp, wd)) => {
                    assert!(
                        *wp == plain,
                        "dot_prod at {level:?}, outputs first: {outputs_first}"
                    );
                    assert!(
                        *wd == delta,
                        "dot_prod_delta at {level:?}, outputs first: {outputs_first}"
                    );
                }
            }
        }
    }
}

/// The unrolled dot product (`group_k`: up to `UNROLL_ROWS_MAX` rows per group over 1..=`UNROLL_COLS_MAX`
/// columns, tables taken out of the loop) at every shape it takes and one past each limit, plain and
/// paired, overwrite and accumulate, below and above the prefetch threshold: every level matches the
/// scalar kernel.
#[test]
fn dot_prod_unrolled_shapes_every_level() {
    let levels = kernels::supported_levels();
    let mut rng = Rng::new(13);
    for rows in 1..=kernels::UNROLL_ROWS_MAX + 1 {
        for cols in 1..=kernels::UNROLL_COLS_MAX + 1 {
            // A length with a scalar tail, and one past the prefetch threshold with a tail too.
            let len = if (rows + cols) % 3 == 0 {
                kernels::PREFETCH_MIN_BYTES + 3 * 64 + 17
            } else {
                1000 + rows * 64 + cols
            };
            let coef = rand_vec(&mut rng, rows * cols);
            let srcs: Vec<Vec<u8>> = (0..2 * cols).map(|_| rand_vec(&mut rng, len)).collect();
            let init: Vec<Vec<u8>> = (0..rows).map(|_| rand_vec(&mut rng, len)).collect();
            let s: Vec<&[u8]> = srcs.iter().map(|v| v.as_slice()).collect();
            let mut want: Option<Vec<Vec<u8>>> = None;
            for &level in &levels {
                let t = Tables::for_level(level, rows, cols, &coef);
                let mut got = Vec::new();
                for acc in [false, true] {
                    let mut o = init.clone();
                    let mut om: Vec<&mut [u8]> = o.iter_mut().map(|v| v.as_mut_slice()).collect();
                    kernels::dot_prod(&t, &s[..cols], &mut om, len, acc);
                    got.push(o.concat());
                    let mut o = init.clone();
                    let mut om: Vec<&mut [u8]> = o.iter_mut().map(|v| v.as_mut_slice()).collect();
                    kernels::dot_prod_delta(&t, &s[..cols], &s[cols..], &mut om, len, acc);
                    got.push(o.concat());
                }
                match &want {
                    None => want = Some(got),
                    Some(w) => {
                        for (i, (a, b)) in got.iter().zip(w).enumerate() {
                            assert!(
                                a == b,
                                "level {level:?} {rows}x{cols} len {len} case {i} (plain/delta, overwrite/acc)"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn block_strips_every_level_and_checked() {
    let mut rng = Rng::new(41);
    let (block, blocks) = (300, 6);
    let orig = rand_vec(&mut rng, block * blocks);
    let first = rand_vec(&mut rng, block);
    // Sources list the destination too (skipped), as an LT neighbour list does.
    let srcs = [0u32, 2, 3, 5];
    let (dst, start, len) = (3, 17, 200);
    let mut want = orig.clone();
    for i in 0..len {
        let mut x = first[i];
        for &o in srcs.iter().filter(|&&o| o as usize != dst) {
            x ^= orig[o as usize * block + start + i];
        }
        want[dst * block + start + i] = x;
    }
    let mut scratch = Vec::new();
    for level in kernels::supported_levels() {
        let mut buf = orig.clone();
        kernels::xor_block_strips(
            level,
            &mut buf,
            block,
            (start, len),
            dst,
            &srcs,
            &first,
            &mut scratch,
        );
        assert_eq!(buf, want, "{level:?}");
    }
    // A block past the end, a strip past its block: refused.
    let level = kernels::active();
    for (srcs, strip) in [(&[0u32, 6][..], (start, len)), (&[0u32][..], (200, 101))] {
        let r = std::panic::catch_unwind(|| {
            let mut buf = orig.clone();
            let mut scratch = Vec::new();
            kernels::xor_block_strips(
                level,
                &mut buf,
                block,
                strip,
                dst,
                srcs,
                &first,
                &mut scratch,
            );
        });
        assert!(r.is_err(), "{srcs:?} {strip:?}");
    }
}
