//! Built-in models for the timing harness: the autoencoder of the model
//! pipeline chapter, a small transformer language model fed by a Zephon
//! text pipeline, and (feature `media`) a small image classifier fed from
//! WebDataset shards of JPEGs.

pub mod autoencoder;
#[cfg(feature = "media")]
pub mod image_classifier;
pub mod lm;
