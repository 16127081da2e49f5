//! Backward compatibility: arrays written by format version 5 (per-chunk checksums kept inline in
//! every full checkpoint, before the paged checksum area of version 6) still open, read back
//! exactly, keep verifying their chunks against the checksums they had, and keep working (they
//! stay version 5: their metadata volume has no room for a checksum area, see
//! `docs/array-format.md`, "Checksum area"). On a metadata volume grown to make room for the
//! area, the first sync upgrades them to version 6 (the power cuts of that step are in
//! `meta.rs`: `a_version_5_volume_with_room_upgrades_and_survives_a_power_cut_at_every_step`).
//!
//! The images in `tests/fixtures/v5-*.img.txt` were written by `write_v5_fixtures` below at commit
//! 73c984d (format version 5): a (2+1) array of each scheme with 512-byte chunks, full-stripe and
//! partial writes, a sync, a parity commit (pl, eplog), more partial writes, a full checkpoint (so
//! its body holds the checksum table), more writes and a sync, then dropped without a clean close.
//! So each image has a version 5 checkpoint with checksum runs followed by frames with checksum
//! records. Regenerating them needs a build of that commit:
//! `ECSTACK_WRITE_FIXTURES=1 cargo test -p ecstack-array --test format_v5 -- --ignored`.

mod image_fixtures;

use std::sync::Arc;

use ecstack_array::{Array, ArrayConfig, ArrayDevices, CodeKind, SchemeKind};
use ecstack_device::{BlockDevice, MemDevice};
use image_fixtures::{
    assert_scrubs_clean, fixture_path, image_devices, load_fixture, read_all, same_devices,
};

const CHUNK: u64 = 512;
const MAIN: u64 = 16384;
const LOG: u64 = 12288;
const META: u64 = 524288;

/// A device image as fixture text: every non-zero 512-byte sector, trailing zeros left out.
fn dump(out: &mut String, name: &str, bytes: &[u8]) {
    out.push_str(&format!("device {name} {}\n", bytes.len()));
    for (i, s) in bytes.chunks(512).enumerate() {
        let end = s.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
        if end > 0 {
            let hex: String = s[..end].iter().map(|b| format!("{b:02x}")).collect();
            out.push_str(&format!("{} {hex}\n", i * 512));
        }
    }
}

fn mem(size: u64) -> Arc<MemDevice> {
    Arc::new(MemDevice::new(size).unwrap())
}

fn as_dyn(d: &[Arc<MemDevice>]) -> Vec<Arc<dyn BlockDevice>> {
    d.iter()
        .map(|d| Arc::clone(d) as Arc<dyn BlockDevice>)
        .collect()
}

fn reopen(d: &ArrayDevices) -> Array {
    Array::open(same_devices(d)).unwrap_or_else(|e| panic!("open: {e}"))
}

/// The format version of the newest checkpoint on `meta` (header: magic `ECSTKCKP`, u32 version
/// at byte 8, u64 salt at 12, u64 epoch at 20; docs/array-format.md).
fn checkpoint_version(a: &Array, meta: &dyn BlockDevice) -> u32 {
    let layout = a.superblock().layout;
    let mut best = (0u64, 0u32);
    for off in layout.cp_off {
        let mut h = [0u8; 32];
        meta.read_at(&mut h, off).unwrap();
        if &h[..8] != b"ECSTKCKP" {
            continue;
        }
        let version = u32::from_le_bytes(h[8..12].try_into().unwrap());
        let epoch = u64::from_le_bytes(h[20..28].try_into().unwrap());
        best = best.max((epoch, version));
    }
    best.1
}

/// Flip a byte of every chunk slot of `dev` (one chunk of each stripe or log stripe).
fn rot(a: &Array, dev: &dyn BlockDevice) {
    let g = a.geometry().clone();
    for slot in 0..g.slots {
        let at = g.off(slot) + 33;
        let mut b = [0u8; 1];
        dev.read_at(&mut b, at).unwrap();
        dev.write_at(&[b[0] ^ 0x10], at).unwrap();
    }
}

#[test]
#[ignore = "writes tests/fixtures/v5-*.img.txt; meaningful only at a version 5 commit (see the file header)"]
fn write_v5_fixtures() {
    if std::env::var("ECSTACK_WRITE_FIXTURES").as_deref() != Ok("1") {
        panic!("set ECSTACK_WRITE_FIXTURES=1 to overwrite the fixtures");
    }
    for scheme in SchemeKind::ALL {
        let main: Vec<_> = (0..3).map(|_| mem(MAIN)).collect();
        let log: Vec<_> = match scheme {
            SchemeKind::Md => vec![],
            _ => vec![mem(LOG)],
        };
        let meta = mem(META);
        let cfg = ArrayConfig {
            scheme,
            code: CodeKind::RsVandermonde,
            k: 2,
            m: 1,
            chunk_size: CHUNK as u32,
            reserve: 0.25,
            commit_every: 0,
            trim_on_commit: false,
            max_stripes: None,
        };
        let devs = || ArrayDevices {
            main: as_dyn(&main),
            log: as_dyn(&log),
            meta: Arc::clone(&meta) as Arc<dyn BlockDevice>,
            specs: None,
        };
        let a = Array::create(&cfg, devs()).unwrap();
        let size = a.size() as usize;
        let mut expected = vec![0u8; size];
        let mut rng = ecstack_base::Rng::new(5);
        let mut put = |a: &Array, off: usize, len: usize, expected: &mut Vec<u8>| {
            let mut b = vec![0u8; len];
            rng.fill(&mut b);
            a.write(&b, off as u64).unwrap();
            expected[off..off + len].copy_from_slice(&b);
        };
        put(&a, 0, 4 * 1024, &mut expected);
        put(&a, 1300, 900, &mut expected);
        a.sync().unwrap();
        if scheme != SchemeKind::Md {
            a.commit().unwrap();
        }
        put(&a, 5000, 700, &mut expected);
        put(&a, 200, 100, &mut expected);
        a.sync().unwrap();
        drop(a);
        // A clean close writes a full checkpoint (with the checksum table); then more writes
        // in frames.
        let a = Array::open(devs()).unwrap();
        a.close().unwrap();
        drop(a);
        let a = Array::open(devs()).unwrap();
        put(&a, 2048, 1024, &mut expected);
        put(&a, 7000, 300, &mut expected);
        a.sync().unwrap();
        assert_eq!(read_all(&a), expected);
        drop(a);
        let mut out = format!(
            "# ecstack array format version 5 image: scheme {scheme}, (2+1), chunk 512, written by write_v5_fixtures (tests/format_v5.rs) at commit 73c984d\n\
             # sparse: 'device NAME CAPACITY', then 'OFFSET HEX' for each non-zero 512-byte sector (trailing zero bytes omitted); 'expected' is the logical content\n"
        );
        let read = |d: &Arc<MemDevice>| {
            let mut b = vec![0u8; d.capacity() as usize];
            d.read_at(&mut b, 0).unwrap();
            b
        };
        for (i, d) in main.iter().enumerate() {
            dump(&mut out, &format!("main{i}"), &read(d));
        }
        for (i, d) in log.iter().enumerate() {
            dump(&mut out, &format!("log{i}"), &read(d));
        }
        dump(&mut out, "meta", &read(&meta));
        dump(&mut out, "expected", &expected);
        std::fs::write(fixture_path(5, scheme), out).unwrap();
    }
}

#[test]
fn version_5_images_open_verify_and_keep_working() {
    for scheme in SchemeKind::ALL {
        let images = load_fixture(5, scheme);
        let (devs, all, mut expected) = image_devices(&images);
        let a = reopen(&devs);
        assert_eq!(a.scheme_kind(), scheme);
        assert!(read_all(&a) == expected, "{scheme}: data of the v5 image");
        // The checksums came from the image (checkpoint table and frame records): a flipped
        // byte on a device is caught and repaired from the rest of the stripe.
        // (One chunk of a stripe or log stripe per device: every slot of device 0.)
        rot(&a, all[0].as_ref());
        assert!(read_all(&a) == expected, "{scheme}: with device 0 rotten");
        assert!(
            a.status().checksums.checksum_errors > 0,
            "{scheme}: the flip was not caught: the v5 checksums were not loaded"
        );
        // Keeps working: writes, a full checkpoint by a clean close, reopen, commit.
        let new = vec![0x5au8; 1500];
        a.write(&new, 3000).unwrap();
        expected[3000..4500].copy_from_slice(&new);
        a.sync().unwrap();
        a.close().unwrap();
        assert_eq!(
            checkpoint_version(&a, devs.meta.as_ref()),
            5,
            "{scheme}: no room for the checksum area: stays version 5"
        );
        drop(a);
        let a = reopen(&devs);
        assert!(read_all(&a) == expected, "{scheme}: after close and reopen");
        a.commit().unwrap();
        drop(a);
        let a = reopen(&devs);
        assert!(
            read_all(&a) == expected,
            "{scheme}: after commit and reopen"
        );
        assert_scrubs_clean(&a, scheme);
    }
}

/// A version 5 array whose metadata volume was grown (the bytes of the image on a larger device,
/// as after `truncate -s +1M meta.img`) has room for the checksum area: its first sync writes a
/// full version 6 checkpoint with the checksum pages, and after a reopen the checksums come from
/// the pages and still catch a flipped byte.
#[test]
fn version_5_images_on_a_grown_metadata_volume_upgrade_to_version_6() {
    for scheme in SchemeKind::ALL {
        let images = load_fixture(5, scheme);
        let (mut devs, all, mut expected) = image_devices(&images);
        let old = devs.meta.capacity();
        let mut bytes = vec![0u8; old as usize];
        devs.meta.read_at(&mut bytes, 0).unwrap();
        let grown = mem(old + (1 << 20));
        grown.write_at(&bytes, 0).unwrap();
        devs.meta = grown;
        let a = reopen(&devs);
        assert!(read_all(&a) == expected, "{scheme}: data of the v5 image");
        let new = vec![0xa5u8; 700];
        a.write(&new, 1000).unwrap();
        expected[1000..1700].copy_from_slice(&new);
        a.sync().unwrap();
        assert_eq!(
            checkpoint_version(&a, devs.meta.as_ref()),
            6,
            "{scheme}: the first sync upgrades"
        );
        a.close().unwrap();
        drop(a);
        let a = reopen(&devs);
        assert!(read_all(&a) == expected, "{scheme}: after the upgrade");
        assert_eq!(a.status().checksums.checksum_page_errors, 0, "{scheme}");
        rot(&a, all[0].as_ref());
        assert!(read_all(&a) == expected, "{scheme}: with device 0 rotten");
        assert!(
            a.status().checksums.checksum_errors > 0,
            "{scheme}: the flip was not caught: the checksums did not reach the pages"
        );
        // And keeps working in version 6: a write, a commit, a reopen, a clean scrub.
        a.write(&new, 5000).unwrap();
        expected[5000..5700].copy_from_slice(&new);
        a.commit().unwrap();
        a.close().unwrap();
        drop(a);
        let a = reopen(&devs);
        assert_eq!(checkpoint_version(&a, devs.meta.as_ref()), 6, "{scheme}");
        assert!(
            read_all(&a) == expected,
            "{scheme}: after commit and reopen"
        );
        assert_scrubs_clean(&a, scheme);
    }
}
