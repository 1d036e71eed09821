//! `tokenize`: documents to token ids with a Hugging Face `tokenizer.json`,
//! micro-batches encoded on worker threads, output order = input order.

use crate::error::{Error, PtrDisplay};
use crate::fields;
use crate::stats::TextStats;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use pin_project::pin_project;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use zephon_core::obs::{Explain, Probe, StageDescription};
use zephon_core::runner::offload;
use zephon_core::{Record, Result, Value};

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
    /// Drop the record (counted in [`TextStats`]).
    Skip,
}

const BOS_NAMES: &[&str] = &[
    "<s>",
    "<bos>",
    "<|begin_of_text|>",
    "[CLS]",
    "<|endoftext|>",
];
const EOS_NAMES: &[&str] = &["</s>", "<eos>", "<|endoftext|>", "<|end_of_text|>", "[SEP]"];

/// What [`Tokenize`] does: the tokenizer, the source field, length handling,
/// special tokens. Cheap to clone (the tokenizer is shared).
#[derive(Clone)]
pub struct TokenizeConfig {
    tokenizer: Arc<tokenizers::Tokenizer>,
    field: String,
    max_length: Option<usize>,
    overflow: Overflow,
    special: SpecialTokens,
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    attention_mask: bool,
    on_missing: OnMissing,
    keep_text: bool,
    micro_batch: usize,
    per_worker: bool,
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
    /// Loads a `tokenizer.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> crate::Result<Self> {
        let path = path.as_ref();
        tokenizers::Tokenizer::from_file(path)
            .map(Self::from_tokenizer)
            .map_err(|e| Error::Tokenizer {
                source_name: path.display().to_string(),
                message: e.to_string(),
            })
    }

    /// Parses the bytes of a `tokenizer.json`.
    pub fn from_bytes(bytes: impl AsRef<[u8]>) -> crate::Result<Self> {
        tokenizers::Tokenizer::from_bytes(bytes)
            .map(Self::from_tokenizer)
            .map_err(|e| Error::Tokenizer {
                source_name: "<bytes>".into(),
                message: e.to_string(),
            })
    }

    /// Wraps a tokenizer built in code. Defaults: field `text`, no length
    /// limit, no special tokens, no attention mask, missing field is an error.
    pub fn from_tokenizer(tokenizer: tokenizers::Tokenizer) -> Self {
        TokenizeConfig {
            tokenizer: Arc::new(tokenizer),
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

    /// At most `n` ids per output record, handled by `overflow`.
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

    /// Documents per micro-batch handed to a worker.
    pub fn micro_batch(mut self, n: usize) -> Self {
        self.micro_batch = n.max(1);
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

    fn prepare(&self) -> crate::Result<Prepared> {
        let (bos, eos) = match self.special {
            SpecialTokens::None => (None, None),
            SpecialTokens::Bos => (Some(self.lookup(self.bos_id, BOS_NAMES, "bos_id")?), None),
            SpecialTokens::Eos => (None, Some(self.lookup(self.eos_id, EOS_NAMES, "eos_id")?)),
            SpecialTokens::BosEos => (
                Some(self.lookup(self.bos_id, BOS_NAMES, "bos_id")?),
                Some(self.lookup(self.eos_id, EOS_NAMES, "eos_id")?),
            ),
        };
        let n_special = bos.is_some() as usize + eos.is_some() as usize;
        if let Some(m) = self.max_length {
            let min = if self.overflow == Overflow::Truncate {
                n_special + 1
            } else {
                1
            };
            if m < min {
                return Err(Error::Config {
                    key: "max_length",
                    message: format!("{m} leaves no room for text (at least {min})"),
                });
            }
        }
        Ok(Prepared {
            config: self.clone(),
            bos,
            eos,
            pool: Mutex::new(Vec::new()),
        })
    }
}

/// A resolved configuration plus the per-worker tokenizers.
struct Prepared {
    config: TokenizeConfig,
    bos: Option<u32>,
    eos: Option<u32>,
    // With per-worker tokenizers, one is checked out per micro-batch.
    pool: Mutex<Vec<tokenizers::Tokenizer>>,
}

impl Prepared {
    fn checkout(&self) -> tokenizers::Tokenizer {
        let pooled = self.pool.lock().ok().and_then(|mut p| p.pop());
        pooled.unwrap_or_else(|| (*self.config.tokenizer).clone())
    }

    fn give_back(&self, t: tokenizers::Tokenizer) {
        if let Ok(mut p) = self.pool.lock() {
            p.push(t);
        }
    }

    fn encode_chunk(&self, items: Vec<Result<Record>>, stats: &TextStats) -> Vec<Result<Record>> {
        let tok = self.config.per_worker.then(|| self.checkout());
        let t: &tokenizers::Tokenizer = tok.as_ref().unwrap_or(&self.config.tokenizer);
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Ok(r) => self.encode_one(t, r, stats, &mut out),
                Err(e) => out.push(Err(e)),
            }
        }
        if let Some(tok) = tok {
            self.give_back(tok);
        }
        out
    }

    fn encode_one(
        &self,
        tok: &tokenizers::Tokenizer,
        mut r: Record,
        stats: &TextStats,
        out: &mut Vec<Result<Record>>,
    ) {
        let c = &self.config;
        let text = match r.take(&c.field) {
            Some(Value::Text(t)) => t,
            other => {
                if let Some(v) = other {
                    r.set(c.field.clone(), v);
                }
                match c.on_missing {
                    OnMissing::Skip => stats.skipped_missing.inc(),
                    OnMissing::Error => {
                        out.push(Err(Error::missing("tokenize", &c.field, "text", &r).into()))
                    }
                }
                return;
            }
        };
        let enc = match tok.encode_fast(text.as_str(), false) {
            Ok(e) => e,
            Err(e) => {
                out.push(Err(Error::Encode {
                    field: c.field.clone(),
                    ptr: PtrDisplay(r.source().copied()),
                    message: e.to_string(),
                }
                .into()));
                return;
            }
        };
        if c.keep_text {
            r.set(c.field.clone(), Value::Text(text));
        } else {
            drop(text);
        }
        let body = enc.get_ids();
        let n_special = self.bos.is_some() as usize + self.eos.is_some() as usize;
        let body = match (c.max_length, c.overflow) {
            (Some(m), Overflow::Truncate) if body.len() + n_special > m => {
                stats.truncated_docs.inc();
                stats
                    .truncated_tokens
                    .add((body.len() + n_special - m) as u64);
                &body[..m - n_special]
            }
            _ => body,
        };
        let mut ids = Vec::with_capacity(body.len() + n_special);
        ids.extend(self.bos);
        ids.extend_from_slice(body);
        ids.extend(self.eos);
        stats.docs_tokenized.inc();
        stats.tokens_tokenized.add(ids.len() as u64);
        match c.max_length {
            Some(m) if c.overflow == Overflow::Split && ids.len() > m => {
                stats.split_docs.inc();
                for piece in ids.chunks(m) {
                    out.push(Ok(self.finish(r.clone(), piece.to_vec())));
                }
            }
            _ => out.push(Ok(self.finish(r, ids))),
        }
    }

    fn finish(&self, mut r: Record, ids: Vec<u32>) -> Record {
        if self.config.attention_mask {
            r.set(fields::ATTENTION_MASK, Value::Tokens(vec![1; ids.len()]));
        }
        r.set(fields::INPUT_IDS, Value::Tokens(ids));
        r
    }
}

/// A counting semaphore for worker threads: at most `k` micro-batches
/// encode at once, however many are queued.
#[derive(Debug)]
struct Gate {
    free: Mutex<usize>,
    cv: Condvar,
}

struct Permit<'a>(&'a Gate);

impl Gate {
    fn new(k: usize) -> Self {
        Gate {
            free: Mutex::new(k),
            cv: Condvar::new(),
        }
    }

    fn enter(&self) -> Permit<'_> {
        // A poisoned lock only means another worker panicked mid-count; the
        // count itself is still right.
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.cv.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.0.cv.notify_one();
    }
}

type Chunk = BoxFuture<'static, (u64, Result<Vec<Result<Record>>>)>;

/// Finished micro-batches held for re-sequencing, per running one: bounds
/// the memory a slow head-of-line micro-batch can pin.
const REORDER_SLACK: usize = 4;

/// Tokenizes the text field of every record into [`fields::INPUT_IDS`], with
/// up to `parallelism` micro-batches encoding at once on worker threads (in
/// place under the inline runner). The output order equals the input order
/// for any parallelism. A configuration error (a special token the
/// vocabulary lacks) is the stream's first and only item.
///
/// Created by [`TextPipelineExt::tokenize`](crate::TextPipelineExt::tokenize).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner};
/// use zephon_ops::{SpecialTokens, TextPipelineExt, TokenizeConfig};
/// # let json = include_bytes!("../tests/fixtures/tokenizer.json");
/// let config = TokenizeConfig::from_bytes(json)?.special_tokens(SpecialTokens::Eos);
/// let eos = config.token_id("<|endoftext|>").unwrap();
/// let docs = ["the first document", "and a second"].map(|t| Ok(Record::new().with("text", t)));
/// let out: Vec<Record> = futures::stream::iter(docs)
///     .tokenize(config, 2)
///     .into_blocking_iter(Runner::threads())?
///     .collect::<Result<_, _>>()?;
/// assert_eq!(out.len(), 2);
/// assert_eq!(out[0].tokens("input_ids").unwrap().last(), Some(&eos));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct Tokenize<S> {
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

impl<S> Tokenize<S> {
    /// Wraps `inner` with `config`, `parallelism` micro-batches in flight.
    pub fn new(inner: S, config: TokenizeConfig, parallelism: usize) -> Self {
        Tokenize {
            inner,
            prepared: config.prepare().map(Arc::new).map_err(Some),
            stats: Arc::new(TextStats::default()),
            k: parallelism.max(1),
            gate: Arc::new(Gate::new(parallelism.max(1))),
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

impl<S> fmt::Debug for Tokenize<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Tokenize");
        if let Ok(p) = &self.prepared {
            d.field("config", &p.config);
        }
        d.field("parallelism", &self.k)
            .field("in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

impl<S> Stream for Tokenize<S>
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
            .attach("tokenize", *this.k, Some((2 * *this.k * micro) as u64));
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
                let mut upstream_pending = false;
                while this.pending.len() < micro {
                    match this.inner.as_mut().poll_next(cx) {
                        Poll::Ready(Some(item)) => {
                            this.probe.input();
                            this.pending.push(item);
                        }
                        Poll::Ready(None) => {
                            *this.done = true;
                            break;
                        }
                        Poll::Pending => {
                            upstream_pending = true;
                            break;
                        }
                    }
                }
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
                let work = offload("tokenize", move || {
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

impl<S: Explain> Explain for Tokenize<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        let detail = match &self.prepared {
            Ok(p) => format!(
                "`{}` -> `{}`, micro-batches of {}",
                p.config.field,
                fields::INPUT_IDS,
                p.config.micro_batch
            ),
            Err(_) => "invalid configuration".into(),
        };
        out.push(StageDescription::new("tokenize", self.k, None, detail));
    }
}
