//! Exp 6 (EPLOG §5.2): the key-value store of §4 (`ecstack_kv`) on a (6+2) array of each scheme,
//! parity commit off while a run is measured.
//!
//! Per testbed, pair size (4 KiB and 8 KiB, metadata + 24-byte key + value) and scheme: one array
//! is built and pre-written like Exp 4's, a store is created on it and `pairs` pairs are loaded with
//! SET; then for each workload (update-only; hybrid = 50 % UPDATE, 50 % GET) and each object
//! metadata cache size (0, 25, 50, 75, 100 % of the pairs) one run issues `requests` requests, one
//! client, keys drawn from Zipf 0.99 (ranks scattered over the keys by a seeded permutation). Every
//! run starts with the cache as the load leaves it (the last-loaded pairs, re-read untimed), and a
//! parity commit between runs (untimed) gives every run the same empty logs. Every GET is checked
//! against the version the run last wrote for that key.
//!
//! Our store writes out of place (docs/kv.md): an UPDATE writes its new record and nothing else
//! (format version 4: the retired record is left stale, outranked by the new sequence number); the
//! seed's store is not described at that level.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ecstack_array::{Array, SchemeKind};
use ecstack_base::rng::Rng;
use ecstack_device::BlockDevice;
use ecstack_kv::record::HEADER_BYTES;
use ecstack_kv::{Durability, KvConfig, KvStore, SetCondition};
use ecstack_trace::synth::Zipf;
use serde::Serialize;

use super::config::{KvScale, Setting, Testbed};
use super::exps::Ctx;
use super::rig::{build_sized, prewrite, Backing, DeviceFiles};
use super::run::Variant;
use super::targets::{Figure, TargetCheck};
use super::workload::{Sizing, CHUNK_BYTES};
use crate::plot::Bars;
use crate::{LabError, Result};

pub use super::config::{KvWorkload, CACHE_PCT, PAIR_BYTES};

/// Key size of every pair (§5.2).
pub const KEY_BYTES: usize = 24;
/// Zipf shape of the request keys (§5.2).
pub const ZIPF: f64 = 0.99;

/// One measured run of Exp 6.
#[derive(Serialize, Clone, Debug)]
pub struct KvRow {
    pub testbed: Backing,
    pub pair_bytes: u64,
    pub scheme: Variant,
    pub workload: KvWorkload,
    pub cache_pct: u32,
    /// Round of this cell (0 .. `--kv-repeat`); the schemes of one round ran one after another.
    pub round: u32,
    pub pairs: u64,
    pub requests: u64,
    pub updates: u64,
    pub gets: u64,
    pub seconds: f64,
    pub requests_per_s: f64,
    /// Cache hits per cache lookup (0 with the cache off).
    pub cache_hit_ratio: f64,
    /// Record heads read to find a key through the location table, per request.
    pub key_reads_per_req: f64,
    pub ssd_write_bytes: u64,
    pub ssd_read_bytes: u64,
    pub log_write_bytes: u64,
    /// Device requests per KV request: main-array reads and writes, log writes, and flushes
    /// (every device's flush requests, main and log).
    pub ssd_reads_per_req: f64,
    pub ssd_writes_per_req: f64,
    pub log_writes_per_req: f64,
    pub flushes_per_req: f64,
    /// Parity commits the array forced during the run (0: the run never ran out of log space).
    pub commits: u64,
    /// Seconds the SET load of this array took (the same for its ten runs).
    pub load_seconds: f64,
}

/// The 24-byte key of pair `i`.
fn key(i: u64) -> [u8; KEY_BYTES] {
    let mut k = [0u8; KEY_BYTES];
    k.copy_from_slice(format!("user{i:020}").as_bytes());
    k
}

/// Value bytes of a pair of `pair_bytes` (the record's header and key fill the rest).
fn value_bytes(pair_bytes: u64) -> usize {
    pair_bytes as usize - HEADER_BYTES - KEY_BYTES
}

/// Stamp pair `i`'s version `v` into the first 12 bytes of `buf` (the rest is a fixed pattern).
fn stamp(buf: &mut [u8], i: u64, v: u32) {
    buf[..8].copy_from_slice(&i.to_le_bytes());
    buf[8..12].copy_from_slice(&v.to_le_bytes());
}

/// The array a run needs: the pairs with a quarter of spare records, and spare and log room for
/// one run's chunk writes between two parity commits (a record per request, and as much again in
/// headroom: before format version 4 every UPDATE also zeroed the record it retired).
fn sizing(scale: KvScale, pair_bytes: u64, s: Setting) -> Sizing {
    let chunks = pair_bytes / CHUNK_BYTES;
    let data = scale.pairs * chunks + scale.pairs * chunks / 4 + 1024;
    let stripes = data.div_ceil(s.k as u64);
    let written = (scale.requests * (chunks + 1)).max(scale.pairs * chunks);
    let spare = (written as f64 / s.n() as f64 * 1.3).ceil() as u64 + 256;
    Sizing {
        stripes,
        slots: stripes + spare,
        log_slots: written + 256,
    }
}

/// Every Exp 6 run the configuration asks for: per testbed and pair size, the schemes' arrays one
/// after another (or, with `--kv-repeat` > 1, all at once, each cell's rounds interleaving them).
pub fn runs(cx: &Ctx) -> Result<Vec<KvRow>> {
    let cfg = cx.cfg;
    let cells = &cfg.kv_cells;
    let mut rows = Vec::new();
    for &tb in &cfg.testbeds {
        for &pb in &cells.pair_bytes {
            let groups: Vec<Vec<SchemeKind>> = if cells.repeat > 1 {
                vec![cfg.schemes.clone()]
            } else {
                cfg.schemes.iter().map(|&s| vec![s]).collect()
            };
            for group in groups {
                rows.extend(group_runs(cx, tb, pb, &group)?);
            }
        }
    }
    Ok(rows)
}

/// One loaded store per scheme of `group`, alive together, each on its own array (and device
/// files); every selected cell runs `repeat` rounds over the group.
fn group_runs(cx: &Ctx, tb: Testbed, pair_bytes: u64, group: &[SchemeKind]) -> Result<Vec<KvRow>> {
    let cfg = cx.cfg;
    let cells = &cfg.kv_cells;
    let mut loaded = Vec::with_capacity(group.len());
    for &scheme in group {
        loaded.push(Loaded::new(cx, tb, pair_bytes, scheme)?);
    }
    let mut rows = Vec::new();
    for &w in &cells.workloads {
        for &pct in &cells.cache_pct {
            for round in 0..cells.repeat {
                for l in &mut loaded {
                    let what = format!(
                        "{}: {w}, cache {pct}%{}",
                        l.what,
                        if cells.repeat > 1 {
                            format!(", round {}/{}", round + 1, cells.repeat)
                        } else {
                            String::new()
                        }
                    );
                    (cx.progress)(&what);
                    let mut row = l.measure(cfg, w, pct, round as u32)?;
                    (cx.progress)(&format!(
                        "{what}: {:.0} requests/s, per request {:.2} ssd reads, {:.2} ssd writes, {:.2} log writes, {:.3} flushes",
                        row.requests_per_s,
                        row.ssd_reads_per_req,
                        row.ssd_writes_per_req,
                        row.log_writes_per_req,
                        row.flushes_per_req
                    ));
                    row.round = round as u32;
                    rows.push(row);
                }
            }
        }
    }
    for l in loaded {
        l.close()?;
    }
    Ok(rows)
}

/// The seed of a cell's requests: the same for a cell whichever others run; round 0 keeps the
/// seed of a single run.
fn cell_seed(seed: u64, w: KvWorkload, pct: u32, round: u32) -> u64 {
    let wi = KvWorkload::ALL.iter().position(|&x| x == w).unwrap_or(0) as u64;
    let ci = match CACHE_PCT.iter().position(|&p| p == pct) {
        Some(ci) => ci as u64,
        None => 1000 + u64::from(pct),
    };
    let s = seed ^ (wi * 8 + ci + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    s ^ u64::from(round).wrapping_mul(0xd1b5_4a32_d192_ed03)
}

/// A scheme's array with a loaded store, ready for runs.
struct Loaded {
    what: String,
    backing: Backing,
    pair_bytes: u64,
    scheme: SchemeKind,
    array: Arc<Array>,
    store: Arc<KvStore>,
    load_seconds: f64,
    /// The version each pair's value last got.
    versions: Vec<u32>,
    val: Vec<u8>,
    /// Dropped after the array is closed: removes the device files.
    files: Option<DeviceFiles>,
}

impl Loaded {
    /// Build one array (its own device files on the files testbed, in a directory per scheme),
    /// create the store and load the pairs, then sync and commit.
    fn new(cx: &Ctx, tb: Testbed, pair_bytes: u64, scheme: SchemeKind) -> Result<Loaded> {
        let cfg = cx.cfg;
        let scale = cfg.kv;
        let s = Setting::SIX_TWO;
        let backing = Backing::Testbed(tb);
        let sz = sizing(scale, pair_bytes, s);
        let dir = cx.dir.join(format!("exp6-{scheme}"));
        let files = match tb {
            Testbed::Files => {
                let log = if scheme.uses_log() { sz.log_bytes() } else { 0 };
                (cx.progress)(&format!(
                    "exp 6: pre-filling {scheme}'s device files ({} MiB main, {} MiB log) in {}",
                    sz.main_bytes() >> 20,
                    log >> 20,
                    dir.display()
                ));
                Some(DeviceFiles::with_sizes(&dir, sz.main_bytes(), log)?)
            }
            Testbed::Paper => None,
        };
        let rig = build_sized(&sz, scheme, s, backing, &dir)?;
        let a = Arc::new(rig.array);
        prewrite(&a, sz.stripes * s.k as u64 * CHUNK_BYTES)?;
        a.set_stripe_buffer(cfg.stripe_buffer);
        let kcfg = KvConfig {
            chunk_bytes: CHUNK_BYTES as usize,
            durability: Durability::EverySec,
            cache_entries: 0,
            value_bytes_max: value_bytes(pair_bytes),
            pairs_max: Some(scale.pairs as usize + scale.pairs as usize / 8 + 64),
            salt: Some(cfg.seed),
            tombstones_max: None,
        };
        let store = Arc::new(KvStore::create(
            Arc::clone(&a) as Arc<dyn BlockDevice>,
            &kcfg,
        )?);
        store.spawn_syncer(Duration::from_secs(1));
        let what = format!("exp 6: {scheme} {} KiB pairs, {backing}", pair_bytes / 1024);
        (cx.progress)(&format!("{what}: loading {} pairs", scale.pairs));
        let mut val = vec![0xa5u8; value_bytes(pair_bytes)];
        let t0 = Instant::now();
        for i in 0..scale.pairs {
            stamp(&mut val, i, 0);
            if !store.set_if(&key(i), &val, SetCondition::IfAbsent)? {
                return Err(LabError::Run(format!(
                    "exp 6: SET of new key {i} found it present"
                )));
            }
        }
        let load_seconds = t0.elapsed().as_secs_f64();
        store.sync()?;
        a.commit()?;
        Ok(Loaded {
            what,
            backing,
            pair_bytes,
            scheme,
            array: a,
            store,
            load_seconds,
            versions: vec![0u32; scale.pairs as usize],
            val,
            files,
        })
    }

    /// One timed run of a cell, then an untimed sync and parity commit.
    fn measure(
        &mut self,
        cfg: &super::config::EplogConfig,
        w: KvWorkload,
        pct: u32,
        round: u32,
    ) -> Result<KvRow> {
        let run = Run {
            store: &self.store,
            array: &self.array,
            pair_bytes: self.pair_bytes,
            scale: cfg.kv,
            workload: w,
            cache_pct: pct,
            seed: cell_seed(cfg.seed, w, pct, round),
        };
        let mut row = run.measure(&mut self.versions, &mut self.val)?;
        row.testbed = self.backing;
        row.scheme = Variant::Plain(self.scheme);
        row.load_seconds = self.load_seconds;
        self.store.sync()?;
        self.array.commit()?;
        Ok(row)
    }

    fn close(self) -> Result<()> {
        let Loaded {
            store,
            array,
            files,
            ..
        } = self;
        drop(store);
        // The syncer thread holds a weak reference only; the array is ours again once it lets go.
        array.close()?;
        drop(files);
        Ok(())
    }
}

struct Run<'a> {
    store: &'a Arc<KvStore>,
    array: &'a Array,
    pair_bytes: u64,
    scale: KvScale,
    workload: KvWorkload,
    cache_pct: u32,
    seed: u64,
}

impl Run<'_> {
    fn measure(&self, versions: &mut [u32], val: &mut [u8]) -> Result<KvRow> {
        let (store, a) = (self.store, self.array);
        let n = self.scale.pairs;
        let entries = n * u64::from(self.cache_pct) / 100;
        store.set_cache_entries(entries as usize);
        // The cache as the load leaves it: the last-loaded pairs, most recent last.
        for i in n - entries..n {
            store.exists(&key(i))?;
        }
        let mut rng = Rng::new(self.seed);
        let mut perm: Vec<u64> = (0..n).collect();
        rng.shuffle(&mut perm);
        let zipf = Zipf::new(n, ZIPF);
        store.reset_stats();
        a.reset_stats();
        let commits0 = a.status().commits.commits;
        let (mut updates, mut gets) = (0u64, 0u64);
        let t0 = Instant::now();
        for _ in 0..self.scale.requests {
            let i = perm[(zipf.sample(&mut rng) - 1) as usize];
            let k = key(i);
            let get = self.workload == KvWorkload::Hybrid && rng.chance(0.5);
            if get {
                gets += 1;
                let v = store.get(&k)?.ok_or_else(|| {
                    LabError::Run(format!("exp 6: GET of loaded key {i} found nothing"))
                })?;
                let want = versions[i as usize];
                let ok = v.len() == val.len()
                    && v[..8] == i.to_le_bytes()
                    && v[8..12] == want.to_le_bytes();
                if !ok {
                    return Err(LabError::Run(format!(
                        "exp 6: GET of key {i} did not return version {want} as written"
                    )));
                }
            } else {
                updates += 1;
                let v = versions[i as usize].wrapping_add(1);
                stamp(val, i, v);
                if !store.update(&k, val)? {
                    return Err(LabError::Run(format!(
                        "exp 6: UPDATE of loaded key {i} found it absent"
                    )));
                }
                versions[i as usize] = v;
            }
        }
        let seconds = t0.elapsed().as_secs_f64();
        let ks = store.stats();
        let st = a.status();
        let lookups = ks.cache_hits + ks.cache_misses;
        let per_req = |x: u64| x as f64 / self.scale.requests as f64;
        Ok(KvRow {
            testbed: Backing::Testbed(Testbed::Files),
            pair_bytes: self.pair_bytes,
            scheme: Variant::EPLOG,
            workload: self.workload,
            cache_pct: self.cache_pct,
            round: 0,
            pairs: n,
            requests: self.scale.requests,
            updates,
            gets,
            seconds,
            requests_per_s: self.scale.requests as f64 / seconds.max(1e-9),
            cache_hit_ratio: ks.cache_hits as f64 / lookups.max(1) as f64,
            key_reads_per_req: ks.key_reads as f64 / self.scale.requests as f64,
            ssd_write_bytes: st.main.io.write_bytes,
            ssd_read_bytes: st.main.io.read_bytes,
            log_write_bytes: st.log.io.write_bytes,
            ssd_reads_per_req: per_req(st.main.io.read_ops),
            ssd_writes_per_req: per_req(st.main.io.write_ops),
            log_writes_per_req: per_req(st.log.io.write_ops),
            flushes_per_req: per_req(st.main.io.flushes + st.log.io.flushes),
            commits: st.commits.commits - commits0,
            load_seconds: 0.0,
        })
    }
}

/// The rows of one cell and scheme (one per round).
fn cell_rows<'a>(
    rows: &'a [KvRow],
    tb: Backing,
    pb: u64,
    v: Variant,
    w: KvWorkload,
    pct: u32,
) -> Vec<&'a KvRow> {
    rows.iter()
        .filter(|r| {
            r.testbed == tb
                && r.pair_bytes == pb
                && r.scheme == v
                && r.workload == w
                && r.cache_pct == pct
        })
        .collect()
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}

/// A figure of a cell: its median over the rounds, and (min, max) when there are several.
fn stat(
    rows: &[KvRow],
    tb: Backing,
    pb: u64,
    v: Variant,
    w: KvWorkload,
    pct: u32,
    f: impl Fn(&KvRow) -> f64,
) -> Option<(f64, Option<(f64, f64)>)> {
    let xs: Vec<f64> = cell_rows(rows, tb, pb, v, w, pct)
        .into_iter()
        .map(f)
        .collect();
    let range = (xs.len() > 1).then(|| {
        let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    });
    median(xs).map(|m| (m, range))
}

/// Requests/s of a cell: the median over its rounds.
fn rps(rows: &[KvRow], tb: Backing, pb: u64, v: Variant, w: KvWorkload, pct: u32) -> Option<f64> {
    stat(rows, tb, pb, v, w, pct, |r| r.requests_per_s).map(|s| s.0)
}

/// `x / y` requests/s of each round of a cell that both schemes ran, as (min, max) when more than
/// one round has both.
fn round_ratios(
    rows: &[KvRow],
    tb: Backing,
    pb: u64,
    w: KvWorkload,
    pct: u32,
    x: Variant,
    y: Variant,
) -> Option<(f64, f64)> {
    let xs = cell_rows(rows, tb, pb, x, w, pct);
    let ys = cell_rows(rows, tb, pb, y, w, pct);
    let rs: Vec<f64> = xs
        .iter()
        .filter_map(|a| {
            let b = ys.iter().find(|b| b.round == a.round)?;
            Some(a.requests_per_s / b.requests_per_s.max(1e-9))
        })
        .collect();
    if rs.len() < 2 {
        return None;
    }
    let lo = rs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = rs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((lo, hi))
}

/// The distinct values of `f` over `rows`, in first-seen order.
fn distinct<T: PartialEq + Copy>(rows: &[KvRow], f: impl Fn(&KvRow) -> T) -> Vec<T> {
    let mut v: Vec<T> = Vec::new();
    for r in rows {
        let x = f(r);
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

fn testbeds(rows: &[KvRow]) -> Vec<Backing> {
    distinct(rows, |r| r.testbed)
}

fn pair_sizes(rows: &[KvRow]) -> Vec<u64> {
    let mut v = distinct(rows, |r| r.pair_bytes);
    v.sort_unstable();
    v
}

fn workloads(rows: &[KvRow]) -> Vec<KvWorkload> {
    KvWorkload::ALL
        .into_iter()
        .filter(|w| rows.iter().any(|r| r.workload == *w))
        .collect()
}

fn caches(rows: &[KvRow]) -> Vec<u32> {
    let mut v = distinct(rows, |r| r.cache_pct);
    v.sort_unstable();
    v
}

const SCHEMES: [Variant; 3] = [Variant::MD, Variant::PL, Variant::EPLOG];

/// The ratios `x / y` over the cache sizes `pcts`, as (min, max).
fn span(pcts: &[u32], f: impl Fn(u32) -> Option<(f64, f64)>) -> Option<(f64, f64)> {
    let rs: Vec<f64> = pcts
        .iter()
        .filter_map(|&p| f(p).map(|(x, y)| x / y.max(1e-9)))
        .collect();
    if rs.is_empty() {
        return None;
    }
    let lo = rs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = rs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((lo, hi))
}

/// Exp 6's targets: eplog ≥ md and ≥ pl in every workload (pair size × workload × cache size, one
/// client), reported per pair size and workload as the lowest ratio over the cache sizes run (the
/// medians over the rounds).
pub fn targets(rows: &[KvRow]) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    let pcts = caches(rows);
    let all_caches = CACHE_PCT.iter().all(|p| pcts.contains(p)) && pcts.len() == CACHE_PCT.len();
    let over = if all_caches {
        "cache 0-100%".to_string()
    } else {
        let l: Vec<String> = pcts.iter().map(|p| format!("{p}%")).collect();
        format!("cache {}", l.join(", "))
    };
    for tb in testbeds(rows) {
        for pb in pair_sizes(rows) {
            for w in workloads(rows) {
                for peer in [Variant::MD, Variant::PL] {
                    let r = span(&pcts, |p| {
                        Some((
                            rps(rows, tb, pb, Variant::EPLOG, w, p)?,
                            rps(rows, tb, pb, peer, w, p)?,
                        ))
                    });
                    if let Some((lo, _)) = r {
                        out.push(TargetCheck {
                            what: format!(
                                "Exp 6 requests/s eplog / {peer} ({} KiB pairs, {w}, {tb}), lowest over {over}",
                                pb / 1024
                            ),
                            ratio: lo,
                            target: ">= 1".into(),
                            met: lo >= 1.0,
                            figure: Figure::Primary,
                            exp4: None,
                        });
                    }
                }
            }
        }
    }
    out
}

fn pct_range(r: Option<(f64, f64)>) -> String {
    match r {
        Some((lo, hi)) => format!("{:+.1}% to {:+.1}%", (lo - 1.0) * 100.0, (hi - 1.0) * 100.0),
        None => "-".into(),
    }
}

/// Exp 6 tables: requests/s per testbed (medians over the rounds, with their ranges when a cell
/// ran more than once), device requests per KV request, then the seed's figures beside ours.
pub fn markdown(rows: &[KvRow], s: &mut String) {
    if rows.is_empty() {
        return;
    }
    let r0 = &rows[0];
    let rounds = rows.iter().map(|r| r.round + 1).max().unwrap_or(1);
    let _ = writeln!(
        s,
        "\n### Exp 6: key-value store, (6+2), parity commit off, {} pairs loaded, {} requests per run, Zipf {ZIPF}, one client{}\n",
        r0.pairs,
        r0.requests,
        if rounds > 1 {
            format!(
                ", {rounds} rounds per cell (md, pl, eplog in turn); medians, with (lowest–highest) over the rounds, and for the ratios the lowest–highest of the rounds' own ratios"
            )
        } else {
            String::new()
        }
    );
    for tb in testbeds(rows) {
        let rows_tb: Vec<KvRow> = rows.iter().filter(|r| r.testbed == tb).cloned().collect();
        let rows = &rows_tb[..];
        let cells: Vec<(u64, KvWorkload, u32)> = pair_sizes(rows)
            .into_iter()
            .flat_map(|pb| {
                workloads(rows)
                    .into_iter()
                    .flat_map(move |w| caches(rows).into_iter().map(move |p| (pb, w, p)))
            })
            .filter(|&(pb, w, p)| {
                rows.iter()
                    .any(|r| r.pair_bytes == pb && r.workload == w && r.cache_pct == p)
            })
            .collect();
        let _ = writeln!(s, "#### {tb}\n\n| pair | workload | cache | md req/s | pl req/s | eplog req/s | eplog / md | eplog / pl | eplog cache hits | eplog key reads / req |\n|---|---|---|---|---|---|---|---|---|---|");
        for &(pb, w, pct) in &cells {
            let st = |v| stat(rows, tb, pb, v, w, pct, |r| r.requests_per_s);
            let f = |v: Option<(f64, Option<(f64, f64)>)>| match v {
                None => "-".into(),
                Some((m, None)) => format!("{m:.0}"),
                Some((m, Some((lo, hi)))) => format!("{m:.0} ({lo:.0}–{hi:.0})"),
            };
            let q = |peer: Variant| match (
                rps(rows, tb, pb, Variant::EPLOG, w, pct),
                rps(rows, tb, pb, peer, w, pct),
            ) {
                (Some(a), Some(b)) => {
                    let m = format!("{:.2}", a / b.max(1e-9));
                    match round_ratios(rows, tb, pb, w, pct, Variant::EPLOG, peer) {
                        Some((lo, hi)) => format!("{m} ({lo:.2}–{hi:.2})"),
                        None => m,
                    }
                }
                _ => "-".into(),
            };
            let e = |g: fn(&KvRow) -> f64| {
                stat(rows, tb, pb, Variant::EPLOG, w, pct, g)
                    .map_or("-".into(), |x| format!("{:.2}", x.0))
            };
            let _ = writeln!(
                s,
                "| {} KiB | {w} | {pct}% | {} | {} | {} | {} | {} | {} | {} |",
                pb / 1024,
                f(st(Variant::MD)),
                f(st(Variant::PL)),
                f(st(Variant::EPLOG)),
                q(Variant::MD),
                q(Variant::PL),
                e(|r| r.cache_hit_ratio),
                e(|r| r.key_reads_per_req),
            );
        }
        let forced: u64 = rows.iter().map(|r| r.commits).sum();
        let _ = writeln!(
            s,
            "\nParity commits forced during measured runs: {forced}.\n"
        );
        let _ = writeln!(s, "Device requests per KV request (medians over the rounds): main-array reads / main-array writes / log writes / flushes (every device's).\n\n| pair | workload | cache | md | pl | eplog |\n|---|---|---|---|---|---|");
        for &(pb, w, pct) in &cells {
            let io = |v| {
                let g = |f: fn(&KvRow) -> f64| stat(rows, tb, pb, v, w, pct, f).map(|x| x.0);
                match (
                    g(|r| r.ssd_reads_per_req),
                    g(|r| r.ssd_writes_per_req),
                    g(|r| r.log_writes_per_req),
                    g(|r| r.flushes_per_req),
                ) {
                    (Some(a), Some(b), Some(c), Some(d)) => {
                        format!("{a:.2} / {b:.2} / {c:.2} / {d:.3}")
                    }
                    _ => "-".into(),
                }
            };
            let _ = writeln!(
                s,
                "| {} KiB | {w} | {pct}% | {} | {} | {} |",
                pb / 1024,
                io(Variant::MD),
                io(Variant::PL),
                io(Variant::EPLOG)
            );
        }
        let _ = writeln!(s);
        seed_table(rows, tb, s);
    }
}

/// The seed's §5.2 Exp 6 text (Figure 9 is not reproduced in its text; these are the ranges it
/// states), beside the same ranges over our cache sizes.
fn seed_table(rows: &[KvRow], tb: Backing, s: &mut String) {
    let pcts = caches(rows);
    let ratio_span = |pb, w, x: Variant, y: Variant| {
        span(&pcts, |p| {
            Some((rps(rows, tb, pb, x, w, p)?, rps(rows, tb, pb, y, w, p)?))
        })
    };
    let up = KvWorkload::UpdateOnly;
    let hy = KvWorkload::Hybrid;
    // eplog update-only over hybrid, and eplog cache 100% over 0%.
    let workload_gain = |pb| {
        span(&pcts, |p| {
            Some((
                rps(rows, tb, pb, Variant::EPLOG, up, p)?,
                rps(rows, tb, pb, Variant::EPLOG, hy, p)?,
            ))
        })
    };
    let cache_gain = |w| {
        let a = rps(rows, tb, 4096, Variant::EPLOG, w, 100)?;
        let b = rps(rows, tb, 4096, Variant::EPLOG, w, 0)?;
        Some(format!("{:+.1}%", (a / b.max(1e-9) - 1.0) * 100.0))
    };
    let lines: [(&str, &str, String); 9] = [
        (
            "eplog over md, 4 KiB, update-only",
            "+70.7% to +395.5%",
            pct_range(ratio_span(4096, up, Variant::EPLOG, Variant::MD)),
        ),
        (
            "eplog over pl, 4 KiB, update-only",
            "+17.6% to +279.3%",
            pct_range(ratio_span(4096, up, Variant::EPLOG, Variant::PL)),
        ),
        (
            "eplog over md, 4 KiB, hybrid",
            "+28.8% to +92.2%",
            pct_range(ratio_span(4096, hy, Variant::EPLOG, Variant::MD)),
        ),
        (
            "eplog over pl, 4 KiB, hybrid",
            "+6.4% to +71.2%",
            pct_range(ratio_span(4096, hy, Variant::EPLOG, Variant::PL)),
        ),
        (
            "pl over md, 4 KiB, update-only (some cases)",
            "+30.6% to +45.2%",
            pct_range(ratio_span(4096, up, Variant::PL, Variant::MD)),
        ),
        (
            "pl over md, 4 KiB, hybrid (some cases)",
            "+12.3% to +21.1%",
            pct_range(ratio_span(4096, hy, Variant::PL, Variant::MD)),
        ),
        (
            "eplog update-only over hybrid, 4 KiB / 8 KiB",
            "up to +86.9% / up to +123.8%",
            format!(
                "{} / {}",
                pct_range(workload_gain(4096)),
                pct_range(workload_gain(8192))
            ),
        ),
        (
            "eplog cache 0% -> 100%, 4 KiB, update-only",
            "+420.9%",
            cache_gain(up).unwrap_or("-".into()),
        ),
        (
            "eplog cache 0% -> 100%, 4 KiB, hybrid",
            "+153.4%",
            cache_gain(hy).unwrap_or("-".into()),
        ),
    ];
    let _ = writeln!(s, "Seed's §5.2 Exp 6 text (ranges over its cache sizes) beside ours ({tb}, ranges over our cache sizes):\n\n| figure | seed | ours |\n|---|---|---|");
    for (what, seed, ours) in lines {
        let _ = writeln!(s, "| {what} | {seed} | {ours} |");
    }
    let _ = writeln!(s);
}

/// Exp 6 figures: requests/s by cache size, one chart per testbed, pair size and workload.
pub fn plots(rows: &[KvRow], out: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for tb in testbeds(rows) {
        let tag = match tb {
            Backing::Testbed(Testbed::Paper) => "-paper",
            _ => "",
        };
        let rows_tb: Vec<KvRow> = rows.iter().filter(|r| r.testbed == tb).cloned().collect();
        let pcts = caches(&rows_tb);
        for pb in pair_sizes(&rows_tb) {
            for w in workloads(&rows_tb) {
                let series = SCHEMES
                    .iter()
                    .map(|&v| {
                        let vals = pcts
                            .iter()
                            .map(|&p| rps(rows, tb, pb, v, w, p).unwrap_or(0.0));
                        (v.to_string(), vals.collect())
                    })
                    .collect();
                let bars = Bars {
                    title: &format!("Exp 6: KV store, {} KiB pairs, {w} ({tb})", pb / 1024),
                    x_label: "object metadata cache (% of pairs)",
                    y_label: "requests/s",
                    categories: pcts.iter().map(|p| format!("{p}%")).collect(),
                    series,
                    stacked: false,
                };
                let path = out.join(format!("exp6{tag}-{}k-{w}.svg", pb / 1024));
                bars.write_svg(&path)?;
                files.push(path);
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_values_and_sizing_follow_the_seed() {
        assert_eq!(key(7).len(), KEY_BYTES);
        assert_eq!(&key(7)[..], b"user00000000000000000007");
        // The record (header + key + value) fills exactly one or two chunks.
        for pb in PAIR_BYTES {
            assert_eq!(HEADER_BYTES + KEY_BYTES + value_bytes(pb), pb as usize);
        }
        let sz = sizing(
            KvScale {
                pairs: 1000,
                requests: 3000,
            },
            8192,
            Setting::SIX_TWO,
        );
        assert!(sz.stripes * 6 >= 2 * 1000 + 2 * 1000 / 4);
        assert!(sz.log_slots >= 3000 * 3);
        assert!(KvScale {
            pairs: 10,
            requests: 1
        }
        .validate()
        .is_err());
        assert!(KvScale {
            pairs: 100,
            requests: 0
        }
        .validate()
        .is_err());
        KvScale::default_for(true).validate().unwrap();
    }
}
