use std::path::PathBuf;

/// Errors of the trace library. Each renders as one line; parse errors read `file:line: reason`.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}:{line}: {reason}")]
    Parse {
        file: String,
        line: u64,
        reason: String,
    },
    #[error("{file}: cannot tell the trace format ({reason}); pass --format")]
    UnknownFormat { file: String, reason: String },
    #[error("invalid synthesis target: {0}")]
    InvalidTarget(String),
    #[error("unknown preset `{0}` (see `ecstack trace synth --list`)")]
    UnknownPreset(String),
    #[error("{0}")]
    Invalid(String),
    /// An output file that cannot be created.
    #[error("cannot create {}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing an output stream failed (the message is the I/O error's; a closed pipe stays
    /// recognizable as the error's source).
    #[error("{0}")]
    Output(#[source] std::io::Error),
    #[cfg(feature = "replay")]
    #[error(transparent)]
    Device(#[from] ecstack_device::DeviceError),
}

pub type Result<T> = std::result::Result<T, TraceError>;

impl TraceError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TraceError::Io {
            path: path.into(),
            source,
        }
    }
}
