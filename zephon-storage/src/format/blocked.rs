//! MDS, Parquet and WebDataset shards read by blocks of the shard cache:
//! what each format needs of the blocks (the reads are `dataset::blocked`).
//!
//! Neither format needs the whole shard to read a sample. An MDS shard
//! starts with its offset table: read through the blocks covering it, it
//! gives each sample's byte range, and a read fetches the blocks of those
//! ranges. A Parquet shard ends with its footer: read through the blocks
//! covering it, it gives each row group's column chunks, and a read fetches
//! the blocks of the projected chunks of the row groups its samples lie in,
//! one row group at a time, then decodes that group as a local read does
//! (kept in memory per shard, bounded; see [`parquet`](super::parquet)).
//!
//! A WebDataset tar has no table: its members are found by walking every
//! header, so it is indexed by one pass over all its blocks in order (the
//! whole tar is downloaded once, into the cache, a few blocks in memory at
//! a time); then each sample is one byte range, read like an MDS sample.

use super::{FormatSpec, ShardIndex};
#[cfg(feature = "parquet")]
use bytes::Bytes;
#[cfg(feature = "parquet")]
use std::sync::Arc;

/// Whether shards of `spec` can be read by blocks, their index opened from
/// the blocks and grouped samples read group by group (MDS, Parquet,
/// WebDataset; the shard side is `dataset::blocked`), beyond the formats read sample by sample
/// from their size or sidecar (token files, Megatron).
pub fn indexed_by_blocks(spec: &FormatSpec) -> bool {
    matches!(spec, FormatSpec::Mds { .. } | FormatSpec::WebDataset)
        || matches!(spec, FormatSpec::Parquet { .. }) && cfg!(feature = "parquet")
}

/// The byte ranges that reading samples `indices` touches, in the order
/// they would be read: each sample's own range, or the ranges of the group
/// it lies in (once per group). Samples outside the shard are skipped.
pub fn sample_ranges(index: &dyn ShardIndex, indices: &[u64]) -> Vec<(u64, u64)> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for &i in indices {
        match index.group_of(i) {
            Some(g) if seen.insert(g) => out.extend(index.group_ranges(g).unwrap_or_default()),
            Some(_) => {}
            None => out.extend(index.byte_range(i)),
        }
    }
    out
}

/// The byte ranges of every group of the shard, in file order (of a
/// format without groups, none), stopping at a group whose ranges the
/// footer gets wrong (its read reports it).
pub fn all_group_ranges(index: &dyn ShardIndex) -> Vec<(u64, u64)> {
    (0..)
        .map_while(|g| index.group_ranges(g).ok())
        .flatten()
        .collect()
}

/// Parts of a file fetched so far, as the `parquet` crate reads files: a
/// read outside them is an error, never a silent short read.
#[cfg(feature = "parquet")]
#[derive(Clone, Debug)]
pub struct Spans {
    len: u64,
    spans: Arc<Vec<(u64, Bytes)>>,
}

#[cfg(feature = "parquet")]
impl Spans {
    /// The parts `spans` (each its start and bytes, sorted by start) of a
    /// file of `len` bytes.
    pub fn new(len: u64, spans: Vec<(u64, Bytes)>) -> Self {
        Spans {
            len,
            spans: Arc::new(spans),
        }
    }

    /// The fetched bytes from `start` to the end of the span holding it.
    fn from(&self, start: u64) -> parquet::errors::Result<Bytes> {
        let k = self.spans.partition_point(|(s, _)| *s <= start);
        k.checked_sub(1)
            .map(|k| &self.spans[k])
            .filter(|(s, b)| start - s <= b.len() as u64)
            .map(|(s, b)| b.slice((start - s) as usize..))
            .ok_or_else(|| {
                parquet::errors::ParquetError::General(format!(
                    "offset {start} lies outside the bytes read for this row group"
                ))
            })
    }
}

#[cfg(feature = "parquet")]
impl parquet::file::reader::Length for Spans {
    fn len(&self) -> u64 {
        self.len
    }
}

#[cfg(feature = "parquet")]
impl parquet::file::reader::ChunkReader for Spans {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        Ok(self.from(start)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let b = self.from(start)?;
        if b.len() < length {
            return Err(parquet::errors::ParquetError::General(format!(
                "bytes {start}..{} lie outside the bytes read for this row group",
                start + length as u64
            )));
        }
        Ok(b.slice(..length))
    }
}

#[cfg(all(test, feature = "parquet"))]
mod tests {
    use super::*;
    use parquet::file::reader::ChunkReader;

    #[test]
    fn spans_serve_only_what_was_fetched() {
        let s = Spans::new(
            100,
            vec![
                (10, Bytes::from_static(b"abcd")),
                (50, Bytes::from_static(b"xyz")),
            ],
        );
        assert_eq!(s.get_bytes(11, 2).unwrap(), Bytes::from_static(b"bc"));
        assert_eq!(s.get_bytes(50, 3).unwrap(), Bytes::from_static(b"xyz"));
        assert!(s.get_bytes(12, 4).is_err());
        assert!(s.get_bytes(5, 1).is_err());
        assert!(s.get_bytes(30, 1).is_err());
    }
}
