//! Faulty wrapper: power cuts leave exactly the flushed state (plus what the policy says survived or
//! tore), fail-stop from the configured op on, transient/latent/bit-rot errors, all from a seed.

use ecstack_device::{
    BlockDevice, DeviceError, FaultConfig, Faulty, MemDevice, Outcome, PowerCutPolicy,
    PowerCutReport, SplitMix64,
};

const CAP: u64 = 64 * 1024;

/// Random writes (with a unique fill byte each) and occasional flushes; returns the durable image as
/// of the last flush and the full "latest" image.
fn scripted(dev: &Faulty<MemDevice>, seed: u64, ops: usize) -> (Vec<u8>, Vec<u8>) {
    let mut rng = SplitMix64::new(seed);
    let mut latest = vec![0u8; CAP as usize];
    let mut durable = latest.clone();
    for i in 0..ops {
        if rng.chance(0.15) {
            dev.flush().unwrap();
            durable.copy_from_slice(&latest);
            continue;
        }
        let len = 1 + rng.below(3000) as usize;
        let off = rng.below(CAP - len as u64);
        let byte = (i % 250) as u8 + 1;
        let buf = vec![byte; len];
        dev.write_at(&buf, off).unwrap();
        latest[off as usize..off as usize + len].copy_from_slice(&buf);
    }
    (durable, latest)
}

fn image(dev: &Faulty<MemDevice>) -> Vec<u8> {
    let mut v = vec![0u8; CAP as usize];
    dev.inner().read_at(&mut v, 0).unwrap();
    v
}

#[test]
fn power_cut_drops_every_unflushed_write_and_keeps_every_flushed_one() {
    for seed in 0..20 {
        let dev = Faulty::new(
            MemDevice::new(CAP).unwrap(),
            FaultConfig {
                seed,
                ..FaultConfig::default()
            },
        );
        let (durable, latest) = scripted(&dev, seed, 200);
        let unflushed = dev.unflushed();
        let report = dev.power_cut().unwrap();
        assert_eq!(report.writes.len(), unflushed);
        assert_eq!(report.count(Outcome::Dropped), unflushed);
        assert_eq!(
            image(&dev),
            durable,
            "seed {seed}: device differs from the flushed state"
        );
        if unflushed > 0 {
            assert_ne!(durable, latest);
        }
        // Powered off until power_on.
        let mut b = [0u8; 1];
        assert!(dev.read_at(&mut b, 0).is_err());
        dev.power_on();
        dev.read_at(&mut b, 0).unwrap();
    }
}

/// Rebuild what the device must hold from the durable image and the report.
fn expected_after(durable: &[u8], report: &PowerCutReport, history: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut img = durable.to_vec();
    for (w, (off, data)) in report.writes.iter().zip(history) {
        assert_eq!((w.offset, w.len), (*off, data.len() as u64));
        match w.outcome {
            Outcome::Survived => {
                img[*off as usize..*off as usize + data.len()].copy_from_slice(data)
            }
            Outcome::Torn => {
                for &(s, e) in &w.persisted {
                    let rel = (s - off) as usize;
                    img[s as usize..e as usize].copy_from_slice(&data[rel..rel + (e - s) as usize]);
                }
            }
            Outcome::Dropped => {}
        }
    }
    img
}

#[test]
fn power_cut_survivors_and_torn_writes_follow_the_policy() {
    for (reorder, seed) in [(false, 1u64), (true, 2), (false, 3), (true, 4)] {
        let policy = PowerCutPolicy {
            survive_prob: 0.5,
            torn_prob: 0.7,
            reorder,
            sector: 512,
        };
        let dev = Faulty::new(
            MemDevice::new(CAP).unwrap(),
            FaultConfig {
                seed,
                power_cut: policy,
                ..FaultConfig::default()
            },
        );
        // Flushed base.
        let base = vec![0xAAu8; CAP as usize];
        dev.write_at(&base, 0).unwrap();
        dev.flush().unwrap();
        let mut rng = SplitMix64::new(seed + 100);
        let mut history = Vec::new();
        for i in 0..40u8 {
            let len = 1 + rng.below(4000) as usize;
            let off = rng.below(CAP - len as u64);
            let data = vec![i + 1; len];
            dev.write_at(&data, off).unwrap();
            history.push((off, data));
        }
        let report = dev.power_cut().unwrap();
        assert_eq!(
            image(&dev),
            expected_after(&base, &report, &history),
            "reorder={reorder}"
        );
        let outcomes: Vec<Outcome> = report.writes.iter().map(|w| w.outcome).collect();
        if !reorder {
            // In-order persistence: survivors, then at most one torn write, then nothing.
            let first_not = outcomes
                .iter()
                .position(|&o| o != Outcome::Survived)
                .unwrap_or(outcomes.len());
            let rest = &outcomes[first_not..];
            assert!(
                rest.iter().skip(1).all(|&o| o == Outcome::Dropped),
                "{outcomes:?}"
            );
        } else {
            assert!(
                outcomes.contains(&Outcome::Survived) && outcomes.contains(&Outcome::Dropped),
                "{outcomes:?}"
            );
        }
        for w in report.writes.iter().filter(|w| w.outcome == Outcome::Torn) {
            let kept: u64 = w.persisted.iter().map(|(s, e)| e - s).sum();
            assert!(
                kept > 0 && (kept < w.len || w.len <= 512),
                "torn write kept {kept} of {}",
                w.len
            );
        }
    }
}

#[test]
fn automatic_power_cut_at_op() {
    let cfg = FaultConfig {
        power_cut_at_op: Some(3),
        ..FaultConfig::default()
    };
    let dev = Faulty::new(MemDevice::new(CAP).unwrap(), cfg);
    dev.write_at(&[1; 10], 0).unwrap(); // op 0
    dev.flush().unwrap(); // op 1
    dev.write_at(&[2; 10], 100).unwrap(); // op 2 (unflushed)
    assert!(dev.write_at(&[3; 10], 200).is_err()); // op 3: power cut first
    assert!(dev.is_powered_off());
    let img = image(&dev);
    assert_eq!(&img[0..10], &[1; 10]);
    assert_eq!(&img[100..110], &[0; 10]);
    assert_eq!(&img[200..210], &[0; 10]);
}

#[test]
fn fail_stop_from_the_configured_op_on() {
    let dev = Faulty::new(
        MemDevice::new(CAP).unwrap(),
        FaultConfig {
            fail_at_op: Some(5),
            ..FaultConfig::default()
        },
    );
    let mut b = [0u8; 16];
    for i in 0..5 {
        if i % 2 == 0 {
            dev.write_at(&[7; 16], 0).unwrap();
        } else {
            dev.read_at(&mut b, 0).unwrap();
        }
    }
    for _ in 0..10 {
        assert!(matches!(
            dev.read_at(&mut b, 0),
            Err(DeviceError::Failed { .. })
        ));
        assert!(matches!(
            dev.write_at(&b, 0),
            Err(DeviceError::Failed { .. })
        ));
        assert!(matches!(dev.flush(), Err(DeviceError::Failed { .. })));
        assert!(matches!(
            dev.discard(0, 16),
            Err(DeviceError::Failed { .. })
        ));
    }
    assert!(dev.is_failed());
    assert_eq!(dev.counts().failstop_errors, 40);

    let timed = Faulty::new(
        MemDevice::new(CAP).unwrap(),
        FaultConfig {
            fail_after: Some(std::time::Duration::from_millis(30)),
            ..FaultConfig::default()
        },
    );
    timed.read_at(&mut b, 0).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(40));
    assert!(matches!(
        timed.read_at(&mut b, 0),
        Err(DeviceError::Failed { .. })
    ));
}

#[test]
fn transient_errors_are_seeded_and_near_the_rate() {
    let pattern = |seed| {
        let dev = Faulty::new(
            MemDevice::new(CAP).unwrap(),
            FaultConfig {
                seed,
                transient_error_rate: 0.1,
                ..FaultConfig::default()
            },
        );
        let mut b = [0u8; 8];
        (0..5000)
            .map(|_| dev.read_at(&mut b, 0).is_err())
            .collect::<Vec<bool>>()
    };
    let a = pattern(11);
    assert_eq!(a, pattern(11));
    assert_ne!(a, pattern(12));
    let n = a.iter().filter(|&&e| e).count();
    assert!((400..600).contains(&n), "{n} errors of 5000 at rate 0.1");
}

#[test]
fn latent_sector_errors_fail_reads_until_rewritten() {
    let cfg = FaultConfig {
        latent_errors: vec![(4096, 8192)],
        ..FaultConfig::default()
    };
    let dev = Faulty::new(MemDevice::new(CAP).unwrap(), cfg);
    let mut b = vec![0u8; 512];
    dev.read_at(&mut b, 0).unwrap();
    dev.read_at(&mut b, 8192).unwrap();
    let e = dev.read_at(&mut b, 4000).unwrap_err();
    assert!(e.to_string().contains("latent sector error"), "{e}");
    assert!(dev.read_at(&mut b, 8000).is_err());
    // Rewriting the first half heals it; the rest still fails.
    dev.write_at(&vec![1u8; 2048], 4096).unwrap();
    dev.read_at(&mut b, 4096).unwrap();
    assert!(dev.read_at(&mut b, 6144).is_err());
    dev.add_latent_error(0, 1);
    assert!(dev.read_at(&mut b, 0).is_err());
    assert_eq!(dev.counts().latent_errors, 4);
}

#[test]
fn bitrot_flips_exactly_one_bit_per_rotten_read() {
    let dev = Faulty::new(
        MemDevice::new(CAP).unwrap(),
        FaultConfig {
            seed: 5,
            bitrot_rate: 1.0,
            ..FaultConfig::default()
        },
    );
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 31) as u8).collect();
    dev.write_at(&data, 0).unwrap();
    for _ in 0..50 {
        let mut b = vec![0u8; 4096];
        dev.read_at(&mut b, 0).unwrap();
        let flipped: u32 = b.iter().zip(&data).map(|(x, y)| (x ^ y).count_ones()).sum();
        assert_eq!(flipped, 1);
    }
    // The stored data is intact: the rot is on the read path.
    let mut clean = vec![0u8; 4096];
    dev.inner().read_at(&mut clean, 0).unwrap();
    assert_eq!(clean, data);
}

#[test]
fn power_cut_undoes_an_unflushed_discard() {
    let dev = Faulty::new(MemDevice::new(CAP).unwrap(), FaultConfig::default());
    dev.write_at(&[9u8; 8192], 4096).unwrap();
    dev.flush().unwrap();
    dev.discard(4096, 8192).unwrap();
    let mut b = vec![1u8; 8192];
    dev.read_at(&mut b, 4096).unwrap();
    assert!(b.iter().all(|&x| x == 0));
    let r = dev.power_cut().unwrap();
    assert_eq!(r.writes.len(), 1);
    assert!(r.writes[0].discard);
    dev.power_on();
    dev.read_at(&mut b, 4096).unwrap();
    assert!(
        b.iter().all(|&x| x == 9),
        "flushed data lost to an unflushed discard"
    );
}
