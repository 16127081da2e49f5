//! The small-read path (issue 14): a read inside one chunk (a key-value GET of one ~140-byte
//! record) takes a fast path through `Array::read`, eplog's `read_now` and the device I/O layer,
//! with no per-call vectors and a reused scratch buffer. These tests hold it to the general path's
//! contract: exactly the model's bytes, on every scheme, with updates in the logs, on a degraded
//! array, and with bit rot under the read (every chunk is still verified whole against its
//! checksum, decoded from the rest of its stripe or log stripe, and written back).

mod common;

use common::*;
use ecstack_array::{Array, SchemeKind};
use ecstack_device::BlockDevice;

const SCHEMES: [SchemeKind; 3] = [SchemeKind::Md, SchemeKind::Pl, SchemeKind::Eplog];
const K: usize = 4;

/// A (K+2) array written whole, then updated at random (eplog: latest versions in log stripes,
/// pl: logged deltas), not committed; with its byte model.
fn updated(rig: &Rig, scheme: SchemeKind, seed: u64) -> (Array, Vec<u8>) {
    let a = Array::create(&config(scheme, K, 2), rig.devices()).unwrap();
    let mut rng = Rng::new(seed);
    let mut model = vec![0u8; a.size() as usize];
    rng.fill(&mut model);
    a.write(&model, 0).unwrap();
    for _ in 0..40 {
        let (off, len) = extent(&mut rng, a.size(), K);
        let mut b = vec![0u8; len];
        rng.fill(&mut b);
        a.write(&b, off).unwrap();
        model[off as usize..off as usize + len].copy_from_slice(&b);
    }
    a.sync().unwrap();
    (a, model)
}

/// One small read (1..=200 bytes, inside one chunk) of every chunk of the array, each compared
/// with the model.
fn small_reads_of_every_chunk(a: &Array, model: &[u8], seed: u64, what: &str) {
    let c = CHUNK as u64;
    let mut rng = Rng::new(seed);
    for chunk in 0..a.size() / c {
        let len = 1 + rng.below(200) as usize;
        let off = chunk * c + rng.below(c - len as u64 + 1);
        let mut buf = vec![0xA5u8; len];
        a.read(&mut buf, off)
            .unwrap_or_else(|e| panic!("{what}: read of {len} bytes at {off}: {e}"));
        assert!(
            buf == model[off as usize..off as usize + len],
            "{what}: {len} bytes at {off} (chunk {chunk}) differ from the model"
        );
    }
}

#[test]
fn small_reads_return_exactly_the_bytes_on_every_scheme() {
    for (i, scheme) in SCHEMES.into_iter().enumerate() {
        let rig = Rig::new(scheme, K, 2, 70 + i as u64, false);
        let (a, model) = updated(&rig, scheme, 700 + i as u64);
        small_reads_of_every_chunk(&a, &model, 1, &format!("{scheme:?}"));
        // Reads that cross a chunk boundary (the general path) agree.
        let c = CHUNK as u64;
        for chunk in 1..a.size() / c {
            let off = chunk * c - 10;
            let mut buf = vec![0u8; 20];
            a.read(&mut buf, off).unwrap();
            assert_eq!(buf, model[off as usize..off as usize + 20], "{scheme:?}");
        }
        verify_all(&a, &model, &format!("{scheme:?} whole"));
        // Degraded: one main device failed, every small read decodes its chunk.
        a.fail_device(1).unwrap();
        small_reads_of_every_chunk(&a, &model, 2, &format!("{scheme:?} degraded"));
    }
}

#[test]
fn bit_rot_under_small_reads_is_detected_and_repaired() {
    for (i, scheme) in SCHEMES.into_iter().enumerate() {
        let rig = Rig::new(scheme, K, 2, 80 + i as u64, false);
        let (a, model) = updated(&rig, scheme, 800 + i as u64);
        let g = a.geometry().clone();
        // One bit flipped in every chunk slot of main device 1: home slots, and for eplog the
        // latest versions the updates placed there. The bytes read are usually not the flipped
        // ones: only a check of the whole chunk catches them.
        let dev = &rig.main[1];
        let slots = dev.capacity().saturating_sub(g.off(0)) / g.chunk;
        let mut rng = Rng::new(900 + i as u64);
        for slot in 0..slots {
            let at = g.off(slot) + rng.below(g.chunk);
            let mut b = [0u8; 1];
            dev.inner().read_at(&mut b, at).unwrap();
            b[0] ^= 1 << rng.below(8);
            dev.inner().write_at(&b, at).unwrap();
        }
        small_reads_of_every_chunk(&a, &model, 3, &format!("{scheme:?} rotted"));
        let st = a.status().checksums;
        assert!(st.enabled, "{scheme:?}");
        assert!(
            st.checksum_errors > 0,
            "{scheme:?}: the rot was never detected: {st:?}"
        );
        assert!(
            st.chunks_repaired > 0,
            "{scheme:?}: nothing written back: {st:?}"
        );
        assert_eq!(a.failed_devices(), Vec::<usize>::new(), "{scheme:?}");
        // The chunks read were written back: the same reads again find nothing wrong.
        small_reads_of_every_chunk(&a, &model, 3, &format!("{scheme:?} repaired"));
        assert_eq!(
            a.status().checksums.checksum_errors,
            st.checksum_errors,
            "{scheme:?}: a repaired chunk failed again"
        );
    }
}
