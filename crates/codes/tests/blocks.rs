//! Block-level rateless codes (`BlockCode`): any decodable subset in any order returns exactly the
//! object, the dry run on ids agrees with the decoder block by block, blocks equal the
//! `RatelessCode` encoders' output, and an update regenerates only the blocks `coded_using` names.

use ecstack_base::rng::Rng;
use ecstack_codes::{BlockCode, BlockCodeKind, LtCode, LtParams, RaptorQ, RatelessCode};
use proptest::prelude::*;

fn kind(lt: bool) -> BlockCodeKind {
    if lt {
        BlockCodeKind::lt_default()
    } else {
        BlockCodeKind::RaptorQ
    }
}

/// (LT?, K, block bytes, id space, data length, seed)
fn shape() -> impl Strategy<Value = (bool, usize, usize, usize, usize, u64)> {
    (
        any::<bool>(),
        1usize..=10,
        1usize..=4,
        2usize..=4,
        any::<u64>(),
    )
        .prop_flat_map(|(lt, k, b, mult, seed)| {
            // RaptorQ blocks are 32 symbols; LT takes any size (odd ones included).
            let bs = if lt { b * 24 + 1 } else { b * 32 };
            let id_space = k * mult;
            (
                Just(lt),
                Just(k),
                Just(bs),
                Just(id_space),
                0..=k * bs,
                Just(seed),
            )
        })
}

fn object(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

fn padded(data: &[u8], len: usize) -> Vec<u8> {
    let mut p = data.to_vec();
    p.resize(len, 0);
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Push a random subset in random order: after every block the decoder is complete exactly when
    /// the dry run on the ids pushed so far says decodable, and then returns exactly the object.
    #[test]
    fn decoder_agrees_with_dry_run((lt, k, bs, id_space, len, seed) in shape(), take in 0.3f64..=1.0) {
        let code = BlockCode::new(kind(lt), k, bs, id_space, seed % 1000).unwrap();
        let data = object(len, seed);
        let enc = code.encoder(&data).unwrap();
        let mut rng = Rng::new(seed ^ 0x5eed);
        let mut ids: Vec<u32> = (0..id_space as u32).collect();
        rng.shuffle(&mut ids);
        ids.truncate(((id_space as f64 * take).ceil() as usize).max(1));
        let mut dec = code.decoder();
        let mut pushed = Vec::new();
        for &id in &ids {
            pushed.push(id);
            let done = dec.push(id, enc.block(id).unwrap()).unwrap();
            prop_assert_eq!(done, dec.is_complete());
            prop_assert_eq!(done, code.decodable(&pushed), "ids {:?}", pushed);
            if done {
                break;
            }
        }
        prop_assert_eq!(dec.received(), pushed.len());
        if dec.is_complete() {
            prop_assert_eq!(dec.finish().unwrap(), padded(&data, k * bs));
        } else {
            prop_assert!(!code.decodable(&ids));
            let e = dec.finish().unwrap_err().to_string();
            prop_assert!(e.contains("not decodable yet"), "{}", e);
        }
    }

    /// All ids of the space always decode (LT's graph is checked; RaptorQ's systematic blocks are there).
    #[test]
    fn whole_id_space_decodes((lt, k, bs, id_space, _len, seed) in shape()) {
        let code = BlockCode::new(kind(lt), k, bs, id_space, seed % 1000).unwrap();
        let all: Vec<u32> = (0..id_space as u32).rev().collect();
        prop_assert!(code.decodable(&all));
    }

    /// `block(id)` is the `RatelessCode` encoders' output for the same id: LT with the same graph
    /// (n = id space, same seed), RaptorQ's 32 symbols 32j..32j+31 concatenated.
    #[test]
    fn blocks_equal_rateless_encode((lt, k, bs, id_space, len, seed) in shape()) {
        let code = BlockCode::new(kind(lt), k, bs, id_space, seed % 1000).unwrap();
        let data = object(len, seed);
        let enc = code.encoder(&data).unwrap();
        let want: Vec<Vec<u8>> = if lt {
            let lt = LtCode::new(LtParams {
                k, n: id_space, block_size: bs, c: 1.0, delta: 0.5, seed: code.seed(),
            }).unwrap();
            prop_assert_eq!(lt.seed(), code.seed());
            lt.encode(&data, id_space).unwrap().into_iter().map(|p| p.data).collect()
        } else {
            let rq = RaptorQ::new(k * 32, bs / 32).unwrap();
            let packets = rq.encode(&data, id_space * 32).unwrap();
            for (i, p) in packets.iter().enumerate() {
                prop_assert_eq!(p.id as usize, i);
            }
            packets.chunks(32).map(|c| c.iter().flat_map(|p| p.data.clone()).collect()).collect()
        };
        for (id, w) in want.iter().enumerate() {
            prop_assert_eq!(&enc.block(id as u32).unwrap(), w, "block {}", id);
        }
        if !lt {
            // Systematic: blocks 0..K are the data.
            let p = padded(&data, k * bs);
            for j in 0..k {
                prop_assert_eq!(&want[j][..], &p[j * bs..(j + 1) * bs]);
            }
        }
    }

    /// Change a byte range: every block `coded_using` leaves out is unchanged, so regenerating only
    /// those gives the blocks of a full re-encode.
    #[test]
    fn update_regenerates_only_coded_using(
        (lt, k, bs, id_space, _len, seed) in shape(),
        a in any::<u64>(), b in any::<u64>(),
    ) {
        let code = BlockCode::new(kind(lt), k, bs, id_space, seed % 1000).unwrap();
        let len = (k * bs) as u64;
        let (lo, hi) = { let (x, y) = (a % len, b % (len + 1)); (x.min(y), x.max(y)) };
        let old = object(k * bs, seed);
        let mut new = old.clone();
        for byte in &mut new[lo as usize..hi as usize] {
            *byte = !*byte;
        }
        let held: Vec<u32> = (0..id_space as u32).filter(|i| !(i ^ seed as u32).is_multiple_of(3)).collect();
        let sources = code.source_blocks_of(lo..hi);
        prop_assert!(sources.start as u64 * bs as u64 <= lo);
        prop_assert!(hi == lo || sources.end as u64 * bs as u64 >= hi);
        let redo = code.coded_using(sources.clone(), &held);
        prop_assert!(redo.iter().all(|id| held.contains(id)));
        let (e_old, e_new) = (code.encoder(&old).unwrap(), code.encoder(&new).unwrap());
        for &id in &held {
            let (o, n) = (e_old.block(id).unwrap(), e_new.block(id).unwrap());
            if !redo.contains(&id) {
                prop_assert_eq!(o, n, "block {} changed but is not in coded_using", id);
            }
        }
        if hi == lo {
            prop_assert!(redo.is_empty());
        }
    }
}

#[test]
fn lt_default_is_the_simulators() {
    assert_eq!(
        BlockCodeKind::lt_default(),
        BlockCodeKind::Lt { c: 1.0, delta: 0.5 }
    );
    let code = BlockCode::new(BlockCodeKind::lt_default(), 64, 16, 200, 7).unwrap();
    assert!(code.seed() >= 7);
    assert_eq!(
        (code.k(), code.block_bytes(), code.id_space()),
        (64, 16, 200)
    );
    assert_eq!(code.kind().name(), "lt");
    assert_eq!(
        BlockCodeKind::parse("LT"),
        Some(BlockCodeKind::lt_default())
    );
    assert_eq!(
        BlockCodeKind::parse("raptorq"),
        Some(BlockCodeKind::RaptorQ)
    );
    assert_eq!(BlockCodeKind::parse("rs"), None);
    assert_eq!(code.lt().unwrap().graph().n(), 200);
}

#[test]
fn fewer_than_k_blocks_never_decode() {
    for kind in [BlockCodeKind::lt_default(), BlockCodeKind::RaptorQ] {
        let code = BlockCode::new(kind, 16, 64, 64, 1).unwrap();
        let ids: Vec<u32> = (20..35).collect();
        assert!(!code.decodable(&ids));
        // Repeats and ids outside the space add nothing.
        let mut dup = ids.clone();
        dup.extend([20, 21, 64, 1000]);
        assert!(!code.decodable(&dup));
    }
}

#[test]
fn raptorq_reception_overhead_is_small() {
    // K = 64 blocks (2048 symbols): a random K blocks decode nearly always (RFC 6330: failure
    // probability about 1e-2 at zero overhead), K + 1 blocks (32 extra symbols) practically always.
    let code = BlockCode::new(BlockCodeKind::RaptorQ, 64, 32, 256, 1).unwrap();
    let mut rng = Rng::new(3);
    let mut at_k = 0;
    for _ in 0..20 {
        let mut ids: Vec<u32> = (0..256).collect();
        rng.shuffle(&mut ids);
        at_k += code.decodable(&ids[..64]) as usize;
        assert!(code.decodable(&ids[..65]));
    }
    assert!(at_k >= 18, "{at_k} of 20 random K-subsets decoded");
}

fn err<T>(r: Result<T, ecstack_codes::CodeError>) -> String {
    let e = r.err().expect("an error").to_string();
    assert!(!e.contains('\n'), "{e}");
    e
}

#[test]
fn bad_input_is_one_clear_line() {
    let rq = BlockCodeKind::RaptorQ;
    assert!(err(BlockCode::new(rq.clone(), 4, 33, 8, 0)).contains("multiple of 32"));
    assert!(err(BlockCode::new(rq.clone(), 4, 32 * 65536, 8, 0)).contains("65535"));
    assert!(err(BlockCode::new(rq.clone(), 1763, 32, 4000, 0)).contains("K <= 1762"));
    assert!(err(BlockCode::new(rq.clone(), 4, 32, 1 << 20, 0)).contains("24-bit"));
    assert!(err(BlockCode::new(rq.clone(), 8, 32, 4, 0)).contains("id space"));
    assert!(err(BlockCode::new(rq.clone(), 0, 32, 4, 0)).contains("K >= 1"));
    let lt = BlockCodeKind::Lt { c: 1.0, delta: 2.0 };
    assert!(err(BlockCode::new(lt, 4, 32, 8, 0)).contains("δ"));
    for kind in [BlockCodeKind::lt_default(), rq] {
        let code = BlockCode::new(kind, 4, 64, 12, 0).unwrap();
        assert!(err(code.encoder(&[0u8; 257])).contains("at most 256"));
        let enc = code.encoder(&[1u8; 100]).unwrap();
        assert_eq!(
            err(enc.block(12)),
            "coded block id 12 is outside the id space 0..12"
        );
        let mut dec = code.decoder();
        assert!(err(dec.push(12, vec![0; 64])).contains("outside the id space"));
        assert_eq!(
            err(dec.push(3, vec![0; 63])),
            "coded block 3 is 63 bytes, expected 64"
        );
        dec.push(1, enc.block(1).unwrap()).unwrap();
        assert!(err(dec.finish()).contains("not decodable yet"));
    }
}

#[test]
fn source_blocks_of_ranges() {
    let code = BlockCode::new(BlockCodeKind::RaptorQ, 4, 64, 8, 0).unwrap();
    assert_eq!(code.source_blocks_of(0..1), 0..1);
    assert_eq!(code.source_blocks_of(63..65), 0..2);
    assert_eq!(code.source_blocks_of(64..128), 1..2);
    assert_eq!(code.source_blocks_of(10..10), 0..0);
    assert_eq!(code.source_blocks_of(200..10_000), 3..4);
    assert_eq!(code.source_blocks_of(300..400), 4..4);
    // RaptorQ: systematic blocks in the range and every repair block.
    assert_eq!(
        code.coded_using(1..2, &[0, 1, 2, 3, 4, 7, 9]),
        vec![1, 4, 7]
    );
}

/// Encode and decode speed for K = 64 and 256 blocks of 1 MiB, both codes (a long mode, release):
/// `cargo test --release -p ecstack-codes --test blocks -- --ignored --nocapture block_code_speed`.
/// Encode: the encoder's setup plus every coded block of N = 2K; decode: pushing a random 1.1·K
/// (LT: until decoded) of those blocks and finishing. MB/s of object bytes (MB = 2^20), wall clock.
#[test]
#[ignore]
fn block_code_speed() {
    let bs = 1 << 20;
    for k in [64usize, 256] {
        for kind in [BlockCodeKind::lt_default(), BlockCodeKind::RaptorQ] {
            let n = 2 * k;
            let code = BlockCode::new(kind.clone(), k, bs, 4 * k, 1).unwrap();
            let data = object(k * bs, 7);
            let mb = (k * bs) as f64 / (1 << 20) as f64;
            let t = std::time::Instant::now();
            let enc = code.encoder(&data).unwrap();
            let setup = t.elapsed().as_secs_f64();
            let blocks: Vec<Vec<u8>> = (0..n as u32).map(|id| enc.block(id).unwrap()).collect();
            let encode = t.elapsed().as_secs_f64();
            let mut ids: Vec<u32> = (0..n as u32).collect();
            Rng::new(5).shuffle(&mut ids);
            let t = std::time::Instant::now();
            let dry = code.decodable(&ids[..(k as f64 * 1.1) as usize]);
            let dry_s = t.elapsed().as_secs_f64();
            let t = std::time::Instant::now();
            let mut dec = code.decoder();
            for &id in &ids {
                if dec.push(id, blocks[id as usize].clone()).unwrap() {
                    break;
                }
            }
            let used = dec.received();
            let out = dec.finish().unwrap();
            let decode = t.elapsed().as_secs_f64();
            assert_eq!(out, data);
            println!(
                "{:8} K={k:4} N={n:4} encode {:7.1} MB/s (setup {setup:.3} s)  decode {:7.1} MB/s from {used} blocks  dry run {dry_s:.4} s ({dry})",
                kind.name(),
                mb / encode,
                mb / decode,
            );
        }
    }
}
