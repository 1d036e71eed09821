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
pub(super) fn build(threads: usize) -> Result<Arc<rayon_core::ThreadPool>> {
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
pub(super) fn enter(pool: &Arc<rayon_core::ThreadPool>) {
    CURRENT.with(|c| *c.borrow_mut() = Some(pool.clone()));
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
    match CURRENT.with(|c| c.borrow().clone()) {
        Some(pool) => pool.spawn(job),
        None => rayon_core::spawn(job),
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
