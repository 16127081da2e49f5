//! [`KvStore`]: the key-value store over a [`BlockDevice`] (EPLOG §4), durable per [`Durability`].
//!
//! Every write is out of place: a SET or UPDATE writes a whole new record (with the next sequence
//! number) into free chunks, points the location table at it, and retires the old record. A
//! DELETE writes a **tombstone** (a record of the key with no value and the next sequence number)
//! and retires the pair's record. Retired records are not overwritten: their space is freed once
//! the next sync has flushed the records that supersede them, and until it is reused they may
//! still pass their checksum. Every such stale record is outranked by a durable record of its key
//! with a higher sequence number: the key's live record, or its live tombstone, which the store
//! keeps (in memory and on the device) until a **compaction** has zeroed every older record of the
//! key. Hence, after a crash, the record with the highest sequence number per key is the pair's
//! current version (or says it was deleted), never a version older than the last completed sync.
//! Reopening scans the chunks, keeps the highest sequence number per key and frees the rest
//! (`docs/kv.md`, "Durability and crash consistency").
//!
//! Torn writes are tolerated: a record that is only partly on the device fails its checksum and is
//! ignored, and the version before it is still valid because its space is freed only after the new
//! one is durable.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use ecstack_device::BlockDevice;
use serde::Serialize;

use crate::alloc::Alloc;
use crate::arc::ArcCache;
use crate::cuckoo::{key_hash, CuckooTable};
use crate::hash;
use crate::record::{
    encode_record_into, packed_bytes, record_bytes, verify_record, RecordHeader, Superblock,
    ValueKind, HEADER_BYTES, KEY_BYTES_MAX, RECORD_ALIGN, RECORD_MAGIC, SUPERBLOCK_BYTES,
};
use crate::{KvError, Result};

/// Most pairs [`KvStore::set_many`] writes with one device write.
const GROUP_PAIRS_MAX: usize = 256;

/// A hasher for `u64` keys on the hot path (chunk indexes, key hashes): one multiply instead of
/// SipHash. No key here comes from a client unhashed (a client's key reaches these maps only
/// through [`key_hash`], or as a chunk index the store chose).
#[derive(Default)]
struct Spread(u64);

impl Hasher for Spread {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b) ^ self.0.rotate_left(8));
        }
    }

    fn write_u64(&mut self, x: u64) {
        let m = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = m ^ (m >> 29);
    }
}

/// Live records per pack chunk.
type Packs = HashMap<u64, u32, BuildHasherDefault<Spread>>;
/// Live tombstones that start a compaction, at least (see [`KvConfig::tombstones_max`]).
const TOMBSTONES_MIN: usize = 1024;
/// A chunk with less room than this left after a batch is not kept open for later records.
const OPEN_ROOM_MIN_BYTES: usize = 64;
/// Record size the location table is sized for by default (one entry per this many bytes of
/// device, at most 4 Mi entries).
const PACKED_RECORD_BYTES_TYPICAL: usize = 64;

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
    /// Live tombstones that start a compaction (a scan of the device that zeroes the records the
    /// tombstones outrank, then frees the tombstones). Default: one per 8 chunks of device, at
    /// least 1024, so a compaction's reads come to at most 8 chunks per DELETE.
    pub tombstones_max: Option<usize>,
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
            tombstones_max: None,
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
    /// Tombstones written (DELETE, ZREM, a sorted set replaced).
    pub tombstones_written: u64,
    /// Live tombstones (deleted keys whose older records a compaction has not zeroed yet).
    pub tombstones: u64,
    /// Compactions run, and the stale records they zeroed.
    pub compactions: u64,
    pub compacted_records: u64,
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
    /// Byte address of the record (its chunk × chunk_bytes + its offset in the chunk).
    loc: u64,
    key_bytes: u8,
    value_bytes: u32,
}

impl Meta {
    /// Bytes of the record (header, key, value).
    fn bytes(&self) -> usize {
        record_bytes(self.key_bytes as usize, self.value_bytes as usize)
    }
}

/// A live tombstone: where it is and its sequence number.
#[derive(Debug, Clone, Copy)]
struct Tomb {
    loc: u64,
    bytes: usize,
    seq: u64,
}

/// A located pair: its metadata and, when the lookup read it, the bytes from the record's header
/// to the end of its chunk.
struct Found {
    meta: Meta,
    head: Option<Vec<u8>>,
    /// The cache entry that holds the pair, when the lookup hit the cache (for
    /// [`ArcCache::update_at`]: the write that follows needs no second directory lookup).
    node: Option<usize>,
}

/// The pack chunk new packed records are appended to, with its bytes as last written.
struct OpenChunk {
    chunk: u64,
    /// Bytes in use from the chunk's start; the next record goes here.
    used: usize,
    buf: Vec<u8>,
}

/// One record to write: the record it replaces (if any) is retired once the new one is written.
struct Put<'a> {
    key: &'a [u8],
    kind: ValueKind,
    value: &'a [u8],
    old: Option<Meta>,
    /// The cache entry of `key` when its lookup hit the cache ([`Found::node`]).
    node: Option<usize>,
    /// [`key_hash`] of `key`.
    hash: u64,
}

/// Where [`KvStore::write_batch`] puts a record: a byte offset in the open chunk, or in the new
/// extent.
#[derive(Debug, Clone, Copy)]
enum Place {
    Open(usize),
    Extent(u64),
}

struct Inner {
    table: CuckooTable,
    cache: ArcCache<Meta>,
    alloc: Alloc,
    /// Next sequence number.
    seq: u64,
    /// Records retired by an update or a delete, their space freed by the next sync (after its
    /// flush): (byte address, record bytes). A zero-byte entry marks a closed pack chunk without
    /// live records.
    retired: Vec<(u64, usize)>,
    /// Live tombstones by namespace and key: deleted keys whose older records may still pass
    /// their checksum on the device. Each counts as a live record of its pack chunk.
    tombstones: [HashMap<Vec<u8>, Tomb>; 2],
    /// Live records per pack chunk (a chunk holding packed records).
    packs: Packs,
    open: Option<OpenChunk>,
    /// Writes since the last flush.
    dirty: bool,
    buf: Vec<u8>,
    /// The record a GET reads (reused: no allocation per GET).
    get_buf: Vec<u8>,
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

/// The location table keeps 48-bit byte addresses ([`crate::cuckoo::VALUE_MAX`]).
fn check_capacity(dev: &dyn BlockDevice) -> Result<()> {
    if dev.capacity() > crate::cuckoo::VALUE_MAX + 1 {
        return Err(KvError::Config(format!(
            "device '{}' of {} bytes: the location table addresses records below 256 TiB",
            dev.name(),
            dev.capacity()
        )));
    }
    Ok(())
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
        check_capacity(&*dev)?;
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
        // Packed records: a chunk holds many; size the table for one per 64 bytes of records.
        let records_max = (dev.capacity() / chunk as u64).saturating_sub(1) as usize
            * (chunk / PACKED_RECORD_BYTES_TYPICAL);
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
                tombstones: [HashMap::new(), HashMap::new()],
                packs: Packs::default(),
                open: None,
                dirty: false,
                buf: Vec::new(),
                get_buf: Vec::new(),
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
    /// highest sequence number per key, free the others, rebuild table and free space. A winning
    /// tombstone stays live while older records of its key are on the device (a compaction frees
    /// it); alone, it is freed at once.
    pub fn open(dev: Arc<dyn BlockDevice>, cfg: &KvConfig) -> Result<KvStore> {
        check_capacity(&*dev)?;
        let mut head = vec![0u8; 512];
        dev.read_at(&mut head, 0)?;
        let sb = Superblock::decode(&head)
            .map_err(|why| KvError::NotAStore(format!("device '{}': {why}", dev.name())))?;
        let chunk = sb.chunk_bytes as u64;
        let end = dev.capacity() / chunk;
        let scan = Scan::run(&*dev, &sb, end)?;
        // Space in use: every chunk holding a valid record (losers too, until the sync below
        // frees them); live records per pack chunk (winners only).
        let mut used: Vec<(u64, u64)> = Vec::new();
        let mut packs = Packs::default();
        let all = scan.winners.iter().map(|w| (w.loc, w.bytes, true));
        for (loc, bytes, live) in all.chain(scan.losers.iter().map(|&(l, b)| (l, b, false))) {
            if bytes as u64 > chunk {
                used.push((loc / chunk, (bytes as u64).div_ceil(chunk)));
            } else {
                *packs.entry(loc / chunk).or_insert(0) += u32::from(live);
            }
        }
        used.extend(packs.keys().map(|&c| (c, 1)));
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
            g.packs = packs;
            let scanned = (scan.winners.len() + scan.losers.len()) as u64;
            g.retired = scan.losers;
            for w in &scan.winners {
                if w.kind.is_tombstone() {
                    let ns = w.kind.namespace();
                    if scan.contested.contains(&(ns, w.key.clone())) {
                        let t = Tomb {
                            loc: w.loc,
                            bytes: w.bytes,
                            seq: w.seq,
                        };
                        g.tombstones[ns as usize].insert(w.key.clone(), t);
                    } else {
                        // Nothing older of its key is on the device: it has done its work.
                        retire_at(&mut g, chunk, w.loc, w.bytes);
                    }
                    continue;
                }
                if !g.table.insert(key_hash(&w.key), w.loc) {
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
                        chunk: w.loc / chunk,
                        why,
                    })?;
                g.zsets.entry(zkey).or_default().insert(&member, score);
                g.zset_members += 1;
            }
            g.stats.scanned_records = scanned;
            // Superseded records and lone tombstones: their space is freed (not overwritten).
            store.sync_locked(&mut g)?;
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
    /// cache (namespace 0 only), else through the location table, reading each candidate record's
    /// header and key to compare keys.
    fn locate(&self, g: &mut Inner, key: &[u8], ns: u8) -> Result<Option<Found>> {
        self.locate_hashed(g, key, key_hash(key), ns)
    }

    /// [`KvStore::locate`] of a key whose [`key_hash`] is `h`.
    fn locate_hashed(&self, g: &mut Inner, key: &[u8], h: u64, ns: u8) -> Result<Option<Found>> {
        if ns == 0 && g.cache.capacity() > 0 {
            if let Some((node, meta)) = g.cache.get_hashed(key, h) {
                g.stats.cache_hits += 1;
                debug_assert!(
                    g.table.candidates(h).any(|(_, c)| c == meta.loc),
                    "a cached pair is in the location table"
                );
                return Ok(Some(Found {
                    meta,
                    head: None,
                    node: Some(node),
                }));
            }
            g.stats.cache_misses += 1;
        }
        let chunk = self.chunk();
        let cands: Vec<u64> = g.table.candidates(h).map(|(_, c)| c).collect();
        for loc in cands {
            let head = self.read_head(g, loc)?;
            g.stats.key_reads += 1;
            let hdr = RecordHeader::decode(&head).ok_or_else(|| KvError::Corrupt {
                chunk: loc / chunk,
                why: format!(
                    "the location table points at byte {} of the chunk, where no record header is",
                    loc % chunk
                ),
            })?;
            let kb = hdr.key_bytes as usize;
            let same = head
                .get(HEADER_BYTES..HEADER_BYTES + kb)
                .is_some_and(|k| k == key);
            if hdr.kind.namespace() == ns && same {
                let meta = Meta {
                    kind: hdr.kind,
                    loc,
                    key_bytes: hdr.key_bytes,
                    value_bytes: hdr.value_bytes,
                };
                if ns == 0 {
                    g.cache.admit_hashed(key, h, meta);
                }
                return Ok(Some(Found {
                    meta,
                    head: Some(head),
                    node: None,
                }));
            }
        }
        Ok(None)
    }

    /// `bytes` bytes at byte address `loc` (from memory when they lie in the open chunk).
    fn read_bytes(&self, g: &mut Inner, loc: u64, bytes: usize) -> Result<Vec<u8>> {
        let mut b = Vec::new();
        self.read_bytes_into(g, loc, bytes, &mut b)?;
        Ok(b)
    }

    /// [`KvStore::read_bytes`] into `buf` (its length becomes `bytes`; no allocation once it has
    /// grown that large).
    fn read_bytes_into(
        &self,
        g: &mut Inner,
        loc: u64,
        bytes: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let chunk = self.chunk();
        let off = (loc % chunk) as usize;
        buf.clear();
        if let Some(o) = g.open.as_ref() {
            if o.chunk == loc / chunk && off + bytes <= o.buf.len() {
                buf.extend_from_slice(&o.buf[off..off + bytes]);
                return Ok(());
            }
        }
        buf.resize(bytes, 0);
        self.dev.read_at(buf, loc)?;
        g.stats.bytes_read += bytes as u64;
        Ok(())
    }

    /// The bytes from `loc` to the end of its chunk: a packed record whole, a large record's head.
    fn read_head(&self, g: &mut Inner, loc: u64) -> Result<Vec<u8>> {
        let chunk = self.chunk();
        self.read_bytes(g, loc, (chunk - loc % chunk) as usize)
    }

    /// Read and check the record of a located key; its value.
    fn read_value(&self, g: &mut Inner, key: &[u8], f: Found) -> Result<Vec<u8>> {
        let mut rec = Vec::new();
        let value = self.read_value_into(g, key, f, &mut rec)?;
        rec.truncate(value.end);
        rec.drain(..value.start);
        Ok(rec)
    }

    /// Read and check the record of a located key into `rec`; where its value lies in `rec`.
    fn read_value_into(
        &self,
        g: &mut Inner,
        key: &[u8],
        f: Found,
        rec: &mut Vec<u8>,
    ) -> Result<std::ops::Range<usize>> {
        let n = f.meta.bytes();
        match f.head {
            Some(h) if h.len() >= n => *rec = h,
            _ => self.read_bytes_into(g, f.meta.loc, n, rec)?,
        }
        let chunk = f.meta.loc / self.chunk();
        let hdr = verify_record(&rec[..n], self.sb.salt).ok_or_else(|| KvError::Corrupt {
            chunk,
            why: "record checksum mismatch".into(),
        })?;
        let start = HEADER_BYTES + hdr.key_bytes as usize;
        if &rec[HEADER_BYTES..start] != key || hdr.kind != f.meta.kind {
            return Err(KvError::Corrupt {
                chunk,
                why: "record holds another key".into(),
            });
        }
        Ok(start..start + hdr.value_bytes as usize)
    }

    /// GET: the value of `key`, checked against its record checksum; [`KvError::WrongType`] when
    /// the key holds a hash or a sorted set.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Ok(None);
        }
        let mut g = self.lock();
        self.get_locked(&mut g, key)
    }

    /// GET of several keys under one lock (a pipelined batch of GETs, MGET): one result per key,
    /// each as [`KvStore::get`] would answer it, in order.
    pub fn get_many(&self, keys: &[&[u8]]) -> Vec<Result<Option<Vec<u8>>>> {
        let mut out = Vec::with_capacity(keys.len());
        self.get_many_with(keys, |r| out.push(r.map(|v| v.map(<[u8]>::to_vec))));
        out
    }

    /// [`KvStore::get_many`] without a buffer per value: `each` gets every key's result in order,
    /// the value borrowed from one buffer the store reuses (a server writes it straight into its
    /// reply).
    pub fn get_many_with(&self, keys: &[&[u8]], mut each: impl FnMut(Result<Option<&[u8]>>)) {
        let mut g = self.lock();
        let mut rec = std::mem::take(&mut g.get_buf);
        for k in keys {
            match self.get_into(&mut g, k, &mut rec) {
                Ok(Some(v)) => each(Ok(Some(&rec[v]))),
                Ok(None) => each(Ok(None)),
                Err(e) => each(Err(e)),
            }
        }
        g.get_buf = rec;
    }

    fn get_locked(&self, g: &mut Inner, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut rec = Vec::new();
        let Some(v) = self.get_into(g, key, &mut rec)? else {
            return Ok(None);
        };
        rec.truncate(v.end);
        rec.drain(..v.start);
        Ok(Some(rec))
    }

    /// GET into `rec`: where the value lies in it.
    fn get_into(
        &self,
        g: &mut Inner,
        key: &[u8],
        rec: &mut Vec<u8>,
    ) -> Result<Option<std::ops::Range<usize>>> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Ok(None);
        }
        g.stats.gets += 1;
        let Some(f) = self.locate(g, key, 0)? else {
            if g.zsets.contains_key(key) {
                return Err(KvError::WrongType);
            }
            return Ok(None);
        };
        if f.meta.kind != ValueKind::String {
            return Err(KvError::WrongType);
        }
        self.read_value_into(g, key, f, rec).map(Some)
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
        // The location table never points at a tombstone.
        Ok(self
            .locate(&mut g, key, 0)?
            .and_then(|f| match f.meta.kind {
                ValueKind::String => Some("string"),
                ValueKind::Hash => Some("hash"),
                ValueKind::ZsetMember => Some("zset"),
                ValueKind::Tombstone | ValueKind::MemberTombstone => None,
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
        let mut seen = HashSet::with_capacity_and_hasher(
            pairs.len().min(GROUP_PAIRS_MAX),
            BuildHasherDefault::<Spread>::default(),
        );
        while i < pairs.len() {
            // A run of distinct keys (told apart by their 64-bit hashes: two keys of one hash
            // start a new run, which changes only how the pairs are batched).
            seen.clear();
            let mut j = i;
            while j < pairs.len() && j - i < GROUP_PAIRS_MAX && seen.insert(key_hash(pairs[j].0)) {
                j += 1;
            }
            self.write_group(&mut g, &pairs[i..j])?;
            i = j;
        }
        self.finish(&mut g)
    }

    /// Write the records of `group` (distinct keys, strings) together ([`KvStore::write_batch`]).
    fn write_group(&self, g: &mut Inner, group: &[(&[u8], &[u8])]) -> Result<()> {
        for (k, _) in group {
            if g.zsets.contains_key(*k) {
                self.remove_zset(g, k)?;
            }
        }
        let mut puts = Vec::with_capacity(group.len());
        for &(key, value) in group {
            let h = key_hash(key);
            let found = self.locate_hashed(g, key, h, 0)?;
            puts.push(Put {
                key,
                kind: ValueKind::String,
                value,
                old: found.as_ref().map(|f| f.meta),
                node: found.and_then(|f| f.node),
                hash: h,
            });
        }
        self.write_batch(g, &puts)
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
        let put = Put {
            key,
            kind,
            value,
            old: found.as_ref().map(|f| f.meta),
            node: found.and_then(|f| f.node),
            hash: key_hash(key),
        };
        self.write_batch(g, &[put])
    }

    /// Lay `puts` out (see [`KvStore::write_batch`]): the place of each record, the open chunk's
    /// fill afterwards, the chunks of the new extent and the fill of its last chunk (`chunk` when
    /// no packed record may follow there).
    fn plan(
        &self,
        open_used: Option<usize>,
        puts: &[Put],
    ) -> (Vec<Place>, Option<usize>, u64, usize) {
        let cb = self.chunk() as usize;
        let mut open = open_used;
        let mut places = Vec::with_capacity(puts.len());
        let mut chunks = 0u64;
        let mut fill = cb;
        for p in puts {
            let n = record_bytes(p.key.len(), p.value.len());
            if n > cb {
                places.push(Place::Extent(chunks * cb as u64));
                chunks += n.div_ceil(cb) as u64;
                fill = cb;
                continue;
            }
            if let Some(u) = open.as_mut() {
                if *u + n <= cb {
                    places.push(Place::Open(*u));
                    *u += packed_bytes(n);
                    continue;
                }
            }
            if fill + n > cb {
                chunks += 1;
                fill = 0;
            }
            places.push(Place::Extent((chunks - 1) * cb as u64 + fill as u64));
            fill += packed_bytes(n);
        }
        (places, open, chunks, fill)
    }

    /// Write `puts` (distinct keys) out of place, point the table (and cache) at the new records
    /// and retire the ones they replace. Packed records go first into the open chunk while they
    /// fit (the chunk is rewritten whole: the records already in it are rewritten with the same
    /// bytes), the rest into a new extent of free chunks, one record after another, with one
    /// device write; a record larger than a chunk gets whole chunks of the extent. The extent's
    /// last chunk becomes the open chunk when it has room left. Without a free extent large
    /// enough the batch is split in halves.
    fn write_batch(&self, g: &mut Inner, puts: &[Put]) -> Result<()> {
        if puts.is_empty() {
            return Ok(());
        }
        let cb = self.chunk();
        let (places, open_used, chunks, fill) = self.plan(g.open.as_ref().map(|o| o.used), puts);
        let at = if chunks == 0 {
            0
        } else {
            match g.alloc.alloc(chunks) {
                Some(at) => at,
                None if puts.len() > 1 => {
                    let (a, b) = puts.split_at(puts.len() / 2);
                    self.write_batch(g, a)?;
                    return self.write_batch(g, b);
                }
                None => self.allocate(g, chunks)?,
            }
        };
        let open_chunk = g.open.as_ref().map_or(0, |o| o.chunk);
        let locs: Vec<u64> = places
            .iter()
            .map(|p| match *p {
                Place::Open(off) => open_chunk * cb + off as u64,
                Place::Extent(off) => at * cb + off,
            })
            .collect();
        // Point the table at each new record first, so a full table fails before anything is
        // written; undo by value (a cuckoo insertion may move other entries between slots).
        let mut pointed = 0;
        let mut failed = None;
        for (p, &loc) in puts.iter().zip(&locs) {
            let h = p.hash;
            if p.kind.is_tombstone() {
                // Not in the table: the caller removes the deleted record's entry.
                pointed += 1;
                continue;
            }
            match p.old {
                Some(old) => {
                    let s = slot_of(&g.table, h, old.loc);
                    g.table.set_value(s, loc);
                }
                None => {
                    if !g.table.insert(h, loc) {
                        failed = Some(KvError::NoSpace(format!(
                            "location table full at {} pairs (raise pairs_max)",
                            g.table.len()
                        )));
                        break;
                    }
                }
            }
            pointed += 1;
        }
        let written = match failed {
            Some(e) => Err(e),
            None => self.issue(g, puts, &places, at, chunks),
        };
        if let Err(e) = written {
            for (p, &loc) in puts[..pointed].iter().zip(&locs).rev() {
                if p.kind.is_tombstone() {
                    continue;
                }
                let s = slot_of(&g.table, p.hash, loc);
                match p.old {
                    Some(old) => g.table.set_value(s, old.loc),
                    None => g.table.remove(s),
                }
            }
            if chunks > 0 {
                g.alloc.free(at, chunks);
            }
            return Err(e);
        }
        g.dirty = true;
        if let (Some(o), Some(u)) = (g.open.as_mut(), open_used) {
            o.used = u;
        }
        for (i, (p, &loc)) in puts.iter().zip(&locs).enumerate() {
            let meta = Meta {
                kind: p.kind,
                loc,
                key_bytes: p.key.len() as u8,
                value_bytes: p.value.len() as u32,
            };
            if meta.bytes() as u64 <= cb {
                *g.packs.entry(loc / cb).or_insert(0) += 1;
            }
            let ns = p.kind.namespace() as usize;
            if p.kind.is_tombstone() {
                let t = Tomb {
                    loc,
                    bytes: meta.bytes(),
                    seq: g.seq - (puts.len() as u64) + i as u64,
                };
                g.stats.tombstones_written += 1;
                if let Some(old) = g.tombstones[ns].insert(p.key.to_vec(), t) {
                    retire_at(g, cb, old.loc, old.bytes);
                }
            } else if p.old.is_none() && !g.tombstones[ns].is_empty() {
                // The key is back: its new record outranks the tombstone, which has done its work.
                if let Some(t) = g.tombstones[ns].remove(p.key) {
                    retire_at(g, cb, t.loc, t.bytes);
                }
            }
            if !p.kind.is_tombstone() && ns == 0 {
                // The lookup's cache entry when it hit (no second directory lookup), else by key.
                let at = p.node.is_some_and(|n| g.cache.update_at(n, p.key, meta));
                if !at && !g.cache.update_hashed(p.key, p.hash, meta) {
                    g.cache.admit_hashed(p.key, p.hash, meta);
                }
            }
            if let Some(old) = p.old {
                self.retire(g, old);
            }
        }
        // The extent's last chunk, when it holds packed records and has room, is the new open chunk.
        if chunks > 0 && (cb as usize) - fill >= OPEN_ROOM_MIN_BYTES {
            let last = ((chunks - 1) * cb) as usize;
            let open = OpenChunk {
                chunk: at + chunks - 1,
                used: fill,
                buf: g.buf[last..last + cb as usize].to_vec(),
            };
            if let Some(old) = g.open.replace(open) {
                if g.packs.get(&old.chunk).copied().unwrap_or(0) == 0 {
                    g.retired.push((old.chunk * cb, 0));
                }
            }
        }
        Ok(())
    }

    /// Encode the planned records and write them: the open chunk (when records went there), then
    /// the new extent. On failure the open chunk's buffer is as before.
    fn issue(
        &self,
        g: &mut Inner,
        puts: &[Put],
        places: &[Place],
        at: u64,
        chunks: u64,
    ) -> Result<()> {
        let cb = self.chunk();
        let salt = self.sb.salt;
        let mut buf = std::mem::take(&mut g.buf);
        buf.clear();
        buf.resize((chunks * cb) as usize, 0);
        let mut open_from: Option<usize> = None;
        for (p, place) in puts.iter().zip(places) {
            let seq = g.seq;
            g.seq += 1;
            match *place {
                Place::Extent(off) => {
                    encode_record_into(&mut buf[off as usize..], salt, seq, p.kind, p.key, p.value)
                }
                Place::Open(off) => {
                    let o = g.open.as_mut().expect("planned into the open chunk");
                    encode_record_into(&mut o.buf[off..], salt, seq, p.kind, p.key, p.value);
                    open_from.get_or_insert(off);
                }
            }
        }
        let mut r = Ok(());
        if open_from.is_some() {
            let o = g.open.as_ref().expect("planned into the open chunk");
            r = self.dev.write_at(&o.buf, o.chunk * cb);
            g.stats.bytes_written += cb;
        }
        if r.is_ok() && chunks > 0 {
            r = self.dev.write_at(&buf, at * cb);
            g.stats.bytes_written += buf.len() as u64;
        }
        if r.is_err() {
            if let (Some(from), Some(o)) = (open_from, g.open.as_mut()) {
                // Past the old fill the chunk was zero.
                o.buf[from..].fill(0);
            }
        }
        g.buf = buf;
        r.map_err(KvError::from)
    }

    /// Mark a record dead: the next sync frees its space (a pack chunk once no live record is left
    /// in it).
    fn retire(&self, g: &mut Inner, m: Meta) {
        retire_at(g, self.chunk(), m.loc, m.bytes());
    }

    /// Forget a located record (DELETE): write its key's tombstone, then the table and cache drop
    /// the key and the record is retired. Enough live tombstones start a compaction.
    fn invalidate(&self, g: &mut Inner, key: &[u8], f: Found) -> Result<()> {
        let h = key_hash(key);
        let ns = f.meta.kind.namespace();
        let put = Put {
            key,
            kind: ValueKind::tombstone_of(ns),
            value: &[],
            old: Some(f.meta),
            node: None,
            hash: h,
        };
        // Writes the tombstone and retires the deleted record; nothing changes if it fails.
        self.write_batch(g, &[put])?;
        let s = slot_of(&g.table, h, f.meta.loc);
        g.table.remove(s);
        if ns == 0 {
            g.cache.remove(key);
        }
        let live = g.tombstones[0].len() + g.tombstones[1].len();
        if live > self.tombstones_max() {
            self.compact_locked(g)?;
        }
        Ok(())
    }

    /// Live tombstones that start a compaction ([`KvConfig::tombstones_max`]).
    fn tombstones_max(&self) -> usize {
        let chunks = (self.dev.capacity() / self.chunk()) as usize;
        self.cfg
            .tombstones_max
            .unwrap_or_else(|| TOMBSTONES_MIN.max(chunks / 8))
    }

    /// Compaction: make every live tombstone unnecessary, then free it. Sync; scan the device for
    /// the records that a live tombstone outranks (older records of deleted keys, stale since
    /// their space was freed without being overwritten); zero each of them where it lies (its
    /// chunk read, the record's bytes zeroed, the chunk written back: any live record in the chunk
    /// is rewritten with the bytes it has, so a torn rewrite leaves it intact); then retire the
    /// tombstones, whose space the closing sync frees only after flushing the zeroing. A crash
    /// before that flush leaves every tombstone on the device, so a record the zeroing missed
    /// stays outranked.
    pub fn compact(&self) -> Result<()> {
        let mut g = self.lock();
        self.compact_locked(&mut g)
    }

    fn compact_locked(&self, g: &mut Inner) -> Result<()> {
        if g.tombstones.iter().all(|t| t.is_empty()) {
            return Ok(());
        }
        self.sync_locked(g)?;
        let cb = self.chunk();
        let end = self.dev.capacity() / cb;
        let mut stale: BTreeMap<u64, Vec<(usize, usize)>> = BTreeMap::new();
        let mut found = 0u64;
        scan_records(&*self.dev, &self.sb, end, &mut |s| {
            let ns = s.kind.namespace() as usize;
            let Some(t) = g.tombstones[ns].get(&s.key) else {
                return;
            };
            if s.loc == t.loc {
                return;
            }
            debug_assert!(
                s.seq < t.seq,
                "a record newer than its key's live tombstone"
            );
            let off = (s.loc % cb) as usize;
            let n = s.bytes.min(cb as usize - off);
            stale.entry(s.loc / cb).or_default().push((off, n));
            found += 1;
        })?;
        let mut rmw = vec![0u8; cb as usize];
        for (&c, ranges) in &stale {
            let buf: &mut Vec<u8> = match g.open.as_mut() {
                Some(o) if o.chunk == c => &mut o.buf,
                _ => {
                    self.dev.read_at(&mut rmw, c * cb)?;
                    g.stats.bytes_read += cb;
                    &mut rmw
                }
            };
            for &(off, n) in ranges {
                buf[off..off + n].fill(0);
            }
            self.dev.write_at(buf, c * cb)?;
            g.stats.bytes_written += cb;
            g.dirty = true;
        }
        // Retired, the tombstones' space is reused only after the sync below has flushed the
        // zeroing writes.
        let tombs: Vec<Tomb> = g
            .tombstones
            .iter_mut()
            .flat_map(|t| t.drain().map(|(_, t)| t))
            .collect();
        for t in tombs {
            retire_at(g, cb, t.loc, t.bytes);
        }
        g.stats.compactions += 1;
        g.stats.compacted_records += found;
        self.sync_locked(g)
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
        let meta = f.meta;
        let chunk = meta.loc / self.chunk();
        let v = self.read_value(g, key, f)?;
        let fields = hash::decode(&v).map_err(|why| KvError::Corrupt { chunk, why })?;
        Ok(Some((
            fields,
            Found {
                meta,
                head: None,
                node: None,
            },
        )))
    }

    /// HSET / HMSET: set `pairs` in the hash at `key` (created if absent); the number of fields
    /// that are new. The whole hash is one record, rewritten out of place.
    pub fn hset(&self, key: &[u8], pairs: &[(&[u8], &[u8])]) -> Result<usize> {
        self.check_sizes(key, 0)?;
        let mut g = self.lock();
        g.stats.sets += 1;
        let (value, old, new) = self.hash_merge(&mut g, key, pairs)?;
        let put = Put {
            key,
            kind: ValueKind::Hash,
            value: &value,
            old,
            node: None,
            hash: key_hash(key),
        };
        self.write_batch(&mut g, &[put])?;
        self.finish(&mut g)?;
        Ok(new)
    }

    /// HSET of several hashes at once (the server merges the single HSETs of many connections):
    /// each item as [`KvStore::hset`], their new records written together (one device write when
    /// they fit the open chunk or one free extent). The outer error is a failed write or sync (no
    /// item is known durable); the inner results are per item (a key holding another kind gets
    /// WRONGTYPE, the other items still apply). A key repeated in `items` is applied in order.
    pub fn hset_many(&self, items: &[(&[u8], Vec<(&[u8], &[u8])>)]) -> Result<Vec<Result<usize>>> {
        let mut results: Vec<Result<usize>> = Vec::with_capacity(items.len());
        let mut g = self.lock();
        let mut i = 0;
        while i < items.len() {
            // A run of distinct keys.
            let mut seen = std::collections::HashSet::new();
            let mut j = i;
            while j < items.len() && j - i < GROUP_PAIRS_MAX && seen.insert(items[j].0) {
                j += 1;
            }
            let mut staged = Vec::with_capacity(j - i);
            for (key, pairs) in &items[i..j] {
                g.stats.sets += 1;
                let merged = self
                    .check_sizes(key, 0)
                    .and_then(|()| self.hash_merge(&mut g, key, pairs));
                match merged {
                    Ok((value, old, new)) => {
                        staged.push((*key, value, old));
                        results.push(Ok(new));
                    }
                    Err(e) => results.push(Err(e)),
                }
            }
            let puts: Vec<Put> = staged
                .iter()
                .map(|(key, value, old)| Put {
                    key,
                    kind: ValueKind::Hash,
                    value,
                    old: *old,
                    node: None,
                    hash: key_hash(key),
                })
                .collect();
            self.write_batch(&mut g, &puts)?;
            i = j;
        }
        self.finish(&mut g)?;
        Ok(results)
    }

    /// The hash at `key` with `pairs` set: its encoded value, its current record and how many
    /// fields are new.
    fn hash_merge(
        &self,
        g: &mut Inner,
        key: &[u8],
        pairs: &[(&[u8], &[u8])],
    ) -> Result<(Vec<u8>, Option<Meta>, usize)> {
        let (mut fields, found) = match self.hash_locked(g, key)? {
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
        Ok((value, found.map(|f| f.meta), new))
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
            // Retired records free their chunks once a sync has flushed what replaced them.
            self.sync_locked(g)?;
            if let Some(at) = g.alloc.alloc(chunks) {
                return Ok(at);
            }
        }
        if g.tombstones.iter().any(|t| !t.is_empty()) {
            // Tombstones hold chunks until a compaction frees them.
            self.compact_locked(g)?;
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

    /// Make every completed operation durable: flush, then free the space of the records retired
    /// since (their successors and tombstones are durable now).
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
        let cb = self.chunk();
        let open = g.open.as_ref().map(|o| o.chunk);
        for (loc, n) in std::mem::take(&mut g.retired) {
            let c = loc / cb;
            if n as u64 > cb {
                g.alloc.free(c, (n as u64).div_ceil(cb));
            } else if open != Some(c) && g.packs.get(&c) == Some(&0) {
                // A pack chunk without live records (each chunk once: its entry goes).
                g.packs.remove(&c);
                g.alloc.free(c, 1);
            }
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
        s.tombstones = (g.tombstones[0].len() + g.tombstones[1].len()) as u64;
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

/// Mark the record at `loc` (`bytes` bytes; chunks of `cb` bytes) dead: the next sync frees its
/// space (a pack chunk once no live record is left in it).
fn retire_at(g: &mut Inner, cb: u64, loc: u64, bytes: usize) {
    if bytes as u64 <= cb {
        let live = g
            .packs
            .get_mut(&(loc / cb))
            .expect("a packed record's chunk is a pack chunk");
        assert!(*live > 0, "a pack chunk with a live record counts it");
        *live -= 1;
    }
    g.retired.push((loc, bytes));
}

/// A valid record found by the scan.
struct Scanned {
    kind: ValueKind,
    key: Vec<u8>,
    /// The value, kept for sorted-set members only (their score).
    value: Vec<u8>,
    seq: u64,
    /// Byte address and bytes of the record.
    loc: u64,
    bytes: usize,
}

#[derive(Default)]
struct Scan {
    /// The record with the highest sequence number per key (and namespace), tombstones included.
    winners: Vec<Scanned>,
    /// Superseded records (byte address, bytes).
    losers: Vec<(u64, usize)>,
    /// The keys (namespace, key) with more than one record.
    contested: HashSet<(u8, Vec<u8>)>,
    seq_max: u64,
}

impl Scan {
    /// Keep the record with the highest sequence number per key (and namespace).
    fn consider(&mut self, best: &mut HashMap<(u8, Vec<u8>), Scanned>, s: Scanned) {
        self.seq_max = self.seq_max.max(s.seq);
        let id = (s.kind.namespace(), s.key.clone());
        match best.get_mut(&id) {
            Some(old) => {
                if old.seq >= s.seq {
                    self.losers.push((s.loc, s.bytes));
                } else {
                    self.losers.push((old.loc, old.bytes));
                    *old = s;
                }
                self.contested.insert(id);
            }
            None => {
                best.insert(id, s);
            }
        }
    }

    /// Scan the device's records (`end`: its chunks) and keep the highest sequence number per key.
    fn run(dev: &dyn BlockDevice, sb: &Superblock, end: u64) -> Result<Scan> {
        let mut best: HashMap<(u8, Vec<u8>), Scanned> = HashMap::new();
        let mut scan = Scan::default();
        scan_records(dev, sb, end, &mut |s| scan.consider(&mut best, s))?;
        scan.winners = best.into_values().collect();
        scan.winners.sort_unstable_by_key(|w| w.loc);
        Ok(scan)
    }
}

/// A record read from `rec` (verified) as the scan keeps it.
fn scanned(h: &RecordHeader, rec: &[u8], loc: u64) -> Scanned {
    let key_end = HEADER_BYTES + h.key_bytes as usize;
    Scanned {
        kind: h.kind,
        key: rec[HEADER_BYTES..key_end].to_vec(),
        value: match h.kind {
            ValueKind::ZsetMember => rec[key_end..].to_vec(),
            _ => Vec::new(),
        },
        seq: h.seq,
        loc,
        bytes: rec.len(),
    }
}

/// Read the device in large windows and pass every record that passes its checksum to `visit`:
/// in each chunk, at every multiple of [`RECORD_ALIGN`] (after a valid record, from its end on), a
/// packed record inside the chunk, or at the chunk's start a large record (its chunks are then
/// skipped).
fn scan_records(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    end: u64,
    visit: &mut dyn FnMut(Scanned),
) -> Result<()> {
    let chunk = u64::from(sb.chunk_bytes);
    let cb = chunk as usize;
    let window_chunks = ((4u64 << 20) / chunk).max(1);
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
        let base = ((c - win_start) * chunk) as usize;
        let mut next = c + 1;
        let mut off = 0;
        while off + HEADER_BYTES <= cb {
            let p = base + off;
            let Some(h) = (win[p..p + 4] == RECORD_MAGIC)
                .then(|| RecordHeader::decode(&win[p..]))
                .flatten()
            else {
                off += RECORD_ALIGN;
                continue;
            };
            let n = usize::try_from(h.record_bytes()).unwrap_or(usize::MAX);
            if n <= cb {
                match (off + n <= cb).then(|| &win[p..p + n]) {
                    Some(rec) if verify_record(rec, sb.salt).is_some() => {
                        visit(scanned(&h, rec, c * chunk + off as u64));
                        off += packed_bytes(n);
                    }
                    _ => off += RECORD_ALIGN,
                }
                continue;
            }
            // A large record starts a chunk and owns its chunks.
            let chunks = (n as u64).div_ceil(chunk);
            if off != 0 || c + chunks > end {
                off += RECORD_ALIGN;
                continue;
            }
            let own;
            let rec: &[u8] = if p + n <= win.len() {
                &win[p..p + n]
            } else {
                let mut b = vec![0u8; n];
                dev.read_at(&mut b, c * chunk)?;
                own = b;
                &own
            };
            if verify_record(rec, sb.salt).is_none() {
                off += RECORD_ALIGN;
                continue;
            }
            visit(scanned(&h, rec, c * chunk));
            next = c + chunks;
            break;
        }
        c = next;
    }
    Ok(())
}

/// The table slot holding `loc` for a key with hash `h` (the caller knows it is there).
fn slot_of(table: &CuckooTable, h: u64, loc: u64) -> usize {
    table
        .slot_of_value(h, loc)
        .expect("the location table points at this record")
}
