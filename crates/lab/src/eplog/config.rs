//! What an EPLOG experiment runs: typed settings, testbeds and experiment numbers, checked as a whole
//! by [`EplogConfig::validate`] before any work starts.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use ecstack_array::SchemeKind;
use serde::Serialize;

use crate::{LabError, Result};

fn config_error(field: &'static str, msg: String) -> LabError {
    LabError::Config { field, msg }
}

/// A RAID setting: k data chunks and m parity chunks per stripe (written `(k+m)` in reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Setting {
    pub k: usize,
    pub m: usize,
}

impl Setting {
    /// The setting of Exps 3, 4b/4c and 5 and of the targets.
    pub const SIX_TWO: Setting = Setting { k: 6, m: 2 };
    /// The four settings of EPLOG §5 (every one fits the pre-filled device files).
    pub const ALL: [Setting; 4] = [
        Setting { k: 4, m: 1 },
        Setting { k: 6, m: 1 },
        Setting { k: 4, m: 2 },
        Setting::SIX_TWO,
    ];
    /// The largest k and m the pre-filled device files of Exps 4–5 hold (8 main, 2 log files).
    pub const K_MAX: usize = 6;
    pub const M_MAX: usize = 2;

    pub fn n(self) -> usize {
        self.k + self.m
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}+{})", self.k, self.m)
    }
}

impl FromStr for Setting {
    type Err = LabError;

    /// `k+m`, e.g. `6+2`, within what the device files hold.
    fn from_str(s: &str) -> Result<Setting> {
        let parsed = s.split_once('+').and_then(|(k, m)| {
            Some(Setting {
                k: k.trim().parse().ok()?,
                m: m.trim().parse().ok()?,
            })
        });
        let st = parsed
            .ok_or_else(|| config_error("settings", format!("'{s}' is not k+m (e.g. 6+2)")))?;
        if !(1..=Setting::K_MAX).contains(&st.k) || !(1..=Setting::M_MAX).contains(&st.m) {
            return Err(config_error(
                "settings",
                format!(
                    "{}+{} is outside what the pre-filled device files hold (k <= {}, m <= {})",
                    st.k,
                    st.m,
                    Setting::K_MAX,
                    Setting::M_MAX
                ),
            ));
        }
        Ok(st)
    }
}

/// Where Exp 4 runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Testbed {
    /// Device files on this machine, opened with O_DIRECT.
    Files,
    /// EPLOG's testbed emulated: RAM devices charged the service times of its SSDs (main array) and
    /// HDDs (logs), Table 1.
    Paper,
}

impl FromStr for Testbed {
    type Err = LabError;

    fn from_str(s: &str) -> Result<Testbed> {
        match s.trim() {
            "files" => Ok(Testbed::Files),
            "paper" => Ok(Testbed::Paper),
            other => Err(config_error(
                "testbed",
                format!("unknown testbed '{other}' (expected files, paper)"),
            )),
        }
    }
}

/// One of EPLOG's §5 experiments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Exp {
    /// Exp 1: write traffic to SSDs.
    WriteTraffic,
    /// Exp 2: GC requests per SSD.
    Gc,
    /// Exp 3: parity commit frequency.
    CommitFrequency,
    /// Exp 4: requests/s.
    RequestsPerSecond,
    /// Exp 5: recovery throughput.
    Recovery,
    /// Exp 6: the key-value store (§4) on each scheme.
    KvStore,
}

impl Exp {
    pub const ALL: [Exp; 6] = [
        Exp::WriteTraffic,
        Exp::Gc,
        Exp::CommitFrequency,
        Exp::RequestsPerSecond,
        Exp::Recovery,
        Exp::KvStore,
    ];

    /// The experiment's number in EPLOG §5.
    pub fn number(self) -> u32 {
        self as u32 + 1
    }

    pub fn from_number(n: u32) -> Result<Exp> {
        Exp::ALL
            .into_iter()
            .find(|e| e.number() == n)
            .ok_or_else(|| {
                config_error("exp", format!("{n} is not one of EPLOG's experiments 1-6"))
            })
    }
}

/// Everything one `eplog` experiment run needs.
#[derive(Clone, Debug)]
pub struct EplogConfig {
    /// Small traces and a subset of the runs (Exps 4b/4c on FIN and MDS only).
    pub quick: bool,
    /// Trace scale relative to the published traces, in (0, 1].
    pub scale: f64,
    pub exps: Vec<Exp>,
    /// Settings of Exps 1, 2 and 4 (the others always use (6+2)).
    pub settings: Vec<Setting>,
    /// Schemes of Exps 1, 2 and 4.
    pub schemes: Vec<SchemeKind>,
    /// Exp 4 client counts beyond the one-client runs, which always happen.
    pub clients: Vec<usize>,
    /// eplog stripe buffer in the multi-client runs: batches written at once (0 = off).
    pub stripe_buffer: usize,
    /// Per-chunk checksums on in the trace replays and recovery runs (Exps 1-5; off only to measure
    /// what they cost; metadata-only simulated SSDs have them off whatever this says).
    pub checksums: bool,
    pub testbeds: Vec<Testbed>,
    /// Exp 6: pairs loaded and requests issued per run.
    pub kv: KvScale,
    /// Exp 6: which cells to run, and how often.
    pub kv_cells: KvCells,
    pub seed: u64,
    /// Directory for the device files of Exps 4–6; the files are removed afterwards.
    pub dir: PathBuf,
}

impl EplogConfig {
    /// The default trace scale: 0.004 with `quick`, 0.02 otherwise.
    pub fn default_scale(quick: bool) -> f64 {
        if quick {
            0.004
        } else {
            0.02
        }
    }

    /// Every experiment, setting, scheme and testbed at the default scale.
    pub fn new(quick: bool, dir: PathBuf) -> EplogConfig {
        EplogConfig {
            quick,
            scale: EplogConfig::default_scale(quick),
            exps: Exp::ALL.to_vec(),
            settings: Setting::ALL.to_vec(),
            schemes: SchemeKind::ALL.to_vec(),
            clients: vec![8, 32, 128],
            stripe_buffer: ecstack_array::scheme::DEFAULT_IN_FLIGHT,
            checksums: true,
            testbeds: vec![Testbed::Files, Testbed::Paper],
            kv: KvScale::default_for(quick),
            kv_cells: KvCells::default(),
            seed: 42,
            dir,
        }
    }

    /// Check what the types cannot: the scale's range and client counts of at least one.
    pub fn validate(&self) -> Result<()> {
        if !(self.scale > 0.0 && self.scale <= 1.0) {
            return Err(config_error(
                "scale",
                format!("{} is not in (0, 1]", self.scale),
            ));
        }
        if self.clients.contains(&0) {
            return Err(config_error(
                "clients",
                "0 is not a number of clients (use 1 or more)".into(),
            ));
        }
        self.kv.validate()?;
        self.kv_cells.validate()
    }

    pub fn wants(&self, e: Exp) -> bool {
        self.exps.contains(&e)
    }

    pub(crate) fn on(&self, t: Testbed) -> bool {
        self.wants(Exp::RequestsPerSecond) && self.testbeds.contains(&t)
    }
}

/// Pair sizes of Exp 6 (metadata + key + value), both chunk-aligned.
pub const PAIR_BYTES: [u64; 2] = [4096, 8192];
/// Object metadata cache sizes of Exp 6, percent of the pairs.
pub const CACHE_PCT: [u32; 5] = [0, 25, 50, 75, 100];

/// Exp 6's two workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvWorkload {
    /// UPDATE only.
    UpdateOnly,
    /// 50 % UPDATE, 50 % GET.
    Hybrid,
}

impl KvWorkload {
    pub const ALL: [KvWorkload; 2] = [KvWorkload::UpdateOnly, KvWorkload::Hybrid];
}

impl fmt::Display for KvWorkload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KvWorkload::UpdateOnly => "update-only",
            KvWorkload::Hybrid => "hybrid",
        })
    }
}

impl FromStr for KvWorkload {
    type Err = LabError;

    fn from_str(s: &str) -> Result<KvWorkload> {
        match s.trim() {
            "update-only" | "update" => Ok(KvWorkload::UpdateOnly),
            "hybrid" => Ok(KvWorkload::Hybrid),
            other => Err(config_error(
                "kv-workloads",
                format!("unknown workload '{other}' (expected update-only, hybrid)"),
            )),
        }
    }
}

impl Serialize for KvWorkload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        crate::serialize_display(self, s)
    }
}

/// Which Exp 6 cells run (pair size × workload × cache size, per testbed and scheme) and how many
/// times each. With `repeat` > 1 the arrays of every scheme are built and loaded first and each
/// cell then runs `repeat` rounds of md, pl, eplog in turn, so a change of the machine's load hits
/// every scheme alike (this holds the schemes' arrays at once: up to three times the device files
/// or RAM of one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvCells {
    pub pair_bytes: Vec<u64>,
    pub workloads: Vec<KvWorkload>,
    pub cache_pct: Vec<u32>,
    pub repeat: usize,
}

impl Default for KvCells {
    /// Every cell of the seed's Exp 6, once.
    fn default() -> KvCells {
        KvCells {
            pair_bytes: PAIR_BYTES.to_vec(),
            workloads: KvWorkload::ALL.to_vec(),
            cache_pct: CACHE_PCT.to_vec(),
            repeat: 1,
        }
    }
}

impl KvCells {
    /// The largest pair size accepted (a record of whole 4 KiB chunks).
    pub const PAIR_BYTES_MAX: u64 = 1 << 20;

    pub fn validate(&self) -> Result<()> {
        let empty = |field, what: &str| Err(config_error(field, format!("no {what} to run")));
        if self.pair_bytes.is_empty() {
            return empty("kv-pair-sizes", "pair size");
        }
        if self.workloads.is_empty() {
            return empty("kv-workloads", "workload");
        }
        if self.cache_pct.is_empty() {
            return empty("kv-cache", "cache size");
        }
        for &pb in &self.pair_bytes {
            if pb == 0 || pb % 4096 != 0 || pb > KvCells::PAIR_BYTES_MAX {
                return Err(config_error(
                    "kv-pair-sizes",
                    format!("{pb} bytes is not a multiple of the 4 KiB chunk in 4K..=1M (the seed's: 4K, 8K)"),
                ));
            }
        }
        if let Some(p) = self.cache_pct.iter().find(|&&p| p > 100) {
            return Err(config_error(
                "kv-cache",
                format!("{p} is not a percentage of the pairs in 0..=100"),
            ));
        }
        if !(1..=1000).contains(&self.repeat) {
            return Err(config_error(
                "kv-repeat",
                format!("{} is not in 1..=1000", self.repeat),
            ));
        }
        Ok(())
    }
}

/// Exp 6's scale: pairs loaded and requests per run (the seed: 1 M and 3 M).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KvScale {
    pub pairs: u64,
    pub requests: u64,
}

impl KvScale {
    /// The seed's scale (needs tens of GB of device files or RAM per run; see docs/kv.md).
    pub const PAPER: KvScale = KvScale {
        pairs: 1_000_000,
        requests: 3_000_000,
    };

    /// `--quick`: 2 K pairs and 6 K requests; otherwise 50 K and 150 K (1/20 of the seed's).
    pub fn default_for(quick: bool) -> KvScale {
        if quick {
            KvScale {
                pairs: 2_000,
                requests: 6_000,
            }
        } else {
            KvScale {
                pairs: 50_000,
                requests: 150_000,
            }
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.pairs < 16 || self.pairs > 100_000_000 {
            return Err(LabError::Config {
                field: "kv-pairs",
                msg: format!("{} is not in 16..=100000000", self.pairs),
            });
        }
        if self.requests == 0 {
            return Err(LabError::Config {
                field: "kv-requests",
                msg: "0 requests measure nothing (use 1 or more)".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_within_the_device_files() {
        assert_eq!("6+2".parse::<Setting>().unwrap(), Setting::SIX_TWO);
        assert_eq!(
            " 4 + 1 ".parse::<Setting>().unwrap(),
            Setting { k: 4, m: 1 }
        );
        for bad in ["9+0", "7+2", "6+3", "0+1", "six", "6", "6+", "+2"] {
            let e = bad.parse::<Setting>().unwrap_err().to_string();
            assert!(e.starts_with("settings: "), "{bad}: {e}");
        }
        assert_eq!(Setting::SIX_TWO.to_string(), "(6+2)");
    }

    #[test]
    fn experiments_testbeds_and_ranges() {
        assert_eq!(Exp::from_number(4).unwrap(), Exp::RequestsPerSecond);
        assert!(Exp::ALL
            .iter()
            .enumerate()
            .all(|(i, e)| e.number() == i as u32 + 1));
        assert!(Exp::from_number(0).is_err() && Exp::from_number(7).is_err());
        assert_eq!(Exp::from_number(6).unwrap(), Exp::KvStore);
        assert_eq!("paper".parse::<Testbed>().unwrap(), Testbed::Paper);
        assert!("cloud"
            .parse::<Testbed>()
            .unwrap_err()
            .to_string()
            .starts_with("testbed: "));
        let mut c = EplogConfig::new(true, PathBuf::from("/nonexistent"));
        c.validate().unwrap();
        c.clients = vec![4, 0];
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("clients: "));
        c.clients = vec![4];
        for bad in [0.0, -1.0, 1.5, f64::NAN] {
            c.scale = bad;
            assert!(c.validate().unwrap_err().to_string().starts_with("scale: "));
        }
    }

    #[test]
    fn kv_cells_parse_and_validate() {
        assert_eq!(
            "update".parse::<KvWorkload>().unwrap(),
            KvWorkload::UpdateOnly
        );
        assert_eq!(" hybrid".parse::<KvWorkload>().unwrap(), KvWorkload::Hybrid);
        assert!("get-only"
            .parse::<KvWorkload>()
            .unwrap_err()
            .to_string()
            .starts_with("kv-workloads: "));
        KvCells::default().validate().unwrap();
        let bad = |f: fn(&mut KvCells), field: &str| {
            let mut c = KvCells::default();
            f(&mut c);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.starts_with(&format!("{field}: ")), "{e}");
        };
        bad(|c| c.pair_bytes = vec![4096, 5000], "kv-pair-sizes");
        bad(|c| c.pair_bytes = vec![0], "kv-pair-sizes");
        bad(|c| c.pair_bytes.clear(), "kv-pair-sizes");
        bad(|c| c.workloads.clear(), "kv-workloads");
        bad(|c| c.cache_pct = vec![50, 101], "kv-cache");
        bad(|c| c.repeat = 0, "kv-repeat");
    }
}
