//! ZombieNAND (thesis ch. 4): lifetimes of simulated SSDs to death, baseline against bit-mode
//! fallback with wear-unleveling. The flash model itself lives in `ecstack_device::sim`
//! (`ssd.rs`: FTL, GC policies, capacity and death; `wear.rs`: Algorithm 4 and Eq. 4.1).
//!
//! * [`life`]: one lifetime with progress and checkpoint/resume (`ecstack sim zombienand`).
//! * [`grid`]: the §4.4.3 synthetic grid, sharded and merged, with SVG heat maps
//!   (`ecstack experiment zombienand`).
//! * [`trace`]: the §4.4.4 trace-driven runs (`ecstack experiment zombienand --trace-driven`).
//!
//! Both long runs share `journal` (not public): worker threads over the items and a journal of
//! finished items, so a killed grid or trace-driven run continues where it stopped.

pub mod grid;
mod journal;
pub mod life;
pub mod trace;
