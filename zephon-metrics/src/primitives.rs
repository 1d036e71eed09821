//! Atomic counters.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }
    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Total time spent in something, with the number of spans and the shortest
/// and longest one.
#[derive(Debug)]
pub struct DurationCounter {
    nanos: AtomicU64,
    count: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
}

impl Default for DurationCounter {
    fn default() -> Self {
        DurationCounter {
            nanos: AtomicU64::new(0),
            count: AtomicU64::new(0),
            min: AtomicU64::new(u64::MAX),
            max: AtomicU64::new(0),
        }
    }
}

/// A plain copy of a [`DurationCounter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DurationStats {
    /// Total seconds.
    pub total_s: f64,
    /// Number of spans.
    pub count: u64,
    /// Shortest span in seconds (0 when none).
    pub min_s: f64,
    /// Mean span in seconds (0 when none).
    pub avg_s: f64,
    /// Longest span in seconds.
    pub max_s: f64,
}

impl DurationCounter {
    /// Records one span.
    #[inline]
    pub fn record(&self, d: Duration) {
        self.record_nanos(d.as_nanos().min(u64::MAX as u128) as u64);
    }
    /// Records one span of `n` nanoseconds.
    #[inline]
    pub fn record_nanos(&self, n: u64) {
        self.nanos.fetch_add(n, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.min.fetch_min(n, Ordering::Relaxed);
        self.max.fetch_max(n, Ordering::Relaxed);
    }
    /// Adds `n` nanoseconds covering `spans` spans (for batched work).
    pub fn record_many(&self, n: u64, spans: u64) {
        if spans == 0 {
            return;
        }
        self.nanos.fetch_add(n, Ordering::Relaxed);
        self.count.fetch_add(spans, Ordering::Relaxed);
        let per = n / spans;
        self.min.fetch_min(per, Ordering::Relaxed);
        self.max.fetch_max(per, Ordering::Relaxed);
    }
    /// Total time.
    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
    /// Number of spans.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
    /// A plain copy.
    pub fn stats(&self) -> DurationStats {
        let count = self.count();
        let total = self.nanos.load(Ordering::Relaxed) as f64 / 1e9;
        DurationStats {
            total_s: total,
            count,
            min_s: if count == 0 {
                0.0
            } else {
                self.min.load(Ordering::Relaxed) as f64 / 1e9
            },
            avg_s: if count == 0 {
                0.0
            } else {
                total / count as f64
            },
            max_s: self.max.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// The largest value seen (a queue's deepest point, say).
#[derive(Debug, Default)]
pub struct MaxGauge(AtomicU64);

impl MaxGauge {
    /// Observes a value.
    #[inline]
    pub fn observe(&self, v: u64) {
        self.0.fetch_max(v, Ordering::Relaxed);
    }
    /// The largest value observed.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
