//! SIGHUP = re-read the configuration file now (live throttling by a signal, beside the 0.5 s poll of
//! the file's mtime): `kill -HUP PID` after editing `workers`, or to apply an edit that kept the mtime
//! (a file copied with `cp -p`, a clock set back, a file system with coarse timestamps).
//!
//! The handler only increments a counter (an atomic add is async-signal-safe: no lock, no allocation);
//! the analysis loop compares it with the value it last saw. Several analyses in one process each see
//! every signal. The handler is installed once per process, by the first analysis that has a
//! configuration file, and stays (a SIGHUP after that no longer ends the process).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static HANGUPS: AtomicU64 = AtomicU64::new(0);
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

extern "C" fn on_hangup(_: libc::c_int) {
    HANGUPS.fetch_add(1, Ordering::SeqCst);
}

/// Install the SIGHUP handler (once per process).
pub(crate) fn install() -> Result<(), String> {
    INSTALLED
        .get_or_init(|| {
            // SAFETY: `sa` is plain data, zeroed then filled; the handler touches only a static
            // atomic (async-signal-safe). SA_RESTART: a read or open interrupted by the signal
            // resumes instead of failing with EINTR.
            let r = unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_hangup as extern "C" fn(libc::c_int) as libc::sighandler_t;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(libc::SIGHUP, &sa, std::ptr::null_mut())
            };
            if r == 0 {
                Ok(())
            } else {
                Err(format!(
                    "cannot install the SIGHUP handler: {}",
                    std::io::Error::last_os_error()
                ))
            }
        })
        .clone()
}

/// SIGHUPs received since the handler was installed.
pub(crate) fn hangups() -> u64 {
    HANGUPS.load(Ordering::SeqCst)
}
