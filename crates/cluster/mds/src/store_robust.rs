//! Robust files in the metadata store (schema version 4; RobuSTore on the cluster): a robust
//! file's coding ([`RobustFileRecord`]), its objects ([`RobustObjectRecord`]), the committed coded
//! blocks of each object and where they live ([`BlockRecord`]), and the blocks OSDs must drop
//! ([`ObjectDeleteRecord`]). The file itself is a row of `files` like any other (its inode, path,
//! size and commit), with no segments.
//!
//! The tables (both engines; `REAL`-free so both read them alike: D and LT's C and δ are kept as
//! the text of the `f64`, which reads back exactly):
//!
//! ```text
//! robust_files   (file_id PK → files, code, block_bytes, redundancy, object_blocks, lt_c, lt_delta)
//! robust_objects (object_id PK, file_id → files, obj_index, length, k, n, id_space, seed, version;
//!                 UNIQUE (file_id, obj_index))
//! robust_blocks  (object_id → robust_objects, block_id, version, osd_id; PK (object_id, block_id))
//! object_delete_tasks (osd_id, object_id, block_id (-1: every block), version; PK all four)
//! ```

use ecstack_mds_proto::{RobustBlockKey, RobustCode, RobustParams};

use crate::store::StoreError;
use crate::store_sql::{get_i, get_text, get_u, get_u32, stmt, v, v32, Db, SqlStore, Stmt, Value};

/// A robust file's coding (one per robust file).
#[derive(Debug, Clone, PartialEq)]
pub struct RobustFileRecord {
    pub file_id: u64,
    pub params: RobustParams,
}

/// One object of a robust file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RobustObjectRecord {
    pub object_id: u64,
    pub file_id: u64,
    pub index: u32,
    pub length: u64,
    pub k: u32,
    pub n: u32,
    pub id_space: u32,
    pub seed: u64,
    pub version: u64,
}

/// A committed coded block and its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BlockRecord {
    pub object_id: u64,
    pub key: RobustBlockKey,
    pub osd_id: u32,
}

/// Blocks an OSD must drop: `block` `None` for every block of the object it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectDeleteRecord {
    pub osd_id: u32,
    pub object_id: u64,
    pub block: Option<RobustBlockKey>,
}

/// Per committed robust object: its n and how many of its blocks each holder keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectCensus {
    pub object_id: u64,
    pub n: u32,
    /// (holder, blocks on it), by holder.
    pub holders: Vec<(u32, u64)>,
}

/// A change to the robust tables (one [`crate::store::Mutation::Robust`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RobustMutation {
    /// Insert or replace (by file id) a robust file's coding.
    PutFile(RobustFileRecord),
    /// Insert or replace (by object id) an object.
    PutObject(RobustObjectRecord),
    /// Insert or replace block (object, id).
    PutBlock(BlockRecord),
    /// Remove block (object, id) from the map.
    DeleteBlock {
        object_id: u64,
        id: u32,
    },
    PutDelete(ObjectDeleteRecord),
    /// Remove every delete task of `osd_id` for `object_id`.
    RemoveDeletes {
        osd_id: u32,
        object_id: u64,
    },
}

/// The tables of version 4 on SQLite (PostgreSQL: [`PG_SCHEMA_V4`]).
pub const SCHEMA_V4: &str = "
CREATE TABLE robust_files (
    file_id INTEGER PRIMARY KEY REFERENCES files(file_id),
    code TEXT NOT NULL,
    block_bytes INTEGER NOT NULL,
    redundancy TEXT NOT NULL,
    object_blocks INTEGER NOT NULL,
    lt_c TEXT NOT NULL,
    lt_delta TEXT NOT NULL
);
CREATE TABLE robust_objects (
    object_id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files(file_id),
    obj_index INTEGER NOT NULL,
    length INTEGER NOT NULL,
    k INTEGER NOT NULL,
    n INTEGER NOT NULL,
    id_space INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    version INTEGER NOT NULL,
    UNIQUE (file_id, obj_index)
);
CREATE TABLE robust_blocks (
    object_id INTEGER NOT NULL REFERENCES robust_objects(object_id),
    block_id INTEGER NOT NULL,
    version INTEGER NOT NULL,
    osd_id INTEGER NOT NULL,
    PRIMARY KEY (object_id, block_id)
);
CREATE INDEX robust_blocks_osd ON robust_blocks(osd_id);
CREATE TABLE object_delete_tasks (
    osd_id INTEGER NOT NULL,
    object_id INTEGER NOT NULL,
    block_id INTEGER NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (osd_id, object_id, block_id, version)
);
";

/// [`SCHEMA_V4`] with PostgreSQL's types.
pub const PG_SCHEMA_V4: &str = "
CREATE TABLE robust_files (
    file_id BIGINT PRIMARY KEY REFERENCES files(file_id),
    code TEXT NOT NULL,
    block_bytes BIGINT NOT NULL,
    redundancy TEXT NOT NULL,
    object_blocks BIGINT NOT NULL,
    lt_c TEXT NOT NULL,
    lt_delta TEXT NOT NULL
);
CREATE TABLE robust_objects (
    object_id BIGINT PRIMARY KEY,
    file_id BIGINT NOT NULL REFERENCES files(file_id),
    obj_index BIGINT NOT NULL,
    length BIGINT NOT NULL,
    k BIGINT NOT NULL,
    n BIGINT NOT NULL,
    id_space BIGINT NOT NULL,
    seed BIGINT NOT NULL,
    version BIGINT NOT NULL,
    UNIQUE (file_id, obj_index)
);
CREATE TABLE robust_blocks (
    object_id BIGINT NOT NULL REFERENCES robust_objects(object_id),
    block_id BIGINT NOT NULL,
    version BIGINT NOT NULL,
    osd_id BIGINT NOT NULL,
    PRIMARY KEY (object_id, block_id)
);
CREATE INDEX robust_blocks_osd ON robust_blocks(osd_id);
CREATE TABLE object_delete_tasks (
    osd_id BIGINT NOT NULL,
    object_id BIGINT NOT NULL,
    block_id BIGINT NOT NULL,
    version BIGINT NOT NULL,
    PRIMARY KEY (osd_id, object_id, block_id, version)
);
";

fn text_f64(x: f64) -> Value {
    Value::Text(x.to_string())
}

fn get_f64(r: &[Value], i: usize) -> Result<f64, StoreError> {
    let t = get_text(r, i)?;
    t.parse::<f64>()
        .map_err(|_| StoreError::Corrupt(format!("column {i}: {t:?} is not a number")))
}

/// The statements of one robust mutation.
pub(crate) fn statements(m: &RobustMutation, out: &mut Vec<Stmt>) {
    match m {
        RobustMutation::PutFile(f) => out.push(stmt(
            "INSERT INTO robust_files VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(file_id) DO UPDATE SET
             code = excluded.code, block_bytes = excluded.block_bytes, redundancy = excluded.redundancy,
             object_blocks = excluded.object_blocks, lt_c = excluded.lt_c, lt_delta = excluded.lt_delta",
            vec![
                v(f.file_id),
                Value::Text(f.params.code.name().to_owned()),
                v32(f.params.block_bytes),
                text_f64(f.params.redundancy),
                v32(f.params.object_blocks),
                text_f64(f.params.lt_c),
                text_f64(f.params.lt_delta),
            ],
        )),
        RobustMutation::PutObject(o) => out.push(stmt(
            "INSERT INTO robust_objects VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT(object_id) DO UPDATE SET
             file_id = excluded.file_id, obj_index = excluded.obj_index, length = excluded.length,
             k = excluded.k, n = excluded.n, id_space = excluded.id_space, seed = excluded.seed,
             version = excluded.version",
            vec![
                v(o.object_id),
                v(o.file_id),
                v32(o.index),
                v(o.length),
                v32(o.k),
                v32(o.n),
                v32(o.id_space),
                v(o.seed),
                v(o.version),
            ],
        )),
        RobustMutation::PutBlock(b) => out.push(stmt(
            "INSERT INTO robust_blocks VALUES (?1, ?2, ?3, ?4) ON CONFLICT(object_id, block_id) DO UPDATE SET
             version = excluded.version, osd_id = excluded.osd_id",
            vec![v(b.object_id), v32(b.key.id), v(b.key.version), v32(b.osd_id)],
        )),
        RobustMutation::DeleteBlock { object_id, id } => out.push(stmt(
            "DELETE FROM robust_blocks WHERE object_id = ?1 AND block_id = ?2",
            vec![v(*object_id), v32(*id)],
        )),
        RobustMutation::PutDelete(d) => out.push(stmt(
            "INSERT INTO object_delete_tasks VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
            vec![
                v32(d.osd_id),
                v(d.object_id),
                d.block.map_or(Value::Integer(-1), |k| v32(k.id)),
                d.block.map_or(Value::Integer(0), |k| v(k.version)),
            ],
        )),
        RobustMutation::RemoveDeletes { osd_id, object_id } => out.push(stmt(
            "DELETE FROM object_delete_tasks WHERE osd_id = ?1 AND object_id = ?2",
            vec![v32(*osd_id), v(*object_id)],
        )),
    }
}

/// The statements that remove a file's robust rows (run before the file's own removal).
pub(crate) fn delete_file_statements(file_id: u64, out: &mut Vec<Stmt>) {
    out.push(stmt(
        "DELETE FROM robust_blocks WHERE object_id IN (SELECT object_id FROM robust_objects WHERE file_id = ?1)",
        vec![v(file_id)],
    ));
    out.push(stmt(
        "DELETE FROM robust_objects WHERE file_id = ?1",
        vec![v(file_id)],
    ));
    out.push(stmt(
        "DELETE FROM robust_files WHERE file_id = ?1",
        vec![v(file_id)],
    ));
}

fn object_of(r: &[Value]) -> Result<RobustObjectRecord, StoreError> {
    Ok(RobustObjectRecord {
        object_id: get_u(r, 0)?,
        file_id: get_u(r, 1)?,
        index: get_u32(r, 2)?,
        length: get_u(r, 3)?,
        k: get_u32(r, 4)?,
        n: get_u32(r, 5)?,
        id_space: get_u32(r, 6)?,
        seed: get_u(r, 7)?,
        version: get_u(r, 8)?,
    })
}

const OBJECT_COLUMNS: &str = "object_id, file_id, obj_index, length, k, n, id_space, seed, version";

impl<D: Db> SqlStore<D> {
    pub(crate) fn robust_file_row(
        &self,
        file_id: u64,
    ) -> Result<Option<RobustFileRecord>, StoreError> {
        let Some(r) = self
            .db
            .query(
                "SELECT file_id, code, block_bytes, redundancy, object_blocks, lt_c, lt_delta FROM robust_files WHERE file_id = ?1",
                &[v(file_id)],
            )?
            .into_iter()
            .next()
        else {
            return Ok(None);
        };
        Ok(Some(RobustFileRecord {
            file_id: get_u(&r, 0)?,
            params: RobustParams {
                code: RobustCode::parse(&get_text(&r, 1)?).map_err(StoreError::Corrupt)?,
                block_bytes: get_u32(&r, 2)?,
                redundancy: get_f64(&r, 3)?,
                object_blocks: get_u32(&r, 4)?,
                lt_c: get_f64(&r, 5)?,
                lt_delta: get_f64(&r, 6)?,
            },
        }))
    }

    pub(crate) fn robust_objects_of(
        &self,
        file_id: u64,
    ) -> Result<Vec<RobustObjectRecord>, StoreError> {
        let sql = format!(
            "SELECT {OBJECT_COLUMNS} FROM robust_objects WHERE file_id = ?1 ORDER BY obj_index"
        );
        self.db
            .query(&sql, &[v(file_id)])?
            .iter()
            .map(|r| object_of(r))
            .collect()
    }

    pub(crate) fn robust_object_row(
        &self,
        object_id: u64,
    ) -> Result<Option<RobustObjectRecord>, StoreError> {
        let sql = format!("SELECT {OBJECT_COLUMNS} FROM robust_objects WHERE object_id = ?1");
        self.db
            .query(&sql, &[v(object_id)])?
            .first()
            .map(|r| object_of(r))
            .transpose()
    }

    pub(crate) fn blocks_of(&self, object_id: u64) -> Result<Vec<BlockRecord>, StoreError> {
        self.db
            .query(
                "SELECT object_id, block_id, version, osd_id FROM robust_blocks WHERE object_id = ?1 ORDER BY block_id",
                &[v(object_id)],
            )?
            .iter()
            .map(|r| {
                Ok(BlockRecord {
                    object_id: get_u(r, 0)?,
                    key: RobustBlockKey {
                        id: get_u32(r, 1)?,
                        version: get_u(r, 2)?,
                    },
                    osd_id: get_u32(r, 3)?,
                })
            })
            .collect()
    }

    pub(crate) fn object_deletes_of(
        &self,
        osd_id: u32,
    ) -> Result<Vec<ObjectDeleteRecord>, StoreError> {
        self.db
            .query(
                "SELECT osd_id, object_id, block_id, version FROM object_delete_tasks WHERE osd_id = ?1 ORDER BY object_id, block_id, version",
                &[v32(osd_id)],
            )?
            .iter()
            .map(|r| {
                let id = get_i(r, 2)?;
                Ok(ObjectDeleteRecord {
                    osd_id: get_u32(r, 0)?,
                    object_id: get_u(r, 1)?,
                    block: if id < 0 {
                        None
                    } else {
                        Some(RobustBlockKey {
                            id: u32::try_from(id).map_err(|_| {
                                StoreError::Corrupt(format!("block id {id} out of range"))
                            })?,
                            version: get_u(r, 3)?,
                        })
                    },
                })
            })
            .collect()
    }

    /// (committed robust files, per committed object its n and blocks per holder).
    pub(crate) fn robust_census_rows(&self) -> Result<(u64, Vec<ObjectCensus>), StoreError> {
        let files = self
            .db
            .query(
                "SELECT COUNT(*) FROM robust_files r JOIN files f ON f.file_id = r.file_id WHERE f.committed = 1",
                &[],
            )?
            .first()
            .map(|r| get_u(r, 0))
            .transpose()?
            .unwrap_or(0);
        let mut out: Vec<ObjectCensus> = Vec::new();
        for r in self.db.query(
            "SELECT o.object_id, o.n, b.osd_id, COUNT(b.block_id)
             FROM robust_objects o JOIN files f ON f.file_id = o.file_id AND f.committed = 1
             LEFT JOIN robust_blocks b ON b.object_id = o.object_id
             GROUP BY o.object_id, o.n, b.osd_id ORDER BY o.object_id, b.osd_id",
            &[],
        )? {
            let object_id = get_u(&r, 0)?;
            if out.last().map(|c| c.object_id) != Some(object_id) {
                out.push(ObjectCensus {
                    object_id,
                    n: get_u32(&r, 1)?,
                    holders: Vec::new(),
                });
            }
            if let Value::Integer(osd) = r[2] {
                let osd = u32::try_from(osd)
                    .map_err(|_| StoreError::Corrupt(format!("OSD id {osd} out of range")))?;
                out.last_mut()
                    .expect("pushed above")
                    .holders
                    .push((osd, get_u(&r, 3)?));
            }
        }
        Ok((files, out))
    }
}
