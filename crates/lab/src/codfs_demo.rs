//! `ecstack demo`: the cluster's story in one run. A local cluster (MDS + 8 OSDs, RS 6+2) stores
//! generated files; two OSDs are killed with SIGKILL; everything is read back through degraded
//! reads; two replacement OSDs join, the dead ones are declared out and recovery rebuilds their
//! chunks onto the others until every segment is healthy again; every byte is checked after each
//! step against a regeneration from the seed (never against what the cluster returned earlier).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ecstack_base::Rng;
use ecstack_mds_proto::OsdState;
use ecstack_rpc::Security;
use serde::Serialize;

use crate::codfs_local::{LocalCluster, LocalSpec};
use ecstack_client::ClientError;
use ecstack_client::{summary, Client};

/// What the demo runs.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The `ecstack` binary (the daemons are its subcommands).
    pub exe: PathBuf,
    /// Where the cluster lives; `None`: a temporary directory, removed at the end.
    pub dir: Option<PathBuf>,
    pub osds: usize,
    pub k: u32,
    pub m: u32,
    pub segment_bytes: u64,
    /// Bytes of generated files in all.
    pub total_bytes: u64,
    /// Seed of the file sizes and contents and of which OSDs die.
    pub seed: u64,
    /// OSDs killed (at most m).
    pub kill: usize,
    pub insecure: bool,
}

impl DemoOptions {
    pub fn new(exe: PathBuf) -> DemoOptions {
        DemoOptions {
            exe,
            dir: None,
            osds: 8,
            k: 6,
            m: 2,
            segment_bytes: 3 << 20,
            total_bytes: 256 << 20,
            seed: 1,
            kill: 2,
            insecure: false,
        }
    }
}

/// What the demo measured.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    pub osds: usize,
    pub k: u32,
    pub m: u32,
    pub segment_bytes: u64,
    pub files: usize,
    pub bytes: u64,
    pub seed: u64,
    pub put_secs: f64,
    pub put_mib_per_sec: f64,
    pub get_secs: f64,
    pub get_mib_per_sec: f64,
    /// OSDs killed with SIGKILL.
    pub killed: Vec<String>,
    /// From the kills until the MDS marked them down.
    pub detect_secs: f64,
    pub degraded_get_secs: f64,
    pub degraded_get_mib_per_sec: f64,
    /// From `osd out` until the MDS reported every segment healthy.
    pub recovery_secs: f64,
    /// Chunks and bytes recovery rebuilt (the MDS's recovery progress).
    pub chunks_recovered: u64,
    pub bytes_recovered: u64,
    /// Bytes compared with the seed's regeneration: every file, after each of the three reads.
    pub bytes_verified: u64,
    pub dir: String,
}

/// Progress the demo reports while it runs (the CLI draws bars and lines; tests ignore it).
pub trait Observer {
    /// A step starts (one line).
    fn step(&mut self, line: &str);
    /// A long step over `total` bytes starts.
    fn start_bytes(&mut self, what: &str, total: u64);
    fn add_bytes(&mut self, n: u64);
    fn finish_bytes(&mut self);
}

/// An observer that says nothing.
pub struct Quiet;

impl Observer for Quiet {
    fn step(&mut self, _: &str) {}
    fn start_bytes(&mut self, _: &str, _: u64) {}
    fn add_bytes(&mut self, _: u64) {}
    fn finish_bytes(&mut self) {}
}

/// The demo's files: a seeded mix of small, odd-sized and multi-segment sizes adding up to
/// `total_bytes`; each file's bytes come from its own seed.
pub fn file_sizes(total_bytes: u64, segment_bytes: u64, seed: u64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    let shapes = [
        1,
        4096 + 1,
        segment_bytes - 1,
        segment_bytes + 17,
        3 * segment_bytes,
        7 * segment_bytes + 4093,
    ];
    let mut sizes = Vec::new();
    let mut left = total_bytes;
    let mut i = 0;
    while left > 0 {
        let shape = shapes[i % shapes.len()];
        let jitter = rng.below(shape / 4 + 1);
        let size = (shape + jitter).min(left);
        sizes.push(size);
        left -= size;
        i += 1;
    }
    sizes
}

/// The bytes of file `index` (a pure function of the seed: the model every read is checked against).
pub fn file_bytes(seed: u64, index: usize, size: u64) -> Vec<u8> {
    let mut buf = vec![0u8; size as usize];
    Rng::new(seed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)).fill(&mut buf);
    buf
}

fn file_path(index: usize) -> String {
    format!("/demo/file-{index:03}")
}

fn mib_per_sec(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / (1 << 20) as f64 / secs.max(1e-9)
}

/// Reads every file back and compares it with its regeneration; returns the seconds spent reading.
async fn read_all(
    client: &Client,
    sizes: &[u64],
    seed: u64,
    what: &str,
    obs: &mut dyn Observer,
) -> Result<f64, ClientError> {
    obs.start_bytes(what, sizes.iter().sum());
    let mut secs = 0.0;
    for (i, &size) in sizes.iter().enumerate() {
        let path = file_path(i);
        let t = Instant::now();
        let got = client.read(&path, 0, size).await?;
        secs += t.elapsed().as_secs_f64();
        let want = file_bytes(seed, i, size);
        if got != want {
            let at = got
                .iter()
                .zip(&want)
                .position(|(a, b)| a != b)
                .unwrap_or(got.len().min(want.len()));
            return Err(ClientError::Local(format!(
                "{what}: {path} differs from what was stored at byte {at} (read {} bytes, stored {size})",
                got.len()
            )));
        }
        obs.add_bytes(size);
    }
    obs.finish_bytes();
    Ok(secs)
}

/// Runs the demo; the cluster is stopped whatever happens.
pub async fn run(opts: &DemoOptions, obs: &mut dyn Observer) -> Result<DemoReport, ClientError> {
    if opts.kill > opts.m as usize {
        return Err(ClientError::Local(format!(
            "--kill {} is more than m = {} failures: the data would be lost",
            opts.kill, opts.m
        )));
    }
    if opts.osds < (opts.k + opts.m) as usize {
        return Err(ClientError::Local(format!(
            "--osds {} is fewer than k + m = {}: every chunk of a segment needs its own OSD",
            opts.osds,
            opts.k + opts.m
        )));
    }
    let temp;
    let dir = match &opts.dir {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("ecstack-demo-")
                .tempdir()
                .map_err(|e| ClientError::io("cannot make a temporary directory", e))?;
            temp.path().to_owned()
        }
    };
    let mut spec = LocalSpec::new(opts.exe.clone(), dir.clone(), opts.osds);
    spec.k = opts.k;
    spec.m = opts.m;
    spec.segment_bytes = opts.segment_bytes;
    spec.heartbeat_ms = 250;
    spec.down_after_ms = 1_500;
    spec.insecure = opts.insecure;
    obs.step(&format!(
        "starting an MDS and {} OSDs (RS {}+{}, {} MiB segments) in {}",
        opts.osds,
        opts.k,
        opts.m,
        opts.segment_bytes >> 20,
        dir.display()
    ));
    let mut cluster = LocalCluster::start(spec)?;
    let res = scenario(&mut cluster, opts, obs).await;
    obs.step("stopping the cluster");
    cluster.stop();
    let mut report = res?;
    report.dir = dir.display().to_string();
    Ok(report)
}

async fn scenario(
    cluster: &mut LocalCluster,
    opts: &DemoOptions,
    obs: &mut dyn Observer,
) -> Result<DemoReport, ClientError> {
    let security = if opts.insecure {
        Security::Insecure
    } else {
        // The demo also declares OSDs out: the admin certificate (a client's may not).
        Security::load(&cluster.config().certs_dir(), "admin")?
    };
    let client = Client::connect(cluster.config(), security)?;
    let ready = client
        .wait_for_osds(opts.osds, Duration::from_secs(30))
        .await;
    cluster.check_alive()?;
    ready?;

    let sizes = file_sizes(opts.total_bytes, opts.segment_bytes, opts.seed);
    let bytes: u64 = sizes.iter().sum();
    obs.step(&format!(
        "storing {} files, {} MiB in all",
        sizes.len(),
        bytes >> 20
    ));
    obs.start_bytes("put", bytes);
    let mut put_secs = 0.0;
    for (i, &size) in sizes.iter().enumerate() {
        let data = file_bytes(opts.seed, i, size);
        let t = Instant::now();
        client.put(&file_path(i), &data[..]).await?;
        put_secs += t.elapsed().as_secs_f64();
        obs.add_bytes(size);
    }
    obs.finish_bytes();
    let mut verified = 0;

    obs.step("reading everything back");
    let get_secs = read_all(&client, &sizes, opts.seed, "get", obs).await?;
    verified += bytes;

    let mut rng = Rng::new(opts.seed ^ 0x6b69_6c6c);
    let mut victims: Vec<usize> = (0..opts.osds).collect();
    rng.shuffle(&mut victims);
    victims.truncate(opts.kill);
    victims.sort_unstable();
    let killed: Vec<String> = victims.iter().map(|&i| LocalCluster::osd_name(i)).collect();
    obs.step(&format!("SIGKILL {}", killed.join(" and ")));
    let t = Instant::now();
    for &i in &victims {
        cluster.kill_osd(i);
    }
    client
        .wait_status(
            "waiting for the MDS to mark the killed OSDs down",
            Duration::from_secs(60),
            |s| {
                killed.iter().all(|name| {
                    s.osds
                        .iter()
                        .any(|o| &o.name == name && o.state != OsdState::Up)
                })
            },
        )
        .await?;
    let detect_secs = t.elapsed().as_secs_f64();

    obs.step("reading everything back through degraded reads");
    let degraded_get_secs = read_all(&client, &sizes, opts.seed, "degraded get", obs).await?;
    verified += bytes;

    obs.step(&format!(
        "adding {} replacement OSDs, declaring {} out",
        victims.len(),
        killed.join(" and ")
    ));
    let mut added = Vec::new();
    for _ in &victims {
        added.push(cluster.add_osd()?);
    }
    let up_wanted = opts.osds;
    client
        .wait_for_osds(up_wanted, Duration::from_secs(30))
        .await?;
    let t = Instant::now();
    for name in &killed {
        client.osd_out(name).await?;
    }
    obs.step("waiting for recovery to restore full redundancy");
    let status = client
        .wait_status("recovery", Duration::from_secs(900), |s| {
            s.segments_degraded == 0
                && s.segments_recovering == 0
                && s.segments_lost == 0
                && s.segments_healthy > 0
        })
        .await?;
    let recovery_secs = t.elapsed().as_secs_f64();
    obs.step(&format!("recovered: {}", summary(&status)));

    obs.step("reading everything back after recovery");
    read_all(&client, &sizes, opts.seed, "get after recovery", obs).await?;
    verified += bytes;
    cluster.check_alive()?;

    Ok(DemoReport {
        osds: opts.osds,
        k: opts.k,
        m: opts.m,
        segment_bytes: opts.segment_bytes,
        files: sizes.len(),
        bytes,
        seed: opts.seed,
        put_secs,
        put_mib_per_sec: mib_per_sec(bytes, put_secs),
        get_secs,
        get_mib_per_sec: mib_per_sec(bytes, get_secs),
        killed,
        detect_secs,
        degraded_get_secs,
        degraded_get_mib_per_sec: mib_per_sec(bytes, degraded_get_secs),
        recovery_secs,
        chunks_recovered: status.recovery.chunks_done,
        bytes_recovered: status.recovery.bytes_done,
        bytes_verified: verified,
        dir: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_add_up_and_mix_shapes() {
        let seg = 3 << 20;
        let sizes = file_sizes(256 << 20, seg, 1);
        assert_eq!(sizes.iter().sum::<u64>(), 256 << 20);
        assert!(sizes.iter().any(|&s| s < 8192), "a small file");
        assert!(sizes.iter().any(|&s| s > 3 * seg), "a multi-segment file");
        assert!(
            sizes.iter().any(|&s| s % seg != 0 && s > seg),
            "a short last segment"
        );
        assert_eq!(file_sizes(256 << 20, seg, 1), sizes, "seeded");
        assert_ne!(file_bytes(1, 0, 64), file_bytes(1, 1, 64));
        assert_eq!(file_bytes(1, 3, 64), file_bytes(1, 3, 64));
    }
}
