//! Model-checked random operation sequences with crashes: a plain `HashMap` model of what was
//! acknowledged, the real store over real files (Faulty(FileDevice): unflushed writes survive, tear
//! or vanish, in any order) and over erasure-coded arrays (md, eplog) of Faulty(MemDevice), power cut
//! at a random device operation (mid-SET, mid-DELETE, mid-sync), then reopen by scanning. After each
//! reopen every pair holds a value it may hold: under `always` exactly the acknowledged one (or the
//! cut operation's), under `everysec` the one at the last completed sync or one written since;
//! deleted pairs stay gone. `ECSTACK_SEED=n` reruns one seed, `ECSTACK_SEEDS=count` sweeps more.
//!
//! Every third key is a hash (HSET of one of three fields, HGETALL, DEL) and every third one after
//! that a member of the sorted set `zs` (ZADD, ZSCORE, ZREM), so the record kinds of format
//! version 2 go through the same crashes; the model holds a hash as its encoded field list and a
//! member as its score bytes. A tenth of the operations are `set_many` (group commit: several
//! SETs, keys may repeat, written with one device write).

use std::collections::HashMap;
use std::sync::Arc;

use ecstack_array::{Array, ArrayConfig, ArrayDevices, SchemeKind};
use ecstack_base::Rng;
use ecstack_device::{
    BlockDevice, FaultConfig, Faulty, FileDevice, MemDevice, Outcome, PowerCutPolicy,
};
use ecstack_kv::{Durability, KvConfig, KvStore};

const KEYS: u64 = 24;
const CHUNK: usize = 512;

fn seeds(default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("ECSTACK_SEED") {
        return vec![s.parse().expect("ECSTACK_SEED is a number")];
    }
    let n = std::env::var("ECSTACK_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    (1..=n).collect()
}

fn crashy(seed: u64, cut_at: Option<u64>) -> FaultConfig {
    FaultConfig {
        seed,
        power_cut: PowerCutPolicy {
            survive_prob: 0.4,
            torn_prob: 0.5,
            reorder: true,
            sector: 512,
        },
        power_cut_at_op: cut_at,
        ..FaultConfig::default()
    }
}

type Val = Option<Vec<u8>>;

/// What the test knows: the state at the last durable point, and every value each key took since.
struct Model {
    durable: HashMap<Vec<u8>, Val>,
    current: HashMap<Vec<u8>, Val>,
    since: HashMap<Vec<u8>, Vec<Val>>,
}

impl Model {
    fn new() -> Model {
        Model {
            durable: HashMap::new(),
            current: HashMap::new(),
            since: HashMap::new(),
        }
    }
    fn get(&self, k: &[u8]) -> Val {
        self.current.get(k).cloned().flatten()
    }
    fn set(&mut self, k: &[u8], v: Val) {
        self.current.insert(k.to_vec(), v.clone());
        self.since.entry(k.to_vec()).or_default().push(v);
    }
    fn synced(&mut self) {
        self.durable = self.current.clone();
        self.since.clear();
    }
    /// After a reopen: check every key, then take what the store holds as the new durable state.
    fn check_reopened(&mut self, kv: &KvStore, ctx: &str) {
        for i in 0..KEYS {
            let k = key(i);
            let got = read(kv, i).unwrap_or_else(|e| panic!("{ctx}: get after reopen: {e}"));
            let mut allowed: Vec<Val> = vec![self.durable.get(&k).cloned().flatten()];
            allowed.extend(self.since.get(&k).cloned().unwrap_or_default());
            assert!(
                allowed.contains(&got),
                "{ctx}: key {i} holds {:?} after reopen; allowed: {:?}",
                got.as_ref().map(|v| v.len()),
                allowed
                    .iter()
                    .map(|v| v.as_ref().map(|v| v.len()))
                    .collect::<Vec<_>>()
            );
            self.current.insert(k, got);
        }
        let members = (0..KEYS)
            .filter(|&i| kind(i) == Kind::Member && self.current[&key(i)].is_some())
            .count();
        let others = (0..KEYS)
            .filter(|&i| kind(i) != Kind::Member && self.current[&key(i)].is_some())
            .count();
        assert_eq!(
            kv.len(),
            others + usize::from(members > 0),
            "{ctx}: key count"
        );
        self.synced();
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Plain,
    Hash,
    Member,
}

fn kind(i: u64) -> Kind {
    match i % 3 {
        0 => Kind::Hash,
        1 if i % 2 == 1 => Kind::Member,
        _ => Kind::Plain,
    }
}

/// The one sorted set of the test; key `i` of kind Member is its member `key(i)`.
const ZSET: &[u8] = b"zs";

/// What the store holds for key `i`, in the model's terms.
fn read(kv: &KvStore, i: u64) -> Result<Val, ecstack_kv::KvError> {
    let k = key(i);
    Ok(match kind(i) {
        Kind::Plain => kv.get(&k)?,
        Kind::Hash => {
            let f = kv.hgetall(&k)?;
            (!f.is_empty()).then(|| ecstack_kv::hash::encode(&f))
        }
        Kind::Member => kv.zscore(ZSET, &k)?.map(|x| x.to_le_bytes().to_vec()),
    })
}

/// The model's hash after HSET field = value.
fn hash_with(old: Val, field: &[u8], v: &[u8]) -> Vec<u8> {
    let mut f = old
        .map(|b| ecstack_kv::hash::decode(&b).unwrap())
        .unwrap_or_default();
    match f.iter_mut().find(|(name, _)| name == field) {
        Some(e) => e.1 = v.to_vec(),
        None => f.push((field.to_vec(), v.to_vec())),
    }
    ecstack_kv::hash::encode(&f)
}

fn key(i: u64) -> Vec<u8> {
    format!("key:{i:04}:{}", "x".repeat((i % 7) as usize)).into_bytes()
}

/// Value sizes: `Small` keeps every record packed (several to a 512-byte chunk), `Mixed` also
/// writes records of several chunks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sizes {
    Mixed,
    Small,
}

fn value(rng: &mut Rng, sizes: Sizes) -> Vec<u8> {
    let len = match (sizes, rng.below(10)) {
        (_, 0) => 0,
        (Sizes::Small, _) => rng.below(100) as usize,
        (Sizes::Mixed, 1..=6) => rng.below(400) as usize,
        (Sizes::Mixed, _) => rng.below(1600) as usize,
    };
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

/// One run of random operations. `open_dev(cut_at)` returns a fresh device stack over the same
/// bytes, set to lose power at that operation; `power_cycle` cuts and restores power on every
/// device (returning how many writes tore); the closure pair hides files vs arrays.
struct Counters {
    cuts: usize,
    torn: usize,
    ops_ok: usize,
    /// Compactions the store ran (tombstones zeroing what they outrank).
    compactions: u64,
}

#[allow(clippy::too_many_arguments)]
fn run(
    what: &str,
    seed: u64,
    sizes: Sizes,
    steps: usize,
    durability: Durability,
    open_dev: &mut dyn FnMut(Option<u64>) -> Arc<dyn BlockDevice>,
    power_cycle: &mut dyn FnMut() -> usize,
    powered_off: &dyn Fn() -> bool,
) -> Counters {
    let mut rng = Rng::new(seed);
    let cache = [0, 4, 64][rng.below(3) as usize];
    // Few live tombstones start a compaction, so compactions (and power cuts in them) are common.
    let tombstones_max = [0, 1, 3, 8][rng.below(4) as usize];
    let cfg = KvConfig {
        chunk_bytes: CHUNK,
        durability,
        cache_entries: cache,
        salt: Some(seed),
        tombstones_max: Some(tombstones_max),
        ..KvConfig::default()
    };
    let mut kv = Some(KvStore::create(open_dev(None), &cfg).unwrap());
    let mut m = Model::new();
    let mut c = Counters {
        cuts: 0,
        torn: 0,
        ops_ok: 0,
        compactions: 0,
    };
    let mut step = 0;
    while step < steps {
        step += 1;
        let ctx = format!("{what} seed {seed} step {step}");
        let s = kv.as_ref().unwrap();
        let i = rng.below(KEYS);
        let k = key(i);
        let r = rng.below(100);
        let res: Result<(), ecstack_kv::KvError> = match (kind(i), r) {
            (Kind::Hash, 0..=54) => {
                let field = format!("f{}", rng.below(3)).into_bytes();
                let v = value(&mut rng, sizes);
                let present = m.get(&k).is_some();
                m.set(&k, Some(hash_with(m.get(&k), &field, &v)));
                s.hset(&k, &[(&field, &v)]).map(|new| {
                    if !present {
                        assert_eq!(new, 1, "{ctx}: hset of a new hash")
                    }
                })
            }
            (Kind::Member, 0..=54) => {
                let score = rng.below(1000) as f64 - 499.5;
                let present = m.get(&k).is_some();
                m.set(&k, Some(score.to_le_bytes().to_vec()));
                s.zadd(ZSET, &[(score, &k)])
                    .map(|new| assert_eq!(new, usize::from(!present), "{ctx}: zadd"))
            }
            (Kind::Member, 55..=69) => {
                let present = m.get(&k).is_some();
                m.set(&k, None);
                s.zrem(ZSET, &[&k])
                    .map(|n| assert_eq!(n, usize::from(present), "{ctx}: zrem"))
            }
            (Kind::Hash | Kind::Member, 70..=89) => {
                read(s, i).map(|got| assert_eq!(got, m.get(&k), "{ctx}: read"))
            }
            (_, r) => match r {
                0..=9 => {
                    // Group commit: several SETs (keys may repeat) with one device write.
                    let n = 2 + rng.below(4);
                    let mut pairs = vec![(k.clone(), value(&mut rng, sizes))];
                    for _ in 1..n {
                        let j = rng.below(KEYS);
                        if kind(j) == Kind::Plain {
                            pairs.push((key(j), value(&mut rng, sizes)));
                        }
                    }
                    for (pk, pv) in &pairs {
                        m.set(pk, Some(pv.clone()));
                    }
                    let refs: Vec<(&[u8], &[u8])> =
                        pairs.iter().map(|(a, b)| (&a[..], &b[..])).collect();
                    s.set_many(&refs)
                }
                10..=39 => {
                    let v = value(&mut rng, sizes);
                    m.set(&k, Some(v.clone()));
                    s.set(&k, &v)
                }
                40..=54 => {
                    let v = value(&mut rng, sizes);
                    let present = m.get(&k).is_some();
                    if present {
                        m.set(&k, Some(v.clone()));
                    }
                    s.update(&k, &v)
                        .map(|done| assert_eq!(done, present, "{ctx}: update of a present key"))
                }
                55..=69 => {
                    let present = m.get(&k).is_some();
                    m.set(&k, None);
                    s.delete(&k)
                        .map(|done| assert_eq!(done, present, "{ctx}: delete result"))
                }
                70..=84 => s
                    .get(&k)
                    .map(|got| assert_eq!(got, m.get(&k), "{ctx}: get")),
                85..=89 => s
                    .exists(&k)
                    .map(|e| assert_eq!(e, m.get(&k).is_some(), "{ctx}: exists")),
                _ => s.sync(),
            },
        };
        match res {
            Ok(()) => {
                c.ops_ok += 1;
                if durability == Durability::Always || r >= 90 {
                    m.synced();
                }
            }
            Err(e) if powered_off() => {
                let _ = e;
                c.cuts += 1;
                c.compactions += kv.take().map_or(0, |s| s.stats().compactions);
                c.torn += power_cycle();
                // Reopen (on a device that will not cut this time), check, and start a new epoch that cuts
                // at a random later device operation.
                let reopened = KvStore::open(open_dev(None), &cfg)
                    .unwrap_or_else(|e| panic!("{ctx}: reopen after power cut: {e}"));
                m.check_reopened(&reopened, &ctx);
                drop(reopened);
                let cut = Some(1 + rng.below(80));
                kv = Some(open_store(
                    cut,
                    &cfg,
                    open_dev,
                    power_cycle,
                    powered_off,
                    &ctx,
                ));
            }
            Err(e) => panic!("{ctx}: {e}"),
        }
        if step == 5 {
            // From here on, every epoch ends in a power cut at a random device operation.
            let s = kv.take().unwrap();
            s.sync().unwrap();
            m.synced();
            c.compactions += s.stats().compactions;
            drop(s);
            let cut = Some(1 + rng.below(80));
            kv = Some(open_store(
                cut,
                &cfg,
                open_dev,
                power_cycle,
                powered_off,
                "step 5",
            ));
        }
    }
    // A final clean reopen holds exactly the model after a sync.
    let s = kv.take().unwrap();
    if s.sync().is_ok() {
        m.synced();
    }
    c.compactions += s.stats().compactions;
    drop(s);
    let _ = power_cycle();
    let kv = KvStore::open(open_dev(None), &cfg).unwrap();
    m.check_reopened(&kv, &format!("{what} seed {seed} final"));
    if sizes == Sizes::Small {
        let st = kv.stats();
        assert!(
            st.pairs < 8 || st.chunks_used < st.pairs,
            "{what} seed {seed}: small records are packed ({} pairs in {} chunks)",
            st.pairs,
            st.chunks_used
        );
    }
    c
}

/// Open the store on a device set to cut power at `cut`; should the cut hit the open itself,
/// power-cycle and open again without a cut.
fn open_store(
    mut cut: Option<u64>,
    cfg: &KvConfig,
    open_dev: &mut dyn FnMut(Option<u64>) -> Arc<dyn BlockDevice>,
    power_cycle: &mut dyn FnMut() -> usize,
    powered_off: &dyn Fn() -> bool,
    ctx: &str,
) -> KvStore {
    loop {
        match KvStore::open(open_dev(cut), cfg) {
            Ok(kv) => return kv,
            Err(_) if powered_off() => {
                power_cycle();
                cut = None;
            }
            Err(e) => panic!("{ctx}: reopen: {e}"),
        }
    }
}

fn file_run(seed: u64, durability: Durability, sizes: Sizes) -> Counters {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let file = Arc::new(FileDevice::create(dir.path().join("kv.img"), 256 << 10).unwrap());
    let current: std::cell::RefCell<Option<Arc<Faulty<Arc<FileDevice>>>>> = Default::default();
    let mut epoch = 0;
    let mut open_dev = |cut: Option<u64>| -> Arc<dyn BlockDevice> {
        epoch += 1;
        let d = Arc::new(Faulty::new(
            Arc::clone(&file),
            crashy(seed * 1000 + epoch, cut),
        ));
        *current.borrow_mut() = Some(Arc::clone(&d));
        d
    };
    let mut power_cycle = || -> usize {
        let d = current.borrow().clone().unwrap();
        // A cut already happened (or happens now): unflushed writes tear or vanish in the file.
        let torn = if d.is_powered_off() {
            0
        } else {
            d.power_cut().unwrap().count(Outcome::Torn)
        };
        d.power_on();
        torn
    };
    let powered_off = || {
        current
            .borrow()
            .as_ref()
            .is_some_and(|d| d.is_powered_off())
    };
    run(
        &format!("file/{durability:?}/{sizes:?}"),
        seed,
        sizes,
        700,
        durability,
        &mut open_dev,
        &mut power_cycle,
        &powered_off,
    )
}

#[test]
fn crashes_on_files_always() {
    let mut total = Counters {
        cuts: 0,
        torn: 0,
        ops_ok: 0,
        compactions: 0,
    };
    for seed in seeds(4) {
        let c = file_run(seed, Durability::Always, Sizes::Mixed);
        total.cuts += c.cuts;
        total.ops_ok += c.ops_ok;
        total.compactions += c.compactions;
    }
    assert!(
        total.cuts >= 4,
        "power cuts were reached ({} cuts)",
        total.cuts
    );
    assert!(total.ops_ok > 500);
    assert!(
        total.compactions > 0,
        "compactions were reached (tombstones zeroing what they outrank)"
    );
}

#[test]
fn crashes_on_files_everysec() {
    let mut cuts = 0;
    for seed in seeds(4) {
        cuts += file_run(seed + 100, Durability::EverySec, Sizes::Mixed).cuts;
    }
    assert!(cuts >= 4, "power cuts were reached ({cuts} cuts)");
}

/// An array of Faulty(MemDevice)s; a power cut hits every device at once.
fn array_run(scheme: SchemeKind, seed: u64, durability: Durability, sizes: Sizes) -> Counters {
    let (k, m) = (3, 2);
    let nlog = if scheme == SchemeKind::Md { 0 } else { m };
    let mem = |size: u64| Arc::new(MemDevice::new(size).unwrap());
    let main: Vec<_> = (0..k + m).map(|_| mem(192 << 10)).collect();
    let log: Vec<_> = (0..nlog).map(|_| mem(64 << 10)).collect();
    let meta = mem(2 << 20);
    type F = Arc<Faulty<Arc<MemDevice>>>;
    let current: std::cell::RefCell<Vec<F>> = Default::default();
    let mut epoch = 0u64;
    let mut wrap = |cut: Option<u64>| -> ArrayDevices {
        epoch += 1;
        let mut all = Vec::new();
        let mut f = |d: &Arc<MemDevice>, i: u64, cut: Option<u64>| -> F {
            let x = Arc::new(Faulty::new(
                Arc::clone(d),
                crashy(seed * 10_000 + epoch * 100 + i, cut),
            ));
            all.push(Arc::clone(&x));
            x
        };
        // The cut is scheduled on the metadata volume and on device 0; `power_cycle` cuts the others.
        let mf: Vec<F> = main
            .iter()
            .enumerate()
            .map(|(i, d)| f(d, i as u64, if i == 0 { cut } else { None }))
            .collect();
        let lf: Vec<F> = log
            .iter()
            .enumerate()
            .map(|(i, d)| f(d, 50 + i as u64, None))
            .collect();
        let meta_f = f(&meta, 99, cut.map(|c| c * 3));
        *current.borrow_mut() = all;
        ArrayDevices::from_handles(&mf, &lf, &meta_f)
    };
    let cfg = ArrayConfig {
        scheme,
        chunk_size: CHUNK as u32,
        ..ArrayConfig::raid6(k)
    };
    let created = std::cell::Cell::new(false);
    let mut open_dev = |mut cut: Option<u64>| -> Arc<dyn BlockDevice> {
        loop {
            let devs = wrap(cut);
            let a = if created.get() {
                Array::open(devs)
            } else {
                Array::create(&cfg, devs)
            };
            match a {
                Ok(a) => {
                    created.set(true);
                    return Arc::new(a);
                }
                // A scheduled cut hit the array's own open: power-cycle and try again.
                Err(_) if current.borrow().iter().any(|d| d.is_powered_off()) => {
                    for d in current.borrow().iter() {
                        if !d.is_powered_off() {
                            d.power_cut().unwrap();
                        }
                        d.power_on();
                    }
                    cut = None;
                }
                Err(e) => panic!("array open: {e}"),
            }
        }
    };
    let mut power_cycle = || -> usize {
        let mut torn = 0;
        for d in current.borrow().iter() {
            if !d.is_powered_off() {
                torn += d.power_cut().unwrap().count(Outcome::Torn);
            }
            d.power_on();
        }
        torn
    };
    let powered_off = || current.borrow().iter().any(|d| d.is_powered_off());
    run(
        &format!("array {scheme}/{durability:?}/{sizes:?}"),
        seed,
        sizes,
        400,
        durability,
        &mut open_dev,
        &mut power_cycle,
        &powered_off,
    )
}

#[test]
fn crashes_on_arrays() {
    let mut cuts = 0;
    for seed in seeds(2) {
        for scheme in [SchemeKind::Md, SchemeKind::Eplog] {
            cuts += array_run(scheme, seed, Durability::Always, Sizes::Mixed).cuts;
            cuts += array_run(scheme, seed + 500, Durability::EverySec, Sizes::Mixed).cuts;
        }
    }
    assert!(cuts >= 4, "power cuts were reached ({cuts} cuts)");
}

/// Format version 3 packs small records several to a chunk: appends rewrite the open chunk with
/// the records already in it, and (version 4) a compaction rewrites a chunk to zero the records a
/// tombstone outranks. A power cut in the middle of either must never lose an acknowledged record,
/// return wrong bytes or bring a deleted pair back.
#[test]
fn crashes_with_packed_records() {
    let mut cuts = 0;
    for seed in seeds(3) {
        cuts += file_run(seed + 200, Durability::Always, Sizes::Small).cuts;
        cuts += file_run(seed + 300, Durability::EverySec, Sizes::Small).cuts;
        for scheme in [SchemeKind::Md, SchemeKind::Eplog] {
            cuts += array_run(scheme, seed + 700, Durability::Always, Sizes::Small).cuts;
            cuts += array_run(scheme, seed + 800, Durability::EverySec, Sizes::Small).cuts;
        }
    }
    assert!(cuts >= 6, "power cuts were reached ({cuts} cuts)");
}
