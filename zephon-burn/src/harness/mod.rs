//! The model-step timing harness: where does the time of a training step go?
//!
//! For every batch it measures `data` (waiting for the batch and moving it to
//! the device), `forward`, `backward` and `other` (optimizer step, loss-scaler
//! update, bookkeeping until the next batch is asked for), with a
//! `Device::sync` before each timestamp so asynchronous backends are charged
//! to the phase that queued the work. The first `warmup_batches` are recorded
//! but kept out of the summary.
//!
//! With a Zephon pipeline as the source, the harness also turns on the
//! pipeline's per-operator tracking ([`HarnessConfig::tracking`]), so the
//! data time can be charged to the operator that spends it
//! ([`PipelineBreakdown`], in [`TimingRun::pipeline`]).
//!
//! ```
//! use burn::optim::AdamConfig;
//! use zephon_burn::harness::{self, HarnessConfig};
//! use zephon_burn::models::autoencoder::{Autoencoder, AutoencoderConfig, DummyData};
//! use zephon_burn::DeviceChoice;
//!
//! let (device, _) = DeviceChoice::Cpu.resolve()?;
//! let model_cfg = AutoencoderConfig { input_dim: 8, hidden_dim: 4, latent_dim: 2 };
//! let model = Autoencoder::new(&model_cfg, &device);
//! let mut data = DummyData { num_samples: 12, batch_size: 4, input_dim: 8, seed: 1, workers: 1 }.source()?;
//! let cfg = HarnessConfig { epochs: 2, warmup_batches: 1, ..HarnessConfig::default() };
//! let (_model, run) = harness::run(model, AdamConfig::new().init(), &mut data, &device, &cfg)?;
//! assert_eq!(run.timings.len(), 6);
//! assert_eq!(run.summary().batches, 5);
//! # Ok::<(), zephon_burn::Error>(())
//! ```

mod outputs;
mod pipeline;
mod plots;
mod scaler;
mod source;
mod summary;
mod timer;
mod trace;

pub use outputs::{OutputFiles, SummaryFile, print_table, write_outputs};
pub(crate) use outputs::{check_writable, fresh_folder};
pub use pipeline::{FetchWaits, OperatorShare, PipelineBreakdown};
pub use plots::{PLOT_SIZE, write_plots};
pub use scaler::{LossScaler, ScalerConfig};
pub use source::{BatchSource, LoaderSource, PipelineSource};
pub use summary::Summary;
pub use timer::{BatchTiming, Phase, Stats};
pub use trace::write_chrome_trace;

use crate::device::Precision;
use crate::error::Result;
use burn::module::{Module, ModuleMapper, Param};
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, FloatDType, Tensor};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::time::Instant;
use timer::StepClock;
use zephon_core::Tracking;

/// A model the harness can time: it turns a batch into its input and runs
/// forward to a scalar loss. Implement it for your own Burn module.
pub trait TimedModel: Module {
    /// The batch as the data source yields it.
    type Batch;
    /// The batch on the device, as `loss` takes it.
    type Input;

    /// Moves `batch` to `device`, floats in `dtype`. Counted as data time,
    /// like the host-to-device copy of a PyTorch training loop.
    fn to_input(batch: Self::Batch, device: &Device, dtype: FloatDType) -> Result<Self::Input>;

    /// Samples in `batch` (for samples per second).
    fn batch_len(batch: &Self::Batch) -> usize;

    /// The forward pass, down to a scalar loss (shape `[1]`).
    fn loss(&self, input: Self::Input) -> Tensor<1>;
}

/// How the harness runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HarnessConfig {
    /// Passes over the data.
    pub epochs: usize,
    /// Batches at the start of the run that are recorded but kept out of the summary.
    pub warmup_batches: usize,
    /// Stop an epoch after this many batches.
    pub max_batches_per_epoch: Option<usize>,
    /// Learning rate of the optimizer.
    pub learning_rate: f64,
    /// The precision forward and backward run in.
    pub precision: Precision,
    /// The loss scaler of `16-mixed`.
    pub scaler: ScalerConfig,
    /// Show a progress bar.
    pub progress: bool,
    /// The observability the harness turns on in a Zephon pipeline source,
    /// to split the data time by operator (`operator`); `off` leaves the
    /// pipeline unobserved and the summary without a breakdown.
    pub tracking: Tracking,
}

impl Default for HarnessConfig {
    fn default() -> Self {
        HarnessConfig {
            epochs: 2,
            warmup_batches: 5,
            max_batches_per_epoch: None,
            learning_rate: 1e-3,
            precision: Precision::F32,
            scaler: ScalerConfig::default(),
            progress: false,
            tracking: Tracking::Operator,
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct TimingRun {
    /// One entry per batch, warm-up included.
    pub timings: Vec<BatchTiming>,
    /// The precision it ran in.
    pub precision: Precision,
    /// The loss scale at the end (`16-mixed` only).
    pub final_scale: Option<f32>,
    /// Optimizer steps skipped because of a loss-scaler overflow.
    pub skipped_steps: usize,
    /// The data time split by pipeline operator (Zephon pipeline sources
    /// with tracking on only).
    pub pipeline: Option<PipelineBreakdown>,
}

impl TimingRun {
    /// The summary of the non-warm-up batches.
    pub fn summary(&self) -> Summary {
        Summary::of(&self.timings)
    }
}

/// Casts every float parameter, keeping its id so gradients computed on the
/// copy can be matched to the original.
struct CastFloats {
    dtype: FloatDType,
    /// Detach and make the cast tensor a leaf of its own (pure half precision,
    /// where the half weights are the ones the optimizer updates). Without it,
    /// the graph runs back through the cast to the f32 master.
    new_leaf: bool,
}

impl ModuleMapper for CastFloats {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (dtype, leaf) = (self.dtype, self.new_leaf);
        param.map(|t| {
            let t = t.cast(dtype);
            if leaf { t.detach().require_grad() } else { t }
        })
    }
}

/// Trains `model` on `source` with `optimizer` for `config.epochs`, timing
/// every batch. Returns the trained model (f32 master for `16-mixed`, half
/// for `16` and `bf16`) and the timings.
///
/// `device` must have autodiff enabled (see [`DeviceChoice::resolve`](crate::DeviceChoice::resolve)).
pub fn run<M: TimedModel>(
    model: M,
    mut optimizer: ModuleOptimizer,
    source: &mut dyn BatchSource<M::Batch>,
    device: &Device,
    config: &HarnessConfig,
) -> Result<(M, TimingRun)> {
    let precision = config.precision;
    precision.check(device)?;
    let compute_dtype = precision.compute_dtype();
    let mut model = match precision {
        Precision::F16 | Precision::Bf16 => model.map(&mut CastFloats {
            dtype: compute_dtype,
            new_leaf: true,
        }),
        _ => model,
    };
    let mut scaler =
        (precision == Precision::Mixed16).then(|| LossScaler::new(config.scaler.clone()));

    let per_epoch = match (source.batches_per_epoch(), config.max_batches_per_epoch) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    // A run whose every batch is a warm-up measures nothing: its summary
    // would be zeros, written out as a result. Known from the start where
    // the source says its length, found at the end otherwise.
    if let Some(all) = per_epoch.map(|n| n.saturating_mul(config.epochs))
        && all <= config.warmup_batches
    {
        return Err(no_batch_measured(all, config));
    }
    let bar = progress_bar(config, per_epoch);
    source.set_tracking(config.tracking);
    let mut timings = Vec::new();
    device.sync()?;
    let mut last = Instant::now();
    for epoch in 0..config.epochs {
        let mut batches = source.epoch(epoch)?;
        let mut index = 0;
        loop {
            if config.max_batches_per_epoch.is_some_and(|m| index >= m) {
                break;
            }
            let mut clock = StepClock::starting_at(last);
            // Data: the wait for the next batch and its move to the device.
            let Some(batch) = batches.next() else { break };
            let batch = batch?;
            let samples = M::batch_len(&batch);
            let input = M::to_input(batch, device, compute_dtype)?;
            device.sync()?;
            clock.mark();

            // Forward. For 16-mixed the half copy of the weights is made here,
            // as autocast does inside the forward pass.
            let loss = match &scaler {
                Some(_) => model
                    .clone()
                    .map(&mut CastFloats {
                        dtype: compute_dtype,
                        new_leaf: false,
                    })
                    .loss(input),
                None => model.loss(input),
            };
            device.sync()?;
            clock.mark();

            let grads = match &scaler {
                Some(s) => s.scale_loss(loss.clone()).backward(),
                None => loss.backward(),
            };
            device.sync()?;
            clock.mark();

            // Other: unscale and check, the optimizer step, bookkeeping.
            let grads = GradientsParams::from_grads(grads, &model);
            let grads = match scaler.as_mut() {
                Some(s) => s.unscale(grads, &model),
                None => Some(grads),
            };
            let skipped = grads.is_none();
            if let Some(grads) = grads {
                model = optimizer.step(config.learning_rate, model, grads);
            }
            let loss: f32 = loss.cast(FloatDType::F32).into_scalar();
            bar.inc(1);
            if index % 8 == 0 {
                bar.set_message(format!("epoch {epoch} loss {loss:.4}"));
            }
            device.sync()?;
            last = clock.mark();

            let [data, forward, backward, other, total] = clock.parts().map(|d| d.as_secs_f64());
            let step = timings.len();
            timings.push(BatchTiming {
                epoch,
                batch: index,
                step,
                warmup: step < config.warmup_batches,
                samples,
                data,
                forward,
                backward,
                other,
                total,
                loss,
                skipped,
            });
            index += 1;
        }
    }
    bar.finish_and_clear();
    if timings.len() <= config.warmup_batches {
        return Err(no_batch_measured(timings.len(), config));
    }
    let pipeline = PipelineBreakdown::of(source.observers(), &Summary::of(&timings));
    Ok((
        model,
        TimingRun {
            timings,
            precision,
            final_scale: scaler.as_ref().map(LossScaler::scale),
            skipped_steps: scaler.as_ref().map_or(0, LossScaler::skipped_steps),
            pipeline,
        },
    ))
}

/// The error of a run of `batches` batches, all of them warm-up.
fn no_batch_measured(batches: usize, config: &HarnessConfig) -> crate::error::Error {
    crate::error::Error::Config {
        key: "timing.warmup_batches".into(),
        message: format!(
            "{} leaves no batch to measure: the run has {batches} batches ({} epochs); \
             use fewer warm-up batches, more epochs or more samples",
            config.warmup_batches, config.epochs
        ),
    }
}

fn progress_bar(config: &HarnessConfig, per_epoch: Option<usize>) -> ProgressBar {
    if !config.progress {
        return ProgressBar::hidden();
    }
    match per_epoch {
        Some(n) => {
            let bar = ProgressBar::new(n.saturating_mul(config.epochs) as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{bar:40} {pos}/{len} batches [{elapsed_precise}<{eta_precise}] {msg}",
                )
                .expect("the template is valid"),
            );
            bar
        }
        None => {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {pos} batches [{elapsed_precise}] {msg}")
                    .expect("the template is valid"),
            );
            bar
        }
    }
}
