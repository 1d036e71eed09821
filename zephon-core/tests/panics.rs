//! A panic inside a pipeline is an error, under every runner and when the
//! stream is driven directly: never an unwinding caller, never a stream that
//! ends as if the data had run out.

use futures::StreamExt;
use zephon_core::{Error, PipelineExt, Record, Runner};

const N: u64 = 1000;
/// The element whose closure panics: in the middle of a micro-batch, so the
/// elements before it in that micro-batch are lost with it.
const K: u64 = 700;

fn runners() -> [Runner; 3] {
    [
        Runner::Inline,
        Runner::threads(),
        Runner::Threads { workers: 2 },
    ]
}

fn numbers() -> impl futures::Stream<Item = Result<u64, Error>> + Send + 'static {
    futures::stream::iter((0..N).map(Ok))
}

fn square_or_panic(x: u64) -> Result<u64, Error> {
    if x == K {
        panic!("element {x} is cursed");
    }
    Ok(x * x)
}

/// Everything the iterator yields, asking twice more after it ends (an
/// iterator that ended must stay ended).
fn drain<T>(mut it: impl Iterator<Item = Result<T, Error>>) -> Vec<Result<T, Error>> {
    let mut out = Vec::new();
    for x in it.by_ref() {
        out.push(x);
        assert!(out.len() <= N as usize + 1, "more items than the input had");
    }
    assert!(it.next().is_none() && it.next().is_none(), "ended twice");
    out
}

/// The delivered values are a prefix of `expected`, then exactly one error,
/// the last item; returns its text.
fn ends_with_one_error(items: Vec<Result<u64, Error>>, expected: &[u64], what: &str) -> String {
    let (last, head) = items
        .split_last()
        .unwrap_or_else(|| panic!("{what}: nothing"));
    let values: Vec<u64> = head
        .iter()
        .map(|r| match r {
            Ok(v) => *v,
            Err(e) => panic!("{what}: an error before the last item: {e}"),
        })
        .collect();
    assert_eq!(values, expected[..values.len()], "{what}: not a prefix");
    assert!(
        (values.len() as u64) <= K,
        "{what}: values past the panic: {}",
        values.len()
    );
    match last {
        Err(e) => e.to_string(),
        Ok(v) => panic!("{what}: the pipeline ended with {v}, not an error"),
    }
}

#[test]
fn a_panicking_map_par_closure_is_an_error_under_every_runner() {
    let expected: Vec<u64> = (0..N).map(|x| x * x).collect();
    for runner in runners() {
        let it = numbers()
            .map_par(square_or_panic, 4)
            .into_blocking_iter(runner)
            .unwrap();
        let msg = ends_with_one_error(drain(it), &expected, &format!("{runner}"));
        assert!(
            msg.contains("operator `map_par`")
                && msg.contains("panic in pipeline")
                && msg.contains("element 700 is cursed"),
            "{runner}: {msg}"
        );
    }
}

#[test]
fn a_panicking_map_par_closure_ends_the_stream_driven_directly() {
    let expected: Vec<u64> = (0..N).map(|x| x * x).collect();
    for runner in runners() {
        let rt = runner.runtime().unwrap();
        let items: Vec<_> = rt.block_on(numbers().map_par(square_or_panic, 3).collect::<Vec<_>>());
        let msg = ends_with_one_error(items, &expected, &format!("stream, {runner}"));
        assert!(
            msg.contains("operator `map_par`") && msg.contains("element 700 is cursed"),
            "{runner}: {msg}"
        );
    }
}

/// A panic in a plain adapter upstream of `prefetch_batches`, on the task
/// it drives.
fn panicking_upstream() -> impl futures::Stream<Item = Result<u64, Error>> + Send + 'static {
    numbers().map(|r| {
        r.inspect(|&x| {
            if x == K {
                panic!("element {x} is cursed");
            }
        })
    })
}

#[test]
fn a_panic_upstream_of_prefetch_batches_is_an_error_under_every_runner() {
    let expected: Vec<u64> = (0..N).collect();
    for runner in runners() {
        let it = panicking_upstream()
            .prefetch_batches(8)
            .into_blocking_iter(runner)
            .unwrap();
        let items = drain(it);
        assert_eq!(
            items.len() as u64,
            K + 1,
            "{runner}: nothing lost before it"
        );
        let msg = ends_with_one_error(items, &expected, &format!("{runner}"));
        assert!(
            msg.contains("operator `prefetch_batches`")
                && msg.contains("panic in pipeline")
                && msg.contains("element 700 is cursed"),
            "{runner}: {msg}"
        );

        // Driven directly, on the runner's runtime.
        let rt = runner.runtime().unwrap();
        let items: Vec<_> =
            rt.block_on(panicking_upstream().prefetch_batches(8).collect::<Vec<_>>());
        let msg = ends_with_one_error(items, &expected, &format!("stream, {runner}"));
        assert!(
            msg.contains("operator `prefetch_batches`") && msg.contains("element 700 is cursed"),
            "stream, {runner}: {msg}"
        );
    }
}

#[test]
fn a_map_par_panic_passes_prefetch_batches_with_its_operator() {
    let expected: Vec<u64> = (0..N).map(|x| x * x).collect();
    for runner in runners() {
        let it = numbers()
            .map_par(square_or_panic, 4)
            .prefetch_batches(4)
            .into_blocking_iter(runner)
            .unwrap();
        let msg = ends_with_one_error(drain(it), &expected, &format!("{runner}"));
        assert!(
            msg.contains("operator `map_par`") && msg.contains("element 700 is cursed"),
            "{runner}: {msg}"
        );
    }
}

#[test]
fn a_panic_in_an_adapter_driven_by_the_runner_is_an_error() {
    // No operator of ours around the panic: the runner itself catches it.
    let expected: Vec<u64> = (0..N).collect();
    for runner in runners() {
        let it = panicking_upstream().into_blocking_iter(runner).unwrap();
        let items = drain(it);
        assert_eq!(
            items.len() as u64,
            K + 1,
            "{runner}: nothing lost before it"
        );
        let msg = ends_with_one_error(items, &expected, &format!("{runner}"));
        assert!(
            msg.contains("panic in pipeline: element 700 is cursed"),
            "{runner}: {msg}"
        );
    }
}

#[test]
fn a_panic_after_batching_ends_the_iterator_without_the_partial_batch() {
    // map_par's panic reaches `batch`, which would flush its partial batch
    // when the input ends; the iterator must end at the error instead.
    for runner in runners() {
        let it = futures::stream::iter((0..N).map(|i| Ok(Record::new().with("i", i as i64))))
            .map_par(
                |r: Record| {
                    if r.get("i").and_then(|v| v.as_int()) == Some(K as i64) {
                        panic!("record {K} is cursed");
                    }
                    Ok(r)
                },
                2,
            )
            .batch(7)
            .into_blocking_iter(runner)
            .unwrap();
        let items = drain(it);
        let (last, head) = items.split_last().unwrap();
        assert!(head.iter().all(|b| b.as_ref().is_ok_and(|b| b.len() == 7)));
        let msg = last.as_ref().map(|_| ()).unwrap_err().to_string();
        assert!(
            msg.contains("operator `map_par`") && msg.contains("record 700 is cursed"),
            "{runner}: {msg}"
        );
    }
}

/// The deepest documented prefetch runs (the queue grows only as elements
/// arrive); a depth past it is an error naming the setting, not a panic
/// of the channel and not a task reading the whole input ahead.
#[test]
fn the_deepest_prefetch_runs_and_a_deeper_one_is_refused() {
    let deepest = zephon_core::settings::PREFETCH_DEPTH.max as usize;
    for runner in runners() {
        let v: Vec<u64> = numbers()
            .prefetch_batches(deepest)
            .into_blocking_iter(runner)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(v, (0..N).collect::<Vec<_>>(), "{runner}");
        let items: Vec<_> = numbers()
            .prefetch_batches(usize::MAX)
            .into_blocking_iter(runner)
            .unwrap()
            .collect();
        assert_eq!(items.len(), 1, "{runner}: the error, then the end");
        let msg = items[0].as_ref().unwrap_err().to_string();
        assert!(msg.contains("prefetch_batches.depth"), "{runner}: {msg}");
    }
}
