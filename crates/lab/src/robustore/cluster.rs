//! `ecstack experiment robustore-cluster`: RobuSTore's reads on the real cluster, beside the
//! simulator on the same disks (docs/robustore.md "On the cluster").
//!
//! The testbed: 16 OSD processes on 127.0.0.1, each storing on its own throttled device file
//! (`throttled:bw=R:file:…`) whose rate R is one cell of the seed's Table 6-1 (0.52–53 MB/s, about
//! 100-fold) times `scale` (default 0.5, so that the fastest eight together move about 60 MB/s and
//! the two cores, which also run TLS, the client's decoding and the 16 daemons, are not what limits a
//! read). The rates go to `testbed.json` in the simulator's format (`ecstack sim robustore
//! --disk-mbps @testbed.json` reads it).
//!
//! Each access picks H = 8 of the 16 OSDs at random (as the simulator does), writes one new file of
//! `file_bytes` on exactly those OSDs in each mode — RS 6+2 (a placement hint), LT and RaptorQ robust
//! files with redundancy D — then reads each back, timed: RS through the segments' primaries and
//! directly from the data chunks' holders, the robust files all-then-cancel. The files are removed
//! before the next access. The simulator runs the same accesses (`run_point` per access, on a
//! testbed of exactly the disks that access used, read after write, the same K, block size and D):
//! RobuSTore for the robust files, RAID-0 over the RS file's six data holders standing for RS.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ecstack_base::Rng;
use ecstack_client::robust::RobustOptions;
use ecstack_client::{Bytes, Client, PutOptions, ReadPath};
use ecstack_mds_proto::RobustCode;
use ecstack_osd_proto::StreamPriority;
use ecstack_rpc::Security;
use ecstack_sim::robustore::{
    disk::TABLE_6_1, run_point, Config, Op, Rateless, Scheme, TestbedSpec, Variation,
};

use crate::codfs_local::{LocalCluster, LocalSpec};
use crate::codfs_synthetic::client_error;
use crate::plot::Bars;
use crate::{io_at, LabError, Result};

/// What to run.
#[derive(Clone, Debug)]
pub struct ClusterExpConfig {
    /// The `ecstack` binary (the daemons are its `mds` and `osd` commands).
    pub exe: PathBuf,
    pub out: PathBuf,
    pub seed: u64,
    /// 3 accesses of 2 MiB: the CI scale.
    pub quick: bool,
    /// Accesses per point (default 20; quick 3).
    pub accesses: Option<usize>,
    /// Bytes per file (default 8 MiB; quick 2 MiB).
    pub file_bytes: Option<u64>,
    /// Coded block size of the robust files (and the simulator's block).
    pub block_bytes: u32,
    /// D of the robust files.
    pub redundancy: f64,
    /// Table 6-1's rates times this.
    pub scale: f64,
    /// Also run the point with Poisson background load (each OSD's store kept about
    /// `background_busy` busy by one-block reads of an object of its own); off with `quick`.
    pub background: bool,
    pub background_busy: f64,
}

impl ClusterExpConfig {
    pub fn new(exe: PathBuf, out: PathBuf) -> ClusterExpConfig {
        ClusterExpConfig {
            exe,
            out,
            seed: 1,
            quick: false,
            accesses: None,
            file_bytes: None,
            block_bytes: 256 << 10,
            redundancy: 3.0,
            scale: 0.5,
            background: true,
            background_busy: 0.5,
        }
    }

    fn accesses(&self) -> usize {
        self.accesses.unwrap_or(if self.quick { 3 } else { 20 })
    }

    fn file_bytes(&self) -> u64 {
        self.file_bytes
            .unwrap_or(if self.quick { 2 << 20 } else { 8 << 20 })
    }
}

/// Disks one access uses (H), OSDs in the testbed, and the RS code beside the robust files.
pub const H: usize = 8;
pub const POOL: usize = 16;
const RS_K: u32 = 6;
const RS_M: u32 = 2;

/// The 16 cells of Table 6-1 times `scale`, MB/s (random layouts first, then sequential).
pub fn testbed_rates(scale: f64) -> Vec<f64> {
    TABLE_6_1.iter().flatten().map(|r| r * scale).collect()
}

/// The modes compared.
const MODES: [&str; 4] = ["rs-primary", "rs-direct", "robust-lt", "robust-raptorq"];

/// One mode's figures over the accesses.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ModeRow {
    /// `quiet`, or `background` (Poisson background reads at every OSD).
    pub point: String,
    pub mode: String,
    pub accesses: usize,
    /// Mean of size / latency, MB/s (MB = 2^20 bytes, as the simulator).
    pub bandwidth_mbps: f64,
    pub latency_mean_s: f64,
    /// Sample standard deviation of the read latency.
    pub latency_std_s: f64,
    /// Robust: blocks read (before the cancels took effect) over K, minus one.
    pub io_overhead: Option<f64>,
    /// Robust: blocks the decoder took over K, minus one.
    pub reception_overhead: Option<f64>,
    /// The simulator on the same disks (RobuSTore for robust modes, RAID-0 for RS), MB/s.
    pub sim_bandwidth_mbps: f64,
    pub sim_latency_std_s: f64,
    pub write_mean_s: f64,
    /// Per access, the testbed disks (indices into `testbed_rates`) the read used: the H picked
    /// for a robust file, the data chunks' holders for RS. The simulator runs on exactly these.
    #[serde(skip)]
    pub disk_sets: Vec<Vec<usize>>,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn std_dev(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

fn run_err(e: impl std::fmt::Display) -> LabError {
    LabError::Run(e.to_string())
}

fn security_of(cluster: &LocalCluster) -> Result<Security> {
    Security::load(&cluster.config().certs_dir(), "client").map_err(run_err)
}

/// The simulator on exactly the disks each access of the cluster run used: one simulated access
/// per real one, on a testbed of those disks' rates (so the simulator picks all of them), reading
/// after a write as the cluster did (RobuSTore's speculative write leaves the fast disks holding
/// more blocks; RAID-0's layout does not depend on its write). Returns (mean MB/s, latency std s).
fn sim_point(
    c: &ClusterExpConfig,
    scheme: Scheme,
    code: Rateless,
    rates: &[f64],
    disk_sets: &[Vec<usize>],
) -> Result<(f64, f64)> {
    let mut latencies = Vec::with_capacity(disk_sets.len());
    for (a, set) in disk_sets.iter().enumerate() {
        let mut cfg = Config::baseline(scheme);
        cfg.op = Op::ReadAfterWrite;
        cfg.disks = set.len();
        cfg.data_bytes = c.file_bytes();
        // RS stores a one-segment file as K data chunks of a K-th of it, one per data holder:
        // RAID-0 with that stripe unit puts exactly one block on each of the K disks.
        cfg.block_bytes = if scheme == Scheme::Raid0 {
            c.file_bytes().div_ceil(set.len().max(1) as u64)
        } else {
            u64::from(c.block_bytes)
        };
        cfg.redundancy = if scheme == Scheme::Raid0 {
            0.0
        } else {
            c.redundancy
        };
        let chosen: Vec<f64> = set.iter().map(|&d| rates[d]).collect();
        cfg.variation = Variation::Fixed(TestbedSpec::from_rates(&chosen));
        cfg.code = code;
        cfg.rtt = 1e-4;
        cfg.metadata_cost = 1e-3;
        cfg.accesses = 1;
        cfg.seed = c.seed.wrapping_mul(1_000_003).wrapping_add(a as u64);
        let (_, all) = run_point(&cfg).map_err(run_err)?;
        latencies.extend(all.iter().map(|r| r.latency));
    }
    let mb = c.file_bytes() as f64 / 1_048_576.0;
    Ok((
        mean(&latencies.iter().map(|l| mb / l).collect::<Vec<_>>()),
        std_dev(&latencies),
    ))
}

/// Runs the experiment; returns the files written (report.md, results.csv, bandwidth.svg,
/// testbed.json).
pub fn run(c: &ClusterExpConfig, progress: &(dyn Fn(usize, usize) + Sync)) -> Result<Vec<PathBuf>> {
    if !(c.redundancy.is_finite() && c.redundancy > 0.0) {
        return Err(LabError::Config {
            field: "redundancy",
            msg: format!("D = {} must be above 0", c.redundancy),
        });
    }
    if !(c.background_busy > 0.0 && c.background_busy < 1.0) {
        return Err(LabError::Config {
            field: "background-busy",
            msg: format!("{} must be between 0 and 1", c.background_busy),
        });
    }
    if !(c.scale.is_finite() && c.scale > 0.0) {
        return Err(LabError::Config {
            field: "scale",
            msg: format!("{} must be above 0", c.scale),
        });
    }
    std::fs::create_dir_all(&c.out).map_err(io_at(&c.out))?;
    let rates = testbed_rates(c.scale);
    let testbed = TestbedSpec::from_rates(&rates);
    let testbed_path = c.out.join("testbed.json");
    std::fs::write(
        &testbed_path,
        serde_json::to_string_pretty(&testbed).map_err(run_err)?,
    )
    .map_err(io_at(&testbed_path))?;

    let dir = c.out.join("cluster");
    let _ = std::fs::remove_dir_all(&dir);
    let mut spec = LocalSpec::new(c.exe.clone(), dir.clone(), POOL);
    spec.k = RS_K;
    spec.m = RS_M;
    spec.family = "rs-vand".into();
    // One segment per RS file, so that its six data chunks sit on six of the access's OSDs, as
    // RAID-0's blocks on its six disks (with smaller segments, a file's segments spread their data
    // chunks over up to all eight, and the slowest data holder is drawn from more disks).
    spec.segment_bytes = c.file_bytes().next_multiple_of(u64::from(RS_K) << 20);
    let image = (4 * c.file_bytes() * (1 + c.redundancy.ceil() as u64)).max(256 << 20);
    spec.store_devices = rates
        .iter()
        .enumerate()
        .map(|(i, r)| {
            format!(
                "throttled:bw={}:file:{}?size={image}",
                (r * 1_048_576.0) as u64,
                dir.join(format!("osd-{i}.img")).display()
            )
        })
        .collect();
    let mut cluster = LocalCluster::start(spec).map_err(client_error)?;
    let rt = crate::codfs_bench::runtime()?;
    let rows = rt.block_on(async {
        let mut rows = accesses(c, &cluster, progress, None).await?;
        if c.background && !c.quick {
            rows.extend(accesses(c, &cluster, progress, Some(c.background_busy)).await?);
        }
        Ok::<_, LabError>(rows)
    });
    cluster.stop();
    let mut rows = rows?;

    for row in rows.iter_mut().filter(|r| r.point == "quiet") {
        let (scheme, code) = match row.mode.as_str() {
            "robust-lt" => (Scheme::RobuStore, Rateless::Lt { c: 1.0, delta: 0.5 }),
            "robust-raptorq" => (Scheme::RobuStore, Rateless::RaptorQ),
            _ => (Scheme::Raid0, Rateless::Lt { c: 1.0, delta: 0.5 }),
        };
        // RS reads its K = 6 data chunks: RAID-0 over the 6 data holders stands for it.
        let (bw, std) = sim_point(c, scheme, code, &rates, &row.disk_sets)?;
        row.sim_bandwidth_mbps = bw;
        row.sim_latency_std_s = std;
    }
    let csv = c.out.join("results.csv");
    crate::table::write_csv(&csv, &rows)?;
    let svg = c.out.join("bandwidth.svg");
    Bars {
        title: "RobuSTore on the cluster: read bandwidth, real and simulated",
        x_label: "mode (H = 8 of 16 throttled OSDs)",
        y_label: "read bandwidth (MB/s)",
        categories: rows
            .iter()
            .map(|r| format!("{} ({})", r.mode, r.point))
            .collect(),
        series: vec![
            (
                "cluster".into(),
                rows.iter().map(|r| r.bandwidth_mbps).collect(),
            ),
            (
                "simulator".into(),
                rows.iter().map(|r| r.sim_bandwidth_mbps).collect(),
            ),
        ],
        stacked: false,
    }
    .write_svg(&svg)?;
    let md = c.out.join("report.md");
    std::fs::write(&md, report(c, &rates, &rows)).map_err(io_at(&md))?;
    Ok(vec![md, csv, svg, testbed_path])
}

/// One point: `c.accesses()` accesses in every mode; with `busy`, each OSD's store is also kept
/// that busy by Poisson-arriving one-block reads of a background object on it (normal priority;
/// the robust accesses' streams run at high priority, so admission control lets them preempt).
async fn accesses(
    c: &ClusterExpConfig,
    cluster: &LocalCluster,
    progress: &(dyn Fn(usize, usize) + Sync),
    busy: Option<f64>,
) -> Result<Vec<ModeRow>> {
    let security = Security::load(&cluster.config().certs_dir(), "client").map_err(run_err)?;
    let client = Client::connect(cluster.config(), security.clone()).map_err(client_error)?;
    let direct = Client::connect_with(
        cluster.config(),
        security,
        ecstack_client::ClientOptions {
            read_path: ReadPath::Direct,
            ..ecstack_client::ClientOptions::default()
        },
    )
    .map_err(client_error)?;
    client
        .wait_for_osds(POOL, Duration::from_secs(60))
        .await
        .map_err(client_error)?;
    let status = client.status().await.map_err(client_error)?;
    let mut ids: Vec<u32> = status.osds.iter().map(|o| o.osd_id).collect();
    ids.sort_unstable();
    let mut rng = Rng::new(c.seed ^ u64::from(busy.is_some()));
    let mut background = tokio::task::JoinSet::new();
    if let Some(busy) = busy {
        let rates = testbed_rates(c.scale);
        for (i, &id) in ids.iter().enumerate() {
            let path = format!("/background-{id}");
            let bg = Bytes::from(vec![0x5a; 4 * c.block_bytes as usize]);
            let opts = RobustOptions {
                code: RobustCode::RaptorQ,
                block_bytes: c.block_bytes,
                redundancy: Some(0.25),
                osds: Some(vec![id]),
                ..RobustOptions::default()
            };
            client
                .put_robust(&path, bg, &opts)
                .await
                .map_err(client_error)?;
            let info = client.stat(&path).await.map_err(client_error)?;
            let o = info.robust.expect("a robust file").objects[0].clone();
            let addr = o.blocks[0].addr.clone();
            let osd = ecstack_osd_proto::OsdClient::connect(&addr, &security_of(cluster)?)
                .map_err(run_err)?
                .for_osd(id);
            // One block takes block / rate; a mean interval of that / busy keeps it that busy.
            let service = f64::from(c.block_bytes) / (rates[i % rates.len()] * 1_048_576.0);
            let mean = service / busy.clamp(0.01, 0.99);
            let mut r = Rng::new(c.seed.wrapping_add(u64::from(id)));
            background.spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs_f64(r.exp(mean))).await;
                    if let Ok(mut reader) = osd
                        .get_blocks(o.object_id, o.version, StreamPriority::Normal)
                        .await
                    {
                        let _ = reader.next().await;
                    }
                }
            });
        }
    }
    let priority = if busy.is_some() {
        StreamPriority::High
    } else {
        StreamPriority::Normal
    };
    let n = c.accesses();
    let mut lat: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    let mut writes: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    let mut overhead = vec![(0u64, 0u64, 0u64); MODES.len()]; // (k, received, used)
    let mut disk_sets: Vec<Vec<Vec<usize>>> = vec![Vec::new(); MODES.len()];
    // OSD i stores on testbed disk i (`store_devices` in order).
    let disk_of = |id: u32| ids.iter().position(|&x| x == id).unwrap_or(0);
    for a in 0..n {
        progress(a, n);
        let mut pick = ids.clone();
        rng.shuffle(&mut pick);
        pick.truncate(H);
        let mut data = vec![0u8; c.file_bytes() as usize];
        rng.fill(&mut data);
        let data = Bytes::from(data);
        // RS 6+2 on the chosen OSDs, read through the primaries and directly.
        let path = format!("/rs-{a}");
        let t = Instant::now();
        client
            .put_bytes_with(
                &path,
                data.clone(),
                PutOptions {
                    osd_hint: pick.clone(),
                    ..PutOptions::default()
                },
            )
            .await
            .map_err(client_error)?;
        let w = t.elapsed().as_secs_f64();
        let info = client.stat(&path).await.map_err(client_error)?;
        let mut holders: Vec<usize> = info
            .segments
            .iter()
            .flat_map(|s| s.chunks.iter().filter(|ch| ch.index < RS_K))
            .map(|ch| disk_of(ch.osd_id))
            .collect();
        holders.sort_unstable();
        holders.dedup();
        for (m, reader) in [(0usize, &client), (1, &direct)] {
            disk_sets[m].push(holders.clone());
            let t = Instant::now();
            let mut out = Vec::with_capacity(data.len());
            reader
                .get(&path, 0, None, &mut out)
                .await
                .map_err(client_error)?;
            lat[m].push(t.elapsed().as_secs_f64());
            writes[m].push(w);
            if out != data {
                return Err(LabError::Run(format!(
                    "{path} read back wrong ({})",
                    MODES[m]
                )));
            }
        }
        client.remove(&path).await.map_err(client_error)?;
        // The robust files on the same OSDs.
        for (m, code) in [(2usize, RobustCode::Lt), (3, RobustCode::RaptorQ)] {
            let path = format!("/{}-{a}", MODES[m]);
            let opts = RobustOptions {
                code,
                block_bytes: c.block_bytes,
                redundancy: Some(c.redundancy),
                osds: Some(pick.clone()),
                object_blocks: Some(c.file_bytes().div_ceil(u64::from(c.block_bytes)) as u32),
                priority,
                ..RobustOptions::default()
            };
            let t = Instant::now();
            client
                .put_robust(&path, data.clone(), &opts)
                .await
                .map_err(client_error)?;
            writes[m].push(t.elapsed().as_secs_f64());
            disk_sets[m].push(pick.iter().map(|&id| disk_of(id)).collect());
            let t = Instant::now();
            let info = client.stat(&path).await.map_err(client_error)?;
            let (got, report) = client
                .get_robust(&info, priority)
                .await
                .map_err(client_error)?;
            lat[m].push(t.elapsed().as_secs_f64());
            if got != data {
                return Err(LabError::Run(format!("{path} read back wrong")));
            }
            overhead[m].0 += report.k;
            overhead[m].1 += report.received;
            overhead[m].2 += report.used;
            client.remove(&path).await.map_err(client_error)?;
        }
    }
    progress(n, n);
    background.abort_all();
    let point = if busy.is_some() {
        "background"
    } else {
        "quiet"
    };
    let mb = c.file_bytes() as f64 / 1_048_576.0;
    Ok(MODES
        .iter()
        .enumerate()
        .map(|(m, name)| {
            let (k, received, used) = overhead[m];
            ModeRow {
                point: point.to_owned(),
                mode: (*name).to_owned(),
                accesses: lat[m].len(),
                bandwidth_mbps: mean(&lat[m].iter().map(|l| mb / l).collect::<Vec<_>>()),
                latency_mean_s: mean(&lat[m]),
                latency_std_s: std_dev(&lat[m]),
                io_overhead: (k > 0).then(|| received as f64 / k as f64 - 1.0),
                reception_overhead: (k > 0).then(|| used as f64 / k as f64 - 1.0),
                sim_bandwidth_mbps: 0.0,
                sim_latency_std_s: 0.0,
                write_mean_s: mean(&writes[m]),
                disk_sets: disk_sets[m].clone(),
            }
        })
        .collect())
}

/// "close" within 25 %, the simulator report's verdict rule.
fn verdict(real: f64, sim: f64) -> &'static str {
    if sim > 0.0 && (real / sim - 1.0).abs() <= 0.25 {
        "close"
    } else {
        "differs"
    }
}

fn report(c: &ClusterExpConfig, rates: &[f64], rows: &[ModeRow]) -> String {
    let mut s = String::new();
    s.push_str("# RobuSTore on the cluster\n\n");
    s.push_str(&format!(
        "16 OSDs on throttled stores at Table 6-1's 16 cells × {} ({:.2}–{:.1} MB/s); each access \
         picks H = {H} at random and writes, then reads, one {} MiB file per mode on them (RS {RS_K}+{RS_M} \
         by a placement hint; robust files with D = {}, {} KiB blocks). {} accesses per point, seed {}. \
         `testbed.json` holds the rates. The `background` point adds Poisson one-block reads at every \
         OSD keeping its store about {:.0} % busy (the robust accesses then run at high priority: \
         admission control lets them preempt the background streams).\n\n",
        c.scale,
        rates.iter().cloned().fold(f64::MAX, f64::min),
        rates.iter().cloned().fold(0.0, f64::max),
        c.file_bytes() >> 20,
        c.redundancy,
        c.block_bytes >> 10,
        c.accesses(),
        c.seed,
        c.background_busy * 100.0
    ));
    s.push_str("| point | mode | read MB/s | latency mean s | latency std s | I/O overhead | reception overhead | write s | simulator MB/s | simulator std s |\n|---|---|---|---|---|---|---|---|---|---|\n");
    let opt = |v: Option<f64>| v.map_or("–".to_string(), |x| format!("{x:.3}"));
    for r in rows {
        let sim = if r.point == "quiet" {
            (
                format!("{:.2}", r.sim_bandwidth_mbps),
                format!("{:.3}", r.sim_latency_std_s),
            )
        } else {
            ("–".into(), "–".into())
        };
        s.push_str(&format!(
            "| {} | {} | {:.2} | {:.3} | {:.3} | {} | {} | {:.2} | {} | {} |\n",
            r.point,
            r.mode,
            r.bandwidth_mbps,
            r.latency_mean_s,
            r.latency_std_s,
            opt(r.io_overhead),
            opt(r.reception_overhead),
            r.write_mean_s,
            sim.0,
            sim.1
        ));
    }
    s.push_str(
        "\n## Targets\n\n| point | claim | figure | target | verdict |\n|---|---|---|---|---|\n",
    );
    let points: Vec<String> = {
        let mut p: Vec<String> = rows.iter().map(|r| r.point.clone()).collect();
        p.dedup();
        p
    };
    for point in &points {
        let of = |mode: &str| {
            rows.iter()
                .find(|r| &r.point == point && r.mode == mode)
                .cloned()
                .unwrap_or_default()
        };
        let (rs, rsd) = (of("rs-primary"), of("rs-direct"));
        let quiet = point == "quiet";
        for r in rows.iter().filter(|r| &r.point == point) {
            if quiet {
                s.push_str(&format!(
                    "| {point} | {} read bandwidth, cluster vs simulator | {:.2} vs {:.2} MB/s | within 25 % | {} |\n",
                    r.mode,
                    r.bandwidth_mbps,
                    r.sim_bandwidth_mbps,
                    verdict(r.bandwidth_mbps, r.sim_bandwidth_mbps)
                ));
            }
            if !r.mode.starts_with("robust") {
                continue;
            }
            let ratio = r.bandwidth_mbps / rs.bandwidth_mbps.max(1e-9);
            let ratio_d = r.bandwidth_mbps / rsd.bandwidth_mbps.max(1e-9);
            s.push_str(&format!(
                "| {point} | {} / RS read bandwidth (primaries; direct) | {ratio:.2}×; {ratio_d:.2}× | ≥ 3× | {} |\n",
                r.mode,
                if ratio >= 3.0 { "met" } else { "missed" }
            ));
            let dev = r.latency_std_s / rs.latency_std_s.max(1e-9);
            s.push_str(&format!(
                "| {point} | {} / RS latency deviation | {dev:.3} | ≤ 1/3 | {} |\n",
                r.mode,
                if dev <= 1.0 / 3.0 { "met" } else { "missed" }
            ));
            if quiet {
                let sim_ratio = r.sim_bandwidth_mbps / rs.sim_bandwidth_mbps.max(1e-9);
                s.push_str(&format!(
                    "| {point} | {} / RS on the cluster vs RobuSTore / RAID-0 simulated | {ratio:.2}× vs {sim_ratio:.2}× | within 25 % | {} |\n",
                    r.mode,
                    verdict(ratio, sim_ratio)
                ));
            }
            if r.mode == "robust-raptorq" {
                let ro = r.reception_overhead.unwrap_or(f64::NAN);
                s.push_str(&format!(
                    "| {point} | RaptorQ reception overhead | {:.2} % | < 1 % | {} |\n",
                    ro * 100.0,
                    if ro < 0.01 { "met" } else { "missed" }
                ));
            }
        }
    }
    s.push_str(
        "\n## Why the cluster and the simulator differ\n\n\
         - Each simulated access runs on exactly the disks its cluster access used (the H picked \
         for a robust file; the data chunks' holders of the RS file, one segment each) and reads \
         after a write, as the cluster did: RobuSTore's speculative write leaves the fast disks \
         holding more blocks.\n\
         - The simulator's RAID-0 stands for RS 6+2: its stripe unit is the RS file's chunk (a \
         sixth of the file), so each of the six data holders holds one unit, and the slowest of \
         them sets the time, as on the cluster. RS reads its chunks through a primary (two hops: \
         a holder to the primary, the primary to the client) or directly; the simulator moves \
         each block once.\n\
         - A throttled store charges every request at its rate with no positioning, as the \
         simulator's fixed-rate disks do; the network is loopback (the simulator's RTT is set to \
         0.1 ms and its metadata cost to 1 ms to match).\n\
         - The robust reads decode on the client's two cores (RaptorQ at K·32 symbols) and the \
         OSDs' block queues stop a cancelled stream at its next 4 KiB: blocks in flight when the \
         object decodes count as I/O overhead on the cluster; the simulator cancels at once.\n\
         - The simulator has no background load on fixed-rate disks (its background model is the \
         seed's, on Table 6-1 layouts), so the background point has no simulated figures.\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_testbed_is_table_6_1_scaled() {
        let r = testbed_rates(0.5);
        assert_eq!(r.len(), POOL);
        assert_eq!(r[0], 0.26);
        assert_eq!(r[15], 26.5);
        assert_eq!(verdict(1.2, 1.0), "close");
        assert_eq!(verdict(1.3, 1.0), "differs");
        assert!((std_dev(&[1.0, 2.0, 3.0]) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn bad_settings_are_one_line() {
        let mut c = ClusterExpConfig::new(PathBuf::from("/nonexistent"), PathBuf::from("/tmp/x"));
        c.redundancy = 0.0;
        let e = run(&c, &|_, _| {}).unwrap_err().to_string();
        assert_eq!(e, "redundancy: D = 0 must be above 0");
    }
}
