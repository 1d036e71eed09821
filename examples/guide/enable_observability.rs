//! Measuring where the time goes: enable observability before iterating,
//! then look at the snapshots while the pipeline runs and at the end.
//!
//! ```text
//! cargo run -p zephon-examples --example enable_observability
//! ```

use std::time::Duration;
use zephon_core::{Dataset, PipelineExt, Runner, Tracking, WorkSource};
use zephon_storage::DatasetExt;

fn main() -> Result<(), zephon_core::Error> {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/data/web");
    let ws = WorkSource::builder()
        .dataset(Dataset::from_path("web", data)?, 1.0)
        .seed(1)
        .build()?;
    // A deliberately slow transform, so the report has something to find.
    let pipeline = ws
        .stream()
        .fetch(2)
        .map_par(
            |r| {
                std::thread::sleep(Duration::from_micros(200));
                Ok(r)
            },
            2,
        )
        .batch(8)
        .prefetch_batches(4);
    println!("{}", pipeline.explain(Runner::threads()));

    let mut it = pipeline.into_blocking_iter(Runner::threads())?;
    // Before the first batch: per-operator tracking.
    let obs = it.enable_observability(Tracking::Operator);
    for (i, batch) in it.by_ref().enumerate() {
        batch?;
        if i == 10 {
            // Snapshots can be taken at any time, from any thread.
            println!("after 10 batches:\n{}\n", obs.metrics_snapshot());
        }
    }
    println!("{}\n", obs.metrics_snapshot());
    println!("{}\n", obs.fetch_timing_snapshot());
    println!("{}", obs.bottleneck_report());
    Ok(())
}
