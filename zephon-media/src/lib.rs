#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod audio;
pub mod audio_batch;
pub mod audio_codec;
pub mod audio_decode_config;
pub mod audio_ext;
pub mod center_crop;
pub mod collate;
pub mod collate_audio;
pub mod crop_audio;
pub mod decode;
pub mod decode_audio;
pub mod error;
pub mod ext;
pub mod flip;
pub mod image;
pub mod log_mel;
pub mod map_images;
pub mod mel_batch;
pub mod normalize;
pub mod probe;
pub mod random_resized_crop;
pub mod remix;
pub mod resample;
pub mod resize;
pub mod rng;
pub mod stats;

pub use audio::{Audio, AudioCompose, AudioOp, AudioSample};
pub use audio_batch::AudioBatch;
pub use audio_codec::{
    AudioFailure, AudioLimits, DEFAULT_MAX_CHANNELS, DEFAULT_MAX_SAMPLES, DEFAULT_MAX_SECONDS,
    DEFAULT_SAMPLE_RATES,
};
pub use audio_decode_config::AudioDecodeConfig;
pub use audio_ext::AudioPipelineExt;
pub use center_crop::CenterCrop;
pub use collate::{CollateConfig, CollateImages, ImageBatch};
pub use collate_audio::{AudioCollateConfig, CollateAudio};
pub use crop_audio::{CropAt, CropAudio};
pub use decode::{Channels, DEFAULT_MAX_PIXELS, DecodeConfig, DecodeFailure, DecodeImage, OnError};
pub use decode_audio::DecodeAudio;
pub use error::{MediaError, Result};
pub use ext::MediaPipelineExt;
pub use flip::Flip;
pub use image::{Image, ImageSample, Layout, Pixels};
pub use log_mel::LogMel;
pub use map_images::{Compose, ImageOp, MapImages};
pub use mel_batch::MelBatch;
pub use normalize::{IMAGENET_MEAN, IMAGENET_STD, Normalize};
pub use probe::{ImageInfo, probe_image};
pub use random_resized_crop::RandomResizedCrop;
pub use remix::Remix;
pub use resample::Resample;
pub use resize::{Resize, ResizeTo};
pub use rng::SampleRng;
pub use stats::MediaStats;
