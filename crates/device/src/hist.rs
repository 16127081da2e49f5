//! Latency histograms for the simulators: the stack's one histogram type, [`ecstack_base::LatencyHistogram`]
//! (HDR, 3 significant digits, constant memory), re-exported here for the device layer's users.

pub use ecstack_base::LatencyHistogram;
