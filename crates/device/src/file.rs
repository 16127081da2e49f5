//! `FileDevice`: a regular file or a raw block device, accessed with `pread`/`pwrite`.
//!
//! * `direct`: opens with `O_DIRECT`; requests that are not aligned to [`DIRECT_ALIGN`] (offset, length
//!   or buffer address) go through an aligned bounce buffer, with read-modify-write for partial sectors;
//! * `preallocate`: `fallocate(2)` the whole capacity up front (CodFS §4.5 reserves space this way);
//! * `discard`: `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)` releases the range (a block
//!   device turns it into a discard); where the file system does not support it the call is a no-op,
//!   which the trait allows ("reads of it *may* return zeros");
//! * `flush`: `fdatasync(2)`.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::{
    check_range, BasicCounters, Batch, BlockDevice, DeviceError, DeviceStats, IoRequest, Result,
};

/// Alignment used for `O_DIRECT` I/O (a multiple of every logical sector size in use: 512 and 4096).
pub const DIRECT_ALIGN: usize = 4096;

/// How to open a [`FileDevice`].
#[derive(Debug, Clone)]
pub struct FileOptions {
    /// Create the file if it is missing (regular files only).
    pub create: bool,
    /// Capacity in bytes. A regular file shorter than this is extended (sparse). Default: the file's
    /// current length (or the block device's size).
    pub size: Option<u64>,
    /// Open with `O_DIRECT` (bypass the page cache).
    pub direct: bool,
    /// `fallocate` the whole capacity when opening (regular files).
    pub preallocate: bool,
    /// Open read-only; writes, discards and preallocation fail.
    pub read_only: bool,
    /// Submit batches through io_uring where this thread has a ring (on by default). Off: batched
    /// requests run through `pread`/`pwrite` on per-device threads (spec key `uring=0`; every
    /// device of a process: [`crate::set_uring_enabled`], `ecstack --no-uring`).
    pub uring: bool,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            create: false,
            size: None,
            direct: false,
            preallocate: false,
            read_only: false,
            uring: true,
        }
    }
}

/// A buffer whose usable part starts at a `DIRECT_ALIGN`-aligned address (no unsafe needed: we
/// over-allocate and start at the first aligned byte). Use it for buffers handed to `O_DIRECT`
/// devices to spare them the bounce copy.
pub struct AlignedBuf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize) -> Self {
        let v = vec![0u8; len + DIRECT_ALIGN];
        let off = v.as_ptr().align_offset(DIRECT_ALIGN);
        AlignedBuf { v, off, len }
    }
    /// An aligned buffer holding `pieces` one after another, written once: unlike [`new`]
    /// followed by copies, the buffer is not zeroed first (only the bytes before the aligned
    /// start are).
    ///
    /// [`new`]: AlignedBuf::new
    pub fn concat(pieces: &[&[u8]]) -> Self {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        // Room for the data after any aligned start: pushing within the capacity never moves the
        // allocation, so the start found here stays aligned.
        let mut v: Vec<u8> = Vec::with_capacity(len + DIRECT_ALIGN);
        let off = v.as_ptr().align_offset(DIRECT_ALIGN);
        v.resize(off, 0);
        for p in pieces {
            v.extend_from_slice(p);
        }
        debug_assert_eq!(
            v[off..].as_ptr().align_offset(DIRECT_ALIGN),
            0,
            "aligned start"
        );
        AlignedBuf { v, off, len }
    }
    /// An empty aligned buffer with room for `capacity` bytes, filled by [`push`] without a
    /// zero fill first (for data gathered in pieces).
    ///
    /// [`push`]: AlignedBuf::push
    pub fn with_capacity(capacity: usize) -> Self {
        let mut v: Vec<u8> = Vec::with_capacity(capacity + DIRECT_ALIGN);
        let off = v.as_ptr().align_offset(DIRECT_ALIGN);
        v.resize(off, 0);
        AlignedBuf { v, off, len: 0 }
    }
    /// Appends `bytes`; the buffer never grows past the capacity it was made with (the start
    /// would move off its alignment), so pushing beyond it panics.
    pub fn push(&mut self, bytes: &[u8]) {
        // The allocation holds the capacity asked for after any aligned start.
        assert!(
            self.len + bytes.len() <= self.v.capacity() - DIRECT_ALIGN,
            "AlignedBuf::push beyond its capacity"
        );
        self.v.extend_from_slice(bytes);
        self.len += bytes.len();
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.v[self.off..self.off + self.len]
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
}

/// A block device over a regular file or a raw block device.
#[derive(Debug)]
pub struct FileDevice {
    name: String,
    path: PathBuf,
    file: File,
    capacity: u64,
    direct: bool,
    is_block: bool,
    read_only: bool,
    uring: bool,
    /// Serializes read-modify-write of partial sectors under `O_DIRECT`.
    rmw: Mutex<()>,
    counters: BasicCounters,
}

impl FileDevice {
    /// Open `path` with `opts`.
    pub fn open(path: impl AsRef<Path>, opts: &FileOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let name = path.display().to_string();
        let mut oo = OpenOptions::new();
        oo.read(true)
            .write(!opts.read_only)
            .create(opts.create && !opts.read_only);
        if opts.direct {
            oo.custom_flags(libc::O_DIRECT);
        }
        let mut file = oo.open(&path).map_err(|e| DeviceError::io(&name, e))?;
        let meta = file.metadata().map_err(|e| DeviceError::io(&name, e))?;
        let is_block = meta.file_type().is_block_device();
        let capacity = if is_block {
            let dev_size = file
                .seek(SeekFrom::End(0))
                .map_err(|e| DeviceError::io(&name, e))?;
            match opts.size {
                Some(s) if s > dev_size => {
                    return Err(DeviceError::other(
                        &name,
                        format!("requested size {s} exceeds the block device's {dev_size} bytes"),
                    ))
                }
                Some(s) => s,
                None => dev_size,
            }
        } else if meta.is_file() {
            let cur = meta.len();
            match opts.size {
                Some(s) => {
                    if s > cur {
                        if opts.read_only {
                            return Err(DeviceError::other(
                                &name,
                                format!("file is {cur} bytes, shorter than size {s}, and opened read-only"),
                            ));
                        }
                        file.set_len(s).map_err(|e| DeviceError::io(&name, e))?;
                    }
                    s
                }
                None => cur,
            }
        } else {
            return Err(DeviceError::other(
                &name,
                "not a regular file or block device",
            ));
        };
        if opts.direct && capacity % DIRECT_ALIGN as u64 != 0 {
            return Err(DeviceError::other(
                &name,
                format!("O_DIRECT needs a capacity that is a multiple of {DIRECT_ALIGN}, got {capacity}"),
            ));
        }
        let dev = FileDevice {
            name,
            path,
            file,
            capacity,
            direct: opts.direct,
            is_block,
            read_only: opts.read_only,
            uring: opts.uring,
            rmw: Mutex::new(()),
            counters: BasicCounters::default(),
        };
        if opts.preallocate && !is_block && capacity > 0 {
            dev.preallocate(0, capacity)?;
        }
        Ok(dev)
    }

    /// Create (or open) a regular file of `size` bytes, buffered I/O.
    pub fn create(path: impl AsRef<Path>, size: u64) -> Result<Self> {
        Self::open(
            path,
            &FileOptions {
                create: true,
                size: Some(size),
                ..FileOptions::default()
            },
        )
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_direct(&self) -> bool {
        self.direct
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Whether batches may go through io_uring ([`FileOptions::uring`]).
    pub fn uses_uring(&self) -> bool {
        self.uring
    }

    /// The open file (for batched submission through io_uring).
    pub(crate) fn raw_file(&self) -> &File {
        &self.file
    }

    /// Count a transfer done outside `read_at`/`write_at` (batched submission).
    pub(crate) fn count(&self, write: bool, bytes: u64) {
        if write {
            self.counters.write(bytes);
        } else {
            self.counters.read(bytes);
        }
    }

    pub fn is_block_device(&self) -> bool {
        self.is_block
    }

    fn fallocate(&self, mode: libc::c_int, offset: u64, len: u64) -> std::io::Result<()> {
        let off = libc::off_t::try_from(offset)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        let l = libc::off_t::try_from(len)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        loop {
            // SAFETY: `fallocate` takes a file descriptor and three integers and touches no memory of
            // ours; the descriptor is owned by `self.file`, which outlives this call.
            let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), mode, off, l) };
            if rc == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// Reserve disk space for `[offset, offset+len)` without changing the file size (`fallocate` with
    /// `FALLOC_FL_KEEP_SIZE`), so later writes there cannot fail for lack of space.
    pub fn preallocate(&self, offset: u64, len: u64) -> Result<()> {
        check_range(&self.name, offset, len, self.capacity)?;
        if self.read_only {
            return Err(DeviceError::other(&self.name, "opened read-only"));
        }
        if self.is_block || len == 0 {
            return Ok(());
        }
        self.fallocate(libc::FALLOC_FL_KEEP_SIZE, offset, len)
            .map_err(|e| DeviceError::io(&self.name, e))
    }

    /// Bytes the file occupies on disk (`st_blocks * 512`), to observe preallocation and hole punching.
    pub fn allocated_bytes(&self) -> Result<u64> {
        use std::os::unix::fs::MetadataExt;
        let m = self
            .file
            .metadata()
            .map_err(|e| DeviceError::io(&self.name, e))?;
        Ok(m.blocks() * 512)
    }

    /// `pread` until `buf` is full; bytes past end of file read as zeros.
    fn pread_full(&self, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
        while !buf.is_empty() {
            match self.file.read_at(buf, offset) {
                Ok(0) => {
                    buf.fill(0);
                    return Ok(());
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    // `%` rather than `is_multiple_of`: the workspace's rust-version is 1.85.
    #[allow(clippy::manual_is_multiple_of)]
    fn aligned(buf_ptr: *const u8, len: usize, offset: u64) -> bool {
        buf_ptr as usize % DIRECT_ALIGN == 0
            && len % DIRECT_ALIGN == 0
            && offset % DIRECT_ALIGN as u64 == 0
    }

    fn span(offset: u64, len: usize) -> (u64, usize) {
        let a = DIRECT_ALIGN as u64;
        let start = offset / a * a;
        let end = (offset + len as u64).div_ceil(a) * a;
        (start, (end - start) as usize)
    }
}

impl BlockDevice for FileDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn backing_paths(&self) -> Vec<std::path::PathBuf> {
        vec![self.path.clone()]
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(&self.name, offset, buf.len() as u64, self.capacity)?;
        if buf.is_empty() {
            return Ok(());
        }
        let res = if !self.direct || Self::aligned(buf.as_ptr(), buf.len(), offset) {
            self.pread_full(buf, offset)
        } else {
            let (start, len) = Self::span(offset, buf.len());
            let mut bounce = AlignedBuf::new(len);
            self.pread_full(bounce.as_mut_slice(), start).map(|()| {
                let skip = (offset - start) as usize;
                buf.copy_from_slice(&bounce.as_slice()[skip..skip + buf.len()]);
            })
        };
        res.map_err(|e| DeviceError::io(&self.name, e))?;
        self.counters.read(buf.len() as u64);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_range(&self.name, offset, buf.len() as u64, self.capacity)?;
        if self.read_only {
            return Err(DeviceError::other(&self.name, "opened read-only"));
        }
        if buf.is_empty() {
            return Ok(());
        }
        let res = if !self.direct || Self::aligned(buf.as_ptr(), buf.len(), offset) {
            self.file.write_all_at(buf, offset)
        } else {
            let (start, len) = Self::span(offset, buf.len());
            let mut bounce = AlignedBuf::new(len);
            let skip = (offset - start) as usize;
            let partial = skip != 0 || len != buf.len();
            // Partial sectors need read-modify-write; serialize those so two writers sharing a sector
            // cannot undo each other.
            let _guard = if partial {
                Some(self.rmw.lock().unwrap_or_else(|p| p.into_inner()))
            } else {
                None
            };
            let r = if partial {
                self.pread_full(bounce.as_mut_slice(), start)
            } else {
                Ok(())
            };
            r.and_then(|()| {
                bounce.as_mut_slice()[skip..skip + buf.len()].copy_from_slice(buf);
                self.file.write_all_at(bounce.as_slice(), start)
            })
        };
        res.map_err(|e| DeviceError::io(&self.name, e))?;
        self.counters.write(buf.len() as u64);
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        if !self.read_only {
            self.file
                .sync_data()
                .map_err(|e| DeviceError::io(&self.name, e))?;
        }
        self.counters.flush();
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        check_range(&self.name, offset, len, self.capacity)?;
        if self.read_only {
            return Err(DeviceError::other(&self.name, "opened read-only"));
        }
        if len > 0 {
            match self.fallocate(
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset,
                len,
            ) {
                Ok(()) => {}
                // The file system (or device) cannot punch holes: discard is advisory, so do nothing.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
                    ) => {}
                Err(e) => return Err(DeviceError::io(&self.name, e)),
            }
        }
        self.counters.discard(len);
        Ok(())
    }

    fn stats(&self) -> DeviceStats {
        self.counters.snapshot()
    }

    /// Queued for the batch's one io_uring submission (requests io_uring cannot take as they are,
    /// such as unaligned `O_DIRECT` ones, run through `read_at`/`write_at` at that point); without
    /// io_uring on this thread, deferred to run in parallel with the batch's other devices.
    fn submit<'a>(&'a self, reqs: Vec<IoRequest<'a>>, batch: &mut Batch<'a>) {
        batch.uring(self, reqs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `with_capacity` + `push` hold the pushed bytes from an aligned start and never move it;
    /// pushing past the capacity panics rather than realigning.
    #[test]
    fn pushed_pieces_stay_at_an_aligned_start() {
        let mut b = AlignedBuf::with_capacity(3 * 4096);
        assert!(b.is_empty());
        let start = b.as_slice().as_ptr() as usize;
        assert_eq!(start % DIRECT_ALIGN, 0);
        let mut want = Vec::new();
        for i in 0..3u8 {
            let piece = vec![i; 4096];
            b.push(&piece);
            want.extend_from_slice(&piece);
            assert_eq!(b.as_slice().as_ptr() as usize, start, "start moved");
        }
        assert_eq!(b.as_slice(), want.as_slice());
        let over = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.push(&[0])));
        assert!(over.is_err(), "a push past the capacity must panic");
    }

    /// `concat` holds exactly the pieces, from an aligned start, for lengths around the
    /// alignment (an empty one included).
    #[test]
    fn concat_is_the_pieces_at_an_aligned_start() {
        for lens in [
            &[][..],
            &[0][..],
            &[1, 4095][..],
            &[4096, 4096, 7][..],
            &[512; 9][..],
        ] {
            let pieces: Vec<Vec<u8>> = lens
                .iter()
                .enumerate()
                .map(|(i, &l)| (0..l).map(|j| (i * 31 + j) as u8).collect())
                .collect();
            let refs: Vec<&[u8]> = pieces.iter().map(|p| p.as_slice()).collect();
            let b = AlignedBuf::concat(&refs);
            assert_eq!(b.as_slice(), pieces.concat().as_slice(), "pieces {lens:?}");
            assert_eq!(b.len(), pieces.concat().len());
            assert_eq!(
                b.as_slice().as_ptr() as usize % DIRECT_ALIGN,
                0,
                "pieces {lens:?}"
            );
        }
    }
}
