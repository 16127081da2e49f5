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
//! A slot whose checksum is not known (never written, written by a build before checksums,
//! forgotten after a crash in a write-intent region) is read unverified. A slot whose chunk failed
//! its check is *bad* until it is written again: the read paths treat it as an erasure (like a chunk
//! of a failed device), decode it from the rest of its stripe and write it back.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

/// Slots per page of the table.
const PAGE_SLOTS: u64 = 4096;
/// Set in a slot's word when its checksum is known.
const KNOWN: u64 = 1 << 32;

/// A change of one slot's checksum: `Some(crc)` set, `None` forgotten.
pub(crate) type CrcChange = (u16, u64, Option<u32>);

type Page = Box<[AtomicU64]>;

/// The checksum table of an array's main and log devices (main `0..n`, log `n..n+m`).
pub(crate) struct ChunkCrcs {
    chunk: u64,
    data_start: u64,
    /// Slots per device.
    slots: Vec<u64>,
    pages: Vec<Vec<OnceLock<Page>>>,
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
        ChunkCrcs {
            chunk,
            data_start,
            slots,
            pages,
            changes: Mutex::new(Vec::new()),
            bad: Mutex::new(HashSet::new()),
            any_bad: AtomicBool::new(false),
            enabled: AtomicBool::new(true),
            errors: AtomicU64::new(0),
            repaired: AtomicU64::new(0),
        }
    }

    /// A table of the same shape with the same known checksums (nothing queued, nothing bad).
    pub fn deep_clone(&self) -> ChunkCrcs {
        let t = ChunkCrcs::new(self.chunk, self.data_start, self.slots.clone());
        for (d, s, c) in self.known() {
            t.store(d, s, Some(c));
        }
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
