//! Re-read the configuration file now (live throttling, beside the 0.5 s poll of the file's mtime):
//! [`reload_config`] is the hook; the binary calls it on SIGHUP (`kill -HUP PID` after editing
//! `workers`, or to apply an edit that kept the mtime: a file copied with `cp -p`, a clock set back,
//! a file system with coarse timestamps). This library installs no signal handler.
//!
//! The hook only increments a counter (an atomic add: safe from any thread, even a signal
//! handler); the analysis loop compares it with the value it last saw. Several analyses in one
//! process each see every request.

use std::sync::atomic::{AtomicU64, Ordering};

static RELOADS: AtomicU64 = AtomicU64::new(0);

/// Ask every running analysis with a configuration file to re-read it now.
pub fn reload_config() {
    RELOADS.fetch_add(1, Ordering::SeqCst);
}

/// Requests made so far.
pub(crate) fn reloads() -> u64 {
    RELOADS.load(Ordering::SeqCst)
}
