//! A pipeline the caller polls on its own thread (the inline runner, and
//! the threads runner while the caller takes the pipeline over), taking the
//! items that are ready at once a few at a time.
//!
//! Each poll from the caller's thread enters the runtime's context first
//! (operators look for it: `offload`, timers, I/O), and entering and
//! leaving it cost more than half of what a delivery costs the caller of
//! a cheap pipeline (measure with `zephon-bench engine --only off --batch
//! 1`, a delivery per record). So while both the pipeline and the caller
//! take little time per item, one entry polls several items, and the ones
//! after the first wait here to be handed out. A slow pipeline or a slow
//! caller gets one item per poll, as before: what waits here never exceeds
//! what a fast pair would have made within a hundred microseconds.
//! Only the caller's thread polls, and items leave in the order they were
//! made, so the output is the same either way; what the caller has not
//! taken yet is not delivered (checkpoints count deliveries).

use super::blocking::BoxedPipeline;
use super::handoff::ends_pipeline;
use crate::context::PipelineContext;
use crate::error::{Error, Result};
use futures::StreamExt;
use std::collections::VecDeque;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Most items one entry into the runtime takes: enough that the entry's
/// cost is a few percent of a cheap delivery, few enough that a pipeline of
/// large items keeps next to nothing beyond its own buffers here.
pub(super) const AHEAD_MOST: usize = 16;
/// A pipeline and caller that together spend less than this per item are
/// polled several items at a time.
const AHEAD_FAST: Duration = Duration::from_micros(5);

/// The pipeline, and the items polled ahead of the caller's asking.
pub(super) struct Here<T> {
    stream: BoxedPipeline<T>,
    ahead: VecDeque<Result<T>>,
    /// Items the next poll may take.
    limit: usize,
    /// When the last poll began, and how many items it took.
    last: Option<(Instant, usize)>,
    /// The pipeline ended: it is never polled again.
    ended: bool,
}

impl<T> Here<T> {
    pub(super) fn new(stream: BoxedPipeline<T>) -> Self {
        Here {
            stream,
            ahead: VecDeque::new(),
            limit: 1,
            last: None,
            ended: false,
        }
    }

    /// Whether the next item is already here (no poll, no clock).
    pub(super) fn has_ahead(&self) -> bool {
        !self.ahead.is_empty()
    }

    /// Whether [`next`](Here::next) would poll the pipeline.
    pub(super) fn will_poll(&self) -> bool {
        self.ahead.is_empty() && !self.ended
    }

    /// The pipeline, to be driven elsewhere; only with nothing waiting
    /// here, which would otherwise be delivered out of order.
    pub(super) fn into_stream(self) -> BoxedPipeline<T> {
        debug_assert!(self.ahead.is_empty(), "items polled ahead left behind");
        self.stream
    }

    /// The next item: one polled earlier, or the pipeline's next, polled
    /// here in `runtime`'s context (and `ctx`'s) with `pool` as the CPU
    /// pool, along with the items ready right after it while the pace
    /// allows. A panic is an error item, and the pipeline is not polled
    /// past it.
    pub(super) fn next(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        ctx: Option<&PipelineContext>,
        pool: &mut Option<super::CpuPool>,
    ) -> Option<Result<T>> {
        if let Some(x) = self.ahead.pop_front() {
            return Some(x);
        }
        if self.ended {
            return None;
        }
        let now = Instant::now();
        if let Some((at, n)) = self.last {
            let per = now.saturating_duration_since(at) / n.max(1) as u32;
            self.limit = if per <= AHEAD_FAST {
                (self.limit * 2).min(AHEAD_MOST)
            } else {
                1
            };
        }
        let mut done = false;
        let item = poll(
            runtime,
            &mut self.stream,
            ctx,
            pool,
            self.limit - 1,
            &mut self.ahead,
            &mut done,
        );
        self.last = Some((now, 1 + self.ahead.len()));
        self.ended = done || item.as_ref().is_none_or(ends_pipeline);
        item
    }

    pub(super) fn size_hint(&self) -> (usize, Option<usize>) {
        let extra = self.ahead.len();
        if self.ended {
            return (extra, Some(extra));
        }
        let (lo, hi) = self.stream.size_hint();
        (
            lo.saturating_add(extra),
            hi.and_then(|h| h.checked_add(extra)),
        )
    }
}

/// The next item of `stream`, polled on the calling thread in `runtime`'s
/// context (and `ctx`'s, if any), CPU work going to `pool` (the runtime's
/// own, if it has one), and up to `more` items ready right after it pushed
/// onto `ahead`, in one entry into those contexts. A panic is an error
/// item, after which nothing more is polled; `done` is set when the
/// pipeline ended or panicked among the `more`, so that it is not polled
/// again (a stream polled past its end may panic).
fn poll<T>(
    runtime: &tokio::runtime::Runtime,
    stream: &mut BoxedPipeline<T>,
    ctx: Option<&PipelineContext>,
    pool: &mut Option<super::CpuPool>,
    more: usize,
    ahead: &mut VecDeque<Result<T>>,
    done: &mut bool,
) -> Option<Result<T>> {
    let poll = std::panic::AssertUnwindSafe(|| {
        // Most items are ready at once: polled in the runtime's context
        // without `block_on`, whose set-up cost as much as a cheap
        // pipeline's batch. `block_on` returns a ready item without running
        // other tasks or the drivers either, so this changes nothing but
        // the cost; it takes over when the pipeline has to wait.
        let ready = {
            let _in_runtime = runtime.enter();
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let mut polls = || {
                let first = stream.poll_next_unpin(&mut cx);
                if matches!(&first, Poll::Ready(Some(x)) if !ends_pipeline(x)) {
                    *done = take_ready(stream, &mut cx, more, ahead);
                }
                first
            };
            match ctx {
                Some(c) => c.enter(polls),
                None => polls(),
            }
        };
        match (ready, ctx) {
            (Poll::Ready(x), _) => x,
            (Poll::Pending, None) => runtime.block_on(flushing_deferred(stream.next())),
            (Poll::Pending, Some(c)) => runtime.block_on(flushing_deferred(c.scope(stream.next()))),
        }
    });
    super::pool::lent(pool, || std::panic::catch_unwind(poll))
        .unwrap_or_else(|payload| Some(Err(Error::panic(None, payload))))
}

/// `item`, awaited inside the current-thread runtime's `block_on`, then one
/// yield before `block_on` returns it. A future of the pipeline that yields
/// there (`yield_now`, or an exhausted tokio budget) leaves its wake-up in
/// a list the runtime's `block_on` wakes only when it next has nothing to
/// run, and drops unwoken when it returns: with several reads in flight,
/// one that yielded while another's item ended the `block_on` was never
/// polled again, and the pipeline hung once it needed that read's records.
/// The yield makes `block_on` go through that list first.
async fn flushing_deferred<F: std::future::Future>(item: F) -> F::Output {
    let out = item.await;
    tokio::task::yield_now().await;
    out
}

/// Up to `more` items of `stream` that are ready now, pushed onto `ahead`;
/// stops at the first that is not, at the end, and after a panic (pushed
/// as an error item: the items before it stay). Whether the pipeline is
/// done (ended, or panicked).
fn take_ready<T>(
    stream: &mut BoxedPipeline<T>,
    cx: &mut std::task::Context<'_>,
    more: usize,
    ahead: &mut VecDeque<Result<T>>,
) -> bool {
    for _ in 0..more {
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stream.poll_next_unpin(cx)));
        match polled {
            Ok(Poll::Ready(Some(x))) => {
                let stop = ends_pipeline(&x);
                ahead.push_back(x);
                if stop {
                    return true;
                }
            }
            Ok(Poll::Ready(None)) => return true,
            Ok(Poll::Pending) => return false,
            Err(payload) => {
                ahead.push_back(Err(Error::panic(None, payload)));
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PipelineExt;
    use crate::runner::Runner;

    fn here_of(n: u32) -> (tokio::runtime::Runtime, Here<u32>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let s = futures::stream::iter((0..n).map(Ok::<u32, Error>));
        (rt, Here::new(Box::pin(s)))
    }

    #[test]
    fn a_fast_pair_takes_several_items_per_poll_and_all_arrive_in_order() {
        let (rt, mut here) = here_of(1000);
        let mut got = Vec::new();
        let mut largest = 0;
        while let Some(x) = here.next(&rt, None, &mut None) {
            largest = largest.max(here.ahead.len() + 1);
            got.push(x.unwrap());
        }
        assert_eq!(got, (0..1000).collect::<Vec<_>>());
        assert_eq!(largest, AHEAD_MOST, "polls grew to the most");
        assert!(here.ended);
        assert!(here.next(&rt, None, &mut None).is_none(), "stays ended");
    }

    #[test]
    fn a_pipeline_that_ends_among_the_items_taken_ahead_is_not_polled_again() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // `unfold` panics when polled after it ended.
        let s = futures::stream::unfold(0u32, |i| async move {
            (i < 5).then_some((Ok::<u32, Error>(i), i + 1))
        });
        let mut here = Here::new(Box::pin(s));
        here.limit = AHEAD_MOST;
        let first = here.next(&rt, None, &mut None).unwrap().unwrap();
        assert_eq!(first, 0);
        assert_eq!(here.ahead.len(), 4, "the rest taken ahead with the end");
        let mut got = vec![first];
        while let Some(x) = here.next(&rt, None, &mut None) {
            got.push(x.unwrap());
        }
        assert_eq!(got, (0..5).collect::<Vec<_>>());
        assert!(here.next(&rt, None, &mut None).is_none());
    }

    #[test]
    fn a_slow_caller_gets_one_item_per_poll() {
        let (rt, mut here) = here_of(6);
        let mut got = Vec::new();
        while let Some(x) = here.next(&rt, None, &mut None) {
            assert!(!here.has_ahead(), "nothing taken ahead of a slow caller");
            got.push(x.unwrap());
            std::thread::sleep(AHEAD_FAST * 3);
        }
        assert_eq!(got, (0..6).collect::<Vec<_>>());
    }

    #[test]
    fn a_panic_among_items_taken_ahead_keeps_those_before_it_and_ends() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let s = futures::stream::iter(0..100u32).map(|i| {
            assert!(i != 40, "boom at 40");
            Ok::<u32, Error>(i)
        });
        let mut here = Here::new(Box::pin(s));
        let mut got = Vec::new();
        let err = loop {
            match here.next(&rt, None, &mut None) {
                Some(Ok(x)) => got.push(x),
                Some(Err(e)) => break e,
                None => panic!("ended without the panic"),
            }
        };
        assert_eq!(got, (0..40).collect::<Vec<_>>(), "no item lost or repeated");
        assert!(err.is_panic(), "{err}");
        assert!(
            here.next(&rt, None, &mut None).is_none(),
            "not polled past it"
        );
    }

    #[test]
    fn a_pipeline_that_waits_is_polled_one_item_at_a_time() {
        // Items that are not ready at once come through `block_on`, one
        // per call, under both runners.
        for runner in [Runner::Inline, Runner::Threads { workers: 2 }] {
            let s = futures::stream::iter(0..20u32).then(|i| async move {
                tokio::task::yield_now().await;
                Ok::<u32, Error>(i)
            });
            let got: Vec<u32> = s
                .into_blocking_iter(runner)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert_eq!(got, (0..20).collect::<Vec<_>>(), "{runner:?}");
        }
    }
}
