//! Threads in network namespaces: the one helper the emulated testbed (`codfs_netns`) and its
//! delay lines (`delay_line`) share, below both of them.

use std::fs::File;
use std::os::fd::AsRawFd;

use crate::{LabError, Result};

/// Moves the calling thread into network namespace `ns`.
pub(crate) fn enter_namespace(ns: &str) -> Result<()> {
    let path = format!("/run/netns/{ns}");
    let f = File::open(&path).map_err(|e| LabError::Run(format!("{path}: {e}")))?;
    // SAFETY: setns on a namespace file descriptor we hold open; it changes only this thread.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        return Err(LabError::Run(format!(
            "setns {path}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Runs `f` on a thread of its own moved into namespace `ns` (so its /proc/sys/net is that
/// namespace's); the calling thread stays where it is.
pub(crate) fn in_namespace<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        enter_namespace(&ns)?;
        f()
    })
    .join()
    .map_err(|_| LabError::Run("a thread moved into a namespace panicked".into()))?
}
