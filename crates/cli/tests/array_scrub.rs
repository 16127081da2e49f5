//! `ecstack array scrub` end to end: an array on files, written through the library, bytes flipped
//! in a device file behind its back; scrub repairs the bad chunks its checksums locate (up to m = 2
//! per stripe), a second scrub finds it clean, and more than m bad chunks are a report plus exit
//! status 1. `--checksums-only` skips the parity of stripes whose chunks all match their checksums
//! and still repairs every chunk that does not.

use std::process::Command;

use ecstack_array::{Array, OpenOptions};
use ecstack_device::BlockDevice;

fn ecstack(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(args)
        .output()
        .expect("run ecstack")
}

/// Flip one byte in every chunk slot of the device file `path` (offsets from the array geometry).
fn rot(path: &std::path::Path, data_start: u64, chunk: u64, slots: u64, salt: u8) {
    let mut f = std::fs::read(path).unwrap();
    for s in 0..slots {
        let at = (data_start + s * chunk + (s * 37 + salt as u64) % chunk) as usize;
        f[at] ^= 0x5a;
    }
    std::fs::write(path, f).unwrap();
}

#[test]
fn scrub_repairs_what_it_locates_and_fails_on_what_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let spec = |n: &str, size: &str| format!("file:{}?size={size}", p(n).display());
    let main: Vec<String> = (0..6).map(|i| spec(&format!("m{i}"), "1M")).collect();
    let meta = spec("meta", "4M");
    let o = ecstack(&[
        "array",
        "create",
        "--scheme",
        "md",
        "-k",
        "4",
        "-m",
        "2",
        "--chunk",
        "4K",
        "--main",
        &main.join(","),
        "--meta",
        &meta,
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // Fill it through the library.
    let (g, model) = {
        let r = Array::open_recorded(&meta, &[], &[], &OpenOptions::default()).unwrap();
        let a = r.array;
        let mut model = vec![0u8; a.size() as usize];
        let mut x = 0x9e3779b97f4a7c15u64;
        for b in model.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        a.write(&model, 0).unwrap();
        a.close().unwrap();
        (a.geometry().clone(), model)
    };
    rot(&p("m2"), g.data_start, g.chunk, g.slots, 1);

    let o = ecstack(&["array", "scrub", "--meta", &meta, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["stripes"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["repaired_stripes"], r["stripes"], "{r}");
    assert_eq!(r["unrepaired_stripes"], 0, "{r}");

    let o = ecstack(&["array", "scrub", "--meta", &meta, "--mb-per-s", "1000"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(" 0 inconsistent"), "{text}");
    {
        let r = Array::open_recorded(&meta, &[], &[], &OpenOptions::default()).unwrap();
        let mut back = vec![0u8; model.len()];
        r.array.read_at(&mut back, 0).unwrap();
        assert!(back == model, "data differs after the repair");
    }

    // The cheap mode on the clean array: every chunk matches its checksum, no parity recomputed.
    let o = ecstack(&["array", "scrub", "--meta", &meta, "--checksums-only"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let stripes = g.stripes;
    assert!(
        text.contains(&format!("checksums only: {stripes} stripes matched")),
        "{text}"
    );

    // Two bad chunks in every stripe (m = 2): the chunk checksums say which, so scrub repairs both,
    // in the cheap mode as well.
    rot(&p("m0"), g.data_start, g.chunk, g.slots, 2);
    rot(&p("m5"), g.data_start, g.chunk, g.slots, 3);
    let o = ecstack(&[
        "array",
        "scrub",
        "--meta",
        &meta,
        "--checksums-only",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["checksums_only"], true, "{r}");
    assert_eq!(r["unrepaired_stripes"], 0, "{r}");
    assert_eq!(r["parity_skipped_stripes"], 0, "{r}");
    assert_eq!(
        r["checksum_errors"].as_u64(),
        r["stripes"].as_u64().map(|s| 2 * s),
        "{r}"
    );
    {
        let r = Array::open_recorded(&meta, &[], &[], &OpenOptions::default()).unwrap();
        let mut back = vec![0u8; model.len()];
        r.array.read_at(&mut back, 0).unwrap();
        assert!(
            back == model,
            "data differs after repairing two chunks per stripe"
        );
    }

    // Three bad chunks in every stripe (more than m): reported, nothing guessed, exit status 1
    // with one error line.
    rot(&p("m1"), g.data_start, g.chunk, g.slots, 4);
    rot(&p("m2"), g.data_start, g.chunk, g.slots, 5);
    rot(&p("m3"), g.data_start, g.chunk, g.slots, 6);
    let o = ecstack(&["array", "scrub", "--meta", &meta]);
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("scrub left") && err.lines().count() == 1,
        "{err}"
    );
}
