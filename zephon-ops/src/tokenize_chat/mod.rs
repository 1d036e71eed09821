//! `tokenize_chat`: conversations to token ids and an assistant-only loss
//! mask, rendered with the tokenizer's chat template (minijinja),
//! micro-batches encoded on worker threads, output order = input order.

use crate::error::Error;
use crate::fields;
use crate::stats::TextStats;
use crate::tokenize::{ChunkEncoder, Encoding};
use futures::Stream;
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use zephon_core::obs::{Explain, StageDescription};
use zephon_core::settings::PARALLELISM;
use zephon_core::{Record, Result};

mod config;
mod filters;
mod guard;
#[cfg(test)]
mod guard_props;
mod limits;
mod operators;
mod prepared;
mod stack;
mod template;
mod tojson;

pub use config::{ChatTokenizeConfig, LOSS_MASK, MESSAGES};
pub use limits::{
    MAX_FILTER_CHAIN, MAX_OPERATOR_CHAIN, MAX_RENDER_BYTES, MAX_STRING_BYTES, MAX_TEMPLATE_BYTES,
    MAX_VALUE_DEPTH, MAX_VALUE_ELEMENTS,
};
use prepared::Prepared;
pub use template::{TEMPLATE_FUEL, TEMPLATE_FUEL_RANGE};

/// Renders the conversation of every record (a list of `{role, content}`
/// messages in [`MESSAGES`]) with the chat template, tokenizes it once, and
/// writes [`fields::INPUT_IDS`] and a loss mask ([`LOSS_MASK`], 1 on the
/// assistant tokens the model learns), as Python Zephon's `tokenize_chat`
/// does. A template with `{% generation %}` blocks marks the assistant
/// output itself; without them, each assistant turn is what rendering it
/// adds after the generation prompt (two renderings of a prefix per turn,
/// at most 4 GiB of text in all for one conversation: past it, an error
/// naming the sample). One rendering writes at most [`MAX_RENDER_BYTES`],
/// and one operator or filter of the template makes at most
/// [`MAX_STRING_BYTES`] of text (see [`MAX_VALUE_ELEMENTS`] for the
/// structures it prints). A conversation left with fewer than
/// two ids or nothing supervised is dropped (counted in
/// [`TextStats::chat_dropped`]); one that cannot be rendered is an error
/// naming the sample and the template line. Up to `parallelism`
/// micro-batches encode at once; the output order equals the input order.
///
/// Created by [`TextPipelineExt::tokenize_chat`](crate::TextPipelineExt::tokenize_chat).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner, Value};
/// use zephon_ops::{ChatTokenizeConfig, TextPipelineExt};
/// # let json = include_bytes!("../../tests/fixtures/tokenizer.json");
/// let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n\
///     {% if m.role == 'assistant' %}{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}\
///     {% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}";
/// let config = ChatTokenizeConfig::from_bytes(json)?
///     .chat_template(chatml)
///     .eos_token("<|endoftext|>")
///     .system_prompt("Be brief.");
/// let chat = serde_json::json!([
///     {"role": "user", "content": "Two plus two?"},
///     {"role": "assistant", "content": "Four."},
/// ]);
/// let out: Vec<Record> = futures::stream::iter([Ok(Record::new().with("messages", Value::Json(chat)))])
///     .tokenize_chat(config, 2)
///     .into_blocking_iter(Runner::threads())?
///     .collect::<Result<_, _>>()?;
/// let (ids, mask) = (out[0].tokens("input_ids").unwrap(), out[0].tokens("loss_mask").unwrap());
/// assert_eq!(ids.len(), mask.len());
/// assert_eq!(mask[0], 0);
/// assert_eq!(mask.last(), Some(&1)); // the EOS closing the assistant turn
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct TokenizeChat<S> {
    #[pin]
    enc: Encoding<S, Prepared>,
}

impl<S> TokenizeChat<S> {
    /// Wraps `inner` with `config`, `parallelism` micro-batches in flight,
    /// in [`PARALLELISM`] (1 to 4096). An out-of-range `parallelism` or
    /// option of `config` makes the first poll return an error naming it,
    /// and the stream end.
    pub fn new(inner: S, config: ChatTokenizeConfig, parallelism: usize) -> Self {
        let prepared = Error::in_range(PARALLELISM, "tokenize_chat.parallelism", parallelism)
            .and_then(|_| config.prepare());
        let k = parallelism.clamp(1, PARALLELISM.max as usize);
        TokenizeChat {
            enc: Encoding::new("tokenize_chat", inner, prepared, k),
        }
    }

    /// Counts into `stats` (shared with other operators) instead of its own.
    pub fn with_stats(mut self, stats: Arc<TextStats>) -> Self {
        self.enc.stats = stats;
        self
    }

    /// The statistics this operator counts into.
    pub fn stats(&self) -> Arc<TextStats> {
        self.enc.stats.clone()
    }

    /// The stream this adapter reads from.
    pub fn get_ref(&self) -> &S {
        self.enc.get_ref()
    }

    /// The stream this adapter reads from, mutably. Taking items from it
    /// directly bypasses this adapter.
    pub fn get_mut(&mut self) -> &mut S {
        self.enc.get_mut()
    }

    /// The stream this adapter reads from; what the adapter holds
    /// (buffered or in-flight elements) is dropped.
    pub fn into_inner(self) -> S {
        self.enc.into_inner()
    }
}

impl<S: fmt::Debug> fmt::Debug for TokenizeChat<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("TokenizeChat");
        d.field("inner", self.enc.get_ref());
        if let Ok(p) = &self.enc.prepared {
            d.field("config", &p.config);
        }
        d.field("parallelism", &self.enc.k)
            .field("in_flight", &self.enc.in_flight())
            .finish_non_exhaustive()
    }
}

// Ended once it returned `None`.
impl<S> futures::stream::FusedStream for TokenizeChat<S>
where
    S: Stream<Item = Result<Record>>,
{
    fn is_terminated(&self) -> bool {
        self.enc.is_terminated()
    }
}

impl<S> Stream for TokenizeChat<S>
where
    S: Stream<Item = Result<Record>>,
{
    type Item = Result<Record>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.project().enc.poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.enc.size_hint()
    }
}

impl ChunkEncoder for Prepared {
    fn micro_batch(&self) -> usize {
        self.config.micro_batch
    }

    fn encode_chunk(&self, items: Vec<Result<Record>>, stats: &TextStats) -> Vec<Result<Record>> {
        Prepared::encode_chunk(self, items, stats)
    }
}

impl<S: Explain> Explain for TokenizeChat<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.enc.get_ref().describe(out);
        let detail = match &self.enc.prepared {
            Ok(p) => format!(
                "`{}` -> `{}` + `{}`, micro-batches of {}",
                p.config.field,
                fields::INPUT_IDS,
                p.config.mask_field,
                p.config.micro_batch
            ),
            Err(e) => zephon_core::settings::explain_detail(
                e.as_ref(),
                "invalid configuration (already reported)".into(),
            ),
        };
        // The template's text by its hash: a checkpoint keeps its identity,
        // not a copy.
        let data = self.enc.prepared.as_ref().ok().map(|p| {
            let c = &p.config;
            let template = c
                .template
                .as_deref()
                .map(|t| zephon_core::hash::bytes(t.as_bytes()));
            format!(
                "{c:?}, template {template:?}, system prompt {:?}, vars {:?}, raw {}",
                c.system_prompt, c.vars, c.raw
            )
        });
        out.push(
            StageDescription::new("tokenize_chat", self.enc.k, None, detail)
                .with_data(data.unwrap_or_default()),
        );
    }
}
