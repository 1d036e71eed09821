//! Observability: consistent counters, a named bottleneck, concurrent snapshots.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use zephon_core::obs::Tracking;
use zephon_core::{Dataset, PipelineExt, Record, Runner, ShuffleMode, WorkSource};
use zephon_metrics::Limiter;

/// Delivered batches; any error fails the test.
fn drain<T: Send + 'static>(it: &mut zephon_core::BlockingIter<T>) -> usize {
    let mut n = 0;
    for b in it {
        b.unwrap();
        n += 1;
    }
    n
}

fn source(shards: usize, per_shard: usize) -> WorkSource {
    let ds = Dataset::in_memory(
        "obs",
        (0..shards)
            .map(|s| {
                (0..per_shard)
                    .map(|i| Record::new().with("t", format!("{s}-{i}")))
                    .collect()
            })
            .collect(),
    )
    .unwrap();
    WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(3)
        .build()
        .unwrap()
}

#[test]
fn counters_are_consistent() {
    let started = Instant::now();
    let mut it = source(4, 250)
        .stream()
        .fetch(2)
        .map_par(Ok, 2)
        .shuffle(64, ShuffleMode::Reservoir, 1)
        .batch(10)
        .prefetch_batches(4)
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    let obs = it.enable_observability(Tracking::Operator);
    let batches = drain(&mut it);
    let total = started.elapsed().as_secs_f64();
    assert_eq!(batches, 100);

    let m = obs.metrics_snapshot();
    let names: Vec<&str> = m.operators.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(
        names,
        ["fetch", "map_par", "shuffle", "batch", "prefetch_batches"]
    );
    for o in &m.operators {
        if o.name != "batch" {
            assert_eq!(o.elements_in, o.elements_out, "1:1 operator {}", o.name);
        }
    }
    let by = |n: &str| m.operators.iter().find(|o| o.name == n).unwrap().clone();
    assert_eq!(by("fetch").elements_in, 1000);
    assert_eq!(by("fetch").elements_out, 1000);
    assert_eq!(by("map_par").elements_in, by("map_par").elements_out);
    assert_eq!(by("shuffle").elements_in, by("shuffle").elements_out);
    assert_eq!(by("batch").elements_in, 1000);
    assert_eq!(by("batch").elements_out, 100);
    assert_eq!(by("prefetch_batches").elements_out, 100);
    assert!(by("map_par").busy_s > 0.0);

    let f = obs.fetch_timing_snapshot();
    assert_eq!(f.totals.cache_hits + f.totals.cache_misses, f.totals.groups);
    assert_eq!(f.totals.samples, 1000);
    assert_eq!(f.per_shard.len(), 4);
    assert_eq!(
        f.per_shard.iter().map(|s| s.samples).sum::<u64>(),
        f.totals.samples
    );
    assert_eq!(
        f.per_shard.iter().map(|s| s.groups).sum::<u64>(),
        f.totals.groups
    );
    assert!(f.per_shard.iter().all(|s| s.samples == 250));

    let ttfb = m.startup.time_to_first_batch_s.unwrap();
    assert!(ttfb > 0.0 && ttfb < total, "{ttfb} vs {total}");
    assert_eq!(m.startup.batches, 100);

    // Snapshots are plain serde types and print as tables.
    let json = serde_json::to_string(&m).unwrap();
    assert!(json.contains("\"map_par\""));
    let table = m.to_string();
    assert!(
        table.contains("shuffle") && table.contains("first batch"),
        "{table}"
    );
}

#[test]
fn stage_tracking_keeps_fetch_timing_without_operators() {
    let mut it = source(2, 50)
        .stream()
        .fetch(2)
        .batch(5)
        .into_blocking_iter(Runner::Inline)
        .unwrap();
    let obs = it.enable_observability(Tracking::Stage);
    assert_eq!(drain(&mut it), 20);
    assert!(obs.metrics_snapshot().operators.is_empty());
    assert_eq!(obs.fetch_timing_snapshot().totals.samples, 100);
    assert_eq!(obs.metrics_snapshot().startup.batches, 20);
}

#[test]
fn a_slow_operator_is_named_as_the_bottleneck() {
    let mut it = source(2, 60)
        .stream()
        .fetch(2)
        .map_par(
            |r| {
                std::thread::sleep(Duration::from_millis(2));
                Ok(r)
            },
            1,
        )
        .batch(4)
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    let obs = it.enable_observability(Tracking::Operator);
    assert_eq!(drain(&mut it), 30);
    let report = obs.bottleneck_report();
    assert_eq!(
        report.limiter,
        Limiter::Operator {
            name: "map_par".into(),
            position: 1
        },
        "{report}"
    );
    assert!(
        report.advice.iter().any(|a| a.contains("map_par")),
        "{report}"
    );
}

#[test]
fn a_slow_consumer_means_the_pipeline_is_not_the_bottleneck() {
    let mut it = source(2, 40)
        .stream()
        .fetch(2)
        .batch(4)
        .prefetch_batches(4)
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    let obs = it.enable_observability(Tracking::Operator);
    let mut n = 0;
    for b in it.by_ref() {
        b.unwrap();
        // Long beside the pipeline's microseconds per batch, so a loaded
        // machine's scheduling delays cannot make the pipeline look slower.
        std::thread::sleep(Duration::from_millis(25));
        n += 1;
    }
    assert_eq!(n, 20);
    let report = obs.bottleneck_report();
    assert_eq!(report.limiter, Limiter::Consumer, "{report}");
    assert!(report.summary.contains("not the bottleneck"));
}

#[test]
fn snapshots_from_another_thread_during_iteration() {
    let mut it = source(8, 500)
        .stream()
        .fetch(4)
        .map_par(Ok, 4)
        .batch(8)
        .prefetch_batches(2)
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    let obs = it.enable_observability(Tracking::Operator);
    let stop = Arc::new(AtomicBool::new(false));
    let (o, s) = (obs.clone(), stop.clone());
    // 8 shards of 500 records: 4000 records, 500 batches of 8.
    let names = ["fetch", "map_par", "batch", "prefetch_batches"];
    let most = [4000, 4000, 500, 500];
    let watcher = std::thread::spawn(move || {
        let mut taken = 0;
        let mut last_out = [0u64; 4];
        let mut last_samples = 0;
        // At least one snapshot with the operators in it, even if this thread
        // only runs once the pipeline is done.
        while taken == 0 || !s.load(Ordering::Relaxed) {
            // Every snapshot is whole and readable, and counters only grow,
            // whenever it is taken.
            let m = o.metrics_snapshot();
            let seen: Vec<&str> = m.operators.iter().map(|op| op.name.as_str()).collect();
            // Operators attach one by one on the pipeline's first poll, which
            // may come after this thread's first snapshots; once all are
            // there, every snapshot has all of them.
            if seen.len() < names.len() {
                assert!(
                    seen.iter().all(|n| names.contains(n)),
                    "snapshot {taken}: {seen:?}"
                );
                assert!(
                    last_out == [0; 4],
                    "snapshot {taken}: operators gone: {seen:?}"
                );
                continue;
            }
            assert_eq!(seen, names, "snapshot {taken}");
            let table = m.to_string();
            for (i, op) in m.operators.iter().enumerate() {
                assert!(table.contains(&op.name), "snapshot {taken}: {table}");
                assert!(
                    op.elements_out >= last_out[i] && op.elements_out <= most[i],
                    "snapshot {taken}: {} out {}, before {}, at most {}",
                    op.name,
                    op.elements_out,
                    last_out[i],
                    most[i]
                );
                last_out[i] = op.elements_out;
            }
            let f = o.fetch_timing_snapshot();
            assert!(
                f.totals.samples >= last_samples && f.totals.samples <= 4000,
                "snapshot {taken}: {} samples fetched, before {last_samples}",
                f.totals.samples
            );
            assert!(f.per_shard.len() <= 8, "snapshot {taken}: {f}");
            assert!(f.per_shard.iter().all(|sh| sh.samples <= 500), "{f}");
            last_samples = f.totals.samples;
            let p = o.prefetch_timing_snapshot();
            assert_eq!(p.requests, 0, "no prefetch stage, no prefetch requests");
            let r = o.bottleneck_report();
            assert!(!r.summary.is_empty(), "snapshot {taken}: {r}");
            taken += 1;
        }
        (taken, last_out)
    });
    assert_eq!(drain(&mut it), 500);
    stop.store(true, Ordering::Relaxed);
    let (taken, last_out) = watcher.join().unwrap();
    assert!(taken > 0);
    // After the run, every counter is at its total.
    let m = obs.metrics_snapshot();
    let outs: Vec<u64> = m.operators.iter().map(|op| op.elements_out).collect();
    assert_eq!(outs, most);
    assert!(last_out.iter().zip(&most).all(|(l, m)| l <= m));
    assert_eq!(obs.fetch_timing_snapshot().totals.samples, 4000);
}

#[test]
fn off_means_no_observer_and_the_same_output() {
    let run = |tracking: Option<Tracking>| {
        let mut it = source(3, 30)
            .stream()
            .fetch(2)
            .batch(7)
            .into_blocking_iter(Runner::threads())
            .unwrap();
        if let Some(t) = tracking {
            it.enable_observability(t);
        }
        it.map(|b| b.unwrap().digest()).collect::<Vec<_>>()
    };
    let plain = run(None);
    assert_eq!(run(Some(Tracking::Off)), plain);
    assert_eq!(run(Some(Tracking::Operator)), plain);
}

/// A consumer that takes batches faster than a clock read is worth is timed
/// in bunches: every delivery still counts, and its waiting and working
/// time still add up to the time it spent iterating.
#[test]
fn a_fast_consumer_is_accounted_in_full() {
    for runner in [Runner::Inline, Runner::Threads { workers: 2 }] {
        let mut it = source(4, 5_000)
            .stream()
            .fetch(2)
            .batch(4)
            .into_blocking_iter(runner)
            .unwrap();
        let obs = it.enable_observability(Tracking::Operator);
        let started = Instant::now();
        assert_eq!(drain(&mut it), 5_000);
        let elapsed = started.elapsed().as_secs_f64();
        let s = obs.metrics_snapshot().startup;
        assert_eq!(s.batches, 5_000, "{runner:?}");
        let accounted = s.consumer_wait_s + s.consumer_busy_s;
        assert!(
            accounted <= elapsed && accounted > 0.5 * elapsed,
            "{runner:?}: {accounted} s accounted of {elapsed} s"
        );
        assert!(s.time_to_first_batch_s.unwrap() < elapsed, "{runner:?}");
    }
}

/// No operator reports a queue deeper than its capacity (a full shuffle
/// buffer counted the element coming in: 65 of 64).
#[test]
fn no_queue_reports_more_than_its_capacity() {
    let mut it = source(2, 200)
        .stream()
        .fetch(2)
        .shuffle(64, ShuffleMode::Reservoir, 1)
        .batch(10)
        .prefetch_batches(4)
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    let obs = it.enable_observability(Tracking::Operator);
    assert_eq!(drain(&mut it), 40);
    let m = obs.metrics_snapshot();
    for o in &m.operators {
        if let Some(c) = o.queue_capacity {
            assert!(
                o.max_queue_depth <= c,
                "{}: {} of {c}",
                o.name,
                o.max_queue_depth
            );
        }
    }
    let shuffle = m.operators.iter().find(|o| o.name == "shuffle").unwrap();
    assert_eq!(shuffle.max_queue_depth, 64);
}

/// `explain()` and the metrics give every operator the same queue
/// capacity, under either runner, and map_par's depth is counted in
/// elements, as its capacity is (it once showed 128 in the plan, 256 in
/// the metrics, and a depth of 4 micro-batches).
#[test]
fn explain_and_metrics_agree_on_queues() {
    for runner in [Runner::Inline, Runner::Threads { workers: 2 }] {
        let pipeline = || {
            source(2, 4_000)
                .stream()
                .fetch(2)
                .map_par(Ok, 2)
                .shuffle(64, ShuffleMode::Reservoir, 1)
                .batch(10)
                .prefetch_batches(4)
        };
        let plan = pipeline().explain(runner);
        let mut it = pipeline().into_blocking_iter(runner).unwrap();
        let obs = it.enable_observability(Tracking::Operator);
        assert_eq!(drain(&mut it), 800);
        let m = obs.metrics_snapshot();
        for stage in &plan.stages {
            let Some(o) = m.operators.iter().find(|o| o.name == stage.name) else {
                continue;
            };
            assert_eq!(
                o.queue_capacity, stage.queue_capacity,
                "{runner:?}: {}",
                stage.name
            );
        }
        let map = m.operators.iter().find(|o| o.name == "map_par").unwrap();
        let capacity = map.queue_capacity.unwrap();
        assert!(
            map.max_queue_depth <= capacity && map.max_queue_depth > 2,
            "{runner:?}: map_par {} of {capacity}",
            map.max_queue_depth
        );
    }
}
