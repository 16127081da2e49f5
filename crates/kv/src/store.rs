//! [`KvStore`]: the key-value store over a [`BlockDevice`] (EPLOG §4), durable per [`Durability`].
//!
//! Every write is out of place: a SET or UPDATE writes a whole new record (with the next sequence
//! number) into free chunks, points the location table at it, and retires the old record. Retired
//! records are invalidated (their first chunk overwritten with zeros) only after the new record is
//! durable, and a sync makes those invalidations durable too before it returns; a DELETE
//! invalidates the pair's record in place. Hence, after a crash, every record that passes its
//! checksum is either a pair's current version or one superseded by a higher sequence number, and
//! never a pair deleted before the last completed sync. Reopening scans the chunks, keeps the
//! highest sequence number per key and invalidates the rest (`docs/kv.md`, "Crash consistency").
//!
//! Torn writes are tolerated: a record that is only partly on the device fails its checksum and is
//! ignored, and the version before it is still valid because it is retired only after the new one
//! is durable.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use ecstack_device::BlockDevice;
use serde::Serialize;

use crate::alloc::Alloc;
use crate::arc::{ArcCache, Lookup};
use crate::cuckoo::{key_hash, CuckooTable};
use crate::hash;
use crate::record::{
    encode_record, record_chunks, verify_record, RecordHeader, Superblock, ValueKind, HEADER_BYTES,
    KEY_BYTES_MAX, SUPERBLOCK_BYTES,
};
use crate::{KvError, Result};

/// Most pairs [`KvStore::set_many`] writes with one device write.
const GROUP_PAIRS_MAX: usize = 256;
/// Most chunks a sync zeroes with one write when retired records lie next to each other.
const ZERO_RUN_CHUNKS_MAX: u64 = 64;

/// When a write becomes durable (Redis's `appendfsync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Every acknowledged write was flushed (and the records it retired invalidated) before the
    /// acknowledgement.
    Always,
    /// Writes are acknowledged at once; [`KvStore::spawn_syncer`] syncs once a second, so a crash
    /// loses at most about the last second of writes.
    EverySec,
}

impl std::str::FromStr for Durability {
    type Err = KvError;
    fn from_str(s: &str) -> Result<Durability> {
        match s {
            "always" => Ok(Durability::Always),
            "everysec" => Ok(Durability::EverySec),
            _ => Err(KvError::Config(format!(
                "durability '{s}': use always or everysec"
            ))),
        }
    }
}

/// What a SET requires of the key's presence (Redis's NX / XX).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetCondition {
    Always,
    /// Only if the key is absent (NX, and the seed's SET of a new pair).
    IfAbsent,
    /// Only if the key exists (XX, and the seed's UPDATE).
    IfPresent,
}

/// Store configuration.
#[derive(Debug, Clone)]
pub struct KvConfig {
    /// Chunk size records are aligned to (the array's chunk size; a power of two ≥ 512). On open,
    /// the superblock's value wins.
    pub chunk_bytes: usize,
    pub durability: Durability,
    /// Entries of the object metadata cache (0 turns it off); callers usually take a fraction of
    /// the expected number of pairs.
    pub cache_entries: usize,
    /// Longest value accepted.
    pub value_bytes_max: usize,
    /// Most pairs the location table is sized for (default: one per chunk, at most 4 Mi).
    pub pairs_max: Option<usize>,
    /// Checksum salt for a new store (tests pin it; default random).
    pub salt: Option<u64>,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            chunk_bytes: 4096,
            durability: Durability::Always,
            cache_entries: 0,
            value_bytes_max: 64 << 20,
            pairs_max: None,
            salt: None,
        }
    }
}

/// Counters of a store (for INFO and the experiments).
#[derive(Debug, Clone, Default, Serialize)]
pub struct KvStats {
    pub pairs: u64,
    pub sets: u64,
    pub gets: u64,
    pub deletes: u64,
    pub cache_entries: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Record heads read to resolve a key through the location table.
    pub key_reads: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub flushes: u64,
    pub invalidations: u64,
    pub chunk_bytes: u64,
    pub chunks_used: u64,
    pub chunks_available: u64,
    pub table_slots: u64,
    pub table_load: f64,
    /// Records found by the scan of the last open.
    pub scanned_records: u64,
}

/// What the cache keeps of a pair: the seed's key and value sizes and the record's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta {
    kind: ValueKind,
    chunk: u64,
    key_bytes: u8,
    value_bytes: u32,
}

/// A located pair: its table slot, metadata and, when the lookup read it, the record's first chunk.
struct Found {
    slot: usize,
    meta: Meta,
    head: Option<Vec<u8>>,
}

struct Inner {
    table: CuckooTable,
    cache: ArcCache<Meta>,
    alloc: Alloc,
    /// Next sequence number.
    seq: u64,
    /// Records retired by an update, to be invalidated after the next flush: (chunk, chunks).
    retired: Vec<(u64, u64)>,
    /// Writes since the last flush.
    dirty: bool,
    buf: Vec<u8>,
    stats: KvStats,
    /// Sorted sets, by key: the members and scores of their member records (rebuilt on open).
    zsets: HashMap<Vec<u8>, Zset>,
    /// Member records in the location table (all sorted sets together).
    zset_members: usize,
}

/// A score ordered by `f64::total_cmp` (NaN never gets in: ZADD refuses it).
#[derive(Debug, Clone, Copy)]
struct Score(f64);

impl PartialEq for Score {
    fn eq(&self, o: &Self) -> bool {
        self.0.total_cmp(&o.0).is_eq()
    }
}
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Score {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// One sorted set in memory: member → score, and (score, member) in Redis's order.
#[derive(Debug, Default)]
struct Zset {
    scores: HashMap<Vec<u8>, f64>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

impl Zset {
    fn insert(&mut self, member: &[u8], score: f64) {
        if let Some(old) = self.scores.insert(member.to_vec(), score) {
            self.order.remove(&(Score(old), member.to_vec()));
        }
        self.order.insert((Score(score), member.to_vec()));
    }

    fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(old) => self.order.remove(&(Score(old), member.to_vec())),
            None => false,
        }
    }
}

/// The record key of a sorted-set member: `[key bytes] ‖ key ‖ member`.
fn member_key(zkey: &[u8], member: &[u8]) -> Result<Vec<u8>> {
    let n = 1 + zkey.len() + member.len();
    if zkey.is_empty() || n > KEY_BYTES_MAX {
        return Err(KvError::MemberSize(n));
    }
    let mut k = Vec::with_capacity(n);
    k.push(zkey.len() as u8);
    k.extend_from_slice(zkey);
    k.extend_from_slice(member);
    Ok(k)
}

/// Split a member record's key and value back into (set key, member, score).
fn split_member(key: &[u8], value: &[u8]) -> std::result::Result<(Vec<u8>, Vec<u8>, f64), String> {
    let zlen = *key.first().ok_or("empty member key")? as usize;
    if zlen == 0 || 1 + zlen > key.len() {
        return Err(format!(
            "member key of {} bytes names a set key of {zlen}",
            key.len()
        ));
    }
    let score: [u8; 8] = value
        .try_into()
        .map_err(|_| format!("member score of {} bytes (8 expected)", value.len()))?;
    let score = f64::from_le_bytes(score);
    if score.is_nan() {
        return Err("member score is NaN".into());
    }
    Ok((key[1..1 + zlen].to_vec(), key[1 + zlen..].to_vec(), score))
}

/// The key-value store (see the module docs). All operations take `&self`; one mutex serializes
/// them (the device below may still spread each request over many disks).
pub struct KvStore {
    dev: Arc<dyn BlockDevice>,
    sb: Superblock,
    cfg: KvConfig,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for KvStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvStore")
            .field("device", &self.dev.name())
            .field("superblock", &self.sb)
            .finish()
    }
}

fn random_salt() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id().into());
    h.finish()
}

fn check_chunk(chunk_bytes: usize) -> Result<()> {
    if chunk_bytes < 512 || !chunk_bytes.is_power_of_two() || chunk_bytes > (1 << 24) {
        return Err(KvError::Config(format!(
            "chunk size {chunk_bytes} is not a power of two in 512..=16M"
        )));
    }
    Ok(())
}

impl KvStore {
    /// Format `dev` as an empty store (overwrites chunk 0; old records elsewhere are ignored because
    /// the new salt does not match them).
    pub fn create(dev: Arc<dyn BlockDevice>, cfg: &KvConfig) -> Result<KvStore> {
        check_chunk(cfg.chunk_bytes)?;
        let sb = Superblock {
            chunk_bytes: cfg.chunk_bytes as u32,
            salt: cfg.salt.unwrap_or_else(random_salt),
            capacity: dev.capacity(),
        };
        let end = dev.capacity() / cfg.chunk_bytes as u64;
        if end < 2 {
            return Err(KvError::NoSpace(format!(
                "device '{}' of {} bytes holds fewer than two {}-byte chunks",
                dev.name(),
                dev.capacity(),
                cfg.chunk_bytes
            )));
        }
        let mut chunk0 = vec![0u8; cfg.chunk_bytes];
        chunk0[..SUPERBLOCK_BYTES].copy_from_slice(&sb.encode());
        dev.write_at(&chunk0, 0)?;
        dev.flush()?;
        Ok(KvStore::assemble(dev, sb, cfg, Alloc::new(1, end), 1))
    }

    fn assemble(
        dev: Arc<dyn BlockDevice>,
        sb: Superblock,
        cfg: &KvConfig,
        alloc: Alloc,
        seq: u64,
    ) -> KvStore {
        let chunk = sb.chunk_bytes as usize;
        let records_max = (dev.capacity() / chunk as u64).saturating_sub(1) as usize;
        let pairs = cfg.pairs_max.unwrap_or(4 << 20).min(records_max).max(1);
        let mut cfg = cfg.clone();
        cfg.chunk_bytes = chunk;
        KvStore {
            inner: Mutex::new(Inner {
                table: CuckooTable::with_capacity(pairs),
                cache: ArcCache::new(cfg.cache_entries),
                alloc,
                seq,
                retired: Vec::new(),
                dirty: false,
                buf: Vec::new(),
                zsets: HashMap::new(),
                zset_members: 0,
                stats: KvStats {
                    chunk_bytes: chunk as u64,
                    ..KvStats::default()
                },
            }),
            dev,
            sb,
            cfg,
        }
    }

    /// Open an existing store: read the superblock, scan every chunk for valid records, keep the
    /// highest sequence number per key, invalidate the others, rebuild table and free space.
    pub fn open(dev: Arc<dyn BlockDevice>, cfg: &KvConfig) -> Result<KvStore> {
        let mut head = vec![0u8; 512];
        dev.read_at(&mut head, 0)?;
        let sb = Superblock::decode(&head)
            .map_err(|why| KvError::NotAStore(format!("device '{}': {why}", dev.name())))?;
        let chunk = sb.chunk_bytes as u64;
        let end = dev.capacity() / chunk;
        let scan = scan_records(&*dev, &sb, end)?;
        let used: Vec<(u64, u64)> = scan.winners.iter().map(|w| (w.chunk, w.chunks)).collect();
        let seq = scan.seq_max + 1;
        let store = KvStore::assemble(
            Arc::clone(&dev),
            sb,
            cfg,
            Alloc::from_used(1, end, used),
            seq,
        );
        {
            let mut g = store.lock();
            for w in &scan.winners {
                if !g.table.insert(key_hash(&w.key), w.chunk) {
                    return Err(KvError::NoSpace(format!(
                        "location table full at {} pairs (raise pairs_max)",
                        g.table.len()
                    )));
                }
            }
            for w in &scan.winners {
                if w.kind != ValueKind::ZsetMember {
                    continue;
                }
                let (zkey, member, score) =
                    split_member(&w.key, &w.value).map_err(|why| KvError::Corrupt {
                        chunk: w.chunk,
                        why,
                    })?;
                g.zsets.entry(zkey).or_default().insert(&member, score);
                g.zset_members += 1;
            }
            g.stats.scanned_records = (scan.winners.len() + scan.losers.len()) as u64;
            let zeros = vec![0u8; chunk as usize];
            for &(c, _) in &scan.losers {
                dev.write_at(&zeros, c * chunk)?;
                g.stats.invalidations += 1;
            }
            if !scan.losers.is_empty() {
                dev.flush()?;
            }
            // A loser's chunks were not marked used, so they are free already.
        }
        Ok(store)
    }

    /// Open the store on `dev`, or create one if chunk 0 holds no superblock.
    pub fn open_or_create(dev: Arc<dyn BlockDevice>, cfg: &KvConfig) -> Result<KvStore> {
        let mut head = vec![0u8; 512];
        dev.read_at(&mut head, 0)?;
        match Superblock::decode(&head) {
            Ok(_) => KvStore::open(dev, cfg),
            Err(_) if head.iter().all(|&b| b == 0) => KvStore::create(dev, cfg),
            Err(why) => Err(KvError::NotAStore(format!(
                "device '{}': {why}; chunk 0 is not zero, so it is not formatted (use create to overwrite)",
                dev.name()
            ))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock would be a bug; the state is still the last consistent one.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn superblock(&self) -> Superblock {
        self.sb
    }

    pub fn config(&self) -> &KvConfig {
        &self.cfg
    }

    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    fn chunk(&self) -> u64 {
        u64::from(self.sb.chunk_bytes)
    }

    fn check_sizes(&self, key: &[u8], value_bytes: usize) -> Result<()> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Err(KvError::KeySize(key.len()));
        }
        let max = self.cfg.value_bytes_max.min(u32::MAX as usize);
        if value_bytes > max {
            return Err(KvError::ValueSize {
                got: value_bytes,
                max,
            });
        }
        Ok(())
    }

    /// Find `key` in namespace `ns` (0: strings and hashes, 1: sorted-set members): through the
    /// cache (namespace 0 only), else through the location table, reading the first chunk of each
    /// candidate record to compare keys.
    fn locate(&self, g: &mut Inner, key: &[u8], ns: u8) -> Result<Option<Found>> {
        let h = key_hash(key);
        if ns == 0 && g.cache.capacity() > 0 {
            if let Lookup::Hit(meta) = g.cache.get(key) {
                g.stats.cache_hits += 1;
                let slot = g
                    .table
                    .candidates(h)
                    .find(|&(_, c)| c == meta.chunk)
                    .map(|(s, _)| s);
                let slot = slot.expect("a cached pair is in the location table");
                return Ok(Some(Found {
                    slot,
                    meta,
                    head: None,
                }));
            }
            g.stats.cache_misses += 1;
        }
        let chunk = self.chunk();
        let cands: Vec<(usize, u64)> = g.table.candidates(h).collect();
        for (slot, c) in cands {
            let mut head = vec![0u8; chunk as usize];
            self.dev.read_at(&mut head, c * chunk)?;
            g.stats.key_reads += 1;
            g.stats.bytes_read += chunk;
            let hdr = RecordHeader::decode(&head).ok_or_else(|| KvError::Corrupt {
                chunk: c,
                why: "the location table points at a chunk without a record header".into(),
            })?;
            let kb = hdr.key_bytes as usize;
            if hdr.kind.namespace() == ns && &head[HEADER_BYTES..HEADER_BYTES + kb] == key {
                let meta = Meta {
                    kind: hdr.kind,
                    chunk: c,
                    key_bytes: hdr.key_bytes,
                    value_bytes: hdr.value_bytes,
                };
                if ns == 0 {
                    g.cache.admit(key, meta);
                }
                return Ok(Some(Found {
                    slot,
                    meta,
                    head: Some(head),
                }));
            }
        }
        Ok(None)
    }

    /// Read and check the record of a located key; its value.
    fn read_value(&self, g: &mut Inner, key: &[u8], f: Found) -> Result<Vec<u8>> {
        let chunk = self.chunk() as usize;
        let chunks = record_chunks(
            f.meta.key_bytes as usize,
            f.meta.value_bytes as usize,
            chunk,
        );
        let rec = match f.head {
            Some(h) if chunks == 1 => h,
            _ => {
                let mut b = vec![0u8; chunks as usize * chunk];
                self.dev.read_at(&mut b, f.meta.chunk * chunk as u64)?;
                g.stats.bytes_read += b.len() as u64;
                b
            }
        };
        let hdr = verify_record(&rec, self.sb.salt).ok_or_else(|| KvError::Corrupt {
            chunk: f.meta.chunk,
            why: "record checksum mismatch".into(),
        })?;
        let start = HEADER_BYTES + hdr.key_bytes as usize;
        if &rec[HEADER_BYTES..start] != key || hdr.kind != f.meta.kind {
            return Err(KvError::Corrupt {
                chunk: f.meta.chunk,
                why: "record holds another key".into(),
            });
        }
        Ok(rec[start..start + hdr.value_bytes as usize].to_vec())
    }

    /// GET: the value of `key`, checked against its record checksum; [`KvError::WrongType`] when
    /// the key holds a hash or a sorted set.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Ok(None);
        }
        let mut g = self.lock();
        g.stats.gets += 1;
        let Some(f) = self.locate(&mut g, key, 0)? else {
            if g.zsets.contains_key(key) {
                return Err(KvError::WrongType);
            }
            return Ok(None);
        };
        if f.meta.kind != ValueKind::String {
            return Err(KvError::WrongType);
        }
        self.read_value(&mut g, key, f).map(Some)
    }

    /// EXISTS (any kind of value).
    pub fn exists(&self, key: &[u8]) -> Result<bool> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Ok(false);
        }
        let mut g = self.lock();
        Ok(self.locate(&mut g, key, 0)?.is_some() || g.zsets.contains_key(key))
    }

    /// The kind of value `key` holds ("string", "hash", "zset"), Redis's TYPE.
    pub fn kind_of(&self, key: &[u8]) -> Result<Option<&'static str>> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Ok(None);
        }
        let mut g = self.lock();
        if g.zsets.contains_key(key) {
            return Ok(Some("zset"));
        }
        Ok(self.locate(&mut g, key, 0)?.map(|f| match f.meta.kind {
            ValueKind::String => "string",
            ValueKind::Hash => "hash",
            ValueKind::ZsetMember => "zset",
        }))
    }

    /// SET: insert or replace. Durable on return under [`Durability::Always`].
    pub fn set(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.set_if(key, value, SetCondition::Always).map(|_| ())
    }

    /// UPDATE (the seed's third operation): replace the value of an existing pair; false if absent.
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.set_if(key, value, SetCondition::IfPresent)
    }

    /// SET with a condition on the key's presence; returns whether the value was written. Like
    /// Redis's SET, it replaces a hash or a sorted set held by the key.
    pub fn set_if(&self, key: &[u8], value: &[u8], cond: SetCondition) -> Result<bool> {
        self.check_sizes(key, value.len())?;
        let mut g = self.lock();
        g.stats.sets += 1;
        let found = self.locate(&mut g, key, 0)?;
        let zset = g.zsets.contains_key(key);
        match (cond, found.is_some() || zset) {
            (SetCondition::IfAbsent, true) | (SetCondition::IfPresent, false) => return Ok(false),
            _ => {}
        }
        if zset {
            self.remove_zset(&mut g, key)?;
        }
        self.write_record(&mut g, key, ValueKind::String, value, found)?;
        self.finish(&mut g)?;
        Ok(true)
    }

    /// SET of many pairs at once (group commit): the records of distinct keys are written into one
    /// contiguous free extent with one device write, so an array sees one large write instead of
    /// one per pair. Same effect as [`KvStore::set`] on each pair in order (a key repeated in
    /// `pairs` ends with its last value). Durable on return under [`Durability::Always`], with one
    /// sync for all of them.
    pub fn set_many(&self, pairs: &[(&[u8], &[u8])]) -> Result<()> {
        for (k, v) in pairs {
            self.check_sizes(k, v.len())?;
        }
        let mut g = self.lock();
        g.stats.sets += pairs.len() as u64;
        let mut i = 0;
        while i < pairs.len() {
            // A run of distinct keys.
            let mut seen = std::collections::HashSet::new();
            let mut j = i;
            while j < pairs.len() && j - i < GROUP_PAIRS_MAX && seen.insert(pairs[j].0) {
                j += 1;
            }
            self.write_group(&mut g, &pairs[i..j])?;
            i = j;
        }
        self.finish(&mut g)
    }

    /// Write the records of `group` (distinct keys, strings) with one device write when a free
    /// extent holds them all; else split the group.
    fn write_group(&self, g: &mut Inner, group: &[(&[u8], &[u8])]) -> Result<()> {
        for (k, _) in group {
            if g.zsets.contains_key(*k) {
                self.remove_zset(g, k)?;
            }
        }
        if group.len() == 1 {
            let (k, v) = group[0];
            let found = self.locate(g, k, 0)?;
            return self.write_record(g, k, ValueKind::String, v, found);
        }
        let chunk = self.chunk();
        let sizes: Vec<u64> = group
            .iter()
            .map(|(k, v)| record_chunks(k.len(), v.len(), chunk as usize))
            .collect();
        let total: u64 = sizes.iter().sum();
        let Some(at) = g.alloc.alloc(total) else {
            let (a, b) = group.split_at(group.len() / 2);
            self.write_group(g, a)?;
            return self.write_group(g, b);
        };
        // Point the table at each new record, remembering how to undo it (by value: a cuckoo
        // insertion may move other entries between slots).
        let mut undo: Vec<(u64, u64, Option<Found>)> = Vec::with_capacity(group.len());
        let mut failed = None;
        let mut next = at;
        for (idx, (k, _)) in group.iter().enumerate() {
            let h = key_hash(k);
            let found = match self.locate(g, k, 0) {
                Ok(f) => f,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            match &found {
                Some(f) => g.table.set_value(f.slot, next),
                None => {
                    if !g.table.insert(h, next) {
                        failed = Some(KvError::NoSpace(format!(
                            "location table full at {} pairs (raise pairs_max)",
                            g.table.len()
                        )));
                        break;
                    }
                }
            }
            undo.push((h, next, found));
            next += sizes[idx];
        }
        let mut buf = std::mem::take(&mut g.buf);
        let written = match failed {
            Some(e) => Err(e),
            None => {
                buf.clear();
                let mut one = Vec::new();
                for (k, v) in group {
                    let seq = g.seq;
                    g.seq += 1;
                    encode_record(
                        &mut one,
                        self.sb.salt,
                        seq,
                        ValueKind::String,
                        k,
                        v,
                        chunk as usize,
                    );
                    buf.extend_from_slice(&one);
                }
                g.stats.bytes_written += buf.len() as u64;
                self.dev.write_at(&buf, at * chunk).map_err(KvError::from)
            }
        };
        g.buf = buf;
        if let Err(e) = written {
            for (h, new, found) in undo.into_iter().rev() {
                let s = g
                    .table
                    .candidates(h)
                    .find(|&(_, c)| c == new)
                    .map(|(s, _)| s)
                    .expect("pointed at just now");
                match found {
                    Some(f) => g.table.set_value(s, f.meta.chunk),
                    None => g.table.remove(s),
                }
            }
            // The cache may hold the new addresses of keys located above: forget them.
            for (k, _) in group {
                g.cache.remove(k);
            }
            g.alloc.free(at, total);
            return Err(e);
        }
        g.dirty = true;
        for ((k, v), (_, new, found)) in group.iter().zip(undo) {
            let meta = Meta {
                kind: ValueKind::String,
                chunk: new,
                key_bytes: k.len() as u8,
                value_bytes: v.len() as u32,
            };
            if !g.cache.update(k, meta) {
                g.cache.admit(k, meta);
            }
            if let Some(f) = found {
                let old_chunks = record_chunks(
                    f.meta.key_bytes as usize,
                    f.meta.value_bytes as usize,
                    chunk as usize,
                );
                g.retired.push((f.meta.chunk, old_chunks));
            }
        }
        Ok(())
    }

    /// Under [`Durability::Always`], sync before acknowledging.
    fn finish(&self, g: &mut Inner) -> Result<()> {
        if self.cfg.durability == Durability::Always {
            self.sync_locked(g)?;
        }
        Ok(())
    }

    /// Write a new record for `key` out of place, point the table (and cache) at it and retire the
    /// record it replaces (`found`).
    fn write_record(
        &self,
        g: &mut Inner,
        key: &[u8],
        kind: ValueKind,
        value: &[u8],
        found: Option<Found>,
    ) -> Result<()> {
        let chunk = self.chunk();
        let chunks = record_chunks(key.len(), value.len(), chunk as usize);
        let at = self.allocate(g, chunks)?;
        let h = key_hash(key);
        // Point the table at the new record first, so a full table fails before anything is written.
        let slot = match &found {
            Some(f) => {
                g.table.set_value(f.slot, at);
                f.slot
            }
            None => {
                if !g.table.insert(h, at) {
                    g.alloc.free(at, chunks);
                    return Err(KvError::NoSpace(format!(
                        "location table full at {} pairs (raise pairs_max)",
                        g.table.len()
                    )));
                }
                usize::MAX
            }
        };
        let seq = g.seq;
        g.seq += 1;
        let mut buf = std::mem::take(&mut g.buf);
        encode_record(
            &mut buf,
            self.sb.salt,
            seq,
            kind,
            key,
            value,
            chunk as usize,
        );
        let written = self.dev.write_at(&buf, at * chunk);
        g.stats.bytes_written += buf.len() as u64;
        g.buf = buf;
        if let Err(e) = written {
            // Undo: the table points back at the old record (or forgets the key).
            match &found {
                Some(f) => g.table.set_value(slot, f.meta.chunk),
                None => {
                    let s = g
                        .table
                        .candidates(h)
                        .find(|&(_, c)| c == at)
                        .map(|(s, _)| s);
                    g.table.remove(s.expect("just inserted"));
                }
            }
            g.alloc.free(at, chunks);
            return Err(e.into());
        }
        g.dirty = true;
        let meta = Meta {
            kind,
            chunk: at,
            key_bytes: key.len() as u8,
            value_bytes: value.len() as u32,
        };
        if kind.namespace() == 0 && !g.cache.update(key, meta) {
            g.cache.admit(key, meta);
        }
        if let Some(f) = found {
            let old_chunks = record_chunks(
                f.meta.key_bytes as usize,
                f.meta.value_bytes as usize,
                chunk as usize,
            );
            g.retired.push((f.meta.chunk, old_chunks));
        }
        Ok(())
    }

    /// Invalidate a located record in place and forget it.
    fn invalidate(&self, g: &mut Inner, key: &[u8], f: Found) -> Result<()> {
        let chunk = self.chunk();
        let zeros = vec![0u8; chunk as usize];
        self.dev.write_at(&zeros, f.meta.chunk * chunk)?;
        g.stats.invalidations += 1;
        g.stats.bytes_written += chunk;
        g.dirty = true;
        g.table.remove(f.slot);
        if f.meta.kind.namespace() == 0 {
            g.cache.remove(key);
        }
        let chunks = record_chunks(
            f.meta.key_bytes as usize,
            f.meta.value_bytes as usize,
            chunk as usize,
        );
        g.alloc.free(f.meta.chunk, chunks);
        Ok(())
    }

    /// The fields of the hash at `key` and its record (None when absent); WRONGTYPE otherwise.
    fn hash_locked(&self, g: &mut Inner, key: &[u8]) -> Result<Option<(hash::Fields, Found)>> {
        if g.zsets.contains_key(key) {
            return Err(KvError::WrongType);
        }
        let Some(f) = self.locate(g, key, 0)? else {
            return Ok(None);
        };
        if f.meta.kind != ValueKind::Hash {
            return Err(KvError::WrongType);
        }
        let chunk = f.meta.chunk;
        let meta = f.meta;
        let slot = f.slot;
        let v = self.read_value(g, key, f)?;
        let fields = hash::decode(&v).map_err(|why| KvError::Corrupt { chunk, why })?;
        Ok(Some((
            fields,
            Found {
                slot,
                meta,
                head: None,
            },
        )))
    }

    /// HSET / HMSET: set `pairs` in the hash at `key` (created if absent); the number of fields
    /// that are new. The whole hash is one record, rewritten out of place.
    pub fn hset(&self, key: &[u8], pairs: &[(&[u8], &[u8])]) -> Result<usize> {
        self.check_sizes(key, 0)?;
        let mut g = self.lock();
        g.stats.sets += 1;
        let (mut fields, found) = match self.hash_locked(&mut g, key)? {
            Some((fields, f)) => (fields, Some(f)),
            None => (Vec::new(), None),
        };
        let mut index: HashMap<Vec<u8>, usize> = fields
            .iter()
            .enumerate()
            .map(|(i, (f, _))| (f.clone(), i))
            .collect();
        let mut new = 0;
        for &(f, v) in pairs {
            match index.get(f) {
                Some(&i) => fields[i].1 = v.to_vec(),
                None => {
                    index.insert(f.to_vec(), fields.len());
                    fields.push((f.to_vec(), v.to_vec()));
                    new += 1;
                }
            }
        }
        let value = hash::encode(&fields);
        self.check_sizes(key, value.len())?;
        self.write_record(&mut g, key, ValueKind::Hash, &value, found)?;
        self.finish(&mut g)?;
        Ok(new)
    }

    /// HGETALL: the fields of the hash at `key` in insertion order (empty when absent).
    pub fn hgetall(&self, key: &[u8]) -> Result<hash::Fields> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Ok(Vec::new());
        }
        let mut g = self.lock();
        g.stats.gets += 1;
        Ok(self
            .hash_locked(&mut g, key)?
            .map(|(f, _)| f)
            .unwrap_or_default())
    }

    /// HDEL: remove `fields` from the hash at `key`; how many were there. An emptied hash is
    /// deleted, as in Redis.
    pub fn hdel(&self, key: &[u8], fields: &[&[u8]]) -> Result<usize> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Ok(0);
        }
        let mut g = self.lock();
        let Some((mut have, found)) = self.hash_locked(&mut g, key)? else {
            return Ok(0);
        };
        let before = have.len();
        have.retain(|(f, _)| !fields.contains(&&f[..]));
        let removed = before - have.len();
        if removed == 0 {
            return Ok(0);
        }
        g.stats.deletes += 1;
        if have.is_empty() {
            self.invalidate(&mut g, key, found)?;
        } else {
            let value = hash::encode(&have);
            self.write_record(&mut g, key, ValueKind::Hash, &value, Some(found))?;
        }
        self.finish(&mut g)?;
        Ok(removed)
    }

    /// WRONGTYPE unless `zkey` holds a sorted set or nothing.
    fn check_zset_key(&self, g: &mut Inner, zkey: &[u8]) -> Result<()> {
        if zkey.is_empty() || zkey.len() > KEY_BYTES_MAX {
            return Err(KvError::KeySize(zkey.len()));
        }
        if !g.zsets.contains_key(zkey) && self.locate(g, zkey, 0)?.is_some() {
            return Err(KvError::WrongType);
        }
        Ok(())
    }

    /// ZADD: add or rescore members of the sorted set at `zkey`; how many are new. Each member is a
    /// record of its own (key `[key bytes] ‖ key ‖ member`, value the score), so a ZADD writes one
    /// small record per changed member, not the whole set.
    pub fn zadd(&self, zkey: &[u8], items: &[(f64, &[u8])]) -> Result<usize> {
        for &(score, member) in items {
            member_key(zkey, member)?;
            if score.is_nan() {
                return Err(KvError::Invalid("a score is NaN".into()));
            }
        }
        let mut g = self.lock();
        self.check_zset_key(&mut g, zkey)?;
        g.stats.sets += 1;
        let mut added = 0;
        for &(score, member) in items {
            let old = g
                .zsets
                .get(zkey)
                .and_then(|z| z.scores.get(member))
                .copied();
            if old.is_some_and(|o| Score(o) == Score(score)) {
                continue;
            }
            let mk = member_key(zkey, member)?;
            let found = match old {
                Some(_) => Some(
                    self.locate(&mut g, &mk, 1)?
                        .ok_or_else(|| KvError::Corrupt {
                            chunk: 0,
                            why: "a sorted-set member in memory has no record".into(),
                        })?,
                ),
                None => None,
            };
            self.write_record(
                &mut g,
                &mk,
                ValueKind::ZsetMember,
                &score.to_le_bytes(),
                found,
            )?;
            g.zsets
                .entry(zkey.to_vec())
                .or_default()
                .insert(member, score);
            if old.is_none() {
                g.zset_members += 1;
                added += 1;
            }
        }
        self.finish(&mut g)?;
        Ok(added)
    }

    /// Invalidate one member's record and forget it.
    fn zrem_locked(&self, g: &mut Inner, zkey: &[u8], member: &[u8]) -> Result<bool> {
        if !g
            .zsets
            .get(zkey)
            .is_some_and(|z| z.scores.contains_key(member))
        {
            return Ok(false);
        }
        let mk = member_key(zkey, member)?;
        let f = self.locate(g, &mk, 1)?.ok_or_else(|| KvError::Corrupt {
            chunk: 0,
            why: "a sorted-set member in memory has no record".into(),
        })?;
        self.invalidate(g, &mk, f)?;
        g.zset_members -= 1;
        let z = g.zsets.get_mut(zkey).expect("checked above");
        z.remove(member);
        if z.scores.is_empty() {
            g.zsets.remove(zkey);
        }
        Ok(true)
    }

    /// Delete every member of the sorted set at `zkey`.
    fn remove_zset(&self, g: &mut Inner, zkey: &[u8]) -> Result<()> {
        let members: Vec<Vec<u8>> = g
            .zsets
            .get(zkey)
            .map(|z| z.scores.keys().cloned().collect())
            .unwrap_or_default();
        for m in members {
            self.zrem_locked(g, zkey, &m)?;
        }
        Ok(())
    }

    /// ZREM: remove members; how many were there.
    pub fn zrem(&self, zkey: &[u8], members: &[&[u8]]) -> Result<usize> {
        let mut g = self.lock();
        self.check_zset_key(&mut g, zkey)?;
        let mut n = 0;
        for m in members {
            n += usize::from(self.zrem_locked(&mut g, zkey, m)?);
        }
        if n > 0 {
            g.stats.deletes += 1;
            self.finish(&mut g)?;
        }
        Ok(n)
    }

    /// ZRANGEBYSCORE: members with `min ≤ score ≤ max` (bounds may be exclusive or infinite) in
    /// Redis's order (score, then member bytes), skipping `offset`, at most `count`.
    pub fn zrange_by_score(
        &self,
        zkey: &[u8],
        min: Bound<f64>,
        max: Bound<f64>,
        offset: usize,
        count: Option<usize>,
    ) -> Result<Vec<(Vec<u8>, f64)>> {
        let mut g = self.lock();
        self.check_zset_key(&mut g, zkey)?;
        g.stats.gets += 1;
        let Some(z) = g.zsets.get(zkey) else {
            return Ok(Vec::new());
        };
        let inside_max = |s: f64| match max {
            Bound::Included(m) => s <= m,
            Bound::Excluded(m) => s < m,
            Bound::Unbounded => true,
        };
        let start = match min {
            Bound::Included(m) | Bound::Excluded(m) => Bound::Included((Score(m), Vec::new())),
            Bound::Unbounded => Bound::Unbounded,
        };
        Ok(z.order
            .range((start, Bound::Unbounded))
            .filter(|(s, _)| !matches!(min, Bound::Excluded(m) if s.0 <= m))
            .take_while(|(s, _)| inside_max(s.0))
            .skip(offset)
            .take(count.unwrap_or(usize::MAX))
            .map(|(s, m)| (m.clone(), s.0))
            .collect())
    }

    /// ZSCORE.
    pub fn zscore(&self, zkey: &[u8], member: &[u8]) -> Result<Option<f64>> {
        let mut g = self.lock();
        self.check_zset_key(&mut g, zkey)?;
        Ok(g.zsets
            .get(zkey)
            .and_then(|z| z.scores.get(member))
            .copied())
    }

    /// ZCARD.
    pub fn zcard(&self, zkey: &[u8]) -> Result<usize> {
        let mut g = self.lock();
        self.check_zset_key(&mut g, zkey)?;
        Ok(g.zsets.get(zkey).map_or(0, |z| z.scores.len()))
    }

    fn allocate(&self, g: &mut Inner, chunks: u64) -> Result<u64> {
        if let Some(at) = g.alloc.alloc(chunks) {
            return Ok(at);
        }
        if !g.retired.is_empty() {
            // Retired records free their chunks once a sync has invalidated them.
            self.sync_locked(g)?;
            if let Some(at) = g.alloc.alloc(chunks) {
                return Ok(at);
            }
        }
        Err(KvError::NoSpace(format!(
            "no {chunks} contiguous free chunks on '{}' ({} chunks free)",
            self.dev.name(),
            g.alloc.available()
        )))
    }

    /// DELETE: remove `key` (any kind of value); false if absent. Durable on return under
    /// [`Durability::Always`].
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Ok(false);
        }
        let mut g = self.lock();
        g.stats.deletes += 1;
        if let Some(f) = self.locate(&mut g, key, 0)? {
            self.invalidate(&mut g, key, f)?;
        } else if g.zsets.contains_key(key) {
            self.remove_zset(&mut g, key)?;
        } else {
            return Ok(false);
        }
        self.finish(&mut g)?;
        Ok(true)
    }

    /// Make every completed operation durable: flush; then invalidate the records retired since, and
    /// flush again so no retired record can outlive a later DELETE of its key.
    pub fn sync(&self) -> Result<()> {
        let mut g = self.lock();
        self.sync_locked(&mut g)
    }

    fn sync_locked(&self, g: &mut Inner) -> Result<()> {
        if !g.dirty && g.retired.is_empty() {
            return Ok(());
        }
        self.dev.flush()?;
        g.stats.flushes += 1;
        g.dirty = false;
        if g.retired.is_empty() {
            return Ok(());
        }
        let chunk = self.chunk();
        let mut retired = std::mem::take(&mut g.retired);
        // Retired records that lie next to each other (a group written together and overwritten
        // together) are zeroed whole with one write; otherwise only their first chunk.
        retired.sort_unstable();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &(c, n) in &retired {
            match runs.last_mut() {
                Some((start, len)) if *start + *len == c && *len + n <= ZERO_RUN_CHUNKS_MAX => {
                    *len += n
                }
                _ => runs.push((c, n)),
            }
        }
        let zeros = vec![0u8; (chunk * ZERO_RUN_CHUNKS_MAX) as usize];
        for &(c, n) in &runs {
            // A lone record: its first chunk is enough to invalidate it.
            let n = if retired.binary_search(&(c, n)).is_ok() {
                1
            } else {
                n
            };
            if let Err(e) = self.dev.write_at(&zeros[..(n * chunk) as usize], c * chunk) {
                g.retired = retired;
                return Err(e.into());
            }
            g.stats.bytes_written += chunk * n;
        }
        g.stats.invalidations += retired.len() as u64;
        if let Err(e) = self.dev.flush() {
            g.retired = retired;
            return Err(e.into());
        }
        g.stats.flushes += 1;
        for (c, n) in retired {
            g.alloc.free(c, n);
        }
        Ok(())
    }

    /// Number of keys (strings, hashes and sorted sets).
    pub fn len(&self) -> usize {
        let g = self.lock();
        g.table.len() - g.zset_members + g.zsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn stats(&self) -> KvStats {
        let g = self.lock();
        let mut s = g.stats.clone();
        s.pairs = (g.table.len() - g.zset_members + g.zsets.len()) as u64;
        s.cache_entries = g.cache.len() as u64;
        let total = self.dev.capacity() / self.chunk() - 1;
        s.chunks_available = g.alloc.available();
        s.chunks_used = total - s.chunks_available;
        s.table_slots = g.table.slots() as u64;
        s.table_load = g.table.load();
        s
    }

    /// Replace the object metadata cache by an empty one of `entries` entries (0 turns it off);
    /// the experiments change the cache size between runs on one loaded store.
    pub fn set_cache_entries(&self, entries: usize) {
        let mut g = self.lock();
        g.cache = ArcCache::new(entries);
    }

    /// Zero the counters (not the sizes).
    pub fn reset_stats(&self) {
        let mut g = self.lock();
        let keep = (g.stats.chunk_bytes, g.stats.scanned_records);
        g.stats = KvStats {
            chunk_bytes: keep.0,
            scanned_records: keep.1,
            ..KvStats::default()
        };
    }

    /// Sync, then hand the device back.
    pub fn close(self) -> Result<Arc<dyn BlockDevice>> {
        self.sync()?;
        Ok(self.dev)
    }

    /// Under [`Durability::EverySec`]: a thread that syncs every `every` while the store lives.
    pub fn spawn_syncer(self: &Arc<Self>, every: Duration) -> std::thread::JoinHandle<()> {
        let weak: Weak<KvStore> = Arc::downgrade(self);
        std::thread::spawn(move || loop {
            std::thread::sleep(every);
            let Some(kv) = weak.upgrade() else { return };
            if let Err(e) = kv.sync() {
                tracing::warn!("kv: background sync failed: {e}");
            }
        })
    }
}

/// A valid record found by the scan.
struct Scanned {
    kind: ValueKind,
    key: Vec<u8>,
    /// The value, kept for sorted-set members only (their score).
    value: Vec<u8>,
    seq: u64,
    chunk: u64,
    chunks: u64,
}

struct Scan {
    winners: Vec<Scanned>,
    /// Superseded records (chunk, chunks).
    losers: Vec<(u64, u64)>,
    seq_max: u64,
}

/// Read the device in large windows and collect every record that passes its checksum.
fn scan_records(dev: &dyn BlockDevice, sb: &Superblock, end: u64) -> Result<Scan> {
    use std::collections::HashMap;
    let chunk = u64::from(sb.chunk_bytes);
    let window_chunks = ((4u64 << 20) / chunk).max(1);
    let mut best: HashMap<(u8, Vec<u8>), Scanned> = HashMap::new();
    let mut losers = Vec::new();
    let mut seq_max = 0;
    let mut win = Vec::new();
    let mut c = 1;
    let mut win_start = 1;
    let mut win_len = 0;
    while c < end {
        if c >= win_start + win_len {
            win_start = c;
            win_len = window_chunks.min(end - c);
            win.resize((win_len * chunk) as usize, 0);
            dev.read_at(&mut win, win_start * chunk)?;
        }
        let off = ((c - win_start) * chunk) as usize;
        let Some(h) = RecordHeader::decode(&win[off..]) else {
            c += 1;
            continue;
        };
        let chunks = h.record_bytes().div_ceil(chunk);
        if c + chunks > end {
            c += 1;
            continue;
        }
        let need = (h.record_bytes()) as usize;
        let own;
        let rec: &[u8] = if off + need <= win.len() {
            &win[off..off + need]
        } else {
            let mut b = vec![0u8; (chunks * chunk) as usize];
            dev.read_at(&mut b, c * chunk)?;
            own = b;
            &own[..need]
        };
        if verify_record(rec, sb.salt).is_none() {
            c += 1;
            continue;
        }
        let key_end = HEADER_BYTES + h.key_bytes as usize;
        let key = rec[HEADER_BYTES..key_end].to_vec();
        seq_max = seq_max.max(h.seq);
        let value = match h.kind {
            ValueKind::ZsetMember => rec[key_end..].to_vec(),
            _ => Vec::new(),
        };
        let s = Scanned {
            kind: h.kind,
            key,
            value,
            seq: h.seq,
            chunk: c,
            chunks,
        };
        let id = (s.kind.namespace(), s.key.clone());
        match best.get_mut(&id) {
            Some(old) if old.seq >= s.seq => losers.push((s.chunk, s.chunks)),
            Some(old) => {
                losers.push((old.chunk, old.chunks));
                *old = s;
            }
            None => {
                best.insert(id, s);
            }
        }
        c += chunks;
    }
    let mut winners: Vec<Scanned> = best.into_values().collect();
    winners.sort_unstable_by_key(|w| w.chunk);
    Ok(Scan {
        winners,
        losers,
        seq_max,
    })
}
