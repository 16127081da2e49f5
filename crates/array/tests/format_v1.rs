//! Backward compatibility: arrays written by format version 1 (before checkpoint and frame versions
//! were checked, before the sparse checkpoint and before per-chunk checksums) still open and read
//! back exactly; their chunks get checksums when rewritten or from a scrub.
//!
//! The images in `tests/fixtures/v1-*.img.txt` were written by the code of commit 76fefed: a (2+1)
//! array of each scheme with 512-byte chunks, full-stripe and partial writes, a sync, a parity commit
//! (pl, eplog), more partial writes and a sync, then dropped without a clean close. So each image has
//! a full checkpoint followed by incremental frames, and pl/eplog images have log entries pending.

mod image_fixtures;

use ecstack_array::{Array, SchemeKind};
use image_fixtures::{assert_scrubs_clean, image_devices, load_fixture, read_all, same_devices};

#[test]
fn version_1_images_open_and_read_back() {
    for scheme in SchemeKind::ALL {
        let images = load_fixture(1, scheme);
        let (devs, _, mut expected) = image_devices(&images);
        let a = Array::open(same_devices(&devs))
            .unwrap_or_else(|e| panic!("{scheme}: open of a version 1 image: {e}"));
        assert_eq!(a.scheme_kind(), scheme);
        assert_eq!(a.size() as usize, expected.len(), "{scheme}: capacity");
        assert!(
            read_all(&a) == expected,
            "{scheme}: data read from the version 1 image differs"
        );
        if scheme == SchemeKind::Eplog {
            // (pl resyncs its dirty regions on open, which folds its log entries into parity.)
            assert!(
                a.has_pending(),
                "{scheme}: the image should have pending log stripes"
            );
        }
        // Write on top (the array now writes the current format), reopen, commit, reopen.
        let new = vec![0xa5u8; 700];
        a.write(&new, 1000).unwrap();
        expected[1000..1700].copy_from_slice(&new);
        a.sync().unwrap();
        drop(a);
        let a = Array::open(same_devices(&devs))
            .unwrap_or_else(|e| panic!("{scheme}: reopen after writing: {e}"));
        assert!(read_all(&a) == expected, "{scheme}: after reopen");
        a.commit().unwrap();
        a.close().unwrap();
        drop(a);
        let a = Array::open(same_devices(&devs)).unwrap();
        assert!(read_all(&a) == expected, "{scheme}: after commit and close");
        assert!(!a.has_pending());
        // Chunks written by version 1 have no checksum (read unverified) until a scrub finds their
        // stripe consistent and gives them one (format version 5); then a flip is caught on read.
        // (md got them already: its image was not closed cleanly, and the resync on open takes
        // the chunks of dirty regions as they are.)
        assert_scrubs_clean(&a, scheme);
        a.close().unwrap();
        drop(a);
        let a = Array::open(same_devices(&devs)).unwrap();
        let g = a.geometry().clone();
        for slot in 0..g.stripes {
            let at = g.off(slot) + 17;
            let mut b = [0u8; 1];
            devs.main[0].read_at(&mut b, at).unwrap();
            devs.main[0].write_at(&[b[0] ^ 0x40], at).unwrap();
        }
        assert!(read_all(&a) == expected, "{scheme}: with device 0 rotten");
        assert!(
            a.status().checksums.checksum_errors > 0,
            "{scheme}: no flip was caught"
        );
    }
}
