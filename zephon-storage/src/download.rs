//! Downloading one whole shard: read, check size and checksum, decompress.
//! Anything that goes wrong is an error naming the shard's URI; nothing is
//! returned (and so nothing cached) unless all checks passed.

use crate::backend::Backend;
use crate::format::compression::Compression;
use crate::manifest::{ShardEntry, sha256_hex};
use crate::metrics::CacheMetrics;
use bytes::Bytes;
use std::time::Instant;
use zephon_core::{Error, Result};

/// A shard error: names the dataset and the shard's URI. Control
/// characters in the message (quoted from a shard or manifest, perhaps by
/// a parser's own message) are escaped.
pub fn shard_error(dataset: &str, uri: &str, message: impl Into<String>) -> Error {
    let message = message.into();
    Error::Dataset {
        dataset: dataset.to_owned(),
        location: uri.to_owned(),
        message: match escape_controls(&message) {
            std::borrow::Cow::Borrowed(_) => message,
            escaped => escaped.into_owned(),
        },
    }
}

/// `s` with its control characters escaped (`\n`, `\u{1b}`), so text
/// taken from input can neither drive a terminal nor split a log line.
///
/// ```
/// use zephon_storage::download::escape_controls;
/// assert_eq!(escape_controls("a\x1b[2Jb\n"), "a\\u{1b}[2Jb\\n");
/// assert_eq!(escape_controls("plain \"text\""), "plain \"text\"");
/// ```
pub fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    s.chars()
        .map(|c| match c {
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect::<String>()
        .into()
}

/// Downloads `entry` and returns its decompressed bytes. The stored size
/// must equal `entry.bytes` and, when the entry has one, the SHA-256 must match.
pub async fn download(
    backend: &Backend,
    dataset: &str,
    entry: &ShardEntry,
    metrics: &CacheMetrics,
) -> Result<Bytes> {
    let uri = backend.uri_of(&entry.path);
    let started = Instant::now();
    let raw = match backend.op.read(&entry.path).await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            metrics.failures.inc();
            return Err(shard_error(dataset, &uri, format!("download failed: {e}")));
        }
    };
    metrics.download_time.record(started.elapsed());
    metrics.bytes_downloaded.add(raw.len() as u64);
    let decode_started = Instant::now();
    let (dataset, entry) = (dataset.to_owned(), entry.clone());
    // Hashing and decompressing are CPU work: keep them off the I/O threads.
    let out = tokio::task::spawn_blocking(move || verify_and_decode(&dataset, &uri, &entry, raw))
        .await
        .map_err(|e| Error::Operator {
            op: "download",
            message: format!("decode task failed: {e}"),
        })
        .and_then(|r| r);
    metrics.decode_time.record(decode_started.elapsed());
    if out.is_err() {
        metrics.failures.inc();
    }
    out
}

/// The most a manifest's `uncompressed_bytes` may exceed the compressed
/// size by and still size the decode buffer at once; past it the buffer
/// grows as the data comes.
const MAX_RATIO: u64 = 64;

/// Checks and decompresses a downloaded object.
pub fn verify_and_decode(
    dataset: &str,
    uri: &str,
    entry: &ShardEntry,
    raw: Bytes,
) -> Result<Bytes> {
    if raw.len() as u64 != entry.bytes {
        return Err(shard_error(
            dataset,
            uri,
            format!(
                "size mismatch: expected {} bytes (manifest or listing), got {}",
                entry.bytes,
                raw.len()
            ),
        ));
    }
    if let Some(want) = &entry.sha256 {
        let got = sha256_hex(&raw);
        if !got.eq_ignore_ascii_case(want) {
            return Err(shard_error(
                dataset,
                uri,
                format!("checksum mismatch: expected sha256 {want}, got {got}"),
            ));
        }
    }
    let compression = Compression::from_path(&entry.path);
    if compression == Compression::None {
        return Ok(raw);
    }
    // Sized from the manifest where it says (within reason: the manifest
    // is input too), so the buffer does not double its way there; what it
    // grew past its length is given back before it is cached, where the
    // cache counts the length.
    let room = entry
        .uncompressed_bytes
        .filter(|&n| n <= (raw.len() as u64).saturating_mul(MAX_RATIO))
        .unwrap_or(raw.len() as u64 * 4);
    let mut decoded = Vec::with_capacity(room as usize);
    futures::executor::block_on(compression.decode_into(&raw, &mut decoded)).map_err(|e| {
        shard_error(
            dataset,
            uri,
            format!("corrupt or truncated {compression:?} data: {e}"),
        )
    })?;
    decoded.shrink_to_fit();
    if let Some(n) = entry.uncompressed_bytes
        && n != decoded.len() as u64
    {
        return Err(shard_error(
            dataset,
            uri,
            format!(
                "decompressed size mismatch: expected {n} bytes, got {}",
                decoded.len()
            ),
        ));
    }
    Ok(Bytes::from(decoded))
}
