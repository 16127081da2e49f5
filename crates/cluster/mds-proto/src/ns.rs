//! The POSIX namespace as other crates see it (schema version 3): inodes by number, their
//! attributes, directory entries, and the typed [`MdsClient`] calls of `mds.proto`'s namespace
//! RPCs. Errors a file system reports with an errno travel as [`MdsError::Fs`].

use crate::api::{required, MdsClient, MdsError};
use crate::proto;
use crate::{FileInfo, SegmentLayout};

/// The root directory's inode number.
pub const ROOT_INO: u64 = 1;

/// What an inode is. The numbers are stored in the MDS's `inodes.kind` and sent on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Fifo,
    CharDev,
    BlockDev,
    Socket,
}

impl FileKind {
    pub const ALL: [FileKind; 7] = [
        FileKind::File,
        FileKind::Dir,
        FileKind::Symlink,
        FileKind::Fifo,
        FileKind::CharDev,
        FileKind::BlockDev,
        FileKind::Socket,
    ];

    /// 1 file, 2 directory, 3 symlink, 4 FIFO, 5 character device, 6 block device, 7 socket.
    pub fn code(self) -> u32 {
        match self {
            FileKind::File => 1,
            FileKind::Dir => 2,
            FileKind::Symlink => 3,
            FileKind::Fifo => 4,
            FileKind::CharDev => 5,
            FileKind::BlockDev => 6,
            FileKind::Socket => 7,
        }
    }

    pub fn from_code(v: u32) -> Option<FileKind> {
        FileKind::ALL.into_iter().find(|k| k.code() == v)
    }
}

/// The errno-like failures of namespace calls, named as in errno(3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Errno {
    Exist,
    NotEmpty,
    NotDir,
    IsDir,
    NameTooLong,
    NoData,
    Invalid,
    Range,
    MLink,
    Perm,
}

impl Errno {
    pub const ALL: [Errno; 10] = [
        Errno::Exist,
        Errno::NotEmpty,
        Errno::NotDir,
        Errno::IsDir,
        Errno::NameTooLong,
        Errno::NoData,
        Errno::Invalid,
        Errno::Range,
        Errno::MLink,
        Errno::Perm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Errno::Exist => "EEXIST",
            Errno::NotEmpty => "ENOTEMPTY",
            Errno::NotDir => "ENOTDIR",
            Errno::IsDir => "EISDIR",
            Errno::NameTooLong => "ENAMETOOLONG",
            Errno::NoData => "ENODATA",
            Errno::Invalid => "EINVAL",
            Errno::Range => "ERANGE",
            Errno::MLink => "EMLINK",
            Errno::Perm => "EPERM",
        }
    }

    pub fn from_name(s: &str) -> Option<Errno> {
        Errno::ALL.into_iter().find(|e| e.name() == s)
    }
}

/// An inode's attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: FileKind,
    /// Permission bits with set-uid, set-gid and sticky (07777).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub rdev: u32,
    pub atime_ns: u64,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    /// Bumped at each change of a file's bytes or size (close-to-open).
    pub version: u64,
}

/// A time to set: the MDS's now, or ns since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    Now,
    Ns(u64),
}

/// What [`MdsClient::set_attr`] changes (`None`: unchanged).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    /// (segment id, new length) of segments the client rewrote whole at their primaries.
    pub resized: Vec<(u64, u64)>,
    /// The file's bytes changed: bump its version (and its mtime and ctime unless given).
    pub data_changed: bool,
}

/// One entry of a directory page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub attr: Attr,
}

/// What `statfs` reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsStats {
    /// Data bytes the up OSDs have room for (k/n of their capacity).
    pub capacity_bytes: u64,
    pub free_bytes: u64,
    pub inodes: u64,
    pub name_max: u32,
    pub segment_bytes: u64,
}

/// How [`MdsClient::rename`] treats an existing target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// RENAME_NOREPLACE: fail with EEXIST.
    pub noreplace: bool,
    /// RENAME_EXCHANGE: swap the two entries.
    pub exchange: bool,
}

impl From<Attr> for proto::Attr {
    fn from(a: Attr) -> Self {
        proto::Attr {
            ino: a.ino,
            kind: a.kind.code() as i32,
            mode: a.mode,
            uid: a.uid,
            gid: a.gid,
            nlink: a.nlink,
            size: a.size,
            rdev: a.rdev,
            atime_ns: a.atime_ns,
            mtime_ns: a.mtime_ns,
            ctime_ns: a.ctime_ns,
            version: a.version,
        }
    }
}

impl TryFrom<proto::Attr> for Attr {
    type Error = MdsError;
    fn try_from(a: proto::Attr) -> Result<Self, MdsError> {
        Ok(Attr {
            ino: a.ino,
            kind: u32::try_from(a.kind)
                .ok()
                .and_then(FileKind::from_code)
                .ok_or_else(|| MdsError::Protocol(format!("inode {}: kind {}", a.ino, a.kind)))?,
            mode: a.mode,
            uid: a.uid,
            gid: a.gid,
            nlink: a.nlink,
            size: a.size,
            rdev: a.rdev,
            atime_ns: a.atime_ns,
            mtime_ns: a.mtime_ns,
            ctime_ns: a.ctime_ns,
            version: a.version,
        })
    }
}

fn split_time(t: Option<SetTime>) -> (Option<u64>, bool) {
    match t {
        None => (None, false),
        Some(SetTime::Now) => (None, true),
        Some(SetTime::Ns(ns)) => (Some(ns), false),
    }
}

fn join_time(ns: Option<u64>, now: bool) -> Option<SetTime> {
    if now {
        Some(SetTime::Now)
    } else {
        ns.map(SetTime::Ns)
    }
}

impl From<(u64, SetAttr)> for proto::SetAttrRequest {
    fn from((ino, s): (u64, SetAttr)) -> Self {
        let (atime_ns, atime_now) = split_time(s.atime);
        let (mtime_ns, mtime_now) = split_time(s.mtime);
        proto::SetAttrRequest {
            ino,
            mode: s.mode,
            uid: s.uid,
            gid: s.gid,
            size: s.size,
            atime_ns,
            atime_now,
            mtime_ns,
            mtime_now,
            resized: s
                .resized
                .into_iter()
                .map(|(segment_id, length)| proto::SegmentResize { segment_id, length })
                .collect(),
            data_changed: s.data_changed,
        }
    }
}

impl From<proto::SetAttrRequest> for (u64, SetAttr) {
    fn from(r: proto::SetAttrRequest) -> Self {
        (
            r.ino,
            SetAttr {
                mode: r.mode,
                uid: r.uid,
                gid: r.gid,
                size: r.size,
                atime: join_time(r.atime_ns, r.atime_now),
                mtime: join_time(r.mtime_ns, r.mtime_now),
                resized: r
                    .resized
                    .into_iter()
                    .map(|s| (s.segment_id, s.length))
                    .collect(),
                data_changed: r.data_changed,
            },
        )
    }
}

impl From<FsStats> for proto::StatFsReply {
    fn from(s: FsStats) -> Self {
        proto::StatFsReply {
            capacity_bytes: s.capacity_bytes,
            free_bytes: s.free_bytes,
            inodes: s.inodes,
            name_max: s.name_max,
            segment_bytes: s.segment_bytes,
        }
    }
}

fn attr_of(a: Option<proto::Attr>) -> Result<Attr, MdsError> {
    required(a, "an inode's attributes")?.try_into()
}

impl MdsClient {
    /// The inode `parent` names `name`.
    pub async fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr, MdsError> {
        let r = self
            .raw()
            .lookup(proto::LookupRequest {
                parent,
                name: name.to_vec(),
            })
            .await?;
        r.into_inner().try_into()
    }

    pub async fn get_attr(&self, ino: u64) -> Result<Attr, MdsError> {
        let r = self.raw().get_attr(proto::GetAttrRequest { ino }).await?;
        r.into_inner().try_into()
    }

    pub async fn set_attr(&self, ino: u64, s: SetAttr) -> Result<Attr, MdsError> {
        let r = self
            .raw()
            .set_attr(proto::SetAttrRequest::from((ino, s)))
            .await?;
        r.into_inner().try_into()
    }

    /// A new file, FIFO, socket or device `name` in `parent`. A regular file that exists is
    /// returned as it is unless `exclusive`.
    #[allow(clippy::too_many_arguments)]
    pub async fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        kind: FileKind,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
        exclusive: bool,
    ) -> Result<Attr, MdsError> {
        let r = self
            .raw()
            .mknod(proto::MknodRequest {
                parent,
                name: name.to_vec(),
                kind: kind.code() as i32,
                mode,
                uid,
                gid,
                rdev,
                exclusive,
            })
            .await?;
        r.into_inner().try_into()
    }

    pub async fn mkdir(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Attr, MdsError> {
        let r = self
            .raw()
            .mkdir(proto::MkdirRequest {
                parent,
                name: name.to_vec(),
                mode,
                uid,
                gid,
            })
            .await?;
        r.into_inner().try_into()
    }

    pub async fn unlink(&self, parent: u64, name: &[u8]) -> Result<(), MdsError> {
        self.raw()
            .unlink(proto::UnlinkRequest {
                parent,
                name: name.to_vec(),
            })
            .await?;
        Ok(())
    }

    pub async fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), MdsError> {
        self.raw()
            .rmdir(proto::UnlinkRequest {
                parent,
                name: name.to_vec(),
            })
            .await?;
        Ok(())
    }

    pub async fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<(), MdsError> {
        self.raw()
            .rename(proto::RenameRequest {
                parent,
                name: name.to_vec(),
                new_parent,
                new_name: new_name.to_vec(),
                noreplace: flags.noreplace,
                exchange: flags.exchange,
            })
            .await?;
        Ok(())
    }

    pub async fn link(&self, ino: u64, new_parent: u64, new_name: &[u8]) -> Result<Attr, MdsError> {
        let r = self
            .raw()
            .link(proto::LinkRequest {
                ino,
                new_parent,
                new_name: new_name.to_vec(),
            })
            .await?;
        r.into_inner().try_into()
    }

    pub async fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<Attr, MdsError> {
        let r = self
            .raw()
            .symlink(proto::SymlinkRequest {
                parent,
                name: name.to_vec(),
                target: target.to_vec(),
                uid,
                gid,
            })
            .await?;
        r.into_inner().try_into()
    }

    pub async fn read_link(&self, ino: u64) -> Result<Vec<u8>, MdsError> {
        let r = self.raw().read_link(proto::GetAttrRequest { ino }).await?;
        Ok(r.into_inner().target)
    }

    /// One page of directory `ino` after the name `after`; `true` when more follow.
    pub async fn read_dir(
        &self,
        ino: u64,
        after: &[u8],
        limit: u32,
    ) -> Result<(Vec<DirEntry>, bool), MdsError> {
        let r = self
            .raw()
            .read_dir(proto::ReadDirRequest {
                ino,
                after: after.to_vec(),
                limit,
            })
            .await?
            .into_inner();
        let entries = r
            .entries
            .into_iter()
            .map(|e| {
                Ok(DirEntry {
                    name: e.name,
                    attr: attr_of(e.attr)?,
                })
            })
            .collect::<Result<_, MdsError>>()?;
        Ok((entries, r.more))
    }

    pub async fn stat_fs(&self) -> Result<FsStats, MdsError> {
        let r = self
            .raw()
            .stat_fs(proto::StatFsRequest {})
            .await?
            .into_inner();
        Ok(FsStats {
            capacity_bytes: r.capacity_bytes,
            free_bytes: r.free_bytes,
            inodes: r.inodes,
            name_max: r.name_max,
            segment_bytes: r.segment_bytes,
        })
    }

    pub async fn set_xattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        create: bool,
        replace: bool,
    ) -> Result<(), MdsError> {
        self.raw()
            .set_xattr(proto::SetXattrRequest {
                ino,
                name: name.to_vec(),
                value: value.to_vec(),
                create,
                replace,
            })
            .await?;
        Ok(())
    }

    pub async fn get_xattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>, MdsError> {
        let r = self
            .raw()
            .get_xattr(proto::GetXattrRequest {
                ino,
                name: name.to_vec(),
            })
            .await?;
        Ok(r.into_inner().value)
    }

    pub async fn list_xattr(&self, ino: u64) -> Result<Vec<Vec<u8>>, MdsError> {
        let r = self.raw().list_xattr(proto::GetAttrRequest { ino }).await?;
        Ok(r.into_inner().names)
    }

    pub async fn remove_xattr(&self, ino: u64, name: &[u8]) -> Result<(), MdsError> {
        self.raw()
            .remove_xattr(proto::GetXattrRequest {
                ino,
                name: name.to_vec(),
            })
            .await?;
        Ok(())
    }

    /// A regular file's attributes and the layout of each of its segments.
    pub async fn open_file(&self, ino: u64) -> Result<(Attr, FileInfo), MdsError> {
        let r = self
            .raw()
            .open_file(proto::GetAttrRequest { ino })
            .await?
            .into_inner();
        Ok((
            attr_of(r.attr)?,
            required(r.file, "the file's layout")?.try_into()?,
        ))
    }

    /// Places new segments of committed file `ino` from `first_index` on.
    pub async fn grow_file(
        &self,
        ino: u64,
        first_index: u32,
        lengths: &[u64],
    ) -> Result<Vec<SegmentLayout>, MdsError> {
        let r = self
            .raw()
            .grow_file(proto::GrowFileRequest {
                ino,
                first_index,
                lengths: lengths.to_vec(),
            })
            .await?
            .into_inner();
        r.segments.into_iter().map(TryInto::try_into).collect()
    }
}
