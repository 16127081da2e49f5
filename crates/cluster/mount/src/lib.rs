//! The CodFS cluster as a POSIX file system (thesis §4.2: "a CodFS client can access the storage
//! cluster through a file system interface"): a FUSE mount (`fuser`) over [`ecstack_client`].
//!
//! - Metadata: every namespace call goes to the MDS (schema version 3: inodes, directory entries,
//!   symlinks, xattrs); the kernel keeps attributes and directory entries for `attr_timeout`
//!   (1 s by default), so a second mount sees a change within that; an open always asks the MDS.
//!   Permissions are checked by the kernel (`default_permissions`).
//! - Data: whole segments in the client's LRU [`SegmentCache`] (§4.4.4). Reads fill it a segment
//!   at a time; writes go into it. A new segment completely written (a file written in order) is
//!   written whole at once in the background (write-behind: placed by GrowFile, put's window of
//!   bytes in transit in the whole mount); the rest is flushed at close, fsync, or when the
//!   cache must make room: a segment whose length is unchanged as one update per written range at
//!   its primary, a new or grown or cut segment written whole, then one SetAttr commits the size,
//!   the new segment lengths and the times (and bumps the file's version). A close or fsync waits
//!   for the background writes too; one that failed answers EIO at the file's next write, fsync
//!   or close, and its bytes stay dirty until a flush writes them.
//! - Close-to-open (§4.4.1): an open asks the MDS for the file's version and layouts, drops the
//!   cached clean segments of any other version and the kernel's cached attributes of the file; a
//!   close flushes and commits before it returns.
//! - Extended attributes as the MDS last answered them are kept for `attr_timeout` (the kernel
//!   asks for `security.capability` before every write): `xattrs`.
//! - Requests run concurrently on the mount's runtime; one file's data path one at a time.
//!
//! See docs/mount.md for the semantics and what is not POSIX.

#![forbid(unsafe_code)]

mod fs;
mod xattrs;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use fs::CodfsFs;

/// What `ecstack cluster mount` asks for.
#[derive(Debug, Clone)]
pub struct MountSpec {
    pub mountpoint: PathBuf,
    /// The cluster's `cluster.toml`.
    pub config: PathBuf,
    /// The certificate to authenticate with (`certs/NAME.pem`).
    pub name: String,
    pub insecure: bool,
    /// The segment cache's size, bytes.
    pub cache_bytes: u64,
    /// How long the kernel keeps attributes and directory entries (docs/mount.md).
    pub attr_timeout: Duration,
    /// Where the Prometheus metrics endpoint listens (port 0 picks a free one).
    pub metrics_addr: String,
}

/// The mount's metrics in the Prometheus text format: the segment cache's counters and sizes.
pub fn metrics_text(s: &ecstack_client::CacheStats, capacity_bytes: u64) -> String {
    use prometheus_client::metrics::counter::Counter;
    let mut r = prometheus_client::registry::Registry::default();
    for (name, help, v) in [
        (
            "ecstack_mount_cache_hits",
            "segment cache lookups that found the segment",
            s.hits,
        ),
        (
            "ecstack_mount_cache_misses",
            "segment cache lookups that read the segment from the cluster",
            s.misses,
        ),
        (
            "ecstack_mount_cache_read_ahead",
            "segments read in the background ahead of a sequential reader, and used",
            s.read_ahead,
        ),
        (
            "ecstack_mount_cache_evictions",
            "clean segments dropped to make room",
            s.evictions,
        ),
        (
            "ecstack_mount_cache_invalidations",
            "clean segments dropped at an open because the file changed elsewhere (close-to-open)",
            s.invalidations,
        ),
    ] {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        // prometheus-client appends `_total`.
        r.register(name, help, c);
    }
    ecstack_rpc::metrics::register_gauges(
        &mut r,
        &[
            (
                "ecstack_mount_cache_bytes",
                "bytes of segments in the cache",
                s.bytes,
            ),
            (
                "ecstack_mount_cache_dirty_bytes",
                "bytes of cached segments holding writes not yet flushed",
                s.dirty_bytes,
            ),
            (
                "ecstack_mount_cache_segments",
                "segments in the cache",
                s.segments,
            ),
            (
                "ecstack_mount_cache_capacity_bytes",
                "the cache's size (--cache-size)",
                capacity_bytes,
            ),
        ],
    );
    ecstack_rpc::metrics::encode(&r)
}

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("mountpoint {0} does not exist")]
    NoMountpoint(PathBuf),
    #[error("mountpoint {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("mountpoint {0} is not empty (mount on an empty directory)")]
    NotEmpty(PathBuf),
    #[error("cannot mount: /dev/fuse is missing (load the fuse module: modprobe fuse; in a container, pass --device /dev/fuse)")]
    NoFuse,
    #[error("cannot reach the cluster's MDS: {0}")]
    Unreachable(String),
    #[error("{0}")]
    Client(#[from] ecstack_client::ClientError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("{0}")]
    Metrics(#[from] ecstack_rpc::metrics::MetricsError),
    #[error("cannot mount {path}: {source}")]
    Mount {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Checks a mountpoint: it exists, is a directory, and is empty.
pub fn check_mountpoint(p: &Path) -> Result<(), MountError> {
    let meta = std::fs::metadata(p).map_err(|_| MountError::NoMountpoint(p.to_owned()))?;
    if !meta.is_dir() {
        return Err(MountError::NotADirectory(p.to_owned()));
    }
    let mut entries = std::fs::read_dir(p).map_err(|e| MountError::Mount {
        path: p.to_owned(),
        source: e,
    })?;
    if entries.next().is_some() {
        return Err(MountError::NotEmpty(p.to_owned()));
    }
    Ok(())
}

/// Mounts the cluster at `spec.mountpoint` and serves it until it is unmounted (`fusermount3 -u`,
/// `umount`) or the process gets SIGTERM or SIGINT (then it unmounts itself). Every check that
/// can fail before mounting does (mountpoint, `/dev/fuse`, the MDS answering), each as one line.
pub fn run(spec: &MountSpec) -> Result<(), MountError> {
    check_mountpoint(&spec.mountpoint)?;
    if !Path::new("/dev/fuse").exists() {
        return Err(MountError::NoFuse);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(MountError::Runtime)?;
    let options = ecstack_client::ClientOptions {
        metadata_timeout: Duration::from_secs(10),
        ..Default::default()
    };
    let client = {
        let _in = rt.enter();
        ecstack_client::Client::from_config_file_with(
            &spec.config,
            &spec.name,
            spec.insecure,
            options,
        )?
    };
    // The MDS must answer before anything is mounted (one attempt, a short deadline).
    let probe = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), client.stat_fs_once()).await
    });
    match probe {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(MountError::Unreachable(e.to_string())),
        Err(_) => {
            return Err(MountError::Unreachable(format!(
                "no answer from {} within 5 s",
                client.config().mds.addr
            )))
        }
    }
    let segment_bytes = client.config().segment_bytes;
    let fs = CodfsFs::new(
        client,
        rt.handle().clone(),
        spec.cache_bytes,
        segment_bytes,
        spec.attr_timeout,
    );
    let handle = fs.handle();
    let (metrics_addr, _metrics) = rt.block_on({
        let handle = handle.clone();
        let capacity = spec.cache_bytes;
        ecstack_rpc::metrics::serve_metrics(&spec.metrics_addr, move || {
            let text = metrics_text(&handle.cache_stats(), capacity);
            async move { text }
        })
    })?;
    let options = [
        fuser::MountOption::FSName("ecstack".into()),
        fuser::MountOption::Subtype("codfs".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::AllowOther,
        fuser::MountOption::RW,
    ];
    let mut session =
        fuser::Session::new(fs, &spec.mountpoint, &options).map_err(|e| MountError::Mount {
            path: spec.mountpoint.clone(),
            source: e,
        })?;
    handle.set_notifier(session.notifier());
    let mut unmounter = session.unmount_callable();
    let mountpoint = spec.mountpoint.clone();
    rt.spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!(mountpoint = %mountpoint.display(), "signal: unmounting");
        if let Err(e) = unmounter.unmount() {
            tracing::error!(error = %e, "unmount failed");
        }
    });
    eprintln!(
        "ecstack: mounted the cluster at {}; Ctrl-C stops (unmounts), as do fusermount3 -u, umount and SIGTERM",
        spec.mountpoint.display()
    );
    eprintln!("ecstack: mount metrics on http://{metrics_addr}/metrics");
    let served = session.run();
    // Dropping the session flushes what is still dirty (destroy) and unmounts if needed.
    drop(session);
    served.map_err(|e| MountError::Mount {
        path: spec.mountpoint.clone(),
        source: e,
    })
}
