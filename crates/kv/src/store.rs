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

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use ecstack_device::BlockDevice;
use serde::Serialize;

use crate::alloc::Alloc;
use crate::arc::{ArcCache, Lookup};
use crate::cuckoo::{key_hash, CuckooTable};
use crate::record::{
    encode_record, record_chunks, verify_record, RecordHeader, Superblock, HEADER_BYTES,
    KEY_BYTES_MAX, SUPERBLOCK_BYTES,
};
use crate::{KvError, Result};

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

    /// Find `key`: through the cache, else through the location table, reading the first chunk of
    /// each candidate record to compare keys.
    fn locate(&self, g: &mut Inner, key: &[u8]) -> Result<Option<Found>> {
        let h = key_hash(key);
        if g.cache.capacity() > 0 {
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
            if &head[HEADER_BYTES..HEADER_BYTES + kb] == key {
                let meta = Meta {
                    chunk: c,
                    key_bytes: hdr.key_bytes,
                    value_bytes: hdr.value_bytes,
                };
                g.cache.admit(key, meta);
                return Ok(Some(Found {
                    slot,
                    meta,
                    head: Some(head),
                }));
            }
        }
        Ok(None)
    }

    /// GET: the value of `key`, checked against its record checksum.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Ok(None);
        }
        let mut g = self.lock();
        g.stats.gets += 1;
        let Some(f) = self.locate(&mut g, key)? else {
            return Ok(None);
        };
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
        if &rec[HEADER_BYTES..start] != key {
            return Err(KvError::Corrupt {
                chunk: f.meta.chunk,
                why: "record holds another key".into(),
            });
        }
        Ok(Some(rec[start..start + hdr.value_bytes as usize].to_vec()))
    }

    /// EXISTS.
    pub fn exists(&self, key: &[u8]) -> Result<bool> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Ok(false);
        }
        let mut g = self.lock();
        Ok(self.locate(&mut g, key)?.is_some())
    }

    /// SET: insert or replace. Durable on return under [`Durability::Always`].
    pub fn set(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.set_if(key, value, SetCondition::Always).map(|_| ())
    }

    /// UPDATE (the seed's third operation): replace the value of an existing pair; false if absent.
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.set_if(key, value, SetCondition::IfPresent)
    }

    /// SET with a condition on the key's presence; returns whether the value was written.
    pub fn set_if(&self, key: &[u8], value: &[u8], cond: SetCondition) -> Result<bool> {
        self.check_sizes(key, value.len())?;
        let mut g = self.lock();
        g.stats.sets += 1;
        let found = self.locate(&mut g, key)?;
        match (cond, &found) {
            (SetCondition::IfAbsent, Some(_)) | (SetCondition::IfPresent, None) => {
                return Ok(false)
            }
            _ => {}
        }
        let chunk = self.chunk();
        let chunks = record_chunks(key.len(), value.len(), chunk as usize);
        let at = self.allocate(&mut g, chunks)?;
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
        encode_record(&mut buf, self.sb.salt, seq, key, value, chunk as usize);
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
            chunk: at,
            key_bytes: key.len() as u8,
            value_bytes: value.len() as u32,
        };
        if !g.cache.update(key, meta) {
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
        if self.cfg.durability == Durability::Always {
            self.sync_locked(&mut g)?;
        }
        Ok(true)
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

    /// DELETE: remove `key`; false if absent. Durable on return under [`Durability::Always`].
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        if key.is_empty() || key.len() > KEY_BYTES_MAX {
            return Ok(false);
        }
        let mut g = self.lock();
        g.stats.deletes += 1;
        let Some(f) = self.locate(&mut g, key)? else {
            return Ok(false);
        };
        let chunk = self.chunk();
        let zeros = vec![0u8; chunk as usize];
        self.dev.write_at(&zeros, f.meta.chunk * chunk)?;
        g.stats.invalidations += 1;
        g.stats.bytes_written += chunk;
        g.dirty = true;
        g.table.remove(f.slot);
        g.cache.remove(key);
        let chunks = record_chunks(
            f.meta.key_bytes as usize,
            f.meta.value_bytes as usize,
            chunk as usize,
        );
        g.alloc.free(f.meta.chunk, chunks);
        if self.cfg.durability == Durability::Always {
            self.sync_locked(&mut g)?;
        }
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
        let zeros = vec![0u8; chunk as usize];
        let retired = std::mem::take(&mut g.retired);
        for (i, &(c, _)) in retired.iter().enumerate() {
            if let Err(e) = self.dev.write_at(&zeros, c * chunk) {
                g.retired.extend_from_slice(&retired[i..]);
                return Err(e.into());
            }
        }
        g.stats.invalidations += retired.len() as u64;
        g.stats.bytes_written += chunk * retired.len() as u64;
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

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.lock().table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn stats(&self) -> KvStats {
        let g = self.lock();
        let mut s = g.stats.clone();
        s.pairs = g.table.len() as u64;
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
    key: Vec<u8>,
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
    let mut best: HashMap<Vec<u8>, Scanned> = HashMap::new();
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
        let key = rec[HEADER_BYTES..HEADER_BYTES + h.key_bytes as usize].to_vec();
        seq_max = seq_max.max(h.seq);
        let s = Scanned {
            key,
            seq: h.seq,
            chunk: c,
            chunks,
        };
        match best.get_mut(&s.key) {
            Some(old) if old.seq >= s.seq => losers.push((s.chunk, s.chunks)),
            Some(old) => {
                losers.push((old.chunk, old.chunks));
                *old = s;
            }
            None => {
                best.insert(s.key.clone(), s);
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
