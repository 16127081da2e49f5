//! fio helpers: 4 KiB random-write IOPS over NBD (fio's `nbd` ioengine, which uses libnbd) beside fio
//! on a plain file (`ioengine=psync`), and write-then-verify passes with `verify=crc32c`.
//!
//! Everything runs the real `fio` binary and parses `--output-format=json`; [`FioResult::command`]
//! holds the exact command line so a report can quote it.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::NbdError;

/// Where fio sends its I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FioTarget {
    /// An NBD export, e.g. `nbd://127.0.0.1:10809/ecstack` (fio `ioengine=nbd`, `uri=`).
    Nbd(String),
    /// A plain file or raw device (fio `ioengine=psync`).
    File(PathBuf),
}

impl FioTarget {
    /// `nbd://…` and `nbds+unix://…`-style URIs are NBD targets; anything else is a file path.
    pub fn parse(s: &str) -> FioTarget {
        if s.starts_with("nbd") && s.contains("://") {
            FioTarget::Nbd(s.to_string())
        } else {
            FioTarget::File(PathBuf::from(s))
        }
    }
}

/// Parameters of a random-write run.
#[derive(Debug, Clone)]
pub struct FioParams {
    /// Block size in bytes.
    pub bs: u64,
    /// Bytes of the target to use (from offset 0).
    pub size: u64,
    /// Run time (time-based).
    pub runtime: Duration,
    /// Requests in flight (nbd engine; psync is always 1 per job).
    pub iodepth: u32,
    /// Parallel jobs (each one NBD connection or one file descriptor).
    pub numjobs: u32,
    /// `direct=1` for file targets (ignored for NBD).
    pub direct: bool,
    /// Wall-clock limit for the fio process; it is killed after this.
    pub timeout: Duration,
}

impl Default for FioParams {
    fn default() -> Self {
        FioParams {
            bs: 4096,
            size: 64 << 20,
            runtime: Duration::from_secs(5),
            iodepth: 16,
            numjobs: 1,
            direct: false,
            timeout: Duration::from_secs(300),
        }
    }
}

/// One direction of a fio result (summed over jobs).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct FioSide {
    pub iops: f64,
    pub bw_bytes: f64,
    pub total_ios: u64,
    pub lat_mean_us: f64,
    pub clat_p99_us: f64,
}

/// Parsed fio JSON output.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct FioResult {
    pub read: FioSide,
    pub write: FioSide,
    /// The command line that produced it (shell-quoted where needed).
    pub command: String,
}

/// Is a `fio` binary on `PATH`?
pub fn fio_available() -> bool {
    tool_runs("fio")
}

/// Is `bin` runnable (`bin --version` succeeds)?
pub fn tool_runs(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Does this fio have the `nbd` ioengine (built with libnbd)?
pub fn fio_has_nbd_engine() -> bool {
    Command::new("fio")
        .arg("--enghelp=nbd")
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("uri"))
        .unwrap_or(false)
}

fn target_args(t: &FioTarget, direct: bool) -> Vec<String> {
    match t {
        FioTarget::Nbd(uri) => vec!["--ioengine=nbd".into(), format!("--uri={uri}")],
        FioTarget::File(p) => {
            let mut v = vec![
                "--ioengine=psync".to_string(),
                format!("--filename={}", p.display()),
            ];
            if direct {
                v.push("--direct=1".into());
            }
            v
        }
    }
}

/// The fio arguments of a time-based 4 KiB-style random-write run (without the `fio` program name).
pub fn randwrite_args(t: &FioTarget, p: &FioParams) -> Vec<String> {
    let mut a = vec!["--name=randwrite".to_string()];
    a.extend(target_args(t, p.direct));
    a.extend([
        "--rw=randwrite".to_string(),
        format!("--bs={}", p.bs),
        format!("--size={}", p.size),
        "--time_based".into(),
        format!("--runtime={}ms", p.runtime.as_millis().max(1)),
        format!("--numjobs={}", p.numjobs.max(1)),
        "--group_reporting".into(),
        "--output-format=json".into(),
    ]);
    if matches!(t, FioTarget::Nbd(_)) {
        a.push(format!("--iodepth={}", p.iodepth.max(1)));
    }
    a
}

/// Run fio's random-write workload on `target` and parse the result.
pub fn fio_randwrite(target: &FioTarget, p: &FioParams) -> Result<FioResult, NbdError> {
    run_fio(&randwrite_args(target, p), p.timeout)
}

/// 4 KiB random-write IOPS with default parameters (64 MiB, 5 s; NBD: iodepth 16; files: psync).
/// `uri_or_file` starting with `nbd…://` is an NBD export, anything else a file path.
pub fn fio_randwrite_iops(uri_or_file: &str) -> Result<f64, NbdError> {
    Ok(
        fio_randwrite(&FioTarget::parse(uri_or_file), &FioParams::default())?
            .write
            .iops,
    )
}

/// Parameters of a verify pass over an NBD export.
#[derive(Debug, Clone)]
pub struct VerifyParams {
    /// Bytes of the export covered (each block written once).
    pub size: u64,
    pub bs: u64,
    pub iodepth: u32,
    /// Random seed; the verify-only pass must use the seed of the write pass.
    pub seed: u64,
    pub timeout: Duration,
}

impl Default for VerifyParams {
    fn default() -> Self {
        VerifyParams {
            size: 16 << 20,
            bs: 4096,
            iodepth: 16,
            seed: 0xec57ac,
            timeout: Duration::from_secs(300),
        }
    }
}

fn verify_args(uri: &str, p: &VerifyParams, verify_only: bool) -> Vec<String> {
    let mut a = vec!["--name=verify".to_string()];
    a.extend(target_args(&FioTarget::Nbd(uri.to_string()), false));
    a.extend([
        "--rw=randwrite".to_string(),
        format!("--bs={}", p.bs),
        format!("--size={}", p.size),
        format!("--iodepth={}", p.iodepth.max(1)),
        "--verify=crc32c".into(),
        "--verify_fatal=1".into(),
        "--verify_state_save=0".into(),
        format!("--randseed={}", p.seed),
        "--output-format=json".into(),
    ]);
    if verify_only {
        a.push("--verify_only=1".into());
    }
    a
}

/// Random `bs` writes over `[0, size)` of the export with `verify=crc32c` headers; fio reads every block
/// back and checks it at the end of the pass. Fails on any verify error.
pub fn fio_randwrite_verify(uri: &str, p: &VerifyParams) -> Result<FioResult, NbdError> {
    run_fio(&verify_args(uri, p, false), p.timeout)
}

/// The verify-only pass (`verify_only=1`): no writes; reads every block written by
/// [`fio_randwrite_verify`] with the same parameters and checks its crc32c.
pub fn fio_verify_only(uri: &str, p: &VerifyParams) -> Result<FioResult, NbdError> {
    run_fio(&verify_args(uri, p, true), p.timeout)
}

fn shell_quote(a: &str) -> String {
    if a.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_=./:,+@%".contains(c))
    {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

/// Run `fio ARGS` (which must include `--output-format=json`), kill it after `timeout`, and parse the
/// result. A nonzero exit or a job error is an error carrying fio's first error line.
pub fn run_fio(args: &[String], timeout: Duration) -> Result<FioResult, NbdError> {
    let command = std::iter::once("fio".to_string())
        .chain(args.iter().map(|a| shell_quote(a)))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = Command::new("fio")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| NbdError::Fio(format!("cannot run fio: {e}")))?;
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(NbdError::Fio(format!(
                    "fio did not finish within {:?}; killed ({command})",
                    timeout
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(NbdError::Fio(format!("waiting for fio: {e}"))),
        }
    };
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    let first_err = || {
        stderr
            .lines()
            .chain(stdout.lines())
            .find(|l| {
                let l = l.to_ascii_lowercase();
                l.contains("error") || l.contains("fail") || l.contains("bad")
            })
            .or_else(|| stderr.lines().find(|l| !l.trim().is_empty()))
            .unwrap_or("no message")
            .trim()
            .to_string()
    };
    if !status.success() {
        return Err(NbdError::Fio(format!(
            "fio exited with {status}: {}",
            first_err()
        )));
    }
    let mut res = parse_fio_json(&stdout)?;
    if let Some(e) = job_error(&stdout) {
        return Err(NbdError::Fio(format!("fio job error {e}: {}", first_err())));
    }
    res.command = command;
    Ok(res)
}

fn job_error(text: &str) -> Option<i64> {
    let start = text.find('{')?;
    let v: serde_json::Value = serde_json::from_str(&text[start..]).ok()?;
    v["jobs"]
        .as_array()?
        .iter()
        .filter_map(|j| j["error"].as_i64())
        .find(|&e| e != 0)
}

fn side(j: &serde_json::Value) -> FioSide {
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    FioSide {
        iops: f(&j["iops"]),
        bw_bytes: f(&j["bw_bytes"]),
        total_ios: j["total_ios"].as_u64().unwrap_or(0),
        lat_mean_us: f(&j["lat_ns"]["mean"]) / 1000.0,
        clat_p99_us: f(&j["clat_ns"]["percentile"]["99.000000"]) / 1000.0,
    }
}

/// Parse fio `--output-format=json` output (text before the first `{` is ignored). Jobs are summed
/// (IOPS, bandwidth, I/O counts) and latencies averaged / maxed.
pub fn parse_fio_json(text: &str) -> Result<FioResult, NbdError> {
    let start = text
        .find('{')
        .ok_or_else(|| NbdError::Fio("fio printed no JSON".into()))?;
    let v: serde_json::Value = serde_json::from_str(&text[start..])
        .map_err(|e| NbdError::Fio(format!("cannot parse fio JSON: {e}")))?;
    let jobs = v["jobs"]
        .as_array()
        .filter(|j| !j.is_empty())
        .ok_or_else(|| NbdError::Fio("fio JSON has no jobs".into()))?;
    let mut r = FioResult::default();
    let n = jobs.len() as f64;
    for j in jobs {
        for (acc, s) in [
            (&mut r.read, side(&j["read"])),
            (&mut r.write, side(&j["write"])),
        ] {
            acc.iops += s.iops;
            acc.bw_bytes += s.bw_bytes;
            acc.total_ios += s.total_ios;
            acc.lat_mean_us += s.lat_mean_us / n;
            acc.clat_p99_us = acc.clat_p99_us.max(s.clat_p99_us);
        }
    }
    Ok(r)
}

/// `ecstack nbd bench`: fio random writes over NBD, one run per iodepth, beside one psync run on
/// a raw file.
#[derive(Clone)]
pub struct NbdBench {
    /// Exported over NBD on 127.0.0.1 for the NBD runs.
    pub device: std::sync::Arc<dyn ecstack_device::BlockDevice>,
    /// The file of the psync baseline.
    pub raw_file: PathBuf,
    /// Block size and bytes written (random offsets inside; at most the device's capacity).
    pub bs: u64,
    pub size: u64,
    /// Run time of each fio run.
    pub runtime: Duration,
    /// The iodepths of the NBD runs.
    pub iodepths: Vec<u32>,
    /// `direct=1` for the raw file.
    pub direct: bool,
}

/// One fio run of the bench.
#[derive(Debug, Clone)]
pub struct NbdBenchRow {
    pub target: String,
    pub iodepth: u32,
    pub result: FioResult,
}

/// What `ecstack nbd bench` measured: the NBD rows, then the raw file's.
#[derive(Debug, Clone)]
pub struct NbdBenchReport {
    pub bs: u64,
    pub size: u64,
    pub runtime_s: f64,
    pub rows: Vec<NbdBenchRow>,
}

/// Run the bench.
pub fn run_nbd_bench(b: &NbdBench) -> Result<NbdBenchReport, NbdError> {
    let params = |iodepth: u32| FioParams {
        bs: b.bs,
        size: b.size,
        runtime: b.runtime,
        iodepth,
        numjobs: 1,
        direct: b.direct,
        timeout: b.runtime * 4 + Duration::from_secs(120),
    };
    let mut rows = Vec::new();
    let server = crate::Server::start(
        std::sync::Arc::clone(&b.device),
        None,
        crate::ServeConfig {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            ..crate::ServeConfig::default()
        },
    )?;
    for &d in &b.iodepths {
        let r = fio_randwrite(&FioTarget::Nbd(server.uri()), &params(d))
            .map_err(|e| NbdError::Fio(format!("fio over NBD at iodepth {d}: {e}")))?;
        rows.push(NbdBenchRow {
            target: format!("nbd {}", b.device.name()),
            iodepth: d,
            result: r,
        });
    }
    server.shutdown()?;
    let r = fio_randwrite(&FioTarget::File(b.raw_file.clone()), &params(1))
        .map_err(|e| NbdError::Fio(format!("fio psync on the raw file: {e}")))?;
    rows.push(NbdBenchRow {
        target: format!("raw file {}", b.raw_file.display()),
        iodepth: 1,
        result: r,
    });
    Ok(NbdBenchReport {
        bs: b.bs,
        size: b.size,
        runtime_s: b.runtime.as_secs_f64(),
        rows,
    })
}

impl NbdBenchReport {
    /// IOPS of the raw file (the last row).
    fn raw_iops(&self) -> f64 {
        self.rows.last().map(|r| r.result.write.iops).unwrap_or(0.0)
    }

    /// A row's IOPS relative to the raw file's.
    fn ratio(&self, r: &NbdBenchRow) -> f64 {
        let raw = self.raw_iops();
        if raw > 0.0 {
            r.result.write.iops / raw
        } else {
            0.0
        }
    }

    /// The `--json` report.
    pub fn to_json(&self) -> serde_json::Value {
        let rows: Vec<_> = self
            .rows
            .iter()
            .map(|r| {
                let w = &r.result.write;
                serde_json::json!({
                    "target": r.target, "iodepth": r.iodepth, "iops": w.iops,
                    "bw_bytes": w.bw_bytes, "lat_mean_us": w.lat_mean_us,
                    "clat_p99_us": w.clat_p99_us, "ratio_vs_raw": self.ratio(r),
                    "command": r.result.command,
                })
            })
            .collect();
        serde_json::json!({
            "bs": self.bs, "size": self.size, "runtime_s": self.runtime_s, "rows": rows,
        })
    }

    /// The text report: a table of the runs, then their fio command lines.
    pub fn text(&self) -> String {
        use ecstack_base::fmt_size;
        let mut s = format!(
            "fio randwrite bs={} size={} runtime={}s\n",
            fmt_size(self.bs),
            fmt_size(self.size),
            self.runtime_s
        );
        s.push_str(&format!(
            "{:<40} {:>7} {:>10} {:>9} {:>10} {:>8}\n",
            "target", "iodepth", "IOPS", "MiB/s", "p99 us", "vs raw"
        ));
        for r in &self.rows {
            let w = &r.result.write;
            s.push_str(&format!(
                "{:<40} {:>7} {:>10.0} {:>9.1} {:>10.1} {:>7.2}x\n",
                r.target,
                r.iodepth,
                w.iops,
                w.bw_bytes / (1 << 20) as f64,
                w.clat_p99_us,
                self.ratio(r)
            ));
        }
        for r in &self.rows {
            s.push_str(&format!("  {}\n", r.result.command));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fio_json() {
        let text = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{
  "fio version" : "fio-3.33",
  "jobs" : [
    { "jobname" : "randwrite", "error" : 0,
      "read" : { "iops" : 0.0, "bw_bytes" : 0, "total_ios" : 0, "lat_ns" : { "mean" : 0.0 }, "clat_ns" : {} },
      "write" : { "iops" : 12345.5, "bw_bytes" : 50567168, "total_ios" : 61727,
                  "lat_ns" : { "mean" : 80000.0 },
                  "clat_ns" : { "percentile" : { "99.000000" : 250880 } } } }
  ]
}"#;
        let r = parse_fio_json(text).unwrap();
        assert_eq!(r.write.iops, 12345.5);
        assert_eq!(r.write.total_ios, 61727);
        assert!((r.write.lat_mean_us - 80.0).abs() < 1e-9);
        assert!((r.write.clat_p99_us - 250.88).abs() < 1e-9);
        assert_eq!(job_error(text), None);
        assert!(parse_fio_json("garbage").is_err());
    }

    #[test]
    fn target_parsing_and_args() {
        assert_eq!(
            FioTarget::parse("nbd://127.0.0.1:1/x"),
            FioTarget::Nbd("nbd://127.0.0.1:1/x".into())
        );
        assert_eq!(
            FioTarget::parse("/tmp/f"),
            FioTarget::File(PathBuf::from("/tmp/f"))
        );
        let a = randwrite_args(&FioTarget::parse("/tmp/f"), &FioParams::default());
        assert!(a.contains(&"--ioengine=psync".to_string()));
        assert!(!a.iter().any(|x| x.starts_with("--iodepth")));
        assert_eq!(shell_quote("a b"), "'a b'");
    }

    #[test]
    fn bench_report_compares_with_the_raw_file() {
        let row = |target: &str, iodepth, iops| NbdBenchRow {
            target: target.into(),
            iodepth,
            result: FioResult {
                write: FioSide {
                    iops,
                    bw_bytes: iops * 4096.0,
                    ..FioSide::default()
                },
                command: format!("fio {target}"),
                ..FioResult::default()
            },
        };
        let r = NbdBenchReport {
            bs: 4096,
            size: 64 << 20,
            runtime_s: 2.5,
            rows: vec![row("nbd mem", 16, 3000.0), row("raw file /f", 1, 1500.0)],
        };
        let j = r.to_json();
        assert_eq!(j["rows"][0]["ratio_vs_raw"], 2.0);
        assert_eq!(j["rows"][1]["ratio_vs_raw"], 1.0);
        assert_eq!(j["runtime_s"], 2.5);
        let t = r.text();
        assert!(
            t.starts_with("fio randwrite bs=4 KiB size=64 MiB runtime=2.5s\n"),
            "{t}"
        );
        assert!(t.contains("    2.00x\n"), "{t}");
        assert!(t.ends_with("  fio nbd mem\n  fio raw file /f\n"), "{t}");
    }
}
