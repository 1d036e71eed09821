//! Mid-epoch resume of a loader: the data position it has served to, and
//! the restore of a checkpointed position into the first epoch it serves.

use super::{HostBatch, ZephonDataLoader};
use crate::error::{Error, Result};
use burn::tensor::Device;
use std::sync::{Arc, Mutex, PoisonError};
use zephon_core::checkpoint::{Checkpoint, Delivered, Progress, Recipe};
use zephon_core::{BlockingIter, WorkSource};

/// Where a [`ZephonDataLoader`] stands in its data: the epoch (from 0) and
/// the checkpoint of what that epoch has served, lane by lane.
///
/// [`ZephonDataLoader::position`] gives it after every served batch;
/// [`ZephonDataLoader::resume_from`] continues from it, in this process or
/// another. Save it together with the model at the same step
/// ([`save_training`](crate::resume::save_training) for a hand-written loop,
/// `StepCheckpoints` of the `train` feature for Burn's `Learner`).
#[derive(Clone, Debug, PartialEq)]
pub struct DataPosition {
    /// The epoch the checkpoint is of.
    pub epoch: u64,
    /// What the epoch has served: per lane, batches and items, and the
    /// lane cuts a restore puts back.
    pub checkpoint: Checkpoint,
}

impl DataPosition {
    /// The position `checkpoint` describes in epoch `epoch`.
    pub fn new(epoch: u64, checkpoint: Checkpoint) -> Self {
        DataPosition { epoch, checkpoint }
    }

    /// Steps of the epoch served: the lane-batches of its furthest lane (a
    /// step is one batch of every lane).
    pub fn step(&self) -> u64 {
        self.checkpoint
            .lanes
            .values()
            .map(|p| p.batches)
            .max()
            .unwrap_or(0)
    }

    /// Items of the epoch served, over the lanes of `work` (all lanes when
    /// `None`).
    pub(super) fn served_items(&self, work: Option<&WorkSource>) -> u64 {
        let lanes = work.map(WorkSource::owned_lanes);
        self.checkpoint
            .lanes
            .iter()
            .filter(|(l, _)| lanes.as_ref().is_none_or(|o| o.contains(l)))
            .fold(0u64, |n, (_, p)| n.saturating_add(p.items))
    }
}

type RecipeOf = Arc<dyn Fn(&WorkSource) -> Recipe + Send + Sync>;
type ResumableBuild<H> =
    Arc<dyn Fn(WorkSource, &mut Progress) -> zephon_core::Result<BlockingIter<H>> + Send + Sync>;

/// What a resumable loader builds its pipelines with.
pub(super) struct Resumable<H> {
    pub(super) recipe: RecipeOf,
    pub(super) build: ResumableBuild<H>,
    /// Checks that a served batch continues its lane and counts it.
    pub(super) track: fn(&mut Progress, &H) -> zephon_core::Result<()>,
}

impl<H> Clone for Resumable<H> {
    fn clone(&self) -> Self {
        Resumable {
            recipe: self.recipe.clone(),
            build: self.build.clone(),
            track: self.track,
        }
    }
}

fn track<H: Delivered>(progress: &mut Progress, batch: &H) -> zephon_core::Result<()> {
    progress.check_delivered(batch)?;
    progress.record_delivered(batch);
    Ok(())
}

/// The position a loader's iterators keep up to date, shared by the
/// loader's clones (Burn moves a loader to its device by cloning it).
pub(super) type Slot = Arc<Mutex<Option<(u64, Progress)>>>;

impl<H> Resumable<H> {
    /// The progress epoch `epoch` of `ws` starts from: `restore`'s, when it
    /// is of this epoch, else a fresh one.
    pub(super) fn progress(
        &self,
        ws: &WorkSource,
        epoch: u64,
        restore: Option<&DataPosition>,
    ) -> Result<Progress> {
        let recipe = (self.recipe)(ws);
        match restore {
            Some(r) if r.epoch == epoch => recipe.resume(ws, &r.checkpoint).map_err(|e| {
                Error::DataLoader(format!(
                    "resuming epoch {epoch} over lanes {:?}: {e}",
                    ws.owned_lanes()
                ))
            }),
            _ => Ok(recipe.start(ws)),
        }
    }
}

impl<H: HostBatch + Delivered + 'static, O: 'static> ZephonDataLoader<H, O> {
    /// A loader whose position can be saved and resumed mid-epoch: as
    /// [`new`](Self::new), but `build` also gets the epoch's [`Progress`]
    /// (fresh, or restored by [`resume_from`](Self::resume_from)) and must
    /// put the restore step in the chain (`.resume(&mut progress)` right
    /// after `batch`), and `recipe` names the run's data-shaping settings
    /// (`Recipe::new(ws)` and its `setting`s), so a checkpoint of another
    /// run is refused.
    ///
    /// The loader counts every batch it serves into the epoch's progress:
    /// [`position`](Self::position) is exact after each one, whatever the
    /// pipeline still holds in its queues. A pipeline built without its
    /// restore step serves, on resume, an error instead of a silent restart
    /// (its lanes start again at batch 0).
    ///
    /// ```
    /// use burn::data::dataloader::DataLoader;
    /// use burn::tensor::Device;
    /// use zephon_burn::ZephonDataLoader;
    /// use zephon_core::checkpoint::{Progress, Recipe, ResumeExt};
    /// use zephon_core::{Dataset, PipelineExt, Record, RecordBatch, Runner, WorkSource};
    ///
    /// let recs: Vec<Record> = (0..24).map(|i| Record::new().with("id", i)).collect();
    /// let ws = WorkSource::builder().dataset(Dataset::in_memory("d", vec![recs])?, 1.0)
    ///     .seed(4).shuffle_within_shard(true).canonical_lanes(2).build()?;
    /// let ids = |b: RecordBatch, _: &Device| -> zephon_burn::Result<Vec<i64>> {
    ///     Ok(b.items.iter().map(|r| r.get("id").and_then(|v| v.as_int()).unwrap()).collect())
    /// };
    /// let loader = || ZephonDataLoader::resumable(
    ///     ws.clone(),
    ///     Device::flex(),
    ///     |ws: &WorkSource| Recipe::new(ws).setting("batch", 3),
    ///     |ws: WorkSource, p: &mut Progress| {
    ///         ws.stream().fetch(2).batch(3).resume(p).into_blocking_iter(Runner::Inline)
    ///     },
    ///     ids,
    /// );
    /// let full = loader()?;
    /// let all: Vec<Vec<i64>> = full.iter().map(Result::unwrap).collect();
    ///
    /// // Stop after 3 batches of epoch 0 and keep the position...
    /// let first = loader()?;
    /// let head: Vec<Vec<i64>> = first.iter().take(3).map(Result::unwrap).collect();
    /// let position = first.position().unwrap();
    /// assert_eq!((position.epoch, position.step()), (0, 2));
    ///
    /// // ...then another loader goes on from the 4th batch; its first
    /// // epoch holds the 15 items left, the next one is whole again.
    /// let resumed = loader()?.resume_from(position)?;
    /// assert_eq!(resumed.num_items(), 15);
    /// let rest: Vec<Vec<i64>> = resumed.iter().map(Result::unwrap).collect();
    /// assert_eq!([head, rest].concat(), all);
    /// assert_eq!(resumed.num_items(), 24);
    /// assert_eq!(resumed.iter().count(), 8);
    /// # Ok::<(), zephon_burn::Error>(())
    /// ```
    pub fn resumable(
        source: WorkSource,
        device: Device,
        recipe: impl Fn(&WorkSource) -> Recipe + Send + Sync + 'static,
        build: impl Fn(WorkSource, &mut Progress) -> zephon_core::Result<BlockingIter<H>>
        + Send
        + Sync
        + 'static,
        convert: impl Fn(H, &Device) -> Result<O> + Send + Sync + 'static,
    ) -> Result<Self> {
        let resumable = Resumable {
            recipe: Arc::new(recipe),
            build: Arc::new(build),
            track: track::<H>,
        };
        let plain = resumable.clone();
        // The plain build (item counting) runs the epoch from its start.
        let mut loader = ZephonDataLoader::new(
            source,
            device,
            move |ws| {
                let mut p = (plain.recipe)(&ws).start(&ws);
                (plain.build)(ws, &mut p)
            },
            convert,
        )?;
        loader.resumable = Some(resumable);
        Ok(loader)
    }
}

impl<H: HostBatch + 'static, O: 'static> ZephonDataLoader<H, O> {
    /// Continues from `position` (saved from [`position`](Self::position),
    /// by this process or another): the next `iter()` serves epoch
    /// `position.epoch` from the batch after the last one served, and later
    /// epochs start fresh. That first epoch's
    /// [`num_items`](burn::data::dataloader::DataLoader::num_items) is the
    /// items left in it, so Burn's progress and the item check stay exact.
    ///
    /// Refused with an error saying why when the loader was not made with
    /// [`resumable`](Self::resumable), or the checkpoint is of another run
    /// (seed, lanes, datasets or recipe settings differ) or misses lanes
    /// of this loader. A pipeline whose stages differ from the
    /// checkpointed run's is refused on the first batch, naming the first
    /// stage that differs.
    pub fn resume_from(mut self, position: DataPosition) -> Result<Self> {
        let Some(r) = &self.resumable else {
            return Err(Error::DataLoader(
                "this loader cannot resume mid-epoch: it was made with `ZephonDataLoader::new`, whose pipeline has no restore step; make it with `ZephonDataLoader::resumable`".into(),
            ));
        };
        let ws = self.source.epoch(position.epoch)?;
        let progress = r.progress(&ws, position.epoch, Some(&position))?;
        *self.position.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((position.epoch, progress));
        self.next_epoch = position.epoch.into();
        self.restore = Some(Arc::new(position));
        *self
            .counted
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = None;
        Ok(self)
    }

    /// The data position after the last batch served (by this loader or a
    /// clone of it, such as the one Burn moves to its device), or the one
    /// given to [`resume_from`](Self::resume_from) before any: `None`
    /// before the first batch, and for a loader not made with
    /// [`resumable`](Self::resumable). Taken between two steps, it is the
    /// data half of a checkpoint whose other half is the model after those
    /// steps.
    ///
    /// A slice (one device of Burn's multi-device split) keeps its own
    /// position, which the loader it was cut from does not report.
    pub fn position(&self) -> Option<DataPosition> {
        let slot = self.position.lock().unwrap_or_else(PoisonError::into_inner);
        slot.as_ref()
            .map(|(epoch, p)| DataPosition::new(*epoch, p.checkpoint()))
    }

    /// The recipe of epoch `epoch` of the loader's run (of its work
    /// source's epoch: the run length a checkpoint records is the epoch's
    /// end), or `None` for a loader not made with
    /// [`resumable`](Self::resumable).
    pub fn recipe(&self, epoch: u64) -> Result<Option<Recipe>> {
        match &self.resumable {
            Some(r) => Ok(Some((r.recipe)(&self.source.epoch(epoch)?))),
            None => Ok(None),
        }
    }

    /// [`restore_training`](crate::resume::restore_training) of the folder
    /// `dir` against this loader's recipe of the epoch its manifest names:
    /// the model and optimizer back, and the data checkpoint checked
    /// against this run. Refused for a loader not made with
    /// [`resumable`](Self::resumable).
    pub fn restore_training<M: burn::module::Module>(
        &self,
        dir: impl AsRef<std::path::Path>,
        model: M,
        optimizer: burn::optim::ModuleOptimizer,
    ) -> Result<crate::resume::Restored<M>> {
        let dir = dir.as_ref();
        let epoch = crate::resume::read_manifest(dir)?.epoch;
        let recipe = self.recipe(epoch)?.ok_or_else(|| {
            Error::DataLoader(
                "this loader cannot resume mid-epoch: make it with `ZephonDataLoader::resumable`"
                    .into(),
            )
        })?;
        crate::resume::restore_training(dir, model, optimizer, &recipe)
    }

    /// A handle on [`position`](Self::position) that stays valid after the
    /// loader is handed to Burn (`Arc<dyn DataLoader>`).
    pub fn position_handle(&self) -> PositionHandle {
        PositionHandle(self.position.clone())
    }
}

/// Reads a loader's [`position`](ZephonDataLoader::position) from
/// anywhere, once the loader itself is out of reach (inside Burn's
/// `SupervisedTraining`). Made by [`ZephonDataLoader::position_handle`].
#[derive(Clone)]
pub struct PositionHandle(pub(super) Slot);

impl PositionHandle {
    /// The loader's data position, as [`ZephonDataLoader::position`].
    pub fn get(&self) -> Option<DataPosition> {
        let slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        slot.as_ref()
            .map(|(epoch, p)| DataPosition::new(*epoch, p.checkpoint()))
    }
}

impl std::fmt::Debug for PositionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("PositionHandle")
            .field("epoch", &slot.as_ref().map(|(e, _)| *e))
            .field("steps", &slot.as_ref().map(|(_, p)| p.steps()))
            .finish()
    }
}
