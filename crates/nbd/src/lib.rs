//! NBD server: exports any BlockDevice over the NBD protocol to unmodified clients.
