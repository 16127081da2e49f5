//! Protocol-level tests with a raw TcpStream and the crate's blocking client: negotiation replies,
//! error values for bad requests, pipelining, concurrency, read-only exports, the admin socket.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ecstack_device::{BlockDevice, MemDevice};
use ecstack_nbd::client::Client;
use ecstack_nbd::proto::*;
use ecstack_nbd::{admin_request, Admin, NbdError, ServeConfig, Server};

const MIB: u64 = 1 << 20;

/// Raw connection: greeting read, client flags sent.
fn raw(addr: SocketAddr, cflags: u32) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    assert_eq!(&g[0..8], b"NBDMAGIC");
    assert_eq!(&g[8..16], b"IHAVEOPT");
    assert_eq!(be16(&g[16..18]), FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    s.write_all(&cflags.to_be_bytes()).unwrap();
    s
}

fn send_opt(s: &mut TcpStream, opt: u32, data: &[u8]) {
    let mut m = IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&opt.to_be_bytes());
    m.extend_from_slice(&(data.len() as u32).to_be_bytes());
    m.extend_from_slice(data);
    s.write_all(&m).unwrap();
}

fn read_opt_reply(s: &mut TcpStream, opt: u32) -> (u32, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).unwrap();
    assert_eq!(be64(&h[0..8]), OPT_REPLY_MAGIC);
    assert_eq!(be32(&h[8..12]), opt);
    let mut d = vec![0u8; be32(&h[16..20]) as usize];
    s.read_exact(&mut d).unwrap();
    (be32(&h[12..16]), d)
}

fn info_data(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        d.extend_from_slice(&i.to_be_bytes());
    }
    d
}

/// GO on a raw connection; returns (size, transmission flags).
fn go(s: &mut TcpStream, name: &str) -> (u64, u16) {
    send_opt(s, OPT_GO, &info_data(name, &[INFO_BLOCK_SIZE]));
    let mut export = None;
    let mut block = None;
    loop {
        let (t, d) = read_opt_reply(s, OPT_GO);
        match t {
            REP_ACK => break,
            REP_INFO if be16(&d[0..2]) == INFO_EXPORT => {
                export = Some((be64(&d[2..10]), be16(&d[10..12])))
            }
            REP_INFO if be16(&d[0..2]) == INFO_BLOCK_SIZE => {
                block = Some((be32(&d[2..6]), be32(&d[6..10]), be32(&d[10..14])))
            }
            t => panic!("unexpected reply {t:#x}"),
        }
    }
    assert_eq!(block, Some((1, 4096, 32 << 20)));
    export.unwrap()
}

fn send_req(s: &mut TcpStream, typ: u16, flags: u16, cookie: u64, offset: u64, len: u32) {
    let r = Request {
        flags,
        typ,
        cookie,
        offset,
        len,
    };
    s.write_all(&r.encode()).unwrap();
}

/// Read a simple reply header: (error, cookie).
fn read_reply(s: &mut TcpStream) -> (u32, u64) {
    let mut h = [0u8; 16];
    s.read_exact(&mut h).unwrap();
    assert_eq!(be32(&h[0..4]), SIMPLE_REPLY_MAGIC);
    (be32(&h[4..8]), be64(&h[8..16]))
}

/// The server closed the connection (EOF or reset) within the timeout.
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn io_through_the_client_reaches_the_device() {
    let (server, dev) = mem_server(8 * MIB, cfg());
    let mut c = Client::connect(server.addr(), "ecstack").unwrap();
    assert_eq!(c.size(), 8 * MIB);
    let f = c.transmission_flags();
    for flag in [
        FLAG_HAS_FLAGS,
        FLAG_SEND_FLUSH,
        FLAG_SEND_FUA,
        FLAG_SEND_TRIM,
        FLAG_SEND_WRITE_ZEROES,
        FLAG_CAN_MULTI_CONN,
    ] {
        assert_ne!(f & flag, 0, "flag {flag:#x} missing from {f:#x}");
    }
    assert_eq!(f & FLAG_READ_ONLY, 0);

    let data = pattern(100_000, 1);
    c.write(12_345, &data, false).unwrap();
    let mut back = vec![0u8; data.len()];
    c.read(12_345, &mut back).unwrap();
    assert_eq!(back, data);
    let mut direct = vec![0u8; data.len()];
    dev.read_at(&mut direct, 12_345).unwrap();
    assert_eq!(direct, data, "the write reached the device");

    let before = dev.snapshot();
    c.flush().unwrap();
    c.write(0, b"fua", true).unwrap();
    c.trim(MIB, 65536).unwrap();
    c.write_zeroes(12_345, 1000).unwrap();
    let after = dev.snapshot();
    assert_eq!(
        after.flushes - before.flushes,
        2,
        "FLUSH and FUA reach the device"
    );
    assert_eq!(
        after.discards - before.discards,
        1,
        "TRIM reaches the device"
    );
    assert_eq!(after.discard_bytes - before.discard_bytes, 65536);
    c.read(12_345, &mut back[..2000]).unwrap();
    assert!(back[..1000].iter().all(|&b| b == 0), "WRITE_ZEROES zeroed");
    assert_eq!(&back[1000..2000], &data[1000..2000]);

    // The empty name is the default export.
    let c2 = Client::connect(server.addr(), "").unwrap();
    assert_eq!(c2.size(), 8 * MIB);
    c2.disconnect().unwrap();
    c.disconnect().unwrap();
    let st = server.stats();
    assert_eq!(st.trims, 1);
    assert_eq!(st.flushes, 1);
    assert_eq!(st.write_zeroes, 1);
    assert_eq!(st.error_replies, 0);
    server.shutdown().unwrap();
}

#[test]
fn negotiation_garbage_gets_error_replies_and_the_server_survives() {
    let (server, _dev) = mem_server(4 * MIB, cfg());
    let addr = server.addr();

    // Options the server refuses, each with the right error reply; the session goes on.
    let mut s = raw(addr, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
    send_opt(&mut s, 0x1234, b"junk");
    assert_eq!(read_opt_reply(&mut s, 0x1234).0, REP_ERR_UNSUP);
    send_opt(&mut s, OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(
        read_opt_reply(&mut s, OPT_STRUCTURED_REPLY).0,
        REP_ERR_UNSUP
    );
    send_opt(&mut s, OPT_STARTTLS, &[]);
    assert_eq!(read_opt_reply(&mut s, OPT_STARTTLS).0, REP_ERR_UNSUP);
    send_opt(&mut s, OPT_GO, &info_data("nope", &[]));
    let (t, msg) = read_opt_reply(&mut s, OPT_GO);
    assert_eq!(t, REP_ERR_UNKNOWN);
    assert!(String::from_utf8_lossy(&msg).contains("nope"));
    send_opt(&mut s, OPT_INFO, &[0, 0, 0, 200, 1]);
    assert_eq!(read_opt_reply(&mut s, OPT_INFO).0, REP_ERR_INVALID);
    send_opt(&mut s, OPT_LIST, b"x");
    assert_eq!(read_opt_reply(&mut s, OPT_LIST).0, REP_ERR_INVALID);
    send_opt(&mut s, OPT_LIST, &[]);
    let (t, d) = read_opt_reply(&mut s, OPT_LIST);
    assert_eq!(t, REP_SERVER);
    assert_eq!(be32(&d[0..4]), 7);
    assert_eq!(&d[4..], b"ecstack");
    assert_eq!(read_opt_reply(&mut s, OPT_LIST).0, REP_ACK);
    send_opt(&mut s, OPT_INFO, &info_data("ecstack", &[INFO_NAME]));
    let mut saw_name = false;
    loop {
        let (t, d) = read_opt_reply(&mut s, OPT_INFO);
        if t == REP_ACK {
            break;
        }
        assert_eq!(t, REP_INFO);
        if be16(&d[0..2]) == INFO_NAME {
            assert_eq!(&d[2..], b"ecstack");
            saw_name = true;
        }
    }
    assert!(saw_name);
    let (size, _) = go(&mut s, "ecstack");
    assert_eq!(size, 4 * MIB);

    // Transmission: bad requests get error replies and the connection keeps working.
    send_req(&mut s, CMD_READ, 0, 1, 4 * MIB - 10, 20);
    assert_eq!(read_reply(&mut s), (EINVAL, 1), "read beyond the end");
    send_req(&mut s, CMD_READ, 0, 2, u64::MAX - 5, 4096);
    assert_eq!(read_reply(&mut s), (EINVAL, 2), "read with offset overflow");
    send_req(&mut s, CMD_WRITE, 0, 3, 4 * MIB, 4);
    s.write_all(b"abcd").unwrap();
    assert_eq!(read_reply(&mut s), (ENOSPC, 3), "write beyond the end");
    send_req(&mut s, CMD_TRIM, 0, 4, 4 * MIB - 1, 4096);
    assert_eq!(read_reply(&mut s), (ENOSPC, 4), "trim beyond the end");
    send_req(&mut s, CMD_READ, 0, 5, 0, (32 << 20) + 1);
    assert_eq!(read_reply(&mut s), (EINVAL, 5), "oversized read");
    send_req(&mut s, 99, 0, 6, 0, 0);
    assert_eq!(read_reply(&mut s), (EINVAL, 6), "unknown command");
    send_req(&mut s, CMD_READ, 0x8000, 7, 0, 512);
    assert_eq!(read_reply(&mut s), (EINVAL, 7), "unknown flag");
    send_req(&mut s, CMD_BLOCK_STATUS, 0, 8, 0, 512);
    assert_eq!(
        read_reply(&mut s),
        (EINVAL, 8),
        "block status without meta context"
    );
    send_req(&mut s, CMD_READ, 0, 9, 4096, 512);
    assert_eq!(read_reply(&mut s), (0, 9), "a good read still works");
    let mut data = [0u8; 512];
    s.read_exact(&mut data).unwrap();
    // Bad request magic: the server hangs up.
    s.write_all(&[0xde; 28]).unwrap();
    assert!(closed(&mut s), "bad request magic closes the connection");

    // Oversized write: EINVAL, then the server hangs up (the payload cannot be skipped).
    let mut s = raw(addr, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
    go(&mut s, "ecstack");
    send_req(&mut s, CMD_WRITE, 0, 10, 0, u32::MAX);
    assert_eq!(read_reply(&mut s), (EINVAL, 10));
    assert!(closed(&mut s));

    // Bad option magic, unknown client flags, plain garbage, oversized option: hang up.
    let mut s = raw(addr, FLAG_C_FIXED_NEWSTYLE);
    s.write_all(b"GARBAGE!GARBAGE!GARBAGE!").unwrap();
    assert!(closed(&mut s));
    let mut s = raw(addr, 0x8000_0000);
    assert!(closed(&mut s));
    let mut s = raw(addr, FLAG_C_FIXED_NEWSTYLE);
    let mut m = IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&OPT_GO.to_be_bytes());
    m.extend_from_slice(&u32::MAX.to_be_bytes());
    s.write_all(&m).unwrap();
    assert_eq!(read_opt_reply(&mut s, OPT_GO).0, REP_ERR_TOO_BIG);
    assert!(closed(&mut s));
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[0xffu8; 4096]).unwrap();
    assert!(closed(&mut s));

    // Old-style NBD_OPT_EXPORT_NAME with and without NO_ZEROES, then ABORT.
    for (cflags, tail) in [
        (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES, 0),
        (FLAG_C_FIXED_NEWSTYLE, 124),
    ] {
        let mut s = raw(addr, cflags);
        send_opt(&mut s, OPT_EXPORT_NAME, b"ecstack");
        let mut b = vec![0u8; 10 + tail];
        s.read_exact(&mut b).unwrap();
        assert_eq!(be64(&b[0..8]), 4 * MIB);
        assert!(b[10..].iter().all(|&x| x == 0));
        send_req(&mut s, CMD_FLUSH, 0, 11, 0, 0);
        assert_eq!(read_reply(&mut s), (0, 11));
        send_req(&mut s, CMD_DISC, 0, 12, 0, 0);
        assert!(closed(&mut s));
    }
    let mut s = raw(addr, FLAG_C_FIXED_NEWSTYLE);
    send_opt(&mut s, OPT_EXPORT_NAME, b"wrong");
    assert!(closed(&mut s), "unknown export via EXPORT_NAME closes");
    let mut s = raw(addr, FLAG_C_FIXED_NEWSTYLE);
    send_opt(&mut s, OPT_ABORT, &[]);
    assert_eq!(read_opt_reply(&mut s, OPT_ABORT).0, REP_ACK);
    assert!(closed(&mut s));

    // The server is still up and serving.
    let mut c = Client::connect(addr, "ecstack").unwrap();
    c.write(0, b"alive", false).unwrap();
    let mut b = [0u8; 5];
    c.read(0, &mut b).unwrap();
    assert_eq!(&b, b"alive");
    match c.read(4 * MIB, &mut b) {
        Err(NbdError::Remote { errno, .. }) => assert_eq!(errno, EINVAL),
        other => panic!("expected EINVAL, got {other:?}"),
    }
    c.disconnect().unwrap();
    let st = server.stats();
    assert!(st.protocol_errors >= 5, "{st:?}");
    assert!(st.error_replies >= 9, "{st:?}");
    server.shutdown().unwrap();
}

#[test]
fn pipelined_requests_on_concurrent_connections_worker_pool() {
    // inline_below = 0: every request that is not alone goes through the worker pool.
    pipelined(ServeConfig {
        inline_below: Duration::ZERO,
        ..cfg()
    });
}

#[test]
fn pipelined_requests_on_concurrent_connections_inline() {
    // Huge threshold: every request runs on its connection's reader thread.
    pipelined(ServeConfig {
        inline_below: Duration::from_secs(3600),
        ..cfg()
    });
}

fn pipelined(cfg: ServeConfig) {
    let (server, _dev) = mem_server(16 * MIB, cfg);
    let addr = server.addr();
    const BS: usize = 4096;
    const N: u64 = 256;
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                let mut s = raw(addr, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
                go(&mut s, "ecstack");
                let base = t * 4 * MIB;
                // All writes first, without waiting for replies.
                let mut w = s.try_clone().unwrap();
                let writer = std::thread::spawn(move || {
                    for i in 0..N {
                        let r = Request {
                            flags: 0,
                            typ: CMD_WRITE,
                            cookie: i,
                            offset: base + i * BS as u64,
                            len: BS as u32,
                        };
                        let mut b = r.encode().to_vec();
                        b.extend_from_slice(&pattern(BS, t * 1000 + i));
                        w.write_all(&b).unwrap();
                    }
                });
                let mut seen = vec![false; N as usize];
                for _ in 0..N {
                    let (err, cookie) = read_reply(&mut s);
                    assert_eq!(err, 0);
                    assert!(!seen[cookie as usize], "duplicate reply");
                    seen[cookie as usize] = true;
                }
                writer.join().unwrap();
                // Then all reads, pipelined; replies may come back in any order.
                for i in 0..N {
                    send_req(
                        &mut s,
                        CMD_READ,
                        0,
                        1000 + i,
                        base + i * BS as u64,
                        BS as u32,
                    );
                }
                for _ in 0..N {
                    let (err, cookie) = read_reply(&mut s);
                    assert_eq!(err, 0);
                    let mut d = vec![0u8; BS];
                    s.read_exact(&mut d).unwrap();
                    assert_eq!(
                        d,
                        pattern(BS, t * 1000 + (cookie - 1000)),
                        "data for cookie {cookie}"
                    );
                }
                send_req(&mut s, CMD_DISC, 0, 0, 0, 0);
                assert!(closed(&mut s));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = server.stats();
    assert_eq!(st.writes, 4 * N);
    assert_eq!(st.reads, 4 * N);
    assert_eq!(st.connections_total, 4);
    server.shutdown().unwrap();
}

#[test]
fn read_only_export_refuses_writes_with_eperm() {
    let cfg = ServeConfig {
        read_only: true,
        ..cfg()
    };
    let (server, dev) = mem_server(MIB, cfg);
    let mut c = Client::connect(server.addr(), "ecstack").unwrap();
    assert_ne!(c.transmission_flags() & FLAG_READ_ONLY, 0);
    for r in [
        c.write(0, b"x", false),
        c.trim(0, 4096),
        c.write_zeroes(0, 4096),
    ] {
        match r {
            Err(NbdError::Remote { errno, .. }) => assert_eq!(errno, EPERM),
            other => panic!("expected EPERM, got {other:?}"),
        }
    }
    let mut b = [1u8; 16];
    c.read(0, &mut b).unwrap();
    assert_eq!(b, [0u8; 16]);
    c.flush().unwrap();
    assert_eq!(dev.snapshot().write_ops, 0);
    c.disconnect().unwrap();
    server.shutdown().unwrap();
}

#[test]
fn device_errors_become_eio_and_the_server_keeps_serving() {
    use ecstack_device::{FaultConfig, Faulty};
    let inner = MemDevice::new(MIB).unwrap();
    let faulty = Faulty::new(
        inner,
        FaultConfig {
            fail_at_op: Some(3),
            ..FaultConfig::default()
        },
    );
    let dev: Arc<dyn BlockDevice> = Arc::new(faulty);
    let server = Server::start(dev, None, cfg()).unwrap();
    let mut c = Client::connect(server.addr(), "ecstack").unwrap();
    let mut errors = 0;
    for i in 0..6u64 {
        match c.write(i * 4096, &[7u8; 4096], false) {
            Ok(()) => {}
            Err(NbdError::Remote { errno, .. }) => {
                assert_eq!(errno, EIO);
                errors += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(errors > 0, "the failed device must report errors");
    c.disconnect().unwrap();
    server.shutdown().ok();
}

struct Mock {
    log: Mutex<Vec<String>>,
}

impl Admin for Mock {
    fn command(&self, line: &str) -> Result<String, String> {
        self.log.lock().unwrap().push(line.to_string());
        let mut w = line.split_whitespace();
        match (w.next(), w.next()) {
            (Some("status"), None) => Ok("{\"devices\":4,\"failed\":[]}".into()),
            (Some("fail"), Some(d)) if d.parse::<u32>().is_ok() => Ok(format!("device {d} failed")),
            (Some("fail"), _) => Err("usage: fail <device>".into()),
            (Some("table"), None) => Ok("dev state\n0 ok\n1 failed\\x".into()),
            (Some("help"), None) => Ok("status, fail N, table".into()),
            _ => Err(format!("unknown command '{line}'")),
        }
    }
}

#[test]
fn admin_socket_commands() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("admin.sock");
    let mock = Arc::new(Mock {
        log: Mutex::new(Vec::new()),
    });
    let cfg = ServeConfig {
        admin_socket: Some(sock.clone()),
        ..cfg()
    };
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(MIB).unwrap());
    let server = Server::start(dev, Some(mock.clone() as Arc<dyn Admin>), cfg.clone()).unwrap();

    assert_eq!(admin_request(&sock, "ping").unwrap(), "pong");
    assert_eq!(
        admin_request(&sock, "status").unwrap(),
        "{\"devices\":4,\"failed\":[]}"
    );
    assert_eq!(admin_request(&sock, "fail 2").unwrap(), "device 2 failed");
    match admin_request(&sock, "fail x") {
        Err(NbdError::AdminCommand(m)) => assert_eq!(m, "usage: fail <device>"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        admin_request(&sock, "table").unwrap(),
        "dev state\n0 ok\n1 failed\\x",
        "multi-line answers survive the one-line wire format"
    );
    assert!(admin_request(&sock, "help").unwrap().contains("fail N"));
    let stats: serde_json::Value =
        serde_json::from_str(&admin_request(&sock, "nbd-stats").unwrap()).unwrap();
    assert_eq!(stats["size"], MIB);
    assert_eq!(stats["export"], "ecstack");
    let ds: serde_json::Value =
        serde_json::from_str(&admin_request(&sock, "device-stats").unwrap()).unwrap();
    assert!(ds["write_ops"].is_u64());
    assert!(admin_request(&sock, "two\nlines").is_err());
    assert_eq!(
        *mock.log.lock().unwrap(),
        vec!["status", "fail 2", "fail x", "table", "help"]
    );

    // A second server on the same socket is refused while the first runs.
    let dev2: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(MIB).unwrap());
    match Server::start(dev2, None, cfg.clone()) {
        Err(NbdError::AdminSocketInUse { .. }) => {}
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("second server on a busy admin socket"),
    }

    // `shutdown` over the socket stops a waiting server and removes the socket.
    let waiter = std::thread::spawn(move || server.wait());
    assert_eq!(admin_request(&sock, "shutdown").unwrap(), "stopping");
    waiter.join().unwrap().unwrap();
    assert!(!sock.exists());
    assert!(admin_request(&sock, "ping").is_err());

    // A stale socket file left behind is reused.
    let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    drop(l);
    let dev3: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(MIB).unwrap());
    let s3 = Server::start(dev3, None, cfg).unwrap();
    match admin_request(&sock, "status") {
        Err(NbdError::AdminCommand(m)) => assert!(m.contains("unknown command"), "{m}"),
        other => panic!("{other:?}"),
    }
    // An idle admin client does not keep the server (and its device) alive.
    let mut idle = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    s3.shutdown().unwrap();
    let mut b = [0u8; 8];
    assert_eq!(
        idle.read(&mut b).unwrap_or(0),
        0,
        "idle admin connection closed"
    );
}

#[test]
fn shutdown_closes_open_connections() {
    let (server, _dev) = mem_server(MIB, cfg());
    let mut c = Client::connect(server.addr(), "ecstack").unwrap();
    c.write(0, b"x", false).unwrap();
    let h = server.shutdown_handle();
    assert!(!h.is_requested());
    server.shutdown().unwrap();
    let mut b = [0u8; 1];
    assert!(c.read(0, &mut b).is_err(), "connection closed by shutdown");
    assert!(h.is_requested());
}

#[test]
fn min_block_size_is_advertised_and_enforced() {
    let cfg = ServeConfig {
        min_block_size: 512,
        ..cfg()
    };
    let (server, _dev) = mem_server(MIB, cfg);
    let mut s = raw(server.addr(), FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
    send_opt(&mut s, OPT_GO, &info_data("ecstack", &[INFO_BLOCK_SIZE]));
    let mut min = None;
    loop {
        let (t, d) = read_opt_reply(&mut s, OPT_GO);
        if t == REP_ACK {
            break;
        }
        if be16(&d[0..2]) == INFO_BLOCK_SIZE {
            min = Some(be32(&d[2..6]));
        }
    }
    assert_eq!(min, Some(512));
    send_req(&mut s, CMD_READ, 0, 1, 100, 512);
    assert_eq!(read_reply(&mut s), (EINVAL, 1), "unaligned offset");
    send_req(&mut s, CMD_READ, 0, 2, 512, 100);
    assert_eq!(read_reply(&mut s), (EINVAL, 2), "unaligned length");
    send_req(&mut s, CMD_READ, 0, 3, 512, 1024);
    assert_eq!(read_reply(&mut s), (0, 3));
    let mut d = [0u8; 1024];
    s.read_exact(&mut d).unwrap();
    server.shutdown().unwrap();
    let bad = ServeConfig {
        min_block_size: 3,
        ..common::cfg()
    };
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(MIB).unwrap());
    assert!(matches!(
        Server::start(dev, None, bad),
        Err(NbdError::Config(_))
    ));
}

#[test]
fn serve_blocks_until_the_admin_shutdown_command() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("serve.sock");
    let dev = Arc::new(ecstack_device::Metered::new(MemDevice::new(MIB).unwrap()));
    let cfg = ServeConfig {
        admin_socket: Some(sock.clone()),
        ..cfg()
    };
    let d = dev.clone() as Arc<dyn BlockDevice>;
    let t = std::thread::spawn(move || ecstack_nbd::serve(d, None, cfg, |_| {}));
    let mut up = false;
    for _ in 0..200 {
        if admin_request(&sock, "ping").is_ok() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(up, "serve() never opened its admin socket");
    let flushes = dev.snapshot().flushes;
    assert_eq!(admin_request(&sock, "shutdown").unwrap(), "stopping");
    t.join().unwrap().unwrap();
    assert_eq!(
        dev.snapshot().flushes,
        flushes + 1,
        "device flushed on the way out"
    );
}
