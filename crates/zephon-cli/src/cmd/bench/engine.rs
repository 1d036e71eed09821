//! `zephon bench engine`: the stream machinery's own overhead.

use anyhow::Result;
use std::time::Instant;
use zephon_core::{Dataset, PipelineExt, Record, Runner, Value, WorkSource};

/// Options of `zephon bench engine`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Records in the in-memory shard.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: usize,
    /// Batch size.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Repetitions (the best of each is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
}

/// Runs the benchmark and prints one line per configuration.
pub fn run(args: Args) -> Result<()> {
    let records: Vec<Record> = (0..args.records).map(|i| Record::new().with("i", Value::Int(i as i64))).collect();
    let ds = Dataset::in_memory("bench", vec![records.clone()])?;
    let plain = best(args.repeat, || {
        let mut n = 0;
        for chunk in records.chunks(args.batch) {
            let b: Vec<Record> = chunk.to_vec();
            n += b.len();
        }
        n
    });
    println!("{:<32} {:>14.0} records/s  (baseline)", "plain loop over a Vec", args.records as f64 / plain);
    for (label, p, runner) in [
        ("fetch -> batch, p=1, inline", 1, Runner::Inline),
        ("fetch -> batch, p=2, threads", 2, Runner::Threads { workers: 2 }),
    ] {
        let t = best(args.repeat, || {
            let ws = WorkSource::builder()
                .dataset(ds.clone(), 1.0)
                .shuffle_shards(false)
                .shuffle_within_shard(false)
                .build()
                .expect("valid work source");
            ws.stream()
                .fetch(p)
                .batch(args.batch)
                .into_blocking_iter(runner)
                .expect("runtime")
                .map(|b| b.expect("in-memory reads do not fail").len())
                .sum()
        });
        println!(
            "{:<32} {:>14.0} records/s  {:.2}x of baseline",
            label,
            args.records as f64 / t,
            plain / t
        );
    }
    Ok(())
}

fn best(repeat: usize, mut f: impl FnMut() -> usize) -> f64 {
    (0..repeat.max(1))
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}
