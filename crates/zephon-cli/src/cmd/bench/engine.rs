//! `zephon bench engine`: the stream machinery's own overhead, and the cost
//! of observability, each as a ratio to a baseline measured in the same run.

use anyhow::Result;
use std::time::Instant;
use zephon_core::{Dataset, PipelineExt, Record, Runner, Tracking, Value, WorkSource};

/// Options of `zephon bench engine`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Records in the in-memory shard.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: usize,
    /// Batch size.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Rounds; the configurations alternate within each round, and the best
    /// time of each is reported, so machine noise hits all alike.
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// Run only the configurations with this tracking level (off, stage,
    /// operator), e.g. to profile one of them.
    #[arg(long)]
    pub only: Option<Tracking>,
}

struct Config {
    label: &'static str,
    parallelism: usize,
    runner: Runner,
    tracking: Tracking,
}

/// Runs the benchmark and prints one line per configuration.
pub fn run(args: Args) -> Result<()> {
    let records: Vec<Record> = (0..args.records)
        .map(|i| Record::new().with("i", Value::Int(i as i64)))
        .collect();
    let ds = Dataset::in_memory("bench", vec![records.clone()])?;
    let configs = [
        Config {
            label: "fetch -> batch, p=1, inline",
            parallelism: 1,
            runner: Runner::Inline,
            tracking: Tracking::Off,
        },
        Config {
            label: "  same, per-operator tracking",
            parallelism: 1,
            runner: Runner::Inline,
            tracking: Tracking::Operator,
        },
        Config {
            label: "fetch -> batch, p=2, threads",
            parallelism: 2,
            runner: Runner::Threads { workers: 2 },
            tracking: Tracking::Off,
        },
        Config {
            label: "  same, per-operator tracking",
            parallelism: 2,
            runner: Runner::Threads { workers: 2 },
            tracking: Tracking::Operator,
        },
    ];
    let mut best_plain = f64::INFINITY;
    let mut best = vec![f64::INFINITY; configs.len()];
    // Every round's time of every configuration: the cost of tracking is
    // also reported as the median over rounds of the paired ratio, which a
    // slow drift of the machine's speed does not skew.
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for round in 0..args.repeat.max(1) {
        let t = Instant::now();
        let mut n = 0;
        for chunk in records.chunks(args.batch) {
            let b: Vec<Record> = chunk.to_vec();
            n += std::hint::black_box(b).len();
        }
        assert_eq!(n, args.records);
        best_plain = best_plain.min(t.elapsed().as_secs_f64());
        // Alternate which configuration of a pair goes first, so neither
        // always inherits the other's allocator and cache state.
        let mut order: Vec<usize> = (0..configs.len()).collect();
        if round % 2 == 1 {
            for pair in order.chunks_mut(2) {
                pair.reverse();
            }
        }
        for i in order {
            let (c, b) = (&configs[i], &mut best[i]);
            if args.only.is_some_and(|t| t != c.tracking) {
                continue;
            }
            let ws = WorkSource::builder()
                .dataset(ds.clone(), 1.0)
                .shuffle_shards(false)
                .shuffle_within_shard(false)
                .build()?;
            let t = Instant::now();
            let mut it = ws
                .stream()
                .fetch(c.parallelism)
                .batch(args.batch)
                .into_blocking_iter(c.runner)?;
            it.enable_observability(c.tracking);
            let mut n = 0;
            for batch in it {
                n += std::hint::black_box(batch?).len();
            }
            assert_eq!(n, args.records);
            let secs = t.elapsed().as_secs_f64();
            *b = b.min(secs);
            times[i].push(secs);
        }
    }
    let rate = |t: f64| args.records as f64 / t;
    println!(
        "{:<32} {:>14.0} records/s  (baseline)",
        "plain loop over a Vec",
        rate(best_plain)
    );
    for (i, (c, t)) in configs.iter().zip(&best).enumerate() {
        if !t.is_finite() {
            continue;
        }
        let extra = if c.tracking == Tracking::Off || !best[i - 1].is_finite() {
            String::new()
        } else {
            let mut ratios: Vec<f64> = times[i - 1]
                .iter()
                .zip(&times[i])
                .map(|(off, on)| off / on)
                .collect();
            ratios.sort_by(f64::total_cmp);
            let median = ratios[ratios.len() / 2];
            format!(
                ", {:+.1}% vs tracking off (best of each), {:+.1}% (median of paired rounds)",
                (best[i - 1] / t - 1.0) * 100.0,
                (median - 1.0) * 100.0
            )
        };
        println!(
            "{:<32} {:>14.0} records/s  {:.2}x of baseline{extra}",
            c.label,
            rate(*t),
            best_plain / t
        );
    }
    Ok(())
}
