//! [`CheckpointedStream`]: the async side of [`Checkpointed`](super::Checkpointed).

use super::{Checkpoint, Delivered, Progress};
use crate::error::Result;
use futures::Stream;
use futures::stream::FusedStream;
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A stream of delivered units (batches) that counts what it hands out, so
/// [`checkpoint`](CheckpointedStream::checkpoint) between two awaited steps
/// is exact whatever is still prefetched inside the pipeline. The counterpart
/// of [`Checkpointed`](super::Checkpointed) for async training loops.
///
/// Created by [`CheckpointedStreamExt::checkpointed_stream`].
///
/// ```
/// use futures::StreamExt;
/// use zephon_core::checkpoint::{CheckpointedStreamExt, Recipe, ResumeExt};
/// use zephon_core::{Dataset, PipelineExt, Record, WorkSource};
///
/// # futures::executor::block_on(async {
/// let ds = Dataset::in_memory("toy", vec![(0..24).map(|i| Record::new().with("i", i as i64)).collect()])?;
/// let ws = WorkSource::builder().dataset(ds, 1.0).seed(9).canonical_lanes(2).build()?;
/// let mut progress = Recipe::new(&ws).start(&ws);
/// let mut batches = ws.stream().fetch(2).batch(4)
///     .resume(&mut progress)
///     .checkpointed_stream(progress);
/// while let Some(batch) = batches.next().await {
///     let batch = batch?;
///     if batch.index == 1 { break; } // two steps of two lanes, the last one partly
/// }
/// let ckpt = batches.checkpoint();
/// assert_eq!(ckpt.lanes.values().map(|l| l.batches).collect::<Vec<_>>(), [2, 1]);
/// # Ok::<(), zephon_core::Error>(())
/// # }).unwrap();
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct CheckpointedStream<S> {
    #[pin]
    inner: S,
    progress: Progress,
}

impl<S> CheckpointedStream<S> {
    /// The progress so far.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The checkpoint of everything handed out so far.
    pub fn checkpoint(&self) -> Checkpoint {
        self.progress.checkpoint()
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped stream, mutably. Pulling items from it directly bypasses
    /// the count, so the next checkpoint would be wrong.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped stream.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for CheckpointedStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckpointedStream")
            .field("inner", &self.inner)
            .field("progress", &self.progress)
            .finish()
    }
}

impl<S, T> Stream for CheckpointedStream<S>
where
    S: Stream<Item = Result<T>>,
    T: Delivered,
{
    type Item = Result<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<T>>> {
        let mut this = self.project();
        loop {
            let item = futures::ready!(this.inner.as_mut().poll_next(cx));
            match &item {
                Some(Ok(unit)) => {
                    if let Err(e) = this.progress.check_delivered(unit) {
                        return Poll::Ready(Some(Err(e)));
                    }
                    this.progress.record_delivered(unit);
                    if this.progress.is_skipped(unit) {
                        continue;
                    }
                }
                // The pipeline ran to its end: a merge with ranks that had
                // more data is then of the same step (see `Checkpoint::merge`).
                None => this.progress.mark_ended(),
                Some(Err(_)) => {}
            }
            return Poll::Ready(item);
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<S, T> FusedStream for CheckpointedStream<S>
where
    S: FusedStream<Item = Result<T>>,
    T: Delivered,
{
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }
}

// Counting deliveries adds no stage: the plan is the inner pipeline's.
impl<S: crate::obs::Explain> crate::obs::Explain for CheckpointedStream<S> {
    fn describe(&self, out: &mut Vec<crate::obs::StageDescription>) {
        self.inner.describe(out);
    }
}

/// Adds [`checkpointed_stream`](CheckpointedStreamExt::checkpointed_stream)
/// to streams of delivered units.
pub trait CheckpointedStreamExt: Stream + Sized {
    /// Counts what this stream hands out into `progress`. See
    /// [`CheckpointedStream`].
    fn checkpointed_stream(self, progress: Progress) -> CheckpointedStream<Self> {
        CheckpointedStream {
            inner: self,
            progress,
        }
    }
}

impl<S: Stream> CheckpointedStreamExt for S {}
