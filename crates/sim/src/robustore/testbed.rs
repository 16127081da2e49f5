//! Fixed per-disk rates ([`super::Variation::Fixed`]): a testbed of disks each serving at its own
//! constant rate, with an optional extra round trip, as `ecstack sim robustore --disk-mbps LIST` or
//! `--disk-mbps @testbed.json` gives them. The lab's heterogeneous cluster writes the same JSON
//! (`testbed.json`), so the simulator runs on the disks the real cluster had.
//!
//! A fixed-rate disk transfers a request of b bytes in exactly b / rate seconds: no positioning, no
//! per-request overhead, no zone factor and no background load, the model of a rate-limited (throttled)
//! device whose limit is its whole cost. `delay_ms` adds to every round trip between the client and that
//! disk (on top of the configuration's RTT): half of it on the request or cancel, half on the reply.
//!
//! The JSON form:
//!
//! ```json
//! { "version": 1, "disks": [ { "mbps": 53.0, "delay_ms": 0.0 }, { "mbps": 0.52, "delay_ms": 2.0 } ] }
//! ```
//!
//! `mbps` is MB/s with MB = 2^20 bytes, as everywhere in the module ([`super::disk::MB`]).

use serde::{Deserialize, Serialize};

use super::error::{bad, SimError};

/// The testbed JSON's current version.
pub const TESTBED_VERSION: u32 = 1;

/// One disk of a testbed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestbedDisk {
    /// Its rate, MB/s (MB = 2^20 bytes).
    pub mbps: f64,
    /// Extra round-trip time between the client and this disk, ms.
    #[serde(default)]
    pub delay_ms: f64,
}

/// A pool of fixed-rate disks; each access draws its H disks from it at random.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestbedSpec {
    /// [`TESTBED_VERSION`].
    pub version: u32,
    pub disks: Vec<TestbedDisk>,
}

impl TestbedSpec {
    /// Disks of these rates (MB/s), no extra delay.
    pub fn from_rates(mbps: &[f64]) -> TestbedSpec {
        TestbedSpec {
            version: TESTBED_VERSION,
            disks: mbps
                .iter()
                .map(|&mbps| TestbedDisk {
                    mbps,
                    delay_ms: 0.0,
                })
                .collect(),
        }
    }

    /// `--disk-mbps`'s argument: a comma-separated list of MB/s, or `@FILE` naming a testbed JSON.
    pub fn parse_arg(arg: &str) -> Result<TestbedSpec, SimError> {
        match arg.strip_prefix('@') {
            Some(path) => TestbedSpec::load(std::path::Path::new(path)),
            None => TestbedSpec::parse_list(arg),
        }
    }

    /// A comma-separated list of MB/s ("53,0.52,12.7"), validated.
    pub fn parse_list(list: &str) -> Result<TestbedSpec, SimError> {
        if list.trim().is_empty() {
            return Err(bad(
                "disk-mbps",
                "empty list: give MB/s per disk, e.g. 53,0.52,12.7",
            ));
        }
        let mut rates = Vec::new();
        for (i, item) in list.split(',').enumerate() {
            let item = item.trim();
            let r: f64 = item.parse().map_err(|_| {
                bad(
                    "disk-mbps",
                    format!("disk {i}: {item:?} is not a number of MB/s"),
                )
            })?;
            rates.push(r);
        }
        let spec = TestbedSpec::from_rates(&rates);
        spec.validate()?;
        Ok(spec)
    }

    /// Read and validate a testbed JSON file.
    pub fn load(path: &std::path::Path) -> Result<TestbedSpec, SimError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad("disk-mbps", format!("{}: {e}", path.display())))?;
        TestbedSpec::from_json(&text)
            .map_err(|e| bad("disk-mbps", format!("{}: {}", path.display(), inner(&e))))
    }

    /// Parse and validate the JSON form.
    pub fn from_json(text: &str) -> Result<TestbedSpec, SimError> {
        let spec: TestbedSpec = serde_json::from_str(text)
            .map_err(|e| bad("disk-mbps", format!("not a testbed JSON: {e}")))?;
        spec.validate()?;
        Ok(spec)
    }

    /// The JSON form (what [`TestbedSpec::from_json`] reads).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a testbed serializes")
    }

    /// A known version, at least one disk, every rate finite and > 0, every delay finite and >= 0.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.version != TESTBED_VERSION {
            return Err(bad(
                "disk-mbps",
                format!(
                    "testbed version {} is not {TESTBED_VERSION}, the one this build reads",
                    self.version
                ),
            ));
        }
        if self.disks.is_empty() {
            return Err(bad("disk-mbps", "the testbed has no disks"));
        }
        for (i, d) in self.disks.iter().enumerate() {
            if !(d.mbps > 0.0 && d.mbps.is_finite()) {
                return Err(bad(
                    "disk-mbps",
                    format!("disk {i}: rate {} MB/s must be finite and > 0", d.mbps),
                ));
            }
            if !(d.delay_ms >= 0.0 && d.delay_ms.is_finite()) {
                return Err(bad(
                    "disk-mbps",
                    format!("disk {i}: delay {} ms must be finite and >= 0", d.delay_ms),
                ));
            }
        }
        Ok(())
    }
}

/// The message of a config error without its field (already named by the caller).
fn inner(e: &SimError) -> String {
    match e {
        SimError::Config { msg, .. } => msg.clone(),
        other => other.to_string(),
    }
}
