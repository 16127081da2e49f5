//! The array's clock: where a decision depends on time (the idle commit trigger, the stripe buffer's
//! mode choice), the array asks a [`Clock`] instead of `Instant::now()`, so a simulation can run it
//! on a clock that moves only when told to and replay a seed exactly (`crate::sim`).
//!
//! Measurements (request latencies, commit and rebuild seconds) keep reading the wall clock: they
//! report real elapsed time and decide nothing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The system clock (the default) or a manual clock shared by its clones.
#[derive(Clone, Debug, Default)]
pub struct Clock(Option<Arc<Manual>>);

#[derive(Debug)]
struct Manual {
    origin: Instant,
    elapsed: Mutex<Duration>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock(None)
    }

    /// A clock that stands still until [`Clock::advance`] moves it (its clones move with it).
    pub fn manual() -> Clock {
        Clock(Some(Arc::new(Manual {
            origin: Instant::now(),
            elapsed: Mutex::new(Duration::ZERO),
        })))
    }

    pub fn is_manual(&self) -> bool {
        self.0.is_some()
    }

    /// Now, as an `Instant` (on a manual clock: its origin plus everything it was advanced by).
    pub fn now(&self) -> Instant {
        match &self.0 {
            None => Instant::now(),
            Some(m) => m.origin + *m.elapsed.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }

    /// Move a manual clock forward by `d` (no effect on the system clock).
    pub fn advance(&self, d: Duration) {
        if let Some(m) = &self.0 {
            let mut e = m.elapsed.lock().unwrap_or_else(|p| p.into_inner());
            *e = e.saturating_add(d);
        }
    }
}

/// Two clocks are equal when both are the system clock or both are the same manual clock.
impl PartialEq for Clock {
    fn eq(&self, other: &Clock) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced_and_clones_share_it() {
        let c = Clock::manual();
        let t0 = c.now();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(c.now(), t0);
        let d = c.clone();
        d.advance(Duration::from_secs(3));
        assert_eq!(c.now().duration_since(t0), Duration::from_secs(3));
        assert_eq!(c, d);
        assert_ne!(c, Clock::manual());
        assert_eq!(Clock::system(), Clock::default());
        assert!(!Clock::system().is_manual());
    }
}
