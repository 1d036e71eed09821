//! [`TextPipelineExt`]: the chain methods of the text operators.

use crate::ensure_mixture::{EnsureMixture, MixtureConfig};
use crate::pack::PackConfig;
use crate::pack::flat::PackFlat;
use crate::pack::stream::PackSequences;
use crate::to_training::{ToTraining, TrainingConfig};
#[cfg(feature = "tokenize")]
use crate::tokenize::{Tokenize, TokenizeConfig};
#[cfg(feature = "tokenize")]
use crate::tokenize_chat::{ChatTokenizeConfig, TokenizeChat};
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
    #[cfg(feature = "tokenize")]
    /// Tokenizes a text field with up to `parallelism` micro-batches
    /// encoding at once (1 to 4096; otherwise the first item is an error
    /// naming it); output order equals input order. See [`Tokenize`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_ops::{TextPipelineExt, TokenizeConfig};
    /// # let json = include_bytes!("../tests/fixtures/tokenizer.json");
    /// let config = TokenizeConfig::from_bytes(json)?; // field `text` into `input_ids`
    /// let out: Vec<Record> = futures::stream::iter([Ok(Record::new().with("text", "the loader streams shards"))])
    ///     .tokenize(config, 2)
    ///     .into_blocking_iter(Runner::threads())?
    ///     .collect::<Result<_, _>>()?;
    /// assert!(!out[0].tokens("input_ids").unwrap().is_empty());
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn tokenize(self, config: TokenizeConfig, parallelism: usize) -> Tokenize<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        Tokenize::new(self, config, parallelism)
    }

    #[cfg(feature = "tokenize")]
    /// Renders and tokenizes the conversation of each record with a chat
    /// template, writing ids and an assistant-only loss mask, with up to
    /// `parallelism` micro-batches encoding at once (1 to 4096; otherwise
    /// the first item is an error naming it); output order equals input
    /// order. See [`TokenizeChat`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner, Value};
    /// use zephon_ops::{ChatTokenizeConfig, TextPipelineExt};
    /// # let json = include_bytes!("../tests/fixtures/tokenizer.json");
    /// let template = "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}";
    /// let config = ChatTokenizeConfig::from_bytes(json)?.chat_template(template);
    /// let chat = serde_json::json!([{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]);
    /// let out: Vec<Record> = futures::stream::iter([Ok(Record::new().with("messages", Value::Json(chat)))])
    ///     .tokenize_chat(config, 1)
    ///     .into_blocking_iter(Runner::threads())?
    ///     .collect::<Result<_, _>>()?;
    /// let mask = out[0].tokens("loss_mask").unwrap();
    /// assert_eq!((mask[0], mask.last()), (0, Some(&1))); // the loss on the assistant's turn only
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn tokenize_chat(self, config: ChatTokenizeConfig, parallelism: usize) -> TokenizeChat<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        TokenizeChat::new(self, config, parallelism)
    }

    /// Reorders records so each dataset's token (or sample) share tracks
    /// the target weights (a config [`MixtureConfig::validate`] refuses is
    /// the first item, as an error). See [`EnsureMixture`].
    ///
    /// ```
    /// use zephon_core::{Lineage, PipelineExt, Record, Runner, SamplePtr, Value};
    /// use zephon_ops::{MixtureConfig, TextPipelineExt};
    /// // Ten records of dataset 0, then ten of dataset 1: reordered to alternate.
    /// let rec = |d: u32, i: u64| {
    ///     let mut r = Record::new().with("input_ids", Value::Tokens(vec![1; 4]));
    ///     r.lineage = Lineage::from_elem(SamplePtr { dataset: d, shard: 0, sample: i, lane: 0 }, 1);
    ///     r
    /// };
    /// let input = (0..10).map(|i| Ok(rec(0, i))).chain((0..10).map(|i| Ok(rec(1, i))));
    /// let out: Vec<Record> = futures::stream::iter(input.collect::<Vec<_>>())
    ///     .ensure_mixture(MixtureConfig::new([(0, 1.0), (1, 1.0)]))
    ///     .into_blocking_iter(Runner::Inline)?
    ///     .collect::<Result<_, _>>()?;
    /// let first: Vec<u32> = out.iter().take(4).map(|r| r.source().unwrap().dataset).collect();
    /// assert!(first.contains(&1), "{first:?}");
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn ensure_mixture(self, config: MixtureConfig) -> EnsureMixture<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        EnsureMixture::new(self, config)
    }

    /// Packs tokenized records into rows of at most `max_length` (1 to 16 Mi
    /// tokens; a config [`PackConfig::validate`] refuses is the first item,
    /// as an error), per lane. See [`PackSequences`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner, Value};
    /// use zephon_ops::{PackAlgorithm, PackConfig, TextPipelineExt};
    /// let docs = [3u32, 5, 2, 6].map(|n| Ok(Record::new().with("input_ids", Value::Tokens(vec![n; n as usize]))));
    /// let rows: Vec<Record> = futures::stream::iter(docs)
    ///     .pack_sequences(PackConfig::new(8, PackAlgorithm::FirstFit))
    ///     .into_blocking_iter(Runner::Inline)?
    ///     .collect::<Result<_, _>>()?;
    /// assert!(rows.iter().all(|r| r.tokens("input_ids").unwrap().len() <= 8));
    /// assert_eq!(rows.iter().map(|r| r.tokens("input_ids").unwrap().len()).sum::<usize>(), 16);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn pack_sequences(self, config: PackConfig) -> PackSequences<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        PackSequences::new(self, config)
    }

    /// Pads packed rows to `max_length` (1 to 16 Mi) with `pad_token_id`.
    /// See [`PackFlat`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner, Value};
    /// use zephon_ops::TextPipelineExt;
    /// let rows = [Ok(Record::new().with("input_ids", Value::Tokens(vec![7, 7, 7])))];
    /// let out: Vec<Record> = futures::stream::iter(rows)
    ///     .pack_flat(5, 0)
    ///     .into_blocking_iter(Runner::Inline)?
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(out[0].tokens("input_ids").unwrap(), &[7, 7, 7, 0, 0]);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn pack_flat(self, max_length: usize, pad_token_id: u32) -> PackFlat<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        PackFlat::new(self, max_length, pad_token_id)
    }

    /// Collates batches of token rows into
    /// [`TrainingBatch`](crate::TrainingBatch)es, rows of `seq_len` from 1 to
    /// 16 Mi (see [`TrainingConfig::validate`]). See [`ToTraining`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner, Value};
    /// use zephon_ops::{TextPipelineExt, TrainingConfig};
    /// let rows = [2u32, 3].map(|n| Ok(Record::new().with("input_ids", Value::Tokens(vec![n; n as usize]))));
    /// let batches: Vec<_> = futures::stream::iter(rows)
    ///     .batch(2)
    ///     .to_training(TrainingConfig::new(4))
    ///     .into_blocking_iter(Runner::Inline)?
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(batches[0].shape(), [2, 4]);
    /// assert_eq!(batches[0].num_tokens(), 5);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn to_training(self, config: TrainingConfig) -> ToTraining<Self>
    where
        Self: Stream<Item = Result<Batch<Record>>>,
    {
        ToTraining::new(self, config)
    }
}

impl<S: Stream> TextPipelineExt for S {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PackAlgorithm, TrainingConfig};
    use zephon_core::{PipelineExt, Runner, Value};

    /// The first item is the error naming `key`, and the stream ends there.
    fn refused<T: Send + 'static>(s: impl Stream<Item = Result<T>> + Send + 'static, key: &str) {
        let mut it = s.into_blocking_iter(Runner::Inline).unwrap();
        match it.next() {
            Some(Err(e)) => assert!(e.to_string().contains(&format!("`{key}`")), "{key}: {e}"),
            Some(Ok(_)) => panic!("{key}: an element instead of an error"),
            None => panic!("{key}: an empty stream instead of an error"),
        }
        assert!(it.next().is_none(), "{key}: the stream goes on");
    }

    fn docs() -> impl Stream<Item = Result<Record>> + Send + 'static {
        futures::stream::iter(
            (1..=4u32)
                .map(|n| Ok(Record::new().with("input_ids", Value::Tokens(vec![n; n as usize])))),
        )
    }

    fn tokenizer() -> TokenizeConfig {
        TokenizeConfig::from_bytes(include_bytes!("../tests/fixtures/tokenizer.json")).unwrap()
    }

    #[test]
    fn out_of_range_options_are_errors_at_the_first_poll() {
        let pack = |n| PackConfig::new(n, PackAlgorithm::FirstFit);
        refused(docs().pack_sequences(pack(0)), "pack.max_length");
        refused(docs().pack_sequences(pack(usize::MAX)), "pack.max_length");
        refused(docs().pack_sequences(pack(8).num_bins(0)), "pack.num_bins");
        refused(
            docs().pack_sequences(pack(8).max_sequences_per_bin(0)),
            "pack.max_sequences_per_bin",
        );
        refused(docs().pack_flat(0, 0), "pack_flat.max_length");
        let mut packer = crate::Packer::new(pack(0));
        let e = packer
            .push(Record::new().with("input_ids", Value::Tokens(vec![1])))
            .unwrap_err();
        assert!(e.to_string().contains("`pack.max_length`"), "{e}");
        let mut row = Record::new().with("input_ids", Value::Tokens(vec![1]));
        let e = crate::pack::flat::pad_row(&mut row, usize::MAX, 0).unwrap_err();
        assert!(e.to_string().contains("`pack_flat.max_length`"), "{e}");
        let batch = zephon_core::Batch {
            lane: 0,
            index: 0,
            items: vec![row],
            cut: None,
        };
        let e = TrainingConfig::new(usize::MAX).collate(&batch).unwrap_err();
        assert!(e.to_string().contains("`to_training.seq_len`"), "{e}");
        refused(
            docs().batch(2).to_training(TrainingConfig::new(0)),
            "to_training.seq_len",
        );
        refused(
            docs()
                .batch(2)
                .to_training(TrainingConfig::new(i64::MAX as usize)),
            "to_training.seq_len",
        );
        refused(
            docs().ensure_mixture(MixtureConfig::new([(0, f64::NAN)])),
            "ensure_mixture.weights",
        );
        refused(
            docs().ensure_mixture(MixtureConfig::new([(0, f64::INFINITY), (1, 1.0)])),
            "ensure_mixture.weights",
        );
        refused(
            docs().ensure_mixture(MixtureConfig::new([(0, 1.0)]).max_buffer_size(0)),
            "ensure_mixture.max_buffer_size",
        );
        refused(docs().tokenize(tokenizer(), 0), "tokenize.parallelism");
        refused(
            docs().tokenize(tokenizer(), 100_000),
            "tokenize.parallelism",
        );
        refused(
            docs().tokenize(tokenizer().micro_batch(0), 2),
            "tokenize.micro_batch",
        );
        refused(
            docs().tokenize(
                tokenizer().max_length(usize::MAX, crate::Overflow::Split),
                2,
            ),
            "tokenize.max_length",
        );
    }

    /// The first error of a pipeline over the dataset `web` (one shard of
    /// `docs`), built by `ops`, with its sources named.
    fn first_error(
        docs: Vec<Record>,
        ops: impl FnOnce(
            zephon_core::Fetch<zephon_core::PointerStream>,
        ) -> futures::stream::BoxStream<'static, Result<Record>>,
    ) -> String {
        let ds = zephon_core::Dataset::in_memory("web", vec![docs]).unwrap();
        let ws = zephon_core::WorkSource::builder()
            .dataset(ds, 1.0)
            .shuffle_within_shard(false)
            .build()
            .unwrap();
        let catalog = ws.catalog().clone();
        ops(ws.stream().fetch(1))
            .into_blocking_iter(Runner::Inline)
            .unwrap()
            .find_map(|r| r.err())
            .expect("an error")
            .name_sources(&catalog)
            .to_string()
    }

    #[test]
    fn sample_errors_name_dataset_and_shard_once() {
        use futures::StreamExt;
        let text = |t: &str| Record::new().with("text", t);
        let e = first_error(vec![text("a"), Record::new()], |s| {
            s.tokenize(tokenizer(), 1).boxed()
        });
        assert_eq!(
            e,
            "operator `tokenize`: dataset `web`, shard `memory://web/0`, sample 1: no text field `text`"
        );
        let ids = |n: usize| Record::new().with("input_ids", Value::Tokens(vec![1; n]));
        let e = first_error(vec![ids(2), ids(9)], |s| {
            s.pack_sequences(
                PackConfig::new(4, PackAlgorithm::FirstFit)
                    .oversized(crate::OversizedPolicy::Error),
            )
            .boxed()
        });
        assert_eq!(
            e,
            "operator `pack_sequences`: dataset `web`, shard `memory://web/0`, sample 1: 9 tokens, more than max_length 4"
        );
        let e = first_error(vec![ids(2), text("no ids")], |s| {
            s.ensure_mixture(MixtureConfig::new([(0, 1.0)])).boxed()
        });
        assert_eq!(
            e,
            "operator `ensure_mixture`: dataset `web`, shard `memory://web/0`, sample 1: no tokens field `input_ids`"
        );
    }
}
