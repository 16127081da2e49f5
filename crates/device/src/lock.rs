//! Exclusive locks on the files and block devices behind a device, so two programs cannot open one
//! array at once (issue 46).
//!
//! A regular file is locked with `flock(LOCK_EX | LOCK_NB)` on a descriptor of its own; a block
//! device is also opened with `O_EXCL`, which the kernel refuses while the device is mounted or
//! opened exclusively by anyone else. The lock lasts as long as the [`DeviceLock`] (closing the
//! descriptor releases it, also when the process dies). Each `flock` is on its own open file
//! description, so a second lock of one file is refused in the same process too.
//!
//! When a lock is refused, [`Holder`] names the process holding it, found in `/proc/locks` by the
//! file's device and inode, with its command line from `/proc/<pid>/cmdline`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// A held exclusive lock on one file or block device; dropping it releases the lock.
#[derive(Debug)]
pub struct DeviceLock {
    _file: File,
    path: PathBuf,
}

impl DeviceLock {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The process that holds a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// Its arguments (empty if `/proc/<pid>/cmdline` could not be read).
    pub cmdline: Vec<String>,
}

impl Holder {
    /// The command line as one string, shortened to `max_chars`.
    pub fn command(&self, max_chars: usize) -> String {
        let mut args = self.cmdline.clone();
        if let Some(first) = args.first_mut() {
            // The program's file name, not its whole path.
            if let Some(base) = Path::new(first.as_str()).file_name() {
                *first = base.to_string_lossy().into_owned();
            }
        }
        let s = args.join(" ");
        if s.chars().count() <= max_chars {
            return s;
        }
        let cut: String = s.chars().take(max_chars.saturating_sub(3)).collect();
        format!("{cut}...")
    }

    /// The admin socket the holder was started with (`--admin-socket PATH` or `--admin PATH`),
    /// if its command line names one.
    pub fn admin_socket(&self) -> Option<String> {
        let args = &self.cmdline;
        for (i, a) in args.iter().enumerate() {
            for flag in ["--admin-socket", "--admin"] {
                if a == flag {
                    return args.get(i + 1).cloned();
                }
                if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                    return Some(v.to_string());
                }
            }
        }
        None
    }
}

/// The process holding a lock, for a refusal's one line: `pid N: COMMAND`, `pid N, this
/// process`, or that `/proc/locks` did not name it.
pub fn holder_line(holder: Option<Holder>) -> String {
    match holder {
        None => "holder not found in /proc/locks".to_string(),
        Some(h) if h.pid == std::process::id() => format!("pid {}, this process", h.pid),
        Some(h) => format!("pid {}: {}", h.pid, h.command(120)),
    }
}

/// Why a lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Someone else holds it; `holder` when it could be found.
    Busy { holder: Option<Holder> },
    /// The file could not be opened or locked for another reason.
    Io(std::io::Error),
}

/// Take the exclusive lock on `path` (a regular file or a block device), without waiting.
pub fn lock_exclusive(path: &Path) -> Result<DeviceLock, LockError> {
    let is_block = std::fs::metadata(path)
        .map(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_block_device()
        })
        .map_err(LockError::Io)?;
    let mut oo = OpenOptions::new();
    oo.read(true);
    if is_block {
        // The kernel's exclusive claim on a block device: EBUSY while it is mounted or held.
        oo.custom_flags(libc::O_EXCL);
    }
    let file = match oo.open(path) {
        Ok(f) => f,
        Err(e) if is_block && e.raw_os_error() == Some(libc::EBUSY) => {
            return Err(LockError::Busy {
                holder: holder_of(path),
            })
        }
        Err(e) => return Err(LockError::Io(e)),
    };
    // SAFETY: flock takes a descriptor we own (kept open by `file`) and two integers; no memory.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(LockError::Busy {
                holder: holder_of(path),
            });
        }
        return Err(LockError::Io(e));
    }
    Ok(DeviceLock {
        _file: file,
        path: path.to_path_buf(),
    })
}

/// Take the exclusive lock on the lock file `path` (created if absent), then write this process's
/// pid in it for people reading it. A refusal's holder comes from `/proc/locks`, which is right
/// even when the file's pid is stale (the file is never truncated before the lock is held).
pub fn lock_file_with_pid(path: &Path) -> Result<DeviceLock, LockError> {
    use std::io::Write;
    let mut pid_file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(LockError::Io)?;
    let lock = lock_exclusive(path)?;
    pid_file.set_len(0).map_err(LockError::Io)?;
    write!(pid_file, "{}", std::process::id()).map_err(LockError::Io)?;
    Ok(lock)
}

/// The process holding a `flock` on `path`, from `/proc/locks`.
pub fn holder_of(path: &Path) -> Option<Holder> {
    let meta = std::fs::metadata(path).ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = find_flock_holder(&locks, meta.dev(), meta.ino())?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default();
    Some(Holder { pid, cmdline })
}

/// The pid of the `FLOCK` entry of `/proc/locks` (text `locks`) on the inode `ino` of device
/// `dev`. An entry on the same inode number with another device number is taken only if no entry
/// matches both (overlay file systems can show the underlying device in one place and not the
/// other).
fn find_flock_holder(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = split_dev(dev);
    let mut inode_only = None;
    for line in locks.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters have "->" after the number.
        if f.len() < 6 || f[1] != "FLOCK" {
            continue;
        }
        let Ok(pid) = f[4].parse::<u32>() else {
            continue;
        };
        let id: Vec<&str> = f[5].split(':').collect();
        if id.len() != 3 || id[2].parse::<u64>().ok() != Some(ino) {
            continue;
        }
        let maj = u64::from_str_radix(id[0], 16).ok();
        let min = u64::from_str_radix(id[1], 16).ok();
        if maj == Some(major) && min == Some(minor) {
            return Some(pid);
        }
        inode_only.get_or_insert(pid);
    }
    inode_only
}

/// Major and minor numbers of a `st_dev` (glibc's encoding).
fn split_dev(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_flock_holder_by_device_and_inode() {
        let text = "1: POSIX  ADVISORY  WRITE 10 08:01:77 0 EOF\n\
                    2: FLOCK  ADVISORY  WRITE 1234 08:01:77 0 EOF\n\
                    2: -> FLOCK  ADVISORY  WRITE 99 08:01:77 0 EOF\n\
                    3: FLOCK  ADVISORY  WRITE 55 00:2a:78 0 EOF\n";
        let dev = (8 << 8) | 1;
        assert_eq!(find_flock_holder(text, dev, 77), Some(1234));
        assert_eq!(find_flock_holder(text, dev, 78), Some(55));
        assert_eq!(find_flock_holder(text, dev, 79), None);
    }

    #[test]
    fn second_lock_is_refused_and_drop_releases() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d");
        std::fs::write(&p, b"x").unwrap();
        let first = lock_exclusive(&p).unwrap();
        match lock_exclusive(&p) {
            Err(LockError::Busy { holder }) => {
                if let Some(h) = holder {
                    assert_eq!(h.pid, std::process::id());
                }
            }
            other => panic!("expected Busy, got {other:?}"),
        }
        drop(first);
        lock_exclusive(&p).unwrap();
    }

    #[test]
    fn admin_socket_from_the_command_line() {
        let h = Holder {
            pid: 1,
            cmdline: ["/usr/bin/ecstack", "array", "serve", "--admin-socket", "/s"]
                .map(String::from)
                .to_vec(),
        };
        assert_eq!(h.admin_socket().as_deref(), Some("/s"));
        assert_eq!(h.command(100), "ecstack array serve --admin-socket /s");
        let h2 = Holder {
            pid: 1,
            cmdline: vec!["x".into(), "--admin=/t".into()],
        };
        assert_eq!(h2.admin_socket().as_deref(), Some("/t"));
    }
}
