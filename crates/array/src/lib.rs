//! The array layer: a local erasure-coded block device over several BlockDevices with pluggable update schemes.
