//! `zephon bench engine`: the stream machinery's own overhead, and the cost
//! of observability, each as a ratio to a baseline measured in the same run.
//!
//! By default every configuration of every round runs in a process of its
//! own (this binary, started again): a pipeline run leaves the allocator's
//! heap and the thread pool's state behind, and measured in one process the
//! configuration that follows another inherits it, which moved the figures
//! by up to 4% either way, more than what is being measured.

use crate::cmd::flags::{AT_LEAST_ONE, GENERATED_RECORDS, ranged};
use anyhow::{Context, Result, bail};
use std::time::Instant;
use zephon_core::settings::BATCH_SIZE;
use zephon_core::{Dataset, PipelineExt, Record, Runner, Tracking, Value, WorkSource};

/// Options of `zephon bench engine`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Records in the in-memory shard.
    #[arg(long, default_value_t = 1_000_000, value_parser = ranged::<usize>(GENERATED_RECORDS))]
    pub records: usize,
    /// Batch size.
    #[arg(long, default_value_t = 32, value_parser = ranged::<usize>(BATCH_SIZE))]
    pub batch: usize,
    /// Rounds; the configurations alternate within each round, and the best
    /// time of each is reported, so machine noise hits all alike.
    #[arg(long, default_value_t = 5, value_parser = ranged::<usize>(AT_LEAST_ONE))]
    pub repeat: usize,
    /// Passes per configuration within one process; its best counts.
    #[arg(long, default_value_t = 3, value_parser = ranged::<usize>(AT_LEAST_ONE))]
    pub passes: usize,
    /// Run every configuration in this process instead of one process per
    /// configuration and round (for profilers).
    #[arg(long)]
    pub in_process: bool,
    /// Run only the configurations with this tracking level (off, stage,
    /// operator), e.g. to profile one of them.
    #[arg(long)]
    pub only: Option<Tracking>,
    /// Run only the configurations with this runner (inline, threads), e.g.
    /// to profile one of them.
    #[arg(long)]
    pub runner: Option<RunnerKind>,
    /// Internal: run configuration N in this process and print its time.
    #[arg(long, hide = true)]
    pub child: Option<usize>,
}

/// A runner, as `--runner` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RunnerKind {
    /// The inline runner.
    Inline,
    /// The threads runner.
    Threads,
}

struct Config {
    label: &'static str,
    parallelism: usize,
    runner: Runner,
    tracking: Tracking,
}

const CONFIGS: [Config; 4] = [
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

impl Config {
    fn selected(&self, args: &Args) -> bool {
        let kind = match self.runner {
            Runner::Inline => RunnerKind::Inline,
            Runner::Threads { .. } => RunnerKind::Threads,
        };
        args.only.is_none_or(|t| t == self.tracking) && args.runner.is_none_or(|r| r == kind)
    }
}

fn make_records(n: usize) -> Vec<Record> {
    (0..n)
        .map(|i| Record::new().with("i", Value::Int(i as i64)))
        .collect()
}

/// The plain loop: the same batches built from a `Vec`.
fn plain(records: &[Record], batch: usize) -> f64 {
    let t = Instant::now();
    let mut n = 0;
    for chunk in records.chunks(batch) {
        let b: Vec<Record> = chunk.to_vec();
        n += std::hint::black_box(b).len();
    }
    assert_eq!(n, records.len());
    t.elapsed().as_secs_f64()
}

/// One pass of a configuration's pipeline, in seconds.
fn pass(c: &Config, ds: &Dataset, records: usize, batch: usize) -> Result<f64> {
    let ws = WorkSource::builder()
        .dataset(ds.clone(), 1.0)
        .shuffle_shards(false)
        .shuffle_within_shard(false)
        .build()?;
    let t = Instant::now();
    let mut it = ws
        .stream()
        .fetch(c.parallelism)
        .batch(batch)
        .into_blocking_iter(c.runner)?;
    it.enable_observability(c.tracking);
    let mut n = 0;
    for b in it {
        n += std::hint::black_box(b?).len();
    }
    if n != records {
        bail!("{}: {n} records delivered of {records}", c.label);
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Best time of the plain loop and of configuration `i` over `passes`
/// passes in this process.
fn measure_here(args: &Args, i: usize) -> Result<(f64, f64)> {
    let records = make_records(args.records);
    let ds = Dataset::in_memory("bench", vec![records.clone()])?;
    let (mut best_plain, mut best) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..args.passes.max(1) {
        best_plain = best_plain.min(plain(&records, args.batch));
        best = best.min(pass(&CONFIGS[i], &ds, args.records, args.batch)?);
    }
    Ok((best_plain, best))
}

/// Runs configuration `i` in a fresh process of this binary.
fn measure_isolated(args: &Args, i: usize) -> Result<(f64, f64)> {
    let exe = std::env::current_exe().context("the path of this binary")?;
    let out = std::process::Command::new(exe)
        .args(["bench", "engine", "--records"])
        .arg(args.records.to_string())
        .arg("--batch")
        .arg(args.batch.to_string())
        .arg("--passes")
        .arg(args.passes.to_string())
        .arg("--child")
        .arg(i.to_string())
        .output()
        .context("starting a benchmark process")?;
    if !out.status.success() {
        bail!(
            "benchmark process for `{}` failed: {}",
            CONFIGS[i].label.trim(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace().map(str::parse::<f64>);
    match (it.next(), it.next()) {
        (Some(Ok(p)), Some(Ok(t))) => Ok((p, t)),
        _ => bail!("unexpected output of a benchmark process: {text:?}"),
    }
}

/// Runs the benchmark and prints one line per configuration.
pub fn run(args: Args) -> Result<()> {
    if let Some(i) = args.child {
        if i >= CONFIGS.len() {
            bail!("--child {i}: there are {} configurations", CONFIGS.len());
        }
        let (p, t) = measure_here(&args, i)?;
        println!("{p} {t}");
        return Ok(());
    }
    let mut best_plain = f64::INFINITY;
    let mut best = [f64::INFINITY; CONFIGS.len()];
    // Every round's time of every configuration: the cost of tracking is
    // also reported as the median over rounds of the paired ratio, which a
    // slow drift of the machine's speed does not skew.
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); CONFIGS.len()];
    for round in 0..args.repeat.max(1) {
        // Alternate which configuration of a pair goes first, so neither
        // always runs on the machine the other left.
        let mut order: Vec<usize> = (0..CONFIGS.len()).collect();
        if round % 2 == 1 {
            for pair in order.chunks_mut(2) {
                pair.reverse();
            }
        }
        for i in order {
            if !CONFIGS[i].selected(&args) {
                continue;
            }
            let (p, t) = if args.in_process {
                measure_here(&args, i)?
            } else {
                measure_isolated(&args, i)?
            };
            best_plain = best_plain.min(p);
            best[i] = best[i].min(t);
            times[i].push(t);
        }
    }
    let rate = |t: f64| args.records as f64 / t;
    println!(
        "{:<32} {:>14.0} records/s  (baseline)",
        "plain loop over a Vec",
        rate(best_plain)
    );
    for (i, (c, t)) in CONFIGS.iter().zip(&best).enumerate() {
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
