//! Runners (inline and threads) and the blocking iterator for synchronous
//! training loops.

use crate::error::{Error, Result};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

mod blocking;
mod cost;
mod group;
mod handoff;
mod helping;
mod here;
mod idle;
mod pool;
pub use blocking::BlockingIter;
pub use cost::{IN_PLACE_BELOW, IN_PLACE_MOST, IN_PLACE_PER_ITEM, WorkCost, offload_measured};
pub(crate) use group::describing_for;
pub use group::{OffloadGroup, in_flight_per_worker};
use pool::CpuPool;

/// How a pipeline is executed. A performance knob only: every runner gives
/// the same output in the same order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runner {
    /// Everything on the calling thread: CPU work runs in place. For debugging.
    Inline,
    /// Thread pools: async workers drive the pipeline and its I/O, and a CPU
    /// pool of as many threads runs the CPU-heavy micro-batches (`map_par`,
    /// `tokenize`, shard reads and parsing) handed to
    /// [`offload`]. A blocking caller ([`BlockingIter`]) polls the
    /// pipeline itself for its first few milliseconds, and keeps doing so
    /// while it waits for every item with little work of its own between
    /// them, instead of taking items made on another core; a caller that
    /// spends long on an item (a training step), or a fair share of its
    /// time on its own work, gets the pipeline run ahead by the workers,
    /// and takes it over again only where it is timed faster that way. The
    /// CPU pool serves both.
    Threads {
        /// Threads of each pool, in [`WORKERS`](crate::settings::WORKERS)
        /// (0 to 4096; 0 means one per core), checked when the pipeline is
        /// built.
        workers: usize,
    },
}

impl Default for Runner {
    fn default() -> Self {
        Runner::Threads { workers: 0 }
    }
}

impl Runner {
    /// The threads runner with one worker per core.
    pub fn threads() -> Self {
        Runner::default()
    }

    /// Checks the runner's settings against their documented ranges
    /// ([`WORKERS`](crate::settings::WORKERS) for the threads runner).
    pub fn check(&self) -> Result<()> {
        if let Runner::Threads { workers } = *self {
            crate::settings::WORKERS.check_usize("runner.workers", workers)?;
        }
        Ok(())
    }

    /// The threads runner's worker count, `0` read as one per core; `None`
    /// for the inline runner.
    pub(crate) fn worker_count(&self) -> Option<usize> {
        match *self {
            Runner::Inline => None,
            Runner::Threads { workers: 0 } => Some(num_cpus()),
            Runner::Threads { workers } => Some(workers),
        }
    }

    /// Builds the tokio runtime this runner drives pipelines with.
    pub fn runtime(&self) -> Result<tokio::runtime::Runtime> {
        self.runtime_and_pool().map(|(rt, _)| rt)
    }

    /// The runtime, and the CPU pool its workers hand micro-batches to
    /// (none for the inline runner): a caller polling the pipeline on its
    /// own thread lends itself the same pool.
    pub(crate) fn runtime_and_pool(&self) -> Result<(tokio::runtime::Runtime, Option<CpuPool>)> {
        self.check()?;
        let (rt, cpu) = match *self {
            Runner::Inline => (
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build(),
                None,
            ),
            Runner::Threads { .. } => {
                let n = self.worker_count().unwrap_or(1);
                let cpu = pool::build(n)?;
                let theirs = cpu.clone();
                (
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(n)
                        .thread_name("zephon-worker")
                        .on_thread_start(move || pool::enter(&theirs))
                        .enable_all()
                        .build(),
                    Some(cpu),
                )
            }
        };
        let rt = rt.map_err(|source| Error::Io {
            path: "tokio runtime".into(),
            source,
        })?;
        Ok((rt, cpu))
    }
}

impl std::fmt::Display for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Runner::Inline => write!(f, "inline (one thread)"),
            Runner::Threads { workers: 0 } => {
                write!(f, "threads ({} workers, one per core)", num_cpus())
            }
            Runner::Threads { workers } => write!(f, "threads ({workers} workers)"),
        }
    }
}

pub use crate::settings::num_cpus;

/// Runs CPU-heavy `f` off the async reactor when the current runtime has
/// worker threads (the threads runner), in place under a current-thread
/// runtime (the inline runner). Operators call this once per micro-batch.
///
/// Off the reactor means the runner's CPU pool (as many threads as its
/// async workers), or rayon's global pool (one thread per core) under a
/// multi-thread runtime built elsewhere; the result comes back through a
/// oneshot channel, so the awaiting task keeps its place and output order
/// is the operator's business, as before.
///
/// Outside any tokio runtime (a bare `futures::executor::block_on`) it is an
/// [`Error::Operator`] naming `op` that says so, rather than a silent
/// fallback to sequential work: drive pipelines with
/// [`into_blocking_iter`](crate::PipelineExt::into_blocking_iter) or inside
/// a runtime.
///
/// A panic in `f` is caught under every runner and comes back as
/// [`Error::Panic`] naming `op`, never as an unwinding caller or a silently
/// ended stream.
///
/// ```
/// use zephon_core::runner::offload;
/// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// let r = rt.block_on(offload("my_op", || -> u32 { panic!("boom") }));
/// assert_eq!(r.unwrap_err().to_string(), "operator `my_op`: panic in pipeline: boom");
/// let r = futures::executor::block_on(offload("my_op", || 1));
/// assert!(r.unwrap_err().to_string().contains("outside a tokio runtime"));
/// ```
pub fn offload<F, R>(op: &'static str, f: F) -> BoxFuture<'static, Result<R>>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    // Decided when first polled, not when created: a read built outside a
    // runtime and awaited inside one runs there.
    async move {
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                pool::run(op, f).await
            }
            Ok(_) => run_here(op, f),
            Err(_) => Err(outside_runtime(op)),
        }
    }
    .boxed()
}

/// `f` on the calling thread, a panic in it an [`Error::Panic`] naming
/// `op`: offloaded work run in place.
fn run_here<F: FnOnce() -> R, R>(op: &'static str, f: F) -> Result<R> {
    // The closure owns its input and its result is dropped on a panic, so
    // nothing half-updated is observed afterwards.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|payload| Error::panic(Some(op), payload))
}

/// The error of an operator that needs a tokio runtime and was polled
/// outside one.
pub fn outside_runtime(op: &'static str) -> Error {
    Error::Operator {
        op,
        message: "polled outside a tokio runtime; drive the pipeline with \
                  `into_blocking_iter`, or inside a tokio runtime"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PipelineExt;

    #[test]
    fn a_worker_count_out_of_range_is_refused_by_name() {
        let s = futures::stream::iter((0..4).map(Ok::<u32, Error>));
        let err = s
            .into_blocking_iter(Runner::Threads { workers: 100_000 })
            .expect_err("100,000 workers refused");
        let msg = err.to_string();
        assert!(
            msg.contains("runner.workers") && msg.contains("100000"),
            "{msg}"
        );
        assert!(Runner::Threads { workers: 100_000 }.runtime().is_err());
        assert!(Runner::Threads { workers: 2 }.check().is_ok());
        assert!(Runner::threads().check().is_ok());
    }
}
