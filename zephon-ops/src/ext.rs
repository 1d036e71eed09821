//! [`TextPipelineExt`]: the chain methods of the text operators.

use crate::ensure_mixture::{EnsureMixture, MixtureConfig};
use crate::pack::PackConfig;
use crate::pack::flat::PackFlat;
use crate::pack::stream::PackSequences;
use crate::to_training::{ToTraining, TrainingConfig};
use crate::tokenize::{Tokenize, TokenizeConfig};
use futures::Stream;
use zephon_core::{Batch, Record, Result};

/// Chain methods for text pipelines, on any `Stream<Item = Result<..>>`.
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner, Value};
/// use zephon_ops::{PackAlgorithm, PackConfig, TextPipelineExt, TrainingConfig};
/// let docs = (1..=6u32).map(|n| Ok(Record::new().with("input_ids", Value::Tokens(vec![n; n as usize]))));
/// let batches: Vec<_> = futures::stream::iter(docs)
///     .pack_sequences(PackConfig::new(8, PackAlgorithm::FirstFit))
///     .batch(2)
///     .to_training(TrainingConfig::new(8))
///     .into_blocking_iter(Runner::Inline)?
///     .collect::<Result<_, _>>()?;
/// let tokens: usize = batches.iter().map(|b| b.num_tokens()).sum();
/// assert_eq!(tokens, 21);
/// # Ok::<(), zephon_core::Error>(())
/// ```
pub trait TextPipelineExt: Stream + Sized {
    /// Tokenizes a text field with up to `parallelism` micro-batches
    /// encoding at once; output order equals input order. See [`Tokenize`].
    fn tokenize(self, config: TokenizeConfig, parallelism: usize) -> Tokenize<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        Tokenize::new(self, config, parallelism)
    }

    /// Reorders records so each dataset's token (or sample) share tracks
    /// the target weights. See [`EnsureMixture`].
    fn ensure_mixture(self, config: MixtureConfig) -> EnsureMixture<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        EnsureMixture::new(self, config)
    }

    /// Packs tokenized records into rows of at most `max_length`, per lane.
    /// See [`PackSequences`].
    fn pack_sequences(self, config: PackConfig) -> PackSequences<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        PackSequences::new(self, config)
    }

    /// Pads packed rows to `max_length` with `pad_token_id`. See [`PackFlat`].
    fn pack_flat(self, max_length: usize, pad_token_id: u32) -> PackFlat<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        PackFlat::new(self, max_length, pad_token_id)
    }

    /// Collates batches of token rows into
    /// [`TrainingBatch`](crate::TrainingBatch)es. See [`ToTraining`].
    fn to_training(self, config: TrainingConfig) -> ToTraining<Self>
    where
        Self: Stream<Item = Result<Batch<Record>>>,
    {
        ToTraining::new(self, config)
    }
}

impl<S: Stream> TextPipelineExt for S {}
