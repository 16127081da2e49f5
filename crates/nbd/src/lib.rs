//! `ecstack-nbd`: export any [`BlockDevice`] over the NBD protocol, so unmodified clients (the Linux
//! kernel's `nbd-client`, libnbd's `nbdinfo` / `nbdcopy`, fio's `nbd` ioengine, QEMU) use it.
//!
//! * Negotiation: fixed newstyle (`NBDMAGIC`, `IHAVEOPT`, `NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES`);
//!   options `EXPORT_NAME`, `GO`, `INFO` (replies `NBD_INFO_EXPORT`, `NBD_INFO_BLOCK_SIZE`, and
//!   `NBD_INFO_NAME` / `NBD_INFO_DESCRIPTION` when asked), `LIST`, `ABORT`; `STRUCTURED_REPLY`, meta
//!   contexts, `STARTTLS` and unknown options are refused with `NBD_REP_ERR_UNSUP`.
//! * Transmission: simple replies; `READ`, `WRITE`, `FLUSH`, `TRIM`, `WRITE_ZEROES`, `DISC`; the `FUA`
//!   flag (flush after the write); `CAN_MULTI_CONN` (a flush on any connection flushes the shared
//!   device). Requests are pipelined within a connection and run on a worker pool.
//! * Errors: `EINVAL` (bad flags, reads beyond the end, oversized reads, unknown commands), `ENOSPC`
//!   (writes beyond the end, device full), `EPERM` (writes to a read-only export), `EIO` (device
//!   errors). Protocol garbage ends that one connection with a one-line log; the server keeps running.
//! * An admin channel on a Unix socket ([`Admin`], [`admin_request`]); fio helpers in [`bench`]; a
//!   minimal blocking [`client::Client`] for tests.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ecstack_device::MemDevice;
//! use ecstack_nbd::{Server, ServeConfig};
//! let dev = Arc::new(MemDevice::new(64 << 20).unwrap());
//! let cfg = ServeConfig { addr: "127.0.0.1:0".parse().unwrap(), ..ServeConfig::default() };
//! let server = Server::start(dev, None, cfg).unwrap();
//! println!("nbdinfo {}", server.uri());
//! server.shutdown().unwrap();
//! ```

#![forbid(unsafe_code)]

pub mod admin;
pub mod bench;
pub mod client;
pub mod proto;
mod server;

use std::sync::Arc;

use ecstack_device::{BlockDevice, DeviceError};

pub use admin::{admin_request, Admin};
pub use bench::{fio_randwrite, fio_randwrite_iops, FioParams, FioResult, FioTarget};
pub use server::{ServeConfig, Server, ServerStats, ShutdownHandle};

/// Errors of the NBD server, client and helpers. One line each.
#[derive(Debug, thiserror::Error)]
pub enum NbdError {
    #[error("cannot listen on {addr}: {err}")]
    Bind { addr: String, err: std::io::Error },
    #[error("admin socket {path}: {err}")]
    AdminSocket { path: String, err: std::io::Error },
    #[error("admin socket {path} is in use by a running server (or is not a socket)")]
    AdminSocketInUse { path: String },
    #[error("{0}")]
    AdminCommand(String),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    #[error("NBD protocol: {0}")]
    Protocol(String),
    #[error("server answered {cmd} with error {errno} ({})", errno_name(*.errno))]
    Remote { cmd: &'static str, errno: u32 },
    #[error("{0}")]
    Fio(String),
    #[error("invalid NBD server configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Device(#[from] DeviceError),
}

/// Name of an NBD error value.
pub fn errno_name(e: u32) -> &'static str {
    match e {
        proto::EPERM => "EPERM",
        proto::EIO => "EIO",
        proto::ENOMEM => "ENOMEM",
        proto::EINVAL => "EINVAL",
        proto::ENOSPC => "ENOSPC",
        proto::EOVERFLOW => "EOVERFLOW",
        proto::ENOTSUP => "ENOTSUP",
        proto::ESHUTDOWN => "ESHUTDOWN",
        _ => "unknown",
    }
}

/// Serve `dev` until the admin `shutdown` command or a call to the [`ShutdownHandle`] given to
/// `on_start` (the binary calls it from its SIGINT/SIGTERM handler: the library installs none),
/// then stop cleanly (connections closed, device flushed) and return. For a server you control
/// from code, use [`Server::start`].
pub fn serve(
    dev: Arc<dyn BlockDevice>,
    admin: Option<Arc<dyn Admin>>,
    cfg: ServeConfig,
    on_start: impl FnOnce(ShutdownHandle),
) -> Result<(), NbdError> {
    let server = Server::start(dev, admin, cfg)?;
    on_start(server.shutdown_handle());
    server.wait()
}
