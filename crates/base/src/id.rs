//! Random ids: what tells one array, mirror or shard set from another on the same devices.
//!
//! An id must differ between two runs on one machine (two mirrors made in the same nanosecond by two
//! processes must not share one), so it comes from the operating system's randomness through a
//! version-4 UUID, never from the clock. Deterministic tests do not call this: every constructor that
//! makes an id also takes one (`OpenOptions::uuid` for arrays, `Mirror::open_with_id`,
//! `EncodeOptions::set_id`), so a seed writes the same bytes on every run.

/// A fresh random 64-bit id: the 122 random bits of a version-4 UUID folded to 64 (the two halves
/// XORed, so the fixed version and variant bits land on random ones).
pub fn random_id() -> u64 {
    let (hi, lo) = uuid::Uuid::new_v4().as_u64_pair();
    hi ^ lo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ() {
        let ids: std::collections::HashSet<u64> = (0..1000).map(|_| random_id()).collect();
        assert_eq!(ids.len(), 1000);
    }
}
