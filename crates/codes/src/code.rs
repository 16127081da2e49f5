//! Systematic linear block codes behind the `ErasureCode` seam: Reed-Solomon from a Vandermonde-derived
//! or a Cauchy matrix, XOR parity (RAID-5) and RAID-6 P+Q, the last two with their own fast paths. RDP,
//! an XOR array code that mixes byte positions inside a chunk, lives in `rdp.rs`.

use crate::decode_cache::{DecodeCache, DecodeCacheStats, DecodePlan};
use crate::decode_cache::{DECODE_CACHE_BYTES_MAX, DECODE_CACHE_ENTRIES_MAX};
use crate::kernels::{self, Simd, Tables};
use crate::matrix::{self, Matrix};
use crate::{CodeError, Result};
use std::fmt;
use std::ops::Range;

/// Which generator a code uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CodeKind {
    /// Reed-Solomon, systematic generator derived from a Vandermonde matrix.
    RsVandermonde,
    /// Reed-Solomon, Cauchy generator laid out as ISA-L's `gf_gen_cauchy1_matrix`.
    RsCauchy,
    /// Single XOR parity (RAID-5); m must be 1.
    Xor,
    /// RAID-6: P = XOR, Q = sum 2^j D_j; m must be 2.
    Raid6,
    /// RDP, row-diagonal parity (Corbett et al., FAST'04): XOR only, m = 2, a prime p with k <= p - 1,
    /// chunks of p - 1 rows. Not byte-position-wise: see [`ErasureCode::chunk_align_bytes`] and
    /// [`ErasureCode::delta_ranges`].
    Rdp,
}

impl CodeKind {
    pub const ALL: [CodeKind; 5] = [
        CodeKind::RsVandermonde,
        CodeKind::RsCauchy,
        CodeKind::Xor,
        CodeKind::Raid6,
        CodeKind::Rdp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CodeKind::RsVandermonde => "rs-vand",
            CodeKind::RsCauchy => "rs-cauchy",
            CodeKind::Xor => "xor",
            CodeKind::Raid6 => "raid6",
            CodeKind::Rdp => "rdp",
        }
    }

    pub fn parse(s: &str) -> Result<CodeKind> {
        match s {
            "rs-vand" | "rs" | "vandermonde" => Ok(CodeKind::RsVandermonde),
            "rs-cauchy" | "cauchy" => Ok(CodeKind::RsCauchy),
            "xor" | "raid5" => Ok(CodeKind::Xor),
            "raid6" => Ok(CodeKind::Raid6),
            "rdp" => Ok(CodeKind::Rdp),
            _ => Err(CodeError::UnknownCode {
                name: s.to_string(),
            }),
        }
    }

    /// The code a new array, cluster or shard set gets when none is named (docs/cli.md): by the
    /// parity count, as mdadm and ZFS choose — XOR (RAID-5) for m = 1, P+Q (RAID-6) for m = 2,
    /// Cauchy Reed-Solomon (ISA-L's, byte for byte) for m ≥ 3. Existing arrays, clusters and shards
    /// keep the code they name.
    pub fn default_for_parity(m: usize) -> CodeKind {
        match m {
            1 => CodeKind::Xor,
            2 => CodeKind::Raid6,
            _ => CodeKind::RsCauchy,
        }
    }

    /// Stable on-disk identifier.
    pub fn id(self) -> u8 {
        match self {
            CodeKind::RsVandermonde => 1,
            CodeKind::RsCauchy => 2,
            CodeKind::Xor => 3,
            CodeKind::Raid6 => 4,
            CodeKind::Rdp => 5,
        }
    }

    pub fn from_id(id: u8) -> Option<CodeKind> {
        CodeKind::ALL.into_iter().find(|k| k.id() == id)
    }
}

impl fmt::Display for CodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The erasure-code seam every layer above uses; build one with [`new_code`](crate::new_code). Shards are equal-length
/// byte slices: indices `0..k` are data chunks, `k..k+m` parity chunks.
///
/// A code cannot detect corruption: every shard it is given as input must hold valid contents. The caller
/// guarantees that: shard files check a CRC per unit ([`crate::shard`]), the array trusts only chunks its
/// metadata says are current on a working device, a cluster OSD checks its chunk headers. Every method
/// checks counts, lengths and indexes first and returns a [`CodeError`] instead of panicking.
pub trait ErasureCode: Send + Sync + fmt::Debug {
    fn kind(&self) -> CodeKind;
    /// Number of data chunks.
    fn k(&self) -> usize;
    /// Number of parity chunks.
    fn m(&self) -> usize;
    /// Total chunks per stripe.
    fn n(&self) -> usize {
        self.k() + self.m()
    }

    /// Compute every parity chunk from the data chunks: `data` holds k slices, `parity` m slices, all of
    /// one length. (Data and parity are separate so that data can stay borrowed from the caller.)
    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<()>;

    /// Rebuild every missing shard: `shards` holds n entries, `None` for a lost one, and at least k present
    /// ones of equal length (which must hold valid contents, see the trait doc). Each `None` becomes the
    /// rebuilt shard; data or parity in any mix. Errors: [`CodeError::ShardCount`] (not n entries),
    /// [`CodeError::ShardSize`] (present shards differ in length), [`CodeError::TooFewShards`].
    fn reconstruct(&self, shards: &mut [Option<Vec<u8>>]) -> Result<()> {
        let (n, k) = (self.n(), self.k());
        if shards.len() != n {
            return Err(CodeError::ShardCount {
                what: "shard",
                got: shards.len(),
                want: n,
            });
        }
        let mut len = None;
        let mut erased = Vec::new();
        for (i, s) in shards.iter().enumerate() {
            match (s, len) {
                (None, _) => erased.push(i),
                (Some(v), None) => len = Some(v.len()),
                (Some(v), Some(l)) if v.len() != l => {
                    return Err(CodeError::ShardSize {
                        what: "shard",
                        index: i,
                        got: v.len(),
                        want: l,
                    })
                }
                _ => {}
            }
        }
        if erased.is_empty() {
            return Ok(());
        }
        if n - erased.len() < k {
            return Err(CodeError::TooFewShards {
                present: n - erased.len(),
                k,
            });
        }
        let len = len.unwrap_or(0);
        for &e in &erased {
            shards[e] = Some(vec![0u8; len]);
        }
        let mut refs: Vec<&mut [u8]> = shards
            .iter_mut()
            .map(|s| s.get_or_insert_with(Vec::new).as_mut_slice())
            .collect();
        let r = self.reconstruct_in_place(&mut refs, &erased);
        if r.is_err() {
            for &e in &erased {
                shards[e] = None;
            }
        }
        r
    }

    /// [`reconstruct`](ErasureCode::reconstruct) into buffers the caller owns, without allocating: `shards`
    /// holds all n shards of one length, and the ones listed in `erased` (at most m, no repeats) are
    /// overwritten with their rebuilt contents from the others (which must be valid, see the trait doc).
    fn reconstruct_in_place(&self, shards: &mut [&mut [u8]], erased: &[usize]) -> Result<()>;

    /// Whether the parity chunks match the data chunks (`shards` holds all n). Detects an inconsistent
    /// stripe, not which shard is wrong.
    fn verify(&self, shards: &[&[u8]]) -> Result<bool> {
        let len = check_shards(
            shards.iter().map(|s| s.len()),
            shards.len(),
            self.n(),
            "shard",
            None,
        )?;
        let mut fresh: Vec<Vec<u8>> = vec![vec![0u8; len]; self.m()];
        let mut outs: Vec<&mut [u8]> = fresh.iter_mut().map(|v| v.as_mut_slice()).collect();
        self.encode(&shards[..self.k()], &mut outs)?;
        Ok(fresh
            .iter()
            .zip(&shards[self.k()..])
            .all(|(a, b)| a.as_slice() == *b))
    }

    /// Parity deltas for an update of data chunk `data_index` over some byte range (CodFS §2.1.1): given the
    /// old and new bytes of the range, `deltas[i]` receives `gamma(i, l) * (old ^ new)`, the change of parity
    /// chunk i over the same range. Only deltas need to travel to parity holders.
    ///
    /// This form holds only for byte-position-wise codes ([`chunk_align_bytes`] = 1: RS, XOR, RAID-6),
    /// where each parity changes over the data's own range. RDP refuses it with
    /// [`CodeError::RangedDeltasNeeded`]: use [`delta_ranges`] and [`ranged_parity_deltas`], which every
    /// code supports.
    ///
    /// [`chunk_align_bytes`]: ErasureCode::chunk_align_bytes
    /// [`delta_ranges`]: ErasureCode::delta_ranges
    /// [`ranged_parity_deltas`]: ErasureCode::ranged_parity_deltas
    fn parity_deltas(
        &self,
        data_index: usize,
        old: &[u8],
        new: &[u8],
        deltas: &mut [&mut [u8]],
    ) -> Result<()>;

    /// Apply a parity delta to the matching range of a parity chunk (`parity ^= delta`).
    fn apply_delta(&self, parity: &mut [u8], delta: &[u8]) -> Result<()> {
        if parity.len() != delta.len() {
            return Err(CodeError::ShardSize {
                what: "delta",
                index: 0,
                got: delta.len(),
                want: parity.len(),
            });
        }
        kernels::xor_into(parity, delta);
        Ok(())
    }

    /// Chunk lengths this code accepts are multiples of this many bytes. 1 means the code is
    /// byte-position-wise: byte j of every parity chunk depends only on byte j of the data chunks, so any
    /// byte range of a stripe's n chunks is itself a stripe (encode, rebuild and deltas work on ranges).
    /// RDP returns p - 1: a chunk is p - 1 rows and parity mixes rows, so its shards must be whole chunks
    /// (see [`decode_span`](ErasureCode::decode_span) for the exceptions).
    fn chunk_align_bytes(&self) -> usize {
        1
    }

    /// The byte range of every chunk to pass to [`reconstruct_in_place`](ErasureCode::reconstruct_in_place)
    /// (with the same `erased`) to rebuild bytes `range` of the erased chunks of a stripe of `chunk_len`-byte
    /// chunks: `range` itself for a byte-position-wise code, the whole chunk `0..chunk_len` when the code
    /// must mix rows (RDP, except for one lost data chunk or a lost row parity, rebuilt by XOR of the same
    /// range). Callers reading a range in degraded mode read this span of every survivor. Errors:
    /// [`CodeError::RangeOutOfChunk`], [`CodeError::ChunkAlign`], erased indexes as `reconstruct_in_place`.
    fn decode_span(
        &self,
        chunk_len: u64,
        range: Range<u64>,
        erased: &[usize],
    ) -> Result<Range<u64>> {
        check_range(&range, chunk_len)?;
        check_erased(erased, self.n(), self.m())?;
        Ok(range)
    }

    /// The byte ranges of each parity chunk that an update of bytes `range` of data chunk `data_index`
    /// changes, in a stripe of `chunk_len`-byte chunks: `extents[i]` lists parity chunk i's ranges, sorted,
    /// disjoint and not adjacent. An extent may include bytes whose delta is zero (RDP covers each
    /// touched parity row's span with one extent). An empty `range` changes nothing: every list is empty.
    ///
    /// Byte-position-wise codes (the default) return `range` for every parity. RDP's row parity changes
    /// over `range`; its diagonal parity over up to two row spans per touched data row, which lie
    /// elsewhere in the chunk (CodFS §2.1.1: an RDP update changes more parity than an RS one).
    ///
    /// Errors: [`CodeError::IndexOutOfRange`] (`data_index >= k`), [`CodeError::RangeOutOfChunk`],
    /// [`CodeError::ChunkAlign`] (`chunk_len` is not a multiple of [`chunk_align_bytes`]).
    ///
    /// [`chunk_align_bytes`]: ErasureCode::chunk_align_bytes
    fn delta_ranges(
        &self,
        data_index: usize,
        chunk_len: u64,
        range: Range<u64>,
    ) -> Result<Vec<Vec<Range<u64>>>> {
        check_data_index(data_index, self.k())?;
        check_range(&range, chunk_len)?;
        let extents = if range.is_empty() {
            Vec::new()
        } else {
            vec![range]
        };
        Ok(vec![extents; self.m()])
    }

    /// The parity deltas of an update of data chunk `data_index` at bytes `lo..lo + old.len()` of a
    /// `chunk_len`-byte chunk, over the ranges [`delta_ranges`](ErasureCode::delta_ranges) returns for
    /// that update: `deltas[i]` receives the change of parity chunk i over its extents, concatenated in
    /// extent order (so its length is the sum of the extents' lengths). XOR each extent's slice of
    /// `deltas[i]` into those bytes of parity chunk i ([`apply_ranged_delta`] does it for a chunk in
    /// memory) and the stripe equals a fresh encode of the updated data. Only `old` and `new` are needed:
    /// no other chunk is read.
    ///
    /// Errors: those of `delta_ranges`, [`CodeError::ShardSize`] (`new` differs from `old` in length, a
    /// delta buffer from its extents' total), [`CodeError::ShardCount`] (not m delta buffers).
    ///
    /// [`apply_ranged_delta`]: ErasureCode::apply_ranged_delta
    fn ranged_parity_deltas(
        &self,
        data_index: usize,
        chunk_len: u64,
        lo: u64,
        old: &[u8],
        new: &[u8],
        deltas: &mut [&mut [u8]],
    ) -> Result<()> {
        check_data_index(data_index, self.k())?;
        check_range(&(lo..lo.saturating_add(old.len() as u64)), chunk_len)?;
        self.parity_deltas(data_index, old, new, deltas)
    }

    /// XOR a delta of [`ranged_parity_deltas`](ErasureCode::ranged_parity_deltas) into a whole parity chunk
    /// held in memory: `delta` is the concatenation of the bytes of `extents` (one parity's list from
    /// [`delta_ranges`](ErasureCode::delta_ranges)). Errors: [`CodeError::RangeOutOfChunk`] (an extent
    /// outside `parity`), [`CodeError::ShardSize`] (`delta` is not the extents' total length).
    fn apply_ranged_delta(
        &self,
        parity: &mut [u8],
        extents: &[Range<u64>],
        delta: &[u8],
    ) -> Result<()> {
        let mut total = 0u64;
        for e in extents {
            check_range(e, parity.len() as u64)?;
            total += e.end - e.start;
        }
        if total != delta.len() as u64 {
            return Err(CodeError::ShardSize {
                what: "ranged delta",
                index: 0,
                got: delta.len(),
                want: total as usize,
            });
        }
        let mut at = 0usize;
        for e in extents {
            let len = (e.end - e.start) as usize;
            kernels::xor_into(
                &mut parity[e.start as usize..e.end as usize],
                &delta[at..at + len],
            );
            at += len;
        }
        Ok(())
    }
}

/// `range` is ordered and inside a chunk of `chunk_len` bytes.
pub(crate) fn check_range(range: &Range<u64>, chunk_len: u64) -> Result<()> {
    if range.start > range.end || range.end > chunk_len {
        return Err(CodeError::RangeOutOfChunk {
            lo: range.start,
            hi: range.end,
            chunk_len,
        });
    }
    Ok(())
}

/// `data_index` names one of the k data chunks.
pub(crate) fn check_data_index(data_index: usize, k: usize) -> Result<()> {
    if data_index >= k {
        return Err(CodeError::IndexOutOfRange {
            index: data_index,
            n: k,
        });
    }
    Ok(())
}

/// `erased` names at most m shards of n, each once.
pub(crate) fn check_erased(erased: &[usize], n: usize, m: usize) -> Result<()> {
    for (i, &e) in erased.iter().enumerate() {
        if e >= n {
            return Err(CodeError::IndexOutOfRange { index: e, n });
        }
        if erased[..i].contains(&e) {
            return Err(CodeError::DuplicateErasure { index: e });
        }
    }
    if erased.len() > m {
        return Err(CodeError::TooManyErasures {
            erased: erased.len(),
            m,
        });
    }
    Ok(())
}

/// The linear-algebra view of a code, for benchmarks against other libraries, the ISA-L cross-check and
/// callers that ship decode coefficients to where the data lives. Every [`CodeKind`] but RDP has this
/// view (RDP is linear over GF(2) on rows, not a GF(2^8) generator over whole chunks); build one with
/// [`new_linear_code`].
pub trait LinearCode: ErasureCode {
    /// The n x k generator matrix (top k rows are the identity, the rest the parity coefficients).
    fn generator(&self) -> &Matrix;

    /// The decode plan for an erasure pattern: which k surviving shards to read, and the coefficient rows
    /// (one per erased shard, in `erased` order) that turn them into each erased shard.
    fn decode_plan(&self, erased: &[usize]) -> Result<(Vec<usize>, Matrix)>;

    /// Hits, misses and evictions of the decode-matrix cache (see [`CodeOptions`]).
    fn decode_cache_stats(&self) -> DecodeCacheStats;
}

/// Options of [`new_code_with`](crate::new_code_with); `CodeOptions::default()` is what
/// [`new_code`](crate::new_code) uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CodeOptions {
    /// Decode plans (survivors + kernel tables per erasure pattern) kept in the code's LRU, so repeated
    /// decodes with the same failures never re-invert. 0 turns the cache off: every decode inverts.
    pub decode_cache_entries_max: usize,
    /// Bytes of kernel tables the cache may hold.
    pub decode_cache_bytes_max: usize,
    /// The kernel level this code runs at; `None` (the default) is [`Simd::active()`]. A level this CPU
    /// cannot run is refused with [`CodeError::Params`]. For benchmarks that compare levels in one run.
    pub simd: Option<Simd>,
    /// RDP's prime p (k <= p - 1 <= 256); `None` (the default) is the smallest prime >= k + 1. The other
    /// codes ignore it. A caller choosing p must store it with the stripe: shard files and the array
    /// record only the kind, k and m.
    pub rdp_prime: Option<usize>,
}

impl Default for CodeOptions {
    fn default() -> Self {
        CodeOptions {
            decode_cache_entries_max: DECODE_CACHE_ENTRIES_MAX,
            decode_cache_bytes_max: DECODE_CACHE_BYTES_MAX,
            simd: None,
            rdp_prime: None,
        }
    }
}

/// [`new_code`](crate::new_code) with the [`LinearCode`] view (generator matrix, decode plans). RDP has no such view:
/// [`CodeError::NotLinear`].
pub fn new_linear_code(kind: CodeKind, k: usize, m: usize) -> Result<Box<dyn LinearCode>> {
    new_linear_code_with(kind, k, m, CodeOptions::default())
}

/// [`new_linear_code`] with options.
pub fn new_linear_code_with(
    kind: CodeKind,
    k: usize,
    m: usize,
    options: CodeOptions,
) -> Result<Box<dyn LinearCode>> {
    Ok(Box::new(Systematic::new(kind, k, m, options)?))
}

/// The one implementation of `ErasureCode`: a systematic linear code given by its generator, with
/// precomputed kernel tables and fast paths for XOR and RAID-6.
#[derive(Clone)]
pub(crate) struct Systematic {
    kind: CodeKind,
    k: usize,
    m: usize,
    gen: Matrix,
    /// Parity rows (m x k) as kernel tables.
    parity_tables: Tables,
    /// Per data column l: the m x 1 column of parity coefficients, for deltas.
    delta_tables: Vec<Tables>,
    /// Decode plans per erasure pattern (LRU).
    decode_cache: DecodeCache,
    /// The kernel level of every table and region operation of this code.
    level: Simd,
}

impl fmt::Debug for Systematic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({}+{})", self.kind, self.k, self.m)
    }
}

impl Systematic {
    pub(crate) fn new(
        kind: CodeKind,
        k: usize,
        m: usize,
        options: CodeOptions,
    ) -> Result<Systematic> {
        let params = |rule| CodeError::Params {
            code: kind.name(),
            got: format!("k={k}, m={m}"),
            rule,
        };
        if k == 0 || m == 0 || k + m > 256 {
            return Err(params("needs k >= 1, m >= 1 and k + m <= 256"));
        }
        let level = options.simd.unwrap_or_else(Simd::active);
        if !level.supported() {
            return Err(params(
                "the kernel level asked for is not supported by this CPU",
            ));
        }
        let gen = match kind {
            CodeKind::RsVandermonde => matrix::vandermonde_systematic(k, m),
            CodeKind::RsCauchy => matrix::cauchy1(k, m),
            CodeKind::Xor => {
                if m != 1 {
                    return Err(params("xor parity has m = 1"));
                }
                matrix::xor_parity(k)
            }
            CodeKind::Raid6 => {
                if m != 2 {
                    return Err(params("raid6 has m = 2"));
                }
                matrix::raid6(k)
            }
            CodeKind::Rdp => return Err(CodeError::NotLinear { code: kind.name() }),
        };
        let parity = gen.select_rows(&(k..k + m).collect::<Vec<_>>());
        let parity_tables = Tables::for_level(level, m, k, &parity.data);
        let delta_tables = (0..k)
            .map(|l| {
                let col: Vec<u8> = (0..m).map(|i| parity.get(i, l)).collect();
                Tables::for_level(level, m, 1, &col)
            })
            .collect();
        Ok(Systematic {
            kind,
            k,
            m,
            gen,
            parity_tables,
            delta_tables,
            decode_cache: DecodeCache::new(
                options.decode_cache_entries_max,
                options.decode_cache_bytes_max,
            ),
            level,
        })
    }

    /// Run `f` on the decode plan for `erased` with its kernel tables: from the cache (this thread's
    /// last plan or the shared LRU) or built (and cached).
    fn with_cached_plan<R>(&self, erased: &[usize], f: impl FnOnce(&DecodePlan) -> R) -> Result<R> {
        // The key: erased indexes as u16 (n <= 256), on the stack for the usual small m.
        let mut small = [0u16; 32];
        let mut big = Vec::new();
        let key: &[u16] = if erased.len() <= small.len() {
            for (s, &e) in small.iter_mut().zip(erased) {
                *s = e.min(u16::MAX as usize) as u16;
            }
            &small[..erased.len()]
        } else {
            big.extend(erased.iter().map(|&e| e.min(u16::MAX as usize) as u16));
            &big
        };
        self.decode_cache.with_plan(
            key,
            || {
                // Survivors on the heap (the plan keeps them), the rows on the stack when small.
                let mut survivors = vec![0; self.k];
                with_scratch(erased.len() * self.k, |rows| {
                    self.plan_into(erased, &mut survivors, rows)?;
                    let tables = Tables::for_level(self.level, erased.len(), self.k, rows);
                    Ok(DecodePlan::new(survivors, tables))
                })
            },
            f,
        )
    }

    /// See [`LinearCode::decode_plan`].
    pub(crate) fn plan(&self, erased: &[usize]) -> Result<(Vec<usize>, Matrix)> {
        let mut survivors = vec![0; self.k];
        let mut rows = Matrix::zero(erased.len(), self.k);
        self.plan_into(erased, &mut survivors, &mut rows.data)?;
        Ok((survivors, rows))
    }

    /// Check `erased` and write the decode plan for it: the k survivors (the first k shards not
    /// erased) into `survivors`, the rows that rebuild each erased shard from them (erased.len() x k,
    /// row-major) into `rows`. The k x k inversion works on the stack for k <= 16, so a plan made on
    /// every call (the cache off, or a pattern seen for the first time) costs no allocation here.
    fn plan_into(&self, erased: &[usize], survivors: &mut [usize], rows: &mut [u8]) -> Result<()> {
        let (k, n) = (self.k, self.k + self.m);
        debug_assert!(survivors.len() == k && rows.len() == erased.len() * k);
        let mut is_erased = [false; 256];
        for &e in erased {
            if e >= n {
                return Err(CodeError::IndexOutOfRange { index: e, n });
            }
            if is_erased[e] {
                return Err(CodeError::DuplicateErasure { index: e });
            }
            is_erased[e] = true;
        }
        if erased.len() > self.m {
            return Err(CodeError::TooManyErasures {
                erased: erased.len(),
                m: self.m,
            });
        }
        for (s, i) in survivors.iter_mut().zip((0..n).filter(|&i| !is_erased[i])) {
            *s = i;
        }
        with_scratch(2 * k * k, |buf| {
            let (b, b_inv) = buf.split_at_mut(k * k);
            for (row, &s) in b.chunks_exact_mut(k).zip(survivors.iter()) {
                row.copy_from_slice(self.gen.row(s));
            }
            // Every generator built here is MDS (any k rows invertible), so this cannot fail; it is
            // reported rather than unwrapped all the same.
            if !matrix::invert_into(b, b_inv, k) {
                return Err(CodeError::NotInvertible {
                    survivors: survivors.to_vec(),
                });
            }
            for (out, &e) in rows.chunks_exact_mut(k).zip(erased) {
                if e < k {
                    out.copy_from_slice(&b_inv[e * k..(e + 1) * k]);
                } else {
                    // Generator row e times the inverse.
                    out.fill(0);
                    for (&g, inv_row) in self.gen.row(e).iter().zip(b_inv.chunks_exact(k)) {
                        let t = &kernels::MUL_TABLE[g as usize];
                        for (o, &x) in out.iter_mut().zip(inv_row) {
                            *o ^= t[x as usize];
                        }
                    }
                }
            }
            Ok(())
        })
    }
}

/// Run `f` on `len` zeroed bytes of scratch, on the stack when small (up to two 16 x 16 matrices).
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    const SMALL: usize = 512;
    if len <= SMALL {
        let mut buf = [0u8; SMALL];
        f(&mut buf[..len])
    } else {
        f(&mut vec![0u8; len])
    }
}

/// Check that there are `want` slices (`what` names them in errors) of one length, equal to `len` when
/// given; returns that length.
pub(crate) fn check_shards(
    lens: impl Iterator<Item = usize>,
    count: usize,
    want: usize,
    what: &'static str,
    len: Option<usize>,
) -> Result<usize> {
    if count != want {
        return Err(CodeError::ShardCount {
            what,
            got: count,
            want,
        });
    }
    let mut len = len;
    for (index, got) in lens.enumerate() {
        match len {
            None => len = Some(got),
            Some(want) if want != got => {
                return Err(CodeError::ShardSize {
                    what,
                    index,
                    got,
                    want,
                })
            }
            _ => {}
        }
    }
    Ok(len.unwrap_or(0))
}

impl LinearCode for Systematic {
    fn generator(&self) -> &Matrix {
        &self.gen
    }
    fn decode_plan(&self, erased: &[usize]) -> Result<(Vec<usize>, Matrix)> {
        self.plan(erased)
    }
    fn decode_cache_stats(&self) -> DecodeCacheStats {
        self.decode_cache.stats()
    }
}

impl ErasureCode for Systematic {
    fn kind(&self) -> CodeKind {
        self.kind
    }
    fn k(&self) -> usize {
        self.k
    }
    fn m(&self) -> usize {
        self.m
    }
    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<()> {
        let len = check_shards(
            data.iter().map(|d| d.len()),
            data.len(),
            self.k,
            "data chunk",
            None,
        )?;
        check_shards(
            parity.iter().map(|p| p.len()),
            parity.len(),
            self.m,
            "parity chunk",
            Some(len),
        )?;
        match self.kind {
            CodeKind::Xor => kernels::xor_multi_level(self.level, parity[0], data, false),
            CodeKind::Raid6 => {
                let (p, q) = parity.split_at_mut(1);
                kernels::raid6_pq_level(self.level, data, p[0], q[0]);
            }
            _ => kernels::dot_prod(&self.parity_tables, data, parity, len, false),
        }
        Ok(())
    }

    fn reconstruct_in_place(&self, shards: &mut [&mut [u8]], erased: &[usize]) -> Result<()> {
        let n = self.k + self.m;
        let len = check_shards(
            shards.iter().map(|s| s.len()),
            shards.len(),
            n,
            "shard",
            None,
        )?;
        if erased.is_empty() {
            return Ok(());
        }
        // XOR parity (and RAID-6 P with every data chunk present) rebuilds by XOR alone.
        let xor_only = erased.len() == 1
            && match self.kind {
                CodeKind::Xor => erased[0] < n,
                CodeKind::Raid6 => erased[0] <= self.k,
                _ => false,
            };
        if xor_only {
            let e = erased[0];
            let (mut srcs, mut dst): (Vec<&[u8]>, Option<&mut [u8]>) = (Vec::new(), None);
            for (i, s) in shards.iter_mut().enumerate() {
                if i == e {
                    dst = Some(&mut **s);
                } else if i <= self.k {
                    srcs.push(&**s);
                }
            }
            kernels::xor_multi_level(self.level, dst.expect("erased index checked"), &srcs, false);
            return Ok(());
        }
        // Survivors and erased shards are disjoint (survivors are chosen among the shards not erased)
        // and `erased` has no repeats (checked by `plan` before any plan was built or cached).
        self.with_cached_plan(erased, |plan| {
            kernels::dot_prod_indexed(&plan.tables, shards, &plan.survivors, erased, len)
        })
    }

    fn parity_deltas(
        &self,
        data_index: usize,
        old: &[u8],
        new: &[u8],
        deltas: &mut [&mut [u8]],
    ) -> Result<()> {
        if data_index >= self.k {
            return Err(CodeError::IndexOutOfRange {
                index: data_index,
                n: self.k,
            });
        }
        if old.len() != new.len() {
            return Err(CodeError::ShardSize {
                what: "new range",
                index: data_index,
                got: new.len(),
                want: old.len(),
            });
        }
        check_shards(
            deltas.iter().map(|d| d.len()),
            deltas.len(),
            self.m,
            "delta",
            Some(old.len()),
        )?;
        match self.kind {
            CodeKind::Xor => kernels::xor_multi_level(self.level, deltas[0], &[old, new], false),
            _ => kernels::dot_prod_delta(
                &self.delta_tables[data_index],
                &[old],
                &[new],
                deltas,
                old.len(),
                false,
            ),
        }
        Ok(())
    }
}
