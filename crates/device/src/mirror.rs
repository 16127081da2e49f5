//! `Mirror`: RAID-1 over two or more legs, for small volumes that must survive a device failure
//! (EPLOG §3.5 keeps its metadata volume on a RAID-10 of the SSDs' metadata partitions).
//!
//! Layout: the first [`HEADER`] bytes of every leg hold a checksummed header (magic, mirror id, leg
//! index, legs, generation); the mirror's capacity is the smallest leg minus the header. Writes,
//! flushes and discards go to every in-sync leg; reads come from the first in-sync leg and move on to
//! the next when one fails. A leg that fails is taken out, and the generation in the headers of the
//! legs still in sync is raised (and flushed) before the failed request returns, so a leg that was
//! out never passes for current: on open, only the legs with the newest generation are in sync.
//! Stale legs, and new blank ones, are resynchronized by copying from an in-sync leg when
//! [`Mirror::open`] runs (or [`Mirror::resync`]).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::{BlockDevice, DeviceError, DeviceStats, Result};

/// Bytes reserved at the start of every leg for its header.
pub const HEADER: u64 = 4096;
const MAGIC: &[u8; 8] = b"ECMIRROR";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    id: u64,
    leg: u32,
    legs: u32,
    generation: u64,
}

impl Header {
    fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER as usize];
        b[..8].copy_from_slice(MAGIC);
        b[8..16].copy_from_slice(&self.id.to_le_bytes());
        b[16..20].copy_from_slice(&self.leg.to_le_bytes());
        b[20..24].copy_from_slice(&self.legs.to_le_bytes());
        b[24..32].copy_from_slice(&self.generation.to_le_bytes());
        let c = crc(&b[..32]);
        b[32..36].copy_from_slice(&c.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Header> {
        if b.len() < 36 || &b[..8] != MAGIC {
            return None;
        }
        let c = u32::from_le_bytes(b[32..36].try_into().ok()?);
        if c != crc(&b[..32]) {
            return None;
        }
        Some(Header {
            id: u64::from_le_bytes(b[8..16].try_into().ok()?),
            leg: u32::from_le_bytes(b[16..20].try_into().ok()?),
            legs: u32::from_le_bytes(b[20..24].try_into().ok()?),
            generation: u64::from_le_bytes(b[24..32].try_into().ok()?),
        })
    }
}

/// CRC-32 (IEEE) of a header.
fn crc(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// What [`Mirror::open`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorReport {
    /// Legs that were current.
    pub in_sync: Vec<usize>,
    /// Legs copied from a current one (stale, blank or foreign headers).
    pub resynced: Vec<usize>,
    /// Legs left out because they could not be read or written.
    pub failed: Vec<usize>,
}

/// RAID-1 over `legs` (see the module docs).
#[derive(Debug)]
pub struct Mirror {
    name: String,
    legs: Vec<Arc<dyn BlockDevice>>,
    in_sync: Vec<AtomicBool>,
    capacity: u64,
    /// The header state; held while the generation changes.
    head: Mutex<Header>,
}

impl Mirror {
    /// Open a mirror over `legs`: legs with the newest valid header are in sync; any other leg (older
    /// generation, blank, another mirror's) is overwritten from an in-sync one. Legs that are all
    /// blank make a new mirror, with a random id.
    pub fn open(legs: Vec<Arc<dyn BlockDevice>>) -> Result<(Mirror, MirrorReport)> {
        Self::open_with_id(legs, ecstack_base::random_id() | 1)
    }

    /// [`Mirror::open`], giving a new mirror the id `new_id` (a mirror found on the legs keeps its
    /// own): deterministic tests pass a fixed one so a seed writes the same bytes on every run.
    pub fn open_with_id(
        legs: Vec<Arc<dyn BlockDevice>>,
        new_id: u64,
    ) -> Result<(Mirror, MirrorReport)> {
        let name = format!(
            "mirror({})",
            legs.iter().map(|l| l.name()).collect::<Vec<_>>().join(", ")
        );
        if legs.len() < 2 {
            return Err(DeviceError::other(
                &name,
                "a mirror needs at least two legs",
            ));
        }
        let cap = legs.iter().map(|l| l.capacity()).min().unwrap_or(0);
        if cap <= HEADER {
            return Err(DeviceError::other(
                &name,
                format!("every leg must hold more than the {HEADER}-byte header"),
            ));
        }
        let mut heads = Vec::new();
        for l in &legs {
            let mut b = vec![0u8; HEADER as usize];
            heads.push(l.read_at(&mut b, 0).ok().map(|()| Header::decode(&b)));
        }
        // The newest generation among valid headers of this mirror (the id of the newest one).
        let best = heads
            .iter()
            .flatten()
            .flatten()
            .max_by_key(|h| h.generation)
            .copied();
        let (id, generation) = match best {
            Some(h) => (h.id, h.generation),
            None => (new_id, 0),
        };
        let mut report = MirrorReport::default();
        let in_sync: Vec<AtomicBool> = heads
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let ok = best.is_some()
                    && matches!(h, Some(Some(h)) if h.id == id && h.generation == generation);
                if ok {
                    report.in_sync.push(i);
                }
                AtomicBool::new(ok)
            })
            .collect();
        let m = Mirror {
            name,
            in_sync,
            capacity: cap - HEADER,
            head: Mutex::new(Header {
                id,
                leg: 0,
                legs: legs.len() as u32,
                generation,
            }),
            legs,
        };
        if best.is_none() {
            // A new mirror: every leg gets a header (the data area is all the same: unwritten).
            for i in 0..m.legs.len() {
                if m.write_header(i, generation).is_ok() {
                    m.in_sync[i].store(true, Relaxed);
                    report.in_sync.push(i);
                } else {
                    report.failed.push(i);
                }
            }
        } else {
            let r = m.resync()?;
            report.resynced = r.resynced;
            report.failed = r.failed;
        }
        if m.live().is_empty() {
            return Err(DeviceError::other(&m.name, "no leg could be opened"));
        }
        Ok((m, report))
    }

    fn live(&self) -> Vec<usize> {
        (0..self.legs.len())
            .filter(|&i| self.in_sync[i].load(Relaxed))
            .collect()
    }

    /// Legs currently in sync.
    pub fn in_sync_legs(&self) -> Vec<usize> {
        self.live()
    }

    fn write_header(&self, leg: usize, generation: u64) -> Result<()> {
        let h = {
            let head = self.head.lock().unwrap_or_else(|p| p.into_inner());
            Header {
                leg: leg as u32,
                generation,
                ..*head
            }
        };
        self.legs[leg].write_at(&h.encode(), 0)?;
        self.legs[leg].flush()
    }

    /// Copy every out-of-sync leg from an in-sync one, then give it the current header.
    pub fn resync(&self) -> Result<MirrorReport> {
        let mut report = MirrorReport::default();
        let src = *self
            .live()
            .first()
            .ok_or_else(|| DeviceError::other(&self.name, "no leg in sync to copy from"))?;
        let generation = self
            .head
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .generation;
        let mut buf = vec![0u8; 1 << 20];
        for dst in 0..self.legs.len() {
            if self.in_sync[dst].load(Relaxed) {
                continue;
            }
            let mut off = 0u64;
            let mut ok = true;
            while off < self.capacity {
                let len = (self.capacity - off).min(buf.len() as u64) as usize;
                self.legs[src].read_at(&mut buf[..len], HEADER + off)?;
                if self.legs[dst].write_at(&buf[..len], HEADER + off).is_err() {
                    ok = false;
                    break;
                }
                off += len as u64;
            }
            if ok && self.legs[dst].flush().is_ok() && self.write_header(dst, generation).is_ok() {
                self.in_sync[dst].store(true, Relaxed);
                report.resynced.push(dst);
            } else {
                report.failed.push(dst);
            }
        }
        report.in_sync = self.live();
        Ok(report)
    }

    /// Take `leg` out and raise the generation on the legs still in sync, so the leg never passes
    /// for current again. Fails when no leg is left.
    fn drop_leg(&self, leg: usize, why: &DeviceError) -> Result<()> {
        if !self.in_sync[leg].swap(false, Relaxed) {
            return self.check_alive(why);
        }
        let generation = {
            let mut head = self.head.lock().unwrap_or_else(|p| p.into_inner());
            head.generation += 1;
            head.generation
        };
        for i in self.live() {
            if let Err(e) = self.write_header(i, generation) {
                self.in_sync[i].store(false, Relaxed);
                let _ = e;
            }
        }
        self.check_alive(why)
    }

    fn check_alive(&self, why: &DeviceError) -> Result<()> {
        if self.live().is_empty() {
            Err(DeviceError::other(
                &self.name,
                format!("every leg has failed (last: {why})"),
            ))
        } else {
            Ok(())
        }
    }

    fn on_all(&self, f: impl Fn(&dyn BlockDevice) -> Result<()>) -> Result<()> {
        for i in self.live() {
            if let Err(e) = f(self.legs[i].as_ref()) {
                self.drop_leg(i, &e)?;
            }
        }
        self.check_alive(&DeviceError::other(&self.name, "no leg in sync"))
    }
}

impl BlockDevice for Mirror {
    fn name(&self) -> &str {
        &self.name
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        crate::check_range(&self.name, offset, buf.len() as u64, self.capacity)?;
        let mut last = None;
        for i in self.live() {
            match self.legs[i].read_at(buf, HEADER + offset) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    self.drop_leg(i, &e)?;
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| DeviceError::other(&self.name, "no leg in sync")))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        crate::check_range(&self.name, offset, buf.len() as u64, self.capacity)?;
        self.on_all(|d| d.write_at(buf, HEADER + offset))
    }

    fn flush(&self) -> Result<()> {
        self.on_all(|d| d.flush())
    }

    /// Reads come from any live leg, so the mirror keeps data only if every leg does.
    fn keeps_data(&self) -> bool {
        self.legs.iter().all(|l| l.keeps_data())
    }
    fn backing_paths(&self) -> Vec<std::path::PathBuf> {
        self.legs.iter().flat_map(|l| l.backing_paths()).collect()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        crate::check_range(&self.name, offset, len, self.capacity)?;
        self.on_all(|d| d.discard(HEADER + offset, len))
    }

    fn stats(&self) -> DeviceStats {
        // The mirror's own traffic is what its first leg saw; it models no device of its own.
        DeviceStats {
            model: None,
            ..self.legs[0].stats()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FaultConfig, Faulty, MemDevice};

    fn mem(n: u64) -> Arc<dyn BlockDevice> {
        Arc::new(MemDevice::new(n).unwrap())
    }

    #[test]
    fn writes_reach_every_leg_and_a_failed_leg_is_resynced_on_open() {
        let a = mem(1 << 20);
        let b: Arc<Faulty<MemDevice>> = Arc::new(Faulty::new(
            MemDevice::new(1 << 20).unwrap(),
            FaultConfig::default(),
        ));
        let bd: Arc<dyn BlockDevice> = b.clone();
        let (m, r) = Mirror::open(vec![a.clone(), bd.clone()]).unwrap();
        assert_eq!(r.in_sync, vec![0, 1]);
        assert_eq!(m.capacity(), (1 << 20) - HEADER);
        m.write_at(&[1u8; 8192], 0).unwrap();
        let mut x = vec![0u8; 8192];
        bd.read_at(&mut x, HEADER).unwrap();
        assert_eq!(x, vec![1u8; 8192], "leg 1 holds the write");
        // Leg 1 fails: writes go on to leg 0 alone.
        b.fail_now();
        m.write_at(&[2u8; 4096], 0).unwrap();
        assert_eq!(m.in_sync_legs(), vec![0]);
        drop(m);
        // Leg 1 comes back with old data: it must not be trusted, and is resynced.
        b.repair();
        let (m, r) = Mirror::open(vec![bd.clone(), a.clone()]).unwrap();
        assert_eq!(r.in_sync, vec![1]);
        assert_eq!(r.resynced, vec![0]);
        m.read_at(&mut x[..4096], 0).unwrap();
        assert_eq!(x[..4096], [2u8; 4096]);
        bd.read_at(&mut x[..4096], HEADER).unwrap();
        assert_eq!(x[..4096], [2u8; 4096], "the stale leg was copied");
        // Reads move on when the first leg fails.
        b.fail_now();
        m.read_at(&mut x[..4096], 0).unwrap();
        assert_eq!(x[..4096], [2u8; 4096]);
    }

    #[test]
    fn all_legs_failed_is_an_error_and_bad_setups_are_refused() {
        let f: Arc<Faulty<MemDevice>> = Arc::new(Faulty::new(
            MemDevice::new(1 << 16).unwrap(),
            FaultConfig::default(),
        ));
        let g: Arc<Faulty<MemDevice>> = Arc::new(Faulty::new(
            MemDevice::new(1 << 16).unwrap(),
            FaultConfig::default(),
        ));
        let (m, _) = Mirror::open(vec![f.clone(), g.clone()]).unwrap();
        f.fail_now();
        g.fail_now();
        assert!(m.write_at(&[0u8; 512], 0).is_err());
        assert!(Mirror::open(vec![mem(1 << 16)]).is_err());
        assert!(Mirror::open(vec![mem(4096), mem(1 << 16)]).is_err());
    }
}
