//! RESP2, the Redis serialization protocol: an incremental request parser (multibulk arrays of
//! bulk strings, and inline commands) and reply encoders.
//!
//! [`parse_command`] never panics: any byte string yields a command, "need more bytes", or a
//! [`ProtocolError`] whose text follows Redis's (`Protocol error: ...`), after which the server
//! replies with that error and closes the connection.

/// Most arguments in one command (Redis: 1024 × 1024).
pub const ARGS_MAX: usize = 1024 * 1024;
/// Longest inline command line (Redis: 64 KiB).
pub const INLINE_BYTES_MAX: usize = 64 * 1024;

/// Bad bytes from a client; the message is sent as `-ERR <message>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub String);

/// Find `\r\n` at or after `from`; the index of `\r`.
fn crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

/// Parse a decimal integer line (`-?[0-9]+`) strictly.
fn parse_int(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with('+') {
        return None;
    }
    s.parse().ok()
}

/// Parse one command at the start of `buf`: `Ok(Some((args, consumed)))`, `Ok(None)` when more
/// bytes are needed, or an error. `bulk_bytes_max` bounds each argument. An empty inline line
/// parses as a command with no arguments (the caller skips it).
pub fn parse_command(
    buf: &[u8],
    bulk_bytes_max: usize,
) -> Result<Option<(Vec<Vec<u8>>, usize)>, ProtocolError> {
    let mut args = Vec::new();
    Ok(parse_command_into(buf, bulk_bytes_max, &mut args)?.map(|used| (args, used)))
}

/// [`parse_command`] into `args`, reusing its vectors (a server parses every command of a
/// connection into the same ones: no allocation per argument once they have grown). On
/// `Ok(Some(consumed))` `args` holds the command's arguments; otherwise its content is
/// unspecified.
pub fn parse_command_into(
    buf: &[u8],
    bulk_bytes_max: usize,
    args: &mut Vec<Vec<u8>>,
) -> Result<Option<usize>, ProtocolError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        return Ok(parse_inline(buf)?.map(|(a, used)| {
            *args = a;
            used
        }));
    }
    let Some(end) = crlf(buf, 1) else {
        if buf.len() > INLINE_BYTES_MAX {
            return Err(ProtocolError("too big mbulk count string".into()));
        }
        return Ok(None);
    };
    let n = parse_int(&buf[1..end])
        .filter(|&n| n <= ARGS_MAX as i64)
        .ok_or_else(|| ProtocolError("invalid multibulk length".into()))?;
    let mut at = end + 2;
    if n <= 0 {
        args.clear();
        return Ok(Some(at));
    }
    let n = n as usize;
    if args.len() > n {
        args.truncate(n);
    }
    for i in 0..n {
        let Some(&first) = buf.get(at) else {
            return Ok(None);
        };
        if first != b'$' {
            return Err(ProtocolError(format!(
                "expected '$', got '{}'",
                first.escape_ascii()
            )));
        }
        let Some(end) = crlf(buf, at + 1) else {
            if buf.len() - at > 32 {
                return Err(ProtocolError("too big bulk count string".into()));
            }
            return Ok(None);
        };
        let len = parse_int(&buf[at + 1..end])
            .filter(|&l| l >= 0 && l as u64 <= bulk_bytes_max as u64)
            .ok_or_else(|| ProtocolError("invalid bulk length".into()))? as usize;
        let data = end + 2;
        if buf.len() < data + len + 2 {
            return Ok(None);
        }
        if &buf[data + len..data + len + 2] != b"\r\n" {
            return Err(ProtocolError("bulk string not terminated by CRLF".into()));
        }
        let arg = &buf[data..data + len];
        match args.get_mut(i) {
            Some(a) => {
                a.clear();
                a.extend_from_slice(arg);
            }
            None => args.push(arg.to_vec()),
        }
        at = data + len + 2;
    }
    Ok(Some(at))
}

/// An inline command: one line, arguments split on spaces and tabs (no quoting).
fn parse_inline(buf: &[u8]) -> Result<Option<(Vec<Vec<u8>>, usize)>, ProtocolError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > INLINE_BYTES_MAX {
            return Err(ProtocolError("too big inline request".into()));
        }
        return Ok(None);
    };
    if nl > INLINE_BYTES_MAX {
        return Err(ProtocolError("too big inline request".into()));
    }
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let args = line
        .split(|&b| b == b' ' || b == b'\t')
        .filter(|a| !a.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    Ok(Some((args, nl + 1)))
}

/// Reply encoders (RESP2).
pub mod reply {
    pub fn simple(out: &mut Vec<u8>, s: &str) {
        out.push(b'+');
        out.extend_from_slice(s.as_bytes());
        out.extend_from_slice(b"\r\n");
    }

    /// An error reply; `msg` starts with its code (`ERR ...`, `NOAUTH ...`). Newlines become spaces.
    pub fn error(out: &mut Vec<u8>, msg: &str) {
        out.push(b'-');
        out.extend(
            msg.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        out.extend_from_slice(b"\r\n");
    }

    /// `n` in decimal (no allocation: replies are built once per request).
    fn decimal(out: &mut Vec<u8>, n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = n;
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        out.extend_from_slice(&digits[at..]);
    }

    pub fn int(out: &mut Vec<u8>, n: i64) {
        out.push(b':');
        if n < 0 {
            out.push(b'-');
        }
        decimal(out, n.unsigned_abs());
        out.extend_from_slice(b"\r\n");
    }

    pub fn bulk(out: &mut Vec<u8>, b: &[u8]) {
        out.push(b'$');
        decimal(out, b.len() as u64);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(b);
        out.extend_from_slice(b"\r\n");
    }

    pub fn null(out: &mut Vec<u8>) {
        out.extend_from_slice(b"$-1\r\n");
    }

    pub fn array_len(out: &mut Vec<u8>, n: usize) {
        out.push(b'*');
        decimal(out, n as u64);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_redis_writes_them() {
        for n in [0i64, 7, -7, 10, 1234567890, i64::MIN, i64::MAX] {
            let mut out = Vec::new();
            reply::int(&mut out, n);
            assert_eq!(out, format!(":{n}\r\n").into_bytes());
        }
        let mut out = Vec::new();
        reply::bulk(&mut out, &[b'x'; 100]);
        assert_eq!(out[..7], *b"$100\r\nx");
        let mut out = Vec::new();
        reply::array_len(&mut out, 0);
        assert_eq!(out, b"*0\r\n");
    }

    #[test]
    fn reused_argument_vectors_give_what_a_fresh_parse_gives() {
        let stream = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*1\r\n$4\r\nPING\r\nECHO a\r\n*2\r\n$3\r\nGET\r\n$0\r\n\r\n*0\r\n";
        let mut args = vec![b"junk".to_vec(); 5];
        let mut at = 0;
        while at < stream.len() {
            let fresh = parse_command(&stream[at..], 100).unwrap().unwrap();
            let used = parse_command_into(&stream[at..], 100, &mut args)
                .unwrap()
                .unwrap();
            assert_eq!((args.clone(), used), fresh);
            at += used;
        }
    }

    #[test]
    fn multibulk_inline_partial_and_errors() {
        let cmd = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n";
        let (args, n) = parse_command(cmd, 1 << 20).unwrap().unwrap();
        assert_eq!(
            args,
            vec![b"SET".to_vec(), b"k".to_vec(), b"hello".to_vec()]
        );
        assert_eq!(n, cmd.len());
        for cut in 0..cmd.len() {
            assert_eq!(
                parse_command(&cmd[..cut], 1 << 20),
                Ok(None),
                "prefix of {cut} bytes"
            );
        }
        let (args, n) = parse_command(b"PING  hi\r\nrest", 100).unwrap().unwrap();
        assert_eq!((args, n), (vec![b"PING".to_vec(), b"hi".to_vec()], 10));
        assert!(parse_command(b"*1\r\n:3\r\n", 100).is_err());
        assert!(parse_command(b"*x\r\n", 100).is_err());
        assert!(parse_command(b"*1\r\n$-5\r\n", 100).is_err());
        assert!(
            parse_command(b"*1\r\n$200\r\n", 100).is_err(),
            "over the bulk limit"
        );
        assert!(
            parse_command(b"*1\r\n$1\r\nab\r\n", 100).is_err(),
            "missing CRLF"
        );
    }
}
