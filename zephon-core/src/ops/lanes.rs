//! Lanes: how `map_par` keeps its `k` workers busy between polls.
//!
//! A micro-batch offloaded on its own runs once, then its worker waits
//! for the operator's task to be woken, polled and to hand over the next
//! one: on a loaded 2-core machine that round trip was a large share of a
//! parse-sized micro-batch, and `map_par`'s workers sat idle for it. Here
//! micro-batches wait in a queue, and each of at most `k` lanes (one
//! offloaded closure each) runs them one after another until the queue is
//! empty; the task keeps the queue filled. Each micro-batch's result goes
//! back through its own channel, in the order the operator awaits them, so
//! the output is what it was; at most `k` micro-batches run at once, as
//! the parallelism says.

use crate::error::{Error, Result};
use crate::obs::OpStats;
use futures::FutureExt;
use futures::channel::oneshot;
use futures::future::BoxFuture;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// A micro-batch's result: the closure's output for each element, or the
/// panic that lost the whole micro-batch.
pub(crate) type Outcome<U> = Result<Vec<Result<U>>>;

/// A queued micro-batch: its elements, where to record the time it took,
/// and where its result goes.
struct Job<T, U> {
    items: Vec<Result<T>>,
    stats: Option<Arc<OpStats>>,
    done: oneshot::Sender<Outcome<U>>,
}

struct State<T, U> {
    queue: VecDeque<Job<T, U>>,
    /// Lanes started and not yet finished.
    running: usize,
    /// The operator is gone: lanes stop taking micro-batches.
    closed: bool,
}

/// The queue of one `map_par`, and its closure.
pub(crate) struct Lanes<T, U> {
    state: Mutex<State<T, U>>,
    f: Arc<dyn Fn(T) -> Result<U> + Send + Sync>,
}

impl<T, U> Lanes<T, U> {
    pub(crate) fn new(f: Arc<dyn Fn(T) -> Result<U> + Send + Sync>) -> Self {
        Lanes {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                running: 0,
                closed: false,
            }),
            f,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<T, U>> {
        // A lane never panics holding the lock (the closure runs outside it).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the lanes: queued micro-batches are dropped, their receivers
    /// see the channel closed.
    pub(crate) fn close(&self) {
        let mut s = self.state();
        s.closed = true;
        s.queue.clear();
    }
}

/// The operator's hold on its lanes: dropping it (the operator is gone)
/// stops them after the micro-batch each is running.
pub(crate) struct Owner<T, U>(pub(crate) Arc<Lanes<T, U>>);

impl<T, U> Drop for Owner<T, U> {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl<T: Send + 'static, U: Send + 'static> Lanes<T, U> {
    /// Queues `items`; returns the future of their result, and a new lane
    /// to start (offloaded and polled by the caller) when fewer than `k`
    /// run.
    #[allow(clippy::type_complexity)]
    pub(crate) fn submit(
        self: &Arc<Self>,
        items: Vec<Result<T>>,
        stats: Option<Arc<OpStats>>,
        k: usize,
    ) -> (
        BoxFuture<'static, Outcome<U>>,
        Option<BoxFuture<'static, Result<()>>>,
    ) {
        let (done, result) = oneshot::channel();
        let start = {
            let mut s = self.state();
            s.queue.push_back(Job { items, stats, done });
            let start = s.running < k;
            if start {
                s.running += 1;
            }
            start
        };
        let result = result
            .map(|r| {
                r.unwrap_or_else(|_| {
                    Err(Error::Operator {
                        op: "map_par",
                        message: "a micro-batch was dropped before it ran".into(),
                    })
                })
            })
            .boxed();
        let lane = start.then(|| {
            let lanes = self.clone();
            crate::runner::offload("map_par", move || lanes.run())
        });
        (result, lane)
    }

    /// One lane: runs queued micro-batches, oldest first, until none is
    /// left. The count of running lanes drops under the same lock that
    /// found the queue empty, so a micro-batch queued after it always
    /// finds a lane or starts one.
    fn run(&self) {
        loop {
            let job = {
                let mut s = self.state();
                match s.queue.pop_front().filter(|_| !s.closed) {
                    Some(job) => job,
                    None => {
                        s.running -= 1;
                        return;
                    }
                }
            };
            let Job { items, stats, done } = job;
            let started = stats.as_ref().map(|_| std::time::Instant::now());
            let n = items.len() as u64;
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                items
                    .into_iter()
                    .map(|x| x.and_then(|x| (self.f)(x)))
                    .collect::<Vec<_>>()
            }))
            .map_err(|payload| Error::panic(Some("map_par"), payload));
            if let (Some(s), Some(t)) = (&stats, started) {
                s.busy.record_many(t.elapsed().as_nanos() as u64, n);
            }
            // The receiver is gone when the operator was dropped.
            let _ = done.send(out);
        }
    }
}
