//! `filter_ok` and `filter_map_ok`: drop or transform elements with a cheap closure.

mod cut;

use crate::context::Probe;
use crate::error::Result;
use crate::obs::{Explain, StageDescription};
use cut::{FilterCut, Gate};
use futures::Stream;
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Keeps the elements for which the predicate holds; errors pass through.
///
/// In a checkpointed pipeline, a filter of records (or pointers) upstream of
/// every stateful operator counts per lane what it read and passed, so a
/// restore continues each lane from its cut rather than replaying it. The
/// predicate must be a function of the element, as every knob-independent
/// pipeline needs.
///
/// Created by [`PipelineExt::filter_ok`](crate::PipelineExt::filter_ok).
///
/// ```
/// use futures::StreamExt; // no clash: its `filter` is another method
/// use zephon_core::{PipelineExt, Runner};
/// let s = futures::stream::iter((0..10).map(Ok::<u32, zephon_core::Error>));
/// let v: Vec<u32> = s.filter_ok(|x| x % 2 == 0).take(4)
///     .into_blocking_iter(Runner::Inline).unwrap().map(Result::unwrap).collect();
/// assert_eq!(v, vec![0, 2, 4, 6]);
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct Filter<S, F> {
    #[pin]
    inner: S,
    pred: F,
    probe: Probe,
    cut: FilterCut,
}

impl<S, F> Filter<S, F> {
    /// Wraps `inner`.
    pub fn new(inner: S, pred: F) -> Self {
        Filter {
            inner,
            pred,
            probe: Probe::default(),
            cut: FilterCut::default(),
        }
    }
}

impl<S, F> Filter<S, F> {
    crate::adapter_accessors!(inner);
}

impl<S: fmt::Debug, F> fmt::Debug for Filter<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, T, F> futures::stream::FusedStream for Filter<S, F>
where
    S: futures::stream::FusedStream<Item = Result<T>>,
    F: FnMut(&T) -> bool,
    T: 'static,
{
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }
}

impl<S, T, F> Stream for Filter<S, F>
where
    S: Stream<Item = Result<T>>,
    F: FnMut(&T) -> bool,
    T: 'static,
{
    type Item = Result<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if let Err(e) = this.cut.attach::<T>(this.probe, "filter") {
            return Poll::Ready(Some(Err(e)));
        }
        loop {
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(x))) => {
                    this.probe.input();
                    let key = match this.cut.gate(&x) {
                        Ok(Gate::Pass) => {
                            this.probe.output();
                            return Poll::Ready(Some(Ok(x)));
                        }
                        Ok(Gate::Judge(key)) => key,
                        Err(e) => return Poll::Ready(Some(Err(e))),
                    };
                    let t = this.probe.sample();
                    let keep = (this.pred)(&x);
                    this.probe.sampled(t);
                    this.cut.judged(key, keep);
                    if keep {
                        this.probe.output();
                        return Poll::Ready(Some(Ok(x)));
                    }
                }
                Poll::Pending => {
                    this.probe.input_pending();
                    return Poll::Pending;
                }
                Poll::Ready(None) => {
                    this.probe.finish();
                    return Poll::Ready(None);
                }
                other => return other,
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, self.inner.size_hint().1)
    }
}

/// Maps elements through a closure that may drop them (`Ok(None)`) or fail.
///
/// Created by [`PipelineExt::filter_map_ok`](crate::PipelineExt::filter_map_ok).
///
/// ```
/// use zephon_core::{PipelineExt, Runner};
/// let s = futures::stream::iter((0..6).map(Ok::<u32, zephon_core::Error>));
/// let v: Vec<u32> = s.filter_map_ok(|x| Ok((x % 3 == 0).then_some(x * 10)))
///     .into_blocking_iter(Runner::Inline).unwrap().map(Result::unwrap).collect();
/// assert_eq!(v, vec![0, 30]);
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct FilterMap<S, F> {
    #[pin]
    inner: S,
    f: F,
    probe: Probe,
    cut: FilterCut,
}

impl<S, F> FilterMap<S, F> {
    /// Wraps `inner`.
    pub fn new(inner: S, f: F) -> Self {
        FilterMap {
            inner,
            f,
            probe: Probe::default(),
            cut: FilterCut::default(),
        }
    }
}

impl<S, F> FilterMap<S, F> {
    crate::adapter_accessors!(inner);
}

impl<S: fmt::Debug, F> fmt::Debug for FilterMap<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilterMap")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, T, U, F> futures::stream::FusedStream for FilterMap<S, F>
where
    S: futures::stream::FusedStream<Item = Result<T>>,
    F: FnMut(T) -> Result<Option<U>>,
    T: 'static,
{
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }
}

impl<S, T, U, F> Stream for FilterMap<S, F>
where
    S: Stream<Item = Result<T>>,
    F: FnMut(T) -> Result<Option<U>>,
    T: 'static,
{
    type Item = Result<U>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if let Err(e) = this.cut.attach::<T>(this.probe, "filter_map") {
            return Poll::Ready(Some(Err(e)));
        }
        loop {
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(x))) => {
                    this.probe.input();
                    // A preamble element passed before: it is mapped again
                    // (downstream needs the mapped element) but not counted.
                    let key = match this.cut.gate(&x) {
                        Ok(Gate::Pass) => None,
                        Ok(Gate::Judge(key)) => key,
                        Err(e) => return Poll::Ready(Some(Err(e))),
                    };
                    let t = this.probe.sample();
                    let r = (this.f)(x);
                    this.probe.sampled(t);
                    if let Ok(kept) = &r {
                        this.cut.judged(key, kept.is_some());
                    }
                    match r {
                        Ok(Some(y)) => {
                            this.probe.output();
                            return Poll::Ready(Some(Ok(y)));
                        }
                        Ok(None) => {}
                        Err(e) => return Poll::Ready(Some(Err(e))),
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    this.probe.finish();
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    this.probe.input_pending();
                    return Poll::Pending;
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, self.inner.size_hint().1)
    }
}

impl<S: Explain, F> Explain for Filter<S, F> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(StageDescription::new("filter", 1, None, ""));
    }
}

impl<S: Explain, F> Explain for FilterMap<S, F> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(StageDescription::new("filter_map", 1, None, ""));
    }
}
