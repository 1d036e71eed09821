//! The tokenizer and its options.

use super::prepared::Prepared;
use crate::error::Error;
use crate::fields;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use zephon_core::settings::{MICRO_BATCH, SEQ_LEN};

/// Documents per micro-batch: a document is tens of microseconds of BPE
/// work, so 64 of them make the hand-off to a worker thread negligible.
pub const DEFAULT_MICRO_BATCH: usize = 64;

/// Special tokens added around each document.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpecialTokens {
    /// None: the ids of the text only.
    #[default]
    None,
    /// A beginning-of-sequence id first.
    Bos,
    /// An end-of-sequence id last.
    Eos,
    /// Both.
    BosEos,
    /// What the tokenizer's own post-processor adds (its
    /// `add_special_tokens=True` behaviour: BOS for Llama, nothing for
    /// GPT-2, ...); truncation keeps them, as Hugging Face does.
    TokenizerDefault,
}

/// What to do with a document longer than `max_length`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overflow {
    /// Keep the first `max_length` ids (special tokens kept).
    #[default]
    Truncate,
    /// Cut the document into several records of at most `max_length` ids.
    Split,
}

/// What to do with a record that lacks the source text field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnMissing {
    /// An error naming the field and the record's source pointer.
    #[default]
    Error,
    /// Drop the record (counted in [`TextStats`](crate::stats::TextStats)).
    Skip,
}

const BOS_NAMES: &[&str] = &[
    "<s>",
    "<bos>",
    "<|begin_of_text|>",
    "[CLS]",
    "<|endoftext|>",
];
const PAD_NAMES: &[&str] = &["<pad>", "<|pad|>", "[PAD]", "<|padding|>"];
const EOS_NAMES: &[&str] = &["</s>", "<eos>", "<|endoftext|>", "<|end_of_text|>", "[SEP]"];

/// What [`Tokenize`](super::Tokenize) does: the tokenizer, the source field, length handling,
/// special tokens. Cheap to clone (the tokenizer is shared).
#[derive(Clone)]
pub struct TokenizeConfig {
    pub(super) tokenizer: Arc<tokenizers::Tokenizer>,
    pub(super) field: String,
    pub(super) max_length: Option<usize>,
    pub(super) overflow: Overflow,
    pub(super) special: SpecialTokens,
    pub(super) bos_id: Option<u32>,
    pub(super) eos_id: Option<u32>,
    pub(super) attention_mask: bool,
    pub(super) on_missing: OnMissing,
    pub(super) keep_text: bool,
    pub(super) micro_batch: usize,
    pub(super) per_worker: bool,
    pub(super) padding: bool,
    pub(super) pad_id: Option<u32>,
}

impl fmt::Debug for TokenizeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenizeConfig")
            .field("vocab_size", &self.tokenizer.get_vocab_size(true))
            .field("field", &self.field)
            .field("max_length", &self.max_length)
            .field("overflow", &self.overflow)
            .field("special", &self.special)
            .field("bos_id", &self.bos_id)
            .field("eos_id", &self.eos_id)
            .field("on_missing", &self.on_missing)
            .finish_non_exhaustive()
    }
}

impl TokenizeConfig {
    /// Loads a `tokenizer.json` file: a regular file of at most
    /// [`TOKENIZER_FILE_BYTES`](crate::tokenizer_file::TOKENIZER_FILE_BYTES),
    /// its normalizers checked, its own padding and truncation off (see
    /// [`tokenizer_file`](crate::tokenizer_file)).
    pub fn from_file(path: impl AsRef<Path>) -> crate::Result<Self> {
        crate::tokenizer_file::read(path.as_ref()).map(Self::from_tokenizer)
    }

    /// Parses the bytes of a `tokenizer.json`, with the checks of
    /// [`from_file`](Self::from_file).
    pub fn from_bytes(bytes: impl AsRef<[u8]>) -> crate::Result<Self> {
        crate::tokenizer_file::parse(bytes.as_ref(), "<bytes>").map(Self::from_tokenizer)
    }

    /// Wraps a tokenizer built in code. Defaults: field `text`, no length
    /// limit, no special tokens, no attention mask, missing field is an error.
    /// The tokenizer's own padding and truncation are switched off: the
    /// operator's settings alone decide those.
    pub fn from_tokenizer(tokenizer: tokenizers::Tokenizer) -> Self {
        TokenizeConfig {
            tokenizer: Arc::new(crate::tokenizer_file::own_settings_off(tokenizer)),
            field: fields::TEXT.into(),
            max_length: None,
            overflow: Overflow::Truncate,
            special: SpecialTokens::None,
            bos_id: None,
            eos_id: None,
            attention_mask: false,
            on_missing: OnMissing::Error,
            keep_text: false,
            micro_batch: DEFAULT_MICRO_BATCH,
            per_worker: false,
            padding: false,
            pad_id: None,
        }
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &tokenizers::Tokenizer {
        &self.tokenizer
    }

    /// The source text field (default `text`).
    pub fn field(mut self, name: impl Into<String>) -> Self {
        self.field = name.into();
        self
    }

    /// At most `n` ids per output record, handled by `overflow`; `n` must
    /// lie in [`SEQ_LEN`] (1 to 16 Mi) and leave room for the special
    /// tokens (checked when the operator starts).
    pub fn max_length(mut self, n: usize, overflow: Overflow) -> Self {
        self.max_length = Some(n);
        self.overflow = overflow;
        self
    }

    /// Special tokens to add. Their ids come from [`bos_id`](Self::bos_id) /
    /// [`eos_id`](Self::eos_id), or else are looked up in the tokenizer's
    /// vocabulary under the usual names (`<s>`, `</s>`, `<|endoftext|>`, ...).
    pub fn special_tokens(mut self, s: SpecialTokens) -> Self {
        self.special = s;
        self
    }

    /// Pads every output record shorter than `max_length` up to it, at the
    /// end (as Python Zephon's `padding="max_length"`); the attention mask,
    /// when on, is 0 there. Needs [`max_length`](Self::max_length) (checked
    /// when the operator starts). The pad id is [`pad_id`](Self::pad_id), or
    /// else the vocabulary's pad token (`<pad>`, `<|pad|>`, `[PAD]`, ...),
    /// or else the EOS token, as Hugging Face falls back to it.
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_ops::{Overflow, SpecialTokens, TextPipelineExt, TokenizeConfig};
    /// # let json = include_bytes!("../../tests/fixtures/tokenizer.json");
    /// let config = TokenizeConfig::from_bytes(json)?
    ///     .special_tokens(SpecialTokens::Eos)
    ///     .max_length(16, Overflow::Truncate)
    ///     .padding(true)
    ///     .attention_mask(true);
    /// let pad = config.token_id("<|pad|>").unwrap();
    /// let out: Vec<Record> = futures::stream::iter([Ok(Record::new().with("text", "short"))])
    ///     .tokenize(config, 1)
    ///     .into_blocking_iter(Runner::Inline)?
    ///     .collect::<Result<_, _>>()?;
    /// let (ids, mask) = (out[0].tokens("input_ids").unwrap(), out[0].tokens("attention_mask").unwrap());
    /// assert_eq!((ids.len(), ids[15]), (16, pad));
    /// assert_eq!(mask.iter().filter(|&&m| m == 1).count(), ids.iter().filter(|&&i| i != pad).count());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn padding(mut self, on: bool) -> Self {
        self.padding = on;
        self
    }

    /// The id [`padding`](Self::padding) fills with.
    pub fn pad_id(mut self, id: u32) -> Self {
        self.pad_id = Some(id);
        self
    }

    /// The beginning-of-sequence id.
    pub fn bos_id(mut self, id: u32) -> Self {
        self.bos_id = Some(id);
        self
    }

    /// The end-of-sequence id.
    pub fn eos_id(mut self, id: u32) -> Self {
        self.eos_id = Some(id);
        self
    }

    /// Also writes an all-ones [`fields::ATTENTION_MASK`] field.
    pub fn attention_mask(mut self, on: bool) -> Self {
        self.attention_mask = on;
        self
    }

    /// What to do when the source field is missing or not text.
    pub fn on_missing(mut self, m: OnMissing) -> Self {
        self.on_missing = m;
        self
    }

    /// Keeps the source text in the output record (dropped by default, to
    /// free its memory early).
    pub fn keep_text(mut self, keep: bool) -> Self {
        self.keep_text = keep;
        self
    }

    /// Documents per micro-batch handed to a worker, in [`MICRO_BATCH`]
    /// (1 to 65,536; checked when the operator starts).
    pub fn micro_batch(mut self, n: usize) -> Self {
        self.micro_batch = n;
        self
    }

    /// Gives each worker its own copy of the tokenizer instead of sharing
    /// one. Off by default: the copies start with cold word caches and
    /// multiply the vocabulary's memory, and on the W1 benchmark sharing was
    /// about 30% faster (the tokenizer is safe to share, and its word cache
    /// never blocks: lookups and inserts are try-locks).
    pub fn per_worker_tokenizers(mut self, on: bool) -> Self {
        self.per_worker = on;
        self
    }

    /// The id of a token of the vocabulary, by its text.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.token_to_id(token)
    }

    fn lookup(
        &self,
        given: Option<u32>,
        names: &[&str],
        which: &'static str,
    ) -> crate::Result<u32> {
        given
            .or_else(|| names.iter().find_map(|n| self.tokenizer.token_to_id(n)))
            .ok_or_else(|| Error::Config {
                key: which,
                message: format!("no id given and the vocabulary has none of {names:?}"),
            })
    }

    /// Checks the configuration: special token ids resolve, lengths are sane.
    pub fn check(&self) -> crate::Result<()> {
        self.prepare().map(|_| ())
    }

    pub(super) fn prepare(&self) -> crate::Result<Prepared> {
        let (bos, eos) = match self.special {
            SpecialTokens::None | SpecialTokens::TokenizerDefault => (None, None),
            SpecialTokens::Bos => (Some(self.lookup(self.bos_id, BOS_NAMES, "bos_id")?), None),
            SpecialTokens::Eos => (None, Some(self.lookup(self.eos_id, EOS_NAMES, "eos_id")?)),
            SpecialTokens::BosEos => (
                Some(self.lookup(self.bos_id, BOS_NAMES, "bos_id")?),
                Some(self.lookup(self.eos_id, EOS_NAMES, "eos_id")?),
            ),
        };
        Error::in_range(MICRO_BATCH, "tokenize.micro_batch", self.micro_batch)?;
        let n_special = match self.special {
            SpecialTokens::TokenizerDefault => self
                .tokenizer
                .get_post_processor()
                .map_or(0, |p| tokenizers::PostProcessor::added_tokens(p, false)),
            _ => bos.is_some() as usize + eos.is_some() as usize,
        };
        let pad = if self.padding {
            if self.max_length.is_none() {
                return Err(Error::Config {
                    key: "tokenize.padding",
                    message: "pads to max_length, which is not set".into(),
                });
            }
            Some(
                self.pad_id
                    .or_else(|| PAD_NAMES.iter().find_map(|n| self.tokenizer.token_to_id(n)))
                    .map_or_else(|| self.lookup(self.eos_id, EOS_NAMES, "pad_id"), Ok)?,
            )
        } else {
            None
        };
        if let Some(m) = self.max_length {
            Error::in_range(SEQ_LEN, "tokenize.max_length", m)?;
            let min = if self.overflow == Overflow::Truncate {
                n_special + 1
            } else {
                1
            };
            if m < min {
                return Err(Error::Config {
                    key: "tokenize.max_length",
                    message: format!("{m} leaves no room for text (at least {min})"),
                });
            }
        }
        Ok(Prepared {
            config: self.clone(),
            bos,
            eos,
            n_special,
            pad,
            pool: Mutex::new(Vec::new()),
        })
    }
}
