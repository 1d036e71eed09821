//! `fetch`: pointers in, records out.

use crate::dataset::Catalog;
use crate::error::{Error, Result};
use crate::obs::{Explain, FetchStats, GroupRecord, Observer, OpStats, Probe, StageDescription};
use crate::pointer::SamplePtr;
use crate::record::Record;
use crate::settings::{MICRO_BATCH, PARALLELISM};
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, Stream, StreamExt};
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// Fetch sizes one read group in this many, and one record in this many
/// within it (bytes are an estimate).
const BYTE_SAMPLE: u64 = 16;

/// Most pointers one read request carries.
pub const DEFAULT_MAX_GROUP: usize = 256;

/// Reads the records that pointers name. Consecutive pointers into the same
/// shard are grouped into one request (the shard reads runs of adjacent
/// samples at once); up to `parallelism` requests are in flight; records come
/// out in pointer order, each with its lane and lineage set.
///
/// Created by [`PipelineExt::fetch`](crate::PipelineExt::fetch).
///
/// ```
/// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
/// let ds = Dataset::in_memory("toy", vec![(0..10).map(|i| Record::new().with("i", i as i64)).collect()]).unwrap();
/// let ws = WorkSource::builder().dataset(ds, 1.0).shuffle_within_shard(false).build().unwrap();
/// let records: Vec<Record> = ws.stream().fetch(4).into_blocking_iter(Runner::Inline).unwrap()
///     .map(Result::unwrap).collect();
/// assert_eq!(records[3].get("i").and_then(|v| v.as_int()), Some(3));
/// assert_eq!(records[3].lineage[0].sample, 3);
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct Fetch<S> {
    #[pin]
    inner: S,
    catalog: Catalog,
    parallelism: usize,
    max_group: usize,
    group: Vec<SamplePtr>,
    carry: Option<SamplePtr>,
    in_flight: FuturesOrdered<BoxFuture<'static, Result<Vec<Record>>>>,
    /// The last read group's records, handed out in place: no copy into
    /// a queue.
    ready: std::vec::IntoIter<Record>,
    done: bool,
    probe: Probe,
    inst: Instruments,
    // Out-of-range settings, reported by the first poll (a chain method
    // cannot return them).
    invalid: Option<Error>,
}

impl<S> Fetch<S> {
    /// Fetches from `catalog` with up to `parallelism` reads in flight, in
    /// [`PARALLELISM`] (1 to 4096): any other value makes the first poll
    /// return an [`Error::Config`] naming `fetch.parallelism`.
    pub fn new(inner: S, catalog: Catalog, parallelism: usize) -> Self {
        Fetch {
            invalid: PARALLELISM
                .check_usize("fetch.parallelism", parallelism)
                .err(),
            inner,
            catalog,
            parallelism: parallelism.clamp(1, PARALLELISM.max as usize),
            max_group: DEFAULT_MAX_GROUP,
            group: Vec::new(),
            carry: None,
            in_flight: FuturesOrdered::new(),
            ready: Vec::new().into_iter(),
            done: false,
            probe: Probe::default(),
            inst: Instruments::default(),
        }
    }

    /// Sets the most pointers one read request carries, in
    /// [`MICRO_BATCH`] (1 to 65,536): any other value makes the first poll
    /// return an [`Error::Config`] naming `fetch.max_group`.
    pub fn max_group(mut self, n: usize) -> Self {
        if let Err(e) = MICRO_BATCH.check_usize("fetch.max_group", n) {
            self.invalid.get_or_insert(e);
        }
        self.max_group = n.clamp(1, MICRO_BATCH.max as usize);
        self
    }

    /// The read parallelism.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }
}

impl<S> Fetch<S> {
    /// The stream this adapter reads from.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The stream this adapter reads from, mutably. Taking items from it
    /// directly bypasses this adapter.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The stream this adapter reads from; what the adapter holds
    /// (buffered or in-flight elements) is dropped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for Fetch<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fetch")
            .field("inner", &self.inner)
            .field("parallelism", &self.parallelism)
            .field("max_group", &self.max_group)
            .field("in_flight", &self.in_flight.len())
            .field("ready", &self.ready.len())
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Default)]
struct Instruments {
    op: Option<Arc<OpStats>>,
    fetch: Option<Arc<FetchStats>>,
}

fn read_group(
    catalog: &Catalog,
    group: Vec<SamplePtr>,
    inst: Instruments,
) -> BoxFuture<'static, Result<Vec<Record>>> {
    let first = group[0];
    let Some(shard) = catalog
        .get(first.dataset as usize)
        .and_then(|d| d.shards().get(first.shard as usize))
        .cloned()
    else {
        return futures::future::ready(Err(Error::UnknownPointer { ptr: first })).boxed();
    };
    let dataset = catalog[first.dataset as usize].name().to_owned();
    async move {
        let indices: Vec<u64> = group.iter().map(|p| p.sample).collect();
        let timed = inst.op.is_some() || inst.fetch.is_some();
        let t0 = timed.then(Instant::now);
        let hit = !timed || shard.is_warm();
        if !hit {
            // A failed warm-up is not fatal: the read below tries again and
            // reports the error with its shard.
            let _ = shard.warm().await;
        }
        let t1 = timed.then(Instant::now);
        let mut records = shard.read_indices(&indices).await?;
        if let (Some(t0), Some(t1)) = (t0, t1) {
            let (open_ns, read_ns) = ((t1 - t0).as_nanos() as u64, t1.elapsed().as_nanos() as u64);
            if let Some(f) = &inst.fetch {
                f.record(GroupRecord {
                    dataset: first.dataset,
                    shard: first.shard,
                    samples: group.len() as u64,
                    hit,
                    open_ns,
                    read_ns,
                });
            }
            if let Some(op) = &inst.op {
                op.busy.record_many(open_ns + read_ns, group.len() as u64);
                // Sizing every record costs more than reading it from memory;
                // one group in BYTE_SAMPLE stands for the others.
                // Within it, one record in BYTE_SAMPLE too.
                if op.tick().is_multiple_of(BYTE_SAMPLE) && !records.is_empty() {
                    let step = BYTE_SAMPLE as usize;
                    let (sum, n) = records
                        .iter()
                        .step_by(step)
                        .fold((0u64, 0u64), |(s, n), r| (s + r.byte_len() as u64, n + 1));
                    op.bytes_out
                        .add(sum * records.len() as u64 / n * BYTE_SAMPLE);
                }
            }
        }
        if records.len() != group.len() {
            return Err(Error::Operator {
                op: "fetch",
                message: format!(
                    "dataset `{dataset}`, shard `{}` returned {} records for {} samples",
                    shard.name(),
                    records.len(),
                    group.len()
                ),
            });
        }
        for (r, p) in records.iter_mut().zip(&group) {
            r.lane = p.lane;
            r.lineage.clear();
            r.lineage.push(*p);
        }
        Ok(records)
    }
    .boxed()
}

impl<S> Stream for Fetch<S>
where
    S: Stream<Item = Result<SamplePtr>>,
{
    type Item = Result<Record>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if let Some(e) = this.invalid.take() {
            *this.done = true;
            return Poll::Ready(Some(Err(e)));
        }
        let window = (*this.parallelism * *this.max_group) as u64;
        if !this.probe.attached() {
            this.probe.attach("fetch", *this.parallelism, Some(window));
            // Cloned once here and per read group below, never per element.
            *this.inst = Instruments {
                op: this.probe.shared(),
                fetch: Observer::current().map(|o| o.fetch_stats(this.catalog.clone())),
            };
        }
        let inst = &*this.inst;
        loop {
            // Elements are counted per read group (in when it is sent, out
            // when it returns), never per element.
            if let Some(r) = this.ready.next() {
                return Poll::Ready(Some(Ok(r)));
            }
            // Fill the in-flight window with groups of same-shard pointers.
            while this.in_flight.len() < *this.parallelism {
                if let Some(p) = this.carry.take() {
                    this.group.push(p);
                }
                if *this.done {
                    if !this.group.is_empty() {
                        let g = std::mem::take(this.group);
                        this.probe.input_n(g.len());
                        this.in_flight
                            .push_back(read_group(this.catalog, g, inst.clone()));
                    }
                    break;
                }
                match this.inner.as_mut().poll_next(cx) {
                    Poll::Ready(Some(Ok(p))) => {
                        this.probe.arrived();
                        let same = this
                            .group
                            .first()
                            .is_none_or(|f| f.dataset == p.dataset && f.shard == p.shard);
                        if same && this.group.len() < *this.max_group {
                            this.group.push(p);
                        } else {
                            let g = std::mem::take(this.group);
                            this.probe.input_n(g.len());
                            this.in_flight
                                .push_back(read_group(this.catalog, g, inst.clone()));
                            *this.carry = Some(p);
                        }
                    }
                    Poll::Ready(Some(Err(e))) => {
                        if !this.group.is_empty() {
                            let g = std::mem::take(this.group);
                            this.probe.input_n(g.len());
                            this.in_flight
                                .push_back(read_group(this.catalog, g, inst.clone()));
                        }
                        this.in_flight
                            .push_back(futures::future::ready(Err(e)).boxed());
                    }
                    Poll::Ready(None) => *this.done = true,
                    Poll::Pending => {
                        // Do not hold a partial group back waiting for more.
                        if !this.group.is_empty() {
                            let g = std::mem::take(this.group);
                            this.probe.input_n(g.len());
                            this.in_flight
                                .push_back(read_group(this.catalog, g, inst.clone()));
                        } else if this.in_flight.is_empty() {
                            this.probe.input_pending();
                        }
                        break;
                    }
                }
            }
            if let Some(s) = this.probe.stats() {
                s.max_queue.observe(this.in_flight.len() as u64);
            }
            match this.in_flight.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(records))) => {
                    this.probe.output_n(records.len());
                    *this.ready = records.into_iter();
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    if *this.done && this.group.is_empty() && this.carry.is_none() {
                        this.probe.finish();
                        return Poll::Ready(None);
                    }
                    if !*this.done && this.carry.is_none() {
                        return Poll::Pending;
                    }
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (lo, hi) = self.inner.size_hint();
        let extra = self.ready.len() + self.group.len() + self.carry.is_some() as usize;
        let flying = self.in_flight.len().saturating_mul(self.max_group);
        (
            lo.saturating_add(extra),
            hi.and_then(|h| h.checked_add(extra)?.checked_add(flying)),
        )
    }
}

impl<S: Explain> Explain for Fetch<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(StageDescription::new(
            "fetch",
            self.parallelism,
            Some((self.parallelism * self.max_group) as u64),
            crate::settings::explain_detail(
                self.invalid.as_ref(),
                format!("reads of up to {} samples of one shard", self.max_group),
            ),
        ));
    }
}
