//! Counters of the shard cache, downloads and prefetch, kept in
//! zephon-metrics types, with serializable snapshots.

use serde::Serialize;
use std::time::Duration;
use zephon_metrics::{Counter, DurationCounter, MaxGauge};

/// Cache and download counters of one opened dataset.
#[derive(Debug, Default)]
pub struct CacheMetrics {
    /// Shard or block requests served without a download (memory or disk tier).
    pub hits: Counter,
    /// Shard or block requests that needed a download (each download counts
    /// once, however many readers waited for it).
    pub misses: Counter,
    /// Downloads that failed (network, timeout, size, checksum, decompression).
    pub failures: Counter,
    /// Bytes downloaded (as stored: compressed size for compressed shards).
    pub bytes_downloaded: Counter,
    /// Time spent downloading.
    pub download_time: DurationCounter,
    /// Time spent decompressing and verifying.
    pub decode_time: DurationCounter,
    /// Shards or blocks that left the memory tier to make room.
    pub memory_evictions: Counter,
    /// Most bytes the memory tier held, measured after each insert.
    pub memory_peak_bytes: MaxGauge,
    /// Downloads of a shard that had been cached before (it was evicted from
    /// both tiers while still needed).
    pub redownloads: Counter,
    /// Most downloads of any one shard.
    pub max_downloads_per_shard: MaxGauge,
    /// Entries the disk tier deleted to keep the folder within its capacity.
    pub disk_evictions: Counter,
    /// Times the disk tier was shrunk or switched off because its
    /// filesystem was full or failing.
    pub disk_degraded: Counter,
}

/// A snapshot of [`CacheMetrics`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CacheStats {
    /// Requests served from the cache.
    pub hits: u64,
    /// Requests that downloaded.
    pub misses: u64,
    /// Failed downloads.
    pub failures: u64,
    /// Bytes downloaded.
    pub bytes_downloaded: u64,
    /// Total download time.
    pub download_time: Duration,
    /// Total decompression and verification time.
    pub decode_time: Duration,
    /// Memory-tier evictions.
    pub memory_evictions: u64,
    /// Most bytes the memory tier held.
    pub memory_peak_bytes: u64,
    /// Re-downloads of previously cached shards.
    pub redownloads: u64,
    /// Whether the cache thrashes: some shard or block was downloaded three
    /// or more times, so the cache is too small for the working set.
    pub thrashing: bool,
    /// Disk-tier evictions by this process.
    pub disk_evictions: u64,
    /// Whether the disk tier was shrunk or switched off because its
    /// filesystem was full or failing (a warning named the folder).
    pub disk_degraded: bool,
}

/// A shard or block downloaded this many times marks the cache as thrashing.
pub const THRASH_DOWNLOADS: u64 = 3;

impl CacheMetrics {
    /// The counters now.
    pub fn snapshot(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.get(),
            misses: self.misses.get(),
            failures: self.failures.get(),
            bytes_downloaded: self.bytes_downloaded.get(),
            download_time: self.download_time.total(),
            decode_time: self.decode_time.total(),
            memory_evictions: self.memory_evictions.get(),
            memory_peak_bytes: self.memory_peak_bytes.get(),
            redownloads: self.redownloads.get(),
            thrashing: self.max_downloads_per_shard.get() >= THRASH_DOWNLOADS,
            disk_evictions: self.disk_evictions.get(),
            disk_degraded: self.disk_degraded.get() > 0,
        }
    }
}

/// Counters of one [`Prefetch`](crate::prefetch::Prefetch) adapter.
#[derive(Debug, Default)]
pub struct PrefetchMetrics {
    /// Shard warm-ups started.
    pub requests: Counter,
    /// Warm-ups that finished.
    pub successes: Counter,
    /// Warm-ups that failed (not fatal: the read retries).
    pub failures: Counter,
    /// Most warm-ups in flight at once.
    pub max_in_flight: MaxGauge,
    /// Time from start to end of warm-ups.
    pub warm_time: DurationCounter,
    /// Block warm-ups by sample started ([`Shard::warm_samples`](zephon_core::Shard::warm_samples)).
    pub sample_warms: Counter,
    /// Block warm-ups by sample that failed (not fatal: the read retries).
    pub sample_warm_failures: Counter,
}

/// A snapshot of [`PrefetchMetrics`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PrefetchStats {
    /// Warm-ups started.
    pub requests: u64,
    /// Warm-ups finished.
    pub successes: u64,
    /// Warm-ups failed.
    pub failures: u64,
    /// Most in flight at once.
    pub max_in_flight: u64,
    /// Total warm-up time.
    pub warm_time: Duration,
    /// Block warm-ups by sample started.
    pub sample_warms: u64,
    /// Block warm-ups by sample failed.
    pub sample_warm_failures: u64,
}

impl PrefetchMetrics {
    /// The counters now.
    pub fn snapshot(&self) -> PrefetchStats {
        PrefetchStats {
            requests: self.requests.get(),
            successes: self.successes.get(),
            failures: self.failures.get(),
            max_in_flight: self.max_in_flight.get(),
            warm_time: self.warm_time.total(),
            sample_warms: self.sample_warms.get(),
            sample_warm_failures: self.sample_warm_failures.get(),
        }
    }
}
