//! FileDevice (buffered and O_DIRECT, preallocation, hole punching) and device specs.

use ecstack_device::{open_spec, BlockDevice, FileDevice, FileOptions, ModelStats};

#[test]
fn file_device_roundtrip_punch_and_prealloc() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev");
    let d = FileDevice::open(
        &path,
        &FileOptions {
            create: true,
            size: Some(1 << 20),
            preallocate: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(d.capacity(), 1 << 20);
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    d.write_at(&data, 12_345).unwrap();
    d.flush().unwrap();
    let mut back = vec![0u8; data.len()];
    d.read_at(&mut back, 12_345).unwrap();
    assert_eq!(back, data);
    // Hole punching releases space (where the file system supports it) and reads back zeros.
    let before = d.allocated_bytes().unwrap();
    d.discard(0, 1 << 20).unwrap();
    let mut z = vec![1u8; 4096];
    d.read_at(&mut z, 65_536).unwrap();
    if d.allocated_bytes().unwrap() < before {
        assert!(z.iter().all(|&b| b == 0));
    }
    assert!(d.write_at(&[0], 1 << 20).is_err());
    let s = d.stats();
    assert_eq!(
        (s.write_ops, s.read_ops, s.flushes, s.discards),
        (1, 2, 1, 1)
    );
}

/// An O_DIRECT file in a temporary directory on a file system that supports it: tmpfs and some
/// overlay file systems refuse O_DIRECT, so after the system's temporary directory this tries
/// cargo's target/tmp and /var/tmp (both on disk here). None at all is a loud skip, or a failure
/// under `CI=true` or `ECSTACK_REQUIRE_CLIENTS=1`.
fn direct_file(opts: &FileOptions) -> Option<(tempfile::TempDir, FileDevice)> {
    let mut refused = Vec::new();
    for base in [
        std::env::temp_dir(),
        env!("CARGO_TARGET_TMPDIR").into(),
        "/var/tmp".into(),
    ] {
        let Ok(dir) = tempfile::tempdir_in(&base) else {
            continue;
        };
        match FileDevice::open(dir.path().join("direct"), opts) {
            Ok(d) => return Some((dir, d)),
            Err(e) => refused.push(format!("{}: {e}", base.display())),
        }
    }
    let what = format!(
        "a directory that supports O_DIRECT (refused: {})",
        refused.join("; ")
    );
    ecstack_testkit::require(&what, false, "a disk-backed /var/tmp");
    None
}

#[test]
fn direct_io_unaligned_requests_use_bounce_buffers() {
    let opts = FileOptions {
        create: true,
        size: Some(1 << 20),
        direct: true,
        ..Default::default()
    };
    let Some((dir, d)) = direct_file(&opts) else {
        return;
    };
    let path = dir.path().join("direct");
    assert!(d.is_direct());
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 13) as u8).collect();
    d.write_at(&data, 777).unwrap(); // unaligned offset, length and buffer
    d.write_at(&data[..4096], 65_536).unwrap(); // maybe aligned
    let mut back = vec![0u8; 10_000];
    d.read_at(&mut back, 777).unwrap();
    assert_eq!(back, data);
    let mut head = vec![9u8; 777];
    d.read_at(&mut head, 0).unwrap();
    assert!(
        head.iter().all(|&b| b == 0),
        "read-modify-write clobbered the bytes before the write"
    );
    assert!(FileDevice::open(
        &path,
        &FileOptions {
            size: Some(1000),
            direct: true,
            ..Default::default()
        }
    )
    .is_err());
}

#[test]
fn specs_open_each_kind() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f.img");
    let d = open_spec(&format!("file:{}?size=64K", f.display())).unwrap();
    assert_eq!(d.capacity(), 65_536);
    let d = open_spec(f.to_str().unwrap()).unwrap(); // plain path: existing file
    assert_eq!(d.capacity(), 65_536);
    assert_eq!(open_spec("mem:256K").unwrap().capacity(), 256 << 10);
    assert_eq!(open_spec("mem:size=1M").unwrap().capacity(), 1 << 20);

    let ssd = open_spec("ssd:blocks=64,pages=32,page=4K,op=0.25,gc_low=0.05,mode=tlc").unwrap();
    assert_eq!(ssd.capacity(), (64 * 32 * 3 / 4) * 4096);
    match ssd.stats().model {
        Some(ModelStats::Ssd(s)) => assert_eq!(s.logical_pages, 1536),
        other => panic!("{other:?}"),
    }
    assert!(open_spec("ssd:").unwrap().capacity() > 3 << 30);
    assert!(open_spec("ssd:preset=zombienand").is_ok());
    assert_eq!(open_spec("hdd:capacity=10G").unwrap().capacity(), 10 << 30);

    let stack =
        open_spec("metered:faulty:seed=3,fail_at=2:ssd:blocks=64,pages=32,op=0.25,data=1").unwrap();
    stack.write_at(b"abc", 0).unwrap();
    let mut b = [0u8; 3];
    stack.read_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"abc");
    assert!(stack.read_at(&mut b, 0).is_err());
    assert_eq!(stack.stats().write_ops, 1);
    assert!(matches!(stack.stats().model, Some(ModelStats::Ssd(_))));
    let t = open_spec("throttled:bw=1G,lat=1us:mem:1M").unwrap();
    t.write_at(&[0; 4096], 0).unwrap();
    assert!(t.stats().modeled_ns >= 1000);
    assert!(open_spec("faulty:lse=4K+4K,error_rate=0:mem:64K").is_ok());
}

#[test]
fn bad_specs_give_one_clear_line() {
    for (spec, needle) in [
        ("", "empty spec"),
        ("foo:bar", "unknown device kind 'foo'"),
        ("mem:lots", "not a size"),
        ("ssd:blocks=abc", "blocks=abc: not a number"),
        ("ssd:color=red", "unknown key 'color'"),
        ("ssd:op=0.001", "over-provisioning"),
        ("ssd:mode=qlc", "expected slc, mlc or tlc"),
        ("hdd:sched=elevator", "expected fifo or sstf"),
        ("faulty:fail_after=5:mem:1M", "give a unit"),
        ("faulty:lse=12:mem:1M", "offset+len"),
        ("throttled:lat_min=1ms:mem:1M", "both lat_min and lat_max"),
        ("file:/nonexistent/dir/x", "No such file"),
        ("ssd", "needs a colon"),
    ] {
        let e = open_spec(spec).unwrap_err().to_string();
        assert!(
            e.contains(needle),
            "spec {spec:?}: error {e:?} lacks {needle:?}"
        );
        assert!(!e.contains('\n'), "{e:?}");
    }
}

#[test]
fn mirror_spec_survives_reopen_and_resyncs_a_new_leg() {
    let dir = tempfile::tempdir().unwrap();
    let leg = |n: &str| format!("file:{}?size=1M", dir.path().join(n).display());
    let spec = format!("mirror:{};{}", leg("a"), leg("b"));
    let m = open_spec(&spec).unwrap();
    assert_eq!(m.capacity(), (1 << 20) - ecstack_device::mirror::HEADER);
    let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
    m.write_at(&data, 777).unwrap();
    m.flush().unwrap();
    drop(m);
    // Reopen with a blank third leg (and the legs in another order): it is copied in.
    let spec = format!("mirror:{};{};{}", leg("c"), leg("b"), leg("a"));
    let m = open_spec(&spec).unwrap();
    let mut back = vec![0u8; data.len()];
    m.read_at(&mut back, 777).unwrap();
    assert_eq!(back, data);
    let c = open_spec(&format!("file:{}", dir.path().join("c").display())).unwrap();
    c.read_at(&mut back, ecstack_device::mirror::HEADER + 777)
        .unwrap();
    assert_eq!(back, data, "the new leg holds the data");
    for bad in ["mirror:", "mirror:mem:1M", "mirror:mem:1M;bogus:x"] {
        let e = open_spec(bad).unwrap_err().to_string();
        assert!(e.contains("mirror") || e.contains("bogus"), "{bad}: {e}");
    }
}

/// io_uring off for one device (`FileOptions::uring`, spec key `uring=0`): its batches still complete
/// through `pread`/`pwrite`, and the spec key takes only a flag.
#[test]
fn uring_off_per_device_still_serves_batches() {
    let dir = tempfile::tempdir().unwrap();
    let d = FileDevice::open(
        dir.path().join("dev"),
        &FileOptions {
            create: true,
            size: Some(1 << 20),
            uring: false,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!d.uses_uring());
    let data = vec![0x5au8; 8192];
    let mut batch = ecstack_device::Batch::new();
    let w = vec![batch.write(&data, 4096)];
    batch.submit_to(&d, w);
    assert!(batch.finish().iter().all(|r| r.is_ok()));
    let mut back = vec![0u8; 8192];
    d.read_at(&mut back, 4096).unwrap();
    assert_eq!(back, data);
    let spec = format!("file:{}?size=1M&uring=0", dir.path().join("s").display());
    assert_eq!(open_spec(&spec).unwrap().capacity(), 1 << 20);
    let bad = format!(
        "file:{}?size=1M&uring=maybe",
        dir.path().join("t").display()
    );
    assert!(open_spec(&bad).is_err());
}
