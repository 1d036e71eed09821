//! The shard cache: a foyer hybrid cache of whole, verified, decompressed
//! shards. A memory tier keeps hot shards; a disk tier under the cache root
//! keeps the rest and survives restarts.
//!
//! - One download per shard however many readers ask at once: foyer's
//!   `get_or_fetch` makes concurrent misses of a key wait on one fetch.
//! - Only whole, verified shards enter: the fetch returns a value only after
//!   size, checksum and decompression checks passed, so a failed or
//!   interrupted download inserts nothing; foyer checksums its disk entries.
//! - A disk tier that cannot hold the largest shard is refused at open.
//! - Re-downloads of a shard that was cached before are counted; a shard
//!   downloaded [`THRASH_DOWNLOADS`] times marks the cache as thrashing and
//!   logs a warning once.

use crate::backend::runtime;
use crate::metrics::{CacheMetrics, THRASH_DOWNLOADS};
use crate::options::CacheOptions;
use bytes::Bytes;
use foyer::{
    BlockEngineConfig, DeviceBuilder, Event, EventListener, FsDeviceBuilder, HybridCache,
    HybridCacheBuilder, HybridCachePolicy, Spawner,
};
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use zephon_core::{Error, Result};

/// Most bytes of bookkeeping a disk-tier block needs beside one shard.
const BLOCK_SLACK: u64 = 1 << 20;

/// The shard cache of one dataset location.
pub struct ShardCache {
    hybrid: HybridCache<String, Bytes>,
    dir: PathBuf,
    block_size: u64,
    metrics: Arc<CacheMetrics>,
    downloads: Mutex<HashMap<String, u64>>,
    warned: AtomicBool,
}

impl std::fmt::Debug for ShardCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardCache")
            .field("dir", &self.dir)
            .field("block_size", &self.block_size)
            .field("stats", &self.metrics.snapshot())
            .finish_non_exhaustive()
    }
}

struct EvictionCounter(Arc<CacheMetrics>);

impl EventListener for EvictionCounter {
    type Key = String;
    type Value = Bytes;

    fn on_leave(&self, reason: Event, _key: &String, _value: &Bytes) {
        if reason == Event::Evict {
            self.0.memory_evictions.inc();
        }
    }
}

/// Caches open in this process, by folder: two datasets at the same location
/// share one cache rather than two foyer stores writing the same files.
static OPEN: Mutex<Option<HashMap<PathBuf, Weak<ShardCache>>>> = Mutex::new(None);

impl ShardCache {
    /// Opens (or joins) the cache for dataset `location`, whose largest shard
    /// decompresses to `largest_shard` bytes. A disk tier too small for that
    /// shard is a configuration error.
    pub async fn open(
        opts: &CacheOptions,
        location: &str,
        largest_shard: u64,
    ) -> Result<Arc<Self>> {
        if opts.limit_bytes < largest_shard {
            return Err(Error::config(
                "cache.limit_bytes",
                format!(
                    "{} bytes cannot hold the largest shard of `{location}` ({largest_shard} bytes); \
                     raise the limit, or read by byte range",
                    opts.limit_bytes
                ),
            ));
        }
        let block_size =
            (largest_shard + largest_shard / 64 + BLOCK_SLACK).div_ceil(BLOCK_SLACK) * BLOCK_SLACK;
        if opts.limit_bytes < 2 * block_size {
            return Err(Error::config(
                "cache.limit_bytes",
                format!(
                    "{} bytes is too small for `{location}`: the disk tier keeps whole shards in blocks of \
                     {block_size} bytes (largest shard {largest_shard} bytes plus overhead) and needs room \
                     for two, so at least {} bytes",
                    opts.limit_bytes,
                    2 * block_size
                ),
            ));
        }
        let dir = opts
            .root
            .join(&crate::manifest::sha256_hex(location.as_bytes())[..16]);
        {
            let open = OPEN.lock().expect("cache registry lock");
            if let Some(c) = open
                .as_ref()
                .and_then(|m| m.get(&dir))
                .and_then(Weak::upgrade)
            {
                if c.block_size >= block_size {
                    return Ok(c);
                }
                return Err(Error::config(
                    "cache",
                    format!(
                        "the cache at `{}` is already open with blocks of {} bytes, too small for shards of \
                         {largest_shard} bytes; drop the other dataset first",
                        dir.display(),
                        c.block_size
                    ),
                ));
            }
        }
        let cache = Arc::new(Self::build(opts, &dir, block_size).await?);
        let mut open = OPEN.lock().expect("cache registry lock");
        open.get_or_insert_with(HashMap::new)
            .insert(dir, Arc::downgrade(&cache));
        Ok(cache)
    }

    async fn build(opts: &CacheOptions, dir: &Path, block_size: u64) -> Result<Self> {
        let io = |e: std::io::Error| Error::Io {
            path: dir.display().to_string(),
            source: e,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let ext =
            |e: foyer::Error| Error::external(format!("shard cache at `{}`", dir.display()), e);
        let device = FsDeviceBuilder::new(dir)
            .with_capacity(opts.limit_bytes as usize)
            .build()
            .map_err(ext)?;
        let metrics = Arc::new(CacheMetrics::default());
        let hybrid = HybridCacheBuilder::new()
            .with_name("zephon-shards")
            .with_policy(HybridCachePolicy::WriteOnInsertion)
            .with_event_listener(Arc::new(EvictionCounter(metrics.clone())))
            .memory(opts.memory_bytes as usize)
            // One shard: entries are whole dataset shards, few and large. With
            // foyer's default of 8, each holds an eighth of the capacity and
            // evicts only its own entries, so up to 8 shards could stay in a
            // memory tier meant for one.
            .with_shards(1)
            .with_weighter(|k: &String, v: &Bytes| k.len() + v.len())
            .storage()
            .with_engine_config(
                BlockEngineConfig::new(device)
                    .with_block_size(block_size as usize)
                    .with_buffer_pool_size(2 * block_size as usize)
                    .with_flushers(1),
            )
            .with_spawner(Spawner::from(runtime::runtime().handle().clone()))
            .build()
            .await
            .map_err(ext)?;
        Ok(ShardCache {
            hybrid,
            dir: dir.to_owned(),
            block_size,
            metrics,
            downloads: Mutex::new(HashMap::new()),
            warned: AtomicBool::new(false),
        })
    }

    /// The folder of the disk tier.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The counters.
    pub fn metrics(&self) -> &Arc<CacheMetrics> {
        &self.metrics
    }

    /// Whether `key` is cached (memory tier, or possibly the disk tier).
    pub fn contains(&self, key: &str) -> bool {
        self.hybrid.contains(key)
    }

    /// The shard under `key` if the memory tier holds it, counted as a hit;
    /// `None` otherwise (the disk tier is not consulted). Synchronous, so a
    /// warm read costs a hash lookup rather than a task on the I/O runtime.
    pub fn get_in_memory(&self, key: &str) -> Option<Bytes> {
        let entry = self.hybrid.memory().get(key)?;
        self.metrics.hits.inc();
        Some(entry.value().clone())
    }

    /// The shard under `key`, running `download` on a miss. Concurrent
    /// callers for one key share one download; a failed download caches
    /// nothing and fails every waiter.
    pub async fn get_or_download<F, Fut>(
        &self,
        key: &str,
        context: &str,
        download: F,
    ) -> Result<Bytes>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Bytes>> + Send + 'static,
    {
        let leader = Arc::new(AtomicBool::new(false));
        let flag = leader.clone();
        let fut = download();
        let entry = self
            .hybrid
            .get_or_fetch(key, move || async move {
                flag.store(true, Ordering::Relaxed);
                fut.await
            })
            .await;
        match entry {
            Ok(e) => {
                if leader.load(Ordering::Relaxed) {
                    self.metrics.misses.inc();
                    self.note_download(key, context);
                } else {
                    self.metrics.hits.inc();
                }
                Ok(e.value().clone())
            }
            Err(e) => Err(Error::external(context.to_owned(), error_chain(&e))),
        }
    }

    fn note_download(&self, key: &str, context: &str) {
        let n = {
            let mut d = self.downloads.lock().expect("download registry lock");
            let n = d.entry(key.to_owned()).or_insert(0);
            *n += 1;
            *n
        };
        self.metrics.max_downloads_per_shard.observe(n);
        if n > 1 {
            self.metrics.redownloads.inc();
        }
        if n >= THRASH_DOWNLOADS && !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                shard = context,
                downloads = n,
                cache = %self.dir.display(),
                "the shard cache is thrashing: shards are evicted and downloaded again; raise cache.limit_bytes"
            );
        }
    }
}

/// An error and its sources, joined: foyer wraps the download's error, and
/// the waiters of a shared download see only the wrapper.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}
