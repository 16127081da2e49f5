//! Per-chunk checksums (issue 15): a CRC32C of every chunk slot of the main and log devices, kept
//! in the metadata (never beside the data) and verified on every read (`io::Devs::read`).
//!
//! The table is shared by the device I/O layer (which sets a slot's checksum when it writes the
//! chunk and checks it when it reads it) and the metadata state (which checkpoints it and replays
//! its records), so it is lock-free: one `AtomicU64` per slot (`KNOWN | crc`, 0 = not known), in
//! pages allocated on first use, so a large array that is mostly unwritten costs 8 bytes per 4,096
//! slots. Changes since the last metadata sync are queued (`take_changes`) and become
//! `ChunkCrcs`/`ChunkCrcForget` records in the next frame, so a checksum is durable with the
//! record that makes its chunk live (both go in the frame of the sync after the write).
//!
//! Format version 6 keeps the table out of the full checkpoint: it lives in a **checksum area** on
//! the metadata volume, written in place by pages ([`CrcArea`], [`encode_page`]). A page of
//! [`PAGE_SLOTS`] slots has two copies; a full checkpoint writes every page changed since the last
//! one into the copy the live checkpoint does not name, flushes, and then writes a checkpoint
//! body whose page map names the new copies. So the live checkpoint only ever names pages that
//! were durable before it, a torn page write hits a copy no durable checkpoint names, and between
//! checkpoints the frames carry the changes as records (as in version 5).
//!
//! A slot whose checksum is not known (never written, written by a build before checksums,
//! forgotten after a crash in a write-intent region) is read unverified. A slot whose chunk failed
//! its check is *bad* until it is written again: the read paths treat it as an erasure (like a chunk
//! of a failed device), decode it from the rest of its stripe and write it back.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

/// Slots per page of the table, in memory and in the checksum area (a 4 KiB page holds a
/// 960-bit known map and 960 checksums, see [`encode_page`]).
pub(crate) const PAGE_SLOTS: u64 = 960;
/// Bytes of one page copy in the checksum area.
pub(crate) const PAGE_BYTES: u64 = 4096;
const PAGE_MAGIC: &[u8; 8] = b"ECSTKCRC";
/// Version of the checksum page layout.
pub(crate) const PAGE_VERSION: u32 = 1;
// Page layout (docs/array-format.md, "Checksum area"): header, known bitmap, checksums, and a
// CRC32C of everything before it in the last 4 bytes.
const PAGE_DEV: usize = 12;
const PAGE_INDEX: usize = 14;
const PAGE_SALT: usize = 22;
const PAGE_GEN: usize = 30;
const PAGE_KNOWN: usize = 40;
const PAGE_CRCS: usize = PAGE_KNOWN + (PAGE_SLOTS as usize) / 8;
const PAGE_END: usize = PAGE_CRCS + 4 * PAGE_SLOTS as usize;
const PAGE_CRC: usize = PAGE_BYTES as usize - 4;
const _: () = assert!(PAGE_SLOTS % 64 == 0 && PAGE_GEN + 8 <= PAGE_KNOWN && PAGE_END <= PAGE_CRC);

/// The on-disk image of one checksum page: `crcs[i]` is slot `page·PAGE_SLOTS + i` of `dev`.
pub(crate) fn encode_page(
    dev: u16,
    page: u64,
    salt: u64,
    generation: u64,
    crcs: &[Option<u32>],
) -> Vec<u8> {
    assert!(
        crcs.len() <= PAGE_SLOTS as usize,
        "{} slots in a page",
        crcs.len()
    );
    let mut b = vec![0u8; PAGE_BYTES as usize];
    b[..8].copy_from_slice(PAGE_MAGIC);
    b[8..12].copy_from_slice(&PAGE_VERSION.to_le_bytes());
    b[PAGE_DEV..PAGE_DEV + 2].copy_from_slice(&dev.to_le_bytes());
    b[PAGE_INDEX..PAGE_INDEX + 8].copy_from_slice(&page.to_le_bytes());
    b[PAGE_SALT..PAGE_SALT + 8].copy_from_slice(&salt.to_le_bytes());
    b[PAGE_GEN..PAGE_GEN + 8].copy_from_slice(&generation.to_le_bytes());
    for (i, c) in crcs.iter().enumerate() {
        if let Some(c) = c {
            b[PAGE_KNOWN + i / 8] |= 1 << (i % 8);
            b[PAGE_CRCS + 4 * i..PAGE_CRCS + 4 * i + 4].copy_from_slice(&c.to_le_bytes());
        }
    }
    let crc = crc32c::crc32c(&b[..PAGE_CRC]);
    b[PAGE_CRC..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Decode a page copy read from the checksum area, which the live checkpoint says holds page
/// `page` of `dev`, written for a checkpoint of epoch at most `epoch_max`: its `PAGE_SLOTS`
/// checksums and its generation, or why it is not that page (a torn or corrupt write, a page of
/// another array, device or place, a later generation, an unknown version).
pub(crate) fn decode_page(
    b: &[u8],
    dev: u16,
    page: u64,
    salt: u64,
    epoch_max: u64,
) -> std::result::Result<(Vec<Option<u32>>, u64), String> {
    if b.len() != PAGE_BYTES as usize {
        return Err(format!("{} bytes, not a page", b.len()));
    }
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    if &b[..8] != PAGE_MAGIC {
        return Err("no page magic".into());
    }
    let crc = u32::from_le_bytes(b[PAGE_CRC..].try_into().expect("4 bytes"));
    if crc32c::crc32c(&b[..PAGE_CRC]) != crc {
        return Err("page CRC mismatch (torn or corrupt)".into());
    }
    let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
    if version != PAGE_VERSION {
        return Err(format!("unknown checksum page version {version}"));
    }
    let got = (
        u16::from_le_bytes([b[PAGE_DEV], b[PAGE_DEV + 1]]),
        u64_at(PAGE_INDEX),
        u64_at(PAGE_SALT),
    );
    if got != (dev, page, salt) {
        return Err(format!(
            "holds page {} of device {} (salt {:#x}), not page {page} of device {dev}",
            got.1, got.0, got.2
        ));
    }
    let generation = u64_at(PAGE_GEN);
    if generation > epoch_max {
        return Err(format!(
            "generation {generation} is newer than the checkpoint (epoch {epoch_max})"
        ));
    }
    if b[PAGE_END..PAGE_CRC].iter().any(|&x| x != 0)
        || b[PAGE_GEN + 8..PAGE_KNOWN].iter().any(|&x| x != 0)
    {
        return Err("non-zero padding".into());
    }
    let crcs = (0..PAGE_SLOTS as usize)
        .map(|i| {
            (b[PAGE_KNOWN + i / 8] >> (i % 8) & 1 == 1).then(|| {
                u32::from_le_bytes(
                    b[PAGE_CRCS + 4 * i..PAGE_CRCS + 4 * i + 4]
                        .try_into()
                        .expect("4 bytes"),
                )
            })
        })
        .collect::<Vec<_>>();
    if crcs.iter().zip(0..).any(|(c, i)| {
        c.is_none()
            && b[PAGE_CRCS + 4 * i..PAGE_CRCS + 4 * i + 4]
                .iter()
                .any(|&x| x != 0)
    }) {
        return Err("checksum bytes of a slot marked unknown".into());
    }
    Ok((crcs, generation))
}

/// Where the checksum area lies on the metadata volume: copy `c` (0 = A, 1 = B) of page `p` of
/// device `d` at `off + (c·total + base[d] + p) · PAGE_BYTES`, where `total` is the pages of all
/// devices and `base[d]` those of the devices before `d`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CrcArea {
    pub off: u64,
    base: Vec<u64>,
    total: u64,
}

impl CrcArea {
    /// The area at `off` for devices of `slots[d]` chunk slots.
    pub fn new(off: u64, slots: &[u64]) -> CrcArea {
        let mut base = Vec::with_capacity(slots.len());
        let mut total = 0u64;
        for s in slots {
            base.push(total);
            total = total.saturating_add(s.div_ceil(PAGE_SLOTS));
        }
        CrcArea { off, base, total }
    }

    /// Bytes of the area (both copies of every page).
    pub fn bytes(&self) -> u64 {
        self.total.saturating_mul(2 * PAGE_BYTES)
    }

    pub fn end(&self) -> u64 {
        self.off.saturating_add(self.bytes())
    }

    pub fn page_off(&self, dev: usize, page: u64, copy: u8) -> u64 {
        self.off + (copy as u64 * self.total + self.base[dev] + page) * PAGE_BYTES
    }
}

/// One page copy a full checkpoint writes before its header: `bytes` go to copy `copy` (0 = A,
/// 1 = B) of `page` of `dev`; `before` is the page's map entry before (to undo a failed write).
#[derive(Debug, Clone)]
pub(crate) struct PageWrite {
    pub dev: usize,
    pub page: u64,
    pub copy: u8,
    pub bytes: Vec<u8>,
    before: u8,
}

/// A page's entry in the page map: never written (its slots are all unknown), or the copy the
/// live checkpoint names.
pub(crate) const MAP_NONE: u8 = 0;
pub(crate) const MAP_A: u8 = 1;
pub(crate) const MAP_B: u8 = 2;
/// Set in a slot's word when its checksum is known.
const KNOWN: u64 = 1 << 32;

/// A change of one slot's checksum: `Some(crc)` set, `None` forgotten.
pub(crate) type CrcChange = (u16, u64, Option<u32>);

type Page = Box<[AtomicU64]>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The checksum table of an array's main and log devices (main `0..n`, log `n..n+m`).
pub(crate) struct ChunkCrcs {
    chunk: u64,
    data_start: u64,
    /// Slots per device.
    slots: Vec<u64>,
    pages: Vec<Vec<OnceLock<Page>>>,
    /// Pages changed since the last full checkpoint wrote them (format version 6).
    dirty: Vec<Vec<AtomicBool>>,
    /// Page map (version 6): per page [`MAP_NONE`], [`MAP_A`] or [`MAP_B`], the copy the live
    /// checkpoint names. Changed only by a checkpoint (under the metadata volume's lock).
    map: Mutex<Vec<Vec<u8>>>,
    /// Checksum pages that failed their check on open (their slots were read as unknown).
    pub page_errors: AtomicU64,
    changes: Mutex<Vec<CrcChange>>,
    bad: Mutex<HashSet<(usize, u64)>>,
    /// Whether `bad` may hold anything (a read of the fast path never takes its lock).
    any_bad: AtomicBool,
    /// Compute and verify checksums (off: writes forget their slots' checksums, reads verify
    /// nothing; for measuring what checksums cost).
    enabled: AtomicBool,
    /// Chunks whose bytes did not match their checksum (each detection counts).
    pub errors: AtomicU64,
    /// Bad chunks written back with their decoded bytes.
    pub repaired: AtomicU64,
}

impl std::fmt::Debug for ChunkCrcs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChunkCrcs({} known)", self.known().len())
    }
}

impl ChunkCrcs {
    /// A table for devices of `slots[d]` chunk slots of `chunk` bytes from `data_start`.
    pub fn new(chunk: u64, data_start: u64, slots: Vec<u64>) -> ChunkCrcs {
        let pages = slots
            .iter()
            .map(|s| {
                (0..s.div_ceil(PAGE_SLOTS))
                    .map(|_| OnceLock::new())
                    .collect()
            })
            .collect();
        let dirty = slots
            .iter()
            .map(|s| {
                (0..s.div_ceil(PAGE_SLOTS))
                    .map(|_| AtomicBool::new(false))
                    .collect()
            })
            .collect();
        let map = slots
            .iter()
            .map(|s| vec![MAP_NONE; s.div_ceil(PAGE_SLOTS) as usize])
            .collect();
        ChunkCrcs {
            chunk,
            data_start,
            slots,
            pages,
            dirty,
            map: Mutex::new(map),
            page_errors: AtomicU64::new(0),
            changes: Mutex::new(Vec::new()),
            bad: Mutex::new(HashSet::new()),
            any_bad: AtomicBool::new(false),
            enabled: AtomicBool::new(true),
            errors: AtomicU64::new(0),
            repaired: AtomicU64::new(0),
        }
    }

    /// A table of the same shape with the same known checksums and page map (nothing queued,
    /// nothing bad; every page holding a known checksum is dirty).
    pub fn deep_clone(&self) -> ChunkCrcs {
        let t = ChunkCrcs::new(self.chunk, self.data_start, self.slots.clone());
        for (d, s, c) in self.known() {
            t.store(d, s, Some(c));
        }
        *lock(&t.map) = lock(&self.map).clone();
        t
    }

    pub fn devices(&self) -> usize {
        self.slots.len()
    }

    pub fn slots(&self, dev: usize) -> u64 {
        self.slots.get(dev).copied().unwrap_or(0)
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Relaxed);
    }

    fn word(&self, dev: usize, slot: u64) -> Option<&AtomicU64> {
        let page = self.pages.get(dev)?.get((slot / PAGE_SLOTS) as usize)?;
        Some(&page.get()?[(slot % PAGE_SLOTS) as usize])
    }

    /// The checksum of a slot, if known.
    pub fn get(&self, dev: usize, slot: u64) -> Option<u32> {
        let w = self.word(dev, slot)?.load(Relaxed);
        (w & KNOWN != 0).then_some(w as u32)
    }

    /// Set (or forget, `None`) a slot's checksum without queueing a change (replaying the
    /// metadata). Slots out of range are the caller's error: [`ChunkCrcs::in_range`].
    pub fn store(&self, dev: usize, slot: u64, crc: Option<u32>) {
        assert!(
            self.in_range(dev, slot),
            "checksum of slot {slot} of device {dev}"
        );
        let page = &self.pages[dev][(slot / PAGE_SLOTS) as usize];
        if crc.is_none() && page.get().is_none() {
            return;
        }
        let page = page.get_or_init(|| (0..PAGE_SLOTS).map(|_| AtomicU64::new(0)).collect());
        let w = crc.map_or(0, |c| KNOWN | c as u64);
        page[(slot % PAGE_SLOTS) as usize].store(w, Relaxed);
        // After the store: a checkpoint that clears the flag before copying the page either
        // copies this checksum or sees the flag set again.
        self.dirty[dev][(slot / PAGE_SLOTS) as usize].store(true, Relaxed);
    }

    /// The checksums of one page (`PAGE_SLOTS`, those past the device's end unknown).
    fn page_crcs(&self, dev: usize, page: u64) -> Vec<Option<u32>> {
        let first = page * PAGE_SLOTS;
        (first..first + PAGE_SLOTS)
            .map(|s| {
                if s < self.slots(dev) {
                    self.get(dev, s)
                } else {
                    None
                }
            })
            .collect()
    }

    /// Take the checksums of a page read from the checksum area on open (not dirty: the area
    /// holds them). Slots past the device's end must be unknown.
    pub fn load_page(&self, dev: usize, page: u64, crcs: &[Option<u32>]) -> Result<(), String> {
        let first = page * PAGE_SLOTS;
        for (i, c) in crcs.iter().enumerate() {
            let slot = first + i as u64;
            match (c, slot < self.slots(dev)) {
                (Some(_), false) => {
                    return Err(format!("checksum of slot {slot}, past the device's end"))
                }
                (_, false) => {}
                (c, true) => self.store(dev, slot, *c),
            }
        }
        self.dirty[dev][page as usize].store(false, Relaxed);
        Ok(())
    }

    /// A page of the live checkpoint's map that could not be read back (torn, corrupt, or a read
    /// error): its slots stay unknown (read unverified), it is counted, and the next checkpoint
    /// writes it again from memory.
    pub fn page_lost(&self, dev: usize, page: u64) {
        self.page_errors.fetch_add(1, Relaxed);
        self.dirty[dev][page as usize].store(true, Relaxed);
    }

    /// The pages the live checkpoint names, as `(device, page, copy)`.
    pub fn mapped_pages(&self) -> Vec<(usize, u64, u8)> {
        let map = lock(&self.map);
        let mut out = Vec::new();
        for (d, pages) in map.iter().enumerate() {
            for (p, &e) in pages.iter().enumerate() {
                if e != MAP_NONE {
                    out.push((d, p as u64, e - 1));
                }
            }
        }
        out
    }

    /// For a full checkpoint of `epoch` (format version 6): every page changed since the last
    /// one, encoded for the copy the live checkpoint does not name; the page map (which the
    /// checkpoint body encodes) names the new copies from now on. The caller writes and flushes
    /// them before the checkpoint, or calls [`ChunkCrcs::undo_pages`] if it cannot.
    pub fn take_dirty_pages(&self, epoch: u64, salt: u64) -> Vec<PageWrite> {
        let mut map = lock(&self.map);
        let mut out = Vec::new();
        for (d, flags) in self.dirty.iter().enumerate() {
            for (p, f) in flags.iter().enumerate() {
                if !f.swap(false, Relaxed) {
                    continue;
                }
                let before = map[d][p];
                let copy = if before == MAP_A { 1 } else { 0 };
                let bytes = encode_page(
                    d as u16,
                    p as u64,
                    salt,
                    epoch,
                    &self.page_crcs(d, p as u64),
                );
                map[d][p] = copy + 1;
                out.push(PageWrite {
                    dev: d,
                    page: p as u64,
                    copy,
                    bytes,
                    before,
                });
            }
        }
        out
    }

    /// The checkpoint the pages of [`ChunkCrcs::take_dirty_pages`] were for was not written: the
    /// map names the old copies again and the pages stay dirty.
    pub fn undo_pages(&self, writes: &[PageWrite]) {
        let mut map = lock(&self.map);
        for w in writes {
            map[w.dev][w.page as usize] = w.before;
            self.dirty[w.dev][w.page as usize].store(true, Relaxed);
        }
    }

    /// The page map (format version 6): per device, per page [`MAP_NONE`] (never written),
    /// [`MAP_A`] or [`MAP_B`] (the copy the live checkpoint names). Encoded by
    /// `meta::encode_page_map`.
    pub fn page_map(&self) -> Vec<Vec<u8>> {
        lock(&self.map).clone()
    }

    /// Set the page map read from a checkpoint (`meta::decode_page_map`): one entry per page of
    /// every device, each 0, 1 or 2.
    pub fn set_page_map(&self, map: Vec<Vec<u8>>) -> Result<(), String> {
        let mut cur = lock(&self.map);
        if map.len() != cur.len() {
            return Err(format!(
                "page map of {} devices, the array has {}",
                map.len(),
                cur.len()
            ));
        }
        for (d, (new, old)) in map.iter().zip(cur.iter()).enumerate() {
            if new.len() != old.len() {
                return Err(format!(
                    "page map of {} pages for device {d}, which has {}",
                    new.len(),
                    old.len()
                ));
            }
            if let Some(p) = new.iter().position(|&x| x > MAP_B) {
                return Err(format!(
                    "page map entry {} of page {p} of device {d}",
                    new[p]
                ));
            }
        }
        *cur = map;
        Ok(())
    }

    pub fn in_range(&self, dev: usize, slot: u64) -> bool {
        slot < self.slots(dev)
    }

    /// Every known checksum, by device and ascending slot.
    pub fn known(&self) -> Vec<(usize, u64, u32)> {
        let mut out = Vec::new();
        for (d, pages) in self.pages.iter().enumerate() {
            for (p, page) in pages.iter().enumerate() {
                let Some(page) = page.get() else { continue };
                for (i, w) in page.iter().enumerate() {
                    let w = w.load(Relaxed);
                    if w & KNOWN != 0 {
                        out.push((d, p as u64 * PAGE_SLOTS + i as u64, w as u32));
                    }
                }
            }
        }
        out
    }

    /// The slots `[off, off + len)` of device `dev` covers: `(first slot, chunks, whole)`, where
    /// `whole` says the range is exactly those chunks; None outside the data area.
    fn slots_of(&self, dev: usize, off: u64, len: usize) -> Option<(u64, u64, bool)> {
        if off < self.data_start || len == 0 || dev >= self.slots.len() {
            return None;
        }
        let rel = off - self.data_start;
        let first = rel / self.chunk;
        let end = (rel + len as u64).div_ceil(self.chunk);
        let whole = rel.is_multiple_of(self.chunk) && (len as u64).is_multiple_of(self.chunk);
        (end <= self.slots(dev)).then_some((first, end - first, whole))
    }

    /// The range a read of `[off, off + len)` must cover to be verified: the whole chunks under it
    /// when one of them has a known checksum, else the range itself.
    pub fn read_span(&self, dev: usize, off: u64, len: usize) -> (u64, usize) {
        match self.slots_of(dev, off, len) {
            Some((first, n, false))
                if self.enabled() && (first..first + n).any(|s| self.get(dev, s).is_some()) =>
            {
                (
                    self.data_start + first * self.chunk,
                    (n * self.chunk) as usize,
                )
            }
            _ => (off, len),
        }
    }

    /// The slot and known checksum of the one whole chunk `[off, off + len)` of `dev`, if it is
    /// exactly one chunk and its checksum is known (checks on, as [`ChunkCrcs::verify`]).
    pub fn whole_chunk(&self, dev: usize, off: u64, len: usize) -> Option<(u64, u32)> {
        if !self.enabled() {
            return None;
        }
        match self.slots_of(dev, off, len)? {
            (slot, 1, true) => Some((slot, self.get(dev, slot)?)),
            _ => None,
        }
    }

    /// Check the bytes read from `off` on `dev` against their slots' checksums; a chunk that does
    /// not match is marked bad and counted. True if every chunk with a known checksum matched.
    pub fn verify(&self, dev: usize, off: u64, buf: &[u8]) -> bool {
        if !self.enabled() {
            return true;
        }
        let Some((first, n, true)) = self.slots_of(dev, off, buf.len()) else {
            return true;
        };
        let mut ok = true;
        for (i, chunk) in buf.chunks(self.chunk as usize).enumerate().take(n as usize) {
            let slot = first + i as u64;
            if let Some(want) = self.get(dev, slot) {
                let got = crc32c::crc32c(chunk);
                if got == want {
                    // Read right this time (a flip on an earlier read's way): good again.
                    self.unmark_bad(dev, slot);
                } else {
                    ok = false;
                    self.errors.fetch_add(1, Relaxed);
                    tracing::warn!(
                        dev,
                        slot,
                        want,
                        got,
                        "chunk checksum mismatch: treated as an erasure"
                    );
                    self.mark_bad(dev, slot);
                }
            }
        }
        ok
    }

    /// Record what a write of `buf` at `off` on `dev` did to its slots' checksums: whole chunks get
    /// theirs (or are forgotten when checksums are off), a partial chunk is forgotten; every slot
    /// written is no longer bad.
    #[cfg(test)]
    pub fn wrote(&self, dev: usize, off: u64, buf: &[u8]) {
        let mut changes = Vec::new();
        self.wrote_into(dev, off, buf, &mut changes);
        self.queue(changes);
    }

    /// [`ChunkCrcs::wrote`], the changes appended to `changes` for one [`ChunkCrcs::queue`] per
    /// batch of writes.
    pub fn wrote_into(&self, dev: usize, off: u64, buf: &[u8], changes: &mut Vec<CrcChange>) {
        let Some((first, n, whole)) = self.slots_of(dev, off, buf.len()) else {
            return;
        };
        let on = self.enabled();
        for i in 0..n {
            let slot = first + i;
            let crc = match whole && on {
                true => {
                    let c = self.chunk as usize;
                    Some(crc32c::crc32c(&buf[i as usize * c..(i as usize + 1) * c]))
                }
                false => None,
            };
            if crc.is_none() && self.get(dev, slot).is_none() {
                continue;
            }
            self.store(dev, slot, crc);
            changes.push((dev as u16, slot, crc));
        }
        if self.any_bad.load(Relaxed) {
            let mut bad = self.bad.lock().unwrap_or_else(|p| p.into_inner());
            for i in 0..n {
                bad.remove(&(dev, first + i));
            }
        }
    }

    /// Queue checksum changes for the next metadata sync.
    pub fn queue(&self, changes: Vec<CrcChange>) {
        if !changes.is_empty() {
            self.changes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(changes);
        }
    }

    /// Forget a slot's checksum (queued like a write's change): its bytes are trusted as they are
    /// until [`ChunkCrcs::learn`] or a write.
    pub fn forget(&self, dev: usize, slot: u64) {
        if self.in_range(dev, slot) && self.get(dev, slot).is_some() {
            self.store(dev, slot, None);
            self.changes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((dev as u16, slot, None));
        }
    }

    /// Take the bytes of a slot whose checksum is not known as its content (a resync that trusts
    /// the data it reads, as its parity does). A known checksum is left as it is.
    pub fn learn(&self, dev: usize, slot: u64, buf: &[u8]) {
        if self.enabled() && self.in_range(dev, slot) && self.get(dev, slot).is_none() {
            debug_assert_eq!(buf.len() as u64, self.chunk);
            let crc = crc32c::crc32c(buf);
            self.store(dev, slot, Some(crc));
            self.changes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((dev as u16, slot, Some(crc)));
        }
    }

    /// The changes since the last call, coalesced into runs of consecutive slots per device (the
    /// last change of a slot wins): `(dev, first slot, checksums)`, `None` runs forget.
    pub fn take_changes(&self) -> Vec<(u16, u64, Vec<Option<u32>>)> {
        let mut ch = std::mem::take(&mut *self.changes.lock().unwrap_or_else(|p| p.into_inner()));
        if ch.is_empty() {
            return Vec::new();
        }
        // Stable sort by (dev, slot), then keep the last change of each slot.
        ch.sort_by_key(|&(d, s, _)| (d, s));
        let mut last: Vec<CrcChange> = Vec::with_capacity(ch.len());
        for c in ch {
            match last.last_mut() {
                Some(l) if l.0 == c.0 && l.1 == c.1 => *l = c,
                _ => last.push(c),
            }
        }
        let mut runs: Vec<(u16, u64, Vec<Option<u32>>)> = Vec::new();
        for (d, s, c) in last {
            match runs.last_mut() {
                Some(r)
                    if r.0 == d
                        && r.1 + r.2.len() as u64 == s
                        && r.2[0].is_some() == c.is_some()
                        && r.2.len() < u16::MAX as usize =>
                {
                    r.2.push(c)
                }
                _ => runs.push((d, s, vec![c])),
            }
        }
        runs
    }

    /// Drop the queued changes (a full checkpoint holds the whole table).
    pub fn clear_changes(&self) {
        self.changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    pub fn mark_bad(&self, dev: usize, slot: u64) {
        self.bad
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((dev, slot));
        self.any_bad.store(true, Relaxed);
    }

    /// Clear the bad mark of a chunk (to read it again); true if it had one.
    pub fn unmark_bad(&self, dev: usize, slot: u64) -> bool {
        self.any_bad.load(Relaxed)
            && self
                .bad
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&(dev, slot))
    }

    /// Whether the chunk at `slot` of `dev` failed its check and was not written since.
    pub fn is_bad(&self, dev: usize, slot: u64) -> bool {
        self.any_bad.load(Relaxed)
            && self
                .bad
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&(dev, slot))
    }

    /// Forget the bad chunks of a device (it was replaced or rebuilt).
    pub fn clear_bad_of(&self, dev: usize) {
        self.bad
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&(d, _)| d != dev);
    }

    pub fn bad_count(&self) -> usize {
        self.bad.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_set_reads_verify_and_changes_coalesce() {
        let t = ChunkCrcs::new(512, 4096, vec![10, 10]);
        let a = vec![7u8; 1024];
        t.wrote(1, 4096 + 512, &a);
        assert_eq!(t.get(1, 1), Some(crc32c::crc32c(&a[..512])));
        assert_eq!(t.get(1, 2), Some(crc32c::crc32c(&a[..512])));
        assert!(t.verify(1, 4096 + 512, &a));
        let mut b = a.clone();
        b[600] ^= 1;
        assert!(!t.verify(1, 4096 + 512, &b));
        assert!(t.is_bad(1, 2) && !t.is_bad(1, 1));
        assert_eq!(t.errors.load(Relaxed), 1);
        // A partial read covers its whole chunk once a checksum is known.
        assert_eq!(t.read_span(1, 4096 + 512 + 100, 10), (4096 + 512, 512));
        assert_eq!(t.read_span(0, 4096 + 100, 10), (4096 + 100, 10));
        t.wrote(1, 4096 + 1024, &b[512..]);
        assert!(!t.is_bad(1, 2));
        t.wrote(1, 4096 + 1024 + 100, &[1u8; 10]);
        assert_eq!(t.get(1, 2), None);
        let runs = t.take_changes();
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert_eq!(runs[0].1, 1);
        assert_eq!(runs[0].2.len(), 1);
        assert_eq!(runs[1], (1, 2, vec![None]));
        assert!(t.take_changes().is_empty());
        assert_eq!(t.deep_clone().known(), t.known());
    }
}
