//! The pipeline context: the one thing an operator finds when it is first
//! polled, and the one place it registers.
//!
//! A pipeline runs inside a [`PipelineContext`] that carries its observer
//! (metrics, when observability is on) and its checkpoint [`Board`] (lane
//! cuts, when the pipeline is checkpointed). Each operator attaches once,
//! through its [`Probe`], with its name, parallelism,
//! queue capacity and, for a stateful one, its [`CutSource`]; that single
//! registration feeds the metrics and the checkpoint cuts alike.
//!
//! The context travels with the task that polls the pipeline: the blocking
//! iterator, [`Observed`] and
//! [`ResumeFrom`](crate::checkpoint::ResumeFrom) enter it around every poll,
//! so an operator first polled late (the second half of a `chain`, a stream
//! a `flat_map` creates as it goes) joins it too. Tasks the pipeline spawns
//! (`prefetch_batches`) carry it themselves; a task the user spawns carries
//! it when its future is wrapped with [`in_context`]:
//!
//! ```
//! use futures::StreamExt;
//! use zephon_core::context::{in_context, PipelineContext};
//! use zephon_core::{Observer, PipelineExt, Record, Tracking};
//!
//! let rt = tokio::runtime::Runtime::new().unwrap();
//! let obs = Observer::new(Tracking::Operator);
//! let ctx = PipelineContext::observing(&obs);
//! let n = rt.block_on(ctx.scope(async {
//!     let batches = futures::stream::iter((0..10).map(|_| Ok(Record::new()))).batch(5);
//!     // Spawned inside the context, the task carries it along.
//!     tokio::spawn(in_context(batches.count())).await.unwrap()
//! }));
//! assert_eq!(n, 2);
//! let names: Vec<String> = obs.metrics_snapshot().operators.into_iter().map(|o| o.name).collect();
//! assert_eq!(names, ["batch"]);
//! ```

mod observed;
mod probe;

pub use observed::Observed;
pub use probe::Probe;

use crate::cut::{Board, CutSource, RestorePlan};
use crate::error::Result;
use crate::obs::{Observer, OpStats, Tracking};
use futures::Stream;
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

tokio::task_local! {
    static CURRENT: PipelineContext;
}

struct Inner {
    observer: Option<Observer>,
    board: Option<Arc<Board>>,
}

/// What a pipeline's operators register with: its observer and its
/// checkpoint board, each optional. Cheap to clone (a shared handle).
#[derive(Clone)]
pub struct PipelineContext(Arc<Inner>);

impl fmt::Debug for PipelineContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipelineContext")
            .field("observer", &self.0.observer)
            .field("board", &self.0.board)
            .finish()
    }
}

/// How an operator takes part in checkpoint cuts.
pub enum CutRole {
    /// It holds no lane state (map, fetch, lane_mux): not on the board.
    Stateless,
    /// It holds state a cut cannot describe: a checkpointed pipeline
    /// replays its lanes instead of cutting them.
    Uncuttable,
    /// It describes its lane state through this source.
    Source(Weak<dyn CutSource>),
}

impl fmt::Debug for CutRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CutRole::Stateless => "Stateless",
            CutRole::Uncuttable => "Uncuttable",
            CutRole::Source(_) => "Source",
        })
    }
}

/// What a stateful operator gets back when it attaches to a checkpointed
/// pipeline: the board (batches take their lane cuts from it) and what the
/// operator restores.
#[derive(Debug)]
pub struct Joined {
    /// The pipeline's checkpoint board.
    pub board: Arc<Board>,
    /// Per lane, what the operator restores (empty for a fresh start).
    pub plan: RestorePlan,
}

/// What one registration gives back: the operator's counters (per-operator
/// tracking on) and its place on the board (checkpointed pipeline, stateful
/// operator).
#[derive(Debug, Default)]
pub struct Attachment {
    /// Counters to report into.
    pub stats: Option<Arc<OpStats>>,
    /// The board and restore plan.
    pub joined: Option<Joined>,
}

impl PipelineContext {
    /// A context with an observer (ignored when its tracking is off) and a
    /// checkpoint board, either optional.
    pub fn new(observer: Option<Observer>, board: Option<Arc<Board>>) -> Self {
        let observer = observer.filter(|o| o.tracking() != Tracking::Off);
        PipelineContext(Arc::new(Inner { observer, board }))
    }

    /// A context that observes into `observer`, without a board.
    pub fn observing(observer: &Observer) -> Self {
        Self::new(Some(observer.clone()), None)
    }

    /// The context of the pipeline being polled on this task, if any.
    pub fn current() -> Option<PipelineContext> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// This context with `board` as its checkpoint board.
    pub fn with_board(&self, board: Arc<Board>) -> Self {
        Self::new(self.0.observer.clone(), Some(board))
    }

    /// This context with `observer` as its observer.
    pub fn with_observer(&self, observer: Observer) -> Self {
        Self::new(Some(observer), self.0.board.clone())
    }

    /// The observer, if observability is on.
    pub fn observer(&self) -> Option<&Observer> {
        self.0.observer.as_ref()
    }

    /// The checkpoint board, if the pipeline is checkpointed.
    pub fn board(&self) -> Option<&Arc<Board>> {
        self.0.board.as_ref()
    }

    /// Whether two handles are the same context.
    pub fn same(&self, other: &PipelineContext) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Runs `f` with this context as the current one.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        CURRENT.sync_scope(self.clone(), f)
    }

    /// Wraps `fut` so that every poll of it runs in this context (for a
    /// task that drives part of the pipeline).
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> + use<F> {
        CURRENT.scope(self.clone(), fut)
    }

    /// Wraps `stream` so that every poll of it runs in this context.
    pub fn scope_stream<S>(&self, stream: S) -> InContext<S> {
        InContext {
            inner: stream,
            ctx: self.clone(),
        }
    }

    /// Registers an operator: with the observer (its counters, under
    /// per-operator tracking) and, unless `cut` is
    /// [`CutRole::Stateless`], on the board. `cut` is called only when the
    /// pipeline is checkpointed, so an operator builds its cut source only
    /// then. Operators register at their first poll, which is pipeline order
    /// from the consumer's end.
    pub fn register(
        &self,
        name: &'static str,
        parallelism: usize,
        capacity: Option<u64>,
        cut: impl FnOnce() -> CutRole,
    ) -> Result<Attachment> {
        let stats = self
            .0
            .observer
            .as_ref()
            .and_then(|o| o.operator(name, parallelism, capacity));
        let joined = match &self.0.board {
            None => None,
            Some(board) => match cut() {
                CutRole::Stateless => None,
                CutRole::Uncuttable => {
                    board.register(name, None)?;
                    None
                }
                CutRole::Source(source) => Some(Joined {
                    board: board.clone(),
                    plan: board.register(name, Some(source))?,
                }),
            },
        };
        Ok(Attachment { stats, joined })
    }
}

/// Wraps `fut` so that it runs in the pipeline context current where
/// `in_context` is called, if any: for a task the user spawns to drive (part
/// of) a pipeline. See [the module](self).
pub fn in_context<F: Future>(fut: F) -> InContextFuture<F> {
    InContextFuture {
        inner: fut,
        ctx: PipelineContext::current(),
    }
}

/// A future polled in a pipeline context. Created by [`in_context`].
#[pin_project]
#[must_use = "futures do nothing unless polled"]
pub struct InContextFuture<F> {
    #[pin]
    inner: F,
    ctx: Option<PipelineContext>,
}

impl<F> fmt::Debug for InContextFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InContextFuture")
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

impl<F: Future> Future for InContextFuture<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        match this.ctx {
            Some(ctx) => ctx.enter(|| this.inner.poll(cx)),
            None => this.inner.poll(cx),
        }
    }
}

/// A stream polled in a pipeline context. Created by
/// [`PipelineContext::scope_stream`].
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct InContext<S> {
    #[pin]
    inner: S,
    ctx: PipelineContext,
}

impl<S> InContext<S> {
    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
    /// The wrapped stream, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
    /// The wrapped stream.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for InContext<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InContext")
            .field("inner", &self.inner)
            .field("ctx", &self.ctx)
            .finish()
    }
}

impl<S: Stream> Stream for InContext<S> {
    type Item = S::Item;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = self.project();
        this.ctx.enter(|| this.inner.poll_next(cx))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<S: futures::stream::FusedStream> futures::stream::FusedStream for InContext<S> {
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }
}

// The context adds no stage: the plan is the inner pipeline's.
impl<S: crate::obs::Explain> crate::obs::Explain for InContext<S> {
    fn describe(&self, out: &mut Vec<crate::obs::StageDescription>) {
        self.inner.describe(out);
    }
}

/// A context an adapter installs around its inner stream: the current one
/// with something added (an observer, a board). Built once and rebuilt only
/// when the outer context changes, so a poll costs a pointer comparison.
#[derive(Debug, Default)]
pub(crate) struct Layered {
    outer: Option<PipelineContext>,
    built: Option<PipelineContext>,
}

impl Layered {
    /// The context to poll the inner stream in.
    pub(crate) fn get(
        &mut self,
        build: impl FnOnce(Option<&PipelineContext>) -> PipelineContext,
    ) -> &PipelineContext {
        // Compared by address without cloning the outer context: the clone
        // kept in `self.outer` keeps that address from being reused.
        let outer = CURRENT.try_with(|c| Arc::as_ptr(&c.0)).ok();
        let kept = self.outer.as_ref().map(|c| Arc::as_ptr(&c.0));
        if self.built.is_none() || outer != kept {
            self.outer = PipelineContext::current();
            self.built = Some(build(self.outer.as_ref()));
        }
        self.built.as_ref().expect("built above")
    }
}

// The board lives below the context that carries it.
impl Board {
    /// The board of the pipeline being polled, if it is checkpointed (it
    /// travels in the [`PipelineContext`]).
    pub fn current() -> Option<Arc<Board>> {
        PipelineContext::current().and_then(|c| c.board().cloned())
    }
}
