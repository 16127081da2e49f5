//! Bounded retries with exponential backoff and jitter, and which gRPC failures deserve one.
//!
//! Every retry loop of the cluster goes through [`retry`]: it stops after
//! [`Backoff::attempts_max`] attempts or once [`Backoff::total_max`] has passed (a sleep that
//! would end past that budget is not taken), whichever comes first, and returns the last error.
//! Jitter is drawn from a seeded [`ecstack_base::Rng`], so a test that fixes the seed replays the
//! same delays.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ecstack_base::Rng;
use tonic::{Code, Status};

/// A retry policy: delays grow from `initial` by `multiplier` up to `delay_max`, each shortened by
/// a random fraction of at most `jitter` (0 = none, 1 = anywhere in [0, delay]).
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    pub initial: Duration,
    pub delay_max: Duration,
    pub multiplier: f64,
    pub jitter: f64,
    /// Attempts in all, the first one included (≥ 1).
    pub attempts_max: u32,
    /// Time budget from the first attempt; no new attempt starts after it.
    pub total_max: Duration,
    /// Seed of the jitter; `None` draws a fresh one per [`retry`] call.
    pub seed: Option<u64>,
}

impl Default for Backoff {
    /// The client's policy: 50 ms, 100 ms, 200 ms, … up to 2 s, at most 8 attempts or 15 s.
    fn default() -> Backoff {
        Backoff {
            initial: Duration::from_millis(50),
            delay_max: Duration::from_secs(2),
            multiplier: 2.0,
            jitter: 0.5,
            attempts_max: 8,
            total_max: Duration::from_secs(15),
            seed: None,
        }
    }
}

impl Backoff {
    /// No retries at all: one attempt.
    pub fn none() -> Backoff {
        Backoff {
            attempts_max: 1,
            ..Backoff::default()
        }
    }

    /// The delay before attempt `attempt + 1` (attempt counts from 0), before jitter.
    pub fn base_delay(&self, attempt: u32) -> Duration {
        let factor = self.multiplier.max(1.0).powi(attempt.min(64) as i32);
        let secs = (self.initial.as_secs_f64() * factor).min(self.delay_max.as_secs_f64());
        Duration::from_secs_f64(secs.max(0.0))
    }

    /// The delay before attempt `attempt + 1`, jittered with `rng`.
    pub fn delay(&self, attempt: u32, rng: &mut Rng) -> Duration {
        let base = self.base_delay(attempt);
        let jitter = self.jitter.clamp(0.0, 1.0);
        base.mul_f64(1.0 - jitter * rng.next_f64())
    }
}

/// A seed for jitter when the policy has none: distinct per call and per process.
fn fresh_seed() -> u64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 32) ^ CALLS.fetch_add(1, Ordering::Relaxed)
}

/// Runs `op(attempt)` (attempt counts from 0) until it succeeds, fails with an error
/// `is_retryable` rejects, or the policy's attempts or time run out; returns the last result.
pub async fn retry<T, E, F, Fut>(
    policy: &Backoff,
    is_retryable: impl Fn(&E) -> bool,
    op: F,
) -> Result<T, E>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    retry_with_progress(policy, is_retryable, || false, op).await
}

/// [`retry`] for calls that move data: after a failed attempt, `progressed()` says whether that
/// attempt had moved any; if so, the time budget and the backoff start again from that failure
/// (a transfer that broke after a minute of moving bytes gets the whole budget to try again,
/// rather than none of it). Attempts still count from the first: `attempts_max` bounds the call.
pub async fn retry_with_progress<T, E, F, Fut>(
    policy: &Backoff,
    is_retryable: impl Fn(&E) -> bool,
    mut progressed: impl FnMut() -> bool,
    mut op: F,
) -> Result<T, E>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut start = Instant::now();
    let mut rng = Rng::new(policy.seed.unwrap_or_else(fresh_seed));
    let attempts_max = policy.attempts_max.max(1);
    let mut attempt = 0;
    // Failed attempts since the budget last started (the backoff's step).
    let mut failed = 0;
    loop {
        let err = match op(attempt).await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        attempt += 1;
        if progressed() {
            start = Instant::now();
            failed = 0;
        }
        failed += 1;
        if attempt >= attempts_max || !is_retryable(&err) {
            return Err(err);
        }
        let delay = policy.delay(failed - 1, &mut rng);
        if start.elapsed() + delay > policy.total_max {
            return Err(err);
        }
        tracing::debug!(attempt, delay_ms = delay.as_millis() as u64, error = %err, "retrying");
        tokio::time::sleep(delay).await;
    }
}

/// Whether a failed gRPC call may succeed if tried again (possibly after a layout refresh): the
/// peer was unreachable or overloaded, the deadline passed, or the connection broke mid-call.
/// Requests the server understood and refused (bad arguments, missing objects, no permission,
/// failed preconditions, data loss) are final.
///
/// `Unknown` counts as transient: tonic reports a connection torn down mid-call that way, and
/// the cluster's servers never answer `Unknown` on purpose. `Cancelled` too: tonic reports a
/// client-side timeout as `Cancelled` ("Timeout expired"). A failed TLS handshake (a certificate
/// of another cluster, none at all, a server that does not speak TLS) is final whatever its
/// code: rustls reports it as an I/O error of kind `InvalidData` somewhere in the status's
/// source chain.
pub fn is_transient(status: &Status) -> bool {
    if tls_refused(status) || is_refusal(status) {
        return false;
    }
    matches!(
        status.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::Unknown
    )
}

/// The gRPC metadata key an OSD sets on a `ResourceExhausted` that refuses a block stream
/// (admission control, docs/robustore.md "Admission control on OSDs"): the OSD will not serve it
/// now, so the caller goes to another OSD instead of retrying this one.
pub const REFUSED_KEY: &str = "ecstack-refused";

/// Whether `status` is an OSD's refusal of a stream ([`REFUSED_KEY`]): final at that OSD.
pub fn is_refusal(status: &Status) -> bool {
    status.metadata().get(REFUSED_KEY).is_some()
}

/// Whether the status's source chain holds an `InvalidData` I/O error: rustls's verdict on a
/// certificate or a TLS alert.
fn tls_refused(status: &Status) -> bool {
    tls_refusal_cause(status).is_some()
}

/// The text of the `InvalidData` I/O error in the status's source chain (rustls's verdict:
/// "invalid peer certificate: UnknownIssuer", "received fatal alert: UnknownCA"), if any.
fn tls_refusal_cause(status: &Status) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    let mut depth = 0;
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::InvalidData {
                return Some(io.to_string());
            }
        }
        depth += 1;
        if depth > 16 {
            break;
        }
        source = e.source();
    }
    None
}

/// rustls's words for a certificate that another CA signed (or none at all): the peer and this
/// process are not of one cluster.
const FOREIGN_CERTIFICATE: [&str; 5] = [
    "UnknownIssuer",
    "UnknownCA",
    "BadCertificate",
    "BadSignature",
    "CertificateRequired",
];

/// When `status` is a failed TLS handshake (final: [`is_transient`] says no), one line saying
/// why: "the certificate is not of this cluster (invalid peer certificate: UnknownIssuer)" when
/// one side's certificate is not signed by the other's CA, else "TLS handshake refused (…)".
pub fn handshake_refusal(status: &Status) -> Option<String> {
    let cause = tls_refusal_cause(status)?;
    let verdict = if FOREIGN_CERTIFICATE.iter().any(|k| cause.contains(k)) {
        "the certificate is not of this cluster"
    } else {
        "TLS handshake refused"
    };
    Some(format!("{verdict} ({cause})"))
}

/// The status's message followed by the causes in its source chain that it does not already say
/// (tonic's transport errors read only "h2 protocol error: http2 error"; the cause — a keep-alive
/// timeout, a reset, a refused stream — is in the chain).
pub fn status_detail(status: &Status) -> String {
    let mut out = status.message().to_owned();
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    let mut depth = 0;
    while let Some(e) = source {
        let text = e.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        depth += 1;
        if depth > 16 {
            break;
        }
        source = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// A refusal is final at the OSD that refused (the client moves elsewhere); the same code
    /// without the key stays an overload worth a retry.
    #[test]
    fn a_refusal_is_not_transient() {
        let mut s = Status::resource_exhausted("osd 3 serves 4 streams at its floor");
        assert!(is_transient(&s) && !is_refusal(&s));
        s.metadata_mut().insert(
            REFUSED_KEY,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        assert!(!is_transient(&s) && is_refusal(&s));
    }

    #[test]
    fn status_detail_names_the_cause_in_the_source_chain() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("http2 error")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let cause = std::io::Error::new(std::io::ErrorKind::TimedOut, "keep-alive timed out");
        let mut s = Status::unavailable("h2 protocol error: http2 error");
        s.set_source(std::sync::Arc::new(Outer(cause)));
        let d = status_detail(&s);
        assert_eq!(
            d, "h2 protocol error: http2 error: keep-alive timed out",
            "{d}"
        );
        assert_eq!(status_detail(&Status::unavailable("plain")), "plain");
    }

    fn quick(attempts_max: u32) -> Backoff {
        Backoff {
            initial: Duration::from_millis(1),
            delay_max: Duration::from_millis(4),
            multiplier: 2.0,
            jitter: 0.5,
            attempts_max,
            total_max: Duration::from_secs(5),
            seed: Some(7),
        }
    }

    #[test]
    fn delays_grow_to_the_cap_and_jitter_stays_inside() {
        let p = Backoff {
            initial: Duration::from_millis(100),
            delay_max: Duration::from_millis(1000),
            ..Backoff::default()
        };
        let base: Vec<u128> = (0..6).map(|a| p.base_delay(a).as_millis()).collect();
        assert_eq!(base, vec![100, 200, 400, 800, 1000, 1000]);
        let mut rng = Rng::new(1);
        for a in 0..50 {
            let d = p.delay(a, &mut rng);
            let b = p.base_delay(a);
            assert!(d <= b && d >= b.mul_f64(0.5), "attempt {a}: {d:?} vs {b:?}");
        }
        // Same seed, same delays.
        let (mut r1, mut r2) = (Rng::new(9), Rng::new(9));
        for a in 0..10 {
            assert_eq!(p.delay(a, &mut r1), p.delay(a, &mut r2));
        }
    }

    #[tokio::test]
    async fn retries_transient_errors_until_success() {
        let calls = AtomicU32::new(0);
        let r: Result<u32, Status> = retry(&quick(5), is_transient, |attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if attempt < 2 {
                    Err(Status::unavailable("down"))
                } else {
                    Ok(attempt)
                }
            }
        })
        .await;
        assert_eq!(r.unwrap(), 2);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn gives_up_after_attempts_max_with_the_last_error() {
        let calls = AtomicU32::new(0);
        let r: Result<(), Status> = retry(&quick(4), is_transient, |attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Err(Status::deadline_exceeded(format!("try {attempt}"))) }
        })
        .await;
        let e = r.unwrap_err();
        assert_eq!(e.code(), Code::DeadlineExceeded);
        assert_eq!(e.message(), "try 3");
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn final_errors_are_not_retried() {
        for status in [
            Status::invalid_argument("bad"),
            Status::not_found("gone"),
            Status::permission_denied("no"),
            Status::failed_precondition("epoch"),
            Status::data_loss("lost"),
        ] {
            let code = status.code();
            let mut once = Some(status);
            let calls = AtomicU32::new(0);
            let r: Result<(), Status> = retry(&quick(5), is_transient, |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                let s = once.take().expect("called once");
                async move { Err(s) }
            })
            .await;
            assert_eq!(r.unwrap_err().code(), code);
            assert_eq!(calls.load(Ordering::SeqCst), 1, "{code:?}");
        }
    }

    /// An attempt that moved data before it failed restarts the budget: attempts that each take
    /// longer than the whole budget are retried as long as they make progress, and once they stop
    /// making it the budget ends them as before.
    #[tokio::test]
    async fn progress_restarts_the_time_budget() {
        let p = Backoff {
            initial: Duration::from_millis(1),
            delay_max: Duration::from_millis(1),
            jitter: 0.0,
            attempts_max: 1000,
            total_max: Duration::from_millis(60),
            ..quick(0)
        };
        let calls = AtomicU32::new(0);
        let r: Result<u32, Status> = retry_with_progress(
            &p,
            is_transient,
            || calls.load(Ordering::SeqCst) <= 3,
            |attempt| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    tokio::time::sleep(Duration::from_millis(80)).await;
                    if attempt < 3 {
                        Err(Status::unknown("connection reset"))
                    } else {
                        Ok(attempt)
                    }
                }
            },
        )
        .await;
        assert_eq!(r.unwrap(), 3);
        // Without progress, the first 80 ms attempt spends the 60 ms budget.
        calls.store(0, Ordering::SeqCst);
        let r: Result<u32, Status> = retry_with_progress(
            &p,
            is_transient,
            || false,
            |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    tokio::time::sleep(Duration::from_millis(80)).await;
                    Err(Status::unknown("connection reset"))
                }
            },
        )
        .await;
        assert!(r.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_time_budget_bounds_the_attempts() {
        let p = Backoff {
            initial: Duration::from_millis(40),
            delay_max: Duration::from_millis(40),
            jitter: 0.0,
            attempts_max: 1000,
            total_max: Duration::from_millis(150),
            ..quick(0)
        };
        let calls = AtomicU32::new(0);
        let start = Instant::now();
        let r: Result<(), Status> = retry(&p, is_transient, |_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(Status::unavailable("down")) }
        })
        .await;
        assert!(r.is_err());
        let n = calls.load(Ordering::SeqCst);
        // Sleeps of 40 ms inside a 150 ms budget: 3 sleeps, 4 attempts, never past the budget.
        assert_eq!(n, 4, "attempts");
        assert!(start.elapsed() < Duration::from_millis(150));
    }
}
