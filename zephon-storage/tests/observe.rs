//! Storage as observability sees it: cache hits and misses per shard in the
//! fetch timing, prefetch requests and downloads in the prefetch timing.

use crate::common;

use common::{cache_opts, write_dataset};
use zephon_core::{PipelineExt, Runner, Tracking, WorkSource};
use zephon_storage::{PrefetchExt, RemoteDataset};

#[test]
fn fetch_and_prefetch_timing_report_the_cache() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    write_dataset(&data, 4, 50);
    let uri = format!("file://{}", data.display());
    // Through the backend and the cache: `Dataset::from_uri` would read this
    // local folder in place, with no cache to report.
    let ds = RemoteDataset::open("obs", &uri, &cache_opts(t.path()))
        .unwrap()
        .dataset()
        .clone();
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(1)
        .passes(2)
        .build()
        .unwrap();

    let mut it = ws
        .stream()
        .prefetch(64, 2)
        .fetch(2)
        .batch(10)
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    let obs = it.enable_observability(Tracking::Operator);
    let mut n = 0;
    for b in it.by_ref() {
        n += b.unwrap().len();
    }
    assert_eq!(n, 400);

    let f = obs.fetch_timing_snapshot();
    assert_eq!(f.totals.samples, 400);
    assert_eq!(f.totals.cache_hits + f.totals.cache_misses, f.totals.groups);
    assert_eq!(f.per_shard.len(), 4);
    assert!(
        f.per_shard.iter().all(|s| s.shard.starts_with("file://")),
        "{f}"
    );
    // Four shards, each downloaded once into the cache; the second pass is all hits.
    let (name, io) = &f.storage[0];
    assert_eq!(name, "obs");
    assert_eq!(io.cache_misses, 4, "{f}");
    assert!(io.bytes_downloaded > 0);

    // Prefetch starts slowly and is best effort: a shard that fetch reaches
    // first is not requested again, and warm-ups still running when the pass
    // ends are dropped uncounted.
    let p = obs.prefetch_timing_snapshot();
    assert!((1..=4).contains(&p.requests), "{p}");
    assert!(p.successes >= 1, "{p}");
    assert!(p.successes + p.failures <= p.requests, "{p}");
    assert!(p.bytes > 0);
}
