//! Batches: the one way to issue several reads and writes at once, to one device or many.
//!
//! A caller with requests for several devices (a stripe's chunks, a log stripe's log chunks) makes
//! one [`Batch`], hands each device its share through [`BlockDevice::submit`], and calls
//! [`Batch::finish`], which returns when every request has completed. How a device serves its share
//! is its own business, so the caller never asks what kind of device it holds:
//!
//! * the default ([`Batch::run_now`]) runs the requests one after another with `read_at`/`write_at`,
//!   at once (memory and simulated devices, `Faulty`, `Mirror`);
//! * a [`FileDevice`] queues them for io_uring: `finish` submits every queued request of every file
//!   device with one system call and sleeps once until the last completes (without io_uring they
//!   are deferred, [`Batch::defer`], and run on one thread per device);
//! * `Throttled` does the work through its inner device and raises the batch's modeled completion
//!   time ([`Batch::complete_at`]): `finish` sleeps once, until the latest completion over every
//!   paced device of the batch, instead of one thread per device sleeping;
//! * `Metered` forwards to its inner device and counts the outcomes when they are known
//!   ([`Batch::on_complete`]); `Arc` and `Box` forward.
//!
//! Requests of one batch may run concurrently, so requests to the same device must not overlap.

use std::time::Instant;

use crate::uring::UringOp;
use crate::{BlockDevice, DeviceError, FileDevice, Result};

/// What a request does, with the caller's buffer.
#[derive(Debug)]
pub enum IoKind<'a> {
    /// Fill the buffer from the device.
    Read(&'a mut [u8]),
    /// Write the buffer to the device.
    Write(&'a [u8]),
}

/// One read or write of a [`Batch`], made by [`Batch::read`], [`Batch::write`] or
/// [`Batch::request`]; the device that takes it answers it exactly once.
#[derive(Debug)]
pub struct IoRequest<'a> {
    /// Byte offset on the device the request is submitted to.
    pub offset: u64,
    pub kind: IoKind<'a>,
    id: usize,
}

impl IoRequest<'_> {
    /// The request's position in its batch (the index of its result in [`Batch::finish`]).
    pub fn id(&self) -> usize {
        self.id
    }
    /// Bytes transferred.
    pub fn len(&self) -> usize {
        match &self.kind {
            IoKind::Read(b) => b.len(),
            IoKind::Write(b) => b.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn is_write(&self) -> bool {
        matches!(self.kind, IoKind::Write(_))
    }
    /// Do the request now through `dev`'s `read_at`/`write_at`.
    pub fn run_on<D: BlockDevice + ?Sized>(&mut self, dev: &D) -> Result<()> {
        match &mut self.kind {
            IoKind::Read(b) => dev.read_at(b, self.offset),
            IoKind::Write(b) => dev.write_at(b, self.offset),
        }
    }
}

type Hook<'a> = Box<dyn FnOnce(&[Result<()>]) + 'a>;

/// Requests of one or more devices, answered together by [`Batch::finish`].
#[derive(Default)]
pub struct Batch<'a> {
    results: Vec<Option<Result<()>>>,
    uring: Vec<(usize, UringOp<'a>)>,
    deferred: Vec<(&'a dyn BlockDevice, Vec<IoRequest<'a>>)>,
    complete_at: Option<Instant>,
    hooks: Vec<Hook<'a>>,
    submitted: usize,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("requests", &self.results.len())
            .field("uring", &self.uring.len())
            .field("deferred", &self.deferred.len())
            .field("complete_at", &self.complete_at)
            .finish()
    }
}

impl<'a> Batch<'a> {
    pub fn new() -> Self {
        Batch::default()
    }

    /// A new request of this batch (not yet submitted to a device).
    pub fn request(&mut self, offset: u64, kind: IoKind<'a>) -> IoRequest<'a> {
        self.results.push(None);
        IoRequest {
            offset,
            kind,
            id: self.results.len() - 1,
        }
    }

    /// A read of `buf.len()` bytes at `offset`.
    pub fn read(&mut self, buf: &'a mut [u8], offset: u64) -> IoRequest<'a> {
        self.request(offset, IoKind::Read(buf))
    }

    /// A write of `buf` at `offset`.
    pub fn write(&mut self, buf: &'a [u8], offset: u64) -> IoRequest<'a> {
        self.request(offset, IoKind::Write(buf))
    }

    /// Answer a request (its buffer is released).
    pub fn done(&mut self, req: IoRequest<'a>, r: Result<()>) {
        self.results[req.id] = Some(r);
    }

    /// Run `reqs` now, one after another, through `dev`'s `read_at`/`write_at`: the default body
    /// of [`BlockDevice::submit`].
    pub fn run_now<D: BlockDevice + ?Sized>(&mut self, dev: &D, reqs: Vec<IoRequest<'a>>) {
        for mut r in reqs {
            let res = r.run_on(dev);
            self.done(r, res);
        }
    }

    /// Run `reqs` through `dev`'s `read_at`/`write_at` during [`finish`](Self::finish), in
    /// parallel with the other devices' deferred requests (one thread per device): for a device
    /// that blocks in real time and has no faster path.
    pub fn defer(&mut self, dev: &'a dyn BlockDevice, reqs: Vec<IoRequest<'a>>) {
        if !reqs.is_empty() {
            self.deferred.push((dev, reqs));
        }
    }

    /// Queue `reqs` of a file device for the batch's io_uring submission; without io_uring on this
    /// thread (or for a device opened with it off), defer them to run in parallel with the batch's
    /// other devices.
    pub(crate) fn uring(&mut self, dev: &'a FileDevice, reqs: Vec<IoRequest<'a>>) {
        if !dev.uses_uring() || !crate::uring::available() {
            return self.defer(dev, reqs);
        }
        for r in reqs {
            let op = match r.kind {
                IoKind::Read(buf) => UringOp::Read {
                    dev,
                    off: r.offset,
                    buf,
                },
                IoKind::Write(buf) => UringOp::Write {
                    dev,
                    off: r.offset,
                    buf,
                },
            };
            self.uring.push((r.id, op));
        }
    }

    /// The batch completes no earlier than `t` (modeled completion of a paced device's requests):
    /// [`finish`](Self::finish) sleeps once, until the latest such time.
    pub fn complete_at(&mut self, t: Instant) {
        self.complete_at = Some(self.complete_at.map_or(t, |c| c.max(t)));
    }

    /// Call `hook` with every request's result (indexed by [`IoRequest::id`]) once all are known,
    /// in the order hooks were added (a wrapper counting what its inner device did).
    pub fn on_complete(&mut self, hook: impl FnOnce(&[Result<()>]) + 'a) {
        self.hooks.push(Box::new(hook));
    }

    /// How many times a device's [`BlockDevice::submit`] was entered through
    /// [`submit_to`](Self::submit_to) (tests use it to prove a batch reached a device whole).
    pub fn submissions(&self) -> usize {
        self.submitted
    }

    /// Hand `reqs` to `dev` (`dev.submit(reqs, self)`).
    pub fn submit_to(&mut self, dev: &'a dyn BlockDevice, reqs: Vec<IoRequest<'a>>) {
        self.submitted += 1;
        dev.submit(reqs, self);
    }

    /// Run what is queued (io_uring, deferred), wait until the modeled completion, run the
    /// completion hooks, and return every request's result in the order the requests were made.
    pub fn finish(mut self) -> Vec<Result<()>> {
        if !self.uring.is_empty() {
            let (ids, mut ops): (Vec<usize>, Vec<UringOp<'a>>) =
                std::mem::take(&mut self.uring).into_iter().unzip();
            for (id, r) in ids.into_iter().zip(crate::uring::submit(&mut ops)) {
                self.results[id] = Some(r);
            }
        }
        let deferred = std::mem::take(&mut self.deferred);
        for (id, r) in run_deferred(deferred) {
            self.results[id] = Some(r);
        }
        if let Some(t) = self.complete_at {
            crate::throttled::sleep_until(t);
        }
        let results: Vec<Result<()>> = self
            .results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(DeviceError::other(
                        "batch",
                        "a device dropped a request without answering it",
                    ))
                })
            })
            .collect();
        for hook in self.hooks {
            hook(&results);
        }
        results
    }
}

/// Run each device's deferred requests in order, devices in parallel (the first on this thread).
/// A panic in one is re-raised here after every other thread has finished (`thread::scope`), so
/// no request is left running against a buffer the caller gets back.
fn run_deferred<'a>(
    groups: Vec<(&'a dyn BlockDevice, Vec<IoRequest<'a>>)>,
) -> Vec<(usize, Result<()>)> {
    let run = |(dev, reqs): (&'a dyn BlockDevice, Vec<IoRequest<'a>>)| {
        reqs.into_iter()
            .map(|mut r| {
                let res = r.run_on(dev);
                (r.id, res)
            })
            .collect::<Vec<_>>()
    };
    let mut groups = groups.into_iter();
    let Some(first) = groups.next() else {
        return Vec::new();
    };
    let rest: Vec<_> = groups.collect();
    if rest.is_empty() {
        return run(first);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = rest.into_iter().map(|g| s.spawn(move || run(g))).collect();
        let mut out = run(first);
        for h in handles {
            match h.join() {
                Ok(v) => out.extend(v),
                Err(p) => std::panic::resume_unwind(p),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FileDevice, LatencyDist, MemDevice, Metered, ThrottleConfig, Throttled};
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    /// A memory device that counts direct `read_at`/`write_at` calls.
    #[derive(Debug)]
    struct Counting {
        inner: MemDevice,
        direct: AtomicU64,
    }

    impl BlockDevice for Counting {
        fn name(&self) -> &str {
            "counting"
        }
        fn capacity(&self) -> u64 {
            self.inner.capacity()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
            self.direct.fetch_add(1, Relaxed);
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
            self.direct.fetch_add(1, Relaxed);
            self.inner.write_at(buf, offset)
        }
        fn flush(&self) -> Result<()> {
            Ok(())
        }
        fn discard(&self, _: u64, _: u64) -> Result<()> {
            Ok(())
        }
    }

    /// Paced devices do their work at submission and the batch sleeps once, at `finish`, until
    /// the latest modeled completion over all of them.
    #[test]
    fn paced_devices_work_at_once_and_the_batch_sleeps_once() {
        let lat = std::time::Duration::from_millis(30);
        let devs: Vec<Throttled<Counting>> = (0..3)
            .map(|i| {
                Throttled::new(
                    Counting {
                        inner: MemDevice::new(1 << 16).unwrap(),
                        direct: AtomicU64::new(0),
                    },
                    ThrottleConfig {
                        latency: LatencyDist::Fixed {
                            ns: lat.as_nanos() as u64 * (i + 1),
                        },
                        ..ThrottleConfig::default()
                    },
                )
            })
            .collect();
        let data = [7u8; 4096];
        let start = Instant::now();
        let mut batch = Batch::new();
        for d in &devs {
            let r = vec![batch.write(&data, 0), batch.write(&data, 8192)];
            batch.submit_to(d, r);
        }
        for d in &devs {
            assert_eq!(d.inner().direct.load(Relaxed), 2, "work done at submission");
        }
        let due = batch.complete_at.expect("a modeled completion");
        assert!(due >= start + lat * 3, "the latest device's completion");
        assert_eq!(batch.submissions(), 3);
        assert!(batch.finish().iter().all(|r| r.is_ok()));
        assert!(start.elapsed() >= lat * 3 - std::time::Duration::from_millis(2));
    }

    /// File devices, bare or under `Metered`/`Throttled`/`Arc`, reach the io_uring lane (where
    /// io_uring works), and the wrappers still count what the batch did.
    #[test]
    fn file_devices_reach_io_uring_through_wrappers() {
        let t = tempfile::tempdir().unwrap();
        let f = |n: &str| FileDevice::create(t.path().join(n), 1 << 20).unwrap();
        let bare = f("a");
        let metered = Metered::new(f("b"));
        let throttled = std::sync::Arc::new(Throttled::new(f("c"), ThrottleConfig::default()));
        let devs: [&dyn BlockDevice; 3] = [&bare, &metered, &throttled];
        let mut bufs: Vec<crate::AlignedBuf> = (0..6)
            .map(|i| {
                let mut b = crate::AlignedBuf::new(4096);
                b.as_mut_slice().fill(i as u8 + 1);
                b
            })
            .collect();
        let mut batch = Batch::new();
        for (i, d) in devs.iter().enumerate() {
            let r = vec![
                batch.write(bufs[2 * i].as_slice(), 0),
                batch.write(bufs[2 * i + 1].as_slice(), 4096),
            ];
            batch.submit_to(*d, r);
        }
        if crate::uring::available() {
            assert_eq!(batch.uring.len(), 6, "every request queued for io_uring");
            assert!(batch.deferred.is_empty());
        } else {
            assert_eq!(
                batch.deferred.len(),
                3,
                "without io_uring: deferred per device"
            );
        }
        assert!(batch.finish().iter().all(|r| r.is_ok()));
        assert_eq!(metered.snapshot().write_ops, 2, "counted on completion");
        assert_eq!(metered.snapshot().seq_writes, 2, "in submission order");
        for b in bufs.iter_mut() {
            b.as_mut_slice().fill(0);
        }
        let mut batch = Batch::new();
        let mut it = bufs.iter_mut();
        for d in devs {
            let (x, y) = (it.next().unwrap(), it.next().unwrap());
            let r = vec![
                batch.read(x.as_mut_slice(), 0),
                batch.read(y.as_mut_slice(), 4096),
            ];
            batch.submit_to(d, r);
        }
        assert!(batch.finish().iter().all(|r| r.is_ok()));
        for (i, b) in bufs.iter().enumerate() {
            assert!(
                b.as_slice().iter().all(|&x| x == i as u8 + 1),
                "request {i}"
            );
        }
        assert_eq!(metered.snapshot().read_ops, 2);
    }

    /// The default path answers every request in order, errors included.
    #[test]
    fn default_runs_in_order_and_reports_each_error() {
        let d = Counting {
            inner: MemDevice::new(8192).unwrap(),
            direct: AtomicU64::new(0),
        };
        let mut b = [0u8; 4096];
        let mut batch = Batch::new();
        let r = vec![
            batch.write(&[1u8; 4096], 4096),
            batch.write(&[1u8; 4096], 8192),
            batch.read(&mut b, 4096),
        ];
        batch.submit_to(&d, r);
        let res = batch.finish();
        assert!(res[0].is_ok() && res[2].is_ok());
        assert!(res[1].is_err(), "beyond capacity");
        assert_eq!(d.direct.load(Relaxed), 3);
        assert_eq!(b, [1u8; 4096]);
    }
}
