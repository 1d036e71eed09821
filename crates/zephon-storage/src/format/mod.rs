//! Shard formats.

pub mod compression;
pub mod jsonl;
