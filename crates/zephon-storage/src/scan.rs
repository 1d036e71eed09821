//! Scanning a dataset's shards: listing, downloading, counting and hashing.
//! Used to open datasets without a manifest and to write one
//! ([`build_index`]).

use crate::backend::Backend;
use crate::download::{download, shard_error};
use crate::format::compression::{Compression, is_shard_name};
use crate::format::jsonl::LineIndex;
use crate::manifest::{MANIFEST, Manifest, ShardEntry, encode_index, index_path, sha256_hex};
use crate::metrics::CacheMetrics;
use futures::TryStreamExt;
use zephon_core::{Error, Result};

/// Lists the shard files under the dataset root (recursively), sorted by path,
/// with their stored sizes.
pub async fn list_shards(backend: &Backend, dataset: &str) -> Result<Vec<(String, u64)>> {
    let err =
        |e: opendal::Error| shard_error(dataset, &backend.uri, format!("cannot list shards: {e}"));
    let entries: Vec<opendal::Entry> = backend
        .op
        .lister_with("")
        .recursive(true)
        .await
        .map_err(err)?
        .try_collect()
        .await
        .map_err(err)?;
    let mut out = Vec::new();
    for e in entries {
        let path = e.path().trim_start_matches('/').to_owned();
        if !e.metadata().is_file() || !is_shard_name(&path) {
            continue;
        }
        let len = match e.metadata().content_length() {
            0 => backend.op.stat(&path).await.map_err(err)?.content_length(),
            n => n,
        };
        out.push((path, len));
    }
    out.sort();
    if out.is_empty() {
        return Err(shard_error(
            dataset,
            &backend.uri,
            "no shards (*.jsonl, *.jsonl.zst, *.jsonl.gz) found",
        ));
    }
    Ok(out)
}

/// Downloads one shard and describes it: samples, sizes, checksum, index.
pub async fn scan_shard(
    backend: &Backend,
    dataset: &str,
    path: &str,
    bytes: u64,
    metrics: &CacheMetrics,
) -> Result<(ShardEntry, LineIndex)> {
    let probe = ShardEntry::new(path, 0, bytes);
    let data = download(backend, dataset, &probe, metrics).await?;
    let raw_sha = if Compression::from_path(path) == Compression::None {
        sha256_hex(&data)
    } else {
        // The checksum covers the stored object, so hash the compressed bytes.
        let raw = backend.op.read(path).await.map_err(|e| {
            shard_error(
                dataset,
                &backend.uri_of(path),
                format!("download failed: {e}"),
            )
        })?;
        sha256_hex(&raw.to_bytes())
    };
    let index = LineIndex::build(&data);
    let compressed = Compression::from_path(path) != Compression::None;
    let entry = ShardEntry {
        path: path.to_owned(),
        samples: index.len(),
        bytes,
        uncompressed_bytes: compressed.then_some(data.len() as u64),
        sha256: Some(raw_sha),
        index: (!compressed).then(|| index_path(path)),
    };
    Ok((entry, index))
}

/// Describes every listed shard (downloading each once), in path order.
pub async fn scan(backend: &Backend, dataset: &str, metrics: &CacheMetrics) -> Result<Manifest> {
    let mut shards = Vec::new();
    for (path, bytes) in list_shards(backend, dataset).await? {
        let (mut entry, _) = scan_shard(backend, dataset, &path, bytes, metrics).await?;
        // No sidecar was written: do not claim one.
        entry.index = None;
        shards.push(entry);
    }
    Ok(Manifest::new(shards))
}

/// Writes `index.json` and a line-offset index sidecar per uncompressed
/// shard at the dataset root, and returns the manifest.
pub async fn build_index(backend: &Backend, dataset: &str) -> Result<Manifest> {
    if !backend.can_list {
        return Err(shard_error(
            dataset,
            &backend.uri,
            "this backend cannot list its shards; build the index where the files are (local or S3)",
        ));
    }
    let metrics = CacheMetrics::default();
    let mut shards = Vec::new();
    for (path, bytes) in list_shards(backend, dataset).await? {
        let (entry, index) = scan_shard(backend, dataset, &path, bytes, &metrics).await?;
        if let Some(idx) = &entry.index {
            write(backend, dataset, idx, encode_index(&index)).await?;
        }
        shards.push(entry);
    }
    let manifest = Manifest::new(shards);
    write(backend, dataset, MANIFEST, manifest.to_json().into_bytes()).await?;
    Ok(manifest)
}

async fn write(backend: &Backend, dataset: &str, path: &str, data: Vec<u8>) -> Result<()> {
    backend
        .op
        .write(path, data)
        .await
        .map(|_| ())
        .map_err(|e| Error::Dataset {
            dataset: dataset.to_owned(),
            location: backend.uri_of(path),
            message: format!("cannot write: {e}"),
        })
}
