//! The simulator's error: one line naming the setting (below the model and the testbed format,
//! which both use it).

/// Errors: one line naming the setting.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{field}: {msg}")]
    Config { field: &'static str, msg: String },
    #[error("codes layer: {0}")]
    Code(#[from] ecstack_codes::CodeError),
}

pub(crate) fn bad(field: &'static str, msg: impl Into<String>) -> SimError {
    SimError::Config {
        field,
        msg: msg.into(),
    }
}
