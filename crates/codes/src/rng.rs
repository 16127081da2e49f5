//! The seeded PRNG lives in `ecstack-base`; rateless codes derive their coding graph from a seed stored
//! with the data, so the generator is ours and never changes with a dependency's version.

pub use ecstack_base::rng::Rng;
