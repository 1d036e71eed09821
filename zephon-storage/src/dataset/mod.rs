//! Shards and datasets over the formats, the sources and the caches: the
//! layer that combines them (local folders, remote datasets through the
//! shard cache, listings and scans, opening a URI).

pub(crate) mod blocked;
pub mod local;
pub mod open;
pub mod remote;
pub mod scan;
pub mod shard;

pub use shard::FormatShard;
