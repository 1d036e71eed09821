//! `zephon demo`: the main job. Makes a JSONL corpus, runs the same pipeline
//! with parallelism 1 (inline runner), then on the threads runner with
//! parallelism 1 and with all cores, each timed over repeated passes (about
//! 2 s by default) so the rates are steady, and shows that only the speed
//! differs; says where the time went; then stops a
//! run on two ranks, resumes it on one from their checkpoints, and shows that
//! the global batches are the uninterrupted run's.

use crate::cmd::flags::{GENERATED_RECORDS, GENERATED_SHARDS, ranged};
use zephon_core::settings::{BATCH_SIZE, BUFFER_SIZE, CANONICAL_LANES, PARALLELISM};
mod elastic;

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use zephon_core::hash::combine;
use zephon_core::runner::num_cpus;
use zephon_core::{
    Dataset, Identity, PipelineExt, Record, Runner, ShuffleMode, Tracking, Value, WorkSource,
};
use zephon_metrics::BottleneckReport;
use zephon_storage::DatasetExt;

/// Options of `zephon demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Number of JSONL shards to generate.
    #[arg(long, default_value_t = 8, value_parser = ranged::<usize>(GENERATED_SHARDS))]
    pub shards: usize,
    /// Documents per shard.
    #[arg(long, default_value_t = 5000, value_parser = ranged::<usize>(GENERATED_RECORDS))]
    pub docs_per_shard: usize,
    /// Records per batch.
    #[arg(long, default_value_t = 32, value_parser = ranged::<usize>(BATCH_SIZE))]
    pub batch_size: usize,
    /// Shuffle buffer size (records per lane).
    #[arg(long, default_value_t = 1024, value_parser = ranged::<usize>(BUFFER_SIZE))]
    pub shuffle_buffer: usize,
    /// Canonical lanes of the work source.
    #[arg(long, default_value_t = 4, value_parser = ranged::<u32>(CANONICAL_LANES))]
    pub lanes: u32,
    /// Seed of the corpus and of every shuffle.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Parallelism of the threads runner's second run (default: all cores).
    #[arg(long, value_parser = ranged::<usize>(PARALLELISM))]
    pub parallelism: Option<usize>,
    /// Least time each run is timed over, in milliseconds: a run passes over
    /// the corpus again until it has taken this long, so its rate does not
    /// hang on one short pass (0 to 600,000; 0 is one pass).
    #[arg(long, default_value_t = 2000, value_parser = ranged::<u64>(TIMED_MS))]
    pub min_time_ms: u64,
    /// Write the corpus here and keep it: a new or empty folder (default: a
    /// temporary folder, removed after).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Range of `--min-time-ms`: up to ten minutes per run.
const TIMED_MS: zephon_core::settings::Range =
    zephon_core::settings::Range::new(0, 600_000, "milliseconds each run is timed over");

const WORDS: &[&str] = &[
    "the",
    "model",
    "data",
    "token",
    "shard",
    "stream",
    "batch",
    "lane",
    "seed",
    "train",
    "loss",
    "gradient",
    "sample",
    "mixture",
    "pack",
    "cache",
    "fetch",
    "order",
    "rank",
    "step",
    "epoch",
    "layer",
    "weight",
    "attention",
    "of",
    "and",
    "to",
    "in",
    "is",
    "for",
    "on",
    "with",
];

/// Writes `shards` JSONL files of synthetic documents into `dir`.
pub fn make_corpus(dir: &Path, shards: usize, docs: usize, seed: u64) -> Result<u64> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut bytes = 0;
    for s in 0..shards {
        let path = dir.join(format!("shard-{s:05}.jsonl"));
        let mut rng = ChaCha8Rng::seed_from_u64(combine(seed, s as u64));
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        for d in 0..docs {
            let n = rng.random_range(20..200);
            let text: Vec<&str> = (0..n)
                .map(|_| WORDS[rng.random_range(0..WORDS.len())])
                .collect();
            let line =
                serde_json::json!({ "id": format!("{s}-{d}"), "text": text.join(" ") }).to_string();
            bytes += line.len() as u64 + 1;
            writeln!(out, "{line}")?;
        }
        out.flush()?;
    }
    Ok(bytes)
}

/// The demo's CPU work per record: normalise the text and hash its words into
/// token ids (a stand-in for a tokenizer).
fn parse(mut r: Record) -> zephon_core::Result<Record> {
    let text = r.text("text").unwrap_or_default().to_lowercase();
    let ids: Vec<u32> = text
        .split_whitespace()
        .map(|w| (zephon_core::hash::bytes(w.as_bytes()) % 50_000) as u32)
        .collect();
    r.set("n_words", Value::Int(ids.len() as i64));
    r.set("ids", Value::Tokens(ids));
    Ok(r)
}

/// What one run measured.
#[derive(Debug)]
pub struct RunStats {
    /// Batches delivered.
    pub batches: u64,
    /// Records delivered.
    pub records: u64,
    /// Time to the first batch.
    pub first_batch: Duration,
    /// Total time.
    pub total: Duration,
    /// Digest of the batch sequence's contents (0 when not asked for).
    pub checksum: u64,
    /// Digest of the batch sequence's lane, number and source samples:
    /// cheap enough that it does not weigh on the consumer's time.
    pub order: u64,
    /// Where the time went (per-operator tracking is on in every run).
    pub report: Option<BottleneckReport>,
}

/// Builds and drains the demo pipeline; `contents` adds the digest of every
/// record's fields, a consumer's work that hashes every token.
pub fn run_pipeline(
    dir: &Path,
    args: &Args,
    parallelism: usize,
    runner: Runner,
    contents: bool,
) -> Result<RunStats> {
    let start = Instant::now();
    let ds = Dataset::from_path("demo", dir)?;
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(args.seed)
        .canonical_lanes(args.lanes)
        .build()?;
    let lanes = ws.owned_lanes();
    let pipeline = ws
        .stream()
        .fetch(parallelism)
        .map_par(parse, parallelism)
        .shuffle(args.shuffle_buffer, ShuffleMode::Reservoir, args.seed)
        .batch(args.batch_size)
        .lane_mux(lanes)
        .prefetch_batches(8);
    let mut it = pipeline.into_blocking_iter(runner)?;
    // Cheap enough to leave on: `zephon-bench engine` measures it.
    let obs = it.enable_observability(Tracking::Operator);
    let mut stats = RunStats {
        batches: 0,
        records: 0,
        first_batch: Duration::ZERO,
        total: Duration::ZERO,
        checksum: 0,
        order: 0,
        report: None,
    };
    for batch in it.by_ref() {
        let batch = batch?;
        if stats.batches == 0 {
            stats.first_batch = start.elapsed();
        }
        stats.batches += 1;
        stats.records += batch.len() as u64;
        if contents {
            stats.checksum = combine(stats.checksum, batch.digest());
        }
        let step = combine(combine(batch.lane as u64, batch.index), batch.identity());
        stats.order = combine(stats.order, step);
    }
    stats.total = start.elapsed();
    stats.report = Some(obs.bottleneck_report());
    Ok(stats)
}

/// One configuration timed over as many passes as `--min-time-ms` asks.
struct Timed {
    /// The first pass (its checksum, first batch and report).
    first: RunStats,
    /// Timed passes and their time.
    passes: u64,
    secs: f64,
}

impl Timed {
    fn per_s(&self, n: u64) -> f64 {
        (n * self.passes) as f64 / self.secs
    }
}

/// Runs each configuration once, digesting every record (the checksum the
/// runs are compared by), then times passes of each in turns until each has
/// taken `args.min_time_ms`: taking turns spreads a busy spell of the
/// machine over every configuration rather than one. A timed pass digests
/// only lanes, numbers and source samples, so the consumer's hashing does
/// not cap the rate, and must give the first pass's; with
/// `--min-time-ms 0` the first pass is the timed one.
fn timed(dir: &Path, args: &Args, configs: &[(usize, Runner)]) -> Result<Vec<Timed>> {
    let mut runs = Vec::with_capacity(configs.len());
    for &(p, runner) in configs {
        let first = run_pipeline(dir, args, p, runner, true)?;
        runs.push(Timed {
            secs: first.total.as_secs_f64(),
            passes: 1,
            first,
        });
    }
    let least = args.min_time_ms as f64 / 1e3;
    if least > 0.0 {
        for t in &mut runs {
            (t.secs, t.passes) = (0.0, 0);
        }
    }
    while runs.iter().any(|t| t.secs < least) {
        for (t, &(p, runner)) in runs.iter_mut().zip(configs) {
            if t.secs >= least {
                continue;
            }
            let s = run_pipeline(dir, args, p, runner, false)?;
            if s.order != t.first.order || s.records != t.first.records {
                anyhow::bail!("a timed pass delivered other batches than the first");
            }
            t.secs += s.total.as_secs_f64();
            t.passes += 1;
        }
    }
    Ok(runs)
}

/// Runs the demo.
pub fn run(args: Args) -> Result<()> {
    let tmp;
    let dir = match &args.dir {
        Some(d) => {
            // The demo reads every file of its folder as its corpus: files of
            // another run (more shards) or of the user's were read with it,
            // and figures printed for a corpus that was not the one run.
            let used = std::fs::read_dir(d).map(|mut e| e.next().is_some());
            anyhow::ensure!(
                !matches!(used, Ok(true)),
                "--dir {}: the folder is not empty; the demo reads every file in it as \
                 its corpus, so it writes into a new or empty folder only",
                d.display()
            );
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_owned()
        }
    };
    let bytes = make_corpus(&dir, args.shards, args.docs_per_shard, args.seed)?;
    println!(
        "corpus: {} shards x {} docs, {:.1} MB in {}",
        args.shards,
        args.docs_per_shard,
        bytes as f64 / 1e6,
        dir.display()
    );
    println!(
        "pipeline: fetch -> map_par(parse) -> shuffle({}) -> batch({}) -> lane_mux({} lanes) -> prefetch_batches(8)\n",
        args.shuffle_buffer, args.batch_size, args.lanes
    );
    let cores = args.parallelism.unwrap_or_else(num_cpus).max(1);
    let runs = [
        ("inline runner", 1, Runner::Inline),
        ("threads runner", 1, Runner::Threads { workers: cores }),
        ("threads runner", cores, Runner::Threads { workers: cores }),
    ];
    println!(
        "each run passes over the corpus once (checksum, first batch), then again, the runs in turns,\nuntil its timed passes have taken {} ms; rates are over the timed passes\n",
        args.min_time_ms
    );
    println!(
        "{:<34} {:>7} {:>9} {:>10} {:>12} {:>14} {:>18}",
        "run", "timed", "batches", "batches/s", "records/s", "first batch", "checksum"
    );
    let mut sums = Vec::new();
    let mut last_report = None;
    let configs: Vec<(usize, Runner)> = runs.iter().map(|&(_, p, r)| (p, r)).collect();
    for ((label, p, _), t) in runs.iter().zip(timed(&dir, &args, &configs)?) {
        let s = &t.first;
        println!(
            "{:<34} {:>7} {:>9} {:>10.0} {:>12.0} {:>11.1} ms {:>18}",
            format!("{label}, parallelism {p}"),
            t.passes,
            s.batches,
            t.per_s(s.batches),
            t.per_s(s.records),
            s.first_batch.as_secs_f64() * 1e3,
            format!("{:016x}", s.checksum)
        );
        sums.push((s.checksum, t.per_s(s.records)));
        last_report = t.first.report;
    }
    let same = sums.windows(2).all(|w| w[0].0 == w[1].0);
    println!(
        "\nchecksums {}; speed-up with {cores} cores: {:.2}x over the inline runner, {:.2}x over the threads runner at parallelism 1",
        if same {
            "equal: same batches, same order"
        } else {
            "DIFFER"
        },
        sums[2].1 / sums[0].1,
        sums[2].1 / sums[1].1,
    );
    if !same {
        anyhow::bail!("the runs delivered different batches");
    }
    if let Some(report) = last_report {
        println!(
            "\nwhere the time went in the {cores}-core run (per-operator tracking on):\n{report}"
        );
    }
    elastic::run(&dir, &args, cores)
}
