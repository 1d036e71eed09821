#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod ensure_mixture;
pub mod error;
pub mod ext;
pub mod fields;
pub mod pack;
pub mod stats;
pub mod to_training;
#[cfg(feature = "tokenize")]
pub mod tokenize;
#[cfg(feature = "tokenize")]
pub mod tokenize_chat;
#[cfg(feature = "tokenize")]
pub mod tokenizer_file;
pub mod training;

/// The Hugging Face `tokenizers` crate, re-exported for
/// [`TokenizeConfig::from_tokenizer`] and [`TokenizeConfig::tokenizer`].
#[cfg(feature = "tokenize")]
pub use tokenizers;

pub use ensure_mixture::{EnsureMixture, MixtureConfig, WeightBy};
pub use error::{Error, Result};
pub use ext::TextPipelineExt;
pub use pack::flat::PackFlat;
pub use pack::stream::PackSequences;
pub use pack::{MAX_GROUPS, OversizedPolicy, PackAlgorithm, PackConfig, Packer, Seq};
pub use stats::{TextStats, TextStatsSnapshot};
pub use to_training::{PositionMode, ToTraining, TrainingConfig};
#[cfg(feature = "tokenize")]
pub use tokenize::{OnMissing, Overflow, SpecialTokens, Tokenize, TokenizeConfig};
#[cfg(feature = "tokenize")]
pub use tokenize_chat::{ChatTokenizeConfig, TokenizeChat};
pub use training::{IGNORE_INDEX, IdType, TokenIds, TrainingBatch};

/// Has checkpoints check the cuts of this crate's stateful operators
/// (`pack_sequences`, `ensure_mixture`) when they are loaded, besides the
/// checks every cut gets (see
/// [`register_state_check`](zephon_core::checkpoint::cut::register_state_check)).
/// Building either operator does it; call it to check files loaded
/// before. The operators check their cuts on restore regardless.
pub fn register_checkpoint_checks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use zephon_core::checkpoint::cut::register_state_check;
        register_state_check(pack::cut::NAME, pack::cut::check_state);
        register_state_check(ensure_mixture::cut::NAME, ensure_mixture::cut::check_state);
    });
}
