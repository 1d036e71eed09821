#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod backend;
pub mod blocks;
pub mod cache;
mod compressed;
mod download;
mod fingerprint;
pub mod format;
pub mod local;
pub mod manifest;
pub mod metrics;
pub mod open;
pub mod options;
pub mod prefetch;
mod ranges;
pub mod remote;
mod root;
pub mod scan;
mod spill;
pub mod write;

pub use backend::{Backend, BackendStats};
pub use cache::ShardCache;
pub use download::escape_controls;
pub use format::{FormatOptions, FormatSpec};
pub use local::{DatasetExt, LocalJsonlShard};
pub use manifest::{Manifest, ManifestError, ShardEntry};
pub use metrics::{CacheStats, PrefetchStats};
pub use open::{RemoteDataset, UriDatasetExt};
pub use options::{CacheOptions, StorageOptions};
pub use prefetch::{Prefetch, PrefetchExt};
pub use remote::{CachedShard, RangeShard};
