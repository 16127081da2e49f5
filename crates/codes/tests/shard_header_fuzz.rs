//! Mutation fuzzing of the shard-header parser on stable Rust. Valid header images are mutated (bit flips,
//! truncations, splices of two images, random bytes, boundary values in one field), half the time with
//! the header CRC recomputed afterwards so that the mutation reaches the field checks instead of stopping
//! at the checksum. For every image the parser must agree with an independent reading of the format
//! (`spec_accepts`, written from the table in `shard.rs`'s module doc, not from the parser), refuse with a
//! one-line error, never panic, and re-encode an accepted header to exactly the bytes it parsed.
//!
//! Cases: `ECSTACK_FUZZ_CASES` (default 4096, so CI stays fast); the long run in docs/testing.md used
//! `ECSTACK_FUZZ_CASES=1000000`. A failure prints the case, and proptest's regression file replays it.

use ecstack_codes::shard::{ShardHeader, HEADER_LEN};
use ecstack_codes::CodeKind;
use proptest::prelude::*;

/// `ECSTACK_FUZZ_CASES` (parsed as every mutation target in the workspace parses it), else 4096.
fn cases() -> u32 {
    u32::try_from(ecstack_base::mutate::fuzz_cases(4096)).expect("ECSTACK_FUZZ_CASES fits in u32")
}

fn le(b: &[u8], at: usize, len: usize) -> u64 {
    (0..len).fold(0u64, |acc, i| acc | (b[at + i] as u64) << (8 * i))
}

/// The format, read independently of the parser: which 64-byte prefixes are valid version-1 headers.
fn spec_accepts(b: &[u8]) -> bool {
    if b.len() < HEADER_LEN || &b[0..8] != b"ECSSHARD" || le(b, 8, 2) != 1 {
        return false;
    }
    if crc32c::crc32c(&b[..60]) as u64 != le(b, 60, 4) {
        return false;
    }
    let reserved_zero = b[11] == 0 && b[18] == 0 && b[19] == 0 && b[44..60].iter().all(|&x| x == 0);
    let code_known = (1..=5).contains(&b[10]);
    let (k, m, index, unit, length) = (
        le(b, 12, 2) as u128,
        le(b, 14, 2) as u128,
        le(b, 16, 2) as u128,
        le(b, 20, 4) as u128,
        le(b, 24, 8) as u128,
    );
    if !(reserved_zero
        && code_known
        && k >= 1
        && m >= 1
        && k + m <= 256
        && index < k + m
        && unit >= 1)
    {
        return false;
    }
    // Shard file size: 64 + ceil(length / (k·unit))·(unit + 4) bytes, which must fit in 64 bits.
    let stripes = length.div_ceil(k * unit);
    64 + stripes * (unit + 4) <= u64::MAX as u128
}

fn reseal(b: &mut [u8]) {
    if b.len() >= HEADER_LEN {
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Valid headers, with boundary values likely in every field.
fn header() -> impl Strategy<Value = ShardHeader> {
    (1u16..=255)
        .prop_flat_map(|k| (Just(k), 1u16..=(256 - k)))
        .prop_flat_map(|(k, m)| {
            (
                Just(k),
                Just(m),
                0..k + m,
                0..CodeKind::ALL.len(),
                prop_oneof![
                    1u32..=256,
                    Just(u32::MAX),
                    any::<u32>().prop_map(|u| u.max(1))
                ],
                prop_oneof![0u64..100_000, Just(u64::MAX), any::<u64>()],
                any::<u64>(),
                any::<u32>(),
            )
        })
        .prop_map(|(k, m, index, code, unit, length, set_id, data_crc)| {
            let mut h = ShardHeader {
                code: CodeKind::ALL[code],
                k,
                m,
                index,
                unit,
                length,
                set_id,
                data_crc,
            };
            // Shrink a length whose shard file would not fit in 64 bits until it does.
            while h.file_len().is_none() {
                h.length >>= 1;
            }
            h
        })
}

#[derive(Clone, Debug)]
enum Mutation {
    /// Flip these bits (byte offset, bit).
    Flip(Vec<(usize, u8)>),
    /// Keep only the first bytes.
    Truncate(usize),
    /// The first bytes of this image, the rest from a second one.
    Splice(usize, ShardHeader),
    /// Overwrite bytes from an offset.
    Overwrite(usize, Vec<u8>),
    /// Set one little-endian field (offset, width) to a value, e.g. a length of u64::MAX.
    Field(usize, usize, u64),
    /// Append bytes after the header (the parser reads only the first 64).
    Extend(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let field = prop_oneof![
        Just((8usize, 2usize)),
        Just((10, 1)),
        Just((11, 1)),
        Just((12, 2)),
        Just((14, 2)),
        Just((16, 2)),
        Just((18, 2)),
        Just((20, 4)),
        Just((24, 8)),
        Just((32, 8)),
        Just((40, 4)),
        Just((44, 8)),
        Just((52, 8)),
    ];
    let value = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(255),
        Just(256),
        Just(1 << 32),
        any::<u64>()
    ];
    prop_oneof![
        proptest::collection::vec((0usize..64, 0u8..8), 1..8).prop_map(Mutation::Flip),
        (0usize..64).prop_map(Mutation::Truncate),
        (0usize..=64, header()).prop_map(|(at, h)| Mutation::Splice(at, h)),
        (0usize..64, proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, b)| Mutation::Overwrite(at, b)),
        (field, value).prop_map(|((at, w), v)| Mutation::Field(at, w, v)),
        proptest::collection::vec(any::<u8>(), 1..32).prop_map(Mutation::Extend),
    ]
}

fn apply(h: &ShardHeader, m: &Mutation, reseal_crc: bool) -> Vec<u8> {
    let mut b = h.to_bytes().to_vec();
    match m {
        Mutation::Flip(bits) => {
            for &(at, bit) in bits {
                b[at] ^= 1 << bit;
            }
        }
        Mutation::Truncate(len) => b.truncate(*len),
        Mutation::Splice(at, other) => b[*at..].copy_from_slice(&other.to_bytes()[*at..]),
        Mutation::Overwrite(at, bytes) => {
            for (i, &x) in bytes.iter().enumerate() {
                if let Some(slot) = b.get_mut(at + i) {
                    *slot = x;
                }
            }
        }
        Mutation::Field(at, width, v) => {
            b[*at..at + width].copy_from_slice(&v.to_le_bytes()[..*width])
        }
        Mutation::Extend(bytes) => b.extend_from_slice(bytes),
    }
    if reseal_crc {
        reseal(&mut b);
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn mutated_headers_are_refused_cleanly_or_parsed_exactly(h in header(), m in mutation(), reseal_crc in any::<bool>()) {
        // The unmutated image is accepted and round-trips.
        prop_assert_eq!(ShardHeader::parse(&h.to_bytes()), Ok(h.clone()));
        let b = apply(&h, &m, reseal_crc);
        match ShardHeader::parse(&b) {
            Ok(p) => {
                prop_assert!(spec_accepts(&b), "parser accepted an invalid header: {:?}", b);
                prop_assert_eq!(&p.to_bytes()[..], &b[..HEADER_LEN]);
                prop_assert!(p.file_len().is_some());
            }
            Err(e) => {
                prop_assert!(!spec_accepts(&b), "parser refused a valid header ({}): {:?}", e, b);
                let line = e.to_string();
                prop_assert!(!line.is_empty() && !line.contains('\n'));
            }
        }
    }
}
