//! Checkpoint and restore, elastic across rank counts.
//!
//! # The model
//!
//! Every lane's output is a pure function of that lane's input, and lane
//! `l`'s input is the pointers at global indices `l, l + L, l + 2L, ...`
//! whatever the rank count. So the global batch of step `t` is the `t`-th
//! lane-batch of every canonical lane, and a rank of world size `W` trains on
//! its `L / W` lanes' `t`-th batches (concatenated, or accumulated as
//! gradients). Checkpoint on 2 ranks, restore on 4 or on 1: the global
//! batches are the same.
//!
//! A [`Checkpoint`] is therefore small: per canonical lane, how many batches
//! and elements were delivered and the lane's [`LaneCut`] (what its stateful
//! operators held right after its last delivered batch), plus what identifies
//! the run (format version, seed, lane count, work-source and [`Recipe`]
//! fingerprints).
//!
//! A cut is in pointer form, never data: a shuffle buffer is described by
//! how many elements the shuffle consumed (its contents are a function of
//! the work source's pointers and the slot hashes, recomputed on restore),
//! packing bins and finished rows by their documents' pointers and token
//! ranges, a batch boundary by the lane's element count. On restore the work
//! source emits, per lane, a short preamble of the pointers the operators
//! held, which flows through fetch and tokenize like any data, and each
//! operator takes its part back; then the lane continues where it stopped.
//! So the time to the first new batch is about that of a fresh start
//! (refilling the buffers), whatever the run's progress. Every stateful
//! operator takes part through one public protocol, whatever its crate: it
//! describes its lane cut (counts, identity, preamble, and a state it
//! serializes itself) and takes it back; see [`cut`] for the protocol, the
//! checks that keep it exact, and an operator written outside zephon.
//!
//! A lane without a cut is replayed instead: [`ResumeFrom`] rebuilds it
//! from the lane's start and drops what was already delivered. That happens
//! when the pipeline holds state a cut cannot describe (a filter between two
//! stateful operators, an operator attached as
//! [`CutRole::Uncuttable`](crate::context::CutRole::Uncuttable)), or when the checkpoint's cut does not
//! match the work source (checked before anything is emitted). Filters
//! upstream of every stateful operator are cut: they say how many elements
//! they read per lane, and a shuffle below them lists its buffer
//! ([`PtrJournal`]). A replay is equally exact, but its cost grows with
//! the run's progress. `bench_checkpoint_and_restore` in zephon-ops'
//! `tests/checkpoint.rs` measures both (64 lanes, shuffle buffer 8192,
//! best-fit packing).
//!
//! What may change between checkpoint and restore: world size, rank, lane
//! ownership, parallelism, runner, prefetch depths, and the per-rank
//! micro-batch size (as long as each lane's delivered element count falls on
//! a batch boundary of the new size). What may not: the seed and
//! `canonical_lanes` (refused with an error saying so), the datasets and
//! work-source settings (a [mixture schedule](crate::work::MixtureSchedule)
//! among them), the named settings of the recipe (refused with an error
//! naming the setting), the operator chain where the run recorded it, and
//! the format version.
//!
//! # The restore step
//!
//! [`ResumeExt::resume`] is the restore step in one call: placed right
//! after `batch` (or `to_training`), it binds the progress to the
//! data-shaping stages of the chain before it, as `explain()` describes
//! them (a fresh run records them in its checkpoints; a resumed run built
//! of other stages, or of the same stages with other data-shaping
//! settings, is refused on its first poll, naming the first stage that
//! differs), restores the cuts or replays, and interleaves the lanes from
//! where the checkpoint stopped. A pipeline built without a restore step
//! under a resumed progress is an error on its first batch
//! ([`Progress::check_delivered`]), never a silent restart. Steps to come
//! can be left out ([`Progress::skip_steps`]), on any rank count, and the
//! skip is recorded in every later checkpoint.
//!
//! # Files
//!
//! Both forms (binary and JSON) carry a CRC32C of the whole content, and a
//! checkpoint is refused, with an error naming its file, when any byte
//! changed, is missing or was added, when its fields contradict each other
//! or the run restoring it, or when it is of another format version. A
//! silently accepted flipped count would drop, repeat or reorder samples.
//! [`Checkpoint::load_all`] merges the files of all ranks only when they are
//! of one run and one step and cover every lane exactly once.
//!
//! # Use
//!
//! ```
//! use zephon_core::checkpoint::{Checkpoint, CheckpointedExt, Progress, Recipe, ResumeExt};
//! use zephon_core::{Dataset, PipelineExt, Record, Runner, ShuffleMode, WorkSource};
//!
//! let ds = Dataset::in_memory("toy", vec![(0..96).map(|i| Record::new().with("i", i as i64)).collect()])?;
//! // A rank of a run with 4 canonical lanes: rank `r` of `w`.
//! let work = |r, w| WorkSource::builder().dataset(ds.clone(), 1.0).seed(9)
//!     .canonical_lanes(4).rank(r).world_size(w).build();
//! let recipe = |ws: &WorkSource| Recipe::new(ws).setting("shuffle", (8, ShuffleMode::Reservoir, 9));
//! // `resume` is the restore step: a fresh run records the operator chain,
//! // a resumed one is checked against it.
//! let batches = |ws: &WorkSource, p: &mut Progress| {
//!     ws.stream().fetch(4).shuffle(8, ShuffleMode::Reservoir, 9).batch(3).resume(p)
//! };
//!
//! // Two ranks train 2 steps each and checkpoint.
//! let mut parts = Vec::new();
//! for r in 0..2 {
//!     let ws = work(r, 2)?;
//!     let mut p = recipe(&ws).start(&ws);
//!     let mut it = batches(&ws, &mut p).into_blocking_iter(Runner::Inline)?.checkpointed(p);
//!     for _ in 0..2 * 2 { it.next().unwrap()?; } // 2 steps of 2 lanes
//!     parts.push(it.checkpoint());
//! }
//! let bytes = Checkpoint::merge(parts)?.to_bytes();
//!
//! // One rank resumes from the merged checkpoint: every lane starts at batch 2.
//! let ws = work(0, 1)?;
//! let mut p = recipe(&ws).resume(&ws, &Checkpoint::from_bytes(&bytes)?)?;
//! let first: Vec<_> = batches(&ws, &mut p).into_blocking_iter(Runner::threads())?
//!     .take(4).map(|b| b.map(|b| (b.lane, b.index))).collect::<Result<_, _>>()?;
//! assert_eq!(first, vec![(0, 2), (1, 2), (2, 2), (3, 2)]);
//! # Ok::<(), zephon_core::Error>(())
//! ```

mod chain;
mod compact;
mod form;
mod progress;
mod recipe;
mod resume;
mod skip;
mod state;
mod stream;
mod validate;

pub use crate::cut;
pub use crate::cut::{CutContext, CutSource, LaneCut, OpLaneCut, OpState, Preamble};
pub use crate::cut::{PtrJournal, PtrList};
pub use chain::CHAIN_PREFIX;
pub use progress::{Checkpointed, CheckpointedExt, Delivered, Progress};
pub use recipe::{Recipe, SHARD_PREFIX};
pub use resume::{ResumeExt, ResumeFrom};
pub use skip::SKIP_PREFIX;
pub use state::{CHECKPOINT_VERSION, Checkpoint, LaneProgress, lane_runs};
pub use stream::{CheckpointedStream, CheckpointedStreamExt};
