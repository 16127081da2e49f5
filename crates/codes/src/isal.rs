//! FFI to ISA-L (Debian `libisal-dev`), for the byte-identity cross-check and side-by-side benchmarks.
//! Only built with the `isal` feature.

use std::os::raw::{c_int, c_uchar};

extern "C" {
    fn gf_gen_cauchy1_matrix(a: *mut c_uchar, m: c_int, k: c_int);
    fn gf_gen_rs_matrix(a: *mut c_uchar, m: c_int, k: c_int);
    fn gf_mul(a: c_uchar, b: c_uchar) -> c_uchar;
    fn gf_invert_matrix(input: *mut c_uchar, output: *mut c_uchar, n: c_int) -> c_int;
    fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
    fn ec_encode_data(
        len: c_int,
        k: c_int,
        rows: c_int,
        gftbls: *mut c_uchar,
        data: *mut *mut c_uchar,
        coding: *mut *mut c_uchar,
    );
}

/// ISA-L's n x k Cauchy generator (`gf_gen_cauchy1_matrix`), row-major.
pub fn cauchy1_matrix(k: usize, m: usize) -> Vec<u8> {
    let n = k + m;
    let mut a = vec![0u8; n * k];
    // SAFETY: `a` holds n*k bytes, which is what the function writes for m = n rows.
    unsafe { gf_gen_cauchy1_matrix(a.as_mut_ptr(), n as c_int, k as c_int) };
    a
}

/// ISA-L's Vandermonde-style generator (`gf_gen_rs_matrix`), row-major (not MDS for every k, m).
pub fn rs_matrix(k: usize, m: usize) -> Vec<u8> {
    let n = k + m;
    let mut a = vec![0u8; n * k];
    // SAFETY: as above.
    unsafe { gf_gen_rs_matrix(a.as_mut_ptr(), n as c_int, k as c_int) };
    a
}

/// a * b in GF(2^8) with ISA-L's `gf_mul` (the same field, polynomial 0x11d).
pub fn mul(a: u8, b: u8) -> u8 {
    // SAFETY: a pure function of two bytes.
    unsafe { gf_mul(a, b) }
}

/// Invert a k x k matrix with ISA-L; `None` if singular.
pub fn invert(mat: &[u8], k: usize) -> Option<Vec<u8>> {
    assert_eq!(mat.len(), k * k);
    let mut input = mat.to_vec();
    let mut out = vec![0u8; k * k];
    // SAFETY: both buffers hold k*k bytes; ISA-L works in place on `input`.
    let r = unsafe { gf_invert_matrix(input.as_mut_ptr(), out.as_mut_ptr(), k as c_int) };
    (r == 0).then_some(out)
}

/// Expanded multiplication tables (`ec_init_tables`) for a rows x k coefficient matrix.
pub struct IsalTables {
    k: usize,
    rows: usize,
    tbls: Vec<u8>,
}

impl IsalTables {
    pub fn new(k: usize, rows: usize, coef: &[u8]) -> IsalTables {
        assert_eq!(coef.len(), k * rows);
        let mut a = coef.to_vec();
        let mut tbls = vec![0u8; 32 * k * rows];
        // SAFETY: ISA-L reads k*rows coefficients and writes 32 bytes per coefficient.
        unsafe { ec_init_tables(k as c_int, rows as c_int, a.as_mut_ptr(), tbls.as_mut_ptr()) };
        IsalTables { k, rows, tbls }
    }

    /// `outs[r] = sum_c coef[r][c] * srcs[c]` over `len` bytes with `ec_encode_data`.
    pub fn encode(&mut self, len: usize, srcs: &[&[u8]], outs: &mut [&mut [u8]]) {
        assert_eq!(srcs.len(), self.k);
        assert_eq!(outs.len(), self.rows);
        assert!(srcs.iter().all(|s| s.len() >= len) && outs.iter().all(|o| o.len() >= len));
        assert!(len <= c_int::MAX as usize);
        let mut sp: Vec<*mut u8> = srcs.iter().map(|s| s.as_ptr() as *mut u8).collect();
        let mut op: Vec<*mut u8> = outs.iter_mut().map(|o| o.as_mut_ptr()).collect();
        // SAFETY: pointer arrays have k and rows entries, each buffer valid for `len` bytes (asserted);
        // ISA-L only reads the sources (the C prototype lacks const) and writes the outputs.
        unsafe {
            ec_encode_data(
                len as c_int,
                self.k as c_int,
                self.rows as c_int,
                self.tbls.as_mut_ptr(),
                sp.as_mut_ptr(),
                op.as_mut_ptr(),
            )
        };
    }
}

extern "C" {
    fn xor_gen(vects: c_int, len: c_int, array: *mut *mut std::ffi::c_void) -> c_int;
}

/// `dst = XOR of srcs` with ISA-L's `xor_gen`. ISA-L requires every buffer to start on a 32-byte
/// boundary (its AVX kernel faults otherwise); this is checked, as are the lengths (panics, never UB:
/// this is a benchmark hook).
pub fn xor(srcs: &[&[u8]], dst: &mut [u8]) {
    let len = dst.len();
    assert!(srcs.len() >= 2 && srcs.iter().all(|s| s.len() >= len));
    assert!(
        srcs.iter().all(|s| s.as_ptr().align_offset(32) == 0) && dst.as_ptr().align_offset(32) == 0,
        "isal::xor: xor_gen needs 32-byte aligned buffers"
    );
    assert!(len <= c_int::MAX as usize);
    let mut ptrs: Vec<*mut std::ffi::c_void> = srcs.iter().map(|s| s.as_ptr() as *mut _).collect();
    ptrs.push(dst.as_mut_ptr() as *mut _);
    // SAFETY: vects pointers, the last the destination, each valid for len bytes; sources only read.
    unsafe { xor_gen(ptrs.len() as c_int, len as c_int, ptrs.as_mut_ptr()) };
}
