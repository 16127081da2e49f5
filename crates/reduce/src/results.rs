//! The results directory (format documented in docs/reduce.md):
//! - `manifest.json`: format name and version, root, shard, sample fraction, configurations, walk and
//!   problem counts, timings, dedup totals;
//! - `results.sqlite`: tables `file`, `outcome`, `problem`, `dedup_totals`;
//! - `chunks/c<config>/*.run`: the sorted chunk-record runs of each dedup configuration (`index.rs`).

use crate::config::{Configuration, Method};
use crate::index::{self, DedupTotals};
use crate::ReduceError;
use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub const FORMAT: &str = "ecstack-reduce-results";
pub const FORMAT_VERSION: u32 = 1;
pub const MANIFEST: &str = "manifest.json";
pub const DATABASE: &str = "results.sqlite";

/// What the walk saw (all files of the tree, selected or not).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalkCounts {
    pub directories: u64,
    pub files: u64,
    pub bytes: u64,
    /// Symbolic links not followed (not `follow_symlinks`).
    pub symlinks_skipped: u64,
}

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub root: String,
    /// `[i, N]` for a shard, absent for a whole run or a merge.
    pub shard: Option<[u32; 2]>,
    /// Fraction of files analysed (1.0 = all).
    pub sample_fraction: f64,
    /// A bytes-weighted sample's spacing (`analyze --sample-bytes`); absent otherwise (and in
    /// results written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_bytes: Option<u64>,
    pub configurations: Vec<Configuration>,
    pub walk: WalkCounts,
    /// Files and bytes analysed (read).
    pub files: u64,
    pub bytes: u64,
    /// Problems by kind (permission_denied, unreadable, special_file, symlink_loop, changed_while_read, walk_error).
    pub problems: BTreeMap<String, u64>,
    pub wall_seconds: f64,
    /// Dedup totals by configuration id (after the dedup accounting).
    pub dedup: BTreeMap<u32, DedupTotals>,
}

impl Manifest {
    pub fn load(dir: &Path) -> Result<Manifest, ReduceError> {
        let p = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&p).map_err(|e| {
            ReduceError::Usage(format!(
                "{} is not a results directory ({}: {e})",
                dir.display(),
                p.display()
            ))
        })?;
        let m: Manifest = serde_json::from_str(&text)
            .map_err(|e| ReduceError::Corrupt(format!("{}: {e}", p.display())))?;
        if m.format != FORMAT {
            return Err(ReduceError::Corrupt(format!(
                "{}: not an ecstack reduce manifest",
                p.display()
            )));
        }
        if m.version != FORMAT_VERSION {
            return Err(ReduceError::Corrupt(format!(
                "{}: results format version {}, this build reads {FORMAT_VERSION}",
                p.display(),
                m.version
            )));
        }
        Ok(m)
    }

    pub fn save(&self, dir: &Path) -> Result<(), ReduceError> {
        let p = dir.join(MANIFEST);
        let tmp = dir.join("manifest.json.tmp");
        let text = serde_json::to_string_pretty(self).expect("manifest serializes");
        std::fs::write(&tmp, text)
            .map_err(|e| ReduceError::Io(format!("{}: {e}", tmp.display())))?;
        std::fs::rename(&tmp, &p).map_err(|e| ReduceError::Io(format!("{}: {e}", p.display())))?;
        Ok(())
    }
}

/// Create a new, empty results directory (refusing one that holds results).
pub fn create_dir(dir: &Path, configs: &[Configuration]) -> Result<Connection, ReduceError> {
    if dir.join(MANIFEST).exists() || dir.join(DATABASE).exists() {
        return Err(ReduceError::Usage(format!(
            "{} already holds results; choose a new directory",
            dir.display()
        )));
    }
    let io = |e: std::io::Error| ReduceError::Io(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    for c in configs {
        if matches!(c.method, Method::Dedup { .. }) {
            std::fs::create_dir_all(chunk_dir(dir, c.id)).map_err(io)?;
        }
    }
    let conn = Connection::open(dir.join(DATABASE))?;
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
         CREATE TABLE file(seq INTEGER PRIMARY KEY, path TEXT NOT NULL, dir TEXT NOT NULL, ext TEXT NOT NULL, bytes INTEGER NOT NULL);
         CREATE TABLE outcome(config INTEGER NOT NULL, seq INTEGER NOT NULL, reduced_bytes INTEGER NOT NULL, nanos INTEGER NOT NULL,
                              PRIMARY KEY(config, seq)) WITHOUT ROWID;
         CREATE TABLE problem(path TEXT NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL);
         CREATE TABLE dedup_totals(config INTEGER PRIMARY KEY, chunks INTEGER, unique_chunks INTEGER, bytes INTEGER,
                                   unique_bytes INTEGER, collisions INTEGER);",
    )?;
    Ok(conn)
}

pub fn open_db(dir: &Path) -> Result<Connection, ReduceError> {
    let p = dir.join(DATABASE);
    if !p.exists() {
        return Err(ReduceError::Usage(format!(
            "{} is not a results directory (no {DATABASE})",
            dir.display()
        )));
    }
    Ok(Connection::open(p)?)
}

pub fn chunk_dir(dir: &Path, config: u32) -> PathBuf {
    dir.join("chunks").join(format!("c{config}"))
}

/// Problem counts by kind, from the `problem` table.
pub fn problem_counts(conn: &Connection) -> Result<BTreeMap<String, u64>, ReduceError> {
    let mut st = conn.prepare("SELECT kind, COUNT(*) FROM problem GROUP BY kind ORDER BY kind")?;
    let rows = st.query_map([], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The dedup accounting: reset every dedup outcome to the file's bytes, merge the runs, subtract
/// each duplicate occurrence from its file. Memory is bounded: per-file sums flush to the database.
pub fn account_dedup(
    dir: &Path,
    conn: &mut Connection,
    configs: &[Configuration],
) -> Result<BTreeMap<u32, DedupTotals>, ReduceError> {
    const PENDING_MAX: usize = 1 << 20;
    let mut all = BTreeMap::new();
    for c in configs
        .iter()
        .filter(|c| matches!(c.method, Method::Dedup { .. }))
    {
        let tx = conn.transaction()?;
        tx.execute(
            "UPDATE outcome SET reduced_bytes = (SELECT bytes FROM file WHERE file.seq = outcome.seq) WHERE config = ?1",
            [c.id],
        )?;
        let runs = index::run_files(&chunk_dir(dir, c.id))?;
        let mut pending: HashMap<u64, u64> = HashMap::new();
        let flush = |pending: &mut HashMap<u64, u64>,
                     tx: &rusqlite::Transaction|
         -> Result<(), ReduceError> {
            let mut st = tx.prepare_cached("UPDATE outcome SET reduced_bytes = reduced_bytes - ?1 WHERE config = ?2 AND seq = ?3")?;
            for (seq, b) in pending.drain() {
                st.execute(params![b as i64, c.id, seq as i64])?;
            }
            Ok(())
        };
        let totals = index::account(&runs, |seq, bytes| {
            *pending.entry(seq).or_default() += bytes;
            if pending.len() >= PENDING_MAX {
                flush(&mut pending, &tx)?;
            }
            Ok(())
        })?;
        flush(&mut pending, &tx)?;
        tx.execute(
            "INSERT OR REPLACE INTO dedup_totals VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                c.id,
                totals.chunks as i64,
                totals.unique_chunks as i64,
                totals.bytes as i64,
                totals.unique_bytes as i64,
                totals.collisions as i64
            ],
        )?;
        tx.commit()?;
        all.insert(c.id, totals);
    }
    Ok(all)
}

/// Combine the result directories of shards 0..N of one tree into `out`: exactly the result one machine
/// gives (the per-file compression outcomes are unions; the dedup accounting is redone over every
/// shard's chunk runs, so duplicates across shards count).
pub fn merge(out: &Path, shards: &[PathBuf]) -> Result<Manifest, ReduceError> {
    let t0 = std::time::Instant::now();
    if shards.is_empty() {
        return Err(ReduceError::Usage(
            "merge needs the result directories of the shards".into(),
        ));
    }
    let ms = shards
        .iter()
        .map(|d| Manifest::load(d))
        .collect::<Result<Vec<_>, _>>()?;
    let n = match ms[0].shard {
        Some([_, n]) => n,
        None => {
            return Err(ReduceError::Usage(format!(
                "{} is not a shard's result (analyze --shard i/N)",
                shards[0].display()
            )))
        }
    };
    let mut seen = vec![false; n as usize];
    for (m, d) in ms.iter().zip(shards) {
        let [i, nn] = m.shard.ok_or_else(|| {
            ReduceError::Usage(format!("{} is not a shard's result", d.display()))
        })?;
        if nn != n
            || m.configurations != ms[0].configurations
            || m.root != ms[0].root
            || m.sample_fraction != ms[0].sample_fraction
            || m.sample_bytes != ms[0].sample_bytes
            || m.walk != ms[0].walk
        {
            return Err(ReduceError::Usage(format!(
                "{} is from a different analysis (root, configurations, sample, shard count or tree differ)",
                d.display()
            )));
        }
        if std::mem::replace(&mut seen[i as usize], true) {
            return Err(ReduceError::Usage(format!("shard {i}/{n} is given twice")));
        }
    }
    if let Some(i) = seen.iter().position(|s| !s) {
        return Err(ReduceError::Usage(format!("shard {i}/{n} is missing")));
    }
    let configs = ms[0].configurations.clone();
    let mut conn = create_dir(out, &configs)?;
    for (m, d) in ms.iter().zip(shards) {
        let db = d.join(DATABASE);
        conn.execute("ATTACH DATABASE ?1 AS shard", [db.to_string_lossy()])?;
        conn.execute_batch(
            "BEGIN; INSERT INTO file SELECT * FROM shard.file; INSERT INTO outcome SELECT * FROM shard.outcome;
             INSERT INTO problem SELECT * FROM shard.problem; COMMIT;",
        )?;
        conn.execute("DETACH DATABASE shard", [])?;
        let i = m.shard.expect("checked")[0];
        for c in configs
            .iter()
            .filter(|c| matches!(c.method, Method::Dedup { .. }))
        {
            for run in index::run_files(&chunk_dir(d, c.id))? {
                let name = run.file_name().expect("run name").to_string_lossy();
                let to = chunk_dir(out, c.id).join(format!("s{i:05}-{name}"));
                if std::fs::hard_link(&run, &to).is_err() {
                    std::fs::copy(&run, &to)
                        .map_err(|e| ReduceError::Io(format!("{}: {e}", to.display())))?;
                }
            }
        }
    }
    let dedup = account_dedup(out, &mut conn, &configs)?;
    let manifest = Manifest {
        format: FORMAT.into(),
        version: FORMAT_VERSION,
        root: ms[0].root.clone(),
        shard: None,
        sample_fraction: ms[0].sample_fraction,
        sample_bytes: ms[0].sample_bytes,
        configurations: configs,
        walk: ms[0].walk.clone(),
        files: ms.iter().map(|m| m.files).sum(),
        bytes: ms.iter().map(|m| m.bytes).sum(),
        problems: problem_counts(&conn)?,
        wall_seconds: ms.iter().map(|m| m.wall_seconds).fold(0.0, f64::max)
            + t0.elapsed().as_secs_f64(),
        dedup,
    };
    manifest.save(out)?;
    Ok(manifest)
}
