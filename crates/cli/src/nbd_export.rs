//! Exporting a block device of ours over NBD from the CLI: the address, export name and admin
//! socket a user gave, announced on stderr, served until Ctrl-C / SIGTERM. Used by `array serve` for
//! arrays and for tween arrays (through TWEEN's log layer).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use ecstack_device::BlockDevice;
use ecstack_nbd::{Admin, ServeConfig};

use crate::util::fmt_size;

/// Where and how to export.
pub struct Export {
    pub addr: SocketAddr,
    pub name: String,
    pub admin_socket: Option<PathBuf>,
    pub workers: usize,
    /// Print the final status as JSON when the server stops.
    pub json: bool,
}

/// Serves `dev` over NBD as `what` (announced on stderr, with its size and address, once it
/// listens) until Ctrl-C / SIGTERM.
pub fn export(
    what: &str,
    size: u64,
    at: &Export,
    dev: Arc<dyn BlockDevice>,
    admin: Arc<dyn Admin>,
) -> Result<()> {
    let cfg = ServeConfig {
        addr: at.addr,
        export_name: at.name.clone(),
        admin_socket: at.admin_socket.clone(),
        workers: at.workers,
        description: Some(format!("ecstack {what}")),
        ..ServeConfig::default()
    };
    let announce = format!(
        "ecstack array: exporting {what} ({}) at nbd://{}/{}{}; Ctrl-C stops",
        fmt_size(size),
        at.addr,
        at.name,
        at.admin_socket
            .as_ref()
            .map(|p| format!(", admin socket {}", p.display()))
            .unwrap_or_default()
    );
    // Announced once the server listens: a port in use is the one line of the error, not a
    // "exporting" line followed by it (a script waiting for the line knows the server is up).
    ecstack_nbd::serve(dev, Some(admin), cfg, |h| {
        eprintln!("{announce}");
        stop_on_signals(h)
    })?;
    Ok(())
}

/// Stop the server on SIGINT/SIGTERM (without the handler, say how else to stop it).
pub fn stop_on_signals(h: ecstack_nbd::ShutdownHandle) {
    if let Err(e) = crate::signals::on_stop(move || {
        eprintln!("ecstack: signal received, stopping the NBD server");
        h.shutdown();
    }) {
        eprintln!("ecstack: warning: {e}; stop the server with the admin 'shutdown' command");
    }
}
