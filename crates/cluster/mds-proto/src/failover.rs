//! The channel under [`crate::MdsClient`] when a cluster lists several MDSs (`[mds] addrs`: an
//! active and its standbys): calls go to the MDS that answered last, and move on to the next
//! listed one when that one fails at the transport (refused, reset, timed out), answers
//! `UNAVAILABLE` (a standby names the active that way) or never answers before the caller gives
//! up (its future is dropped: a stopped MDS). The call itself is not repeated here; callers retry
//! retryable errors ([`crate::MdsError::is_retryable`]) under their own budget, and the retry
//! goes to the next MDS.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::codegen::Service;
use tonic::transport::Channel;

/// One channel per listed MDS and the index of the one calls go to. Cheap to clone; clones share
/// the index.
#[derive(Debug, Clone)]
pub struct FailoverChannel {
    channels: Arc<[(String, Channel)]>,
    current: Arc<AtomicUsize>,
}

impl FailoverChannel {
    /// `channels`: (address, channel) per MDS, in the order they are tried; at least one.
    pub fn new(channels: Vec<(String, Channel)>) -> FailoverChannel {
        assert!(!channels.is_empty(), "a failover channel needs an MDS");
        FailoverChannel {
            channels: channels.into(),
            current: Arc::default(),
        }
    }

    /// The address calls go to now.
    pub fn current_addr(&self) -> &str {
        &self.channels[self.current.load(Ordering::Relaxed) % self.channels.len()].0
    }

    /// The next call goes to the MDS after `from` (unless another call moved on already).
    fn move_on(current: &AtomicUsize, from: usize, n: usize) {
        let _ = current.compare_exchange(from, (from + 1) % n, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Moves the channel on when dropped before [`Guard::done`]: a call whose caller stopped waiting
/// (a deadline on a stopped MDS).
struct Guard {
    current: Arc<AtomicUsize>,
    from: usize,
    n: usize,
    done: bool,
}

impl Guard {
    fn finish(mut self, move_on: bool) {
        self.done = true;
        if move_on {
            FailoverChannel::move_on(&self.current, self.from, self.n);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.done {
            FailoverChannel::move_on(&self.current, self.from, self.n);
        }
    }
}

/// gRPC's `UNAVAILABLE` in a trailers-only reply's headers.
fn says_unavailable(r: &http::Response<Body>) -> bool {
    r.headers()
        .get("grpc-status")
        .is_some_and(|v| v.as_bytes() == b"14")
}

impl Service<http::Request<Body>> for FailoverChannel {
    type Response = http::Response<Body>;
    type Error = tonic::transport::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is awaited per call, on the channel the call goes to.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let n = self.channels.len();
        let from = self.current.load(Ordering::Acquire) % n;
        let mut channel = self.channels[from].1.clone();
        let guard = Guard {
            current: self.current.clone(),
            from,
            n,
            done: n == 1,
        };
        Box::pin(async move {
            let res = async {
                std::future::poll_fn(|cx| channel.poll_ready(cx)).await?;
                channel.call(req).await
            }
            .await;
            let failed = match &res {
                Ok(r) => says_unavailable(r),
                Err(_) => true,
            };
            guard.finish(failed && n > 1);
            res
        })
    }
}
