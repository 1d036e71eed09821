//! `Observed`: polls a pipeline under an observer.

use super::{Layered, PipelineContext};
use crate::obs::Observer;
use futures::Stream;
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// Polls the inner stream in a [pipeline context](crate::context) with
/// `observer` as its observer, so the operators inside register with it; optionally times the consumer (the code that
/// polls this stream), for async training loops.
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct Observed<S> {
    #[pin]
    inner: S,
    observer: Observer,
    ctx: Layered,
    time_consumer: bool,
    asked: Option<Instant>,
    returned: Option<Instant>,
}

impl<S> Observed<S> {
    /// Polls `inner` under `observer`, timing the consumer.
    pub fn new(inner: S, observer: Observer) -> Self {
        Observed {
            inner,
            observer,
            ctx: Layered::default(),
            time_consumer: true,
            asked: None,
            returned: None,
        }
    }

    /// Does not time the consumer (when something else, like the blocking
    /// iterator, does).
    pub fn without_consumer(mut self) -> Self {
        self.time_consumer = false;
        self
    }

    /// The observer.
    pub fn observer(&self) -> &Observer {
        &self.observer
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped stream, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped stream.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for Observed<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observed")
            .field("inner", &self.inner)
            .field("observer", &self.observer)
            .finish_non_exhaustive()
    }
}

impl<S: futures::stream::FusedStream> futures::stream::FusedStream for Observed<S> {
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }
}

impl<S: Stream> Stream for Observed<S> {
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = self.project();
        this.observer.start();
        if *this.time_consumer && this.asked.is_none() {
            let now = Instant::now();
            if let Some(r) = this.returned.take() {
                this.observer.consumer_asked(now - r);
            }
            *this.asked = Some(now);
        }
        let inner = this.inner;
        let observer = &*this.observer;
        let ctx = this.ctx.get(|outer| match outer {
            Some(o) => o.with_observer(observer.clone()),
            None => PipelineContext::observing(observer),
        });
        let out = ctx.enter(|| inner.poll_next(cx));
        if *this.time_consumer
            && let Poll::Ready(Some(_)) = &out
        {
            let now = Instant::now();
            if let Some(a) = this.asked.take() {
                this.observer.consumer_received(now - a);
            }
            *this.returned = Some(now);
        }
        out
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

// Observing adds no stage: the plan is the inner pipeline's.
impl<S: crate::obs::Explain> crate::obs::Explain for Observed<S> {
    fn describe(&self, out: &mut Vec<crate::obs::StageDescription>) {
        self.inner.describe(out);
    }
}

// The observer lives below the context; finding the current one and
// wrapping a stream both go through the context, so they are defined here.
impl Observer {
    /// The observer of the pipeline being polled on this task, if any (see
    /// [`PipelineContext`]).
    pub fn current() -> Option<Observer> {
        PipelineContext::current().and_then(|c| c.observer().cloned())
    }

    /// Wraps a stream so that it is polled under this observer.
    pub fn observe<S>(&self, stream: S) -> Observed<S> {
        Observed::new(stream, self.clone())
    }
}
