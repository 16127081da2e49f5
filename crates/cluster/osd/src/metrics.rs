//! The OSD's counters in the Prometheus text format: operations, errors and latency per RPC,
//! bytes in and out, degraded reads, repairs, recovery. (To move onto `ecstack_rpc`'s shared
//! metrics types once they exist; the names stay.)

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The RPCs an OSD serves, in the order of the proto.
pub const OPS: [&str; 10] = [
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
];

/// Upper bounds of the latency buckets, seconds.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Debug, Default)]
struct OpStats {
    ok: AtomicU64,
    errors: AtomicU64,
    /// Cumulative count per bucket is computed when rendering; these are per-bucket counts, the
    /// last one for +Inf.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    micros: AtomicU64,
}

#[derive(Debug, Default)]
pub struct Metrics {
    ops: [OpStats; OPS.len()],
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub degraded_reads: AtomicU64,
    pub repairs: AtomicU64,
    pub stale_marked: AtomicU64,
    pub recovery_chunks: AtomicU64,
    pub recovery_bytes: AtomicU64,
    pub recovery_failures: AtomicU64,
    pub lease_refusals: AtomicU64,
    pub slow_peer_fetches: AtomicU64,
    pub new_segment_writes: AtomicU64,
}

impl Metrics {
    /// Record one finished RPC (`op` indexes [`OPS`]).
    pub fn record(&self, op: usize, ok: bool, took: Duration) {
        let Some(s) = self.ops.get(op) else { return };
        if ok {
            s.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            s.errors.fetch_add(1, Ordering::Relaxed);
        }
        let secs = took.as_secs_f64();
        let b = LATENCY_BUCKETS
            .iter()
            .position(|&ub| secs <= ub)
            .unwrap_or(LATENCY_BUCKETS.len());
        s.buckets[b].fetch_add(1, Ordering::Relaxed);
        s.micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// RPCs `op` (a name in [`OPS`]) served so far, ok and failed.
    pub fn served(&self, op: &str) -> u64 {
        OPS.iter().position(|o| *o == op).map_or(0, |i| {
            self.ops[i].ok.load(Ordering::Relaxed) + self.ops[i].errors.load(Ordering::Relaxed)
        })
    }

    /// The Prometheus text exposition; `chunks` and `stored_bytes` come from the chunk store.
    pub fn render(&self, osd_id: u32, chunks: u64, stored_bytes: u64) -> String {
        let mut t = String::new();
        let l = |t: &mut String, name: &str, help: &str, kind: &str| {
            let _ = writeln!(t, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        l(
            &mut t,
            "ecstack_osd_ops_total",
            "OSD RPCs served, by operation and result",
            "counter",
        );
        for (i, op) in OPS.iter().enumerate() {
            let s = &self.ops[i];
            for (result, v) in [("ok", &s.ok), ("error", &s.errors)] {
                let _ = writeln!(
                    t,
                    "ecstack_osd_ops_total{{osd=\"{osd_id}\",op=\"{op}\",result=\"{result}\"}} {}",
                    v.load(Ordering::Relaxed)
                );
            }
        }
        l(
            &mut t,
            "ecstack_osd_op_seconds",
            "OSD RPC latency",
            "histogram",
        );
        for (i, op) in OPS.iter().enumerate() {
            let s = &self.ops[i];
            let mut cum = 0;
            for (b, ub) in LATENCY_BUCKETS.iter().enumerate() {
                cum += s.buckets[b].load(Ordering::Relaxed);
                let _ = writeln!(
                    t,
                    "ecstack_osd_op_seconds_bucket{{osd=\"{osd_id}\",op=\"{op}\",le=\"{ub}\"}} {cum}"
                );
            }
            cum += s.buckets[LATENCY_BUCKETS.len()].load(Ordering::Relaxed);
            let _ = writeln!(
                t,
                "ecstack_osd_op_seconds_bucket{{osd=\"{osd_id}\",op=\"{op}\",le=\"+Inf\"}} {cum}"
            );
            let _ = writeln!(
                t,
                "ecstack_osd_op_seconds_sum{{osd=\"{osd_id}\",op=\"{op}\"}} {}",
                s.micros.load(Ordering::Relaxed) as f64 / 1e6
            );
            let _ = writeln!(
                t,
                "ecstack_osd_op_seconds_count{{osd=\"{osd_id}\",op=\"{op}\"}} {cum}"
            );
        }
        let counters: [(&str, &str, &AtomicU64); 11] = [
            (
                "ecstack_osd_bytes_in_total",
                "segment and chunk bytes received",
                &self.bytes_in,
            ),
            (
                "ecstack_osd_bytes_out_total",
                "segment and chunk bytes sent",
                &self.bytes_out,
            ),
            (
                "ecstack_osd_degraded_reads_total",
                "reads that decoded missing chunks",
                &self.degraded_reads,
            ),
            (
                "ecstack_osd_repairs_total",
                "chunks rewritten after a checksum failure or a stale version",
                &self.repairs,
            ),
            (
                "ecstack_osd_stale_marked_total",
                "chunks this primary marked stale at the MDS",
                &self.stale_marked,
            ),
            (
                "ecstack_osd_recovery_chunks_total",
                "chunks rebuilt by recovery",
                &self.recovery_chunks,
            ),
            (
                "ecstack_osd_recovery_bytes_total",
                "bytes of chunks rebuilt by recovery",
                &self.recovery_bytes,
            ),
            (
                "ecstack_osd_recovery_failures_total",
                "recovery tasks that failed (retried by the MDS)",
                &self.recovery_failures,
            ),
            (
                "ecstack_osd_lease_refusals_total",
                "primary work refused or stopped because the primary lease had ended (late heartbeats)",
                &self.lease_refusals,
            ),
            (
                "ecstack_osd_slow_peer_fetches_total",
                "chunk reads from a peer OSD that took 10 s or more (or gave up waiting)",
                &self.slow_peer_fetches,
            ),
            (
                "ecstack_osd_new_segment_writes_total",
                "writes of a just-allocated segment that asked no holder for its versions",
                &self.new_segment_writes,
            ),
        ];
        for (name, help, v) in counters {
            l(&mut t, name, help, "counter");
            let _ = writeln!(
                t,
                "{name}{{osd=\"{osd_id}\"}} {}",
                v.load(Ordering::Relaxed)
            );
        }
        l(&mut t, "ecstack_osd_chunks", "chunks in the store", "gauge");
        let _ = writeln!(t, "ecstack_osd_chunks{{osd=\"{osd_id}\"}} {chunks}");
        l(
            &mut t,
            "ecstack_osd_stored_bytes",
            "bytes of chunk files in the store",
            "gauge",
        );
        let _ = writeln!(
            t,
            "ecstack_osd_stored_bytes{{osd=\"{osd_id}\"}} {stored_bytes}"
        );
        t
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
        let t = m.render(3, 7, 9000);
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
