//! The engine's own overhead: records through fetch -> batch(32) from an
//! in-memory shard, beside a plain loop that builds the same batches from a
//! `Vec`. Run with `cargo bench -p zephon-core --bench engine`. Every sample
//! checks that all records arrived. Divan times each function on its own;
//! for ratios paired within a round (and memory), use `zephon-bench engine`.

use std::sync::LazyLock;
use zephon_core::{Dataset, PipelineExt, Record, Runner, Tracking, Value, WorkSource};

const N: usize = 1_000_000;
const BATCH: usize = 32;

static RECORDS: LazyLock<Vec<Record>> = LazyLock::new(|| {
    (0..N)
        .map(|i| Record::new().with("i", Value::Int(i as i64)))
        .collect()
});

fn main() {
    divan::main();
}

/// Baseline: the same batches, built by a plain loop over a `Vec`.
#[divan::bench(sample_count = 10)]
fn plain_loop(b: divan::Bencher) {
    let records = &*RECORDS;
    b.counter(divan::counter::ItemsCount::new(N)).bench(|| {
        let mut n = 0;
        for chunk in records.chunks(BATCH) {
            let batch: Vec<Record> = chunk.to_vec();
            n += divan::black_box(batch).len();
        }
        assert_eq!(n, N, "plain loop: records built");
        n
    });
}

fn pipeline(b: divan::Bencher, parallelism: usize, runner: Runner) {
    pipeline_with(b, parallelism, runner, Tracking::Off);
}

fn pipeline_with(b: divan::Bencher, parallelism: usize, runner: Runner, tracking: Tracking) {
    let ds = Dataset::in_memory("bench", vec![RECORDS.clone()]).unwrap();
    b.counter(divan::counter::ItemsCount::new(N)).bench(|| {
        let ws = WorkSource::builder()
            .dataset(ds.clone(), 1.0)
            .shuffle_shards(false)
            .shuffle_within_shard(false)
            .build()
            .unwrap();
        let mut it = ws
            .stream()
            .fetch(parallelism)
            .batch(BATCH)
            .into_blocking_iter(runner)
            .unwrap();
        it.enable_observability(tracking);
        let n = it
            .map(|b| divan::black_box(b.unwrap()).len())
            .sum::<usize>();
        // A pipeline that lost or repeated records would look fast here.
        assert_eq!(
            n, N,
            "fetch -> batch, p={parallelism}, {runner:?}, {tracking:?}: records delivered"
        );
        n
    });
}

/// fetch -> batch(32) with parallelism 1 under the inline runner.
#[divan::bench(sample_count = 10)]
fn fetch_batch_p1(b: divan::Bencher) {
    pipeline(b, 1, Runner::Inline);
}

/// fetch -> batch(32) with parallelism 2 under the threads runner.
#[divan::bench(sample_count = 10)]
fn fetch_batch_p2(b: divan::Bencher) {
    pipeline(b, 2, Runner::Threads { workers: 2 });
}

/// fetch -> batch(32), parallelism 1, inline, per-operator tracking on.
#[divan::bench(sample_count = 10)]
fn fetch_batch_p1_observed(b: divan::Bencher) {
    pipeline_with(b, 1, Runner::Inline, Tracking::Operator);
}

/// fetch -> batch(32), parallelism 2, threads, per-operator tracking on.
#[divan::bench(sample_count = 10)]
fn fetch_batch_p2_observed(b: divan::Bencher) {
    pipeline_with(b, 2, Runner::Threads { workers: 2 }, Tracking::Operator);
}

/// fetch -> batch(32), parallelism 1, inline, stage tracking (consumer and fetch only).
#[divan::bench(sample_count = 10)]
fn fetch_batch_p1_stage(b: divan::Bencher) {
    pipeline_with(b, 1, Runner::Inline, Tracking::Stage);
}
