//! One run: build an array, pre-write the working set, replay a trace's writes with some clients,
//! and measure requests/s, device traffic and GC.

use std::fmt;
use std::path::Path;
use std::time::Instant;

use ecstack_array::{Array, SchemeKind};
use serde::Serialize;

use super::config::Setting;
use super::rig::{build, gc_per_ssd, prewrite, Backing};
use super::workload::{Trace, TraceName};
use crate::{LabError, Result};

/// What replays: a scheme as configured, or one of eplog's ablations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The scheme with the configured stripe buffer (eplog) and no device buffers.
    Plain(SchemeKind),
    /// eplog with device buffers of this many chunks per device (Exps 1–2).
    EplogDeviceBuffer(usize),
    /// eplog with its stripe buffer off (Exp 4's multi-client runs).
    EplogNoStripeBuffer,
}

impl Variant {
    pub const MD: Variant = Variant::Plain(SchemeKind::Md);
    pub const PL: Variant = Variant::Plain(SchemeKind::Pl);
    pub const EPLOG: Variant = Variant::Plain(SchemeKind::Eplog);

    pub fn scheme(self) -> SchemeKind {
        match self {
            Variant::Plain(s) => s,
            Variant::EplogDeviceBuffer(_) | Variant::EplogNoStripeBuffer => SchemeKind::Eplog,
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Variant::Plain(s) => write!(f, "{s}"),
            Variant::EplogDeviceBuffer(chunks) => write!(f, "eplog+buf{chunks}"),
            Variant::EplogNoStripeBuffer => f.write_str("eplog-nosb"),
        }
    }
}

/// When parity commit runs during a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Commit {
    /// Never (logs keep growing).
    Nil,
    /// Once, at the end of the replay.
    All,
    /// Every this many writes, and at the end.
    Every(u64),
}

impl fmt::Display for Commit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Commit::Nil => f.write_str("nil"),
            Commit::All => f.write_str("all"),
            Commit::Every(n) => write!(f, "{}K", n / 1000),
        }
    }
}

macro_rules! serialize_as_display {
    ($($t:ty),*) => {$(
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                crate::serialize_display(self, s)
            }
        }
    )*};
}
serialize_as_display!(Variant, Commit, Setting);

/// Everything that names a run: which rows of a report are compared with which.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RunKey {
    pub trace: TraceName,
    pub setting: Setting,
    pub variant: Variant,
    pub commit: Commit,
    pub degraded: bool,
    pub clients: usize,
}

impl RunKey {
    /// A run without parity commit and without failures: what "as fast as possible" measures.
    pub fn plain(trace: TraceName, setting: Setting, variant: Variant, clients: usize) -> RunKey {
        RunKey {
            trace,
            setting,
            variant,
            commit: Commit::Nil,
            degraded: false,
            clients,
        }
    }

    /// Exp 4's main case: FIN at (6+2), no commit, normal mode.
    pub fn fin(variant: Variant, clients: usize) -> RunKey {
        RunKey::plain(TraceName::Fin, Setting::SIX_TWO, variant, clients)
    }
}

/// The measurements of one run.
#[derive(Serialize, Clone, Debug)]
pub struct RunRow {
    /// Where it ran: simulated, O_DIRECT files, EPLOG testbed emulated.
    pub testbed: Backing,
    pub trace: TraceName,
    pub setting: Setting,
    pub scheme: Variant,
    /// Concurrent replay clients.
    pub clients: usize,
    /// eplog stripe buffer: write requests per batch (None when off or not eplog).
    pub batch: Option<f64>,
    /// eplog stripe buffer: mean time to write one batch (µs).
    pub batch_us: Option<f64>,
    /// Device requests (main reads + main writes + log writes) per replayed write.
    pub dev_ops_per_req: f64,
    /// CPU time of the whole process (user + system) per wall-clock second of the replay.
    pub cpu_load: f64,
    pub commit: Commit,
    pub degraded: bool,
    pub requests: u64,
    pub seconds: f64,
    pub requests_per_s: f64,
    pub ssd_write_bytes: u64,
    pub ssd_read_bytes: u64,
    pub log_write_bytes: u64,
    pub gc_per_ssd: f64,
    pub commit_seconds: f64,
    pub commits: u64,
    pub ssd_blocks: u32,
}

impl RunRow {
    pub fn key(&self) -> RunKey {
        RunKey {
            trace: self.trace,
            setting: self.setting,
            variant: self.scheme,
            commit: self.commit,
            degraded: self.degraded,
            clients: self.clients,
        }
    }
}

/// The row of `rows` named by `key`.
pub fn find(rows: &[RunRow], key: RunKey) -> Option<&RunRow> {
    rows.iter().find(|r| r.key() == key)
}

/// One run to do: a [`RunKey`] on a testbed, with the eplog stripe buffer's batches in flight.
#[derive(Clone, Copy, Debug)]
pub struct RunSpec {
    pub key: RunKey,
    pub backing: Backing,
    pub stripe_buffer: usize,
    /// Per-chunk checksums on ([`ecstack_array::OpenOptions::checksums`]).
    pub checksums: bool,
}

/// User + system CPU seconds of this process so far (Linux: /proc/self/stat; 0 elsewhere).
fn process_cpu_seconds() -> f64 {
    let Ok(st) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = st.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the file: 12 and 13 after the name and state.
    (ticks(11) + ticks(12)) / 100.0
}

/// Replay the trace's writes with `clients` threads; client `c` issues requests c, c+N, c+2N, …
/// in order, each waiting for the previous one.
pub fn replay(a: &Array, t: &Trace, clients: usize, fill: u8) -> Result<()> {
    let buf: Vec<u8> = (0..t.max_len())
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(fill))
        .collect();
    let client = |c: usize| -> Result<()> {
        for &(off, len) in t.reqs.iter().skip(c).step_by(clients.max(1)) {
            a.write(&buf[..len as usize], off)?;
        }
        Ok(())
    };
    if clients <= 1 {
        return client(0);
    }
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..clients).map(|c| sc.spawn(move || client(c))).collect();
        hs.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| LabError::Run("a replay client panicked".into()))?
        })
    })
}

/// Build, pre-write, replay and measure one run.
pub fn run(t: &Trace, spec: RunSpec, dir: &Path) -> Result<RunRow> {
    let key = spec.key;
    let rig = build(t, key.variant.scheme(), key.setting, spec.backing, dir)?;
    let a = &rig.array;
    a.set_checksums(spec.checksums);
    prewrite(a, t.wss)?;
    let device_buffer = match key.variant {
        Variant::EplogDeviceBuffer(chunks) => chunks,
        _ => 0,
    };
    a.set_device_buffer(device_buffer)?;
    a.set_stripe_buffer(match key.variant {
        Variant::EplogNoStripeBuffer => 0,
        _ => spec.stripe_buffer,
    });
    a.reset_stats();
    let gc0 = gc_per_ssd(a);
    if let Commit::Every(writes) = key.commit {
        a.set_commit_every(writes);
    }
    let start = Instant::now();
    let cpu0 = process_cpu_seconds();
    replay(a, t, key.clients, 3)?;
    if key.degraded {
        a.fail_device(0)?;
        a.fail_device(1)?;
    }
    if key.commit != Commit::Nil {
        a.commit()?;
    } else if device_buffer > 0 {
        a.sync()?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - cpu0;
    Ok(measure(
        t,
        spec,
        &rig.array,
        seconds,
        cpu,
        gc0,
        rig.ssd_blocks,
    ))
}

fn measure(
    t: &Trace,
    spec: RunSpec,
    a: &Array,
    seconds: f64,
    cpu: f64,
    gc0: f64,
    ssd_blocks: u32,
) -> RunRow {
    let key = spec.key;
    let st = a.status();
    let requests = t.reqs.len() as u64;
    let dev_ops = st.main.io.read_ops + st.main.io.write_ops + st.log.io.write_ops;
    RunRow {
        testbed: spec.backing,
        trace: key.trace,
        setting: key.setting,
        scheme: key.variant,
        clients: key.clients,
        cpu_load: cpu / seconds.max(1e-9),
        dev_ops_per_req: dev_ops as f64 / requests.max(1) as f64,
        batch: st
            .stripe_buffer
            .map(|b| b.requests as f64 / b.batches.max(1) as f64),
        batch_us: st
            .stripe_buffer
            .map(|b| b.write_seconds * 1e6 / b.batches.max(1) as f64),
        commit: key.commit,
        degraded: key.degraded,
        requests,
        seconds,
        requests_per_s: requests as f64 / seconds.max(1e-9),
        ssd_write_bytes: st.main.io.write_bytes,
        ssd_read_bytes: st.main.io.read_bytes,
        log_write_bytes: st.log.io.write_bytes,
        gc_per_ssd: gc_per_ssd(a) - gc0,
        commit_seconds: st.commits.seconds,
        commits: st.commits.commits,
        ssd_blocks,
    }
}
