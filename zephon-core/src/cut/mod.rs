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
//!    [`Probe::join`](crate::context::Probe::join) with
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
//!    cost little (a [`PtrJournal`] shares a long list
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
//! The checks on load ([`Checkpoint`](crate::checkpoint::Checkpoint)'s) cover every
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
//! see [`PtrJournal`]) instead of leaving them to be
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
//! use futures::{Stream, StreamExt};
//! use std::collections::BTreeMap;
//! use std::pin::Pin;
//! use std::sync::{Arc, Mutex, Weak};
//! use std::task::{Context, Poll};
//! use zephon_core::checkpoint::cut::{
//!     Arrival, CutContext, CutSource, OpLaneCut, OpState, Restoring,
//! };
//! use zephon_core::context::{CutRole, Joined};
//! use zephon_core::context::Probe;
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
//!     probe: Probe,
//!     restoring: Option<Restoring>,
//! }
//!
//! impl<S: Stream<Item = Result<Record>> + Unpin> Stream for RunningTotal<S> {
//!     type Item = Result<Record>;
//!     fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Record>>> {
//!         let this = &mut *self;
//!         // First poll: one call attaches the operator for metrics and
//!         // `explain()` and, in a checkpointed pipeline, puts it on the
//!         // board with what it restores.
//!         let lanes = this.lanes.clone();
//!         let joined = this.probe.join(NAME, 1, None, move || {
//!             CutRole::Source(Arc::downgrade(&lanes) as Weak<dyn CutSource>)
//!         });
//!         match joined {
//!             Ok(Some(Joined { board, plan })) => this.restoring = Some(Restoring::new(plan, board)),
//!             Ok(None) => {}
//!             Err(e) => return Poll::Ready(Some(Err(e))),
//!         }
//!         let mut r = match this.inner.poll_next_unpin(cx) {
//!             Poll::Ready(Some(Ok(r))) => r,
//!             Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
//!             Poll::Ready(None) => { this.probe.finish(); return Poll::Ready(None); }
//!             Poll::Pending => { this.probe.input_pending(); return Poll::Pending; }
//!         };
//!         this.probe.input();
//!         this.probe.output();
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
//!     let totals = RunningTotal { inner: shuffled, lanes: Arc::default(), probe: Probe::default(), restoring: None };
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
//! // The operator has its own metrics.
//! assert!(m.operators.iter().any(|o| o.name == NAME && o.elements_out > 0));
//! # Ok::<(), zephon_core::Error>(())
//! ```

mod board;
mod check;
mod element;
mod in_flight;
mod lane;
mod listed;
mod source;
mod state;

pub use board::{Arrival, Board, LaneRestore, RestorePlan, Restoring};
pub(crate) use check::registered_state_check;
pub use check::{FILTER_OPS, StateCheck, register_state_check};
pub use element::{element_key, element_pointer, keyed_type};
pub use in_flight::InFlightJournal;
pub use lane::{LaneCut, OpLaneCut, Preamble};
pub use listed::{PtrJournal, PtrList};
pub use source::{CutContext, CutSource, LaneInput};
pub use state::OpState;
