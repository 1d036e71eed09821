//! Observability: which operator limits throughput, what fetch and prefetch
//! do, start-up versus steady state. Off by default; cheap enough to leave on.
//!
//! An [`Observer`] is enabled before iteration (usually through
//! [`BlockingIter::enable_observability`](crate::BlockingIter::enable_observability)).
//! Operators find it when they are first polled (it travels with the task
//! that drives the pipeline) and count into it; snapshots can be taken at any
//! time, from any thread.
//!
//! # What it costs
//!
//! The hot path pays almost nothing per element, so tracking can stay on:
//!
//! - Element counts are kept in the operator and published to shared
//!   counters every 64 elements; operators with natural bunches count per
//!   bunch (fetch per read group, batch per finished batch), so a snapshot
//!   taken mid-run may lag by up to one bunch. Totals are exact at the end.
//! - Per-element processing time is sampled: one element in
//!   [`SAMPLE_EVERY`] is timed and stands for the others; fetch times whole
//!   read groups, batch one batch in [`SAMPLE_EVERY`].
//! - The consumer's clock is read when it asks and when it receives. A
//!   consumer faster than 20 µs per item is timed in bunches instead: only
//!   when it has to wait for the next chunk of items, handed over by the
//!   threads runner's task or polled ahead on the caller's own thread (the
//!   others were already there); the time between two reads is exact, and
//!   its split into waiting and working is the timed delivery's. Totals are
//!   published every 16 deliveries.
//! - The observer travels in the [pipeline context](crate::context), which
//!   the task driving the pipeline enters on every poll (one poll hands over
//!   up to a chunk of items under the threads runner), so an operator first
//!   polled late (the second half of a `chain`, one a `flat_map` creates as
//!   it goes) is observed too.
//!
//! `zephon-bench engine` measures the cost on the cheapest pipeline there is
//! (in-memory records, fetch and batch, each configuration in a process of
//! its own), and `zephon-bench tokenize-pack --observe` on a tokenizing one;
//! both report it as a ratio to the same pipeline with tracking off,
//! measured in the same run.

mod explain;
mod explain_foreign;
mod fetch_stats;
mod op_stats;
#[cfg(feature = "prometheus")]
mod prometheus;
mod report;

pub use explain::{Explain, PlanDescription, StageDescription};
pub use explain_foreign::{BoxPipeline, ExplainStream};
pub use fetch_stats::{FetchStats, GroupRecord};
pub use op_stats::{OpStats, SAMPLE_EVERY};
#[cfg(feature = "prometheus")]
pub use prometheus::{Exposure, MetricsServer};
pub use report::ReporterGuard;

use crate::dataset::Catalog;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use zephon_metrics::{
    BottleneckReport, Counter, DurationCounter, FetchTimingSnapshot, Histogram, MetricsSnapshot,
    PrefetchTimingSnapshot, StartupSnapshot,
};

/// How much to track.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tracking {
    /// Nothing.
    #[default]
    Off,
    /// Per stage: fetch and prefetch timing, start-up and steady state, the consumer.
    Stage,
    /// Everything of `Stage`, plus every operator's counters.
    Operator,
}

impl std::str::FromStr for Tracking {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "off" => Ok(Tracking::Off),
            "stage" => Ok(Tracking::Stage),
            "operator" => Ok(Tracking::Operator),
            other => Err(crate::Error::config(
                "tracking",
                format!("`{other}` is not one of off, stage, operator"),
            )),
        }
    }
}

type PrefetchSource = Arc<dyn Fn() -> PrefetchTimingSnapshot + Send + Sync>;
type ScheduleSource = Arc<dyn Fn() -> zephon_metrics::PhaseShares + Send + Sync>;

struct Inner {
    tracking: Tracking,
    start: OnceLock<Instant>,
    seq: AtomicU64,
    ops: Mutex<Vec<Arc<OpStats>>>,
    fetch: Mutex<Vec<Arc<FetchStats>>>,
    prefetch: Mutex<Vec<PrefetchSource>>,
    /// The first scheduled work source polled under this observer, by the
    /// key it registered with.
    schedule: Mutex<Option<(usize, ScheduleSource)>>,
    // Consumer side.
    first_ns: AtomicU64,
    last_ns: AtomicU64,
    intervals: Histogram,
    batches: Counter,
    wait: DurationCounter,
    busy: DurationCounter,
}

/// Collects a pipeline's metrics. Cheap to clone (a shared handle); snapshots
/// may be taken from any thread while the pipeline runs.
///
/// ```
/// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
/// use zephon_core::obs::Tracking;
/// let ds = Dataset::in_memory("toy", vec![vec![Record::new().with("t", "x"); 100]]).unwrap();
/// let ws = WorkSource::builder().dataset(ds, 1.0).build().unwrap();
/// let mut it = ws.stream().fetch(2).map_par(Ok, 2).batch(10).into_blocking_iter(Runner::threads()).unwrap();
/// let obs = it.enable_observability(Tracking::Operator);
/// let n: usize = it.by_ref().map(|b| b.unwrap().len()).sum();
/// assert_eq!(n, 100);
/// let m = obs.metrics_snapshot();
/// assert_eq!(m.operators.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["fetch", "map_par", "batch"]);
/// assert_eq!(m.startup.batches, 10);
/// println!("{m}\n{}", obs.bottleneck_report());
/// ```
#[derive(Clone)]
pub struct Observer(Arc<Inner>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("tracking", &self.0.tracking)
            .finish_non_exhaustive()
    }
}

impl Observer {
    /// A new observer with the given tracking level.
    pub fn new(tracking: Tracking) -> Self {
        Observer(Arc::new(Inner {
            tracking,
            start: OnceLock::new(),
            seq: AtomicU64::new(0),
            ops: Mutex::new(Vec::new()),
            fetch: Mutex::new(Vec::new()),
            prefetch: Mutex::new(Vec::new()),
            schedule: Mutex::new(None),
            first_ns: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
            intervals: Histogram::default(),
            batches: Counter::default(),
            wait: DurationCounter::default(),
            busy: DurationCounter::default(),
        }))
    }

    /// The tracking level.
    pub fn tracking(&self) -> Tracking {
        self.0.tracking
    }

    /// Registers an operator; its stats when per-operator tracking is on.
    pub fn operator(
        &self,
        name: &'static str,
        parallelism: usize,
        capacity: Option<u64>,
    ) -> Option<Arc<OpStats>> {
        if self.0.tracking != Tracking::Operator {
            return None;
        }
        let mut ops = self.0.ops.lock().unwrap_or_else(|e| e.into_inner());
        // Operators created as the pipeline goes (inside a `flat_map`) end
        // and start again: counters no probe reports into are taken over,
        // so their number stays that of the operators alive at once.
        if let Some(s) = ops
            .iter()
            .find(|o| o.take_over(name, parallelism, capacity))
        {
            return Some(s.clone());
        }
        let seq = self.0.seq.fetch_add(1, Ordering::Relaxed);
        let s = Arc::new(OpStats::new(name, parallelism, capacity, seq));
        ops.push(s.clone());
        Some(s)
    }

    /// Registers a fetch operator's per-shard counters.
    pub fn fetch_stats(&self, catalog: Catalog) -> Arc<FetchStats> {
        let s = Arc::new(FetchStats::new(catalog));
        self.0
            .fetch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(s.clone());
        s
    }

    /// Registers a source of prefetch counters (a shard prefetch operator).
    pub fn register_prefetch(
        &self,
        source: impl Fn() -> PrefetchTimingSnapshot + Send + Sync + 'static,
    ) {
        self.0
            .prefetch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::new(source));
    }

    /// Registers what a scheduled work source handed out, for the
    /// snapshots' `schedule`. The first work source to register stands
    /// (its streams, on any lane, register under one `key`); another
    /// pipeline's is not mixed in.
    pub fn register_schedule(
        &self,
        key: usize,
        source: impl Fn() -> zephon_metrics::PhaseShares + Send + Sync + 'static,
    ) {
        let mut s = self.0.schedule.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_none() {
            *s = Some((key, Arc::new(source)));
        }
    }

    fn now_ns(&self) -> u64 {
        let start = *self.0.start.get_or_init(Instant::now);
        start.elapsed().as_nanos().max(1) as u64
    }

    /// Marks the start of iteration (the clock of time-to-first-batch).
    pub fn start(&self) {
        self.0.start.get_or_init(Instant::now);
    }

    /// The consumer asked for the next element after working `busy` since the last one.
    pub fn consumer_asked(&self, busy: Duration) {
        self.0.busy.record(busy);
    }

    /// The consumer received an element after waiting `waited`.
    pub fn consumer_received(&self, waited: Duration) {
        let now = self.now_ns();
        self.0.wait.record(waited);
        self.0.batches.inc();
        if self
            .0
            .first_ns
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            let last = self.0.last_ns.swap(now, Ordering::Relaxed);
            self.0.intervals.record_nanos(now.saturating_sub(last));
        } else {
            self.0.last_ns.store(now, Ordering::Relaxed);
        }
    }

    /// An element reached the consumer at `at`, `since_last` after the
    /// previous one (`None` for the first): the start-up and steady-state
    /// clock, without the wait and busy totals (see [`Observer::consumer_totals`]).
    pub fn delivered_at(&self, at: Instant, since_last: Option<Duration>) {
        match since_last {
            None => {
                let start = *self.0.start.get_or_init(|| at);
                let ns = at.saturating_duration_since(start).as_nanos().max(1) as u64;
                let _ =
                    self.0
                        .first_ns
                        .compare_exchange(0, ns, Ordering::Relaxed, Ordering::Relaxed);
            }
            Some(d) => self.0.intervals.record_nanos(d.as_nanos() as u64),
        }
    }

    /// Adds `n` deliveries' worth of consumer waiting and working time, for
    /// callers that count locally and publish in bunches.
    pub fn consumer_totals(&self, wait_ns: u64, busy_ns: u64, n: u64) {
        self.0.wait.record_many(wait_ns, n);
        self.0.busy.record_many(busy_ns, n);
        self.0.batches.add(n);
    }

    /// Per-operator metrics, start-up and steady state.
    pub fn metrics_snapshot(&self) -> MetricsSnapshot {
        let mut ops = self.0.ops.lock().unwrap_or_else(|e| e.into_inner()).clone();
        // Operators register at their first poll, outermost first.
        ops.sort_by_key(|o| std::cmp::Reverse(o.seq()));
        let elapsed = self
            .0
            .start
            .get()
            .map_or(0.0, |s| s.elapsed().as_secs_f64());
        let h = self.0.intervals.snapshot();
        let first = self.0.first_ns.load(Ordering::Relaxed);
        let wait = self.0.wait.total().as_secs_f64();
        MetricsSnapshot {
            tracking: format!("{:?}", self.0.tracking).to_lowercase(),
            elapsed_s: elapsed,
            operators: ops.iter().enumerate().map(|(i, o)| o.snapshot(i)).collect(),
            startup: StartupSnapshot {
                time_to_first_batch_s: (first > 0).then(|| first as f64 / 1e9),
                batches: self.0.batches.get(),
                interval_p50_s: h.quantile(0.5) as f64 / 1e9,
                interval_p90_s: h.quantile(0.9) as f64 / 1e9,
                interval_p99_s: h.quantile(0.99) as f64 / 1e9,
                consumer_wait_s: wait,
                consumer_busy_s: self.0.busy.total().as_secs_f64(),
            },
            total_wait_ratio: if elapsed > 0.0 {
                (wait / elapsed).min(1.0)
            } else {
                0.0
            },
            schedule: self
                .0
                .schedule
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|(_, source)| source()),
        }
    }

    /// Fetch timing: totals and per (dataset, shard).
    pub fn fetch_timing_snapshot(&self) -> FetchTimingSnapshot {
        let mut out = FetchTimingSnapshot::default();
        for f in self
            .0
            .fetch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            f.snapshot_into(&mut out);
        }
        out.per_shard
            .sort_by(|a, b| (&a.dataset, &a.shard).cmp(&(&b.dataset, &b.shard)));
        let mut storage: Vec<(String, zephon_metrics::IoStats)> = Vec::new();
        for (name, io) in out.storage.drain(..) {
            match storage.iter_mut().find(|(n, _)| *n == name) {
                Some((_, acc)) if acc != &io => fetch_stats::merge_io(acc, &io),
                Some(_) => {}
                None => storage.push((name, io)),
            }
        }
        out.storage = storage;
        out.totals.avg_group_s =
            (out.totals.open_s + out.totals.read_s) / out.totals.groups.max(1) as f64;
        out.hit_ratio = if out.totals.groups == 0 {
            0.0
        } else {
            out.totals.cache_hits as f64 / out.totals.groups as f64
        };
        out
    }

    /// Shard prefetch timing, summed over prefetch operators.
    pub fn prefetch_timing_snapshot(&self) -> PrefetchTimingSnapshot {
        let mut out = PrefetchTimingSnapshot {
            success_rate: 1.0,
            ..Default::default()
        };
        for p in self
            .0
            .prefetch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            out.merge(&p());
        }
        out
    }

    /// Which stage limits throughput, with the evidence and advice.
    pub fn bottleneck_report(&self) -> BottleneckReport {
        let prefetch = self.prefetch_timing_snapshot();
        zephon_metrics::analyze(
            &self.metrics_snapshot(),
            Some(&self.fetch_timing_snapshot()),
            Some(&prefetch),
            crate::settings::num_cpus(),
        )
    }
}
