//! Helpers shared by the NBD integration tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use ecstack_device::{BlockDevice, MemDevice, Metered};
use ecstack_nbd::{ServeConfig, Server};

pub type MeteredMem = Metered<MemDevice>;

/// Config on an ephemeral loopback port.
pub fn cfg() -> ServeConfig {
    ServeConfig {
        addr: "127.0.0.1:0".parse::<SocketAddr>().unwrap(),
        ..ServeConfig::default()
    }
}

/// A metered memory device of `size` bytes served on an ephemeral port.
pub fn mem_server(size: u64, cfg: ServeConfig) -> (Server, Arc<MeteredMem>) {
    let dev = Arc::new(Metered::new(MemDevice::new(size).unwrap()));
    let server = Server::start(dev.clone() as Arc<dyn BlockDevice>, None, cfg).unwrap();
    (server, dev)
}

/// Deterministic pseudo-random bytes (the workspace's one seeded PRNG).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    ecstack_base::Rng::new(seed).fill(&mut v);
    v
}
