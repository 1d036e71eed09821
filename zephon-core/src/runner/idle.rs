//! Threads-runner runtimes kept between pipelines.
//!
//! A threads runner's runtime starts its async workers and its CPU pool
//! (twice as many threads as workers); each new thread then spins a while
//! looking for work, takes its first stack and allocator pages, and is
//! joined again when the pipeline ends. A program that drives one pipeline
//! after another (an epoch each, an evaluation between, `zephon-bench`)
//! paid that every time, in time and context switches per pipeline, and
//! the first items of each ran on cold threads (`zephon-bench engine
//! --records 1000 --passes 20` measures a short pipeline's cost). A
//! runtime whose pipeline left no task behind is now kept, parked, for
//! the next blocking iterator of the same worker count; one that still
//! runs a task the pipeline spawned is shut down as before, so nothing of
//! one pipeline runs on in the next one's runtime.

use super::{CpuPool, Runner};
use crate::error::Result;
use std::sync::Mutex;
use std::time::Duration;
use tokio::runtime::Runtime;

/// Most runtimes kept idle, all worker counts together (their threads are
/// parked: no CPU, a stack each).
const MOST_IDLE: usize = 4;

/// How long a finished pipeline's runtime may take to see its last tasks
/// (ones just aborted) end before it is shut down instead of kept.
const SETTLE: Duration = Duration::from_millis(1);

struct Idle {
    workers: usize,
    runtime: Runtime,
    pool: CpuPool,
}

static IDLE: Mutex<Vec<Idle>> = Mutex::new(Vec::new());

/// The runtime a blocking iterator drives its pipeline with: an idle one
/// of its runner's worker count if there is one, a new one otherwise; a
/// threads runner's goes back to the idle ones when dropped, if no task
/// of its pipeline is left.
pub(super) struct Lease {
    runtime: Option<Runtime>,
    /// The worker count and pool it goes back with (threads runner).
    returns: Option<(usize, CpuPool)>,
}

impl Lease {
    /// A runtime for `runner`, and its CPU pool (none for the inline
    /// runner).
    pub(super) fn take(runner: &Runner) -> Result<(Lease, Option<CpuPool>)> {
        let workers = runner.worker_count();
        runner.check()?;
        if let Some(n) = workers {
            let found = {
                let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
                idle.iter()
                    .rposition(|i| i.workers == n)
                    .map(|k| idle.swap_remove(k))
            };
            if let Some(i) = found {
                let lease = Lease {
                    runtime: Some(i.runtime),
                    returns: Some((n, i.pool.clone())),
                };
                return Ok((lease, Some(i.pool)));
            }
        }
        let (runtime, pool) = runner.runtime_and_pool()?;
        let returns = workers.zip(pool.clone());
        Ok((
            Lease {
                runtime: Some(runtime),
                returns,
            },
            pool,
        ))
    }

    /// Number of runtimes kept idle now (tests).
    #[cfg(test)]
    pub(super) fn idle() -> usize {
        IDLE.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl std::ops::Deref for Lease {
    type Target = Runtime;

    fn deref(&self) -> &Runtime {
        self.runtime
            .as_ref()
            .expect("a lease holds its runtime until dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        // Dropped on a thread of another runtime (an iterator used in an
        // async fn), a runtime may not wait for its workers: dropping it
        // there panicked. It is shut down without waiting instead.
        if tokio::runtime::Handle::try_current().is_ok() {
            runtime.shutdown_background();
            return;
        }
        let Some((workers, pool)) = self.returns.take() else {
            return;
        };
        // A task aborted as the pipeline was dropped ends on a worker a
        // moment later; one the pipeline left running keeps the runtime
        // from being reused at all.
        let started = std::time::Instant::now();
        while runtime.metrics().num_alive_tasks() > 0 {
            if started.elapsed() > SETTLE {
                return;
            }
            std::thread::yield_now();
        }
        let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MOST_IDLE {
            idle.push(Idle {
                workers,
                runtime,
                pool,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_a_few_runtimes_are_kept() {
        let leases: Vec<Lease> = (11..17)
            .map(|workers| Lease::take(&Runner::Threads { workers }).unwrap().0)
            .collect();
        drop(leases);
        assert!(Lease::idle() <= MOST_IDLE, "{}", Lease::idle());
        // One of them is taken again, not built anew: its pool is the same.
        let kept = IDLE
            .lock()
            .unwrap()
            .iter()
            .find(|i| (11..17).contains(&i.workers))
            .map(|i| (i.workers, i.pool.clone()));
        if let Some((w, pool)) = kept {
            let (_lease, again) = Lease::take(&Runner::Threads { workers: w }).unwrap();
            assert!(std::sync::Arc::ptr_eq(&pool, &again.unwrap()));
        }
    }
}
