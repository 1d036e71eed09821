//! [`StepCheckpoints`]: Burn's single-device training loop that also saves
//! a training checkpoint mid-epoch, with the loader's data position.

use crate::dataloader::{DataPosition, PositionHandle};
use crate::resume::{Parts, Restored, save_parts};
use burn::module::Module;
use burn::optim::GradientsAccumulator;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::store::ModuleRecord;
use burn::tensor::Device;
use burn::train::checkpoint::{
    AsyncCheckpointer, Checkpoint as BurnRecord, Checkpointer, CheckpointerError,
    CheckpointingAction, CheckpointingStrategy,
};
use burn::train::metric::store::EventStoreClient;
use burn::train::{
    EventProcessorTraining, InferenceStep, Learner, LearnerEvent, LearnerModel,
    LearningCheckpointer, SupervisedLearningStrategy, SupervisedTrainingEventProcessor,
    TrainLoader, TrainingComponents, TrainingError, TrainingItem, TrainingStrategy, ValidLoader,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};

/// Burn's single-device training strategy, step for step (the same calls
/// on the learner, the same events, validation, Burn's own epoch
/// checkpointer and early stopping at each epoch's end), that also saves a
/// training checkpoint into a folder after every `every`-th batch of an
/// epoch: the model, the optimizer state, the learning-rate scheduler's
/// state and the train loader's [`DataPosition`] at the same step, in the
/// format of [`save_training`](crate::resume::save_training) (each save
/// replaces the previous one, crash-safe).
///
/// Pass it to `SupervisedTraining::with_training_strategy` (see
/// [`into_strategy`](Self::into_strategy)); resume with
/// [`ZephonDataLoader::restore_training`](crate::ZephonDataLoader::restore_training),
/// [`Restored::into_learner`] and
/// [`ZephonDataLoader::resume_from`](crate::ZephonDataLoader::resume_from)
/// (the [module](super) doc shows the whole pattern).
///
/// Limits:
/// - One device. Burn's multi-device and DDP strategies split the loader
///   into slices trained on other threads; their positions are not merged
///   into one checkpoint, so this strategy trains on one device only.
/// - No save on an epoch's last batch: the position would name an epoch
///   with nothing left. The epoch's end is checkpointed by Burn's own
///   checkpointers (`with_default_checkpointers`, resumed with
///   `.checkpoint(epoch)` and
///   [`starting_at_epoch`](crate::ZephonDataLoader::starting_at_epoch)).
/// - With gradient accumulation, a save falls only where no gradients are
///   pending (after an optimizer step).
/// - The metrics Burn logs for the interrupted epoch start again at the
///   resumed batch: an epoch's means cover the batches its process trained.
/// - The epoch numbers: when the train loader was resumed with
///   [`resume_from`](crate::ZephonDataLoader::resume_from), training starts
///   at Burn's epoch `position.epoch + 1` (Burn counts from 1), whatever
///   `SupervisedTraining::checkpoint` says. Leave `.checkpoint(epoch)` out
///   of a mid-epoch resume: with Burn's checkpointers registered it loads
///   Burn's last epoch-end save over the restored learner. (Burn's start
///   event, sent before the strategy runs, still names its own starting
///   epoch.)
pub struct StepCheckpoints {
    device: Device,
    dir: PathBuf,
    every: u64,
    position: PositionHandle,
}

impl std::fmt::Debug for StepCheckpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepCheckpoints")
            .field("device", &self.device)
            .field("dir", &self.dir)
            .field("every", &self.every)
            .field("position", &self.position)
            .finish()
    }
}

impl StepCheckpoints {
    /// Trains on `device` and saves into `dir` after every `every`-th batch
    /// (at least 1) of each epoch, with the data position `position`
    /// reports ([`ZephonDataLoader::position_handle`](crate::ZephonDataLoader::position_handle)
    /// of the train loader, which must be made with
    /// [`resumable`](crate::ZephonDataLoader::resumable)).
    pub fn new(
        device: Device,
        dir: impl AsRef<Path>,
        every: u64,
        position: PositionHandle,
    ) -> Self {
        StepCheckpoints {
            device,
            dir: dir.as_ref().to_path_buf(),
            every: every.max(1),
            position,
        }
    }

    /// This strategy as Burn's `SupervisedTraining::with_training_strategy`
    /// takes it.
    pub fn into_strategy<M: LearnerModel>(self) -> TrainingStrategy<M> {
        TrainingStrategy::Custom(Arc::new(self))
    }

    /// Saves `learner` with `position` into the folder.
    fn save<M: LearnerModel>(
        &self,
        capture: &mut Capture<M>,
        learner: &Learner<M>,
        position: &DataPosition,
        store: &EventStoreClient,
    ) -> Result<(), String> {
        capture.checkpointer.checkpoint(learner, 0, store);
        let gone = |what: &str| format!("the {what} record did not arrive");
        let model = capture.model.recv().map_err(|_| gone("model"))?;
        let optim = capture.optim.recv().map_err(|_| gone("optimizer"))?;
        let sched = capture.sched.recv().map_err(|_| gone("scheduler"))?;
        let bytes = |b: Result<burn::tensor::Bytes, burn::store::RecordError>| {
            b.map_err(|e| format!("cannot encode a record: {e}"))
        };
        let (model, optim, sched) = (
            bytes(model.into_bytes())?,
            bytes(optim.into_bytes())?,
            bytes(sched.into_bytes())?,
        );
        save_parts(
            &self.dir,
            Parts {
                epoch: position.epoch,
                step: position.step(),
                model: &model,
                optimizer: &optim,
                scheduler: Some(&sched),
                data: &position.checkpoint,
            },
        )
        .map_err(|e| e.to_string())
    }
}

/// A checkpointer that hands the record it is given back to the strategy.
struct Hand<R>(mpsc::Sender<R>);

impl<R: BurnRecord> Checkpointer<R> for Hand<R> {
    fn save(&self, _: usize, record: R) -> Result<(), CheckpointerError> {
        self.0
            .send(record)
            .map_err(|e| CheckpointerError::Unknown(e.to_string()))
    }
    fn delete(&self, _: usize) -> Result<(), CheckpointerError> {
        Ok(())
    }
    fn restore(&self, _: usize) -> Result<R, CheckpointerError> {
        Err(CheckpointerError::Unknown(
            "records are handed over, not kept".into(),
        ))
    }
}

/// Saves on every call.
struct Always;

impl CheckpointingStrategy for Always {
    fn checkpointing(&mut self, _: usize, _: &EventStoreClient) -> Vec<CheckpointingAction> {
        vec![CheckpointingAction::Save]
    }
}

/// Burn's learning checkpointer over [`Hand`]s: the only public way to the
/// learner's optimizer and scheduler state.
struct Capture<M: LearnerModel> {
    checkpointer: LearningCheckpointer<M>,
    model: mpsc::Receiver<ModuleRecord>,
    optim: mpsc::Receiver<burn::optim::OptimizerRecord>,
    sched: mpsc::Receiver<burn::optim::lr_scheduler::LrSchedulerRecord>,
}

impl<M: LearnerModel> Capture<M> {
    fn new() -> Self {
        let (m, model) = mpsc::channel();
        let (o, optim) = mpsc::channel();
        let (s, sched) = mpsc::channel();
        Capture {
            checkpointer: LearningCheckpointer::new(
                AsyncCheckpointer::new(Hand(m)),
                AsyncCheckpointer::new(Hand(o)),
                AsyncCheckpointer::new(Hand(s)),
                Box::new(Always),
            ),
            model,
            optim,
            sched,
        }
    }
}

fn fail(interrupter: &burn::train::Interrupter, why: String) {
    interrupter.fail(TrainingError::Checkpoint(CheckpointerError::Unknown(why)));
}

impl<M: LearnerModel> SupervisedLearningStrategy<M> for StepCheckpoints {
    fn fit(
        &self,
        components: TrainingComponents<M>,
        mut learner: Learner<M>,
        dataloader_train: TrainLoader<M>,
        dataloader_valid: ValidLoader<M>,
        starting_epoch: usize,
    ) -> (M, SupervisedTrainingEventProcessor<M>) {
        let device = if self.device.is_autodiff() {
            self.device.clone()
        } else {
            self.device.clone().autodiff()
        };
        let train = dataloader_train.to_device(&device);
        let valid = dataloader_valid.to_device(&device.clone().inner());
        learner.fork(&device);
        let mut processor = components.event_processor;
        let mut checkpointer = components.checkpointer;
        let mut early_stopping = components.early_stopping;
        let interrupter = components.interrupter;
        let store = components.event_store;
        let mut capture = Capture::<M>::new();
        // A loader resumed mid-epoch names its epoch (from 0; Burn counts
        // from 1), so no `.checkpoint(epoch)` is needed, which would make
        // Burn load its own epoch save over the restored learner.
        let starting_epoch = match self.position.get() {
            Some(p) => usize::try_from(p.epoch).map_or(usize::MAX, |e| e.saturating_add(1)),
            None => starting_epoch,
        };

        for epoch in starting_epoch..=components.num_epochs {
            // Asked every epoch: a resumed epoch holds fewer items.
            interrupter.fail_on_error(processor.process_train(LearnerEvent::StartSplit {
                epoch_number: epoch,
                total_items: train.num_items(),
            }));
            let mut iterator = train.iter();
            let mut iteration = 0;
            let mut accumulator = GradientsAccumulator::new();
            let mut pending = 0;
            while let Some(item) = iterator.next() {
                let item = match item {
                    Ok(item) => item,
                    Err(err) => {
                        interrupter.fail(err);
                        break;
                    }
                };
                iteration += 1;
                let progress = iterator.progress();
                let item = learner.train_step(item);
                match components.grad_accumulation {
                    Some(n) => {
                        accumulator.accumulate(&learner.model(), item.grads);
                        pending += 1;
                        if n <= pending || progress.is_completed() {
                            learner.lr_step();
                            learner.optimizer_step(accumulator.grads());
                            pending = 0;
                        }
                    }
                    None => {
                        learner.lr_step();
                        learner.optimizer_step(item.grads);
                    }
                }
                let event = TrainingItem::new(
                    item.item,
                    progress.clone(),
                    Some(iteration),
                    Some(learner.lr_current()),
                );
                interrupter
                    .fail_on_error(processor.process_train(LearnerEvent::ProcessedItem(event)));

                if pending == 0
                    && !progress.is_completed()
                    && let Some(position) = self.position.get()
                {
                    let batches: u64 = position.checkpoint.lanes.values().map(|p| p.batches).sum();
                    if batches.is_multiple_of(self.every)
                        && let Err(why) = self.save(&mut capture, &learner, &position, &store)
                    {
                        fail(
                            &interrupter,
                            format!(
                                "saving the step checkpoint into {}: {why}",
                                self.dir.display()
                            ),
                        );
                    }
                }
                if interrupter.should_stop() {
                    break;
                }
            }
            interrupter.fail_on_error(processor.process_train(LearnerEvent::EndSplit(epoch)));
            if interrupter.should_stop() {
                break;
            }

            interrupter.fail_on_error(processor.process_valid(LearnerEvent::StartSplit {
                epoch_number: epoch,
                total_items: valid.num_items(),
            }));
            let model = learner.model().valid();
            let mut iterator = valid.iter();
            let mut iteration = 0;
            while let Some(item) = iterator.next() {
                let item = match item {
                    Ok(item) => item,
                    Err(err) => {
                        interrupter.fail(err);
                        break;
                    }
                };
                let progress = iterator.progress();
                iteration += 1;
                let item = InferenceStep::step(&model, item);
                let item = TrainingItem::new(item, progress, Some(iteration), None);
                interrupter
                    .fail_on_error(processor.process_valid(LearnerEvent::ProcessedItem(item)));
                if interrupter.should_stop() {
                    break;
                }
            }
            interrupter.fail_on_error(processor.process_valid(LearnerEvent::EndSplit(epoch)));
            interrupter.fail_on_error(processor.process_train(LearnerEvent::EndEpoch(epoch)));
            if checkpointer.is_some() || early_stopping.is_some() {
                interrupter.fail_on_error(processor.flush());
            }
            if interrupter.should_stop() {
                break;
            }
            if let Some(checkpointer) = &mut checkpointer {
                checkpointer.checkpoint(&learner, epoch, &store);
            }
            if let Some(early_stopping) = &mut early_stopping
                && early_stopping.should_stop(epoch, &store)
            {
                break;
            }
        }
        (learner.model(), processor)
    }
}

impl<M: Module> Restored<M> {
    /// A Burn `Learner` on the restored model and optimizer, with
    /// `scheduler` given the saved scheduler state (where the save holds
    /// one), and the data position to give the train loader's
    /// [`resume_from`](crate::ZephonDataLoader::resume_from).
    pub fn into_learner(self, scheduler: impl Into<ModuleLrScheduler>) -> (Learner<M>, DataPosition)
    where
        M: LearnerModel,
    {
        let mut learner = Learner::new(self.model, self.optimizer, scheduler);
        if let Some(record) = self.scheduler {
            learner.load_scheduler(record);
        }
        (learner, DataPosition::new(self.epoch, self.data))
    }
}
