//! RDP, row-diagonal parity (Corbett et al., "Row-Diagonal Parity for Double Disk Failure Correction",
//! FAST'04), the m = 2 code CodFS evaluates (§2.1.1, ch. 5). XOR only; tolerates any two lost chunks.
//!
//! Layout, for a prime p with k <= p - 1 (by default the smallest prime >= k + 1):
//!
//! - A chunk of `len` bytes is p - 1 rows of `s = len / (p - 1)` bytes: row r is bytes `r*s..(r+1)*s`
//!   (`len` must be a multiple of p - 1, else [`CodeError::ChunkAlign`]).
//! - The stripe is an array of p - 1 rows by p columns: data chunk c is column c (0 <= c < k), columns
//!   k..p-1 are absent data chunks, all zero, and the row parity P (shard k) is column p - 1.
//! - P's row r is the XOR of the data's rows r (so P is byte-position-wise, like RAID-5).
//! - The symbol at row r, column c lies on diagonal (r + c) mod p. The diagonal parity Q (shard k + 1)
//!   holds in its row d (d < p - 1) the XOR of every symbol of columns 0..=p-1, P included, on diagonal
//!   d. Diagonal p - 1 is not stored. Each diagonal misses one column: (d + 1) mod p.
//!
//! Decoding two lost columns x < y (data or P) follows the paper's chains: a stored diagonal that misses
//! x gives y's symbol on it, the row of that symbol (P makes each row XOR to zero) gives x's symbol, whose
//! diagonal gives the next y symbol, until diagonal p - 1; a second chain starts from the diagonal that
//! misses y. Because p is prime the two chains visit every stored diagonal once.
//!
//! RDP is not byte-position-wise ([`ErasureCode::chunk_align_bytes`] = p - 1): Q mixes rows, so an update
//! changes Q at other offsets than the data's ([`ErasureCode::delta_ranges`]) and two lost chunks need
//! whole chunks ([`ErasureCode::decode_span`]).

use crate::code::{check_data_index, check_erased, check_range, check_shards};
use crate::code::{CodeKind, CodeOptions, ErasureCode};
use crate::kernels::{self, Simd};
use crate::{CodeError, Result};
use std::fmt;
use std::ops::Range;

const NAME: &str = "rdp";

/// The largest p: k + m <= 256 allows k <= 254, and the smallest prime above 254 is 257.
const PRIME_MAX: usize = 257;

/// Sources of one XOR: Q's row plus one symbol of every other column.
const SOURCES_MAX: usize = PRIME_MAX + 1;

/// An RDP code over k data chunks and the prime p; build it with `new_code(CodeKind::Rdp, k, 2)`.
#[derive(Clone)]
pub(crate) struct Rdp {
    k: usize,
    p: usize,
    level: Simd,
}

impl fmt::Debug for Rdp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rdp({}+2, p={})", self.k, self.p)
    }
}

fn is_prime(n: usize) -> bool {
    n >= 2
        && (2..)
            .take_while(|d| d * d <= n)
            .all(|d| !n.is_multiple_of(d))
}

/// The smallest prime >= n (n <= PRIME_MAX, so the search ends by 257).
fn prime_at_least(n: usize) -> usize {
    (n.max(2)..=PRIME_MAX)
        .find(|&q| is_prime(q))
        .unwrap_or(PRIME_MAX)
}

/// Bytes `r*s..(r+1)*s` of a chunk: its row r.
fn row(chunk: &[u8], r: usize, s: usize) -> &[u8] {
    &chunk[r * s..(r + 1) * s]
}

impl Rdp {
    pub(crate) fn new(k: usize, m: usize, options: CodeOptions) -> Result<Rdp> {
        let params = |rule| CodeError::Params {
            code: NAME,
            got: match options.rdp_prime {
                Some(p) => format!("k={k}, m={m}, p={p}"),
                None => format!("k={k}, m={m}"),
            },
            rule,
        };
        if m != 2 {
            return Err(params("rdp has m = 2"));
        }
        if k == 0 || k + m > 256 {
            return Err(params("needs k >= 1 and k + m <= 256"));
        }
        let p = options.rdp_prime.unwrap_or_else(|| prime_at_least(k + 1));
        if !is_prime(p) || p > PRIME_MAX {
            return Err(params("p must be a prime <= 257"));
        }
        if k > p - 1 {
            return Err(params("rdp needs k <= p - 1"));
        }
        let level = options.simd.unwrap_or_else(Simd::active);
        if !level.supported() {
            return Err(params(
                "the kernel level asked for is not supported by this CPU",
            ));
        }
        Ok(Rdp { k, p, level })
    }

    /// Bytes per row of a chunk of `len` bytes.
    fn row_bytes(&self, len: u64) -> Result<usize> {
        let rows = (self.p - 1) as u64;
        if !len.is_multiple_of(rows) {
            return Err(CodeError::ChunkAlign {
                code: NAME,
                len,
                align: self.p - 1,
                why: "a chunk is p - 1 rows",
            });
        }
        Ok((len / rows) as usize)
    }

    /// The row of column c on diagonal d, or `None` if that would be the missing row p - 1.
    fn row_on(&self, d: usize, c: usize) -> Option<usize> {
        let r = (d + self.p - c) % self.p;
        (r != self.p - 1).then_some(r)
    }

    /// The diagonals that row r of data column c changes: its own and, through P's row r, (r - 1) mod p;
    /// p - 1 (not stored) is left out.
    fn diagonals_of(&self, r: usize, c: usize) -> impl Iterator<Item = usize> {
        let p = self.p;
        [(r + c) % p, (r + p - 1) % p]
            .into_iter()
            .filter(move |&d| d != p - 1)
    }

    /// The array column of shard i (a data chunk or P).
    fn column(&self, shard: usize) -> usize {
        if shard < self.k {
            shard
        } else {
            self.p - 1
        }
    }

    /// `dst = first ^ XOR of every symbol on diagonal d` over the columns `col` gives, except `skip`.
    fn xor_diagonal<'a>(
        &self,
        d: usize,
        s: usize,
        first: Option<&'a [u8]>,
        skip: usize,
        col: impl Fn(usize) -> Option<&'a [u8]>,
        dst: &mut [u8],
    ) {
        let mut srcs: [&[u8]; SOURCES_MAX] = [&[]; SOURCES_MAX];
        let mut n = 0;
        if let Some(f) = first {
            srcs[n] = f;
            n += 1;
        }
        for c in (0..self.p).filter(|&c| c != skip) {
            if let (Some(r), Some(chunk)) = (self.row_on(d, c), col(c)) {
                srcs[n] = row(chunk, r, s);
                n += 1;
            }
        }
        kernels::xor_multi_level(self.level, dst, &srcs[..n], false);
    }

    /// `dst = XOR of every column `col` gives except `skip`` over bytes `span` (a row, or whole chunks).
    fn xor_columns<'a>(
        &self,
        span: Range<usize>,
        skip: usize,
        col: impl Fn(usize) -> Option<&'a [u8]>,
        dst: &mut [u8],
    ) {
        let mut srcs: [&[u8]; SOURCES_MAX] = [&[]; SOURCES_MAX];
        let mut n = 0;
        for c in (0..self.p).filter(|&c| c != skip) {
            if let Some(chunk) = col(c) {
                srcs[n] = &chunk[span.clone()];
                n += 1;
            }
        }
        kernels::xor_multi_level(self.level, dst, &srcs[..n], false);
    }

    /// Q from the columns `col` gives (data and P; absent columns are zero).
    fn encode_q<'a>(&self, s: usize, col: impl Fn(usize) -> Option<&'a [u8]> + Copy, q: &mut [u8]) {
        for d in 0..self.p - 1 {
            self.xor_diagonal(d, s, None, self.p, col, &mut q[d * s..(d + 1) * s]);
        }
    }

    /// Rebuild columns x < y (data or P, shards taken out of the stripe as `tx`, `ty`) by the two chains.
    /// `known` gives every other column present (absent data columns are `None`), `q` is Q.
    fn chains<'a>(
        &self,
        (x, y): (usize, usize),
        s: usize,
        known: impl Fn(usize) -> Option<&'a [u8]> + Copy,
        q: &'a [u8],
        tx: &mut [u8],
        ty: &mut [u8],
    ) {
        let p = self.p;
        let q_row = |d: usize| Some(row(q, d, s));
        let mut steps = 0;
        // Chain from the diagonal that misses x: y's symbol on it, then x's in the same row.
        let mut d = (x + p - 1) % p;
        for _ in 0..p {
            if d == p - 1 {
                break;
            }
            let r = self
                .row_on(d, y)
                .expect("a chain never reaches the diagonal missing y");
            {
                let col = |c: usize| if c == x { Some(&*tx) } else { known(c) };
                self.xor_diagonal(d, s, q_row(d), y, col, &mut ty[r * s..(r + 1) * s]);
            }
            {
                let col = |c: usize| if c == y { Some(&*ty) } else { known(c) };
                self.xor_columns(r * s..(r + 1) * s, x, col, &mut tx[r * s..(r + 1) * s]);
            }
            steps += 1;
            d = (r + x) % p;
        }
        // Chain from the diagonal that misses y: x's symbol on it, then y's in the same row.
        let mut d = (y + p - 1) % p;
        for _ in 0..p {
            if d == p - 1 {
                break;
            }
            let r = self
                .row_on(d, x)
                .expect("a chain never reaches the diagonal missing x");
            {
                let col = |c: usize| if c == y { Some(&*ty) } else { known(c) };
                self.xor_diagonal(d, s, q_row(d), x, col, &mut tx[r * s..(r + 1) * s]);
            }
            {
                let col = |c: usize| if c == x { Some(&*tx) } else { known(c) };
                self.xor_columns(r * s..(r + 1) * s, y, col, &mut ty[r * s..(r + 1) * s]);
            }
            steps += 1;
            d = (r + y) % p;
        }
        // Each step rebuilds one row of x and one of y, each row once (the paper's Theorem 1).
        assert_eq!(steps, p - 1, "rdp chains rebuilt {steps} of {} rows", p - 1);
    }

    /// Per row of Q that an update of bytes `lo..hi` of data column c touches: the span of that row
    /// changed (from the first changed byte to the last of its up to two contributions), in row order.
    /// `s` is the row length; `lo < hi`.
    fn q_spans(&self, c: usize, s: u64, lo: u64, hi: u64) -> Vec<Option<Range<u64>>> {
        let mut spans: Vec<Option<Range<u64>>> = vec![None; self.p - 1];
        for (r, inner) in self.touched_rows(s, lo, hi) {
            for d in self.diagonals_of(r, c) {
                let span = &mut spans[d];
                *span = Some(match span.take() {
                    None => inner.clone(),
                    Some(o) => o.start.min(inner.start)..o.end.max(inner.end),
                });
            }
        }
        spans
    }

    /// The rows bytes `lo..hi` (lo < hi) of a chunk with `s`-byte rows touch, each with the span inside
    /// the row.
    fn touched_rows(&self, s: u64, lo: u64, hi: u64) -> impl Iterator<Item = (usize, Range<u64>)> {
        let (first, last) = (lo / s, (hi - 1) / s);
        (first..=last).map(move |r| {
            let start = r * s;
            (r as usize, lo.max(start) - start..hi.min(start + s) - start)
        })
    }
}

impl ErasureCode for Rdp {
    fn kind(&self) -> CodeKind {
        CodeKind::Rdp
    }
    fn k(&self) -> usize {
        self.k
    }
    fn m(&self) -> usize {
        2
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
            2,
            "parity chunk",
            Some(len),
        )?;
        let s = self.row_bytes(len as u64)?;
        let (p, q) = parity.split_at_mut(1);
        kernels::xor_multi_level(self.level, p[0], data, false);
        let pc: &[u8] = &*p[0];
        let col = |c: usize| match c {
            c if c < self.k => Some(data[c]),
            c if c == self.p - 1 => Some(pc),
            _ => None,
        };
        self.encode_q(s, col, q[0]);
        Ok(())
    }

    /// Rebuilds any two shards. Whole chunks (a multiple of p - 1 bytes) are needed except when the
    /// erased shards are one data chunk or P alone: those are rebuilt by row parity, byte by byte, so
    /// any range of the stripe's chunks works (Q is then not read). See [`ErasureCode::decode_span`].
    fn reconstruct_in_place(&self, shards: &mut [&mut [u8]], erased: &[usize]) -> Result<()> {
        let (k, p) = (self.k, self.p);
        let len = check_shards(
            shards.iter().map(|s| s.len()),
            shards.len(),
            k + 2,
            "shard",
            None,
        )?;
        check_erased(erased, k + 2, 2)?;
        let q_lost = erased.contains(&(k + 1));
        // Data chunks and P, as array columns.
        let mut cols: Vec<usize> = erased
            .iter()
            .filter(|&&e| e <= k)
            .map(|&e| self.column(e))
            .collect();
        cols.sort_unstable();
        // Everything but row parity alone reads or writes Q: whole chunks. Checked before any shard
        // is written, so an error leaves the stripe as it was.
        let s = if q_lost || cols.len() == 2 {
            self.row_bytes(len as u64)?
        } else {
            0
        };
        match cols[..] {
            [] => {}
            [c] => {
                // Row parity: the lost column is the XOR of the others, P included.
                let i = if c < k { c } else { k };
                let t = std::mem::take(&mut shards[i]);
                {
                    let known = |j: usize| self.present_column(shards, j, c);
                    self.xor_columns(0..len, c, known, t);
                }
                shards[i] = t;
            }
            [x, y] => {
                let (ix, iy) = (x, if y < k { y } else { k });
                let tx = std::mem::take(&mut shards[ix]);
                let ty = std::mem::take(&mut shards[iy]);
                {
                    let shards: &[&mut [u8]] = shards;
                    let known = |j: usize| self.present_column(shards, j, x).filter(|_| j != y);
                    self.chains((x, y), s, known, shards[k + 1], tx, ty);
                }
                shards[ix] = tx;
                shards[iy] = ty;
            }
            _ => unreachable!("check_erased allows two erasures"),
        }
        if q_lost {
            let q = std::mem::take(&mut shards[k + 1]);
            {
                let known = |j: usize| self.present_column(shards, j, p);
                self.encode_q(s, known, q);
            }
            shards[k + 1] = q;
        }
        Ok(())
    }

    fn parity_deltas(
        &self,
        _data_index: usize,
        _old: &[u8],
        _new: &[u8],
        _deltas: &mut [&mut [u8]],
    ) -> Result<()> {
        Err(CodeError::RangedDeltasNeeded { code: NAME })
    }

    fn chunk_align_bytes(&self) -> usize {
        self.p - 1
    }

    fn decode_span(
        &self,
        chunk_len: u64,
        range: Range<u64>,
        erased: &[usize],
    ) -> Result<Range<u64>> {
        check_range(&range, chunk_len)?;
        check_erased(erased, self.k + 2, 2)?;
        self.row_bytes(chunk_len)?;
        match erased {
            [e] if *e <= self.k => Ok(range),
            [] => Ok(range),
            _ => Ok(0..chunk_len),
        }
    }

    fn delta_ranges(
        &self,
        data_index: usize,
        chunk_len: u64,
        range: Range<u64>,
    ) -> Result<Vec<Vec<Range<u64>>>> {
        check_data_index(data_index, self.k)?;
        check_range(&range, chunk_len)?;
        let s = self.row_bytes(chunk_len)? as u64;
        if range.is_empty() {
            return Ok(vec![Vec::new(), Vec::new()]);
        }
        let mut q: Vec<Range<u64>> = Vec::new();
        for (d, span) in self
            .q_spans(data_index, s, range.start, range.end)
            .iter()
            .enumerate()
        {
            let Some(span) = span else { continue };
            let e = d as u64 * s + span.start..d as u64 * s + span.end;
            match q.last_mut() {
                Some(last) if last.end == e.start => last.end = e.end,
                _ => q.push(e),
            }
        }
        Ok(vec![vec![range], q])
    }

    fn ranged_parity_deltas(
        &self,
        data_index: usize,
        chunk_len: u64,
        lo: u64,
        old: &[u8],
        new: &[u8],
        deltas: &mut [&mut [u8]],
    ) -> Result<()> {
        let hi = lo.saturating_add(old.len() as u64);
        let extents = self.delta_ranges(data_index, chunk_len, lo..hi)?;
        if new.len() != old.len() {
            return Err(CodeError::ShardSize {
                what: "new range",
                index: data_index,
                got: new.len(),
                want: old.len(),
            });
        }
        if deltas.len() != 2 {
            return Err(CodeError::ShardCount {
                what: "delta",
                got: deltas.len(),
                want: 2,
            });
        }
        for (i, (d, ext)) in deltas.iter().zip(&extents).enumerate() {
            let want: u64 = ext.iter().map(|e| e.end - e.start).sum();
            if d.len() as u64 != want {
                return Err(CodeError::ShardSize {
                    what: "delta",
                    index: i,
                    got: d.len(),
                    want: want as usize,
                });
            }
        }
        if old.is_empty() {
            return Ok(());
        }
        let s = self.row_bytes(chunk_len)? as u64;
        let (dp, dq) = deltas.split_at_mut(1);
        kernels::xor_multi_level(self.level, dp[0], &[old, new], false);
        // Where each touched row of Q starts in Q's delta: its extents, concatenated in row order.
        let spans = self.q_spans(data_index, s, lo, hi);
        let mut at = vec![0usize; self.p - 1];
        let mut next = 0usize;
        for (d, span) in spans.iter().enumerate() {
            if let Some(span) = span {
                at[d] = next;
                next += (span.end - span.start) as usize;
            }
        }
        let dq: &mut [u8] = dq[0];
        dq.fill(0);
        // Data row r changes Q's rows on its diagonals over the same bytes of the row.
        for (r, inner) in self.touched_rows(s, lo, hi) {
            let from = (r as u64 * s + inner.start - lo) as usize;
            let len = (inner.end - inner.start) as usize;
            let (o, n) = (&old[from..from + len], &new[from..from + len]);
            for d in self.diagonals_of(r, data_index) {
                let span = spans[d]
                    .as_ref()
                    .expect("a touched row's diagonals have spans");
                let to = at[d] + (inner.start - span.start) as usize;
                kernels::xor_multi_level(self.level, &mut dq[to..to + len], &[o, n], true);
            }
        }
        Ok(())
    }
}

impl Rdp {
    /// Column j of the stripe if present: data chunks and P from `shards`, absent data columns `None`,
    /// and `None` for the column `lost` being rebuilt.
    fn present_column<'a>(
        &self,
        shards: &'a [&mut [u8]],
        j: usize,
        lost: usize,
    ) -> Option<&'a [u8]> {
        if j == lost {
            None
        } else if j < self.k {
            Some(&*shards[j])
        } else if j == self.p - 1 {
            Some(&*shards[self.k])
        } else {
            None
        }
    }
}
