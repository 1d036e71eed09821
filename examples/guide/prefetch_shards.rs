//! Prefetching shards: look ahead in the pointer stream and download shards
//! into the cache before fetch needs them.
//!
//! ```text
//! cargo run -p zephon-examples --example prefetch_shards
//! ```
//!
//! The dataset is read through the storage layer's backend (`file://` here;
//! `s3://` and `http(s)://` work the same way) with a shard cache in a
//! temporary folder. `RemoteDataset::open` takes even a local folder through
//! the backend and the cache, so the example shows prefetch at work without
//! a server; `Dataset::from_uri` would read a local folder in place, with
//! nothing to prefetch.

use zephon_core::{PipelineExt, Runner, Tracking, WorkSource};
use zephon_storage::{CacheOptions, PrefetchExt, RemoteDataset, StorageOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cache = tempfile::tempdir()?;
    let uri = format!(
        "file://{}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/data/web")
    );
    let opts = StorageOptions::default().cache(
        CacheOptions::default()
            .root(cache.path())
            .limit_bytes(64 << 20) // disk tier
            .memory_bytes(16 << 20), // memory tier
    );
    let ws = WorkSource::builder()
        .dataset(
            RemoteDataset::open("web", &uri, &opts)?.dataset().clone(),
            1.0,
        )
        .seed(3)
        .build()?;
    let mut it = ws
        .stream()
        // buffer_size is in samples; parallelism is concurrent downloads.
        .prefetch(128, 2)
        .fetch(2)
        .batch(16)
        .into_blocking_iter(Runner::threads())?;
    let obs = it.enable_observability(Tracking::Stage);
    let mut n = 0;
    for batch in it.by_ref() {
        n += batch?.len();
    }
    println!("{n} samples");
    println!("{}", obs.prefetch_timing_snapshot());
    println!("{}", obs.fetch_timing_snapshot());
    Ok(())
}
