//! [`FormatShard`]: a shard of any non-JSONL format, local or remote.

use crate::cache::ShardCache;
use crate::cache::blocks::BlockFile;
use crate::dataset::remote::{CachedShard, Object, read_versioned};
use crate::error::shard_error;
use crate::format::maps::{LocalFile, map_file, read_handle};
use crate::format::tokens::MegatronIndex;
use crate::format::{
    FormatSpec, ShardIndex, open_index, open_index_in_place, open_range_index, warn_once,
};
use crate::manifest::ShardEntry;
use crate::metrics::CacheMetrics;
use crate::source::backend::{Backend, runtime};
use crate::source::download::download_to_temp;
use crate::source::ranges::fetch_spans;
use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::path::Path;
use std::sync::Arc;
use zephon_core::record::PointerChunks;
use zephon_core::runner::{WorkCost, offload, offload_measured};
use zephon_core::{Error, Record, Result, SamplePtr, Shard};

#[derive(Debug)]
enum Source {
    /// The bytes, memory-mapped for the shard's life (a compressed shard
    /// decoded into an unnamed temporary file) or in memory: pages are read
    /// when a sample touches them.
    Local(Bytes),
    /// The file, mapped while it is read (see
    /// [`mapped_files`](crate::local::mapped_files)).
    Mapped(LocalFile),
    /// Whole-shard bytes through the shard cache; the sidecar (small) is read
    /// directly when the index is built.
    Remote {
        shard: Box<CachedShard>,
        backend: Backend,
        sidecar: Option<String>,
    },
    /// Just the bytes of the samples asked for, by range request (token
    /// files); the shard is never downloaded whole.
    Range {
        backend: Backend,
        entry: ShardEntry,
        metrics: Arc<CacheMetrics>,
    },
    /// Just the blocks covering the samples asked for, through the shard
    /// cache (uncompressed token files, Megatron, MDS, Parquet, WebDataset; see
    /// [`blocked`](super::blocked)).
    Blocks {
        file: Arc<BlockFile>,
        backend: Backend,
        entry: ShardEntry,
    },
}

/// A shard of a [`FormatSpec`] other than JSONL: its bytes come from a
/// memory-mapped local file or from the shard cache; the format's
/// [`ShardIndex`] is built once and decodes samples from them.
#[derive(Debug)]
pub struct FormatShard {
    dataset: Arc<str>,
    name: String,
    spec: FormatSpec,
    len: u64,
    source: Source,
    index: tokio::sync::OnceCell<Arc<dyn ShardIndex>>,
    /// What decoding a sample of this shard costs, as measured: a read
    /// that costs less than handing it to the CPU pool decodes in place.
    decode_cost: Arc<WorkCost>,
    /// The content's fingerprint (see [`crate::fingerprint`]), for a
    /// shard whose bytes were read at open.
    fingerprint: Option<u64>,
    /// Where a remote shard's sidecar is cached.
    objects: Option<Arc<ShardCache>>,
}

impl FormatShard {
    /// Opens a local shard (and its sidecar) and indexes it.
    pub fn open_local(
        dataset: &str,
        spec: FormatSpec,
        path: &Path,
        sidecar: Option<&Path>,
    ) -> Result<Self> {
        let name = path.display().to_string();
        let io = |p: &Path| {
            let p = p.display().to_string();
            move |source| Error::Io { path: p, source }
        };
        let (file, data) = LocalFile::open(path).map_err(io(path))?;
        let bad = |m| shard_error(dataset, &name, m);
        // The index keeps no map of its own (an MDS offset table is read in
        // the shard's bytes at each read, a Megatron `.idx` mapped while it
        // is read), so every file of a local shard can be let go between
        // reads: one map a shard held for the dataset's life, a folder of
        // more shards than the kernel maps at once failed to open.
        let index: Arc<dyn ShardIndex> = match (&spec, sidecar) {
            (FormatSpec::Megatron, Some(s)) => {
                let (idx_file, idx) = LocalFile::open(s).map_err(io(s))?;
                let index = MegatronIndex::open(idx, data.len() as u64).map_err(bad)?;
                Arc::new(index.reading_from(idx_file))
            }
            (_, side) => {
                let side = side.map(|s| map_file(s).map_err(io(s))).transpose()?;
                open_index_in_place(&spec, &data, side.as_ref()).map_err(bad)?
            }
        };
        Ok(FormatShard {
            dataset: dataset.into(),
            name,
            spec,
            len: index.len(),
            source: Source::Mapped(file),
            index: tokio::sync::OnceCell::new_with(Some(index)),
            decode_cost: Arc::default(),
            fingerprint: Some(crate::fingerprint::of(&data)),
            objects: None,
        })
    }

    /// The groups its samples are decoded in (a Parquet shard's row
    /// groups, from the footer read at open), without reading the shard
    /// again; `None` for formats without groups, or for a remote shard
    /// whose index is not built yet.
    pub fn group_sizes(&self) -> Option<crate::format::GroupSizes> {
        self.index.get().and_then(|i| i.group_sizes())
    }

    /// A shard whose bytes are already in memory (a decompressed local file).
    pub fn from_bytes(
        dataset: &str,
        spec: FormatSpec,
        name: &str,
        data: Bytes,
        sidecar: Option<Bytes>,
    ) -> Result<Self> {
        let index = open_index_in_place(&spec, &data, sidecar.as_ref())
            .map_err(|m| shard_error(dataset, name, m))?;
        Ok(FormatShard {
            dataset: dataset.into(),
            name: name.to_owned(),
            spec,
            len: index.len(),
            fingerprint: Some(crate::fingerprint::of(&data)),
            source: Source::Local(data),
            index: tokio::sync::OnceCell::new_with(Some(index)),
            decode_cost: Arc::default(),
            objects: None,
        })
    }

    /// A remote shard described by `entry` (its sample count is trusted
    /// until the first read, which checks it).
    pub fn remote(
        dataset: &str,
        spec: FormatSpec,
        backend: Backend,
        entry: ShardEntry,
        cache: Option<Arc<ShardCache>>,
        metrics: Arc<CacheMetrics>,
    ) -> Self {
        let sidecar = entry.index.clone();
        let len = entry.samples;
        let fingerprint = Some(entry.fingerprint());
        let objects = cache.clone();
        let shard = Box::new(CachedShard::new(
            dataset,
            backend.clone(),
            entry,
            cache,
            metrics,
        ));
        FormatShard {
            dataset: dataset.into(),
            name: shard.name().to_owned(),
            spec,
            len,
            source: Source::Remote {
                shard,
                backend,
                sidecar,
            },
            index: tokio::sync::OnceCell::new(),
            decode_cost: Arc::default(),
            fingerprint,
            objects,
        }
    }

    /// A remote shard read by byte range, for formats whose samples can be
    /// read alone (flat token files, Megatron); `None` for other formats.
    /// Its sidecar is read through `objects` where given (the shard's
    /// bytes never are).
    pub fn ranged(
        dataset: &str,
        spec: FormatSpec,
        backend: Backend,
        entry: ShardEntry,
        metrics: Arc<CacheMetrics>,
        objects: Option<Arc<ShardCache>>,
    ) -> Option<Self> {
        if !matches!(spec, FormatSpec::Tokens { .. } | FormatSpec::Megatron) {
            return None;
        }
        Some(FormatShard {
            dataset: dataset.into(),
            name: backend.uri_of(&entry.path),
            spec,
            len: entry.samples,
            fingerprint: Some(entry.fingerprint()),
            source: Source::Range {
                backend,
                entry,
                metrics,
            },
            index: tokio::sync::OnceCell::new(),
            decode_cost: Arc::default(),
            objects,
        })
    }

    /// A remote shard read by blocks through `cache`, for formats whose
    /// samples can be read without the whole shard (flat token files,
    /// Megatron, MDS, Parquet, WebDataset) when the shard is uncompressed; `None`
    /// otherwise.
    pub fn blocks(
        dataset: &str,
        spec: FormatSpec,
        backend: Backend,
        entry: ShardEntry,
        cache: Arc<ShardCache>,
        metrics: Arc<CacheMetrics>,
    ) -> Option<Self> {
        if !(matches!(spec, FormatSpec::Tokens { .. } | FormatSpec::Megatron)
            || crate::format::blocked::indexed_by_blocks(&spec))
            || crate::format::compression::Compression::from_path(&entry.path)
                != crate::format::compression::Compression::None
        {
            return None;
        }
        // The same key a whole-shard entry would have, so blocks name the
        // shard's size and checksum.
        let key = CachedShard::new(
            dataset,
            backend.clone(),
            entry.clone(),
            None,
            metrics.clone(),
        )
        .key()
        .to_owned();
        let objects = Some(cache.clone());
        let file = Arc::new(BlockFile::new(
            dataset,
            backend.clone(),
            entry.clone(),
            &key,
            cache,
            metrics,
        ));
        Some(FormatShard {
            dataset: dataset.into(),
            name: backend.uri_of(&entry.path),
            spec,
            len: entry.samples,
            fingerprint: Some(entry.fingerprint()),
            source: Source::Blocks {
                file,
                backend,
                entry,
            },
            index: tokio::sync::OnceCell::new(),
            decode_cost: Arc::default(),
            objects,
        })
    }

    /// The format.
    pub fn spec(&self) -> &FormatSpec {
        &self.spec
    }

    async fn data(&self) -> Result<Bytes> {
        match &self.source {
            Source::Local(b) => Ok(read_handle(b.clone())),
            Source::Mapped(f) => f.bytes().map(read_handle),
            Source::Remote { shard, .. } => shard.load().await.map(read_handle),
            Source::Range { .. } | Source::Blocks { .. } => Ok(Bytes::new()),
        }
    }

    async fn index(&self, data: &Bytes) -> Result<Arc<dyn ShardIndex>> {
        self.index
            .get_or_try_init(|| async {
                if let Source::Blocks { file, .. } = &self.source
                    && crate::format::blocked::indexed_by_blocks(&self.spec)
                {
                    let index =
                        super::blocked::open_index(&self.spec, file, &self.dataset, &self.name)
                            .await?;
                    if index.len() != self.len {
                        return Err(shard_error(
                            &self.dataset,
                            &self.name,
                            format!(
                                "has {} samples but the manifest says {}",
                                index.len(),
                                self.len
                            ),
                        ));
                    }
                    return Ok(index);
                }
                let (backend, sidecar) = match &self.source {
                    Source::Remote {
                        backend, sidecar, ..
                    } => (backend, sidecar.clone()),
                    Source::Range { backend, entry, .. }
                    | Source::Blocks { backend, entry, .. } => (backend, entry.index.clone()),
                    Source::Local(_) | Source::Mapped(_) => {
                        unreachable!("local shards are indexed when opened")
                    }
                };
                let stored = match &self.source {
                    Source::Range { entry, .. } | Source::Blocks { entry, .. } => Some(entry.bytes),
                    _ => None,
                };
                // The sidecar (a Megatron `.idx`: 12 bytes a sequence and 8
                // a document) is read in place for the shard's life: kept in
                // the cache's disk tier (one download for the processes
                // sharing it), else in a temporary file, and mapped, not in
                // the process's memory.
                let side = match &sidecar {
                    Some(p) => {
                        let (backend, p, dataset) =
                            (backend.clone(), p.clone(), self.dataset.clone());
                        let objects = self.objects.clone();
                        Some(
                            runtime::spawn(backend.uri_of(&p), async move {
                                let uri = backend.uri_of(&p);
                                let fail = |e: String| {
                                    shard_error(&dataset, &uri, format!("cannot read it: {e}"))
                                };
                                if let Some(c) = &objects {
                                    let read = read_versioned(&backend, c, &p, u64::MAX, fail);
                                    if let Object::Bytes(b) = read.await? {
                                        return Ok(b);
                                    }
                                }
                                let spilled =
                                    download_to_temp(&backend, &dataset, &p, None, false).await?;
                                Ok(spilled.bytes)
                            })
                            .await?,
                        )
                    }
                    None => None,
                };
                let (spec, data) = (self.spec.clone(), data.clone());
                let (dataset, name, len) = (self.dataset.clone(), self.name.clone(), self.len);
                offload("fetch", move || {
                    let index = match stored {
                        Some(bytes) => open_range_index(&spec, bytes, side.as_ref())
                            .unwrap_or_else(|| Err("not readable by byte range".into())),
                        None => open_index(&spec, &data, side.as_ref()),
                    }
                    .map_err(|m| shard_error(&dataset, &name, m))?;
                    if index.len() != len {
                        return Err(shard_error(
                            &dataset,
                            &name,
                            format!("has {} samples but the manifest says {len}", index.len()),
                        ));
                    }
                    Ok(index)
                })
                .await?
            })
            .await
            .cloned()
    }
}

impl FormatShard {
    /// Samples close together in the file are fetched by one request (see
    /// [`fetch_spans`]), or, read by blocks, share their blocks (see
    /// [`BlockFile::read_spans`]).
    async fn read_ranges(
        &self,
        index: Arc<dyn ShardIndex>,
        indices: &[u64],
    ) -> Result<Vec<Record>> {
        let range = |i: u64| {
            index
                .byte_range(i)
                .ok_or_else(|| shard_error(&self.dataset, &self.name, "no byte range"))
        };
        let mut wanted = indices.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let mut ranges = wanted.into_iter().map(range).collect::<Result<Vec<_>>>()?;
        ranges.sort_unstable();
        let chunks = match &self.source {
            Source::Range {
                backend,
                entry,
                metrics,
            } => {
                fetch_spans(
                    backend,
                    &entry.path,
                    &self.dataset,
                    &self.name,
                    ranges,
                    metrics,
                )
                .await?
            }
            Source::Blocks { file, .. } => file.fetch_spans(ranges).await?,
            _ => unreachable!("only shards read by range or block read ranges"),
        };
        let (dataset, name, wanted) = (self.dataset.clone(), self.name.clone(), indices.to_vec());
        let decoded = offload_measured("fetch", &self.decode_cost, wanted.len(), move || {
            wanted
                .iter()
                .map(|&i| {
                    let (from, to) = index.byte_range(i).expect("checked above");
                    // The last span starting at or before `from` holds the sample.
                    let k = chunks.partition_point(|(start, _)| *start <= from) - 1;
                    let (start, b) = &chunks[k];
                    index
                        .decode_range(i, &b.slice((from - start) as usize..(to - start) as usize))
                        .map_err(|m| (shard_error(&dataset, &name, m), from, to))
                })
                .collect::<std::result::Result<Vec<_>, _>>()
        })
        .await?;
        match (decoded, &self.source) {
            (Ok(records), _) => Ok(records),
            // Cached blocks a format cannot decode are dropped, so the next
            // run downloads them again (see `BlockFile::evict_range`).
            (Err((e, from, to)), Source::Blocks { file, .. }) => {
                file.evict_ranges(vec![(from, to)]).await;
                Err(e)
            }
            (Err((e, ..)), _) => Err(e),
        }
    }
}

impl FormatShard {
    /// Every sample in `samples` is one of this shard's.
    fn check_samples(&self, mut samples: impl Iterator<Item = u64>) -> Result<()> {
        match samples.find(|&i| i >= self.len) {
            Some(sample) => Err(Error::SampleOutOfRange {
                dataset: self.dataset.to_string(),
                shard: self.name.clone(),
                sample,
                len: self.len,
            }),
            None => Ok(()),
        }
    }
}

impl Shard for FormatShard {
    fn name(&self) -> &str {
        &self.name
    }

    fn fingerprint(&self) -> Option<u64> {
        self.fingerprint
    }

    fn content_checksum(&self) -> Result<Option<u64>> {
        match &self.source {
            Source::Local(data) => Ok(Some(crate::fingerprint::whole(data))),
            Source::Mapped(f) => Ok(Some(crate::fingerprint::whole(&f.bytes()?))),
            // A remote shard's fingerprint is its manifest's checksum.
            _ => Ok(self.fingerprint),
        }
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read_run(&self, start: u64, count: u64) -> BoxFuture<'_, Result<Vec<Record>>> {
        let indices: Vec<u64> = (start..start.saturating_add(count)).collect();
        async move { self.read_indices(&indices).await }.boxed()
    }

    fn read_indices<'a>(&'a self, indices: &'a [u64]) -> BoxFuture<'a, Result<Vec<Record>>> {
        async move {
            self.check_samples(indices.iter().copied())?;
            if let Source::Range { .. } | Source::Blocks { .. } = &self.source {
                let index = self.index(&Bytes::new()).await?;
                if let (Source::Blocks { file, .. }, FormatSpec::Parquet { .. }) =
                    (&self.source, &self.spec)
                {
                    return super::blocked::read_groups(
                        file,
                        index,
                        indices,
                        &self.dataset,
                        &self.name,
                    )
                    .await;
                }
                return self.read_ranges(index, indices).await;
            }
            let data = self.data().await?;
            let index = self.index(&data).await?;
            let (dataset, name, indices) =
                (self.dataset.clone(), self.name.clone(), indices.to_vec());
            offload_measured("fetch", &self.decode_cost, indices.len(), move || {
                let records = index
                    .decode(&data, &indices)
                    .map_err(|m| shard_error(&dataset, &name, m));
                warn_once(index.as_ref(), &dataset, &name);
                records
            })
            .await?
        }
        .boxed()
    }

    /// A shard whose bytes are at hand (local, or cached whole) is decoded
    /// straight into the chunks, each record in its place; one read by
    /// range or by blocks reads as `read_pointers` does.
    fn read_pointer_chunks<'a>(
        &'a self,
        ptrs: &'a [SamplePtr],
        first: usize,
        len: usize,
    ) -> BoxFuture<'a, Result<Vec<Vec<Record>>>> {
        async move {
            if let Source::Range { .. } | Source::Blocks { .. } = &self.source {
                return Ok(vec![self.read_pointers(ptrs).await?]);
            }
            self.check_samples(ptrs.iter().map(|p| p.sample))?;
            let data = self.data().await?;
            let index = self.index(&data).await?;
            let decode =
                move |index: &dyn ShardIndex, ptrs: &[SamplePtr], dataset: &str, name: &str| {
                    let mut out = PointerChunks::new(ptrs, first, len);
                    let records = index
                        .decode_chunks(&data, &mut out)
                        .and_then(|()| out.finish())
                        .map_err(|m| shard_error(dataset, name, m));
                    warn_once(index, dataset, name);
                    records
                };
            if index.cheap_decode() {
                return decode(index.as_ref(), ptrs, &self.dataset, &self.name);
            }
            let (dataset, name, ptrs) = (self.dataset.clone(), self.name.clone(), ptrs.to_vec());
            offload_measured("fetch", &self.decode_cost, ptrs.len(), move || {
                decode(index.as_ref(), &ptrs, &dataset, &name)
            })
            .await?
        }
        .boxed()
    }

    fn warm(&self) -> BoxFuture<'_, Result<()>> {
        match &self.source {
            Source::Local(_) | Source::Mapped(_) => futures::future::ready(Ok(())).boxed(),
            Source::Range { .. } => {
                async move { self.index(&Bytes::new()).await.map(|_| ()) }.boxed()
            }
            Source::Remote { shard, .. } => shard.warm(),
            // A Parquet shard warms the column chunks it reads, not
            // the columns a projection leaves out.
            Source::Blocks { file, .. } => async move {
                let index = self.index(&Bytes::new()).await?;
                match &self.spec {
                    FormatSpec::Parquet { .. } => {
                        file.warm_ranges(crate::format::blocked::all_group_ranges(index.as_ref()))
                            .await
                    }
                    _ => file.warm_share().await,
                }
            }
            .boxed(),
        }
    }

    /// Downloads the blocks of samples `indices` (a shard read by blocks;
    /// nothing otherwise, as [`warm`](Shard::warm) covers whole shards).
    fn warm_samples<'a>(&'a self, indices: &'a [u64]) -> BoxFuture<'a, Result<()>> {
        async move {
            let Source::Blocks { file, .. } = &self.source else {
                return Ok(());
            };
            let index = self.index(&Bytes::new()).await?;
            let wanted: Vec<u64> = indices.iter().copied().filter(|&i| i < self.len).collect();
            file.warm_ranges(crate::format::blocked::sample_ranges(
                index.as_ref(),
                &wanted,
            ))
            .await
        }
        .boxed()
    }

    fn is_warm(&self) -> bool {
        match &self.source {
            Source::Local(_) | Source::Mapped(_) => true,
            Source::Range { .. } => self.index.initialized(),
            Source::Remote { shard, .. } => shard.is_cached(),
            // A Parquet shard is warm when the chunks it reads are: the
            // columns a projection leaves out are never fetched.
            Source::Blocks { file, .. } => match (&self.spec, self.index.get()) {
                (FormatSpec::Parquet { .. }, Some(index)) => {
                    file.is_cached_range(&crate::format::blocked::all_group_ranges(index.as_ref()))
                }
                _ => (0..file.blocks()).all(|i| file.is_cached(i)),
            },
        }
    }
}
