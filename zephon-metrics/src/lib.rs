//! # zephon-metrics
//!
//! Counters, timers, histograms and the snapshot types that Zephon's
//! observability reports are made of, with the bottleneck analysis over them.
//! A leaf crate: it knows nothing of the others, so any crate can count into it.
//!
//! Every primitive is a few atomics: cheap to update from any thread, and
//! readable at any time without stopping the writers. Snapshots are plain
//! serde types that print as aligned tables.
//!
//! ```
//! use zephon_metrics::{Counter, DurationCounter, Histogram};
//! use std::time::Duration;
//! let hits = Counter::default();
//! hits.add(3);
//! let busy = DurationCounter::default();
//! busy.record(Duration::from_millis(2));
//! let h = Histogram::default();
//! for us in [10, 20, 30, 1000] { h.record_nanos(us * 1000); }
//! assert_eq!(hits.get(), 3);
//! assert_eq!(busy.total(), Duration::from_millis(2));
//! assert!(h.snapshot().quantile(0.5) >= 10_000);
//! ```
#![warn(missing_docs)]

mod histogram;
mod primitives;
pub mod report;
pub mod snapshot;
mod table;

pub use histogram::{Histogram, HistogramSnapshot};
pub use primitives::{Counter, DurationCounter, DurationStats, MaxGauge};
pub use report::{BottleneckReport, Limiter, analyze};
pub use snapshot::{
    FetchTimingSnapshot, IoStats, MetricsSnapshot, OperatorMetrics, PrefetchTimingSnapshot,
    ShardFetchStats, StartupSnapshot,
};
