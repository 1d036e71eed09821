//! # zephon-ops
//!
//! The CPU-heavy text operators of Zephon: raw documents in, packed token
//! batches out, online, as fast as the tokenizer allows.
//!
//! - [`tokenize`](TextPipelineExt::tokenize): a Hugging Face
//!   `tokenizer.json`, micro-batches on worker threads, output in input order;
//! - [`tokenize_chat`](TextPipelineExt::tokenize_chat): conversations
//!   rendered with a chat template, ids and an assistant-only loss mask;
//! - [`ensure_mixture`](TextPipelineExt::ensure_mixture): holds the
//!   token-level mixture of source datasets;
//! - [`pack_sequences`](TextPipelineExt::pack_sequences): `first_fit`,
//!   `best_fit`, `wrap`, `best_fit_wrap`, keeping document boundaries;
//!   [`pack_flat`](TextPipelineExt::pack_flat) pads rows;
//! - [`to_training`](TextPipelineExt::to_training): batches collated into
//!   [`TrainingBatch`]es (ids, shifted labels, positions, `cu_seqlens`);
//! - [`TextStats`]: truncations, drops, padding fraction, sequences per row.
//!
//! Like every Zephon operator, they never let parallelism change the output.
//!
//! ```
//! use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
//! use zephon_ops::{PackAlgorithm, PackConfig, SpecialTokens, TextPipelineExt, TokenizeConfig, TrainingConfig};
//! # let json = include_bytes!("../tests/fixtures/tokenizer.json");
//! let docs = (0..50).map(|i| Record::new().with("text", format!("document number {i} of the corpus"))).collect();
//! let ws = WorkSource::builder().dataset(Dataset::in_memory("web", vec![docs])?, 1.0).seed(1).build()?;
//! let tokenizer = TokenizeConfig::from_bytes(json)?.special_tokens(SpecialTokens::Eos);
//! let batches = ws.stream()
//!     .fetch(2)
//!     .tokenize(tokenizer, 2)
//!     .pack_sequences(PackConfig::new(32, PackAlgorithm::BestFitWrap))
//!     .batch(4)
//!     .to_training(TrainingConfig::new(32));
//! for b in batches.into_blocking_iter(Runner::threads())? {
//!     let b = b?;
//!     assert_eq!(b.input_ids.len(), b.batch_size * 32);
//!     assert_eq!(*b.cu_seqlens.last().unwrap() as usize, b.batch_size * 32);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

pub mod ensure_mixture;
pub mod error;
pub mod ext;
pub mod fields;
pub mod pack;
pub mod stats;
pub mod to_training;
pub mod tokenize;
pub mod tokenize_chat;
pub mod tokenizer_file;
pub mod training;

/// The Hugging Face `tokenizers` crate, re-exported for
/// [`TokenizeConfig::from_tokenizer`] and [`TokenizeConfig::tokenizer`].
pub use tokenizers;

pub use ensure_mixture::{EnsureMixture, MixtureConfig, WeightBy};
pub use error::{Error, Result};
pub use ext::TextPipelineExt;
pub use pack::flat::PackFlat;
pub use pack::stream::PackSequences;
pub use pack::{MAX_GROUPS, OversizedPolicy, PackAlgorithm, PackConfig, Packer, Seq};
pub use stats::{TextStats, TextStatsSnapshot};
pub use to_training::{PositionMode, ToTraining, TrainingConfig};
pub use tokenize::{OnMissing, Overflow, SpecialTokens, Tokenize, TokenizeConfig};
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
