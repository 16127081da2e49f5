//! A small S3 client for the peer benchmark (`ecstack bench cluster` against MinIO): create a bucket,
//! put and get whole objects over one HTTP/1.1 keep-alive connection, signed with AWS Signature
//! Version 4 (`UNSIGNED-PAYLOAD`, so the body is never hashed: the client costs MinIO as little CPU as
//! our own client costs ecstack). It runs in the same process and the same tokio runtime as the
//! ecstack clients it is compared with.
//!
//! Plain HTTP, or HTTPS (rustls, TLS 1.2/1.3) trusting one CA given as a PEM file — the benchmark
//! speaks TLS to MinIO whenever ecstack's own daemons run with TLS, so both sides pay for it.
//! Limits: path-style addressing, keys of URL-safe characters (checked), bodies up to
//! `BODY_BYTES_MAX`.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use ring::{digest, hmac};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

use crate::{LabError, Result};

/// The largest response body accepted (an object of the benchmark, or an error document).
pub const BODY_BYTES_MAX: usize = 1 << 30;
/// The longest response head (status line and headers) accepted.
const HEAD_BYTES_MAX: usize = 64 << 10;

/// Access to one S3 endpoint.
#[derive(Debug, Clone)]
pub struct S3Endpoint {
    /// `host:port` (plain HTTP).
    pub host: String,
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
    /// HTTPS: how to check the server's certificate. `None`: plain HTTP.
    pub tls: Option<S3Tls>,
}

/// HTTPS to an endpoint whose certificate is issued by one known CA.
#[derive(Debug, Clone)]
pub struct S3Tls {
    config: Arc<rustls::ClientConfig>,
    /// The name the server's certificate must carry.
    server_name: ServerName<'static>,
}

impl S3Tls {
    /// Trust the certificates in the PEM file `ca` (and nothing else); the server's certificate
    /// must name `server_name`.
    pub fn from_ca_pem(ca: &Path, server_name: &str) -> Result<S3Tls> {
        let bad = |m: String| LabError::Run(format!("S3 TLS: {}: {m}", ca.display()));
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad(e.to_string()))? {
            let cert = cert.map_err(|e| bad(e.to_string()))?;
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(bad("no certificate in the file".into()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server_name = ServerName::try_from(server_name.to_owned())
            .map_err(|e| bad(format!("server name {server_name:?}: {e}")))?;
        Ok(S3Tls {
            config: Arc::new(config),
            server_name,
        })
    }
}

/// A connection, plain or TLS.
trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}

type Stream = BufReader<Box<dyn Conn>>;

/// One connection to an endpoint (reconnects when the server closes it).
pub struct S3Client {
    endpoint: S3Endpoint,
    conn: Option<Stream>,
}

/// A request's signature inputs (the parts of SigV4 that vary).
struct Signed<'a> {
    method: &'a str,
    path: &'a str,
    /// `YYYYMMDDTHHMMSSZ`
    amz_date: &'a str,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

/// `YYYYMMDDTHHMMSSZ` of a Unix time (the proleptic Gregorian calendar, UTC).
fn amz_date(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let secs = unix_secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm, re-derived).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        secs / 3_600,
        secs / 60 % 60,
        secs % 60
    )
}

impl S3Endpoint {
    /// The `Authorization` header of a request (SigV4 over host, x-amz-content-sha256, x-amz-date).
    fn authorization(&self, req: &Signed<'_>) -> String {
        let signed_headers = "host;x-amz-content-sha256;x-amz-date";
        let canonical = format!(
            "{}\n{}\n\nhost:{}\nx-amz-content-sha256:UNSIGNED-PAYLOAD\nx-amz-date:{}\n\n{signed_headers}\nUNSIGNED-PAYLOAD",
            req.method, req.path, self.host, req.amz_date
        );
        let day = &req.amz_date[..8];
        let scope = format!("{day}/{}/s3/aws4_request", self.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
            req.amz_date,
            hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
        );
        let mut key = hmac_sha256(
            format!("AWS4{}", self.secret_key).as_bytes(),
            day.as_bytes(),
        );
        for part in [self.region.as_str(), "s3", "aws4_request"] {
            key = hmac_sha256(&key, part.as_bytes());
        }
        let signature = hex(&hmac_sha256(&key, to_sign.as_bytes()));
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            self.access_key
        )
    }
}

/// A bucket or key the client can put in a path unescaped.
fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.~/".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(LabError::Run(format!(
            "S3 {what} {name:?}: only letters, digits and -_.~/ are supported"
        )))
    }
}

impl S3Client {
    pub fn new(endpoint: S3Endpoint) -> S3Client {
        S3Client {
            endpoint,
            conn: None,
        }
    }

    pub async fn create_bucket(&mut self, bucket: &str) -> Result<()> {
        check_name("bucket", bucket)?;
        let (status, body) = self.request("PUT", &format!("/{bucket}"), &[]).await?;
        // An existing bucket of ours is fine.
        if status == 200 || (status == 409 && body_has(&body, "BucketAlreadyOwnedByYou")) {
            return Ok(());
        }
        Err(self.status_error("PUT", bucket, status, &body))
    }

    pub async fn put(&mut self, bucket: &str, key: &str, body: &[u8]) -> Result<()> {
        check_name("key", key)?;
        let path = format!("/{bucket}/{key}");
        let (status, resp) = self.request("PUT", &path, body).await?;
        if status == 200 {
            Ok(())
        } else {
            Err(self.status_error("PUT", &path, status, &resp))
        }
    }

    pub async fn get(&mut self, bucket: &str, key: &str) -> Result<Vec<u8>> {
        check_name("key", key)?;
        let path = format!("/{bucket}/{key}");
        let (status, body) = self.request("GET", &path, &[]).await?;
        if status == 200 {
            Ok(body)
        } else {
            Err(self.status_error("GET", &path, status, &body))
        }
    }

    fn status_error(&self, method: &str, path: &str, status: u16, body: &[u8]) -> LabError {
        let text = String::from_utf8_lossy(&body[..body.len().min(400)]);
        LabError::Run(format!(
            "S3 {method} {path} at {}: HTTP {status}: {}",
            self.endpoint.host,
            text.trim()
        ))
    }

    /// One request, on the kept connection or (if the server closed it) a new one.
    async fn request(&mut self, method: &str, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>)> {
        let reused = self.conn.is_some();
        match self.try_request(method, path, body).await {
            Ok(r) => Ok(r),
            // A kept connection may have been closed by the server while idle: retry once, fresh.
            Err(_) if reused => {
                self.conn = None;
                self.try_request(method, path, body).await
            }
            Err(e) => Err(e),
        }
    }

    async fn try_request(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<(u16, Vec<u8>)> {
        let host = self.endpoint.host.clone();
        let io = |e: std::io::Error| LabError::Run(format!("S3 {method} {path} at {host}: {e}"));
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let date = amz_date(now);
        let auth = self.endpoint.authorization(&Signed {
            method,
            path,
            amz_date: &date,
        });
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\nx-amz-date: {date}\r\nAuthorization: {auth}\r\nContent-Length: {}\r\n\r\n",
            self.endpoint.host,
            body.len()
        );
        if self.conn.is_none() {
            let s = TcpStream::connect(&self.endpoint.host).await.map_err(io)?;
            s.set_nodelay(true).map_err(io)?;
            let s: Box<dyn Conn> = match &self.endpoint.tls {
                None => Box::new(s),
                Some(tls) => Box::new(
                    tokio_rustls::TlsConnector::from(tls.config.clone())
                        .connect(tls.server_name.clone(), s)
                        .await
                        .map_err(io)?,
                ),
            };
            self.conn = Some(BufReader::with_capacity(1 << 20, s));
        }
        let conn = self.conn.as_mut().expect("connected above");
        conn.get_mut()
            .write_all(head.as_bytes())
            .await
            .map_err(io)?;
        conn.get_mut().write_all(body).await.map_err(io)?;
        conn.get_mut().flush().await.map_err(io)?;
        let (status, length, chunked, close) = read_head(conn).await.map_err(io)?;
        let body = if chunked {
            read_chunked(conn).await.map_err(io)?
        } else {
            let n = length.unwrap_or(0);
            if n > BODY_BYTES_MAX {
                return Err(LabError::Run(format!(
                    "S3 {method} {path}: a body of {n} bytes is over the {BODY_BYTES_MAX} limit"
                )));
            }
            // Read into spare capacity (no zero fill first: the fewest copies this client can do).
            let mut buf = Vec::with_capacity(n);
            let got = (&mut *conn)
                .take(n as u64)
                .read_to_end(&mut buf)
                .await
                .map_err(io)?;
            if got != n {
                return Err(io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the body ended after {got} of {n} bytes"),
                )));
            }
            buf
        };
        if close {
            self.conn = None;
        }
        Ok((status, body))
    }
}

fn body_has(body: &[u8], word: &str) -> bool {
    String::from_utf8_lossy(body).contains(word)
}

fn bad(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

/// Status, Content-Length, chunked?, Connection: close? of a response head.
async fn read_head(conn: &mut Stream) -> std::io::Result<(u16, Option<usize>, bool, bool)> {
    let mut line = String::new();
    let mut total = 0;
    conn.read_line(&mut line).await?;
    total += line.len();
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad(format!("not an HTTP status line: {:?}", line.trim_end())))?;
    let (mut length, mut chunked, mut close) = (None, false, false);
    loop {
        line.clear();
        let n = conn.read_line(&mut line).await?;
        total += n;
        if n == 0 {
            return Err(bad("the connection closed inside a response head".into()));
        }
        if total > HEAD_BYTES_MAX {
            return Err(bad(format!("a response head over {HEAD_BYTES_MAX} bytes")));
        }
        let l = line.trim_end();
        if l.is_empty() {
            return Ok((status, length, chunked, close));
        }
        let Some((name, value)) = l.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                length = Some(
                    value
                        .parse()
                        .map_err(|_| bad(format!("Content-Length {value:?}")))?,
                )
            }
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "connection" => close = value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
}

async fn read_chunked(conn: &mut Stream) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        conn.read_line(&mut line).await?;
        let size_text = line.trim_end().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| bad(format!("chunk size {size_text:?}")))?;
        if out.len() + size > BODY_BYTES_MAX {
            return Err(bad(format!("a body over {BODY_BYTES_MAX} bytes")));
        }
        let start = out.len();
        out.resize(start + size, 0);
        conn.read_exact(&mut out[start..]).await?;
        line.clear();
        conn.read_line(&mut line).await?; // the CRLF after the chunk (or the trailer's end)
        if size == 0 {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signature botocore's `S3SigV4Auth` (an independent implementation) computes for this
    /// request: `PUT /bench/o7`, host `127.0.0.1:9100`, `UNSIGNED-PAYLOAD`, at 2026-11-23 17:05:09 UTC.
    #[test]
    fn signature_matches_botocore() {
        let ep = S3Endpoint {
            host: "127.0.0.1:9100".into(),
            access_key: "admin".into(),
            secret_key: "secret12345".into(),
            region: "us-east-1".into(),
            tls: None,
        };
        let auth = ep.authorization(&Signed {
            method: "PUT",
            path: "/bench/o7",
            amz_date: "20261123T170509Z",
        });
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=admin/20261123/us-east-1/s3/aws4_request, \
             SignedHeaders=host;x-amz-content-sha256;x-amz-date, \
             Signature=0f6d63608fdd2fac99a284b8a638e2c6c9d6360052e947034316085b012cf381"
        );
    }

    #[test]
    fn dates_in_amz_form() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        // 2000-02-29 (a leap day in a century year) 23:59:59
        assert_eq!(amz_date(951_868_799), "20000229T235959Z");
        // 2026-11-23 17:05:09
        assert_eq!(amz_date(1_795_453_509), "20261123T170509Z");
    }

    #[test]
    fn names_outside_the_safe_set_are_refused() {
        assert!(check_name("key", "o-1/a.b").is_ok());
        let e = check_name("key", "a b").unwrap_err().to_string();
        assert!(e.contains("only letters"), "{e}");
        assert!(check_name("key", "").is_err());
    }
}
