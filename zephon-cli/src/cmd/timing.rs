//! `zephon timing -c CONFIG`: time a model's training step, per batch, split
//! into data, forward, backward and other (see `zephon_burn::harness`).

use crate::cmd::flags::{AT_LEAST_ONE, ranged};
use anyhow::Result;
use std::path::{Path, PathBuf};
use zephon_burn::models::image_classifier::ShardStore;
use zephon_burn::{DeviceChoice, Precision, TimingOptions};
use zephon_core::{Dataset, Record};
use zephon_storage::DatasetExt;
use zephon_storage::write::{DatasetWriter, WriteFormat, WriteOptions};

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
    let report = zephon_burn::run_timing_with(&opts, &LocalShards)?;
    print!("{}", report.table);
    println!("results written to {}", report.save_dir.display());
    if let Some(t) = &opts.trace {
        println!("trace written to {} (open it in Perfetto)", t.display());
    }
    Ok(())
}

/// The image data's WebDataset shards in a local folder: read in place,
/// written with the dataset writer (which also leaves a manifest).
struct LocalShards;

impl ShardStore for LocalShards {
    fn open(&self, name: &str, dir: &Path) -> zephon_core::Result<Option<Dataset>> {
        // A folder that is not there, or holds no tar, is one to write
        // into; anything in it that is not a dataset is an error from the
        // opening, naming it.
        let has_tars = std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.ends_with(".tar") || name.ends_with(".tar.gz") || name.ends_with(".tar.zst")
            })
        });
        if !has_tars {
            return Ok(None);
        }
        Dataset::from_path(name, dir).map(Some)
    }

    fn write_webdataset(
        &self,
        dir: &Path,
        shard_samples: usize,
        records: &mut dyn Iterator<Item = Record>,
    ) -> zephon_core::Result<()> {
        let opts = WriteOptions::new(WriteFormat::WebDataset).shard_samples(shard_samples as u64);
        let (mut writer, _) = DatasetWriter::create("images", &dir.to_string_lossy(), opts)?;
        for r in records {
            writer.push_record(&r)?;
        }
        writer.finish().map(|_| ())
    }
}
