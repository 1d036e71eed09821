//! [`Progress`]: what a rank has delivered, lane by lane, and the iterator
//! wrapper that keeps it up to date.

use super::cut::LaneCut;
use super::recipe::Recipe;
use super::state::{CHECKPOINT_VERSION, Checkpoint, LaneProgress};
use crate::error::{Error, Result};
use crate::ops::batch::Batch;
use crate::pointer::{LaneId, Laned};
use crate::work::WorkSource;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Elements a rank hands to its consumer: lane-batches, or anything that
/// knows its lane and how many elements it holds.
pub trait Delivered: Laned {
    /// Number of elements (samples, packed rows) in this unit.
    fn delivered_items(&self) -> u64;

    /// What the lane's stateful operators held right after this unit, when
    /// the pipeline could cut it (see [`LaneCut`]).
    fn cut(&self) -> Option<&Arc<LaneCut>> {
        None
    }

    /// The unit's number within its lane (from 0), where it has one: a
    /// resumed lane's first unit is never number 0, so a pipeline that
    /// restarts instead of resuming is caught
    /// ([`Progress::check_delivered`]).
    fn lane_index(&self) -> Option<u64> {
        None
    }
}

impl<T> Delivered for Batch<T> {
    fn delivered_items(&self) -> u64 {
        self.items.len() as u64
    }

    fn lane_index(&self) -> Option<u64> {
        Some(self.index)
    }

    fn cut(&self) -> Option<&Arc<LaneCut>> {
        self.cut.as_ref()
    }
}

/// Per-lane delivery counts of one rank, bound to its [`Recipe`]. Start one
/// with [`Recipe::start`] (fresh run) or [`Recipe::resume`] (from a
/// checkpoint); record every batch handed to the training step; take a
/// [`Checkpoint`] between steps.
///
/// ```
/// use zephon_core::checkpoint::Recipe;
/// use zephon_core::{Dataset, Record, WorkSource};
/// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 10]])?;
/// let ws = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(2).build()?;
/// let mut p = Recipe::new(&ws).start(&ws);
/// p.record(0, 3);
/// p.record(1, 3);
/// assert_eq!(p.steps(), 1);
/// assert_eq!(p.checkpoint().lanes[&1].items, 3);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Progress {
    recipe: Recipe,
    lanes: BTreeMap<LaneId, LaneProgress>,
    /// Per lane, the cut after its last delivered batch, where there is one.
    cuts: BTreeMap<LaneId, Arc<LaneCut>>,
    /// Steps left out (see [`Progress::skip_steps`]), as the recipe records them.
    skips: Vec<std::ops::Range<u64>>,
}

impl Recipe {
    /// Progress of a fresh run: nothing delivered on the lanes `work` owns.
    pub fn start(&self, work: &WorkSource) -> Progress {
        Progress {
            recipe: self.clone(),
            lanes: work
                .owned_lanes()
                .into_iter()
                .map(|l| (l, LaneProgress::default()))
                .collect(),
            cuts: BTreeMap::new(),
            skips: super::skip::recorded(self.settings()),
        }
    }

    /// Progress of a restored run: the checkpoint's counts for the lanes
    /// `work` owns. Refused, with the reason, when the checkpoint is from
    /// another run ([`Checkpoint::check_recipe`]) or does not cover every
    /// owned lane (merge the checkpoints of all ranks first).
    ///
    /// `work` may have any rank, world size and ownership.
    pub fn resume(&self, work: &WorkSource, checkpoint: &Checkpoint) -> Result<Progress> {
        // The operator chain the checkpoint recorded is checked by
        // `resume`, where the pipeline is known.
        let recipe = self.with_chain_of(&checkpoint.settings);
        checkpoint.check_recipe(&recipe)?;
        let owned = work.owned_lanes();
        let missing: Vec<LaneId> = owned
            .iter()
            .copied()
            .filter(|l| !checkpoint.lanes.contains_key(l))
            .collect();
        if !missing.is_empty() {
            return Err(Error::Checkpoint {
                origin: "restore".into(),
                message: format!(
                    "lanes {missing:?} (owned by this rank) are not in the checkpoint, which covers {:?}; merge the checkpoints of all ranks",
                    checkpoint.lanes.keys().collect::<Vec<_>>()
                ),
            });
        }
        Ok(Progress {
            skips: super::skip::recorded(recipe.settings()),
            recipe,
            cuts: owned
                .iter()
                .filter_map(|l| Some((*l, Arc::new(checkpoint.cuts.get(l)?.clone()))))
                .collect(),
            lanes: owned
                .into_iter()
                .map(|l| (l, checkpoint.lanes[&l]))
                .collect(),
        })
    }
}

impl Progress {
    /// Counts one batch of `items` elements of `lane` as delivered.
    /// The lane's cut, if it had one, no longer describes it: a restore
    /// replays the lane.
    pub fn record(&mut self, lane: LaneId, items: u64) {
        let p = self.lanes.entry(lane).or_default();
        p.batches += 1;
        p.items += items;
        self.cuts.remove(&lane);
    }

    /// Notes that the rank's pipeline ended: every tracked lane ran dry, so
    /// a merge does not take its lanes' lower counts for an earlier step.
    /// [`Checkpointed`] calls it when its iterator ends.
    pub fn mark_ended(&mut self) {
        for p in self.lanes.values_mut() {
            p.ended = true;
        }
    }

    /// Checks that `unit` continues its lane: a lane this progress counts
    /// batches of must not deliver its batch number 0 again. That happens
    /// when the pipeline was built without its restore step
    /// ([`resume`](super::ResumeExt::resume), or `resume_from` with
    /// `lane_mux_from`), so the run would start over and repeat what was
    /// already trained on; an error says so instead.
    /// [`Checkpointed`] and [`CheckpointedStream`](super::CheckpointedStream)
    /// call it on every unit.
    ///
    /// ```
    /// use zephon_core::checkpoint::{CheckpointedExt, Recipe};
    /// use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![(0..16).map(|i| Record::new().with("i", i as i64)).collect()])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(2).build()?;
    /// let recipe = Recipe::new(&ws);
    /// let mut first = ws.stream().fetch(2).batch(4).lane_mux(ws.owned_lanes())
    ///     .into_blocking_iter(Runner::Inline)?.checkpointed(recipe.start(&ws));
    /// first.next().unwrap()?;
    /// let ckpt = first.checkpoint();
    /// // Resumed without a restore step: lane 0 starts again at batch 0.
    /// let mut again = ws.stream().fetch(2).batch(4).lane_mux(ws.owned_lanes())
    ///     .into_blocking_iter(Runner::Inline)?.checkpointed(recipe.resume(&ws, &ckpt)?);
    /// let e = again.next().unwrap().unwrap_err();
    /// assert!(e.to_string().contains("without its restore step"), "{e}");
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn check_delivered<T: Delivered>(&self, unit: &T) -> Result<()> {
        let lane = unit.lane();
        let p = self.lane(lane);
        if p.batches > 0 && unit.lane_index() == Some(0) {
            return Err(Error::Checkpoint {
                origin: "restore".into(),
                message: format!(
                    "lane {lane} delivered its batch 0 again, but the checkpoint this run resumes from counts {} batches \
                     ({} elements) of it as delivered: the pipeline was built without its restore step and would repeat them; \
                     build it with `.resume(&mut progress)` right after `batch` (or `.resume_from(&progress).lane_mux_from(&progress)`)",
                    p.batches, p.items
                ),
            });
        }
        Ok(())
    }

    /// Counts `unit` as delivered, keeping its lane cut.
    pub fn record_delivered<T: Delivered>(&mut self, unit: &T) {
        let lane = unit.lane();
        self.record(lane, unit.delivered_items());
        if let Some(cut) = unit.cut() {
            self.cuts.insert(lane, cut.clone());
        }
    }

    /// The lane cuts a restore puts back (lanes without one are replayed).
    pub fn cuts(&self) -> &BTreeMap<LaneId, Arc<LaneCut>> {
        &self.cuts
    }

    /// What `lane` has delivered (zero for a lane not tracked).
    pub fn lane(&self, lane: LaneId) -> LaneProgress {
        self.lanes.get(&lane).copied().unwrap_or_default()
    }

    /// Every tracked lane's progress.
    pub fn lanes(&self) -> &BTreeMap<LaneId, LaneProgress> {
        &self.lanes
    }

    /// Steps completed, counted at a step boundary: the most lane-batches any
    /// tracked lane delivered. (Lanes that ran dry near the end of a finite
    /// run hold fewer; lanes with data left all hold this many.)
    pub fn steps(&self) -> u64 {
        self.lanes.values().map(|p| p.batches).max().unwrap_or(0)
    }

    /// The lane a strict round robin over the tracked lanes serves next:
    /// the first, in lane order, of those that delivered the fewest batches.
    /// (Once some lanes ran dry at the end of a finite run, it may name a dry
    /// lane; the round robin then moves on to the next lane with data.)
    pub fn next_lane(&self) -> Option<LaneId> {
        let fewest = self.lanes.values().map(|p| p.batches).min()?;
        self.lanes
            .iter()
            .find(|(_, p)| p.batches == fewest)
            .map(|(&l, _)| l)
    }

    /// The recipe this progress belongs to.
    pub fn recipe(&self) -> &Recipe {
        &self.recipe
    }

    pub(crate) fn recipe_mut(&mut self) -> &mut Recipe {
        &mut self.recipe
    }

    /// The skipped step ranges, in the order recorded.
    pub fn skips(&self) -> &[std::ops::Range<u64>] {
        &self.skips
    }

    pub(crate) fn set_skips(&mut self, skips: Vec<std::ops::Range<u64>>) {
        self.skips = skips;
    }

    /// The checkpoint of this rank's lanes, as of now.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            version: CHECKPOINT_VERSION,
            step: self.steps(),
            positions: self.recipe.positions(),
            recipe_fingerprint: self.recipe.fingerprint(),
            work_fingerprint: self.recipe.work_fingerprint(),
            seed: self.recipe.seed(),
            canonical_lanes: self.recipe.canonical_lanes(),
            settings: self.recipe.settings().clone(),
            lanes: self.lanes.clone(),
            cuts: self
                .cuts
                .iter()
                .map(|(&l, c)| (l, LaneCut::clone(c)))
                .collect(),
        }
    }
}

/// An iterator of delivered units (a [`BlockingIter`](crate::BlockingIter)
/// of batches) that counts what it hands out, so [`checkpoint`] between two
/// steps is exact whatever is still prefetched inside the pipeline.
///
/// Created by [`CheckpointedExt::checkpointed`].
///
/// [`checkpoint`]: Checkpointed::checkpoint
#[derive(Debug)]
#[must_use = "iterators do nothing unless consumed"]
pub struct Checkpointed<I> {
    inner: I,
    progress: Progress,
}

impl<I> Checkpointed<I> {
    /// The progress so far.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The checkpoint of everything handed out so far.
    pub fn checkpoint(&self) -> Checkpoint {
        self.progress.checkpoint()
    }

    /// The wrapped iterator.
    pub fn into_inner(self) -> I {
        self.inner
    }
}

impl<I, T> Iterator for Checkpointed<I>
where
    I: Iterator<Item = Result<T>>,
    T: Delivered,
{
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        loop {
            let Some(item) = self.inner.next() else {
                self.progress.mark_ended();
                return None;
            };
            if let Ok(unit) = &item {
                if let Err(e) = self.progress.check_delivered(unit) {
                    return Some(Err(e));
                }
                self.progress.record_delivered(unit);
                if self.progress.is_skipped(unit) {
                    continue;
                }
            }
            return Some(item);
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

/// Adds [`checkpointed`](CheckpointedExt::checkpointed) to iterators of
/// delivered units.
pub trait CheckpointedExt: Iterator + Sized {
    /// Counts what this iterator hands out into `progress`.
    fn checkpointed(self, progress: Progress) -> Checkpointed<Self> {
        Checkpointed {
            inner: self,
            progress,
        }
    }
}

impl<I: Iterator> CheckpointedExt for I {}
