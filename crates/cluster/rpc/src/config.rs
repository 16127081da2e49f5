//! `cluster.toml`: one file describes a cluster; every process of it reads the same file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::UpdateScheme;

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
    /// Address of the MDS gRPC service (clients and OSDs connect here). With `addrs` it is the
    /// first of them ([`ClusterConfig::load`] fills it in).
    #[serde(default)]
    pub addr: String,
    /// The addresses of an active and its standby MDSs, on one PostgreSQL store (docs/cluster.md
    /// "Active and standby MDSs"); clients and OSDs try them in turn. Empty: the one `addr`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addrs: Vec<String>,
    /// How long the active MDS's lease in the store lasts after each renewal, ms (renewed every
    /// third of it). A standby takes over this long after the active stopped renewing.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// Loopback address of its Prometheus metrics endpoint.
    pub metrics_addr: String,
    /// Where the metadata lives ([`ClusterConfig::mds_store`]): a SQLite database file, relative
    /// to the config's directory unless absolute, or a PostgreSQL database
    /// (`postgresql://user@host:port/db`, or `postgresql://user@/db?host=/socket/dir`).
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
    /// A chunk or robust block file an OSD's inventory reports, whose segment or object the
    /// metadata does not know, is deleted once it has been seen unknown this long, ms (docs/cluster.md
    /// "Orphans"; > 0).
    #[serde(default = "default_orphan_grace_ms")]
    pub orphan_grace_ms: u64,
}

/// `[mds] orphan_grace_ms` by default: an hour.
pub const DEFAULT_ORPHAN_GRACE_MS: u64 = 60 * 60 * 1000;

fn default_orphan_grace_ms() -> u64 {
    DEFAULT_ORPHAN_GRACE_MS
}

/// `[mds] lease_ms` by default: a standby MDS takes over within about this long (plus a poll of a
/// sixth of it) after the active one died.
pub const DEFAULT_MDS_LEASE_MS: u64 = 3_000;

fn default_lease_ms() -> u64 {
    DEFAULT_MDS_LEASE_MS
}

/// The metadata store `[mds] store` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MdsStore {
    /// A SQLite database file (resolved against the config's directory).
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL.
    PostgreSql(String),
}

/// Whether a `[mds] store` value names a PostgreSQL database (`postgresql://` or `postgres://`).
pub fn is_postgresql_url(store: &str) -> bool {
    store.starts_with("postgresql://") || store.starts_with("postgres://")
}

/// Every OSD of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OsdConfig {
    /// Whole chunks are written with `O_DIRECT` (where the file system takes it); `false`: through
    /// the page cache (for A/B measurements). `ecstack osd --direct-io` overrides it.
    #[serde(default = "yes")]
    pub direct_io: bool,
    /// Admission control of robust objects' block streams (docs/robustore.md "Admission control
    /// on OSDs"): a new stream is admitted only if every admitted one keeps at least
    /// `admission_floor_bytes_per_s` of the store's measured throughput. `ecstack osd
    /// --admission` overrides it.
    #[serde(default = "yes")]
    pub admission: bool,
    /// The throughput each admitted block stream must keep, bytes/s (> 0).
    #[serde(default = "default_admission_floor")]
    pub admission_floor_bytes_per_s: u64,
    /// Worker threads of the OSD's block I/O queue (1–256).
    #[serde(default = "default_block_io_threads")]
    pub block_io_threads: u32,
    /// How often each OSD sends the MDS its inventory (the segments it holds chunks of, the
    /// robust objects it holds blocks of), ms; also once after it registers (> 0).
    #[serde(default = "default_inventory_period_ms")]
    pub inventory_period_ms: u64,
}

/// `[osd] inventory_period_ms` by default: ten minutes.
pub const DEFAULT_INVENTORY_PERIOD_MS: u64 = 10 * 60 * 1000;

fn default_inventory_period_ms() -> u64 {
    DEFAULT_INVENTORY_PERIOD_MS
}

/// `[osd] admission_floor_bytes_per_s` by default: 4 MiB/s.
pub const DEFAULT_ADMISSION_FLOOR_BYTES_PER_S: u64 = 4 << 20;
/// `[osd] block_io_threads` by default.
pub const DEFAULT_BLOCK_IO_THREADS: u32 = 4;

fn yes() -> bool {
    true
}

fn default_admission_floor() -> u64 {
    DEFAULT_ADMISSION_FLOOR_BYTES_PER_S
}

fn default_block_io_threads() -> u32 {
    DEFAULT_BLOCK_IO_THREADS
}

impl Default for OsdConfig {
    fn default() -> Self {
        OsdConfig {
            direct_io: true,
            admission: true,
            admission_floor_bytes_per_s: DEFAULT_ADMISSION_FLOOR_BYTES_PER_S,
            block_io_threads: DEFAULT_BLOCK_IO_THREADS,
            inventory_period_ms: DEFAULT_INVENTORY_PERIOD_MS,
        }
    }
}

impl OsdConfig {
    /// One line naming the first bad value.
    pub fn validate(&self) -> Result<(), String> {
        if self.admission_floor_bytes_per_s == 0 {
            return Err("osd.admission_floor_bytes_per_s = 0: must be positive".into());
        }
        if !(1..=256).contains(&self.block_io_threads) {
            return Err(format!(
                "osd.block_io_threads = {}: must be 1..=256",
                self.block_io_threads
            ));
        }
        if self.inventory_period_ms == 0 {
            return Err("osd.inventory_period_ms = 0: must be positive".into());
        }
        Ok(())
    }
}

/// The unit of reserved space: a reserve's size, and what a shrink takes off, are multiples of
/// it (the file system block that `fallocate` punches).
pub const RESERVE_UNIT_BYTES: u64 = 4096;
/// `[update.reserve] size_bytes` by default: the seed's fixed reserve (§5.2, 4 MB, one chunk).
pub const DEFAULT_RESERVE_BYTES: u64 = 4 << 20;
/// `[update.reserve] alpha` by default: Algorithm 1's smoothing factor in the seed (§5.3.2).
pub const DEFAULT_RESERVE_ALPHA: f64 = 0.3;
/// `[update.reserve] u0` by default: a reserve starts as if fully used (`ecstack_sim::reserve`).
pub const DEFAULT_RESERVE_U0: f64 = 1.0;
/// `[update.reserve] shrink_hours` by default: 00:00 and 12:00 (§5.3.2), UTC.
pub const DEFAULT_SHRINK_HOURS: [u32; 2] = [0, 12];

/// `[update]`, optional: how the files' small updates are stored (CodFS §2.1.2, §4.1;
/// docs/cluster.md "Update schemes"). Without it a cluster behaves as before the section existed:
/// every file is `fo`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateConfig {
    /// The scheme of a new file whose put names none (`cluster put --update-scheme` does): `fo`
    /// (default), `fl`, `codfs-pl` or `plr`. A file keeps the scheme it was created with.
    #[serde(default)]
    pub scheme: UpdateScheme,
    /// `[update.reserve]`: reserved space next to each PLR parity chunk, with Algorithm 1 (§4.1.2)
    /// shrinking it. Read by every OSD; applies to the parity chunks of `plr` files.
    #[serde(default)]
    pub reserve: ReserveConfig,
    /// How often each OSD's Monitor Module merges the FL / CodFS PL logs that grew past its
    /// thresholds (the GC), ms; default 10 s. Experiments that measure logs as the updates left
    /// them (CodFS Table 5.1's F_avg) set it far beyond the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gc_period_ms: Option<u64>,
}

/// `[update.reserve]`: PLR's reserved space and Algorithm 1's parameters (§4.1.2). Every field is
/// optional. Algorithm 1, every shrink time, per PLR parity chunk p with reserve r_t(p) > 0:
/// u_t(p) = α·use(p)/r_t(p) + (1 − α)·u_{t−1}(p), c(p) = ⌊(1 − u_t(p))·r_t(p) / g⌋·g with g =
/// `granularity_bytes`, shrink by c(p), then merge (unless `shrink_only`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReserveConfig {
    /// The reserve a PLR parity chunk starts with, bytes: a multiple of 4096 and of
    /// `granularity_bytes` (default 4 MiB, the seed's fixed reserve in §5.2). 0: no reserve, so
    /// PLR updates parity in place as FO does.
    pub size_bytes: u64,
    /// α, the smoothing factor of the utility, in [0, 1] (default 0.3, §5.3.2).
    pub alpha: f64,
    /// u_0, the utility a new reserve starts with, in [0, 1] (default 1.0: a reserve starts as if
    /// fully used, so its first shrink takes off at most α of it; see `ecstack_sim::reserve`).
    pub u0: f64,
    /// The seed's "ChunkSize" in c(p): a shrink takes off a multiple of it, bytes; a positive
    /// multiple of 4096 (default 4096, one file system block: the finest step `fallocate` can
    /// punch). The seed's literal choice, the coding chunk size, is this set to the chunk size:
    /// then a reserve of one chunk never shrinks while it is used at all.
    pub granularity_bytes: u64,
    /// Hours of the day (UTC, 0–23, ascending) at which every OSD runs Algorithm 1 (default 0 and
    /// 12: the seed's 00:00 and 12:00). Not with `shrink_period_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shrink_hours: Option<Vec<u32>>,
    /// Instead of `shrink_hours`: run Algorithm 1 every this many ms from the OSD's start
    /// (experiments and tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shrink_period_ms: Option<u64>,
    /// Shrink without the merge that follows (the seed's "shrink only" variant, §5.3.2): deltas
    /// held stay, so a shrink never cuts below them.
    pub shrink_only: bool,
    /// Merge ahead: once a delta leaves a reserve at least this fraction full, the OSD's Monitor
    /// Module merges it off the update path (as Algorithm 1's merge is), so that the update which
    /// would have found it full does not wait for the merge. In (0, 1]; 0 (the default): a
    /// reserve is merged only when a delta does not fit (the seed's §5.2 setting).
    pub merge_ahead: f64,
}

impl Default for ReserveConfig {
    fn default() -> Self {
        ReserveConfig {
            size_bytes: DEFAULT_RESERVE_BYTES,
            alpha: DEFAULT_RESERVE_ALPHA,
            u0: DEFAULT_RESERVE_U0,
            granularity_bytes: RESERVE_UNIT_BYTES,
            shrink_hours: None,
            shrink_period_ms: None,
            shrink_only: false,
            merge_ahead: 0.0,
        }
    }
}

/// When Algorithm 1 runs on an OSD ([`ReserveConfig::schedule`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShrinkSchedule {
    /// At these hours of the day, UTC (ascending, each 0..=23).
    Hours(Vec<u32>),
    /// Every this long from the OSD's start.
    Period(std::time::Duration),
}

impl ReserveConfig {
    /// When Algorithm 1 runs: `shrink_period_ms`, else `shrink_hours`, else 00:00 and 12:00.
    pub fn schedule(&self) -> ShrinkSchedule {
        match (&self.shrink_period_ms, &self.shrink_hours) {
            (Some(ms), _) => ShrinkSchedule::Period(std::time::Duration::from_millis(*ms)),
            (None, Some(h)) => ShrinkSchedule::Hours(h.clone()),
            (None, None) => ShrinkSchedule::Hours(DEFAULT_SHRINK_HOURS.to_vec()),
        }
    }

    /// One line naming the first bad value, prefixed `update.reserve.`.
    pub fn validate(&self) -> Result<(), String> {
        let g = self.granularity_bytes;
        if g == 0 || g % RESERVE_UNIT_BYTES != 0 {
            return Err(format!(
                "update.reserve.granularity_bytes = {g} is not a positive multiple of 4 KiB ({RESERVE_UNIT_BYTES} bytes)"
            ));
        }
        if self.size_bytes % RESERVE_UNIT_BYTES != 0 {
            return Err(format!(
                "update.reserve.size_bytes = {} is not a multiple of 4 KiB ({RESERVE_UNIT_BYTES} bytes)",
                self.size_bytes
            ));
        }
        if self.size_bytes % g != 0 {
            return Err(format!(
                "update.reserve.size_bytes = {} is not a multiple of granularity_bytes ({g})",
                self.size_bytes
            ));
        }
        for (name, v) in [
            ("alpha", self.alpha),
            ("u0", self.u0),
            ("merge_ahead", self.merge_ahead),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("update.reserve.{name} = {v} is not in [0, 1]"));
            }
        }
        match (&self.shrink_hours, self.shrink_period_ms) {
            (Some(_), Some(_)) => {
                return Err("update.reserve: set shrink_hours or shrink_period_ms, not both".into())
            }
            (_, Some(0)) => {
                return Err("update.reserve.shrink_period_ms = 0: must be positive".into())
            }
            (Some(h), None) => {
                if h.is_empty() || h.iter().any(|&x| x > 23) || h.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(format!(
                        "update.reserve.shrink_hours = {h:?}: need ascending hours of the day, each 0..=23"
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// `[update]`, optional: the default update scheme and PLR's reserved space.
    #[serde(default)]
    pub update: UpdateConfig,
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
        if config.mds.addr.is_empty() {
            if let Some(first) = config.mds.addrs.first() {
                config.mds.addr = first.clone();
            }
        }
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
        if m.addr.is_empty() && m.addrs.is_empty() {
            return Err("[mds]: give addr (one MDS) or addrs (an active and its standbys)".into());
        }
        if !m.addrs.is_empty() && !m.addr.is_empty() && !m.addrs.contains(&m.addr) {
            return Err(format!(
                "[mds]: addr = {:?} is not one of addrs = {:?} (give one of them, or addrs only)",
                m.addr, m.addrs
            ));
        }
        if m.addrs.len() > 1 && !matches!(self.mds_store(), MdsStore::PostgreSql(_)) {
            return Err(format!(
                "[mds] addrs lists {} MDSs, but a standby MDS needs a PostgreSQL store (store = \"postgresql://…\"); SQLite is one MDS's file",
                m.addrs.len()
            ));
        }
        if m.orphan_grace_ms == 0 {
            return Err("[mds] orphan_grace_ms = 0: must be positive".into());
        }
        if m.lease_ms < 3 {
            return Err(format!(
                "[mds] lease_ms = {}: need at least 3 (it is renewed every third of it)",
                m.lease_ms
            ));
        }
        if let Some(d) = &self.placement.failure_domain {
            if d != "host" && d != "rack" {
                return Err(format!(
                    "placement.failure_domain = {d:?}: expected \"host\" or \"rack\""
                ));
            }
        }
        self.osd.validate()?;
        self.update.reserve.validate()
    }

    /// A path from the config, resolved against the config's directory.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.dir.join(p)
        }
    }

    /// The metadata store of the MDS: a PostgreSQL URL as written, else a SQLite file.
    pub fn mds_store(&self) -> MdsStore {
        match self.mds.store.to_str() {
            Some(s) if is_postgresql_url(s) => MdsStore::PostgreSql(s.to_owned()),
            _ => MdsStore::Sqlite(self.resolve(&self.mds.store)),
        }
    }

    /// The MDS addresses clients and OSDs try, in order: `[mds] addrs`, or the one `addr`.
    pub fn mds_addrs(&self) -> Vec<String> {
        if self.mds.addrs.is_empty() {
            vec![self.mds.addr.clone()]
        } else {
            self.mds.addrs.clone()
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
        // Admission control: on, 4 MiB/s per stream, 4 block I/O threads unless told.
        assert!(c.osd.admission);
        assert_eq!(c.osd.admission_floor_bytes_per_s, 4 << 20);
        assert_eq!(c.osd.block_io_threads, 4);
        let c: ClusterConfig = toml::from_str(&format!(
            "{BASE}[osd]\nadmission = false\nadmission_floor_bytes_per_s = 1000\nblock_io_threads = 8\n"
        ))
        .unwrap();
        assert_eq!(
            (
                c.osd.admission,
                c.osd.admission_floor_bytes_per_s,
                c.osd.block_io_threads
            ),
            (false, 1000, 8)
        );
        let zero = OsdConfig {
            admission_floor_bytes_per_s: 0,
            ..OsdConfig::default()
        };
        assert!(zero
            .validate()
            .unwrap_err()
            .contains("admission_floor_bytes_per_s = 0"));
        let many = OsdConfig {
            block_io_threads: 1000,
            ..OsdConfig::default()
        };
        assert!(many
            .validate()
            .unwrap_err()
            .contains("block_io_threads = 1000"));
    }

    /// Orphan deletion's two knobs: an hour's grace at the MDS, an inventory every ten minutes
    /// from each OSD, unless told; zero is refused, naming the key.
    #[test]
    fn orphan_grace_and_inventory_period_default_and_must_be_positive() {
        let c = parse("").unwrap();
        assert_eq!(c.mds.orphan_grace_ms, 3_600_000);
        assert_eq!(c.osd.inventory_period_ms, 600_000);
        let with = BASE.replace("[mds]\n", "[mds]\norphan_grace_ms = 5000\n");
        let c: ClusterConfig =
            toml::from_str(&format!("{with}[osd]\ninventory_period_ms = 700\n")).unwrap();
        c.validate().unwrap();
        assert_eq!(
            (c.mds.orphan_grace_ms, c.osd.inventory_period_ms),
            (5000, 700)
        );
        let zero = BASE.replace("[mds]\n", "[mds]\norphan_grace_ms = 0\n");
        let c: ClusterConfig = toml::from_str(&zero).unwrap();
        assert!(c.validate().unwrap_err().contains("orphan_grace_ms = 0"));
        let e = parse("[osd]\ninventory_period_ms = 0\n").unwrap_err();
        assert!(e.contains("inventory_period_ms = 0"), "{e}");
    }

    fn parse(extra: &str) -> Result<ClusterConfig, String> {
        let c: ClusterConfig =
            toml::from_str(&format!("{BASE}{extra}")).map_err(|e| e.message().to_string())?;
        c.validate()?;
        Ok(c)
    }

    #[test]
    fn the_mds_store_is_a_file_or_a_postgresql_url() {
        let mut c = parse("").unwrap();
        c.dir = PathBuf::from("/etc/ecstack");
        assert_eq!(
            c.mds_store(),
            MdsStore::Sqlite(PathBuf::from("/etc/ecstack/mds.db"))
        );
        for url in [
            "postgresql://mds@db:5432/ecstack",
            "postgres://mds@/e?host=/run/pg",
        ] {
            c.mds.store = PathBuf::from(url);
            assert_eq!(c.mds_store(), MdsStore::PostgreSql(url.to_owned()));
        }
    }

    /// `[mds] addrs` lists an active and its standbys (PostgreSQL only); `addr` alone still works.
    #[test]
    fn mds_addrs_list_standbys_on_postgresql_only() {
        let c = parse("").unwrap();
        assert_eq!(c.mds_addrs(), vec!["127.0.0.1:7100".to_owned()]);
        assert_eq!(c.mds.lease_ms, DEFAULT_MDS_LEASE_MS);
        let two = BASE
            .replace(
                "addr = \"127.0.0.1:7100\"\n",
                "addrs = [\"a:1\", \"b:2\"]\n",
            )
            .replace("store = \"mds.db\"", "store = \"postgresql://mds@db/e\"");
        let c: ClusterConfig = toml::from_str(&two).unwrap();
        c.validate().unwrap();
        assert_eq!(c.mds_addrs(), vec!["a:1".to_owned(), "b:2".to_owned()]);
        let sqlite = BASE.replace(
            "addr = \"127.0.0.1:7100\"\n",
            "addrs = [\"a:1\", \"b:2\"]\n",
        );
        let c: ClusterConfig = toml::from_str(&sqlite).unwrap();
        let e = c.validate().unwrap_err();
        assert!(e.contains("needs a PostgreSQL store"), "{e}");
        let e = parse("").map(|mut c| {
            c.mds.addrs = vec!["x:1".into()];
            c.validate()
        });
        assert!(e.unwrap().unwrap_err().contains("is not one of addrs"));
        let none = BASE.replace("addr = \"127.0.0.1:7100\"\n", "");
        let c: ClusterConfig = toml::from_str(&none).unwrap();
        assert!(c.validate().unwrap_err().contains("give addr"));
    }

    /// Without `[update]` a cluster is what it was: every file fo, the seed's reserve defaults.
    #[test]
    fn update_defaults_to_fo_with_the_seeds_reserve() {
        let c = parse("").unwrap();
        assert_eq!(c.update.scheme, UpdateScheme::Fo);
        let r = &c.update.reserve;
        assert_eq!(r.size_bytes, 4 << 20);
        assert_eq!((r.alpha, r.u0), (0.3, 1.0));
        assert_eq!(r.granularity_bytes, 4096);
        assert!(!r.shrink_only);
        assert_eq!(r.schedule(), ShrinkSchedule::Hours(vec![0, 12]));
        assert_eq!(parse("[update]\n").unwrap().update, UpdateConfig::default());
        assert_eq!(
            parse("[update.reserve]\n").unwrap().update,
            UpdateConfig::default()
        );
    }

    #[test]
    fn update_scheme_and_reserve_are_read_and_written_back() {
        let c = parse(
            "[update]\nscheme = \"plr\"\n[update.reserve]\nsize_bytes = 16777216\nalpha = 0.5\nu0 = 0.0\ngranularity_bytes = 1048576\nshrink_period_ms = 60000\nshrink_only = true\nmerge_ahead = 0.9\n",
        )
        .unwrap();
        assert_eq!(c.update.scheme, UpdateScheme::Plr);
        let r = &c.update.reserve;
        assert_eq!((r.size_bytes, r.granularity_bytes), (16 << 20, 1 << 20));
        assert_eq!((r.alpha, r.u0, r.shrink_only), (0.5, 0.0, true));
        assert_eq!(r.merge_ahead, 0.9);
        assert_eq!(
            r.schedule(),
            ShrinkSchedule::Period(std::time::Duration::from_secs(60))
        );
        let text = toml::to_string_pretty(&c).unwrap();
        assert!(text.contains("scheme = \"plr\""), "{text}");
        let back: ClusterConfig = toml::from_str(&text).unwrap();
        assert_eq!(back.update, c.update);
        let c = parse("[update.reserve]\nshrink_hours = [3, 15, 21]\n").unwrap();
        assert_eq!(
            c.update.reserve.schedule(),
            ShrinkSchedule::Hours(vec![3, 15, 21])
        );
        for s in ["fo", "fl", "codfs-pl", "plr"] {
            let c = parse(&format!("[update]\nscheme = \"{s}\"\n")).unwrap();
            assert_eq!(c.update.scheme.name(), s);
        }
    }

    /// Each bad value fails with one line naming it.
    #[test]
    fn bad_update_values_are_refused_with_one_line() {
        let cases: &[(&str, &str)] = &[
            (
                "[update]\nscheme = \"pl\"\n",
                "`pl` is ambiguous: CodFS's parity logging is `codfs-pl`",
            ),
            (
                "[update]\nscheme = \"raid5\"\n",
                "unknown update scheme `raid5` (known: fo, fl, codfs-pl, plr)",
            ),
            (
                "[update.reserve]\nsize_bytes = 1000\n",
                "update.reserve.size_bytes = 1000 is not a multiple of 4 KiB",
            ),
            (
                "[update.reserve]\nsize_bytes = 12288\ngranularity_bytes = 8192\n",
                "not a multiple of granularity_bytes (8192)",
            ),
            (
                "[update.reserve]\ngranularity_bytes = 0\n",
                "granularity_bytes = 0 is not a positive multiple of 4 KiB",
            ),
            (
                "[update.reserve]\ngranularity_bytes = 6000\n",
                "granularity_bytes = 6000 is not a positive multiple of 4 KiB",
            ),
            (
                "[update.reserve]\nalpha = 1.5\n",
                "update.reserve.alpha = 1.5 is not in [0, 1]",
            ),
            (
                "[update.reserve]\nalpha = -0.1\n",
                "update.reserve.alpha = -0.1 is not in [0, 1]",
            ),
            (
                "[update.reserve]\nalpha = nan\n",
                "update.reserve.alpha = NaN is not in [0, 1]",
            ),
            (
                "[update.reserve]\nu0 = 2.0\n",
                "update.reserve.u0 = 2 is not in [0, 1]",
            ),
            (
                "[update.reserve]\nmerge_ahead = 1.5\n",
                "update.reserve.merge_ahead = 1.5 is not in [0, 1]",
            ),
            (
                "[update.reserve]\nshrink_hours = [12, 0]\n",
                "need ascending hours of the day",
            ),
            (
                "[update.reserve]\nshrink_hours = [24]\n",
                "need ascending hours of the day",
            ),
            (
                "[update.reserve]\nshrink_hours = []\n",
                "need ascending hours of the day",
            ),
            (
                "[update.reserve]\nshrink_period_ms = 0\n",
                "shrink_period_ms = 0: must be positive",
            ),
            (
                "[update.reserve]\nshrink_hours = [0]\nshrink_period_ms = 10\n",
                "not both",
            ),
            ("[update.reserve]\nsize = 4096\n", "unknown field `size`"),
            (
                "[update]\nreserve_bytes = 4096\n",
                "unknown field `reserve_bytes`",
            ),
        ];
        for (extra, want) in cases {
            let e = parse(extra).unwrap_err();
            assert!(e.contains(want), "{extra:?}: {e:?} lacks {want:?}");
            assert!(!e.contains('\n'), "{extra:?}: {e:?} is more than one line");
        }
        // A reserve of 0 is PLR without reserve (FO behaviour), and valid.
        assert!(parse("[update.reserve]\nsize_bytes = 0\n").is_ok());
    }
}
