#![allow(dead_code)]
//! Test rig: an array over Faulty(MemDevice) devices and a plain byte vector as the reference model.

use std::sync::Arc;

use ecstack_array::{Array, ArrayConfig, ArrayDevices, SchemeKind};
use ecstack_device::{FaultConfig, Faulty, MemDevice, PowerCutPolicy};

/// The one seeded PRNG of the workspace.
pub use ecstack_base::Rng;

pub type Dev = Arc<Faulty<MemDevice>>;

pub const CHUNK: u32 = 1024;
pub const MAIN_SIZE: u64 = 256 << 10;
pub const LOG_SIZE: u64 = 48 << 10;
pub const META_SIZE: u64 = 2 << 20;

pub fn faulty(size: u64, seed: u64, crashy: bool) -> Dev {
    let mut cfg = FaultConfig {
        seed,
        ..FaultConfig::default()
    };
    if crashy {
        cfg.power_cut = PowerCutPolicy {
            survive_prob: 0.5,
            torn_prob: 0.5,
            reorder: true,
            sector: 512,
        };
    } else {
        cfg.track_unflushed = false;
    }
    Arc::new(Faulty::new(MemDevice::new(size).unwrap(), cfg))
}

pub struct Rig {
    pub main: Vec<Dev>,
    pub log: Vec<Dev>,
    pub meta: Dev,
    pub crashy: bool,
}

impl Rig {
    pub fn new(scheme: SchemeKind, k: usize, m: usize, seed: u64, crashy: bool) -> Rig {
        let nlog = if scheme == SchemeKind::Md { 0 } else { m };
        Rig {
            main: (0..k + m)
                .map(|i| faulty(MAIN_SIZE, seed * 100 + i as u64, crashy))
                .collect(),
            log: (0..nlog)
                .map(|i| faulty(LOG_SIZE, seed * 100 + 50 + i as u64, crashy))
                .collect(),
            meta: faulty(META_SIZE, seed * 100 + 99, crashy),
            crashy,
        }
    }

    pub fn devices(&self) -> ArrayDevices {
        ArrayDevices::from_handles(&self.main, &self.log, &self.meta)
    }

    /// Device `i` in array numbering (main then log).
    pub fn dev(&self, i: usize) -> &Dev {
        if i < self.main.len() {
            &self.main[i]
        } else {
            &self.log[i - self.main.len()]
        }
    }

    pub fn set_dev(&mut self, i: usize, d: Dev) {
        if i < self.main.len() {
            self.main[i] = d;
        } else {
            let n = self.main.len();
            self.log[i - n] = d;
        }
    }

    pub fn all(&self) -> Vec<Dev> {
        self.main
            .iter()
            .chain(self.log.iter())
            .chain(std::iter::once(&self.meta))
            .cloned()
            .collect()
    }
}

pub fn config(scheme: SchemeKind, k: usize, m: usize) -> ArrayConfig {
    ArrayConfig {
        chunk_size: CHUNK,
        reserve: 0.3,
        ..ArrayConfig::with_geometry(scheme, k, m)
    }
}

/// Random write extent: chunk-aligned multi-chunk or arbitrary unaligned.
pub fn extent(rng: &mut Rng, cap: u64, k: usize) -> (u64, usize) {
    let c = CHUNK as u64;
    match rng.below(4) {
        0 => {
            let len = c * (1 + rng.below(3 * k as u64));
            let off = rng.below((cap - len) / c + 1) * c;
            (off, len as usize)
        }
        1 => {
            // Whole stripes.
            let sb = c * k as u64;
            let n = 1 + rng.below(3);
            let len = (sb * n).min(cap);
            let off = rng.below((cap - len) / sb + 1) * sb;
            (off, len as usize)
        }
        _ => {
            let len = 1 + rng.below(3 * c * k as u64);
            let off = rng.below(cap - len + 1);
            (off, len as usize)
        }
    }
}

pub fn verify_all(a: &Array, model: &[u8], what: &str) {
    let mut buf = vec![0u8; model.len()];
    a.read(&mut buf, 0)
        .unwrap_or_else(|e| panic!("{what}: full read failed: {e}"));
    if buf != model {
        let i = buf.iter().zip(model).position(|(x, y)| x != y).unwrap();
        panic!(
            "{what}: content differs from the model at byte {i} (chunk {}, got {} want {})",
            i / CHUNK as usize,
            buf[i],
            model[i]
        );
    }
}
