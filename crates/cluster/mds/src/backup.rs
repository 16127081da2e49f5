//! Backups of the metadata store (`ecstack cluster backup FILE`, `ecstack cluster restore FILE`).
//!
//! - **SQLite**, online: the MDS makes a consistent copy of its database and streams it (`Backup`
//!   RPC, admin only). Under the core's lock it only looks up the database's file; the copy is
//!   made outside it ([`snapshot_sqlite`]: `VACUUM INTO` on a read-only connection of its own, one
//!   read transaction beside the MDS's writer in WAL mode), so metadata operations go on while a
//!   large database is copied, and the copy is the state after one committed transaction. The
//!   command writes it to `FILE.part`, syncs and renames it, and it must open as a store
//!   ([`check_sqlite`]).
//!   Restore, with the MDS stopped (its store lock is taken for the time of the restore): the copy
//!   is checked, then replaces the database (its `-wal` and `-shm` go).
//! - **PostgreSQL**: `pg_dump --format=custom` of the store's database; restore with
//!   `pg_restore --clean --if-exists --single-transaction`, refused while an MDS holds the store
//!   (its advisory lock, or an unexpired lease of `[mds] addrs`).
//!
//! No id is reused after a restore, and no OSD needs a restart: the restore marks the store
//! ([`COUNTER_RESTORED`]), and the MDS that opens it hands out no new segment or object id until
//! every OSD reported the largest id it holds (at registration, or in the first page of an
//! inventory, which heartbeat replies ask running OSDs for); its segment counter moves past them.
//! The chunks and block files of files written after the backup are orphans: deleted after
//! `[mds] orphan_grace_ms` (`crate::orphans`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::store::{
    sqlite_lock_path, MetadataStore, Mutation, SqliteStore, StoreError, COUNTER_RESTORED,
};

/// Now in unix ms (at least 1: the value of [`COUNTER_RESTORED`] after a restore).
fn restored_at() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_millis() as u64)
        .max(1)
}

/// Marks the SQLite database `file` (a checked backup's copy, not open elsewhere) as restored
/// ([`COUNTER_RESTORED`]), leaving it one self-contained file (rollback journal, so no `-wal`
/// holds the change).
fn mark_restored_sqlite(file: &Path) -> Result<(), StoreError> {
    let conn = rusqlite::Connection::open(file)?;
    conn.pragma_update(None, "journal_mode", "DELETE")?;
    conn.execute(
        "INSERT INTO counters VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
        rusqlite::params![COUNTER_RESTORED, i64::try_from(restored_at()).unwrap_or(i64::MAX)],
    )?;
    conn.close().map_err(|(_, e)| StoreError::from(e))
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{tool} failed: {message}")]
    Tool { tool: &'static str, message: String },
    #[error("{0}")]
    Refused(String),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> BackupError + 'a {
    move |source| BackupError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// `to` with `.part` appended: where a backup is written before it is complete.
fn part_of(to: &Path) -> PathBuf {
    let mut p = to.as_os_str().to_owned();
    p.push(".part");
    PathBuf::from(p)
}

/// Writes a backup to `to` through `fill` (which gets the open `.part` file), syncs it and
/// renames it into place; a failed `fill` leaves nothing at `to`.
pub fn write_atomically<E>(
    to: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> Result<(), E>,
) -> Result<(), BackupError>
where
    E: Into<BackupError>,
{
    let part = part_of(to);
    let mut f = std::fs::File::create(&part).map_err(io("cannot create", &part))?;
    let filled = fill(&mut f).map_err(Into::into);
    let done = filled.and_then(|()| {
        f.flush().map_err(io("cannot write", &part))?;
        f.sync_all().map_err(io("cannot sync", &part))
    });
    if let Err(e) = done {
        let _ = std::fs::remove_file(&part);
        return Err(e);
    }
    std::fs::rename(&part, to).map_err(io("cannot rename into place", to))
}

/// A consistent copy of the SQLite store `db` in the new file `to`, made beside the MDS that has
/// it open: a read-only connection of its own (it takes no store lock) runs `VACUUM INTO`, one read
/// transaction, while the MDS's connection goes on committing (WAL). The copy holds the state after
/// one committed transaction, the state a crash at that instant would leave.
pub fn snapshot_sqlite(db: &Path, to: &Path) -> Result<(), StoreError> {
    let to = to
        .to_str()
        .ok_or_else(|| StoreError::Db(format!("backup path {} is not UTF-8", to.display())))?;
    let conn = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| StoreError::Open {
        at: db.display().to_string(),
        message: e.to_string(),
    })?;
    // A reader waits only while the writer resets the WAL.
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.execute("VACUUM INTO ?1", [to])?;
    conn.close().map_err(|(_, e)| StoreError::from(e))
}

/// Opens the SQLite store copy at `file` (a backup) as the MDS would, in a scratch copy (the
/// backup itself is not changed); the committed files it holds.
pub fn check_sqlite(file: &Path) -> Result<u64, BackupError> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let scratch = dir.join(format!(
        ".{}.check-{}",
        file.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    std::fs::copy(file, &scratch).map_err(io("cannot copy", file))?;
    let opened = SqliteStore::open(&scratch).and_then(|s| Ok(s.totals()?.0));
    for p in [
        scratch.clone(),
        sqlite_lock_path(&scratch),
        PathBuf::from(format!("{}-wal", scratch.display())),
        PathBuf::from(format!("{}-shm", scratch.display())),
    ] {
        let _ = std::fs::remove_file(p);
    }
    opened.map_err(|e| {
        BackupError::Refused(format!(
            "{} is not a usable metadata backup: {e}",
            file.display()
        ))
    })
}

/// Replaces the SQLite store at `store` by the backup `from`, with its MDS stopped; the committed
/// files the restored store holds.
pub fn restore_sqlite(from: &Path, store: &Path) -> Result<u64, BackupError> {
    let files = check_sqlite(from)?;
    // The MDS's own lock: a running MDS holds it.
    let lock = ecstack_device::lock_file_with_pid(&sqlite_lock_path(store)).map_err(|e| {
        BackupError::Refused(format!(
            "metadata store {} is in use ({}); stop the MDS before a restore",
            store.display(),
            match e {
                ecstack_device::LockError::Busy { holder } => holder
                    .map(|h| format!("pid {}", h.pid))
                    .unwrap_or_else(|| "another process".into()),
                ecstack_device::LockError::Io(e) => e.to_string(),
            }
        ))
    })?;
    let part = part_of(store);
    std::fs::copy(from, &part).map_err(io("cannot copy", from))?;
    if let Err(e) = mark_restored_sqlite(&part) {
        let _ = std::fs::remove_file(&part);
        return Err(e.into());
    }
    std::fs::File::open(&part)
        .and_then(|f| f.sync_all())
        .map_err(io("cannot sync", &part))?;
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", store.display()));
    }
    std::fs::rename(&part, store).map_err(io("cannot rename into place", store))?;
    drop(lock);
    Ok(files)
}

fn pg_tool(bin: &'static str, args: &[&std::ffi::OsStr]) -> Result<(), BackupError> {
    let out = Command::new(bin)
        .args(args)
        .output()
        .map_err(|e| BackupError::Tool {
            tool: bin,
            message: format!("cannot run it ({e}); install PostgreSQL's client tools (Debian: postgresql-client)"),
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(BackupError::Tool {
            tool: bin,
            message: err.lines().next().unwrap_or("no message").to_owned(),
        });
    }
    Ok(())
}

/// `pg_dump --format=custom` of the database `url` into `to` (written whole or not at all).
pub fn pg_dump(url: &str, to: &Path) -> Result<(), BackupError> {
    let part = part_of(to);
    pg_tool(
        "pg_dump",
        &[
            "--format=custom".as_ref(),
            "--no-owner".as_ref(),
            "--file".as_ref(),
            part.as_os_str(),
            "--dbname".as_ref(),
            url.as_ref(),
        ],
    )?;
    std::fs::File::open(&part)
        .and_then(|f| f.sync_all())
        .map_err(io("cannot sync", &part))?;
    std::fs::rename(&part, to).map_err(io("cannot rename into place", to))
}

/// Restores a `pg_dump` of the store into the database `url`, refused while an MDS holds it;
/// the committed files it then holds.
pub fn pg_restore(url: &str, from: &Path) -> Result<u64, BackupError> {
    let shown = crate::store_pg::redact_url(url);
    let mut c =
        crate::store_pg::pg_connect(url, "restore", None).map_err(|message| StoreError::Open {
            at: shown.clone(),
            message,
        })?;
    // A single MDS holds the advisory lock while it runs.
    let free: bool = c
        .query_one(
            "SELECT pg_try_advisory_lock($1)",
            &[&crate::store_pg::PG_LOCK_KEY],
        )
        .map_err(StoreError::from)?
        .get(0);
    // Of an active MDS and its standbys, the active one holds an unexpired lease.
    let has_meta: bool = c
        .query_one("SELECT to_regclass('meta') IS NOT NULL", &[])
        .map_err(StoreError::from)?
        .get(0);
    let holder: Option<String> = if has_meta {
        c.query_opt(
            "SELECT split_part(value, ' ', 3) FROM meta WHERE key = $1
             AND CAST(split_part(value, ' ', 2) AS BIGINT)
                 > CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
            &[&crate::lease::LEASE_KEY],
        )
        .map_err(StoreError::from)?
        .map(|r| r.get(0))
    } else {
        None
    };
    if let Some(holder) = holder {
        return Err(BackupError::Refused(format!(
            "metadata store {shown} has an active MDS ({holder}); stop the MDSs before a restore"
        )));
    }
    if !free {
        return Err(BackupError::Refused(format!(
            "metadata store {shown} is in use by an MDS; stop it before a restore"
        )));
    }
    pg_tool(
        "pg_restore",
        &[
            "--clean".as_ref(),
            "--if-exists".as_ref(),
            "--no-owner".as_ref(),
            "--single-transaction".as_ref(),
            "--dbname".as_ref(),
            url.as_ref(),
            from.as_os_str(),
        ],
    )?;
    drop(c);
    let mut store = crate::store_pg::PgStore::connect(url)?;
    store.apply(&[Mutation::SetCounter {
        name: COUNTER_RESTORED,
        value: restored_at(),
    }])?;
    Ok(store.totals()?.0)
}
