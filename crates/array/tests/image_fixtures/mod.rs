#![allow(dead_code)]
//! Device images of older format versions kept as text (`tests/fixtures/v<N>-<scheme>.img.txt`: a
//! `device NAME CAPACITY` line per device, then `OFFSET HEX` per non-zero sector), for the
//! backward-compatibility tests.

use ecstack_array::SchemeKind;

/// One device of a fixture: its name and its bytes (sparse sectors expanded).
pub struct Image {
    pub name: String,
    pub bytes: Vec<u8>,
}

pub fn parse_hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

pub fn fixture_path(version: u32, scheme: SchemeKind) -> String {
    format!(
        "{}/tests/fixtures/v{version}-{scheme}.img.txt",
        env!("CARGO_MANIFEST_DIR")
    )
}

pub fn load_fixture(version: u32, scheme: SchemeKind) -> Vec<Image> {
    let path = fixture_path(version, scheme);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut images: Vec<Image> = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut f = line.split(' ');
        let (a, b, c) = (f.next().unwrap(), f.next().unwrap(), f.next());
        if a == "device" {
            let cap: usize = c.expect("capacity").parse().unwrap();
            images.push(Image {
                name: b.to_string(),
                bytes: vec![0; cap],
            });
        } else {
            let off: usize = a.parse().unwrap();
            let data = parse_hex(b);
            let img = images.last_mut().expect("sector before any device");
            img.bytes[off..off + data.len()].copy_from_slice(&data);
        }
    }
    images
}
