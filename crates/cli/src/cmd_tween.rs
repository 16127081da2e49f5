//! TWEEN's options of `ecstack array create --scheme tween` (`docs/tween.md`): the stripe size (log
//! segment), hotness groups, extent size, α, β, the NVRAM region and the GC mode. The work is in
//! `ecstack_array::Tween`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use ecstack_array::{
    Array, ArrayConfig, ArrayDevices, GcMode, NvramSpec, ScrubProgress, Tween, TweenConfig,
    VictimPolicy,
};
use ecstack_device::BlockDevice;
use ecstack_nbd::Admin;

use crate::nbd_export::Export;
use crate::scratch::{announce, Scratch};

use crate::util::{fmt_size, parse_size, print_json};

#[derive(Args, Clone)]
pub struct TweenArgs {
    /// tween: stripe (= log segment = NVRAM buffer) size; the chunk size is stripe / k (default:
    /// k chunks of the largest power of two up to 8M / k: 8M for k = 4 or 8, 6M for k = 6)
    #[arg(long)]
    stripe: Option<String>,
    /// tween: NVRAM buffers N (hotness groups, the cleaning stream and a spare; docs/tween.md)
    #[arg(long, default_value_t = 4)]
    groups: usize,
    /// tween: logical extent size (unit of hotness and of the map)
    #[arg(long, default_value = "4K")]
    extent: String,
    /// tween: smoothing factor α of the hotness EWMA
    #[arg(long, default_value_t = 0.5)]
    alpha: f64,
    /// tween: aging factor β of the sequential k-means
    #[arg(long, default_value_t = 0.1)]
    beta: f64,
    /// tween: NVRAM region (a DAX pmem device or file, or a plain file mapped with mmap)
    #[arg(long)]
    nvram: Option<PathBuf>,
    /// tween: size of a new NVRAM file (default: what the layout needs)
    #[arg(long)]
    nvram_size: Option<String>,
    /// tween: GC mode, background (a worker off the request path), active (inside writes) or
    /// periodic (idle)
    #[arg(long, default_value = "background")]
    gc: String,
    /// tween: GC victims greedy (most stale; measured best here, docs/tween.md) or cost-benefit
    #[arg(long, default_value = "greedy")]
    victim: String,
    /// tween: use every hotness group always (default: the layer uses one unless writes are
    /// skewed)
    #[arg(long)]
    fixed_groups: bool,
    /// tween: re-classify cleaning output with host writes (the seed's) instead of a cleaning
    /// stream of its own
    #[arg(long)]
    no_gc_stream: bool,
    /// tween: collect while fewer log segments are free (default N + 3, at least N + 2)
    #[arg(long)]
    gc_threshold: Option<u64>,
    /// tween: fraction of the segments kept out of the capacity for GC (at least N + 3 segments)
    #[arg(long, default_value_t = 0.1)]
    over_provisioning: f64,
}

/// The chunk size of a tween array of `k` data chunks: stripe / k.
pub fn chunk_bytes(t: &TweenArgs, k: usize) -> Result<u64> {
    let Some(stripe_arg) = &t.stripe else {
        return default_chunk_bytes(k);
    };
    let stripe = parse_size(stripe_arg)?;
    if k == 0 || !stripe.is_multiple_of(k as u64) || !(stripe / k as u64).is_multiple_of(512) {
        // A stripe that works: k chunks of the largest power of two that fits (a chunk should be
        // a multiple of the SSD's flash block, docs/tween.md).
        let hint = match (stripe / k.max(1) as u64).checked_ilog2() {
            Some(b) if k > 0 && b >= 9 => {
                let arg = |x: u64| match x {
                    x if x.is_multiple_of(1 << 20) => format!("{}M", x >> 20),
                    x if x.is_multiple_of(1 << 10) => format!("{}K", x >> 10),
                    x => x.to_string(),
                };
                format!(
                    ": try --stripe {} (k chunks of {})",
                    arg(k as u64 * (1u64 << b)),
                    arg(1u64 << b)
                )
            }
            _ => String::new(),
        };
        bail!(
            "invalid array configuration: stripe {stripe_arg} is not k = {k} chunks of a multiple of 512 bytes{hint}"
        );
    }
    Ok(stripe / k as u64)
}

/// Stripes up to this size by default (the NVRAM holds one per hotness group).
const DEFAULT_STRIPE_BYTES_MAX: u64 = 8 << 20;

/// The default chunk of a tween array of `k` data chunks: the largest power of two with k of them
/// in [`DEFAULT_STRIPE_BYTES_MAX`] (a chunk should be a multiple of the SSD's flash block).
fn default_chunk_bytes(k: usize) -> Result<u64> {
    let per = DEFAULT_STRIPE_BYTES_MAX / k.max(1) as u64;
    match per.checked_ilog2() {
        Some(b) if k > 0 && b >= 9 => Ok(1u64 << b),
        _ => bail!("invalid array configuration: k = {k} is too large for a tween stripe of at most 8M; give --stripe"),
    }
}

pub fn create(
    cfg: &ArrayConfig,
    devices: ArrayDevices,
    t: &TweenArgs,
    force: bool,
    json: bool,
) -> Result<()> {
    let Some(path) = &t.nvram else {
        bail!("scheme tween needs --nvram PATH (its NVRAM region)");
    };
    let tcfg = TweenConfig {
        groups: t.groups,
        extent_bytes: u32::try_from(parse_size(&t.extent)?).context("extent size too large")?,
        alpha: t.alpha,
        beta: t.beta,
        gc_mode: GcMode::parse(&t.gc)?,
        victim: VictimPolicy::parse(&t.victim)?,
        adaptive_groups: !t.fixed_groups,
        gc_stream: !t.no_gc_stream,
        gc_threshold: t.gc_threshold,
        over_provisioning: t.over_provisioning,
        ..TweenConfig::default()
    };
    let spec = NvramSpec::File {
        path: path.clone(),
        bytes: t.nvram_size.as_deref().map(parse_size).transpose()?,
    };
    let opts = ecstack_array::OpenOptions {
        force,
        ..Default::default()
    };
    let tw = Tween::create_with(cfg, devices, &tcfg, &spec, &opts)?;
    tw.array().close()?;
    if json {
        return print_json(&serde_json::json!({
            "array": tw.array().status(),
            "tween": tcfg,
            "capacity": tw.size(),
            "free_segments": tw.free_segments(),
        }));
    }
    let g = tw.array().geometry();
    println!(
        "created tween ({}+{}): stripe {} ({} segments, {} free), {} hotness groups, extent {}, capacity {}, NVRAM {}",
        g.k,
        g.m,
        fmt_size(g.stripe_bytes()),
        g.stripes,
        tw.free_segments(),
        tcfg.groups,
        fmt_size(tcfg.extent_bytes as u64),
        fmt_size(tw.size()),
        path.display()
    );
    Ok(())
}

/// Idle time after which a periodic-mode tween array collects (`Tween::spawn_idle_gc`).
const SERVE_IDLE_GC: Duration = Duration::from_secs(1);

/// The admin socket of a served tween array: `status` gives the array's status with TWEEN's
/// counters; every other command (fail, rebuild, scrub, sync, ...) is the array's.
struct TweenAdmin(Arc<Tween>, ScrubProgress);

impl Admin for TweenAdmin {
    fn command(&self, line: &str) -> std::result::Result<String, String> {
        let t = &self.0;
        if line.trim() == "status" {
            let mut st = serde_json::to_value(t.array().status()).map_err(|e| e.to_string())?;
            st["tween"] = serde_json::json!({
                "stats": Tween::stats(t),
                "free_segments": t.free_segments(),
                "centers": t.centers(),
                "runtime": t.runtime(),
                "capacity": t.size(),
            });
            return Ok(st.to_string());
        }
        t.array()
            .admin_with(line, &self.1)
            .map_err(|e| e.to_string())
    }
}

/// Export a tween array over NBD through the log layer (reads and writes go through TWEEN's map
/// and NVRAM buffers, never the array's byte interface).
pub fn serve(array: Array, nvram: Option<&Path>, s: Export) -> Result<()> {
    let Some(path) = nvram else {
        bail!("a tween array is served through its NVRAM region: add --nvram PATH");
    };
    let tw = Arc::new(Tween::from_array(array, &NvramSpec::file(path))?);
    if tw.gc_mode() == GcMode::Periodic {
        tw.spawn_idle_gc(SERVE_IDLE_GC);
    }
    // Background mode: the worker runs while the export does (dropped at the end of serve).
    let _background = (tw.gc_mode() == GcMode::Background).then(|| tw.start_background());
    let admin: Arc<dyn Admin> = Arc::new(TweenAdmin(Arc::clone(&tw), ScrubProgress::default()));
    let dev: Arc<dyn BlockDevice> = Arc::clone(&tw) as Arc<dyn BlockDevice>;
    let what = format!("tween {}", tw.array().name());
    let res = crate::nbd_export::export(&what, tw.size(), &s, dev, admin);
    tw.array().close()?;
    res?;
    if s.json {
        print_json(&serde_json::json!({
            "array": tw.array().status(),
            "tween": Tween::stats(&tw),
        }))?;
    }
    Ok(())
}

#[derive(Args)]
pub struct ExpTweenArgs {
    /// CI-sized run (seconds): traces at scale 0.004, 64 KiB flash blocks, one sweep trace
    #[arg(long)]
    quick: bool,
    /// Parts: traces, sync, sensitivity, gc, files
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "traces,sync,sensitivity,gc,files"
    )]
    parts: Vec<String>,
    /// Trace scale relative to the published traces (default 0.05; --quick 0.004); the sync
    /// workload's working set is this fraction of 4 GiB
    #[arg(long)]
    scale: Option<f64>,
    /// Scale of the O_DIRECT-files part (default 0.01; --quick 0.001)
    #[arg(long)]
    files_scale: Option<f64>,
    /// Traces: fin, web, usr, mds
    #[arg(long, value_delimiter = ',', default_value = "fin,web,usr,mds")]
    traces: Vec<String>,
    /// Traces of the sensitivity sweep (default fin,web; --quick fin)
    #[arg(long, value_delimiter = ',')]
    sweep_traces: Option<Vec<String>>,
    /// TWEEN's NVRAM buffers N (hotness groups, the cleaning stream, a spare)
    #[arg(long, default_value_t = 4)]
    groups: usize,
    #[arg(long, default_value_t = 0.5)]
    alpha: f64,
    #[arg(long, default_value_t = 0.1)]
    beta: f64,
    /// TWEEN's chunk in flash blocks (the NVRAM holds N · k chunks)
    #[arg(long, default_value_t = 1)]
    chunk_blocks: u32,
    /// Simulated SSDs: over-provisioning
    #[arg(long, default_value_t = 0.15)]
    ssd_op: f64,
    /// Simulated SSDs of tween's footprint-sized runs only: over-provisioning (default --ssd-op).
    /// (tween's equal-raw-flash runs always get md's raw flash with the least SSD
    /// over-provisioning the model accepts.)
    #[arg(long)]
    tween_ssd_op: Option<f64>,
    /// tween's SSDs at equal raw flash keep the SSD model's GC free pool (5 % of the blocks)
    /// instead of its minimum, 2 blocks (TWEEN's whole-block writes never need more; the blocks
    /// freed become TWEEN segments)
    #[arg(long)]
    tween_ssd_model_pool: bool,
    /// TWEEN's own over-provisioning of its footprint-sized runs: fraction of segments kept for
    /// its GC (at least N + 3; at equal raw flash it is what md's flash leaves)
    #[arg(long, default_value_t = 0.1)]
    tween_op: f64,
    /// traces/sync: tween at equal raw flash only (no footprint-sized run beside it)
    #[arg(long)]
    no_footprint: bool,
    /// TWEEN's GC mode: background (default), active or periodic
    #[arg(long, default_value = "background")]
    tween_gc: String,
    /// TWEEN's GC victims: greedy (default) or cost-benefit
    #[arg(long, default_value = "greedy")]
    tween_victim: String,
    /// TWEEN uses every hotness group always (default: the layer chooses)
    #[arg(long)]
    fixed_groups: bool,
    /// TWEEN re-classifies cleaning output with host writes (no cleaning stream)
    #[arg(long)]
    no_gc_stream: bool,
    /// TWEEN's active GC threshold in free segments (default N + 3; at least N + 2)
    #[arg(long)]
    tween_gc_threshold: Option<u64>,
    /// Simulated SSDs: 4 KiB pages per flash block (default 64; --quick 16)
    #[arg(long)]
    ssd_block_pages: Option<u32>,
    /// Simulated SSDs fresh instead of aged (not filled before the run)
    #[arg(long)]
    fresh: bool,
    /// Directory in which the O_DIRECT device files of the files part get a scratch directory of
    /// their own (default: $TMPDIR), removed at the end and on Ctrl-C / SIGTERM
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Directory in which TWEEN's NVRAM file of the files part gets a scratch directory (default
    /// /dev/shm, else $TMPDIR)
    #[arg(long)]
    nvram_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

fn trace_names(v: &[String]) -> Result<Vec<ecstack_lab::eplog::TraceName>> {
    use ecstack_lab::eplog::TraceName;
    v.iter()
        .map(|t| match t.trim().to_ascii_lowercase().as_str() {
            "fin" => Ok(TraceName::Fin),
            "web" => Ok(TraceName::Web),
            "usr" => Ok(TraceName::Usr),
            "mds" => Ok(TraceName::Mds),
            o => bail!("unknown trace '{o}' (fin, web, usr, mds)"),
        })
        .collect()
}

pub fn experiment(a: ExpTweenArgs) -> Result<()> {
    use ecstack_lab::tween::{Part, TweenExpConfig};
    let mut cfg = TweenExpConfig::new(a.quick);
    cfg.parts = a
        .parts
        .iter()
        .map(|p| Part::parse(p))
        .collect::<Result<_, _>>()?;
    if let Some(s) = a.scale {
        cfg.scale = s;
    }
    if let Some(s) = a.files_scale {
        cfg.files_scale = s;
    }
    cfg.traces = trace_names(&a.traces).context("--traces")?;
    if let Some(t) = &a.sweep_traces {
        cfg.sweep_traces = trace_names(t).context("--sweep-traces")?;
    }
    cfg.tween = TweenConfig {
        groups: a.groups,
        alpha: a.alpha,
        beta: a.beta,
        seed: a.seed,
        over_provisioning: a.tween_op,
        gc_threshold: a.tween_gc_threshold,
        gc_mode: GcMode::parse(&a.tween_gc).context("--tween-gc")?,
        victim: VictimPolicy::parse(&a.tween_victim).context("--tween-victim")?,
        adaptive_groups: !a.fixed_groups,
        gc_stream: !a.no_gc_stream,
        ..TweenConfig::default()
    };
    cfg.tween_ssd_op = a.tween_ssd_op;
    cfg.footprint_too = !a.no_footprint;
    cfg.chunk_blocks = a.chunk_blocks;
    cfg.ssd.op = a.ssd_op;
    if let Some(p) = a.ssd_block_pages {
        cfg.ssd.block_pages = p;
    }
    cfg.ssd.aged = !a.fresh;
    cfg.ssd.tween_min_pool = !a.tween_ssd_model_pool;
    cfg.seed = a.seed;
    cfg.validate()?; // before anything is created
                     // Scratch directories for the files part only (the other parts run on simulated SSDs).
    let files = cfg.parts.contains(&Part::Files);
    let scratch = if files {
        let devices = Scratch::new(a.dir.as_deref(), "tween")?;
        let nvram = Scratch::new(
            Some(a.nvram_dir.as_deref().unwrap_or(&cfg.nvram_dir)),
            "tween-nvram",
        )?;
        cfg.files_dir = devices.path().to_owned();
        cfg.nvram_dir = nvram.path().to_owned();
        Some((devices, nvram))
    } else {
        None
    };
    let expect = if a.quick {
        "under a minute (--quick)"
    } else {
        "tens of minutes to hours (--quick takes under a minute)"
    };
    match &scratch {
        Some((d, n)) => announce("experiment tween", &[d.path(), n.path()], expect),
        None => announce("experiment tween", &[Path::new("memory only")], expect),
    }
    let rep = ecstack_lab::tween::run(&cfg);
    drop(scratch);
    let rep = rep?;
    if a.json {
        print_json(&rep)?;
    } else {
        print!("{}", ecstack_lab::tween::render(&rep));
    }
    if let Some(first) = rep.failed.first() {
        bail!(
            "{} of the experiment's parts failed (the others are reported above); {}: {}",
            rep.failed.len(),
            first.part.name(),
            first.error
        );
    }
    Ok(())
}
