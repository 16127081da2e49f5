//! Scalar arithmetic in GF(2^8) with the primitive polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d),
//! the field ISA-L, Jerasure and Linux RAID-6 use. Addition is XOR; multiplication goes through
//! log/exp tables built at compile time.

/// The field polynomial (with the x^8 term).
pub const POLY: u16 = 0x11d;

pub(crate) const fn build_exp_log() -> ([u8; 512], [u8; 256]) {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        exp[i + 255] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    // exp[510], exp[511] are never reached through log sums (max 254 + 254 = 508).
    (exp, log)
}

const TABLES: ([u8; 512], [u8; 256]) = build_exp_log();
/// exp[i] = 2^i, doubled so that exp[log a + log b] needs no modulo.
pub static EXP: [u8; 512] = TABLES.0;
/// log[a] for a != 0 (log[0] is unused).
pub static LOG: [u8; 256] = TABLES.1;

/// a * b in GF(2^8).
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// Multiplicative inverse; `inv(0)` is defined as 0 (as ISA-L's `gf_inv` does).
#[inline]
pub fn inv(a: u8) -> u8 {
    if a == 0 {
        0
    } else {
        EXP[255 - LOG[a as usize] as usize]
    }
}

/// a / b; b must be non-zero.
#[cfg(test)]
pub fn div(a: u8, b: u8) -> u8 {
    debug_assert!(b != 0);
    mul(a, inv(b))
}

/// a^n.
pub fn pow(a: u8, n: usize) -> u8 {
    if n == 0 {
        return 1;
    }
    if a == 0 {
        return 0;
    }
    EXP[(LOG[a as usize] as usize * n) % 255]
}

/// Split-nibble tables for the PSHUFB kernels: `lo[i] = c * i`, `hi[i] = c * (i << 4)`.
#[cfg(test)]
pub fn nibble_tables(c: u8) -> [u8; 32] {
    let mut t = [0u8; 32];
    for i in 0..16u8 {
        t[i as usize] = mul(c, i);
        t[16 + i as usize] = mul(c, i << 4);
    }
    t
}

/// The 8x8 bit matrix of "multiply by c" in the layout GF2P8AFFINEQB expects: output bit i is the parity
/// of (byte 7-i of the matrix) AND x. Multiplication by a constant is GF(2)-linear, so this works for any
/// field polynomial (the instruction's own GF2P8MULB is fixed to 0x11b and cannot be used here).
///
/// A look-up in a 2 KiB table built at compile time (decode plans made on every call expand one matrix
/// per coefficient).
#[inline]
pub fn affine_matrix(c: u8) -> u64 {
    AFFINE[c as usize]
}

const fn build_affine() -> [u64; 256] {
    let (exp, log) = TABLES;
    let mut t = [0u64; 256];
    let mut c = 1;
    while c < 256 {
        // Column j of the linear map is c * 2^j.
        let mut cols = [0u8; 8];
        let mut j = 0;
        while j < 8 {
            cols[j] = exp[log[c] as usize + j];
            j += 1;
        }
        let mut m = 0u64;
        let mut i = 0;
        while i < 8 {
            let mut row = 0u8;
            let mut j = 0;
            while j < 8 {
                row |= ((cols[j] >> i) & 1) << j;
                j += 1;
            }
            m |= (row as u64) << (8 * (7 - i));
            i += 1;
        }
        t[c] = m;
        c += 1;
    }
    t
}

static AFFINE: [u64; 256] = build_affine();

#[cfg(test)]
mod tests {
    use super::*;

    fn slow_mul(mut a: u8, mut b: u8) -> u8 {
        let mut p = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                p ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= (POLY & 0xff) as u8;
            }
            b >>= 1;
        }
        p
    }

    #[test]
    fn table_mul_matches_shift_and_add() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow_mul(a, b), "{a} * {b}");
            }
        }
    }

    #[test]
    fn inverses() {
        assert_eq!(inv(0), 0);
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1, "a={a}");
            assert_eq!(div(a, a), 1);
        }
        // 2 generates the multiplicative group: 255 distinct powers.
        let mut seen = [false; 256];
        for i in 0..255 {
            let p = pow(2, i);
            assert!(!seen[p as usize]);
            seen[p as usize] = true;
        }
    }

    #[test]
    fn affine_matrix_multiplies() {
        // Software model of GF2P8AFFINEQB (imm8 = 0).
        fn affine(m: u64, x: u8) -> u8 {
            let mut r = 0u8;
            for i in 0..8 {
                let row = (m >> (8 * (7 - i))) as u8;
                r |= (((row & x).count_ones() & 1) as u8) << i;
            }
            r
        }
        for c in 0..=255u8 {
            let m = affine_matrix(c);
            for x in 0..=255u8 {
                assert_eq!(affine(m, x), mul(c, x));
            }
        }
    }
}
