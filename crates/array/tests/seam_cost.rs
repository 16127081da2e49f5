//! A small paced run for instruction counts of the device seam (docs/benchmarks.md, "The device
//! seam's cost"): eplog (6+2) with 4 KiB chunks on memory devices paced like the EPLOG testbed
//! (`Throttled`, service profiles `eplog-ssd` for the main devices and `eplog-hdd` for the log
//! devices), one client issuing `ECSTACK_UPDATES` (default 2,000) random one-chunk updates after a
//! fill. Ignored in CI; run it under callgrind, whose counts do not depend on the machine's load:
//!
//! ```text
//! cargo test --release -p ecstack-array --test seam_cost --no-run
//! ECSTACK_UPDATES=2000 valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     target/release/deps/seam_cost-<hash> --ignored --test-threads=1
//! ```

use std::sync::Arc;

use ecstack_array::{Array, ArrayConfig, ArrayDevices, BlockDevice, OpenOptions, SchemeKind};
use ecstack_base::Rng;
use ecstack_device::{MemDevice, ServiceProfile, ThrottleConfig, Throttled};

const CHUNK: usize = 4096;

fn paced(profile: &str, bytes: u64, seed: u64) -> Arc<dyn BlockDevice> {
    let cfg = ThrottleConfig {
        profile: ServiceProfile::preset(profile),
        seed,
        ..ThrottleConfig::default()
    };
    Arc::new(Throttled::new(
        MemDevice::new(bytes).expect("memory device"),
        cfg,
    ))
}

#[test]
#[ignore = "a measurement for callgrind; see the file's doc"]
fn paced_eplog_updates() {
    let updates: u64 = std::env::var("ECSTACK_UPDATES")
        .ok()
        .map(|v| v.parse().expect("ECSTACK_UPDATES is a number"))
        .unwrap_or(2000);
    let (k, m) = (6, 2);
    let devices = ArrayDevices {
        main: (0..k + m)
            .map(|i| paced("eplog-ssd", 8 << 20, i as u64))
            .collect(),
        log: (0..m)
            .map(|i| paced("eplog-hdd", 8 << 20, 100 + i as u64))
            .collect(),
        meta: Arc::new(MemDevice::new(64 << 20).expect("memory device")),
        specs: None,
    };
    let cfg = ArrayConfig {
        chunk_size: CHUNK as u32,
        ..ArrayConfig::with_geometry(SchemeKind::Eplog, k, m)
    };
    let a = Array::create_with(&cfg, devices, &OpenOptions::default()).expect("create");
    let size = a.size() as usize;
    let fill: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();
    a.write(&fill, 0).expect("fill");
    let mut rng = Rng::new(7);
    let chunks = (size / CHUNK) as u64;
    let mut buf = vec![0u8; CHUNK];
    for _ in 0..updates {
        let off = rng.below(chunks) * CHUNK as u64;
        rng.fill(&mut buf);
        a.write(&buf, off).expect("update");
    }
    a.close().expect("close");
}
