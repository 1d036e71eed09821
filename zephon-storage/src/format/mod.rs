//! Shard formats.
//!
//! JSONL has its own line-indexed readers ([`jsonl`]). Every other format
//! plugs in through one small abstraction: given a shard's bytes (and its
//! sidecar, for formats that have one), [`open_index`] builds a
//! [`ShardIndex`]: the sample count and what is needed to decode sample `i`
//! from the same bytes later. Because a format only ever sees bytes, it works
//! the same on local files (memory-mapped), through the shard cache and over
//! every backend.
//!
//! | format | files | a sample is |
//! |---|---|---|
//! | [`FormatSpec::Jsonl`] | `*.jsonl`, `*.jsonl.zst`, `*.jsonl.gz` | one line |
//! | [`FormatSpec::Parquet`] | `*.parquet` | one row |
//! | [`FormatSpec::Megatron`] | `x.bin` + `x.idx` | one sequence (`tokens`) |
//! | [`FormatSpec::Tokens`] | `*.bin` (no `.idx`) | `seq_len` tokens (`tokens`) |
//! | [`FormatSpec::Mds`] | `index.json` + `shard.*.mds[.zstd]` | one MDS sample |
//! | [`FormatSpec::WebDataset`] | `*.tar` | the members sharing a key |

pub mod blocked;
pub mod compression;
pub mod detect;
pub mod jsonl;
pub(crate) mod lines;
pub(crate) mod maps;
pub mod mds;
#[cfg(feature = "parquet")]
pub mod parquet;
pub mod text;
pub mod tokens;
pub mod webdataset;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use zephon_core::Record;
use zephon_core::record::PointerChunks;

pub use detect::{Detected, detect};
pub use tokens::TokenDtype;

/// What went wrong inside a shard; the shard reader wraps it in an error
/// naming the dataset and the shard.
pub type FormatResult<T> = std::result::Result<T, String>;

/// The format of a dataset's shards, with what reading it needs. Stored in
/// the manifest (`"format": {"kind": ...}`); a manifest without one is JSONL.
///
/// ```
/// use zephon_storage::format::{FormatSpec, TokenDtype};
/// let spec = FormatSpec::Tokens { dtype: TokenDtype::U16, seq_len: 1024 };
/// let json = serde_json::to_string(&spec).unwrap();
/// assert_eq!(json, r#"{"kind":"tokens","dtype":"u16","seq_len":1024}"#);
/// assert_eq!(serde_json::from_str::<FormatSpec>(&json).unwrap(), spec);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum FormatSpec {
    /// JSON lines.
    #[default]
    Jsonl,
    /// Apache Parquet: rows are samples, columns are fields.
    Parquet {
        /// Only these columns are decoded (all when `None`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        columns: Option<Vec<String>>,
    },
    /// Megatron-LM's indexed dataset: `.bin` tokens with an `.idx` sidecar
    /// (the shard entry's `index`).
    Megatron,
    /// A flat file of token ids (nanoGPT's `train.bin`), cut into samples of
    /// `seq_len` tokens; a trailing partial sample is dropped.
    Tokens {
        /// Width of one token id.
        dtype: TokenDtype,
        /// Tokens per sample.
        seq_len: u64,
    },
    /// MosaicML Streaming's MDS shards.
    Mds {
        /// The shards' columns, in the order they are stored.
        columns: Vec<mds::MdsColumn>,
    },
    /// WebDataset tar shards.
    #[serde(rename = "webdataset")]
    WebDataset,
}

impl FormatSpec {
    /// A short name: `jsonl`, `parquet`, `megatron`, `tokens`, `mds`, `webdataset`.
    pub fn name(&self) -> &'static str {
        match self {
            FormatSpec::Jsonl => "jsonl",
            FormatSpec::Parquet { .. } => "parquet",
            FormatSpec::Megatron => "megatron",
            FormatSpec::Tokens { .. } => "tokens",
            FormatSpec::Mds { .. } => "mds",
            FormatSpec::WebDataset => "webdataset",
        }
    }

    /// Whether this is JSONL (the format a manifest without `format` has).
    pub fn is_jsonl(&self) -> bool {
        matches!(self, FormatSpec::Jsonl)
    }
}

/// Format choices that file names cannot tell: how flat token files are cut
/// and which Parquet columns to read.
///
/// ```
/// use zephon_storage::format::{FormatOptions, TokenDtype};
/// let o = FormatOptions::default().seq_len(2048).dtype(TokenDtype::U32);
/// assert_eq!((o.seq_len, o.dtype), (2048, TokenDtype::U32));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatOptions {
    /// Tokens per sample of flat token files, in
    /// [`SEQ_LEN`](zephon_core::settings::SEQ_LEN) (1 to 16 Mi; default
    /// 1024, nanoGPT's block size), checked when a dataset opens.
    pub seq_len: u64,
    /// Token width of flat token files (default `u16`, as nanoGPT writes them).
    pub dtype: TokenDtype,
    /// Parquet columns to decode (default: all).
    pub columns: Option<Vec<String>>,
    /// Threads that open and index a local dataset's shards, in
    /// [`OPEN_THREADS`]; 0 (the default) is one per core.
    pub open_threads: usize,
}

/// `open_threads`: threads started to open a local dataset's shards, each
/// indexing one shard at a time; 0 is one per core.
pub const OPEN_THREADS: zephon_core::settings::Range = zephon_core::settings::Range::new(
    0,
    4096,
    "threads started to open a dataset; 0 is one per core",
);

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            seq_len: 1024,
            dtype: TokenDtype::U16,
            columns: None,
            open_threads: 0,
        }
    }
}

impl FormatOptions {
    /// Sets the tokens per sample of flat token files.
    pub fn seq_len(mut self, v: u64) -> Self {
        self.seq_len = v;
        self
    }

    /// Sets the token width of flat token files.
    pub fn dtype(mut self, v: TokenDtype) -> Self {
        self.dtype = v;
        self
    }

    /// Decodes only these Parquet columns.
    pub fn columns<S: Into<String>>(mut self, v: impl IntoIterator<Item = S>) -> Self {
        self.columns = Some(v.into_iter().map(Into::into).collect());
        self
    }

    /// Opens a local dataset's shards on at most `n` threads (0: one per
    /// core, the default; checked against [`OPEN_THREADS`] when the
    /// dataset is opened). One keeps opening on the calling thread.
    ///
    /// ```
    /// use zephon_core::Dataset;
    /// use zephon_storage::DatasetExt;
    /// use zephon_storage::format::FormatOptions;
    /// let dir = std::env::temp_dir().join(format!("zephon-open-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// std::fs::write(dir.join("a.jsonl"), "{\"i\":1}\n").unwrap();
    /// assert!(Dataset::from_path_with("doc", &dir, &FormatOptions::default().open_threads(1)).is_ok());
    /// let err = Dataset::from_path_with("doc", &dir, &FormatOptions::default().open_threads(5000));
    /// assert!(err.unwrap_err().to_string().contains("open_threads"));
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn open_threads(mut self, n: usize) -> Self {
        self.open_threads = n;
        self
    }
}

/// The samples of one shard: how many, and how to decode any of them from the
/// shard's bytes. Built once per shard by [`open_index`] and kept; the bytes
/// may come and go (the cache owns them).
pub trait ShardIndex: Send + Sync + fmt::Debug {
    /// Number of samples.
    fn len(&self) -> u64;

    /// Whether the shard has no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decodes samples `indices` (each `< len()`) from `data`, the bytes this
    /// index was built from, in request order.
    fn decode(&self, data: &Bytes, indices: &[u64]) -> FormatResult<Vec<Record>>;

    /// Decodes the samples `out`'s pointers name (each `< len()`), in
    /// pointer order, into `out`: what a local shard hands `fetch`. The
    /// default decodes them with [`decode`](ShardIndex::decode) and places
    /// each; a format that fills each record where it stays
    /// ([`PointerChunks::next_record`]) saves moving it there.
    fn decode_chunks(&self, data: &Bytes, out: &mut PointerChunks<'_>) -> FormatResult<()> {
        let indices: Vec<u64> = out.pointers().iter().map(|p| p.sample).collect();
        let records = self.decode(data, &indices)?;
        if records.len() != indices.len() {
            return Err(format!(
                "{} records decoded for {} samples",
                records.len(),
                indices.len()
            ));
        }
        for r in records {
            out.push(r);
        }
        Ok(())
    }

    /// Whether decoding costs so little a sample (token views over the
    /// shard's bytes) that a read decodes where it runs: handing the work
    /// to the CPU pool would cost more than the work. The default says no.
    fn cheap_decode(&self) -> bool {
        false
    }

    /// Where sample `i` lies in the shard, `[start, end)`, for formats whose
    /// samples can be read alone by byte range (token files); `None` otherwise.
    fn byte_range(&self, i: u64) -> Option<(u64, u64)> {
        let _ = i;
        None
    }

    /// Decodes sample `i` from just its bytes (see [`byte_range`](ShardIndex::byte_range));
    /// the record may keep a view of them.
    fn decode_range(&self, i: u64, bytes: &Bytes) -> FormatResult<Record> {
        let _ = bytes;
        Err(format!("sample {i} cannot be decoded from a byte range"))
    }

    /// For formats whose samples are decoded in groups (Parquet row
    /// groups), read by blocks: the group sample `i` lies in; `None` for
    /// formats whose samples are read alone ([`byte_range`](ShardIndex::byte_range)).
    fn group_of(&self, i: u64) -> Option<usize> {
        let _ = i;
        None
    }

    /// The byte ranges (sorted) group `g` is decoded from: only the columns
    /// read.
    fn group_ranges(&self, g: usize) -> FormatResult<Vec<(u64, u64)>> {
        Err(format!("group {g}: this format has no groups"))
    }

    /// Decodes samples `indices` (all in group `g`), in request order: from
    /// the group kept in memory, or from `spans` (each span's start and
    /// bytes, covering [`group_ranges`](ShardIndex::group_ranges)).
    /// `Ok(None)` when `spans` is `None` and the group is not in memory.
    fn decode_group(
        &self,
        g: usize,
        spans: Option<Vec<(u64, Bytes)>>,
        indices: &[u64],
    ) -> FormatResult<Option<Vec<Record>>> {
        let _ = (spans, indices);
        Err(format!("group {g}: this format has no groups"))
    }

    /// A warning about how this shard is being read, given once (the next
    /// call says `None`): a Parquet shard whose row groups are decoded again
    /// and again because a shuffle within it reads them at random past the
    /// memory kept for them. The reader logs it naming the dataset and the
    /// shard. The default has none.
    fn take_warning(&self) -> Option<String> {
        None
    }

    /// For formats whose samples are decoded in groups: the sizes of
    /// those groups, as the shard's own metadata gives them (a Parquet
    /// footer), for tools that say what a shuffle within the shard will
    /// cost. `None` for formats without groups (the default).
    fn group_sizes(&self) -> Option<GroupSizes> {
        None
    }
}

/// The groups a shard's samples are decoded in ([`ShardIndex::group_sizes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupSizes {
    /// Number of groups.
    pub groups: u64,
    /// Samples in the largest group.
    pub max_rows: u64,
    /// The uncompressed size of the columns read, all groups together, as
    /// the shard's metadata gives it: about what the shard takes decoded.
    /// Saturates rather than wraps: the metadata is input.
    pub decoded_bytes: u64,
}

/// Logs the warning `index` has about how its shard is read, if any (each
/// is given once), naming the dataset and the shard.
pub(crate) fn warn_once(index: &dyn ShardIndex, dataset: &str, shard: &str) {
    if let Some(w) = index.take_warning() {
        tracing::warn!(dataset, shard, "{w}");
    }
}

/// The index of a shard read by byte range, built without its bytes: from
/// its size (flat token files) or its sidecar (Megatron). `None` for
/// formats that need the shard itself.
pub fn open_range_index(
    spec: &FormatSpec,
    bytes: u64,
    sidecar: Option<&Bytes>,
) -> Option<FormatResult<Arc<dyn ShardIndex>>> {
    match spec {
        FormatSpec::Tokens { dtype, seq_len } => Some(
            tokens::FlatTokens::from_size(bytes, *dtype, *seq_len)
                .map(|t| Arc::new(t) as Arc<dyn ShardIndex>),
        ),
        FormatSpec::Megatron => Some(match sidecar {
            Some(idx) => tokens::MegatronIndex::open(idx.clone(), bytes)
                .map(|t| Arc::new(t) as Arc<dyn ShardIndex>),
            None => Err("a Megatron shard needs its .idx file".into()),
        }),
        _ => None,
    }
}

/// [`open_index`] for a shard whose bytes are kept as long as its index
/// (a memory-mapped local shard, or one decoded into memory and kept):
/// tables the shard holds (MDS offsets) are read where they lie rather
/// than copied.
pub fn open_index_in_place(
    spec: &FormatSpec,
    data: &Bytes,
    sidecar: Option<&Bytes>,
) -> FormatResult<Arc<dyn ShardIndex>> {
    match spec {
        FormatSpec::Mds { columns } => Ok(Arc::new(mds::MdsIndex::open_in_place(data, columns)?)),
        _ => open_index(spec, data, sidecar),
    }
}

/// Builds the index of a shard of format `spec` from its bytes; `sidecar` is
/// the Megatron `.idx` file.
pub fn open_index(
    spec: &FormatSpec,
    data: &Bytes,
    sidecar: Option<&Bytes>,
) -> FormatResult<Arc<dyn ShardIndex>> {
    Ok(match spec {
        FormatSpec::Jsonl => Arc::new(jsonl::JsonlIndex(
            jsonl::LineIndex::build(data).map_err(|e| e.to_string())?,
        )),
        FormatSpec::Tokens { dtype, seq_len } => {
            Arc::new(tokens::FlatTokens::open(data, *dtype, *seq_len)?)
        }
        FormatSpec::Megatron => {
            let idx = sidecar.ok_or("a Megatron shard needs its .idx file")?;
            Arc::new(tokens::MegatronIndex::open(idx.clone(), data.len() as u64)?)
        }
        FormatSpec::Mds { columns } => Arc::new(mds::MdsIndex::open(data, columns)?),
        FormatSpec::WebDataset => Arc::new(webdataset::TarIndex::open(data)?),
        #[cfg(feature = "parquet")]
        FormatSpec::Parquet { columns } => {
            Arc::new(parquet::ParquetIndex::open(data, columns.as_deref())?)
        }
        #[cfg(not(feature = "parquet"))]
        FormatSpec::Parquet { .. } => {
            return Err(
                "Parquet support is not compiled in (enable the `parquet` feature of zephon-storage)"
                    .into(),
            );
        }
    })
}
