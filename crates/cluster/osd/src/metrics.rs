//! The OSD's metrics, kept in `prometheus-client` types and rendered by it in the Prometheus text
//! format: operations, errors and latency per RPC, bytes in and out, degraded reads, repairs,
//! recovery, and the chunk store's size. Every series carries the label `osd`.

use std::borrow::Cow;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::blockio::BlockCounters;

/// The RPCs an OSD serves, in the order of the proto.
pub const OPS: [&str; 13] = [
    "write_segment",
    "read_segment",
    "read_plan",
    "update_segment",
    "put_chunk",
    "get_chunk",
    "update_chunk",
    "apply_delta",
    "chunk_version",
    "delete_chunk",
    "put_blocks",
    "get_blocks",
    "delete_blocks",
];

/// Upper bounds of the latency buckets, seconds.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// `op` and `result` ("ok" or "error").
type OpResult = [(&'static str, &'static str); 2];
/// `op`.
type Op = [(&'static str, &'static str); 1];

fn op_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

#[derive(Debug)]
pub struct Metrics {
    ops: Family<OpResult, Counter>,
    op_seconds: Family<Op, Histogram, fn() -> Histogram>,
    pub bytes_in: Counter,
    pub bytes_out: Counter,
    pub degraded_reads: Counter,
    pub repairs: Counter,
    pub stale_marked: Counter,
    pub recovery_chunks: Counter,
    pub recovery_bytes: Counter,
    pub recovery_failures: Counter,
    pub lease_refusals: Counter,
    pub slow_peer_fetches: Counter,
    pub new_segment_writes: Counter,
    /// The block I/O queue's counters (`blockio.rs`).
    pub blocks: BlockCounters,
    pub streams_admitted: Counter,
    pub streams_refused: Counter,
    pub streams_preempted: Counter,
}

/// Gauges of robust objects' blocks, as [`Metrics::render`] shows them.
#[derive(Debug, Clone, Copy, Default)]
pub struct BlockGauges {
    pub robust_blocks: u64,
    pub queue_depth: u64,
    pub read_bytes_per_s: u64,
    pub write_bytes_per_s: u64,
    pub streams: u64,
}

fn op_result(op: usize, ok: bool) -> OpResult {
    [("op", OPS[op]), ("result", if ok { "ok" } else { "error" })]
}

impl Default for Metrics {
    fn default() -> Self {
        let m = Metrics {
            ops: Family::default(),
            op_seconds: Family::new_with_constructor(op_histogram as fn() -> Histogram),
            bytes_in: Counter::default(),
            bytes_out: Counter::default(),
            degraded_reads: Counter::default(),
            repairs: Counter::default(),
            stale_marked: Counter::default(),
            recovery_chunks: Counter::default(),
            recovery_bytes: Counter::default(),
            recovery_failures: Counter::default(),
            lease_refusals: Counter::default(),
            slow_peer_fetches: Counter::default(),
            new_segment_writes: Counter::default(),
            blocks: BlockCounters::default(),
            streams_admitted: Counter::default(),
            streams_refused: Counter::default(),
            streams_preempted: Counter::default(),
        };
        // Every operation's series exist from the start, at zero.
        for (i, op) in OPS.iter().enumerate() {
            for ok in [true, false] {
                let _ = m.ops.get_or_create(&op_result(i, ok));
            }
            let _ = m.op_seconds.get_or_create(&[("op", op)]);
        }
        m
    }
}

impl Metrics {
    /// Record one finished RPC (`op` indexes [`OPS`]).
    pub fn record(&self, op: usize, ok: bool, took: Duration) {
        if op >= OPS.len() {
            return;
        }
        self.ops.get_or_create(&op_result(op, ok)).inc();
        self.op_seconds
            .get_or_create(&[("op", OPS[op])])
            .observe(took.as_secs_f64());
    }

    pub fn add(counter: &Counter, n: u64) {
        counter.inc_by(n);
    }

    /// RPCs `op` (a name in [`OPS`]) served so far, ok and failed.
    pub fn served(&self, op: &str) -> u64 {
        let Some(i) = OPS.iter().position(|o| *o == op) else {
            return 0;
        };
        [true, false]
            .iter()
            .filter_map(|&ok| self.ops.get(&op_result(i, ok)).map(|c| c.get()))
            .sum()
    }

    /// The Prometheus text exposition; `chunks` and `stored_bytes` come from the chunk store,
    /// `blocks` from the store and the block I/O queue.
    pub fn render(
        &self,
        osd_id: u32,
        chunks: u64,
        stored_bytes: u64,
        blocks: &BlockGauges,
    ) -> String {
        let osd = (Cow::Borrowed("osd"), Cow::Owned(osd_id.to_string()));
        let mut r = Registry::with_labels(std::iter::once(osd));
        // prometheus-client appends `_total` to counter names.
        r.register(
            "ecstack_osd_ops",
            "OSD RPCs served, by operation and result",
            self.ops.clone(),
        );
        r.register(
            "ecstack_osd_op_seconds",
            "OSD RPC latency",
            self.op_seconds.clone(),
        );
        let counters: [(&str, &str, &Counter); 19] = [
            (
                "ecstack_osd_bytes_in",
                "segment and chunk bytes received",
                &self.bytes_in,
            ),
            (
                "ecstack_osd_bytes_out",
                "segment and chunk bytes sent",
                &self.bytes_out,
            ),
            (
                "ecstack_osd_degraded_reads",
                "reads that decoded missing chunks",
                &self.degraded_reads,
            ),
            (
                "ecstack_osd_repairs",
                "chunks rewritten after a checksum failure or a stale version",
                &self.repairs,
            ),
            (
                "ecstack_osd_stale_marked",
                "chunks this primary marked stale at the MDS",
                &self.stale_marked,
            ),
            (
                "ecstack_osd_recovery_chunks",
                "chunks rebuilt by recovery",
                &self.recovery_chunks,
            ),
            (
                "ecstack_osd_recovery_bytes",
                "bytes of chunks rebuilt by recovery",
                &self.recovery_bytes,
            ),
            (
                "ecstack_osd_recovery_failures",
                "recovery tasks that failed (retried by the MDS)",
                &self.recovery_failures,
            ),
            (
                "ecstack_osd_lease_refusals",
                "primary work refused or stopped because the primary lease had ended (late heartbeats)",
                &self.lease_refusals,
            ),
            (
                "ecstack_osd_slow_peer_fetches",
                "chunk reads from a peer OSD that took 10 s or more (or gave up waiting)",
                &self.slow_peer_fetches,
            ),
            (
                "ecstack_osd_new_segment_writes",
                "writes of a just-allocated segment that asked no holder for its versions",
                &self.new_segment_writes,
            ),
            (
                "ecstack_osd_blocks_written",
                "coded blocks of robust objects stored (durable)",
                &self.blocks.blocks_written,
            ),
            (
                "ecstack_osd_blocks_read",
                "coded blocks read whole for GetBlocks streams",
                &self.blocks.blocks_read,
            ),
            (
                "ecstack_osd_blocks_lost",
                "coded blocks that failed a checksum when read (not served)",
                &self.blocks.blocks_lost,
            ),
            (
                "ecstack_osd_cancelled_reads",
                "block reads cancelled (queued reads of a dropped stream, or stopped in service)",
                &self.blocks.cancelled_reads,
            ),
            (
                "ecstack_osd_bytes_read_after_cancel",
                "bytes a block read in service read after its stream was cancelled",
                &self.blocks.bytes_read_after_cancel,
            ),
            (
                "ecstack_osd_streams_admitted",
                "block streams admitted",
                &self.streams_admitted,
            ),
            (
                "ecstack_osd_streams_refused",
                "block streams refused by admission control",
                &self.streams_refused,
            ),
            (
                "ecstack_osd_streams_preempted",
                "normal block streams ended to admit a high-priority one",
                &self.streams_preempted,
            ),
        ];
        for (name, help, c) in counters {
            r.register(name, help, c.clone());
        }
        ecstack_rpc::metrics::register_gauges(
            &mut r,
            &[
                ("ecstack_osd_chunks", "chunks in the store", chunks),
                (
                    "ecstack_osd_stored_bytes",
                    "bytes of chunk and block files in the store",
                    stored_bytes,
                ),
                (
                    "ecstack_osd_robust_blocks",
                    "coded blocks of robust objects in the store",
                    blocks.robust_blocks,
                ),
                (
                    "ecstack_osd_queue_depth",
                    "block and chunk store requests queued or in service",
                    blocks.queue_depth,
                ),
                (
                    "ecstack_osd_store_read_bytes_per_second",
                    "measured store read throughput (bytes over busy time, decayed)",
                    blocks.read_bytes_per_s,
                ),
                (
                    "ecstack_osd_store_write_bytes_per_second",
                    "measured store write throughput (bytes over busy time, decayed)",
                    blocks.write_bytes_per_s,
                ),
                (
                    "ecstack_osd_block_streams",
                    "block streams admitted and running",
                    blocks.streams,
                ),
            ],
        );
        ecstack_rpc::metrics::encode(&r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.record(1, true, Duration::from_micros(300));
        m.record(1, true, Duration::from_millis(30));
        m.record(1, false, Duration::from_secs(9));
        Metrics::add(&m.bytes_out, 42);
        let t = m.render(3, 7, 9000, &BlockGauges::default());
        assert!(t.contains("ecstack_osd_ops_total{osd=\"3\",op=\"read_segment\",result=\"ok\"} 2"));
        assert!(
            t.contains("ecstack_osd_ops_total{osd=\"3\",op=\"read_segment\",result=\"error\"} 1")
        );
        assert!(t.contains(
            "ecstack_osd_op_seconds_bucket{osd=\"3\",op=\"read_segment\",le=\"0.0005\"} 1"
        ));
        assert!(t.contains(
            "ecstack_osd_op_seconds_bucket{osd=\"3\",op=\"read_segment\",le=\"0.05\"} 2"
        ));
        assert!(t.contains(
            "ecstack_osd_op_seconds_bucket{osd=\"3\",op=\"read_segment\",le=\"+Inf\"} 3"
        ));
        assert!(t.contains("ecstack_osd_op_seconds_count{osd=\"3\",op=\"read_segment\"} 3"));
        assert!(t.contains("ecstack_osd_bytes_out_total{osd=\"3\"} 42"));
        assert!(t.contains("ecstack_osd_chunks{osd=\"3\"} 7"));
    }
}
