//! The OSD's block I/O queue: robust objects' coded blocks are read and written by worker threads
//! the OSD owns (not `spawn_blocking`, which nothing cancels), so that a block stream's reads can
//! be taken back. Each queued job belongs to a stream; [`BlockIo::cancel`] (a GetBlocks reply
//! dropped) removes the stream's queued jobs and makes the one in service stop at its next 4 KiB
//! piece. High-priority streams' jobs are served first; block-file compactions
//! ([`BlockIo::compact`]) last, and one in service stops between records to serve every job
//! queued meanwhile, so it never holds up a stream's reads or writes for longer than a record.
//!
//! The queue also measures the store: read and write bytes over busy time (time with at least one
//! job in service), decayed with a half-life of [`METER_HALF_LIFE`], which admission control
//! (`admission.rs`) and the heartbeats' `load` use; [`BlockIo::probe`] gives a figure before any
//! traffic.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;

use crate::chunk_store::{BlockKey, ChunkStore, ChunkStoreError, Compacted, ObjectBlocks};

/// How fast a measurement fades: its weight halves every this long.
pub const METER_HALF_LIFE: Duration = Duration::from_secs(10);
/// A rate needs at least this much busy time behind it.
const METER_BUSY_MIN: Duration = Duration::from_micros(100);

/// Bytes over busy time, decayed: a device's throughput while it works, whatever its idle time.
#[derive(Debug)]
pub struct Meter {
    st: Mutex<MeterState>,
}

#[derive(Debug)]
struct MeterState {
    bytes: f64,
    busy: f64,
    active: u32,
    since: Instant,
    decayed_at: Instant,
}

impl Default for Meter {
    fn default() -> Self {
        let now = Instant::now();
        Meter {
            st: Mutex::new(MeterState {
                bytes: 0.0,
                busy: 0.0,
                active: 0,
                since: now,
                decayed_at: now,
            }),
        }
    }
}

impl MeterState {
    fn decay(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.decayed_at).as_secs_f64();
        let f = 0.5f64.powf(dt / METER_HALF_LIFE.as_secs_f64());
        self.bytes *= f;
        self.busy *= f;
        self.decayed_at = now;
    }
}

impl Meter {
    fn lock(&self) -> std::sync::MutexGuard<'_, MeterState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A job starts.
    pub fn start(&self) {
        let mut st = self.lock();
        let now = Instant::now();
        st.decay(now);
        if st.active > 0 {
            st.busy += now.saturating_duration_since(st.since).as_secs_f64();
        }
        st.since = now;
        st.active += 1;
    }

    /// A job that moved `bytes` ends.
    pub fn finish(&self, bytes: u64) {
        let mut st = self.lock();
        let now = Instant::now();
        st.decay(now);
        st.busy += now.saturating_duration_since(st.since).as_secs_f64();
        st.since = now;
        st.bytes += bytes as f64;
        st.active = st.active.saturating_sub(1);
    }

    /// Bytes per second while busy, `None` before enough was measured.
    pub fn rate(&self) -> Option<f64> {
        let st = self.lock();
        let now = Instant::now();
        let mut busy = st.busy;
        if st.active > 0 {
            busy += now.saturating_duration_since(st.since).as_secs_f64();
        }
        (busy >= METER_BUSY_MIN.as_secs_f64() && st.bytes > 0.0).then(|| st.bytes / busy)
    }
}

/// One stream's hold on its queued jobs: [`BlockIo::cancel`] takes them back.
#[derive(Debug, Default)]
pub struct StreamCtl {
    id: u64,
    cancelled: AtomicBool,
}

impl StreamCtl {
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}

/// The result of a block read: the bytes, `None` if the stream was cancelled first.
pub type ReadResult = Result<Option<Vec<u8>>, ChunkStoreError>;

enum Work {
    Read {
        blocks: Arc<ObjectBlocks>,
        index: usize,
        reply: tokio::sync::oneshot::Sender<ReadResult>,
    },
    Write {
        object: u64,
        block_bytes: u32,
        blocks: Vec<(BlockKey, Bytes)>,
        reply: tokio::sync::oneshot::Sender<Result<(), ChunkStoreError>>,
    },
    Compact {
        object: u64,
        reply: tokio::sync::oneshot::Sender<Result<Option<Compacted>, ChunkStoreError>>,
    },
}

struct Job {
    stream: Arc<StreamCtl>,
    work: Work,
}

#[derive(Default)]
struct Queue {
    high: VecDeque<Job>,
    normal: VecDeque<Job>,
    /// Compactions: served when no other job waits, not counted in [`BlockIo::depth`].
    low: VecDeque<Job>,
    stop: bool,
}

/// The counters the queue keeps (shared with the OSD's [`crate::metrics::Metrics`]).
#[derive(Debug, Clone, Default)]
pub struct BlockCounters {
    pub blocks_written: Counter,
    pub blocks_read: Counter,
    pub blocks_lost: Counter,
    pub cancelled_reads: Counter,
    pub bytes_read_after_cancel: Counter,
}

struct Shared {
    store: Arc<dyn ChunkStore>,
    queue: Mutex<Queue>,
    ready: Condvar,
    in_service: AtomicU32,
    next_stream: AtomicU64,
    pub read: Meter,
    pub write: Meter,
    counters: BlockCounters,
}

/// The block I/O queue and its workers (stopped and joined when it is dropped).
pub struct BlockIo {
    shared: Arc<Shared>,
    threads: usize,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for BlockIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockIo({} threads)", self.threads)
    }
}

impl Drop for BlockIo {
    /// Stops the workers and waits for them: a worker's job in progress ends first, and the
    /// workers' hold on the store is gone when this returns (so a store that does work when it is
    /// dropped, such as a write-back cache writing its pages back, does it before the process
    /// ends; a detached worker would be killed by the exit).
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.ready.notify_all();
        let me = std::thread::current().id();
        for h in self.handles.drain(..) {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The object id the store probe writes (never one the MDS hands out).
pub const PROBE_OBJECT: u64 = u64::MAX;
/// The probe: this many blocks of [`PROBE_BLOCK_BYTES`] written, then read.
const PROBE_BLOCKS: usize = 4;
const PROBE_BLOCK_BYTES: u32 = 1 << 20;

impl BlockIo {
    /// A queue over `store` served by `threads` workers (at least 1).
    pub fn new(store: Arc<dyn ChunkStore>, threads: usize, counters: BlockCounters) -> BlockIo {
        let shared = Arc::new(Shared {
            store,
            queue: Mutex::default(),
            ready: Condvar::new(),
            in_service: AtomicU32::new(0),
            next_stream: AtomicU64::new(1),
            read: Meter::default(),
            write: Meter::default(),
            counters,
        });
        let threads = threads.max(1);
        let handles = (0..threads)
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("osd-blockio-{i}"))
                    .spawn(move || worker(&shared))
                    .expect("spawning a block I/O thread")
            })
            .collect();
        BlockIo {
            shared,
            threads,
            handles,
        }
    }

    /// A new stream's hold on its jobs.
    pub fn stream(&self) -> Arc<StreamCtl> {
        Arc::new(StreamCtl {
            id: self.shared.next_stream.fetch_add(1, Ordering::Relaxed),
            cancelled: AtomicBool::new(false),
        })
    }

    /// Queues the job `work` makes (given where its result goes); the result's receiver.
    fn queue<T>(
        &self,
        stream: &Arc<StreamCtl>,
        high: bool,
        work: impl FnOnce(tokio::sync::oneshot::Sender<T>) -> Work,
    ) -> tokio::sync::oneshot::Receiver<T> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let job = Job {
            stream: stream.clone(),
            work: work(reply),
        };
        let mut q = self.shared.lock();
        if high {
            q.high.push_back(job);
        } else {
            q.normal.push_back(job);
        }
        drop(q);
        self.shared.ready.notify_one();
        rx
    }

    /// Queues a read of block `index` of `blocks` for `stream`.
    pub fn read(
        &self,
        stream: &Arc<StreamCtl>,
        high: bool,
        blocks: Arc<ObjectBlocks>,
        index: usize,
    ) -> tokio::sync::oneshot::Receiver<ReadResult> {
        self.queue(stream, high, |reply| Work::Read {
            blocks,
            index,
            reply,
        })
    }

    /// Queues a batch of blocks to append (durable when the reply comes).
    pub fn write(
        &self,
        stream: &Arc<StreamCtl>,
        high: bool,
        object: u64,
        block_bytes: u32,
        blocks: Vec<(BlockKey, Bytes)>,
    ) -> tokio::sync::oneshot::Receiver<Result<(), ChunkStoreError>> {
        self.queue(stream, high, |reply| Work::Write {
            object,
            block_bytes,
            blocks,
            reply,
        })
    }

    /// Queues a compaction of `object`'s block file ([`ChunkStore::compact_blocks`]) behind every
    /// other job: it copies record by record, serving the jobs queued meanwhile between records.
    pub fn compact(
        &self,
        object: u64,
    ) -> tokio::sync::oneshot::Receiver<Result<Option<Compacted>, ChunkStoreError>> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let job = Job {
            stream: self.stream(),
            work: Work::Compact { object, reply },
        };
        self.shared.lock().low.push_back(job);
        self.shared.ready.notify_one();
        rx
    }

    /// The stream is gone: its queued reads are dropped (counted as cancelled), the one in
    /// service stops at its next 4 KiB piece. Queued writes still run (their blocks were sent).
    pub fn cancel(&self, stream: &StreamCtl) {
        stream.cancelled.store(true, Ordering::Relaxed);
        let mut guard = self.shared.lock();
        let q = &mut *guard;
        let mut dropped = 0u64;
        for lane in [&mut q.high, &mut q.normal] {
            lane.retain(|j| {
                let drop_it = j.stream.id == stream.id && matches!(j.work, Work::Read { .. });
                dropped += u64::from(drop_it);
                !drop_it
            });
        }
        drop(guard);
        self.shared.counters.cancelled_reads.inc_by(dropped);
    }

    /// Jobs queued or in service now.
    pub fn depth(&self) -> u32 {
        let q = self.shared.lock();
        (q.high.len() + q.normal.len()) as u32 + self.shared.in_service.load(Ordering::Relaxed)
    }

    /// The store's measured read and write throughput, bytes/s.
    pub fn rates(&self) -> (Option<f64>, Option<f64>) {
        (self.shared.read.rate(), self.shared.write.rate())
    }

    /// Measures the store before any traffic: writes [`PROBE_BLOCKS`] blocks of 1 MiB to a probe
    /// object, reads them back through the queue and deletes them.
    pub async fn probe(&self) -> Result<(), ChunkStoreError> {
        let store = self.shared.store.clone();
        let clear = move || store.delete_blocks(PROBE_OBJECT, None).map(|_| ());
        let (c1, c2) = (clear.clone(), clear);
        run_blocking(c1).await?;
        let stream = self.stream();
        let data = Bytes::from(
            (0..PROBE_BLOCK_BYTES as usize)
                .map(|i| (i * 131 + i / 4099) as u8)
                .collect::<Vec<u8>>(),
        );
        let blocks = (0..PROBE_BLOCKS as u32)
            .map(|id| (BlockKey { id, version: 1 }, data.clone()))
            .collect();
        let written = self
            .write(&stream, false, PROBE_OBJECT, PROBE_BLOCK_BYTES, blocks)
            .await;
        let result = async {
            written.map_err(|_| stopped())??;
            let store = self.shared.store.clone();
            let opened = run_blocking(move || store.open_blocks(PROBE_OBJECT)).await?;
            if let Some(b) = opened {
                let b = Arc::new(b);
                for i in 0..b.table.blocks.len() {
                    self.read(&stream, false, b.clone(), i)
                        .await
                        .map_err(|_| stopped())??;
                }
            }
            Ok(())
        }
        .await;
        run_blocking(c2).await?;
        result
    }
}

fn stopped() -> ChunkStoreError {
    ChunkStoreError::BlocksInvalid {
        object: PROBE_OBJECT,
        message: "the block I/O queue stopped".into(),
    }
}

async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ChunkStoreError> + Send + 'static,
) -> Result<T, ChunkStoreError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(ChunkStoreError::BlocksInvalid {
            object: PROBE_OBJECT,
            message: format!("probe task failed: {e}"),
        })
    })
}

fn worker(shared: &Shared) {
    loop {
        let job = {
            let mut q = shared.lock();
            loop {
                if q.stop {
                    return;
                }
                if let Some(j) = q.high.pop_front().or_else(|| q.normal.pop_front()) {
                    shared.in_service.fetch_add(1, Ordering::Relaxed);
                    break j;
                }
                if let Some(j) = q.low.pop_front() {
                    drop(q);
                    compact(shared, j);
                    q = shared.lock();
                    continue;
                }
                q = shared.ready.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        serve(shared, job);
        shared.in_service.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves a compaction job; between records it serves every high and normal job queued (their
/// own worker, for the while), and gives up if the queue stops.
fn compact(shared: &Shared, job: Job) {
    let Work::Compact { object, reply } = job.work else {
        debug_assert!(false, "only compactions wait in the low lane");
        return;
    };
    let r = shared.store.compact_blocks(object, &mut || loop {
        let next = {
            let mut q = shared.lock();
            if q.stop {
                return false;
            }
            let j = q.high.pop_front().or_else(|| q.normal.pop_front());
            if j.is_some() {
                shared.in_service.fetch_add(1, Ordering::Relaxed);
            }
            j
        };
        match next {
            Some(j) => {
                serve(shared, j);
                shared.in_service.fetch_sub(1, Ordering::Relaxed);
            }
            None => return true,
        }
    });
    let _ = reply.send(r);
}

fn serve(shared: &Shared, job: Job) {
    let stream = job.stream;
    match job.work {
        Work::Read {
            blocks,
            index,
            reply,
        } => {
            if stream.is_cancelled() {
                shared.counters.cancelled_reads.inc();
                return;
            }
            shared.read.start();
            let mut last = 0u64;
            let mut read = 0u64;
            let r = blocks.read_block(index, &mut |done| {
                read = done;
                if stream.is_cancelled() {
                    // The piece read since the last check may have been read after the cancel.
                    shared.counters.bytes_read_after_cancel.inc_by(done - last);
                    return false;
                }
                last = done;
                true
            });
            let bytes = match &r {
                Ok(Some(d)) => d.len() as u64 + crate::chunk_store::BLOCK_HEAD_BYTES,
                _ => read,
            };
            shared.read.finish(bytes);
            match &r {
                Ok(Some(_)) => shared.counters.blocks_read.inc(),
                Ok(None) => shared.counters.cancelled_reads.inc(),
                Err(e) if e.is_corruption() => shared.counters.blocks_lost.inc(),
                Err(_) => 0,
            };
            let _ = reply.send(r);
        }
        Work::Write {
            object,
            block_bytes,
            blocks,
            reply,
        } => {
            shared.write.start();
            let refs: Vec<(BlockKey, &[u8])> = blocks.iter().map(|(k, d)| (*k, &d[..])).collect();
            let r = shared.store.put_blocks(object, block_bytes, &refs);
            let bytes = if r.is_ok() {
                shared.counters.blocks_written.inc_by(blocks.len() as u64);
                blocks.len() as u64 * crate::chunk_store::record_span(block_bytes)
            } else {
                0
            };
            shared.write.finish(bytes);
            let _ = reply.send(r);
        }
        // Only queued in the low lane (served by `compact`); whole if it ever gets here.
        Work::Compact { object, reply } => {
            let _ = reply.send(shared.store.compact_blocks(object, &mut || true));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meter_divides_bytes_by_busy_time() {
        let m = Meter::default();
        assert_eq!(m.rate(), None);
        m.start();
        std::thread::sleep(Duration::from_millis(20));
        m.finish(2_000_000);
        // Idle time does not count.
        std::thread::sleep(Duration::from_millis(30));
        let r = m.rate().unwrap();
        assert!(r > 2e7 && r < 1.1e8, "{r}");
    }
}
