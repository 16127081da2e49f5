//! Region kernels over GF(2^8): multiply, multiply-accumulate, the multi-output dot product that reads
//! each source byte once while producing several outputs, multi-source XOR and the RAID-6 P+Q pass.
//!
//! Every kernel exists in a scalar form and in SIMD forms chosen at run time:
//!
//! | level        | width | multiply by a constant                                   |
//! |--------------|-------|----------------------------------------------------------|
//! | `avx512-gfni`| 64 B  | one `vgf2p8affineqb` with the constant's 8x8 bit matrix |
//! | `avx2-gfni`  | 32 B  | the same, on 256-bit registers                           |
//! | `avx512`     | 64 B  | split nibbles, two `vpshufb` table look-ups, XOR         |
//! | `avx2`       | 32 B  | the same, on 256-bit registers                           |
//! | `ssse3`      | 16 B  | the same, on 128-bit registers                           |
//! | `scalar`     | 1 B   | 256-entry product table per constant                     |
//!
//! The best level the CPU has is the default; [`Simd::set_active`] (`ecstack --simd-level <level>`)
//! pins a lower one for the whole process (tests and benchmarks), and `CodeOptions::simd` one code.
//! SIMD kernels process whole vectors; the scalar kernel finishes the tail.

use crate::gf;
use std::sync::OnceLock;

/// A kernel implementation level, ordered from slowest to fastest.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Simd {
    Scalar,
    Ssse3,
    Avx2,
    Avx512,
    Avx2Gfni,
    Avx512Gfni,
}

impl Simd {
    pub const ALL: [Simd; 6] = [
        Simd::Scalar,
        Simd::Ssse3,
        Simd::Avx2,
        Simd::Avx512,
        Simd::Avx2Gfni,
        Simd::Avx512Gfni,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Simd::Scalar => "scalar",
            Simd::Ssse3 => "ssse3",
            Simd::Avx2 => "avx2",
            Simd::Avx512 => "avx512",
            Simd::Avx2Gfni => "avx2-gfni",
            Simd::Avx512Gfni => "avx512-gfni",
        }
    }

    pub fn parse(s: &str) -> Option<Simd> {
        Simd::ALL.into_iter().find(|l| l.name() == s)
    }

    /// Whether this CPU can run the level.
    pub fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                Simd::Scalar => true,
                Simd::Ssse3 => has!("ssse3"),
                Simd::Avx2 => has!("avx2"),
                Simd::Avx512 => has!("avx512f") && has!("avx512bw"),
                Simd::Avx2Gfni => has!("avx2") && has!("gfni"),
                Simd::Avx512Gfni => has!("avx512f") && has!("avx512bw") && has!("gfni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Simd::Scalar
        }
    }

    /// The level the kernels run at: the best this CPU has, or the one [`Simd::set_active`] chose.
    /// Fixed by the first call (or the first code built).
    pub fn active() -> Simd {
        active()
    }

    /// Run this process's kernels at `level` (benchmarks, and tests that pin each level): call it
    /// before any code is built or [`Simd::active`] is asked. Errors when this CPU lacks the
    /// level, or the level was already fixed at another one (setting the same one again is fine).
    pub fn set_active(level: Simd) -> Result<(), crate::CodeError> {
        let refuse = |why: String| crate::CodeError::SimdLevel {
            level: level.name(),
            why,
        };
        if !level.supported() {
            return Err(refuse("this CPU does not support it".into()));
        }
        match *ACTIVE.get_or_init(|| level) {
            l if l == level => Ok(()),
            l => Err(refuse(format!(
                "the kernels already run at {} (set the level before any code is built)",
                l.name()
            ))),
        }
    }

    fn uses_affine(self) -> bool {
        matches!(self, Simd::Avx2Gfni | Simd::Avx512Gfni)
    }
    fn uses_nibbles(self) -> bool {
        matches!(self, Simd::Ssse3 | Simd::Avx2 | Simd::Avx512)
    }
}

/// Every level this CPU supports.
#[cfg(test)]
pub fn supported_levels() -> Vec<Simd> {
    Simd::ALL.into_iter().filter(|l| l.supported()).collect()
}

/// The best level the CPU supports.
pub fn detected() -> Simd {
    *Simd::ALL
        .iter()
        .rev()
        .find(|l| l.supported())
        .unwrap_or(&Simd::Scalar)
}

/// The level kernels use by default ([`Simd::active`]).
static ACTIVE: OnceLock<Simd> = OnceLock::new();

/// The level kernels use by default: the detected one, unless [`Simd::set_active`] chose another.
pub fn active() -> Simd {
    *ACTIVE.get_or_init(detected)
}

const fn build_mul_table() -> [[u8; 256]; 256] {
    let exp_log = gf::build_exp_log();
    let mut t = [[0u8; 256]; 256];
    let mut a = 1;
    while a < 256 {
        let mut b = 1;
        while b < 256 {
            t[a][b] = exp_log.0[exp_log.1[a] as usize + exp_log.1[b] as usize];
            b += 1;
        }
        a += 1;
    }
    t
}

/// `MUL_TABLE[c][x] = c * x`, 64 KiB, built at compile time: the scalar kernel's look-up table.
pub static MUL_TABLE: [[u8; 256]; 256] = build_mul_table();

/// A `rows x cols` coefficient matrix with the per-level tables the kernels need, built once and reused
/// for every stripe (the analogue of ISA-L's `ec_init_tables`).
#[derive(Clone, Debug)]
pub struct Tables {
    rows: usize,
    cols: usize,
    level: Simd,
    coef: Vec<u8>,
    /// Per coefficient: low-nibble products twice (32 B), then high-nibble products twice (32 B).
    nib: Vec<[u8; 64]>,
    /// Per coefficient: the GF2P8AFFINEQB bit matrix.
    aff: Vec<u64>,
}

impl Tables {
    /// Tables for the active level. `coef` is row-major, `rows * cols` long.
    pub fn new(rows: usize, cols: usize, coef: &[u8]) -> Tables {
        Tables::for_level(active(), rows, cols, coef)
    }

    /// Tables for a given level (which must be supported by this CPU to be used).
    pub fn for_level(level: Simd, rows: usize, cols: usize, coef: &[u8]) -> Tables {
        assert_eq!(
            coef.len(),
            rows * cols,
            "coefficient matrix must be rows x cols"
        );
        let nib = if level.uses_nibbles() {
            coef.iter()
                .map(|&c| {
                    // gf::nibble_tables(c), from the product table (decode plans made on every call
                    // expand one entry per coefficient).
                    let p = &MUL_TABLE[c as usize];
                    let mut w = [0u8; 64];
                    for i in 0..16 {
                        w[i] = p[i];
                        w[16 + i] = p[i];
                        w[32 + i] = p[i << 4];
                        w[48 + i] = p[i << 4];
                    }
                    w
                })
                .collect()
        } else {
            Vec::new()
        };
        let aff = if level.uses_affine() {
            coef.iter().map(|&c| gf::affine_matrix(c)).collect()
        } else {
            Vec::new()
        };
        Tables {
            rows,
            cols,
            level,
            coef: coef.to_vec(),
            nib,
            aff,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn coef(&self, r: usize, c: usize) -> u8 {
        self.coef[r * self.cols + c]
    }
    /// Heap bytes held (for the decode cache's byte limit).
    pub fn bytes(&self) -> usize {
        self.coef.len() + self.nib.len() * 64 + self.aff.len() * 8
    }
}

/// `dsts[r] (^)= sum_c coef[r][c] * srcs[c]` over the first `len` bytes of every buffer.
/// With `accumulate` the products are XORed into the outputs, otherwise they overwrite them.
///
/// Panics if `srcs.len() != cols`, `dsts.len() != rows`, or any buffer is shorter than `len`.
pub fn dot_prod(t: &Tables, srcs: &[&[u8]], dsts: &mut [&mut [u8]], len: usize, accumulate: bool) {
    assert_eq!(srcs.len(), t.cols, "dot_prod: one source per column");
    run_dot(t, srcs, false, dsts, len, accumulate);
}

/// Fused delta kernel: like [`dot_prod`] but source `c` is `olds[c] ^ news[c]`, computed in registers.
/// `t` has one column per (old, new) pair. Used for parity deltas (CodFS §2.1.1).
pub fn dot_prod_delta(
    t: &Tables,
    olds: &[&[u8]],
    news: &[&[u8]],
    dsts: &mut [&mut [u8]],
    len: usize,
    accumulate: bool,
) {
    assert_eq!(
        olds.len(),
        t.cols,
        "dot_prod_delta: one old source per column"
    );
    assert_eq!(
        news.len(),
        t.cols,
        "dot_prod_delta: one new source per column"
    );
    let mut pairs: Vec<&[u8]> = Vec::with_capacity(2 * t.cols);
    for (o, n) in olds.iter().zip(news) {
        pairs.push(o);
        pairs.push(n);
    }
    run_dot(t, &pairs, true, dsts, len, accumulate);
}

fn run_dot(t: &Tables, srcs: &[&[u8]], pairs: bool, dsts: &mut [&mut [u8]], len: usize, acc: bool) {
    assert_eq!(dsts.len(), t.rows, "dot_prod: one destination per row");
    assert!(
        srcs.iter().all(|s| s.len() >= len),
        "dot_prod: a source is shorter than len"
    );
    assert!(
        dsts.iter().all(|d| d.len() >= len),
        "dot_prod: a destination is shorter than len"
    );
    with_ptrs(srcs.len(), dsts.len(), |sp, dp| {
        for (p, s) in sp.iter_mut().zip(srcs) {
            *p = s.as_ptr();
        }
        for (p, d) in dp.iter_mut().zip(dsts.iter_mut()) {
            *p = d.as_mut_ptr();
        }
        // SAFETY: every pointer is valid for `len` bytes (checked above); sources and destinations
        // come from distinct borrows (`&[u8]` vs `&mut [u8]`), so they cannot alias.
        unsafe { dot_raw(t, sp, pairs, dp, len, acc) }
    });
}

/// [`dot_prod`] over buffers picked by index, as a decode picks survivors and erased shards out
/// of one slice: `shards[dsts[r]] = sum_c coef[r][c] * shards[srcs[c]]` over `len` bytes.
///
/// Panics if there are more than 256 buffers, an index is out of range, a destination repeats or
/// is also a source, or a picked buffer is shorter than `len`.
pub(crate) fn dot_prod_indexed(
    t: &Tables,
    shards: &mut [&mut [u8]],
    srcs: &[usize],
    dsts: &[usize],
    len: usize,
) {
    assert!(
        srcs.len() == t.cols && dsts.len() == t.rows,
        "dot_prod_indexed: shape"
    );
    assert!(shards.len() <= 256, "dot_prod_indexed: at most 256 buffers");
    let picked = |i: usize| {
        assert!(
            i < shards.len() && shards[i].len() >= len,
            "dot_prod_indexed: buffer {i}"
        );
        (i / 64, 1u64 << (i % 64))
    };
    let mut written = [0u64; 4];
    for &d in dsts {
        let (w, b) = picked(d);
        assert!(
            written[w] & b == 0,
            "dot_prod_indexed: destination {d} repeats"
        );
        written[w] |= b;
    }
    for &s in srcs {
        let (w, b) = picked(s);
        assert!(
            written[w] & b == 0,
            "dot_prod_indexed: source {s} is a destination"
        );
    }
    with_ptrs(srcs.len(), dsts.len(), |sp, dp| {
        for (p, &s) in sp.iter_mut().zip(srcs) {
            *p = shards[s].as_ptr();
        }
        for (p, &d) in dp.iter_mut().zip(dsts) {
            *p = shards[d].as_mut_ptr();
        }
        // SAFETY: every picked buffer is at least `len` bytes (checked above); the destinations
        // are distinct buffers of a unique borrow, none of them a source (checked above), so no
        // destination overlaps another or any source.
        unsafe { dot_raw(t, sp, false, dp, len, false) }
    })
}

/// Run `f` with zeroed pointer arrays of `n_src` and `n_dst` entries, on the stack when small: the
/// kernels take pointer arrays, and a heap allocation per call shows at 4 KiB chunks.
pub(crate) fn with_ptrs<R>(
    n_src: usize,
    n_dst: usize,
    f: impl FnOnce(&mut [*const u8], &mut [*mut u8]) -> R,
) -> R {
    const SMALL: usize = 32;
    if n_src <= SMALL && n_dst <= SMALL {
        let mut sp = [std::ptr::null::<u8>(); SMALL];
        let mut dp = [std::ptr::null_mut::<u8>(); SMALL];
        f(&mut sp[..n_src], &mut dp[..n_dst])
    } else {
        let mut sp = vec![std::ptr::null::<u8>(); n_src];
        let mut dp = vec![std::ptr::null_mut::<u8>(); n_dst];
        f(&mut sp, &mut dp)
    }
}

/// SIMD over whole vectors, then the scalar tail: `dp[r] = sum_c coef[r][c] * sp[c]` over `len`
/// bytes.
///
/// # Safety
/// `sp` has `t.cols()` entries (two per column when `pairs`) and `dp` `t.rows()`; every source is
/// valid for reads and every destination for writes of `len` bytes; no destination overlaps another
/// or any source.
unsafe fn dot_raw(
    t: &Tables,
    sp: &[*const u8],
    pairs: bool,
    dp: &[*mut u8],
    len: usize,
    acc: bool,
) {
    // The level was checked supported when it became `active()` or by the caller of
    // `Tables::for_level` (asserted in simd_dot).
    let done = simd_dot(t, sp, pairs, dp, len, acc);
    scalar::dot(t, sp, pairs, dp, done, len, acc);
}

#[allow(unused_variables)]
unsafe fn simd_dot(
    t: &Tables,
    sp: &[*const u8],
    pairs: bool,
    dp: &[*mut u8],
    len: usize,
    acc: bool,
) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        assert!(
            t.level.supported(),
            "kernel level {} not supported by this CPU",
            t.level.name()
        );
        match t.level {
            Simd::Scalar => 0,
            Simd::Ssse3 => ssse3::dot(t, sp, pairs, dp, len, acc),
            Simd::Avx2 => avx2::dot(t, sp, pairs, dp, len, acc),
            Simd::Avx512 => avx512::dot(t, sp, pairs, dp, len, acc),
            Simd::Avx2Gfni => avx2gfni::dot(t, sp, pairs, dp, len, acc),
            Simd::Avx512Gfni => avx512gfni::dot(t, sp, pairs, dp, len, acc),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// `dst (^)= XOR of srcs` over `dst.len()` bytes; every source must be at least that long.
pub fn xor_multi(dst: &mut [u8], srcs: &[&[u8]], accumulate: bool) {
    xor_multi_level(active(), dst, srcs, accumulate)
}

/// [`xor_multi`] at a given level.
pub fn xor_multi_level(level: Simd, dst: &mut [u8], srcs: &[&[u8]], accumulate: bool) {
    let len = dst.len();
    assert!(
        srcs.iter().all(|s| s.len() >= len),
        "xor_multi: a source is shorter than the destination"
    );
    if srcs.is_empty() {
        if !accumulate {
            dst.fill(0);
        }
        return;
    }
    let sp: Vec<*const u8> = srcs.iter().map(|s| s.as_ptr()).collect();
    // SAFETY: pointers valid for `len` bytes (checked above); dst is a unique borrow so it does not alias
    // the shared sources.
    unsafe { xor_multi_raw(level, dst.as_mut_ptr(), &sp, len, accumulate) }
}

/// `dst = XOR of src[at..at + dst.len()]` for every `at` in `offsets`: the cache-blocked LT
/// schedule's step, which XORs small strips of many blocks of one buffer. The addresses go into
/// `scratch`, kept by the caller from one call to the next, so no call allocates; the ranges are
/// checked together, branch-free (strips are small, sources many).
///
/// Panics if a range is outside `src`.
pub fn xor_gather(
    level: Simd,
    dst: &mut [u8],
    src: &[u8],
    offsets: impl IntoIterator<Item = usize>,
    scratch: &mut Vec<*const u8>,
) {
    let len = dst.len();
    let last = src
        .len()
        .checked_sub(len)
        .expect("xor_gather: dst longer than src");
    scratch.clear();
    // Checked once for all ranges (branch-free in the loop: strips are small, sources many).
    let mut outside = false;
    for at in offsets {
        outside |= at > last;
        scratch.push(src.as_ptr().wrapping_add(at));
    }
    assert!(!outside, "xor_gather: a range outside the source");
    // SAFETY: every address starts a range of `len` bytes inside `src` (checked above), borrowed
    // for this call; `dst` is a unique borrow, so it overlaps none of them. The addresses left in
    // `scratch` are never read before the next call clears them.
    unsafe { xor_multi_raw(level, dst.as_mut_ptr(), scratch, len, false) }
}

/// In `buf`, seen as blocks of `block` bytes: bytes `start..start + len` of block `dst` = `first` ^
/// XOR of the same bytes of every block in `srcs` other than `dst` (listing `dst` among them is
/// allowed: it is skipped). This is the LT decoder's step, which XORs a coded block's strip and the
/// strips of already decoded blocks into the strip of the block it yields. The addresses go into
/// `scratch`, kept by the caller from one call to the next, so no call allocates. The strip lies
/// inside one block, so strips of distinct blocks never overlap; the block numbers are checked
/// together, branch-free (strips are small, sources many).
///
/// Panics if the strip does not fit in a block, `first` is shorter than `len`, or a block number
/// is past the end of `buf`.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn xor_block_strips(
    level: Simd,
    buf: &mut [u8],
    block: usize,
    (start, len): (usize, usize),
    dst: usize,
    srcs: &[u32],
    first: &[u8],
    scratch: &mut Vec<*const u8>,
) {
    assert!(
        start <= block && len <= block - start && first.len() >= len,
        "xor_block_strips: the strip is outside a block"
    );
    // One pointer for the whole buffer: every address below derives from it.
    let base = buf.as_mut_ptr();
    scratch.clear();
    scratch.push(first.as_ptr());
    // The highest block number used, checked once after the loop (no division per call).
    let mut highest = dst;
    for &o in srcs {
        let o = o as usize;
        highest = highest.max(o);
        if o != dst {
            scratch.push(base.wrapping_add(o * block + start) as *const u8);
        }
    }
    let end = (highest + 1).checked_mul(block);
    assert!(
        end.is_some_and(|e| e <= buf.len()),
        "xor_block_strips: a block past the end of the buffer"
    );
    // SAFETY: every block used ends inside `buf` (checked above) and the strip lies inside a
    // block, so the destination and every source address start ranges of `len` bytes inside
    // `buf`, which is uniquely borrowed for this call. Sources are other blocks than `dst`, so
    // none overlaps the destination; `first` is a shared borrow, so it cannot overlap `buf`. The
    // addresses left in `scratch` are never read before the next call clears them.
    unsafe { xor_multi_raw(level, base.add(dst * block + start), scratch, len, false) }
}

/// [`xor_multi`] over raw pointers, for the checked entries above ([`xor_gather`],
/// [`xor_block_strips`]) that XOR many small strips of one buffer, where building a slice per
/// source costs too much per strip.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes, every source valid for reads of `len` bytes, and no
/// source may overlap `dst`.
pub unsafe fn xor_multi_raw(
    level: Simd,
    d: *mut u8,
    sp: &[*const u8],
    len: usize,
    accumulate: bool,
) {
    if sp.is_empty() {
        if !accumulate {
            std::ptr::write_bytes(d, 0, len);
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    let done = {
        assert!(level.supported());
        match level {
            Simd::Scalar => 0,
            Simd::Ssse3 => ssse3::xor_multi(d, sp, len, accumulate),
            Simd::Avx2 => avx2::xor_multi(d, sp, len, accumulate),
            Simd::Avx512 => avx512::xor_multi(d, sp, len, accumulate),
            Simd::Avx2Gfni => avx2gfni::xor_multi(d, sp, len, accumulate),
            Simd::Avx512Gfni => avx512gfni::xor_multi(d, sp, len, accumulate),
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    scalar::xor_multi(d, sp, done, len, accumulate);
}

/// `dst ^= src` over `dst.len()` bytes.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    xor_multi(dst, &[src], true);
}

/// RAID-6 in one pass at a given level: `p = XOR of data`, `q = sum 2^j * data[j]` (Horner, one
/// multiply-by-2 per source).
pub fn raid6_pq_level(level: Simd, data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    let len = p.len();
    assert_eq!(q.len(), len, "raid6: P and Q must be the same length");
    assert!(
        !data.is_empty() && data.iter().all(|s| s.len() >= len),
        "raid6: a data chunk is too short"
    );
    let sp: Vec<*const u8> = data.iter().map(|s| s.as_ptr()).collect();
    // SAFETY: as for xor_multi; p and q are distinct unique borrows.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        let done = {
            assert!(level.supported());
            match level {
                Simd::Scalar => 0,
                Simd::Ssse3 => ssse3::raid6_pq(&sp, p.as_mut_ptr(), q.as_mut_ptr(), len),
                Simd::Avx2 => avx2::raid6_pq(&sp, p.as_mut_ptr(), q.as_mut_ptr(), len),
                Simd::Avx512 => avx512::raid6_pq(&sp, p.as_mut_ptr(), q.as_mut_ptr(), len),
                Simd::Avx2Gfni => avx2gfni::raid6_pq(&sp, p.as_mut_ptr(), q.as_mut_ptr(), len),
                Simd::Avx512Gfni => avx512gfni::raid6_pq(&sp, p.as_mut_ptr(), q.as_mut_ptr(), len),
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        let done = 0;
        scalar::raid6_pq(&sp, p.as_mut_ptr(), q.as_mut_ptr(), done, len);
    }
}

mod scalar {
    use super::{Tables, MUL_TABLE};

    /// Bytes [from, len) of the dot product.
    pub unsafe fn dot(
        t: &Tables,
        sp: &[*const u8],
        pairs: bool,
        dp: &[*mut u8],
        from: usize,
        len: usize,
        acc: bool,
    ) {
        if from >= len {
            return;
        }
        let n = len - from;
        for (r, &d) in dp.iter().enumerate() {
            // SAFETY: caller guarantees d is valid for len bytes and not aliased.
            let dst = std::slice::from_raw_parts_mut(d.add(from), n);
            if !acc {
                dst.fill(0);
            }
            for c in 0..t.cols {
                let row = &MUL_TABLE[t.coef(r, c) as usize];
                if pairs {
                    let o = std::slice::from_raw_parts(sp[2 * c].add(from), n);
                    let nw = std::slice::from_raw_parts(sp[2 * c + 1].add(from), n);
                    for i in 0..n {
                        dst[i] ^= row[(o[i] ^ nw[i]) as usize];
                    }
                } else {
                    let s = std::slice::from_raw_parts(sp[c].add(from), n);
                    for (x, &b) in dst.iter_mut().zip(s) {
                        *x ^= row[b as usize];
                    }
                }
            }
        }
    }

    pub unsafe fn xor_multi(d: *mut u8, sp: &[*const u8], from: usize, len: usize, acc: bool) {
        if from >= len {
            return;
        }
        let n = len - from;
        let dst = std::slice::from_raw_parts_mut(d.add(from), n);
        for (i, &s) in sp.iter().enumerate() {
            let s = std::slice::from_raw_parts(s.add(from), n);
            if i == 0 && !acc {
                dst.copy_from_slice(s);
            } else {
                for (x, &b) in dst.iter_mut().zip(s) {
                    *x ^= b;
                }
            }
        }
    }

    pub unsafe fn raid6_pq(sp: &[*const u8], p: *mut u8, q: *mut u8, from: usize, len: usize) {
        for i in from..len {
            let mut pv = 0u8;
            let mut qv = 0u8;
            for &s in sp.iter().rev() {
                let x = *s.add(i);
                pv ^= x;
                qv = MUL_TABLE[2][qv as usize] ^ x;
            }
            *p.add(i) = pv;
            *q.add(i) = qv;
        }
    }
}

/// The body shared by every SIMD level. Each level's module defines `W` (bytes per vector), the vector
/// type `V`, the prepared-source type `P`, the loaded-coefficient type `T` and `#[inline]`
/// target-feature helpers `load`, `store`, `xor`, `zero`, `prep` (work done once per source vector,
/// e.g. nibble split), `tbl` (load one coefficient's table or bit matrix), `apply` (the product of a
/// prepared source and a loaded coefficient) and `mul2`; the macro then expands the same kernels over
/// them. `$maxg` is the most rows one pass keeps in registers, `$maxg2` the most for which two vectors
/// per step still fit, `$maxg3` the most that take three (ISA-L's AVX2+GFNI kernels do 96 bytes per
/// step for one or two outputs; 0 = never).
#[cfg(target_arch = "x86_64")]
macro_rules! simd_body {
    ($feat:literal, $maxg:literal, $maxg2:literal, $maxg3:literal) => {
        /// Rows [r0, r0 + G) of the dot product over whole vectors of [0, n): U vectors per step (the
        /// coefficient tables are loaded once per step and used for all U), then single vectors.
        #[target_feature(enable = $feat)]
        unsafe fn group<const G: usize, const U: usize, const PAIRS: bool>(
            t: &Tables,
            r0: usize,
            sp: &[*const u8],
            dp: &[*mut u8],
            n: usize,
            acc: bool,
            rev: bool,
        ) {
            let mut pos = 0;
            if n >= super::PREFETCH_MIN_BYTES {
                while pos + U * W <= n {
                    step::<G, U, PAIRS, true>(t, r0, sp, dp, pos, acc, rev);
                    pos += U * W;
                }
            }
            while pos + U * W <= n {
                step::<G, U, PAIRS, false>(t, r0, sp, dp, pos, acc, rev);
                pos += U * W;
            }
            while pos + W <= n {
                step::<G, 1, PAIRS, false>(t, r0, sp, dp, pos, acc, rev);
                pos += W;
            }
        }

        /// U vectors at `pos` of rows [r0, r0 + G).
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn step<const G: usize, const U: usize, const PAIRS: bool, const PF: bool>(
            t: &Tables,
            r0: usize,
            sp: &[*const u8],
            dp: &[*mut u8],
            pos: usize,
            acc: bool,
            rev: bool,
        ) {
            let cols = t.cols();
            let mut a: [[V; G]; U] = [[zero(); G]; U];
            if acc {
                for u in 0..U {
                    for g in 0..G {
                        a[u][g] = load((*dp.get_unchecked(r0 + g)).add(pos + u * W));
                    }
                }
            }
            // Sources in the order `dot` chose (see `away_from_outputs`): c walks from `c` by `dc`.
            let (mut c, dc) = if rev { (cols - 1, usize::MAX) } else { (0, 1) };
            for _ in 0..cols {
                let mut p: [P; U] = [prep(zero()); U];
                if PF {
                    // One prefetch per cache line of this step, PREFETCH_BYTES ahead. A prefetch
                    // never faults, and `wrapping_add` keeps the address arithmetic defined past
                    // the end of the buffer.
                    let s = *sp.get_unchecked(if PAIRS { 2 * c } else { c });
                    let mut off = 0;
                    while off < U * W {
                        _mm_prefetch::<_MM_HINT_T0>(
                            s.wrapping_add(pos + off + super::PREFETCH_BYTES) as *const i8,
                        );
                        off += 64;
                    }
                }
                for u in 0..U {
                    let x = if PAIRS {
                        xor(
                            load(sp.get_unchecked(2 * c).add(pos + u * W)),
                            load(sp.get_unchecked(2 * c + 1).add(pos + u * W)),
                        )
                    } else {
                        load(sp.get_unchecked(c).add(pos + u * W))
                    };
                    p[u] = prep(x);
                }
                for g in 0..G {
                    let tb = tbl(t, (r0 + g) * cols + c);
                    for u in 0..U {
                        a[u][g] = xor(a[u][g], apply(&p[u], &tb));
                    }
                }
                c = c.wrapping_add(dc);
            }
            for u in 0..U {
                for g in 0..G {
                    store((*dp.get_unchecked(r0 + g)).add(pos + u * W), a[u][g]);
                }
            }
        }

        /// [`group`] for exactly K columns, with the source pointers (in walk order) and the G x K
        /// coefficient tables taken out of the loop: the column loop unrolls, so each source has its
        /// own load instruction at a fixed stride of one step, and the tables stay in registers (or in
        /// the stack frame) instead of being reloaded from `t` in every step. Never inlined: each
        /// shape is its own function, so where its loop lands does not move with the rest of `dot`
        /// (inlined, the many shapes made `dot` ~270 KiB and (4,2,4K) avx2-gfni decode drifted from
        /// 1.06x to 0.77x ISA-L between builds that did not change its code).
        #[inline(never)]
        #[target_feature(enable = $feat)]
        unsafe fn group_k<const G: usize, const U: usize, const K: usize, const PAIRS: bool>(
            t: &Tables,
            r0: usize,
            sp: &[*const u8],
            dp: &[*mut u8],
            n: usize,
            acc: bool,
            rev: bool,
        ) {
            // Column i's source, or its (old, new) pair.
            let mut s = [[std::ptr::null::<u8>(); 2]; K];
            let mut tb: [[T; K]; G] = [[tbl(t, 0); K]; G];
            for i in 0..K {
                let c = if rev { K - 1 - i } else { i };
                s[i] = if PAIRS {
                    [*sp.get_unchecked(2 * c), *sp.get_unchecked(2 * c + 1)]
                } else {
                    [*sp.get_unchecked(c); 2]
                };
                for g in 0..G {
                    tb[g][i] = tbl(t, (r0 + g) * K + c);
                }
            }
            let mut d = [std::ptr::null_mut::<u8>(); G];
            for g in 0..G {
                d[g] = *dp.get_unchecked(r0 + g);
            }
            let mut pos = 0;
            if n >= super::PREFETCH_MIN_BYTES {
                while pos + U * W <= n {
                    step_k::<G, U, K, PAIRS, true>(&s, &tb, &d, pos, acc);
                    pos += U * W;
                }
            }
            while pos + U * W <= n {
                step_k::<G, U, K, PAIRS, false>(&s, &tb, &d, pos, acc);
                pos += U * W;
            }
            while pos + W <= n {
                step_k::<G, 1, K, PAIRS, false>(&s, &tb, &d, pos, acc);
                pos += W;
            }
        }

        /// U vectors at `pos` of G rows over K sources, tables and pointers given.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn step_k<
            const G: usize,
            const U: usize,
            const K: usize,
            const PAIRS: bool,
            const PF: bool,
        >(
            s: &[[*const u8; 2]; K],
            tb: &[[T; K]; G],
            d: &[*mut u8; G],
            pos: usize,
            acc: bool,
        ) {
            let mut a: [[V; G]; U] = [[zero(); G]; U];
            if acc {
                for u in 0..U {
                    for g in 0..G {
                        a[u][g] = load(d[g].add(pos + u * W));
                    }
                }
            }
            for i in 0..K {
                if PF {
                    let mut off = 0;
                    while off < U * W {
                        _mm_prefetch::<_MM_HINT_T0>(
                            s[i][0].wrapping_add(pos + off + super::PREFETCH_BYTES) as *const i8,
                        );
                        off += 64;
                    }
                }
                let mut p: [P; U] = [prep(zero()); U];
                for u in 0..U {
                    let x = if PAIRS {
                        xor(
                            load(s[i][0].add(pos + u * W)),
                            load(s[i][1].add(pos + u * W)),
                        )
                    } else {
                        load(s[i][0].add(pos + u * W))
                    };
                    p[u] = prep(x);
                }
                for g in 0..G {
                    for u in 0..U {
                        a[u][g] = xor(a[u][g], apply(&p[u], &tb[g][i]));
                    }
                }
            }
            for u in 0..U {
                for g in 0..G {
                    store(d[g].add(pos + u * W), a[u][g]);
                }
            }
        }

        /// Vectors per step for `g` rows: three for up to $maxg3 rows, two while the accumulators,
        /// prepared sources and one table fit in the registers ($maxg2 rows), one above.
        const fn vectors_per_step(g: usize) -> usize {
            if g <= $maxg3 {
                3
            } else if g <= $maxg2 {
                2
            } else {
                1
            }
        }

        /// Whole vectors of the dot product; returns how many bytes were done.
        #[target_feature(enable = $feat)]
        pub unsafe fn dot(
            t: &Tables,
            sp: &[*const u8],
            pairs: bool,
            dp: &[*mut u8],
            len: usize,
            acc: bool,
        ) -> usize {
            let n = len / W * W;
            let rev = super::away_from_outputs(sp, pairs, dp);
            let mut r = 0;
            while r < t.rows() {
                let g = (t.rows() - r).min($maxg);
                // `go!(g)`: the loop kernel; `go!(g, unrollable)`: the unrolled one when the
                // shape allows (only rows up to UNROLL_ROWS_MAX are expanded with it).
                macro_rules! go {
                    ($g:literal) => {{
                        match (pairs, vectors_per_step($g)) {
                            (true, 3) => group::<$g, 3, true>(t, r, sp, dp, n, acc, rev),
                            (false, 3) => group::<$g, 3, false>(t, r, sp, dp, n, acc, rev),
                            (true, 2) => group::<$g, 2, true>(t, r, sp, dp, n, acc, rev),
                            (false, 2) => group::<$g, 2, false>(t, r, sp, dp, n, acc, rev),
                            (true, _) => group::<$g, 1, true>(t, r, sp, dp, n, acc, rev),
                            (false, _) => group::<$g, 1, false>(t, r, sp, dp, n, acc, rev),
                        }
                    }};
                    ($g:literal, unrollable) => {{
                        macro_rules! go_k {
                            ($u:literal, $pairs:literal) => {
                                match t.cols() {
                                    1 => group_k::<$g, $u, 1, $pairs>(t, r, sp, dp, n, acc, rev),
                                    2 => group_k::<$g, $u, 2, $pairs>(t, r, sp, dp, n, acc, rev),
                                    3 => group_k::<$g, $u, 3, $pairs>(t, r, sp, dp, n, acc, rev),
                                    4 => group_k::<$g, $u, 4, $pairs>(t, r, sp, dp, n, acc, rev),
                                    5 => group_k::<$g, $u, 5, $pairs>(t, r, sp, dp, n, acc, rev),
                                    6 => group_k::<$g, $u, 6, $pairs>(t, r, sp, dp, n, acc, rev),
                                    7 => group_k::<$g, $u, 7, $pairs>(t, r, sp, dp, n, acc, rev),
                                    8 => group_k::<$g, $u, 8, $pairs>(t, r, sp, dp, n, acc, rev),
                                    9 => group_k::<$g, $u, 9, $pairs>(t, r, sp, dp, n, acc, rev),
                                    10 => group_k::<$g, $u, 10, $pairs>(t, r, sp, dp, n, acc, rev),
                                    11 => group_k::<$g, $u, 11, $pairs>(t, r, sp, dp, n, acc, rev),
                                    _ => group_k::<$g, $u, 12, $pairs>(t, r, sp, dp, n, acc, rev),
                                }
                            };
                        }
                        if (1..=super::UNROLL_COLS_MAX).contains(&t.cols()) {
                            match (pairs, vectors_per_step($g)) {
                                (true, 3) => go_k!(3, true),
                                (false, 3) => go_k!(3, false),
                                (true, 2) => go_k!(2, true),
                                (false, 2) => go_k!(2, false),
                                (true, _) => go_k!(1, true),
                                (false, _) => go_k!(1, false),
                            }
                        } else {
                            go!($g)
                        }
                    }};
                }
                const _: () = assert!(super::UNROLL_ROWS_MAX == 4);
                match g {
                    1 => go!(1, unrollable),
                    2 => go!(2, unrollable),
                    3 => go!(3, unrollable),
                    4 => go!(4, unrollable),
                    5 => go!(5),
                    6 => go!(6),
                    7 => go!(7),
                    _ => go!(8),
                }
                r += g.min($maxg);
            }
            n
        }

        /// Whole vectors of the multi-source XOR; returns how many bytes were done.
        #[target_feature(enable = $feat)]
        pub unsafe fn xor_multi(d: *mut u8, sp: &[*const u8], len: usize, acc: bool) -> usize {
            let n = len / W * W;
            let mut pos = 0;
            while pos + 4 * W <= n {
                // Four vectors per step keep several loads in flight per source.
                let mut a = if acc {
                    [
                        load(d.add(pos)),
                        load(d.add(pos + W)),
                        load(d.add(pos + 2 * W)),
                        load(d.add(pos + 3 * W)),
                    ]
                } else {
                    [zero(); 4]
                };
                for &s in sp {
                    for (j, aj) in a.iter_mut().enumerate() {
                        *aj = xor(*aj, load(s.add(pos + j * W)));
                    }
                }
                for (j, aj) in a.iter().enumerate() {
                    store(d.add(pos + j * W), *aj);
                }
                pos += 4 * W;
            }
            while pos + W <= n {
                let mut a = if acc { load(d.add(pos)) } else { zero() };
                for &s in sp {
                    a = xor(a, load(s.add(pos)));
                }
                store(d.add(pos), a);
                pos += W;
            }
            n
        }

        /// Whole vectors of RAID-6 P and Q; returns how many bytes were done.
        #[target_feature(enable = $feat)]
        pub unsafe fn raid6_pq(sp: &[*const u8], p: *mut u8, q: *mut u8, len: usize) -> usize {
            let n = len / W * W;
            let mut pos = 0;
            while pos + W <= n {
                let mut pv = zero();
                let mut qv = zero();
                for &s in sp.iter().rev() {
                    let x = load(s.add(pos));
                    pv = xor(pv, x);
                    qv = xor(mul2(qv), x);
                }
                store(p.add(pos), pv);
                store(q.add(pos), qv);
                pos += W;
            }
            n
        }
    };
}

/// `load`, `store`, `xor` and `zero` for one vector width under one feature set: the part of a level
/// that only moves bytes (the levels differ in how they multiply).
#[cfg(target_arch = "x86_64")]
macro_rules! basic_ops {
    ($feat:literal, $load:ident, $store:ident, $xor:ident, $zero:ident) => {
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn load(p: *const u8) -> V {
            $load(p as *const _)
        }
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn store(p: *mut u8, v: V) {
            $store(p as *mut _, v)
        }
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn xor(a: V, b: V) -> V {
            $xor(a, b)
        }
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn zero() -> V {
            $zero()
        }
    };
}

/// A GFNI level: the product by a constant is one `gf2p8affineqb` with the constant's 8x8 bit matrix
/// broadcast to every 64-bit lane; nothing to prepare per source vector.
#[cfg(target_arch = "x86_64")]
macro_rules! affine_level {
    ($name:ident, $feat:literal, $w:literal, $v:ty, [$load:ident, $store:ident, $xor:ident, $zero:ident],
     $set1_64:ident, $affine:ident, $maxg:literal, $maxg2:literal, $maxg3:literal) => {
        mod $name {
            use super::Tables;
            use std::arch::x86_64::*;
            const W: usize = $w;
            type V = $v;
            type P = $v;
            type T = $v;

            basic_ops!($feat, $load, $store, $xor, $zero);
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn prep(x: V) -> P {
                x
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn tbl(t: &Tables, idx: usize) -> T {
                $set1_64(*t.aff.get_unchecked(idx) as i64)
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn apply(p: &P, tb: &T) -> V {
                $affine::<0>(*p, *tb)
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn mul2(x: V) -> V {
                $affine::<0>(x, $set1_64(super::MUL2_MATRIX as i64))
            }
            simd_body!($feat, $maxg, $maxg2, $maxg3);
        }
    };
}

/// A split-nibble level: the source vector is split into low and high nibbles once (`prep`), and the
/// product by a constant is two `pshufb` look-ups in the constant's 16-entry nibble tables, XORed.
/// `tbl` loads a coefficient's two tables from `$tb` (its 64-byte `Tables::nib` entry: low-nibble
/// products twice, then high-nibble products twice); `mul2` doubles every byte of `$x`.
#[cfg(target_arch = "x86_64")]
macro_rules! nibble_level {
    ($name:ident, $feat:literal, $w:literal, $v:ty, [$load:ident, $store:ident, $xor:ident, $zero:ident],
     $and:ident, $srli_64:ident, $set1_8:ident, $shuffle:ident,
     tbl($tb:ident) => $tbl:expr, mul2($x:ident) => $mul2:expr,
     $maxg:literal, $maxg2:literal, $maxg3:literal) => {
        mod $name {
            use super::Tables;
            use std::arch::x86_64::*;
            const W: usize = $w;
            type V = $v;
            /// Low and high nibbles of the source vector.
            type P = ($v, $v);
            /// Low-nibble and high-nibble product tables of one coefficient.
            type T = ($v, $v);

            basic_ops!($feat, $load, $store, $xor, $zero);
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn prep(x: V) -> P {
                let mask = $set1_8(0x0f);
                ($and(x, mask), $and($srli_64::<4>(x), mask))
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn tbl(t: &Tables, idx: usize) -> T {
                let $tb: *const u8 = t.nib.get_unchecked(idx).as_ptr();
                $tbl
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn apply(p: &P, tb: &T) -> V {
                $xor($shuffle(tb.0, p.0), $shuffle(tb.1, p.1))
            }
            #[inline]
            #[target_feature(enable = $feat)]
            unsafe fn mul2($x: V) -> V {
                $mul2
            }
            simd_body!($feat, $maxg, $maxg2, $maxg3);
        }
    };
}

#[cfg(target_arch = "x86_64")]
affine_level!(
    avx512gfni,
    "avx512f,avx512bw,gfni",
    64,
    __m512i,
    [
        _mm512_loadu_si512,
        _mm512_storeu_si512,
        _mm512_xor_si512,
        _mm512_setzero_si512
    ],
    _mm512_set1_epi64,
    _mm512_gf2p8affine_epi64_epi8,
    8,
    8,
    0
);

#[cfg(target_arch = "x86_64")]
affine_level!(
    avx2gfni,
    "avx2,gfni",
    32,
    __m256i,
    [
        _mm256_loadu_si256,
        _mm256_storeu_si256,
        _mm256_xor_si256,
        _mm256_setzero_si256
    ],
    _mm256_set1_epi64x,
    _mm256_gf2p8affine_epi64_epi8,
    4,
    4,
    2
);

#[cfg(target_arch = "x86_64")]
nibble_level!(
    avx512,
    "avx512f,avx512bw",
    64,
    __m512i,
    [
        _mm512_loadu_si512,
        _mm512_storeu_si512,
        _mm512_xor_si512,
        _mm512_setzero_si512
    ],
    _mm512_and_si512,
    _mm512_srli_epi64,
    _mm512_set1_epi8,
    _mm512_shuffle_epi8,
    // The 16-byte tables broadcast to all four lanes (a single load with broadcast).
    tbl(tb) => (
            _mm512_broadcast_i32x4(_mm_loadu_si128(tb as *const _)),
            _mm512_broadcast_i32x4(_mm_loadu_si128(tb.add(32) as *const _)),
        ),
    // Shift each byte left; where the top bit was set, reduce by the polynomial (0x1d).
    mul2(x) => _mm512_xor_si512(
            _mm512_add_epi8(x, x),
            _mm512_maskz_mov_epi8(_mm512_movepi8_mask(x), _mm512_set1_epi8(0x1d)),
        ),
    8,
    6,
    0
);

#[cfg(target_arch = "x86_64")]
nibble_level!(
    avx2,
    "avx2",
    32,
    __m256i,
    [
        _mm256_loadu_si256,
        _mm256_storeu_si256,
        _mm256_xor_si256,
        _mm256_setzero_si256
    ],
    _mm256_and_si256,
    _mm256_srli_epi64,
    _mm256_set1_epi8,
    _mm256_shuffle_epi8,
    tbl(tb) => (
            _mm256_loadu_si256(tb as *const _),
            _mm256_loadu_si256(tb.add(32) as *const _),
        ),
    // Shift each byte left; where the top bit was set, reduce by the polynomial (0x1d).
    mul2(x) => _mm256_xor_si256(
            _mm256_add_epi8(x, x),
            _mm256_and_si256(
                _mm256_cmpgt_epi8(_mm256_setzero_si256(), x),
                _mm256_set1_epi8(0x1d),
            ),
        ),
    4,
    4,
    0
);

#[cfg(target_arch = "x86_64")]
nibble_level!(
    ssse3,
    "ssse3",
    16,
    __m128i,
    [
        _mm_loadu_si128,
        _mm_storeu_si128,
        _mm_xor_si128,
        _mm_setzero_si128
    ],
    _mm_and_si128,
    _mm_srli_epi64,
    _mm_set1_epi8,
    _mm_shuffle_epi8,
    tbl(tb) => (
            _mm_loadu_si128(tb as *const _),
            _mm_loadu_si128(tb.add(32) as *const _),
        ),
    mul2(x) => _mm_xor_si128(
            _mm_add_epi8(x, x),
            _mm_and_si128(_mm_cmpgt_epi8(_mm_setzero_si128(), x), _mm_set1_epi8(0x1d)),
        ),
    4,
    3,
    0
);

/// Whether the dot product should walk its sources from the last to the first.
///
/// Measured (docs/benchmarks.md, issue 13): when the sources are walked in address order and the outputs
/// lie further along that order (a stripe's data chunks allocated one after another, then its parity
/// chunks, as `ecstack bench ec` and an array allocate them), the 2-vectors-per-step kernel ran at
/// 0.78-0.88x ISA-L on (6,2,64K) where any other placement gave 1.2-1.35x (CPU time, same buffers).
/// Walking away from the outputs gives 1.35x in both placements. The cause is likely a stride
/// prefetcher extrapolating the sources' addresses into the outputs being written; the VM has no
/// hardware counters to confirm it. Cost: a few compares per call.
#[inline]
pub(crate) fn away_from_outputs(sp: &[*const u8], pairs: bool, dp: &[*mut u8]) -> bool {
    let step = if pairs { 2 } else { 1 };
    if sp.len() < 2 * step {
        return false;
    }
    let first = sp[0] as usize;
    let last = sp[sp.len() - step] as usize;
    // The outputs are "ahead" when they lie beyond the last source in the direction first -> last.
    dp.iter().any(|&d| {
        let d = d as usize;
        (last > first && d > last) || (last < first && d < last)
    })
}

/// How far ahead of the current position the dot product prefetches each source (8 cache lines), and
/// from which length on. Measured (docs/benchmarks.md, issue 13): with 10–12 sources of 256 KiB–1 MiB
/// the hardware prefetchers alone left our decode at 0.7–1.1x ISA-L; with this, 1.3–1.9x. Below the
/// threshold the sources sit in L1/L2 between calls and the extra instructions only cost.
const PREFETCH_BYTES: usize = 512;

/// The dot product's unrolled form (`group_k`): for at most this many rows per group and 1..=this many
/// columns, the column loop is unrolled and the coefficient tables are loaded once per call.
pub(crate) const UNROLL_ROWS_MAX: usize = 4;
pub(crate) const UNROLL_COLS_MAX: usize = 12;
pub(crate) const PREFETCH_MIN_BYTES: usize = 128 * 1024;

/// The GF2P8AFFINEQB bit matrix of multiply-by-2 under 0x11d (rows 0x80,0x01,0x82,0x84,0x88,0x10,0x20,0x40
/// for output bits 0..7); a unit test checks it against `gf::affine_matrix(2)`.
pub const MUL2_MATRIX: u64 = 0x80_01_82_84_88_10_20_40;

#[cfg(test)]
#[path = "kernels_tests.rs"]
mod tests;
