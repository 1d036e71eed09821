//! `batch`: group elements of one lane into batches.

use crate::context::Probe;
use crate::context::{CutRole, Joined};
use crate::cut::{Arrival, Board, CutContext, CutSource, LaneCut, OpLaneCut, Restoring};
use crate::error::{Error, Result};
use crate::obs::{Explain, StageDescription};
use crate::pointer::{Identity, LaneId, Laned};
use crate::record::Record;
use crate::settings::BATCH_SIZE;
use futures::Stream;
use pin_project::pin_project;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
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
    /// In a checkpointed pipeline, what the lane's stateful operators held
    /// right after this batch (see [`checkpoint`](crate::checkpoint)).
    pub cut: Option<Arc<LaneCut>>,
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
    open: OpenLanes<T>,
    tail: VecDeque<Batch<T>>,
    done: bool,
    probe: Probe,
    checkpoint: Option<Checkpointing>,
    /// The input's elements already made and waiting to be handed out,
    /// where the input lets batch take them without a poll each (`fetch`'s
    /// read records).
    ready: Option<ReadyOf<S, T>>,
    // An out-of-range size, reported by the first poll (a chain method
    // cannot return it).
    invalid: Option<Error>,
}

/// Where an input keeps the elements it has made and not yet handed out.
pub(crate) type ReadyOf<S, T> = for<'a> fn(Pin<&'a mut S>) -> Ready<'a, T>;

/// An input's elements made and not yet handed out: `items` first, then
/// each of `chunks` in turn. A chunk that fills a lane's empty open batch
/// becomes that batch as it is, its elements not moved again.
pub(crate) struct Ready<'a, T> {
    pub(crate) items: &'a mut std::vec::IntoIter<T>,
    pub(crate) chunks: &'a mut std::vec::IntoIter<Vec<T>>,
}

/// Each lane's open batch (its number and its elements so far), in lane
/// order. Found per element: the last element's lane first, since a lane's
/// elements mostly come in runs, otherwise by binary search; a map lookup
/// per element cost as much as the rest of batching.
struct OpenLanes<T> {
    lanes: Vec<(LaneId, u64, Vec<T>)>,
    last: usize,
}

impl<T> OpenLanes<T> {
    fn new() -> Self {
        OpenLanes {
            lanes: Vec::new(),
            last: 0,
        }
    }

    /// The open batch of `lane`, opened (number 0, empty) if it has none.
    #[inline]
    fn get(&mut self, lane: LaneId) -> &mut (LaneId, u64, Vec<T>) {
        let i = match self.lanes.get(self.last) {
            Some(e) if e.0 == lane => self.last,
            _ => self.find(lane),
        };
        &mut self.lanes[i]
    }

    fn find(&mut self, lane: LaneId) -> usize {
        let i = match self.lanes.binary_search_by_key(&lane, |e| e.0) {
            Ok(i) => i,
            Err(i) => {
                self.lanes.insert(i, (lane, 0, Vec::new()));
                i
            }
        };
        self.last = i;
        i
    }
}

/// Batch's part in a checkpointed pipeline: it asks the board for a lane's
/// cut whenever a batch leaves.
#[derive(Debug)]
struct Checkpointing {
    board: Arc<Board>,
    lanes: Arc<BatchLanes>,
    restoring: Restoring,
}

/// Elements each lane consumed, as of its last batch.
#[derive(Debug, Default)]
struct BatchLanes(Mutex<BTreeMap<LaneId, u64>>);

impl BatchLanes {
    /// Adds `n` to the elements `lane` consumed.
    fn add(&self, lane: LaneId, n: u64) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(lane)
            .or_default() += n;
    }
}

impl CutSource for BatchLanes {
    fn cut(&self, lane: LaneId, _: CutContext) -> Option<OpLaneCut> {
        let lanes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // A batch boundary holds nothing: no preamble, no state.
        Some(OpLaneCut::new(
            "batch",
            lanes.get(&lane).copied().unwrap_or(0),
        ))
    }
}

impl<S, T> Batcher<S, T> {
    /// Batches of `size`, in [`BATCH_SIZE`] (1 to 1,048,576): any other
    /// size makes the first poll return an [`Error::Config`] naming
    /// `batch.size`, and the stream end.
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// let recs = futures::stream::iter(vec![Ok(Record::new())]);
    /// let mut it = recs.batch(0).into_blocking_iter(Runner::Inline).unwrap();
    /// assert!(it.next().unwrap().unwrap_err().to_string().contains("batch.size"));
    /// assert!(it.next().is_none());
    /// ```
    pub fn new(inner: S, size: usize, drop_last: bool) -> Self {
        let invalid = BATCH_SIZE.check_usize("batch.size", size).err();
        Batcher {
            invalid,
            inner,
            size: size.clamp(1, BATCH_SIZE.max as usize),
            drop_last,
            open: OpenLanes::new(),
            tail: VecDeque::new(),
            done: false,
            probe: Probe::default(),
            checkpoint: None,
            ready: None,
        }
    }

    /// Takes the input's made elements from `ready` rather than polling
    /// for each (outside a checkpointed pipeline, whose restore looks at
    /// each element's arrival).
    pub(crate) fn take_ready(mut self, ready: ReadyOf<S, T>) -> Self {
        self.ready = Some(ready);
        self
    }
}

/// Closes `items`, the open batch number `index` of `lane`, which is full.
fn close<T>(
    probe: &mut Probe,
    checkpoint: Option<&Checkpointing>,
    size: usize,
    lane: LaneId,
    index: &mut u64,
    items: &mut Vec<T>,
) -> Batch<T> {
    // A push is a few instructions; building the batch (a new buffer, the
    // lane cut) is batch's real work, so that is what a sample times, one
    // batch in SAMPLE_EVERY standing for the others' elements.
    let items = std::mem::replace(items, Vec::with_capacity(size));
    close_with(probe, checkpoint, lane, index, items)
}

/// Closes `items` as batch number `index` of `lane`.
fn close_with<T>(
    probe: &mut Probe,
    checkpoint: Option<&Checkpointing>,
    lane: LaneId,
    index: &mut u64,
    items: Vec<T>,
) -> Batch<T> {
    let t = probe.sample();
    let mut b = Batch {
        lane,
        index: *index,
        items,
        cut: None,
    };
    if let Some(ck) = checkpoint {
        ck.lanes.add(lane, b.items.len() as u64);
        b.cut = ck.board.cut(lane).map(Arc::new);
    }
    *index += 1;
    probe.sampled_as(t, b.items.len() as u64);
    probe.input_n(b.items.len());
    probe.output();
    b
}

impl<S, T> Batcher<S, T> {
    crate::adapter_accessors!(inner);
}

impl<S: fmt::Debug, T> fmt::Debug for Batcher<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batcher")
            .field("inner", &self.inner)
            .field("size", &self.size)
            .field("drop_last", &self.drop_last)
            .field("open_lanes", &self.open.lanes.len())
            .finish_non_exhaustive()
    }
}

// Ends after the input did and the partial batches left.
impl<S, T> futures::stream::FusedStream for Batcher<S, T>
where
    S: Stream<Item = Result<T>>,
    T: Laned,
{
    fn is_terminated(&self) -> bool {
        self.invalid.is_none() && self.done && self.tail.is_empty()
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
        // Checked before it is taken: taking moves the whole error out
        // on every poll.
        if this.invalid.is_some()
            && let Some(e) = this.invalid.take()
        {
            *this.done = true;
            return Poll::Ready(Some(Err(e)));
        }
        let mut lanes = None;
        let joined = this.probe.join("batch", 1, None, || {
            let l = Arc::new(BatchLanes::default());
            let weak: std::sync::Weak<dyn CutSource> = Arc::downgrade(&l) as _;
            lanes = Some(l);
            CutRole::Source(weak)
        });
        match joined {
            Ok(Some(Joined { board, plan })) => {
                *this.checkpoint = Some(Checkpointing {
                    restoring: Restoring::new(plan, board.clone()),
                    board,
                    lanes: lanes.expect("set by the registration"),
                });
            }
            Ok(None) => {}
            Err(e) => return Poll::Ready(Some(Err(e))),
        }
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
            // Elements the input has already made, taken as the polls
            // below would take them, one after the other.
            if let Some(take) = *this.ready
                && this.checkpoint.is_none()
            {
                let Ready {
                    items: ready,
                    chunks,
                } = take(this.inner.as_mut());
                if ready.len() > 0 || chunks.len() > 0 {
                    this.probe.arrived();
                }
                loop {
                    if ready.len() == 0 {
                        let Some(chunk) = chunks.next() else { break };
                        if chunk.len() == *this.size
                            && let lane = chunk[0].lane()
                            && chunk.iter().all(|x| x.lane() == lane)
                        {
                            let (_, index, items) = this.open.get(lane);
                            if items.is_empty() {
                                let b = close_with(this.probe, None, lane, index, chunk);
                                return Poll::Ready(Some(Ok(b)));
                            }
                        }
                        *ready = chunk.into_iter();
                    }
                    // Taken a run of one lane at a time, up to the room in
                    // its open batch: one lane lookup and one bulk move per
                    // run, not per element.
                    let Some(lane) = ready.as_slice().first().map(T::lane) else {
                        continue;
                    };
                    let (_, index, items) = this.open.get(lane);
                    let room = (*this.size - items.len()).min(ready.len());
                    let run = 1 + ready.as_slice()[1..room]
                        .iter()
                        .take_while(|x| x.lane() == lane)
                        .count();
                    if run == ready.len() {
                        // The rest of a chunk the input began handing out
                        // one by one: moved in one copy, where a run taken
                        // from the iterator is moved element by element.
                        items.extend(std::mem::take(ready));
                    } else {
                        items.extend(ready.by_ref().take(run));
                    }
                    if items.len() == *this.size {
                        let b = close(this.probe, None, *this.size, lane, index, items);
                        return Poll::Ready(Some(Ok(b)));
                    }
                }
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(x))) => {
                    // Input is counted per finished batch: nothing per element.
                    this.probe.arrived();
                    let lane = x.lane();
                    if let Some(ck) = this.checkpoint.as_mut()
                        && let Arrival::Own(cut) = ck.restoring.arrive(lane)
                    {
                        // A batch boundary holds nothing: the cut only says
                        // where the lane's numbering continues.
                        let consumed = cut.consumed;
                        ck.restoring.done(lane);
                        if !consumed.is_multiple_of(*this.size as u64) {
                            return Poll::Ready(Some(Err(Error::Checkpoint {
                                origin: "resume_from".into(),
                                message: format!(
                                    "lane {lane}: the checkpoint delivered {consumed} elements, which is not a whole number \
                                     of batches of {}; use a batch size that divides the elements delivered per lane",
                                    *this.size
                                ),
                            })));
                        }
                        let open = this.open.get(lane);
                        open.1 = consumed / *this.size as u64;
                        open.2 = Vec::new();
                        ck.lanes.add(lane, consumed);
                    }
                    let (_, index, items) = this.open.get(lane);
                    items.push(x);
                    if items.len() == *this.size {
                        let b = close(
                            this.probe,
                            this.checkpoint.as_ref(),
                            *this.size,
                            lane,
                            index,
                            items,
                        );
                        return Poll::Ready(Some(Ok(b)));
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    *this.done = true;
                    let partial: usize = this
                        .open
                        .lanes
                        .iter()
                        .map(|(_, _, items)| items.len())
                        .sum();
                    this.probe.input_n(partial);
                    if !*this.drop_last {
                        for (lane, index, items) in this.open.lanes.iter_mut() {
                            let lane = *lane;
                            if !items.is_empty() {
                                // Everything upstream has finished: the cut
                                // of an exhausted lane, which a restore
                                // continues with nothing.
                                let cut = this.checkpoint.as_ref().and_then(|ck| {
                                    ck.lanes.add(lane, items.len() as u64);
                                    ck.board.cut(lane).map(Arc::new)
                                });
                                this.tail.push_back(Batch {
                                    lane,
                                    index: *index,
                                    items: std::mem::take(items),
                                    cut,
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
        (
            (lo / self.size).saturating_add(t),
            hi.and_then(|h| h.checked_add(t)?.checked_add(self.open.lanes.len())),
        )
    }
}

impl<S: Explain, T> Explain for Batcher<S, T> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(
            StageDescription::new(
                "batch",
                1,
                None,
                crate::settings::explain_detail(
                    self.invalid.as_ref(),
                    format!(
                        "{} per lane{}",
                        self.size,
                        if self.drop_last { ", drop_last" } else { "" }
                    ),
                ),
            )
            .with_data(("drop_last", self.drop_last)),
        );
    }
}
