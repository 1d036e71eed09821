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
//! are range reads whose length is checked; the whole-shard SHA-256 cannot
//! be checked block by block. Every block, once downloaded, carries a CRC32C
//! in the disk tier that is checked when it is read back.

use crate::backend::{Backend, runtime};
use crate::cache::ShardCache;
use crate::download::{download, read_to_bytes, shard_error};
use crate::format::jsonl::LineIndex;
use crate::manifest::ShardEntry;
use crate::metrics::CacheMetrics;
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
        BlockFile {
            dataset: dataset.into(),
            uri: backend.uri_of(&entry.path),
            key: key.to_owned(),
            block: cache.block_bytes(),
            entry,
            backend,
            cache,
            metrics,
        }
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

    /// The cache key of block `i`; it names the block size, so processes
    /// with different sizes sharing a folder never mix their blocks.
    fn block_key(&self, i: u64) -> String {
        format!("{}#block{}#{i}", self.key, self.block)
    }

    /// Whether block `i` is in the memory or the disk tier.
    pub fn is_cached(&self, i: u64) -> bool {
        self.cache.contains(&self.block_key(i))
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
        let key = self.block_key(i);
        if let Some(b) = self.cache.get_in_memory(&key) {
            return Ok(b);
        }
        let (from, to) = self.span(i);
        let context = format!(
            "dataset `{}`, shard `{}`, block {i} (bytes {from}..{to})",
            self.dataset, self.uri
        );
        let this = self.clone();
        self.cache
            .get_or_download(&key, Some(to - from), &context, move || async move {
                this.download_block(i, from, to).await
            })
            .await
    }

    async fn download_block(&self, i: u64, from: u64, to: u64) -> Result<Bytes> {
        if self.blocks() == 1 {
            return download(&self.backend, &self.dataset, &self.entry, &self.metrics).await;
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
        let b = read_to_bytes(&self.backend.op, &self.entry.path, from..to, to - from)
            .await
            .map_err(|e| fail(format!("range read failed: {e}")))?;
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
            match self.cache.get_in_memory(&self.block_key(i)) {
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
