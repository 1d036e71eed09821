#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod adapter;
pub mod checkpoint;
pub mod context;
pub mod cut;
pub mod dataset;
pub mod error;
pub mod ext;
pub mod hash;
pub mod input;
pub mod knob;
pub mod obs;
pub mod ops;
pub mod output;
pub mod pointer;
pub mod record;
pub mod runner;
pub mod settings;
pub mod tune;
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
