//! # zephon-metrics
//!
//! Counters, timers, histograms and the snapshot types that Zephon's
//! observability reports are made of. A leaf crate: it knows nothing of the
//! others, so any crate can count into it.
#![warn(missing_docs)]
