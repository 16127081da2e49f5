//! [`DeviceDir`]: the chunk store's directory ([`StoreDir`]) kept on one block device — the file
//! table of `table`, the extent allocator of `alloc`, and each file read and written through its
//! extents ([`ExtentFile`]).
//!
//! Durability follows the `StoreDir` contract. Creates, renames and removes change the table in
//! memory and wait, in order, for the next [`StoreDir::sync`] (or the next `write_grow` or
//! `set_len`), which appends them to the journal as one batch and flushes the device. A file
//! that grows (`write_grow`, `set_len`) has its new bytes written and flushed before the table
//! that gives it the length, so a length never covers blocks another file left behind (a stale
//! log record there could replay into the wrong chunk): two flushes per growing append. Blocks a
//! change frees return to the allocator only once that change is durable.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ecstack_device::{BlockDevice, DeviceError, DeviceLock};

use super::alloc::{blocks_of, push_extent, split_extents, Extent, FreeSpace};
use super::table::{
    checkpoint_len, decode_checkpoint, encode_checkpoint, encode_record, scan_journal, Files,
    Geometry, Inode, Op, BLOCK, NAME_MAX_BYTES, SECTOR,
};
use crate::chunk_store::{decode_header, header_len_of};
use crate::store_dir::{device_io, DirFile, StoreDir};

/// Zeros are written in pieces of this many bytes.
const ZERO_PIECE_BYTES: usize = 1 << 20;

/// The table as it is in memory, what the journal still lacks, and the allocator.
#[derive(Debug)]
struct State {
    files: Files,
    epoch: u64,
    /// The last journal record's sequence number and the journal bytes in use (this epoch).
    seq: u64,
    tail: u64,
    next_ino: u64,
    free: FreeSpace,
    /// Changes not yet in the journal, in order.
    pending: Vec<Op>,
    /// Extents the pending changes free: given back once they are durable.
    pending_free: Vec<Extent>,
}

/// A [`StoreDir`] on a block device. See the module doc.
pub struct DeviceDir {
    dev: Arc<dyn BlockDevice>,
    name: String,
    geo: Geometry,
    state: Mutex<State>,
    _locks: Vec<DeviceLock>,
}

impl std::fmt::Debug for DeviceDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceDir({})", self.name)
    }
}

fn dev_err(e: DeviceError) -> std::io::Error {
    device_io(e)
}

fn not_found(name: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("{name}: no such file"),
    )
}

/// Where `[offset, offset + len)` of a file held by `extents` lies on the device: (device
/// offset, length) pieces in order. The range must be inside the extents.
fn map(geo: &Geometry, extents: &[Extent], offset: u64, len: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let (mut at, end) = (offset, offset + len);
    let mut file_at = 0u64;
    for &(start, blocks) in extents {
        let bytes = blocks * BLOCK;
        if at < end && at < file_at + bytes {
            let from = at - file_at;
            let n = (bytes - from).min(end - at);
            out.push((geo.data_at() + start * BLOCK + from, n));
            at += n;
        }
        file_at += bytes;
        if at >= end {
            break;
        }
    }
    debug_assert_eq!(at, end, "range inside the extents");
    out
}

impl DeviceDir {
    /// A store's table on `dev` as `geo` lays it out: the newest checkpoint that decodes, the
    /// journal after it replayed; then a new checkpoint is written (so the journal restarts empty
    /// and no record left past the replayed ones can apply later).
    pub(super) fn load(
        dev: Arc<dyn BlockDevice>,
        name: String,
        geo: Geometry,
        locks: Vec<DeviceLock>,
    ) -> std::io::Result<DeviceDir> {
        let mut best: Option<(u64, Files)> = None;
        let mut blank = true;
        for slot in 0..2 {
            let mut head = vec![0u8; BLOCK as usize];
            dev.read_at(&mut head, geo.slot_at(slot)).map_err(dev_err)?;
            blank &= head.iter().all(|b| *b == 0);
            let Some(len) = checkpoint_len(&head).filter(|&l| l <= geo.slot_bytes) else {
                continue;
            };
            let mut b = vec![0u8; len.next_multiple_of(BLOCK) as usize];
            dev.read_at(&mut b, geo.slot_at(slot)).map_err(dev_err)?;
            if let Some((epoch, files)) = decode_checkpoint(&b) {
                if epoch % 2 == slot && best.as_ref().is_none_or(|(e, _)| epoch > *e) {
                    best = Some((epoch, files));
                }
            }
        }
        // Both slots blank: a store just made (its first checkpoint is written below).
        let (epoch, mut files) = match best {
            Some(b) => b,
            None if blank => (0, Files::default()),
            None => {
                return Err(std::io::Error::other(
                    "no checkpoint of the chunk table decodes (both slots are damaged)",
                ))
            }
        };
        let mut journal = vec![0u8; geo.journal_bytes as usize];
        dev.read_at(&mut journal, geo.journal_at())
            .map_err(dev_err)?;
        let ops = scan_journal(&journal, epoch);
        for op in &ops {
            files.apply(op);
        }
        files.drop_unnamed();
        files
            .check(geo.data_blocks())
            .map_err(|e| std::io::Error::other(format!("corrupt chunk table: {e}")))?;
        let used: Vec<Extent> = files
            .inodes
            .values()
            .flat_map(|i| i.extents.iter().copied())
            .collect();
        let next_ino = files.inodes.keys().max().map_or(1, |m| m + 1);
        let dir = DeviceDir {
            dev,
            name,
            geo,
            state: Mutex::new(State {
                free: FreeSpace::with_used(geo.data_blocks(), &used),
                files,
                epoch,
                seq: ops.len() as u64,
                tail: geo.journal_bytes,
                next_ino,
                pending: Vec::new(),
                pending_free: Vec::new(),
            }),
            _locks: locks,
        };
        // Always a new epoch: records of this one past the replayed ones (a batch cut short)
        // must never apply after new ones are written around them.
        {
            let mut st = dir.lock();
            dir.checkpoint(&mut st)?;
            dir.dev.flush().map_err(dev_err)?;
        }
        Ok(dir)
    }

    /// Makes a new, empty store: both checkpoint slots blanked (flushed), then the superblock
    /// (flushed). A cut before the superblock leaves a device that is not a store yet (and is
    /// blank where it was); after it, [`DeviceDir::load`] finds blank slots and writes the first
    /// checkpoint.
    pub(super) fn format(dev: &dyn BlockDevice, geo: &Geometry) -> std::io::Result<()> {
        for slot in 0..2 {
            dev.write_at(&vec![0u8; BLOCK as usize], geo.slot_at(slot))
                .map_err(dev_err)?;
        }
        dev.flush().map_err(dev_err)?;
        dev.write_at(&geo.encode(), 0).map_err(dev_err)?;
        dev.flush().map_err(dev_err)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    /// Free bytes of the data region.
    pub fn free_bytes(&self) -> u64 {
        self.lock().free.free_blocks() * BLOCK
    }

    /// Writes the whole table as checkpoint `epoch + 1` in the other slot (not flushed).
    fn checkpoint(&self, st: &mut State) -> std::io::Result<()> {
        let epoch = st.epoch + 1;
        let b = encode_checkpoint(epoch, &st.files);
        if b.len() as u64 > self.geo.slot_bytes {
            return Err(std::io::Error::other(format!(
                "the chunk table ({} bytes) outgrew its {}-byte checkpoint slot",
                b.len(),
                self.geo.slot_bytes
            )));
        }
        self.dev
            .write_at(&b, self.geo.slot_at(epoch % 2))
            .map_err(dev_err)?;
        st.epoch = epoch;
        st.seq = 0;
        st.tail = 0;
        Ok(())
    }

    /// Makes every pending change durable: one journal batch (or, when the journal is full, a
    /// checkpoint) and a flush; then gives back the blocks they freed.
    fn commit(&self, st: &mut State) -> std::io::Result<()> {
        if !st.pending.is_empty() {
            let mut batch = Vec::new();
            for (i, op) in st.pending.iter().enumerate() {
                batch.extend(encode_record(st.epoch, st.seq + 1 + i as u64, op));
            }
            batch.resize((batch.len() as u64).next_multiple_of(SECTOR) as usize, 0);
            if st.tail + batch.len() as u64 > self.geo.journal_bytes {
                self.checkpoint(st)?;
            } else {
                self.dev
                    .write_at(&batch, self.geo.journal_at() + st.tail)
                    .map_err(dev_err)?;
                st.tail += batch.len() as u64;
                st.seq += st.pending.len() as u64;
            }
        }
        self.dev.flush().map_err(dev_err)?;
        st.pending.clear();
        for (s, l) in std::mem::take(&mut st.pending_free) {
            st.free.free(s, l);
        }
        Ok(())
    }

    /// Applies `op` to the table in memory and queues it for the journal.
    fn change(st: &mut State, op: Op) {
        if let Some((_, inode)) = st.files.apply(&op) {
            st.pending_free.extend(inode.extents);
        }
        st.pending.push(op);
    }

    fn alloc(st: &mut State, hint: Option<u64>, blocks: u64) -> std::io::Result<Vec<Extent>> {
        st.free.alloc(hint, blocks).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!(
                    "no room for {blocks} more blocks ({} free)",
                    st.free.free_blocks()
                ),
            )
        })
    }

    /// Grows `inode`'s extents to hold `len` bytes (from the block after its last one when free).
    fn grow(st: &mut State, inode: &mut Inode, len: u64) -> std::io::Result<()> {
        let need = len
            .div_ceil(BLOCK)
            .saturating_sub(blocks_of(&inode.extents));
        if need > 0 {
            let hint = inode.extents.last().map(|&(s, l)| s + l);
            for e in Self::alloc(st, hint, need)? {
                push_extent(&mut inode.extents, e);
            }
        }
        Ok(())
    }

    fn file(&self, name: &str, inode: &Inode) -> ExtentFile {
        ExtentFile {
            name: format!("{}: {name}", self.name),
            dev: self.dev.clone(),
            geo: self.geo,
            len: inode.len,
            extents: inode.extents.clone(),
        }
    }

    /// Writes `pieces` (offset, bytes) into file `name` (created if there is none), grown to at
    /// least `len` and past every piece: the bytes between the old length and the first piece
    /// are zeroed, the rest of the growth no piece covers is left as the blocks held it. The
    /// pieces are written and flushed (when the file grows), then the length journaled and
    /// flushed.
    fn write_grown(&self, name: &str, pieces: &[(u64, &[u8])], len: u64) -> std::io::Result<bool> {
        check_name(name)?;
        let end = pieces
            .iter()
            .map(|(at, b)| at + b.len() as u64)
            .fold(len, u64::max);
        let mut st = self.lock();
        let created = !st.files.names.contains_key(name);
        let (ino, mut inode) = match st.files.names.get(name) {
            Some(&ino) => (ino, st.files.inodes[&ino].clone()),
            None => {
                st.next_ino += 1;
                (st.next_ino - 1, Inode::default())
            }
        };
        let old_len = inode.len;
        Self::grow(&mut st, &mut inode, end)?;
        inode.len = old_len.max(end);
        let file = self.file(name, &inode);
        let written = (|| {
            let first = pieces.iter().map(|p| p.0).min().unwrap_or(end);
            if first > old_len {
                Self::zero(&file, old_len, first)?;
            }
            for (at, bytes) in pieces {
                file.write_in(bytes, *at)?;
            }
            if inode.len > old_len {
                self.dev.flush().map_err(dev_err)?;
            }
            Ok(())
        })();
        if let Err(e) = written {
            let had = st
                .files
                .names
                .get(name)
                .map_or(0, |i| blocks_of(&st.files.inodes[i].extents));
            let (_, fresh) = split_extents(&inode.extents, had);
            for (s, l) in fresh {
                st.free.free(s, l);
            }
            return Err(e);
        }
        Self::change(&mut st, Op::Set { ino, inode });
        if created {
            Self::change(
                &mut st,
                Op::Link {
                    name: name.to_owned(),
                    ino,
                },
            );
        }
        self.commit(&mut st)?;
        Ok(created)
    }

    /// Writes zeros over `[from, to)` of a file (not flushed).
    fn zero(file: &ExtentFile, from: u64, to: u64) -> std::io::Result<()> {
        let zeros = vec![0u8; ZERO_PIECE_BYTES.min((to - from) as usize)];
        let mut at = from;
        while at < to {
            let n = (to - at).min(zeros.len() as u64);
            file.write_in(&zeros[..n as usize], at)?;
            at += n;
        }
        Ok(())
    }

    /// The device extents holding file `name`'s bytes, in file order (byte offset, length).
    pub fn device_extents(&self, name: &str) -> Option<Vec<(u64, u64)>> {
        let st = self.lock();
        let inode = st.files.inodes.get(st.files.names.get(name)?)?;
        Some(map(&self.geo, &inode.extents, 0, inode.len))
    }
}

fn check_name(name: &str) -> std::io::Result<()> {
    if name.is_empty() || name.len() > NAME_MAX_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("file name of {} bytes", name.len()),
        ));
    }
    Ok(())
}

impl StoreDir for DeviceDir {
    fn root(&self) -> PathBuf {
        PathBuf::from(&self.name)
    }

    fn open(&self, name: &str, _write: bool) -> std::io::Result<Option<DirFile>> {
        let st = self.lock();
        let Some(ino) = st.files.names.get(name) else {
            return Ok(None);
        };
        Ok(Some(Box::new(self.file(name, &st.files.inodes[ino]))))
    }

    /// The file gets room for its whole length at once, in one extent where a free run holds it:
    /// for a chunk image, the length its header announces with the PLR reserve (so the reserve
    /// `set_len` adds next is contiguous with the parity).
    fn create(
        &self,
        name: &str,
        image: &[u8],
        len: usize,
        _direct: bool,
    ) -> std::io::Result<DirFile> {
        check_name(name)?;
        let head = &image[..header_len_of(image).min(image.len())];
        let room = decode_header(head)
            .map(|h| h.file_len())
            .unwrap_or(0)
            .max(len as u64);
        let (ino, extents) = {
            let mut st = self.lock();
            let extents = Self::alloc(&mut st, None, room.div_ceil(BLOCK))?;
            st.next_ino += 1;
            (st.next_ino - 1, extents)
        };
        let inode = Inode {
            len: len as u64,
            extents,
        };
        let file = self.file(name, &inode);
        // Whole blocks: the image is zero after `len`.
        let whole = (len as u64).next_multiple_of(BLOCK).min(image.len() as u64);
        let wrote = file.write_in(&image[..whole as usize], 0);
        let mut st = self.lock();
        if let Err(e) = wrote {
            for &(s, l) in &inode.extents {
                st.free.free(s, l);
            }
            return Err(e);
        }
        Self::change(&mut st, Op::Set { ino, inode });
        Self::change(
            &mut st,
            Op::Link {
                name: name.to_owned(),
                ino,
            },
        );
        Ok(Box::new(file))
    }

    fn len(&self, name: &str) -> std::io::Result<Option<u64>> {
        let st = self.lock();
        Ok(st.files.names.get(name).map(|ino| st.files.inodes[ino].len))
    }

    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        check_name(to)?;
        let mut st = self.lock();
        if !st.files.names.contains_key(from) {
            return Err(not_found(from));
        }
        Self::change(
            &mut st,
            Op::Rename {
                from: from.to_owned(),
                to: to.to_owned(),
            },
        );
        Ok(())
    }

    fn remove(&self, name: &str) -> std::io::Result<bool> {
        let mut st = self.lock();
        if !st.files.names.contains_key(name) {
            return Ok(false);
        }
        Self::change(
            &mut st,
            Op::Unlink {
                name: name.to_owned(),
            },
        );
        Ok(true)
    }

    fn sync(&self) -> std::io::Result<()> {
        let mut st = self.lock();
        self.commit(&mut st)
    }

    fn list(&self) -> std::io::Result<Vec<(String, u64)>> {
        let st = self.lock();
        Ok(st
            .files
            .names
            .iter()
            .map(|(n, ino)| (n.clone(), st.files.inodes[ino].len))
            .collect())
    }

    /// A log grows by the blocks its record needs, taken in the order records arrive: after its
    /// last block when that is free, else the first free run (a log growing among others'
    /// fragments, as CodFS's logs do on a file system). The record is written and flushed, then
    /// the new length journaled and flushed.
    fn write_grow(&self, name: &str, at: u64, bytes: &[u8]) -> std::io::Result<bool> {
        self.write_grown(name, &[(at, bytes)], at + bytes.len() as u64)
    }

    /// As [`StoreDir::write_grow`], the blocks the pieces do not cover allocated and left as
    /// they were (not zeroed: a block file's deletion record uses a few blocks of its slot, and
    /// no reader reads the rest).
    fn write_sparse(&self, name: &str, pieces: &[(u64, &[u8])], len: u64) -> std::io::Result<bool> {
        self.write_grown(name, pieces, len)
    }
    /// A cut frees the blocks past the new length once durable; a growth writes zeros over the
    /// new bytes (flushed) before the table gives the file its length.
    fn set_len(&self, name: &str, len: u64) -> std::io::Result<()> {
        let mut st = self.lock();
        let Some(&ino) = st.files.names.get(name) else {
            return Err(not_found(name));
        };
        let mut inode = st.files.inodes[&ino].clone();
        let old_len = inode.len;
        if len > old_len {
            let had = blocks_of(&inode.extents);
            Self::grow(&mut st, &mut inode, len)?;
            inode.len = len;
            let file = self.file(name, &inode);
            let zeroed =
                Self::zero(&file, old_len, len).and_then(|()| self.dev.flush().map_err(dev_err));
            if let Err(e) = zeroed {
                let (_, fresh) = split_extents(&inode.extents, had);
                for (s, l) in fresh {
                    st.free.free(s, l);
                }
                return Err(e);
            }
        } else {
            let (kept, cut) = split_extents(&inode.extents, len.div_ceil(BLOCK));
            inode.extents = kept;
            inode.len = len;
            st.pending_free.extend(cut);
        }
        Self::change(&mut st, Op::Set { ino, inode });
        self.commit(&mut st)
    }

    fn extents(&self, name: &str) -> std::io::Result<Option<Vec<(u64, u64)>>> {
        Ok(self.device_extents(name))
    }
}

/// A file of a [`DeviceDir`]: its bytes through its extents, as they were when it was opened.
#[derive(Debug)]
struct ExtentFile {
    name: String,
    dev: Arc<dyn BlockDevice>,
    geo: Geometry,
    len: u64,
    extents: Vec<Extent>,
}

impl ExtentFile {
    fn check(&self, offset: u64, len: u64, limit: u64) -> ecstack_device::Result<()> {
        if offset.checked_add(len).is_none_or(|e| e > limit) {
            return Err(DeviceError::OutOfRange {
                device: self.name.clone(),
                offset,
                len,
                capacity: limit,
            });
        }
        Ok(())
    }

    /// Writes anywhere in the file's blocks (past its length too: room allocated ahead).
    fn write_in(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let room = blocks_of(&self.extents) * BLOCK;
        self.check(offset, buf.len() as u64, room)
            .map_err(dev_err)?;
        let mut from = 0usize;
        for (at, n) in map(&self.geo, &self.extents, offset, buf.len() as u64) {
            self.dev
                .write_at(&buf[from..from + n as usize], at)
                .map_err(dev_err)?;
            from += n as usize;
        }
        Ok(())
    }
}

impl BlockDevice for ExtentFile {
    fn name(&self) -> &str {
        &self.name
    }
    fn capacity(&self) -> u64 {
        self.len
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> ecstack_device::Result<()> {
        self.check(offset, buf.len() as u64, self.len)?;
        let mut from = 0usize;
        for (at, n) in map(&self.geo, &self.extents, offset, buf.len() as u64) {
            self.dev.read_at(&mut buf[from..from + n as usize], at)?;
            from += n as usize;
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> ecstack_device::Result<()> {
        self.check(offset, buf.len() as u64, self.len)?;
        self.write_in(buf, offset)
            .map_err(|e| DeviceError::io(&self.name, e))
    }
    fn flush(&self) -> ecstack_device::Result<()> {
        self.dev.flush()
    }
    fn discard(&self, _offset: u64, _len: u64) -> ecstack_device::Result<()> {
        Ok(())
    }
}
