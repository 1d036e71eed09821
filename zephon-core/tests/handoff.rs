//! The threads runner's hand-off between the pipeline task and the caller.

use futures::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use zephon_core::{Error, PipelineExt, Runner};

/// A caller slower than its pipeline (a training step) holds a few items
/// ahead, not the hand-off's largest chunks: what a pipeline keeps ready is
/// what its own buffers say. The items still arrive all, in order.
#[test]
fn a_slow_caller_holds_few_items_ahead_under_the_threads_runner() {
    let made = Arc::new(AtomicUsize::new(0));
    let counter = made.clone();
    let stream = futures::stream::iter(0..200u32).map(move |i| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok::<_, Error>(i)
    });
    let mut most_ahead = 0;
    let it = stream
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    for (taken, item) in it.enumerate() {
        assert_eq!(item.unwrap(), taken as u32);
        std::thread::sleep(Duration::from_millis(2));
        most_ahead = most_ahead.max(made.load(Ordering::SeqCst) - (taken + 1));
    }
    assert_eq!(made.load(Ordering::SeqCst), 200);
    assert!(
        most_ahead <= 24,
        "the pipeline ran {most_ahead} items ahead of a slow caller"
    );
}

/// A caller as fast as its pipeline still gets every item once, in order,
/// however the chunks grow and shrink on the way.
#[test]
fn a_fast_caller_gets_every_item_in_order_under_the_threads_runner() {
    let stream = futures::stream::iter(0..100_000u32).map(Ok::<_, Error>);
    let got: Vec<u32> = stream
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(got.iter().copied().eq(0..100_000));
}
