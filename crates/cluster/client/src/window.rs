//! The window of a put or a get (and of a mount's write-behind): bytes in transit, not segments.
//!
//! A put or a get keeps `window_segments_max` segments' worth of bytes moving: another segment
//! starts as soon as the bytes of those in flight still to move (to their primary for a put,
//! from it for a get) fall below `window × segment_bytes`, up to one segment more than the window
//! (each segment in flight is held in memory until its primary acknowledges it).
//! Counted in whole segments instead, a segment's slot stayed taken after its last byte moved — a
//! put's while the primary encodes, sends the parity and every holder syncs, a get's while the
//! next segment's first pieces are fetched from the holders — and with few segments in flight
//! per OSD its links idled at every segment's end (64 MiB segments, 2 per client, 10 clients,
//! M = 8: links 90 % busy, writes at 85 % of CodFS's model; docs/benchmarks.md). Up to twice the
//! window in segments, the model experiment's ten clients of 64 MiB × 4 held 8.5 GB and were
//! killed by the kernel's OOM killer on a 24 GiB machine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Debug, Default)]
struct Shared {
    /// Bytes of started segments not yet moved.
    outstanding: AtomicU64,
    /// Signalled whenever `outstanding` falls.
    fell: Notify,
}

/// One put's or get's window.
#[derive(Debug)]
pub struct Transit {
    budget: u64,
    segments_max: usize,
    shared: Arc<Shared>,
}

/// One segment's part of a [`Transit`]: its bytes still to move. Dropped (the segment's task ended,
/// however), its remaining bytes leave the window.
#[derive(Debug)]
pub struct Leg {
    left: AtomicU64,
    shared: Arc<Shared>,
}

impl Transit {
    /// A window of `window` segments of `segment_bytes` (at least one segment).
    pub fn new(window: usize, segment_bytes: u64) -> Transit {
        let window = window.max(1);
        Transit {
            budget: (window as u64).saturating_mul(segment_bytes.max(1)),
            segments_max: window.saturating_add(1),
            shared: Arc::default(),
        }
    }

    /// Whether another segment may start while `in_flight` are under way.
    pub fn has_room(&self, in_flight: usize) -> bool {
        in_flight == 0
            || (in_flight < self.segments_max
                && self.shared.outstanding.load(Ordering::Acquire) < self.budget)
    }

    /// A segment of `len` bytes starts.
    pub fn start(&self, len: u64) -> Arc<Leg> {
        self.shared.outstanding.fetch_add(len, Ordering::AcqRel);
        Arc::new(Leg {
            left: AtomicU64::new(len),
            shared: self.shared.clone(),
        })
    }

    /// Returns once bytes moved (or a segment ended) since the last return; may return at once.
    pub async fn moved(&self) {
        self.shared.fell.notified().await
    }
}

impl Leg {
    /// `n` more of the segment's bytes moved. Bytes moved again by a retried attempt are not
    /// counted twice: a leg never gives back more than its length.
    pub fn moved(&self, n: u64) {
        let took = match self
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| {
                Some(l.saturating_sub(n))
            }) {
            Ok(prev) | Err(prev) => prev.min(n),
        };
        self.give_back(took);
    }

    /// The segment ended (its task is done, however): its bytes not moved leave the window and a
    /// waiter in [`Transit::moved`] is woken, now, whatever clones of the leg live on (a callback
    /// kept by a request stream may outlive the task that made it).
    pub fn end(&self) {
        let left = self.left.swap(0, Ordering::AcqRel);
        self.give_back(left);
        if left == 0 {
            self.shared.fell.notify_one();
        }
    }

    fn give_back(&self, bytes: u64) {
        if bytes > 0 {
            let prev = self.shared.outstanding.fetch_sub(bytes, Ordering::AcqRel);
            debug_assert!(prev >= bytes, "a window gave back more than it took");
            self.shared.fell.notify_one();
        }
    }
}

impl Drop for Leg {
    /// The segment ended (however): [`Leg::end`].
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_starts_when_the_bytes_in_flight_fall_below_the_window() {
        let t = Transit::new(2, 100);
        assert!(t.has_room(0));
        let a = t.start(100);
        assert!(t.has_room(1));
        let b = t.start(100);
        assert!(!t.has_room(2), "two segments' bytes outstanding");
        a.moved(60);
        assert!(t.has_room(2));
        let c = t.start(100);
        // A retried attempt moves the bytes again: never counted below zero.
        b.moved(100);
        b.moved(100);
        c.moved(100);
        assert_eq!(t.shared.outstanding.load(Ordering::Relaxed), 40);
        assert!(
            !t.has_room(3),
            "at most the window and one more, however few bytes are left"
        );
        drop(b);
        assert!(t.has_room(2));
        drop((a, c));
        assert_eq!(t.shared.outstanding.load(Ordering::Relaxed), 0);
        assert!(t.has_room(0));
    }

    #[test]
    fn a_leg_dropped_early_gives_its_bytes_back() {
        let t = Transit::new(1, 10);
        let a = t.start(10);
        assert!(!t.has_room(1));
        a.moved(3);
        drop(a);
        assert_eq!(t.shared.outstanding.load(Ordering::Relaxed), 0);
        assert!(t.has_room(1));
    }

    #[tokio::test]
    async fn an_ended_leg_wakes_a_waiter_while_clones_of_it_live_on() {
        let t = Arc::new(Transit::new(1, 10));
        let a = t.start(10);
        a.moved(10);
        let kept = a.clone();
        // The waiter was told of the bytes already; it waits for the segment's end.
        let waiter = {
            let t = t.clone();
            tokio::spawn(async move {
                t.moved().await;
                t.moved().await
            })
        };
        tokio::task::yield_now().await;
        a.end();
        drop(a);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken by the end, not by the last clone's drop")
            .unwrap();
        drop(kept);
    }

    #[tokio::test]
    async fn moved_wakes_a_waiter() {
        let t = Arc::new(Transit::new(1, 10));
        let a = t.start(10);
        let waiter = {
            let t = t.clone();
            tokio::spawn(async move { t.moved().await })
        };
        tokio::task::yield_now().await;
        a.moved(5);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
    }
}
