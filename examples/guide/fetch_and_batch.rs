//! Fetch and batch: the simplest pipeline, and the determinism promise.
//!
//! ```text
//! cargo run -p zephon-examples --example fetch_and_batch
//! ```
//!
//! Reads the small JSONL dataset under `examples/data/web`, shuffles and
//! batches it, once with one thread and once with a worker pool, and shows
//! that the batches are the same.

use zephon_core::{Dataset, PipelineExt, Runner, ShuffleMode, WorkSource};
use zephon_storage::DatasetExt;

fn batches(runner: Runner, parallelism: usize) -> Result<Vec<u64>, zephon_core::Error> {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/data/web");
    // What to train on: one dataset, seeded shuffles, one pass, four lanes.
    let ws = WorkSource::builder()
        .dataset(Dataset::from_path("web", data)?, 1.0)
        .seed(42)
        .canonical_lanes(4)
        .build()?;
    let lanes = ws.owned_lanes();
    let pipeline = ws
        .stream()
        .fetch(parallelism) // pointers -> records, reads in flight
        .shuffle(64, ShuffleMode::Reservoir, 42) // per-lane buffer shuffle
        .batch(16) // a batch never mixes lanes
        .lane_mux(lanes); // owned lanes in strict round robin
    let mut digests = Vec::new();
    for batch in pipeline.into_blocking_iter(runner)? {
        digests.push(batch?.digest());
    }
    Ok(digests)
}

fn main() -> Result<(), zephon_core::Error> {
    let inline = batches(Runner::Inline, 1)?;
    let threads = batches(Runner::threads(), 8)?;
    println!(
        "{} batches with one thread, {} with the worker pool",
        inline.len(),
        threads.len()
    );
    // Parallelism and runner are performance knobs only.
    assert_eq!(inline, threads);
    println!("same batches, same order");
    Ok(())
}
