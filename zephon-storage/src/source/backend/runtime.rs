//! The storage runtime: a small tokio runtime, owned by this crate, that all
//! network and cache I/O runs on.
//!
//! Why a runtime of its own: pipelines may run on a current-thread runtime
//! (the inline runner) or on none at all while a dataset is being opened, and
//! the HTTP connection pool, the cache's flushers and prefetch downloads must
//! keep running between the consumer's polls and outlive any one pipeline.

use std::future::Future;
use std::sync::OnceLock;
use zephon_core::{Error, Result};

static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// The storage runtime, started on first use.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(io_threads())
            .thread_name("zephon-io")
            .enable_all()
            .build()
            .expect("the storage runtime starts (tokio could not create its threads)")
    })
}

/// Worker threads of the storage runtime: a quarter of the cores, 1 to 8.
///
/// The runtime moves bytes; it computes little. Every chunk of a response
/// body passes from the connection's task to the task reading it, and on a
/// runtime of two or more workers that hand-off often wakes another thread
/// (a futex and a context switch per chunk), on cores the pipeline's own
/// threads need. On 2 cores, one worker instead of two cut the reader's CPU
/// time of a global shuffle by HTTP byte ranges by a fifth (`zephon-bench
/// tokens --serve http`); larger machines keep several, for many streams.
pub fn io_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 4).clamp(1, 8))
}

/// Runs `fut` on the storage runtime and waits for it from async code.
pub async fn spawn<T: Send + 'static>(
    what: String,
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    runtime().spawn(fut).await.map_err(|e| Error::Operator {
        op: "storage",
        message: match e.try_into_panic() {
            Ok(p) => format!(
                "{what}: task panicked: {}",
                zephon_core::error::panic_message(&*p)
            ),
            Err(_) => format!("{what}: task was cancelled"),
        },
    })?
}

/// Runs `fut` on the storage runtime and blocks until it is done. Safe to
/// call from inside another runtime: it then waits on a helper thread.
pub fn block_on<T: Send>(fut: impl Future<Output = T> + Send) -> T {
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| {
            s.spawn(|| runtime().block_on(fut))
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    } else {
        runtime().block_on(fut)
    }
}
