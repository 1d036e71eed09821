//! # zephon-storage
//!
//! Where Zephon's bytes come from: datasets on local disk and, through
//! opendal, in object stores (`s3://`), on web servers (`http(s)://`) and in
//! memory (`memory://`); the block cache of remote shards (a foyer memory
//! tier and a disk tier the processes of a node share); compressed
//! shards; the `index.json` manifest; shard prefetch and byte-range reads.
//!
//! Shard formats ([`format`](mod@format)): JSONL, Parquet (feature `parquet`, on by
//! default), Megatron `.bin`/`.idx` and flat token files, MosaicML MDS and
//! WebDataset tars, told apart by their file names or manifest.
//!
//! ```
//! use zephon_core::{Dataset, PipelineExt, Runner, WorkSource};
//! use zephon_storage::DatasetExt;
//! let dir = std::env::temp_dir().join(format!("zephon-crate-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! std::fs::write(dir.join("0.jsonl"), "{\"text\":\"a\"}\n{\"text\":\"b\"}\n{\"text\":\"c\"}\n").unwrap();
//! let ws = WorkSource::builder().dataset(Dataset::from_path("docs", &dir)?, 1.0).build()?;
//! let n: usize = ws.stream().fetch(2).batch(2).into_blocking_iter(Runner::Inline)?
//!     .map(|b| b.unwrap().len()).sum();
//! assert_eq!(n, 3);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), zephon_core::Error>(())
//! ```
//!
//! Remote datasets open with [`UriDatasetExt::from_uri`] (or
//! [`RemoteDataset::open`] for handles on the cache and counters), and a
//! pointer stream warms shards ahead of `fetch` with [`PrefetchExt::prefetch`].
#![warn(missing_docs)]

pub mod backend;
pub mod blocks;
pub mod cache;
mod compressed;
pub mod download;
pub mod fingerprint;
pub mod format;
pub mod local;
pub mod manifest;
pub mod metrics;
pub mod open;
pub mod options;
pub mod prefetch;
pub mod ranges;
pub mod remote;
pub mod root;
pub mod scan;
mod spill;

pub use backend::{Backend, BackendStats};
pub use cache::ShardCache;
pub use format::{FormatOptions, FormatSpec};
pub use local::{DatasetExt, LocalJsonlShard};
pub use manifest::{Manifest, ManifestError, ShardEntry};
pub use metrics::{CacheStats, PrefetchStats};
pub use open::{RemoteDataset, UriDatasetExt};
pub use options::{CacheOptions, StorageOptions};
pub use prefetch::{Prefetch, PrefetchExt};
pub use remote::{CachedShard, RangeShard};
