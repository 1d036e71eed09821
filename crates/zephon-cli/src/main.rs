//! `zephon`: the command-line front of the Zephon data loader.
//!
//! `zephon demo` runs a pipeline on data it makes itself; `zephon --help`
//! lists the other commands.

mod cmd;

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
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => cmd::demo::run(args),
        Command::Bench(b) => cmd::bench::run(b),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
