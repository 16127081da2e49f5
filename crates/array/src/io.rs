//! Device I/O for the array: per-device counters (sequential vs random), failure tracking, and
//! batches of chunk reads/writes that are merged per device (consecutive offsets become one large
//! request) and issued to different devices in parallel.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Instant;

use ecstack_device::uring::{self, UringOp};
use ecstack_device::{AlignedBuf, BlockDevice};

/// Largest merged request.
const MAX_MERGE: u64 = 1 << 20;

/// Counters of one device (or a device class), as the array saw its requests (merged requests
/// count once; failed ones in `errors`).
pub type IoCounters = ecstack_device::DeviceStats;

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
        st.c.count(write, seq, len);
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

type Job = Box<dyn FnOnce() + Send + 'static>;
type Task<R> = Box<dyn FnOnce(&dyn BlockDevice) -> R + Send + 'static>;

/// The data of a merged read: from a worker (plain) or from io_uring (aligned for O_DIRECT).
enum RunBuf {
    Plain(Vec<u8>),
    Aligned(AlignedBuf),
}

impl RunBuf {
    fn as_slice(&self) -> &[u8] {
        match self {
            RunBuf::Plain(v) => v,
            RunBuf::Aligned(b) => b.as_slice(),
        }
    }
}

/// A merged run of consecutive ops on one device.
struct Run {
    off: u64,
    len: usize,
    ops: Vec<usize>,
}

/// Results of one `exec`: the caller sleeps once, until the last task has answered (one wake-up per
/// batch instead of one per device).
struct Latch<R> {
    st: Mutex<(usize, Vec<Option<R>>)>,
    cv: Condvar,
}

impl<R> Latch<R> {
    fn new(n: usize) -> Self {
        Latch {
            st: Mutex::new((n, (0..n).map(|_| None).collect())),
            cv: Condvar::new(),
        }
    }

    fn put(&self, i: usize, r: Option<R>) {
        let mut st = self.st.lock().unwrap_or_else(|p| p.into_inner());
        st.1[i] = r;
        st.0 -= 1;
        if st.0 == 0 {
            self.cv.notify_one();
        }
    }

    fn wait(&self) -> Vec<Option<R>> {
        let mut st = self.st.lock().unwrap_or_else(|p| p.into_inner());
        while st.0 > 0 {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        std::mem::take(&mut st.1)
    }
}

/// A task's answer: delivered when dropped, so a panicking task still counts down (with no value).
struct Slot<R> {
    latch: Arc<Latch<R>>,
    i: usize,
    val: Option<R>,
}

impl<R> Slot<R> {
    fn answer(mut self, r: R) {
        self.val = Some(r);
    }
}

impl<R> Drop for Slot<R> {
    fn drop(&mut self) {
        self.latch.put(self.i, self.val.take());
    }
}

/// Worker threads per device (jobs own their buffers, so no borrowed data crosses threads).
const WORKERS_PER_DEVICE: usize = 2;

/// The job queue of one device, shared by its workers. Workers sleep on the condition variable, so
/// a job wakes exactly one of them (with a receiver behind a mutex, handing the mutex over woke the
/// device's second worker for every job: an extra context switch per device request).
#[derive(Default)]
struct Queue {
    st: Mutex<QueueState>,
    cv: Condvar,
}

#[derive(Default)]
struct QueueState {
    jobs: VecDeque<Job>,
    closed: bool,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next job, or `None` once the pool is closed and the queue drained.
    fn next(&self) -> Option<Job> {
        let mut st = self.lock();
        loop {
            if let Some(j) = st.jobs.pop_front() {
                return Some(j);
            }
            if st.closed {
                return None;
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn close(&self) {
        self.lock().closed = true;
        self.cv.notify_all();
    }
}

struct Pool {
    queues: Vec<Arc<Queue>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pool({} devices)", self.queues.len())
    }
}

impl Pool {
    fn new(devices: usize) -> Pool {
        let mut queues = Vec::with_capacity(devices);
        for d in 0..devices {
            let q = Arc::new(Queue::default());
            let mut spawned = 0;
            for w in 0..WORKERS_PER_DEVICE {
                let q = Arc::clone(&q);
                let r = std::thread::Builder::new()
                    .name(format!("array-io-{d}.{w}"))
                    .spawn(move || {
                        while let Some(job) = q.next() {
                            // A panicking job drops its result sender, which the caller notices;
                            // the worker stays.
                            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                        }
                    });
                if r.is_ok() {
                    spawned += 1;
                }
            }
            if spawned == 0 {
                // No worker: submit() refuses, the caller runs the jobs itself.
                q.close();
            }
            queues.push(q);
        }
        Pool { queues }
    }

    /// Queue a job for device `d`'s workers; gives the job back if they are gone.
    fn submit(&self, d: usize, job: Job) -> std::result::Result<(), Job> {
        let q = &self.queues[d];
        {
            let mut st = q.lock();
            if st.closed {
                return Err(job);
            }
            st.jobs.push_back(job);
        }
        q.cv.notify_one();
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for q in &self.queues {
            q.close();
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
    pool: Pool,
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
            pool: Pool::new(n),
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

    /// Run one task per device: the first on the calling thread, the others on the device workers
    /// (in parallel), or all inline when parallel I/O is off. Results come back in task order.
    fn exec<R: Send + 'static>(&self, tasks: Vec<(usize, Task<R>)>) -> Vec<R> {
        if tasks.len() <= 1 || !self.parallel.load(Relaxed) {
            return tasks
                .into_iter()
                .map(|(d, t)| t(self.get(d).as_ref()))
                .collect();
        }
        let latch = Arc::new(Latch::<R>::new(tasks.len()));
        let mut it = tasks.into_iter().enumerate();
        let first = it.next();
        let mut inline = Vec::new();
        for (i, (d, t)) in it {
            let dev = self.get(d);
            let slot = Slot {
                latch: Arc::clone(&latch),
                i,
                val: None,
            };
            let job: Job = Box::new(move || slot.answer(t(dev.as_ref())));
            if let Err(job) = self.pool.submit(d, job) {
                inline.push(job);
            }
        }
        if let Some((i, (d, t))) = first {
            let r = t(self.get(d).as_ref());
            latch.put(i, Some(r));
        }
        for job in inline {
            job();
        }
        latch
            .wait()
            .into_iter()
            .map(|r| r.expect("every task answers"))
            .collect()
    }

    /// Sorted, merged runs per alive device: (device, [(offset, length, op indices)]).
    fn plan<T>(
        &self,
        ops: &[T],
        key: impl Fn(&T) -> (usize, u64, usize),
    ) -> Vec<(usize, Vec<Run>)> {
        let mut by_dev: Vec<Vec<usize>> = vec![Vec::new(); self.len()];
        for (i, o) in ops.iter().enumerate() {
            let (d, _, len) = key(o);
            if len > 0 && !self.is_failed(d) {
                by_dev[d].push(i);
            }
        }
        let mut plans = Vec::new();
        for (d, mut idx) in by_dev.into_iter().enumerate() {
            if idx.is_empty() {
                continue;
            }
            idx.sort_by_key(|&i| key(&ops[i]).1);
            let mut runs: Vec<Run> = Vec::new();
            for i in idx {
                let (_, off, len) = key(&ops[i]);
                match runs.last_mut() {
                    Some(r) if r.off + r.len as u64 == off && (r.len as u64) < MAX_MERGE => {
                        r.len += len;
                        r.ops.push(i);
                    }
                    _ => runs.push(Run {
                        off,
                        len,
                        ops: vec![i],
                    }),
                }
            }
            plans.push((d, runs));
        }
        plans
    }

    /// Read every op (skipping failed devices); sets `ok`. A device that errors is marked failed.
    #[allow(clippy::type_complexity)]
    pub fn read(&self, ops: &mut [Rd<'_>]) {
        for o in ops.iter_mut() {
            if o.buf.is_empty() {
                o.ok = true;
            }
        }
        let plans = self.plan(ops, |o| (o.dev, o.off, o.buf.len()));
        let results = match self.uring_read(&plans) {
            Some(r) => r,
            None => match self.paced_read(&plans) {
                Some(r) => r,
                None => self.read_threads(&plans),
            },
        };
        for ((d, runs), res) in plans.into_iter().zip(results) {
            for (r, data) in runs.into_iter().zip(res) {
                match data {
                    Some(b) => {
                        let b = b.as_slice();
                        self.meters[d].record(false, r.off, r.len as u64);
                        let mut p = 0;
                        for i in r.ops {
                            let l = ops[i].buf.len();
                            ops[i].buf.copy_from_slice(&b[p..p + l]);
                            ops[i].ok = true;
                            p += l;
                        }
                    }
                    None => {
                        self.meters[d].error();
                        self.mark_failed(d);
                    }
                }
            }
        }
    }

    /// The devices of `plans` when every one of them is a plain file device and parallel I/O is on
    /// (then one io_uring submission serves the whole batch).
    fn uring_devices(&self, plans: &[(usize, Vec<Run>)]) -> Option<Vec<Arc<dyn BlockDevice>>> {
        if !uring::available() {
            return None;
        }
        self.batch_devices(plans, |d| d.as_file().is_some())
    }

    /// The devices of `plans` when parallel I/O is on and every one of them passes `fits`.
    fn batch_devices(
        &self,
        plans: &[(usize, Vec<Run>)],
        fits: impl Fn(&dyn BlockDevice) -> bool,
    ) -> Option<Vec<Arc<dyn BlockDevice>>> {
        if !self.parallel.load(Relaxed) || plans.is_empty() {
            return None;
        }
        let devs: Vec<Arc<dyn BlockDevice>> = plans.iter().map(|(d, _)| self.get(*d)).collect();
        devs.iter().all(|d| fits(d.as_ref())).then_some(devs)
    }

    /// Read every run with one io_uring submission (None: not all file devices, use the workers).
    fn uring_read(&self, plans: &[(usize, Vec<Run>)]) -> Option<Vec<Vec<Option<RunBuf>>>> {
        let devs = self.uring_devices(plans)?;
        let mut bufs: Vec<Vec<AlignedBuf>> = plans
            .iter()
            .map(|(_, runs)| runs.iter().map(|r| AlignedBuf::new(r.len)).collect())
            .collect();
        let res = {
            let mut uops: Vec<UringOp> = Vec::new();
            for (((_, runs), dev), bs) in plans.iter().zip(&devs).zip(bufs.iter_mut()) {
                let file = dev.as_file().expect("checked");
                for (r, b) in runs.iter().zip(bs.iter_mut()) {
                    uops.push(UringOp::Read {
                        dev: file,
                        off: r.off,
                        buf: b.as_mut_slice(),
                    });
                }
            }
            uring::submit(&mut uops)
        };
        let mut res = res.into_iter();
        Some(
            bufs.into_iter()
                .map(|bs| {
                    let mut failed = false;
                    bs.into_iter()
                        .map(|b| {
                            failed = failed || res.next().is_none_or(|r| r.is_err());
                            (!failed).then_some(RunBuf::Aligned(b))
                        })
                        .collect()
                })
                .collect(),
        )
    }

    /// Run `f` on every run of paced devices on this thread (a device's later runs are skipped
    /// after one fails), then sleep once until the last request completes in modeled time.
    /// None: not all devices are paced, use the workers.
    fn paced<R>(
        &self,
        plans: &[(usize, Vec<Run>)],
        mut f: impl FnMut(&dyn BlockDevice, &Run) -> ecstack_device::Result<(Instant, R)>,
    ) -> Option<Vec<Vec<Option<R>>>> {
        // Every device paced: models its service time in real time and answers at once.
        let devs = self.batch_devices(plans, |d| d.paced())?;
        let mut last = Instant::now();
        let out = plans
            .iter()
            .zip(&devs)
            .map(|((_, runs), dev)| {
                let mut failed = false;
                runs.iter()
                    .map(|r| {
                        if failed {
                            return None;
                        }
                        match f(dev.as_ref(), r) {
                            Ok((t, v)) => {
                                last = last.max(t);
                                Some(v)
                            }
                            Err(_) => {
                                failed = true;
                                None
                            }
                        }
                    })
                    .collect()
            })
            .collect();
        ecstack_device::throttled::sleep_until(last);
        Some(out)
    }

    /// Read every run of paced devices (see `paced`).
    fn paced_read(&self, plans: &[(usize, Vec<Run>)]) -> Option<Vec<Vec<Option<RunBuf>>>> {
        self.paced(plans, |dev, r| {
            let mut b = vec![0u8; r.len];
            let t = dev.read_paced(&mut b, r.off)?;
            Ok((t, RunBuf::Plain(b)))
        })
    }

    /// Read every run on the device workers.
    #[allow(clippy::type_complexity)]
    fn read_threads(&self, plans: &[(usize, Vec<Run>)]) -> Vec<Vec<Option<RunBuf>>> {
        let tasks: Vec<(usize, Task<Vec<Option<RunBuf>>>)> = plans
            .iter()
            .map(|(d, runs)| {
                let spans: Vec<(u64, usize)> = runs.iter().map(|r| (r.off, r.len)).collect();
                let t: Task<Vec<Option<RunBuf>>> = Box::new(move |dev: &dyn BlockDevice| {
                    let mut out = Vec::with_capacity(spans.len());
                    let mut failed = false;
                    for (off, len) in spans {
                        if failed {
                            out.push(None);
                            continue;
                        }
                        let mut b = vec![0u8; len];
                        match dev.read_at(&mut b, off) {
                            Ok(()) => out.push(Some(RunBuf::Plain(b))),
                            Err(_) => {
                                failed = true;
                                out.push(None)
                            }
                        }
                    }
                    out
                });
                (*d, t)
            })
            .collect();
        self.exec(tasks)
    }

    /// Write every op (skipping failed devices); sets `ok`. A device that errors is marked failed.
    pub fn write(&self, ops: &mut [Wr<'_>]) {
        let plans = self.plan(ops, |o| (o.dev, o.off, o.buf.len()));
        let results = match self.uring_write(&plans, ops) {
            Some(r) => r,
            None => match self.paced_write(&plans, ops) {
                Some(r) => r,
                None => self.write_threads(&plans, ops),
            },
        };
        for ((d, runs), res) in plans.into_iter().zip(results) {
            for (r, ok) in runs.into_iter().zip(res) {
                if ok {
                    self.meters[d].record(true, r.off, r.len as u64);
                    for i in r.ops {
                        ops[i].ok = true;
                    }
                } else {
                    self.meters[d].error();
                    self.mark_failed(d);
                }
            }
        }
        for o in ops.iter_mut() {
            if o.buf.is_empty() && !self.is_failed(o.dev) {
                o.ok = true;
            }
        }
    }

    /// Write every run with one io_uring submission (None: not all file devices, use the workers).
    fn uring_write(&self, plans: &[(usize, Vec<Run>)], ops: &[Wr<'_>]) -> Option<Vec<Vec<bool>>> {
        let devs = self.uring_devices(plans)?;
        let bufs: Vec<Vec<AlignedBuf>> = plans
            .iter()
            .map(|(_, runs)| {
                runs.iter()
                    .map(|r| {
                        let mut b = AlignedBuf::new(r.len);
                        let mut p = 0;
                        for &i in &r.ops {
                            let l = ops[i].buf.len();
                            b.as_mut_slice()[p..p + l].copy_from_slice(ops[i].buf);
                            p += l;
                        }
                        b
                    })
                    .collect()
            })
            .collect();
        let mut uops: Vec<UringOp> = Vec::new();
        for (((_, runs), dev), bs) in plans.iter().zip(&devs).zip(&bufs) {
            let file = dev.as_file().expect("checked");
            for (r, b) in runs.iter().zip(bs) {
                uops.push(UringOp::Write {
                    dev: file,
                    off: r.off,
                    buf: b.as_slice(),
                });
            }
        }
        let mut res = uring::submit(&mut uops).into_iter();
        Some(
            plans
                .iter()
                .map(|(_, runs)| {
                    let mut failed = false;
                    runs.iter()
                        .map(|_| {
                            failed = failed || res.next().is_none_or(|r| r.is_err());
                            !failed
                        })
                        .collect()
                })
                .collect(),
        )
    }

    /// Write every run of paced devices (see `paced`).
    fn paced_write(&self, plans: &[(usize, Vec<Run>)], ops: &[Wr<'_>]) -> Option<Vec<Vec<bool>>> {
        let out = self.paced(plans, |dev, r| {
            let t = match r.ops.as_slice() {
                [i] => dev.write_paced(ops[*i].buf, r.off)?,
                many => {
                    let mut b = Vec::with_capacity(r.len);
                    for &i in many {
                        b.extend_from_slice(ops[i].buf);
                    }
                    dev.write_paced(&b, r.off)?
                }
            };
            Ok((t, ()))
        })?;
        Some(
            out.into_iter()
                .map(|runs| runs.into_iter().map(|r| r.is_some()).collect())
                .collect(),
        )
    }

    /// Write every run on the device workers.
    fn write_threads(&self, plans: &[(usize, Vec<Run>)], ops: &[Wr<'_>]) -> Vec<Vec<bool>> {
        let tasks: Vec<(usize, Task<Vec<bool>>)> = plans
            .iter()
            .map(|(d, runs)| {
                let bufs: Vec<(u64, Vec<u8>)> = runs
                    .iter()
                    .map(|r| {
                        let mut b = Vec::with_capacity(r.len);
                        for &i in &r.ops {
                            b.extend_from_slice(ops[i].buf);
                        }
                        (r.off, b)
                    })
                    .collect();
                let t: Task<Vec<bool>> = Box::new(move |dev: &dyn BlockDevice| {
                    let mut failed = false;
                    bufs.iter()
                        .map(|(off, b)| {
                            failed = failed || dev.write_at(b, *off).is_err();
                            !failed
                        })
                        .collect()
                });
                (*d, t)
            })
            .collect();
        self.exec(tasks)
    }

    /// Flush every alive device (in parallel); a device whose flush fails is marked failed.
    pub fn flush_all(&self) {
        let alive: Vec<usize> = (0..self.len()).filter(|&i| !self.is_failed(i)).collect();
        let tasks: Vec<(usize, Task<bool>)> = alive
            .iter()
            .map(|&d| {
                let t: Task<bool> = Box::new(|dev: &dyn BlockDevice| dev.flush().is_ok());
                (d, t)
            })
            .collect();
        for (d, ok) in alive.into_iter().zip(self.exec(tasks)) {
            if ok {
                self.meters[d].flush();
            } else {
                self.meters[d].error();
                self.mark_failed(d);
            }
        }
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
