//! Cross-check against the newest ISA-L (feature `isal-new`: ISA-L 2.31 with the GFNI kernels, built
//! from the isal-sys crate and linked statically): generator, parity, decoding and parity deltas
//! (`ec_encode_data_update`) are byte-identical, at ISA-L's own dispatch and at every kernel level it
//! has that this CPU runs. Run in CI (`scripts/test.sh`).
#![cfg(feature = "isal-new")]

mod isal_common;
use ecstack_codes::isal;

#[test]
fn cauchy_matrix_is_newest_isal_cauchy1() {
    isal_common::cauchy_matrix_is_isal_cauchy1(isal::newest());
}

#[test]
fn cauchy_parity_is_byte_identical_to_newest_isal() {
    isal_common::parity_is_byte_identical(isal::newest());
}

#[test]
fn decode_is_byte_identical_to_newest_isal() {
    isal_common::decode_is_byte_identical(isal::newest());
}

#[test]
fn parity_delta_is_byte_identical_to_newest_isal_update() {
    isal_common::delta_is_byte_identical(isal::newest());
}

#[test]
fn newest_build_has_gfni_kernels() {
    let lib = isal::newest();
    assert!(lib.name().contains("2.31"));
    // The GFNI levels are listed whenever the CPU can run them.
    for l in [
        ecstack_codes::Simd::Avx2Gfni,
        ecstack_codes::Simd::Avx512Gfni,
    ] {
        assert_eq!(lib.levels().contains(&l), l.supported(), "{}", l.name());
    }
}

/// Both builds in one process: each keeps its own symbols (Debian's is dlopened with RTLD_DEEPBIND).
#[cfg(feature = "isal")]
#[test]
fn debian_and_newest_side_by_side() {
    let deb = isal::debian().unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(deb.name(), isal::newest().name());
    isal_common::parity_is_byte_identical(deb);
    isal_common::parity_is_byte_identical(isal::newest());
}
