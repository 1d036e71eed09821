//! Offload groups: an operator's CPU work run by at most `k` lanes that
//! take its queued micro-batches one after another.
//!
//! An operator that keeps `k` micro-batches in flight, each offloaded on
//! its own, leaves a worker idle after each one until the operator's task
//! has been woken, polled and has handed out the next: on a loaded 2-core
//! machine that round trip was a large share of a parse-sized micro-batch
//! or a read window, and `map_par` and `fetch` showed as busy about half
//! their capacity. An operator with a group keeps `2k` in flight instead
//! and polls them inside [`OffloadGroup::enter`]: what they offload waits
//! in the group's queue, and each of at most `k` lanes (one job on the
//! runner's CPU pool) runs queued jobs until none is left. Each job's
//! result goes back through its own channel, awaited in the operator's
//! order, so the output is what it was; no more than `k` of the group's
//! jobs run at once, as the operator's parallelism says.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Work in flight an operator with a group keeps for each of its `k` at
/// work: one at work and one queued behind it where offloads go to worker
/// threads (a multi-thread runtime); one where they run in place (the
/// inline runner), which a queue would only fill with finished work.
///
/// ```
/// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// assert_eq!(rt.block_on(async { zephon_core::runner::in_flight_per_worker() }), 1);
/// let rt = tokio::runtime::Builder::new_multi_thread().build().unwrap();
/// assert_eq!(rt.block_on(async { zephon_core::runner::in_flight_per_worker() }), 2);
/// ```
pub fn in_flight_per_worker() -> usize {
    if let Some(n) = DESCRIBED_FOR.get() {
        return n;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => 2,
        _ => 1,
    }
}

thread_local! {
    /// While a plan is described for a runner ([`describing_for`]), the
    /// in-flight depth its runtime will give, so `explain()` shows the
    /// queue sizes the metrics will report.
    static DESCRIBED_FOR: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` (a pipeline's `describe`) as if under `runner`'s runtime, for
/// [`in_flight_per_worker`].
pub(crate) fn describing_for<R>(runner: super::Runner, f: impl FnOnce() -> R) -> R {
    let n = match runner {
        super::Runner::Inline => 1,
        _ => 2,
    };
    let before = DESCRIBED_FOR.replace(Some(n));
    let out = f();
    DESCRIBED_FOR.set(before);
    out
}

/// An offloaded closure, its result sent back by itself.
pub(super) type Job = Box<dyn FnOnce() + Send>;

struct State {
    queue: VecDeque<Job>,
    /// Lanes started and not yet finished.
    running: usize,
}

/// The queue and lane count of one operator.
pub(super) struct Group {
    state: Mutex<State>,
    /// Lanes that may run at once; a tuner may move it while jobs run.
    limit: AtomicUsize,
}

tokio::task_local! {
    /// The group of the operator polling on this thread, if any (set for
    /// the length of a call, like the pipeline context).
    static CURRENT: Arc<Group>;
}

/// An operator's offload group: at most `limit` of the jobs offloaded
/// while it is entered run at once, each lane going on to the next queued
/// one. Outside the threads runner (in place under the inline runner, or
/// on a runtime built elsewhere) it changes nothing.
///
/// ```
/// use zephon_core::runner::{OffloadGroup, offload};
/// let rt = tokio::runtime::Builder::new_multi_thread().build().unwrap();
/// let group = OffloadGroup::new(2);
/// let jobs: Vec<_> = (0..8u32).map(|i| offload("doc", move || i * i)).collect();
/// // Offloads are placed when first polled: poll them inside the group.
/// let out = rt.block_on(group.enter_future(futures::future::try_join_all(jobs))).unwrap();
/// assert_eq!(out, [0, 1, 4, 9, 16, 25, 36, 49]);
/// ```
#[derive(Clone)]
pub struct OffloadGroup(Arc<Group>);

impl std::fmt::Debug for OffloadGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffloadGroup")
            .field("limit", &self.0.limit.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl OffloadGroup {
    /// A group running at most `limit` (at least one) of its jobs at once.
    pub fn new(limit: usize) -> Self {
        OffloadGroup(Arc::new(Group {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                running: 0,
            }),
            limit: AtomicUsize::new(limit.max(1)),
        }))
    }

    /// Lets at most `limit` (at least one) jobs run at once from now on:
    /// a raised limit starts lanes as jobs are queued, a lowered one ends
    /// lanes as they finish their job. Which job runs where never changes
    /// what an operator delivers, only how soon.
    pub fn set_limit(&self, limit: usize) {
        self.0.limit.store(limit.max(1), Ordering::Relaxed);
    }

    /// Runs `f` with this group as the calling thread's: what
    /// [`offload`](super::offload) places while it runs (the offloads first
    /// polled in it) joins the group.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        CURRENT.sync_scope(self.0.clone(), f)
    }

    /// `fut` with this group entered on every poll.
    pub fn enter_future<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> + use<F> {
        CURRENT.scope(self.0.clone(), fut)
    }
}

/// The group entered on this thread, if any.
pub(super) fn current() -> Option<Arc<Group>> {
    CURRENT.try_with(Arc::clone).ok()
}

impl Group {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Jobs run outside the lock, and catch their own panics.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `job`; returns whether a new lane must start (fewer than the
    /// limit run).
    pub(super) fn queue(&self, job: Job) -> bool {
        let mut s = self.state();
        s.queue.push_back(job);
        let start = s.running < self.limit.load(Ordering::Relaxed);
        if start {
            s.running += 1;
        }
        start
    }

    /// One lane: runs queued jobs, oldest first, until none is left. The
    /// count of lanes drops under the same lock that found the queue
    /// empty, so a job queued after it always finds a lane or starts one.
    pub(super) fn lane(&self) {
        loop {
            let job = {
                let mut s = self.state();
                // Over a lowered limit: this lane ends; the others, at
                // least one, go on with the queue.
                if s.running > self.limit.load(Ordering::Relaxed) {
                    s.running -= 1;
                    return;
                }
                match s.queue.pop_front() {
                    Some(job) => job,
                    None => {
                        s.running -= 1;
                        return;
                    }
                }
            };
            job();
        }
    }
}
