//! The POSIX namespace of the MDS (schema version 3): inodes, directory entries, symlinks and
//! xattrs, and the put protocol's paths resolved through them. A child of `engine`: every
//! operation stages its changes in a [`Tx`] and writes them as one `MetadataStore::apply` batch
//! before it returns (durable before the reply). Permissions are the client's kernel's to check
//! (the mount runs with `default_permissions`); the MDS keeps the namespace consistent: a
//! directory's link count, an inode's removal with its last link, a file's segments covering
//! exactly its size.

use std::collections::BTreeMap;

use super::*;
use crate::store::{new_inode, split_path, InodeRecord, COUNTER_INO, NAME_MAX, ROOT_INO};
use ecstack_mds_proto::{Attr, DirEntry, Errno, FileKind, FsStats, RenameFlags, SetAttr, SetTime};

/// Entries of one ReadDir page when the caller names no limit, and the most it may name.
pub const READDIR_PAGE: u32 = 1024;
pub const READDIR_PAGE_MAX: u32 = 4096;
/// Longest symlink target and xattr value, bytes (Linux's PATH_MAX and XATTR_SIZE_MAX).
pub const TARGET_MAX: usize = 4096;
pub const XATTR_VALUE_MAX: usize = 64 * 1024;
/// Most links of one inode.
pub const LINK_MAX: u32 = 65_000;

fn fs(errno: Errno, message: impl Into<String>) -> MdsError {
    MdsError::Fs {
        errno,
        message: message.into(),
    }
}

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// A directory entry's name: not empty, `.` or `..`, no `/` or NUL, at most [`NAME_MAX`] bytes.
fn check_name(name: &[u8]) -> Result<(), MdsError> {
    if name.is_empty() || name == b"." || name == b".." {
        return Err(fs(
            Errno::Invalid,
            format!("name {:?} is not allowed", show(name)),
        ));
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(fs(
            Errno::Invalid,
            format!("name {:?} contains '/' or NUL", show(name)),
        ));
    }
    if name.len() > NAME_MAX {
        return Err(fs(
            Errno::NameTooLong,
            format!(
                "a name is {} bytes long; the limit is {NAME_MAX}",
                name.len()
            ),
        ));
    }
    Ok(())
}

/// The attributes an inode shows.
pub fn attr_of(i: &InodeRecord) -> Attr {
    Attr {
        ino: i.ino,
        kind: i.kind,
        mode: i.mode,
        uid: i.uid,
        gid: i.gid,
        nlink: i.nlink,
        size: i.size,
        rdev: i.rdev,
        atime_ns: i.atime_ns,
        mtime_ns: i.mtime_ns,
        ctime_ns: i.ctime_ns,
        version: i.version,
    }
}

/// Segments a file of `size` bytes has in segments of `seg` bytes.
fn segments_for(size: u64, seg: u64) -> u64 {
    size.div_ceil(seg.max(1))
}

/// The changes of one namespace operation, written as one batch in an order the store's foreign
/// keys accept: new files, inodes, directory entries and xattrs, removed inodes, dropped files and
/// segments, counters.
struct Tx {
    batch: Batch,
    files: Vec<Mutation>,
    inodes: BTreeMap<u64, InodeRecord>,
    dentries: Vec<Mutation>,
    deleted: Vec<u64>,
    drops: Vec<Mutation>,
    now_ns: u64,
}

impl Tx {
    fn new(now_ms: u64) -> Tx {
        Tx {
            batch: Batch::new(),
            files: Vec::new(),
            inodes: BTreeMap::new(),
            dentries: Vec::new(),
            deleted: Vec::new(),
            drops: Vec::new(),
            now_ns: now_ms.saturating_mul(1_000_000),
        }
    }

    fn commit(mut self, store: &mut dyn MetadataStore) -> Result<(), MdsError> {
        let mut muts = std::mem::take(&mut self.files);
        muts.extend(
            std::mem::take(&mut self.inodes)
                .into_values()
                .filter(|i| !self.deleted.contains(&i.ino))
                .map(Mutation::PutInode),
        );
        muts.append(&mut self.dentries);
        muts.extend(self.deleted.iter().map(|&i| Mutation::DeleteInode(i)));
        muts.append(&mut self.drops);
        let mut batch = self.batch;
        muts.append(&mut batch.muts);
        batch.muts = muts;
        batch.commit(store)
    }
}

impl MdsCore {
    // ---- reading

    fn inode_of(&self, tx: Option<&Tx>, ino: u64) -> Result<InodeRecord, MdsError> {
        if let Some(i) = tx.and_then(|t| t.inodes.get(&ino)) {
            return Ok(i.clone());
        }
        self.store
            .inode(ino)
            .map_err(internal)?
            .ok_or_else(|| MdsError::NotFound(format!("no inode {ino}")))
    }

    /// Inode `ino` staged in `tx` for changing.
    fn stage<'t>(&self, tx: &'t mut Tx, ino: u64) -> Result<&'t mut InodeRecord, MdsError> {
        if let std::collections::btree_map::Entry::Vacant(v) = tx.inodes.entry(ino) {
            v.insert(self.inode_of(None, ino)?);
        }
        Ok(tx.inodes.get_mut(&ino).expect("staged"))
    }

    fn dir_of(&self, ino: u64) -> Result<InodeRecord, MdsError> {
        let i = self.inode_of(None, ino)?;
        if i.kind != FileKind::Dir {
            return Err(fs(Errno::NotDir, format!("inode {ino} is not a directory")));
        }
        Ok(i)
    }

    fn entry(&self, parent: u64, name: &[u8]) -> Result<Option<InodeRecord>, MdsError> {
        self.store.lookup(parent, name).map_err(internal)
    }

    pub fn get_attr(&self, ino: u64) -> Result<Attr, MdsError> {
        Ok(attr_of(&self.inode_of(None, ino)?))
    }

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr, MdsError> {
        check_name(name)?;
        self.dir_of(parent)?;
        self.entry(parent, name)?
            .map(|i| attr_of(&i))
            .ok_or_else(|| {
                MdsError::NotFound(format!("no entry {:?} in inode {parent}", show(name)))
            })
    }

    /// The inode `path` names (a leading `/` is the root; symlinks are not followed).
    fn resolve(&self, path: &str) -> Result<InodeRecord, MdsError> {
        let names = split_path(path)
            .map_err(|why| MdsError::InvalidArgument(format!("path {path:?}: {why}")))?;
        let mut cur = self.inode_of(None, ROOT_INO)?;
        for name in names {
            if cur.kind != FileKind::Dir {
                return Err(MdsError::NotFound(format!("no file {path}")));
            }
            cur = self
                .entry(cur.ino, name.as_bytes())?
                .ok_or_else(|| MdsError::NotFound(format!("no file {path}")))?;
        }
        Ok(cur)
    }

    /// A regular file inode's file record.
    fn file_of(&self, i: &InodeRecord) -> Result<FileRecord, MdsError> {
        let id = i.file_id.ok_or_else(|| {
            fs(
                if i.kind == FileKind::Dir {
                    Errno::IsDir
                } else {
                    Errno::Invalid
                },
                format!("inode {} is not a regular file", i.ino),
            )
        })?;
        self.store.file(id).map_err(internal)?.ok_or_else(|| {
            MdsError::Internal(format!(
                "inode {} names file {id}, which is not stored",
                i.ino
            ))
        })
    }

    /// A file's info as `path`: the layouts of the segments its size covers.
    fn file_info(&self, i: &InodeRecord, path: String) -> Result<FileInfo, MdsError> {
        let f = self.file_of(i)?;
        let seg = self.settings.params.segment_bytes;
        let count = segments_for(i.size, seg);
        let osds = self.osd_map()?;
        let segments = self
            .store
            .segments_of_file(f.file_id)
            .map_err(internal)?
            .iter()
            .filter(|s| u64::from(s.index) < count)
            .map(|s| self.layout_in(s, &osds, f.scheme))
            .collect::<Result<_, _>>()?;
        Ok(FileInfo {
            scheme: f.scheme,
            file_id: f.file_id,
            path,
            size: i.size,
            mtime_ms: i.mtime_ns / 1_000_000,
            segment_bytes: seg,
            segments,
            robust: self.robust_info(f.file_id, &osds)?,
        })
    }

    pub fn lookup_file(&self, path: &str) -> Result<FileInfo, MdsError> {
        let i = self.resolve(path)?;
        if i.kind != FileKind::File {
            return Err(MdsError::NotFound(format!("{path} is not a file")));
        }
        self.file_info(&i, path.to_owned())
    }

    /// A regular file's attributes and layouts (an open).
    pub fn open_file(&self, ino: u64) -> Result<(Attr, FileInfo), MdsError> {
        let i = self.inode_of(None, ino)?;
        let info = self.file_info(&i, format!("inode {ino}"))?;
        Ok((attr_of(&i), info))
    }

    /// Every regular file whose path (`/a/b`) starts with `prefix` (a leading `/` optional), by
    /// path.
    pub fn list_files(&self, prefix: &str) -> Result<Vec<FileSummary>, MdsError> {
        let p = prefix.strip_prefix('/').unwrap_or(prefix);
        let (dir, _) = p.rsplit_once('/').unwrap_or(("", p));
        let start = match self.resolve(dir) {
            Ok(i) if i.kind == FileKind::Dir => i,
            Ok(_) | Err(MdsError::NotFound(_)) | Err(MdsError::InvalidArgument(_)) => {
                return Ok(Vec::new())
            }
            Err(e) => return Err(e),
        };
        let base = if dir.is_empty() {
            String::new()
        } else {
            format!("/{dir}")
        };
        let seg = self.settings.params.segment_bytes;
        let mut out = Vec::new();
        let mut stack = vec![(start.ino, base)];
        while let Some((ino, path)) = stack.pop() {
            let mut after = Vec::new();
            loop {
                let page = self
                    .store
                    .dir_entries(ino, &after, READDIR_PAGE)
                    .map_err(internal)?;
                let Some(last) = page.last() else { break };
                after = last.0.clone();
                for (name, i) in page {
                    let full = format!("{path}/{}", show(&name));
                    match i.kind {
                        FileKind::Dir => stack.push((i.ino, full)),
                        FileKind::File if full[1..].starts_with(p) => out.push(FileSummary {
                            path: full,
                            size: i.size,
                            mtime_ms: i.mtime_ns / 1_000_000,
                            segments: segments_for(i.size, seg) as u32,
                        }),
                        _ => {}
                    }
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    pub fn read_link(&self, ino: u64) -> Result<Vec<u8>, MdsError> {
        let i = self.inode_of(None, ino)?;
        i.target
            .filter(|_| i.kind == FileKind::Symlink)
            .ok_or_else(|| fs(Errno::Invalid, format!("inode {ino} is not a symlink")))
    }

    /// At most `limit` entries of directory `ino` after `after`; `true` when more follow.
    pub fn read_dir(
        &self,
        ino: u64,
        after: &[u8],
        limit: u32,
    ) -> Result<(Vec<DirEntry>, bool), MdsError> {
        self.dir_of(ino)?;
        let limit = match limit {
            0 => READDIR_PAGE,
            l => l.min(READDIR_PAGE_MAX),
        };
        let mut page = self
            .store
            .dir_entries(ino, after, limit + 1)
            .map_err(internal)?;
        let more = page.len() > limit as usize;
        page.truncate(limit as usize);
        Ok((
            page.into_iter()
                .map(|(name, i)| DirEntry {
                    name,
                    attr: attr_of(&i),
                })
                .collect(),
            more,
        ))
    }

    pub fn stat_fs(&self) -> Result<FsStats, MdsError> {
        let osds = self.osd_map()?;
        let (k, n) = (u64::from(self.k()), u64::from(self.n()).max(1));
        let up = osds.values().filter(|o| o.state == OsdState::Up);
        let (cap, used) = up.fold((0u64, 0u64), |(c, u), o| {
            (c + o.capacity_bytes, u + o.used_bytes.min(o.capacity_bytes))
        });
        Ok(FsStats {
            capacity_bytes: cap / n * k,
            free_bytes: (cap - used) / n * k,
            inodes: self.store.inode_count().map_err(internal)?,
            name_max: NAME_MAX as u32,
            segment_bytes: self.settings.params.segment_bytes,
        })
    }

    pub fn get_xattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>, MdsError> {
        self.inode_of(None, ino)?;
        self.store
            .xattrs(ino)
            .map_err(internal)?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| {
                fs(
                    Errno::NoData,
                    format!("inode {ino} has no xattr {:?}", show(name)),
                )
            })
    }

    pub fn list_xattr(&self, ino: u64) -> Result<Vec<Vec<u8>>, MdsError> {
        self.inode_of(None, ino)?;
        Ok(self
            .store
            .xattrs(ino)
            .map_err(internal)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }

    // ---- changing

    fn new_ino(&self, tx: &mut Tx) -> Result<u64, MdsError> {
        tx.batch.next(self.store.as_ref(), COUNTER_INO)
    }

    /// A parent directory's entries changed: its mtime and ctime are now.
    fn touch_dir(&self, tx: &mut Tx, dir: u64) -> Result<(), MdsError> {
        let now = tx.now_ns;
        let d = self.stage(tx, dir)?;
        d.mtime_ns = now;
        d.ctime_ns = now;
        Ok(())
    }

    /// One link of `ino` went away: the inode goes with its last (a file's data with it).
    fn release(&self, tx: &mut Tx, ino: u64) -> Result<(), MdsError> {
        let now = tx.now_ns;
        let i = self.stage(tx, ino)?;
        i.nlink = i.nlink.saturating_sub(1);
        i.ctime_ns = now;
        if i.nlink == 0 || i.kind == FileKind::Dir {
            let file = i.file_id;
            tx.deleted.push(ino);
            if let Some(id) = file {
                let mut b = Batch::new();
                self.drop_file(&mut b, id)?;
                tx.drops.extend(b.muts);
            }
        }
        Ok(())
    }

    /// A free name `name` in directory `parent` (EEXIST if taken).
    fn free_name(&self, parent: u64, name: &[u8]) -> Result<(), MdsError> {
        check_name(name)?;
        self.dir_of(parent)?;
        if self.entry(parent, name)?.is_some() {
            return Err(fs(
                Errno::Exist,
                format!("{:?} exists in inode {parent}", show(name)),
            ));
        }
        Ok(())
    }

    /// Links a new inode into `parent` as `name`. In a set-group-ID directory it takes the
    /// directory's group, and a new directory the set-group-ID bit too.
    fn link_new(
        &self,
        tx: &mut Tx,
        parent: u64,
        name: &[u8],
        mut i: InodeRecord,
    ) -> Result<(), MdsError> {
        let p = self.inode_of(Some(tx), parent)?;
        if p.mode & 0o2000 != 0 {
            i.gid = p.gid;
            if i.kind == FileKind::Dir {
                i.mode |= 0o2000;
            }
        }
        let ino = i.ino;
        if i.kind == FileKind::Dir {
            self.stage(tx, parent)?.nlink += 1;
        }
        tx.inodes.insert(ino, i);
        tx.dentries.push(Mutation::PutDentry {
            parent,
            name: name.to_vec(),
            ino,
        });
        self.touch_dir(tx, parent)
    }

    /// A new committed, empty file record of the cluster's scheme.
    fn new_file(&self, tx: &mut Tx, path: String) -> Result<u64, MdsError> {
        let file_id = tx.batch.next(self.store.as_ref(), COUNTER_FILE)?;
        tx.files.push(Mutation::PutFile(FileRecord {
            file_id,
            path,
            size: 0,
            mtime_ms: tx.now_ns / 1_000_000,
            committed: true,
            scheme: self.settings.default_scheme,
        }));
        Ok(file_id)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn mknod(
        &mut self,
        parent: u64,
        name: &[u8],
        kind: FileKind,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
        exclusive: bool,
    ) -> Result<Attr, MdsError> {
        check_name(name)?;
        self.dir_of(parent)?;
        if let Some(i) = self.entry(parent, name)? {
            if !exclusive && kind == FileKind::File && i.kind == FileKind::File {
                return Ok(attr_of(&i));
            }
            return Err(fs(
                Errno::Exist,
                format!("{:?} exists in inode {parent}", show(name)),
            ));
        }
        if matches!(kind, FileKind::Dir | FileKind::Symlink) {
            return Err(fs(Errno::Invalid, "mknod makes no directory or symlink"));
        }
        let mut tx = Tx::new(self.clock.now_ms());
        let ino = self.new_ino(&mut tx)?;
        let mut i = new_inode(ino, kind, mode & 0o7777, tx.now_ns);
        (i.uid, i.gid) = (uid, gid);
        if kind == FileKind::File {
            i.file_id = Some(self.new_file(&mut tx, show(name))?);
        } else {
            i.rdev = rdev;
        }
        self.link_new(&mut tx, parent, name, i)?;
        let attr = attr_of(&tx.inodes[&ino]);
        tx.commit(self.store.as_mut())?;
        Ok(attr)
    }

    pub fn mkdir(
        &mut self,
        parent: u64,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Attr, MdsError> {
        self.free_name(parent, name)?;
        let mut tx = Tx::new(self.clock.now_ms());
        let ino = self.new_ino(&mut tx)?;
        let mut i = new_inode(ino, FileKind::Dir, mode & 0o7777, tx.now_ns);
        (i.uid, i.gid) = (uid, gid);
        self.link_new(&mut tx, parent, name, i)?;
        let attr = attr_of(&tx.inodes[&ino]);
        tx.commit(self.store.as_mut())?;
        Ok(attr)
    }

    pub fn symlink(
        &mut self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<Attr, MdsError> {
        self.free_name(parent, name)?;
        if target.is_empty() {
            return Err(MdsError::NotFound("a symlink's target is empty".into()));
        }
        if target.len() > TARGET_MAX || target.contains(&0) {
            return Err(fs(
                Errno::NameTooLong,
                format!(
                    "a symlink target of {} bytes; the limit is {TARGET_MAX}",
                    target.len()
                ),
            ));
        }
        let mut tx = Tx::new(self.clock.now_ms());
        let ino = self.new_ino(&mut tx)?;
        let mut i = new_inode(ino, FileKind::Symlink, 0o777, tx.now_ns);
        (i.uid, i.gid) = (uid, gid);
        i.size = target.len() as u64;
        i.target = Some(target.to_vec());
        self.link_new(&mut tx, parent, name, i)?;
        let attr = attr_of(&tx.inodes[&ino]);
        tx.commit(self.store.as_mut())?;
        Ok(attr)
    }

    pub fn link(&mut self, ino: u64, new_parent: u64, new_name: &[u8]) -> Result<Attr, MdsError> {
        let i = self.inode_of(None, ino)?;
        if i.kind == FileKind::Dir {
            return Err(fs(Errno::Perm, "a directory cannot take a hard link"));
        }
        if i.nlink >= LINK_MAX {
            return Err(fs(
                Errno::MLink,
                format!("inode {ino} has {LINK_MAX} links"),
            ));
        }
        self.free_name(new_parent, new_name)?;
        let mut tx = Tx::new(self.clock.now_ms());
        let now = tx.now_ns;
        let s = self.stage(&mut tx, ino)?;
        s.nlink += 1;
        s.ctime_ns = now;
        let attr = attr_of(s);
        tx.dentries.push(Mutation::PutDentry {
            parent: new_parent,
            name: new_name.to_vec(),
            ino,
        });
        self.touch_dir(&mut tx, new_parent)?;
        tx.commit(self.store.as_mut())?;
        Ok(attr)
    }

    pub fn unlink(&mut self, parent: u64, name: &[u8]) -> Result<(), MdsError> {
        check_name(name)?;
        self.dir_of(parent)?;
        let i = self
            .entry(parent, name)?
            .ok_or_else(|| MdsError::NotFound(format!("no entry {:?}", show(name))))?;
        if i.kind == FileKind::Dir {
            return Err(fs(Errno::IsDir, format!("{:?} is a directory", show(name))));
        }
        let mut tx = Tx::new(self.clock.now_ms());
        tx.dentries.push(Mutation::DeleteDentry {
            parent,
            name: name.to_vec(),
        });
        self.release(&mut tx, i.ino)?;
        self.touch_dir(&mut tx, parent)?;
        tx.commit(self.store.as_mut())
    }

    fn check_empty(&self, dir: u64) -> Result<(), MdsError> {
        if !self
            .store
            .dir_entries(dir, b"", 1)
            .map_err(internal)?
            .is_empty()
        {
            return Err(fs(
                Errno::NotEmpty,
                format!("directory inode {dir} is not empty"),
            ));
        }
        Ok(())
    }

    pub fn rmdir(&mut self, parent: u64, name: &[u8]) -> Result<(), MdsError> {
        if name == b"." {
            return Err(fs(Errno::Invalid, "rmdir of \".\""));
        }
        if name == b".." {
            return Err(fs(Errno::NotEmpty, "rmdir of \"..\""));
        }
        check_name(name)?;
        self.dir_of(parent)?;
        let i = self
            .entry(parent, name)?
            .ok_or_else(|| MdsError::NotFound(format!("no entry {:?}", show(name))))?;
        if i.kind != FileKind::Dir {
            return Err(fs(
                Errno::NotDir,
                format!("{:?} is not a directory", show(name)),
            ));
        }
        self.check_empty(i.ino)?;
        let mut tx = Tx::new(self.clock.now_ms());
        tx.dentries.push(Mutation::DeleteDentry {
            parent,
            name: name.to_vec(),
        });
        self.release(&mut tx, i.ino)?;
        let p = self.stage(&mut tx, parent)?;
        p.nlink = p.nlink.saturating_sub(1);
        self.touch_dir(&mut tx, parent)?;
        tx.commit(self.store.as_mut())
    }

    /// Whether directory `dir` is `ancestor` or lies below it.
    fn is_within(&self, mut dir: u64, ancestor: u64) -> Result<bool, MdsError> {
        for _ in 0..100_000 {
            if dir == ancestor {
                return Ok(true);
            }
            if dir == ROOT_INO {
                return Ok(false);
            }
            match self.store.links(dir).map_err(internal)?.first() {
                Some((parent, _)) => dir = *parent,
                None => return Ok(false),
            }
        }
        Err(MdsError::Internal(format!("inode {dir}: a directory loop")))
    }

    pub fn rename(
        &mut self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<(), MdsError> {
        check_name(name)?;
        check_name(new_name)?;
        self.dir_of(parent)?;
        self.dir_of(new_parent)?;
        let src = self
            .entry(parent, name)?
            .ok_or_else(|| MdsError::NotFound(format!("no entry {:?}", show(name))))?;
        let dst = self.entry(new_parent, new_name)?;
        if src.kind == FileKind::Dir && self.is_within(new_parent, src.ino)? {
            return Err(fs(Errno::Invalid, "a directory cannot move below itself"));
        }
        let mut tx = Tx::new(self.clock.now_ms());
        let now = tx.now_ns;
        let del = |p: u64, n: &[u8]| Mutation::DeleteDentry {
            parent: p,
            name: n.to_vec(),
        };
        let put = |p: u64, n: &[u8], ino: u64| Mutation::PutDentry {
            parent: p,
            name: n.to_vec(),
            ino,
        };
        if flags.exchange {
            let dst = dst.ok_or_else(|| {
                MdsError::NotFound(format!("no entry {:?} to exchange with", show(new_name)))
            })?;
            if dst.kind == FileKind::Dir && self.is_within(parent, dst.ino)? {
                return Err(fs(Errno::Invalid, "a directory cannot move below itself"));
            }
            tx.dentries.push(del(parent, name));
            tx.dentries.push(del(new_parent, new_name));
            tx.dentries.push(put(parent, name, dst.ino));
            tx.dentries.push(put(new_parent, new_name, src.ino));
            if parent != new_parent {
                let d = |k: FileKind| u32::from(k == FileKind::Dir);
                let (a, b) = (d(src.kind), d(dst.kind));
                let p = self.stage(&mut tx, parent)?;
                p.nlink = p.nlink + b - a;
                let q = self.stage(&mut tx, new_parent)?;
                q.nlink = q.nlink + a - b;
            }
            for ino in [src.ino, dst.ino] {
                self.stage(&mut tx, ino)?.ctime_ns = now;
            }
        } else {
            if let Some(d) = &dst {
                if d.ino == src.ino {
                    return Ok(()); // two links of one inode: rename(2) does nothing
                }
                if flags.noreplace {
                    return Err(fs(Errno::Exist, format!("{:?} exists", show(new_name))));
                }
                match (src.kind == FileKind::Dir, d.kind == FileKind::Dir) {
                    (true, false) => {
                        return Err(fs(
                            Errno::NotDir,
                            format!("{:?} is not a directory", show(new_name)),
                        ))
                    }
                    (false, true) => {
                        return Err(fs(
                            Errno::IsDir,
                            format!("{:?} is a directory", show(new_name)),
                        ))
                    }
                    (true, true) => {
                        self.check_empty(d.ino)?;
                        let q = self.stage(&mut tx, new_parent)?;
                        q.nlink = q.nlink.saturating_sub(1);
                    }
                    (false, false) => {}
                }
                tx.dentries.push(del(new_parent, new_name));
                self.release(&mut tx, d.ino)?;
            }
            tx.dentries.push(del(parent, name));
            tx.dentries.push(put(new_parent, new_name, src.ino));
            if src.kind == FileKind::Dir && parent != new_parent {
                let p = self.stage(&mut tx, parent)?;
                p.nlink = p.nlink.saturating_sub(1);
                self.stage(&mut tx, new_parent)?.nlink += 1;
            }
            self.stage(&mut tx, src.ino)?.ctime_ns = now;
        }
        self.touch_dir(&mut tx, parent)?;
        self.touch_dir(&mut tx, new_parent)?;
        tx.commit(self.store.as_mut())
    }

    /// Mode, owner, times and size ([`SetAttr`]); see `mds.proto`'s SetAttr.
    pub fn set_attr(&mut self, ino: u64, s: &SetAttr) -> Result<Attr, MdsError> {
        let mut tx = Tx::new(self.clock.now_ms());
        let now = tx.now_ns;
        let cur = self.inode_of(None, ino)?;
        let resizes = s.size.is_some() || !s.resized.is_empty();
        if resizes {
            if cur.kind == FileKind::Dir {
                return Err(fs(Errno::IsDir, format!("inode {ino} is a directory")));
            }
            let f = self.file_of(&cur)?;
            self.refuse_robust(&f, "resized")?;
            self.resize(&mut tx, &f, s.size.unwrap_or(cur.size), &s.resized)?;
        }
        let i = self.stage(&mut tx, ino)?;
        let mut changed = false;
        if let Some(m) = s.mode {
            i.mode = m & 0o7777;
            changed = true;
        }
        if let Some(u) = s.uid {
            i.uid = u;
            changed = true;
        }
        if let Some(g) = s.gid {
            i.gid = g;
            changed = true;
        }
        let at = |t: SetTime| match t {
            SetTime::Now => now,
            SetTime::Ns(ns) => ns,
        };
        if resizes || s.data_changed {
            i.version += 1;
            if let Some(size) = s.size {
                i.size = size;
            }
            i.mtime_ns = now;
            changed = true;
        }
        if let Some(t) = s.atime {
            i.atime_ns = at(t);
            changed = true;
        }
        if let Some(t) = s.mtime {
            i.mtime_ns = at(t);
            changed = true;
        }
        if changed {
            i.ctime_ns = now;
        }
        let attr = attr_of(i);
        if let (Some(id), true) = (i.file_id, resizes || s.data_changed) {
            let (size, mtime_ms) = (i.size, i.mtime_ns / 1_000_000);
            let mut f = self
                .store
                .file(id)
                .map_err(internal)?
                .ok_or_else(|| MdsError::Internal(format!("file {id} is not stored")))?;
            f.size = size;
            f.mtime_ms = mtime_ms;
            tx.files.push(Mutation::PutFile(f));
        }
        tx.commit(self.store.as_mut())?;
        Ok(attr)
    }

    /// Makes file `f`'s segments cover exactly `size` bytes: `resized` segments take their new
    /// lengths (and a new epoch), segments past the end are dropped, and every segment the size
    /// needs must then be there, full but the last.
    fn resize(
        &self,
        tx: &mut Tx,
        f: &FileRecord,
        size: u64,
        resized: &[(u64, u64)],
    ) -> Result<(), MdsError> {
        let seg = self.settings.params.segment_bytes;
        let count = segments_for(size, seg);
        let mut lengths = BTreeMap::new();
        let mut epoch = None;
        for s in self.store.segments_of_file(f.file_id).map_err(internal)? {
            let mut s = s;
            if let Some(&(_, len)) = resized.iter().find(|(id, _)| *id == s.segment_id) {
                if len == 0 || len > seg {
                    return Err(MdsError::InvalidArgument(format!(
                        "segment {} cannot be {len} bytes long (1..={seg})",
                        s.segment_id
                    )));
                }
                s.length = len;
                let e = match epoch {
                    Some(e) => e,
                    None => {
                        let e = tx.batch.next(self.store.as_ref(), COUNTER_EPOCH)?;
                        epoch = Some(e);
                        e
                    }
                };
                s.epoch = e;
                tx.drops.push(Mutation::PutSegment(s.clone()));
            }
            if u64::from(s.index) >= count {
                for c in self.store.chunks(s.segment_id).map_err(internal)? {
                    if let Some(osd_id) = c.osd_id {
                        tx.drops.push(Mutation::PutDelete(DeleteRecord {
                            osd_id,
                            segment_id: s.segment_id,
                            chunk: c.index,
                        }));
                    }
                }
                tx.drops.push(Mutation::DeleteSegment(s.segment_id));
            } else {
                lengths.insert(u64::from(s.index), s.length);
            }
        }
        for (id, _) in resized {
            let theirs = self.store.segment(*id).map_err(internal)?;
            if theirs.is_none_or(|s| s.file_id != f.file_id) {
                return Err(MdsError::InvalidArgument(format!(
                    "segment {id} is not a segment of file {}",
                    f.file_id
                )));
            }
        }
        for idx in 0..count {
            let want = if idx + 1 == count {
                size - idx * seg
            } else {
                seg
            };
            match lengths.get(&idx) {
                Some(&l) if l == want => {}
                got => {
                    return Err(MdsError::InvalidArgument(format!(
                        "a size of {size} bytes needs segment {idx} of {want} bytes; it {} (write it at its primary first)",
                        got.map_or("is missing".to_string(), |l| format!("has {l}"))
                    )))
                }
            }
        }
        Ok(())
    }

    /// New segments of committed file `ino` at `first..` (a growing file). Segments already at
    /// those indexes past the file's committed end (a writer that never committed) are dropped.
    pub fn grow_file(
        &mut self,
        ino: u64,
        first: u32,
        lengths: &[u64],
    ) -> Result<Vec<SegmentLayout>, MdsError> {
        let i = self.inode_of(None, ino)?;
        let f = self.file_of(&i)?;
        self.refuse_robust(&f, "grown by segments")?;
        let count = segments_for(i.size, self.settings.params.segment_bytes);
        if u64::from(first) < count {
            return Err(MdsError::InvalidArgument(format!(
                "file inode {ino} has {count} committed segments; new ones start at {count}, not {first}"
            )));
        }
        let mut tx = Tx::new(self.clock.now_ms());
        let end = u64::from(first) + lengths.len() as u64;
        for s in self.store.segments_of_file(f.file_id).map_err(internal)? {
            let idx = u64::from(s.index);
            if idx >= u64::from(first) && idx < end {
                for c in self.store.chunks(s.segment_id).map_err(internal)? {
                    if let Some(osd_id) = c.osd_id {
                        tx.drops.push(Mutation::PutDelete(DeleteRecord {
                            osd_id,
                            segment_id: s.segment_id,
                            chunk: c.index,
                        }));
                    }
                }
                tx.drops.push(Mutation::DeleteSegment(s.segment_id));
            }
        }
        let layouts = self.place_segments(&mut tx.batch, &f, first, lengths, &[])?;
        // The new segments go after the old ones at their indexes are gone.
        let placed = std::mem::take(&mut tx.batch.muts);
        tx.drops.extend(placed);
        tx.commit(self.store.as_mut())?;
        Ok(layouts)
    }

    pub fn set_xattr(
        &mut self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        create: bool,
        replace: bool,
    ) -> Result<(), MdsError> {
        if name.is_empty() || name.len() > NAME_MAX {
            return Err(fs(
                Errno::Range,
                format!("an xattr name of {} bytes", name.len()),
            ));
        }
        if value.len() > XATTR_VALUE_MAX {
            return Err(fs(
                Errno::Range,
                format!("an xattr value of {} bytes", value.len()),
            ));
        }
        let exists = self.get_xattr(ino, name).is_ok();
        if create && exists {
            return Err(fs(Errno::Exist, format!("xattr {:?} exists", show(name))));
        }
        if replace && !exists {
            return Err(fs(Errno::NoData, format!("no xattr {:?}", show(name))));
        }
        let mut tx = Tx::new(self.clock.now_ms());
        let now = tx.now_ns;
        self.stage(&mut tx, ino)?.ctime_ns = now;
        tx.dentries.push(Mutation::PutXattr {
            ino,
            name: name.to_vec(),
            value: value.to_vec(),
        });
        tx.commit(self.store.as_mut())
    }

    pub fn remove_xattr(&mut self, ino: u64, name: &[u8]) -> Result<(), MdsError> {
        self.get_xattr(ino, name)?;
        let mut tx = Tx::new(self.clock.now_ms());
        let now = tx.now_ns;
        self.stage(&mut tx, ino)?.ctime_ns = now;
        tx.dentries.push(Mutation::DeleteXattr {
            ino,
            name: name.to_vec(),
        });
        tx.commit(self.store.as_mut())
    }

    // ---- the put protocol through paths

    /// Starts a put of `path`. Its update scheme is `scheme`; with `None`, the scheme of the
    /// committed file at `path` (a put replaces a file under its own scheme), else the cluster's
    /// default. A scheme other than the committed file's is refused: a file's scheme is fixed at
    /// its first creation (its chunks, logs and reserved space are laid out for it). A path a
    /// tree cannot hold (an empty, `.` or `..` component) is refused.
    pub fn create_file_with(
        &mut self,
        path: &str,
        scheme: Option<UpdateScheme>,
    ) -> Result<u64, MdsError> {
        let (batch, file_id) = self.start_file(path, scheme)?;
        batch.commit(self.store.as_mut())?;
        Ok(file_id)
    }

    /// [`Self::create_file_with`]'s checks and its new pending file, in a batch not yet
    /// committed (a robust put adds its objects to it).
    pub(super) fn start_file(
        &self,
        path: &str,
        scheme: Option<UpdateScheme>,
    ) -> Result<(Batch, u64), MdsError> {
        if path.is_empty() {
            return Err(MdsError::InvalidArgument("path is empty".into()));
        }
        if path.len() > MAX_PATH_BYTES {
            return Err(MdsError::InvalidArgument(format!(
                "path is {} bytes long; the limit is {MAX_PATH_BYTES}",
                path.len()
            )));
        }
        if path.contains('\0') {
            return Err(MdsError::InvalidArgument("path contains a NUL byte".into()));
        }
        match split_path(path) {
            Ok(names) if names.is_empty() => {
                return Err(MdsError::InvalidArgument(format!(
                    "path {path:?} names the root"
                )))
            }
            Ok(_) => {}
            Err(why) => return Err(MdsError::InvalidArgument(format!("path {path:?}: {why}"))),
        }
        let existing = self.store.committed_file(path).map_err(internal)?;
        let scheme = match (scheme, existing) {
            (Some(new), Some(old)) if new != old.scheme => {
                return Err(scheme_change_refused(path, old.scheme, new))
            }
            (Some(new), _) => new,
            (None, Some(old)) => old.scheme,
            (None, None) => self.settings.default_scheme,
        };
        let mut batch = Batch::new();
        let file_id = batch.next(self.store.as_ref(), COUNTER_FILE)?;
        batch.push(Mutation::PutFile(FileRecord {
            file_id,
            path: path.to_owned(),
            size: 0,
            mtime_ms: self.clock.now_ms(),
            committed: false,
            scheme,
        }));
        Ok((batch, file_id))
    }

    /// Makes a put visible at its path: the directories the path names are made (0755, owned by
    /// root) where missing; an existing file there takes the new bytes (its inode, links, mode
    /// and owner stay; its old segments are dropped); a new one is 0644, owned by root.
    pub fn commit_file(&mut self, file_id: u64, size: u64) -> Result<(), MdsError> {
        let f = match self.store.file(file_id).map_err(internal)? {
            Some(f) if f.committed && f.size == size => return Ok(()), // a retried commit
            _ => self.pending_file(file_id)?,
        };
        if self.store.robust_file(file_id).map_err(internal)?.is_some() {
            return Err(MdsError::InvalidArgument(format!(
                "file {} is a robust file: commit it with its blocks (CommitRobustFile)",
                f.path
            )));
        }
        let total: u64 = self
            .store
            .segments_of_file(file_id)
            .map_err(internal)?
            .iter()
            .map(|s| s.length)
            .sum();
        if total != size {
            return Err(MdsError::InvalidArgument(format!(
                "file {} commits size {size} but its segments hold {total} bytes",
                f.path
            )));
        }
        self.link_committed(f, size, Vec::new())
    }

    /// Links pending file `f` at its path with `size` bytes, with `extra` mutations in the same
    /// transaction (a robust file's blocks): the rest of [`Self::commit_file`].
    pub(super) fn link_committed(
        &mut self,
        f: FileRecord,
        size: u64,
        extra: Vec<Mutation>,
    ) -> Result<(), MdsError> {
        let file_id = f.file_id;
        let names = split_path(&f.path)
            .map_err(|why| MdsError::InvalidArgument(format!("path {:?}: {why}", f.path)))?;
        let Some((last, dirs)) = names.split_last() else {
            return Err(MdsError::InvalidArgument(format!(
                "path {:?} names the root",
                f.path
            )));
        };
        let mut tx = Tx::new(self.clock.now_ms());
        let now = tx.now_ns;
        let mut parent = ROOT_INO;
        let mut made = false;
        for name in dirs {
            let found = if made {
                None
            } else {
                self.entry(parent, name.as_bytes())?
            };
            parent = match found {
                Some(i) if i.kind == FileKind::Dir => i.ino,
                Some(_) => {
                    return Err(fs(
                        Errno::NotDir,
                        format!("put {}: {name} is not a directory", f.path),
                    ))
                }
                None => {
                    made = true;
                    let ino = self.new_ino(&mut tx)?;
                    let d = new_inode(ino, FileKind::Dir, 0o755, now);
                    self.link_new(&mut tx, parent, name.as_bytes(), d)?;
                    ino
                }
            };
        }
        tx.files.push(Mutation::PutFile(FileRecord {
            size,
            mtime_ms: now / 1_000_000,
            committed: true,
            ..f.clone()
        }));
        tx.files.extend(extra);
        let existing = if made {
            None
        } else {
            self.entry(parent, last.as_bytes())?
        };
        match existing {
            Some(i) if i.kind == FileKind::File => {
                let old = self.file_of(&i)?;
                // Checked again here: another put may have committed the path since this one began.
                if old.scheme != f.scheme {
                    return Err(scheme_change_refused(&f.path, old.scheme, f.scheme));
                }
                let s = self.stage(&mut tx, i.ino)?;
                s.file_id = Some(file_id);
                s.size = size;
                s.version += 1;
                (s.mtime_ns, s.ctime_ns) = (now, now);
                let mut b = Batch::new();
                self.drop_file(&mut b, old.file_id)?;
                tx.drops.extend(b.muts);
            }
            Some(_) => {
                return Err(fs(
                    Errno::IsDir,
                    format!(
                        "put {}: the path names a directory or a special file",
                        f.path
                    ),
                ))
            }
            None => {
                let ino = self.new_ino(&mut tx)?;
                let mut i = new_inode(ino, FileKind::File, 0o644, now);
                i.file_id = Some(file_id);
                i.size = size;
                self.link_new(&mut tx, parent, last.as_bytes(), i)?;
            }
        }
        tx.commit(self.store.as_mut())
    }

    /// Removes the file `path` names (as unlink(2): the data goes with its last link).
    pub fn remove_file(&mut self, path: &str) -> Result<(), MdsError> {
        let names = split_path(path)
            .map_err(|why| MdsError::InvalidArgument(format!("path {path:?}: {why}")))?;
        let Some((last, dirs)) = names.split_last() else {
            return Err(MdsError::InvalidArgument(format!(
                "path {path:?} names the root"
            )));
        };
        let parent = self.resolve(&dirs.join("/"))?;
        match self.entry(parent.ino, last.as_bytes())? {
            Some(i) if i.kind != FileKind::Dir => self.unlink(parent.ino, last.as_bytes()),
            _ => Err(MdsError::NotFound(format!("no file {path}"))),
        }
    }
}
