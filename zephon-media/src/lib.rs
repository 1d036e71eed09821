#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod center_crop;
pub mod collate;
pub mod decode;
pub mod error;
pub mod ext;
pub mod flip;
pub mod image;
pub mod map_images;
pub mod normalize;
pub mod random_resized_crop;
pub mod resize;
pub mod rng;
pub mod stats;

pub use center_crop::CenterCrop;
pub use collate::{CollateConfig, CollateImages, ImageBatch};
pub use decode::{Channels, DEFAULT_MAX_PIXELS, DecodeConfig, DecodeFailure, DecodeImage, OnError};
pub use error::{MediaError, Result};
pub use ext::MediaPipelineExt;
pub use flip::Flip;
pub use image::{Image, ImageSample, Layout, Pixels};
pub use map_images::{Compose, ImageOp, MapImages};
pub use normalize::{IMAGENET_MEAN, IMAGENET_STD, Normalize};
pub use random_resized_crop::RandomResizedCrop;
pub use resize::{Resize, ResizeTo};
pub use rng::SampleRng;
pub use stats::MediaStats;
