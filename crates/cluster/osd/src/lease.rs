//! The primary lease: an OSD acts as the primary of its segments only while the MDS cannot yet
//! have declared it down.
//!
//! The MDS declares an OSD down `down_after_ms` after the last heartbeat it *received* and then
//! promotes another holder of each of its segments. A primary whose heartbeats are late (a loaded
//! machine, a slow link) is alive but deposed: without a lease it would keep encoding, updating and
//! rebuilding from its outdated view while the promoted primary does the same, and two writers of
//! one stripe is how parity goes wrong. So each acknowledged heartbeat renews a lease that ends
//! [`LEASE_SHARE`] of `down_after_ms` after the heartbeat was *sent*: it was received no earlier
//! than sent, so the lease ends at least a quarter of `down_after_ms` before the MDS can promote
//! anyone. That quarter covers a request already on its way to a holder and clocks that run at
//! slightly different rates; no synchronised clocks are needed (only durations measured locally).
//! A primary without a lease refuses client requests with `UNAVAILABLE` (the client re-fetches the
//! layout and retries) and stops its recoveries before they write.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The lease lasts this share of the MDS's `down_after_ms` from the sending of the last
/// acknowledged heartbeat.
pub const LEASE_SHARE: (u32, u32) = (3, 4);

/// A request that finds the lease lapsed waits this share of the lease's length for a renewal
/// before it is refused.
pub const LEASE_GRACE_SHARE: (u32, u32) = (1, 2);

/// An OSD's primary lease (off until [`Lease::enable`]: an OSD outside a daemon, as in the service
/// tests, has no MDS to renew it).
#[derive(Debug, Default)]
pub struct Lease {
    state: Mutex<State>,
    /// Woken by every renewal, for requests waiting out a short lapse ([`Lease::wait`]).
    renewed: tokio::sync::Notify,
}

#[derive(Debug, Default, Clone, Copy)]
struct State {
    /// None: no lease is enforced.
    length: Option<Duration>,
    until: Option<Instant>,
}

impl Lease {
    /// Enforce a lease of [`LEASE_SHARE`] of `down_after`, starting with a renewal at `sent` (the
    /// registration counts as the first heartbeat). `down_after` zero leaves the lease off (an
    /// MDS that does not say when it declares OSDs down).
    pub fn enable(&self, down_after: Duration, sent: Instant) {
        if down_after.is_zero() {
            return;
        }
        let length = down_after * LEASE_SHARE.0 / LEASE_SHARE.1;
        let mut s = self.lock();
        s.length = Some(length);
        s.until = Some(sent + length);
    }

    /// A heartbeat sent at `sent` was acknowledged: the lease lasts until `sent` + its length
    /// (never shortened by a reply that arrives out of order).
    pub fn renew(&self, sent: Instant) {
        let mut s = self.lock();
        if let Some(length) = s.length {
            let until = sent + length;
            s.until = Some(s.until.map_or(until, |u| u.max(until)));
        }
        drop(s);
        self.renewed.notify_waiters();
    }

    /// How long a request waits for a renewal once the lease has lapsed ([`LEASE_GRACE_SHARE`] of
    /// its length; zero when none is enforced).
    pub fn grace(&self) -> Duration {
        self.lock().length.map_or(Duration::ZERO, |l| {
            l * LEASE_GRACE_SHARE.0 / LEASE_GRACE_SHARE.1
        })
    }

    /// Ok once the lease holds, waiting up to [`Lease::grace`] for a renewal: a heartbeat's reply
    /// that is merely late renews it from the beat's sending, and the request goes on instead of
    /// failing and being sent again. Otherwise how long ago the lease ended. (Waiting is as safe
    /// as checking later: the lease is checked again after each renewal.)
    pub async fn wait(&self) -> Result<(), Duration> {
        let deadline = tokio::time::Instant::now() + self.grace();
        loop {
            // Registered before the check, so a renewal between the two is not missed.
            let renewed = self.renewed.notified();
            match self.check() {
                Ok(()) => return Ok(()),
                Err(ago) if tokio::time::Instant::now() >= deadline => return Err(ago),
                Err(_) => {}
            }
            tokio::select! {
                () = renewed => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Ok while the lease holds (or none is enforced); otherwise how long ago it ended.
    pub fn check(&self) -> Result<(), Duration> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Result<(), Duration> {
        let s = *self.lock();
        match (s.length, s.until) {
            (None, _) => Ok(()),
            (Some(_), Some(until)) if now < until => Ok(()),
            (Some(_), until) => {
                Err(until.map_or(Duration::ZERO, |u| now.saturating_duration_since(u)))
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_until_enabled_and_with_zero() {
        let l = Lease::default();
        assert!(l.check().is_ok());
        l.renew(Instant::now());
        assert!(l.check().is_ok());
        l.enable(Duration::ZERO, Instant::now());
        assert!(l.check().is_ok());
    }

    #[test]
    fn ends_a_quarter_before_the_mds_can_declare_down() {
        let l = Lease::default();
        let t0 = Instant::now();
        l.enable(Duration::from_millis(2000), t0);
        assert!(l.check_at(t0 + Duration::from_millis(1499)).is_ok());
        assert_eq!(
            l.check_at(t0 + Duration::from_millis(1700)),
            Err(Duration::from_millis(200))
        );
        // A renewal from a later heartbeat extends it; an older reply arriving late never shortens it.
        l.renew(t0 + Duration::from_millis(1000));
        assert!(l.check_at(t0 + Duration::from_millis(2400)).is_ok());
        l.renew(t0 + Duration::from_millis(100));
        assert!(l.check_at(t0 + Duration::from_millis(2400)).is_ok());
        assert!(l.check_at(t0 + Duration::from_millis(2500)).is_err());
    }

    #[tokio::test]
    async fn a_lapsed_lease_waits_its_grace_for_a_renewal() {
        let l = std::sync::Arc::new(Lease::default());
        assert!(l.wait().await.is_ok(), "off: never waits");
        let down_after = Duration::from_millis(400);
        let t0 = Instant::now() - Duration::from_secs(1);
        l.enable(down_after, t0);
        assert_eq!(l.grace(), Duration::from_millis(150));
        // No renewal: refused after the grace.
        let started = Instant::now();
        let ago = l.wait().await.unwrap_err();
        assert!(started.elapsed() >= l.grace(), "{:?}", started.elapsed());
        assert!(ago >= Duration::from_millis(700), "{ago:?}");
        // A renewal within the grace lets the waiting request through.
        let renewer = {
            let l = l.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                l.renew(Instant::now());
            })
        };
        let started = Instant::now();
        assert!(l.wait().await.is_ok());
        assert!(started.elapsed() < l.grace(), "{:?}", started.elapsed());
        renewer.await.unwrap();
    }
}
