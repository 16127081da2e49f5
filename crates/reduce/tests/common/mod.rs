//! Helpers of the live-throttling tests (a running analysis whose configuration file changes),
//! shared by `analyze.rs` here and the CLI's `crates/cli/tests/reduce.rs`, which includes this
//! file by path: so std only.

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

/// Replaces the contents of the configuration file `cfg` with `text` under its old mtime (written
/// aside as `<cfg>.new`, the mtime set back, renamed over it), so a poll of the mtime cannot see
/// the change and only a SIGHUP applies it.
pub fn replace_keeping_mtime(cfg: &Path, text: &str) {
    let old = std::fs::metadata(cfg).unwrap().modified().unwrap();
    let mut aside = cfg.as_os_str().to_owned();
    aside.push(".new");
    std::fs::write(&aside, text).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&aside)
        .unwrap()
        .set_modified(old)
        .unwrap();
    std::fs::rename(&aside, cfg).unwrap();
    assert_eq!(std::fs::metadata(cfg).unwrap().modified().unwrap(), old);
}
