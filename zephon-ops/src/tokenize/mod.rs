//! `tokenize`: documents to token ids with a Hugging Face `tokenizer.json`,
//! micro-batches encoded on worker threads, output order = input order.

use crate::error::Error;
use crate::fields;
use crate::stats::TextStats;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use pin_project::pin_project;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use zephon_core::obs::{Explain, Probe, StageDescription};
use zephon_core::ops::micro_batch::take_ready;
use zephon_core::runner::offload;
use zephon_core::settings::PARALLELISM;
use zephon_core::{Record, Result};

mod config;
mod prepared;

pub use config::{DEFAULT_MICRO_BATCH, OnMissing, Overflow, SpecialTokens, TokenizeConfig};
use prepared::Prepared;

/// A counting semaphore for worker threads: at most `k` micro-batches
/// encode at once, however many are queued.
#[derive(Debug)]
pub(crate) struct Gate {
    free: Mutex<usize>,
    cv: Condvar,
}

pub(crate) struct Permit<'a>(&'a Gate);

impl Gate {
    pub(crate) fn new(k: usize) -> Self {
        Gate {
            free: Mutex::new(k),
            cv: Condvar::new(),
        }
    }

    pub(crate) fn enter(&self) -> Permit<'_> {
        // A poisoned lock only means another worker panicked mid-count; the
        // count itself is still right.
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.cv.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.0.cv.notify_one();
    }
}

type Chunk = BoxFuture<'static, (u64, Result<Vec<Result<Record>>>)>;

/// Finished micro-batches held for re-sequencing, per running one: bounds
/// the memory a slow head-of-line micro-batch can pin.
pub(crate) const REORDER_SLACK: usize = 4;

/// Tokenizes the text field of every record into [`fields::INPUT_IDS`], with
/// up to `parallelism` micro-batches encoding at once on worker threads (in
/// place under the inline runner). The output order equals the input order
/// for any parallelism. A configuration error (a special token the
/// vocabulary lacks) is the stream's first and only item.
///
/// Created by [`TextPipelineExt::tokenize`](crate::TextPipelineExt::tokenize).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner};
/// use zephon_ops::{SpecialTokens, TextPipelineExt, TokenizeConfig};
/// # let json = include_bytes!("../../tests/fixtures/tokenizer.json");
/// let config = TokenizeConfig::from_bytes(json)?.special_tokens(SpecialTokens::Eos);
/// let eos = config.token_id("<|endoftext|>").unwrap();
/// let docs = ["the first document", "and a second"].map(|t| Ok(Record::new().with("text", t)));
/// let out: Vec<Record> = futures::stream::iter(docs)
///     .tokenize(config, 2)
///     .into_blocking_iter(Runner::threads())?
///     .collect::<Result<_, _>>()?;
/// assert_eq!(out.len(), 2);
/// assert_eq!(out[0].tokens("input_ids").unwrap().last(), Some(&eos));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct Tokenize<S> {
    #[pin]
    inner: S,
    prepared: std::result::Result<Arc<Prepared>, Option<Error>>,
    stats: Arc<TextStats>,
    k: usize,
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
}

impl<S> Tokenize<S> {
    /// Wraps `inner` with `config`, `parallelism` micro-batches in flight,
    /// in [`PARALLELISM`] (1 to 4096). An out-of-range `parallelism` or
    /// option of `config` makes the first poll return an error naming it,
    /// and the stream end.
    pub fn new(inner: S, config: TokenizeConfig, parallelism: usize) -> Self {
        let prepared = Error::in_range(PARALLELISM, "tokenize.parallelism", parallelism)
            .and_then(|_| config.prepare());
        let k = parallelism.clamp(1, PARALLELISM.max as usize);
        Tokenize {
            inner,
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
        }
    }

    /// Counts into `stats` (shared with other operators) instead of its own.
    pub fn with_stats(mut self, stats: Arc<TextStats>) -> Self {
        self.stats = stats;
        self
    }

    /// The statistics this operator counts into.
    pub fn stats(&self) -> Arc<TextStats> {
        self.stats.clone()
    }
}

impl<S> Tokenize<S> {
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

impl<S: fmt::Debug> fmt::Debug for Tokenize<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Tokenize");
        d.field("inner", &self.inner);
        if let Ok(p) = &self.prepared {
            d.field("config", &p.config);
        }
        d.field("parallelism", &self.k)
            .field("in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

impl<S> Stream for Tokenize<S>
where
    S: Stream<Item = Result<Record>>,
{
    type Item = Result<Record>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        let prepared = match this.prepared {
            Ok(p) => p.clone(),
            Err(e) => return Poll::Ready(e.take().map(|e| Err(e.into()))),
        };
        let micro = prepared.config.micro_batch;
        this.probe
            .attach("tokenize", *this.k, Some((2 * *this.k * micro) as u64));
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
                let work = offload("tokenize", move || {
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

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.prepared.is_err() {
            return (0, Some(1));
        }
        // Skips shrink the output and splits grow it: only the lower bound
        // of what is already finished is certain.
        (self.ready.len(), None)
    }
}

impl<S: Explain> Explain for Tokenize<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        let detail = match &self.prepared {
            Ok(p) => format!(
                "`{}` -> `{}`, micro-batches of {}",
                p.config.field,
                fields::INPUT_IDS,
                p.config.micro_batch
            ),
            Err(e) => zephon_core::settings::explain_detail(
                e.as_ref(),
                "invalid configuration (already reported)".into(),
            ),
        };
        out.push(StageDescription::new("tokenize", self.k, None, detail));
    }
}
