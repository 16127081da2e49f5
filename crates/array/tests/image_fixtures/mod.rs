#![allow(dead_code)]
//! Device images of older format versions kept as text (`tests/fixtures/v<N>-<scheme>.img.txt`: a
//! `device NAME CAPACITY` line per device, then `OFFSET HEX` per non-zero sector), for the
//! backward-compatibility tests, and what those tests do with them.

use std::sync::Arc;

use ecstack_array::{Array, ArrayDevices, SchemeKind, ScrubOptions};
use ecstack_device::{BlockDevice, MemDevice};

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

/// The devices of a fixture as an array's (each image on a memory device of its size), the main
/// and log devices in that order, and the logical content the image must read back (`expected`).
pub fn image_devices(images: &[Image]) -> (ArrayDevices, Vec<Arc<dyn BlockDevice>>, Vec<u8>) {
    let dev = |img: &Image| -> Arc<dyn BlockDevice> {
        let d = MemDevice::new(img.bytes.len() as u64).unwrap();
        d.write_at(&img.bytes, 0).unwrap();
        Arc::new(d)
    };
    let pick = |prefix: &str| -> Vec<Arc<dyn BlockDevice>> {
        images
            .iter()
            .filter(|i| i.name.starts_with(prefix))
            .map(dev)
            .collect()
    };
    let main = pick("main");
    let log = pick("log");
    let meta = pick("meta").pop().expect("meta device");
    let expected = images
        .iter()
        .find(|i| i.name == "expected")
        .expect("expected content")
        .bytes
        .clone();
    let all = main.iter().chain(log.iter()).cloned().collect();
    let d = ArrayDevices {
        main,
        log,
        meta,
        specs: None,
    };
    (d, all, expected)
}

/// The same devices again, for another open.
pub fn same_devices(d: &ArrayDevices) -> ArrayDevices {
    ArrayDevices {
        main: d.main.clone(),
        log: d.log.clone(),
        meta: Arc::clone(&d.meta),
        specs: None,
    }
}

pub fn read_all(a: &Array) -> Vec<u8> {
    let mut b = vec![0u8; a.size() as usize];
    a.read(&mut b, 0).unwrap();
    b
}

/// A scrub of the whole array finds nothing to repair.
pub fn assert_scrubs_clean(a: &Array, scheme: SchemeKind) {
    let r = a.scrub(&ScrubOptions::default(), &|_, _| {}).unwrap();
    assert!(r.clean(), "{scheme}: {r:?}");
}
