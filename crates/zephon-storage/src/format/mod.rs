//! Shard formats.

pub mod jsonl;
