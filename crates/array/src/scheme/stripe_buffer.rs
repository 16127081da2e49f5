//! The eplog *stripe buffer* (EPLOG §3.1): the chunks of write requests that are in flight at the
//! same time are gathered in memory and leave together, as shared log stripes, in one round of
//! device writes (group commit).
//!
//! A request that arrives while fewer than `n` batches are being written (default 2) becomes a
//! *leader*: it takes every request queued so far (its own included), writes them as one batch and
//! hands the outcome to the others. Requests that arrive otherwise queue up and form the next batch,
//! so the batch size follows the load: under light load every request is written at once (no added
//! latency), under heavy load many requests share log stripes and log-device writes. A request
//! returns only after its batch is on the devices, so unlike a write-back cache no acknowledged write
//! is only in memory.
//!
//! Whether waiting for a batch slot pays depends on the devices. Devices that serve one request at a
//! time (HDD log devices, as in EPLOG's testbed) gain from every merged write; a device that serves
//! many requests at once (an SSD, or a virtual disk) may do more work per second when each request
//! is written at once. So the buffer also has an *eager* mode, in which a request leads at once
//! while the batches in flight hold fewer than 4n requests, and it picks the mode by measurement:
//! it runs an epoch of requests in each mode, keeps the one that completed more requests per second
//! (eager on a tie), and probes again after a while: after 8 epochs, and twice as long each time a
//! probe confirms the mode it already had (up to 128 epochs), so a steady workload spends ever less
//! time in the worse mode while a change of workload is still noticed.
//!
//! Requests hold their stripe locks while queued, so no two queued requests touch the same chunk.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};

use super::{BatchStats, WriteOutcome, DEFAULT_IN_FLIGHT};
use crate::clock::Clock;
use crate::{ArrayError, Result};

/// In eager mode a request is written at once, whatever the batches in flight, while fewer than
/// this many write requests per allowed batch are being written.
const EAGER_PER_BATCH: usize = 4;

/// Requests completed per measuring epoch of the mode choice.
const EPOCH_JOBS: u64 = 1024;

/// Epochs spent in the chosen mode before both are measured again; doubled each time a probe keeps
/// the mode, up to `MAX_STAY_EPOCHS`, and back to `STAY_EPOCHS` when a probe changes it.
const STAY_EPOCHS: u32 = 8;
const MAX_STAY_EPOCHS: u32 = 128;

/// The eager mode is kept unless batching completes this much more per second.
const TIE: f64 = 1.05;

/// The mode choice: measuring the first mode, measuring the second, or staying.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    ProbeFirst,
    ProbeSecond { first_rate: f64 },
    Stay { left: u32 },
}

/// Upper bound on the requests of one batch (keeps a batch's buffers and its log stripes bounded).
const MAX_BATCH: usize = 64;

/// Gathers jobs of type `J` from concurrent callers and runs them in batches.
pub(crate) struct StripeBuffer<J> {
    st: Mutex<State<J>>,
    cv: Condvar,
}

struct State<J> {
    next: u64,
    queue: Vec<(u64, J)>,
    /// Batches being written now, and how many may be at once.
    leaders: usize,
    max_leaders: usize,
    /// Write requests in the batches being written now.
    in_flight: usize,
    /// Current mode (see the module notes), and how it is being chosen.
    eager: bool,
    phase: Phase,
    /// Epochs the next stay lasts.
    stay: u32,
    epoch_start: Option<std::time::Instant>,
    /// Measures the epochs of the mode choice.
    clock: Clock,
    epoch_jobs: u64,
    eager_epochs: u64,
    batch_epochs: u64,
    done: HashMap<u64, Result<WriteOutcome>>,
    batches: u64,
    jobs: u64,
    write_ns: u64,
}

impl<J> Default for StripeBuffer<J> {
    fn default() -> Self {
        StripeBuffer {
            st: Mutex::new(State {
                next: 0,
                queue: Vec::new(),
                leaders: 0,
                max_leaders: DEFAULT_IN_FLIGHT,
                in_flight: 0,
                eager: true,
                phase: Phase::ProbeFirst,
                stay: STAY_EPOCHS,
                epoch_start: None,
                clock: Clock::system(),
                epoch_jobs: 0,
                eager_epochs: 0,
                batch_epochs: 0,
                done: HashMap::new(),
                batches: 0,
                jobs: 0,
                write_ns: 0,
            }),
            cv: Condvar::new(),
        }
    }
}

impl<J> StripeBuffer<J> {
    fn lock(&self) -> MutexGuard<'_, State<J>> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue `job` and return the outcome of the batch that carried it. `run` writes a batch; it is
    /// called by whichever caller leads that batch, without the buffer's lock held.
    pub fn submit(
        &self,
        job: J,
        run: impl Fn(Vec<J>) -> Result<WriteOutcome>,
    ) -> Result<WriteOutcome> {
        let mut st = self.lock();
        let me = st.next;
        st.next += 1;
        st.queue.push((me, job));
        loop {
            if let Some(r) = st.done.remove(&me) {
                return r;
            }
            // Eager mode, light load (few writes on the devices): no waiting.
            let eager = st.eager && st.in_flight < EAGER_PER_BATCH * st.max_leaders;
            if (st.leaders < st.max_leaders || eager) && st.queue.iter().any(|(t, _)| *t == me) {
                st.leaders += 1;
                let take = st.queue.len().min(MAX_BATCH);
                // Our own job is in the batch: it may sit past MAX_BATCH, so move it to the front.
                let at = st.queue.iter().position(|(t, _)| *t == me).expect("queued");
                st.queue.swap(0, at);
                let batch: Vec<(u64, J)> = st.queue.drain(..take).collect();
                st.batches += 1;
                st.jobs += batch.len() as u64;
                st.in_flight += batch.len();
                let size = batch.len();
                drop(st);
                let (tickets, jobs): (Vec<u64>, Vec<J>) = batch.into_iter().unzip();
                // Should `run` panic, the guard still gives up the leader role and answers the
                // other requests of the batch, so they do not wait forever.
                let mut guard = Leading {
                    buffer: self,
                    tickets,
                    size,
                };
                let t = std::time::Instant::now();
                let r = run(jobs);
                let ns = t.elapsed().as_nanos() as u64;
                let mut st = self.lock();
                st.write_ns += ns;
                st.completed(size as u64);
                guard.finish(&mut st, |_| share(&r));
                drop(st);
                drop(guard);
                return r;
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The clock that times the measuring epochs of the mode choice.
    pub fn set_clock(&self, clock: Clock) {
        self.lock().clock = clock;
    }

    /// How many batches may be written at the same time (at least 1).
    pub fn set_in_flight(&self, n: usize) {
        self.lock().max_leaders = n.max(1);
        self.cv.notify_all();
    }

    pub fn stats(&self) -> BatchStats {
        let st = self.lock();
        BatchStats {
            batches: st.batches,
            requests: st.jobs,
            write_seconds: st.write_ns as f64 / 1e9,
            eager_epochs: st.eager_epochs,
            batch_epochs: st.batch_epochs,
        }
    }

    pub fn reset_stats(&self) {
        let mut st = self.lock();
        st.batches = 0;
        st.jobs = 0;
        st.write_ns = 0;
        st.eager_epochs = 0;
        st.batch_epochs = 0;
    }
}

/// The leader role of one batch: `finish` hands the outcome to the batch's other requests and gives
/// the role up; dropped unfinished (the batch's `run` panicked), it does so with an error.
struct Leading<'a, J> {
    buffer: &'a StripeBuffer<J>,
    /// The batch's tickets, the leader's own first; emptied once finished.
    tickets: Vec<u64>,
    size: usize,
}

impl<J> Leading<'_, J> {
    fn finish(&mut self, st: &mut State<J>, outcome: impl Fn(u64) -> Result<WriteOutcome>) {
        assert!(!self.tickets.is_empty(), "a batch is finished once");
        assert!(st.leaders > 0 && st.in_flight >= self.size);
        st.leaders -= 1;
        st.in_flight -= self.size;
        for &t in &self.tickets[1..] {
            let fresh = st.done.insert(t, outcome(t)).is_none();
            assert!(fresh, "request {t} answered twice");
        }
        self.tickets.clear();
    }
}

impl<J> Drop for Leading<'_, J> {
    fn drop(&mut self) {
        if !self.tickets.is_empty() {
            let mut st = self.buffer.lock();
            self.finish(&mut st, |_| {
                Err(ArrayError::Batch(
                    "another request of this write batch panicked while writing it".into(),
                ))
            });
        }
        self.buffer.cv.notify_all();
    }
}

impl<J> State<J> {
    /// Count `n` completed requests toward the current epoch; at its end, advance the mode choice.
    fn completed(&mut self, n: u64) {
        let now = self.clock.now();
        self.completed_at(n, now);
    }

    fn completed_at(&mut self, n: u64, now: std::time::Instant) {
        let start = *self.epoch_start.get_or_insert(now);
        self.epoch_jobs += n;
        if self.epoch_jobs < EPOCH_JOBS {
            return;
        }
        let rate = self.epoch_jobs as f64 / now.duration_since(start).as_secs_f64().max(1e-9);
        if self.eager {
            self.eager_epochs += 1;
        } else {
            self.batch_epochs += 1;
        }
        self.epoch_start = Some(now);
        self.epoch_jobs = 0;
        self.phase = match self.phase {
            Phase::ProbeFirst => {
                self.eager = !self.eager;
                Phase::ProbeSecond { first_rate: rate }
            }
            Phase::ProbeSecond { first_rate } => {
                // `rate` was measured in the current mode, `first_rate` in the other one.
                let (eager_rate, batch_rate) = if self.eager {
                    (rate, first_rate)
                } else {
                    (first_rate, rate)
                };
                // The first probe ran in the mode chosen before, the second in the other one.
                let before = !self.eager;
                self.eager = batch_rate <= eager_rate * TIE;
                self.stay = if self.eager == before {
                    (self.stay * 2).min(MAX_STAY_EPOCHS)
                } else {
                    STAY_EPOCHS
                };
                Phase::Stay { left: self.stay }
            }
            Phase::Stay { left } if left > 1 => Phase::Stay { left: left - 1 },
            Phase::Stay { .. } => Phase::ProbeFirst,
        };
    }
}

/// The outcome of a batch for the requests that did not lead it.
fn share(r: &Result<WriteOutcome>) -> Result<WriteOutcome> {
    match r {
        Ok(o) => Ok(*o),
        Err(e) => Err(match e {
            ArrayError::Config(s) => ArrayError::Config(s.clone()),
            ArrayError::Meta(s) => ArrayError::Meta(s.clone()),
            ArrayError::DataLoss(s) => ArrayError::DataLoss(s.clone()),
            ArrayError::NoSpace(s) => ArrayError::NoSpace(s.clone()),
            ArrayError::Admin(s) => ArrayError::Admin(s.clone()),
            other => ArrayError::Batch(other.to_string()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;

    #[test]
    fn every_job_runs_exactly_once_and_batches_form_under_load() {
        let sb: Arc<StripeBuffer<u32>> = Arc::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let calls = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..24u32)
            .map(|t| {
                let (sb, seen, calls) = (sb.clone(), seen.clone(), calls.clone());
                std::thread::spawn(move || {
                    for i in 0..200u32 {
                        let r = sb.submit(t * 1000 + i, |jobs| {
                            calls.fetch_add(1, SeqCst);
                            std::thread::sleep(std::time::Duration::from_micros(50));
                            seen.lock().unwrap().extend(jobs);
                            Ok(WriteOutcome::Done)
                        });
                        assert_eq!(r.unwrap(), WriteOutcome::Done);
                        // Our job was written before submit returned.
                        assert!(seen.lock().unwrap().contains(&(t * 1000 + i)));
                    }
                })
            })
            .collect();
        for h in threads {
            h.join().unwrap();
        }
        let mut v = seen.lock().unwrap().clone();
        v.sort_unstable();
        let want: Vec<u32> = (0..24u32)
            .flat_map(|t| (0..200).map(move |i| t * 1000 + i))
            .collect();
        assert_eq!(v, want);
        let st = sb.stats();
        assert_eq!(st.requests, 24 * 200);
        assert_eq!(st.batches, calls.load(SeqCst) as u64);
        assert!(
            st.batches < 24 * 200,
            "no batch carried more than one request"
        );
    }

    /// A request that panics while it leads a batch must not wedge the buffer: the other requests
    /// of its batch get an error, and later requests are written as usual.
    #[test]
    fn a_panicking_batch_does_not_wedge_the_buffer() {
        // Batching mode (not eager), one batch in flight: later requests queue behind the first.
        let batching = || {
            let sb: Arc<StripeBuffer<u32>> = Arc::default();
            sb.set_in_flight(1);
            sb.lock().eager = false;
            sb
        };
        let sb = batching();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let go_rx = Mutex::new(go_rx);
        // Request 0 leads the first batch and holds it until the others have queued, then panics.
        let leader = {
            let sb = sb.clone();
            std::thread::spawn(move || {
                sb.submit(0, |_| {
                    started_tx.send(()).unwrap();
                    go_rx.lock().unwrap().recv().unwrap();
                    panic!("injected panic in a batch");
                })
            })
        };
        started_rx.recv().unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        for t in 1..=3u32 {
            let (sb, done_tx) = (sb.clone(), done_tx.clone());
            std::thread::spawn(move || {
                let r = sb.submit(t, |jobs| {
                    assert!(!jobs.contains(&0));
                    Ok(WriteOutcome::Done)
                });
                done_tx.send((t, r.map_err(|e| e.to_string()))).unwrap();
            });
        }
        // All three are queued behind the one batch allowed in flight.
        while sb.lock().queue.len() < 3 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        go_tx.send(()).unwrap();
        assert!(
            leader.join().is_err(),
            "the leader's panic propagates to it"
        );
        let mut answers = Vec::new();
        for _ in 0..3 {
            let a = done_rx
                .recv_timeout(std::time::Duration::from_secs(30))
                .expect("a request waits forever after its batch's leader panicked");
            answers.push(a);
        }
        answers.sort_by_key(|(t, _)| *t);
        // They queued after the panicking batch had left, so they form a batch of their own.
        for (t, r) in &answers {
            assert_eq!(r, &Ok(WriteOutcome::Done), "request {t}");
        }
        let st = sb.lock();
        assert_eq!((st.leaders, st.in_flight, st.done.len()), (0, 0, 0));
        drop(st);
        // A batch the panicking leader shares with others: they get its error.
        let sb = batching();
        let blocker = {
            let sb = sb.clone();
            let (started_tx, started_rx) = std::sync::mpsc::channel();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let go_rx = Mutex::new(go_rx);
            let h = std::thread::spawn(move || {
                sb.submit(100, |_| {
                    started_tx.send(()).unwrap();
                    go_rx.lock().unwrap().recv().unwrap();
                    Ok(WriteOutcome::Done)
                })
            });
            started_rx.recv().unwrap();
            (h, go_tx)
        };
        // Two requests queue behind the blocker; whichever leads the next batch panics.
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        for t in 1..=2u32 {
            let (sb, done_tx) = (sb.clone(), done_tx.clone());
            std::thread::spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    sb.submit(t, |_| panic!("injected panic in a shared batch"))
                }));
                let r = match r {
                    Ok(r) => r.map(|_| "done".to_string()).map_err(|e| e.to_string()),
                    Err(_) => Ok("panicked".to_string()),
                };
                done_tx.send(r).unwrap();
            });
        }
        while sb.lock().queue.len() < 2 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        blocker.1.send(()).unwrap();
        assert_eq!(blocker.0.join().unwrap().unwrap(), WriteOutcome::Done);
        let mut got: Vec<std::result::Result<String, String>> = (0..2)
            .map(|_| {
                done_rx
                    .recv_timeout(std::time::Duration::from_secs(30))
                    .expect("a request waits forever after its batch's leader panicked")
            })
            .collect();
        got.sort();
        assert_eq!(got[0], Ok("panicked".to_string()));
        assert!(
            got[1].as_ref().is_err_and(|e| e.contains("panicked")),
            "{got:?}"
        );
        assert_eq!(sb.lock().leaders, 0);
    }

    /// Run `epochs` measuring epochs of a modelled workload through the mode choice on a manual
    /// clock, so machine load plays no part. Eight writers each keep one request outstanding; in
    /// eager mode each request is its own batch and all eight are written at once, in batching mode `DEFAULT_IN_FLIGHT` batches share
    /// them. `cost(jobs)` is the µs a batch of `jobs` takes; a `serial` device serves one batch at
    /// a time, a parallel one all at once. Returns (eager, batching) epochs.
    fn mode_epochs(epochs: u64, serial: bool, cost: fn(usize) -> u64) -> (u64, u64) {
        const WRITERS: usize = 8;
        // Each finds fewer than `EAGER_PER_BATCH * DEFAULT_IN_FLIGHT` requests in flight.
        const _: () = assert!(WRITERS <= EAGER_PER_BATCH * DEFAULT_IN_FLIGHT);
        let sb: StripeBuffer<u32> = StripeBuffer::default();
        let clock = Clock::manual();
        sb.set_clock(clock.clone());
        let rounds = epochs * EPOCH_JOBS / WRITERS as u64;
        for _ in 0..rounds {
            let eager = sb.lock().eager;
            let batches = if eager {
                vec![1; WRITERS]
            } else {
                vec![WRITERS / DEFAULT_IN_FLIGHT; DEFAULT_IN_FLIGHT]
            };
            let costs = batches.iter().map(|&jobs| cost(jobs));
            let us = if serial {
                costs.sum()
            } else {
                costs.max().unwrap_or(0)
            };
            clock.advance(std::time::Duration::from_micros(us));
            sb.lock().completed(WRITERS as u64);
        }
        let st = sb.stats();
        assert_eq!(st.eager_epochs + st.batch_epochs, epochs);
        (st.eager_epochs, st.batch_epochs)
    }

    /// The mode is chosen by measurement: a device that serves one batch at a time at a fixed cost
    /// (an HDD appending log chunks) makes the buffer batch; a device that serves requests in
    /// parallel at a cost per request makes it write each request at once. In ten epochs: one
    /// probe of each mode, then a stay of eight in the one that won.
    #[test]
    fn the_mode_follows_what_the_devices_reward() {
        let (eager, batching) = mode_epochs(10, true, |_| 150);
        assert!(
            (eager, batching) == (1, 9),
            "serial device: {eager} eager vs {batching} batching epochs"
        );
        let (eager, batching) = mode_epochs(10, false, |jobs| 10 + 60 * jobs as u64);
        assert!(
            (eager, batching) == (9, 1),
            "parallel device: {eager} eager vs {batching} batching epochs"
        );
    }

    /// Feed `epochs` measuring epochs to the mode choice on a synthetic clock: an epoch takes
    /// `eager_us(i)` or `batch_us(i)` µs depending on the mode in effect. Returns the modes in
    /// effect, one per epoch.
    fn drive(
        epochs: usize,
        eager_us: impl Fn(usize) -> u64,
        batch_us: impl Fn(usize) -> u64,
    ) -> Vec<bool> {
        let sb: StripeBuffer<u32> = StripeBuffer::default();
        let mut st = sb.lock();
        let mut now = std::time::Instant::now();
        st.completed_at(0, now);
        let mut modes = Vec::new();
        for i in 0..epochs {
            modes.push(st.eager);
            let us = if st.eager { eager_us(i) } else { batch_us(i) };
            now += std::time::Duration::from_micros(us);
            st.completed_at(EPOCH_JOBS, now);
        }
        modes
    }

    /// A probe that confirms the mode doubles the stay, so a steady workload spends ever fewer
    /// epochs in the worse mode; a workload that changes is followed within one (capped) stay.
    #[test]
    fn probing_backs_off_while_the_mode_is_confirmed() {
        // Batching is twice as fast throughout: eager only on its probes, and those thin out.
        let modes = drive(1000, |_| 2000, |_| 1000);
        let eager = modes.iter().filter(|&&e| e).count();
        // Stays 8, 16, 32, 64, 128, 128, ...: 10 probes in 1000 epochs (a fixed stay of 8 probes 100 times).
        assert!(eager <= 12, "{eager} eager epochs in 1000");
        assert!(!modes[999]);
        // Eager wins from epoch 500 on: the choice follows within a capped stay plus one probe.
        let modes = drive(1000, |i| if i < 500 { 2000 } else { 500 }, |_| 1000);
        // The first stay in eager mode (three eager epochs in a row) starts within one capped
        // stay and a probe of the change.
        let switch = (500..997)
            .find(|&i| modes[i..i + 3].iter().all(|&e| e))
            .unwrap();
        assert!(
            switch < 500 + MAX_STAY_EPOCHS as usize + 3,
            "eager only chosen from epoch {switch}"
        );
        assert!(modes[999]);
        // After the switch the stay restarts at 8: batching is probed again soon.
        let next_probe = modes[switch..].iter().position(|&e| !e).unwrap();
        assert!(
            next_probe <= STAY_EPOCHS as usize + 2,
            "next probe after {next_probe} epochs"
        );
    }

    #[test]
    fn errors_reach_every_request_of_the_batch() {
        let sb: Arc<StripeBuffer<u32>> = Arc::default();
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let sb = sb.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let r = sb.submit(t * 100 + i, |jobs| {
                            std::thread::sleep(std::time::Duration::from_micros(20));
                            if jobs.iter().any(|j| j % 7 == 0) {
                                Err(ArrayError::DataLoss("injected".into()))
                            } else {
                                Ok(WriteOutcome::Done)
                            }
                        });
                        if (t * 100 + i) % 7 == 0 {
                            assert!(matches!(r, Err(ArrayError::DataLoss(_))));
                        }
                    }
                })
            })
            .collect();
        for h in threads {
            h.join().unwrap();
        }
    }
}
