//! The blocking iterator: a pipeline driven from synchronous code, its
//! hand-off from the threads runner, and the consumer's clock.

use super::Runner;
use super::handoff::{Driven, HELP_AFTER, HELP_AFTER_MOST, Next, ends_pipeline};
use super::helping::Helping;
use super::here::Here;
use super::idle::Lease;
use crate::context::PipelineContext;
use crate::error::Result;
use crate::obs::{Observer, Tracking};
use futures::Stream;
use std::pin::Pin;
use std::time::Instant;

/// A pipeline driven to completion from synchronous code, one item per
/// `next()`. Owns its runtime (under the threads runner, one kept from an
/// earlier pipeline of the same worker count when one is idle).
///
/// Like any blocking API, it belongs on a thread that is not running a
/// tokio runtime's tasks (or inside `spawn_blocking`): on a runtime's
/// worker, tokio refuses to block, and the first wait is an error saying
/// so (an iterator whose items were all ready runs, and drops, there too).
///
/// A panic anywhere in the pipeline, under either runner, is an
/// [`Error::Panic`](crate::Error::Panic) (naming the operator where known), after which the
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
    /// Puts a pipeline the caller polled back on a task (made where `T` is
    /// known to be `Send`).
    respawn: Respawn<T>,
    // Dropped last, so tasks the pipeline spawned can wind down; a threads
    // runner's runtime left with none is kept for the next pipeline.
    runtime: Lease,
    /// The runtime's CPU pool, lent to this thread while it polls the
    /// pipeline itself.
    pool: Option<super::CpuPool>,
    /// Waiting chunks in a row before the caller takes the pipeline over
    /// from the task (doubled after each lost trial).
    patience: u32,
}

type Respawn<T> =
    fn(&tokio::runtime::Runtime, BoxedPipeline<T>, Option<PipelineContext>) -> Driven<T>;

pub(super) type BoxedPipeline<T> = Pin<Box<dyn Stream<Item = Result<T>> + Send>>;

type Starter<T> = Box<dyn FnOnce(Option<&Observer>) -> Source<T> + Send>;

enum Source<T> {
    /// Not polled yet: observability may still be enabled.
    Idle(Starter<T>),
    /// Inline runner: the caller's thread polls the pipeline.
    Polled(Here<T>),
    /// Threads runner: a task on the pool drives the pipeline while the
    /// caller trains, handing items over a short queue.
    Driven(Driven<T>),
    /// Threads runner, at the start and while the caller waits on every
    /// item: it polls the pipeline itself (see [`handoff`](super::handoff)).
    Helping(Helping<T>),
    /// Between states.
    Taken,
}

/// A consumer taking items at shorter intervals than this is timed per
/// chunk rather than per item: one clock read would cost a noticeable part
/// of its interval.
const FAST_CONSUMER: std::time::Duration = std::time::Duration::from_micros(20);

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
        let threaded = matches!(runner, Runner::Threads { .. });
        let starter: Starter<T> = Box::new(move |observer| {
            if let Some(obs) = observer {
                obs.start();
            }
            if threaded {
                // Polled here first: the caller waits for the first item
                // either way, and the opening finds whether a task should
                // run the pipeline ahead of it.
                Source::Helping(Helping::opening(
                    Box::pin(stream),
                    observer.map(PipelineContext::observing),
                ))
            } else {
                Source::Polled(Here::new(match observer {
                    Some(obs) => Box::pin(obs.observe(stream).without_consumer()),
                    None => Box::pin(stream),
                }))
            }
        });
        let (runtime, pool) = Lease::take(&runner)?;
        Ok(BlockingIter {
            source: Source::Idle(starter),
            observer: None,
            last_return: None,
            untimed: 0,
            fast_consumer: false,
            local: ConsumerTally::default(),
            respawn: Driven::<T>::spawn,
            runtime,
            pool,
            patience: HELP_AFTER,
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
        self.source = starter(self.observer.as_ref());
    }
}

impl<T> BlockingIter<T> {
    /// The next item under the threads runner, moving the pipeline between
    /// the task and this caller as the caller's pace asks. `asked` is set
    /// when the caller may wait.
    fn next_threaded(&mut self, timed: bool, asked: &mut Option<Instant>) -> Option<Result<T>> {
        loop {
            match &mut self.source {
                Source::Helping(h) => {
                    if !h.caller_slow() {
                        // Timed when it polls: an item polled ahead is
                        // handed out without a wait, and the poll's wait
                        // covers the items it took ahead.
                        if timed && asked.is_none() && h.will_poll() {
                            *asked = Some(Instant::now());
                        }
                        return h.next(&self.runtime, &mut self.pool);
                    }
                }
                Source::Driven(d) => {
                    if !d.has_local() {
                        *asked = timed.then(Instant::now);
                    }
                    match d.next() {
                        Next::Item(item) => return item,
                        Next::Back(stream) => {
                            let (ctx, against) = (d.ctx(), d.pace_per_item());
                            self.source = Source::Helping(Helping::new(stream, ctx, against));
                            continue;
                        }
                    }
                }
                _ => return None,
            }
            // The caller became slow, or was slower polling the pipeline
            // itself: the pipeline goes back to a task. After a lost trial
            // the next one waits twice as many chunks.
            if let Source::Helping(h) = std::mem::replace(&mut self.source, Source::Taken) {
                self.patience = if h.lost_trial() {
                    (self.patience * 2).min(HELP_AFTER_MOST)
                } else {
                    HELP_AFTER
                };
                let mut d = h.into_driven(&self.runtime, self.respawn);
                d.set_patience(self.patience);
                self.source = Source::Driven(d);
            }
        }
    }
}

impl<T> Drop for BlockingIter<T> {
    fn drop(&mut self) {
        if let Some(o) = &self.observer {
            self.local.publish(o);
        }
        if let Source::Driven(d) = &self.source {
            d.abort();
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
        let item = match &mut self.source {
            Source::Polled(here) => {
                // Timed when it polls the pipeline, and a slow consumer on
                // every delivery. A poll's wait covers the items it took
                // ahead, which are then handed out without one.
                asked = (timed && (here.will_poll() || !self.fast_consumer)).then(Instant::now);
                here.next(&self.runtime, None, &mut self.pool)
            }
            Source::Driven(_) | Source::Helping(_) => self.next_threaded(timed, &mut asked),
            Source::Idle(_) | Source::Taken => None,
        };
        if item.as_ref().is_some_and(ends_pipeline) {
            // Nothing after a panic can be trusted: stop the pipeline (its
            // task, if any) and end here.
            if let Source::Driven(d) = &self.source {
                d.abort();
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
                            // The span since the last read is exact; the
                            // untimed deliveries in it did not wait (they
                            // were handed over or polled ahead), so its
                            // wait is this delivery's.
                            let spans = self.untimed + 1;
                            let span = (now - r).as_nanos() as u64;
                            let wait = waited.min(span);
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
            Source::Polled(here) => here.size_hint(),
            Source::Idle(_) => (0, None),
            Source::Driven(d) => (d.ready(), None),
            Source::Helping(h) => h.size_hint(),
            Source::Taken => (0, None),
        }
    }
}
