//! The seeded PRNG used by the device models and fault injection lives in `ecstack-base`.

pub use ecstack_base::rng::SplitMix64;
