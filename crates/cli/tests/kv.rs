//! `ecstack kv serve` with real Redis clients: redis-cli and redis-benchmark (Debian's redis-tools)
//! against a server process on a free loopback port, results checked (values read back, counts,
//! error texts), plus AUTH, protocol garbage, many connections, and a SIGKILL + restart on an
//! eplog array of files. Without the tools these tests fail under CI (`CI=true` or
//! `ECSTACK_REQUIRE_CLIENTS=1`) and say so otherwise (`ecstack_testkit::require_tool`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(["kv", "serve", "--addr", "127.0.0.1:0"])
        .args(args)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start ecstack kv serve");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let port = loop {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!(
                "ecstack kv serve exited before listening: {}",
                child.wait().unwrap()
            );
        }
        if let Some(rest) = line.split(" on 127.0.0.1:").nth(1) {
            let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
            break port.parse().unwrap();
        }
    };
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = err.read_to_string(&mut sink);
    });
    Server { child, port }
}

/// Whether `tool` runs; without it, fail under CI and skip loudly otherwise.
fn have(tool: &str) -> bool {
    ecstack_testkit::require_tool(tool, "redis-tools")
}

fn cli(port: u16, args: &[&str]) -> String {
    let o = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(
        o.status.success(),
        "redis-cli {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap().trim_end().to_string()
}

#[test]
fn redis_cli_commands() {
    if !have("redis-cli") {
        return;
    }
    let s = start(&["--device", "mem:16M"]);
    let p = s.port;
    assert_eq!(cli(p, &["PING"]), "PONG");
    assert_eq!(cli(p, &["ECHO", "hello there"]), "hello there");
    assert_eq!(cli(p, &["SET", "k1", "v1"]), "OK");
    assert_eq!(cli(p, &["GET", "k1"]), "v1");
    assert_eq!(cli(p, &["SET", "k1", "other", "NX"]), "");
    assert_eq!(cli(p, &["SET", "k2", "v2", "XX"]), "");
    assert_eq!(cli(p, &["SET", "k1", "v1b", "XX"]), "OK");
    assert_eq!(cli(p, &["MSET", "a", "1", "b", "2"]), "OK");
    assert_eq!(cli(p, &["MGET", "a", "nope", "b", "k1"]), "1\n\n2\nv1b");
    assert_eq!(cli(p, &["EXISTS", "a", "b", "nope"]), "2");
    assert_eq!(cli(p, &["DBSIZE"]), "3");
    assert_eq!(cli(p, &["DEL", "a", "nope"]), "1");
    assert_eq!(cli(p, &["EXISTS", "a"]), "0");
    assert_eq!(cli(p, &["DBSIZE"]), "2");
    assert_eq!(
        cli(p, &["FROB", "x"]),
        "ERR unknown command 'FROB', with args beginning with: 'x'"
    );
    assert_eq!(
        cli(p, &["GET"]),
        "ERR wrong number of arguments for 'get' command"
    );
    assert!(cli(p, &["INFO"]).contains("db0:keys=2"));
    assert_eq!(
        cli(p, &["CONFIG", "GET", "appendfsync"]),
        "appendfsync\neverysec"
    );
    // A value with every byte value, through stdin (-x).
    let value: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    let mut c = Command::new("redis-cli")
        .args(["-p", &p.to_string(), "-x", "SET", "bin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(&value).unwrap();
    assert!(c.wait().unwrap().success());
    let mut t = TcpStream::connect(("127.0.0.1", p)).unwrap();
    t.write_all(b"*2\r\n$3\r\nGET\r\n$3\r\nbin\r\n").unwrap();
    let mut want = format!("${}\r\n", value.len()).into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\n");
    let mut got = vec![0u8; want.len()];
    t.read_exact(&mut got).unwrap();
    assert!(got == want, "binary value did not come back intact");
}

#[test]
fn redis_benchmark_values_read_back() {
    if !have("redis-benchmark") || !have("redis-cli") {
        return;
    }
    let s = start(&["--device", "mem:64M", "--appendfsync", "always"]);
    let p = s.port.to_string();
    // 50 clients, pipelines of 16, 3000 SETs over 200 random keys with 100-byte values.
    let o = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &p,
            "-t",
            "set,get",
            "-n",
            "3000",
            "-r",
            "200",
            "-d",
            "100",
        ])
        .args(["-c", "50", "-P", "16", "-q", "--csv"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "redis-benchmark: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("\"SET\"") && out.contains("\"GET\""),
        "benchmark output: {out}"
    );
    let n: usize = cli(s.port, &["DBSIZE"]).parse().unwrap();
    assert!(
        (100..=200).contains(&n),
        "{n} keys after 3000 random SETs over 200"
    );
    // redis-benchmark's keys are key:%012d; its value is one -d-byte payload (random printable bytes
    // since Redis 7, 'x's before), the same for every SET of the run.
    let mut found = 0;
    let mut payload: Option<String> = None;
    for i in 0..200 {
        let v = cli(s.port, &["GET", &format!("key:{i:012}")]);
        if !v.is_empty() {
            assert_eq!(v.len(), 100, "value of key:{i:012}: {v:?}");
            let p = payload.get_or_insert_with(|| v.clone());
            assert_eq!(&v, p, "key:{i:012} holds another payload");
            found += 1;
        }
    }
    assert_eq!(found, n, "DBSIZE and the keys found disagree");
}

#[test]
fn auth_required_when_configured() {
    if !have("redis-cli") {
        return;
    }
    let s = start(&["--device", "mem:8M", "--requirepass", "s3cret"]);
    let p = s.port;
    assert_eq!(
        cli(p, &["SET", "k", "v"]),
        "NOAUTH Authentication required."
    );
    let o = Command::new("redis-cli")
        .args([
            "-p",
            &p.to_string(),
            "--no-auth-warning",
            "-a",
            "wrong",
            "PING",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("WRONGPASS")
            || String::from_utf8_lossy(&o.stderr).contains("WRONGPASS")
    );
    let o = Command::new("redis-cli")
        .args([
            "-p",
            &p.to_string(),
            "--no-auth-warning",
            "-a",
            "s3cret",
            "SET",
            "k",
            "v",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "OK");
}

/// Protocol garbage and many raw connections (no tools needed).
#[test]
fn garbage_gets_an_error_and_a_close_and_many_connections_pipeline() {
    let s = start(&["--device", "mem:16M"]);
    for junk in [
        &b"*1\r\n:oops\r\n"[..],
        b"*2\r\n$3\r\nGET\r\n$-7\r\n",
        b"*abc\r\n",
    ] {
        let mut t = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        t.write_all(junk).unwrap();
        let mut got = Vec::new();
        t.read_to_end(&mut got).unwrap(); // ends: the server closed the connection
        let got = String::from_utf8_lossy(&got);
        assert!(
            got.starts_with("-ERR Protocol error"),
            "reply to {junk:?}: {got}"
        );
    }
    // 24 connections, each a pipeline of 50 SETs then 50 GETs in one write.
    let handles: Vec<_> = (0..24)
        .map(|c| {
            let port = s.port;
            std::thread::spawn(move || {
                let mut t = TcpStream::connect(("127.0.0.1", port)).unwrap();
                let mut req = Vec::new();
                for i in 0..50 {
                    let (k, v) = (format!("c{c}:{i}"), format!("value-{c}-{i}"));
                    req.extend(
                        format!(
                            "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
                            k.len(),
                            v.len()
                        )
                        .bytes(),
                    );
                }
                for i in 0..50 {
                    let k = format!("c{c}:{i}");
                    req.extend(format!("GET {k}\r\n").bytes());
                }
                t.write_all(&req).unwrap();
                let mut want = "+OK\r\n".repeat(50);
                for i in 0..50 {
                    let v = format!("value-{c}-{i}");
                    want.push_str(&format!("${}\r\n{v}\r\n", v.len()));
                }
                let mut got = vec![0u8; want.len()];
                t.read_exact(&mut got).unwrap();
                assert_eq!(String::from_utf8_lossy(&got), want, "connection {c}");
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut t = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    t.write_all(b"DBSIZE\r\n").unwrap();
    let mut got = [0u8; 7];
    t.read_exact(&mut got).unwrap();
    assert_eq!(&got, b":1200\r\n");
}

/// An eplog (4+2) array of 8 MB files in `dir`, created with `ecstack array create`; its
/// `--device` spec.
fn eplog_array_of_files(dir: &std::path::Path) -> String {
    let f = |n: &str| format!("file:{}?size=8M", dir.join(n).display());
    let main: Vec<String> = (0..6).map(|i| f(&format!("main{i}"))).collect();
    let log: Vec<String> = (0..2).map(|i| f(&format!("log{i}"))).collect();
    let meta = f("meta");
    let o = Command::new(env!("CARGO_BIN_EXE_ecstack"))
        .args(["array", "create", "--scheme", "eplog", "-k", "4", "-m", "2"])
        .args(["--main", &main.join(","), "--log", &log.join(",")])
        .args(["--meta", &meta])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "array create: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    format!("array:{meta}")
}

/// SIGKILL a server over an eplog array of files after acknowledged SETs (appendfsync always), restart
/// it on the same array: every acknowledged pair is there, deleted ones are not.
#[test]
fn sigkill_and_restart_on_an_eplog_array() {
    if !have("redis-cli") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = eplog_array_of_files(dir.path());
    let mut s = start(&["--device", &dev, "--appendfsync", "always"]);
    for i in 0..40 {
        assert_eq!(
            cli(
                s.port,
                &[
                    "SET",
                    &format!("key{i}"),
                    &format!("value {i} ").repeat(i + 1)
                ]
            ),
            "OK"
        );
    }
    for i in (0..40).step_by(3) {
        assert_eq!(cli(s.port, &["DEL", &format!("key{i}")]), "1");
    }
    s.child.kill().unwrap(); // SIGKILL
    s.child.wait().unwrap();
    drop(s);
    let s = start(&["--device", &dev]);
    for i in 0..40 {
        let v = cli(s.port, &["GET", &format!("key{i}")]);
        let want = if i % 3 == 0 {
            String::new()
        } else {
            format!("value {i} ").repeat(i + 1).trim_end().to_string()
        };
        assert_eq!(v.trim_end(), want, "key{i} after SIGKILL and restart");
    }
    assert_eq!(cli(s.port, &["DBSIZE"]), "26");
}

/// HELLO 2 / HELLO 3 (RESP3: a map reply, `_` nulls), HELLO with AUTH, and redis-cli -3.
#[test]
fn hello_switches_between_resp2_and_resp3() {
    let s = start(&["--device", "mem:16M", "--requirepass", "pw"]);
    let mut t = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(t.try_clone().unwrap());
    let mut line = |t: &mut TcpStream, req: &[u8]| {
        t.write_all(req).unwrap();
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        l
    };
    // Unauthenticated HELLO without AUTH is refused; a wrong password too.
    assert!(line(&mut t, b"HELLO 3\r\n").starts_with("-NOAUTH HELLO must be called"));
    assert!(line(&mut t, b"HELLO 3 AUTH default nope\r\n").starts_with("-WRONGPASS"));
    assert!(line(&mut t, b"HELLO 4\r\n").starts_with("-NOPROTO"));
    // HELLO 3 with AUTH: a map of 7 fields, then RESP3 nulls.
    assert_eq!(line(&mut t, b"HELLO 3 AUTH default pw\r\n"), "%7\r\n");
    // 7 bulk keys (14 lines); values: 4 bulks (8 lines), 2 integers, an empty modules array.
    let text: String = (0..25).map(|_| line(&mut t, b"")).collect();
    assert!(text.ends_with("$7\r\nmodules\r\n*0\r\n"), "{text}");
    assert!(text.contains("$5\r\nproto\r\n:3\r\n"), "{text}");
    assert!(text.contains("$6\r\nserver\r\n$5\r\nredis\r\n"), "{text}");
    assert_eq!(line(&mut t, b"GET missing\r\n"), "_\r\n");
    // HELLO 2: back to RESP2 (an array of 14), nulls are $-1 again.
    assert_eq!(line(&mut t, b"HELLO 2\r\n"), "*14\r\n");
    let text: String = (0..25).map(|_| line(&mut t, b"")).collect();
    assert!(text.contains("$5\r\nproto\r\n:2\r\n"), "{text}");
    assert_eq!(line(&mut t, b"GET missing\r\n"), "$-1\r\n");
    if have("redis-cli") {
        let o = Command::new("redis-cli")
            .args([
                "-3",
                "-h",
                "127.0.0.1",
                "-p",
                &s.port.to_string(),
                "--user",
                "default",
                "--pass",
                "pw",
            ])
            .args(["GET", "missing"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "redis-cli -3: {:?}", o);
        assert!(matches!(out.trim(), "" | "(nil)"), "redis-cli -3: {out:?}");
    }
}

/// A RESP command on a raw connection; the reply's first line (a bulk reply: its bytes, or None
/// for a null). Err when the connection breaks (the server was killed).
fn resp(t: &mut BufReader<TcpStream>, args: &[&[u8]]) -> std::io::Result<Option<Vec<u8>>> {
    let mut req = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        req.extend_from_slice(a);
        req.extend_from_slice(b"\r\n");
    }
    t.get_mut().write_all(&req)?;
    let mut line = String::new();
    if t.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let line = line.trim_end();
    match line.as_bytes().first() {
        Some(b'$') if line == "$-1" => Ok(None),
        Some(b'$') => {
            let n: usize = line[1..].parse().unwrap();
            let mut b = vec![0u8; n + 2];
            t.read_exact(&mut b)?;
            b.truncate(n);
            Ok(Some(b))
        }
        Some(b'-') => panic!("server error: {line}"),
        _ => Ok(Some(line.as_bytes().to_vec())),
    }
}

/// kill -9 in the middle of a SET / DEL load (one request in flight at a time, appendfsync
/// always) on an eplog array of files, three times, each followed by a restart on the same array:
/// every key holds its last acknowledged value, or the in-flight request's effect, and a key whose
/// DEL was acknowledged never comes back (its older records are left on the devices since format
/// version 4, stale; only its tombstone keeps it deleted). Needs no Redis tools.
#[test]
fn sigkill_during_set_and_del_load_keeps_deleted_keys_dead() {
    let dir = tempfile::tempdir().unwrap();
    let dev = eplog_array_of_files(dir.path());
    const KEYS: usize = 40;
    // The state every acknowledged request left; None: deleted or never set.
    let mut acked: Vec<Option<Vec<u8>>> = vec![None; KEYS];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut dels = 0;
    // The request in flight at the kill: (key, its effect); it may or may not have happened.
    let mut in_flight: Option<(usize, Option<Vec<u8>>)> = None;
    for round in 0..4 {
        let mut s = start(&["--device", &dev, "--appendfsync", "always"]);
        let mut t = BufReader::new(TcpStream::connect(("127.0.0.1", s.port)).unwrap());
        t.get_mut()
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        // What the restart found.
        for i in 0..KEYS {
            let k = format!("key{i}");
            let got = resp(&mut t, &[b"GET", k.as_bytes()]).unwrap();
            match in_flight.take_if(|(j, _)| *j == i) {
                Some((_, op)) if got == op => acked[i] = op,
                _ => assert_eq!(
                    got, acked[i],
                    "round {round}: key{i} after kill -9 and restart"
                ),
            }
        }
        if round == 3 {
            break;
        }
        // Load until the kill.
        let kill_at = 150 + (next() % 300) as usize;
        for step in 0..=kill_at {
            let i = (next() % KEYS as u64) as usize;
            let k = format!("key{i}");
            let op = (next() % 3 != 0).then(|| {
                format!("r{round} s{step} ")
                    .repeat(1 + (next() % 40) as usize)
                    .into_bytes()
            });
            let killer = (step == kill_at).then(|| {
                // Kill the server while it may be working on this request.
                let pid = s.child.id();
                let delay = Duration::from_micros(next() % 2000);
                std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    // SAFETY: kill(2) with a pid and SIGKILL touches no memory.
                    unsafe { libc_kill(pid as i32, 9) };
                })
            });
            let r = match &op {
                Some(v) => resp(&mut t, &[b"SET", k.as_bytes(), v]),
                None => resp(&mut t, &[b"DEL", k.as_bytes()]),
            };
            match (r, killer) {
                (Ok(_), killer) => {
                    if op.is_none() && acked[i].is_some() {
                        dels += 1;
                    }
                    acked[i] = op;
                    if let Some(h) = killer {
                        h.join().unwrap();
                    }
                }
                (Err(_), Some(h)) => {
                    h.join().unwrap();
                    in_flight = Some((i, op));
                }
                (Err(e), None) => panic!("round {round} step {step}: {e}"),
            }
        }
        s.child.wait().unwrap();
    }
    assert!(
        dels > 50,
        "the load deleted keys that held values ({dels} DELs)"
    );
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
