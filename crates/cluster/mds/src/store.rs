//! The MDS's durable state: the `MetadataStore` trait (reads as queries, writes as atomic batches of
//! [`Mutation`]s), its implementation over SQL engines ([`SqlStore`], `store_sql`), and the SQLite
//! engine (PostgreSQL: `store_pg`). The MDS logic above decides; a store only keeps.
//!
//! Durability contract: [`MetadataStore::apply`] returns only after the whole batch is committed and
//! on stable storage (SQLite: WAL with `synchronous=FULL`; PostgreSQL: `synchronous_commit=on`), so the MDS replies to an RPC after its
//! mutation is durable. A batch is all or nothing.
//!
//! Recover tasks are not stored: they are derived from chunk states (a `Stale` or `Recovering` chunk
//! with a holder needs its segment's primary to rebuild it), so they cannot drift from the layout.
//! Delete tasks are stored (their segments are gone from the other tables).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use ecstack_device::{holder_line, lock_file_with_pid, DeviceLock, LockError};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

pub use crate::store_robust::{
    BlockRecord, ObjectCensus, ObjectDeleteRecord, RobustFileRecord, RobustMutation,
    RobustObjectRecord,
};
use crate::store_sql::{int, put_inode_stmt, set_counter_stmt};
pub use crate::store_sql::{Db, Row, SqlStore, Stmt, Value};

use ecstack_mds_proto::{ChunkState, FileKind, OsdState, RecoveryProgress, UpdateScheme};

/// First row of the `meta` table: what this file is.
pub const STORE_MARKER: &str = "ecstack-mds-store";
/// The schema version this code reads and writes. Version changes (docs/cluster.md
/// "Versioning"): 1 (first); 2 (`files.update_scheme`, the file's update scheme; version 1
/// databases are migrated on open, their files become `fo`); 3 (the POSIX namespace: inodes,
/// directory entries, symlinks, xattrs; a version-2 store's flat paths become directories, those a
/// tree cannot hold go to `/lost+found`); 4 (robust files: their coding, objects and coded
/// blocks, `store_robust`; nothing existing changes). Older versions are migrated on open by
/// [`MIGRATIONS`]; newer ones are refused.
pub const STORE_VERSION: u32 = 4;
/// The oldest schema version [`SqliteStore::open`] migrates.
pub const STORE_VERSION_MIN: u32 = 1;

/// Names of the id counters (never reused, so a removed segment's id never names a new one).
pub const COUNTER_OSD: &str = "next_osd_id";
pub const COUNTER_FILE: &str = "next_file_id";
pub const COUNTER_SEGMENT: &str = "next_segment_id";
/// The global layout epoch: every layout change takes the next value as the segment's epoch.
pub const COUNTER_EPOCH: &str = "layout_epoch";
/// Set (to the unix ms of the restore) by `ecstack cluster restore` in the store it restores, and
/// cleared by the MDS once every OSD reported the largest id it holds: until then new segment and
/// object ids wait (`engine::inventory`). 0 or absent: not a fresh restore.
pub const COUNTER_RESTORED: &str = "restored_ms";
/// The last inode number handed out (never reused; the root is [`ROOT_INO`]).
pub const COUNTER_INO: &str = "next_ino";
/// The root directory's inode number (FUSE's root id).
pub const ROOT_INO: u64 = 1;
/// Where the migration to version 3 puts the files whose flat path a tree cannot hold.
pub const LOST_FOUND: &str = "lost+found";
/// Longest name of one directory entry, bytes (Linux's NAME_MAX).
pub const NAME_MAX: usize = 255;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `at`: the database file, or a PostgreSQL URL without its password.
    #[error("cannot open metadata store {at}: {message}")]
    Open { at: String, message: String },
    #[error("{at} is not an ecstack MDS store (marker {found:?}, expected {STORE_MARKER:?})")]
    NotAStore { at: String, found: String },
    #[error("metadata store {at} has schema version {found}; this ecstack reads versions {min} to {STORE_VERSION} only")]
    UnknownVersion { at: String, found: String, min: u32 },
    #[error("metadata store {path} is in use by another MDS ({holder}); stop it first, or give this MDS a store of its own")]
    Locked { path: String, holder: String },
    #[error("metadata store: {0}")]
    Db(String),
    /// A fenced store's MDS lost its lease: another MDS took over (term `now`); this one commits
    /// nothing more.
    #[error(
        "this MDS was deposed: it holds the store's lease term {mine}, the store is at term {now}"
    )]
    Deposed { mine: u64, now: u64 },
    #[error("metadata store holds a bad value: {0}")]
    Corrupt(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Db(e.to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsdRecord {
    pub osd_id: u32,
    pub name: String,
    pub addr: String,
    pub labels: BTreeMap<String, String>,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub state: OsdState,
    /// Unix ms of the last heartbeat (or registration).
    pub last_heartbeat_ms: u64,
}

/// An extended attribute: (name, value).
pub type Xattr = (Vec<u8>, Vec<u8>);

/// One inode of the namespace (version 3): a file, a directory, a symlink or a special file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeRecord {
    pub ino: u64,
    pub kind: FileKind,
    /// Permission bits with set-uid, set-gid and sticky (07777).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Directory entries naming it (a directory: 2 + its subdirectories).
    pub nlink: u32,
    /// Bytes: a file's length, a symlink's target length, 0 for a directory.
    pub size: u64,
    pub rdev: u32,
    pub atime_ns: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    /// Bumped at every change of a file's bytes or size (close-to-open: a client whose cached
    /// segments are of another version drops them at open).
    pub version: u64,
    /// A regular file's data (its segments); `None` for every other kind.
    pub file_id: Option<u64>,
    /// A symlink's target.
    pub target: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    pub file_id: u64,
    /// The path a put was started for (where its commit links the file); informational once
    /// committed (the namespace names files through directory entries).
    pub path: String,
    pub size: u64,
    /// Unix ms: creation while pending, commit time once committed.
    pub mtime_ms: u64,
    /// Visible (close-to-open): at most one committed file per path.
    pub committed: bool,
    /// How the file's updates are stored; chosen at creation, never changed.
    pub scheme: UpdateScheme,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentRecord {
    pub segment_id: u64,
    pub file_id: u64,
    pub index: u32,
    pub length: u64,
    pub primary: u32,
    pub epoch: u64,
    /// The largest segment version a primary reported (MarkStale / ChunkRecovered).
    pub version: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRecord {
    pub segment_id: u64,
    pub index: u32,
    /// `None` for a `Lost` chunk.
    pub osd_id: Option<u32>,
    pub state: ChunkState,
}

/// One chunk an OSD must drop (its segment was removed or replaced).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeleteRecord {
    pub osd_id: u32,
    pub segment_id: u64,
    pub chunk: u32,
}

/// What an OSD holds according to the chunk table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OsdLoad {
    pub chunks: u64,
    /// Sum of chunk sizes (`ecstack_mds_proto::chunk_bytes`).
    pub bytes: u64,
    /// The part of `bytes` in data chunks (index < k): what reads fetch from this OSD. Parity
    /// chunks are read only when a data chunk is missing.
    pub data_bytes: u64,
    pub primaries: u64,
}

/// One change; [`MetadataStore::apply`] applies a batch of them atomically.
#[derive(Debug, Clone, PartialEq)]
pub enum Mutation {
    SetCounter {
        name: &'static str,
        value: u64,
    },
    /// Insert or replace (by id) an OSD with its labels.
    PutOsd(OsdRecord),
    /// Insert or replace (by id) a file.
    PutFile(FileRecord),
    /// Insert or replace (by number) an inode.
    PutInode(InodeRecord),
    /// Remove an inode with its xattrs (no directory entry may name it any more).
    DeleteInode(u64),
    /// Add a directory entry (refused when `parent` already has `name`).
    PutDentry {
        parent: u64,
        name: Vec<u8>,
        ino: u64,
    },
    DeleteDentry {
        parent: u64,
        name: Vec<u8>,
    },
    /// Insert or replace an extended attribute.
    PutXattr {
        ino: u64,
        name: Vec<u8>,
        value: Vec<u8>,
    },
    DeleteXattr {
        ino: u64,
        name: Vec<u8>,
    },
    /// Remove one segment with its chunks (a truncated file's tail).
    DeleteSegment(u64),
    /// Remove a file with its segments and their chunks.
    DeleteFile(u64),
    /// Remove a file that has no segments and no robust objects (as the operation removing it
    /// read): its records only, two statements where [`Mutation::DeleteFile`] runs seven. A
    /// segment or object it does have makes the batch fail (foreign keys), never leaves them.
    DeleteEmptyFile(u64),
    PutSegment(SegmentRecord),
    /// Insert or replace chunk (segment, index).
    PutChunk(ChunkRecord),
    PutDelete(DeleteRecord),
    /// Remove every delete task of `osd_id` for `segment_id`.
    RemoveDeletes {
        osd_id: u32,
        segment_id: u64,
    },
    SetRecovery(RecoveryProgress),
    /// A change to robust files' tables (schema version 4).
    Robust(RobustMutation),
}

/// The MDS's durable state. Implementations: [`SqliteStore`] and [`crate::store_pg::PgStore`],
/// both a [`SqlStore`] (`store_sql`).
pub trait MetadataStore: Send {
    /// Applies a batch atomically; returns once it is durable.
    fn apply(&mut self, batch: &[Mutation]) -> Result<(), StoreError>;
    /// The database file an online backup copies while the store is in use, by a read-only
    /// connection of its own (SQLite: `crate::backup::snapshot_sqlite`; PostgreSQL refuses:
    /// `pg_dump` backs it up).
    fn backup_source(&self) -> Result<PathBuf, StoreError>;
    /// A counter's value (0 if never set).
    fn counter(&self, name: &str) -> Result<u64, StoreError>;
    /// Every OSD, by id.
    fn osds(&self) -> Result<Vec<OsdRecord>, StoreError>;
    fn file(&self, file_id: u64) -> Result<Option<FileRecord>, StoreError>;
    /// The committed file `path` names through the namespace ([`split_path`]; a symlink is not
    /// followed), if it names a regular file.
    fn committed_file(&self, path: &str) -> Result<Option<FileRecord>, StoreError> {
        let Ok(names) = split_path(path) else {
            return Ok(None);
        };
        let mut ino = ROOT_INO;
        for name in names {
            match self.lookup(ino, name.as_bytes())? {
                Some(i) => ino = i.ino,
                None => return Ok(None),
            }
        }
        match self.inode(ino)?.and_then(|i| i.file_id) {
            Some(id) => self.file(id),
            None => Ok(None),
        }
    }
    /// A file's segment count.
    fn segment_count(&self, file_id: u64) -> Result<u32, StoreError>;
    fn inode(&self, ino: u64) -> Result<Option<InodeRecord>, StoreError>;
    /// The inode `parent` names `name`.
    fn lookup(&self, parent: u64, name: &[u8]) -> Result<Option<InodeRecord>, StoreError>;
    /// At most `limit` entries of directory `parent` with names after `after`, by name.
    fn dir_entries(
        &self,
        parent: u64,
        after: &[u8],
        limit: u32,
    ) -> Result<Vec<(Vec<u8>, InodeRecord)>, StoreError>;
    /// The directory entries naming `ino`: (parent, name), by parent and name.
    fn links(&self, ino: u64) -> Result<Vec<(u64, Vec<u8>)>, StoreError>;
    /// An inode's extended attributes, by name.
    fn xattrs(&self, ino: u64) -> Result<Vec<Xattr>, StoreError>;
    /// Inodes in the namespace.
    fn inode_count(&self) -> Result<u64, StoreError>;
    /// Files created but not committed, by id.
    fn pending_files(&self) -> Result<Vec<FileRecord>, StoreError>;
    /// (committed files, sum of their sizes).
    fn totals(&self) -> Result<(u64, u64), StoreError>;
    fn segment(&self, segment_id: u64) -> Result<Option<SegmentRecord>, StoreError>;
    /// A file's segments, by index.
    fn segments_of_file(&self, file_id: u64) -> Result<Vec<SegmentRecord>, StoreError>;
    fn segments_with_primary(&self, osd_id: u32) -> Result<Vec<SegmentRecord>, StoreError>;
    /// A segment's chunks, by index.
    fn chunks(&self, segment_id: u64) -> Result<Vec<ChunkRecord>, StoreError>;
    /// Chunks held by an OSD, by (segment, index).
    fn chunks_on_osd(&self, osd_id: u32) -> Result<Vec<ChunkRecord>, StoreError>;
    /// Chunks in one state, by (segment, index).
    fn chunks_in_state(&self, state: ChunkState) -> Result<Vec<ChunkRecord>, StoreError>;
    /// Every chunk, by (segment, index).
    fn all_chunks(&self) -> Result<Vec<ChunkRecord>, StoreError>;
    /// Pending delete tasks of an OSD, by (segment, chunk).
    fn deletes_for(&self, osd_id: u32) -> Result<Vec<DeleteRecord>, StoreError>;
    /// Per OSD holding anything: chunks, bytes (chunk size: `ecstack_mds_proto::chunk_bytes` of
    /// the segment's length, k and the code's `align_bytes`) and primaries.
    fn osd_loads(&self, k: u32, align_bytes: u64) -> Result<BTreeMap<u32, OsdLoad>, StoreError>;
    fn recovery(&self) -> Result<RecoveryProgress, StoreError>;
    /// A robust file's coding; `None` for a file of segments.
    fn robust_file(&self, file_id: u64) -> Result<Option<RobustFileRecord>, StoreError>;
    /// A robust file's objects, by index.
    fn robust_objects(&self, file_id: u64) -> Result<Vec<RobustObjectRecord>, StoreError>;
    fn robust_object(&self, object_id: u64) -> Result<Option<RobustObjectRecord>, StoreError>;
    /// An object's committed blocks, by id.
    fn blocks(&self, object_id: u64) -> Result<Vec<BlockRecord>, StoreError>;
    /// Pending block deletions of an OSD, by (object, block).
    fn object_deletes_for(&self, osd_id: u32) -> Result<Vec<ObjectDeleteRecord>, StoreError>;
    /// (committed robust files, per committed object its n and its blocks per holder).
    fn robust_census(&self) -> Result<(u64, Vec<ObjectCensus>), StoreError>;
    /// Of `ids`, those the store knows: a segment's or a robust object's (committed or pending),
    /// or one with a delete task of `osd_id` (chunks or blocks). What an OSD's inventory names
    /// beyond these is an orphan candidate (`MdsCore::report_inventory`).
    fn known_ids(&self, osd_id: u32, ids: &[u64]) -> Result<BTreeSet<u64>, StoreError>;
}

/// Opens the store `[mds] store` names; also returns how to name it in messages (a PostgreSQL
/// URL without its password).
pub fn open_store(
    store: &ecstack_rpc::MdsStore,
) -> Result<(Box<dyn MetadataStore>, String), StoreError> {
    Ok(match store {
        ecstack_rpc::MdsStore::Sqlite(path) => (
            Box::new(SqliteStore::open(path)?),
            path.display().to_string(),
        ),
        ecstack_rpc::MdsStore::PostgreSql(url) => (
            Box::new(crate::store_pg::PgStore::connect(url)?),
            crate::store_pg::redact_url(url),
        ),
    })
}

/// Schema version 1 exactly as it was released: never edit it (databases on disk were made by
/// it). A new store runs it and then every migration, so a new and a migrated store have one
/// schema by construction.
const SCHEMA_V1: &str = "
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE osds (
    osd_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    addr TEXT NOT NULL,
    capacity_bytes INTEGER NOT NULL,
    used_bytes INTEGER NOT NULL,
    state INTEGER NOT NULL,
    last_heartbeat_ms INTEGER NOT NULL
);
CREATE TABLE osd_labels (
    osd_id INTEGER NOT NULL REFERENCES osds(osd_id),
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (osd_id, key)
);
CREATE TABLE files (
    file_id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ms INTEGER NOT NULL,
    committed INTEGER NOT NULL
);
CREATE UNIQUE INDEX files_committed_path ON files(path) WHERE committed = 1;
CREATE TABLE segments (
    segment_id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files(file_id),
    seg_index INTEGER NOT NULL,
    length INTEGER NOT NULL,
    primary_osd INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    version INTEGER NOT NULL,
    UNIQUE (file_id, seg_index)
);
CREATE INDEX segments_primary ON segments(primary_osd);
CREATE TABLE chunks (
    segment_id INTEGER NOT NULL REFERENCES segments(segment_id),
    chunk_index INTEGER NOT NULL,
    osd_id INTEGER,
    state INTEGER NOT NULL,
    PRIMARY KEY (segment_id, chunk_index)
);
CREATE INDEX chunks_osd ON chunks(osd_id);
CREATE INDEX chunks_state ON chunks(state);
CREATE TABLE delete_tasks (
    osd_id INTEGER NOT NULL,
    segment_id INTEGER NOT NULL,
    chunk_index INTEGER NOT NULL,
    PRIMARY KEY (osd_id, segment_id, chunk_index)
);
CREATE TABLE recovery (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    chunks_total INTEGER NOT NULL,
    chunks_done INTEGER NOT NULL,
    bytes_done INTEGER NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL
);
INSERT INTO recovery VALUES (0, 0, 0, 0, 0, 0);
";

/// `MIGRATIONS[i]` takes schema version `STORE_VERSION_MIN + i` to the next one. Each runs inside
/// the transaction that also writes the new version, so a migration is all or nothing. Never edit
/// one: databases on disk were migrated by it.
type Migration = fn(&rusqlite::Transaction<'_>) -> rusqlite::Result<()>;
const MIGRATIONS: [Migration; 3] = [
    // 1 → 2: the file's update scheme (`UpdateScheme::code`: 0 fo, 1 fl, 2 codfs-pl, 3 plr).
    // Files of a version-1 store were all updated in place: fo.
    |tx| tx.execute_batch("ALTER TABLE files ADD COLUMN update_scheme INTEGER NOT NULL DEFAULT 0;"),
    // 2 → 3: the POSIX namespace ([`migrate_2_to_3`]).
    migrate_2_to_3,
    // 3 → 4: robust files (`store_robust`).
    |tx| tx.execute_batch(crate::store_robust::SCHEMA_V4),
];

/// The tables of version 3: inodes, directory entries, extended attributes. `files.path` no longer
/// names a committed file (directory entries do), so its uniqueness goes.
const SCHEMA_V3: &str = "
DROP INDEX files_committed_path;
CREATE TABLE inodes (
    ino INTEGER PRIMARY KEY,
    kind INTEGER NOT NULL,
    mode INTEGER NOT NULL,
    uid INTEGER NOT NULL,
    gid INTEGER NOT NULL,
    nlink INTEGER NOT NULL,
    size INTEGER NOT NULL,
    rdev INTEGER NOT NULL,
    atime_ns INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    version INTEGER NOT NULL,
    file_id INTEGER UNIQUE REFERENCES files(file_id),
    target BLOB
);
CREATE TABLE dentries (
    parent INTEGER NOT NULL REFERENCES inodes(ino),
    name BLOB NOT NULL,
    ino INTEGER NOT NULL REFERENCES inodes(ino),
    PRIMARY KEY (parent, name)
);
CREATE INDEX dentries_ino ON dentries(ino);
CREATE TABLE xattrs (
    ino INTEGER NOT NULL REFERENCES inodes(ino),
    name BLOB NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (ino, name)
);
";

/// What the `meta` table of the store at `at` says, for an engine that reads versions `min` to
/// [`STORE_VERSION`]: `None` when it is current, `Some(from)` when it needs the migrations from
/// version `from`; another marker or an unknown version is refused.
pub(crate) fn check_meta(
    at: &str,
    marker: String,
    version: String,
    min: u32,
) -> Result<Option<u32>, StoreError> {
    if marker != STORE_MARKER {
        return Err(StoreError::NotAStore {
            at: at.to_owned(),
            found: marker,
        });
    }
    match version.parse::<u32>() {
        Ok(STORE_VERSION) => Ok(None),
        Ok(v) if (min..STORE_VERSION).contains(&v) => Ok(Some(v)),
        _ => Err(StoreError::UnknownVersion {
            at: at.to_owned(),
            found: version,
            min,
        }),
    }
}

/// The names of a path from the root: a leading `/` is the root (`/a/b` and `a/b` are one path);
/// an empty, `.` or `..` component, or one longer than [`NAME_MAX`], is refused with the reason.
pub fn split_path(path: &str) -> Result<Vec<&str>, String> {
    let rest = path.strip_prefix('/').unwrap_or(path);
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = rest.split('/').collect();
    for n in &names {
        if n.is_empty() {
            return Err("it has an empty component".into());
        }
        if *n == "." || *n == ".." {
            return Err(format!("it has a {n:?} component"));
        }
        if n.len() > NAME_MAX {
            return Err(format!(
                "a component is {} bytes long; the limit is {NAME_MAX}",
                n.len()
            ));
        }
    }
    Ok(names)
}

/// Now, in ns since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A new inode of `kind` with every time `t_ns`, owned by root.
pub fn new_inode(ino: u64, kind: FileKind, mode: u32, t_ns: u64) -> InodeRecord {
    InodeRecord {
        ino,
        kind,
        mode,
        uid: 0,
        gid: 0,
        nlink: if kind == FileKind::Dir { 2 } else { 1 },
        size: 0,
        rdev: 0,
        atime_ns: t_ns,
        mtime_ns: t_ns,
        ctime_ns: t_ns,
        version: 1,
        file_id: None,
        target: None,
    }
}

/// 2 → 3: the tables, the root directory, and every committed file of the flat namespace linked
/// at its path, oldest file first, with the directories its path names (mode 0755, owned by
/// root; files 0644, their times the commit time). A path a tree cannot hold (an empty, `.` or
/// `..` component, a component that names a file already, a path that names an existing entry)
/// is linked in `/lost+found` (0700) as `FILEID-PATH` (`/` written `%2F`) with one log line:
/// nothing is dropped. Pending files stay pending.
fn migrate_2_to_3(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch(SCHEMA_V3)?;
    let now = now_ns();
    let mut next_ino = ROOT_INO;
    put_inode(tx, &new_inode(ROOT_INO, FileKind::Dir, 0o755, now))?;
    let files: Vec<(i64, String, i64, i64)> = tx
        .prepare(
            "SELECT file_id, path, size, mtime_ms FROM files WHERE committed = 1 ORDER BY file_id",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<Result<_, _>>()?;
    let mut lost_found: Option<u64> = None;
    for (file_id, path, size, mtime_ms) in files {
        let t = u64::try_from(mtime_ms)
            .unwrap_or(0)
            .saturating_mul(1_000_000);
        let mut inode = new_inode(0, FileKind::File, 0o644, t);
        inode.size = u64::try_from(size).unwrap_or(0);
        inode.file_id = Some(file_id as u64);
        let placed = match split_path(&path) {
            Ok(names) if !names.is_empty() => match walk_for_migration(tx, &names)? {
                Ok(missing_from) => {
                    let mut parent = ROOT_INO;
                    for (i, name) in names[..names.len() - 1].iter().enumerate() {
                        parent = if i < missing_from {
                            lookup_ino(tx, parent, name.as_bytes())?.expect("walked")
                        } else {
                            next_ino += 1;
                            mkdir_raw(tx, parent, name.as_bytes(), next_ino, now)?;
                            next_ino
                        };
                    }
                    Some((parent, names[names.len() - 1].as_bytes().to_vec()))
                }
                Err(why) => {
                    log_lost(&path, file_id, &why);
                    None
                }
            },
            Ok(_) => {
                log_lost(&path, file_id, "it names the root");
                None
            }
            Err(why) => {
                log_lost(&path, file_id, &why);
                None
            }
        };
        let (parent, name) = match placed {
            Some(p) => p,
            None => {
                let dir = match lost_found {
                    Some(d) => d,
                    None => {
                        let d = match lookup_ino(tx, ROOT_INO, LOST_FOUND.as_bytes())? {
                            Some(d) => d,
                            None => {
                                next_ino += 1;
                                mkdir_raw(tx, ROOT_INO, LOST_FOUND.as_bytes(), next_ino, now)?;
                                tx.execute(
                                    "UPDATE inodes SET mode = 448 WHERE ino = ?1",
                                    [int(next_ino)],
                                )?;
                                next_ino
                            }
                        };
                        lost_found = Some(d);
                        d
                    }
                };
                let mut name = format!("{file_id}-{}", path.replace('/', "%2F"));
                while name.len() > NAME_MAX {
                    name.pop();
                }
                (dir, name.into_bytes())
            }
        };
        next_ino += 1;
        inode.ino = next_ino;
        put_inode(tx, &inode)?;
        tx.execute(
            "INSERT INTO dentries VALUES (?1, ?2, ?3)",
            params![int(parent), name, int(next_ino)],
        )?;
    }
    exec(tx, &set_counter_stmt(COUNTER_INO, next_ino))?;
    Ok(())
}

fn log_lost(path: &str, file_id: i64, why: &str) {
    tracing::warn!(
        file_id,
        path,
        reason = why,
        "a flat path the namespace cannot hold: its file goes to /lost+found"
    );
}

/// Where a migrated path's directories end: `Ok(i)`: names `..i` exist as directories, the rest
/// are missing; `Err(why)` when a component names a file or the whole path names an entry.
fn walk_for_migration(
    tx: &rusqlite::Transaction<'_>,
    names: &[&str],
) -> rusqlite::Result<Result<usize, String>> {
    let mut parent = ROOT_INO;
    for (i, name) in names.iter().enumerate() {
        let found: Option<(i64, i64)> = tx
            .query_row(
                "SELECT i.ino, i.kind FROM dentries d JOIN inodes i ON i.ino = d.ino
                 WHERE d.parent = ?1 AND d.name = ?2",
                params![int(parent), name.as_bytes()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let last = i + 1 == names.len();
        match found {
            None => return Ok(Ok(i)),
            Some(_) if last => {
                return Ok(Err(format!("/{} names an entry already", names.join("/"))))
            }
            Some((ino, kind)) if kind == i64::from(FileKind::Dir.code()) => parent = ino as u64,
            Some(_) => {
                return Ok(Err(format!(
                    "/{} is a file, not a directory",
                    names[..=i].join("/")
                )))
            }
        }
    }
    Ok(Ok(names.len()))
}

fn lookup_ino(
    tx: &rusqlite::Transaction<'_>,
    parent: u64,
    name: &[u8],
) -> rusqlite::Result<Option<u64>> {
    tx.query_row(
        "SELECT ino FROM dentries WHERE parent = ?1 AND name = ?2",
        params![int(parent), name],
        |r| r.get::<_, i64>(0),
    )
    .optional()
    .map(|v| v.map(|v| v as u64))
}

/// A new directory `ino` (0755) named `name` in `parent` (whose link count grows by one).
fn mkdir_raw(
    tx: &rusqlite::Transaction<'_>,
    parent: u64,
    name: &[u8],
    ino: u64,
    now: u64,
) -> rusqlite::Result<()> {
    put_inode(tx, &new_inode(ino, FileKind::Dir, 0o755, now))?;
    tx.execute(
        "INSERT INTO dentries VALUES (?1, ?2, ?3)",
        params![int(parent), name, int(ino)],
    )?;
    tx.execute(
        "UPDATE inodes SET nlink = nlink + 1 WHERE ino = ?1",
        [int(parent)],
    )?;
    Ok(())
}

fn put_inode(tx: &rusqlite::Transaction<'_>, i: &InodeRecord) -> rusqlite::Result<()> {
    exec(tx, &put_inode_stmt(i))
}

/// Runs one statement of a batch.
fn exec(conn: &Connection, s: &Stmt) -> rusqlite::Result<()> {
    conn.prepare_cached(s.sql)?
        .execute(rusqlite::params_from_iter(s.args.iter()))?;
    Ok(())
}

const _: () = assert!(STORE_VERSION == STORE_VERSION_MIN + MIGRATIONS.len() as u32);

/// The metadata store in one SQLite database file (WAL, `synchronous=FULL`), held exclusively:
/// the store's life long it holds an OS lock (`flock`) on the file beside the database named
/// [`sqlite_lock_path`], so a second MDS (any process opening the store with [`SqliteStore::open`])
/// is refused with one line naming the holder. An online backup's read-only connection
/// (`crate::backup::snapshot_sqlite`) takes no lock: it writes nothing, and WAL lets it read one
/// committed state beside the store's writer.
pub type SqliteStore = SqlStore<SqliteDb>;

/// The SQLite engine under [`SqliteStore`]: one connection and the store's lock.
pub struct SqliteDb {
    conn: Connection,
    /// The database file.
    path: PathBuf,
    /// `None` only for [`SqliteStore::peek`] (tests).
    _lock: Option<DeviceLock>,
}

impl Db for SqliteDb {
    fn transact(&mut self, stmts: &[Stmt]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        for s in stmts {
            exec(&tx, s)?;
        }
        tx.commit()?;
        Ok(())
    }

    fn query(&self, sql: &str, args: &[Value]) -> Result<Vec<Row>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let width = stmt.column_count();
        let rows = stmt.query_map(rusqlite::params_from_iter(args.iter()), |r| {
            (0..width).map(|i| r.get::<_, Value>(i)).collect()
        })?;
        Ok(rows.collect::<Result<Vec<Row>, _>>()?)
    }

    fn backup_source(&self) -> Result<PathBuf, StoreError> {
        Ok(self.path.clone())
    }
}

/// The lock file of the SQLite store at `path`: `mds.db` → `mds.db.lock`.
pub fn sqlite_lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    path.with_file_name(name)
}

/// Takes the store's lock for this process, or refuses naming the holder.
fn lock_store(path: &Path) -> Result<DeviceLock, StoreError> {
    let lock_path = sqlite_lock_path(path);
    lock_file_with_pid(&lock_path).map_err(|e| match e {
        LockError::Busy { holder } => StoreError::Locked {
            path: path.display().to_string(),
            holder: holder_line(holder),
        },
        LockError::Io(e) => StoreError::Open {
            at: lock_path.display().to_string(),
            message: format!("cannot lock: {e}"),
        },
    })
}

impl SqlStore<SqliteDb> {
    /// Opens (creating if absent) the store at `path`; refuses a file of another kind or version,
    /// and a store another process (or another handle of this one) has open.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let open_err = |e: rusqlite::Error| StoreError::Open {
            at: path.display().to_string(),
            message: e.to_string(),
        };
        let lock = lock_store(path)?;
        let conn = Connection::open(path).map_err(open_err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(open_err)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(open_err)?;
        let mut store = SqlStore {
            db: SqliteDb {
                conn,
                path: path.to_owned(),
                _lock: Some(lock),
            },
            loads: Default::default(),
            rows: crate::store_sql::RowCache::new(),
        };
        store.check_or_init(path)?;
        store.rows.clear();
        Ok(store)
    }

    /// A read-only second handle beside a running MDS's, for tests that look at what it
    /// committed: no lock, no schema check.
    #[cfg(test)]
    pub(crate) fn peek(path: &Path) -> SqliteStore {
        let conn =
            Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        SqlStore {
            db: SqliteDb {
                conn,
                path: path.to_owned(),
                _lock: None,
            },
            loads: Default::default(),
            rows: crate::store_sql::RowCache::off(),
        }
    }

    fn check_or_init(&mut self, path: &Path) -> Result<(), StoreError> {
        let has_meta: bool = self.db.conn.query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
            [],
            |r| r.get::<_, i64>(0).map(|n| n > 0),
        )?;
        if !has_meta {
            let tables: i64 =
                self.db
                    .conn
                    .query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))?;
            if tables > 0 {
                return Err(StoreError::NotAStore {
                    at: path.display().to_string(),
                    found: String::new(),
                });
            }
            let tx = self.db.conn.transaction()?;
            tx.execute_batch(SCHEMA_V1)?;
            for m in MIGRATIONS {
                m(&tx)?;
            }
            tx.execute(
                "INSERT INTO meta VALUES ('marker', ?1), ('version', ?2)",
                params![STORE_MARKER, STORE_VERSION.to_string()],
            )?;
            tx.commit()?;
            return Ok(());
        }
        let get = |key: &str| -> Result<String, StoreError> {
            Ok(self
                .db
                .conn
                .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
                .optional()?
                .unwrap_or_default())
        };
        match check_meta(
            &path.display().to_string(),
            get("marker")?,
            get("version")?,
            STORE_VERSION_MIN,
        )? {
            None => Ok(()),
            Some(from) => self.migrate(path, from),
        }
    }

    /// Takes a store of an older schema `from` to [`STORE_VERSION`] in one transaction (taken
    /// before reading anything, so two processes opening one old store cannot both migrate).
    fn migrate(&mut self, path: &Path, from: u32) -> Result<(), StoreError> {
        let tx = self
            .db
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now: String =
            tx.query_row("SELECT value FROM meta WHERE key = 'version'", [], |r| {
                r.get(0)
            })?;
        if now != from.to_string() {
            // Another process migrated it between our read and our transaction.
            drop(tx);
            return self.check_or_init(path);
        }
        for m in &MIGRATIONS[(from - STORE_VERSION_MIN) as usize..] {
            m(&tx)?;
        }
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'version'",
            [STORE_VERSION.to_string()],
        )?;
        tx.commit()?;
        tracing::info!(
            path = %path.display(),
            from,
            to = STORE_VERSION,
            "metadata store migrated to the current schema version"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_passes_the_store_suite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mds.sqlite");
        crate::store_suite::run(&|| {
            Box::new(SqliteStore::open(&path).unwrap()) as Box<dyn MetadataStore>
        });
    }

    /// The child half of [`a_second_process_cannot_open_a_locked_store`]: opens the store named
    /// by the environment and says what happened on stdout.
    const LOCK_CHILD_ENV: &str = "ECSTACK_TEST_STORE_LOCK_CHILD";

    fn open_in_a_child_process(path: &Path) -> String {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "store::tests::a_second_process_cannot_open_a_locked_store",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(LOCK_CHILD_ENV, path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {stdout}");
        stdout
            .lines()
            .find_map(|l| l.split_once("child: ").map(|(_, said)| said))
            .unwrap_or_else(|| panic!("the child said nothing: {stdout}"))
            .to_owned()
    }

    /// Two MDS processes on one database would each believe their cached counters and leases
    /// (ids reused, two primaries of one segment): the second is refused, naming the first.
    #[test]
    fn a_second_process_cannot_open_a_locked_store() {
        if let Some(path) = std::env::var_os(LOCK_CHILD_ENV) {
            match SqliteStore::open(Path::new(&path)) {
                Ok(_) => println!("child: opened"),
                Err(e) => println!("child: {e}"),
            }
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mds.sqlite");
        let held = SqliteStore::open(&path).unwrap();
        let said = open_in_a_child_process(&path);
        assert_eq!(
            said,
            format!(
                "metadata store {} is in use by another MDS (pid {}: {}); stop it first, or give this MDS a store of its own",
                path.display(),
                std::process::id(),
                ecstack_device::lock::holder_of(&sqlite_lock_path(&path))
                    .map(|h| h.command(120))
                    .unwrap_or_default()
            )
        );
        // In this process too (another open of the same file).
        let e = SqliteStore::open(&path).err().unwrap().to_string();
        assert!(e.contains("this process"), "{e}");
        drop(held);
        assert_eq!(open_in_a_child_process(&path), "opened");
    }

    #[test]
    fn an_unknown_version_or_another_file_is_refused_with_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mds.sqlite");
        drop(SqliteStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.execute("UPDATE meta SET value = '7' WHERE key = 'version'", [])
            .unwrap();
        drop(conn);
        let e = SqliteStore::open(&path).err().unwrap().to_string();
        assert_eq!(
            e,
            format!(
                "metadata store {} has schema version 7; this ecstack reads versions 1 to {STORE_VERSION} only",
                path.display()
            )
        );
        let other = dir.path().join("other.sqlite");
        let conn = Connection::open(&other).unwrap();
        conn.execute("CREATE TABLE t (x INTEGER)", []).unwrap();
        drop(conn);
        let e = SqliteStore::open(&other).err().unwrap().to_string();
        assert!(e.contains("is not an ecstack MDS store"), "{e}");
        let text = dir.path().join("text");
        std::fs::write(
            &text,
            "hello, this is not a database at all, not even close",
        )
        .unwrap();
        assert!(SqliteStore::open(&text).is_err());
    }
}
