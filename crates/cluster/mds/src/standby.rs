//! An MDS of an active and its standbys on one PostgreSQL store (`[mds] addrs`; issue 43, CodFS
//! §4.4.3). Each runs this loop on a thread of its own beside its server:
//!
//! - **Standby.** Every sixth of `lease_ms` it tries to take the store's lease
//!   ([`crate::lease`]); while another MDS holds it, every call is answered `Unavailable` naming
//!   that MDS (clients and OSDs move on to it).
//! - **Takeover.** Only a lapsed lease is taken. The MDS then opens its core on a store fenced at
//!   its new term ([`MdsCore::open`]: every OSD gets a full `down_after_ms` to heartbeat it
//!   before it can be declared down) and answers.
//! - **Active.** It renews every third of `lease_ms` and answers until its last successful
//!   renewal's sending plus `lease_ms` (less [`crate::lease::LOCAL_MARGIN`]). A renewal that
//!   finds another term, or no renewal before that instant, and the MDS answers nothing more —
//!   heartbeats included, so the OSDs' primary leases lapse as they would with a dead MDS — drops
//!   its core and is a standby again.
//! - **Stop.** A stopped MDS gives its lease up, so a standby takes over at its next poll.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::{MdsCore, MdsSettings};
use crate::lease::{stall_ms, PgLease, Take, LOCAL_MARGIN};
use crate::service::MdsHandle;
use crate::store_pg::PgStore;

/// What the lease loop needs.
#[derive(Clone)]
pub struct StandbyOptions {
    /// The PostgreSQL store every MDS of the cluster shares.
    pub url: String,
    /// This MDS as the lease row names it (its address and pid).
    pub holder: String,
    pub lease_ms: u64,
    pub settings: MdsSettings,
}

impl StandbyOptions {
    fn renew_every(&self) -> Duration {
        Duration::from_millis((self.lease_ms / 3).max(1))
    }

    fn poll_every(&self) -> Duration {
        Duration::from_millis((self.lease_ms / 6).max(1))
    }

    /// How long after sending a successful renewal (or take) the MDS answers.
    fn valid_for(&self) -> Duration {
        Duration::from_millis(self.lease_ms - self.lease_ms * LOCAL_MARGIN.0 / LOCAL_MARGIN.1)
    }
}

/// Sleeps `d` unless `stop` is set first; whether to go on.
fn nap(d: Duration, stop: &AtomicBool) -> bool {
    let end = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(20)));
    }
    false
}

/// Runs the lease loop for `handle` (made by [`MdsHandle::standby`]) on a new thread until `stop`
/// is set; then gives the lease up if held.
pub fn spawn(
    handle: MdsHandle,
    opts: StandbyOptions,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("mds-lease".into())
        .spawn(move || run(&handle, &opts, &stop))
        .expect("spawn the MDS lease thread")
}

fn run(handle: &MdsHandle, opts: &StandbyOptions, stop: &AtomicBool) {
    let mut lease = PgLease::new(&opts.url, &opts.holder, opts.lease_ms);
    let mut last_line = String::new();
    // Tell each change of what the loop waits for once, not every poll.
    let mut say = |line: String| {
        if line != last_line {
            tracing::info!("{line}");
            last_line = line;
        }
    };
    let mut schema_made = false;
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        // The schema first, for a new database (two MDSs may race to make it; one retries).
        let taken = if schema_made {
            lease.try_take()
        } else {
            PgStore::connect_fenced(&opts.url, 0, stall_ms(opts.lease_ms)).and_then(|s| {
                drop(s);
                schema_made = true;
                lease.try_take()
            })
        };
        match taken {
            Ok(Take::Took(term)) => {
                say(format!("MDS {}: took the lease, term {term}", opts.holder));
                let opened = PgStore::connect_fenced(&opts.url, term, stall_ms(opts.lease_ms))
                    .map_err(|e| e.to_string())
                    .and_then(|s| {
                        MdsCore::open(Box::new(s), opts.settings.clone(), handle.clock().clone())
                            .map_err(|e| e.to_string())
                    });
                match opened {
                    Ok(core) => {
                        handle.activate(core, sent + opts.valid_for());
                        tracing::info!(term, "MDS active");
                        serve_while_renewed(handle, &mut lease, term, sent, opts, stop);
                    }
                    Err(e) => {
                        tracing::error!("MDS took the lease but cannot open its store: {e}");
                        let _ = lease.release(term);
                    }
                }
            }
            Ok(Take::Held {
                holder,
                remaining_ms,
            }) => {
                say(format!(
                    "MDS {}: standby; the active MDS is {holder} (lease for {remaining_ms} ms more)",
                    opts.holder
                ));
                drop(handle.depose(holder));
            }
            Err(e) => {
                say(format!(
                    "MDS {}: standby; cannot read the lease: {e}",
                    opts.holder
                ));
                drop(handle.depose(format!("not known ({e})")));
            }
        }
        nap(opts.poll_every(), stop);
    }
}

/// The active MDS's renewals, until it loses the lease (then it is a standby again) or stops.
fn serve_while_renewed(
    handle: &MdsHandle,
    lease: &mut PgLease,
    term: u64,
    mut sent: Instant,
    opts: &StandbyOptions,
    stop: &AtomicBool,
) {
    loop {
        if !nap(opts.renew_every(), stop) {
            drop(handle.depose("none: the active MDS stopped".into()));
            if let Err(e) = lease.release(term) {
                tracing::warn!("MDS stopping: cannot give its lease up ({e}); a standby takes over when it lapses");
            }
            return;
        }
        let attempt = Instant::now();
        match lease.renew(term) {
            Ok(true) => {
                sent = attempt;
                handle.extend(sent + opts.valid_for());
            }
            Ok(false) => {
                let active = lease
                    .read()
                    .map(|r| r.holder)
                    .unwrap_or_else(|e| format!("not known ({e})"));
                tracing::warn!(term, "MDS deposed: {active} holds the lease now");
                drop(handle.depose(active));
                return;
            }
            Err(e) => {
                tracing::warn!(term, "MDS cannot renew its lease: {e}");
                if Instant::now() >= sent + opts.valid_for() {
                    tracing::warn!(term, "MDS lease lapsed: answering nothing");
                    drop(handle.depose(format!("not known ({e})")));
                    return;
                }
            }
        }
    }
}
