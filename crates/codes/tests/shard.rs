//! Shard files: decode from any k, clear errors for missing / truncated / mismatched / corrupt shards,
//! never wrong bytes; the header and shard parsers never panic on arbitrary bytes.

use ecstack_base::rng::Rng;
use ecstack_codes::shard::{
    decode_files, encode_file, read_header, EncodeOptions, HeaderError, ShardHeader,
};
use ecstack_codes::CodeKind;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn make_file(dir: &Path, len: usize, seed: u64) -> (PathBuf, Vec<u8>) {
    let mut data = vec![0u8; len];
    Rng::new(seed).fill(&mut data);
    let p = dir.join("input.bin");
    std::fs::write(&p, &data).unwrap();
    (p, data)
}

fn opts(code: CodeKind, k: usize, m: usize, unit: Option<usize>) -> EncodeOptions {
    EncodeOptions {
        code,
        k,
        m,
        unit,
        set_id: None,
    }
}

#[test]
fn any_k_shards_rebuild_the_file() {
    let dir = tempfile::tempdir().unwrap();
    for (len, unit) in [
        (0usize, None),
        (1, None),
        (1000, Some(64)),
        (100_000, Some(4096)),
        (300_001, None),
    ] {
        let (input, data) = make_file(dir.path(), len, len as u64);
        let rep = encode_file(
            &input,
            &dir.path().join("s"),
            &opts(CodeKind::RsCauchy, 4, 2, unit),
        )
        .unwrap();
        assert_eq!(rep.shards.len(), 6);
        // Every pair of lost shards.
        for a in 0..6 {
            for b in a + 1..6 {
                let keep: Vec<PathBuf> = rep
                    .shards
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != a && *i != b)
                    .map(|(_, p)| p.clone())
                    .collect();
                let out = dir.path().join("out.bin");
                decode_files(&keep, &out).unwrap();
                assert_eq!(std::fs::read(&out).unwrap(), data, "len {len} lost {a},{b}");
            }
        }
    }
}

#[test]
fn missing_truncated_mismatched_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (input, data) = make_file(dir.path(), 50_000, 1);
    let rep = encode_file(
        &input,
        &dir.path().join("a"),
        &opts(CodeKind::RsVandermonde, 3, 2, Some(1024)),
    )
    .unwrap();
    let out = dir.path().join("out.bin");

    // Too few shards: the error names the count.
    let e = decode_files(&rep.shards[..2], &out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("need 3 shards"), "{e}");
    assert!(!out.exists());

    // A missing file is named.
    let mut with_missing = rep.shards[..2].to_vec();
    with_missing.push(dir.path().join("nope.shard"));
    let e = decode_files(&with_missing, &out).unwrap_err().to_string();
    assert!(e.contains("nope.shard"), "{e}");

    // Truncated shard: named, and decode still succeeds from the other four.
    let t = rep.shards[1].clone();
    let len = std::fs::metadata(&t).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&t).unwrap();
    f.set_len(len - 10).unwrap();
    let e = read_header(&t).unwrap_err().to_string();
    assert!(e.contains("truncated") && e.contains(".001.shard"), "{e}");
    let r = decode_files(&rep.shards, &out).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), data);
    assert!(r.rejected.iter().any(|x| x.contains(".001.shard")));

    // A shard from another encoding of the same file is refused by set id.
    let rep2 = encode_file(
        &input,
        &dir.path().join("b"),
        &opts(CodeKind::RsVandermonde, 3, 2, Some(1024)),
    )
    .unwrap();
    let mixed = vec![
        rep.shards[0].clone(),
        rep2.shards[2].clone(),
        rep.shards[3].clone(),
    ];
    let e = decode_files(&mixed, &out).unwrap_err().to_string();
    assert!(e.contains("different encoding"), "{e}");

    // Corrupt a payload byte in shard 0: detected by the unit checksum, shard 4 is used instead.
    let mut bytes = std::fs::read(&rep.shards[0]).unwrap();
    bytes[64 + 5000] ^= 0x01;
    std::fs::write(&rep.shards[0], &bytes).unwrap();
    let keep = vec![
        rep.shards[0].clone(),
        rep.shards[2].clone(),
        rep.shards[3].clone(),
        rep.shards[4].clone(),
    ];
    let r = decode_files(&keep, &out).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), data);
    assert!(
        r.rejected
            .iter()
            .any(|x| x.contains(".000.shard") && x.contains("checksum")),
        "{:?}",
        r.rejected
    );

    // With no spare left, a corrupt unit is an error and no output file is produced.
    std::fs::remove_file(&out).unwrap();
    let keep = vec![
        rep.shards[0].clone(),
        rep.shards[2].clone(),
        rep.shards[3].clone(),
    ];
    let e = decode_files(&keep, &out).unwrap_err().to_string();
    assert!(
        e.contains("checksum mismatch") && e.contains(".000.shard"),
        "{e}"
    );
    assert!(!out.exists());
    assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with("partial")));

    // Duplicate shard given twice is reported, the rest still decodes.
    let dup = vec![
        rep.shards[2].clone(),
        rep.shards[2].clone(),
        rep.shards[3].clone(),
        rep.shards[4].clone(),
    ];
    let r = decode_files(&dup, &out).unwrap();
    assert!(r.rejected.iter().any(|x| x.contains("duplicate")));
    assert_eq!(std::fs::read(&out).unwrap(), data);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Fuzz: arbitrary bytes never panic the header parser; a valid header with any one byte changed is
    /// rejected.
    #[test]
    fn header_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), flip in 0usize..60, bit in 0u8..8) {
        let _ = ShardHeader::parse(&bytes);
        let h = ShardHeader { code: CodeKind::RsCauchy, k: 4, m: 2, index: 1, unit: 64, length: 1000, set_id: 7, data_crc: 9 };
        let mut b = h.to_bytes();
        b[flip] ^= 1 << bit;
        prop_assert!(ShardHeader::parse(&b).is_err());
    }

    /// Fuzz: arbitrary shard files (valid header, random body / length) never panic the decoder, and
    /// whatever it outputs is the original data.
    #[test]
    fn decoder_never_panics_on_garbage(body in proptest::collection::vec(any::<u8>(), 0..600), cut in 0usize..700) {
        // Encode once (encoding syncs every shard file, which would dominate the run), copy per case.
        static ENCODED: std::sync::OnceLock<(tempfile::TempDir, Vec<PathBuf>, Vec<u8>)> =
            std::sync::OnceLock::new();
        let (_keep, shards, data) = ENCODED.get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let (input, data) = make_file(dir.path(), 300, 5);
            let rep = encode_file(&input, &dir.path().join("s"), &opts(CodeKind::RsCauchy, 2, 1, Some(64))).unwrap();
            (dir, rep.shards, data)
        });
        let dir = tempfile::tempdir().unwrap();
        let copies: Vec<PathBuf> = shards
            .iter()
            .map(|p| {
                let c = dir.path().join(p.file_name().unwrap());
                std::fs::copy(p, &c).unwrap();
                c
            })
            .collect();
        let mut b = std::fs::read(&copies[0]).unwrap();
        b.truncate(64.min(b.len()));
        b.extend_from_slice(&body);
        b.truncate(cut.max(1));
        std::fs::write(&copies[0], &b).unwrap();
        let out = dir.path().join("o");
        if decode_files(&copies, &out).is_ok() {
            prop_assert_eq!(&std::fs::read(&out).unwrap(), data);
        }
    }
}

/// A header image with its CRC recomputed after an edit: what a forger (or a bug) could write.
fn resealed(mut b: [u8; 64]) -> [u8; 64] {
    let crc = crc32c::crc32c(&b[..60]);
    b[60..].copy_from_slice(&crc.to_le_bytes());
    b
}

fn valid_header() -> ShardHeader {
    ShardHeader {
        code: CodeKind::RsCauchy,
        k: 4,
        m: 2,
        index: 1,
        unit: 64,
        length: 1000,
        set_id: 7,
        data_crc: 9,
    }
}

#[test]
fn forged_lengths_are_refused_not_overflowed() {
    // (length, k, unit): shard-file sizes 64 + ceil(length / (k·unit))·(unit + 4) beyond 2^64.
    for (length, k, unit) in [
        (u64::MAX, 1u16, 1u32),
        (u64::MAX, 4, 1),
        (u64::MAX - 1, 1, 3),
        (u64::MAX / 2, 1, 1),
        (1 << 62, 1, 1),
    ] {
        let h = ShardHeader {
            length,
            k,
            m: 1,
            index: 0,
            unit,
            ..valid_header()
        };
        assert_eq!(h.file_len(), None, "{length} {k} {unit}");
        let e = ShardHeader::parse(&h.to_bytes()).unwrap_err();
        assert_eq!(e, HeaderError::TooLong { length, k, unit }, "{e}");
        assert!(e.to_string().contains("larger than 2^64"), "{e}");
    }
    // The largest geometry still fits: accepted, and the exact size is computed.
    let h = ShardHeader {
        length: u64::MAX,
        k: 255,
        m: 1,
        index: 0,
        unit: u32::MAX,
        ..valid_header()
    };
    let want = 64 + u64::MAX.div_ceil(255 * u32::MAX as u64) * (u32::MAX as u64 + 4);
    assert_eq!(
        ShardHeader::parse(&h.to_bytes()).unwrap().file_len(),
        Some(want)
    );

    // On disk: a forged header with a valid CRC gives one clear line from read_header and decode_files.
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = make_file(dir.path(), 300, 11);
    let rep = encode_file(
        &input,
        &dir.path().join("s"),
        &opts(CodeKind::RsCauchy, 2, 1, Some(64)),
    )
    .unwrap();
    let mut b: [u8; 64] = std::fs::read(&rep.shards[0]).unwrap()[..64]
        .try_into()
        .unwrap();
    b[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
    b[20..24].copy_from_slice(&1u32.to_le_bytes());
    let mut file = std::fs::read(&rep.shards[0]).unwrap();
    file[..64].copy_from_slice(&resealed(b));
    std::fs::write(&rep.shards[0], &file).unwrap();
    let e = read_header(&rep.shards[0]).unwrap_err().to_string();
    assert!(
        e.contains(".000.shard") && e.contains("larger than 2^64"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    let r = decode_files(&rep.shards, &dir.path().join("o")).unwrap();
    assert!(
        r.rejected.iter().any(|x| x.contains("larger than 2^64")),
        "{:?}",
        r.rejected
    );
}

#[test]
fn non_zero_reserved_bytes_are_refused() {
    let good = valid_header().to_bytes();
    assert!(ShardHeader::parse(&good).is_ok());
    for offset in [11usize, 18, 19, 44, 50, 59] {
        for value in [1u8, 0x80, 0xff] {
            let mut b = good;
            b[offset] = value;
            let e = ShardHeader::parse(&resealed(b)).unwrap_err();
            assert_eq!(e, HeaderError::Reserved { offset, value });
            assert!(e.to_string().contains(&format!("byte {offset}")), "{e}");
        }
    }
    // On disk too, through read_header.
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = make_file(dir.path(), 300, 12);
    let rep = encode_file(
        &input,
        &dir.path().join("s"),
        &opts(CodeKind::Xor, 3, 1, Some(64)),
    )
    .unwrap();
    let mut file = std::fs::read(&rep.shards[2]).unwrap();
    let mut b: [u8; 64] = file[..64].try_into().unwrap();
    b[45] = 1;
    file[..64].copy_from_slice(&resealed(b));
    std::fs::write(&rep.shards[2], &file).unwrap();
    let e = read_header(&rep.shards[2]).unwrap_err().to_string();
    assert!(
        e.contains(".002.shard") && e.contains("reserved header byte 45"),
        "{e}"
    );
}
