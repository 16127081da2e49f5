//! A cluster of local processes: one `ecstack mds` and N `ecstack osd` children of this process on
//! 127.0.0.1, with their data, logs and certificates under one directory. `ecstack cluster up`,
//! `ecstack demo` and the multi-process tests use it.
//!
//! One `LocalCluster` per directory: it holds `<dir>/cluster.lock` while it lives, and a second
//! one is refused naming the first's process.
//!
//! Lifecycle of a daemon: spawned → (killed with SIGKILL | stopped with SIGTERM, then SIGKILL after a
//! grace period) → reaped. Every child is killed and reaped when its handle is dropped, so a panicking
//! test or an early error leaves no orphan behind.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ecstack_device::{lock_file_with_pid, DeviceLock, LockError};
use ecstack_rpc::{init_cluster, issue_certificate, ClusterConfig, InitOptions};

use ecstack_client::ClientError;

/// How long a stopped daemon gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE_MS_MAX: u64 = 5_000;

/// What to start.
#[derive(Debug, Clone)]
pub struct LocalSpec {
    /// The `ecstack` binary to run (`std::env::current_exe()` in the CLI, `CARGO_BIN_EXE_ecstack` in tests).
    pub exe: PathBuf,
    /// Everything lives here: `cluster.toml`, `certs/`, `mds.db`, `osd-N/`, `logs/`.
    pub dir: PathBuf,
    pub osds: usize,
    /// Code parameters for a new cluster (an existing `cluster.toml` keeps its own).
    pub family: String,
    pub k: u32,
    pub m: u32,
    pub segment_bytes: u64,
    /// Failure detection for a new cluster, in milliseconds.
    pub heartbeat_ms: u64,
    pub down_after_ms: u64,
    pub out_after_ms: u64,
    /// Run without TLS (loopback experiments only; every daemon warns loudly).
    pub insecure: bool,
    /// Worker threads of each OSD's runtime (`ecstack osd --threads`); `None`: one per core.
    pub osd_threads: Option<u16>,
    /// `[update] scheme` of a new cluster: the scheme of a file whose put names none.
    pub update_scheme: ecstack_rpc::UpdateScheme,
    /// `[update.reserve]` of a new cluster (`None`: the defaults).
    pub reserve: Option<ecstack_rpc::config::ReserveConfig>,
    /// `[update] gc_period_ms` of a new cluster (`None`: the default, 10 s).
    pub gc_period_ms: Option<u64>,
    /// Each OSD's chunk store on a block device (`ecstack osd --store-device`) instead of a
    /// directory: a device spec in which `{osd}` stands for the OSD's index, e.g.
    /// `throttled:profile=eplog-hdd:file:/tmp/x/osd-{osd}.img?size=2G`. `None`: `<dir>/osd-N/`.
    pub store_device: Option<String>,
    /// One device spec per OSD (index i for OSD i), instead of `store_device`: stores of
    /// different speeds (`throttled:bw=...`), as RobuSTore's heterogeneous testbed has.
    pub store_devices: Vec<String>,
    /// `[mds] store` of a new cluster (a PostgreSQL URL, say); `None`: `<dir>/mds.db`.
    pub mds_store: Option<String>,
    /// Standby MDSs beside the active one (`[mds] addrs`, each on a free loopback port; needs a
    /// PostgreSQL `mds_store`).
    pub mds_standbys: usize,
    /// `[mds] lease_ms` of a new cluster (`None`: the default).
    pub mds_lease_ms: Option<u64>,
    /// Any other change to a new cluster's `cluster.toml` (tests: a short `[mds]
    /// orphan_grace_ms`, `[osd] inventory_period_ms`), made before it is checked and written.
    pub configure: Option<fn(&mut ClusterConfig)>,
    /// How long a daemon may take to stop after SIGTERM before it is SIGKILLed (default 5 s;
    /// stores on a write-back page-cache model write their dirty pages back as they stop).
    pub stop_grace: Duration,
}

impl LocalSpec {
    pub fn new(exe: PathBuf, dir: PathBuf, osds: usize) -> LocalSpec {
        LocalSpec {
            exe,
            dir,
            osds,
            family: "rs-vand".into(),
            k: 6,
            m: 2,
            segment_bytes: ecstack_rpc::config::DEFAULT_SEGMENT_BYTES,
            heartbeat_ms: 500,
            down_after_ms: 2_000,
            out_after_ms: 600_000,
            insecure: false,
            osd_threads: None,
            update_scheme: ecstack_rpc::UpdateScheme::Fo,
            reserve: None,
            gc_period_ms: None,
            store_device: None,
            store_devices: Vec::new(),
            mds_store: None,
            mds_standbys: 0,
            mds_lease_ms: None,
            configure: None,
            stop_grace: Duration::from_millis(STOP_GRACE_MS_MAX),
        }
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("cluster.toml")
    }
}

/// One running daemon.
struct Daemon {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn spawn(exe: &Path, args: &[String], name: &str, logs: &Path) -> Result<Daemon, ClientError> {
        let log = logs.join(format!("{name}.log"));
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| ClientError::Local(format!("cannot open log {}: {e}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(|e| ClientError::Local(format!("cannot open log {}: {e}", log.display())))?;
        let child = Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| ClientError::Local(format!("cannot start {}: {e}", exe.display())))?;
        Ok(Daemon {
            name: name.to_owned(),
            child,
            log,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL and reap.
    fn kill(&mut self) {
        let _ = self.child.kill(); // already exited: nothing to kill, and wait() still reaps it
        let _ = self.child.wait();
    }

    /// SIGTERM, wait for the exit (at most `grace`), then SIGKILL.
    fn stop(&mut self, grace: Duration) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        signal(self.pid(), libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }

    /// `Some(status line)` when the process has exited.
    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) takes a pid and a signal number and touches no memory of ours; the pid is one
    // of our unreaped children, so it cannot name a recycled process.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Waits until every thread of process `pid` is stopped (state `T` in `/proc/PID/task/*/stat`).
/// kill(2) with SIGSTOP returns before the stop: one thread takes the signal when it next runs and
/// only then stops the others, which until then go on serving (a loaded machine may take tens of
/// milliseconds to get there).
fn wait_stopped(pid: u32, within: Duration) -> Result<(), String> {
    let start = Instant::now();
    let tasks = PathBuf::from(format!("/proc/{pid}/task"));
    loop {
        let states: Vec<u8> = std::fs::read_dir(&tasks)
            .map_err(|e| format!("process {pid}: {}: {e}", tasks.display()))?
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
            // `PID (COMM) STATE ...`: COMM may hold spaces and parentheses; STATE follows the last ')'.
            .filter_map(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, r)| r.trim_start().bytes().next())
            })
            .collect();
        if !states.is_empty() && states.iter().all(|&c| c == b'T' || c == b't') {
            return Ok(());
        }
        if start.elapsed() >= within {
            return Err(format!(
                "process {pid}: not every thread stopped within {within:?} (states {})",
                String::from_utf8_lossy(&states)
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The running cluster. Dropping it kills every daemon.
pub struct LocalCluster {
    /// `<dir>/cluster.lock`, held while the cluster runs: one `cluster up` per directory.
    _lock: DeviceLock,
    spec: LocalSpec,
    config: ClusterConfig,
    /// One per `[mds] addrs` entry (one MDS: one).
    mds: Vec<Option<Daemon>>,
    osds: Vec<Option<Daemon>>,
}

impl LocalCluster {
    /// Creates the cluster in `spec.dir` unless a `cluster.toml` is there, then starts the MDS and
    /// the OSDs (not waiting for them: see [`crate::Client::wait_for_osds`]).
    pub fn start(spec: LocalSpec) -> Result<LocalCluster, ClientError> {
        std::fs::create_dir_all(spec.dir.join("logs")).map_err(|e| {
            ClientError::Local(format!("cannot create {}: {e}", spec.dir.display()))
        })?;
        let lock = lock_dir(&spec.dir)?;
        if !spec.config_path().exists() {
            init(&spec)?;
        }
        let config = ClusterConfig::load(&spec.config_path())?;
        let mut cluster = LocalCluster {
            _lock: lock,
            osds: (0..spec.osds).map(|_| None).collect(),
            mds: config.mds_addrs().iter().map(|_| None).collect(),
            spec,
            config,
        };
        cluster.start_mds()?;
        for i in 0..cluster.spec.osds {
            cluster.start_osd(i)?;
        }
        Ok(cluster)
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    pub fn config_path(&self) -> PathBuf {
        self.spec.config_path()
    }

    pub fn dir(&self) -> &Path {
        &self.spec.dir
    }

    pub fn insecure(&self) -> bool {
        self.spec.insecure
    }

    pub fn osd_count(&self) -> usize {
        self.osds.len()
    }

    pub fn osd_name(i: usize) -> String {
        format!("osd-{i}")
    }

    pub fn osd_store(&self, i: usize) -> PathBuf {
        self.spec.dir.join(Self::osd_name(i))
    }

    /// The device spec of OSD `i`'s store when the OSDs keep their chunks on devices
    /// ([`LocalSpec::store_device`]).
    pub fn osd_store_device(&self, i: usize) -> Option<String> {
        if let Some(d) = self.spec.store_devices.get(i) {
            return Some(d.clone());
        }
        self.spec
            .store_device
            .as_ref()
            .map(|t| t.replace("{osd}", &i.to_string()))
    }

    pub fn log_dir(&self) -> PathBuf {
        self.spec.dir.join("logs")
    }

    fn common_args(&self) -> Vec<String> {
        let mut args = vec![
            "--config".to_owned(),
            self.spec.config_path().display().to_string(),
        ];
        if self.spec.insecure {
            args.push("--insecure".to_owned());
        }
        args
    }

    /// Starts every MDS that is not running (again, after a kill: same address, same database).
    pub fn start_mds(&mut self) -> Result<(), ClientError> {
        for i in 0..self.mds.len() {
            if self.mds[i].is_none() {
                self.start_mds_at(i)?;
            }
        }
        Ok(())
    }

    /// The MDSs `[mds] addrs` lists (1 without standbys).
    pub fn mds_count(&self) -> usize {
        self.mds.len()
    }

    /// Starts MDS `i` of `[mds] addrs` (`mds` for the first, `mds-<i>` for the others' logs).
    pub fn start_mds_at(&mut self, i: usize) -> Result<(), ClientError> {
        let mut args = vec!["mds".to_owned()];
        args.extend(self.common_args());
        let name = if i == 0 {
            "mds".to_owned()
        } else {
            format!("mds-{i}")
        };
        if !self.config.mds.addrs.is_empty() {
            args.extend(["--addr".to_owned(), self.config.mds_addrs()[i].clone()]);
        }
        self.mds[i] = Some(Daemon::spawn(
            &self.spec.exe,
            &args,
            &name,
            &self.log_dir(),
        )?);
        Ok(())
    }

    /// SIGKILL MDS `i` (no-op when it is not running).
    pub fn kill_mds_at(&mut self, i: usize) {
        if let Some(mut d) = self.mds[i].take() {
            d.kill();
        }
    }

    /// Sends `sig` (SIGSTOP, SIGCONT) to MDS `i` if it runs. SIGSTOP returns once every thread of
    /// the MDS has stopped (`wait_stopped`): the kernel stops a process's threads one by one as
    /// they next run, so a call sent right after kill(2) could otherwise still be served.
    pub fn signal_mds(&self, i: usize, sig: i32) {
        if let Some(d) = &self.mds[i] {
            signal(d.pid(), sig);
            if sig == libc::SIGSTOP {
                if let Err(e) = wait_stopped(d.pid(), Duration::from_secs(10)) {
                    eprintln!("MDS {i}: {e}");
                }
            }
        }
    }

    /// Starts OSD `i` (again, after a kill: same store and name, a new port).
    pub fn start_osd(&mut self, i: usize) -> Result<(), ClientError> {
        let name = Self::osd_name(i);
        let store = self.osd_store(i);
        if !self.spec.insecure && !self.config.certs_dir().join(format!("{name}.pem")).exists() {
            issue_certificate(&self.config, &name, false)?;
        }
        let mut args = vec!["osd".to_owned()];
        args.extend(self.common_args());
        match self.osd_store_device(i) {
            Some(spec) => args.extend(["--store-device".to_owned(), spec]),
            None => args.extend(["--store".to_owned(), store.display().to_string()]),
        }
        args.extend([
            "--name".to_owned(),
            name.clone(),
            "--addr".to_owned(),
            "127.0.0.1:0".to_owned(),
        ]);
        if let Some(n) = self.spec.osd_threads {
            args.extend(["--threads".to_owned(), n.to_string()]);
        }
        self.osds[i] = Some(Daemon::spawn(
            &self.spec.exe,
            &args,
            &name,
            &self.log_dir(),
        )?);
        Ok(())
    }

    /// Starts one more OSD (a replacement for failed ones); returns its index.
    pub fn add_osd(&mut self) -> Result<usize, ClientError> {
        self.osds.push(None);
        let i = self.osds.len() - 1;
        self.start_osd(i)?;
        Ok(i)
    }

    /// SIGKILL every MDS.
    pub fn kill_mds(&mut self) {
        for i in 0..self.mds.len() {
            self.kill_mds_at(i);
        }
    }

    /// SIGKILL OSD `i` (no-op when it is not running).
    pub fn kill_osd(&mut self, i: usize) {
        if let Some(mut d) = self.osds[i].take() {
            d.kill();
        }
    }

    /// SIGTERM OSD `i` and wait for its exit (SIGKILL after the grace period); no-op when it is
    /// not running. Its store can then be opened by this process.
    pub fn stop_osd(&mut self, i: usize) {
        if let Some(mut d) = self.osds[i].take() {
            d.stop(self.spec.stop_grace);
        }
    }

    pub fn osd_running(&self, i: usize) -> bool {
        self.osds[i].is_some()
    }

    /// Names and exit statuses of daemons that should run but have exited (a crash on start, a
    /// port taken): `Err` with their log's last lines.
    pub fn check_alive(&mut self) -> Result<(), ClientError> {
        let mut dead = Vec::new();
        let all = self
            .mds
            .iter_mut()
            .flatten()
            .chain(self.osds.iter_mut().flatten());
        for d in all {
            if let Some(status) = d.exited() {
                dead.push(format!(
                    "{} exited ({status}): {}",
                    d.name,
                    last_line(&d.log)
                ));
            }
        }
        if dead.is_empty() {
            Ok(())
        } else {
            Err(ClientError::Local(dead.join("; ")))
        }
    }

    /// Process ids, by name, of the running daemons.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.mds
            .iter()
            .flatten()
            .chain(self.osds.iter().flatten())
            .map(|d| (d.name.clone(), d.pid()))
            .collect()
    }

    /// SIGTERM every daemon (OSDs first), SIGKILL whichever outlives the grace period.
    pub fn stop(&mut self) {
        for d in self.osds.iter_mut().flatten() {
            signal(d.pid(), libc::SIGTERM);
        }
        let grace = self.spec.stop_grace;
        for slot in &mut self.osds {
            if let Some(mut d) = slot.take() {
                d.stop(grace);
            }
        }
        for slot in &mut self.mds {
            if let Some(mut d) = slot.take() {
                d.stop(grace);
            }
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Locks `<dir>/cluster.lock` for this process (its pid written in it for people), or refuses in
/// one line naming the process that runs the cluster already.
fn lock_dir(dir: &Path) -> Result<DeviceLock, ClientError> {
    let path = dir.join("cluster.lock");
    let local = |what: &str, e: &dyn std::fmt::Display| {
        ClientError::Local(format!("cannot {what} {}: {e}", path.display()))
    };
    let lock = match lock_file_with_pid(&path) {
        Ok(l) => l,
        Err(LockError::Busy { holder }) => {
            let by = match holder {
                Some(h) => format!("pid {} ({})", h.pid, h.command(120)),
                None => "another process".to_owned(),
            };
            return Err(ClientError::Local(format!(
                "cluster directory {} is already running under {by}; use it with --config {} or stop it first",
                dir.display(),
                dir.join("cluster.toml").display()
            )));
        }
        Err(LockError::Io(e)) => return Err(local("lock", &e)),
    };
    Ok(lock)
}

/// The last non-empty line of a daemon's log (what it said before dying).
pub fn last_line(log: &Path) -> String {
    std::fs::read_to_string(log)
        .ok()
        .and_then(|t| {
            t.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| format!("(no output; log {})", log.display()))
}

/// A free loopback port for an MDS, which keeps it across restarts. It is taken below the kernel's
/// ephemeral range (`ip_local_port_range`) when that leaves room: every OSD and client binds port 0
/// and gets its port from that range, so none of them (in this cluster or another on the machine)
/// can take the MDS's port between this check and the MDS's bind, or while a killed MDS is down. A
/// fault run of six processes did lose that race once with a port from the ephemeral range. Where
/// the range starts too low, a port the kernel hands out (bound and released) is used.
fn free_port() -> Result<u16, ClientError> {
    use std::hash::{BuildHasher, Hasher};
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(0);
    if ephemeral_low >= 16384 {
        let (lo, hi) = (ephemeral_low / 2, ephemeral_low);
        for _ in 0..256 {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            let port = lo + (h.finish() % u64::from(hi - lo)) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| ClientError::Local(format!("cannot bind a loopback port: {e}")))?;
    Ok(l.local_addr()
        .map_err(|e| ClientError::Local(format!("cannot read a bound port: {e}")))?
        .port())
}

/// A new cluster in `spec.dir` (`ecstack cluster init`, certificates for the MDS, the OSDs and
/// `client`), its MDS on a free loopback port and its failure-detection timing from the spec.
fn init(spec: &LocalSpec) -> Result<(), ClientError> {
    let opts = InitOptions {
        osds: spec.osds as u32,
        clients: 1,
        code: spec.family.clone(),
        k: spec.k,
        m: spec.m,
        segment_bytes: spec.segment_bytes,
        failure_domain: None,
        mds_addr: format!("127.0.0.1:{}", free_port()?),
        update_scheme: spec.update_scheme,
        force: false,
    };
    let mut config = init_cluster(&spec.dir, &opts)?;
    config.mds.heartbeat_ms = spec.heartbeat_ms;
    config.mds.down_after_ms = spec.down_after_ms;
    config.mds.out_after_ms = spec.out_after_ms;
    if let Some(r) = &spec.reserve {
        config.update.reserve = r.clone();
    }
    config.update.gc_period_ms = spec.gc_period_ms;
    if let Some(store) = &spec.mds_store {
        config.mds.store = PathBuf::from(store);
    }
    if let Some(ms) = spec.mds_lease_ms {
        config.mds.lease_ms = ms;
    }
    if spec.mds_standbys > 0 {
        let mut addrs = vec![config.mds.addr.clone()];
        while addrs.len() <= spec.mds_standbys {
            let a = format!("127.0.0.1:{}", free_port()?);
            if !addrs.contains(&a) {
                addrs.push(a);
            }
        }
        config.mds.addrs = addrs;
    }
    if let Some(f) = spec.configure {
        f(&mut config);
    }
    let path = spec.config_path();
    config
        .validate()
        .map_err(|e| ClientError::Local(format!("{}: {e}", path.display())))?;
    let text = toml::to_string_pretty(&config)
        .map_err(|e| ClientError::Local(format!("cannot write {}: {e}", path.display())))?;
    let text = format!("# ecstack cluster made by `ecstack cluster up` (docs/cluster.md).\n{text}");
    std::fs::write(&path, text)
        .map_err(|e| ClientError::Local(format!("cannot write {}: {e}", path.display())))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_stopped_returns_once_every_thread_is_stopped() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let e = wait_stopped(pid, Duration::from_millis(50)).unwrap_err();
        assert!(e.contains("not every thread stopped"), "{e}");
        signal(pid, libc::SIGSTOP);
        wait_stopped(pid, Duration::from_secs(10)).unwrap();
        signal(pid, libc::SIGCONT);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(wait_stopped(pid, Duration::from_millis(10)).is_err());
    }
}
