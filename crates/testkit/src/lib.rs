//! Test support shared by the workspace's tests (a dev-dependency only, never published).
//!
//! **One rule for missing tools.** A test that drives an external tool (fio, nbdcopy, redis-cli,
//! lz4, chromium, a JDK, iproute2, ...) asks [`require_tool`] (or [`require`] for a condition it
//! checked itself) before it starts:
//!
//! * the tool is here: `true`, run the test;
//! * it is missing under CI (`CI=true`, as GitHub Actions, GitLab CI and most others set, or
//!   `ECSTACK_REQUIRE_CLIENTS=1`, which `scripts/test.sh` sets after installing the tools): the test
//!   panics with one line naming the tool and the Debian package that installs it, so a CI run
//!   without its tools fails instead of counting skipped tests as passed;
//! * it is missing elsewhere: a notice that the test is skipped (not passed) goes straight to the
//!   terminal's stderr, past the test harness's output capture, and the call returns `false`: the
//!   test returns early.
//!
//! ```no_run
//! #[test]
//! fn lz4_agrees() {
//!     if !ecstack_testkit::require_tool("lz4", "lz4") {
//!         return;
//!     }
//!     // ... run lz4 ...
//! }
//! ```

#![forbid(unsafe_code)]

pub mod postgres;

use std::io::Write;
use std::process::{Command, Stdio};

/// Whether tests must find their tools instead of skipping: `CI` or `ECSTACK_REQUIRE_CLIENTS` set
/// to anything but empty, `0` or `false`.
pub fn tools_required() -> bool {
    ["CI", "ECSTACK_REQUIRE_CLIENTS"].iter().any(|k| {
        std::env::var(k).is_ok_and(|v| {
            let v = v.trim();
            !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false")
        })
    })
}

/// Is `bin` runnable: does `bin --version` exit 0?
pub fn tool_runs(bin: &str) -> bool {
    runs_with(bin, "--version")
}

/// Does `bin arg` exit 0 (for tools without `--version`, such as `ip -V`)?
pub fn runs_with(bin: &str, arg: &str) -> bool {
    Command::new(bin)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Is `bin` a file in one of `PATH`'s directories (for tools slow to start, such as `java`)?
pub fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

/// [`require`] for a tool that runs with `--version`: `true` when `tool` runs; otherwise a panic
/// under CI naming `tool` and `package` (the apt package that installs it), a skip notice elsewhere.
pub fn require_tool(tool: &str, package: &str) -> bool {
    require(tool, on_path(tool) || tool_runs(tool), package)
}

/// The verdict for a test that needs `what` (a tool, or a condition such as "root" or "a directory
/// that supports O_DIRECT"), which `present` says is here or not: `true` to run the test; when it is
/// missing, a panic (one line naming `what` and `package`, what installs or provides it) under
/// [`tools_required`], else a skip notice on the terminal and `false`.
#[track_caller]
pub fn require(what: &str, present: bool, package: &str) -> bool {
    if present {
        return true;
    }
    let test = std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .map(|n| format!("{n}: "))
        .unwrap_or_default();
    let msg = format!("{test}needs {what}, which is missing (apt-get install {package}; scripts/setup.sh installs it)");
    if tools_required() {
        panic!("{msg}; CI=true or ECSTACK_REQUIRE_CLIENTS=1 is set, so this is a failure");
    }
    // Straight to the terminal: the harness captures `eprintln!`, and a skip must never be silent.
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED (not passed): {msg}; set ECSTACK_REQUIRE_CLIENTS=1 to make this fail ***\n"
    );
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_tool_runs_the_test() {
        assert!(require("sh", true, "dash"));
    }

    #[test]
    fn a_missing_tool_skips_or_fails_by_the_one_rule() {
        let missing = "ecstack-testkit-no-such-tool";
        assert!(!tool_runs(missing) && !on_path(missing));
        let r = std::panic::catch_unwind(|| require_tool(missing, "no-such-package"));
        match r {
            Ok(run) => {
                assert!(!tools_required(), "under CI a missing tool must panic");
                assert!(!run, "a missing tool must not run the test");
            }
            Err(p) => {
                assert!(tools_required(), "outside CI a missing tool must skip");
                let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
                assert!(
                    msg.contains(missing) && msg.contains("apt-get install no-such-package"),
                    "{msg}"
                );
                assert_eq!(msg.lines().count(), 1, "{msg}");
            }
        }
    }
}
