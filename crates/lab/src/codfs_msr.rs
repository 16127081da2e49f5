//! `ecstack experiment codfs --exp msr` (CodFS §5.3.1, Fig. 5.4 and 5.5): the ten MSR Cambridge
//! volumes the seed selected, replayed as fast as possible by 10 clients onto the cluster under
//! each update scheme, then two OSDs lost and recovered.
//!
//! Per volume, once: the preset `msr-<volume>` of `ecstack trace` (CodFS Table 3.2's writes, WSS,
//! updated WSS and update writes, at `scale`) is prepared as the seed's §5.3.1 describes, with
//! `ecstack_trace::transform`: writes only, consecutive requests merged into one (up to a
//! segment), every request rounded out to 4 KiB blocks, and the volume remapped onto one file of
//! whole segments (compaction by segment: untouched segments dropped, offsets inside a segment
//! kept, so a request's locality within its chunk is the trace's). The requests are dealt to the
//! clients in turn, each client keeping trace order ("split the trace evenly"): all clients are
//! busy whatever the volume's hot spots. Clients race on the blocks they share, so a block's final
//! bytes are the last write to it of one of the clients that wrote it (a client's earlier writes
//! are overwritten by its own later ones), and every byte read back is checked against that.
//!
//! Per (volume, scheme), on a fresh cluster ([`Testbed`], as `--exp synthetic`: HDD-profiled stores,
//! PLR's reserve one chunk, GC and Algorithm 1 off):
//! 1. **pre-write**: the file is put whole (the seed: "we first write the segments that cover the
//!    whole working set");
//! 2. **replay**: every client opens the file ([`ecstack_client::FileHandle`]: no MDS lookup per
//!    write) and issues its requests one at a time, ignoring the trace's timestamps; writes per
//!    second over all clients (Fig. 5.4);
//! 3. **F_avg** per data and parity chunk (the seed quotes proj0's and src22's);
//! 4. **read back**: the whole file, every 4 KiB block checked against the model;
//! 5. **recovery** of the two OSDs holding the most of the file, killed at once (Fig. 5.5).
//!
//! A volume's schemes run one after another, so the runs compared side by side share the
//! machine's load at about the same time.

use std::path::PathBuf;
use std::time::Instant;

use ecstack_client::{Bytes, ClientError, PutOptions, UpdateScheme};
use ecstack_osd::chunk_store::f_avg;
use ecstack_trace::transform::{self, TransformOptions};
use ecstack_trace::{Op, Record, BLOCK_SIZE};
use serde::Serialize;

use crate::codfs_synthetic::{client_error, fill_block, run_err, Setting, Testbed};
use crate::plot::Bars;
use crate::table::write_report;
use crate::{LabError, Result};

/// The ten volumes of CodFS Table 3.2 marked for evaluation, in the table's order.
pub const VOLUMES: [&str; 10] = [
    "src22", "mds0", "rsrch0", "usr0", "web0", "ts0", "stg0", "hm0", "prn1", "proj0",
];

/// §5.3.1: "On average, PLR is 63.1% faster than FO."
pub const SEED_PLR_OVER_FO: f64 = 1.631;

#[derive(Debug, Clone, Serialize)]
pub struct MsrConfig {
    #[serde(skip)]
    pub dir: PathBuf,
    /// One per scheme (the code and segment size alike).
    pub settings: Vec<Setting>,
    /// Volume names (`msr-<name>` presets).
    pub volumes: Vec<String>,
    /// Size of each trace relative to the published one (writes and WSS alike).
    pub scale: f64,
    pub clients: usize,
    #[serde(flatten)]
    pub testbed: Testbed,
    pub seed: u64,
    pub quick: bool,
}

impl MsrConfig {
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &'static str, msg: String| Err(LabError::Config { field, msg });
        self.testbed.check(&self.settings)?;
        if self.volumes.is_empty() {
            return bad("volumes", "no volume to replay".into());
        }
        let known = ecstack_trace::preset_names();
        for v in &self.volumes {
            if !known.contains(&format!("msr-{v}")) {
                return bad(
                    "volumes",
                    format!(
                        "{v:?} is not an MSR volume with a preset (known: {})",
                        VOLUMES.join(", ")
                    ),
                );
            }
        }
        if !(self.scale > 0.0 && self.scale <= 1.0) {
            return bad("scale", format!("{} is not in (0, 1]", self.scale));
        }
        if self.clients == 0 {
            return bad("clients", "at least one client".into());
        }
        Ok(())
    }
}

/// One volume's trace, prepared for the replay.
#[derive(Debug, Clone, Serialize)]
pub struct Prepared {
    pub volume: String,
    /// Write requests in the synthesized trace.
    pub trace_writes: u64,
    /// After merging consecutive requests: the writes replayed.
    pub writes: u64,
    pub write_bytes: u64,
    /// The file the volume is remapped onto (whole segments).
    pub file_bytes: u64,
    #[serde(skip)]
    streams: Vec<Vec<Record>>,
}

/// The seed's §5.3.1 preparation of volume `volume` (see the module's documentation).
pub fn prepare(
    volume: &str,
    scale: f64,
    seed: u64,
    segment_bytes: u64,
    clients: usize,
) -> Result<Prepared> {
    let trace = ecstack_trace::synthesize_preset(&format!("msr-{volume}"), scale, seed)?;
    let trace_writes = trace.records.iter().filter(|r| r.op == Op::Write).count() as u64;
    let opts = TransformOptions {
        writes_only: true,
        merge: true,
        merge_max: segment_bytes,
        round: Some(BLOCK_SIZE),
        compact: Some(segment_bytes),
        flatten: true,
        ..Default::default()
    };
    let merged = transform::apply(&trace.records, &trace.volumes, &opts)?;
    let file_bytes = merged
        .iter()
        .map(Record::end)
        .max()
        .unwrap_or(0)
        .div_ceil(segment_bytes)
        .max(1)
        * segment_bytes;
    let mut streams = vec![Vec::new(); clients.max(1)];
    for (i, r) in merged.iter().enumerate() {
        streams[i % clients.max(1)].push(*r);
    }
    Ok(Prepared {
        volume: volume.to_owned(),
        trace_writes,
        writes: merged.len() as u64,
        write_bytes: merged.iter().map(|r| r.len).sum(),
        file_bytes,
        streams,
    })
}

/// One (volume, scheme) run's figures (flat: the CSV's row too).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub volume: String,
    pub scheme: String,
    pub label: String,
    pub file_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub prewrite_mb_per_sec: f64,
    pub replay_secs: f64,
    pub writes_per_sec: f64,
    pub replay_cpu_pct: f64,
    pub replay_cpu_ours_pct: f64,
    pub replay_loopback_mb_per_sec: f64,
    pub f_avg_data: f64,
    pub f_avg_parity: f64,
    pub read_mb_per_sec: f64,
    pub bytes_verified: u64,
    pub recovery_secs: f64,
    pub recovery_bytes: u64,
    /// NaN (JSON: null) when the recovery stalled.
    pub recovery_mb_per_sec: f64,
    pub recovery_cpu_pct: f64,
    pub recovery_cpu_ours_pct: f64,
    /// What the MDS reported when the recovery stopped rebuilding before it finished (empty
    /// when it finished).
    pub recovery_stalled: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct MsrReport {
    pub config: MsrConfig,
    pub traces: Vec<Prepared>,
    pub rows: Vec<Row>,
}

/// Runs every volume under every scheme; `log` hears progress lines.
pub fn run(cfg: &MsrConfig, log: &dyn Fn(&str)) -> Result<MsrReport> {
    cfg.validate()?;
    let rt = crate::codfs_bench::runtime()?;
    let segment_bytes = cfg.settings[0].segment_bytes;
    let (mut traces, mut rows) = (Vec::new(), Vec::new());
    for (v, volume) in cfg.volumes.iter().enumerate() {
        let p = prepare(volume, cfg.scale, cfg.seed, segment_bytes, cfg.clients)?;
        log(&format!(
            "{volume}: {} writes in the trace, {} merged ({:.1} MB) over {} clients, file {} MiB",
            p.trace_writes,
            p.writes,
            p.write_bytes as f64 / 1e6,
            cfg.clients,
            p.file_bytes >> 20
        ));
        for (i, s) in cfg.settings.iter().enumerate() {
            log(&format!("  {}", s.label()));
            let dir = cfg.dir.join(format!("run-{}-{}", v + 1, i + 1));
            let row = rt.block_on(run_one(cfg, s, &p, &dir, log));
            // Each run's devices go before the next one starts (disk space).
            let _ = std::fs::remove_dir_all(&dir);
            rows.push(row?);
        }
        traces.push(p);
    }
    Ok(MsrReport {
        config: cfg.clone(),
        traces,
        rows,
    })
}

/// The bytes of write `id` over `buf` (block-aligned at `offset`): block by block, each a
/// function of the block's index and the write.
fn fill_write(buf: &mut [u8], seed: u64, offset: u64, id: u64) {
    for (b, block) in buf.chunks_mut(BLOCK_SIZE as usize).enumerate() {
        fill_block(block, seed, offset / BLOCK_SIZE + b as u64, id);
    }
}

async fn run_one(
    cfg: &MsrConfig,
    s: &Setting,
    p: &Prepared,
    dir: &std::path::Path,
    log: &dyn Fn(&str),
) -> Result<Row> {
    let mut bed = cfg.testbed.start(s, dir).await?;
    let path = format!("/msr/{}", p.volume);
    let blocks = p.file_bytes / BLOCK_SIZE;

    // 1. Pre-write the file.
    let mut data = vec![0u8; p.file_bytes as usize];
    fill_write(&mut data, cfg.seed, 0, 0);
    let t = Instant::now();
    bed.admin
        .put_bytes_with(
            &path,
            Bytes::from(data),
            PutOptions {
                scheme: Some(s.scheme),
                ..PutOptions::default()
            },
        )
        .await
        .map_err(client_error)?;
    let prewrite_mb = p.file_bytes as f64 / 1e6 / t.elapsed().as_secs_f64();

    // The seed dropped the OSDs' buffer cache before each test.
    bed.drop_caches().await?;

    // 2. Replay: each client's writes made first (no generation inside the timed phase).
    let mut work = Vec::new();
    for (c, stream) in p.streams.iter().enumerate() {
        let writes: Vec<(u64, u64, Bytes)> = stream
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let id = ((c as u64 + 1) << 40) | (i as u64 + 1);
                let mut buf = vec![0u8; r.len as usize];
                fill_write(&mut buf, cfg.seed, r.offset, id);
                (r.offset, id, Bytes::from(buf))
            })
            .collect();
        work.push((bed.connect()?, writes));
    }
    let c0 = bed.counters();
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (c, (client, writes)) in work.into_iter().enumerate() {
        let path = path.clone();
        tasks.spawn(async move {
            let handle = client.open(&path).await?;
            for (offset, _, bytes) in &writes {
                handle.update(*offset, bytes).await?;
            }
            Ok::<_, ClientError>((c, writes))
        });
    }
    // Per block, each client's last write to it: the block's final bytes are one of these.
    let mut last: Vec<Vec<(usize, u64)>> = vec![Vec::new(); blocks as usize];
    while let Some(r) = tasks.join_next().await {
        let (c, writes) = r.map_err(run_err)?.map_err(client_error)?;
        for (offset, id, bytes) in writes {
            let first = offset / BLOCK_SIZE;
            for b in first..first + bytes.len() as u64 / BLOCK_SIZE {
                let l = &mut last[b as usize];
                match l.iter_mut().find(|(x, _)| *x == c) {
                    Some(e) => e.1 = id,
                    None => l.push((c, id)),
                }
            }
        }
    }
    let replay_secs = t.elapsed().as_secs_f64();
    let load = c0.load_since();
    let writes_per_sec = p.writes as f64 / replay_secs;
    log(&format!(
        "    {} writes: {writes_per_sec:.1} writes/s ({replay_secs:.1} s, CPU ours {:.0} % of {:.0} %, loopback {:.1} MB/s)",
        p.writes, load.cpu_ours_pct, load.cpu_busy_pct, load.loopback_mb_per_sec
    ));

    // 3. F_avg.
    let (data_frags, parity_frags) = bed.fragments(s.k).await?;
    let (f_avg_data, f_avg_parity) = (f_avg(&data_frags), f_avg(&parity_frags));
    log(&format!(
        "    F_avg data {f_avg_data:.2}, parity {f_avg_parity:.2}"
    ));

    // 4. Read back, every block checked.
    let t = Instant::now();
    let got = bed
        .admin
        .read(&path, 0, p.file_bytes)
        .await
        .map_err(client_error)?;
    let read_mb = p.file_bytes as f64 / 1e6 / t.elapsed().as_secs_f64();
    if got.len() as u64 != p.file_bytes {
        return Err(LabError::Run(format!(
            "{} {}: read {} bytes back of a {}-byte file",
            p.volume,
            s.label(),
            got.len(),
            p.file_bytes
        )));
    }
    let mut want = vec![0u8; BLOCK_SIZE as usize];
    let mut bad = 0u64;
    for (b, block) in got.chunks(BLOCK_SIZE as usize).enumerate() {
        let ids: Vec<u64> = match &last[b][..] {
            [] => vec![0],
            l => l.iter().map(|&(_, id)| id).collect(),
        };
        let ok = ids.iter().any(|&id| {
            fill_block(&mut want, cfg.seed, b as u64, id);
            block == &want[..]
        });
        bad += u64::from(!ok);
    }
    if bad > 0 {
        return Err(LabError::Run(format!(
            "{} {}: {bad} blocks read back differ from what was written",
            p.volume,
            s.label()
        )));
    }

    bed.drop_caches().await?;

    // 5. Recovery of the two OSDs holding the most of the file (a small file may have no chunk
    // on some OSDs).
    let victims = bed.busiest_two(&path).await?;
    let recovery = bed.recover_two(victims, log).await?;
    bed.cluster.stop();
    Ok(Row {
        volume: p.volume.clone(),
        scheme: s.scheme.to_string(),
        label: s.label(),
        file_bytes: p.file_bytes,
        writes: p.writes,
        write_bytes: p.write_bytes,
        prewrite_mb_per_sec: prewrite_mb,
        replay_secs,
        writes_per_sec,
        replay_cpu_pct: load.cpu_busy_pct,
        replay_cpu_ours_pct: load.cpu_ours_pct,
        replay_loopback_mb_per_sec: load.loopback_mb_per_sec,
        f_avg_data,
        f_avg_parity,
        read_mb_per_sec: read_mb,
        bytes_verified: got.len() as u64,
        recovery_secs: recovery.secs,
        recovery_bytes: recovery.bytes,
        recovery_mb_per_sec: if recovery.stalled.is_some() {
            f64::NAN
        } else {
            recovery.mb_per_sec
        },
        recovery_cpu_pct: recovery.load.cpu_busy_pct,
        recovery_cpu_ours_pct: recovery.load.cpu_ours_pct,
        recovery_stalled: recovery.stalled.unwrap_or_default(),
    })
}

impl MsrReport {
    fn row(&self, volume: &str, scheme: UpdateScheme) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.volume == volume && r.scheme == scheme.name())
    }

    /// `a / b` of figure `f` for `volume`, when both schemes ran.
    fn ratio(
        &self,
        volume: &str,
        a: UpdateScheme,
        b: UpdateScheme,
        f: fn(&Row) -> f64,
    ) -> Option<f64> {
        let r = f(self.row(volume, a)?) / f(self.row(volume, b)?).max(1e-12);
        r.is_finite().then_some(r)
    }

    /// The mean over volumes of `a / b` (those where both ran) and how many volumes it covers.
    fn mean_ratio(
        &self,
        a: UpdateScheme,
        b: UpdateScheme,
        f: fn(&Row) -> f64,
    ) -> Option<(f64, usize)> {
        let v: Vec<f64> = self
            .traces
            .iter()
            .filter_map(|t| self.ratio(&t.volume, a, b, f))
            .collect();
        (!v.is_empty()).then(|| (v.iter().sum::<f64>() / v.len() as f64, v.len()))
    }

    fn schemes(&self) -> Vec<UpdateScheme> {
        self.config.settings.iter().map(|s| s.scheme).collect()
    }

    pub fn markdown(&self) -> String {
        use UpdateScheme::{Fl, Fo, ParityLog as Pl, Plr};
        let c = &self.config;
        let s0 = &c.settings[0];
        let mut s = String::from(
            "# CodFS update schemes replaying MSR Cambridge traces (§5.3.1, Fig. 5.4, 5.5)\n\n",
        );
        s += &format!(
            "Presets `msr-<volume>` at scale {} (writes and WSS of CodFS Table 3.2 × scale), writes only, consecutive requests merged, rounded to 4 KiB, remapped onto one file per volume; {} clients, the requests dealt to them in turn, one write at a time each, as fast as possible. {} OSDs ({}), {} ({},{}) with {} MiB segments, a fresh cluster per volume and scheme; {}{}. Every byte read back was checked: {} MB in all.\n\n",
            c.scale,
            c.clients,
            c.testbed.osds,
            c.testbed.stores(),
            s0.family,
            s0.k + s0.m,
            s0.k,
            s0.segment_bytes >> 20,
            if c.testbed.insecure { "plain HTTP/2 on loopback" } else { "mTLS on loopback" },
            if c.quick { " (--quick: traces far too small for the figures to mean anything)" } else { "" },
            self.rows.iter().map(|r| r.bytes_verified).sum::<u64>() / 1_000_000,
        );
        s += "| volume | trace writes | replayed (merged) | MB written | file MiB |\n|---|---:|---:|---:|---:|\n";
        for t in &self.traces {
            s += &format!(
                "| {} | {} | {} | {:.1} | {} |\n",
                t.volume,
                t.trace_writes,
                t.writes,
                t.write_bytes as f64 / 1e6,
                t.file_bytes >> 20,
            );
        }
        let schemes = self.schemes();
        let fig = |title: &str, f: fn(&Row) -> f64, digits: usize| {
            let mut s = format!("\n{title}\n\n| volume |");
            for sc in &schemes {
                s += &format!(" {} |", sc.name());
            }
            s += "\n|---|";
            s += &"---:|".repeat(schemes.len());
            s += "\n";
            for t in &self.traces {
                s += &format!("| {} |", t.volume);
                for &sc in &schemes {
                    s += &match self.row(&t.volume, sc).map(f) {
                        Some(v) if v.is_nan() => " stalled |".into(),
                        Some(v) => format!(" {v:.digits$} |"),
                        None => " – |".into(),
                    };
                }
                s += "\n";
            }
            s
        };
        s += &fig("Writes per second (Fig. 5.4):", |r| r.writes_per_sec, 1);
        s += &fig(
            "Recovery of two OSDs, MB/s (Fig. 5.5):",
            |r| r.recovery_mb_per_sec,
            1,
        );
        for r in self.rows.iter().filter(|r| !r.recovery_stalled.is_empty()) {
            s += &format!(
                "\n{} {}: the recovery stalled (nothing rebuilt for two minutes): {}\n",
                r.volume, r.scheme, r.recovery_stalled
            );
        }
        s += &fig("F_avg of data chunks:", |r| r.f_avg_data, 2);
        s += &fig("F_avg of parity chunks:", |r| r.f_avg_parity, 2);
        s += &fig(
            "CPU % of all cores used by this experiment's processes during the replay:",
            |r| r.replay_cpu_ours_pct,
            0,
        );
        s += &fig(
            "CPU % of all cores busy (every process of the machine) during the replay:",
            |r| r.replay_cpu_pct,
            0,
        );

        let f = |x: Option<f64>| x.map_or("–".to_owned(), |v| format!("{v:.2}"));
        let iops = |r: &Row| r.writes_per_sec;
        let rec = |r: &Row| r.recovery_mb_per_sec;
        s += "\n## Against the seed\n\n| claim (seed) | seed | ours |\n|---|---|---|\n";
        let mean = self.mean_ratio(Plr, Fo, iops);
        s += &format!(
            "| §5.3.1: PLR / FO writes per second, mean over the volumes | {SEED_PLR_OVER_FO} (\"63.1 % faster\") | {} |\n",
            mean.map_or("–".into(), |(m, n)| format!("{m:.2} ({n} volumes)"))
        );
        if let (Some(a), Some(b)) = (
            self.rows
                .iter()
                .filter(|r| r.scheme == "plr")
                .map(iops)
                .reduce(|a, b| a + b),
            self.rows
                .iter()
                .filter(|r| r.scheme == "fo")
                .map(iops)
                .reduce(|a, b| a + b),
        ) {
            s += &format!(
                "| the same, as the ratio of the summed writes per second | – | {:.2} |\n",
                a / b.max(1e-12)
            );
        }
        for t in &self.traces {
            let v = &t.volume;
            s += &format!(
                "| {v}: PLR / FO writes per second | > 1 | {} |\n",
                f(self.ratio(v, Plr, Fo, iops))
            );
        }
        for o in [Fl, Pl] {
            if let Some((m, n)) = self.mean_ratio(o, Fo, iops) {
                s += &format!(
                    "| {} / FO writes per second, mean over {n} volumes | > 1 (\"all perform significantly better than FO\") | {m:.2} |\n",
                    o.name()
                );
            }
        }
        let spreads: Vec<f64> = self
            .traces
            .iter()
            .filter_map(|t| {
                let v: Vec<f64> = [Fl, Pl, Plr]
                    .iter()
                    .filter_map(|&x| self.row(&t.volume, x).map(iops))
                    .collect();
                let hi = v.iter().copied().fold(0.0f64, f64::max);
                let lo = v.iter().copied().fold(f64::MAX, f64::min);
                (v.len() == 3).then(|| 100.0 * (hi - lo) / hi.max(1e-12))
            })
            .collect();
        if !spreads.is_empty() {
            s += &format!(
                "| spread of FL / CodFS PL / PLR writes per second ((max − min) / max), mean over {} volumes | \"comparable\" | {:.0} % |\n",
                spreads.len(),
                spreads.iter().sum::<f64>() / spreads.len() as f64
            );
        }
        for o in [Fl, Pl] {
            let behind: Vec<&str> = self
                .traces
                .iter()
                .filter(|t| {
                    [Fo, Plr]
                        .iter()
                        .all(|&x| self.ratio(&t.volume, o, x, rec).is_some_and(|r| r < 1.0))
                })
                .map(|t| t.volume.as_str())
                .collect();
            if self.mean_ratio(o, Fo, rec).is_some() {
                s += &format!(
                    "| {} recovery slower than FO's and PLR's | every volume | {} of {} |\n",
                    o.name(),
                    behind.len(),
                    self.traces.len()
                );
            }
        }
        for (v, seed) in [("proj0", "≈ 10"), ("src22", "1.117")] {
            if self.traces.iter().any(|t| t.volume == v) {
                s += &format!(
                    "| {v}: PLR / FL recovery | {seed} | {} |\n",
                    f(self.ratio(v, Plr, Fl, rec))
                );
            }
        }
        for (v, d, p) in [("proj0", "45.66", "182.6"), ("src22", "0.73", "2.82")] {
            if let Some(r) = self.row(v, Fl) {
                s += &format!(
                    "| {v}: F_avg data / parity (FL) | {d} / {p} | {:.2} / {:.2} |\n",
                    r.f_avg_data, r.f_avg_parity
                );
            }
        }
        s
    }

    /// One bar per scheme for each volume.
    fn by_volume<'a>(&self, title: &'a str, y_label: &'a str, f: fn(&Row) -> f64) -> Bars<'a> {
        let series = self
            .schemes()
            .into_iter()
            .map(|sc| {
                let v = self
                    .traces
                    .iter()
                    .map(|t| self.row(&t.volume, sc).map_or(f64::NAN, f))
                    .collect();
                (sc.name().to_owned(), v)
            })
            .collect();
        Bars {
            title,
            x_label: "volume",
            y_label,
            categories: self.traces.iter().map(|t| t.volume.clone()).collect(),
            series,
            stacked: false,
        }
    }

    /// `codfs-msr.md`, `.csv` and the two figures in `out`.
    pub fn write(&self, out: &std::path::Path) -> Result<()> {
        write_report(out, "codfs-msr", &self.markdown(), &self.rows)?;
        self.by_volume(
            "Writes per second replaying MSR traces (Fig. 5.4)",
            "writes/s",
            |r| r.writes_per_sec,
        )
        .write_svg(&out.join("codfs-msr-writes.svg"))?;
        self.by_volume(
            "Recovery of two OSDs after the replay (Fig. 5.5)",
            "MB/s",
            |r| r.recovery_mb_per_sec,
        )
        .write_svg(&out.join("codfs-msr-recovery.svg"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_volume_has_a_preset_and_prepares_evenly_into_the_file() {
        for v in VOLUMES {
            let p = prepare(v, 0.0002, 1, 4 << 20, 10).unwrap();
            assert!(p.writes > 0 && p.writes <= p.trace_writes, "{v}");
            assert_eq!(p.file_bytes % (4 << 20), 0);
            let lens: Vec<usize> = p.streams.iter().map(Vec::len).collect();
            assert_eq!(lens.iter().sum::<usize>() as u64, p.writes, "{v}");
            let (lo, hi) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
            assert!(hi - lo <= 1, "{v}: {lens:?}");
            for r in p.streams.iter().flatten() {
                assert!(r.len > 0 && r.end() <= p.file_bytes, "{v}: {r:?}");
                assert_eq!((r.offset % BLOCK_SIZE, r.len % BLOCK_SIZE), (0, 0), "{v}");
            }
        }
    }

    #[test]
    fn a_write_is_a_function_of_its_blocks_and_id() {
        let (mut a, mut b) = (vec![0u8; 8192], vec![0u8; 4096]);
        fill_write(&mut a, 3, 4096, 9);
        fill_block(&mut b, 3, 2, 9);
        assert_eq!(&a[4096..], &b[..]);
    }
}
