//! The `pack_sequences` stream adapter.

use super::{PackConfig, Packer};
use crate::stats::TextStats;
use futures::Stream;
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use zephon_core::obs::{Explain, Probe, StageDescription};
use zephon_core::{Record, Result};

/// Packs tokenized records into rows of at most `max_length` tokens with a
/// [`Packer`]: per lane, sequentially, deterministic. Each row carries
/// `input_ids`, `segment_ids` (documents numbered from 1) and
/// `position_ids` (restarting at every segment); its lineage holds every
/// source document.
///
/// Created by [`TextPipelineExt::pack_sequences`](crate::TextPipelineExt::pack_sequences).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner, Value};
/// use zephon_ops::{PackAlgorithm, PackConfig, TextPipelineExt};
/// let docs = [3usize, 5, 2, 6].map(|n| Ok(Record::new().with("input_ids", Value::Tokens(vec![7; n]))));
/// let rows: Vec<Record> = futures::stream::iter(docs)
///     .pack_sequences(PackConfig::new(8, PackAlgorithm::BestFit))
///     .into_blocking_iter(Runner::Inline)?
///     .collect::<Result<_, _>>()?;
/// let lens: Vec<usize> = rows.iter().map(|r| r.tokens("input_ids").unwrap().len()).collect();
/// assert_eq!(lens, vec![8, 8]);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct PackSequences<S> {
    #[pin]
    inner: S,
    packer: Packer,
    done: bool,
    probe: Probe,
}

impl<S> PackSequences<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, config: PackConfig) -> Self {
        PackSequences {
            inner,
            packer: Packer::new(config),
            done: false,
            probe: Probe::default(),
        }
    }

    /// Counts into `stats` (shared with other operators) instead of its own.
    pub fn with_stats(mut self, stats: Arc<TextStats>) -> Self {
        self.packer = self.packer.with_stats(stats);
        self
    }

    /// The statistics this operator counts into.
    pub fn stats(&self) -> Arc<TextStats> {
        self.packer.stats().clone()
    }
}

impl<S> fmt::Debug for PackSequences<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackSequences")
            .field("config", self.packer.config())
            .field("ready", &self.packer.ready())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<S> Stream for PackSequences<S>
where
    S: Stream<Item = Result<Record>>,
{
    type Item = Result<Record>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        this.probe.attach("pack_sequences", 1, None);
        loop {
            if let Some(r) = this.packer.pop() {
                this.probe.output();
                return Poll::Ready(Some(Ok(r)));
            }
            if *this.done {
                this.probe.finish();
                return Poll::Ready(None);
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(r))) => {
                    this.probe.input();
                    let t = this.probe.sample();
                    let pushed = this.packer.push(r);
                    this.probe.sampled(t);
                    if let Err(e) = pushed {
                        return Poll::Ready(Some(Err(e.into())));
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    *this.done = true;
                    this.packer.finish();
                }
                Poll::Pending => {
                    this.probe.input_pending();
                    return Poll::Pending;
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // Rows merge documents (fewer) or cut them (more): only what is
        // already packed is certain.
        let ready = self.packer.ready();
        if self.done {
            (ready, Some(ready))
        } else {
            (ready, None)
        }
    }
}

impl<S: Explain> Explain for PackSequences<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        let c = self.packer.config();
        out.push(StageDescription::new(
            "pack_sequences",
            1,
            None,
            format!("{:?}, rows of {}, per lane", c.algorithm, c.max_length),
        ));
    }
}
