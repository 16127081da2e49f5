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
//! Deviation from the seed (docs/kv.md): our store writes out of place and invalidates the record
//! an UPDATE retired (one extra chunk write per UPDATE, batched per `everysec` sync); the seed's
//! store is not described at that level.

use std::fmt;
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

/// Pair sizes of Exp 6 (metadata + key + value), both chunk-aligned.
pub const PAIR_BYTES: [u64; 2] = [4096, 8192];
/// Object metadata cache sizes, percent of the pairs.
pub const CACHE_PCT: [u32; 5] = [0, 25, 50, 75, 100];
/// Key size of every pair (§5.2).
pub const KEY_BYTES: usize = 24;
/// Zipf shape of the request keys (§5.2).
pub const ZIPF: f64 = 0.99;

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

impl Serialize for KvWorkload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        crate::serialize_display(self, s)
    }
}

/// One measured run of Exp 6.
#[derive(Serialize, Clone, Debug)]
pub struct KvRow {
    pub testbed: Backing,
    pub pair_bytes: u64,
    pub scheme: Variant,
    pub workload: KvWorkload,
    pub cache_pct: u32,
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
/// one run's chunk writes (records + invalidations) between two parity commits.
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

/// Every Exp 6 run the configuration asks for.
pub fn runs(cx: &Ctx) -> Result<Vec<KvRow>> {
    let cfg = cx.cfg;
    let s = Setting::SIX_TWO;
    let mut rows = Vec::new();
    for &tb in &cfg.testbeds {
        let files = match tb {
            Testbed::Files => {
                let (mut main, mut log) = (0, 0);
                for pb in PAIR_BYTES {
                    let sz = sizing(cfg.kv, pb, s);
                    main = sz.main_bytes().max(main);
                    log = sz.log_bytes().max(log);
                }
                (cx.progress)(&format!(
                    "exp 6: pre-filling device files ({} MiB main, {} MiB log) in {}",
                    main >> 20,
                    log >> 20,
                    cfg.dir.display()
                ));
                Some(DeviceFiles::with_sizes(cx.dir, main, log)?)
            }
            Testbed::Paper => None,
        };
        for pb in PAIR_BYTES {
            for &scheme in &cfg.schemes {
                rows.extend(one_array(cx, tb, pb, scheme)?);
            }
        }
        drop(files);
    }
    Ok(rows)
}

/// Build one array, load the pairs, then run every workload at every cache size on it.
fn one_array(cx: &Ctx, tb: Testbed, pair_bytes: u64, scheme: SchemeKind) -> Result<Vec<KvRow>> {
    let cfg = cx.cfg;
    let scale = cfg.kv;
    let s = Setting::SIX_TWO;
    let backing = Backing::Testbed(tb);
    let sz = sizing(scale, pair_bytes, s);
    let rig = build_sized(&sz, scheme, s, backing, cx.dir)?;
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
    let mut versions = vec![0u32; scale.pairs as usize];
    let mut rows = Vec::new();
    for (wi, w) in KvWorkload::ALL.into_iter().enumerate() {
        for (ci, pct) in CACHE_PCT.into_iter().enumerate() {
            (cx.progress)(&format!("{what}: {w}, cache {pct}%"));
            let seed = cfg.seed ^ ((wi * 8 + ci) as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let run = Run {
                store: &store,
                array: &a,
                pair_bytes,
                scale,
                workload: w,
                cache_pct: pct,
                seed,
            };
            let mut row = run.measure(&mut versions, &mut val)?;
            row.testbed = backing;
            row.scheme = Variant::Plain(scheme);
            row.load_seconds = load_seconds;
            rows.push(row);
            store.sync()?;
            a.commit()?;
        }
    }
    drop(store);
    // The syncer thread holds a weak reference only; the array is ours again once it lets go.
    a.close()?;
    Ok(rows)
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
        Ok(KvRow {
            testbed: Backing::Testbed(Testbed::Files),
            pair_bytes: self.pair_bytes,
            scheme: Variant::EPLOG,
            workload: self.workload,
            cache_pct: self.cache_pct,
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
            commits: st.commits.commits - commits0,
            load_seconds: 0.0,
        })
    }
}

fn rps(rows: &[KvRow], tb: Backing, pb: u64, v: Variant, w: KvWorkload, pct: u32) -> Option<f64> {
    rows.iter()
        .find(|r| {
            r.testbed == tb
                && r.pair_bytes == pb
                && r.scheme == v
                && r.workload == w
                && r.cache_pct == pct
        })
        .map(|r| r.requests_per_s)
}

fn testbeds(rows: &[KvRow]) -> Vec<Backing> {
    let mut v: Vec<Backing> = Vec::new();
    for r in rows {
        if !v.contains(&r.testbed) {
            v.push(r.testbed);
        }
    }
    v
}

const SCHEMES: [Variant; 3] = [Variant::MD, Variant::PL, Variant::EPLOG];

/// The ratios `x / y` over the cache sizes, as (min, max).
fn span(f: impl Fn(u32) -> Option<(f64, f64)>) -> Option<(f64, f64)> {
    let rs: Vec<f64> = CACHE_PCT
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
/// client), reported per pair size and workload as the lowest ratio over the cache sizes.
pub fn targets(rows: &[KvRow]) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    for tb in testbeds(rows) {
        for pb in PAIR_BYTES {
            for w in KvWorkload::ALL {
                for peer in [Variant::MD, Variant::PL] {
                    let r = span(|p| {
                        Some((
                            rps(rows, tb, pb, Variant::EPLOG, w, p)?,
                            rps(rows, tb, pb, peer, w, p)?,
                        ))
                    });
                    if let Some((lo, _)) = r {
                        out.push(TargetCheck {
                            what: format!(
                                "Exp 6 requests/s eplog / {peer} ({} KiB pairs, {w}, {tb}), lowest over cache 0-100%",
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

/// Exp 6 tables: requests/s per testbed, then the seed's figures beside ours.
pub fn markdown(rows: &[KvRow], s: &mut String) {
    if rows.is_empty() {
        return;
    }
    let r0 = &rows[0];
    let _ = writeln!(
        s,
        "\n### Exp 6: key-value store, (6+2), parity commit off, {} pairs loaded, {} requests per run, Zipf {ZIPF}, one client\n",
        r0.pairs, r0.requests
    );
    for tb in testbeds(rows) {
        let _ = writeln!(s, "#### {tb}\n\n| pair | workload | cache | md req/s | pl req/s | eplog req/s | eplog / md | eplog / pl | eplog cache hits | eplog key reads / req |\n|---|---|---|---|---|---|---|---|---|---|");
        for pb in PAIR_BYTES {
            for w in KvWorkload::ALL {
                for pct in CACHE_PCT {
                    let x = |v| rps(rows, tb, pb, v, w, pct);
                    let f = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.0}"));
                    let q = |a: Option<f64>, b: Option<f64>| match (a, b) {
                        (Some(a), Some(b)) => format!("{:.2}", a / b.max(1e-9)),
                        _ => "-".into(),
                    };
                    let e = rows.iter().find(|r| {
                        r.testbed == tb
                            && r.pair_bytes == pb
                            && r.scheme == Variant::EPLOG
                            && r.workload == w
                            && r.cache_pct == pct
                    });
                    let _ = writeln!(
                        s,
                        "| {} KiB | {w} | {pct}% | {} | {} | {} | {} | {} | {} | {} |",
                        pb / 1024,
                        f(x(Variant::MD)),
                        f(x(Variant::PL)),
                        f(x(Variant::EPLOG)),
                        q(x(Variant::EPLOG), x(Variant::MD)),
                        q(x(Variant::EPLOG), x(Variant::PL)),
                        e.map_or("-".into(), |r| format!("{:.2}", r.cache_hit_ratio)),
                        e.map_or("-".into(), |r| format!("{:.2}", r.key_reads_per_req)),
                    );
                }
            }
        }
        let forced: u64 = rows
            .iter()
            .filter(|r| r.testbed == tb)
            .map(|r| r.commits)
            .sum();
        let _ = writeln!(
            s,
            "\nParity commits forced during measured runs: {forced}.\n"
        );
        seed_table(rows, tb, s);
    }
}

/// The seed's §5.2 Exp 6 text (Figure 9 is not reproduced in its text; these are the ranges it
/// states), beside the same ranges over our cache sizes.
fn seed_table(rows: &[KvRow], tb: Backing, s: &mut String) {
    let ratio_span = |pb, w, x: Variant, y: Variant| {
        span(|p| Some((rps(rows, tb, pb, x, w, p)?, rps(rows, tb, pb, y, w, p)?)))
    };
    let up = KvWorkload::UpdateOnly;
    let hy = KvWorkload::Hybrid;
    // eplog update-only over hybrid, and eplog cache 100% over 0%.
    let workload_gain = |pb| {
        span(|p| {
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
        for pb in PAIR_BYTES {
            for w in KvWorkload::ALL {
                let series = SCHEMES
                    .iter()
                    .map(|&v| {
                        let vals = CACHE_PCT
                            .iter()
                            .map(|&p| rps(rows, tb, pb, v, w, p).unwrap_or(0.0));
                        (v.to_string(), vals.collect())
                    })
                    .collect();
                let bars = Bars {
                    title: &format!("Exp 6: KV store, {} KiB pairs, {w} ({tb})", pb / 1024),
                    x_label: "object metadata cache (% of pairs)",
                    y_label: "requests/s",
                    categories: CACHE_PCT.iter().map(|p| format!("{p}%")).collect(),
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
