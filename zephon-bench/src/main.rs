//! `zephon-bench`: the side-by-side benchmarks of the Zephon data loader,
//! one module per benchmark, and the servers (nginx, moto_server) they
//! start. Kept out of the `zephon` binary a user installs; run with
//! `cargo run --release -p zephon-bench -- <benchmark> ...`, and
//! `zephon-bench --help` lists them.

// The same allocator as the `zephon` binary (see its `main.rs`): the
// figures are the ones a user of that binary sees.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "zephon-bench", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

fn main() -> std::process::ExitCode {
    zephon_cli::start_process();
    zephon_cli::finish(run(Cli::parse().bench))
}

/// The benchmarks.
#[derive(Debug, Subcommand)]
enum Bench {
    /// Audio: decode WAV clips, resample, mix to mono, crop and collate,
    /// beside a plain loop of the same decoder and steps on every core.
    Audio(audio::Args),
    /// The tuner on W1: parallelism 1, the hand-tuned best and tuned, then
    /// a slow consumer; one JSON line of ratios and CPU seconds.
    Autotune(autotune::Args),
    /// The engine's own overhead: fetch -> batch over in-memory records,
    /// beside a plain loop building the same batches.
    Engine(engine::Args),
    /// Reading a dataset from local disk and from S3 (cold, prefetch, warm,
    /// byte ranges), as ratios to local disk.
    Fetch(fetch::Args),
    /// Samples/s of each shard format through fetch -> batch, beside a plain
    /// loop with the format's own crate.
    Formats(formats::Args),
    /// Workload W3: decode, random resized crop, flip and batch the JPEGs
    /// of WebDataset shards; one JSON line with the keys of the peers.
    Images(images::Args),
    /// Writing a JSONL corpus as a flat token file with `zephon prepare`,
    /// beside the tokenizer's own encode_batch_fast and peer commands.
    Prepare(prepare::Args),
    /// Workload W1: tokenize, wrap-pack and batch a JSONL corpus; one JSON
    /// line with the keys of the side-by-side peers.
    TokenizePack(tokenize_pack::Args),
    /// Workload W2: pre-tokenized reads of a flat token file, globally
    /// shuffled windows in batches; one JSON line like the peers, with peak
    /// anonymous memory, and peers run side by side.
    Tokens(Box<tokens::Args>),
}

mod audio;
mod autotune;
mod engine;
mod fetch;
mod formats;
mod images;
mod mem;
mod prepare;
mod servers;
mod stats;
mod tokenize_pack;
mod tokens;
mod tokens_remote;

/// Runs a benchmark.
fn run(b: Bench) -> anyhow::Result<()> {
    match b {
        Bench::Audio(a) => audio::run(a),
        Bench::Autotune(a) => autotune::run(a),
        Bench::Engine(a) => engine::run(a),
        Bench::Fetch(a) => fetch::run(a),
        Bench::Formats(a) => formats::run(a),
        Bench::Images(a) => images::run(a),
        Bench::Prepare(a) => prepare::run(a),
        Bench::TokenizePack(a) => tokenize_pack::run(a),
        Bench::Tokens(a) => tokens::run(*a),
    }
}

/// Prints a benchmark's figures: as one JSON object (`json`, made only when
/// asked for) or as the table's lines.
fn print_report(as_json: bool, json: impl FnOnce() -> serde_json::Value, lines: &[String]) {
    if as_json {
        println!("{}", json());
    } else {
        for l in lines {
            println!("{l}");
        }
    }
}

/// Runs `work` on every record of `records`, split into `threads` runs of
/// neighbours, each on a thread of its own; returns how many were done.
/// The plain-loop ceilings of the media benchmarks: no pipeline between
/// the bytes and the decoder.
fn on_threads<T: Sync>(
    records: &[T],
    threads: usize,
    work: impl Fn(&T) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<usize> {
    let per = records.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = records
            .chunks(per)
            .map(|chunk| {
                let work = &work;
                s.spawn(move || -> anyhow::Result<usize> {
                    chunk.iter().try_for_each(work)?;
                    Ok(chunk.len())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a plain-loop thread panicked"))
            .sum()
    })
}
