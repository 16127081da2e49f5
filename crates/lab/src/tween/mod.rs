//! `ecstack experiment tween`: the first evaluation of TWEEN (issue 15; `docs/tween.md`). Each of
//! EPLOG's synthesized traces (FIN, WEB, USR, MDS presets, prepared as in the EPLOG experiment) is
//! replayed, after a sequential pre-write of its working set, on a (k+m) array of simulated SSDs
//! (the device layer's FTL model) under md, eplog and tween, one client. Measured over the replay:
//! bytes written to the main SSDs, SSD GC victims per SSD, flash write amplification (flash page
//! writes / host page writes, summed over the main SSDs), requests/s and request latency
//! percentiles. TWEEN's chunk is one SSD block, so its full-stripe writes are full-block writes;
//! its NVRAM region is in memory (NVRAM latency is not modelled: TWEEN's latencies are a lower bound).

use std::sync::Arc;
use std::time::Instant;

use ecstack_array::{
    Array, ArrayConfig, ArrayDevices, GcMode, NvramSpec, SchemeKind, SsdSummary, Tween, TweenConfig,
};
use ecstack_device::{BlockDevice, MemDevice, SimSsd, SsdConfig};
use serde::Serialize;

use crate::eplog::{build, prewrite, Backing, Setting, Trace, TraceName, CHUNK_BYTES};
use crate::{LabError, Result};

/// What to run.
#[derive(Debug, Clone)]
pub struct TweenExpConfig {
    pub traces: Vec<TraceName>,
    /// Trace scale relative to the published traces.
    pub scale: f64,
    pub setting: Setting,
    pub groups: usize,
    pub alpha: f64,
    pub beta: f64,
    pub gc_mode: GcMode,
    pub seed: u64,
}

impl TweenExpConfig {
    pub fn new(quick: bool) -> TweenExpConfig {
        TweenExpConfig {
            traces: TraceName::ALL.to_vec(),
            scale: if quick { 0.004 } else { 0.02 },
            setting: Setting::SIX_TWO,
            groups: 4,
            alpha: 0.5,
            beta: 0.1,
            gc_mode: GcMode::Active,
            seed: 1,
        }
    }
}

/// One (trace, scheme) run.
#[derive(Debug, Clone, Serialize)]
pub struct TweenRow {
    pub trace: TraceName,
    pub scheme: String,
    pub requests: u64,
    pub ssd_write_bytes: u64,
    pub ssd_read_bytes: u64,
    pub gc_per_ssd: f64,
    pub flash_write_amplification: f64,
    pub requests_per_s: f64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub latency_max_us: f64,
    /// tween only: segments collected by TWEEN's GC and its full-stripe flushes.
    pub tween_gc_segments: Option<u64>,
    pub tween_flushes: Option<u64>,
}

fn ssd_sums(a: &Array) -> (u64, u64, f64) {
    let st = a.status();
    let ssds: Vec<SsdSummary> = st
        .devices
        .iter()
        .filter(|d| d.role == "main")
        .filter_map(|d| d.ssd.clone())
        .collect();
    let host = ssds.iter().map(|s| s.host_page_writes).sum();
    let flash = ssds.iter().map(|s| s.flash_page_writes).sum();
    let gc = ssds.iter().map(|s| s.gc_victims).sum::<u64>() as f64 / ssds.len().max(1) as f64;
    (host, flash, gc)
}

/// A simulated SSD of at least `bytes` usable bytes.
fn ssd(bytes: u64) -> Result<Arc<dyn BlockDevice>> {
    let base = SsdConfig::default();
    let per_block = (base.pages_per_block as u64 * base.page_size as u64) as f64 * (1.0 - base.op);
    let blocks = ((bytes as f64 / per_block).ceil() as u32 + 8).max(64);
    Ok(Arc::new(SimSsd::new(SsdConfig { blocks, ..base })?))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Replay the trace's writes one at a time, timing each.
fn replay(write: &dyn Fn(&[u8], u64) -> Result<()>, t: &Trace) -> Result<(f64, Vec<f64>)> {
    let buf: Vec<u8> = (0..t.max_len())
        .map(|i| (i as u8).wrapping_mul(7))
        .collect();
    let mut lat = Vec::with_capacity(t.reqs.len());
    let start = Instant::now();
    for &(off, len) in &t.reqs {
        let t0 = Instant::now();
        write(&buf[..len as usize], off)?;
        lat.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let secs = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    Ok((secs, lat))
}

#[allow(clippy::too_many_arguments)]
fn row(
    t: &Trace,
    scheme: &str,
    a: &Array,
    before: (u64, u64, f64),
    secs: f64,
    lat: &[f64],
    tween: Option<(u64, u64)>,
) -> TweenRow {
    let after = ssd_sums(a);
    let st = a.status();
    let host = after.0 - before.0;
    let flash = after.1 - before.1;
    TweenRow {
        trace: t.name,
        scheme: scheme.into(),
        requests: t.reqs.len() as u64,
        ssd_write_bytes: st.main.io.write_bytes,
        ssd_read_bytes: st.main.io.read_bytes,
        gc_per_ssd: after.2 - before.2,
        flash_write_amplification: flash as f64 / host.max(1) as f64,
        requests_per_s: t.reqs.len() as f64 / secs.max(1e-9),
        latency_p50_us: percentile(lat, 0.5),
        latency_p99_us: percentile(lat, 0.99),
        latency_max_us: lat.last().copied().unwrap_or(0.0),
        tween_gc_segments: tween.map(|x| x.0),
        tween_flushes: tween.map(|x| x.1),
    }
}

fn run_baseline(t: &Trace, scheme: SchemeKind, cfg: &TweenExpConfig) -> Result<TweenRow> {
    let dir = std::env::temp_dir();
    let rig = build(t, scheme, cfg.setting, Backing::Sim, &dir)?;
    let a = &rig.array;
    prewrite(a, t.wss)?;
    a.reset_stats();
    let before = ssd_sums(a);
    let (secs, lat) = replay(&|b, off| Ok(a.write(b, off)?), t)?;
    if scheme == SchemeKind::Eplog {
        a.commit()?;
    }
    Ok(row(t, scheme.name(), a, before, secs, &lat, None))
}

fn run_tween(t: &Trace, cfg: &TweenExpConfig) -> Result<TweenRow> {
    let s = cfg.setting;
    let base = SsdConfig::default();
    let chunk = base.pages_per_block as u64 * base.page_size as u64;
    let stripe = s.k as u64 * chunk;
    let spare = (2 * cfg.groups as u64 + 2).max(1);
    let need = t.wss.div_ceil(stripe) + spare;
    let segments = ((need as f64 / 0.9).ceil() as u64 + 2).max(need + 2);
    let dev_bytes = chunk + segments * chunk + chunk;
    let main = (0..s.n())
        .map(|_| ssd(dev_bytes))
        .collect::<Result<Vec<_>>>()?;
    let devices = ArrayDevices {
        main,
        log: Vec::new(),
        meta: Arc::new(MemDevice::new(1 << 30)?),
        specs: None,
    };
    let acfg = ArrayConfig {
        chunk_size: chunk as u32,
        ..ArrayConfig::with_geometry(SchemeKind::Tween, s.k, s.m)
    };
    let tcfg = TweenConfig {
        groups: cfg.groups,
        extent_bytes: CHUNK_BYTES as u32,
        alpha: cfg.alpha,
        beta: cfg.beta,
        gc_mode: cfg.gc_mode,
        seed: cfg.seed,
        ..TweenConfig::default()
    };
    let (nv, _img) = NvramSpec::memory();
    let tw = Tween::create(&acfg, devices, &tcfg, &nv)?;
    if tw.size() < t.wss {
        return Err(LabError::Run(format!(
            "tween capacity {} below the working set {}",
            tw.size(),
            t.wss
        )));
    }
    // Pre-write the working set sequentially (direct full-stripe writes, the rest through NVRAM).
    let piece = vec![0x5au8; (stripe * 4) as usize];
    let mut off = 0;
    while off < t.wss {
        let len = (piece.len() as u64).min(t.wss - off);
        tw.write(&piece[..len as usize], off)?;
        off += len;
    }
    let a = tw.array();
    a.reset_stats();
    let s0 = tw.stats();
    let before = ssd_sums(a);
    let (secs, lat) = replay(&|b, off| Ok(tw.write(b, off)?), t)?;
    let s1 = tw.stats();
    Ok(row(
        t,
        "tween",
        a,
        before,
        secs,
        &lat,
        Some((s1.gc_segments - s0.gc_segments, s1.flushes - s0.flushes)),
    ))
}

/// Every trace under md, eplog and tween.
pub fn run(cfg: &TweenExpConfig) -> Result<Vec<TweenRow>> {
    if !(cfg.scale > 0.0 && cfg.scale <= 1.0) {
        return Err(LabError::Run(format!(
            "scale {} must lie in (0, 1]",
            cfg.scale
        )));
    }
    let mut rows = Vec::new();
    for &name in &cfg.traces {
        let t = Trace::load(name, cfg.scale, cfg.seed)?;
        rows.push(run_baseline(&t, SchemeKind::Md, cfg)?);
        rows.push(run_baseline(&t, SchemeKind::Eplog, cfg)?);
        rows.push(run_tween(&t, cfg)?);
    }
    Ok(rows)
}

/// The rows as a text table.
pub fn render(rows: &[TweenRow]) -> String {
    let mut out = String::from(
        "trace  scheme  requests  SSD writes MiB  SSD reads MiB  GC/SSD  flash WA  req/s  p50 us  p99 us  tween GC segs\n",
    );
    for r in rows {
        out.push_str(&format!(
            "{:<6} {:<7} {:>8} {:>15.1} {:>14.1} {:>7.1} {:>9.3} {:>6.0} {:>7.1} {:>7.1} {:>14}\n",
            r.trace.to_string(),
            r.scheme,
            r.requests,
            r.ssd_write_bytes as f64 / (1 << 20) as f64,
            r.ssd_read_bytes as f64 / (1 << 20) as f64,
            r.gc_per_ssd,
            r.flash_write_amplification,
            r.requests_per_s,
            r.latency_p50_us,
            r.latency_p99_us,
            r.tween_gc_segments
                .map(|g| g.to_string())
                .unwrap_or_else(|| "-".into()),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny FIN replay: all three schemes run, and tween's main-device traffic is exactly its
    /// full-stripe flushes (n chunks of one SSD block each), nothing else.
    #[test]
    fn tiny_fin_replay_tween_writes_only_full_stripes() {
        let cfg = TweenExpConfig {
            traces: vec![TraceName::Fin],
            scale: 0.0005,
            ..TweenExpConfig::new(true)
        };
        let rows = run(&cfg).unwrap();
        assert_eq!(rows.len(), 3);
        let tw = rows.iter().find(|r| r.scheme == "tween").unwrap();
        let base = SsdConfig::default();
        let chunk = base.pages_per_block as u64 * base.page_size as u64;
        let flushes = tw.tween_flushes.unwrap();
        assert!(flushes > 0, "no flush during the replay");
        assert_eq!(
            tw.ssd_write_bytes,
            flushes * cfg.setting.n() as u64 * chunk,
            "tween wrote something other than full stripes"
        );
        assert!(rows
            .iter()
            .all(|r| r.requests > 0 && r.requests_per_s > 0.0));
    }
}
