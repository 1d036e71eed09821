//! Random access to an uncompressed remote shard through the block cache.
//!
//! The shard is cut into blocks of [`ShardCache::block_bytes`]; a byte
//! range fetches the blocks that cover it, each at most once per read and
//! through the cache, so concurrent readers (in this process or in others
//! sharing the cache folder) share one download per block. Neighbouring
//! ranges that touch the same or adjacent blocks are read as one span.
//!
//! A shard no larger than one block is one block, downloaded whole and
//! checked against the manifest's size and SHA-256. A larger shard's blocks
//! are range reads whose length is checked, and whose bytes are checked
//! against the manifest's [`ChunkSums`](crate::manifest::ChunkSums) where
//! it has them (`zephon build-index` and `zephon prepare` write them; the
//! whole-shard SHA-256 cannot be checked block by block): a block of other
//! bytes is downloaded again, as a failed request is retried, and is an
//! error naming the shard, the block and the chunk once the retries are
//! spent, never cached. Every block, once downloaded, carries a CRC32C in
//! the disk tier that is checked when it is read back.
//!
//! The shard is read at one version: the first read records it (by a stat:
//! its ETag, else its modification time and size), every block request is
//! conditional on it, and blocks are cached under keys that name it, so a
//! shard replaced during a run is an error naming it and both versions,
//! never a mix, and a later run reads the new version's blocks afresh.

use crate::cache::ShardCache;
use crate::error::shard_error;
use crate::format::jsonl::LineIndex;
use crate::manifest::ShardEntry;
use crate::metrics::CacheMetrics;
use crate::source::backend::read::{read_failed, read_version};
use crate::source::backend::version::{self, Version};
use crate::source::backend::{Backend, runtime};
use crate::source::download::download_at;
use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use zephon_core::Result;

/// Blocks of one read downloaded at once.
const BLOCK_PARALLELISM: usize = 16;

/// Blocks read ahead while a shard is indexed from its blocks; each is
/// held in memory until its turn, so this bounds that scan's memory.
const INDEX_READ_AHEAD: usize = 4;

/// How one read is served: its spans, each a byte range of the shard, and
/// the blocks they lie in, in order.
struct Plan {
    spans: Vec<(u64, u64)>,
    wanted: Vec<u64>,
}

/// An uncompressed remote shard read by blocks through the shard cache.
#[derive(Debug)]
pub struct BlockFile {
    dataset: Arc<str>,
    uri: String,
    key: String,
    entry: ShardEntry,
    backend: Backend,
    cache: Arc<ShardCache>,
    metrics: Arc<CacheMetrics>,
    block: u64,
    /// The version the shard is read at, recorded by the first read.
    version: tokio::sync::OnceCell<Version>,
}

impl BlockFile {
    /// The shard `entry` of `backend`, cached under `key` (which names the
    /// shard's URI, size and checksum) in blocks of the cache's block size.
    pub fn new(
        dataset: &str,
        backend: Backend,
        entry: ShardEntry,
        key: &str,
        cache: Arc<ShardCache>,
        metrics: Arc<CacheMetrics>,
    ) -> Self {
        let block = cache.block_bytes();
        if let Some(sums) = &entry.chunks
            && !sums.verifies_blocks_of(block)
            && entry.bytes > block
        {
            tracing::warn!(
                "dataset `{dataset}`, shard `{}`: blocks of {block} bytes hold no whole chunk \
                 of the manifest's {} bytes, so they are checked by their length only; a \
                 block size of {} bytes or a multiple of it verifies every block",
                backend.uri_of(&entry.path),
                sums.bytes,
                sums.bytes
            );
        }
        BlockFile {
            dataset: dataset.into(),
            uri: backend.uri_of(&entry.path),
            key: key.to_owned(),
            block,
            entry,
            backend,
            cache,
            metrics,
            version: tokio::sync::OnceCell::new(),
        }
    }

    /// The version the shard is read at: recorded by a stat on the first
    /// call, the same for every later one.
    pub(crate) async fn version(&self) -> Result<&Version> {
        self.version
            .get_or_try_init(|| async {
                let v = self.backend.version(&self.dataset, &self.entry.path).await;
                v.inspect_err(|_| self.metrics.failures.inc())
            })
            .await
    }

    /// The shard's size in bytes.
    pub fn len(&self) -> u64 {
        self.entry.bytes
    }

    /// Whether the shard is empty.
    pub fn is_empty(&self) -> bool {
        self.entry.bytes == 0
    }

    /// Number of blocks (an empty shard has none).
    pub fn blocks(&self) -> u64 {
        self.entry.bytes.div_ceil(self.block)
    }

    /// The byte range of block `i`.
    fn span(&self, i: u64) -> (u64, u64) {
        let from = i * self.block;
        (from, (from + self.block).min(self.entry.bytes))
    }

    /// The cache key of block `i` of the shard at `version`; it names the
    /// block size, so processes with different sizes sharing a folder never
    /// mix their blocks, and the version, so blocks of a replaced shard are
    /// never served for its new bytes.
    fn block_key(&self, i: u64, version: &Version) -> String {
        format!("{}#{}#block{}#{i}", self.key, version.tag(), self.block)
    }

    /// The key of block `i` once the shard's version is recorded (`None`
    /// before its first read).
    fn known_key(&self, i: u64) -> Option<String> {
        self.version.get().map(|v| self.block_key(i, v))
    }

    /// Whether block `i` is in the memory or the disk tier (false before
    /// the shard's first read records its version: until then no block is
    /// known to be of the version read).
    pub fn is_cached(&self, i: u64) -> bool {
        self.known_key(i).is_some_and(|k| self.cache.contains(&k))
    }

    /// Whether every block holding `ranges` is cached.
    pub fn is_cached_range(&self, ranges: &[(u64, u64)]) -> bool {
        ranges
            .iter()
            .filter(|(from, to)| from < to)
            .all(|&(from, to)| {
                (from / self.block..to.div_ceil(self.block)).all(|i| self.is_cached(i))
            })
    }

    /// Block `i`, from the cache or downloaded into it.
    pub async fn block(self: Arc<Self>, i: u64) -> Result<Bytes> {
        let version = self.version().await?.clone();
        let key = self.block_key(i, &version);
        if let Some(b) = self.cache.get_in_memory(&key) {
            return Ok(b);
        }
        let (from, to) = self.span(i);
        let context = format!(
            "dataset `{}`, shard `{}`, block {i} (bytes {from}..{to})",
            self.dataset, self.uri
        );
        let this = self.clone();
        let v = version.clone();
        self.cache
            .get_or_download(&key, Some(to - from), &context, move || async move {
                let what = format!("block {i} (bytes {from}..{to})");
                let names = (&*this.dataset, this.uri.as_str(), what.as_str());
                let got = this.download_block(i, from, to, &v);
                let expired = || this.metrics.failures.inc();
                this.backend.within(names, 1, got, expired).await
            })
            .await
    }

    /// Drops every cached block of the shard at `version` but block
    /// `except` (the one whose download found the change, cached by no
    /// one, its key lock held by this download): the shard was replaced
    /// during the run, and nothing of the old version is worth keeping.
    async fn evict_version(&self, version: &Version, except: u64) {
        for i in (0..self.blocks()).filter(|&i| i != except) {
            self.cache.evict(&self.block_key(i, version)).await;
        }
    }

    /// Drops the cached blocks holding bytes `from..to` (those of the
    /// version read): their bytes were found wrong (a format could not
    /// parse them), and without a checksum to tell a damaged block from a
    /// damaged shard, the next read downloads them again rather than fail
    /// on the same bytes from the cache.
    pub async fn evict_range(&self, from: u64, to: u64) {
        let Some(v) = self.version.get() else {
            return;
        };
        let to = to.min(self.entry.bytes);
        for i in from / self.block..to.div_ceil(self.block) {
            self.cache.evict(&self.block_key(i, v)).await;
        }
    }

    /// [`evict_range`](BlockFile::evict_range) for each range of
    /// `ranges`, on the storage runtime (the eviction takes the disk
    /// tier's key locks, which need its timers), from any runtime.
    pub async fn evict_ranges(self: &Arc<Self>, ranges: Vec<(u64, u64)>) {
        let this = self.clone();
        let evicted = runtime::spawn(self.uri.clone(), async move {
            for (from, to) in ranges {
                this.evict_range(from, to).await;
            }
            Ok(())
        });
        // An eviction that could not run leaves the entries: the read
        // fails with its own error either way.
        let _ = evicted.await;
    }

    async fn download_block(&self, i: u64, from: u64, to: u64, v: &Version) -> Result<Bytes> {
        if self.blocks() == 1 {
            let (backend, dataset) = (&self.backend, &self.dataset);
            return download_at(backend, dataset, &self.entry, &self.metrics, Some(v)).await;
        }
        let started = Instant::now();
        let fail = |m: String| {
            self.metrics.failures.inc();
            shard_error(
                &self.dataset,
                &self.uri,
                format!("block {i} (bytes {from}..{to}): {m}"),
            )
        };
        let path = &self.entry.path;
        let mut attempt = 0;
        let b = loop {
            let b = match read_version(&self.backend.op, path, from..to, to - from, Some(v)).await {
                Ok(b) => b,
                Err(e) if version::is_changed(&e) => {
                    self.metrics.failures.inc();
                    let what = format!("block {i} (bytes {from}..{to})");
                    let (backend, dataset, uri) = (&self.backend, &self.dataset, &self.uri);
                    let e = read_failed(backend, dataset, uri, path, Some(v), &what, &e).await;
                    self.evict_version(v, i).await;
                    return Err(e);
                }
                Err(e) => return Err(fail(format!("range read failed: {e}"))),
            };
            // A short answer (a body cut off between a proxy and the store)
            // is tried again, as the retry layer tries a failed request.
            if (b.len() as u64) < to - from && self.backend.retry_short(attempt).await {
                attempt += 1;
                continue;
            }
            // Bytes other than the shard's under the asked range (a proxy
            // or a store answering wrongly) are tried again too, and never
            // cached: the download fails before the cache keeps them.
            if b.len() as u64 == to - from
                && let Some(sums) = &self.entry.chunks
                && let Err(m) = sums.verify(from, &b, self.entry.bytes)
            {
                if self.backend.retry_short(attempt).await {
                    attempt += 1;
                    continue;
                }
                return Err(fail(format!(
                    "{m}: the server sent other bytes than the shard's, on every try; \
                     nothing of them was cached"
                )));
            }
            break b;
        };
        if b.len() as u64 > to - from {
            return Err(fail(format!(
                "range read returned more than the {} bytes asked: the server ignored the range",
                to - from
            )));
        }
        if b.len() as u64 != to - from {
            return Err(fail(format!(
                "range read returned {} bytes; is the shard shorter than the manifest's {} bytes?",
                b.len(),
                self.entry.bytes
            )));
        }
        self.metrics.download_time.record(started.elapsed());
        self.metrics.bytes_downloaded.add(b.len() as u64);
        Ok(b)
    }

    /// The bytes of each range `(from, to)` (sorted, within the shard):
    /// ranges within one block are merged into one span (a slice of the
    /// block, no copy), a range across blocks is a span of its own (copied);
    /// every block is fetched once, 16 at a time. Returns each span's start
    /// and bytes, in offset order; a range's bytes lie in the last span
    /// starting at or before it.
    pub async fn read_spans(
        self: Arc<Self>,
        ranges: impl IntoIterator<Item = (u64, u64)>,
    ) -> Result<Vec<(u64, Bytes)>> {
        let plan = self.plan(ranges)?;
        self.read_planned(plan, HashMap::new()).await
    }

    /// The spans `ranges` are read in (see
    /// [`read_spans`](BlockFile::read_spans)) and the blocks they need.
    fn plan(&self, ranges: impl IntoIterator<Item = (u64, u64)>) -> Result<Plan> {
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for (from, to) in ranges {
            if to > self.entry.bytes || from > to {
                return Err(shard_error(
                    &self.dataset,
                    &self.uri,
                    format!(
                        "bytes {from}..{to} lie outside the shard's {} bytes",
                        self.entry.bytes
                    ),
                ));
            }
            let block = |at: u64| at / self.block;
            match spans.last_mut() {
                Some(s) if to <= s.1 => {}
                // Within the one block the span lies in: a slice of that
                // block. A range across blocks is a span of its own, copied
                // alone: merged with its neighbours, the copy would take the
                // gaps between them too (in a shuffled read, a few MB for a
                // few KB of samples).
                Some(s)
                    if from < to
                        && s.0 < s.1
                        && block(s.0) == block(s.1 - 1)
                        && block(from) == block(s.0)
                        && block(to - 1) == block(s.0) =>
                {
                    s.1 = to
                }
                _ => spans.push((from, to)),
            }
        }
        let mut wanted: Vec<u64> = spans
            .iter()
            .filter(|(from, to)| from < to)
            .flat_map(|&(from, to)| from / self.block..to.div_ceil(self.block))
            .collect();
        wanted.dedup();
        Ok(Plan { spans, wanted })
    }

    /// The bytes of the spans of `plan`, of whose blocks `found` holds some
    /// already.
    async fn read_planned(
        self: Arc<Self>,
        plan: Plan,
        mut found: HashMap<u64, Bytes>,
    ) -> Result<Vec<(u64, Bytes)>> {
        let missing: Vec<u64> = plan
            .wanted
            .into_iter()
            .filter(|i| !found.contains_key(i))
            .collect();
        let this = self.clone();
        let fetched: Vec<(u64, Bytes)> = futures::stream::iter(missing)
            .map(|i| {
                let this = this.clone();
                async move { Ok::<_, zephon_core::Error>((i, this.block(i).await?)) }
            })
            .buffered(BLOCK_PARALLELISM)
            .try_collect()
            .await?;
        found.extend(fetched);
        Ok(self.assemble_all(plan.spans, &found))
    }

    fn assemble_all(
        &self,
        spans: Vec<(u64, u64)>,
        blocks: &HashMap<u64, Bytes>,
    ) -> Vec<(u64, Bytes)> {
        spans
            .into_iter()
            .map(|(from, to)| (from, self.assemble(blocks, from, to)))
            .collect()
    }

    /// Bytes `from..to` out of the fetched `blocks` (a slice when one block
    /// holds them, no copy).
    fn assemble(&self, blocks: &HashMap<u64, Bytes>, from: u64, to: u64) -> Bytes {
        if from == to {
            return Bytes::new();
        }
        let (first, last) = (from / self.block, (to - 1) / self.block);
        let part = |i: u64| {
            let start = i * self.block;
            let b = &blocks[&i];
            let lo = from.saturating_sub(start) as usize;
            let hi = ((to - start) as usize).min(b.len());
            b.slice(lo..hi)
        };
        if first == last {
            return part(first);
        }
        let mut out = BytesMut::with_capacity((to - from) as usize);
        for i in first..=last {
            out.extend_from_slice(&part(i));
        }
        out.freeze()
    }

    /// [`read_spans`](BlockFile::read_spans) from any runtime: when the
    /// memory tier holds every block the ranges need, here and at once (one
    /// look-up per block, not per range); otherwise the blocks it lacks are
    /// read on the storage runtime.
    pub async fn fetch_spans(
        self: &Arc<Self>,
        ranges: Vec<(u64, u64)>,
    ) -> Result<Vec<(u64, Bytes)>> {
        let plan = self.plan(ranges)?;
        let mut found = HashMap::with_capacity(plan.wanted.len());
        for &i in &plan.wanted {
            let Some(key) = self.known_key(i) else {
                break;
            };
            match self.cache.get_in_memory(&key) {
                Some(b) => {
                    found.insert(i, b);
                }
                None => break,
            }
        }
        if found.len() == plan.wanted.len() {
            return Ok(self.assemble_all(plan.spans, &found));
        }
        let this = self.clone();
        runtime::spawn(self.uri.clone(), async move {
            this.read_planned(plan, found).await
        })
        .await
    }

    /// Downloads blocks `0 .. n` (those not cached) into the cache, on the
    /// storage runtime; once this future is dropped, no further block is
    /// started.
    pub async fn warm(self: &Arc<Self>, n: u64) -> Result<()> {
        let n = n.min(self.blocks());
        self.warm_blocks((0..n).collect()).await
    }

    /// Downloads `blocks` (those not cached) into the cache, in that order
    /// and a few at a time, on the storage runtime. Once this future is
    /// dropped (a prefetch whose pipeline was dropped) no further block is
    /// started; those under way finish, since other readers may wait on
    /// them. The task it runs on is the runtime's, not the caller's, so
    /// without that the warm-up went on downloading to its end.
    async fn warm_blocks(self: &Arc<Self>, blocks: Vec<u64>) -> Result<()> {
        struct StopOnDrop(Arc<AtomicBool>);
        impl Drop for StopOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let _stop = StopOnDrop(stop.clone());
        let this = self.clone();
        runtime::spawn(self.uri.clone(), async move {
            futures::stream::iter(blocks)
                .take_while(move |_| futures::future::ready(!stop.load(Ordering::Relaxed)))
                .map(|i| this.clone().block(i))
                .buffered(BLOCK_PARALLELISM)
                .try_for_each(|_| futures::future::ready(Ok(())))
                .await
        })
        .await
    }

    /// Downloads into the cache the blocks holding `ranges` (given in the
    /// order they will be read), in that order, on the storage runtime; no
    /// more blocks than a quarter of the cache holds, so a warm-up cannot
    /// evict what it warmed itself. Ranges outside the shard are skipped
    /// (the read reports them).
    pub async fn warm_ranges(self: &Arc<Self>, ranges: Vec<(u64, u64)>) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        let mut wanted: Vec<u64> = ranges
            .iter()
            .filter(|&&(from, to)| from < to && to <= self.entry.bytes)
            .flat_map(|&(from, to)| from / self.block..to.div_ceil(self.block))
            .filter(|&i| seen.insert(i))
            .collect();
        wanted.truncate((self.room() / self.block).max(1) as usize);
        self.warm_blocks(wanted).await
    }

    /// A quarter of the cache's larger tier: what one warm-up may fill.
    fn room(&self) -> u64 {
        self.cache.disk_capacity().max(self.cache.memory_capacity()) / 4
    }

    /// Warms the leading blocks that fit a quarter of the cache (the larger
    /// tier), so that warming never evicts what it warmed before it is read.
    pub async fn warm_share(self: &Arc<Self>) -> Result<()> {
        self.warm(self.room() / self.block).await
    }

    /// Runs `scan` on a blocking thread of the storage runtime with a
    /// [`BlockReader`] over the shard's bytes, its blocks fetched in order
    /// (they enter the cache on the way), a few (4) ahead of the reader:
    /// memory holds those blocks, whatever the shard's size. Blocks after
    /// the point where `scan` stops reading are not downloaded. A block that
    /// fails is the error returned, whatever `scan` made of it.
    pub async fn scan<T: Send + 'static>(
        self: &Arc<Self>,
        scan: impl FnOnce(BlockReader) -> T + Send + 'static,
    ) -> Result<T> {
        let this = self.clone();
        runtime::spawn(self.uri.clone(), async move {
            let (tx, rx) = tokio::sync::mpsc::channel(INDEX_READ_AHEAD);
            let blocks = this.clone();
            let feed = tokio::spawn(async move {
                let mut blocks = futures::stream::iter(0..blocks.blocks())
                    .map(|i| blocks.clone().block(i))
                    .buffered(INDEX_READ_AHEAD);
                while let Some(b) = blocks.next().await {
                    let failed = b.is_err();
                    // A closed channel: the scan is done with the shard.
                    if tx.send(b).await.is_err() || failed {
                        break;
                    }
                }
            });
            let failure = Arc::new(std::sync::Mutex::new(None));
            let reader = BlockReader {
                rx,
                current: Bytes::new(),
                failure: failure.clone(),
            };
            let out = tokio::task::spawn_blocking(move || scan(reader)).await;
            feed.abort();
            if let Some(e) = failure.lock().expect("poisoned").take() {
                return Err(e);
            }
            out.map_err(|e| {
                shard_error(
                    &this.dataset,
                    &this.uri,
                    format!("the scan of its blocks failed: {e}"),
                )
            })
        })
        .await
    }

    /// The line index of a JSONL shard, built by reading its blocks in
    /// order (they enter the cache on the way), on the storage runtime.
    /// Memory holds a few blocks (4) and the index.
    pub async fn line_index(self: &Arc<Self>) -> Result<LineIndex> {
        let this = self.clone();
        runtime::spawn(self.uri.clone(), async move {
            let mut index = LineIndex::open();
            let mut last = None;
            let mut blocks = futures::stream::iter(0..this.blocks())
                .map(|i| {
                    let this = this.clone();
                    async move { Ok::<_, zephon_core::Error>((i, this.block(i).await?)) }
                })
                .buffered(INDEX_READ_AHEAD);
            while let Some((i, b)) = blocks.try_next().await? {
                index
                    .add_newlines(i * this.block, &b)
                    .map_err(|e| e.in_shard(&this.dataset, &this.uri))?;
                last = b.last().copied().or(last);
            }
            Ok(index.closed(this.entry.bytes, last))
        })
        .await
    }
}

/// The bytes of a shard in order, block after block, as
/// [`BlockFile::scan`] hands them to its closure (on a blocking thread:
/// each read waits for its block).
#[derive(Debug)]
pub struct BlockReader {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes>>,
    current: Bytes,
    failure: Arc<std::sync::Mutex<Option<zephon_core::Error>>>,
}

impl std::io::Read for BlockReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => {
                    let message = e.to_string();
                    *self.failure.lock().expect("poisoned") = Some(e);
                    return Err(std::io::Error::other(message));
                }
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        bytes::Buf::advance(&mut self.current, n);
        Ok(n)
    }
}
