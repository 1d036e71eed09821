//! Lane cuts: what a lane's stateful operators hold right after one of its
//! batches left, in pointer form, so a restore refills them instead of
//! replaying the lane from its start.
//!
//! # The protocol
//!
//! Any stateful operator, of any crate, takes part the same way; zephon's
//! own (`shuffle`, `batch`, the filters, and zephon-ops' `pack_sequences`
//! and `ensure_mixture`) use nothing else. An operator:
//!
//! 1. On its first poll, before polling its input, registers a
//!    [`CutSource`] on the pipeline's [`Board`] under its name: through
//!    [`Probe::join`](crate::obs::Probe::join) with
//!    [`CutRole::Source`](crate::context::CutRole::Source), which attaches it
//!    to the [pipeline context](crate::context) for metrics and `explain()`
//!    in the same call, or directly ([`Board::current`], [`Board::register`]); operators register in pipeline
//!    order from the consumer's end, and a restore refuses a pipeline whose
//!    operators are not those of the checkpoint. It gets back its
//!    [`RestorePlan`]: per lane being restored, its own [`OpLaneCut`] from
//!    the checkpoint and how many preamble elements (those of the operators
//!    downstream of it) to let through first. Until a lane is back, the cut
//!    it answers for that lane is the one being restored.
//! 2. Whenever `batch` finishes a lane-batch, answers [`CutSource::cut`]
//!    for that lane with an [`OpLaneCut`]: what it consumed (`consumed`) and
//!    emitted (`emitted`) on the lane since the run started, the identity of
//!    the last element it consumed (`last_identity`, see
//!    [`Identity`](crate::Identity)), the pointers it needs back first on a
//!    restore (its [`Preamble`]), and whatever else it holds, serialized by
//!    itself ([`OpState`]: a JSON value and a layout version of the
//!    operator's choosing). `None` means the lane cannot be cut now: a
//!    restore replays it. The board asks at every lane-batch: a cut should
//!    cost little (a [`PtrJournal`](super::PtrJournal) shares a long list
//!    between cuts).
//! 3. On a restore, classifies every element it receives with
//!    [`Restoring::arrive`]: [`Arrival::Pass`] elements belong to operators
//!    downstream and go through untouched; [`Arrival::Own`] elements are its
//!    preamble, in the order it listed them, which it takes back (and does
//!    not emit, unless they were in flight, see below). It decodes its state
//!    ([`OpLaneCut::decode_state`], which checks the name and the layout
//!    version) and, once it has taken its [`OpLaneCut::preamble_len`]
//!    elements back, calls [`Restoring::done`] and continues normally. An
//!    operator with an empty preamble gets its cut with the lane's first
//!    element, which it then processes as usual. [`Arrival::Normal`] is
//!    everything else, including every element once the restore fell back
//!    to a replay ([`Board::replaying_all`]): then it drops what it kept of
//!    a restore and processes the lane from its start.
//!
//! The work source emits the preamble: per lane, the preamble of every
//! operator in the cut, downstream first, then the lane's pointers from
//! where the most upstream operator stopped (its `consumed`), after checking
//! that the pointer before that position has the identity it recorded
//! (`last_identity`), so a map between the work source and that operator
//! that changes lineage is noticed before anything is emitted. The pointers
//! of a preamble flow through fetch, tokenize and maps like any data, so the
//! operator gets back the elements, not just pointers.
//!
//! A preamble is usually listed in the cut ([`Preamble::listed`], a
//! [`PtrList`]). An operator that can compute it instead
//! from the work source's pointers (shuffle recomputes its buffer from the
//! positions it consumed) says how many it computes
//! ([`Preamble::computed`]) and overrides [`CutSource::restore_preamble`],
//! which the work source calls, once per lane and before emitting anything,
//! with a [`LaneInput`] that looks up the lane's pointers. The same hook
//! may reorder the preamble (shuffle sends its buffer in shard order so
//! fetch reads runs) and remember how, in the operator's own state.
//!
//! `emitted` ties neighbours together: what an operator emitted beyond what
//! the next one consumed was in flight between them (in a map's
//! micro-batches). Such elements must be the first
//! [`Preamble::in_flight`] of its listed preamble, which the operator emits
//! again on restore; otherwise the lane is not cut. An operator that cannot
//! count what it emitted leaves `emitted` at `None`. An [`InFlightJournal`]
//! per lane keeps the count and the pointers still in flight.
//!
//! The checks on load ([`Checkpoint`](super::Checkpoint)'s) cover every
//! field of this layout: the listed pointers belong to the lane, the counts
//! agree, the state holds no float (an exact restore stores `f64::to_bits`).
//! What only the operator understands it checks when it takes its state
//! back; [`register_state_check`] runs such a check on load too.
//!
//! A cut needs the stretch from the work source to the most upstream stateful
//! operator to be one-to-one (fetch, map, tokenize), or made of filters that
//! say how many elements they read to pass what went downstream (see
//! [`FILTER_OPS`]). Below a filter, positions are no longer the work
//! source's, so a shuffle lists the pointers it holds (kept as a journal,
//! see [`PtrJournal`](super::PtrJournal)) instead of leaving them to be
//! recomputed ([`CutContext::list`] says so). Where a check fails, or where
//! an operator that cannot be cut sits in the pipeline (a filter between two
//! stateful operators, or an operator of another crate attached as
//! [`CutRole::Uncuttable`](crate::context::CutRole::Uncuttable)), the
//! restore replays the lane instead: slower, equally exact.
//!
//! A complete operator from outside the zephon crates, a per-lane
//! near-duplicate filter with a window of recent hashes whose pointers are
//! its preamble, is the `dedup-window` crate under `examples/`. A smaller
//! one, with its state but no preamble:
//!
//! ```
//! use futures::{Stream, StreamExt, ready};
//! use std::collections::BTreeMap;
//! use std::pin::Pin;
//! use std::sync::{Arc, Mutex, Weak};
//! use std::task::{Context, Poll};
//! use zephon_core::checkpoint::cut::{
//!     Arrival, Board, CutContext, CutSource, OpLaneCut, OpState, Restoring,
//! };
//! use zephon_core::checkpoint::{Checkpoint, CheckpointedExt, Recipe, ResumeExt};
//! use zephon_core::{
//!     Dataset, Identity, LaneId, PipelineExt, Record, Result, Runner, ShuffleMode, Tracking, Value,
//!     WorkSource,
//! };
//!
//! /// Per lane: elements consumed, the last one's identity, and the running
//! /// total of their `i` fields, which it writes into each record.
//! #[derive(Default)]
//! struct Lanes(Mutex<BTreeMap<LaneId, (u64, Option<u64>, i64)>>);
//!
//! const NAME: &str = "running_total";
//! const VERSION: u32 = 1;
//!
//! impl CutSource for Lanes {
//!     fn cut(&self, lane: LaneId, _: CutContext) -> Option<OpLaneCut> {
//!         let (consumed, last, total) = self.0.lock().unwrap().get(&lane).copied().unwrap_or_default();
//!         Some(OpLaneCut::new(NAME, consumed)
//!             .with_emitted(consumed)
//!             .with_last_identity(last)
//!             .with_state(OpState::new(VERSION, &total).ok()?))
//!     }
//! }
//!
//! struct RunningTotal<S> {
//!     inner: S,
//!     lanes: Arc<Lanes>,
//!     looked: bool,
//!     restoring: Option<Restoring>,
//! }
//!
//! impl<S: Stream<Item = Result<Record>> + Unpin> Stream for RunningTotal<S> {
//!     type Item = Result<Record>;
//!     fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Record>>> {
//!         let this = &mut *self;
//!         if !this.looked {
//!             this.looked = true;
//!             if let Some(board) = Board::current() {
//!                 let weak: Weak<dyn CutSource> = Arc::downgrade(&this.lanes) as _;
//!                 match board.register(NAME, Some(weak)) {
//!                     Ok(plan) => this.restoring = Some(Restoring::new(plan, board)),
//!                     Err(e) => return Poll::Ready(Some(Err(e))),
//!                 }
//!             }
//!         }
//!         let Some(mut r) = ready!(this.inner.poll_next_unpin(cx)?) else {
//!             return Poll::Ready(None);
//!         };
//!         let lane = r.lane;
//!         if let Some(rs) = &mut this.restoring {
//!             match rs.arrive(lane) {
//!                 // The preamble of an operator downstream.
//!                 Arrival::Pass => return Poll::Ready(Some(Ok(r))),
//!                 // No preamble of its own: the lane's first element
//!                 // brings the cut, and is processed as usual.
//!                 Arrival::Own(cut) => {
//!                     let total: i64 = cut.decode_state(lane, NAME, VERSION)?;
//!                     let entry = (cut.consumed, cut.last_identity, total);
//!                     rs.done(lane);
//!                     this.lanes.0.lock().unwrap().insert(lane, entry);
//!                 }
//!                 Arrival::Normal => {}
//!             }
//!         }
//!         let mut lanes = this.lanes.0.lock().unwrap();
//!         let (consumed, last, total) = lanes.entry(lane).or_default();
//!         *consumed += 1;
//!         *last = Some(r.identity());
//!         *total += r.get("i").and_then(Value::as_int).unwrap_or(0);
//!         r.set("total", *total);
//!         Poll::Ready(Some(Ok(r)))
//!     }
//! }
//!
//! let ds = Dataset::in_memory("toy", vec![(0..40).map(|i| Record::new().with("i", i as i64)).collect()])?;
//! let ws = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(2).seed(3).build()?;
//! let recipe = Recipe::new(&ws);
//! let run = |progress: zephon_core::checkpoint::Progress| -> Result<_> {
//!     let shuffled = ws.stream().fetch(2).shuffle(4, ShuffleMode::Reservoir, 3).boxed();
//!     let totals = RunningTotal { inner: shuffled, lanes: Arc::default(), looked: false, restoring: None };
//!     let mut it = totals.batch(3).resume_from(&progress).lane_mux_from(&progress)
//!         .into_blocking_iter(Runner::Inline)?;
//!     let observer = it.enable_observability(Tracking::Operator);
//!     Ok((it.checkpointed(progress), observer))
//! };
//! let all: Vec<_> = run(recipe.start(&ws))?.0.map(Result::unwrap).collect();
//! let (mut first, _) = run(recipe.start(&ws))?;
//! let head: Vec<_> = first.by_ref().take(5).map(Result::unwrap).collect();
//! let ckpt = Checkpoint::from_bytes(&first.checkpoint().to_bytes())?;
//! assert!(ckpt.cuts.values().all(|c| c.ops.iter().any(|o| o.op == NAME)));
//! let (resumed, observer) = run(recipe.resume(&ws, &ckpt)?)?;
//! let rest: Vec<_> = resumed.map(Result::unwrap).collect();
//! assert_eq!([head, rest].concat(), all);
//! // Restored from the cuts: `resume_from` dropped no replayed batch.
//! let m = observer.metrics_snapshot();
//! let resume = m.operators.iter().find(|o| o.name == "resume_from").unwrap();
//! assert_eq!(resume.elements_in, resume.elements_out);
//! # Ok::<(), zephon_core::Error>(())
//! ```

mod in_flight;

pub use in_flight::InFlightJournal;

use super::PtrList;
use crate::error::{Error, Result};
use crate::pointer::{LaneId, SamplePtr};
use crate::record::lineage_identity;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

/// The pointers an operator needs back first on a restore (its preamble),
/// in the order it takes them back: the listed ones, then `computed` more.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preamble {
    /// Pointers stored in the cut.
    pub listed: PtrList,
    /// Pointers after the listed ones that the operator computes on
    /// restore from the work source's (its [`CutSource::restore_preamble`])
    /// instead of storing them.
    pub computed: u64,
    /// The first `in_flight` listed pointers are elements the operator
    /// emitted that the next stateful operator had not consumed yet (in
    /// flight in a map between the two): a restore emits them again first.
    pub in_flight: u64,
}

impl Preamble {
    /// Elements of the preamble.
    pub fn len(&self) -> u64 {
        // A file may say anything: its checks refuse a sum past u64.
        (self.listed.len() as u64).saturating_add(self.computed)
    }

    /// Whether the operator needs nothing back.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What an operator holds besides its preamble, serialized by the operator
/// itself: a JSON value and the version of its layout, which the operator
/// checks when it takes the state back ([`OpLaneCut::decode_state`]).
///
/// Numbers are integers: a float would not survive the JSON form bit for
/// bit, so [`OpState::new`] refuses one (store `f64::to_bits`). The JSON
/// form of a checkpoint shows the value as it is; the binary form encodes
/// it compactly, with the object keys of all states written once.
///
/// ```
/// use zephon_core::checkpoint::OpState;
/// let s = OpState::new(2, &(7u64, vec![1u32, 2]))?;
/// assert_eq!(s.version(), 2);
/// assert_eq!(s.value(), &serde_json::json!([7, [1, 2]]));
/// assert!(OpState::new(1, &0.5f64).is_err());
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpState {
    version: u32,
    value: serde_json::Value,
}

impl OpState {
    /// `state`, serialized, at layout `version`. Refused when it holds a
    /// float or does not serialize.
    pub fn new<T: Serialize + ?Sized>(version: u32, state: &T) -> Result<Self> {
        let value = serde_json::to_value(state).map_err(|e| state_error(e.to_string()))?;
        Self::from_value(version, value).map_err(state_error)
    }

    /// A state already in JSON form. Refused when it holds a float.
    pub fn from_value(version: u32, value: serde_json::Value) -> std::result::Result<Self, String> {
        if let Some(f) = float_in(&value) {
            return Err(format!(
                "it holds the float {f}, which the JSON form would not keep bit for bit; store f64::to_bits"
            ));
        }
        Ok(OpState { version, value })
    }

    /// Nothing held (version 0, `null`).
    pub fn none() -> Self {
        OpState::default()
    }

    /// The layout version the operator wrote.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The state as JSON.
    pub fn value(&self) -> &serde_json::Value {
        &self.value
    }
}

fn state_error(message: String) -> Error {
    Error::Checkpoint {
        origin: "cut".into(),
        message: format!("an operator state: {message}"),
    }
}

/// A float `v` holds, if it holds one. Taken at every cut, so it only
/// looks: no allocation but the stack of containers still to visit.
fn float_in(v: &serde_json::Value) -> Option<&serde_json::Number> {
    use serde_json::Value as V;
    // What may hold a float; scalars of other kinds are passed over.
    let worth = |x: &&V| x.is_f64() || x.is_array() || x.is_object();
    // Iterative, so a deeply nested value cannot overflow the stack.
    let mut stack: Vec<&V> = Vec::new();
    let mut at = v;
    loop {
        match at {
            V::Number(n) if n.is_f64() => return Some(n),
            V::Array(a) => stack.extend(a.iter().filter(worth)),
            V::Object(o) => stack.extend(o.values().filter(worth)),
            _ => {}
        }
        at = stack.pop()?;
    }
}

/// The JSON form: the version, and the value itself.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StateJson {
    version: u32,
    value: serde_json::Value,
}

impl Serialize for OpState {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            #[derive(Serialize)]
            struct Ref<'a> {
                version: u32,
                value: &'a serde_json::Value,
            }
            Ref {
                version: self.version,
                value: &self.value,
            }
            .serialize(s)
        } else {
            // The binary form is not self-describing: the value as JSON text.
            let text = serde_json::to_string(&self.value).map_err(serde::ser::Error::custom)?;
            (self.version, text).serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for OpState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let (version, value) = if d.is_human_readable() {
            let j = StateJson::deserialize(d)?;
            (j.version, j.value)
        } else {
            let (version, text) = <(u32, String)>::deserialize(d)?;
            let value = serde_json::from_str(&text).map_err(serde::de::Error::custom)?;
            (version, value)
        };
        OpState::from_value(version, value).map_err(serde::de::Error::custom)
    }
}

/// One operator's cut of one lane: what it consumed and emitted, the
/// identity of the last element it consumed, its preamble and its state.
/// See the [module documentation](self).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpLaneCut {
    /// The operator's name, as it registered ([`Board::register`]).
    pub op: String,
    /// Elements of this lane the operator consumed since the run started.
    pub consumed: u64,
    /// Elements of this lane it emitted since the run started, where it
    /// counts them: more than the next stateful operator consumed means
    /// elements were in flight between the two (in a map's micro-batches),
    /// which the cut must list ([`Preamble::in_flight`]) or the lane cannot
    /// be cut.
    pub emitted: Option<u64>,
    /// Identity of the last of them (`None` where the operator cannot tell).
    pub last_identity: Option<u64>,
    /// The pointers it needs back first on a restore.
    pub preamble: Preamble,
    /// Everything else it holds, serialized by itself.
    pub state: OpState,
}

impl OpLaneCut {
    /// The cut of operator `op` after consuming `consumed` elements: nothing
    /// emitted counted, no identity, no preamble, no state; the `with_`
    /// methods fill those in.
    pub fn new(op: impl Into<String>, consumed: u64) -> Self {
        OpLaneCut {
            op: op.into(),
            consumed,
            emitted: None,
            last_identity: None,
            preamble: Preamble::default(),
            state: OpState::none(),
        }
    }

    /// With `emitted` elements emitted.
    pub fn with_emitted(mut self, emitted: u64) -> Self {
        self.emitted = Some(emitted);
        self
    }

    /// With the identity of the last element consumed.
    pub fn with_last_identity(mut self, last: Option<u64>) -> Self {
        self.last_identity = last;
        self
    }

    /// With this preamble.
    pub fn with_preamble(mut self, preamble: Preamble) -> Self {
        self.preamble = preamble;
        self
    }

    /// With this state.
    pub fn with_state(mut self, state: OpState) -> Self {
        self.state = state;
        self
    }

    /// Elements of the restore preamble this operator takes (or emits).
    pub fn preamble_len(&self) -> u64 {
        self.preamble.len()
    }

    /// The operator's state as `T`, after checking that the cut is
    /// operator `op`'s and its state of layout `version`: an error naming
    /// the lane, the operator and both versions otherwise.
    pub fn decode_state<T: DeserializeOwned>(
        &self,
        lane: LaneId,
        op: &str,
        version: u32,
    ) -> Result<T> {
        let fail = |message: String| Error::Checkpoint {
            origin: "restore".into(),
            message: format!("{op}, lane {lane}: {message}"),
        };
        if self.op != op {
            return Err(fail(format!(
                "the checkpoint holds the cut of `{}` where this operator is",
                self.op
            )));
        }
        if self.state.version != version {
            return Err(fail(format!(
                "the checkpoint's state is of layout version {}, this build reads version {version}; \
                 restore with the build that wrote it",
                self.state.version
            )));
        }
        serde_json::from_value(self.state.value.clone())
            .map_err(|e| fail(format!("its state does not decode: {e}")))
    }
}

/// Every stateful operator's cut of one lane, downstream first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneCut {
    /// Per operator, in pipeline order from the consumer's end.
    pub ops: Vec<OpLaneCut>,
}

impl LaneCut {
    /// Lane positions consumed at the source's end of the pipeline: where a
    /// restored work source continues this lane.
    pub fn consumed(&self) -> u64 {
        self.ops.last().map_or(0, |o| o.consumed)
    }

    /// Identity of the last element the most upstream operator consumed.
    pub fn last_identity(&self) -> Option<u64> {
        self.ops.last().and_then(|o| o.last_identity)
    }
}

/// What the board tells an operator when it asks for the operator's cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutContext {
    /// Elements of the lane the next stateful operator downstream consumed
    /// (`None` for the most downstream one).
    pub downstream_consumed: Option<u64>,
    /// A filter sits upstream: positions in this operator's input are not
    /// the work source's, so a preamble must be listed, not computed.
    pub list: bool,
}

/// How a restore sees one lane's input, for an operator computing its
/// preamble ([`CutSource::restore_preamble`]): the lane's pointers by
/// position, and the operators between this one and the work source.
pub struct LaneInput<'a> {
    lane: LaneId,
    consumed: u64,
    record_ids: bool,
    upstream: &'a [OpLaneCut],
    at: &'a mut dyn FnMut(u64) -> Option<SamplePtr>,
}

impl std::fmt::Debug for LaneInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneInput")
            .field("lane", &self.lane)
            .field("consumed", &self.consumed)
            .field("upstream", &self.upstream.len())
            .finish_non_exhaustive()
    }
}

impl<'a> LaneInput<'a> {
    pub(crate) fn new(
        lane: LaneId,
        consumed: u64,
        record_ids: bool,
        upstream: &'a [OpLaneCut],
        at: &'a mut dyn FnMut(u64) -> Option<SamplePtr>,
    ) -> Self {
        LaneInput {
            lane,
            consumed,
            record_ids,
            upstream,
            at,
        }
    }

    /// The lane.
    pub fn lane(&self) -> LaneId {
        self.lane
    }

    /// Positions of the lane the pipeline consumed (the most upstream
    /// operator's `consumed`): the work source continues the lane there.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The cuts of the stateful operators between this one and the work
    /// source, nearest first; empty for the most upstream one, whose input
    /// position `p` is the lane's position `p`.
    pub fn upstream(&self) -> &[OpLaneCut] {
        self.upstream
    }

    /// The work source's pointer at position `pos` of the lane, `None`
    /// past a finite end.
    pub fn pointer_at(&mut self, pos: u64) -> Option<SamplePtr> {
        (self.at)(pos)
    }

    /// The identity (see [`Identity`](crate::Identity)) of the element `p` becomes where the
    /// most upstream operator sees it: a record with lineage `[p]`, or the
    /// bare pointer, as the restore found by checking `last_identity`.
    pub fn identity_of(&self, p: &SamplePtr) -> u64 {
        if self.record_ids {
            lineage_identity(std::slice::from_ref(p))
        } else {
            p.identity()
        }
    }

    /// The cut's listed preamble, each pointer on this lane: what
    /// [`CutSource::restore_preamble`] returns by default. An error when
    /// the cut says some are computed.
    pub fn listed(&self, cut: &OpLaneCut) -> std::result::Result<Vec<SamplePtr>, String> {
        if cut.preamble.computed > 0 {
            return Err(format!(
                "`{}` computes {} preamble pointers but does not say how",
                cut.op, cut.preamble.computed
            ));
        }
        let lane = self.lane;
        Ok(cut
            .preamble
            .listed
            .to_vec()
            .into_iter()
            .map(|p| SamplePtr { lane, ..p })
            .collect())
    }
}

/// An operator's view of its own lane state, read when a batch leaves and
/// asked for its preamble on a restore. See the [module documentation](self).
pub trait CutSource: Send + Sync {
    /// The cut of `lane` now; `None` where it cannot be cut (then the
    /// checkpoint replays the lane).
    fn cut(&self, lane: LaneId, ctx: CutContext) -> Option<OpLaneCut>;

    /// On a restore, before the work source emits anything: the pointers of
    /// this operator's preamble for `cut`'s lane, exactly
    /// [`OpLaneCut::preamble_len`] of them, in the order the operator takes
    /// them back. Called once per restored lane, possibly from several
    /// threads at once (one lane each), after the operator registered.
    ///
    /// The default returns the listed ones ([`LaneInput::listed`]). An
    /// operator that computes its preamble computes it here, from `input`;
    /// it may also reorder it (for reading locality) and remember the order
    /// in its own state. An error makes the restore replay every lane
    /// instead, with a warning giving the reason; an operator that must
    /// refuse the restore instead (shuffle, given a cut of other settings)
    /// keeps the error and returns it from its stream.
    fn restore_preamble(
        &self,
        cut: &OpLaneCut,
        input: &mut LaneInput<'_>,
    ) -> std::result::Result<Vec<SamplePtr>, String> {
        input.listed(cut)
    }
}

/// A check of one operator's state that needs no operator, run on every
/// cut of that operator a checkpoint holds when it is loaded or restored
/// (see [`register_state_check`]). The error says what is wrong.
pub type StateCheck = fn(LaneId, &OpLaneCut) -> std::result::Result<(), String>;

static STATE_CHECKS: RwLock<BTreeMap<String, StateCheck>> = RwLock::new(BTreeMap::new());

/// Has checkpoints check every cut of operator `op` with `check` when they
/// are loaded (and restored), besides the checks of the layout every cut
/// shares. The operator still checks its state when it takes it back; this
/// refuses a contradicting file earlier, naming it. It checks the files
/// read after it is registered: an operator's constructor registers it
/// (as `pack_sequences` does), or an application before it loads. A later
/// registration for the same name replaces the earlier one.
pub fn register_state_check(op: &str, check: StateCheck) {
    STATE_CHECKS
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(op.to_owned(), check);
}

/// The check registered for `op`: one of zephon-core's own operators', or
/// one registered with [`register_state_check`].
pub(crate) fn state_check(op: &str) -> Option<StateCheck> {
    if let Some(check) = crate::ops::STATE_CHECKS
        .iter()
        .find(|(name, _)| *name == op)
        .map(|(_, c)| *c)
    {
        return Some(check);
    }
    STATE_CHECKS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(op)
        .copied()
}

/// Names under which filters register: a cut may have them upstream of
/// every other stateful operator, nowhere else.
pub const FILTER_OPS: [&str; 2] = ["filter", "filter_map"];

fn is_filter(name: &str) -> bool {
    FILTER_OPS.contains(&name)
}

/// The lane, identity and pointer of a pipeline element, for the element
/// types a cut can describe: records whose lineage is one sample, and bare
/// pointers. `None` for any other type or lineage.
///
/// ```
/// use zephon_core::checkpoint::cut::element_key;
/// use zephon_core::{Record, SamplePtr};
/// let p = SamplePtr { dataset: 0, shard: 1, sample: 2, lane: 3 };
/// let mut r = Record::new();
/// r.lane = 3;
/// r.lineage.push(p);
/// assert_eq!(element_key(&r).map(|k| (k.0, k.2)), Some((3, p)));
/// assert_eq!(element_key(&7u32), None);
/// ```
pub fn element_key<T: 'static>(x: &T) -> Option<(LaneId, u64, SamplePtr)> {
    let any = x as &dyn std::any::Any;
    if let Some(r) = any.downcast_ref::<crate::Record>() {
        match r.lineage.as_slice() {
            [p] => Some((r.lane, crate::pointer::Identity::identity(r), *p)),
            _ => None,
        }
    } else {
        any.downcast_ref::<SamplePtr>()
            .map(|p| (p.lane, p.identity(), *p))
    }
}

/// The pointer of a pipeline element, as [`element_key`] finds it, without
/// computing its identity: for listing an operator's preamble.
#[inline]
pub fn element_pointer<T: 'static>(x: &T) -> Option<SamplePtr> {
    let any = x as &dyn std::any::Any;
    if let Some(r) = any.downcast_ref::<crate::Record>() {
        match r.lineage.as_slice() {
            [p] => Some(*p),
            _ => None,
        }
    } else {
        any.downcast_ref::<SamplePtr>().copied()
    }
}

/// Whether [`element_key`] can describe elements of type `T` at all.
pub fn keyed_type<T: 'static>() -> bool {
    let t = std::any::TypeId::of::<T>();
    t == std::any::TypeId::of::<crate::Record>() || t == std::any::TypeId::of::<SamplePtr>()
}

/// What a registered operator restores, per lane: how many preamble elements
/// to pass through untouched (they belong to operators downstream), and its
/// own cut.
pub type RestorePlan = BTreeMap<LaneId, (u64, OpLaneCut)>;

struct Registered {
    name: &'static str,
    source: Option<Weak<dyn CutSource>>,
}

/// The stateful operators of one pipeline and, on a restore, the cuts to put
/// back. Installed by [`ResumeFrom`](super::ResumeFrom) around every poll of
/// the pipeline.
pub struct Board {
    ops: Mutex<Vec<Registered>>,
    restore: BTreeMap<LaneId, Arc<LaneCut>>,
    /// Set by the work source when it could not verify the cuts: every lane
    /// is replayed instead.
    replay_all: AtomicBool,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Board")
            .field("ops", &ops.iter().map(|r| r.name).collect::<Vec<_>>())
            .field("restore_lanes", &self.restore.len())
            .field("replay_all", &self.replay_all.load(Ordering::Relaxed))
            .finish()
    }
}

impl Board {
    /// A board restoring `restore` (empty for a fresh start).
    pub fn new(restore: BTreeMap<LaneId, Arc<LaneCut>>) -> Arc<Self> {
        Arc::new(Board {
            ops: Mutex::new(Vec::new()),
            restore,
            replay_all: AtomicBool::new(false),
        })
    }

    /// The board of the pipeline being polled, if it is checkpointed (it
    /// travels in the [`PipelineContext`](crate::context::PipelineContext)).
    pub fn current() -> Option<Arc<Board>> {
        crate::context::PipelineContext::current().and_then(|c| c.board().cloned())
    }

    /// Registers a stateful operator (in first-poll order, which is pipeline
    /// order from the consumer's end) and returns what it restores. An
    /// operator registered with `None` cannot be cut: lanes are replayed.
    pub fn register(
        &self,
        name: &'static str,
        source: Option<Weak<dyn CutSource>>,
    ) -> Result<RestorePlan> {
        let mut ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        let index = ops.len();
        ops.push(Registered { name, source });
        let mut plan = RestorePlan::new();
        for (&lane, cut) in &self.restore {
            let Some(own) = cut.ops.get(index) else {
                return Err(mismatch(lane, index, name, "nothing"));
            };
            if own.op != name {
                return Err(mismatch(lane, index, name, &own.op));
            }
            let pass = cut.ops[..index]
                .iter()
                .fold(0u64, |n, o| n.saturating_add(o.preamble_len()));
            plan.insert(lane, (pass, own.clone()));
        }
        Ok(plan)
    }

    /// Whether the restore was abandoned for a replay of every lane.
    pub fn replaying_all(&self) -> bool {
        self.replay_all.load(Ordering::Acquire)
    }

    /// Abandons the restore from cuts: every lane is replayed.
    pub fn replay_all(&self, why: &str) {
        if !self.replay_all.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                reason = why,
                "checkpoint restore: the lane cuts do not fit this pipeline; replaying every lane instead"
            );
        }
    }

    /// The registered operators, in registration order (from the consumer's
    /// end), each with its cut source while the operator lives (`None` for
    /// one registered as uncuttable): what the work source asks for
    /// preambles on a restore.
    pub fn sources(&self) -> Vec<(&'static str, Option<Arc<dyn CutSource>>)> {
        let ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        ops.iter()
            .map(|r| (r.name, r.source.as_ref().and_then(Weak::upgrade)))
            .collect()
    }

    /// The cuts being restored (empty for a fresh start, or when replaying).
    pub fn restoring(&self) -> &BTreeMap<LaneId, Arc<LaneCut>> {
        &self.restore
    }

    /// The cut of `lane` now: every registered operator's, or `None` when one
    /// of them cannot be cut, or the most upstream one cannot say what it
    /// consumed last.
    pub fn cut(&self, lane: LaneId) -> Option<LaneCut> {
        let ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<OpLaneCut> = Vec::with_capacity(ops.len());
        for (i, r) in ops.iter().enumerate() {
            let upstream_filters = ops[i + 1..].iter().filter(|o| is_filter(o.name)).count();
            // A filter's count maps the next operator's input to its own;
            // with a stateful operator upstream of it, that operator's
            // state would be ahead of the mapping.
            if is_filter(r.name) && upstream_filters != ops.len() - i - 1 {
                return None;
            }
            let source = r.source.as_ref()?.upgrade()?;
            let ctx = CutContext {
                downstream_consumed: out.last().map(|o| o.consumed),
                list: upstream_filters > 0,
            };
            out.push(source.cut(lane, ctx)?);
        }
        // What an operator emitted beyond what the next one consumed was in
        // flight between them; unless its cut lists it, a restore would
        // lose it.
        for pair in out.windows(2) {
            let (down, up) = (&pair[0], &pair[1]);
            if let Some(emitted) = up.emitted
                && emitted != down.consumed + up.preamble.in_flight
            {
                return None;
            }
        }
        let cut = LaneCut { ops: out };
        cut.last_identity()?;
        Some(cut)
    }
}

fn mismatch(lane: LaneId, index: usize, name: &str, found: &str) -> Error {
    Error::Checkpoint {
        origin: "restore".into(),
        message: format!(
            "lane {lane}: stateful operator {index} (from the consumer's end) is `{name}` in this pipeline \
             but `{found}` in the checkpoint; restore with the pipeline that wrote it"
        ),
    }
}

/// The restore state of one lane inside an operator: how many preamble
/// elements pass through, then how many it takes back.
#[derive(Clone, Debug)]
pub struct LaneRestore {
    /// Preamble elements still to pass through untouched.
    pub pass: u64,
    /// The operator's own cut, until it is taken back.
    pub cut: Option<OpLaneCut>,
}

/// Per-lane restore bookkeeping for an operator: built from its
/// [`RestorePlan`], asked for each arriving element what to do with it.
#[derive(Debug, Default)]
pub struct Restoring {
    lanes: BTreeMap<LaneId, LaneRestore>,
    board: Option<Arc<Board>>,
}

/// What an operator does with an arriving element during a restore.
#[derive(Debug)]
pub enum Arrival<'a> {
    /// Normal operation (no restore, or this lane's preamble is over).
    Normal,
    /// Pass it downstream untouched (it belongs to a later operator).
    Pass,
    /// It is part of this operator's own preamble section.
    Own(&'a mut OpLaneCut),
}

impl Restoring {
    /// Bookkeeping for `plan`, on `board`.
    pub fn new(plan: RestorePlan, board: Arc<Board>) -> Self {
        Restoring {
            lanes: plan
                .into_iter()
                .map(|(l, (pass, cut))| {
                    (
                        l,
                        LaneRestore {
                            pass,
                            cut: Some(cut),
                        },
                    )
                })
                .collect(),
            board: Some(board),
        }
    }

    /// Classifies an element arriving on `lane`. Call [`Restoring::done`]
    /// once the operator has taken its whole section back.
    pub fn arrive(&mut self, lane: LaneId) -> Arrival<'_> {
        if self.lanes.is_empty() {
            return Arrival::Normal;
        }
        if self.board.as_ref().is_some_and(|b| b.replaying_all()) {
            self.lanes.clear();
            return Arrival::Normal;
        }
        match self.lanes.get_mut(&lane) {
            None => Arrival::Normal,
            Some(r) if r.pass > 0 => {
                r.pass -= 1;
                Arrival::Pass
            }
            Some(r) => match r.cut.as_mut() {
                Some(c) => Arrival::Own(c),
                None => Arrival::Normal,
            },
        }
    }

    /// The board this restore comes from.
    pub fn board(&self) -> Option<&Arc<Board>> {
        self.board.as_ref()
    }

    /// `lane`'s restore is over.
    pub fn done(&mut self, lane: LaneId) {
        self.lanes.remove(&lane);
    }
}
