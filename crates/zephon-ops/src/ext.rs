//! [`TextPipelineExt`]: the chain methods of the text operators.

use crate::to_training::{ToTraining, TrainingConfig};
use crate::tokenize::{Tokenize, TokenizeConfig};
use futures::Stream;
use zephon_core::{Batch, Record, Result};

/// Chain methods for text pipelines, on any `Stream<Item = Result<..>>`.
pub trait TextPipelineExt: Stream + Sized {
    /// Tokenizes a text field with up to `parallelism` micro-batches
    /// encoding at once; output order equals input order. See [`Tokenize`].
    fn tokenize(self, config: TokenizeConfig, parallelism: usize) -> Tokenize<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        Tokenize::new(self, config, parallelism)
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
