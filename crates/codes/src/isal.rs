//! FFI to ISA-L, the peer our codes are cross-checked and benchmarked against. Two builds can sit side by
//! side in one process:
//!
//! - [`debian()`] (feature `isal`): Debian's `libisal.so.2` (ISA-L 2.30, no GFNI kernels), opened with
//!   `dlopen(RTLD_LOCAL | RTLD_DEEPBIND)` at run time, so its symbols never meet the other build's.
//! - [`newest()`] (feature `isal-new`): ISA-L 2.31 as vendored by the `isal-sys` crate (commit 496255c,
//!   with the AVX2+GFNI and AVX-512+GFNI erasure-code kernels), built with nasm and linked statically.
//!
//! Both are the same [`Isal`] value: a table of C function pointers. [`Isal::tables`] picks ISA-L's own
//! run-time dispatch (`ec_encode_data`, which takes the best kernels the CPU has) or forces one kernel
//! level (`ec_encode_data_avx2`, `ec_encode_data_avx512_gfni`, ...), so a benchmark can compare our
//! kernels with ISA-L's at the same level. Only for tests and benchmarks: the functions check their
//! inputs with assertions (panics, never undefined behaviour), not with `CodeError`s.

use crate::kernels::Simd;
use std::ffi::c_void;
use std::os::raw::{c_int, c_uchar};

type GenMatrixFn = unsafe extern "C" fn(*mut c_uchar, c_int, c_int);
type GfMulFn = unsafe extern "C" fn(c_uchar, c_uchar) -> c_uchar;
type InvertFn = unsafe extern "C" fn(*mut c_uchar, *mut c_uchar, c_int) -> c_int;
type InitTablesFn = unsafe extern "C" fn(c_int, c_int, *mut c_uchar, *mut c_uchar);
type EncodeFn =
    unsafe extern "C" fn(c_int, c_int, c_int, *mut c_uchar, *mut *mut c_uchar, *mut *mut c_uchar);
type UpdateFn =
    unsafe extern "C" fn(c_int, c_int, c_int, c_int, *mut c_uchar, *mut c_uchar, *mut *mut c_uchar);
type XorGenFn = unsafe extern "C" fn(c_int, c_int, *mut *mut c_void) -> c_int;

/// One kernel level of ISA-L: its `ec_encode_data_*` and `ec_encode_data_update_*` and the table layout
/// they read (GFNI kernels read 8-byte affine matrices from `ec_init_tables_gfni`, the others 32-byte
/// nibble tables from `ec_init_tables_base`).
#[derive(Copy, Clone)]
struct LevelFns {
    encode: EncodeFn,
    update: UpdateFn,
    gfni_tables: bool,
}

/// One build of ISA-L: its name and version and the functions the cross-check and benchmark call.
pub struct Isal {
    name: &'static str,
    gen_cauchy1: GenMatrixFn,
    gen_rs: GenMatrixFn,
    gf_mul: GfMulFn,
    invert: InvertFn,
    /// The dispatching entry points (ISA-L picks the level at its first call).
    init_tables: InitTablesFn,
    encode: EncodeFn,
    update: UpdateFn,
    xor_gen: XorGenFn,
    init_tables_base: InitTablesFn,
    init_tables_gfni: Option<InitTablesFn>,
    /// Per level of ours that ISA-L has a kernel for: scalar ↔ base, ssse3 ↔ sse, avx2, avx512,
    /// avx2-gfni, avx512-gfni.
    levels: Vec<(Simd, LevelFns)>,
}

impl std::fmt::Debug for Isal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// ISA-L's suffix for a level of ours.
#[cfg(feature = "isal")]
fn suffix(level: Simd) -> &'static str {
    match level {
        Simd::Scalar => "base",
        Simd::Ssse3 => "sse",
        Simd::Avx2 => "avx2",
        Simd::Avx512 => "avx512",
        Simd::Avx2Gfni => "avx2_gfni",
        Simd::Avx512Gfni => "avx512_gfni",
    }
}

impl Isal {
    /// "ISA-L 2.30 (Debian libisal.so.2)" or "ISA-L 2.31 (isal-sys 0.5.3, static)".
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The levels this build has kernels for and this CPU can run, slowest first.
    pub fn levels(&self) -> Vec<Simd> {
        self.levels
            .iter()
            .map(|(l, _)| *l)
            .filter(|l| l.supported())
            .collect()
    }

    /// ISA-L's n x k Cauchy generator (`gf_gen_cauchy1_matrix`), row-major.
    pub fn cauchy1_matrix(&self, k: usize, m: usize) -> Vec<u8> {
        let n = k + m;
        assert!(k >= 1 && n <= 256);
        let mut a = vec![0u8; n * k];
        // SAFETY: `a` holds n*k bytes, which is what the function writes for n rows of k columns.
        unsafe { (self.gen_cauchy1)(a.as_mut_ptr(), n as c_int, k as c_int) };
        a
    }

    /// ISA-L's Vandermonde-style generator (`gf_gen_rs_matrix`), row-major (not MDS for every k, m).
    pub fn rs_matrix(&self, k: usize, m: usize) -> Vec<u8> {
        let n = k + m;
        assert!(k >= 1 && n <= 256);
        let mut a = vec![0u8; n * k];
        // SAFETY: as above.
        unsafe { (self.gen_rs)(a.as_mut_ptr(), n as c_int, k as c_int) };
        a
    }

    /// a * b in GF(2^8) with ISA-L's `gf_mul` (the same field, polynomial 0x11d).
    pub fn mul(&self, a: u8, b: u8) -> u8 {
        // SAFETY: a pure function of two bytes.
        unsafe { (self.gf_mul)(a, b) }
    }

    /// Invert a k x k matrix with `gf_invert_matrix`; `None` if singular.
    pub fn invert(&self, mat: &[u8], k: usize) -> Option<Vec<u8>> {
        assert_eq!(mat.len(), k * k);
        let mut input = mat.to_vec();
        let mut out = vec![0u8; k * k];
        // SAFETY: both buffers hold k*k bytes; ISA-L works in place on `input`.
        let r = unsafe { (self.invert)(input.as_mut_ptr(), out.as_mut_ptr(), k as c_int) };
        (r == 0).then_some(out)
    }

    /// The decode rows for an erasure pattern the way ISA-L's own `erasure_code_perf` builds them: invert
    /// the survivors' k x k block of `gen` (n x k, row-major), take its rows for lost data chunks and
    /// multiply the generator row by the inverse for lost parity chunks. `None` if singular.
    pub fn decode_rows(
        &self,
        gen: &[u8],
        k: usize,
        survivors: &[usize],
        erased: &[usize],
    ) -> Option<Vec<u8>> {
        assert_eq!(survivors.len(), k);
        let mut b = Vec::with_capacity(k * k);
        for &s in survivors {
            b.extend_from_slice(&gen[s * k..(s + 1) * k]);
        }
        let inv = self.invert(&b, k)?;
        let mut rows = Vec::with_capacity(erased.len() * k);
        for &e in erased {
            if e < k {
                rows.extend_from_slice(&inv[e * k..(e + 1) * k]);
            } else {
                for j in 0..k {
                    let mut s = 0u8;
                    for t in 0..k {
                        s ^= self.mul(gen[e * k + t], inv[t * k + j]);
                    }
                    rows.push(s);
                }
            }
        }
        Some(rows)
    }

    /// Expanded tables for a rows x k coefficient matrix (row-major): `level` `None` uses ISA-L's
    /// dispatching `ec_init_tables` + `ec_encode_data` (the best kernels this CPU has), `Some(l)` forces
    /// the level's kernels. Panics if the build has no kernel for `l` or the CPU cannot run it.
    pub fn tables(
        &self,
        level: Option<Simd>,
        k: usize,
        rows: usize,
        coef: &[u8],
    ) -> IsalTables<'_> {
        assert_eq!(coef.len(), k * rows, "coefficients must be rows x k");
        assert!(k >= 1 && rows >= 1 && k <= 255 && rows <= 255);
        let (init, encode, update) = match level {
            None => (self.init_tables, self.encode, self.update),
            Some(l) => {
                assert!(l.supported(), "this CPU cannot run {}", l.name());
                let f = self
                    .levels
                    .iter()
                    .find(|(x, _)| *x == l)
                    .unwrap_or_else(|| panic!("{} has no {} kernels", self.name, l.name()))
                    .1;
                let init = if f.gfni_tables {
                    self.init_tables_gfni
                        .expect("a GFNI level implies GFNI tables")
                } else {
                    self.init_tables_base
                };
                (init, f.encode, f.update)
            }
        };
        let mut a = coef.to_vec();
        // 32 bytes per coefficient is the most any layout uses (GFNI tables use 8).
        let mut tbls = vec![0u8; 32 * k * rows];
        // SAFETY: ISA-L reads k*rows coefficients and writes at most 32 bytes per coefficient.
        unsafe { init(k as c_int, rows as c_int, a.as_mut_ptr(), tbls.as_mut_ptr()) };
        IsalTables {
            k,
            rows,
            tbls,
            encode,
            update,
            _lib: std::marker::PhantomData,
        }
    }

    /// `dst = XOR of srcs` with ISA-L's `xor_gen`. ISA-L requires every buffer to start on a 32-byte
    /// boundary (its AVX kernel faults otherwise); this is checked, as are the lengths.
    pub fn xor(&self, srcs: &[&[u8]], dst: &mut [u8]) {
        let len = dst.len();
        assert!(srcs.len() >= 2 && srcs.iter().all(|s| s.len() >= len));
        assert!(
            srcs.iter().all(|s| s.as_ptr().align_offset(32) == 0)
                && dst.as_ptr().align_offset(32) == 0,
            "isal xor: xor_gen needs 32-byte aligned buffers"
        );
        assert!(len <= c_int::MAX as usize);
        let mut ptrs: Vec<*mut c_void> = srcs.iter().map(|s| s.as_ptr() as *mut _).collect();
        ptrs.push(dst.as_mut_ptr() as *mut _);
        // SAFETY: vects pointers, the last the destination, each valid for len bytes and aligned
        // (asserted); the sources are only read.
        unsafe { (self.xor_gen)(ptrs.len() as c_int, len as c_int, ptrs.as_mut_ptr()) };
    }
}

/// Expanded multiplication tables (`ec_init_tables`) for a rows x k coefficient matrix, bound to one
/// kernel level of one ISA-L build.
pub struct IsalTables<'a> {
    k: usize,
    rows: usize,
    tbls: Vec<u8>,
    encode: EncodeFn,
    update: UpdateFn,
    _lib: std::marker::PhantomData<&'a Isal>,
}

impl IsalTables<'_> {
    /// `outs[r] = sum_c coef[r][c] * srcs[c]` over `len` bytes (`ec_encode_data`).
    pub fn encode(&mut self, len: usize, srcs: &[&[u8]], outs: &mut [&mut [u8]]) {
        assert_eq!(srcs.len(), self.k);
        assert_eq!(outs.len(), self.rows);
        assert!(srcs.iter().all(|s| s.len() >= len) && outs.iter().all(|o| o.len() >= len));
        assert!(len <= c_int::MAX as usize);
        let mut sp: Vec<*mut u8> = srcs.iter().map(|s| s.as_ptr() as *mut u8).collect();
        let mut op: Vec<*mut u8> = outs.iter_mut().map(|o| o.as_mut_ptr()).collect();
        // SAFETY: pointer arrays have k and rows entries, each buffer valid for `len` bytes (asserted);
        // ISA-L only reads the sources (the C prototype lacks const) and writes the outputs; the tables
        // were made by the init function matching this kernel.
        unsafe {
            (self.encode)(
                len as c_int,
                self.k as c_int,
                self.rows as c_int,
                self.tbls.as_mut_ptr(),
                sp.as_mut_ptr(),
                op.as_mut_ptr(),
            )
        };
    }

    /// `outs[r] ^= coef[r][col] * src` over `len` bytes (`ec_encode_data_update`: one source chunk's
    /// contribution added to every output, as for a parity delta).
    pub fn update(&mut self, len: usize, col: usize, src: &[u8], outs: &mut [&mut [u8]]) {
        assert!(col < self.k);
        assert_eq!(outs.len(), self.rows);
        assert!(src.len() >= len && outs.iter().all(|o| o.len() >= len));
        assert!(len <= c_int::MAX as usize);
        let mut op: Vec<*mut u8> = outs.iter_mut().map(|o| o.as_mut_ptr()).collect();
        // SAFETY: as for encode; `col` < k selects a column of the tables.
        unsafe {
            (self.update)(
                len as c_int,
                self.k as c_int,
                self.rows as c_int,
                col as c_int,
                self.tbls.as_mut_ptr(),
                src.as_ptr() as *mut u8,
                op.as_mut_ptr(),
            )
        };
    }
}

/// Debian's libisal 2.30, opened once with `dlopen` (feature `isal`). An error names what is missing
/// (install `libisal2`, which `scripts/setup.sh` does through `libisal-dev`).
#[cfg(feature = "isal")]
pub fn debian() -> Result<&'static Isal, String> {
    use std::sync::OnceLock;
    static LIB: OnceLock<Result<Isal, String>> = OnceLock::new();
    LIB.get_or_init(dl::load).as_ref().map_err(Clone::clone)
}

#[cfg(feature = "isal")]
mod dl {
    use super::*;
    use std::ffi::{CStr, CString};
    use std::os::raw::c_char;

    extern "C" {
        fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
        fn dlerror() -> *const c_char;
    }
    const RTLD_NOW: c_int = 2;
    /// The library binds to its own symbols first, never to the statically linked newest ISA-L's.
    const RTLD_DEEPBIND: c_int = 8;
    const SONAME: &str = "libisal.so.2";

    fn last_error() -> String {
        // SAFETY: dlerror returns null or a NUL-terminated string valid until the next dl* call.
        unsafe {
            let e = dlerror();
            if e.is_null() {
                "unknown error".into()
            } else {
                CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        }
    }

    pub(super) fn load() -> Result<Isal, String> {
        let so = CString::new(SONAME).expect("no NUL");
        // SAFETY: a valid C string; the handle is kept for the life of the process (never dlclosed), so
        // every function pointer taken from it stays valid.
        let h = unsafe { dlopen(so.as_ptr(), RTLD_NOW | RTLD_DEEPBIND) };
        if h.is_null() {
            return Err(format!(
                "cannot load ISA-L ({SONAME}): {}; install libisal-dev",
                last_error()
            ));
        }
        let sym = |name: &str| -> Result<*mut c_void, String> {
            let c = CString::new(name).expect("no NUL");
            // SAFETY: a live handle and a valid C string.
            let p = unsafe { dlsym(h, c.as_ptr()) };
            if p.is_null() {
                Err(format!("{SONAME} has no symbol {name}: {}", last_error()))
            } else {
                Ok(p)
            }
        };
        // SAFETY (every transmute below): each symbol is the ISA-L function of that name, whose C
        // prototype in ISA-L's headers (erasure_code.h, raid.h) is exactly the fn type it becomes.
        macro_rules! f {
            ($name:expr, $ty:ty) => {
                unsafe { std::mem::transmute::<*mut c_void, $ty>(sym($name)?) }
            };
        }
        let mut levels = Vec::new();
        for l in [Simd::Scalar, Simd::Ssse3, Simd::Avx2, Simd::Avx512] {
            levels.push((
                l,
                LevelFns {
                    encode: f!(&format!("ec_encode_data_{}", suffix(l)), EncodeFn),
                    update: f!(&format!("ec_encode_data_update_{}", suffix(l)), UpdateFn),
                    gfni_tables: false,
                },
            ));
        }
        Ok(Isal {
            name: "ISA-L 2.30 (Debian libisal.so.2)",
            gen_cauchy1: f!("gf_gen_cauchy1_matrix", GenMatrixFn),
            gen_rs: f!("gf_gen_rs_matrix", GenMatrixFn),
            gf_mul: f!("gf_mul", GfMulFn),
            invert: f!("gf_invert_matrix", InvertFn),
            init_tables: f!("ec_init_tables", InitTablesFn),
            encode: f!("ec_encode_data", EncodeFn),
            update: f!("ec_encode_data_update", UpdateFn),
            xor_gen: f!("xor_gen", XorGenFn),
            // 2.30 has one table layout: its ec_init_tables is the base function.
            init_tables_base: f!("ec_init_tables", InitTablesFn),
            init_tables_gfni: None,
            levels,
        })
    }
}

/// The newest ISA-L (2.31 from the `isal-sys` crate, linked statically; feature `isal-new`).
#[cfg(feature = "isal-new")]
pub fn newest() -> &'static Isal {
    use std::sync::OnceLock;
    static LIB: OnceLock<Isal> = OnceLock::new();
    LIB.get_or_init(new::build)
}

#[cfg(feature = "isal-new")]
mod new {
    use super::*;
    // Links isal-sys's static libisal.a (its Rust bindings cover only igzip; the erasure-code
    // functions are declared here).
    use isal_sys as _;

    extern "C" {
        fn gf_gen_cauchy1_matrix(a: *mut c_uchar, m: c_int, k: c_int);
        fn gf_gen_rs_matrix(a: *mut c_uchar, m: c_int, k: c_int);
        fn gf_mul(a: c_uchar, b: c_uchar) -> c_uchar;
        fn gf_invert_matrix(input: *mut c_uchar, output: *mut c_uchar, n: c_int) -> c_int;
        fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, t: *mut c_uchar);
        fn ec_init_tables_base(k: c_int, rows: c_int, a: *mut c_uchar, t: *mut c_uchar);
        fn ec_init_tables_gfni(k: c_int, rows: c_int, a: *mut c_uchar, t: *mut c_uchar);
        fn xor_gen(vects: c_int, len: c_int, array: *mut *mut c_void) -> c_int;
    }
    /// Declares `ec_encode_data_<level>` and `ec_encode_data_update_<level>` for each level.
    macro_rules! level_fns {
        ($($enc:ident, $upd:ident;)*) => {
            extern "C" {
                $(
                    fn $enc(len: c_int, k: c_int, rows: c_int, t: *mut c_uchar,
                            data: *mut *mut c_uchar, coding: *mut *mut c_uchar);
                    fn $upd(len: c_int, k: c_int, rows: c_int, vec_i: c_int, t: *mut c_uchar,
                            data: *mut c_uchar, coding: *mut *mut c_uchar);
                )*
            }
        };
    }
    level_fns! {
        ec_encode_data, ec_encode_data_update;
        ec_encode_data_base, ec_encode_data_update_base;
        ec_encode_data_sse, ec_encode_data_update_sse;
        ec_encode_data_avx2, ec_encode_data_update_avx2;
        ec_encode_data_avx512, ec_encode_data_update_avx512;
        ec_encode_data_avx2_gfni, ec_encode_data_update_avx2_gfni;
        ec_encode_data_avx512_gfni, ec_encode_data_update_avx512_gfni;
    }

    pub(super) fn build() -> Isal {
        let lv = |l: Simd, encode: EncodeFn, update: UpdateFn| {
            (
                l,
                LevelFns {
                    encode,
                    update,
                    gfni_tables: matches!(l, Simd::Avx2Gfni | Simd::Avx512Gfni),
                },
            )
        };
        Isal {
            name: "ISA-L 2.31 (isal-sys 0.5.3+496255c, static)",
            gen_cauchy1: gf_gen_cauchy1_matrix,
            gen_rs: gf_gen_rs_matrix,
            gf_mul,
            invert: gf_invert_matrix,
            init_tables: ec_init_tables,
            encode: ec_encode_data,
            update: ec_encode_data_update,
            xor_gen,
            init_tables_base: ec_init_tables_base,
            init_tables_gfni: Some(ec_init_tables_gfni),
            levels: vec![
                lv(
                    Simd::Scalar,
                    ec_encode_data_base,
                    ec_encode_data_update_base,
                ),
                lv(Simd::Ssse3, ec_encode_data_sse, ec_encode_data_update_sse),
                lv(Simd::Avx2, ec_encode_data_avx2, ec_encode_data_update_avx2),
                lv(
                    Simd::Avx512,
                    ec_encode_data_avx512,
                    ec_encode_data_update_avx512,
                ),
                lv(
                    Simd::Avx2Gfni,
                    ec_encode_data_avx2_gfni,
                    ec_encode_data_update_avx2_gfni,
                ),
                lv(
                    Simd::Avx512Gfni,
                    ec_encode_data_avx512_gfni,
                    ec_encode_data_update_avx512_gfni,
                ),
            ],
        }
    }
}
