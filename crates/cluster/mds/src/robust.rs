//! Robust files at the MDS (RobuSTore on the cluster; docs/robustore.md "On the cluster"). The
//! MDS records what a robust writer did and hands out nothing but object ids: the client chooses
//! the coding (K, N, the id space N′, the LT seed), the OSDs and the blocks, and commits the block
//! map once the blocks are durable. A robust put is `create_robust_file` → blocks to OSDs →
//! `commit_robust_file` (visible, or replacing the file at the path, at the commit); an update is
//! `update_robust_object` (the object's next version). Blocks no longer in a map (a replaced or
//! removed file, an update's obsolete blocks) become delete tasks for their holders, handed out in
//! heartbeat replies like chunk deletions.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::store::{
    BlockRecord, ObjectDeleteRecord, RobustFileRecord, RobustMutation, RobustObjectRecord,
};
use ecstack_mds_proto::{
    BlockPlacement, DeleteObjectTask, RobustBlockKey, RobustInfo, RobustObject, RobustParams,
    RobustUpdate,
};

/// Most objects one robust file may have.
pub const MAX_ROBUST_OBJECTS: usize = 1 << 16;
/// Most coded ids one object may use (its N′).
pub const MAX_ID_SPACE: u32 = 1 << 24;

fn invalid(msg: String) -> MdsError {
    MdsError::InvalidArgument(msg)
}

impl MdsCore {
    /// Starts a robust put of `path` of `size` bytes: checks the coding and the objects (index,
    /// length, k, n, id_space and seed each; their lengths sum to `size`), records a pending file
    /// with them, and returns the file id and each object's id (from the segment counter, so
    /// chunk and block keys never meet).
    pub fn create_robust_file(
        &mut self,
        path: &str,
        params: RobustParams,
        size: u64,
        objects: &[RobustObject],
    ) -> Result<(u64, Vec<u64>), MdsError> {
        params.check().map_err(invalid)?;
        if objects.len() > MAX_ROBUST_OBJECTS {
            return Err(invalid(format!(
                "{path}: {} objects; a robust file has at most {MAX_ROBUST_OBJECTS}",
                objects.len()
            )));
        }
        let block = u64::from(params.block_bytes);
        let mut total = 0u64;
        for (i, o) in objects.iter().enumerate() {
            let what = format!("{path}: object #{i}");
            if o.index as usize != i {
                return Err(invalid(format!("{what} has index {}", o.index)));
            }
            let k = o.length.div_ceil(block);
            if o.length == 0 || k != u64::from(o.k) {
                return Err(invalid(format!(
                    "{what}: {} bytes in blocks of {block} make {k} source blocks, not K = {}",
                    o.length, o.k
                )));
            }
            if o.k > params.object_blocks {
                return Err(invalid(format!(
                    "{what}: K = {} exceeds the file's {} source blocks per object",
                    o.k, params.object_blocks
                )));
            }
            if !(o.k < o.n && o.n <= o.id_space && o.id_space <= MAX_ID_SPACE) {
                return Err(invalid(format!(
                    "{what}: needs K < N <= N' <= {MAX_ID_SPACE} (K = {}, N = {}, N' = {})",
                    o.k, o.n, o.id_space
                )));
            }
            total = total.saturating_add(o.length);
        }
        if total != size {
            return Err(invalid(format!(
                "{path}: the objects hold {total} bytes, the file is {size}"
            )));
        }
        self.ids_free()?;
        let (mut batch, file_id) = self.start_file(path, None)?;
        batch.push(Mutation::Robust(RobustMutation::PutFile(
            RobustFileRecord { file_id, params },
        )));
        let mut ids = Vec::with_capacity(objects.len());
        for o in objects {
            let object_id = batch.next(self.store.as_ref(), COUNTER_SEGMENT)?;
            ids.push(object_id);
            batch.push(Mutation::Robust(RobustMutation::PutObject(
                RobustObjectRecord {
                    object_id,
                    file_id,
                    index: o.index,
                    length: o.length,
                    k: o.k,
                    n: o.n,
                    id_space: o.id_space,
                    seed: o.seed,
                    version: 1,
                },
            )));
        }
        batch.commit(self.store.as_mut())?;
        Ok((file_id, ids))
    }

    /// Commits a robust put: every object of the file with its blocks (ids distinct and inside
    /// its id space, at the object's version, on registered OSDs, at least K of them). The file
    /// becomes visible at its path, replacing what was there, in the same transaction. A retried
    /// commit of a file already committed is a no-op.
    pub fn commit_robust_file(
        &mut self,
        file_id: u64,
        objects: &[RobustObject],
    ) -> Result<(), MdsError> {
        let f = match self.store.file(file_id).map_err(internal)? {
            Some(f) if f.committed => return Ok(()),
            _ => self.pending_file(file_id)?,
        };
        if self.store.robust_file(file_id).map_err(internal)?.is_none() {
            return Err(invalid(format!(
                "file {} is not a robust file: commit it with CommitFile",
                f.path
            )));
        }
        let stored = self.store.robust_objects(file_id).map_err(internal)?;
        if stored.len() != objects.len() {
            return Err(invalid(format!(
                "{}: the commit names {} objects, the file has {}",
                f.path,
                objects.len(),
                stored.len()
            )));
        }
        let osds = self.osd_map()?;
        let mut extra = Vec::new();
        for (s, o) in stored.iter().zip(objects) {
            if s.object_id != o.object_id || s.index != o.index {
                return Err(invalid(format!(
                    "{}: object #{} is {} at the MDS, the commit names {} at #{}",
                    f.path, s.index, s.object_id, o.object_id, o.index
                )));
            }
            let placements = self.check_blocks(&f.path, s, &o.blocks, s.version, &osds)?;
            if placements.len() < s.k as usize {
                return Err(invalid(format!(
                    "{}: object #{} has {} blocks, fewer than its K = {}: it cannot be read",
                    f.path,
                    s.index,
                    placements.len(),
                    s.k
                )));
            }
            if o.seed != s.seed {
                extra.push(Mutation::Robust(RobustMutation::PutObject(
                    RobustObjectRecord {
                        seed: o.seed,
                        ..s.clone()
                    },
                )));
            }
            extra.extend(
                placements
                    .into_iter()
                    .map(|b| Mutation::Robust(RobustMutation::PutBlock(b))),
            );
        }
        let size = stored.iter().map(|o| o.length).sum();
        self.link_committed(f, size, extra)
    }

    /// Records an object's next version: `added` blocks (written at `version`; an id here
    /// replaces its older block, whose holder is told to drop it) and `dropped` ones leave the
    /// map. Refused unless `version` is the object's version + 1 (a concurrent update) or the
    /// result would hold fewer than K blocks.
    pub fn update_robust_object(&mut self, u: &RobustUpdate) -> Result<RobustObject, MdsError> {
        let o = self
            .store
            .robust_object(u.object_id)
            .map_err(internal)?
            .filter(|o| o.file_id == u.file_id)
            .ok_or_else(|| {
                MdsError::NotFound(format!(
                    "file {} has no robust object {}",
                    u.file_id, u.object_id
                ))
            })?;
        let f = self
            .store
            .file(u.file_id)
            .map_err(internal)?
            .filter(|f| f.committed)
            .ok_or_else(|| MdsError::NotFound(format!("no committed file {}", u.file_id)))?;
        if u.version != o.version + 1 {
            return Err(MdsError::FailedPrecondition(format!(
                "{}: object #{} is at version {}; an update to version {} is refused (another update came first: read it again)",
                f.path, o.index, o.version, u.version
            )));
        }
        let osds = self.osd_map()?;
        let added = self.check_blocks(&f.path, &o, &u.added, u.version, &osds)?;
        let mut current: BTreeMap<u32, BlockRecord> = self
            .store
            .blocks(o.object_id)
            .map_err(internal)?
            .into_iter()
            .map(|b| (b.key.id, b))
            .collect();
        let mut batch = Batch::new();
        let drop = |batch: &mut Batch, old: BlockRecord| {
            batch.push(Mutation::Robust(RobustMutation::PutDelete(
                ObjectDeleteRecord {
                    osd_id: old.osd_id,
                    object_id: old.object_id,
                    block: Some(old.key),
                },
            )));
        };
        for d in &u.dropped {
            match current.get(&d.id) {
                Some(b) if b.key == *d => {
                    let old = current.remove(&d.id).expect("present");
                    batch.push(Mutation::Robust(RobustMutation::DeleteBlock {
                        object_id: o.object_id,
                        id: d.id,
                    }));
                    drop(&mut batch, old);
                }
                _ => {
                    return Err(invalid(format!(
                        "{}: object #{} has no block {} at version {} to drop",
                        f.path, o.index, d.id, d.version
                    )))
                }
            }
        }
        for b in added {
            if let Some(old) = current.insert(b.key.id, b) {
                drop(&mut batch, old);
            }
            batch.push(Mutation::Robust(RobustMutation::PutBlock(b)));
        }
        if current.len() < o.k as usize {
            return Err(invalid(format!(
                "{}: object #{} would keep {} blocks, fewer than its K = {}",
                f.path,
                o.index,
                current.len(),
                o.k
            )));
        }
        let now = RobustObjectRecord {
            version: u.version,
            seed: u.seed,
            ..o
        };
        batch.push(Mutation::Robust(RobustMutation::PutObject(now.clone())));
        batch.commit(self.store.as_mut())?;
        Ok(object_of(&now, current.into_values().collect(), &osds))
    }

    /// Checks blocks named for object `o` at `version`: ids distinct and below its id space, on
    /// registered OSDs.
    fn check_blocks(
        &self,
        path: &str,
        o: &RobustObjectRecord,
        blocks: &[BlockPlacement],
        version: u64,
        osds: &BTreeMap<u32, OsdRecord>,
    ) -> Result<Vec<BlockRecord>, MdsError> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(blocks.len());
        for b in blocks {
            if b.key.id >= o.id_space {
                return Err(invalid(format!(
                    "{path}: object #{} block id {} is outside its id space of {}",
                    o.index, b.key.id, o.id_space
                )));
            }
            if !seen.insert(b.key.id) {
                return Err(invalid(format!(
                    "{path}: object #{} names block {} twice",
                    o.index, b.key.id
                )));
            }
            if b.key.version != version {
                return Err(invalid(format!(
                    "{path}: object #{} block {} is at version {}, expected {version}",
                    o.index, b.key.id, b.key.version
                )));
            }
            if !osds.contains_key(&b.osd_id) {
                return Err(invalid(format!(
                    "{path}: object #{} block {} names unknown OSD {}",
                    o.index, b.key.id, b.osd_id
                )));
            }
            out.push(BlockRecord {
                object_id: o.object_id,
                key: b.key,
                osd_id: b.osd_id,
            });
        }
        Ok(out)
    }

    /// Refuses a segment operation (`what`) on a robust file: its bytes are blocks (EINVAL).
    pub(super) fn refuse_robust(&self, f: &FileRecord, what: &str) -> Result<(), MdsError> {
        if self
            .store
            .robust_file(f.file_id)
            .map_err(internal)?
            .is_some()
        {
            return Err(MdsError::Fs {
                errno: ecstack_mds_proto::Errno::Invalid,
                message: format!(
                    "{} is a robust file: it cannot be {what} (put it again, or update it with `cluster update`)",
                    f.path
                ),
            });
        }
        Ok(())
    }

    /// A robust file's coding and block map (`None` for a file of segments).
    pub(super) fn robust_info(
        &self,
        file_id: u64,
        osds: &BTreeMap<u32, OsdRecord>,
    ) -> Result<Option<RobustInfo>, MdsError> {
        let Some(r) = self.store.robust_file(file_id).map_err(internal)? else {
            return Ok(None);
        };
        let mut objects = Vec::new();
        let mut below = 0;
        for o in self.store.robust_objects(file_id).map_err(internal)? {
            let blocks = self.store.blocks(o.object_id).map_err(internal)?;
            let kept = blocks
                .iter()
                .filter(|b| {
                    osds.get(&b.osd_id)
                        .is_some_and(|d| d.state != OsdState::Out)
                })
                .count();
            if kept < o.n as usize {
                below += 1;
            }
            objects.push(object_of(&o, blocks, osds));
        }
        Ok(Some(RobustInfo {
            params: r.params,
            objects,
            objects_below_n: below,
        }))
    }

    /// Delete tasks for every block of a robust file's objects (one per object and holder).
    /// Returns how many objects the file has.
    pub(super) fn drop_robust_blocks(
        &self,
        batch: &mut Batch,
        file_id: u64,
    ) -> Result<usize, MdsError> {
        let objects = self.store.robust_objects(file_id).map_err(internal)?;
        let count = objects.len();
        for o in objects {
            let holders: BTreeSet<u32> = self
                .store
                .blocks(o.object_id)
                .map_err(internal)?
                .iter()
                .map(|b| b.osd_id)
                .collect();
            for osd_id in holders {
                batch.push(Mutation::Robust(RobustMutation::PutDelete(
                    ObjectDeleteRecord {
                        osd_id,
                        object_id: o.object_id,
                        block: None,
                    },
                )));
            }
        }
        Ok(count)
    }

    /// The DeleteObject tasks of an OSD, one per object.
    pub(super) fn object_delete_tasks(&self, osd_id: u32) -> Result<Vec<OsdTask>, MdsError> {
        let mut by_object: BTreeMap<u64, Vec<RobustBlockKey>> = BTreeMap::new();
        let mut whole = BTreeSet::new();
        for d in self.store.object_deletes_for(osd_id).map_err(internal)? {
            match d.block {
                Some(k) => by_object.entry(d.object_id).or_default().push(k),
                None => {
                    whole.insert(d.object_id);
                }
            }
        }
        for id in &whole {
            by_object.insert(*id, Vec::new());
        }
        Ok(by_object
            .into_iter()
            .map(|(object_id, blocks)| {
                OsdTask::DeleteObject(DeleteObjectTask { object_id, blocks })
            })
            .collect())
    }

    /// (committed robust files, their objects with fewer than n blocks on OSDs not out).
    pub(super) fn robust_census(
        &self,
        osds: &BTreeMap<u32, OsdRecord>,
    ) -> Result<(u64, u64), MdsError> {
        let (files, objects) = self.store.robust_census().map_err(internal)?;
        let below = objects
            .iter()
            .filter(|o| {
                let kept: u64 = o
                    .holders
                    .iter()
                    .filter(|(osd, _)| osds.get(osd).is_some_and(|d| d.state != OsdState::Out))
                    .map(|(_, n)| n)
                    .sum();
                kept < u64::from(o.n)
            })
            .count();
        Ok((files, below as u64))
    }
}

/// An object as clients see it, its blocks with their holders' addresses and states.
fn object_of(
    o: &RobustObjectRecord,
    blocks: Vec<BlockRecord>,
    osds: &BTreeMap<u32, OsdRecord>,
) -> RobustObject {
    RobustObject {
        object_id: o.object_id,
        index: o.index,
        length: o.length,
        k: o.k,
        n: o.n,
        id_space: o.id_space,
        seed: o.seed,
        version: o.version,
        blocks: blocks
            .into_iter()
            .map(|b| {
                let holder = osds.get(&b.osd_id);
                BlockPlacement {
                    key: b.key,
                    osd_id: b.osd_id,
                    addr: holder.map(|h| h.addr.clone()).unwrap_or_default(),
                    up: holder.is_some_and(|h| h.state == OsdState::Up),
                }
            })
            .collect(),
    }
}
