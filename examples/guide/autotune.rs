//! Autotuning: a tuner moves an operator's parallelism while the pipeline
//! runs, from its live metrics, and the batches stay those of a fixed run.
//!
//! ```text
//! cargo run --release -p zephon-examples --example autotune
//! ```

use std::time::Duration;
use zephon_core::knob::Knob;
use zephon_core::tune::{Tuner, TunerConfig};
use zephon_core::{Dataset, PipelineExt, Record, Runner, Tracking, Value, WorkSource};
use zephon_storage::DatasetExt;

/// Stand-in for real CPU work (parsing, tokenizing, decoding).
fn heavy(mut r: Record) -> zephon_core::Result<Record> {
    let text = r.text("text").unwrap_or_default().to_owned();
    let mut h = 0u64;
    for _ in 0..5_000 {
        h = text.bytes().fold(h, |h, b| h.rotate_left(5) ^ b as u64);
    }
    r.set("hash", Value::Int(h as i64));
    Ok(r)
}

/// The batches' digests, `map_par` at 1 worker or tuned from 1 by `knob`.
fn run(knob: Option<&Knob>) -> Result<Vec<u64>, zephon_core::Error> {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/data/web");
    let ws = WorkSource::builder()
        .dataset(Dataset::from_path("web", data)?, 1.0)
        .seed(5)
        .build()?;
    let work = ws.stream().fetch(2).map_par(heavy, 1).micro_batch(1);
    let work = match knob {
        Some(k) => work.tuned(k),
        None => work,
    };
    let mut it = work.batch(4).into_blocking_iter(Runner::threads())?;
    let Some(knob) = knob else {
        return it.map(|b| b.map(|b| b.digest())).collect();
    };
    // The tuner reads the operators' metrics: observability first.
    let obs = it.enable_observability(Tracking::Operator);
    let config = TunerConfig {
        cores: zephon_core::runner::num_cpus(),
        interval: Duration::from_millis(100),
        ..TunerConfig::default()
    };
    let tuner = Tuner::start(&obs, vec![knob.clone()], config)?;
    let digests = it.map(|b| b.map(|b| b.digest())).collect();
    // Each change, with what the tuner saw: `map_par 1 -> 2 at 0.1 s: ...`.
    println!("{}", tuner.report());
    digests
}

fn main() -> Result<(), zephon_core::Error> {
    let fixed = run(None)?;
    // A knob names the operator it drives; it may go up to the machine's cores.
    let knob = Knob::parallelism("map_par", 1, zephon_core::runner::num_cpus())?;
    let tuned = run(Some(&knob))?;
    assert_eq!(fixed, tuned, "tuning must not change the batches");
    println!("same batches; map_par ends at {} workers", knob.get());
    Ok(())
}
