//! `cargo fuzz run shard_decode`: a shard file with arbitrary content among valid ones never panics the
//! decoder, and whatever it writes is the original data.
#![no_main]
use ecstack_codes::shard::{decode_files, encode_file, EncodeOptions};
use ecstack_codes::CodeKind;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    let original: Vec<u8> = (0..500u32).map(|i| (i * 7) as u8).collect();
    std::fs::write(&input, &original).unwrap();
    let opts = EncodeOptions { code: CodeKind::RsCauchy, k: 3, m: 1, unit: Some(64), set_id: Some(1) };
    let rep = encode_file(&input, &dir.path().join("s"), &opts).unwrap();
    std::fs::write(&rep.shards[1], data).unwrap();
    let out = dir.path().join("out");
    if decode_files(&rep.shards, &out).is_ok() {
        assert_eq!(std::fs::read(&out).unwrap(), original);
    }
});
