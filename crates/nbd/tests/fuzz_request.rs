//! Mutation fuzzing of NBD transmission requests, on stable Rust: valid request images (READ,
//! WRITE, FLUSH, TRIM, WRITE_ZEROES) are mutated (bit flips, byte overwrites, truncations,
//! extensions, splices; `ecstack_base::mutate`).
//!
//! * `request_header_mutations`: `Request::decode` refuses exactly the headers with a wrong magic
//!   and re-encodes every other one byte for byte.
//! * `server_answers_mutated_requests`: each mutated request goes to a running server over a real
//!   connection. The server must answer as the protocol says (checked against a model written from
//!   the NBD spec, not from the server): close the connection on a bad magic, `NBD_CMD_DISC` or an
//!   oversized WRITE; otherwise one reply echoing the cookie, error 0 exactly when the request is
//!   valid (supported command and flags, range inside the export), and READ data equal to a byte
//!   model of the export. It must never hang or crash.
//!
//! Cases per target: `ECSTACK_FUZZ_CASES` (default 2,000; the long mode in `docs/testing.md` runs
//! 1,000,000). A failure names the case; `ECSTACK_SEED` and `ECSTACK_FUZZ_CASES` replay it.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use common::*;
use ecstack_base::mutate::{case_rng, fuzz_cases, fuzz_seed, mutate};
use ecstack_base::Rng;
use ecstack_nbd::proto::*;

const EXPORT_BYTES: u64 = 1 << 20;
/// WRITE payloads up to this size are sent; a larger claimed length is followed by our EOF.
const SENT_PAYLOAD_MAX: u32 = 64 << 10;

fn valid_requests(cookie: u64) -> Vec<[u8; REQUEST_LEN]> {
    let r = |typ, flags, offset, len| {
        Request {
            flags,
            typ,
            cookie,
            offset,
            len,
        }
        .encode()
    };
    vec![
        r(CMD_READ, 0, 8192, 4096),
        r(CMD_WRITE, CMD_FLAG_FUA, 12_288, 512),
        r(CMD_FLUSH, 0, 0, 0),
        r(CMD_TRIM, 0, 65_536, 4096),
        r(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 4096, 1024),
    ]
}

/// A mutated image cut or padded to a header's length (the server reads exactly that many bytes).
fn mutated_header(rng: &mut Rng, cookie: u64) -> [u8; REQUEST_LEN] {
    let images = valid_requests(cookie);
    let donors: Vec<&[u8]> = images.iter().map(|i| i.as_slice()).collect();
    let pick = rng.below(images.len() as u64) as usize;
    let mut b = mutate(rng, &images[pick], &donors);
    b.resize(REQUEST_LEN, 0);
    b.try_into().expect("resized")
}

#[test]
fn request_header_mutations() {
    let cases = fuzz_cases(2_000);
    let seed = fuzz_seed(11);
    let (mut some, mut none) = (0u64, 0u64);
    for c in 0..cases {
        let h = mutated_header(&mut case_rng(seed, c), c);
        match Request::decode(&h) {
            None => {
                assert_ne!(
                    be32(&h[0..4]),
                    REQUEST_MAGIC,
                    "case {c}: valid magic refused"
                );
                none += 1;
            }
            Some(r) => {
                assert_eq!(
                    r.encode(),
                    h,
                    "case {c} (ECSTACK_SEED={seed}): not re-encoded exactly"
                );
                assert_eq!(
                    (r.cookie, r.offset, r.len),
                    (be64(&h[8..16]), be64(&h[16..24]), be32(&h[24..28]))
                );
                some += 1;
            }
        }
    }
    println!("request headers: {cases} cases, seed {seed}: {some} decoded, {none} refused");
    assert!(some > 0 && none > 0);
}

/// Negotiate with fixed newstyle and `NBD_OPT_GO` on the default export.
fn connect(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    s.write_all(&(FLAG_FIXED_NEWSTYLE as u32 | FLAG_NO_ZEROES as u32).to_be_bytes())
        .unwrap();
    let mut opt = IHAVEOPT.to_be_bytes().to_vec();
    opt.extend_from_slice(&OPT_GO.to_be_bytes());
    opt.extend_from_slice(&6u32.to_be_bytes());
    opt.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // empty name, no info requests
    s.write_all(&opt).unwrap();
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).unwrap();
        let mut d = vec![0u8; be32(&h[16..20]) as usize];
        s.read_exact(&mut d).unwrap();
        match be32(&h[12..16]) {
            REP_ACK => return s,
            REP_INFO => {}
            t => panic!("OPT_GO answered {t:#x}"),
        }
    }
}

/// The server closed the connection: EOF or a reset, before the read timeout.
fn expect_closed(s: &mut TcpStream, what: &str) {
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => {}
        Ok(n) => panic!("{what}: {n} more bytes instead of a close"),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            panic!("{what}: the server neither answered nor closed")
        }
        Err(_) => {}
    }
}

/// The export as the client knows it: bytes, and whether each is known (a TRIM leaves its range
/// unspecified by the protocol).
struct Model {
    bytes: Vec<u8>,
    known: Vec<bool>,
}

impl Model {
    fn check(&self, off: u64, data: &[u8], what: &str) {
        for (i, &b) in data.iter().enumerate() {
            let at = off as usize + i;
            if self.known[at] {
                assert_eq!(b, self.bytes[at], "{what}: byte {at} read back wrong");
            }
        }
    }
}

#[test]
fn server_answers_mutated_requests() {
    let (server, _dev) = mem_server(EXPORT_BYTES, cfg());
    let addr = server.addr();
    let cases = fuzz_cases(2_000);
    let seed = fuzz_seed(12);
    let mut model = Model {
        bytes: vec![0; EXPORT_BYTES as usize],
        known: vec![true; EXPORT_BYTES as usize],
    };
    let mut conn: Option<TcpStream> = None;
    let (mut ok, mut refused, mut closed) = (0u64, 0u64, 0u64);
    for c in 0..cases {
        let what = format!(
            "case {c} (ECSTACK_SEED={seed} ECSTACK_FUZZ_CASES={})",
            c + 1
        );
        let mut rng = case_rng(seed, c);
        let h = mutated_header(&mut rng, c);
        let s = conn.get_or_insert_with(|| connect(addr));
        let (magic, flags, typ) = (be32(&h[0..4]), be16(&h[4..6]), be16(&h[6..8]));
        let (cookie, off, len) = (be64(&h[8..16]), be64(&h[16..24]), be32(&h[24..28]));
        s.write_all(&h).unwrap();
        let mut payload = Vec::new();
        if magic == REQUEST_MAGIC && typ == CMD_WRITE && len <= SENT_PAYLOAD_MAX {
            payload = vec![0u8; len as usize];
            rng.fill(&mut payload);
            s.write_all(&payload).unwrap();
        }
        // The cases the protocol ends the connection in.
        let oversized = typ == CMD_WRITE && len > MAX_PAYLOAD;
        if magic != REQUEST_MAGIC || typ == CMD_DISC || (typ == CMD_WRITE && len > SENT_PAYLOAD_MAX)
        {
            if magic == REQUEST_MAGIC && oversized {
                let mut r = [0u8; SIMPLE_REPLY_LEN];
                s.read_exact(&mut r).unwrap();
                assert_eq!(
                    (be32(&r[4..8]), be64(&r[8..16])),
                    (EINVAL, cookie),
                    "{what}"
                );
            } else if magic == REQUEST_MAGIC && typ == CMD_WRITE {
                // Waiting for a payload we will not send: our end of the stream ends it.
                s.shutdown(Shutdown::Write).unwrap();
            }
            expect_closed(s, &what);
            conn = None;
            closed += 1;
            continue;
        }
        let supported = [CMD_READ, CMD_WRITE, CMD_FLUSH, CMD_TRIM, CMD_WRITE_ZEROES].contains(&typ);
        let allowed = match typ {
            CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
            _ => CMD_FLAG_FUA,
        };
        let in_range = typ == CMD_FLUSH
            || off
                .checked_add(len as u64)
                .is_some_and(|e| e <= EXPORT_BYTES);
        let valid = supported
            && flags & !allowed == 0
            && in_range
            && !(typ == CMD_READ && len > MAX_PAYLOAD);
        let mut r = [0u8; SIMPLE_REPLY_LEN];
        s.read_exact(&mut r)
            .unwrap_or_else(|e| panic!("{what}: no reply: {e}"));
        assert_eq!(be32(&r[0..4]), SIMPLE_REPLY_MAGIC, "{what}");
        assert_eq!(be64(&r[8..16]), cookie, "{what}: cookie");
        let error = be32(&r[4..8]);
        assert_eq!(
            error == 0,
            valid,
            "{what}: error {error} for {} flags {flags:#x} off {off} len {len}",
            cmd_name(typ)
        );
        if error != 0 {
            refused += 1;
            continue;
        }
        ok += 1;
        if typ == CMD_FLUSH {
            // FLUSH ignores its offset and length.
            continue;
        }
        let range = off as usize..(off + len as u64) as usize;
        match typ {
            CMD_READ => {
                let mut data = vec![0u8; len as usize];
                s.read_exact(&mut data).unwrap();
                model.check(off, &data, &what);
            }
            CMD_WRITE => {
                model.bytes[range.clone()].copy_from_slice(&payload);
                model.known[range].fill(true);
            }
            CMD_WRITE_ZEROES => {
                model.bytes[range.clone()].fill(0);
                model.known[range].fill(true);
            }
            CMD_TRIM => model.known[range].fill(false),
            _ => {}
        }
    }
    // The server still serves, and holds what was acknowledged.
    let mut s = connect(addr);
    for off in (0..EXPORT_BYTES).step_by(1 << 16) {
        s.write_all(
            &Request {
                flags: 0,
                typ: CMD_READ,
                cookie: off,
                offset: off,
                len: 1 << 16,
            }
            .encode(),
        )
        .unwrap();
        let mut r = [0u8; SIMPLE_REPLY_LEN];
        s.read_exact(&mut r).unwrap();
        assert_eq!(be32(&r[4..8]), 0);
        let mut data = vec![0u8; 1 << 16];
        s.read_exact(&mut data).unwrap();
        model.check(off, &data, "final read");
    }
    println!("server: {cases} cases, seed {seed}: {ok} served, {refused} refused, {closed} closed");
    assert!(ok > 0 && refused > 0 && closed > 0);
    drop(s);
    server.shutdown().unwrap();
}
