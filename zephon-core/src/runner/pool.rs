//! The CPU pool: where `offload` runs operators' micro-batches under the
//! threads runner.
//!
//! One rayon pool per runtime, sized like its async workers, rather than a
//! `spawn_blocking` per micro-batch: tokio's blocking pool grows a thread per
//! waiting closure (up to 512), so a pipeline with many micro-batches in
//! flight ran far more threads than cores, and each hand-off paid a thread
//! wake-up and a mutex-guarded queue.

use crate::error::{Error, Result};
use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    /// The pool of the runtime this thread works for, set on the runtime's
    /// own threads as they start.
    static CURRENT: RefCell<Option<Arc<rayon_core::ThreadPool>>> = const { RefCell::new(None) };
}

/// Builds the CPU pool of a threads runner: `threads` workers (at least one),
/// named `zephon-cpu-N`.
pub(super) fn build(threads: usize) -> Result<CpuPool> {
    rayon_core::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("zephon-cpu-{i}"))
        .build()
        .map(Arc::new)
        .map_err(|e| Error::Io {
            path: "CPU thread pool".into(),
            source: std::io::Error::other(e.to_string()),
        })
}

/// Makes `pool` the one `offload` uses on the calling thread (a runtime
/// thread starting).
pub(super) fn enter(pool: &CpuPool) {
    CURRENT.with(|c| *c.borrow_mut() = Some(pool.clone()));
}

/// A runner's CPU pool.
pub(crate) type CpuPool = Arc<rayon_core::ThreadPool>;

/// Runs `f` with `pool` as the calling thread's pool (a caller polling its
/// pipeline itself under the threads runner), then puts back what the
/// thread had: micro-batches offloaded while `f` runs go to the runner's
/// pool, of the size it was given, not to rayon's global pool. The pool is
/// moved in and back out, not cloned, as this runs once per item.
pub(crate) fn lent<R>(pool: &mut Option<CpuPool>, f: impl FnOnce() -> R) -> R {
    if pool.is_none() {
        return f();
    }
    /// Gives the pool back to its owner even if `f` unwinds.
    struct Return<'a> {
        owner: &'a mut Option<CpuPool>,
        before: Option<CpuPool>,
    }
    impl Drop for Return<'_> {
        fn drop(&mut self) {
            *self.owner =
                CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), self.before.take()));
        }
    }
    let before = CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), pool.take()));
    let _give_back = Return {
        owner: pool,
        before,
    };
    f()
}

/// Runs `f` on `pool`, or on rayon's global pool without one.
fn spawn_on(pool: Option<&CpuPool>, f: impl FnOnce() + Send + 'static) {
    match pool {
        Some(pool) => pool.spawn(f),
        None => rayon_core::spawn(f),
    }
}

/// Runs `f` on the calling thread's pool, or on rayon's global pool (one
/// thread per core) on a thread of a runtime this crate did not build, and
/// waits for it without blocking the async worker. A panic in `f` comes
/// back as [`Error::Panic`] naming `op`.
pub(super) async fn run<F, R>(op: &'static str, f: F) -> Result<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let (tx, rx) = futures::channel::oneshot::channel();
    let job = move || {
        // Caught here: rayon aborts the process on a panic that escapes a
        // spawned job.
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    };
    let pool = CURRENT.with(|c| c.borrow().clone());
    match super::group::current() {
        // The job waits in its operator's queue; a lane starts when fewer
        // than the group's limit run (see `group`).
        Some(group) => {
            if group.queue(Box::new(job)) {
                spawn_on(pool.as_ref(), move || group.lane());
            }
        }
        None => spawn_on(pool.as_ref(), job),
    }
    match rx.await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(payload)) => Err(Error::panic(Some(op), payload)),
        Err(_) => Err(Error::Operator {
            op,
            message: "task cancelled".into(),
        }),
    }
}
