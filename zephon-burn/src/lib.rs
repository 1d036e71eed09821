#![doc = include_str!("../README.md")]
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
mod limits;
#[cfg(feature = "media")]
pub mod media;
#[cfg(feature = "harness")]
pub mod models;
pub mod resume;
#[cfg(feature = "train")]
pub mod train;

#[cfg(all(feature = "harness", feature = "media"))]
pub use config::run_timing_with;
#[cfg(feature = "harness")]
pub use config::{TimingConfig, TimingOptions, TimingReport, run_timing};
pub use convert::TrainingTensors;
pub use dataloader::{
    DataPosition, HostBatch, ItemCount, PositionHandle, TensorBatches, ZephonDataLoader,
};
pub use device::{DeviceChoice, Precision};
pub use error::{Error, Result};
