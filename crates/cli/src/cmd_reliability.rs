//! `ecstack reliability`: mean time to data loss of the layouts ecstack builds — arrays (RAID-5/6,
//! RS(k, m)), EPLOG's main array plus log devices, a CodFS cluster of OSDs — and RainFS Table 2.1.
//! Argument parsing only; the models are in `ecstack_sim::reliability` (docs/reliability.md), their
//! reports in `ecstack_sim::reliability::report`.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use ecstack_sim::reliability::report::{answer, describe_array, ClusterReport, EplogReport};
use ecstack_sim::reliability::{
    mttf_from_afr, rainfs, rebuild_hours, ArrayModel, ClusterModel, EplogModel, ReliabilityModel,
    RepairTimes, HOURS_PER_YEAR,
};

use crate::util::{parse_size, print_json};

#[derive(Args)]
pub struct ReliabilityArgs {
    #[command(subcommand)]
    cmd: ReliabilityCmd,
}

#[derive(Subcommand)]
enum ReliabilityCmd {
    /// One array of k + m devices (RAID-5: --m 1, RAID-6: --m 2, RS(k, m)): MTTDL and P(loss)
    Array(ArrayArgs),
    /// EPLOG: the main array plus m log devices; uncommitted updates also depend on the log devices
    Eplog(EplogArgs),
    /// CodFS cluster: N OSDs, segments on k + m distinct OSDs, recovery spread over the survivors
    Cluster(ClusterArgs),
    /// RainFS Table 2.1: disks / racks each architecture tolerates, computed from its parameters
    Table(TableArgs),
}

/// Device lifetime, rebuild and URE flags shared by `array` and `eplog`.
#[derive(Args)]
struct DeviceFlags {
    /// Data chunks per stripe
    #[arg(short, long, default_value_t = 6)]
    k: usize,
    /// Parity chunks per stripe (failures tolerated; RAID-5 = 1, RAID-6 = 2)
    #[arg(short, long, default_value_t = 2)]
    m: usize,
    /// Mean time to failure of one device, hours (default 1,000,000 h unless --afr)
    #[arg(long, value_name = "HOURS", conflicts_with = "afr")]
    mttf_hours: Option<f64>,
    /// Annualized failure rate of one device, a fraction (0.02 = 2 %/year); converted to an MTTF
    /// with AFR = 1 - exp(-8766 h / MTTF)
    #[arg(long, value_name = "FRACTION")]
    afr: Option<f64>,
    /// Mean time to repair one device, hours (replaces --device-size / --rebuild-mb-s)
    #[arg(long, value_name = "HOURS", conflicts_with = "rebuild_mb_s")]
    mttr_hours: Option<f64>,
    /// Bytes on one device: what a rebuild writes, and reads from each of k survivors (binary
    /// units: 4T = 4 TiB; plain digits for decimal bytes, e.g. 4000000000000)
    #[arg(long, value_name = "SIZE", default_value = "4T")]
    device_size: String,
    /// Measured rebuild throughput, MB/s (10^6 bytes/s) of rebuilt data: the `MB/s` column of
    /// `ecstack experiment eplog --exp 5` on your devices (default 100 unless --mttr-hours)
    #[arg(long, value_name = "MB_PER_S")]
    rebuild_mb_s: Option<f64>,
    /// Hours from a failure until the rebuild starts (detection, replacement), added to the rebuild
    #[arg(long, value_name = "HOURS", default_value_t = 0.0)]
    replace_hours: f64,
    /// Unrecoverable read errors per bit read (1e-15 enterprise, 1e-14 desktop drives; 0: none)
    #[arg(long, value_name = "PER_BIT", default_value = "1e-15")]
    uber: f64,
    /// sequential: one rebuild at a time; parallel: every failed device rebuilt at once
    #[arg(long, default_value = "sequential")]
    repair: String,
    /// Latent sector errors arising per device per year (bad sectors found only when read; 0:
    /// none); they stay until the next scrub, and one on a device read by a rebuild without
    /// redundancy loses a stripe
    #[arg(long, value_name = "PER_YEAR", default_value_t = 0.0)]
    latent_per_year: f64,
    /// Hours between two scrubs of the whole array (`ecstack array scrub`), which repair latent
    /// errors while redundancy remains; needed with --latent-per-year
    #[arg(long, value_name = "HOURS", default_value_t = 0.0)]
    scrub_hours: f64,
}

/// Report flags shared by every model.
#[derive(Args)]
struct ReportFlags {
    /// Mission time for the probability of data loss, years
    #[arg(long, value_name = "YEARS", default_value_t = 10.0)]
    years: f64,
    /// Also run a Monte-Carlo simulation of this many lifetimes (each to its first data loss) and
    /// print its 99 % interval beside the exact figure; practical only when loss comes within
    /// about 10^6 failures (raise failure rates to check a model)
    #[arg(long, value_name = "RUNS")]
    mc_runs: Option<u64>,
    /// Seed of the Monte-Carlo (the same seed replays the same estimate)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Rebuild durations of the Monte-Carlo: exponential (the chain's assumption), deterministic
    /// or lognormal:SIGMA, of the same mean (array, eplog: each rebuild's duration; cluster: fluid
    /// recovery); a check of what the chain's exponential assumption costs (docs/reliability.md)
    #[arg(long, value_name = "KIND", default_value = "exponential")]
    repair_times: String,
    /// Print the result as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ArrayArgs {
    #[command(flatten)]
    dev: DeviceFlags,
    #[command(flatten)]
    report: ReportFlags,
}

#[derive(Args)]
struct EplogArgs {
    #[command(flatten)]
    dev: DeviceFlags,
    /// MTTF of one log device, hours (default: the main devices')
    #[arg(long, value_name = "HOURS", conflicts_with = "log_afr")]
    log_mttf_hours: Option<f64>,
    /// AFR of one log device, a fraction (EPLOG's log devices may be HDDs)
    #[arg(long, value_name = "FRACTION")]
    log_afr: Option<f64>,
    /// MTTR of one log device, hours (default: the main devices')
    #[arg(long, value_name = "HOURS")]
    log_mttr_hours: Option<f64>,
    /// Mean time updates stay uncommitted between periodic parity commits, hours
    #[arg(long, value_name = "HOURS", default_value_t = 1.0)]
    dirty_hours: f64,
    /// Mean time from a parity commit to the next update, hours (small for a busy array)
    #[arg(long, value_name = "HOURS", default_value_t = 0.01)]
    clean_hours: f64,
    /// Duration of the parity commit a failure forces, seconds (`ecstack array commit` reports it)
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    commit_seconds: f64,
    #[command(flatten)]
    report: ReportFlags,
}

#[derive(Args)]
struct ClusterArgs {
    /// OSDs in the cluster
    #[arg(long, default_value_t = 16)]
    osds: usize,
    /// Data chunks per segment
    #[arg(short, long, default_value_t = 4)]
    k: usize,
    /// Parity chunks per segment
    #[arg(short, long, default_value_t = 2)]
    m: usize,
    /// Segment size (binary units; CodFS uses 16-64 MiB); a chunk is segment / k
    #[arg(long, value_name = "SIZE", default_value = "64M")]
    segment_size: String,
    /// Bytes of chunks each OSD holds on average (binary units); sets the segment count
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "4T",
        conflicts_with = "segments"
    )]
    osd_size: String,
    /// Segments stored (instead of --osd-size)
    #[arg(long)]
    segments: Option<f64>,
    /// Mean time to failure of one OSD, hours (default 200,000 h unless --afr)
    #[arg(long, value_name = "HOURS", conflicts_with = "afr")]
    mttf_hours: Option<f64>,
    /// Annualized failure rate of one OSD, a fraction
    #[arg(long, value_name = "FRACTION")]
    afr: Option<f64>,
    /// Rebuild throughput of one surviving OSD, MB/s of rebuilt chunks (default 50)
    #[arg(long, value_name = "MB_PER_S", conflicts_with = "recovery_mb_s")]
    osd_recovery_mb_s: Option<f64>,
    /// Measured cluster recovery throughput, MB/s (the `recovery MB/s` column of `ecstack
    /// experiment codfs --exp model`), divided over the --measured-osds - 1 survivors
    #[arg(long, value_name = "MB_PER_S", requires = "measured_osds")]
    recovery_mb_s: Option<f64>,
    /// OSDs in the cluster where --recovery-mb-s was measured
    #[arg(long, value_name = "N")]
    measured_osds: Option<usize>,
    /// Minutes from a failure until recovery starts (down_after_ms + out_after_ms)
    #[arg(long, value_name = "MINUTES", default_value_t = 15.0)]
    detect_minutes: f64,
    /// Unrecoverable read errors per bit read (0: none)
    #[arg(long, value_name = "PER_BIT", default_value = "1e-15")]
    uber: f64,
    #[command(flatten)]
    report: ReportFlags,
}

#[derive(Args)]
struct TableArgs {
    /// NAS systems (one per rack): the most replicas DN-on-NAS and RainFS can place
    #[arg(long, default_value_t = 3)]
    nas: usize,
    /// Print the table as JSON
    #[arg(long)]
    json: bool,
}

pub fn run(a: ReliabilityArgs) -> Result<()> {
    match a.cmd {
        ReliabilityCmd::Array(a) => array(a),
        ReliabilityCmd::Eplog(a) => eplog(a),
        ReliabilityCmd::Cluster(a) => cluster(a),
        ReliabilityCmd::Table(a) => table(a),
    }
}

fn mttf(flag: &str, hours: Option<f64>, afr: Option<f64>, default: f64) -> Result<f64> {
    match (hours, afr) {
        (Some(h), _) => {
            if !(h.is_finite() && h > 0.0) {
                bail!("{flag} must be a number of hours > 0, got {h}");
            }
            Ok(h)
        }
        (None, Some(f)) => Ok(mttf_from_afr(f)?),
        (None, None) => Ok(default),
    }
}

fn size_bytes(flag: &str, s: &str) -> Result<f64> {
    match parse_size(s) {
        Ok(0) => bail!("{flag} must be > 0, got {s:?}"),
        Ok(v) => Ok(v as f64),
        Err(e) => bail!("{flag}: {e}"),
    }
}

fn array_model(d: &DeviceFlags) -> Result<ArrayModel> {
    let device_bytes = size_bytes("--device-size", &d.device_size)?;
    let mttr_hours = match d.mttr_hours {
        Some(h) => h,
        None => rebuild_hours(
            device_bytes,
            d.rebuild_mb_s.unwrap_or(100.0),
            d.replace_hours,
        )?,
    };
    let model = ArrayModel {
        k: d.k,
        m: d.m,
        mttf_hours: mttf("--mttf-hours", d.mttf_hours, d.afr, 1e6)?,
        mttr_hours,
        device_bytes,
        uber: d.uber,
        repair: d.repair.parse()?,
        latent_per_hour: d.latent_per_year / HOURS_PER_YEAR,
        scrub_hours: d.scrub_hours,
    };
    model.validate()?;
    Ok(model)
}

fn check_years(years: f64) -> Result<()> {
    if !(years.is_finite() && years > 0.0) {
        bail!("--years must be a number of years > 0, got {years}");
    }
    Ok(())
}

fn array(a: ArrayArgs) -> Result<()> {
    check_years(a.report.years)?;
    let model = array_model(&a.dev)?;
    let mttdl = model.mttdl()?;
    let times: RepairTimes = a.report.repair_times.parse()?;
    let mc = match a.report.mc_runs {
        Some(runs) => Some((model.monte_carlo_with(runs, a.report.seed, times)?, times)),
        None => None,
    };
    let out = answer(&model, &model.chain()?, mttdl, a.report.years, mc)?;
    if a.report.json {
        return print_json(&out);
    }
    println!("{}", describe_array(&model));
    print!("{}", out.text());
    Ok(())
}

fn eplog(a: EplogArgs) -> Result<()> {
    check_years(a.report.years)?;
    let main = array_model(&a.dev)?;
    let commit_hours = a.commit_seconds / 3600.0;
    let model = EplogModel {
        log_mttf_hours: mttf(
            "--log-mttf-hours",
            a.log_mttf_hours,
            a.log_afr,
            main.mttf_hours,
        )?,
        log_mttr_hours: a.log_mttr_hours.unwrap_or(main.mttr_hours),
        dirty_hours: a.dirty_hours,
        clean_hours: a.clean_hours,
        commit_hours,
        main,
    };
    model.validate()?;
    let mttdl = model.mttdl()?;
    let alone = model.main.mttdl()?;
    let times: RepairTimes = a.report.repair_times.parse()?;
    let mc = match a.report.mc_runs {
        Some(runs) => Some((model.monte_carlo_with(runs, a.report.seed, times)?, times)),
        None => None,
    };
    let report = EplogReport::new(&model, alone);
    let out = answer(&report, &model.chain()?, mttdl, a.report.years, mc)?;
    if a.report.json {
        return print_json(&out);
    }
    print!("{}", report.head(a.commit_seconds));
    print!("{}", out.text());
    print!("{}", report.tail(alone, mttdl));
    Ok(())
}

fn cluster(a: ClusterArgs) -> Result<()> {
    check_years(a.report.years)?;
    let n = a.k + a.m;
    if a.k == 0 {
        bail!("--k must be >= 1");
    }
    let segment_bytes = size_bytes("--segment-size", &a.segment_size)?;
    let chunk_bytes = segment_bytes / a.k as f64;
    let segments = match a.segments {
        Some(s) => s,
        None => {
            let osd_bytes = size_bytes("--osd-size", &a.osd_size)?;
            (a.osds as f64 * osd_bytes / (n as f64 * chunk_bytes)).round()
        }
    };
    let osd_recovery_mb_s = match (a.osd_recovery_mb_s, a.recovery_mb_s, a.measured_osds) {
        (Some(r), _, _) => r,
        (None, Some(total), Some(m0)) => {
            if m0 < 2 {
                bail!("--measured-osds must be >= 2 (the survivors share the recovery), got {m0}");
            }
            total / (m0 - 1) as f64
        }
        _ => 50.0,
    };
    if !(a.detect_minutes.is_finite() && a.detect_minutes >= 0.0) {
        bail!(
            "--detect-minutes must be a number of minutes >= 0, got {}",
            a.detect_minutes
        );
    }
    let model = ClusterModel {
        osds: a.osds,
        k: a.k,
        m: a.m,
        segments,
        chunk_bytes,
        mttf_hours: mttf("--mttf-hours", a.mttf_hours, a.afr, 200_000.0)?,
        osd_recovery_bytes_per_sec: osd_recovery_mb_s * 1e6,
        detect_hours: a.detect_minutes / 60.0,
        uber: a.uber,
    };
    model.validate()?;
    let mttdl = model.mttdl()?;
    let times: RepairTimes = a.report.repair_times.parse()?;
    let mc = match a.report.mc_runs {
        Some(runs) => Some((model.monte_carlo_with(runs, a.report.seed, times)?, times)),
        None => None,
    };
    let report = ClusterReport::new(&model, times);
    let out = answer(&report, &model.chain()?, mttdl, a.report.years, mc)?;
    if a.report.json {
        return print_json(&out);
    }
    print!(
        "{}",
        report.head(segment_bytes, osd_recovery_mb_s, a.detect_minutes)
    );
    print!("{}", out.text());
    Ok(())
}

fn table(a: TableArgs) -> Result<()> {
    if a.nas == 0 {
        bail!("--nas must be >= 1");
    }
    let t = rainfs::table_2_1(a.nas);
    if a.json {
        return print_json(&t);
    }
    println!(
        "RainFS Table 2.1: concurrently failed disks / racks tolerated without data loss ({} NAS systems, one per rack)",
        a.nas
    );
    print!("{t}");
    Ok(())
}
