//! `zephon-bench engine`: the stream machinery's own overhead, and the cost
//! of observability, each as a ratio to a baseline measured in the same run.
//!
//! Each pipeline time is paired with the plain loop measured in the same
//! process (its baseline), and each tracking configuration with the same
//! configuration without tracking in the same round; ratios are medians of
//! those pairs over rounds. Peak anonymous memory (RssAnon) of each side is
//! reported beside its rate.
//!
//! By default every configuration of every round runs in a process of its
//! own (this binary, started again): a pipeline run leaves the allocator's
//! heap and the thread pool's state behind, and measured in one process the
//! configuration that follows another inherits it, which moved the figures
//! by up to 4% either way, more than what is being measured.

use super::{mem, stats};
use anyhow::{Context, Result, bail};
use std::time::Instant;
use zephon_cli::cmd::flags::{AT_LEAST_ONE, GENERATED_RECORDS, ranged};
use zephon_core::settings::BATCH_SIZE;
use zephon_core::{Dataset, PipelineExt, Record, Runner, Tracking, Value, WorkSource};

/// Options of `zephon-bench engine`.
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
    /// Print one JSON object (the same figures as the table) instead of
    /// the table.
    #[arg(long)]
    pub json: bool,
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

/// What one process measured for one configuration: the best time of the
/// plain loop and of the pipeline over its passes, and each side's peak
/// RssAnon (the smallest over passes: the allocator keeps what one side
/// freed for the next, so the pass where a side ran first comes closest to
/// its own need). Both sides hold the shared records; the pipeline also
/// holds the in-memory dataset's copy of them.
#[derive(Clone, Copy, Debug)]
struct Measured {
    plain: f64,
    pipeline: f64,
    plain_peak: Option<u64>,
    pipeline_peak: Option<u64>,
}

/// The plain loop and configuration `i`, `passes` times each in this
/// process, taking turns at going first.
fn measure_here(args: &Args, i: usize) -> Result<Measured> {
    let records = make_records(args.records);
    let ds = Dataset::in_memory("bench", vec![records.clone()])?;
    let mut m = Measured {
        plain: f64::INFINITY,
        pipeline: f64::INFINITY,
        plain_peak: None,
        pipeline_peak: None,
    };
    let min_peak = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    for p in 0..args.passes.max(1) {
        for side in [p % 2, 1 - p % 2] {
            let sampler = mem::PeakRss::start();
            if side == 0 {
                m.plain = m.plain.min(plain(&records, args.batch));
                m.plain_peak = min_peak(m.plain_peak, sampler.stop());
            } else {
                m.pipeline = m
                    .pipeline
                    .min(pass(&CONFIGS[i], &ds, args.records, args.batch)?);
                m.pipeline_peak = min_peak(m.pipeline_peak, sampler.stop());
            }
        }
    }
    Ok(m)
}

/// Runs configuration `i` in a fresh process of this binary.
fn measure_isolated(args: &Args, i: usize) -> Result<Measured> {
    let exe = std::env::current_exe().context("the path of this binary")?;
    let out = std::process::Command::new(exe)
        .args(["engine", "--records"])
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
    let f: Vec<&str> = text.split_whitespace().collect();
    let peak =
        |s: &str| -> Result<Option<u64>> { Ok(if s == "-" { None } else { Some(s.parse()?) }) };
    let parsed = (|| -> Result<Measured> {
        anyhow::ensure!(f.len() == 4, "four fields");
        Ok(Measured {
            plain: f[0].parse()?,
            pipeline: f[1].parse()?,
            plain_peak: peak(f[2])?,
            pipeline_peak: peak(f[3])?,
        })
    })();
    parsed.with_context(|| format!("unexpected output of a benchmark process: {text:?}"))
}

/// Runs the benchmark and prints one line per configuration.
pub fn run(args: Args) -> Result<()> {
    if args.records == 0 || args.batch == 0 {
        bail!("--records and --batch must be at least 1");
    }
    if let Some(i) = args.child {
        if i >= CONFIGS.len() {
            bail!("--child {i}: there are {} configurations", CONFIGS.len());
        }
        let m = measure_here(&args, i)?;
        let peak = |p: Option<u64>| p.map_or("-".to_owned(), |b| b.to_string());
        println!(
            "{} {} {} {}",
            m.plain,
            m.pipeline,
            peak(m.plain_peak),
            peak(m.pipeline_peak)
        );
        return Ok(());
    }
    // Every round's measurement of every configuration: each pipeline time
    // is paired with the plain loop measured in the same process, and the
    // cost of tracking with the configuration without it in the same round;
    // medians over rounds of those paired ratios are not skewed by a slow
    // drift of the machine's speed, as a best-of-everything can be.
    let mut runs: Vec<Vec<Measured>> = vec![Vec::new(); CONFIGS.len()];
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
            runs[i].push(if args.in_process {
                measure_here(&args, i)?
            } else {
                measure_isolated(&args, i)?
            });
        }
    }
    let rate = |t: f64| args.records as f64 / t;
    let all: Vec<&Measured> = runs.iter().flatten().collect();
    let smallest_peak =
        |f: fn(&Measured) -> Option<u64>, ms: &[&Measured]| ms.iter().filter_map(|m| f(m)).min();
    let mut lines = vec![format!(
        "{:<32} {:>14} {:>10}  (rates: best run; ratios: median over rounds of ratios paired within a round, and their range)",
        "configuration", "records/s", "peak MiB",
    )];
    let (plain_rate, plain_peak) = (
        rate(all.iter().map(|m| m.plain).fold(f64::INFINITY, f64::min)),
        smallest_peak(|m| m.plain_peak, &all),
    );
    lines.push(format!(
        "{:<32} {:>14.0} {:>10}  baseline, measured in every configuration's process beside it",
        "plain loop over a Vec",
        plain_rate,
        mem::mib(plain_peak),
    ));
    let mut rows = vec![serde_json::json!({
        "configuration": "plain loop over a Vec",
        "records_per_s": plain_rate.round(),
        "peak_rss_anon_mib": mem::mib_json(plain_peak),
    })];
    for (i, c) in CONFIGS.iter().enumerate() {
        if runs[i].is_empty() {
            continue;
        }
        let best = runs[i]
            .iter()
            .map(|m| m.pipeline)
            .fold(f64::INFINITY, f64::min);
        let of_baseline = stats::Ratios::of(runs[i].iter().map(|m| m.plain / m.pipeline).collect());
        let mine: Vec<&Measured> = runs[i].iter().collect();
        let peak = smallest_peak(|m| m.pipeline_peak, &mine);
        let mut row = serde_json::json!({
            "configuration": c.label.trim(),
            "parallelism": c.parallelism,
            "tracking": format!("{:?}", c.tracking).to_lowercase(),
            "records_per_s": rate(best).round(),
            "ratio_to_baseline_median": stats::round3(of_baseline.median),
            "ratio_to_baseline_range": of_baseline.range_json(),
            "peak_rss_anon_mib": mem::mib_json(peak),
        });
        let extra = if c.tracking == Tracking::Off || runs[i - 1].is_empty() {
            String::new()
        } else {
            let median = stats::median(
                runs[i - 1]
                    .iter()
                    .zip(&runs[i])
                    .map(|(off, on)| off.pipeline / on.pipeline)
                    .collect(),
            );
            row["ratio_to_tracking_off_median"] = stats::round3(median).into();
            format!(
                ", {:+.1}% vs tracking off (median of paired rounds)",
                (median - 1.0) * 100.0
            )
        };
        rows.push(row);
        lines.push(format!(
            "{:<32} {:>14.0} {:>10}  {:.2}x of baseline (rounds {:.2}-{:.2}){extra}",
            c.label,
            rate(best),
            mem::mib(peak),
            of_baseline.median,
            of_baseline.low,
            of_baseline.high,
        ));
    }
    let json = || {
        serde_json::json!({
            "bench": "engine",
            "records": args.records,
            "batch": args.batch,
            "rounds": args.repeat.max(1),
            "rows": rows,
        })
    };
    super::print_report(args.json, json, &lines);
    Ok(())
}
