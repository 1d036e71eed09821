//! A threads runner's runtime is kept for the next pipeline of the same
//! worker count, unless its pipeline left a task running. (One test: the
//! kept runtimes are shared by the whole process.)

use futures::StreamExt;
use std::thread::ThreadId;
use zephon_core::{Error, PipelineExt, Runner};

/// The threads the pipeline's micro-batches ran on (its CPU pool's), under
/// a threads runner of one worker; with `leave_task`, the pipeline spawns
/// a task that never ends.
fn pool_threads(leave_task: bool) -> Vec<ThreadId> {
    let items = futures::stream::iter((0..64).map(Ok::<u32, Error>)).map(move |x| {
        if leave_task && x.as_ref().is_ok_and(|&x| x == 0) {
            tokio::spawn(std::future::pending::<()>());
        }
        x
    });
    let mut ids: Vec<ThreadId> = items
        .map_par(|_| Ok(std::thread::current().id()), 1)
        .into_blocking_iter(Runner::Threads { workers: 1 })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ids.len(), 64);
    ids.sort_unstable_by_key(|id| format!("{id:?}"));
    ids.dedup();
    ids
}

#[test]
fn a_runtime_is_kept_for_the_next_pipeline_unless_a_task_is_left() {
    let first = pool_threads(false);
    assert_eq!(first.len(), 1, "one worker, one pool thread: {first:?}");
    // The same runtime, and so the same pool thread, for the next one.
    assert_eq!(pool_threads(false), first);
    // This one takes it too, and leaves a task running on it...
    assert_eq!(pool_threads(true), first);
    // ... so it was shut down, not kept: the next pipeline gets new threads.
    let after = pool_threads(false);
    assert_eq!(after.len(), 1);
    assert_ne!(after, first);
    assert_eq!(pool_threads(false), after);

    // A pipeline dropped part way (its task aborted) leaves the runtime to
    // the next one, which still delivers everything, in order.
    for _ in 0..20 {
        let mut it = futures::stream::iter((0..10_000u32).map(Ok::<u32, Error>))
            .map_par(|x| Ok(x + 1), 1)
            .into_blocking_iter(Runner::Threads { workers: 1 })
            .unwrap();
        assert_eq!(it.next().unwrap().unwrap(), 1);
        drop(it);
        let all: Vec<u32> = futures::stream::iter((0..1_000u32).map(Ok::<u32, Error>))
            .map_par(|x| Ok(x * 2), 1)
            .into_blocking_iter(Runner::Threads { workers: 1 })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(all, (0..1_000u32).map(|x| x * 2).collect::<Vec<_>>());
    }
}
