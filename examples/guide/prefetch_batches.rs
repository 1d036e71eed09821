//! Prefetching batches: keep finished batches ready ahead of the training
//! loop, so short hiccups upstream do not stall it.
//!
//! ```text
//! cargo run -p zephon-examples --example prefetch_batches
//! ```

use std::time::Duration;
use zephon_core::{Dataset, PipelineExt, Runner, Tracking, WorkSource};
use zephon_storage::DatasetExt;

fn main() -> Result<(), zephon_core::Error> {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/data/web");
    let ws = WorkSource::builder()
        .dataset(Dataset::from_path("web", data)?, 1.0)
        .seed(9)
        .build()?;
    let mut it = ws
        .stream()
        .fetch(2)
        .batch(8)
        .prefetch_batches(16) // up to 16 finished batches wait for the loop
        .into_blocking_iter(Runner::threads())?;
    let obs = it.enable_observability(Tracking::Operator);
    for batch in it.by_ref() {
        batch?;
        // The "training step".
        std::thread::sleep(Duration::from_millis(2));
    }
    let m = obs.metrics_snapshot();
    println!("{m}");
    // With a buffer ahead and a slower consumer, the loop rarely waits.
    println!("{}", obs.bottleneck_report());
    Ok(())
}
