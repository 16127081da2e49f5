//! The seed's Rabin segmentation (§3.4): a Rabin fingerprint over a sliding window of `window_bytes`,
//! a cut where its low log2(avg) bits are all zero, bounded by min and max segment sizes.
//!
//! The fingerprint is the window's bytes read as a polynomial over GF(2), reduced modulo an irreducible
//! polynomial of degree 53 (`POLY`). Sliding one byte: remove the outgoing byte's term with `out_table`,
//! multiply by x^8 and add the new byte, reducing the 8 bits that overflow with `mod_table`. The window
//! restarts at every segment start, so a cut depends only on the bytes since the previous cut (a shifted
//! file re-synchronises one segment after the edit). Hashing starts `window_bytes` before `min_bytes`
//! so the first cut candidate at `min_bytes` sees a full window.

/// x^53 + ... + 1, irreducible over GF(2) (checked by `tests::poly_is_irreducible`, Ben-Or's test).
pub const POLY: u64 = 0x2c_13c8_da67_9f81;
const DEGREE: u32 = 53;
const SHIFT: u32 = DEGREE - 8;

/// Rolling Rabin chunker parameters and tables.
#[derive(Clone)]
pub struct Rabin {
    window_bytes: usize,
    min_bytes: usize,
    max_bytes: usize,
    mask: u64,
    mod_table: Box<[u64; 256]>,
    out_table: Box<[u64; 256]>,
}

/// (p · x^k) reduced modulo POLY, bit by bit (the slow reference, used to build the tables).
fn mul_xk_mod(mut p: u64, k: u32) -> u64 {
    for _ in 0..k {
        p <<= 1;
        if p >> DEGREE & 1 == 1 {
            p ^= POLY;
        }
    }
    p
}

impl Rabin {
    /// `avg_bytes` must be a power of two; min < avg < max (checked by the configuration parser).
    pub fn new(window_bytes: usize, min_bytes: usize, avg_bytes: usize, max_bytes: usize) -> Rabin {
        assert!(avg_bytes.is_power_of_two() && min_bytes < max_bytes && window_bytes >= 1);
        let mut mod_table = Box::new([0u64; 256]);
        let mut out_table = Box::new([0u64; 256]);
        for i in 0..256u64 {
            // The digest after `<< 8` has bits DEGREE..DEGREE+8 = i: replace them by their residue.
            mod_table[i as usize] = mul_xk_mod(i, DEGREE) ^ (i << DEGREE);
            // The oldest byte's term: i · x^(8·(window-1)) mod POLY, cancelled when it leaves.
            out_table[i as usize] = mul_xk_mod(i, 8 * (window_bytes as u32 - 1));
        }
        Rabin {
            window_bytes,
            min_bytes,
            max_bytes,
            mask: avg_bytes as u64 - 1,
            mod_table,
            out_table,
        }
    }

    /// The largest segment.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    #[inline(always)]
    fn append(&self, d: u64, b: u8) -> u64 {
        let top = (d >> SHIFT) as usize;
        ((d << 8) | b as u64) ^ self.mod_table[top]
    }

    /// The digest of `window` (at most `window_bytes` long) computed from scratch.
    pub fn digest(&self, window: &[u8]) -> u64 {
        window.iter().fold(0, |d, &b| self.append(d, b))
    }

    /// Length of the next segment of `data` (which starts at a segment start). When `data` is shorter than
    /// `max_bytes` and holds no cut, the whole of `data` is returned: the caller calls this only with at
    /// least `max_bytes` bytes, or at the end of the file.
    pub fn cut(&self, data: &[u8]) -> usize {
        let n = data.len();
        if n <= self.min_bytes {
            return n;
        }
        let end = n.min(self.max_bytes);
        let w = self.window_bytes;
        let start = self.min_bytes.saturating_sub(w);
        let mut d = 0u64;
        // Fill the window up to the first candidate position.
        for &b in &data[start..self.min_bytes] {
            d = self.append(d, b);
        }
        // Candidate i: the segment is data[..i]; the window is data[i-w..i].
        let mut i = self.min_bytes;
        while i < end {
            if d & self.mask == 0 && i - start >= w {
                return i;
            }
            if i >= start + w {
                d ^= self.out_table[data[i - w] as usize];
            }
            d = self.append(d, data[i]);
            i += 1;
        }
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecstack_base::Rng;

    fn deg(a: u128) -> i32 {
        127 - a.leading_zeros() as i32
    }
    fn pmod(mut a: u128, m: u128) -> u128 {
        while a != 0 && deg(a) >= deg(m) {
            a ^= m << (deg(a) - deg(m));
        }
        a
    }
    fn pmulmod(a: u128, b: u128, m: u128) -> u128 {
        let (mut r, mut a, mut b) = (0u128, a, b);
        while b != 0 {
            if b & 1 == 1 {
                r ^= a;
            }
            b >>= 1;
            a = pmod(a << 1, m);
        }
        r
    }
    fn gcd(mut a: u128, mut b: u128) -> u128 {
        while b != 0 {
            let r = pmod(a, b);
            a = b;
            b = r;
        }
        a
    }

    #[test]
    fn poly_is_irreducible() {
        // Ben-Or: P of degree n is irreducible iff gcd(P, x^(2^i) - x) = 1 for i = 1..=n/2.
        let p = POLY as u128;
        assert_eq!(deg(p), DEGREE as i32);
        let mut xp = 2u128;
        for _ in 1..=DEGREE / 2 {
            xp = pmulmod(xp, xp, p);
            assert_eq!(gcd(p, xp ^ 2), 1);
        }
    }

    /// The rolling digest equals a from-scratch long division of the window (an independent model).
    #[test]
    fn rolling_digest_matches_long_division() {
        let w = 48;
        let r = Rabin::new(w, 64, 256, 4096);
        let mut rng = Rng::new(7);
        let mut data = vec![0u8; 2000];
        rng.fill(&mut data);
        let mut d = 0u64;
        for i in 0..data.len() {
            if i >= w {
                d ^= r.out_table[data[i - w] as usize];
            }
            d = r.append(d, data[i]);
            let lo = (i + 1).saturating_sub(w);
            // Long division of the window's bits as one big polynomial.
            let mut rem: u128 = 0;
            for &b in &data[lo..=i] {
                for bit in (0..8).rev() {
                    rem = pmod((rem << 1) | ((b >> bit) & 1) as u128, POLY as u128);
                }
            }
            assert_eq!(d as u128, rem, "position {i}");
            assert_eq!(d, r.digest(&data[lo..=i]));
        }
    }

    #[test]
    fn cuts_respect_bounds_and_average() {
        let r = Rabin::new(48, 2048, 8192, 32768);
        let mut rng = Rng::new(11);
        let mut data = vec![0u8; 4 << 20];
        rng.fill(&mut data);
        let (mut pos, mut count) = (0, 0);
        while pos < data.len() {
            let n = r.cut(&data[pos..]);
            assert!(n >= 1);
            if pos + n < data.len() {
                assert!((2048..=32768).contains(&n), "segment {n}");
            }
            pos += n;
            count += 1;
        }
        let avg = data.len() / count;
        // min + 2^13 expected on random data; allow a wide band.
        assert!((6000..16000).contains(&avg), "average {avg}");
    }
}
