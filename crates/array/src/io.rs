//! Device I/O for the array: per-device counters (sequential vs random), failure tracking, and
//! batches of chunk reads/writes that are merged per device (consecutive offsets become one large
//! request) and issued to different devices in parallel.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use ecstack_device::BlockDevice;

/// Largest merged request.
const MAX_MERGE: u64 = 1 << 20;

/// Counters of one device (or a device class), as the array saw its requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IoCounters {
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
    pub seq_reads: u64,
    pub rand_reads: u64,
    pub seq_writes: u64,
    pub rand_writes: u64,
    pub flushes: u64,
    pub errors: u64,
}

impl IoCounters {
    pub fn add(&mut self, o: &IoCounters) {
        self.read_ops += o.read_ops;
        self.read_bytes += o.read_bytes;
        self.write_ops += o.write_ops;
        self.write_bytes += o.write_bytes;
        self.seq_reads += o.seq_reads;
        self.rand_reads += o.rand_reads;
        self.seq_writes += o.seq_writes;
        self.rand_writes += o.rand_writes;
        self.flushes += o.flushes;
        self.errors += o.errors;
    }
}

#[derive(Debug, Default)]
struct MeterState {
    c: IoCounters,
    last_end: u64,
}

/// A request is sequential when it starts where the previous one on the device ended.
#[derive(Debug, Default)]
pub(crate) struct Meter(Mutex<MeterState>);

impl Meter {
    fn lock(&self) -> std::sync::MutexGuard<'_, MeterState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub fn record(&self, write: bool, off: u64, len: u64) {
        let mut st = self.lock();
        let seq = off == st.last_end;
        st.last_end = off + len;
        let c = &mut st.c;
        if write {
            c.write_ops += 1;
            c.write_bytes += len;
            if seq {
                c.seq_writes += 1
            } else {
                c.rand_writes += 1
            }
        } else {
            c.read_ops += 1;
            c.read_bytes += len;
            if seq {
                c.seq_reads += 1
            } else {
                c.rand_reads += 1
            }
        }
    }
    pub fn flush(&self) {
        self.lock().c.flushes += 1;
    }
    pub fn error(&self) {
        self.lock().c.errors += 1;
    }
    pub fn get(&self) -> IoCounters {
        self.lock().c
    }
    pub fn reset(&self) {
        self.lock().c = IoCounters::default();
    }
}

/// A chunk read: fill `buf` from `off` on device `dev`; `ok` tells whether it succeeded.
pub(crate) struct Rd<'a> {
    pub dev: usize,
    pub off: u64,
    pub buf: &'a mut [u8],
    pub ok: bool,
}

impl<'a> Rd<'a> {
    pub fn new(dev: usize, off: u64, buf: &'a mut [u8]) -> Rd<'a> {
        Rd {
            dev,
            off,
            buf,
            ok: false,
        }
    }
}

/// A chunk write.
pub(crate) struct Wr<'a> {
    pub dev: usize,
    pub off: u64,
    pub buf: &'a [u8],
    pub ok: bool,
}

impl<'a> Wr<'a> {
    pub fn new(dev: usize, off: u64, buf: &'a [u8]) -> Wr<'a> {
        Wr {
            dev,
            off,
            buf,
            ok: false,
        }
    }
}

/// The main and log devices (main 0..n, log n..n+m) with their failure flags and meters.
#[derive(Debug)]
pub(crate) struct Devs {
    devs: RwLock<Vec<Arc<dyn BlockDevice>>>,
    failed: Vec<AtomicBool>,
    pub meters: Vec<Meter>,
    pub parallel: AtomicBool,
    pub failures_seen: AtomicU64,
}

impl Devs {
    pub fn new(devs: Vec<Arc<dyn BlockDevice>>, parallel: bool) -> Devs {
        let n = devs.len();
        Devs {
            devs: RwLock::new(devs),
            failed: (0..n).map(|_| AtomicBool::new(false)).collect(),
            meters: (0..n).map(|_| Meter::default()).collect(),
            parallel: AtomicBool::new(parallel),
            failures_seen: AtomicU64::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.failed.len()
    }

    pub fn get(&self, i: usize) -> Arc<dyn BlockDevice> {
        Arc::clone(&self.devs.read().unwrap_or_else(|p| p.into_inner())[i])
    }

    pub fn all(&self) -> Vec<Arc<dyn BlockDevice>> {
        self.devs.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn replace(&self, i: usize, dev: Arc<dyn BlockDevice>) {
        self.devs.write().unwrap_or_else(|p| p.into_inner())[i] = dev;
        self.failed[i].store(false, Relaxed);
    }

    pub fn is_failed(&self, i: usize) -> bool {
        self.failed[i].load(Relaxed)
    }

    pub fn mark_failed(&self, i: usize) {
        if !self.failed[i].swap(true, Relaxed) {
            self.failures_seen.fetch_add(1, Relaxed);
        }
    }

    pub fn failed_list(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.is_failed(i)).collect()
    }

    pub fn failed_count(&self) -> usize {
        (0..self.len()).filter(|&i| self.is_failed(i)).count()
    }

    fn groups<T>(&self, items: Vec<(usize, T)>) -> Vec<(usize, Vec<T>)> {
        let mut g: Vec<Vec<T>> = (0..self.len()).map(|_| Vec::new()).collect();
        for (d, it) in items {
            g[d].push(it);
        }
        g.into_iter()
            .enumerate()
            .filter(|(_, v)| !v.is_empty())
            .collect()
    }

    /// Run `f` on every device group, in parallel when enabled and there is more than one group.
    fn run<T: Send>(&self, groups: Vec<(usize, Vec<T>)>, f: impl Fn(usize, Vec<T>) + Sync) {
        if groups.len() <= 1 || !self.parallel.load(Relaxed) {
            for (d, g) in groups {
                f(d, g);
            }
            return;
        }
        std::thread::scope(|sc| {
            let mut it = groups.into_iter();
            let first = it.next();
            let f = &f;
            for (d, g) in it {
                sc.spawn(move || f(d, g));
            }
            if let Some((d, g)) = first {
                f(d, g);
            }
        });
    }

    /// Read every op (skipping failed devices); sets `ok`. A device that errors is marked failed.
    pub fn read(&self, ops: &mut [Rd<'_>]) {
        for o in ops.iter_mut() {
            if o.buf.is_empty() {
                o.ok = true;
            }
        }
        let items: Vec<(usize, &mut Rd<'_>)> = ops
            .iter_mut()
            .filter(|o| !o.buf.is_empty())
            .map(|o| (o.dev, o))
            .collect();
        let groups = self.groups(items);
        self.run(groups, |d, mut g| {
            if self.is_failed(d) {
                return;
            }
            let dev = self.get(d);
            g.sort_by_key(|o| o.off);
            let mut i = 0;
            while i < g.len() {
                let mut j = i + 1;
                let mut end = g[i].off + g[i].buf.len() as u64;
                while j < g.len() && g[j].off == end && end - g[i].off < MAX_MERGE {
                    end += g[j].buf.len() as u64;
                    j += 1;
                }
                if self.is_failed(d) {
                    return;
                }
                let start = g[i].off;
                let res = if j == i + 1 {
                    dev.read_at(g[i].buf, start)
                } else {
                    let mut tmp = vec![0u8; (end - start) as usize];
                    let r = dev.read_at(&mut tmp, start);
                    if r.is_ok() {
                        let mut p = 0;
                        for o in &mut g[i..j] {
                            let l = o.buf.len();
                            o.buf.copy_from_slice(&tmp[p..p + l]);
                            p += l;
                        }
                    }
                    r
                };
                match res {
                    Ok(()) => {
                        self.meters[d].record(false, start, end - start);
                        for o in &mut g[i..j] {
                            o.ok = true;
                        }
                    }
                    Err(_) => {
                        self.meters[d].error();
                        self.mark_failed(d);
                        return;
                    }
                }
                i = j;
            }
        });
    }

    /// Write every op (skipping failed devices); sets `ok`. A device that errors is marked failed.
    pub fn write(&self, ops: &mut [Wr<'_>]) {
        let items: Vec<(usize, &mut Wr<'_>)> = ops.iter_mut().map(|o| (o.dev, o)).collect();
        let groups = self.groups(items);
        self.run(groups, |d, mut g| {
            if self.is_failed(d) {
                return;
            }
            let dev = self.get(d);
            g.sort_by_key(|o| o.off);
            let mut i = 0;
            while i < g.len() {
                let mut j = i + 1;
                let mut end = g[i].off + g[i].buf.len() as u64;
                while j < g.len() && g[j].off == end && end - g[i].off < MAX_MERGE {
                    end += g[j].buf.len() as u64;
                    j += 1;
                }
                if self.is_failed(d) {
                    return;
                }
                let start = g[i].off;
                let res = if j == i + 1 {
                    dev.write_at(g[i].buf, start)
                } else {
                    let mut tmp = Vec::with_capacity((end - start) as usize);
                    for o in &g[i..j] {
                        tmp.extend_from_slice(o.buf);
                    }
                    dev.write_at(&tmp, start)
                };
                match res {
                    Ok(()) => {
                        self.meters[d].record(true, start, end - start);
                        for o in &mut g[i..j] {
                            o.ok = true;
                        }
                    }
                    Err(_) => {
                        self.meters[d].error();
                        self.mark_failed(d);
                        return;
                    }
                }
                i = j;
            }
        });
    }

    /// Flush every alive device (in parallel); a device whose flush fails is marked failed.
    pub fn flush_all(&self) {
        let groups: Vec<(usize, Vec<()>)> = (0..self.len())
            .filter(|&i| !self.is_failed(i))
            .map(|i| (i, vec![()]))
            .collect();
        self.run(groups, |d, _| {
            if self.get(d).flush().is_ok() {
                self.meters[d].flush();
            } else {
                self.meters[d].error();
                self.mark_failed(d);
            }
        });
    }

    /// Write directly to a device that is not (yet) part of the array, metered as device `d`.
    pub fn write_to(
        &self,
        d: usize,
        dev: &dyn BlockDevice,
        buf: &[u8],
        off: u64,
    ) -> crate::Result<()> {
        dev.write_at(buf, off)?;
        self.meters[d].record(true, off, buf.len() as u64);
        Ok(())
    }
}
