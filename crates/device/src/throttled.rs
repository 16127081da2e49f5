//! `Throttled`: caps bandwidth and adds per-request latency (fixed or drawn from a distribution), in real
//! time, to make a fast device behave like a slow or heterogeneous one (RobuSTore's setting), or gives
//! each request the service time of a measured device class ([`ServiceProfile`], e.g. the SSDs and HDDs
//! of EPLOG's testbed, Table 1).
//!
//! The device is one server: each request occupies it for its service time (`len / bandwidth`, or the
//! profile's time for the request's kind) after the previous request's service ends, so parallel
//! requests queue behind each other; then the request's latency (drawn per request, deterministic from
//! the seed) is added on top. Times count from the request's arrival, and a request returns when both
//! the inner device has finished and the modeled time has passed (a `thread::sleep`, with the thread's
//! timer slack lowered to 1 µs so short sleeps are not stretched by the kernel's default 50 µs, and
//! shortened by the measured mean wake-up lateness, so requests end at their modeled time on average).
//! The total delay imposed is reported as `DeviceStats::modeled_ns`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{Batch, BlockDevice, DeviceStats, IoRequest, Result, SplitMix64};

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

/// Service times of a device class, from its throughput under 4 KiB requests issued one at a time
/// (the way EPLOG's Table 1 and `fio --bs=4k --iodepth=1` measure devices), plus its streaming rate.
///
/// A request of `len` bytes takes `setup + len / stream`, where `setup` is the 4 KiB time of its kind
/// (read or write, sequential or random) minus the 4 KiB transfer: so a 4 KiB request takes exactly
/// the measured time, and long requests approach the streaming rate. A request is sequential when it
/// starts within `seq_window` bytes of where one of the last `reorder` requests ended (EPLOG §5.1
/// calls a write random when it starts at least 64 KiB from the previous one's end).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServiceProfile {
    /// Bytes per second under 4 KiB requests, one at a time.
    pub seq_read: f64,
    pub rand_read: f64,
    pub seq_write: f64,
    pub rand_write: f64,
    /// Bytes per second of long transfers.
    pub stream: f64,
    pub seq_window: u64,
    /// A request is sequential when it starts near where any of the last `reorder` requests ended
    /// (1: the previous one). An HDD with a 32-deep command queue (NCQ) serves appends that
    /// concurrent writers deliver slightly out of order without seeking between them; an SSD's
    /// fast sequential reads come from read-ahead of one stream, so it keeps 1.
    pub reorder: usize,
    /// Of those, only the previous request and the ones still queued or in service when this one
    /// arrives count (a disk reorders the commands it holds, not ones it finished while its head
    /// went elsewhere); off in the presets.
    pub queued_only: bool,
}

/// 4 KiB, the request size the profiles are measured with.
const PROFILE_REQ: f64 = 4096.0;

impl ServiceProfile {
    /// Named profiles: `eplog-ssd` and `eplog-hdd` are the Plextor SSD and Seagate HDD of EPLOG's
    /// testbed (Table 1, 4 KiB direct I/O, MB/s taken as 10^6 bytes/s); their streaming rates, which
    /// Table 1 does not give, are typical of SATA SSDs (500 MB/s) and 7200 rpm HDDs (150 MB/s).
    pub fn preset(name: &str) -> Option<ServiceProfile> {
        const MB: f64 = 1e6;
        match name {
            "eplog-ssd" => Some(ServiceProfile {
                seq_read: 99.23 * MB,
                rand_read: 32.8 * MB,
                seq_write: 93.4 * MB,
                rand_write: 93.1 * MB,
                stream: 500.0 * MB,
                seq_window: 64 << 10,
                reorder: 1,
                queued_only: false,
            }),
            "eplog-hdd" => Some(ServiceProfile {
                seq_read: 94.2 * MB,
                rand_read: 0.6 * MB,
                seq_write: 91.6 * MB,
                rand_write: 1.1 * MB,
                stream: 150.0 * MB,
                seq_window: 64 << 10,
                reorder: 32,
                queued_only: false,
            }),
            _ => None,
        }
    }

    /// The preset names, for error messages and `--help`.
    pub const PRESETS: &'static [&'static str] = &["eplog-ssd", "eplog-hdd"];

    /// Service time in nanoseconds of one request.
    pub fn service_ns(&self, write: bool, sequential: bool, len: u64) -> u64 {
        let small = match (write, sequential) {
            (false, true) => self.seq_read,
            (false, false) => self.rand_read,
            (true, true) => self.seq_write,
            (true, false) => self.rand_write,
        };
        let setup = (PROFILE_REQ / small - PROFILE_REQ / self.stream).max(0.0);
        ((setup + len as f64 / self.stream) * 1e9) as u64
    }
}

/// What `Throttled` imposes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleConfig {
    /// Bytes per second for reads and writes (None: unlimited). Ignored when `profile` is set.
    pub bandwidth: Option<f64>,
    /// Service times by request kind (replaces `bandwidth`).
    pub profile: Option<ServiceProfile>,
    /// Added to every read and write.
    pub latency: LatencyDist,
    pub seed: u64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            bandwidth: None,
            profile: None,
            latency: LatencyDist::None,
            seed: 0,
        }
    }
}

#[derive(Debug)]
struct State {
    busy_until: Instant,
    /// Where the most recent requests ended (for the profile's sequential test) and when their
    /// modeled service ends, newest last.
    recent_ends: std::collections::VecDeque<(u64, Instant)>,
    rng: SplitMix64,
    delayed_ns: u64,
    /// Service time charged so far (queueing and latency excluded): depends only on the requests.
    service_ns: u64,
}

/// Running mean (1/16 weight) of how late `thread::sleep` wakes, in nanoseconds.
static OVERSHOOT_NS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static SLACK_SET: Cell<bool> = const { Cell::new(false) };
}

/// Lower this thread's timer slack to 1 µs (once per thread): Linux stretches sleeps by up to 50 µs
/// by default, which would swamp modeled service times of tens of microseconds.
fn fine_timer_slack() {
    SLACK_SET.with(|s| {
        if !s.get() {
            s.set(true);
            #[cfg(target_os = "linux")]
            // SAFETY: PR_SET_TIMERSLACK takes an integer argument and changes only this thread's
            // timer slack.
            unsafe {
                libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
            }
        }
    });
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
            recent_ends: std::collections::VecDeque::new(),
            rng: SplitMix64::new(cfg.seed),
            delayed_ns: 0,
            service_ns: 0,
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

    /// Service time charged to the requests so far, without queueing or latency: a function of
    /// the requests alone (their kinds, sizes and offsets), whatever the machine's load.
    pub fn service_charged(&self) -> Duration {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Duration::from_nanos(st.service_ns)
    }

    /// Modeled completion of a request that arrived at `arrival`: queue behind the previous
    /// requests for the service time, then add the latency. Records the delay imposed.
    fn schedule(&self, arrival: Instant, write: bool, offset: u64, len: u64) -> Instant {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let service = if let Some(p) = &self.cfg.profile {
            let last = st.recent_ends.len().saturating_sub(1);
            let seq = st.recent_ends.iter().enumerate().any(|(i, &(e, done))| {
                (!p.queued_only || i == last || done > arrival) && offset.abs_diff(e) < p.seq_window
            });
            Some(Duration::from_nanos(p.service_ns(write, seq, len)))
        } else {
            self.cfg
                .bandwidth
                .filter(|b| *b > 0.0)
                .map(|bw| Duration::try_from_secs_f64(len as f64 / bw).unwrap_or(DELAY_MAX))
        };
        let mut t = arrival;
        if let Some(service) = service {
            st.service_ns = st
                .service_ns
                .saturating_add(u64::try_from(service.as_nanos()).unwrap_or(u64::MAX));
            let start = st.busy_until.max(arrival);
            st.busy_until = later(start, service);
            t = st.busy_until;
        }
        if let Some(p) = &self.cfg.profile {
            while st.recent_ends.len() >= p.reorder.max(1) {
                st.recent_ends.pop_front();
            }
            let done = st.busy_until;
            st.recent_ends.push_back((offset + len, done));
        }
        let lat = self.cfg.latency.sample(&mut st.rng);
        let wake = later(t, Duration::from_nanos(lat));
        let delay = u64::try_from(wake.duration_since(arrival).as_nanos()).unwrap_or(u64::MAX);
        st.delayed_ns = st.delayed_ns.saturating_add(delay);
        wake
    }
}

/// Longest delay one request may be given (a configuration such as a bandwidth of 10^-300
/// bytes/s would otherwise ask for an unrepresentable instant): a year.
const DELAY_MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// `t + d`, with `d` capped at [`DELAY_MAX`].
fn later(t: Instant, d: Duration) -> Instant {
    let d = d.min(DELAY_MAX);
    t.checked_add(d).unwrap_or(t)
}

/// Sleep until `wake`. The kernel wakes a sleeper some tens of microseconds late on a VM; the sleep
/// is shortened by the running mean of that lateness so that sleepers wake at `wake` on average.
pub fn sleep_until(wake: Instant) {
    let now = Instant::now();
    if wake <= now {
        return;
    }
    fine_timer_slack();
    let remaining = wake - now;
    let est = Duration::from_nanos(OVERSHOOT_NS.load(Relaxed));
    if remaining <= est {
        return;
    }
    let asked = remaining - est;
    std::thread::sleep(asked);
    let late = now.elapsed().saturating_sub(asked).as_nanos() as u64;
    let old = OVERSHOOT_NS.load(Relaxed);
    OVERSHOOT_NS.store(old - old / 16 + late.min(1_000_000) / 16, Relaxed);
}

impl<D: BlockDevice> BlockDevice for Throttled<D> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let wake = self.schedule(Instant::now(), false, offset, buf.len() as u64);
        self.inner.read_at(buf, offset)?;
        sleep_until(wake);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let wake = self.schedule(Instant::now(), true, offset, buf.len() as u64);
        self.inner.write_at(buf, offset)?;
        sleep_until(wake);
        Ok(())
    }
    /// The batch's work is done by the inner device (so a file under `Throttled` still goes
    /// through io_uring), and the batch completes at the latest modeled completion of these
    /// requests: one sleep for the whole batch, over every paced device in it, instead of a thread
    /// per device sleeping. Every request arrives now and queues behind the earlier ones.
    fn submit<'a>(&'a self, reqs: Vec<IoRequest<'a>>, batch: &mut Batch<'a>) {
        let arrival = Instant::now();
        for r in &reqs {
            let wake = self.schedule(arrival, r.is_write(), r.offset, r.len() as u64);
            batch.complete_at(wake);
        }
        self.inner.submit(reqs, batch);
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.discard(offset, len)
    }
    fn keeps_data(&self) -> bool {
        self.inner.keeps_data()
    }
    fn backing_paths(&self) -> Vec<std::path::PathBuf> {
        self.inner.backing_paths()
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    /// Configurations built in code (not through a spec, which refuses them) with absurd values:
    /// the schedule neither panics nor wraps; a delay is capped at `DELAY_MAX`.
    #[test]
    fn hostile_configs_do_not_panic_the_schedule() {
        let profile = ServiceProfile {
            stream: 0.0,
            ..ServiceProfile::preset("eplog-hdd").unwrap()
        };
        let cfgs = [
            ThrottleConfig {
                bandwidth: Some(1e-300),
                latency: LatencyDist::Fixed { ns: u64::MAX },
                ..ThrottleConfig::default()
            },
            ThrottleConfig {
                bandwidth: Some(f64::NAN),
                latency: LatencyDist::LogNormal {
                    median_ns: u64::MAX,
                    sigma: 1e300,
                },
                ..ThrottleConfig::default()
            },
            ThrottleConfig {
                profile: Some(profile),
                latency: LatencyDist::Uniform {
                    min_ns: u64::MAX,
                    max_ns: 0,
                },
                ..ThrottleConfig::default()
            },
        ];
        for cfg in cfgs {
            let t = Throttled::new(MemDevice::new(1 << 20).unwrap(), cfg);
            let now = Instant::now();
            for i in 1..=3 {
                // Requests queue: the i-th ends at most i service times plus one latency later.
                let wake = t.schedule(now, true, 0, 1 << 20);
                assert!(wake <= now + DELAY_MAX * (i + 1), "{cfg:?}");
            }
            assert!(t.stats().modeled_ns > 0);
        }
    }
}
