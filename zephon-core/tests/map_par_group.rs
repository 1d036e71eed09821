//! `map_par`'s offload group: at most `k` micro-batches at work at once
//! whatever the pool's size while as many more wait queued, the output in
//! input order, and a dropped stream stops taking micro-batches.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use zephon_core::{Error, PipelineExt, Runner};

/// Runs `n` elements through `map_par(k)` on a pool of `workers` threads,
/// each call taking a little time; returns the output and the most calls
/// that were at work at once.
fn run(n: u64, k: usize, workers: usize) -> (Vec<u64>, usize) {
    let (active, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (a, m) = (active.clone(), most.clone());
    let out: Vec<u64> = futures::stream::iter((0..n).map(Ok::<u64, Error>))
        .map_par(
            move |x| {
                let now = a.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                // Later elements are quicker: a micro-batch of them would
                // overtake an earlier one if order were not kept.
                std::thread::sleep(Duration::from_micros(200 - (x % 200)));
                a.fetch_sub(1, Ordering::SeqCst);
                Ok(x * 3)
            },
            k,
        )
        .micro_batch(4)
        .into_blocking_iter(Runner::Threads { workers })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    (out, most.load(Ordering::SeqCst))
}

#[test]
fn at_most_k_micro_batches_run_at_once_and_the_order_holds() {
    for (k, workers) in [(1, 4), (2, 4), (3, 3)] {
        let (out, most) = run(400, k, workers);
        assert_eq!(out, (0..400).map(|x| x * 3).collect::<Vec<_>>(), "k {k}");
        assert!(most <= k, "k {k}: {most} calls at once");
    }
    // More than one lane does run at once when the parallelism allows.
    let (_, most) = run(400, 4, 4);
    assert!(most > 1, "{most}");
}

#[test]
fn a_dropped_stream_stops_taking_micro_batches() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let mut it = futures::stream::iter((0..100_000u64).map(Ok::<u64, Error>))
        .map_par(
            move |x| {
                c.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(50));
                Ok(x)
            },
            2,
        )
        .micro_batch(8)
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    for want in 0..20 {
        assert_eq!(it.next().unwrap().unwrap(), want);
    }
    drop(it);
    std::thread::sleep(Duration::from_millis(50));
    let after = calls.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    // Nothing more was taken once the operator was gone; what
    // ran was the 20 taken, the micro-batches in flight then (2 at work,
    // 2 queued, of 8), and at most a hand-off chunk (128) the pipeline's
    // task had made ahead of the consumer (48 here).
    assert_eq!(calls.load(Ordering::SeqCst), after);
    assert!(after <= 200, "{after} calls for 20 items taken");
}
