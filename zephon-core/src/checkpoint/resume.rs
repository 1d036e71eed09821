//! `resume_from`: the replay filter that drops what a checkpoint says was
//! already delivered.

use super::cut::Board;
use super::progress::{Delivered, Progress};
use crate::context::Probe;
use crate::context::{Layered, PipelineContext};
use crate::error::{Error, Result};
use crate::obs::{Explain, StageDescription};
use crate::ops::lane_mux::LaneMux;
use crate::pointer::{LaneId, Laned};
use futures::Stream;
use pin_project::pin_project;
use std::collections::BTreeMap;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The restore point of a checkpointed pipeline: it installs the pipeline's
/// checkpoint board in the [pipeline context](crate::context) (on which shuffle, packing and batch register, and from
/// which batches take their lane cuts), puts a checkpoint's cuts back on it,
/// and drops, lane by lane, the leading batches of lanes that are replayed
/// rather than restored from a cut (see [`checkpoint`](super)).
///
/// A replayed lane's output is a pure function of its input (the determinism
/// promise), so replaying it from its start through the same chain rebuilds
/// shuffle buffers, packing bins, mixture deficits and partial batches
/// exactly; the cost is the work of every delivered batch again (without the
/// training step), growing with the progress of the run.
///
/// The skip is counted in elements, not batches: a restore may use another
/// micro-batch size as long as each lane's delivered count falls on one of
/// its batch boundaries (true at every step boundary when the per-step lane
/// quota is a multiple of the new size). A batch that straddles the boundary
/// is an error naming the lane, not a silent drop or repeat.
///
/// A batch of a lane the progress does not track is an error: the progress
/// was made for another rank.
///
/// Created by [`ResumeExt::resume_from`].
///
/// ```
/// use zephon_core::checkpoint::{CheckpointedExt, Recipe, ResumeExt};
/// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
/// let ds = Dataset::in_memory("toy", vec![(0..40).map(|i| Record::new().with("i", i as i64)).collect()])?;
/// let ws = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(2).seed(5).build()?;
/// let recipe = Recipe::new(&ws).setting("batch", 4);
/// let run = |progress: zephon_core::checkpoint::Progress| {
///     ws.stream().fetch(2).batch(4).resume_from(&progress).lane_mux_from(&progress)
///         .into_blocking_iter(Runner::Inline).map(|it| it.checkpointed(progress))
/// };
/// let all: Vec<_> = run(recipe.start(&ws))?.map(Result::unwrap).collect();
/// let mut first = run(recipe.start(&ws))?;
/// let head: Vec<_> = first.by_ref().take(3).map(Result::unwrap).collect();
/// let ckpt = first.checkpoint();
/// let rest: Vec<_> = run(recipe.resume(&ws, &ckpt)?)?.map(Result::unwrap).collect();
/// assert_eq!([head, rest].concat(), all);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct ResumeFrom<S> {
    #[pin]
    inner: S,
    /// Per lane: elements still to drop.
    skip: BTreeMap<LaneId, u64>,
    /// Per lane: elements seen so far, for the error message.
    seen: BTreeMap<LaneId, u64>,
    /// Replayed batches count as input without output, so observability
    /// shows how long a restore spends replaying.
    probe: Probe,
    /// The pipeline's checkpoint board: the stateful operators register on
    /// it, batches take their lane cuts from it, and a restore puts cuts back
    /// on it.
    board: Arc<Board>,
    /// The pipeline context the board travels in, around every poll of
    /// the inner stream.
    ctx: Layered,
    /// Lanes restored from a cut rather than replayed (until the first
    /// element confirms the work source accepted the cuts).
    cut_lanes: Vec<LaneId>,
    settled: bool,
    /// Why the restore cannot go on (the chain differs from the
    /// checkpointed run's), said on the first poll.
    invalid: Option<Error>,
    /// The steps the run leaves out, for `explain()`.
    skips: Vec<std::ops::Range<u64>>,
}

impl<S> ResumeFrom<S> {
    /// Drops from `inner` what `progress` counts as delivered.
    pub fn new(inner: S, progress: &Progress) -> Self {
        ResumeFrom {
            inner,
            skip: progress
                .lanes()
                .iter()
                .map(|(&l, p)| (l, p.items))
                .collect(),
            seen: BTreeMap::new(),
            probe: Probe::default(),
            board: Board::new(progress.cuts().clone()),
            ctx: Layered::default(),
            cut_lanes: progress.cuts().keys().copied().collect(),
            settled: false,
            invalid: None,
            skips: progress.skips().to_vec(),
        }
    }

    /// Elements still to drop, over all lanes (0 once the replay is over).
    pub fn replay_left(&self) -> u64 {
        self.skip.values().fold(0, |a, &n| a.saturating_add(n))
    }
}

impl<S> ResumeFrom<S> {
    crate::adapter_accessors!(inner);
}

impl<S: fmt::Debug> fmt::Debug for ResumeFrom<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResumeFrom")
            .field("inner", &self.inner)
            .field("lanes", &self.skip.len())
            .field("replay_left", &self.replay_left())
            .finish_non_exhaustive()
    }
}

impl<S, T> futures::stream::FusedStream for ResumeFrom<S>
where
    S: futures::stream::FusedStream<Item = Result<T>>,
    T: Delivered,
{
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }
}

impl<S, T> Stream for ResumeFrom<S>
where
    S: Stream<Item = Result<T>>,
    T: Delivered,
{
    type Item = Result<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if let Some(e) = this.invalid.take() {
            this.skip.clear();
            return Poll::Ready(Some(Err(e)));
        }
        this.probe.attach("resume_from", 1, None);
        loop {
            let board = &*this.board;
            let ctx = this.ctx.get(|outer| match outer {
                Some(o) => o.with_board(board.clone()),
                None => PipelineContext::new(None, Some(board.clone())),
            });
            let polled = ctx.enter(|| this.inner.as_mut().poll_next(cx));
            if !*this.settled && !matches!(polled, Poll::Pending) {
                // The work source has looked at the cuts by now: lanes it
                // restores from a cut have nothing to drop.
                *this.settled = true;
                if !this.board.replaying_all() {
                    for lane in this.cut_lanes.iter() {
                        if let Some(left) = this.skip.get_mut(lane) {
                            *left = 0;
                        }
                    }
                }
            }
            let unit = match polled {
                Poll::Ready(Some(Ok(unit))) => unit,
                Poll::Ready(None) => {
                    this.probe.finish();
                    // The lane ended before what the checkpoint counts as
                    // delivered: it was made from other data, or counts
                    // more than was ever delivered. Ending quietly would
                    // hand the run a lane that ended early.
                    if let Some((lane, left)) = this.skip.iter().find(|(_, n)| **n > 0) {
                        let seen = this.seen.get(lane).copied().unwrap_or(0);
                        let (lane, left) = (*lane, *left);
                        this.skip.clear();
                        return Poll::Ready(Some(Err(Error::Checkpoint {
                            origin: "resume_from".into(),
                            message: format!(
                                "lane {lane}: the checkpoint counts {} delivered elements but the lane \
                                 ended after {seen}: it was taken from other data or another pipeline",
                                seen.saturating_add(left)
                            ),
                        })));
                    }
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    this.probe.input_pending();
                    return Poll::Pending;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
            };
            this.probe.input();
            let lane = unit.lane();
            let n = unit.delivered_items();
            let Some(left) = this.skip.get_mut(&lane) else {
                return Poll::Ready(Some(Err(Error::Checkpoint {
                    origin: "resume_from".into(),
                    message: format!(
                        "a batch of lane {lane}, which the resumed progress does not track (it tracks lanes {:?}); the progress was made for another rank",
                        this.skip.keys().collect::<Vec<_>>()
                    ),
                })));
            };
            let seen = this.seen.entry(lane).or_default();
            let start = *seen;
            *seen += n;
            if *left == 0 {
                this.probe.output();
                return Poll::Ready(Some(Ok(unit)));
            }
            if n <= *left {
                *left -= n;
                continue;
            }
            return Poll::Ready(Some(Err(Error::Checkpoint {
                origin: "resume_from".into(),
                message: format!(
                    "lane {lane}: the checkpoint delivered {} elements, which falls inside a batch holding elements {start}..{}; use a batch size that divides the elements delivered per lane",
                    start + *left,
                    start + n
                ),
            })));
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, self.inner.size_hint().1)
    }
}

impl<S: Explain> Explain for ResumeFrom<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(StageDescription::new(
            "resume_from",
            1,
            None,
            // A fresh run has nothing to restore: said as such, not as a
            // replay of nothing.
            {
                let restore = if self.cut_lanes.is_empty() && self.replay_left() == 0 {
                    "a fresh run: nothing to restore".to_owned()
                } else {
                    format!(
                        "{} lanes, {} of them from their cuts; {} delivered elements to drop where replayed",
                        self.skip.len(),
                        self.cut_lanes.len(),
                        self.replay_left()
                    )
                };
                let skips: Vec<String> = self
                    .skips
                    .iter()
                    .map(|r| format!("{}..{}", r.start, r.end))
                    .collect();
                match skips.is_empty() {
                    true => restore,
                    false => format!("{restore}; steps {} skipped", skips.join(", ")),
                }
            },
        )
        .execution_only());
    }
}

/// Adds [`resume`](ResumeExt::resume) (and its two parts,
/// [`resume_from`](ResumeExt::resume_from) and
/// [`lane_mux_from`](ResumeExt::lane_mux_from)) to streams of batches.
pub trait ResumeExt: Stream + Sized {
    /// The restore step in one call: binds `progress` to this chain (the
    /// data-shaping stages before it, as [`explain`](crate::PipelineExt::explain)
    /// describes them), restores from it ([`resume_from`](Self::resume_from))
    /// and interleaves the lanes it tracks from where the checkpoint stopped
    /// ([`lane_mux_from`](Self::lane_mux_from)). Place it right after
    /// `batch` (or `to_training`), before `prefetch_batches`; use it on a
    /// fresh run too ([`Recipe::start`](super::Recipe::start)), so its
    /// checkpoints record the chain.
    ///
    /// A fresh run records the chain in `progress`, so every checkpoint
    /// carries it; a run resumed from such a checkpoint
    /// ([`Recipe::resume`](super::Recipe::resume)) must be built of the same
    /// data-shaping stages with the same settings, in the same order, or its
    /// first poll is an error naming the first stage that differs (stages
    /// that only change how it runs, such as prefetch, parallelism, queue
    /// and micro-batch sizes, may change). A checkpoint written without a
    /// chain is not checked against one.
    ///
    /// ```
    /// use zephon_core::checkpoint::{CheckpointedExt, Recipe, ResumeExt};
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, ShuffleMode, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![(0..40).map(|i| Record::new().with("i", i as i64)).collect()])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(2).seed(5).build()?;
    /// let recipe = Recipe::new(&ws);
    /// let run = |buffer: usize, mut progress: zephon_core::checkpoint::Progress| {
    ///     ws.stream().fetch(2).shuffle(buffer, ShuffleMode::Reservoir, 1).batch(4)
    ///         .resume(&mut progress)
    ///         .into_blocking_iter(Runner::Inline).map(|it| it.checkpointed(progress))
    /// };
    /// let all: Vec<_> = run(8, recipe.start(&ws))?.map(Result::unwrap).collect();
    /// let mut first = run(8, recipe.start(&ws))?;
    /// let head: Vec<_> = first.by_ref().take(3).map(Result::unwrap).collect();
    /// let ckpt = first.checkpoint();
    /// let rest: Vec<_> = run(8, recipe.resume(&ws, &ckpt)?)?.map(Result::unwrap).collect();
    /// assert_eq!([head, rest].concat(), all);
    /// // Another shuffle buffer is another chain: refused, naming the stage.
    /// let e = run(16, recipe.resume(&ws, &ckpt)?)?.next().unwrap().unwrap_err();
    /// assert!(e.to_string().contains("pipeline stage 2 `shuffle`"), "{e}");
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn resume<T>(self, progress: &mut Progress) -> LaneMux<ResumeFrom<Self>, T>
    where
        Self: Stream<Item = Result<T>> + Explain,
        T: Delivered,
    {
        let mut stages = Vec::new();
        self.describe(&mut stages);
        let bound = progress.bind_chain(&stages);
        let mut restore = ResumeFrom::new(self, progress);
        restore.invalid = bound.err();
        restore.lane_mux_from(progress)
    }

    /// Restores from `progress` (its lane cuts, or a replay that drops what
    /// it counts as delivered). Place it right after `batch`, before
    /// `lane_mux` and `prefetch_batches`: the operators upstream register
    /// with it when it first polls them. See [`ResumeFrom`].
    fn resume_from<T>(self, progress: &Progress) -> ResumeFrom<Self>
    where
        Self: Stream<Item = Result<T>>,
        T: Delivered,
    {
        ResumeFrom::new(self, progress)
    }

    /// [`lane_mux`](crate::PipelineExt::lane_mux) over the lanes `progress`
    /// tracks, its rotation starting at [`Progress::next_lane`], so a
    /// checkpoint taken mid-step resumes with the same interleaving.
    fn lane_mux_from<T>(self, progress: &Progress) -> LaneMux<Self, T>
    where
        Self: Stream<Item = Result<T>>,
        T: Laned,
    {
        let mut mux = LaneMux::new(self, progress.lanes().keys().copied().collect());
        for (&lane, p) in progress.lanes() {
            mux = mux.delivered_before(lane, p.batches);
        }
        match progress.next_lane() {
            Some(lane) => mux.starting_at(lane),
            None => mux,
        }
    }
}

impl<S: Stream> ResumeExt for S {}
