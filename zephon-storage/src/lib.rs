#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

// The modules are layers, each importing only those before it: the leaves
// (errors, fingerprints, metrics, roots), the formats, the manifest and
// options, the sources of bytes, the caches, the datasets, then writing and
// prefetch. The modules of the public paths are re-exported below.
mod error;
mod fingerprint;
pub mod metrics;
mod root;

pub mod format;
pub mod manifest;
pub mod options;

mod source;

pub mod cache;

mod dataset;

pub mod prefetch;
pub mod write;

pub use cache::blocks;
pub use dataset::{local, open, remote, scan};
pub use source::backend;

pub use cache::ShardCache;
pub use dataset::FormatShard;
pub use error::escape_controls;
pub use format::{FormatOptions, FormatSpec};
pub use local::{DatasetExt, LocalJsonlShard};
pub use manifest::{Manifest, ManifestError, ShardEntry};
pub use metrics::{CacheStats, PrefetchStats};
pub use open::{RemoteDataset, UriDatasetExt};
pub use options::{CacheOptions, StorageOptions};
pub use prefetch::{Prefetch, PrefetchExt};
pub use remote::{CachedShard, RangeShard};
pub use source::backend::{Backend, BackendStats};
