//! Where offloaded CPU work runs: the threads runner's own pool, rayon's
//! global pool under a runtime built elsewhere, in place under the inline
//! runner; never tokio's blocking threads.

use zephon_core::runner::offload;
use zephon_core::{PipelineExt, Runner};

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_owned()
}

#[test]
fn the_threads_runner_runs_micro_batches_on_its_cpu_pool() {
    let names: Vec<String> = futures::stream::iter((0..256).map(Ok::<u32, zephon_core::Error>))
        .map_par(|_| Ok(thread_name()), 4)
        .into_blocking_iter(Runner::Threads { workers: 3 })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(names.len(), 256);
    assert!(
        names.iter().all(|n| n.starts_with("zephon-cpu-")),
        "{names:?}"
    );
    // Three threads in the pool, so at most three names.
    let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
    assert!(distinct.len() <= 3, "{distinct:?}");
}

#[test]
fn the_inline_runner_runs_micro_batches_in_place() {
    let here = thread_name();
    let names: Vec<String> = futures::stream::iter((0..100).map(Ok::<u32, zephon_core::Error>))
        .map_par(|_| Ok(thread_name()), 4)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(names.iter().all(|n| *n == here), "{names:?}");
}

#[test]
fn a_runtime_built_elsewhere_uses_rayons_pool() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let on = rt
        .block_on(offload("test", rayon_core::current_thread_index))
        .unwrap();
    assert!(on.is_some(), "ran outside rayon's pool");
    // A panic still comes back as an error, not an abort.
    let err = rt
        .block_on(offload("test", || -> u32 { panic!("boom") }))
        .unwrap_err();
    assert!(err.to_string().contains("boom"), "{err}");
}

/// A caller that takes items as fast as they come polls the pipeline
/// itself after a few chunks (the threads runner's caller-polling mode);
/// its operators' CPU work still runs on the runner's pool, of the size
/// the runner was given, not on another pool.
#[test]
fn a_caller_polling_the_pipeline_itself_still_uses_the_runners_pool() {
    let names: Vec<String> = futures::stream::iter((0..50_000).map(Ok::<u32, zephon_core::Error>))
        .map_par(|_| Ok(thread_name()), 2)
        .into_blocking_iter(Runner::Threads { workers: 1 })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(names.len(), 50_000);
    let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(
        distinct.into_iter().collect::<Vec<_>>(),
        ["zephon-cpu-0"],
        "micro-batches ran outside the runner's one-thread pool"
    );
    // The pool was lent to this thread while it polled, and taken back:
    // a runtime built elsewhere now offloads to rayon's global pool again.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let name = rt.block_on(offload("test", thread_name)).unwrap();
    assert!(!name.starts_with("zephon-cpu-"), "{name}");
}
