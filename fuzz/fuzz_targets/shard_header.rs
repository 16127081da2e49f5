//! `cargo fuzz run shard_header`: the shard-header parser must return a header or an error for any bytes,
//! and a header it accepts must serialize back to the same 64 bytes.
#![no_main]
use ecstack_codes::shard::{ShardHeader, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = ShardHeader::parse(data) {
        assert_eq!(&h.to_bytes()[..], &data[..HEADER_LEN]);
    }
});
