//! `shuffle`: a per-lane buffer shuffle seeded from the elements themselves.

mod cut;

use crate::context::Probe;
use crate::context::{CutRole, Joined};
use crate::cut::PtrJournal;
use crate::cut::{Arrival, CutSource, Restoring};
use crate::error::{Error, Result};
use crate::hash::{combine, key};
use crate::obs::{Explain, StageDescription};
use crate::pointer::{Identity, LaneId, Laned};
use crate::settings::BUFFER_SIZE;
use cut::{Core, LaneRestore, Restored};
pub(crate) use cut::{NAME, check_state};
use futures::Stream;
use pin_project::pin_project;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
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
    /// Blocks as [`Block`](ShuffleMode::Block), but each lane's first block
    /// is small (`buffer_size / 16`, between 1 and 128) and each next one
    /// 1.5 times the last (at least one more), up to `buffer_size`: the
    /// first elements leave soon after the start. Block boundaries are a
    /// function of the lane's position alone (see [`warmup_block`]), so the
    /// output is as deterministic and restorable as `Block`'s.
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner, ShuffleMode, Value};
    /// let recs = (0..100).map(|i| Ok(Record::new().with("i", i as i64)));
    /// let out: Vec<i64> = futures::stream::iter(recs).shuffle(64, ShuffleMode::BlockWarmup, 7)
    ///     .into_blocking_iter(Runner::Inline).unwrap()
    ///     .map(|r| r.unwrap().get("i").and_then(Value::as_int).unwrap()).collect();
    /// // Blocks of 4, 6, 9, 14, 21, 32, 48, then 64: the first four are the first four in.
    /// let mut first: Vec<i64> = out[..4].to_vec();
    /// first.sort();
    /// assert_eq!(first, vec![0, 1, 2, 3]);
    /// ```
    #[serde(rename = "block_warmup")]
    BlockWarmup,
}

/// The size of the block a `BlockWarmup` shuffle of `buffer_size` starts at
/// lane position `start` (a block boundary), and the previous block's start
/// (`None` for the first): sizes `buffer_size / 16` clamped to 1..=128, then
/// each `max(last + 1, ceil(last * 1.5))`, at most `buffer_size`.
///
/// ```
/// use zephon_core::ops::shuffle::warmup_block;
/// assert_eq!(warmup_block(64, 0), 4);
/// assert_eq!(warmup_block(64, 4), 6);
/// assert_eq!(warmup_block(64, 4 + 6 + 9 + 14 + 21 + 32), 48);
/// assert_eq!(warmup_block(64, 4 + 6 + 9 + 14 + 21 + 32 + 48 + 64), 64);
/// assert_eq!(warmup_block(1, 5), 1);
/// ```
pub fn warmup_block(buffer_size: u64, start: u64) -> u64 {
    warmup_bounds(buffer_size, start).1
}

/// For a lane that consumed `consumed` elements: the start of the block
/// being filled, its size, and the range of the last complete block.
pub(crate) fn warmup_bounds(n: u64, consumed: u64) -> (u64, u64, Option<(u64, u64)>) {
    let n = n.max(1);
    let mut t = (n / 16).clamp(1, 128).min(n);
    let mut s = 0;
    let mut prev = None;
    while t < n && s + t <= consumed {
        prev = Some((s, s + t));
        s += t;
        t = n.min((t + 1).max((t * 3).div_ceil(2)));
    }
    if t >= n {
        let k = (consumed - s) / n;
        if k > 0 {
            prev = Some((s + (k - 1) * n, s + k * n));
            s += k * n;
        }
    }
    (s, t, prev)
}

/// The start of the block being filled after `consumed` elements, its
/// size, and the last complete block, for either block mode.
pub(crate) fn block_bounds(
    mode: ShuffleMode,
    n: u64,
    consumed: u64,
) -> (u64, u64, Option<(u64, u64)>) {
    match mode {
        ShuffleMode::BlockWarmup => warmup_bounds(n, consumed),
        _ => {
            let s = consumed - consumed % n;
            (s, n, (s >= n).then(|| (s - n, s)))
        }
    }
}

/// Buffer shuffle, per lane. Every random choice is seeded from the seed and
/// what the lane's input sequence fixes (a reservoir slot from the lane and
/// the element's position in it, a block permutation from the identities of
/// its elements), never from the clock or anything a performance knob
/// changes, so the output depends only on the input sequence of each lane.
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
    // Shared with the checkpoint board, which reads a lane's cut when one of
    // its batches leaves; locked once per element otherwise uncontended.
    core: Arc<Mutex<Core<T>>>,
    restoring: Option<Restoring>,
    probe: Probe,
    // An out-of-range buffer size, reported by the first poll (a chain
    // method cannot return it).
    invalid: Option<Error>,
}

impl<S, T> Shuffle<S, T> {
    /// Shuffles with a buffer of `buffer_size` per lane, in [`BUFFER_SIZE`]
    /// (1 to 16 Mi): any other size makes the first poll return an
    /// [`Error::Config`] naming `shuffle.buffer_size`.
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner, ShuffleMode};
    /// let recs = futures::stream::iter(vec![Ok(Record::new())]);
    /// let mut it = recs.shuffle(0, ShuffleMode::Block, 1).into_blocking_iter(Runner::Inline).unwrap();
    /// assert!(it.next().unwrap().unwrap_err().to_string().contains("shuffle.buffer_size"));
    /// ```
    pub fn new(inner: S, buffer_size: usize, mode: ShuffleMode, seed: u64) -> Self {
        let invalid = BUFFER_SIZE
            .check_usize("shuffle.buffer_size", buffer_size)
            .err();
        let buffer_size = buffer_size.clamp(1, BUFFER_SIZE.max as usize);
        Shuffle {
            invalid,
            inner,
            buffer_size,
            mode,
            seed,
            core: Arc::new(Mutex::new(Core {
                mode,
                buffer_size,
                seed,
                lanes: BTreeMap::new(),
                out: VecDeque::new(),
                out_lane: None,
                out_ptrs: None,
                done: false,
                refused: None,
            })),
            restoring: None,
            probe: Probe::default(),
        }
    }

    /// Elements buffered, over all lanes.
    pub fn buffered(&self) -> usize {
        let c = self.core.lock().unwrap_or_else(|e| e.into_inner());
        c.lanes.values().map(|l| l.buf.len()).sum()
    }
}

impl<S, T> Shuffle<S, T> {
    crate::adapter_accessors!(inner);
}

impl<S: fmt::Debug, T> fmt::Debug for Shuffle<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shuffle")
            .field("inner", &self.inner)
            .field("buffer_size", &self.buffer_size)
            .field("mode", &self.mode)
            .field("seed", &self.seed)
            .field("buffered", &self.buffered())
            .finish_non_exhaustive()
    }
}

fn permute_by_identity<T: Identity>(seed: u64, items: &mut [T]) {
    let h = items.iter().fold(key(&[seed, items.len() as u64]), |h, x| {
        combine(h, x.identity())
    });
    items.shuffle(&mut ChaCha8Rng::seed_from_u64(h));
}

/// The reservoir slot the element at position `pos` of `lane`'s input
/// replaces (once the buffer is full). A function of the position, not of the
/// element: a restore finds what a buffer holds from hashes alone, and looks
/// up only the pointers it keeps.
fn reservoir_slot(seed: u64, lane: LaneId, pos: u64, buffer_size: u64) -> u64 {
    key(&[seed, lane as u64, pos]) % buffer_size
}

// Ends after the input did and the buffers drained.
impl<S, T> futures::stream::FusedStream for Shuffle<S, T>
where
    S: Stream<Item = Result<T>>,
    T: Laned + Identity + Send + 'static,
{
    fn is_terminated(&self) -> bool {
        let core = self.core.lock().unwrap_or_else(|e| e.into_inner());
        self.invalid.is_none() && core.done && core.out.is_empty()
    }
}

impl<S, T> Stream for Shuffle<S, T>
where
    S: Stream<Item = Result<T>>,
    T: Laned + Identity + Send + 'static,
{
    type Item = Result<T>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if let Some(e) = this.invalid.take() {
            this.core.lock().unwrap_or_else(|e| e.into_inner()).done = true;
            return Poll::Ready(Some(Err(e)));
        }
        let core = &*this.core;
        match this
            .probe
            .join("shuffle", 1, Some(*this.buffer_size as u64), || {
                CutRole::Source(Arc::downgrade(core) as Weak<dyn CutSource>)
            }) {
            Ok(Some(Joined { board, plan })) => {
                // Until a restoring lane's buffer is back, its state is
                // the cut itself (a batch may leave before that).
                let mut core = this.core.lock().unwrap_or_else(|e| e.into_inner());
                for (&lane, (_, cut)) in &plan {
                    core.lanes.entry(lane).or_default().restoring =
                        Some(LaneRestore::new(cut.clone()));
                }
                *this.restoring = Some(Restoring::new(plan, board));
            }
            Ok(None) => {}
            Err(e) => return Poll::Ready(Some(Err(e))),
        }
        loop {
            {
                let mut core = this.core.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(x) = core.out.pop_front() {
                    if core.out.is_empty() {
                        core.out_lane = None;
                        core.out_ptrs = None;
                    }
                    let cutting = this.restoring.is_some();
                    core.lanes
                        .entry(x.lane())
                        .or_default()
                        .sent
                        .note_sent(&x, cutting);
                    this.probe.output();
                    return Poll::Ready(Some(Ok(x)));
                }
                if core.done {
                    this.probe.finish();
                    return Poll::Ready(None);
                }
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(x))) => {
                    this.probe.input();
                    let t = this.probe.sample();
                    let lane = x.lane();
                    let mut core = this.core.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(e) = core.refused.take() {
                        core.done = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                    let x = match this.restoring.as_mut().map(|r| r.arrive(lane)) {
                        Some(Arrival::Pass) => {
                            this.probe.sampled(t);
                            this.probe.output();
                            return Poll::Ready(Some(Ok(x)));
                        }
                        Some(Arrival::Own(_)) => {
                            let (restored, finished) = match core.restore_one(lane, x) {
                                Ok(r) => r,
                                Err(e) => return Poll::Ready(Some(Err(e))),
                            };
                            if finished && let Some(r) = this.restoring.as_mut() {
                                r.done(lane);
                            }
                            match restored {
                                Restored::Emit(x) => {
                                    core.lanes.entry(lane).or_default().sent.note_sent(&x, true);
                                    this.probe.sampled(t);
                                    this.probe.output();
                                    return Poll::Ready(Some(Ok(x)));
                                }
                                Restored::Absorbed => {
                                    this.probe.sampled(t);
                                    continue;
                                }
                                Restored::Normal(x) => x,
                            }
                        }
                        _ => x,
                    };
                    let (n, seed, mode) = (*this.buffer_size, *this.seed, *this.mode);
                    // Identities feed only the lane cuts of a checkpointed
                    // pipeline.
                    let cutting = this.restoring.is_some();
                    let id = if cutting { x.identity() } else { 0 };
                    let core = &mut *core;
                    let lb = core.lanes.entry(lane).or_default();
                    // Left over only when the restore fell back to a replay.
                    lb.restoring = None;
                    lb.slot_order = None;
                    let pos = lb.consumed;
                    lb.consumed += 1;
                    lb.last = cutting.then_some(id);
                    if let Some(s) = this.probe.stats() {
                        // The element coming in joins the buffer, or takes
                        // the place of the one it sends out: never more
                        // than the buffer's size.
                        s.max_queue.observe((lb.buf.len() as u64 + 1).min(n as u64));
                    }
                    match mode {
                        ShuffleMode::Reservoir => {
                            if lb.buf.len() < n {
                                lb.id_sum = lb.id_sum.wrapping_add(id);
                                lb.listed_set(lb.buf.len(), &x);
                                lb.buf.push(x);
                            } else {
                                let j = reservoir_slot(seed, lane, pos, n as u64) as usize;
                                lb.listed_set(j, &x);
                                let old = std::mem::replace(&mut lb.buf[j], x);
                                if cutting {
                                    lb.id_sum =
                                        lb.id_sum.wrapping_add(id).wrapping_sub(old.identity());
                                }
                                lb.sent.note_sent(&old, cutting);
                                this.probe.sampled(t);
                                this.probe.output();
                                return Poll::Ready(Some(Ok(old)));
                            }
                        }
                        ShuffleMode::Block | ShuffleMode::BlockWarmup => {
                            lb.id_sum = lb.id_sum.wrapping_add(id);
                            lb.listed_set(lb.buf.len(), &x);
                            lb.buf.push(x);
                            let start = lb.consumed - lb.buf.len() as u64;
                            let (_, size, _) = block_bounds(mode, n as u64, start);
                            if lb.buf.len() as u64 == size {
                                permute_by_identity(seed, &mut lb.buf);
                                // A listed buffer becomes a listed block.
                                core.out_ptrs = None;
                                if lb.ptrs.is_some() {
                                    match cut::pointers(lb.buf.iter()) {
                                        Some(p) => {
                                            core.out_ptrs = Some(Arc::new(p));
                                            lb.ptrs = Some(PtrJournal::new(Vec::new(), n));
                                        }
                                        None => {
                                            lb.ptrs = None;
                                            lb.unlistable = true;
                                        }
                                    }
                                }
                                core.out.extend(lb.buf.drain(..));
                                core.out_lane = Some(lane);
                                lb.id_sum = 0;
                            }
                        }
                    }
                    this.probe.sampled(t);
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    let mut core = this.core.lock().unwrap_or_else(|e| e.into_inner());
                    let core = &mut *core;
                    core.done = true;
                    // Lane order, so the flush is deterministic.
                    for lb in core.lanes.values_mut() {
                        permute_by_identity(*this.seed, &mut lb.buf);
                        core.out.extend(lb.buf.drain(..));
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
        let extra = {
            let c = self.core.lock().unwrap_or_else(|e| e.into_inner());
            c.out.len() + c.lanes.values().map(|l| l.buf.len()).sum::<usize>()
        };
        (
            lo.saturating_add(extra),
            hi.and_then(|h| h.checked_add(extra)),
        )
    }
}

impl<S: Explain, T> Explain for Shuffle<S, T> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(
            StageDescription::new(
                "shuffle",
                1,
                Some(self.buffer_size as u64),
                crate::settings::explain_detail(
                    self.invalid.as_ref(),
                    format!("{:?} per lane, seed {}", self.mode, self.seed).to_lowercase(),
                ),
            )
            .with_data((self.buffer_size, self.mode, self.seed)),
        );
    }
}
