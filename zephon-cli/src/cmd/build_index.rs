//! `zephon build-index <uri>`: writes the `index.json` manifest and the
//! per-shard line-offset indexes of a local or S3 dataset.

use anyhow::Result;
use zephon_storage::StorageOptions;
use zephon_storage::backend::{Backend, runtime};

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
}

/// Scans every shard (downloading each once) and writes the manifest.
pub fn run(args: Args) -> Result<()> {
    let opts = StorageOptions {
        endpoint: args.endpoint,
        region: args.region,
        ..StorageOptions::default()
    };
    let backend = Backend::open("build-index", &args.uri, &opts)?;
    let manifest = runtime::block_on(zephon_storage::scan::build_index(&backend, "build-index"))?;
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
