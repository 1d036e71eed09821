#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod blocks;
pub mod cache;
mod compressed;
mod dataset;
mod error;
mod fingerprint;
pub mod format;
pub mod local;
pub mod manifest;
pub mod metrics;
pub mod open;
pub mod options;
pub mod prefetch;
pub mod remote;
mod root;
pub mod scan;
mod source;
mod spill;
pub mod write;

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
pub use source::backend;
pub use source::backend::{Backend, BackendStats};
