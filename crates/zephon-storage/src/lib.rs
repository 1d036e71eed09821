//! # zephon-storage
//!
//! Where Zephon's bytes come from: datasets on local disk (and, through
//! opendal, object stores), shard formats with their indexes, and the shard cache.
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
#![warn(missing_docs)]

pub mod format;
pub mod local;

pub use local::{DatasetExt, LocalJsonlShard};
