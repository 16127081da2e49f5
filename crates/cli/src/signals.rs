//! Signals for the whole binary, through `signal-hook` (no library installs a handler): one thread
//! waits for SIGINT and SIGTERM and calls what the running command registered with [`on_stop`]
//! (libraries expose the hooks: `ecstack_nbd::ShutdownHandle::shutdown`,
//! `ecstack_lab::codfs_netns::cleanup`, the experiments' scratch directories in `scratch.rs`), then
//! exits if the command asked for it ([`exit_on_stop`]), and wakes the async daemons waiting in [`stopped`]; a second
//! SIGINT/SIGTERM exits at once with status 130. Another thread turns SIGHUP into
//! `ecstack_reduce::reload_config` ([`on_hangup`]), installed only by the commands that reread a
//! configuration file on it (elsewhere SIGHUP keeps its default: the process ends).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use anyhow::{Context, Result};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

type Hook = Box<dyn Fn() + Send>;

static STOP_HOOKS: Mutex<Vec<Hook>> = Mutex::new(Vec::new());
static HUP_HOOKS: Mutex<Vec<Hook>> = Mutex::new(Vec::new());
static STOPS: AtomicUsize = AtomicUsize::new(0);
/// Set by [`exit_on_stop`]: the first SIGINT/SIGTERM exits (status 130) once every hook ran.
static EXIT_AFTER_HOOKS: AtomicBool = AtomicBool::new(false);
/// Set once by the first SIGINT/SIGTERM; [`stopped`] waits for it.
static STOPPED: OnceLock<tokio::sync::watch::Sender<bool>> = OnceLock::new();
static STOP_THREAD: OnceLock<std::result::Result<(), String>> = OnceLock::new();
static HUP_THREAD: OnceLock<std::result::Result<(), String>> = OnceLock::new();

fn stopped_tx() -> &'static tokio::sync::watch::Sender<bool> {
    STOPPED.get_or_init(|| tokio::sync::watch::channel(false).0)
}

fn lock(m: &Mutex<Vec<Hook>>) -> std::sync::MutexGuard<'_, Vec<Hook>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Start a thread running `on_signal` for each of `signals` (once per `slot`).
fn spawn_waiter(
    slot: &'static OnceLock<std::result::Result<(), String>>,
    signals: &[i32],
    name: &str,
    on_signal: fn(i32),
) -> Result<()> {
    slot.get_or_init(|| {
        let mut sigs = Signals::new(signals).map_err(|e| format!("cannot watch signals: {e}"))?;
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                for s in sigs.forever() {
                    on_signal(s);
                }
            })
            .map(|_| ())
            .map_err(|e| format!("cannot start the signal thread: {e}"))
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

fn stop_signal(_: i32) {
    if STOPS.fetch_add(1, Ordering::SeqCst) >= 1 {
        eprintln!("ecstack: second signal, exiting now");
        std::process::exit(130);
    }
    // send_replace, not send: `send` drops the value when no receiver exists yet, and a signal
    // that arrives before `stopped` first subscribes would be lost (`cluster up` then ignored
    // a SIGTERM sent right after its "try:" line).
    stopped_tx().send_replace(true);
    let hooks: Vec<Hook> = lock(&STOP_HOOKS).drain(..).collect();
    for h in hooks {
        h();
    }
    if EXIT_AFTER_HOOKS.load(Ordering::SeqCst) {
        std::process::exit(130);
    }
}

fn hangup_signal(_: i32) {
    for h in lock(&HUP_HOOKS).iter() {
        h();
    }
}

/// Watch SIGINT and SIGTERM from now on (a signal before [`stopped`] is awaited is not lost).
pub fn watch_stop() -> Result<()> {
    stopped_tx();
    spawn_waiter(&STOP_THREAD, &[SIGINT, SIGTERM], "signals", stop_signal).context("SIGINT/SIGTERM")
}

/// Call `hook` once, on the first SIGINT or SIGTERM.
pub fn on_stop(hook: impl Fn() + Send + 'static) -> Result<()> {
    lock(&STOP_HOOKS).push(Box::new(hook));
    watch_stop()
}

/// Exit with status 130 on the first SIGINT or SIGTERM, after every [`on_stop`] hook ran (for
/// commands with nothing to wind down but what their hooks clean up, such as experiments).
pub fn exit_on_stop() -> Result<()> {
    EXIT_AFTER_HOOKS.store(true, Ordering::SeqCst);
    watch_stop()
}

/// Returns on the first SIGINT or SIGTERM since [`watch_stop`] (called here if it was not).
pub async fn stopped() {
    if let Err(e) = watch_stop() {
        eprintln!("ecstack: warning: {e}; stop with SIGKILL");
        std::future::pending::<()>().await;
    }
    let mut rx = stopped_tx().subscribe();
    let _ = rx.wait_for(|&s| s).await;
}

/// Call `hook` on every SIGHUP (from now on SIGHUP no longer ends the process).
pub fn on_hangup(hook: impl Fn() + Send + 'static) -> Result<()> {
    lock(&HUP_HOOKS).push(Box::new(hook));
    spawn_waiter(&HUP_THREAD, &[SIGHUP], "sighup", hangup_signal).context("SIGHUP")
}
