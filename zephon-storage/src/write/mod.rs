//! Writing datasets: [`DatasetWriter`] cuts a stream of documents into
//! shards of a target size (flat token files, Megatron `.bin`/`.idx`, JSON
//! lines, MDS or WebDataset), writes each one whole or not at all, and
//! ends with the `index.json` manifest (samples, bytes, SHA-256 per shard;
//! for MDS, Streaming's own index), so the output opens as a dataset at
//! once, locally or remotely. `zephon
//! prepare` is built on it.
//!
//! **Resumable.** After each shard, a journal (`prepare.json`) records it
//! with its checksum and the input position it ends at. A writer created
//! again on the same destination with the same settings checks the
//! finished shards (a shard that is missing or whose bytes differ is
//! redone, with those after it), and says where the input resumes
//! ([`Resume`]); fed the same documents from there, it writes the same
//! bytes an uninterrupted run writes. A destination that holds anything
//! else is refused.
//!
//! **Memory.** One shard is held while it fills: about
//! [`WriteOptions::shard_bytes`] (a Megatron shard also keeps its ids as
//! `u32` until written).
//!
//! ```
//! use zephon_core::Dataset;
//! use zephon_storage::DatasetExt;
//! use zephon_storage::format::TokenDtype;
//! use zephon_storage::write::{DatasetWriter, WriteFormat, WriteOptions};
//! let dir = std::env::temp_dir().join(format!("zephon-write-doc-{}", std::process::id()));
//! let opts = WriteOptions::new(WriteFormat::Tokens { dtype: TokenDtype::U16, seq_len: 4 })
//!     .shard_bytes(16); // two samples of 4 u16 ids per shard
//! let (mut w, resume) = DatasetWriter::create("doc", dir.to_str().unwrap(), opts)?;
//! assert_eq!(resume.documents, 0);
//! for doc in [vec![1, 2, 3], vec![4, 5, 6, 7, 8], vec![9, 10, 11, 12, 13, 14, 15, 16, 17]] {
//!     w.push_tokens(&doc)?;
//! }
//! let manifest = w.finish()?;
//! assert_eq!(manifest.shards.len(), 3); // 8 + 8 + 1 ids; the last id is no whole sample
//! let ds = Dataset::from_path("doc", &dir)?;
//! assert_eq!(ds.num_samples(), 4);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), zephon_core::Error>(())
//! ```

mod encode;
pub mod journal;
mod samples;

use crate::error::shard_error;
use crate::format::tokens::encode_megatron;
use crate::format::{FormatSpec, TokenDtype};
use crate::manifest::{CHUNK_BYTES, ChunkSums, MANIFEST, Manifest, ShardEntry, sha256_hex};
use crate::options::StorageOptions;
use crate::source::backend::{Backend, runtime};
use journal::{Finished, JOURNAL, Journal, Position, put};
use zephon_core::{Error, Record, Result};

/// Smallest [`WriteOptions::shard_bytes`].
pub const MIN_SHARD_BYTES: u64 = 1;
/// Largest [`WriteOptions::shard_bytes`]: 4 GiB.
pub const MAX_SHARD_BYTES: u64 = 4 << 30;
/// Largest [`WriteOptions::shard_bytes`] of MDS output: 2 GiB, so a shard
/// closed past it still fits MDS's 32-bit offsets.
pub const MAX_MDS_SHARD_BYTES: u64 = 2 << 30;
/// The default [`WriteOptions::shard_bytes`]: 128 MiB.
pub const DEFAULT_SHARD_BYTES: u64 = 128 << 20;

/// What a [`DatasetWriter`] writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteFormat {
    /// Flat token files (nanoGPT's `train.bin`): the documents' ids back to
    /// back, cut into samples of `seq_len` ids by the reader. Documents run
    /// on across shards, and every shard but the last holds whole samples,
    /// so no id is lost at a shard's end; ids after the last whole sample
    /// are written but read as no sample.
    Tokens {
        /// Width of one id.
        dtype: TokenDtype,
        /// Ids per sample (1 to 2^24).
        seq_len: u64,
    },
    /// Megatron-LM indexed datasets: one sequence per document, a `.bin`
    /// and an `.idx` per shard.
    Megatron {
        /// Width of one id: `u8`, `u16`, `i32` or `i64` (Megatron has no `u32`).
        dtype: TokenDtype,
    },
    /// JSON lines, one record per line.
    Jsonl {
        /// The fields written, in this order (all of each record's when `None`).
        fields: Option<Vec<String>>,
    },
    /// MosaicML Streaming's MDS shards with Streaming's own `index.json`
    /// (version 2), so Streaming's `StreamingDataset` reads them too.
    /// Every record must have the same fields, of the same types.
    Mds {
        /// The columns; by default the first record's fields, sorted by
        /// name: text `str`, integers `int64`, floats `float64`, bytes
        /// `bytes`, booleans, nulls and JSON `json`.
        columns: Option<Vec<crate::format::mds::MdsColumn>>,
    },
    /// WebDataset tars: a record's fields become members `KEY.FIELD` (text
    /// as UTF-8, numbers in decimal, JSON serialized, bytes as they are),
    /// the key its `__key__` or the document's number.
    WebDataset,
}

impl WriteFormat {
    /// The narrowest id width for a vocabulary of `vocab` ids: `u16` up to
    /// 65,536 ids, else `u32` (`i32` for Megatron).
    ///
    /// ```
    /// use zephon_storage::format::TokenDtype;
    /// use zephon_storage::write::WriteFormat;
    /// assert_eq!(WriteFormat::dtype_for_vocab(50_257, false), TokenDtype::U16);
    /// assert_eq!(WriteFormat::dtype_for_vocab(128_256, true), TokenDtype::I32);
    /// ```
    pub fn dtype_for_vocab(vocab: u64, megatron: bool) -> TokenDtype {
        match (vocab <= 1 << 16, megatron) {
            (true, _) => TokenDtype::U16,
            (false, false) => TokenDtype::U32,
            (false, true) => TokenDtype::I32,
        }
    }

    fn spec(&self) -> FormatSpec {
        match self {
            WriteFormat::Tokens { dtype, seq_len } => FormatSpec::Tokens {
                dtype: *dtype,
                seq_len: *seq_len,
            },
            WriteFormat::Megatron { .. } => FormatSpec::Megatron,
            WriteFormat::Jsonl { .. } => FormatSpec::Jsonl,
            WriteFormat::Mds { columns } => FormatSpec::Mds {
                columns: columns.clone().unwrap_or_default(),
            },
            WriteFormat::WebDataset => FormatSpec::WebDataset,
        }
    }
}

/// A [`DatasetWriter`]'s settings.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// The output's format.
    pub format: WriteFormat,
    /// Target bytes per shard (1 to 4 GiB; default 128 MiB): a shard is
    /// closed at the first document boundary at or past it (flat token
    /// files: at the last whole sample within it, at least one sample).
    pub shard_bytes: u64,
    /// Also close a shard after this many samples (documents or records;
    /// at least 1), if given. Not used by flat token files.
    pub shard_samples: Option<u64>,
    /// Compress each JSON lines or MDS shard with Zstandard at this level
    /// (1 to 19), if given: `.jsonl.zst`, MDS's `.mds.zstd`. The shard size
    /// targets count the bytes before compression.
    pub zstd: Option<i32>,
    /// What produces the documents (source, tokenizer, filters), as text:
    /// recorded in the journal, and a resume under other settings is
    /// refused, naming both.
    pub settings: String,
    /// Options for the destination's backend (endpoint, credentials, retries).
    pub storage: StorageOptions,
}

impl WriteOptions {
    /// Defaults for `format`.
    pub fn new(format: WriteFormat) -> Self {
        WriteOptions {
            format,
            shard_bytes: DEFAULT_SHARD_BYTES,
            shard_samples: None,
            zstd: None,
            settings: String::new(),
            storage: StorageOptions::default(),
        }
    }

    /// Sets [`shard_bytes`](Self::shard_bytes).
    pub fn shard_bytes(mut self, n: u64) -> Self {
        self.shard_bytes = n;
        self
    }

    /// Sets [`shard_samples`](Self::shard_samples).
    pub fn shard_samples(mut self, n: u64) -> Self {
        self.shard_samples = Some(n);
        self
    }

    /// Sets [`settings`](Self::settings).
    pub fn settings(mut self, s: impl Into<String>) -> Self {
        self.settings = s.into();
        self
    }

    fn check(&self) -> Result<()> {
        if !(MIN_SHARD_BYTES..=MAX_SHARD_BYTES).contains(&self.shard_bytes) {
            return Err(Error::config(
                "shard_bytes",
                format!("{} is outside 1 to {MAX_SHARD_BYTES}", self.shard_bytes),
            ));
        }
        match (self.zstd, &self.format) {
            (None, _) => {}
            (Some(level), WriteFormat::Jsonl { .. } | WriteFormat::Mds { .. }) => {
                if !(1..=19).contains(&level) {
                    return Err(Error::config(
                        "zstd",
                        format!("level {level} is outside 1 to 19"),
                    ));
                }
            }
            (Some(_), _) => {
                return Err(Error::config(
                    "zstd",
                    "only JSON lines and MDS shards are written compressed",
                ));
            }
        }
        if self.shard_samples == Some(0) {
            return Err(Error::config("shard_samples", "must be at least 1"));
        }
        match &self.format {
            WriteFormat::Tokens { seq_len, .. } if !(1..=1 << 24).contains(seq_len) => Err(
                Error::config("seq_len", format!("{seq_len} is outside 1 to {}", 1 << 24)),
            ),
            WriteFormat::Mds { .. } if self.shard_bytes > MAX_MDS_SHARD_BYTES => {
                Err(Error::config(
                    "shard_bytes",
                    format!(
                        "{} is more than an MDS shard's {MAX_MDS_SHARD_BYTES} (its offsets are u32)",
                        self.shard_bytes
                    ),
                ))
            }
            WriteFormat::Megatron {
                dtype: TokenDtype::U32,
            } => Err(Error::config(
                "dtype",
                "Megatron has no u32 ids: use i32 (or u16 for vocabularies up to 65,536)",
            )),
            _ => Ok(()),
        }
    }

    /// The journal's record of these settings.
    fn fingerprint(&self) -> String {
        format!(
            "{} shard_bytes={} shard_samples={:?} zstd={:?} format={:?}",
            self.settings, self.shard_bytes, self.shard_samples, self.zstd, self.format
        )
    }
}

/// Where a [`DatasetWriter`] resumes: skip this much of the input, then
/// push the rest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resume {
    /// Documents already written: push from the next one. (A document
    /// partly written to a flat token file is pushed whole; the writer
    /// drops what it already holds.)
    pub documents: u64,
    /// Shards kept, each checked against its checksum.
    pub shards: usize,
    /// Whether the output was already whole (its manifest written).
    pub complete: bool,
    /// A finished shard that was missing or changed, and was redone with
    /// those after it.
    pub redone: Option<String>,
}

/// The shard being filled.
#[derive(Default)]
struct Filling {
    /// Encoded bytes (flat tokens, JSON lines).
    bytes: Vec<u8>,
    /// Megatron documents.
    docs: Vec<Vec<u32>>,
    /// Megatron ids in it, or MDS bytes.
    ids: u64,
    /// MDS samples, each its columns' bytes.
    mds: Vec<Vec<Vec<u8>>>,
    /// The WebDataset tar being built.
    tar: Option<tar::Builder<Vec<u8>>>,
    /// Samples in it.
    samples: u64,
}

impl std::fmt::Debug for Filling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filling")
            .field("samples", &self.samples)
            .finish_non_exhaustive()
    }
}

/// Writes a dataset; see the [module docs](self).
#[derive(Debug)]
pub struct DatasetWriter {
    backend: Backend,
    dataset: String,
    opts: WriteOptions,
    journal: Journal,
    filling: Filling,
    /// Documents pushed so far, counting those a resume skipped.
    documents: u64,
    /// Ids of the next document already written (a resumed flat token file).
    skip_ids: u64,
}

impl DatasetWriter {
    /// Opens `dest` (a local folder, made if missing, or any URI the
    /// project writes: `s3://`, `gs://`, `azblob://`) and finds where it
    /// stands: empty (a fresh start), holding this writer's journal under
    /// the same settings (a resume), or anything else (an error naming
    /// it). `dataset` names the output in errors.
    pub fn create(dataset: &str, dest: &str, opts: WriteOptions) -> Result<(Self, Resume)> {
        opts.check()?;
        if let Some(dir) = crate::dataset::open::local_dir(dest) {
            std::fs::create_dir_all(&dir)
                .map_err(|e| shard_error(dataset, dest, format!("cannot make the folder: {e}")))?;
        }
        let backend = Backend::open(dataset, dest, &opts.storage)?;
        if !backend.can_list {
            return Err(shard_error(
                dataset,
                dest,
                "cannot be written: give a local folder or an object store (s3://, gs://, azblob://)",
            ));
        }
        // What a killed run was writing is rewritten whole, under a fresh
        // temporary, so its leftovers only take room.
        if let Ok(entries) = runtime::block_on(backend.op.list("")) {
            for e in entries.iter().filter(|e| e.path().ends_with(".partial")) {
                let _ = runtime::block_on(backend.op.delete(e.path()));
            }
        }
        let settings = opts.fingerprint();
        let fresh = Journal {
            version: 1,
            settings: settings.clone(),
            format: opts.format.spec(),
            shards: Vec::new(),
            complete: false,
        };
        let mut resume = Resume::default();
        let journal = match Journal::read(&backend, dataset)? {
            None => {
                let entries = runtime::block_on(backend.op.list("")).map_err(|e| {
                    shard_error(dataset, dest, format!("cannot list the destination: {e}"))
                })?;
                if let Some(other) = entries.iter().find(|e| {
                    // A killed run's half-written file is its own to redo.
                    !matches!(e.path(), "" | "/") && !e.path().ends_with(".partial")
                }) {
                    return Err(shard_error(
                        dataset,
                        &backend.uri_of(other.path()),
                        format!(
                            "the destination is not empty and holds no {JOURNAL} of an \
                             earlier run: give an empty or new folder"
                        ),
                    ));
                }
                // The journal exists before the first shard does: a run
                // killed after a shard's rename but before the journal
                // listed it leaves a destination this writer recognises as
                // its own (the unlisted shard is written again), never one
                // that looks foreign.
                fresh.write(&backend, dataset)?;
                fresh
            }
            Some(j) if j.settings != settings => {
                return Err(shard_error(
                    dataset,
                    &backend.uri_of(JOURNAL),
                    format!(
                        "the destination holds the output of other settings ({}); this run's \
                         are ({settings}): give another destination, or the same settings",
                        j.settings
                    ),
                ));
            }
            Some(mut j) => {
                let kept = checked_prefix(&backend, &j.shards);
                if kept < j.shards.len() {
                    resume.redone = Some(j.shards[kept].entry.path.clone());
                    j.shards.truncate(kept);
                    j.complete = false;
                }
                resume.complete = j.complete;
                j
            }
        };
        let end = journal.shards.last().map(|f| f.end).unwrap_or_default();
        resume.documents = end.documents;
        resume.shards = journal.shards.len();
        Ok((
            DatasetWriter {
                backend,
                dataset: dataset.to_owned(),
                opts,
                journal,
                filling: Filling::default(),
                documents: end.documents,
                skip_ids: end.tokens,
            },
            resume,
        ))
    }

    /// The destination's URI.
    pub fn uri(&self) -> &str {
        &self.backend.uri
    }

    /// Shards finished so far.
    pub fn shards(&self) -> &[Finished] {
        &self.journal.shards
    }

    /// Appends one document's token ids (flat token files and Megatron).
    pub fn push_tokens(&mut self, ids: &[u32]) -> Result<()> {
        if self.journal.complete {
            return Err(self.misuse("the output is already whole"));
        }
        match self.opts.format.clone() {
            WriteFormat::Tokens { dtype, seq_len } => {
                let skip = std::mem::take(&mut self.skip_ids);
                let Some(mut rest) = ids.get(skip as usize..) else {
                    return Err(self.changed(format!(
                        "has {} ids, fewer than the {skip} the journal says were written",
                        ids.len()
                    )));
                };
                let mut written = skip;
                let per_shard = (self.opts.shard_bytes / (dtype.size() as u64 * seq_len)).max(1)
                    * seq_len
                    * dtype.size() as u64;
                while !rest.is_empty() {
                    let room = (per_shard - self.filling.bytes.len() as u64) / dtype.size() as u64;
                    let take = rest.len().min(room as usize);
                    dtype
                        .encode(&rest[..take], &mut self.filling.bytes)
                        .map_err(|e| self.changed(e))?;
                    rest = &rest[take..];
                    written += take as u64;
                    if self.filling.bytes.len() as u64 == per_shard {
                        let end = if rest.is_empty() {
                            Position {
                                documents: self.documents + 1,
                                tokens: 0,
                            }
                        } else {
                            Position {
                                documents: self.documents,
                                tokens: written,
                            }
                        };
                        self.close(end)?;
                    }
                }
                self.documents += 1;
            }
            WriteFormat::Megatron { dtype } => {
                self.filling.docs.push(ids.to_vec());
                self.filling.ids += ids.len() as u64;
                self.filling.samples += 1;
                self.documents += 1;
                self.close_if_full(self.filling.ids * dtype.size() as u64)?;
            }
            WriteFormat::Jsonl { .. } | WriteFormat::Mds { .. } | WriteFormat::WebDataset => {
                return Err(self.misuse("this output takes records (push_record)"));
            }
        }
        Ok(())
    }

    /// Appends one record (JSON lines, MDS and WebDataset output).
    pub fn push_record(&mut self, record: &Record) -> Result<()> {
        if self.journal.complete {
            return Err(self.misuse("the output is already whole"));
        }
        let doc = self.documents;
        let named = |e: String| {
            shard_error(
                &self.dataset,
                &self.backend.uri,
                format!("document {doc}: {e}"),
            )
        };
        let size = match &self.opts.format {
            WriteFormat::Jsonl { fields } => {
                encode::json_line(record, fields.as_deref(), &mut self.filling.bytes)
                    .map_err(named)?;
                self.filling.bytes.len() as u64
            }
            WriteFormat::Mds { .. } => {
                if let FormatSpec::Mds { columns } = &mut self.journal.format
                    && columns.is_empty()
                {
                    *columns = samples::mds_columns(record).map_err(named)?;
                }
                let FormatSpec::Mds { columns } = &self.journal.format else {
                    unreachable!("an MDS output's journal is MDS")
                };
                let sample = samples::mds_sample(columns, record).map_err(named)?;
                self.filling.ids += sample.iter().map(|c| c.len() as u64 + 4).sum::<u64>() + 4;
                self.filling.mds.push(sample);
                self.filling.ids
            }
            WriteFormat::WebDataset => {
                let tar = self
                    .filling
                    .tar
                    .get_or_insert_with(|| tar::Builder::new(Vec::new()));
                samples::tar_sample(tar, record, doc).map_err(named)?;
                tar.get_ref().len() as u64
            }
            WriteFormat::Tokens { .. } | WriteFormat::Megatron { .. } => {
                return Err(self.misuse("a token output takes token ids (push_tokens)"));
            }
        };
        self.filling.samples += 1;
        self.documents += 1;
        self.close_if_full(size)
    }

    /// Writes what is left as the last shard, then the manifest, and
    /// returns the manifest. An output that was already whole is left as
    /// it is.
    pub fn finish(mut self) -> Result<Manifest> {
        if !self.journal.complete {
            if self.filling.samples > 0 || !self.filling.bytes.is_empty() {
                let end = Position {
                    documents: self.documents,
                    tokens: 0,
                };
                self.close(end)?;
            }
            let manifest = self.manifest();
            let index = match &manifest.format {
                // Streaming's own index, which this project reads as well.
                FormatSpec::Mds { columns } => {
                    samples::streaming_index(columns, &self.journal.shards)
                }
                _ => manifest.to_json().into_bytes(),
            };
            put(&self.backend, &self.dataset, MANIFEST, index)?;
            self.journal.complete = true;
            self.journal.write(&self.backend, &self.dataset)?;
        }
        Ok(self.manifest())
    }

    /// The manifest of the shards finished so far.
    fn manifest(&self) -> Manifest {
        let mut manifest = Manifest::new(
            self.journal
                .shards
                .iter()
                .map(|f| f.entry.clone())
                .collect(),
        );
        manifest.format = self.journal.format.clone();
        manifest
    }

    fn close_if_full(&mut self, bytes: u64) -> Result<()> {
        let full = bytes >= self.opts.shard_bytes
            || self
                .opts
                .shard_samples
                .is_some_and(|n| self.filling.samples >= n);
        if full {
            self.close(Position {
                documents: self.documents,
                tokens: 0,
            })?;
        }
        Ok(())
    }

    /// Writes the filling shard, then the journal that lists it.
    fn close(&mut self, end: Position) -> Result<()> {
        let n = self.journal.shards.len();
        let filling = std::mem::take(&mut self.filling);
        let (path, data, index) = match &self.opts.format {
            WriteFormat::Tokens { dtype, seq_len } => {
                let samples = filling.bytes.len() as u64 / (dtype.size() as u64 * seq_len);
                (format!("part-{n:05}.bin"), (filling.bytes, samples), None)
            }
            WriteFormat::Megatron { dtype } => {
                let (bin, idx) = encode_megatron(&filling.docs, *dtype).map_err(|e| {
                    shard_error(&self.dataset, &self.backend.uri, format!("shard {n}: {e}"))
                })?;
                let samples = filling.docs.len() as u64;
                (
                    format!("part-{n:05}.bin"),
                    (bin, samples),
                    Some((format!("part-{n:05}.idx"), idx)),
                )
            }
            WriteFormat::Jsonl { .. } => (
                format!("part-{n:05}.jsonl"),
                (filling.bytes, filling.samples),
                None,
            ),
            WriteFormat::Mds { .. } => {
                let FormatSpec::Mds { columns } = &self.journal.format else {
                    unreachable!("an MDS output's journal is MDS")
                };
                (
                    format!("shard.{n:05}.mds"),
                    (
                        crate::format::mds::encode_shard(columns, &filling.mds),
                        filling.samples,
                    ),
                    None,
                )
            }
            WriteFormat::WebDataset => {
                let tar = filling.tar.unwrap_or_else(|| tar::Builder::new(Vec::new()));
                let bytes = tar.into_inner().map_err(|e| {
                    shard_error(&self.dataset, &self.backend.uri, format!("shard {n}: {e}"))
                })?;
                (format!("part-{n:05}.tar"), (bytes, filling.samples), None)
            }
        };
        let (mut data, samples) = data;
        let mut path = path;
        let raw = data.len() as u64;
        if let Some(level) = self.opts.zstd {
            data = zstd::bulk::compress(&data, level).map_err(|e| {
                shard_error(
                    &self.dataset,
                    &self.backend.uri,
                    format!("shard {n}: cannot compress: {e}"),
                )
            })?;
            path.push_str(match self.opts.format {
                WriteFormat::Mds { .. } => ".zstd",
                _ => ".zst",
            });
        }
        let mut entry = ShardEntry::new(path.clone(), samples, data.len() as u64);
        if self.opts.zstd.is_some() {
            entry.uncompressed_bytes = Some(raw);
        } else {
            // What a remote reader verifies each block against.
            entry.chunks = Some(ChunkSums::of(&data, CHUNK_BYTES));
        }
        entry.sha256 = Some(sha256_hex(&data));
        let mut index_sha256 = None;
        if let Some((idx_path, idx)) = index {
            index_sha256 = Some(sha256_hex(&idx));
            put(&self.backend, &self.dataset, &idx_path, idx)?;
            entry.index = Some(idx_path);
        }
        put(&self.backend, &self.dataset, &path, data)?;
        self.journal.shards.push(Finished {
            entry,
            index_sha256,
            end,
        });
        self.journal.write(&self.backend, &self.dataset)
    }

    fn misuse(&self, why: &str) -> Error {
        shard_error(&self.dataset, &self.backend.uri, why.to_owned())
    }

    fn changed(&self, why: impl std::fmt::Display) -> Error {
        shard_error(
            &self.dataset,
            &self.backend.uri,
            format!(
                "document {} {why}: is the input the one the journal was written from?",
                self.documents
            ),
        )
    }
}

/// How many of `shards`, from the first, are in place with the bytes the
/// journal recorded.
fn checked_prefix(backend: &Backend, shards: &[Finished]) -> usize {
    let same = |path: &str, sha: &Option<String>| {
        runtime::block_on(backend.op.read(path))
            .ok()
            .is_some_and(|b| Some(sha256_hex(&b.to_vec())) == *sha)
    };
    shards
        .iter()
        .take_while(|f| {
            same(&f.entry.path, &f.entry.sha256)
                && f.entry
                    .index
                    .as_ref()
                    .is_none_or(|i| same(i, &f.index_sha256))
        })
        .count()
}
