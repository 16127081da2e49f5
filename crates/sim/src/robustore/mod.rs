//! RobuSTore's world in simulation (seed `robustore-thesis.txt`, ch. 6): one client reads or writes a
//! large data object striped over disks behind filers, in virtual time, with one of four schemes
//! (§6.2.1):
//!
//! * **RAID-0**: plain blocks, block i on disk i mod H; one request per disk for all its blocks; done
//!   when every block arrived.
//! * **RRAID-S**: replica r of block i on disk (i + r) mod H ([`rraid_layout`]); every disk is asked for
//!   everything it holds, in stored order; done when one copy of every block arrived; the rest cancelled.
//! * **RRAID-A**: same layout; first every disk is asked for its replica-0 blocks; whenever a disk A has
//!   delivered all it was asked for, the client picks the disk B with the most unreceived blocks that
//!   A also holds and moves the second half of them to A (a request to A, a cancel to B, one RTT per
//!   round); B's block in service stays. [`Split::Sector`] halves bytes instead, to the sector.
//! * **RobuSTore**: K = size / block source blocks, (1 + D)·K LT-coded blocks spread evenly (or as a
//!   speculative write left them); every disk is asked for everything; the client feeds arrivals to the
//!   codes layer's LT decoder (graph only, 1-byte blocks: the real peeling decision) and cancels the rest
//!   when it decodes. RaptorQ instead: the number of symbols needed is sampled from decodes measured once
//!   per point with the codes layer's RaptorQ. Writes are speculative: every disk is sent coded blocks
//!   until (1 + D)·K are acknowledged, then the rest is cancelled.
//!
//! The engine ([`engine`]), disk model ([`disk`], Table 6-1) and cache ([`cache`]) are described in their
//! modules; docs/robustore.md lists every assumption the seed leaves open.

pub mod cache;
pub mod disk;
pub mod engine;
mod error;
pub mod testbed;

use ecstack_base::Rng;
use ecstack_codes::{LtCode, LtDecoder, LtParams, RaptorQ, RatelessCode};
use serde::{Deserialize, Serialize};

use cache::Cache;
use disk::{DiskModel, Layout, MB};
use engine::{CancelWhat, Client, DiskSetup, Engine, IoKind, Job};
use error::bad;
pub use error::SimError;
pub use testbed::{TestbedDisk, TestbedSpec, TESTBED_VERSION};

/// A storage scheme of §6.2.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum Scheme {
    #[serde(rename = "RAID-0")]
    Raid0,
    #[serde(rename = "RRAID-S")]
    RraidS,
    #[serde(rename = "RRAID-A")]
    RraidA,
    #[serde(rename = "RobuSTore")]
    RobuStore,
}

impl Scheme {
    pub const ALL: [Scheme; 4] = [
        Scheme::Raid0,
        Scheme::RraidS,
        Scheme::RraidA,
        Scheme::RobuStore,
    ];
    pub fn name(&self) -> &'static str {
        match self {
            Scheme::Raid0 => "RAID-0",
            Scheme::RraidS => "RRAID-S",
            Scheme::RraidA => "RRAID-A",
            Scheme::RobuStore => "RobuSTore",
        }
    }
    /// Parse a name (case-insensitive, dash optional).
    pub fn parse(s: &str) -> Option<Scheme> {
        let t: String = s
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        match t.as_str() {
            "raid0" => Some(Scheme::Raid0),
            "rraids" => Some(Scheme::RraidS),
            "rraida" => Some(Scheme::RraidA),
            "robustore" => Some(Scheme::RobuStore),
            _ => None,
        }
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Read, write, or read after a (speculative, for RobuSTore: unbalanced) write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Read,
    Write,
    ReadAfterWrite,
}

/// The mean interval of a disk's background stream.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum BgInterval {
    /// The same on every disk (s).
    Fixed(f64),
    /// Drawn per disk per access, uniform on [lo, hi] (s).
    Uniform { lo: f64, hi: f64 },
}

/// Where the disks' performance variation comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Variation {
    /// In-disk layout (§6.3.1): every disk draws a Table 6-1 cell per access; no background load.
    Layout,
    /// Competitive workloads (§6.3.2): every disk has [`Layout::FAST`] and a background stream.
    Background(BgInterval),
    /// Fixed per-disk rates ([`testbed`]): the testbed's disks are the world (`total_disks` is not
    /// used), each serving at its own constant rate with its own extra round trip.
    Fixed(TestbedSpec),
}

/// How RRAID-A divides the unreceived data of the disk it helps (§6.2.1: "identifies the disk with
/// the largest unreceived data blocks that A has, say disk B, then it divides B's unreceived data into
/// two halves and requests the second half from disk A").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Split {
    /// Whole blocks, the seed's unit of request and of "unreceived data blocks": of the n blocks
    /// B still owes that A holds, the last ⌊n/2⌋ move; B's first unreceived block (the one it is
    /// reading) never moves, so B keeps delivering and asks for more when it is done. One block
    /// cannot be halved: it stays.
    #[default]
    Block,
    /// Bytes, to the 512-byte sector (plain blocks can be read in fractions, §6.3.1): B's last
    /// unreceived block is split like any other data.
    Sector,
}

/// The rateless code of RobuSTore.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Rateless {
    /// LT with robust-soliton parameters C and δ (ch. 6 uses C = 1, δ = 0.5).
    Lt {
        c: f64,
        delta: f64,
    },
    RaptorQ,
}

/// One configuration: a point of an experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub scheme: Scheme,
    pub op: Op,
    /// Disks one access uses (H).
    pub disks: usize,
    /// Disks in the world (128) and per filer (8).
    pub total_disks: usize,
    pub disks_per_filer: usize,
    pub data_bytes: u64,
    pub block_bytes: u64,
    /// Data redundancy D = N/K - 1 (RAID-0: 0; RRAID: whole replicas; RobuSTore: any D with N > K).
    pub redundancy: f64,
    /// Round-trip time between client and every filer (s).
    pub rtt: f64,
    pub variation: Variation,
    pub cache: bool,
    pub cache_bytes: u64,
    pub cache_line: u64,
    pub cache_ways: usize,
    /// With the cache on: accesses pick one of this many objects (each with its own fixed disks).
    pub objects: usize,
    pub code: Rateless,
    /// RRAID-A's halving unit (absent in rows written before it existed: blocks).
    #[serde(default)]
    pub rraid_a_split: Split,
    /// LT/RaptorQ decoding speed (bytes/s of coded blocks).
    pub decode_rate: f64,
    /// One access to a service (§6.2.2: "each access to these services [the metadata server, and
    /// setting up connections with the disks] ... a constant latency of five milliseconds") (s). A read
    /// or write starts with the metadata query, then sets up its connections (to all disks at once):
    /// two of these before the first request; a write ends with a third, registering what it stored
    /// with the metadata server (§4.3's close).
    pub metadata_cost: f64,
    /// A filer's link rate (bytes/s).
    pub link_rate: f64,
    pub accesses: usize,
    pub seed: u64,
}

impl Config {
    /// The seed's baseline (§6.2.7): 64 of 128 disks, 1 ms RTT, 1 MB blocks, 1 GB, D = 3 (RAID-0: 0),
    /// in-disk layout variation, no cache, LT C = 1, δ = 0.5; 100 accesses.
    pub fn baseline(scheme: Scheme) -> Config {
        Config {
            scheme,
            op: Op::Read,
            disks: 64,
            total_disks: 128,
            disks_per_filer: 8,
            data_bytes: 1 << 30,
            block_bytes: 1 << 20,
            redundancy: if scheme == Scheme::Raid0 { 0.0 } else { 3.0 },
            rtt: 1e-3,
            variation: Variation::Layout,
            cache: false,
            cache_bytes: 2 << 30,
            cache_line: 4096,
            cache_ways: 4,
            objects: 8,
            code: Rateless::Lt { c: 1.0, delta: 0.5 },
            rraid_a_split: Split::Block,
            decode_rate: 500.0 * MB,
            metadata_cost: 5e-3,
            link_rate: 1.25e9,
            accesses: 100,
            seed: 1,
        }
    }

    /// Source blocks K.
    pub fn k(&self) -> usize {
        self.data_bytes.div_ceil(self.block_bytes) as usize
    }

    /// Whole replicas of RRAID (D + 1).
    pub fn replicas(&self) -> usize {
        self.redundancy.round() as usize + 1
    }

    /// Coded blocks of a balanced RobuSTore layout.
    pub fn coded_blocks(&self) -> usize {
        ((1.0 + self.redundancy) * self.k() as f64).round() as usize
    }

    fn filers(&self) -> usize {
        self.pool().div_ceil(self.disks_per_filer.max(1))
    }

    /// The disks each access draws its H from: the testbed's with fixed rates, else `total_disks`.
    pub fn pool(&self) -> usize {
        match &self.variation {
            Variation::Fixed(t) => t.disks.len(),
            _ => self.total_disks,
        }
    }

    /// Check every setting; one error naming the first bad one.
    pub fn validate(&self) -> Result<(), SimError> {
        if let Variation::Fixed(t) = &self.variation {
            t.validate()?;
            if self.disks > t.disks.len() {
                return Err(bad(
                    "disks",
                    format!(
                        "an access uses {} disks but the testbed has only {}",
                        self.disks,
                        t.disks.len()
                    ),
                ));
            }
        }
        if self.pool() == 0 || self.disks == 0 || self.disks > self.pool() {
            return Err(bad(
                "disks",
                format!("need 1..={} disks, got {}", self.pool(), self.disks),
            ));
        }
        if self.disks_per_filer == 0 {
            return Err(bad("disks-per-filer", "must be at least 1"));
        }
        if self.block_bytes < 512 || self.data_bytes < self.block_bytes {
            return Err(bad(
                "block-size",
                format!(
                    "need 512 <= block size <= data size, got block {} and data {}",
                    self.block_bytes, self.data_bytes
                ),
            ));
        }
        if self.k() > 1 << 24 {
            return Err(bad("block-size", "more than 2^24 blocks per object"));
        }
        if !(self.redundancy >= 0.0 && self.redundancy <= 100.0) {
            return Err(bad("redundancy", "must be in 0..=100"));
        }
        match self.scheme {
            Scheme::Raid0 if self.redundancy != 0.0 => {
                return Err(bad("redundancy", "RAID-0 has none: use 0"));
            }
            Scheme::RraidS | Scheme::RraidA if self.redundancy.fract() != 0.0 => {
                return Err(bad(
                    "redundancy",
                    "RRAID-S and RRAID-A store whole replicas: use an integer",
                ));
            }
            Scheme::RobuStore if self.coded_blocks() <= self.k() && self.op != Op::Write => {
                return Err(bad(
                    "redundancy",
                    "RobuSTore needs more coded than source blocks to decode: use D > 0",
                ));
            }
            _ => {}
        }
        if !(self.rtt >= 0.0 && self.rtt.is_finite()) {
            return Err(bad("rtt", "must be a finite time >= 0"));
        }
        if let Variation::Background(iv) = self.variation {
            let ok = match iv {
                BgInterval::Fixed(x) => x > 0.0 && x.is_finite(),
                BgInterval::Uniform { lo, hi } => lo > 0.0 && hi >= lo && hi.is_finite(),
            };
            if !ok {
                return Err(bad("bg-interval", "must be > 0 (and lo <= hi)"));
            }
        }
        if self.cache && (self.cache_bytes < self.cache_line || self.cache_ways == 0) {
            return Err(bad("cache", "needs at least one line and one way"));
        }
        if self.objects == 0 {
            return Err(bad("objects", "must be at least 1"));
        }
        if let Rateless::Lt { c, delta } = self.code {
            if !(c > 0.0 && delta > 0.0 && delta < 1.0) {
                return Err(bad("lt", "needs C > 0 and 0 < δ < 1"));
            }
        }
        if !(self.decode_rate > 0.0 && self.link_rate > 0.0) {
            return Err(bad("rate", "decode and link rates must be > 0"));
        }
        if self.metadata_cost.is_nan() || self.metadata_cost < 0.0 {
            return Err(bad("metadata", "must be >= 0"));
        }
        if self.accesses == 0 {
            return Err(bad("accesses", "must be at least 1"));
        }
        Ok(())
    }
}

/// RRAID placement (§6.2.1, Fig. 6-1d): disk d's blocks in stored order, replica 0 first; replica r
/// of block i lives on disk (i + r) mod H. `replicas == 1` is RAID-0's striping.
pub fn rraid_layout(k: usize, h: usize, replicas: usize) -> Vec<Vec<u32>> {
    let mut disks = vec![Vec::new(); h];
    for r in 0..replicas {
        for i in 0..k {
            disks[(i + r) % h].push(i as u32);
        }
    }
    disks
}

/// Balanced coded placement: the j-th block of a random permutation of the N coded ids on disk
/// j mod H. (The ids are shuffled because the codes layer's LT graph draws neighbours of consecutive
/// ids from one permutation of the sources: placed in id order, blocks would arrive in nearly id order
/// and decode with less overhead than the random reception §6.2.6 assumes.)
pub fn coded_layout(n: usize, h: usize, rng: &mut Rng) -> Vec<Vec<u32>> {
    let mut ids: Vec<u32> = (0..n as u32).collect();
    rng.shuffle(&mut ids);
    let mut disks = vec![Vec::new(); h];
    for (j, id) in ids.into_iter().enumerate() {
        disks[j % h].push(id);
    }
    disks
}

/// What one access measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccessResult {
    /// From the start of the access (metadata included) to the data being usable (s).
    pub latency: f64,
    /// Payload bytes over the network, and bytes the disks read or wrote.
    pub net_bytes: u64,
    pub disk_bytes: u64,
    /// RobuSTore reads: coded blocks received when it decoded, over K, minus 1.
    pub reception_overhead: Option<f64>,
    /// Background busy time over (disks x latency).
    pub bg_utilization: f64,
    /// Foreground block requests sent to disks (RRAID-A's adaptive rounds add to them).
    pub requests: u64,
}

/// A point: the mean and spread over its accesses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    pub accesses: usize,
    /// Mean of size / latency over accesses (MB/s).
    pub bandwidth_mbps: f64,
    pub latency_mean_s: f64,
    /// Sample standard deviation of latency (s).
    pub latency_std_s: f64,
    /// (network bytes - size) / size.
    pub io_overhead: f64,
    /// (disk bytes - size) / size.
    pub disk_overhead: f64,
    /// RobuSTore reads only.
    pub reception_overhead: Option<f64>,
    pub bg_utilization: f64,
}

fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An object's fixed placement: the disks it lives on, in stripe order, and its address region.
struct Object {
    disks: Vec<usize>,
    base: u64,
    graph_seed: u64,
}

impl Object {
    fn new(cfg: &Config, index: usize) -> Object {
        let mut rng = Rng::new(mix(cfg.seed ^ 0x000b_1ec7, index as u64));
        let mut all: Vec<usize> = (0..cfg.pool()).collect();
        rng.shuffle(&mut all);
        all.truncate(cfg.disks);
        Object {
            disks: all,
            base: (index as u64 % 4096) << 36,
            graph_seed: rng.next_u64(),
        }
    }
}

/// The disks of one access: a model and a background stream each, drawn from the access's generator.
fn setups(cfg: &Config, obj: &Object, rng: &mut Rng) -> Vec<DiskSetup> {
    obj.disks
        .iter()
        .map(|&g| {
            let (model, bg, extra_rtt) = match &cfg.variation {
                Variation::Layout => (DiskModel::new(Layout::random(rng), rng), None, 0.0),
                Variation::Background(BgInterval::Fixed(x)) => {
                    (DiskModel::new(Layout::FAST, rng), Some(*x), 0.0)
                }
                Variation::Background(BgInterval::Uniform { lo, hi }) => {
                    let bg = lo + (hi - lo) * rng.next_f64();
                    (DiskModel::new(Layout::FAST, rng), Some(bg), 0.0)
                }
                Variation::Fixed(t) => (
                    DiskModel::rate(t.disks[g].mbps * MB),
                    None,
                    t.disks[g].delay_ms / 1e3,
                ),
            };
            DiskSetup {
                global: g,
                filer: g / cfg.disks_per_filer,
                model,
                bg_interval: bg,
                extra_rtt,
            }
        })
        .collect()
}

fn warmup(cfg: &Config) -> f64 {
    match cfg.variation {
        Variation::Layout | Variation::Fixed(_) => 0.0,
        Variation::Background(_) => 2.0,
    }
}

fn jobs_for(list: &[u32], positions: std::ops::Range<usize>, base: u64, block: u64) -> Vec<Job> {
    positions
        .map(|p| Job {
            id: list[p],
            bytes: block,
            addr: base + p as u64 * block,
        })
        .collect()
}

/// How a speculative read knows it is done.
enum Need {
    /// Every one of K plain blocks at least once.
    Plain { got: Vec<bool>, missing: usize },
    /// The LT peeling decoder says so.
    Lt(Box<LtDecoder>),
    /// A number of distinct symbols (RaptorQ, sampled from real decodes).
    Count { need: usize, seen: Vec<bool> },
}

struct Speculative {
    need: Need,
    received: usize,
    decode: Option<(f64, f64)>, // (seconds to decode one block, unused)
    done: bool,
}

impl Client for Speculative {
    fn deliver(&mut self, eng: &mut Engine, _disk: usize, id: u32, _bytes: u64) {
        if self.done {
            return;
        }
        self.received += 1;
        let complete = match &mut self.need {
            Need::Plain { got, missing } => {
                if !got[id as usize] {
                    got[id as usize] = true;
                    *missing -= 1;
                }
                *missing == 0
            }
            Need::Lt(dec) => dec.push_block(id as usize, vec![0u8]).unwrap_or(false),
            Need::Count { need, seen } => {
                if !seen[id as usize] {
                    seen[id as usize] = true;
                    *need -= 1;
                }
                *need == 0
            }
        };
        // Decoding overlaps the I/O: only the block that completes the object adds its decode time
        // (§6.2.6: "it only incurs extra latency for decoding the last block").
        let t = eng.now + self.decode.map_or(0.0, |(per_block, _)| per_block);
        if complete {
            self.done = true;
            eng.finish(t);
            for d in 0..eng.disks() {
                eng.cancel(d, CancelWhat::All);
            }
        }
    }
}

/// A byte range of one block that one disk was asked for (RRAID-A).
#[derive(Clone, Debug)]
struct Piece {
    block: u32,
    lo: u64,
    /// The end the client still expects from this disk (`lo` once it was moved away whole).
    hi: u64,
}

/// Halving rounds one RRAID-A access may make per block, beyond which idle disks stay idle: a bound
/// that is never reached (each round halves or delivers data; `Adaptive::capped` says if it was).
const RRAID_A_ROUNDS_MAX_PER_BLOCK: usize = 64;

/// RRAID-A's adaptive reader (§6.2.1), halving by [`Split`]. With whole blocks (the default), the
/// block B is reading never moves: a first whole-block version moved it, so a disk whose one unread
/// block moved away was cut off mid-block and, never delivering again, never asked for more work (a
/// slow neighbourhood then lost its helpers). With sectors, B's last block is split like any other
/// data and B keeps reading its first half. The client counts what arrives, not what it asked for: a
/// disk that had read past a shrink (or a block that moved away while it was in service) delivers
/// those bytes too.
struct Adaptive {
    split: Split,
    h: usize,
    replicas: usize,
    block: u64,
    base: u64,
    /// pos[disk][block] = position of the block on the disk (u32::MAX if absent).
    pos: Vec<Vec<u32>>,
    /// Every piece ever requested; a job's id is its index here, and its start never changes.
    pieces: Vec<Piece>,
    /// Per disk, the pieces it was asked for and has not delivered, in its queue order.
    pending: Vec<Vec<u32>>,
    /// Per block, the byte ranges received (sorted, disjoint, merged).
    received: Vec<Vec<(u64, u64)>>,
    /// Bytes of the object not yet received.
    missing: u64,
    done: bool,
    rounds: Vec<Round>,
    capped: bool,
}

/// Add [lo, hi) to a sorted, merged range list; returns the bytes that were not in it.
fn cover(ranges: &mut Vec<(u64, u64)>, lo: u64, hi: u64) -> u64 {
    if lo >= hi {
        return 0;
    }
    let before: u64 = ranges.iter().map(|r| r.1 - r.0).sum();
    let (mut lo, mut hi) = (lo, hi);
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for &(a, b) in ranges.iter() {
        if b < lo || a > hi {
            out.push((a, b));
        } else {
            lo = lo.min(a);
            hi = hi.max(b);
        }
    }
    out.push((lo, hi));
    out.sort_unstable();
    *ranges = out;
    ranges.iter().map(|r| r.1 - r.0).sum::<u64>() - before
}

/// Bytes of [lo, hi) not in the range list.
fn uncovered(ranges: &[(u64, u64)], lo: u64, hi: u64) -> u64 {
    let inside: u64 = ranges
        .iter()
        .map(|&(a, b)| b.min(hi).saturating_sub(a.max(lo)))
        .sum();
    (hi - lo) - inside
}

impl Adaptive {
    fn holds(&self, disk: usize, block: u32) -> bool {
        (disk + self.h - block as usize % self.h) % self.h < self.replicas
    }

    /// Whether piece `p` still has bytes the client has not received.
    fn open(&self, p: u32) -> bool {
        let q = &self.pieces[p as usize];
        q.hi > q.lo && uncovered(&self.received[q.block as usize], q.lo, q.hi) > 0
    }

    /// Bytes of disk `b`'s open pieces that disk `a` also holds.
    fn held_bytes(&self, a: usize, b: usize) -> u64 {
        self.pending[b]
            .iter()
            .filter(|&&p| self.holds(a, self.pieces[p as usize].block) && self.open(p))
            .map(|&p| self.pieces[p as usize].hi - self.pieces[p as usize].lo)
            .sum()
    }

    /// Ask disk `a` for a new piece; returns its job.
    fn new_piece(&mut self, a: usize, block: u32, lo: u64, hi: u64) -> Job {
        let id = self.pieces.len() as u32;
        self.pieces.push(Piece { block, lo, hi });
        self.pending[a].push(id);
        Job {
            id,
            bytes: hi - lo,
            addr: self.base + self.pos[a][block as usize] as u64 * self.block + lo,
        }
    }

    /// Disk `a` is idle: take the second half (by bytes, to the sector) of the largest unreceived
    /// data that `a` also holds, from the disk B that has it; a request to `a`, a cancel to B. Less
    /// than two sectors cannot be halved and moves whole; B, left with nothing, is idle in turn and
    /// takes from another disk (never back from `a`; each disk at most once per call).
    fn steal(&mut self, eng: &mut Engine, a: usize) {
        let mut work = vec![(a, usize::MAX)];
        let mut stole = vec![false; self.h];
        while let Some((a, exclude)) = work.pop() {
            if std::mem::replace(&mut stole[a], true) {
                continue;
            }
            if self.rounds.len() >= RRAID_A_ROUNDS_MAX_PER_BLOCK * self.received.len() {
                self.capped = true;
                return;
            }
            let b = match self.split {
                Split::Block => self.steal_blocks(eng, a),
                Split::Sector => self.steal_once(eng, a, exclude),
            };
            if let Some(b) = b {
                if self.pending[b].is_empty() {
                    work.push((b, a));
                }
            }
        }
    }

    /// One round for idle disk `a` with [`Split::Block`]: of the disk B with the most unreceived
    /// blocks that `a` also holds (n ≥ 2; ties to the lowest disk), the last ⌊n/2⌋ in B's queue
    /// order move to `a`. B's first unreceived block, the one it is reading (or, its delivery still
    /// on the way, the one before it), never moves. Returns B.
    fn steal_blocks(&mut self, eng: &mut Engine, a: usize) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for b in (0..self.h).filter(|&b| b != a) {
            let n = self.pending[b]
                .iter()
                .filter(|&&p| self.holds(a, self.pieces[p as usize].block) && self.open(p))
                .count();
            if n >= 2 && best.is_none_or(|(_, m)| n > m) {
                best = Some((b, n));
            }
        }
        let (b, n) = best?;
        let mut rem = n / 2;
        let mut moved = Vec::new(); // (block, lo, hi), last first
        let mut cancel = Vec::new();
        for i in (1..self.pending[b].len()).rev() {
            if rem == 0 {
                break;
            }
            let p = self.pending[b][i];
            if !self.holds(a, self.pieces[p as usize].block) || !self.open(p) {
                continue;
            }
            let Piece { block, lo, hi } = self.pieces[p as usize].clone();
            self.pieces[p as usize].hi = lo;
            cancel.push((p, 0));
            moved.push((block, lo, hi));
            rem -= 1;
        }
        debug_assert_eq!(rem, 0, "fewer than half of n blocks behind B's first");
        self.hand_over(eng, a, b, moved, cancel);
        debug_assert!(!self.pending[b].is_empty(), "B keeps its first block");
        Some(b)
    }

    /// The end of a round: the pieces cut from B's queue (`moved`: (block, lo, hi), last first, with
    /// B's jobs shrunk by `cancel`) leave B's pending list, are requested from idle disk `a` in queue
    /// order, and the round is recorded.
    fn hand_over(
        &mut self,
        eng: &mut Engine,
        a: usize,
        b: usize,
        mut moved: Vec<(u32, u64, u64)>,
        cancel: Vec<(u32, u64)>,
    ) {
        let pieces = &self.pieces;
        self.pending[b].retain(|&p| pieces[p as usize].hi > pieces[p as usize].lo);
        moved.reverse();
        let jobs: Vec<Job> = moved
            .iter()
            .map(|&(block, lo, hi)| self.new_piece(a, block, lo, hi))
            .collect();
        eng.request(a, jobs);
        eng.cancel(b, CancelWhat::Shrink(cancel));
        self.rounds.push((a, moved, b));
    }

    /// One round for idle disk `a` with [`Split::Sector`]; returns the disk B it took from.
    fn steal_once(&mut self, eng: &mut Engine, a: usize, exclude: usize) -> Option<usize> {
        let mut best: Option<(usize, u64)> = None;
        for b in (0..self.h).filter(|&b| b != a && b != exclude) {
            let n = self.held_bytes(a, b);
            if n > 0 && best.is_none_or(|(_, m)| n > m) {
                best = Some((b, n));
            }
        }
        let (b, total) = best?;
        let mut rem = if total < 2 * disk::SECTOR {
            total
        } else {
            total / 2 / disk::SECTOR * disk::SECTOR
        };
        let mut moved = Vec::new(); // (block, lo, hi), last first
        let mut cancel = Vec::new();
        for i in (0..self.pending[b].len()).rev() {
            if rem == 0 {
                break;
            }
            let p = self.pending[b][i];
            if !self.holds(a, self.pieces[p as usize].block) || !self.open(p) {
                continue;
            }
            let Piece { block, lo, hi } = self.pieces[p as usize].clone();
            let cut = if hi - lo <= rem { lo } else { hi - rem };
            rem -= hi - cut;
            self.pieces[p as usize].hi = cut;
            cancel.push((p, cut - lo));
            moved.push((block, cut, hi));
        }
        self.hand_over(eng, a, b, moved, cancel);
        Some(b)
    }
}

impl Client for Adaptive {
    fn deliver(&mut self, eng: &mut Engine, a: usize, id: u32, bytes: u64) {
        if self.done {
            return;
        }
        // The job's first `bytes` arrived (at least what the client still expected of it).
        let (block, lo) = {
            let p = &self.pieces[id as usize];
            (p.block as usize, p.lo)
        };
        self.missing -= cover(&mut self.received[block], lo, lo + bytes);
        if let Some(i) = self.pending[a].iter().position(|&p| p == id) {
            self.pending[a].remove(i);
        }
        if self.missing == 0 {
            self.done = true;
            eng.finish(eng.now);
            for d in 0..eng.disks() {
                eng.cancel(d, CancelWhat::All);
            }
            return;
        }
        if self.pending[a].is_empty() {
            self.steal(eng, a);
        }
    }
}

/// Every block acknowledged (RAID-0 and RRAID writes), or (1 + D)·K of them (RobuSTore).
struct Writer {
    target: usize,
    acked: usize,
    per_disk: Vec<usize>,
    cancel: bool,
}

impl Client for Writer {
    fn deliver(&mut self, eng: &mut Engine, disk: usize, _id: u32, _bytes: u64) {
        self.acked += 1;
        self.per_disk[disk] += 1;
        if self.acked == self.target {
            eng.finish(eng.now);
            if self.cancel {
                for d in 0..eng.disks() {
                    eng.cancel(d, CancelWhat::All);
                }
            }
        }
    }
}

/// Per-point state carried between accesses.
struct PointState {
    caches: Option<Vec<Cache>>,
    raptor_needed: Vec<usize>,
}

/// How many RaptorQ symbols (of `n` available, arriving in random order) decode K = `k`, measured
/// with the codes layer's decoder `trials` times.
pub fn raptorq_needed(
    k: usize,
    n: usize,
    trials: usize,
    seed: u64,
) -> Result<Vec<usize>, SimError> {
    let code = RaptorQ::new(k, 8)?;
    let data = vec![0u8; k * 8];
    let packets = code.encode(&data, n)?;
    let mut rng = Rng::new(seed);
    let mut order: Vec<usize> = (0..packets.len()).collect();
    let mut out = Vec::with_capacity(trials);
    for _ in 0..trials {
        rng.shuffle(&mut order);
        let mut dec = code.decoder();
        for &i in &order {
            if dec.push(&packets[i])? {
                break;
            }
        }
        out.push(dec.received());
    }
    Ok(out)
}

/// The codes layer's own measurement of LT reception overhead ((blocks to decode)/K - 1) for the
/// same K, N, C, δ: `graphs` graphs, `trials` random orders each.
pub fn lt_overhead_measured(
    k: usize,
    n: usize,
    c: f64,
    delta: f64,
    graphs: usize,
    trials: usize,
    seed: u64,
) -> Result<Vec<f64>, SimError> {
    let mut out = Vec::new();
    for g in 0..graphs {
        let code = LtCode::new(LtParams {
            k,
            n,
            block_size: 1,
            c,
            delta,
            seed: mix(seed, g as u64),
        })?;
        out.extend(
            code.reception_overhead(trials, mix(seed, 1 << 40 | g as u64))
                .into_iter()
                .map(|x| x - 1.0),
        );
    }
    Ok(out)
}

/// One adaptive round of RRAID-A: (disk asked, byte ranges (block, lo, hi) moved to it, disk they
/// were taken from).
pub type Round = (usize, Vec<(u32, u64, u64)>, usize);

#[allow(clippy::too_many_arguments)]
fn run_read(
    cfg: &Config,
    obj: &Object,
    layout: &[Vec<u32>],
    n_coded: usize,
    st: &mut PointState,
    rng: &mut Rng,
    setups: Vec<DiskSetup>,
) -> Result<(AccessResult, Vec<Round>), SimError> {
    let k = cfg.k();
    let h = cfg.disks;
    let block = cfg.block_bytes;
    let filers = cfg.filers();
    let caches = st.caches.as_deref_mut();
    let mut eng = Engine::new(
        IoKind::Read,
        setups,
        filers,
        cfg.rtt,
        cfg.link_rate,
        caches,
        Rng::new(rng.next_u64()),
        warmup(cfg),
    );
    let t0 = 2.0 * cfg.metadata_cost;
    let k_eff = k;
    let (finish, reception, rounds) = match cfg.scheme {
        Scheme::Raid0 | Scheme::RraidS | Scheme::RobuStore => {
            for (d, list) in layout.iter().enumerate() {
                eng.request_at(t0, d, jobs_for(list, 0..list.len(), obj.base, block));
            }
            let need = match (cfg.scheme, cfg.code) {
                (Scheme::RobuStore, Rateless::Lt { c, delta }) => {
                    let code = LtCode::new(LtParams {
                        k,
                        n: n_coded,
                        block_size: 1,
                        c,
                        delta,
                        seed: obj.graph_seed,
                    })?;
                    Need::Lt(Box::new(LtDecoder::new(code)))
                }
                (Scheme::RobuStore, Rateless::RaptorQ) => {
                    let i = rng.below(st.raptor_needed.len() as u64) as usize;
                    Need::Count {
                        need: st.raptor_needed[i],
                        seen: vec![false; n_coded],
                    }
                }
                _ => Need::Plain {
                    got: vec![false; k],
                    missing: k,
                },
            };
            let decode =
                (cfg.scheme == Scheme::RobuStore).then_some((block as f64 / cfg.decode_rate, 0.0));
            let mut c = Speculative {
                need,
                received: 0,
                decode,
                done: false,
            };
            let f = eng.run(&mut c);
            let rec =
                (cfg.scheme == Scheme::RobuStore).then(|| c.received as f64 / k_eff as f64 - 1.0);
            (f, rec, Vec::new())
        }
        Scheme::RraidA => {
            let mut pos = vec![vec![u32::MAX; k]; h];
            for (d, list) in layout.iter().enumerate() {
                for (p, &b) in list.iter().enumerate() {
                    pos[d][b as usize] = p as u32;
                }
            }
            let mut c = Adaptive {
                split: cfg.rraid_a_split,
                h,
                replicas: cfg.replicas(),
                block,
                base: obj.base,
                pos,
                pieces: Vec::new(),
                pending: vec![Vec::new(); h],
                received: vec![Vec::new(); k],
                missing: k as u64 * block,
                done: false,
                rounds: Vec::new(),
                capped: false,
            };
            for (d, list) in layout.iter().enumerate() {
                // Replica 0 comes first on every disk: its blocks are those with i mod H == d.
                let jobs: Vec<Job> = list
                    .iter()
                    .take_while(|&&b| b as usize % h == d)
                    .map(|&b| c.new_piece(d, b, 0, block))
                    .collect();
                eng.request_at(t0, d, jobs);
            }
            let f = eng.run(&mut c);
            debug_assert!(!c.capped, "RRAID-A reached its round bound");
            (f, None, c.rounds)
        }
    };
    let latency = finish.ok_or_else(|| {
        bad(
            "redundancy",
            "the stored blocks cannot complete this read (too little redundancy for the code)",
        )
    })?;
    let bg: f64 = eng.stats.iter().map(|s| s.bg_busy).sum();
    let requests = eng.stats.iter().map(|s| s.jobs_requested).sum::<u64>();
    Ok((
        AccessResult {
            latency,
            net_bytes: eng.net_bytes,
            disk_bytes: eng.disk_bytes,
            reception_overhead: reception,
            bg_utilization: bg / (h as f64 * latency.max(1e-12)),
            requests,
        },
        rounds,
    ))
}

/// A write; returns the result and, for RobuSTore, how many coded blocks each disk now holds.
fn run_write(
    cfg: &Config,
    obj: &Object,
    rng: &mut Rng,
) -> Result<(AccessResult, Vec<usize>), SimError> {
    let k = cfg.k();
    let h = cfg.disks;
    let block = cfg.block_bytes;
    let setups = setups(cfg, obj, rng);
    let mut eng = Engine::new(
        IoKind::Write,
        setups,
        cfg.filers(),
        cfg.rtt,
        cfg.link_rate,
        None,
        Rng::new(rng.next_u64()),
        warmup(cfg),
    );
    let t0 = 2.0 * cfg.metadata_cost;
    let (target, speculative) = match cfg.scheme {
        Scheme::RobuStore => {
            let n = cfg.coded_blocks();
            // Each disk is offered as many blocks as could ever be needed from it.
            for d in 0..h {
                let jobs = (0..n)
                    .map(|p| Job {
                        id: p as u32,
                        bytes: block,
                        addr: obj.base + p as u64 * block,
                    })
                    .collect();
                eng.request_at(t0, d, jobs);
            }
            (n, true)
        }
        _ => {
            let replicas = if cfg.scheme == Scheme::Raid0 {
                1
            } else {
                cfg.replicas()
            };
            let layout = rraid_layout(k, h, replicas);
            for (d, list) in layout.iter().enumerate() {
                eng.request_at(t0, d, jobs_for(list, 0..list.len(), obj.base, block));
            }
            (k * replicas, false)
        }
    };
    let mut w = Writer {
        target,
        acked: 0,
        per_disk: vec![0; h],
        cancel: speculative,
    };
    let latency = eng
        .run(&mut w)
        .ok_or_else(|| bad("redundancy", "the write could not complete"))?
        + cfg.metadata_cost;
    let bg: f64 = eng.stats.iter().map(|s| s.bg_busy).sum();
    let requests = eng.stats.iter().map(|s| s.jobs_requested).sum();
    Ok((
        AccessResult {
            latency,
            net_bytes: eng.net_bytes,
            disk_bytes: eng.disk_bytes,
            reception_overhead: None,
            bg_utilization: bg / (h as f64 * latency.max(1e-12)),
            requests,
        },
        w.per_disk,
    ))
}

/// Run one access (index `a` of the point) with its own generator.
fn run_access(cfg: &Config, a: usize, st: &mut PointState) -> Result<AccessResult, SimError> {
    let mut rng = Rng::new(mix(cfg.seed, a as u64 + 1));
    let object = if cfg.cache {
        rng.below(cfg.objects as u64) as usize
    } else {
        a
    };
    let obj = Object::new(cfg, object);
    let (k, h) = (cfg.k(), cfg.disks);
    let balanced = || match cfg.scheme {
        Scheme::Raid0 => (rraid_layout(k, h, 1), k),
        Scheme::RraidS | Scheme::RraidA => (rraid_layout(k, h, cfg.replicas()), k),
        Scheme::RobuStore => {
            let mut place = Rng::new(obj.graph_seed ^ 0x91ace);
            (
                coded_layout(cfg.coded_blocks(), h, &mut place),
                cfg.coded_blocks(),
            )
        }
    };
    match cfg.op {
        Op::Read => {
            let (layout, n) = balanced();
            let s = setups(cfg, &obj, &mut rng);
            Ok(run_read(cfg, &obj, &layout, n, st, &mut rng, s)?.0)
        }
        Op::Write => Ok(run_write(cfg, &obj, &mut rng)?.0),
        Op::ReadAfterWrite => {
            // Only RobuSTore's write changes the layout a read finds; the others read their balanced
            // layout (their write is not simulated: it would not change the read).
            if cfg.scheme == Scheme::RobuStore {
                let (_, per_disk) = run_write(cfg, &obj, &mut rng)?;
                // The unbalanced layout the speculative write left: disk d holds per_disk[d] blocks.
                // Which coded ids went where is random (see `coded_layout`).
                let total: usize = per_disk.iter().sum();
                let mut ids: Vec<u32> = (0..total as u32).collect();
                Rng::new(obj.graph_seed ^ 0x91ace).shuffle(&mut ids);
                let mut layout = Vec::with_capacity(h);
                let mut next = 0usize;
                for &c in &per_disk {
                    layout.push(ids[next..next + c].to_vec());
                    next += c;
                }
                let s = setups(cfg, &obj, &mut rng);
                Ok(run_read(cfg, &obj, &layout, total, st, &mut rng, s)?.0)
            } else {
                let (layout, n) = balanced();
                let s = setups(cfg, &obj, &mut rng);
                Ok(run_read(cfg, &obj, &layout, n, st, &mut rng, s)?.0)
            }
        }
    }
}

/// Run every access of a point, in order (the cache carries over from one to the next), and summarise.
/// Deterministic: the same configuration gives the same result on every run and machine.
pub fn run_point(cfg: &Config) -> Result<(PointResult, Vec<AccessResult>), SimError> {
    cfg.validate()?;
    let mut st = PointState {
        caches: cfg.cache.then(|| {
            vec![Cache::new(cfg.cache_bytes, cfg.cache_line, cfg.cache_ways); cfg.filers()]
        }),
        raptor_needed: Vec::new(),
    };
    if cfg.scheme == Scheme::RobuStore && cfg.code == Rateless::RaptorQ && cfg.op != Op::Write {
        st.raptor_needed = raptorq_needed(cfg.k(), cfg.coded_blocks(), 32, mix(cfg.seed, 0x5a))?;
    }
    let mut all = Vec::with_capacity(cfg.accesses);
    for a in 0..cfg.accesses {
        all.push(run_access(cfg, a, &mut st)?);
    }
    Ok((summarise(cfg, &all), all))
}

/// Mean bandwidth, latency mean and sample deviation, overheads.
pub fn summarise(cfg: &Config, all: &[AccessResult]) -> PointResult {
    let n = all.len().max(1) as f64;
    let size = cfg.data_bytes as f64;
    let mean = |f: &dyn Fn(&AccessResult) -> f64| all.iter().map(f).sum::<f64>() / n;
    let lat = mean(&|r| r.latency);
    let var = if all.len() > 1 {
        all.iter().map(|r| (r.latency - lat).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    let rec: Vec<f64> = all.iter().filter_map(|r| r.reception_overhead).collect();
    PointResult {
        accesses: all.len(),
        bandwidth_mbps: mean(&|r| size / r.latency / MB),
        latency_mean_s: lat,
        latency_std_s: var.sqrt(),
        io_overhead: mean(&|r| (r.net_bytes as f64 - size) / size),
        disk_overhead: mean(&|r| (r.disk_bytes as f64 - size) / size),
        reception_overhead: (!rec.is_empty()).then(|| rec.iter().sum::<f64>() / rec.len() as f64),
        bg_utilization: mean(&|r| r.bg_utilization),
    }
}

#[cfg(test)]
mod tests;
