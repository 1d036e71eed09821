//! `zephon timing -c CONFIG`: time a model's training step, per batch, split
//! into data, forward, backward and other (see `zephon_burn::harness`).

use crate::cmd::flags::{AT_LEAST_ONE, ranged};
use anyhow::Result;
use std::path::PathBuf;
use zephon_burn::{DeviceChoice, Precision, TimingOptions};

/// Options of `zephon timing`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The YAML configuration (model, data, optimizer, timing).
    #[arg(short, long)]
    pub config: PathBuf,
    /// Epochs to run.
    #[arg(long, default_value_t = 2, value_parser = ranged::<usize>(AT_LEAST_ONE))]
    pub epochs: usize,
    /// Where to write the results (default: results/benchmark/TIMESTAMP).
    #[arg(long)]
    pub save_dir: Option<PathBuf>,
    /// Precision: 32, 16, bf16 or 16-mixed.
    #[arg(long, default_value = "32")]
    pub precision: String,
    /// Device: cpu, cuda, wgpu or auto (the best one compiled in and present).
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Also write a Chrome trace (JSON) of the per-batch phases, for Perfetto.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Hide the progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs the harness, prints the summary table, and says where the files went.
pub fn run(args: Args) -> Result<()> {
    let opts = TimingOptions {
        config: args.config,
        epochs: args.epochs,
        save_dir: args.save_dir,
        precision: args.precision.parse::<Precision>()?,
        device: args.device.parse::<DeviceChoice>()?,
        trace: args.trace,
        progress: !args.quiet,
    };
    let report = zephon_burn::run_timing(&opts)?;
    print!("{}", report.table);
    println!("results written to {}", report.save_dir.display());
    if let Some(t) = &opts.trace {
        println!("trace written to {} (open it in Perfetto)", t.display());
    }
    Ok(())
}
