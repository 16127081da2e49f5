//! The admin channel: one text command per line on a Unix socket, one reply line per command.
//!
//! Wire format (both directions UTF-8, `\n`-terminated):
//!
//! ```text
//! client:  <command line>
//! server:  ok <text>        the command succeeded
//!          err <message>    it failed (one line)
//! ```
//!
//! Newlines and backslashes inside `<text>` are escaped as `\n` and `\\` so a multi-line answer still
//! travels as one line; [`admin_request`] undoes the escaping. The server answers a few commands
//! itself (`ping`, `nbd-stats`, `device-stats`, `shutdown`, `help`) and hands every other line to the
//! [`Admin`] handler (the array's `status`, `fail 2`, `rebuild 2`, `commit`, …).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tracing::{debug, warn};

use crate::NbdError;

/// Commands for the thing being served (the array), one text line in, one answer out.
pub trait Admin: Send + Sync {
    /// Run one command line (already trimmed, never empty). `Ok` is the answer (JSON or text);
    /// `Err` is a one-line message for the user.
    fn command(&self, line: &str) -> Result<String, String>;
}

/// What the built-in commands need of the export being served. The server implements it, so this
/// module knows nothing of the server's internals (and the two do not import each other).
pub(crate) trait Export: Send + Sync {
    /// The `nbd-stats` answer: the server's counters with the export name, size and device.
    fn stats_json(&self) -> Result<serde_json::Value, String>;
    /// The device behind the export.
    fn device(&self) -> &dyn ecstack_device::BlockDevice;
    /// Ask the server to stop.
    fn request_stop(&self);
}

/// Longest command line accepted.
const MAX_LINE: u64 = 64 << 10;

const BUILTINS: &str = "ping, nbd-stats, device-stats, shutdown, help";

type ConnMap = Arc<Mutex<HashMap<u64, UnixStream>>>;

pub(crate) struct AdminServer {
    path: PathBuf,
    stopping: Arc<AtomicBool>,
    conns: ConnMap,
    thread: Option<JoinHandle<()>>,
}

impl AdminServer {
    pub(crate) fn start(
        path: PathBuf,
        admin: Option<Arc<dyn Admin>>,
        shared: Arc<dyn Export>,
    ) -> Result<AdminServer, NbdError> {
        let sock_err = |e: std::io::Error| NbdError::AdminSocket {
            path: path.display().to_string(),
            err: e,
        };
        let listener = match UnixListener::bind(&path) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                // A socket file is there: reuse it only if nobody answers on it.
                let is_socket = std::fs::symlink_metadata(&path)
                    .map(|m| m.file_type().is_socket())
                    .unwrap_or(false);
                if !is_socket || UnixStream::connect(&path).is_ok() {
                    return Err(NbdError::AdminSocketInUse {
                        path: path.display().to_string(),
                    });
                }
                std::fs::remove_file(&path).map_err(sock_err)?;
                UnixListener::bind(&path).map_err(sock_err)?
            }
            Err(e) => return Err(sock_err(e)),
        };
        let stopping = Arc::new(AtomicBool::new(false));
        let st = Arc::clone(&stopping);
        let conns: ConnMap = Arc::default();
        let cs = Arc::clone(&conns);
        let thread = thread::Builder::new()
            .name("nbd-admin".into())
            .spawn(move || {
                let mut next_id = 0u64;
                for conn in listener.incoming() {
                    if st.load(Relaxed) {
                        break;
                    }
                    match conn {
                        Ok(s) => {
                            let admin = admin.clone();
                            let shared = Arc::clone(&shared);
                            next_id += 1;
                            let id = next_id;
                            if let Ok(c) = s.try_clone() {
                                lock(&cs).insert(id, c);
                            }
                            let cs2 = Arc::clone(&cs);
                            let spawned = thread::Builder::new()
                                .name("nbd-admin-conn".into())
                                .spawn(move || {
                                    serve_admin_conn(s, admin.as_deref(), shared.as_ref());
                                    lock(&cs2).remove(&id);
                                });
                            if let Err(e) = spawned {
                                warn!("nbd: admin: cannot spawn thread: {e}");
                            }
                        }
                        Err(e) => {
                            warn!("nbd: admin: accept failed: {e}");
                            thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
            })
            .map_err(|e| NbdError::Io {
                what: "spawning admin thread".into(),
                err: e,
            })?;
        Ok(AdminServer {
            path,
            stopping,
            conns,
            thread: Some(thread),
        })
    }

    pub(crate) fn stop(mut self) {
        self.stopping.store(true, Relaxed);
        if let Some(h) = self.thread.take() {
            if UnixStream::connect(&self.path).is_ok() {
                let _ = h.join();
            }
        }
        // Idle admin clients must not keep the served device alive after the server stops.
        for (_, c) in lock(&self.conns).drain() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn escape(s: &str) -> String {
    let t = s.strip_suffix('\n').unwrap_or(s);
    let mut o = String::with_capacity(t.len());
    for ch in t.chars() {
        match ch {
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            c => o.push(c),
        }
    }
    o
}

fn unescape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next() {
                Some('n') => o.push('\n'),
                Some('r') => o.push('\r'),
                Some(other) => o.push(other),
                None => o.push('\\'),
            }
        } else {
            o.push(c);
        }
    }
    o
}

fn serve_admin_conn(s: UnixStream, admin: Option<&dyn Admin>, shared: &dyn Export) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(600)));
    let mut w = match s.try_clone() {
        Ok(w) => w,
        Err(e) => {
            warn!("nbd: admin: cannot clone socket: {e}");
            return;
        }
    };
    let mut r = BufReader::new(s);
    loop {
        let mut raw = Vec::new();
        match r.by_ref().take(MAX_LINE).read_until(b'\n', &mut raw) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                debug!("nbd: admin: read failed: {e}");
                return;
            }
        }
        if raw.last() != Some(&b'\n') && raw.len() as u64 >= MAX_LINE {
            let _ = w.write_all(b"err command line too long\n");
            warn!("nbd: admin: command line longer than {MAX_LINE} bytes; disconnected");
            return;
        }
        let line = String::from_utf8_lossy(&raw);
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let answer = run_command(line, admin, shared);
        let out = match answer {
            Ok(t) => format!("ok {}\n", escape(&t)),
            Err(m) => format!("err {}\n", escape(&m)),
        };
        let written = w.write_all(out.as_bytes()).and_then(|()| w.flush());
        // A shutdown stops the export only once its answer is out: stopping first raced the
        // server's teardown, which could close this connection before the answer was written.
        if line == "shutdown" {
            shared.request_stop();
        }
        if written.is_err() {
            return;
        }
    }
}

fn run_command(
    line: &str,
    admin: Option<&dyn Admin>,
    shared: &dyn Export,
) -> Result<String, String> {
    match line {
        "ping" => Ok("pong".into()),
        "nbd-stats" => Ok(shared.stats_json()?.to_string()),
        "device-stats" => {
            serde_json::to_string(&shared.device().stats()).map_err(|e| e.to_string())
        }
        // The caller stops the export after it has sent this answer (`serve_admin_conn`).
        "shutdown" => Ok("stopping".into()),
        "help" => {
            let mut s = format!("built-in commands: {BUILTINS}");
            match admin {
                Some(a) => {
                    if let Ok(h) = a.command("help") {
                        s.push('\n');
                        s.push_str(&h);
                    }
                }
                None => s.push_str(" (no other handler on this server)"),
            }
            Ok(s)
        }
        _ => match admin {
            Some(a) => {
                let r = catch(|| a.command(line));
                if let Err(m) = &r {
                    debug!("nbd: admin: '{line}' failed: {m}");
                }
                r
            }
            None => Err(format!(
                "unknown command '{}' (this server answers only: {BUILTINS})",
                line.split_whitespace().next().unwrap_or("")
            )),
        },
    }
}

fn catch(f: impl FnOnce() -> Result<String, String>) -> Result<String, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err("admin command panicked".into()))
}

/// Send one command line to the admin socket at `socket` and return the answer
/// (`Err(NbdError::AdminCommand)` when the server reports the command failed).
pub fn admin_request(socket: &Path, line: &str) -> Result<String, NbdError> {
    let line = line.trim();
    if line.is_empty() || line.contains('\n') {
        return Err(NbdError::Config(
            "an admin command is one non-empty line".into(),
        ));
    }
    let conn_err = |e: std::io::Error| NbdError::AdminSocket {
        path: socket.display().to_string(),
        err: e,
    };
    let mut s = UnixStream::connect(socket).map_err(conn_err)?;
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .map_err(conn_err)?;
    s.write_all(format!("{line}\n").as_bytes())
        .map_err(conn_err)?;
    let mut r = BufReader::new(s);
    let mut reply = String::new();
    r.read_line(&mut reply).map_err(conn_err)?;
    let reply = reply.trim_end_matches(['\n', '\r']);
    if let Some(t) = reply
        .strip_prefix("ok ")
        .or(if reply == "ok" { Some("") } else { None })
    {
        Ok(unescape(t))
    } else if let Some(m) = reply.strip_prefix("err ") {
        Err(NbdError::AdminCommand(unescape(m)))
    } else if reply.is_empty() {
        Err(NbdError::Protocol(format!(
            "admin socket {} closed without an answer",
            socket.display()
        )))
    } else {
        Err(NbdError::Protocol(format!(
            "unexpected admin answer '{reply}'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_roundtrips() {
        for s in [
            "plain",
            "two\nlines",
            "back\\slash\\n",
            "{\"a\":\"x\\ny\"}",
            "",
        ] {
            assert_eq!(unescape(&escape(s)), s);
            assert!(!escape(s).contains('\n'));
        }
    }
}
