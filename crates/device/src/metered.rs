//! `Metered`: counts what passes through to the inner device.
//!
//! Reads and writes are counted as operations and bytes, and classified sequential or random: a request
//! is **sequential** when it starts exactly where the previous request (read or write) ended, **random**
//! otherwise; before the first request the "previous end" is offset 0. Flushes and discards (ops and
//! bytes) are counted too, and discards do not move the position. Only requests the inner device
//! completes successfully are counted; failures are counted separately, in `DeviceStats::errors` ([`Metered::errors`]).
//! `snapshot()` / `reset()` make per-phase measurements easy; `DeviceStats` is `serde`-serializable for
//! `--json` output.

use std::sync::Mutex;

use crate::{Batch, BlockDevice, DeviceStats, IoRequest, Result};

#[derive(Debug, Default)]
struct State {
    stats: DeviceStats,
    last_end: u64,
}

/// Counting wrapper around any device.
#[derive(Debug)]
pub struct Metered<D> {
    inner: D,
    state: Mutex<State>,
}

impl<D: BlockDevice> Metered<D> {
    pub fn new(inner: D) -> Self {
        Metered {
            inner,
            state: Mutex::new(State::default()),
        }
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    pub fn into_inner(self) -> D {
        self.inner
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The counters so far (`modeled_ns` and `model` are taken from the inner device).
    pub fn snapshot(&self) -> DeviceStats {
        let mut s = self.lock().stats;
        let inner = self.inner.stats();
        s.modeled_ns = inner.modeled_ns;
        s.model = inner.model;
        s
    }

    /// Zero the counters (the sequential/random position is kept).
    pub fn reset(&self) {
        let mut st = self.lock();
        st.stats = DeviceStats::default();
    }

    /// Requests the inner device failed.
    pub fn errors(&self) -> u64 {
        self.lock().stats.errors
    }

    fn record(&self, write: bool, offset: u64, len: u64) {
        let mut st = self.lock();
        let seq = offset == st.last_end;
        st.last_end = offset + len;
        st.stats.count(write, seq, len);
    }

    fn note<T>(&self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.lock().stats.errors += 1;
        }
        r
    }
}

impl<D: BlockDevice> BlockDevice for Metered<D> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.note(self.inner.read_at(buf, offset))?;
        self.record(false, offset, buf.len() as u64);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.note(self.inner.write_at(buf, offset))?;
        self.record(true, offset, buf.len() as u64);
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        self.note(self.inner.flush())?;
        self.lock().stats.flushes += 1;
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.note(self.inner.discard(offset, len))?;
        let mut st = self.lock();
        st.stats.discards += 1;
        st.stats.discard_bytes += len;
        Ok(())
    }
    fn keeps_data(&self) -> bool {
        self.inner.keeps_data()
    }
    fn backing_paths(&self) -> Vec<std::path::PathBuf> {
        self.inner.backing_paths()
    }
    fn stats(&self) -> DeviceStats {
        self.snapshot()
    }
    /// Forwarded whole (the inner device keeps its fast path); each outcome is counted once the
    /// batch has finished, as `read_at`/`write_at` count them.
    fn submit<'a>(&'a self, reqs: Vec<IoRequest<'a>>, batch: &mut Batch<'a>) {
        let seen: Vec<(usize, bool, u64, u64)> = reqs
            .iter()
            .map(|r| (r.id(), r.is_write(), r.offset, r.len() as u64))
            .collect();
        batch.on_complete(move |results| {
            for (id, write, offset, len) in seen {
                match &results[id] {
                    Ok(()) => self.record(write, offset, len),
                    Err(_) => self.lock().stats.errors += 1,
                }
            }
        });
        self.inner.submit(reqs, batch);
    }
}
