//! `ecstack experiment codfs --exp synthetic` (CodFS §5.2: Fig. 5.2a–d, Table 5.1) and
//! `--exp overhead` (§5.2.5, Fig. 5.3): the four update schemes on a [`LocalCluster`] whose OSDs
//! keep their chunks on HDD-profiled block devices (`throttled:profile=eplog-hdd:file:…`).
//!
//! Per setting (a scheme and a code), on a fresh cluster:
//! 1. **write**: `writers` clients each put one file (sequential; the seed's "all clients write
//!    segments simultaneously"), MB/s of file bytes;
//! 2. **update**: `updaters` clients (each its own connections, one update at a time, as IOzone's
//!    threads) issue uniform random `record_bytes` updates aligned to `record_bytes` (preset
//!    `iozone-128k`), `update_bytes_per_segment` per segment of 16 MiB in all; IOPS;
//! 3. **F_avg**: every OSD is stopped, its store opened here, and `fragments − 1` averaged over the
//!    data chunks and the parity chunks apart (Table 5.1); the OSDs start again;
//! 4. **read**: the writers read their files back sequentially, every byte checked against the
//!    model (each `record_bytes` block is a function of the last update that wrote it);
//! 5. **recovery**: two OSDs get SIGKILL and are declared out at once; the time from the kill until
//!    the MDS reports every chunk rebuilt (the seed's measure), MB/s of rebuilt chunk bytes.
//!
//! Each client updates its own blocks (block index mod `updaters`), so the final bytes do not
//! depend on how concurrent clients' updates interleave. The FL / CodFS PL GC and Algorithm 1 are
//! kept from running (periods far beyond the run): the seed's Table 5.1 counts the fragments the
//! updates left, and its PLR reserve is fixed (merged only when full).
//!
//! CPU busy % (from `/proc/stat`) and loopback traffic (`/proc/net/dev`) are recorded per phase,
//! so the report can say whether the cores or the links bound a phase rather than the devices.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ecstack_client::{Bytes, Client, ClientError, PutOptions, UpdateScheme};
use ecstack_osd::chunk_store::{f_avg, ChunkStore, FileStore};
use ecstack_osd::device_store::{DeviceStore, DeviceStoreOptions};
use ecstack_rpc::Security;
use serde::Serialize;

use crate::codfs_local::{LocalCluster, LocalSpec};
use crate::plot::Bars;
use crate::table::write_report;
use crate::{LabError, Result};

/// Far beyond any run: Algorithm 1 and the GC never run (a year, in ms).
const NEVER_MS: u64 = 365 * 24 * 3_600_000;
/// How long the OSDs get to register, and recovery to finish.
const READY_SECS_MAX: u64 = 60;
const RECOVERY_SECS_MAX: u64 = 3_600;
/// A recovery that rebuilt nothing more for this long has stalled.
const RECOVERY_STALL_SECS: u64 = 120;

/// The seed's figures (§5.2), for the report.
pub const SEED_TABLE_5_1: [(&str, f64, f64); 4] = [
    ("fo", 0.0, 0.0),
    ("fl", 29.41, 117.66),
    ("codfs-pl", 0.0, 117.66),
    ("plr", 0.0, 0.0),
];

/// One configuration run on its own fresh cluster.
#[derive(Debug, Clone, Serialize)]
pub struct Setting {
    pub scheme: UpdateScheme,
    pub family: String,
    pub k: u32,
    pub m: u32,
    pub segment_bytes: u64,
    /// PLR's fixed reserve per parity chunk (0 for the other schemes).
    pub reserve_bytes: u64,
}

impl Setting {
    pub fn label(&self) -> String {
        format!(
            "{} {} ({},{})",
            self.scheme,
            self.family,
            self.k + self.m,
            self.k
        )
    }

    fn chunk_bytes(&self) -> u64 {
        self.segment_bytes.div_ceil(self.k as u64)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Which {
    Synthetic,
    Overhead,
}

#[derive(Debug, Clone, Serialize)]
pub struct SyntheticConfig {
    pub which: Which,
    #[serde(skip)]
    pub dir: PathBuf,
    pub settings: Vec<Setting>,
    #[serde(flatten)]
    pub testbed: Testbed,
    /// File bytes in all (split over the writers' files).
    pub data_bytes: u64,
    pub writers: usize,
    pub updaters: usize,
    pub record_bytes: u64,
    /// Update bytes per 16 MiB of file (the seed: 16 MiB per 16 MiB segment).
    pub update_bytes_per_16mib: u64,
    pub seed: u64,
    pub quick: bool,
}

impl SyntheticConfig {
    /// The seed's §5.2 settings: each scheme with `family` (k, m), `segment_bytes`, PLR's reserve
    /// one chunk.
    pub fn synthetic(
        schemes: &[UpdateScheme],
        family: &str,
        k: u32,
        m: u32,
        segment_bytes: u64,
    ) -> Vec<Setting> {
        schemes
            .iter()
            .map(|&scheme| {
                let chunk = segment_bytes.div_ceil(k as u64);
                Setting {
                    scheme,
                    family: family.to_owned(),
                    k,
                    m,
                    segment_bytes,
                    reserve_bytes: if scheme == UpdateScheme::Plr {
                        chunk
                    } else {
                        0
                    },
                }
            })
            .collect()
    }

    /// §5.2.5: PLR (6,4) with a reserve of one chunk against FO / FL / CodFS PL at (8,6) and (8,4),
    /// `rs-cauchy`, every chunk `chunk_bytes`: each configuration stores 8 chunks per segment.
    pub fn overhead(chunk_bytes: u64) -> Vec<Setting> {
        let mut v = vec![Setting {
            scheme: UpdateScheme::Plr,
            family: "rs-cauchy".into(),
            k: 4,
            m: 2,
            segment_bytes: 4 * chunk_bytes,
            reserve_bytes: chunk_bytes,
        }];
        for (k, m) in [(6, 2), (4, 4)] {
            for scheme in [UpdateScheme::Fo, UpdateScheme::Fl, UpdateScheme::ParityLog] {
                v.push(Setting {
                    scheme,
                    family: "rs-cauchy".into(),
                    k,
                    m,
                    segment_bytes: k as u64 * chunk_bytes,
                    reserve_bytes: 0,
                });
            }
        }
        v
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |field: &'static str, msg: String| Err(LabError::Config { field, msg });
        if self.writers == 0 || self.updaters == 0 {
            return bad("clients", "at least one writer and one updater".into());
        }
        if self.record_bytes == 0 || self.record_bytes % 4096 != 0 {
            return bad(
                "record",
                format!("{} is not a positive multiple of 4 KiB", self.record_bytes),
            );
        }
        let file = self.data_bytes / self.writers as u64;
        if file < self.record_bytes || file % self.record_bytes != 0 {
            return bad(
                "size",
                format!(
                    "each of {} files gets {file} bytes: not a positive multiple of the {}-byte record",
                    self.writers, self.record_bytes
                ),
            );
        }
        self.testbed.check(&self.settings)
    }

    fn file_bytes(&self) -> u64 {
        self.data_bytes / self.writers as u64
    }

    fn updates(&self) -> u64 {
        let bytes = (self.data_bytes as u128 * self.update_bytes_per_16mib as u128 >> 24) as u64;
        (bytes / self.record_bytes).max(self.updaters as u64)
    }
}

/// CPU and loopback counters over one phase.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Load {
    /// Busy share of all cores (100 = every core busy all the time), every process of the machine.
    pub cpu_busy_pct: f64,
    /// The share of all cores this experiment's processes (the driver, the MDS, the OSDs) used.
    pub cpu_ours_pct: f64,
    /// Bytes per second received on `lo`.
    pub loopback_mb_per_sec: f64,
}

pub(crate) struct Counters {
    busy: u64,
    total: u64,
    /// utime + stime per process of ours, clock ticks.
    ours: Vec<(u32, u64)>,
    lo_bytes: u64,
    at: Instant,
}

/// utime + stime of process `pid` in clock ticks (`None` once it is gone).
fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn counters_of(cluster: &LocalCluster) -> Counters {
    let mut pids: Vec<u32> = cluster.pids().into_iter().map(|(_, p)| p).collect();
    pids.push(std::process::id());
    let mut c = counters();
    c.ours = pids
        .into_iter()
        .filter_map(|p| Some((p, process_ticks(p)?)))
        .collect();
    c
}

fn counters() -> Counters {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = cpu.iter().take(8).sum();
    // idle + iowait
    let idle = cpu.get(3).copied().unwrap_or(0) + cpu.get(4).copied().unwrap_or(0);
    let dev = std::fs::read_to_string("/proc/net/dev").unwrap_or_default();
    let lo_bytes = dev
        .lines()
        .find(|l| l.trim_start().starts_with("lo:"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    Counters {
        busy: total.saturating_sub(idle),
        total,
        ours: Vec::new(),
        lo_bytes,
        at: Instant::now(),
    }
}

impl Load {
    /// "ours (machine)" in percent of all cores.
    pub(crate) fn cpu(&self) -> String {
        format!("{:.0} ({:.0})", self.cpu_ours_pct, self.cpu_busy_pct)
    }
}

impl Counters {
    pub(crate) fn load_since(&self) -> Load {
        let now = counters();
        let secs = now.at.duration_since(self.at).as_secs_f64().max(1e-9);
        // Processes that ended in between (the killed OSDs) are left out.
        let ours: u64 = self
            .ours
            .iter()
            .filter_map(|&(p, t)| Some(process_ticks(p)?.saturating_sub(t)))
            .sum();
        // /proc/stat counts in the same USER_HZ ticks as /proc/<pid>/stat.
        let all = now.total.saturating_sub(self.total).max(1) as f64;
        Load {
            cpu_busy_pct: 100.0 * now.busy.saturating_sub(self.busy) as f64 / all,
            cpu_ours_pct: 100.0 * ours as f64 / all,
            loopback_mb_per_sec: now.lo_bytes.saturating_sub(self.lo_bytes) as f64 / 1e6 / secs,
        }
    }
}

/// How a setting's fresh cluster is made (`synthetic`, `overhead` and `msr` alike): `osds` OSDs,
/// each store on its own `throttled:profile=P:file:…` device (or a directory store without a
/// profile), the FL / CodFS PL GC and Algorithm 1 kept from running, PLR's reserve fixed at the
/// setting's, OSDs declared out only by hand.
#[derive(Debug, Clone, Serialize)]
pub struct Testbed {
    /// The `ecstack` binary the daemons run.
    #[serde(skip)]
    pub exe: PathBuf,
    pub osds: usize,
    /// Each OSD's store device: `throttled:profile=P:file:…` with this profile, or a directory
    /// store when `None`.
    pub profile: Option<String>,
    /// A page-cache model of this many bytes in front of each OSD's profiled device
    /// (`cached:size=…:`, `ecstack_device::Cached`), dropped by restarting the OSDs
    /// ([`Running::drop_caches`]) before each phase, as the seed's OSDs dropped their buffer
    /// cache before each test; `None`: every read pays the profile.
    pub page_cache_bytes: Option<u64>,
    pub device_bytes: u64,
    pub insecure: bool,
    pub osd_threads: Option<u16>,
    /// PLR's `[update.reserve] merge_ahead` (0: a reserve is merged only when a delta does not fit,
    /// as in the seed's §5.2).
    pub merge_ahead: f64,
    /// The page cache writes back instead of through (`cached:…,writeback=…`: 10 % of it dirty
    /// starts a write-back, as Linux's `dirty_background_ratio`; flushes ignored): the seed's
    /// prototype writing through the buffer cache without syncing. Nothing is durable at the
    /// acknowledgement; an OSD's clean stop (each phase's cache drop) writes its pages back.
    pub writeback: bool,
}

/// A setting's cluster, up, with an admin client.
pub(crate) struct Running {
    pub cluster: LocalCluster,
    pub admin: Client,
    config: ecstack_rpc::ClusterConfig,
    dir: PathBuf,
    insecure: bool,
    osds: usize,
    profiled: bool,
    /// The OSDs' profiled devices are behind a page-cache model.
    page_cache: bool,
}

/// A recovery after two OSDs were killed.
pub(crate) struct Recovery {
    pub secs: f64,
    pub bytes: u64,
    pub mb_per_sec: f64,
    pub load: Load,
    /// `Some(what the MDS reported)` when the recovery rebuilt nothing more for
    /// [`RECOVERY_STALL_SECS`] before it finished.
    pub stalled: Option<String>,
}

impl Testbed {
    /// `settings` can run here: at least one, each with n + 2 OSDs (two are lost).
    pub fn check(&self, settings: &[Setting]) -> Result<()> {
        let bad = |field: &'static str, msg: String| Err(LabError::Config { field, msg });
        if settings.is_empty() {
            return bad("update-scheme", "no scheme to run".into());
        }
        if let Some(b) = self.page_cache_bytes.filter(|&b| b < 4096) {
            return bad("page-cache", format!("{b} bytes: less than one 4 KiB page"));
        }
        if self.writeback && (self.profile.is_none() || self.page_cache_bytes.is_none()) {
            return bad(
                "writeback",
                "write-back is a mode of the page cache: give a --store-profile and a --page-cache"
                    .into(),
            );
        }
        if !(0.0..=1.0).contains(&self.merge_ahead) {
            return bad(
                "merge-ahead",
                format!("{}: a fraction of the reserve, in [0, 1]", self.merge_ahead),
            );
        }
        for s in settings {
            let n = (s.k + s.m) as usize;
            if self.osds < n + 2 {
                return bad(
                    "osds",
                    format!(
                        "{}: {} OSDs cannot lose two and still hold n = {n} chunks",
                        s.label(),
                        self.osds
                    ),
                );
            }
        }
        Ok(())
    }

    /// The OSDs' stores in words, for the reports (with PLR's merge ahead, when on).
    pub fn stores(&self) -> String {
        let stores = self.store_words();
        if self.merge_ahead > 0.0 {
            format!(
                "{stores}; PLR reserves merged ahead, off the update path, once {} full",
                self.merge_ahead
            )
        } else {
            stores
        }
    }

    fn store_words(&self) -> String {
        match (&self.profile, self.page_cache_bytes) {
            (Some(p), Some(b)) if self.writeback => format!(
                "each store on `cached:size={} MiB,writeback={} MiB:throttled:profile={p}:file:…` (a page cache per OSD that **writes back** once 10 % of it is dirty and ignores fsync, as the seed's buffered prototype: nothing durable at the acknowledgement; written back and dropped before each phase)",
                b >> 20,
                (b / 10) >> 20
            ),
            (Some(p), Some(b)) => format!(
                "each store on `cached:size={} MiB:throttled:profile={p}:file:…` (a page cache per OSD, dropped before each phase)",
                b >> 20
            ),
            (Some(p), None) => format!("each store on `throttled:profile={p}:file:…`, no page cache"),
            (None, _) => "directory stores".into(),
        }
    }

    /// Where OSD `i`'s device file is (`{osd}` for the spec's placeholder).
    fn device(dir: &Path, i: &str) -> PathBuf {
        dir.join("dev").join(format!("osd-{i}.img"))
    }

    /// Starts the cluster of setting `s` in `dir` and waits until every OSD is up.
    pub(crate) async fn start(&self, s: &Setting, dir: &Path) -> Result<Running> {
        std::fs::create_dir_all(dir.join("dev")).map_err(crate::io_at(dir))?;
        let mut spec = LocalSpec::new(self.exe.clone(), dir.join("cluster"), self.osds);
        spec.family = s.family.clone();
        spec.k = s.k;
        spec.m = s.m;
        spec.segment_bytes = s.segment_bytes;
        spec.insecure = self.insecure;
        spec.osd_threads = self.osd_threads;
        spec.update_scheme = s.scheme;
        // Busy HDD-profiled OSDs must not be taken for dead; the failed ones are declared out by
        // hand.
        spec.heartbeat_ms = 1_000;
        spec.down_after_ms = 15_000;
        spec.out_after_ms = NEVER_MS;
        spec.reserve = Some(ecstack_rpc::config::ReserveConfig {
            size_bytes: s.reserve_bytes,
            shrink_period_ms: Some(NEVER_MS),
            merge_ahead: self.merge_ahead,
            ..Default::default()
        });
        spec.gc_period_ms = Some(NEVER_MS);
        if self.writeback {
            // A stop writes every dirty page back through the profiled device first.
            spec.stop_grace = std::time::Duration::from_secs(600);
        }
        if let Some(p) = &self.profile {
            let cache = match self.page_cache_bytes {
                Some(b) if self.writeback => format!(
                    "cached:size={b},writeback={}:",
                    (b / 10).max(4096) / 4096 * 4096
                ),
                Some(b) => format!("cached:size={b}:"),
                None => String::new(),
            };
            spec.store_device = Some(format!(
                "{cache}throttled:profile={p}:file:{}?size={}",
                Self::device(dir, "{osd}").display(),
                self.device_bytes
            ));
        }
        let mut cluster = LocalCluster::start(spec).map_err(client_error)?;
        let config = cluster.config().clone();
        let admin =
            Client::connect(&config, security(dir, self.insecure)?).map_err(client_error)?;
        let ready = admin
            .wait_for_osds(self.osds, Duration::from_secs(READY_SECS_MAX))
            .await;
        cluster.check_alive().map_err(client_error)?;
        ready.map_err(client_error)?;
        Ok(Running {
            cluster,
            admin,
            config,
            dir: dir.to_owned(),
            insecure: self.insecure,
            osds: self.osds,
            profiled: self.profile.is_some(),
            page_cache: self.profile.is_some() && self.page_cache_bytes.is_some(),
        })
    }
}

/// The client certificate of the cluster in `dir` (none when `insecure`).
fn security(dir: &Path, insecure: bool) -> Result<Security> {
    if insecure {
        Ok(Security::Insecure)
    } else {
        Security::load(&dir.join("cluster").join("certs"), "client").map_err(run_err)
    }
}

impl Running {
    /// Another client with its own connections.
    pub(crate) fn connect(&self) -> Result<Client> {
        Client::connect(&self.config, security(&self.dir, self.insecure)?).map_err(client_error)
    }

    /// CPU and loopback counters from now, over this cluster's processes and ours.
    pub(crate) fn counters(&self) -> Counters {
        counters_of(&self.cluster)
    }

    /// Every chunk's fragments (data chunks, parity chunks apart; `k` data chunks per segment):
    /// each OSD is stopped, its store opened here, and started again; returns once every OSD has
    /// registered its new address.
    pub(crate) async fn fragments(&mut self, k: u32) -> Result<(Vec<u64>, Vec<u64>)> {
        let (mut data_frags, mut parity_frags) = (Vec::new(), Vec::new());
        let (profiled, dir) = (self.profiled, self.dir.clone());
        self.restart_osds(|i, cluster| {
            let store: Box<dyn ChunkStore> = if profiled {
                let plain = format!("file:{}", Testbed::device(&dir, &i.to_string()).display());
                Box::new(
                    DeviceStore::open_spec(&plain, DeviceStoreOptions::default())
                        .map_err(run_err)?,
                )
            } else {
                Box::new(FileStore::open(&cluster.osd_store(i)).map_err(run_err)?)
            };
            for (seg, idx) in store.list().map_err(run_err)? {
                let f = store.fragments(seg, idx).map_err(run_err)?;
                if idx < k {
                    data_frags.push(f);
                } else {
                    parity_frags.push(f);
                }
            }
            Ok(())
        })
        .await?;
        Ok((data_frags, parity_frags))
    }

    /// The seed's "drop the buffer cache in all OSDs" before a test: with a page-cache model
    /// (which lives in each OSD), every OSD is restarted; without one, nothing to do.
    pub(crate) async fn drop_caches(&mut self) -> Result<()> {
        if self.page_cache {
            self.restart_osds(|_, _| Ok(())).await?;
        }
        Ok(())
    }

    /// Stops every OSD in turn, runs `each(i, cluster)` while OSD i is stopped, starts it again,
    /// then waits until every OSD has registered its new address (they come back on new ports).
    async fn restart_osds(
        &mut self,
        mut each: impl FnMut(usize, &LocalCluster) -> Result<()>,
    ) -> Result<()> {
        let before = self.admin.status().await.map_err(client_error)?;
        // Each OSD's old address, by id: a restarted OSD may well get a port another OSD had
        // (every one binds port 0), so only its own old address says it has not re-registered.
        let old_addrs: std::collections::HashMap<u32, String> = before
            .osds
            .iter()
            .map(|o| (o.osd_id, o.addr.clone()))
            .collect();
        for i in 0..self.osds {
            self.cluster.stop_osd(i);
            each(i, &self.cluster)?;
            self.cluster.start_osd(i).map_err(client_error)?;
        }
        let osds = self.osds;
        let ready = self
            .admin
            .wait_status(
                "waiting for the restarted OSDs",
                Duration::from_secs(READY_SECS_MAX),
                |st| {
                    st.osds
                        .iter()
                        .filter(|o| {
                            o.state == ecstack_mds_proto::OsdState::Up
                                && old_addrs.get(&o.osd_id) != Some(&o.addr)
                        })
                        .count()
                        >= osds
                },
            )
            .await;
        self.cluster.check_alive().map_err(client_error)?;
        ready.map(|_| ()).map_err(client_error)
    }

    /// The last two OSDs (process indexes).
    pub(crate) fn last_two(&self) -> [usize; 2] {
        [self.osds - 2, self.osds - 1]
    }

    /// The two OSDs (process indexes) holding the most chunks of file `path`.
    pub(crate) async fn busiest_two(&self, path: &str) -> Result<[usize; 2]> {
        let file = self.admin.stat(path).await.map_err(client_error)?;
        let status = self.admin.status().await.map_err(client_error)?;
        let mut by: Vec<(usize, usize)> = status
            .osds
            .iter()
            .filter_map(|o| {
                let i = o.name.strip_prefix("osd-")?.parse().ok()?;
                let held = file
                    .segments
                    .iter()
                    .flat_map(|l| &l.chunks)
                    .filter(|c| c.osd_id == o.osd_id)
                    .count();
                Some((held, i))
            })
            .collect();
        by.sort_unstable_by(|a, b| b.cmp(a));
        match by[..] {
            [(_, a), (_, b), ..] => Ok([a, b]),
            _ => Err(LabError::Run(format!(
                "{} OSDs in the status: two are needed",
                by.len()
            ))),
        }
    }

    /// SIGKILL of OSDs `victims`, both declared out at once; timed from the kill until the MDS
    /// reports every chunk rebuilt (the seed's measure), MB/s of rebuilt chunk bytes.
    pub(crate) async fn recover_two(
        &mut self,
        victims: [usize; 2],
        log: &dyn Fn(&str),
    ) -> Result<Recovery> {
        let c0 = self.counters();
        let t = Instant::now();
        for &v in &victims {
            self.cluster.kill_osd(v);
        }
        let mut chunks = 0;
        for &v in &victims {
            chunks += self
                .admin
                .osd_out(&LocalCluster::osd_name(v))
                .await
                .map_err(client_error)?
                .1;
        }
        let done = |st: &ecstack_mds_proto::ClusterStatus| {
            st.segments_degraded == 0
                && st.segments_recovering == 0
                && st.segments_lost == 0
                && st.recovery.chunks_done >= st.recovery.chunks_total
                && (chunks == 0 || st.recovery.bytes_done > 0)
        };
        let mut last = (None, Instant::now());
        let st = self
            .admin
            .wait_status("recovery", Duration::from_secs(RECOVERY_SECS_MAX), |st| {
                let now = Some((st.recovery.chunks_done, st.recovery.bytes_done));
                if now != last.0 {
                    last = (now, Instant::now());
                }
                done(st) || last.1.elapsed() > Duration::from_secs(RECOVERY_STALL_SECS)
            })
            .await
            .map_err(client_error)?;
        let stalled = (!done(&st)).then(|| {
            format!(
                "{}; {} of {} chunks rebuilt",
                ecstack_client::summary(&st),
                st.recovery.chunks_done,
                st.recovery.chunks_total
            )
        });
        if let Some(s) = &stalled {
            log(&format!(
                "  recovery stalled: nothing rebuilt for {RECOVERY_STALL_SECS} s: {s}"
            ));
        }
        let secs = t.elapsed().as_secs_f64();
        let load = c0.load_since();
        let bytes = st.recovery.bytes_done;
        let mb_per_sec = bytes as f64 / 1e6 / secs;
        log(&format!(
            "  recovery: {chunks} chunks, {:.1} MB in {secs:.1} s: {mb_per_sec:.1} MB/s (CPU {:.0} %)",
            bytes as f64 / 1e6,
            load.cpu_busy_pct
        ));
        Ok(Recovery {
            secs,
            bytes,
            mb_per_sec,
            load,
            stalled,
        })
    }
}

/// One setting's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub label: String,
    pub scheme: String,
    pub code: String,
    pub n: u32,
    pub k: u32,
    pub segment_bytes: u64,
    pub chunk_bytes: u64,
    pub reserve_bytes: u64,
    pub segments: u64,
    pub write_mb_per_sec: f64,
    pub write_load: Load,
    pub updates: u64,
    pub update_iops: f64,
    pub update_secs: f64,
    pub update_load: Load,
    pub read_mb_per_sec: f64,
    pub read_load: Load,
    pub bytes_verified: u64,
    pub recovery_secs: f64,
    pub recovery_bytes: u64,
    pub recovery_mb_per_sec: f64,
    pub recovery_load: Load,
    pub data_chunks: u64,
    pub parity_chunks: u64,
    pub f_avg_data: f64,
    pub f_avg_parity: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SyntheticReport {
    pub config: SyntheticConfig,
    pub rows: Vec<Row>,
}

pub(crate) fn run_err(e: impl std::fmt::Display) -> LabError {
    LabError::Run(e.to_string())
}

/// Runs every setting; `log` hears progress lines.
pub fn run(cfg: &SyntheticConfig, log: &dyn Fn(&str)) -> Result<SyntheticReport> {
    cfg.validate()?;
    let rt = crate::codfs_bench::runtime()?;
    let mut rows = Vec::new();
    for (i, s) in cfg.settings.iter().enumerate() {
        log(&format!(
            "{}: {} of {} OSDs, {} MiB segments, {} MiB of files, {} updates of {} KiB",
            s.label(),
            i + 1,
            cfg.testbed.osds,
            s.segment_bytes >> 20,
            cfg.data_bytes >> 20,
            cfg.updates(),
            cfg.record_bytes >> 10
        ));
        let dir = cfg.dir.join(format!("setting-{}", i + 1));
        let row = rt.block_on(run_setting(cfg, s, &dir, log));
        // Each setting's devices go before the next one starts (disk space).
        let _ = std::fs::remove_dir_all(&dir);
        rows.push(row?);
    }
    Ok(SyntheticReport {
        config: cfg.clone(),
        rows,
    })
}

/// The content of block `g` at version `key` (0: as written; else the update's id).
pub(crate) fn fill_block(buf: &mut [u8], seed: u64, g: u64, key: u64) {
    let mut x =
        seed ^ g.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ key.wrapping_mul(0xD1B5_4A32_D192_ED03);
    for c in buf.chunks_mut(8) {
        // splitmix64
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        c.copy_from_slice(&z.to_le_bytes()[..c.len()]);
    }
}

/// A small deterministic PRNG for the update offsets.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        (self.next() as u128 * n as u128 >> 64) as u64
    }
}

pub(crate) fn client_error(e: ClientError) -> LabError {
    LabError::Run(e.to_string())
}

async fn run_setting(
    cfg: &SyntheticConfig,
    s: &Setting,
    dir: &Path,
    log: &dyn Fn(&str),
) -> Result<Row> {
    let mut bed = cfg.testbed.start(s, dir).await?;
    let file_bytes = cfg.file_bytes();
    let blocks_per_file = file_bytes / cfg.record_bytes;
    let rec = cfg.record_bytes as usize;
    let path = |w: usize| format!("/synth/file-{w}");

    // 1. Sequential write.
    let mut files = Vec::new();
    for w in 0..cfg.writers {
        let mut data = vec![0u8; file_bytes as usize];
        for (b, block) in data.chunks_mut(rec).enumerate() {
            fill_block(block, cfg.seed, w as u64 * blocks_per_file + b as u64, 0);
        }
        files.push(Bytes::from(data));
    }
    let c0 = bed.counters();
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (w, data) in files.into_iter().enumerate() {
        let c = bed.connect()?;
        let p = path(w);
        let opts = PutOptions {
            scheme: Some(s.scheme),
            ..PutOptions::default()
        };
        tasks.spawn(async move { c.put_bytes_with(&p, data, opts).await });
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(run_err)?.map_err(client_error)?;
    }
    let write_secs = t.elapsed().as_secs_f64();
    let write_load = c0.load_since();
    let total_bytes = file_bytes * cfg.writers as u64;
    let write_mb = total_bytes as f64 / 1e6 / write_secs;
    log(&format!(
        "  write {write_mb:.1} MB/s ({write_secs:.1} s, CPU {:.0} %)",
        write_load.cpu_busy_pct
    ));

    // The seed dropped the OSDs' buffer cache before each test.
    bed.drop_caches().await?;

    // 2. Random updates: client u owns the blocks g with g % updaters == u.
    let total_blocks = blocks_per_file * cfg.writers as u64;
    let updates = cfg.updates();
    let c0 = bed.counters();
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for u in 0..cfg.updaters {
        let c = bed.connect()?;
        let mine = (total_blocks + (cfg.updaters - 1 - u) as u64) / cfg.updaters as u64;
        let count =
            updates / cfg.updaters as u64 + u64::from((u as u64) < updates % cfg.updaters as u64);
        let (seed, writers, updaters, record) =
            (cfg.seed, cfg.writers, cfg.updaters as u64, cfg.record_bytes);
        tasks.spawn(async move {
            let mut handles = Vec::new();
            for w in 0..writers {
                handles.push(c.open(&format!("/synth/file-{w}")).await?);
            }
            let mut rng = Rng(seed ^ (u as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F));
            let mut last = Vec::with_capacity(count as usize);
            let mut buf = vec![0u8; record as usize];
            for i in 0..count {
                let g = rng.below(mine.max(1)) * updaters + u as u64;
                let id = (i << 16) | (u as u64 + 1);
                fill_block(&mut buf, seed, g, id);
                let (w, b) = ((g / blocks_per_file) as usize, g % blocks_per_file);
                handles[w].update(b * record, &buf).await?;
                last.push((g, id));
            }
            Ok::<_, ClientError>(last)
        });
    }
    let mut version = vec![0u64; total_blocks as usize];
    while let Some(r) = tasks.join_next().await {
        for (g, id) in r.map_err(run_err)?.map_err(client_error)? {
            version[g as usize] = id;
        }
    }
    let update_secs = t.elapsed().as_secs_f64();
    let update_load = c0.load_since();
    let update_iops = updates as f64 / update_secs;
    log(&format!(
        "  {updates} updates: {update_iops:.1} IOPS ({update_secs:.1} s, CPU {:.0} %, loopback {:.1} MB/s)",
        update_load.cpu_busy_pct, update_load.loopback_mb_per_sec
    ));

    // 3. F_avg: stop every OSD, open its store here, start it again.
    let (data_frags, parity_frags) = bed.fragments(s.k).await?;
    let (f_avg_data, f_avg_parity) = (f_avg(&data_frags), f_avg(&parity_frags));
    log(&format!(
        "  F_avg data {f_avg_data:.2} ({} chunks), parity {f_avg_parity:.2} ({} chunks)",
        data_frags.len(),
        parity_frags.len()
    ));
    let version = Arc::new(version);

    // 4. Sequential read, every block checked.
    let c0 = bed.counters();
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..cfg.writers {
        let c = bed.connect()?;
        let (seed, version) = (cfg.seed, version.clone());
        tasks.spawn(async move {
            let mut out = Vec::with_capacity(file_bytes as usize);
            c.get(&format!("/synth/file-{w}"), 0, None, &mut out)
                .await?;
            let mut want = vec![0u8; rec];
            let mut bad = 0u64;
            if out.len() as u64 != file_bytes {
                return Ok::<_, ClientError>((0, 1));
            }
            for (b, got) in out.chunks(rec).enumerate() {
                let g = w as u64 * blocks_per_file + b as u64;
                fill_block(&mut want, seed, g, version[g as usize]);
                if got != &want[..] {
                    bad += 1;
                }
            }
            Ok((out.len() as u64, bad))
        });
    }
    let (mut verified, mut bad) = (0u64, 0u64);
    while let Some(r) = tasks.join_next().await {
        let (n, b) = r.map_err(run_err)?.map_err(client_error)?;
        verified += n;
        bad += b;
    }
    let read_secs = t.elapsed().as_secs_f64();
    let read_load = c0.load_since();
    if bad > 0 {
        return Err(LabError::Run(format!(
            "{}: {bad} blocks read back differ from what was written and updated",
            s.label()
        )));
    }
    let read_mb = verified as f64 / 1e6 / read_secs;
    log(&format!(
        "  read {read_mb:.1} MB/s ({read_secs:.1} s, {} MB verified, CPU {:.0} %)",
        verified / 1_000_000,
        read_load.cpu_busy_pct
    ));

    bed.drop_caches().await?;

    // 5. Recovery after SIGKILL of two OSDs.
    let recovery = bed.recover_two(bed.last_two(), log).await?;
    bed.cluster.stop();
    if let Some(st) = recovery.stalled {
        return Err(LabError::Run(format!(
            "{}: recovery stalled (nothing rebuilt for {RECOVERY_STALL_SECS} s): {st}",
            s.label()
        )));
    }
    Ok(Row {
        label: s.label(),
        scheme: s.scheme.to_string(),
        code: s.family.clone(),
        n: s.k + s.m,
        k: s.k,
        segment_bytes: s.segment_bytes,
        chunk_bytes: s.chunk_bytes(),
        reserve_bytes: s.reserve_bytes,
        segments: cfg.writers as u64 * file_bytes.div_ceil(s.segment_bytes),
        write_mb_per_sec: write_mb,
        write_load,
        updates,
        update_iops,
        update_secs,
        update_load,
        read_mb_per_sec: read_mb,
        read_load,
        bytes_verified: verified,
        recovery_secs: recovery.secs,
        recovery_bytes: recovery.bytes,
        recovery_mb_per_sec: recovery.mb_per_sec,
        recovery_load: recovery.load,
        data_chunks: data_frags.len() as u64,
        parity_chunks: parity_frags.len() as u64,
        f_avg_data,
        f_avg_parity,
    })
}

/// One row of the CSV (flat).
#[derive(Serialize)]
struct CsvRow<'a> {
    label: &'a str,
    scheme: &'a str,
    code: &'a str,
    n: u32,
    k: u32,
    segment_bytes: u64,
    reserve_bytes: u64,
    segments: u64,
    write_mb_per_sec: f64,
    write_cpu_pct: f64,
    write_cpu_ours_pct: f64,
    updates: u64,
    update_iops: f64,
    update_cpu_pct: f64,
    update_cpu_ours_pct: f64,
    update_loopback_mb_per_sec: f64,
    read_mb_per_sec: f64,
    read_cpu_pct: f64,
    read_cpu_ours_pct: f64,
    bytes_verified: u64,
    recovery_secs: f64,
    recovery_bytes: u64,
    recovery_mb_per_sec: f64,
    recovery_cpu_pct: f64,
    recovery_cpu_ours_pct: f64,
    f_avg_data: f64,
    f_avg_parity: f64,
}

impl SyntheticReport {
    fn name(&self) -> &'static str {
        match self.config.which {
            Which::Synthetic => "codfs-synthetic",
            Which::Overhead => "codfs-overhead",
        }
    }

    fn row(&self, scheme: UpdateScheme) -> Option<&Row> {
        self.rows.iter().find(|r| r.scheme == scheme.name())
    }

    /// `a / b` of a figure between two schemes, when both ran.
    fn ratio(&self, a: UpdateScheme, b: UpdateScheme, f: fn(&Row) -> f64) -> Option<f64> {
        Some(f(self.row(a)?) / f(self.row(b)?).max(1e-12))
    }

    pub fn markdown(&self) -> String {
        let c = &self.config;
        let mut s = match c.which {
            Which::Synthetic => String::from(
                "# CodFS update schemes on a synthetic workload (§5.2, Fig. 5.2, Table 5.1)\n\n",
            ),
            Which::Overhead => String::from(
                "# CodFS reserved space versus update efficiency (§5.2.5, Fig. 5.3)\n\n",
            ),
        };
        s += &format!(
            "{} OSDs ({}), {} MiB of files from {} writers, {} random {} KiB updates (aligned, uniform; {} MiB per 16 MiB of file) from {} clients, one at a time each; {}{}. Every byte read back was checked against the model: {} MB verified in all.\n\n",
            c.testbed.osds,
            c.testbed.stores(),
            c.data_bytes >> 20,
            c.writers,
            self.rows.first().map_or(0, |r| r.updates),
            c.record_bytes >> 10,
            c.update_bytes_per_16mib >> 20,
            c.updaters,
            if c.testbed.insecure { "plain HTTP/2 on loopback" } else { "mTLS on loopback" },
            if c.quick { " (--quick: sizes far too small for the figures to mean anything)" } else { "" },
            self.rows.iter().map(|r| r.bytes_verified).sum::<u64>() / 1_000_000,
        );
        s += "| setting | segments | write MB/s | update IOPS | read MB/s | recovery MB/s | recovery s | F_avg data | F_avg parity | CPU % ours (machine) write / update / read / recovery | loopback MB/s (update) |\n";
        s += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n";
        for r in &self.rows {
            s += &format!(
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {} / {} / {} / {} | {:.1} |\n",
                r.label,
                r.segments,
                r.write_mb_per_sec,
                r.update_iops,
                r.read_mb_per_sec,
                r.recovery_mb_per_sec,
                r.recovery_secs,
                r.f_avg_data,
                r.f_avg_parity,
                r.write_load.cpu(),
                r.update_load.cpu(),
                r.read_load.cpu(),
                r.recovery_load.cpu(),
                r.update_load.loopback_mb_per_sec,
            );
        }
        s += "\n";
        match c.which {
            Which::Synthetic => s += &self.synthetic_claims(),
            Which::Overhead => s += &self.overhead_claims(),
        }
        s
    }

    fn synthetic_claims(&self) -> String {
        use UpdateScheme::{Fl, Fo, ParityLog as Pl, Plr};
        let f = |x: Option<f64>| x.map_or("–".to_owned(), |v| format!("{v:.2}"));
        let iops = |r: &Row| r.update_iops;
        let read = |r: &Row| r.read_mb_per_sec;
        let rec = |r: &Row| r.recovery_mb_per_sec;
        let mut s =
            String::from("## Against the seed\n\n| claim (seed) | seed | ours |\n|---|---|---|\n");
        // Fig. 5.2b: FO has ≥ 21 % fewer IOPS than each other scheme.
        let fo_short = [Fl, Pl, Plr]
            .iter()
            .filter_map(|&o| self.ratio(Fo, o, iops))
            .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
        s += &format!(
            "| Fig. 5.2b: FO IOPS / best other's, at most | ≤ 0.79 (≥ 21 % fewer) | {} |\n",
            f(fo_short)
        );
        let others: Vec<f64> = [Fl, Pl, Plr]
            .iter()
            .filter_map(|&o| self.row(o).map(iops))
            .collect();
        let spread = (others.len() > 1).then(|| {
            let (lo, hi) = others
                .iter()
                .fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
            100.0 * (hi - lo) / hi.max(1e-12)
        });
        s += &format!(
            "| Fig. 5.2b: spread of FL / CodFS PL / PLR IOPS | < 4.1 % | {} |\n",
            spread.map_or("–".into(), |v| format!("{v:.1} %"))
        );
        s += &format!(
            "| Fig. 5.2b: PLR / FO IOPS | ≥ 1.27 | {} |\n",
            f(self.ratio(Plr, Fo, iops))
        );
        s += &format!(
            "| Fig. 5.2c: FL read / FO read | ≈ 0.5 | {} |\n",
            f(self.ratio(Fl, Fo, read))
        );
        s += &format!(
            "| Fig. 5.2c: PLR read / FO read | ≈ 1 (target ≥ 0.95) | {} |\n",
            f(self.ratio(Plr, Fo, read))
        );
        s += &format!(
            "| Fig. 5.2d: PLR / CodFS PL recovery | ≈ 3 | {} |\n",
            f(self.ratio(Plr, Pl, rec))
        );
        s += &format!(
            "| Fig. 5.2d: FO / FL recovery | up to 4.5 | {} |\n",
            f(self.ratio(Fo, Fl, rec))
        );
        s += &format!(
            "| §5.2.6: PLR / FO recovery | ≥ 0.908 (< 9.2 % less) | {} |\n",
            f(self.ratio(Plr, Fo, rec))
        );
        for (name, d, p) in SEED_TABLE_5_1 {
            if let Some(r) = self.rows.iter().find(|r| r.scheme == name) {
                s += &format!(
                    "| Table 5.1: F_avg {name} data / parity | {d} / {p} | {:.2} / {:.2} |\n",
                    r.f_avg_data, r.f_avg_parity
                );
            }
        }
        s
    }

    fn overhead_claims(&self) -> String {
        let find = |scheme: &str, n: u32, k: u32| {
            self.rows
                .iter()
                .find(|r| r.scheme == scheme && r.n == n && r.k == k)
        };
        let mut s = String::from(
            "## Against the seed (Fig. 5.3)\n\n| claim (seed) | seed | ours |\n|---|---|---|\n",
        );
        if let (Some(plr), Some(fo86)) = (find("plr", 6, 4), find("fo", 8, 6)) {
            s += &format!(
                "| FO (8,6) IOPS / PLR (6,4) IOPS | ≤ 0.8 (≥ 20 % slower) | {:.2} |\n",
                fo86.update_iops / plr.update_iops.max(1e-12)
            );
        }
        for scheme in ["fo", "fl", "codfs-pl"] {
            if let (Some(a), Some(b)) = (find(scheme, 8, 4), find(scheme, 8, 6)) {
                s += &format!(
                    "| {scheme}: (8,4) IOPS / (8,6) IOPS | < 1 (\"significantly worse\") | {:.2} |\n",
                    a.update_iops / b.update_iops.max(1e-12)
                );
            }
        }
        if let Some(plr) = find("plr", 6, 4) {
            for scheme in ["fl", "codfs-pl"] {
                for (n, k) in [(8, 6), (8, 4)] {
                    if let Some(o) = find(scheme, n, k) {
                        s += &format!(
                            "| PLR (6,4) recovery / {scheme} ({n},{k}) | > 1 (\"significantly higher\") | {:.2} |\n",
                            plr.recovery_mb_per_sec / o.recovery_mb_per_sec.max(1e-12)
                        );
                    }
                }
            }
        }
        s
    }

    pub fn write(&self, out: &Path) -> Result<()> {
        let name = self.name();
        let rows: Vec<CsvRow> = self
            .rows
            .iter()
            .map(|r| CsvRow {
                label: &r.label,
                scheme: &r.scheme,
                code: &r.code,
                n: r.n,
                k: r.k,
                segment_bytes: r.segment_bytes,
                reserve_bytes: r.reserve_bytes,
                segments: r.segments,
                write_mb_per_sec: r.write_mb_per_sec,
                write_cpu_pct: r.write_load.cpu_busy_pct,
                write_cpu_ours_pct: r.write_load.cpu_ours_pct,
                updates: r.updates,
                update_iops: r.update_iops,
                update_cpu_pct: r.update_load.cpu_busy_pct,
                update_cpu_ours_pct: r.update_load.cpu_ours_pct,
                update_loopback_mb_per_sec: r.update_load.loopback_mb_per_sec,
                read_mb_per_sec: r.read_mb_per_sec,
                read_cpu_pct: r.read_load.cpu_busy_pct,
                read_cpu_ours_pct: r.read_load.cpu_ours_pct,
                bytes_verified: r.bytes_verified,
                recovery_secs: r.recovery_secs,
                recovery_bytes: r.recovery_bytes,
                recovery_mb_per_sec: r.recovery_mb_per_sec,
                recovery_cpu_pct: r.recovery_load.cpu_busy_pct,
                recovery_cpu_ours_pct: r.recovery_load.cpu_ours_pct,
                f_avg_data: r.f_avg_data,
                f_avg_parity: r.f_avg_parity,
            })
            .collect();
        write_report(out, name, &self.markdown(), &rows)?;
        let cats: Vec<String> = self.rows.iter().map(|r| r.label.clone()).collect();
        for (file, title, y, f) in [
            (
                "write",
                "Sequential write (Fig. 5.2a)",
                "MB/s",
                (|r: &Row| r.write_mb_per_sec) as fn(&Row) -> f64,
            ),
            (
                "update",
                "Random 128 KiB updates (Fig. 5.2b / 5.3a)",
                "IOPS",
                |r| r.update_iops,
            ),
            (
                "read",
                "Sequential read after updates (Fig. 5.2c)",
                "MB/s",
                |r| r.read_mb_per_sec,
            ),
            (
                "recovery",
                "Recovery of two OSDs (Fig. 5.2d / 5.3b)",
                "MB/s",
                |r| r.recovery_mb_per_sec,
            ),
        ] {
            Bars {
                title,
                x_label: "setting",
                y_label: y,
                categories: cats.clone(),
                series: vec![("ours".into(), self.rows.iter().map(f).collect())],
                stacked: false,
            }
            .write_svg(&out.join(format!("{name}-{file}.svg")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_differ_by_key_and_repeat_by_key() {
        let (mut a, mut b, mut c) = (vec![0u8; 4096], vec![0u8; 4096], vec![0u8; 4096]);
        fill_block(&mut a, 1, 7, 0);
        fill_block(&mut b, 1, 7, 0);
        fill_block(&mut c, 1, 7, 1);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn overhead_settings_store_eight_chunks_per_segment() {
        for s in SyntheticConfig::overhead(4 << 20) {
            // n chunks, plus one chunk of reserve per parity chunk for PLR.
            let stored = s.k + s.m + (s.reserve_bytes / s.chunk_bytes()) as u32 * s.m;
            assert_eq!(stored, 8, "{}", s.label());
            assert_eq!(s.chunk_bytes(), 4 << 20);
        }
    }
}
