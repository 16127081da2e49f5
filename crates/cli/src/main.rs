//! The one `ecstack` binary: a subcommand per layer, plus `bench` and `experiment`.

mod cmd_array;
mod cmd_bench;
mod cmd_cluster;
mod cmd_demo;
mod cmd_docs;
mod cmd_ec;
mod cmd_experiment;
mod cmd_kv;
mod cmd_mds;
mod cmd_nbd;
mod cmd_osd;
mod cmd_rainfs;
mod cmd_reduce;
mod cmd_reliability;
mod cmd_robustore;
mod cmd_sim;
mod cmd_trace;
mod cmd_tween;
mod cmd_zombienand;
mod memory;
mod nbd_export;
mod scratch;
mod signals;
mod util;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ecstack",
    version,
    about = "An erasure-coded storage stack: codes, devices, arrays, clusters and the tools that measure them",
    long_about = "ecstack builds erasure-coded storage from the device up: a fast GF(2^8) / Reed-Solomon / \
rateless code library, real and simulated block devices, and the tools to measure small-update cost, \
failure recovery and flash wear on your own machine.\n\nEvery reporting command takes --json."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Batched file-device I/O through pread/pwrite on per-device threads instead of io_uring (for
    /// this one `uring=0` in a `file:` spec)
    #[arg(long, global = true)]
    no_uring: bool,
    /// Run the erasure-code kernels at this level instead of the best the CPU has (scalar, ssse3,
    /// avx2, avx512, avx2-gfni, avx512-gfni)
    #[arg(long, global = true, value_name = "LEVEL")]
    simd_level: Option<String>,
}

/// Apply the process-wide options before any command runs.
fn apply_globals(cli: &Cli) -> anyhow::Result<()> {
    if cli.no_uring {
        ecstack_device::set_uring_enabled(false);
    }
    if let Some(name) = &cli.simd_level {
        let level = ecstack_codes::Simd::parse(name).ok_or_else(|| {
            anyhow::anyhow!(
                "--simd-level: unknown level '{name}' (scalar, ssse3, avx2, avx512, avx2-gfni, avx512-gfni)"
            )
        })?;
        ecstack_codes::Simd::set_active(level).map_err(|e| anyhow::anyhow!("--simd-level: {e}"))?;
    }
    Ok(())
}

#[derive(Subcommand)]
enum Cmd {
    /// Erasure-code files into shard files and rebuild them from any k shards
    Ec(cmd_ec::EcArgs),
    /// Measure throughput: the codes (beside ISA-L when built with --features isal-new or isal), the cluster beside MinIO
    Bench(cmd_bench::BenchArgs),
    /// Simulators: SSD and HDD workloads, deterministic array runs, RobuSTore's world, ZombieNAND lifetimes
    Sim(cmd_sim::SimArgs),
    /// Parse, analyze, transform, synthesize and replay block and file traces (MSR, SPC, NFS, blkparse, fio)
    Trace(cmd_trace::TraceArgs),
    /// Export any device over NBD (nbdinfo, nbdcopy, fio, nbd-client), admin socket client, fio bench
    Nbd(cmd_nbd::NbdArgs),
    /// Erasure-coded array (md / pl / eplog schemes, and TWEEN): create, status, commit, fail, rebuild, scrub, serve over NBD
    Array(cmd_array::ArrayArgs),
    /// CodFS cluster: init, cert, put/get/update/rm/ls/stat, status, osd out; `cluster up` starts a local cluster
    Cluster(cmd_cluster::ClusterArgs),
    /// Start a local cluster (MDS + 8 OSDs, RS 6+2), store files, SIGKILL two OSDs, read degraded, recover, verify
    Demo(cmd_demo::DemoArgs),
    /// Re-run published experiments on this machine: EPLOG §5 Exps 1-6, CodFS, RobuSTore, ZombieNAND, TWEEN, RainFS
    Experiment(cmd_experiment::ExperimentArgs),
    /// Key-value store on a device or array (EPLOG §4) served over the Redis protocol: `kv serve`
    Kv(cmd_kv::KvArgs),
    /// CodFS metadata server: files → segments → chunks on OSDs, OSD health, promotion, recovery
    Mds(cmd_mds::MdsArgs),
    /// CodFS object storage daemon: a chunk store, primary work (encode, degraded reads, FO updates), recovery
    Osd(cmd_osd::OsdArgs),
    /// TreeChunks: what compression and dedup would save on a file tree (analyze, report, merge)
    Reduce(cmd_reduce::ReduceArgs),
    /// RainFS (Java module rainfs/): the checker, the TeraSort suite and the experiment with one command
    #[command(long_about = cmd_rainfs::LONG_ABOUT)]
    Rainfs(cmd_rainfs::RainfsArgs),
    /// Mean time to data loss of arrays (RAID-5/6, RS), EPLOG with log devices, CodFS clusters; RainFS Table 2.1
    Reliability(cmd_reliability::ReliabilityArgs),
    /// Write the man pages and shell completions (scripts/setup.sh installs them)
    #[command(hide = true)]
    GenerateDocs(cmd_docs::GenerateDocsArgs),
}

/// Old flag spellings kept as hidden aliases (docs/cli.md): the command they belong to (empty:
/// any), the old spelling and the one that replaced it.
const DEPRECATED_FLAGS: &[(&[&str], &str, &str)] = &[
    (&[], "--admin-socket", "--admin"),
    (&[], "--out-dir", "--out"),
    (&[], "--output", "--out"),
    (&[], "--family", "--code"),
    (&["cluster", "up"], "--dir", "--config"),
    (&["kv", "serve"], "--bind", "--addr"),
    (&["kv", "serve"], "--port", "--addr"),
];

/// The one-line notes for the deprecated spellings among `args` (the program name first; up to
/// a `--`).
fn deprecation_notes(args: &[String]) -> Vec<String> {
    let mut notes = Vec::new();
    for a in args.iter().skip(1).take_while(|a| *a != "--") {
        for (command, old, new) in DEPRECATED_FLAGS {
            let in_command = args.len() > command.len()
                && args[1..=command.len()]
                    .iter()
                    .zip(command.iter())
                    .all(|(x, y)| x == y);
            let used = a == old || a.strip_prefix(old).is_some_and(|r| r.starts_with('='));
            if in_command && used && !notes.iter().any(|n: &String| n.contains(old)) {
                notes.push(format!(
                    "ecstack: note: {old} is deprecated and will be removed; use {new} (docs/cli.md)"
                ));
            }
        }
    }
    notes
}

/// `ecstack … | head`: once the reader is gone, `println!` panics ("failed printing to stdout:
/// Broken pipe"); end quietly instead, with the status a shell shows for SIGPIPE (128 + 13), as
/// `cat` and `ls` do. SIGPIPE itself stays ignored (Rust's default), so a server whose client goes
/// away gets EPIPE on that socket and keeps serving the others.
fn quiet_on_closed_stdout() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        previous(info)
    }));
}

fn main() {
    memory::keep_freed_memory();
    quiet_on_closed_stdout();
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let cli = Cli::parse();
    for note in deprecation_notes(&args) {
        eprintln!("{note}");
    }
    if let Err(e) = apply_globals(&cli) {
        eprintln!("ecstack: error: {}", one_line(&e));
        std::process::exit(1);
    }
    let res = match cli.cmd {
        Cmd::Ec(a) => cmd_ec::run(a),
        Cmd::Bench(a) => cmd_bench::run(a),
        Cmd::Sim(a) => cmd_sim::run(a),
        Cmd::Trace(a) => cmd_trace::run(a),
        Cmd::Nbd(a) => cmd_nbd::run(a),
        Cmd::Array(a) => cmd_array::run(a),
        Cmd::Experiment(a) => cmd_experiment::run(a),
        Cmd::Kv(a) => cmd_kv::run(a),
        Cmd::Mds(a) => cmd_mds::run(a),
        Cmd::Osd(a) => cmd_osd::run(a),
        Cmd::Cluster(a) => cmd_cluster::run(a),
        Cmd::Demo(a) => cmd_demo::run(a),
        Cmd::Reduce(a) => cmd_reduce::run(a),
        Cmd::Reliability(a) => cmd_reliability::run(a),
        Cmd::Rainfs(a) => cmd_rainfs::run(a),
        Cmd::GenerateDocs(a) => cmd_docs::run(a, Cli::command()),
    };
    if let Err(e) = res {
        // One clear line, never a panic trace.
        eprintln!("ecstack: error: {}", one_line(&e));
        std::process::exit(1);
    }
}

/// The error and its causes on one line, skipping a cause whose text the line already holds (library
/// errors often print their source in their own message too).
fn one_line(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deprecated_spellings_get_one_note_each() {
        let args: Vec<String> = [
            "ecstack",
            "ec",
            "decode",
            "--output=x",
            "--out-dir",
            "d",
            "--output",
            "y",
            "--outputs",
            "--",
            "--family",
        ]
        .map(String::from)
        .to_vec();
        let notes = deprecation_notes(&args);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("--output is deprecated") && notes[0].contains("use --out"));
        assert!(notes[1].contains("--out-dir is deprecated"));
        assert!(deprecation_notes(&["ecstack".into(), "--admin".into()]).is_empty());
        // --dir is old only for `cluster up` (experiments keep it).
        let up = |cmd: &[&str]| {
            deprecation_notes(&cmd.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(up(&["ecstack", "cluster", "up", "--dir", "d"]).len(), 1);
        assert!(up(&["ecstack", "experiment", "eplog", "--dir", "d"]).is_empty());
    }

    /// `ecstack generate-docs` writes a man page for every visible command, recursively
    /// (`man ecstack-array-create`), and the three completion scripts.
    #[test]
    fn every_subcommand_has_its_man_page() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().to_path_buf();
        cmd_docs::run(
            cmd_docs::GenerateDocsArgs::for_dir(out.clone()),
            Cli::command(),
        )
        .unwrap();
        let names = cmd_docs::page_names(Cli::command());
        for must in [
            "ecstack",
            "ecstack-array",
            "ecstack-array-create",
            "ecstack-cluster",
        ] {
            assert!(names.iter().any(|n| n == must), "{must} not in {names:?}");
        }
        assert!(!names
            .iter()
            .any(|n| n.contains("generate-docs") || n.ends_with("-help")));
        // Every command of the tree, at every depth (walked here independently of the writer).
        fn count(c: &clap::Command) -> usize {
            1 + c
                .get_subcommands()
                .filter(|s| !s.is_hide_set() && s.get_name() != "help")
                .map(count)
                .sum::<usize>()
        }
        assert_eq!(names.len(), count(&Cli::command()));
        for n in &names {
            let page = out.join("man").join(format!("{n}.1"));
            let text = std::fs::read_to_string(&page)
                .unwrap_or_else(|e| panic!("{}: {e}", page.display()));
            assert!(
                text.contains(".TH") && text.contains(".SH NAME"),
                "{n}: {text}"
            );
        }
        let pages = std::fs::read_dir(out.join("man")).unwrap().count();
        assert_eq!(pages, names.len(), "a page for each command and no other");
        for f in ["ecstack.bash", "_ecstack", "ecstack.fish"] {
            let p = out.join("completions").join(f);
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(text.contains("array"), "{f}");
        }
    }
}
