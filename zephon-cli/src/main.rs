//! `zephon`: the command-line front of the Zephon data loader.
//!
//! `zephon demo` runs a pipeline on data it makes itself; `zephon --help`
//! lists the other commands.

// The pipeline allocates on worker threads and frees on the consumer's (and
// the tokenizer allocates per word): glibc's allocator spends a large share
// of the run on that; mimalloc does not. Built without transparent huge
// pages (`no_thp`): with them each fresh 2 MiB of the allocator's memory is
// zeroed whole at its first touch, so a cold pass over the block cache,
// which fills a fresh buffer per downloaded block, spent most of its CPU in
// the kernel zeroing pages, and RssAnon counted whole huge pages the loader
// touched a few KiB of (`zephon-bench tokens --serve s3s --shuffle block`,
// built with and without the feature, shows both).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use zephon_cli::cmd;

#[derive(Debug, Parser)]
#[command(name = "zephon", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Make a small JSONL corpus, run fetch -> parse -> shuffle -> batch with
    /// parallelism 1 and with all cores, and compare speed and checksums.
    Demo(cmd::demo::Args),
    /// Write `index.json` and line-offset indexes for a local or S3 dataset.
    BuildIndex(cmd::build_index::Args),
    /// Show a dataset's format, shards, sample counts, fields and first samples.
    Inspect(cmd::inspect::Args),
    /// Time a model's training step per batch: data, forward, backward, other.
    Timing(cmd::timing::Args),
    /// One data-parallel rank over a local JSONL folder for some steps, from
    /// checkpoints or fresh: writes its batches' sample ids and its checkpoint.
    RankRun(cmd::ranks::Args),
    /// Write a dataset as token files, Megatron .bin/.idx, JSON lines, MDS
    /// or WebDataset:
    /// read, deduplicate, tokenize; resumable and deterministic.
    Prepare(cmd::prepare::Args),
    /// Run a pipeline declared in a TOML recipe, with a progress bar,
    /// observability snapshots and a bottleneck report.
    Run(cmd::run::Args),
}

fn main() -> std::process::ExitCode {
    zephon_cli::start_process();
    let cli = Cli::parse();
    zephon_cli::finish(match cli.command {
        Command::Demo(args) => cmd::demo::run(args),
        Command::BuildIndex(a) => cmd::build_index::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Timing(a) => cmd::timing::run(a),
        Command::RankRun(a) => cmd::ranks::run(a),
        Command::Prepare(a) => cmd::prepare::run(a),
        Command::Run(a) => cmd::run::run(a),
    })
}
