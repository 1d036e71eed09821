//! `zephon-bench autotune`: the W1 pipeline (tokenize, wrap-pack, batch)
//! with the tokenizer's parallelism fixed at 1 (a bad start), fixed at one
//! per core (the hand-tuned best), and tuned (starting at 1, the tuner
//! moving it within the cores), each in the same invocation; then the same
//! with a consumer that takes `--step-ms` per batch (a slow training step),
//! where the tuned run should use less CPU than the fixed best without
//! making the consumer wait.
//!
//! Prints one JSON line: tokens/s of each fixed-demand run and their
//! ratios to the best, the tuned run's knob changes, and for the slow
//! consumer each side's CPU seconds and the consumer's wait share.

use super::stats::round3;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use zephon_cli::cmd::flags::{AT_LEAST_ONE, ranged};
use zephon_core::knob::Knob;
use zephon_core::tune::{Tuner, TunerConfig};
use zephon_core::{Dataset, PipelineExt, Runner, Tracking, WorkSource};
use zephon_ops::{PackAlgorithm, PackConfig, SpecialTokens, TextPipelineExt, TokenizeConfig};
use zephon_storage::DatasetExt;

/// Options of `zephon-bench autotune`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder of `*.jsonl` shards with a `text` field (the W1 corpus).
    #[arg(long)]
    pub corpus: PathBuf,
    /// A Hugging Face `tokenizer.json` with an `<|endoftext|>` token.
    #[arg(long)]
    pub tokenizer: PathBuf,
    /// Tokens per row.
    #[arg(long, default_value_t = 2048, value_parser = ranged::<usize>(zephon_core::settings::SEQ_LEN))]
    pub seq_len: usize,
    /// Milliseconds the slow consumer spends on each batch (0 skips that part).
    #[arg(long, default_value_t = 50, value_parser = ranged::<u64>(zephon_core::settings::Range::new(0, 60_000, "a step's sleep")))]
    pub step_ms: u64,
    /// Batches the slow consumer takes.
    #[arg(long, default_value_t = 40, value_parser = ranged::<u64>(AT_LEAST_ONE))]
    pub slow_batches: u64,
}

/// CPU seconds (user and system) of this process so far.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage of this process.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

struct Run {
    tokens: u64,
    seconds: f64,
    cpu_s: f64,
    wait_share: f64,
    changes: Vec<String>,
}

/// One pass (or `limit` batches) of W1 with the tokenizer's parallelism
/// `start`, tuned within `cores` if `tune`, the consumer sleeping `step`
/// per batch.
fn pass(a: &Args, start: usize, tune: bool, step: Duration, limit: Option<u64>) -> Result<Run> {
    let cores = zephon_core::runner::num_cpus();
    let config = TokenizeConfig::from_file(&a.tokenizer)?.special_tokens(SpecialTokens::Eos);
    let eos = config
        .token_id("<|endoftext|>")
        .context("the tokenizer has no <|endoftext|> token")?;
    let config = config.eos_id(eos);
    let knob = Knob::parallelism("tokenize", start, cores.max(start))?;
    let ds = Dataset::from_path("corpus", &a.corpus)?;
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .canonical_lanes(1)
        .shuffle_shards(false)
        .shuffle_within_shard(false)
        .build()?;
    let tokenize = ws.stream().fetch(cores).tokenize(config, start);
    let tokenize = if tune {
        tokenize.tuned(&knob)
    } else {
        tokenize
    };
    let mut it = tokenize
        .pack_sequences(PackConfig::new(a.seq_len, PackAlgorithm::Wrap).drop_remainder(true))
        .batch_with(8, true)
        .prefetch_batches(4)
        .into_blocking_iter(Runner::threads())?;
    let obs = it.enable_observability(Tracking::Operator);
    let tuner = if tune {
        let config = TunerConfig {
            cores,
            interval: Duration::from_millis(100),
            ..TunerConfig::default()
        };
        Some(Tuner::start(&obs, vec![knob.clone()], config)?)
    } else {
        None
    };
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let (mut tokens, mut batches) = (0u64, 0u64);
    for b in it.by_ref() {
        let b = b?;
        tokens += b
            .items
            .iter()
            .map(|r| r.tokens("input_ids").map_or(0, |t| t.len() as u64))
            .sum::<u64>();
        batches += 1;
        if !step.is_zero() {
            std::thread::sleep(step);
        }
        if limit.is_some_and(|n| batches >= n) {
            break;
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    let cpu_s = cpu_seconds() - cpu0;
    let m = obs.metrics_snapshot();
    drop(tuner);
    Ok(Run {
        tokens,
        seconds,
        cpu_s,
        wait_share: (m.startup.consumer_wait_s / seconds.max(1e-9)).clamp(0.0, 1.0),
        changes: knob.changes().iter().map(ToString::to_string).collect(),
    })
}

/// Runs the benchmark and prints one JSON line.
pub fn run(a: Args) -> Result<()> {
    let cores = zephon_core::runner::num_cpus();
    let none = Duration::ZERO;
    let bad = pass(&a, 1, false, none, None)?;
    let best = pass(&a, cores, false, none, None)?;
    let auto = pass(&a, 1, true, none, None)?;
    anyhow::ensure!(
        bad.tokens == best.tokens && auto.tokens == best.tokens,
        "token counts differ: {} (parallelism 1), {} (best), {} (tuned)",
        bad.tokens,
        best.tokens,
        auto.tokens
    );
    let tps = |r: &Run| r.tokens as f64 / r.seconds;
    let mut line = serde_json::json!({
        "bench": "autotune",
        "cores": cores,
        "tokens": best.tokens,
        "best_tokens_per_s": tps(&best).round(),
        "ratio_fixed_1_to_best": round3(tps(&bad) / tps(&best)),
        "ratio_auto_to_best": round3(tps(&auto) / tps(&best)),
        "auto_changes": auto.changes,
    });
    if a.step_ms > 0 {
        let step = Duration::from_millis(a.step_ms);
        let slow_best = pass(&a, cores, false, step, Some(a.slow_batches))?;
        let slow_auto = pass(&a, cores, true, step, Some(a.slow_batches))?;
        line["slow_step_ms"] = a.step_ms.into();
        line["slow_best_cpu_s"] = round3(slow_best.cpu_s).into();
        line["slow_auto_cpu_s"] = round3(slow_auto.cpu_s).into();
        line["ratio_slow_auto_cpu_to_best"] =
            round3(slow_auto.cpu_s / slow_best.cpu_s.max(1e-9)).into();
        line["slow_best_consumer_wait_share"] = round3(slow_best.wait_share).into();
        line["slow_auto_consumer_wait_share"] = round3(slow_auto.wait_share).into();
        line["slow_auto_changes"] = slow_auto.changes.into();
    }
    println!("{line}");
    Ok(())
}
