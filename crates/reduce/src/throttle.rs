//! Live throttling (seed §3.5 "Responsive Performance Throttling"): a fixed pool of worker threads of
//! which only the first `limit` take new files; the limit follows the configuration file while running.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The number of workers allowed to take files, changeable at any time.
pub struct Throttle {
    limit: AtomicUsize,
    workers_max: usize,
    lock: Mutex<()>,
    cv: Condvar,
    /// Workers currently holding a file (for tests and progress).
    busy: AtomicUsize,
    busy_max_seen: AtomicUsize,
    closed: AtomicBool,
}

impl Throttle {
    /// `limit` clamped to 1..=workers_max.
    pub fn new(limit: usize, workers_max: usize) -> Throttle {
        assert!(workers_max >= 1);
        Throttle {
            limit: AtomicUsize::new(limit.clamp(1, workers_max)),
            workers_max,
            lock: Mutex::new(()),
            cv: Condvar::new(),
            busy: AtomicUsize::new(0),
            busy_max_seen: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::SeqCst)
    }

    /// Change the limit (clamped to 1..=workers_max); returns the value applied.
    pub fn set_limit(&self, n: usize) -> usize {
        let n = n.clamp(1, self.workers_max);
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.limit.store(n, Ordering::SeqCst);
        self.cv.notify_all();
        n
    }

    /// Block worker `k` (0-based) while k ≥ limit; false once the work is over (`close`).
    pub fn wait_turn(&self, k: usize) -> bool {
        // Fast path (the usual case): no lock.
        if k < self.limit.load(Ordering::SeqCst) || self.closed.load(Ordering::SeqCst) {
            return !self.closed.load(Ordering::SeqCst);
        }
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while k >= self.limit.load(Ordering::SeqCst) && !self.closed.load(Ordering::SeqCst) {
            g = self
                .cv
                .wait_timeout(g, Duration::from_millis(200))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        !self.closed.load(Ordering::SeqCst)
    }

    /// No more work: every waiting worker leaves.
    pub fn close(&self) {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.closed.store(true, Ordering::SeqCst);
        self.cv.notify_all();
    }

    /// Mark a file started; returns a guard that marks it done.
    pub fn start(&self) -> Busy<'_> {
        let now = self.busy.fetch_add(1, Ordering::SeqCst) + 1;
        self.busy_max_seen.fetch_max(now, Ordering::SeqCst);
        Busy(self)
    }

    /// The most files processed at once since the last `reset_busy_max`.
    pub fn busy_max_seen(&self) -> usize {
        self.busy_max_seen.load(Ordering::SeqCst)
    }

    pub fn reset_busy_max(&self) {
        self.busy_max_seen
            .store(self.busy.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

/// A worker holding a file.
pub struct Busy<'a>(&'a Throttle);
impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Workers gated by the throttle: at limit 1 never more than one file at once; raised to 3, three.
    #[test]
    fn limit_changes_concurrency() {
        let t = Arc::new(Throttle::new(1, 4));
        let jobs = Arc::new(AtomicUsize::new(0));
        let run = |t: &Arc<Throttle>, jobs: &Arc<AtomicUsize>, n: usize| {
            jobs.store(n, Ordering::SeqCst);
            let hs: Vec<_> = (0..4)
                .map(|k| {
                    let (t, jobs) = (t.clone(), jobs.clone());
                    std::thread::spawn(move || loop {
                        assert!(t.wait_turn(k));
                        if jobs
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |j| j.checked_sub(1))
                            .is_err()
                        {
                            return;
                        }
                        let _b = t.start();
                        std::thread::sleep(Duration::from_millis(20));
                    })
                })
                .collect();
            hs
        };
        let hs = run(&t, &jobs, 10);
        // Threads 1..3 wait forever at limit 1: let worker 0 drain, then release the others.
        while jobs.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(t.busy_max_seen(), 1);
        t.set_limit(4);
        for h in hs {
            h.join().unwrap();
        }
        t.reset_busy_max();
        t.set_limit(3);
        let hs = run(&t, &jobs, 30);
        while jobs.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        t.set_limit(4);
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(t.busy_max_seen(), 3);
        // Closing releases a worker that waits its turn.
        t.set_limit(1);
        let t2 = t.clone();
        let h = std::thread::spawn(move || t2.wait_turn(2));
        std::thread::sleep(Duration::from_millis(50));
        t.close();
        assert!(!h.join().unwrap());
    }
}
