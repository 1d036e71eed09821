#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod histogram;
pub mod memory;
mod primitives;
pub mod report;
pub mod schedule;
pub mod snapshot;
mod table;

pub use histogram::{Histogram, HistogramSnapshot};
pub use primitives::{Counter, DurationCounter, DurationStats, MaxGauge};
pub use report::{BottleneckReport, Limiter, analyze};
pub use schedule::{DatasetShare, PhaseShare, PhaseShares};
pub use snapshot::{
    FetchTimingSnapshot, IoStats, MetricsSnapshot, OperatorMetrics, PrefetchTimingSnapshot,
    ShardFetchStats, StartupSnapshot,
};
