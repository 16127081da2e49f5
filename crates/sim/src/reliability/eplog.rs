//! MTTDL of EPLOG's main array (`n = k + m` devices) plus its `m` log devices (docs/array.md,
//! "Failures and recovery"; EPLOG §3.2–3.4).
//!
//! Committed data lives in data stripes on the main array and tolerates m failed *main* devices;
//! the log devices do not matter to it. An update not yet committed lives in a log stripe: its new
//! data chunks on distinct main devices plus m log chunks on the log devices, so until the next
//! parity commit it tolerates m failures counted over main **and** log devices together (the same
//! holds for EPLOG PL's parity deltas: a stripe's current parity needs its log chunks). The log
//! devices thus *remove* reliability while updates are uncommitted, and add none. ecstack shortens
//! that window on any failure: a failed log device triggers a parity commit at once, and a rebuild
//! of a main device starts with a parity commit.
//!
//! State (a, b, d): a failed main devices, b failed log devices, d = 1 while uncommitted updates
//! exist ("dirty"). Loss when a > m, or when d = 1 and a + b > m.
//!
//! ```text
//!   (a,b,d) ──(n-a)λ──────▶ (a+1,b,d)   or LOSS if a+1 > m or (d and a+1+b > m);
//!                                        entering a = m: LOSS with probability p (URE)
//!   (a,b,d) ──(m-b)λ_log──▶ (a,b+1,d)   or LOSS if d and a+b+1 > m
//!   (a,b,d) ──repair──────▶ (a-1,b,d) / (a,b-1,d)   (sequential: main devices first)
//!   (a,b,0) ──1/clean─────▶ (a,b,1)     (updates arrive; only while a+b <= m: else writes fail)
//!   (a,b,1) ──1/dirty─────▶ (a,b,0)     (periodic parity commit, a+b = 0)
//!   (a,b,1) ──1/commit────▶ (a,b,0)     (commit forced by a failure, a+b > 0)
//! ```

use ecstack_base::Rng;

use super::array::{ArrayModel, Repair};
use super::chain::Chain;
use super::model::ReliabilityModel;
use super::montecarlo::{Events, Lifetime, MonteCarloModel, RepairTimes};
use super::params::{invalid, positive, ReliabilityError};

/// Largest m the chain is built for: 2(m+1)^2 states, solved densely.
pub const PARITY_MAX: usize = 16;

#[derive(Clone, Debug, serde::Serialize)]
pub struct EplogModel {
    /// The main array (k, m, device MTTF and MTTR, size, URE rate, repair policy).
    pub main: ArrayModel,
    /// MTTF of one log device (hours; EPLOG's log devices may be HDDs under SSDs).
    pub log_mttf_hours: f64,
    /// MTTR of one log device (hours).
    pub log_mttr_hours: f64,
    /// Mean time updates stay uncommitted between periodic parity commits (hours).
    pub dirty_hours: f64,
    /// Mean time from a parity commit to the next update (hours; small for a busy array).
    pub clean_hours: f64,
    /// Duration of a parity commit forced by a failure (hours).
    pub commit_hours: f64,
}

/// Index of state (a, b, d) among the valid ones.
struct States {
    m: usize,
    index: Vec<Option<usize>>,
}

impl States {
    fn new(m: usize, chain: &mut Chain) -> States {
        let mut index = vec![None; (m + 1) * (m + 1) * 2];
        for a in 0..=m {
            for b in 0..=m {
                for d in 0..2 {
                    if d == 0 || a + b <= m {
                        let id = chain.state(format!(
                            "{a} main + {b} log failed, {}",
                            if d == 1 { "uncommitted" } else { "committed" }
                        ));
                        index[(a * (m + 1) + b) * 2 + d] = Some(id);
                    }
                }
            }
        }
        States { m, index }
    }

    fn get(&self, a: usize, b: usize, d: usize) -> Option<usize> {
        if a > self.m || b > self.m {
            return None;
        }
        self.index[(a * (self.m + 1) + b) * 2 + d]
    }
}

impl EplogModel {
    pub fn validate(&self) -> Result<(), ReliabilityError> {
        self.main.validate()?;
        if self.main.m > PARITY_MAX {
            return Err(invalid(format!(
                "the EPLOG model handles m <= {PARITY_MAX} parity chunks (and as many log devices), got m = {}",
                self.main.m
            )));
        }
        positive("log device MTTF", "hours", self.log_mttf_hours, false)?;
        positive("log device MTTR", "hours", self.log_mttr_hours, false)?;
        positive("uncommitted time", "hours", self.dirty_hours, false)?;
        positive("committed time", "hours", self.clean_hours, false)?;
        positive("parity commit time", "hours", self.commit_hours, false)
    }

    /// Long-run fraction of time with uncommitted updates when nothing fails.
    pub fn dirty_fraction(&self) -> f64 {
        self.dirty_hours / (self.dirty_hours + self.clean_hours)
    }

    fn is_loss(&self, a: usize, b: usize, d: usize) -> bool {
        let m = self.main.m;
        a > m || (d == 1 && a + b > m)
    }

    /// Rate of leaving the dirty flag `d` with a main and b log devices failed (0: never).
    fn toggle_rate(&self, a: usize, b: usize, d: usize) -> f64 {
        match d {
            0 if a + b <= self.main.m => 1.0 / self.clean_hours,
            0 => 0.0,
            _ if a + b == 0 => 1.0 / self.dirty_hours,
            _ => 1.0 / self.commit_hours,
        }
    }
}

impl ReliabilityModel for EplogModel {
    /// The chain of the module doc (states (a, b, d)).
    fn chain(&self) -> Result<Chain, ReliabilityError> {
        self.validate()?;
        let (n, m) = (self.main.n(), self.main.m);
        let lambda = 1.0 / self.main.mttf_hours;
        let lambda_log = 1.0 / self.log_mttf_hours;
        let mu = 1.0 / self.main.mttr_hours;
        let mu_log = 1.0 / self.log_mttr_hours;
        let p = self.main.critical_read_loss_probability();
        let mut c = Chain::new();
        let st = States::new(m, &mut c);
        for a in 0..=m {
            for b in 0..=m {
                for d in 0..2 {
                    let Some(s) = st.get(a, b, d) else { continue };
                    // A main device fails.
                    let rate = (n - a) as f64 * lambda;
                    if self.is_loss(a + 1, b, d) {
                        c.to_loss(s, rate);
                    } else {
                        let to = st.get(a + 1, b, d).expect("valid state");
                        let p_here = if a + 1 == m { p } else { 0.0 };
                        c.edge(s, to, rate * (1.0 - p_here));
                        c.to_loss(s, rate * p_here);
                    }
                    // A log device fails.
                    if b < m {
                        let rate = (m - b) as f64 * lambda_log;
                        if self.is_loss(a, b + 1, d) {
                            c.to_loss(s, rate);
                        } else {
                            c.edge(s, st.get(a, b + 1, d).expect("valid state"), rate);
                        }
                    }
                    // Repairs.
                    match self.main.repair {
                        Repair::Sequential => {
                            if a > 0 {
                                c.edge(s, st.get(a - 1, b, d).expect("valid"), mu);
                            } else if b > 0 {
                                c.edge(s, st.get(a, b - 1, d).expect("valid"), mu_log);
                            }
                        }
                        Repair::Parallel => {
                            if a > 0 {
                                c.edge(s, st.get(a - 1, b, d).expect("valid"), a as f64 * mu);
                            }
                            if b > 0 {
                                c.edge(s, st.get(a, b - 1, d).expect("valid"), b as f64 * mu_log);
                            }
                        }
                    }
                    // Updates and parity commits.
                    if let Some(to) = st.get(a, b, 1 - d) {
                        c.edge(s, to, self.toggle_rate(a, b, d));
                    }
                }
            }
        }
        Ok(c)
    }
}

impl MonteCarloModel for EplogModel {
    fn check(&self) -> Result<(), ReliabilityError> {
        self.validate()
    }

    /// Monte-Carlo: n main and m log devices with their own exponential lifetimes, rebuilds by the
    /// repair policy (sequential: a failed main device first, then log devices, each in FIFO
    /// order; durations drawn by `times` around each device's MTTR), the dirty window as an
    /// alternating process whose clock is redrawn when a failure forces a commit, and a URE drawn
    /// bit by bit when a rebuild starts without redundancy.
    fn lifetime(&self, rng: &mut Rng, failures: &mut u64, times: RepairTimes) -> Lifetime {
        let (n, m) = (self.main.n(), self.main.m);
        let total = n + m;
        let is_log = |dev: usize| dev >= n;
        let mttf = |dev: usize| {
            if is_log(dev) {
                self.log_mttf_hours
            } else {
                self.main.mttf_hours
            }
        };
        let mttr = |dev: usize| {
            if is_log(dev) {
                self.log_mttr_hours
            } else {
                self.main.mttr_hours
            }
        };
        let bits_read = 8.0 * self.main.k as f64 * self.main.device_bytes;
        let mut fails_at: Vec<f64> = (0..total).map(|d| rng.exp(mttf(d))).collect();
        let mut repaired_at = vec![f64::INFINITY; total];
        let mut failed = vec![false; total];
        // Failure order, for FIFO rebuilds.
        let mut order: Vec<usize> = Vec::new();
        let mut rebuilding: Option<usize> = None;
        let (mut a, mut b) = (0usize, 0usize);
        let mut dirty = false;
        let mut toggle_at = rng.exp(self.clean_hours);
        let mut events = Events::default();
        let phase = if self.main.latent_per_hour > 0.0 {
            rng.next_f64() * self.main.scrub_hours
        } else {
            0.0
        };
        loop {
            events.tick()?;
            // Earliest of: a working device fails, a rebuild ends, the dirty flag flips.
            let mut t = toggle_at;
            let mut what: Option<(usize, bool)> = None;
            for dev in 0..total {
                if !failed[dev] && fails_at[dev] < t {
                    (t, what) = (fails_at[dev], Some((dev, true)));
                }
                if failed[dev] && repaired_at[dev] < t {
                    (t, what) = (repaired_at[dev], Some((dev, false)));
                }
            }
            let now = t;
            match what {
                None => dirty = !dirty,
                Some((dev, true)) => {
                    *failures += 1;
                    failed[dev] = true;
                    order.push(dev);
                    if is_log(dev) {
                        b += 1;
                    } else {
                        a += 1;
                    }
                    if a > m || (dirty && a + b > m) {
                        return Ok(now);
                    }
                    if !is_log(dev) && a == m && self.main.uber > 0.0 {
                        let first_error_bit = rng.exp(1.0 / self.main.uber);
                        if first_error_bit < bits_read {
                            return Ok(now);
                        }
                    }
                    if !is_log(dev) && a == m && self.main.draw_latent(rng, now, phase) {
                        return Ok(now);
                    }
                    if self.main.repair == Repair::Parallel {
                        repaired_at[dev] = now + times.draw(rng, mttr(dev));
                    }
                }
                Some((dev, false)) => {
                    failed[dev] = false;
                    repaired_at[dev] = f64::INFINITY;
                    order.retain(|&d| d != dev);
                    if is_log(dev) {
                        b -= 1;
                    } else {
                        a -= 1;
                    }
                    fails_at[dev] = now + rng.exp(mttf(dev));
                    if rebuilding == Some(dev) {
                        rebuilding = None;
                    }
                }
            }
            if self.main.repair == Repair::Sequential {
                // The rebuild target: the first failed main device, else the first failed log
                // device. A new main failure preempts a log rebuild (its remaining time is
                // memoryless, so restarting its clock later changes nothing).
                let target = order
                    .iter()
                    .copied()
                    .find(|&d| !is_log(d))
                    .or_else(|| order.first().copied());
                if target != rebuilding {
                    if let Some(old) = rebuilding {
                        repaired_at[old] = f64::INFINITY;
                    }
                    if let Some(new) = target {
                        repaired_at[new] = now + times.draw(rng, mttr(new));
                    }
                    rebuilding = target;
                }
            }
            // The dirty clock: its rate depends on the failures now (exponential, so redrawing
            // it at every event is exact).
            let rate = self.toggle_rate(a, b, dirty as usize);
            toggle_at = if rate > 0.0 {
                now + rng.exp(1.0 / rate)
            } else {
                f64::INFINITY
            };
        }
    }
}
