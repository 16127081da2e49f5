//! Helpers of the live-throttling tests (a running analysis whose configuration file changes).

use std::path::Path;
use std::time::{Duration, Instant};

/// Waits (at most 60 s) until the analysis writing to `out` has created its results file: by then
/// it has installed its SIGHUP handler and read the configuration file's mtime.
pub fn wait_until_started(out: &Path) {
    let t0 = Instant::now();
    while !out.join("results.sqlite").exists() {
        assert!(t0.elapsed().as_secs() < 60, "the analysis did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}
