//! The pipeline context reaches operators first polled late: the second
//! half of a `chain`, streams a `flat_map` creates as it goes, a stream
//! driven on a task the user spawns.

use futures::StreamExt;
use zephon_core::context::{PipelineContext, in_context};
use zephon_core::metrics::OperatorMetrics;
use zephon_core::{Error, Observer, PipelineExt, Record, Runner, Tracking};

fn numbers(from: u64, n: u64) -> impl futures::Stream<Item = Result<u64, Error>> + Send {
    futures::stream::iter((from..from + n).map(Ok))
}

fn ops(obs: &Observer, name: &str) -> Vec<OperatorMetrics> {
    obs.metrics_snapshot()
        .operators
        .into_iter()
        .filter(|o| o.name == name)
        .collect()
}

/// `map_par` hands its work to the pool and returns pending, so the task
/// driving the pipeline is polled many times before the chain switches to
/// its second half.
#[test]
fn the_second_half_of_a_chain_is_observed() {
    let pipeline = numbers(0, 300)
        .map_par(Ok, 2)
        .chain(numbers(300, 200).filter_ok(|_| true));
    let mut it = pipeline
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    let obs = it.enable_observability(Tracking::Operator);
    let v: Vec<u64> = it.by_ref().map(Result::unwrap).collect();
    assert_eq!(v, (0..500).collect::<Vec<_>>());
    let filters = ops(&obs, "filter");
    assert_eq!(filters.len(), 1, "{:?}", obs.metrics_snapshot());
    assert_eq!(
        (filters[0].elements_in, filters[0].elements_out),
        (200, 200)
    );
    assert_eq!(ops(&obs, "map_par")[0].elements_in, 300);
}

#[test]
fn streams_a_flat_map_creates_are_observed() {
    let pipeline = futures::stream::iter(0..4u64)
        .flat_map(|i| numbers(i * 100, 100).map_par(|x| Ok(Record::new().with("x", x as i64)), 2))
        .batch(10);
    let mut it = pipeline
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    let obs = it.enable_observability(Tracking::Operator);
    let n: usize = it.by_ref().map(|b| b.unwrap().len()).sum();
    assert_eq!(n, 400);
    // One inner stream after the other: they count into one entry.
    let maps = ops(&obs, "map_par");
    assert_eq!(maps.len(), 1, "{maps:?}");
    assert_eq!(maps[0].elements_in, 400);
    assert_eq!(ops(&obs, "batch")[0].elements_out, 40);
}

#[test]
fn a_stream_driven_on_a_task_the_user_spawns_is_observed_in_context() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let obs = Observer::new(Tracking::Operator);
    let ctx = PipelineContext::observing(&obs);
    let (carried, bare) = rt.block_on(ctx.scope(async {
        let carried = tokio::spawn(in_context(numbers(0, 100).map_par(Ok, 2).count()));
        // Without `in_context`, the spawned task runs outside the context.
        let bare = tokio::spawn(numbers(0, 50).filter_ok(|_| true).count());
        (carried.await.unwrap(), bare.await.unwrap())
    }));
    assert_eq!((carried, bare), (100, 50));
    let maps = ops(&obs, "map_par");
    assert_eq!(maps.len(), 1);
    assert_eq!(maps[0].elements_in, 100);
    assert!(ops(&obs, "filter").is_empty());
}

/// A context scoped around a stream reaches every operator inside it, on
/// whichever poll they start.
#[test]
fn scope_stream_carries_the_context_on_every_poll() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let obs = Observer::new(Tracking::Operator);
    let ctx = PipelineContext::observing(&obs);
    let s = ctx.scope_stream(
        numbers(0, 200)
            .map_par(Ok, 2)
            .chain(numbers(200, 100).filter_ok(|_| true)),
    );
    let n = rt.block_on(s.count());
    assert_eq!(n, 300);
    assert_eq!(ops(&obs, "filter")[0].elements_in, 100);
}
