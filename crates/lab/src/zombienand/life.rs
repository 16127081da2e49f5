//! One ZombieNAND lifetime: a pristine simulated SSD driven until it declares itself dead, with
//! progress, a latency series over the lifetime and checkpoint/resume.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ecstack_device::sim::ssd::fnv1a64;
use ecstack_device::sim::wear::early_switch_blocks;
use ecstack_device::{
    CellMode, DeathRule, GcPolicy, LifeAverage, SplitMix64, SsdConfig, SsdModel, SsdStats,
    WearPhysics, ZombieWear,
};
use serde::{Deserialize, Serialize};

use crate::{io_at, LabError, Result};

/// The simulated drives of Table 4.2, sized as the seed sizes them (4 KiB logical pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Drive {
    /// §4.4.3: one element of 128 blocks × 128 pages, 64 MiB.
    Synthetic,
    /// §4.4.4: four elements of 512 blocks × 128 pages, 1 GiB.
    Trace,
    /// A few blocks, for tests: one element of 32 blocks × 16 pages.
    Tiny,
}

impl Drive {
    pub fn parse(s: &str) -> Option<Drive> {
        match s {
            "synthetic" => Some(Drive::Synthetic),
            "trace" => Some(Drive::Trace),
            "tiny" => Some(Drive::Tiny),
            _ => None,
        }
    }
    /// Reserved area a run of this drive gets when none is given: 10% for the seed's drives (the
    /// smallest reserve of §4.4.4). The tiny drive needs more: its GC watermarks plus the open
    /// block take 3 of its 32 blocks (9.4% of the flash), so at 10% it is refused (the host's
    /// pages would not fit outside the free pool) and a single TLC→MLC switch would kill it; at 30%
    /// (the largest reserve of §4.4.4) 17 blocks can switch before it dies.
    pub fn default_reserve(self) -> f64 {
        match self {
            Drive::Synthetic | Drive::Trace => 0.10,
            Drive::Tiny => 0.30,
        }
    }
    /// (elements, blocks per element, pages per block).
    pub fn geometry(self) -> (u32, u32, u32) {
        match self {
            Drive::Synthetic => (1, 128, 128),
            Drive::Trace => (4, 512, 128),
            Drive::Tiny => (1, 32, 16),
        }
    }
}

/// Baseline (unswitching: blocks retire at their rated count, §4.3.1 wear-leveling) or ZombieNAND
/// (bit-mode fallback + wear-unleveling with the Eq. 4.1 pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Baseline,
    Zombie,
}

/// Algorithm 6's LIFE_THRESHOLD: the seed does not give it. A normal block with less than this
/// fraction of the mean remaining life is skipped by GC.
pub const LIFE_THRESHOLD: f64 = 0.9;

/// Pages per access in the synthetic workload and the trace mapping unit.
pub const PAGE_BYTES: u32 = 4096;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifeConfig {
    pub drive: Drive,
    pub mode: CellMode,
    /// Reserved area R: fraction of the raw flash hidden from the host (§4.4.3).
    pub reserve: f64,
    pub scheme: Scheme,
    pub physics: WearPhysics,
    pub life_threshold: f64,
    pub seed: u64,
    /// When the drive is dead: capacity (the default) or the seed's retired-block count.
    #[serde(default)]
    pub death_rule: DeathRule,
    /// Algorithm 6's avg_life: over the block's group (the default) or the whole element.
    #[serde(default)]
    pub average: LifeAverage,
}

impl LifeConfig {
    pub fn ssd_config(&self) -> Result<SsdConfig> {
        let (elements, per, ppb) = self.drive.geometry();
        if !(0.05..0.95).contains(&self.reserve) {
            return Err(LabError::Config {
                field: "reserve",
                msg: format!("{} is not a fraction in [0.05, 0.95)", self.reserve),
            });
        }
        let early = match self.scheme {
            Scheme::Baseline => 0,
            Scheme::Zombie => early_switch_blocks(self.reserve, 0.05, per, self.mode),
        };
        let cfg = SsdConfig {
            blocks: elements * per,
            pages_per_block: ppb,
            page_size: PAGE_BYTES,
            op: self.reserve,
            gc_low: 0.02,
            gc_high: 0.05,
            mode: self.mode,
            gc_policy: GcPolicy::Leveled {
                life_threshold: self.life_threshold,
                elements,
                early_switch_blocks: early,
                average: self.average,
            },
            death_rule: self.death_rule,
            ..SsdConfig::default()
        };
        cfg.validate().map_err(|msg| LabError::Config {
            field: "reserve",
            msg,
        })?;
        Ok(cfg)
    }

    pub fn wear(&self) -> ZombieWear {
        let (_, _, ppb) = self.drive.geometry();
        ZombieWear::new(self.physics, self.scheme == Scheme::Zombie, ppb, self.mode)
    }

    pub fn model(&self) -> Result<SsdModel> {
        SsdModel::with_wear(self.ssd_config()?, Box::new(self.wear())).map_err(|msg| {
            LabError::Config {
                field: "reserve",
                msg,
            }
        })
    }
}

/// One host request of a workload: `pages` logical pages from `lpn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub write: bool,
    pub lpn: u32,
    pub pages: u32,
}

/// Where the requests come from.
#[derive(Debug, Clone)]
pub enum Workload {
    /// §4.4.3: uniform random single-page accesses over the first `working_set` fraction of the
    /// logical space, each a read with probability `read_share`.
    Uniform { working_set: f64, read_share: f64 },
    /// §4.4.4: a remapped trace (see `trace.rs`), looped until death.
    Trace {
        name: String,
        accesses: Arc<Vec<Access>>,
    },
}

/// The loop's own state (saved in checkpoints next to the model's).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunState {
    pub rng: u64,
    pub trace_pos: u64,
    pub ops: u64,
    pub reads: u64,
    pub writes: u64,
    pub read_ns: u64,
    pub write_ns: u64,
    pub window_ops: u64,
    pub window_ns: u64,
    /// Every window of one logical space of requests: (requests so far, summed latency ns). Kept as
    /// integers so a checkpoint (JSON) restores them exactly.
    pub series: Vec<(u64, u64)>,
    pub wall_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lifetime {
    pub config: LifeConfig,
    pub workload: String,
    pub early_switch_blocks: u32,
    pub logical_bytes: u64,
    /// Host bytes written before death (the lifetime).
    pub host_bytes_written: u64,
    pub host_bytes_read: u64,
    /// Host requests completed before death.
    pub ops: u64,
    pub simulated_s: f64,
    pub mean_latency_us: f64,
    pub mean_write_latency_us: f64,
    pub mean_read_latency_us: f64,
    /// Drive writes: host bytes written / logical bytes.
    pub drive_writes: f64,
    pub death: String,
    pub stats: SsdStats,
    /// Mean erase count at death of the early-switch pool (0 without a pool) and of the other
    /// blocks: how far Algorithm 6 wear-unleveled the pool.
    #[serde(default)]
    pub early_erase_mean: f64,
    #[serde(default)]
    pub normal_erase_mean: f64,
    pub series: Vec<(u64, f64)>,
    pub wall_s: f64,
    /// Simulated requests per second of wall time.
    pub ops_per_wall_s: f64,
}

/// What a progress callback sees.
pub struct Progress<'a> {
    pub ops: u64,
    pub host_bytes_written: u64,
    pub stats: &'a SsdStats,
}

/// Checkpoint policy: where, and how often (wall seconds).
pub struct Checkpoint<'a> {
    pub path: &'a Path,
    pub every_s: f64,
}

/// Requests between progress calls and checkpoint checks.
pub const BATCH: u32 = 1 << 16;

const CK_MAGIC: &[u8; 8] = b"ECZNCK01";

#[derive(Serialize, Deserialize)]
struct CkHeader {
    config: LifeConfig,
    workload: String,
    state: RunState,
}

fn workload_name(w: &Workload) -> String {
    match w {
        Workload::Uniform {
            working_set,
            read_share,
        } => format!("uniform ws={working_set} reads={read_share}"),
        Workload::Trace { name, .. } => format!("trace {name}"),
    }
}

fn save_checkpoint(path: &Path, hdr: &CkHeader, model: &SsdModel) -> Result<()> {
    let json = serde_json::to_vec(hdr).map_err(|e| LabError::Run(format!("checkpoint: {e}")))?;
    let state = model.save_state();
    let mut o = Vec::with_capacity(json.len() + state.len() + 40);
    o.extend_from_slice(CK_MAGIC);
    o.extend_from_slice(&(json.len() as u64).to_le_bytes());
    o.extend_from_slice(&json);
    o.extend_from_slice(&(state.len() as u64).to_le_bytes());
    o.extend_from_slice(&state);
    let sum = fnv1a64(&o);
    o.extend_from_slice(&sum.to_le_bytes());
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io_at(&tmp))?;
    f.write_all(&o).map_err(io_at(&tmp))?;
    f.sync_all().map_err(io_at(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_at(path))?;
    Ok(())
}

fn load_checkpoint(path: &Path) -> Result<(CkHeader, Vec<u8>)> {
    let b = std::fs::read(path).map_err(io_at(path))?;
    let bad = |m: &str| LabError::Run(format!("{}: {m}", path.display()));
    if b.len() < 32 || &b[..8] != CK_MAGIC {
        return Err(bad("not a ZombieNAND checkpoint"));
    }
    let (body, tail) = b.split_at(b.len() - 8);
    if fnv1a64(body) != u64::from_le_bytes(tail.try_into().unwrap()) {
        return Err(bad("checkpoint checksum mismatch (truncated or damaged)"));
    }
    let jl = u64::from_le_bytes(body[8..16].try_into().unwrap()) as usize;
    let json = body.get(16..16 + jl).ok_or_else(|| bad("truncated"))?;
    let hdr: CkHeader =
        serde_json::from_slice(json).map_err(|e| bad(&format!("bad header: {e}")))?;
    let rest = &body[16 + jl..];
    if rest.len() < 8 {
        return Err(bad("truncated"));
    }
    let sl = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
    let state = rest.get(8..8 + sl).ok_or_else(|| bad("truncated"))?;
    Ok((hdr, state.to_vec()))
}

/// Run `cfg` under `workload` from a pristine drive (or from `checkpoint` if its file exists and
/// matches) until the drive dies. `progress` is called about every 2^20 requests.
pub fn run_lifetime(
    cfg: &LifeConfig,
    workload: &Workload,
    checkpoint: Option<Checkpoint>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Lifetime> {
    let mut model = cfg.model()?;
    let logical = model.logical_pages();
    let name = workload_name(workload);
    let mut st = RunState {
        rng: cfg.seed,
        ..RunState::default()
    };
    if let Some(ck) = &checkpoint {
        if ck.path.exists() {
            let (hdr, state) = load_checkpoint(ck.path)?;
            if hdr.config != *cfg || hdr.workload != name {
                return Err(LabError::Run(format!(
                    "{}: checkpoint is for another run ({:?}, {}); remove it or pass the same options",
                    ck.path.display(),
                    hdr.config,
                    hdr.workload
                )));
            }
            model
                .load_state(&state)
                .map_err(|e| LabError::Run(format!("{}: {e}", ck.path.display())))?;
            st = hdr.state;
        }
    }
    let window = logical.max(1);
    let ws_pages = match workload {
        Workload::Uniform {
            working_set,
            read_share,
        } => {
            // A read share of 1 never writes, so the drive would never die: refused.
            if !(*working_set > 0.0 && *working_set <= 1.0) || !(0.0..1.0).contains(read_share) {
                return Err(LabError::Config {
                    field: "working-set",
                    msg: "working set must be in (0, 1] and read share in [0, 1) (reads never wear the drive)".into(),
                });
            }
            ((logical as f64 * working_set) as u64).max(1)
        }
        Workload::Trace { accesses, .. } => {
            if accesses.is_empty() {
                return Err(LabError::Run("the trace has no request".into()));
            }
            // Reads do not wear: a trace without writes would loop forever.
            if !accesses.iter().any(|a| a.write) {
                return Err(LabError::Run(
                    "the trace has no write in the part used: reads never wear the drive, it would never die".into(),
                ));
            }
            if accesses
                .iter()
                .any(|a| a.lpn as u64 + a.pages as u64 > logical)
            {
                return Err(LabError::Run(
                    "the remapped trace does not fit the drive's logical space".into(),
                ));
            }
            0
        }
    };
    let read_p = match workload {
        Workload::Uniform { read_share, .. } => *read_share,
        _ => 0.0,
    };
    let mut rng = SplitMix64::new(st.rng);
    let t0 = Instant::now();
    let wall0 = st.wall_s;
    let mut last_ck = Instant::now();
    let death: String;
    'run: loop {
        // A batch between progress calls and checkpoint checks.
        for _ in 0..BATCH {
            let a = match workload {
                Workload::Uniform { .. } => {
                    let write = !(read_p > 0.0 && rng.next_f64() < read_p);
                    Access {
                        write,
                        lpn: rng.below(ws_pages) as u32,
                        pages: 1,
                    }
                }
                Workload::Trace { accesses, .. } => {
                    let a = accesses[st.trace_pos as usize];
                    st.trace_pos += 1;
                    if st.trace_pos as usize == accesses.len() {
                        st.trace_pos = 0;
                    }
                    a
                }
            };
            let mut lat = 0;
            for p in a.lpn..a.lpn + a.pages {
                let r = if a.write {
                    model.write_page(p as u64)
                } else {
                    model.read_page(p as u64)
                };
                match r {
                    Ok(t) => lat += t,
                    Err(e) => {
                        death = e.to_string();
                        break 'run;
                    }
                }
            }
            st.ops += 1;
            if a.write {
                st.writes += 1;
                st.write_ns += lat;
            } else {
                st.reads += 1;
                st.read_ns += lat;
            }
            st.window_ops += 1;
            st.window_ns += lat;
            if st.window_ops == window {
                st.series.push((st.ops, st.window_ns));
                st.window_ops = 0;
                st.window_ns = 0;
            }
        }
        if let Some(ck) = &checkpoint {
            if last_ck.elapsed().as_secs_f64() >= ck.every_s {
                st.rng = rng.state();
                st.wall_s = wall0 + t0.elapsed().as_secs_f64();
                save_checkpoint(
                    ck.path,
                    &CkHeader {
                        config: cfg.clone(),
                        workload: name.clone(),
                        state: st.clone(),
                    },
                    &model,
                )?;
                last_ck = Instant::now();
            }
        }
        let stats = model.stats();
        progress(&Progress {
            ops: st.ops,
            host_bytes_written: stats.host_page_writes * PAGE_BYTES as u64,
            stats: &stats,
        });
    }
    if st.window_ops > 0 {
        st.series.push((st.ops, st.window_ns));
    }
    let wall_s = wall0 + t0.elapsed().as_secs_f64();
    let stats = model.stats();
    let us = |ns: u64, n: u64| {
        if n == 0 {
            0.0
        } else {
            ns as f64 / n as f64 / 1e3
        }
    };
    let early = match model.config().gc_policy {
        GcPolicy::Leveled {
            early_switch_blocks,
            elements,
            ..
        } => early_switch_blocks * elements,
        GcPolicy::Greedy => 0,
    };
    let erase_mean = |early: bool| {
        let (mut sum, mut n) = (0u64, 0u64);
        for b in model.blocks().iter().filter(|b| b.early_switch == early) {
            sum += b.erase_count as u64;
            n += 1;
        }
        sum as f64 / n.max(1) as f64
    };
    Ok(Lifetime {
        early_erase_mean: erase_mean(true),
        normal_erase_mean: erase_mean(false),
        config: cfg.clone(),
        workload: name,
        early_switch_blocks: early,
        logical_bytes: logical * PAGE_BYTES as u64,
        host_bytes_written: stats.host_page_writes * PAGE_BYTES as u64,
        host_bytes_read: stats.host_page_reads * PAGE_BYTES as u64,
        ops: st.ops,
        simulated_s: stats.modeled_ns as f64 / 1e9,
        mean_latency_us: us(st.read_ns + st.write_ns, st.ops),
        mean_write_latency_us: us(st.write_ns, st.writes),
        mean_read_latency_us: us(st.read_ns, st.reads),
        drive_writes: stats.host_page_writes as f64 / logical as f64,
        death,
        stats,
        series: {
            let mut prev = 0;
            st.series
                .iter()
                .map(|&(ops, ns)| {
                    let n = (ops - prev).max(1);
                    prev = ops;
                    (ops, ns as f64 / n as f64 / 1e3)
                })
                .collect()
        },
        wall_s,
        ops_per_wall_s: st.ops as f64 / (t0.elapsed().as_secs_f64()).max(1e-9),
    })
}

/// The drive's death cannot come from a bad request: the last error is the model's.
pub fn mode_label(m: CellMode) -> &'static str {
    match m {
        CellMode::Slc => "SLC",
        CellMode::Mlc => "MLC",
        CellMode::Tlc => "TLC",
    }
}
