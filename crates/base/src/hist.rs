//! The one latency histogram of the stack: an HDR histogram (the `hdrhistogram` crate) of
//! nanoseconds, 3 significant digits (≤ 0.1 % relative error) from 1 ns to one hour, in constant
//! memory whatever the number of samples. Device simulators, the array's request statistics and
//! trace replay all report percentiles from it.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Largest recordable latency (one hour); longer ones are recorded as this.
pub const LATENCY_NS_MAX: u64 = 3_600_000_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;

/// Latencies in nanoseconds.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    h: Histogram<u64>,
    /// Exact extremes (the histogram itself keeps them to 3 significant digits).
    min_ns: u64,
    max_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    pub fn new() -> Self {
        // Bounds are constants that hdrhistogram accepts (low ≥ 1, high ≥ 2 × low, digits ≤ 5).
        let h = Histogram::new_with_bounds(1, LATENCY_NS_MAX, SIGNIFICANT_DIGITS)
            .expect("constant HDR bounds are valid");
        LatencyHistogram {
            h,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }

    /// Record one latency in nanoseconds (values above [`LATENCY_NS_MAX`] count as the maximum).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let ns = ns.min(LATENCY_NS_MAX);
        self.h.saturating_record(ns);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Record one latency.
    #[inline]
    pub fn record_duration(&mut self, d: Duration) {
        self.record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn count(&self) -> u64 {
        self.h.len()
    }

    /// Mean latency in nanoseconds (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.h.is_empty() {
            0.0
        } else {
            self.h.mean()
        }
    }

    /// The smallest latency recorded, exact (0 when empty).
    pub fn min(&self) -> u64 {
        if self.h.is_empty() {
            0
        } else {
            self.min_ns
        }
    }

    /// The largest latency recorded, exact (0 when empty).
    pub fn max(&self) -> u64 {
        self.max_ns
    }

    /// The latency at quantile `q` in `[0, 1]`, nanoseconds, within [min, max] (0 when empty).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.h.is_empty() {
            return 0;
        }
        let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
        self.h.value_at_quantile(q).clamp(self.min(), self.max())
    }

    /// The latency at quantile `q` in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.quantile(q) as f64 / 1000.0
    }

    /// Add every sample of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Both have the same bounds, so adding cannot fail.
        self.h
            .add(&other.h)
            .expect("histograms with equal bounds add");
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Forget every sample.
    pub fn reset(&mut self) {
        self.h.reset();
        self.min_ns = u64::MAX;
        self.max_ns = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_within_a_tenth_of_a_percent() {
        let mut h = LatencyHistogram::new();
        for v in 1..=100_000u64 {
            h.record(v);
        }
        assert_eq!(h.count(), 100_000);
        for (q, want) in [(0.5, 50_000.0), (0.9, 90_000.0), (0.99, 99_000.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - want).abs() / want <= 0.001, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.quantile(1.0), 100_000);
        assert_eq!((h.min(), h.max()), (1, 100_000));
        assert!((h.mean() - 50_000.5).abs() / 50_000.5 < 0.001);
    }

    #[test]
    fn small_empty_huge_and_merged() {
        let mut small = LatencyHistogram::new();
        assert_eq!(
            (small.quantile(0.5), small.mean(), small.min(), small.max()),
            (0, 0.0, 0, 0)
        );
        small.record(7);
        assert_eq!(small.quantile(0.5), 7);
        assert_eq!(small.quantile(f64::NAN), 7);
        let mut huge = LatencyHistogram::new();
        huge.record_duration(Duration::from_secs(10 * 3600));
        assert_eq!((huge.max(), huge.count()), (LATENCY_NS_MAX, 1));
        small.merge(&huge);
        assert_eq!(small.count(), 2);
        assert_eq!(small.min(), 7);
        small.reset();
        assert_eq!(small.count(), 0);
    }
}
