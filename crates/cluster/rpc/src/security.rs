//! Mutual TLS for every cluster connection. A certificate authority made by `ecstack cluster init`
//! signs one certificate per process; servers require a client certificate from that CA, clients
//! verify the server's. `Security::Insecure` exists for loopback experiments only.

use std::path::{Path, PathBuf};
use std::time::Duration;

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

impl Security {
    /// Loads `ca.pem`, `<name>.pem` and `<name>.key` from a cluster's certificate directory.
    pub fn load(certs_dir: &Path, name: &str) -> Result<Security, SecurityError> {
        Ok(Security::Mtls {
            ca_pem: read(&certs_dir.join("ca.pem"))?,
            cert_pem: read(&certs_dir.join(format!("{name}.pem")))?,
            key_pem: read(&certs_dir.join(format!("{name}.key")))?,
        })
    }

    pub fn is_insecure(&self) -> bool {
        matches!(self, Security::Insecure)
    }

    /// A server builder that requires a client certificate signed by the cluster CA.
    pub fn server(&self) -> Result<Server, SecurityError> {
        let builder = Server::builder();
        match self {
            Security::Insecure => Ok(builder),
            Security::Mtls {
                ca_pem,
                cert_pem,
                key_pem,
            } => {
                let tls = ServerTlsConfig::new()
                    .identity(Identity::from_pem(cert_pem, key_pem))
                    .client_ca_root(Certificate::from_pem(ca_pem));
                builder
                    .tls_config(tls)
                    .map_err(|e| SecurityError::Tls(e.to_string()))
            }
        }
    }

    /// A lazily connecting channel to `addr` (`host:port`) with the given connect/request deadlines.
    pub fn channel(
        &self,
        addr: &str,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Result<Channel, SecurityError> {
        let scheme = if self.is_insecure() { "http" } else { "https" };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|e| SecurityError::Addr {
                addr: addr.to_owned(),
                message: e.to_string(),
            })?
            .connect_timeout(connect_timeout)
            .timeout(timeout)
            .tcp_nodelay(true);
        let endpoint = match self {
            Security::Insecure => endpoint,
            Security::Mtls {
                ca_pem,
                cert_pem,
                key_pem,
            } => {
                let tls = ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(ca_pem))
                    .identity(Identity::from_pem(cert_pem, key_pem))
                    .domain_name(CLUSTER_DNS_NAME);
                endpoint
                    .tls_config(tls)
                    .map_err(|e| SecurityError::Tls(e.to_string()))?
            }
        };
        Ok(endpoint.connect_lazy())
    }
}
