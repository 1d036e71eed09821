//! Downloading one whole shard: read, check size and checksum, decompress.
//! Anything that goes wrong is an error naming the shard's URI; nothing is
//! returned (and so nothing cached) unless all checks passed.

use crate::error::shard_error;
use crate::format::compression::Compression;
use crate::manifest::{ShardEntry, sha256_hex};
use crate::metrics::CacheMetrics;
use crate::source::backend::Backend;
use crate::source::backend::read::{read_failed, read_version};
use crate::source::backend::version::{self, Version};
use crate::source::compressed::{Compressed, Fetched};
use crate::source::spill::{self, Folder};
use bytes::Bytes;
use std::time::Instant;
use zephon_core::{Error, Result};

/// Downloads `entry` and returns its decompressed bytes, every request
/// conditional on `version` (the one the shard was opened at): a shard
/// replaced meanwhile is an error naming it and both versions, never bytes
/// of the new version taken for the old. The stored size must equal
/// `entry.bytes` and, when the entry has one, the SHA-256 must match. A
/// compressed shard is streamed into a temporary file as it arrives and
/// decoded into another, which is mapped (both files unnamed, in the
/// temporary folder, `TMPDIR`): neither its compressed nor its decoded
/// bytes are held in the process's memory, however large the shard.
pub(crate) async fn download_at(
    backend: &Backend,
    dataset: &str,
    entry: &ShardEntry,
    metrics: &CacheMetrics,
    version: Option<&Version>,
) -> Result<Bytes> {
    download_checked(backend, dataset, entry, metrics, None, version).await
}

/// The download of [`download_at`]: fetched into
/// the temporary folder, checked, decoded.
async fn download_checked(
    backend: &Backend,
    dataset: &str,
    entry: &ShardEntry,
    metrics: &CacheMetrics,
    cap: Option<u64>,
    version: Option<&Version>,
) -> Result<Bytes> {
    let folder = Folder::Temp;
    let (fetched, _) = fetch(
        backend, dataset, entry, metrics, false, cap, folder, version,
    )
    .await?;
    decoded(fetched, metrics).await
}

/// As [`download_at`], for the shard cache: a compressed shard comes
/// back downloaded and checked but not decoded, for the cache to decode
/// into the file it publishes.
///
/// With `folder`, the cache's folder where its disk tier is on, the
/// compressed bytes are downloaded there rather than into the temporary
/// folder (which is tried when the cache's cannot take them).
pub(crate) async fn download_for_cache(
    backend: &Backend,
    dataset: &str,
    entry: &ShardEntry,
    metrics: &CacheMetrics,
    cap: Option<u64>,
    folder: Option<&std::path::Path>,
    version: Option<&Version>,
) -> Result<Fetched> {
    let folder = folder.map_or(Folder::Temp, Folder::Cache);
    fetch(
        backend, dataset, entry, metrics, false, cap, folder, version,
    )
    .await
    .map(|(fetched, _)| fetched)
}

/// The bytes of `fetched`: a compressed shard decoded into a temporary
/// file, off the I/O threads.
pub(crate) async fn decoded(fetched: Fetched, metrics: &CacheMetrics) -> Result<Bytes> {
    match fetched {
        Fetched::Bytes(b) => Ok(b),
        Fetched::Decode(c) => {
            let started = Instant::now();
            let out = off_io(move || c.decode()).await;
            metrics.decode_time.record(started.elapsed());
            if out.is_err() {
                metrics.failures.inc();
            }
            out
        }
    }
}

/// As [`download`], with the stored object's SHA-256 (hex), what a manifest
/// records, computed as the bytes come rather than by a second download.
/// The bytes are kept out of the process's memory, as a scan of a shard of
/// tens of GB needs: a local file is mapped where it lies, a remote one
/// streamed into a temporary file and mapped (a compressed one decoded
/// into another).
pub async fn download_hashed(
    backend: &Backend,
    dataset: &str,
    entry: &ShardEntry,
    metrics: &CacheMetrics,
) -> Result<(Bytes, String)> {
    if Compression::from_path(&entry.path) != Compression::None {
        let folder = Folder::Temp;
        let (fetched, sha256) =
            fetch(backend, dataset, entry, metrics, true, None, folder, None).await?;
        return Ok((decoded(fetched, metrics).await?, sha256.unwrap_or_default()));
    }
    let uri = backend.uri_of(&entry.path);
    let started = Instant::now();
    let got = download_to_temp(backend, dataset, &entry.path, Some(entry.bytes), true).await;
    let got = got.inspect_err(|_| metrics.failures.inc())?;
    metrics.download_time.record(started.elapsed());
    metrics.bytes_downloaded.add(got.len);
    let sha256 = got.sha256.unwrap_or_default();
    verify(dataset, &uri, entry, got.len, Some(&sha256)).inspect_err(|_| metrics.failures.inc())?;
    Ok((got.bytes, sha256))
}

/// [`download`], hashing the stored bytes when `hash` is set or the entry
/// has a checksum to check (the hash is returned in either case); a
/// compressed shard is downloaded and checked, its decode (of at most
/// `cap` bytes where the entry gives no decoded size) left to the caller;
/// every request conditional on `version`, where given.
/// The download has a [`block_deadline`](crate::StorageOptions::block_deadline)
/// for every [`DEADLINE_SPAN`](crate::options::DEADLINE_SPAN) bytes.
#[allow(clippy::too_many_arguments)]
async fn fetch(
    backend: &Backend,
    dataset: &str,
    entry: &ShardEntry,
    metrics: &CacheMetrics,
    hash: bool,
    cap: Option<u64>,
    folder: Folder<'_>,
    version: Option<&Version>,
) -> Result<(Fetched, Option<String>)> {
    let spans = entry.bytes.div_ceil(crate::options::DEADLINE_SPAN);
    let uri = backend.uri_of(&entry.path);
    let got = fetch_whole(backend, dataset, entry, metrics, hash, cap, folder, version);
    let what = (dataset, uri.as_str(), "the download");
    backend
        .within(what, spans, got, || metrics.failures.inc())
        .await
}

/// [`fetch`] without its deadline.
#[allow(clippy::too_many_arguments)]
async fn fetch_whole(
    backend: &Backend,
    dataset: &str,
    entry: &ShardEntry,
    metrics: &CacheMetrics,
    hash: bool,
    cap: Option<u64>,
    folder: Folder<'_>,
    version: Option<&Version>,
) -> Result<(Fetched, Option<String>)> {
    let hash = hash || entry.sha256.is_some();
    let compression = Compression::from_path(&entry.path);
    if compression != Compression::None {
        let out =
            download_compressed(backend, dataset, entry, metrics, hash, cap, folder, version).await;
        if out.is_err() {
            metrics.failures.inc();
        }
        return out;
    }
    let uri = backend.uri_of(&entry.path);
    let started = Instant::now();
    let raw = match read_version(&backend.op, &entry.path, .., entry.bytes, version).await {
        Ok(b) => b,
        Err(e) => {
            metrics.failures.inc();
            let path = &entry.path;
            return Err(read_failed(backend, dataset, &uri, path, version, "download", &e).await);
        }
    };
    metrics.download_time.record(started.elapsed());
    metrics.bytes_downloaded.add(raw.len() as u64);
    let decode_started = Instant::now();
    let (dataset, entry) = (dataset.to_owned(), entry.clone());
    let out = off_io(move || {
        let sha256 = hash.then(|| sha256_hex(&raw));
        verify(&dataset, &uri, &entry, raw.len() as u64, sha256.as_deref())
            .map(|()| (Fetched::Bytes(raw), sha256))
    })
    .await;
    metrics.decode_time.record(decode_started.elapsed());
    if out.is_err() {
        metrics.failures.inc();
    }
    out
}

/// Runs `f`, CPU work (hashing, decoding), off the I/O threads.
async fn off_io<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Operator {
            op: "download",
            message: format!("decode task failed: {e}"),
        })
        .and_then(|r| r)
}

/// Checks a downloaded object's size (`len`) against the entry and, when
/// the entry has one, its SHA-256 against `sha256` (hex, computed when the
/// entry has one).
fn verify(
    dataset: &str,
    uri: &str,
    entry: &ShardEntry,
    len: u64,
    sha256: Option<&str>,
) -> Result<()> {
    if len != entry.bytes {
        let got = if len > entry.bytes {
            "more".to_owned()
        } else {
            len.to_string()
        };
        return Err(shard_error(
            dataset,
            uri,
            format!(
                "size mismatch: expected {} bytes (manifest or listing), got {got}",
                entry.bytes
            ),
        ));
    }
    if let Some(want) = &entry.sha256 {
        let got = sha256.unwrap_or_default();
        if !got.eq_ignore_ascii_case(want) {
            return Err(shard_error(
                dataset,
                uri,
                format!("checksum mismatch: expected sha256 {want}, got {got}"),
            ));
        }
    }
    Ok(())
}

/// An object of `backend` streamed into a new unnamed temporary file as
/// it arrives (a chunk at a time: its size never held in memory), and
/// mapped; or an error naming its URI and what failed (the store, or the
/// temporary folder). With `limit`, the download stops once more than that
/// many bytes came ([`Spilled::len`] then says more than `limit`), rather
/// than fill the folder with what a store sends, and with or without it,
/// before it would leave the folder's filesystem short ([`spill::Room`]);
/// with `hash`, the bytes are hashed (SHA-256) as they come.
pub(crate) async fn download_to_temp(
    backend: &Backend,
    dataset: &str,
    path: &str,
    limit: Option<u64>,
    hash: bool,
) -> Result<Spilled> {
    download_into(backend, dataset, path, limit, hash, Folder::Temp, None)
        .await
        .map_err(Failed::into_error)
}

/// Why [`download_into`] failed: the store, or the folder written to.
enum Failed {
    Store(Error),
    Disk(Error),
}

impl Failed {
    fn into_error(self) -> Error {
        match self {
            Failed::Store(e) | Failed::Disk(e) => e,
        }
    }
}

/// [`download_to_temp`], into an unnamed file in `folder`. A local
/// backend's file is mapped where it lies instead, whatever `folder` (the
/// scans of `build_index` and of a listing read local folders through a
/// backend, compressed shards included). The request is conditional on
/// `version`, where given.
async fn download_into(
    backend: &Backend,
    dataset: &str,
    path: &str,
    limit: Option<u64>,
    hash: bool,
    folder: Folder<'_>,
    version: Option<&Version>,
) -> std::result::Result<Spilled, Failed> {
    use futures::TryStreamExt;
    use sha2::Digest;
    use std::io::Write;
    let info = backend.op.info();
    if info.scheme() == "fs" {
        let path = std::path::Path::new(&info.root()).join(path);
        return off_io(move || {
            let bytes = crate::format::maps::map_file(&path).map_err(|e| Error::Io {
                path: path.display().to_string(),
                source: e,
            })?;
            Ok(Spilled {
                len: bytes.len() as u64,
                sha256: hash.then(|| sha256_hex(&bytes)),
                bytes,
            })
        })
        .await
        .map_err(Failed::Store);
    }
    let uri = backend.uri_of(path);
    let disk = |e| Failed::Disk(folder.error("downloading", &uri, e));
    let file = folder.file().map_err(disk)?;
    let mut body = match open_body(&backend.op, path, version).await {
        Ok(b) => b,
        Err(e) => {
            let e = read_failed(backend, dataset, &uri, path, version, "download", &e).await;
            return Err(Failed::Store(e));
        }
    };
    let mut hasher = hash.then(sha2::Sha256::new);
    let mut len = 0u64;
    // Writes go to the page cache, a chunk at a time as it comes.
    let mut out = std::io::BufWriter::with_capacity(1 << 20, &file);
    // An object no manifest gives the size of (a Megatron `.idx`) is
    // bounded by the folder's room alone.
    let mut room = folder.room();
    loop {
        let chunk = match body.try_next().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                let e = read_failed(backend, dataset, &uri, path, version, "download", &e).await;
                return Err(Failed::Store(e));
            }
        };
        let before = len;
        len += chunk.len() as u64;
        if limit.is_some_and(|l| len > l) {
            break;
        }
        if let Some(h) = &mut hasher {
            h.update(&chunk);
        }
        room.check(before, chunk.len() as u64).map_err(disk)?;
        out.write_all(&chunk).map_err(disk)?;
    }
    out.flush().map_err(disk)?;
    drop(out);
    let bytes = spill::map(&file).map_err(disk)?;
    Ok(Spilled {
        bytes,
        len,
        sha256: hasher.map(|h| h.finalize().iter().map(|b| format!("{b:02x}")).collect()),
    })
}

/// The body of the whole object `path`, its request conditional on
/// `version` where given.
async fn open_body(
    op: &opendal::Operator,
    path: &str,
    version: Option<&Version>,
) -> std::io::Result<opendal::FuturesBytesStream> {
    let reader = version::reader(op, path, version).await?;
    Ok(reader.into_bytes_stream(..).await?)
}

/// What [`download_to_temp`] got.
pub(crate) struct Spilled {
    /// The bytes, mapped from the temporary file.
    pub(crate) bytes: Bytes,
    /// How many bytes came (past the limit: the count when it stopped).
    pub(crate) len: u64,
    /// Their SHA-256 (hex), when asked for.
    pub(crate) sha256: Option<String>,
}

/// A compressed shard downloaded into an unnamed file in `folder` and
/// checked, its decode still to run ([`Compressed`]).
#[allow(clippy::too_many_arguments)]
async fn download_compressed(
    backend: &Backend,
    dataset: &str,
    entry: &ShardEntry,
    metrics: &CacheMetrics,
    hash: bool,
    cap: Option<u64>,
    folder: Folder<'_>,
    version: Option<&Version>,
) -> Result<(Fetched, Option<String>)> {
    let started = Instant::now();
    let uri = backend.uri_of(&entry.path);
    let limit = Some(entry.bytes);
    let path = &entry.path;
    let spilled = match download_into(backend, dataset, path, limit, hash, folder, version).await {
        Ok(s) => s,
        // The cache's folder could not take it (full, failing): the
        // temporary folder may; the cache turns to memory when its decode
        // meets the same.
        Err(Failed::Disk(_)) if matches!(folder, Folder::Cache(_)) => {
            download_into(backend, dataset, path, limit, hash, Folder::Temp, version)
                .await
                .map_err(Failed::into_error)?
        }
        Err(e) => return Err(e.into_error()),
    };
    let Spilled {
        bytes: raw,
        len,
        sha256,
    } = spilled;
    metrics.download_time.record(started.elapsed());
    metrics.bytes_downloaded.add(len.min(entry.bytes));
    verify(dataset, &uri, entry, len, sha256.as_deref())?;
    let c = Compressed {
        dataset: dataset.to_owned(),
        uri,
        compression: Compression::from_path(&entry.path),
        raw,
        want: entry.uncompressed_bytes,
        cap,
    };
    Ok((Fetched::Decode(c), sha256))
}
