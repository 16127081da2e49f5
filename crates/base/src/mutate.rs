//! Mutation of valid byte images for decoder fuzzing on stable Rust: bit flips, byte overwrites,
//! truncations, extensions and splices (ranges copied within an image or from a donor image), each
//! case drawn from a seed so a failing case replays exactly.

use crate::Rng;

/// Cases each mutation target runs: `ECSTACK_FUZZ_CASES` if set (the long mode sets 1,000,000),
/// otherwise `default` (small enough for every `cargo test`).
pub fn fuzz_cases(default: u64) -> u64 {
    match std::env::var("ECSTACK_FUZZ_CASES") {
        Ok(v) => {
            v.trim().replace('_', "").parse().unwrap_or_else(|_| {
                panic!("ECSTACK_FUZZ_CASES must be a number of cases, got '{v}'")
            })
        }
        Err(_) => default,
    }
}

/// The seed of the sweep: `ECSTACK_SEED` if set, otherwise `default`.
pub fn fuzz_seed(default: u64) -> u64 {
    match std::env::var("ECSTACK_SEED") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("ECSTACK_SEED must be a number, got '{v}'")),
        Err(_) => default,
    }
}

/// The generator of case `case` of a sweep with seed `seed`.
pub fn case_rng(seed: u64, case: u64) -> Rng {
    Rng::new(seed ^ case.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// One to four mutations of `valid`; splices may copy from `donors` (other valid images).
pub fn mutate(rng: &mut Rng, valid: &[u8], donors: &[&[u8]]) -> Vec<u8> {
    let mut b = valid.to_vec();
    for _ in 0..1 + rng.below(4) {
        mutate_once(rng, &mut b, donors);
    }
    b
}

fn mutate_once(rng: &mut Rng, b: &mut Vec<u8>, donors: &[&[u8]]) {
    let at = |rng: &mut Rng, len: usize| rng.below(len as u64 + 1) as usize;
    match rng.below(8) {
        // Flip one bit (the most common damage), or a few in one byte.
        0 | 1 if !b.is_empty() => {
            let i = rng.below(b.len() as u64) as usize;
            b[i] ^= 1 << rng.below(8);
        }
        2 if !b.is_empty() => {
            let i = rng.below(b.len() as u64) as usize;
            b[i] = rng.next_u64() as u8;
        }
        // Overwrite a little-endian field-sized run with an extreme value.
        3 if b.len() >= 8 => {
            let i = rng.below(b.len() as u64 - 7) as usize;
            let w = [0u64, 1, u64::MAX, u64::MAX / 2 + 1, rng.next_u64()][rng.below(5) as usize];
            let n = [1usize, 2, 4, 8][rng.below(4) as usize];
            b[i..i + n].copy_from_slice(&w.to_le_bytes()[..n]);
        }
        // Truncate.
        4 => {
            let n = at(rng, b.len());
            b.truncate(n);
        }
        // Extend with random bytes.
        5 => {
            let mut extra = vec![0u8; 1 + rng.below(32) as usize];
            rng.fill(&mut extra);
            b.extend_from_slice(&extra);
        }
        // Splice: a range of this image or of a donor, copied over or inserted at a random place.
        _ => {
            let src: Vec<u8> = match donors.len() {
                0 => b.clone(),
                n => match rng.below(n as u64 + 1) as usize {
                    0 => b.clone(),
                    i => donors[i - 1].to_vec(),
                },
            };
            if src.is_empty() {
                return;
            }
            let s = rng.below(src.len() as u64) as usize;
            let len = 1 + rng.below((src.len() - s) as u64) as usize;
            let piece = &src[s..s + len];
            let d = at(rng, b.len());
            if rng.below(2) == 0 {
                let end = (d + len).min(b.len());
                b.splice(d..end, piece.iter().copied());
            } else {
                b.splice(d..d, piece.iter().copied());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_change_images_and_replay() {
        let valid: Vec<u8> = (0..64).collect();
        let mut changed = 0;
        for case in 0..1000 {
            let a = mutate(&mut case_rng(1, case), &valid, &[&[9; 16]]);
            let b = mutate(&mut case_rng(1, case), &valid, &[&[9; 16]]);
            assert_eq!(a, b, "case {case} does not replay");
            changed += (a != valid) as u32;
        }
        assert!(
            changed > 950,
            "only {changed} of 1000 mutations changed the image"
        );
    }
}
