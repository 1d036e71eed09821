//! `batch`: group elements of one lane into batches.

use crate::error::Result;
use crate::obs::{Explain, Probe, StageDescription};
use crate::pointer::{Identity, LaneId, Laned};
use crate::record::Record;
use futures::Stream;
use pin_project::pin_project;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A batch: elements of one lane, and its number within that lane.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch<T> {
    /// The lane every element came from.
    pub lane: LaneId,
    /// The batch's number within its lane (0, 1, 2, ...).
    pub index: u64,
    /// The elements.
    pub items: Vec<T>,
}

impl<T> Batch<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl Batch<Record> {
    /// A stable digest of the batch's contents.
    pub fn digest(&self) -> u64 {
        use crate::hash::combine;
        self.items
            .iter()
            .fold(combine(self.lane as u64, self.index), |h, r| {
                combine(h, r.digest())
            })
    }
}

impl<T> Laned for Batch<T> {
    fn lane(&self) -> LaneId {
        self.lane
    }
}

impl<T: Identity> Identity for Batch<T> {
    fn identity(&self) -> u64 {
        self.items.iter().fold(self.lane as u64, |h, x| {
            crate::hash::combine(h, x.identity())
        })
    }
}

/// Groups `n` elements of the same lane into a [`Batch`]; a batch never mixes
/// lanes. At the end, partial batches are emitted in lane order unless
/// `drop_last` is set.
///
/// Created by [`PipelineExt::batch`](crate::PipelineExt::batch).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner};
/// let recs = (0..10).map(|i| Ok(Record { lane: i % 2, ..Record::new() }));
/// let batches: Vec<_> = futures::stream::iter(recs).batch(3)
///     .into_blocking_iter(Runner::Inline).unwrap().map(Result::unwrap).collect();
/// assert_eq!(batches.iter().map(|b| (b.lane, b.len())).collect::<Vec<_>>(),
///            vec![(0, 3), (1, 3), (0, 2), (1, 2)]);
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct Batcher<S, T> {
    #[pin]
    inner: S,
    size: usize,
    drop_last: bool,
    open: BTreeMap<LaneId, (u64, Vec<T>)>,
    tail: VecDeque<Batch<T>>,
    done: bool,
    probe: Probe,
}

impl<S, T> Batcher<S, T> {
    /// Batches of `size` (at least 1).
    pub fn new(inner: S, size: usize, drop_last: bool) -> Self {
        Batcher {
            inner,
            size: size.max(1),
            drop_last,
            open: BTreeMap::new(),
            tail: VecDeque::new(),
            done: false,
            probe: Probe::default(),
        }
    }
}

impl<S, T> fmt::Debug for Batcher<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batcher")
            .field("size", &self.size)
            .field("drop_last", &self.drop_last)
            .field("open_lanes", &self.open.len())
            .finish_non_exhaustive()
    }
}

impl<S, T> Stream for Batcher<S, T>
where
    S: Stream<Item = Result<T>>,
    T: Laned,
{
    type Item = Result<Batch<T>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        this.probe.attach("batch", 1, None);
        loop {
            if *this.done {
                let b = this.tail.pop_front();
                if b.is_some() {
                    this.probe.output();
                } else {
                    this.probe.finish();
                }
                return Poll::Ready(b.map(Ok));
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(x))) => {
                    // Input is counted per finished batch: nothing per element.
                    this.probe.arrived();
                    let t = this.probe.sample();
                    let lane = x.lane();
                    let (index, items) = this.open.entry(lane).or_default();
                    items.push(x);
                    if items.len() == *this.size {
                        let b = Batch {
                            lane,
                            index: *index,
                            items: std::mem::replace(items, Vec::with_capacity(*this.size)),
                        };
                        *index += 1;
                        this.probe.sampled(t);
                        this.probe.input_n(b.items.len());
                        this.probe.output();
                        return Poll::Ready(Some(Ok(b)));
                    }
                    this.probe.sampled(t);
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    *this.done = true;
                    let partial: usize = this.open.values().map(|(_, items)| items.len()).sum();
                    this.probe.input_n(partial);
                    if !*this.drop_last {
                        for (&lane, (index, items)) in this.open.iter_mut() {
                            if !items.is_empty() {
                                this.tail.push_back(Batch {
                                    lane,
                                    index: *index,
                                    items: std::mem::take(items),
                                });
                                *index += 1;
                            }
                        }
                    }
                }
                Poll::Pending => {
                    this.probe.input_pending();
                    return Poll::Pending;
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (lo, hi) = self.inner.size_hint();
        let t = self.tail.len();
        (lo / self.size + t, hi.map(|h| h + t + self.open.len()))
    }
}

impl<S: Explain, T> Explain for Batcher<S, T> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(StageDescription::new(
            "batch",
            1,
            None,
            format!(
                "{} per lane{}",
                self.size,
                if self.drop_last { ", drop_last" } else { "" }
            ),
        ));
    }
}
