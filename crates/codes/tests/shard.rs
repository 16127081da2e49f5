//! Shard files: decode from any k, clear errors for missing / truncated / mismatched / corrupt shards,
//! never wrong bytes; the header and shard parsers never panic on arbitrary bytes.

use ecstack_base::rng::Rng;
use ecstack_codes::shard::{decode_files, encode_file, read_header, EncodeOptions, ShardHeader};
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
    EncodeOptions { code, k, m, unit }
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
        let dir = tempfile::tempdir().unwrap();
        let (input, data) = make_file(dir.path(), 300, 5);
        let rep = encode_file(&input, &dir.path().join("s"), &opts(CodeKind::RsCauchy, 2, 1, Some(64))).unwrap();
        let mut b = std::fs::read(&rep.shards[0]).unwrap();
        b.truncate(64.min(b.len()));
        b.extend_from_slice(&body);
        b.truncate(cut.max(1));
        std::fs::write(&rep.shards[0], &b).unwrap();
        let out = dir.path().join("o");
        if decode_files(&rep.shards, &out).is_ok() {
            prop_assert_eq!(std::fs::read(&out).unwrap(), data);
        }
    }
}
