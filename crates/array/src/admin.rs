//! The array's admin language: device names (`3`, `main2`, `log0`), the commands an operator sends
//! to a running array (over the NBD server's admin socket, one line each), their execution, and
//! reopening an array from the device specs its superblock records.
//!
//! ```text
//! status                              the ArrayStatus report (JSON)
//! commit                              parity commit; its CommitReport (JSON)
//! sync | flush                        make every completed write durable
//! fail DEV                            take a device out of service
//! rebuild DEV [--replacement] [SPEC]  rebuild onto SPEC (default: the device's recorded spec);
//!                                     its RebuildReport (JSON)
//! scrub [--no-repair] [--mb-per-s N] [--checksums-only]
//!                                     check every chunk's checksum and every stripe's parity
//!                                     (--checksums-only: the parity only of stripes with a chunk
//!                                     whose checksum fails or is not known), repair what can be
//!                                     located; its ScrubReport (JSON)
//! scrub-progress                      how far the running scrub is (ScrubProgressReport, JSON):
//!                                     ask on a second connection while `scrub` runs
//! help                                this list
//! ```
//!
//! `DEV` is an index in array order (main devices `0..n`, then log devices `n..n+m`), `mainI` or
//! `logI` (also `main:I`, `log-I`). Every name is range-checked against the array: a name that is
//! not a device (`log18446744073709551610`) is an error line, never a panic or a wrapped index.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use ecstack_device::{open_spec, BlockDevice, DeviceError};

use crate::array::{Array, ArrayDevices, OpenOptions};
use crate::core::{CommitReport, RebuildReport};
use crate::scrub::{ScrubOptions, ScrubReport};
use crate::{ArrayError, Result};

/// A device of an array as an operator names it; [`DeviceName::resolve`] turns it into an index in
/// array order after checking it against the array's geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceName {
    /// Index in array order: main devices `0..n`, then log devices `n..n+m`.
    Index(u64),
    /// Main device `i` (`0..n`).
    Main(u64),
    /// Log device `i` (`0..m`; pl and eplog).
    Log(u64),
}

fn admin_err(s: impl Into<String>) -> ArrayError {
    ArrayError::Admin(s.into())
}

impl FromStr for DeviceName {
    type Err = ArrayError;

    fn from_str(s: &str) -> Result<DeviceName> {
        let t = s.trim().to_ascii_lowercase();
        let number = |r: &str, what: &str| -> Result<u64> {
            let r = r.trim_start_matches([':', '-']);
            r.parse::<u64>().map_err(|_| {
                admin_err(format!(
                    "bad {what} device number '{r}' in '{s}' (a device is an index, mainI or logI)"
                ))
            })
        };
        if let Some(r) = t.strip_prefix("log") {
            Ok(DeviceName::Log(number(r, "log")?))
        } else if let Some(r) = t.strip_prefix("main") {
            Ok(DeviceName::Main(number(r, "main")?))
        } else {
            t.parse::<u64>().map(DeviceName::Index).map_err(|_| {
                admin_err(format!(
                    "'{s}' is not a device (an index in array order, mainI or logI)"
                ))
            })
        }
    }
}

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceName::Index(i) => write!(f, "{i}"),
            DeviceName::Main(i) => write!(f, "main{i}"),
            DeviceName::Log(i) => write!(f, "log{i}"),
        }
    }
}

impl DeviceName {
    /// The index in array order of this device of an array with `n` main and `log` log devices.
    pub fn resolve(&self, n: usize, log: usize) -> Result<usize> {
        let total = n + log;
        let layout = if log > 0 {
            format!(
                "main 0..{n} (main0..main{}), log {n}..{total} (log0..log{})",
                n.saturating_sub(1),
                log - 1
            )
        } else {
            format!(
                "main 0..{n} (main0..main{}), no log devices",
                n.saturating_sub(1)
            )
        };
        let within = |i: u64, len: usize| usize::try_from(i).ok().filter(|&i| i < len);
        match *self {
            DeviceName::Index(i) => within(i, total).ok_or_else(|| {
                admin_err(format!(
                    "no device {i}: the array has {total} devices: {layout}"
                ))
            }),
            DeviceName::Main(i) => within(i, n)
                .ok_or_else(|| admin_err(format!("no main device {i}: the array has {layout}"))),
            DeviceName::Log(i) => within(i, log)
                .map(|i| n + i)
                .ok_or_else(|| admin_err(format!("no log device {i}: the array has {layout}"))),
        }
    }
}

/// One admin command (see the module notes for the syntax).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminCommand {
    Status,
    Commit,
    Sync,
    Fail(DeviceName),
    Rebuild {
        device: DeviceName,
        /// Spec of the replacement device; None: the device's recorded spec.
        replacement: Option<String>,
    },
    /// Scrub every written stripe ([`Array::scrub`]).
    Scrub {
        repair: bool,
        /// Read bandwidth limit, MB/s (0 = none).
        mb_per_s_max: u64,
        /// Skip the parity check of stripes whose every chunk matches its checksum
        /// ([`ScrubOptions::checksums_only`]).
        checksums_only: bool,
    },
    /// How far the scrub running on this admin channel is ([`ScrubProgress`]).
    ScrubProgress,
    Help,
}

/// Progress of the scrub an admin channel runs, shared by its connections: `scrub` on one
/// connection updates it, `scrub-progress` on another reads it. One scrub at a time per channel.
#[derive(Debug, Default)]
pub struct ScrubProgress {
    running: AtomicBool,
    done_stripes: AtomicU64,
    total_stripes: AtomicU64,
    finished: AtomicU64,
}

/// The `scrub-progress` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScrubProgressReport {
    /// A scrub is running now.
    pub running: bool,
    /// Of the running (or else the last) scrub: stripes checked and stripes to check.
    pub done_stripes: u64,
    pub total_stripes: u64,
    /// Scrubs finished (or failed) on this channel.
    pub finished: u64,
}

impl ScrubProgress {
    pub fn report(&self) -> ScrubProgressReport {
        ScrubProgressReport {
            running: self.running.load(SeqCst),
            done_stripes: self.done_stripes.load(SeqCst),
            total_stripes: self.total_stripes.load(SeqCst),
            finished: self.finished.load(SeqCst),
        }
    }
}

/// Marks a scrub running while alive (also when the scrub fails or panics).
struct ScrubRunning<'a>(&'a ScrubProgress);

impl Drop for ScrubRunning<'_> {
    fn drop(&mut self) {
        self.0.finished.fetch_add(1, SeqCst);
        self.0.running.store(false, SeqCst);
    }
}

const COMMANDS: &str =
    "status, commit, sync, fail DEV, rebuild DEV [--replacement SPEC], scrub [--no-repair] [--mb-per-s N] [--checksums-only], scrub-progress; DEV is an index, mainI or logI";

impl AdminCommand {
    /// Parse one command line.
    pub fn parse(line: &str) -> Result<AdminCommand> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let unknown = || {
            admin_err(format!(
                "unknown array command '{}' ({COMMANDS})",
                line.trim()
            ))
        };
        match words.as_slice() {
            ["status"] => Ok(AdminCommand::Status),
            ["commit"] => Ok(AdminCommand::Commit),
            ["sync"] | ["flush"] => Ok(AdminCommand::Sync),
            ["help"] => Ok(AdminCommand::Help),
            ["fail", d] => Ok(AdminCommand::Fail(d.parse()?)),
            ["fail", ..] => Err(admin_err(format!("usage: fail DEV ({COMMANDS})"))),
            ["rebuild", d, rest @ ..] => {
                let replacement = match rest {
                    [] => None,
                    ["--replacement", s] => Some(s.to_string()),
                    [s] if !s.starts_with("--") => Some(s.to_string()),
                    _ => {
                        return Err(admin_err(format!(
                            "usage: rebuild DEV [--replacement SPEC] ({COMMANDS})"
                        )))
                    }
                };
                Ok(AdminCommand::Rebuild {
                    device: d.parse()?,
                    replacement,
                })
            }
            ["scrub-progress"] => Ok(AdminCommand::ScrubProgress),
            ["scrub", rest @ ..] => parse_scrub(rest),
            ["rebuild"] => Err(admin_err(format!(
                "usage: rebuild DEV [--replacement SPEC] ({COMMANDS})"
            ))),
            _ => Err(unknown()),
        }
    }
}

/// `scrub [--no-repair] [--mb-per-s N] [--checksums-only]`, after the word `scrub`.
fn parse_scrub(words: &[&str]) -> Result<AdminCommand> {
    let usage = || {
        admin_err(format!(
            "usage: scrub [--no-repair] [--mb-per-s N] [--checksums-only] ({COMMANDS})"
        ))
    };
    let mut repair = true;
    let mut checksums_only = false;
    let mut mb_per_s_max = 0u64;
    let mut i = 0;
    while i < words.len() {
        match words[i] {
            "--no-repair" => repair = false,
            "--checksums-only" => checksums_only = true,
            "--mb-per-s" => {
                let v: u64 = words
                    .get(i + 1)
                    .and_then(|w| w.parse().ok())
                    .ok_or_else(usage)?;
                mb_per_s_max = v;
                i += 1;
            }
            _ => return Err(usage()),
        }
        i += 1;
    }
    Ok(AdminCommand::Scrub {
        repair,
        mb_per_s_max,
        checksums_only,
    })
}

impl fmt::Display for AdminCommand {
    /// The command line that parses back to this command.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminCommand::Status => write!(f, "status"),
            AdminCommand::Commit => write!(f, "commit"),
            AdminCommand::Sync => write!(f, "sync"),
            AdminCommand::Help => write!(f, "help"),
            AdminCommand::ScrubProgress => write!(f, "scrub-progress"),
            AdminCommand::Fail(d) => write!(f, "fail {d}"),
            AdminCommand::Rebuild {
                device,
                replacement: None,
            } => write!(f, "rebuild {device}"),
            AdminCommand::Rebuild {
                device,
                replacement: Some(s),
            } => write!(f, "rebuild {device} --replacement {s}"),
            AdminCommand::Scrub {
                repair,
                mb_per_s_max,
                checksums_only,
            } => {
                write!(f, "scrub")?;
                if !repair {
                    write!(f, " --no-repair")?;
                }
                if *mb_per_s_max > 0 {
                    write!(f, " --mb-per-s {mb_per_s_max}")?;
                }
                if *checksums_only {
                    write!(f, " --checksums-only")?;
                }
                Ok(())
            }
        }
    }
}

/// What an executed admin command answers.
#[derive(Debug, Clone, PartialEq)]
pub enum AdminReply {
    Status(Box<crate::ArrayStatus>),
    Commit(CommitReport),
    Synced,
    Failed {
        device: usize,
        failed_devices: Vec<usize>,
    },
    Rebuilt(RebuildReport),
    Scrubbed(ScrubReport),
    ScrubProgress(ScrubProgressReport),
    Help(String),
}

impl AdminReply {
    /// The reply as one answer of the admin socket: JSON for reports, text otherwise.
    pub fn to_answer(&self) -> String {
        let js = |r: std::result::Result<String, serde_json::Error>| {
            r.unwrap_or_else(|e| format!("cannot encode the reply: {e}"))
        };
        match self {
            AdminReply::Status(s) => js(serde_json::to_string(s)),
            AdminReply::Commit(r) => js(serde_json::to_string(r)),
            AdminReply::Rebuilt(r) => js(serde_json::to_string(r)),
            AdminReply::Scrubbed(r) => js(serde_json::to_string(r)),
            AdminReply::ScrubProgress(r) => js(serde_json::to_string(r)),
            AdminReply::Synced => "synced".into(),
            AdminReply::Failed {
                device,
                failed_devices,
            } => format!("device {device} failed; failed devices {failed_devices:?}"),
            AdminReply::Help(h) => h.clone(),
        }
    }
}

impl Array {
    /// The index in array order of the device `name` names, checked against this array.
    pub fn device_index(&self, name: &DeviceName) -> Result<usize> {
        let n = self.geometry().n;
        name.resolve(n, self.devices().len() - n)
    }

    /// Run one admin command (a scrub's progress is not observable: see [`Array::execute_with`]).
    pub fn execute(&self, cmd: &AdminCommand) -> Result<AdminReply> {
        self.execute_with(cmd, &ScrubProgress::default())
    }

    /// Run one admin command; `scrub` reports its progress to `progress`, which `scrub-progress`
    /// reads (an admin channel keeps one for all its connections).
    pub fn execute_with(&self, cmd: &AdminCommand, progress: &ScrubProgress) -> Result<AdminReply> {
        match cmd {
            AdminCommand::ScrubProgress => Ok(AdminReply::ScrubProgress(progress.report())),
            AdminCommand::Status => Ok(AdminReply::Status(Box::new(self.status()))),
            AdminCommand::Commit => self.commit().map(AdminReply::Commit),
            AdminCommand::Sync => self.sync().map(|_| AdminReply::Synced),
            AdminCommand::Help => Ok(AdminReply::Help(format!("array commands: {COMMANDS}"))),
            AdminCommand::Fail(d) => {
                let device = self.device_index(d)?;
                self.fail_device(device)?;
                Ok(AdminReply::Failed {
                    device,
                    failed_devices: self.failed_devices(),
                })
            }
            AdminCommand::Rebuild {
                device,
                replacement,
            } => {
                let i = self.device_index(device)?;
                self.rebuild_from_spec(i, replacement.as_deref())
                    .map(AdminReply::Rebuilt)
            }
            AdminCommand::Scrub {
                repair,
                mb_per_s_max,
                checksums_only,
            } => {
                let opts = ScrubOptions {
                    repair: *repair,
                    mb_per_s_max: *mb_per_s_max as f64,
                    checksums_only: *checksums_only,
                    ..ScrubOptions::default()
                };
                if progress.running.swap(true, SeqCst) {
                    let p = progress.report();
                    return Err(admin_err(format!(
                        "a scrub is already running ({} of {} stripes checked)",
                        p.done_stripes, p.total_stripes
                    )));
                }
                let _running = ScrubRunning(progress);
                progress.done_stripes.store(0, SeqCst);
                progress.total_stripes.store(0, SeqCst);
                self.scrub(&opts, &|done, total| {
                    progress.total_stripes.store(total, SeqCst);
                    progress.done_stripes.store(done, SeqCst);
                })
                .map(AdminReply::Scrubbed)
            }
        }
    }

    /// Parse and run one admin command line; the answer as the admin socket sends it.
    pub fn admin(&self, line: &str) -> Result<String> {
        self.admin_with(line, &ScrubProgress::default())
    }

    /// [`Array::admin`] with the admin channel's scrub progress.
    pub fn admin_with(&self, line: &str, progress: &ScrubProgress) -> Result<String> {
        let cmd = AdminCommand::parse(line)?;
        self.execute_with(&cmd, progress).map(|r| r.to_answer())
    }

    /// Rebuild device `i` onto the device `spec` opens (default: the spec recorded for device `i`,
    /// e.g. a swapped disk at the same path) and record that spec in the superblock.
    pub fn rebuild_from_spec(&self, i: usize, spec: Option<&str>) -> Result<RebuildReport> {
        let specs = self.superblock().specs;
        let spec = match spec {
            Some(s) => s.to_string(),
            None => specs
                .get(i)
                .cloned()
                .ok_or_else(|| admin_err(format!("no device {i}")))?,
        };
        let dev = open_spec(&spec)
            .map_err(|e| admin_err(format!("opening replacement '{spec}': {e}")))?;
        let report = self.rebuild_device(i, dev)?;
        self.set_device_spec(i, &spec)?;
        Ok(report)
    }
}

/// A recorded device that could not be opened (the array opens degraded without it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnavailableDevice {
    pub spec: String,
    pub error: String,
}

/// An array reopened from its metadata volume, and the devices that were missing.
#[derive(Debug)]
pub struct Reopened {
    pub array: Array,
    pub unavailable: Vec<UnavailableDevice>,
}

impl Array {
    /// Open the array whose metadata volume is `meta_spec`: the main and log devices are the specs
    /// its superblock records unless `main` / `log` override them. A device that cannot be opened any
    /// more (a pulled disk) is represented by a stand-in of the size the array expects that fails
    /// every request, so the array opens degraded; [`Reopened::unavailable`] lists them.
    pub fn open_recorded(
        meta_spec: &str,
        main: &[String],
        log: &[String],
        opts: &OpenOptions,
    ) -> Result<Reopened> {
        let meta = open_spec(meta_spec).map_err(|e| {
            ArrayError::Config(format!("opening metadata volume '{meta_spec}': {e}"))
        })?;
        let sb = Array::read_superblock(meta.as_ref())?;
        let n = sb.geometry.n;
        let nlog = if sb.scheme.uses_log() {
            sb.geometry.m
        } else {
            0
        };
        let main = if main.is_empty() {
            sb.specs.iter().take(n).cloned().collect()
        } else {
            main.to_vec()
        };
        let log = if log.is_empty() {
            sb.specs.iter().skip(n).take(nlog).cloned().collect()
        } else {
            log.to_vec()
        };
        let mut specs = main.clone();
        specs.extend(log.iter().cloned());
        specs.push(meta_spec.to_string());
        let mut unavailable = Vec::new();
        let g = &sb.geometry;
        let devices = ArrayDevices {
            main: open_tolerant(&main, g.off(g.slots), &mut unavailable),
            log: open_tolerant(&log, g.off(g.log_slots), &mut unavailable),
            meta,
            specs: Some(specs),
        };
        Ok(Reopened {
            array: Array::open_with(devices, opts)?,
            unavailable,
        })
    }
}

/// Open `specs`; one that cannot be opened becomes an [`Unavailable`] stand-in of `capacity` bytes.
fn open_tolerant(
    specs: &[String],
    capacity: u64,
    unavailable: &mut Vec<UnavailableDevice>,
) -> Vec<Arc<dyn BlockDevice>> {
    specs
        .iter()
        .map(|s| match open_spec(s) {
            Ok(d) => d,
            Err(e) => {
                unavailable.push(UnavailableDevice {
                    spec: s.clone(),
                    error: e.to_string(),
                });
                Arc::new(Unavailable {
                    name: s.clone(),
                    capacity,
                    error: e.to_string(),
                }) as Arc<dyn BlockDevice>
            }
        })
        .collect()
}

/// A recorded device that could not be opened: it has the size the array expects of it and fails
/// every request, so the array marks it failed when it reads its label and opens degraded.
#[derive(Debug)]
struct Unavailable {
    name: String,
    capacity: u64,
    error: String,
}

impl Unavailable {
    fn err(&self) -> DeviceError {
        DeviceError::other(&self.name, format!("unavailable: {}", self.error))
    }
}

impl BlockDevice for Unavailable {
    fn name(&self) -> &str {
        &self.name
    }
    fn capacity(&self) -> u64 {
        self.capacity
    }
    fn read_at(&self, _buf: &mut [u8], _offset: u64) -> ecstack_device::Result<()> {
        Err(self.err())
    }
    fn write_at(&self, _buf: &[u8], _offset: u64) -> ecstack_device::Result<()> {
        Err(self.err())
    }
    fn flush(&self) -> ecstack_device::Result<()> {
        Err(self.err())
    }
    fn discard(&self, _offset: u64, _len: u64) -> ecstack_device::Result<()> {
        Err(self.err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_parse_and_resolve_within_the_array() {
        // A 4+2 array with two log devices: main 0..6, log 6..8.
        let r = |s: &str| s.parse::<DeviceName>().and_then(|d| d.resolve(6, 2));
        assert_eq!(r("3").unwrap(), 3);
        assert_eq!(r("7").unwrap(), 7);
        assert_eq!(r("main5").unwrap(), 5);
        assert_eq!(r("MAIN:0").unwrap(), 0);
        assert_eq!(r("log0").unwrap(), 6);
        assert_eq!(r("log-1").unwrap(), 7);
        for bad in [
            "8",
            "main6",
            "log2",
            "log18446744073709551610",
            "18446744073709551615",
        ] {
            let e = r(bad).unwrap_err().to_string();
            assert!(e.starts_with("no "), "{bad}: {e}");
            assert!(!e.contains('\n'), "{bad}: {e}");
        }
        // Numbers beyond u64, signs, junk: a parse error naming the input.
        for bad in ["log99999999999999999999999", "main-", "-1", "disk3", ""] {
            let e = r(bad).unwrap_err().to_string();
            assert!(e.contains("device"), "{bad}: {e}");
        }
        // md arrays have no log devices.
        let e = DeviceName::Log(0).resolve(5, 0).unwrap_err().to_string();
        assert!(e.contains("no log devices"), "{e}");
        // Index n + i of a 255-device array would wrap if added in a narrower type.
        assert!(DeviceName::Log(u64::MAX).resolve(200, 55).is_err());
        assert_eq!(DeviceName::Log(54).resolve(200, 55).unwrap(), 254);
    }

    #[test]
    fn commands_parse_and_print_back() {
        let cases = [
            ("status", AdminCommand::Status),
            ("  commit ", AdminCommand::Commit),
            ("flush", AdminCommand::Sync),
            ("help", AdminCommand::Help),
            ("fail 3", AdminCommand::Fail(DeviceName::Index(3))),
            ("fail log1", AdminCommand::Fail(DeviceName::Log(1))),
            (
                "rebuild 3 --replacement mem:8M",
                AdminCommand::Rebuild {
                    device: DeviceName::Index(3),
                    replacement: Some("mem:8M".into()),
                },
            ),
            (
                "rebuild main2 file:/tmp/x",
                AdminCommand::Rebuild {
                    device: DeviceName::Main(2),
                    replacement: Some("file:/tmp/x".into()),
                },
            ),
            (
                "rebuild log0",
                AdminCommand::Rebuild {
                    device: DeviceName::Log(0),
                    replacement: None,
                },
            ),
        ];
        for (line, want) in cases {
            let got = AdminCommand::parse(line).unwrap();
            assert_eq!(got, want, "{line}");
            assert_eq!(AdminCommand::parse(&got.to_string()).unwrap(), want);
        }
        for bad in [
            "",
            "fail",
            "fail 1 2",
            "rebuild",
            "rebuild 1 --replacement",
            "rebuild 1 --other x",
            "rebuild 1 a b",
            "explode",
            "fail disk",
        ] {
            let e = AdminCommand::parse(bad).unwrap_err().to_string();
            assert!(!e.is_empty() && !e.contains('\n'), "{bad}: {e}");
        }
    }
}
