//! A minimal blocking NBD client (fixed newstyle, `NBD_OPT_GO`, simple replies, one request at a time).
//!
//! Enough to drive a server from tests and tools without libnbd: read, write (optionally FUA), flush,
//! trim, write-zeroes and disconnect. Real workloads use libnbd clients (nbdcopy, fio).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::proto::*;
use crate::NbdError;

/// A connected client in the transmission phase.
pub struct Client {
    stream: TcpStream,
    size: u64,
    flags: u16,
    next_cookie: u64,
}

fn io(what: &str) -> impl Fn(std::io::Error) -> NbdError + '_ {
    move |e| NbdError::Io {
        what: what.to_string(),
        err: e,
    }
}

impl Client {
    /// Connect to `addr` and open export `name` with `NBD_OPT_GO`.
    pub fn connect(addr: SocketAddr, name: &str) -> Result<Client, NbdError> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .map_err(io("connecting to NBD server"))?;
        s.set_nodelay(true).map_err(io("setting TCP_NODELAY"))?;
        let mut g = [0u8; 18];
        s.read_exact(&mut g).map_err(io("reading greeting"))?;
        if be64(&g[0..8]) != NBDMAGIC || be64(&g[8..16]) != IHAVEOPT {
            return Err(NbdError::Protocol("not a newstyle NBD server".into()));
        }
        let hflags = be16(&g[16..18]);
        if hflags & FLAG_FIXED_NEWSTYLE == 0 {
            return Err(NbdError::Protocol("server is not fixed newstyle".into()));
        }
        let mut cflags = FLAG_C_FIXED_NEWSTYLE;
        if hflags & FLAG_NO_ZEROES != 0 {
            cflags |= FLAG_C_NO_ZEROES;
        }
        let mut m = cflags.to_be_bytes().to_vec();
        let mut data = (name.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(name.as_bytes());
        data.extend_from_slice(&0u16.to_be_bytes());
        m.extend_from_slice(&IHAVEOPT.to_be_bytes());
        m.extend_from_slice(&OPT_GO.to_be_bytes());
        m.extend_from_slice(&(data.len() as u32).to_be_bytes());
        m.extend_from_slice(&data);
        s.write_all(&m).map_err(io("sending NBD_OPT_GO"))?;
        let mut size = None;
        let mut flags = 0;
        loop {
            let (typ, d) = read_option_reply(&mut s, OPT_GO)?;
            match typ {
                REP_ACK => break,
                REP_INFO if d.len() >= 12 && be16(&d[0..2]) == INFO_EXPORT => {
                    size = Some(be64(&d[2..10]));
                    flags = be16(&d[10..12]);
                }
                REP_INFO => {}
                t if t & REP_FLAG_ERROR != 0 => {
                    return Err(NbdError::Protocol(format!(
                        "server refused export '{name}': {}",
                        String::from_utf8_lossy(&d)
                    )))
                }
                t => {
                    return Err(NbdError::Protocol(format!(
                        "unexpected option reply type {t}"
                    )))
                }
            }
        }
        let size =
            size.ok_or_else(|| NbdError::Protocol("server sent no NBD_INFO_EXPORT".into()))?;
        Ok(Client {
            stream: s,
            size,
            flags,
            next_cookie: 1,
        })
    }

    /// Export size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Transmission flags the server sent.
    pub fn transmission_flags(&self) -> u16 {
        self.flags
    }

    fn request(
        &mut self,
        typ: u16,
        flags: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) -> Result<u64, NbdError> {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let req = Request {
            flags,
            typ,
            cookie,
            offset,
            len,
        };
        let mut b = req.encode().to_vec();
        b.extend_from_slice(payload);
        self.stream.write_all(&b).map_err(io("sending request"))?;
        Ok(cookie)
    }

    fn reply(&mut self, typ: u16, cookie: u64, data: &mut [u8]) -> Result<(), NbdError> {
        let mut h = [0u8; SIMPLE_REPLY_LEN];
        self.stream
            .read_exact(&mut h)
            .map_err(io("reading reply"))?;
        if be32(&h[0..4]) != SIMPLE_REPLY_MAGIC {
            return Err(NbdError::Protocol("bad reply magic".into()));
        }
        if be64(&h[8..16]) != cookie {
            return Err(NbdError::Protocol("reply cookie mismatch".into()));
        }
        let err = be32(&h[4..8]);
        if err != 0 {
            return Err(NbdError::Remote {
                cmd: cmd_name(typ),
                errno: err,
            });
        }
        self.stream
            .read_exact(data)
            .map_err(io("reading reply data"))
    }

    /// Read `buf.len()` bytes at `offset`.
    pub fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), NbdError> {
        let len =
            u32::try_from(buf.len()).map_err(|_| NbdError::Config("read too large".into()))?;
        let c = self.request(CMD_READ, 0, offset, len, &[])?;
        self.reply(CMD_READ, c, buf)
    }

    /// Write `data` at `offset`; with `fua` the reply waits until it is durable.
    pub fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> Result<(), NbdError> {
        let len =
            u32::try_from(data.len()).map_err(|_| NbdError::Config("write too large".into()))?;
        let f = if fua { CMD_FLAG_FUA } else { 0 };
        let c = self.request(CMD_WRITE, f, offset, len, data)?;
        self.reply(CMD_WRITE, c, &mut [])
    }

    /// `NBD_CMD_FLUSH`.
    pub fn flush(&mut self) -> Result<(), NbdError> {
        let c = self.request(CMD_FLUSH, 0, 0, 0, &[])?;
        self.reply(CMD_FLUSH, c, &mut [])
    }

    /// `NBD_CMD_TRIM` of `[offset, offset+len)`.
    pub fn trim(&mut self, offset: u64, len: u32) -> Result<(), NbdError> {
        let c = self.request(CMD_TRIM, 0, offset, len, &[])?;
        self.reply(CMD_TRIM, c, &mut [])
    }

    /// `NBD_CMD_WRITE_ZEROES` of `[offset, offset+len)`.
    pub fn write_zeroes(&mut self, offset: u64, len: u32) -> Result<(), NbdError> {
        let c = self.request(CMD_WRITE_ZEROES, 0, offset, len, &[])?;
        self.reply(CMD_WRITE_ZEROES, c, &mut [])
    }

    /// Send `NBD_CMD_DISC` and close.
    pub fn disconnect(mut self) -> Result<(), NbdError> {
        self.request(CMD_DISC, 0, 0, 0, &[])?;
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        // Wait for the server to close its side (it finishes outstanding requests first).
        let mut sink = [0u8; 64];
        let _ = self.stream.set_read_timeout(Some(Duration::from_secs(10)));
        while matches!(self.stream.read(&mut sink), Ok(n) if n > 0) {}
        Ok(())
    }
}

/// Read one option reply for `opt`: (reply type, data).
pub(crate) fn read_option_reply(s: &mut impl Read, opt: u32) -> Result<(u32, Vec<u8>), NbdError> {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).map_err(io("reading option reply"))?;
    if be64(&h[0..8]) != OPT_REPLY_MAGIC {
        return Err(NbdError::Protocol("bad option reply magic".into()));
    }
    if be32(&h[8..12]) != opt {
        return Err(NbdError::Protocol("option reply for another option".into()));
    }
    let typ = be32(&h[12..16]);
    let len = be32(&h[16..20]);
    if len > MAX_OPTION_LEN {
        return Err(NbdError::Protocol(format!("option reply of {len} bytes")));
    }
    let mut d = vec![0u8; len as usize];
    s.read_exact(&mut d)
        .map_err(io("reading option reply data"))?;
    Ok((typ, d))
}
