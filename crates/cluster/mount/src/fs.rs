//! [`CodfsFs`]: `fuser::Filesystem` over the client. The kernel calls one method at a time (one
//! session thread); each runs its cluster calls to completion on the mount's runtime.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use ecstack_client::{
    Attr, Client, ClientError, Errno, FileInfo, FileKind, MdsError, RenameFlags, SegmentCache,
    SetAttr, SetTime,
};
use fuser::{
    FileAttr, FileType, Filesystem, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
};
use tokio::runtime::Handle;

/// Attributes and entries are not cached by the kernel: every stat and lookup asks the MDS, so a
/// change made through another mount is seen at once (close-to-open needs at least that much).
const TTL: Duration = Duration::ZERO;
/// The block size `stat` and `statfs` report.
const BLOCK: u32 = 4096;
const NAME_MAX: usize = 255;

/// One open file's state in this mount.
#[derive(Debug)]
struct FileState {
    /// As the MDS had it at the last open or commit.
    attr: Attr,
    /// The committed segments' layouts.
    info: FileInfo,
    /// The size this mount sees (its own writes included).
    size: u64,
    /// The size or bytes changed here since the last commit.
    changed: bool,
    /// When this mount last wrote (shown as mtime until the commit).
    mtime_ns: u64,
    opens: u32,
}

/// What a file handle names: an open file (its state is per inode), or a directory listing read
/// at opendir (readdir pages through it by offset).
enum Opened {
    File,
    Dir(Vec<(u64, FileType, Vec<u8>)>),
}

/// The file system of one mount.
pub struct CodfsFs {
    client: Client,
    rt: Handle,
    cache: SegmentCache,
    files: HashMap<u64, FileState>,
    handles: HashMap<u64, Opened>,
    next_fh: u64,
    seg: u64,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn time_of(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

fn kind_of(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::CharDev => FileType::CharDevice,
        FileKind::BlockDev => FileType::BlockDevice,
        FileKind::Socket => FileType::Socket,
    }
}

/// The errno a failed call answers the kernel with; failures of the cluster itself (more than m
/// OSDs down, the MDS unreachable) are EIO with a log line.
fn errno(e: &ClientError) -> i32 {
    let fs_errno = |e: &MdsError| match e {
        MdsError::NotFound(_) => Some(libc::ENOENT),
        MdsError::InvalidArgument(_) => Some(libc::EINVAL),
        MdsError::PermissionDenied(_) => Some(libc::EACCES),
        MdsError::Fs { errno, .. } => Some(match errno {
            Errno::Exist => libc::EEXIST,
            Errno::NotEmpty => libc::ENOTEMPTY,
            Errno::NotDir => libc::ENOTDIR,
            Errno::IsDir => libc::EISDIR,
            Errno::NameTooLong => libc::ENAMETOOLONG,
            Errno::NoData => libc::ENODATA,
            Errno::Invalid => libc::EINVAL,
            Errno::Range => libc::ERANGE,
            Errno::MLink => libc::EMLINK,
            Errno::Perm => libc::EPERM,
        }),
        _ => None,
    };
    match e {
        ClientError::Mds(m) => fs_errno(m).unwrap_or_else(|| {
            tracing::error!(error = %e, "cluster call failed");
            libc::EIO
        }),
        ClientError::Range { .. } => libc::EINVAL,
        _ => {
            tracing::error!(error = %e, "cluster call failed");
            libc::EIO
        }
    }
}

type Res<T> = Result<T, i32>;

fn name_ok(name: &OsStr) -> Res<&[u8]> {
    let b = name.as_bytes();
    if b.len() > NAME_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    Ok(b)
}

impl CodfsFs {
    pub fn new(client: Client, rt: Handle, cache_bytes: u64, segment_bytes: u64) -> CodfsFs {
        CodfsFs {
            client,
            rt,
            cache: SegmentCache::new(cache_bytes),
            files: HashMap::new(),
            handles: HashMap::new(),
            next_fh: 1,
            seg: segment_bytes.max(1),
        }
    }

    /// The cache's counters (hits, misses, evictions, invalidations).
    pub fn cache_stats(&self) -> ecstack_client::CacheStats {
        self.cache.stats()
    }

    fn block<T>(&self, f: impl std::future::Future<Output = Result<T, ClientError>>) -> Res<T> {
        self.rt.block_on(f).map_err(|e| errno(&e))
    }

    /// The attributes the kernel sees: the MDS's, with this mount's unflushed size and mtime.
    fn file_attr(&self, a: &Attr) -> FileAttr {
        let (size, mtime) = match self.files.get(&a.ino) {
            Some(st) if st.changed => (st.size, st.mtime_ns),
            _ => (a.size, a.mtime_ns),
        };
        FileAttr {
            ino: a.ino,
            size,
            blocks: size.div_ceil(512),
            atime: time_of(a.atime_ns),
            mtime: time_of(mtime),
            ctime: time_of(a.ctime_ns),
            crtime: time_of(a.ctime_ns),
            kind: kind_of(a.kind),
            perm: (a.mode & 0o7777) as u16,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            blksize: BLOCK,
            flags: 0,
        }
    }

    fn fh(&mut self, h: Opened) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, h);
        fh
    }

    /// Close-to-open: the file's version and layouts from the MDS; clean cached segments of
    /// another version are dropped. This mount's own unflushed writes stay.
    fn open_state(&mut self, ino: u64) -> Res<()> {
        let c = self.client.clone();
        let (attr, info) = self.block(async move { c.open_file(ino).await })?;
        self.cache.drop_stale(ino, attr.version);
        match self.files.get_mut(&ino) {
            Some(st) if st.changed => {}
            Some(st) => {
                st.size = attr.size;
                st.attr = attr;
                st.info = info;
            }
            None => {
                self.files.insert(
                    ino,
                    FileState {
                        size: attr.size,
                        mtime_ns: attr.mtime_ns,
                        attr,
                        info,
                        changed: false,
                        opens: 0,
                    },
                );
            }
        }
        Ok(())
    }

    /// Segment `idx` of `ino` in the cache (read whole from the cluster on a miss).
    fn load(&mut self, ino: u64, idx: u32) -> Res<()> {
        if self.cache.get((ino, idx)).is_some() {
            return Ok(());
        }
        let st = self.files.get(&ino).ok_or(libc::EBADF)?;
        let layout = st
            .info
            .segments
            .iter()
            .find(|s| s.index == idx)
            .cloned()
            .ok_or_else(|| {
                tracing::error!(ino, idx, "a segment inside the file is not in its layout");
                libc::EIO
            })?;
        let version = st.attr.version;
        let c = self.client.clone();
        let frames = self.block(async move { c.read_segment(&layout, 0, layout.length).await })?;
        let mut data = Vec::with_capacity(frames.iter().map(|f| f.len()).sum());
        for f in frames {
            data.extend_from_slice(&f);
        }
        self.cache.insert((ino, idx), data, version);
        Ok(())
    }

    /// Makes this mount's view of `ino` `new` bytes long: the cut or grown last segment is made
    /// its new length in the cache, new segments are zeros, segments past the end go.
    fn resize_local(&mut self, ino: u64, new: u64) -> Res<()> {
        let seg = self.seg;
        let (old, version) = {
            let st = self.files.get(&ino).ok_or(libc::EBADF)?;
            (st.size, st.attr.version)
        };
        if new == old {
            return Ok(());
        }
        let count = |size: u64| size.div_ceil(seg) as u32;
        let (old_n, new_n) = (count(old), count(new));
        let len_in = |idx: u32, size: u64| (size - u64::from(idx) * seg).min(seg);
        if new > old {
            if old_n > 0 && !old.is_multiple_of(seg) {
                let idx = old_n - 1;
                self.load(ino, idx)?;
                self.cache.set_len((ino, idx), len_in(idx, new));
            }
            for idx in old_n..new_n {
                self.cache.insert_new((ino, idx), len_in(idx, new), version);
            }
        } else {
            self.cache.drop_from(ino, new_n);
            if new_n > 0 && !new.is_multiple_of(seg) {
                let idx = new_n - 1;
                self.load(ino, idx)?;
                self.cache.set_len((ino, idx), len_in(idx, new));
            }
        }
        let st = self.files.get_mut(&ino).expect("checked");
        st.size = new;
        st.changed = true;
        st.mtime_ns = now_ns();
        Ok(())
    }

    /// [`Self::resize_local`] that grows a file by at most half the cache at a time, flushing in
    /// between when the cache is full: a large hole (a truncate up, a write far past the end) is
    /// written as zeros without holding all of them in memory.
    fn set_size(&mut self, ino: u64, new: u64) -> Res<()> {
        if new
            > self
                .seg
                .saturating_mul(ecstack_client::MAX_SEGMENTS_PER_FILE)
        {
            return Err(libc::EFBIG);
        }
        let step = (self.cache.capacity() / 2).max(self.seg);
        loop {
            let cur = self.files.get(&ino).ok_or(libc::EBADF)?.size;
            if new <= cur.saturating_add(step) {
                return self.resize_local(ino, new);
            }
            self.resize_local(ino, cur + step)?;
            self.make_room()?;
        }
    }

    /// Writes `ino`'s dirty segments to the cluster and commits its size and times (one SetAttr):
    /// an unchanged-length segment as one update of its dirty range, a new, grown or cut one whole.
    fn flush_file(&mut self, ino: u64) -> Res<()> {
        let dirty = self.cache.dirty_of(ino);
        let Some(st) = self.files.get(&ino) else {
            return Ok(());
        };
        if dirty.is_empty() && !st.changed {
            return Ok(());
        }
        let committed = st.info.segments.len() as u32;
        let size = st.size;
        let mut resized = Vec::new();
        let mut new = Vec::new();
        for &idx in &dirty {
            let s = self
                .cache
                .peek((ino, idx))
                .expect("dirty segments are cached");
            if idx >= committed {
                new.push((idx, Bytes::copy_from_slice(&s.data)));
                continue;
            }
            let layout = st.info.segments[idx as usize].clone();
            let c = self.client.clone();
            if s.needs_whole_write() {
                let data = Bytes::copy_from_slice(&s.data);
                resized.push((layout.segment_id, data.len() as u64));
                self.block(async move { c.write_segment(&layout, data, false).await })?;
            } else if let Some(r) = s.dirty.clone().filter(|r| !r.is_empty()) {
                let data = Bytes::copy_from_slice(&s.data[r.start as usize..r.end as usize]);
                self.block(async move { c.update_segment(&layout, r.start, data).await })?;
            }
        }
        if !new.is_empty() {
            let lengths: Vec<u64> = new.iter().map(|(_, d)| d.len() as u64).collect();
            let c = self.client.clone();
            let layouts = self.block(async move { c.grow_file(ino, committed, &lengths).await })?;
            for (layout, (_, data)) in layouts.into_iter().zip(new) {
                let c = self.client.clone();
                self.block(async move { c.write_segment(&layout, data, true).await })?;
            }
        }
        let set = SetAttr {
            size: Some(size),
            resized,
            data_changed: true,
            ..SetAttr::default()
        };
        let c = self.client.clone();
        self.block(async move { c.set_attr(ino, &set).await })?;
        let c = self.client.clone();
        let (attr, info) = self.block(async move { c.open_file(ino).await })?;
        for idx in dirty {
            self.cache.mark_clean((ino, idx), attr.version);
        }
        self.cache.retag(ino, attr.version);
        let st = self.files.get_mut(&ino).expect("checked");
        st.size = attr.size;
        st.mtime_ns = attr.mtime_ns;
        st.attr = attr;
        st.info = info;
        st.changed = false;
        Ok(())
    }

    /// Keeps the cache within its size: clean segments are dropped; files whose dirty segments
    /// still hold it over are flushed.
    fn make_room(&mut self) -> Res<()> {
        for ino in self.cache.evict() {
            self.flush_file(ino)?;
        }
        self.cache.evict();
        Ok(())
    }

    fn read_bytes(&mut self, ino: u64, offset: u64, size: u64) -> Res<Vec<u8>> {
        let len = self.files.get(&ino).ok_or(libc::EBADF)?.size;
        let end = (offset + size).min(len);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut at = offset;
        while at < end {
            let idx = (at / self.seg) as u32;
            let within = at % self.seg;
            let n = (self.seg - within).min(end - at);
            self.load(ino, idx)?;
            let s = self.cache.peek((ino, idx)).expect("loaded");
            let stop = ((within + n) as usize).min(s.data.len());
            out.extend_from_slice(&s.data[within as usize..stop]);
            at += n;
        }
        self.make_room()?;
        Ok(out)
    }

    fn write_bytes(&mut self, ino: u64, offset: u64, data: &[u8]) -> Res<()> {
        let end = offset + data.len() as u64;
        if end > self.files.get(&ino).ok_or(libc::EBADF)?.size {
            self.set_size(ino, end)?;
        }
        let mut at = 0usize;
        while at < data.len() {
            let pos = offset + at as u64;
            let idx = (pos / self.seg) as u32;
            let within = pos % self.seg;
            let n = ((self.seg - within) as usize).min(data.len() - at);
            self.load(ino, idx)?;
            self.cache.write((ino, idx), within, &data[at..at + n]);
            at += n;
        }
        let st = self.files.get_mut(&ino).expect("checked");
        st.changed = true;
        st.mtime_ns = now_ns();
        self.make_room()
    }

    fn entry_reply(&self, r: Res<Attr>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry(&TTL, &self.file_attr(&a), 0),
            Err(e) => reply.error(e),
        }
    }

    fn attr_of(&mut self, ino: u64) -> Res<Attr> {
        let c = self.client.clone();
        self.block(async move { c.get_attr(ino).await })
    }

    /// Flushes every file with unflushed writes (unmount).
    fn flush_all(&mut self) {
        let inos: Vec<u64> = self.files.keys().copied().collect();
        for ino in inos {
            if let Err(e) = self.flush_file(ino) {
                tracing::error!(ino, errno = e, "could not flush a file at unmount");
            }
        }
    }
}

impl Filesystem for CodfsFs {
    fn destroy(&mut self) {
        self.flush_all();
        let s = self.cache.stats();
        tracing::info!(
            hits = s.hits,
            misses = s.misses,
            evictions = s.evictions,
            invalidations = s.invalidations,
            "segment cache at unmount"
        );
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let r = name_ok(name).and_then(|n| {
            let c = self.client.clone();
            self.block(async move { c.lookup(parent, n).await })
        });
        self.entry_reply(r, reply)
    }

    fn forget(&mut self, _req: &Request<'_>, ino: u64, _nlookup: u64) {
        let idle = self
            .files
            .get(&ino)
            .is_some_and(|st| st.opens == 0 && !st.changed && !self.cache.is_dirty(ino));
        if idle {
            self.files.remove(&ino);
            self.cache.drop_file(ino);
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.attr_of(ino) {
            Ok(a) => reply.attr(&TTL, &self.file_attr(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let r = (|| -> Res<Attr> {
            if let Some(size) = size {
                if !self.files.contains_key(&ino) {
                    self.open_state(ino)?;
                }
                self.set_size(ino, size)?;
                self.flush_file(ino)?;
            }
            let t = |t: TimeOrNow| match t {
                TimeOrNow::Now => SetTime::Now,
                TimeOrNow::SpecificTime(s) => SetTime::Ns(
                    s.duration_since(UNIX_EPOCH)
                        .map(|d| d.as_nanos() as u64)
                        .unwrap_or(0),
                ),
            };
            let set = SetAttr {
                mode: mode.map(|m| m & 0o7777),
                uid,
                gid,
                atime: atime.map(t),
                mtime: mtime.map(t),
                ..SetAttr::default()
            };
            if set == SetAttr::default() {
                return self.attr_of(ino);
            }
            let c = self.client.clone();
            let a = self.block(async move { c.set_attr(ino, &set).await })?;
            if let (Some(st), Some(_)) = (self.files.get_mut(&ino), mtime) {
                st.mtime_ns = a.mtime_ns;
            }
            Ok(a)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &self.file_attr(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        let c = self.client.clone();
        match self.block(async move { c.read_link(ino).await }) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => FileKind::File,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFCHR => FileKind::CharDev,
            libc::S_IFBLK => FileKind::BlockDev,
            libc::S_IFSOCK => FileKind::Socket,
            _ => return reply.error(libc::EINVAL),
        };
        let (uid, gid) = (req.uid(), req.gid());
        let r = name_ok(name).and_then(|n| {
            let c = self.client.clone();
            self.block(async move {
                c.mknod(parent, n, kind, mode & 0o7777, uid, gid, rdev, true)
                    .await
            })
        });
        self.entry_reply(r, reply)
    }

    fn mkdir(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let (uid, gid) = (req.uid(), req.gid());
        let r = name_ok(name).and_then(|n| {
            let c = self.client.clone();
            self.block(async move { c.mkdir(parent, n, mode & 0o7777, uid, gid).await })
        });
        self.entry_reply(r, reply)
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let r = name_ok(name).and_then(|n| {
            let c = self.client.clone();
            self.block(async move { c.unlink(parent, n).await })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let r = name_ok(name).and_then(|n| {
            let c = self.client.clone();
            self.block(async move { c.rmdir(parent, n).await })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (uid, gid) = (req.uid(), req.gid());
        let target = target.as_os_str().as_bytes().to_vec();
        let r = name_ok(link_name).and_then(|n| {
            let c = self.client.clone();
            self.block(async move { c.symlink(parent, n, &target, uid, gid).await })
        });
        self.entry_reply(r, reply)
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        const NOREPLACE: u32 = 1;
        const EXCHANGE: u32 = 2;
        if flags & !(NOREPLACE | EXCHANGE) != 0 {
            return reply.error(libc::EINVAL);
        }
        let flags = RenameFlags {
            noreplace: flags & NOREPLACE != 0,
            exchange: flags & EXCHANGE != 0,
        };
        let r = name_ok(name).and_then(|a| {
            let b = name_ok(newname)?;
            let c = self.client.clone();
            self.block(async move { c.rename(parent, a, newparent, b, flags).await })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = name_ok(newname).and_then(|n| {
            let c = self.client.clone();
            self.block(async move { c.link(ino, newparent, n).await })
        });
        self.entry_reply(r, reply)
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match self.open_state(ino) {
            Ok(()) => {
                self.files.get_mut(&ino).expect("opened").opens += 1;
                let fh = self.fh(Opened::File);
                // No FOPEN_KEEP_CACHE: the kernel drops its page cache of the file at each open.
                reply.opened(fh, 0)
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        match self.read_bytes(ino, offset.max(0) as u64, u64::from(size)) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        match self.write_bytes(ino, offset.max(0) as u64, data) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _lock: u64, reply: ReplyEmpty) {
        match self.flush_file(ino) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.handles.remove(&fh);
        let r = self.flush_file(ino);
        if let Some(st) = self.files.get_mut(&ino) {
            st.opens = st.opens.saturating_sub(1);
        }
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.flush_file(ino) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let c = self.client.clone();
        match self.block(async move { c.read_dir_all(ino).await }) {
            Ok(entries) => {
                let mut list = vec![
                    (ino, FileType::Directory, b".".to_vec()),
                    (ino, FileType::Directory, b"..".to_vec()),
                ];
                list.extend(
                    entries
                        .into_iter()
                        .map(|e| (e.attr.ino, kind_of(e.attr.kind), e.name)),
                );
                let fh = self.fh(Opened::Dir(list));
                reply.opened(fh, 0)
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let Some(Opened::Dir(list)) = self.handles.get(&fh) else {
            return reply.error(libc::EBADF);
        };
        for (i, (ino, kind, name)) in list.iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(*ino, (i + 1) as i64, *kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok()
    }

    fn releasedir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        reply: ReplyEmpty,
    ) {
        self.handles.remove(&fh);
        reply.ok()
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let c = self.client.clone();
        match self.block(async move { c.stat_fs().await }) {
            Ok(s) => {
                let b = u64::from(BLOCK);
                reply.statfs(
                    s.capacity_bytes / b,
                    s.free_bytes / b,
                    s.free_bytes / b,
                    s.inodes + (1 << 32),
                    1 << 32,
                    BLOCK,
                    s.name_max,
                    BLOCK,
                )
            }
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let (create, replace) = (
            flags & libc::XATTR_CREATE != 0,
            flags & libc::XATTR_REPLACE != 0,
        );
        let (name, value) = (name.as_bytes().to_vec(), value.to_vec());
        let c = self.client.clone();
        match self.block(async move { c.set_xattr(ino, &name, &value, create, replace).await }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        let name = name.as_bytes().to_vec();
        let c = self.client.clone();
        match self.block(async move { c.get_xattr(ino, &name).await }) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(libc::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        let c = self.client.clone();
        match self.block(async move { c.list_xattr(ino).await }) {
            Ok(names) => {
                let mut v = Vec::new();
                for n in names {
                    v.extend_from_slice(&n);
                    v.push(0);
                }
                if size == 0 {
                    reply.size(v.len() as u32)
                } else if v.len() > size as usize {
                    reply.error(libc::ERANGE)
                } else {
                    reply.data(&v)
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name.as_bytes().to_vec();
        let c = self.client.clone();
        match self.block(async move { c.remove_xattr(ino, &name).await }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn access(&mut self, _req: &Request<'_>, _ino: u64, _mask: i32, reply: ReplyEmpty) {
        // default_permissions: the kernel checks modes itself.
        reply.ok()
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (uid, gid) = (req.uid(), req.gid());
        let exclusive = flags & libc::O_EXCL != 0;
        let r = name_ok(name).and_then(|n| {
            let c = self.client.clone();
            self.block(async move {
                c.mknod(
                    parent,
                    n,
                    FileKind::File,
                    mode & 0o7777,
                    uid,
                    gid,
                    0,
                    exclusive,
                )
                .await
            })
        });
        let r = r.and_then(|a| {
            self.open_state(a.ino)?;
            self.files.get_mut(&a.ino).expect("opened").opens += 1;
            Ok(a)
        });
        match r {
            Ok(a) => {
                let fh = self.fh(Opened::File);
                reply.created(&TTL, &self.file_attr(&a), 0, fh, 0)
            }
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if mode != 0 {
            return reply.error(libc::EOPNOTSUPP);
        }
        let end = (offset.max(0) + length.max(0)) as u64;
        let r = (|| {
            if !self.files.contains_key(&ino) {
                self.open_state(ino)?;
            }
            if end > self.files[&ino].size {
                self.set_size(ino, end)?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}
