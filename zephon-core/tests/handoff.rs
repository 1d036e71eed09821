//! The threads runner's hand-off between the pipeline task and the caller.

use futures::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use zephon_core::{Error, PipelineExt, Runner};

/// Held by every test here: they time the two sides of the hand-off, and
/// run one at a time so that they do not take each other's cores.
static TIMED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn timed() -> std::sync::MutexGuard<'static, ()> {
    TIMED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A caller slower than its pipeline (a training step) holds a few items
/// ahead, not the hand-off's largest chunks: what a pipeline keeps ready is
/// what its own buffers say. The items still arrive all, in order.
#[test]
fn a_slow_caller_holds_few_items_ahead_under_the_threads_runner() {
    let _alone = timed();
    let (made, it) = counted(200, 0);
    let mut most_ahead = 0;
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
    let _alone = timed();
    let stream = futures::stream::iter(0..100_000u32).map(Ok::<_, Error>);
    let got: Vec<u32> = stream
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(got.iter().copied().eq(0..100_000));
}

/// Items `0..n` under the threads runner, each counted in the returned
/// counter as the pipeline starts making it and taking `micros` of its time.
fn counted(n: u32, micros: u64) -> (Arc<AtomicUsize>, zephon_core::BlockingIter<u32>) {
    let made = Arc::new(AtomicUsize::new(0));
    let counter = made.clone();
    let stream = futures::stream::iter(0..n).map(move |i| {
        counter.fetch_add(1, Ordering::SeqCst);
        busy(micros);
        Ok::<_, Error>(i)
    });
    let it = stream
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    (made, it)
}

/// An item that takes `micros` of the pipeline's time.
fn busy(micros: u64) {
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_micros(micros) {
        std::hint::spin_loop();
    }
}

/// A caller that waits for every item polls the pipeline itself (nothing is
/// made ahead of what it took); one that then spends long on its items gets
/// the pipeline run ahead on a task again. Every item arrives once, in
/// order, across both changes.
#[test]
fn a_waiting_caller_runs_the_pipeline_and_a_slow_one_hands_it_back() {
    let _alone = timed();
    let (made, mut it) = counted(6000, 20);
    // Waiting on a pipeline slower than itself: made in step with taken.
    let (mut run, mut longest) = (0, 0);
    for taken in 1..=4000usize {
        assert_eq!(it.next().unwrap().unwrap(), taken as u32 - 1);
        if made.load(Ordering::SeqCst) == taken {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    assert!(
        longest >= 1000,
        "the pipeline kept running ahead of a waiting caller (longest run in step: {longest})"
    );
    // A caller spending a millisecond an item: the pipeline runs ahead.
    let mut ahead = false;
    for taken in 4001..=4200usize {
        assert_eq!(it.next().unwrap().unwrap(), taken as u32 - 1);
        std::thread::sleep(Duration::from_millis(1));
        ahead |= made.load(Ordering::SeqCst) > taken;
    }
    assert!(ahead, "the pipeline never ran ahead of a slow caller again");
    let rest: Vec<u32> = it.map(Result::unwrap).collect();
    assert!(rest.iter().copied().eq(4200..6000));
}

/// A caller that spends a large share of its time on work of its own from
/// the first item (but under a training step's milliseconds) gets the
/// pipeline run ahead of it on a task once the opening has timed it, so
/// that its work and the pipeline's overlap. Every item arrives once, in
/// order.
#[test]
fn a_caller_with_work_of_its_own_from_the_start_gets_the_pipeline_run_ahead() {
    let _alone = timed();
    let (made, it) = counted(1000, 20);
    let mut ahead = false;
    for (taken, item) in it.enumerate() {
        assert_eq!(item.unwrap(), taken as u32);
        busy(40);
        ahead |= made.load(Ordering::SeqCst) > taken + 1;
    }
    assert!(ahead, "the pipeline never ran ahead of a working caller");
}

/// A panic while the caller polls the pipeline itself is an error item
/// naming the panic, after which the iterator ends.
#[test]
fn a_panic_while_the_caller_polls_ends_the_iterator_with_an_error() {
    let _alone = timed();
    let stream = futures::stream::iter(0..3000u32).map(|i| {
        busy(20);
        assert!(i != 2000, "boom at {i}");
        Ok::<_, Error>(i)
    });
    let got: Vec<Result<u32, Error>> = stream
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap()
        .collect();
    assert_eq!(got.len(), 2001);
    assert!(
        got[..2000]
            .iter()
            .enumerate()
            .all(|(i, r)| r.as_ref().ok() == Some(&(i as u32)))
    );
    let err = got[2000].as_ref().unwrap_err();
    assert!(
        err.is_panic() && err.to_string().contains("boom at 2000"),
        "{err}"
    );
}

/// An ordinary error (a bad sample) is an item like any other: the
/// pipeline goes on after it whoever polls it. On the task that runs ahead
/// of a slow caller, a chunk ending in an error ended the pipeline, so the
/// iterator stopped early (after two of twenty errors), as if the data had
/// run out, where the inline runner gave all twenty.
#[test]
fn an_ordinary_error_does_not_end_the_pipeline_under_either_runner() {
    let _alone = timed();
    let items = |runner: Runner, pause: Duration| -> Vec<Result<u32, String>> {
        futures::stream::iter(0..40u32)
            .map(|i| match i % 2 {
                0 => Ok(i),
                _ => Err(Error::config("sample", format!("bad sample {i}"))),
            })
            .into_blocking_iter(runner)
            .unwrap()
            .map(|r| {
                std::thread::sleep(pause);
                r.map_err(|e| e.to_string())
            })
            .collect()
    };
    let inline = items(Runner::Inline, Duration::ZERO);
    assert_eq!(inline.len(), 40);
    assert_eq!(inline.iter().filter(|r| r.is_err()).count(), 20);
    for pause in [Duration::ZERO, Duration::from_millis(2)] {
        assert_eq!(
            items(Runner::Threads { workers: 2 }, pause),
            inline,
            "{pause:?}"
        );
    }
}
