//! Scratch directories of the experiments (issue 46): each experiment that writes device images
//! gets a fresh directory of its own, says where it is and how long the run is expected to take,
//! and the directory is removed when the run ends, with success or an error ([`Drop`]), and on
//! the first SIGINT or SIGTERM (through [`crate::signals::on_stop`], then the process exits with
//! status 130). A directory the user named (`--dir`) is never removed: the scratch directory is
//! made inside it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};

/// Scratch directories alive now, removed by the stop hook.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A scratch directory, removed with everything in it when dropped.
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// Makes `<parent or $TMPDIR>/ecstack-<tag>-<pid>` (emptied if a crashed run of this pid
    /// left it) and arranges its removal on SIGINT/SIGTERM.
    pub fn new(parent: Option<&Path>, tag: &str) -> Result<Scratch> {
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let path = parent.join(format!("ecstack-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot make the scratch directory {}", path.display()))?;
        let first = {
            let mut l = live();
            l.push(path.clone());
            l.len() == 1
        };
        if first {
            crate::signals::on_stop(|| {
                // Removed first, told after: the experiment's threads go on until the exit,
                // and a run that finds its directory gone fails without making it again.
                let gone: Vec<PathBuf> = live().drain(..).collect();
                for p in &gone {
                    remove_while_written(p);
                }
                for p in &gone {
                    eprintln!("ecstack: interrupted: removed {}", p.display());
                }
            })?;
            crate::signals::exit_on_stop()?;
        }
        Ok(Scratch { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        live().retain(|p| *p != self.path);
    }
}

/// Removes `path` whole though a thread of the run may still be making files in it: a file made
/// after `remove_dir_all` listed the directory makes its last `rmdir` fail, so it goes again
/// until the directory is gone (a run never makes it anew), for at most 5 s.
fn remove_while_written(path: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::fs::remove_dir_all(path).is_err()
        && path.exists()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The line an experiment starts with: what it runs, where it writes and how long it expects to
/// take (`expect`, e.g. "a few minutes").
pub fn announce(what: &str, writes: &[&Path], expect: &str) {
    let places: Vec<String> = writes.iter().map(|p| p.display().to_string()).collect();
    eprintln!(
        "ecstack: {what}: writing to {}; expect {expect}",
        places.join(" and ")
    );
}
