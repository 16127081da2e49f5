//! Simulated SSD: a page-mapped FTL with greedy garbage collection, in virtual time.
//!
//! # Model
//! * Geometry: `blocks` erase blocks of `pages_per_block` pages of `page_size` bytes. A fraction `op`
//!   of the physical pages is over-provisioning: the host sees `floor(blocks * pages_per_block * (1-op))`
//!   logical pages.
//! * Mapping: a flat logical→physical table (`l2p`) and physical→logical table (`p2l`), `u32` each.
//!   Writes go out of place to the single open ("frontier") block; the page they replace is invalidated.
//! * Garbage collection: when the number of free blocks drops below the low watermark
//!   (`ceil(gc_low * blocks)`, at least 2) after a block allocation, GC runs until free blocks reach the
//!   high watermark (`max(low, ceil(gc_high * blocks))`). Each step is **greedy**: the full block with
//!   the fewest valid pages is the victim; its valid pages are copied to the frontier, then it is erased
//!   and appended to the FIFO free list. Full blocks sit in buckets indexed by valid-page count
//!   (intrusive doubly-linked lists), so invalidation and victim selection are O(1) (amortized; a hint
//!   tracks the lowest non-empty bucket). No wear-leveling migration (EPLOG §5.2 Exp 2 disables it).
//! * TRIM invalidates the mapped pages of the range.
//! * Time: one flash element, no internal parallelism. A host page write costs the interface transfer
//!   plus the page program latency of the target block's cell mode; a host read costs the page read plus
//!   the transfer (an unmapped page costs the transfer only); GC is foreground and charges each copied
//!   page a read + program and each victim an erase to the host write that triggered it. Latencies per
//!   cell mode are Table 4.1 of the ZombieNAND thesis (§4.4.2); the interface is SATA 300 (300 MB/s).
//! * Page sizes per cell mode (Table 4.1: SLC 2 KiB, MLC 4 KiB, TLC 8 KiB): the host's logical page
//!   (`page_size`) is the mapping unit. In the native mode (`SsdConfig::mode`) a logical page costs one
//!   page operation of that mode. In a fallback mode M it costs `max(1, n(M) / n(native))` page
//!   operations of M, with `n(X) = ceil(page_size / page(X))` the pages of X one logical page needs:
//!   with 8 KiB logical pages on TLC, an MLC block programs 2 pages and an SLC block 4; with 4 KiB
//!   logical pages, MLC 1 and SLC 2.
//!
//! # Wear physics (ZombieNAND)
//! Every block carries a [`BlockInfo`]: erase count, current [`CellMode`], usable pages in that mode and
//! a [`BlockStatus`] that includes `Retired`. After every erase the model asks its [`WearModel`] what to
//! do with the block: keep it, switch it to a lower-bit cell mode with fewer usable pages (bit-mode
//! fallback) or retire it. The default [`NoWear`] keeps every block forever; [`super::wear::ZombieWear`]
//! is the seed's oxide-stress physics. Physical page numbers are `block * pages_per_block + slot`, with
//! `slot < BlockInfo::pages <= pages_per_block`, so a block whose capacity shrinks keeps its place in
//! every table.
//! * Capacity accounting: `capacity_pages` is the sum of the usable pages of every block not retired.
//! * Drive death ([`DeathRule`]): under `Capacity` (the default) the drive is dead when its spare
//!   capacity (`capacity_pages − logical_pages`) can no longer hold the GC high-watermark pool plus the
//!   open block, `(high_blocks + 1) · pages_per_block` pages (§4.3.2: "provided the reserved capacity
//!   of the drive has not fallen below the high-watermark percentage"); under `RetiredBlocks` when more
//!   than `floor((R − W) · blocks)` blocks are retired (Eq. 4.1: "we consider a drive dead if it
//!   exceeds this amount of dead blocks"). Under either, when GC finds no victim or no free block. A
//!   dead model rejects every later host write and read with one error line. With [`NoWear`] capacity
//!   never shrinks, no block retires and `validate` guarantees the spare, so neither rule fires.
//! * GC policy ([`GcPolicy`]): greedy (the default, above), or Algorithm 6 of the thesis: buckets by
//!   valid pages (Algorithm 5's usage table), inside a bucket early-switch blocks first and then the
//!   most remaining life first; a normal block whose remaining life is below `life_threshold ×` the
//!   mean ([`LifeAverage`]: of the normal blocks, or of every live block) is skipped; early-switch
//!   blocks are never skipped (§4.3.1 baseline wear-leveling; §4.3.2 wear-unleveling when the pool of
//!   Eq. 4.1 is non-empty).

use std::collections::VecDeque;
use std::sync::Mutex;

use super::sparse::SparseData;
use crate::{check_range, BlockDevice, DeviceError, DeviceStats, ModelStats, Result};

const NONE: u32 = u32::MAX;

const STATE_MAGIC: &[u8; 8] = b"ECSSDST1";

/// FNV-1a, 64 bits: the checksum of saved model states.
pub fn fnv1a64(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

struct StateReader<'a> {
    b: &'a [u8],
    at: usize,
}

impl StateReader<'_> {
    fn bytes(&mut self, n: usize) -> std::result::Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| "SSD model state is truncated".to_string())?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().unwrap()))
    }
}

/// One field of a saved SSD model state, with how to read it from a model and how to set it: the
/// one list [`SsdModel::save_state`] and [`SsdModel::load_state`] both walk, in file order.
enum StateField {
    /// A counter, stored as a little-endian u64.
    U64(fn(&SsdModel) -> u64, fn(&mut SsdModel, u64)),
    /// A table of u32 whose length the geometry fixes (so it is not stored).
    U32s(fn(&SsdModel) -> &[u32], fn(&mut SsdModel) -> &mut Vec<u32>),
    /// Per block: six u32 ([`block_words`]).
    Blocks,
    /// The free list: its length (u64), then the block numbers (u32).
    Free,
    /// Whether the drive is dead (u64 0/1), the reason's length (u64), the reason (UTF-8).
    Dead,
}

/// A field's value decoded from a state, before it is applied.
enum StateValue {
    U64(u64),
    U32s(Vec<u32>),
    Blocks(Vec<BlockInfo>),
    Free(VecDeque<u32>),
    Dead(Option<String>),
}

macro_rules! u64_field {
    ($f:ident) => {
        StateField::U64(|m| m.$f, |m, v| m.$f = v)
    };
    ($f:ident as u32) => {
        StateField::U64(|m| m.$f as u64, |m, v| m.$f = v as u32)
    };
}

macro_rules! u32s_field {
    ($f:ident) => {
        StateField::U32s(|m| m.$f.as_slice(), |m| &mut m.$f)
    };
}

/// The saved state after the geometry. Changing this list changes the format (`STATE_MAGIC`).
const STATE_FIELDS: &[StateField] = &[
    u64_field!(host_page_writes),
    u64_field!(host_page_reads),
    u64_field!(host_trimmed_pages),
    u64_field!(flash_page_writes),
    u64_field!(flash_page_reads),
    u64_field!(gc_copies),
    u64_field!(gc_invocations),
    u64_field!(gc_victims),
    u64_field!(erases),
    u64_field!(retired),
    u64_field!(valid_pages),
    u64_field!(now_ns),
    u64_field!(capacity_pages),
    u64_field!(mode_switches),
    u64_field!(wear_level_skips),
    u64_field!(min_hint as u32),
    u64_field!(open as u32),
    u32s_field!(l2p),
    u32s_field!(p2l),
    u32s_field!(bucket_head),
    u32s_field!(next),
    u32s_field!(prev),
    StateField::Blocks,
    StateField::Free,
    StateField::Dead,
];

fn put_u32s(o: &mut Vec<u8>, v: &[u32]) {
    for x in v {
        o.extend_from_slice(&x.to_le_bytes());
    }
}

/// A block's saved words: erase count, erase count at the mode switch, valid pages, write pointer,
/// usable pages, flags (status in bits 0-3, bits per cell in 4-7, early switch in bit 8).
fn block_words(b: &BlockInfo) -> [u32; 6] {
    let status = match b.status {
        BlockStatus::Free => 0,
        BlockStatus::Open => 1,
        BlockStatus::Full => 2,
        BlockStatus::Retired => 3,
    };
    let flags = status | (b.mode.bits_per_cell() << 4) | ((b.early_switch as u32) << 8);
    [
        b.erase_count,
        b.mode_since_erase,
        b.valid,
        b.write_ptr,
        b.pages,
        flags,
    ]
}

/// The inverse of [`block_words`].
fn set_block_words(b: &mut BlockInfo, w: [u32; 6]) -> std::result::Result<(), String> {
    [
        b.erase_count,
        b.mode_since_erase,
        b.valid,
        b.write_ptr,
        b.pages,
    ] = [w[0], w[1], w[2], w[3], w[4]];
    b.status = match w[5] & 0xF {
        0 => BlockStatus::Free,
        1 => BlockStatus::Open,
        2 => BlockStatus::Full,
        3 => BlockStatus::Retired,
        _ => return Err("SSD model state: bad block status".into()),
    };
    b.mode = match (w[5] >> 4) & 0xF {
        1 => CellMode::Slc,
        2 => CellMode::Mlc,
        3 => CellMode::Tlc,
        _ => return Err("SSD model state: bad cell mode".into()),
    };
    b.early_switch = (w[5] >> 8) & 1 == 1;
    Ok(())
}

/// Most erase blocks a simulated SSD may have (the model keeps per-block state).
pub const SSD_BLOCKS_MAX: u32 = 1 << 24;

/// NAND cell mode (bits per cell), with the access latencies of ZombieNAND Table 4.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CellMode {
    Slc,
    Mlc,
    Tlc,
}

impl CellMode {
    pub fn bits_per_cell(self) -> u32 {
        match self {
            CellMode::Slc => 1,
            CellMode::Mlc => 2,
            CellMode::Tlc => 3,
        }
    }
    /// Page read latency, ns (Table 4.1: 0.025 / 0.05 / 0.15 ms).
    pub fn read_ns(self) -> u64 {
        match self {
            CellMode::Slc => 25_000,
            CellMode::Mlc => 50_000,
            CellMode::Tlc => 150_000,
        }
    }
    /// Page program latency, ns (Table 4.1: 0.2 / 0.5 / 1.0 ms).
    pub fn program_ns(self) -> u64 {
        match self {
            CellMode::Slc => 200_000,
            CellMode::Mlc => 500_000,
            CellMode::Tlc => 1_000_000,
        }
    }
    /// Block erase latency, ns (Table 4.1: 1.5 / 1.5 / 3.0 ms).
    pub fn erase_ns(self) -> u64 {
        match self {
            CellMode::Slc => 1_500_000,
            CellMode::Mlc => 1_500_000,
            CellMode::Tlc => 3_000_000,
        }
    }
    /// Page size of this mode in Table 4.1 (2 / 4 / 8 KiB).
    pub fn table_page_size(self) -> u32 {
        match self {
            CellMode::Slc => 2048,
            CellMode::Mlc => 4096,
            CellMode::Tlc => 8192,
        }
    }
    /// P/E cycles at which an unswitched SSD of this mode dies in ZombieNAND §4.4.2 (75,000 / 6,000 / 1,000).
    pub fn rated_pe_cycles(self) -> u32 {
        match self {
            CellMode::Slc => 75_000,
            CellMode::Mlc => 6_000,
            CellMode::Tlc => 1_000,
        }
    }
    pub fn parse(s: &str) -> Option<CellMode> {
        match s.to_ascii_lowercase().as_str() {
            "slc" => Some(CellMode::Slc),
            "mlc" => Some(CellMode::Mlc),
            "tlc" => Some(CellMode::Tlc),
            _ => None,
        }
    }
}

/// Life-cycle state of an erase block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockStatus {
    Free,
    Open,
    Full,
    Retired,
}

/// Per-block state. Wear physics (a later issue) reads `erase_count` and `mode` and changes `mode`,
/// `pages` and `status` through a [`WearModel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BlockInfo {
    pub erase_count: u32,
    /// `erase_count` when the block entered its current mode (0 for the native mode).
    pub mode_since_erase: u32,
    /// Member of the early-switch pool (ZombieNAND §4.3.2, Eq. 4.1).
    pub early_switch: bool,
    /// Valid pages currently stored.
    pub valid: u32,
    /// Next slot to program.
    pub write_ptr: u32,
    /// Usable page slots in the current mode (≤ `pages_per_block`).
    pub pages: u32,
    pub mode: CellMode,
    pub status: BlockStatus,
}

/// What to do with a block after an erase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WearAction {
    Keep,
    /// Bit-mode fallback: reprogram the block in `mode` with `pages` usable slots.
    Switch {
        mode: CellMode,
        pages: u32,
    },
    Retire,
}

/// Hook called after every erase; implement it to add cell-wear physics.
pub trait WearModel: Send + std::fmt::Debug {
    fn after_erase(&mut self, block: u32, info: &BlockInfo) -> WearAction;
    /// Remaining life of a block in its current mode, in the model's own unit (Algorithm 6 compares
    /// blocks with the mean of their group). The default counts erases left before the rated count.
    fn remaining_life(&self, info: &BlockInfo) -> f64 {
        info.mode.rated_pe_cycles() as f64 - info.erase_count as f64
    }
}

/// How GC picks its victims.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "policy")]
pub enum GcPolicy {
    /// Fewest valid pages first, no wear-leveling (EPLOG §5.2 Exp 2).
    Greedy,
    /// ZombieNAND Algorithm 6 (with Algorithm 5's usage table). `early_switch_blocks` blocks per element
    /// (Eq. 4.1; 0 = the §4.3.1 baseline wear-leveling) form the early-switch pool, taken from the
    /// start of each of `elements` equal runs of blocks.
    Leveled {
        life_threshold: f64,
        elements: u32,
        early_switch_blocks: u32,
        /// Which blocks Algorithm 6's `avg_life` averages over.
        #[serde(default)]
        average: LifeAverage,
    },
}

/// Algorithm 6's `avg_life ← COMPUTE_AVG_LIFE(element)`: over which blocks the mean remaining life is
/// taken before a normal block below `life_threshold × avg_life` is skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LifeAverage {
    /// The normal blocks only (§4.3.2: "early-switch blocks are not wear-leveled against normal
    /// blocks (and importantly, vice-versa)").
    #[default]
    Group,
    /// Every live block of the element, the early-switch pool included (Algorithm 6 line 1,
    /// `COMPUTE_AVG_LIFE(element)`; §4.3.1: "the average erase count of the entire package").
    Element,
}

impl LifeAverage {
    pub fn parse(s: &str) -> Option<LifeAverage> {
        match s {
            "group" => Some(LifeAverage::Group),
            "element" => Some(LifeAverage::Element),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            LifeAverage::Group => "group",
            LifeAverage::Element => "element",
        }
    }
}

/// When a drive whose blocks switch and retire declares itself dead (besides GC finding no victim or
/// no free block, which ends any drive).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeathRule {
    /// Spare capacity (usable pages − logical pages) below the GC high-watermark pool plus the open
    /// block, `(high_blocks + 1) · pages_per_block` pages: every page lost to a mode switch or a
    /// retirement counts (§4.3.2: "provided the reserved capacity of the drive has not fallen below
    /// the high-watermark percentage, the block can live on").
    #[default]
    Capacity,
    /// More retired (dead) blocks than `floor((R − W) · blocks)`, R = `op`, W = `gc_high`; a mode
    /// switch costs no budget (§4.3.2, Eq. 4.1: "we consider a drive dead if it exceeds this amount
    /// of dead blocks"). Capacity lost to switches still ends the drive once GC can no longer free a
    /// block.
    RetiredBlocks,
}

impl DeathRule {
    pub fn parse(s: &str) -> Option<DeathRule> {
        match s {
            "capacity" => Some(DeathRule::Capacity),
            "retired-blocks" => Some(DeathRule::RetiredBlocks),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DeathRule::Capacity => "capacity",
            DeathRule::RetiredBlocks => "retired-blocks",
        }
    }
}

/// No wear: blocks live forever.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoWear;

impl WearModel for NoWear {
    fn after_erase(&mut self, _block: u32, _info: &BlockInfo) -> WearAction {
        WearAction::Keep
    }
}

/// SSD geometry and policy.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SsdConfig {
    pub blocks: u32,
    pub pages_per_block: u32,
    pub page_size: u32,
    /// Over-provisioning: fraction of physical pages not exposed to the host.
    pub op: f64,
    /// GC starts when free blocks < `ceil(gc_low * blocks)` (at least 2).
    pub gc_low: f64,
    /// GC stops when free blocks ≥ `max(low, ceil(gc_high * blocks))`.
    pub gc_high: f64,
    pub mode: CellMode,
    /// Host interface bandwidth, MB/s (10^6 bytes/s).
    pub interface_mbps: f64,
    /// Keep the data (reads return what was written); otherwise metadata only and reads return zeros.
    pub keep_data: bool,
    pub gc_policy: GcPolicy,
    /// When a wearing drive declares itself dead (never fires without wear).
    pub death_rule: DeathRule,
}

impl Default for SsdConfig {
    /// EPLOG §5.2 Exp 2: 16,384 blocks × 64 pages × 4 KiB (4 GiB raw in this model), 15% OP, GC when
    /// clean blocks < 5%, greedy; MLC latencies; SATA 300; metadata only.
    fn default() -> Self {
        SsdConfig {
            blocks: 16_384,
            pages_per_block: 64,
            page_size: 4096,
            op: 0.15,
            gc_low: 0.05,
            gc_high: 0.05,
            mode: CellMode::Mlc,
            interface_mbps: 300.0,
            keep_data: false,
            gc_policy: GcPolicy::Greedy,
            death_rule: DeathRule::Capacity,
        }
    }
}

impl SsdConfig {
    /// Named presets: `eplog` (the default), `zombienand` (Table 4.2 synthetic: one element, 128 blocks
    /// of 128 pages, GC 2%/5%, TLC 8 KiB pages, 10% reserve) and `zombienand-trace` (Table 4.2
    /// trace-driven: 4 × 512 blocks of 128 pages, same policy).
    pub fn preset(name: &str) -> Option<SsdConfig> {
        let zombie = SsdConfig {
            blocks: 128,
            pages_per_block: 128,
            page_size: 8192,
            op: 0.10,
            gc_low: 0.02,
            gc_high: 0.05,
            mode: CellMode::Tlc,
            ..SsdConfig::default()
        };
        match name {
            "eplog" => Some(SsdConfig::default()),
            "zombienand" => Some(zombie),
            "zombienand-trace" => Some(SsdConfig {
                blocks: 2048,
                ..zombie
            }),
            _ => None,
        }
    }

    pub fn logical_pages(&self) -> u64 {
        ((self.blocks as u64 * self.pages_per_block as u64) as f64 * (1.0 - self.op)).floor() as u64
    }

    pub fn low_blocks(&self) -> u32 {
        ((self.gc_low * self.blocks as f64).ceil() as u32).max(2)
    }

    pub fn high_blocks(&self) -> u32 {
        ((self.gc_high * self.blocks as f64).ceil() as u32).max(self.low_blocks())
    }

    /// [`DeathRule::RetiredBlocks`]'s budget: `floor((R − W) · blocks)` retired blocks (Eq. 4.1's
    /// `(R − W) · B` per element, summed over the elements), 0 when R ≤ W.
    pub fn retired_blocks_max(&self) -> u64 {
        let spare = self.op - self.gc_high;
        if spare <= 0.0 {
            return 0;
        }
        // The epsilon keeps exact products (0.25 × 128 = 32) from rounding below.
        (spare * self.blocks as f64 + 1e-9).floor() as u64
    }

    /// Check the configuration; the error is one line.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.blocks < 4 || self.pages_per_block == 0 || self.page_size == 0 {
            return Err("need at least 4 blocks, 1 page per block and a non-zero page size".into());
        }
        if (self.blocks as u64) * (self.pages_per_block as u64) >= u32::MAX as u64 {
            return Err("blocks × pages_per_block must be below 2^32".into());
        }
        if self.blocks > SSD_BLOCKS_MAX {
            return Err(format!("at most {SSD_BLOCKS_MAX} blocks"));
        }
        if !(0.0..1.0).contains(&self.op)
            || !(0.0..1.0).contains(&self.gc_low)
            || !(0.0..1.0).contains(&self.gc_high)
        {
            return Err("op, gc_low and gc_high must be fractions in [0, 1)".into());
        }
        if !self.interface_mbps.is_finite() || self.interface_mbps <= 0.0 {
            return Err("interface bandwidth must be positive".into());
        }
        if let GcPolicy::Leveled {
            life_threshold,
            elements,
            early_switch_blocks,
            ..
        } = self.gc_policy
        {
            if !(0.0..=1.0).contains(&life_threshold) {
                return Err("life_threshold must be a fraction in [0, 1]".into());
            }
            if elements == 0 || self.blocks % elements != 0 {
                return Err(format!(
                    "{} blocks do not split into {elements} elements",
                    self.blocks
                ));
            }
            if early_switch_blocks > self.blocks / elements {
                return Err("the early-switch pool is larger than an element".into());
            }
        }
        // GC must always find a victim with an invalid page: the full blocks (all but the free pool and
        // the open block) must hold more pages than the host can keep valid.
        let outside = (self.blocks as u64)
            .checked_sub(self.high_blocks() as u64 + 2)
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                format!(
                    "GC watermark gc_high={} reserves {} of {} blocks as free pool, leaving none \
                     for data (need at least the free pool + 3 blocks)",
                    self.gc_high,
                    self.high_blocks(),
                    self.blocks
                )
            })?;
        let usable = outside * self.pages_per_block as u64;
        if self.logical_pages() == 0 || self.logical_pages() > usable {
            return Err(format!(
                "over-provisioning {} is too small for GC watermarks {}/{}: {} logical pages but only {} \
                 pages outside the free pool",
                self.op,
                self.gc_low,
                self.gc_high,
                self.logical_pages(),
                usable
            ));
        }
        Ok(())
    }
}

/// Counters of an [`SsdModel`]. `write_amplification = flash_page_writes / host_page_writes`.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SsdStats {
    pub host_page_writes: u64,
    pub host_page_reads: u64,
    pub host_trimmed_pages: u64,
    pub flash_page_writes: u64,
    pub flash_page_reads: u64,
    pub gc_copies: u64,
    /// GC episodes (watermark crossings).
    pub gc_invocations: u64,
    /// Blocks cleaned by GC (victims).
    pub gc_victims: u64,
    pub erases: u64,
    pub write_amplification: f64,
    pub modeled_ns: u64,
    pub free_blocks: u64,
    pub retired_blocks: u64,
    pub valid_pages: u64,
    pub logical_pages: u64,
    pub erase_min: u32,
    pub erase_max: u32,
    pub erase_mean: f64,
    /// Usable logical pages of all blocks not retired.
    #[serde(default)]
    pub capacity_pages: u64,
    /// Blocks alive per cell mode.
    #[serde(default)]
    pub blocks_slc: u64,
    #[serde(default)]
    pub blocks_mlc: u64,
    #[serde(default)]
    pub blocks_tlc: u64,
    /// Bit-mode fallbacks so far.
    #[serde(default)]
    pub mode_switches: u64,
    /// GC victims that Algorithm 6 chose past a skipped (over-worn) block.
    #[serde(default)]
    pub wear_level_skips: u64,
    #[serde(default)]
    pub dead: bool,
}

/// The FTL state machine. Not thread-safe by itself; [`SimSsd`] wraps it in a mutex.
#[derive(Debug)]
pub struct SsdModel {
    cfg: SsdConfig,
    ppb: u32,
    /// `log2(ppb)` when `ppb` is a power of two (block index by shift instead of division).
    ppb_shift: Option<u32>,
    logical_pages: u32,
    low: u32,
    high: u32,
    l2p: Vec<u32>,
    p2l: Vec<u32>,
    blocks: Vec<BlockInfo>,
    // Buckets of full blocks by valid count: intrusive doubly-linked lists.
    bucket_head: Vec<u32>,
    next: Vec<u32>,
    prev: Vec<u32>,
    min_hint: u32,
    free: VecDeque<u32>,
    open: u32,
    in_gc: bool,
    xfer_ns: u64,
    /// Per-logical-page program and read cost and per-block erase cost, indexed by bits per cell − 1.
    program_ns: [u64; 3],
    read_ns: [u64; 3],
    erase_ns: [u64; 3],
    capacity_pages: u64,
    dead: Option<String>,
    mode_switches: u64,
    wear_level_skips: u64,
    wear: Box<dyn WearModel>,
    data: SparseData,
    // counters
    host_page_writes: u64,
    host_page_reads: u64,
    host_trimmed_pages: u64,
    flash_page_writes: u64,
    flash_page_reads: u64,
    gc_copies: u64,
    gc_invocations: u64,
    gc_victims: u64,
    erases: u64,
    retired: u64,
    valid_pages: u64,
    now_ns: u64,
}

impl SsdModel {
    pub fn new(cfg: SsdConfig) -> std::result::Result<SsdModel, String> {
        Self::with_wear(cfg, Box::new(NoWear))
    }

    pub fn with_wear(
        cfg: SsdConfig,
        wear: Box<dyn WearModel>,
    ) -> std::result::Result<SsdModel, String> {
        cfg.validate()?;
        let ppb = cfg.pages_per_block;
        let nblocks = cfg.blocks;
        let phys = nblocks as usize * ppb as usize;
        let logical_pages = cfg.logical_pages() as u32;
        let data = SparseData::new();
        let xfer_ns = (cfg.page_size as f64 / (cfg.interface_mbps * 1e6) * 1e9).round() as u64;
        let info = BlockInfo {
            erase_count: 0,
            mode_since_erase: 0,
            early_switch: false,
            valid: 0,
            write_ptr: 0,
            pages: ppb,
            mode: cfg.mode,
            status: BlockStatus::Free,
        };
        let mut blocks = vec![info; nblocks as usize];
        if let GcPolicy::Leveled {
            elements,
            early_switch_blocks,
            ..
        } = cfg.gc_policy
        {
            let per = nblocks / elements;
            for e in 0..elements {
                for b in 0..early_switch_blocks {
                    blocks[(e * per + b) as usize].early_switch = true;
                }
            }
        }
        let modes = [CellMode::Slc, CellMode::Mlc, CellMode::Tlc];
        // Page operations of mode `m` per logical page, relative to the native mode (which costs one
        // page operation per logical page, whatever `page_size` is: the model's long-standing rule).
        let pages_of = |m: CellMode| cfg.page_size.div_ceil(m.table_page_size()) as u64;
        let span = |m: CellMode| (pages_of(m) / pages_of(cfg.mode)).max(1);
        let program_ns = modes.map(|m| span(m) * m.program_ns());
        let read_ns = modes.map(|m| span(m) * m.read_ns());
        let erase_ns = modes.map(|m| m.erase_ns());
        Ok(SsdModel {
            ppb,
            ppb_shift: ppb.is_power_of_two().then(|| ppb.trailing_zeros()),
            logical_pages,
            low: cfg.low_blocks(),
            high: cfg.high_blocks(),
            l2p: vec![NONE; logical_pages as usize],
            p2l: vec![NONE; phys],
            blocks,
            bucket_head: vec![NONE; ppb as usize + 1],
            next: vec![NONE; nblocks as usize],
            prev: vec![NONE; nblocks as usize],
            min_hint: ppb + 1,
            free: (0..nblocks).collect(),
            open: NONE,
            in_gc: false,
            xfer_ns,
            program_ns,
            read_ns,
            erase_ns,
            capacity_pages: phys as u64,
            dead: None,
            mode_switches: 0,
            wear_level_skips: 0,
            wear,
            data,
            cfg,
            host_page_writes: 0,
            host_page_reads: 0,
            host_trimmed_pages: 0,
            flash_page_writes: 0,
            flash_page_reads: 0,
            gc_copies: 0,
            gc_invocations: 0,
            gc_victims: 0,
            erases: 0,
            retired: 0,
            valid_pages: 0,
            now_ns: 0,
        })
    }

    pub fn config(&self) -> &SsdConfig {
        &self.cfg
    }

    pub fn logical_pages(&self) -> u64 {
        self.logical_pages as u64
    }

    pub fn page_size(&self) -> u32 {
        self.cfg.page_size
    }

    /// Virtual time so far, ns.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    pub fn block(&self, b: u32) -> &BlockInfo {
        &self.blocks[b as usize]
    }

    pub fn blocks(&self) -> &[BlockInfo] {
        &self.blocks
    }

    /// Pretend block `b` has been erased `erase_count` times (hand-built states for tests and what-if
    /// tools; the wear model sees the new count at the block's next erase).
    pub fn set_erase_count(&mut self, b: u32, erase_count: u32) {
        let info = &mut self.blocks[b as usize];
        info.erase_count = erase_count;
        info.mode_since_erase = info.mode_since_erase.min(erase_count);
    }

    /// Erase count of every block, in block order.
    pub fn erase_counts(&self) -> Vec<u32> {
        self.blocks.iter().map(|b| b.erase_count).collect()
    }

    /// Physical page currently holding `lpn`, if mapped.
    pub fn mapping(&self, lpn: u64) -> Option<u64> {
        match self.l2p.get(lpn as usize) {
            Some(&p) if p != NONE => Some(p as u64),
            _ => None,
        }
    }

    pub fn stats(&self) -> SsdStats {
        let (mut mn, mut mx, mut sum) = (u32::MAX, 0u32, 0u64);
        let mut live = [0u64; 3];
        for b in &self.blocks {
            if b.status != BlockStatus::Retired {
                live[b.mode.bits_per_cell() as usize - 1] += 1;
            }
            mn = mn.min(b.erase_count);
            mx = mx.max(b.erase_count);
            sum += b.erase_count as u64;
        }
        SsdStats {
            host_page_writes: self.host_page_writes,
            host_page_reads: self.host_page_reads,
            host_trimmed_pages: self.host_trimmed_pages,
            flash_page_writes: self.flash_page_writes,
            flash_page_reads: self.flash_page_reads,
            gc_copies: self.gc_copies,
            gc_invocations: self.gc_invocations,
            gc_victims: self.gc_victims,
            erases: self.erases,
            write_amplification: if self.host_page_writes == 0 {
                0.0
            } else {
                self.flash_page_writes as f64 / self.host_page_writes as f64
            },
            modeled_ns: self.now_ns,
            free_blocks: self.free.len() as u64,
            retired_blocks: self.retired,
            valid_pages: self.valid_pages,
            logical_pages: self.logical_pages as u64,
            erase_min: if self.blocks.is_empty() { 0 } else { mn },
            erase_max: mx,
            erase_mean: sum as f64 / self.blocks.len().max(1) as f64,
            capacity_pages: self.capacity_pages,
            blocks_slc: live[0],
            blocks_mlc: live[1],
            blocks_tlc: live[2],
            mode_switches: self.mode_switches,
            wear_level_skips: self.wear_level_skips,
            dead: self.dead.is_some(),
        }
    }

    // ---- checkpoint ----------------------------------------------------------------------------

    /// The FTL's whole state as bytes (for checkpoints of long runs). Format, little-endian: magic
    /// `ECSSDST1`, the geometry (blocks, pages per block, logical pages) for a check on load, then
    /// the fields of [`STATE_FIELDS`] in order (counters, tables, per-block info, free list, death
    /// reason), then an FNV-1a 64 checksum of everything before it. Stored data (`keep_data`) is not
    /// included.
    pub fn save_state(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(16 * (self.l2p.len() + self.p2l.len()) + 64);
        o.extend_from_slice(STATE_MAGIC);
        for v in self.state_geometry() {
            o.extend_from_slice(&v.to_le_bytes());
        }
        for field in STATE_FIELDS {
            match field {
                StateField::U64(get, _) => o.extend_from_slice(&get(self).to_le_bytes()),
                StateField::U32s(get, _) => put_u32s(&mut o, get(self)),
                StateField::Blocks => {
                    for b in &self.blocks {
                        put_u32s(&mut o, &block_words(b));
                    }
                }
                StateField::Free => {
                    o.extend_from_slice(&(self.free.len() as u64).to_le_bytes());
                    for &b in &self.free {
                        o.extend_from_slice(&b.to_le_bytes());
                    }
                }
                StateField::Dead => {
                    let why = self.dead.as_deref().unwrap_or("").as_bytes();
                    o.extend_from_slice(&(self.dead.is_some() as u64).to_le_bytes());
                    o.extend_from_slice(&(why.len() as u64).to_le_bytes());
                    o.extend_from_slice(why);
                }
            }
        }
        let sum = fnv1a64(&o);
        o.extend_from_slice(&sum.to_le_bytes());
        o
    }

    /// Restore a state saved by [`SsdModel::save_state`] from a model of the same geometry. Nothing
    /// changes unless the whole state decodes. The error is one line.
    pub fn load_state(&mut self, bytes: &[u8]) -> std::result::Result<(), String> {
        if bytes.len() < STATE_MAGIC.len() + 8 || &bytes[..8] != STATE_MAGIC {
            return Err("not an SSD model state (bad magic)".into());
        }
        let (body, tail) = bytes.split_at(bytes.len() - 8);
        if fnv1a64(body) != u64::from_le_bytes(tail.try_into().unwrap()) {
            return Err("SSD model state checksum mismatch (truncated or damaged)".into());
        }
        let mut r = StateReader { b: body, at: 8 };
        let geo = [r.u64()?, r.u64()?, r.u64()?];
        if geo != self.state_geometry() {
            return Err(format!(
                "SSD model state is for {} blocks x {} pages ({} logical), not this drive's {} x {} ({})",
                geo[0], geo[1], geo[2], self.cfg.blocks, self.ppb, self.logical_pages
            ));
        }
        // Decode everything first, in field order; apply only once the whole state is read.
        let mut values = Vec::with_capacity(STATE_FIELDS.len());
        for field in STATE_FIELDS {
            values.push(match field {
                StateField::U64(..) => StateValue::U64(r.u64()?),
                StateField::U32s(get, _) => {
                    let mut t = vec![0; get(self).len()];
                    for x in t.iter_mut() {
                        *x = r.u32()?;
                    }
                    StateValue::U32s(t)
                }
                StateField::Blocks => {
                    let mut blocks = self.blocks.clone();
                    for b in blocks.iter_mut() {
                        let w = [r.u32()?, r.u32()?, r.u32()?, r.u32()?, r.u32()?, r.u32()?];
                        set_block_words(b, w)?;
                        if b.pages > self.ppb || b.write_ptr > b.pages || b.valid > b.write_ptr {
                            return Err("SSD model state: inconsistent block".into());
                        }
                    }
                    StateValue::Blocks(blocks)
                }
                StateField::Free => {
                    let nfree = r.u64()? as usize;
                    if nfree > self.blocks.len() {
                        return Err("SSD model state: bad free list".into());
                    }
                    let mut free = VecDeque::with_capacity(nfree);
                    for _ in 0..nfree {
                        free.push_back(r.u32()?);
                    }
                    StateValue::Free(free)
                }
                StateField::Dead => {
                    let has_dead = r.u64()? == 1;
                    let len = r.u64()? as usize;
                    let why = String::from_utf8(r.bytes(len)?.to_vec())
                        .map_err(|_| "SSD model state: bad death reason".to_string())?;
                    StateValue::Dead(has_dead.then_some(why))
                }
            });
        }
        if r.at != body.len() {
            return Err("SSD model state: trailing bytes".into());
        }
        for (field, value) in STATE_FIELDS.iter().zip(values) {
            match (field, value) {
                (StateField::U64(_, set), StateValue::U64(v)) => set(self, v),
                (StateField::U32s(_, set), StateValue::U32s(t)) => *set(self) = t,
                (StateField::Blocks, StateValue::Blocks(b)) => self.blocks = b,
                (StateField::Free, StateValue::Free(f)) => self.free = f,
                (StateField::Dead, StateValue::Dead(d)) => self.dead = d,
                _ => unreachable!("a state value is decoded from its own field"),
            }
        }
        Ok(())
    }

    /// The geometry a state records and is checked against on load.
    fn state_geometry(&self) -> [u64; 3] {
        [
            self.cfg.blocks as u64,
            self.ppb as u64,
            self.logical_pages as u64,
        ]
    }

    // ---- bucket lists -------------------------------------------------------------------------

    #[inline]
    fn bucket_insert(&mut self, b: u32, v: u32) {
        let head = self.bucket_head[v as usize];
        self.next[b as usize] = head;
        self.prev[b as usize] = NONE;
        if head != NONE {
            self.prev[head as usize] = b;
        }
        self.bucket_head[v as usize] = b;
        if v < self.min_hint {
            self.min_hint = v;
        }
    }

    #[inline]
    fn bucket_remove(&mut self, b: u32, v: u32) {
        let (n, p) = (self.next[b as usize], self.prev[b as usize]);
        if p != NONE {
            self.next[p as usize] = n;
        } else {
            self.bucket_head[v as usize] = n;
        }
        if n != NONE {
            self.prev[n as usize] = p;
        }
    }

    // ---- core FTL ------------------------------------------------------------------------------

    #[inline]
    fn block_of(&self, ppn: u32) -> u32 {
        match self.ppb_shift {
            Some(sh) => ppn >> sh,
            None => ppn / self.ppb,
        }
    }

    #[inline]
    fn invalidate(&mut self, ppn: u32) {
        let b = self.block_of(ppn);
        self.p2l[ppn as usize] = NONE;
        let info = &mut self.blocks[b as usize];
        let v = info.valid;
        info.valid = v - 1;
        if info.status == BlockStatus::Full {
            self.bucket_remove(b, v);
            self.bucket_insert(b, v - 1);
        }
        self.valid_pages -= 1;
    }

    fn dead(&self) -> DeviceError {
        let why = match &self.dead {
            Some(why) => why.clone(),
            None => format!("no free block left ({} blocks retired)", self.retired),
        };
        DeviceError::other(
            format!("ssd:{}x{}", self.cfg.blocks, self.cfg.pages_per_block),
            format!("the SSD is worn out: {why}"),
        )
    }

    /// Why the drive died, once it has.
    pub fn death(&self) -> Option<&str> {
        self.dead.as_deref()
    }

    /// Spare pages the drive needs to stay alive: the GC high-watermark pool plus the open block.
    pub fn spare_needed_pages(&self) -> u64 {
        (self.high as u64 + 1) * self.ppb as u64
    }

    fn check_spare(&mut self) {
        if self.dead.is_some() {
            return;
        }
        match self.cfg.death_rule {
            DeathRule::Capacity => {
                if self.capacity_pages < self.logical_pages as u64 + self.spare_needed_pages() {
                    self.dead = Some(format!(
                        "capacity {} pages leaves {} spare pages, below the {} that the GC high \
                         watermark ({} blocks) plus the open block need ({} mode switches, {} \
                         blocks retired, {} erases)",
                        self.capacity_pages,
                        self.capacity_pages
                            .saturating_sub(self.logical_pages as u64),
                        self.spare_needed_pages(),
                        self.high,
                        self.mode_switches,
                        self.retired,
                        self.erases
                    ));
                }
            }
            DeathRule::RetiredBlocks => {
                let max = self.cfg.retired_blocks_max();
                if self.retired > max {
                    self.dead = Some(format!(
                        "{} blocks retired, more than the {max} dead blocks (R − W) · blocks allows \
                         ({} mode switches, capacity {} pages, {} erases)",
                        self.retired, self.mode_switches, self.capacity_pages, self.erases
                    ));
                }
            }
        }
    }

    /// Make sure the open block has a free slot; allocates (and, outside GC, collects) as needed.
    /// Returns the time spent in GC.
    #[inline]
    fn ensure_open(&mut self) -> Result<u64> {
        if self.open != NONE {
            let o = &self.blocks[self.open as usize];
            if o.write_ptr < o.pages {
                return Ok(0);
            }
        }
        self.new_open()
    }

    /// `ensure_open` for a host write: GC (run by `new_open`) may leave the frontier block exactly
    /// full after its last copy, so check again until the host page has a slot.
    #[inline]
    fn ensure_open_after_gc(&mut self) -> Result<u64> {
        let mut t = self.ensure_open()?;
        loop {
            let o = &self.blocks[self.open as usize];
            if o.write_ptr < o.pages {
                return Ok(t);
            }
            t += self.new_open()?;
        }
    }

    #[cold]
    fn new_open(&mut self) -> Result<u64> {
        if self.open != NONE {
            let b = self.open;
            let v = self.blocks[b as usize].valid;
            self.blocks[b as usize].status = BlockStatus::Full;
            self.bucket_insert(b, v);
            self.open = NONE;
        }
        let b = match self.free.pop_front() {
            Some(b) => b,
            None => {
                if self.dead.is_none() {
                    self.dead = Some(format!(
                        "no free block left ({} blocks retired)",
                        self.retired
                    ));
                }
                return Err(self.dead());
            }
        };
        self.blocks[b as usize].status = BlockStatus::Open;
        self.open = b;
        if !self.in_gc && (self.free.len() as u32) < self.low {
            return self.collect();
        }
        Ok(0)
    }

    /// Program `lpn` into the next slot of the open block (which must have room).
    #[inline]
    fn program(&mut self, lpn: u32) -> u64 {
        let b = self.open;
        let info = &mut self.blocks[b as usize];
        let ppn = b * self.ppb + info.write_ptr;
        info.write_ptr += 1;
        info.valid += 1;
        let t = self.program_ns[info.mode.bits_per_cell() as usize - 1];
        self.p2l[ppn as usize] = lpn;
        self.l2p[lpn as usize] = ppn;
        self.valid_pages += 1;
        self.flash_page_writes += 1;
        t
    }

    /// GC until the high watermark (greedy or Algorithm 6). Returns the time spent.
    fn collect(&mut self) -> Result<u64> {
        self.in_gc = true;
        self.gc_invocations += 1;
        let r = match self.cfg.gc_policy {
            GcPolicy::Greedy => self.collect_greedy(),
            GcPolicy::Leveled { life_threshold, .. } => self.collect_leveled(life_threshold),
        };
        self.in_gc = false;
        r
    }

    fn collect_greedy(&mut self) -> Result<u64> {
        let mut t = 0;
        while (self.free.len() as u32) < self.high {
            t += self.clean_one()?;
        }
        Ok(t)
    }

    /// Algorithm 6's avg_life: the mean remaining life of the live blocks outside the early-switch
    /// pool ([`LifeAverage::Group`], the default) or of every live block ([`LifeAverage::Element`]).
    pub fn mean_remaining_life(&self) -> f64 {
        let whole = matches!(
            self.cfg.gc_policy,
            GcPolicy::Leveled {
                average: LifeAverage::Element,
                ..
            }
        );
        let (mut sum, mut n) = (0.0, 0u64);
        for info in &self.blocks {
            if info.status != BlockStatus::Retired && (whole || !info.early_switch) {
                sum += self.wear.remaining_life(info);
                n += 1;
            }
        }
        if n == 0 {
            0.0
        } else {
            sum / n as f64
        }
    }

    /// Algorithm 6 with Algorithm 5's usage table, built bucket by bucket as the walk reaches it:
    /// buckets by valid pages (fewest first, blocks without an invalid page never), inside a bucket
    /// early-switch blocks first, then the most remaining life first, then the lowest block number. A
    /// normal block whose remaining life is below `life_threshold × avg_life` is skipped. If the walk
    /// ends below the high watermark, the skipped blocks are cleaned in walk order, then greedily.
    fn collect_leveled(&mut self, life_threshold: f64) -> Result<u64> {
        let avg = self.mean_remaining_life();
        let mut t = 0;
        let mut skipped: Vec<(u32, u32)> = Vec::new();
        let mut table: Vec<(u32, bool, f64)> = Vec::new();
        let mut v = 0u32;
        while v < self.ppb && (self.free.len() as u32) < self.high {
            table.clear();
            let mut b = self.bucket_head[v as usize];
            while b != NONE {
                let info = &self.blocks[b as usize];
                if v < info.pages {
                    table.push((b, info.early_switch, self.wear.remaining_life(info)));
                }
                b = self.next[b as usize];
            }
            table.sort_by(|x, y| y.1.cmp(&x.1).then(y.2.total_cmp(&x.2)).then(x.0.cmp(&y.0)));
            for i in 0..table.len() {
                if self.free.len() as u32 >= self.high {
                    break;
                }
                let (blk, early, rem) = table[i];
                if !early && rem < life_threshold * avg {
                    self.wear_level_skips += 1;
                    skipped.push((blk, v));
                    continue;
                }
                t += self.clean_block(blk, v)?;
            }
            v += 1;
        }
        for (blk, v) in skipped {
            if self.free.len() as u32 >= self.high {
                break;
            }
            let info = &self.blocks[blk as usize];
            if info.status == BlockStatus::Full && info.valid == v {
                t += self.clean_block(blk, v)?;
            }
        }
        while (self.free.len() as u32) < self.high {
            t += self.clean_one()?;
        }
        Ok(t)
    }

    /// The block Algorithm 6 would clean first in the current state (for tests and tools): `None` when
    /// no full block has an invalid page. Greedy policy: the greedy victim.
    pub fn next_victim(&self) -> Option<u32> {
        let life_threshold = match self.cfg.gc_policy {
            GcPolicy::Greedy => f64::NEG_INFINITY,
            GcPolicy::Leveled { life_threshold, .. } => life_threshold,
        };
        let avg = self.mean_remaining_life();
        let mut first_skipped: Option<u32> = None;
        let better = |cand: (u32, bool, f64), o: Option<(u32, bool, f64)>| match o {
            None => Some(cand),
            Some(o) => {
                let gt = (cand.1, cand.2, std::cmp::Reverse(cand.0)).partial_cmp(&(
                    o.1,
                    o.2,
                    std::cmp::Reverse(o.0),
                )) == Some(std::cmp::Ordering::Greater);
                Some(if gt { cand } else { o })
            }
        };
        for v in 0..self.ppb {
            let mut best_skipped: Option<(u32, bool, f64)> = None;
            let mut best: Option<(u32, bool, f64)> = None;
            let mut b = self.bucket_head[v as usize];
            while b != NONE {
                let info = &self.blocks[b as usize];
                if v < info.pages {
                    let rem = self.wear.remaining_life(info);
                    let cand = (b, info.early_switch, rem);
                    if !info.early_switch && rem < life_threshold * avg {
                        best_skipped = better(cand, best_skipped);
                    } else if matches!(self.cfg.gc_policy, GcPolicy::Greedy) {
                        return Some(b);
                    } else {
                        best = better(cand, best);
                    }
                }
                b = self.next[b as usize];
            }
            if let Some((b, _, _)) = best {
                return Some(b);
            }
            if first_skipped.is_none() {
                first_skipped = best_skipped.map(|c| c.0);
            }
        }
        first_skipped
    }

    /// Clean the greedy victim: copy its valid pages, erase it. Returns the time spent.
    fn clean_one(&mut self) -> Result<u64> {
        let mut v = self.min_hint;
        while (v as usize) < self.bucket_head.len() && self.bucket_head[v as usize] == NONE {
            v += 1;
        }
        self.min_hint = v;
        if v as usize >= self.bucket_head.len() {
            return Err(self.dead());
        }
        let victim = self.bucket_head[v as usize];
        if v >= self.blocks[victim as usize].pages {
            // Every full block is full of valid data: nothing can be reclaimed.
            if self.dead.is_none() {
                self.dead = Some(
                    "garbage collection found no reclaimable page (too little spare capacity)"
                        .into(),
                );
            }
            return Err(DeviceError::other(
                format!("ssd:{}x{}", self.cfg.blocks, self.cfg.pages_per_block),
                "garbage collection found no reclaimable page (too little over-provisioning): \
                 the SSD is worn out",
            ));
        }
        self.clean_block(victim, v)
    }

    /// Copy the valid pages of full block `victim` (holding `v` valid pages) to the frontier, erase it.
    fn clean_block(&mut self, victim: u32, v: u32) -> Result<u64> {
        let vinfo = self.blocks[victim as usize];
        self.bucket_remove(victim, v);
        self.blocks[victim as usize].status = BlockStatus::Open; // out of the buckets while copied
        let read_ns = self.read_ns[vinfo.mode.bits_per_cell() as usize - 1];
        let mut t = 0;
        let base = victim * self.ppb;
        let mut left = v;
        let mut slot = 0;
        while left > 0 && slot < vinfo.write_ptr {
            let lpn = self.p2l[(base + slot) as usize];
            if lpn != NONE {
                t += self.ensure_open()?;
                self.p2l[(base + slot) as usize] = NONE;
                self.valid_pages -= 1;
                t += read_ns + self.program(lpn);
                self.flash_page_reads += 1;
                self.gc_copies += 1;
                left -= 1;
            }
            slot += 1;
        }
        self.gc_victims += 1;
        t += self.erase(victim);
        if self.dead.is_some() {
            // This erase retired or switched the block that left too little spare capacity: the
            // drive is dead now, and GC stops here so that every counter (capacity, switches,
            // erases) is the one the death message reports.
            return Err(self.dead());
        }
        Ok(t)
    }

    fn erase(&mut self, b: u32) -> u64 {
        self.erases += 1;
        let info = &mut self.blocks[b as usize];
        let t = self.erase_ns[info.mode.bits_per_cell() as usize - 1];
        info.erase_count += 1;
        info.valid = 0;
        info.write_ptr = 0;
        info.status = BlockStatus::Free;
        let snapshot = *info;
        match self.wear.after_erase(b, &snapshot) {
            WearAction::Keep => self.free.push_back(b),
            WearAction::Switch { mode, pages } => {
                let pages = pages.clamp(1, self.ppb);
                let info = &mut self.blocks[b as usize];
                self.capacity_pages = self.capacity_pages - info.pages as u64 + pages as u64;
                info.mode = mode;
                info.pages = pages;
                info.mode_since_erase = info.erase_count;
                self.mode_switches += 1;
                self.free.push_back(b);
                self.check_spare();
            }
            WearAction::Retire => {
                let info = &mut self.blocks[b as usize];
                info.status = BlockStatus::Retired;
                self.capacity_pages -= info.pages as u64;
                self.retired += 1;
                self.check_spare();
            }
        }
        t
    }

    #[inline]
    fn check_lpn(&self, lpn: u64) -> Result<u32> {
        if lpn < self.logical_pages as u64 {
            Ok(lpn as u32)
        } else {
            Err(DeviceError::OutOfRange {
                device: format!("ssd:{}x{}", self.cfg.blocks, self.cfg.pages_per_block),
                offset: lpn * self.cfg.page_size as u64,
                len: self.cfg.page_size as u64,
                capacity: self.logical_pages as u64 * self.cfg.page_size as u64,
            })
        }
    }

    /// Host writes one logical page. Returns its modeled latency (ns), GC included.
    #[inline]
    pub fn write_page(&mut self, lpn: u64) -> Result<u64> {
        let lpn = self.check_lpn(lpn)?;
        if self.dead.is_some() {
            return Err(self.dead());
        }
        let old = self.l2p[lpn as usize];
        if old != NONE {
            self.invalidate(old);
        }
        let gc = match self.ensure_open_after_gc() {
            Ok(gc) => gc,
            Err(e) => {
                // The drive died under this write: its old copy is already invalid (and maybe
                // erased by the GC that failed), so the page is lost; keep the tables consistent.
                self.l2p[lpn as usize] = NONE;
                return Err(e);
            }
        };
        let t = self.xfer_ns + gc + self.program(lpn);
        self.host_page_writes += 1;
        self.now_ns += t;
        Ok(t)
    }

    /// Host reads one logical page. Returns its modeled latency (ns).
    #[inline]
    pub fn read_page(&mut self, lpn: u64) -> Result<u64> {
        let lpn = self.check_lpn(lpn)?;
        if self.dead.is_some() {
            return Err(self.dead());
        }
        let p = self.l2p[lpn as usize];
        let mut t = self.xfer_ns;
        if p != NONE {
            t += self.read_ns
                [self.blocks[self.block_of(p) as usize].mode.bits_per_cell() as usize - 1];
            self.flash_page_reads += 1;
        }
        self.host_page_reads += 1;
        self.now_ns += t;
        Ok(t)
    }

    /// Host TRIMs one logical page.
    #[inline]
    pub fn trim_page(&mut self, lpn: u64) -> Result<()> {
        let lpn = self.check_lpn(lpn)?;
        let p = self.l2p[lpn as usize];
        if p != NONE {
            self.invalidate(p);
            self.l2p[lpn as usize] = NONE;
        }
        self.host_trimmed_pages += 1;
        Ok(())
    }
}

/// A simulated SSD as a [`BlockDevice`] (byte-addressed; a partial-page write is a read-modify-write of
/// the page and counts as one host page write). With `keep_data` the bytes live in a sparse store.
#[derive(Debug)]
pub struct SimSsd {
    name: String,
    capacity: u64,
    model: Mutex<SsdModel>,
    host: Mutex<DeviceStats>,
}

impl SimSsd {
    pub fn new(cfg: SsdConfig) -> Result<SimSsd> {
        let name = format!(
            "ssd:{}x{}x{}",
            cfg.blocks, cfg.pages_per_block, cfg.page_size
        );
        let model = SsdModel::new(cfg).map_err(|e| DeviceError::other(&name, e))?;
        Ok(Self::from_model(name, model))
    }

    pub fn from_model(name: impl Into<String>, model: SsdModel) -> SimSsd {
        let capacity = model.logical_pages() * model.page_size() as u64;
        SimSsd {
            name: name.into(),
            capacity,
            model: Mutex::new(model),
            host: Mutex::new(DeviceStats::default()),
        }
    }

    /// Run `f` on the model (e.g. to read erase counts).
    pub fn with_model<T>(&self, f: impl FnOnce(&mut SsdModel) -> T) -> T {
        f(&mut self.model.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn ssd_stats(&self) -> SsdStats {
        self.with_model(|m| m.stats())
    }

    fn pages(&self, offset: u64, len: u64, ps: u64) -> (u64, u64) {
        (offset / ps, (offset + len).div_ceil(ps))
    }
}

impl BlockDevice for SimSsd {
    fn name(&self) -> &str {
        &self.name
    }
    fn capacity(&self) -> u64 {
        self.capacity
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(&self.name, offset, buf.len() as u64, self.capacity)?;
        let mut m = self.model.lock().unwrap_or_else(|p| p.into_inner());
        let ps = m.page_size() as u64;
        let (first, end) = self.pages(offset, buf.len() as u64, ps);
        let mut t = 0;
        for lpn in first..end {
            t += m.read_page(lpn)?;
        }
        if m.cfg.keep_data {
            m.data.read(buf, offset);
        } else {
            buf.fill(0);
        }
        drop(m);
        let mut h = self.host.lock().unwrap_or_else(|p| p.into_inner());
        h.read_ops += 1;
        h.read_bytes += buf.len() as u64;
        h.modeled_ns += t;
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_range(&self.name, offset, buf.len() as u64, self.capacity)?;
        let mut m = self.model.lock().unwrap_or_else(|p| p.into_inner());
        let ps = m.page_size() as u64;
        let (first, end) = self.pages(offset, buf.len() as u64, ps);
        let mut t = 0;
        for lpn in first..end {
            let partial = lpn * ps < offset || (lpn + 1) * ps > offset + buf.len() as u64;
            if partial && m.mapping(lpn).is_some() {
                // Read-modify-write of a partially covered page.
                t += m.read_page(lpn)?;
                m.host_page_reads -= 1;
            }
            t += m.write_page(lpn)?;
        }
        if m.cfg.keep_data {
            m.data.write(buf, offset);
        }
        drop(m);
        let mut h = self.host.lock().unwrap_or_else(|p| p.into_inner());
        h.write_ops += 1;
        h.write_bytes += buf.len() as u64;
        h.modeled_ns += t;
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        self.host.lock().unwrap_or_else(|p| p.into_inner()).flushes += 1;
        Ok(())
    }
    /// Only with `keep_data`: otherwise reads return zeros.
    fn keeps_data(&self) -> bool {
        self.model
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .cfg
            .keep_data
    }
    /// TRIMs the pages the range covers completely (a partial page is left alone; its bytes read as
    /// zeros afterwards in data mode only if they were zero before — discard is advisory).
    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        check_range(&self.name, offset, len, self.capacity)?;
        let mut m = self.model.lock().unwrap_or_else(|p| p.into_inner());
        let ps = m.page_size() as u64;
        let first = offset.div_ceil(ps);
        let end = (offset + len) / ps;
        for lpn in first..end.max(first) {
            m.trim_page(lpn)?;
        }
        if m.cfg.keep_data && end > first {
            m.data.zero(first * ps, (end - first) * ps);
        }
        drop(m);
        let mut h = self.host.lock().unwrap_or_else(|p| p.into_inner());
        h.discards += 1;
        h.discard_bytes += len;
        Ok(())
    }
    fn stats(&self) -> DeviceStats {
        let mut s = *self.host.lock().unwrap_or_else(|p| p.into_inner());
        s.model = Some(ModelStats::Ssd(self.ssd_stats()));
        s
    }
}
