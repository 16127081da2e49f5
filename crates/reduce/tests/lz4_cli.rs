//! Our `lz4@SIZE` sizes equal the `lz4 -1` CLI's, block by block: the CLI cuts a file into independent
//! blocks of SIZE (-B4..-B7: 64 KiB..4 MiB) and stores a block that does not shrink raw, which is our
//! file-system rule; the sum of its frame's block sizes must be our figure exactly (the CLI is Debian's
//! lz4 1.9.4, a build of liblz4 independent of the one lz4-sys compiles in). Missing `lz4` fails under
//! CI=true / ECSTACK_REQUIRE_CLIENTS=1 (scripts/setup.sh installs it) and skips elsewhere.

use ecstack_base::Rng;
use ecstack_reduce::{ChunkRecord, ChunkSink, Config, Engine};
use std::process::Command;

fn have_lz4() -> bool {
    ecstack_testkit::require_tool("lz4", "lz4")
}

/// Sum of the data block sizes of an LZ4 frame (the high bit of a block size marks a raw block).
fn frame_block_bytes(b: &[u8]) -> u64 {
    assert_eq!(&b[..4], &[0x04, 0x22, 0x4d, 0x18], "not an LZ4 frame");
    let flg = b[4];
    let mut p = 6 + if flg & 0x08 != 0 { 8 } else { 0 } + 1; // FLG BD [content size] HC
    let mut sum = 0u64;
    loop {
        let h = u32::from_le_bytes(b[p..p + 4].try_into().unwrap());
        p += 4;
        if h == 0 {
            return sum; // end mark (a content checksum may follow)
        }
        let len = (h & 0x7fff_ffff) as usize;
        sum += len as u64;
        p += len + if flg & 0x10 != 0 { 4 } else { 0 };
    }
}

struct Null;
impl ChunkSink for Null {
    fn push(&mut self, _: u32, _: ChunkRecord) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn lz4_sizes_equal_the_lz4_cli_blocks() {
    if !have_lz4() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut noise = vec![0u8; 3 << 20];
    Rng::new(17).fill(&mut noise);
    let text =
        b"Alyosha and Ivan Karamazov talk in the tavern about a tear of a child. ".repeat(60_000);
    let mut mixed = Vec::new();
    for (i, c) in noise.chunks(100_003).enumerate() {
        mixed.extend_from_slice(c);
        mixed.extend_from_slice(&text[i * 997..i * 997 + 150_000]);
        mixed.extend(std::iter::repeat_n(i as u8, 70_000));
    }
    // Real machine code too: this test's own executable.
    let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let sizes = [(4, "64K"), (5, "256K"), (6, "1M"), (7, "4M")];
    let configs = Config {
        compression: vec![format!(
            "lz4@{}",
            sizes.iter().map(|s| s.1).collect::<Vec<_>>().join(",")
        )],
        dedup: vec![],
        ..Default::default()
    }
    .configurations()
    .unwrap();
    let mut engine = Engine::new(&configs);
    let mut checked = 0;
    for (name, data) in [
        ("noise", &noise),
        ("text", &text),
        ("mixed", &mixed),
        ("exe", &exe),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, data).unwrap();
        let ours = engine.process(0, &mut &data[..], &mut Null).unwrap();
        for (i, (b, label)) in sizes.iter().enumerate() {
            let out = Command::new("lz4")
                .args(["-1", &format!("-B{b}"), "-BI", "-c", "-q"])
                .arg(&path)
                .output()
                .unwrap();
            assert!(out.status.success(), "lz4 failed on {name}");
            let cli = frame_block_bytes(&out.stdout);
            assert_eq!(
                ours.outcomes[i].reduced_bytes,
                cli,
                "{name} ({} bytes) lz4@{label}: ours vs lz4 -1 -B{b}",
                data.len()
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 16);
    // The data were of all kinds: random stored raw, text shrunk a lot.
    let raw = engine.process(0, &mut &noise[..], &mut Null).unwrap();
    assert_eq!(raw.outcomes[0].reduced_bytes, noise.len() as u64);
    let t = engine.process(0, &mut &text[..], &mut Null).unwrap();
    assert!(t.outcomes[0].reduced_bytes * 10 < text.len() as u64);
}
