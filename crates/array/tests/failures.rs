//! More than n − k failures: reads that need a lost chunk return an error, reads that do not still
//! return the right bytes, writes fail cleanly; nothing panics and no read returns wrong bytes.
//! Also: misconfigurations are refused before anything is written.

mod common;

use std::sync::Arc;

use common::*;
use ecstack_array::{Array, ArrayConfig, ArrayDevices, SchemeKind};
use ecstack_device::{BlockDevice, MemDevice};

fn too_many(scheme: SchemeKind, k: usize, m: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let rig = Rig::new(scheme, k, m, seed, false);
    let a = Array::create(&config(scheme, k, m), rig.devices()).unwrap();
    let cap = a.size();
    let mut model = vec![0u8; cap as usize];
    for _ in 0..150 {
        let (off, len) = extent(&mut rng, cap, k);
        let mut d = vec![0u8; len];
        rng.fill(&mut d);
        a.write(&d, off).unwrap();
        model[off as usize..off as usize + len].copy_from_slice(&d);
    }
    // Fail m + 1 main devices (some announced, some discovered on I/O).
    for i in 0..=m {
        if i % 2 == 0 {
            a.fail_device(i).unwrap();
        } else {
            rig.main[i].fail_now();
        }
    }
    let c = CHUNK as u64;
    let (mut ok, mut err) = (0, 0);
    for chunk in 0..cap / c {
        let mut b = vec![0u8; c as usize];
        match a.read(&mut b, chunk * c) {
            Ok(()) => {
                assert!(
                    b == model[(chunk * c) as usize..((chunk + 1) * c) as usize],
                    "{scheme}: chunk {chunk} returned wrong bytes with {} failures",
                    m + 1
                );
                ok += 1;
            }
            Err(_) => err += 1,
        }
    }
    assert!(err > 0, "{scheme}: no read failed with m+1 failures");
    assert!(
        ok > 0,
        "{scheme}: every read failed, even chunks on live devices"
    );
    assert!(a.write(&vec![1u8; 3000], 100).is_err());
    // A parity commit cannot succeed and leave updates pending (md has none).
    assert!(a.commit().is_err() || !a.has_pending());
    // Unaligned reads spanning lost and live chunks also fail rather than return garbage.
    let mut b = vec![0u8; (3 * c) as usize + 17];
    if a.read(&mut b, 5).is_ok() {
        assert!(b == model[5..5 + b.len()]);
    }
}

#[test]
fn more_than_m_failures() {
    too_many(SchemeKind::Md, 4, 1, 1);
    too_many(SchemeKind::Pl, 4, 2, 2);
    too_many(SchemeKind::Eplog, 4, 1, 3);
    too_many(SchemeKind::Eplog, 6, 2, 4);
}

fn mem(size: u64) -> Arc<dyn BlockDevice> {
    Arc::new(MemDevice::new(size).unwrap())
}

fn devs(n: usize, nlog: usize, size: u64) -> ArrayDevices {
    ArrayDevices {
        main: (0..n).map(|_| mem(size)).collect(),
        log: (0..nlog).map(|_| mem(size)).collect(),
        meta: mem(META_SIZE),
        specs: None,
    }
}

fn untouched(d: &ArrayDevices) -> bool {
    d.main
        .iter()
        .chain(d.log.iter())
        .chain(std::iter::once(&d.meta))
        .all(|x| x.stats().write_ops == 0)
}

#[test]
fn misconfigurations_are_refused_before_writing() {
    let cases: Vec<(ArrayConfig, ArrayDevices, &str)> = vec![
        (
            config(SchemeKind::Eplog, 4, 2),
            devs(5, 2, MAIN_SIZE),
            "main devices",
        ),
        (
            config(SchemeKind::Eplog, 4, 2),
            devs(6, 1, MAIN_SIZE),
            "log devices",
        ),
        (
            config(SchemeKind::Pl, 4, 1),
            devs(5, 0, MAIN_SIZE),
            "log devices",
        ),
        (
            config(SchemeKind::Md, 4, 1),
            devs(5, 1, MAIN_SIZE),
            "no log devices",
        ),
        (config(SchemeKind::Md, 4, 1), devs(5, 0, 4096), "too small"),
        (
            ArrayConfig {
                chunk_size: 1000,
                ..config(SchemeKind::Md, 4, 1)
            },
            devs(5, 0, MAIN_SIZE),
            "chunk size",
        ),
        (
            ArrayConfig {
                code: ecstack_codes::CodeKind::Xor,
                ..config(SchemeKind::Md, 4, 2)
            },
            devs(6, 0, MAIN_SIZE),
            "m = 1",
        ),
        (
            config(SchemeKind::Md, 4, 1),
            ArrayDevices {
                meta: mem(64 << 10),
                ..devs(5, 0, MAIN_SIZE)
            },
            "metadata volume",
        ),
    ];
    for (cfg, d, want) in cases {
        let e = Array::create(&cfg, d.clone()).expect_err(want).to_string();
        assert!(e.contains(want), "error '{e}' does not mention '{want}'");
        assert!(!e.contains('\n'));
        assert!(untouched(&d), "devices were written before refusing: {e}");
    }
    assert!(ecstack_array::SchemeKind::parse("raid7").is_err());
}

#[test]
fn reopen_checks_device_order_and_superblock() {
    let d = devs(5, 1, MAIN_SIZE);
    let cfg = ArrayConfig {
        chunk_size: CHUNK,
        ..ArrayConfig::with_geometry(SchemeKind::Eplog, 4, 1)
    };
    let a = Array::create(&cfg, d.clone()).unwrap();
    a.write(b"some bytes", 4000).unwrap();
    a.sync().unwrap();
    drop(a);
    let mut swapped = d.clone();
    swapped.main.swap(0, 1);
    let e = Array::open(swapped).unwrap_err().to_string();
    assert!(e.contains("device order"), "{e}");
    let mut wrong = d.clone();
    wrong.meta = mem(META_SIZE);
    assert!(Array::open(wrong).is_err());
    let a = Array::open(d).unwrap();
    let mut b = [0u8; 10];
    a.read(&mut b, 4000).unwrap();
    assert_eq!(&b, b"some bytes");
    let st = a.status();
    assert_eq!(st.scheme, "eplog");
    assert_eq!((st.k, st.m), (4, 1));
}
