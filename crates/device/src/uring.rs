//! Batched I/O to file devices through io_uring: a caller with requests for several devices (a
//! stripe's chunks, a log stripe's log chunks) submits them all with one system call and sleeps once
//! until the last completes, instead of handing each to a worker thread and being woken per request.
//! On a 2-vCPU VM with O_DIRECT files, fio needs about half the CPU per request with io_uring as
//! with one thread per request (docs/benchmarks.md).
//!
//! Each thread has its own ring, created on first use. Where io_uring is unavailable (old kernel,
//! seccomp) or turned off (for the process: [`set_enabled`], re-exported as
//! `ecstack_device::set_uring_enabled`, `ecstack --no-uring`; for one device:
//! [`crate::FileOptions::uring`], spec key `uring=0`), [`submit`] runs the requests one after
//! another with `read_at`/`write_at`, so callers need no second code path. A short transfer is
//! finished with `pread`/`pwrite`; requests whose buffer does not meet `O_DIRECT` alignment go
//! through the device's own bounce-buffer path.

use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use io_uring::{opcode, types, IoUring};

use crate::file::DIRECT_ALIGN;
use crate::{check_range, BlockDevice, DeviceError, FileDevice, Result};

/// Submission queue entries per ring (a batch larger than this is submitted in rounds).
const RING_ENTRIES: u32 = 64;

/// One request of a batch.
pub enum UringOp<'a> {
    Read {
        dev: &'a FileDevice,
        off: u64,
        buf: &'a mut [u8],
    },
    Write {
        dev: &'a FileDevice,
        off: u64,
        buf: &'a [u8],
    },
}

impl UringOp<'_> {
    fn dev(&self) -> &FileDevice {
        match self {
            UringOp::Read { dev, .. } | UringOp::Write { dev, .. } => dev,
        }
    }

    fn span(&self) -> (u64, usize, *const u8) {
        match self {
            UringOp::Read { off, buf, .. } => (*off, buf.len(), buf.as_ptr()),
            UringOp::Write { off, buf, .. } => (*off, buf.len(), buf.as_ptr()),
        }
    }

    /// The request done synchronously through the device (fallback and slow paths).
    fn run_sync(&mut self) -> Result<()> {
        match self {
            UringOp::Read { dev, off, buf } => dev.read_at(buf, *off),
            UringOp::Write { dev, off, buf } => dev.write_at(buf, *off),
        }
    }

    /// Finish a short transfer of `done` bytes synchronously.
    fn finish(&mut self, done: usize) -> Result<()> {
        match self {
            UringOp::Read { dev, off, buf } => dev.read_at(&mut buf[done..], *off + done as u64),
            UringOp::Write { dev, off, buf } => dev.write_at(&buf[done..], *off + done as u64),
        }
    }

    /// Whether io_uring can take this request as is.
    fn fits(&self) -> bool {
        let (off, len, ptr) = self.span();
        let dev = self.dev();
        if len == 0 || len > u32::MAX as usize {
            return false;
        }
        if !dev.uses_uring() || (matches!(self, UringOp::Write { .. }) && dev.is_read_only()) {
            return false;
        }
        !dev.is_direct()
            || ((ptr as usize).is_multiple_of(DIRECT_ALIGN)
                && len.is_multiple_of(DIRECT_ALIGN)
                && off.is_multiple_of(DIRECT_ALIGN as u64))
    }
}

/// Whether this process uses io_uring at all ([`set_enabled`]).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turn io_uring on or off for every file device of this process (on by default): off, batches go
/// through `pread`/`pwrite` on per-device threads. Takes effect for batches submitted afterwards
/// (threads keep their rings, unused while off).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

thread_local! {
    /// This thread's ring: None before first use, Some(None) when io_uring is unavailable.
    static RING: RefCell<Option<Option<IoUring>>> = const { RefCell::new(None) };
}

/// Whether io_uring works on this thread (creating its ring if needed).
pub fn available() -> bool {
    ENABLED.load(Ordering::Relaxed)
        && RING.with(|r| with_ring(&mut r.borrow_mut(), |_| ()).is_some())
}

fn with_ring<T>(
    slot: &mut Option<Option<IoUring>>,
    f: impl FnOnce(&mut IoUring) -> T,
) -> Option<T> {
    if !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    if slot.is_none() {
        *slot = Some(IoUring::new(RING_ENTRIES).ok());
    }
    slot.as_mut().and_then(|r| r.as_mut()).map(f)
}

/// Run every request; the result of each, in order. Requests to the same device run concurrently,
/// so they must not overlap.
pub fn submit(ops: &mut [UringOp<'_>]) -> Vec<Result<()>> {
    let mut res: Vec<Option<Result<()>>> = (0..ops.len()).map(|_| None).collect();
    let mut queued: Vec<usize> = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let (off, len, _) = op.span();
        let dev = op.dev();
        if let Err(e) = check_range(dev.name(), off, len as u64, dev.capacity()) {
            res[i] = Some(Err(e));
        } else if op.fits() {
            queued.push(i);
        }
    }
    // Without io_uring the queued requests stay unanswered and go through the synchronous path.
    RING.with(|r| {
        let mut slot = r.borrow_mut();
        with_ring(&mut slot, |ring| run_ring(ring, ops, &queued, &mut res))
    });
    for (i, op) in ops.iter_mut().enumerate() {
        if res[i].is_none() {
            res[i] = Some(op.run_sync());
        }
    }
    res.into_iter()
        .map(|r| r.expect("every request answered"))
        .collect()
}

/// Requests pushed to the ring and not yet reaped. If anything panics while some are in flight
/// (the reap loop calls into the device: short-transfer completion, counters), unwinding would
/// return the caller's buffers to it, and free or reuse them, while the kernel may still read or
/// write them: memory corruption that no later check could catch. The requests cannot be called
/// back (io_uring has no synchronous cancel that guarantees the buffer is released), and waiting
/// for them inside a `Drop` during unwinding could itself block forever or panic again. So the only
/// sound choice is to stop the process before the buffers are released: `Drop` aborts when
/// requests are outstanding. (The normal path reaps everything, so the count is 0 on return.)
struct InFlight(usize);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0 > 0 {
            eprintln!(
                "ecstack: aborting: unwinding with {} io_uring requests in flight (they point \
                 into buffers that would be released)",
                self.0
            );
            std::process::abort();
        }
    }
}

/// Submit `queued` in rounds of at most RING_ENTRIES and reap every completion before returning
/// (the kernel holds pointers into the buffers until then).
fn run_ring(
    ring: &mut IoUring,
    ops: &mut [UringOp<'_>],
    queued: &[usize],
    res: &mut [Option<Result<()>>],
) {
    let mut in_flight = InFlight(0);
    for round in queued.chunks(RING_ENTRIES as usize) {
        let mut pushed = 0usize;
        for &i in round {
            let entry = match &mut ops[i] {
                UringOp::Read { dev, off, buf } => opcode::Read::new(
                    types::Fd(dev.raw_file().as_raw_fd()),
                    buf.as_mut_ptr(),
                    buf.len() as u32,
                )
                .offset(*off)
                .build(),
                UringOp::Write { dev, off, buf } => opcode::Write::new(
                    types::Fd(dev.raw_file().as_raw_fd()),
                    buf.as_ptr(),
                    buf.len() as u32,
                )
                .offset(*off)
                .build(),
            }
            .user_data(i as u64);
            // SAFETY: the entry points into `ops[i]`'s buffer, which is borrowed for the whole call;
            // this function does not return before the completion of every pushed entry is reaped
            // (the wait loop below), so the kernel never touches the buffer after it is released.
            if unsafe { ring.submission().push(&entry) }.is_err() {
                break; // queue full (cannot happen: round <= RING_ENTRIES); rest goes sync
            }
            pushed += 1;
            in_flight.0 += 1;
        }
        let mut reaped = 0usize;
        while reaped < pushed {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                    ) => {}
                Err(e) => {
                    // The ring is unusable with requests in flight that point into our buffers:
                    // returning (and freeing them) would be unsound.
                    eprintln!("ecstack: io_uring_enter failed with requests in flight: {e}");
                    std::process::abort();
                }
            }
            let cqes: Vec<(u64, i32)> = ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (ud, r) in cqes {
                reaped += 1;
                in_flight.0 -= 1;
                let i = ud as usize;
                let (_, len, _) = ops[i].span();
                let out = if r < 0 {
                    let e = std::io::Error::from_raw_os_error(-r);
                    if matches!(-r, libc::EINTR | libc::EAGAIN) {
                        ops[i].run_sync()
                    } else {
                        Err(DeviceError::io(ops[i].dev().name(), e))
                    }
                } else if (r as usize) < len {
                    ops[i].finish(r as usize)
                } else {
                    Ok(())
                };
                if out.is_ok() {
                    let write = matches!(ops[i], UringOp::Write { .. });
                    ops[i].dev().count(write, len as u64);
                }
                res[i] = Some(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::FileOptions;

    fn dev(dir: &std::path::Path, name: &str, direct: bool) -> FileDevice {
        let p = dir.join(name);
        std::fs::write(&p, vec![0u8; 1 << 20]).unwrap();
        FileDevice::open(
            &p,
            &FileOptions {
                direct,
                ..FileOptions::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn batches_read_back_what_they_wrote() {
        let t = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let devs: Vec<FileDevice> = (0..3)
                .map(|i| dev(t.path(), &format!("d{i}{direct}"), direct))
                .collect();
            // Aligned buffers, one unaligned write (falls back to the bounce path), 100 requests
            // (two rounds of the ring).
            let mut bufs: Vec<crate::file::AlignedBuf> = (0..100)
                .map(|i| {
                    let mut b = crate::file::AlignedBuf::new(4096);
                    b.as_mut_slice().fill(i as u8 + 1);
                    b
                })
                .collect();
            let odd = vec![0xeeu8; 100];
            let mut ops: Vec<UringOp> = bufs
                .iter()
                .enumerate()
                .map(|(i, b)| UringOp::Write {
                    dev: &devs[i % 3],
                    off: (i / 3) as u64 * 4096,
                    buf: b.as_slice(),
                })
                .collect();
            ops.push(UringOp::Write {
                dev: &devs[0],
                off: 900_001,
                buf: &odd,
            });
            ops.push(UringOp::Write {
                dev: &devs[1],
                off: 1 << 20,
                buf: &odd,
            });
            let r = submit(&mut ops);
            assert!(r[..101].iter().all(|x| x.is_ok()));
            assert!(r[101].is_err(), "out of range is refused");
            drop(ops);
            for b in bufs.iter_mut() {
                b.as_mut_slice().fill(0);
            }
            let mut ops: Vec<UringOp> = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| UringOp::Read {
                    dev: &devs[i % 3],
                    off: (i / 3) as u64 * 4096,
                    buf: b.as_mut_slice(),
                })
                .collect();
            assert!(submit(&mut ops).iter().all(|x| x.is_ok()));
            drop(ops);
            for (i, b) in bufs.iter().enumerate() {
                assert!(
                    b.as_slice().iter().all(|&x| x == i as u8 + 1),
                    "request {i}"
                );
            }
            let mut back = vec![0u8; 100];
            devs[0].read_at(&mut back, 900_001).unwrap();
            assert_eq!(back, odd);
            assert_eq!(devs[0].stats().write_ops, 35);
        }
    }

    #[test]
    fn short_reads_are_finished() {
        let t = tempfile::tempdir().unwrap();
        let d = dev(t.path(), "short", false);
        d.write_at(&[7u8; 8192], 0).unwrap();
        // The file shrinks under the device: a read across the new end comes back short.
        std::fs::OpenOptions::new()
            .write(true)
            .open(t.path().join("short"))
            .unwrap()
            .set_len(4096 + 100)
            .unwrap();
        let mut a = crate::file::AlignedBuf::new(8192);
        a.as_mut_slice().fill(1);
        let mut ops = vec![UringOp::Read {
            dev: &d,
            off: 0,
            buf: a.as_mut_slice(),
        }];
        assert!(submit(&mut ops)[0].is_ok());
        drop(ops);
        let b = a.as_slice();
        assert!(b[..4196].iter().all(|&x| x == 7));
        assert!(
            b[4196..].iter().all(|&x| x == 0),
            "past the end reads as zeros"
        );
    }
}
