//! [`CodfsFs`]: `fuser::Filesystem` over the client.
//!
//! The kernel's requests arrive on one session thread; each handler takes what it needs from the
//! request and hands the work to the mount's tokio runtime, which replies when the cluster has
//! answered (fuser's replies are `Send`). So requests run concurrently: lookups, stats and reads
//! of different files overlap, and a slow flush of one file holds up no other file.
//!
//! Ordering: the work on one file's bytes (open, read, write, flush, fsync, release, truncate,
//! fallocate) takes the file's lock ([`Entry::state`]), so it runs one request at a time per
//! file, as the segment cache's bookkeeping needs. Namespace requests need no lock here: the
//! kernel's VFS already waits for the reply of a directory change before it sends a conflicting
//! one, and each is one MDS transaction.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ffi::OsStr;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use ecstack_client::{
    Attr, Client, ClientError, Errno, FileKind, Leg, MdsError, RenameFlags, SegmentCache,
    SegmentLayout, SetAttr, SetTime, Transit,
};
use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow,
};
use tokio::runtime::Handle;

use crate::xattrs::XattrCache;

/// The block size `stat` and `statfs` report.
const BLOCK: u32 = 4096;
const NAME_MAX: usize = 255;
/// Requests the kernel may have in flight in the background (readahead, async direct I/O).
const KERNEL_BACKGROUND_MAX: u16 = 64;
/// The largest write the kernel sends in one request.
const KERNEL_WRITE_BYTES_MAX: u32 = 1 << 20;
/// Segment updates a flush has in flight at once.
const UPDATES_IN_FLIGHT_MAX: usize = 16;

/// The background writes of one file's full new segments ([`Shared::start_behind`]): each ends
/// with its segment's index and the write's result (the layout GrowFile gave it goes to
/// [`Entry::placed`]).
type Behind = tokio::task::JoinSet<(u32, Result<(), ClientError>)>;

/// One open file's state in this mount (under its [`Entry::state`] lock).
#[derive(Debug)]
struct FileState {
    /// As the MDS had it at the last open or commit.
    attr: Attr,
    /// The layouts of segments 0.. as far as they are known: the committed ones, then those
    /// placed by this mount (a flush, or write-behind in order).
    segments: Vec<SegmentLayout>,
    /// The size this mount sees (its own writes included).
    size: u64,
    /// The size or bytes changed here since the last commit.
    changed: bool,
    /// When this mount last wrote (shown as mtime until the commit).
    mtime_ns: u64,
    opens: u32,
    /// Write-behind: whole writes of full new segments under way in the background, each
    /// placing its segment (GrowFile) first. A flush waits for them first.
    behind: Behind,
    /// The segment each of `behind`'s tasks writes (for a task that ended abnormally).
    behind_idx: HashMap<tokio::task::Id, u32>,
    /// The next segment write-behind starts, when full (`segments.len()` or past it).
    behind_next: u32,
    /// Segments whose background write failed: dirty again, placed and written anew by the next
    /// flush.
    failed: BTreeSet<u32>,
    /// An error of a write the application has not been told of (a background segment write, a
    /// flush of this file to make room for another): the file's next write, fsync or close
    /// answers it. The bytes stay dirty, so the next flush writes them again.
    error: Option<i32>,
    /// Bumped whenever the file's bytes may have changed here or at the MDS (a write, a resize, a
    /// flush, an open): a segment read ahead before is not used ([`Ahead`]).
    gen: u64,
    /// The segments after the last one a sequential reader read, being read in the background
    /// (in order of index, at most [`Shared::ahead_segments`]).
    ahead: VecDeque<Ahead>,
    /// Where the last read ended (a read starting there is sequential).
    read_end: u64,
    /// Attribute changes made through a descriptor while the file has writes not committed
    /// (tar's `fchmod`, `fchown`, `futimens` before its close): committed with them, by the
    /// close's or fsync's SetAttr ([`Shared::setattr_pending`]).
    pending: Pending,
}

/// Attribute changes kept for a file's next commit (see [`FileState::pending`]).
#[derive(Debug, Clone, Copy, Default)]
struct Pending {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    atime_ns: Option<u64>,
    /// When the last of them was made (the ctime shown until the commit).
    ctime_ns: Option<u64>,
}

/// What `stat` shows of a file with writes or attribute changes not committed yet.
#[derive(Debug, Clone, Copy)]
struct Unflushed {
    size: u64,
    mtime_ns: u64,
    pending: Pending,
}

/// A segment read ahead of a sequential reader ([`Shared::read_ahead`]): its index, the file's
/// `gen` when the read started, the read's result when it ends, and its place in the mount's count
/// of segments read ahead (given back when it is used or dropped).
#[derive(Debug)]
struct Ahead {
    idx: u32,
    gen: u64,
    rx: tokio::sync::oneshot::Receiver<Res<Vec<u8>>>,
    _counted: AheadCount,
}

/// One segment in [`Shared::ahead_held`]'s count while its [`Ahead`] lives.
#[derive(Debug)]
struct AheadCount(Arc<AtomicUsize>);

impl Drop for AheadCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl FileState {
    /// Its bytes changed here (a write, a resize): not committed yet, and nothing read ahead
    /// before now is used.
    fn wrote(&mut self) {
        self.changed = true;
        self.forget_ahead();
    }

    /// Nothing read ahead before now is used.
    fn forget_ahead(&mut self) {
        self.gen += 1;
        self.ahead.clear();
    }

    /// A file as the MDS has it: not changed here, not open.
    fn new(attr: Attr, segments: Vec<SegmentLayout>) -> FileState {
        FileState {
            size: attr.size,
            mtime_ns: attr.mtime_ns,
            attr,
            segments,
            changed: false,
            opens: 0,
            behind: Behind::new(),
            behind_idx: HashMap::new(),
            behind_next: 0,
            failed: BTreeSet::new(),
            error: None,
            gen: 0,
            ahead: VecDeque::new(),
            read_end: 0,
            pending: Pending::default(),
        }
    }
}

/// One file this mount has opened or resized.
#[derive(Debug, Default)]
struct Entry {
    /// Loaded at the first open (None before): the per-file lock of the data path (in an `Arc`: a
    /// write done on the session thread hands it to the task that finishes the write's work).
    state: Arc<tokio::sync::Mutex<Option<FileState>>>,
    /// Size and mtime of writes not yet committed, for `stat` while a write holds the lock.
    unflushed: Mutex<Option<Unflushed>>,
    /// Layouts of segments write-behind placed and wrote, put here by its tasks as they end
    /// (before their segments may leave the cache): they join the state's `segments` in order,
    /// under its lock ([`Shared::join_placed`]); a read of such a segment meanwhile finds its
    /// layout here.
    placed: Mutex<BTreeMap<u32, SegmentLayout>>,
}

/// A file's lock held by a task (see [`Entry::state`]).
type FileGuard = tokio::sync::OwnedMutexGuard<Option<FileState>>;

/// The pieces of a request of `len` bytes at `offset` in segments of `seg` bytes: (segment index,
/// offset in it, range of the request).
fn pieces(
    seg: u64,
    offset: u64,
    len: usize,
) -> impl Iterator<Item = (u32, u64, std::ops::Range<usize>)> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at >= len {
            return None;
        }
        let pos = offset + at as u64;
        let within = pos % seg;
        let n = ((seg - within) as usize).min(len - at);
        let piece = ((pos / seg) as u32, within, at..at + n);
        at += n;
        Some(piece)
    })
}

/// Times a new segment is placed anew when its write fails, and the wait before each.
const PLACE_ATTEMPTS: u32 = 4;
const PLACE_RETRY_WAIT: Duration = Duration::from_secs(1);

/// Places `ino`'s new segment `idx` (GrowFile) and writes `data` as all of it; a write the primary
/// refuses as not durable (its layout names OSDs that just died, which the MDS has not seen down
/// yet: "a write needs k + 1 usable chunks") is placed anew after a wait, up to
/// [`PLACE_ATTEMPTS`] placements. `moved` is told of the bytes as they reach the primary (again
/// after a new placement). The layout it was written at.
async fn place_and_write(
    c: &Client,
    ino: u64,
    idx: u32,
    data: bytes::Bytes,
    moved: impl Fn(u64) + Clone + Send + Sync + 'static,
) -> Result<SegmentLayout, ClientError> {
    let mut attempt = 1;
    loop {
        let layout = c
            .grow_file(ino, idx, &[data.len() as u64])
            .await?
            .pop()
            .ok_or_else(|| ClientError::Layout(format!("GrowFile placed no segment {idx}")))?;
        match c
            .write_segment_with(&layout, data.clone(), true, moved.clone())
            .await
        {
            Ok(()) => return Ok(layout),
            // The primary answered that too few of the layout's holders are usable: another
            // placement may avoid them (an unreachable primary was retried by the client already).
            Err(e) if e.is_not_durable() && attempt < PLACE_ATTEMPTS => {
                tracing::warn!(ino, segment = idx, attempt, error = %e, "a new segment's write failed; placing it anew");
                tokio::time::sleep(PLACE_RETRY_WAIT * attempt).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// One background segment write's place in the mount's write-behind window: its bytes in
/// transit (`leg`) and its count in flight, both given back when the write ends however (its task
/// finished, or aborted with its file's state).
struct BehindSlot {
    in_flight: Arc<Mutex<usize>>,
    leg: Arc<Leg>,
}

impl Drop for BehindSlot {
    fn drop(&mut self) {
        let mut n = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        debug_assert!(*n > 0, "a write-behind slot given back twice");
        *n = n.saturating_sub(1);
        drop(n);
        // Ended here, not at the leg's last drop: a clone of it in a request stream's callback
        // may live on after the write, and a writer waiting for room must be woken now.
        self.leg.end();
    }
}

/// `len` bytes at `offset` of the segment at `layout`, as the cluster has them.
async fn fetch(client: &Client, layout: &SegmentLayout, offset: u64, len: u64) -> Res<Vec<u8>> {
    let frames = client
        .read_segment(layout, offset, len)
        .await
        .map_err(errno)?;
    let mut data = Vec::with_capacity(frames.iter().map(|f| f.len()).sum());
    for f in frames {
        data.extend_from_slice(&f);
    }
    Ok(data)
}

/// The items of `lists` taken one from each list in turn: the first of every list, then the
/// second of every list that has one, and so on.
fn round_robin<T>(lists: Vec<Vec<T>>) -> impl Iterator<Item = T> {
    let mut iters: Vec<_> = lists.into_iter().map(Vec::into_iter).collect();
    let mut at = 0;
    std::iter::from_fn(move || {
        while !iters.is_empty() {
            at %= iters.len();
            match iters[at].next() {
                Some(x) => {
                    at += 1;
                    return Some(x);
                }
                None => {
                    iters.remove(at);
                }
            }
        }
        None
    })
}

/// A directory's entries as opendir read them: (inode, type, name), `.` and `..` first.
type Listing = Vec<(u64, FileType, Vec<u8>)>;

/// The file system state the handlers' tasks share.
pub(crate) struct Shared {
    client: Client,
    /// Shared with write-behind's tasks, which end their segment's write in it.
    cache: Arc<Mutex<SegmentCache>>,
    /// Write-behind's window, all files (see [`Shared::start_behind`]): `window` segments' bytes
    /// in transit to their primaries, as a put's, and at most one segment more in flight.
    behind_window: Transit,
    /// Background segment writes in flight, all files (each ends with its [`BehindSlot`]).
    behind_in_flight: Arc<Mutex<usize>>,
    /// The mount's runtime (write-behind starts its tasks from the session thread too).
    rt: Handle,
    files: Mutex<HashMap<u64, Arc<Entry>>>,
    /// Directory listings read at opendir (readdir pages through them by offset).
    dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    next_fh: AtomicU64,
    seg: u64,
    /// Whole segment writes in flight at once in one flush; write-behind's window in segments'
    /// bytes in transit (`behind_window`).
    window: usize,
    /// Segments a sequential reader has read ahead ([`Shared::read_ahead`]): put's window, or
    /// fewer when the cache holds fewer than twice as many.
    ahead_segments: usize,
    /// Segments read ahead and not yet used or dropped, all files: at most half the cache's
    /// worth (`ahead_held_max`), so many files read at once hold no more memory than that.
    ahead_held: Arc<AtomicUsize>,
    ahead_held_max: usize,
    /// `--cache-size 0`: no byte the cluster has is kept or written over in the cache. A read
    /// asks the OSDs for its bytes; a write inside a file is an update at each segment's primary
    /// before its reply ([`Shared::write_through`]); only new bytes past a file's stored end wait
    /// in the cache, to be written as whole segments.
    cache_off: bool,
    /// How long the kernel keeps entries and attributes (docs/mount.md).
    ttl: Duration,
    /// Extended attributes as the MDS answered them, kept as long (`xattrs.rs`).
    xattrs: Mutex<XattrCache>,
    /// Set once the session exists: invalidates the kernel's attributes of a file at its open.
    notifier: OnceLock<fuser::Notifier>,
}

/// The file system of one mount.
pub struct CodfsFs {
    shared: Arc<Shared>,
    rt: Handle,
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
fn errno(e: ClientError) -> i32 {
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
    match &e {
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
/// The work on one file's state under its lock (see [`Shared::with_file`]).
type BoxFut<'a, T> = std::pin::Pin<Box<dyn Future<Output = Res<T>> + Send + 'a>>;

/// A name from the kernel, owned (it moves into the request's task).
fn name_ok(name: &OsStr) -> Res<Vec<u8>> {
    let b = name.as_bytes();
    if b.len() > NAME_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    Ok(b.to_vec())
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(s) => SetTime::Ns(
            s.duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
        ),
    }
}

/// A reply that can carry an errno (every fuser reply type can).
trait Fail {
    fn fail(self, errno: i32);
}

macro_rules! fail_replies {
    ($($t:ty),*) => {$(
        impl Fail for $t {
            fn fail(self, errno: i32) {
                self.error(errno)
            }
        }
    )*};
}
fail_replies!(
    ReplyAttr,
    ReplyCreate,
    ReplyData,
    ReplyEmpty,
    ReplyEntry,
    ReplyOpen,
    ReplyStatfs,
    ReplyWrite,
    ReplyXattr
);

/// What an xattr call answers: the value's size when asked with size 0, ERANGE when it does not
/// fit, else the value.
fn xattr_reply(reply: ReplyXattr, size: u32, v: &[u8]) {
    if size == 0 {
        reply.size(v.len() as u32)
    } else if v.len() > size as usize {
        reply.error(libc::ERANGE)
    } else {
        reply.data(v)
    }
}

fn lock_cache(cache: &Mutex<SegmentCache>) -> MutexGuard<'_, SegmentCache> {
    cache.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes `st`'s unreported error (see [`FileState::error`]).
fn reported(st: &mut FileState) -> Res<()> {
    st.error.take().map_or(Ok(()), Err)
}

impl Shared {
    fn xattrs(&self) -> MutexGuard<'_, XattrCache> {
        self.xattrs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cache(&self) -> MutexGuard<'_, SegmentCache> {
        lock_cache(&self.cache)
    }

    /// The entry of `ino` (made on first use).
    fn entry(&self, ino: u64) -> Arc<Entry> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files.entry(ino).or_default().clone()
    }

    /// The attributes the kernel sees: the MDS's, with this mount's unflushed size and mtime.
    fn file_attr(&self, a: &Attr) -> FileAttr {
        let unflushed = self
            .files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&a.ino)
            .and_then(|e| *e.unflushed.lock().unwrap_or_else(|p| p.into_inner()));
        let (size, mtime, p) = unflushed.map_or((a.size, a.mtime_ns, Pending::default()), |u| {
            (u.size, u.mtime_ns, u.pending)
        });
        FileAttr {
            ino: a.ino,
            size,
            blocks: size.div_ceil(512),
            atime: time_of(p.atime_ns.unwrap_or(a.atime_ns)),
            mtime: time_of(mtime),
            ctime: time_of(p.ctime_ns.unwrap_or(a.ctime_ns)),
            crtime: time_of(a.ctime_ns),
            kind: kind_of(a.kind),
            perm: (p.mode.unwrap_or(a.mode) & 0o7777) as u16,
            nlink: a.nlink,
            uid: p.uid.unwrap_or(a.uid),
            gid: p.gid.unwrap_or(a.gid),
            rdev: a.rdev,
            blksize: BLOCK,
            flags: 0,
        }
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    /// Shows `st`'s unflushed size and mtime to `stat` (or none once committed).
    fn publish(entry: &Entry, st: &FileState) {
        *entry.unflushed.lock().unwrap_or_else(|p| p.into_inner()) =
            st.changed.then_some(Unflushed {
                size: st.size,
                mtime_ns: st.mtime_ns,
                pending: st.pending,
            });
    }

    /// Close-to-open: the file's version and layouts from the MDS; clean cached segments of
    /// another version are dropped, and so are the kernel's cached attributes of the file (its
    /// next size check asks again). This mount's own unflushed writes stay.
    async fn open_state(&self, ino: u64, slot: &mut Option<FileState>) -> Res<()> {
        let (attr, info) = self.client.open_file(ino).await.map_err(errno)?;
        if info.robust.is_some() {
            // Its bytes are rateless-coded blocks, not segments: `cluster get` reads it.
            tracing::warn!(ino, path = %info.path, "a robust file cannot be opened through the mount (read it with `ecstack cluster get`)");
            return Err(libc::EOPNOTSUPP);
        }
        self.cache().drop_stale(ino, attr.version);
        let segments = info.segments;
        if let Some(n) = self.notifier.get() {
            // Attributes only (offset < 0): the page cache goes at the open itself (no
            // FOPEN_KEEP_CACHE). ENOENT (the kernel has no such inode cached) is harmless.
            if let Err(e) = n.inval_inode(ino, -1, 0) {
                tracing::debug!(ino, error = %e, "attribute invalidation");
            }
        }
        match slot {
            Some(st) if st.changed => {}
            Some(st) => {
                st.size = attr.size;
                st.attr = attr;
                st.segments = segments;
                st.forget_ahead();
            }
            None => *slot = Some(FileState::new(attr, segments)),
        }
        Ok(())
    }

    /// Runs `f` on the cache with segment `idx` of `ino` in it whole (read from the cluster on a
    /// miss, or to fill a partial one). Under one hold of the cache lock, so no eviction comes
    /// between the load and `f`.
    async fn with_segment<R>(
        &self,
        ino: u64,
        idx: u32,
        st: &FileState,
        f: impl FnOnce(&mut SegmentCache) -> R,
    ) -> Res<R> {
        {
            let mut cache = self.cache();
            if cache.get((ino, idx)).is_some_and(|s| !s.is_partial()) {
                return Ok(f(&mut cache));
            }
        }
        let data = self.read_whole(ino, idx, st).await?;
        let mut cache = self.cache();
        // A partial segment (this mount's writes, not flushed) is filled, its writes on top; the
        // file's lock, held, keeps anything else from caching the segment meanwhile.
        match cache.peek((ino, idx)) {
            Some(s) if s.is_partial() => {
                if !cache.fill((ino, idx), data) {
                    tracing::error!(
                        ino,
                        idx,
                        "a segment read back at another length than its layout's"
                    );
                    return Err(libc::EIO);
                }
            }
            Some(_) => {}
            None => cache.insert((ino, idx), data, st.attr.version),
        }
        Ok(f(&mut cache))
    }

    /// The layout of `ino`'s segment `idx`: committed or placed by this mount.
    fn layout_of(&self, ino: u64, idx: u32, st: &FileState) -> Res<SegmentLayout> {
        let placed = || {
            let entry = self.entry(ino);
            let placed = entry.placed.lock().unwrap_or_else(|p| p.into_inner());
            placed.get(&idx).cloned()
        };
        let layout = st.segments.get(idx as usize).cloned().or_else(placed);
        layout.filter(|s| s.index == idx).ok_or_else(|| {
            tracing::error!(ino, idx, "a segment inside the file is not in its layout");
            libc::EIO
        })
    }

    /// The length of `ino`'s segment `idx` when a write inside it may go into the cache without
    /// its other bytes ([`SegmentCache::patch`]): it is committed, at the length this mount sees.
    fn patch_len(&self, idx: u32, st: &FileState) -> Option<u64> {
        let start = u64::from(idx).checked_mul(self.seg)?;
        if start >= st.size {
            return None;
        }
        let len = (st.size - start).min(self.seg);
        let layout = st.segments.get(idx as usize)?;
        (layout.index == idx && layout.length == len).then_some(len)
    }

    /// `len` bytes at `offset` of `ino`'s segment `idx` as the cluster has them.
    async fn read_range(
        &self,
        ino: u64,
        idx: u32,
        st: &FileState,
        offset: u64,
        len: u64,
    ) -> Res<Vec<u8>> {
        let layout = self.layout_of(ino, idx, st)?;
        fetch(&self.client, &layout, offset, len).await
    }

    /// `ino`'s segment `idx` whole, as the cluster has it.
    async fn read_whole(&self, ino: u64, idx: u32, st: &FileState) -> Res<Vec<u8>> {
        let length = self.layout_of(ino, idx, st)?.length;
        self.read_range(ino, idx, st, 0, length).await
    }

    /// Makes this mount's view of `ino` `new` bytes long: the cut or grown last segment is made
    /// its new length in the cache, new segments are zeros, segments past the end go.
    async fn resize_local(&self, ino: u64, st: &mut FileState, new: u64) -> Res<()> {
        let seg = self.seg;
        let (old, version) = (st.size, st.attr.version);
        if new == old {
            return Ok(());
        }
        let count = |size: u64| size.div_ceil(seg) as u32;
        let (old_n, new_n) = (count(old), count(new));
        let len_in = |idx: u32, size: u64| (size - u64::from(idx) * seg).min(seg);
        if new > old {
            let grown = if old_n > 0 && !old.is_multiple_of(seg) {
                self.with_segment(ino, old_n - 1, st, |c| {
                    self.grow_cached(c, ino, old, new, version)
                })
                .await?
            } else {
                self.grow_cached(&mut self.cache(), ino, old, new, version)
            };
            if !grown {
                tracing::error!(ino, "the last segment to grow left the cache");
                return Err(libc::EIO);
            }
        } else {
            self.cache().drop_from(ino, new_n);
            if new_n > 0 && !new.is_multiple_of(seg) {
                let idx = new_n - 1;
                self.with_segment(ino, idx, st, |c| c.set_len((ino, idx), len_in(idx, new)))
                    .await?;
            }
        }
        st.size = new;
        st.wrote();
        st.mtime_ns = now_ns();
        Ok(())
    }

    /// Grows `ino` from `old` to `new` bytes in `cache`: its partial last segment made longer
    /// (false when it is not cached), new segments of zeros after it.
    fn grow_cached(
        &self,
        cache: &mut SegmentCache,
        ino: u64,
        old: u64,
        new: u64,
        version: u64,
    ) -> bool {
        let seg = self.seg;
        let count = |size: u64| size.div_ceil(seg) as u32;
        let len_in = |idx: u32, size: u64| (size - u64::from(idx) * seg).min(seg);
        let (old_n, new_n) = (count(old), count(new));
        if old_n > 0
            && !old.is_multiple_of(seg)
            && !cache.set_len((ino, old_n - 1), len_in(old_n - 1, new))
        {
            return false;
        }
        for idx in old_n..new_n {
            cache.insert_new((ino, idx), len_in(idx, new), version);
        }
        true
    }

    /// [`Self::resize_local`] that grows a file by at most half the cache at a time, flushing in
    /// between when the cache is full: a large hole (a truncate up, a write far past the end) is
    /// written as zeros without holding all of them in memory.
    async fn set_size(&self, ino: u64, st: &mut FileState, new: u64) -> Res<()> {
        if new
            > self
                .seg
                .saturating_mul(ecstack_client::MAX_SEGMENTS_PER_FILE)
        {
            return Err(libc::EFBIG);
        }
        let step = (self.cache().capacity() / 2).max(self.seg);
        loop {
            let cur = st.size;
            if new <= cur.saturating_add(step) {
                return self.resize_local(ino, st, new).await;
            }
            self.resize_local(ino, st, cur + step).await?;
            self.make_room(ino, st).await?;
        }
    }

    /// Writes `ino`'s dirty segments to the cluster and commits its size and times (one SetAttr):
    /// an unchanged-length segment as one update per written range, a new, grown or cut one
    /// whole. It first waits for the file's background segment writes ([`Self::start_behind`]);
    /// their errors stay in `st.error` for the caller to answer ([`reported`]), and a segment
    /// whose write failed is dirty again, so this flush places and writes it again.
    async fn flush_file(&self, ino: u64, st: &mut FileState) -> Res<()> {
        st.forget_ahead();
        self.drain(ino, st).await;
        self.rewrite_failed(ino, st).await?;
        // What to write, under one hold of the cache lock: the segments' bytes shared, not
        // copied (this file's lock keeps its dirty segments as they are until they are marked
        // clean below).
        let committed = st.segments.len() as u32;
        let mut resized = Vec::new();
        let mut whole = Vec::new();
        // Per segment, each segment's written ranges.
        let mut updates: Vec<Vec<_>> = Vec::new();
        let mut new = Vec::new();
        let dirty = {
            let cache = self.cache();
            let dirty = cache.dirty_of(ino);
            for &idx in &dirty {
                let s = cache.peek((ino, idx)).expect("dirty segments are cached");
                if idx >= committed {
                    new.push(s.bytes());
                    continue;
                }
                let layout = st.segments[idx as usize].clone();
                if s.needs_whole_write() {
                    resized.push((layout.segment_id, s.data.len() as u64));
                    whole.push((layout, s.bytes(), false));
                } else {
                    let bytes = s.bytes();
                    let runs = s.runs.iter().filter(|r| !r.is_empty()).map(|r| {
                        let data = bytes.slice(r.start as usize..r.end as usize);
                        (layout.clone(), r.start, data)
                    });
                    updates.push(runs.collect());
                }
            }
            dirty
        };
        if dirty.is_empty() && !st.changed {
            return Ok(());
        }
        let c = &self.client;
        let mut grown = Vec::new();
        if !new.is_empty() {
            let lengths: Vec<u64> = new.iter().map(|d| d.len() as u64).collect();
            grown = c.grow_file(ino, committed, &lengths).await.map_err(errno)?;
            whole.extend(grown.iter().cloned().zip(new).map(|(l, d)| (l, d, true)));
        }
        // Whole writes, `window` at a time, then the updates, UPDATES_IN_FLIGHT_MAX at a time
        // (all of different segments or disjoint ranges). Each segment's primary serializes its
        // own, so the updates go one segment after another in turn (random writes over a file
        // keep as many primaries busy as they can, not one).
        Self::in_parallel(
            self.window,
            whole.into_iter().map(|(layout, data, new)| {
                let c = c.clone();
                async move { c.write_segment(&layout, data, new).await }
            }),
        )
        .await?;
        Self::in_parallel(
            UPDATES_IN_FLIGHT_MAX,
            round_robin(updates).map(|(layout, offset, data)| {
                let c = c.clone();
                async move { c.update_segment(&layout, offset, data).await }
            }),
        )
        .await?;
        let relaid = !resized.is_empty();
        // The mtime this mount shows (its last write's, or one set since through a descriptor),
        // not the commit's; attribute changes kept for the commit go with it.
        let p = st.pending;
        let set = SetAttr {
            size: Some(st.size),
            resized,
            data_changed: true,
            mtime: Some(SetTime::Ns(st.mtime_ns)),
            mode: p.mode,
            uid: p.uid,
            gid: p.gid,
            atime: p.atime_ns.map(SetTime::Ns),
            ..SetAttr::default()
        };
        let attr = c.set_attr(ino, &set).await.map_err(errno)?;
        let segments = if relaid {
            // A segment rewritten whole has a new epoch at the MDS: its layouts, as they are now.
            c.open_file(ino).await.map_err(errno)?.1.segments
        } else {
            // The commit changed no layout but for dropping segments past the end: the ones
            // this mount had and the ones it just placed.
            let mut segments = std::mem::take(&mut st.segments);
            segments.extend(grown);
            segments.truncate(st.size.div_ceil(self.seg) as usize);
            segments
        };
        {
            let mut cache = self.cache();
            for idx in dirty {
                cache.mark_clean((ino, idx), attr.version);
            }
            cache.retag(ino, attr.version);
        }
        st.size = attr.size;
        st.mtime_ns = attr.mtime_ns;
        st.attr = attr;
        st.segments = segments;
        st.changed = false;
        st.pending = Pending::default();
        // Layouts past a truncation that dropped a failed segment before them: gone at the MDS.
        self.entry(ino)
            .placed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        st.behind_next = st.segments.len() as u32;
        Ok(())
    }

    /// The result of one write task of [`Self::flush_file`].
    fn joined(r: Option<Result<Result<(), ClientError>, tokio::task::JoinError>>) -> Res<()> {
        match r {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(errno(e)),
            Some(Err(e)) => {
                tracing::error!(error = %e, "a segment write task failed");
                Err(libc::EIO)
            }
        }
    }

    /// Runs `jobs`, at most `max` at a time; the first error (the rest are then cancelled).
    async fn in_parallel<F>(max: usize, jobs: impl IntoIterator<Item = F>) -> Res<()>
    where
        F: Future<Output = Result<(), ClientError>> + Send + 'static,
    {
        let mut flight = tokio::task::JoinSet::new();
        for job in jobs {
            if flight.len() >= max.max(1) {
                Self::joined(flight.join_next().await)?;
            }
            flight.spawn(job);
        }
        while let Some(r) = flight.join_next().await {
            Self::joined(Some(r))?;
        }
        Ok(())
    }

    /// Write-behind: starts background whole writes of `ino`'s full new segments, in order from
    /// `st.behind_next`, each as soon as its every byte is written (a file written sequentially
    /// fills one segment after another), while the mount's window has room: fewer than `window`
    /// segments' bytes on their way to the primaries and at most `window` + 1 segments in flight
    /// (`cluster put`'s window, `window.rs`). Each task places its segment (GrowFile), writes it
    /// and puts the layout in [`Entry::placed`]; the segment stays cached,
    /// held, until then. So by close or fsync only the last, partly written segment is left to
    /// write. No I/O here: true when a full segment is left waiting for a slot (the caller waits
    /// for one, [`Self::write_behind`]).
    fn start_behind(&self, ino: u64, st: &mut FileState) -> bool {
        loop {
            let idx = st.behind_next.max(st.segments.len() as u32);
            let full = self.cache().peek((ino, idx)).is_some_and(|s| {
                s.data.len() as u64 == self.seg
                    && s.stored_len == 0
                    && s.fully_dirty()
                    && !s.is_writing()
            });
            if !full {
                return false;
            }
            let slot = {
                let mut n = self
                    .behind_in_flight
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if !self.behind_window.has_room(*n) {
                    return true;
                }
                *n += 1;
                BehindSlot {
                    in_flight: self.behind_in_flight.clone(),
                    leg: self.behind_window.start(self.seg),
                }
            };
            let data = self
                .cache()
                .start_write((ino, idx))
                .expect("a full segment is cached and not being written");
            st.behind_next = idx + 1;
            let (c, cache, entry) = (self.client.clone(), self.cache.clone(), self.entry(ino));
            let seg = self.seg;
            let task = async move {
                let leg = slot.leg.clone();
                let r = place_and_write(&c, ino, idx, data, move |n| leg.moved(n)).await;
                debug_assert!(r.as_ref().map_or(true, |l| l.length == seg));
                let r = match r {
                    Ok(layout) => {
                        let mut placed = entry.placed.lock().unwrap_or_else(|p| p.into_inner());
                        placed.insert(idx, layout);
                        Ok(())
                    }
                    Err(e) => {
                        tracing::error!(ino, segment = idx, error = %e, "a background segment write failed (the file's next write, fsync or close answers EIO; its bytes stay dirty)");
                        Err(e)
                    }
                };
                lock_cache(&cache).end_write((ino, idx), r.is_ok());
                drop(slot);
                (idx, r)
            };
            let id = st.behind.spawn_on(task, &self.rt).id();
            st.behind_idx.insert(id, idx);
        }
    }

    /// [`Self::start_behind`], waiting for room in the window while a full segment needs it (a
    /// write waits so, as a put waits for room in its window).
    async fn write_behind(&self, ino: u64, st: &mut FileState) {
        while self.start_behind(ino, st) {
            self.behind_window.moved().await;
        }
    }

    /// One ended background write of `ino` ([`Self::start_behind`]): a failure (the task logged
    /// it, and left the segment dirty) puts it in `st.failed` and is kept in `st.error` as EIO;
    /// the layouts that can join `st.segments` do.
    fn behind_ended(
        &self,
        ino: u64,
        st: &mut FileState,
        r: Result<(tokio::task::Id, (u32, Result<(), ClientError>)), tokio::task::JoinError>,
    ) {
        let (id, ok) = match r {
            Ok((id, (_, r))) => (id, r.is_ok()),
            Err(e) => {
                tracing::error!(ino, error = %e, "a background segment write's task ended early (the file's next write, fsync or close answers EIO)");
                (e.id(), false)
            }
        };
        if let Some(idx) = st.behind_idx.remove(&id) {
            if !ok {
                // A task that ended early did not end its write in the cache: ended here.
                let mut cache = self.cache();
                if cache.peek((ino, idx)).is_some_and(|s| s.is_writing()) {
                    cache.end_write((ino, idx), false);
                }
                st.failed.insert(idx);
                st.error.get_or_insert(libc::EIO);
            }
        }
        self.join_placed(ino, st);
    }

    /// Moves the layouts write-behind placed that follow `st.segments` into it, in order.
    fn join_placed(&self, ino: u64, st: &mut FileState) {
        let entry = self.entry(ino);
        let mut placed = entry.placed.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(l) = placed.remove(&(st.segments.len() as u32)) {
            st.segments.push(l);
        }
    }

    /// Collects `ino`'s background writes that have ended, without waiting.
    fn reap(&self, ino: u64, st: &mut FileState) {
        while let Some(r) = st.behind.try_join_next_with_id() {
            self.behind_ended(ino, st, r);
        }
    }

    /// Waits for all of `ino`'s background writes.
    async fn drain(&self, ino: u64, st: &mut FileState) {
        while let Some(r) = st.behind.join_next_with_id().await {
            self.behind_ended(ino, st, r);
        }
    }

    /// Places and writes anew each segment whose background write failed (it is dirty, so
    /// cached; past a truncation, gone and skipped), after which every layout write-behind
    /// placed is in `st.segments`.
    async fn rewrite_failed(&self, ino: u64, st: &mut FileState) -> Res<()> {
        while let Some(&idx) = st.failed.first() {
            let data = self
                .cache()
                .peek((ino, idx))
                .filter(|s| s.dirty.is_some())
                .map(|s| s.bytes());
            if let Some(data) = data {
                let layout = place_and_write(&self.client, ino, idx, data, |_| {})
                    .await
                    .map_err(errno)?;
                self.cache().mark_clean((ino, idx), st.attr.version);
                let entry = self.entry(ino);
                let mut placed = entry.placed.lock().unwrap_or_else(|p| p.into_inner());
                placed.insert(idx, layout);
            }
            st.failed.remove(&idx);
            self.join_placed(ino, st);
        }
        Ok(())
    }

    /// Keeps the cache within its size: clean segments are dropped; files whose dirty segments
    /// still hold it over are flushed (`ino`, whose lock the caller holds, and any other whose
    /// lock is free: a busy one is flushed by its own request's end).
    async fn make_room(&self, ino: u64, st: &mut FileState) -> Res<()> {
        let over = self.cache().evict();
        if over.is_empty() {
            return Ok(());
        }
        for other in over {
            if other == ino {
                self.flush_file(ino, st).await?;
                continue;
            }
            let entry = self
                .files
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&other)
                .cloned();
            let Some(entry) = entry else { continue };
            let Ok(mut guard) = entry.state.try_lock() else {
                continue;
            };
            if let Some(o) = guard.as_mut() {
                match self.flush_file(other, o).await {
                    Ok(()) => Self::publish(&entry, o),
                    Err(e) => {
                        tracing::error!(ino = other, errno = e, "could not flush to make room");
                        o.error.get_or_insert(e);
                    }
                }
            }
        }
        self.cache().evict();
        Ok(())
    }

    async fn read_bytes(&self, ino: u64, st: &mut FileState, offset: u64, size: u64) -> Res<Bytes> {
        let end = offset.saturating_add(size).min(st.size);
        // The pieces, each shared with its cached segment (no copy), joined only when several.
        let mut out: Vec<Bytes> = Vec::new();
        let mut at = offset;
        while at < end {
            let idx = (at / self.seg) as u32;
            let within = at % self.seg;
            let n = (self.seg - within).min(end - at);
            let whole = |c: &mut SegmentCache| c.get((ino, idx)).is_some_and(|s| !s.is_partial());
            if self.cache_off && !whole(&mut self.cache()) {
                let data = self.read_range(ino, idx, st, within, n).await?;
                out.push(Bytes::from(data));
            } else {
                self.take_ahead(ino, idx, st).await;
                self.with_segment(ino, idx, st, |c| {
                    let s = c.peek((ino, idx)).expect("with_segment holds it");
                    let stop = ((within + n) as usize).min(s.data.len());
                    out.push(s.bytes().slice(within as usize..stop));
                })
                .await?;
            }
            at += n;
        }
        if offset == st.read_end && end > offset {
            self.read_ahead(ino, ((end - 1) / self.seg) as u32 + 1, st);
        }
        st.read_end = end;
        self.make_room(ino, st).await?;
        Ok(match out.len() {
            0 => Bytes::new(),
            1 => out.pop().expect("one"),
            _ => Bytes::from(out.concat()),
        })
    }

    /// Read-ahead: a read that follows the one before (a sequential reader) starts reading the
    /// [`Shared::ahead_segments`] segments from `from` whole in the background (as a get keeps a
    /// window of segments coming), each unless the file has no such segment, it is cached, or is
    /// being read ahead already; [`Self::take_ahead`] caches one when a read reaches it. So a file
    /// read in order has its next segments on the way while the current one is served from the
    /// cache (one segment ahead left the links and disks idle half the time: reads wait on the
    /// OSDs' disks, and a degraded segment's whole gather and decode at its primary). The mount
    /// holds at most `ahead_held_max` segments read ahead, all files. Nothing with the cache off.
    fn read_ahead(&self, ino: u64, from: u32, st: &mut FileState) {
        if self.cache_off {
            return;
        }
        let upto = from.saturating_add(self.ahead_segments as u32);
        for idx in from..upto {
            let start = u64::from(idx).saturating_mul(self.seg);
            if start >= st.size {
                break;
            }
            if st.ahead.iter().any(|a| a.idx == idx) || self.cache().peek((ino, idx)).is_some() {
                continue;
            }
            let Some(layout) = st.segments.get(idx as usize).filter(|l| l.index == idx) else {
                break;
            };
            if self.ahead_held.fetch_add(1, Ordering::AcqRel) >= self.ahead_held_max {
                self.ahead_held.fetch_sub(1, Ordering::AcqRel);
                break;
            }
            let counted = AheadCount(self.ahead_held.clone());
            let (tx, rx) = tokio::sync::oneshot::channel();
            let (client, layout) = (self.client.clone(), layout.clone());
            self.rt.spawn(async move {
                let _ = tx.send(fetch(&client, &layout, 0, layout.length).await);
            });
            let at = st.ahead.partition_point(|a| a.idx < idx);
            st.ahead.insert(
                at,
                Ahead {
                    idx,
                    gen: st.gen,
                    rx,
                    _counted: counted,
                },
            );
        }
    }

    /// Caches segment `idx` of `ino` from its read ahead, if one was started since the file last
    /// changed and it succeeded (otherwise the caller reads it as usual). Reads ahead of segments
    /// before `idx` (the reader went past them) are dropped.
    async fn take_ahead(&self, ino: u64, idx: u32, st: &mut FileState) {
        while st.ahead.front().is_some_and(|a| a.idx < idx) {
            st.ahead.pop_front();
        }
        if !st.ahead.front().is_some_and(|a| a.idx == idx) {
            return;
        }
        let a = st.ahead.pop_front().expect("checked");
        if a.gen != st.gen {
            return;
        }
        if let Ok(Ok(data)) = a.rx.await {
            self.cache()
                .insert_read_ahead((ino, idx), data, st.attr.version);
        }
    }

    async fn write_bytes(&self, ino: u64, st: &mut FileState, offset: u64, data: &[u8]) -> Res<()> {
        self.reap(ino, st);
        reported(st)?;
        let end = offset + data.len() as u64;
        if end > st.size {
            self.set_size(ino, st, end).await?;
        }
        for (idx, within, part) in pieces(self.seg, offset, data.len()) {
            let patched = !self.cache_off
                && self.patch_len(idx, st).is_some_and(|len| {
                    self.cache().patch(
                        (ino, idx),
                        within,
                        &data[part.clone()],
                        len,
                        st.attr.version,
                    )
                });
            if !patched {
                self.with_segment(ino, idx, st, |c| c.write((ino, idx), within, &data[part]))
                    .await?;
            }
        }
        st.wrote();
        st.mtime_ns = now_ns();
        self.write_behind(ino, st).await;
        self.make_room(ino, st).await
    }

    /// A write done at once on the calling thread (the session's), when it needs no I/O: `ino`'s
    /// state is loaded and its lock free, no error waits to be answered, the write starts inside
    /// the file or at its end and ends at most a segment past it, and every segment it touches
    /// that the file has is cached (so a file written sequentially is written here, full segments
    /// started in the background too). None: not done (the caller takes [`Self::write_bytes`]'s
    /// way). Some(tail): done; `tail` holds the file's lock when a full segment waits for a slot
    /// or dirty segments hold the cache over its size ([`Self::write_tail`]).
    fn write_cached(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
    ) -> Option<Option<(Arc<Entry>, FileGuard)>> {
        let entry = self
            .files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&ino)
            .cloned()?;
        let mut guard = entry.state.clone().try_lock_owned().ok()?;
        let st = guard.as_mut()?;
        self.reap(ino, st);
        let end = offset + data.len() as u64;
        let most = self
            .seg
            .saturating_mul(ecstack_client::MAX_SEGMENTS_PER_FILE);
        if st.error.is_some()
            || offset > st.size
            || end > st.size.saturating_add(self.seg)
            || end > most
        {
            return None;
        }
        {
            let mut cache = self.cache();
            // At the end of the file (a file written in order): appended, no zeros written
            // first; a segment after the first gets its whole length's buffer at once (kept
            // until its flush: SegmentCache::mark_clean gives back what it does not use).
            let room = |idx: u32| if idx > 0 { self.seg } else { 0 };
            let appends = offset == st.size
                && pieces(self.seg, offset, data.len()).all(|(idx, within, _)| {
                    cache
                        .peek((ino, idx))
                        .map_or(within == 0, |s| s.data.len() as u64 == within)
                });
            if appends {
                for (idx, within, part) in pieces(self.seg, offset, data.len()) {
                    let done =
                        cache.append((ino, idx), within, &data[part], room(idx), st.attr.version);
                    debug_assert!(done, "checked above");
                }
            } else {
                // Each piece into a segment cached whole, new (past the old end) or one a patch
                // may take without its other bytes (not with the cache off).
                let had = st.size.div_ceil(self.seg);
                let mut lens = Vec::new();
                for (idx, within, part) in pieces(self.seg, offset, data.len()) {
                    let n = part.len() as u64;
                    let len = if u64::from(idx) >= had
                        || cache.get((ino, idx)).is_some_and(|s| !s.is_partial())
                    {
                        0
                    } else if self.cache_off {
                        return None;
                    } else {
                        let len = self.patch_len(idx, st)?;
                        if within + n > len || !cache.can_patch((ino, idx), within, n) {
                            return None;
                        }
                        len
                    };
                    lens.push(len);
                }
                if end > st.size
                    && !self.grow_cached(&mut cache, ino, st.size, end, st.attr.version)
                {
                    return None;
                }
                for ((idx, within, part), len) in pieces(self.seg, offset, data.len()).zip(lens) {
                    let done = cache.patch((ino, idx), within, &data[part], len, st.attr.version);
                    debug_assert!(done, "checked above");
                }
            }
            st.size = st.size.max(end);
        }
        st.wrote();
        st.mtime_ns = now_ns();
        let waiting = self.start_behind(ino, st);
        let over = {
            let mut cache = self.cache();
            cache.bytes() > cache.capacity() && !cache.evict().is_empty()
        };
        Self::publish(&entry, st);
        Some((waiting || over).then_some((entry, guard)))
    }

    /// A write with the cache off ([`Shared::cache_off`]): each piece inside a segment the cluster
    /// has at this length, and not cached, is an update at its primary, all of them in parallel
    /// and after the file's lock is let go (so writes of one file overlap, as the application
    /// sent them); any other write (past the end, into a new or cached segment) is done as with
    /// the cache on.
    async fn write_through(&self, ino: u64, offset: u64, data: Bytes) -> Res<()> {
        let updates = self
            .with_file(ino, move |s: &Shared, st: &mut FileState| {
                Box::pin(async move {
                    s.reap(ino, st);
                    reported(st)?;
                    let end = offset + data.len() as u64;
                    let plan: Option<Vec<_>> = (end <= st.size)
                        .then(|| {
                            let cache = s.cache();
                            pieces(s.seg, offset, data.len())
                                .map(|(idx, within, part)| {
                                    let len = s.patch_len(idx, st)?;
                                    let fits = within + part.len() as u64 <= len
                                        && cache.peek((ino, idx)).is_none();
                                    let layout = st.segments[idx as usize].clone();
                                    fits.then(|| (layout, within, data.slice(part)))
                                })
                                .collect()
                        })
                        .flatten();
                    match plan {
                        Some(plan) => {
                            st.wrote();
                            st.mtime_ns = now_ns();
                            Ok(plan)
                        }
                        None => {
                            s.write_bytes(ino, st, offset, &data).await?;
                            Ok(Vec::new())
                        }
                    }
                })
            })
            .await?;
        let c = &self.client;
        Self::in_parallel(
            UPDATES_IN_FLIGHT_MAX,
            updates.into_iter().map(|(layout, offset, data)| {
                let c = c.clone();
                async move { c.update_segment(&layout, offset, data).await }
            }),
        )
        .await
    }

    /// A change of mode, owner or times made through a descriptor of `ino` while it has writes
    /// not committed: kept with them for the close's or fsync's SetAttr (one MDS transaction
    /// instead of one more per change), and the attributes as they now are. None when the file
    /// has nothing uncommitted (the change goes to the MDS at once). Permissions were checked by
    /// the kernel (`default_permissions`).
    async fn setattr_pending(&self, ino: u64, set: SetAttr) -> Res<Option<Attr>> {
        self.with_file(ino, move |_s: &Shared, st: &mut FileState| {
            Box::pin(async move {
                if !st.changed {
                    return Ok(None);
                }
                let now = now_ns();
                let at = |t: SetTime| match t {
                    SetTime::Now => now,
                    SetTime::Ns(ns) => ns,
                };
                let p = &mut st.pending;
                p.mode = set.mode.or(p.mode);
                p.uid = set.uid.or(p.uid);
                p.gid = set.gid.or(p.gid);
                p.atime_ns = set.atime.map(at).or(p.atime_ns);
                p.ctime_ns = Some(now);
                if let Some(t) = set.mtime {
                    st.mtime_ns = at(t);
                }
                let p = st.pending;
                Ok(Some(Attr {
                    mode: p.mode.unwrap_or(st.attr.mode),
                    uid: p.uid.unwrap_or(st.attr.uid),
                    gid: p.gid.unwrap_or(st.attr.gid),
                    atime_ns: p.atime_ns.unwrap_or(st.attr.atime_ns),
                    ctime_ns: now,
                    mtime_ns: st.mtime_ns,
                    size: st.size,
                    ..st.attr.clone()
                }))
            })
        })
        .await
    }

    /// What is left of a write [`Self::write_cached`] did: write-behind and making room, under the
    /// file's lock it still holds. An error is kept for the file's next write, fsync or close.
    async fn write_tail(&self, ino: u64, entry: &Entry, guard: &mut FileGuard) {
        let Some(st) = guard.as_mut() else { return };
        self.write_behind(ino, st).await;
        if let Err(e) = self.make_room(ino, st).await {
            st.error.get_or_insert(e);
        }
        Self::publish(entry, st);
    }

    /// Runs `work` on `ino`'s state under its lock (loading it at the MDS first unless `open`
    /// already did), then shows its unflushed size and mtime to `stat`.
    async fn with_file<T>(
        &self,
        ino: u64,
        work: impl for<'a> FnOnce(&'a Shared, &'a mut FileState) -> BoxFut<'a, T>,
    ) -> Res<T> {
        let entry = self.entry(ino);
        let mut guard = entry.state.lock().await;
        if guard.is_none() {
            self.open_state(ino, &mut guard).await?;
        }
        let st = guard.as_mut().expect("loaded");
        let r = work(self, st).await;
        Self::publish(&entry, st);
        r
    }

    /// Flushes every file with unflushed writes (unmount).
    async fn flush_all(&self) {
        let entries: Vec<(u64, Arc<Entry>)> = self
            .files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        for (ino, entry) in entries {
            let mut guard = entry.state.lock().await;
            if let Some(st) = guard.as_mut() {
                let r = self.flush_file(ino, st).await;
                if let Err(e) = r.and(reported(st)) {
                    tracing::error!(ino, errno = e, "could not flush a file at unmount");
                }
            }
        }
    }
}

impl CodfsFs {
    /// `attr_ttl`: how long the kernel keeps attributes and directory entries (docs/mount.md).
    pub fn new(
        client: Client,
        rt: Handle,
        cache_bytes: u64,
        segment_bytes: u64,
        attr_ttl: Duration,
    ) -> CodfsFs {
        let seg = segment_bytes.max(1);
        let put_window = client.options().window_segments_max.max(1);
        // Cache off (0): only new bytes past a file's stored end are held, gathering into whole
        // segments: put's window of them (and one more) being written and the one being filled.
        let cache_off = cache_bytes == 0;
        let cache_bytes = if cache_off {
            seg.saturating_mul(put_window as u64 + 2)
        } else {
            cache_bytes
        };
        // Background segment writes: put's window, but no more than the cache holds beside the
        // segment being filled (the segments being written stay cached; one more than the window
        // may be in flight).
        let window = (cache_bytes / seg)
            .saturating_sub(2)
            .min(put_window as u64)
            .max(1) as usize;
        CodfsFs {
            shared: Arc::new(Shared {
                client,
                cache: Arc::new(Mutex::new(SegmentCache::new(cache_bytes))),
                rt: rt.clone(),
                behind_window: Transit::new(window, seg),
                ahead_segments: (cache_bytes / seg / 2).min(put_window as u64).max(1) as usize,
                ahead_held: Arc::default(),
                ahead_held_max: (cache_bytes / seg / 2).max(1) as usize,
                behind_in_flight: Arc::default(),
                window,
                cache_off,
                files: Mutex::default(),
                dirs: Mutex::default(),
                next_fh: AtomicU64::new(1),
                seg,
                ttl: attr_ttl,
                xattrs: Mutex::new(XattrCache::new(attr_ttl)),
                notifier: OnceLock::new(),
            }),
            rt,
        }
    }

    /// A handle on the state the mount's tasks share (for metrics and the session's notifier).
    pub fn handle(&self) -> FsHandle {
        FsHandle(self.shared.clone())
    }

    /// Runs `work` on the runtime and answers `reply` with `done`'s reply or the errno: the one
    /// shape of every handler.
    fn spawn<R, T, F>(&self, reply: R, work: F, done: impl FnOnce(&Shared, R, T) + Send + 'static)
    where
        R: Fail + Send + 'static,
        T: Send + 'static,
        F: Future<Output = Res<T>> + Send + 'static,
    {
        let shared = self.shared.clone();
        self.rt.spawn(async move {
            match work.await {
                Ok(v) => done(&shared, reply, v),
                Err(e) => reply.fail(e),
            }
        });
    }

    /// [`Self::spawn`] of a call answered with an entry (lookup, mknod, mkdir, symlink, link).
    fn spawn_entry<F>(&self, reply: ReplyEntry, work: impl FnOnce(Arc<Shared>) -> F)
    where
        F: Future<Output = Res<Attr>> + Send + 'static,
    {
        let w = work(self.shared.clone());
        self.spawn(reply, w, |s, reply, a| {
            reply.entry(&s.ttl, &s.file_attr(&a), 0)
        })
    }

    /// [`Self::spawn`] of a call answered with nothing.
    fn spawn_empty<F>(&self, reply: ReplyEmpty, work: impl FnOnce(Arc<Shared>) -> F)
    where
        F: Future<Output = Res<()>> + Send + 'static,
    {
        let w = work(self.shared.clone());
        self.spawn(reply, w, |_, reply, ()| reply.ok())
    }

    /// [`Self::spawn`] of work on one file's bytes under its lock.
    fn spawn_file<R, T>(
        &self,
        reply: R,
        ino: u64,
        work: impl for<'a> FnOnce(&'a Shared, &'a mut FileState) -> BoxFut<'a, T> + Send + 'static,
        done: impl FnOnce(&Shared, R, T) + Send + 'static,
    ) where
        R: Fail + Send + 'static,
        T: Send + 'static,
    {
        let s = self.shared.clone();
        self.spawn(reply, async move { s.with_file(ino, work).await }, done)
    }

    /// Flushes and commits a file (close's flush, fsync), and answers an earlier write's error
    /// not answered yet.
    fn spawn_flush(&self, reply: ReplyEmpty, ino: u64) {
        self.spawn_file(
            reply,
            ino,
            move |s: &Shared, st: &mut FileState| {
                Box::pin(async move {
                    let r = s.flush_file(ino, st).await;
                    r.and(reported(st))
                })
            },
            |_, reply, ()| reply.ok(),
        )
    }
}

/// The mount's shared state, for what runs beside the session: the cache's counters for the
/// metrics endpoint, and the session's notifier.
#[derive(Clone)]
pub struct FsHandle(Arc<Shared>);

impl FsHandle {
    /// The cache's counters (hits, misses, evictions, invalidations, bytes, dirty bytes).
    pub fn cache_stats(&self) -> ecstack_client::CacheStats {
        self.0.cache().stats()
    }

    /// Lets open invalidate the kernel's cached attributes of the file it opens.
    pub fn set_notifier(&self, n: fuser::Notifier) {
        let _ = self.0.notifier.set(n);
    }
}

impl Filesystem for CodfsFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        let _ = config.set_max_background(KERNEL_BACKGROUND_MAX);
        let _ = config.set_max_write(KERNEL_WRITE_BYTES_MAX);
        // Direct I/O (O_DIRECT) requests of one file sent without waiting for each other (as
        // an application's asynchronous I/O asks): the file's lock orders what must be ordered.
        let _ = config.add_capabilities(fuser::consts::FUSE_ASYNC_DIO);
        Ok(())
    }

    fn destroy(&mut self) {
        let s = self.shared.clone();
        self.rt.block_on(async move { s.flush_all().await });
        let s = self.shared.cache().stats();
        tracing::info!(
            hits = s.hits,
            misses = s.misses,
            evictions = s.evictions,
            invalidations = s.invalidations,
            "segment cache at unmount"
        );
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let name = name_ok(name);
        self.spawn_entry(reply, |s| async move {
            s.client.lookup(parent, &name?).await.map_err(errno)
        })
    }

    fn forget(&mut self, _req: &Request<'_>, ino: u64, _nlookup: u64) {
        self.shared.xattrs().forget(ino);
        let mut files = self.shared.files.lock().unwrap_or_else(|p| p.into_inner());
        // The kernel forgets an inode it holds no reference to: no request of it is in flight.
        let idle = files.get(&ino).is_some_and(|e| {
            e.state
                .try_lock()
                .is_ok_and(|st| st.as_ref().is_none_or(|st| st.opens == 0 && !st.changed))
        });
        if idle && !self.shared.cache().is_dirty(ino) {
            files.remove(&ino);
            self.shared.cache().drop_file(ino);
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        let s = self.shared.clone();
        self.spawn(
            reply,
            async move { s.client.get_attr(ino).await.map_err(errno) },
            |s, reply, a| reply.attr(&s.ttl, &s.file_attr(&a)),
        )
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
        fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        if mode.is_some() || uid.is_some() || gid.is_some() {
            // A change of owner or mode may remove `security.capability` (the kernel's killpriv).
            self.shared.xattrs().forget(ino);
        }
        let set = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
            ..SetAttr::default()
        };
        let s = self.shared.clone();
        let work = async move {
            if let Some(size) = size {
                s.with_file(ino, move |s: &Shared, st: &mut FileState| {
                    Box::pin(async move {
                        s.set_size(ino, st, size).await?;
                        s.flush_file(ino, st).await
                    })
                })
                .await?;
            }
            if set == SetAttr::default() {
                return s.client.get_attr(ino).await.map_err(errno);
            }
            if fh.is_some() {
                if let Some(a) = s.setattr_pending(ino, set.clone()).await? {
                    return Ok(a);
                }
            }
            let a = s.client.set_attr(ino, &set).await.map_err(errno)?;
            if mtime.is_some() {
                let entry = s.entry(ino);
                let mut guard = entry.state.lock().await;
                if let Some(st) = guard.as_mut() {
                    st.mtime_ns = a.mtime_ns;
                    Shared::publish(&entry, st);
                }
            }
            Ok(a)
        };
        self.spawn(reply, work, |s, reply, a| {
            reply.attr(&s.ttl, &s.file_attr(&a))
        })
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        let s = self.shared.clone();
        self.spawn(
            reply,
            async move { s.client.read_link(ino).await.map_err(errno) },
            |_, reply, t| reply.data(&t),
        )
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
        let (uid, gid, name) = (req.uid(), req.gid(), name_ok(name));
        self.spawn_entry(reply, |s| async move {
            s.client
                .mknod(parent, &name?, kind, mode & 0o7777, uid, gid, rdev, true)
                .await
                .map_err(errno)
        })
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
        let (uid, gid, name) = (req.uid(), req.gid(), name_ok(name));
        self.spawn_entry(reply, |s| async move {
            s.client
                .mkdir(parent, &name?, mode & 0o7777, uid, gid)
                .await
                .map_err(errno)
        })
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name_ok(name);
        self.spawn_empty(reply, |s| async move {
            s.client.unlink(parent, &name?).await.map_err(errno)
        })
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name_ok(name);
        self.spawn_empty(reply, |s| async move {
            s.client.rmdir(parent, &name?).await.map_err(errno)
        })
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (uid, gid, name) = (req.uid(), req.gid(), name_ok(link_name));
        let target = target.as_os_str().as_bytes().to_vec();
        self.spawn_entry(reply, |s| async move {
            s.client
                .symlink(parent, &name?, &target, uid, gid)
                .await
                .map_err(errno)
        })
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
        let (a, b) = (name_ok(name), name_ok(newname));
        self.spawn_empty(reply, |s| async move {
            s.client
                .rename(parent, &a?, newparent, &b?, flags)
                .await
                .map_err(errno)
        })
    }

    fn link(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let name = name_ok(newname);
        self.spawn_entry(reply, |s| async move {
            s.client.link(ino, newparent, &name?).await.map_err(errno)
        })
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        // Close-to-open for extended attributes too: asked of the MDS again after an open.
        self.shared.xattrs().forget(ino);
        let entry = self.shared.entry(ino);
        let s = self.shared.clone();
        let work = async move {
            let mut guard = entry.state.lock().await;
            s.open_state(ino, &mut guard).await?;
            let st = guard.as_mut().expect("opened");
            st.opens += 1;
            Shared::publish(&entry, st);
            Ok(s.new_fh())
        };
        // No FOPEN_KEEP_CACHE: the kernel drops its page cache of the file at each open.
        self.spawn(reply, work, |_, reply, fh| reply.opened(fh, 0))
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
        let offset = offset.max(0) as u64;
        self.spawn_file(
            reply,
            ino,
            move |s: &Shared, st: &mut FileState| {
                Box::pin(async move { s.read_bytes(ino, st, offset, u64::from(size)).await })
            },
            |_, reply, d| reply.data(&d),
        )
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
        let offset = offset.max(0) as u64;
        let n = data.len() as u32;
        // Written here, without a copy of the request or a hop to the runtime, when it needs no
        // I/O (most writes of a file written sequentially); what is left runs on the runtime.
        if let Some(tail) = self.shared.write_cached(ino, offset, data) {
            reply.written(n);
            if let Some((entry, mut guard)) = tail {
                let s = self.shared.clone();
                self.rt
                    .spawn(async move { s.write_tail(ino, &entry, &mut guard).await });
            }
            return;
        }
        if self.shared.cache_off {
            let s = self.shared.clone();
            let data = Bytes::copy_from_slice(data);
            return self.spawn(
                reply,
                async move { s.write_through(ino, offset, data).await },
                move |_, reply, ()| reply.written(n),
            );
        }
        let data = data.to_vec();
        self.spawn_file(
            reply,
            ino,
            move |s: &Shared, st: &mut FileState| {
                Box::pin(async move { s.write_bytes(ino, st, offset, &data).await })
            },
            move |_, reply, ()| reply.written(n),
        )
    }

    fn flush(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _lock: u64, reply: ReplyEmpty) {
        self.spawn_flush(reply, ino)
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn_file(
            reply,
            ino,
            move |s: &Shared, st: &mut FileState| {
                Box::pin(async move {
                    let r = s.flush_file(ino, st).await;
                    st.opens = st.opens.saturating_sub(1);
                    r.and(reported(st))
                })
            },
            |_, reply, ()| reply.ok(),
        )
    }

    fn fsync(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn_flush(reply, ino)
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let s = self.shared.clone();
        let work = async move {
            let entries = s.client.read_dir_all(ino).await.map_err(errno)?;
            let mut list = vec![
                (ino, FileType::Directory, b".".to_vec()),
                (ino, FileType::Directory, b"..".to_vec()),
            ];
            list.extend(
                entries
                    .into_iter()
                    .map(|e| (e.attr.ino, kind_of(e.attr.kind), e.name)),
            );
            let fh = s.new_fh();
            s.dirs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(fh, Arc::new(list));
            Ok(fh)
        };
        self.spawn(reply, work, |_, reply, fh| reply.opened(fh, 0))
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        // From memory: answered here, on the session thread.
        let list = self
            .shared
            .dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh)
            .cloned();
        let Some(list) = list else {
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
        self.shared
            .dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh);
        reply.ok()
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let s = self.shared.clone();
        self.spawn(
            reply,
            async move { s.client.stat_fs().await.map_err(errno) },
            |_, reply, s| {
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
            },
        )
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
        self.shared.xattrs().forget(ino);
        self.spawn_empty(reply, |s| async move {
            let r = s
                .client
                .set_xattr(ino, &name, &value, create, replace)
                .await
                .map_err(errno);
            s.xattrs().forget(ino);
            r
        })
    }

    fn getxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        // Answered here when the answer is kept: the kernel asks for `security.capability`
        // before every write (`xattrs.rs`).
        let now = Instant::now();
        let kept = self.shared.xattrs().get(ino, name.as_bytes(), now).cloned();
        match kept {
            Some(Some(v)) => return xattr_reply(reply, size, &v),
            Some(None) => return reply.error(libc::ENODATA),
            None => {}
        }
        let name = name.as_bytes().to_vec();
        let generation = self.shared.xattrs().generation();
        let s = self.shared.clone();
        self.spawn(
            reply,
            async move {
                let r = s.client.get_xattr(ino, &name).await.map_err(errno);
                let answer = match &r {
                    Ok(v) => Some(Some(v.clone())),
                    Err(e) if *e == libc::ENODATA => Some(None),
                    Err(_) => None,
                };
                if let Some(answer) = answer {
                    s.xattrs().put(ino, &name, answer, generation, now);
                }
                r
            },
            move |_, reply, v| xattr_reply(reply, size, &v),
        )
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        let s = self.shared.clone();
        self.spawn(
            reply,
            async move { s.client.list_xattr(ino).await.map_err(errno) },
            move |_, reply, names| {
                let mut v = Vec::new();
                for n in names {
                    v.extend_from_slice(&n);
                    v.push(0);
                }
                xattr_reply(reply, size, &v)
            },
        )
    }

    fn removexattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        let name = name.as_bytes().to_vec();
        self.shared.xattrs().forget(ino);
        self.spawn_empty(reply, |s| async move {
            let r = s.client.remove_xattr(ino, &name).await.map_err(errno);
            s.xattrs().forget(ino);
            r
        })
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
        let (uid, gid, name) = (req.uid(), req.gid(), name_ok(name));
        let exclusive = flags & libc::O_EXCL != 0;
        let s = self.shared.clone();
        let work = async move {
            let a = s
                .client
                .mknod(
                    parent,
                    &name?,
                    FileKind::File,
                    mode & 0o7777,
                    uid,
                    gid,
                    0,
                    exclusive,
                )
                .await
                .map_err(errno)?;
            let entry = s.entry(a.ino);
            let mut guard = entry.state.lock().await;
            if a.size == 0 && guard.is_none() {
                // A new (or empty) file has no segments: Mknod's reply is all an open would
                // learn, so no OpenFile.
                *guard = Some(FileState::new(a.clone(), Vec::new()));
            } else {
                s.open_state(a.ino, &mut guard).await?;
            }
            let st = guard.as_mut().expect("opened");
            st.opens += 1;
            Shared::publish(&entry, st);
            Ok((a, s.new_fh()))
        };
        self.spawn(reply, work, |s, reply, (a, fh)| {
            reply.created(&s.ttl, &s.file_attr(&a), 0, fh, 0)
        })
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
        self.spawn_file(
            reply,
            ino,
            move |s: &Shared, st: &mut FileState| {
                Box::pin(async move {
                    if end > st.size {
                        s.set_size(ino, st, end).await?;
                    }
                    Ok(())
                })
            },
            |_, reply, ()| reply.ok(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_takes_one_from_each_list_in_turn() {
        let got: Vec<u32> = round_robin(vec![vec![1, 4, 6], vec![], vec![2], vec![3, 5]]).collect();
        assert_eq!(got, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(round_robin(Vec::<Vec<u8>>::new()).count(), 0);
    }
}
