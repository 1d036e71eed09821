//! `zephon`: the command-line front of the Zephon data loader.
//!
//! `zephon demo` runs a pipeline on data it makes itself; `zephon --help`
//! lists the other commands.

mod cmd;

// The pipeline allocates on worker threads and frees on the consumer's (and
// the tokenizer allocates per word): glibc's allocator spends a large share
// of the run on that; mimalloc does not. Built without transparent huge
// pages (`no_thp`): with them each fresh 2 MiB of the allocator's memory is
// zeroed whole at its first touch, so a cold pass over the block cache,
// which fills a fresh buffer per downloaded block, spent most of its CPU in
// the kernel zeroing pages, and RssAnon counted whole huge pages the loader
// touched a few KiB of (`zephon bench tokens --serve s3s --shuffle block`,
// built with and without the feature, shows both).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// Zephon: a deterministic, fast, observable data loader for training foundation models.
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
    /// Benchmarks: `zephon bench --help` lists them.
    #[command(subcommand)]
    Bench(cmd::bench::Bench),
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
    // A closed pipe (`zephon inspect DIR -n 1000 | head`) ends the process
    // quietly, as it ends a shell tool: Rust ignores SIGPIPE, and the next
    // print after the reader left panicked with a backtrace.
    #[cfg(unix)]
    // SAFETY: first thing in main, before any thread starts; SIG_DFL is a
    // valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    // Warnings (storage retries, a restore that falls back to replaying)
    // go to stderr; RUST_LOG chooses more or less.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::builder()
                .with_default_directive(tracing_subscriber::filter::LevelFilter::WARN.into())
                .from_env_lossy(),
        )
        .init();
    let result = match cli.command {
        Command::Demo(args) => cmd::demo::run(args),
        Command::Bench(b) => cmd::bench::run(b),
        Command::BuildIndex(a) => cmd::build_index::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Timing(a) => cmd::timing::run(a),
        Command::RankRun(a) => cmd::ranks::run(a),
        Command::Prepare(a) => cmd::prepare::run(a),
        Command::Run(a) => cmd::run::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", chain_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `e` and its causes, joined with ": ", each cause left out when the text
/// before it already says it: the library's I/O errors name their cause in
/// their own message, and `{:#}` printed it twice.
fn chain_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let t = cause.to_string();
        if !text.contains(&t) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&t);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cause_is_printed_once() {
        let io = std::io::Error::other("disk full");
        let e = anyhow::Error::new(zephon_core::Error::Io {
            path: "/tmp".into(),
            source: io,
        })
        .context("opening dataset `d`");
        assert_eq!(
            super::chain_text(&e),
            "opening dataset `d`: I/O error on `/tmp`: disk full"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(super::chain_text(&plain), "outer: inner");
    }
}
