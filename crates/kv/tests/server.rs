//! The server's store worker merges batches of different connections (plain SETs into one
//! `set_many`, single HSET/HMSETs into one `hset_many`): many connections writing at once over raw
//! RESP get one correct reply per command, and every value reads back as written (read-only
//! batches on the store worker, and on the connection's task with `inline_reads`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use ecstack_device::{BlockDevice, MemDevice};
use ecstack_kv::server::{spawn, ServerConfig};
use ecstack_kv::{Durability, KvConfig, KvStore};

fn cmd(args: &[&[u8]]) -> Vec<u8> {
    let mut b = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        b.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        b.extend_from_slice(a);
        b.extend_from_slice(b"\r\n");
    }
    b
}

/// One reply, as its first line (bulk strings: their bytes; arrays: the element lines joined).
fn read_reply(r: &mut BufReader<TcpStream>) -> Vec<u8> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).unwrap();
    let text = String::from_utf8_lossy(&line[..line.len() - 2]).to_string();
    match line[0] {
        b'$' => {
            let n: i64 = text[1..].parse().unwrap();
            if n < 0 {
                return b"(nil)".to_vec();
            }
            let mut b = vec![0u8; n as usize + 2];
            r.read_exact(&mut b).unwrap();
            b.truncate(n as usize);
            b
        }
        b'*' => {
            let n: usize = text[1..].parse().unwrap();
            let mut all = Vec::new();
            for _ in 0..n {
                all.extend(read_reply(r));
                all.push(b',');
            }
            all
        }
        _ => line[..line.len() - 2].to_vec(),
    }
}

#[test]
fn connections_writing_at_once_are_merged_and_correct() {
    for (durability, inline_reads) in [
        (Durability::EverySec, false),
        (Durability::Always, false),
        (Durability::EverySec, true),
    ] {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(8 << 20).unwrap());
        let cfg = KvConfig {
            durability,
            cache_entries: 1000,
            ..KvConfig::default()
        };
        let store = Arc::new(KvStore::create(dev, &cfg).unwrap());
        let server = spawn(
            Arc::clone(&store),
            ServerConfig {
                addr: "127.0.0.1:0".parse().unwrap(),
                inline_reads,
                ..ServerConfig::default()
            },
        )
        .unwrap();
        let addr = server.addr();
        let threads: Vec<_> = (0..12)
            .map(|t| {
                std::thread::spawn(move || {
                    let sock = TcpStream::connect(addr).unwrap();
                    let mut w = sock.try_clone().unwrap();
                    let mut r = BufReader::new(sock);
                    for round in 0..40 {
                        // A pipeline of plain SETs, then one HSET (or HMSET), then one with a
                        // WRONGTYPE error in the middle of other connections' HSETs.
                        let mut p = Vec::new();
                        for i in 0..5 {
                            let k = format!("s:{t}:{i}");
                            let v = format!("v{round}:{t}:{i}");
                            p.extend(cmd(&[b"SET", k.as_bytes(), v.as_bytes()]));
                        }
                        w.write_all(&p).unwrap();
                        for _ in 0..5 {
                            assert_eq!(read_reply(&mut r), b"+OK");
                        }
                        let h = format!("h:{t}");
                        let f = format!("f{}", round % 3);
                        let v = format!("{round}");
                        let name: &[u8] = if round % 2 == 0 { b"HSET" } else { b"HMSET" };
                        w.write_all(&cmd(&[name, h.as_bytes(), f.as_bytes(), v.as_bytes()]))
                            .unwrap();
                        let got = read_reply(&mut r);
                        if round % 2 == 1 {
                            assert_eq!(got, b"+OK");
                        } else {
                            let new = if round < 3 {
                                b":1".to_vec()
                            } else {
                                b":0".to_vec()
                            };
                            assert_eq!(got, new, "HSET reply, round {round}");
                        }
                        let s = format!("s:{t}:0");
                        w.write_all(&cmd(&[b"HSET", s.as_bytes(), b"f", b"x"]))
                            .unwrap();
                        assert!(read_reply(&mut r).starts_with(b"-WRONGTYPE"));
                    }
                    let mut p = Vec::new();
                    for i in 0..5 {
                        p.extend(cmd(&[b"GET", format!("s:{t}:{i}").as_bytes()]));
                    }
                    p.extend(cmd(&[b"HGETALL", format!("h:{t}").as_bytes()]));
                    w.write_all(&p).unwrap();
                    for i in 0..5 {
                        assert_eq!(read_reply(&mut r), format!("v39:{t}:{i}").into_bytes());
                    }
                    assert_eq!(read_reply(&mut r), b"f0,39,f1,37,f2,38,".to_vec());
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        server.stop().unwrap();
        assert_eq!(store.len(), 12 * 6);
    }
}
