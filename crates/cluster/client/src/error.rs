//! Everything a client call can fail with, each as one line a user can act on.

use ecstack_mds_proto::MdsError;
use ecstack_osd_proto::OsdCallError;
use ecstack_rpc::{ConfigError, SecurityError};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cluster init: {0}")]
    Init(#[from] ecstack_rpc::InitError),
    #[error("client certificate: {0}")]
    Security(#[from] SecurityError),
    #[error("{0}")]
    Mds(#[from] MdsError),
    #[error("{0}")]
    Osd(#[from] OsdCallError),
    #[error("{path}: byte range {offset}..{end} is outside the file ({size} bytes)")]
    Range {
        path: String,
        offset: u64,
        end: u64,
        size: u64,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{what}: no answer within {ms} ms")]
    Timeout { what: String, ms: u64 },
    /// A data call none of whose bytes moved for `ms` (it may have moved some before).
    #[error("{what}: no byte moved for {ms} ms")]
    Stalled { what: String, ms: u64 },
    #[error("{what}: gave up after {attempts} attempts over {ms} ms; last error: {last}")]
    GaveUp {
        what: String,
        attempts: u32,
        ms: u64,
        last: String,
    },
    #[error("the MDS answered with a layout this client cannot use: {0}")]
    Layout(String),
    #[error("{0}")]
    Local(String),
}

impl ClientError {
    /// Worth retrying after a backoff (and, for a segment, a fresh layout).
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Mds(e) => e.is_retryable(),
            ClientError::Osd(e) => e.is_retryable(),
            ClientError::Timeout { .. } | ClientError::Stalled { .. } => true,
            _ => false,
        }
    }

    pub fn io(what: impl Into<String>, source: std::io::Error) -> ClientError {
        ClientError::Io {
            what: what.into(),
            source,
        }
    }
}
