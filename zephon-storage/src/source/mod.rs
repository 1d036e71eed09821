//! Bytes for a URI or a byte range: the object stores ([`backend`]), reads
//! of a shard's byte ranges, and whole-shard downloads, checked against
//! their manifest entries.

pub mod backend;
pub(crate) mod download;
pub(crate) mod ranges;
