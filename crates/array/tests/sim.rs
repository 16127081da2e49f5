//! The deterministic array simulator (`ecstack_array::sim`) over many seeds: workload, power cuts,
//! device failures, latent sector errors and rebuilds, every acknowledged byte checked against a
//! model after every step.
//!
//! * `ECSTACK_SEED=<n>` runs seed n alone (a failure message names the seed to pass);
//! * `ECSTACK_SEEDS=<count>` sets the sweep size (default 300 seeds, seeds 0..count);
//! * `ecstack sim array --seed N [--seeds C]` runs the same simulator from the command line.

use ecstack_array::sim::{run_seed, sweep, SimOptions};

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

/// Seeds in the default sweep: enough to reach every path (asserted), quick enough for CI.
const DEFAULT_SEEDS: u64 = 300;

#[test]
fn sweep_of_seeds_loses_no_acknowledged_write() {
    if let Some(seed) = env_u64("ECSTACK_SEED") {
        let opts = SimOptions {
            trace: std::env::var_os("ECSTACK_TRACE").is_some(),
            ..SimOptions::default()
        };
        match run_seed(seed, &opts) {
            Ok(r) => eprintln!("seed {seed} ({}) passed: {:?}", r.array, r.reached),
            Err(f) => panic!("{f}"),
        }
        return;
    }
    let count = env_u64("ECSTACK_SEEDS").unwrap_or(DEFAULT_SEEDS);
    let report = sweep(0, count, &SimOptions::default(), |_| {}).unwrap_or_else(|f| panic!("{f}"));
    eprintln!(
        "{} seeds (md/pl/eplog {:?}): {:?}",
        report.seeds, report.per_scheme, report.reached
    );
    // The sweep must have exercised what it claims to test.
    let missing = report.reached.missing();
    assert!(
        missing.is_empty(),
        "{count} seeds never reached: {}",
        missing.join(", ")
    );
    assert!(
        report.per_scheme.iter().all(|&n| n > 0),
        "a scheme was never simulated"
    );
}

/// Two runs of one seed write identical bytes to every device (uuid, clock, faults and I/O order
/// all come from the seed), so a failing seed replays exactly.
#[test]
fn one_seed_replays_exactly() {
    for seed in [3u64, 17, 29, 1234] {
        let a = run_seed(seed, &SimOptions::default()).unwrap_or_else(|f| panic!("{f}"));
        let b = run_seed(seed, &SimOptions::default()).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(a, b, "seed {seed} ran differently twice");
    }
    // And different seeds differ.
    let short = SimOptions {
        steps: 40,
        ..SimOptions::default()
    };
    let a = run_seed(5, &short).unwrap_or_else(|f| panic!("{f}"));
    let b = run_seed(6, &short).unwrap_or_else(|f| panic!("{f}"));
    assert_ne!(a.digest, b.digest);
}
