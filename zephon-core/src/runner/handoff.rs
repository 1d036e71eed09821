//! The threads runner's two ways of running a pipeline for a blocking
//! caller: driven ahead by a task on the pool and handed over in chunks
//! ([`Driven`]), or, at the start and while the caller takes items as fast
//! as they come and waits for each, polled by the caller itself
//! ([`Helping`](super::helping::Helping)), and back.
//!
//! A caller that waits for every item gains nothing from a task running
//! ahead of it, and pays for the hand-off: each item is made on one core
//! and read, then freed, on another. On a 2-core machine a cheap pipeline
//! (`bench engine`) ran about twice as fast with every thread pinned to one
//! core as spread over two. So the caller polls the pipeline itself from
//! the start (it waits for the first item either way), for an opening of
//! a few milliseconds: a task running ahead can at best hide the caller's
//! own work between items, so a caller whose work stays a small share of
//! the time keeps the pipeline, and one that spends long on an item, or a
//! larger share on its own, hands it to a task (see
//! [`helping`](super::helping)). A
//! caller found waiting with little work of its own per item, chunk after
//! chunk, takes the pipeline over again, and keeps it if its first
//! milliseconds of polling it are not slower than its pace with the task
//! (a trial); one that later spends long on its items (a training step)
//! gives it back to a task, which again runs ahead. Only one side holds
//! the pipeline at a time and it changes hands between items, so the
//! output is the same either way. CPU work the operators hand to the pool
//! stays on the pool.

use super::blocking::BoxedPipeline;
use crate::context::PipelineContext;
use crate::error::{Error, Result};
use futures::{FutureExt, StreamExt};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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
const HANDOFF_PATIENCE: Duration = Duration::from_millis(1);
/// Times the caller looks for a chunk, yielding its core in between, before
/// it sleeps on the queue: a fast pipeline usually has the next chunk ready
/// within a few yields, and a sleep and its wake-up cost a futex call each
/// way, more than a cheap pipeline takes to make a chunk.
const HANDOFF_SPINS: u32 = 32;

/// A caller spending less than this on each item of a chunk, and finding
/// the queue empty when it asks for the next, is waiting on the pipeline.
const FAST_ITEM: Duration = Duration::from_micros(20);
/// ... and waiting for the chunk at least this many times as long as it
/// worked on the chunk before. Where the two cores overlap the caller's
/// work and the pipeline's well, polling the pipeline itself could then
/// cost the caller up to half again; where moving items between cores
/// costs more than the overlap saves (a cheap pipeline on a small
/// machine), it is faster. The trial below settles which.
const WAIT_OVER_WORK: u32 = 1;
/// Chunks in a row the caller must wait that way before it takes the
/// pipeline over: one slow start or one hiccup is not a pace.
pub(super) const HELP_AFTER: u32 = 4;
/// After a lost trial, the chunks in a row are doubled before the next
/// one, up to this many: a trial every few thousand chunks costs a
/// fraction of a percent.
pub(super) const HELP_AFTER_MOST: u32 = 4096;

/// What the pipeline task sends the caller.
enum Handoff<T> {
    /// Finished items, in order.
    Items(Vec<Result<T>>),
    /// The pipeline itself, after the last chunk: the caller asked for it.
    Back(BoxedPipeline<T>),
}

/// What the caller gets from [`Driven::next`].
pub(super) enum Next<T> {
    /// The next item (`None`: the pipeline ended).
    Item(Option<Result<T>>),
    /// The pipeline, handed back for the caller to poll
    /// ([`Helping`](super::helping::Helping)).
    Back(BoxedPipeline<T>),
}

/// A task on the pool drives the pipeline while the caller trains, handing
/// items over a short queue.
pub(super) struct Driven<T> {
    rx: tokio::sync::mpsc::Receiver<Handoff<T>>,
    /// The last chunk, handed out in place.
    local: std::vec::IntoIter<Result<T>>,
    task: tokio::task::JoinHandle<()>,
    /// Set by the caller to have the pipeline handed back.
    want: Arc<AtomicBool>,
    ctx: Option<PipelineContext>,
    pace: Pace,
}

impl<T: Send + 'static> Driven<T> {
    /// Spawns the pipeline on the pool, handing finished items over in
    /// chunks; `ctx` is entered on every poll.
    pub(super) fn spawn(
        runtime: &tokio::runtime::Runtime,
        mut stream: BoxedPipeline<T>,
        ctx: Option<PipelineContext>,
    ) -> Self {
        use tokio::sync::mpsc::error::TrySendError;
        let (tx, rx) = tokio::sync::mpsc::channel(HANDOFF_DEPTH);
        let want = Arc::new(AtomicBool::new(false));
        let wanted = want.clone();
        let driver = async move {
            let mut limit = 1;
            loop {
                if wanted.load(Ordering::Acquire) {
                    // Everything made so far is queued before it.
                    let _ = tx.send(Handoff::Back(stream)).await;
                    return;
                }
                let first = match next_or_panic(&mut stream).await {
                    Some(x) => x,
                    None => return,
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
                let sent = match tx.try_send(Handoff::Items(chunk)) {
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
                // Only a panic ends the pipeline: after an ordinary error
                // it goes on, as it does under the caller's own polls and
                // the inline runner (ending here lost the rest of the run
                // whenever a slow caller had the pipeline on this task).
                if !sent || stop {
                    return;
                }
            }
        };
        // One future type whether observed or not, so both run the same code.
        let task = runtime.spawn(InScope {
            ctx: ctx.clone(),
            inner: Box::pin(driver),
        });
        Driven {
            rx,
            local: Vec::new().into_iter(),
            task,
            want,
            ctx,
            pace: Pace::default(),
        }
    }
}

impl<T> Driven<T> {
    /// Whether the next item is already here (no wait, no clock).
    pub(super) fn has_local(&self) -> bool {
        !self.local.as_slice().is_empty()
    }

    /// Items already handed over.
    pub(super) fn ready(&self) -> usize {
        self.local.len()
    }

    /// The pipeline context the task polls in, for the caller to poll in.
    pub(super) fn ctx(&self) -> Option<PipelineContext> {
        self.ctx.clone()
    }

    /// Waiting chunks in a row before the caller takes the pipeline over
    /// (at least one).
    pub(super) fn set_patience(&mut self, chunks: u32) {
        self.pace.patience = chunks.max(1);
    }

    /// The caller's time per item, waiting included, over the chunks it
    /// waited for before it asked for the pipeline: what polling the
    /// pipeline itself has to beat.
    pub(super) fn pace_per_item(&self) -> Option<Duration> {
        let (spent, items) = self.pace.streak;
        (items > 0).then(|| spent / items.min(u32::MAX as usize) as u32)
    }

    /// Stops the task (the caller is done, or the pipeline panicked).
    pub(super) fn abort(&self) {
        self.task.abort();
    }

    /// The next item, waiting for a chunk if none is here; or the pipeline,
    /// when the task handed it back.
    pub(super) fn next(&mut self) -> Next<T> {
        if let Some(x) = self.local.next() {
            return Next::Item(Some(x));
        }
        let asked = Instant::now();
        let (msg, waited) = recv_spinning(&mut self.rx);
        match msg {
            Some(Handoff::Items(chunk)) => {
                if self.pace.chunk(asked, Instant::now(), waited, chunk.len()) {
                    self.want.store(true, Ordering::Release);
                }
                self.local = chunk.into_iter();
                Next::Item(self.local.next())
            }
            Some(Handoff::Back(stream)) => Next::Back(stream),
            None => Next::Item(None),
        }
    }
}

/// The caller's pace as the chunks arrive.
#[derive(Debug)]
struct Pace {
    /// When the last chunk arrived, and its length.
    last: Option<(Instant, usize)>,
    /// Chunks in a row the caller waited for with little work per item.
    waiting: u32,
    /// The time from one of those chunks' arrival to the next's, and their
    /// items, summed: the caller's pace while the task runs the pipeline.
    streak: (Duration, usize),
    /// Chunks in a row it takes.
    patience: u32,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            last: None,
            waiting: 0,
            streak: (Duration::ZERO, 0),
            patience: HELP_AFTER,
        }
    }
}

impl Pace {
    /// A chunk of `n` items arrived at `now` for a request made at `asked`,
    /// which found the queue empty if `waited`; whether the caller should
    /// now poll the pipeline itself.
    fn chunk(&mut self, asked: Instant, now: Instant, waited: bool, n: usize) -> bool {
        let waiting = self.last.filter(|&(at, len)| {
            let work = asked.saturating_duration_since(at);
            waited
                && work / len.max(1) as u32 <= FAST_ITEM
                && work * WAIT_OVER_WORK <= now.saturating_duration_since(asked)
        });
        match waiting {
            Some((at, len)) => {
                self.waiting += 1;
                self.streak.0 += now.saturating_duration_since(at);
                self.streak.1 += len;
            }
            None => {
                self.waiting = 0;
                self.streak = (Duration::ZERO, 0);
            }
        }
        self.last = Some((now, n));
        self.waiting >= self.patience
    }
}

/// The next message from the pipeline task, and whether the queue was
/// empty when asked: looked for a few times, yielding the core in between,
/// before sleeping until it comes.
fn recv_spinning<T>(rx: &mut tokio::sync::mpsc::Receiver<T>) -> (Option<T>, bool) {
    use tokio::sync::mpsc::error::TryRecvError;
    for spin in 0..HANDOFF_SPINS {
        match rx.try_recv() {
            Ok(msg) => return (Some(msg), spin > 0),
            Err(TryRecvError::Disconnected) => return (None, spin > 0),
            Err(TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
    (rx.blocking_recv(), true)
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
pub(super) fn ends_pipeline<T>(item: &Result<T>) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `Pace` chunks of `n` items where the caller worked `work` per
    /// item and then waited `wait` for the next chunk; returns the chunk
    /// (1-based) at which it would take the pipeline over, if any.
    fn takes_over(work_us: u64, wait_us: u64, waited: bool, chunks: usize) -> Option<usize> {
        let mut pace = Pace::default();
        let mut t = Instant::now();
        let n = 8;
        (1..=chunks).find(|_| {
            let asked = t + Duration::from_micros(work_us * n as u64);
            let now = asked + Duration::from_micros(wait_us);
            t = now;
            pace.chunk(asked, now, waited, n)
        })
    }

    #[test]
    fn a_caller_that_mostly_waits_takes_the_pipeline_over_after_four_chunks() {
        // The first chunk has no work before it to judge by.
        assert_eq!(takes_over(1, 500, true, 10), Some(5));
    }

    #[test]
    fn a_caller_with_work_of_its_own_or_that_did_not_wait_keeps_the_task() {
        // Work per item past FAST_ITEM.
        assert_eq!(takes_over(25, 10_000, true, 50), None);
        // Waiting less than it worked: overlapping the work is worth more.
        assert_eq!(takes_over(18, 18 * 8 / 2, true, 50), None);
        // The next chunk was already there.
        assert_eq!(takes_over(1, 500, false, 50), None);
        // Just past the bar: waiting as long as the chunk's work.
        assert_eq!(
            takes_over(18, 18 * 8 * WAIT_OVER_WORK as u64, true, 10),
            Some(5)
        );
    }

    #[test]
    fn the_pace_before_a_take_over_is_what_the_trial_has_to_beat() {
        let mut pace = Pace::default();
        let mut t = Instant::now();
        for chunk in 1..=5 {
            // 8 items: 8 us of work, then a 92 us wait.
            let asked = t + Duration::from_micros(8);
            let now = asked + Duration::from_micros(92);
            t = now;
            assert_eq!(pace.chunk(asked, now, true, 8), chunk == 5);
        }
        // Four chunks of 8 judged, 100 us from one to the next.
        assert_eq!(pace.streak, (Duration::from_micros(400), 32));
        // A chunk that did not wait starts the streak again, and a larger
        // patience asks for more chunks.
        assert!(!pace.chunk(t, t, false, 8));
        assert_eq!(pace.streak, (Duration::ZERO, 0));
        pace.patience = 8;
        let taken = (1..=20).find(|_| {
            let asked = t + Duration::from_micros(8);
            let now = asked + Duration::from_micros(92);
            t = now;
            pace.chunk(asked, now, true, 8)
        });
        assert_eq!(taken, Some(8));
    }

    #[test]
    fn one_chunk_that_breaks_the_pace_starts_the_count_again() {
        let mut pace = Pace::default();
        let mut t = Instant::now();
        let mut step = |work_us: u64, wait_us: u64| {
            let asked = t + Duration::from_micros(work_us * 8);
            let now = asked + Duration::from_micros(wait_us);
            t = now;
            pace.chunk(asked, now, true, 8)
        };
        assert!(!step(1, 500)); // first: nothing to judge by
        assert!(!step(1, 500));
        assert!(!step(1, 500));
        assert!(!step(1, 500));
        assert!(!step(100, 500)); // a slow chunk
        assert!(!step(1, 500));
        assert!(!step(1, 500));
        assert!(!step(1, 500));
        assert!(step(1, 500));
    }
}
