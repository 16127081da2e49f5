//! `ecstack demo`: a local CodFS cluster survives two OSD failures (the logic is
//! `ecstack_lab::codfs_demo`; this module parses arguments and draws progress).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use ecstack_lab::codfs_demo::{self as demo, DemoOptions, Observer};
use indicatif::ProgressBar;

use crate::util::{parse_size, print_json, progress_bar};

#[derive(Args)]
pub struct DemoArgs {
    /// OSDs to start
    #[arg(long, default_value_t = 8)]
    osds: usize,
    /// Data chunks per segment
    #[arg(short = 'k', long = "k", default_value_t = 6)]
    k: u32,
    /// Parity chunks per segment
    #[arg(short = 'm', long = "m", default_value_t = 2)]
    m: u32,
    /// Segment size (1M-64M, a multiple of k; CodFS uses 16M, the demo less to finish quickly)
    #[arg(long, default_value = "3M")]
    segment_size: String,
    /// Bytes of generated files in all
    #[arg(long, default_value = "256M")]
    size: String,
    /// OSDs killed with SIGKILL (at most m)
    #[arg(long, default_value_t = 2)]
    kill: usize,
    /// Seed of the files and of which OSDs die
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the cluster's files here (default: a temporary directory, removed at the end)
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Run the daemons without TLS (loopback experiments only)
    #[arg(long)]
    insecure: bool,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

/// Steps as lines on stderr, long steps as byte progress bars (hidden when stderr is not a terminal).
struct Progress {
    bar: Option<ProgressBar>,
    quiet: bool,
}

impl Observer for Progress {
    fn step(&mut self, line: &str) {
        if !self.quiet {
            eprintln!("• {line}");
        }
    }
    fn start_bytes(&mut self, what: &str, total: u64) {
        self.bar = Some(progress_bar(total, what));
    }
    fn add_bytes(&mut self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }
    fn finish_bytes(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

pub fn run(a: DemoArgs) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the ecstack binary")?;
    let mut opts = DemoOptions::new(exe);
    opts.osds = a.osds;
    opts.k = a.k;
    opts.m = a.m;
    opts.segment_bytes = parse_size(&a.segment_size)?;
    opts.total_bytes = parse_size(&a.size)?;
    opts.kill = a.kill;
    opts.seed = a.seed;
    opts.dir = a.dir;
    opts.insecure = a.insecure;
    let mut progress = Progress {
        bar: None,
        quiet: a.json,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let r = rt.block_on(demo::run(&opts, &mut progress))?;
    if a.json {
        return print_json(&r);
    }
    let mib = r.bytes as f64 / (1 << 20) as f64;
    println!(
        "ecstack demo: {} OSDs, RS {}+{}, {} files ({mib:.0} MiB) in segments of {} MiB",
        r.osds,
        r.k,
        r.m,
        r.files,
        r.segment_bytes >> 20
    );
    println!(
        "  put            {:>8.1} MiB/s  ({:.1} s)",
        r.put_mib_per_sec, r.put_secs
    );
    println!(
        "  get            {:>8.1} MiB/s  ({:.1} s)",
        r.get_mib_per_sec, r.get_secs
    );
    println!(
        "  killed {} with SIGKILL; the MDS marked them down after {:.1} s",
        r.killed.join(" and "),
        r.detect_secs
    );
    println!(
        "  degraded get   {:>8.1} MiB/s  ({:.1} s)",
        r.degraded_get_mib_per_sec, r.degraded_get_secs
    );
    println!(
        "  recovery       {:.1} s to full redundancy ({} chunks, {:.0} MiB rebuilt)",
        r.recovery_secs,
        r.chunks_recovered,
        r.bytes_recovered as f64 / (1 << 20) as f64
    );
    println!(
        "  verified       {:.0} MiB: every byte, after each of the three reads",
        r.bytes_verified as f64 / (1 << 20) as f64
    );
    Ok(())
}
