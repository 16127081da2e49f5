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
    /// A segment's primary refused a write or update as not durable (too few of the layout's
    /// holders usable), itself or as the last error of the retries given up: a new placement of
    /// a segment not committed yet may avoid the holders that are down.
    pub fn is_not_durable(&self) -> bool {
        match self {
            ClientError::Osd(OsdCallError::NotDurable { .. }) => true,
            // The retries keep the last error as text (its Display, `OSD …: not durable: …`).
            ClientError::GaveUp { last, .. } => last.contains(": not durable: "),
            _ => false,
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_durable_is_seen_itself_and_as_the_last_error_of_retries() {
        let refused = ClientError::Osd(OsdCallError::NotDurable {
            addr: "127.0.0.1:1".into(),
            message: "a write needs k + 1 = 5 usable chunks, the layout has 4".into(),
        });
        assert!(refused.is_not_durable());
        let gave_up = |last: &ClientError| ClientError::GaveUp {
            what: "write segment 1".into(),
            attempts: 3,
            ms: 10,
            last: last.to_string(),
        };
        assert!(gave_up(&refused).is_not_durable());
        let unreachable = ClientError::Osd(OsdCallError::Unreachable {
            addr: "127.0.0.1:1".into(),
            message: "connection refused".into(),
        });
        assert!(!unreachable.is_not_durable() && !gave_up(&unreachable).is_not_durable());
    }
}
