//! Plain snapshot types of a running pipeline: per operator, start-up versus
//! steady state, fetch and prefetch timing.

use serde::{Deserialize, Serialize};

/// One operator's activity since the pipeline started.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OperatorMetrics {
    /// Position in the pipeline, from the source (0) to the consumer.
    pub position: usize,
    /// Operator name (`fetch`, `map_par`, `shuffle`, ...).
    pub name: String,
    /// Workers or requests in flight it may use.
    pub parallelism: usize,
    /// Elements consumed.
    pub elements_in: u64,
    /// Elements produced.
    pub elements_out: u64,
    /// Payload bytes consumed, where the element type has a size (0 otherwise).
    pub bytes_in: u64,
    /// Payload bytes produced, where the element type has a size (0
    /// otherwise); fetch estimates it from a sample of its reads.
    pub bytes_out: u64,
    /// Seconds spent doing the operator's own work, summed over its workers.
    pub busy_s: f64,
    /// Seconds it had nothing to do because its input was not ready.
    pub wait_input_s: f64,
    /// Seconds finished output waited for the next stage to take it.
    pub blocked_output_s: f64,
    /// Shortest processing time per element, seconds.
    pub min_element_s: f64,
    /// Mean processing time per element, seconds.
    pub avg_element_s: f64,
    /// Longest processing time per element, seconds.
    pub max_element_s: f64,
    /// Deepest its internal queue (in flight plus finished) has been.
    pub max_queue_depth: u64,
    /// Queue capacity, where it has one.
    pub queue_capacity: Option<u64>,
    /// `wait_input_s` over the time since the operator started.
    pub wait_ratio: f64,
    /// `busy_s` over (time since start x parallelism): how saturated it is.
    pub busy_ratio: f64,
}

/// Start-up versus steady state, seen from the consumer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StartupSnapshot {
    /// Seconds from the start of iteration to the first element.
    pub time_to_first_batch_s: Option<f64>,
    /// Elements delivered.
    pub batches: u64,
    /// Median steady-state interval between elements, seconds.
    pub interval_p50_s: f64,
    /// 90th percentile interval, seconds.
    pub interval_p90_s: f64,
    /// 99th percentile interval, seconds.
    pub interval_p99_s: f64,
    /// Seconds the consumer spent waiting inside `next()`.
    pub consumer_wait_s: f64,
    /// Seconds the consumer spent between `next()` calls (its own work).
    pub consumer_busy_s: f64,
}

/// Everything [`metrics_snapshot`](crate) reports about a pipeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    /// Tracking level in force (`off`, `stage`, `operator`).
    pub tracking: String,
    /// Seconds since iteration started.
    pub elapsed_s: f64,
    /// Operators from source to consumer.
    pub operators: Vec<OperatorMetrics>,
    /// Start-up and steady state.
    pub startup: StartupSnapshot,
    /// Share of the time the consumer waited for the pipeline.
    pub total_wait_ratio: f64,
    /// Under a mixture schedule: what the work source handed out per phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<crate::schedule::PhaseShares>,
}

/// Storage counters of the cache behind a dataset (or a shard).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IoStats {
    /// Shard requests served from the cache.
    pub cache_hits: u64,
    /// Shard requests that downloaded.
    pub cache_misses: u64,
    /// Failed downloads or reads.
    pub failures: u64,
    /// Retried storage requests.
    pub retries: u64,
    /// Bytes downloaded.
    pub bytes_downloaded: u64,
    /// Seconds spent downloading.
    pub download_s: f64,
    /// Seconds spent decompressing and verifying.
    pub decode_s: f64,
    /// Evictions from the cache.
    pub evictions: u64,
    /// The cache evicts and re-downloads the same shards.
    pub thrashing: bool,
}

/// Fetch activity for one shard (or the totals, with `shard` empty).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardFetchStats {
    /// Dataset name.
    pub dataset: String,
    /// Shard path or URI.
    pub shard: String,
    /// Samples read.
    pub samples: u64,
    /// Read requests (groups of samples of one shard).
    pub groups: u64,
    /// Groups served without waiting for a download.
    pub cache_hits: u64,
    /// Groups that had to wait for the shard to be opened or downloaded.
    pub cache_misses: u64,
    /// Seconds resolving and opening (first read of a shard, downloads).
    pub open_s: f64,
    /// Seconds reading and parsing samples.
    pub read_s: f64,
    /// Mean seconds per group.
    pub avg_group_s: f64,
    /// Times a shard was opened again after its first open.
    pub reopens: u64,
}

/// What `fetch` did, in total and per (dataset, shard).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FetchTimingSnapshot {
    /// Sums over all shards.
    pub totals: ShardFetchStats,
    /// Cache hits over groups.
    pub hit_ratio: f64,
    /// Per shard, in (dataset, shard) order.
    pub per_shard: Vec<ShardFetchStats>,
    /// Storage counters per dataset, where the dataset reports them.
    pub storage: Vec<(String, IoStats)>,
}

impl FetchTimingSnapshot {
    /// The cache hit ratio in words, or that no dataset read has a shard
    /// cache (local files read in place, records in memory): their groups
    /// count as hits, and a ratio of 100% would suggest a cache that is
    /// not there.
    ///
    /// ```
    /// use zephon_metrics::{FetchTimingSnapshot, IoStats};
    /// let mut f = FetchTimingSnapshot { hit_ratio: 1.0, ..Default::default() };
    /// assert_eq!(f.cache_summary(), "no shard cache");
    /// f.storage.push(("web".into(), IoStats::default()));
    /// assert_eq!(f.cache_summary(), "cache hit ratio 100.0%");
    /// ```
    pub fn cache_summary(&self) -> String {
        if self.storage.is_empty() {
            "no shard cache".into()
        } else {
            format!("cache hit ratio {:.1}%", self.hit_ratio * 100.0)
        }
    }
}

/// What shard prefetch did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PrefetchTimingSnapshot {
    /// Shard warm-ups started.
    pub requests: u64,
    /// Warm-ups that succeeded.
    pub successes: u64,
    /// Warm-ups that failed (not fatal).
    pub failures: u64,
    /// Bytes downloaded by the caches behind the prefetched datasets.
    pub bytes: u64,
    /// Seconds spent downloading.
    pub download_s: f64,
    /// Seconds spent decompressing.
    pub decompress_s: f64,
    /// Successes over finished requests.
    pub success_rate: f64,
}

impl PrefetchTimingSnapshot {
    /// Adds another prefetcher's counts.
    pub fn merge(&mut self, o: &PrefetchTimingSnapshot) {
        self.requests += o.requests;
        self.successes += o.successes;
        self.failures += o.failures;
        self.bytes += o.bytes;
        self.download_s += o.download_s;
        self.decompress_s += o.decompress_s;
        let done = self.successes + self.failures;
        self.success_rate = if done == 0 {
            1.0
        } else {
            self.successes as f64 / done as f64
        };
    }
}
