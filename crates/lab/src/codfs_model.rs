//! `ecstack experiment codfs --exp model`: CodFS's throughput model (thesis §5.1) against the real
//! cluster on an emulated network ([`crate::codfs_netns`]):
//!
//!   T_write = M·B_in / (1 + (n−1)/k),   T_read = M·B_out / (1 + (k−1)/k)
//!
//! with M OSDs whose links are limited to B in each direction. For each M and segment size, a fresh
//! cluster runs with every daemon in its own network namespace (`ip netns exec`, `--addr` its
//! namespace address, mTLS); `clients` clients, each on its own host (a thread moved into a client
//! namespace), put `bytes_per_client` bytes at once, then get them back (every byte compared with a
//! regeneration from the seed). Then one OSD is killed (SIGKILL) and the clients read again through
//! degraded reads; a spare OSD joins, the dead one is declared out and recovery rebuilds its chunks:
//! degraded read and recovery throughput are reported beside the model's ratios (the model has no
//! formula for them).
//!
//! Aggregate throughput is the clients' bytes over the time from a barrier (every client connected
//! and its data generated) to the last client's end. With [`ModelConfig::stream_secs`] the clients
//! instead stream for a fixed time, as the thesis's clients "transfer streams of segments
//! simultaneously" (§5.1): each puts one file of its bytes repeated until told to stop, then reads that
//! file over and over as one read (every byte compared), and throughput is the rate of payload the
//! clients moved (put: segment bytes sent to their primaries, less those of attempts that failed;
//! get: bytes as they arrive) between the end of a warm-up (a quarter of the time) and the stop,
//! over that window — every client is active throughout it, so there is no tail. A put's rate of
//! bytes acknowledged durable over the window is reported beside it, and at the end of a put phase
//! every byte sent must have been acknowledged (or belong to a failed attempt).

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ecstack_base::Rng;
use ecstack_client::{Client, ClientError, ClientOptions, FailedAttempts, ReadPath};
use ecstack_mds_proto::OsdState;
use ecstack_rpc::{init_cluster, ClusterConfig, InitOptions, Security};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::codfs_netns::{self, Host, LinkBytes, LinkProbe, Tbf, TbfCounters, Testbed};
use crate::plot::Lines;
use crate::table::write_csv;
use crate::{LabError, Result};

/// Port of the MDS on its host.
const MDS_PORT: u16 = 7100;
/// How long the OSDs get to register, and recovery to finish.
const READY_SECS_MAX: u64 = 60;
/// Seconds of the bare TCP stream that measures a link's effective bandwidth, each way.
const GOODPUT_SECS: f64 = 3.0;
/// [`ModelConfig::tcp_cc`]'s default.
pub const DEFAULT_TCP_CC: &str = "cubic";
const RECOVERY_SECS_MAX: u64 = 900;
/// The shortest stream: its warm-up must outlast a window of segments in flight.
const STREAM_SECS_MIN: f64 = 8.0;

#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub exe: PathBuf,
    /// Cluster directories (one per run); `None`: a temporary directory, removed at the end.
    pub dir: Option<PathBuf>,
    /// The values of M (OSDs) to run.
    pub osds: Vec<usize>,
    pub segment_bytes: Vec<u64>,
    /// The codes to run, each at every (M, segment size): `rs-vand`, `rdp`, … (the seed's §5.1
    /// runs RDP (6,4) beside RS).
    pub codes: Vec<String>,
    pub k: u32,
    pub m: u32,
    /// B: each OSD's link in each direction, Mbit/s (tc tbf).
    pub rate_mbit: f64,
    pub clients: usize,
    pub bytes_per_client: u64,
    /// Each client's window, in segments' bytes in transit (`ClientOptions::window_segments_max`).
    pub window_segments: usize,
    /// Measure degraded reads and recovery too.
    pub failures: bool,
    /// Stream for this many seconds per phase and measure after a warm-up of a quarter of it
    /// (`None`: each client moves `bytes_per_client` once; the whole phase is measured).
    pub stream_secs: Option<f64>,
    pub heartbeat_ms: u64,
    pub down_after_ms: u64,
    pub seed: u64,
    /// TCP congestion control of every emulated host (`None`: the machine's default). CUBIC by
    /// default: Linux's stock choice, and the one the results in docs/benchmarks.md name.
    pub tcp_cc: Option<String>,
}

impl ModelConfig {
    pub fn new(exe: PathBuf) -> ModelConfig {
        ModelConfig {
            exe,
            dir: None,
            osds: vec![6, 8, 10],
            segment_bytes: vec![16 << 20],
            codes: vec!["rs-vand".into()],
            k: 4,
            m: 2,
            rate_mbit: 100.0,
            clients: 10,
            bytes_per_client: 64 << 20,
            window_segments: ClientOptions::default().window_segments_max,
            failures: true,
            stream_secs: None,
            heartbeat_ms: 500,
            down_after_ms: 10_000,
            seed: 1,
            tcp_cc: Some(DEFAULT_TCP_CC.to_owned()),
        }
    }

    pub fn n(&self) -> u32 {
        self.k + self.m
    }

    pub fn validate(&self) -> Result<()> {
        let cfg = |field, msg: String| Err(LabError::Config { field, msg });
        if self.osds.is_empty() || self.segment_bytes.is_empty() {
            return cfg("osds", "at least one M and one segment size".into());
        }
        if self.codes.is_empty() {
            return cfg("code", "at least one code".into());
        }
        for c in &self.codes {
            let kind = ecstack_codes::CodeKind::parse(c).map_err(|e| LabError::Config {
                field: "code",
                msg: e.to_string(),
            })?;
            ecstack_codes::new_code(kind, self.k as usize, self.m as usize).map_err(|e| {
                LabError::Config {
                    field: "code",
                    msg: format!("{c} with k = {} and m = {}: {e}", self.k, self.m),
                }
            })?;
        }
        if let Some(&m) = self.osds.iter().find(|&&m| m < self.n() as usize) {
            return cfg(
                "osds",
                format!(
                    "M = {m} is fewer than n = k + m = {}: every chunk of a segment needs its own OSD",
                    self.n()
                ),
            );
        }
        if self.window_segments == 0 {
            return cfg("window", "at least one segment in flight".into());
        }
        if self.clients == 0 || self.bytes_per_client == 0 {
            return cfg(
                "clients",
                "at least one client with at least one byte".into(),
            );
        }
        if let Some(t) = self.stream_secs {
            if !(t.is_finite() && t >= STREAM_SECS_MIN) {
                return cfg(
                    "stream",
                    format!("{t} s: at least {STREAM_SECS_MIN} s (a quarter of it is warm-up)"),
                );
            }
        }
        if !(self.rate_mbit.is_finite() && self.rate_mbit > 0.0) {
            return cfg("rate-mbit", format!("{}: must be positive", self.rate_mbit));
        }
        if let Some(cc) = &self.tcp_cc {
            if cc.is_empty() || !cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return cfg(
                    "tcp-cc",
                    format!("{cc:?}: a congestion control's name, such as cubic or bbr"),
                );
            }
        }
        if self.heartbeat_ms == 0 || self.down_after_ms <= self.heartbeat_ms {
            return cfg(
                "down-after-ms",
                "must be more than the heartbeat interval".into(),
            );
        }
        Ok(())
    }

    /// B in MB/s (10^6 bytes).
    pub fn b_mb_per_sec(&self) -> f64 {
        self.rate_mbit / 8.0
    }

    /// The model's aggregate write and read throughput for M OSDs, MB/s, with B = the tc rate.
    pub fn model(&self, osds: usize) -> (f64, f64) {
        let b = self.b_mb_per_sec();
        self.model_with(osds, b, b)
    }

    /// The model with B_in and B_out given (MB/s), e.g. the links' measured effective bandwidth.
    pub fn model_with(&self, osds: usize, b_in: f64, b_out: f64) -> (f64, f64) {
        let (n, k) = (self.n() as f64, self.k as f64);
        let m = osds as f64;
        (
            m * b_in / (1.0 + (n - 1.0) / k),
            m * b_out / (1.0 + (k - 1.0) / k),
        )
    }
}

/// One (M, segment size) run.
#[derive(Debug, Clone, Serialize)]
pub struct ModelRow {
    /// The code family (`rs-vand`, `rdp`, …).
    pub code: String,
    pub osds: usize,
    pub segment_bytes: u64,
    pub k: u32,
    pub m: u32,
    pub rate_mbit: f64,
    pub clients: usize,
    pub bytes: u64,
    /// The TCP congestion control the emulated hosts ran (read back from one of them).
    pub tcp_cc: String,
    /// Why that is not the one asked for (`--tcp-cc`), when it is not: the kernel refused to let
    /// the namespaces pick it, so they ran the machine's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_cc_note: Option<String>,
    /// An OSD link's measured effective bandwidth (a bare TCP stream's payload through its tbf), MB/s:
    /// inbound and outbound. The thesis took B from such a measurement (§5.1).
    pub goodput_in_mb_per_sec: f64,
    pub goodput_out_mb_per_sec: f64,
    pub write_mb_per_sec: f64,
    /// The model with B = the tc rate, and the ratio to it (the primary figure).
    pub write_model_mb_per_sec: f64,
    pub write_ratio: f64,
    /// The model with B = the measured effective bandwidth, as the thesis computed it, and the ratio.
    pub write_model_eff_mb_per_sec: f64,
    pub write_ratio_eff: f64,
    /// Inbound bytes of the OSDs' links during the write over B × its time: mean and busiest OSD.
    pub write_link_mean: f64,
    pub write_link_max: f64,
    /// The write phase's seconds, those until the first client finished, and the links' mean busy
    /// fraction in that part (the tail after it is where the rest of the phase is lost).
    pub write_secs: f64,
    pub write_all_active_secs: f64,
    pub write_all_active_link_mean: f64,
    /// Packets an OSD link's tbf dropped per second, inbound, during the write (mean over links).
    pub write_drops_per_link_sec: f64,
    /// Streaming: the rate of bytes acknowledged durable over the window, beside `write_mb_per_sec`
    /// (bytes sent to the primaries): a staircase of whole segments.
    pub write_acked_mb_per_sec: Option<f64>,
    /// The model's bytes per link byte over the whole phase (warm-up and tail included): bytes
    /// acknowledged (read: received) × (1 + (n−1)/k) (read: 1 + (k−1)/k) over the bytes the OSD
    /// links' tbfs passed in the charged direction. Free of where a window's ends fall.
    pub write_phase_payload_per_link_byte: f64,
    pub read_phase_payload_per_link_byte: f64,
    /// A check of the ratio free of the clients' counters: the links' use over the window (their
    /// mean) × the whole phase's payload per link byte — the window's link bytes carrying
    /// payload as the phase's did on average.
    pub write_ratio_links: f64,
    pub read_ratio_links: f64,
    pub read_mb_per_sec: f64,
    pub read_model_mb_per_sec: f64,
    pub read_ratio: f64,
    pub read_model_eff_mb_per_sec: f64,
    pub read_ratio_eff: f64,
    /// Outbound bytes of the OSDs' links during the read over B × its time: mean and busiest OSD.
    pub read_link_mean: f64,
    pub read_link_max: f64,
    pub read_secs: f64,
    pub read_all_active_secs: f64,
    pub read_all_active_link_mean: f64,
    /// The same outbound during the read.
    pub read_drops_per_link_sec: f64,
    pub degraded_read_mb_per_sec: Option<f64>,
    pub recovery_mb_per_sec: Option<f64>,
    pub recovery_secs: Option<f64>,
    pub recovered_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelReport {
    pub rate_mbit: f64,
    pub k: u32,
    pub m: u32,
    pub clients: usize,
    pub bytes_per_client: u64,
    pub window_segments: usize,
    /// Streams of this many seconds per phase, measured after a quarter of it; `None`: fixed bytes.
    pub stream_secs: Option<f64>,
    pub rows: Vec<ModelRow>,
    /// Per run and phase, the OSDs' links over time (written as CSV beside the report).
    #[serde(skip)]
    pub timelines: Vec<LinkTimeline>,
}

/// The OSDs' links during one phase, sampled: the direction the model charges (inbound for
/// writes, outbound for reads), MB/s per OSD over each sampling interval.
#[derive(Debug, Clone)]
pub struct LinkTimeline {
    /// `links-m10-s16-write.csv`
    pub file: String,
    pub osds: usize,
    /// (end of the interval, seconds since the phase started; MB/s of each OSD)
    pub samples: Vec<(f64, Vec<f64>)>,
}

impl LinkTimeline {
    fn csv(&self) -> String {
        let mut s = "t_secs,total_mb_per_sec".to_owned();
        for i in 0..self.osds {
            s += &format!(",osd{i}_mb_per_sec");
        }
        s.push('\n');
        for (t, v) in &self.samples {
            s += &format!("{t:.2},{:.2}", v.iter().sum::<f64>());
            for x in v {
                s += &format!(",{x:.2}");
            }
            s.push('\n');
        }
        s
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or("–".into(), |x| format!("{x:.1}"))
}

impl ModelReport {
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "CodFS throughput model (§5.1): RS {}+{}, B = {} Mbit/s ({:.1} MB/s) per OSD link each way, {} clients × {} MiB, a window of {} segments per client (bytes in transit: another segment starts once those in flight have less than the window left to move)\n\n",
            self.k,
            self.m,
            self.rate_mbit,
            self.rate_mbit / 8.0,
            self.clients,
            self.bytes_per_client >> 20,
            self.window_segments
        );
        let mut ccs: Vec<&str> = self.rows.iter().map(|r| r.tcp_cc.as_str()).collect();
        ccs.dedup();
        s += &format!(
            "TCP congestion control on every emulated host: {}.\n",
            ccs.join(", ")
        );
        let mut notes: Vec<&str> = self
            .rows
            .iter()
            .filter_map(|r| r.tcp_cc_note.as_deref())
            .collect();
        notes.dedup();
        for note in notes {
            s += &format!("Not the one asked for: {note}; the hosts ran the machine's default.\n");
        }
        s += "\n";
        if let Some(t) = self.stream_secs {
            s += &format!(
                "Method: streams (§5.1's clients \"transfer streams of segments simultaneously\"): each phase \
                 runs {t:.0} s, every client putting one growing file of its {} MiB repeated, then getting \
                 it over and over as one read (one window of segments across the passes); throughput is the rate of payload moved \
                 (put: segment bytes as they are sent to their primaries, less those of attempts that failed, \
                 every byte sent acknowledged durable by the end of the phase; get: bytes as they arrive, every byte compared; \
                 the least-squares slope of their total) from the end \
                 of a warm-up to {t:.0} s, links over the same window. The warm-up lasts {:.0} s and until the clients have had \
                 {} segments each acknowledged. The \"all active\" table below gives the window. The put's rate of bytes \
                 acknowledged over the same window is in the second table: acknowledgements come a segment at a time, \
                 a window of them together, so that rate moves with where the window's ends fall.\n\n",
                self.bytes_per_client >> 20,
                t / 4.0,
                self.window_segments
            );
        }
        s += "| code | M | segment | write MB/s | model | ratio | links in: mean / busiest | read MB/s | model | ratio | links out: mean / busiest | degraded read MB/s | recovery MB/s |\n";
        s += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
        for r in &self.rows {
            s += &format!(
                "| {} | {} | {} MiB | {:.1} | {:.1} | {:.0}% | {:.0}% / {:.0}% | {:.1} | {:.1} | {:.0}% | {:.0}% / {:.0}% | {} | {} |\n",
                r.code,
                r.osds,
                r.segment_bytes >> 20,
                r.write_mb_per_sec,
                r.write_model_mb_per_sec,
                r.write_ratio * 100.0,
                r.write_link_mean * 100.0,
                r.write_link_max * 100.0,
                r.read_mb_per_sec,
                r.read_model_mb_per_sec,
                r.read_ratio * 100.0,
                r.read_link_mean * 100.0,
                r.read_link_max * 100.0,
                opt(r.degraded_read_mb_per_sec),
                opt(r.recovery_mb_per_sec)
            );
        }
        s += "\nThe same runs against the model with B as the thesis took it (§5.1: the testbed's measured \
              effective bandwidth, 114.5 MB/s on its 1 Gbit/s links): here a bare TCP stream's payload \
              through one OSD's tbf, each way, measured before the daemons start. It is lower than the tc \
              rate by TCP/IP and Ethernet framing, which ecstack's links pay too.\n\n";
        s += "| code | M | segment | B_in / B_out measured (MB/s) | write: model / ratio | read: model / ratio | payload per link byte: write / read | the same over the whole phases | ratio from the links: write / read | write acknowledged MB/s (ratio) |\n";
        s += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
        for r in &self.rows {
            s += &format!(
                "| {} | {} | {} MiB | {:.2} / {:.2} | {:.1} / {:.0}% | {:.1} / {:.0}% | {:.3} / {:.3} | {:.3} / {:.3} | {:.0}% / {:.0}% | {} |\n",
                r.code,
                r.osds,
                r.segment_bytes >> 20,
                r.goodput_in_mb_per_sec,
                r.goodput_out_mb_per_sec,
                r.write_model_eff_mb_per_sec,
                r.write_ratio_eff * 100.0,
                r.read_model_eff_mb_per_sec,
                r.read_ratio_eff * 100.0,
                r.write_ratio / r.write_link_mean.max(1e-9),
                r.read_ratio / r.read_link_mean.max(1e-9),
                r.write_phase_payload_per_link_byte,
                r.read_phase_payload_per_link_byte,
                r.write_ratio_links * 100.0,
                r.read_ratio_links * 100.0,
                r.write_acked_mb_per_sec.map_or("–".into(), |a| format!(
                    "{a:.1} ({:.0}%)",
                    a / r.write_model_mb_per_sec * 100.0
                ))
            );
        }
        s += "\nPayload per link byte: the model's bytes the phase moved (its ratio) over what the links \
              carried (their use), a check of the figure: a bare TCP stream's payload is B measured / B \
              of the link bytes (TLS and HTTP/2 framing take a little more), so a phase's cannot be \
              higher — above it, the throughput figure reads high. Over the whole phases (warm-up and \
              tail, where links idle, included; no window's ends) the same from the payload the clients \
              moved and the links' bytes: a window's figure well below its whole phase's means the \
              window read low, or wasted link bytes inside it. The ratio from the links is the links' \
              mean use over the window × that whole-phase figure: the window's link bytes carrying payload \
              as the phase's did on average, a check of the ratio that no client counter enters.\n";
        s += "\nLinks: the bytes each OSD link's tbf passed in the direction the model charges (inbound while \
              writing, outbound while reading; every packet's length as tc charges it) over B × the time. \
              A mean close to the ratio with a busiest link near 100% means uneven load; a busiest link well \
              below 100% means the links sat idle. Timelines: `links-*.csv` (the veths' \
              counters, sampled 4 times a second: they count a GSO packet's headers once, so they read \
              a few % below the tbf's). Drops: packets an OSD link's \
              tbf had no queue room for, per second (mean over the links, charged direction): each is \
              sent again, and the congestion control backs off.\n";
        s += "\nWhere a phase loses: its time until the first client finished (every client active) and the \
              links' mean busy fraction in that part; the rest is the tail, with fewer clients than the \
              cluster needs to stay busy. The ratio above is over the whole phase.\n\n";
        s += "| code | M | segment | write: all active / phase (s) | links while all active | drops/s per link | read: all active / phase (s) | links while all active | drops/s per link |\n";
        s += "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
        for r in &self.rows {
            s += &format!(
                "| {} | {} | {} MiB | {:.1} / {:.1} | {:.0}% | {:.1} | {:.1} / {:.1} | {:.0}% | {:.1} |\n",
                r.code,
                r.osds,
                r.segment_bytes >> 20,
                r.write_all_active_secs,
                r.write_secs,
                r.write_all_active_link_mean * 100.0,
                r.write_drops_per_link_sec,
                r.read_all_active_secs,
                r.read_secs,
                r.read_all_active_link_mean * 100.0,
                r.read_drops_per_link_sec
            );
        }
        s
    }

    /// `codfs-model.md`, `codfs-model.csv` and `codfs-model.svg` in `out`.
    pub fn write(&self, out: &Path) -> Result<()> {
        std::fs::create_dir_all(out).map_err(crate::io_at(out))?;
        let md = out.join("codfs-model.md");
        std::fs::write(&md, self.markdown()).map_err(crate::io_at(&md))?;
        write_csv(&out.join("codfs-model.csv"), &self.rows)?;
        for t in &self.timelines {
            let p = out.join(&t.file);
            std::fs::write(&p, t.csv()).map_err(crate::io_at(&p))?;
        }
        let mut series = Vec::new();
        let mut curves: Vec<(String, u64)> = self
            .rows
            .iter()
            .map(|r| (r.code.clone(), r.segment_bytes))
            .collect();
        curves.sort_unstable();
        curves.dedup();
        for (code, seg) in curves {
            let rows: Vec<&ModelRow> = self
                .rows
                .iter()
                .filter(|r| r.segment_bytes == seg && r.code == code)
                .collect();
            let pts =
                |f: fn(&ModelRow) -> f64| rows.iter().map(|r| (r.osds as f64, f(r))).collect();
            series.push((
                format!("write, {code}, {} MiB", seg >> 20),
                pts(|r| r.write_mb_per_sec),
            ));
            series.push((
                format!("read, {code}, {} MiB", seg >> 20),
                pts(|r| r.read_mb_per_sec),
            ));
        }
        let model_rows: Vec<&ModelRow> = {
            let mut v: Vec<&ModelRow> = self.rows.iter().collect();
            v.sort_by_key(|r| r.osds);
            v.dedup_by_key(|r| r.osds);
            v
        };
        series.push((
            "write model".into(),
            model_rows
                .iter()
                .map(|r| (r.osds as f64, r.write_model_mb_per_sec))
                .collect(),
        ));
        series.push((
            "read model".into(),
            model_rows
                .iter()
                .map(|r| (r.osds as f64, r.read_model_mb_per_sec))
                .collect(),
        ));
        Lines {
            title: "CodFS aggregate throughput vs the §5.1 model",
            x_label: "OSDs (M)",
            y_label: "MB/s",
            series,
            y_range: None,
        }
        .write_svg(&out.join("codfs-model.svg"))
    }
}

fn client_error(e: ClientError) -> LabError {
    LabError::Run(e.to_string())
}

/// A daemon inside a namespace: SIGKILLed and reaped when dropped.
struct Daemon {
    child: Child,
    pid: u32,
}

impl Daemon {
    fn spawn(host: &Host, exe: &Path, args: &[String], log: &Path) -> Result<Daemon> {
        let out = std::fs::File::create(log).map_err(crate::io_at(log))?;
        let err = out.try_clone().map_err(crate::io_at(log))?;
        let prefix = Testbed::exec_prefix(host);
        let child = Command::new(&prefix[0])
            .args(&prefix[1..])
            .arg(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| LabError::Run(format!("cannot start {}: {e}", exe.display())))?;
        let pid = child.id();
        codfs_netns::register_pid(pid);
        Ok(Daemon { child, pid })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill(); // exited already: nothing to kill; wait() still reaps it
        let _ = self.child.wait();
        codfs_netns::unregister_pid(self.pid);
    }
}

/// Runs `f` on a thread inside `host`'s namespace with its own current-thread runtime.
fn on_host<T: Send + 'static>(
    host: &Host,
    f: impl FnOnce(&tokio::runtime::Runtime) -> Result<T> + Send + 'static,
) -> Result<T> {
    let host = host.clone();
    std::thread::spawn(move || {
        Testbed::enter(&host)?;
        let rt = runtime()?;
        let _inside = rt.enter(); // clients spawn their connection tasks on it
        f(&rt)
    })
    .join()
    .map_err(|_| LabError::Run("a client thread panicked".into()))?
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| LabError::Run(format!("cannot start an async runtime: {e}")))
}

/// What a phase's clients count, summed over them.
#[derive(Clone, Default)]
struct Counters {
    /// The throughput's counter, payload moved: a put's bytes as they are sent to the segments'
    /// primaries (`ClientOptions::sent`), a get's as their frames arrive (`ClientOptions::received`).
    moved: Arc<AtomicU64>,
    /// A put's bytes acknowledged durable (`ClientOptions::progress`; a segment at a time).
    acked: Arc<AtomicU64>,
    /// Attempts at a primary that failed and the bytes they had moved (counted in `moved` too).
    failed: Arc<FailedAttempts>,
}

impl Counters {
    fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// A client in a client namespace, counting into `counters` by `phase`.
fn connect(
    config: &ClusterConfig,
    window_segments: usize,
    phase: Phase,
    counters: Option<&Counters>,
) -> Result<Client> {
    connect_as(config, "client", window_segments, phase, counters)
}

/// [`connect`] with the certificate `cert` (`admin` to declare an OSD out).
fn connect_as(
    config: &ClusterConfig,
    cert: &str,
    window_segments: usize,
    phase: Phase,
    counters: Option<&Counters>,
) -> Result<Client> {
    let sec =
        Security::load(&config.certs_dir(), cert).map_err(|e| LabError::Run(e.to_string()))?;
    let mut options = ClientOptions {
        window_segments_max: window_segments,
        // CodFS's model (§5.1) charges every read byte to the primary's link as well: read as
        // CodFS does, through the primary.
        read_path: ReadPath::Primary,
        ..ClientOptions::default()
    };
    if let Some(c) = counters {
        match phase {
            Phase::Put => {
                options.sent = Some(c.moved.clone());
                options.progress = Some(c.acked.clone());
            }
            Phase::Get => options.received = Some(c.moved.clone()),
        }
        options.failed_attempts = Some(c.failed.clone());
    }
    Client::connect_with(config, sec, options).map_err(client_error)
}

fn client_bytes(seed: u64, j: usize, len: u64) -> Vec<u8> {
    let mut b = vec![0u8; len as usize];
    Rng::new(seed ^ (j as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)).fill(&mut b);
    b
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Put,
    Get,
}

/// What one phase measured.
struct PhaseResult {
    mb_per_sec: f64,
    /// The OSDs' links in the direction the phase charges, as fractions of B × the phase's time.
    link_mean: f64,
    link_max: f64,
    timeline: Vec<(f64, Vec<f64>)>,
    /// The phase's time, and the part of it until the first client finished (all clients active).
    secs: f64,
    all_active_secs: f64,
    /// The links' mean busy fraction while all clients were active (from the timeline).
    all_active_link_mean: f64,
    /// Packets each OSD link's tbf dropped per second in the charged direction (mean over the
    /// links, over the same time as `link_mean`).
    drops_per_sec: f64,
    /// Attempts at a primary that failed during the phase (each tried again), and the bytes they
    /// had moved: bytes the links carried that the throughput does not count.
    failed_attempts: u64,
    failed_bytes: u64,
    /// The last failed attempt's error.
    failed_last: Option<String>,
    /// A streamed put's rate of bytes acknowledged durable over the window (MB/s), beside
    /// `mb_per_sec` (payload sent): a segment at a time, so a staircase.
    acked_mb_per_sec: Option<f64>,
    /// The whole phase (warm-up and tail included): the payload moved (a put's bytes acknowledged,
    /// a get's received) and the bytes the OSD links' tbfs passed in the charged direction.
    payload_bytes: u64,
    link_bytes: u64,
}

/// The link counters sampled on a thread until it is stopped.
struct LinkSampler {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(f64, Vec<LinkBytes>)>>,
}

const LINK_SAMPLE_MS: u64 = 250;

impl LinkSampler {
    fn start(probe: LinkProbe, start: Instant) -> LinkSampler {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut v = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(LINK_SAMPLE_MS));
                // A failed sample leaves a gap in the timeline, nothing else.
                if let Ok(c) = probe.read() {
                    v.push((start.elapsed().as_secs_f64(), c));
                }
            }
            v
        });
        LinkSampler { stop, thread }
    }

    fn stop(self) -> Vec<(f64, Vec<LinkBytes>)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Bytes in the charged direction: inbound for writes, outbound for reads.
fn charged(phase: Phase, l: &LinkBytes) -> u64 {
    match phase {
        Phase::Put => l.received,
        Phase::Get => l.sent,
    }
}

/// The tbf of the charged direction.
fn charged_tbf(phase: Phase, l: &TbfCounters) -> Tbf {
    match phase {
        Phase::Put => l.received,
        Phase::Get => l.sent,
    }
}

/// Every client on its own host does `phase` at once; returns the aggregate MB/s and how busy
/// the links of `osds` (the OSDs in the cluster) were. Streams when `cfg.stream_secs` is set.
fn run_phase(
    cfg: &ModelConfig,
    bed: &Testbed,
    osds: &[Host],
    config: &ClusterConfig,
    phase: Phase,
) -> Result<PhaseResult> {
    let probe = bed.link_probe(osds);
    let barrier = Arc::new(Barrier::new(bed.clients.len() + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    let counters = Counters::default();
    for (j, host) in bed.clients.iter().enumerate() {
        let (host, config, barrier, stop, counters) = (
            host.clone(),
            config.clone(),
            barrier.clone(),
            stop.clone(),
            counters.clone(),
        );
        let (seed, len, window) = (cfg.seed, cfg.bytes_per_client, cfg.window_segments);
        let streaming = cfg.stream_secs.is_some();
        threads.push(std::thread::spawn(move || -> Result<Instant> {
            // Every thread reaches the barrier, failed or not, so nobody waits forever.
            let setup = Testbed::enter(&host).and_then(|()| {
                let rt = runtime()?;
                let client = {
                    let _inside = rt.enter(); // the client spawns its connection tasks on it
                    connect(&config, window, phase, Some(&counters))?
                };
                Ok((rt, client))
            });
            let data = Arc::new(client_bytes(seed, j, len));
            let setup = setup.and_then(|(rt, c)| {
                rt.block_on(c.status()).map_err(client_error)?; // connected before the clock starts
                Ok((rt, c))
            });
            barrier.wait();
            let (rt, client) = setup?;
            let path = format!("/model/c{j}");
            rt.block_on(async {
                match (phase, streaming) {
                    (Phase::Put, false) => {
                        client.put(&path, &data[..]).await.map_err(client_error)?;
                    }
                    (Phase::Get, false) => {
                        let got = client.read(&path, 0, len).await.map_err(client_error)?;
                        if got[..] != data[..] {
                            return Err(LabError::Run(format!(
                                "get {path}: the bytes differ from what was put"
                            )));
                        }
                    }
                    (Phase::Put, true) => {
                        let reader = Repeat { data, pos: 0, stop };
                        client.put(&path, reader).await.map_err(client_error)?;
                    }
                    (Phase::Get, true) => {
                        // The file over and over as one read (one window across the passes: a
                        // get per pass would drain its window at every end of file, and the
                        // clients, whose files are about as long, would drain together).
                        let file_size = client.stat(&path).await.map_err(client_error)?.size;
                        if file_size == 0 {
                            return Err(LabError::Run(format!("get {path}: the file is empty")));
                        }
                        let passes = [(0, None); STREAM_PASSES];
                        while !stop.load(Ordering::Relaxed) {
                            let mut sink = Compare {
                                data: data.clone(),
                                file_size,
                                pos: 0,
                                stop: stop.clone(),
                            };
                            match client.get_ranges(&path, &passes, &mut sink).await {
                                Ok(_) => {}
                                Err(_) if stop.load(Ordering::Relaxed) && !sink.differs() => {}
                                Err(e) => return Err(client_error(e)),
                            }
                        }
                    }
                }
                Ok(Instant::now())
            })
        }));
    }
    let before = probe.read()?;
    let tbf_before = probe.tbf()?;
    barrier.wait();
    let start = Instant::now();
    let sampler = LinkSampler::start(probe.clone(), start);
    // Streaming: the window from the end of the warm-up to the stop, its counters read at both ends.
    let window = match cfg.stream_secs {
        None => None,
        Some(secs) => {
            // The warm-up counts what the clients had acknowledged (a get: received).
            let done = || match phase {
                Phase::Put => Counters::get(&counters.acked),
                Phase::Get => Counters::get(&counters.moved),
            };
            let until = |t: f64| {
                let left = t - start.elapsed().as_secs_f64();
                if left > 0.0 {
                    std::thread::sleep(Duration::from_secs_f64(left));
                }
            };
            // The warm-up: a quarter of the time, and until the clients have had as many bytes
            // acknowledged as a first window of segments each — before that, acknowledgements lag
            // the links by up to a window (a client's first segments finish together, a window's
            // lifetime after the start).
            let first_windows =
                config.segment_bytes * cfg.window_segments as u64 * bed.clients.len() as u64;
            until(secs / 4.0);
            while done() < first_windows {
                if start.elapsed().as_secs_f64() > secs / 2.0 {
                    stop.store(true, Ordering::Relaxed);
                    for t in threads {
                        let _ = t.join();
                    }
                    sampler.stop();
                    return Err(LabError::Run(format!(
                        "--stream {secs}: after {:.0} s the clients had not yet had {} segments each \
                         acknowledged; stream longer",
                        secs / 2.0,
                        cfg.window_segments
                    )));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let (t1, tbf1) = (Instant::now(), probe.tbf());
            let failed1 = Counters::get(&counters.failed.bytes);
            // The rate is the least-squares slope of the payload moved over the window, sampled
            // every 100 ms, not the difference of its two ends. A put's bytes are counted as they
            // are sent, a frame at a time: its acknowledgements come a segment at a time per
            // client, and a window of segments tends to finish together, so their total is a
            // staircase (at 64 MiB × 4 per client, 2.7 GB in flight, a third of a 150 s window's
            // bytes) whose slope leaned on where the window's ends fell, by up to 7 % either way
            // in runs whose links were as busy. A get counts its frames as they arrive (its bytes
            // delivered in order moved a segment at a time: 2–9 % above what the links carried).
            let mut points = Vec::new();
            let mut acked = Vec::new();
            loop {
                let t = start.elapsed().as_secs_f64();
                points.push((t, Counters::get(&counters.moved) as f64));
                acked.push((t, Counters::get(&counters.acked) as f64));
                if t >= secs {
                    break;
                }
                std::thread::sleep(Duration::from_secs_f64((secs - t).clamp(1e-3, 0.1)));
            }
            let (t2, tbf2) = (Instant::now(), probe.tbf());
            stop.store(true, Ordering::Relaxed);
            // Bytes of attempts that failed inside the window were sent (or received) again:
            // the first time does not count.
            let failed = Counters::get(&counters.failed.bytes).saturating_sub(failed1);
            let secs = (t2 - t1).as_secs_f64().max(1e-9);
            let rate = slope(&points) - failed as f64 / secs;
            let acked = (phase == Phase::Put).then(|| slope(&acked) / 1e6);
            Some((t1, t2, rate, acked, tbf1, tbf2))
        }
    };
    let mut end = start;
    let mut first_end: Option<Instant> = None;
    let mut first_error = None;
    for t in threads {
        match t.join() {
            Ok(Ok(e)) => {
                end = end.max(e);
                first_end = Some(first_end.map_or(e, |f| f.min(e)));
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {
                first_error.get_or_insert(LabError::Run("a client thread panicked".into()));
            }
        }
    }
    stop.store(true, Ordering::Relaxed); // a failed sample above returned before the stop
    let tbf_after = probe.tbf();
    let samples = sampler.stop();
    if let Some(e) = first_error {
        return Err(e);
    }
    let tbf_after = tbf_after?;
    let timeline = rates(phase, &before, samples);
    let failed_bytes = Counters::get(&counters.failed.bytes);
    let payload_bytes = match phase {
        Phase::Put => {
            // Every byte a put sent was acknowledged, or belongs to an attempt that failed.
            let (sent, acked) = (
                Counters::get(&counters.moved),
                Counters::get(&counters.acked),
            );
            if sent != acked + failed_bytes {
                return Err(LabError::Run(format!(
                    "the puts sent {sent} bytes but {acked} were acknowledged and {failed_bytes} \
                     belong to failed attempts"
                )));
            }
            acked
        }
        Phase::Get => Counters::get(&counters.moved),
    };
    // Busy fractions from the tbf's own byte counters (what it limits), and its drops per second.
    let moved = |from: &[TbfCounters], to: &[TbfCounters]| -> Vec<Tbf> {
        from.iter()
            .zip(to)
            .map(|(b, a)| {
                let (b, a) = (charged_tbf(phase, b), charged_tbf(phase, a));
                Tbf {
                    bytes: a.bytes.saturating_sub(b.bytes),
                    drops: a.drops.saturating_sub(b.drops),
                }
            })
            .collect()
    };
    let link_use = |from: &[TbfCounters], to: &[TbfCounters], secs: f64| -> Vec<f64> {
        let capacity = cfg.rate_mbit * 1e6 / 8.0 * secs;
        moved(from, to)
            .iter()
            .map(|d| d.bytes as f64 / capacity)
            .collect()
    };
    let drop_rate = |from: &[TbfCounters], to: &[TbfCounters], secs: f64| -> f64 {
        let total: u64 = moved(from, to).iter().map(|d| d.drops).sum();
        total as f64 / secs.max(1e-9) / from.len().max(1) as f64
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let max = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    let link_bytes: u64 = moved(&tbf_before, &tbf_after).iter().map(|d| d.bytes).sum();
    let failed_attempts = Counters::get(&counters.failed.attempts);
    if let Some((t1, t2, bytes_per_sec, acked_mb_per_sec, tbf1, tbf2)) = window {
        let (tbf1, tbf2) = (tbf1?, tbf2?);
        if let Some(f) = first_end.filter(|&f| f < t2) {
            return Err(LabError::Run(format!(
                "a client stopped streaming {:.1} s after the start, before the window ended",
                (f - start).as_secs_f64()
            )));
        }
        let secs = (t2 - t1).as_secs_f64().max(1e-9);
        let busy = link_use(&tbf1, &tbf2, secs);
        return Ok(PhaseResult {
            mb_per_sec: bytes_per_sec / 1e6,
            link_mean: mean(&busy),
            link_max: max(&busy),
            timeline,
            secs,
            all_active_secs: secs,
            all_active_link_mean: mean(&busy),
            drops_per_sec: drop_rate(&tbf1, &tbf2, secs),
            failed_attempts,
            failed_bytes,
            failed_last: counters.failed.last_error(),
            acked_mb_per_sec,
            payload_bytes,
            link_bytes,
        });
    }
    let secs = (end - start).as_secs_f64().max(1e-9);
    let busy = link_use(&tbf_before, &tbf_after, secs);
    let bytes = cfg.bytes_per_client * bed.clients.len() as u64;
    let all_active_secs = first_end.map_or(secs, |f| (f - start).as_secs_f64().max(1e-9));
    // The intervals that ended before the first client finished (the sampler's resolution).
    let mut moved = 0.0;
    let mut covered = 0.0;
    let mut t_prev = 0.0;
    for (t, rates) in &timeline {
        if *t > all_active_secs {
            break;
        }
        moved += rates.iter().sum::<f64>() * 1e6 * (t - t_prev);
        covered = *t;
        t_prev = *t;
    }
    let all_active_link_mean = if covered > 0.0 {
        moved / (cfg.rate_mbit * 1e6 / 8.0 * covered * osds.len().max(1) as f64)
    } else {
        0.0
    };
    Ok(PhaseResult {
        mb_per_sec: bytes as f64 / 1e6 / secs,
        link_mean: mean(&busy),
        link_max: max(&busy),
        timeline,
        secs,
        all_active_secs,
        all_active_link_mean,
        drops_per_sec: drop_rate(&tbf_before, &tbf_after, secs),
        failed_attempts,
        failed_bytes,
        failed_last: counters.failed.last_error(),
        acked_mb_per_sec: None,
        payload_bytes,
        link_bytes,
    })
}

/// One line when a phase's clients had attempts at a primary fail (retried).
fn log_failed_attempts(log: &dyn Fn(&str), p: &PhaseResult) {
    if p.failed_attempts > 0 {
        log(&format!(
            "  {} attempts at a primary failed and were tried again ({:.1} MB moved by them, carried by the links again); the last: {}",
            p.failed_attempts,
            p.failed_bytes as f64 / 1e6,
            p.failed_last.as_deref().unwrap_or("(not recorded)")
        ));
    }
}

/// The least-squares slope of `points` (x, y); 0 with fewer than two distinct x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let (sxy, sxx) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    if sxx > 0.0 {
        sxy / sxx
    } else {
        0.0
    }
}

/// The sampled link counters as MB/s per OSD over each sampling interval.
fn rates(
    phase: Phase,
    before: &[LinkBytes],
    samples: Vec<(f64, Vec<LinkBytes>)>,
) -> Vec<(f64, Vec<f64>)> {
    let mut timeline = Vec::new();
    let mut prev = (0.0, before.to_vec());
    for (t, c) in samples {
        let dt = (t - prev.0).max(1e-9);
        let rates: Vec<f64> = prev
            .1
            .iter()
            .zip(&c)
            .map(|(b, a)| charged(phase, a).saturating_sub(charged(phase, b)) as f64 / 1e6 / dt)
            .collect();
        timeline.push((t, rates));
        prev = (t, c);
    }
    timeline
}

/// A streaming put's input: the client's bytes over and over, until `stop` (then end of file).
struct Repeat {
    data: Arc<Vec<u8>>,
    pos: u64,
    stop: Arc<AtomicBool>,
}

impl AsyncRead for Repeat {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.stop.load(Ordering::Relaxed) {
            let at = (self.pos % self.data.len() as u64) as usize;
            let n = buf.remaining().min(self.data.len() - at);
            buf.put_slice(&self.data[at..at + n]);
            self.pos += n as u64;
        }
        Poll::Ready(Ok(()))
    }
}

/// Passes over its file a streaming get asks for in one read (then another read, if the stream
/// has not stopped).
const STREAM_PASSES: usize = 16;

/// A streaming get's output: every byte compared with what [`Repeat`] put there, the file (of
/// `file_size` bytes) over and over; fails once `stop` is set, which ends the get.
struct Compare {
    data: Arc<Vec<u8>>,
    file_size: u64,
    /// Bytes compared so far (`u64::MAX` once they differed).
    pos: u64,
    stop: Arc<AtomicBool>,
}

impl Compare {
    /// `pos` is set past the end when the bytes differed.
    fn differs(&self) -> bool {
        self.pos == u64::MAX
    }
}

impl AsyncWrite for Compare {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.stop.load(Ordering::Relaxed) {
            return Poll::Ready(Err(std::io::Error::other("the stream was stopped")));
        }
        let len = self.data.len() as u64;
        let mut done = 0;
        while done < buf.len() {
            let in_file = (self.pos + done as u64) % self.file_size;
            let at = (in_file % len) as usize;
            let n = (buf.len() - done)
                .min(self.data.len() - at)
                .min((self.file_size - in_file) as usize);
            if buf[done..done + n] != self.data[at..at + n] {
                let first = (0..n).find(|&i| buf[done + i] != self.data[at + i]);
                let offset = in_file + first.unwrap_or(0) as u64;
                self.pos = u64::MAX;
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("the bytes at offset {offset} differ from what was put"),
                )));
            }
            done += n;
        }
        self.pos += buf.len() as u64;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Runs the experiment; namespaces and daemons are removed whatever happens.
pub fn run(cfg: &ModelConfig, log: &dyn Fn(&str)) -> Result<ModelReport> {
    cfg.validate()?;
    codfs_netns::check_tools()?;
    let temp;
    let dir = match &cfg.dir {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("ecstack-codfs-model-")
                .tempdir()
                .map_err(|e| LabError::Run(format!("cannot make a temporary directory: {e}")))?;
            temp.path().to_owned()
        }
    };
    let mut rows = Vec::new();
    let mut timelines = Vec::new();
    for code in &cfg.codes {
        for &seg in &cfg.segment_bytes {
            for &osds in &cfg.osds {
                log(&format!(
                    "M = {osds} OSDs, {} MiB segments, {code} {}+{}, B = {} Mbit/s, {} clients",
                    seg >> 20,
                    cfg.k,
                    cfg.m,
                    cfg.rate_mbit,
                    cfg.clients
                ));
                let run_dir = dir.join(format!("{code}-m{osds}-s{}", seg >> 20));
                let (row, t) = one_run(cfg, code, osds, seg, &run_dir, log)?;
                rows.push(row);
                timelines.extend(t);
            }
        }
    }
    Ok(ModelReport {
        rate_mbit: cfg.rate_mbit,
        k: cfg.k,
        m: cfg.m,
        clients: cfg.clients,
        bytes_per_client: cfg.bytes_per_client,
        window_segments: cfg.window_segments,
        stream_secs: cfg.stream_secs,
        rows,
        timelines,
    })
}

/// A new cluster in `dir` whose MDS listens on its namespace address.
fn make_cluster(
    cfg: &ModelConfig,
    code: &str,
    osds: usize,
    seg: u64,
    dir: &Path,
    bed: &Testbed,
) -> Result<ClusterConfig> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(crate::io_at(dir))?;
    }
    let opts = InitOptions {
        osds: osds as u32 + 1, // + the spare that replaces the killed OSD
        clients: 1,
        code: code.to_owned(),
        k: cfg.k,
        m: cfg.m,
        segment_bytes: seg,
        failure_domain: None,
        mds_addr: format!("{}:{MDS_PORT}", bed.mds.ip),
        update_scheme: ecstack_rpc::UpdateScheme::Fo,
        force: false,
    };
    let mut config = init_cluster(dir, &opts).map_err(|e| LabError::Run(e.to_string()))?;
    config.mds.heartbeat_ms = cfg.heartbeat_ms;
    config.mds.down_after_ms = cfg.down_after_ms;
    config.mds.out_after_ms = cfg.down_after_ms.max(3_600_000);
    let path = dir.join("cluster.toml");
    let text = toml::to_string_pretty(&config)
        .map_err(|e| LabError::Run(format!("{}: {e}", path.display())))?;
    std::fs::write(&path, text).map_err(crate::io_at(&path))?;
    ClusterConfig::load(&path).map_err(|e| LabError::Run(e.to_string()))
}

fn osd_args(config_path: &Path, dir: &Path, i: usize, host: &Host) -> Vec<String> {
    vec![
        "osd".into(),
        "--config".into(),
        config_path.display().to_string(),
        "--store".into(),
        dir.join(format!("osd-{i}")).display().to_string(),
        "--name".into(),
        format!("osd-{i}"),
        "--addr".into(),
        format!("{}:0", host.ip),
    ]
}

fn one_run(
    cfg: &ModelConfig,
    code: &str,
    osds: usize,
    seg: u64,
    dir: &Path,
    log: &dyn Fn(&str),
) -> Result<(ModelRow, Vec<LinkTimeline>)> {
    let bed = Testbed::create(osds + 1, cfg.clients, cfg.rate_mbit, cfg.tcp_cc.as_deref())?;
    let tcp_cc = bed.congestion_control()?;
    let tcp_cc_note = bed.congestion_note().map(str::to_owned);
    if let Some(note) = &tcp_cc_note {
        log(&format!("the hosts run {tcp_cc}: {note}"));
    }
    let config = make_cluster(cfg, code, osds, seg, dir, &bed)?;
    let config_path = dir.join("cluster.toml");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(crate::io_at(&logs))?;
    let common = vec!["--config".to_owned(), config_path.display().to_string()];
    let _mds = Daemon::spawn(
        &bed.mds,
        &cfg.exe,
        &[vec!["mds".to_owned()], common].concat(),
        &logs.join("mds.log"),
    )?;
    let mut daemons: Vec<Option<Daemon>> = Vec::new();
    for i in 0..osds {
        daemons.push(Some(Daemon::spawn(
            &bed.osds[i],
            &cfg.exe,
            &osd_args(&config_path, dir, i, &bed.osds[i]),
            &logs.join(format!("osd-{i}.log")),
        )?));
    }
    let control = bed.clients[0].clone();
    {
        let config = config.clone();
        on_host(&control, move |rt| {
            let c = connect(&config, 1, Phase::Get, None)?;
            rt.block_on(c.wait_for_osds(osds, Duration::from_secs(READY_SECS_MAX)))
                .map_err(client_error)?;
            Ok(())
        })
        .map_err(|e| LabError::Run(format!("{e} (logs in {})", logs.display())))?;
    }
    let (write_model, read_model) = cfg.model(osds);
    // B as the thesis took it: a bare TCP stream through one OSD's link, each way (before any
    // daemon sends a byte; every OSD link has the same tbf).
    let goodput_in = Testbed::tcp_goodput(&control, &bed.osds[0], GOODPUT_SECS)? / 1e6;
    let goodput_out = Testbed::tcp_goodput(&bed.osds[0], &control, GOODPUT_SECS)? / 1e6;
    let (write_model_eff, read_model_eff) = cfg.model_with(osds, goodput_in, goodput_out);
    log(&format!(
        "  effective bandwidth of an OSD link (bare TCP): in {goodput_in:.2} MB/s, out {goodput_out:.2} MB/s (tc rate {:.2})",
        cfg.b_mb_per_sec()
    ));
    let in_use = &bed.osds[..osds];
    log("  write");
    let w = run_phase(cfg, &bed, in_use, &config, Phase::Put)?;
    log_failed_attempts(log, &w);
    let write = w.mb_per_sec;
    // The model's bytes per payload byte, each way (its B over its T, per OSD).
    let (write_factor, read_factor) = (
        osds as f64 * cfg.b_mb_per_sec() / write_model,
        osds as f64 * cfg.b_mb_per_sec() / read_model,
    );
    let per_link_byte =
        |p: &PhaseResult, factor: f64| p.payload_bytes as f64 * factor / p.link_bytes.max(1) as f64;
    let write_phase = per_link_byte(&w, write_factor);
    let write_ratio_links = w.link_mean * write_phase;
    log(&format!(
        "  write {write:.1} MB/s{} (model {write_model:.1}; OSD links in: mean {:.0}%, busiest {:.0}%; \
         payload per link byte over the whole phase {write_phase:.3}, ratio from the links {:.0}%); read",
        w.acked_mb_per_sec
            .map_or(String::new(), |a| format!(" sent, {a:.1} MB/s acknowledged")),
        w.link_mean * 100.0,
        w.link_max * 100.0,
        write_ratio_links * 100.0
    ));
    let r = run_phase(cfg, &bed, in_use, &config, Phase::Get)?;
    log_failed_attempts(log, &r);
    let read = r.mb_per_sec;
    let read_phase = per_link_byte(&r, read_factor);
    let read_ratio_links = r.link_mean * read_phase;
    log(&format!(
        "  read {read:.1} MB/s (model {read_model:.1}; OSD links out: mean {:.0}%, busiest {:.0}%; \
         payload per link byte over the whole phase {read_phase:.3}, ratio from the links {:.0}%)",
        r.link_mean * 100.0,
        r.link_max * 100.0,
        read_ratio_links * 100.0
    ));
    let name = |phase: &str| format!("links-m{osds}-s{}-{phase}.csv", seg >> 20);
    let timelines = vec![
        LinkTimeline {
            file: name("write"),
            osds,
            samples: w.timeline,
        },
        LinkTimeline {
            file: name("read"),
            osds,
            samples: r.timeline,
        },
    ];
    let mut row = ModelRow {
        code: code.to_owned(),
        osds,
        segment_bytes: seg,
        k: cfg.k,
        m: cfg.m,
        rate_mbit: cfg.rate_mbit,
        clients: cfg.clients,
        bytes: cfg.bytes_per_client * cfg.clients as u64,
        tcp_cc,
        tcp_cc_note,
        goodput_in_mb_per_sec: goodput_in,
        goodput_out_mb_per_sec: goodput_out,
        write_mb_per_sec: write,
        write_model_mb_per_sec: write_model,
        write_ratio: write / write_model,
        write_model_eff_mb_per_sec: write_model_eff,
        write_ratio_eff: write / write_model_eff,
        write_link_mean: w.link_mean,
        write_secs: w.secs,
        write_all_active_secs: w.all_active_secs,
        write_all_active_link_mean: w.all_active_link_mean,
        write_drops_per_link_sec: w.drops_per_sec,
        write_acked_mb_per_sec: w.acked_mb_per_sec,
        write_phase_payload_per_link_byte: write_phase,
        read_phase_payload_per_link_byte: read_phase,
        write_ratio_links,
        read_ratio_links,
        write_link_max: w.link_max,
        read_mb_per_sec: read,
        read_model_mb_per_sec: read_model,
        read_ratio: read / read_model,
        read_model_eff_mb_per_sec: read_model_eff,
        read_ratio_eff: read / read_model_eff,
        read_link_mean: r.link_mean,
        read_secs: r.secs,
        read_all_active_secs: r.all_active_secs,
        read_all_active_link_mean: r.all_active_link_mean,
        read_drops_per_link_sec: r.drops_per_sec,
        read_link_max: r.link_max,
        degraded_read_mb_per_sec: None,
        recovery_mb_per_sec: None,
        recovery_secs: None,
        recovered_bytes: None,
    };
    if cfg.failures {
        log("  SIGKILL osd-0; degraded read");
        daemons[0] = None; // SIGKILL and reap
        let c2 = config.clone();
        on_host(&control, move |rt| {
            let c = connect(&c2, 1, Phase::Get, None)?;
            rt.block_on(c.wait_status(
                "waiting for osd-0 to be marked down",
                Duration::from_secs(READY_SECS_MAX),
                |s| {
                    s.osds
                        .iter()
                        .any(|o| o.name == "osd-0" && o.state != OsdState::Up)
                },
            ))
            .map_err(client_error)?;
            Ok(())
        })?;
        let degraded = run_phase(cfg, &bed, &bed.osds[1..osds], &config, Phase::Get)?.mb_per_sec;
        log(&format!(
            "  degraded read {degraded:.1} MB/s; a spare joins, osd-0 out, recovery"
        ));
        row.degraded_read_mb_per_sec = Some(degraded);
        let _spare = Daemon::spawn(
            &bed.osds[osds],
            &cfg.exe,
            &osd_args(&config_path, dir, osds, &bed.osds[osds]),
            &logs.join(format!("osd-{osds}.log")),
        )?;
        let c3 = config.clone();
        let (secs, bytes) = on_host(&control, move |rt| {
            let c = connect_as(&c3, "admin", 1, Phase::Get, None)?;
            rt.block_on(async {
                c.wait_for_osds(osds, Duration::from_secs(READY_SECS_MAX))
                    .await?;
                let t = Instant::now();
                c.osd_out("osd-0").await?;
                let s = c
                    .wait_status("recovery", Duration::from_secs(RECOVERY_SECS_MAX), |s| {
                        s.segments_degraded == 0
                            && s.segments_recovering == 0
                            && s.segments_lost == 0
                    })
                    .await?;
                Ok::<_, ClientError>((t.elapsed().as_secs_f64(), s.recovery.bytes_done))
            })
            .map_err(client_error)
        })?;
        row.recovery_secs = Some(secs);
        row.recovered_bytes = Some(bytes);
        row.recovery_mb_per_sec = Some(bytes as f64 / 1e6 / secs.max(1e-9));
        log(&format!(
            "  recovery: {:.1} MB rebuilt in {secs:.1} s",
            bytes as f64 / 1e6
        ));
    }
    Ok((row, timelines))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_of_the_thesis() {
        // §5.1 with (n, k) = (6, 4) and B = 114.5 MB/s at M = 10: the thesis measured at least 450
        // MB/s write and 580 MB/s read against these bounds.
        let mut c = ModelConfig::new("ecstack".into());
        c.rate_mbit = 114.5 * 8.0;
        let (w, r) = c.model(10);
        assert!((w - 1145.0 / 2.25).abs() < 1e-9, "{w}");
        assert!((r - 1145.0 / 1.75).abs() < 1e-9, "{r}");
    }

    #[test]
    fn config_errors_name_the_flag() {
        let mut c = ModelConfig::new("ecstack".into());
        assert!(c.validate().is_ok());
        c.osds = vec![4];
        assert!(c.validate().unwrap_err().to_string().starts_with("osds:"));
        c.osds = vec![6];
        c.stream_secs = Some(3.0);
        assert!(c.validate().unwrap_err().to_string().starts_with("stream:"));
        c.stream_secs = Some(60.0);
        assert!(c.validate().is_ok());
        c.rate_mbit = 0.0;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("rate-mbit:"));
        c.rate_mbit = 100.0;
        c.tcp_cc = Some("cubic; reboot".into());
        assert!(c.validate().unwrap_err().to_string().starts_with("tcp-cc:"));
        c.tcp_cc = None;
        assert!(c.validate().is_ok());
    }

    #[test]
    fn the_slope_of_a_staircase_is_its_mean_rate() {
        assert_eq!(slope(&[(1.0, 5.0)]), 0.0);
        assert!((slope(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]) - 2.0).abs() < 1e-12);
        // 10 MB every second, sampled every 100 ms over 20 s: 10 MB/s, whatever the phase.
        for phase in [0.0, 0.35, 0.9] {
            let pts: Vec<(f64, f64)> = (0..=200)
                .map(|i| {
                    let t = i as f64 / 10.0;
                    (t, 10.0 * (t + phase).floor())
                })
                .collect();
            let s = slope(&pts);
            assert!((s - 10.0).abs() < 0.1, "phase {phase}: {s}");
        }
    }

    #[tokio::test]
    async fn a_stream_repeats_the_bytes_and_the_comparison_catches_a_change() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let data = Arc::new((0..1000u32).map(|i| (i * 7) as u8).collect::<Vec<u8>>());
        let stop = Arc::new(AtomicBool::new(false));
        let mut reader = Repeat {
            data: data.clone(),
            pos: 0,
            stop: stop.clone(),
        };
        let mut got = vec![0u8; 2_345];
        reader.read_exact(&mut got).await.unwrap();
        for (i, b) in got.iter().enumerate() {
            assert_eq!(*b, data[i % 1000], "byte {i}");
        }
        // The file those 2,345 bytes make, read twice over: odd-sized writes across both
        // wrap-arounds (the data's and the file's) compare equal...
        let mut sink = Compare {
            data: data.clone(),
            file_size: 2_345,
            pos: 0,
            stop: stop.clone(),
        };
        let twice = [&got[..], &got[..]].concat();
        for piece in twice.chunks(333) {
            sink.write_all(piece).await.unwrap();
        }
        assert!(!sink.differs());
        // ...a changed byte in the third pass is caught with its offset in the file...
        let mut bad = got[1_990..2_100].to_vec();
        let mut sink = Compare {
            data: data.clone(),
            file_size: 2_345,
            pos: 2 * 2_345 + 1_990,
            stop: stop.clone(),
        };
        bad[40] ^= 1;
        let e = sink.write_all(&bad).await.unwrap_err();
        assert!(e.to_string().contains("offset 2030"), "{e}");
        assert!(sink.differs());
        // ...and a stop ends both: the reader at end of file, the sink with an error.
        stop.store(true, Ordering::Relaxed);
        assert_eq!(reader.read(&mut got).await.unwrap(), 0);
        let mut fresh = Compare {
            data,
            file_size: 2_345,
            pos: 0,
            stop,
        };
        assert!(fresh.write_all(&got[..10]).await.is_err());
        assert!(!fresh.differs());
    }
}
