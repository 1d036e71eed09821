//! The shard cache: fixed-size blocks of uncompressed remote shards (and
//! whole decoded shards for compressed ones, which cannot be read by range),
//! in a foyer memory tier for hot entries and a disk tier under the cache
//! root that survives restarts and that every process of a node shares.
//! Entries are keyed by shard and block ([`crate::cache::blocks`] builds the keys),
//! so a shard of any size streams through both tiers, each bounded by its
//! capacity; what follows says "shard" for an entry of either kind.
//!
//! - One download per entry however many readers ask at once: in a process,
//!   foyer's `get_or_fetch` makes concurrent misses of a key wait on one
//!   fetch; across the processes of a node (the ranks sharing the folder), a
//!   file lock per shard elects the one that downloads and publishes, and
//!   the others wait for the lock and read the published file.
//! - Only whole, verified shards enter: the fetch returns a value only after
//!   size, checksum and decompression checks passed, and a disk entry
//!   appears by atomic rename of a whole file with its own checksum, checked
//!   on every read, so a failed, interrupted or killed download, or a crash
//!   of the machine, leaves nothing a reader serves.
//! - The capacity holds for the folder as a whole, all processes' entries
//!   together, by least-recently-used eviction; a disk tier that cannot hold
//!   the largest shard is refused at open.
//! - A full or failing disk degrades the cache to its memory tier (reads
//!   download what it does not hold) with one warning naming the folder.
//! - Re-downloads of a shard that was cached before are counted; a shard
//!   downloaded [`THRASH_DOWNLOADS`] times marks the cache as thrashing and
//!   logs a warning once.

pub mod blocks;
mod disk;
mod lock;
mod open;
mod room;

/// Makes a FIFO at `path`, as something else sharing the cache folder
/// might: the tests of the folder's files plant them.
#[cfg(all(test, unix))]
fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
}

use crate::metrics::{CacheMetrics, THRASH_DOWNLOADS};
use crate::source::compressed::{Compressed, Fetched};
use crate::source::download::decoded;
use crate::source::spill::{Folder, Written};
use bytes::Bytes;
use disk::{DiskTier, Lookup};
use foyer_common::event::{Event, EventListener};
use foyer_memory::Cache;
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use zephon_core::{Error, Result};

/// Longest wait for another process's hold on an entry being evicted.
const EVICT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The shard cache of one dataset location.
pub struct ShardCache {
    memory: Cache<String, Bytes>,
    disk: Option<DiskTier>,
    dir: PathBuf,
    metrics: Arc<CacheMetrics>,
    /// Downloads per entry, by a 64-bit hash of its key: a process that
    /// streams millions of blocks keeps 16 bytes for each, not its key.
    downloads: Mutex<HashMap<u64, u64>>,
    warned: AtomicBool,
    /// Set once the disk tier failed: from then on only the memory tier serves.
    disk_off: AtomicBool,
    lock_wait: std::time::Duration,
    lock_warned: AtomicBool,
    block_bytes: u64,
    /// Disk-tier reads at once: each maps and checks an entry on a
    /// blocking thread, CPU work once the file is in the page cache, so
    /// more at once than cores only adds threads (each new one costs its
    /// allocator fresh pages to fill), not speed.
    disk_reads: tokio::sync::Semaphore,
}

impl std::fmt::Debug for ShardCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardCache")
            .field("dir", &self.dir)
            .field("disk", &self.disk)
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

impl ShardCache {
    /// Counts a degradation of the disk tier and warns once, naming the folder.
    fn degrade(&self, why: &str) {
        self.metrics.disk_degraded.inc();
        if self.metrics.disk_degraded.get() == 1 {
            tracing::warn!(
                cache = %self.dir.display(),
                "shard cache folder `{}`: {why}",
                self.dir.display()
            );
        }
    }

    /// Turns the disk tier off after an I/O error on it.
    fn disk_error(&self, what: &str, e: &std::io::Error) {
        if !self.disk_off.swap(true, Ordering::Relaxed) {
            self.degrade(&format!(
                "{what} failed ({e}); from now on shards are cached in memory only and \
                 downloaded again when they leave it"
            ));
        }
    }

    fn live_disk(&self) -> Option<&DiskTier> {
        self.disk
            .as_ref()
            .filter(|_| !self.disk_off.load(Ordering::Relaxed))
    }

    /// The folder of the disk tier.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of the disk tier while the tier is on.
    pub(crate) fn live_dir(&self) -> Option<&Path> {
        self.live_disk().map(|_| self.dir.as_path())
    }

    /// The most bytes the disk tier keeps: the configured limit, less when
    /// the filesystem had less room at open; 0 when the disk tier is off.
    ///
    /// ```
    /// use zephon_storage::{CacheOptions, ShardCache, backend::runtime};
    /// let dir = tempfile::tempdir().unwrap();
    /// let opts = CacheOptions::default()
    ///     .root(dir.path())
    ///     .limit_bytes(1 << 20)
    ///     .block_bytes(256 << 10);
    /// let cache = runtime::block_on(ShardCache::open(&opts, "memory://doc", 1000)).unwrap();
    /// assert!(cache.disk_capacity() > 0 && cache.disk_capacity() <= 1 << 20);
    /// assert!(!cache.metrics().snapshot().disk_degraded);
    /// ```
    pub fn disk_capacity(&self) -> u64 {
        self.live_disk().map_or(0, DiskTier::capacity)
    }

    /// The size of the blocks uncompressed shards are cached in.
    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// The memory tier's capacity in bytes.
    pub fn memory_capacity(&self) -> u64 {
        self.memory.capacity() as u64
    }

    /// The bytes the memory tier holds now (keys included).
    pub fn memory_usage(&self) -> u64 {
        self.memory.usage() as u64
    }

    /// The counters.
    pub fn metrics(&self) -> &Arc<CacheMetrics> {
        &self.metrics
    }

    /// Whether `key` is cached in this process's memory tier or published in
    /// the node's disk tier.
    pub fn contains(&self, key: &str) -> bool {
        self.memory.contains(key) || self.live_disk().is_some_and(|d| d.exists(key))
    }

    /// Drops the entry of `key` from both tiers (nothing where neither
    /// holds it): bytes found wrong after they were cached (a shard that
    /// changed, a block its format cannot parse) must not be served again.
    /// The disk entry is removed under its key lock, waited for at most
    /// `lock_wait` and [`EVICT_WAIT`]; past it the entry stays (an eviction
    /// is a clean-up: the caller fails its read either way).
    pub(crate) async fn evict(&self, key: &str) {
        self.memory.remove(key);
        let Some(disk) = self.live_disk().filter(|d| d.exists(key)) else {
            return;
        };
        let wait = self.lock_wait.min(EVICT_WAIT);
        match tokio::time::timeout(wait, disk.lock_key(key)).await {
            Ok(Ok(_guard)) => {
                if let Err(e) = disk.remove(key) {
                    tracing::warn!(cache = %self.dir.display(), error = %e, "cannot remove a cache entry found wrong");
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(cache = %self.dir.display(), error = %e, "cannot lock a cache entry found wrong");
            }
            Err(_) => {}
        }
    }

    /// The shard under `key` if the memory tier holds it, counted as a hit;
    /// `None` otherwise (the disk tier is not consulted). Synchronous, so a
    /// warm read costs a hash lookup rather than a task on the I/O runtime.
    pub fn get_in_memory(&self, key: &str) -> Option<Bytes> {
        let entry = self.memory.get(key)?;
        self.metrics.hits.inc();
        Some(entry.value().clone())
    }

    /// The shard under `key`, running `download` on a miss. Concurrent
    /// callers for one key, in this process or in others sharing the
    /// folder, share one download; a failed download caches nothing and
    /// fails every waiter of this process. With `len`, a disk entry of
    /// another length is damaged, as one failing its checksum is: the
    /// folder is shared with whatever else writes there, and an entry cut
    /// short under a header rewritten to match still passes the checksum.
    pub async fn get_or_download<F, Fut>(
        self: &Arc<Self>,
        key: &str,
        len: Option<u64>,
        context: &str,
        download: F,
    ) -> Result<Bytes>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Bytes>> + Send + 'static,
    {
        let fut = download();
        self.get_or_fetch(
            key,
            len,
            context,
            async move { fut.await.map(Fetched::Bytes) },
        )
        .await
    }

    /// As [`get_or_download`](Self::get_or_download), for a download
    /// that may leave a compressed shard's decode to the cache.
    pub(crate) async fn get_or_fetch(
        self: &Arc<Self>,
        key: &str,
        len: Option<u64>,
        context: &str,
        fut: impl Future<Output = Result<Fetched>> + Send + 'static,
    ) -> Result<Bytes> {
        let leader = Arc::new(AtomicBool::new(false));
        let flag = leader.clone();
        let (this, owned_key) = (self.clone(), key.to_owned());
        let entry = self
            .memory
            .get_or_fetch(key, move || async move {
                this.fetch(&owned_key, len, fut, &flag).await
            })
            .await;
        self.metrics
            .memory_peak_bytes
            .observe(self.memory.usage() as u64);
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
            Err(e) => Err(Error::external(
                context.to_owned(),
                crate::source::backend::error_chain(&e),
            )),
        }
    }

    /// An object of the dataset other than a shard (its manifest, a
    /// sidecar) under `key`, which must name its version: from the disk
    /// tier, or downloaded by `download` and published there, one download
    /// for the processes sharing the folder, as a shard's block is. Not
    /// kept in the memory tier (each is read once per open) and not counted
    /// in the shard counters. With `len`, an entry of another length is
    /// damaged.
    pub(crate) async fn get_or_download_object(
        &self,
        key: &str,
        len: Option<u64>,
        download: impl Future<Output = Result<Bytes>>,
    ) -> Result<Bytes> {
        let downloaded = AtomicBool::new(false);
        let fetched = async move { download.await.map(Fetched::Bytes) };
        self.fetch(key, len, fetched, &downloaded).await
    }

    /// The miss path of one process: the disk tier, else (as the node's one
    /// downloader of `key`) a download published to the disk tier.
    async fn fetch(
        &self,
        key: &str,
        len: Option<u64>,
        download: impl Future<Output = Result<Fetched>>,
        downloaded: &AtomicBool,
    ) -> Result<Bytes> {
        if let Some(b) = self.read_disk(key, len).await {
            return Ok(b);
        }
        let Some(disk) = self.live_disk() else {
            downloaded.store(true, Ordering::Relaxed);
            return decoded(download.await?, &self.metrics).await;
        };
        let guard = match tokio::time::timeout(self.lock_wait, disk.lock_key(key)).await {
            Ok(Ok(g)) => Some(g),
            Ok(Err(e)) => {
                self.disk_error("locking a shard", &e);
                None
            }
            Err(_) => {
                if !self.lock_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        cache = %self.dir.display(),
                        "another process has held a shard's lock in the shard cache folder `{}` \
                         for more than {:?} (cache.lock_wait); downloading it here without caching it on disk",
                        self.dir.display(),
                        self.lock_wait
                    );
                }
                None
            }
        };
        // The previous holder of the lock may have published it.
        if guard.is_some()
            && let Some(b) = self.read_disk(key, len).await
        {
            return Ok(b);
        }
        downloaded.store(true, Ordering::Relaxed);
        let bytes = match download.await? {
            Fetched::Bytes(b) => b,
            Fetched::Decode(c) => {
                if let (Some(_), Some(disk)) = (&guard, self.live_disk())
                    && let Some(mapped) = self.decode_to_disk(disk, key, &c).await?
                {
                    return Ok(mapped);
                }
                return decoded(Fetched::Decode(c), &self.metrics).await;
            }
        };
        if let (Some(_), Some(disk)) = (&guard, self.live_disk()) {
            match disk.publish(key, &bytes).await {
                Ok(p) => {
                    self.metrics.disk_evictions.add(p.evicted);
                    // The memory tier keeps the entry as the file just
                    // written, mapped (page cache: shared with every
                    // process of the node that reads it, given back by the
                    // kernel under pressure), rather than this process's own
                    // copy of the download: a cold pass then held a
                    // memory tier's worth of anonymous memory where a warm
                    // one, reading the same entries from disk, held none.
                    if let Some(mapped) = p.mapped {
                        return Ok(mapped);
                    }
                }
                Err(e) => self.disk_error("writing a shard", &e),
            }
        }
        Ok(bytes)
    }

    /// Decodes `c` straight into the disk tier's entry for `key` and
    /// publishes it (call with the key lock held): the entry mapped, or
    /// `None` when the disk tier failed (it is then turned off, and the
    /// caller decodes elsewhere). A shard that cannot be decoded is an error.
    async fn decode_to_disk(
        &self,
        disk: &DiskTier,
        key: &str,
        c: &Compressed,
    ) -> Result<Option<Bytes>> {
        let started = std::time::Instant::now();
        let (c, room) = (c.clone(), Folder::Cache(&self.dir).room());
        let published = disk
            .publish_written(key, c.want, move |file| c.decode_into(file, room))
            .await;
        self.metrics.decode_time.record(started.elapsed());
        match published {
            Ok(p) => {
                self.metrics.disk_evictions.add(p.evicted);
                Ok(p.mapped)
            }
            Err(Written::Body(e)) => {
                self.metrics.failures.inc();
                Err(e)
            }
            Err(Written::Disk(e)) => {
                self.disk_error("writing a shard", &e);
                Ok(None)
            }
        }
    }

    /// The verified disk entry of `key` (of `len` bytes, when given), if
    /// there is one; a damaged entry is removed (under its key lock) and
    /// reads as a miss.
    async fn read_disk(&self, key: &str, len: Option<u64>) -> Option<Bytes> {
        let disk = self.live_disk()?;
        let _permit = self.disk_reads.acquire().await.ok()?;
        let read = move |d: &DiskTier, k: &str| match d.read(k) {
            Ok(Lookup::Found(b)) if len.is_some_and(|n| n != b.len() as u64) => Ok(Lookup::Corrupt),
            other => other,
        };
        // Reading and hashing a shard is blocking work: off the I/O threads.
        let (d, k) = (disk.clone(), key.to_owned());
        let found = tokio::task::spawn_blocking(move || read(&d, &k))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        match found {
            Ok(Lookup::Found(b)) => Some(b),
            Ok(Lookup::Missing) => None,
            Ok(Lookup::Corrupt) => {
                tracing::warn!(
                    cache = %self.dir.display(),
                    "a damaged entry in the shard cache folder `{}` is dropped and downloaded again",
                    self.dir.display()
                );
                if let Ok(Ok(_g)) = tokio::time::timeout(self.lock_wait, disk.lock_key(key)).await
                    && let Ok(Lookup::Corrupt) = read(disk, key)
                    && let Err(e) = disk.remove(key)
                {
                    self.disk_error("removing a damaged entry", &e);
                }
                None
            }
            Err(e) => {
                self.disk_error("reading a shard", &e);
                None
            }
        }
    }

    fn note_download(&self, key: &str, context: &str) {
        let n = {
            let mut d = self.downloads.lock().unwrap_or_else(|p| p.into_inner());
            let h = {
                use std::hash::{BuildHasher, BuildHasherDefault};
                BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(key)
            };
            let n = d.entry(h).or_insert(0);
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
