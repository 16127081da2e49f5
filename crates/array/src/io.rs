//! Device I/O for the array: per-device counters (sequential vs random), failure tracking, and
//! batches of chunk reads/writes that are merged per device (consecutive offsets become one large
//! request) and issued to every device at once through the one batch seam
//! ([`BlockDevice::submit`]): each device serves its share its own way (io_uring for files, one
//! sleep per batch for paced devices, in order for the rest), and this module never asks which.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, RwLock};

use ecstack_device::{AlignedBuf, Batch, BlockDevice, IoKind};

use crate::crc::ChunkCrcs;

/// Largest merged request.
pub(crate) const MAX_MERGE: u64 = 1 << 20;

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

/// A merged run of consecutive ops on one device.
struct Run {
    off: u64,
    len: usize,
    ops: Vec<usize>,
}

/// The bytes of one run of a write batch: its op's own buffer, or an aligned copy of its ops.
enum RunBuf<'a> {
    Borrowed(&'a [u8]),
    Owned(AlignedBuf),
}

impl RunBuf<'_> {
    fn as_slice(&self) -> &[u8] {
        match self {
            RunBuf::Borrowed(b) => b,
            RunBuf::Owned(b) => b.as_slice(),
        }
    }
}

/// A buffer an `O_DIRECT` device takes as it is: aligned start and length.
fn is_direct_aligned(b: &[u8]) -> bool {
    b.as_ptr().align_offset(ecstack_device::DIRECT_ALIGN) == 0
        && b.len() % ecstack_device::DIRECT_ALIGN == 0
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

/// A task's answer: delivered when dropped, so a task that never answers (dropped unrun, or
/// unwinding past `answer`) still counts down, with no value, and the caller's wait ends.
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
                            // Jobs from `exec` catch their own panics and hand them to the
                            // caller; this only keeps the worker alive whatever a job does.
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

/// Largest read served from the per-thread scratch buffer of [`Devs::read`]'s one-op path (a
/// chunk is 4 KiB by default; larger reads get a buffer of their own).
const SCRATCH_BYTES_MAX: usize = 64 << 10;

thread_local! {
    /// The aligned buffer single reads land in before they are verified and copied out, kept per
    /// thread so that a small read allocates and zeroes nothing. Grows to the largest read up to
    /// [`SCRATCH_BYTES_MAX`].
    static SCRATCH: std::cell::RefCell<Option<AlignedBuf>> = const { std::cell::RefCell::new(None) };
}

/// Run `f` on the first `len` bytes of this thread's scratch buffer; `None` (not run) when `len`
/// exceeds [`SCRATCH_BYTES_MAX`] or the buffer is already in use further up this thread's stack.
/// The bytes are whatever an earlier read left: `f` gets them only to be overwritten.
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
    if len > SCRATCH_BYTES_MAX {
        return None;
    }
    SCRATCH.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.as_ref().is_none_or(|b| b.len() < len) {
            *slot = Some(AlignedBuf::new(len.next_power_of_two().max(4096)));
        }
        let b = slot.as_mut().expect("set above");
        Some(f(&mut b.as_mut_slice()[..len]))
    })
}

/// Whole chunks of one device whose checksum matched on a small read, with the device's write
/// generation at the time ([`BlockDevice::read_with`]): while the device shows the same
/// generation, the same chunk with the same known checksum holds the same bytes, so it matches
/// again without being read whole. Only memory devices give a generation. Direct-mapped by chunk,
/// [`VERIFIED_CHUNKS_MAX`] entries per device, allocated on first use; one lock, so an entry is
/// never read half written.
#[derive(Debug, Default)]
struct VerifiedChunks(Mutex<Vec<Option<VerifiedChunk>>>);

/// Where the chunk lies on the device, the device's write generation, the checksum it matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct VerifiedChunk {
    off: u64,
    generation: u64,
    crc: u32,
}

/// Entries of [`VerifiedChunks`] per device (32 bytes each).
const VERIFIED_CHUNKS_MAX: usize = 4096;

impl VerifiedChunks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<VerifiedChunk>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn index(c: &VerifiedChunk, chunk_bytes: usize) -> usize {
        (c.off / chunk_bytes as u64) as usize % VERIFIED_CHUNKS_MAX
    }
    fn contains(&self, c: &VerifiedChunk, chunk_bytes: usize) -> bool {
        self.lock().get(Self::index(c, chunk_bytes)) == Some(&Some(*c))
    }
    fn insert(&self, c: VerifiedChunk, chunk_bytes: usize) {
        let mut t = self.lock();
        if t.is_empty() {
            t.resize(VERIFIED_CHUNKS_MAX, None);
        }
        t[Self::index(&c, chunk_bytes)] = Some(c);
    }
    fn clear(&self) {
        *self.lock() = Vec::new();
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
    /// Small reads answered without reading their chunk whole: [`VerifiedChunks`].
    pub verified_hits: AtomicU64,
    verified: Vec<VerifiedChunks>,
    pool: Pool,
    /// The per-chunk checksums every read is verified against and every write updates (set
    /// once the metadata is loaded; none in unit tests of this module).
    crcs: std::sync::OnceLock<Arc<ChunkCrcs>>,
    /// Bumped before every batch of writes, every device failure and every replacement: bytes
    /// read while it stayed the same are still what the devices hold ([`Devs::generation`]).
    generation: AtomicU64,
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
            verified_hits: AtomicU64::new(0),
            verified: (0..n).map(|_| VerifiedChunks::default()).collect(),
            pool: Pool::new(n),
            crcs: std::sync::OnceLock::new(),
            generation: AtomicU64::new(0),
        }
    }

    /// A count that changes before any device's bytes or state can change (writes, failures,
    /// replacements): scrub reads ahead across the admin lock's steps and keeps what it read only
    /// if the count, taken under the lock when the reads were planned, is the same under the lock
    /// when they are checked.
    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Relaxed);
    }

    /// Verify reads and record writes with `crcs` from now on (once, when the array opens).
    pub fn set_crcs(&self, crcs: Arc<ChunkCrcs>) {
        assert!(
            crcs.devices() <= self.len(),
            "checksum table of more devices"
        );
        let _ = self.crcs.set(crcs);
    }

    pub fn crcs(&self) -> Option<&ChunkCrcs> {
        self.crcs.get().map(|c| c.as_ref())
    }

    /// Whether the chunk at `slot` of device `d` can be read: the device is alive and the chunk did
    /// not fail its checksum since it was last written.
    pub fn usable(&self, d: usize, slot: u64) -> bool {
        !self.is_failed(d) && !self.crcs().is_some_and(|c| c.is_bad(d, slot))
    }

    /// Whether the chunk at `slot` of device `d` failed its checksum and was not written since.
    pub fn is_bad(&self, d: usize, slot: u64) -> bool {
        self.crcs().is_some_and(|c| c.is_bad(d, slot))
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
        let keeps_data = dev.keeps_data();
        self.changed();
        self.devs.write().unwrap_or_else(|p| p.into_inner())[i] = dev;
        // The new device's generations say nothing about the old one's chunks.
        self.verified[i].clear();
        self.failed[i].store(false, Relaxed);
        if let Some(c) = self.crcs() {
            c.clear_bad_of(i);
            if !keeps_data {
                // A replacement that reads back zeros: checksums off (`Array::set_checksums`).
                c.set_enabled(false);
            }
        }
    }

    /// Whether every device keeps the bytes written to it ([`BlockDevice::keeps_data`]).
    pub fn keeps_data(&self) -> bool {
        self.devs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .all(|d| d.keeps_data())
    }

    pub fn is_failed(&self, i: usize) -> bool {
        self.failed[i].load(Relaxed)
    }

    pub fn mark_failed(&self, i: usize) {
        self.changed();
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
    ///
    /// Panic safety: a task that panics (on a worker or here) still answers its slot, with the
    /// panic, so the wait below always ends; once every task has answered, the first panic is
    /// re-raised on the calling thread with its original payload, as if the task had run here. The
    /// workers outlive it (`catch_unwind`), so the pool keeps serving later calls.
    fn exec<R: Send + 'static>(&self, tasks: Vec<(usize, Task<R>)>) -> Vec<R> {
        if tasks.len() <= 1 || !self.parallel.load(Relaxed) {
            return tasks
                .into_iter()
                .map(|(d, t)| t(self.get(d).as_ref()))
                .collect();
        }
        let latch = Arc::new(Latch::<std::thread::Result<R>>::new(tasks.len()));
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
            let job: Job = Box::new(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t(dev.as_ref())));
                slot.answer(r)
            });
            if let Err(job) = self.pool.submit(d, job) {
                inline.push(job);
            }
        }
        if let Some((i, (d, t))) = first {
            let dev = self.get(d);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t(dev.as_ref())));
            latch.put(i, Some(r));
        }
        for job in inline {
            job();
        }
        let answers = latch.wait();
        let mut out = Vec::with_capacity(answers.len());
        for a in answers {
            match a {
                Some(Ok(v)) => out.push(v),
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                // A job is only dropped unrun if the pool shut down under a running call, which
                // `&self` rules out.
                None => unreachable!("a device task was dropped without running"),
            }
        }
        out
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

    /// Issue one request per run: every device's share in one batch when parallel I/O is on (so
    /// file devices go out in one io_uring submission and paced devices sleep once, for the
    /// batch), else device by device. Per run, whether it succeeded; a device's runs after its
    /// first failure count as failed.
    fn submit<'a>(
        &self,
        devs: &'a [Arc<dyn BlockDevice>],
        reqs: Vec<Vec<(u64, IoKind<'a>)>>,
    ) -> Vec<Vec<bool>> {
        let shape: Vec<usize> = reqs.iter().map(Vec::len).collect();
        let one =
            |batch: &mut Batch<'a>, dev: &'a Arc<dyn BlockDevice>, rs: Vec<(u64, IoKind<'a>)>| {
                let rs = rs
                    .into_iter()
                    .map(|(off, k)| batch.request(off, k))
                    .collect();
                batch.submit_to(dev.as_ref(), rs);
            };
        let flat: Vec<ecstack_device::Result<()>> = if self.parallel.load(Relaxed) {
            let mut batch = Batch::new();
            for (dev, rs) in devs.iter().zip(reqs) {
                one(&mut batch, dev, rs);
            }
            batch.finish()
        } else {
            devs.iter()
                .zip(reqs)
                .flat_map(|(dev, rs)| {
                    let mut batch = Batch::new();
                    one(&mut batch, dev, rs);
                    batch.finish()
                })
                .collect()
        };
        let mut it = flat.into_iter();
        shape
            .into_iter()
            .map(|n| {
                let mut failed = false;
                (0..n)
                    .map(|_| {
                        // Take every result (no short circuit), so the next run gets its own.
                        let ok = it.next().is_some_and(|r| r.is_ok());
                        failed = failed || !ok;
                        !failed
                    })
                    .collect()
            })
            .collect()
    }

    /// Read every op (skipping failed devices); sets `ok`. A device that errors is marked failed.
    /// Every chunk read whose checksum is known is verified (a partial read covers its whole
    /// chunk): a mismatch leaves the op not `ok` and the chunk bad (`ChunkCrcs::is_bad`), with the
    /// device alive.
    pub fn read(&self, ops: &mut [Rd<'_>]) {
        if let [op] = ops {
            return self.read_one(op);
        }
        for o in ops.iter_mut() {
            if o.buf.is_empty() {
                o.ok = true;
            }
        }
        let crcs = self.crcs().filter(|c| c.enabled());
        let span = |o: &Rd<'_>| match crcs {
            Some(c) => c.read_span(o.dev, o.off, o.buf.len()),
            None => (o.off, o.buf.len()),
        };
        let plans = self.plan(ops, |o| {
            let (off, len) = span(o);
            (o.dev, off, len)
        });
        let devs: Vec<Arc<dyn BlockDevice>> = plans.iter().map(|(d, _)| self.get(*d)).collect();
        // Aligned, so that O_DIRECT files take them as they are.
        let mut bufs: Vec<Vec<AlignedBuf>> = plans
            .iter()
            .map(|(_, runs)| runs.iter().map(|r| AlignedBuf::new(r.len)).collect())
            .collect();
        let reqs = bufs
            .iter_mut()
            .zip(&plans)
            .map(|(bs, (_, runs))| {
                bs.iter_mut()
                    .zip(runs)
                    .map(|(b, r)| (r.off, IoKind::Read(b.as_mut_slice())))
                    .collect()
            })
            .collect();
        let oks = self.submit(&devs, reqs);
        for (((d, runs), oks), bs) in plans.into_iter().zip(oks).zip(bufs) {
            for ((r, ok), b) in runs.into_iter().zip(oks).zip(bs) {
                if ok {
                    let b = b.as_slice();
                    self.meters[d].record(false, r.off, r.len as u64);
                    let mut p = 0;
                    for i in r.ops {
                        let (off, len) = span(&ops[i]);
                        let got = &b[p..p + len];
                        p += len;
                        if crcs.is_some_and(|c| !c.verify(d, off, got)) {
                            continue;
                        }
                        let at = (ops[i].off - off) as usize;
                        let l = ops[i].buf.len();
                        ops[i].buf.copy_from_slice(&got[at..at + l]);
                        ops[i].ok = true;
                    }
                } else {
                    self.meters[d].error();
                    self.mark_failed(d);
                }
            }
        }
    }

    /// Read every op straight into its own buffer, one request per op (the caller has merged
    /// consecutive chunks into one op over one buffer, aligned for `O_DIRECT`), every device's
    /// share in one batch; sets `ok`. Unlike [`Devs::read`] nothing is verified or copied: the
    /// caller checks the chunks against their checksums (scrub, which reads into reused buffers
    /// on its read-ahead threads and verifies on its checking thread). A device that errors is
    /// marked failed.
    pub fn read_raw(&self, ops: &mut [Rd<'_>]) {
        let mut by_dev: Vec<Vec<(usize, u64, IoKind<'_>)>> =
            (0..self.len()).map(|_| Vec::new()).collect();
        for (i, o) in ops.iter_mut().enumerate() {
            if o.buf.is_empty() {
                o.ok = true;
            } else if !self.is_failed(o.dev) {
                by_dev[o.dev].push((i, o.off, IoKind::Read(&mut *o.buf)));
            }
        }
        let used: Vec<usize> = (0..self.len()).filter(|&d| !by_dev[d].is_empty()).collect();
        let devs: Vec<Arc<dyn BlockDevice>> = used.iter().map(|&d| self.get(d)).collect();
        let mut who: Vec<Vec<(usize, u64, usize)>> = Vec::with_capacity(used.len());
        let mut reqs = Vec::with_capacity(used.len());
        for &d in &used {
            let rs = std::mem::take(&mut by_dev[d]);
            who.push(
                rs.iter()
                    .map(|(i, off, k)| {
                        (
                            *i,
                            *off,
                            match k {
                                IoKind::Read(b) => b.len(),
                                IoKind::Write(b) => b.len(),
                            },
                        )
                    })
                    .collect(),
            );
            reqs.push(rs.into_iter().map(|(_, off, k)| (off, k)).collect());
        }
        let oks = self.submit(&devs, reqs);
        for ((&d, who), oks) in used.iter().zip(who).zip(oks) {
            for ((i, off, len), ok) in who.into_iter().zip(oks) {
                if ok {
                    self.meters[d].record(false, off, len as u64);
                    ops[i].ok = true;
                } else {
                    self.meters[d].error();
                    self.mark_failed(d);
                }
            }
        }
    }

    /// [`Devs::read`] of one op: the small-read fast path (a key-value GET reads one ~140-byte
    /// record inside one chunk). The same steps as the general path (one request through the
    /// device's batch seam, the whole chunk verified against its checksum, the bytes copied out,
    /// metered; a failed request marks the device failed, a mismatch marks the chunk bad), without
    /// its per-call planning: no per-device vectors, no merge plan, and the chunk lands in this
    /// thread's reused aligned scratch buffer instead of a fresh zeroed allocation, or, on a
    /// memory device, is verified where it lies ([`BlockDevice::read_with`]) and only the bytes
    /// asked for are copied.
    fn read_one(&self, op: &mut Rd<'_>) {
        if op.buf.is_empty() {
            op.ok = true;
            return;
        }
        if self.is_failed(op.dev) {
            return;
        }
        let crcs = self.crcs().filter(|c| c.enabled());
        let (off, len) = match crcs {
            Some(c) => c.read_span(op.dev, op.off, op.buf.len()),
            None => (op.off, op.buf.len()),
        };
        debug_assert!(off <= op.off && op.off + op.buf.len() as u64 <= off + len as u64);
        let dev = self.get(op.dev);
        let at = (op.off - off) as usize;
        let mut read = |b: &mut [u8]| -> bool {
            // Verified and copied out where the device shows the chunk: in place for a memory
            // device (no 4 KiB copy), else from `b` after one request through the batch seam. A
            // chunk that matched at the memory device's current generation matches again
            // without its bytes being read (`VerifiedChunks`).
            let mut show = |got: &[u8], generation: Option<u64>| {
                let known = match (crcs, generation) {
                    (Some(c), Some(generation)) => {
                        c.whole_chunk(op.dev, off, got.len()).map(|(slot, crc)| {
                            let v = VerifiedChunk {
                                off,
                                generation,
                                crc,
                            };
                            (c, slot, v)
                        })
                    }
                    _ => None,
                };
                let matched = match known {
                    Some((c, slot, v)) if self.verified[op.dev].contains(&v, got.len()) => {
                        self.verified_hits.fetch_add(1, Relaxed);
                        c.unmark_bad(op.dev, slot);
                        true
                    }
                    _ => {
                        let ok = crcs.is_none_or(|c| c.verify(op.dev, off, got));
                        if let (true, Some((_, _, v))) = (ok, known) {
                            self.verified[op.dev].insert(v, got.len());
                        }
                        ok
                    }
                };
                if !matched {
                    return;
                }
                let l = op.buf.len();
                op.buf.copy_from_slice(&got[at..at + l]);
                op.ok = true;
            };
            if dev.read_with(off, b, &mut show).is_err() {
                return false;
            }
            self.meters[op.dev].record(false, off, len as u64);
            true
        };
        let answered = with_scratch(len, |b| read(b)).unwrap_or_else(|| {
            // Larger than the scratch buffer, or it is in use (an array whose devices are arrays,
            // read on this thread): a buffer of its own.
            read(AlignedBuf::new(len).as_mut_slice())
        });
        if !answered {
            self.meters[op.dev].error();
            self.mark_failed(op.dev);
        }
    }

    /// Write every op (skipping failed devices); sets `ok`. A device that errors is marked failed.
    pub fn write(&self, ops: &mut [Wr<'_>]) {
        self.changed();
        let plans = self.plan(ops, |o| (o.dev, o.off, o.buf.len()));
        // Invariant: the writes of one batch to one device do not overlap. A batch's requests may
        // complete in any order (one io_uring submission), so overlapping writes would leave either
        // one's bytes on the device. Reads are not checked: two reads of the same range each fill
        // their own buffer, which is harmless.
        for (d, runs) in &plans {
            if let Some(w) = runs
                .windows(2)
                .find(|w| w[0].off + w[0].len as u64 > w[1].off)
            {
                panic!(
                    "overlapping writes in one batch to device {d}: {} bytes at {} and {} bytes at {}",
                    w[0].len, w[0].off, w[1].len, w[1].off
                );
            }
        }
        let devs: Vec<Arc<dyn BlockDevice>> = plans.iter().map(|(d, _)| self.get(*d)).collect();
        // One aligned buffer per merged run, its ops' data copied in once (not zeroed first); a
        // run of one op whose buffer is already aligned (a full stripe's chunk cut from an aligned
        // segment image) is written from it.
        let bufs: Vec<Vec<RunBuf<'_>>> = plans
            .iter()
            .map(|(_, runs)| {
                runs.iter()
                    .map(|r| match r.ops[..] {
                        [i] if is_direct_aligned(ops[i].buf) => RunBuf::Borrowed(ops[i].buf),
                        _ => {
                            let pieces: Vec<&[u8]> = r.ops.iter().map(|&i| ops[i].buf).collect();
                            RunBuf::Owned(AlignedBuf::concat(&pieces))
                        }
                    })
                    .collect()
            })
            .collect();
        let reqs = bufs
            .iter()
            .zip(&plans)
            .map(|(bs, (_, runs))| {
                bs.iter()
                    .zip(runs)
                    .map(|(b, r)| (r.off, IoKind::Write(b.as_slice())))
                    .collect()
            })
            .collect();
        let oks = self.submit(&devs, reqs);
        let mut changes = Vec::new();
        for ((d, runs), oks) in plans.into_iter().zip(oks) {
            for (r, ok) in runs.into_iter().zip(oks) {
                if ok {
                    self.meters[d].record(true, r.off, r.len as u64);
                    for i in r.ops {
                        if let Some(c) = self.crcs() {
                            c.wrote_into(d, ops[i].off, ops[i].buf, &mut changes);
                        }
                        ops[i].ok = true;
                    }
                } else {
                    self.meters[d].error();
                    self.mark_failed(d);
                }
            }
        }
        if let Some(c) = self.crcs() {
            c.queue(changes);
        }
        for o in ops.iter_mut() {
            if o.buf.is_empty() && !self.is_failed(o.dev) {
                o.ok = true;
            }
        }
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
        if let Some(c) = self.crcs() {
            let mut changes = Vec::new();
            c.wrote_into(d, off, buf, &mut changes);
            c.queue(changes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecstack_device::{IoRequest, MemDevice};
    use std::sync::Mutex;

    /// A device that overrides `submit`, counting batches and requests, and counts direct
    /// `read_at`/`write_at` calls separately.
    #[derive(Debug)]
    struct Counting {
        inner: MemDevice,
        batches: AtomicU64,
        requests: AtomicU64,
        direct: AtomicU64,
        /// The address of every buffer a batched write handed over.
        write_ptrs: Mutex<Vec<usize>>,
    }

    impl Counting {
        fn new() -> Counting {
            Counting {
                inner: MemDevice::new(1 << 20).unwrap(),
                batches: AtomicU64::new(0),
                requests: AtomicU64::new(0),
                direct: AtomicU64::new(0),
                write_ptrs: Mutex::new(Vec::new()),
            }
        }
    }

    impl BlockDevice for Counting {
        fn name(&self) -> &str {
            "counting"
        }
        fn capacity(&self) -> u64 {
            self.inner.capacity()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> ecstack_device::Result<()> {
            self.direct.fetch_add(1, Relaxed);
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> ecstack_device::Result<()> {
            self.direct.fetch_add(1, Relaxed);
            self.inner.write_at(buf, offset)
        }
        fn flush(&self) -> ecstack_device::Result<()> {
            Ok(())
        }
        fn discard(&self, _: u64, _: u64) -> ecstack_device::Result<()> {
            Ok(())
        }
        fn submit<'a>(&'a self, reqs: Vec<IoRequest<'a>>, batch: &mut Batch<'a>) {
            self.batches.fetch_add(1, Relaxed);
            self.requests.fetch_add(reqs.len() as u64, Relaxed);
            for r in &reqs {
                if let IoKind::Write(b) = &r.kind {
                    self.write_ptrs.lock().unwrap().push(b.as_ptr() as usize);
                }
            }
            batch.run_now(&self.inner, reqs);
        }
    }

    /// Chunk reads and writes reach each device as one batch through its `submit` override (never
    /// request by request through `read_at`/`write_at`), merged runs as one request, with parallel
    /// I/O on and off.
    #[test]
    fn chunk_io_reaches_the_device_override_as_one_batch() {
        for parallel in [true, false] {
            let counting: Vec<Arc<Counting>> = (0..3).map(|_| Arc::new(Counting::new())).collect();
            let devs = Devs::new(
                counting
                    .iter()
                    .map(|c| Arc::clone(c) as Arc<dyn BlockDevice>)
                    .collect(),
                parallel,
            );
            let chunk = |i: u8| vec![i; 4096];
            let data: Vec<Vec<u8>> = (1..=5).map(chunk).collect();
            // Device 0: two adjacent chunks (one merged run) and one apart; devices 1 and 2: one.
            let place = [(0, 0), (0, 4096), (0, 65536), (1, 4096), (2, 0)];
            let mut w: Vec<Wr> = place
                .iter()
                .zip(&data)
                .map(|(&(d, off), b)| Wr::new(d, off, b))
                .collect();
            devs.write(&mut w);
            assert!(w.iter().all(|o| o.ok));
            let mut back: Vec<Vec<u8>> = (0..5).map(|_| vec![0u8; 4096]).collect();
            let mut r: Vec<Rd> = place
                .iter()
                .zip(back.iter_mut())
                .map(|(&(d, off), b)| Rd::new(d, off, b))
                .collect();
            devs.read(&mut r);
            assert!(r.iter().all(|o| o.ok));
            assert_eq!(back, data, "parallel={parallel}");
            for (i, c) in counting.iter().enumerate() {
                assert_eq!(c.batches.load(Relaxed), 2, "device {i}: one batch per call");
                assert_eq!(c.direct.load(Relaxed), 0, "device {i}: no per-request path");
            }
            assert_eq!(counting[0].requests.load(Relaxed), 4, "two runs per call");
            assert_eq!(counting[1].requests.load(Relaxed), 2);
            assert_eq!(devs.meters[0].get().write_ops, 2, "merged run metered once");
        }
    }

    /// A write run of one op whose buffer is already aligned reaches the device as that very
    /// buffer (no copy); an unaligned one, or a run merged from several ops, as an aligned copy.
    /// The bytes land the same either way.
    #[test]
    fn an_aligned_single_op_run_is_written_from_its_own_buffer() {
        let dev = Arc::new(Counting::new());
        let devs = Devs::new(vec![Arc::clone(&dev) as Arc<dyn BlockDevice>], false);
        let mut aligned = ecstack_device::AlignedBuf::with_capacity(3 * 4096 + 1);
        for i in 0..3u8 {
            aligned.push(&[i + 1; 4096]);
        }
        aligned.push(&[9]);
        let a = aligned.as_slice();
        // An aligned chunk alone; an unaligned one (one byte in) alone; two adjacent aligned
        // chunks merged into one run.
        let cases: [(&[u8], u64, bool); 3] = [
            (&a[..4096], 0, true),
            (&a[1..4097], 65536, false),
            (&a[4096..8192], 131072, false),
        ];
        for (buf, off, own) in cases {
            dev.write_ptrs.lock().unwrap().clear();
            let mut w = vec![Wr::new(0, off, buf)];
            if off == 131072 {
                w.push(Wr::new(0, off + 4096, &a[8192..12288]));
            }
            devs.write(&mut w);
            assert!(w.iter().all(|o| o.ok));
            let ptrs = dev.write_ptrs.lock().unwrap().clone();
            assert_eq!(ptrs.len(), 1, "one request per run");
            assert_eq!(ptrs[0] == buf.as_ptr() as usize, own, "write at {off}");
            let mut back = vec![0u8; buf.len()];
            dev.inner.read_at(&mut back, off).unwrap();
            assert_eq!(back, buf, "write at {off}");
        }
    }

    /// The one-op read path (a small read, e.g. a key-value GET): it goes through the device's
    /// batch seam as one request, returns exactly the bytes asked for whatever an earlier read left
    /// in the scratch buffer, and verifies the whole chunk under a partial read, so a flip outside
    /// the bytes read is still detected (op not `ok`, chunk bad, device alive), like the general
    /// path's.
    #[test]
    fn a_single_read_is_one_batched_request_and_verifies_its_whole_chunk() {
        let counting: Vec<Arc<Counting>> = (0..2).map(|_| Arc::new(Counting::new())).collect();
        let devs = Devs::new(
            counting
                .iter()
                .map(|c| Arc::clone(c) as Arc<dyn BlockDevice>)
                .collect(),
            true,
        );
        const CHUNK: u64 = 4096;
        devs.set_crcs(Arc::new(ChunkCrcs::new(CHUNK, 0, vec![256, 256])));
        let chunks: Vec<Vec<u8>> = (0..4u8)
            .map(|i| (0..CHUNK).map(|b| (b as u8) ^ i.wrapping_mul(37)).collect())
            .collect();
        let mut w: Vec<Wr> = chunks
            .iter()
            .enumerate()
            .map(|(i, b)| Wr::new(i % 2, (i / 2) as u64 * CHUNK, b))
            .collect();
        devs.write(&mut w);
        assert!(w.iter().all(|o| o.ok));
        let before = counting[1].batches.load(Relaxed);
        // Sizes and offsets that differ from read to read, so stale scratch bytes would show.
        for (i, (at, len)) in [(100usize, 140usize), (0, 4096), (4000, 96), (7, 1)]
            .into_iter()
            .enumerate()
        {
            let c = 1 + 2 * (i % 2); // chunks 1 and 3, both on device 1
            let mut buf = vec![0xEEu8; len];
            let mut op = [Rd::new(1, (c as u64 / 2) * CHUNK + at as u64, &mut buf)];
            devs.read(&mut op);
            assert!(op[0].ok, "read {i}");
            assert_eq!(buf, chunks[c][at..at + len], "read {i}");
        }
        assert_eq!(
            counting[1].batches.load(Relaxed),
            before + 4,
            "one batch per read"
        );
        assert_eq!(
            counting[1].direct.load(Relaxed),
            0,
            "through the batch seam"
        );
        // Flip a byte of chunk 3 (device 1, slot 1) outside the 140 bytes read.
        let mut b = [0u8; 1];
        counting[1].inner.read_at(&mut b, CHUNK + 3000).unwrap();
        b[0] ^= 0x10;
        counting[1].inner.write_at(&b, CHUNK + 3000).unwrap();
        let mut buf = vec![0u8; 140];
        let mut op = [Rd::new(1, CHUNK + 100, &mut buf)];
        devs.read(&mut op);
        assert!(
            !op[0].ok,
            "a flipped chunk under a small read is not returned"
        );
        let crcs = devs.crcs().unwrap();
        assert!(crcs.is_bad(1, 1), "and is marked bad");
        assert_eq!(crcs.errors.load(Relaxed), 1);
        assert!(!devs.is_failed(1), "the device stays alive");
        // The general path (two ops) agrees.
        let (mut x, mut y) = (vec![0u8; 140], vec![0u8; 140]);
        let mut ops = [Rd::new(1, 100, &mut x), Rd::new(1, CHUNK + 100, &mut y)];
        devs.read(&mut ops);
        assert!(ops[0].ok && !ops[1].ok);
        assert_eq!(crcs.errors.load(Relaxed), 2);
        // A failed device: the single read is refused without a request.
        devs.mark_failed(0);
        let batches = counting[0].batches.load(Relaxed);
        let mut op = [Rd::new(0, 0, &mut x)];
        devs.read(&mut op);
        assert!(!op[0].ok);
        assert_eq!(counting[0].batches.load(Relaxed), batches);
    }

    /// On memory devices a chunk whose checksum matched is not read whole again while its device's
    /// write generation stands (`VerifiedChunks`), and any write to the device, even one that
    /// goes around the array (a bit flip in a test), makes the next small read check the chunk
    /// whole again: the flip is caught exactly as without the memo. A replaced device starts
    /// with no remembered chunks.
    #[test]
    fn a_verified_chunk_of_a_memory_device_is_checked_again_after_any_write() {
        let mems: Vec<Arc<MemDevice>> = (0..2)
            .map(|_| Arc::new(MemDevice::new(1 << 20).unwrap()))
            .collect();
        let devs = Devs::new(
            mems.iter()
                .map(|m| Arc::clone(m) as Arc<dyn BlockDevice>)
                .collect(),
            true,
        );
        const CHUNK: u64 = 4096;
        devs.set_crcs(Arc::new(ChunkCrcs::new(CHUNK, 0, vec![256, 256])));
        let chunks: Vec<Vec<u8>> = (0..4u8)
            .map(|i| (0..CHUNK).map(|b| (b as u8).wrapping_add(i * 51)).collect())
            .collect();
        let mut w: Vec<Wr> = chunks
            .iter()
            .enumerate()
            .map(|(i, b)| Wr::new(1, i as u64 * CHUNK, b))
            .collect();
        devs.write(&mut w);
        assert!(w.iter().all(|o| o.ok));
        let read = |slot: u64, at: usize| -> Option<Vec<u8>> {
            let mut buf = vec![0u8; 140];
            let mut op = [Rd::new(1, slot * CHUNK + at as u64, &mut buf)];
            devs.read(&mut op);
            op[0].ok.then_some(buf)
        };
        let hits = || devs.verified_hits.load(Relaxed);
        assert_eq!(read(2, 100).unwrap(), chunks[2][100..240]);
        assert_eq!(hits(), 0, "the first read checks the chunk whole");
        assert_eq!(read(2, 7).unwrap(), chunks[2][7..147]);
        assert_eq!(read(2, 3900).unwrap(), chunks[2][3900..4040]);
        assert_eq!(hits(), 2, "then the chunk is known to match");
        // A flip around the array, outside the bytes read: the next read checks it whole.
        let mut b = [0u8; 1];
        mems[1].read_at(&mut b, 2 * CHUNK + 3000).unwrap();
        b[0] ^= 0x04;
        mems[1].write_at(&b, 2 * CHUNK + 3000).unwrap();
        assert_eq!(read(2, 100), None, "the flip is caught");
        let crcs = devs.crcs().unwrap();
        assert!(crcs.is_bad(1, 2));
        assert_eq!(crcs.errors.load(Relaxed), 1);
        assert_eq!(read(2, 100), None, "and caught again, never remembered");
        assert_eq!(hits(), 2);
        // A write elsewhere on the device also ends what was remembered of other chunks.
        assert_eq!(read(3, 0).unwrap(), chunks[3][..140]);
        assert_eq!(read(3, 0).unwrap(), chunks[3][..140]);
        assert_eq!(hits(), 3);
        mems[1].write_at(&chunks[0][..1], 0).unwrap();
        assert_eq!(read(3, 0).unwrap(), chunks[3][..140]);
        assert_eq!(hits(), 3, "checked whole after the write");
        // A replaced device starts from nothing, whatever its generation.
        assert_eq!(read(3, 0).unwrap(), chunks[3][..140]);
        assert_eq!(hits(), 4);
        let fresh = Arc::new(MemDevice::new(1 << 20).unwrap());
        for (i, c) in chunks.iter().enumerate() {
            fresh.write_at(c, i as u64 * CHUNK).unwrap();
        }
        devs.replace(1, fresh);
        assert_eq!(read(3, 0).unwrap(), chunks[3][..140]);
        assert_eq!(hits(), 4, "checked whole on the replacement");
    }

    /// Two writes of one batch that overlap on a device trip the invariant check before anything
    /// is submitted; the same ranges on different devices, or merely adjacent, are fine.
    #[test]
    fn overlapping_writes_in_one_batch_are_refused() {
        let mem: Vec<Arc<MemDevice>> = (0..2)
            .map(|_| Arc::new(MemDevice::new(1 << 20).unwrap()))
            .collect();
        let devs = Devs::new(
            mem.iter()
                .map(|m| Arc::clone(m) as Arc<dyn BlockDevice>)
                .collect(),
            false,
        );
        let (a, b) = (vec![1u8; 8192], vec![2u8; 4096]);
        let mut fine = vec![
            Wr::new(0, 0, &a),
            Wr::new(1, 4096, &b),
            Wr::new(0, 8192, &b),
        ];
        devs.write(&mut fine);
        assert!(fine.iter().all(|o| o.ok));
        // Device 0: 8 KiB at 0 and 4 KiB at 4096 share the range 4096..8192.
        let overlap = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            devs.write(&mut [Wr::new(0, 0, &a), Wr::new(0, 4096, &b)]);
        }));
        let msg = overlap.expect_err("overlapping writes were submitted");
        let msg = msg
            .downcast_ref::<String>()
            .expect("a formatted panic message");
        assert!(msg.contains("overlapping writes"), "{msg}");
        // Nothing of the refused batch reached the device.
        let mut back = vec![0u8; 4096];
        mem[0].read_at(&mut back, 4096).unwrap();
        assert_eq!(back, vec![1u8; 4096]);
    }

    /// A device whose flush panics: the panic reaches the caller of `flush_all` (not a hang), the
    /// other devices' flushes still complete, and the pool serves the next call.
    #[test]
    fn a_panicking_device_task_does_not_wedge_the_pool() {
        #[derive(Debug)]
        struct Bomb(MemDevice);
        impl BlockDevice for Bomb {
            fn name(&self) -> &str {
                "bomb"
            }
            fn capacity(&self) -> u64 {
                self.0.capacity()
            }
            fn read_at(&self, buf: &mut [u8], offset: u64) -> ecstack_device::Result<()> {
                self.0.read_at(buf, offset)
            }
            fn write_at(&self, buf: &[u8], offset: u64) -> ecstack_device::Result<()> {
                self.0.write_at(buf, offset)
            }
            fn flush(&self) -> ecstack_device::Result<()> {
                panic!("bomb: flush")
            }
            fn discard(&self, _: u64, _: u64) -> ecstack_device::Result<()> {
                Ok(())
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let plain: Vec<Arc<Counting>> = (0..3).map(|_| Arc::new(Counting::new())).collect();
            let mut all: Vec<Arc<dyn BlockDevice>> = plain
                .iter()
                .map(|c| Arc::clone(c) as Arc<dyn BlockDevice>)
                .collect();
            // On a worker (not the first task, which runs on the calling thread).
            all.insert(2, Arc::new(Bomb(MemDevice::new(1 << 16).unwrap())));
            let devs = Devs::new(all, true);
            for _ in 0..3 {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| devs.flush_all()));
                let msg = r
                    .err()
                    .and_then(|p| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                assert_eq!(msg, "bomb: flush", "the original panic reaches the caller");
            }
            for i in [0, 1, 3] {
                assert_eq!(
                    devs.meters[i].get().flushes,
                    0,
                    "flushes are counted after the exec"
                );
            }
            devs.replace(2, Arc::new(MemDevice::new(1 << 16).unwrap()));
            devs.flush_all();
            assert!(
                (0..4).all(|i| devs.meters[i].get().flushes == 1),
                "the pool still works"
            );
            tx.send(()).unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("flush_all returned (no hang) and the checks passed");
    }

    /// A device that fails its first run has its later runs counted failed, and the next
    /// device's results stay its own (regression: a short-circuited `next()` shifted them, so a
    /// healthy device was marked failed with its neighbour's error).
    #[test]
    fn a_failed_run_does_not_shift_the_next_devices_results() {
        use ecstack_device::{FaultConfig, Faulty};
        for parallel in [true, false] {
            let bad = Faulty::new(
                MemDevice::new(1 << 20).unwrap(),
                FaultConfig {
                    fail_at_op: Some(0),
                    ..FaultConfig::default()
                },
            );
            let devs = Devs::new(
                vec![Arc::new(bad), Arc::new(MemDevice::new(1 << 20).unwrap())],
                parallel,
            );
            let b = vec![5u8; 4096];
            let mut w = vec![
                Wr::new(0, 0, &b),
                Wr::new(0, 65536, &b),
                Wr::new(0, 131072, &b),
                Wr::new(1, 0, &b),
            ];
            devs.write(&mut w);
            assert_eq!(
                w.iter().map(|o| o.ok).collect::<Vec<_>>(),
                [false, false, false, true]
            );
            assert_eq!(devs.failed_list(), vec![0], "parallel={parallel}");
            assert_eq!(devs.meters[0].get().errors, 3);
            assert_eq!(devs.meters[1].get().write_ops, 1);
        }
    }
}
