//! Opening a dataset from a URI: backend, discovery (manifest or listing),
//! cache, and one shard object per shard.

use crate::cache::ShardCache;
use crate::dataset::FormatShard;
use crate::dataset::remote::{CachedShard, RangeShard};
use crate::error::shard_error;
use crate::format::compression::Compression;
use crate::format::{FormatOptions, FormatSpec};
use crate::manifest::{MANIFEST, Manifest};
use crate::metrics::{CacheMetrics, CacheStats};
use crate::options::StorageOptions;
use crate::source::backend::{Backend, BackendStats, runtime};
use std::path::PathBuf;
use std::sync::Arc;
use zephon_core::{Dataset, Result, Shard};

/// A dataset opened from a URI through its opendal backend, with handles on
/// its cache and counters.
///
/// A local folder opened here goes through the backend and the shard cache
/// like a remote one does (which is how the cache is exercised without a
/// server); [`Dataset::from_uri`](UriDatasetExt::from_uri) reads local
/// folders in place instead.
///
/// ```
/// use zephon_storage::{RemoteDataset, StorageOptions, CacheOptions};
/// use zephon_storage::backend::{Backend, runtime};
/// let opts = StorageOptions::default().cache(CacheOptions::default().enabled(false));
/// // Put a shard into an in-memory store, then open it.
/// let b = Backend::open("doc", "memory://remote-doc", &opts).unwrap();
/// runtime::block_on(b.op.write("0.jsonl", "{\"a\":1}\n{\"a\":2}\n")).unwrap();
/// let ds = RemoteDataset::open("doc", "memory://remote-doc", &opts).unwrap();
/// assert_eq!(ds.dataset().num_samples(), 2);
/// ```
#[derive(Debug)]
pub struct RemoteDataset {
    dataset: Dataset,
    backend: Backend,
    manifest: Manifest,
    cache: Option<Arc<ShardCache>>,
    metrics: Arc<CacheMetrics>,
    cached: Vec<Option<Arc<CachedShard>>>,
    range_read: Vec<bool>,
}

impl RemoteDataset {
    /// Opens the dataset at `uri`. Reads `index.json` when there is one, and
    /// otherwise lists the shards and downloads each once to count samples.
    pub fn open(name: &str, uri: &str, opts: &StorageOptions) -> Result<Self> {
        let (name, uri, opts) = (name.to_owned(), uri.to_owned(), opts.clone());
        let what = format!("opening `{uri}`");
        runtime::block_on(
            async move { runtime::spawn(what, Self::open_async(name, uri, opts)).await },
        )
    }

    async fn open_async(name: String, uri: String, opts: StorageOptions) -> Result<Self> {
        let backend = Backend::open(&name, &uri, &opts)?;
        let metrics = Arc::new(CacheMetrics::default());
        // The manifest and the sidecars go through the cache's disk tier
        // even where no shard does (byte-range reads): the processes of a
        // node then read each once.
        let objects = match opts.cache.enabled && crate::dataset::remote::caches_objects(&backend) {
            true => Some(ShardCache::open(&opts.cache, &backend.uri, 0).await?),
            false => None,
        };
        let mut manifest =
            discover(&backend, objects.as_ref(), &name, &metrics, &opts.format).await?;
        // The caller's projection wins over one recorded in the manifest.
        if let (FormatSpec::Parquet { columns }, Some(c)) =
            (&mut manifest.format, &opts.format.columns)
        {
            *columns = Some(c.clone());
        }
        let ranged = |e: &crate::manifest::ShardEntry| {
            (manifest.format.is_jsonl() && e.index.is_some()
                || matches!(
                    manifest.format,
                    FormatSpec::Tokens { .. } | FormatSpec::Megatron
                ))
                && opts.byte_range
                && Compression::from_path(&e.path) == Compression::None
        };
        // Uncompressed shards of these formats are read by blocks; the
        // others enter the cache whole.
        let blocked = |e: &crate::manifest::ShardEntry| {
            (matches!(
                manifest.format,
                FormatSpec::Jsonl | FormatSpec::Tokens { .. } | FormatSpec::Megatron
            ) || crate::format::blocked::indexed_by_blocks(&manifest.format))
                && Compression::from_path(&e.path) == Compression::None
        };
        let largest = manifest
            .shards
            .iter()
            .filter(|e| !ranged(e))
            .map(|e| {
                if blocked(e) {
                    0
                } else {
                    e.decoded_bytes().unwrap_or(e.bytes.saturating_mul(8))
                }
            })
            .max();
        let cache = match largest {
            Some(l) if opts.cache.enabled => {
                Some(ShardCache::open(&opts.cache, &backend.uri, l).await?)
            }
            _ => None,
        };
        // Counters live with the cache (shared by every dataset using it).
        let metrics = cache.as_ref().map_or(metrics, |c| c.metrics().clone());
        let mut shards: Vec<Arc<dyn Shard>> = Vec::new();
        let mut cached = Vec::new();
        for e in &manifest.shards {
            let ranged_format = (ranged(e) && !manifest.format.is_jsonl())
                .then(|| {
                    FormatShard::ranged(
                        &name,
                        manifest.format.clone(),
                        backend.clone(),
                        e.clone(),
                        metrics.clone(),
                        objects.clone(),
                    )
                })
                .flatten();
            if let Some(s) = ranged_format {
                shards.push(Arc::new(s));
                cached.push(None);
            } else if let Some(s) = cache
                .as_ref()
                .filter(|_| blocked(e) && !manifest.format.is_jsonl())
                .and_then(|c| {
                    FormatShard::blocks(
                        &name,
                        manifest.format.clone(),
                        backend.clone(),
                        e.clone(),
                        c.clone(),
                        metrics.clone(),
                    )
                })
            {
                shards.push(Arc::new(s));
                cached.push(None);
            } else if !manifest.format.is_jsonl() {
                shards.push(Arc::new(FormatShard::remote(
                    &name,
                    manifest.format.clone(),
                    backend.clone(),
                    e.clone(),
                    cache.clone(),
                    metrics.clone(),
                )));
                cached.push(None);
            } else if ranged(e) {
                shards.push(Arc::new(RangeShard::new(
                    &name,
                    backend.clone(),
                    e.clone(),
                    metrics.clone(),
                    objects.clone(),
                )?));
                cached.push(None);
            } else {
                let s = Arc::new(
                    CachedShard::new(
                        &name,
                        backend.clone(),
                        e.clone(),
                        cache.clone(),
                        metrics.clone(),
                    )
                    .with_blocks(),
                );
                shards.push(s.clone());
                cached.push(Some(s));
            }
        }
        let range_read = manifest.shards.iter().map(ranged).collect();
        let dataset = Dataset::new(name, backend.uri.clone(), shards)?;
        Ok(RemoteDataset {
            dataset,
            backend,
            manifest,
            cache,
            metrics,
            cached,
            range_read,
        })
    }

    /// The dataset, ready for a `WorkSource`.
    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    /// The manifest it was opened from (read, or built by listing).
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The backend.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The shard cache, when on.
    pub fn cache(&self) -> Option<&Arc<ShardCache>> {
        self.cache.as_ref()
    }

    /// Cache and download counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.metrics.snapshot()
    }

    /// Retry counters.
    pub fn backend_stats(&self) -> BackendStats {
        self.backend.metrics.snapshot()
    }

    /// Whether shard `i` is in the cache (false for byte-range shards).
    pub fn is_cached(&self, i: usize) -> bool {
        match self.cached.get(i) {
            Some(Some(s)) => s.is_cached(),
            Some(None) if !self.range_read[i] => self.dataset.shards()[i].is_warm(),
            _ => false,
        }
    }
}

async fn discover(
    backend: &Backend,
    cache: Option<&Arc<ShardCache>>,
    name: &str,
    metrics: &CacheMetrics,
    format: &FormatOptions,
) -> Result<Manifest> {
    match read_manifest(backend, cache).await {
        Ok(Some(data)) => {
            let m = Manifest::parse(&data)
                .map_err(|e| shard_error(name, &backend.uri_of(MANIFEST), e.to_string()))?;
            if m.shards.is_empty() {
                return Err(shard_error(
                    name,
                    &backend.uri_of(MANIFEST),
                    "the manifest lists no shards",
                ));
            }
            Ok(m)
        }
        Ok(None) if backend.can_list => {
            crate::dataset::scan::scan(backend, name, metrics, format).await
        }
        Ok(None) => Err(shard_error(
            name,
            &backend.uri,
            "no index.json manifest, and this backend cannot list; write one with `zephon build-index`",
        )),
        Err(m) => Err(shard_error(name, &backend.uri_of(MANIFEST), m)),
    }
}

/// The manifest's bytes (`None` where there is none), through `cache`
/// where given (see [`read_object`](crate::remote::read_object)); an
/// error says what failed.
async fn read_manifest(
    backend: &Backend,
    cache: Option<&Arc<ShardCache>>,
) -> std::result::Result<Option<bytes::Bytes>, String> {
    let Some(cache) = cache else {
        return backend.read_manifest().await;
    };
    let limit = backend.manifest_limit;
    let fail = |e: String| zephon_core::Error::config("manifest", e);
    let read =
        crate::dataset::remote::read_object(backend, Some(cache), MANIFEST, limit, fail).await;
    match read {
        Ok(Some(b)) if b.len() as u64 > limit => Err(format!(
            "the manifest is longer than manifest_limit ({limit} bytes; read no further); {}",
            crate::manifest::RAISE_LIMIT
        )),
        Ok(found) => Ok(found),
        Err(zephon_core::Error::Config { message, .. }) => {
            Err(format!("cannot read the manifest: {message}"))
        }
        Err(e) => Err(format!("cannot read the manifest: {e}")),
    }
}

/// Datasets from URIs: `Dataset::from_uri(name, uri)`.
pub trait UriDatasetExt: Sized {
    /// Opens the dataset at `uri` (`file://` or a plain path, `s3://`,
    /// `gs://`, `azblob://`, `http(s)://`, `memory://`) with default options:
    /// endpoints and credentials from the environment variables each
    /// service's own tools read (see [`StorageOptions`]), the shard cache
    /// under `~/.cache/zephon`.
    ///
    /// A local folder (a plain path or `file://`) is opened as
    /// [`Dataset::from_path_with`](crate::DatasetExt::from_path_with) opens
    /// it: shards read in place, never copied into the shard cache, found
    /// by the same rule ([`list_local`](crate::scan::list_local)); of the
    /// options, only the format options and
    /// [`manifest_limit`](StorageOptions::manifest_limit) apply to it (all
    /// are checked).
    ///
    /// ```
    /// use zephon_core::Dataset;
    /// use zephon_storage::UriDatasetExt;
    /// let dir = std::env::temp_dir().join(format!("zephon-uri-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// std::fs::write(dir.join("a.jsonl"), "{\"text\":\"hi\"}\n").unwrap();
    /// let ds = Dataset::from_uri("doc", &format!("file://{}", dir.display())).unwrap();
    /// assert_eq!(ds.num_samples(), 1);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    fn from_uri(name: &str, uri: &str) -> Result<Self>;

    /// Like [`from_uri`](UriDatasetExt::from_uri), with explicit options.
    fn from_uri_with(name: &str, uri: &str, opts: &StorageOptions) -> Result<Self>;
}

impl UriDatasetExt for Dataset {
    fn from_uri(name: &str, uri: &str) -> Result<Self> {
        Self::from_uri_with(name, uri, &StorageOptions::default())
    }

    fn from_uri_with(name: &str, uri: &str, opts: &StorageOptions) -> Result<Self> {
        match local_dir(uri) {
            Some(dir) => {
                opts.validate()?;
                crate::dataset::local::open_local(name, &dir, &opts.format, opts.manifest_limit)
            }
            None => Ok(RemoteDataset::open(name, uri, opts)?.dataset),
        }
    }
}

/// The local folder a URI names: a plain path, or a `file://` URI (the
/// scheme in any case); `None` for every other scheme, and for an empty
/// URI or a bare `file://`, which name no folder.
///
/// ```
/// use std::path::PathBuf;
/// use zephon_storage::open::local_dir;
/// assert_eq!(local_dir("file:///data/web/"), Some(PathBuf::from("/data/web")));
/// assert_eq!(local_dir("data/web"), Some(PathBuf::from("data/web")));
/// assert_eq!(local_dir("s3://bucket/web"), None);
/// assert_eq!(local_dir("s3://"), None);
/// assert_eq!(local_dir("file://"), None);
/// assert_eq!(local_dir(""), None);
/// assert_eq!(local_dir("file:///"), Some(PathBuf::from("/")));
/// ```
pub fn local_dir(uri: &str) -> Option<PathBuf> {
    // The scheme is found before trailing slashes are trimmed: trimmed
    // first, `s3://` would become the local path `s3:`.
    let path = match uri.split_once("://") {
        // An empty URI names no folder either (see `file://`).
        None if uri.trim().is_empty() => return None,
        None => uri,
        // `file://` alone names no folder: left to the backend, which says so.
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("file") && !rest.is_empty() => rest,
        Some(_) => return None,
    };
    Some(PathBuf::from(match path.trim_end_matches('/') {
        "" if !path.is_empty() => "/",
        t => t,
    }))
}
