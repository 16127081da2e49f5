//! `ecstack experiment`: argument parsing for the experiments of `ecstack_lab`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use ecstack_array::SchemeKind;
use ecstack_lab::codfs_model::ModelConfig;
use ecstack_lab::eplog::{EplogConfig, Exp, KvCells, KvScale, KvWorkload, Setting, Testbed};
use ecstack_lab::LabError;

use crate::scratch::Scratch;
use crate::util::print_report;

#[derive(Args)]
pub struct ExperimentArgs {
    #[command(subcommand)]
    cmd: ExpCmd,
}

#[derive(Subcommand)]
enum ExpCmd {
    /// EPLOG §5 Exps 1-6: write traffic, GC, commit frequency, requests/s, recovery, KV store (md vs pl vs eplog)
    Eplog(EplogArgs),
    /// CodFS: `--exp model` checks the §5.1 throughput model on an emulated network (root, ip, tc); `synthetic`, `overhead` and `msr` run the update schemes on a local cluster (§5.2, §5.3.1); `--exp reserve` simulates §5.3.2's reserved space (Algorithm 1) over the Harvard trace
    Codfs(CodfsArgs),
    /// RobuSTore ch. 6: every figure (Table 6-2) on the simulator; `--shard i/N`, `--merge DIR`
    Robustore(crate::cmd_robustore::RobustoreExpArgs),
    /// RobuSTore on the real cluster: 16 OSDs on throttled stores at Table 6-1's rates, robust
    /// (LT, RaptorQ) and RS 6+2 files on 8 random OSDs per access, each figure beside the
    /// simulator's on the same disks (docs/robustore.md "On the cluster")
    RobustoreCluster(crate::cmd_robustore::RobustoreClusterArgs),
    /// ZombieNAND §4.4.3 synthetic grid to death, parallel, --shard i/N + --merge (docs/zombienand.md)
    Zombienand(crate::cmd_zombienand::ExpZombieArgs),
    /// TWEEN's first evaluation: md vs eplog vs tween on simulated SSDs, EPLOG traces (docs/tween.md)
    Tween(crate::cmd_tween::ExpTweenArgs),
    /// RainFS §2.7: TeraSort suite by NAS count and by architecture over emulated links (docs/rainfs.md)
    #[command(long_about = crate::cmd_rainfs::EXP_LONG_ABOUT)]
    Rainfs(crate::cmd_rainfs::ExpRainfsArgs),
}

#[derive(Args)]
struct CodfsArgs {
    /// Which experiment: `model` (§5.1 on emulated links), `synthetic` (§5.2: the four update
    /// schemes on HDD-profiled OSD stores), `overhead` (§5.2.5: PLR (6,4) against (8,6) and (8,4)),
    /// `msr` (§5.3.1: the ten MSR Cambridge volumes replayed by 10 clients under each scheme) or
    /// `reserve` (§5.3.2, a simulation)
    #[arg(long, default_value = "model")]
    exp: String,
    /// synthetic, msr: the update schemes to compare (fo, fl, codfs-pl, plr)
    #[arg(long, value_delimiter = ',', default_value = "fo,fl,codfs-pl,plr")]
    update_scheme: Vec<String>,
    /// synthetic, overhead: file bytes in all, split over --writers files (default 1G; 4M with --quick)
    #[arg(long)]
    data_size: Option<String>,
    /// synthetic, overhead: clients writing (and later reading) one file each
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// synthetic, overhead: concurrent clients issuing the random updates, one at a time each
    #[arg(long, default_value_t = 8)]
    updaters: usize,
    /// synthetic, overhead: the update record, aligned (the seed's IOzone: 128K; 32K with --quick)
    #[arg(long)]
    record: Option<String>,
    /// synthetic, overhead: update bytes per 16 MiB of file (the seed: 16M, four PLR reserves)
    #[arg(long, default_value = "16M")]
    update_per_16m: String,
    /// synthetic, overhead, msr: each OSD's store is `throttled:profile=NAME:file:…` (eplog-hdd,
    /// eplog-ssd), or `none` for directory stores
    #[arg(long, default_value = "eplog-hdd")]
    store_profile: String,
    /// synthetic, overhead, msr: size of each OSD's device file (sparse)
    #[arg(long, default_value = "4G")]
    device_size: String,
    /// synthetic, overhead, msr: a page cache of this size in each OSD in front of its profiled
    /// device (what the seed's 8 GB OSDs had; dropped before each phase by restarting the OSDs,
    /// as the seed dropped it before each test), or 0 for none: every read pays the profile
    #[arg(long, default_value = "1G")]
    page_cache: String,
    /// synthetic, overhead, msr: PLR's merge ahead (`[update.reserve] merge_ahead`): a reserve a
    /// delta leaves at least this fraction full is merged off the update path; 0 (default): only
    /// when a delta does not fit, as the seed's §5.2
    #[arg(long, default_value_t = 0.0)]
    merge_ahead: f64,
    /// synthetic, overhead, msr: the page cache writes back (10 % of it dirty starts a write-back,
    /// in address order) and ignores fsync — the seed's prototype wrote through the buffer cache
    /// and names no sync; nothing is durable at the acknowledgement (a model, for comparison)
    #[arg(long)]
    writeback: bool,
    /// synthetic, overhead, msr: daemons speak mTLS (default: plain HTTP/2 on loopback, so that TLS
    /// does not spend the cores the phases are measured on)
    #[arg(long)]
    tls: bool,
    /// reserve: size of the Harvard DEAS03 trace relative to the published 173 M writes (its 41
    /// days are kept) [default: 0.05]; msr: size of each MSR trace relative to CodFS Table 3.2's
    /// writes and WSS [default: 0.002]
    #[arg(long)]
    scale: Option<f64>,
    /// reserve, synthetic, overhead, msr: a small run (seconds), as CI runs it (msr: volumes
    /// src22 and mds0 at scale 0.0002, 1 MiB segments, 8 OSDs)
    #[arg(long)]
    quick: bool,
    /// msr: the MSR volumes to replay (each the preset msr-NAME) [default: the seed's ten: src22,
    /// mds0, rsrch0, usr0, web0, ts0, stg0, hm0, prn1, proj0]
    #[arg(long, value_delimiter = ',')]
    volumes: Option<Vec<String>>,
    /// reserve: strategies to compare (fixed-SIZE, shrink-only, shrink-merge)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fixed-2M,fixed-8M,fixed-16M,shrink-only,shrink-merge"
    )]
    strategies: Vec<String>,
    /// reserve: Algorithm 1's smoothing factor α
    #[arg(long, default_value_t = 0.3)]
    alpha: f64,
    /// reserve: u_0, the utility a new reserve starts with (1: as if fully used, so idle reserves
    /// shrink gradually and stop at one chunk; 0: idle reserves go at their first shrink)
    #[arg(long, default_value_t = ecstack_sim::reserve::U0)]
    u0: f64,
    /// reserve: every adaptive reserve's size at first
    #[arg(long, default_value = "16M")]
    initial_reserve: String,
    /// Values of M (OSDs) (model: default 6,8,10; synthetic and overhead: one value, default 8
    /// for (6,4) and 10 for overhead's (8,k))
    #[arg(long, value_delimiter = ',')]
    osds: Option<Vec<usize>>,
    /// Segment sizes
    #[arg(long, value_delimiter = ',', default_value = "16M")]
    segment_size: Vec<String>,
    /// model: the codes to run, each at every M and segment size (the seed's §5.1 ran RDP (6,4)
    /// beside RS: `--code rs-vand,rdp`)
    /// (synthetic: one code, default rdp)
    #[arg(long, value_delimiter = ',')]
    code: Option<Vec<String>>,
    /// Data chunks per segment (default: 4 for `model`, 8 for `reserve`, as the seed's runs)
    #[arg(short = 'k', long = "k")]
    k: Option<u32>,
    /// Parity chunks per segment (default 2)
    #[arg(short = 'm', long = "m")]
    m: Option<u32>,
    /// B: each OSD's link in each direction (tc tbf), Mbit/s
    #[arg(long, default_value_t = 100.0)]
    rate_mbit: f64,
    /// Concurrent clients (model: each on its own emulated host; msr: replaying the trace)
    #[arg(long, default_value_t = 10)]
    clients: usize,
    /// Bytes each client puts and gets
    #[arg(long, default_value = "64M")]
    size: String,
    /// Each client's window in a put or a get, in segments' bytes in transit: another segment starts once those in flight have less than this many segments' bytes left to move, up to one segment more (the client library's default is 4)
    #[arg(long, default_value_t = 4)]
    window: usize,
    /// Skip the degraded read and recovery measurements
    #[arg(long)]
    no_failures: bool,
    /// Stream for SECS per phase instead of moving --size once: clients put one growing file of
    /// their bytes repeated, then get it over and over; measured from the end of a warm-up (SECS/4,
    /// and a first window of segments per client acknowledged) to SECS, when every client is active
    /// (the thesis's "streams of segments"; no tail in the figure)
    #[arg(long, value_name = "SECS")]
    stream: Option<f64>,
    /// The MDS marks a silent OSD down after this long
    #[arg(long, default_value_t = 10_000)]
    down_after_ms: u64,
    /// TCP congestion control of every emulated host, or `host` for this machine's default
    /// (net.ipv4.tcp_congestion_control). CUBIC is Linux's stock default; BBR (v1) loses far more
    /// packets at the OSDs' tbf queues with many flows into each (docs/benchmarks.md)
    #[arg(long, value_name = "NAME", default_value = ecstack_lab::codfs_model::DEFAULT_TCP_CC)]
    tcp_cc: String,
    /// Output directory for the Markdown report, CSV and SVG
    #[arg(short = 'o', long, default_value = "codfs-results")]
    out: PathBuf,
    /// Keep the clusters' files here (default: a scratch directory in $TMPDIR, removed at the end
    /// and on Ctrl-C / SIGTERM)
    #[arg(long)]
    dir: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct EplogArgs {
    /// Small traces and a subset of the runs (a few minutes)
    #[arg(long)]
    quick: bool,
    /// Trace scale relative to the published traces (default 0.004 with --quick, 0.02 otherwise)
    #[arg(long)]
    scale: Option<f64>,
    /// Experiments to run (6, the key-value store, only when asked for)
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5")]
    exp: Vec<u32>,
    /// Output directory for the Markdown report, CSV and SVG files
    #[arg(short = 'o', long, default_value = "eplog-results")]
    out: PathBuf,
    /// Directory in which the device files of Exps 4-6 get a scratch directory of their own
    /// (default: $TMPDIR), removed at the end and on Ctrl-C / SIGTERM
    #[arg(long)]
    dir: Option<PathBuf>,
    /// RAID settings k+m to run (Exps 1, 2 and 4; the others always use 6+2)
    #[arg(long, value_delimiter = ',', default_value = "4+1,6+1,4+2,6+2")]
    settings: Vec<String>,
    /// Schemes to run (Exps 1, 2, 4 and 6)
    #[arg(long, value_delimiter = ',', default_value = "md,pl,eplog")]
    schemes: Vec<String>,
    /// Exp 4 is also run with these numbers of concurrent clients (FIN, every setting; the
    /// one-client runs always happen). The per-client-count ratios are Exp 4's primary figures;
    /// each scheme's peak over them is reported as a secondary figure
    #[arg(long, value_delimiter = ',', default_value = "8,32,128")]
    clients: Vec<usize>,
    /// eplog stripe buffer in the multi-client runs: batches written at once (0 = off)
    #[arg(long, default_value_t = ecstack_array::scheme::DEFAULT_IN_FLIGHT)]
    stripe_buffer: usize,
    /// Per-chunk checksums off in Exps 1-6 (to measure what they cost, docs/array.md)
    #[arg(long)]
    no_checksums: bool,
    /// Exp 4 and 6 testbeds: `files` (O_DIRECT files in --dir), `paper` (EPLOG's SSDs and HDDs, Table 1,
    /// emulated: RAM devices charged the paper's per-request service times)
    #[arg(long, value_delimiter = ',', default_value = "files,paper")]
    testbed: Vec<String>,
    /// Exp 6: pairs loaded per array (default 2000 with --quick, 50000 otherwise; the seed's 1000000)
    #[arg(long)]
    kv_pairs: Option<u64>,
    /// Exp 6: requests per run (default three per pair, as the seed's 3 M over 1 M)
    #[arg(long)]
    kv_requests: Option<u64>,
    /// Exp 6: pair sizes to run (metadata + key + value, multiples of 4K)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "4K,8K",
        value_name = "SIZES"
    )]
    kv_pair_sizes: Vec<String>,
    /// Exp 6: workloads to run (update-only, hybrid)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "update-only,hybrid",
        value_name = "WORKLOADS"
    )]
    kv_workloads: Vec<String>,
    /// Exp 6: object metadata cache sizes to run, percent of the pairs
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,25,50,75,100",
        value_name = "PCTS"
    )]
    kv_cache: Vec<u32>,
    /// Exp 6: run each cell N times, the schemes in turn (md, pl, eplog, md, ...), and report
    /// medians with their ranges; with N > 1 every scheme's array is built and loaded first and
    /// kept until its pair size is done (up to 3x the device files or RAM of N = 1)
    #[arg(long, default_value_t = 1, value_name = "N")]
    kv_repeat: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print all results as JSON
    #[arg(long)]
    json: bool,
}

pub fn run(a: ExperimentArgs) -> Result<()> {
    match a.cmd {
        ExpCmd::Eplog(e) => eplog(e),
        ExpCmd::Codfs(c) => codfs(c),
        ExpCmd::Robustore(r) => crate::cmd_robustore::experiment(r),
        ExpCmd::RobustoreCluster(r) => crate::cmd_robustore::cluster_experiment(r),
        ExpCmd::Zombienand(z) => crate::cmd_zombienand::run_experiment(z),
        ExpCmd::Tween(t) => crate::cmd_tween::experiment(t),
        ExpCmd::Rainfs(r) => crate::cmd_rainfs::experiment(r),
    }
}

fn codfs(a: CodfsArgs) -> Result<()> {
    match a.exp.as_str() {
        "model" => {}
        "reserve" => return codfs_reserve(a),
        "synthetic" | "overhead" => return codfs_synthetic(a),
        "msr" => return codfs_msr(a),
        other => anyhow::bail!(
            "--exp: {other:?} is not an experiment (known: model, synthetic, overhead, msr, reserve)"
        ),
    }
    let exe = std::env::current_exe().context("cannot find the ecstack binary")?;
    let mut cfg = ModelConfig::new(exe);
    cfg.osds = a.osds.unwrap_or_else(|| vec![6, 8, 10]);
    cfg.segment_bytes = a
        .segment_size
        .iter()
        .map(|s| crate::util::parse_size(s))
        .collect::<Result<_>>()?;
    cfg.k = a.k.unwrap_or(4);
    cfg.m = a.m.unwrap_or(2);
    cfg.codes = a.code.unwrap_or_else(|| vec!["rs-vand".into()]);
    cfg.rate_mbit = a.rate_mbit;
    cfg.clients = a.clients;
    cfg.bytes_per_client = crate::util::parse_size(&a.size)?;
    cfg.window_segments = a.window;
    cfg.failures = !a.no_failures;
    cfg.stream_secs = a.stream;
    cfg.down_after_ms = a.down_after_ms;
    cfg.tcp_cc = (a.tcp_cc != "host").then_some(a.tcp_cc);
    cfg.heartbeat_ms = (a.down_after_ms / 5).clamp(1, 1_000);
    cfg.seed = a.seed;
    cfg.validate().map_err(flag_error)?;
    // Ctrl-C and SIGTERM kill the daemons, delete the namespaces (and the scratch directory:
    // `Scratch`) and exit.
    crate::signals::on_stop(|| {
        eprintln!("ecstack: interrupted: stopping the daemons and deleting the namespaces");
        ecstack_lab::codfs_netns::cleanup();
    })?;
    crate::signals::exit_on_stop()?;
    // The clusters' files: the user's --dir is kept; otherwise a scratch directory.
    let scratch = match &a.dir {
        Some(_) => None,
        None => Some(Scratch::new(None, "codfs")?),
    };
    cfg.dir = a
        .dir
        .clone()
        .or(scratch.as_ref().map(|s| s.path().to_owned()));
    let dir = cfg.dir.clone().unwrap_or_default();
    crate::scratch::announce(
        "experiment codfs",
        &[&dir, &a.out],
        "several minutes per (M, segment size) point, longer with --stream",
    );
    let report =
        ecstack_lab::codfs_model::run(&cfg, &crate::util::progress_line).map_err(flag_error)?;
    drop(scratch);
    report.write(&a.out)?;
    print_report(&report, || report.markdown(), &a.out, a.json)
}

/// `--exp reserve`: the simulation of §5.3.2 (no daemons, no root).
fn codfs_reserve(a: CodfsArgs) -> Result<()> {
    use ecstack_lab::codfs_reserve::{parse_strategy, ReserveConfig};
    let mut cfg = ReserveConfig::new(
        if a.quick {
            0.002
        } else {
            a.scale.unwrap_or(0.05)
        },
        a.seed,
    );
    cfg.sim.k = a.k.unwrap_or(cfg.sim.k);
    cfg.sim.m = a.m.unwrap_or(cfg.sim.m);
    cfg.sim.segment_bytes = match a.segment_size.as_slice() {
        [one] => crate::util::parse_size(one)?,
        _ => anyhow::bail!("--segment-size: the reserve experiment takes one size"),
    };
    cfg.sim.alpha = a.alpha;
    cfg.sim.u0 = a.u0;
    cfg.sim.initial_bytes = crate::util::parse_size(&a.initial_reserve)?;
    cfg.sim.strategies = a
        .strategies
        .iter()
        .map(|s| parse_strategy(s))
        .collect::<Result<_, _>>()
        .map_err(flag_error)?;
    cfg.validate().map_err(flag_error)?;
    crate::scratch::announce(
        "experiment codfs --exp reserve",
        &[&a.out],
        if a.quick {
            "under a minute (--quick)"
        } else {
            "minutes, longer at larger --scale (a one-pass simulation, no scratch files)"
        },
    );
    let e =
        ecstack_lab::codfs_reserve::run(&cfg, &crate::util::progress_line).map_err(flag_error)?;
    e.write(&a.out)?;
    print_report(&e, || e.markdown(), &a.out, a.json)
}

/// `--exp synthetic` and `--exp overhead`: a local cluster of real processes per setting.
fn codfs_synthetic(a: CodfsArgs) -> Result<()> {
    use ecstack_lab::codfs_synthetic::{SyntheticConfig, Which};
    let which = if a.exp == "overhead" {
        Which::Overhead
    } else {
        Which::Synthetic
    };
    let schemes = schemes_of(&a)?;
    let segment_bytes = one_segment_size(&a)?;
    let settings = match which {
        Which::Synthetic => {
            let code = one_code(&a)?;
            SyntheticConfig::synthetic(
                &schemes,
                &code,
                a.k.unwrap_or(4),
                a.m.unwrap_or(2),
                segment_bytes,
            )
        }
        // Every configuration stores 8 chunks of segment/4 bytes per segment.
        Which::Overhead => SyntheticConfig::overhead(segment_bytes / 4),
    };
    let osds = match a.osds.as_deref() {
        None => settings
            .iter()
            .map(|s| (s.k + s.m) as usize + 2)
            .max()
            .unwrap_or(8),
        Some([one]) => *one,
        Some(_) => anyhow::bail!("--osds: give one number"),
    };
    let size = |v: &Option<String>, quick: &str, full: &str| {
        crate::util::parse_size(v.as_deref().unwrap_or(if a.quick { quick } else { full }))
    };
    let mut cfg = SyntheticConfig {
        which,
        dir: PathBuf::new(),
        settings,
        testbed: testbed(&a, osds)?,
        data_bytes: size(&a.data_size, "4M", "1G")?,
        writers: a.writers,
        updaters: a.updaters,
        record_bytes: size(&a.record, "32K", "128K")?,
        update_bytes_per_16mib: crate::util::parse_size(&a.update_per_16m)?,
        seed: a.seed,
        quick: a.quick,
    };
    cfg.validate().map_err(flag_error)?;
    let (scratch, dir) = cluster_dir(&a, "setting")?;
    cfg.dir = dir;
    let report =
        ecstack_lab::codfs_synthetic::run(&cfg, &crate::util::progress_line).map_err(flag_error)?;
    drop(scratch);
    report.write(&a.out)?;
    print_report(&report, || report.markdown(), &a.out, a.json)
}

/// `--exp msr`: §5.3.1's MSR Cambridge replay, a local cluster of real processes per volume and
/// scheme.
fn codfs_msr(a: CodfsArgs) -> Result<()> {
    use ecstack_lab::codfs_msr::{MsrConfig, VOLUMES};
    use ecstack_lab::codfs_synthetic::SyntheticConfig;
    let settings = SyntheticConfig::synthetic(
        &schemes_of(&a)?,
        &one_code(&a)?,
        a.k.unwrap_or(4),
        a.m.unwrap_or(2),
        one_segment_size(&a)?,
    );
    let osds = match a.osds.as_deref() {
        None if a.quick => 8,
        None => 10,
        Some([one]) => *one,
        Some(_) => anyhow::bail!("--osds: give one number"),
    };
    let volumes = match (&a.volumes, a.quick) {
        (Some(v), _) => v.clone(),
        (None, true) => vec!["src22".into(), "mds0".into()],
        (None, false) => VOLUMES.iter().map(|v| (*v).to_owned()).collect(),
    };
    let mut cfg = MsrConfig {
        dir: PathBuf::new(),
        settings,
        volumes,
        scale: match (a.scale, a.quick) {
            (Some(s), _) => s,
            (None, true) => 0.0002,
            (None, false) => 0.002,
        },
        clients: a.clients,
        testbed: testbed(&a, osds)?,
        seed: a.seed,
        quick: a.quick,
    };
    cfg.validate().map_err(flag_error)?;
    let (scratch, dir) = cluster_dir(&a, "volume and scheme")?;
    cfg.dir = dir;
    let report =
        ecstack_lab::codfs_msr::run(&cfg, &crate::util::progress_line).map_err(flag_error)?;
    drop(scratch);
    report.write(&a.out)?;
    print_report(&report, || report.markdown(), &a.out, a.json)
}

/// The cluster experiments' testbed: `osds` OSDs on `--store-profile` devices of `--device-size`
/// (256 MiB with `--quick`), plain HTTP/2 unless `--tls`, two threads per OSD.
fn testbed(a: &CodfsArgs, osds: usize) -> Result<ecstack_lab::codfs_synthetic::Testbed> {
    Ok(ecstack_lab::codfs_synthetic::Testbed {
        exe: std::env::current_exe().context("cannot find the ecstack binary")?,
        osds,
        profile: (a.store_profile != "none").then(|| a.store_profile.clone()),
        page_cache_bytes: Some(crate::util::parse_size(&a.page_cache)?)
            .filter(|&b| b > 0 && a.store_profile != "none"),
        device_bytes: crate::util::parse_size(if a.quick { "256M" } else { &a.device_size })?,
        insecure: !a.tls,
        osd_threads: Some(2),
        merge_ahead: a.merge_ahead,
        writeback: a.writeback,
    })
}

/// `--update-scheme` of the cluster experiments.
fn schemes_of(a: &CodfsArgs) -> Result<Vec<ecstack_client::UpdateScheme>> {
    a.update_scheme
        .iter()
        .map(|s| s.parse::<ecstack_client::UpdateScheme>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("--update-scheme: {e}"))
}

/// The one `--segment-size` of the cluster experiments (1 MiB with `--quick`).
fn one_segment_size(a: &CodfsArgs) -> Result<u64> {
    match (a.segment_size.as_slice(), a.quick) {
        ([one], false) => crate::util::parse_size(one),
        ([_], true) => Ok(1 << 20),
        _ => anyhow::bail!("--segment-size: give one size"),
    }
}

/// The one `--code` of the cluster experiments (default rdp, the seed's).
fn one_code(a: &CodfsArgs) -> Result<String> {
    match a.code.as_deref() {
        None => Ok("rdp".to_owned()),
        Some([one]) => Ok(one.clone()),
        Some(_) => anyhow::bail!("--code: the {} experiment takes one code", a.exp),
    }
}

/// Where the clusters' files go: the user's `--dir` (kept), or a scratch directory removed at the
/// end and on Ctrl-C / SIGTERM (returned, to drop when done); announced with the time it takes
/// (seconds or minutes `per` run).
fn cluster_dir(a: &CodfsArgs, per: &str) -> Result<(Option<Scratch>, PathBuf)> {
    crate::signals::exit_on_stop()?;
    let scratch = match &a.dir {
        Some(_) => None,
        None => Some(Scratch::new(None, "codfs")?),
    };
    let dir = a
        .dir
        .clone()
        .or(scratch.as_ref().map(|s| s.path().to_owned()))
        .unwrap_or_default();
    crate::scratch::announce(
        &format!("experiment codfs --exp {}", a.exp),
        &[&dir, &a.out],
        &if a.quick {
            format!("seconds per {per} (--quick)")
        } else {
            format!("minutes per {per}")
        },
    );
    Ok((scratch, dir))
}

/// A library configuration error as the flag it came from: `--settings: 'six' is not k+m`.
fn flag_error(e: LabError) -> anyhow::Error {
    match e {
        LabError::Config { field, msg } => anyhow::anyhow!("--{field}: {msg}"),
        other => other.into(),
    }
}

/// The experiment's configuration; its device files go to `dir` (the caller's scratch directory).
fn eplog_config(a: &EplogArgs, dir: PathBuf) -> Result<EplogConfig, LabError> {
    let schemes = a.schemes.iter().map(|s| {
        SchemeKind::parse(s).map_err(|e| LabError::Config {
            field: "schemes",
            msg: e.to_string(),
        })
    });
    let cfg = EplogConfig {
        quick: a.quick,
        scale: a.scale.unwrap_or(EplogConfig::default_scale(a.quick)),
        exps: a
            .exp
            .iter()
            .map(|&e| Exp::from_number(e))
            .collect::<Result<_, _>>()?,
        settings: a
            .settings
            .iter()
            .map(|s| s.parse::<Setting>())
            .collect::<Result<_, _>>()?,
        schemes: schemes.collect::<Result<_, _>>()?,
        clients: a.clients.clone(),
        stripe_buffer: a.stripe_buffer,
        checksums: !a.no_checksums,
        testbeds: a
            .testbed
            .iter()
            .map(|t| t.parse::<Testbed>())
            .collect::<Result<_, _>>()?,
        kv: KvScale {
            pairs: a.kv_pairs.unwrap_or(KvScale::default_for(a.quick).pairs),
            requests: a
                .kv_requests
                .unwrap_or(3 * a.kv_pairs.unwrap_or(KvScale::default_for(a.quick).pairs)),
        },
        kv_cells: KvCells {
            pair_bytes: a
                .kv_pair_sizes
                .iter()
                .map(|s| {
                    ecstack_base::parse_size(s).map_err(|e| LabError::Config {
                        field: "kv-pair-sizes",
                        msg: e.to_string(),
                    })
                })
                .collect::<Result<_, _>>()?,
            workloads: a
                .kv_workloads
                .iter()
                .map(|w| w.parse::<KvWorkload>())
                .collect::<Result<_, _>>()?,
            cache_pct: a.kv_cache.clone(),
            repeat: a.kv_repeat,
        },
        seed: a.seed,
        dir,
    };
    cfg.validate()?;
    Ok(cfg)
}

fn eplog(a: EplogArgs) -> Result<()> {
    // Every argument is checked before anything is created or run.
    let mut cfg = eplog_config(&a, PathBuf::new()).map_err(flag_error)?;
    let scratch = Scratch::new(a.dir.as_deref(), "eplog")?;
    cfg.dir = scratch.path().to_owned();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    crate::scratch::announce(
        "experiment eplog",
        &[scratch.path(), &a.out],
        if a.quick {
            "a few minutes (--quick)"
        } else {
            "one to several hours (Exp 4's client counts dominate; --quick takes minutes)"
        },
    );
    let report = ecstack_lab::eplog::run(&cfg, &crate::util::progress_line).map_err(flag_error)?;
    drop(scratch);
    report.write(&a.out)?;
    print_report(&report, || report.markdown(), &a.out, a.json)
}
