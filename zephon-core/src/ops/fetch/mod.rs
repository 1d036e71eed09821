//! `fetch`: pointers in, records out.

mod read;

use read::{Chunks, Instruments, read_window};

use crate::context::Probe;
use crate::dataset::Catalog;
use crate::error::{Error, Result};
use crate::obs::{Explain, Observer, StageDescription};
use crate::ops::batch::{Batcher, Ready};
use crate::pointer::SamplePtr;
use crate::record::Record;
use crate::settings::{MICRO_BATCH, PARALLELISM};
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, Stream, StreamExt};
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Most pointers one read request carries.
pub const DEFAULT_MAX_GROUP: usize = 256;

/// [`Catalogued::next_pointers`](crate::work::Catalogued::next_pointers) of
/// the input, where `fetch` knows it.
type PointerRuns<S> = fn(Pin<&mut S>, &mut Vec<SamplePtr>, usize) -> Option<usize>;

/// Reads the records that pointers name. Consecutive pointers into the same
/// shard are grouped into one request (the shard reads runs of adjacent
/// samples at once); up to `parallelism` requests are in flight; records come
/// out in pointer order, each with its lane and lineage set.
///
/// With [`across_shards`](Fetch::across_shards) a group is instead a window
/// of up to `max_group` upcoming pointers of any shards: each shard's share
/// is one read, the shares are read at once, and the records still come out
/// in pointer order. A global shuffle over many shards interleaves them
/// pointer by pointer, so without it every group holds one sample; with
/// it, a shard read by byte range sees the window's samples of that shard
/// together and can merge neighbours into one request.
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
#[pin_project(project = FetchProj)]
#[must_use = "streams do nothing unless polled"]
pub struct Fetch<S> {
    #[pin]
    inner: S,
    catalog: Catalog,
    parallelism: usize,
    max_group: usize,
    across_shards: bool,
    group: Vec<SamplePtr>,
    carry: Option<SamplePtr>,
    /// Takes the input's pointers in runs, where it can hand them out so.
    runs: Option<PointerRuns<S>>,
    /// Pointers taken in a run and not yet grouped, from `pending_at` on.
    pending: Vec<SamplePtr>,
    pending_at: usize,
    in_flight: FuturesOrdered<BoxFuture<'static, Result<Chunks>>>,
    /// A read that was done when it was sent, with none before it in
    /// flight (a mapped or in-memory shard): taken as it is, where going
    /// through `in_flight` cost a task allocation and a wake-up per group.
    read_now: Option<Result<Chunks>>,
    /// The chunk of the last read group being handed out, in place: no
    /// copy into a queue.
    ready: std::vec::IntoIter<Record>,
    /// The last read group's chunks after `ready`.
    chunks: std::vec::IntoIter<Vec<Record>>,
    /// Where batch closes its batches, when batch takes fetch's records.
    chunking: Option<Chunking>,
    done: bool,
    probe: Probe,
    inst: Instruments,
    // Out-of-range settings, reported by the first poll (a chain method
    // cannot return them).
    invalid: Option<Error>,
    /// Where the parallelism comes from, when a tuner may move it.
    knob: Option<crate::knob::Knob>,
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
            across_shards: false,
            group: Vec::new(),
            carry: None,
            runs: None,
            pending: Vec::new(),
            pending_at: 0,
            in_flight: FuturesOrdered::new(),
            read_now: None,
            ready: Vec::new().into_iter(),
            chunks: Vec::new().into_iter(),
            chunking: None,
            done: false,
            probe: Probe::default(),
            inst: Instruments::default(),
            knob: None,
        }
    }

    /// Takes the number of reads in flight from `knob` from now on, read
    /// again on every poll: a tuner (or the user) may move it while the
    /// pipeline runs. The records are the same, in the same order,
    /// whatever the knob says and whenever it moves (reads complete in
    /// any order; they are handed out in pointer order); the knob's
    /// largest value sizes the operator's window.
    ///
    /// ```
    /// use zephon_core::knob::Knob;
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let ds = Dataset::in_memory("d", vec![(0..40).map(|i| Record::new().with("i", i)).collect(); 4])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).seed(3).build()?;
    /// let knob = Knob::parallelism("fetch", 1, 8)?;
    /// let mut it = ws.stream().fetch(1).max_group(4).tuned(&knob).into_blocking_iter(Runner::threads())?;
    /// let mut got = Vec::new();
    /// for (n, r) in it.by_ref().enumerate() {
    ///     if n == 50 {
    ///         knob.set(8, "more reads in flight");
    ///     }
    ///     got.push(r?.get("i").and_then(|v| v.as_int()).unwrap());
    /// }
    /// let fixed: Vec<i64> = ws.stream().fetch(3).into_blocking_iter(Runner::Inline)?
    ///     .map(|r| r.map(|r| r.get("i").and_then(|v| v.as_int()).unwrap()))
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(got, fixed);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn tuned(mut self, knob: &crate::knob::Knob) -> Self {
        self.parallelism = knob.get();
        self.knob = Some(knob.clone());
        self
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

    /// Lets one group hold pointers of different shards (off by default):
    /// a window of up to `max_group` upcoming pointers, split into one read
    /// per shard, read concurrently and put back in pointer order. For
    /// shards read by byte range under a shuffle that interleaves shards
    /// (a global shuffle), so a read sees enough of its shard's upcoming
    /// samples to merge neighbours, and more reads are in flight.
    ///
    /// ```
    /// use zephon_core::{BlockShuffle, Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let shards = (0..4).map(|s| (0..25).map(|i| Record::new().with("i", s * 100 + i)).collect()).collect();
    /// let ds = Dataset::in_memory("toy", shards).unwrap();
    /// let ws = WorkSource::builder().dataset(ds, 1.0).seed(3).shuffle_block_size(BlockShuffle::Global).build().unwrap();
    /// let read = |across: bool| -> Vec<i64> {
    ///     ws.stream().fetch(2).max_group(16).across_shards(across)
    ///         .into_blocking_iter(Runner::Inline).unwrap()
    ///         .map(|r| r.unwrap().get("i").and_then(|v| v.as_int()).unwrap()).collect()
    /// };
    /// assert_eq!(read(true), read(false));
    /// ```
    pub fn across_shards(mut self, on: bool) -> Self {
        self.across_shards = on;
        self
    }

    /// The read parallelism.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// Takes the input's pointers with `runs` rather than a poll each.
    pub(crate) fn pointer_runs(mut self, runs: PointerRuns<S>) -> Self {
        self.runs = Some(runs);
        self
    }

    fn pending(&self) -> usize {
        self.pending.len() - self.pending_at
    }

    /// Records read and not yet handed out.
    fn ready_len(&self) -> usize {
        let now = match &self.read_now {
            Some(Ok(chunks)) => chunks.iter().map(Vec::len).sum(),
            _ => 0,
        };
        self.ready.len() + self.chunks.as_slice().iter().map(Vec::len).sum::<usize>() + now
    }
}

/// Where `batch` will close batches of `size` of a lane that has every
/// element: after each `size` pointers from the stream's start. Fetch asks
/// for its read groups' records cut there, so a chunk can be a batch
/// without a copy. With several lanes the cuts fall elsewhere and batch
/// copies as it would without them: the cut changes no batch.
#[derive(Clone, Copy, Debug)]
struct Chunking {
    size: usize,
    /// Pointers sent to reads so far, modulo `size`.
    phase: usize,
}

impl Chunking {
    /// The cut of the next group, of `n` pointers.
    fn cut(&mut self, n: usize) -> (usize, usize) {
        let first = self.size - self.phase;
        self.phase = (self.phase + n % self.size) % self.size;
        (first, self.size)
    }
}

/// Sends the open group, if any, to be read: counted in, cut as
/// `chunking` asks. Whether there was one. A read that is done at once
/// while none is in flight goes to `read_now`: nothing before it is
/// waited for, so the order holds.
fn flush<S>(this: &mut FetchProj<'_, S>, cx: &mut Context<'_>) -> bool {
    if this.group.is_empty() {
        return false;
    }
    let group = std::mem::take(this.group);
    this.probe.input_n(group.len());
    let cut = this.chunking.as_mut().map(|c| c.cut(group.len()));
    let one_shard = !*this.across_shards;
    let mut read = read_window(this.catalog, group, one_shard, cut, this.inst.clone());
    if this.in_flight.is_empty()
        && this.read_now.is_none()
        && let Poll::Ready(r) = read.poll_unpin(cx)
    {
        *this.read_now = Some(r);
        return true;
    }
    this.in_flight.push_back(read);
    true
}

impl<S> Fetch<S> {
    crate::adapter_accessors!(inner);

    /// The records read and not yet handed out, in order.
    fn ready(self: Pin<&mut Self>) -> Ready<'_, Record> {
        let this = self.project();
        Ready {
            items: this.ready,
            chunks: this.chunks,
        }
    }

    /// Cuts read groups where batches of `size` close.
    fn chunked(mut self, size: usize) -> Self {
        self.chunking = Some(Chunking {
            size: size.clamp(1, crate::settings::BATCH_SIZE.max as usize),
            phase: 0,
        });
        self
    }
}

impl<S> Fetch<S>
where
    S: Stream<Item = Result<SamplePtr>>,
{
    /// [`PipelineExt::batch`](crate::PipelineExt::batch), the same batches,
    /// for which batch takes the records fetch has read straight from it
    /// rather than polling fetch for each.
    ///
    /// ```
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![(0..10).map(|i| Record::new().with("i", i as i64)).collect()]).unwrap();
    /// let ws = WorkSource::builder().dataset(ds, 1.0).shuffle_within_shard(false).build().unwrap();
    /// let sizes: Vec<usize> = ws.stream().fetch(2).batch(4).into_blocking_iter(Runner::Inline).unwrap()
    ///     .map(|b| b.unwrap().len()).collect();
    /// assert_eq!(sizes, vec![4, 4, 2]);
    /// ```
    pub fn batch(self, n: usize) -> Batcher<Self, Record> {
        Batcher::new(self.chunked(n), n, false).take_ready(Fetch::ready)
    }

    /// [`PipelineExt::batch_with`](crate::PipelineExt::batch_with), taking
    /// the read records as [`batch`](Fetch::batch) does.
    pub fn batch_with(self, n: usize, drop_last: bool) -> Batcher<Self, Record> {
        Batcher::new(self.chunked(n), n, drop_last).take_ready(Fetch::ready)
    }
}

impl<S: fmt::Debug> fmt::Debug for Fetch<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fetch")
            .field("inner", &self.inner)
            .field("parallelism", &self.parallelism)
            .field("max_group", &self.max_group)
            .field("across_shards", &self.across_shards)
            .field("in_flight", &self.in_flight.len())
            .field("ready", &self.ready_len())
            .finish_non_exhaustive()
    }
}

// Ends after the input did and every read group was handed out.
impl<S> futures::stream::FusedStream for Fetch<S>
where
    S: Stream<Item = Result<SamplePtr>>,
{
    fn is_terminated(&self) -> bool {
        self.invalid.is_none()
            && self.done
            && self.carry.is_none()
            && self.group.is_empty()
            && self.pending() == 0
            && self.in_flight.is_empty()
            && self.read_now.is_none()
            && self.ready_len() == 0
    }
}

impl<S> Stream for Fetch<S>
where
    S: Stream<Item = Result<SamplePtr>>,
{
    type Item = Result<Record>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        // Checked before it is taken: taking moves the whole error out
        // on every poll.
        if this.invalid.is_some()
            && let Some(e) = this.invalid.take()
        {
            *this.done = true;
            return Poll::Ready(Some(Err(e)));
        }
        let most = this.knob.as_ref().map_or(*this.parallelism, |k| k.max());
        let window = (most * *this.max_group) as u64;
        if !this.probe.attached() {
            this.probe.attach("fetch", *this.parallelism, Some(window));
            // Cloned once here and per read group below, never per element.
            *this.inst = Instruments {
                op: this.probe.shared(),
                fetch: Observer::current().map(|o| o.fetch_stats(this.catalog.clone())),
            };
        }
        if let Some(knob) = this.knob.as_ref() {
            let k = knob.get();
            if k != *this.parallelism {
                *this.parallelism = k;
                if let Some(s) = this.probe.stats() {
                    s.set_parallelism(k);
                }
            }
        }
        loop {
            // Elements are counted per read group (in when it is sent, out
            // when it returns), never per element.
            if let Some(r) = this.ready.next() {
                return Poll::Ready(Some(Ok(r)));
            }
            if let Some(c) = this.chunks.next() {
                *this.ready = c.into_iter();
                continue;
            }
            // Fill the in-flight window with groups of same-shard pointers.
            while this.in_flight.len() < *this.parallelism && this.read_now.is_none() {
                if let Some(p) = this.carry.take() {
                    this.group.push(p);
                }
                if *this.done {
                    flush(&mut this, cx);
                    break;
                }
                let mut from_pending = false;
                let polled = if let Some(&p) = this.pending.get(*this.pending_at) {
                    *this.pending_at += 1;
                    from_pending = true;
                    Poll::Ready(Some(Ok(p)))
                } else if let Some(runs) = *this.runs {
                    this.pending.clear();
                    *this.pending_at = 0;
                    match runs(this.inner.as_mut(), this.pending, *this.max_group) {
                        Some(0) => Poll::Ready(None),
                        Some(_) => {
                            *this.pending_at = 1;
                            from_pending = true;
                            Poll::Ready(Some(Ok(this.pending[0])))
                        }
                        None => {
                            *this.runs = None;
                            this.inner.as_mut().poll_next(cx)
                        }
                    }
                } else {
                    this.inner.as_mut().poll_next(cx)
                };
                match polled {
                    Poll::Ready(Some(Ok(p))) => {
                        this.probe.arrived();
                        let same = this
                            .group
                            .first()
                            .is_none_or(|f| f.dataset == p.dataset && f.shard == p.shard);
                        if (same || *this.across_shards) && this.group.len() < *this.max_group {
                            // The pointers of a run that join the same group,
                            // at once: the rule above, applied to each.
                            let rest = &this.pending[*this.pending_at..];
                            let room = (*this.max_group - this.group.len() - 1).min(rest.len());
                            let n = if *this.across_shards {
                                room
                            } else {
                                rest[..room]
                                    .iter()
                                    .take_while(|q| q.dataset == p.dataset && q.shard == p.shard)
                                    .count()
                            };
                            if this.group.is_empty() && *this.pending_at == 1 && n == rest.len() {
                                // A whole run (`p` its first pointer) makes an
                                // empty group: its buffer becomes the group's,
                                // not copied.
                                std::mem::swap(this.group, this.pending);
                                this.pending.clear();
                                *this.pending_at = 0;
                            } else {
                                this.group.push(p);
                                this.group.extend_from_slice(&rest[..n]);
                                *this.pending_at += n;
                            }
                        } else {
                            flush(&mut this, cx);
                            if from_pending {
                                // Left in the run it came from: the next
                                // group starts with it, and a whole run then
                                // becomes that group by the swap above. Held
                                // aside, it made every later group a copy
                                // of its run.
                                *this.pending_at -= 1;
                            } else {
                                *this.carry = Some(p);
                            }
                        }
                    }
                    Poll::Ready(Some(Err(e))) => {
                        flush(&mut this, cx);
                        this.in_flight
                            .push_back(futures::future::ready(Err(e)).boxed());
                    }
                    Poll::Ready(None) => *this.done = true,
                    Poll::Pending => {
                        // Do not hold a partial group back waiting for more.
                        if !flush(&mut this, cx) && this.in_flight.is_empty() {
                            this.probe.input_pending();
                        }
                        break;
                    }
                }
            }
            if let Some(s) = this.probe.stats() {
                s.max_queue.observe(this.in_flight.len() as u64);
            }
            let read = match this.read_now.take() {
                Some(r) => Poll::Ready(Some(r)),
                None => this.in_flight.poll_next_unpin(cx),
            };
            match read {
                Poll::Ready(Some(Ok(chunks))) => {
                    this.probe.output_n(chunks.iter().map(Vec::len).sum());
                    *this.chunks = chunks.into_iter();
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
        let extra =
            self.ready_len() + self.group.len() + self.pending() + self.carry.is_some() as usize;
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
        let k = self.knob.as_ref().map_or(self.parallelism, |k| k.get());
        let most = self.knob.as_ref().map_or(self.parallelism, |k| k.max());
        let tuned = self
            .knob
            .as_ref()
            .map_or(String::new(), crate::knob::Knob::explain);
        out.push(StageDescription::new(
            "fetch",
            k,
            Some((most * self.max_group) as u64),
            crate::settings::explain_detail(
                self.invalid.as_ref(),
                if self.across_shards {
                    format!(
                        "windows of up to {} samples, one read per shard in each{tuned}",
                        self.max_group
                    )
                } else {
                    format!(
                        "reads of up to {} samples of one shard{tuned}",
                        self.max_group
                    )
                },
            ),
        ));
    }
}
