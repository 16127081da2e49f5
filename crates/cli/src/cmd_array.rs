//! `ecstack array`: create, inspect, commit, fail, rebuild and serve (over NBD) an erasure-coded
//! array (EPLOG `md` / `pl` / `eplog` schemes). Every command after `create` opens the array from its
//! metadata volume (`--meta SPEC`): the superblock records the specs of all its devices. While an
//! array is being served, `status`, `commit`, `fail` and `rebuild` take `--admin SOCKET` to act on the
//! running server instead; `scrub` checks every chunk's checksum and every stripe's parity and
//! repairs what it can locate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ecstack_array::{
    AdminCommand, Array, ArrayConfig, ArrayDevices, ArrayStatus, CodeKind, CommitReport,
    DeviceName, OpenOptions, RebuildReport, SchemeKind, ScrubOptions, ScrubProgress,
    ScrubProgressReport, ScrubReport,
};
use ecstack_device::{open_spec, BlockDevice};
use ecstack_nbd::{admin_request, Admin};

use crate::util::{fmt_size, parse_size, print_json};

#[derive(Args)]
pub struct ArrayArgs {
    #[command(subcommand)]
    cmd: ArrayCmd,
}

#[derive(Subcommand)]
enum ArrayCmd {
    /// Create an array: n = k + m main devices, m log devices (pl, eplog), one metadata volume
    Create(CreateArgs),
    /// Open the array and show geometry, devices, pending updates, I/O per device class, commit work
    #[command(alias = "open")]
    Status(TargetArgs),
    /// Parity commit: fold logged updates into the main array's parity, free old versions
    Commit(TargetArgs),
    /// Take a device out of service (main 0..n, log n..n+m; `log0` names the first log device)
    Fail(DevArgs),
    /// Rebuild a failed device (commit first, then batched stripe recovery)
    Rebuild(RebuildArgs),
    /// Read every written stripe, check every chunk against its checksum and the parity against the
    /// data, repair the bad chunks (up to m per stripe by checksum; by parity alone one per stripe
    /// with m = 2), report the rest; exits 1 if anything is left wrong
    Scrub(ScrubArgs),
    /// Scrub's read bandwidth (default and --checksums-only) against `dd iflag=direct` sequential
    /// reads of the same device files,
    /// side by side on a filled array of O_DIRECT files (docs/benchmarks.md)
    ScrubBench(ScrubBenchArgs),
    /// Open the array and export it over NBD (127.0.0.1 by default) until Ctrl-C / SIGTERM
    Serve(ServeArgs),
}

#[derive(Args)]
struct CreateArgs {
    /// Update scheme: md, pl, eplog or tween (TWEEN: --stripe, --nvram, ... below)
    #[arg(long, default_value = "eplog")]
    scheme: String,
    /// Data chunks per stripe
    #[arg(short, long)]
    k: usize,
    /// Parity chunks per stripe (= tolerated failures = log devices)
    #[arg(short, long)]
    m: usize,
    /// Code: xor (m=1), raid6 (m=2), rs-cauchy, rs-vand; rdp is refused (its parity is not
    /// byte-position-wise) [default: by m: xor for 1, raid6 for 2, rs-cauchy for 3 or more]
    #[arg(long)]
    code: Option<String>,
    /// Chunk size
    #[arg(long, default_value = "4K")]
    chunk: String,
    /// eplog: fraction of each main device kept for out-of-place updates
    #[arg(long, default_value_t = 0.25)]
    reserve: f64,
    /// Parity commit every N write requests (0 = only on demand, idle or when space runs out)
    #[arg(long, default_value_t = 0)]
    commit_every: u64,
    /// TRIM chunk slots freed by a parity commit
    #[arg(long)]
    trim: bool,
    /// Main device specs, comma-separated (files, raw devices, mem:SIZE, ssd:..., see docs/devices.md)
    #[arg(long, value_delimiter = ',', required = true)]
    main: Vec<String>,
    /// Log device specs, comma-separated (pl and eplog need m of them)
    #[arg(long, value_delimiter = ',')]
    log: Vec<String>,
    /// Metadata volume spec
    #[arg(long)]
    meta: String,
    /// Overwrite devices that hold something (an ecstack label or superblock, or any non-zero
    /// byte in their first MiB); without it they are refused
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    tween: crate::cmd_tween::TweenArgs,
    #[arg(long)]
    json: bool,
}

#[derive(Args, Clone)]
struct TargetArgs {
    /// Metadata volume spec of the array (its superblock names the other devices)
    #[arg(long, required_unless_present = "admin")]
    meta: Option<String>,
    /// Override the main device specs recorded in the superblock
    #[arg(long, value_delimiter = ',')]
    main: Vec<String>,
    /// Override the log device specs recorded in the superblock
    #[arg(long, value_delimiter = ',')]
    log: Vec<String>,
    /// Talk to a running `ecstack array serve` through its admin socket instead
    #[arg(long)]
    admin: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct DevArgs {
    /// Device: index (main 0..n, log n..n+m), `mainI` or `logI`
    dev: String,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(Args)]
struct RebuildArgs {
    /// Device: index (main 0..n, log n..n+m), `mainI` or `logI`
    dev: String,
    /// Replacement device spec (default: the device's recorded spec, e.g. a swapped disk at the same path)
    #[arg(long)]
    replacement: Option<String>,
    /// Recovery batch size (data stripes per batch)
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Do not prefetch chunks during the metadata scan
    #[arg(long)]
    no_prefetch: bool,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(Args)]
struct ScrubArgs {
    /// Report only: locate bad chunks but write nothing
    #[arg(long)]
    no_repair: bool,
    /// Read bandwidth limit over the main devices, MB/s (0 = none)
    #[arg(long, default_value_t = 0)]
    mb_per_s: u64,
    /// Data stripes per step (writers of a served array wait for one step at most)
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// The cheap mode: recompute the parity only of stripes with a chunk whose checksum fails,
    /// is not known or could not be read (default: every stripe's parity is checked)
    #[arg(long)]
    checksums_only: bool,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(Args)]
struct ScrubBenchArgs {
    /// Directory for the device files (on the file system to measure; removed afterwards)
    #[arg(long)]
    dir: PathBuf,
    /// Update scheme
    #[arg(long, default_value = "md")]
    scheme: String,
    /// Data chunks per stripe
    #[arg(short, long, default_value_t = 6)]
    k: usize,
    /// Parity chunks per stripe
    #[arg(short, long, default_value_t = 2)]
    m: usize,
    /// Chunk size
    #[arg(long, default_value = "4K")]
    chunk: String,
    /// Size of each main device file
    #[arg(long, default_value = "256M")]
    device_size: String,
    /// Scrub's data stripes per step
    #[arg(long, default_value_t = ScrubOptions::default().batch_stripes)]
    batch: usize,
    /// Rounds of (scrub, scrub --checksums-only, dd), the order rotating
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Per-chunk checksums off (scrub checks parity only)
    #[arg(long)]
    no_checksums: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ServeArgs {
    /// Metadata volume spec of the array
    #[arg(long)]
    meta: String,
    /// Override the main device specs recorded in the superblock (comma-separated, in order)
    #[arg(long, value_delimiter = ',')]
    main: Vec<String>,
    /// Override the log device specs recorded in the superblock (comma-separated, in order)
    #[arg(long, value_delimiter = ',')]
    log: Vec<String>,
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1:10809")]
    addr: SocketAddr,
    /// Export name
    #[arg(long, default_value = "ecstack")]
    name: String,
    /// Serve the admin channel on this Unix socket (status, commit, sync, fail DEV, rebuild DEV
    /// [--replacement SPEC], scrub, scrub-progress); clients pass the same --admin SOCKET
    #[arg(long = "admin", alias = "admin-socket", value_name = "SOCKET")]
    admin_socket: Option<PathBuf>,
    /// Parity commit after this many seconds without I/O (md: a sync that marks the write-intent
    /// regions clean) (0 = off)
    #[arg(long, default_value_t = 5.0)]
    idle_commit: f64,
    /// Worker threads for device operations
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// eplog device buffers: hold up to N updated chunks per device in memory (0 = off)
    #[arg(long, default_value_t = 0)]
    device_buffer: usize,
    /// eplog stripe buffer: concurrent write requests share log stripes, with up to N batches
    /// written at once (fewer: larger batches, fewer log chunks); 0 = off, each request forms its
    /// own log stripes. Whether a request waits for a batch slot or is written at once under light
    /// load is chosen by measuring both (see docs/array.md)
    #[arg(long, default_value_t = ecstack_array::scheme::DEFAULT_IN_FLIGHT)]
    stripe_buffer: usize,
    /// tween: the array's NVRAM region (required for a tween array: it is served through TWEEN)
    #[arg(long)]
    nvram: Option<PathBuf>,
    /// Per-chunk checksums off while serving (to measure what they cost: writes forget their
    /// chunks' checksums, reads verify nothing; docs/array.md)
    #[arg(long)]
    no_checksums: bool,
    #[arg(long)]
    json: bool,
}

pub fn run(a: ArrayArgs) -> Result<()> {
    match a.cmd {
        ArrayCmd::Create(c) => create(c),
        ArrayCmd::Status(t) => status(t),
        ArrayCmd::Commit(t) => commit(t),
        ArrayCmd::Fail(d) => fail(d),
        ArrayCmd::Rebuild(r) => rebuild(r),
        ArrayCmd::Scrub(s) => scrub(s),
        ArrayCmd::ScrubBench(s) => scrub_bench(s),
        ArrayCmd::Serve(s) => serve(s),
    }
}

fn open_all(specs: &[String]) -> Result<Vec<Arc<dyn BlockDevice>>> {
    specs
        .iter()
        .map(|s| open_spec(s).with_context(|| format!("opening device '{s}'")))
        .collect()
}

fn create(a: CreateArgs) -> Result<()> {
    let scheme = SchemeKind::parse(&a.scheme)?;
    let chunk = match scheme {
        SchemeKind::Tween => crate::cmd_tween::chunk_bytes(&a.tween, a.k)?,
        _ => parse_size(&a.chunk)?,
    };
    let base = ArrayConfig::with_geometry(scheme, a.k, a.m);
    let code = match &a.code {
        Some(c) => CodeKind::parse(c)?,
        None => base.code,
    };
    let cfg = ArrayConfig {
        code,
        chunk_size: u32::try_from(chunk).context("chunk size too large")?,
        reserve: a.reserve,
        commit_every: a.commit_every,
        trim_on_commit: a.trim,
        ..base
    };
    // Device counts are checked before any spec is opened (opening a file spec with size= creates it).
    let n = a.k + a.m;
    if a.main.len() != n {
        bail!(
            "invalid array configuration: a ({}+{}) array needs {n} main devices, got {}",
            a.k,
            a.m,
            a.main.len()
        );
    }
    let want_log = if scheme.uses_log() { a.m } else { 0 };
    if a.log.len() != want_log {
        bail!(
            "invalid array configuration: scheme {scheme} needs {want_log} log devices, got {}",
            a.log.len()
        );
    }
    let mut specs = a.main.clone();
    specs.extend(a.log.iter().cloned());
    specs.push(a.meta.clone());
    let devices = ArrayDevices {
        main: open_all(&a.main)?,
        log: open_all(&a.log)?,
        meta: open_spec(&a.meta)
            .with_context(|| format!("opening metadata volume '{}'", a.meta))?,
        specs: Some(specs),
    };
    if scheme == SchemeKind::Tween {
        return crate::cmd_tween::create(&cfg, devices, &a.tween, a.force, a.json);
    }
    let opts = OpenOptions {
        force: a.force,
        ..OpenOptions::default()
    };
    let array = Array::create_with(&cfg, devices, &opts)?;
    array.close()?;
    let st = array.status();
    if a.json {
        return print_json(&st);
    }
    println!(
        "created {}: {} code {}, chunk {}, capacity {} ({} data stripes; {} slots per main device)",
        st.name,
        st.scheme,
        st.code,
        fmt_size(st.chunk_size),
        fmt_size(st.capacity),
        st.data_stripes,
        st.slots_per_device
    );
    Ok(())
}

/// Open an array from its metadata volume (device specs from the superblock unless overridden).
fn open_array(t: &TargetArgs, opts: &OpenOptions) -> Result<Array> {
    let meta_spec = t
        .meta
        .as_deref()
        .context("--meta is required (or --admin for a running server)")?;
    open_from(meta_spec, &t.main, &t.log, opts)
}

/// Open the array whose metadata volume is `meta_spec` (its other devices come from the superblock), for
/// commands of other layers that take a device: `--device array:<meta spec>`.
pub fn open_by_meta(meta_spec: &str) -> Result<Arc<Array>> {
    Ok(Arc::new(open_from(
        meta_spec,
        &[],
        &[],
        &OpenOptions::default(),
    )?))
}

fn open_from(
    meta_spec: &str,
    main: &[String],
    log: &[String],
    opts: &OpenOptions,
) -> Result<Array> {
    let r = Array::open_recorded(meta_spec, main, log, opts)?;
    for u in &r.unavailable {
        eprintln!(
            "ecstack: warning: device '{}' is unavailable ({}); opening degraded",
            u.spec, u.error
        );
    }
    Ok(r.array)
}

/// The index of the device `name` (an index, mainI or logI) names in `a`, range-checked.
fn device_index(a: &Array, name: &str) -> Result<usize> {
    Ok(a.device_index(&name.parse::<DeviceName>()?)?)
}

/// Send `line` to a server's admin socket and print its answer: as it came with `--json`, else
/// decoded as a `T` and printed as text by `text` (as the command does without a server); an
/// answer that is text already (sync, fail) is printed as it is.
fn via_admin<T: serde::de::DeserializeOwned>(
    sock: &std::path::Path,
    line: &str,
    json: bool,
    text: impl FnOnce(&T),
) -> Result<()> {
    let answer = admin_request(sock, line)?;
    if json {
        println!("{answer}");
    } else if let Ok(v) = serde_json::from_str::<T>(&answer) {
        text(&v);
    } else {
        println!("{answer}");
    }
    Ok(())
}

fn status(t: TargetArgs) -> Result<()> {
    if let Some(sock) = &t.admin {
        return via_admin(sock, "status", t.json, print_status);
    }
    let a = open_array(&t, &OpenOptions::default())?;
    let st = a.status();
    if t.json {
        print_json(&st)
    } else {
        print_status(&st);
        Ok(())
    }
}

fn print_status(st: &ArrayStatus) {
    println!(
        "{}: code {}, chunk {}, capacity {}, {} data stripes, {} slots per main device",
        st.name,
        st.code,
        fmt_size(st.chunk_size),
        fmt_size(st.capacity),
        st.data_stripes,
        st.slots_per_device
    );
    for d in &st.devices {
        let gc = d
            .ssd
            .as_ref()
            .map(|s| format!(", GC {} (WA {:.2})", s.gc_victims, s.write_amplification))
            .unwrap_or_default();
        println!(
            "  {:>2} {:<4} {:<40} {}  reads {} ({}), writes {} ({}){gc}",
            d.index,
            d.role,
            d.name,
            if d.failed { "FAILED" } else { "ok    " },
            d.io.read_ops,
            fmt_size(d.io.read_bytes),
            d.io.write_ops,
            fmt_size(d.io.write_bytes)
        );
    }
    let p = &st.pending;
    println!(
        "  pending: {} updated chunks in {} stripes, {} log stripes, {} pl log entries, log {}/{} slots, {} free spare slots (min), {} dirty regions{}",
        p.updated_chunks,
        p.updated_stripes,
        p.log_stripes,
        p.log_entries,
        p.log_slots_used,
        p.log_slots,
        p.min_free_slots,
        p.dirty_regions,
        if p.commit_in_progress { ", commit in progress" } else { "" }
    );
    let c = &st.commits;
    println!(
        "  commits: {} ({} for space, {} when idle), {} stripes, {} chunks, {} decoded from log, read {}, wrote {}, {:.3} s; {} stripes resynced after a crash",
        c.commits,
        c.space_commits,
        c.idle_commits,
        c.stripes,
        c.chunks,
        c.decoded_from_log,
        fmt_size(c.bytes_read),
        fmt_size(c.bytes_written),
        c.seconds,
        c.resync_stripes
    );
    let k = &st.checksums;
    println!(
        "  checksums: {}, {} chunks failed their checksum, {} repaired, {} bad",
        if k.enabled { "on" } else { "off" },
        k.checksum_errors,
        k.chunks_repaired,
        k.bad_chunks
    );
    if k.checksum_page_errors > 0 {
        println!(
            "  checksum pages: {} failed their check on open (their chunks are read unverified until rewritten or scrubbed)",
            k.checksum_page_errors
        );
    }
    if let Some(b) = &st.stripe_buffer {
        println!(
            "  stripe buffer: {} write requests in {} batches ({:.2} per batch); measuring epochs: {} eager, {} batching",
            b.requests,
            b.batches,
            b.requests as f64 / b.batches.max(1) as f64,
            b.eager_epochs,
            b.batch_epochs
        );
    }
    if let Some(r) = &st.last_rebuild {
        println!(
            "  last rebuild: devices {:?}, {} chunks ({}), {:.1} MB/s, batch {}, prefetch {}",
            r.devices,
            r.chunks,
            fmt_size(r.bytes),
            r.mb_per_s,
            r.batch,
            r.prefetch
        );
    }
}

fn commit(t: TargetArgs) -> Result<()> {
    if let Some(sock) = &t.admin {
        return via_admin(sock, "commit", t.json, print_commit);
    }
    let a = open_array(&t, &OpenOptions::default())?;
    let r = a.commit()?;
    a.close()?;
    if t.json {
        return print_json(&r);
    }
    print_commit(&r);
    Ok(())
}

fn print_commit(r: &CommitReport) {
    println!(
        "parity commit: {} stripes, {} chunks, {} decoded from log, {} slots freed, {:.3} s",
        r.stripes, r.chunks, r.decoded_from_log, r.freed_slots, r.seconds
    );
}

fn fail(d: DevArgs) -> Result<()> {
    if let Some(sock) = &d.target.admin {
        let cmd = AdminCommand::Fail(d.dev.parse()?);
        return via_admin(sock, &cmd.to_string(), d.target.json, |_: &()| {});
    }
    let a = open_array(&d.target, &OpenOptions::default())?;
    let i = device_index(&a, &d.dev)?;
    a.fail_device(i)?;
    a.close()?;
    if d.target.json {
        return print_json(
            &serde_json::json!({ "failed": i, "failed_devices": a.failed_devices() }),
        );
    }
    println!(
        "device {i} marked failed; failed devices now {:?}",
        a.failed_devices()
    );
    Ok(())
}

fn rebuild(r: RebuildArgs) -> Result<()> {
    if let Some(sock) = &r.target.admin {
        let cmd = AdminCommand::Rebuild {
            device: r.dev.parse()?,
            replacement: r.replacement.clone(),
        };
        return via_admin(sock, &cmd.to_string(), r.target.json, print_rebuild);
    }
    let opts = OpenOptions {
        rebuild_batch: r.batch,
        rebuild_prefetch: !r.no_prefetch,
        ..OpenOptions::default()
    };
    let a = open_array(&r.target, &opts)?;
    let i = device_index(&a, &r.dev)?;
    let report = a.rebuild_from_spec(i, r.replacement.as_deref())?;
    a.close()?;
    if r.target.json {
        return print_json(&report);
    }
    print_rebuild(&report);
    Ok(())
}

fn print_rebuild(report: &RebuildReport) {
    let devices: Vec<String> = report.devices.iter().map(usize::to_string).collect();
    println!(
        "rebuilt device {}: {} chunks ({}) in {:.3} s = {:.1} MB/s (batch {}, prefetch {})",
        devices.join(", "),
        report.chunks,
        fmt_size(report.bytes),
        report.seconds,
        report.mb_per_s,
        report.batch,
        report.prefetch
    );
}

fn scrub(s: ScrubArgs) -> Result<()> {
    let t = &s.target;
    if let Some(sock) = &t.admin {
        let cmd = AdminCommand::Scrub {
            repair: !s.no_repair,
            mb_per_s_max: s.mb_per_s,
            checksums_only: s.checksums_only,
        };
        let show = !t.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
        let watcher = show.then(|| watch_admin_scrub(sock.clone()));
        let answer = admin_request(sock, &cmd.to_string());
        if let Some((stop, h)) = watcher {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = h.join();
        }
        let answer = answer?;
        let r: ScrubReport = serde_json::from_str(&answer)
            .map_err(|_| anyhow::anyhow!("scrub over the admin socket: {answer}"))?;
        return scrub_report(&r, t.json);
    }
    if s.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let a = open_array(t, &OpenOptions::default())?;
    let opts = ScrubOptions {
        repair: !s.no_repair,
        batch_stripes: s.batch,
        mb_per_s_max: s.mb_per_s as f64,
        checksums_only: s.checksums_only,
    };
    let pb = if !t.json && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let pb = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "scrub [{bar:40}] {pos}/{len} stripes, eta {eta}",
        ) {
            pb.set_style(style.progress_chars("=> "));
        }
        pb
    } else {
        indicatif::ProgressBar::hidden()
    };
    let r = a.scrub(&opts, &|done, total| {
        pb.set_length(total);
        pb.set_position(done);
    })?;
    pb.finish_and_clear();
    a.close()?;
    scrub_report(&r, t.json)
}

/// A progress bar for a scrub running over the admin socket `sock`: asks `scrub-progress` on a
/// second connection twice a second until told to stop.
fn watch_admin_scrub(
    sock: PathBuf,
) -> (
    Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<()>,
) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    let h = std::thread::spawn(move || {
        let pb = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "scrub (served array) [{bar:40}] {pos}/{len} stripes, eta {eta}",
        ) {
            pb.set_style(style.progress_chars("=> "));
        }
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(500));
            let Ok(answer) = admin_request(&sock, "scrub-progress") else {
                break;
            };
            if let Ok(p) = serde_json::from_str::<ScrubProgressReport>(&answer) {
                pb.set_length(p.total_stripes);
                pb.set_position(p.done_stripes);
            }
        }
        pb.finish_and_clear();
    });
    (stop, h)
}

/// Print a scrub report; an error (exit status 1) when the array is left with wrong stripes.
fn scrub_report(r: &ScrubReport, json: bool) -> Result<()> {
    if json {
        print_json(r)?;
    } else {
        println!(
            "scrub: {} stripes, {} read in {:.3} s = {:.1} MB/s; {} inconsistent ({} chunks failed their checksum), {} repaired ({} chunks), {} not repaired, {} unreadable, {} unverifiable",
            r.stripes,
            fmt_size(r.bytes_read),
            r.seconds,
            r.mb_per_s,
            r.inconsistent_stripes,
            r.checksum_errors,
            r.repaired_stripes,
            r.repaired_chunks,
            r.unrepaired_stripes,
            r.unreadable_stripes,
            r.unverifiable_stripes
        );
        if r.checksums_only {
            println!(
                "  checksums only: {} stripes matched every chunk's checksum (parity not recomputed), {} checked in full",
                r.parity_skipped_stripes,
                r.stripes - r.parity_skipped_stripes
            );
        }
        for p in &r.problems {
            println!("  stripe {}: {}", p.stripe, p.problem);
        }
    }
    if !r.clean() {
        bail!(
            "scrub left {} stripes wrong and {} unreadable",
            r.unrepaired_stripes,
            r.unreadable_stripes
        );
    }
    Ok(())
}

fn scrub_bench(s: ScrubBenchArgs) -> Result<()> {
    use ecstack_lab::scrub_bench::{scrub_bench, ScrubBenchConfig};
    let chunk = parse_size(&s.chunk)?;
    let cfg = ScrubBenchConfig {
        dir: s.dir,
        scheme: SchemeKind::parse(&s.scheme)?,
        k: s.k,
        m: s.m,
        chunk_bytes: u32::try_from(chunk).context("--chunk too large")?,
        device_bytes: parse_size(&s.device_size)?,
        batch_stripes: s.batch,
        rounds: s.rounds,
        checksums: !s.no_checksums,
    };
    let quiet = s.json;
    let r = scrub_bench(&cfg, &|line| {
        if !quiet {
            crate::util::progress_line(line);
        }
    })?;
    if s.json {
        return print_json(&r);
    }
    println!(
        "scrub bench: {} ({}+{}), chunk {}, {} per device read, checksums {}, fill {:.1} MB/s",
        r.scheme,
        r.k,
        r.m,
        fmt_size(r.chunk_bytes as u64),
        fmt_size(r.bytes_per_device),
        if r.checksums { "on" } else { "off" },
        r.fill_mb_per_s
    );
    for x in &r.rounds {
        println!(
            "  round {} ({}): scrub {:.1} MB/s, checksums-only {:.1} MB/s, dd {:.1} MB/s; ratios {:.2}, {:.2}",
            x.round,
            x.order.join(", "),
            x.scrub_mb_per_s,
            x.checksums_only_mb_per_s,
            x.sequential_mb_per_s,
            x.ratio,
            x.checksums_only_ratio
        );
    }
    println!(
        "median ratio to dd: scrub {:.2} (target >= 0.80), checksums-only {:.2} (target >= 0.95)",
        r.ratio_median, r.checksums_only_ratio_median
    );
    Ok(())
}

/// The array's commands on the NBD server's admin socket (the language lives in `ecstack_array`).
/// The scrub progress is shared by the socket's connections (`scrub-progress`).
struct ArrayAdmin(Arc<Array>, ScrubProgress);

impl Admin for ArrayAdmin {
    fn command(&self, line: &str) -> std::result::Result<String, String> {
        self.0.admin_with(line, &self.1).map_err(|e| e.to_string())
    }
}

fn serve(s: ServeArgs) -> Result<()> {
    let opts = OpenOptions {
        checksums: !s.no_checksums,
        ..OpenOptions::default()
    };
    let array = open_from(&s.meta, &s.main, &s.log, &opts)?;
    if array.scheme_kind() == SchemeKind::Tween {
        let serve = crate::nbd_export::Export {
            addr: s.addr,
            name: s.name,
            admin_socket: s.admin_socket,
            workers: s.workers,
            json: s.json,
        };
        return crate::cmd_tween::serve(array, s.nvram.as_deref(), serve);
    }
    let a = Arc::new(array);
    a.set_device_buffer(s.device_buffer)?;
    a.set_stripe_buffer(s.stripe_buffer);
    let idle =
        Some(crate::util::secs_arg("--idle-commit", s.idle_commit)?).filter(|d| !d.is_zero());
    if let Some(d) = idle {
        // eplog/pl: parity commit; md: a sync that also clears the write-intent regions.
        a.spawn_idle_committer(d);
    }
    let at = crate::nbd_export::Export {
        addr: s.addr,
        name: s.name,
        admin_socket: s.admin_socket,
        workers: s.workers,
        json: s.json,
    };
    let admin: Arc<dyn Admin> = Arc::new(ArrayAdmin(Arc::clone(&a), ScrubProgress::default()));
    let dev: Arc<dyn BlockDevice> = Arc::clone(&a) as Arc<dyn BlockDevice>;
    let res = crate::nbd_export::export(&a.name(), a.size(), &at, dev, admin);
    a.close()?;
    res?;
    if s.json {
        print_json(&a.status())?;
    }
    Ok(())
}
