//! The POSIX namespace through the client (schema version 3): each call of `mds.proto`'s
//! namespace RPCs under the client's metadata deadline and retry policy, and the segment calls
//! a mount makes itself (a segment's bytes read, written whole, or updated in place at its
//! primary). A retried mutation whose first attempt did reach the MDS may answer as a second
//! call would (EEXIST after a mkdir whose reply was lost): the MDS commits before it replies.

use bytes::Bytes;
use ecstack_mds_proto::{
    Attr, DirEntry, FileInfo, FileKind, FsStats, RenameFlags, SegmentLayout, SetAttr,
};
use ecstack_osd_proto::SegmentAge;
use std::sync::atomic::Ordering;

use crate::client::Client;
use crate::error::ClientError;

impl Client {
    pub async fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr, ClientError> {
        self.meta("lookup", |m| async move { m.lookup(parent, name).await })
            .await
    }

    pub async fn get_attr(&self, ino: u64) -> Result<Attr, ClientError> {
        self.meta("getattr", |m| async move { m.get_attr(ino).await })
            .await
    }

    pub async fn set_attr(&self, ino: u64, s: &SetAttr) -> Result<Attr, ClientError> {
        self.meta(
            "setattr",
            |m| async move { m.set_attr(ino, s.clone()).await },
        )
        .await
    }

    /// A new file (`FileKind::File`), FIFO, socket or device; an existing regular file is
    /// returned unless `exclusive`.
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
    ) -> Result<Attr, ClientError> {
        self.meta("mknod", |m| async move {
            m.mknod(parent, name, kind, mode, uid, gid, rdev, exclusive)
                .await
        })
        .await
    }

    pub async fn mkdir(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Attr, ClientError> {
        self.meta("mkdir", |m| async move {
            m.mkdir(parent, name, mode, uid, gid).await
        })
        .await
    }

    pub async fn unlink(&self, parent: u64, name: &[u8]) -> Result<(), ClientError> {
        self.meta("unlink", |m| async move { m.unlink(parent, name).await })
            .await
    }

    pub async fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), ClientError> {
        self.meta("rmdir", |m| async move { m.rmdir(parent, name).await })
            .await
    }

    pub async fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<(), ClientError> {
        self.meta("rename", |m| async move {
            m.rename(parent, name, new_parent, new_name, flags).await
        })
        .await
    }

    pub async fn link(
        &self,
        ino: u64,
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<Attr, ClientError> {
        self.meta("link", |m| async move {
            m.link(ino, new_parent, new_name).await
        })
        .await
    }

    pub async fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<Attr, ClientError> {
        self.meta("symlink", |m| async move {
            m.symlink(parent, name, target, uid, gid).await
        })
        .await
    }

    pub async fn read_link(&self, ino: u64) -> Result<Vec<u8>, ClientError> {
        self.meta("readlink", |m| async move { m.read_link(ino).await })
            .await
    }

    /// Every entry of directory `ino`, by name, read a page at a time.
    pub async fn read_dir_all(&self, ino: u64) -> Result<Vec<DirEntry>, ClientError> {
        let mut out: Vec<DirEntry> = Vec::new();
        loop {
            let after = out.last().map(|e| e.name.clone()).unwrap_or_default();
            let after = &after;
            let (page, more) = self
                .meta(
                    "readdir",
                    |m| async move { m.read_dir(ino, after, 0).await },
                )
                .await?;
            out.extend(page);
            if !more {
                return Ok(out);
            }
        }
    }

    pub async fn stat_fs(&self) -> Result<FsStats, ClientError> {
        self.meta("statfs", |m| async move { m.stat_fs().await })
            .await
    }

    pub async fn set_xattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        create: bool,
        replace: bool,
    ) -> Result<(), ClientError> {
        self.meta("setxattr", |m| async move {
            m.set_xattr(ino, name, value, create, replace).await
        })
        .await
    }

    pub async fn get_xattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>, ClientError> {
        self.meta("getxattr", |m| async move { m.get_xattr(ino, name).await })
            .await
    }

    pub async fn list_xattr(&self, ino: u64) -> Result<Vec<Vec<u8>>, ClientError> {
        self.meta("listxattr", |m| async move { m.list_xattr(ino).await })
            .await
    }

    pub async fn remove_xattr(&self, ino: u64, name: &[u8]) -> Result<(), ClientError> {
        self.meta(
            "removexattr",
            |m| async move { m.remove_xattr(ino, name).await },
        )
        .await
    }

    /// A regular file's attributes and segment layouts (an open revalidates with it).
    pub async fn open_file(&self, ino: u64) -> Result<(Attr, FileInfo), ClientError> {
        self.meta("open", |m| async move { m.open_file(ino).await })
            .await
    }

    /// Places new segments of committed file `ino` from `first` on.
    pub async fn grow_file(
        &self,
        ino: u64,
        first: u32,
        lengths: &[u64],
    ) -> Result<Vec<SegmentLayout>, ClientError> {
        self.meta(
            "grow",
            |m| async move { m.grow_file(ino, first, lengths).await },
        )
        .await
    }

    /// Bytes `offset..offset + length` of one segment, read as [`Client::get`] reads a piece.
    pub async fn read_segment(
        &self,
        layout: &SegmentLayout,
        offset: u64,
        length: u64,
    ) -> Result<Vec<Bytes>, ClientError> {
        let what = format!("read segment {}", layout.segment_id);
        let transit = crate::window::Transit::new(1, length.max(1));
        let leg = transit.start(length);
        self.read_piece(layout, &what, offset, length, &leg, None)
            .await
    }

    /// Writes a segment whole at its primary: `data` is all of its bytes, `layout.length` is
    /// taken as `data.len()` (a grown or truncated last segment is rewritten so; the MDS learns
    /// the new length from SetAttr's `resized`). `new`: the MDS has just placed it.
    pub async fn write_segment(
        &self,
        layout: &SegmentLayout,
        data: Bytes,
        new: bool,
    ) -> Result<(), ClientError> {
        self.write_segment_with(layout, data, new, |_| {}).await
    }

    /// [`Client::write_segment`], telling `moved` of the bytes as they reach the primary (a
    /// retried attempt's again: a [`Leg`](crate::Leg) counts no byte twice), so that a writer
    /// keeping a window of bytes in transit starts its next segment while this one's primary
    /// encodes and its holders sync.
    pub async fn write_segment_with(
        &self,
        layout: &SegmentLayout,
        data: Bytes,
        new: bool,
        moved: impl Fn(u64) + Clone + Send + Sync + 'static,
    ) -> Result<(), ClientError> {
        let mut layout = layout.clone();
        layout.length = data.len() as u64;
        let what = format!("write segment {}", layout.segment_id);
        let first = std::sync::atomic::AtomicBool::new(new);
        let len = data.len() as u64;
        self.on_primary(&layout, &what, Some(len), |osd, mut l, at_primary| {
            let (data, moved) = (data.clone(), moved.clone());
            l.length = len;
            let age = match first.swap(false, Ordering::Relaxed) {
                true => SegmentAge::New,
                false => SegmentAge::Existing,
            };
            async move {
                osd.write_segment_bytes_with(&l, data, age, move |n| {
                    at_primary.fetch_add(n, Ordering::Relaxed);
                    moved(n);
                })
                .await
            }
        })
        .await
        .map(drop)
    }

    /// Overwrites `data.len()` bytes of a segment from `offset` (inside it) at its primary.
    pub async fn update_segment(
        &self,
        layout: &SegmentLayout,
        offset: u64,
        data: Bytes,
    ) -> Result<(), ClientError> {
        let what = format!("update segment {}", layout.segment_id);
        self.on_primary(layout, &what, None, |osd, l, _moved| {
            let data = data.clone();
            async move { osd.update_segment(&l, offset, &data).await }
        })
        .await
        .map(drop)
    }
}

impl Client {
    /// One StatFs call, without retries (a mount's check that the MDS answers).
    /// An online backup of a SQLite metadata store (the admin certificate): the database file's
    /// pieces handed to `sink` in order; the bytes in all. Not retried (a retry would repeat
    /// bytes already handed on).
    pub async fn backup_metadata(
        &self,
        sink: impl FnMut(&[u8]) -> Result<(), ecstack_mds_proto::MdsError>,
    ) -> Result<u64, ClientError> {
        Ok(self.mds().backup(sink).await?)
    }

    /// `statfs` without the retry policy: one attempt at each listed MDS (`[mds] addrs`: a
    /// standby answers `Unavailable` at once and the next attempt goes to the next MDS).
    pub async fn stat_fs_once(&self) -> Result<FsStats, ClientError> {
        let mut tries = self.config().mds_addrs().len();
        loop {
            tries -= 1;
            match self.mds().stat_fs().await {
                Err(e) if e.is_retryable() && tries > 0 => continue,
                r => return Ok(r?),
            }
        }
    }
}
