//! `cluster.toml`: one file describes a cluster; every process of it reads the same file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Smallest and largest segment size (CodFS §4.4.5 uses 16–64 MB; we allow 1–64 MiB).
pub const MIN_SEGMENT_BYTES: u64 = 1 << 20;
pub const MAX_SEGMENT_BYTES: u64 = 64 << 20;
pub const DEFAULT_SEGMENT_BYTES: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read cluster config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cluster config {path} is not valid TOML for ecstack: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("cluster config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The erasure code every segment of the cluster uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeConfig {
    /// An ecstack codes family name (`rs-vand`, `rs-cauchy`, `xor`, `raid6`, `rdp`).
    pub family: String,
    pub k: u32,
    pub m: u32,
}

/// Where chunks go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementConfig {
    /// OSD label that names a failure domain (`host` or `rack`); chunks of one segment are spread
    /// over distinct domains when there are at least n of them.
    #[serde(default)]
    pub failure_domain: Option<String>,
}

/// The metadata server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MdsConfig {
    /// Address of the MDS gRPC service (clients and OSDs connect here).
    pub addr: String,
    /// Loopback address of its Prometheus metrics endpoint.
    pub metrics_addr: String,
    /// SQLite database file, relative to the config's directory unless absolute.
    pub store: PathBuf,
    /// OSDs heartbeat this often.
    pub heartbeat_ms: u64,
    /// An OSD that misses heartbeats this long is marked down (degraded reads, primary promotion).
    pub down_after_ms: u64,
    /// A down OSD is declared out after this long (its chunks are rebuilt elsewhere).
    pub out_after_ms: u64,
    /// Recovery bandwidth limit per primary OSD, bytes per second (0 = unlimited).
    #[serde(default)]
    pub recovery_bytes_per_sec: u64,
}

/// Every OSD of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OsdConfig {
    /// Whole chunks are written with `O_DIRECT` (where the file system takes it); `false`: through
    /// the page cache (for A/B measurements). `ecstack osd --direct-io` overrides it.
    #[serde(default = "yes")]
    pub direct_io: bool,
}

fn yes() -> bool {
    true
}

impl Default for OsdConfig {
    fn default() -> Self {
        OsdConfig { direct_io: true }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub cluster_id: String,
    pub code: CodeConfig,
    pub segment_bytes: u64,
    pub placement: PlacementConfig,
    pub mds: MdsConfig,
    /// `[osd]`, optional.
    #[serde(default)]
    pub osd: OsdConfig,
    /// Directory with `ca.pem` and one `<name>.pem` / `<name>.key` per process, relative to the
    /// config's directory unless absolute.
    pub certs: PathBuf,
    /// Where this config was read from (not stored).
    #[serde(skip)]
    pub dir: PathBuf,
}

impl ClusterConfig {
    pub fn load(path: &Path) -> Result<ClusterConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config: ClusterConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.message().to_string(),
        })?;
        config.dir = path.parent().map(Path::to_owned).unwrap_or_default();
        config.validate().map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })?;
        Ok(config)
    }

    /// Checks every value a process relies on; returns one line naming the problem.
    pub fn validate(&self) -> Result<(), String> {
        let c = &self.code;
        if c.k == 0 || c.m == 0 || c.k + c.m > 255 {
            return Err(format!(
                "code k={} m={}: need k ≥ 1, m ≥ 1 and k + m ≤ 255",
                c.k, c.m
            ));
        }
        if !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&self.segment_bytes) {
            return Err(format!(
                "segment_bytes = {} is outside {}..={} (1–64 MiB)",
                self.segment_bytes, MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES
            ));
        }
        let m = &self.mds;
        if m.heartbeat_ms == 0
            || m.down_after_ms <= m.heartbeat_ms
            || m.out_after_ms < m.down_after_ms
        {
            return Err(format!(
                "mds timing: need 0 < heartbeat_ms ({}) < down_after_ms ({}) ≤ out_after_ms ({})",
                m.heartbeat_ms, m.down_after_ms, m.out_after_ms
            ));
        }
        if let Some(d) = &self.placement.failure_domain {
            if d != "host" && d != "rack" {
                return Err(format!(
                    "placement.failure_domain = {d:?}: expected \"host\" or \"rack\""
                ));
            }
        }
        Ok(())
    }

    /// A path from the config, resolved against the config's directory.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.dir.join(p)
        }
    }

    pub fn certs_dir(&self) -> PathBuf {
        self.resolve(&self.certs)
    }

    pub fn n(&self) -> u32 {
        self.code.k + self.code.m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
cluster_id = "c"
segment_bytes = 1048576
certs = "certs"
[code]
family = "rs-vand"
k = 2
m = 1
[placement]
[mds]
addr = "127.0.0.1:7100"
metrics_addr = "127.0.0.1:0"
store = "mds.db"
heartbeat_ms = 500
down_after_ms = 3000
out_after_ms = 30000
"#;

    /// `[osd]` is optional and `direct_io` defaults to on; unknown keys in it are refused.
    #[test]
    fn osd_direct_io_defaults_on_and_can_be_turned_off() {
        let c: ClusterConfig = toml::from_str(BASE).unwrap();
        assert!(c.osd.direct_io);
        let c: ClusterConfig = toml::from_str(&format!("{BASE}[osd]\n")).unwrap();
        assert!(c.osd.direct_io);
        let c: ClusterConfig =
            toml::from_str(&format!("{BASE}[osd]\ndirect_io = false\n")).unwrap();
        assert!(!c.osd.direct_io);
        let e =
            toml::from_str::<ClusterConfig>(&format!("{BASE}[osd]\ndirect = false\n")).unwrap_err();
        assert!(e.message().contains("unknown field"), "{e}");
    }
}
