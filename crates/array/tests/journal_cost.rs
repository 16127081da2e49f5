//! What the update journal (`OpenOptions::journal_updates`) costs md and pl: random one-chunk
//! updates of a filled (6+2) array on memory devices, with the journal off and on. Prints
//! updates/s (wall clock, so only a rough figure on a shared machine) and, per update, the bytes
//! read and written on the main and log devices and on the metadata volume, and the device
//! flushes, which do not depend on the machine. Ignored in CI (a measurement, not a check beyond
//! the data reading back); run it with
//! `cargo test --release -p ecstack-array --test journal_cost -- --ignored --nocapture`
//! (`ECSTACK_UPDATES=<n>` sets the number of updates, default 20,000).

use std::sync::Arc;
use std::time::Instant;

use ecstack_array::{Array, ArrayConfig, ArrayDevices, BlockDevice, OpenOptions, SchemeKind};
use ecstack_base::Rng;
use ecstack_device::{DeviceStats, MemDevice, Metered};

type Dev = Arc<Metered<MemDevice>>;

const CHUNK: usize = 4096;

fn sum(devs: &[Dev]) -> DeviceStats {
    let mut s = DeviceStats::default();
    for d in devs {
        s.add(&d.snapshot());
    }
    s
}

fn run(scheme: SchemeKind, journal: bool, updates: u64) -> String {
    let (k, m) = (6, 2);
    let dev = |size: u64| Arc::new(Metered::new(MemDevice::new(size).expect("memory device")));
    let main: Vec<Dev> = (0..k + m).map(|_| dev(8 << 20)).collect();
    let log: Vec<Dev> = if scheme.uses_log() {
        (0..m).map(|_| dev(8 << 20)).collect()
    } else {
        Vec::new()
    };
    let meta = dev(64 << 20);
    let handles = |v: &[Dev]| {
        v.iter()
            .map(|d| Arc::clone(d) as Arc<dyn BlockDevice>)
            .collect::<Vec<_>>()
    };
    let devices = ArrayDevices {
        main: handles(&main),
        log: handles(&log),
        meta: Arc::clone(&meta) as Arc<dyn BlockDevice>,
        specs: None,
    };
    let cfg = ArrayConfig {
        chunk_size: CHUNK as u32,
        ..ArrayConfig::with_geometry(scheme, k, m)
    };
    let opts = OpenOptions {
        parallel_io: false,
        journal_updates: journal,
        ..OpenOptions::default()
    };
    let a = Array::create_with(&cfg, devices, &opts).expect("create");
    let size = a.size() as usize;
    let mut model: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();
    a.write(&model, 0).expect("fill");
    a.sync().expect("sync");
    let all: Vec<Dev> = main.iter().chain(&log).cloned().collect();
    for d in all.iter().chain(std::iter::once(&meta)) {
        d.reset();
    }
    let mut rng = Rng::new(7);
    let chunks = (size / CHUNK) as u64;
    let mut buf = vec![0u8; CHUNK];
    let t = Instant::now();
    for _ in 0..updates {
        let off = rng.below(chunks) as usize * CHUNK;
        rng.fill(&mut buf);
        a.write(&buf, off as u64).expect("update");
        model[off..off + CHUNK].copy_from_slice(&buf);
    }
    let secs = t.elapsed().as_secs_f64();
    let d = sum(&all);
    let mv = meta.snapshot();
    let mut back = vec![0u8; size];
    a.read(&mut back, 0).expect("read back");
    assert!(back == model, "{scheme} journal {journal}: content differs");
    let per = |x: u64| x as f64 / updates as f64;
    format!(
        "| {scheme} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} |",
        if journal { "on" } else { "off" },
        updates as f64 / secs,
        per(d.read_bytes),
        per(d.write_bytes),
        per(mv.write_bytes),
        per(d.flushes),
        per(mv.flushes),
    )
}

#[test]
#[ignore = "a measurement; see the file's doc"]
fn update_journal_cost() {
    let updates = std::env::var("ECSTACK_UPDATES")
        .ok()
        .map(|v| v.parse().expect("ECSTACK_UPDATES is a number"))
        .unwrap_or(20_000);
    println!("{updates} random {CHUNK}-byte updates of a filled (6+2) array, memory devices:");
    println!("| scheme | journal | updates/s | device bytes read / update | device bytes written / update | metadata bytes written / update | device flushes / update | metadata flushes / update |");
    println!("|---|---|---|---|---|---|---|---|");
    for scheme in [SchemeKind::Md, SchemeKind::Pl] {
        for journal in [false, true] {
            println!("{}", run(scheme, journal, updates));
        }
    }
}
