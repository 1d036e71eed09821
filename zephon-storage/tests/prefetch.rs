//! `prefetch` warms shards ahead of the reads; a warm-up that fails is
//! counted and is not fatal, because the read itself tries again.

use futures::future::BoxFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zephon_core::{Dataset, InMemoryShard, PipelineExt, Record, Result, Runner, Shard, WorkSource};
use zephon_storage::PrefetchExt;

/// A shard whose warm-up always fails (a flaky download) while its reads
/// succeed.
#[derive(Debug)]
struct FailingWarm {
    inner: InMemoryShard,
    warms: Arc<AtomicU64>,
    /// Warm-ups whose task has finished: their future is dropped then,
    /// before the task's handle is woken.
    finished: Arc<AtomicU64>,
    /// When set, the next read waits for a warm-up to finish (and clears
    /// it): the warm-ups run on the storage runtime, and on a loaded
    /// machine a whole pass could otherwise end before any of them
    /// finished (and was counted).
    gate: Arc<AtomicBool>,
}

/// Counts a warm-up as finished when its future is dropped.
struct Finished(Arc<AtomicU64>);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

impl Shard for FailingWarm {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_run(&self, start: u64, count: u64) -> BoxFuture<'_, Result<Vec<Record>>> {
        if self.gate.swap(false, Ordering::Relaxed) {
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.finished.load(Ordering::Acquire) == 0 {
                assert!(Instant::now() < deadline, "no warm-up finished in 30 s");
                std::thread::sleep(Duration::from_millis(1));
            }
            // The task stores its output and wakes its handle right after
            // its future is dropped: a little time for the runtime's thread
            // to get there on a loaded machine, before the pass runs on.
            std::thread::sleep(Duration::from_millis(20));
        }
        self.inner.read_run(start, count)
    }
    fn warm(&self) -> BoxFuture<'_, Result<()>> {
        self.warms.fetch_add(1, Ordering::Relaxed);
        let done = Finished(self.finished.clone());
        Box::pin(async move {
            let _done = done;
            Err(zephon_core::Error::Operator {
                op: "warm",
                message: "connection reset".into(),
            })
        })
    }
    fn is_warm(&self) -> bool {
        false
    }
}

#[test]
fn a_failed_prefetch_is_counted_and_the_reads_still_deliver_everything() {
    let warms = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(AtomicBool::new(false));
    let shards: Vec<Arc<dyn Shard>> = (0..4)
        .map(|s| {
            let records = (0..50)
                .map(|i| Record::new().with("id", (s * 50 + i) as i64))
                .collect();
            Arc::new(FailingWarm {
                inner: InMemoryShard::new(format!("shard-{s}"), records),
                warms: warms.clone(),
                finished: finished.clone(),
                gate: gate.clone(),
            }) as _
        })
        .collect();
    let ds = Dataset::new("flaky", "memory://flaky", shards).unwrap();
    let fields = |it: zephon_core::BlockingIter<Record>| -> Vec<String> {
        it.map(|r| format!("{:?}", r.unwrap().fields)).collect()
    };
    let run = |prefetch: bool| -> (Vec<String>, Option<u64>) {
        let ws = WorkSource::builder()
            .dataset(ds.clone(), 1.0)
            .seed(3)
            .build()
            .unwrap();
        let ptrs = ws.stream();
        if prefetch {
            gate.store(true, Ordering::Relaxed);
            let p = ptrs.prefetch(64, 2);
            let metrics = p.metrics();
            let out = fields(p.fetch(2).into_blocking_iter(Runner::Inline).unwrap());
            let s = metrics.snapshot();
            assert_eq!(s.successes, 0, "{s:?}");
            (out, Some(s.failures))
        } else {
            (
                fields(ptrs.fetch(2).into_blocking_iter(Runner::Inline).unwrap()),
                None,
            )
        }
    };
    let (plain, _) = run(false);
    let (prefetched, failures) = run(true);
    assert_eq!(plain.len(), 200);
    assert_eq!(prefetched, plain, "prefetch never changes the data");
    let failures = failures.unwrap();
    // Warm-ups still in flight when the pass ends are dropped uncounted.
    assert!(failures >= 1, "failed warm-ups are counted: {failures}");
    assert!(warms.load(Ordering::Relaxed) >= failures);
}

/// `prefetch` shows its inner stream in `Debug` and hands it out.
#[test]
fn prefetch_shows_and_hands_out_its_inner_stream() {
    let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 4]]).unwrap();
    let ws = WorkSource::builder().dataset(ds, 1.0).build().unwrap();
    let mut p = ws.stream().prefetch(8, 2);
    let shown = format!("{p:?}");
    assert!(shown.contains("PointerStream"), "{shown}");
    assert_eq!(p.get_ref().position(), 0);
    let _ = p.get_mut();
    assert_eq!(p.into_inner().position(), 0);
}

/// `prefetch` is a `FusedStream` that ends exactly with its `None`.
#[test]
fn prefetch_is_a_fused_stream_that_ends_exactly() {
    use futures::StreamExt;
    use futures::stream::FusedStream;
    let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 40]]).unwrap();
    let ws = WorkSource::builder().dataset(ds, 1.0).build().unwrap();
    let mut p = ws.stream().prefetch(8, 2);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut n = 0;
        while p.next().await.is_some() {
            n += 1;
            assert!(!p.is_terminated());
        }
        assert_eq!(n, 40);
        assert!(p.is_terminated());
    });
}
