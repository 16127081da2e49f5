//! What the NBD real-client tests share (`array_fio.rs`, `tween_nbd.rs`): the binary, a free port,
//! an `ecstack array serve` child that is killed when dropped, and the TRIM check through fio's nbd
//! engine and nbdcopy.
#![allow(dead_code)] // each test crate uses a part

use ecstack_nbd::admin_request;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn ecstack(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(args)
        .output()
        .expect("run ecstack")
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `ecstack array serve` as a child (killed when dropped).
pub struct Served(pub Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Served {
    /// Starts `ecstack array serve` with `args` and the admin socket `sock`, and waits until the
    /// socket answers; an early exit panics with the server's stderr.
    pub fn start(args: &[&str], sock: &Path) -> Served {
        let _ = std::fs::remove_file(sock);
        let child = Command::new(env!("CARGO_BIN_EXE_ecstack"))
            .args(["array", "serve"])
            .args(args)
            .args(["--admin", sock.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut s = Served(child);
        let start = Instant::now();
        loop {
            if admin_request(sock, "ping").is_ok() {
                return s;
            }
            if let Ok(Some(st)) = s.0.try_wait() {
                let mut err = String::new();
                use std::io::Read;
                let _ = s.0.stderr.take().unwrap().read_to_string(&mut err);
                panic!("array serve exited early: {st}: {err}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "array serve did not come up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stop through the admin socket and wait for the process (its close persists everything).
    pub fn stop(mut self, sock: &Path) {
        let _ = admin_request(sock, "shutdown");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(st)) = self.0.try_wait() {
                assert!(st.success(), "array serve exited with {st}");
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("array serve did not stop");
    }
}

/// The whole export at `uri`, read by nbdcopy into `dir/name`.
pub fn nbd_copy(uri: &str, dir: &Path, name: &str, label: &str) -> Vec<u8> {
    let f = dir.join(name);
    let o = Command::new("nbdcopy")
        .args([uri, f.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{label}: nbdcopy: {o:?}");
    std::fs::read(&f).unwrap()
}

/// TRIM of bytes `from..to` with fio's nbd engine: nbdcopy of the whole export (into files under
/// `dir`) reads zeros there afterwards (fio had written something there before), and every other
/// byte unchanged. Returns the export's bytes after the TRIM.
pub fn check_trim(uri: &str, dir: &Path, from: usize, to: usize, label: &str) -> Vec<u8> {
    let before = nbd_copy(uri, dir, "before.img", label);
    let o = Command::new("fio")
        .args([
            "--name=trim",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=trim",
            "--bs=1M",
            &format!("--offset={from}"),
            &format!("--size={}", to - from),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{label}: fio trim: {o:?}");
    let after = nbd_copy(uri, dir, "after.img", label);
    assert!(
        before[from..to].iter().any(|&x| x != 0),
        "{label}: fio wrote nothing there"
    );
    assert!(
        after[from..to].iter().all(|&x| x == 0),
        "{label}: trimmed range is not zero"
    );
    assert!(
        before[..from] == after[..from] && before[to..] == after[to..],
        "{label}: trim changed other bytes"
    );
    after
}
