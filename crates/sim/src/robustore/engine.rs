//! The event engine of one access: virtual time, filers with fixed-RTT links and caches, disks with a
//! foreground queue (cancellable) and a background stream. Access schemes drive it as a [`Client`].
//!
//! Every message between client and filer takes half the round-trip time. A filer keeps the foreground
//! block requests of the access in its queue and hands the disk one request of `blocking factor`
//! sectors at a time (so queued work can be cancelled, §5.3.3's file-system variant); the disk serves
//! that request and the background requests in arrival order. A cancel removes every queued request
//! it names; the one the disk is serving completes (its bytes still cross the network, but a block cut
//! short is never delivered). Read data leaves the filer over its link at `link_rate` (cache hits cost
//! no disk time), reaches the client half an RTT later.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use ecstack_base::Rng;

use super::cache::Cache;
use super::disk::{bg_service_time, DiskModel};

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
}

/// One foreground block request: a block id (the scheme's), its size and its address on the disk.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub id: u32,
    pub bytes: u64,
    pub addr: u64,
}

/// What a cancel removes from a filer's queue.
#[derive(Clone, Debug)]
pub enum CancelWhat {
    All,
    Ids(Vec<u32>),
    /// Keep only the first `keep` bytes of each named job (0: remove it, as [`CancelWhat::Ids`]).
    /// A job already handed to the disk beyond `keep` ends with the request in service and is
    /// delivered (it holds at least its first `keep` bytes); RRAID-A's halving of a disk's unread data.
    Shrink(Vec<(u32, u64)>),
}

impl CancelWhat {
    /// The bytes of job `id` to keep: `None` when the cancel does not name it.
    fn keep(&self, id: u32) -> Option<u64> {
        match self {
            CancelWhat::All => Some(0),
            CancelWhat::Ids(ids) => ids.contains(&id).then_some(0),
            CancelWhat::Shrink(list) => list.iter().find(|x| x.0 == id).map(|x| x.1),
        }
    }
}

/// A disk of the access: which of the world's disks, its filer, its model, its background stream.
#[derive(Clone, Debug)]
pub struct DiskSetup {
    pub global: usize,
    pub filer: usize,
    pub model: DiskModel,
    /// Mean interval of the background stream (s); none when unloaded.
    pub bg_interval: Option<f64>,
    /// Added to every round trip between the client and this disk (s): half each way.
    pub extra_rtt: f64,
}

/// The scheme's side: told of every block (read) or acknowledgement (write) reaching the client:
/// which disk, which job, and how many of the job's first bytes it carries (all of them, or fewer
/// when a shrinking cancel ended it early; never fewer than the cancel kept).
pub trait Client {
    fn deliver(&mut self, eng: &mut Engine, disk: usize, id: u32, bytes: u64);
}

enum Kind {
    Request { disk: usize, jobs: Vec<Job> },
    Cancel { disk: usize, what: CancelWhat },
    DiskDone { disk: usize },
    BgArrive { disk: usize },
    Deliver { disk: usize, id: u32, bytes: u64 },
}

struct Ev {
    t: f64,
    seq: u64,
    kind: Kind,
}

impl PartialEq for Ev {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Ev {}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ev {
    // Earliest first in a max-heap; ties in the order events were scheduled.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

enum Serving {
    Idle,
    Bg,
    Fg {
        id: u32,
        bytes: u64,
        last: bool,
        cut: bool,
        cached: bool,
        /// Bytes of the job handed to the disk up to and including this request.
        job_bytes: u64,
    },
}

struct DiskState {
    setup: DiskSetup,
    queue: VecDeque<Job>,
    /// Bytes of the front job already handed to the disk.
    front_issued: u64,
    /// When the next foreground request became ready (FIFO against background arrivals).
    fg_since: f64,
    bg: VecDeque<f64>,
    serving: Serving,
    /// The head was moved since the last foreground request: by a background request, or because
    /// this request does not start where the previous foreground one ended.
    repositioned: bool,
    /// Where the previous foreground request ended (none before the first of the access: the
    /// access's first request finds the head at its data, as in Table 6-1's measurement).
    next_addr: Option<u64>,
}

/// Per-disk counters of one access.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiskStats {
    /// Foreground requests (chunks) served.
    pub chunks_done: u64,
    /// Foreground requests removed from the queue by cancels.
    pub chunks_removed: u64,
    /// Block requests received from the client (requests with several blocks count each block).
    pub jobs_requested: u64,
    /// Background service time started while the access was running.
    pub bg_busy: f64,
}

/// The engine: one access in virtual time (the access starts at 0).
pub struct Engine<'a> {
    pub now: f64,
    heap: BinaryHeap<Ev>,
    seq: u64,
    disks: Vec<DiskState>,
    pub stats: Vec<DiskStats>,
    kind: IoKind,
    rtt: f64,
    link_rate: f64,
    link_free: Vec<f64>,
    caches: Option<&'a mut [Cache]>,
    rng: Rng,
    /// Foreground bytes that crossed the network (both directions' payload).
    pub net_bytes: u64,
    /// Foreground bytes the disks read or wrote.
    pub disk_bytes: u64,
    pending_fg: usize,
    live_jobs: usize,
    finished: Option<f64>,
}

impl<'a> Engine<'a> {
    /// `filers` links (and caches when given, one per filer); background streams start `warmup`
    /// seconds before the access so queues are in their steady state.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: IoKind,
        disks: Vec<DiskSetup>,
        filers: usize,
        rtt: f64,
        link_rate: f64,
        caches: Option<&'a mut [Cache]>,
        rng: Rng,
        warmup: f64,
    ) -> Engine<'a> {
        let n = disks.len();
        let mut e = Engine {
            now: -warmup,
            heap: BinaryHeap::new(),
            seq: 0,
            disks: disks
                .into_iter()
                .map(|setup| DiskState {
                    setup,
                    queue: VecDeque::new(),
                    front_issued: 0,
                    fg_since: 0.0,
                    bg: VecDeque::new(),
                    serving: Serving::Idle,
                    repositioned: false,
                    next_addr: None,
                })
                .collect(),
            stats: vec![DiskStats::default(); n],
            kind,
            rtt,
            link_rate,
            link_free: vec![0.0; filers.max(1)],
            caches,
            rng,
            net_bytes: 0,
            disk_bytes: 0,
            pending_fg: 0,
            live_jobs: 0,
            finished: None,
        };
        for d in 0..n {
            if let Some(iv) = e.disks[d].setup.bg_interval {
                let t = -warmup + e.rng.exp(iv);
                e.push(t, Kind::BgArrive { disk: d });
            }
        }
        e
    }

    fn push(&mut self, t: f64, kind: Kind) {
        if !matches!(kind, Kind::DiskDone { .. } | Kind::BgArrive { .. }) {
            self.pending_fg += 1;
        }
        self.seq += 1;
        self.heap.push(Ev {
            t,
            seq: self.seq,
            kind,
        });
    }

    pub fn disks(&self) -> usize {
        self.disks.len()
    }

    /// One way between the client and `disk`'s filer: half the RTT and half the disk's extra one.
    fn half_rtt(&self, disk: usize) -> f64 {
        (self.rtt + self.disks[disk].setup.extra_rtt) / 2.0
    }

    /// Send block requests to `disk` now (they reach its filer half an RTT later).
    pub fn request(&mut self, disk: usize, jobs: Vec<Job>) {
        self.request_at(self.now, disk, jobs)
    }

    /// Send block requests to `disk` at time `t` (the first requests of an access, before `run`).
    pub fn request_at(&mut self, t: f64, disk: usize, jobs: Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        self.push(t + self.half_rtt(disk), Kind::Request { disk, jobs });
    }

    /// Send a cancel to `disk` now.
    pub fn cancel(&mut self, disk: usize, what: CancelWhat) {
        let t = self.now + self.half_rtt(disk);
        self.push(t, Kind::Cancel { disk, what });
    }

    /// The access is complete at `t` (≥ now: e.g. after the last decode).
    pub fn finish(&mut self, t: f64) {
        if self.finished.is_none() {
            self.finished = Some(t);
        }
    }

    pub fn finished(&self) -> Option<f64> {
        self.finished
    }

    /// Run until the client has finished and no foreground work or message is left anywhere.
    /// Returns the completion time, or `None` if the client never finished (the scheme could not
    /// complete with the blocks that exist).
    pub fn run(&mut self, client: &mut dyn Client) -> Option<f64> {
        while !(self.finished.is_some() && self.pending_fg == 0 && self.live_jobs == 0) {
            if self.finished.is_none()
                && self.pending_fg == 0
                && self.live_jobs == 0
                && self.now >= 0.0
            {
                // Nothing left in flight and the client is not done: it never will be.
                return None;
            }
            let Some(ev) = self.heap.pop() else { break };
            self.now = ev.t;
            match ev.kind {
                Kind::Request { disk, jobs } => {
                    self.pending_fg -= 1;
                    let d = &mut self.disks[disk];
                    if d.queue.is_empty() {
                        d.fg_since = self.now;
                    }
                    self.stats[disk].jobs_requested += jobs.len() as u64;
                    self.live_jobs += jobs.len();
                    d.queue.extend(jobs);
                    self.try_start(disk);
                }
                Kind::Cancel { disk, what } => {
                    self.pending_fg -= 1;
                    self.do_cancel(disk, &what);
                }
                Kind::DiskDone { disk } => self.complete(disk),
                Kind::BgArrive { disk } => {
                    self.disks[disk].bg.push_back(self.now);
                    if let Some(iv) = self.disks[disk].setup.bg_interval {
                        let t = self.now + self.rng.exp(iv);
                        self.push(t, Kind::BgArrive { disk });
                    }
                    self.try_start(disk);
                }
                Kind::Deliver { disk, id, bytes } => {
                    self.pending_fg -= 1;
                    client.deliver(self, disk, id, bytes);
                }
            }
        }
        self.finished
    }

    fn chunks(bytes: u64, chunk: u64) -> u64 {
        bytes.div_ceil(chunk.max(1))
    }

    fn do_cancel(&mut self, disk: usize, what: &CancelWhat) {
        let chunk = self.disks[disk].setup.model.chunk_bytes();
        let now = self.now;
        let d = &mut self.disks[disk];
        let mut removed_chunks = 0;
        let mut removed_jobs = 0;
        let mut deliver_now = None;
        // The front job may be partly handed to the disk.
        let front = d.queue.front().map(|j| (j.id, j.bytes));
        if let (true, Some((fid, fbytes))) = (d.front_issued > 0, front) {
            if let Some(keep) = what.keep(fid) {
                if keep > d.front_issued {
                    // Still unissued bytes to keep: the job stays, shorter.
                    let keep = keep.min(fbytes);
                    removed_chunks += Engine::chunks(fbytes - d.front_issued, chunk)
                        - Engine::chunks(keep - d.front_issued, chunk);
                    d.queue.front_mut().expect("front exists").bytes = keep;
                } else {
                    // Everything to keep is issued: drop the rest.
                    d.queue.pop_front();
                    removed_chunks += Engine::chunks(fbytes - d.front_issued, chunk);
                    let issued = std::mem::take(&mut d.front_issued);
                    match &mut d.serving {
                        Serving::Fg { id, last, cut, .. } if *id == fid => {
                            *last = true;
                            // Delivered when the request in service ends, unless nothing is kept.
                            *cut = keep == 0;
                        }
                        _ if keep > 0 => {
                            // Its kept bytes were all read before: they leave the filer now.
                            removed_jobs += 1;
                            deliver_now = Some((fid, issued));
                        }
                        _ => removed_jobs += 1,
                    }
                }
            }
        }
        let skip_front = d.front_issued > 0;
        let mut kept = VecDeque::with_capacity(d.queue.len());
        for (i, mut j) in d.queue.drain(..).enumerate() {
            if i == 0 && skip_front {
                kept.push_back(j);
                continue;
            }
            match what.keep(j.id) {
                Some(0) => {
                    removed_chunks += Engine::chunks(j.bytes, chunk);
                    removed_jobs += 1;
                }
                Some(keep) if keep < j.bytes => {
                    removed_chunks += Engine::chunks(j.bytes, chunk) - Engine::chunks(keep, chunk);
                    j.bytes = keep;
                    kept.push_back(j);
                }
                _ => kept.push_back(j),
            }
        }
        d.queue = kept;
        let filer = d.setup.filer;
        self.live_jobs -= removed_jobs;
        self.stats[disk].chunks_removed += removed_chunks;
        if let Some((id, bytes)) = deliver_now {
            let t = self.link_free[filer].max(now) + self.half_rtt(disk);
            self.push(t, Kind::Deliver { disk, id, bytes });
        }
    }

    fn try_start(&mut self, disk: usize) {
        let now = self.now;
        let d = &mut self.disks[disk];
        if !matches!(d.serving, Serving::Idle) {
            return;
        }
        let bg_first = match (d.bg.front(), d.queue.is_empty()) {
            (None, true) => return,
            (Some(_), true) => true,
            (None, false) => false,
            (Some(&a), false) => a < d.fg_since,
        };
        if bg_first {
            d.bg.pop_front();
            let dur = bg_service_time(&mut self.rng);
            if self.finished.is_none() && now >= 0.0 {
                self.stats[disk].bg_busy += dur;
            }
            d.serving = Serving::Bg;
            d.repositioned = true;
            self.push(now + dur, Kind::DiskDone { disk });
            return;
        }
        let chunk = d.setup.model.chunk_bytes();
        let job = d.queue.front().expect("queue not empty");
        let bytes = chunk.min(job.bytes - d.front_issued);
        let addr = job.addr + d.front_issued;
        let id = job.id;
        if d.next_addr.is_some_and(|n| n != addr) {
            // A jump (RRAID-A's piece in another replica region, a skip after a shrink).
            d.repositioned = true;
        }
        d.next_addr = Some(addr + bytes);
        d.front_issued += bytes;
        let job_bytes = d.front_issued;
        let last = d.front_issued >= job.bytes;
        if last {
            d.queue.pop_front();
            d.front_issued = 0;
        }
        let global = d.setup.global;
        let filer = d.setup.filer;
        let mut cached = false;
        if self.kind == IoKind::Read {
            if let Some(c) = self.caches.as_deref_mut() {
                let c = &mut c[filer];
                cached = c.contains_range(global, addr, bytes);
                if !cached {
                    c.insert_range(global, addr, bytes);
                }
            }
        }
        let dur = if cached {
            0.0
        } else {
            let t = d
                .setup
                .model
                .chunk_time(bytes, d.repositioned, &mut self.rng);
            d.repositioned = false;
            t
        };
        d.serving = Serving::Fg {
            id,
            bytes,
            last,
            cut: false,
            cached,
            job_bytes,
        };
        self.push(now + dur, Kind::DiskDone { disk });
    }

    fn complete(&mut self, disk: usize) {
        let now = self.now;
        let serving = std::mem::replace(&mut self.disks[disk].serving, Serving::Idle);
        if let Serving::Fg {
            id,
            bytes,
            last,
            cut,
            cached,
            job_bytes,
        } = serving
        {
            self.disks[disk].fg_since = now;
            self.stats[disk].chunks_done += 1;
            self.net_bytes += bytes;
            if !cached {
                self.disk_bytes += bytes;
            }
            let arrive = match self.kind {
                IoKind::Read => {
                    let f = self.disks[disk].setup.filer;
                    let start = self.link_free[f].max(now);
                    self.link_free[f] = start + bytes as f64 / self.link_rate;
                    self.link_free[f] + self.half_rtt(disk)
                }
                IoKind::Write => now + self.half_rtt(disk),
            };
            if last {
                self.live_jobs -= 1;
                if !cut {
                    self.push(
                        arrive,
                        Kind::Deliver {
                            disk,
                            id,
                            bytes: job_bytes,
                        },
                    );
                }
            }
        }
        self.try_start(disk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cancels everything at the first delivery.
    struct CancelAtFirst {
        delivered: Vec<u32>,
    }
    impl Client for CancelAtFirst {
        fn deliver(&mut self, eng: &mut Engine, disk: usize, id: u32, _bytes: u64) {
            self.delivered.push(id);
            if self.delivered.len() == 1 {
                eng.cancel(disk, CancelWhat::All);
                eng.finish(eng.now);
            }
        }
    }

    /// A read engine over one disk that serves a 4 KiB chunk per second, links of `rtt` seconds.
    fn one_disk_reader(rtt: f64) -> Engine<'static> {
        let setup = DiskSetup {
            global: 0,
            filer: 0,
            model: DiskModel::fixed(0, 1.0),
            bg_interval: None,
            extra_rtt: 0.0,
        };
        Engine::new(
            IoKind::Read,
            vec![setup],
            1,
            rtt,
            f64::INFINITY,
            None,
            Rng::new(1),
            0.0,
        )
    }

    #[test]
    fn cancellation_removes_exactly_the_queued_requests() {
        // One disk, 1 s per 4 KiB chunk, ten blocks of 4 chunks, RTT 0.5 s. Requests reach the filer at
        // 0.25; block 0's four chunks end at 4.25; it reaches the client at 4.5, the cancel the filer at
        // 4.75, while block 1's first chunk is in service (4.25..5.25): that chunk completes, block 1's
        // three other chunks and blocks 2..9 (32 chunks) are removed, block 1 is never delivered.
        let mut eng = one_disk_reader(0.5);
        let jobs: Vec<Job> = (0..10)
            .map(|i| Job {
                id: i,
                bytes: 4 * 4096,
                addr: i as u64 * 4 * 4096,
            })
            .collect();
        eng.request(0, jobs);
        let mut c = CancelAtFirst { delivered: vec![] };
        let done = eng.run(&mut c).unwrap();
        assert_eq!(done, 4.5);
        assert_eq!(c.delivered, vec![0]);
        let s = &eng.stats[0];
        assert_eq!(s.chunks_done, 5, "block 0 and the chunk in service");
        assert_eq!(
            s.chunks_removed,
            3 + 8 * 4,
            "the rest of block 1 and blocks 2..9"
        );
        assert_eq!(s.chunks_done + s.chunks_removed, 40);
        assert_eq!(eng.disk_bytes, 5 * 4096);
        assert_eq!(eng.now, 5.25, "the engine ran until the served chunk ended");
    }

    #[test]
    fn cancel_by_id_leaves_the_others() {
        let mut eng = one_disk_reader(0.0);
        let jobs: Vec<Job> = (0..4)
            .map(|i| Job {
                id: i,
                bytes: 4096,
                addr: i as u64 * 4096,
            })
            .collect();
        eng.request(0, jobs);
        eng.cancel(0, CancelWhat::Ids(vec![2]));
        struct All(Vec<u32>);
        impl Client for All {
            fn deliver(&mut self, eng: &mut Engine, _: usize, id: u32, _bytes: u64) {
                self.0.push(id);
                if self.0.len() == 3 {
                    eng.finish(eng.now);
                }
            }
        }
        let mut c = All(vec![]);
        assert_eq!(eng.run(&mut c), Some(3.0));
        assert_eq!(c.0, vec![0, 1, 3]);
        assert_eq!(eng.stats[0].chunks_removed, 1);
    }

    /// Records deliveries (job, time, bytes); at the first one, shrinks job 1 to its first chunk
    /// (already in service).
    struct ShrinkAtFirst(Vec<(u32, f64, u64)>);
    impl Client for ShrinkAtFirst {
        fn deliver(&mut self, eng: &mut Engine, disk: usize, id: u32, bytes: u64) {
            self.0.push((id, eng.now, bytes));
            if self.0.len() == 1 {
                eng.cancel(disk, CancelWhat::Shrink(vec![(1, 4096)]));
            }
            if id == 1 {
                eng.finish(eng.now);
            }
        }
    }

    #[test]
    fn shrink_keeps_the_first_bytes_of_queued_and_in_service_jobs() {
        // Queued: job 0 (4 chunks) shrunk to 2 chunks, job 1 (4 chunks) to 1, job 2 removed.
        let mut eng = one_disk_reader(0.0);
        let jobs: Vec<Job> = (0..3)
            .map(|i| Job {
                id: i,
                bytes: 4 * 4096,
                addr: i as u64 * 4 * 4096,
            })
            .collect();
        eng.request(0, jobs);
        eng.cancel(
            0,
            CancelWhat::Shrink(vec![(0, 2 * 4096), (1, 4096), (2, 0)]),
        );
        struct All(Vec<(u32, f64, u64)>);
        impl Client for All {
            fn deliver(&mut self, eng: &mut Engine, _: usize, id: u32, bytes: u64) {
                self.0.push((id, eng.now, bytes));
                if id == 1 {
                    eng.finish(eng.now);
                }
            }
        }
        let mut c = All(vec![]);
        assert_eq!(eng.run(&mut c), Some(3.0));
        assert_eq!(c.0, vec![(0, 2.0, 2 * 4096), (1, 3.0, 4096)]);
        assert_eq!(eng.stats[0].chunks_done, 3);
        assert_eq!(eng.stats[0].chunks_removed, 2 + 3 + 4);

        // In service: job 0 (one chunk) arrives at 1.0, when job 1's first chunk has started; the
        // shrink to that chunk ends job 1 with it (delivered at 2.0 with its 4096 bytes, not cut),
        // its 3 other chunks removed.
        let mut eng = one_disk_reader(0.0);
        eng.request(
            0,
            vec![
                Job {
                    id: 0,
                    bytes: 4096,
                    addr: 0,
                },
                Job {
                    id: 1,
                    bytes: 4 * 4096,
                    addr: 4096,
                },
            ],
        );
        let mut c = ShrinkAtFirst(vec![]);
        assert_eq!(eng.run(&mut c), Some(2.0));
        assert_eq!(c.0, vec![(0, 1.0, 4096), (1, 2.0, 4096)]);
        assert_eq!(eng.stats[0].chunks_removed, 3);
        assert_eq!(eng.disk_bytes, 2 * 4096);
    }
}
