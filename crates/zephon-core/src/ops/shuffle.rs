//! `shuffle`: a per-lane buffer shuffle seeded from the elements themselves.

use crate::error::Result;
use crate::hash::{combine, key};
use crate::obs::{Explain, Probe, StageDescription};
use crate::pointer::{Identity, LaneId, Laned};
use futures::Stream;
use pin_project::pin_project;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

/// How the buffer is shuffled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShuffleMode {
    /// Streaming reservoir: once the buffer is full, each new element takes
    /// the place of a buffered one, which is emitted.
    #[default]
    Reservoir,
    /// Fill a block of `buffer_size`, permute it, emit it whole.
    Block,
}

/// Buffer shuffle, per lane. Every random choice is seeded from the seed and
/// the identity of the elements involved, never from a counter or the clock,
/// so the output depends only on the input sequence of each lane.
///
/// Created by [`PipelineExt::shuffle`](crate::PipelineExt::shuffle).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner, ShuffleMode, Value};
/// let recs = (0..50).map(|i| Ok(Record::new().with("i", i as i64)));
/// let out: Vec<Record> = futures::stream::iter(recs).shuffle(16, ShuffleMode::Reservoir, 7)
///     .into_blocking_iter(Runner::Inline).unwrap().map(Result::unwrap).collect();
/// let ids: Vec<i64> = out.iter().map(|r| r.get("i").and_then(Value::as_int).unwrap()).collect();
/// let mut sorted = ids.clone();
/// sorted.sort();
/// assert_eq!(sorted, (0..50).collect::<Vec<_>>()); // a permutation...
/// assert_ne!(ids, sorted); // ...that is not the input order
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct Shuffle<S, T> {
    #[pin]
    inner: S,
    buffer_size: usize,
    mode: ShuffleMode,
    seed: u64,
    lanes: BTreeMap<LaneId, Vec<T>>,
    out: VecDeque<T>,
    done: bool,
    probe: Probe,
}

impl<S, T> Shuffle<S, T> {
    /// Shuffles `inner` with a buffer of `buffer_size` elements per lane.
    pub fn new(inner: S, buffer_size: usize, mode: ShuffleMode, seed: u64) -> Self {
        Shuffle {
            inner,
            buffer_size: buffer_size.max(1),
            mode,
            seed,
            lanes: BTreeMap::new(),
            out: VecDeque::new(),
            done: false,
            probe: Probe::default(),
        }
    }

    /// Elements currently buffered, over all lanes.
    pub fn buffered(&self) -> usize {
        self.lanes.values().map(Vec::len).sum()
    }
}

impl<S, T> fmt::Debug for Shuffle<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shuffle")
            .field("buffer_size", &self.buffer_size)
            .field("mode", &self.mode)
            .field("seed", &self.seed)
            .field("buffered", &self.buffered())
            .finish_non_exhaustive()
    }
}

/// Permutes `items` with an RNG seeded from the seed and their identities.
pub(crate) fn permute_by_identity<T: Identity>(seed: u64, items: &mut [T]) {
    let h = items.iter().fold(key(&[seed, items.len() as u64]), |h, x| {
        combine(h, x.identity())
    });
    items.shuffle(&mut ChaCha8Rng::seed_from_u64(h));
}

impl<S, T> Stream for Shuffle<S, T>
where
    S: Stream<Item = Result<T>>,
    T: Laned + Identity,
{
    type Item = Result<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        this.probe
            .attach("shuffle", 1, Some(*this.buffer_size as u64));
        loop {
            if let Some(x) = this.out.pop_front() {
                this.probe.output();
                return Poll::Ready(Some(Ok(x)));
            }
            if *this.done {
                this.probe.finish();
                return Poll::Ready(None);
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(x))) => {
                    this.probe.input();
                    let t = this.probe.sample();
                    let n = *this.buffer_size;
                    let buf = this.lanes.entry(x.lane()).or_default();
                    if let Some(s) = this.probe.stats() {
                        s.max_queue.observe(buf.len() as u64 + 1);
                    }
                    match this.mode {
                        ShuffleMode::Reservoir => {
                            if buf.len() < n {
                                buf.push(x);
                            } else {
                                let j = (combine(*this.seed, x.identity()) % n as u64) as usize;
                                let old = std::mem::replace(&mut buf[j], x);
                                this.probe.sampled(t);
                                this.probe.output();
                                return Poll::Ready(Some(Ok(old)));
                            }
                        }
                        ShuffleMode::Block => {
                            buf.push(x);
                            if buf.len() == n {
                                permute_by_identity(*this.seed, buf);
                                this.out.extend(buf.drain(..));
                            }
                        }
                    }
                    this.probe.sampled(t);
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    *this.done = true;
                    // Lane order, so the flush is deterministic.
                    for buf in this.lanes.values_mut() {
                        permute_by_identity(*this.seed, buf);
                        this.out.extend(buf.drain(..));
                    }
                }
                Poll::Pending => {
                    this.probe.input_pending();
                    return Poll::Pending;
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (lo, hi) = self.inner.size_hint();
        let extra = self.out.len() + self.buffered();
        (lo + extra, hi.map(|h| h + extra))
    }
}

impl<S: Explain, T> Explain for Shuffle<S, T> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(StageDescription::new(
            "shuffle",
            1,
            Some(self.buffer_size as u64),
            format!("{:?} per lane, seed {}", self.mode, self.seed).to_lowercase(),
        ));
    }
}
