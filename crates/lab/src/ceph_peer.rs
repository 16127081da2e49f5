//! Ceph as the peer of `ecstack bench cluster --ceph`: an erasure-coded pool with partial overwrites
//! (`allow_ec_overwrites`) on one machine, as `shared/peers/ceph.md` sets it up (Debian's Pacific
//! packages): one monitor, one manager, `osds` BlueStore OSDs on files in a scratch directory, a k+m
//! EC pool holding the data of one RBD image, measured with fio's rbd engine (4 KiB random writes at
//! a queue depth). Every daemon runs in the foreground as a child of this process
//! (`-f`), so it is stopped by its pid when [`Ceph`] is dropped, whatever happened.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::{LabError, Result};

/// The monitor's address (the recipe's; monmaptool treats port 6789 as the v1 protocol's).
const MON_ADDR: &str = "127.0.0.1:6789";
/// How long the OSDs get to come up, and the pool's placement groups to become active+clean.
const READY_SECS_MAX: u64 = 180;
/// Deadline of one `ceph` / `rbd` command (they wait for the monitor otherwise without end).
const CLI_TIMEOUT_SECS: u64 = 60;
/// Placement groups of the EC pool (the recipe's 32; 8 for the replicated metadata pool).
const EC_PGS: u32 = 32;
/// The packages to install when a binary is missing.
const INSTALL_HINT: &str = "apt-get install -y ceph-mon ceph-osd ceph-mgr ceph-common fio";

/// The shape of the Ceph cluster.
#[derive(Debug, Clone)]
pub struct CephConfig {
    /// Scratch directory (made; removed by [`Ceph`]'s drop).
    pub dir: PathBuf,
    pub osds: usize,
    pub k: u32,
    pub m: u32,
    /// Size of each OSD's BlueStore block file (sparse: only what is written takes disk).
    pub block_file_bytes: u64,
    /// Size of the RBD image (fio's target).
    pub image_bytes: u64,
}

/// What fio reports for one run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FioFigures {
    pub iops: f64,
    /// Writes completed.
    pub ios: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Which latency fio measured: "lat" (submission to completion) or "clat" (completion only).
    pub latency: &'static str,
}

/// Missing binaries, in one line with what to install; `Ok` when every one is on PATH and fio has
/// its rbd engine.
pub fn check_installed() -> Result<()> {
    let missing: Vec<&str> = [
        "ceph-mon",
        "ceph-osd",
        "ceph-mgr",
        "ceph",
        "rbd",
        "monmaptool",
        "fio",
    ]
    .into_iter()
    .filter(|b| !on_path(b))
    .collect();
    if !missing.is_empty() {
        return Err(LabError::Config {
            field: "ceph",
            msg: format!(
                "Ceph cannot run here: {} not found ({INSTALL_HINT})",
                missing.join(", ")
            ),
        });
    }
    let engines = Command::new("fio")
        .arg("--enghelp")
        .output()
        .map_err(|e| LabError::Run(format!("fio --enghelp: {e}")))?;
    if !String::from_utf8_lossy(&engines.stdout)
        .split_whitespace()
        .any(|w| w == "rbd")
    {
        return Err(LabError::Config {
            field: "ceph",
            msg: "Ceph cannot be measured here: this fio has no rbd engine (Debian's fio has it)"
                .into(),
        });
    }
    if std::net::TcpListener::bind(MON_ADDR).is_err() {
        return Err(LabError::Config {
            field: "ceph",
            msg: format!("Ceph cannot run here: its monitor's address {MON_ADDR} is taken (another Ceph running?)"),
        });
    }
    Ok(())
}

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

/// A running Ceph cluster: its daemons are stopped (SIGTERM, then SIGKILL) by pid and its
/// directory removed when dropped.
pub struct Ceph {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<(String, Child)>,
    image_bytes: u64,
}

impl Drop for Ceph {
    fn drop(&mut self) {
        for (_, child) in &self.daemons {
            // SAFETY: kill(2) touches no memory of ours; the pid is our unreaped child.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        for (_, child) in &mut self.daemons {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill(); // exited meanwhile: nothing to kill, wait() still reaps
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Ceph {
    /// Starts the monitor, the manager and the OSDs, makes the EC pool (overwrites allowed), the
    /// replicated pool for RBD's metadata and the image, and waits until every placement group is
    /// active+clean. `log` gets one line per step.
    pub fn start(cfg: &CephConfig, log: &dyn Fn(&str)) -> Result<Ceph> {
        check_installed()?;
        let dir = cfg.dir.clone();
        for d in ["run", "mon", "mgr", "log"] {
            std::fs::create_dir_all(dir.join(d)).map_err(crate::io_at(&dir.join(d)))?;
        }
        let conf = dir.join("ceph.conf");
        let fsid = uuid();
        std::fs::write(&conf, ceph_conf(&dir, &fsid, cfg.block_file_bytes))
            .map_err(crate::io_at(&conf))?;
        let mut ceph = Ceph {
            dir: dir.clone(),
            conf,
            daemons: Vec::new(),
            image_bytes: cfg.image_bytes,
        };
        log(&format!(
            "ceph: a monitor, a manager and {} BlueStore OSDs ({} MiB block files) in {}",
            cfg.osds,
            cfg.block_file_bytes >> 20,
            dir.display()
        ));
        let monmap = dir.join("monmap");
        ceph.run(
            "monmaptool",
            &[
                "--create",
                "--add",
                "a",
                MON_ADDR,
                "--fsid",
                &fsid,
                path_str(&monmap)?,
            ],
        )?;
        ceph.run(
            "ceph-mon",
            &["--mkfs", "-i", "a", "--monmap", path_str(&monmap)?],
        )?;
        ceph.spawn("mon.a", "ceph-mon", &["-f", "-i", "a"])?;
        ceph.wait_for("the monitor's answer", |c| {
            c.ceph(&["mon", "stat"]).map(|_| true)
        })?;
        ceph.spawn("mgr.x", "ceph-mgr", &["-f", "-i", "x"])?;
        for _ in 0..cfg.osds {
            // Each OSD its own uuid: without it some fail with "wrong fsid" (the recipe).
            let u = uuid();
            let id = ceph.ceph(&["osd", "create", &u])?.trim().to_owned();
            let osd_dir = dir.join(format!("osd{id}"));
            std::fs::create_dir_all(&osd_dir).map_err(crate::io_at(&osd_dir))?;
            ceph.run("ceph-osd", &["-i", &id, "--mkfs", "--osd-uuid", &u])?;
            ceph.ceph(&[
                "osd",
                "crush",
                "add",
                &format!("osd.{id}"),
                "1.0",
                "host=localhost",
                "root=default",
            ])?;
            ceph.spawn(&format!("osd.{id}"), "ceph-osd", &["-f", "-i", &id])?;
        }
        ceph.wait_for(&format!("{} OSDs up", cfg.osds), |c| {
            let s = c.ceph(&["osd", "stat", "-f", "json"])?;
            Ok(json_u64(&s, &["num_up_osds"]) == Some(cfg.osds as u64))
        })?;
        log(&format!(
            "ceph: EC pool {}+{} with overwrites, a {} MiB RBD image on it",
            cfg.k,
            cfg.m,
            cfg.image_bytes >> 20
        ));
        let profile = format!("k={}", cfg.k);
        let pgs = EC_PGS.to_string();
        for args in [
            &[
                "osd",
                "erasure-code-profile",
                "set",
                "bench",
                &profile,
                &format!("m={}", cfg.m),
                "crush-failure-domain=osd",
            ][..],
            &[
                "osd", "pool", "create", "ecpool", &pgs, &pgs, "erasure", "bench",
            ],
            &[
                "osd",
                "pool",
                "set",
                "ecpool",
                "allow_ec_overwrites",
                "true",
            ],
            &["osd", "pool", "create", "rbdmeta", "8", "8", "replicated"],
            &[
                "osd",
                "pool",
                "set",
                "rbdmeta",
                "size",
                "1",
                "--yes-i-really-mean-it",
            ],
        ] {
            ceph.ceph(args)?;
        }
        ceph.run("rbd", &["pool", "init", "rbdmeta"])?;
        ceph.run(
            "rbd",
            &[
                "create",
                "--size",
                &format!("{}M", (cfg.image_bytes >> 20).max(1)),
                "--data-pool",
                "ecpool",
                "rbdmeta/img",
            ],
        )?;
        ceph.wait_for("every placement group active+clean", |c| {
            Ok(all_active_clean(&c.ceph(&["-s", "-f", "json"])?))
        })?;
        Ok(ceph)
    }

    /// The daemons' pids (for CPU accounting and the report).
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.daemons
            .iter()
            .map(|(n, c)| (n.clone(), c.id()))
            .collect()
    }

    /// Writes the whole image once, sequentially (4 MiB writes), so that the timed random writes
    /// change bytes that exist, as ours change a file that was put: a write into an object that
    /// does not exist yet needs no read-modify-write.
    pub fn prefill(&self) -> Result<()> {
        self.fio(&[
            "--rw=write",
            "--bs=4M",
            "--iodepth=8",
            &format!("--size={}", self.image_bytes),
        ])
        .map(|_| ())
    }

    /// fio's randwrite of `block_bytes` at queue depth `depth` for `seconds`. `rbd_cache` off
    /// makes librbd send every write to the OSDs before fio sees it complete (acks as durable as
    /// ours); on is librbd's default, as the recipe runs it: once the client has flushed, a write
    /// may complete from librbd's write-back cache before any OSD has it.
    pub fn randwrite(
        &self,
        depth: usize,
        seconds: f64,
        block_bytes: u64,
        rbd_cache: bool,
    ) -> Result<FioFigures> {
        let out = self.fio_with(
            rbd_cache,
            &[
                "--rw=randwrite",
                &format!("--bs={block_bytes}"),
                &format!("--iodepth={depth}"),
                &format!("--size={}", self.image_bytes),
                &format!("--runtime={}", seconds.ceil().max(1.0) as u64),
                "--time_based",
                "--lat_percentiles=1",
            ],
        )?;
        parse_fio_json(&out)
    }

    fn fio(&self, args: &[&str]) -> Result<String> {
        self.fio_with(true, args)
    }

    /// fio on the image; `rbd_cache` false runs it with a copy of ceph.conf that turns librbd's
    /// cache off for this client only.
    fn fio_with(&self, rbd_cache: bool, args: &[&str]) -> Result<String> {
        let mut cmd = self.command("fio");
        if !rbd_cache {
            let conf = self.dir.join("ceph-rbd-cache-off.conf");
            let text = std::fs::read_to_string(&self.conf).map_err(crate::io_at(&self.conf))?;
            std::fs::write(&conf, format!("{text}\n[client]\nrbd cache = false\n"))
                .map_err(crate::io_at(&conf))?;
            cmd.env("CEPH_CONF", &conf);
        }
        let o = cmd
            .args([
                "--name=ceph",
                "--ioengine=rbd",
                "--clientname=admin",
                "--pool=rbdmeta",
                "--rbdname=img",
                "--output-format=json",
            ])
            .args(args)
            .output()
            .map_err(|e| LabError::Run(format!("fio: {e}")))?;
        checked("fio", args, o)
    }

    fn command(&self, bin: &str) -> Command {
        let mut c = Command::new(bin);
        c.env("CEPH_CONF", &self.conf).stdin(Stdio::null());
        c
    }

    /// Runs `bin args` to its end; its stdout, or one line with its stderr's last line.
    fn run(&self, bin: &str, args: &[&str]) -> Result<String> {
        let o = self
            .command(bin)
            .args(args)
            .output()
            .map_err(|e| LabError::Run(format!("{bin}: {e}")))?;
        checked(bin, args, o)
    }

    fn ceph(&self, args: &[&str]) -> Result<String> {
        let timeout = CLI_TIMEOUT_SECS.to_string();
        let mut all = vec!["--connect-timeout", &timeout];
        all.extend_from_slice(args);
        self.run("ceph", &all)
    }

    fn spawn(&mut self, name: &str, bin: &str, args: &[&str]) -> Result<()> {
        let log = self.dir.join("log").join(format!("{name}.out"));
        let out = std::fs::File::create(&log).map_err(crate::io_at(&log))?;
        let err = out.try_clone().map_err(crate::io_at(&log))?;
        let child = self
            .command(bin)
            .args(args)
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| LabError::Run(format!("cannot start {bin}: {e}")))?;
        self.daemons.push((name.to_owned(), child));
        Ok(())
    }

    /// Polls `ready` once a second until it holds; fails after [`READY_SECS_MAX`] or when a daemon
    /// has exited.
    fn wait_for(&mut self, what: &str, ready: impl Fn(&Ceph) -> Result<bool>) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(READY_SECS_MAX);
        loop {
            for (name, child) in &mut self.daemons {
                if let Ok(Some(st)) = child.try_wait() {
                    let out =
                        std::fs::read_to_string(self.dir.join("log").join(format!("{name}.out")))
                            .unwrap_or_default();
                    let last = out
                        .lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .unwrap_or("");
                    return Err(LabError::Run(format!(
                        "ceph: {name} exited ({st}) while waiting for {what}: {last}"
                    )));
                }
            }
            if ready(self).unwrap_or(false) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(LabError::Run(format!(
                    "ceph: no {what} after {READY_SECS_MAX} s"
                )));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

fn checked(bin: &str, args: &[&str], o: Output) -> Result<String> {
    if o.status.success() {
        return Ok(String::from_utf8_lossy(&o.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&o.stderr);
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Err(LabError::Run(format!(
        "{bin} {} failed ({}): {last}",
        args.join(" "),
        o.status
    )))
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .ok_or_else(|| LabError::Run(format!("not UTF-8: {}", p.display())))
}

/// A random UUID (version 4 layout) for the cluster's fsid and each OSD.
fn uuid() -> String {
    let mut b = [0u8; 16];
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ ((std::process::id() as u64) << 32);
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ecstack_base::Rng::new(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)).fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The recipe's ceph.conf (`shared/peers/ceph.md`), with the block file size given, and the
/// monitor's free-space check off: it refuses to start below 5 % free on the file system of its
/// data (`mon data avail crit`), which a shared build machine's disk often is. The OSDs do not set
/// their CRUSH device class at start: one of eight failed there with "unable to
/// update_crush_device_class: (1) Operation not permitted" (2026-12-06), and with that off another
/// with "unable to update_crush_location" in the same way, so the OSDs are placed in the CRUSH map
/// by `ceph osd crush add` before they start.
fn ceph_conf(dir: &Path, fsid: &str, block_file_bytes: u64) -> String {
    let d = dir.display();
    format!(
        "[global]
fsid = {fsid}
mon host = {MON_ADDR}
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = 1
osd crush chooseleaf type = 0
mon allow pool delete = true
mon allow pool size one = true
mon data avail crit = 0
mon data avail warn = 1
run dir = {d}/run
log file = {d}/log/$name.log
admin socket = {d}/run/$name.asok
osd objectstore = bluestore
osd class update on start = false
osd crush update on start = false
bluestore block create = true
bluestore block size = {block_file_bytes}
osd memory target = 939524096
bluestore cache autotune = false
bluestore cache size = 134217728
mon data = {d}/mon
osd data = {d}/osd$id
mgr data = {d}/mgr
"
    )
}

/// A number at `path` in a JSON document.
fn json_u64(s: &str, path: &[&str]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(s).ok()?;
    path.iter().try_fold(&v, |v, k| v.get(k))?.as_u64()
}

/// `ceph -s -f json`: there are placement groups and every one is active+clean.
fn all_active_clean(status: &str) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(status) else {
        return false;
    };
    let pgmap = &v["pgmap"];
    let total = pgmap["num_pgs"].as_u64().unwrap_or(0);
    let clean: u64 = pgmap["pgs_by_state"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|s| s["state_name"] == "active+clean")
                .filter_map(|s| s["count"].as_u64())
                .sum()
        })
        .unwrap_or(0);
    total > 0 && clean == total
}

/// IOPS and latency of fio's JSON output (`--output-format=json`), summed over its jobs' writes:
/// the percentiles of `lat_ns` when fio kept them (`--lat_percentiles=1`), else of `clat_ns`.
/// Text before the JSON (fio's warnings) is skipped.
pub fn parse_fio_json(out: &str) -> Result<FioFigures> {
    let bad = |what: &str| LabError::Run(format!("fio's JSON: {what}"));
    let start = out
        .find('{')
        .ok_or_else(|| bad("no JSON in fio's output"))?;
    let v: serde_json::Value =
        serde_json::from_str(&out[start..]).map_err(|e| bad(&e.to_string()))?;
    let jobs = v["jobs"].as_array().ok_or_else(|| bad("no jobs"))?;
    let job = jobs.first().ok_or_else(|| bad("no jobs"))?;
    if jobs.len() != 1 {
        return Err(bad(&format!("{} jobs, expected one", jobs.len())));
    }
    let w = &job["write"];
    let iops = w["iops"].as_f64().ok_or_else(|| bad("no write.iops"))?;
    let ios = w["total_ios"].as_u64().unwrap_or(0);
    let (latency, lat) = if w["lat_ns"]["percentile"].is_object() {
        ("lat", &w["lat_ns"])
    } else {
        ("clat", &w["clat_ns"])
    };
    let pct = |p: &str| {
        lat["percentile"][p]
            .as_f64()
            .map(|ns| ns / 1e6)
            .ok_or_else(|| bad(&format!("no write.{latency}_ns.percentile.{p}")))
    };
    Ok(FioFigures {
        iops,
        ios,
        mean_ms: lat["mean"]
            .as_f64()
            .ok_or_else(|| bad(&format!("no write.{latency}_ns.mean")))?
            / 1e6,
        p50_ms: pct("50.000000")?,
        p99_ms: pct("99.000000")?,
        latency,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cut from fio 3.33's `--output-format=json` of an rbd randwrite (one job), with a warning
    /// line before it as fio prints when the image is smaller than asked.
    const FIO_SAMPLE: &str = r#"fio: some warning before the JSON
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "ceph",
      "write" : {
        "io_bytes" : 45142016,
        "iops" : 551.034483,
        "total_ios" : 11021,
        "slat_ns" : { "min" : 1000, "max" : 9000, "mean" : 2100.5 },
        "clat_ns" : {
          "min" : 900000, "max" : 41000000, "mean" : 1790000.25,
          "percentile" : { "1.000000" : 1155072, "50.000000" : 1662976, "99.000000" : 3424256 }
        },
        "lat_ns" : {
          "min" : 910000, "max" : 41010000, "mean" : 1812000.0,
          "percentile" : { "50.000000" : 1679360, "99.000000" : 3457024 }
        }
      }
    }
  ]
}
"#;

    #[test]
    fn fio_json_gives_iops_and_percentiles() {
        let f = parse_fio_json(FIO_SAMPLE).unwrap();
        assert_eq!(f.latency, "lat");
        assert_eq!(f.ios, 11021);
        assert!((f.iops - 551.034483).abs() < 1e-9);
        assert!((f.mean_ms - 1.812).abs() < 1e-9);
        assert!((f.p50_ms - 1.67936).abs() < 1e-9);
        assert!((f.p99_ms - 3.457024).abs() < 1e-9);
        // Without --lat_percentiles fio keeps percentiles of clat only.
        let clat_only = FIO_SAMPLE.replace(
            r#""percentile" : { "50.000000" : 1679360, "99.000000" : 3457024 }"#,
            r#""n" : 0"#,
        );
        let f = parse_fio_json(&clat_only).unwrap();
        assert_eq!(f.latency, "clat");
        assert!((f.p50_ms - 1.662976).abs() < 1e-9);
        assert!((f.p99_ms - 3.424256).abs() < 1e-9);
        assert!((f.mean_ms - 1.79000025).abs() < 1e-9);
        assert!(parse_fio_json("fio: no output").is_err());
        let no_p99 = FIO_SAMPLE.replace("\"99.000000\" : 3457024", "\"99.900000\" : 1");
        let e = parse_fio_json(&no_p99).unwrap_err().to_string();
        assert!(e.contains("99.000000"), "{e}");
    }

    #[test]
    fn pgs_are_clean_only_when_all_are() {
        let s = |states: &str, n: u64| {
            format!(r#"{{"pgmap":{{"num_pgs":{n},"pgs_by_state":[{states}]}}}}"#)
        };
        assert!(all_active_clean(&s(
            r#"{"state_name":"active+clean","count":40}"#,
            40
        )));
        assert!(!all_active_clean(&s(
            r#"{"state_name":"active+clean","count":30},{"state_name":"creating+peering","count":10}"#,
            40
        )));
        assert!(!all_active_clean(&s("", 0)));
        assert!(!all_active_clean("not json"));
    }

    #[test]
    fn uuids_are_distinct_and_well_formed() {
        let (a, b) = (uuid(), uuid());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }
}
