//! Shards of remote datasets: [`CachedShard`] reads JSONL shards through the
//! shard cache (by blocks when uncompressed, whole when compressed);
//! [`RangeShard`] reads just the bytes of the samples asked for, uncached.

use crate::cache::ShardCache;
use crate::cache::blocks::BlockFile;
use crate::error::shard_error;
use crate::format::compression::Compression;
use crate::format::jsonl::{LineIndex, parse_line, parse_run};
use crate::format::lines::{each_prefetched, runs};
use crate::manifest::{ShardEntry, decode_index};
use crate::metrics::CacheMetrics;
use crate::source::backend::read::read_version;
use crate::source::backend::version::Version;
use crate::source::backend::{Backend, runtime};
use crate::source::download::{download_at, download_for_cache};
use crate::source::ranges::fetch_spans;
use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::sync::{Arc, OnceLock};
use zephon_core::runner::{WorkCost, offload_measured};
use zephon_core::{Error, Record, Result, Shard};

fn check_indices(dataset: &str, shard: &str, len: u64, indices: &[u64]) -> Result<()> {
    match indices.iter().find(|&&i| i >= len) {
        Some(&bad) => Err(Error::SampleOutOfRange {
            dataset: dataset.to_owned(),
            shard: shard.to_owned(),
            sample: bad,
            len,
        }),
        None => Ok(()),
    }
}

/// A JSONL shard read through the shard cache (or downloaded whole when the
/// cache is off). Uncompressed, with [`with_blocks`](CachedShard::with_blocks),
/// it is read by blocks: its line index comes from its sidecar, or from one
/// pass over its blocks, and a read fetches the blocks covering its lines.
/// Otherwise it is downloaded whole (`.zst` and `.gz` through files in the
/// temporary folder, decoded into one that is mapped: see
/// `download_at` in the download module), indexed, then parsed line by
/// line.
#[derive(Debug)]
pub struct CachedShard {
    dataset: Arc<str>,
    uri: String,
    key: String,
    entry: ShardEntry,
    backend: Backend,
    cache: Option<Arc<ShardCache>>,
    metrics: Arc<CacheMetrics>,
    index: OnceLock<Arc<LineIndex>>,
    blocks: Option<Arc<BlockFile>>,
    block_index: tokio::sync::OnceCell<Arc<LineIndex>>,
    /// What parsing a line costs, as measured: a read that costs less than
    /// handing it to the CPU pool parses in place.
    parse_cost: Arc<WorkCost>,
    /// The version a whole-shard read is at, recorded by the first (a
    /// shard read by blocks keeps its own, in its [`BlockFile`]).
    version: Arc<tokio::sync::OnceCell<Version>>,
}

/// The version of `entry`, recorded in `cell` by a stat on the first call.
async fn version_of(
    cell: &tokio::sync::OnceCell<Version>,
    backend: &Backend,
    dataset: &str,
    entry: &ShardEntry,
) -> Result<Version> {
    cell.get_or_try_init(|| backend.version(dataset, &entry.path))
        .await
        .cloned()
}

/// A whole-shard cache key, `key` of the shard at `version`: bytes of one
/// version are never served for another.
fn versioned(key: &str, version: &Version) -> String {
    format!("{key}#{}", version.tag())
}

impl CachedShard {
    /// A shard of `backend` described by `entry`.
    pub fn new(
        dataset: &str,
        backend: Backend,
        entry: ShardEntry,
        cache: Option<Arc<ShardCache>>,
        metrics: Arc<CacheMetrics>,
    ) -> Self {
        let uri = backend.uri_of(&entry.path);
        let key = format!(
            "{uri}#{}#{}",
            entry.bytes,
            entry.sha256.as_deref().unwrap_or("")
        );
        CachedShard {
            dataset: dataset.into(),
            uri,
            key,
            entry,
            backend,
            cache,
            metrics,
            index: OnceLock::new(),
            blocks: None,
            block_index: tokio::sync::OnceCell::new(),
            parse_cost: Arc::default(),
            version: Arc::default(),
        }
    }

    /// Reads the shard by blocks of the cache when it is uncompressed and
    /// the cache is on (unchanged otherwise).
    pub fn with_blocks(mut self) -> Self {
        if let Some(c) = &self.cache
            && Compression::from_path(&self.entry.path) == Compression::None
        {
            self.blocks = Some(Arc::new(BlockFile::new(
                &self.dataset,
                self.backend.clone(),
                self.entry.clone(),
                &self.key,
                c.clone(),
                self.metrics.clone(),
            )));
        }
        self
    }

    /// The line index of a shard read by blocks: its sidecar's, or one
    /// built from its blocks, checked against the manifest either way.
    async fn block_index(&self, blocks: &Arc<BlockFile>) -> Result<Arc<LineIndex>> {
        self.block_index
            .get_or_try_init(|| async {
                let index = match &self.entry.index {
                    Some(p) => {
                        let cache = self.cache.as_ref();
                        read_line_index(&self.backend, cache, &self.dataset, &self.entry, p).await?
                    }
                    None => Arc::new(blocks.line_index().await?),
                };
                // Opening the shard records the version it is read at.
                blocks.version().await?;
                self.counted(&index)?;
                Ok(index)
            })
            .await
            .cloned()
    }

    /// Samples `indices` of a shard read by blocks.
    async fn read_blocks(&self, blocks: &Arc<BlockFile>, indices: &[u64]) -> Result<Vec<Record>> {
        let index = self.block_index(blocks).await?;
        let runs = runs(indices);
        let mut ranges: Vec<(u64, u64)> =
            runs.iter().map(|&(f, n)| index.byte_range(f, n)).collect();
        ranges.sort_unstable();
        let chunks = blocks.fetch_spans(ranges).await?;
        let (dataset, uri) = (self.dataset.clone(), self.uri.clone());
        let parsed = offload_measured("fetch", &self.parse_cost, indices.len(), move || {
            let mut out = Vec::new();
            for (first, n) in runs {
                let (from, to) = index.byte_range(first, n);
                // The last span starting at or before `from` holds the run.
                let k = chunks.partition_point(|(start, _)| *start <= from) - 1;
                let (start, b) = &chunks[k];
                let slice = &b[(from - start) as usize..(to - start) as usize];
                out.extend(parse_run(slice, first, &dataset, &uri).map_err(|e| (e, from, to))?);
            }
            Ok(out)
        })
        .await?;
        match parsed {
            Ok(out) => Ok(out),
            // The blocks passed their checksums, so they hold what was
            // downloaded; what was downloaded may still not be the shard's
            // (a server answering another range under the asked one's
            // `Content-Range`). Kept, they would fail every later run at
            // this line; dropped, the next run downloads them again.
            Err((e, from, to)) => {
                blocks.evict_ranges(vec![(from, to)]).await;
                Err(e)
            }
        }
    }

    /// The cache key of this shard, short of the version it is read at
    /// (which entries add to it once the first read records it).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether the shard is in the cache (every block of it, when read by
    /// blocks).
    pub fn is_cached(&self) -> bool {
        match &self.blocks {
            Some(b) => (0..b.blocks()).all(|i| b.is_cached(i)),
            None => match (self.cache.as_ref(), self.version.get()) {
                (Some(c), Some(v)) => c.contains(&versioned(&self.key, v)),
                _ => false,
            },
        }
    }

    /// The shard's decompressed bytes: from the cache, or downloaded.
    pub fn load(&self) -> BoxFuture<'static, Result<Bytes>> {
        let known = self.version.get().map(|v| versioned(&self.key, v));
        if let Some(bytes) = known.and_then(|k| self.cache.as_ref()?.get_in_memory(&k)) {
            return futures::future::ready(Ok(bytes)).boxed();
        }
        let (backend, dataset, entry) = (
            self.backend.clone(),
            self.dataset.clone(),
            self.entry.clone(),
        );
        let (cache, metrics, key, uri) = (
            self.cache.clone(),
            self.metrics.clone(),
            self.key.clone(),
            self.uri.clone(),
        );
        let cell = self.version.clone();
        runtime::spawn(self.uri.clone(), async move {
            let context = format!("dataset `{dataset}`, shard `{uri}`");
            let version = version_of(&cell, &backend, &dataset, &entry).await;
            let version = version.inspect_err(|_| metrics.failures.inc())?;
            let key = versioned(&key, &version);
            match cache {
                Some(c) => {
                    let m = metrics.clone();
                    // What one entry may take: the disk tier less its
                    // header page (0: no disk tier, nothing to keep to).
                    let cap = Some(c.disk_capacity().saturating_sub(4096)).filter(|&n| n > 0);
                    let folder = c.live_dir().map(std::path::Path::to_owned);
                    let len = entry.decoded_bytes();
                    c.get_or_fetch(&key, len, &context, async move {
                        let folder = folder.as_deref();
                        let v = Some(&version);
                        download_for_cache(&backend, &dataset, &entry, &m, cap, folder, v).await
                    })
                    .await
                }
                None => {
                    metrics.misses.inc();
                    download_at(&backend, &dataset, &entry, &metrics, Some(&version)).await
                }
            }
        })
        .boxed()
    }

    fn index_of(&self, data: &[u8]) -> Result<Arc<LineIndex>> {
        if let Some(i) = self.index.get() {
            return Ok(i.clone());
        }
        let index =
            Arc::new(LineIndex::build(data).map_err(|e| e.in_shard(&self.dataset, &self.uri))?);
        self.counted(&index)?;
        Ok(self.index.get_or_init(|| index).clone())
    }

    /// A line index of as many lines as the manifest says the shard holds
    /// samples, or an error naming the shard.
    fn counted(&self, index: &LineIndex) -> Result<()> {
        if index.len() == self.entry.samples {
            return Ok(());
        }
        Err(shard_error(
            &self.dataset,
            &self.uri,
            format!(
                "has {} lines but the manifest says {} samples",
                index.len(),
                self.entry.samples
            ),
        ))
    }
}

impl Shard for CachedShard {
    fn name(&self) -> &str {
        &self.uri
    }

    fn fingerprint(&self) -> Option<u64> {
        Some(self.entry.fingerprint())
    }

    fn len(&self) -> u64 {
        self.entry.samples
    }

    fn read_run(&self, start: u64, count: u64) -> BoxFuture<'_, Result<Vec<Record>>> {
        let indices: Vec<u64> = (start..start.saturating_add(count)).collect();
        async move { self.read_indices(&indices).await }.boxed()
    }

    fn read_indices<'a>(&'a self, indices: &'a [u64]) -> BoxFuture<'a, Result<Vec<Record>>> {
        async move {
            check_indices(&self.dataset, &self.uri, self.len(), indices)?;
            if let Some(b) = &self.blocks {
                return self.read_blocks(b, indices).await;
            }
            let data = self.load().await?;
            let index = self.index_of(&data)?;
            let runs = runs(indices);
            let (dataset, uri) = (self.dataset.clone(), self.uri.clone());
            offload_measured("fetch", &self.parse_cost, indices.len(), move || {
                let spans = index.run_spans(&runs);
                let mut out = Vec::new();
                each_prefetched(&data, &spans, |k, from, to| {
                    out.extend(parse_run(&data[from..to], runs[k].0, &dataset, &uri)?);
                    Ok::<_, Error>(())
                })?;
                Ok(out)
            })
            .await?
        }
        .boxed()
    }

    /// A shard read by blocks warms its index and its leading blocks (see
    /// [`BlockFile::warm_share`]).
    fn warm(&self) -> BoxFuture<'_, Result<()>> {
        match &self.blocks {
            Some(b) => async move {
                self.block_index(b).await?;
                b.warm_share().await
            }
            .boxed(),
            None => self.load().map(|r| r.map(|_| ())).boxed(),
        }
    }

    /// Downloads the blocks of samples `indices` (a shard read by blocks;
    /// nothing otherwise, as [`warm`](Shard::warm) covers whole shards).
    fn warm_samples<'a>(&'a self, indices: &'a [u64]) -> BoxFuture<'a, Result<()>> {
        async move {
            let Some(b) = &self.blocks else {
                return Ok(());
            };
            check_indices(&self.dataset, &self.uri, self.len(), indices)?;
            let index = self.block_index(b).await?;
            let ranges = indices.iter().map(|&i| index.byte_range(i, 1)).collect();
            b.warm_ranges(ranges).await
        }
        .boxed()
    }

    /// Without a cache every read downloads anyway: there is nothing to warm.
    fn is_warm(&self) -> bool {
        self.cache.is_none() || self.is_cached()
    }

    fn io_stats(&self) -> Option<zephon_metrics::IoStats> {
        Some(io_stats(
            &self.metrics,
            self.backend.metrics.snapshot().retries,
        ))
    }
}

/// The counters behind a dataset, in the shape observability reports.
pub fn io_stats(m: &CacheMetrics, retries: u64) -> zephon_metrics::IoStats {
    let s = m.snapshot();
    zephon_metrics::IoStats {
        cache_hits: s.hits,
        cache_misses: s.misses,
        failures: s.failures,
        retries,
        bytes_downloaded: s.bytes_downloaded,
        download_s: s.download_time.as_secs_f64(),
        decode_s: s.decode_time.as_secs_f64(),
        evictions: s.memory_evictions,
        thrashing: s.thrashing,
    }
}

/// An uncompressed shard with a line-offset index sidecar, read by byte
/// range: a read downloads only the lines it returns and small gaps (one request per cluster of
/// nearby samples), never the whole shard.
#[derive(Debug)]
pub struct RangeShard {
    dataset: Arc<str>,
    uri: String,
    entry: ShardEntry,
    index_path: String,
    backend: Backend,
    metrics: Arc<CacheMetrics>,
    /// Where the sidecar is cached (the shards themselves are not).
    cache: Option<Arc<ShardCache>>,
    index: tokio::sync::OnceCell<Arc<LineIndex>>,
    /// What parsing a line costs, as measured (see [`CachedShard`]'s).
    parse_cost: Arc<WorkCost>,
}

impl RangeShard {
    /// A range-read shard; `entry.index` must name its sidecar, read
    /// through `cache` where given (the shard's bytes never are).
    pub fn new(
        dataset: &str,
        backend: Backend,
        entry: ShardEntry,
        metrics: Arc<CacheMetrics>,
        cache: Option<Arc<ShardCache>>,
    ) -> Result<Self> {
        let uri = backend.uri_of(&entry.path);
        let index_path = entry.index.clone().ok_or_else(|| {
            shard_error(
                dataset,
                &uri,
                "byte-range reads need a line-offset index (run `zephon build-index`)",
            )
        })?;
        Ok(RangeShard {
            dataset: dataset.into(),
            uri,
            entry,
            index_path,
            backend,
            metrics,
            cache,
            index: tokio::sync::OnceCell::new(),
            parse_cost: Arc::default(),
        })
    }

    async fn index(&self) -> Result<Arc<LineIndex>> {
        self.index
            .get_or_try_init(|| {
                read_line_index(
                    &self.backend,
                    self.cache.as_ref(),
                    &self.dataset,
                    &self.entry,
                    &self.index_path,
                )
            })
            .await
            .cloned()
    }
}

/// What [`read_versioned`] found.
pub(crate) enum Object {
    /// The object's bytes, from the cache or downloaded into it.
    Bytes(Bytes),
    /// There is no such object.
    Missing,
    /// The object is not cached: it is a local file (reading it costs what
    /// reading the cache's copy would), the stat gave no version of it (no
    /// ETag, no modification time: nothing would tell its versions apart),
    /// or it is longer than the limit.
    Uncached,
}

/// The object `path` of `backend` (a manifest, a sidecar) through the disk
/// tier of `cache`: a stat gives its version, the entry is keyed by it and
/// the download is conditional on it, so the processes sharing the folder
/// download each version once, and a changed object is read afresh.
/// `limit` bounds what is cached; `fail` words an error.
pub(crate) async fn read_versioned(
    backend: &Backend,
    cache: &ShardCache,
    path: &str,
    limit: u64,
    fail: impl Fn(String) -> Error,
) -> Result<Object> {
    if !caches_objects(backend) {
        return Ok(Object::Uncached);
    }
    let version = match Version::stat(&backend.op, path).await {
        Ok(v) => v,
        Err(e) if e.kind() == opendal::ErrorKind::NotFound => return Ok(Object::Missing),
        Err(e) => return Err(fail(e.to_string())),
    };
    if version.tag().is_empty() || version.size() > limit {
        return Ok(Object::Uncached);
    }
    let key = format!("{}#object#{}", backend.uri_of(path), version.tag());
    let size = version.size();
    let read = async {
        read_version(&backend.op, path, .., size, Some(&version))
            .await
            .map_err(|e| fail(e.to_string()))
    };
    let bytes = cache.get_or_download_object(&key, Some(size), read).await?;
    Ok(Object::Bytes(bytes))
}

/// Whether the manifest and sidecars of `backend` go through the cache:
/// not for a local folder or an in-memory store, whose reads cost what the
/// cache's would.
pub(crate) fn caches_objects(backend: &Backend) -> bool {
    !matches!(backend.op.info().scheme(), "fs" | "memory")
}

/// The whole object `path` of `backend` if it has at most `limit` bytes
/// (reading stops past that; the caller checks the length), `None` where
/// there is none: through `cache` where given (see [`read_versioned`]),
/// else, or when it is not cached, read directly.
pub(crate) async fn read_object(
    backend: &Backend,
    cache: Option<&Arc<ShardCache>>,
    path: &str,
    limit: u64,
    fail: impl Fn(String) -> Error,
) -> Result<Option<Bytes>> {
    if let Some(c) = cache {
        match read_versioned(backend, c, path, limit, &fail).await? {
            Object::Bytes(b) => return Ok(Some(b)),
            Object::Missing => return Ok(None),
            Object::Uncached => {}
        }
    }
    match crate::source::backend::read::read_at_most(&backend.op, path, limit).await {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(fail(e.to_string())),
    }
}

/// Reads and checks the line-offset index sidecar `path` of `entry`, on
/// the storage runtime, through `cache` where given (see [`read_object`]).
async fn read_line_index(
    backend: &Backend,
    cache: Option<&Arc<ShardCache>>,
    dataset: &str,
    entry: &ShardEntry,
    path: &str,
) -> Result<Arc<LineIndex>> {
    let (path, backend) = (path.to_owned(), backend.clone());
    let (dataset, uri, entry) = (dataset.to_owned(), backend.uri_of(&path), entry.clone());
    let cache = cache.cloned();
    runtime::spawn(uri.clone(), async move {
        // A sidecar is 8 bytes a line start, and one for the end: reading
        // stops past that, so a wrong or hostile object is not read whole.
        let expect = entry.samples.saturating_add(1).saturating_mul(8);
        let read = async {
            let fail =
                |e: String| shard_error(&dataset, &uri, format!("cannot read the index: {e}"));
            read_object(&backend, cache.as_ref(), &path, expect, fail)
                .await?
                .ok_or_else(|| fail("not found".into()))
        };
        let spans = expect.div_ceil(crate::options::DEADLINE_SPAN);
        let names = (dataset.as_str(), uri.as_str(), "the read of the index");
        let data = backend.within(names, spans, read, || {}).await?;
        let index = decode_index(&data)
            .filter(|i| i.len() == entry.samples && i.start(i.len()) == entry.bytes)
            .ok_or_else(|| {
                shard_error(
                    &dataset,
                    &uri,
                    format!(
                        "index does not match the manifest ({} samples, {} bytes)",
                        entry.samples, entry.bytes
                    ),
                )
            })?;
        Ok(Arc::new(index))
    })
    .await
}

impl Shard for RangeShard {
    fn name(&self) -> &str {
        &self.uri
    }

    fn fingerprint(&self) -> Option<u64> {
        Some(self.entry.fingerprint())
    }

    fn len(&self) -> u64 {
        self.entry.samples
    }

    fn read_run(&self, start: u64, count: u64) -> BoxFuture<'_, Result<Vec<Record>>> {
        let indices: Vec<u64> = (start..start.saturating_add(count)).collect();
        async move { self.read_indices(&indices).await }.boxed()
    }

    /// Samples close together in the file are fetched by one request
    /// (gaps up to the backend's `range_gap` bytes are read and dropped,
    /// `range_part_gap` within a multi-range HTTP request), so a shuffled
    /// group costs a few requests, not one per sample.
    fn read_indices<'a>(&'a self, indices: &'a [u64]) -> BoxFuture<'a, Result<Vec<Record>>> {
        async move {
            check_indices(&self.dataset, &self.uri, self.len(), indices)?;
            let index = self.index().await?;
            let mut sorted = indices.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            let ranges = sorted.iter().map(|&i| index.byte_range(i, 1));
            let chunks = fetch_spans(
                &self.backend,
                &self.entry.path,
                &self.dataset,
                &self.uri,
                ranges,
                &self.metrics,
            )
            .await?;
            let (dataset, uri) = (self.dataset.clone(), self.uri.clone());
            let wanted = indices.to_vec();
            offload_measured("fetch", &self.parse_cost, wanted.len(), move || {
                wanted
                    .iter()
                    .map(|&i| {
                        let (from, to) = index.byte_range(i, 1);
                        // The last span starting at or before `from` holds the line.
                        let k = chunks.partition_point(|(start, _)| *start <= from) - 1;
                        let (start, b) = &chunks[k];
                        let line = &b[(from - start) as usize..(to - start) as usize];
                        parse_line(line, &dataset, &uri, i + 1)
                    })
                    .collect()
            })
            .await?
        }
        .boxed()
    }

    fn warm(&self) -> BoxFuture<'_, Result<()>> {
        async move { self.index().await.map(|_| ()) }.boxed()
    }
}
