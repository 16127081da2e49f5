//! `ecstack bench`: throughput measurements, side by side with the peer (library or server) in the same run.

use crate::util::{fmt_size, parse_size, print_json, print_json_or};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ecstack_client::UpdateScheme;
use ecstack_codes::CodeKind;
use ecstack_lab::admission_bench::{self, AdmissionBenchConfig};
use ecstack_lab::codfs_bench::{self, ClusterBenchConfig};
use ecstack_lab::codfs_updload::UpdateLoadConfig;
use ecstack_lab::ec_bench::{self, BenchClock, EcBenchConfig, RatelessConfig};
use ecstack_lab::mds_backup::{self, BackupBenchConfig};
use ecstack_lab::mds_bench::{self, MdsBenchConfig};
use ecstack_lab::mds_failover::{self, FailoverBenchConfig};
use ecstack_lab::mount_bench::{self, MountBenchConfig, MountWorkload};
use ecstack_lab::LabError;
use std::path::PathBuf;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(Subcommand)]
enum BenchWhat {
    /// Erasure-code throughput: RS encode / decode / parity delta per (k, m, chunk), LT and RaptorQ.
    /// Built with `--features isal-new` (or `isal`), ISA-L runs on the same buffers at the same kernel
    /// level and the ratio ours/ISA-L is printed.
    Ec(EcBench),
    /// The CodFS cluster on loopback (real daemons): one client with a big file, then N clients
    /// against MinIO (8 drives, EC:m) in the same run, and a small update (FO) against MinIO's
    /// whole-object rewrite. The logic is `ecstack_lab::codfs_bench`
    Cluster(ClusterBench),
    /// File-system work through FUSE mounts side by side: our cluster's mount (8 OSDs, RS 6+2),
    /// bindfs over a local directory, and a GlusterFS volume given by its mountpoint (set up per
    /// ../shared/peers/glusterfs.md). The logic is `ecstack_lab::mount_bench`
    Mount(MountBench),
    /// Metadata ops/s (create, stat, rename, unlink of small files through the client library)
    /// with the MDS's store in SQLite and in PostgreSQL, side by side. The logic is
    /// `ecstack_lab::mds_bench`
    Mds(MdsBench),
    /// MDS failover: two MDSs on one PostgreSQL database, the active one SIGKILLed N times under
    /// a metadata load; time from each kill to the first successful call at the standby, and
    /// acknowledged metadata lost. The logic is `ecstack_lab::mds_failover`
    Failover(FailoverBench),
    /// Online backup of the metadata of a namespace of many files (one MDS, no OSDs) under a
    /// metadata load: the load's latency and ops/s during `cluster backup` beside those without
    /// a backup, the backup's duration and size, and a restore of it. SQLite, and PostgreSQL
    /// (`pg_dump`) with --postgres. The logic is `ecstack_lab::mds_backup`
    Backup(BackupBench),
    /// Admission control of block streams at one OSD whose store pays for positioning when
    /// streams interleave (EPLOG's HDD profile): the aggregate throughput of many concurrent
    /// GetBlocks readers with admission off and on (docs/robustore.md "Admission control on
    /// OSDs"). The logic is `ecstack_lab::admission_bench`
    Admission(AdmissionBench),
}

#[derive(Args)]
struct AdmissionBench {
    /// Readers at once, each reading its own object over and over
    #[arg(long, default_value_t = 48)]
    streams: usize,
    /// Bytes per object
    #[arg(long, default_value = "4M")]
    object_size: String,
    /// Bytes per coded block
    #[arg(long, default_value = "1M")]
    block_size: String,
    /// Block I/O threads of the OSD in the first two runs (0: one per stream)
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// The throughput each admitted stream keeps, per second (a size)
    #[arg(long, default_value = "8M")]
    floor: String,
    /// Seconds each run reads
    #[arg(long, default_value_t = 8.0)]
    seconds: f64,
    /// The store's device spec (docs/devices.md); `{size}` stands for a capacity that holds the
    /// objects
    #[arg(long, default_value = "throttled:profile=eplog-hdd:mem:{size}")]
    device: String,
    /// A short run: 40 readers of 2 MiB objects for 3 s
    #[arg(long)]
    quick: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct FailoverBench {
    /// An empty PostgreSQL database the two MDSs share (postgresql://USER@HOST/DB, or
    /// postgresql://USER@/DB?host=/socket/dir)
    #[arg(long)]
    postgres: String,
    /// Kills of the active MDS
    #[arg(long, default_value_t = 20)]
    kills: usize,
    /// [mds] lease_ms (default: the cluster default)
    #[arg(long)]
    lease_ms: Option<u64>,
    /// Metadata load between a takeover and the next kill, ms
    #[arg(long, default_value_t = 500)]
    load_ms: u64,
    /// No TLS between the client and the MDSs
    #[arg(long)]
    insecure: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BackupBench {
    /// Files in the namespace (empty, made with mknod, 1,000 per directory)
    #[arg(long, default_value_t = 100_000)]
    files: u64,
    /// Client tasks filling the namespace at once
    #[arg(long, default_value_t = 16)]
    fill_tasks: usize,
    /// Client tasks of the load (each repeating stat + create + unlink without pause)
    #[arg(long, default_value_t = 4)]
    load_tasks: usize,
    /// Seconds of the idle window; backups run back to back for at least as long
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// An empty PostgreSQL database to run against as well (postgresql://USER@HOST/DB, or
    /// postgresql://USER@/DB?host=/socket/dir)
    #[arg(long)]
    postgres: Option<String>,
    /// Where the clusters and backups live (default: a temporary directory)
    #[arg(long)]
    dir: Option<PathBuf>,
    /// No TLS between the clients and the MDS
    #[arg(long)]
    insecure: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct MountBench {
    #[arg(long, default_value_t = 8)]
    osds: usize,
    #[arg(short = 'k', long = "k", default_value_t = 6)]
    k: u32,
    #[arg(short = 'm', long = "m", default_value_t = 2)]
    m: u32,
    #[arg(long, default_value = "16M")]
    segment_size: String,
    /// The mount's segment cache
    #[arg(long, default_value = "256M")]
    cache_size: String,
    /// Small files of the create / stat / rename / unlink runs
    #[arg(long, default_value_t = 10_000)]
    files: usize,
    /// The sequential write and read
    #[arg(long, default_value = "1G")]
    seq_size: String,
    /// The file fio's random writes land in (written whole first, not timed)
    #[arg(long, default_value = "1G")]
    random_file_size: String,
    /// fio's 4 KiB random writes (O_DIRECT, queue depth 16; then an fsync), each target alike
    #[arg(long, default_value_t = 16_384)]
    random_writes: u64,
    /// A source tree to extract with tar into each mount and run `git status` on
    #[arg(long)]
    tree: Option<PathBuf>,
    /// A mounted GlusterFS volume (its mountpoint) to run beside ours
    #[arg(long)]
    gluster: Option<PathBuf>,
    /// Set up a GlusterFS disperse k+m volume over k+m bricks in --dir for the run (glusterd,
    /// volume create/start, mount; all removed after) and run beside ours; root only
    #[arg(long, conflicts_with = "gluster")]
    gluster_setup: bool,
    /// Leave bindfs out
    #[arg(long)]
    no_bindfs: bool,
    /// Where the cluster and the scratch files live (default: a temporary directory)
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Our MDS's metadata in this empty PostgreSQL database (postgresql://USER@HOST/DB, or
    /// postgresql://USER@/DB?host=/socket/dir) instead of SQLite
    #[arg(long)]
    postgres: Option<String>,
    /// Run only these workloads: metadata, tree, sequential (with `cluster put|get` on the same
    /// cluster), degraded (needs sequential), random (fio; ours with the cache on and off)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "metadata,tree,sequential,degraded,random",
        value_name = "WORKLOADS"
    )]
    only: Vec<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct MdsBench {
    /// An empty PostgreSQL database for the MDS (postgresql://USER@HOST/DB, or
    /// postgresql://USER@/DB?host=/socket/dir)
    #[arg(long)]
    postgres: String,
    /// Files each phase creates, stats, renames and unlinks
    #[arg(long, default_value_t = 10_000)]
    files: u64,
    /// Client tasks issuing operations at once
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Rounds of the four phases; the two stores take turns phase by phase, and each ratio is
    /// the median of the rounds'
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// No TLS between the client and the MDS
    #[arg(long)]
    insecure: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ClusterBench {
    /// OSDs to start
    #[arg(long, default_value_t = 8)]
    osds: usize,
    /// Data chunks per segment
    #[arg(short = 'k', long = "k", default_value_t = 6)]
    k: u32,
    /// Parity chunks per segment (MinIO runs with EC:m)
    #[arg(short = 'm', long = "m", default_value_t = 2)]
    m: u32,
    /// Segment size
    #[arg(long, default_value = "16M")]
    segment_size: String,
    /// The one-client file (0: skip)
    #[arg(long, default_value = "1G")]
    file_size: String,
    /// Concurrent clients on each side
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Object size of the side-by-side runs
    #[arg(long, default_value = "16M")]
    object_size: String,
    /// Objects each side puts and gets
    #[arg(long, default_value_t = 64)]
    objects: usize,
    /// Bytes changed in one object per update
    #[arg(long, default_value = "4K")]
    update_size: String,
    /// Updates timed on each side
    #[arg(long, default_value_t = 20)]
    updates: usize,
    /// The MinIO server binary (default: $HOME/peers/bin/minio, as scripts/install-minio.sh puts it)
    #[arg(long)]
    minio: Option<PathBuf>,
    /// Ours only: do not run MinIO
    #[arg(long, conflicts_with = "minio")]
    no_minio: bool,
    /// Keep the cluster's and MinIO's files here (default: a temporary directory, removed at the end)
    #[arg(long)]
    dir: Option<PathBuf>,
    /// How our clients read: "direct" (straight from the data chunks' holders at the versions the
    /// primary names) or "primary" (through each segment's primary, as CodFS reads: two hops per byte)
    #[arg(long, default_value = "direct")]
    read_path: ecstack_client::ReadPath,
    /// Rounds of both sides, each with a fresh cluster and a fresh MinIO, alternating which side goes
    /// first; the summary gives medians (MinIO's get alone moved 756-1411 MB/s between single runs)
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Time the gets on a second read of every object, both sides (the first, untimed, fills the page
    /// cache: cold reads of chunks written with O_DIRECT depend on the host's disk cache on a VM)
    #[arg(long)]
    warm: bool,
    /// Worker threads of each of our OSDs (default: one per core; every OSD runs on this machine,
    /// so 8 OSDs with 2 each are 16 threads on the cores MinIO runs its one process on)
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    osd_threads: Option<u16>,
    /// Run our daemons without TLS and MinIO over plain HTTP (default: ours with mTLS, MinIO over HTTPS with a certificate from our cluster's CA, so both pay for TLS)
    #[arg(long)]
    insecure: bool,
    /// Random-update load (fio randwrite-like): the one file it updates
    #[arg(long, default_value = "1G")]
    update_file_size: String,
    /// Random-update load: queue depths, comma-separated (depth D = D updates in flight from this
    /// one client process, each task waiting for its ack)
    #[arg(long, default_value = "1,16")]
    depths: String,
    /// Random-update load: seconds per depth
    #[arg(long, default_value_t = 20.0)]
    update_seconds: f64,
    /// Random-update load: updates per depth instead of a duration (Ceph's fio still runs
    /// --update-seconds, at least 1)
    #[arg(long)]
    update_count: Option<u64>,
    /// Random-update load: the file's update scheme (fo, fl, codfs-pl, plr), or a comma-separated
    /// list to run each in turn, each on its own file
    #[arg(long, default_value = "fo,plr")]
    update_scheme: String,
    /// Skip the random-update load
    #[arg(long, conflicts_with_all = ["ceph", "updates_only"])]
    no_random_updates: bool,
    /// The random-update load only (no put / get rounds, no MinIO)
    #[arg(long)]
    updates_only: bool,
    /// Run Ceph's EC pool with overwrites (Debian's Pacific: a monitor, a manager and --osds
    /// BlueStore OSDs on files, k+m, one RBD image of --update-file-size) in the same run, measured
    /// with fio's rbd engine at the same depths; ratios ours / Ceph per scheme and depth. Fails
    /// when Ceph or fio cannot run here
    #[arg(long)]
    ceph: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct EcBench {
    /// Rows as k,m,chunk separated by ';'
    #[arg(long, default_value = "10,4,1M;6,2,64K;4,2,4K;12,4,256K")]
    rows: String,
    /// Code of the rows (rs-cauchy, rs-vand, xor, raid6, rdp; rdp rows need m = 2, have no ISA-L peer and
    /// a chunk that is a multiple of p - 1). The default is rs-cauchy for every m, not the by-m default
    /// of new data (docs/cli.md): it is the code ISA-L computes byte for byte, the peer measured beside it
    #[arg(long, default_value = "rs-cauchy")]
    code: String,
    /// Kernel levels to measure, comma-separated (scalar, ssse3, avx2, avx512, avx2-gfni, avx512-gfni)
    /// or "all"; default: every level from avx2 up that this CPU has. Ours and ISA-L run at the same
    /// level (ISA-L's `ec_encode_data_<level>` forced). The rateless rows run at the first level.
    #[arg(long)]
    simd: Option<String>,
    /// Seconds per measurement: this thread's CPU time on Linux (time spent descheduled on a shared
    /// machine counts for neither side), wall time elsewhere or with --wall-clock
    #[arg(long, default_value_t = 0.25)]
    time: f64,
    /// Time measurements on the wall clock instead of the thread's CPU time
    #[arg(long)]
    wall_clock: bool,
    /// Diagnostic: start the i-th buffer (i * BYTES) % 4096 bytes after its page boundary instead of
    /// on it (16 imitates glibc's heap placement), for both sides alike
    #[arg(long, default_value_t = 0)]
    buffer_skew: usize,
    /// Interleaved rounds per measurement (the best round counts, for both sides alike)
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Skip the LT / RaptorQ rows
    #[arg(long)]
    no_rateless: bool,
    /// Rateless source blocks K
    #[arg(long, default_value_t = 1024)]
    rateless_k: usize,
    /// Rateless block size (RaptorQ symbols are capped at 65528 bytes)
    #[arg(long, default_value = "64K")]
    rateless_block: String,
    /// Trials for the reception-overhead statistics
    #[arg(long, default_value_t = 200)]
    trials: usize,
    #[arg(long)]
    json: bool,
}

pub fn run(a: BenchArgs) -> Result<()> {
    match a.what {
        BenchWhat::Ec(e) => bench_ec(e),
        BenchWhat::Cluster(c) => bench_cluster(c),
        BenchWhat::Mount(m) => bench_mount(m),
        BenchWhat::Mds(m) => bench_mds(m),
        BenchWhat::Failover(f) => bench_failover(f),
        BenchWhat::Backup(b) => bench_backup(b),
        BenchWhat::Admission(a) => bench_admission(a),
    }
}

fn bench_admission(a: AdmissionBench) -> Result<()> {
    let mut cfg = if a.quick {
        AdmissionBenchConfig::quick()
    } else {
        AdmissionBenchConfig {
            streams: a.streams,
            object_bytes: parse_size(&a.object_size).context("--object-size")?,
            seconds: a.seconds,
            ..AdmissionBenchConfig::default()
        }
    };
    cfg.block_bytes = u32::try_from(parse_size(&a.block_size).context("--block-size")?)
        .map_err(|_| anyhow::anyhow!("--block-size: at most 2 MiB"))?;
    cfg.threads = a.threads;
    cfg.floor_bytes_per_s = parse_size(&a.floor).context("--floor")?;
    cfg.device = a.device;
    let report = admission_bench::run(&cfg, &crate::util::progress_line).map_err(flag_error)?;
    print_json_or(&report, || report.markdown(), a.json)
}

fn bench_mount(a: MountBench) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the ecstack binary")?;
    let mut cfg = MountBenchConfig::new(exe);
    cfg.osds = a.osds;
    cfg.k = a.k;
    cfg.m = a.m;
    cfg.segment_bytes = parse_size(&a.segment_size).context("--segment-size")?;
    cfg.cache_bytes = parse_size(&a.cache_size).context("--cache-size")?;
    cfg.files = a.files;
    cfg.seq_bytes = parse_size(&a.seq_size).context("--seq-size")?;
    cfg.random_file_bytes = parse_size(&a.random_file_size).context("--random-file-size")?;
    cfg.random_writes = a.random_writes;
    cfg.tree = a.tree;
    cfg.gluster = a.gluster;
    cfg.gluster_setup = a.gluster_setup;
    cfg.bindfs = !a.no_bindfs;
    cfg.mds_store = a.postgres;
    cfg.dir = a.dir;
    cfg.workloads = a
        .only
        .iter()
        .map(|w| w.parse::<MountWorkload>())
        .collect::<std::result::Result<_, _>>()
        .map_err(flag_error)?;
    let report = mount_bench::run(&cfg, &crate::util::progress_line).map_err(flag_error)?;
    print_json_or(&report, || report.markdown(), a.json)
}

fn bench_mds(a: MdsBench) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the ecstack binary")?;
    let mut cfg = MdsBenchConfig::new(exe, a.postgres);
    cfg.files = a.files;
    cfg.concurrency = a.concurrency;
    cfg.rounds = a.rounds;
    cfg.insecure = a.insecure;
    let report = mds_bench::run(&cfg, &|line| eprintln!("{line}"))?;
    print_json_or(&report, || report.markdown(), a.json)
}

fn bench_failover(a: FailoverBench) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the ecstack binary")?;
    let mut cfg = FailoverBenchConfig::new(exe, a.postgres);
    cfg.kills = a.kills;
    cfg.lease_ms = a.lease_ms;
    cfg.load_between = std::time::Duration::from_millis(a.load_ms);
    cfg.insecure = a.insecure;
    let report = mds_failover::run(&cfg, &|line| eprintln!("{line}"))?;
    print_json_or(&report, || report.markdown(), a.json)
}

fn bench_backup(a: BackupBench) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the ecstack binary")?;
    let mut cfg = BackupBenchConfig::new(exe);
    cfg.files = a.files;
    cfg.fill_tasks = a.fill_tasks;
    cfg.load_tasks = a.load_tasks;
    cfg.seconds = a.seconds;
    cfg.postgres_url = a.postgres;
    cfg.dir = a.dir;
    cfg.insecure = a.insecure;
    let report = mds_backup::run(&cfg, &|line| eprintln!("{line}")).map_err(flag_error)?;
    print_json_or(&report, || report.markdown(), a.json)
}

fn bench_cluster(a: ClusterBench) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the ecstack binary")?;
    let mut cfg = ClusterBenchConfig::new(exe);
    cfg.osds = a.osds;
    cfg.k = a.k;
    cfg.m = a.m;
    cfg.segment_bytes = parse_size(&a.segment_size)?;
    cfg.big_file_bytes = parse_size(&a.file_size)?;
    cfg.clients = a.clients;
    cfg.object_bytes = parse_size(&a.object_size)?;
    cfg.objects = a.objects;
    cfg.update_bytes = parse_size(&a.update_size)?;
    cfg.updates = a.updates;
    cfg.dir = a.dir;
    cfg.insecure = a.insecure;
    cfg.read_path = a.read_path;
    cfg.rounds = a.rounds;
    cfg.warm = a.warm;
    cfg.osd_threads = a.osd_threads;
    cfg.seed = a.seed;
    cfg.ceph = a.ceph;
    if !a.no_random_updates {
        cfg.update_load = Some(UpdateLoadConfig {
            file_bytes: parse_size(&a.update_file_size).context("--update-file-size")?,
            block_bytes: cfg.update_bytes,
            depths: parse_list(&a.depths, "--depths", |d| {
                d.parse::<usize>().map_err(|e| e.to_string())
            })?,
            seconds: a.update_seconds,
            count: a.update_count,
            schemes: parse_list(&a.update_scheme, "--update-scheme", |s| {
                s.parse::<UpdateScheme>()
            })?,
            seed: a.seed,
        });
    }
    if a.updates_only {
        let report =
            codfs_bench::run_updates_only(&cfg, &crate::util::progress_line).map_err(flag_error)?;
        return print_json_or(&report, || report.markdown(), a.json);
    }
    cfg.minio = if a.no_minio {
        None
    } else {
        Some(match a.minio {
            Some(p) => p,
            None => std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join("peers/bin/minio"))
                .context("--minio: no path given and HOME is not set")?,
        })
    };
    let report = codfs_bench::run(&cfg, &crate::util::progress_line).map_err(flag_error)?;
    print_json_or(&report, || report.markdown(), a.json)
}

/// A library configuration error as the flag it came from: `--objects: 4 objects for 8 clients`.
fn flag_error(e: LabError) -> anyhow::Error {
    match e {
        LabError::Config { field, msg } => anyhow::anyhow!("--{field}: {msg}"),
        other => other.into(),
    }
}

/// A comma-separated list of `what`, each parsed by `one`; one line naming the bad item.
fn parse_list<T>(
    s: &str,
    what: &str,
    one: impl Fn(&str) -> std::result::Result<T, String>,
) -> Result<Vec<T>> {
    let v = s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| one(x).map_err(|e| anyhow::anyhow!("{what}: '{x}': {e}")))
        .collect::<Result<Vec<T>>>()?;
    if v.is_empty() {
        bail!("{what}: empty list");
    }
    Ok(v)
}

fn parse_rows(s: &str) -> Result<Vec<(usize, usize, usize)>> {
    s.split(';')
        .filter(|r| !r.trim().is_empty())
        .map(|r| {
            let p: Vec<&str> = r.split(',').map(str::trim).collect();
            if p.len() != 3 {
                bail!("bad row '{r}': expected k,m,chunk such as 10,4,1M");
            }
            Ok((p[0].parse()?, p[1].parse()?, parse_size(p[2])? as usize))
        })
        .collect()
}

fn bench_ec(a: EcBench) -> Result<()> {
    // measure() loops until this much time has passed: NaN or infinity would never end.
    if crate::util::secs_arg("--time", a.time)?.is_zero() {
        bail!("--time must be positive");
    }
    let levels = ec_bench::bench_levels(a.simd.as_deref()).map_err(flag_error)?;
    // The rateless rows (and anything else built without a level) run at the first level asked for,
    // fixed before any code is built.
    ecstack_codes::Simd::set_active(levels[0]).context("--simd")?;
    let rateless = if a.no_rateless {
        None
    } else {
        Some(RatelessConfig {
            k: a.rateless_k,
            block: parse_size(&a.rateless_block)? as usize,
            trials: a.trials,
        })
    };
    let cfg = EcBenchConfig {
        rows: parse_rows(&a.rows)?,
        kind: CodeKind::parse(&a.code)?,
        levels,
        time: a.time,
        rounds: a.rounds,
        clock: if a.wall_clock {
            BenchClock::Wall
        } else {
            BenchClock::Cpu
        },
        skew_bytes: a.buffer_skew,
        rateless,
    };
    let peer_name = ec_bench::peer_name().map_err(flag_error)?;
    if !a.json {
        println!(
            "ecstack bench ec: one thread, {} s {} x {} rounds per figure (best round), peer: {}",
            a.time,
            cfg.clock.name(),
            a.rounds,
            peer_name.unwrap_or("none (build with --features isal-new or isal)")
        );
        println!("GB/s = input data bytes per second (encode, decode: k chunks; delta: the updated chunk)");
        println!("decode = decode plan prepared once (ours: cached; ISA-L: tables made once); decode-inv = invert + tables every call");
        println!(
            "delta = ours parity_deltas; ISA-L xor_gen (its own dispatch) + ec_encode_data_update"
        );
        println!(
            "{:<12} {:<10} {:>4} {:>3} {:>8}  {:<10} {:>10} {:>10} {:>10}",
            "simd", "code", "k", "m", "chunk", "op", "ours", "isa-l", "ours/isa-l"
        );
    }
    let json = a.json;
    let report = ec_bench::run(&cfg, &mut |r| {
        if !json {
            println!(
                "{:<12} {:<10} {:>4} {:>3} {:>8}  {:<10} {:>10.2} {:>10} {:>10}",
                r.simd,
                r.code,
                r.k,
                r.m,
                fmt_size(r.chunk as u64),
                r.op,
                r.ours_gbps,
                r.isal_gbps
                    .map(|x| format!("{x:.2}"))
                    .unwrap_or_else(|| "-".into()),
                r.ratio
                    .map(|x| format!("{x:.2}x"))
                    .unwrap_or_else(|| "-".into())
            );
        }
    })
    .map_err(flag_error)?;
    if json {
        return print_json(&report);
    }
    if !report.rateless.is_empty() {
        println!();
        println!(
            "{:<8} {:>5} {:>8} {:>6} {:>11} {:>11} {:>16} {:>13}",
            "rateless", "K", "block", "N", "encode GB/s", "decode GB/s", "overhead (N/K)", "max"
        );
        for r in &report.rateless {
            println!(
                "{:<8} {:>5} {:>8} {:>6} {:>11.2} {:>11.2} {:>16.4} {:>13.4}",
                r.code,
                r.k,
                fmt_size(r.block as u64),
                r.coded_blocks,
                r.encode_gbps,
                r.decode_gbps,
                r.overhead_mean,
                r.overhead_max
            );
        }
        println!(
            "overhead = coded blocks received before the object decoded / K, mean over {} random orders",
            a.trials
        );
    }
    Ok(())
}
