//! Cross-check against Debian's ISA-L 2.30 (feature `isal`; libisal.so.2 from libisal-dev, opened with
//! dlopen): the Cauchy generator, parity, decoding and parity deltas are byte-identical to ISA-L's, at
//! ISA-L's own dispatch and at every kernel level it has. Run in CI (`scripts/test.sh`); a missing
//! library fails the test.
#![cfg(feature = "isal")]

mod isal_common;
use ecstack_codes::isal::{self, Isal};

fn lib() -> &'static Isal {
    isal::debian().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn cauchy_matrix_is_isal_cauchy1() {
    isal_common::cauchy_matrix_is_isal_cauchy1(lib());
}

#[test]
fn cauchy_parity_is_byte_identical_to_isal() {
    isal_common::parity_is_byte_identical(lib());
}

#[test]
fn decode_is_byte_identical_to_isal() {
    isal_common::decode_is_byte_identical(lib());
}

#[test]
fn parity_delta_is_byte_identical_to_isal_update() {
    isal_common::delta_is_byte_identical(lib());
}

#[test]
fn debian_build_is_2_30_without_gfni() {
    assert!(lib().name().contains("2.30"));
    assert!(lib().levels().iter().all(|l| !l.name().contains("gfni")));
}
