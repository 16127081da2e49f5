//! `ecstack rainfs` (the RainFS checker, TeraSort suite and experiment through the Java module `rainfs/`)
//! and `ecstack experiment rainfs`. The logic is in `ecstack_lab::rainfs`.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use ecstack_lab::rainfs::{self, Arch, Build, ExperimentConfig, Tools};
use ecstack_lab::LabError;

use crate::util::print_report;

/// `ecstack rainfs --help`.
pub const LONG_ABOUT: &str = "RainFS (docs/rainfs.md) is a Java module, rainfs/, that Hadoop loads for rainfs:// URIs. \
This command runs its tools with one command: it finds the JDK (JAVA_HOME, else java on PATH) and Maven \
(mvn on PATH), builds the module once with `mvn package` (again only when rainfs/src or pom.xml change; the \
first build downloads ~120 MB of Hadoop artifacts into ~/.m2), and runs the tool with `java`. Without a \
JDK, or without Maven while a build is needed, it fails with one line saying what to install.\n\n\
The module is found through ECSTACK_RAINFS_DIR, else the rainfs/ directory above the current directory or \
the ecstack binary.";

#[derive(Args)]
pub struct RainfsArgs {
    #[command(subcommand)]
    cmd: RainfsCmd,
}

#[derive(Subcommand)]
enum RainfsCmd {
    /// The checker (seed §2.6.4): partial creates/deletes/moves, leaked and corrupt replicas, re-replication.
    /// Exit status 0 consistent, 1 problems remain (--dry-run: found), 2 usage/configuration error
    #[command(disable_help_flag = true)]
    Fsck {
        /// Passed to RainFsck: --config FILE [--dry-run] [--json] [--no-crc] [--timeout SECONDS] (--help: its usage)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The TeraSort suite (long mode): TeraGen/TeraSort/TeraValidate on file:// and rainfs r=1, r=2 over three
    /// NAS directories, and r=2 with one NAS lost, then one hung, mid-sort; prints its table
    Terasort {
        /// Rows of 100 bytes (the seed's 0.5 TB is 5e9 rows)
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
    },
    /// The experiment (same as `ecstack experiment rainfs`)
    #[command(long_about = EXP_LONG_ABOUT)]
    Experiment(ExpRainfsArgs),
    /// Print the jar plus Hadoop's client jars (for java -cp or HADOOP_CLASSPATH)
    Classpath,
    /// Build the module now (jar and TeraSort classes) if it is not up to date
    Build,
}

/// `ecstack experiment rainfs --help`.
pub const EXP_LONG_ABOUT: &str = "The TeraSort suite's write (TeraGen), sort (TeraSort) and read (TeraValidate) throughput \
over an emulated network of links (each a FIFO server of fixed bandwidth; rainfs/.../NasLink.java), in \
Hadoop's local job runner, in two parts:\n\n\
1. by NAS count: RainFS over 1..N NAS at replication 1 and 2, each NAS behind one shared link of \
--nas-only-mbps, client links unlimited (NAS-bound);\n\
2. architectures (seed §2.3 Fig. 2.2, §2.7 Fig. 2.4): DN-on-Client, DN-on-NAS, No-DN and RainFS at \
replication 1 and 2 over --arch-nas NAS, with client links (--client-mbps each way), NAS links \
(--nas-mbps each way) and a DataNode per NAS head (--head-mbps, DN-on-NAS). Each architecture charges the \
links its transfers cross in the seed's figures (DN-on-Client: replica 2 via another client's DataNode, \
misplaced reads pulled through another client; DN-on-NAS: through the NAS heads); RainFS stores the bytes, \
so every run also passes TeraValidate.\n\n\
Writes report.md, rainfs.csv and SVG plots to --out. The default is the long mode (tens of minutes on 2 \
busy cores); --quick is a few small runs for CI.";

/// `ecstack experiment rainfs`.
#[derive(Args)]
pub struct ExpRainfsArgs {
    /// A few small runs (CI): 8000 rows, 2 NAS, RainFS vs DN-on-Client at r=2
    #[arg(long)]
    quick: bool,
    /// Rows of 100 bytes per run (default 200000, --quick 8000)
    #[arg(long)]
    rows: Option<u64>,
    /// Concurrent clients (TeraGen writers)
    #[arg(long)]
    clients: Option<u32>,
    /// Part 1: NAS counts (empty to skip the part: --nas-counts '')
    #[arg(long, value_delimiter = ',')]
    nas_counts: Option<Vec<String>>,
    /// Part 1: each NAS's shared link, MB/s
    #[arg(long)]
    nas_only_mbps: Option<f64>,
    /// Part 2: architectures (dn-on-client, dn-on-nas, no-dn, rainfs; '' to skip the part)
    #[arg(long, value_delimiter = ',')]
    archs: Option<Vec<String>>,
    /// Part 2: replication factors (1, 2)
    #[arg(long, value_delimiter = ',')]
    replications: Option<Vec<u32>>,
    /// Part 2: number of NAS
    #[arg(long)]
    arch_nas: Option<u32>,
    /// Part 2: each client's link, each way, MB/s (the seed's 1 GbE)
    #[arg(long)]
    client_mbps: Option<f64>,
    /// Part 2: each NAS's link, each way, MB/s (the seed's 2 x 10 GbE for 10 clients: 2x their aggregate)
    #[arg(long)]
    nas_mbps: Option<f64>,
    /// Part 2: each NAS head's DataNode, MB/s (DN-on-NAS; an assumption standing for the head-node CPU limit the seed observed)
    #[arg(long)]
    head_mbps: Option<f64>,
    /// Part 2: DN-on-Client's fraction of read tasks placed away from their block's DataNode (seed: ~1/3)
    #[arg(long)]
    misplaced: Option<f64>,
    /// Output directory for report.md, rainfs.csv and the SVG plots
    #[arg(short = 'o', long, default_value = "rainfs-results")]
    out: PathBuf,
    /// Print the runs as JSON
    #[arg(long)]
    json: bool,
}

fn flag_error(e: LabError) -> anyhow::Error {
    match e {
        LabError::Config { field, msg } => anyhow::anyhow!("--{field}: {msg}"),
        other => other.into(),
    }
}

fn log(line: &str) {
    crate::util::progress_line(line);
}

pub fn run(a: RainfsArgs) -> Result<()> {
    match a.cmd {
        RainfsCmd::Fsck { args } => {
            let t = rainfs::tools()?;
            t.ensure_built(Build::Jar, &log)?;
            let status = t
                .fsck(&args)
                .status()
                .map_err(|e| anyhow::anyhow!("running {}: {e}", t.java.display()))?;
            match status.code() {
                Some(0) => Ok(()),
                // The checker's own exit status (1 problems remain, 2 usage): it has printed why.
                Some(c) => std::process::exit(c),
                None => anyhow::bail!("rainfs fsck: java was killed ({status})"),
            }
        }
        RainfsCmd::Terasort { rows } => {
            if rows < 1000 {
                anyhow::bail!("--rows: {rows} is too few (at least 1000)");
            }
            let t = rainfs::tools()?;
            t.ensure_built(Build::TeraSort, &log)?;
            log(&format!("rainfs: TeraSort suite, {rows} rows (long)"));
            print!("{}", t.terasort_suite(rows)?);
            Ok(())
        }
        RainfsCmd::Experiment(e) => experiment(e),
        RainfsCmd::Classpath => {
            let t = rainfs::tools()?;
            t.ensure_built(Build::Jar, &log)?;
            println!("{}", t.classpath()?);
            Ok(())
        }
        RainfsCmd::Build => {
            let t = rainfs::tools()?;
            t.ensure_built(Build::TeraSort, &log)?;
            eprintln!("rainfs: {} is built", t.jar().display());
            Ok(())
        }
    }
}

fn config(a: &ExpRainfsArgs) -> Result<ExperimentConfig> {
    let mut c = if a.quick {
        ExperimentConfig::quick()
    } else {
        ExperimentConfig::long()
    };
    if let Some(v) = a.rows {
        c.rows = v;
    }
    if let Some(v) = a.clients {
        c.clients = v;
    }
    if let Some(v) = &a.nas_counts {
        c.nas_counts = v
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse()
                    .map_err(|_| anyhow::anyhow!("--nas-counts: {s:?} is not a number"))
            })
            .collect::<Result<_>>()?;
    }
    if let Some(v) = a.nas_only_mbps {
        c.nas_only_mbps = v;
    }
    if let Some(v) = &a.archs {
        c.archs = v
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| {
                Arch::parse(s).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--archs: {s:?} is not an architecture (dn-on-client, dn-on-nas, no-dn, rainfs)"
                    )
                })
            })
            .collect::<Result<_>>()?;
    }
    if let Some(v) = &a.replications {
        c.replications = v.clone();
    }
    if let Some(v) = a.arch_nas {
        c.arch_nas = v;
    }
    if let Some(v) = a.client_mbps {
        c.client_mbps = v;
    }
    if let Some(v) = a.nas_mbps {
        c.nas_mbps = v;
    }
    if let Some(v) = a.head_mbps {
        c.head_mbps = v;
    }
    if let Some(v) = a.misplaced {
        c.misplaced = v;
    }
    c.validate().map_err(flag_error)?;
    Ok(c)
}

pub fn experiment(a: ExpRainfsArgs) -> Result<()> {
    // Every argument is checked before anything is built or run.
    let cfg = config(&a)?;
    let t: Tools = rainfs::tools()?;
    crate::scratch::announce(
        "experiment rainfs",
        &[&std::env::temp_dir(), &a.out],
        if a.quick {
            "a few minutes (--quick)"
        } else {
            "tens of minutes (--quick takes a few minutes)"
        },
    );
    let report = rainfs::run(&t, &cfg, &log).map_err(flag_error)?;
    report.write(&a.out)?;
    print_report(&report, || report.markdown(), &a.out, a.json)
}
