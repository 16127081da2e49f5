//! SIGINT/SIGTERM → stop every server started through [`crate::serve`] (ctrlc, installed once).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use tracing::{info, warn};

use crate::ShutdownHandle;

static HANDLES: Mutex<Vec<ShutdownHandle>> = Mutex::new(Vec::new());
static INSTALLED: OnceLock<bool> = OnceLock::new();
static SIGNALS: AtomicUsize = AtomicUsize::new(0);

/// Register `h` to be stopped on SIGINT/SIGTERM; returns whether the handler is in place.
pub(crate) fn stop_on_signals(h: ShutdownHandle) -> bool {
    let ok = *INSTALLED.get_or_init(|| {
        let res = ctrlc::set_handler(|| {
            if SIGNALS.fetch_add(1, Ordering::SeqCst) >= 1 {
                eprintln!("ecstack-nbd: second signal, exiting now");
                std::process::exit(130);
            }
            info!("nbd: signal received, stopping");
            let hs: Vec<ShutdownHandle> = HANDLES
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .drain(..)
                .collect();
            for h in hs {
                h.shutdown();
            }
        });
        match res {
            Ok(()) => true,
            Err(e) => {
                warn!("nbd: cannot install the SIGINT/SIGTERM handler ({e}); stop the server with the admin 'shutdown' command");
                false
            }
        }
    });
    SIGNALS.store(0, Ordering::SeqCst);
    HANDLES.lock().unwrap_or_else(|p| p.into_inner()).push(h);
    ok
}
