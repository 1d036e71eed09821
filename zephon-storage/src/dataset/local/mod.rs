//! Local datasets: every shard file of a folder, in the format its names show.

use crate::dataset::FormatShard;
use crate::format::compression::Compression;
use crate::format::detect::DetectedShard;
use crate::format::jsonl::{LineIndex, parse_indexed};
use crate::format::lines::{each_prefetched, runs};
use crate::format::maps::{self, map_file, read_handle};
use crate::format::{FormatOptions, FormatSpec, OPEN_THREADS};
use crate::options::MANIFEST_LIMIT;
use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::path::Path;
use std::sync::Arc;
use zephon_core::dataset::check_run;
use zephon_core::record::Schema;
use zephon_core::runner::{WorkCost, offload_measured};
use zephon_core::{Dataset, Error, Record, Result, Shard};

mod layout;
pub use crate::format::maps::mapped_files;
pub use layout::detect_local;

/// A JSONL file on local disk, memory-mapped and indexed when opened;
/// reads parse the lines asked for in place, with no copy and no system
/// call per read. The file stays mapped while it is read; past
/// [`mapped_files`] files mapped in the process, the one read longest ago
/// is unmapped and mapped again when next read.
///
/// The mapped pages are the kernel's page cache (counted as `RssFile`, not
/// the process's own `RssAnon`) and are dropped under memory pressure, so
/// memory does not grow with the file, as for the other formats read in
/// place. The shard is the file as it was when opened: lines appended later
/// are not seen. A file truncated while mapped cannot be defended against:
/// reading a line past its new end raises `SIGBUS`, which ends the process
/// instead of returning an error; bytes rewritten in place are parsed as
/// they now are (a broken line is a [`Error::MalformedRecord`]). Shards must
/// not be shortened while a job reads them.
#[derive(Debug)]
pub struct LocalJsonlShard {
    dataset: String,
    name: String,
    file: maps::LocalFile,
    index: Arc<LineIndex>,
    /// Field names its records share.
    names: Arc<Schema>,
    /// What parsing a line of it costs, as measured: a read that costs
    /// less than handing it to the CPU pool (a few short lines) parses in
    /// place.
    parse_cost: Arc<WorkCost>,
    /// The content's fingerprint at open (see [`crate::fingerprint`]).
    fingerprint: u64,
}

impl LocalJsonlShard {
    /// Maps and indexes `path`: opening takes memory for the line offsets
    /// only (about 4 bytes a line), not for the text. An empty line is an
    /// error naming it, at open: it would fail when read, and a file of
    /// newlines took five times its size to index.
    pub fn open(dataset: &str, path: &Path) -> Result<Self> {
        let (file, data) = maps::LocalFile::open(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        let index = LineIndex::build(&data)
            .map_err(|e| e.in_shard(dataset, &path.display().to_string()))?;
        let fingerprint = crate::fingerprint::of(&data);
        drop(data);
        Ok(LocalJsonlShard {
            dataset: dataset.to_owned(),
            name: path.display().to_string(),
            file,
            index: Arc::new(index),
            names: Arc::default(),
            parse_cost: Arc::default(),
            fingerprint,
        })
    }

    /// The line-offset index.
    pub fn index(&self) -> &LineIndex {
        &self.index
    }
}

impl Shard for LocalJsonlShard {
    fn name(&self) -> &str {
        &self.name
    }

    fn fingerprint(&self) -> Option<u64> {
        Some(self.fingerprint)
    }

    fn content_checksum(&self) -> Result<Option<u64>> {
        let data = self.file.bytes()?;
        Ok(Some(crate::fingerprint::whole(&data)))
    }

    fn len(&self) -> u64 {
        self.index.len()
    }

    fn read_run(&self, start: u64, count: u64) -> BoxFuture<'_, Result<Vec<Record>>> {
        if let Err(e) = check_run(&self.dataset, self, start, count) {
            return futures::future::ready(Err(e)).boxed();
        }
        let (file, index, names) = (self.file.clone(), self.index.clone(), self.names.clone());
        let (dataset, name) = (self.dataset.clone(), self.name.clone());
        offload_measured("fetch", &self.parse_cost, count as usize, move || {
            let data = read_handle(file.bytes()?);
            let mut out = Vec::new();
            parse_indexed(
                &data,
                &index,
                start..start + count,
                &names,
                &dataset,
                &name,
                &mut out,
            )?;
            Ok(out)
        })
        .map(|r| r.and_then(|x| x))
        .boxed()
    }

    /// One hand-off to a worker for the whole group: each run of adjacent
    /// lines parsed from the map, in request order, the lines of the run a
    /// few runs on asked of the processor's cache first (a shuffled read's
    /// lines lie anywhere in the shard, each a few cache misses).
    fn read_indices<'a>(&'a self, indices: &'a [u64]) -> BoxFuture<'a, Result<Vec<Record>>> {
        let len = self.len();
        if let Some(&bad) = indices.iter().find(|&&i| i >= len) {
            return futures::future::ready(Err(Error::SampleOutOfRange {
                dataset: self.dataset.clone(),
                shard: self.name.clone(),
                sample: bad,
                len,
            }))
            .boxed();
        }
        let indices = indices.to_vec();
        let (file, index, names) = (self.file.clone(), self.index.clone(), self.names.clone());
        let (dataset, name) = (self.dataset.clone(), self.name.clone());
        offload_measured("fetch", &self.parse_cost, indices.len(), move || {
            let data = read_handle(file.bytes()?);
            let runs = runs(&indices);
            let spans = index.run_spans(&runs);
            let mut out = Vec::with_capacity(indices.len());
            each_prefetched(&data, &spans, |k, _, _| {
                parse_indexed(
                    &data,
                    &index,
                    runs[k].0..runs[k].0 + runs[k].1,
                    &names,
                    &dataset,
                    &name,
                    &mut out,
                )
            })?;
            Ok(out)
        })
        .map(|r| r.and_then(|x| x))
        .boxed()
    }
}

/// Local datasets: `Dataset::from_path(name, dir)`.
pub trait DatasetExt: Sized {
    /// The shards an `index.json` in `dir` lists, in its order and format,
    /// their sizes and sample counts checked against it (as where the
    /// dataset is remote, so it gives the same samples wherever it lies; a
    /// shard changed since the manifest was written is an error); without
    /// one, the shards in `dir` (sorted by path), in the format their names
    /// show (see [`format::detect`](crate::format::detect())): JSONL,
    /// Parquet, Megatron `.bin` + `.idx`, flat token `.bin`, WebDataset
    /// `.tar`, or MDS (a Streaming `index.json`). Shards are found by
    /// [`list_local`](crate::scan::list_local): subfolders included, symlinks
    /// followed, loops an error. Shards are indexed on open so samples are
    /// addressable by position. A missing or unreadable folder, one with no
    /// shards, or one mixing formats is an error naming the path and listing
    /// what it holds.
    ///
    /// Shards are read in place, never copied into the shard cache: every
    /// format from a memory map of the file (pages the kernel can drop, not
    /// the process's own memory; see [`LocalJsonlShard`] for what a file
    /// truncated while mapped does). Memory
    /// therefore does not grow with a shard's size. A compressed shard
    /// (`.zst`, `.gz`) is decoded when the dataset is opened, into an
    /// unnamed file in the temporary folder (`TMPDIR`, which must hold its
    /// decoded size), and mapped the same way.
    ///
    /// ```
    /// use zephon_core::Dataset;
    /// use zephon_storage::DatasetExt;
    /// let dir = std::env::temp_dir().join(format!("zephon-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// std::fs::write(dir.join("a.jsonl"), "{\"text\":\"hi\"}\n{\"text\":\"yo\"}\n").unwrap();
    /// let ds = Dataset::from_path("doc", &dir).unwrap();
    /// assert_eq!(ds.num_samples(), 2);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    fn from_path(name: &str, dir: impl AsRef<Path>) -> Result<Self> {
        Self::from_path_with(name, dir, &FormatOptions::default())
    }

    /// Like [`from_path`](DatasetExt::from_path), with the choices file names
    /// cannot tell (flat token files' `seq_len` and dtype, Parquet columns).
    ///
    /// ```
    /// use zephon_core::Dataset;
    /// use zephon_storage::DatasetExt;
    /// use zephon_storage::format::{FormatOptions, TokenDtype};
    /// let dir = std::env::temp_dir().join(format!("zephon-tok-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let tokens: Vec<u8> = (0u16..100).flat_map(|t| t.to_le_bytes()).collect();
    /// std::fs::write(dir.join("train.bin"), tokens).unwrap();
    /// let opts = FormatOptions::default().seq_len(10).dtype(TokenDtype::U16);
    /// let ds = Dataset::from_path_with("doc", &dir, &opts).unwrap();
    /// assert_eq!(ds.num_samples(), 10);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    fn from_path_with(name: &str, dir: impl AsRef<Path>, opts: &FormatOptions) -> Result<Self>;
}

/// Opens the local folder `dir` as [`DatasetExt::from_path_with`] does,
/// its manifest read up to `manifest_limit` bytes.
pub(crate) fn open_local(
    name: &str,
    dir: &Path,
    opts: &FormatOptions,
    manifest_limit: u64,
) -> Result<Dataset> {
    open_laid_out(name, dir, opts, manifest_limit).map(|(ds, _)| ds)
}

/// Opens the local folder `dir` as [`DatasetExt::from_path_with`] does, and
/// says what it found there: the format and shards [`detect_local`] would
/// give, from the same look at the folder as the dataset (so they describe
/// the very shards opened, even should the folder change meanwhile).
///
/// ```
/// use zephon_storage::format::FormatOptions;
/// use zephon_storage::local::open_local_detected;
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("a.jsonl"), "{\"text\":\"x\"}\n{\"text\":\"y\"}\n").unwrap();
/// let (ds, format, shards) =
///     open_local_detected("doc", dir.path(), &FormatOptions::default()).unwrap();
/// assert_eq!((ds.num_samples(), format.name(), shards.len()), (2, "jsonl", 1));
/// assert_eq!(shards[0].path, "a.jsonl");
/// ```
pub fn open_local_detected(
    name: &str,
    dir: &Path,
    opts: &FormatOptions,
) -> Result<(Dataset, FormatSpec, Vec<DetectedShard>)> {
    let (ds, layout) = open_laid_out(name, dir, opts, MANIFEST_LIMIT)?;
    Ok((ds, layout.format, layout.shards))
}

fn open_laid_out(
    name: &str,
    dir: &Path,
    opts: &FormatOptions,
    manifest_limit: u64,
) -> Result<(Dataset, layout::Layout)> {
    let threads = OPEN_THREADS.check_usize("open_threads", opts.open_threads)?;
    let layout = layout::layout(name, dir, opts, manifest_limit)?;
    let shards = open_all(&layout.shards, threads, |s| {
        open_local_shard(name, dir, &layout.format, s)
    })?;
    if let Some(m) = &layout.followed {
        layout::check_counts(name, dir, m, &shards)?;
    }
    let ds = Dataset::new(name, dir.display().to_string(), shards)?;
    Ok((ds, layout))
}

impl DatasetExt for Dataset {
    fn from_path_with(name: &str, dir: impl AsRef<Path>, opts: &FormatOptions) -> Result<Self> {
        open_local(name, dir.as_ref(), opts, MANIFEST_LIMIT)
    }
}

/// Opens every shard with `open`, on `threads` threads (0: as many as
/// there are cores), no more than there are shards. Opening indexes a
/// shard (a JSONL scan for newlines, a WebDataset walk of its tar headers,
/// a compressed shard's decode), so a large local dataset's open is a pass
/// over all its bytes, which one core would make shard after shard.
/// Threads take the next shard as they finish one, so shards of uneven
/// sizes share out. The shards come back in their order; of several that
/// fail, the first one's error.
fn open_all<S: Sync>(
    found: &[S],
    threads: usize,
    open: impl Fn(&S) -> Result<Arc<dyn Shard>> + Sync,
) -> Result<Vec<Arc<dyn Shard>>> {
    let threads = match threads {
        0 => zephon_core::runner::num_cpus(),
        n => n,
    }
    .min(found.len());
    if threads <= 1 {
        return found.iter().map(open).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut opened: Vec<(usize, Result<Arc<dyn Shard>>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(s) = found.get(i) else { return mine };
                        mine.push((i, open(s)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    opened.sort_unstable_by_key(|(i, _)| *i);
    opened.into_iter().map(|(_, shard)| shard).collect()
}

/// Opens one local shard of `format` found in `dir`.
fn open_local_shard(
    name: &str,
    dir: &Path,
    format: &FormatSpec,
    s: &DetectedShard,
) -> Result<Arc<dyn Shard>> {
    let path = dir.join(&s.path);
    let compression = Compression::from_path(&s.path);
    Ok(if compression != Compression::None {
        let data = decoded_to_disk(name, &path, compression, s.decoded_bytes)?;
        Arc::new(FormatShard::from_bytes(
            name,
            format.clone(),
            &path.display().to_string(),
            data,
            None,
        )?)
    } else if format.is_jsonl() {
        Arc::new(LocalJsonlShard::open(name, &path)?)
    } else {
        let side = s.sidecar.as_ref().map(|(p, _)| dir.join(p));
        Arc::new(FormatShard::open_local(
            name,
            format.clone(),
            &path,
            side.as_deref(),
        )?)
    })
}

/// The compressed shard at `path`, decoded into an unnamed temporary file
/// and mapped ([`crate::source::spill`]), and checked against `want`, the decoded
/// size a followed manifest gives; the compressed file is read through a
/// map too.
fn decoded_to_disk(
    name: &str,
    path: &Path,
    compression: Compression,
    want: Option<u64>,
) -> Result<Bytes> {
    let shown = path.display().to_string();
    let raw = map_file(path).map_err(|source| Error::Io {
        path: shown.clone(),
        source,
    })?;
    crate::source::compressed::Compressed {
        dataset: name.to_owned(),
        uri: shown,
        compression,
        raw,
        want,
        cap: None,
    }
    .decode()
}
