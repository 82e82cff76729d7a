//! Statistics: latency histograms per run and summaries across runs.
//!
//! A run records every timed call into an HDR histogram in nanoseconds ([`LatencyRecorder`]): 3 significant
//! digits from 1 ns up to 60 s, so percentiles carry at most 0.1% quantisation error while the exact count, sum
//! (hence mean) and maximum are kept beside the histogram. Across runs, each metric is summarised by min, median,
//! max and mean ([`Summary`]) — the shape of the kernel threads' tables ("min/med/max of 5 runs"). The median of an even
//! number of values is the mean of the two middle ones.

use serde::{Deserialize, Serialize};

/// Records call latencies of one run.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    hist: hdrhistogram::Histogram<u64>,
    count: u64,
    sum_ns: u128,
    max_ns: u64,
}

/// The latency statistics of one run, in milliseconds (the kernel threads' unit).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Number of timed calls.
    pub count: u64,
    /// Mean latency.
    pub mean_ms: f64,
    /// Median latency.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Worst call (exact).
    pub max_ms: f64,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyRecorder {
    /// An empty recorder (1 ns .. 60 s, 3 significant digits).
    pub fn new() -> Self {
        Self {
            hist: hdrhistogram::Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .expect("valid histogram bounds"),
            count: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }

    /// An empty recorder whose memory is already touched ([`LatencyRecorder::new`], then every bucket written
    /// once): a timed loop that makes it before it starts takes no page fault (and no `mmap` of the
    /// allocator's) on its first record of a bucket. A mapper must allocate it before the run: in the middle of
    /// a run, the allocator's `mmap` of the histogram waits for the process's `mmap_lock` like any timed call,
    /// but untimed.
    pub fn prefaulted() -> Self {
        let mut r = Self::new();
        // Writes a zero into every count (they are zero already): touches every page of the counts.
        r.hist.clear();
        r
    }

    /// Records one call of `ns` nanoseconds (clamped into the histogram's range; the exact value still counts
    /// toward mean and max).
    pub fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns.max(1));
        self.count += 1;
        self.sum_ns += u128::from(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// The latency in ms at or below which a fraction `q` (0..=1) of the recorded calls fall, clamped to the
    /// exact maximum (0 if nothing was recorded).
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        self.hist.value_at_quantile(q.clamp(0.0, 1.0)).min(self.max_ns) as f64 / 1e6
    }

    /// The smallest recorded latency in ms (histogram resolution; 0 if nothing was recorded).
    pub fn min_ms(&self) -> f64 {
        if self.count == 0 { 0.0 } else { self.hist.min() as f64 / 1e6 }
    }

    /// The run's statistics (all zero if nothing was recorded).
    pub fn stats(&self) -> LatencyStats {
        if self.count == 0 {
            return LatencyStats {
                count: 0,
                mean_ms: 0.0,
                p50_ms: 0.0,
                p99_ms: 0.0,
                p999_ms: 0.0,
                max_ms: 0.0,
            };
        }
        // A histogram bucket's reported value can exceed the exact maximum by its resolution; clamp so that
        // p50 <= p99 <= p99.9 <= max always holds.
        let ms = |ns: u64| ns.min(self.max_ns) as f64 / 1e6;
        LatencyStats {
            count: self.count,
            mean_ms: self.sum_ns as f64 / self.count as f64 / 1e6,
            p50_ms: ms(self.hist.value_at_quantile(0.5)),
            p99_ms: ms(self.hist.value_at_quantile(0.99)),
            p999_ms: ms(self.hist.value_at_quantile(0.999)),
            max_ms: ms(self.max_ns),
        }
    }
}

/// The quantiles that describe a run's latency distribution (its CDF) beside [`LatencyStats`]: the fraction of
/// calls and the metric-name stem of the latency at or below which that fraction falls (`p1` = 1% of calls,
/// `p995` = 99.5%, `p9999` = 99.99%). Commands that record distributions write metric `call_<stem>_ms` for each;
/// with the minimum and the maximum, they draw the CDF.
pub const CDF_QUANTILES: [(f64, &str); 13] = [
    (0.01, "p1"),
    (0.05, "p5"),
    (0.10, "p10"),
    (0.25, "p25"),
    (0.50, "p50"),
    (0.75, "p75"),
    (0.90, "p90"),
    (0.95, "p95"),
    (0.99, "p99"),
    (0.995, "p995"),
    (0.999, "p999"),
    (0.9999, "p9999"),
    (0.99999, "p99999"),
];

/// A metric summarised across runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of runs summarised.
    pub n: usize,
    /// Smallest value.
    pub min: f64,
    /// Median (mean of the two middle values for even `n`).
    pub median: f64,
    /// Largest value.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl Summary {
    /// Summarises `values`; `None` if there are none or any is NaN.
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() || values.iter().any(|v| v.is_nan()) {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Summary { n, min: v[0], median, max: v[n - 1], mean: v.iter().sum::<f64>() / n as f64 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_odd_and_even() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.n, s.min, s.median, s.max, s.mean), (3, 1.0, 2.0, 3.0, 2.0));
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.max, s.mean), (1.0, 2.5, 4.0, 2.5));
        let s = Summary::of(&[5.0]).unwrap();
        assert_eq!((s.min, s.median, s.max), (5.0, 5.0, 5.0));
    }

    #[test]
    fn summary_rejects_empty_and_nan() {
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn recorder_exact_mean_max_and_percentiles() {
        let mut r = LatencyRecorder::new();
        // 1000 calls of 1..=1000 µs.
        for us in 1..=1000u64 {
            r.record(us * 1000);
        }
        let s = r.stats();
        assert_eq!(s.count, 1000);
        assert!((s.mean_ms - 0.5005).abs() < 1e-9, "{}", s.mean_ms);
        assert_eq!(s.max_ms, 1.0);
        assert!((s.p50_ms - 0.5).abs() < 0.001, "{}", s.p50_ms);
        assert!((s.p99_ms - 0.99).abs() < 0.001, "{}", s.p99_ms);
        assert!((s.p999_ms - 0.999).abs() < 0.001, "{}", s.p999_ms);
    }

    #[test]
    fn percentiles_never_exceed_the_max() {
        let mut r = LatencyRecorder::new();
        r.record(123_456_789);
        r.record(1_000);
        let s = r.stats();
        assert!(s.p50_ms <= s.p99_ms && s.p99_ms <= s.p999_ms && s.p999_ms <= s.max_ms, "{s:?}");
        assert_eq!(s.p999_ms, s.max_ms);
    }

    #[test]
    fn quantiles_rise_with_the_fraction() {
        let mut r = LatencyRecorder::new();
        assert_eq!(r.quantile_ms(0.5), 0.0);
        for us in 1..=10_000u64 {
            r.record(us * 1000);
        }
        let qs: Vec<f64> = CDF_QUANTILES.iter().map(|&(q, _)| r.quantile_ms(q)).collect();
        assert!(qs.windows(2).all(|w| w[0] <= w[1]), "{qs:?}");
        assert!((r.quantile_ms(0.25) - 2.5).abs() < 0.01, "{}", r.quantile_ms(0.25));
        assert!((r.min_ms() - 0.001).abs() < 1e-6);
        assert_eq!(r.quantile_ms(1.0), r.stats().max_ms);
    }

    #[test]
    fn recorder_empty_and_huge() {
        assert_eq!(LatencyRecorder::new().stats().count, 0);
        let mut r = LatencyRecorder::new();
        r.record(0);
        r.record(120_000_000_000); // beyond the histogram: clamped there, exact in max.
        let s = r.stats();
        assert_eq!(s.count, 2);
        assert_eq!(s.max_ms, 120_000.0);
        assert!(s.p999_ms <= 60_100.0);
    }
}
