//! A GlusterFS disperse volume on this machine, set up and torn down by a command (the recipe of
//! `../shared/peers/glusterfs.md`): the management daemon (started here unless one runs), 8
//! brick directories, `volume create … disperse 8 redundancy 2 … force` (bricks on one host need
//! `force`), `volume start`, and a FUSE mount. Root only (glusterd and `mount`). Dropping the
//! [`GlusterVolume`] unmounts, stops and deletes the volume, and stops the daemon it started.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{LabError, Result};

/// How long glusterd gets to answer, and the volume's mount to appear.
const READY_SECS_MAX: u64 = 30;

/// A started, mounted disperse volume.
pub struct GlusterVolume {
    pub name: String,
    pub mountpoint: PathBuf,
    /// The glusterd this started (None: one was running already).
    glusterd: Option<Child>,
    mounted: bool,
    created: bool,
}

fn gluster(args: &[&str]) -> Result<String> {
    let o = Command::new("gluster")
        .arg("--mode=script")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Run(format!("gluster {}: {e}", args.join(" "))))?;
    if !o.status.success() {
        return Err(LabError::Run(format!(
            "gluster {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stdout).trim(),
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn glusterd_running() -> bool {
    Command::new("pgrep")
        .args(["-x", "glusterd"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl GlusterVolume {
    /// Volume `name`, disperse `k`+`m` over `k + m` bricks under `dir/bricks`, mounted at
    /// `dir/mnt`.
    pub fn create(dir: &Path, name: &str, k: u32, m: u32) -> Result<GlusterVolume> {
        for tool in ["gluster", "glusterd"] {
            if crate::rainfs::on_path(tool).is_none() {
                return Err(LabError::Run(format!(
                    "{tool} is not installed (apt-get install glusterfs-server)"
                )));
            }
        }
        let mut v = GlusterVolume {
            name: name.to_owned(),
            mountpoint: dir.join("mnt"),
            glusterd: None,
            mounted: false,
            created: false,
        };
        if !glusterd_running() {
            std::fs::create_dir_all("/var/log/glusterfs").ok();
            std::fs::create_dir_all("/var/lib/glusterd").ok();
            let child = Command::new("glusterd")
                .arg("-N")
                .arg(format!("--log-file={}", dir.join("glusterd.log").display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| LabError::Run(format!("glusterd: {e}")))?;
            v.glusterd = Some(child);
        }
        let start = Instant::now();
        while gluster(&["volume", "list"]).is_err() {
            if start.elapsed() > Duration::from_secs(READY_SECS_MAX) {
                return Err(LabError::Run(format!(
                    "glusterd did not answer within {READY_SECS_MAX} s"
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let host = hostname()?;
        let mut args = vec![
            "volume".to_owned(),
            "create".to_owned(),
            name.to_owned(),
            "disperse".to_owned(),
            (k + m).to_string(),
            "redundancy".to_owned(),
            m.to_string(),
        ];
        for i in 0..k + m {
            let brick = dir.join("bricks").join(format!("b{i}"));
            std::fs::create_dir_all(&brick)
                .map_err(|e| LabError::Run(format!("mkdir {}: {e}", brick.display())))?;
            args.push(format!("{host}:{}", brick.display()));
        }
        args.push("force".to_owned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        gluster(&args)?;
        v.created = true;
        gluster(&["volume", "start", name])?;
        std::fs::create_dir_all(&v.mountpoint)
            .map_err(|e| LabError::Run(format!("mkdir {}: {e}", v.mountpoint.display())))?;
        let ok = Command::new("mount")
            .args(["-t", "glusterfs", &format!("{host}:/{name}")])
            .arg(&v.mountpoint)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(LabError::Run(format!(
                "mount -t glusterfs {host}:/{name} {} failed",
                v.mountpoint.display()
            )));
        }
        v.mounted = true;
        Ok(v)
    }
}

impl Drop for GlusterVolume {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.mountpoint).status();
        }
        if self.created {
            let _ = gluster(&["volume", "stop", &self.name]);
            let _ = gluster(&["volume", "delete", &self.name]);
        }
        if let Some(mut c) = self.glusterd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn hostname() -> Result<String> {
    let o = Command::new("hostname")
        .output()
        .map_err(|e| LabError::Run(format!("hostname: {e}")))?;
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned())
}
