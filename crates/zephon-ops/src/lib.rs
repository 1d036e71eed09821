//! # zephon-ops
//!
//! The CPU-heavy text operators of Zephon: tokenize, pack sequences, hold a
//! token-level mixture, and collate batches for training.
#![warn(missing_docs)]

pub mod ensure_mixture;
pub mod error;
pub mod ext;
pub mod fields;
pub mod pack;
pub mod stats;
pub mod to_training;
pub mod tokenize;
pub mod training;

/// The Hugging Face `tokenizers` crate, re-exported for
/// [`TokenizeConfig::from_tokenizer`] and [`TokenizeConfig::tokenizer`].
pub use tokenizers;

pub use ensure_mixture::{EnsureMixture, MixtureConfig, WeightBy};
pub use error::{Error, Result};
pub use ext::TextPipelineExt;
pub use pack::flat::PackFlat;
pub use pack::stream::PackSequences;
pub use pack::{OversizedPolicy, PackAlgorithm, PackConfig, Packer, Seq};
pub use stats::{TextStats, TextStatsSnapshot};
pub use to_training::{ToTraining, TrainingConfig};
pub use tokenize::{OnMissing, Overflow, SpecialTokens, Tokenize, TokenizeConfig};
pub use training::{IGNORE_INDEX, IdType, TokenIds, TrainingBatch};
