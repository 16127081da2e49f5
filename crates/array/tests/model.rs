//! Seeded randomized test: any sequence of writes (aligned and unaligned), flushes, parity commits,
//! device failures (at most n − k, main and log devices, announced or discovered on I/O), rebuilds
//! and reopenings reads back exactly what a plain byte vector holds, for every scheme and geometry.

mod common;

use std::sync::Arc;

use common::*;
use ecstack_array::{Array, SchemeKind};
use ecstack_device::BlockDevice;

fn run(scheme: SchemeKind, k: usize, m: usize, seed: u64, steps: usize) {
    run_buffered(scheme, k, m, seed, steps, 0)
}

/// `buffer`: eplog device buffers (chunks per device; 0 = off).
fn run_buffered(scheme: SchemeKind, k: usize, m: usize, seed: u64, steps: usize, buffer: usize) {
    let what = format!("{scheme} ({k}+{m}) seed {seed} buffer {buffer}");
    let mut rng = Rng::new(seed);
    let mut rig = Rig::new(scheme, k, m, seed, false);
    let cfg = config(scheme, k, m);
    let mut a = Array::create(&cfg, rig.devices()).unwrap();
    a.set_device_buffer(buffer).unwrap();
    let cap = a.size();
    let mut model = vec![0u8; cap as usize];
    let ndev = rig.main.len() + rig.log.len();
    let mut failed: Vec<usize> = Vec::new();
    let mut fresh = 1000u64;
    for step in 0..steps {
        let r = rng.below(100);
        let ctx = format!("{what} step {step}");
        match r {
            0..=44 => {
                let (off, len) = extent(&mut rng, cap, k);
                let mut data = vec![0u8; len];
                rng.fill(&mut data);
                a.write(&data, off)
                    .unwrap_or_else(|e| panic!("{ctx}: write {off}+{len}: {e}"));
                model[off as usize..off as usize + len].copy_from_slice(&data);
            }
            45..=64 => {
                let (off, len) = extent(&mut rng, cap, k);
                let mut buf = vec![0u8; len];
                a.read(&mut buf, off)
                    .unwrap_or_else(|e| panic!("{ctx}: read {off}+{len}: {e}"));
                assert!(
                    buf == model[off as usize..off as usize + len],
                    "{ctx}: read {off}+{len} differs from the model"
                );
            }
            65..=69 => a.sync().unwrap_or_else(|e| panic!("{ctx}: sync: {e}")),
            70..=74 => {
                a.commit().unwrap_or_else(|e| panic!("{ctx}: commit: {e}"));
            }
            75..=81 if failed.len() < m => {
                let i = loop {
                    let i = rng.below(ndev as u64) as usize;
                    if !failed.contains(&i) {
                        break i;
                    }
                };
                if rng.below(2) == 0 {
                    a.fail_device(i)
                        .unwrap_or_else(|e| panic!("{ctx}: fail {i}: {e}"));
                } else {
                    // Fail-stop: the array discovers it on its next I/O.
                    rig.dev(i).fail_now();
                }
                failed.push(i);
            }
            82..=87 if !failed.is_empty() => {
                let j = rng.below(failed.len() as u64) as usize;
                let i = failed.swap_remove(j);
                fresh += 1;
                let size = if i < rig.main.len() {
                    MAIN_SIZE
                } else {
                    LOG_SIZE
                };
                let d = faulty(size, fresh, false);
                a.rebuild_device(i, Arc::clone(&d) as Arc<dyn BlockDevice>)
                    .unwrap_or_else(|e| panic!("{ctx}: rebuild {i}: {e}"));
                rig.set_dev(i, d);
                verify_all(&a, &model, &format!("{ctx}: after rebuild of {i}"));
            }
            88..=91 => {
                a.sync().unwrap_or_else(|e| panic!("{ctx}: sync: {e}"));
                drop(a);
                a = Array::open(rig.devices()).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
                a.set_device_buffer(buffer).unwrap();
                verify_all(&a, &model, &format!("{ctx}: after reopen"));
            }
            92..=94 => {
                // Discard: the whole range reads as zeros from now on.
                let (off, len) = extent(&mut rng, cap, k);
                a.discard(off, len as u64)
                    .unwrap_or_else(|e| panic!("{ctx}: discard {off}+{len}: {e}"));
                model[off as usize..off as usize + len].fill(0);
            }
            _ => verify_all(&a, &model, &ctx),
        }
    }
    verify_all(&a, &model, &format!("{what}: end"));
    a.commit().unwrap();
    verify_all(&a, &model, &format!("{what}: end after commit"));
    // Rebuild whatever is still failed and check once more.
    for i in std::mem::take(&mut failed) {
        let size = if i < rig.main.len() {
            MAIN_SIZE
        } else {
            LOG_SIZE
        };
        let d = faulty(size, 7777 + i as u64, false);
        a.rebuild_device(i, Arc::clone(&d) as Arc<dyn BlockDevice>)
            .unwrap_or_else(|e| panic!("{what}: final rebuild {i}: {e}"));
        rig.set_dev(i, d);
    }
    assert!(
        a.failed_devices().is_empty(),
        "{what}: devices still failed"
    );
    verify_all(&a, &model, &format!("{what}: end after rebuilds"));
}

fn all_geometries(scheme: SchemeKind) {
    for (k, m) in [(4, 1), (4, 2), (6, 2)] {
        for seed in 1..=2u64 {
            run(scheme, k, m, seed * 31 + k as u64, 260);
        }
    }
}

#[test]
fn model_md() {
    all_geometries(SchemeKind::Md);
}

#[test]
fn model_pl() {
    all_geometries(SchemeKind::Pl);
}

#[test]
fn model_eplog() {
    all_geometries(SchemeKind::Eplog);
}

#[test]
fn model_eplog_device_buffers() {
    for (k, m) in [(4, 1), (4, 2), (6, 2)] {
        for (seed, buffer) in [(3u64, 2usize), (4, 8)] {
            run_buffered(SchemeKind::Eplog, k, m, seed * 17 + k as u64, 260, buffer);
        }
    }
}

#[test]
fn model_eplog_rs_three_parities() {
    run(SchemeKind::Eplog, 5, 3, 99, 200);
    run(SchemeKind::Pl, 5, 3, 98, 150);
}

#[test]
fn exercises_commit_and_degraded_paths() {
    // Sanity: the randomized runs reach space-triggered commits and log-stripe decoding.
    let mut rng = Rng::new(5);
    let rig = Rig::new(SchemeKind::Eplog, 4, 2, 5, false);
    let a = Array::create(&config(SchemeKind::Eplog, 4, 2), rig.devices()).unwrap();
    let cap = a.size();
    let mut model = vec![0u8; cap as usize];
    for _ in 0..400 {
        let (off, len) = extent(&mut rng, cap, 4);
        let mut d = vec![0u8; len];
        rng.fill(&mut d);
        a.write(&d, off).unwrap();
        model[off as usize..off as usize + len].copy_from_slice(&d);
    }
    let st = a.status();
    assert!(
        st.commits.space_commits > 0,
        "no space-triggered commit: {st:?}"
    );
    assert!(st.pending.updated_chunks > 0);
    // Two main devices down with pending updates: reads decode from log stripes and data stripes.
    a.fail_device(0).unwrap();
    a.fail_device(3).unwrap();
    verify_all(&a, &model, "degraded");
    let r = a.commit().unwrap();
    assert!(r.decoded_from_log > 0, "{r:?}");
    verify_all(&a, &model, "degraded after commit");
    println!("{}", serde_json::to_string_pretty(&a.status()).unwrap());
}

#[test]
fn device_buffers_make_full_width_log_stripes() {
    let rig = Rig::new(SchemeKind::Eplog, 4, 2, 8, false);
    let a = Array::create(&config(SchemeKind::Eplog, 4, 2), rig.devices()).unwrap();
    a.write(&vec![1u8; a.size() as usize], 0).unwrap();
    a.set_device_buffer(16).unwrap();
    let mut rng = Rng::new(8);
    let c = CHUNK as u64;
    for _ in 0..600 {
        let chunk = rng.below(a.size() / c);
        a.write(&[rng.below(256) as u8; CHUNK as usize], chunk * c)
            .unwrap();
    }
    a.sync().unwrap();
    let st = a.status();
    // 600 single-chunk updates (some absorbed in memory) leave in log stripes of up to 6 chunks:
    // far fewer log chunks than the 600 per log device that unbuffered eplog writes.
    let log_stripes = st.log.io.write_bytes / (2 * CHUNK as u64);
    assert!(
        log_stripes > 0 && log_stripes <= 200,
        "{log_stripes} log stripes: {:?}",
        st.log
    );
}

#[test]
fn large_unaligned_requests_span_pieces() {
    for scheme in SchemeKind::ALL {
        let rig = Rig::new(scheme, 4, 2, 21, false);
        let a = Array::create(&config(scheme, 4, 2), rig.devices()).unwrap();
        let cap = a.size() as usize;
        let mut model = vec![0u8; cap];
        let mut rng = Rng::new(21);
        for _ in 0..12 {
            let len = cap / 3 + rng.below((cap / 2) as u64) as usize;
            let off = rng.below((cap - len) as u64) as usize;
            let mut d = vec![0u8; len];
            rng.fill(&mut d);
            a.write(&d, off as u64).unwrap();
            model[off..off + len].copy_from_slice(&d);
            let mut b = vec![0u8; len + 3];
            let ro = off.saturating_sub(1).min(cap - b.len());
            a.read(&mut b, ro as u64).unwrap();
            assert!(b == model[ro..ro + b.len()], "{scheme}: large read differs");
        }
        a.fail_device(5).unwrap();
        verify_all(&a, &model, &format!("{scheme} large, degraded"));
        assert!(
            a.write(&[0u8; 10], cap as u64 - 5).is_err(),
            "write past the end accepted"
        );
        assert!(
            a.read(&mut [0u8; 10], cap as u64 - 5).is_err(),
            "read past the end accepted"
        );
    }
}

/// A log device that records the offsets it is asked to read.
#[derive(Debug)]
struct Recording {
    inner: ecstack_device::MemDevice,
    reads: std::sync::Mutex<Vec<u64>>,
}

impl ecstack_device::BlockDevice for Recording {
    fn name(&self) -> &str {
        "recording"
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> ecstack_device::Result<()> {
        self.reads.lock().unwrap().push(offset);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> ecstack_device::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> ecstack_device::Result<()> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> ecstack_device::Result<()> {
        self.inner.discard(offset, len)
    }
}

/// A degraded commit reads the log devices front to back: the lost chunks' log stripes are decoded
/// in log order (an HDD log device then serves near-sequential reads instead of seeking for each),
/// even though the updates were logged in an order unrelated to their stripes. The result is exact.
#[test]
fn degraded_commit_reads_the_log_in_order() {
    use std::sync::Arc;
    let (k, m) = (4, 2);
    let mut rig = Rig::new(SchemeKind::Eplog, k, m, 21, false);
    let rec: Vec<Arc<Recording>> = (0..m)
        .map(|_| {
            Arc::new(Recording {
                inner: ecstack_device::MemDevice::new(LOG_SIZE * 4).unwrap(),
                reads: Default::default(),
            })
        })
        .collect();
    let mut devices = rig.devices();
    devices.log = rec
        .iter()
        .map(|r| Arc::clone(r) as Arc<dyn ecstack_device::BlockDevice>)
        .collect();
    rig.log.clear();
    let a = Array::create(&config(SchemeKind::Eplog, k, m), devices).unwrap();
    let cap = a.size() as usize;
    let mut model = vec![0u8; cap];
    let mut rng = Rng::new(21);
    rng.fill(&mut model);
    a.write(&model, 0).unwrap();
    a.commit().unwrap();
    // One-chunk updates at scattered chunks, logged in that scattered order.
    let chunk = CHUNK as usize;
    let chunks = cap / chunk;
    for _ in 0..chunks / 3 {
        let i = rng.below(chunks as u64) as usize;
        let mut d = vec![0u8; chunk];
        rng.fill(&mut d);
        a.write(&d, (i * chunk) as u64).unwrap();
        model[i * chunk..(i + 1) * chunk].copy_from_slice(&d);
    }
    a.fail_device(0).unwrap();
    a.fail_device(3).unwrap();
    for r in &rec {
        r.reads.lock().unwrap().clear();
    }
    let r = a.commit().unwrap();
    assert!(r.decoded_from_log >= 10, "{r:?}");
    let reads: Vec<Vec<u64>> = rec
        .iter()
        .map(|r| r.reads.lock().unwrap().clone())
        .collect();
    let total: usize = reads.iter().map(|v| v.len()).sum();
    assert!(total > 0, "no log reads in a degraded commit: {r:?}");
    for (d, v) in reads.iter().enumerate() {
        assert!(
            v.windows(2).all(|w| w[0] < w[1]),
            "log device {d} read out of order: {v:?}"
        );
    }
    verify_all(&a, &model, "after a degraded commit");
}
