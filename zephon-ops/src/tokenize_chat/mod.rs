//! `tokenize_chat`: conversations to token ids and an assistant-only loss
//! mask, rendered with the tokenizer's chat template (minijinja),
//! micro-batches encoded on worker threads, output order = input order.

use crate::error::Error;
use crate::fields;
use crate::stats::TextStats;
use crate::tokenize::{Gate, REORDER_SLACK};
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use pin_project::pin_project;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use zephon_core::obs::{Explain, Probe, StageDescription};
use zephon_core::ops::micro_batch::take_ready;
use zephon_core::runner::offload;
use zephon_core::settings::PARALLELISM;
use zephon_core::{Record, Result};

mod config;
mod prepared;
mod template;
mod tojson;

pub use config::{ChatTokenizeConfig, LOSS_MASK, MESSAGES};
use prepared::Prepared;

type Chunk = BoxFuture<'static, (u64, Result<Vec<Result<Record>>>)>;

/// Renders the conversation of every record (a list of `{role, content}`
/// messages in [`MESSAGES`]) with the chat template, tokenizes it once, and
/// writes [`fields::INPUT_IDS`] and a loss mask ([`LOSS_MASK`], 1 on the
/// assistant tokens the model learns), as Python Zephon's `tokenize_chat`
/// does. A template with `{% generation %}` blocks marks the assistant
/// output itself; without them, each assistant turn is what rendering it
/// adds after the generation prompt. A conversation left with fewer than
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
    inner: S,
    prepared: std::result::Result<Arc<Prepared>, Option<Error>>,
    stats: Arc<TextStats>,
    k: usize,
    gate: Arc<Gate>,
    pending: Vec<Result<Record>>,
    // Running micro-batches: a finished one frees its worker at once, even
    // when an earlier one is still encoding; re-sequencing happens in
    // `finished`, so every worker stays busy and the order is kept.
    in_flight: FuturesUnordered<Chunk>,
    finished: BTreeMap<u64, Result<Vec<Result<Record>>>>,
    next_dispatch: u64,
    next_emit: u64,
    ready: VecDeque<Result<Record>>,
    done: bool,
    probe: Probe,
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
            inner,
            prepared: prepared.map(Arc::new).map_err(Some),
            stats: Arc::new(TextStats::default()),
            k,
            gate: Arc::new(Gate::new(k)),
            pending: Vec::new(),
            in_flight: FuturesUnordered::new(),
            finished: BTreeMap::new(),
            next_dispatch: 0,
            next_emit: 0,
            ready: VecDeque::new(),
            done: false,
            probe: Probe::default(),
        }
    }

    /// Counts into `stats` (shared with other operators) instead of its own.
    pub fn with_stats(mut self, stats: Arc<TextStats>) -> Self {
        self.stats = stats;
        self
    }

    /// The statistics this operator counts into.
    pub fn stats(&self) -> Arc<TextStats> {
        self.stats.clone()
    }
}

impl<S> fmt::Debug for TokenizeChat<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("TokenizeChat");
        if let Ok(p) = &self.prepared {
            d.field("config", &p.config);
        }
        d.field("parallelism", &self.k)
            .field("in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

impl<S> Stream for TokenizeChat<S>
where
    S: Stream<Item = Result<Record>>,
{
    type Item = Result<Record>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        let prepared = match this.prepared {
            Ok(p) => p.clone(),
            Err(e) => return Poll::Ready(e.take().map(|e| Err(e.into()))),
        };
        let micro = prepared.config.micro_batch;
        this.probe
            .attach("tokenize_chat", *this.k, Some((2 * *this.k * micro) as u64));
        loop {
            if let Some(r) = this.ready.pop_front() {
                this.probe.output();
                return Poll::Ready(Some(r));
            }
            if let Some(chunk) = this.finished.remove(this.next_emit) {
                *this.next_emit += 1;
                match chunk {
                    Ok(out) => this.ready.extend(out),
                    Err(e) => return Poll::Ready(Some(Err(e))),
                }
                continue;
            }
            let outstanding = |d: u64, e: u64| (d - e) as usize;
            // Twice `k` handed out, `k` encoding: a worker that finishes
            // starts on a queued micro-batch at once, instead of idling
            // until this task is scheduled to hand out the next one.
            while this.in_flight.len() < 2 * *this.k
                && outstanding(*this.next_dispatch, *this.next_emit) < *this.k * REORDER_SLACK
                && !*this.done
            {
                // Take what is ready now, up to one micro-batch; never wait
                // to fill it.
                let upstream_pending = take_ready(
                    this.inner.as_mut(),
                    cx,
                    this.pending,
                    micro,
                    this.probe,
                    this.done,
                );
                if this.pending.is_empty() {
                    if upstream_pending && this.in_flight.is_empty() {
                        this.probe.input_pending();
                    }
                    break;
                }
                let items = std::mem::replace(this.pending, Vec::with_capacity(micro));
                let (p, stats, seq) = (prepared.clone(), this.stats.clone(), *this.next_dispatch);
                *this.next_dispatch += 1;
                let gate = this.gate.clone();
                let op = this.probe.shared();
                let work = offload("tokenize_chat", move || {
                    let _permit = gate.enter();
                    let (n, t) = (
                        items.len() as u64,
                        op.as_ref().map(|_| std::time::Instant::now()),
                    );
                    let out = p.encode_chunk(items, &stats);
                    if let (Some(op), Some(t)) = (&op, t) {
                        op.busy.record_many(t.elapsed().as_nanos() as u64, n);
                    }
                    out
                });
                if let Some(s) = this.probe.stats() {
                    s.max_queue.observe(this.in_flight.len() as u64 + 1);
                }
                this.in_flight
                    .push(Box::pin(async move { (seq, work.await) }));
                if upstream_pending {
                    break;
                }
            }
            match this.in_flight.poll_next_unpin(cx) {
                Poll::Ready(Some((seq, out))) => {
                    this.finished.insert(seq, out);
                }
                Poll::Ready(None) if *this.done && this.finished.is_empty() => {
                    this.probe.finish();
                    return Poll::Ready(None);
                }
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.prepared.is_err() {
            return (0, Some(1));
        }
        // Skips shrink the output and splits grow it: only the lower bound
        // of what is already finished is certain.
        (self.ready.len(), None)
    }
}

impl<S: Explain> Explain for TokenizeChat<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        let detail = match &self.prepared {
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
        out.push(StageDescription::new("tokenize_chat", self.k, None, detail));
    }
}
