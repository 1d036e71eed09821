//! `zephon-bench prepare`: tokenizing a JSONL corpus into a flat token file
//! with `zephon prepare`, beside the tokenizer's own `encode_batch_fast`
//! over the same texts already in memory, all cores, in this process (the
//! ceiling), and any peer commands (e.g. `scripts/peers/prepare_nanogpt.py`,
//! a nanoGPT-style `prepare.py`). Every side's token ids must be the same
//! (a checksum of the ids, end-of-text after each document, is compared).
//!
//! Prints one JSON line per peer, then Zephon's, with `tokens_per_s`,
//! `peak_rss_anon_mb` and the ratios to the raw tokenizer and to each peer.

use super::mem::PeakRss;
use super::stats::round3;
use super::tokens::{Run, keep, mb, measure_peer};
use anyhow::{Context, Result, ensure};
use std::path::{Path, PathBuf};
use std::time::Instant;
use zephon_cli::cmd::flags::{AT_LEAST_ONE, ranged};
use zephon_cli::cmd::prepare::{self, Format};
use zephon_core::settings::WORKERS;

/// Options of `zephon-bench prepare`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder of `*.jsonl` shards with a `text` field (the W1 corpus).
    #[arg(long)]
    pub corpus: PathBuf,
    /// A Hugging Face `tokenizer.json` with an `<|endoftext|>` token.
    #[arg(long)]
    pub tokenizer: PathBuf,
    /// Threads tokenizing (0: one per core).
    #[arg(long, default_value_t = 0, value_parser = ranged::<usize>(WORKERS))]
    pub parallelism: usize,
    /// Rounds; each side's best run is kept, and who goes first alternates.
    #[arg(long, default_value_t = 1, value_parser = ranged::<usize>(AT_LEAST_ONE))]
    pub repeat: usize,
    /// A peer command; `{out}` in it is replaced by the file its `u16` ids
    /// are to be written to (checked against Zephon's). It prints a JSON
    /// line with `system`, `tokens` and `seconds`.
    #[arg(long)]
    pub peer: Vec<String>,
}

/// A checksum of a sequence of token ids, whatever pieces it comes in.
fn ids_sum(ids: impl IntoIterator<Item = u32>, into: &mut u64) {
    for id in ids {
        *into = zephon_core::hash::combine(*into, u64::from(id));
    }
}

/// The checksum of a flat file of `u16` ids.
fn file_sum(files: &[PathBuf]) -> Result<(u64, u64)> {
    let (mut sum, mut n) = (0u64, 0u64);
    for f in files {
        let data = std::fs::read(f).with_context(|| f.display().to_string())?;
        ensure!(data.len() % 2 == 0, "{}: not u16 ids", f.display());
        let ids = data
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32);
        n += data.len() as u64 / 2;
        ids_sum(ids, &mut sum);
    }
    Ok((sum, n))
}

fn measure_self(a: &Args, dest: &Path) -> Result<(Run, u64)> {
    let _ = std::fs::remove_dir_all(dest);
    let args = prepare::Args {
        src: a.corpus.display().to_string(),
        dest: dest.display().to_string(),
        format: Format::Tokens,
        tokenizer: Some(a.tokenizer.clone()),
        field: "text".into(),
        tokens_field: "tokens".into(),
        eos: true,
        seq_len: 2048,
        dtype: Some(zephon_storage::format::TokenDtype::U16),
        fields: None,
        shard_bytes: zephon_storage::write::DEFAULT_SHARD_BYTES,
        shard_samples: None,
        zstd: None,
        dedup: false,
        parallelism: a.parallelism,
        endpoint: None,
        region: None,
        json: true,
    };
    let sampler = PeakRss::start();
    let start = Instant::now();
    let mut line = prepare::execute(args, false)?;
    let seconds = start.elapsed().as_secs_f64();
    let peak_anon = sampler.stop().unwrap_or(0);
    let mut bins: Vec<PathBuf> = std::fs::read_dir(dest)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    bins.sort();
    let (sum, n) = file_sum(&bins)?;
    ensure!(
        Some(n) == line["tokens"].as_u64(),
        "the token files hold {n} ids, the run counted {}",
        line["tokens"]
    );
    line["system"] = "zephon_prepare".into();
    line["seconds"] = round3(seconds).into();
    line["tokens_per_s"] = (n as f64 / seconds).round().into();
    Ok((
        Run {
            line,
            seconds,
            peak_anon,
        },
        sum,
    ))
}

fn measure_raw(a: &Args, texts: &[String]) -> Result<Run> {
    let (tok, _) = raw_tokenizer(a)?;
    let sampler = PeakRss::start();
    let start = Instant::now();
    let n = super::tokenize_pack::encode_all(&tok, texts)?;
    let seconds = start.elapsed().as_secs_f64();
    let peak_anon = sampler.stop().unwrap_or(0);
    let line = serde_json::json!({
        "system": "raw_encode_batch_fast",
        "tokens": n,
        "seconds": round3(seconds),
        "tokens_per_s": (n as f64 / seconds).round(),
    });
    Ok(Run {
        line,
        seconds,
        peak_anon,
    })
}

fn raw_tokenizer(a: &Args) -> Result<(zephon_ops::tokenizers::Tokenizer, u32)> {
    let tok = zephon_ops::tokenizers::Tokenizer::from_file(&a.tokenizer)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.tokenizer.display()))?;
    let eos = tok
        .token_to_id("<|endoftext|>")
        .context("the tokenizer has no <|endoftext|> token")?;
    Ok((tok, eos))
}

/// The checksum of the tokenizer's own ids for `texts`, end-of-text after
/// each: computed apart from the timed runs.
fn reference_sum(a: &Args, texts: &[String]) -> Result<u64> {
    let (tok, eos) = raw_tokenizer(a)?;
    let mut sum = 0u64;
    for chunk in texts.chunks(1024) {
        let enc = tok
            .encode_batch_fast(chunk.iter().map(String::as_str).collect::<Vec<_>>(), false)
            .map_err(|e| anyhow::anyhow!("encode_batch_fast: {e}"))?;
        for e in &enc {
            ids_sum(e.get_ids().iter().copied().chain([eos]), &mut sum);
        }
    }
    Ok(sum)
}

/// Runs the benchmark and prints its lines.
pub fn run(a: Args) -> Result<()> {
    let texts = super::tokenize_pack::read_texts(&a.corpus)?;
    let work = tempfile::tempdir()?;
    let (mut ours, mut raw) = (None, None);
    let mut peers: Vec<Option<Run>> = vec![None; a.peer.len()];
    let reference = reference_sum(&a, &texts)?;
    let mut ours_sum = reference;
    for round in 0..a.repeat {
        let first = round % 2 == 0;
        if first {
            let (r, s) = measure_self(&a, &work.path().join("zephon"))?;
            ours_sum = s;
            keep(&mut ours, r);
        }
        keep(&mut raw, measure_raw(&a, &texts)?);
        for (i, (cmd, slot)) in a.peer.iter().zip(peers.iter_mut()).enumerate() {
            let out = work.path().join(format!("peer-{i}.bin"));
            let run = measure_peer(&cmd.replace("{out}", &out.display().to_string()))?;
            let (sum, n) = file_sum(&[out])?;
            ensure!(
                sum == reference,
                "peer `{cmd}` wrote other token ids ({n} ids) than the tokenizer's own"
            );
            keep(slot, run);
        }
        if !first {
            let (r, s) = measure_self(&a, &work.path().join("zephon"))?;
            ours_sum = s;
            keep(&mut ours, r);
        }
    }
    ensure!(
        ours_sum == reference,
        "zephon prepare wrote other token ids than the tokenizer's own encode_batch_fast"
    );
    let mut line = ours.context("no run")?.line;
    let raw = raw.context("no raw run")?;
    line["ids_equal"] = true.into();
    line["raw_tokens_per_s"] = raw.line["tokens_per_s"].clone();
    line["raw_peak_rss_anon_mb"] = mb(raw.peak_anon).into();
    let ratio = |ours: &serde_json::Value, theirs: &serde_json::Value| match (
        ours["tokens_per_s"].as_f64(),
        theirs["tokens_per_s"].as_f64(),
    ) {
        (Some(z), Some(p)) if p > 0.0 => round3(z / p).into(),
        _ => serde_json::Value::Null,
    };
    line["ratio_to_raw"] = ratio(&line, &raw.line);
    for peer in peers.into_iter().flatten() {
        println!("{}", peer.line);
        let name = peer.line["system"].as_str().unwrap_or("peer").to_owned();
        line[format!("ratio_to_{name}")] = ratio(&line, &peer.line);
    }
    line["rounds"] = a.repeat.into();
    line["cores"] = zephon_core::runner::num_cpus().into();
    println!("{line}");
    Ok(())
}
