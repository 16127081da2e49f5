//! A throwaway PostgreSQL server for tests: Debian's binaries (`/usr/lib/postgresql/<v>/bin`,
//! package `postgresql`), a cluster made by `initdb` in a temporary directory, listening only on a
//! unix socket in that directory, with `trust` authentication for the user `ecstack`.
//!
//! One server per test binary ([`shared`]): tests take a database each ([`TempPostgres::create_db`]).
//! `initdb` refuses root, so as root the server runs as `nobody` (via `setpriv`). It is started
//! with a parent-death signal (SIGINT, a fast shutdown) tied to a thread that lives as long as the
//! test process, so it stops when the test binary exits however it exits; a directory left behind
//! by a killed run is removed by the next run (its pid is gone).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the server gets to start.
const START_MS_MAX: u64 = 60_000;
const DIR_PREFIX: &str = "ecstack-pg-";

/// A running server.
pub struct TempPostgres {
    bin: PathBuf,
    dir: PathBuf,
    /// `Some(("nobody", "nogroup"))` when the tools run as another user.
    as_user: Option<(String, String)>,
}

/// The newest `/usr/lib/postgresql/<version>/bin` with `initdb`.
pub fn bin_dir() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, b)| b)
}

/// The server of this test binary, started on first use; `None` (after the missing-tool rule of
/// [`crate::require`]: a failure under CI, a skip notice elsewhere) when PostgreSQL is not installed.
pub fn shared() -> Option<&'static TempPostgres> {
    static SERVER: OnceLock<Option<TempPostgres>> = OnceLock::new();
    let bin = bin_dir();
    if !crate::require(
        "PostgreSQL (/usr/lib/postgresql/*/bin/initdb)",
        bin.is_some(),
        "postgresql",
    ) {
        return None;
    }
    SERVER
        .get_or_init(|| {
            Some(TempPostgres::start(bin.expect("checked")).unwrap_or_else(|e| panic!("{e}")))
        })
        .as_ref()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Removes the directories of earlier runs whose process is gone.
fn remove_stale_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl TempPostgres {
    /// `program` through `setpriv`: as [`Self::as_user`] when set, with a parent-death signal
    /// (SIGINT) when `tied`.
    fn setpriv(&self, program: &Path, tied: bool) -> Command {
        let mut c = Command::new("setpriv");
        if tied {
            c.arg("--pdeathsig=INT");
        }
        if let Some((user, group)) = &self.as_user {
            c.args([
                format!("--reuid={user}"),
                format!("--regid={group}"),
                "--clear-groups".to_owned(),
            ]);
        }
        c.arg("--").arg(program);
        c
    }

    /// One of the server's tools (`initdb`, `createdb`).
    fn command(&self, program: &str) -> Command {
        self.setpriv(&self.bin.join(program), false)
    }

    fn run(&self, mut c: Command, what: &str) -> Result<(), String> {
        let out = c
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {what}: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    fn start(bin: PathBuf) -> Result<TempPostgres, String> {
        let tmp = std::env::temp_dir();
        remove_stale_dirs(&tmp);
        let dir = tmp.join(format!("{DIR_PREFIX}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let as_user = is_root().then(|| ("nobody".to_owned(), "nogroup".to_owned()));
        let pg = TempPostgres { bin, dir, as_user };
        let mut mkdir = pg.setpriv(Path::new("mkdir"), false);
        mkdir.arg("-p").arg(pg.dir.join("sock"));
        pg.run(mkdir, "mkdir")?;
        let mut initdb = pg.command("initdb");
        initdb
            .args([
                "--auth=trust",
                "--username=ecstack",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "-D",
            ])
            .arg(pg.dir.join("data"));
        pg.run(initdb, "initdb")?;
        // The postmaster is a child of a thread that lives as long as this process: its
        // parent-death signal (a fast shutdown) fires when the test binary exits.
        let mut postgres = pg.setpriv(&pg.bin.join("postgres"), true);
        postgres
            .arg("-D")
            .arg(pg.dir.join("data"))
            .arg("-k")
            .arg(pg.dir.join("sock"))
            .args([
                "-c",
                "listen_addresses=",
                "-c",
                "fsync=on",
                "-c",
                "synchronous_commit=on",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let log = pg.dir.join("server.log");
        let log_file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        postgres.stderr(log_file);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("postgres-parent".into())
            .spawn(move || {
                let child = postgres.spawn();
                let ok = child.is_ok();
                let _ = tx.send(child.map(|_| ()).map_err(|e| e.to_string()));
                if ok {
                    loop {
                        std::thread::park();
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        rx.recv()
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot start postgres: {e}"))?;
        let deadline = Instant::now() + Duration::from_millis(START_MS_MAX);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("ready to accept connections") {
                return Ok(pg);
            }
            if Instant::now() > deadline || text.contains("FATAL") {
                return Err(format!("postgres did not start: {text}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The directory of the server's unix socket.
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.join("sock")
    }

    /// A URL of database `db` for the user `ecstack`.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgresql://ecstack@/{db}?host={}",
            self.socket_dir().display()
        )
    }

    /// Creates database `db` (empty) and returns its URL.
    pub fn create_db(&self, db: &str) -> String {
        let mut c = self.command("createdb");
        c.arg("-h")
            .arg(self.socket_dir())
            .args(["-U", "ecstack", db]);
        self.run(c, "createdb").unwrap_or_else(|e| panic!("{e}"));
        self.url(db)
    }
}
