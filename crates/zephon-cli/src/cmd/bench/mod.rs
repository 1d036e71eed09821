//! `zephon bench ...`: one module per benchmark.

use clap::Subcommand;

/// The benchmarks.
#[derive(Debug, Subcommand)]
pub enum Bench {
    /// The engine's own overhead: fetch -> batch over in-memory records,
    /// beside a plain loop building the same batches.
    Engine(engine::Args),
}

pub mod engine;

/// Runs a benchmark.
pub fn run(b: Bench) -> anyhow::Result<()> {
    match b {
        Bench::Engine(a) => engine::run(a),
    }
}
