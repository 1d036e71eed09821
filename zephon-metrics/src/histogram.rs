//! A lock-free log-linear histogram of nanosecond values.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// Sub-buckets per power of two: quantiles are within ~6% of the true value.
const SUB: usize = 16;
const BUCKETS: usize = 64 * SUB;

/// A histogram of `u64` values (nanoseconds, usually) with log-linear buckets.
#[derive(Debug)]
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros() as usize; // >= 4
    let sub = ((v >> (exp - 4)) as usize) & (SUB - 1);
    (exp - 3) * SUB + sub
}

fn bucket_low(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let exp = b / SUB + 3;
    let sub = (b % SUB) as u64;
    (1u64 << exp) | (sub << (exp - 4))
}

impl Histogram {
    /// Records a value.
    #[inline]
    pub fn record_nanos(&self, v: u64) {
        self.buckets[bucket_of(v)].fetch_add(1, Ordering::Relaxed);
    }

    /// A plain copy of the non-empty buckets.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    let n = c.load(Ordering::Relaxed);
                    (n > 0).then(|| (bucket_low(i), n))
                })
                .collect(),
        }
    }
}

/// Non-empty buckets of a [`Histogram`] as `(lower bound, count)`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistogramSnapshot {
    /// `(lower bound, count)`, in increasing order.
    pub buckets: Vec<(u64, u64)>,
}

impl HistogramSnapshot {
    /// Number of values.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.1).sum()
    }

    /// The value at quantile `q` in `0..=1` (a bucket's lower bound; 0 when empty).
    pub fn quantile(&self, q: f64) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for &(low, c) in &self.buckets {
            seen += c;
            if seen >= rank {
                return low;
            }
        }
        self.buckets.last().map_or(0, |b| b.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotone_and_tight() {
        let mut last = 0;
        for v in (0..100_000u64).step_by(7).chain([1 << 40, u64::MAX]) {
            let b = bucket_of(v);
            assert!(b >= last);
            last = b;
            let low = bucket_low(b);
            assert!(low <= v, "{v} below its bucket {low}");
            assert!(v - low <= v / 8 + 1, "{v} too far above {low}");
        }
    }

    #[test]
    fn quantiles() {
        let h = Histogram::default();
        for v in 1..=1000u64 {
            h.record_nanos(v * 1000);
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 1000);
        let p50 = s.quantile(0.5) as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.07, "{p50}");
        let p99 = s.quantile(0.99) as f64;
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 0.07, "{p99}");
    }
}
