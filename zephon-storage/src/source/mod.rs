//! Bytes for a URI or a byte range: the object stores ([`backend`]), reads
//! of a shard's byte ranges, and whole-shard downloads, checked against
//! their manifest entries, a compressed one decoded into an unnamed file.

pub mod backend;
pub(crate) mod compressed;
pub(crate) mod download;
pub(crate) mod ranges;
pub(crate) mod spill;
