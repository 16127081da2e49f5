//! `ecstack experiment`: argument parsing for the experiments of `ecstack_lab`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use ecstack_array::SchemeKind;
use ecstack_lab::eplog::{EplogConfig, Exp, Setting, Testbed};
use ecstack_lab::LabError;

use crate::util::print_json;

#[derive(Args)]
pub struct ExperimentArgs {
    #[command(subcommand)]
    cmd: ExpCmd,
}

#[derive(Subcommand)]
enum ExpCmd {
    /// EPLOG §5 Exps 1-5: write traffic, GC, commit frequency, requests/s, recovery (md vs pl vs eplog)
    Eplog(EplogArgs),
}

#[derive(Args)]
struct EplogArgs {
    /// Small traces and a subset of the runs (a few minutes)
    #[arg(long)]
    quick: bool,
    /// Trace scale relative to the published traces (default 0.004 with --quick, 0.02 otherwise)
    #[arg(long)]
    scale: Option<f64>,
    /// Experiments to run
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5")]
    exp: Vec<u32>,
    /// Output directory for the Markdown report, CSV and SVG files
    #[arg(long, default_value = "eplog-results")]
    out: PathBuf,
    /// Directory for the file-backed devices of Exps 4-5 (the files are removed afterwards)
    #[arg(long)]
    dir: Option<PathBuf>,
    /// RAID settings k+m to run (Exps 1, 2 and 4; the others always use 6+2)
    #[arg(long, value_delimiter = ',', default_value = "4+1,6+1,4+2,6+2")]
    settings: Vec<String>,
    /// Schemes to run (Exps 1, 2 and 4)
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
    /// Exp 4 testbeds: `files` (O_DIRECT files in --dir), `paper` (EPLOG's SSDs and HDDs, Table 1,
    /// emulated: RAM devices charged the paper's per-request service times)
    #[arg(long, value_delimiter = ',', default_value = "files,paper")]
    testbed: Vec<String>,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print all results as JSON
    #[arg(long)]
    json: bool,
}

pub fn run(a: ExperimentArgs) -> Result<()> {
    match a.cmd {
        ExpCmd::Eplog(e) => eplog(e),
    }
}

/// A library configuration error as the flag it came from: `--settings: 'six' is not k+m`.
fn flag_error(e: LabError) -> anyhow::Error {
    match e {
        LabError::Config { field, msg } => anyhow::anyhow!("--{field}: {msg}"),
        other => other.into(),
    }
}

fn eplog_config(a: &EplogArgs) -> Result<EplogConfig, LabError> {
    let dir = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("ecstack-eplog-{}", std::process::id()))
    });
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
        testbeds: a
            .testbed
            .iter()
            .map(|t| t.parse::<Testbed>())
            .collect::<Result<_, _>>()?,
        seed: a.seed,
        dir,
    };
    cfg.validate()?;
    Ok(cfg)
}

fn eplog(a: EplogArgs) -> Result<()> {
    // Every argument is checked before anything is created or run.
    let cfg = eplog_config(&a).map_err(flag_error)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let report = ecstack_lab::eplog::run(&cfg, &|line| eprintln!("{line}")).map_err(flag_error)?;
    report.write(&a.out)?;
    if a.json {
        print_json(&report)?;
    } else {
        println!("{}", report.markdown());
        eprintln!("report, CSV and SVG files in {}", a.out.display());
    }
    Ok(())
}
