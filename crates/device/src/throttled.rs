//! `Throttled`: caps bandwidth and adds per-request latency (fixed or drawn from a distribution), in real
//! time, to make a fast device behave like a slow or heterogeneous one (RobuSTore's setting).
//!
//! Bandwidth is a shared pipe: each request occupies it for `len / bandwidth` seconds after the previous
//! request's transfer ends (so parallel requests queue behind each other), then the request's latency
//! (drawn per request, deterministic from the seed) is added on top. Both delays are `thread::sleep`s.
//! The total delay imposed is reported as `DeviceStats::modeled_ns`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{BlockDevice, DeviceStats, ModelStats, Result, SplitMix64};

/// Per-request latency distribution (nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LatencyDist {
    None,
    Fixed {
        ns: u64,
    },
    Uniform {
        min_ns: u64,
        max_ns: u64,
    },
    Exponential {
        mean_ns: u64,
    },
    /// Log-normal with the given median and shape `sigma` (heavy right tail: stragglers).
    LogNormal {
        median_ns: u64,
        sigma: f64,
    },
}

impl LatencyDist {
    /// Draw one latency.
    pub fn sample(&self, rng: &mut SplitMix64) -> u64 {
        match *self {
            LatencyDist::None => 0,
            LatencyDist::Fixed { ns } => ns,
            LatencyDist::Uniform { min_ns, max_ns } => {
                min_ns + rng.below(max_ns.saturating_sub(min_ns).saturating_add(1))
            }
            LatencyDist::Exponential { mean_ns } => rng.exp(mean_ns as f64) as u64,
            LatencyDist::LogNormal { median_ns, sigma } => {
                (median_ns as f64 * (sigma * rng.normal()).exp()) as u64
            }
        }
    }
}

/// What `Throttled` imposes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleConfig {
    /// Bytes per second for reads and writes (None: unlimited).
    pub bandwidth: Option<f64>,
    /// Added to every read and write.
    pub latency: LatencyDist,
    pub seed: u64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            bandwidth: None,
            latency: LatencyDist::None,
            seed: 0,
        }
    }
}

#[derive(Debug)]
struct State {
    busy_until: Instant,
    rng: SplitMix64,
    delayed_ns: u64,
}

/// Bandwidth/latency-capping wrapper.
#[derive(Debug)]
pub struct Throttled<D> {
    inner: D,
    cfg: ThrottleConfig,
    state: Mutex<State>,
}

impl<D: BlockDevice> Throttled<D> {
    pub fn new(inner: D, cfg: ThrottleConfig) -> Self {
        let state = State {
            busy_until: Instant::now(),
            rng: SplitMix64::new(cfg.seed),
            delayed_ns: 0,
        };
        Throttled {
            inner,
            cfg,
            state: Mutex::new(state),
        }
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    pub fn config(&self) -> &ThrottleConfig {
        &self.cfg
    }

    fn delay(&self, bytes: u64) {
        let now = Instant::now();
        let wake = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let mut t = now;
            if let Some(bw) = self.cfg.bandwidth.filter(|b| *b > 0.0) {
                let start = st.busy_until.max(now);
                st.busy_until = start + Duration::from_secs_f64(bytes as f64 / bw);
                t = st.busy_until;
            }
            let lat = self.cfg.latency.sample(&mut st.rng);
            let wake = t + Duration::from_nanos(lat);
            st.delayed_ns += wake.duration_since(now).as_nanos() as u64;
            wake
        };
        let now = Instant::now();
        if wake > now {
            std::thread::sleep(wake - now);
        }
    }
}

impl<D: BlockDevice> BlockDevice for Throttled<D> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.inner.read_at(buf, offset)?;
        self.delay(buf.len() as u64);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.inner.write_at(buf, offset)?;
        self.delay(buf.len() as u64);
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.discard(offset, len)
    }
    fn stats(&self) -> DeviceStats {
        let mut s = self.inner.stats();
        s.modeled_ns += self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .delayed_ns;
        s
    }
    fn model_stats(&self) -> Option<ModelStats> {
        self.inner.model_stats()
    }
}
