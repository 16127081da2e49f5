//! ecstack's experiment drivers and their reports.
//!
//! Each experiment takes a typed configuration, runs in-process over the real layers below (codes,
//! devices, traces, arrays) and returns a typed report that [`table`] writes as CSV and Markdown and
//! [`plot`] draws as SVG. The `ecstack experiment …` commands only parse arguments into these
//! configurations.
//!
//! * [`eplog`]: EPLOG §5 Experiments 1–5 (write traffic, GC, parity commit frequency, requests/s on
//!   two testbeds, recovery), md vs pl vs eplog.
//! * [`trace_plots`]: the figures of a trace analysis.
//! * [`zombienand`]: ZombieNAND lifetimes to death (thesis ch. 4), one run or the synthetic grid.
//! * [`codfs_bench`]: `ecstack bench cluster`, the CodFS cluster on loopback against MinIO
//!   ([`codfs_s3`] is the S3 client for the peer).
//! * [`mount_bench`]: `ecstack bench mount`, the cluster's FUSE mount beside bindfs and GlusterFS
//! * [`codfs_synthetic`]: `ecstack experiment codfs --exp synthetic|overhead`, CodFS's §5.2 update
//!   schemes on HDD-profiled OSD stores; [`codfs_msr`]: `--exp msr`, §5.3.1's MSR Cambridge
//!   replay under each scheme on the same testbed.
//! * [`codfs_model`]: `ecstack experiment codfs --exp model`, CodFS's §5.1 throughput model against
//!   the cluster on an emulated network of namespaces ([`codfs_netns`]).
//! * [`ec_bench`]: `ecstack bench ec`, our erasure-code kernels against ISA-L at each kernel level.
//! * [`ec_demo`]: `ecstack ec demo`, a file encoded, m shards lost, decoded and compared.
//! * [`robustore`]: `ecstack experiment robustore`, RobuSTore's ch. 6 figures on `ecstack-sim`.
//! * [`scrub_bench`]: `ecstack array scrub-bench`, scrub's read bandwidth against `dd`'s sequential
//!   reads of the same device files (issue 15).
//! * [`rainfs`]: `ecstack rainfs` and `ecstack experiment rainfs`, the launcher of the Java module
//!   `rainfs/` (checker, TeraSort suite, the experiment by NAS count and by architecture).
//! * [`device_sim`]: `ecstack sim ssd|hdd`, a synthetic workload or a block trace against the
//!   simulated SSD and HDD models, and what the model saw.
//! * [`array_sim`]: `ecstack sim array`, a sweep of the deterministic array simulator over seeds.

pub mod admission_bench;
pub mod array_sim;
pub mod ceph_peer;
pub mod codfs_bench;
pub mod codfs_demo;
pub mod codfs_local;
pub mod codfs_model;
pub mod codfs_msr;
pub mod codfs_netns;
pub mod codfs_reserve;
pub mod codfs_s3;
pub mod codfs_synthetic;
pub mod codfs_updload;
mod delay_line;
pub mod device_sim;
pub mod ec_bench;
pub mod ec_demo;
pub mod eplog;
pub mod gluster_peer;
pub mod kv_bench;
pub mod kv_bench_ycsb;
pub mod mds_backup;
pub mod mds_bench;
pub mod mds_failover;
pub mod mount_bench;
mod netns_thread;
pub mod plot;
pub mod rainfs;
pub mod robustore;
pub mod scrub_bench;
pub mod table;
pub mod trace_plots;
pub mod tween;
pub mod zombienand;

use std::path::PathBuf;

/// Errors of an experiment: each one line that names the problem.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A configuration value out of range; `field` names the setting (the CLI flag without `--`).
    #[error("{field}: {msg}")]
    Config { field: &'static str, msg: String },
    #[error(transparent)]
    Array(#[from] ecstack_array::ArrayError),
    #[error(transparent)]
    Device(#[from] ecstack_device::DeviceError),
    #[error(transparent)]
    Trace(#[from] ecstack_trace::TraceError),
    #[error(transparent)]
    Kv(#[from] ecstack_kv::KvError),
    #[error(transparent)]
    Codes(#[from] ecstack_codes::CodeError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A run that cannot go on (a device file too small, a replay client that panicked).
    #[error("{0}")]
    Run(String),
}

pub type Result<T> = std::result::Result<T, LabError>;

/// A count setting within `range`, or the one-line error naming it (`field` is the CLI flag
/// without `--`): "must be at least N" for an open range, "N is outside A..=B" otherwise.
pub(crate) fn count_within(
    field: &'static str,
    n: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<()> {
    if range.contains(&n) {
        return Ok(());
    }
    let msg = match *range.end() {
        u64::MAX => format!("must be at least {}", range.start()),
        end => format!("{n} is outside {}..={end}", range.start()),
    };
    Err(LabError::Config { field, msg })
}

/// Attach a path to an I/O error.
pub(crate) fn io_at(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> LabError + '_ {
    move |source| LabError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A loopback port free at the time of the call (bound to port 0 and released): for a peer server
/// (MinIO, redis-server) or a daemon of ours that is told its port. The cluster's MDS, which must
/// keep its port across restarts, takes one below the ephemeral range (`codfs_local`).
pub(crate) fn free_loopback_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| LabError::Run(format!("cannot bind a loopback port: {e}")))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| LabError::Run(format!("cannot read a bound port: {e}")))
}

/// Serialize a value through its `Display` text (typed keys appear in JSON and CSV as their labels).
pub(crate) fn serialize_display<T: std::fmt::Display, S: serde::Serializer>(
    v: &T,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(v)
}
