//! `MemDevice`: a device held in memory (a zero-filled `Vec<u8>`; the kernel gives zero pages lazily).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::RwLock;

use crate::{check_range, BasicCounters, BlockDevice, DeviceError, DeviceStats, Result};

/// An in-memory block device. Reads run in parallel; writes take an exclusive lock.
#[derive(Debug)]
pub struct MemDevice {
    name: String,
    data: RwLock<Vec<u8>>,
    /// Grows by one with every write and discard, under the write lock (so a reader holding the
    /// read lock sees the generation of the bytes it reads): [`BlockDevice::read_with`].
    generation: AtomicU64,
    capacity: u64,
    counters: BasicCounters,
}

impl MemDevice {
    /// A zero-filled device of `capacity` bytes.
    pub fn new(capacity: u64) -> Result<Self> {
        Self::with_name(format!("mem:{capacity}"), capacity)
    }

    pub fn with_name(name: impl Into<String>, capacity: u64) -> Result<Self> {
        let name = name.into();
        let len = usize::try_from(capacity).map_err(|_| {
            DeviceError::other(&name, format!("capacity {capacity} does not fit in memory"))
        })?;
        // Check that the allocation can succeed (a clear error instead of an abort), then allocate
        // zeroed memory: `vec![0; len]` asks the allocator for zeroed pages, which the kernel hands
        // out lazily, where `resize` would write every byte (a 1 GiB device: 262,144 page faults
        // and a memset up front).
        let mut probe: Vec<u8> = Vec::new();
        probe
            .try_reserve_exact(len)
            .map_err(|_| DeviceError::other(&name, format!("cannot allocate {capacity} bytes")))?;
        drop(probe);
        let data = vec![0u8; len];
        Ok(MemDevice {
            name,
            data: RwLock::new(data),
            generation: AtomicU64::new(0),
            capacity,
            counters: BasicCounters::default(),
        })
    }

    /// Touch every page now (the memory is otherwise committed lazily, on first write), so that
    /// timed runs do not pay the kernel's page faults on first writes, which a real device does
    /// not have. Returns the device for chaining.
    pub fn prefaulted(self) -> Self {
        if let Ok(mut d) = self.data.write() {
            // Writing zeros over zeros: the content is unchanged, every page is now resident.
            d.fill(0);
        }
        self
    }

    fn lock_err(&self) -> DeviceError {
        DeviceError::other(&self.name, "internal lock poisoned by a panicking thread")
    }
}

impl BlockDevice for MemDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn capacity(&self) -> u64 {
        self.capacity
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(&self.name, offset, buf.len() as u64, self.capacity)?;
        let data = self.data.read().map_err(|_| self.lock_err())?;
        let o = offset as usize;
        buf.copy_from_slice(&data[o..o + buf.len()]);
        self.counters.read(buf.len() as u64);
        Ok(())
    }
    /// The bytes where they lie, under the read lock (no copy into `scratch`), with the write
    /// generation: the bytes are private to this device, so they change only by a write or a
    /// discard, and each takes the write lock and grows the generation.
    fn read_with(
        &self,
        offset: u64,
        scratch: &mut [u8],
        f: &mut dyn FnMut(&[u8], Option<u64>),
    ) -> Result<()> {
        let len = scratch.len();
        check_range(&self.name, offset, len as u64, self.capacity)?;
        let data = self.data.read().map_err(|_| self.lock_err())?;
        let o = offset as usize;
        f(&data[o..o + len], Some(self.generation.load(Relaxed)));
        self.counters.read(len as u64);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_range(&self.name, offset, buf.len() as u64, self.capacity)?;
        let mut data = self.data.write().map_err(|_| self.lock_err())?;
        let o = offset as usize;
        data[o..o + buf.len()].copy_from_slice(buf);
        self.generation.fetch_add(1, Relaxed);
        self.counters.write(buf.len() as u64);
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        self.counters.flush();
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        check_range(&self.name, offset, len, self.capacity)?;
        let mut data = self.data.write().map_err(|_| self.lock_err())?;
        let o = offset as usize;
        data[o..o + len as usize].fill(0);
        self.generation.fetch_add(1, Relaxed);
        self.counters.discard(len);
        Ok(())
    }
    fn stats(&self) -> DeviceStats {
        self.counters.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_discard_and_range() {
        let d = MemDevice::new(4096).unwrap();
        d.write_at(b"hello", 100).unwrap();
        let mut b = [0u8; 5];
        d.read_at(&mut b, 100).unwrap();
        assert_eq!(&b, b"hello");
        d.discard(100, 5).unwrap();
        d.read_at(&mut b, 100).unwrap();
        assert_eq!(b, [0; 5]);
        assert!(matches!(
            d.write_at(b"x", 4096),
            Err(DeviceError::OutOfRange { .. })
        ));
        assert!(d.read_at(&mut b, u64::MAX - 1).is_err());
    }

    /// `read_with` shows the device's bytes without filling the scratch buffer, counts one read,
    /// and refuses a range beyond the capacity without calling `f`; through an `Arc` too. The
    /// generation it shows changes with every write and discard (anywhere on the device) and
    /// with nothing else.
    #[test]
    fn read_with_shows_the_bytes_in_place_and_their_generation() {
        let d = std::sync::Arc::new(MemDevice::new(8192).unwrap());
        d.write_at(b"in place", 4000).unwrap();
        let mut scratch = vec![0xAAu8; 8];
        let mut seen = Vec::new();
        let mut generation = |d: &MemDevice, seen: &mut Vec<u8>| {
            let mut g = None;
            d.read_with(4000, &mut scratch, &mut |b, gen| {
                seen.clear();
                seen.extend_from_slice(b);
                g = gen;
            })
            .unwrap();
            g.expect("a memory device gives its generation")
        };
        let g0 = generation(&d, &mut seen);
        assert_eq!(seen, b"in place");
        assert_eq!(generation(&d, &mut seen), g0, "reads leave it");
        d.write_at(b"x", 0).unwrap();
        let g1 = generation(&d, &mut seen);
        assert_ne!(g1, g0, "a write elsewhere changes it");
        d.discard(0, 1).unwrap();
        assert_ne!(generation(&d, &mut seen), g1, "so does a discard");
        assert_eq!(scratch, [0xAA; 8], "scratch untouched");
        assert_eq!(d.stats().read_ops, 4);
        let mut called = false;
        let mut big = vec![0u8; 16];
        assert!(matches!(
            d.read_with(8180, &mut big, &mut |_, _| called = true),
            Err(DeviceError::OutOfRange { .. })
        ));
        assert!(!called);
    }
}
