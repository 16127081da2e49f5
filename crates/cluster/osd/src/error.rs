//! What an OSD operation can fail with ([`OsdError`]): the domain error of every operation module
//! (write, read, degraded read, update, recovery, deletion and the chunk calls). It says what went
//! wrong and whether a retry can help ([`OsdError::retryable`]); the gRPC layer (`handlers.rs`)
//! turns it into a status code at its edge, and a caller's [`crate::api::OsdCallError`] maps the
//! code back (docs/cluster.md, "The OSD service"). Each variant's message is the one line a user
//! sees.

use crate::chunk_store::ChunkStoreError;

/// Why an OSD operation failed. The message is the whole line (it names the segment and chunk).
#[derive(Debug, thiserror::Error)]
pub enum OsdError {
    /// A malformed request: a bad layout or chunk header, a parity chunk where a data chunk is
    /// needed, a stream that carries too many or too few bytes. The same request fails again.
    #[error("{0}")]
    Invalid(String),
    /// A byte range outside the segment or the chunk. The same request fails again.
    #[error("{0}")]
    OutOfRange(String),
    /// The chunk is not stored on this OSD.
    #[error("{0}")]
    NotFound(String),
    /// The caller's picture of the segment is out of date: this OSD is not the layout's primary,
    /// the layout's epoch is older than one seen, a chunk is newer than the primary's view, the
    /// call was meant for another OSD, or a chunk is not at the version the call expects. Worth
    /// retrying with a layout fetched afresh.
    #[error("{0}")]
    StaleLayout(String),
    /// This OSD holds no primary lease (its heartbeats are late; the MDS may have promoted
    /// another primary). Worth retrying.
    #[error("{0}")]
    NoLease(String),
    /// Too few chunks usable or durable (fewer than k + 1), or the MDS could not mark the missing
    /// ones stale: nothing acknowledged. Worth retrying.
    #[error("{0}")]
    NotDurable(String),
    /// Fewer than k chunks readable, or this holder's chunk is corrupt.
    #[error("{0}")]
    Unrecoverable(String),
    /// The MDS could not be told what this OSD did (a rebuilt chunk). Worth retrying.
    #[error("{0}")]
    Mds(String),
    /// The request's own stream failed (the caller went away, a message too large or
    /// undecodable): the transport's error as it came, handed back to the transport unchanged.
    #[error("{0}")]
    Request(Box<dyn std::error::Error + Send + Sync>),
    /// A failure inside this OSD: a chunk store error that is not the caller's, a task that
    /// failed, an encode or decode that failed.
    #[error("{0}")]
    Internal(String),
    /// A block stream this OSD will not serve now (admission control: it cannot without
    /// collapsing the streams it serves; or a high-priority stream preempted it). Not worth
    /// retrying here: the caller goes to another OSD.
    #[error("{0}")]
    Refused(String),
}

impl OsdError {
    /// Whether the same operation may succeed later (after re-fetching the layout, with
    /// backoff): the layout or the view changed, the lease lapsed, or too few holders were
    /// durable this time. The caller of a failed request stream sees its own failure, so a
    /// [`OsdError::Request`] is not counted.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            OsdError::StaleLayout(_)
                | OsdError::NoLease(_)
                | OsdError::NotDurable(_)
                | OsdError::Mds(_)
        )
    }
}

impl From<ChunkStoreError> for OsdError {
    /// A chunk store error as the caller of a chunk call sees it: a conflict (the chunk is not at
    /// the version the call expects) is a stale picture, corruption is data lost.
    fn from(e: ChunkStoreError) -> OsdError {
        match &e {
            ChunkStoreError::NotFound { .. } => OsdError::NotFound(e.to_string()),
            ChunkStoreError::Range { .. } => OsdError::OutOfRange(e.to_string()),
            ChunkStoreError::Invalid { .. } => OsdError::Invalid(e.to_string()),
            ChunkStoreError::Conflict { .. } => OsdError::StaleLayout(e.to_string()),
            ChunkStoreError::BlocksInvalid { .. } => OsdError::Invalid(e.to_string()),
            e if e.is_corruption() => OsdError::Unrecoverable(e.to_string()),
            _ => OsdError::Internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_kinds() {
        let m = || "m".to_owned();
        for e in [
            OsdError::StaleLayout(m()),
            OsdError::NoLease(m()),
            OsdError::NotDurable(m()),
            OsdError::Mds(m()),
        ] {
            assert!(e.retryable(), "{e:?}");
        }
        for e in [
            OsdError::Invalid(m()),
            OsdError::OutOfRange(m()),
            OsdError::NotFound(m()),
            OsdError::Unrecoverable(m()),
            OsdError::Internal(m()),
            OsdError::Refused(m()),
            OsdError::Request("gone".into()),
        ] {
            assert!(!e.retryable(), "{e:?}");
        }
    }

    #[test]
    fn store_errors_keep_their_meaning() {
        let e = OsdError::from(ChunkStoreError::NotFound {
            segment: 1,
            index: 2,
        });
        assert!(matches!(e, OsdError::NotFound(_)), "{e:?}");
        assert_eq!(e.to_string(), "segment 0x1 chunk 2: not stored here");
        let e = OsdError::from(ChunkStoreError::Checksum {
            segment: 1,
            index: 2,
            block: 0,
        });
        assert!(matches!(e, OsdError::Unrecoverable(_)), "{e:?}");
    }
}
