//! `ecstack cluster mount` processes for the tests that use a mount (`mount.rs`,
//! `mount_write_behind.rs`, `mds_failover.rs`),
//! and running a tool that must succeed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{exe, Rig};

/// Whether `/dev/fuse` is there (without it a mount test fails under CI=true, else skips).
pub fn fuse_present() -> bool {
    ecstack_testkit::require("/dev/fuse", Path::new("/dev/fuse").exists(), "fuse3")
}

/// A sample's value in Prometheus text (`name` with no labels).
pub fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// Runs `cmd`, which must succeed; its output.
pub fn run(cmd: &mut Command) -> std::process::Output {
    let o = cmd.output().expect("run a tool");
    assert!(
        o.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// `tar -cf tarball -C tree .`: the tree to extract into a mount.
pub fn tar_of(tree: &Path, tarball: &Path) {
    run(Command::new("tar")
        .arg("-cf")
        .arg(tarball)
        .arg("-C")
        .arg(tree)
        .arg("."));
}

/// Whether `dir` is a mountpoint now (listed in /proc/self/mounts).
pub fn mounted(dir: &Path) -> bool {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(dir.to_str().unwrap_or("")))
}

/// One `ecstack cluster mount` process; unmounted (SIGTERM) and reaped on drop.
pub struct Mount {
    pub dir: PathBuf,
    pub child: Option<Child>,
}

impl Mount {
    pub fn start(rig: &Rig, dir: &Path, cache: &str) -> Mount {
        Mount::start_with(rig, dir, cache, &[])
    }

    /// A mount with more `ecstack cluster mount` flags (`--attr-timeout 0`).
    pub fn start_with(rig: &Rig, dir: &Path, cache: &str, flags: &[&str]) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        let log = std::fs::File::create(dir.with_extension("log")).unwrap();
        let child = Command::new(exe())
            .args(["cluster", "mount"])
            .arg(dir)
            .args(["--cache-size", cache])
            .args(flags)
            .arg("--config")
            .arg(rig.cluster.config_path())
            .env_remove("ECSTACK_CLUSTER")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("run ecstack cluster mount");
        let m = Mount {
            dir: dir.to_owned(),
            child: Some(child),
        };
        let start = Instant::now();
        while !mounted(dir) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{} did not mount: {}",
                dir.display(),
                m.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        m
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.with_extension("log")).unwrap_or_default()
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.join(p)
    }

    /// The mount's metrics endpoint, scraped: `GET /metrics` at the address its log names.
    pub fn scrape(&self) -> String {
        let text = super::scrape_logged(&self.log(), "the mount");
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        text
    }

    /// SIGTERM: the mount unmounts itself and exits 0.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "mount exited {status}: {}", self.log());
                break;
            }
            // Bounded by what the mount may still be flushing: a write-behind update of a
            // segment with too few chunks up retries for a call's deadline (~30 s) before it
            // answers EIO (a cold CI run's seed 1 was still flushing after 20 s).
            if start.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the mount did not stop on SIGTERM: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!mounted(&self.dir), "still mounted after SIGTERM");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            std::thread::sleep(Duration::from_millis(500));
            let _ = child.kill();
            let _ = child.wait();
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}
