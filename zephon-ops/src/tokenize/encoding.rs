//! The engine `tokenize` and `tokenize_chat` share: records gathered into
//! micro-batches, each encoded on a worker thread (at most `k` at once),
//! finished ones re-sequenced so the output order is the input order.

use super::Gate;
use crate::error::Error;
use crate::stats::TextStats;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use pin_project::pin_project;
use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use zephon_core::context::Probe;
use zephon_core::ops::micro_batch::take_ready;
use zephon_core::runner::offload;
use zephon_core::{Record, Result};

/// Finished micro-batches held for re-sequencing, per running one: bounds
/// the memory a slow head-of-line micro-batch can pin.
const REORDER_SLACK: usize = 4;

type Chunk = BoxFuture<'static, (u64, Result<Vec<Result<Record>>>)>;

/// What an operator built on [`Encoding`] does to one micro-batch.
pub(crate) trait ChunkEncoder: Send + Sync + 'static {
    /// Records per micro-batch.
    fn micro_batch(&self) -> usize;
    /// Encodes `items` in order, one output per input (an error for a
    /// record that cannot be encoded, or none where it is dropped).
    fn encode_chunk(&self, items: Vec<Result<Record>>, stats: &TextStats) -> Vec<Result<Record>>;
}

/// The shared state machine; the public operators wrap it.
#[pin_project]
pub(crate) struct Encoding<S, P> {
    #[pin]
    inner: S,
    name: &'static str,
    pub(crate) prepared: std::result::Result<Arc<P>, Option<Error>>,
    pub(crate) stats: Arc<TextStats>,
    pub(crate) k: usize,
    gate: Arc<Gate>,
    pending: Vec<Result<Record>>,
    // Running micro-batches: a finished one frees its worker at once, even
    // when an earlier one is still encoding; re-sequencing happens in
    // `finished`, so every worker stays busy and the order is kept.
    in_flight: FuturesUnordered<Chunk>,
    finished: BTreeMap<u64, Result<Vec<Result<Record>>>>,
    next_dispatch: u64,
    next_emit: u64,
    ready: VecDeque<Result<Record>>,
    done: bool,
    probe: Probe,
    /// Where `k` comes from while it runs, if it is tuned.
    pub(crate) knob: Option<zephon_core::knob::Knob>,
    /// It returned `None`: the end, for `FusedStream`.
    terminated: bool,
}

impl<S, P> Encoding<S, P> {
    /// `k` micro-batches encoding at once (already range-checked into
    /// `prepared`'s error when out of range).
    pub(crate) fn new(
        name: &'static str,
        inner: S,
        prepared: std::result::Result<P, Error>,
        k: usize,
    ) -> Self {
        Encoding {
            inner,
            name,
            prepared: prepared.map(Arc::new).map_err(Some),
            stats: Arc::new(TextStats::default()),
            k,
            gate: Arc::new(Gate::new(k)),
            pending: Vec::new(),
            in_flight: FuturesUnordered::new(),
            finished: BTreeMap::new(),
            next_dispatch: 0,
            next_emit: 0,
            ready: VecDeque::new(),
            done: false,
            probe: Probe::default(),
            knob: None,
            terminated: false,
        }
    }

    /// Takes `k` from `knob` from now on (see `Tokenize::tuned`).
    pub(crate) fn tune(&mut self, knob: &zephon_core::knob::Knob) {
        self.k = knob.get();
        self.gate = Arc::new(Gate::new(self.k));
        self.knob = Some(knob.clone());
    }

    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }

    pub(crate) fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    pub(crate) fn into_inner(self) -> S {
        self.inner
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    pub(crate) fn size_hint(&self) -> (usize, Option<usize>) {
        if self.prepared.is_err() {
            return (0, Some(1));
        }
        // Skips shrink the output and splits grow it: only the lower bound
        // of what is already finished is certain.
        (self.ready.len(), None)
    }
}

impl<S, P> Encoding<S, P>
where
    S: Stream<Item = Result<Record>>,
    P: ChunkEncoder,
{
    // The operator's step; `poll_next` notes the end.
    fn poll_body(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<<Self as futures::Stream>::Item>> {
        let mut this = self.project();
        let prepared = match this.prepared {
            Ok(p) => p.clone(),
            Err(e) => return Poll::Ready(e.take().map(|e| Err(e.into()))),
        };
        let micro = prepared.micro_batch();
        let name = *this.name;
        let most = this.knob.as_ref().map_or(*this.k, |k| k.max());
        this.probe
            .attach(name, *this.k, Some((2 * most * micro) as u64));
        if let Some(knob) = this.knob.as_ref() {
            let k = knob.get();
            if k != *this.k {
                *this.k = k;
                this.gate.set_limit(k);
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
            if let Some(chunk) = this.finished.remove(this.next_emit) {
                *this.next_emit += 1;
                match chunk {
                    Ok(out) => this.ready.extend(out),
                    Err(e) => return Poll::Ready(Some(Err(e))),
                }
                continue;
            }
            let outstanding = |d: u64, e: u64| (d - e) as usize;
            // Twice `k` handed out, `k` encoding: a worker that finishes
            // starts on a queued micro-batch at once, instead of idling
            // until this task is scheduled to hand out the next one.
            while this.in_flight.len() < 2 * *this.k
                && outstanding(*this.next_dispatch, *this.next_emit) < *this.k * REORDER_SLACK
                && !*this.done
            {
                // Take what is ready now, up to one micro-batch; never wait
                // to fill it.
                let upstream_pending = take_ready(
                    this.inner.as_mut(),
                    cx,
                    this.pending,
                    micro,
                    this.probe,
                    this.done,
                );
                if this.pending.is_empty() {
                    if upstream_pending && this.in_flight.is_empty() {
                        this.probe.input_pending();
                    }
                    break;
                }
                let items = std::mem::replace(this.pending, Vec::with_capacity(micro));
                let (p, stats, seq) = (prepared.clone(), this.stats.clone(), *this.next_dispatch);
                *this.next_dispatch += 1;
                let gate = this.gate.clone();
                let op = this.probe.shared();
                let work = offload(name, move || {
                    let _permit = gate.enter();
                    let (n, t) = (
                        items.len() as u64,
                        op.as_ref().map(|_| std::time::Instant::now()),
                    );
                    let out = p.encode_chunk(items, &stats);
                    if let (Some(op), Some(t)) = (&op, t) {
                        op.busy.record_many(t.elapsed().as_nanos() as u64, n);
                    }
                    out
                });
                if let Some(s) = this.probe.stats() {
                    s.max_queue.observe(this.in_flight.len() as u64 + 1);
                }
                this.in_flight
                    .push(Box::pin(async move { (seq, work.await) }));
                if upstream_pending {
                    break;
                }
            }
            match this.in_flight.poll_next_unpin(cx) {
                Poll::Ready(Some((seq, out))) => {
                    this.finished.insert(seq, out);
                }
                Poll::Ready(None) if *this.done && this.finished.is_empty() => {
                    this.probe.finish();
                    return Poll::Ready(None);
                }
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S, P> Stream for Encoding<S, P>
where
    S: Stream<Item = Result<Record>>,
    P: ChunkEncoder,
{
    type Item = Result<Record>;

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
impl<S, P> futures::stream::FusedStream for Encoding<S, P>
where
    S: Stream<Item = Result<Record>>,
    P: ChunkEncoder,
{
    fn is_terminated(&self) -> bool {
        self.terminated
    }
}
