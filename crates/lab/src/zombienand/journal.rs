//! What the long ZombieNAND runs share: a pool of worker threads over a list of work items, and a
//! journal of finished items so a killed run continues where it stopped.
//!
//! # Journal format (JSON Lines)
//! Line 1 is a header naming the run (the caller's type: format name, version, configuration); every
//! further line is one finished item, appended and synced (`sync_data`) before the item is reported
//! done. On open, a header that differs from the caller's refuses the journal (another run's), a last
//! line without its newline (torn by a kill) or that does not parse is cut off and its item runs
//! again. Floats are written and read back exactly (`serde_json`'s `float_roundtrip`), so a resumed
//! run reports byte for byte what an uninterrupted one would. The caller removes the journal once its
//! report is written.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{io_at, LabError, Result};

/// An open journal, appended to by the worker threads.
pub(crate) struct Journal {
    file: Mutex<File>,
    path: PathBuf,
}

/// What [`open`] found.
pub(crate) struct Opened<R> {
    pub journal: Journal,
    /// Items finished by earlier runs, in journal order (duplicates are the caller's to drop).
    pub done: Vec<R>,
    /// True when no journal existed: the run starts from nothing.
    pub fresh: bool,
}

/// Opens the journal at `path`, or starts it with `header`. A journal whose header differs is
/// refused with `mismatch(found header)` as the message.
pub(crate) fn open<H, R>(
    path: &Path,
    header: &H,
    mismatch: &dyn Fn(&H) -> String,
) -> Result<Opened<R>>
where
    H: Serialize + DeserializeOwned + PartialEq,
    R: DeserializeOwned,
{
    let bad = |m: String| LabError::Run(format!("{}: {m}", path.display()));
    let mut done = Vec::new();
    let (keep, fresh) = match std::fs::read(path) {
        Ok(bytes) => {
            let mut lines = bytes.split_inclusive(|&b| b == b'\n');
            let first = lines.next().unwrap_or(&[]);
            let got: H = serde_json::from_slice(first).map_err(|e| {
                bad(format!(
                    "not a journal of this run ({e}); remove it to start over"
                ))
            })?;
            if got != *header {
                return Err(bad(mismatch(&got)));
            }
            let mut keep = first.len();
            for line in lines {
                if line.last() != Some(&b'\n') {
                    break; // torn by a kill: that item runs again
                }
                match serde_json::from_slice::<R>(line) {
                    Ok(r) => done.push(r),
                    Err(_) => break,
                }
                keep += line.len();
            }
            (keep, false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut f = File::create(path).map_err(io_at(path))?;
            let mut line = serde_json::to_vec(header).map_err(|e| bad(e.to_string()))?;
            line.push(b'\n');
            f.write_all(&line).map_err(io_at(path))?;
            f.sync_data().map_err(io_at(path))?;
            (line.len(), true)
        }
        Err(e) => return Err(io_at(path)(e)),
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_at(path))?;
    f.set_len(keep as u64).map_err(io_at(path))?;
    f.seek(SeekFrom::End(0)).map_err(io_at(path))?;
    Ok(Opened {
        journal: Journal {
            file: Mutex::new(f),
            path: path.to_path_buf(),
        },
        done,
        fresh,
    })
}

impl Journal {
    /// Appends one finished item as a synced line.
    pub(crate) fn append<R: Serialize>(&self, r: &R) -> Result<()> {
        let path = &self.path;
        let mut line =
            serde_json::to_vec(r).map_err(|e| LabError::Run(format!("{}: {e}", path.display())))?;
        line.push(b'\n');
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        f.write_all(&line).map_err(io_at(path))?;
        f.sync_data().map_err(io_at(path))
    }
}

/// Runs `work` over `items` on up to `jobs` threads. Each success is first handed to `finish`
/// (journaling, cleanup; an error there fails the item), then to `done` (progress). Results come
/// back in item order; the first error in item order is returned after every thread has stopped.
pub(crate) fn run_parallel<T, R>(
    items: &[T],
    jobs: usize,
    work: &(dyn Fn(&T) -> Result<R> + Sync),
    finish: &(dyn Fn(&T, &R) -> Result<()> + Sync),
    done: &(dyn Fn(&R) + Sync),
) -> Result<Vec<R>>
where
    T: Sync,
    R: Send,
{
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<(usize, Result<R>)>> = Mutex::new(Vec::with_capacity(items.len()));
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1).min(items.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = work(item).and_then(|r| finish(item, &r).map(|()| r));
                if let Ok(r) = &r {
                    done(r);
                }
                out.lock().unwrap_or_else(|e| e.into_inner()).push((i, r));
            });
        }
    });
    let mut out = out.into_inner().unwrap_or_else(|e| e.into_inner());
    out.sort_by_key(|x| x.0);
    out.into_iter().map(|x| x.1).collect()
}
