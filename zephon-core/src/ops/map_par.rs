//! `map_par`: a CPU-heavy closure over each element, `k` micro-batches at
//! work at once and as many queued behind them (an [`OffloadGroup`]).

use crate::context::Probe;
use crate::error::{Error, Result};
use crate::obs::{Explain, StageDescription};
use crate::ops::micro_batch::take_ready;
use crate::runner::{OffloadGroup, in_flight_per_worker, offload};
use crate::settings::{MICRO_BATCH, PARALLELISM};
use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, FuturesUnordered};
use futures::{Stream, StreamExt};
use pin_project::pin_project;
use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Elements per micro-batch: large enough that the hand-off to a worker
/// thread is negligible, small enough to keep `k` workers busy.
pub const DEFAULT_MICRO_BATCH: usize = 64;

type Chunk<U> = BoxFuture<'static, Result<Vec<Result<U>>>>;

enum InFlight<U> {
    Ordered(FuturesOrdered<Chunk<U>>),
    Unordered(FuturesUnordered<Chunk<U>>),
}

impl<U> InFlight<U> {
    fn len(&self) -> usize {
        match self {
            InFlight::Ordered(f) => f.len(),
            InFlight::Unordered(f) => f.len(),
        }
    }
    fn push(&mut self, f: Chunk<U>) {
        match self {
            InFlight::Ordered(q) => q.push_back(f),
            InFlight::Unordered(q) => q.push(f),
        }
    }
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Vec<Result<U>>>>> {
        match self {
            InFlight::Ordered(q) => q.poll_next_unpin(cx),
            InFlight::Unordered(q) => q.poll_next_unpin(cx),
        }
    }
}

/// Applies `f` to every element with up to `k` micro-batches at work at
/// once on worker threads (in place under the inline runner), and as many
/// more queued behind them under the threads runner: a worker that
/// finishes one goes on to the next without waiting for this operator's
/// task to be polled. Output order equals input order unless
/// [`MapPar::unordered`] opts out. Errors in the input pass
/// through in place; an error returned by `f` becomes that element's item.
/// A panic in `f` is an [`Error::Panic`] naming
/// `map_par`, under every runner, and the stream ends after it.
///
/// Created by [`PipelineExt::map_par`](crate::PipelineExt::map_par).
///
/// ```
/// use zephon_core::{PipelineExt, Runner};
/// let s = futures::stream::iter((0..100).map(Ok::<u64, zephon_core::Error>));
/// let v: Vec<u64> = s.map_par(|x| Ok(x * x), 4)
///     .into_blocking_iter(Runner::threads()).unwrap().map(Result::unwrap).collect();
/// assert_eq!(v, (0..100).map(|x| x * x).collect::<Vec<_>>());
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct MapPar<S, T, U> {
    #[pin]
    inner: S,
    f: Arc<dyn Fn(T) -> Result<U> + Send + Sync>,
    k: usize,
    micro: usize,
    pending: Vec<Result<T>>,
    in_flight: InFlight<U>,
    /// Where the micro-batches run: at most `k` at once.
    group: OffloadGroup,
    /// Micro-batches in flight for each of the `k` at work, set when first
    /// polled ([`in_flight_per_worker`]).
    queued: usize,
    ready: VecDeque<Result<U>>,
    done: bool,
    /// A micro-batch was lost (its closure panicked): the stream ends after
    /// the error rather than go on without those elements.
    failed: bool,
    probe: Probe,
    /// Where the parallelism comes from while it runs, if it is tuned.
    knob: Option<crate::knob::Knob>,
    // Out-of-range settings, reported by the first poll (a chain method
    // cannot return them).
    invalid: Option<Error>,
}

impl<S, T, U> MapPar<S, T, U> {
    /// Wraps `inner` with closure `f` and parallelism `k`, in
    /// [`PARALLELISM`] (1 to 4096): any other `k` makes the first poll
    /// return an [`Error::Config`] naming `map_par.parallelism`.
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Runner};
    /// let s = futures::stream::iter((0..4).map(Ok::<u64, zephon_core::Error>));
    /// let mut it = s.map_par(Ok, 0).into_blocking_iter(Runner::Inline).unwrap();
    /// assert!(it.next().unwrap().unwrap_err().to_string().contains("map_par.parallelism"));
    /// ```
    pub fn new<F>(inner: S, f: F, k: usize) -> Self
    where
        F: Fn(T) -> Result<U> + Send + Sync + 'static,
    {
        MapPar {
            invalid: PARALLELISM.check_usize("map_par.parallelism", k).err(),
            inner,
            f: Arc::new(f),
            k: k.clamp(1, PARALLELISM.max as usize),
            micro: DEFAULT_MICRO_BATCH,
            pending: Vec::new(),
            in_flight: InFlight::Ordered(FuturesOrdered::new()),
            group: OffloadGroup::new(k.clamp(1, PARALLELISM.max as usize)),
            queued: 0,
            ready: VecDeque::new(),
            done: false,
            failed: false,
            probe: Probe::default(),
            knob: None,
        }
    }

    /// Takes the parallelism from `knob` from now on, read again on every
    /// poll: a tuner (or the user) may move it while the pipeline runs.
    /// The output is the same whatever the knob says and whenever it
    /// moves (only the order of work on the workers changes); the knob's
    /// largest value sizes the operator's queue.
    pub fn tuned(mut self, knob: &crate::knob::Knob) -> Self {
        self.k = knob.get();
        self.group = OffloadGroup::new(self.k);
        self.knob = Some(knob.clone());
        self
    }

    /// Micro-batches in flight per worker: fixed at the first poll, by the
    /// runtime polling it; before, what the runtime will give.
    fn queue_depth(&self) -> usize {
        match self.queued {
            0 => crate::runner::in_flight_per_worker(),
            n => n,
        }
    }

    /// Emits results as they complete instead of in input order: an explicit
    /// opt-out of the determinism promise, for pipelines that do not need it.
    pub fn unordered(mut self) -> Self {
        self.in_flight = InFlight::Unordered(FuturesUnordered::new());
        self
    }

    /// Sets the micro-batch size (elements handed to a worker at once), in
    /// [`MICRO_BATCH`] (1 to 65,536): any other size makes the first poll
    /// return an [`Error::Config`] naming `map_par.micro_batch`.
    pub fn micro_batch(mut self, n: usize) -> Self {
        if let Err(e) = MICRO_BATCH.check_usize("map_par.micro_batch", n) {
            self.invalid.get_or_insert(e);
        }
        self.micro = n.clamp(1, MICRO_BATCH.max as usize);
        self
    }

    /// The parallelism.
    pub fn parallelism(&self) -> usize {
        self.k
    }
}

impl<S, T, U> MapPar<S, T, U> {
    crate::adapter_accessors!(inner);
}

impl<S: fmt::Debug, T, U> fmt::Debug for MapPar<S, T, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapPar")
            .field("inner", &self.inner)
            .field("parallelism", &self.k)
            .field("micro_batch", &self.micro)
            .field("ordered", &matches!(self.in_flight, InFlight::Ordered(_)))
            .field("in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

// Ends after the input did and every micro-batch was handed out, or
// after a panic lost one.
impl<S, T, U> futures::stream::FusedStream for MapPar<S, T, U>
where
    S: Stream<Item = Result<T>>,
    T: Send + 'static,
    U: Send + 'static,
{
    fn is_terminated(&self) -> bool {
        self.failed
            || (self.invalid.is_none()
                && self.done
                && self.pending.is_empty()
                && self.in_flight.len() == 0
                && self.ready.is_empty())
    }
}

impl<S, T, U> Stream for MapPar<S, T, U>
where
    S: Stream<Item = Result<T>>,
    T: Send + 'static,
    U: Send + 'static,
{
    type Item = Result<U>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if *this.failed {
            return Poll::Ready(None);
        }
        if let Some(e) = this.invalid.take() {
            *this.done = true;
            return Poll::Ready(Some(Err(e)));
        }
        if *this.queued == 0 {
            *this.queued = in_flight_per_worker();
        }
        let capacity = this.knob.as_ref().map_or(*this.k, |k| k.max());
        this.probe.attach(
            "map_par",
            *this.k,
            Some((*this.queued * capacity * *this.micro) as u64),
        );
        if let Some(knob) = this.knob.as_ref() {
            let k = knob.get();
            if k != *this.k {
                *this.k = k;
                this.group.set_limit(k);
                if let Some(s) = this.probe.stats() {
                    s.set_parallelism(k);
                }
            }
        }
        loop {
            if let Some(r) = this.ready.pop_front() {
                this.probe.output();
                return Poll::Ready(Some(r));
            }
            while this.in_flight.len() < *this.queued * *this.k && !*this.done {
                // Take what is ready now, up to one micro-batch; never wait
                // to fill it.
                let upstream_pending = take_ready(
                    this.inner.as_mut(),
                    cx,
                    this.pending,
                    *this.micro,
                    this.probe,
                    this.done,
                );
                if this.pending.is_empty() {
                    if upstream_pending && this.in_flight.len() == 0 {
                        this.probe.input_pending();
                    }
                    break;
                }
                let items = std::mem::take(this.pending);
                let f = this.f.clone();
                let stats = this.probe.shared();
                this.in_flight.push(offload("map_par", move || {
                    let t = stats.as_ref().map(|_| std::time::Instant::now());
                    let n = items.len() as u64;
                    let out = items.into_iter().map(|x| x.and_then(|x| f(x))).collect();
                    if let (Some(s), Some(t)) = (&stats, t) {
                        s.busy.record_many(t.elapsed().as_nanos() as u64, n);
                    }
                    out
                }));
                // In elements, as the capacity is: micro-batches in flight
                // times their size.
                if let Some(s) = this.probe.stats() {
                    s.max_queue
                        .observe((this.in_flight.len() * *this.micro) as u64);
                }
                if upstream_pending {
                    break;
                }
            }
            // Offloads are placed when first polled: here, in the group.
            let in_flight = &mut *this.in_flight;
            match this.group.enter(|| in_flight.poll_next(cx)) {
                Poll::Ready(Some(Ok(out))) => this.ready.extend(out),
                Poll::Ready(Some(Err(e))) => {
                    // A whole micro-batch is gone with the panic.
                    *this.failed = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    if *this.done {
                        this.probe.finish();
                        return Poll::Ready(None);
                    }
                    return Poll::Pending;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (lo, hi) = self.inner.size_hint();
        let extra = self.ready.len() + self.pending.len();
        let flying = self.in_flight.len().saturating_mul(self.micro);
        (
            lo.saturating_add(extra),
            hi.and_then(|h| h.checked_add(extra)?.checked_add(flying)),
        )
    }
}

impl<S: Explain, T, U> Explain for MapPar<S, T, U> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        let order = if matches!(self.in_flight, InFlight::Ordered(_)) {
            "ordered"
        } else {
            "unordered"
        };
        out.push(StageDescription::new(
            "map_par",
            self.k,
            Some((self.queue_depth() * self.k * self.micro) as u64),
            crate::settings::explain_detail(
                self.invalid.as_ref(),
                format!(
                    "micro-batches of {}, {order}{}",
                    self.micro,
                    self.knob
                        .as_ref()
                        .map_or(String::new(), crate::knob::Knob::explain)
                ),
            ),
        ));
    }
}
