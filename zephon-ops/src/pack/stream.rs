//! The `pack_sequences` stream adapter.

use super::cut::SharedPacker;
use super::{PackConfig, Packer};
use crate::stats::TextStats;
use futures::Stream;
use pin_project::pin_project;
use std::collections::BTreeMap;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use zephon_core::checkpoint::cut::{Arrival, CutSource, Restoring};
use zephon_core::context::Probe;
use zephon_core::context::{CutRole, Joined};
use zephon_core::obs::{Explain, StageDescription};
use zephon_core::{LaneId, Record, Result};

/// Packs tokenized records into rows of at most `max_length` tokens with a
/// [`Packer`]: per lane, sequentially, deterministic. Each row carries
/// `input_ids`, `segment_ids` (documents numbered from 1) and
/// `position_ids` (restarting at every segment); its lineage holds every
/// source document.
///
/// On a restore, packing's cut lists its bins as pieces of documents, which
/// the work source sends again through the operators upstream: those must
/// make the same records from the same input (fetch, `map_par` with a pure
/// function, `tokenize`), or take part in the cut themselves with a state
/// of their own (the protocol of `zephon_core::checkpoint::cut`). An
/// operator whose output depends on more than its input record (a running
/// count, a random draw) makes other documents, and the restore is an
/// error saying so, naming the lane.
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
    // Shared with the checkpoint board, which reads a lane's bins when one
    // of its batches leaves.
    packer: Arc<SharedPacker>,
    done: bool,
    probe: Probe,
    /// It returned `None`: the end, for `FusedStream`.
    terminated: bool,
    restoring: Option<Restoring>,
    /// Documents of a restoring lane's cut that arrived so far.
    restored_docs: BTreeMap<LaneId, Vec<Record>>,
    // An out-of-range option, reported by the first poll (a chain method
    // cannot return it).
    invalid: Option<crate::Error>,
}

fn lock(p: &SharedPacker) -> MutexGuard<'_, Packer> {
    p.0.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S> PackSequences<S> {
    /// Wraps `inner`. A `config` that [`PackConfig::validate`] refuses
    /// makes the first poll return that error, and the stream end.
    pub fn new(inner: S, config: PackConfig) -> Self {
        crate::register_checkpoint_checks();
        PackSequences {
            invalid: config.validate().err(),
            inner,
            packer: Arc::new(SharedPacker(Mutex::new(Packer::new(config)))),
            done: false,
            probe: Probe::default(),
            terminated: false,
            restoring: None,
            restored_docs: BTreeMap::new(),
        }
    }

    /// Counts into `stats` (shared with other operators) instead of its own.
    pub fn with_stats(self, stats: Arc<TextStats>) -> Self {
        {
            let mut p = lock(&self.packer);
            let config = p.config().clone();
            let packer = std::mem::replace(&mut *p, Packer::new(config));
            *p = packer.with_stats(stats);
        }
        self
    }

    /// The statistics this operator counts into.
    pub fn stats(&self) -> Arc<TextStats> {
        lock(&self.packer).stats().clone()
    }
}

impl<S> PackSequences<S> {
    zephon_core::adapter_accessors!(inner);
}

impl<S: fmt::Debug> fmt::Debug for PackSequences<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = lock(&self.packer);
        f.debug_struct("PackSequences")
            .field("inner", &self.inner)
            .field("config", p.config())
            .field("ready", &p.ready())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<S> PackSequences<S>
where
    S: Stream<Item = Result<Record>>,
{
    // The operator's step; `poll_next` notes the end.
    fn poll_body(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<<Self as futures::Stream>::Item>> {
        let mut this = self.project();
        if let Some(e) = this.invalid.take() {
            *this.done = true;
            return Poll::Ready(Some(Err(e.into())));
        }
        let packer = &*this.packer;
        let joined = this.probe.join("pack_sequences", 1, None, || {
            CutRole::Source(Arc::downgrade(packer) as Weak<dyn CutSource>)
        });
        match joined {
            Ok(Some(Joined { board, plan })) => {
                lock(this.packer).track_cuts();
                *this.restoring = Some(Restoring::new(plan, board));
            }
            Ok(None) => {}
            Err(e) => return Poll::Ready(Some(Err(e))),
        }
        loop {
            {
                let mut p = lock(this.packer);
                if let Some(r) = p.pop() {
                    this.probe.output();
                    return Poll::Ready(Some(Ok(r)));
                }
                if *this.done {
                    this.probe.finish();
                    return Poll::Ready(None);
                }
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(r))) => {
                    this.probe.input();
                    let lane = r.lane;
                    let r = match this.restoring.as_mut() {
                        Some(rs) => match rs.arrive(lane) {
                            // Belongs to an operator further down.
                            Arrival::Pass => return Poll::Ready(Some(Ok(r))),
                            Arrival::Own(cut) => {
                                let cut = cut.clone();
                                let need = cut.preamble_len() as usize;
                                let docs = this.restored_docs.entry(lane).or_default();
                                // An empty section: the cut applies before this
                                // element, which is then packed as usual.
                                let normal = if need == 0 {
                                    Some(r)
                                } else {
                                    docs.push(r);
                                    None
                                };
                                if docs.len() == need {
                                    let docs = this.restored_docs.remove(&lane).unwrap_or_default();
                                    rs.done(lane);
                                    let masks = super::masks::doc_masks(&docs);
                                    let mut p = lock(this.packer);
                                    if let Err(e) = p.restore_lane(lane, &cut, docs) {
                                        return Poll::Ready(Some(Err(e)));
                                    }
                                    p.restore_masks(lane, &cut, &masks);
                                }
                                match normal {
                                    Some(r) => r,
                                    None => continue,
                                }
                            }
                            Arrival::Normal => r,
                        },
                        None => r,
                    };
                    let t = this.probe.sample();
                    let pushed = lock(this.packer).push(r);
                    this.probe.sampled(t);
                    if let Err(e) = pushed {
                        return Poll::Ready(Some(Err(e.into())));
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    *this.done = true;
                    lock(this.packer).finish();
                }
                Poll::Pending => {
                    this.probe.input_pending();
                    return Poll::Pending;
                }
            }
        }
    }
}

impl<S> Stream for PackSequences<S>
where
    S: Stream<Item = Result<Record>>,
{
    type Item = Result<Record>;

    fn size_hint(&self) -> (usize, Option<usize>) {
        // Rows merge documents (fewer) or cut them (more): only what is
        // already packed is certain.
        let ready = lock(&self.packer).ready();
        if self.done {
            (ready, Some(ready))
        } else {
            (ready, None)
        }
    }

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let out = self.as_mut().poll_body(cx);
        if matches!(out, std::task::Poll::Ready(None)) {
            *self.project().terminated = true;
        }
        out
    }
}

// Ended once it returned `None`.
impl<S> futures::stream::FusedStream for PackSequences<S>
where
    S: Stream<Item = Result<Record>>,
{
    fn is_terminated(&self) -> bool {
        self.terminated
    }
}

impl<S: Explain> Explain for PackSequences<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        let c = lock(&self.packer).config().clone();
        out.push(
            StageDescription::new(
                "pack_sequences",
                1,
                None,
                zephon_core::settings::explain_detail(
                    self.invalid.as_ref(),
                    format!("{:?}, rows of {}, per lane", c.algorithm, c.max_length),
                ),
            )
            .with_data(&c),
        );
    }
}
