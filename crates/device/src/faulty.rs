//! `Faulty`: injects the failures storage code must survive, deterministically from a seed.
//!
//! * **fail-stop** at an operation count (`fail_at_op`: operation number `n`, counted from 0 over reads,
//!   writes, flushes and discards, and every later one return [`DeviceError::Failed`]) or after a time
//!   since the wrapper was created (`fail_after`), or on demand ([`Faulty::fail_now`]);
//! * **transient errors**: each read/write fails with probability `transient_error_rate` (nothing is
//!   done; a retry may succeed);
//! * **latent sector errors**: byte ranges whose reads fail with an I/O error until the range is
//!   rewritten (if `heal_on_write`, the default: a drive remaps a sector when it is written);
//! * **bit-rot**: each read has probability `bitrot_rate` of returning one silently flipped bit;
//! * **power cut** ([`Faulty::power_cut`], or automatically before operation `power_cut_at_op`): every
//!   write (and discard) since the last successful flush is undone on the inner device, then re-applied
//!   according to [`PowerCutPolicy`]: survive whole, be torn (only some `sector`-sized pieces persist),
//!   or be dropped; without `reorder`, survivors form a prefix in issue order (with at most one torn write
//!   right after it), as a device that persists in order would leave them. Flushed writes are never
//!   touched. The device then stays powered off (every op fails) until [`Faulty::power_on`].
//!
//! To undo writes, `Faulty` reads the pre-image of each unflushed write from the inner device and keeps
//! it with the new data until the next flush (memory grows with the unflushed volume; set
//! `track_unflushed = false` to turn power-cut support off).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{BlockDevice, DeviceError, DeviceStats, Result, SplitMix64};

/// What happens to unflushed writes at a power cut. The default drops all of them.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PowerCutPolicy {
    /// Probability that an unflushed write persists whole.
    pub survive_prob: f64,
    /// Probability that a write that does not persist whole is torn (some sectors persist).
    pub torn_prob: f64,
    /// Whether survivors may be any subset (true) or must be a prefix in issue order (false).
    pub reorder: bool,
    /// Granularity of tearing, bytes (writes persist atomically per aligned sector).
    pub sector: u64,
}

impl Default for PowerCutPolicy {
    fn default() -> Self {
        PowerCutPolicy {
            survive_prob: 0.0,
            torn_prob: 0.0,
            reorder: false,
            sector: 512,
        }
    }
}

/// Faults to inject. `Default` injects none.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    pub seed: u64,
    pub fail_at_op: Option<u64>,
    pub fail_after: Option<Duration>,
    pub transient_error_rate: f64,
    /// Byte ranges `[start, end)` with latent sector errors.
    pub latent_errors: Vec<(u64, u64)>,
    pub heal_on_write: bool,
    pub bitrot_rate: f64,
    pub power_cut: PowerCutPolicy,
    /// Cut power just before operation number `n` (that operation and later ones fail).
    pub power_cut_at_op: Option<u64>,
    /// Keep pre-images of unflushed writes so a power cut can undo them.
    pub track_unflushed: bool,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            seed: 0,
            fail_at_op: None,
            fail_after: None,
            transient_error_rate: 0.0,
            latent_errors: Vec::new(),
            heal_on_write: true,
            bitrot_rate: 0.0,
            power_cut: PowerCutPolicy::default(),
            power_cut_at_op: None,
            track_unflushed: true,
        }
    }
}

/// The fate of one unflushed write at a power cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Survived,
    Torn,
    Dropped,
}

/// One unflushed write (or discard, `discard == true`) and what the power cut did to it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CutWrite {
    pub offset: u64,
    pub len: u64,
    pub discard: bool,
    pub outcome: Outcome,
    /// For torn writes: the byte ranges `[start, end)` that persisted.
    pub persisted: Vec<(u64, u64)>,
}

/// What a power cut did, in issue order.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PowerCutReport {
    pub writes: Vec<CutWrite>,
}

impl PowerCutReport {
    pub fn count(&self, o: Outcome) -> usize {
        self.writes.iter().filter(|w| w.outcome == o).count()
    }
}

/// How many faults were injected so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FaultCounts {
    pub ops: u64,
    pub failstop_errors: u64,
    pub transient_errors: u64,
    pub latent_errors: u64,
    pub bitrot_flips: u64,
    pub power_cuts: u64,
}

#[derive(Debug)]
struct Pending {
    offset: u64,
    old: Vec<u8>,
    /// None for a discard.
    new: Option<Vec<u8>>,
}

#[derive(Debug)]
struct State {
    rng: SplitMix64,
    counts: FaultCounts,
    failed: bool,
    powered_off: bool,
    latent: BTreeMap<u64, u64>,
    pending: Vec<Pending>,
}

/// Fault-injecting wrapper around any device.
#[derive(Debug)]
pub struct Faulty<D> {
    inner: D,
    cfg: FaultConfig,
    start: Instant,
    state: Mutex<State>,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Read,
    Write,
    Other,
}

impl<D: BlockDevice> Faulty<D> {
    pub fn new(inner: D, cfg: FaultConfig) -> Self {
        let mut latent = BTreeMap::new();
        for &(s, e) in &cfg.latent_errors {
            if e > s {
                insert_range(&mut latent, s, e);
            }
        }
        let state = State {
            rng: SplitMix64::new(cfg.seed),
            counts: FaultCounts::default(),
            failed: false,
            powered_off: false,
            latent,
            pending: Vec::new(),
        };
        Faulty {
            inner,
            cfg,
            start: Instant::now(),
            state: Mutex::new(state),
        }
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn counts(&self) -> FaultCounts {
        self.lock().counts
    }

    /// Fail-stop now: every later operation fails.
    pub fn fail_now(&self) {
        self.lock().failed = true;
    }

    pub fn is_failed(&self) -> bool {
        self.lock().failed
    }

    /// Undo a fail-stop failure (the device comes back, holding whatever it held when it failed).
    pub fn repair(&self) {
        self.lock().failed = false;
    }

    pub fn is_powered_off(&self) -> bool {
        self.lock().powered_off
    }

    /// Writes and discards issued since the last successful flush.
    pub fn unflushed(&self) -> usize {
        self.lock().pending.len()
    }

    /// Mark `[offset, offset+len)` as unreadable (latent sector error).
    pub fn add_latent_error(&self, offset: u64, len: u64) {
        if len > 0 {
            insert_range(&mut self.lock().latent, offset, offset.saturating_add(len));
        }
    }

    /// Cut power now (see the module docs). Fails if power-cut tracking is off.
    pub fn power_cut(&self) -> Result<PowerCutReport> {
        let mut st = self.lock();
        self.cut(&mut st)
    }

    /// Power the device back on after a cut (a fail-stop failure stays).
    pub fn power_on(&self) {
        self.lock().powered_off = false;
    }

    fn cut(&self, st: &mut State) -> Result<PowerCutReport> {
        if !self.cfg.track_unflushed {
            return Err(DeviceError::other(
                self.inner.name(),
                "power cut needs track_unflushed = true",
            ));
        }
        st.counts.power_cuts += 1;
        st.powered_off = true;
        let pending = std::mem::take(&mut st.pending);
        // 1. Undo every unflushed write, newest first: the inner device is back at its flushed state.
        for p in pending.iter().rev() {
            self.inner.write_at(&p.old, p.offset)?;
        }
        // 2. Decide each write's fate and re-apply what persisted, in issue order.
        let pol = self.cfg.power_cut;
        let sector = pol.sector.max(1);
        let mut report = PowerCutReport::default();
        let mut prefix_open = true;
        for p in &pending {
            let len = p.old.len() as u64;
            let mut outcome = Outcome::Dropped;
            if pol.reorder || prefix_open {
                if st.rng.chance(pol.survive_prob) {
                    outcome = Outcome::Survived;
                } else {
                    prefix_open = false;
                    if p.new.is_some() && st.rng.chance(pol.torn_prob) {
                        outcome = Outcome::Torn;
                    }
                }
            }
            let mut persisted = Vec::new();
            match (outcome, &p.new) {
                (Outcome::Survived, Some(new)) => self.inner.write_at(new, p.offset)?,
                (Outcome::Survived, None) => self.inner.discard(p.offset, len)?,
                (Outcome::Torn, Some(new)) => {
                    // Split at absolute sector boundaries; pick which pieces made it.
                    let mut pieces = Vec::new();
                    let mut s = p.offset;
                    let end = p.offset + len;
                    while s < end {
                        let e = ((s / sector + 1) * sector).min(end);
                        pieces.push((s, e));
                        s = e;
                    }
                    let keep: Vec<bool> = if pol.reorder {
                        // Any subset, but neither none nor all (that would be dropped/survived).
                        let mut k: Vec<bool> = pieces.iter().map(|_| st.rng.chance(0.5)).collect();
                        if pieces.len() > 1 {
                            if k.iter().all(|&b| b) {
                                let i = st.rng.below(k.len() as u64) as usize;
                                k[i] = false;
                            }
                            if k.iter().all(|&b| !b) {
                                let i = st.rng.below(k.len() as u64) as usize;
                                k[i] = true;
                            }
                        } else {
                            k[0] = true;
                        }
                        k
                    } else {
                        // In-order device: a prefix of the sectors persisted.
                        let n = pieces.len() as u64;
                        let j = if n > 1 { 1 + st.rng.below(n - 1) } else { 1 };
                        (0..n).map(|i| i < j).collect()
                    };
                    for (&(s, e), &k) in pieces.iter().zip(&keep) {
                        if k {
                            let off = (s - p.offset) as usize;
                            self.inner.write_at(&new[off..off + (e - s) as usize], s)?;
                            persisted.push((s, e));
                        }
                    }
                }
                _ => {}
            }
            report.writes.push(CutWrite {
                offset: p.offset,
                len,
                discard: p.new.is_none(),
                outcome,
                persisted,
            });
        }
        self.inner.flush()?;
        Ok(report)
    }

    /// Common gate for every operation: op counting, power-cut trigger, fail-stop, transient errors.
    fn gate(&self, st: &mut State, kind: Kind) -> Result<()> {
        let op = st.counts.ops;
        st.counts.ops += 1;
        if self.cfg.power_cut_at_op == Some(op) && !st.powered_off {
            self.cut(st)?;
        }
        let time_up = self
            .cfg
            .fail_after
            .is_some_and(|d| self.start.elapsed() >= d);
        if st.failed || self.cfg.fail_at_op.is_some_and(|n| op >= n) || time_up {
            st.failed = true;
            st.counts.failstop_errors += 1;
            return Err(DeviceError::Failed {
                device: self.inner.name().to_string(),
            });
        }
        if st.powered_off {
            return Err(DeviceError::other(
                self.inner.name(),
                "device is powered off (power cut)",
            ));
        }
        if kind != Kind::Other && st.rng.chance(self.cfg.transient_error_rate) {
            st.counts.transient_errors += 1;
            return Err(DeviceError::io(
                self.inner.name(),
                std::io::Error::other(format!("transient error injected at op {op}")),
            ));
        }
        Ok(())
    }
}

fn insert_range(m: &mut BTreeMap<u64, u64>, mut s: u64, mut e: u64) {
    // Merge with every overlapping or touching range.
    let overlapping: Vec<(u64, u64)> = m
        .range(..=e)
        .filter(|(_, &re)| re >= s)
        .map(|(&a, &b)| (a, b))
        .collect();
    for (a, b) in overlapping {
        m.remove(&a);
        s = s.min(a);
        e = e.max(b);
    }
    m.insert(s, e);
}

fn remove_range(m: &mut BTreeMap<u64, u64>, s: u64, e: u64) {
    let overlapping: Vec<(u64, u64)> = m
        .range(..e)
        .filter(|(_, &re)| re > s)
        .map(|(&a, &b)| (a, b))
        .collect();
    for (a, b) in overlapping {
        m.remove(&a);
        if a < s {
            m.insert(a, s);
        }
        if b > e {
            m.insert(e, b);
        }
    }
}

fn first_overlap(m: &BTreeMap<u64, u64>, s: u64, e: u64) -> Option<(u64, u64)> {
    m.range(..e)
        .rev()
        .find(|(_, &re)| re > s)
        .map(|(&a, &b)| (a, b))
}

impl<D: BlockDevice> BlockDevice for Faulty<D> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let mut st = self.lock();
        self.gate(&mut st, Kind::Read)?;
        let end = offset.saturating_add(buf.len() as u64);
        if let Some((a, b)) = first_overlap(&st.latent, offset, end) {
            st.counts.latent_errors += 1;
            return Err(DeviceError::io(
                self.inner.name(),
                std::io::Error::other(format!("latent sector error in [{a}, {b})")),
            ));
        }
        self.inner.read_at(buf, offset)?;
        if !buf.is_empty() && st.rng.chance(self.cfg.bitrot_rate) {
            let bit = st.rng.below(buf.len() as u64 * 8);
            buf[(bit / 8) as usize] ^= 1 << (bit % 8);
            st.counts.bitrot_flips += 1;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let mut st = self.lock();
        self.gate(&mut st, Kind::Write)?;
        if self.cfg.track_unflushed {
            let mut old = vec![0u8; buf.len()];
            self.inner.read_at(&mut old, offset)?;
            self.inner.write_at(buf, offset)?;
            st.pending.push(Pending {
                offset,
                old,
                new: Some(buf.to_vec()),
            });
        } else {
            self.inner.write_at(buf, offset)?;
        }
        if self.cfg.heal_on_write {
            remove_range(&mut st.latent, offset, offset + buf.len() as u64);
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let mut st = self.lock();
        self.gate(&mut st, Kind::Other)?;
        self.inner.flush()?;
        st.pending.clear();
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        let mut st = self.lock();
        self.gate(&mut st, Kind::Other)?;
        if self.cfg.track_unflushed {
            crate::check_range(self.inner.name(), offset, len, self.inner.capacity())?;
            let n = usize::try_from(len)
                .map_err(|_| DeviceError::other(self.inner.name(), "discard too large"))?;
            let mut old = vec![0u8; n];
            self.inner.read_at(&mut old, offset)?;
            self.inner.discard(offset, len)?;
            st.pending.push(Pending {
                offset,
                old,
                new: None,
            });
        } else {
            self.inner.discard(offset, len)?;
        }
        Ok(())
    }

    fn keeps_data(&self) -> bool {
        self.inner.keeps_data()
    }
    fn backing_paths(&self) -> Vec<std::path::PathBuf> {
        self.inner.backing_paths()
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_split() {
        let mut m = BTreeMap::new();
        insert_range(&mut m, 10, 20);
        insert_range(&mut m, 15, 30);
        insert_range(&mut m, 40, 50);
        assert_eq!(
            m.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            vec![(10, 30), (40, 50)]
        );
        remove_range(&mut m, 12, 45);
        assert_eq!(
            m.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(),
            vec![(10, 12), (45, 50)]
        );
        assert_eq!(first_overlap(&m, 0, 11), Some((10, 12)));
        assert_eq!(first_overlap(&m, 12, 45), None);
    }
}
