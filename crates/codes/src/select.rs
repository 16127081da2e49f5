//! Which implementation a [`CodeKind`] builds: the GF(2^8) codes (`code.rs`) or RDP (`rdp.rs`).
//! Its own module so that `code.rs` (the seam) does not depend on an implementation that depends
//! on it.

use crate::code::{CodeKind, CodeOptions, ErasureCode, Systematic};
use crate::rdp::Rdp;
use crate::Result;

/// Build a code of the given kind. Checks k >= 1, m >= 1, k + m <= 256 and the kind's own limits (m = 1
/// for xor, m = 2 for raid6 and rdp, k <= p - 1 for rdp), else [`CodeError::Params`](crate::CodeError::Params).
pub fn new_code(kind: CodeKind, k: usize, m: usize) -> Result<Box<dyn ErasureCode>> {
    new_code_with(kind, k, m, CodeOptions::default())
}

/// [`new_code`] with options (the decode-matrix cache's limits).
pub fn new_code_with(
    kind: CodeKind,
    k: usize,
    m: usize,
    options: CodeOptions,
) -> Result<Box<dyn ErasureCode>> {
    match kind {
        CodeKind::Rdp => Ok(Box::new(Rdp::new(k, m, options)?)),
        _ => Ok(Box::new(Systematic::new(kind, k, m, options)?)),
    }
}
