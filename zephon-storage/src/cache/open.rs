//! Opening a shard cache: one per folder in a process, its disk tier sized
//! to the room the filesystem has.

use super::disk::{self, DiskTier};
use super::{EvictionCounter, ShardCache};
use crate::metrics::CacheMetrics;
use crate::options::CacheOptions;
use bytes::Bytes;
use foyer_memory::CacheBuilder;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use zephon_core::{Error, Result};

/// Caches open in this process, by folder: two datasets at the same location
/// share one cache rather than two writing the same files.
static OPEN: Mutex<Option<HashMap<PathBuf, Weak<ShardCache>>>> = Mutex::new(None);

impl ShardCache {
    /// Opens (or joins) the cache for dataset `location`, whose largest
    /// entry (a block, or a compressed shard decoded whole) takes
    /// `largest_shard` bytes. Settings out of range
    /// ([`CacheOptions::validate`]) and a disk tier too small for that entry
    /// are configuration errors; a filesystem with less room than the
    /// configured capacity shrinks the disk tier (or turns it off) with a
    /// warning naming the folder.
    pub async fn open(
        opts: &CacheOptions,
        location: &str,
        largest_shard: u64,
    ) -> Result<Arc<Self>> {
        opts.validate()?;
        let largest_shard = largest_shard.max(opts.block_bytes);
        if opts.limit_bytes < largest_shard {
            return Err(Error::config(
                "cache.limit_bytes",
                format!(
                    "{} bytes cannot hold the largest compressed shard of `{location}` decoded \
                     ({largest_shard} bytes), which is cached whole; raise the limit, or store it \
                     uncompressed so that it is cached in blocks",
                    opts.limit_bytes
                ),
            ));
        }
        let dir = opts
            .root
            .join(&crate::manifest::sha256_hex(location.as_bytes())[..16]);
        let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = open
            .as_ref()
            .and_then(|m| m.get(&dir))
            .and_then(Weak::upgrade)
        {
            // Joined after it was opened for less (a dataset's manifest is
            // read through the cache before its largest shard is known):
            // what the first open decides for a shard too large for the
            // disk tier's room, decided now.
            if let Some(d) = c.live_disk()
                && d.capacity() < disk::on_disk(largest_shard + disk::HEADER as u64)
            {
                c.degrade(&format!(
                    "the disk tier has room for {} bytes, not enough for the largest shard \
                     ({largest_shard} bytes); shards are cached in memory only",
                    d.capacity()
                ));
                c.disk_off.store(true, Ordering::Relaxed);
            }
            return Ok(c);
        }
        let cache = Arc::new(Self::build(opts, &dir, largest_shard));
        open.get_or_insert_with(HashMap::new)
            .insert(dir, Arc::downgrade(&cache));
        Ok(cache)
    }

    fn build(opts: &CacheOptions, dir: &Path, largest_shard: u64) -> Self {
        let metrics = Arc::new(CacheMetrics::default());
        let memory = CacheBuilder::new(opts.memory_bytes as usize)
            .with_name("zephon-shards")
            // One shard: entries are blocks of a few MB or whole decoded
            // shards, few and large. With foyer's default of 8, each holds an
            // eighth of the capacity and evicts only its own entries, so a
            // tier of 8 blocks could keep fewer than one per foyer shard.
            .with_shards(1)
            // Values only: a block of `block_bytes` then fits a tier of
            // `block_bytes`, the smallest one validation allows.
            .with_weighter(|_: &String, v: &Bytes| v.len())
            // SIEVE, not foyer's default LRU: LRU pins the entries readers
            // hold, and eviction skips pinned ones, so under concurrent reads
            // the tier overran its capacity by a block or more. SIEVE only
            // marks a read entry as visited.
            .with_eviction_config(foyer_memory::SieveConfig)
            .with_event_listener(Arc::new(EvictionCounter(metrics.clone())))
            .build();
        let cache = ShardCache {
            memory,
            disk: None,
            dir: dir.to_owned(),
            metrics,
            downloads: Mutex::new(HashMap::new()),
            warned: AtomicBool::new(false),
            disk_off: AtomicBool::new(false),
            lock_wait: opts.lock_wait,
            lock_warned: AtomicBool::new(false),
            block_bytes: opts.block_bytes,
            disk_reads: tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 16)),
            ),
        };
        // Room the filesystem can give: what the folder's entries use now
        // plus what is free. Less than the capacity asked for, and the disk
        // tier takes what there is, or nothing when a shard would not fit.
        let room = std::fs::create_dir_all(dir)
            .and_then(|()| disk::used_bytes(dir))
            .and_then(|used| Ok(used + fs4::available_space(dir)?))
            .map_err(|e| e.to_string());
        let capacity = match room {
            Ok(room) if room >= opts.limit_bytes => opts.limit_bytes,
            Ok(room) if room >= disk::on_disk(largest_shard + disk::HEADER as u64) => {
                cache.degrade(&format!(
                    "the filesystem has room for {room} bytes, less than cache.limit_bytes ({}); \
                     the disk tier keeps to {room} bytes",
                    opts.limit_bytes
                ));
                room
            }
            Ok(room) => {
                cache.degrade(&format!(
                    "the filesystem has room for {room} bytes, not enough for the largest shard \
                     ({largest_shard} bytes); shards are cached in memory only"
                ));
                return cache.disk_failed();
            }
            Err(e) => {
                cache.degrade(&format!(
                    "cannot create it or measure its free space ({e}); shards are cached in memory only"
                ));
                return cache.disk_failed();
            }
        };
        ShardCache {
            disk: Some(DiskTier::new(dir, capacity)),
            ..cache
        }
    }

    fn disk_failed(self) -> Self {
        self.disk_off.store(true, Ordering::Relaxed);
        self
    }
}
