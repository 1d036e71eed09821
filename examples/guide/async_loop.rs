//! An async training loop: the pipeline is a `Stream` awaited batch by batch
//! on a tokio runtime, with per-operator observability, a checkpoint taken
//! between two steps, and a resume from it that continues with the same
//! batches as the uninterrupted run.
//!
//! ```text
//! cargo run -p zephon-examples --example async_loop
//! ```

use futures::{Stream, StreamExt};
use zephon_core::checkpoint::{Checkpoint, CheckpointedStreamExt, Progress, Recipe, ResumeExt};
use zephon_core::{
    Batch, Dataset, Observer, PipelineExt, Record, Result, ShuffleMode, Tracking, WorkSource,
};
use zephon_storage::DatasetExt;

fn work_source() -> Result<WorkSource> {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/data/web");
    WorkSource::builder()
        .dataset(Dataset::from_path("web", data)?, 1.0)
        .seed(7)
        .canonical_lanes(4)
        .build()
}

/// The same pipeline for a fresh start and for a resume: `progress` says
/// where each lane stands.
fn pipeline(ws: &WorkSource, p: &Progress) -> impl Stream<Item = Result<Batch<Record>>> + use<> {
    ws.stream()
        .fetch(4)
        .map_par(Ok, 4)
        .shuffle(64, ShuffleMode::Reservoir, 7)
        .batch(8)
        .resume_from(p)
        .lane_mux_from(p)
        .prefetch_batches(4)
}

fn recipe(ws: &WorkSource) -> Recipe {
    Recipe::new(ws).setting("shuffle", (64, ShuffleMode::Reservoir, 7))
}

/// What a batch is, for comparing runs: its lane, number and sample ids.
fn summary(b: &Batch<Record>) -> (u32, u64, Vec<String>) {
    let ids = b.items.iter().map(|r| {
        r.get("id")
            .and_then(|v| v.as_text())
            .unwrap_or("")
            .to_owned()
    });
    (b.lane, b.index, ids.collect())
}

#[tokio::main]
async fn main() -> Result<()> {
    // The uninterrupted run, observed.
    let ws = work_source()?;
    let obs = Observer::new(Tracking::Operator);
    let mut all = Vec::new();
    let mut batches = obs.observe(pipeline(&ws, &recipe(&ws).start(&ws)));
    while let Some(batch) = batches.next().await {
        all.push(summary(&batch?));
    }
    println!(
        "{}\n\n{}\n",
        obs.metrics_snapshot(),
        obs.bottleneck_report()
    );

    // Train 5 steps, checkpoint, stop.
    let ws = work_source()?;
    let progress = recipe(&ws).start(&ws);
    let mut batches = pipeline(&ws, &progress).checkpointed_stream(progress);
    let mut resumed = Vec::new();
    for _ in 0..5 {
        let batch = batches
            .next()
            .await
            .expect("the run has more than 5 batches")?;
        resumed.push(summary(&batch));
    }
    let bytes = batches.checkpoint().to_bytes();
    drop(batches);

    // Resume from the checkpoint's bytes and finish the run.
    let ws = work_source()?;
    let progress = recipe(&ws).resume(&ws, &Checkpoint::from_bytes(&bytes)?)?;
    let mut batches = pipeline(&ws, &progress);
    while let Some(batch) = batches.next().await {
        resumed.push(summary(&batch?));
    }
    assert_eq!(
        resumed, all,
        "the resumed run differs from the uninterrupted one"
    );
    println!(
        "{} batches; stopped after 5, checkpoint of {} bytes, resumed: identical to the uninterrupted run",
        all.len(),
        bytes.len()
    );
    Ok(())
}
