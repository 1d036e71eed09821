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
            .worker_threads(2)
            .thread_name("zephon-io")
            .enable_all()
            .build()
            .expect("the storage runtime starts (tokio could not create its threads)")
    })
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
