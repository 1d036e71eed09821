//! `lane_mux`: the tail multiplexer, owned lanes in strict round robin.

use crate::context::Probe;
use crate::error::{Error, Result};
use crate::obs::{Explain, StageDescription};
use crate::pointer::{LaneId, Laned};
use crate::settings::CANONICAL_LANES;
use futures::Stream;
use pin_project::pin_project;
use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Emits elements of the owned lanes in strict round robin (lane order),
/// whatever order they arrive in: the element after one of lane `a` is always
/// one of the next owned lane. When the input ends, lanes that ran dry are
/// skipped: what is left leaves by how many each lane delivered, then lane
/// order, which is the rotation's own order and does not depend on where a
/// restored rotation started. Elements of a lane not in the list are an
/// error.
///
/// Created by [`PipelineExt::lane_mux`](crate::PipelineExt::lane_mux).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner};
/// let recs = [1, 1, 0, 1, 0, 0].into_iter().map(|lane| Ok(Record { lane, ..Record::new() }));
/// let lanes: Vec<u32> = futures::stream::iter(recs).lane_mux(vec![0, 1])
///     .into_blocking_iter(Runner::Inline).unwrap().map(|r| r.unwrap().lane).collect();
/// assert_eq!(lanes, vec![0, 1, 0, 1, 0, 1]);
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct LaneMux<S, T> {
    #[pin]
    inner: S,
    lanes: Vec<LaneId>,
    queues: Vec<VecDeque<T>>,
    /// Elements delivered per lane (from a checkpoint's progress too).
    sent: Vec<u64>,
    next: usize,
    done: bool,
    probe: Probe,
    // An empty or impossible lane list, reported by the first poll (a
    // chain method cannot return it).
    invalid: Option<Error>,
}

impl<S, T> LaneMux<S, T> {
    /// Multiplexes `lanes` (sorted and deduplicated here). An empty list,
    /// or a lane at or above [`CANONICAL_LANES`]`.max`, makes the first poll
    /// return an [`Error::Config`] naming `lane_mux.lanes` (an empty list
    /// would drop every element).
    pub fn new(inner: S, mut lanes: Vec<LaneId>) -> Self {
        lanes.sort_unstable();
        lanes.dedup();
        let invalid = match lanes.last() {
            None => Some(Error::config(
                "lane_mux.lanes",
                "no lanes: every element would be dropped",
            )),
            Some(&l) if l as u64 >= CANONICAL_LANES.max => Some(Error::config(
                "lane_mux.lanes",
                format!(
                    "lane {l} is not below {}, the most canonical lanes a run has",
                    CANONICAL_LANES.max
                ),
            )),
            Some(_) => None,
        };
        let queues = lanes.iter().map(|_| VecDeque::new()).collect();
        let sent = vec![0; lanes.len()];
        LaneMux {
            invalid,
            inner,
            lanes,
            queues,
            sent,
            next: 0,
            done: false,
            probe: Probe::default(),
        }
    }

    /// The lanes, in emission order.
    pub fn lanes(&self) -> &[LaneId] {
        &self.lanes
    }

    /// Starts the rotation at `lane` instead of the first one, so a pipeline
    /// restored from a checkpoint taken mid-rotation keeps the interleaving.
    /// A lane not in the list leaves the rotation as it is.
    pub fn starting_at(mut self, lane: LaneId) -> Self {
        if let Ok(i) = self.lanes.binary_search(&lane) {
            self.next = i;
        }
        self
    }

    /// Counts `n` elements of `lane` as delivered before this stream
    /// started (a restored pipeline), for the order of what is left when
    /// the input ends.
    pub fn delivered_before(mut self, lane: LaneId, n: u64) -> Self {
        if let Ok(i) = self.lanes.binary_search(&lane) {
            self.sent[i] = n;
        }
        self
    }
}

impl<S, T> LaneMux<S, T> {
    crate::adapter_accessors!(inner);
}

impl<S: fmt::Debug, T> fmt::Debug for LaneMux<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaneMux")
            .field("inner", &self.inner)
            .field("lanes", &self.lanes)
            .field("next", &self.next)
            .field(
                "queued",
                &self.queues.iter().map(VecDeque::len).sum::<usize>(),
            )
            .finish_non_exhaustive()
    }
}

// Ends after the input did and every lane's queue drained, or after
// the error of an empty or impossible lane list.
impl<S, T> futures::stream::FusedStream for LaneMux<S, T>
where
    S: Stream<Item = Result<T>>,
    T: Laned,
{
    fn is_terminated(&self) -> bool {
        self.invalid.is_none()
            && (self.lanes.is_empty() || (self.done && self.queues.iter().all(VecDeque::is_empty)))
    }
}

impl<S, T> Stream for LaneMux<S, T>
where
    S: Stream<Item = Result<T>>,
    T: Laned,
{
    type Item = Result<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if let Some(e) = this.invalid.take() {
            *this.done = true;
            this.lanes.clear();
            return Poll::Ready(Some(Err(e)));
        }
        let n = this.lanes.len();
        if n == 0 {
            return Poll::Ready(None);
        }
        this.probe.attach("lane_mux", 1, None);
        loop {
            if let Some(x) = this.queues[*this.next].pop_front() {
                this.sent[*this.next] += 1;
                *this.next = (*this.next + 1) % n;
                this.probe.output();
                return Poll::Ready(Some(Ok(x)));
            }
            if *this.done {
                // Skip lanes that ran dry; stop when all did. The lane that
                // delivered least (then the first) goes next: the rotation
                // from any start, as a restored one may be stuck at a lane
                // that had run dry in the run it continues.
                let Some(k) = (0..n)
                    .filter(|&i| !this.queues[i].is_empty())
                    .min_by_key(|&i| (this.sent[i], i))
                else {
                    this.probe.finish();
                    return Poll::Ready(None);
                };
                *this.next = k;
                continue;
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(x))) => {
                    this.probe.input();
                    let lane = x.lane();
                    match this.lanes.binary_search(&lane) {
                        Ok(i) => {
                            this.queues[i].push_back(x);
                            if let Some(s) = this.probe.stats() {
                                s.max_queue.observe(this.queues[i].len() as u64);
                            }
                        }
                        Err(_) => {
                            return Poll::Ready(Some(Err(Error::Operator {
                                op: "lane_mux",
                                message: format!(
                                    "element of lane {lane}, which is not among the owned lanes {:?}",
                                    this.lanes
                                ),
                            })));
                        }
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => *this.done = true,
                Poll::Pending => {
                    this.probe.input_pending();
                    return Poll::Pending;
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let q: usize = self.queues.iter().map(VecDeque::len).sum();
        let (lo, hi) = self.inner.size_hint();
        (lo.saturating_add(q), hi.and_then(|h| h.checked_add(q)))
    }
}

impl<S: Explain, T> Explain for LaneMux<S, T> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(
            StageDescription::new(
                "lane_mux",
                1,
                None,
                crate::settings::explain_detail(
                    self.invalid.as_ref(),
                    format!("lanes {:?}, strict round robin", self.lanes),
                ),
            )
            .execution_only(),
        );
    }
}
