//! The [`MetadataStore`] of every SQL engine, written once: [`SqlStore`] turns reads into queries
//! and each [`Mutation`] into statements, and a [`Db`] (SQLite: [`crate::store::SqliteDb`];
//! PostgreSQL: [`crate::store_pg::PgDb`]) runs them. The SQL is the dialect both engines speak
//! (`INSERT … ON CONFLICT … DO UPDATE`, `CAST(… AS BIGINT)`, `CASE`, `TRUE`); parameters are
//! written `?1`, `?2`, … (PostgreSQL's `$1` is made from them). Every integer column is a 64-bit
//! integer on both engines, so one set of conversions reads both.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use rusqlite::types::Value;

use ecstack_mds_proto::{ChunkState, FileKind, OsdState, RecoveryProgress, UpdateScheme};

use crate::store::*;

/// One row of a query result, one value per column.
pub type Row = Vec<Value>;

/// A statement of a batch: SQL with `?N` parameters and their values.
#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub sql: &'static str,
    pub args: Vec<Value>,
}

/// A SQL engine under [`SqlStore`].
pub trait Db: Send {
    /// Runs `stmts` in one transaction: all or nothing, durable when it returns.
    fn transact(&mut self, stmts: &[Stmt]) -> Result<(), StoreError>;
    /// The rows of one query.
    fn query(&self, sql: &str, args: &[Value]) -> Result<Vec<Row>, StoreError>;
    /// The database file an online backup copies, by a read-only connection of its own beside
    /// this one (`crate::backup::snapshot_sqlite`); an engine backed up otherwise refuses, saying
    /// how.
    fn backup_source(&self) -> Result<std::path::PathBuf, StoreError>;
}

/// The metadata store over the SQL engine `D`.
pub struct SqlStore<D> {
    pub(crate) db: D,
    /// [`MetadataStore::osd_loads`] as last computed, kept current by `apply`.
    pub(crate) loads: LoadCache,
    /// Inodes and counters as last read or written.
    pub(crate) rows: RowCache,
}

/// Most inodes, and most directory entries, [`RowCache`] holds; past it, it starts again empty.
const ROW_CACHE_MAX: usize = 65_536;

/// Inodes, directory entries and counters as last read or written by this handle. The namespace
/// reads them again and again (a create reads its parent's inode three times, its name and two
/// counters; a stat reads a name), and each read of a store a round trip away (PostgreSQL)
/// costs as much as a statement of its batch. Valid while
/// this handle is the store's only writer, as the store's lock or lease fence makes it (like
/// [`LoadCache`]): a batch puts what it writes, any other statement writing those tables or a
/// failed batch empties it. Off ([`RowCache::off`]) for a handle beside another's.
#[derive(Debug)]
pub struct RowCache {
    on: bool,
    inodes: RefCell<HashMap<u64, Option<InodeRecord>>>,
    /// The inode each (directory, name) names, or none.
    entries: RefCell<HashMap<(u64, Vec<u8>), Option<u64>>>,
    counters: RefCell<HashMap<String, u64>>,
}

impl RowCache {
    /// A cache for the store's only writer.
    pub fn new() -> RowCache {
        RowCache {
            on: true,
            inodes: RefCell::default(),
            entries: RefCell::default(),
            counters: RefCell::default(),
        }
    }

    /// No cache: every read goes to the database (a handle reading what another one writes).
    pub fn off() -> RowCache {
        RowCache {
            on: false,
            ..RowCache::new()
        }
    }

    fn inode(&self, ino: u64) -> Option<Option<InodeRecord>> {
        self.inodes.borrow().get(&ino).cloned()
    }

    fn keep_inode(&self, ino: u64, i: Option<InodeRecord>) {
        if !self.on {
            return;
        }
        let mut map = self.inodes.borrow_mut();
        if map.len() >= ROW_CACHE_MAX && !map.contains_key(&ino) {
            map.clear();
        }
        map.insert(ino, i);
    }

    fn entry(&self, parent: u64, name: &[u8]) -> Option<Option<u64>> {
        self.entries.borrow().get(&(parent, name.to_vec())).copied()
    }

    fn keep_entry(&self, parent: u64, name: &[u8], ino: Option<u64>) {
        if !self.on {
            return;
        }
        let mut map = self.entries.borrow_mut();
        if map.len() >= ROW_CACHE_MAX {
            map.clear();
        }
        map.insert((parent, name.to_vec()), ino);
    }

    fn counter(&self, name: &str) -> Option<u64> {
        self.counters.borrow().get(name).copied()
    }

    fn keep_counter(&self, name: &str, value: u64) {
        if self.on {
            self.counters.borrow_mut().insert(name.to_owned(), value);
        }
    }

    /// Forgets everything (the tables were written around it, e.g. by a migration).
    pub(crate) fn clear(&self) {
        self.inodes.borrow_mut().clear();
        self.entries.borrow_mut().clear();
        self.counters.borrow_mut().clear();
    }

    /// What the committed `batch` (whose statements were `stmts`, `spans[i]` those of
    /// `batch[i]`) leaves in the tables this cache follows.
    fn committed(&self, batch: &[Mutation], stmts: &[Stmt], spans: &[std::ops::Range<usize>]) {
        for (m, span) in batch.iter().zip(spans) {
            match m {
                Mutation::PutInode(i) => self.keep_inode(i.ino, Some(i.clone())),
                Mutation::DeleteInode(ino) => self.keep_inode(*ino, None),
                Mutation::SetCounter { name, value } => self.keep_counter(name, *value),
                Mutation::PutDentry { parent, name, ino } => {
                    self.keep_entry(*parent, name, Some(*ino))
                }
                Mutation::DeleteDentry { parent, name } => self.keep_entry(*parent, name, None),
                _ => {
                    let writes =
                        |table: &str| stmts[span.clone()].iter().any(|s| s.sql.contains(table));
                    if writes("inodes") {
                        self.inodes.borrow_mut().clear();
                    }
                    if writes("dentries") {
                        self.entries.borrow_mut().clear();
                    }
                    if writes("counters") {
                        self.counters.borrow_mut().clear();
                    }
                }
            }
        }
    }
}

/// Most segments one batch may touch for [`LoadCache`] to follow it; a batch touching more (a
/// big file's removal) drops the cache instead, and the next placement counts afresh.
const LOAD_CACHE_SEGMENTS_MAX: usize = 256;

/// The per-OSD loads placement reads before each new segment. Counted from the chunk table they
/// cost a scan of every chunk (a create through the mount slowed down with the number of files
/// already stored: 1.6 ms at 1,600 segments, 16 ms at 3,100). So the store keeps the last count
/// and each batch corrects it by what it changed: the touched segments' share of the loads is
/// taken before and after the transaction (a few indexed reads). Valid while this handle is the
/// store's only writer, as the store's lock makes it.
#[derive(Debug, Default)]
pub struct LoadCache(std::cell::RefCell<Option<CachedLoads>>);

#[derive(Debug)]
pub(crate) struct CachedLoads {
    k: u32,
    align_bytes: u64,
    loads: BTreeMap<u32, OsdLoad>,
}

impl LoadCache {
    fn key(&self) -> Option<(u32, u64)> {
        self.0.borrow().as_ref().map(|c| (c.k, c.align_bytes))
    }

    fn drop_all(&self) {
        *self.0.borrow_mut() = None;
    }

    /// Moves the cached loads from `before` to `after` (the touched segments' shares); drops the
    /// cache if that would take a count below zero (it was not what the store holds).
    fn correct(&self, before: &BTreeMap<u32, OsdLoad>, after: &BTreeMap<u32, OsdLoad>) {
        let mut slot = self.0.borrow_mut();
        let Some(c) = slot.as_mut() else { return };
        for (osd, a) in after {
            let l = c.loads.entry(*osd).or_default();
            l.chunks += a.chunks;
            l.bytes += a.bytes;
            l.data_bytes += a.data_bytes;
            l.primaries += a.primaries;
        }
        for (osd, b) in before {
            let Some(l) = c.loads.get_mut(osd) else {
                *slot = None;
                return;
            };
            match (
                l.chunks.checked_sub(b.chunks),
                l.bytes.checked_sub(b.bytes),
                l.data_bytes.checked_sub(b.data_bytes),
                l.primaries.checked_sub(b.primaries),
            ) {
                (Some(chunks), Some(bytes), Some(data_bytes), Some(primaries)) => {
                    *l = OsdLoad {
                        chunks,
                        bytes,
                        data_bytes,
                        primaries,
                    }
                }
                _ => {
                    *slot = None;
                    return;
                }
            }
        }
        c.loads.retain(|_, l| *l != OsdLoad::default());
    }
}

pub(crate) fn v(x: u64) -> Value {
    Value::Integer(int(x))
}

pub(crate) fn v32(x: u32) -> Value {
    Value::Integer(i64::from(x))
}

pub(crate) fn stmt(sql: &'static str, args: Vec<Value>) -> Stmt {
    Stmt { sql, args }
}

pub(crate) fn osd_state_code(s: OsdState) -> i64 {
    match s {
        OsdState::Up => 1,
        OsdState::Down => 2,
        OsdState::Out => 3,
    }
}

fn osd_state_of(v: i64) -> Result<OsdState, StoreError> {
    match v {
        1 => Ok(OsdState::Up),
        2 => Ok(OsdState::Down),
        3 => Ok(OsdState::Out),
        _ => Err(StoreError::Corrupt(format!("OSD state {v}"))),
    }
}

pub(crate) fn chunk_state_code(s: ChunkState) -> i64 {
    match s {
        ChunkState::Healthy => 1,
        ChunkState::Stale => 2,
        ChunkState::Recovering => 3,
        ChunkState::Lost => 4,
    }
}

fn chunk_state_of(v: i64) -> Result<ChunkState, StoreError> {
    match v {
        1 => Ok(ChunkState::Healthy),
        2 => Ok(ChunkState::Stale),
        3 => Ok(ChunkState::Recovering),
        4 => Ok(ChunkState::Lost),
        _ => Err(StoreError::Corrupt(format!("chunk state {v}"))),
    }
}

fn scheme_of(v: i64) -> Result<UpdateScheme, StoreError> {
    u32::try_from(v)
        .map_err(|_| format!("unknown update scheme number {v}"))
        .and_then(UpdateScheme::from_code)
        .map_err(|e| StoreError::Corrupt(format!("file {e}")))
}

// SQL integers are i64; every u64 we store (ids, sizes, unix ms) is below 2^63.
pub(crate) fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn uint(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("negative value {v}")))
}

fn uint32(v: i64) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("value {v} out of u32 range")))
}

fn bad(i: usize, want: &str, found: Option<&Value>) -> StoreError {
    StoreError::Corrupt(format!("column {i}: expected {want}, found {found:?}"))
}

fn opt_i(r: &[Value], i: usize) -> Result<Option<i64>, StoreError> {
    match r.get(i) {
        Some(Value::Integer(x)) => Ok(Some(*x)),
        Some(Value::Null) => Ok(None),
        other => Err(bad(i, "an integer", other)),
    }
}

pub(crate) fn get_i(r: &[Value], i: usize) -> Result<i64, StoreError> {
    opt_i(r, i)?.ok_or_else(|| bad(i, "an integer", Some(&Value::Null)))
}

pub(crate) fn get_u(r: &[Value], i: usize) -> Result<u64, StoreError> {
    uint(get_i(r, i)?)
}

pub(crate) fn get_u32(r: &[Value], i: usize) -> Result<u32, StoreError> {
    uint32(get_i(r, i)?)
}

pub(crate) fn get_text(r: &[Value], i: usize) -> Result<String, StoreError> {
    match r.get(i) {
        Some(Value::Text(s)) => Ok(s.clone()),
        other => Err(bad(i, "text", other)),
    }
}

fn opt_blob(r: &[Value], i: usize) -> Result<Option<Vec<u8>>, StoreError> {
    match r.get(i) {
        Some(Value::Blob(b)) => Ok(Some(b.clone())),
        Some(Value::Null) => Ok(None),
        other => Err(bad(i, "bytes", other)),
    }
}

fn get_blob(r: &[Value], i: usize) -> Result<Vec<u8>, StoreError> {
    opt_blob(r, i)?.ok_or_else(|| bad(i, "bytes", Some(&Value::Null)))
}

/// The columns of an inode, in [`inode_of`]'s order (table alias `i`).
const INODE_COLUMNS: &str = "i.ino, i.kind, i.mode, i.uid, i.gid, i.nlink, i.size, i.rdev, \
    i.atime_ns, i.mtime_ns, i.ctime_ns, i.version, i.file_id, i.target";

fn inode_of(r: &[Value]) -> Result<InodeRecord, StoreError> {
    let ino = get_u(r, 0)?;
    let kind = get_u32(r, 1)?;
    Ok(InodeRecord {
        ino,
        kind: FileKind::from_code(kind)
            .ok_or_else(|| StoreError::Corrupt(format!("inode {ino} has kind {kind}")))?,
        mode: get_u32(r, 2)?,
        uid: get_u32(r, 3)?,
        gid: get_u32(r, 4)?,
        nlink: get_u32(r, 5)?,
        size: get_u(r, 6)?,
        rdev: get_u32(r, 7)?,
        atime_ns: get_u(r, 8)?,
        mtime_ns: get_u(r, 9)?,
        ctime_ns: get_u(r, 10)?,
        version: get_u(r, 11)?,
        file_id: opt_i(r, 12)?.map(uint).transpose()?,
        target: opt_blob(r, 13)?,
    })
}

/// Insert or replace an inode (also run by the SQLite migration to version 3).
pub(crate) fn put_inode_stmt(i: &InodeRecord) -> Stmt {
    stmt(
        "INSERT INTO inodes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
         ON CONFLICT(ino) DO UPDATE SET kind = excluded.kind, mode = excluded.mode,
         uid = excluded.uid, gid = excluded.gid, nlink = excluded.nlink, size = excluded.size,
         rdev = excluded.rdev, atime_ns = excluded.atime_ns, mtime_ns = excluded.mtime_ns,
         ctime_ns = excluded.ctime_ns, version = excluded.version, file_id = excluded.file_id,
         target = excluded.target",
        vec![
            v(i.ino),
            v32(i.kind.code()),
            v32(i.mode),
            v32(i.uid),
            v32(i.gid),
            v32(i.nlink),
            v(i.size),
            v32(i.rdev),
            v(i.atime_ns),
            v(i.mtime_ns),
            v(i.ctime_ns),
            v(i.version),
            i.file_id.map_or(Value::Null, v),
            i.target.clone().map_or(Value::Null, Value::Blob),
        ],
    )
}

/// Set a counter (also run by the SQLite migration to version 3).
pub(crate) fn set_counter_stmt(name: &str, value: u64) -> Stmt {
    stmt(
        "INSERT INTO counters VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
        vec![Value::Text(name.to_owned()), v(value)],
    )
}

/// The statements of one mutation, in order.
fn statements(m: &Mutation, out: &mut Vec<Stmt>) {
    match m {
        Mutation::SetCounter { name, value } => out.push(set_counter_stmt(name, *value)),
        Mutation::PutOsd(o) => {
            out.push(stmt(
                "INSERT INTO osds VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(osd_id) DO UPDATE SET
                 name = excluded.name, addr = excluded.addr, capacity_bytes = excluded.capacity_bytes,
                 used_bytes = excluded.used_bytes, state = excluded.state,
                 last_heartbeat_ms = excluded.last_heartbeat_ms",
                vec![
                    v32(o.osd_id),
                    Value::Text(o.name.clone()),
                    Value::Text(o.addr.clone()),
                    v(o.capacity_bytes),
                    v(o.used_bytes),
                    Value::Integer(osd_state_code(o.state)),
                    v(o.last_heartbeat_ms),
                ],
            ));
            out.push(stmt(
                "DELETE FROM osd_labels WHERE osd_id = ?1",
                vec![v32(o.osd_id)],
            ));
            for (k, val) in &o.labels {
                out.push(stmt(
                    "INSERT INTO osd_labels VALUES (?1, ?2, ?3)",
                    vec![v32(o.osd_id), Value::Text(k.clone()), Value::Text(val.clone())],
                ));
            }
        }
        Mutation::PutFile(f) => out.push(stmt(
            "INSERT INTO files (file_id, path, size, mtime_ms, committed, update_scheme)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(file_id) DO UPDATE SET
             path = excluded.path, size = excluded.size, mtime_ms = excluded.mtime_ms,
             committed = excluded.committed, update_scheme = excluded.update_scheme",
            vec![
                v(f.file_id),
                Value::Text(f.path.clone()),
                v(f.size),
                v(f.mtime_ms),
                Value::Integer(f.committed as i64),
                v32(f.scheme.code()),
            ],
        )),
        Mutation::DeleteEmptyFile(id) => {
            out.push(stmt(
                "DELETE FROM robust_files WHERE file_id = ?1",
                vec![v(*id)],
            ));
            out.push(stmt("DELETE FROM files WHERE file_id = ?1", vec![v(*id)]));
        }
        Mutation::DeleteFile(id) => {
            crate::store_robust::delete_file_statements(*id, out);
            out.push(stmt(
                "DELETE FROM chunks WHERE segment_id IN (SELECT segment_id FROM segments WHERE file_id = ?1)",
                vec![v(*id)],
            ));
            out.push(stmt("DELETE FROM segments WHERE file_id = ?1", vec![v(*id)]));
            out.push(stmt("DELETE FROM files WHERE file_id = ?1", vec![v(*id)]));
        }
        Mutation::PutInode(i) => out.push(put_inode_stmt(i)),
        Mutation::DeleteInode(ino) => {
            out.push(stmt("DELETE FROM xattrs WHERE ino = ?1", vec![v(*ino)]));
            out.push(stmt("DELETE FROM inodes WHERE ino = ?1", vec![v(*ino)]));
        }
        Mutation::PutDentry { parent, name, ino } => out.push(stmt(
            "INSERT INTO dentries VALUES (?1, ?2, ?3)",
            vec![v(*parent), Value::Blob(name.clone()), v(*ino)],
        )),
        Mutation::DeleteDentry { parent, name } => out.push(stmt(
            "DELETE FROM dentries WHERE parent = ?1 AND name = ?2",
            vec![v(*parent), Value::Blob(name.clone())],
        )),
        Mutation::PutXattr { ino, name, value } => out.push(stmt(
            "INSERT INTO xattrs VALUES (?1, ?2, ?3) ON CONFLICT(ino, name) DO UPDATE SET value = excluded.value",
            vec![v(*ino), Value::Blob(name.clone()), Value::Blob(value.clone())],
        )),
        Mutation::DeleteXattr { ino, name } => out.push(stmt(
            "DELETE FROM xattrs WHERE ino = ?1 AND name = ?2",
            vec![v(*ino), Value::Blob(name.clone())],
        )),
        Mutation::DeleteSegment(id) => {
            out.push(stmt("DELETE FROM chunks WHERE segment_id = ?1", vec![v(*id)]));
            out.push(stmt("DELETE FROM segments WHERE segment_id = ?1", vec![v(*id)]));
        }
        Mutation::PutSegment(s) => out.push(stmt(
            "INSERT INTO segments VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(segment_id) DO UPDATE SET
             file_id = excluded.file_id, seg_index = excluded.seg_index, length = excluded.length,
             primary_osd = excluded.primary_osd, epoch = excluded.epoch, version = excluded.version",
            vec![
                v(s.segment_id),
                v(s.file_id),
                v32(s.index),
                v(s.length),
                v32(s.primary),
                v(s.epoch),
                v(s.version),
            ],
        )),
        Mutation::PutChunk(c) => out.push(stmt(
            "INSERT INTO chunks VALUES (?1, ?2, ?3, ?4) ON CONFLICT(segment_id, chunk_index) DO UPDATE SET
             osd_id = excluded.osd_id, state = excluded.state",
            vec![
                v(c.segment_id),
                v32(c.index),
                c.osd_id.map_or(Value::Null, v32),
                Value::Integer(chunk_state_code(c.state)),
            ],
        )),
        Mutation::PutDelete(d) => out.push(stmt(
            "INSERT INTO delete_tasks VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            vec![v32(d.osd_id), v(d.segment_id), v32(d.chunk)],
        )),
        Mutation::RemoveDeletes { osd_id, segment_id } => out.push(stmt(
            "DELETE FROM delete_tasks WHERE osd_id = ?1 AND segment_id = ?2",
            vec![v32(*osd_id), v(*segment_id)],
        )),
        Mutation::Robust(r) => crate::store_robust::statements(r, out),
        Mutation::SetRecovery(r) => out.push(stmt(
            "UPDATE recovery SET chunks_total = ?1, chunks_done = ?2, bytes_done = ?3,
             started_ms = ?4, finished_ms = ?5 WHERE id = 0",
            vec![
                v(r.chunks_total),
                v(r.chunks_done),
                v(r.bytes_done),
                v(r.started_ms),
                v(r.finished_ms),
            ],
        )),
    }
}

impl<D: Db> SqlStore<D> {
    fn one(&self, sql: &str, args: &[Value]) -> Result<Option<Row>, StoreError> {
        Ok(self.db.query(sql, args)?.into_iter().next())
    }

    fn count(&self, sql: &str, args: &[Value]) -> Result<u64, StoreError> {
        match self.one(sql, args)? {
            Some(r) => get_u(&r, 0),
            None => Err(StoreError::Corrupt(format!("no row from {sql}"))),
        }
    }

    fn files_where(&self, cond: &str, args: &[Value]) -> Result<Vec<FileRecord>, StoreError> {
        let sql = format!(
            "SELECT file_id, path, size, mtime_ms, committed, update_scheme FROM files WHERE {cond} ORDER BY file_id"
        );
        self.db
            .query(&sql, args)?
            .iter()
            .map(|r| {
                Ok(FileRecord {
                    file_id: get_u(r, 0)?,
                    path: get_text(r, 1)?,
                    size: get_u(r, 2)?,
                    mtime_ms: get_u(r, 3)?,
                    committed: get_i(r, 4)? != 0,
                    scheme: scheme_of(get_i(r, 5)?)?,
                })
            })
            .collect()
    }

    fn segments_where(&self, cond: &str, arg: Value) -> Result<Vec<SegmentRecord>, StoreError> {
        let sql = format!(
            "SELECT segment_id, file_id, seg_index, length, primary_osd, epoch, version FROM segments WHERE {cond} ORDER BY file_id, seg_index"
        );
        self.db
            .query(&sql, &[arg])?
            .iter()
            .map(|r| {
                Ok(SegmentRecord {
                    segment_id: get_u(r, 0)?,
                    file_id: get_u(r, 1)?,
                    index: get_u32(r, 2)?,
                    length: get_u(r, 3)?,
                    primary: get_u32(r, 4)?,
                    epoch: get_u(r, 5)?,
                    version: get_u(r, 6)?,
                })
            })
            .collect()
    }

    fn chunks_where(&self, cond: &str, args: &[Value]) -> Result<Vec<ChunkRecord>, StoreError> {
        let sql = format!(
            "SELECT segment_id, chunk_index, osd_id, state FROM chunks WHERE {cond} ORDER BY segment_id, chunk_index"
        );
        self.db
            .query(&sql, args)?
            .iter()
            .map(|r| {
                Ok(ChunkRecord {
                    segment_id: get_u(r, 0)?,
                    index: get_u32(r, 1)?,
                    osd_id: opt_i(r, 2)?.map(uint32).transpose()?,
                    state: chunk_state_of(get_i(r, 3)?)?,
                })
            })
            .collect()
    }

    fn inodes(&self, sql: &str, args: &[Value]) -> Result<Option<InodeRecord>, StoreError> {
        self.one(sql, args)?.map(|r| inode_of(&r)).transpose()
    }

    /// The loads counted from the chunk and segment tables (a scan of both).
    fn count_loads(&self, k: u32, align_bytes: u64) -> Result<BTreeMap<u32, OsdLoad>, StoreError> {
        let mut loads: BTreeMap<u32, OsdLoad> = BTreeMap::new();
        // Counted per segment length, sized in Rust: the chunk size has one definition.
        for r in self.db.query(
            "SELECT c.osd_id, s.length, CASE WHEN c.chunk_index < ?1 THEN 1 ELSE 0 END AS data, COUNT(*)
             FROM chunks c JOIN segments s ON s.segment_id = c.segment_id
             WHERE c.osd_id IS NOT NULL GROUP BY c.osd_id, s.length, data",
            &[v32(k)],
        )? {
            let l = loads.entry(get_u32(&r, 0)?).or_default();
            let count = get_u(&r, 3)?;
            let bytes =
                count * ecstack_mds_proto::chunk_bytes(get_u(&r, 1)?, k as usize, align_bytes);
            l.chunks += count;
            l.bytes += bytes;
            if get_i(&r, 2)? != 0 {
                l.data_bytes += bytes;
            }
        }
        for r in self.db.query(
            "SELECT primary_osd, COUNT(*) FROM segments GROUP BY primary_osd",
            &[],
        )? {
            loads.entry(get_u32(&r, 0)?).or_default().primaries = get_u(&r, 1)?;
        }
        Ok(loads)
    }

    /// The segments `batch` writes or removes (a removed file's too), or None when they are
    /// more than [`LOAD_CACHE_SEGMENTS_MAX`].
    fn touched_segments(&self, batch: &[Mutation]) -> Result<Option<Vec<u64>>, StoreError> {
        let mut ids = std::collections::BTreeSet::new();
        for m in batch {
            match m {
                Mutation::PutSegment(s) => {
                    ids.insert(s.segment_id);
                }
                Mutation::PutChunk(c) => {
                    ids.insert(c.segment_id);
                }
                Mutation::DeleteSegment(id) => {
                    ids.insert(*id);
                }
                Mutation::DeleteFile(id) => {
                    ids.extend(
                        self.segments_where("file_id = ?1", v(*id))?
                            .iter()
                            .map(|s| s.segment_id),
                    );
                }
                Mutation::SetCounter { .. }
                | Mutation::DeleteEmptyFile(_)
                | Mutation::PutOsd(_)
                | Mutation::PutFile(_)
                | Mutation::PutInode(_)
                | Mutation::DeleteInode(_)
                | Mutation::PutDentry { .. }
                | Mutation::DeleteDentry { .. }
                | Mutation::PutXattr { .. }
                | Mutation::DeleteXattr { .. }
                | Mutation::PutDelete(_)
                | Mutation::RemoveDeletes { .. }
                | Mutation::SetRecovery(_)
                | Mutation::Robust(_) => {}
            }
            if ids.len() > LOAD_CACHE_SEGMENTS_MAX {
                return Ok(None);
            }
        }
        Ok(Some(ids.into_iter().collect()))
    }

    /// The share of segments `ids` in the loads, as [`Self::count_loads`] counts them.
    fn loads_of(
        &self,
        ids: &[u64],
        (k, align_bytes): (u32, u64),
    ) -> Result<BTreeMap<u32, OsdLoad>, StoreError> {
        let mut loads: BTreeMap<u32, OsdLoad> = BTreeMap::new();
        for &id in ids {
            let Some(s) = self.segment(id)? else { continue };
            loads.entry(s.primary).or_default().primaries += 1;
            let bytes = ecstack_mds_proto::chunk_bytes(s.length, k as usize, align_bytes);
            for c in self.chunks(id)? {
                let Some(osd) = c.osd_id else { continue };
                let l = loads.entry(osd).or_default();
                l.chunks += 1;
                l.bytes += bytes;
                if c.index < k {
                    l.data_bytes += bytes;
                }
            }
        }
        Ok(loads)
    }
}

/// Ids one [`MetadataStore::known_ids`] query asks about.
const KNOWN_IDS_PER_QUERY: usize = 256;

/// The query of [`MetadataStore::known_ids`]: `?1` the OSD, `?2`… the ids.
fn known_ids_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        let list = (2..KNOWN_IDS_PER_QUERY + 2)
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "SELECT segment_id FROM segments WHERE segment_id IN ({list})
             UNION SELECT object_id FROM robust_objects WHERE object_id IN ({list})
             UNION SELECT segment_id FROM delete_tasks WHERE osd_id = ?1 AND segment_id IN ({list})
             UNION SELECT object_id FROM object_delete_tasks WHERE osd_id = ?1 AND object_id IN ({list})"
        )
    })
}

impl<D: Db> MetadataStore for SqlStore<D> {
    fn backup_source(&self) -> Result<std::path::PathBuf, StoreError> {
        self.db.backup_source()
    }

    fn apply(&mut self, batch: &[Mutation]) -> Result<(), StoreError> {
        let mut stmts = Vec::with_capacity(batch.len());
        let mut spans = Vec::with_capacity(batch.len());
        for m in batch {
            let from = stmts.len();
            statements(m, &mut stmts);
            spans.push(from..stmts.len());
        }
        // The touched segments' share of the cached loads, before and after.
        let follow = match self.loads.key() {
            Some(key) => match self.touched_segments(batch) {
                Ok(Some(ids)) => match self.loads_of(&ids, key) {
                    Ok(before) => Some((ids, key, before)),
                    Err(_) => None,
                },
                _ => None,
            },
            None => None,
        };
        if follow.is_none() {
            self.loads.drop_all();
        }
        let r = self.db.transact(&stmts);
        match (&r, follow) {
            (Ok(()), Some((ids, key, before))) => match self.loads_of(&ids, key) {
                Ok(after) => self.loads.correct(&before, &after),
                Err(_) => self.loads.drop_all(),
            },
            (Ok(()), None) => {}
            (Err(_), _) => self.loads.drop_all(),
        }
        match r {
            Ok(()) => self.rows.committed(batch, &stmts, &spans),
            // Perhaps committed, perhaps not.
            Err(_) => self.rows.clear(),
        }
        r
    }

    fn counter(&self, name: &str) -> Result<u64, StoreError> {
        if let Some(value) = self.rows.counter(name) {
            return Ok(value);
        }
        let value = match self.one(
            "SELECT value FROM counters WHERE name = ?1",
            &[Value::Text(name.to_owned())],
        )? {
            Some(r) => get_u(&r, 0)?,
            None => 0,
        };
        self.rows.keep_counter(name, value);
        Ok(value)
    }

    fn osds(&self) -> Result<Vec<OsdRecord>, StoreError> {
        let mut osds = self
            .db
            .query(
                "SELECT osd_id, name, addr, capacity_bytes, used_bytes, state, last_heartbeat_ms FROM osds ORDER BY osd_id",
                &[],
            )?
            .iter()
            .map(|r| {
                Ok(OsdRecord {
                    osd_id: get_u32(r, 0)?,
                    name: get_text(r, 1)?,
                    addr: get_text(r, 2)?,
                    labels: BTreeMap::new(),
                    capacity_bytes: get_u(r, 3)?,
                    used_bytes: get_u(r, 4)?,
                    state: osd_state_of(get_i(r, 5)?)?,
                    last_heartbeat_ms: get_u(r, 6)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        for r in self
            .db
            .query("SELECT osd_id, key, value FROM osd_labels", &[])?
        {
            let id = get_u32(&r, 0)?;
            if let Some(o) = osds.iter_mut().find(|o| o.osd_id == id) {
                o.labels.insert(get_text(&r, 1)?, get_text(&r, 2)?);
            }
        }
        Ok(osds)
    }

    fn file(&self, file_id: u64) -> Result<Option<FileRecord>, StoreError> {
        Ok(self
            .files_where("file_id = ?1", &[v(file_id)])?
            .into_iter()
            .next())
    }

    fn segment_count(&self, file_id: u64) -> Result<u32, StoreError> {
        let n = self.count(
            "SELECT COUNT(*) FROM segments WHERE file_id = ?1",
            &[v(file_id)],
        )?;
        u32::try_from(n).map_err(|_| StoreError::Corrupt(format!("{n} segments")))
    }

    fn inode(&self, ino: u64) -> Result<Option<InodeRecord>, StoreError> {
        if let Some(i) = self.rows.inode(ino) {
            return Ok(i);
        }
        let i = self.inodes(
            &format!("SELECT {INODE_COLUMNS} FROM inodes i WHERE ino = ?1"),
            &[v(ino)],
        )?;
        self.rows.keep_inode(ino, i.clone());
        Ok(i)
    }

    fn lookup(&self, parent: u64, name: &[u8]) -> Result<Option<InodeRecord>, StoreError> {
        match self.rows.entry(parent, name) {
            Some(Some(ino)) => return self.inode(ino),
            Some(None) => return Ok(None),
            None => {}
        }
        let i = self.inodes(
            &format!(
                "SELECT {INODE_COLUMNS} FROM dentries d JOIN inodes i ON i.ino = d.ino
                 WHERE d.parent = ?1 AND d.name = ?2"
            ),
            &[v(parent), Value::Blob(name.to_vec())],
        )?;
        self.rows
            .keep_entry(parent, name, i.as_ref().map(|i| i.ino));
        if let Some(i) = &i {
            self.rows.keep_inode(i.ino, Some(i.clone()));
        }
        Ok(i)
    }

    fn dir_entries(
        &self,
        parent: u64,
        after: &[u8],
        limit: u32,
    ) -> Result<Vec<(Vec<u8>, InodeRecord)>, StoreError> {
        self.db
            .query(
                &format!(
                    "SELECT {INODE_COLUMNS}, d.name FROM dentries d JOIN inodes i ON i.ino = d.ino
                     WHERE d.parent = ?1 AND d.name > ?2 ORDER BY d.name LIMIT ?3"
                ),
                &[v(parent), Value::Blob(after.to_vec()), v32(limit)],
            )?
            .iter()
            .map(|r| Ok((get_blob(r, 14)?, inode_of(r)?)))
            .collect()
    }

    fn links(&self, ino: u64) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.db
            .query(
                "SELECT parent, name FROM dentries WHERE ino = ?1 ORDER BY parent, name",
                &[v(ino)],
            )?
            .iter()
            .map(|r| Ok((get_u(r, 0)?, get_blob(r, 1)?)))
            .collect()
    }

    fn xattrs(&self, ino: u64) -> Result<Vec<Xattr>, StoreError> {
        self.db
            .query(
                "SELECT name, value FROM xattrs WHERE ino = ?1 ORDER BY name",
                &[v(ino)],
            )?
            .iter()
            .map(|r| Ok((get_blob(r, 0)?, get_blob(r, 1)?)))
            .collect()
    }

    fn inode_count(&self) -> Result<u64, StoreError> {
        self.count("SELECT COUNT(*) FROM inodes", &[])
    }

    fn pending_files(&self) -> Result<Vec<FileRecord>, StoreError> {
        self.files_where("committed = 0", &[])
    }

    fn totals(&self) -> Result<(u64, u64), StoreError> {
        let r = self
            .one(
                "SELECT COUNT(*), CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM files WHERE committed = 1",
                &[],
            )?
            .ok_or_else(|| StoreError::Corrupt("no totals".into()))?;
        Ok((get_u(&r, 0)?, get_u(&r, 1)?))
    }

    fn segment(&self, segment_id: u64) -> Result<Option<SegmentRecord>, StoreError> {
        Ok(self
            .segments_where("segment_id = ?1", v(segment_id))?
            .into_iter()
            .next())
    }

    fn segments_of_file(&self, file_id: u64) -> Result<Vec<SegmentRecord>, StoreError> {
        self.segments_where("file_id = ?1", v(file_id))
    }

    fn segments_with_primary(&self, osd_id: u32) -> Result<Vec<SegmentRecord>, StoreError> {
        self.segments_where("primary_osd = ?1", v32(osd_id))
    }

    fn chunks(&self, segment_id: u64) -> Result<Vec<ChunkRecord>, StoreError> {
        self.chunks_where("segment_id = ?1", &[v(segment_id)])
    }

    fn chunks_on_osd(&self, osd_id: u32) -> Result<Vec<ChunkRecord>, StoreError> {
        self.chunks_where("osd_id = ?1", &[v32(osd_id)])
    }

    fn chunks_in_state(&self, state: ChunkState) -> Result<Vec<ChunkRecord>, StoreError> {
        self.chunks_where("state = ?1", &[Value::Integer(chunk_state_code(state))])
    }

    fn all_chunks(&self) -> Result<Vec<ChunkRecord>, StoreError> {
        self.chunks_where("TRUE", &[])
    }

    fn deletes_for(&self, osd_id: u32) -> Result<Vec<DeleteRecord>, StoreError> {
        self.db
            .query(
                "SELECT osd_id, segment_id, chunk_index FROM delete_tasks WHERE osd_id = ?1 ORDER BY segment_id, chunk_index",
                &[v32(osd_id)],
            )?
            .iter()
            .map(|r| {
                Ok(DeleteRecord {
                    osd_id: get_u32(r, 0)?,
                    segment_id: get_u(r, 1)?,
                    chunk: get_u32(r, 2)?,
                })
            })
            .collect()
    }

    fn osd_loads(&self, k: u32, align_bytes: u64) -> Result<BTreeMap<u32, OsdLoad>, StoreError> {
        if self.loads.key() == Some((k, align_bytes)) {
            if let Some(c) = self.loads.0.borrow().as_ref() {
                return Ok(c.loads.clone());
            }
        }
        let loads = self.count_loads(k, align_bytes)?;
        *self.loads.0.borrow_mut() = Some(CachedLoads {
            k,
            align_bytes,
            loads: loads.clone(),
        });
        Ok(loads)
    }

    fn robust_file(&self, file_id: u64) -> Result<Option<RobustFileRecord>, StoreError> {
        self.robust_file_row(file_id)
    }

    fn robust_objects(&self, file_id: u64) -> Result<Vec<RobustObjectRecord>, StoreError> {
        self.robust_objects_of(file_id)
    }

    fn robust_object(&self, object_id: u64) -> Result<Option<RobustObjectRecord>, StoreError> {
        self.robust_object_row(object_id)
    }

    fn blocks(&self, object_id: u64) -> Result<Vec<BlockRecord>, StoreError> {
        self.blocks_of(object_id)
    }

    fn object_deletes_for(&self, osd_id: u32) -> Result<Vec<ObjectDeleteRecord>, StoreError> {
        self.object_deletes_of(osd_id)
    }

    fn robust_census(&self) -> Result<(u64, Vec<ObjectCensus>), StoreError> {
        self.robust_census_rows()
    }

    fn known_ids(&self, osd_id: u32, ids: &[u64]) -> Result<BTreeSet<u64>, StoreError> {
        let mut known = BTreeSet::new();
        for part in ids.chunks(KNOWN_IDS_PER_QUERY) {
            let mut args = Vec::with_capacity(KNOWN_IDS_PER_QUERY + 1);
            args.push(v32(osd_id));
            args.extend(part.iter().map(|&id| v(id)));
            // Padded with the last id: one statement whatever the length.
            let last = *part.last().expect("chunks are never empty");
            args.resize(KNOWN_IDS_PER_QUERY + 1, v(last));
            for r in self.db.query(known_ids_sql(), &args)? {
                known.insert(get_u(&r, 0)?);
            }
        }
        Ok(known)
    }

    fn recovery(&self) -> Result<RecoveryProgress, StoreError> {
        let r = self
            .one(
                "SELECT chunks_total, chunks_done, bytes_done, started_ms, finished_ms FROM recovery WHERE id = 0",
                &[],
            )?
            .ok_or_else(|| StoreError::Corrupt("recovery row missing".into()))?;
        Ok(RecoveryProgress {
            chunks_total: get_u(&r, 0)?,
            chunks_done: get_u(&r, 1)?,
            bytes_done: get_u(&r, 2)?,
            started_ms: get_u(&r, 3)?,
            finished_ms: get_u(&r, 4)?,
        })
    }
}
