//! `prefetch`: look ahead in a pointer stream and warm the shards it will
//! read, so downloads overlap with the reads and the training step. A
//! remote shard read by blocks warms its line index and its leading blocks,
//! as many as a quarter of the cache holds (all of them for a shard that
//! small), so warming never evicts blocks it warmed before they are read.

use crate::metrics::PrefetchMetrics;
use crate::source::backend::runtime;
use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use pin_project::pin_project;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use zephon_core::context::Probe;
use zephon_core::settings::{BUFFER_SIZE, PARALLELISM};
use zephon_core::{Catalog, Catalogued, Error, Observer, Result, SamplePtr, Shard};

/// Prefetch counters with the download and decompression work of the caches
/// behind the prefetched datasets, for observability.
fn timing_snapshot(
    m: &PrefetchMetrics,
    catalog: &Catalog,
) -> zephon_metrics::PrefetchTimingSnapshot {
    let s = m.snapshot();
    let done = s.successes + s.failures;
    let mut out = zephon_metrics::PrefetchTimingSnapshot {
        requests: s.requests,
        successes: s.successes,
        failures: s.failures,
        success_rate: if done == 0 {
            1.0
        } else {
            s.successes as f64 / done as f64
        },
        ..Default::default()
    };
    for io in catalog
        .iter()
        .filter_map(|d| d.shards().first().and_then(|s| s.io_stats()))
    {
        out.bytes += io.bytes_downloaded;
        out.download_s += io.download_s;
        out.decompress_s += io.decode_s;
    }
    out
}

/// Most pointers `prefetch` pulls from upstream per element it passes on.
const LOOKAHEAD_STEP: usize = 1024;

/// Samples of one shard seen ahead that make one block warm-up
/// ([`Shard::warm_samples`]).
const SAMPLE_GROUP: usize = 256;

/// A warm-up to start: a whole shard, or the blocks of some of its samples.
enum Job {
    Shard((u32, u32)),
    Samples((u32, u32), Vec<u64>),
}

/// A warm-up running on the storage runtime; aborted when dropped, so a
/// dropped pipeline starts no further download (a block warm-up finishes
/// the blocks under way, which other readers may wait on).
struct Warming {
    shard: (u32, u32),
    /// A whole-shard warm-up (counted in requests and successes), not a
    /// block warm-up.
    whole: bool,
    handle: tokio::task::JoinHandle<Result<()>>,
}

impl Future for Warming {
    type Output = ((u32, u32), bool, bool);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (shard, whole) = (self.shard, self.whole);
        Pin::new(&mut self.handle)
            .poll(cx)
            .map(|r| (shard, whole, matches!(r, Ok(Ok(())))))
    }
}

impl Drop for Warming {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Looks `buffer_size` pointers ahead and warms the shards they name (in
/// first-seen order, each once) with up to `parallelism` warm-ups at once.
/// Shards cached in blocks are also warmed by sample: every 256 pointers
/// of a shard seen ahead start a warm-up of the blocks that hold them, in
/// the order they will be read ([`Shard::warm_samples`]).
/// Pointers pass through unchanged and in order; a failed warm-up is counted
/// and forgotten (the read itself downloads again and reports any error).
///
/// Created by [`PrefetchExt::prefetch`].
///
/// ```
/// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
/// use zephon_storage::PrefetchExt;
/// let ds = Dataset::in_memory("toy", vec![(0..6).map(|i| Record::new().with("i", i as i64)).collect()]).unwrap();
/// let ws = WorkSource::builder().dataset(ds, 1.0).shuffle_within_shard(false).build().unwrap();
/// let records: Vec<Record> = ws.stream().prefetch(64, 4).fetch(2)
///     .into_blocking_iter(Runner::Inline).unwrap().map(Result::unwrap).collect();
/// assert_eq!(records.len(), 6);
/// assert_eq!(records[5].get("i").and_then(|v| v.as_int()), Some(5));
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct Prefetch<S> {
    #[pin]
    inner: S,
    catalog: Catalog,
    buffer_size: usize,
    parallelism: usize,
    buffer: VecDeque<Result<SamplePtr>>,
    queued: VecDeque<Job>,
    seen: HashSet<(u32, u32)>,
    pending: HashMap<(u32, u32), Vec<u64>>,
    in_flight: FuturesUnordered<Warming>,
    metrics: Arc<PrefetchMetrics>,
    done: bool,
    probe: Probe,
    /// It returned `None`: the end, for `FusedStream`.
    terminated: bool,
    // An out-of-range setting, reported by the first poll (a chain method
    // cannot return it).
    invalid: Option<Error>,
}

impl<S: Catalogued> Prefetch<S> {
    /// Prefetch over `inner`, resolving shards in its catalog.
    pub fn new(inner: S, buffer_size: usize, parallelism: usize) -> Self {
        let catalog = inner.catalog().clone();
        Prefetch::with_catalog(inner, catalog, buffer_size, parallelism)
    }
}

impl<S> Prefetch<S> {
    /// Prefetch over a pointer stream that does not carry its catalog.
    /// `buffer_size` must lie in [`BUFFER_SIZE`] (1 to 16 Mi pointers) and
    /// `parallelism` in [`PARALLELISM`] (1 to 4096): otherwise the first
    /// poll returns an error naming `prefetch.buffer_size` or
    /// `prefetch.parallelism`, and the stream ends.
    pub fn with_catalog(
        inner: S,
        catalog: Catalog,
        buffer_size: usize,
        parallelism: usize,
    ) -> Self {
        let invalid = BUFFER_SIZE
            .check_usize("prefetch.buffer_size", buffer_size)
            .and_then(|_| PARALLELISM.check_usize("prefetch.parallelism", parallelism))
            .err();
        Prefetch {
            invalid,
            inner,
            catalog,
            buffer_size: buffer_size.clamp(1, BUFFER_SIZE.max as usize),
            parallelism: parallelism.clamp(1, PARALLELISM.max as usize),
            buffer: VecDeque::new(),
            queued: VecDeque::new(),
            seen: HashSet::new(),
            pending: HashMap::new(),
            in_flight: FuturesUnordered::new(),
            metrics: Arc::new(PrefetchMetrics::default()),
            probe: Probe::default(),
            terminated: false,
            done: false,
        }
    }

    /// The adapter's counters (shared: read them while the stream runs).
    pub fn metrics(&self) -> Arc<PrefetchMetrics> {
        self.metrics.clone()
    }
}

impl<S: zephon_core::obs::Explain> zephon_core::obs::Explain for Prefetch<S> {
    fn describe(&self, out: &mut Vec<zephon_core::obs::StageDescription>) {
        self.inner.describe(out);
        out.push(
            zephon_core::obs::StageDescription::new(
                "prefetch",
                self.parallelism,
                Some(self.buffer_size as u64),
                zephon_core::settings::explain_detail(
                    self.invalid.as_ref(),
                    format!(
                        "warms the shards of the next {} pointers, up to {} downloads at once",
                        self.buffer_size, self.parallelism
                    ),
                ),
            )
            .execution_only(),
        );
    }
}

impl<S> Prefetch<S> {
    zephon_core::adapter_accessors!(inner);
}

impl<S: fmt::Debug> fmt::Debug for Prefetch<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prefetch")
            .field("inner", &self.inner)
            .field("buffer_size", &self.buffer_size)
            .field("parallelism", &self.parallelism)
            .field("buffered", &self.buffer.len())
            .field("in_flight", &self.in_flight.len())
            .field("stats", &self.metrics.snapshot())
            .finish_non_exhaustive()
    }
}

impl<S: Catalogued> Catalogued for Prefetch<S> {
    fn catalog(&self) -> &Catalog {
        &self.catalog
    }
}

fn shard_of(catalog: &Catalog, (d, s): (u32, u32)) -> Option<Arc<dyn Shard>> {
    catalog.get(d as usize)?.shards().get(s as usize).cloned()
}

impl<S> Prefetch<S>
where
    S: Stream<Item = Result<SamplePtr>>,
{
    // The operator's step; `poll_next` notes the end.
    fn poll_body(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<<Self as futures::Stream>::Item>> {
        let mut this = self.project();
        if let Some(e) = this.invalid.take() {
            *this.done = true;
            return Poll::Ready(Some(Err(e)));
        }
        if !this.probe.attached() {
            this.probe.attach(
                "prefetch",
                *this.parallelism,
                Some(*this.buffer_size as u64),
            );
            if let Some(obs) = Observer::current() {
                let (metrics, catalog) = (this.metrics.clone(), this.catalog.clone());
                obs.register_prefetch(move || timing_snapshot(&metrics, &catalog));
            }
        }
        // Look ahead: fill the buffer, noting shards not seen yet. At most
        // LOOKAHEAD_STEP pointers a call, so the first element leaves at once
        // and the buffer fills over the following calls.
        let mut budget = LOOKAHEAD_STEP;
        while !*this.done && this.buffer.len() < *this.buffer_size && budget > 0 {
            budget -= 1;
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => {
                    if let Ok(p) = &item {
                        let key = (p.dataset, p.shard);
                        if this.seen.insert(key) {
                            this.queued.push_back(Job::Shard(key));
                        }
                        let group = this.pending.entry(key).or_default();
                        group.push(p.sample);
                        if group.len() >= SAMPLE_GROUP {
                            let group = std::mem::take(group);
                            this.queued.push_back(Job::Samples(key, group));
                        }
                    }
                    this.probe.input();
                    this.buffer.push_back(item);
                }
                Poll::Ready(None) => {
                    *this.done = true;
                    for (key, group) in this.pending.drain() {
                        this.queued.push_back(Job::Samples(key, group));
                    }
                }
                Poll::Pending => break,
            }
        }
        // Reap finished warm-ups; a failed shard may be warmed again later.
        while let Poll::Ready(Some(done)) = this.in_flight.poll_next_unpin(cx) {
            reaped(this.metrics, this.seen, done);
        }
        // Slow start: the first shard downloads alone (the first batch waits
        // for it, and concurrent downloads would share its bandwidth), then
        // one more at a time up to `parallelism`.
        let finished = this.metrics.successes.get() + this.metrics.failures.get();
        let limit = (*this.parallelism).min(1 + finished as usize);
        while this.in_flight.len() < limit
            && let Some(job) = this.queued.pop_front()
        {
            let (key, samples) = match job {
                Job::Shard(key) => (key, None),
                Job::Samples(key, group) => (key, Some(group)),
            };
            let Some(shard) = shard_of(this.catalog, key) else {
                continue; // fetch reports unknown pointers
            };
            let metrics = this.metrics.clone();
            let whole = samples.is_none();
            let handle = match samples {
                None => {
                    this.metrics.requests.inc();
                    runtime::runtime().spawn(async move {
                        let started = Instant::now();
                        let r = shard.warm().await;
                        metrics.warm_time.record(started.elapsed());
                        r
                    })
                }
                Some(group) => {
                    this.metrics.sample_warms.inc();
                    runtime::runtime().spawn(async move { shard.warm_samples(&group).await })
                }
            };
            this.in_flight.push(Warming {
                shard: key,
                whole,
                handle,
            });
            this.metrics
                .max_in_flight
                .observe(this.in_flight.len() as u64);
            // Register the new task's waker.
            if let Poll::Ready(Some(done)) = this.in_flight.poll_next_unpin(cx) {
                reaped(this.metrics, this.seen, done);
            }
        }
        if let Some(s) = this.probe.stats() {
            s.max_queue.observe(this.buffer.len() as u64);
        }
        match this.buffer.pop_front() {
            Some(item) => {
                this.probe.output();
                Poll::Ready(Some(item))
            }
            None if *this.done => {
                this.probe.finish();
                Poll::Ready(None)
            }
            None => {
                this.probe.input_pending();
                Poll::Pending
            }
        }
    }
}

impl<S> Stream for Prefetch<S>
where
    S: Stream<Item = Result<SamplePtr>>,
{
    type Item = Result<SamplePtr>;

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (lo, hi) = self.inner.size_hint();
        let n = self.buffer.len();
        (lo.saturating_add(n), hi.and_then(|h| h.checked_add(n)))
    }

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let out = self.as_mut().poll_body(cx);
        if matches!(out, std::task::Poll::Ready(None)) {
            *self.project().terminated = true;
        }
        out
    }
}

// Ended once it returned `None`.
impl<S> futures::stream::FusedStream for Prefetch<S>
where
    S: Stream<Item = Result<SamplePtr>>,
{
    fn is_terminated(&self) -> bool {
        self.terminated
    }
}

/// Counts a finished warm-up; a failed whole-shard one lets the shard be
/// warmed again later. A failed block warm-up is forgotten: the read
/// downloads what it needs.
fn reaped(
    metrics: &PrefetchMetrics,
    seen: &mut HashSet<(u32, u32)>,
    done: ((u32, u32), bool, bool),
) {
    match done {
        (_, false, ok) => {
            if !ok {
                metrics.sample_warm_failures.inc();
            }
        }
        (_, true, true) => metrics.successes.inc(),
        (shard, true, false) => {
            metrics.failures.inc();
            seen.remove(&shard);
        }
    }
}

/// Adds [`prefetch`](PrefetchExt::prefetch) to pointer streams.
pub trait PrefetchExt: Stream<Item = Result<SamplePtr>> + Sized {
    /// Looks `buffer_size` pointers ahead (1 to 16 Mi) and warms their
    /// shards with up to `parallelism` downloads at once (1 to 4096);
    /// otherwise the first item is an error naming the setting. See
    /// [`Prefetch`].
    fn prefetch(self, buffer_size: usize, parallelism: usize) -> Prefetch<Self>
    where
        Self: Catalogued,
    {
        Prefetch::new(self, buffer_size, parallelism)
    }

    /// Like [`prefetch`](PrefetchExt::prefetch), for a stream that does not
    /// carry its catalog.
    fn prefetch_from(
        self,
        catalog: Catalog,
        buffer_size: usize,
        parallelism: usize,
    ) -> Prefetch<Self> {
        Prefetch::with_catalog(self, catalog, buffer_size, parallelism)
    }
}

impl<S: Stream<Item = Result<SamplePtr>>> PrefetchExt for S {}

#[cfg(test)]
mod tests {
    use super::*;
    use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};

    #[test]
    fn out_of_range_settings_are_errors_at_the_first_poll() {
        for (buffer, parallelism, key) in [
            (0, 4, "prefetch.buffer_size"),
            (usize::MAX, 4, "prefetch.buffer_size"),
            (16, 0, "prefetch.parallelism"),
            (16, 100_000, "prefetch.parallelism"),
        ] {
            let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 4]]).unwrap();
            let ws = WorkSource::builder().dataset(ds, 1.0).build().unwrap();
            let mut it = ws
                .stream()
                .prefetch(buffer, parallelism)
                .into_blocking_iter(Runner::Inline)
                .unwrap();
            let e = it.next().unwrap().unwrap_err().to_string();
            assert!(e.contains(&format!("`{key}`")), "{key}: {e}");
            assert!(it.next().is_none(), "{key}: the stream goes on");
        }
    }
}
