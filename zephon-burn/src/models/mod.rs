//! Built-in models for the timing harness: the autoencoder of the model
//! pipeline chapter, and a small transformer language model fed by a
//! Zephon text pipeline.

pub mod autoencoder;
pub mod lm;
