//! CodFS's workload-aware reserved space (seed `codfs-tween-thesis.txt` §4.1.2, Algorithm 1): the
//! arithmetic every PLR reserve follows, shared by the OSD that runs it on its parity chunks
//! (`ecstack_osd::update::plr`) and the simulator that replays traces through it
//! (`ecstack_sim::reserve`, whose module doc states the choices the seed leaves open: use(p) is
//! the reserve's peak occupancy in the interval, u_0, r_t = 0, shrink only).

/// The default u_0 (see the module doc).
pub const U0: f64 = 1.0;

/// Algorithm 1's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReservePolicy {
    /// The smoothing factor α (§5.3.2: 0.3).
    pub alpha: f64,
    /// Every reserve starts at this size (bytes, a multiple of `chunk_bytes`).
    pub initial_bytes: u64,
    /// The shrink granularity (the seed: the chunk size).
    pub chunk_bytes: u64,
    /// u_0, the utility a new reserve starts with.
    pub u0: f64,
}

impl ReservePolicy {
    /// One line naming what is wrong, if anything.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.alpha) {
            return Err(format!("alpha {} is not in [0, 1]", self.alpha));
        }
        if !(0.0..=1.0).contains(&self.u0) {
            return Err(format!("u0 {} is not in [0, 1]", self.u0));
        }
        if self.chunk_bytes == 0 {
            return Err("the chunk size is 0".into());
        }
        if self.initial_bytes % self.chunk_bytes != 0 {
            return Err(format!(
                "the initial reserve ({} bytes) is not a multiple of the chunk size ({} bytes)",
                self.initial_bytes, self.chunk_bytes
            ));
        }
        Ok(())
    }
}

/// u_t(p) = α·use(p)/r_t(p) + (1 − α)·u_{t−1}(p) for a reserve of `size` > 0 bytes that held at
/// most `used` bytes during the interval.
pub fn utility(alpha: f64, used: u64, size: u64, previous: f64) -> f64 {
    debug_assert!(size > 0, "no utility of an empty reserve");
    let share = (used as f64 / size as f64).min(1.0);
    alpha * share + (1.0 - alpha) * previous
}

/// c(p) = ⌊(1 − u)·r / ChunkSize⌋·ChunkSize.
pub fn shrink_size(utility: f64, size: u64, chunk_bytes: u64) -> u64 {
    let unused = ((1.0 - utility).clamp(0.0, 1.0) * size as f64).floor() as u64;
    (unused / chunk_bytes * chunk_bytes).min(size)
}

/// Algorithm 1 at the end of an interval for one reserve of `size` bytes that held at most `peak`
/// bytes of deltas (use(p)) and holds `held` now, from the previous utility `u_prev`: the new
/// utility and the reserve's next size r_{t+1} = r_t − c(p). Without a merge after the shrink
/// (`merge_follows` false: "shrink only"), the deltas held stay, so the shrink never cuts below
/// them (rounded up to the granularity). A reserve of 0 bytes stays 0: its chunk is updated in
/// place (the seed), and Algorithm 1 has no growth step.
pub fn next_size(
    policy: &ReservePolicy,
    size: u64,
    peak: u64,
    held: u64,
    u_prev: f64,
    merge_follows: bool,
) -> (f64, u64) {
    if size == 0 {
        return (u_prev, 0);
    }
    let u = utility(policy.alpha, peak, size, u_prev);
    let mut c = shrink_size(u, size, policy.chunk_bytes);
    if !merge_follows {
        let floor = held.div_ceil(policy.chunk_bytes) * policy.chunk_bytes;
        c = c.min(size.saturating_sub(floor));
    }
    (u, size - c)
}
