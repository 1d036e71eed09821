//! `tokenize`: documents to token ids with a Hugging Face `tokenizer.json`,
//! micro-batches encoded on worker threads, output order = input order.

use crate::error::Error;
use crate::fields;
use crate::stats::TextStats;
use futures::Stream;
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use zephon_core::obs::{Explain, StageDescription};
use zephon_core::settings::PARALLELISM;
use zephon_core::{Record, Result};

mod config;
mod encoding;
mod prepared;

pub use config::{DEFAULT_MICRO_BATCH, OnMissing, Overflow, SpecialTokens, TokenizeConfig};
pub(crate) use encoding::{ChunkEncoder, Encoding};
use prepared::Prepared;

/// Runs `encode`, a call into the tokenizer, with a panic of its made an
/// error message: a tokenizer's configuration is input, and the `tokenizers`
/// crate panics on some of it at encode time (a pre-tokenizer's regular
/// expression that backtracks past Oniguruma's retry limit on a text), so
/// a text it cannot take fails that sample, naming it, like any encoding
/// error.
///
/// ```
/// use zephon_ops::tokenize::guarded_encode;
/// assert_eq!(guarded_encode(|| Ok(3)), Ok(3));
/// let e = guarded_encode::<u32>(|| panic!("retry-limit-in-match over")).unwrap_err();
/// assert_eq!(e, "the tokenizer failed on this text (retry-limit-in-match over)");
/// ```
///
/// The panic is not printed: the error reports it, with the sample, where
/// the pipeline reports errors. The process's panic hook is wrapped once to
/// skip the panics raised inside this call, and passes every other panic
/// on to the hook it replaced.
pub fn guarded_encode<T>(
    encode: impl FnOnce() -> tokenizers::Result<T>,
) -> std::result::Result<T, String> {
    quiet_hook();
    let caught = {
        let was = ENCODING.replace(true);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(encode));
        ENCODING.set(was);
        caught
    };
    match caught {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(p) => Err(format!(
            "the tokenizer failed on this text ({})",
            zephon_core::error::panic_message(&*p)
        )),
    }
}

thread_local! {
    /// Whether this thread is inside [`guarded_encode`], whose panics are
    /// errors of the sample and not printed.
    static ENCODING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Wraps the process's panic hook, once, to skip panics raised inside
/// [`guarded_encode`]; every other panic goes to the hook it replaced.
fn quiet_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !ENCODING.get() {
                previous(info);
            }
        }));
    });
}

/// A counting semaphore for worker threads: at most `limit` micro-batches
/// encode at once, however many are queued; a tuner may move the limit.
#[derive(Debug)]
pub(crate) struct Gate {
    /// (encoding now, the limit).
    state: Mutex<(usize, usize)>,
    cv: Condvar,
}

pub(crate) struct Permit<'a>(&'a Gate);

impl Gate {
    pub(crate) fn new(k: usize) -> Self {
        Gate {
            state: Mutex::new((0, k.max(1))),
            cv: Condvar::new(),
        }
    }

    pub(crate) fn enter(&self) -> Permit<'_> {
        // A poisoned lock only means another worker panicked mid-count; the
        // count itself is still right.
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.0 >= s.1 {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.0 += 1;
        Permit(self)
    }

    /// From now on at most `k` (at least one) at once: a raised limit lets
    /// waiting workers in, a lowered one lets none in until enough left.
    pub(crate) fn set_limit(&self, k: usize) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = k.max(1);
        self.cv.notify_all();
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner()).0 -= 1;
        self.0.cv.notify_one();
    }
}

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
/// # let json = include_bytes!("../../tests/fixtures/tokenizer.json");
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
    enc: Encoding<S, Prepared>,
}

impl<S> Tokenize<S> {
    /// Wraps `inner` with `config`, `parallelism` micro-batches in flight,
    /// in [`PARALLELISM`] (1 to 4096). An out-of-range `parallelism` or
    /// option of `config` makes the first poll return an error naming it,
    /// and the stream end.
    pub fn new(inner: S, config: TokenizeConfig, parallelism: usize) -> Self {
        let prepared = Error::in_range(PARALLELISM, "tokenize.parallelism", parallelism)
            .and_then(|_| config.prepare());
        let k = parallelism.clamp(1, PARALLELISM.max as usize);
        Tokenize {
            enc: Encoding::new("tokenize", inner, prepared, k),
        }
    }

    /// Takes the parallelism from `knob` from now on, read again on every
    /// poll, so a [`Tuner`](zephon_core::tune::Tuner) (or the user) may move
    /// it while the pipeline runs; the output does not change. The knob's
    /// largest value sizes the operator's queue.
    ///
    /// ```
    /// use zephon_core::knob::Knob;
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_ops::{TextPipelineExt, TokenizeConfig};
    /// # let json = include_bytes!("../../tests/fixtures/tokenizer.json");
    /// let knob = Knob::parallelism("tokenize", 1, 4)?;
    /// let docs = (0..50).map(|i| Ok(Record::new().with("text", format!("document {i}"))));
    /// let mut it = futures::stream::iter(docs)
    ///     .tokenize(TokenizeConfig::from_bytes(json)?, 1)
    ///     .tuned(&knob)
    ///     .into_blocking_iter(Runner::threads())?;
    /// let first = it.next().unwrap()?;
    /// knob.set(4, "the consumer waits");
    /// assert_eq!(it.count(), 49);
    /// assert!(!first.tokens("input_ids").unwrap().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tuned(mut self, knob: &zephon_core::knob::Knob) -> Self {
        self.enc.tune(knob);
        self
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

impl<S: fmt::Debug> fmt::Debug for Tokenize<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Tokenize");
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
impl<S> futures::stream::FusedStream for Tokenize<S>
where
    S: Stream<Item = Result<Record>>,
{
    fn is_terminated(&self) -> bool {
        self.enc.is_terminated()
    }
}

impl<S> Stream for Tokenize<S>
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

impl<S: Explain> Explain for Tokenize<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.enc.get_ref().describe(out);
        let detail = match &self.enc.prepared {
            Ok(p) => format!(
                "`{}` -> `{}`, micro-batches of {}{}",
                p.config.field,
                fields::INPUT_IDS,
                p.config.micro_batch,
                self.enc
                    .knob
                    .as_ref()
                    .map_or(String::new(), zephon_core::knob::Knob::explain)
            ),
            Err(e) => zephon_core::settings::explain_detail(
                e.as_ref(),
                "invalid configuration (already reported)".into(),
            ),
        };
        // The micro-batch size and the worker count are execution settings:
        // left out of what shapes the data.
        let data = self.enc.prepared.as_ref().ok().map(|p| {
            let c = &p.config;
            format!("{c:?}, padding {} pad {:?}", c.padding, c.pad_id)
        });
        out.push(
            StageDescription::new("tokenize", self.enc.k, None, detail)
                .with_data(data.unwrap_or_default()),
        );
    }
}
