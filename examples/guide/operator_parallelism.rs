//! Operator parallelism: give a CPU-heavy operator more workers, and check
//! that only the speed changes.
//!
//! ```text
//! cargo run --release -p zephon-examples --example operator_parallelism
//! ```

use std::time::Instant;
use zephon_core::{Dataset, PipelineExt, Record, Runner, Value, WorkSource};
use zephon_storage::DatasetExt;

/// Stand-in for real CPU work (parsing, tokenizing, decoding).
fn heavy(mut r: Record) -> zephon_core::Result<Record> {
    let text = r.text("text").unwrap_or_default().to_owned();
    let mut h = 0u64;
    for _ in 0..200 {
        h = text.bytes().fold(h, |h, b| h.rotate_left(5) ^ b as u64);
    }
    r.set("hash", Value::Int(h as i64));
    Ok(r)
}

fn run(parallelism: usize) -> Result<(f64, Vec<u64>), zephon_core::Error> {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/data/web");
    let ws = WorkSource::builder()
        .dataset(Dataset::from_path("web", data)?, 1.0)
        .seed(5)
        .build()?;
    let start = Instant::now();
    let digests = ws
        .stream()
        .fetch(parallelism)
        .map_par(heavy, parallelism) // up to `parallelism` micro-batches at work at once
        .batch(16)
        .into_blocking_iter(Runner::threads())?
        .map(|b| b.map(|b| b.digest()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((start.elapsed().as_secs_f64(), digests))
}

fn main() -> Result<(), zephon_core::Error> {
    let (t1, one) = run(1)?;
    let cores = zephon_core::runner::num_cpus();
    let (tn, many) = run(cores)?;
    println!(
        "parallelism 1: {:.1} ms; parallelism {cores}: {:.1} ms",
        t1 * 1e3,
        tn * 1e3
    );
    assert_eq!(one, many, "parallelism must not change the batches");
    println!("same batches");
    Ok(())
}
