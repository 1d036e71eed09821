//! The blocking iterator: a pipeline driven from synchronous code, its
//! hand-off from the threads runner, and the consumer's clock.

use super::Runner;
use crate::context::PipelineContext;
use crate::error::{Error, Result};
use crate::obs::{Observer, Tracking};
use futures::{FutureExt, Stream, StreamExt};
use std::pin::Pin;
use std::time::Instant;

/// A pipeline driven to completion from synchronous code, one item per
/// `next()`. Owns its runtime.
///
/// A panic anywhere in the pipeline, under either runner, is an
/// [`Error::Panic`] (naming the operator where known), after which the
/// iterator ends: a failed pipeline never looks like one that ran out of data.
///
/// ```
/// use zephon_core::{PipelineExt, Runner};
/// let s = futures::stream::iter((0..5).map(Ok::<_, zephon_core::Error>));
/// let v: Vec<i32> = s.into_blocking_iter(Runner::Inline).unwrap().map(Result::unwrap).collect();
/// assert_eq!(v, vec![0, 1, 2, 3, 4]);
/// ```
pub struct BlockingIter<T> {
    source: Source<T>,
    observer: Option<Observer>,
    last_return: Option<Instant>,
    /// Deliveries since the consumer's clock was last read.
    untimed: u64,
    /// Whether the consumer takes items so fast that the clock is read only
    /// when it has to wait for a chunk (threads runner).
    fast_consumer: bool,
    // Consumer timing counted here and published every CONSUMER_PUBLISH
    // deliveries (and at the end): shared counters per batch would cost more
    // than a cheap pipeline's batch.
    local: ConsumerTally,
    // Dropped last, so tasks the pipeline spawned can wind down.
    runtime: tokio::runtime::Runtime,
}

type BoxedPipeline<T> = Pin<Box<dyn Stream<Item = Result<T>> + Send>>;

type Starter<T> = Box<dyn FnOnce(&tokio::runtime::Runtime, Option<&Observer>) -> Source<T> + Send>;

enum Source<T> {
    /// Not polled yet: observability may still be enabled.
    Idle(Starter<T>),
    /// Inline runner: the caller's thread polls the pipeline.
    Polled(BoxedPipeline<T>),
    /// Threads runner: a task on the pool drives the pipeline while the
    /// caller trains, handing items over a short queue.
    Driven {
        rx: tokio::sync::mpsc::Receiver<Vec<Result<T>>>,
        /// The last chunk, handed out in place.
        local: std::vec::IntoIter<Result<T>>,
        task: tokio::task::JoinHandle<()>,
    },
    /// Between states.
    Taken,
}

/// A consumer taking items at shorter intervals than this is timed per
/// chunk rather than per item: one clock read would cost a noticeable part
/// of its interval.
const FAST_CONSUMER: std::time::Duration = std::time::Duration::from_micros(20);

/// A fast inline consumer is timed on one delivery in this many.
const FAST_SAMPLE_EVERY: u64 = 8;

/// Deliveries counted locally before the consumer totals are published.
const CONSUMER_PUBLISH: u64 = 16;

#[derive(Debug, Default)]
struct ConsumerTally {
    wait_ns: u64,
    busy_ns: u64,
    n: u64,
}

impl ConsumerTally {
    fn publish(&mut self, obs: &Observer) {
        if self.n > 0 {
            obs.consumer_totals(self.wait_ns, self.busy_ns, self.n);
            *self = ConsumerTally::default();
        }
    }
}

/// Chunks the threads runner keeps ready between the pipeline task and the
/// caller: enough to decouple them, small enough not to hold memory.
const HANDOFF_DEPTH: usize = 1;
/// Most items per hand-off. Items already finished travel together, so a fast
/// pipeline wakes the caller once per chunk instead of once per item; a slow
/// one still hands each item over as soon as it is ready. Each hand-off
/// that finds the other side asleep costs a wake-up and a context switch
/// or more; on a busy machine a cheap pipeline ran about 13% slower with
/// chunks of 32 than of 128 (`bench engine`), and a deeper queue of small
/// chunks did not win that back, so the queue holds one large chunk.
///
/// Chunks grow to this size only while the caller takes them quickly: a
/// chunk that waits longer than [`HANDOFF_PATIENCE`] for the queue halves
/// the next one's size (down to one item), any other doubles it. A caller
/// that spends milliseconds an item (a training step) thus holds a few
/// items ahead, not three chunks of this size: the memory a pipeline keeps
/// ready stays what its own buffers (`prefetch_batches`) say, while a
/// caller taking items in microseconds gets the large chunks.
const HANDOFF_CHUNK: usize = 128;
/// How long a chunk may wait for room in the queue before the next one is
/// made smaller: about the time a chunk's wake-up costs many times over.
const HANDOFF_PATIENCE: std::time::Duration = std::time::Duration::from_millis(1);
/// Times the caller looks for a chunk, yielding its core in between, before
/// it sleeps on the queue: a fast pipeline usually has the next chunk ready
/// within a few yields, and a sleep and its wake-up cost a futex call each
/// way, more than a cheap pipeline takes to make a chunk.
const HANDOFF_SPINS: u32 = 32;

impl<T> std::fmt::Debug for BlockingIter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingIter")
            .field("observer", &self.observer)
            .finish_non_exhaustive()
    }
}

impl<T> BlockingIter<T> {
    /// Wraps a stream with a runtime built by `runner`. Nothing runs until
    /// the first `next()`.
    pub fn new<S>(stream: S, runner: Runner) -> Result<Self>
    where
        S: Stream<Item = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        runner.check()?;
        let driven = matches!(runner, Runner::Threads { .. });
        let starter: Starter<T> = Box::new(move |runtime, observer| {
            if let Some(obs) = observer {
                obs.start();
            }
            if driven {
                // The context is entered once per poll of the driving
                // task, which hands over up to a chunk of items per poll,
                // rather than once per item.
                drive(runtime, Box::pin(stream), observer.cloned())
            } else {
                Source::Polled(match observer {
                    Some(obs) => Box::pin(obs.observe(stream).without_consumer()),
                    None => Box::pin(stream),
                })
            }
        });
        Ok(BlockingIter {
            source: Source::Idle(starter),
            observer: None,
            last_return: None,
            untimed: 0,
            fast_consumer: false,
            local: ConsumerTally::default(),
            runtime: runner.runtime()?,
        })
    }

    /// Turns observability on (call before the first `next()`); returns the
    /// handle to take snapshots with, from any thread.
    pub fn enable_observability(&mut self, tracking: Tracking) -> Observer {
        let obs = Observer::new(tracking);
        if tracking != Tracking::Off {
            self.observer = Some(obs.clone());
        }
        obs
    }

    /// The observer, if observability is on.
    pub fn observer(&self) -> Option<&Observer> {
        self.observer.as_ref()
    }

    fn start(&mut self) {
        if !matches!(self.source, Source::Idle(_)) {
            return;
        }
        let Source::Idle(starter) = std::mem::replace(&mut self.source, Source::Taken) else {
            unreachable!("checked above")
        };
        self.source = starter(&self.runtime, self.observer.as_ref());
    }
}

/// Spawns the pipeline on the pool, handing finished items over in chunks.
fn drive<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    mut stream: BoxedPipeline<T>,
    observer: Option<Observer>,
) -> Source<T> {
    use tokio::sync::mpsc::error::TrySendError;
    let (tx, rx) = tokio::sync::mpsc::channel(HANDOFF_DEPTH);
    let driver = async move {
        let mut limit = 1;
        loop {
            let first = match next_or_panic(&mut stream).await {
                Some(x) => x,
                None => break,
            };
            let mut chunk = Vec::with_capacity(limit);
            let mut stop = ends_pipeline(&first);
            chunk.push(first);
            while chunk.len() < limit && !stop {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    stream.next().now_or_never()
                })) {
                    Ok(Some(Some(x))) => {
                        stop = ends_pipeline(&x);
                        chunk.push(x);
                    }
                    Ok(_) => break,
                    Err(payload) => {
                        chunk.push(Err(Error::panic(None, payload)));
                        stop = true;
                    }
                }
            }
            let last = chunk.last().is_some_and(|r| r.is_err());
            let sent = match tx.try_send(chunk) {
                Ok(()) => {
                    limit = (limit * 2).min(HANDOFF_CHUNK);
                    true
                }
                Err(TrySendError::Full(chunk)) => {
                    let waiting = Instant::now();
                    let sent = tx.send(chunk).await.is_ok();
                    limit = if waiting.elapsed() > HANDOFF_PATIENCE {
                        (limit / 2).max(1)
                    } else {
                        (limit * 2).min(HANDOFF_CHUNK)
                    };
                    sent
                }
                Err(TrySendError::Closed(_)) => false,
            };
            if !sent || last || stop {
                break;
            }
        }
    };
    // One future type whether observed or not, so both run the same code.
    let task = runtime.spawn(InScope {
        ctx: observer.as_ref().map(PipelineContext::observing),
        inner: Box::pin(driver),
    });
    Source::Driven {
        rx,
        local: Vec::new().into_iter(),
        task,
    }
}

/// The next chunk from the pipeline task: looked for a few times, yielding
/// the core in between, before sleeping until it comes.
fn recv_spinning<T>(rx: &mut tokio::sync::mpsc::Receiver<T>) -> Option<T> {
    use tokio::sync::mpsc::error::TryRecvError;
    for _ in 0..HANDOFF_SPINS {
        match rx.try_recv() {
            Ok(chunk) => return Some(chunk),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
    rx.blocking_recv()
}

/// The next item of `stream`, a panic while computing it turned into an
/// error (the stream is not polled again after one).
async fn next_or_panic<T>(stream: &mut BoxedPipeline<T>) -> Option<Result<T>> {
    match std::panic::AssertUnwindSafe(stream.next())
        .catch_unwind()
        .await
    {
        Ok(x) => x,
        Err(payload) => Some(Err(Error::panic(None, payload))),
    }
}

/// Whether the pipeline cannot go on after `item` (a caught panic).
fn ends_pipeline<T>(item: &Result<T>) -> bool {
    matches!(item, Err(e) if e.is_panic())
}

/// Polls `inner` in the pipeline context of `observer`, if any, on every
/// poll: an operator first polled late (after a `chain` switches over, inside
/// a `flat_map`) joins it too. One poll hands over up to a chunk of items.
struct InScope<F> {
    ctx: Option<PipelineContext>,
    inner: Pin<Box<F>>,
}

impl<F: Future> Future for InScope<F> {
    type Output = F::Output;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = &mut *self;
        match &this.ctx {
            Some(ctx) => ctx.enter(|| this.inner.as_mut().poll(cx)),
            None => this.inner.as_mut().poll(cx),
        }
    }
}

impl<T> Drop for BlockingIter<T> {
    fn drop(&mut self) {
        if let Some(o) = &self.observer {
            self.local.publish(o);
        }
        if let Source::Driven { task, .. } = &self.source {
            task.abort();
        }
    }
}

impl<T> Iterator for BlockingIter<T> {
    type Item = Result<T>;
    fn next(&mut self) -> Option<Result<T>> {
        self.start();
        let timed = self.observer.is_some();
        // The consumer's clock: when it asked (it stops working and may
        // wait) and when it got the item. An item already handed over in a
        // chunk is there at once, so asking costs no clock read, and a fast
        // consumer's clock is read only at chunk boundaries.
        let mut asked = None;
        // Whether the untimed deliveries before this one waited like it
        // (inline: each ran the pipeline) or not at all (threads: they were
        // already handed over).
        let mut untimed_waited = false;
        let item = match &mut self.source {
            Source::Polled(stream) => {
                // A fast consumer is timed on one delivery in
                // FAST_SAMPLE_EVERY.
                let sample =
                    !self.fast_consumer || (self.untimed + 1).is_multiple_of(FAST_SAMPLE_EVERY);
                asked = (timed && sample).then(Instant::now);
                untimed_waited = true;
                let runtime = &self.runtime;
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    // Most items are ready at once: polled in the runtime's
                    // context without `block_on`, whose set-up cost as much
                    // as a cheap pipeline's batch. `block_on` returns a
                    // ready item without running other tasks or the
                    // drivers either, so this changes nothing but the
                    // cost; it takes over when the pipeline has to wait.
                    let ready = {
                        let _in_runtime = runtime.enter();
                        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                        stream.poll_next_unpin(&mut cx)
                    };
                    match ready {
                        std::task::Poll::Ready(x) => x,
                        std::task::Poll::Pending => runtime.block_on(stream.next()),
                    }
                }))
                .unwrap_or_else(|payload| Some(Err(Error::panic(None, payload))))
            }
            Source::Driven { rx, local, .. } => {
                if local.as_slice().is_empty() {
                    asked = timed.then(Instant::now);
                    if let Some(chunk) = recv_spinning(rx) {
                        *local = chunk.into_iter();
                    }
                }
                local.next()
            }
            Source::Idle(_) | Source::Taken => None,
        };
        if item.as_ref().is_some_and(ends_pipeline) {
            // Nothing after a panic can be trusted: stop the pipeline (its
            // task, if any) and end here.
            if let Source::Driven { task, .. } = &self.source {
                task.abort();
            }
            self.source = Source::Taken;
        }
        if let Some(o) = &self.observer {
            if item.is_some() {
                self.local.n += 1;
                if asked.is_none() && self.fast_consumer {
                    // A consumer that takes items faster than a clock read
                    // is worth: its time is accounted at the next read.
                    self.untimed += 1;
                } else {
                    let now = Instant::now();
                    let a = asked.unwrap_or(now);
                    let waited = (now - a).as_nanos() as u64;
                    match self.last_return {
                        Some(r) => {
                            // The span since the last read is exact; how it
                            // splits into waiting and working is this
                            // delivery's, for the untimed ones in it.
                            let spans = self.untimed + 1;
                            let span = (now - r).as_nanos() as u64;
                            let wait = if untimed_waited {
                                waited.saturating_mul(spans).min(span)
                            } else {
                                waited.min(span)
                            };
                            self.local.wait_ns += wait;
                            self.local.busy_ns += span - wait;
                            let per = (now - r) / spans as u32;
                            for _ in 0..spans {
                                o.delivered_at(now, Some(per));
                            }
                            self.fast_consumer = per < FAST_CONSUMER;
                        }
                        None => {
                            o.delivered_at(now, None);
                            self.local.wait_ns += waited;
                        }
                    }
                    self.untimed = 0;
                    self.last_return = Some(now);
                }
                if self.local.n >= CONSUMER_PUBLISH {
                    self.local.publish(o);
                }
            } else {
                self.local.publish(o);
            }
        }
        item
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.source {
            Source::Polled(stream) => stream.size_hint(),
            Source::Idle(_) => (0, None),
            Source::Driven { local, .. } => (local.len(), None),
            Source::Taken => (0, None),
        }
    }
}
