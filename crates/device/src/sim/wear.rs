//! ZombieNAND cell wear physics (thesis ch. 4): the oxide-stress model of Algorithm 4, death
//! thresholds calibrated to the rated P/E counts of §4.4.2, bit-mode fallback (§4.1, §4.3.2) and the
//! early-switch pool size of Eq. 4.1.
//!
//! # The physics (Algorithm 4, as written)
//! After `cycle` program/erase cycles a block has trapped `δN_it = A·cycle^0.62` interface traps and
//! `δN_ot = B·cycle^0.30` bulk traps; its threshold-voltage shift is `(δN_it + δN_ot)·q / Cox` with
//! `A = 0.08`, `B = 5.0`, `Cox = 2.15e-17`, `q = 1.6e-19`. The trapped charge belongs to the block and
//! does not change when the block switches cell mode (§4.2.3: "we retain the trapped voltage at a
//! per-block granularity, which will not change on bit-switch, and reference a higher threshold
//! relative to the current bit-mode"). The seed assumes no charge recovery (footnote 1).
//!
//! # Calibration
//! A block dies in mode `M` once its stress reaches `oxide_stress(rated_pe_cycles(M))`, so a block that
//! never switches dies at exactly 1,000 (TLC), 6,000 (MLC) or 75,000 (SLC) erases: the seed tuned its
//! engine to declare unswitching drives dead "at roughly" those counts (§4.4.2).
//!
//! # Finding: without recovery the physics is a cumulative erase counter
//! `oxide_stress` is strictly increasing in `cycle` and the thresholds are fixed, so "stress ≥
//! threshold(M)" is exactly "total erases ≥ rated(M)". [`WearPhysics::CumulativeCounter`] implements
//! that comparison directly and `tests/zombienand.rs` checks that whole lifetimes are identical to the
//! last counter. What the physics does rule out is the *per-mode* counter the seed warns about (§4.4.1:
//! deducting the TLC cycles from a fresh MLC budget), kept here as [`WearPhysics::PerModeCounter`] so
//! the difference can be measured (`ecstack sim zombienand --physics per-mode-counter`).

use super::ssd::{BlockInfo, CellMode, WearAction, WearModel};

/// Algorithm 4's constants.
pub const STRESS_A: f64 = 0.08;
pub const STRESS_B: f64 = 5.0;
/// Oxide capacitance (F), refitted by the seed (§4.2.3).
pub const STRESS_COX: f64 = 2.15e-17;
/// Electron charge (C), as the seed writes it.
pub const STRESS_Q: f64 = 1.6e-19;

/// Algorithm 4 (CALC_STRESS): threshold-voltage shift (V) after `cycle` P/E cycles.
pub fn oxide_stress(cycle: u32) -> f64 {
    let c = cycle as f64;
    let n_it = STRESS_A * c.powf(0.62);
    let n_ot = STRESS_B * c.powf(0.30);
    let v_it = n_it * STRESS_Q / STRESS_COX;
    let v_ot = n_ot * STRESS_Q / STRESS_COX;
    v_it + v_ot
}

/// Stress (V) at which a block dies in `mode`: the stress of its rated P/E count.
pub fn death_threshold(mode: CellMode) -> f64 {
    oxide_stress(mode.rated_pe_cycles())
}

/// The next lower-bit mode a dead block falls back to, `None` below SLC.
pub fn fallback_mode(mode: CellMode) -> Option<CellMode> {
    match mode {
        CellMode::Tlc => Some(CellMode::Mlc),
        CellMode::Mlc => Some(CellMode::Slc),
        CellMode::Slc => None,
    }
}

/// Usable logical pages of a block in `mode` when the native mode holds `ppb`: capacity follows the
/// bits per cell (§4.1: one bit of capacity is lost per transition), rounded down.
pub fn pages_in_mode(ppb: u32, native: CellMode, mode: CellMode) -> u32 {
    (ppb as u64 * mode.bits_per_cell() as u64 / native.bits_per_cell() as u64) as u32
}

/// Eq. 4.1: early-switch blocks per element, `floor((R - W) · B / 2^(S-2))` with R the reserved
/// fraction, W the GC high watermark, B blocks per element and S the starting bits per cell (S = 1
/// divides by 1/2, i.e. doubles; the seed only starts at MLC or TLC). Zero when R ≤ W.
pub fn early_switch_blocks(
    reserve: f64,
    high_watermark: f64,
    blocks_per_element: u32,
    start: CellMode,
) -> u32 {
    let spare = reserve - high_watermark;
    if spare <= 0.0 {
        return 0;
    }
    let s = start.bits_per_cell() as i32;
    let pool = spare * blocks_per_element as f64 / 2f64.powi(s - 2);
    // A small epsilon keeps exact products such as 0.05 × 128 / 2 = 3.2 from rounding below.
    (pool + 1e-9).floor() as u32
}

/// How a block's death in its current mode is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WearPhysics {
    /// Algorithm 4: trapped-charge stress of the block's total erases against the mode's threshold.
    OxideStress,
    /// Total erases against the mode's rated count (equal to `OxideStress`: see the module docs).
    CumulativeCounter,
    /// Erases since the block entered its mode against the mode's rated count: the naive counter the
    /// seed rejects (§4.4.1); it overestimates a zombie block's life.
    PerModeCounter,
}

impl WearPhysics {
    pub fn parse(s: &str) -> Option<WearPhysics> {
        match s {
            "oxide-stress" => Some(WearPhysics::OxideStress),
            "cumulative-counter" => Some(WearPhysics::CumulativeCounter),
            "per-mode-counter" => Some(WearPhysics::PerModeCounter),
            _ => None,
        }
    }
}

/// ZombieNAND wear: a block that dies in its mode switches to the next lower-bit mode (`fallback`)
/// with fewer usable pages, or retires (`fallback == false`, the unswitching baseline; and always
/// below SLC).
#[derive(Debug, Clone)]
pub struct ZombieWear {
    pub physics: WearPhysics,
    pub fallback: bool,
    /// Pages per block in the native mode.
    pub ppb: u32,
    pub native: CellMode,
    thresholds: [f64; 3],
    /// `oxide_stress(c)` for c = 0..=75,000 (the SLC rated count, past which no block lives): a
    /// lookup instead of two `powf` per call, bit-identical to calling [`oxide_stress`].
    stress: Vec<f64>,
}

fn idx(mode: CellMode) -> usize {
    mode.bits_per_cell() as usize - 1
}

impl ZombieWear {
    pub fn new(physics: WearPhysics, fallback: bool, ppb: u32, native: CellMode) -> ZombieWear {
        ZombieWear {
            physics,
            fallback,
            ppb,
            native,
            thresholds: [
                death_threshold(CellMode::Slc),
                death_threshold(CellMode::Mlc),
                death_threshold(CellMode::Tlc),
            ],
            stress: match physics {
                WearPhysics::OxideStress => (0..=CellMode::Slc.rated_pe_cycles())
                    .map(oxide_stress)
                    .collect(),
                _ => Vec::new(),
            },
        }
    }

    fn stress(&self, cycle: u32) -> f64 {
        match self.stress.get(cycle as usize) {
            Some(&v) => v,
            None => oxide_stress(cycle),
        }
    }

    /// Is the block (just erased, `erase_count` cycles) dead in its current mode?
    pub fn is_dead(&self, info: &BlockInfo) -> bool {
        match self.physics {
            WearPhysics::OxideStress => {
                self.stress(info.erase_count) >= self.thresholds[idx(info.mode)]
            }
            WearPhysics::CumulativeCounter => info.erase_count >= info.mode.rated_pe_cycles(),
            WearPhysics::PerModeCounter => {
                info.erase_count - info.mode_since_erase >= info.mode.rated_pe_cycles()
            }
        }
    }
}

impl WearModel for ZombieWear {
    fn after_erase(&mut self, _block: u32, info: &BlockInfo) -> WearAction {
        if !self.is_dead(info) {
            return WearAction::Keep;
        }
        match fallback_mode(info.mode).filter(|_| self.fallback) {
            Some(mode) => WearAction::Switch {
                mode,
                pages: pages_in_mode(self.ppb, self.native, mode),
            },
            None => WearAction::Retire,
        }
    }

    /// Remaining life: volts of stress left before the mode's threshold (oxide stress), or erases
    /// left (counters). Algorithm 6 compares it with the mean of the block's group.
    fn remaining_life(&self, info: &BlockInfo) -> f64 {
        match self.physics {
            WearPhysics::OxideStress => {
                self.thresholds[idx(info.mode)] - self.stress(info.erase_count)
            }
            WearPhysics::CumulativeCounter => {
                info.mode.rated_pe_cycles() as f64 - info.erase_count as f64
            }
            WearPhysics::PerModeCounter => {
                info.mode.rated_pe_cycles() as f64
                    - (info.erase_count - info.mode_since_erase) as f64
            }
        }
    }
}
