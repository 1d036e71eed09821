//! Burn's `Learner` (burn-train) on the shipped models, fed by
//! [`ZephonDataLoader`]s: the train and validation steps of
//! [`Autoencoder`] and [`TransformerLm`], a loss-only step output, and the
//! autoencoder's loader over its dummy data.
//!
//! The model lives on `device.autodiff()` (the `Learner` trains it there);
//! the loaders may stay on the plain device: a batch made on the plain
//! device is used by the autodiff one as is.
//!
//! ```
//! use burn::optim::AdamConfig;
//! use burn::optim::lr_scheduler::constant::ConstantLr;
//! use burn::tensor::Device;
//! use burn::train::{Learner, SupervisedTraining};
//! use burn::train::metric::LossMetric;
//! use std::sync::Arc;
//! use zephon_burn::models::autoencoder::{Autoencoder, AutoencoderConfig, DummyData};
//!
//! let device = Device::flex();
//! let data = DummyData { num_samples: 32, batch_size: 8, input_dim: 16, seed: 1, workers: 1 };
//! let train = data.loader(4, &device)?;
//! let valid = DummyData { seed: 2, ..data.clone() }.loader(1, &device)?;
//! let config = AutoencoderConfig { input_dim: 16, hidden_dim: 8, latent_dim: 4 };
//! let model = Autoencoder::new(&config, &device.autodiff());
//! let learner = Learner::new(model, AdamConfig::new().init(), ConstantLr::new(1e-3));
//! let dir = tempfile::tempdir().unwrap();
//! let result = SupervisedTraining::new(dir.path(), Arc::new(train), Arc::new(valid))
//!     .num_epochs(2)
//!     .metric_train_numeric(LossMetric::new())
//!     .with_application_logger(None)
//!     .launch(learner);
//! assert!(result.error.is_none());
//! # Ok::<(), zephon_burn::Error>(())
//! ```

use crate::error::Result;
use crate::harness::TimedModel;
use crate::models::autoencoder::{Autoencoder, DummyData};
use crate::models::lm::{LmInput, TextData, TransformerLm};
use crate::{ItemCount, ZephonDataLoader};
use burn::tensor::{Device, FloatDType, Tensor};
use burn::train::metric::{Adaptor, ItemLazy, LossInput};
use burn::train::{InferenceStep, TrainOutput, TrainStep};
use zephon_core::RecordBatch;
use zephon_ops::TrainingBatch;

/// What a train or validation step of a shipped model reports: its loss,
/// which Burn's `LossMetric` reads.
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
