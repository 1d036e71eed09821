//! Shards and datasets over the formats, the sources and the caches: the
//! layer that combines them.

pub(crate) mod blocked;
pub mod shard;

pub use shard::FormatShard;
