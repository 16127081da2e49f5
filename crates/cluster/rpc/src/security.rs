//! Mutual TLS for every cluster connection. A certificate authority made by `ecstack cluster init`
//! signs one certificate per process; servers require a client certificate from that CA, clients
//! verify the server's. `Security::Insecure` exists for loopback experiments only. What each
//! certificate may call is checked by [`crate::roles`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::limits::{
    CONNECTION_WINDOW_BYTES, FRAME_BYTES_MAX, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT,
    STREAM_WINDOW_BYTES,
};
use hyper_util::client::legacy::connect::HttpConnector;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig,
};

/// Every certificate of a cluster carries this DNS name; clients verify servers against it (the
/// cluster CA, not the name, is what ties a certificate to its cluster).
pub const CLUSTER_DNS_NAME: &str = "ecstack-cluster";

#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("TLS setup failed: {0}")]
    Tls(String),
    #[error("bad address {addr:?}: {message}")]
    Addr { addr: String, message: String },
    #[error("--insecure is for loopback experiments only, but {addr} is not a loopback address; use the cluster's certificates")]
    InsecureNotLoopback { addr: String },
}

/// Whether `addr` (`host:port`, `[v6]:port` or a bare host) names this machine only:
/// 127.0.0.0/8, ::1 or `localhost`.
pub fn is_loopback_addr(addr: &str) -> bool {
    if let Ok(sa) = addr.parse::<std::net::SocketAddr>() {
        return sa.ip().is_loopback();
    }
    if let Ok(ip) = addr.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    let host = match addr.rsplit_once(':') {
        Some((h, port)) if port.parse::<u16>().is_ok() => h,
        _ => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<std::net::IpAddr>()
        .map(|ip| ip.is_loopback())
        .unwrap_or(false)
}

#[derive(Clone)]
pub enum Security {
    /// Plain HTTP/2. Only for loopback experiments; whoever builds it says so loudly.
    Insecure,
    Mtls {
        ca_pem: Vec<u8>,
        cert_pem: Vec<u8>,
        key_pem: Vec<u8>,
    },
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Security::Insecure => f.write_str("Security::Insecure"),
            Security::Mtls { .. } => f.write_str("Security::Mtls"),
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, SecurityError> {
    std::fs::read(path).map_err(|source| SecurityError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Makes TLS 1.3's AES-128-GCM the first choice of every TLS connection this process makes or
/// takes through tonic, then AES-256-GCM, then ChaCha20-Poly1305 (TLS 1.2's suites in the same
/// order after them): tonic builds its rustls configurations from the process's default crypto
/// provider, and ring's default lists AES-256-GCM first. AES-128-GCM is what TLS 1.3 requires
/// every implementation to have and what Go (MinIO) picks; AES-256 runs 14 AES rounds per block
/// to its 10, which made decryption 38 % of a client's CPU per byte more on an Intel Xeon with
/// VAES (docs/benchmarks.md, "CodFS cluster against MinIO"). Both ends of a cluster connection
/// run this, so they agree on it; a peer that offers only AES-256 still gets it. Runs once; a
/// provider the process installed before is kept.
pub fn prefer_aes128_gcm() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = cluster_crypto_provider().install_default();
    });
}

/// ring's provider with the cipher suites in the cluster's order ([`prefer_aes128_gcm`]).
pub fn cluster_crypto_provider() -> rustls::crypto::CryptoProvider {
    use rustls::CipherSuite as C;
    let mut provider = rustls::crypto::ring::default_provider();
    let rank = |s: &rustls::SupportedCipherSuite| match s.suite() {
        C::TLS13_AES_128_GCM_SHA256 => 0,
        C::TLS13_AES_256_GCM_SHA384 => 1,
        C::TLS13_CHACHA20_POLY1305_SHA256 => 2,
        C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 | C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 3,
        C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 | C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => 4,
        _ => 5,
    };
    // A stable sort: suites of one rank keep ring's order.
    provider.cipher_suites.sort_by_key(rank);
    provider
}

impl Security {
    /// Loads `ca.pem`, `<name>.pem` and `<name>.key` from a cluster's certificate directory.
    pub fn load(certs_dir: &Path, name: &str) -> Result<Security, SecurityError> {
        Ok(Security::Mtls {
            ca_pem: read(&certs_dir.join("ca.pem"))?,
            cert_pem: read(&certs_dir.join(format!("{name}.pem")))?,
            key_pem: read(&certs_dir.join(format!("{name}.key")))?,
        })
    }

    /// Plain HTTP/2 for `process` (`mds`, `osd-3`, `client`), allowed only when every address
    /// it binds or connects to is a loopback address; prints one loud warning line on stderr.
    pub fn insecure(process: &str, addrs: &[&str]) -> Result<Security, SecurityError> {
        if let Some(addr) = addrs.iter().find(|a| !is_loopback_addr(a)) {
            return Err(SecurityError::InsecureNotLoopback {
                addr: (*addr).to_owned(),
            });
        }
        eprintln!("{}", insecure_warning(process));
        Ok(Security::Insecure)
    }

    pub fn is_insecure(&self) -> bool {
        matches!(self, Security::Insecure)
    }

    /// A server builder that requires a client certificate signed by the cluster CA.
    /// Both kinds get TCP_NODELAY, HTTP/2 keep-alive pings and the windows of [`crate::limits`].
    pub fn server(&self) -> Result<Server, SecurityError> {
        let builder = Server::builder()
            .tcp_nodelay(true)
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
            .initial_stream_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
            .max_frame_size(FRAME_BYTES_MAX);
        match self {
            Security::Insecure => Ok(builder),
            Security::Mtls {
                ca_pem,
                cert_pem,
                key_pem,
            } => {
                prefer_aes128_gcm();
                let tls = ServerTlsConfig::new()
                    .identity(Identity::from_pem(cert_pem, key_pem))
                    .client_ca_root(Certificate::from_pem(ca_pem));
                builder
                    .tls_config(tls)
                    .map_err(|e| SecurityError::Tls(e.to_string()))
            }
        }
    }

    /// A lazily connecting channel to `addr` (`host:port`) with the given connect deadline (the
    /// TCP connect and the TLS handshake together) and a
    /// deadline on every call up to its response's headers (`None`: none; the caller bounds its
    /// calls, e.g. on progress — for a client-streaming call the headers come after the whole
    /// upload).
    pub fn channel(
        &self,
        addr: &str,
        connect_timeout: Duration,
        timeout: Option<Duration>,
    ) -> Result<Channel, SecurityError> {
        let scheme = if self.is_insecure() { "http" } else { "https" };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|e| SecurityError::Addr {
                addr: addr.to_owned(),
                message: e.to_string(),
            })?
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .initial_stream_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
            .max_frame_size(FRAME_BYTES_MAX);
        let endpoint = match timeout {
            Some(t) => endpoint.timeout(t),
            None => endpoint,
        };
        let endpoint = match self {
            Security::Insecure => endpoint,
            Security::Mtls {
                ca_pem,
                cert_pem,
                key_pem,
            } => {
                prefer_aes128_gcm();
                let tls = ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(ca_pem))
                    .identity(Identity::from_pem(cert_pem, key_pem))
                    .domain_name(CLUSTER_DNS_NAME);
                endpoint
                    .tls_config(tls)
                    .map_err(|e| SecurityError::Tls(e.to_string()))?
            }
        };
        // Tonic's own lazy connector bounds only the TCP connect by `connect_timeout`; given the
        // connector, it bounds the whole connection with it, TLS handshake included: a peer that
        // accepts and never answers (a stopped process: the kernel still accepts for it) fails
        // the call after `connect_timeout` instead of holding it up.
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(connect_timeout));
        Ok(endpoint.connect_with_connector_lazy(tcp))
    }
}

/// The process name (certificate common name: `mds`, `osd-3`, `client`) of the peer that sent
/// `request` over mutual TLS; `None` on an insecure connection. Servers use it to log who called
/// (what a caller may call is [`crate::roles`]' business: [`Security::guard`]).
pub fn peer_name<T>(request: &tonic::Request<T>) -> Option<String> {
    let certs = request.peer_certs()?;
    let leaf = certs.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

/// Binds a server's TCP listener (`127.0.0.1:0` picks a free port) and returns it ready for
/// `Server::serve_with_incoming`, with the address actually bound (what a daemon registers and logs).
pub async fn bind(addr: &str) -> Result<(TcpIncoming, SocketAddr), SecurityError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| SecurityError::Addr {
            addr: addr.to_owned(),
            message: format!("cannot bind: {e}"),
        })?;
    let local = listener.local_addr().map_err(|e| SecurityError::Addr {
        addr: addr.to_owned(),
        message: e.to_string(),
    })?;
    Ok((TcpIncoming::from(listener).with_nodelay(Some(true)), local))
}

/// The one line an insecure process prints on stderr.
pub fn insecure_warning(process: &str) -> String {
    format!(
        "WARNING: {process} runs with --insecure: NO TLS, NO AUTHENTICATION; anyone who reaches its port can read and \
         change every byte. For loopback experiments only."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_connections_prefer_aes128_gcm_and_drop_no_suite() {
        prefer_aes128_gcm();
        let installed = rustls::crypto::CryptoProvider::get_default().expect("installed");
        let names = |p: &rustls::crypto::CryptoProvider| {
            let mut v: Vec<_> = p.cipher_suites.iter().map(|s| s.suite()).collect();
            v.sort_by_key(|s| u16::from(*s));
            v
        };
        assert_eq!(
            installed.cipher_suites[0].suite(),
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
        );
        assert_eq!(
            installed.cipher_suites[1].suite(),
            rustls::CipherSuite::TLS13_AES_256_GCM_SHA384
        );
        assert_eq!(
            names(installed),
            names(&rustls::crypto::ring::default_provider())
        );
    }

    #[test]
    fn loopback_addresses() {
        for a in [
            "127.0.0.1:7100",
            "127.3.2.1:0",
            "[::1]:80",
            "localhost:7100",
            "localhost",
            "::1",
        ] {
            assert!(is_loopback_addr(a), "{a}");
        }
        for a in [
            "0.0.0.0:7100",
            "10.0.0.1:7100",
            "[::]:1",
            "example.org:7100",
            "192.168.1.2",
            "",
        ] {
            assert!(!is_loopback_addr(a), "{a}");
        }
    }

    #[test]
    fn insecure_refuses_a_non_loopback_address() {
        assert!(Security::insecure("mds", &["127.0.0.1:0"])
            .unwrap()
            .is_insecure());
        let e = Security::insecure("osd-1", &["127.0.0.1:7100", "0.0.0.0:7101"]).unwrap_err();
        assert!(e.to_string().contains("0.0.0.0:7101"), "{e}");
        assert!(insecure_warning("mds").contains("loopback experiments only"));
    }
}
