//! The model-step timing harness on the chapter's autoencoder.
//!
//! ```text
//! cargo run --release -p zephon-examples --example timing_harness [CONFIG] [PRECISION]
//! ```
//!
//! Runs two epochs on the CPU (or the best device compiled in), prints the
//! summary table with its advice, and writes the YAML, CSV and PNG results to
//! `results/benchmark/<timestamp>`.

use std::path::PathBuf;
use zephon_burn::{DeviceChoice, Precision, TimingOptions, run_timing};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let config = args.next().map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/timing_autoencoder.yaml")
    });
    let precision: Precision = args.next().as_deref().unwrap_or("32").parse()?;
    let report = run_timing(&TimingOptions {
        config,
        epochs: 2,
        save_dir: None,
        precision,
        device: DeviceChoice::Auto,
        trace: None,
        progress: true,
    })?;
    print!("{}", report.table);
    println!("results in {}", report.save_dir.display());
    Ok(())
}
