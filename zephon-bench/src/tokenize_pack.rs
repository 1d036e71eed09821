//! `zephon-bench tokenize-pack`: workload W1 of the side-by-side benchmark.
//!
//! One pass over every `*.jsonl` shard of a folder; each document's `text`
//! tokenized without special tokens, EOS appended; the token stream cut into
//! rows of exactly `--seq-len` (remainder dropped); batches of `--batch`
//! rows; the consumer receives each batch as one row-major `u32` array.
//! Prints one JSON line with the keys of `peers.py`.

use super::{mem, stats};
use anyhow::{Context, Result};
use std::path::Path;
use std::time::Instant;
use zephon_cli::cmd::flags::{AT_LEAST_ONE, ranged};
use zephon_core::settings::{BATCH_SIZE, SEQ_LEN, WORKERS};
use zephon_core::{Dataset, PipelineExt, Runner, Tracking, WorkSource};
use zephon_ops::{PackAlgorithm, PackConfig, SpecialTokens, TextPipelineExt, TokenizeConfig};
use zephon_storage::DatasetExt;

/// Options of `zephon-bench tokenize-pack`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder of `*.jsonl` shards with a `text` field.
    #[arg(long)]
    pub corpus: std::path::PathBuf,
    /// A Hugging Face `tokenizer.json`.
    #[arg(long)]
    pub tokenizer: std::path::PathBuf,
    /// Tokens per row.
    #[arg(long, default_value_t = 2048, value_parser = ranged::<usize>(SEQ_LEN))]
    pub seq_len: usize,
    /// Rows per batch.
    #[arg(long, default_value_t = 8, value_parser = ranged::<usize>(BATCH_SIZE))]
    pub batch: usize,
    /// Micro-batches tokenizing at once (0: one per core; more threads than
    /// cores only add contention).
    #[arg(long, default_value_t = 0, value_parser = ranged::<usize>(WORKERS))]
    pub parallelism: usize,
    /// Also measure the limit for this workload: the tokenizer's own
    /// `encode_batch_fast` (ids only, as the pipeline's `encode_fast`) over
    /// the same texts already in memory, all cores, in this process and
    /// allocator. Its token count, cut as the pipeline cuts, must equal the
    /// pipeline's.
    #[arg(long)]
    pub raw: bool,
    /// Rounds. Within a round the pipeline, the raw measurement and the
    /// observed run take turns, each round starting with a different one so
    /// none always runs on the machine another left; ratios are medians of
    /// the ratios within a round, rates are each side's best run.
    #[arg(long, default_value_t = 1, value_parser = ranged::<usize>(AT_LEAST_ONE))]
    pub repeat: usize,
    /// Also run with per-operator observability on, and report its cost as a
    /// ratio of the best runs (`observed_ratio`) and as the median over
    /// rounds of the ratio within a round (`observed_ratio_median`).
    #[arg(long)]
    pub observe: bool,
    /// A peer command on the same corpus (e.g. `python3 peers.py grain DIR
    /// TOKENIZER`), run once a round after the pipeline, printing one JSON
    /// line with `system`, `tokens`, `seconds` and `tokens_per_s`; its
    /// token count must equal the pipeline's. Its memory is sampled over
    /// its whole process tree.
    #[arg(long)]
    pub peer: Vec<String>,
}

/// One measured run of one side: delivered tokens, seconds, peak RssAnon.
#[derive(Clone, Copy, Debug)]
struct Run {
    batches: u64,
    tokens: u64,
    secs: f64,
    peak: Option<u64>,
}

impl Run {
    fn tps(&self) -> f64 {
        self.tokens as f64 / self.secs
    }
}

/// The sides a round measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Pipeline,
    Observed,
    Raw,
}

/// Each side's runs, one per round.
#[derive(Default)]
struct Runs(Vec<Run>);

impl Runs {
    fn best(&self) -> Option<&Run> {
        self.0.iter().min_by(|a, b| a.secs.total_cmp(&b.secs))
    }

    /// The smallest peak over rounds: mimalloc keeps pages a run freed for
    /// the next, so a side's peak is inflated by whatever ran before it; the
    /// round where it ran first comes closest to its own need.
    fn peak(&self) -> Option<u64> {
        self.0.iter().filter_map(|r| r.peak).min()
    }
}

/// `num`'s throughput over `den`'s in the same round, over rounds.
fn paired_ratios(num: &Runs, den: &Runs) -> stats::Ratios {
    stats::Ratios::of(
        num.0
            .iter()
            .zip(&den.0)
            .map(|(n, d)| n.tps() / d.tps())
            .collect(),
    )
}

/// Runs the benchmark and prints one JSON line.
pub fn run(a: Args) -> Result<()> {
    anyhow::ensure!(a.seq_len > 0, "--seq-len must be at least 1");
    anyhow::ensure!(a.batch > 0, "--batch must be at least 1");
    let cores = zephon_core::runner::num_cpus();
    let k = if a.parallelism == 0 {
        cores
    } else {
        a.parallelism
    };
    let mut sides = vec![Side::Pipeline];
    if a.raw {
        sides.push(Side::Raw);
    }
    if a.observe {
        sides.push(Side::Observed);
    }
    let (mut plain, mut observed, mut raw_runs) =
        (Runs::default(), Runs::default(), Runs::default());
    let rounds = a.repeat.max(1);
    let mut peers: Vec<Option<super::tokens::Run>> = vec![None; a.peer.len()];
    for round in 0..rounds {
        let mut order = sides.clone();
        order.rotate_left(round % sides.len());
        for side in order {
            match side {
                Side::Pipeline => plain.0.push(pipeline(&a, cores, k, Tracking::Off)?),
                Side::Observed => observed.0.push(pipeline(&a, cores, k, Tracking::Operator)?),
                Side::Raw => raw_runs.0.push(raw(&a)?),
            }
        }
        for (p, slot) in a.peer.iter().zip(peers.iter_mut()) {
            super::tokens::keep(slot, super::tokens::measure_peer(p)?);
        }
    }
    // Both sides must have delivered the same tokens, or the ratio compares
    // different work.
    for r in plain.0.iter().chain(&observed.0).chain(&raw_runs.0) {
        anyhow::ensure!(
            r.tokens == plain.0[0].tokens,
            "token counts differ: the pipeline delivered {}, another run {} \
             (same corpus, tokenizer, --seq-len and --batch)",
            plain.0[0].tokens,
            r.tokens
        );
    }
    let best = *plain.best().context("no pipeline run")?;
    let mut line = serde_json::json!({
        "system": "zephon",
        "batches": best.batches,
        "tokens": best.tokens,
        "seconds": stats::round3(best.secs),
        "tokens_per_s": best.tps().round(),
        "peak_rss_anon_mib": mem::mib_json(plain.peak()),
        "parallelism": k,
        "cores": cores,
        "rounds": rounds,
    });
    if let Some(obs) = observed.best() {
        line["observed_tokens_per_s"] = obs.tps().round().into();
        // Throughput with per-operator tracking over throughput without.
        line["observed_ratio"] = stats::round3(obs.tps() / best.tps()).into();
        line["observed_ratio_median"] =
            stats::round3(paired_ratios(&observed, &plain).median).into();
        line["observed_peak_rss_anon_mib"] = mem::mib_json(observed.peak());
    }
    if let Some(r) = raw_runs.best() {
        line["raw_tokens"] = r.tokens.into();
        line["raw_seconds"] = stats::round3(r.secs).into();
        line["raw_tokens_per_s"] = r.tps().round().into();
        line["raw_peak_rss_anon_mib"] = mem::mib_json(raw_runs.peak());
        // Median over rounds of the pipeline's throughput over the raw
        // tokenizer's in the same round.
        let to_raw = paired_ratios(&plain, &raw_runs);
        line["ratio_to_raw"] = stats::round3(to_raw.median).into();
        line["ratio_to_raw_range"] = to_raw.range_json();
        line["ratio_to_raw_best"] = stats::round3(best.tps() / r.tps()).into();
    }
    for (cmd, peer) in a.peer.iter().zip(peers.into_iter().flatten()) {
        let tokens = peer.line["tokens"].as_u64();
        anyhow::ensure!(
            tokens == Some(best.tokens),
            "peer `{cmd}` delivered {tokens:?} tokens, the pipeline {} \
             (same corpus, tokenizer, --seq-len and --batch)",
            best.tokens
        );
        println!("{}", peer.line);
        let name = peer.line["system"].as_str().unwrap_or("peer").to_owned();
        // The same tokens on both sides: the rates' ratio is the times'.
        line[format!("tokens_per_s_ratio_to_{name}")] =
            stats::round3(peer.seconds / best.secs).into();
        if let Some(ours) = plain.peak().filter(|_| peer.peak_anon > 0) {
            line[format!("peak_rss_anon_ratio_to_{name}")] =
                stats::round3(ours as f64 / peer.peak_anon as f64).into();
        }
    }
    println!("{line}");
    Ok(())
}

/// One pass of the workload, timed from opening the dataset to the last
/// batch, its peak RssAnon sampled over the same span.
fn pipeline(a: &Args, cores: usize, k: usize, tracking: Tracking) -> Result<Run> {
    // Loaded afresh for each run: the raw measurement starts as cold.
    let config = TokenizeConfig::from_file(&a.tokenizer)?.special_tokens(SpecialTokens::Eos);
    let eos = config
        .token_id("<|endoftext|>")
        .context("the tokenizer has no <|endoftext|> token")?;
    let config = config.eos_id(eos);
    let sampler = mem::PeakRss::start();
    let start = Instant::now();
    let ds = Dataset::from_path("corpus", &a.corpus)?;
    // One lane (the default, said here because it matters): packing cuts
    // rows per lane, and the workload concatenates the whole corpus.
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .canonical_lanes(1)
        .shuffle_shards(false)
        .shuffle_within_shard(false)
        .build()?;
    let pipeline = ws
        .stream()
        .fetch(cores)
        .tokenize(config, k)
        .pack_sequences(PackConfig::new(a.seq_len, PackAlgorithm::Wrap).drop_remainder(true))
        .batch_with(a.batch, true)
        .prefetch_batches(4);
    let (mut batches, mut tokens) = (0u64, 0u64);
    let mut it = pipeline.into_blocking_iter(Runner::threads())?;
    it.enable_observability(tracking);
    for b in it {
        let b = b?;
        let mut array: Vec<u32> = Vec::with_capacity(a.batch * a.seq_len);
        for row in &b.items {
            array.extend_from_slice(
                row.tokens("input_ids")
                    .context("packed row without input_ids")?,
            );
        }
        anyhow::ensure!(
            array.len() == a.batch * a.seq_len,
            "batch of {} tokens",
            array.len()
        );
        std::hint::black_box(&array);
        batches += 1;
        tokens += array.len() as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(Run {
        batches,
        tokens,
        secs,
        peak: sampler.stop(),
    })
}

/// The texts of every `*.jsonl` shard of the corpus, in file-name order.
pub(super) fn read_texts(corpus: &Path) -> Result<Vec<String>> {
    let mut paths: Vec<_> = std::fs::read_dir(corpus)
        .with_context(|| format!("reading the corpus folder {}", corpus.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    paths.sort();
    let mut texts = Vec::new();
    for p in &paths {
        let data = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
        for (n, line) in data.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("{}, line {}", p.display(), n + 1))?;
            // The pipeline refuses a document without text; so does this.
            let text = v["text"].as_str().with_context(|| {
                format!("{}, line {}: no string field `text`", p.display(), n + 1)
            })?;
            texts.push(text.to_owned());
        }
    }
    Ok(texts)
}

/// The limit: the tokenizer's own `encode_batch_fast` (all cores, ids
/// only, no special tokens, as the pipeline's `encode_fast`) over texts
/// read and parsed beforehand. Counts ids plus one EOS per document, then
/// cuts that stream as the pipeline does (rows of `seq_len`, whole batches
/// only), so both sides count the same delivered tokens.
fn raw(a: &Args) -> Result<Run> {
    let tok = zephon_ops::tokenizers::Tokenizer::from_file(&a.tokenizer)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.tokenizer.display()))?;
    let texts = read_texts(&a.corpus)?;
    let sampler = mem::PeakRss::start();
    let start = Instant::now();
    let total = encode_all(&tok, &texts)?;
    let secs = start.elapsed().as_secs_f64();
    let peak = sampler.stop();
    let per_batch = (a.seq_len * a.batch) as u64;
    let batches = total / per_batch;
    Ok(Run {
        batches,
        tokens: batches * per_batch,
        secs,
        peak,
    })
}

/// Tokenizes `texts` with `encode_batch_fast` on all cores, 1,024 at a
/// time, and returns their ids plus one end-of-text each: the tokenizer's
/// own ceiling for a workload.
pub(super) fn encode_all(tok: &zephon_ops::tokenizers::Tokenizer, texts: &[String]) -> Result<u64> {
    let mut total = 0u64;
    // The encodings are freed on a thread of their own, as the pipeline's
    // consumer frees its batches beside the tokenizing workers: freed here,
    // between two calls, their hundreds of thousands of buffers would make
    // every core wait for one, and the limit would be no limit.
    let (to_free, freed) = std::sync::mpsc::sync_channel::<Vec<_>>(1);
    let freer = std::thread::spawn(move || freed.into_iter().for_each(drop));
    // Large chunks: fewer fork-join barriers, the tokenizer at its best;
    // bounded, so the encodings of the whole corpus are never held at once.
    for chunk in texts.chunks(1024) {
        let enc = tok
            .encode_batch_fast(chunk.iter().map(String::as_str).collect::<Vec<_>>(), false)
            .map_err(|e| anyhow::anyhow!("encode_batch_fast: {e}"))?;
        total += enc
            .iter()
            .map(|e| e.get_ids().len() as u64 + 1)
            .sum::<u64>();
        to_free
            .send(enc)
            .map_err(|_| anyhow::anyhow!("the thread freeing encodings ended"))?;
    }
    drop(to_free);
    freer
        .join()
        .map_err(|_| anyhow::anyhow!("the thread freeing encodings panicked"))?;
    Ok(total)
}
