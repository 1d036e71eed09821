//! # zephon-core
//!
//! The stream engine of Zephon, a data loader for training foundation models:
//! sample pointers and records, datasets and the [`Shard`] trait, the
//! [`WorkSource`] that decides what to train on (mixture, shuffles, passes,
//! lanes), the stream operators that turn pointers into batches, and
//! [`checkpoint`]: checkpoint and restore, elastic across rank counts.
//!
//! Its promise: execution settings (parallelism, runner, queue sizes, prefetch
//! depths, the number of ranks) are performance knobs only. They never change
//! which samples arrive, in which order.
//!
//! ```
//! use zephon_core::{Dataset, PipelineExt, Record, Runner, ShuffleMode, WorkSource};
//!
//! // Two in-memory datasets mixed 70/30, four lanes, this process is rank 0 of 1.
//! let web = Dataset::in_memory("web", vec![(0..700).map(|i| Record::new().with("id", i as i64)).collect()])?;
//! let code = Dataset::in_memory("code", vec![(0..300).map(|i| Record::new().with("id", i as i64)).collect()])?;
//! let ws = WorkSource::builder()
//!     .dataset(web, 0.7)
//!     .dataset(code, 0.3)
//!     .seed(42)
//!     .canonical_lanes(4)
//!     .build()?;
//! let lanes = ws.owned_lanes();
//! let batches = ws
//!     .stream()
//!     .fetch(4)
//!     .map_par(|r| Ok(r), 2)
//!     .shuffle(64, ShuffleMode::Reservoir, 42)
//!     .batch(25)
//!     .lane_mux(lanes)
//!     .prefetch_batches(4);
//! let mut total = 0;
//! for batch in batches.into_blocking_iter(Runner::threads())? {
//!     total += batch?.len();
//! }
//! assert_eq!(total, 1000);
//! # Ok::<(), zephon_core::Error>(())
//! ```
#![warn(missing_docs)]

mod adapter;
pub mod checkpoint;
pub mod context;
pub mod dataset;
pub mod error;
pub mod ext;
pub mod hash;
pub mod input;
pub mod obs;
pub mod ops;
pub mod output;
pub mod pointer;
pub mod record;
pub mod runner;
pub mod settings;
pub mod work;

pub use context::{PipelineContext, in_context};
pub use dataset::{Catalog, Dataset, InMemoryShard, Shard};
pub use error::{BoxError, Error, Result};
pub use ext::{PipelineExt, RecordBatch};
pub use obs::{Explain, Observer, Tracking};
pub use ops::batch::{Batch, Batcher};
pub use ops::fetch::Fetch;
pub use ops::filter::{Filter, FilterMap};
pub use ops::lane_mux::LaneMux;
pub use ops::map_par::MapPar;
pub use ops::prefetch_batches::PrefetchBatches;
pub use ops::shuffle::{Shuffle, ShuffleMode};
pub use pointer::{Identity, LaneId, Laned, SamplePtr};
pub use record::{Lineage, Record, Value};
pub use runner::{BlockingIter, Runner};
pub use work::{
    BlockShuffle, Catalogued, Exhaustion, LaneConfig, Ownership, PointerStream, WorkConfig,
    WorkSource, WorkSourceBuilder, WorkState,
};
pub use zephon_metrics as metrics;
