//! # zephon-burn
//!
//! The bridge between Zephon pipelines and Burn training loops, and the
//! model-step timing harness.
//!
//! - [`convert`]: Zephon batches ([`zephon_ops::TrainingBatch`], records
//!   with feature vectors) to Burn tensors, copied once.
//! - [`ZephonDataLoader`]: Burn's own `DataLoader` trait over a Zephon
//!   pipeline, so Burn's training loops can consume it; its
//!   [`batches`](ZephonDataLoader::batches) is a plain iterator for custom loops.
//! - [`harness`]: per-batch `data` / `forward` / `backward` / `other` timing
//!   of any [`TimedModel`](harness::TimedModel), in 32, 16, bf16 or 16-mixed
//!   precision (with a dynamic loss scaler), with YAML, CSV, PNG and Chrome
//!   trace outputs. [`run_timing`] is the `zephon timing` command.
//! - [`resume`]: exact training resume: the model, the optimizer state and
//!   the data pipeline's checkpoint saved and restored together.
//! - [`models`]: the autoencoder and the small transformer LM the harness
//!   ships with.
//! - `train` (feature `train`): Burn's `Learner` fed by
//!   [`ZephonDataLoader`]s and resumed mid-epoch (a model of one's own, or
//!   the shipped ones with `harness`), with burn-train alone (without its
//!   terminal UI, and without the harness's stack).
//!
//! The harness and the models sit behind the `harness` feature (on by
//! default) with the YAML, plotting and progress-bar crates they need; a
//! training loop that only wants the DataLoader adapter and the conversions
//! depends on `zephon-burn` with `default-features = false`.
//!
//! ```
//! use burn::tensor::Device;
//! use zephon_burn::TrainingTensors;
//! use zephon_ops::{IdType, TrainingBatch};
//!
//! // Two rows of 4 tokens: one document per row, the second row padded.
//! let batch = TrainingBatch::from_rows(
//!     &[(&[1, 2, 3, 4][..], &[1, 1, 1, 1][..]), (&[5, 6][..], &[1, 1][..])],
//!     4, IdType::U32, 0, 0,
//! ).unwrap();
//! let t = TrainingTensors::from_batch(&batch, &Device::flex())?;
//! assert_eq!(t.input_ids.dims(), [2, 4]);
//! assert_eq!(t.attention_mask.into_data().to_vec::<bool>().unwrap(), [true, true, true, true, true, true, false, false]);
//! # Ok::<(), zephon_burn::Error>(())
//! ```
#![warn(missing_docs)]

#[cfg(feature = "harness")]
pub mod config;
pub mod convert;
pub mod dataloader;
pub mod device;
pub mod error;
#[cfg(feature = "harness")]
pub mod harness;
#[cfg(feature = "harness")]
pub mod models;
pub mod resume;
#[cfg(feature = "train")]
pub mod train;

#[cfg(feature = "harness")]
pub use config::{TimingConfig, TimingOptions, TimingReport, run_timing};
pub use convert::TrainingTensors;
pub use dataloader::{
    DataPosition, HostBatch, ItemCount, PositionHandle, TensorBatches, ZephonDataLoader,
};
pub use device::{DeviceChoice, Precision};
pub use error::{Error, Result};
