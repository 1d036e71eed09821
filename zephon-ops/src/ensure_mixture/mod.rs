//! `ensure_mixture`: reorders records so that the token (or sample) share of
//! each source dataset tracks the target weights.
//!
//! A work source mixes datasets by samples; when their documents differ in
//! length, the token mixture the model sees drifts from the target. This
//! operator buffers records per source dataset (from the first pointer of the
//! lineage) and emits, with smooth weighted round robin over what has been
//! emitted so far, the dataset furthest behind its target share.

pub(crate) mod cut;

use crate::fields;
use crate::stats::TextStats;
use cut::{Restored, Shared};
use futures::Stream;
use pin_project::pin_project;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use zephon_core::checkpoint::cut::{Arrival, CutSource, Restoring};
use zephon_core::context::Probe;
use zephon_core::context::{CutRole, Joined};
use zephon_core::obs::{Explain, StageDescription};
use zephon_core::settings::BUFFER_SIZE;
use zephon_core::{Identity, Record, Result};

/// What a record weighs in the mixture.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightBy {
    /// Its number of tokens ([`fields::INPUT_IDS`]).
    #[default]
    Tokens,
    /// One per record.
    Samples,
}

/// The options of `ensure_mixture`.
#[derive(Clone, Debug, PartialEq)]
pub struct MixtureConfig {
    weights: BTreeMap<u32, f64>,
    weight_by: WeightBy,
    max_buffer_size: usize,
    drop_surplus: bool,
}

impl MixtureConfig {
    /// Target weights by dataset index (as in the lineage's pointers);
    /// normalised to sum to one. Records of other datasets pass through.
    /// Every weight must be finite and positive (see
    /// [`validate`](Self::validate)).
    pub fn new(weights: impl IntoIterator<Item = (u32, f64)>) -> Self {
        let weights: BTreeMap<u32, f64> = weights.into_iter().collect();
        // Divided by an infinite sum every weight was 0, and refused as
        // not positive.
        let scale = zephon_core::work::weight_scale(weights.values().copied());
        let sum: f64 = weights.values().map(|w| w / scale).sum();
        MixtureConfig {
            weights: weights
                .into_iter()
                .map(|(d, w)| (d, w / scale / sum))
                .collect(),
            weight_by: WeightBy::Tokens,
            max_buffer_size: 1024,
            drop_surplus: false,
        }
    }

    /// The target weights by dataset, normalised to sum to one.
    pub fn weights(&self) -> &BTreeMap<u32, f64> {
        &self.weights
    }

    /// Tokens (default) or samples.
    pub fn weight_by(mut self, w: WeightBy) -> Self {
        self.weight_by = w;
        self
    }

    /// Records held per lane at most (default 1024), in [`BUFFER_SIZE`]
    /// (1 to 16 Mi). When full and the dataset furthest behind has nothing
    /// buffered, the next most behind is emitted instead, and the mixture
    /// drifts.
    pub fn max_buffer_size(mut self, n: usize) -> Self {
        self.max_buffer_size = n;
        self
    }

    /// Checks the weights (at least one; each finite and positive) and the
    /// buffer size; [`EnsureMixture`] reports the error at its first poll.
    ///
    /// ```
    /// use zephon_ops::MixtureConfig;
    /// assert!(MixtureConfig::new([(0, 0.7), (1, 0.3)]).validate().is_ok());
    /// let e = MixtureConfig::new([(0, f64::NAN)]).validate().unwrap_err();
    /// assert!(e.to_string().contains("ensure_mixture.weights"), "{e}");
    /// // Weights whose sum overflows keep their proportions.
    /// let big = MixtureConfig::new([(0, 1e308), (1, 1e308), (2, 5e307)]);
    /// assert!(big.validate().is_ok());
    /// assert_eq!(big.weights()[&2], 0.2);
    /// ```
    pub fn validate(&self) -> std::result::Result<(), crate::Error> {
        let bad = |message: String| crate::Error::Config {
            key: "ensure_mixture.weights",
            message,
        };
        if self.weights.is_empty() {
            return Err(bad("no dataset weights".into()));
        }
        // Normalised weights are finite and positive exactly when the
        // given ones were (and their sum was).
        if let Some((d, w)) = self
            .weights
            .iter()
            .find(|(_, w)| !(w.is_finite() && **w > 0.0))
        {
            return Err(bad(format!(
                "dataset {d}: weight {w} after normalising; every weight must be finite and positive"
            )));
        }
        crate::Error::in_range(
            BUFFER_SIZE,
            "ensure_mixture.max_buffer_size",
            self.max_buffer_size,
        )?;
        Ok(())
    }

    /// Holds the mixture exactly: when the buffer is full, the oldest record
    /// of the dataset furthest ahead of its share is dropped instead of
    /// emitted, and at the end what would overshoot is dropped. Drops are
    /// counted in [`TextStats::mixture_dropped`].
    pub fn drop_surplus(mut self, on: bool) -> Self {
        self.drop_surplus = on;
        self
    }
}

#[derive(Debug, Default)]
struct LaneMix {
    queues: BTreeMap<u32, VecDeque<(Record, f64)>>,
    buffered: usize,
    emitted: BTreeMap<u32, f64>,
    total: f64,
    /// Records of the lane consumed, and the identity of the last (for the
    /// lane cuts of a checkpointed pipeline).
    consumed: u64,
    last: Option<u64>,
    /// Records of the lane emitted.
    sent: u64,
}

/// What `r` weighs in the mixture.
fn weight(c: &MixtureConfig, r: &Record) -> Result<f64> {
    match c.weight_by {
        WeightBy::Samples => Ok(1.0),
        WeightBy::Tokens => match r.token_ids(fields::INPUT_IDS) {
            Some(t) => Ok(t.len() as f64),
            None => {
                Err(crate::Error::missing("ensure_mixture", fields::INPUT_IDS, "tokens", r).into())
            }
        },
    }
}

impl LaneMix {
    /// Datasets by how far behind their share they are, most behind first.
    fn deficit(&self, c: &MixtureConfig, d: u32) -> f64 {
        c.weights[&d] * self.total - self.emitted.get(&d).copied().unwrap_or(0.0)
    }

    fn most_behind(&self, c: &MixtureConfig, nonempty_only: bool) -> Option<u32> {
        c.weights
            .keys()
            .copied()
            .filter(|d| !nonempty_only || self.queues.get(d).is_some_and(|q| !q.is_empty()))
            .fold(None, |best: Option<(u32, f64)>, d| {
                let x = self.deficit(c, d);
                match best {
                    Some((_, bx)) if bx >= x => best,
                    _ => Some((d, x)),
                }
            })
            .map(|(d, _)| d)
    }

    fn most_ahead(&self, c: &MixtureConfig) -> Option<u32> {
        c.weights
            .keys()
            .copied()
            .filter(|d| self.queues.get(d).is_some_and(|q| !q.is_empty()))
            .fold(None, |best: Option<(u32, f64)>, d| {
                let x = self.deficit(c, d);
                match best {
                    Some((_, bx)) if bx <= x => best,
                    _ => Some((d, x)),
                }
            })
            .map(|(d, _)| d)
    }

    fn pop(&mut self, d: u32) -> Option<(Record, f64)> {
        let item = self.queues.get_mut(&d)?.pop_front()?;
        self.buffered -= 1;
        Some(item)
    }

    fn emit(&mut self, d: u32, out: &mut VecDeque<Record>) -> bool {
        match self.pop(d) {
            Some((r, w)) => {
                *self.emitted.entry(d).or_default() += w;
                self.total += w;
                out.push_back(r);
                true
            }
            None => false,
        }
    }

    /// Emits while the dataset most behind has something buffered; when the
    /// buffer is full (or at the end) falls back per the configuration.
    fn drain(&mut self, c: &MixtureConfig, end: bool, st: &TextStats, out: &mut VecDeque<Record>) {
        loop {
            let Some(want) = self.most_behind(c, false) else {
                return;
            };
            if self.emit(want, out) {
                continue;
            }
            if self.buffered == 0 || (!end && self.buffered < c.max_buffer_size) {
                return;
            }
            if c.drop_surplus {
                if end {
                    st.mixture_dropped.add(self.buffered as u64);
                    self.queues.clear();
                    self.buffered = 0;
                    return;
                }
                if let Some(d) = self.most_ahead(c) {
                    self.pop(d);
                    st.mixture_dropped.inc();
                }
            } else if let Some(d) = self.most_behind(c, true) {
                self.emit(d, out);
            }
        }
    }
}

/// Reorders records per lane so that each source dataset's share of tokens
/// (or samples) tracks the target weights; see the [module](self) docs.
/// Deterministic: the output depends only on the lane's input order. In a
/// checkpointed pipeline its lane cut lists the queued records' pointers and
/// the emitted weights, so a restore puts the deficits back exactly.
///
/// Created by [`TextPipelineExt::ensure_mixture`](crate::TextPipelineExt::ensure_mixture).
///
/// ```
/// use zephon_core::{Lineage, PipelineExt, Record, Runner, SamplePtr, Value};
/// use zephon_ops::{MixtureConfig, TextPipelineExt};
/// // Dataset 0 has 1-token documents, dataset 1 has 4-token ones, arriving
/// // one for one; the target is an even split of tokens.
/// let recs = (0..40u64).map(|i| {
///     let d = (i % 2) as u32;
///     let mut r = Record::new().with("input_ids", Value::Tokens(vec![0; 1 + 3 * d as usize]));
///     r.lineage = Lineage::from_elem(SamplePtr { dataset: d, shard: 0, sample: i, lane: 0 }, 1);
///     Ok(r)
/// });
/// let out: Vec<Record> = futures::stream::iter(recs)
///     .ensure_mixture(MixtureConfig::new([(0, 0.5), (1, 0.5)]).drop_surplus(true))
///     .into_blocking_iter(Runner::Inline)?
///     .collect::<Result<_, _>>()?;
/// let tokens = |d| out.iter().filter(|r| r.lineage[0].dataset == d)
///     .map(|r| r.tokens("input_ids").unwrap().len()).sum::<usize>();
/// assert_eq!((tokens(0), tokens(1)), (20, 20));
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct EnsureMixture<S> {
    #[pin]
    inner: S,
    config: MixtureConfig,
    // Shared with the checkpoint board, which reads a lane's cut when one
    // of its batches leaves.
    state: Arc<Shared>,
    stats: Arc<TextStats>,
    probe: Probe,
    /// It returned `None`: the end, for `FusedStream`.
    terminated: bool,
    restoring: Option<Restoring>,
    // An invalid configuration, reported by the first poll (a chain method
    // cannot return it).
    invalid: Option<crate::Error>,
}

impl<S> EnsureMixture<S> {
    /// Wraps `inner`. A `config` that [`MixtureConfig::validate`] refuses
    /// makes the first poll return that error, and the stream end.
    pub fn new(inner: S, config: MixtureConfig) -> Self {
        crate::register_checkpoint_checks();
        EnsureMixture {
            invalid: config.validate().err(),
            inner,
            config,
            state: Arc::default(),
            stats: Arc::new(TextStats::default()),
            probe: Probe::default(),
            terminated: false,
            restoring: None,
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

impl<S> EnsureMixture<S> {
    zephon_core::adapter_accessors!(inner);
}

impl<S: fmt::Debug> fmt::Debug for EnsureMixture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state.lock();
        f.debug_struct("EnsureMixture")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .field(
                "buffered",
                &st.lanes.values().map(|l| l.buffered).sum::<usize>(),
            )
            .field("done", &st.done)
            .finish_non_exhaustive()
    }
}

impl<S> EnsureMixture<S>
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
            this.state.lock().done = true;
            return Poll::Ready(Some(Err(e.into())));
        }
        let state = &*this.state;
        let joined = this.probe.join(
            "ensure_mixture",
            1,
            Some(this.config.max_buffer_size as u64),
            || CutRole::Source(Arc::downgrade(state) as Weak<dyn CutSource>),
        );
        match joined {
            Ok(Some(Joined { board, plan })) => {
                // Until a restoring lane is back, its state is the cut
                // itself (a batch may leave before that).
                let mut st = this.state.lock();
                for (&lane, (_, cut)) in &plan {
                    st.restoring.insert(lane, (cut.clone(), None, 0));
                }
                *this.restoring = Some(Restoring::new(plan, board));
            }
            Ok(None) => {}
            Err(e) => return Poll::Ready(Some(Err(e))),
        }
        loop {
            {
                let mut st = this.state.lock();
                if let Some(r) = st.out.pop_front() {
                    st.lanes.entry(r.lane).or_default().sent += 1;
                    this.probe.output();
                    return Poll::Ready(Some(Ok(r)));
                }
                if st.done {
                    this.probe.finish();
                    return Poll::Ready(None);
                }
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(r))) => {
                    this.probe.input();
                    let lane_id = r.lane;
                    let mut st = this.state.lock();
                    let r = match this.restoring.as_mut().map(|x| x.arrive(lane_id)) {
                        Some(Arrival::Pass) => {
                            this.probe.output();
                            return Poll::Ready(Some(Ok(r)));
                        }
                        Some(Arrival::Own(cut)) => {
                            let cut = cut.clone();
                            let (restored, finished) =
                                match st.restore_one(this.config, lane_id, &cut, r) {
                                    Ok(x) => x,
                                    Err(e) => return Poll::Ready(Some(Err(e))),
                                };
                            if finished && let Some(x) = this.restoring.as_mut() {
                                x.done(lane_id);
                            }
                            match restored {
                                Restored::Absorbed => continue,
                                Restored::Normal(r) => r,
                            }
                        }
                        _ => r,
                    };
                    let st = &mut *st;
                    // Left over only when the restore fell back to a replay;
                    // empty otherwise, so the common path pays one check.
                    if !st.restoring.is_empty() {
                        st.restoring.remove(&lane_id);
                    }
                    let lane = st.lanes.entry(lane_id).or_default();
                    lane.consumed += 1;
                    lane.last = this.restoring.is_some().then(|| r.identity());
                    let Some(d) = r
                        .source()
                        .map(|p| p.dataset)
                        .filter(|d| this.config.weights.contains_key(d))
                    else {
                        st.out.push_back(r);
                        continue;
                    };
                    let w = match weight(this.config, &r) {
                        Ok(w) => w,
                        Err(e) => return Poll::Ready(Some(Err(e))),
                    };
                    let t = this.probe.sample();
                    lane.queues.entry(d).or_default().push_back((r, w));
                    lane.buffered += 1;
                    if let Some(s) = this.probe.stats() {
                        s.max_queue.observe(lane.buffered as u64);
                    }
                    lane.drain(this.config, false, this.stats, &mut st.out);
                    this.probe.sampled(t);
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    let mut st = this.state.lock();
                    let st = &mut *st;
                    st.done = true;
                    for lane in st.lanes.values_mut() {
                        lane.drain(this.config, true, this.stats, &mut st.out);
                    }
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S> Stream for EnsureMixture<S>
where
    S: Stream<Item = Result<Record>>,
{
    type Item = Result<Record>;

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (_, hi) = self.inner.size_hint();
        let st = self.state.lock();
        let held = st.out.len() + st.lanes.values().map(|l| l.buffered).sum::<usize>();
        (st.out.len(), hi.and_then(|h| h.checked_add(held)))
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
impl<S> futures::stream::FusedStream for EnsureMixture<S>
where
    S: Stream<Item = Result<Record>>,
{
    fn is_terminated(&self) -> bool {
        self.terminated
    }
}

impl<S: Explain> Explain for EnsureMixture<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(
            StageDescription::new(
                "ensure_mixture",
                1,
                Some(self.config.max_buffer_size as u64),
                zephon_core::settings::explain_detail(
                    self.invalid.as_ref(),
                    format!("by {:?}, per lane", self.config.weight_by).to_lowercase(),
                ),
            )
            .with_data(&self.config),
        );
    }
}
