//! The one internal record type every parser produces and everything else consumes.

use crate::hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// Analysis granularity: the working set is measured in 4 KiB blocks.
pub const BLOCK_SIZE: u64 = 4096;

/// The operation of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Write,
    /// TRIM / discard (blkparse `D` in rwbs, fio `trim`): counted, not part of the working set.
    Discard,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Discard => "discard",
        }
    }
}

/// One request of a block or file trace.
///
/// - `time_ns`: nanoseconds; absolute (Unix epoch) where the format has absolute times, otherwise
///   relative to the start of the trace.
/// - `volume`: index into the trace's [`Names`] of volumes (MSR `host_disk`, SPC `asuN`, blkparse
///   `maj,min`, fio file name, NFS server).
/// - `file`: 0 for block traces; for file traces (NFS) a dense id (from 1) of the file handle.
/// - `offset`, `len`: bytes (within the volume, or within the file for file traces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub time_ns: u64,
    pub volume: u32,
    pub file: u32,
    pub op: Op,
    pub offset: u64,
    pub len: u64,
}

impl Record {
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

/// Interned names (volumes, file handles): dense `u32` ids in order of first appearance.
#[derive(Debug, Clone, Default)]
pub struct Names {
    names: Vec<String>,
    index: FxHashMap<Box<[u8]>, u32>,
}

impl Names {
    pub fn new() -> Self {
        Self::default()
    }
    /// The id of `name`, adding it if new.
    pub fn intern(&mut self, name: &[u8]) -> u32 {
        if let Some(&id) = self.index.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(String::from_utf8_lossy(name).into_owned());
        self.index.insert(name.into(), id);
        id
    }
    pub fn get(&self, name: &str) -> Option<u32> {
        self.index.get(name.as_bytes()).copied()
    }
    pub fn name(&self, id: u32) -> &str {
        self.names
            .get(id as usize)
            .map(|s| s.as_str())
            .unwrap_or("?")
    }
    pub fn len(&self) -> usize {
        self.names.len()
    }
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|s| s.as_str())
    }
}
