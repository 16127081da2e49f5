//! A userspace delay line between two network interfaces, for a testbed host's added round-trip
//! delay where the kernel has no `netem` qdisc (this project's machines run a kernel built without
//! `CONFIG_NET_SCH_NETEM`; `tc qdisc add … netem` answers "Specified qdisc kind is unknown").
//!
//! Two `AF_PACKET` raw sockets, one bound to each interface, with `PACKET_VNET_HDR`: a frame is
//! read with its offload header (a GSO super-packet of up to 64 KiB stays one frame, its checksum
//! still partial) and written out the other interface unchanged. Frames arriving on the host side
//! leave on the bridge side `delay` later (one thread receives and stamps them, another sends each
//! at its time, in order); frames arriving on the bridge side go straight to the host side. Frames a
//! socket sent itself (`PACKET_OUTGOING`) are skipped. Sending goes through the interface's qdisc,
//! so a tbf on it still shapes; a frame it drops is lost, as on a real link.
//!
//! Threads stop when the line is dropped (each socket read times out every 100 ms to check) or when
//! an interface goes away with its namespace.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{LabError, Result};

const SOL_PACKET: libc::c_int = 263;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_OUTGOING: u8 = 4;
const ETH_P_ALL: u16 = 0x0003;
/// A GSO frame is at most 64 KiB plus headers; room to spare.
const FRAME_MAX: usize = 256 << 10;

/// The running line; stops on drop.
pub(crate) struct DelayLine {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

fn os_err(what: &str, ifname: &str) -> LabError {
    LabError::Run(format!(
        "delay line on {ifname}: {what}: {}",
        std::io::Error::last_os_error()
    ))
}

/// A raw packet socket bound to `ifname` in the calling thread's namespace.
fn packet_socket(ifname: &str) -> Result<OwnedFd> {
    let name = std::ffi::CString::new(ifname)
        .map_err(|_| LabError::Run(format!("interface name {ifname:?}")))?;
    // SAFETY: plain system calls on integers and on pointers to live locals of the right sizes.
    unsafe {
        let ifindex = libc::if_nametoindex(name.as_ptr());
        if ifindex == 0 {
            return Err(os_err("no such interface", ifname));
        }
        let fd = libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            ETH_P_ALL.to_be() as libc::c_int,
        );
        if fd < 0 {
            return Err(os_err("socket(AF_PACKET)", ifname));
        }
        let fd = OwnedFd::from_raw_fd(fd);
        let set = |level, opt, val: &[u8]| {
            libc::setsockopt(
                fd.as_raw_fd(),
                level,
                opt,
                val.as_ptr().cast(),
                val.len() as libc::socklen_t,
            ) == 0
        };
        let one = 1i32.to_ne_bytes();
        if !set(SOL_PACKET, PACKET_VNET_HDR, &one) {
            return Err(os_err("PACKET_VNET_HDR", ifname));
        }
        let buf = (8i32 << 20).to_ne_bytes();
        // Forced sizes need CAP_NET_ADMIN (we are root); fall back to the capped ones.
        if !set(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &buf) {
            set(libc::SOL_SOCKET, libc::SO_RCVBUF, &buf);
        }
        if !set(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &buf) {
            set(libc::SOL_SOCKET, libc::SO_SNDBUF, &buf);
        }
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        let tvb = std::slice::from_raw_parts(
            (&tv as *const libc::timeval).cast::<u8>(),
            std::mem::size_of::<libc::timeval>(),
        );
        if !set(libc::SOL_SOCKET, libc::SO_RCVTIMEO, tvb) {
            return Err(os_err("SO_RCVTIMEO", ifname));
        }
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = ifindex as i32;
        if libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        ) != 0
        {
            return Err(os_err("bind", ifname));
        }
        Ok(fd)
    }
}

/// What one read got.
enum Got {
    Frame(usize),
    /// Our own transmission, a frame too large, or the 100 ms timeout: read again.
    Nothing,
    /// The socket failed (its interface is gone): stop.
    Closed,
}

fn receive(fd: &OwnedFd, buf: &mut [u8]) -> Got {
    // SAFETY: `buf` and `sll` are live and their lengths are passed.
    unsafe {
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        let n = libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_TRUNC,
            (&mut sll as *mut libc::sockaddr_ll).cast(),
            &mut len,
        );
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return match e.kind() {
                std::io::ErrorKind::WouldBlock
                | std::io::ErrorKind::TimedOut
                | std::io::ErrorKind::Interrupted => Got::Nothing,
                _ => Got::Closed,
            };
        }
        let n = n as usize;
        if sll.sll_pkttype == PACKET_OUTGOING || n > buf.len() {
            return Got::Nothing;
        }
        Got::Frame(n)
    }
}

/// Reads frames from `fd` until told to stop or the socket fails, handing each to `take` (which
/// returns false to stop).
fn pump(fd: &OwnedFd, stop: &AtomicBool, mut take: impl FnMut(&[u8]) -> bool) {
    let mut buf = vec![0u8; FRAME_MAX];
    while !stop.load(Ordering::Relaxed) {
        match receive(fd, &mut buf) {
            Got::Frame(n) => {
                if !take(&buf[..n]) {
                    return;
                }
            }
            Got::Nothing => {}
            Got::Closed => return,
        }
    }
}

fn send(fd: &OwnedFd, frame: &[u8]) -> bool {
    // SAFETY: `frame` is live for the call. A full queue (ENOBUFS) drops the frame, like a link.
    let n = unsafe { libc::send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
    n >= 0
        || !matches!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENXIO) | Some(libc::ENODEV) | Some(libc::ENETDOWN)
        )
}

impl DelayLine {
    /// In network namespace `ns`: frames arriving on `host_side` leave on `bridge_side` `delay`
    /// later; frames arriving on `bridge_side` leave on `host_side` at once.
    pub(crate) fn start(
        ns: &str,
        host_side: &str,
        bridge_side: &str,
        delay: Duration,
    ) -> Result<DelayLine> {
        let (host_if, bridge_if) = (host_side.to_owned(), bridge_side.to_owned());
        let (host, bridge) = crate::netns_thread::in_namespace(ns, move || {
            Ok((packet_socket(&host_if)?, packet_socket(&bridge_if)?))
        })?;
        let (host, bridge) = (Arc::new(host), Arc::new(bridge));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
        let mut threads = Vec::new();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(|e| LabError::Run(format!("delay line thread: {e}")))
        };
        {
            let (host, stop) = (host.clone(), stop.clone());
            threads.push(spawn(
                format!("delay-in-{host_side}"),
                Box::new(move || {
                    pump(&host, &stop, |frame| {
                        tx.send((Instant::now() + delay, frame.to_vec())).is_ok()
                    })
                }),
            )?);
        }
        {
            let (bridge, stop) = (bridge.clone(), stop.clone());
            threads.push(spawn(
                format!("delay-out-{host_side}"),
                Box::new(move || loop {
                    match rx.recv_timeout(Duration::from_millis(100)) {
                        Ok((due, frame)) => {
                            let now = Instant::now();
                            if due > now {
                                std::thread::sleep(due - now);
                            }
                            if !send(&bridge, &frame) {
                                return;
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            if stop.load(Ordering::Relaxed) {
                                return;
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }),
            )?);
        }
        {
            let stop = stop.clone();
            threads.push(spawn(
                format!("delay-back-{host_side}"),
                Box::new(move || pump(&bridge, &stop, |frame| send(&host, frame))),
            )?);
        }
        Ok(DelayLine { stop, threads })
    }
}

impl DelayLine {
    /// Tell the threads to stop without waiting for them (drop waits): lets many lines stop at once.
    pub(crate) fn signal_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
