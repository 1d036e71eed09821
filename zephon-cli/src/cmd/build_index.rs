//! `zephon build-index <uri>`: writes the `index.json` manifest and the
//! per-shard line-offset indexes of a local or S3 dataset.

use anyhow::Result;
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::scan::{Checksums, build_index_checked};
use zephon_storage::{FormatOptions, StorageOptions};

/// Options of `zephon build-index`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dataset folder: a path, `file://...` or `s3://bucket/prefix`.
    pub uri: String,
    /// S3 endpoint (else `AWS_ENDPOINT_URL`).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// S3 region (else `AWS_REGION`).
    #[arg(long)]
    pub region: Option<String>,
    /// Also read flat token files and Megatron `.bin`s (counted from their
    /// size and `.idx` otherwise) to record their SHA-256 and per-chunk
    /// CRC32Cs, so remote reads verify every block of them too.
    #[arg(long)]
    pub checksums: bool,
}

/// Scans every shard (downloading each once where counting needs it, or
/// `--checksums` asks) and writes the manifest.
pub fn run(args: Args) -> Result<()> {
    let opts = StorageOptions {
        endpoint: args.endpoint,
        region: args.region,
        ..StorageOptions::default()
    };
    let backend = Backend::open("build-index", &args.uri, &opts)?;
    let checksums = match args.checksums {
        true => Checksums::Always,
        false => Checksums::WhereRead,
    };
    let opts = FormatOptions::default();
    let built = build_index_checked(&backend, "build-index", &opts, checksums);
    let manifest = runtime::block_on(built)?;
    for s in &manifest.shards {
        println!(
            "{:<40} {:>10} samples {:>14} bytes",
            s.path, s.samples, s.bytes
        );
    }
    let samples: u64 = manifest.shards.iter().map(|s| s.samples).sum();
    println!(
        "wrote {}/index.json: {} shards, {samples} samples",
        backend.uri,
        manifest.shards.len()
    );
    Ok(())
}
