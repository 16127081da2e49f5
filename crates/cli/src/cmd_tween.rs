//! TWEEN's options of `ecstack array create --scheme tween` (`docs/tween.md`): the stripe size (log
//! segment), hotness groups, extent size, α, β, the NVRAM region and the GC mode. The work is in
//! `ecstack_array::Tween`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use ecstack_array::{ArrayConfig, ArrayDevices, GcMode, NvramSpec, Tween, TweenConfig};

use crate::util::{fmt_size, parse_size, print_json};

#[derive(Args, Clone)]
pub struct TweenArgs {
    /// tween: stripe (= log segment = NVRAM buffer) size; the chunk size is stripe / k
    #[arg(long, default_value = "8M")]
    stripe: String,
    /// tween: hotness groups N (one NVRAM buffer each)
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
    /// tween: GC mode, active (threshold) or periodic (idle)
    #[arg(long, default_value = "active")]
    gc: String,
    /// tween: collect while fewer log segments are free (default 2N + 2)
    #[arg(long)]
    gc_threshold: Option<u64>,
    /// tween: fraction of the segments kept out of the capacity for GC (at least 2N + 2 segments)
    #[arg(long, default_value_t = 0.1)]
    over_provisioning: f64,
}

/// The chunk size of a tween array of `k` data chunks: stripe / k.
pub fn chunk_bytes(t: &TweenArgs, k: usize) -> Result<u64> {
    let stripe = parse_size(&t.stripe)?;
    if k == 0 || !stripe.is_multiple_of(k as u64) || !(stripe / k as u64).is_multiple_of(512) {
        bail!(
            "invalid array configuration: stripe {} is not k = {k} chunks of a multiple of 512 bytes",
            t.stripe
        );
    }
    Ok(stripe / k as u64)
}

pub fn create(cfg: &ArrayConfig, devices: ArrayDevices, t: &TweenArgs, json: bool) -> Result<()> {
    let Some(path) = &t.nvram else {
        bail!("scheme tween needs --nvram PATH (its NVRAM region)");
    };
    let tcfg = TweenConfig {
        groups: t.groups,
        extent_bytes: u32::try_from(parse_size(&t.extent)?).context("extent size too large")?,
        alpha: t.alpha,
        beta: t.beta,
        gc_mode: GcMode::parse(&t.gc)?,
        gc_threshold: t.gc_threshold,
        over_provisioning: t.over_provisioning,
        ..TweenConfig::default()
    };
    let spec = NvramSpec::File {
        path: path.clone(),
        bytes: t.nvram_size.as_deref().map(parse_size).transpose()?,
    };
    let tw = Tween::create(cfg, devices, &tcfg, &spec)?;
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

#[derive(Args)]
pub struct ExpTweenArgs {
    /// Small traces (scale 0.004 instead of 0.02)
    #[arg(long)]
    quick: bool,
    /// Trace scale relative to the published traces (overrides --quick's)
    #[arg(long)]
    scale: Option<f64>,
    /// Traces: fin, web, usr, mds
    #[arg(long, value_delimiter = ',', default_value = "fin,web,usr,mds")]
    traces: Vec<String>,
    /// Hotness groups N
    #[arg(long, default_value_t = 4)]
    groups: usize,
    #[arg(long, default_value_t = 0.5)]
    alpha: f64,
    #[arg(long, default_value_t = 0.1)]
    beta: f64,
    /// GC mode: active or periodic
    #[arg(long, default_value = "active")]
    gc: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

pub fn experiment(a: ExpTweenArgs) -> Result<()> {
    use ecstack_lab::eplog::TraceName;
    let mut cfg = ecstack_lab::tween::TweenExpConfig::new(a.quick);
    if let Some(s) = a.scale {
        cfg.scale = s;
    }
    cfg.traces = a
        .traces
        .iter()
        .map(|t| match t.trim().to_ascii_lowercase().as_str() {
            "fin" => Ok(TraceName::Fin),
            "web" => Ok(TraceName::Web),
            "usr" => Ok(TraceName::Usr),
            "mds" => Ok(TraceName::Mds),
            o => bail!("--traces: unknown trace '{o}' (fin, web, usr, mds)"),
        })
        .collect::<Result<_>>()?;
    cfg.groups = a.groups;
    cfg.alpha = a.alpha;
    cfg.beta = a.beta;
    cfg.gc_mode = GcMode::parse(&a.gc)?;
    cfg.seed = a.seed;
    let rows = ecstack_lab::tween::run(&cfg)?;
    if a.json {
        return print_json(&rows);
    }
    print!("{}", ecstack_lab::tween::render(&rows));
    Ok(())
}
