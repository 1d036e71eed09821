//! Burn's `Learner` (burn-train) fed by [`ZephonDataLoader`]s, resumed
//! mid-epoch.
//!
//! - [`LossOutput`]: a loss-only step output, which Burn's `LossMetric` reads.
//! - [`StepCheckpoints`]: Burn's single-device training loop that also
//!   saves the model, the optimizer, the scheduler and the loader's
//!   [`DataPosition`] together, every few batches.
//! - [`Restored::into_learner`]: a `Learner` back from such a save.
//! - With the `harness` feature: the train and validation steps of the
//!   shipped `models::autoencoder::Autoencoder` and
//!   `models::lm::TransformerLm`, and loaders over their data.
//!
//! The feature needs burn-train alone (without its terminal UI and system
//! metrics), not the timing harness's YAML, plotting and progress-bar stack.
//!
//! # Resuming a `Learner` mid-epoch
//!
//! Foundation-model runs are often shorter than one epoch, so a checkpoint
//! taken only at an epoch's end (Burn's `.checkpoint(epoch)` with
//! `with_default_checkpointers`) is not enough: a run stopped at step 9 000
//! of an epoch must go on at step 9 001 with the same batches. Burn 0.22's
//! `Learner` saves its checkpointers at epoch ends only, so the mid-epoch
//! path goes through a training strategy of Burn's own extension point
//! (`TrainingStrategy::Custom`):
//!
//! 1. Make the train loader with [`ZephonDataLoader::resumable`]: its
//!    `build` gets the epoch's `Progress` and puts the restore step in the
//!    chain (`.resume(&mut progress)` right after `batch`), its `recipe`
//!    names the settings that shape the data. The loader counts every batch
//!    it serves, so its [`position`](ZephonDataLoader::position) is exact
//!    between two steps.
//! 2. Train with [`StepCheckpoints`] as the training strategy: after every
//!    `every`-th batch of an epoch it saves the learner's model, optimizer
//!    and scheduler state and the loader's position into one folder, in
//!    the format of [`save_training`](crate::resume::save_training) (each
//!    save replaces the last, crash-safe, checked on read). The rest of
//!    the loop is Burn's single-device one: the same learner calls, events,
//!    validation, and Burn's own epoch checkpointer if one is registered.
//! 3. To resume, possibly in another process: the loader's
//!    [`restore_training`](ZephonDataLoader::restore_training) into a fresh
//!    model and optimizer (every part checked: manifest, sizes, hashes,
//!    the run's recipe of the saved epoch), [`Restored::into_learner`] for the `Learner` and
//!    the [`DataPosition`], and [`ZephonDataLoader::resume_from`] on a
//!    loader made as in step 1. Its first `iter()` serves the epoch of the
//!    position from the next batch (`num_items` is the items left, so
//!    Burn's progress and the loader's item check stay exact); later epochs
//!    start fresh. [`StepCheckpoints`] starts at the position's epoch
//!    (Burn counts epochs from 1, the loader from 0); leave Burn's
//!    `.checkpoint(epoch)` out, which would load Burn's last epoch-end save
//!    over the restored learner.
//!
//! The resumed run then trains on the batches the uninterrupted run would
//! have, and with a deterministic backend (flex on the CPU) to the same
//! losses, bit for bit; `tests/learner.rs` checks that across processes.
//!
//! Limits: [`StepCheckpoints`] trains on one device (Burn's multi-device
//! strategies train loader slices on other threads, whose positions are
//! not merged); it does not save on an epoch's last batch (Burn's epoch
//! checkpoint covers it); with gradient accumulation it saves only where no
//! gradients are pending; Burn's metrics of the interrupted epoch cover the
//! batches each process trained.
//!
//! A hand-written loop needs none of this: it saves with
//! [`save_training`](crate::resume::save_training) from its own model,
//! optimizer and [`ZephonDataLoader::position`].
//!
//! # Example: a model of one's own
//!
//! A linear regression of one's own, with Burn's `TrainStep` and
//! `InferenceStep`, fed by a resumable loader; one run is stopped after 5
//! of its 8 batches (as a preemption would), another resumes from the
//! folder and trains the 3 left.
//!
//! ```
//! use burn::module::Module;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::AdamConfig;
//! use burn::optim::lr_scheduler::constant::ConstantLr;
//! use burn::tensor::{Device, FloatDType, Tensor};
//! use burn::train::{InferenceStep, Interrupter, Learner, SupervisedTraining, TrainOutput, TrainStep};
//! use std::sync::{Arc, Mutex};
//! use zephon_burn::convert::{f32_bytes, float_rows};
//! use zephon_burn::train::{LossOutput, StepCheckpoints};
//! use zephon_burn::ZephonDataLoader;
//! use zephon_core::checkpoint::{Progress, Recipe, ResumeExt};
//! use zephon_core::{Dataset, PipelineExt, Record, RecordBatch, Runner, WorkSource};
//!
//! #[derive(Module, Debug)]
//! struct Regression {
//!     linear: Linear,
//! }
//!
//! impl Regression {
//!     fn loss(&self, xy: Tensor<2>) -> Tensor<1> {
//!         let x = xy.clone().narrow(1, 0, 3);
//!         let y = xy.narrow(1, 3, 1);
//!         (self.linear.forward(x) - y).powf_scalar(2.0).mean()
//!     }
//! }
//!
//! impl TrainStep for Regression {
//!     type Input = Tensor<2>;
//!     type Output = LossOutput;
//!     fn step(&self, xy: Tensor<2>) -> TrainOutput<LossOutput> {
//!         let loss = self.loss(xy);
//!         TrainOutput::new(self, loss.backward(), LossOutput { loss })
//!     }
//! }
//!
//! impl InferenceStep for Regression {
//!     type Input = Tensor<2>;
//!     type Output = LossOutput;
//!     fn step(&self, xy: Tensor<2>) -> LossOutput {
//!         LossOutput { loss: self.loss(xy) }
//!     }
//! }
//!
//! // 32 samples (x, y = x0 + 2 x1 - x2), 2 lanes, batches of 4: 8 per epoch.
//! let recs: Vec<Record> = (0..32).map(|i| {
//!     let x = [i as f32 / 32.0, (i % 5) as f32 / 5.0, (i % 3) as f32 / 3.0];
//!     Record::new().with("xy", f32_bytes(&[x[0], x[1], x[2], x[0] + 2.0 * x[1] - x[2]]))
//! }).collect();
//! let ws = WorkSource::builder().dataset(Dataset::in_memory("points", vec![recs])?, 1.0)
//!     .seed(7).shuffle_within_shard(true).canonical_lanes(2).build()?;
//! let served = Arc::new(Mutex::new(0usize));
//! let interrupter = Interrupter::new();
//! let loader = |stop_at: Option<usize>| {
//!     let (served, interrupter) = (served.clone(), interrupter.clone());
//!     ZephonDataLoader::resumable(
//!         ws.clone(),
//!         Device::flex(),
//!         |ws: &WorkSource| Recipe::new(ws).setting("batch", 4),
//!         |ws: WorkSource, p: &mut Progress| {
//!             ws.stream().fetch(2).batch(4).resume(p).into_blocking_iter(Runner::Inline)
//!         },
//!         move |b: RecordBatch, device: &Device| {
//!             let mut n = served.lock().unwrap();
//!             *n += 1;
//!             if Some(*n) == stop_at {
//!                 interrupter.stop(Some("preempted")); // after this batch's step
//!             }
//!             float_rows(&b.items, "xy", 4, device, FloatDType::F32)
//!         },
//!     )
//! };
//! let valid = || ZephonDataLoader::new(
//!     ws.clone(), Device::flex(),
//!     |ws: WorkSource| {
//!         let lanes = ws.owned_lanes();
//!         ws.stream().fetch(2).batch(8).lane_mux(lanes).into_blocking_iter(Runner::Inline)
//!     },
//!     |b: RecordBatch, device: &Device| float_rows(&b.items, "xy", 4, device, FloatDType::F32),
//! );
//! let device = Device::flex();
//! let fresh = || Regression { linear: LinearConfig::new(3, 1).init(&device.clone().autodiff()) };
//! let dir = tempfile::tempdir().unwrap();
//! let ckpt = dir.path().join("steps");
//!
//! // First run: saves after batches 2 and 4, stopped after batch 5.
//! let train = loader(Some(5))?;
//! let strategy = StepCheckpoints::new(device.clone(), &ckpt, 2, train.position_handle());
//! let result = SupervisedTraining::new(dir.path(), Arc::new(train), Arc::new(valid()?))
//!     .with_training_strategy(strategy.into_strategy())
//!     .with_interrupter(interrupter.clone())
//!     .with_application_logger(None)
//!     .launch(Learner::new(fresh(), AdamConfig::new().init(), ConstantLr::new(1e-2)));
//! assert!(result.interrupted.is_some() && result.error.is_none());
//! assert_eq!(*served.lock().unwrap(), 5);
//!
//! // Second run (another process would do the same): back to batch 4.
//! interrupter.reset();
//! *served.lock().unwrap() = 0;
//! let train = loader(None)?;
//! // `restore_training` checked against the loader's recipe of the saved epoch.
//! let restored = train.restore_training(&ckpt, fresh(), AdamConfig::new().init())?;
//! assert_eq!((restored.epoch, restored.step), (0, 2)); // 2 batches of each lane
//! let (learner, position) = restored.into_learner(ConstantLr::new(1e-2));
//! let train = train.resume_from(position)?;
//! let strategy = StepCheckpoints::new(device.clone(), &ckpt, 2, train.position_handle());
//! let result = SupervisedTraining::new(dir.path(), Arc::new(train), Arc::new(valid()?))
//!     .with_training_strategy(strategy.into_strategy())
//!     .with_application_logger(None)
//!     .launch(learner);
//! assert!(result.error.is_none() && result.interrupted.is_none());
//! assert_eq!(*served.lock().unwrap(), 4, "batches 5 to 8 of the epoch");
//! # Ok::<(), zephon_burn::Error>(())
//! ```

mod steps;

pub use steps::StepCheckpoints;

#[cfg(doc)]
use crate::{DataPosition, ZephonDataLoader, resume::Restored};
use burn::tensor::Tensor;
use burn::train::metric::{Adaptor, ItemLazy, LossInput};

/// What a train or validation step reports when its loss is all it
/// reports (the shipped models' steps, or one's own): Burn's `LossMetric`
/// reads it.
#[derive(Debug)]
pub struct LossOutput {
    /// The scalar loss (shape `[1]`).
    pub loss: Tensor<1>,
}

impl Adaptor<LossInput> for LossOutput {
    fn adapt(&self) -> LossInput {
        LossInput::new(self.loss.clone())
    }
}

impl ItemLazy for LossOutput {
    fn sync(self) -> std::result::Result<Self, burn::tensor::ExecutionError> {
        // The metrics read the loss on its device; only the tape is dropped,
        // so the metric thread neither keeps the graph alive nor waits on it.
        self.loss.device().flush()?;
        Ok(LossOutput {
            loss: self.loss.without_autodiff(),
        })
    }
}

#[cfg(feature = "harness")]
mod shipped {
    use super::LossOutput;
    use crate::error::Result;
    use crate::harness::TimedModel;
    use crate::models::autoencoder::{Autoencoder, DummyData};
    use crate::models::lm::{LmInput, TextData, TransformerLm};
    use crate::{ItemCount, ZephonDataLoader};
    use burn::tensor::{Device, FloatDType, Tensor};
    use burn::train::{InferenceStep, TrainOutput, TrainStep};
    use zephon_core::RecordBatch;
    use zephon_ops::TrainingBatch;

    /// Forward to the loss and backward, as every shipped model trains.
    fn train_step<M: TimedModel>(model: &M, input: M::Input) -> TrainOutput<LossOutput> {
        let loss = model.loss(input);
        TrainOutput::new(model, loss.backward(), LossOutput { loss })
    }

    macro_rules! learner_steps {
        ($model:ty, $input:ty) => {
            impl TrainStep for $model {
                type Input = $input;
                type Output = LossOutput;
                fn step(&self, input: $input) -> TrainOutput<LossOutput> {
                    train_step(self, input)
                }
            }

            impl InferenceStep for $model {
                type Input = $input;
                type Output = LossOutput;
                fn step(&self, input: $input) -> LossOutput {
                    LossOutput {
                        loss: self.loss(input),
                    }
                }
            }
        };
    }

    learner_steps!(Autoencoder, Tensor<2>);
    learner_steps!(TransformerLm, LmInput);

    impl DummyData {
        /// A loader over this data's epochs for Burn's `Learner`: the work
        /// source of [`work_source`](Self::work_source) (seeded by `seed`) with
        /// `canonical_lanes` lanes, batches of `batch_size` per lane, as f32
        /// tensors on `device`. A multi-device strategy splits the lanes, so
        /// use a lane count the device count divides.
        pub fn loader(
            &self,
            canonical_lanes: u32,
            device: &Device,
        ) -> Result<ZephonDataLoader<RecordBatch, Tensor<2>>> {
            self.validate()?;
            let data = self.clone();
            ZephonDataLoader::new(
                self.work_source(self.seed, canonical_lanes)?,
                device.clone(),
                move |ws| data.pipeline_on(ws),
                |batch, device: &Device| Autoencoder::to_input(batch, device, FloatDType::F32),
            )
        }
    }

    impl TextData {
        /// A loader over this data's epochs of packed rows for Burn's
        /// `Learner`: the work source of [`work_source`](Self::work_source)
        /// with `canonical_lanes` lanes on one rank, the rows of
        /// [`pipeline_on`](Self::pipeline_on) as f32 [`LmInput`]s on `device`.
        /// Packing decides the rows of an epoch, so the loader counts them
        /// ([`ItemCount::Counted`]): one extra pass over the text pipeline per
        /// epoch, without the model. A multi-device strategy splits the lanes,
        /// so use a lane count the device count divides.
        pub fn loader(
            &self,
            canonical_lanes: u32,
            device: &Device,
        ) -> Result<ZephonDataLoader<TrainingBatch, LmInput>> {
            self.validate()?;
            let data = self.clone();
            Ok(ZephonDataLoader::new(
                self.work_source(canonical_lanes, 0, 1)?,
                device.clone(),
                move |ws| data.pipeline_on(ws),
                |batch, device: &Device| TransformerLm::to_input(batch, device, FloatDType::F32),
            )?
            .items(ItemCount::Counted))
        }
    }
}
