//! Small dense matrices over GF(2^8): generator matrices and Gaussian-elimination inversion.

use crate::gf;
use crate::kernels::MUL_TABLE;

/// A row-major matrix over GF(2^8), as [`LinearCode`](crate::LinearCode) hands out generators and decode
/// rows. Read it through `data` (row-major, `rows * cols` bytes), [`get`](Matrix::get) or
/// [`row`](Matrix::row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<u8>,
}

impl Matrix {
    pub(crate) fn zero(rows: usize, cols: usize) -> Matrix {
        Matrix {
            rows,
            cols,
            data: vec![0; rows * cols],
        }
    }

    #[cfg(test)]
    pub(crate) fn identity(n: usize) -> Matrix {
        let mut m = Matrix::zero(n, n);
        for i in 0..n {
            m.set(i, i, 1);
        }
        m
    }

    /// Entry (r, c). Panics if r >= rows or c >= cols, as slice indexing does.
    #[inline]
    pub fn get(&self, r: usize, c: usize) -> u8 {
        self.data[r * self.cols + c]
    }

    #[inline]
    pub(crate) fn set(&mut self, r: usize, c: usize, v: u8) {
        self.data[r * self.cols + c] = v;
    }

    /// Row r. Panics if r >= rows, as slice indexing does.
    pub fn row(&self, r: usize) -> &[u8] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// The matrix made of the given rows, in that order.
    pub(crate) fn select_rows(&self, rows: &[usize]) -> Matrix {
        let mut m = Matrix::zero(rows.len(), self.cols);
        for (i, &r) in rows.iter().enumerate() {
            m.data[i * self.cols..(i + 1) * self.cols].copy_from_slice(self.row(r));
        }
        m
    }

    /// self * other.
    pub(crate) fn mul(&self, other: &Matrix) -> Matrix {
        assert_eq!(self.cols, other.rows);
        let mut out = Matrix::zero(self.rows, other.cols);
        for i in 0..self.rows {
            for j in 0..other.cols {
                let mut acc = 0u8;
                for t in 0..self.cols {
                    acc ^= gf::mul(self.get(i, t), other.get(t, j));
                }
                out.set(i, j, acc);
            }
        }
        out
    }

    /// The inverse of a square matrix, or `None` if it is singular (Gauss-Jordan elimination).
    pub(crate) fn invert(&self) -> Option<Matrix> {
        assert_eq!(self.rows, self.cols, "only square matrices invert");
        let n = self.rows;
        let mut a = self.data.clone();
        let mut inv = Matrix::zero(n, n);
        invert_into(&mut a, &mut inv.data, n).then_some(inv)
    }
}

/// Invert the n x n row-major matrix `a` (destroyed) into `inv` by Gauss-Jordan elimination; false if
/// it is singular. Row operations go through the product table's row of the factor (one look-up per
/// entry, no branches), and the pivot row's entries left of the pivot are zero by then, so `a` is only
/// updated from the pivot column on. Works on caller-provided buffers, so a decode plan made on every
/// call needs no allocation for it.
pub(crate) fn invert_into(a: &mut [u8], inv: &mut [u8], n: usize) -> bool {
    assert!(a.len() == n * n && inv.len() == n * n);
    inv.fill(0);
    for i in 0..n {
        inv[i * n + i] = 1;
    }
    for col in 0..n {
        // Find a pivot.
        let Some(pivot) = (col..n).find(|&r| a[r * n + col] != 0) else {
            return false;
        };
        if pivot != col {
            for c in 0..n {
                a.swap(pivot * n + c, col * n + c);
                inv.swap(pivot * n + c, col * n + c);
            }
        }
        // Scale the pivot row to 1.
        let p = gf::inv(a[col * n + col]);
        if p != 1 {
            let t = &MUL_TABLE[p as usize];
            for c in col..n {
                a[col * n + c] = t[a[col * n + c] as usize];
            }
            for c in 0..n {
                inv[col * n + c] = t[inv[col * n + c] as usize];
            }
        }
        // Eliminate the column from every other row.
        for r in 0..n {
            let f = a[r * n + col];
            if r == col || f == 0 {
                continue;
            }
            let t = &MUL_TABLE[f as usize];
            for c in col..n {
                a[r * n + c] ^= t[a[col * n + c] as usize];
            }
            for c in 0..n {
                inv[r * n + c] ^= t[inv[col * n + c] as usize];
            }
        }
    }
    true
}

/// The systematic n x k generator derived from a Vandermonde matrix: V[i][j] = i^j over the n distinct
/// points 0..n-1, multiplied on the right by the inverse of its top k x k block. Any k rows of V are
/// independent (distinct points), and right-multiplying by an invertible matrix keeps that, so every
/// k x k submatrix of the result is invertible: the code is MDS for any k + m <= 256.
pub(crate) fn vandermonde_systematic(k: usize, m: usize) -> Matrix {
    let n = k + m;
    assert!(k >= 1 && n <= 256);
    let mut v = Matrix::zero(n, k);
    for i in 0..n {
        for j in 0..k {
            v.set(i, j, gf::pow(i as u8, j));
        }
    }
    let top = v.select_rows(&(0..k).collect::<Vec<_>>());
    let top_inv = top
        .invert()
        .expect("a Vandermonde matrix on distinct points is invertible");
    let mut g = v.mul(&top_inv);
    // Clean the identity exactly (it already is, by construction).
    for i in 0..k {
        for j in 0..k {
            g.set(i, j, (i == j) as u8);
        }
    }
    g
}

/// The n x k generator of ISA-L's `gf_gen_cauchy1_matrix`: identity on top, then row i (k <= i < n),
/// column j holds 1 / (i XOR j). Every square submatrix of a Cauchy matrix is invertible, so the code is
/// MDS for any k + m <= 256; keeping ISA-L's exact layout makes parity byte-identical to ISA-L's.
pub(crate) fn cauchy1(k: usize, m: usize) -> Matrix {
    let n = k + m;
    assert!(k >= 1 && n <= 256);
    let mut g = Matrix::zero(n, k);
    for i in 0..k {
        g.set(i, i, 1);
    }
    for i in k..n {
        for j in 0..k {
            g.set(i, j, gf::inv((i ^ j) as u8));
        }
    }
    g
}

/// RAID-6 generator: identity, P = all ones, Q = 2^j.
pub(crate) fn raid6(k: usize) -> Matrix {
    assert!((1..=255).contains(&k));
    let mut g = Matrix::zero(k + 2, k);
    for j in 0..k {
        g.set(j, j, 1);
        g.set(k, j, 1);
        g.set(k + 1, j, gf::pow(2, j));
    }
    g
}

/// RAID-5 generator: identity and one all-ones parity row.
pub(crate) fn xor_parity(k: usize) -> Matrix {
    let mut g = Matrix::zero(k + 1, k);
    for j in 0..k {
        g.set(j, j, 1);
        g.set(k, j, 1);
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invert_roundtrip() {
        let g = cauchy1(6, 3);
        let sub = g.select_rows(&[1, 6, 7, 3, 8, 0]);
        let inv = sub.invert().unwrap();
        assert_eq!(sub.mul(&inv), Matrix::identity(6));
        assert_eq!(inv.mul(&sub), Matrix::identity(6));
    }

    #[test]
    fn singular_is_none() {
        let mut m = Matrix::identity(3);
        m.set(2, 2, 0);
        assert!(m.invert().is_none());
    }

    #[test]
    fn systematic_vandermonde_top_is_identity() {
        let g = vandermonde_systematic(5, 3);
        for i in 0..5 {
            for j in 0..5 {
                assert_eq!(g.get(i, j), (i == j) as u8);
            }
        }
    }
}
